/* kcommon.c -- the building blocks the layer kernels share (kernels.h): the kernel table and the
 * dimension helpers of the kinds' files (runtime/kernels/), where
 * kernels run (kdev.h: the CPU's loops over the bodies of bodies.def, or the bound device), GEMM
 * through BLAS, RMSNorm and LayerNorm with their split gradients. Norm statistics accumulate in
 * double in a fixed order, so results do not depend on the thread that runs them. */
#include <cblas.h>
#include <stdlib.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "data.h"
#include "kernels.h"

#define LAYER_KIND(ID, NAME, RC, DOC) extern const rt_kernel rt_kernel_##ID;
#include "../ir/layer_kinds.def"
#undef LAYER_KIND

const rt_kernel *const rt_kernels[BE_KIND_COUNT] = {
#define LAYER_KIND(ID, NAME, RC, DOC) &rt_kernel_##ID,
#include "../ir/layer_kinds.def"
#undef LAYER_KIND
};

const rt_kernel *rt_kernel_find(const char *kind) {
  int k = be_kind_lookup(kind);
  return k < 0 ? NULL : rt_kernels[k];
}

const char *rt_kernel_name(const rt_kernel *k) { return be_kinds[k->id].name; }

bool rt_kernel_recomputable(const rt_kernel *k) { return be_kinds[k->id].recomputable; }

/* ---- Dimensions ---------------------------------------------------------------------------- */

double rt_lp(const rt_dims_in *in, be_lparam p, double dflt) {
  double v = be_layer_param(in->l, p);
  return isnan(v) ? dflt : v;
}

long rt_sdim(double value, int scale, long lo, long mult) {
  double v = value / scale / mult;
  if (!(v == v) || v * mult > RT_MAX_DIM) return -1;
  long r = lround(v) * mult;
  return r < lo ? lo : r;
}

void rt_heads_dims(double heads, double units, double hd, int k, int mult, int *heads_s,
                   int *units_s, int *hd_s) {
  double q = heads / units, width = heads * hd / k;
  long lo = hd < 4 ? (long)hd : 4;
  if (lo < mult) lo = mult;
  long h1 = rt_sdim(hd, k, lo, mult);
  double u = width / ((double)h1 * q);
  long u1 = lround(u < 1 ? 1 : u > units ? units : u);
  *hd_s = (int)h1;
  *units_s = (int)u1;
  *heads_s = (int)(u1 * q);
}

void rt_dims_tokens(const rt_dims_in *in, be_lparam hidden, be_lparam seq, rt_ldims *d) {
  d->hidden = (int)rt_sdim(rt_lp(in, hidden, 0), in->scale, 4, 1);
  d->S = (int)rt_sdim(rt_lp(in, seq, in->s->seq), in->scale, 4, 1);
  d->in_S = d->S;
  d->in_w = d->hidden;
}

double rt_flops_gemm(const rt_ldims *d, double nw) { return 2 * nw * ((double)d->B * d->S); }

size_t rt_ptensor_floats(const rt_ptensor *t) {
  size_t n = 1;
  for (int i = 0; i < t->ndim; i++) n *= (size_t)t->dim[i];
  return n;
}

size_t rt_lplan_params(const rt_lplan *p) {
  size_t n = 0;
  for (int i = 0; i < p->npt; i++) n += rt_ptensor_floats(&p->pt[i]);
  return n;
}

/* Once per process: BLAS runs one thread per calling thread (every rank is one thread or
 * process; results must not depend on how BLAS splits the work). */
static pthread_once_t kc_blas_once = PTHREAD_ONCE_INIT;
static void kc_blas_init(void) { openblas_set_num_threads(1); }

/* The calling thread's device (kdev.h); NULL: the CPU. */
static _Thread_local const rt_dev *kc_dev;

/* Seconds this thread spent in BLAS. */
static _Thread_local double kc_blas_s;

double rt_blas_seconds(void) { return kc_blas_s; }

void rt_lplan_add(rt_lplan *p, const char *name, int d0, int d1, int d2, rt_init init,
                  float scale) {
  rt_ptensor *t = &p->pt[p->npt++];
  t->name = name;
  t->ndim = d1 <= 0 ? 1 : d2 <= 0 ? 2 : 3;
  t->dim[0] = d0;
  t->dim[1] = t->ndim > 1 ? d1 : 0;
  t->dim[2] = t->ndim > 2 ? d2 : 0;
  t->init = init;
  t->scale = scale;
}

