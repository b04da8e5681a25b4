/* stream_fixture.h -- instruction streams built by hand for the runtime's tests (the CPU model's
 * unit tests and the GPU model test): layers of given kinds with parameters, cut into stages,
 * one rank per stage, no programs. Header-only (static inline), included by each test file. */
#ifndef OCTO_STREAM_FIXTURE_H
#define OCTO_STREAM_FIXTURE_H

#include <stdio.h>

#include "stream.h"
#include "support.h"

/* Give layer l of s the parameter (name, value). */
static inline void fx_param(be_stream *s, int l, const char *name, double value) {
  be_layer *L = &s->layers[l];
  L->params = xrealloc(L->params, (size_t)(L->nparams + 1) * sizeof *L->params);
  L->params[L->nparams].name = xstrdup(name);
  L->params[L->nparams].value = value;
  L->nparams++;
}

/* A stream named 'model' of the given layer kinds (NULL-terminated list) cut into stages at
 * 'cuts' (the first layer of stages 1..nstages-1), one rank per stage, with nmb, replicas,
 * micro_batch, seq and the optimizer as given; fp32; no parameters, no programs. Free it with
 * be_stream_free. */
static inline be_stream *fx_stream(const char *model, const char *const *kinds, int nstages,
                                   const int *cuts, int nmb, int replicas, int micro_batch,
                                   int seq, const char *opt) {
  be_stream *s = xcalloc(1, sizeof *s);
  s->model = xstrdup(model);
  s->dtype = xstrdup("fp32");
  s->optimizer = xstrdup(opt);
  s->nmb = nmb;
  s->replicas = replicas;
  s->micro_batch = micro_batch;
  s->seq = seq;
  int n = 0;
  while (kinds[n]) n++;
  s->nlayers = n;
  s->layers = xcalloc((size_t)n, sizeof *s->layers);
  for (int i = 0; i < n; i++) {
    char name[16];
    snprintf(name, sizeof name, "l%d", i);
    s->layers[i].name = xstrdup(name);
    s->layers[i].kind = xstrdup(kinds[i]);
  }
  s->nstages = nstages;
  s->nranks = nstages;
  s->stages = xcalloc((size_t)nstages, sizeof *s->stages);
  s->ranks = xcalloc((size_t)nstages, sizeof *s->ranks);
  for (int i = 0; i < nstages; i++) {
    s->stages[i].first = i == 0 ? 0 : cuts[i - 1];
    s->stages[i].end = i == nstages - 1 ? n : cuts[i];
    s->stages[i].rank = i;
  }
  return s;
}

/* Give layer l of s the parameters of its kind for width h, vocabulary V: attention 2 heads
 * of h / 2 (1 kv head), mlp ffn 2h, moe 4 experts (top 2, width h, 1 shared), mamba2 2 heads of
 * h / 2 with state 4, vit 2 heads and ffn 2h. */
static inline void fx_layer_params(be_stream *s, int l, double h, double V) {
  const char *k = s->layers[l].kind;
  fx_param(s, l, "hidden", h);
  if (!strcmp(k, "embedding") || !strcmp(k, "lm_head")) fx_param(s, l, "vocab", V);
  if (!strcmp(k, "attention") || !strcmp(k, "vit")) {
    fx_param(s, l, "heads", 2);
    fx_param(s, l, "head_dim", h / 2);
  }
  if (!strcmp(k, "attention")) fx_param(s, l, "kv_heads", 1);
  if (!strcmp(k, "mlp") || !strcmp(k, "vit")) fx_param(s, l, "ffn", 2 * h);
  if (!strcmp(k, "moe")) {
    fx_param(s, l, "experts", 4);
    fx_param(s, l, "top_k", 2);
    fx_param(s, l, "expert_ffn", h);
    fx_param(s, l, "shared_experts", 1);
  }
  if (!strcmp(k, "mamba2")) {
    fx_param(s, l, "heads", 2);
    fx_param(s, l, "head_dim", h / 2);
    fx_param(s, l, "state", 4);
    fx_param(s, l, "groups", 1);
    fx_param(s, l, "chunk", 4);
  }
}

#endif
