/* read.c -- the safetensors reader: st_open validates a file's whole header (length, UTF-8,
 * JSON, "__metadata__", every tensor's dtype, shape and offsets, names, the layout of the data
 * against the file's size) before any data is read; the tensors' data is read on demand with
 * pread and converted to float32. Also the dtype table's lookups and the element conversions. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "internal.h"

/* One row of dtypes.def. */
typedef struct st_dtype_info {
  const char *name; /* header spelling */
  int bytes;        /* element size */
  bool as_f32;      /* st_read_f32 converts it */
} st_dtype_info;

static const st_dtype_info st_dtypes[ST_DTYPE_COUNT] = {
#define ST_DTYPE(name, bytes, as_f32, write) {#name, bytes, as_f32},
#include "dtypes.def"
#undef ST_DTYPE
};

const char *st_dtype_name(st_dtype d) { return st_dtypes[d].name; }
int st_dtype_bytes(st_dtype d) { return st_dtypes[d].bytes; }

bool st_dtype_lookup(const char *name, st_dtype *out) {
  for (int d = 0; d < ST_DTYPE_COUNT; d++)
    if (strcmp(st_dtypes[d].name, name) == 0) {
      *out = (st_dtype)d;
      return true;
    }
  return false;
}

/* An open file. */
struct st_file {
  char *path;          /* as given to st_open */
  int fd;              /* open for reading */
  int64_t data_start;  /* offset of the data in the file: 8 + header length */
  int64_t data_len;    /* bytes of data (the file's size less data_start) */
  arena mem;           /* names, shapes, metadata */
  st_tensor *tensors;  /* in file order */
  size_t n;            /* their number */
  size_t *by_name;     /* indices of tensors sorted by name */
  const char **meta_k; /* "__metadata__" keys, sorted */
  const char **meta_v; /* their values */
  size_t nmeta;        /* their number */
};

void st_quote(strbuf *sb, const char *s) {
  strbuf_putc(sb, '\'');
  size_t n = strlen(s);
  size_t cut = n > DIAG_MAX_QUOTED ? DIAG_MAX_QUOTED : n;
  for (size_t i = 0; i < cut; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c < 0x20 || c == 0x7f)
      strbuf_printf(sb, "\\x%02x", c);
    else
      strbuf_putc(sb, (char)c);
  }
  if (cut < n) strbuf_puts(sb, "...");
  strbuf_putc(sb, '\'');
}

void st_err_at(strbuf *err, const char *path, const char *tensor) {
  strbuf_printf(err, "%s: ", path);
  if (tensor) {
    strbuf_puts(err, "tensor ");
    st_quote(err, tensor);
    strbuf_puts(err, ": ");
  }
}

/* Read exactly len bytes at offset 'at' of fd. Returns 0, or the errno (EIO for a short read:
 * the file ended). */
static int st_pread_all(int fd, void *buf, size_t len, int64_t at) {
  char *p = buf;
  while (len > 0) {
    ssize_t r = pread(fd, p, len, (off_t)at);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return errno;
    if (r == 0) return EIO;
    p += r;
    len -= (size_t)r;
    at += r;
  }
  return 0;
}

/* The byte offset of the first invalid UTF-8 sequence of s[0 .. n) (overlong forms, surrogates
 * and code points past U+10FFFF are invalid), or n when it is all valid. */
