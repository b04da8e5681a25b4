/* lm_head.c -- the "lm_head" layer kind (kernels.h): final RMSNorm then the projection to the
 * vocabulary: y = RMSNorm(x)*norm @ w (logits; the loss is the model's, model.c); a tied head's
 * w is a copy of the embedding's table, [vocab, hidden], and y = RMSNorm(x)*norm @ w^T (its
 * gradient is summed with the table's by the stream's TIE, exec.c). With norm_plus_one the norm
 * multiplies by (1 + norm), its weight starting at 0; with softcap > 0 the logits are capped to
 * softcap * tanh(y / softcap) (Gemma 2's final_logit_softcapping). */
#include <math.h>

#include "kernels.h"

/* ---- lm_head: save = x (T x h) | hn (T x h) | rstd (T) | dhn (T x h) | dy (T x V: the gradient
 * of the uncapped logits) | with softcap, the capped logits (T x V) ---------------------------- */

static int kb_head_plan(const rt_ldims *d, rt_lplan *p, strbuf *err) {
  if (d->vocab < 1 || d->hidden < 1 || d->in_w != d->hidden) {
    strbuf_printf(err, "lm_head needs vocab >= 1 and an input of width hidden (%d), not %d",
                  d->hidden, d->in_w);
    return -1;
  }
  size_t T = (size_t)d->B * d->S, h = (size_t)d->hidden;
  rt_lplan_add(p, "norm", d->hidden, 0, 0, RT_INIT_CONST, 1.0f - d->norm_shift);
  if (d->tied) /* the embedding's table, as it starts (model.c copies the table's values) */
    rt_lplan_add(p, "w", d->vocab, d->hidden, 0, RT_INIT_UNIFORM, 1.0f);
  else
    rt_lplan_add(p, "w", d->hidden, d->vocab, 0, RT_INIT_UNIFORM, sqrtf(3.0f / (float)d->hidden));
  p->save_floats = 3 * T * h + T + (d->softcap > 0 ? 2 : 1) * T * (size_t)d->vocab;
  p->out_w = d->vocab;
  return 0;
}

static void kb_head_fwd(const rt_ldims *d, const float *w, const float *x, float *y, float *save) {
  int T = d->B * d->S, h = d->hidden, V = d->vocab;
  float *xs = save, *hn = xs + (size_t)T * h, *rstd = hn + (size_t)T * h;
  rt_copy(xs, x, (size_t)T * h);
  rt_rmsnorm_fwd(T, h, d->norm_eps, x, w, d->norm_shift, hn, rstd);
  if (d->tied)
    rt_gemm(false, true, T, V, h, 1.0f, hn, h, w + h, h, 0.0f, y, V);
  else
    rt_gemm(false, false, T, V, h, 1.0f, hn, h, w + h, V, 0.0f, y, V);
  if (d->softcap > 0) {
    float *capped = rstd + T + (size_t)T * h + (size_t)T * V;
    RT_FOR(softcap_fwd, (size_t)T * V, .cap = (float)d->softcap, .y = y, .c = capped);
  }
}

static void kb_head_bwd_in(const rt_ldims *d, const float *w, float *save, const float *dy,
                           float *dx) {
  int T = d->B * d->S, h = d->hidden, V = d->vocab;
  float *xs = save, *hn = xs + (size_t)T * h, *rstd = hn + (size_t)T * h;
  float *dhn = rstd + T, *dys = dhn + (size_t)T * h;
  if (d->softcap > 0)
    RT_FOR(softcap_bwd, (size_t)T * V, .cap = (float)d->softcap, .c = dys + (size_t)T * V,
           .dy = dy, .dx = dys);
  else
    rt_copy(dys, dy, (size_t)T * V);
  if (d->tied)
    rt_gemm(false, false, T, h, V, 1.0f, dys, V, w + h, h, 0.0f, dhn, h);
  else
    rt_gemm(false, true, T, h, V, 1.0f, dys, V, w + h, V, 0.0f, dhn, h);
  if (dx) rt_rmsnorm_bwd_in(T, h, xs, w, d->norm_shift, rstd, dhn, dx, false);
}

static void kb_head_bwd_w(const rt_ldims *d, const float *w, const float *save, float *g) {
  (void)w;
  int T = d->B * d->S, h = d->hidden, V = d->vocab;
  const float *xs = save, *hn = xs + (size_t)T * h, *rstd = hn + (size_t)T * h;
  const float *dhn = rstd + T, *dys = dhn + (size_t)T * h;
  rt_rmsnorm_bwd_w(T, h, xs, rstd, dhn, g);
  if (d->tied)
    rt_gemm(true, false, V, h, T, 1.0f, dys, V, hn, h, 1.0f, g + h, h);
  else
    rt_gemm(true, false, h, V, T, 1.0f, hn, h, dys, V, 1.0f, g + h, V);
}

/* Dimensions: hidden, seq, vocab (at least 8), norm_eps, tied, norm_plus_one and softcap. A head
 * without the loss (loss = false) is refused: the runtime's model always ends in softmax
 * cross-entropy. */
static int kb_head_dims(const rt_dims_in *in, rt_ldims *d, strbuf *err) {
  if (rt_lp(in, BE_LP_LM_HEAD_LOSS, 1) == 0) {
    strbuf_puts(err, "loss = false is not supported: the runtime's lm_head always includes the "
                     "softmax cross-entropy loss");
    return -1;
  }
  rt_dims_tokens(in, BE_LP_LM_HEAD_HIDDEN, BE_LP_LM_HEAD_SEQ, d);
  d->vocab = (int)rt_sdim(rt_lp(in, BE_LP_LM_HEAD_VOCAB, 0), in->scale, 8, 1);
  d->norm_eps = rt_lp(in, BE_LP_LM_HEAD_NORM_EPS, 1e-5);
  d->tied = rt_lp(in, BE_LP_LM_HEAD_TIED, 0) == 1;
  d->norm_shift = rt_lp(in, BE_LP_LM_HEAD_NORM_PLUS1, 0) != 0 ? 1.0f : 0.0f;
  d->softcap = rt_lp(in, BE_LP_LM_HEAD_SOFTCAP, 0);
  return 0;
}

const rt_kernel rt_kernel_LM_HEAD = {BE_KIND_LM_HEAD, RT_ROLE_VOCAB, kb_head_dims, kb_head_plan,
                                     kb_head_fwd, kb_head_bwd_in, kb_head_bwd_w, rt_flops_gemm};

