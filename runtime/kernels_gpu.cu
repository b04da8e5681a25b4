/* kernels_gpu.cu -- a GPU as the layer kernels' device (kdev.h; API in gpu.h): every body of
 * bodies.def becomes a CUDA kernel of one thread per index, launched on the device's stream;
 * rt_gemm becomes cuBLAS in row-major form (float32 with TF32 off, or bf16 copies of the inputs
 * with float32 accumulation); copies, zeroing and scratch are stream-ordered. The first CUDA or
 * cuBLAS error is recorded and turns every later operation into a no-op (to_host then yields
 * zeros); nothing aborts or prints. Kept C-like; rg_dev_* have C linkage (gpu.h). */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

extern "C" {
#include "gpu.h"
}
#include "kbodies.h"

/* Threads per block of a body's launch (bodies loop inside a thread: keep registers in reach). */
#define KG_THREADS 128

/* A GPU device of the kernels. */
struct rg_dev {
  rt_dev dev;            /* what rt_dev_bind takes: kg_ops and this struct */
  int device;            /* CUDA device number */
  cudaStream_t stream;   /* where everything is enqueued */
  bool own_stream;       /* created here (destroyed with the device) */
  cublasHandle_t blas;   /* bound to stream */
  bool bf16;             /* GEMMs on bf16 copies of their inputs */
  char err[256];         /* the first error, "" while none */
};

/* Record the first error of d: "WHAT: detail". Returns false (for chaining). */
static bool kg_fail(rg_dev *d, const char *fmt, ...) {
  if (d->err[0]) return false;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(d->err, sizeof d->err, fmt, ap);
  va_end(ap);
  return false;
}

/* Check a CUDA result; false (recorded) on failure. */
static bool kg_cuda(rg_dev *d, cudaError_t e, const char *what) {
  if (e == cudaSuccess) return true;
  return kg_fail(d, "%s: %s", what, cudaGetErrorString(e));
}

/* Check a cuBLAS result; false (recorded) on failure. */
static bool kg_blas(rg_dev *d, cublasStatus_t s, const char *what) {
  if (s == CUBLAS_STATUS_SUCCESS) return true;
  return kg_fail(d, "%s: %s", what, cublasGetStatusString(s));
}

/* ---- Bodies ------------------------------------------------------------------------------- */

/* One kernel per body, one thread per index, and its launcher. */
#define RT_BODY(name)                                                                              \
  __global__ void kg_body_##name(rt_b_##name##_a a, long n) {                                      \
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;                                          \
    if (i < n) rt_b_##name(&a, i);                                                                 \
  }                                                                                                \
  static void kg_launch_##name(const void *args, long n, cudaStream_t s) {                         \
    unsigned blocks = (unsigned)((n + KG_THREADS - 1) / KG_THREADS);                               \
    kg_body_##name<<<blocks, KG_THREADS, 0, s>>>(*(const rt_b_##name##_a *)args, n);               \
  }
#include "bodies.def"
#undef RT_BODY

/* The launchers, indexed by rt_body_id. */
static void (*const kg_launch[RT_B_COUNT])(const void *, long, cudaStream_t) = {
#define RT_BODY(name) kg_launch_##name,
#include "bodies.def"
#undef RT_BODY
};

static void kg_run(void *ctx, rt_body_id id, long n, const void *args) {
  rg_dev *d = (rg_dev *)ctx;
  if (d->err[0] || n <= 0) return;
  kg_launch[id](args, n, d->stream);
  kg_cuda(d, cudaGetLastError(), "body launch");
}

/* ---- GEMM ----------------------------------------------------------------------------------- */

/* C[r][c] = beta * C[r][c] for an m x n row-major block of stride ldc (a GEMM with k = 0). */
__global__ void kg_scale(float *C, int m, int n, int ldc, float beta) {
  long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (long)m * n) return;
  float *c = C + (size_t)(i / n) * ldc + i % n;
  *c = beta == 0.0f ? 0.0f : beta * *c;
}

