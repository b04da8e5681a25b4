/* attention.c -- the "attention" layer kind (kernels.h). N = B*S tokens, row
 * b*S + t is token t of sequence b; hd = head_dim; weights are [in, out] (y = x @ W).
 *
 *   attention  dims: B, S (= in_S), hidden (= in_w = out_w), heads, kv_heads (divides heads),
 *              head_dim (even with rope), causal, window (0: none), rope, rope_theta,
 *              qkv_bias, qk_norm, norm_eps, norm_plus_one, post_norm, score_dim, softcap.
 *              params, in order: "norm" [hidden] (const 1), "wq" [hidden, heads*hd],
 *              "wk" [hidden, kv_heads*hd], "wv" [hidden, kv_heads*hd], "wo" [heads*hd, hidden];
 *              wq, wk, wv uniform in +-sqrt(3 / hidden), wo in +-0.5 sqrt(3 / (heads*hd));
 *              with qkv_bias then "bq" [heads*hd], "bk", "bv" [kv_heads*hd] (const 0); with
 *              qk_norm then "q_norm", "k_norm" [hd] (const 1); with post_norm then
 *              "post_norm" [hidden] (const 1). With norm_plus_one every norm weight starts at 0
 *              and multiplies as (1 + weight) (Gemma).
 *              h = RMSNorm(x) * norm (eps norm_eps); q = h wq (+ bq), k = h wk (+ bk),
 *              v = h wv (+ bv); with qk_norm each head of q and k is RMS-normalized over its hd
 *              values (eps norm_eps) times q_norm / k_norm (Qwen3);
 *              with rope, the rotary embedding on q and k per head at position t (0..S-1 within
 *              the sequence),
 *              theta = rope_theta, rotate-half: for i < hd/2, pair (i, i + hd/2) with angle
 *              t * theta^(-2i/hd) (with rope_factor != 1 scaled as Llama 3.1's "llama3" rope
 *              scaling, kb_attention.h attn_rope_table; divided by rope_linear, transformers'
 *              "linear" scaling): out_i = x_i cos - x_{i+hd/2} sin,
 *              out_{i+hd/2} = x_{i+hd/2} cos + x_i sin;
 *              query head qh reads kv head qh / (heads / kv_heads);
 *              scores = q k^T / sqrt(score_dim) (score_dim: head_dim unless given), capped to
 *              softcap * tanh(scores / softcap) when softcap > 0 (Gemma 2); key j visible from
 *              query t iff (causal: j <= t) and (window > 0: t - window < j, and when not
 *              causal also |t - j| < window); P = softmax over visible keys; o = P v; heads
 *              concatenated; y = x + o wo, or with post_norm y = x + RMSNorm(o wo) * post_norm
 *              (Gemma's sandwich norm).
 * The attention core runs per (sequence, head) with two products (rt_gemm) and a materialized
 * S x S score block in scratch, whose softmax is a body per query row. F keeps each softmax
 * row's maximum and 1 / sum, and B recomputes the probabilities from q and k with the same
 * arithmetic (bit-identical to F's). B leaves the gradients of every projection's output in
 * save, so W needs nothing else. vit's bk has an identically zero gradient (softmax ignores a
 * constant per query row); W adds exactly 0.
 * The kernels run on the calling thread's device (kdev.h): they touch tensors only through
 * rt_gemm, rt_copy, rt_zero, rt_scratch, the norms and the bodies of kb_attention.h and
 * kb_common.h (RT_FOR). */
#include "attn.h"

/* ---- attention ------------------------------------------------------------------------------- */

