/* support.c -- allocation, arena, string buffer, suggestions, number formatting, bounded file
 * reading and atomic file writing. */
#include "support.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

static void *oom(void) {
  fputs("octopipe: out of memory\n", stderr);
  abort();
}

void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  return p ? p : oom();
}

void *xcalloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size ? size : 1);
  return p ? p : oom();
}

void *xrealloc(void *p, size_t n) {
  void *q = realloc(p, n ? n : 1);
  return q ? q : oom();
}

char *xstrdup(const char *s) { return xstrndup(s, strlen(s)); }

double support_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

char *xstrndup(const char *s, size_t n) {
  char *p = xmalloc(n + 1);
  memcpy(p, s, n);
  p[n] = 0;
  return p;
}

/* ---- Arena ---- */

struct arena_block {
  arena_block *next; /* older block */
  size_t used, size; /* bytes used / available in data */
  _Alignas(16) unsigned char data[];
};

void *arena_alloc(arena *a, size_t n) {
  n = (n + 15) & ~(size_t)15;
  arena_block *b = a->head;
  if (!b || b->size - b->used < n) {
    size_t size = n > 32768 ? n : 32768;
    b = xmalloc(sizeof *b + size);
    b->next = a->head;
    b->used = 0;
    b->size = size;
    a->head = b;
  }
  void *p = b->data + b->used;
  b->used += n;
  memset(p, 0, n);
  return p;
}

char *arena_strndup(arena *a, const char *s, size_t n) {
  char *p = arena_alloc(a, n + 1);
  memcpy(p, s, n);
  p[n] = 0;
  return p;
}

char *arena_strdup(arena *a, const char *s) { return arena_strndup(a, s, strlen(s)); }

void arena_free(arena *a) {
  for (arena_block *b = a->head, *next; b; b = next) {
    next = b->next;
    free(b);
  }
  a->head = NULL;
}

/* ---- String buffer ---- */

static void strbuf_grow(strbuf *sb, size_t extra) {
  if (sb->len + extra + 1 <= sb->cap) return;
  size_t cap = sb->cap ? sb->cap : 64;
  while (cap < sb->len + extra + 1) cap *= 2;
  sb->data = xrealloc(sb->data, cap);
  sb->cap = cap;
}

void strbuf_append(strbuf *sb, const char *s, size_t n) {
  strbuf_grow(sb, n);
  memcpy(sb->data + sb->len, s, n);
  sb->len += n;
  sb->data[sb->len] = 0;
}

void strbuf_puts(strbuf *sb, const char *s) { strbuf_append(sb, s, strlen(s)); }

void strbuf_putc(strbuf *sb, char c) { strbuf_append(sb, &c, 1); }

void strbuf_vprintf(strbuf *sb, const char *fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (n < 0) return;
  strbuf_grow(sb, (size_t)n);
  vsnprintf(sb->data + sb->len, (size_t)n + 1, fmt, ap);
  sb->len += (size_t)n;
}

void strbuf_printf(strbuf *sb, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  strbuf_vprintf(sb, fmt, ap);
  va_end(ap);
}

const char *strbuf_cstr(const strbuf *sb) { return sb->data ? sb->data : ""; }

void strbuf_json_str(strbuf *sb, const char *s) {
  if (!s) {
    strbuf_puts(sb, "null");
    return;
  }
  strbuf_putc(sb, '"');
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    switch (*p) {
    case '"': strbuf_puts(sb, "\\\""); break;
    case '\\': strbuf_puts(sb, "\\\\"); break;
    case '\n': strbuf_puts(sb, "\\n"); break;
    case '\t': strbuf_puts(sb, "\\t"); break;
    case '\r': strbuf_puts(sb, "\\r"); break;
    default:
      if (*p < 0x20 || *p == 0x7f)
        strbuf_printf(sb, "\\u%04x", *p);
      else
        strbuf_putc(sb, (char)*p);
    }
  }
  strbuf_putc(sb, '"');
}

int trace_id_pid(int index) { return index + 1; }

