/* test_support.c -- unit tests of support/: suggestions, shortest exact number text, string
 * buffer, the diagnostics engine's split and verify machinery, quoted-name shortening and line
 * table, and the bounded file reader and atomic file writer. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "support.h"
#include "unit.h"

void test_support_suggest(void) {
  UNIT_CHECK(str_edit_distance("kv_head", "kv_heads", 3) == 1);
  UNIT_CHECK(str_edit_distance("abc", "abc", 3) == 0);
  UNIT_CHECK(str_edit_distance("completely", "different", 3) == 4);
  suggest s;
  suggest_init(&s, "atention");
  suggest_add(&s, "embedding");
  suggest_add(&s, "attention");
  suggest_add(&s, "mlp");
  UNIT_CHECK_STREQ(suggest_result(&s), "attention");
  suggest_init(&s, "xyz");
  suggest_add(&s, "attention");
  UNIT_CHECK(suggest_result(&s) == NULL);
}

void test_support_shortest(void) {
  char buf[48];
  UNIT_CHECK(fmt_shortest_scaled(buf, scale_apply(0.21, 1e-3), 1e-3));
  UNIT_CHECK_STREQ(buf, "0.21");
  UNIT_CHECK(fmt_shortest_scaled(buf, 80.0 * 1073741824.0, 1073741824.0));
  UNIT_CHECK_STREQ(buf, "80");
  UNIT_CHECK(fmt_shortest_scaled(buf, 5e-5, 1e-6)); /* whole numbers of a small unit are exact */
  UNIT_CHECK_STREQ(buf, "50");
  UNIT_CHECK(fmt_shortest_scaled(buf, 1.0 / 3.0, 1.0));
  UNIT_CHECK_EQ_DBL(strtod(buf, NULL), 1.0 / 3.0);
  /* every text must give the value back exactly, whatever the scale */
  double vals[] = {3.35e12, 1e-9, 123456789.0, 0.1, 7e20, 5e-324};
  double scales[] = {1.0, 1e-3, 1e9, 1048576.0};
  for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++)
    for (size_t j = 0; j < sizeof scales / sizeof scales[0]; j++)
      if (fmt_shortest_scaled(buf, vals[i], scales[j]))
        UNIT_CHECK_EQ_DBL(scale_apply(strtod(buf, NULL), scales[j]), vals[i]);
}

void test_support_strbuf(void) {
  strbuf sb = {0};
  UNIT_CHECK_STREQ(strbuf_cstr(&sb), "");
  for (int i = 0; i < 1000; i++) strbuf_printf(&sb, "%d,", i % 10);
  UNIT_CHECK(sb.len == 2000);
  UNIT_CHECK(sb.data[1999] == ',' && sb.data[2000] == 0);
  strbuf_free(&sb);
  arena a = {0};
  char *p = arena_strdup(&a, "hello");
  void *big = arena_alloc(&a, 100000);
  UNIT_CHECK_STREQ(p, "hello");
  UNIT_CHECK(((uintptr_t)big & 15) == 0);
  arena_free(&a);
}

/* Splitting keeps the original line numbers; verify mode matches expectations per chunk. */
void test_support_diag_split_verify(void) {
  FILE *sink = tmpfile();
  diag_engine *d = diag_new(sink);
  const char text[] = "a\n# -----\nb\n# expected-error@+1 {{boom}}\nc\n# -----\n";
  uint32_t id = diag_add_source(d, "t.octo", text, sizeof text - 1, 0);
  uint32_t *ids;
  int n = diag_split_source(d, id, &ids);
  UNIT_CHECK(n == 3);
  if (n == 3) {
    UNIT_CHECK(diag_get_source(d, ids[1])->line_base == 2);
    UNIT_CHECK(diag_get_source(d, ids[2])->len == 0);
    diag_set_verify(d, true);
    diag_error(d, diag_mkloc(ids[1], 5, 1, 1), "a boom happened");
    UNIT_CHECK(diag_verify_finish(d) == 0);
    diag_error(d, diag_mkloc(ids[1], 3, 1, 1), "unexpected one");
    UNIT_CHECK(diag_verify_finish(d) == 2); /* the stray error and the unmet expectation */
  }
  free(ids);
  diag_free(d);
  fclose(sink);
}

