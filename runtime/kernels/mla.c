/* mla.c -- the "mla" layer kind (kernels.h): multi-head latent attention, DeepSeek-V2/V3's
 * attention (DeepSeek-AI, "DeepSeek-V2", 2024; transformers' DeepseekV2Attention), pre-norm with
 * its residual. N = B*S tokens, row b*S + t is token t of sequence b; H heads; dn = nope_dim,
 * dr = rope_dim (even), dv = v_dim, dq = dn + dr; weights are [in, out] (y = x @ W).
 *
 *   dims: B, S, hidden (= in_w = out_w), heads, q_rank (0: no query latent), kv_rank, nope_dim,
 *         rope_dim, v_dim (at most dq), rope_theta, norm_eps, latent_eps, and YaRN's yarn_factor
 *         (> 1: on), yarn_original_seq, yarn_beta_fast, yarn_beta_slow, yarn_mscale,
 *         yarn_mscale_all_dim.
 *   params, in order: "norm" [hidden] (const 1); without q_rank "wq" [hidden, H*dq], with it
 *         "wq_a" [hidden, q_rank], "q_a_norm" [q_rank] (const 1), "wq_b" [q_rank, H*dq];
 *         "wkv_a" [hidden, kv_rank + dr], "kv_a_norm" [kv_rank] (const 1),
 *         "wkv_b" [kv_rank, H*(dn + dv)], "wo" [H*dv, hidden]; the matrices uniform in
 *         +-sqrt(3 / fan-in), wo's half that.
 *   h = RMSNorm(x) * norm (eps norm_eps); q = h wq, or RMSNorm(h wq_a) * q_a_norm wq_b (eps
 *   latent_eps); [c | k_pe] = h wkv_a, c = RMSNorm(c) * kv_a_norm (eps latent_eps); [k_nope | v]
 *   per head = c wkv_b; head i's query [q_nope | q_pe] (its dq columns of q), its key
 *   [k_nope | k_pe] (k_pe shared by the heads), its value v; q_pe and k_pe turn by the rotary
 *   embedding of interleaved pairs (2i, 2i + 1) at angle t * rope_theta^(-2i/dr) (t the position
 *   in the sequence); scores q k^T / sqrt(dq), causal; P = softmax; o = P v; y = x + o wo.
 *   With YaRN (yarn_factor f > 1; transformers' _compute_yarn_parameters and yarn_apply_mscale):
 *   pair i turns at the blend of theta^(-2i/dr) and it divided by f by a ramp over i from
 *   floor(c(beta_fast)) to ceil(c(beta_slow)), c(b) = dr ln(orig / (2 pi b)) / (2 ln theta); the
 *   rotary parts are scaled by m(mscale) / m(mscale_all_dim) and the scores by m(mscale_all_dim)^2,
 *   m(x) = 0.1 x ln f + 1.
 * Implementation: the rotary columns are copied in the rotate-half order of the attention core's
 * rotary embedding (attn.h; a common permutation of a query's and a key's columns leaves their
 * product as it is) and back for the gradients; every head's value is padded with zeros to dq
 * columns so that the core of attn.h (one head width) runs it, and the first dv columns of its
 * output are the heads' outputs. The copies are the bodies of kb_mla.h; everything else is
 * rt_gemm, the norms and the core, as for attention. B leaves every projection's output gradient
 * in save, so W needs nothing else. */
#include <string.h>

#include "attn.h"

