/* attn.h -- what the attention and vit kinds share (attention.c, vit.c): the parameter layout
 * helper, the attention core per (sequence, head) with its materialized S x S score block, the
 * rotary embedding, projections and the common checks. Functions are static inline: each kind's
 * file takes the ones it uses. See attention.c for the definition of the core. */
#ifndef OCTO_RT_ATTN_H
#define OCTO_RT_ATTN_H

#include <math.h>

#include "kernels.h"

/* Add parameter tensor of 1 (d1 0) or 2 extents to p and return its offset in the layout. */
static inline size_t ka_pt(rt_lplan *p, size_t *off, const char *name, int d0, int d1, rt_init init,
                    float scale) {
  rt_lplan_add(p, name, d0, d1, 0, init, scale);
  size_t at = *off;
  *off += rt_ptensor_floats(&p->pt[p->npt - 1]);
  return at;
}

/* Uniform bound of a projection with fan-in n. */
static inline float ka_bound(int n) { return sqrtf(3.0f / (float)n); }

/* ---- The attention core ---------------------------------------------------------------------- */

/* The shape of one attention core: q [N, heads*hd], k and v [N, kv*hd]. */
typedef struct ka_shape {
  int B;       /* sequences */
  int S;       /* tokens per sequence */
  int heads;   /* query heads */
  int kv;      /* key/value heads (divides heads) */
  int hd;      /* head width */
  bool causal; /* keys after the query are hidden */
  int window;  /* sliding window in tokens (0: none) */
  float scale; /* the scores' factor: 1 / sqrt(hd), or 1 / sqrt(score_dim) */
  float cap;   /* scores capped to cap tanh(s / cap) before the softmax (0: none) */
} ka_shape;

/* Scores of sequence b, query head qh into P (S x S): q k^T * scale (uncapped). */
static inline void ka_scores(const ka_shape *sh, int b, int qh, const float *q, const float *k,
                      float *P) {
  int wq = sh->heads * sh->hd, wk = sh->kv * sh->hd, kh = qh / (sh->heads / sh->kv);
  const float *Q = q + (size_t)b * sh->S * wq + (size_t)qh * sh->hd;
  const float *K = k + (size_t)b * sh->S * wk + (size_t)kh * sh->hd;
  rt_gemm(false, true, sh->S, sh->S, sh->hd, sh->scale, Q, wq, K, wk, 0.0f, P, sh->S);
}

/* Forward of the core: o [N, heads*hd] from q, k, v; stat [B*heads*S*2] receives each softmax
 * row's (max, 1/sum) (body attn_softmax_fwd, scores capped when sh->cap > 0, visible keys as
 * rt_attn_span). P is S x S scratch. */
static inline void ka_core_fwd(const ka_shape *sh, const float *q, const float *k, const float *v,
                        float *o, float *stat, float *P) {
  int S = sh->S, wq = sh->heads * sh->hd, wk = sh->kv * sh->hd;
  for (int b = 0; b < sh->B; b++)
    for (int qh = 0; qh < sh->heads; qh++) {
      int kh = qh / (sh->heads / sh->kv);
      ka_scores(sh, b, qh, q, k, P);
      float *st = stat + ((size_t)b * sh->heads + qh) * S * 2;
      RT_FOR(attn_softmax_fwd, S, .S = S, .causal = sh->causal, .window = sh->window,
             .cap = sh->cap, .P = P, .st = st);
      rt_gemm(false, false, S, sh->hd, S, 1.0f, P, S, v + (size_t)b * S * wk + (size_t)kh * sh->hd,
              wk, 0.0f, o + (size_t)b * S * wq + (size_t)qh * sh->hd, wq);
    }
}

/* Backward of the core: dq (overwritten), dk and dv (overwritten) from dO [N, heads*hd], given
 * F's q, k, v and stat. P and dP are S x S scratch; per (sequence, head), body attn_softmax_bwd
 * recomputes P and turns dP = dO v^T into the score gradient. */
