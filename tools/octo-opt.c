/* octo-opt.c -- runs chosen passes on textual IR: parses the command line, hands the work to
 * pass_opt_process (passes/driver.c), with report_emit writing the artifact when one other than
 * the IR is asked for (--report, --emit), writes the output, and decides the exit code:
 * 0 success, 1 user error (bad input, bad flags, failing pass, a plan that does not simulate or
 * an output that cannot be written), 2 internal error (the table of docs/architecture.md). */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cli.h"
#include "passes.h"
#include "report.h"

#define PROG "octo-opt"

enum { EXIT_OK = 0, EXIT_USER = 1, EXIT_INTERNAL = 2 };

/* Command-line flags. */
typedef enum flag_id {
  F_PASSES, F_EMIT, F_REPORT, F_COMPARE, F_OUTPUT, F_PRINT_AFTER_ALL, F_PRINT_BEFORE_ALL,
  F_PRINT_AFTER, F_PRINT_BEFORE, F_VERIFY_EACH, F_NO_VERIFY, F_LIST_PASSES, F_DEBUGINFO,
  F_VERIFY_DIAGS, F_SPLIT, F_ERROR_LIMIT, F_DUMP_PIPELINE, F_HELP, F_VERSION
} flag_id;

static const cli_flag flags[] = {
    {F_PASSES, "--passes", "PIPELINE",
     "passes to run, e.g. 'verify,strip-plan' (see --list-passes)", false},
    {F_EMIT, "--emit", "KIND", "what to write instead of the IR (see the list below)", false},
    {F_REPORT, "--report", "FORMAT",
     "write the plan report instead of the IR: text (default) or json", true},
    {F_COMPARE, "--compare", NULL,
     "add the classic plans (S-1F1B, I-1F1B, ZB-H1, ZB-V, ...) to the report or --emit=html",
     false},
    {F_OUTPUT, "-o", "FILE", "write the output to FILE instead of stdout", false},
    {F_PRINT_AFTER_ALL, "--print-ir-after-all", NULL, "dump the IR to stderr after every pass",
     false},
    {F_PRINT_BEFORE_ALL, "--print-ir-before-all", NULL, "dump the IR to stderr before every pass",
     false},
    {F_PRINT_AFTER, "--print-ir-after", "NAMES",
     "dump the IR after the named passes (comma list)", false},
    {F_PRINT_BEFORE, "--print-ir-before", "NAMES",
     "dump the IR before the named passes (comma list)", false},
    {F_VERIFY_EACH, "--verify-each", NULL, "verify the IR after every pass", false},
    {F_NO_VERIFY, "--no-verify", NULL, "do not verify the IR after reading it", false},
    {F_LIST_PASSES, "--list-passes", NULL, "list the passes with their options and exit", false},
    {F_DEBUGINFO, "--print-debuginfo", NULL,
     "print source locations (loc(...)) in IR output and dumps", false},
    {F_VERIFY_DIAGS, "--verify-diagnostics", NULL,
     "check diagnostics against expected-error comments; print no IR", false},
    {F_SPLIT, "--split-input-file", NULL,
     "process each chunk between '# -----' lines as its own module", false},
    {F_ERROR_LIMIT, "--error-limit", "N", "stop after N errors (0: no limit; default 20)", false},
    {F_DUMP_PIPELINE, "--dump-pass-pipeline", NULL, "print the parsed pipeline to stderr", false},
    {F_HELP, "--help", NULL, "print this help and exit", false},
    {F_VERSION, "--version", NULL, "print the version and exit", false},
};
#define NFLAGS (int)(sizeof flags / sizeof flags[0])

/* Everything the command line asked for. */
typedef struct cmdline {
  pass_opt_config cfg;   /* work for the driver */
  report_kind emit;      /* --emit / --report (REPORT_IR: print the IR) */
  report_opts ropts;     /* what goes into the artifact */
  const char *output;    /* -o FILE, NULL for stdout */
  int error_limit;       /* --error-limit, -1 when not given */
  bool list_passes;      /* --list-passes */
  bool help, version;    /* --help, --version */
} cmdline;

static void usage(FILE *out) {
  fprintf(out, "usage: " PROG " [FILE|-] [options]\n\n"
               "Reads textual OctoPipe IR (stdin when FILE is - or absent), verifies it, runs the\n"
               "passes given with --passes, and prints the resulting IR -- or, with --report or\n"
               "--emit, the plan report, a trace or an SVG timeline of its simulated step.\n"
               "\noptions:\n");
  cli_usage(out, flags, NFLAGS, 26);
  fprintf(out, "\nartifacts (--emit=KIND):\n");
  for (int k = 0; k < REPORT_KIND_COUNT; k++)
    fprintf(out, "  %-26s %s\n", report_kinds[k].name, report_kinds[k].help);
  fprintf(out, "\nexit status: 0 success, 1 error in the input or the command line or a failing "
               "pass,\n2 internal error.\n");
}

