/* mlp.c -- the "mlp" layer kind (kernels.h): a pre-norm residual feed-forward block, on the
 * feed-forward block it shares with moe and vit (ffn.h).
 *
 * Definition. Dimensions: hidden (= in_w = out_w), ffn, gated, act, B, S; N = B * S tokens, token
 * t of sequence b is row b * S + t. Parameters, in layout order:
 *   "norm" [hidden]       RMSNorm weight, constant 1 (named "pre_norm" with post_norm: Gemma's
 *                         pre_feedforward_layernorm, beside its post_feedforward_layernorm)
 *   "w1"   [hidden, ffn]  uniform in +-sqrt(3 / hidden)
 *   "w3"   [hidden, ffn]  (gated only) uniform in +-sqrt(3 / hidden)
 *   "w2"   [ffn, hidden]  uniform in +-0.5 * sqrt(3 / ffn)
 *   "post_norm" [hidden]  (post_norm only) RMSNorm weight of the output, constant 1 (0 with
 *                         norm_plus_one)
 * Forward: h = RMSNorm(x) * norm (rt_rmsnorm_fwd, eps norm_eps; * (1 + norm) with
 *   norm_plus_one, Gemma); a = h w1;
 *   gated: z = act(a) * (h w3)  (SwiGLU for silu, GeGLU for gelu);  plain: z = act(a);
 *   y = x + z w2; with post_norm y = x + RMSNorm(z w2) * post_norm (Gemma's sandwich norm).
 * Split backward: bwd_in computes dh and dx and leaves dy, dh, da (and du = dL/d(h w3)) in the
 * save block; bwd_w accumulates the gradients of norm, w1, w3, w2 from the save block only.
 * Every projection goes through rt_gemm (BLAS); reductions of the norm run in double. */
#include <math.h>

#include "ffn.h"

/* ---- The mlp kernel --------------------------------------------------------------------------- */

/* Offsets (in floats) of the parts of an mlp save block, and its size. */
typedef struct mlp_layout {
  size_t x;     /* N x hidden: the layer's input (fwd) */
  size_t rstd;  /* N: 1 / rms of each row (fwd) */
  size_t h;     /* N x hidden: normed input (fwd) */
  size_t a;     /* N x ffn: h w1 (fwd) */
  size_t u;     /* N x ffn: h w3, gated only (fwd) */
  size_t z;     /* N x ffn: act(a) [* u] (fwd) */
  size_t dy;    /* N x hidden: gradient of the output (bwd_in) */
  size_t dh;    /* N x hidden: gradient of h (bwd_in) */
  size_t da;    /* N x ffn: gradient of a (bwd_in) */
  size_t du;    /* N x ffn: gradient of u, gated only (bwd_in) */
  size_t o;     /* N x hidden, post_norm only: z w2 (fwd) */
  size_t rstd2; /* N, post_norm only: 1 / rms of each row of o (fwd) */
  size_t dout;  /* N x hidden, post_norm only: gradient of o (bwd_in) */
  size_t total; /* floats of the whole block */
} mlp_layout;

/* The save layout for dimensions d. Pre: d passed mlp_plan. */
static mlp_layout mlp_layout_of(const rt_ldims *d) {
  size_t N = (size_t)d->B * d->S, nh = N * d->hidden, nf = N * d->ffn, uf = d->gated ? nf : 0;
  size_t pn = d->post_norm ? 1 : 0; /* the post norm's state only with post_norm */
  mlp_layout l;
  l.x = 0;
  l.rstd = l.x + nh;
  l.h = l.rstd + N;
  l.a = l.h + nh;
  l.u = l.a + nf;
  l.z = l.u + uf;
  l.dy = l.z + nf;
  l.dh = l.dy + nh;
  l.da = l.dh + nh;
  l.du = l.da + nf;
  l.o = l.du + uf;
  l.rstd2 = l.o + pn * nh;
  l.dout = l.rstd2 + pn * N;
  l.total = l.dout + pn * nh;
  return l;
}

/* The feed-forward shape of dimensions d. */
static rt_ffn mlp_ffn(const rt_ldims *d) {
  rt_ffn f = {d->hidden, d->ffn, d->gated, d->act};
  return f;
}

