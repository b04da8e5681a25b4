/* host.c -- the host store of a rank's offloaded tensors (rt_host_store): the copies in host
 * memory that OFFLOAD writes and RELOAD reads back, one per (tensor kind, stage, microbatch) of
 * the rank's offloading stages, for the cpu and mpi backends (malloc) and the GPU backends
 * (pinned memory, through the allocator they pass). Host memory is not the device's: the rank's
 * memory tracker does not count it; the store keeps its own figures. */
#include <stdlib.h>
#include <string.h>

#include "runtime.h"

void rt_host_init(rt_host_store *h, const be_stream *s, int rank, void *(*alloc)(size_t),
                  void (*release)(void *)) {
  memset(h, 0, sizeof *h);
  h->nmb = s->nmb;
  h->alloc = alloc;
  h->release = release;
  h->index = xmalloc((size_t)s->nstages * sizeof *h->index);
  int n = 0;
  for (int i = 0; i < s->nstages; i++)
    h->index[i] = s->stages[i].rank == rank && s->stages[i].offload ? n++ : -1;
  h->nstages = s->nstages;
  h->ncopies = (size_t)n * (size_t)s->nmb * 2;
  h->copies = xcalloc(h->ncopies ? h->ncopies : 1, sizeof *h->copies);
}

rt_host_copy *rt_host_at(rt_host_store *h, int kind, int stage, int mb) {
  if (stage < 0 || stage >= h->nstages || h->index[stage] < 0 || mb < 0 || mb >= h->nmb ||
      (kind != BE_T_STASH && kind != BE_T_WSTASH))
    return NULL;
  size_t i = ((size_t)h->index[stage] * (size_t)h->nmb + (size_t)mb) * 2 + (kind == BE_T_WSTASH);
  return &h->copies[i];
}

void *rt_host_keep(rt_host_store *h, rt_host_copy *c, size_t bytes) {
  if (c->held) rt_host_drop(h, c);
  if (bytes > c->cap) {
    if (c->data) h->release(c->data);
    c->data = h->alloc(bytes);
    c->cap = c->data ? bytes : 0;
    if (!c->data) return NULL;
  }
  c->bytes = bytes;
  c->held = true;
  h->bytes += (double)bytes;
  if (h->bytes > h->peak) h->peak = h->bytes;
  return c->data;
}

void rt_host_drop(rt_host_store *h, rt_host_copy *c) {
  if (!c->held) return;
  c->held = false;
  h->bytes -= (double)c->bytes;
}

void rt_host_free(rt_host_store *h) {
  for (size_t i = 0; h->copies && i < h->ncopies; i++)
    if (h->copies[i].data) h->release(h->copies[i].data);
  free(h->copies);
  free(h->index);
  memset(h, 0, sizeof *h);
}
