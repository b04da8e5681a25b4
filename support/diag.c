/* diag.c -- diagnostics engine: sources, formatted messages with caret lines, error limit, and
 * the expected-diagnostic checker behind --verify-diagnostics. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "support.h"

/* A diagnostic kept for verification. */
typedef struct diag_record {
  diag_severity sev; /* severity */
  diag_loc loc;      /* where */
  char *msg;         /* message text */
  bool matched;      /* met an expectation */
} diag_record;

/* Where the lines of one source start, built on its first diagnostic with a snippet (or its
 * first diag_offset_loc) so that each later one finds its line at once (many errors stay linear
 * in number, not quadratic). */
typedef struct diag_lines {
  size_t *start; /* byte offset of each line's first byte; NULL until built */
  uint32_t n;    /* number of lines */
} diag_lines;

struct diag_engine {
  FILE *out;             /* where diagnostics print */
  diag_source *sources;  /* index id-1 */
  diag_lines *lines;     /* index id-1: line starts of each source (parallel to sources) */
  uint32_t nsources, sources_cap;
  int errors;            /* errors reported, including suppressed ones */
  size_t scanned;        /* bytes of source text read to find lines (diag_bytes_scanned) */
  int limit;             /* printed error limit; 0 unlimited */
  bool limit_noted;      /* "too many errors" printed */
  bool verify;           /* collect instead of print */
  diag_record *records;  /* collected in verify mode */
  int nrecords, records_cap;
  const char *program;   /* tool name before a diagnostic without a source ("octoc: error:
                            ..."), or NULL */
};

static const char *const sev_names[] = {"error", "warning", "note", "remark"};

diag_engine *diag_new(FILE *out) {
  diag_engine *d = xcalloc(1, sizeof *d);
  d->out = out ? out : stderr;
  d->limit = 20;
  return d;
}

void diag_free(diag_engine *d) {
  if (!d) return;
  for (uint32_t i = 0; i < d->nsources; i++) {
    free(d->sources[i].name);
    free(d->sources[i].text);
    free(d->lines[i].start);
  }
  free(d->sources);
  free(d->lines);
  for (int i = 0; i < d->nrecords; i++) free(d->records[i].msg);
  free(d->records);
  free(d);
}

uint32_t diag_add_source(diag_engine *d, const char *name, const char *text, size_t len,
                         uint32_t line_base) {
  diag_source s;
  s.name = xstrdup(name);
  s.text = xmalloc(len + 1);
  memcpy(s.text, text, len);
  s.text[len] = 0;
  s.len = len;
  s.line_base = line_base;
  s.no_verify = false;
  uint32_t cap = d->sources_cap;
  VEC_PUSH(d->sources, d->nsources, d->sources_cap, s);
  if (d->sources_cap != cap) d->lines = xrealloc(d->lines, d->sources_cap * sizeof *d->lines);
  d->lines[d->nsources - 1] = (diag_lines){NULL, 0};
  return d->nsources;
}

uint32_t diag_load_file(diag_engine *d, const char *path, diag_loc from) {
  size_t len = 0;
  strbuf why = {0};
  char *text = support_read_file(path, &len, &why);
  const char *name = strcmp(path, "-") == 0 ? "<stdin>" : path;
  if (!text) {
    diag_error(d, from, "cannot read '%s': %s", name, strbuf_cstr(&why));
    strbuf_free(&why);
    return 0;
  }
  uint32_t id = diag_add_source(d, name, text, len, 0);
  free(text);
  return id;
}

const diag_source *diag_get_source(const diag_engine *d, uint32_t id) {
  return id >= 1 && id <= d->nsources ? &d->sources[id - 1] : NULL;
}

static bool is_split_line(const char *p, const char *end) {
  static const char marker[] = "# -----";
  size_t n = sizeof marker - 1;
  if ((size_t)(end - p) < n || memcmp(p, marker, n) != 0) return false;
  p += n;
  while (p < end && (*p == ' ' || *p == '\t' || *p == '\r')) p++;
  return p == end;
}