/* Offsets of an mla layer's parameters and saved state (floats). */
typedef struct km_mla {
  size_t norm, wq, wqa, qan, wqb;   /* parameters (wq without q_rank; wqa, qan, wqb with it) */
  size_t wkva, kvan, wkvb, wo;      /* parameters */
  size_t x, rstd, h;                /* F: input, its RMSNorm's 1/rms, normalized input */
  size_t qa, rq, qn;                /* F, q_rank: h wq_a, its 1/rms, its normalized form */
  size_t q;                         /* F: the queries [N, H*dq] as projected (interleaved pairs) */
  size_t ckv, cp, rc, c;            /* F: h wkv_a [N, kv_rank + dr], its first kv_rank columns,
                                       their 1/rms, the normalized latent c */
  size_t kv;                        /* F: c wkv_b [N, H*(dn + dv)] */
  size_t Q, K, V, O;                /* F: the core's rotated queries and keys, padded values, its
                                       output [N, H*dq] each */
  size_t ov;                        /* F: the heads' outputs [N, H*dv] */
  size_t stat;                      /* F: softmax rows' (max, 1/sum) [N*H*2] */
  size_t dy, dh;                    /* B: output gradient, gradient of h */
  size_t dq, dckv, dkv, dc;         /* B: gradients of q, of h wkv_a, of c wkv_b, of c */
  size_t dqn, dqa;                  /* B, q_rank: gradients of the normalized latent, of h wq_a */
  size_t save;                      /* floats of the save block */
} km_mla;

/* Fill p (when not NULL) and the offsets of an mla layer of valid dims d. */
static km_mla km_layout(const rt_ldims *d, rt_lplan *p) {
  rt_lplan tmp;
  if (!p) p = &tmp;
  p->npt = 0;
  km_mla L;
  memset(&L, 0, sizeof L);
  size_t off = 0, N = (size_t)d->B * d->S, hid = (size_t)d->hidden;
  int H = d->heads, dq = d->nope_dim + d->rope_dim, kvr = d->kv_rank, qr = d->q_rank;
  int aq = H * dq, akv = H * (d->nope_dim + d->v_dim), ao = H * d->v_dim;
  L.norm = ka_pt(p, &off, "norm", d->hidden, 0, RT_INIT_CONST, 1.0f);
  if (qr) {
    L.wqa = ka_pt(p, &off, "wq_a", d->hidden, qr, RT_INIT_UNIFORM, ka_bound(d->hidden));
    L.qan = ka_pt(p, &off, "q_a_norm", qr, 0, RT_INIT_CONST, 1.0f);
    L.wqb = ka_pt(p, &off, "wq_b", qr, aq, RT_INIT_UNIFORM, ka_bound(qr));
  } else {
    L.wq = ka_pt(p, &off, "wq", d->hidden, aq, RT_INIT_UNIFORM, ka_bound(d->hidden));
  }
  L.wkva = ka_pt(p, &off, "wkv_a", d->hidden, kvr + d->rope_dim, RT_INIT_UNIFORM,
                 ka_bound(d->hidden));
  L.kvan = ka_pt(p, &off, "kv_a_norm", kvr, 0, RT_INIT_CONST, 1.0f);
  L.wkvb = ka_pt(p, &off, "wkv_b", kvr, akv, RT_INIT_UNIFORM, ka_bound(kvr));
  L.wo = ka_pt(p, &off, "wo", ao, d->hidden, RT_INIT_UNIFORM, 0.5f * ka_bound(ao));
  size_t s = 0, nq = qr ? 1 : 0; /* the query latent's state only with q_rank */
  L.x = s, s += N * hid;
  L.rstd = s, s += N;
  L.h = s, s += N * hid;
  L.qa = s, s += nq * N * qr;
  L.rq = s, s += nq * N;
  L.qn = s, s += nq * N * qr;
  L.q = s, s += N * aq;
  L.ckv = s, s += N * (kvr + d->rope_dim);
  L.cp = s, s += N * kvr;
  L.rc = s, s += N;
  L.c = s, s += N * kvr;
  L.kv = s, s += N * akv;
  L.Q = s, s += N * aq;
  L.K = s, s += N * aq;
  L.V = s, s += N * aq;
  L.O = s, s += N * aq;
  L.ov = s, s += N * ao;
  L.stat = s, s += N * H * 2;
  L.dy = s, s += N * hid;
  L.dh = s, s += N * hid;
  L.dq = s, s += N * aq;
  L.dckv = s, s += N * (kvr + d->rope_dim);
  L.dkv = s, s += N * akv;
  L.dc = s, s += N * kvr;
  L.dqn = s, s += nq * N * qr;
  L.dqa = s, s += nq * N * qr;
  L.save = s;
  p->save_floats = s;
  p->out_w = d->hidden;
  return L;
}