/* Offsets of the attention layer's parameters and saved state (floats). */
typedef struct ka_att {
  size_t norm, wq, wk, wv, wo; /* parameters, in layout order */
  size_t bq, bk, bv;           /* with qkv_bias: the biases, after wo (else 0, unused) */
  size_t qn, kn;               /* with qk_norm: the head norms' weights (else 0) */
  size_t pn;                   /* with post_norm: the output norm's weight, last (else 0) */
  size_t x;                    /* F: input [N, hidden] */
  size_t rstd;                 /* F: RMSNorm 1/rms [N] */
  size_t h;                    /* F: normalized input [N, hidden] */
  size_t q, k, v;              /* F: rotated q [N, heads*hd], rotated k and v [N, kv*hd] */
  size_t qp, kp, rq, rk;       /* F, qk_norm: q and k before the head norm, 1/rms per head */
  size_t o;                    /* F: attention output, heads concatenated [N, heads*hd] */
  size_t stat;                 /* F: softmax row (max, 1/sum) [B*heads*S*2] */
  size_t dy;                   /* B: output gradient [N, hidden] */
  size_t dh;                   /* B: gradient of h [N, hidden] */
  size_t dq, dk, dv;           /* B: gradients of h wq, h wk, h wv (before rotary) */
  size_t dqn, dkn;             /* B, qk_norm: gradients of the head norms' outputs */
  size_t ao, rstd2, dao;       /* post_norm: F's o wo [N, hidden] and its 1/rms [N], B's
                                  gradient of o wo */
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
  float one = 1.0f - d->norm_shift; /* a norm's weight that starts as the identity */
  L.norm = ka_pt(p, &off, "norm", d->hidden, 0, RT_INIT_CONST, one);
  L.wq = ka_pt(p, &off, "wq", d->hidden, aq, RT_INIT_UNIFORM, ka_bound(d->hidden));
  L.wk = ka_pt(p, &off, "wk", d->hidden, ak, RT_INIT_UNIFORM, ka_bound(d->hidden));
  L.wv = ka_pt(p, &off, "wv", d->hidden, ak, RT_INIT_UNIFORM, ka_bound(d->hidden));
  L.wo = ka_pt(p, &off, "wo", aq, d->hidden, RT_INIT_UNIFORM, 0.5f * ka_bound(aq));
  L.bq = L.bk = L.bv = 0;
  if (d->qkv_bias) {
    L.bq = ka_pt(p, &off, "bq", aq, 0, RT_INIT_CONST, 0.0f);
    L.bk = ka_pt(p, &off, "bk", ak, 0, RT_INIT_CONST, 0.0f);
    L.bv = ka_pt(p, &off, "bv", ak, 0, RT_INIT_CONST, 0.0f);
  }
  L.qn = L.kn = 0;
  if (d->qk_norm) {
    L.qn = ka_pt(p, &off, "q_norm", d->head_dim, 0, RT_INIT_CONST, one);
    L.kn = ka_pt(p, &off, "k_norm", d->head_dim, 0, RT_INIT_CONST, one);
  }
  L.pn = d->post_norm ? ka_pt(p, &off, "post_norm", d->hidden, 0, RT_INIT_CONST, one) : 0;
  size_t s = 0, qk = d->qk_norm ? 1 : 0; /* the head norms' state only with qk_norm */
  size_t po = d->post_norm ? 1 : 0;      /* the output norm's only with post_norm */
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
  L.qp = s, s += qk * N * aq;
  L.kp = s, s += qk * N * ak;
  L.rq = s, s += qk * N * d->heads;
  L.rk = s, s += qk * N * d->kv_heads;
  L.dqn = s, s += qk * N * aq;
  L.dkn = s, s += qk * N * ak;
  L.ao = s, s += po * N * hid;
  L.rstd2 = s, s += po * N;
  L.dao = s, s += po * N * hid;
  L.save = s;
  p->save_floats = s;
  p->out_w = d->hidden;
  return L;
}

