/* embedding.c -- the "embedding" layer kind (kernels.h): y[r] = table[tok[r]] (scaled: times
 * sqrt(hidden) as a float, Gemma's normalizer); the input holds token ids as floats (an id
 * outside [0, vocab) reads row 0); W adds each row of dy (times the same factor) to its token's
 * row of the table, but for the padding token's (pad_id: torch's padding_idx). Its input is the
 * data's token ids (RT_ROLE_IDS). */
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

/* The output's factor: sqrt(hidden) rounded to a float when scaled, else 1. */
static float kb_emb_scale(const rt_ldims *d) {
  return d->scaled ? (float)sqrt((double)d->hidden) : 1.0f;
}

static void kb_emb_fwd(const rt_ldims *d, const float *w, const float *x, float *y, float *save) {
  size_t T = (size_t)d->B * d->S, h = (size_t)d->hidden;
  rt_copy(save, x, T);
  RT_FOR(emb_gather, T * h, .h = (int)h, .vocab = d->vocab, .scale = kb_emb_scale(d), .ids = x,
         .table = w, .y = y);
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
  RT_FOR(emb_scatter, h, .T = (long)T, .h = (int)h, .vocab = d->vocab, .scale = kb_emb_scale(d),
         .pad = d->padded ? d->pad_id : -1, .ids = save, .dy = save + T, .g = g);
}

/* Dimensions: hidden, seq, vocab (at least 8), scaled and pad_id (a token the run's vocabulary
 * has: at a scale that drops it, none); the input is one token id per position. */
static int kb_emb_dims(const rt_dims_in *in, rt_ldims *d, strbuf *err) {
  (void)err;
  rt_dims_tokens(in, BE_LP_EMBEDDING_HIDDEN, BE_LP_EMBEDDING_SEQ, d);
  d->vocab = (int)rt_sdim(rt_lp(in, BE_LP_EMBEDDING_VOCAB, 0), in->scale, 8, 1);
  d->scaled = rt_lp(in, BE_LP_EMBEDDING_SCALED, 0) != 0;
  double pad = rt_lp(in, BE_LP_EMBEDDING_PAD_ID, -1);
  d->padded = pad >= 0 && pad < d->vocab;
  d->pad_id = d->padded ? (int)pad : 0;
  d->in_w = 1;
  return 0;
}

/* A lookup: no floating-point work counted. */
static double kb_emb_flops(const rt_ldims *d, double nw) {
  (void)d;
  (void)nw;
  return 0;
}

const rt_kernel rt_kernel_EMBEDDING = {BE_KIND_EMBEDDING, RT_ROLE_IDS, kb_emb_dims, kb_emb_plan,
                                       kb_emb_fwd, kb_emb_bwd_in, kb_emb_bwd_w, kb_emb_flops};

