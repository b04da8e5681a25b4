/* gpu.h -- the GPU side of the runtime (built only when the CUDA toolkit is found): a GPU as the
 * layer kernels' device (kernels_gpu.cu), on which the model of runtime.h runs with its real
 * layers; and the cuda and nccl backends of octo-run with the cuda backend's profiler
 * (exec_gpu.c). Streams are passed as void * (a cudaStream_t), so that C files need no
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

/* ---- Backends (exec_gpu.c) ------------------------------------------------------------------ */

/* The cuda backend: every rank of every replica in this process on CUDA device 0 (stats: nranks
 * x replicas entries, as rt_run_threads). With bf16, the GEMMs run in bf16 with float32
 * accumulation. Returns 0, or -1 with the failure in stats[0] (no device, out of memory, a
 * watchdog timeout naming the rank and instruction). */
int rt_run_cuda(const be_stream *s, const rt_opts *mo, const rt_run_opts *o, bool bf16,
                rt_rank_stats *stats);

/* octo-run --profile on the cuda backend: every layer of s timed as the model runs it on GPU 0
 * (the kernels of kernels.h on the GPU, at mo's scale, F, B and W apart, the median of several
 * repetitions after a warm-up: rt_profile_layers), the optimizer step's rate, and a
 * device-to-device copy as the link (what a message is on one GPU); the profile JSON of
 * rt_profile_json with backend "cuda" into json. Returns 0, or -1 with the reason in err (no GPU,
 * the model cannot be built, a CUDA failure). */
int rt_profile_cuda(const be_stream *s, const rt_opts *mo, bool bf16, strbuf *json, strbuf *err);

/* The nccl backend under mpirun (as rt_mpi_run, between rt_mpi_check and rt_mpi_close: see
 * rt_mpi_open): one process per GPU, NCCL point-to-point groups and all-reduce, a watchdog that
 * aborts the communicators and the job (rt_mpi_abort) on a timeout or an NCCL error. Returns
 * the run's status, the same on every process. Pre: rt_mpi_check returned RT_STATUS_OK for s.
 * Defined when NCCL and MPI were found (OCTO_HAVE_NCCL). */
rt_status rt_nccl_run(const be_stream *s, const char *path, const rt_opts *mo,
                      const rt_run_opts *o, bool bf16, const char *trace_path);

#endif
