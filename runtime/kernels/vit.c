/* vit.c -- the "vit" layer kind (kernels.h), on the attention core of attn.h. N = B*S tokens;
 * weights are [in, out] (y = x @ W).
 *
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
 *              z = act(a) * (h2 w3 + b3)); y = x1 + z w2 + b2. LayerNorm eps norm_eps;
 *              act is rt_act_fwd (gelu: the exact erf form).
 *              unused (LLaVA's encoder layers after vision_feature_layer): the same
 *              parameters, held and saved, but y = x, dx = dy, no weight gradient, no state. */
#include "attn.h"

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
  p->save_floats = d->unused ? 0 : s;
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
  if ((unsigned)d->act >= RT_ACT_COUNT) {
    strbuf_printf(err, "vit has an unknown activation %d", (int)d->act);
    return -1;
  }
  ka_vit_layout(d, p);
  return 0;
}

/* The core shape of a vit layer: every head its own kv head, every key visible. */
static ka_shape ka_vit_shape(const rt_ldims *d) {
  ka_shape sh = {d->B, d->S, d->heads, d->heads, d->head_dim, false, 0,
                 (float)(1.0 / sqrt((double)d->head_dim)), 0.0f};
  return sh;
}

/* F: the encoder layer y from x. Post: save holds every F slot of ka_vit. */
static void ka_vit_fwd(const rt_ldims *d, const float *w, const float *x, float *y,
                       float *save) {
  if (d->unused) { /* held, not computed */
    rt_copy(y, x, (size_t)d->B * d->S * d->hidden);
    return;
  }
  ka_vit L = ka_vit_layout(d, NULL);
  ka_shape sh = ka_vit_shape(d);
  int N = d->B * d->S, hid = d->hidden, A = d->heads * d->head_dim, F = d->ffn;
  size_t nh = (size_t)N * hid, nf = (size_t)N * F;
  float *s = save;
  rt_copy(s + L.x, x, nh);
  rt_layernorm_fwd(N, hid, d->norm_eps, x, w + L.ln1w, w + L.ln1b, s + L.h, s + L.mean1,
                   s + L.rstd1);
  ka_proj(N, hid, A, s + L.h, w + L.wq, w + L.bq, s + L.q);
  ka_proj(N, hid, A, s + L.h, w + L.wk, w + L.bk, s + L.k);
  ka_proj(N, hid, A, s + L.h, w + L.wv, w + L.bv, s + L.v);
  float *P = rt_scratch((size_t)d->S * d->S);
  ka_core_fwd(&sh, s + L.q, s + L.k, s + L.v, s + L.o, s + L.stat, P);
  rt_scratch_free(P);
  float *x1 = s + L.x1;
  ka_proj(N, A, hid, s + L.o, w + L.wo, w + L.bo, x1);
  RT_FOR(add, nh, .x = x, .y = x1);
  rt_layernorm_fwd(N, hid, d->norm_eps, x1, w + L.ln2w, w + L.ln2b, s + L.h2, s + L.mean2,
                   s + L.rstd2);
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
  if (d->unused) {
    if (dx) rt_copy(dx, dy, (size_t)d->B * d->S * d->hidden);
    return;
  }
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
  if (d->unused) return; /* its weights get no gradient */
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

/* Dimensions: hidden, heads and head_dim (rt_heads_dims, kv_heads = heads), its tokens
 * ((image / patch)^2 + 1 by default), ffn, gated, act, norm_eps, unused; never causal. */
static int ka_vit_dims(const rt_dims_in *in, rt_ldims *d, strbuf *err) {
  (void)err;
  int k = in->scale;
  d->hidden = (int)rt_sdim(rt_lp(in, BE_LP_VIT_HIDDEN, 0), k, 4, 1);
  double hidden = rt_lp(in, BE_LP_VIT_HIDDEN, 0);
  double heads = rt_lp(in, BE_LP_VIT_HEADS, 0);
  double hd = rt_lp(in, BE_LP_VIT_HEAD_DIM, heads > 0 ? hidden / heads : 0);
  if (heads < 1) { /* the plan says why */
    d->heads = d->kv_heads = (int)heads;
    d->head_dim = (int)rt_sdim(hd, k, 2, 2);
  } else {
    rt_heads_dims(heads, heads, hd, k, 1, &d->heads, &d->kv_heads, &d->head_dim);
  }
  double patch = rt_lp(in, BE_LP_VIT_PATCH, 14), image = rt_lp(in, BE_LP_VIT_IMAGE, 336);
  double tokens = rt_lp(in, BE_LP_VIT_TOKENS, floor(image / patch) * floor(image / patch) + 1);
  d->S = (int)rt_sdim(tokens, k, 4, 1);
  d->ffn = (int)rt_sdim(rt_lp(in, BE_LP_VIT_FFN, 0), k, 1, 1);
  d->gated = rt_lp(in, BE_LP_VIT_GATED, 0) != 0;
  d->act = (rt_act)(int)rt_lp(in, BE_LP_VIT_ACT, RT_ACT_GELU);
  d->norm_eps = rt_lp(in, BE_LP_VIT_NORM_EPS, 1e-5);
  d->unused = rt_lp(in, BE_LP_VIT_UNUSED, 0) != 0;
  d->causal = false;
  d->in_S = d->S;
  d->in_w = d->hidden;
  return 0;
}

/* ka_flops, or 0 for an unused layer. */
static double ka_vit_flops(const rt_ldims *d, double nw) { return d->unused ? 0 : ka_flops(d, nw); }

const rt_kernel rt_kernel_VIT = {BE_KIND_VIT, 0, ka_vit_dims, ka_vit_plan, ka_vit_fwd,
                                 ka_vit_bwd_in, ka_vit_bwd_w, ka_vit_flops};
