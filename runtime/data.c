/* data.c -- the runtime's shared generator, data file, successor table, stream check and tensor
 * difference (data.h). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"

uint64_t rt_mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t rt_next64(uint64_t *st) {
  *st += 0x9e3779b97f4a7c15ULL;
  return rt_mix64(*st);
}

bool rt_data_read(const char *path, unsigned char **bytes, size_t *len, strbuf *err) {
  strbuf why = {0};
  size_t n = 0;
  char *buf = support_read_file(path, &n, &why);
  if (!buf || n == 0) {
    if (err) strbuf_printf(err, "%s: %s", path, buf ? "empty data file" : strbuf_cstr(&why));
    free(buf);
    strbuf_free(&why);
    return false;
  }
  *bytes = (unsigned char *)buf;
  *len = n;
  return true;
}

int *rt_data_perm(int V, uint64_t seed) {
  int *perm = xmalloc((size_t)(V > 0 ? V : 1) * sizeof *perm);
  for (int i = 0; i < V; i++) perm[i] = i;
  uint64_t st = rt_mix64(seed ^ 0x5045524d5045524dULL); /* "PERMPERM" */
  for (int i = V - 1; i > 0; i--) {
    int j = (int)(rt_next64(&st) % (uint64_t)(i + 1));
    int t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  return perm;
}

bool rt_stream_check(const be_stream *s, strbuf *err) {
  const char *why = NULL;
  if (s->nlayers < 1 || !s->layers) why = "stream has no layers";
  else if (s->nstages < 1 || !s->stages) why = "stream has no stages";
  else if (s->nmb < 1 || s->micro_batch < 1 || s->seq < 1)
    why = "stream needs at least one microbatch, sequence and token";
  if (why) {
    if (err) strbuf_puts(err, why);
    return false;
  }
  for (int i = 0; i < s->nstages; i++) {
    const be_stage *st = &s->stages[i];
    int want = i == 0 ? 0 : s->stages[i - 1].end;
    if (st->first != want || st->end <= st->first || st->end > s->nlayers ||
        (i == s->nstages - 1 && st->end != s->nlayers)) {
      if (err)
        strbuf_printf(err, "stage %d: layers [%d, %d) do not continue the partition of %d layers",
                      i, (int)st->first, (int)st->end, (int)s->nlayers);
      return false;
    }
  }
  return true;
}

double rt_tensor_diff(const float *a, const float *b, size_t n) {
  double md = 0, mb = 0;
  for (size_t k = 0; k < n; k++) {
    double d = fabs((double)a[k] - b[k]), v = fabs((double)b[k]);
    if (d > md || d != d) md = d;
    if (v > mb) mb = v;
  }
  return mb > 0 ? md / mb : md;
}
