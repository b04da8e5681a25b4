/* gpu.h -- the GPU side of the runtime (built only when the CUDA toolkit is found): the stand-in
 * model of runtime.h on a GPU (gpu_model.cu: cuBLAS GEMMs and small kernels, float32 for
 * equivalence with the CPU backend, or bf16 inputs with float32 accumulation for speed), and the
 * cuda and nccl backends of octo-run (exec_gpu.c). Streams are passed as void * (a
 * cudaStream_t), so that C files need no CUDA header. docs/runtime.md, "GPU backends". */
#ifndef OCTO_GPU_H
#define OCTO_GPU_H

#include <stdbool.h>
#include <stddef.h>

#include "runtime.h"

/* ---- The stand-in model on a GPU ------------------------------------------------------------ */

/* The model of one rank on one GPU: the same layers, dimensions, initialization, data, loss,
 * split backward and optimizer as rt_model (runtime.h), with parameters, gradients, optimizer
 * state and the per-(stage, microbatch) saved state in device memory. Opaque. */
typedef struct rg_model rg_model;

/* Build the model of stream s on CUDA device 'device' (dimensions only). With bf16, the GEMMs
 * take bf16 copies of their inputs and accumulate in float32 (speed); otherwise everything is
 * float32 with TF32 disabled (equivalence with the CPU backend). NULL with the reason in err
 * (no such device, out of memory, the rt_model_new errors). */
rg_model *rg_model_new(const be_stream *s, const rt_opts *o, int device, bool bf16, strbuf *err);
void rg_model_free(rg_model *m);

/* Initialize stage st's parameters: the same values as rt_model_init_stage (generated on the host
 * with the same generator, then copied), gradients and optimizer state zero. Idempotent. */
void rg_model_init_stage(rg_model *m, int st);

/* rt_tensor_floats of the same stream and options. */
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

/* Copy stage st's gradients (rg_stage_grads order, which is rt_stage_grads order) to host
 * memory 'out' of n floats, synchronously. Returns 0, or -1 when n differs. */
int rg_stage_grads_to_host(rg_model *m, int st, float *out, size_t n);

/* ---- Layer profiling ------------------------------------------------------------------------ */

/* Measured costs of one layer kind at full size (scale 1) on this GPU. */
typedef struct rg_layer_profile {
  const char *kind;   /* layer kind */
  int layer;          /* index of the stream's layer measured */
  double f, b, w;     /* median seconds of its stand-in's forward, input-gradient and
                         weight-gradient on one microbatch, after warm-up */
  double peak_bytes;  /* peak device memory of the measurement */
} rg_layer_profile;

/* Measure, for the first layer of each kind of stream s, the stand-in's F, B and W at full size
 * (bf16 GEMMs with float32 accumulation), 'repeats' times after 'warmup' runs, on CUDA device
 * 'device'. Fills *out (free it) with one entry per kind; returns the count, or -1 with err. */
int rg_profile(const be_stream *s, int device, int warmup, int repeats, rg_layer_profile **out,
               strbuf *err);

#endif
