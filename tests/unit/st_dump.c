/* st_dump.c -- test helper of the safetensors library (tests/safetensors): prints a file or a
 * sharded set one line per tensor, or writes the fixed file the tests compare with the
 * reference implementation's.
 *
 *   st-dump PATH          "meta KEY=VALUE" lines (each shard's, in key order), then per tensor
 *                         in set order "NAME DTYPE [d0,d1,...] [begin,end) = v0 v1 ..." with
 *                         the values as float32 (%.9g) for the float dtypes, "raw HEX" else
 *   st-dump --write PATH  write the tensors of st_py.py's "same" with the library's writer
 *
 * Exit status 0, or 1 with the library's error on stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "safetensors.h"

/* Print tensor t of file f. Returns false after printing the error. */
static bool dump_tensor(const st_file *f, const st_tensor *t, strbuf *err) {
  printf("%s %s [", t->name, st_dtype_name(t->dtype));
  for (int i = 0; i < t->rank; i++) printf("%s%lld", i ? "," : "", (long long)t->shape[i]);
  printf("] [%lld,%lld) =", (long long)t->begin, (long long)t->end);
  bool ok;
  if (t->dtype == ST_F16 || t->dtype == ST_BF16 || t->dtype == ST_F32 || t->dtype == ST_F64) {
    float *v = xmalloc((size_t)(t->numel ? t->numel : 1) * sizeof *v);
    ok = st_read_f32(f, t, v, t->numel, err);
    for (int64_t i = 0; ok && i < t->numel; i++) printf(" %.9g", v[i]);
    free(v);
  } else {
    unsigned char *b = xmalloc((size_t)(t->end - t->begin + 1));
    ok = st_read_raw(f, t, b, t->end - t->begin, err);
    printf(" raw ");
    for (int64_t i = 0; ok && i < t->end - t->begin; i++) printf("%02x", b[i]);
    free(b);
  }
  printf("\n");
  return ok;
}

/* The tensors st_py.py's "same" writes with the reference implementation. */
static bool write_fixed(const char *path, strbuf *err) {
  static const float w[6] = {0.5f, -1.25f, 3.0e-5f, 65504.0f, -0.0f, 1.0f / 3.0f};
  static const float b[5] = {1.0f, 1.00390625f, 1.01171875f, -2.5f, 1e-3f};
  static const float s = 7.0f;
  st_writer *wr = st_writer_new();
  bool ok =
      st_writer_add(wr, "model.layers.0.mlp.weight", ST_F32, 2, (const int64_t[]){2, 3}, w, err) &&
      st_writer_add(wr, "lm_head.weight", ST_BF16, 1, (const int64_t[]){5}, b, err) &&
      st_writer_add(wr, "model.norm.weight", ST_BF16, 2, (const int64_t[]){1, 2}, b, err) &&
      st_writer_add(wr, "a.scalar", ST_F32, 0, NULL, &s, err) &&
      st_writer_add(wr, "empty", ST_F32, 2, (const int64_t[]){0, 4}, NULL, err);
  st_writer_meta(wr, "format", "pt");
  ok = ok && st_writer_write(wr, path, err);
  st_writer_free(wr);
  return ok;
}

int main(int argc, char **argv) {
  strbuf err = {0};
  bool ok;
  if (argc == 3 && strcmp(argv[1], "--write") == 0) {
    ok = write_fixed(argv[2], &err);
  } else if (argc == 2) {
    st_set *s = st_set_open(argv[1], &err);
    ok = s != NULL;
    for (size_t i = 0; ok && i < st_set_files(s); i++)
      for (size_t k = 0; k < st_meta_count(st_set_file(s, i)); k++) {
        const char *v, *key = st_meta_at(st_set_file(s, i), k, &v);
        printf("meta %s=%s\n", key, v);
      }
    for (size_t i = 0; ok && i < st_set_count(s); i++) {
      const st_file *f;
      const st_tensor *t = st_set_at(s, i, &f);
      ok = dump_tensor(f, t, &err);
    }
    st_set_close(s);
  } else {
    fprintf(stderr, "usage: st-dump PATH | st-dump --write PATH\n");
    return 2;
  }
  if (!ok) fprintf(stderr, "st-dump: error: %s\n", strbuf_cstr(&err));
  strbuf_free(&err);
  return ok ? 0 : 1;
}
