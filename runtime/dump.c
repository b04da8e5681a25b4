/* dump.c -- NumPy (.npy, format 1.0) files of a layer's tensors and the JSON index beside them
 * (kernels.h, "Dumps"): what octo-run --dump writes and what tests/runtime/torch_ref.py reads.
 * Every file is written to a temporary and renamed (support_write_file), so that a file either
 * is complete or is not there; file names come from rt_dump_stem, never from a layer's name as
 * it is. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

/* Write the ndim-dimensional array a of elements of 'elem' bytes, NumPy type descr ("<f4",
 * "<i4"), as a .npy file at path (atomically). Returns 0, or -1 with "PATH: reason" in err. */
static int npy_write(const char *path, const char *descr, const void *a, size_t elem, int ndim,
                     const int64_t *dim, strbuf *err) {
  strbuf h = {0};
  size_t n = 1;
  strbuf_printf(&h, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
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
  size_t len = sizeof pre + h.len + n * elem;
  unsigned char *file = xmalloc(len);
  memcpy(file, pre, sizeof pre);
  memcpy(file + sizeof pre, h.data, h.len);
  if (n) memcpy(file + sizeof pre + h.len, a, n * elem);
  strbuf why = {0};
  int rc = support_write_file(path, file, len, &why) ? 0 : -1;
  if (rc) strbuf_printf(err, "cannot write '%s': %s", path, strbuf_cstr(&why));
  strbuf_free(&why);
  free(file);
  strbuf_free(&h);
  return rc;
}

int rt_npy_write(const char *path, const float *a, int ndim, const int64_t *dim, strbuf *err) {
  return npy_write(path, "<f4", a, sizeof *a, ndim, dim, err);
}

int rt_npy_write_i32(const char *path, const int32_t *a, int ndim, const int64_t *dim,
                     strbuf *err) {
  return npy_write(path, "<i4", a, sizeof *a, ndim, dim, err);
}

/* Whether byte c may stand in a dump's file name as it is. */
static bool stem_byte(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

void rt_dump_stem(strbuf *out, int layer, const char *name) {
  strbuf_printf(out, "%03d-", layer);
  size_t n = 0;
  for (const unsigned char *p = (const unsigned char *)name; *p && n < RT_DUMP_NAME_MAX; p++, n++)
    strbuf_putc(out, stem_byte(*p) && !(n == 0 && *p == '.') ? (char)*p : '_');
  if (n == 0) strbuf_puts(out, "layer");
}

bool rt_dump_stem_safe(const char *stem) {
  if (!stem[0] || stem[0] == '.' || strlen(stem) > RT_DUMP_NAME_MAX + 16) return false;
  for (const unsigned char *p = (const unsigned char *)stem; *p; p++)
    if (!stem_byte(*p)) return false;
  return true;
}

/* Write tensor a (rows x cols, or the rt_ptensor's shape when t is set) as DIR/STEM.WHAT.npy. */
static int dump_one(const char *dir, const char *stem, const char *what, const float *a,
                    int64_t rows, int64_t cols, const rt_ptensor *t, strbuf *err) {
  strbuf path = {0};
  strbuf_printf(&path, "%s/%s.%s.npy", dir, stem, what);
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

int rt_dump_layer(const char *dir, const char *stem, const rt_ldims *d, const rt_lplan *p,
                  const rt_dump_tensors *t, strbuf *err) {
  if (!rt_dump_stem_safe(stem)) {
    strbuf_puts(err, "a dump's file names take letters, digits, '.', '_' and '-' (not first a "
                "'.'): got ");
    strbuf_json_str(err, stem);
    return -1;
  }
  int64_t T = (int64_t)d->B * d->S, Tin = (int64_t)d->B * d->in_S, Ts = (int64_t)d->B * t->xs_S;
  int rc = dump_one(dir, stem, "x", t->x, Tin, d->in_w, NULL, err);
  if (!rc) rc = dump_one(dir, stem, "y", t->y, T, p->out_w, NULL, err);
  if (!rc) rc = dump_one(dir, stem, "dy", t->dy, T, p->out_w, NULL, err);
  if (!rc && t->dx) rc = dump_one(dir, stem, "dx", t->dx, Tin, d->in_w, NULL, err);
  if (!rc && t->xs) rc = dump_one(dir, stem, "xs", t->xs, Ts, t->xs_w, NULL, err);
  if (!rc && t->dxs) rc = dump_one(dir, stem, "dxs", t->dxs, Ts, t->xs_w, NULL, err);
  const float *w = t->w, *g = t->g;
  for (int i = 0; i < p->npt && rc == 0; i++) {
    const rt_ptensor *pt = &p->pt[i];
    strbuf what = {0};
    strbuf_printf(&what, "w.%s", pt->name);
    rc = dump_one(dir, stem, strbuf_cstr(&what), w, 0, 0, pt, err);
    strbuf_free(&what);
    strbuf_printf(&what, "g.%s", pt->name);
    if (!rc) rc = dump_one(dir, stem, strbuf_cstr(&what), g, 0, 0, pt, err);
    strbuf_free(&what);
    w += rt_ptensor_floats(pt);
    g += rt_ptensor_floats(pt);
  }
  return rc;
}

/* A layer's dimensions in its dump's index (docs/runtime.md, "Dumps"), in the order written:
 * X(key, format, value), value an expression of d (const rt_ldims *) and p (const rt_lplan *);
 * format INT (a whole number), NAME (a quoted name), NUM (the shortest exact text of a double),
 * WHOLE (a double rounded to a whole number). Dimensions made by hand (the unit tests') leave
 * some fields 0: the rows give those their neutral values (routed_scale 1, one expert group,
 * YaRN's factor 1). */
#define DUMP_DIMS(X)                                                                          \
  X("B", INT, d->B)                                                                           \
  X("S", INT, d->S)                                                                           \
  X("in_S", INT, d->in_S)                                                                     \
  X("in_w", INT, d->in_w)                                                                     \
  X("hidden", INT, d->hidden)                                                                 \
  X("heads", INT, d->heads)                                                                   \
  X("kv_heads", INT, d->kv_heads)                                                             \
  X("head_dim", INT, d->head_dim)                                                             \
  X("ffn", INT, d->ffn)                                                                       \
  X("gated", INT, d->gated)                                                                   \
  X("act", NAME, rt_act_name(d->act))                                                         \
  X("causal", INT, d->causal)                                                                 \
  X("window", INT, d->window)                                                                 \
  X("rope_theta", NUM, d->rope_theta)                                                         \
  X("rope_factor", NUM, d->rope_factor)                                                       \
  X("rope_low_freq_factor", NUM, d->rope_low)                                                 \
  X("rope_high_freq_factor", NUM, d->rope_high)                                               \
  X("rope_original_seq", WHOLE, d->rope_orig)                                                 \
  X("rope_linear", NUM, d->rope_linear)                                                       \
  X("qkv_bias", INT, d->qkv_bias)                                                             \
  X("qk_norm", INT, d->qk_norm)                                                               \
  X("rope", INT, !d->no_rope)                                                                 \
  X("norm_eps", NUM, d->norm_eps)                                                             \
  X("norm_plus_one", INT, d->norm_shift != 0)                                                 \
  X("post_norm", INT, d->post_norm)                                                           \
  X("score_dim", NUM, d->score_dim)                                                           \
  X("softcap", NUM, d->softcap)                                                               \
  X("scaled", INT, d->scaled)                                                                 \
  X("pad_id", INT, d->padded ? d->pad_id : -1)                                                \
  X("experts", INT, d->experts)                                                               \
  X("top_k", INT, d->top_k)                                                                   \
  X("shared", INT, d->shared)                                                                 \
  X("renorm", INT, !d->all_probs)                                                             \
  X("shared_gate", INT, d->shared_gate)                                                       \
  X("sigmoid", INT, d->sigmoid)                                                               \
  X("score_bias", INT, d->score_bias)                                                         \
  X("expert_groups", INT, d->egroups > 1 ? d->egroups : 1)                                    \
  X("topk_groups", INT, d->egroups > 1 ? d->tgroups : 1)                                      \
  X("routed_scale", NUM, d->rscale > 0 ? d->rscale : 1.0)                                     \
  X("q_rank", INT, d->q_rank)                                                                 \
  X("kv_rank", INT, d->kv_rank)                                                               \
  X("nope_dim", INT, d->nope_dim)                                                             \
  X("rope_dim", INT, d->rope_dim)                                                             \
  X("v_dim", INT, d->v_dim)                                                                   \
  X("latent_eps", NUM, d->latent_eps)                                                         \
  X("yarn_factor", NUM, d->yarn_factor > 1 ? d->yarn_factor : 1)                              \
  X("yarn_original_seq", NUM, d->yarn_orig)                                                   \
  X("yarn_beta_fast", NUM, d->yarn_beta_fast)                                                 \
  X("yarn_beta_slow", NUM, d->yarn_beta_slow)                                                 \
  X("yarn_mscale", NUM, d->yarn_mscale)                                                       \
  X("yarn_mscale_all_dim", NUM, d->yarn_mscale_all)                                           \
  X("state", INT, d->state)                                                                   \
  X("groups", INT, d->groups)                                                                 \
  X("conv", INT, d->conv)                                                                     \
  X("inner", INT, d->inner)                                                                   \
  X("chunk", INT, d->chunk)                                                                   \
  X("patch", INT, d->patch)                                                                   \
  X("channels", INT, d->channels)                                                             \
  X("image", INT, d->image)                                                                   \
  X("unused", INT, d->unused)                                                                 \
  X("drop_class", INT, d->drop_class)                                                         \
  X("vision_norm", INT, d->vision_norm)                                                       \
  X("vocab", INT, d->vocab)                                                                   \
  X("tied", INT, d->tied)                                                                     \
  X("out_w", INT, p->out_w)

/* The writers of DUMP_DIMS' formats: one "key": value item, after ", " unless it is the first
 * (*n items written so far; incremented). */
static void dim_key(strbuf *out, int *n, const char *key) {
  if ((*n)++) strbuf_puts(out, ", ");
  strbuf_printf(out, "\"%s\": ", key);
}
static void dim_INT(strbuf *out, int *n, const char *key, int v) {
  dim_key(out, n, key);
  strbuf_printf(out, "%d", v);
}
static void dim_NAME(strbuf *out, int *n, const char *key, const char *v) {
  dim_key(out, n, key);
  strbuf_printf(out, "\"%s\"", v);
}
static void dim_NUM(strbuf *out, int *n, const char *key, double v) {
  char text[40]; /* the shortest exact text */
  fmt_shortest_scaled(text, v, 1.0);
  dim_key(out, n, key);
  strbuf_puts(out, text);
}
static void dim_WHOLE(strbuf *out, int *n, const char *key, double v) {
  dim_key(out, n, key);
  strbuf_printf(out, "%.0f", v);
}

void rt_dump_entry(strbuf *index, int layer, const char *name, const char *kind,
                   const rt_ldims *d, const rt_lplan *p, bool has_dx, int splice_tokens) {
  if (index->len) strbuf_puts(index, ",\n");
  strbuf_printf(index, "  {\"index\": %d, \"name\": ", layer);
  strbuf_json_str(index, name);
  strbuf_puts(index, ", \"kind\": ");
  strbuf_json_str(index, kind);
  strbuf_puts(index, ", \"dims\": {");
  int n = 0;
#define X(key, format, value) dim_##format(index, &n, key, value);
  DUMP_DIMS(X)
#undef X
  strbuf_puts(index, "},\n");
  strbuf_puts(index, "   \"params\": [");
  for (int i = 0; i < p->npt; i++) {
    const rt_ptensor *pt = &p->pt[i];
    strbuf_printf(index, "%s{\"name\": \"%s\", \"shape\": [", i ? ", " : "", pt->name);
    for (int k = 0; k < pt->ndim; k++) strbuf_printf(index, "%s%d", k ? ", " : "", pt->dim[k]);
    strbuf_puts(index, "]}");
  }
  strbuf_puts(index, "],\n   \"prefix\": ");
  strbuf stem = {0};
  rt_dump_stem(&stem, layer, name);
  strbuf_putc(&stem, '.');
  strbuf_json_str(index, strbuf_cstr(&stem));
  strbuf_free(&stem);
  strbuf_printf(index, ", \"has_dx\": %s, \"splice_tokens\": %d}", has_dx ? "true" : "false",
                splice_tokens);
}

int rt_dump_index(const char *dir, const rt_dump_run *run, const strbuf *index, strbuf *err) {
  strbuf path = {0}, text = {0}, why = {0};
  strbuf_printf(&path, "%s/index.json", dir);
  strbuf_printf(&text,
                "{\"format\": \"octopipe-dump\", \"version\": %d, \"step\": 1, \"microbatch\": 0, "
                "\"replica\": 0,\n \"microbatches\": %d, \"replicas\": %d, \"micro_batch\": %d, "
                "\"seq\": %d, \"classes\": %d, \"loss_prefix\": %d, \"loss_scale\": %.17g,\n"
                " \"targets\": %s, \"layers\": [\n%s\n]}\n",
                RT_DUMP_VERSION, run->microbatches, run->replicas, run->micro_batch, run->seq,
                run->classes, run->loss_prefix, run->loss_scale,
                run->targets ? "\"targets.npy\"" : "null", index->len ? index->data : "");
  int rc = support_write_file(strbuf_cstr(&path), text.data, text.len, &why) ? 0 : -1;
  if (rc) strbuf_printf(err, "cannot write '%s': %s", strbuf_cstr(&path), strbuf_cstr(&why));
  strbuf_free(&why);
  strbuf_free(&text);
  strbuf_free(&path);
  return rc;
}