/* Report a command-line or input error. */
#define cl_error(...) cli_error(PROG, __VA_ARGS__)

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
static bool apply_flag(cmdline *cl, const cli_flag *f, const char *v) {
  switch (f->id) {
  case F_PASSES: cl->cfg.passes = v; break;
  case F_EMIT: {
    strbuf why = {0};
    int k = report_kind_lookup(v, &why);
    if (k < 0) cl_error("%s", strbuf_cstr(&why));
    strbuf_free(&why);
    if (k < 0) return false;
    cl->emit = (report_kind)k;
    break;
  }
  case F_REPORT:
    if (v && strcmp(v, "json") != 0 && strcmp(v, "text") != 0) {
      cl_error("unknown --report format '%s' (expected text or json)", v);
      return false;
    }
    cl->emit = v && strcmp(v, "json") == 0 ? REPORT_JSON : REPORT_TEXT;
    break;
  case F_COMPARE: cl->ropts.compare = true; break;
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
    const cli_flag *f;
    const char *value;
    cli_item it = cli_next(PROG, flags, NFLAGS, argc, argv, &i, &f, &value);
    if (it == CLI_ERROR) return false;
    if (it == CLI_INPUT) {
      if (cl->cfg.input) {
        cl_error("more than one input file ('%s' and '%s')", cl->cfg.input, value);
        return false;
      }
      cl->cfg.input = value;
      continue;
    }
    if (!apply_flag(cl, f, value)) return false;
  }
  return true;
}

/* The driver's output hook: the artifact asked for in place of the IR. */
static int emit_artifact(void *ctx, const ir_module *m, const pass_results *res, diag_engine *d,
                         diag_loc where, strbuf *out) {
  const cmdline *cl = ctx;
  report_opts ro = cl->ropts;
  ro.tuner = pass_results_get(res, PASS_ID_TUNE); /* the tune pass's figures, as in octoc */
  ro.config = pass_results_get(res, PASS_ID_CONFIG);
  return report_emit(m, cl->emit, &ro, out, d, where);
}

/* Whether path names a spec (ends in ".octo"), which octoc reads and octo-opt does not. */
static bool is_spec_name(const char *path) {
  size_t n = strlen(path);
  return n > 5 && strcmp(path + n - 5, ".octo") == 0;
}

int main(int argc, char **argv) {
  cli_init();
  be_register_passes();
  cmdline cl;
  memset(&cl, 0, sizeof cl);
  cl.error_limit = -1;
  cl.emit = REPORT_IR;
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
    return fflush(stdout) == 0 ? EXIT_OK : EXIT_USER;
  }
  if (!cl.cfg.input) cl.cfg.input = "-";

  strbuf why = {0};
  bool ok = report_check_options(cl.emit, &cl.ropts,
                                 cl.cfg.split_input_file && !cl.cfg.verify_diagnostics, &why);
  if (!ok) cl_error("%s", strbuf_cstr(&why));
  strbuf_free(&why);
  if (!ok) return EXIT_USER;
  cl.ropts.debuginfo = cl.cfg.pm.print_debuginfo;
  if (cl.emit != REPORT_IR) {
    cl.cfg.emit = emit_artifact;
    cl.cfg.emit_ctx = &cl;
  }

  diag_engine *d = diag_new(stderr);
  diag_set_program(d, "octo-opt");
  if (cl.error_limit >= 0) diag_set_error_limit(d, cl.error_limit);
  strbuf out = {0};
  pass_opt_result r = pass_opt_process(&cl.cfg, d, &out);
  int code = r.status == PASS_OK ? EXIT_OK : r.status == PASS_INTERNAL ? EXIT_INTERNAL : EXIT_USER;
  if (code == EXIT_USER && !cl.cfg.verify_diagnostics && is_spec_name(cl.cfg.input))
    fprintf(stderr, PROG ": note: '%s' is a spec and octo-opt reads IR: compile it with "
            "'octoc %s --emit=ir' (octoc runs passes too: --passes=...)\n", cl.cfg.input,
            cl.cfg.input);
  if (!cl.cfg.verify_diagnostics && (r.status == PASS_OK || r.chunks_ok > 0)) {
    int wcode = cli_write_output(PROG, cl.output, &out) ? EXIT_USER : EXIT_OK;
    if (wcode > code) code = wcode;
  }
  strbuf_free(&out);
  diag_free(d);
  return code;
}