/* The error limit counts every error but prints only the first ones. */
void test_support_diag_limit(void) {
  FILE *sink = tmpfile();
  diag_engine *d = diag_new(sink);
  diag_set_error_limit(d, 2);
  for (int i = 0; i < 5; i++) diag_error(d, diag_mkloc(0, 0, 0, 0), "e%d", i);
  UNIT_CHECK(diag_error_count(d) == 5);
  UNIT_CHECK(diag_limit_reached(d));
  rewind(sink);
  char line[128];
  int lines = 0;
  while (fgets(line, sizeof line, sink)) lines++;
  UNIT_CHECK(lines == 3); /* two errors and "too many errors" */
  diag_free(d);
  fclose(sink);
}

/* support_read_file: a regular file, a directory ("Is a directory", not an I/O error), an
 * endless device (refused at the size bound, never an abort), a missing file. */
void test_support_read_file(void) {
  char path[] = "/tmp/octo_sup_XXXXXX";
  int fd = mkstemp(path);
  UNIT_CHECK(fd >= 0);
  if (fd < 0) return;
  UNIT_CHECK(write(fd, "ab\0c", 4) == 4);
  close(fd);
  size_t len = 0;
  strbuf why = {0};
  char *text = support_read_file(path, &len, &why);
  UNIT_CHECK(text && len == 4 && memcmp(text, "ab\0c", 5) == 0);
  free(text);
  text = support_read_file("/", &len, &why);
  UNIT_CHECK(text == NULL);
  UNIT_CHECK_STREQ(strbuf_cstr(&why), "Is a directory");
  why.len = 0;
  text = support_read_file("/dev/zero", &len, &why);
  UNIT_CHECK(text == NULL);
  UNIT_CHECK_STREQ(strbuf_cstr(&why), "larger than 256 MiB, the limit on input files");
  why.len = 0;
  unlink(path);
  text = support_read_file(path, &len, &why);
  UNIT_CHECK(text == NULL);
  UNIT_CHECK_STREQ(strbuf_cstr(&why), "No such file or directory");
  strbuf_free(&why);
}

/* support_write_file: creates and replaces a file; a failure (a missing directory) says why
 * and leaves nothing; a device is written in place, not replaced. */
void test_support_write_file(void) {
  char dir[] = "/tmp/octo_sup_XXXXXX";
  UNIT_CHECK(mkdtemp(dir) != NULL);
  char path[64], bad[80];
  snprintf(path, sizeof path, "%s/out", dir);
  snprintf(bad, sizeof bad, "%s/no/out", dir);
  strbuf why = {0};
  UNIT_CHECK(support_write_file(path, "first", 5, &why));
  UNIT_CHECK(support_write_file(path, "2nd", 3, &why));
  size_t len = 0;
  char *text = support_read_file(path, &len, &why);
  UNIT_CHECK_STREQ(text, "2nd");
  free(text);
  UNIT_CHECK(!support_write_file(bad, "x", 1, &why));
  UNIT_CHECK_STREQ(strbuf_cstr(&why), "No such file or directory");
  why.len = 0;
  UNIT_CHECK(support_write_file("/dev/null", "x", 1, &why)); /* in place: /dev/null stays */
  UNIT_CHECK(!support_write_file("/dev/full", "x", 1, &why));
  UNIT_CHECK_STREQ(strbuf_cstr(&why), "No space left on device");
  strbuf_free(&why);
  DIR *dd = opendir(dir); /* only "out": no temporary left */
  int entries = 0;
  for (struct dirent *e; dd && (e = readdir(dd)) != NULL;)
    if (e->d_name[0] != '.') entries++;
  if (dd) closedir(dd);
  UNIT_CHECK(entries == 1);
  unlink(path);
  rmdir(dir);
}

