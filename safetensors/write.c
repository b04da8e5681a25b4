/* write.c -- the safetensors writer: named float32 tensors written as F32 or BF16 with
 * "__metadata__", laid out and serialized as the reference writer does (data by decreasing
 * dtype alignment, then name; compact JSON; spaces to a multiple of 8 bytes), streamed to a
 * temporary beside the target that is flushed and renamed over it. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

/* One tensor to write. */
typedef struct st_wtensor {
  char *name;        /* its name */
  st_dtype dtype;    /* ST_F32 or ST_BF16 */
  int rank;          /* dimensions */
  int64_t *shape;    /* rank dimensions (copied) */
  int64_t numel;     /* their product */
  const float *data; /* numel values (borrowed) */
} st_wtensor;

/* The writer. */
struct st_writer {
  st_wtensor *t;          /* tensors in the order added */
  size_t n, cap;          /* their number, allocated */
  char **meta_k;          /* "__metadata__" keys, sorted */
  char **meta_v;          /* their values */
  size_t nmeta, meta_cap; /* their number, allocated */
};

/* Whether the writer produces dtype d (dtypes.def's WRITE column). */
static const bool st_writable[ST_DTYPE_COUNT] = {
#define ST_DTYPE(name, bytes, as_f32, write) write,
#include "dtypes.def"
#undef ST_DTYPE
};

void st_json_str(strbuf *sb, const char *s) {
  strbuf_putc(sb, '"');
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    switch (*p) {
    case '"':
      strbuf_puts(sb, "\\\"");
      break;
    case '\\':
      strbuf_puts(sb, "\\\\");
      break;
    case '\b':
      strbuf_puts(sb, "\\b");
      break;
    case '\f':
      strbuf_puts(sb, "\\f");
      break;
    case '\n':
      strbuf_puts(sb, "\\n");
      break;
    case '\r':
      strbuf_puts(sb, "\\r");
      break;
    case '\t':
      strbuf_puts(sb, "\\t");
      break;
    default:
      if (*p < 0x20)
        strbuf_printf(sb, "\\u%04x", *p);
      else
        strbuf_putc(sb, (char)*p);
    }
  }
  strbuf_putc(sb, '"');
}

st_writer *st_writer_new(void) { return xcalloc(1, sizeof(st_writer)); }

void st_writer_free(st_writer *w) {
  if (!w) return;
  for (size_t i = 0; i < w->n; i++) {
    free(w->t[i].name);
    free(w->t[i].shape);
  }
  for (size_t i = 0; i < w->nmeta; i++) {
    free(w->meta_k[i]);
    free(w->meta_v[i]);
  }
  free(w->t);
  free(w->meta_k);
  free(w->meta_v);
  free(w);
}

bool st_writer_add(st_writer *w, const char *name, st_dtype dtype, int rank, const int64_t *shape,
                   const float *data, strbuf *err) {
  strbuf why = {0}; /* the problem, if any */
  if (strcmp(name, "__metadata__") == 0)
    strbuf_puts(&why, "the name \"__metadata__\" is the header's metadata key");
  for (size_t i = 0; i < w->n && !why.len; i++)
    if (strcmp(w->t[i].name, name) == 0) strbuf_puts(&why, "added twice");
  if (!why.len && ((int)dtype < 0 || dtype >= ST_DTYPE_COUNT || !st_writable[dtype]))
    strbuf_puts(&why, "the writer writes F32 and BF16 only");
  if (!why.len && rank < 0) strbuf_printf(&why, "rank %d is negative", rank);
  int64_t numel = 1;
  bool empty = false;
  for (int i = 0; i < rank && !why.len; i++) {
    if (shape[i] < 0 || shape[i] >= ST_MAX_COUNT)
      strbuf_printf(&why, "dimension %d is %lld, not in [0, 2^53)", i, (long long)shape[i]);
    else if (shape[i] == 0)
      empty = true;
    else if (numel > (ST_MAX_COUNT - 1) / shape[i])
      strbuf_puts(&why, "2^53 elements or more");
    else
      numel *= shape[i];
  }
  if (empty) numel = 0;
  if (!why.len && numel > 0 && !data) strbuf_puts(&why, "no data");
  if (why.len) {
    strbuf_puts(err, "tensor ");
    st_quote(err, name);
    strbuf_printf(err, ": %s", why.data);
    strbuf_free(&why);
    return false;
  }
  VEC_RESERVE(w->t, w->n, w->cap);
  st_wtensor *t = &w->t[w->n++];
  t->name = xstrdup(name);
  t->dtype = dtype;
  t->rank = rank;
  t->shape = xmalloc((size_t)(rank ? rank : 1) * sizeof *t->shape);
  if (rank) memcpy(t->shape, shape, (size_t)rank * sizeof *shape);
  t->numel = numel;
  t->data = data;
  return true;
}

void st_writer_meta(st_writer *w, const char *key, const char *value) {
  size_t i = 0;
  while (i < w->nmeta && strcmp(w->meta_k[i], key) < 0) i++;
  if (i < w->nmeta && strcmp(w->meta_k[i], key) == 0) {
    free(w->meta_v[i]);
    w->meta_v[i] = xstrdup(value);
    return;
  }
  if (w->nmeta >= w->meta_cap) {
    w->meta_cap = w->meta_cap ? 2 * w->meta_cap : 8;
    w->meta_k = xrealloc(w->meta_k, w->meta_cap * sizeof *w->meta_k);
    w->meta_v = xrealloc(w->meta_v, w->meta_cap * sizeof *w->meta_v);
  }
  memmove(w->meta_k + i + 1, w->meta_k + i, (w->nmeta - i) * sizeof *w->meta_k);
  memmove(w->meta_v + i + 1, w->meta_v + i, (w->nmeta - i) * sizeof *w->meta_v);
  w->meta_k[i] = xstrdup(key);
  w->meta_v[i] = xstrdup(value);
  w->nmeta++;
}

