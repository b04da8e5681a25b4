/* k_attention.c -- the kernels of the two attention layer kinds (kernels.h). N = B*S tokens, row
 * b*S + t is token t of sequence b; hd = head_dim; weights are [in, out] (y = x @ W).
 *
 *   attention  dims: B, S (= in_S), hidden (= in_w = out_w), heads, kv_heads (divides heads),
 *              head_dim (even), causal, window (0: none).
 *              params, in order: "norm" [hidden] (const 1), "wq" [hidden, heads*hd],
 *              "wk" [hidden, kv_heads*hd], "wv" [hidden, kv_heads*hd], "wo" [heads*hd, hidden];
 *              wq, wk, wv uniform in +-sqrt(3 / hidden), wo in +-0.5 sqrt(3 / (heads*hd)).
 *              h = RMSNorm(x) * norm (eps RT_NORM_EPS); q = h wq, k = h wk, v = h wv;
 *              rotary embedding on q and k per head at position t (0..S-1 within the sequence),
 *              theta 10000, rotate-half: for i < hd/2, pair (i, i + hd/2) with angle
 *              t * theta^(-2i/hd): out_i = x_i cos - x_{i+hd/2} sin,
 *              out_{i+hd/2} = x_{i+hd/2} cos + x_i sin;
 *              query head qh reads kv head qh / (heads / kv_heads);
 *              scores = q k^T / sqrt(hd); key j visible from query t iff (causal: j <= t) and
 *              (window > 0: t - window < j, and when not causal also |t - j| < window);
 *              P = softmax over visible keys; o = P v; heads concatenated; y = x + o wo.
 *   vit        non-causal pre-norm encoder layer, no rotary, kv_heads = heads.
 *              dims: B, S (tokens; = in_S), hidden (= in_w = out_w), heads, head_dim, ffn,
 *              gated, act.
 *              params, in order: "ln1.w" [hidden] (1), "ln1.b" [hidden] (0), "wq" [hidden, A],
 *              "bq" [A], "wk", "bk", "wv", "bv" (likewise), "wo" [A, hidden], "bo" [hidden],
 *              "ln2.w", "ln2.b", "w1" [hidden, ffn], "b1" [ffn], gated only: "w3" [hidden, ffn],
 *              "b3" [ffn]; then "w2" [ffn, hidden], "b2" [hidden]; A = heads*hd; biases const 0;
 *              a projection of fan-in n is uniform in +-sqrt(3 / n), halved for wo and w2.
 *              h = LN1(x); q, k, v = h wq + bq, ...; full softmax attention per head;
 *              x1 = x + o wo + bo; h2 = LN2(x1); a = h2 w1 + b1; z = act(a) (gated:
 *              z = act(a) * (h2 w3 + b3)); y = x1 + z w2 + b2. LayerNorm eps RT_NORM_EPS;
 *              act is rt_act_fwd (gelu: the exact erf form).
 * The attention core runs per (sequence, head) with two products (rt_gemm) and a materialized
 * S x S score block in scratch, whose softmax is a body per query row. F keeps each softmax
 * row's maximum and 1 / sum, and B recomputes the probabilities from q and k with the same
 * arithmetic (bit-identical to F's). B leaves the gradients of every projection's output in
 * save, so W needs nothing else. vit's bk has an identically zero gradient (softmax ignores a
 * constant per query row); W adds exactly 0.
 * The kernels run on the calling thread's device (kdev.h): they touch tensors only through
 * rt_gemm, rt_copy, rt_zero, rt_scratch, the norms and the bodies of kb_attention.h and
 * kb_common.h (RT_FOR). */
#include <math.h>

#include "kernels.h"

/* Add parameter tensor of 1 (d1 0) or 2 extents to p and return its offset in the layout. */
static size_t ka_pt(rt_lplan *p, size_t *off, const char *name, int d0, int d1, rt_init init,
                    float scale) {
  rt_lplan_add(p, name, d0, d1, 0, init, scale);
  size_t at = *off;
  *off += rt_ptensor_floats(&p->pt[p->npt - 1]);
  return at;
}

