/* kb_common.h -- the element-wise bodies the layer kernels share (kdev.h, bodies.def): the
 * activations, RMSNorm and LayerNorm with their split gradients, the feed-forward block's
 * activation, and the embedding, head and custom kernels' element work. Written once for the CPU
 * and the GPU (RT_HD): plain C that also compiles as CUDA C++. Norm statistics accumulate in
 * double in index order, so a row's result does not depend on where it runs. */
#ifndef OCTO_RT_KB_COMMON_H
#define OCTO_RT_KB_COMMON_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>

#include "kdev.h"

/* Declares body 'name': rt_b_NAME(const rt_b_NAME_a *p, long i). */
#define RT_BODY_FN(name) RT_HD static inline void rt_b_##name(const rt_b_##name##_a *p, long i)

/* Activation functions: RT_ACT_<ID>, the rows of ir/enums.def's ACT type in its order (the
 * numbers streams carry), included so that the two cannot disagree; only ACT's rows become
 * members. */
#define RT_EIN_ACT(ID) RT_ACT_##ID,
#define RT_EIN_DTYPE(ID)
#define RT_EIN_OPTIMIZER(ID)
#define RT_EIN_RECOMPUTE(ID)
#define RT_EIN_BACKEND(ID)
typedef enum rt_act {
#define IR_ENUM(T, ID, S, DOC) RT_EIN_##T(ID)
#include "../ir/enums.def"
#undef IR_ENUM
  RT_ACT_COUNT
} rt_act;

#define RT_SQRT1_2 0.70710678118654752440 /* 1 / sqrt(2) */
#define RT_PI 3.14159265358979323846

RT_HD static inline float rt_sigmoid(float z) {
  return z >= 0 ? 1.0f / (1.0f + expf(-z)) : expf(z) / (1.0f + expf(z));
}
/* softplus(z) = log(1 + exp(z)), stable; its derivative is the sigmoid. */
RT_HD static inline float rt_softplus(float z) { return z > 20.0f ? z : log1pf(expf(z)); }
/* silu(z) = z * sigmoid(z) and its derivative. */
RT_HD static inline float rt_silu(float z) { return z * rt_sigmoid(z); }
RT_HD static inline float rt_silu_grad(float z) {
  float s = rt_sigmoid(z);
  return s * (1.0f + z * (1.0f - s));
}

#define RT_SQRT2_PI 0.79788456080286535588 /* sqrt(2 / pi) */
#define RT_GELU_C 0.044715                 /* the tanh approximation's cubic term */
#define RT_QUICK_GELU_C 1.702f             /* quick_gelu's sigmoid slope */

/* Activation a of z (gelu: the exact erf form, as torch's default; gelu_tanh: 0.5 z (1 +
 * tanh(sqrt(2/pi) (z + 0.044715 z^3))), torch's approximate="tanh"; quick_gelu: z sigmoid(1.702
 * z) in float, as transformers' QuickGELUActivation). */
RT_HD static inline float rt_act_fwd(int a, float z) {
  switch (a) {
  case RT_ACT_RELU: return z > 0 ? z : 0;
  case RT_ACT_RELU2: return z > 0 ? z * z : 0;
  case RT_ACT_GELU: return (float)(0.5 * z * (1.0 + erf(z * RT_SQRT1_2)));
  case RT_ACT_SILU: return rt_silu(z);
  case RT_ACT_TANH: return tanhf(z);
  case RT_ACT_GELU_TANH:
    return (float)(0.5 * z * (1.0 + tanh(RT_SQRT2_PI * (z + RT_GELU_C * (double)z * z * z))));
  case RT_ACT_QUICK_GELU: return z * rt_sigmoid(RT_QUICK_GELU_C * z);
  }
  return z;
}
/* Its derivative at z. */
RT_HD static inline float rt_act_grad(int a, float z) {
  switch (a) {
  case RT_ACT_RELU: return z > 0 ? 1.0f : 0.0f;
  case RT_ACT_RELU2: return z > 0 ? 2.0f * z : 0.0f;
  case RT_ACT_GELU: {
    double cdf = 0.5 * (1.0 + erf(z * RT_SQRT1_2));
    double pdf = exp(-0.5 * (double)z * z) / sqrt(2 * RT_PI);
    return (float)(cdf + z * pdf);
  }
  case RT_ACT_SILU: return rt_silu_grad(z);
  case RT_ACT_TANH: {
    float t = tanhf(z);
    return 1.0f - t * t;
  }
  case RT_ACT_GELU_TANH: {
    double zd = z, t = tanh(RT_SQRT2_PI * (zd + RT_GELU_C * zd * zd * zd));
    return (float)(0.5 * (1.0 + t) +
                   0.5 * zd * (1.0 - t * t) * RT_SQRT2_PI * (1.0 + 3.0 * RT_GELU_C * zd * zd));
  }
  case RT_ACT_QUICK_GELU: {
    float s = rt_sigmoid(RT_QUICK_GELU_C * z);
    return s * (1.0f + RT_QUICK_GELU_C * z * (1.0f - s));
  }
  }
  return 1.0f;
}

