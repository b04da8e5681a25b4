/* gpu.h -- the GPU side of the runtime (built only when the CUDA toolkit is found): the stand-in
 * model of runtime.h on a GPU (gpu_model.cu: cuBLAS GEMMs and small kernels, float32 for
 * equivalence with the CPU backend, or bf16 inputs with float32 accumulation for speed), and the
 * cuda and nccl backends of octo-run (exec_gpu.c). Streams are passed as void * (a
 * cudaStream_t), so that C files need no CUDA header. docs/runtime.md, "GPU backends". */
#ifndef OCTO_GPU_H
#define OCTO_GPU_H

#include <stdbool.h>
#include <stddef.h>

#include "kdev.h"
#include "standin.h"

/* ---- The stand-in model on a GPU ------------------------------------------------------------ */

/* The model of one rank on one GPU: the same layers, dimensions, initialization, data, loss,
 * split backward and optimizer as rt_si_model (runtime.h), with parameters, gradients, optimizer
 * state and the per-(stage, microbatch) saved state in device memory. Opaque. */
typedef struct rg_model rg_model;

/* Use from the host: one thread at a time per model. Operations that run GEMMs share the model's
 * cuBLAS handle and bf16 scratch, so two of them must not run at the same time on two streams
 * (enqueue a model's compute on one stream, or order the streams with events); the state saved
 * by rg_forward for (stage, mb) is allocated in stream order on F's stream and released in
 * stream order on W's stream, and B and W must be ordered after F by the caller. A CUDA or
 * cuBLAS failure is recorded (rg_model_error) and turns every later operation into a no-op;
 * nothing aborts or prints. Operations make the model's device current and clear the calling
 * thread's CUDA last-error state (cudaGetLastError). */

/* Build the model of stream s on CUDA device 'device' (dimensions only). With bf16, the GEMMs
 * take bf16 copies of their inputs and accumulate in float32 (speed); otherwise everything is
 * float32 with TF32 disabled (equivalence with the CPU backend). NULL with the reason in err
 * ("no CUDA device is visible (...)", no such device, out of memory, the rt_si_new errors). */
rg_model *rg_model_new(const be_stream *s, const rt_opts *o, int device, bool bf16, strbuf *err);
/* Synchronizes the device, then frees everything (NULL is fine). */
void rg_model_free(rg_model *m);

/* The first CUDA or cuBLAS error an operation of m met (operations enqueue and never stop the
 * program), or NULL. */
const char *rg_model_error(const rg_model *m);

/* Initialize stage st's parameters: the same values as rt_si_init_stage (generated on the host
 * with the same generator, then copied), gradients and optimizer state zero. Idempotent. */
void rg_model_init_stage(rg_model *m, int st);

/* rt_si_tensor_floats of the same stream and options. */
size_t rg_tensor_floats(const rg_model *m, be_tensor_kind k, int stage);

/* The operations of runtime.h, enqueued on CUDA stream 'stream' (nothing waits on the host);
 * pointers are device memory of at least rg_tensor_floats floats. */
void rg_load(rg_model *m, void *stream, int step, int replica, int mb, float *tokens);
void rg_forward(rg_model *m, void *stream, int st, int mb, const float *in, float *out);
/* Adds the microbatch's mean loss to *loss_acc (device memory, one float). */
void rg_loss(rg_model *m, void *stream, int step, int replica, int mb, const float *out,
             float *grad, float *loss_acc);
void rg_backward_input(rg_model *m, void *stream, int st, int mb, const float *grad, float *dx);
void rg_backward_weight(rg_model *m, void *stream, int st, int mb);
/* Stage st's gradients as one contiguous device array of *n floats (for the all-reduce). */
float *rg_stage_grads(rg_model *m, int st, size_t *n);
void rg_step(rg_model *m, void *stream, int st);

/* Copy stage st's gradients (rg_stage_grads order, which is rt_si_stage_grads order) to host
 * memory 'out' of n floats after synchronizing the device. Returns 0, or -1 when n differs or
 * the copy failed (rg_model_error says why). */
int rg_stage_grads_to_host(rg_model *m, int st, float *out, size_t n);

/* ---- A GPU as the layer kernels' device (kernels_gpu.cu) ------------------------------------ */

/* One GPU and stream on which the kernels of kernels.h run once rg_dev_kernels(d) is bound with
 * rt_dev_bind (kdev.h): bodies as CUDA kernels, rt_gemm as cuBLAS (float32 with TF32 off; with
 * bf16, bf16 copies of both inputs and float32 accumulation). Use from one host thread at a time,
 * with the device current (cudaSetDevice) on that thread. The first error is recorded
 * (rg_dev_error) and makes later work a no-op. */