/* Uniform bound of a projection with fan-in n. */
static float ka_bound(int n) { return sqrtf(3.0f / (float)n); }

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
} ka_shape;

/* Scores of sequence b, query head qh into P (S x S): q k^T / sqrt(hd). */
static void ka_scores(const ka_shape *sh, int b, int qh, const float *q, const float *k,
                      float *P) {
  int wq = sh->heads * sh->hd, wk = sh->kv * sh->hd, kh = qh / (sh->heads / sh->kv);
  const float *Q = q + (size_t)b * sh->S * wq + (size_t)qh * sh->hd;
  const float *K = k + (size_t)b * sh->S * wk + (size_t)kh * sh->hd;
  rt_gemm(false, true, sh->S, sh->S, sh->hd, (float)(1.0 / sqrt((double)sh->hd)), Q, wq, K, wk,
          0.0f, P, sh->S);
}

/* Forward of the core: o [N, heads*hd] from q, k, v; stat [B*heads*S*2] receives each softmax
 * row's (max, 1/sum) (body attn_softmax_fwd, visible keys as rt_attn_span). P is S x S scratch. */
static void ka_core_fwd(const ka_shape *sh, const float *q, const float *k, const float *v,
                        float *o, float *stat, float *P) {
  int S = sh->S, wq = sh->heads * sh->hd, wk = sh->kv * sh->hd;
  for (int b = 0; b < sh->B; b++)
    for (int qh = 0; qh < sh->heads; qh++) {
      int kh = qh / (sh->heads / sh->kv);
      ka_scores(sh, b, qh, q, k, P);
      float *st = stat + ((size_t)b * sh->heads + qh) * S * 2;
      RT_FOR(attn_softmax_fwd, S, .S = S, .causal = sh->causal, .window = sh->window, .P = P,
             .st = st);
      rt_gemm(false, false, S, sh->hd, S, 1.0f, P, S, v + (size_t)b * S * wk + (size_t)kh * sh->hd,
              wk, 0.0f, o + (size_t)b * S * wq + (size_t)qh * sh->hd, wq);
    }
}

/* Backward of the core: dq (overwritten), dk and dv (overwritten) from dO [N, heads*hd], given
 * F's q, k, v and stat. P and dP are S x S scratch; per (sequence, head), body attn_softmax_bwd
 * recomputes P and turns dP = dO v^T into the score gradient. */
static void ka_core_bwd(const ka_shape *sh, const float *q, const float *k, const float *v,
                        const float *stat, const float *dO, float *dq, float *dk, float *dv,
                        float *P, float *dP) {
  int S = sh->S, wq = sh->heads * sh->hd, wk = sh->kv * sh->hd;
  float scale = (float)(1.0 / sqrt((double)sh->hd));
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
      RT_FOR(attn_softmax_bwd, S, .S = S, .causal = sh->causal, .window = sh->window, .st = st,
             .P = P, .dP = dP);
      rt_gemm(false, false, S, sh->hd, S, scale, dP, S, k + ko, wk, 0.0f, dq + qo, wq);
      rt_gemm(true, false, S, sh->hd, S, scale, dP, S, q + qo, wq, 1.0f, dk + ko, wk);
      rt_gemm(true, false, S, sh->hd, S, 1.0f, P, S, dO + qo, wq, 1.0f, dv + ko, wk);
    }
}

/* Rotary tables in scratch (body attn_rope_table): cs[t*hd/2 + i] = cos(t * theta^(-2i/hd)),
 * sn likewise sin, t < S; free with rt_scratch_free(cs) (one block, *sn inside it). */
static float *ka_rope_tables(int S, int hd, float **sn) {
  size_t n = (size_t)S * (hd / 2);
  float *cs = rt_scratch(2 * n);
  *sn = cs + n;
  RT_FOR(attn_rope_table, n, .hd = hd, .cs = cs, .sn = *sn);
  return cs;
}

/* Rotate X [N, heads*hd] in place per head (inverse: rotate by minus the angle, which is the
 * transpose, for gradients); body attn_rope, one index per rotated pair. */
static void ka_rope(int N, int S, int heads, int hd, float *X, const float *cs, const float *sn,
                    bool inverse) {
  RT_FOR(attn_rope, (size_t)N * heads, .S = S, .heads = heads, .hd = hd,
         .inverse = inverse, .cs = cs, .sn = sn, .X = X);
}