/* The reference writer's data order: decreasing dtype alignment (later rows of dtypes.def
 * first), then name, bytewise. */
static int st_cmp_write(const void *a, const void *b) {
  const st_wtensor *x = *(const st_wtensor *const *)a, *y = *(const st_wtensor *const *)b;
  if (x->dtype != y->dtype) return x->dtype > y->dtype ? -1 : 1;
  return strcmp(x->name, y->name);
}

/* Write all of buf[0 .. len) to fd. Returns 0 or the errno. */
static int st_write_all(int fd, const void *buf, size_t len) {
  const char *p = buf;
  while (len > 0) {
    ssize_t w = write(fd, p, len);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return w < 0 ? errno : ENOSPC;
    p += w;
    len -= (size_t)w;
  }
  return 0;
}

/* Write tensor t's data to fd, little-endian, in its dtype. Returns 0 or the errno. */
static int st_write_data(int fd, const st_wtensor *t) {
  enum { CHUNK = 1 << 16 }; /* elements encoded per write */
  unsigned char *buf = xmalloc((size_t)CHUNK * 4);
  int e = 0;
  for (int64_t done = 0; done < t->numel && !e; done += CHUNK) {
    int64_t k = t->numel - done < CHUNK ? t->numel - done : CHUNK;
    unsigned char *p = buf;
    for (int64_t i = 0; i < k; i++) {
      uint32_t u;
      memcpy(&u, &t->data[done + i], sizeof u);
      if (t->dtype == ST_BF16) {
        uint16_t b = st_f32_to_bf16(t->data[done + i]);
        *p++ = (unsigned char)b;
        *p++ = (unsigned char)(b >> 8);
      } else {
        for (int j = 0; j < 4; j++) *p++ = (unsigned char)(u >> (8 * j));
      }
    }
    e = st_write_all(fd, buf, (size_t)(p - buf));
  }
  free(buf);
  return e;
}

bool st_writer_write(const st_writer *w, const char *path, strbuf *err) {
  const st_wtensor **order = xmalloc((w->n ? w->n : 1) * sizeof *order);
  for (size_t i = 0; i < w->n; i++) order[i] = &w->t[i];
  qsort(order, w->n, sizeof *order, st_cmp_write);
  /* the header: 8 bytes of length, then compact JSON */
  strbuf h = {0};
  strbuf_append(&h, "\0\0\0\0\0\0\0\0", 8);
  strbuf_putc(&h, '{');
  if (w->nmeta) {
    strbuf_puts(&h, "\"__metadata__\":{");
    for (size_t i = 0; i < w->nmeta; i++) {
      if (i) strbuf_putc(&h, ',');
      st_json_str(&h, w->meta_k[i]);
      strbuf_putc(&h, ':');
      st_json_str(&h, w->meta_v[i]);
    }
    strbuf_putc(&h, '}');
  }
  int64_t off = 0;
  for (size_t i = 0; i < w->n; i++) {
    const st_wtensor *t = order[i];
    int64_t bytes = t->numel * st_dtype_bytes(t->dtype);
    if (i || w->nmeta) strbuf_putc(&h, ',');
    st_json_str(&h, t->name);
    strbuf_printf(&h, ":{\"dtype\":\"%s\",\"shape\":[", st_dtype_name(t->dtype));
    for (int d = 0; d < t->rank; d++)
      strbuf_printf(&h, "%s%lld", d ? "," : "", (long long)t->shape[d]);
    strbuf_printf(&h, "],\"data_offsets\":[%lld,%lld]}", (long long)off, (long long)(off + bytes));
    off += bytes;
  }
  strbuf_putc(&h, '}');
  while ((h.len - 8) % 8) strbuf_putc(&h, ' ');
  uint64_t hlen = h.len - 8;
  for (int i = 0; i < 8; i++) h.data[i] = (char)(hlen >> (8 * i));
  bool ok = false;
  strbuf tmp = {0};
  struct stat st;
  int e = 0;
  if (hlen > (uint64_t)ST_MAX_HEADER_BYTES) {
    strbuf_printf(err, "%s: the header would be %llu bytes, over the limit of %lld", path,
                  (unsigned long long)hlen, (long long)ST_MAX_HEADER_BYTES);
    goto out;
  }
  if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
    strbuf_printf(err, "%s: exists and is not a regular file", path);
    goto out;
  }
  /* a temporary beside the target (same file system: the rename is atomic) */
  static unsigned counter;
  int fd = -1;
  for (int tries = 0; tries < 100 && fd < 0; tries++) {
    tmp.len = 0;
    strbuf_printf(&tmp, "%s.tmp%ld.%u", path, (long)getpid(),
                  __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED));
    fd = open(tmp.data, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) {
    strbuf_printf(err, "%s: %s", path, strerror(errno));
    goto out;
  }
  e = st_write_all(fd, h.data, h.len);
  for (size_t i = 0; i < w->n && !e; i++) e = st_write_data(fd, order[i]);
  if (!e && fsync(fd) != 0) e = errno;
  if (close(fd) != 0 && !e) e = errno;
  if (!e && rename(tmp.data, path) != 0) e = errno;
  if (e) {
    unlink(tmp.data);
    strbuf_printf(err, "%s: %s", path, strerror(e));
  }
  ok = !e;
out:
  strbuf_free(&tmp);
  strbuf_free(&h);
  free(order);
  return ok;
}