/* Diagnostics: a long quoted name is cut to DIAG_MAX_QUOTED bytes and "..."; line lookups of
 * many diagnostics in one source find the right lines (through the line table). */
void test_support_diag_quoted_lines(void) {
  FILE *sink = tmpfile();
  diag_engine *d = diag_new(sink);
  diag_set_error_limit(d, 0);
  strbuf src = {0};
  for (int i = 1; i <= 1000; i++) strbuf_printf(&src, "line%d\n", i);
  uint32_t id = diag_add_source(d, "f", src.data, src.len, 0);
  char *name = xmalloc(100001);
  memset(name, 'n', 100000);
  name[100000] = 0;
  diag_error(d, diag_mkloc(id, 999, 1, 0), "unknown device '%s'", name);
  diag_error(d, diag_mkloc(id, 2, 1, 0), "second");
  free(name);
  rewind(sink);
  char line[512];
  UNIT_CHECK(fgets(line, sizeof line, sink) != NULL);
  UNIT_CHECK(strlen(line) == strlen("f:999:1: error: unknown device ''...\n") + DIAG_MAX_QUOTED);
  UNIT_CHECK(strstr(line, "nnn...'\n") != NULL);
  UNIT_CHECK(fgets(line, sizeof line, sink) != NULL);
  UNIT_CHECK_STREQ(line, "line999\n");
  UNIT_CHECK(fgets(line, sizeof line, sink) && fgets(line, sizeof line, sink));
  UNIT_CHECK_STREQ(line, "f:2:1: error: second\n");
  UNIT_CHECK(fgets(line, sizeof line, sink) != NULL);
  UNIT_CHECK_STREQ(line, "line2\n");
  diag_free(d);
  fclose(sink);
  strbuf_free(&src);
}

/* Diagnostics find their lines in constant time (issue 18: 100,000 errors with --error-limit=0
 * took 58 s, each rescanning its file from the start): 20,000 errors spread over a 10,000-line
 * source and 2,000 errors on one 1 MB line read each byte of the source once in all
 * (diag_bytes_scanned), where a rescan per diagnostic reads it thousands of times over. The
 * count is of work, not of time, so the test holds on any machine. */
void test_support_diag_line_work(void) {
  FILE *sink = tmpfile();
  diag_engine *d = diag_new(sink);
  diag_set_error_limit(d, 0);
  strbuf src = {0};
  for (int i = 1; i <= 10000; i++) strbuf_printf(&src, "layer a%d : bogus\n", i);
  uint32_t id = diag_add_source(d, "many", src.data, src.len, 0);
  for (int i = 0; i < 20000; i++)
    diag_error(d, diag_mkloc(id, (uint32_t)(10000 - i % 10000), 11, 5), "unknown layer kind");
  UNIT_CHECK(diag_bytes_scanned(d) == src.len);
  strbuf wide = {0};
  for (int i = 0; i < 100000; i++) strbuf_puts(&wide, "bogus,bad;");
  uint32_t w = diag_add_source(d, "wide", wide.data, wide.len, 0);
  for (int i = 0; i < 2000; i++)
    diag_error(d, diag_mkloc(w, 1, (uint32_t)(1 + 500 * i), 5), "unknown word");
  UNIT_CHECK(diag_bytes_scanned(d) == src.len + wide.len);
  UNIT_CHECK(diag_error_count(d) == 22000);
  /* the last diagnostic's snippet: a 200-byte window of the long line with its caret */
  fflush(sink);
  rewind(sink);
  char line[512], last[3][512] = {{0}};
  while (fgets(line, sizeof line, sink)) {
    memcpy(last[0], last[1], sizeof last[0]);
    memcpy(last[1], last[2], sizeof last[1]);
    memcpy(last[2], line, sizeof last[2]);
  }
  UNIT_CHECK_STREQ(last[0], "wide:1:999501: error: unknown word\n");
  UNIT_CHECK(strlen(last[1]) == 201);
  UNIT_CHECK(strchr(last[2], '^') != NULL && strstr(last[2], "^~~~~\n") != NULL);
  diag_free(d);
  fclose(sink);
  strbuf_free(&src);
  strbuf_free(&wide);
}