/* Check d for an mla layer and fill p; -1 with the reason in err when d is invalid. */
static int km_plan(const rt_ldims *d, rt_lplan *p, strbuf *err) {
  if (d->B < 1 || d->S < 1 || d->hidden < 1 || d->heads < 1 || d->kv_rank < 1 ||
      d->nope_dim < 0 || d->rope_dim < 2 || d->v_dim < 1 || d->q_rank < 0) {
    strbuf_printf(err, "mla needs B, S, hidden, heads, kv_rank, v_dim of at least 1 and rope_dim "
                  "of at least 2 (got %d, %d, %d, %d, %d, %d, %d)", d->B, d->S, d->hidden,
                  d->heads, d->kv_rank, d->v_dim, d->rope_dim);
    return -1;
  }
  if (d->rope_dim % 2) {
    strbuf_printf(err, "rope_dim %d is odd: the rotary embedding turns pairs", d->rope_dim);
    return -1;
  }
  if (d->v_dim > d->nope_dim + d->rope_dim) {
    strbuf_printf(err, "v_dim %d exceeds nope_dim + rope_dim = %d: the runtime runs the values "
                  "in the queries' head width", d->v_dim, d->nope_dim + d->rope_dim);
    return -1;
  }
  if (d->in_w != 0 && d->in_w != d->hidden) {
    strbuf_printf(err, "mla input width %d differs from hidden %d", d->in_w, d->hidden);
    return -1;
  }
  km_layout(d, p);
  return 0;
}

/* Copy w columns of each of H heads (mla_copy): dst (row stride dld, head stride dhs, from
 * column doff) from src (sld, shs, soff; src NULL: zeros), in column order 'order'. */
static void km_copy(int N, int H, int w, int order, float *dst, long dld, long dhs, long doff,
                    const float *src, long sld, long shs, long soff) {
  RT_FOR(mla_copy, (size_t)N * H * w, .H = H, .w = w, .order = order, .dld = dld, .dhs = dhs,
         .doff = doff, .sld = sld, .shs = shs, .soff = soff, .src = src, .dst = dst);
}

/* YaRN's magnitude scale of extension factor f: 0.1 m ln f + 1 (1 when f <= 1). */
static double km_mscale(double f, double m) { return f <= 1 ? 1.0 : 0.1 * m * log(f) + 1.0; }

/* The dimension at which a wavelength turns 'rot' times in YaRN's pretraining context. */
static double km_corr_dim(const rt_ldims *d, double rot) {
  return d->rope_dim * log(d->yarn_orig / (rot * 2 * M_PI)) / (2 * log(d->rope_theta));
}

/* The rotary embedding of dims d on X [N, heads*dr] (back: its transpose): plain, or with YaRN's
 * scaling (file comment) when yarn_factor > 1. */
