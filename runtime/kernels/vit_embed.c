/* vit_embed.c -- the "vit_embed" layer kind (kernels.h): a ViT's embeddings as CLIP's
 * CLIPVisionEmbeddings and pre_layrnorm compute them. Its input is pixels (the stream's input:
 * it is the model's first layer).
 *
 *   dims: B, patch p, channels C, image H = g * p (g patches a side), S = n + 1 tokens with
 *         n = g * g patches (at a scale: the first n patches of a grid of g * g, docs/runtime.md),
 *         hidden h, norm_eps; the input is B images of C x H x H pixels, as rows of H pixels
 *         (in_S = C * H, in_w = H: NCHW, torch's pixel_values).
 *   params, in order: "patch.w" [C, p * p, h] (the patch convolution's weight [h, C, p, p]
 *         transposed: a [C p p, h] matrix, uniform +-sqrt(3 / (C p p))), "class" [h], "pos" [S, h] (uniform +-0.5),
 *         "ln.w" [h] (1), "ln.b" [h] (0).
 *   U = the patches unfolded (row b * n + j: patch j of image b in raster order, columns
 *         c * p * p + dy * p + dx); E = U patch.w; e[b, 0] = class + pos[0],
 *         e[b, t] = E[b * n + t - 1] + pos[t] (t >= 1); y = LayerNorm(e) (ln.w, ln.b, norm_eps).
 *   A patch convolution without bias of stride = kernel = p is exactly that GEMM over the
 *   unfolded patches. */
#include <math.h>

#include "kernels.h"

/* Offsets of the parameters and of the saved state (floats); Np = B n, K = C p p, T = B S. */
typedef struct kv_emb {
  size_t pw, cls, pos, lnw, lnb; /* parameters */
  size_t u;                      /* F: the unfolded patches [Np, K] */
  size_t e;                      /* F: the LayerNorm's input [T, h] */
  size_t mean, rstd;             /* F: its statistics [T] each */
  size_t dy;                     /* B: the output gradient [T, h] */
  size_t de;                     /* B: the gradient of e [T, h] */
  size_t dE;                     /* B: that of the patch rows, packed [Np, h] */
  size_t save;                   /* floats of the save block */
} kv_emb;

/* Patch rows of one image (S - 1) and their width (C p p). */
static int kv_patches(const rt_ldims *d) { return d->S - 1; }
static int kv_width(const rt_ldims *d) { return d->channels * d->patch * d->patch; }

/* Fill p (when not NULL) and the offsets of a layer of valid dims d. */
static kv_emb kv_layout(const rt_ldims *d, rt_lplan *p) {
  rt_lplan tmp;
  if (!p) p = &tmp;
  p->npt = 0;
  kv_emb L;
  int h = d->hidden, K = kv_width(d);
  size_t off = 0;
  L.pw = off, rt_lplan_add(p, "patch.w", d->channels, d->patch * d->patch, h, RT_INIT_UNIFORM,
                           sqrtf(3.0f / (float)K));
  off += (size_t)K * h;
  L.cls = off, rt_lplan_add(p, "class", h, 0, 0, RT_INIT_UNIFORM, 0.5f), off += (size_t)h;
  L.pos = off, rt_lplan_add(p, "pos", d->S, h, 0, RT_INIT_UNIFORM, 0.5f);
  off += (size_t)d->S * h;
  L.lnw = off, rt_lplan_add(p, "ln.w", h, 0, 0, RT_INIT_CONST, 1.0f), off += (size_t)h;
  L.lnb = off, rt_lplan_add(p, "ln.b", h, 0, 0, RT_INIT_CONST, 0.0f);
  size_t Np = (size_t)d->B * kv_patches(d), T = (size_t)d->B * d->S, s = 0;
  L.u = s, s += Np * K;
  L.e = s, s += T * h;
  L.mean = s, s += T;
  L.rstd = s, s += T;
  L.dy = s, s += T * h;
  L.de = s, s += T * h;
  L.dE = s, s += Np * h;
  L.save = s;
  p->save_floats = s;
  p->out_w = h;
  return L;
}

/* Check d and fill p; -1 with the reason in err. */
static int kv_plan(const rt_ldims *d, rt_lplan *p, strbuf *err) {
  if (d->B < 1 || d->hidden < 1 || d->patch < 1 || d->channels < 1 || d->S < 2 ||
      d->image < d->patch || d->image % d->patch != 0) {
    strbuf_printf(err, "vit_embed needs B, hidden, patch, channels of at least 1, an image that "
                  "is a multiple of patch, and a patch");
    return -1;
  }
  int g = d->image / d->patch;
  if (kv_patches(d) > g * g) {
    strbuf_printf(err, "vit_embed has %d tokens, more than the %d patches of its image plus its "
                  "class token", d->S, g * g);
    return -1;
  }
  if (d->in_S != d->channels * d->image || d->in_w != d->image) {
    strbuf_printf(err, "vit_embed needs an input of %d rows of %d pixels, not %d of %d",
                  d->channels * d->image, d->image, d->in_S, d->in_w);
    return -1;
  }
  kv_layout(d, p);
  return 0;
}