static size_t st_utf8_bad(const unsigned char *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    unsigned c = s[i];
    size_t k;
    unsigned cp, min;
    if (c < 0x80) {
      i++;
      continue;
    } else if (c >= 0xc2 && c <= 0xdf)
      k = 1, cp = c & 0x1f, min = 0x80;
    else if (c >= 0xe0 && c <= 0xef)
      k = 2, cp = c & 0x0f, min = 0x800;
    else if (c >= 0xf0 && c <= 0xf4)
      k = 3, cp = c & 0x07, min = 0x10000;
    else
      return i;
    if (n - i <= k) return i;
    for (size_t j = 1; j <= k; j++) {
      if ((s[i + j] & 0xc0) != 0x80) return i;
      cp = (cp << 6) | (s[i + j] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return i;
    i += k + 1;
  }
  return n;
}

/* The offset of a "\u0000" escape in the JSON text s[0 .. n) (which cJSON would read as the end
 * of its string, silently changing the name), or n when there is none. */
static size_t st_find_nul_escape(const char *s, size_t n) {
  for (size_t i = 0; i + 1 < n; i++) {
    if (s[i] != '\\') continue;
    if (s[i + 1] == 'u' && i + 6 <= n && memcmp(s + i + 2, "0000", 4) == 0) return i;
    i++; /* skip the escaped character (an escaped backslash included) */
  }
  return n;
}

/* Read JSON number j as a count: an integer in [0, 2^53). Returns false when it is not one. */
static bool st_json_count(const cJSON *j, int64_t *out) {
  if (!cJSON_IsNumber(j)) return false;
  double v = j->valuedouble;
  if (!(v >= 0 && v < (double)ST_MAX_COUNT) || v != floor(v)) return false;
  *out = (int64_t)v;
  return true;
}

/* Parse tensor 'name''s entry j of the header of 'path' into *t (name and shape in f's arena).
 * Returns false after appending the error. */
static bool st_parse_tensor(st_file *f, const char *name, const cJSON *j, st_tensor *t,
                            strbuf *err) {
  const char *path = f->path;
  if (!cJSON_IsObject(j)) {
    st_err_at(err, path, name);
    strbuf_puts(err,
                "its entry is not a JSON object with \"dtype\", \"shape\" and \"data_offsets\"");
    return false;
  }
  const cJSON *dtype = NULL, *shape = NULL, *offs = NULL;
  for (const cJSON *c = j->child; c; c = c->next) {
    const cJSON **slot = strcmp(c->string, "dtype") == 0          ? &dtype
                         : strcmp(c->string, "shape") == 0        ? &shape
                         : strcmp(c->string, "data_offsets") == 0 ? &offs
                                                                  : NULL;
    if (!slot || *slot) {
      st_err_at(err, path, name);
      strbuf_puts(err, slot ? "key " : "unknown key ");
      st_quote(err, c->string);
      strbuf_puts(err, slot ? " given twice"
                            : " (a tensor has \"dtype\", \"shape\" and \"data_offsets\")");
      return false;
    }
    *slot = c;
  }
  const char *missing = !dtype ? "dtype" : !shape ? "shape" : !offs ? "data_offsets" : NULL;
  if (missing) {
    st_err_at(err, path, name);
    strbuf_printf(err, "no \"%s\"", missing);
    return false;
  }
  if (!cJSON_IsString(dtype) || !st_dtype_lookup(dtype->valuestring, &t->dtype)) {
    st_err_at(err, path, name);
    if (!cJSON_IsString(dtype)) {
      strbuf_puts(err, "\"dtype\" is not a string");
      return false;
    }
    strbuf_puts(err, "unknown dtype ");
    st_quote(err, dtype->valuestring);
    suggest s;
    suggest_init(&s, dtype->valuestring);
    for (int d = 0; d < ST_DTYPE_COUNT; d++) suggest_add(&s, st_dtypes[d].name);
    if (suggest_result(&s)) strbuf_printf(err, " (did you mean '%s'?)", suggest_result(&s));
    return false;
  }
  if (!cJSON_IsArray(shape)) {
    st_err_at(err, path, name);
    strbuf_puts(err, "\"shape\" is not an array of dimensions");
    return false;
  }
  t->rank = cJSON_GetArraySize(shape);
  int64_t *dims = arena_alloc(&f->mem, (size_t)(t->rank ? t->rank : 1) * sizeof *dims);
  t->numel = 1;
  bool overflow = false, empty = false;
  int k = 0;
  for (const cJSON *c = shape->child; c; c = c->next, k++) {
    if (!st_json_count(c, &dims[k])) {
      st_err_at(err, path, name);
      strbuf_printf(err, "shape dimension %d is not an integer in [0, 2^53)", k);
      return false;
    }
    if (dims[k] == 0)
      empty = true;
    else if (t->numel > (ST_MAX_COUNT - 1) / dims[k])
      overflow = true;
    else if (!overflow)
      t->numel *= dims[k];
  }
  t->shape = dims;
  if (empty)
    t->numel = 0;
  else if (overflow) {
    st_err_at(err, path, name);
    strbuf_puts(err, "the shape has 2^53 elements or more");
    return false;
  }
  int64_t b, e;
  if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 || !st_json_count(offs->child, &b) ||
      !st_json_count(offs->child->next, &e) || e < b) {
    st_err_at(err, path, name);
    strbuf_puts(err, "\"data_offsets\" is not [begin, end] with integers 0 <= begin <= end < 2^53");
    return false;
  }
  t->begin = b;
  t->end = e;
  int64_t bytes = t->numel * st_dtypes[t->dtype].bytes;
  if (bytes != e - b) { /* numel < 2^53, so bytes < 2^56: no overflow */
    st_err_at(err, path, name);
    strbuf_puts(err, "shape [");
    for (int i = 0; i < t->rank; i++)
      strbuf_printf(err, "%s%lld", i ? ", " : "", (long long)dims[i]);
    strbuf_printf(err, "] of %s is %lld bytes but data_offsets [%lld, %lld) hold %lld",
                  st_dtypes[t->dtype].name, (long long)bytes, (long long)b, (long long)e,
                  (long long)(e - b));
    return false;
  }
  return true;
}