/* ---- RMSNorm: y = x / rms(x) * (gamma + shift), rms = sqrt(mean(x^2) + eps), per row of width
 * n; shift is 0, or 1 for Gemma's (1 + weight) ----------------------------------------------- */

/* Row i: y and rstd[i] = 1 / rms. */
typedef struct rt_b_rmsnorm_fwd_a {
  int n;                    /* row width */
  double eps;               /* epsilon (> 0) */
  float shift;              /* added to every gamma (0 or 1) */
  const float *x, *gamma;   /* rows x n, [n] */
  float *y, *rstd;          /* rows x n, [rows] */
} rt_b_rmsnorm_fwd_a;
RT_BODY_FN(rmsnorm_fwd) {
  int n = p->n;
  const float *xr = p->x + (size_t)i * n;
  double ss = 0;
  for (int k = 0; k < n; k++) ss += (double)xr[k] * xr[k];
  float rs = (float)(1.0 / sqrt(ss / n + p->eps));
  p->rstd[i] = rs;
  float *yr = p->y + (size_t)i * n;
  for (int k = 0; k < n; k++) yr[k] = xr[k] * rs * (p->gamma[k] + p->shift);
}

/* Row i of the input gradient: dx (+)= d/dx given dy (accumulate when acc). */
typedef struct rt_b_rmsnorm_bwd_in_a {
  int n;                                /* row width */
  float shift;                          /* as the forward's */
  const float *x, *gamma, *rstd, *dy;   /* as the forward saw them, and the output gradient */
  float *dx;                            /* rows x n */
  bool acc;                             /* add to dx instead of overwriting it */
} rt_b_rmsnorm_bwd_in_a;
RT_BODY_FN(rmsnorm_bwd_in) {
  int n = p->n;
  const float *xr = p->x + (size_t)i * n, *dyr = p->dy + (size_t)i * n;
  float *dxr = p->dx + (size_t)i * n;
  double rs = p->rstd[i], dot = 0;
  for (int k = 0; k < n; k++) dot += (double)dyr[k] * (p->gamma[k] + p->shift) * xr[k];
  /* d/dx (x * rs * g) = rs * (g * dy - x * rs^2 * mean(g * dy * x)), g = gamma + shift */
  double c = dot * rs * rs / n;
  for (int k = 0; k < n; k++) {
    float v = (float)(rs * ((double)dyr[k] * (p->gamma[k] + p->shift) - (double)xr[k] * c));
    dxr[k] = p->acc ? dxr[k] + v : v;
  }
}

/* Column i of the weight gradient: dgamma[i] += sum over rows of dy * x * rstd (whatever the
 * shift). */
typedef struct rt_b_rmsnorm_bwd_w_a {
  int rows, n;                 /* rows and row width */
  const float *x, *rstd, *dy;  /* as in rmsnorm_bwd_in */
  float *dgamma;               /* [n] */
} rt_b_rmsnorm_bwd_w_a;
RT_BODY_FN(rmsnorm_bwd_w) {
  double s = 0;
  for (int r = 0; r < p->rows; r++)
    s += (double)p->dy[(size_t)r * p->n + i] * p->x[(size_t)r * p->n + i] * p->rstd[r];
  p->dgamma[i] += (float)s;
}

/* ---- LayerNorm: y = (x - mean) * rstd * gamma + beta, per row of width n -------------------- */

typedef struct rt_b_layernorm_fwd_a {
  int n;                          /* row width */
  double eps;                     /* epsilon (> 0) */
  const float *x, *gamma, *beta;  /* rows x n, [n], [n] */
  float *y, *mean, *rstd;         /* rows x n, [rows], [rows] */
} rt_b_layernorm_fwd_a;
RT_BODY_FN(layernorm_fwd) {
  int n = p->n;
  const float *xr = p->x + (size_t)i * n;
  double mu = 0, var = 0;
  for (int k = 0; k < n; k++) mu += xr[k];
  mu /= n;
  for (int k = 0; k < n; k++) var += ((double)xr[k] - mu) * ((double)xr[k] - mu);
  var /= n;
  double rs = 1.0 / sqrt(var + p->eps);
  p->mean[i] = (float)mu;
  p->rstd[i] = (float)rs;
  float *yr = p->y + (size_t)i * n;
  for (int k = 0; k < n; k++) yr[k] = (float)(((double)xr[k] - mu) * rs) * p->gamma[k] + p->beta[k];
}