/* F: y from the pixels x. Post: save holds u, e and the norm's statistics. */
static void kv_fwd(const rt_ldims *d, const float *w, const float *x, float *y, float *save) {
  kv_emb L = kv_layout(d, NULL);
  int h = d->hidden, K = kv_width(d), n = kv_patches(d), Np = d->B * n, T = d->B * d->S;
  float *s = save;
  RT_FOR(vit_unfold, (size_t)Np * K, .C = d->channels, .p = d->patch, .g = d->image / d->patch,
         .n = n, .x = x, .u = s + L.u);
  float *E = rt_scratch((size_t)Np * h);
  rt_gemm(false, false, Np, h, K, 1.0f, s + L.u, K, w + L.pw, h, 0.0f, E, h);
  RT_FOR(vit_tokens, (size_t)T * h, .S = d->S, .h = h, .first = w + L.cls, .rows = E,
         .pos = w + L.pos, .e = s + L.e);
  rt_scratch_free(E);
  rt_layernorm_fwd(T, h, d->norm_eps, s + L.e, w + L.lnw, w + L.lnb, y, s + L.mean, s + L.rstd);
}

/* B: dx (the pixels' gradient, when not NULL) from dy. Post: save also holds dy, de, dE. */
static void kv_bwd_in(const rt_ldims *d, const float *w, float *save, const float *dy,
                      float *dx) {
  kv_emb L = kv_layout(d, NULL);
  int h = d->hidden, K = kv_width(d), n = kv_patches(d), Np = d->B * n, T = d->B * d->S;
  float *s = save;
  rt_copy(s + L.dy, dy, (size_t)T * h);
  rt_layernorm_bwd_in(T, h, s + L.e, w + L.lnw, s + L.mean, s + L.rstd, dy, s + L.de, false);
  RT_FOR(vit_drop_first, (size_t)Np * h, .S = d->S, .h = h, .e = s + L.de, .rows = s + L.dE);
  if (!dx) return;
  float *dU = rt_scratch((size_t)Np * K);
  rt_gemm(false, true, Np, K, h, 1.0f, s + L.dE, h, w + L.pw, h, 0.0f, dU, K);
  RT_FOR(vit_fold, (size_t)d->B * d->in_S * d->in_w, .C = d->channels, .p = d->patch,
         .g = d->image / d->patch, .n = n, .du = dU, .dx = dx);
  rt_scratch_free(dU);
}

/* W: g += the weight gradients. Pre: kv_bwd_in ran on save. */
static void kv_bwd_w(const rt_ldims *d, const float *w, const float *save, float *g) {
  (void)w;
  kv_emb L = kv_layout(d, NULL);
  int h = d->hidden, K = kv_width(d), Np = d->B * kv_patches(d), T = d->B * d->S;
  const float *s = save;
  rt_layernorm_bwd_w(T, h, s + L.e, s + L.mean, s + L.rstd, s + L.dy, g + L.lnw, g + L.lnb);
  rt_gemm(true, false, K, h, Np, 1.0f, s + L.u, K, s + L.dE, h, 1.0f, g + L.pw, h);
  /* the positions' gradient sums de over the images; the class token's is position 0's */
  size_t Sh = (size_t)d->S * h;
  RT_FOR(col_sum, Sh, .rows = d->B, .n = (int)Sh, .m = s + L.de, .g = g + L.pos);
  RT_FOR(col_sum, (size_t)h, .rows = d->B, .n = (int)Sh, .m = s + L.de, .g = g + L.cls);
}

/* Dimensions: hidden (rt_sdim), patch and channels as written, the image's patch grid and its
 * tokens. As written (scale 1): (image / patch)^2 patches + 1 class token. At scale k the
 * tokens are the vit's ((image / patch)^2 + 1 scaled, at least 4), the patches the first
 * tokens - 1 of the smallest square grid holding them. Refused: a layer that is not the model's
 * first (its input is the stream's pixels). */
static int kv_dims(const rt_dims_in *in, rt_ldims *d, strbuf *err) {
  if (!in->first) {
    strbuf_printf(err, "vit_embed takes the stream's pixels: it must be the model's first layer");
    return -1;
  }
  int k = in->scale;
  d->hidden = (int)rt_sdim(rt_lp(in, BE_LP_VIT_EMBED_HIDDEN, 0), k, 4, 1);
  double patch = rt_lp(in, BE_LP_VIT_EMBED_PATCH, 14), image = rt_lp(in, BE_LP_VIT_EMBED_IMAGE, 336);
  double channels = rt_lp(in, BE_LP_VIT_EMBED_CHANNELS, 3);
  if (!(patch >= 1 && patch <= 4096 && channels >= 1 && channels <= 4096 && image >= patch &&
        image <= RT_MAX_DIM)) {
    strbuf_printf(err, "vit_embed needs 1 <= patch <= image, patch and channels at most 4096");
    return -1;
  }
  long side = (long)floor(image / patch), n = side * side;
  if (k > 1) {
    long t = rt_sdim((double)n + 1, k, 4, 1);
    n = t - 1;
    side = (long)ceil(sqrt((double)n));
    while (side * side < n) side++;
  }
  d->patch = (int)patch;
  d->channels = (int)channels;
  d->image = (int)(side * d->patch);
  d->S = (int)(n + 1);
  d->norm_eps = rt_lp(in, BE_LP_VIT_EMBED_NORM_EPS, 1e-5);
  d->in_S = d->channels * d->image;
  d->in_w = d->image;
  return 0;
}

/* The patch projection's GEMM: 2 x patches x (C p p) x hidden. */
static double kv_flops(const rt_ldims *d, double nw) {
  (void)nw;
  return 2.0 * d->B * kv_patches(d) * (double)kv_width(d) * d->hidden;
}

const rt_kernel rt_kernel_VIT_EMBED = {BE_KIND_VIT_EMBED, 0, kv_dims, kv_plan, kv_fwd,
                                       kv_bwd_in, kv_bwd_w, kv_flops};