/* Parse "__metadata__" j of f's header. Returns false after appending the error. */
static bool st_parse_meta(st_file *f, const cJSON *j, strbuf *err) {
  if (!cJSON_IsObject(j)) {
    st_err_at(err, f->path, NULL);
    strbuf_puts(err, "\"__metadata__\" is not an object of strings");
    return false;
  }
  size_t n = (size_t)cJSON_GetArraySize(j);
  f->meta_k = arena_alloc(&f->mem, (n ? n : 1) * sizeof *f->meta_k);
  f->meta_v = arena_alloc(&f->mem, (n ? n : 1) * sizeof *f->meta_v);
  for (const cJSON *c = j->child; c; c = c->next) {
    if (!cJSON_IsString(c)) {
      st_err_at(err, f->path, NULL);
      strbuf_puts(err, "\"__metadata__\" entry ");
      st_quote(err, c->string);
      strbuf_puts(err, " is not a string (metadata maps strings to strings)");
      return false;
    }
    /* insertion sort by key: metadata maps are small */
    size_t i = f->nmeta++;
    while (i > 0 && strcmp(f->meta_k[i - 1], c->string) > 0) {
      f->meta_k[i] = f->meta_k[i - 1];
      f->meta_v[i] = f->meta_v[i - 1];
      i--;
    }
    if (i > 0 && strcmp(f->meta_k[i - 1], c->string) == 0) {
      st_err_at(err, f->path, NULL);
      strbuf_puts(err, "\"__metadata__\" key ");
      st_quote(err, c->string);
      strbuf_puts(err, " given twice");
      return false;
    }
    f->meta_k[i] = arena_strdup(&f->mem, c->string);
    f->meta_v[i] = arena_strdup(&f->mem, c->valuestring);
  }
  return true;
}

/* qsort context-free comparisons: the file whose tensors are being sorted. */
static _Thread_local const st_file *st_sorting;

static int st_cmp_name(const void *a, const void *b) {
  const st_tensor *x = &st_sorting->tensors[*(const size_t *)a];
  const st_tensor *y = &st_sorting->tensors[*(const size_t *)b];
  return strcmp(x->name, y->name);
}

/* File order: by begin, then end (a tensor of no bytes before one that starts there), then
 * header order (kept in *by_name's slots before the sort). */
static int st_cmp_offset(const void *a, const void *b) {
  const st_tensor *x = &st_sorting->tensors[*(const size_t *)a];
  const st_tensor *y = &st_sorting->tensors[*(const size_t *)b];
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return *(const size_t *)a < *(const size_t *)b ? -1 : *(const size_t *)a > *(const size_t *)b;
}

/* Check that f's tensors (in header order) have distinct names and offsets that tile
 * [0, data_len); put them in file order and build the name index. Returns false after
 * appending the error. */