/* Check d and fill p: see the file comment. Returns 0, or -1 with the reason appended to err. */
static int mlp_plan(const rt_ldims *d, rt_lplan *p, strbuf *err) {
  if (d->B <= 0 || d->S <= 0 || d->hidden <= 0 || d->ffn <= 0) {
    strbuf_printf(err, "mlp needs positive B, S, hidden and ffn (got %d, %d, %d, %d)", d->B, d->S,
                  d->hidden, d->ffn);
    return -1;
  }
  if (d->in_w != 0 && d->in_w != d->hidden) {
    strbuf_printf(err, "mlp input width %d differs from hidden %d", d->in_w, d->hidden);
    return -1;
  }
  if (d->in_S != 0 && d->in_S != d->S) {
    strbuf_printf(err, "mlp input tokens %d differ from its tokens %d", d->in_S, d->S);
    return -1;
  }
  if ((int)d->act < 0 || (int)d->act >= RT_ACT_COUNT) {
    strbuf_printf(err, "mlp activation %d unknown", (int)d->act);
    return -1;
  }
  int H = d->hidden, F = d->ffn;
  float s1 = sqrtf(3.0f / H), s2 = 0.5f * sqrtf(3.0f / F);
  p->npt = 0;
  float one = 1.0f - d->norm_shift; /* a norm's weight that starts as the identity */
  rt_lplan_add(p, d->post_norm ? "pre_norm" : "norm", H, 0, 0, RT_INIT_CONST, one);
  rt_lplan_add(p, "w1", H, F, 0, RT_INIT_UNIFORM, s1);
  if (d->gated) rt_lplan_add(p, "w3", H, F, 0, RT_INIT_UNIFORM, s1);
  rt_lplan_add(p, "w2", F, H, 0, RT_INIT_UNIFORM, s2);
  if (d->post_norm) rt_lplan_add(p, "post_norm", H, 0, 0, RT_INIT_CONST, one);
  p->save_floats = mlp_layout_of(d).total;
  p->out_w = H;
  return 0;
}

/* Parameter pointers of an mlp layer within w (or its gradient g). */
typedef struct mlp_params {
  float *norm; /* [hidden] */
  float *w1;   /* [hidden, ffn] */
  float *w3;   /* [hidden, ffn], NULL when not gated */
  float *w2;   /* [ffn, hidden] */
  float *post; /* [hidden], NULL without post_norm */
} mlp_params;

/* Split w (the plan's layout) into its tensors. */
static mlp_params mlp_params_of(const rt_ldims *d, const float *w) {
  size_t H = d->hidden, HF = H * d->ffn;
  float *base = (float *)w;
  mlp_params m;
  m.norm = base;
  m.w1 = base + H;
  m.w3 = d->gated ? m.w1 + HF : NULL;
  m.w2 = m.w1 + (d->gated ? 2 : 1) * HF;
  m.post = d->post_norm ? m.w2 + HF : NULL;
  return m;
}

/* F: y = x + FFN(RMSNorm(x) * norm) (post_norm: x + RMSNorm(FFN(.)) * post_norm). Pre: save
 * holds save_floats. Post: save has x, rstd, h, a, u, z (post_norm: o, rstd2). x and y may be
 * the same array. */
static void mlp_fwd(const rt_ldims *d, const float *w, const float *x, float *y, float *save) {
  mlp_layout l = mlp_layout_of(d);
  mlp_params m = mlp_params_of(d, w);
  rt_ffn f = mlp_ffn(d);
  int N = d->B * d->S;
  size_t nh = (size_t)N * d->hidden;
  rt_copy(save + l.x, x, nh);
  rt_rmsnorm_fwd(N, d->hidden, d->norm_eps, save + l.x, m.norm, d->norm_shift, save + l.h,
                 save + l.rstd);
  if (!d->post_norm) {
    rt_copy(y, save + l.x, nh);
    rt_ffn_fwd(&f, N, save + l.h, m.w1, m.w3, m.w2, save + l.a, save + l.u, save + l.z, y, 1.0f);
    return;
  }
  rt_ffn_fwd(&f, N, save + l.h, m.w1, m.w3, m.w2, save + l.a, save + l.u, save + l.z, save + l.o,
             0.0f);
  rt_rmsnorm_fwd(N, d->hidden, d->norm_eps, save + l.o, m.post, d->norm_shift, y, save + l.rstd2);
  RT_FOR(add, nh, .x = save + l.x, .y = y);
}

