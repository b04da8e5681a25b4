/* stream_fixture.h -- instruction streams built by hand for the runtime's tests (the CPU model's
 * unit tests and the GPU model test): layers of given kinds with parameters, cut into stages,
 * one rank per stage, no programs. Header-only (static inline), included by each test file. */
#ifndef OCTO_STREAM_FIXTURE_H
#define OCTO_STREAM_FIXTURE_H

#include <stdio.h>

#include "backend.h"
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

#endif