static bool st_layout(st_file *f, strbuf *err) {
  size_t n = f->n;
  size_t *order = xmalloc((n ? n : 1) * sizeof *order);
  for (size_t i = 0; i < n; i++) order[i] = i;
  st_sorting = f;
  qsort(order, n, sizeof *order, st_cmp_offset);
  st_tensor *sorted = arena_alloc(&f->mem, (n ? n : 1) * sizeof *sorted);
  for (size_t i = 0; i < n; i++) sorted[i] = f->tensors[order[i]];
  free(order);
  f->tensors = sorted;
  f->by_name = xmalloc((n ? n : 1) * sizeof *f->by_name);
  for (size_t i = 0; i < n; i++) f->by_name[i] = i;
  qsort(f->by_name, n, sizeof *f->by_name, st_cmp_name);
  /* a name given twice first: it would make the other errors ambiguous */
  for (size_t i = 1; i < n; i++)
    if (strcmp(sorted[f->by_name[i]].name, sorted[f->by_name[i - 1]].name) == 0) {
      st_err_at(err, f->path, sorted[f->by_name[i]].name);
      strbuf_puts(err, "named twice in the header");
      return false;
    }
  int64_t at = 0;
  for (size_t i = 0; i < n; i++) {
    const st_tensor *t = &sorted[i];
    if (t->begin == at) {
      at = t->end;
      continue;
    }
    st_err_at(err, f->path, t->name);
    if (t->begin < at) {
      strbuf_printf(err, "data_offsets [%lld, %lld) overlap tensor ", (long long)t->begin,
                    (long long)t->end);
      st_quote(err, sorted[i - 1].name);
      strbuf_printf(err, "'s [%lld, %lld)", (long long)sorted[i - 1].begin,
                    (long long)sorted[i - 1].end);
    } else if (i == 0) {
      strbuf_printf(err, "the first tensor's data starts at byte %lld, not 0: a gap of %lld bytes",
                    (long long)t->begin, (long long)t->begin);
    } else {
      strbuf_printf(err, "data_offsets [%lld, %lld) leave a gap of %lld bytes after tensor ",
                    (long long)t->begin, (long long)t->end, (long long)(t->begin - at));
      st_quote(err, sorted[i - 1].name);
      strbuf_printf(err, " (which ends at %lld)", (long long)at);
    }
    return false;
  }
  if (at > f->data_len) {
    size_t i = 0;
    while (sorted[i].end <= f->data_len) i++;
    st_err_at(err, f->path, sorted[i].name);
    strbuf_printf(err,
                  "truncated: its data [%lld, %lld) runs past the end of the data, which "
                  "holds %lld bytes (the file has %lld)",
                  (long long)sorted[i].begin, (long long)sorted[i].end, (long long)f->data_len,
                  (long long)(f->data_start + f->data_len));
    return false;
  }
  if (at < f->data_len) {
    st_err_at(err, f->path, NULL);
    strbuf_printf(err,
                  "%lld bytes after the last tensor's data (the tensors end at byte %lld "
                  "of the data, the file holds %lld)",
                  (long long)(f->data_len - at), (long long)at, (long long)f->data_len);
    return false;
  }
  return true;
}

/* Validate the header text h[0 .. n) of f and fill f's tables. Returns false after appending
 * the error. */