/* out[i] = bf16(in[i]) for i < n. */
__global__ void kg_to_bf16(const float *in, __nv_bfloat16 *out, size_t n) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2bfloat16(in[i]);
}

/* A bf16 copy of the rows x cols matrix a of row stride ld (the whole strided span), in
 * stream-ordered scratch; NULL (recorded) on failure. */
static __nv_bfloat16 *kg_bf16_copy(rg_dev *d, const float *a, int rows, int cols, int ld) {
  size_t n = (size_t)(rows - 1) * ld + cols;
  void *p = NULL;
  if (!kg_cuda(d, cudaMallocAsync(&p, n * sizeof(__nv_bfloat16), d->stream), "cudaMallocAsync"))
    return NULL;
  kg_to_bf16<<<(unsigned)((n + 255) / 256), 256, 0, d->stream>>>(a, (__nv_bfloat16 *)p, n);
  kg_cuda(d, cudaGetLastError(), "bf16 conversion");
  return (__nv_bfloat16 *)p;
}

/* rt_gemm on the device. Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, so
 * cuBLAS gets B before A and n before m. */
static void kg_gemm(void *ctx, bool ta, bool tb, int m, int n, int k, float alpha, const float *A,
                    int lda, const float *B, int ldb, float beta, float *C, int ldc) {
  rg_dev *d = (rg_dev *)ctx;
  if (d->err[0] || m <= 0 || n <= 0) return;
  if (k <= 0) {
    long mn = (long)m * n;
    kg_scale<<<(unsigned)((mn + 255) / 256), 256, 0, d->stream>>>(C, m, n, ldc, beta);
    kg_cuda(d, cudaGetLastError(), "gemm with k = 0");
    return;
  }
  cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (!d->bf16) {
    kg_blas(d, cublasSgemm(d->blas, ob, oa, n, m, k, &alpha, B, ldb, A, lda, &beta, C, ldc),
            "cublasSgemm");
    return;
  }
  __nv_bfloat16 *a16 = kg_bf16_copy(d, A, ta ? k : m, ta ? m : k, lda);
  __nv_bfloat16 *b16 = kg_bf16_copy(d, B, tb ? n : k, tb ? k : n, ldb);
  if (a16 && b16)
    kg_blas(d,
            cublasGemmEx(d->blas, ob, oa, n, m, k, &alpha, b16, CUDA_R_16BF, ldb, a16,
                         CUDA_R_16BF, lda, &beta, C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
                         CUBLAS_GEMM_DEFAULT),
            "cublasGemmEx");
  if (a16) cudaFreeAsync(a16, d->stream);
  if (b16) cudaFreeAsync(b16, d->stream);
}

/* ---- Memory ----------------------------------------------------------------------------------- */

static void kg_copy(void *ctx, void *dst, const void *src, size_t bytes) {
  rg_dev *d = (rg_dev *)ctx;
  if (d->err[0]) return;
  kg_cuda(d, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, d->stream), "copy");
}

static void kg_zero(void *ctx, void *dst, size_t bytes) {
  rg_dev *d = (rg_dev *)ctx;
  if (d->err[0]) return;
  kg_cuda(d, cudaMemsetAsync(dst, 0, bytes, d->stream), "zero");
}

static void *kg_alloc(void *ctx, size_t bytes) {
  rg_dev *d = (rg_dev *)ctx;
  void *p = NULL;
  if (d->err[0]) return NULL;
  if (!kg_cuda(d, cudaMallocAsync(&p, bytes, d->stream), "scratch (cudaMallocAsync)")) return NULL;
  return p;
}

static void kg_release(void *ctx, void *p) {
  rg_dev *d = (rg_dev *)ctx;
  if (p) kg_cuda(d, cudaFreeAsync(p, d->stream), "scratch release");
}

static void kg_to_host(void *ctx, void *dst, const void *src, size_t bytes) {
  rg_dev *d = (rg_dev *)ctx;
  if (!d->err[0] &&
      kg_cuda(d, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, d->stream), "to host") &&
      kg_cuda(d, cudaStreamSynchronize(d->stream), "to host (synchronize)"))
    return;
  memset(dst, 0, bytes);
}