static void km_rope(const rt_ldims *d, int N, int heads, float *X, bool back) {
  float *sn, *cs;
  if (d->yarn_factor > 1) {
    size_t n = (size_t)d->S * (d->rope_dim / 2);
    cs = rt_scratch(2 * n);
    sn = cs + n;
    double lo = fmax(floor(km_corr_dim(d, d->yarn_beta_fast)), 0);
    double hi = fmin(ceil(km_corr_dim(d, d->yarn_beta_slow)), d->rope_dim - 1);
    RT_FOR(mla_yarn_table, n, .r = d->rope_dim, .theta = d->rope_theta, .factor = d->yarn_factor,
           .low = lo, .high = hi == lo ? hi + 0.001 : hi,
           .af = km_mscale(d->yarn_factor, d->yarn_mscale) /
                 km_mscale(d->yarn_factor, d->yarn_mscale_all),
           .cs = cs, .sn = sn);
  } else {
    rt_ldims r = *d;
    r.head_dim = d->rope_dim;
    r.rope_factor = r.rope_linear = 1; /* no Llama 3.1 or linear scaling */
    cs = ka_rope_tables(&r, &sn);
  }
  ka_rope(N, d->S, heads, d->rope_dim, X, cs, sn, back);
  rt_scratch_free(cs);
}

/* The core's shape: H heads of dq, causal, scores scaled by dq^-0.5 (times YaRN's
 * mscale_all_dim factor squared). */
static ka_shape km_shape(const rt_ldims *d) {
  int dq = d->nope_dim + d->rope_dim;
  double m = d->yarn_factor > 1 ? km_mscale(d->yarn_factor, d->yarn_mscale_all) : 1;
  ka_shape sh = {d->B, d->S, d->heads, d->heads, dq, true, 0,
                 (float)(m * m / sqrt((double)dq)), 0.0f};
  return sh;
}

/* F: y = x + MLA(RMSNorm(x)) wo (file comment). Post: save holds what B and W read. */
static void km_fwd(const rt_ldims *d, const float *w, const float *x, float *y, float *save) {
  km_mla L = km_layout(d, NULL);
  int N = d->B * d->S, hid = d->hidden, H = d->heads, dn = d->nope_dim, dr = d->rope_dim;
  int dv = d->v_dim, dq = dn + dr, kvr = d->kv_rank, qr = d->q_rank, wc = kvr + dr;
  int aq = H * dq, akv = H * (dn + dv), ao = H * dv;
  rt_copy(save + L.x, x, (size_t)N * hid);
  rt_rmsnorm_fwd(N, hid, d->norm_eps, x, w + L.norm, 0.0f, save + L.h, save + L.rstd);
  if (qr) {
    ka_proj(N, hid, qr, save + L.h, w + L.wqa, NULL, save + L.qa);
    rt_rmsnorm_fwd(N, qr, d->latent_eps, save + L.qa, w + L.qan, 0.0f, save + L.qn, save + L.rq);
    ka_proj(N, qr, aq, save + L.qn, w + L.wqb, NULL, save + L.q);
  } else {
    ka_proj(N, hid, aq, save + L.h, w + L.wq, NULL, save + L.q);
  }
  ka_proj(N, hid, wc, save + L.h, w + L.wkva, NULL, save + L.ckv);
  km_copy(N, 1, kvr, RT_MLA_SAME, save + L.cp, kvr, 0, 0, save + L.ckv, wc, 0, 0);
  rt_rmsnorm_fwd(N, kvr, d->latent_eps, save + L.cp, w + L.kvan, 0.0f, save + L.c, save + L.rc);
  ka_proj(N, kvr, akv, save + L.c, w + L.wkvb, NULL, save + L.kv);

  /* the rotary parts in halves order, turned, then every head's query, key and padded value */
  float *qpe = rt_scratch((size_t)N * H * dr), *kpe = rt_scratch((size_t)N * dr);
  km_copy(N, H, dr, RT_MLA_HALVES, qpe, (long)H * dr, dr, 0, save + L.q, aq, dq, dn);
  km_copy(N, 1, dr, RT_MLA_HALVES, kpe, dr, 0, 0, save + L.ckv, wc, 0, kvr);
  km_rope(d, N, H, qpe, false);
  km_rope(d, N, 1, kpe, false);
  float *Q = save + L.Q, *K = save + L.K, *V = save + L.V;
  km_copy(N, H, dn, RT_MLA_SAME, Q, aq, dq, 0, save + L.q, aq, dq, 0);
  km_copy(N, H, dr, RT_MLA_SAME, Q, aq, dq, dn, qpe, (long)H * dr, dr, 0);
  km_copy(N, H, dn, RT_MLA_SAME, K, aq, dq, 0, save + L.kv, akv, dn + dv, 0);
  km_copy(N, H, dr, RT_MLA_SAME, K, aq, dq, dn, kpe, dr, 0, 0);
  km_copy(N, H, dv, RT_MLA_SAME, V, aq, dq, 0, save + L.kv, akv, dn + dv, dn);
  if (dq > dv) km_copy(N, H, dq - dv, RT_MLA_SAME, V, aq, dq, dv, NULL, 0, 0, 0);
  rt_scratch_free(kpe);
  rt_scratch_free(qpe);

  ka_shape sh = km_shape(d);
  float *P = rt_scratch((size_t)d->S * d->S);
  ka_core_fwd(&sh, Q, K, V, save + L.O, save + L.stat, P);
  rt_scratch_free(P);
  km_copy(N, H, dv, RT_MLA_SAME, save + L.ov, ao, dv, 0, save + L.O, aq, dq, 0);
  rt_copy(y, x, (size_t)N * hid);
  rt_gemm(false, false, N, hid, ao, 1.0f, save + L.ov, ao, w + L.wo, hid, 1.0f, y, hid);
}