int diag_split_source(diag_engine *d, uint32_t id, uint32_t **ids) {
  int n = 0, cap = 0;
  *ids = NULL;
  size_t len = d->sources[id - 1].len;
  uint32_t line = 0, chunk_line = 0;
  size_t chunk_start = 0, pos = 0;
  char *name = xstrdup(d->sources[id - 1].name);
  while (pos <= len) {
    const char *text = d->sources[id - 1].text; /* re-read: adding sources may move it */
    const char *nl = memchr(text + pos, '\n', len - pos);
    size_t line_end = nl ? (size_t)(nl - text) : len;
    if (is_split_line(text + pos, text + line_end)) {
      uint32_t cid = diag_add_source(d, name, text + chunk_start, pos - chunk_start, chunk_line);
      VEC_PUSH(*ids, n, cap, cid);
      chunk_start = nl ? line_end + 1 : len;
      chunk_line = line + 1;
    }
    line++;
    if (!nl) break;
    pos = line_end + 1;
  }
  const char *text = d->sources[id - 1].text;
  uint32_t cid = diag_add_source(d, name, text + chunk_start, len - chunk_start, chunk_line);
  VEC_PUSH(*ids, n, cap, cid);
  d->sources[id - 1].no_verify = true;
  free(name);
  return n;
}

/* The line table of source 'id', built on first use: O(size) once (counted in d->scanned). */
static const diag_lines *line_table(diag_engine *d, uint32_t id) {
  diag_lines *ls = &d->lines[id - 1];
  const diag_source *s = &d->sources[id - 1];
  if (!ls->start) {
    uint32_t cap = 16;
    ls->start = xmalloc(cap * sizeof *ls->start);
    ls->start[ls->n++] = 0;
    for (const char *p = s->text, *e = s->text + s->len;
         (p = memchr(p, '\n', (size_t)(e - p))) != NULL; p++)
      VEC_PUSH(ls->start, ls->n, cap, (size_t)(p - s->text) + 1);
    d->scanned += s->len;
  }
  return ls;
}

/* The byte offsets where line 'want' (1-based, counted from the source's first line) of source
 * 'id' starts (returned) and ends (*end: its '\n' or the source's end), or SIZE_MAX when the
 * source has fewer lines. O(1) per call once the line table is built, however long the line. */
static size_t line_span(diag_engine *d, uint32_t id, uint32_t want, size_t *end) {
  const diag_lines *ls = line_table(d, id);
  const diag_source *s = &d->sources[id - 1];
  if (want < 1 || want > ls->n) return SIZE_MAX;
  *end = want < ls->n ? ls->start[want] - 1 : s->len;
  return ls->start[want - 1];
}

/* Print the source line of 'loc' and a caret line under its span. */
static void print_snippet(diag_engine *d, diag_loc loc) {
  const diag_source *s = diag_get_source(d, loc.file);
  if (!s || loc.line <= s->line_base) return;
  size_t end = 0;
  size_t pos = line_span(d, loc.file, loc.line - s->line_base, &end);
  if (pos == SIZE_MAX || pos > s->len) return;
  /* show at most 200 bytes of the line, in a window that contains the column; a column past
   * the line's end (a location a bad input made) shows the line's last 200 bytes, no caret */
  size_t col = loc.col ? loc.col : 1;
  size_t from = pos;
  if (col > 150 && end - pos > 200) from = col - 100 <= end - pos ? pos + col - 100 : end - 200;
  if (from + 200 > end && end - pos > 200) from = end - 200;
  size_t to = end - from > 200 ? from + 200 : end;
  strbuf sb = {0};
  for (size_t i = from; i < to; i++) {
    unsigned char c = (unsigned char)s->text[i];
    strbuf_putc(&sb, c == '\t' ? ' ' : c == '\r' ? ' ' : (c < 32 || c == 127) ? '?' : (char)c);
  }
  fprintf(d->out, "%s\n", strbuf_cstr(&sb));
  strbuf_free(&sb);
  size_t at = pos + col - 1; /* byte of the caret */
  if (at < from || at > to) return;
  for (size_t i = from; i < at; i++) fputc(' ', d->out);
  fputc('^', d->out);
  size_t len = loc.len;
  if (len > to - at) len = to - at;
  for (size_t i = 1; i < len; i++) fputc('~', d->out);
  fputc('\n', d->out);
}

/* Shorten every span quoted with ' or " in msg that is longer than DIAG_MAX_QUOTED bytes to
 * its first DIAG_MAX_QUOTED bytes (never splitting a UTF-8 character) and "...": a name read
 * from the input (megabytes long, in a hostile file) gives a short message. */
