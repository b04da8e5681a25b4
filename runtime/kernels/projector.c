/* projector.c -- the "projector" layer kind (kernels.h): LLaVA's multi_modal_projector over the
 * vision tower's features.
 *
 *   dims: B, in_S (the tokens of an image it receives, the class token first), in_w (their
 *         width, in_hidden), S = in_S - 1 with drop_class (the class token dropped: LLaVA's
 *         vision_feature_select_strategy "default") or in_S ("full"), hidden h (the text
 *         model's), act, vision_norm.
 *   params, in order: "w1" [in_w, h] (uniform +-sqrt(3 / in_w)), "b1" [h] (0), "w2" [h, h]
 *         (uniform +-sqrt(3 / h)), "b2" [h] (0); with vision_norm also "vision_norm.w" [in_w] (1)
 *         and "vision_norm.b" [in_w] (0): the vision tower's final LayerNorm (CLIP's
 *         post_layernorm), which LLaVA holds but does not use: never read, no gradient.
 *   X = x without each image's first token (drop_class) or x; a = X w1 + b1; z = act(a);
 *   y = z w2 + b2. */
#include <math.h>

#include "kernels.h"

/* Offsets of the parameters and of the saved state (floats); N = B S rows projected. */
typedef struct kp_proj {
  size_t w1, b1, w2, b2; /* parameters (vision_norm's after them) */
  size_t x;              /* F: the rows projected X [N, in_w] */
  size_t a, z;           /* F: pre-activation and activation [N, h] each */
  size_t dy;             /* B: the output gradient [N, h] */
  size_t da;             /* B: the gradient of a [N, h] */
  size_t save;           /* floats of the save block */
} kp_proj;

/* Fill p (when not NULL) and the offsets of a layer of valid dims d. */
static kp_proj kp_layout(const rt_ldims *d, rt_lplan *p) {
  rt_lplan tmp;
  if (!p) p = &tmp;
  p->npt = 0;
  kp_proj L;
  int h = d->hidden, v = d->in_w;
  size_t off = 0;
  L.w1 = off, rt_lplan_add(p, "w1", v, h, 0, RT_INIT_UNIFORM, sqrtf(3.0f / (float)v));
  off += (size_t)v * h;
  L.b1 = off, rt_lplan_add(p, "b1", h, 0, 0, RT_INIT_CONST, 0.0f), off += (size_t)h;
  L.w2 = off, rt_lplan_add(p, "w2", h, h, 0, RT_INIT_UNIFORM, sqrtf(3.0f / (float)h));
  off += (size_t)h * h;
  L.b2 = off, rt_lplan_add(p, "b2", h, 0, 0, RT_INIT_CONST, 0.0f);
  if (d->vision_norm) {
    rt_lplan_add(p, "vision_norm.w", v, 0, 0, RT_INIT_CONST, 1.0f);
    rt_lplan_add(p, "vision_norm.b", v, 0, 0, RT_INIT_CONST, 0.0f);
  }
  size_t N = (size_t)d->B * d->S, s = 0;
  L.x = s, s += N * v;
  L.a = s, s += N * h;
  L.z = s, s += N * h;
  L.dy = s, s += N * h;
  L.da = s, s += N * h;
  L.save = s;
  p->save_floats = s;
  p->out_w = h;
  return L;
}

/* Check d and fill p; -1 with the reason in err. */
static int kp_plan(const rt_ldims *d, rt_lplan *p, strbuf *err) {
  if (d->B < 1 || d->hidden < 1 || d->in_w < 1 || d->S < 1) {
    strbuf_printf(err, "projector needs B, hidden, in_hidden and tokens of at least 1");
    return -1;
  }
  if (d->in_S != d->S + (d->drop_class ? 1 : 0)) {
    strbuf_printf(err, "projector receives %d tokens and projects %d: drop_class drops one, "
                  "else none", d->in_S, d->S);
    return -1;
  }
  if ((unsigned)d->act >= RT_ACT_COUNT) {
    strbuf_printf(err, "projector has an unknown activation %d", (int)d->act);
    return -1;
  }
  kp_layout(d, p);
  return 0;
}

/* Y [N, out] = X [N, in] W [in, out] + bias on every row. */
static void kp_linear(int N, int in, int out, const float *X, const float *W, const float *bias,
                      float *Y) {
  RT_FOR(rows_set, (size_t)N * out, .n = out, .v = bias, .y = Y);
  rt_gemm(false, false, N, out, in, 1.0f, X, in, W, out, 1.0f, Y, out);
}

