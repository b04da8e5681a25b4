/* fuzz_safetensors.c -- libFuzzer harness of the safetensors reader (st_open, st_read_f32,
 * st_read_raw) and of sharded sets (st_set_open): any bytes as a file, every tensor of a file
 * that opens read in full; then the same bytes as the index of a directory whose only shard,
 * "model.safetensors", is a valid file holding the F32 tensor "w" (the seed index maps it). */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "fuzz.h"
#include "safetensors.h"
#include "support.h"

/* Read every tensor of f as st-dump does: float32 for the float dtypes, raw bytes else. */
static void fz_read(const st_file *f, const st_tensor *t, strbuf *err) {
  /* st_open checked the sizes against the file: the buffers are no larger than the input */
  int64_t bytes = t->end - t->begin;
  float *v = xmalloc((size_t)(t->numel ? t->numel : 1) * sizeof *v);
  if (!st_read_f32(f, t, v, t->numel, err)) {
    void *raw = xmalloc((size_t)(bytes ? bytes : 1));
    st_read_raw(f, t, raw, bytes, err);
    free(raw);
  }
  free(v);
}

/* Write data[0 .. size) to 'path'. Returns false when it cannot. */
static bool fz_put(const char *path, const uint8_t *data, size_t size) {
  FILE *f = fopen(path, "wb");
  if (!f) return false;
  bool ok = fwrite(data, 1, size, f) == size;
  return fclose(f) == 0 && ok;
}

/* The directory of this process's inputs (made on the first input, removed at exit), its input
 * file, its index and its shard. */
static char fz_dir[] = "/tmp/octo-fuzz-st-XXXXXX";
static char fz_file[64], fz_index[80], fz_shard[64];

static void fz_cleanup(void) {
  unlink(fz_file);
  unlink(fz_index);
  unlink(fz_shard);
  rmdir(fz_dir);
}

/* Make the directory and its shard once. Returns false when it cannot. */
static bool fz_setup(strbuf *err) {
  static int state; /* 0: not yet, 1: ready, 2: failed */
  if (state) return state == 1;
  state = 2;
  if (!mkdtemp(fz_dir)) return false;
  snprintf(fz_file, sizeof fz_file, "%s/in.safetensors", fz_dir);
  snprintf(fz_index, sizeof fz_index, "%s/%s", fz_dir, ST_INDEX_NAME);
  snprintf(fz_shard, sizeof fz_shard, "%s/%s", fz_dir, ST_SINGLE_NAME);
  atexit(fz_cleanup);
  static const float w[2] = {1, 2};
  st_writer *wr = st_writer_new();
  st_writer_add(wr, "w", ST_F32, 1, (const int64_t[]){2}, w, err);
  bool ok = st_writer_write(wr, fz_shard, err);
  st_writer_free(wr);
  if (ok) state = 1;
  return ok;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  strbuf err = {0};
  if (!fz_setup(&err)) {
    strbuf_free(&err);
    return 0;
  }
  if (fz_put(fz_file, data, size)) {
    st_file *f = st_open(fz_file, &err);
    for (size_t i = 0; f && i < st_count(f); i++) fz_read(f, st_at(f, i), &err);
    for (size_t i = 0; f && i < st_meta_count(f); i++) {
      const char *v;
      st_meta_at(f, i, &v);
    }
    st_close(f);
  }
  if (fz_put(fz_index, data, size)) {
    st_set *s = st_set_open(fz_dir, &err);
    for (size_t i = 0; s && i < st_set_count(s); i++) {
      const st_file *f;
      const st_tensor *t = st_set_at(s, i, &f);
      if (st_set_find(s, t->name, NULL) != t) abort(); /* the index must find what it lists */
      fz_read(f, t, &err);
    }
    st_set_close(s);
  }
  strbuf_free(&err);
  return 0;
}