static void kg_put(void *ctx, void *dst, const void *src, size_t bytes) {
  rg_dev *d = (rg_dev *)ctx;
  if (!d->err[0] &&
      kg_cuda(d, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, d->stream), "to device"))
    kg_cuda(d, cudaStreamSynchronize(d->stream), "to device (synchronize)");
}

static void *kg_malloc(void *ctx, size_t bytes) {
  rg_dev *d = (rg_dev *)ctx;
  void *p = NULL;
  if (d->err[0] || !kg_cuda(d, cudaMalloc(&p, bytes), "cudaMalloc")) return NULL;
  if (!kg_cuda(d, cudaMemset(p, 0, bytes), "cudaMemset")) {
    cudaFree(p);
    return NULL;
  }
  return p;
}

static void kg_mfree(void *ctx, void *p) {
  rg_dev *d = (rg_dev *)ctx;
  kg_cuda(d, cudaStreamSynchronize(d->stream), "synchronize before free");
  cudaFree(p);
}

static void kg_sync(void *ctx) {
  rg_dev *d = (rg_dev *)ctx;
  if (!d->err[0]) kg_cuda(d, cudaStreamSynchronize(d->stream), "synchronize");
}

static const rt_dev_ops kg_ops = {kg_run,     kg_gemm,    kg_copy, kg_zero,   kg_alloc,
                                  kg_release, kg_to_host, kg_put,  kg_malloc, kg_mfree,
                                  kg_sync};

/* ---- The device (gpu.h) ----------------------------------------------------------------------- */

extern "C" bool rg_device_check(int device, strbuf *err) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    if (err)
      strbuf_printf(err, "no CUDA device is visible (%s)",
                    e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    (void)cudaGetLastError();
    return false;
  }
  if (device < 0 || device >= count) {
    if (err) strbuf_printf(err, "CUDA device %d: no such device (%d visible)", device, count);
    return false;
  }
  return true;
}

extern "C" rg_dev *rg_dev_new(int device, void *stream, bool bf16, strbuf *err) {
  if (!rg_device_check(device, err)) return NULL;
  rg_dev *d = (rg_dev *)xcalloc(1, sizeof *d);
  d->device = device;
  d->bf16 = bf16;
  d->dev.ops = &kg_ops;
  d->dev.ctx = d;
  d->stream = (cudaStream_t)stream;
  /* Scratch comes and goes with every kernel call: the stream-ordered pool keeps what it freed
   * (its default gives memory back at every synchronization). */
  cudaMemPool_t pool;
  uint64_t keep = UINT64_MAX;
  if (cudaDeviceGetDefaultMemPool(&pool, device) == cudaSuccess)
    cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
  if (kg_cuda(d, cudaSetDevice(device), "cudaSetDevice") &&
      (stream || (d->own_stream = kg_cuda(d, cudaStreamCreateWithFlags(
                                                 &d->stream, cudaStreamNonBlocking),
                                             "cudaStreamCreate"))) &&
      kg_blas(d, cublasCreate(&d->blas), "cublasCreate") &&
      kg_blas(d, cublasSetStream(d->blas, d->stream), "cublasSetStream") &&
      kg_blas(d, cublasSetMathMode(d->blas, bf16 ? CUBLAS_DEFAULT_MATH : CUBLAS_PEDANTIC_MATH),
              "cublasSetMathMode"))
    return d;
  strbuf_printf(err, "%s", d->err);
  rg_dev_free(d);
  return NULL;
}

extern "C" void rg_dev_free(rg_dev *d) {
  if (!d) return;
  cudaSetDevice(d->device);
  if (d->stream) cudaStreamSynchronize(d->stream);
  if (d->blas) cublasDestroy(d->blas);
  if (d->own_stream) cudaStreamDestroy(d->stream);
  free(d);
}

extern "C" const rt_dev *rg_dev_kernels(rg_dev *d) { return &d->dev; }

extern "C" const char *rg_dev_error(const rg_dev *d) { return d->err[0] ? d->err : NULL; }
