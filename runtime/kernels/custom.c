/* custom.c -- the "custom" layer kind (kernels.h): a dense stand-in of its output width (the kind
 * has no architecture): y = tanh(x w + b), plus x when the input and output widths agree. */
#include <math.h>
#include <string.h>

#include "kernels.h"

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

/* Dimensions: the output width from its output bytes per microbatch (out, in elements of the
 * training precision; else the width it receives), the tokens it receives; a model that starts
 * with a custom layer takes features of its own width. */
static int kb_custom_dims(const rt_dims_in *in, rt_ldims *d, strbuf *err) {
  (void)err;
  const be_stream *s = in->s;
  double elem = s->dtype && strcmp(s->dtype, "fp32") == 0 ? 4 : 2;
  double out = rt_lp(in, BE_LP_CUSTOM_OUT, 0) / elem / ((double)s->micro_batch * s->seq);
  d->out_w = out >= 1 ? (int)rt_sdim(out, in->scale, 1, 1) : in->prev_w;
  d->S = in->prev_S;
  d->hidden = d->out_w;
  d->in_S = d->S;
  d->in_w = in->prev_w;
  if (in->first && d->out_w >= 0) {
    d->in_w = d->out_w ? d->out_w : d->hidden;
    d->hidden = d->in_w;
    d->out_w = d->in_w;
  }
  return 0;
}

const rt_kernel rt_kernel_CUSTOM = {BE_KIND_CUSTOM, 0, kb_custom_dims, kb_custom_plan,
                                    kb_custom_fwd, kb_custom_bwd_in, kb_custom_bwd_w,
                                    rt_flops_gemm};