/* A diagnostic whose column lies past the end of a long line (fuzz_octo found one, from a string
 * continued on the next line) shows the line's last 200 bytes and no caret: it read past the end
 * of the line, and of the source, before. */
void test_support_diag_col_past_end(void) {
  FILE *sink = tmpfile();
  diag_engine *d = diag_new(sink);
  strbuf src = {0};
  for (int i = 0; i < 300; i++) strbuf_putc(&src, 'a');
  strbuf_putc(&src, '\n');
  for (int i = 0; i < 2000; i++) strbuf_putc(&src, 'b');
  uint32_t id = diag_add_source(d, "f", src.data, src.len, 0);
  diag_error(d, diag_mkloc(id, 1, 1000, 1), "past the end");
  diag_error(d, diag_mkloc(id, 1, 299, 1), "near the end");
  fflush(sink);
  rewind(sink);
  char line[512], want[256];
  memset(want, 'a', 200);
  memcpy(want + 200, "\n", 2);
  UNIT_CHECK(fgets(line, sizeof line, sink) != NULL);
  UNIT_CHECK_STREQ(line, "f:1:1000: error: past the end\n");
  UNIT_CHECK(fgets(line, sizeof line, sink) != NULL);
  UNIT_CHECK_STREQ(line, want);
  UNIT_CHECK(fgets(line, sizeof line, sink) != NULL);
  UNIT_CHECK_STREQ(line, "f:1:299: error: near the end\n");
  UNIT_CHECK(fgets(line, sizeof line, sink) != NULL);
  UNIT_CHECK_STREQ(line, want);
  UNIT_CHECK(fgets(line, sizeof line, sink) != NULL);
  UNIT_CHECK(strlen(line) == 200 && line[198] == '^'); /* column 299 of 300 */
  diag_free(d);
  fclose(sink);
  strbuf_free(&src);
}

/* support_digits_exact: digits a double holds exactly, and those it rounds (2^53 + 1). */
void test_support_digits_exact(void) {
  UNIT_CHECK(support_digits_exact("4096", 4, 4096.0));
  UNIT_CHECK(support_digits_exact("0007", 4, 7.0));
  UNIT_CHECK(support_digits_exact("9007199254740992", 16, 9007199254740992.0));
  UNIT_CHECK(support_digits_exact("9007199254740994", 16, 9007199254740994.0));
  UNIT_CHECK(!support_digits_exact("9007199254740993", 16, strtod("9007199254740993", NULL)));
  UNIT_CHECK(!support_digits_exact("99999999999999999999", 20, 1e20));
  UNIT_CHECK(!support_digits_exact("12", 2, 13.0));
}

/* Trace ids: pids from 1, tids p * stride + k with a power-of-ten stride above every pid and
 * thread number, so that no tid is 0, equals a pid or repeats across processes. */
void test_support_trace_ids(void) {
  UNIT_CHECK(trace_id_pid(0) == 1);
  UNIT_CHECK(trace_id_stride(1, 3) == 10);
  UNIT_CHECK(trace_id_stride(9, 10) == 10);
  UNIT_CHECK(trace_id_stride(10, 3) == 100); /* 16 devices: tid 10 would be pid 10 */
  UNIT_CHECK(trace_id_stride(16, 11) == 100);
  UNIT_CHECK(trace_id_stride(2, 101) == 1000);
  int stride = trace_id_stride(16, 5);
  UNIT_CHECK(trace_id_tid(1, 0, stride) == 100);
  for (int p = 1; p <= 16; p++)
    for (int k = 0; k < 5; k++) {
      int tid = trace_id_tid(p, k, stride);
      UNIT_CHECK(tid > 16); /* no pid, not 0 */
      UNIT_CHECK(tid / stride == p); /* unique: the process and thread read back */
      UNIT_CHECK(tid % stride == k);
    }
}