/* B: dx (when not NULL) from dy. Pre: km_fwd ran on save. Post: save also holds dy, dh and the
 * gradients of every projection's output, all W needs. */
static void km_bwd_in(const rt_ldims *d, const float *w, float *save, const float *dy,
                      float *dx) {
  km_mla L = km_layout(d, NULL);
  int N = d->B * d->S, hid = d->hidden, H = d->heads, dn = d->nope_dim, dr = d->rope_dim;
  int dv = d->v_dim, dq = dn + dr, kvr = d->kv_rank, qr = d->q_rank, wc = kvr + dr;
  int aq = H * dq, akv = H * (dn + dv), ao = H * dv;
  rt_copy(save + L.dy, dy, (size_t)N * hid);
  float *dov = rt_scratch((size_t)N * ao), *dO = rt_scratch((size_t)N * aq);
  rt_gemm(false, true, N, ao, hid, 1.0f, dy, hid, w + L.wo, hid, 0.0f, dov, ao);
  km_copy(N, H, dv, RT_MLA_SAME, dO, aq, dq, 0, dov, ao, dv, 0);
  if (dq > dv) km_copy(N, H, dq - dv, RT_MLA_SAME, dO, aq, dq, dv, NULL, 0, 0, 0);
  rt_scratch_free(dov);
  float *dQ = rt_scratch((size_t)N * aq), *dK = rt_scratch((size_t)N * aq);
  float *dV = rt_scratch((size_t)N * aq), *P = rt_scratch(2 * (size_t)d->S * d->S);
  ka_shape sh = km_shape(d);
  ka_core_bwd(&sh, save + L.Q, save + L.K, save + L.V, save + L.stat, dO, dQ, dK, dV, P,
              P + (size_t)d->S * d->S);
  rt_scratch_free(P);

  /* back to the projections' layouts: the queries', k_nope's and v's, the shared k_pe's summed
   * over the heads; the rotary parts turned back and re-interleaved */
  float *qpe = rt_scratch((size_t)N * H * dr), *kpe = rt_scratch((size_t)N * dr);
  km_copy(N, H, dn, RT_MLA_SAME, save + L.dq, aq, dq, 0, dQ, aq, dq, 0);
  km_copy(N, H, dr, RT_MLA_SAME, qpe, (long)H * dr, dr, 0, dQ, aq, dq, dn);
  km_rope(d, N, H, qpe, true);
  km_copy(N, H, dr, RT_MLA_INTERLEAVE, save + L.dq, aq, dq, dn, qpe, (long)H * dr, dr, 0);
  km_copy(N, H, dn, RT_MLA_SAME, save + L.dkv, akv, dn + dv, 0, dK, aq, dq, 0);
  km_copy(N, H, dv, RT_MLA_SAME, save + L.dkv, akv, dn + dv, dn, dV, aq, dq, 0);
  RT_FOR(mla_head_sum, (size_t)N * dr, .H = H, .w = dr, .order = RT_MLA_SAME, .dld = dr,
         .doff = 0, .sld = aq, .shs = dq, .soff = dn, .src = dK, .dst = kpe);
  km_rope(d, N, 1, kpe, true);
  km_copy(N, 1, dr, RT_MLA_INTERLEAVE, save + L.dckv, wc, 0, kvr, kpe, dr, 0, 0);
  rt_scratch_free(kpe);
  rt_scratch_free(qpe);
  rt_scratch_free(dV);
  rt_scratch_free(dK);
  rt_scratch_free(dQ);
  rt_scratch_free(dO);

  /* the latent c: dc = dkv wkv_b^T, through its norm into the first kv_rank columns of dckv */
  rt_gemm(false, true, N, kvr, akv, 1.0f, save + L.dkv, akv, w + L.wkvb, akv, 0.0f, save + L.dc,
          kvr);
  float *dcp = rt_scratch((size_t)N * kvr);
  rt_rmsnorm_bwd_in(N, kvr, save + L.cp, w + L.kvan, 0.0f, save + L.rc, save + L.dc, dcp, false);
  km_copy(N, 1, kvr, RT_MLA_SAME, save + L.dckv, wc, 0, 0, dcp, kvr, 0, 0);
  rt_scratch_free(dcp);

  float *dh = save + L.dh;
  rt_gemm(false, true, N, hid, wc, 1.0f, save + L.dckv, wc, w + L.wkva, wc, 0.0f, dh, hid);
  if (qr) {
    rt_gemm(false, true, N, qr, aq, 1.0f, save + L.dq, aq, w + L.wqb, aq, 0.0f, save + L.dqn, qr);
    rt_rmsnorm_bwd_in(N, qr, save + L.qa, w + L.qan, 0.0f, save + L.rq, save + L.dqn, save + L.dqa,
                      false);
    rt_gemm(false, true, N, hid, qr, 1.0f, save + L.dqa, qr, w + L.wqa, qr, 1.0f, dh, hid);
  } else {
    rt_gemm(false, true, N, hid, aq, 1.0f, save + L.dq, aq, w + L.wq, aq, 1.0f, dh, hid);
  }
  if (!dx) return;
  rt_copy(dx, dy, (size_t)N * hid);
  rt_rmsnorm_bwd_in(N, hid, save + L.x, w + L.norm, 0.0f, save + L.rstd, dh, dx, true);
}