static void shorten_quoted(strbuf *msg) {
  if (msg->len <= DIAG_MAX_QUOTED) return;
  strbuf out = {0};
  const char *p = msg->data, *end = msg->data + msg->len;
  while (p < end) {
    const char *q = p;
    while (q < end && *q != '\'' && *q != '"') q++;
    const char *close = q < end ? memchr(q + 1, *q, (size_t)(end - q - 1)) : NULL;
    if (!close) {
      strbuf_append(&out, p, (size_t)(end - p));
      break;
    }
    size_t inner = (size_t)(close - q - 1);
    if (inner > DIAG_MAX_QUOTED) {
      size_t keep = DIAG_MAX_QUOTED;
      while (keep > 0 && ((unsigned char)q[1 + keep] & 0xC0) == 0x80) keep--;
      strbuf_append(&out, p, (size_t)(q + 1 - p) + keep);
      strbuf_puts(&out, "...");
      strbuf_putc(&out, *close);
      p = close + 1;
    } else {
      strbuf_append(&out, p, (size_t)(close + 1 - p));
      p = close + 1;
    }
  }
  strbuf_free(msg);
  *msg = out;
}

void diag_vreport(diag_engine *d, diag_severity sev, diag_loc loc, const char *fmt, va_list ap) {
  strbuf msg = {0};
  strbuf_vprintf(&msg, fmt, ap);
  shorten_quoted(&msg);
  if (sev == DIAG_ERROR) d->errors++;
  if (d->verify) {
    diag_record r = {sev, loc, msg.data ? msg.data : xstrdup(""), false};
    VEC_PUSH(d->records, d->nrecords, d->records_cap, r);
    return;
  }
  if (sev == DIAG_ERROR && d->limit && d->errors > d->limit) {
    if (!d->limit_noted) {
      fprintf(d->out, "%s%serror: too many errors emitted, stopping now\n",
              d->program ? d->program : "", d->program ? ": " : "");
      d->limit_noted = true;
    }
    strbuf_free(&msg);
    return;
  }
  if (d->limit_noted) { /* notes of suppressed errors stay suppressed */
    strbuf_free(&msg);
    return;
  }
  const diag_source *s = diag_get_source(d, loc.file);
  if (s && loc.line)
    fprintf(d->out, "%s:%u:%u: %s: %s\n", s->name, loc.line, loc.col ? loc.col : 1,
            sev_names[sev], strbuf_cstr(&msg));
  else if (s)
    fprintf(d->out, "%s: %s: %s\n", s->name, sev_names[sev], strbuf_cstr(&msg));
  else { /* the tool's name, but not before a note: it continues the diagnostic before it */
    const char *prog = sev == DIAG_NOTE ? NULL : d->program;
    fprintf(d->out, "%s%s%s: %s\n", prog ? prog : "", prog ? ": " : "", sev_names[sev],
            strbuf_cstr(&msg));
  }
  if (s && loc.line && sev != DIAG_REMARK) print_snippet(d, loc);
  strbuf_free(&msg);
}

void diag_report(diag_engine *d, diag_severity sev, diag_loc loc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  diag_vreport(d, sev, loc, fmt, ap);
  va_end(ap);
}

int diag_error_count(const diag_engine *d) { return d->errors; }

diag_loc diag_offset_loc(diag_engine *d, uint32_t id, size_t off, uint32_t len) {
  const diag_lines *ls = line_table(d, id);
  uint32_t lo = 0, hi = ls->n - 1; /* the last line that starts at or before off */
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo + 1) / 2;
    if (ls->start[mid] <= off) lo = mid;
    else hi = mid - 1;
  }
  return diag_mkloc(id, d->sources[id - 1].line_base + lo + 1,
                    (uint32_t)(off - ls->start[lo]) + 1, len);
}

size_t diag_bytes_scanned(const diag_engine *d) { return d->scanned; }
void diag_set_error_limit(diag_engine *d, int limit) { d->limit = limit < 0 ? 0 : limit; }
bool diag_limit_reached(const diag_engine *d) {
  return !d->verify && d->limit && d->errors > d->limit;
}
void diag_set_verify(diag_engine *d, bool on) { d->verify = on; }
void diag_set_program(diag_engine *d, const char *program) { d->program = program; }

/* ---- Verification of expected diagnostics ---- */