static bool st_parse_header(st_file *f, const char *h, size_t n, strbuf *err) {
  size_t bad = st_utf8_bad((const unsigned char *)h, n);
  if (bad < n) {
    st_err_at(err, f->path, NULL);
    strbuf_printf(err, "the header is not UTF-8 (at byte %zu of the header)", bad);
    return false;
  }
  if (n == 0 || h[0] != '{') {
    st_err_at(err, f->path, NULL);
    strbuf_puts(err, "the header is not a JSON object (it must start with '{')");
    return false;
  }
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)h[i] < 0x20 && !strchr("\t\r\n", h[i])) {
      st_err_at(err, f->path, NULL);
      strbuf_printf(err,
                    "the header has control character 0x%02x at byte %zu (JSON allows "
                    "none outside escapes)",
                    (unsigned char)h[i], i);
      return false;
    }
  size_t nul = st_find_nul_escape(h, n);
  if (nul < n) {
    st_err_at(err, f->path, NULL);
    strbuf_printf(err, "the header has a \\u0000 in a string (at byte %zu of the header)", nul);
    return false;
  }
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(h, n, &end, 0);
  if (!root || !cJSON_IsObject(root)) {
    st_err_at(err, f->path, NULL);
    size_t at = end && end >= h && end <= h + n ? (size_t)(end - h) : 0;
    strbuf_printf(err, "the header is not valid JSON (at byte %zu of the header)", at);
    cJSON_Delete(root);
    return false;
  }
  for (const char *p = end; p < h + n; p++)
    if (!strchr(" \t\r\n", *p)) {
      st_err_at(err, f->path, NULL);
      strbuf_printf(err,
                    "the header has more than one JSON value (byte %zu of the header "
                    "follows the object and is not a space)",
                    (size_t)(p - h));
      cJSON_Delete(root);
      return false;
    }
  size_t cap = (size_t)cJSON_GetArraySize(root);
  f->tensors = arena_alloc(&f->mem, (cap ? cap : 1) * sizeof *f->tensors);
  bool ok = true, have_meta = false;
  for (const cJSON *c = root->child; c && ok; c = c->next) {
    if (strcmp(c->string, "__metadata__") == 0) {
      if (have_meta) {
        st_err_at(err, f->path, NULL);
        strbuf_puts(err, "\"__metadata__\" given twice");
        ok = false;
      } else {
        ok = st_parse_meta(f, c, err);
      }
      have_meta = true;
      continue;
    }
    st_tensor *t = &f->tensors[f->n];
    t->name = arena_strdup(&f->mem, c->string);
    ok = st_parse_tensor(f, t->name, c, t, err);
    if (ok) f->n++;
  }
  cJSON_Delete(root);
  return ok && st_layout(f, err);
}

st_file *st_open(const char *path, strbuf *err) {
  st_file *f = xcalloc(1, sizeof *f);
  f->path = xstrdup(path);
  f->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO must not block the open */
  struct stat st;
  if (f->fd < 0 || fstat(f->fd, &st) != 0) {
    st_err_at(err, path, NULL);
    strbuf_puts(err, strerror(errno));
    st_close(f);
    return NULL;
  }
  if (!S_ISREG(st.st_mode)) {
    st_err_at(err, path, NULL);
    strbuf_puts(err, S_ISDIR(st.st_mode) ? "is a directory" : "not a regular file");
    st_close(f);
    return NULL;
  }
  int64_t size = (int64_t)st.st_size;
  unsigned char len8[8];
  if (size < 8) {
    st_err_at(err, path, NULL);
    strbuf_printf(err,
                  "%lld bytes: too short for a safetensors file (8 bytes of header length, "
                  "then the header)",
                  (long long)size);
    st_close(f);
    return NULL;
  }
  int e = st_pread_all(f->fd, len8, 8, 0);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | len8[i];
  if (!e && hlen > (uint64_t)ST_MAX_HEADER_BYTES) {
    st_err_at(err, path, NULL);
    strbuf_printf(err, "header length %llu is over %lld bytes, the limit", (unsigned long long)hlen,
                  (long long)ST_MAX_HEADER_BYTES);
    st_close(f);
    return NULL;
  }
  if (!e && (int64_t)hlen > size - 8) {
    st_err_at(err, path, NULL);
    strbuf_printf(err, "header length %llu runs past the end of the file (%lld bytes)",
                  (unsigned long long)hlen, (long long)size);
    st_close(f);
    return NULL;
  }
  char *h = NULL;
  if (!e) {
    h = xmalloc(hlen + 1);
    e = st_pread_all(f->fd, h, hlen, 8);
  }
  if (e) {
    st_err_at(err, path, NULL);
    strbuf_puts(err, e == EIO ? "the file changed while it was read" : strerror(e));
    free(h);
    st_close(f);
    return NULL;
  }
  h[hlen] = '\0';
  f->data_start = 8 + (int64_t)hlen;
  f->data_len = size - f->data_start;
  bool ok = st_parse_header(f, h, hlen, err);
  free(h);
  if (!ok) {
    st_close(f);
    return NULL;
  }
  return f;
}

void st_close(st_file *f) {
  if (!f) return;
  if (f->fd >= 0) close(f->fd);
  free(f->path);
  free(f->by_name);
  arena_free(&f->mem);
  free(f);
}