typedef struct rt_b_layernorm_bwd_in_a {
  int n;                                       /* row width */
  const float *x, *gamma, *mean, *rstd, *dy;   /* as the forward saw them, output gradient */
  float *dx;                                   /* rows x n */
  bool acc;                                    /* add to dx */
} rt_b_layernorm_bwd_in_a;
RT_BODY_FN(layernorm_bwd_in) {
  int n = p->n;
  const float *xr = p->x + (size_t)i * n, *dyr = p->dy + (size_t)i * n;
  float *dxr = p->dx + (size_t)i * n;
  double mu = p->mean[i], rs = p->rstd[i], s1 = 0, s2 = 0;
  for (int k = 0; k < n; k++) {
    double g = (double)dyr[k] * p->gamma[k], xh = ((double)xr[k] - mu) * rs;
    s1 += g;
    s2 += g * xh;
  }
  s1 /= n;
  s2 /= n;
  for (int k = 0; k < n; k++) {
    double g = (double)dyr[k] * p->gamma[k], xh = ((double)xr[k] - mu) * rs;
    float v = (float)(rs * (g - s1 - xh * s2));
    dxr[k] = p->acc ? dxr[k] + v : v;
  }
}

/* Column i: dgamma += sum dy * xhat, dbeta += sum dy. */
typedef struct rt_b_layernorm_bwd_w_a {
  int rows, n;                         /* rows and row width */
  const float *x, *mean, *rstd, *dy;   /* as in layernorm_bwd_in */
  float *dgamma, *dbeta;               /* [n] each */
} rt_b_layernorm_bwd_w_a;
RT_BODY_FN(layernorm_bwd_w) {
  double sg = 0, sb = 0;
  for (int r = 0; r < p->rows; r++) {
    double d = p->dy[(size_t)r * p->n + i];
    sg += d * ((double)p->x[(size_t)r * p->n + i] - p->mean[r]) * p->rstd[r];
    sb += d;
  }
  p->dgamma[i] += (float)sg;
  p->dbeta[i] += (float)sb;
}

/* ---- The feed-forward block's activation (ffn.h) -------------------------------------------- */

/* z[i] = act(a[i]) * u[i] (gated) or act(a[i]). */
typedef struct rt_b_ffn_act_a {
  int act;             /* rt_act */
  bool gated;          /* multiply by u */
  const float *a, *u;  /* pre-activations (u: gated only) */
  float *z;            /* output */
} rt_b_ffn_act_a;
RT_BODY_FN(ffn_act) {
  float v = rt_act_fwd(p->act, p->a[i]);
  p->z[i] = p->gated ? v * p->u[i] : v;
}

/* da[i] = dz[i] * act'(a[i]) [* u[i]], gated: du[i] = dz[i] * act(a[i]); dz may be da. */
typedef struct rt_b_ffn_bwd_act_a {
  int act;                   /* rt_act */
  bool gated;                /* the forward multiplied by u */
  const float *a, *u, *dz;   /* pre-activations and the gradient of z */
  float *da, *du;            /* outputs (du: gated only) */
} rt_b_ffn_bwd_act_a;
RT_BODY_FN(ffn_bwd_act) {
  float g = p->dz[i]; /* read before da[i] is written: dz may be da */
  if (p->gated) {
    p->du[i] = g * rt_act_fwd(p->act, p->a[i]);
    p->da[i] = g * rt_act_grad(p->act, p->a[i]) * p->u[i];
  } else {
    p->da[i] = g * rt_act_grad(p->act, p->a[i]);
  }
}

/* ---- Simple element work ---------------------------------------------------------------------- */

/* y[i] = v[i mod n]: every row of y (width n) set to the vector v (a bias). */
typedef struct rt_b_rows_set_a {
  int n;          /* row width */
  const float *v; /* [n] */
  float *y;       /* rows x n */
} rt_b_rows_set_a;
RT_BODY_FN(rows_set) { p->y[i] = p->v[i % p->n]; }

/* y[i] += x[i]. */
typedef struct rt_b_add_a {
  const float *x; /* addend */
  float *y;       /* accumulated into */
} rt_b_add_a;
RT_BODY_FN(add) { p->y[i] += p->x[i]; }

