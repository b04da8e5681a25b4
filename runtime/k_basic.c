/* k_basic.c -- the kernels of the layers at the model's ends and of the opaque kind:
 *   embedding  y[r] = table[tok[r]]; the input holds token ids as floats (an id outside
 *              [0, vocab) reads row 0); W adds each row of dy to its token's row of the table.
 *   lm_head    final RMSNorm then the projection to the vocabulary: y = RMSNorm(x)*norm @ w
 *              (logits; the loss is the model's, model.c).
 *   custom     a dense stand-in of its output width (the kind has no architecture):
 *              y = tanh(x w + b), plus x when the input and output widths agree. */
#include <math.h>

#include "kernels.h"

/* ---- embedding: save = ids (T) | dy (T x hidden) ------------------------------------------- */

static int kb_emb_plan(const rt_ldims *d, rt_lplan *p, strbuf *err) {
  if (d->vocab < 1 || d->hidden < 1) {
    strbuf_printf(err, "embedding needs vocab and hidden of at least 1");
    return -1;
  }
  size_t T = (size_t)d->B * d->S;
  rt_lplan_add(p, "table", d->vocab, d->hidden, 0, RT_INIT_UNIFORM, 1.0f);
  p->save_floats = T + T * (size_t)d->hidden;
  p->out_w = d->hidden;
  return 0;
}

static void kb_emb_fwd(const rt_ldims *d, const float *w, const float *x, float *y, float *save) {
  size_t T = (size_t)d->B * d->S, h = (size_t)d->hidden;
  rt_copy(save, x, T);
  RT_FOR(emb_gather, T * h, .h = (int)h, .vocab = d->vocab, .ids = x, .table = w, .y = y);
}

static void kb_emb_bwd_in(const rt_ldims *d, const float *w, float *save, const float *dy,
                          float *dx) {
  (void)w;
  size_t T = (size_t)d->B * d->S;
  rt_copy(save + T, dy, T * (size_t)d->hidden);
  if (dx) rt_zero(dx, T); /* token ids have no gradient */
}

static void kb_emb_bwd_w(const rt_ldims *d, const float *w, const float *save, float *g) {
  (void)w;
  size_t T = (size_t)d->B * d->S, h = (size_t)d->hidden;
  RT_FOR(emb_scatter, h, .T = (long)T, .h = (int)h, .vocab = d->vocab, .ids = save,
         .dy = save + T, .g = g);
}

const rt_kernel rt_k_embedding = {"embedding", kb_emb_plan, kb_emb_fwd, kb_emb_bwd_in,
                                  kb_emb_bwd_w, false};

/* ---- lm_head: save = x (T x h) | hn (T x h) | rstd (T) | dhn (T x h) | dy (T x V) ----------- */

static int kb_head_plan(const rt_ldims *d, rt_lplan *p, strbuf *err) {
  if (d->vocab < 1 || d->hidden < 1 || d->in_w != d->hidden) {
    strbuf_printf(err, "lm_head needs vocab >= 1 and an input of width hidden (%d), not %d",
                  d->hidden, d->in_w);
    return -1;
  }
  size_t T = (size_t)d->B * d->S, h = (size_t)d->hidden;
  rt_lplan_add(p, "norm", d->hidden, 0, 0, RT_INIT_CONST, 1.0f);
  rt_lplan_add(p, "w", d->hidden, d->vocab, 0, RT_INIT_UNIFORM, sqrtf(3.0f / (float)d->hidden));
  p->save_floats = 3 * T * h + T + T * (size_t)d->vocab;
  p->out_w = d->vocab;
  return 0;
}

static void kb_head_fwd(const rt_ldims *d, const float *w, const float *x, float *y, float *save) {
  int T = d->B * d->S, h = d->hidden, V = d->vocab;
  float *xs = save, *hn = xs + (size_t)T * h, *rstd = hn + (size_t)T * h;
  rt_copy(xs, x, (size_t)T * h);
  rt_rmsnorm_fwd(T, h, x, w, hn, rstd);
  rt_gemm(false, false, T, V, h, 1.0f, hn, h, w + h, V, 0.0f, y, V);
}

