/* kb_attention.h -- the element-wise bodies of the attention and vit kernels (kernels/), see
 * kdev.h and bodies.def: rotary embedding, the softmax of a materialized score block and its
 * gradient, and vit's activation gradient. Plain C that also compiles as CUDA C++ (RT_HD). */
#ifndef OCTO_RT_KB_ATTENTION_H
#define OCTO_RT_KB_ATTENTION_H

#include "kb_common.h"

/* Visible keys of query t in a sequence of S tokens: [*lo, *hi] (key j visible iff (causal:
 * j <= t) and (window > 0: t - window < j, and when not causal also j - t < window); non-empty
 * for every valid shape, since window >= 1 keeps j = t). */
RT_HD static inline void rt_attn_span(int S, bool causal, int window, int t, int *lo, int *hi) {
  *lo = 0;
  *hi = causal ? t : S - 1;
  if (window > 0) {
    if (t - window + 1 > *lo) *lo = t - window + 1;
    if (!causal && t + window - 1 < *hi) *hi = t + window - 1;
  }
}

/* Turn a score row of width S (in place) into probabilities given its maximum m and 1/sum inv;
 * keys outside [lo, hi] get 0. */
RT_HD static inline void rt_attn_prob_row(int S, int lo, int hi, float m, float inv, float *row) {
  for (int j = 0; j < S; j++) row[j] = j >= lo && j <= hi ? expf(row[j] - m) * inv : 0.0f;
}

/* ---- Rotary embedding ------------------------------------------------------------------------ */

/* Element i = t*hd/2 + k of the rotary tables: cs[i] = cos(t * theta^(-2k/hd)), sn[i] likewise
 * sin (t < S, k < hd/2); the frequency scaled as Llama 3.1's or transformers' "linear" rope
 * scaling says. */
typedef struct rt_b_attn_rope_table_a {
  int hd;         /* head width (even) */
  double theta;   /* base frequency (> 0) */
  double factor, low, high, orig; /* Llama 3.1 scaling (factor 1: none; else high > low) */
  double linear;  /* linear scaling: every frequency divided by it (> 0; 1: none) */
  float *cs, *sn; /* [S, hd/2] each */
} rt_b_attn_rope_table_a;
RT_BODY_FN(attn_rope_table) {
  int half = p->hd / 2, t = (int)(i / half), k = (int)(i % half);
  double f = pow(p->theta, -2.0 * k / p->hd);
  if (p->factor != 1) { /* Llama 3.1: slow the long wavelengths, blend the middle ones */
    double wl = 2 * RT_PI / f;
    if (wl > p->orig / p->low) {
      f /= p->factor;
    } else if (wl >= p->orig / p->high) {
      double s = (p->orig / wl - p->low) / (p->high - p->low);
      f = (1 - s) * f / p->factor + s * f;
    }
  }
  f /= p->linear;
  p->cs[i] = (float)cos(t * f);
  p->sn[i] = (float)sin(t * f);
}

/* Head i = r*heads + h of X [N, heads*hd]: rotate each pair (x_k, x_{k+hd/2}) of head h of row r
 * (position r mod S) in place by the table's angle (inverse: by minus the angle, the transpose,
 * for gradients). Each index owns its head's elements (a loop over k: no index arithmetic per
 * element). */
typedef struct rt_b_attn_rope_a {
  int S, heads, hd;          /* tokens per sequence, heads of X, head width (even) */
  bool inverse;              /* rotate by minus the angle */
  const float *cs, *sn;      /* tables of attn_rope_table [S, hd/2] each */
  float *X;                  /* [N, heads*hd], rotated in place */
} rt_b_attn_rope_a;
RT_BODY_FN(attn_rope) {
  long half = p->hd / 2, r = i / p->heads, h = i % p->heads;
  const float *c = p->cs + (size_t)(r % p->S) * half, *s = p->sn + (size_t)(r % p->S) * half;
  float *x = p->X + (size_t)r * p->heads * p->hd + (size_t)h * p->hd;
  float sg = p->inverse ? -1.0f : 1.0f;
  for (long k = 0; k < half; k++) {
    float a = x[k], e = x[k + half], si = sg * s[k];
    x[k] = a * c[k] - e * si;
    x[k + half] = e * c[k] + a * si;
  }
}

/* ---- Softmax of one (sequence, head)'s S x S score block ------------------------------------- */

/* The visible scores row[lo..hi] capped in place to cap * tanh(s / cap) (Gemma 2's
 * attn_logit_softcapping, as transformers computes it); nothing when cap is 0. */
