/* support.h -- shared utilities of every OctoPipe library: an arena allocator, a growable string
 * buffer, "did you mean" suggestions, shortest round-trip number formatting, positions in JSON
 * text, and the diagnostics engine (source buffers, file:line:col messages with caret lines,
 * error limit, and MLIR-style --verify-diagnostics / --split-input-file). */
#ifndef OCTO_SUPPORT_H
#define OCTO_SUPPORT_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define OCTO_VERSION "0.1.0"

/* ---- Memory ------------------------------------------------------------------------------ */

/* Allocation helpers that abort with a message on out-of-memory (the only abort in libraries:
 * there is no useful recovery from a failed small allocation). */
void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);

/* Seconds on the monotonic clock (for durations; the origin is arbitrary). */
double support_seconds(void);

/* ---- Threads ----------------------------------------------------------------------------- */

/* Cores this process may run on (its CPU affinity; at least 1). */
int support_cores(void);

/* A fixed set of worker threads running the iterations of loops (fork-join). */
typedef struct support_pool support_pool;
/* Body of a loop: iteration i, run by thread 'worker' (0 .. jobs - 1; 0 is the caller). Two
 * iterations may run at the same time on different workers, never on the same one. */
typedef void (*support_pool_fn)(void *ctx, int i, int worker);

/* A pool of 'jobs' threads, the caller's included (jobs - 1 are started; fewer if the system
 * refuses some). Free with support_pool_free. */
support_pool *support_pool_new(int jobs);
/* Threads the pool runs loops on (at least 1). */
int support_pool_jobs(const support_pool *p);
/* Run fn(ctx, i, worker) for every i in [0, n) on the pool's threads; returns when all are done.
 * Not reentrant: one loop at a time per pool. */
void support_pool_run(support_pool *p, int n, support_pool_fn fn, void *ctx);
void support_pool_free(support_pool *p);

/* Grow array 'arr' (element count 'n', capacity 'cap') so one more element fits. */
#define VEC_RESERVE(arr, n, cap)                                                                 \
  do {                                                                                           \
    if ((n) >= (cap)) {                                                                          \
      (cap) = (cap) ? 2 * (cap) : 8;                                                             \
      (arr) = xrealloc((arr), (size_t)(cap) * sizeof *(arr));                                    \
    }                                                                                            \
  } while (0)
#define VEC_PUSH(arr, n, cap, item)                                                              \
  do {                                                                                           \
    VEC_RESERVE(arr, n, cap);                                                                    \
    (arr)[(n)++] = (item);                                                                       \
  } while (0)

/* Bump allocator: many small allocations freed together. */
typedef struct arena_block arena_block;
typedef struct arena {
  arena_block *head; /* newest block; older ones chained behind it */
} arena;

void *arena_alloc(arena *a, size_t n); /* zeroed, 16-byte aligned */
char *arena_strdup(arena *a, const char *s);
char *arena_strndup(arena *a, const char *s, size_t n);
void arena_free(arena *a); /* frees every block; the arena is empty and reusable after */

/* ---- Strings ------------------------------------------------------------------------------*/

/* Growable, always NUL-terminated string. Zero-initialize before use; free with strbuf_free. */
typedef struct strbuf {
  char *data; /* contents (NULL until the first append) */
  size_t len; /* length without the NUL */
  size_t cap; /* allocated */
} strbuf;