typedef struct rg_dev rg_dev;

/* The device on CUDA device 'device', enqueuing on 'stream' (a cudaStream_t; NULL: a stream of its
 * own). NULL with the reason in err (no device, no such device, a CUDA or cuBLAS failure). */
rg_dev *rg_dev_new(int device, void *stream, bool bf16, strbuf *err);
/* Synchronizes its stream, then frees it (NULL is fine). */
void rg_dev_free(rg_dev *d);
/* What rt_dev_bind takes. */
const rt_dev *rg_dev_kernels(rg_dev *d);
/* The first CUDA or cuBLAS error of d's work ("what: detail"), or NULL. */
const char *rg_dev_error(const rg_dev *d);
/* n zeroed device floats (freed with rg_dev_release), NULL on failure (recorded). */
float *rg_dev_alloc(rg_dev *d, size_t n);
/* Waits for d's stream, then frees p (NULL is fine). */
void rg_dev_release(rg_dev *d, float *p);
/* Copy n floats host -> device (put) or device -> host (get), waiting for the copy. Returns 0, or
 * -1 with the error recorded. */
int rg_dev_put(rg_dev *d, float *dst, const float *src, size_t n);
int rg_dev_get(rg_dev *d, float *dst, const float *src, size_t n);

/* ---- Layer profiling ------------------------------------------------------------------------ */

/* Measured costs of one layer kind at full size (scale 1) on this GPU. */
typedef struct rg_layer_profile {
  const char *kind;   /* layer kind (the stream's string) */
  int layer;          /* index of the stream's layer measured */
  double f, b, w;     /* median seconds of its stand-in's forward, input-gradient and
                         weight-gradient on one microbatch, after warm-up */
  double peak_bytes;  /* peak device memory of the measurement */
} rg_layer_profile;

/* Measure, for the first layer of each kind of stream s, the GEMMs its real layer performs at
 * full size (scale 1; dimensions from the layer's parameters, else the stream's first of that
 * name; T = micro_batch x seq tokens), bf16 inputs with float32 accumulation, 'repeats' times
 * after 'warmup' runs, on CUDA device 'device': attention (QKV projection, per-head scores and
 * weighted values as batched GEMMs without the causal saving, output projection), mlp (up, gate
 * when gated, down), moe (router and the experts' MLP on top_k + shared_experts token copies),
 * mamba2 and kinds with "expand" (in-projection to 2 x expand x hidden, out-projection), vit
 * (attention and MLP over its tokens), lm_head (projection to the vocabulary), embedding (a
 * gather of T rows for F, a scatter-add into the table's gradient for W, no B), other kinds
 * one hidden x hidden projection. F: the forward GEMMs (bf16 outputs); B: their input
 * gradients (bf16 outputs); W: their weight gradients (accumulated in float32). Custom layers
 * are not measured. Fills *out (free it; kind points into s) with one entry per kind; returns
 * the count, or -1 with the reason in err (no such device, out of memory, a layer without
 * hidden or vocab). */
int rg_profile(const be_stream *s, int device, int warmup, int repeats, rg_layer_profile **out,
               strbuf *err);

/* Append the profile file of the n measurements p (docs/cost-model.md, "Profile files":
 * format, version 1, device when device_type is not NULL, the stream's micro_batch and seq,
 * tensor 1, dtype bf16, and per kind f_ms, b_ms and w_ms) to out. Plain C (gpu_profile.c),
 * built with or without CUDA. Returns 0, or -1 (out untouched) when an entry has no kind, a
 * kind twice, or a time that is negative or not finite. */
int rg_profile_json(const be_stream *s, const rg_layer_profile *p, int n, const char *device_type,
                    strbuf *out);

/* ---- Backends (exec_gpu.c) ------------------------------------------------------------------ */

/* The cuda backend: every rank of every replica in this process on CUDA device 0 (stats: nranks
 * x replicas entries, as rt_run_threads). With bf16, the GEMMs run in bf16 with float32
 * accumulation. Returns 0, or -1 with the failure in stats[0] (no device, out of memory, a
 * watchdog timeout naming the rank and instruction). */
int rt_run_cuda(const be_stream *s, const rt_opts *mo, const rt_run_opts *o, bool bf16,
                rt_rank_stats *stats);

/* The nccl backend, for octo-run's main under mpirun (as rt_main_mpi): one process per GPU,
 * NCCL point-to-point groups and all-reduce, a watchdog that aborts the communicators and the
 * job on a timeout or an NCCL error. Defined when NCCL and MPI were found (OCTO_HAVE_NCCL). */
int rt_main_nccl(int *argc, char ***argv, const char *path, const rt_opts *mo,
                 const rt_run_opts *o, bool bf16, const char *trace_path);

#endif