void rt_gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float *A, int lda,
             const float *B, int ldb, float beta, float *C, int ldc) {
  if (m <= 0 || n <= 0) return;
  if (kc_dev) {
    kc_dev->ops->gemm(kc_dev->ctx, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  pthread_once(&kc_blas_once, kc_blas_init);
  if (k <= 0) { /* BLAS may leave C alone when k = 0; the product is then zero */
    for (int i = 0; i < m; i++)
      for (int j = 0; j < n; j++) C[(size_t)i * ldc + j] = beta == 0 ? 0 : beta * C[(size_t)i * ldc + j];
    return;
  }
  double t0 = support_seconds();
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
              k, alpha, A, lda, B, ldb, beta, C, ldc);
  kc_blas_s += support_seconds() - t0;
}

double rt_median(double *v, int n) {
  for (int i = 1; i < n; i++) /* insertion sort: a handful of values */
    for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
      double t = v[j];
      v[j] = v[j - 1];
      v[j - 1] = t;
    }
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---- Where kernels run (kdev.h) ------------------------------------------------------------ */

const rt_dev *rt_dev_bind(const rt_dev *d) {
  const rt_dev *old = kc_dev;
  kc_dev = d;
  return old;
}

const rt_dev *rt_dev_current(void) { return kc_dev; }

/* The CPU's loop over each body: for i in [0, n), in order. */
#define RT_BODY(name)                                                                              \
  static void kc_loop_##name(const void *args, long n) {                                           \
    const rt_b_##name##_a *p = args;                                                               \
    for (long i = 0; i < n; i++) rt_b_##name(p, i);                                                \
  }
#include "bodies.def"
#undef RT_BODY

/* The loops, indexed by rt_body_id. */
static void (*const kc_loops[RT_B_COUNT])(const void *, long) = {
#define RT_BODY(name) kc_loop_##name,
#include "bodies.def"
#undef RT_BODY
};

void rt_for(rt_body_id id, long n, const void *args) {
  if (n <= 0) return;
  if (kc_dev) kc_dev->ops->run(kc_dev->ctx, id, n, args);
  else kc_loops[id](args, n);
}

void rt_copy(float *dst, const float *src, size_t n) {
  if (dst == src || n == 0) return;
  if (kc_dev) kc_dev->ops->copy(kc_dev->ctx, dst, src, n * sizeof *dst);
  else memcpy(dst, src, n * sizeof *dst);
}

void rt_zero(float *dst, size_t n) {
  if (n == 0) return;
  if (kc_dev) kc_dev->ops->zero(kc_dev->ctx, dst, n * sizeof *dst);
  else memset(dst, 0, n * sizeof *dst);
}

void *rt_scratch_bytes(size_t bytes) {
  if (kc_dev) return kc_dev->ops->alloc(kc_dev->ctx, bytes ? bytes : 1);
  return xmalloc(bytes ? bytes : 1);
}

float *rt_scratch(size_t n) { return rt_scratch_bytes(n * sizeof(float)); }

void rt_scratch_free(void *p) {
  if (!p) return;
  if (kc_dev) kc_dev->ops->release(kc_dev->ctx, p);
  else free(p);
}

void rt_to_host(void *dst, const void *src, size_t bytes) {
  if (bytes == 0) return;
  if (kc_dev) kc_dev->ops->to_host(kc_dev->ctx, dst, src, bytes);
  else memcpy(dst, src, bytes);
}

void rt_put(void *dst, const void *src, size_t bytes) {
  if (bytes == 0 || dst == src) return;
  if (kc_dev) kc_dev->ops->put(kc_dev->ctx, dst, src, bytes);
  else memcpy(dst, src, bytes);
}

void *rt_dev_malloc(size_t bytes) {
  if (kc_dev) return kc_dev->ops->lasting(kc_dev->ctx, bytes ? bytes : 1);
  return xcalloc(1, bytes ? bytes : 1);
}

void rt_dev_mfree(void *p) {
  if (!p) return;
  if (kc_dev) kc_dev->ops->lasting_free(kc_dev->ctx, p);
  else free(p);
}

