/* gpu.h -- the GPU side of the runtime (built only when the CUDA toolkit is found): a GPU as the
 * layer kernels' device (kernels_gpu.cu), on which the model of runtime.h runs with its real
 * layers; the GEMM profiler of layer kinds (gpu_model.cu); and the cuda and nccl backends of
 * octo-run (exec_gpu.c). Streams are passed as void * (a cudaStream_t), so that C files need no
 * CUDA header. docs/runtime.md, "GPU backends". */
#ifndef OCTO_GPU_H
#define OCTO_GPU_H

#include <stdbool.h>
#include <stddef.h>

#include "kdev.h"
#include "runtime.h"

/* ---- A GPU as the layer kernels' device (kernels_gpu.cu) ------------------------------------ */

/* One GPU and stream on which the kernels of kernels.h run once rg_dev_kernels(d) is bound with
 * rt_dev_bind (kdev.h): bodies as CUDA kernels, rt_gemm as cuBLAS (float32 with TF32 off; with
 * bf16, bf16 copies of both inputs and float32 accumulation). Use from one host thread at a time,
 * with the device current (cudaSetDevice) on that thread. The first error is recorded
 * (rg_dev_error) and makes later work a no-op. */
typedef struct rg_dev rg_dev;

/* Whether CUDA device 'device' is visible; false with the reason appended to err (when set):
 * "no CUDA device is visible (...)", "CUDA device 3: no such device (1 visible)". */
bool rg_device_check(int device, strbuf *err);

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
  double f, b, w;     /* median seconds of its GEMMs' forward, input-gradient and
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