/* W: g += the weight gradients, from save alone. Pre: km_bwd_in ran on save. */
static void km_bwd_w(const rt_ldims *d, const float *w, const float *save, float *g) {
  (void)w;
  km_mla L = km_layout(d, NULL);
  int N = d->B * d->S, hid = d->hidden, H = d->heads, dn = d->nope_dim, dr = d->rope_dim;
  int dv = d->v_dim, dq = dn + dr, kvr = d->kv_rank, qr = d->q_rank, wc = kvr + dr;
  int aq = H * dq, akv = H * (dn + dv), ao = H * dv;
  rt_rmsnorm_bwd_w(N, hid, save + L.x, save + L.rstd, save + L.dh, g + L.norm);
  if (qr) {
    rt_gemm(true, false, hid, qr, N, 1.0f, save + L.h, hid, save + L.dqa, qr, 1.0f, g + L.wqa, qr);
    rt_rmsnorm_bwd_w(N, qr, save + L.qa, save + L.rq, save + L.dqn, g + L.qan);
    rt_gemm(true, false, qr, aq, N, 1.0f, save + L.qn, qr, save + L.dq, aq, 1.0f, g + L.wqb, aq);
  } else {
    rt_gemm(true, false, hid, aq, N, 1.0f, save + L.h, hid, save + L.dq, aq, 1.0f, g + L.wq, aq);
  }
  rt_gemm(true, false, hid, wc, N, 1.0f, save + L.h, hid, save + L.dckv, wc, 1.0f, g + L.wkva, wc);
  rt_rmsnorm_bwd_w(N, kvr, save + L.cp, save + L.rc, save + L.dc, g + L.kvan);
  rt_gemm(true, false, kvr, akv, N, 1.0f, save + L.c, kvr, save + L.dkv, akv, 1.0f, g + L.wkvb,
          akv);
  rt_gemm(true, false, ao, hid, N, 1.0f, save + L.ov, ao, save + L.dy, hid, 1.0f, g + L.wo, hid);
}

