/* octo-opt.c -- runs chosen passes on textual IR: parses the command line, hands the work to
 * pass_opt_process (passes/driver.c), writes the output, and decides the exit code:
 * 0 success, 1 user error (bad input, bad flags, failing pass), 2 internal error. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "passes.h"

#define PROG "octo-opt"

enum { EXIT_OK = 0, EXIT_USER = 1, EXIT_INTERNAL = 2 };

/* Command-line flags. */
typedef enum flag_id {
  F_PASSES, F_OUTPUT, F_PRINT_AFTER_ALL, F_PRINT_BEFORE_ALL, F_PRINT_AFTER, F_PRINT_BEFORE,
  F_VERIFY_EACH, F_NO_VERIFY, F_LIST_PASSES, F_DEBUGINFO, F_VERIFY_DIAGS, F_SPLIT, F_ERROR_LIMIT,
  F_DUMP_PIPELINE, F_HELP, F_VERSION
} flag_id;

/* One flag: its spelling, whether it takes a value, and its line of --help. */
typedef struct flag_info {
  flag_id id;       /* what it sets */
  const char *name; /* spelling with dashes */
  const char *arg;  /* name of its value in --help, NULL when it takes none */
  const char *help; /* meaning */
} flag_info;

static const flag_info flags[] = {
    {F_PASSES, "--passes", "PIPELINE", "passes to run, e.g. 'verify,strip-plan' (see --list-passes)"},
    {F_OUTPUT, "-o", "FILE", "write the output IR to FILE instead of stdout"},
    {F_PRINT_AFTER_ALL, "--print-ir-after-all", NULL, "dump the IR to stderr after every pass"},
    {F_PRINT_BEFORE_ALL, "--print-ir-before-all", NULL, "dump the IR to stderr before every pass"},
    {F_PRINT_AFTER, "--print-ir-after", "NAMES", "dump the IR after the named passes (comma list)"},
    {F_PRINT_BEFORE, "--print-ir-before", "NAMES", "dump the IR before the named passes (comma list)"},
    {F_VERIFY_EACH, "--verify-each", NULL, "verify the IR after every pass"},
    {F_NO_VERIFY, "--no-verify", NULL, "do not verify the IR after reading it"},
    {F_LIST_PASSES, "--list-passes", NULL, "list the passes with their options and exit"},
    {F_DEBUGINFO, "--print-debuginfo", NULL, "print source locations (loc(...)) in IR output and dumps"},
    {F_VERIFY_DIAGS, "--verify-diagnostics", NULL,
     "check diagnostics against expected-error comments; print no IR"},
    {F_SPLIT, "--split-input-file", NULL,
     "process each chunk between '# -----' lines as its own module"},
    {F_ERROR_LIMIT, "--error-limit", "N", "stop after N errors (0: no limit; default 20)"},
    {F_DUMP_PIPELINE, "--dump-pass-pipeline", NULL, "print the parsed pipeline to stderr"},
    {F_HELP, "--help", NULL, "print this help and exit"},
    {F_VERSION, "--version", NULL, "print the version and exit"},
};
#define NFLAGS (int)(sizeof flags / sizeof flags[0])

/* Everything the command line asked for. */
typedef struct cmdline {
  pass_opt_config cfg;   /* work for the driver */
  const char *output;    /* -o FILE, NULL for stdout */
  int error_limit;       /* --error-limit, -1 when not given */
  bool list_passes;      /* --list-passes */
  bool help, version;    /* --help, --version */
} cmdline;

static void usage(FILE *out) {
  fprintf(out, "usage: " PROG " [FILE|-] [options]\n\n"
               "Reads textual OctoPipe IR (stdin when FILE is - or absent), verifies it, runs the\n"
               "passes given with --passes, and prints the resulting IR.\n\noptions:\n");
  for (int i = 0; i < NFLAGS; i++) {
    char left[64];
    const flag_info *f = &flags[i];
    if (f->arg)
      snprintf(left, sizeof left, "%s%s%s", f->name, f->name[1] == '-' ? "=" : " ", f->arg);
    else
      snprintf(left, sizeof left, "%s", f->name);
    fprintf(out, "  %-26s %s\n", left, f->help);
  }
  fprintf(out, "\nexit status: 0 success, 1 error in the input or the command line or a failing "
               "pass,\n2 internal error.\n");
}

/* Report a command-line error. */
static void cl_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void cl_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, PROG ": error: ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

static const flag_info *find_flag(const char *name, size_t len) {
  for (int i = 0; i < NFLAGS; i++)
    if (strlen(flags[i].name) == len && memcmp(flags[i].name, name, len) == 0) return &flags[i];
  return NULL;
}

/* Parse a non-negative decimal integer. */
static bool parse_count(const char *s, int *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (!*s || *end || errno || v < 0 || v > 1000000000) return false;
  *out = (int)v;
  return true;
}

