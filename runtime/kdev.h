/* kdev.h -- where the layer kernels run: on the CPU, or on the device bound to the calling thread.
 *
 * A kernel of kernels.h is host code that sequences three kinds of work: GEMMs (rt_gemm), copies
 * (rt_copy, rt_zero) and element-wise "bodies". A body is a function of one index i that is
 * written once, in the C subset that also compiles as CUDA C++ (RT_HD), and declared in
 * bodies.def; RT_FOR(name, n, fields...) runs it for i in [0, n). On the CPU that is a plain loop
 * (and rt_gemm is BLAS); on a GPU bound with rt_dev_bind it is one CUDA thread per index (and
 * rt_gemm is cuBLAS) on the bound stream (kernels_gpu.cu). So the CPU and GPU paths share one
 * table of kernels and the arithmetic of every element: only GEMMs and reduction orders inside
 * cuBLAS differ. Kernel code never dereferences tensor memory itself; a value it must branch on
 * comes through rt_to_host. This header is plain C, includable from CUDA. */
#ifndef OCTO_RT_KDEV_H
#define OCTO_RT_KDEV_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __CUDACC__
#define RT_HD __host__ __device__ /* a body: compiled for the host and the device */
#else
#define RT_HD
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The bodies of bodies.def, numbered. */
typedef enum rt_body_id {
#define RT_BODY(name) RT_B_##name,
#include "bodies.def"
#undef RT_BODY
  RT_B_COUNT
} rt_body_id;

/* What a device offers the kernels; every operation is enqueued in order on the device's stream
 * (ctx), except to_host, which waits for the copy. */
typedef struct rt_dev_ops {
  /* Run body id for i in [0, n) with its argument struct *args (copied at the call). */
  void (*run)(void *ctx, rt_body_id id, long n, const void *args);
  /* rt_gemm's contract, on device pointers. */
  void (*gemm)(void *ctx, bool ta, bool tb, int m, int n, int k, float alpha, const float *A,
               int lda, const float *B, int ldb, float beta, float *C, int ldc);
  void (*copy)(void *ctx, void *dst, const void *src, size_t bytes); /* device to device */
  void (*zero)(void *ctx, void *dst, size_t bytes);
  void *(*alloc)(void *ctx, size_t bytes); /* stream-ordered scratch; NULL when out of memory */
  void (*release)(void *ctx, void *p);     /* stream-ordered free of alloc's block */
  void (*to_host)(void *ctx, void *dst, const void *src, size_t bytes); /* waits */
  void (*put)(void *ctx, void *dst, const void *src, size_t bytes); /* host to device, waits */
  void *(*lasting)(void *ctx, size_t bytes); /* lasting, zeroed memory; NULL when out of memory */
  void (*lasting_free)(void *ctx, void *p);    /* waits for the stream, then frees lasting's block */
  void (*sync)(void *ctx);                     /* waits until everything enqueued has run */
} rt_dev_ops;

/* A device as the kernels see it. */
typedef struct rt_dev {
  const rt_dev_ops *ops; /* its operations */
  void *ctx;             /* their first argument (stream, handles, the first error) */
} rt_dev;

/* Bind d to the calling thread (NULL: the CPU, the default); returns the previous binding. Every
 * kernel call, rt_for, rt_gemm, rt_copy, ... of this thread then runs there, on its memory. */
const rt_dev *rt_dev_bind(const rt_dev *d);
/* The calling thread's device, NULL for the CPU. */
const rt_dev *rt_dev_current(void);

/* Run body id for i in [0, n) on the current device. args points to the body's argument struct.
 * Use RT_FOR. */
void rt_for(rt_body_id id, long n, const void *args);
/* dst = src, n floats on the current device (the arrays may be the same; must not overlap
 * otherwise). */
void rt_copy(float *dst, const float *src, size_t n);
/* dst = 0, n floats. */
void rt_zero(float *dst, size_t n);
/* Scratch of 'bytes' on the current device, uninitialized, aligned for any type (aborts when out
 * of host memory; on a GPU, NULL is recorded as the device's error and later work is skipped).
 * rt_scratch: n floats. Free either with rt_scratch_free. */
void *rt_scratch_bytes(size_t bytes);
float *rt_scratch(size_t n);
void rt_scratch_free(void *p);
/* dst (host) = src (current device), bytes; waits for the device. */
void rt_to_host(void *dst, const void *src, size_t bytes);
/* dst (current device) = src (host), bytes; src may be reused on return. */
void rt_put(void *dst, const void *src, size_t bytes);
/* Lasting memory of bytes on the current device, zeroed (parameters, saved state): aborts when
 * the host is out of memory; NULL (the device's error recorded) when a GPU is. Free with
 * rt_dev_mfree on the same device. */
void *rt_dev_malloc(size_t bytes);
void rt_dev_mfree(void *p);
/* Wait until the current device has run everything enqueued so far (the CPU: at once); for
 * timing. */
void rt_sync(void);

#ifdef __cplusplus
}
#endif

/* Run body 'name' for i in [0, n), its argument struct initialized from the designated fields:
 * RT_FOR(ffn_act, n, .a = a, .z = z). C only (kernels are C). */
#define RT_FOR(name, n, ...)                                                                      \
  do {                                                                                            \
    rt_b_##name##_a rt_for_args_ = {__VA_ARGS__};                                                 \
    rt_for(RT_B_##name, (long)(n), &rt_for_args_);                                                \
  } while (0)

#endif