void rt_sync(void) {
  if (kc_dev) kc_dev->ops->sync(kc_dev->ctx);
}

/* ---- Norms (bodies in kb_common.h) ----------------------------------------------------------- */

void rt_rmsnorm_fwd(int rows, int n, double eps, const float *x, const float *gamma, float shift,
                    float *y, float *rstd) {
  RT_FOR(rmsnorm_fwd, rows, .n = n, .eps = eps, .shift = shift, .x = x, .gamma = gamma, .y = y,
         .rstd = rstd);
}

void rt_rmsnorm_bwd_in(int rows, int n, const float *x, const float *gamma, float shift,
                       const float *rstd, const float *dy, float *dx, bool acc) {
  RT_FOR(rmsnorm_bwd_in, rows, .n = n, .shift = shift, .x = x, .gamma = gamma, .rstd = rstd,
         .dy = dy, .dx = dx, .acc = acc);
}

void rt_rmsnorm_bwd_w(int rows, int n, const float *x, const float *rstd, const float *dy,
                      float *dgamma) {
  RT_FOR(rmsnorm_bwd_w, n, .rows = rows, .n = n, .x = x, .rstd = rstd, .dy = dy,
         .dgamma = dgamma);
}

void rt_layernorm_fwd(int rows, int n, double eps, const float *x, const float *gamma,
                      const float *beta, float *y, float *mean, float *rstd) {
  RT_FOR(layernorm_fwd, rows, .n = n, .eps = eps, .x = x, .gamma = gamma, .beta = beta, .y = y,
         .mean = mean, .rstd = rstd);
}

void rt_layernorm_bwd_in(int rows, int n, const float *x, const float *gamma, const float *mean,
                         const float *rstd, const float *dy, float *dx, bool acc) {
  RT_FOR(layernorm_bwd_in, rows, .n = n, .x = x, .gamma = gamma, .mean = mean, .rstd = rstd,
         .dy = dy, .dx = dx, .acc = acc);
}

void rt_layernorm_bwd_w(int rows, int n, const float *x, const float *mean, const float *rstd,
                        const float *dy, float *dgamma, float *dbeta) {
  RT_FOR(layernorm_bwd_w, n, .rows = rows, .n = n, .x = x, .mean = mean, .rstd = rstd, .dy = dy,
         .dgamma = dgamma, .dbeta = dbeta);
}

/* ---- Activations (the functions are in kb_common.h) ------------------------------------------ */

const char *rt_act_name(rt_act a) {
  static const char *const names[] = {
#define IR_ENUM(T, ID, S, DOC) RT_EIN_##T(S)
#undef RT_EIN_ACT
#define RT_EIN_ACT(S) S,
#include "../ir/enums.def"
#undef IR_ENUM
  };
  return (unsigned)a < RT_ACT_COUNT ? names[a] : "?";
}

/* ---- Initialization -------------------------------------------------------------------------- */

/* Uniform double in [0, 1). */
static double kc_unit(uint64_t *st) { return (double)(rt_next64(st) >> 11) * 0x1p-53; }

void rt_kernel_init_params(const rt_lplan *p, uint64_t seed, float *w) {
  for (int i = 0; i < p->npt; i++) {
    const rt_ptensor *t = &p->pt[i];
    size_t n = rt_ptensor_floats(t);
    uint64_t st = seed ^ ((uint64_t)(i + 1) * 0xd1b54a32d192ed03ULL);
    rt_next64(&st);
    for (size_t k = 0; k < n; k++) {
      switch (t->init) {
      case RT_INIT_UNIFORM: w[k] = (float)((2.0 * kc_unit(&st) - 1.0) * t->scale); break;
      case RT_INIT_CONST: w[k] = t->scale; break;
      case RT_INIT_ALOG: w[k] = (float)log(1.0 + 15.0 * kc_unit(&st)); break;
      case RT_INIT_DTBIAS: {
        double dt = exp(log(1e-3) + (log(1e-1) - log(1e-3)) * kc_unit(&st));
        w[k] = (float)(dt + log(-expm1(-dt))); /* softplus^-1(dt) */
        break;
      }
      }
    }
    w += n;
  }
}