RT_HD static inline void rt_attn_cap_row(int lo, int hi, float cap, float *row) {
  if (cap > 0)
    for (int j = lo; j <= hi; j++) row[j] = cap * tanhf(row[j] / cap);
}

/* Row t = i of P: the scores q k^T * scale in, capped (cap > 0), the probabilities out (0
 * outside the visible span); st[2t], st[2t+1] receive the row's maximum and 1 / sum (the sum of
 * expf in double, in key order). */
typedef struct rt_b_attn_softmax_fwd_a {
  int S;       /* tokens per sequence */
  bool causal; /* keys after the query are hidden */
  int window;  /* sliding window in tokens (0: none) */
  float cap;   /* score softcapping (0: none) */
  float *P;    /* S x S, in place */
  float *st;   /* [S * 2]: (max, 1/sum) per row */
} rt_b_attn_softmax_fwd_a;
RT_BODY_FN(attn_softmax_fwd) {
  int S = p->S, t = (int)i, lo, hi;
  rt_attn_span(S, p->causal, p->window, t, &lo, &hi);
  float *row = p->P + (size_t)t * S, *st = p->st;
  rt_attn_cap_row(lo, hi, p->cap, row);
  float m = row[lo];
  for (int j = lo + 1; j <= hi; j++)
    if (row[j] > m) m = row[j];
  double sum = 0;
  for (int j = lo; j <= hi; j++) sum += expf(row[j] - m);
  st[2 * t] = m;
  st[2 * t + 1] = (float)(1.0 / sum);
  rt_attn_prob_row(S, lo, hi, m, st[2 * t + 1], row);
}

/* Row t = i: P's scores capped and turned into F's probabilities again from st (the same
 * arithmetic, so bit-identical), then dP's row dO v^T turned into the score gradient in place:
 * dS = P (dP - rowsum(P dP)), times 1 - (c / cap)^2 at a capped score c (cap > 0), the row sum
 * in double in key order; 0 where P is 0. */
typedef struct rt_b_attn_softmax_bwd_a {
  int S;           /* tokens per sequence */
  bool causal;     /* as in attn_softmax_fwd */
  int window;      /* as in attn_softmax_fwd */
  float cap;       /* as in attn_softmax_fwd */
  const float *st; /* [S * 2] of attn_softmax_fwd */
  float *P, *dP;   /* S x S each, in place */
} rt_b_attn_softmax_bwd_a;
RT_BODY_FN(attn_softmax_bwd) {
  int S = p->S, t = (int)i, lo, hi;
  rt_attn_span(S, p->causal, p->window, t, &lo, &hi);
  float *pr = p->P + (size_t)t * S, *dr = p->dP + (size_t)t * S;
  float m = p->st[2 * t], inv = p->st[2 * t + 1];
  rt_attn_cap_row(lo, hi, p->cap, pr);
  double dot = 0; /* rowsum(P dP), P as rt_attn_prob_row computes it (0 outside [lo, hi]) */
  for (int j = lo; j <= hi; j++) dot += (double)(expf(pr[j] - m) * inv) * dr[j];
  for (int j = 0; j < S; j++) {
    float c = pr[j], pj = j >= lo && j <= hi ? expf(c - m) * inv : 0.0f;
    double v = pj * (dr[j] - dot);
    if (p->cap > 0) v *= 1.0 - (double)(c / p->cap) * (c / p->cap);
    pr[j] = pj;
    dr[j] = pj == 0.0f ? 0.0f : (float)v;
  }
}

/* ---- vit's feed-forward block ---------------------------------------------------------------- */

/* Element i: da = dz * u * act'(a) and du = dz * act(a) (gated), else da = dz * act'(a) (vit's
 * order of the products; dz must not be da). */
typedef struct rt_b_attn_vit_bwd_act_a {
  int act;                 /* rt_act */
  bool gated;              /* the forward multiplied by u */
  const float *a, *u, *dz; /* pre-activations (u: gated only) and the gradient of z */
  float *da, *du;          /* outputs (du: gated only) */
} rt_b_attn_vit_bwd_act_a;
RT_BODY_FN(attn_vit_bwd_act) {
  if (p->gated) {
    p->da[i] = p->dz[i] * p->u[i] * rt_act_grad(p->act, p->a[i]);
    p->du[i] = p->dz[i] * rt_act_fwd(p->act, p->a[i]);
  } else {
    p->da[i] = p->dz[i] * rt_act_grad(p->act, p->a[i]);
  }
}

#endif