/* Print a verification failure in the normal format (bypassing collection). */
static void verify_fail(diag_engine *d, diag_loc loc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void verify_fail(diag_engine *d, diag_loc loc, const char *fmt, ...) {
  bool v = d->verify;
  d->verify = false;
  int saved_errors = d->errors, saved_limit = d->limit;
  d->limit = 0;
  va_list ap;
  va_start(ap, fmt);
  diag_vreport(d, DIAG_ERROR, loc, fmt, ap);
  va_end(ap);
  d->errors = saved_errors;
  d->limit = saved_limit;
  d->verify = v;
}

/* Find an unmatched record of severity sev at (file, line) containing text; mark it. */
static bool match_record(diag_engine *d, diag_severity sev, uint32_t file, uint32_t line,
                         const char *text) {
  const diag_source *want = diag_get_source(d, file);
  for (int i = 0; i < d->nrecords; i++) {
    diag_record *r = &d->records[i];
    if (r->matched || r->sev != sev) continue;
    if (file == 0 ? r->loc.file != 0 : r->loc.line != line) continue;
    const diag_source *got = diag_get_source(d, r->loc.file);
    /* same chunk, or same file name for diagnostics located in an imported copy */
    if (r->loc.file != file && !(got && want && got->line_base == want->line_base &&
                                 strcmp(got->name, want->name) == 0))
      continue;
    if (!strstr(r->msg, text)) continue;
    r->matched = true;
    return true;
  }
  return false;
}

/* Scan one source for expectations; returns mismatches. */
static int verify_source(diag_engine *d, uint32_t id) {
  int bad = 0;
  const diag_source *s = diag_get_source(d, id);
  static const struct {
    const char *word;
    diag_severity sev;
  } kinds[] = {{"expected-error", DIAG_ERROR},
               {"expected-warning", DIAG_WARNING},
               {"expected-note", DIAG_NOTE},
               {"expected-remark", DIAG_REMARK}};
  uint32_t line = s->line_base + 1;
  for (size_t pos = 0; pos < s->len; line++) {
    const char *text = s->text;
    const char *nl = memchr(text + pos, '\n', s->len - pos);
    size_t end = nl ? (size_t)(nl - text) : s->len;
    char *ln = xstrndup(text + pos, end - pos);
    for (char *p = ln; (p = strstr(p, "expected-")) != NULL;) {
      size_t k;
      for (k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        if (strncmp(p, kinds[k].word, strlen(kinds[k].word)) == 0) break;
      if (k == sizeof kinds / sizeof kinds[0]) {
        p += 9;
        continue;
      }
      uint32_t col = (uint32_t)(p - ln) + 1;
      char *q = p + strlen(kinds[k].word);
      long target = line;
      uint32_t file = id;
      if (strncmp(q, "@unknown", 8) == 0) { /* a diagnostic without a location */
        target = 0;
        file = 0;
        q += 8;
      } else if (*q == '@') {
        q++;
        char *e;
        if (*q == '+' || *q == '-') {
          long off = strtol(q, &e, 10);
          target = (long)line + off;
        } else {
          target = strtol(q, &e, 10);
        }
        if (e == q || (e == q + 1 && (*q == '+' || *q == '-'))) {
          verify_fail(d, diag_mkloc(id, line, col, 0), "expected line offset after '@'");
          bad++;
          break;
        }
        q = e;
      }
      while (*q == ' ' || *q == '\t') q++;
      if (strncmp(q, "{{", 2) != 0) {
        verify_fail(d, diag_mkloc(id, line, col, 0), "expected '{{' after %s", kinds[k].word);
        bad++;
        break;
      }
      char *close = strstr(q + 2, "}}");
      if (!close) {
        verify_fail(d, diag_mkloc(id, line, col, 0), "missing '}}' after expected text");
        bad++;
        break;
      }
      *close = 0;
      if (!match_record(d, kinds[k].sev, file, (uint32_t)target, q + 2)) {
        verify_fail(d, diag_mkloc(id, line, col, 0), "expected %s \"%s\" was not produced",
                    sev_names[kinds[k].sev], q + 2);
        bad++;
      }
      p = close + 2;
    }
    free(ln);
    if (!nl) break;
    pos = end + 1;
  }
  return bad;
}

int diag_verify_finish(diag_engine *d) {
  int bad = 0;
  for (uint32_t id = 1; id <= d->nsources; id++)
    if (!d->sources[id - 1].no_verify) bad += verify_source(d, id);
  for (int i = 0; i < d->nrecords; i++) {
    diag_record *r = &d->records[i];
    if (r->matched) continue;
    verify_fail(d, r->loc, "unexpected %s: %s", sev_names[r->sev], r->msg);
    bad++;
  }
  for (int i = 0; i < d->nrecords; i++) free(d->records[i].msg);
  d->nrecords = 0;
  return bad;
}