/* Apply flag f with value v (NULL for flags without value). Returns false after an error. */
static bool apply_flag(cmdline *cl, const flag_info *f, const char *v) {
  switch (f->id) {
  case F_PASSES: cl->cfg.passes = v; break;
  case F_OUTPUT: cl->output = v; break;
  case F_PRINT_AFTER_ALL: cl->cfg.pm.print_ir_after_all = true; break;
  case F_PRINT_BEFORE_ALL: cl->cfg.pm.print_ir_before_all = true; break;
  case F_PRINT_AFTER:
    cl->cfg.pm.print_ir_after = v;
    return pass_check_name_list(v, f->name, PROG, stderr) == 0;
  case F_PRINT_BEFORE:
    cl->cfg.pm.print_ir_before = v;
    return pass_check_name_list(v, f->name, PROG, stderr) == 0;
  case F_VERIFY_EACH: cl->cfg.pm.verify_each = true; break;
  case F_NO_VERIFY: cl->cfg.no_verify = true; break;
  case F_LIST_PASSES: cl->list_passes = true; break;
  case F_DEBUGINFO: cl->cfg.pm.print_debuginfo = true; break;
  case F_VERIFY_DIAGS: cl->cfg.verify_diagnostics = true; break;
  case F_SPLIT: cl->cfg.split_input_file = true; break;
  case F_ERROR_LIMIT:
    if (!parse_count(v, &cl->error_limit)) {
      cl_error("invalid value '%s' for %s: expected a non-negative integer", v, f->name);
      return false;
    }
    break;
  case F_DUMP_PIPELINE: cl->cfg.dump_pipeline = stderr; break;
  case F_HELP: cl->help = true; break;
  case F_VERSION: cl->version = true; break;
  }
  return true;
}

/* Parse argv into cl. Returns false after reporting the first error. */
static bool parse_args(int argc, char **argv, cmdline *cl) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (a[0] != '-' || strcmp(a, "-") == 0) {
      if (cl->cfg.input) {
        cl_error("more than one input file ('%s' and '%s')", cl->cfg.input, a);
        return false;
      }
      cl->cfg.input = a;
      continue;
    }
    if (strcmp(a, "-h") == 0) a = "--help";
    const flag_info *f;
    const char *value = NULL;
    if (a[1] == 'o') { /* -o FILE, -oFILE, -o=FILE */
      f = find_flag("-o", 2);
      if (a[2]) value = a[2] == '=' ? a + 3 : a + 2;
    } else {
      const char *eq = a[1] == '-' ? strchr(a, '=') : NULL;
      size_t len = eq ? (size_t)(eq - a) : strlen(a);
      f = find_flag(a, len);
      if (!f) {
        char *name = xstrndup(a, len);
        cl_error("unknown option '%s'", name);
        suggest s;
        suggest_init(&s, name);
        for (int k = 0; k < NFLAGS; k++) suggest_add(&s, flags[k].name);
        if (suggest_result(&s))
          fprintf(stderr, PROG ": note: did you mean '%s'?\n", suggest_result(&s));
        fprintf(stderr, PROG ": note: run '" PROG " --help' for the list of options\n");
        free(name);
        return false;
      }
      if (eq) {
        if (!f->arg) {
          cl_error("option '%s' takes no value", f->name);
          return false;
        }
        value = eq + 1;
      }
    }
    if (f->arg && !value) {
      if (i + 1 >= argc) {
        cl_error("option '%s' needs a value (%s)", f->name, f->arg);
        return false;
      }
      value = argv[++i];
    }
    if (!apply_flag(cl, f, value)) return false;
  }
  return true;
}

/* Write the output text to cl->output or stdout. Returns the exit code. */
static int write_output(const cmdline *cl, const strbuf *out) {
  FILE *f = stdout;
  const char *name = cl->output ? cl->output : "<stdout>";
  if (cl->output && strcmp(cl->output, "-") != 0) {
    f = fopen(cl->output, "w");
    if (!f) {
      cl_error("cannot open output '%s': %s", cl->output, strerror(errno));
      return EXIT_USER;
    }
  }
  bool ok = fwrite(strbuf_cstr(out), 1, out->len, f) == out->len;
  ok = (f == stdout ? fflush(f) : fclose(f)) == 0 && ok;
  if (!ok) {
    cl_error("cannot write '%s': %s", name, strerror(errno ? errno : EIO));
    return EXIT_INTERNAL;
  }
  return EXIT_OK;
}

int main(int argc, char **argv) {
  cmdline cl;
  memset(&cl, 0, sizeof cl);
  cl.error_limit = -1;
  if (!parse_args(argc, argv, &cl)) return EXIT_USER;
  if (cl.help) {
    usage(stdout);
    return EXIT_OK;
  }
  if (cl.version) {
    printf(PROG " (OctoPipe) " OCTO_VERSION "\n");
    return EXIT_OK;
  }
  if (cl.list_passes) {
    pass_list(stdout);
    return fflush(stdout) == 0 ? EXIT_OK : EXIT_INTERNAL;
  }
  if (!cl.cfg.input) cl.cfg.input = "-";

  diag_engine *d = diag_new(stderr);
  if (cl.error_limit >= 0) diag_set_error_limit(d, cl.error_limit);
  strbuf out = {0};
  pass_opt_result r = pass_opt_process(&cl.cfg, d, &out);
  int code = r.status == PASS_OK ? EXIT_OK : r.status == PASS_INTERNAL ? EXIT_INTERNAL : EXIT_USER;
  if (!cl.cfg.verify_diagnostics && (r.status == PASS_OK || r.chunks_ok > 0)) {
    int wcode = write_output(&cl, &out);
    if (wcode > code) code = wcode;
  }
  strbuf_free(&out);
  diag_free(d);
  return code;
}