/* The core shape of an attention layer. */
static ka_shape ka_att_shape(const rt_ldims *d) {
  ka_shape sh = {d->B, d->S, d->heads, d->kv_heads, d->head_dim, d->causal, d->window,
                 (float)(1.0 / sqrt(d->score_dim)), (float)d->softcap};
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
  if (!d->no_rope && d->head_dim % 2) {
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

/* The rotary embedding of N tokens' query heads q [N, heads*hd] and key heads k [N, kv*hd] in
 * place (back: its transpose, for their gradients); nothing with d->no_rope. */
static void ka_att_rope(const rt_ldims *d, int N, float *q, float *k, bool back) {
  if (d->no_rope) return;
  float *sn, *cs = ka_rope_tables(d, &sn);
  ka_rope(N, d->S, d->heads, d->head_dim, q, cs, sn, back);
  ka_rope(N, d->S, d->kv_heads, d->head_dim, k, cs, sn, back);
  rt_scratch_free(cs);
}

/* F: y = x + attention(RMSNorm(x)) wo (post_norm: x + RMSNorm(attention(.) wo)). Post: save
 * holds x, rstd, h, rotated q and k, v, o and the softmax statistics (post_norm: ao, rstd2). */
static void ka_att_fwd(const rt_ldims *d, const float *w, const float *x, float *y,
                       float *save) {
  ka_att L = ka_att_layout(d, NULL);
  ka_shape sh = ka_att_shape(d);
  int N = d->B * d->S, hid = d->hidden, aq = d->heads * d->head_dim;
  int ak = d->kv_heads * d->head_dim;
  rt_copy(save + L.x, x, (size_t)N * hid);
  float shift = d->norm_shift; /* 1: Gemma's (1 + w) norms */
  rt_rmsnorm_fwd(N, hid, d->norm_eps, x, w + L.norm, shift, save + L.h, save + L.rstd);
  bool b = d->qkv_bias, qk = d->qk_norm;
  ka_proj(N, hid, aq, save + L.h, w + L.wq, b ? w + L.bq : NULL, save + (qk ? L.qp : L.q));
  ka_proj(N, hid, ak, save + L.h, w + L.wk, b ? w + L.bk : NULL, save + (qk ? L.kp : L.k));
  ka_proj(N, hid, ak, save + L.h, w + L.wv, b ? w + L.bv : NULL, save + L.v);
  if (qk) { /* each head a row of hd values */
    rt_rmsnorm_fwd(N * d->heads, d->head_dim, d->norm_eps, save + L.qp, w + L.qn, shift,
                   save + L.q, save + L.rq);
    rt_rmsnorm_fwd(N * d->kv_heads, d->head_dim, d->norm_eps, save + L.kp, w + L.kn, shift,
                   save + L.k, save + L.rk);
  }
  ka_att_rope(d, N, save + L.q, save + L.k, false);
  float *P = rt_scratch((size_t)d->S * d->S);
  ka_core_fwd(&sh, save + L.q, save + L.k, save + L.v, save + L.o, save + L.stat, P);
  rt_scratch_free(P);
  if (!d->post_norm) {
    rt_copy(y, x, (size_t)N * hid);
    rt_gemm(false, false, N, hid, aq, 1.0f, save + L.o, aq, w + L.wo, hid, 1.0f, y, hid);
    return;
  }
  rt_gemm(false, false, N, hid, aq, 1.0f, save + L.o, aq, w + L.wo, hid, 0.0f, save + L.ao, hid);
  rt_rmsnorm_fwd(N, hid, d->norm_eps, save + L.ao, w + L.pn, shift, y, save + L.rstd2);
  RT_FOR(add, (size_t)N * hid, .x = save + L.x, .y = y);
}

/* B: dx (when not NULL) from dy. Pre: ka_att_fwd ran on save. Post: save also holds dy, dh and
 * the gradients of h wq, h wk, h wv (before rotary) (post_norm: and of o wo), all W needs. */
static void ka_att_bwd_in(const rt_ldims *d, const float *w, float *save, const float *dy,
                          float *dx) {
  ka_att L = ka_att_layout(d, NULL);
  ka_shape sh = ka_att_shape(d);
  int N = d->B * d->S, hid = d->hidden, aq = d->heads * d->head_dim;
  int ak = d->kv_heads * d->head_dim;
  rt_copy(save + L.dy, dy, (size_t)N * hid);
  const float *dao = dy; /* the gradient of o wo */
  if (d->post_norm) {
    rt_rmsnorm_bwd_in(N, hid, save + L.ao, w + L.pn, d->norm_shift, save + L.rstd2, dy,
                      save + L.dao, false);
    dao = save + L.dao;
  }
  float *dO = rt_scratch((size_t)N * aq);
  rt_gemm(false, true, N, aq, hid, 1.0f, dao, hid, w + L.wo, hid, 0.0f, dO, aq);
  float *P = rt_scratch(2 * (size_t)d->S * d->S);
  ka_core_bwd(&sh, save + L.q, save + L.k, save + L.v, save + L.stat, dO, save + L.dq,
              save + L.dk, save + L.dv, P, P + (size_t)d->S * d->S);
  rt_scratch_free(P);
  rt_scratch_free(dO);
  ka_att_rope(d, N, save + L.dq, save + L.dk, true);
  if (d->qk_norm) { /* dq, dk: from the head norms' outputs to the projections' */
    int hd = d->head_dim;
    rt_copy(save + L.dqn, save + L.dq, (size_t)N * aq);
    rt_copy(save + L.dkn, save + L.dk, (size_t)N * ak);
    rt_rmsnorm_bwd_in(N * d->heads, hd, save + L.qp, w + L.qn, d->norm_shift, save + L.rq,
                      save + L.dqn, save + L.dq, false);
    rt_rmsnorm_bwd_in(N * d->kv_heads, hd, save + L.kp, w + L.kn, d->norm_shift, save + L.rk,
                      save + L.dkn, save + L.dk, false);
  }
  float *dh = save + L.dh;
  rt_gemm(false, true, N, hid, aq, 1.0f, save + L.dq, aq, w + L.wq, aq, 0.0f, dh, hid);
  rt_gemm(false, true, N, hid, ak, 1.0f, save + L.dk, ak, w + L.wk, ak, 1.0f, dh, hid);
  rt_gemm(false, true, N, hid, ak, 1.0f, save + L.dv, ak, w + L.wv, ak, 1.0f, dh, hid);
  if (!dx) return;
  rt_copy(dx, dy, (size_t)N * hid);
  rt_rmsnorm_bwd_in(N, hid, save + L.x, w + L.norm, d->norm_shift, save + L.rstd, dh, dx, true);
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
  const float *dao = save + (d->post_norm ? L.dao : L.dy); /* the gradient of o wo */
  rt_gemm(true, false, aq, hid, N, 1.0f, save + L.o, aq, dao, hid, 1.0f, g + L.wo, hid);
  if (d->post_norm)
    rt_rmsnorm_bwd_w(N, hid, save + L.ao, save + L.rstd2, save + L.dy, g + L.pn);
  if (d->qkv_bias) {
    ka_colsum_acc(N, aq, save + L.dq, g + L.bq);
    ka_colsum_acc(N, ak, save + L.dk, g + L.bk);
    ka_colsum_acc(N, ak, save + L.dv, g + L.bv);
  }
  if (d->qk_norm) {
    rt_rmsnorm_bwd_w(N * d->heads, d->head_dim, save + L.qp, save + L.rq, save + L.dqn, g + L.qn);
    rt_rmsnorm_bwd_w(N * d->kv_heads, d->head_dim, save + L.kp, save + L.rk, save + L.dkn,
                     g + L.kn);
  }
}

/* Dimensions: hidden, seq, heads, kv_heads and head_dim (rt_heads_dims, head width even with
 * rope), causal, window, rope, rope_theta, qkv_bias, qk_norm, norm_eps, norm_plus_one, post_norm,
 * softcap and score_dim (at scale k, in proportion to the run's head_dim). At scale 1 the layer
 * runs as written: an odd head width, which the rotary embedding cannot split in halves, is
 * refused rather than rounded (without rope it runs). */
static int ka_att_dims(const rt_dims_in *in, rt_ldims *d, strbuf *err) {
  int k = in->scale;
  rt_dims_tokens(in, BE_LP_ATTENTION_HIDDEN, BE_LP_ATTENTION_SEQ, d);
  double hidden = rt_lp(in, BE_LP_ATTENTION_HIDDEN, 0);
  double heads = rt_lp(in, BE_LP_ATTENTION_HEADS, 0);
  double kv = rt_lp(in, BE_LP_ATTENTION_KV_HEADS, heads);
  double hd = rt_lp(in, BE_LP_ATTENTION_HEAD_DIM, heads > 0 ? hidden / heads : 0);
  d->no_rope = rt_lp(in, BE_LP_ATTENTION_ROPE, 1) == 0;
  int hq = d->no_rope ? 1 : 2; /* the head width's quantum: the rotary embedding pairs halves */
  if (!d->no_rope && k == 1 && hd >= 1 && fmod(hd, 2) != 0) {
    strbuf_printf(err, "head_dim %g is odd: the rotary embedding rotates a head's two halves, "
                  "so the runtime cannot run it as written (at scale 1)", hd);
    return -1;
  }
  if (heads < 1 || kv < 1 || fmod(heads, kv) != 0) { /* the plan says why */
    d->heads = (int)heads;
    d->kv_heads = (int)kv;
    d->head_dim = (int)rt_sdim(hd, k, hq, hq);
  } else {
    rt_heads_dims(heads, kv, hd, k, hq, &d->heads, &d->kv_heads, &d->head_dim);
  }
  d->causal = rt_lp(in, BE_LP_ATTENTION_CAUSAL, 1) != 0;
  long win = (long)rt_lp(in, BE_LP_ATTENTION_WINDOW, 0);
  d->window = win > 0 ? (int)rt_sdim((double)win, k, 1, 1) : 0;
  d->rope_theta = rt_lp(in, BE_LP_ATTENTION_ROPE_THETA, 1e4); /* positions are not scaled */
  d->rope_factor = rt_lp(in, BE_LP_ATTENTION_ROPE_FACTOR, 1);
  d->rope_low = rt_lp(in, BE_LP_ATTENTION_ROPE_LOW, 1);
  d->rope_high = rt_lp(in, BE_LP_ATTENTION_ROPE_HIGH, 4);
  d->rope_orig = rt_lp(in, BE_LP_ATTENTION_ROPE_ORIG, 8192);
  d->rope_linear = rt_lp(in, BE_LP_ATTENTION_ROPE_LINEAR, 1);
  d->qkv_bias = rt_lp(in, BE_LP_ATTENTION_QKV_BIAS, 0) != 0;
  d->qk_norm = rt_lp(in, BE_LP_ATTENTION_QK_NORM, 0) != 0;
  d->norm_eps = rt_lp(in, BE_LP_ATTENTION_NORM_EPS, 1e-5);
  d->norm_shift = rt_lp(in, BE_LP_ATTENTION_NORM_PLUS1, 0) != 0 ? 1.0f : 0.0f;
  d->post_norm = rt_lp(in, BE_LP_ATTENTION_POST_NORM, 0) != 0;
  d->softcap = rt_lp(in, BE_LP_ATTENTION_SOFTCAP, 0);
  double sd = rt_lp(in, BE_LP_ATTENTION_SCORE_DIM, hd);
  d->score_dim = hd > 0 && sd > 0 ? sd * d->head_dim / hd : d->head_dim;
  return 0;
}

const rt_kernel rt_kernel_ATTENTION = {BE_KIND_ATTENTION, 0, ka_att_dims, ka_att_plan,
                                       ka_att_fwd, ka_att_bwd_in, ka_att_bwd_w, ka_flops};