int trace_id_stride(int max_pid, int nthreads) {
  int stride = 10;
  while (stride <= max_pid || stride < nthreads) stride *= 10;
  return stride;
}

int trace_id_tid(int pid, int k, int stride) { return pid * stride + k; }

void strbuf_free(strbuf *sb) {
  free(sb->data);
  sb->data = NULL;
  sb->len = sb->cap = 0;
}

/* ---- Suggestions ---- */

int str_edit_distance(const char *a, const char *b, int max) {
  /* optimal string alignment: insertions, deletions, substitutions, adjacent swaps */
  size_t la = strlen(a), lb = strlen(b);
  if (la > 64 || lb > 64) return max + 1;
  if ((int)(la > lb ? la - lb : lb - la) > max) return max + 1;
  int dist[65][65];
  for (size_t i = 0; i <= la; i++) dist[i][0] = (int)i;
  for (size_t j = 0; j <= lb; j++) dist[0][j] = (int)j;
  for (size_t i = 1; i <= la; i++)
    for (size_t j = 1; j <= lb; j++) {
      int sub = dist[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
      int del = dist[i - 1][j] + 1, ins = dist[i][j - 1] + 1;
      int best = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
          dist[i - 2][j - 2] + 1 < best)
        best = dist[i - 2][j - 2] + 1;
      dist[i][j] = best;
    }
  return dist[la][lb] > max ? max + 1 : dist[la][lb];
}

void suggest_init(suggest *s, const char *word) {
  s->word = word;
  s->best = NULL;
  s->best_dist = 1 << 30;
}

static int suggest_limit(const char *word) {
  int n = (int)strlen(word);
  if (n < 3) return 0; /* any one-letter change of a short word is a different word */
  return n / 3 > 3 ? 3 : n / 3;
}

void suggest_add(suggest *s, const char *candidate) {
  int lim = suggest_limit(s->word);
  if (lim == 0) return;
  int d = str_edit_distance(s->word, candidate, lim);
  if (d <= lim && d < s->best_dist && strcmp(s->word, candidate) != 0) {
    s->best = candidate;
    s->best_dist = d;
  }
}

const char *suggest_result(const suggest *s) { return s->best; }

/* ---- Numbers ---- */

double scale_apply(double m, double scale) {
  return scale >= 1.0 ? m * scale : m / nearbyint(1.0 / scale);
}

bool fmt_shortest_scaled(char *buf, double v, double scale) {
  double m = scale >= 1.0 ? v / scale : v * nearbyint(1.0 / scale);
  double mag = fabs(m);
  bool plain = mag == 0 || (mag >= 1e-4 && mag < 1e16); /* print without an exponent */
  for (int digits = 1; digits <= 17; digits++) {
    snprintf(buf, 40, "%.*g", digits, m);
    if (plain && strchr(buf, 'e')) continue;
    if (scale_apply(strtod(buf, NULL), scale) == v) return true;
  }
  snprintf(buf, 40, "%.17g", m);
  return scale_apply(strtod(buf, NULL), scale) == v;
}

bool support_digits_exact(const char *digits, size_t len, double v) {
  size_t i = 0;
  while (i < len && digits[i] == '0') i++;
  if (len - i > 19) return false; /* 10^19 and more: far beyond 2^53 */
  uint64_t u = 0;
  for (; i < len; i++) u = u * 10 + (uint64_t)(digits[i] - '0');
  return v >= 0 && v < 18446744073709551616.0 && (uint64_t)v == u && (double)u == v;
}

/* Append the reason a file over SUPPORT_MAX_FILE_BYTES is refused to *why. */
static void too_large(strbuf *why) {
  strbuf_printf(why, "larger than %zu MiB, the limit on input files",
                (size_t)SUPPORT_MAX_FILE_BYTES >> 20);
}

/* Read everything left in f into a buffer of at most SUPPORT_MAX_FILE_BYTES. Pre: f is open for
 * reading; 'size' is its size when known (a regular file), else 0. Post: as support_read_file. */