const char *st_path(const st_file *f) { return f->path; }
size_t st_count(const st_file *f) { return f->n; }
const st_tensor *st_at(const st_file *f, size_t i) { return &f->tensors[i]; }

const st_tensor *st_find(const st_file *f, const char *name) {
  size_t lo = 0, hi = f->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(f->tensors[f->by_name[mid]].name, name);
    if (c == 0) return &f->tensors[f->by_name[mid]];
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return NULL;
}

size_t st_meta_count(const st_file *f) { return f->nmeta; }

const char *st_meta_at(const st_file *f, size_t i, const char **value) {
  *value = f->meta_v[i];
  return f->meta_k[i];
}

const char *st_meta(const st_file *f, const char *key) {
  for (size_t i = 0; i < f->nmeta; i++)
    if (strcmp(f->meta_k[i], key) == 0) return f->meta_v[i];
  return NULL;
}

float st_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, ex = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
  if (ex == 0x1f) {
    bits = sign | 0x7f800000u | man << 13; /* infinity, NaN (payload kept) */
  } else if (ex != 0) {
    bits = sign | (ex + 112) << 23 | man << 13; /* rebias 15 -> 127 */
  } else if (man == 0) {
    bits = sign;
  } else { /* subnormal: man x 2^-24, normal in float32 */
    int shift = 0;
    while (!(man & 0x400)) man <<= 1, shift++;
    bits = sign | (uint32_t)(113 - shift) << 23 | (man & 0x3ff) << 13;
  }
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

float st_bf16_to_f32(uint16_t b) {
  uint32_t bits = (uint32_t)b << 16;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

uint16_t st_f32_to_bf16(float f) {
  if (isnan(f)) return 0x7fc0;
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  u += 0x7fff + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}

bool st_read_raw(const st_file *f, const st_tensor *t, void *out, int64_t len, strbuf *err) {
  int e = st_pread_all(f->fd, out, (size_t)len, f->data_start + t->begin);
  if (!e) return true;
  st_err_at(err, f->path, t->name);
  strbuf_puts(err, e == EIO ? "truncated: the file shrank since it was opened" : strerror(e));
  return false;
}

bool st_read_f32(const st_file *f, const st_tensor *t, float *out, int64_t n, strbuf *err) {
  (void)n;
  if (!st_dtypes[t->dtype].as_f32) {
    st_err_at(err, f->path, t->name);
    strbuf_printf(err, "dtype %s is not a float type: it cannot be read as float32",
                  st_dtypes[t->dtype].name);
    return false;
  }
  enum { CHUNK = 1 << 16 }; /* elements converted per read */
  int size = st_dtypes[t->dtype].bytes;
  unsigned char *buf = xmalloc((size_t)CHUNK * (size_t)size);
  bool ok = true;
  for (int64_t done = 0; done < t->numel && ok; done += CHUNK) {
    int64_t k = t->numel - done < CHUNK ? t->numel - done : CHUNK;
    int e = st_pread_all(f->fd, buf, (size_t)(k * size), f->data_start + t->begin + done * size);
    if (e) {
      st_err_at(err, f->path, t->name);
      strbuf_puts(err, e == EIO ? "truncated: the file shrank since it was opened" : strerror(e));
      ok = false;
      break;
    }
    for (int64_t i = 0; i < k && ok; i++) {
      const unsigned char *p = buf + i * size;
      uint64_t u = 0;
      for (int b = size - 1; b >= 0; b--) u = u << 8 | p[b]; /* little-endian */
      float *o = &out[done + i];
      if (t->dtype == ST_F16) {
        *o = st_f16_to_f32((uint16_t)u);
      } else if (t->dtype == ST_BF16) {
        *o = st_bf16_to_f32((uint16_t)u);
      } else if (t->dtype == ST_F32) {
        uint32_t w = (uint32_t)u;
        memcpy(o, &w, sizeof w);
      } else { /* ST_F64 */
        double d;
        memcpy(&d, &u, sizeof d);
        *o = (float)d;
        if (isinf(*o) && !isinf(d)) {
          st_err_at(err, f->path, t->name);
          strbuf_printf(err, "element %lld (%.17g) is outside float32's range",
                        (long long)(done + i), d);
          ok = false;
        }
      }
    }
  }
  free(buf);
  return ok;
}
