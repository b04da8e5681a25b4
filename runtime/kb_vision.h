/* kb_vision.h -- the element-wise bodies of the vision kinds (kernels/vit_embed.c,
 * kernels/projector.c), see kdev.h and bodies.def: the unfolding of an image's pixels into patch
 * rows and its transpose, the assembly of a ViT's tokens (a first token, then packed rows, plus
 * positions), and the packing of every token but each image's first. Every body writes only what
 * its own index owns. */
#ifndef OCTO_RT_KB_VISION_H
#define OCTO_RT_KB_VISION_H

#include "kb_common.h"

/* Element i of the patch rows U [B * n, C * p * p]: row b * n + j for the j-th patch in raster
 * order (py = j / g, px = j % g), column c * p * p + dy * p + dx (torch's Conv2d weight order
 * [out, C, p, p] flattened) is pixel x[b, c, py * p + dy, px * p + dx] of the images
 * x [B, C, H, H] (H = g * p); the first n <= g * g patches of each image are taken (all of
 * them as written; fewer at a scale, docs/runtime.md). */
typedef struct rt_b_vit_unfold_a {
  int C, p, g, n;    /* channels, patch side, patches per image side, patches taken */
  const float *x;    /* B x C x H x H pixels */
  float *u;          /* B * n x C * p * p patch rows */
} rt_b_vit_unfold_a;
RT_BODY_FN(vit_unfold) {
  long k = (long)p->C * p->p * p->p, r = i / k, col = i % k;
  long b = r / p->n, py = r % p->n / p->g, px = r % p->n % p->g;
  long c = col / ((long)p->p * p->p), dy = col / p->p % p->p, dx = col % p->p;
  long H = (long)p->g * p->p;
  p->u[i] = p->x[((b * p->C + c) * H + py * p->p + dy) * H + px * p->p + dx];
}

/* Element i of the pixels' gradient dx [B, C, H, H]: the element of du (the patch rows'
 * gradient, vit_unfold's layout) that pixel went to (each pixel is in exactly one patch), 0 for
 * a pixel of a patch not taken. */
typedef struct rt_b_vit_fold_a {
  int C, p, g, n;    /* channels, patch side, patches per image side, patches taken */
  const float *du;   /* B * n x C * p * p */
  float *dx;         /* B x C x H x H */
} rt_b_vit_fold_a;
RT_BODY_FN(vit_fold) {
  long H = (long)p->g * p->p, b = i / ((long)p->C * H * H), c = i / (H * H) % p->C;
  long yy = i / H % H, xx = i % H, j = yy / p->p * p->g + xx / p->p;
  long col = (c * p->p + yy % p->p) * p->p + xx % p->p;
  p->dx[i] = j < p->n ? p->du[(b * p->n + j) * ((long)p->C * p->p * p->p) + col] : 0.0f;
}

/* Element i of the tokens e [B, S, h]: token 0 of each image is first[k] (0 when first is NULL),
 * token t >= 1 row (b * (S - 1) + t - 1) of the packed rows; plus pos[t * h + k] when pos is
 * not NULL. */
typedef struct rt_b_vit_tokens_a {
  int S, h;            /* tokens per image, width */
  const float *first;  /* [h] or NULL */
  const float *rows;   /* B * (S - 1) x h */
  const float *pos;    /* [S, h] or NULL */
  float *e;            /* B * S x h */
} rt_b_vit_tokens_a;
RT_BODY_FN(vit_tokens) {
  long h = p->h, S = p->S, b = i / (S * h), t = i / h % S, k = i % h;
  float v = t == 0 ? (p->first ? p->first[k] : 0.0f) : p->rows[(b * (S - 1) + t - 1) * h + k];
  p->e[i] = p->pos ? v + p->pos[t * h + k] : v;
}

/* Element i of the packed rows [B * (S - 1), h]: token t + 1 of image b of e [B * S, h] (every
 * token but each image's first). */
typedef struct rt_b_vit_drop_first_a {
  int S, h;          /* tokens per image, width */
  const float *e;    /* B * S x h */
  float *rows;       /* B * (S - 1) x h */
} rt_b_vit_drop_first_a;
RT_BODY_FN(vit_drop_first) {
  long h = p->h, r = i / h, b = r / (p->S - 1), t = r % (p->S - 1) + 1;
  p->rows[i] = p->e[(b * p->S + t) * h + i % h];
}

#endif