static void kb_head_bwd_in(const rt_ldims *d, const float *w, float *save, const float *dy,
                           float *dx) {
  int T = d->B * d->S, h = d->hidden, V = d->vocab;
  float *xs = save, *hn = xs + (size_t)T * h, *rstd = hn + (size_t)T * h;
  float *dhn = rstd + T, *dys = dhn + (size_t)T * h;
  rt_copy(dys, dy, (size_t)T * V);
  rt_gemm(false, true, T, h, V, 1.0f, dy, V, w + h, V, 0.0f, dhn, h);
  if (dx) rt_rmsnorm_bwd_in(T, h, xs, w, rstd, dhn, dx, false);
}

static void kb_head_bwd_w(const rt_ldims *d, const float *w, const float *save, float *g) {
  (void)w;
  int T = d->B * d->S, h = d->hidden, V = d->vocab;
  const float *xs = save, *hn = xs + (size_t)T * h, *rstd = hn + (size_t)T * h;
  const float *dhn = rstd + T, *dys = dhn + (size_t)T * h;
  rt_rmsnorm_bwd_w(T, h, xs, rstd, dhn, g);
  rt_gemm(true, false, h, V, T, 1.0f, hn, h, dys, V, 1.0f, g + h, V);
}

const rt_kernel rt_k_lm_head = {"lm_head", kb_head_plan, kb_head_fwd, kb_head_bwd_in,
                                kb_head_bwd_w, false};

/* ---- custom: save = x (T x in) | a = tanh (T x out) | dz (T x out) -------------------------- */

static int kb_custom_plan(const rt_ldims *d, rt_lplan *p, strbuf *err) {
  if (d->in_w < 1 || d->out_w < 1) {
    strbuf_printf(err, "custom layer needs input and output widths of at least 1");
    return -1;
  }
  size_t T = (size_t)d->B * d->S;
  rt_lplan_add(p, "w", d->in_w, d->out_w, 0, RT_INIT_UNIFORM, sqrtf(3.0f / (float)d->in_w));
  rt_lplan_add(p, "b", d->out_w, 0, 0, RT_INIT_CONST, 0.0f);
  p->save_floats = T * (size_t)d->in_w + 2 * T * (size_t)d->out_w;
  p->out_w = d->out_w;
  return 0;
}

static void kb_custom_fwd(const rt_ldims *d, const float *w, const float *x, float *y,
                          float *save) {
  int T = d->B * d->S, n = d->in_w, o = d->out_w;
  const float *b = w + (size_t)n * o;
  float *xs = save, *a = xs + (size_t)T * n;
  rt_copy(xs, x, (size_t)T * n);
  RT_FOR(rows_set, (size_t)T * o, .n = o, .v = b, .y = a);
  rt_gemm(false, false, T, o, n, 1.0f, x, n, w, o, 1.0f, a, o);
  RT_FOR(custom_act, (size_t)T * o, .residual = n == o, .x = x, .a = a, .y = y);
}

static void kb_custom_bwd_in(const rt_ldims *d, const float *w, float *save, const float *dy,
                             float *dx) {
  int T = d->B * d->S, n = d->in_w, o = d->out_w;
  float *a = save + (size_t)T * n, *dz = a + (size_t)T * o;
  RT_FOR(tanh_bwd, (size_t)T * o, .dy = dy, .a = a, .dz = dz);
  if (!dx) return;
  if (n == o) rt_copy(dx, dy, (size_t)T * n);
  rt_gemm(false, true, T, n, o, 1.0f, dz, o, w, o, n == o ? 1.0f : 0.0f, dx, n);
}

static void kb_custom_bwd_w(const rt_ldims *d, const float *w, const float *save, float *g) {
  (void)w;
  int T = d->B * d->S, n = d->in_w, o = d->out_w;
  const float *xs = save, *dz = save + (size_t)T * n + (size_t)T * o;
  rt_gemm(true, false, n, o, T, 1.0f, xs, n, dz, o, 1.0f, g, o);
  RT_FOR(col_sum, o, .rows = T, .n = o, .m = dz, .g = g + (size_t)n * o);
}

const rt_kernel rt_k_custom = {"custom", kb_custom_plan, kb_custom_fwd, kb_custom_bwd_in,
                               kb_custom_bwd_w, false};