/* Column i: g[i] += sum over rows of m[r][i], in double (a bias gradient). */
typedef struct rt_b_col_sum_a {
  int rows, n;    /* rows and row width of m */
  const float *m; /* rows x n */
  float *g;       /* [n] */
} rt_b_col_sum_a;
RT_BODY_FN(col_sum) {
  double s = 0;
  for (int r = 0; r < p->rows; r++) s += p->m[(size_t)r * p->n + i];
  p->g[i] += (float)s;
}

/* y[i] = cap * tanh(y[i] / cap) in place, c[i] = y[i] kept when c is not NULL (Gemma 2's logit
 * softcapping, as transformers computes it: divide, tanh, multiply). */
typedef struct rt_b_softcap_fwd_a {
  float cap;  /* > 0 */
  float *y;   /* capped in place */
  float *c;   /* copy of the capped values, or NULL */
} rt_b_softcap_fwd_a;
RT_BODY_FN(softcap_fwd) {
  float v = p->cap * tanhf(p->y[i] / p->cap);
  p->y[i] = v;
  if (p->c) p->c[i] = v;
}

/* dx[i] = dy[i] * (1 - (c[i] / cap)^2): the gradient through c = cap tanh(x / cap), given c
 * (dx may be dy). */
typedef struct rt_b_softcap_bwd_a {
  float cap;              /* > 0 */
  const float *c, *dy;    /* capped values, their gradient */
  float *dx;              /* gradient of the values before the cap */
} rt_b_softcap_bwd_a;
RT_BODY_FN(softcap_bwd) {
  float t = p->c[i] / p->cap;
  p->dx[i] = p->dy[i] * (1.0f - t * t);
}

/* ---- embedding, custom ------------------------------------------------------------------------ */

/* Token id stored in a float, 0 when it is not an id of [0, vocab). */
RT_HD static inline int rt_token(float f, int vocab) {
  return f >= 0 && f < (float)vocab ? (int)f : 0;
}

/* Element i of y (T x h): y[r][k] = table[tok[r]][k] * scale. */
typedef struct rt_b_emb_gather_a {
  int h, vocab;             /* row width, vocabulary */
  float scale;              /* 1, or Gemma's sqrt(hidden) */
  const float *ids, *table; /* [T] token ids as floats, [vocab, h] */
  float *y;                 /* T x h */
} rt_b_emb_gather_a;
RT_BODY_FN(emb_gather) {
  long r = i / p->h, k = i % p->h;
  p->y[i] = p->table[(size_t)rt_token(p->ids[r], p->vocab) * p->h + k] * p->scale;
}

/* Column i of the table's gradient: g[tok[r]][i] += dy[r][i] * scale for r = 0, 1, ... in order,
 * but for the padding token's rows (one thread per column: no two write the same element, and
 * the sum order is fixed). */
typedef struct rt_b_emb_scatter_a {
  long T;                /* tokens */
  int h, vocab;          /* row width, vocabulary */
  float scale;           /* the forward's */
  int pad;               /* the padding token, whose row gets nothing; -1: none */
  const float *ids, *dy; /* [T], T x h */
  float *g;              /* [vocab, h] */
} rt_b_emb_scatter_a;
RT_BODY_FN(emb_scatter) {
  for (long r = 0; r < p->T; r++) {
    int t = rt_token(p->ids[r], p->vocab);
    if (t != p->pad) p->g[(size_t)t * p->h + i] += p->dy[(size_t)r * p->h + i] * p->scale;
  }
}

/* custom: a[i] = tanh(a[i]); y[i] = a[i] (+ x[i] when the widths agree). */
typedef struct rt_b_custom_act_a {
  bool residual;  /* add x */
  const float *x; /* T x out (when residual) */
  float *a, *y;   /* T x out */
} rt_b_custom_act_a;
RT_BODY_FN(custom_act) {
  p->a[i] = tanhf(p->a[i]);
  p->y[i] = p->a[i] + (p->residual ? p->x[i] : 0.0f);
}

/* dz[i] = dy[i] * (1 - a[i]^2): the gradient through a = tanh(.). */
typedef struct rt_b_tanh_bwd_a {
  const float *dy, *a; /* output gradient, tanh output */
  float *dz;           /* gradient of the pre-activation */
} rt_b_tanh_bwd_a;
RT_BODY_FN(tanh_bwd) { p->dz[i] = p->dy[i] * (1.0f - p->a[i] * p->a[i]); }

#endif