void strbuf_append(strbuf *sb, const char *s, size_t n);
void strbuf_puts(strbuf *sb, const char *s);
void strbuf_putc(strbuf *sb, char c);
void strbuf_printf(strbuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void strbuf_vprintf(strbuf *sb, const char *fmt, va_list ap);
const char *strbuf_cstr(const strbuf *sb); /* "" when empty */
void strbuf_free(strbuf *sb);
/* Append s as a JSON string literal (quotes, backslashes and control characters escaped;
 * "null" when s is NULL). */
void strbuf_json_str(strbuf *sb, const char *s);

/* Process and thread ids of the Chrome/Perfetto traces (report/trace.c, runtime/exec.c). Perfetto
 * takes the thread whose tid equals a pid for that process's main thread, tid/pid 0 for the
 * idle task, and assumes tids unique in the whole trace; so processes are numbered from 1 and
 * thread k (0-based) of process p gets tid p * stride + k, where the stride (a power of ten) is
 * larger than every pid and every k: no tid is 0, equals a pid or repeats in another process. */
/* Pid of the process at 0-based position 'index' (index + 1). */
int trace_id_pid(int index);
/* The tid stride for processes with pids up to max_pid and threads numbered below nthreads: the
 * smallest power of ten (at least 10) larger than both. */
int trace_id_stride(int max_pid, int nthreads);
/* Tid of thread k of process pid. Pre: 0 <= k < stride, stride from trace_id_stride. */
int trace_id_tid(int pid, int k, int stride);

/* Levenshtein distance, capped at 'max' + 1. */
int str_edit_distance(const char *a, const char *b, int max);

/* Collects the closest of several candidate spellings to a misspelled name. */
typedef struct suggest {
  const char *word; /* misspelled name */
  const char *best; /* closest candidate so far, or NULL */
  int best_dist;    /* its distance */
} suggest;
void suggest_init(suggest *s, const char *word);
void suggest_add(suggest *s, const char *candidate);
/* Closest candidate within a third of the word's length (at most 3; none for words shorter than
 * 3 characters), or NULL. */
const char *suggest_result(const suggest *s);

/* The value of 'm' units of size 'scale': m * scale, or for sub-unit scales (ms, us, ...)
 * m / (1 / scale) so that whole numbers of a small unit give the nearest double (50 us is
 * exactly the double nearest 5e-5). Every reader and printer of quantities uses this. */
double scale_apply(double m, double scale);

/* Write the shortest decimal text of v (%g style, up to 17 digits) for which
 * scale_apply(strtod(text), scale) == v exactly, when one exists (scale 1 always has one).
 * Returns false when no text up to 17 digits gives v back. 'buf' needs 40 bytes. */
bool fmt_shortest_scaled(char *buf, double v, double scale);

/* Whether the decimal digits digits[0..len) (only '0'-'9') denote exactly the whole number v:
 * false when reading them as a double rounded them (9007199254740993 reads as 2^53), so that
 * readers can refuse a number they would silently change. */
bool support_digits_exact(const char *digits, size_t len, double v);

/* ---- Files ------------------------------------------------------------------------------- */

/* The largest input file any reader accepts (spec, import, profile, IR, stream, data): 256 MiB.
 * Checked before reading a regular file, and while reading anything else (/dev/zero, a pipe). */
#define SUPPORT_MAX_FILE_BYTES ((size_t)256 << 20)

/* Read the whole file 'path' ("-": standard input) into a NUL-terminated buffer (which may
 * contain other NULs). Returns it (caller frees) with its length in *len, or NULL after
 * appending the reason to *why: the system's (strerror: "No such file or directory", "Is a
 * directory", ...) or "larger than 256 MiB, the limit on input files". Never aborts on a large
 * or endless input. */
char *support_read_file(const char *path, size_t *len, strbuf *why);

/* Replace the file 'path' with 'len' bytes of 'data' atomically: they are written to a
 * temporary beside it ("PATH.tmpPID.N", mode 0666 less the umask) that is renamed over 'path'
 * once complete, so 'path' is either unchanged or complete. An existing 'path' that is not a
 * regular file (/dev/null, a pipe) is written in place. Returns true, or false after appending
 * the reason (strerror) to *why and removing the temporary. */
bool support_write_file(const char *path, const void *data, size_t len, strbuf *why);
/* The same, but to standard output (written and flushed) when 'path' is NULL or "-". */
bool support_write_output(const char *path, const void *data, size_t len, strbuf *why);

/* ---- JSON text --------------------------------------------------------------------------- */

/* Positions in the raw text of a JSON document (json.c), for messages that point at the byte:
 * cJSON builds the tree but keeps no positions. Offsets index t[0, n); a UTF-8 byte order mark
 * at the start is skipped. */

/* Check that t[0, n) is exactly one JSON value, strictly (RFC 8259: cJSON is lenient and its
 * error pointer approximate; objects and arrays nested at most 512 deep). Returns true, or false
 * with *at the offset of the first error (n: the end of the text) and *msg what was expected
 * there (static text, "expected ':' after the key"). *msg is NULL on success. */
bool support_json_check(const char *t, size_t n, size_t *at, const char **msg);
/* Offset and length of the key of a member of valid JSON t[0, n): from the top-level object,
 * member index[0] (0-based, in text order), in its value (an object) member index[1], and so on
 * for 'depth' members; of the top-level value (length 1) when depth == 0. Returns false when the
 * text does not have that shape. */
bool support_json_locate(const char *t, size_t n, const int *index, int depth, size_t *off,
                         size_t *len);
/* Index after the string that starts at t[i] == '"' (escapes skipped; n when unterminated). */
size_t support_json_string_end(const char *t, size_t n, size_t i);

/* ---- Diagnostics --------------------------------------------------------------------------*/

typedef enum diag_severity { DIAG_ERROR, DIAG_WARNING, DIAG_NOTE, DIAG_REMARK } diag_severity;

/* A position in a source buffer of the engine. file 0 means "no location". */
typedef struct diag_loc {
  uint32_t file; /* source id from diag_add_source; 0: none */
  uint32_t line; /* 1-based line, counting the source's line_base */
  uint32_t col;  /* 1-based column in bytes */
  uint32_t len;  /* length of the span to underline (0 or 1: a caret only) */
} diag_loc;

/* A source buffer known to the engine. */
typedef struct diag_source {
  char *name;         /* file name as given */
  char *text;         /* contents, NUL-terminated (may contain other NULs) */
  size_t len;         /* length in bytes */
  uint32_t line_base; /* lines before the first one (for --split-input-file chunks) */
  bool no_verify;     /* not scanned for expected-* comments (a file split into chunks) */
} diag_source;

typedef struct diag_engine diag_engine;

/* New engine printing to 'out' (stderr when NULL). */
diag_engine *diag_new(FILE *out);
void diag_free(diag_engine *d);
/* Add a copy of a buffer as a source; returns its id (>= 1). */
uint32_t diag_add_source(diag_engine *d, const char *name, const char *text, size_t len,
                         uint32_t line_base);
/* Read 'path' and add it; returns its id, or 0 after reporting the failure at 'from'. */
uint32_t diag_load_file(diag_engine *d, const char *path, diag_loc from);
const diag_source *diag_get_source(const diag_engine *d, uint32_t id);
/* Split source 'id' at lines that are exactly "# -----" into chunk sources that keep the
 * original line numbers. Returns the number of chunks and their ids in *ids (caller frees). */
int diag_split_source(diag_engine *d, uint32_t id, uint32_t **ids);

/* The longest quoted span (a name or value read from the input, in ' or ") a diagnostic shows:
 * longer ones are cut to this many bytes and "...". */
#define DIAG_MAX_QUOTED 256

/* Report a diagnostic. Quoted spans are shortened to DIAG_MAX_QUOTED bytes. Errors past the
 * limit are counted but not printed; the first one past it prints "too many errors emitted". In
 * verify mode diagnostics are collected, not printed. */
void diag_report(diag_engine *d, diag_severity sev, diag_loc loc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void diag_vreport(diag_engine *d, diag_severity sev, diag_loc loc, const char *fmt, va_list ap);
#define diag_error(d, loc, ...) diag_report((d), DIAG_ERROR, (loc), __VA_ARGS__)
#define diag_note(d, loc, ...) diag_report((d), DIAG_NOTE, (loc), __VA_ARGS__)
#define diag_warning(d, loc, ...) diag_report((d), DIAG_WARNING, (loc), __VA_ARGS__)

/* The location of byte 'off' of source 'id' (pre: a source of d), with a span of 'len' bytes:
 * its line (counting the source's line_base) and 1-based byte column; an offset past the end
 * counts on the last line. For readers that know byte offsets (JSON files): it uses the line
 * table of the source's diagnostics (built once, diag_bytes_scanned), so each call takes
 * O(log lines). */
diag_loc diag_offset_loc(diag_engine *d, uint32_t id, size_t off, uint32_t len);

int diag_error_count(const diag_engine *d);
/* Bytes of source text the engine has read to find the lines of diagnostics (each source's line
 * table, built once): at most the total size of the sources that had a diagnostic, however many
 * diagnostics were printed and however long their lines (the lookups are O(1)). */
size_t diag_bytes_scanned(const diag_engine *d);
/* Maximum printed errors (0: unlimited; default 20). */
void diag_set_error_limit(diag_engine *d, int limit);
/* True once the error limit was passed: parsers stop early. */
bool diag_limit_reached(const diag_engine *d);
/* Collect diagnostics for diag_verify_finish instead of printing them. */
void diag_set_verify(diag_engine *d, bool on);
/* Name the tool that prints: a diagnostic without a source (a file that cannot be read, "too
 * many errors") then reads "PROGRAM: error: ...", like the tool's own errors. Pre: program
 * outlives d (a string literal); NULL: no name. */
void diag_set_program(diag_engine *d, const char *program);
/* Compare collected diagnostics with the "expected-error[@+N|@-N|@N] {{text}}" comments of
 * every source (also expected-warning, -note, -remark): each expectation must be met by a
 * diagnostic of that severity on that line whose message contains the text, and every
 * diagnostic must be expected. Prints each mismatch as an error; returns their number. */
int diag_verify_finish(diag_engine *d);
/* Location helper. */
static inline diag_loc diag_mkloc(uint32_t file, uint32_t line, uint32_t col, uint32_t len) {
  diag_loc l = {file, line, col, len};
  return l;
}

#endif
