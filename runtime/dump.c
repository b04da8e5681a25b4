/* dump.c -- NumPy (.npy, format 1.0) files of a layer's tensors and the JSON index beside them
 * (kernels.h, "Dumps"): what octo-run --dump writes and what tests/runtime/torch_ref.py reads. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "kernels.h"

int rt_npy_write(const char *path, const float *a, int ndim, const int64_t *dim, strbuf *err) {
  strbuf h = {0};
  size_t n = 1;
  strbuf_puts(&h, "{'descr': '<f4', 'fortran_order': False, 'shape': (");
  for (int i = 0; i < ndim; i++) {
    strbuf_printf(&h, "%lld,%s", (long long)dim[i], i + 1 < ndim ? " " : "");
    n *= (size_t)dim[i];
  }
  strbuf_puts(&h, "), }");
  /* magic (6) + version (2) + length (2) + header, padded with spaces to 64 bytes, then \n */
  while ((10 + h.len + 1) % 64) strbuf_puts(&h, " ");
  strbuf_puts(&h, "\n");
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(h.len & 0xff),
                           (unsigned char)(h.len >> 8)};
  FILE *f = fopen(path, "wb");
  int rc = 0;
  if (!f || fwrite(pre, 1, sizeof pre, f) != sizeof pre || fwrite(h.data, 1, h.len, f) != h.len ||
      (n && fwrite(a, sizeof *a, n, f) != n))
    rc = -1;
  if (f && fclose(f) != 0) rc = -1;
  if (rc) strbuf_printf(err, "%s: %s", path, strerror(errno ? errno : EIO));
  strbuf_free(&h);
  return rc;
}

/* Write tensor a (rows x cols, or the rt_ptensor's shape when t is set) as DIR/NAME.WHAT.npy. */
static int dump_one(const char *dir, const char *name, const char *what, const float *a,
                    int64_t rows, int64_t cols, const rt_ptensor *t, strbuf *err) {
  strbuf path = {0};
  strbuf_printf(&path, "%s/%s.%s.npy", dir, name, what);
  int64_t dim[3] = {rows, cols, 0};
  int nd = 2;
  if (t) {
    nd = t->ndim;
    for (int i = 0; i < nd; i++) dim[i] = t->dim[i];
  }
  int rc = rt_npy_write(strbuf_cstr(&path), a, nd, dim, err);
  strbuf_free(&path);
  return rc;
}

int rt_dump_layer(const char *dir, const char *name, const rt_ldims *d, const rt_lplan *p,
                  const rt_dump_tensors *t, strbuf *err) {
  int64_t T = (int64_t)d->B * d->S, Tin = (int64_t)d->B * d->in_S;
  int rc = dump_one(dir, name, "x", t->x, Tin, d->in_w, NULL, err);
  if (!rc) rc = dump_one(dir, name, "y", t->y, T, p->out_w, NULL, err);
  if (!rc) rc = dump_one(dir, name, "dy", t->dy, T, p->out_w, NULL, err);
  if (!rc && t->dx) rc = dump_one(dir, name, "dx", t->dx, Tin, d->in_w, NULL, err);
  const float *w = t->w, *g = t->g;
  for (int i = 0; i < p->npt && rc == 0; i++) {
    const rt_ptensor *pt = &p->pt[i];
    strbuf what = {0};
    strbuf_printf(&what, "w.%s", pt->name);
    rc = dump_one(dir, name, strbuf_cstr(&what), w, 0, 0, pt, err);
    strbuf_free(&what);
    strbuf_printf(&what, "g.%s", pt->name);
    if (!rc) rc = dump_one(dir, name, strbuf_cstr(&what), g, 0, 0, pt, err);
    strbuf_free(&what);
    w += rt_ptensor_floats(pt);
    g += rt_ptensor_floats(pt);
  }
  return rc;
}

void rt_dump_entry(strbuf *index, const char *name, const char *kind, const rt_ldims *d,
                   const rt_lplan *p, bool has_dx) {
  if (index->len) strbuf_puts(index, ",\n");
  strbuf_puts(index, "  {\"name\": ");
  strbuf_json_str(index, name);
  strbuf_puts(index, ", \"kind\": ");
  strbuf_json_str(index, kind);
  strbuf_puts(index, ", \"dims\": {");
  strbuf_printf(index,
                "\"B\": %d, \"S\": %d, \"in_S\": %d, \"in_w\": %d, \"hidden\": %d, \"heads\": %d, "
                "\"kv_heads\": %d, \"head_dim\": %d, \"ffn\": %d, \"gated\": %d, \"act\": %d, "
                "\"causal\": %d, \"window\": %d, \"experts\": %d, \"top_k\": %d, \"shared\": %d, "
                "\"state\": %d, \"groups\": %d, \"conv\": %d, \"inner\": %d, \"chunk\": %d, "
                "\"vocab\": %d, \"out_w\": %d},\n",
                d->B, d->S, d->in_S, d->in_w, d->hidden, d->heads, d->kv_heads, d->head_dim,
                d->ffn, d->gated, (int)d->act, d->causal, d->window, d->experts, d->top_k,
                d->shared, d->state, d->groups, d->conv, d->inner, d->chunk, d->vocab, p->out_w);
  strbuf_puts(index, "   \"params\": [");
  for (int i = 0; i < p->npt; i++) {
    const rt_ptensor *pt = &p->pt[i];
    strbuf_printf(index, "%s{\"name\": \"%s\", \"shape\": [", i ? ", " : "", pt->name);
    for (int k = 0; k < pt->ndim; k++) strbuf_printf(index, "%s%d", k ? ", " : "", pt->dim[k]);
    strbuf_puts(index, "]}");
  }
  strbuf_puts(index, "],\n   \"prefix\": ");
  strbuf json_prefix = {0};
  strbuf_printf(&json_prefix, "%s.", name);
  strbuf_json_str(index, strbuf_cstr(&json_prefix));
  strbuf_free(&json_prefix);
  strbuf_printf(index, ", \"has_dx\": %s}", has_dx ? "true" : "false");
}

int rt_dump_index(const char *dir, const strbuf *index, strbuf *err) {
  strbuf path = {0};
  strbuf_printf(&path, "%s/index.json", dir);
  FILE *f = fopen(strbuf_cstr(&path), "w");
  int rc = 0;
  if (!f || fprintf(f, "{\"format\": \"octopipe-dump\", \"version\": 1, \"layers\": [\n%s\n]}\n",
                    index->len ? index->data : "") < 0)
    rc = -1;
  if (f && fclose(f) != 0) rc = -1;
  if (rc) strbuf_printf(err, "%s: %s", strbuf_cstr(&path), strerror(errno ? errno : EIO));
  strbuf_free(&path);
  return rc;
}