/* B: dz = do w2^T (do = dy, or with post_norm the post norm's input gradient of dy); da = dz *
 * act'(a) [* u], du = dz * act(a); dh = da w1^T [+ du w3^T]; dx = dy + the RMSNorm input
 * gradient of dh.
 * Pre: mlp_fwd ran on save. Post: save has dy, dh, da, du (post_norm: dout); dx (when not NULL)
 * written; dx and dy may be the same array. */
static void mlp_bwd_in(const rt_ldims *d, const float *w, float *save, const float *dy,
                       float *dx) {
  mlp_layout l = mlp_layout_of(d);
  mlp_params m = mlp_params_of(d, w);
  rt_ffn f = mlp_ffn(d);
  int N = d->B * d->S, H = d->hidden, F = d->ffn;
  size_t nh = (size_t)N * H;
  rt_copy(save + l.dy, dy, nh);
  size_t dout = l.dy; /* the gradient of z w2 */
  if (d->post_norm) {
    rt_rmsnorm_bwd_in(N, H, save + l.o, m.post, d->norm_shift, save + l.rstd2, save + l.dy,
                      save + l.dout, false);
    dout = l.dout;
  }
  /* dz is built in the da slot, then turned into da in place (elementwise) */
  rt_gemm(false, true, N, F, H, 1.0f, save + dout, H, m.w2, H, 0.0f, save + l.da, F);
  rt_ffn_bwd_act(&f, N, save + l.a, save + l.u, save + l.da, save + l.da, save + l.du);
  rt_ffn_bwd_h(&f, N, m.w1, m.w3, save + l.da, save + l.du, save + l.dh, 0.0f);
  if (dx) {
    rt_copy(dx, save + l.dy, nh);
    rt_rmsnorm_bwd_in(N, H, save + l.x, m.norm, d->norm_shift, save + l.rstd, save + l.dh, dx,
                      true);
  }
}

/* W: g += the gradients of norm, w1, w3, w2 (and post_norm). Pre: mlp_bwd_in ran on save. Reads
 * save only. */
static void mlp_bwd_w(const rt_ldims *d, const float *w, const float *save, float *g) {
  (void)w;
  mlp_layout l = mlp_layout_of(d);
  mlp_params gp = mlp_params_of(d, g);
  rt_ffn f = mlp_ffn(d);
  int N = d->B * d->S;
  rt_rmsnorm_bwd_w(N, d->hidden, save + l.x, save + l.rstd, save + l.dh, gp.norm);
  rt_ffn_bwd_w(&f, N, save + l.h, save + l.da, save + l.du, save + l.z,
               save + (d->post_norm ? l.dout : l.dy), gp.w1, gp.w3, gp.w2);
  if (d->post_norm)
    rt_rmsnorm_bwd_w(N, d->hidden, save + l.o, save + l.rstd2, save + l.dy, gp.post);
}

/* Dimensions: hidden, seq, ffn, gated, act, norm_eps, norm_plus_one, post_norm. */
static int mlp_dims(const rt_dims_in *in, rt_ldims *d, strbuf *err) {
  (void)err;
  rt_dims_tokens(in, BE_LP_MLP_HIDDEN, BE_LP_MLP_SEQ, d);
  d->ffn = (int)rt_sdim(rt_lp(in, BE_LP_MLP_FFN, 0), in->scale, 1, 1);
  d->gated = rt_lp(in, BE_LP_MLP_GATED, 1) != 0;
  d->act = (rt_act)(int)rt_lp(in, BE_LP_MLP_ACT, RT_ACT_SILU);
  d->norm_eps = rt_lp(in, BE_LP_MLP_NORM_EPS, 1e-5);
  d->norm_shift = rt_lp(in, BE_LP_MLP_NORM_PLUS1, 0) != 0 ? 1.0f : 0.0f;
  d->post_norm = rt_lp(in, BE_LP_MLP_POST_NORM, 0) != 0;
  return 0;
}

const rt_kernel rt_kernel_MLP = {BE_KIND_MLP, 0, mlp_dims, mlp_plan, mlp_fwd, mlp_bwd_in,
                                 mlp_bwd_w, rt_flops_gemm};