/* Y [N, out] = X [N, in] W [in, out] (+ bias [out] on every row when bias is not NULL). */
static void ka_proj(int N, int in, int out, const float *X, const float *W, const float *bias,
                    float *Y) {
  if (bias) RT_FOR(rows_set, (size_t)N * out, .n = out, .v = bias, .y = Y);
  rt_gemm(false, false, N, out, in, 1.0f, X, in, W, out, bias ? 1.0f : 0.0f, Y, out);
}

/* g [n] += the column sums of M [rows, n], accumulated in double in row order (body col_sum). */
static void ka_colsum_acc(int rows, int n, const float *M, float *g) {
  RT_FOR(col_sum, n, .rows = rows, .n = n, .m = M, .g = g);
}

/* Common checks of both kinds: positive extents, input of shape [B*S, hidden]. */
static int ka_check(const char *kind, const rt_ldims *d, strbuf *err) {
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

/* ---- attention ------------------------------------------------------------------------------- */

/* Offsets of the attention layer's parameters and saved state (floats). */
typedef struct ka_att {
  size_t norm, wq, wk, wv, wo; /* parameters, in layout order */
  size_t x;                    /* F: input [N, hidden] */
  size_t rstd;                 /* F: RMSNorm 1/rms [N] */
  size_t h;                    /* F: normalized input [N, hidden] */
  size_t q, k, v;              /* F: rotated q [N, heads*hd], rotated k and v [N, kv*hd] */
  size_t o;                    /* F: attention output, heads concatenated [N, heads*hd] */
  size_t stat;                 /* F: softmax row (max, 1/sum) [B*heads*S*2] */
  size_t dy;                   /* B: output gradient [N, hidden] */
  size_t dh;                   /* B: gradient of h [N, hidden] */
  size_t dq, dk, dv;           /* B: gradients of h wq, h wk, h wv (before rotary) */
  size_t save;                 /* floats of the save block */
} ka_att;

/* Fill p (when not NULL) and the offsets of an attention layer of valid dims d. */
static ka_att ka_att_layout(const rt_ldims *d, rt_lplan *p) {
  rt_lplan tmp;
  if (!p) p = &tmp;
  p->npt = 0;
  ka_att L;
  size_t off = 0, N = (size_t)d->B * d->S, hid = (size_t)d->hidden;
  int aq = d->heads * d->head_dim, ak = d->kv_heads * d->head_dim;
  L.norm = ka_pt(p, &off, "norm", d->hidden, 0, RT_INIT_CONST, 1.0f);
  L.wq = ka_pt(p, &off, "wq", d->hidden, aq, RT_INIT_UNIFORM, ka_bound(d->hidden));
  L.wk = ka_pt(p, &off, "wk", d->hidden, ak, RT_INIT_UNIFORM, ka_bound(d->hidden));
  L.wv = ka_pt(p, &off, "wv", d->hidden, ak, RT_INIT_UNIFORM, ka_bound(d->hidden));
  L.wo = ka_pt(p, &off, "wo", aq, d->hidden, RT_INIT_UNIFORM, 0.5f * ka_bound(aq));
  size_t s = 0;
  L.x = s, s += N * hid;
  L.rstd = s, s += N;
  L.h = s, s += N * hid;
  L.q = s, s += N * aq;
  L.k = s, s += N * ak;
  L.v = s, s += N * ak;
  L.o = s, s += N * aq;
  L.stat = s, s += N * d->heads * 2;
  L.dy = s, s += N * hid;
  L.dh = s, s += N * hid;
  L.dq = s, s += N * aq;
  L.dk = s, s += N * ak;
  L.dv = s, s += N * ak;
  L.save = s;
  p->save_floats = s;
  p->out_w = d->hidden;
  return L;
}

/* The core shape of an attention layer. */
static ka_shape ka_att_shape(const rt_ldims *d) {
  ka_shape sh = {d->B, d->S, d->heads, d->kv_heads, d->head_dim, d->causal, d->window};
  return sh;
}

/* Check d for an attention layer and fill p; -1 with the reason in err when d is invalid. */
static int ka_att_plan(const rt_ldims *d, rt_lplan *p, strbuf *err) {
  if (ka_check("attention", d, err)) return -1;
  if (d->kv_heads < 1) {
    strbuf_printf(err, "attention needs kv_heads of at least 1, not %d", d->kv_heads);
    return -1;
  }
  if (d->heads % d->kv_heads) {
    strbuf_printf(err, "heads %d is not a multiple of kv_heads %d", d->heads, d->kv_heads);
    return -1;
  }
  if (d->head_dim % 2) {
    strbuf_printf(err, "head_dim %d is odd; rotary embedding needs an even head_dim",
                  d->head_dim);
    return -1;
  }
  if (d->window < 0) {
    strbuf_printf(err, "window %d is negative", d->window);
    return -1;
  }
  ka_att_layout(d, p);
  return 0;
}

/* F: y = x + attention(RMSNorm(x)) wo. Post: save holds x, rstd, h, rotated q and k, v, o and
 * the softmax statistics. */
static void ka_att_fwd(const rt_ldims *d, const float *w, const float *x, float *y,
                       float *save) {
  ka_att L = ka_att_layout(d, NULL);
  ka_shape sh = ka_att_shape(d);
  int N = d->B * d->S, hid = d->hidden, aq = d->heads * d->head_dim;
  int ak = d->kv_heads * d->head_dim;
  rt_copy(save + L.x, x, (size_t)N * hid);
  rt_rmsnorm_fwd(N, hid, x, w + L.norm, save + L.h, save + L.rstd);
  ka_proj(N, hid, aq, save + L.h, w + L.wq, NULL, save + L.q);
  ka_proj(N, hid, ak, save + L.h, w + L.wk, NULL, save + L.k);
  ka_proj(N, hid, ak, save + L.h, w + L.wv, NULL, save + L.v);
  float *sn, *cs = ka_rope_tables(d->S, d->head_dim, &sn);
  ka_rope(N, d->S, d->heads, d->head_dim, save + L.q, cs, sn, false);
  ka_rope(N, d->S, d->kv_heads, d->head_dim, save + L.k, cs, sn, false);
  rt_scratch_free(cs);
  float *P = rt_scratch((size_t)d->S * d->S);
  ka_core_fwd(&sh, save + L.q, save + L.k, save + L.v, save + L.o, save + L.stat, P);
  rt_scratch_free(P);
  rt_copy(y, x, (size_t)N * hid);
  rt_gemm(false, false, N, hid, aq, 1.0f, save + L.o, aq, w + L.wo, hid, 1.0f, y, hid);
}

/* B: dx (when not NULL) from dy. Pre: ka_att_fwd ran on save. Post: save also holds dy, dh and
 * the gradients of h wq, h wk, h wv (before rotary), all W needs. */
static void ka_att_bwd_in(const rt_ldims *d, const float *w, float *save, const float *dy,
                          float *dx) {
  ka_att L = ka_att_layout(d, NULL);
  ka_shape sh = ka_att_shape(d);
  int N = d->B * d->S, hid = d->hidden, aq = d->heads * d->head_dim;
  int ak = d->kv_heads * d->head_dim;
  rt_copy(save + L.dy, dy, (size_t)N * hid);
  float *dO = rt_scratch((size_t)N * aq);
  rt_gemm(false, true, N, aq, hid, 1.0f, dy, hid, w + L.wo, hid, 0.0f, dO, aq);
  float *P = rt_scratch(2 * (size_t)d->S * d->S);
  ka_core_bwd(&sh, save + L.q, save + L.k, save + L.v, save + L.stat, dO, save + L.dq,
              save + L.dk, save + L.dv, P, P + (size_t)d->S * d->S);
  rt_scratch_free(P);
  rt_scratch_free(dO);
  float *sn, *cs = ka_rope_tables(d->S, d->head_dim, &sn);
  ka_rope(N, d->S, d->heads, d->head_dim, save + L.dq, cs, sn, true);
  ka_rope(N, d->S, d->kv_heads, d->head_dim, save + L.dk, cs, sn, true);
  rt_scratch_free(cs);
  float *dh = save + L.dh;
  rt_gemm(false, true, N, hid, aq, 1.0f, save + L.dq, aq, w + L.wq, aq, 0.0f, dh, hid);
  rt_gemm(false, true, N, hid, ak, 1.0f, save + L.dk, ak, w + L.wk, ak, 1.0f, dh, hid);
  rt_gemm(false, true, N, hid, ak, 1.0f, save + L.dv, ak, w + L.wv, ak, 1.0f, dh, hid);
  if (!dx) return;
  rt_copy(dx, dy, (size_t)N * hid);
  rt_rmsnorm_bwd_in(N, hid, save + L.x, w + L.norm, save + L.rstd, dh, dx, true);
}

/* W: g += the weight gradients, from save alone. Pre: ka_att_bwd_in ran on save. */
static void ka_att_bwd_w(const rt_ldims *d, const float *w, const float *save, float *g) {
  (void)w;
  ka_att L = ka_att_layout(d, NULL);
  int N = d->B * d->S, hid = d->hidden, aq = d->heads * d->head_dim;
  int ak = d->kv_heads * d->head_dim;
  rt_rmsnorm_bwd_w(N, hid, save + L.x, save + L.rstd, save + L.dh, g + L.norm);
  rt_gemm(true, false, hid, aq, N, 1.0f, save + L.h, hid, save + L.dq, aq, 1.0f, g + L.wq, aq);
  rt_gemm(true, false, hid, ak, N, 1.0f, save + L.h, hid, save + L.dk, ak, 1.0f, g + L.wk, ak);
  rt_gemm(true, false, hid, ak, N, 1.0f, save + L.h, hid, save + L.dv, ak, 1.0f, g + L.wv, ak);
  rt_gemm(true, false, aq, hid, N, 1.0f, save + L.o, aq, save + L.dy, hid, 1.0f, g + L.wo, hid);
}

const rt_kernel rt_k_attention = {"attention", ka_att_plan, ka_att_fwd, ka_att_bwd_in,
                                  ka_att_bwd_w, true};

/* ---- vit ------------------------------------------------------------------------------------- */

/* Offsets of the vit layer's parameters and saved state (floats); A = heads*hd, F = ffn. */
typedef struct ka_vit {
  size_t ln1w, ln1b, wq, bq, wk, bk, wv, bv, wo, bo; /* attention block parameters */
  size_t ln2w, ln2b, w1, b1, w3, b3, w2, b2;         /* MLP block parameters (w3, b3: gated) */
  size_t x;                                          /* F: input [N, hidden] */
  size_t mean1, rstd1;                               /* F: LN1 statistics [N] each */
  size_t h;                                          /* F: LN1(x) [N, hidden] */
  size_t q, k, v;                                    /* F: projections with bias [N, A] each */
  size_t stat;                                       /* F: softmax row (max, 1/sum) [B*heads*S*2] */
  size_t o;                                          /* F: attention output [N, A] */
  size_t x1;                                         /* F: x + o wo + bo [N, hidden] */
  size_t mean2, rstd2;                               /* F: LN2 statistics [N] each */
  size_t h2;                                         /* F: LN2(x1) [N, hidden] */
  size_t a;                                          /* F: h2 w1 + b1 [N, F] */
  size_t u;                                          /* F: gated: h2 w3 + b3 [N, F] */
  size_t z;                                          /* F: act(a) (gated: times u) [N, F] */
  size_t dy;                                         /* B: output gradient [N, hidden] */
  size_t da, du;                                     /* B: gradients of a and u [N, F] */
  size_t dh2;                                        /* B: gradient of h2 [N, hidden] */
  size_t dx1;                                        /* B: gradient of x1 [N, hidden] */
  size_t dq, dk, dv;                                 /* B: gradients of q, k, v [N, A] */
  size_t dh;                                         /* B: gradient of h [N, hidden] */
  size_t save;                                       /* floats of the save block */
} ka_vit;

/* Fill p (when not NULL) and the offsets of a vit layer of valid dims d. */
static ka_vit ka_vit_layout(const rt_ldims *d, rt_lplan *p) {
  rt_lplan tmp;
  if (!p) p = &tmp;
  p->npt = 0;
  ka_vit L;
  size_t off = 0, N = (size_t)d->B * d->S, hid = (size_t)d->hidden, F = (size_t)d->ffn;
  int H = d->hidden, A = d->heads * d->head_dim, f = d->ffn;
  L.ln1w = ka_pt(p, &off, "ln1.w", H, 0, RT_INIT_CONST, 1.0f);
  L.ln1b = ka_pt(p, &off, "ln1.b", H, 0, RT_INIT_CONST, 0.0f);
  L.wq = ka_pt(p, &off, "wq", H, A, RT_INIT_UNIFORM, ka_bound(H));
  L.bq = ka_pt(p, &off, "bq", A, 0, RT_INIT_CONST, 0.0f);
  L.wk = ka_pt(p, &off, "wk", H, A, RT_INIT_UNIFORM, ka_bound(H));
  L.bk = ka_pt(p, &off, "bk", A, 0, RT_INIT_CONST, 0.0f);
  L.wv = ka_pt(p, &off, "wv", H, A, RT_INIT_UNIFORM, ka_bound(H));
  L.bv = ka_pt(p, &off, "bv", A, 0, RT_INIT_CONST, 0.0f);
  L.wo = ka_pt(p, &off, "wo", A, H, RT_INIT_UNIFORM, 0.5f * ka_bound(A));
  L.bo = ka_pt(p, &off, "bo", H, 0, RT_INIT_CONST, 0.0f);
  L.ln2w = ka_pt(p, &off, "ln2.w", H, 0, RT_INIT_CONST, 1.0f);
  L.ln2b = ka_pt(p, &off, "ln2.b", H, 0, RT_INIT_CONST, 0.0f);
  L.w1 = ka_pt(p, &off, "w1", H, f, RT_INIT_UNIFORM, ka_bound(H));
  L.b1 = ka_pt(p, &off, "b1", f, 0, RT_INIT_CONST, 0.0f);
  L.w3 = L.b3 = 0;
  if (d->gated) {
    L.w3 = ka_pt(p, &off, "w3", H, f, RT_INIT_UNIFORM, ka_bound(H));
    L.b3 = ka_pt(p, &off, "b3", f, 0, RT_INIT_CONST, 0.0f);
  }
  L.w2 = ka_pt(p, &off, "w2", f, H, RT_INIT_UNIFORM, 0.5f * ka_bound(f));
  L.b2 = ka_pt(p, &off, "b2", H, 0, RT_INIT_CONST, 0.0f);
  size_t s = 0, uF = d->gated ? N * F : 0;
  L.x = s, s += N * hid;
  L.mean1 = s, s += N;
  L.rstd1 = s, s += N;
  L.h = s, s += N * hid;
  L.q = s, s += N * A;
  L.k = s, s += N * A;
  L.v = s, s += N * A;
  L.stat = s, s += N * d->heads * 2;
  L.o = s, s += N * A;
  L.x1 = s, s += N * hid;
  L.mean2 = s, s += N;
  L.rstd2 = s, s += N;
  L.h2 = s, s += N * hid;
  L.a = s, s += N * F;
  L.u = s, s += uF;
  L.z = s, s += N * F;
  L.dy = s, s += N * hid;
  L.da = s, s += N * F;
  L.du = s, s += uF;
  L.dh2 = s, s += N * hid;
  L.dx1 = s, s += N * hid;
  L.dq = s, s += N * A;
  L.dk = s, s += N * A;
  L.dv = s, s += N * A;
  L.dh = s, s += N * hid;
  L.save = s;
  p->save_floats = s;
  p->out_w = d->hidden;
  return L;
}

/* Check d for a vit layer and fill p; -1 with the reason in err when d is invalid. */
static int ka_vit_plan(const rt_ldims *d, rt_lplan *p, strbuf *err) {
  if (ka_check("vit", d, err)) return -1;
  if (d->ffn < 1) {
    strbuf_printf(err, "vit needs ffn of at least 1");
    return -1;
  }
  if (d->kv_heads != 0 && d->kv_heads != d->heads) {
    strbuf_printf(err, "vit has kv_heads = heads %d, not %d", d->heads, d->kv_heads);
    return -1;
  }
  if ((unsigned)d->act > RT_ACT_TANH) {
    strbuf_printf(err, "vit has an unknown activation %d", (int)d->act);
    return -1;
  }
  ka_vit_layout(d, p);
  return 0;
}

/* The core shape of a vit layer: every head its own kv head, every key visible. */
static ka_shape ka_vit_shape(const rt_ldims *d) {
  ka_shape sh = {d->B, d->S, d->heads, d->heads, d->head_dim, false, 0};
  return sh;
}

/* F: the encoder layer y from x. Post: save holds every F slot of ka_vit. */
static void ka_vit_fwd(const rt_ldims *d, const float *w, const float *x, float *y,
                       float *save) {
  ka_vit L = ka_vit_layout(d, NULL);
  ka_shape sh = ka_vit_shape(d);
  int N = d->B * d->S, hid = d->hidden, A = d->heads * d->head_dim, F = d->ffn;
  size_t nh = (size_t)N * hid, nf = (size_t)N * F;
  float *s = save;
  rt_copy(s + L.x, x, nh);
  rt_layernorm_fwd(N, hid, x, w + L.ln1w, w + L.ln1b, s + L.h, s + L.mean1, s + L.rstd1);
  ka_proj(N, hid, A, s + L.h, w + L.wq, w + L.bq, s + L.q);
  ka_proj(N, hid, A, s + L.h, w + L.wk, w + L.bk, s + L.k);
  ka_proj(N, hid, A, s + L.h, w + L.wv, w + L.bv, s + L.v);
  float *P = rt_scratch((size_t)d->S * d->S);
  ka_core_fwd(&sh, s + L.q, s + L.k, s + L.v, s + L.o, s + L.stat, P);
  rt_scratch_free(P);
  float *x1 = s + L.x1;
  ka_proj(N, A, hid, s + L.o, w + L.wo, w + L.bo, x1);
  RT_FOR(add, nh, .x = x, .y = x1);
  rt_layernorm_fwd(N, hid, x1, w + L.ln2w, w + L.ln2b, s + L.h2, s + L.mean2, s + L.rstd2);
  ka_proj(N, hid, F, s + L.h2, w + L.w1, w + L.b1, s + L.a);
  if (d->gated) ka_proj(N, hid, F, s + L.h2, w + L.w3, w + L.b3, s + L.u);
  /* z = act(a) (gated: times u); act(a) * 1.0f, the ungated product, is act(a) exactly */
  float *z = s + L.z;
  RT_FOR(ffn_act, nf, .act = d->act, .gated = d->gated, .a = s + L.a, .u = s + L.u, .z = z);
  ka_proj(N, F, hid, z, w + L.w2, w + L.b2, y);
  RT_FOR(add, nh, .x = x1, .y = y);
}

/* B: dx (when not NULL) from dy. Pre: ka_vit_fwd ran on save. Post: save also holds the B
 * slots of ka_vit (dy and the gradients of every projection output and norm output). */
static void ka_vit_bwd_in(const rt_ldims *d, const float *w, float *save, const float *dy,
                          float *dx) {
  ka_vit L = ka_vit_layout(d, NULL);
  ka_shape sh = ka_vit_shape(d);
  int N = d->B * d->S, hid = d->hidden, A = d->heads * d->head_dim, F = d->ffn;
  size_t nh = (size_t)N * hid, nf = (size_t)N * F;
  float *s = save;
  rt_copy(s + L.dy, dy, nh);
  /* MLP block: dz = dy w2^T, then through the activation (and gate) */
  float *dz = rt_scratch(nf > (size_t)N * A ? nf : (size_t)N * A);
  rt_gemm(false, true, N, F, hid, 1.0f, dy, hid, w + L.w2, hid, 0.0f, dz, F);
  float *da = s + L.da, *du = s + L.du;
  RT_FOR(attn_vit_bwd_act, nf, .act = d->act, .gated = d->gated, .a = s + L.a, .u = s + L.u,
         .dz = dz, .da = da, .du = du);
  float *dh2 = s + L.dh2, *dx1 = s + L.dx1;
  rt_gemm(false, true, N, hid, F, 1.0f, da, F, w + L.w1, F, 0.0f, dh2, hid);
  if (d->gated) rt_gemm(false, true, N, hid, F, 1.0f, du, F, w + L.w3, F, 1.0f, dh2, hid);
  rt_copy(dx1, dy, nh);
  rt_layernorm_bwd_in(N, hid, s + L.x1, w + L.ln2w, s + L.mean2, s + L.rstd2, dh2, dx1, true);
  /* attention block: dO = dx1 wo^T (in dz's buffer), the core, then the three projections */
  float *dO = dz;
  rt_gemm(false, true, N, A, hid, 1.0f, dx1, hid, w + L.wo, hid, 0.0f, dO, A);
  float *P = rt_scratch(2 * (size_t)d->S * d->S);
  ka_core_bwd(&sh, s + L.q, s + L.k, s + L.v, s + L.stat, dO, s + L.dq, s + L.dk, s + L.dv, P,
              P + (size_t)d->S * d->S);
  rt_scratch_free(P);
  rt_scratch_free(dz);
  float *dh = s + L.dh;
  rt_gemm(false, true, N, hid, A, 1.0f, s + L.dq, A, w + L.wq, A, 0.0f, dh, hid);
  rt_gemm(false, true, N, hid, A, 1.0f, s + L.dk, A, w + L.wk, A, 1.0f, dh, hid);
  rt_gemm(false, true, N, hid, A, 1.0f, s + L.dv, A, w + L.wv, A, 1.0f, dh, hid);
  if (!dx) return;
  rt_copy(dx, dx1, nh);
  rt_layernorm_bwd_in(N, hid, s + L.x, w + L.ln1w, s + L.mean1, s + L.rstd1, dh, dx, true);
}

/* g_w [in, out] += X^T dY and g_b [out] += column sums of dY, over N rows. */
static void ka_proj_grad(int N, int in, int out, const float *X, const float *dY, float *gw,
                         float *gb) {
  rt_gemm(true, false, in, out, N, 1.0f, X, in, dY, out, 1.0f, gw, out);
  ka_colsum_acc(N, out, dY, gb);
}

/* W: g += the weight gradients, from save alone. Pre: ka_vit_bwd_in ran on save. */
static void ka_vit_bwd_w(const rt_ldims *d, const float *w, const float *save, float *g) {
  (void)w;
  ka_vit L = ka_vit_layout(d, NULL);
  int N = d->B * d->S, hid = d->hidden, A = d->heads * d->head_dim, F = d->ffn;
  const float *s = save;
  rt_layernorm_bwd_w(N, hid, s + L.x, s + L.mean1, s + L.rstd1, s + L.dh, g + L.ln1w,
                     g + L.ln1b);
  ka_proj_grad(N, hid, A, s + L.h, s + L.dq, g + L.wq, g + L.bq);
  /* bk's gradient is identically 0 (q.bk is the same for every key of a query, and softmax
   * ignores a constant per row); its rounding noise is left out, so g[bk] gets nothing */
  rt_gemm(true, false, hid, A, N, 1.0f, s + L.h, hid, s + L.dk, A, 1.0f, g + L.wk, A);
  ka_proj_grad(N, hid, A, s + L.h, s + L.dv, g + L.wv, g + L.bv);
  ka_proj_grad(N, A, hid, s + L.o, s + L.dx1, g + L.wo, g + L.bo);
  rt_layernorm_bwd_w(N, hid, s + L.x1, s + L.mean2, s + L.rstd2, s + L.dh2, g + L.ln2w,
                     g + L.ln2b);
  ka_proj_grad(N, hid, F, s + L.h2, s + L.da, g + L.w1, g + L.b1);
  if (d->gated) ka_proj_grad(N, hid, F, s + L.h2, s + L.du, g + L.w3, g + L.b3);
  ka_proj_grad(N, F, hid, s + L.z, s + L.dy, g + L.w2, g + L.b2);
}

const rt_kernel rt_k_vit = {"vit", ka_vit_plan, ka_vit_fwd, ka_vit_bwd_in, ka_vit_bwd_w, true};