/* F: y from x. Post: save holds X, a and z. */
static void kp_fwd(const rt_ldims *d, const float *w, const float *x, float *y, float *save) {
  kp_proj L = kp_layout(d, NULL);
  int h = d->hidden, v = d->in_w, N = d->B * d->S;
  float *s = save;
  if (d->drop_class)
    RT_FOR(vit_drop_first, (size_t)N * v, .S = d->in_S, .h = v, .e = x, .rows = s + L.x);
  else
    rt_copy(s + L.x, x, (size_t)N * v);
  kp_linear(N, v, h, s + L.x, w + L.w1, w + L.b1, s + L.a);
  RT_FOR(ffn_act, (size_t)N * h, .act = d->act, .gated = false, .a = s + L.a, .u = NULL,
         .z = s + L.z);
  kp_linear(N, h, h, s + L.z, w + L.w2, w + L.b2, y);
}

/* B: dx (when not NULL) from dy; a dropped class token's gradient is 0. Post: save also holds
 * dy and da. */
static void kp_bwd_in(const rt_ldims *d, const float *w, float *save, const float *dy,
                      float *dx) {
  kp_proj L = kp_layout(d, NULL);
  int h = d->hidden, v = d->in_w, N = d->B * d->S;
  float *s = save;
  rt_copy(s + L.dy, dy, (size_t)N * h);
  rt_gemm(false, true, N, h, h, 1.0f, dy, h, w + L.w2, h, 0.0f, s + L.da, h);
  RT_FOR(ffn_bwd_act, (size_t)N * h, .act = d->act, .gated = false, .a = s + L.a, .u = NULL,
         .dz = s + L.da, .da = s + L.da, .du = NULL);
  if (!dx) return;
  if (!d->drop_class) {
    rt_gemm(false, true, N, v, h, 1.0f, s + L.da, h, w + L.w1, h, 0.0f, dx, v);
    return;
  }
  float *dX = rt_scratch((size_t)N * v);
  rt_gemm(false, true, N, v, h, 1.0f, s + L.da, h, w + L.w1, h, 0.0f, dX, v);
  RT_FOR(vit_tokens, (size_t)d->B * d->in_S * v, .S = d->in_S, .h = v, .first = NULL,
         .rows = dX, .pos = NULL, .e = dx);
  rt_scratch_free(dX);
}

/* W: g += the two linear layers' gradients (vision_norm's get none). Pre: kp_bwd_in ran. */
static void kp_bwd_w(const rt_ldims *d, const float *w, const float *save, float *g) {
  (void)w;
  kp_proj L = kp_layout(d, NULL);
  int h = d->hidden, v = d->in_w, N = d->B * d->S;
  const float *s = save;
  rt_gemm(true, false, v, h, N, 1.0f, s + L.x, v, s + L.da, h, 1.0f, g + L.w1, h);
  RT_FOR(col_sum, (size_t)h, .rows = N, .n = h, .m = s + L.da, .g = g + L.b1);
  rt_gemm(true, false, h, h, N, 1.0f, s + L.z, h, s + L.dy, h, 1.0f, g + L.w2, h);
  RT_FOR(col_sum, (size_t)h, .rows = N, .n = h, .m = s + L.dy, .g = g + L.b2);
}

/* Dimensions: hidden and in_hidden (rt_sdim, as the layers around it), tokens (scaled as the
 * vit's), act, drop_class, vision_norm. */
static int kp_dims(const rt_dims_in *in, rt_ldims *d, strbuf *err) {
  (void)err;
  int k = in->scale;
  d->hidden = (int)rt_sdim(rt_lp(in, BE_LP_PROJECTOR_HIDDEN, 0), k, 4, 1);
  d->in_w = (int)rt_sdim(rt_lp(in, BE_LP_PROJECTOR_IN_HIDDEN, 0), k, 4, 1);
  d->in_S = (int)rt_sdim(rt_lp(in, BE_LP_PROJECTOR_TOKENS, 0), k, 4, 1);
  d->drop_class = rt_lp(in, BE_LP_PROJECTOR_DROP_CLASS, 1) != 0;
  d->vision_norm = rt_lp(in, BE_LP_PROJECTOR_VISION_NORM, 0) != 0;
  d->S = d->in_S - (d->drop_class ? 1 : 0);
  d->act = (rt_act)(int)rt_lp(in, BE_LP_PROJECTOR_ACT, RT_ACT_GELU);
  d->gated = false;
  return 0;
}

/* The two GEMMs: 2 x rows x (in_hidden + hidden) x hidden. */
static double kp_flops(const rt_ldims *d, double nw) {
  (void)nw;
  return 2.0 * d->B * d->S * ((double)d->in_w + d->hidden) * d->hidden;
}

const rt_kernel rt_kernel_PROJECTOR = {BE_KIND_PROJECTOR, 0, kp_dims, kp_plan, kp_fwd,
                                       kp_bwd_in, kp_bwd_w, kp_flops};