static char *read_stream(FILE *f, size_t size, size_t *len, strbuf *why) {
  size_t cap = size ? size + 1 : 65536, n = 0;
  char *buf = xmalloc(cap + 1);
  for (;;) {
    if (n == cap) {
      if (cap > SUPPORT_MAX_FILE_BYTES) break;
      cap = cap > SUPPORT_MAX_FILE_BYTES / 2 ? SUPPORT_MAX_FILE_BYTES + 1 : 2 * cap;
      buf = xrealloc(buf, cap + 1);
    }
    size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (got == 0) break;
  }
  if (n > SUPPORT_MAX_FILE_BYTES) {
    too_large(why);
    free(buf);
    return NULL;
  }
  if (ferror(f)) {
    strbuf_puts(why, strerror(errno ? errno : EIO));
    free(buf);
    return NULL;
  }
  buf[n] = 0;
  *len = n;
  return buf;
}

char *support_read_file(const char *path, size_t *len, strbuf *why) {
  bool in = strcmp(path, "-") == 0;
  FILE *f = in ? stdin : fopen(path, "rb");
  if (!f) {
    strbuf_puts(why, strerror(errno));
    return NULL;
  }
  struct stat st;
  size_t size = 0;
  if (fstat(fileno(f), &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      if (!in) fclose(f);
      strbuf_puts(why, strerror(EISDIR));
      return NULL;
    }
    if (S_ISREG(st.st_mode) && (uintmax_t)st.st_size > SUPPORT_MAX_FILE_BYTES) {
      if (!in) fclose(f);
      too_large(why);
      return NULL;
    }
    if (S_ISREG(st.st_mode)) size = (size_t)st.st_size;
  }
  errno = 0;
  char *text = read_stream(f, size, len, why);
  if (!in) fclose(f);
  return text;
}

bool support_write_file(const char *path, const void *data, size_t len, strbuf *why) {
  struct stat st;
  if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
    /* a device or a pipe (/dev/null, /dev/stdout): written in place, never replaced */
    FILE *f = fopen(path, "wb");
    if (!f) {
      strbuf_puts(why, strerror(errno));
      return false;
    }
    errno = 0;
    bool ok = fwrite(data, 1, len, f) == len && fflush(f) == 0;
    int e = errno ? errno : EIO;
    if (fclose(f) != 0 && ok) ok = false, e = errno ? errno : EIO;
    if (!ok) strbuf_puts(why, strerror(e));
    return ok;
  }
  /* a temporary beside the target (same file system, so the rename is atomic) */
  static unsigned counter;
  strbuf tmp = {0};
  int fd = -1;
  for (int tries = 0; tries < 100 && fd < 0; tries++) {
    tmp.len = 0;
    strbuf_printf(&tmp, "%s.tmp%ld.%u", path, (long)getpid(),
                  __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED)); /* rank threads write too */
    fd = open(tmp.data, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) {
    strbuf_puts(why, strerror(errno));
    strbuf_free(&tmp);
    return false;
  }
  const char *p = data;
  size_t left = len;
  int e = 0;
  while (left > 0) {
    ssize_t w = write(fd, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      e = w < 0 ? errno : ENOSPC;
      break;
    }
    p += w;
    left -= (size_t)w;
  }
  if (close(fd) != 0 && !e) e = errno;
  if (!e && rename(tmp.data, path) != 0) e = errno;
  if (e) {
    unlink(tmp.data);
    strbuf_puts(why, strerror(e));
  }
  strbuf_free(&tmp);
  return e == 0;
}

bool support_write_output(const char *path, const void *data, size_t len, strbuf *why) {
  if (path && strcmp(path, "-") != 0) return support_write_file(path, data, len, why);
  errno = 0;
  bool ok = fwrite(data, 1, len, stdout) == len;
  ok = fflush(stdout) == 0 && ok;
  if (!ok) strbuf_puts(why, strerror(errno ? errno : EIO));
  return ok;
}
