/* kb_mla.h -- the element-wise bodies of the mla kernel (kernels/mla.c), see kdev.h and
 * bodies.def: copies of per-head column blocks between the projections' layouts and the
 * attention core's, with the rotary pairs' interleaved order (DeepSeek's) turned into the core's
 * rotate-half order and back, and the sum of the shared rotary key's gradient over the heads.
 * Every body writes only what its own index owns. */
#ifndef OCTO_RT_KB_MLA_H
#define OCTO_RT_KB_MLA_H

#include "kb_common.h"

/* The column orders mla_copy and mla_head_sum translate between (w columns of one head). */
enum {
  RT_MLA_SAME = 0,      /* column j from column j */
  RT_MLA_HALVES = 1,    /* from interleaved pairs to halves: j < w/2 from 2j, else 2(j-w/2)+1 */
  RT_MLA_INTERLEAVE = 2 /* back: column j from j/2 when j is even, else w/2 + j/2 */
};

/* The source column of destination column j of w in order 'order' (RT_MLA_*). */
RT_HD static inline long rt_mla_col(int order, long j, long w) {
  if (order == RT_MLA_HALVES) return j < w / 2 ? 2 * j : 2 * (j - w / 2) + 1;
  if (order == RT_MLA_INTERLEAVE) return j % 2 == 0 ? j / 2 : w / 2 + j / 2;
  return j;
}

/* Element i of [N, H, w]: row n, head h, column j: dst[n*dld + h*dhs + doff + j] =
 * src[n*sld + h*shs + soff + col(j)] (shs 0: every head reads the same columns), or 0 when src is
 * NULL. */
typedef struct rt_b_mla_copy_a {
  int H, w, order;            /* heads, columns per head, RT_MLA_* */
  long dld, dhs, doff;        /* destination row stride, head stride, offset */
  long sld, shs, soff;        /* source row stride, head stride, offset */
  const float *src;           /* or NULL: zeros */
  float *dst;
} rt_b_mla_copy_a;
RT_BODY_FN(mla_copy) {
  long w = p->w, n = i / (p->H * w), h = (i / w) % p->H, j = i % w;
  float v = p->src ? p->src[n * p->sld + h * p->shs + p->soff + rt_mla_col(p->order, j, w)] : 0.0f;
  p->dst[n * p->dld + h * p->dhs + p->doff + j] = v;
}

/* Element i of [N, w]: row n, column j: dst[n*dld + doff + j] = the sum over the H heads (in head
 * order, in double) of src[n*sld + h*shs + soff + col(j)]. */
typedef struct rt_b_mla_head_sum_a {
  int H, w, order;            /* heads, columns, RT_MLA_* */
  long dld, doff;             /* destination row stride, offset */
  long sld, shs, soff;        /* source row stride, head stride, offset */
  const float *src;
  float *dst;
} rt_b_mla_head_sum_a;
RT_BODY_FN(mla_head_sum) {
  long w = p->w, n = i / w, j = i % w, c = rt_mla_col(p->order, j, w);
  double s = 0;
  for (int h = 0; h < p->H; h++) s += p->src[n * p->sld + h * p->shs + p->soff + c];
  p->dst[n * p->dld + p->doff + j] = (float)s;
}

/* Entry i of the YaRN rotary tables [S, r/2] (r = rope_dim; DeepSeek's rope_scaling "yarn", as
 * transformers' _compute_yarn_parameters): pair k at position t turns by t * w_k, w_k = the
 * extrapolated theta^(-2k/r) where the ramp (k - low) / (high - low), clamped to [0, 1], is 0,
 * the interpolated w_k / factor where it is 1, blended between; cos and sin times af. */
typedef struct rt_b_mla_yarn_table_a {
  int r;                    /* rotary width (even) */
  double theta, factor;     /* base, extension factor */
  double low, high;         /* the ramp's bounds (high > low) */
  double af;                /* the tables' factor (attention_factor) */
  float *cs, *sn;           /* [S, r/2] each */
} rt_b_mla_yarn_table_a;
RT_BODY_FN(mla_yarn_table) {
  long half = p->r / 2, t = i / half, k = i % half;
  double ramp = ((double)k - p->low) / (p->high - p->low);
  ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
  double ext = 1.0 / pow(p->theta, 2.0 * (double)k / p->r); /* extrapolated */
  double w = ext / p->factor * ramp + ext * (1 - ramp);
  p->cs[i] = (float)(cos((double)t * w) * p->af);
  p->sn[i] = (float)(sin((double)t * w) * p->af);
}

#endif