static inline void ka_core_bwd(const ka_shape *sh, const float *q, const float *k, const float *v,
                        const float *stat, const float *dO, float *dq, float *dk, float *dv,
                        float *P, float *dP) {
  int S = sh->S, wq = sh->heads * sh->hd, wk = sh->kv * sh->hd;
  float scale = sh->scale;
  rt_zero(dk, (size_t)sh->B * S * wk);
  rt_zero(dv, (size_t)sh->B * S * wk);
  for (int b = 0; b < sh->B; b++)
    for (int qh = 0; qh < sh->heads; qh++) {
      int kh = qh / (sh->heads / sh->kv);
      size_t qo = (size_t)b * S * wq + (size_t)qh * sh->hd;
      size_t ko = (size_t)b * S * wk + (size_t)kh * sh->hd;
      ka_scores(sh, b, qh, q, k, P);
      const float *st = stat + ((size_t)b * sh->heads + qh) * S * 2;
      /* dP = dO v^T; then per row P from the scores and dS = P (dP - rowsum(P dP)) in place */
      rt_gemm(false, true, S, S, sh->hd, 1.0f, dO + qo, wq, v + ko, wk, 0.0f, dP, S);
      RT_FOR(attn_softmax_bwd, S, .S = S, .causal = sh->causal, .window = sh->window,
             .cap = sh->cap, .st = st, .P = P, .dP = dP);
      rt_gemm(false, false, S, sh->hd, S, scale, dP, S, k + ko, wk, 0.0f, dq + qo, wq);
      rt_gemm(true, false, S, sh->hd, S, scale, dP, S, q + qo, wq, 1.0f, dk + ko, wk);
      rt_gemm(true, false, S, sh->hd, S, 1.0f, P, S, dO + qo, wq, 1.0f, dv + ko, wk);
    }
}

/* Rotary tables of attention dims d in scratch (body attn_rope_table): cs[t*hd/2 + i] = cos(t *
 * theta^(-2i/hd)) (rope-scaled when d->rope_factor or d->rope_linear is not 1; pre:
 * d->rope_linear > 0), sn likewise sin, t < S; free with
 * rt_scratch_free(cs) (one block, *sn inside it). */
static inline float *ka_rope_tables(const rt_ldims *d, float **sn) {
  size_t n = (size_t)d->S * (d->head_dim / 2);
  float *cs = rt_scratch(2 * n);
  *sn = cs + n;
  RT_FOR(attn_rope_table, n, .hd = d->head_dim, .theta = d->rope_theta, .factor = d->rope_factor,
         .low = d->rope_low, .high = d->rope_high, .orig = d->rope_orig, .linear = d->rope_linear,
         .cs = cs, .sn = *sn);
  return cs;
}

/* Rotate X [N, heads*hd] in place per head (inverse: rotate by minus the angle, which is the
 * transpose, for gradients); body attn_rope, one index per rotated pair. */
static inline void ka_rope(int N, int S, int heads, int hd, float *X, const float *cs, const float *sn,
                    bool inverse) {
  RT_FOR(attn_rope, (size_t)N * heads, .S = S, .heads = heads, .hd = hd,
         .inverse = inverse, .cs = cs, .sn = sn, .X = X);
}

/* Y [N, out] = X [N, in] W [in, out] (+ bias [out] on every row when bias is not NULL). */
static inline void ka_proj(int N, int in, int out, const float *X, const float *W, const float *bias,
                    float *Y) {
  if (bias) RT_FOR(rows_set, (size_t)N * out, .n = out, .v = bias, .y = Y);
  rt_gemm(false, false, N, out, in, 1.0f, X, in, W, out, bias ? 1.0f : 0.0f, Y, out);
}

/* g [n] += the column sums of M [rows, n], accumulated in double in row order (body col_sum). */
static inline void ka_colsum_acc(int rows, int n, const float *M, float *g) {
  RT_FOR(col_sum, n, .rows = rows, .n = n, .m = M, .g = g);
}

/* Common checks of both kinds: positive extents, input of shape [B*S, hidden]. */
static inline int ka_check(const char *kind, const rt_ldims *d, strbuf *err) {
  if (d->B < 1 || d->S < 1 || d->hidden < 1 || d->heads < 1 || d->head_dim < 1) {
    strbuf_printf(err, "%s needs B, S, hidden, heads and head_dim of at least 1", kind);
    return -1;
  }
  if (d->in_S != d->S || d->in_w != d->hidden) {
    strbuf_printf(err, "%s needs an input of %d tokens of width hidden %d, not %d of width %d",
                  kind, d->S, d->hidden, d->in_S, d->in_w);
    return -1;
  }
  return 0;
}

/* The projections' GEMMs and the attention core's two products per head: scores and values,
 * 2 x S x S x head_dim each per sequence and query head. */
static inline double ka_flops(const rt_ldims *d, double nw) {
  return rt_flops_gemm(d, nw) + 4.0 * d->B * d->S * (double)d->S * d->heads * d->head_dim;
}

#endif