/* Dimensions: hidden, seq, heads, q_rank, kv_rank, nope_dim, rope_dim, v_dim, rope_theta,
 * norm_eps, latent_eps, YaRN's. At a scale K > 1 the head widths and the latents' ranks are
 * divided by K
 * (the rotary width stays even), the heads kept. */
static int km_dims(const rt_dims_in *in, rt_ldims *d, strbuf *err) {
  (void)err;
  int k = in->scale;
  rt_dims_tokens(in, BE_LP_MLA_HIDDEN, BE_LP_MLA_SEQ, d);
  d->heads = (int)rt_lp(in, BE_LP_MLA_HEADS, 0);
  double qr = rt_lp(in, BE_LP_MLA_Q_RANK, 0);
  d->q_rank = qr > 0 ? (int)rt_sdim(qr, k, 1, 1) : 0;
  d->kv_rank = (int)rt_sdim(rt_lp(in, BE_LP_MLA_KV_RANK, 0), k, 1, 1);
  d->nope_dim = (int)rt_sdim(rt_lp(in, BE_LP_MLA_NOPE_DIM, 0), k, 1, 1);
  d->rope_dim = (int)rt_sdim(rt_lp(in, BE_LP_MLA_ROPE_DIM, 0), k, 2, 2);
  d->v_dim = (int)rt_sdim(rt_lp(in, BE_LP_MLA_V_DIM, 0), k, 1, 1);
  d->causal = true;
  d->rope_theta = rt_lp(in, BE_LP_MLA_ROPE_THETA, 1e4);
  d->norm_eps = rt_lp(in, BE_LP_MLA_NORM_EPS, 1e-5);
  d->latent_eps = rt_lp(in, BE_LP_MLA_LATENT_EPS, 1e-6);
  d->yarn_factor = rt_lp(in, BE_LP_MLA_YARN_FACTOR, 1);
  d->yarn_orig = rt_lp(in, BE_LP_MLA_YARN_ORIG, 4096); /* positions are not scaled */
  d->yarn_beta_fast = rt_lp(in, BE_LP_MLA_YARN_BETA_FAST, 32);
  d->yarn_beta_slow = rt_lp(in, BE_LP_MLA_YARN_BETA_SLOW, 1);
  d->yarn_mscale = rt_lp(in, BE_LP_MLA_YARN_MSCALE, 1);
  d->yarn_mscale_all = rt_lp(in, BE_LP_MLA_YARN_MSCALE_ALL, 1);
  return 0;
}

/* The projections' GEMMs and the core's two products (scores over dq, values over dv). */
static double km_flops(const rt_ldims *d, double nw) {
  return rt_flops_gemm(d, nw) + 2.0 * d->B * d->S * (double)d->S * d->heads *
                                    (d->nope_dim + d->rope_dim + d->v_dim);
}

const rt_kernel rt_kernel_MLA = {BE_KIND_MLA, 0, km_dims, km_plan, km_fwd, km_bwd_in, km_bwd_w,
                                 km_flops};
