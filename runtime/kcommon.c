/* kcommon.c -- the building blocks the layer kernels share (kernels.h): the kernel table, GEMM
 * through BLAS, RMSNorm and LayerNorm with their split gradients, activations. Norm statistics
 * accumulate in double in a fixed order, so results do not depend on the thread that runs them. */
#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "data.h"
#include "kernels.h"

#define RT_KERNEL(ID, name, ops) extern const rt_kernel ops;
#include "kernels.def"
#undef RT_KERNEL

const rt_kernel *const rt_kernels[RT_K_COUNT] = {
#define RT_KERNEL(ID, name, ops) &ops,
#include "kernels.def"
#undef RT_KERNEL
};

const rt_kernel *rt_kernel_find(const char *kind) {
  for (int i = 0; kind && i < RT_K_COUNT; i++)
    if (strcmp(rt_kernels[i]->kind, kind) == 0) return rt_kernels[i];
  return NULL;
}

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

/* ---- Norms ----------------------------------------------------------------------------------- */

void rt_rmsnorm_fwd(int rows, int n, const float *x, const float *gamma, float *y, float *rstd) {
  for (int r = 0; r < rows; r++) {
    const float *xr = x + (size_t)r * n;
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)xr[i] * xr[i];
    float rs = (float)(1.0 / sqrt(ss / n + RT_NORM_EPS));
    rstd[r] = rs;
    float *yr = y + (size_t)r * n;
    for (int i = 0; i < n; i++) yr[i] = xr[i] * rs * gamma[i];
  }
}

void rt_rmsnorm_bwd_in(int rows, int n, const float *x, const float *gamma, const float *rstd,
                       const float *dy, float *dx, bool acc) {
  for (int r = 0; r < rows; r++) {
    const float *xr = x + (size_t)r * n, *dyr = dy + (size_t)r * n;
    float *dxr = dx + (size_t)r * n;
    double rs = rstd[r], dot = 0;
    for (int i = 0; i < n; i++) dot += (double)dyr[i] * gamma[i] * xr[i];
    /* d/dx (x * rs * g) = rs * (g * dy - x * rs^2 * mean(g * dy * x)) */
    double c = dot * rs * rs / n;
    for (int i = 0; i < n; i++) {
      float v = (float)(rs * ((double)dyr[i] * gamma[i] - (double)xr[i] * c));
      dxr[i] = acc ? dxr[i] + v : v;
    }
  }
}

void rt_rmsnorm_bwd_w(int rows, int n, const float *x, const float *rstd, const float *dy,
                      float *dgamma) {
  for (int i = 0; i < n; i++) {
    double s = 0;
    for (int r = 0; r < rows; r++) s += (double)dy[(size_t)r * n + i] * x[(size_t)r * n + i] * rstd[r];
    dgamma[i] += (float)s;
  }
}

void rt_layernorm_fwd(int rows, int n, const float *x, const float *gamma, const float *beta,
                      float *y, float *mean, float *rstd) {
  for (int r = 0; r < rows; r++) {
    const float *xr = x + (size_t)r * n;
    double mu = 0, var = 0;
    for (int i = 0; i < n; i++) mu += xr[i];
    mu /= n;
    for (int i = 0; i < n; i++) var += ((double)xr[i] - mu) * ((double)xr[i] - mu);
    var /= n;
    double rs = 1.0 / sqrt(var + RT_NORM_EPS);
    mean[r] = (float)mu;
    rstd[r] = (float)rs;
    float *yr = y + (size_t)r * n;
    for (int i = 0; i < n; i++) yr[i] = (float)(((double)xr[i] - mu) * rs) * gamma[i] + beta[i];
  }
}

void rt_layernorm_bwd_in(int rows, int n, const float *x, const float *gamma, const float *mean,
                         const float *rstd, const float *dy, float *dx, bool acc) {
  for (int r = 0; r < rows; r++) {
    const float *xr = x + (size_t)r * n, *dyr = dy + (size_t)r * n;
    float *dxr = dx + (size_t)r * n;
    double mu = mean[r], rs = rstd[r], s1 = 0, s2 = 0;
    for (int i = 0; i < n; i++) {
      double g = (double)dyr[i] * gamma[i], xh = ((double)xr[i] - mu) * rs;
      s1 += g;
      s2 += g * xh;
    }
    s1 /= n;
    s2 /= n;
    for (int i = 0; i < n; i++) {
      double g = (double)dyr[i] * gamma[i], xh = ((double)xr[i] - mu) * rs;
      float v = (float)(rs * (g - s1 - xh * s2));
      dxr[i] = acc ? dxr[i] + v : v;
    }
  }
}

void rt_layernorm_bwd_w(int rows, int n, const float *x, const float *mean, const float *rstd,
                        const float *dy, float *dgamma, float *dbeta) {
  for (int i = 0; i < n; i++) {
    double sg = 0, sb = 0;
    for (int r = 0; r < rows; r++) {
      double d = dy[(size_t)r * n + i];
      sg += d * ((double)x[(size_t)r * n + i] - mean[r]) * rstd[r];
      sb += d;
    }
    dgamma[i] += (float)sg;
    dbeta[i] += (float)sb;
  }
}

/* ---- Activations ----------------------------------------------------------------------------- */

float rt_sigmoid(float z) {
  return z >= 0 ? 1.0f / (1.0f + expf(-z)) : expf(z) / (1.0f + expf(z));
}

float rt_softplus(float z) { return z > 20.0f ? z : log1pf(expf(z)); }

float rt_silu(float z) { return z * rt_sigmoid(z); }

float rt_silu_grad(float z) {
  float s = rt_sigmoid(z);
  return s * (1.0f + z * (1.0f - s));
}

const char *rt_act_name(rt_act a) {
  static const char *const names[] = {"relu", "relu2", "gelu", "silu", "tanh"};
  return (unsigned)a < sizeof names / sizeof *names ? names[a] : "?";
}

float rt_act_fwd(rt_act a, float z) {
  switch (a) {
  case RT_ACT_RELU: return z > 0 ? z : 0;
  case RT_ACT_RELU2: return z > 0 ? z * z : 0;
  case RT_ACT_GELU: return (float)(0.5 * z * (1.0 + erf(z * M_SQRT1_2)));
  case RT_ACT_SILU: return rt_silu(z);
  case RT_ACT_TANH: return tanhf(z);
  }
  return z;
}

float rt_act_grad(rt_act a, float z) {
  switch (a) {
  case RT_ACT_RELU: return z > 0 ? 1.0f : 0.0f;
  case RT_ACT_RELU2: return z > 0 ? 2.0f * z : 0.0f;
  case RT_ACT_GELU: {
    double cdf = 0.5 * (1.0 + erf(z * M_SQRT1_2)), pdf = exp(-0.5 * (double)z * z) / sqrt(2 * M_PI);
    return (float)(cdf + z * pdf);
  }
  case RT_ACT_SILU: return rt_silu_grad(z);
  case RT_ACT_TANH: {
    float t = tanhf(z);
    return 1.0f - t * t;
  }
  }
  return 1.0f;
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
