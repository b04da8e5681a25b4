/* octoc -- the OctoPipe compiler driver: compiles a .octo spec to the pipeline IR, runs the
 * cost pass (and the simulate pass when the module has a schedule), and writes the report (text
 * or JSON) or the artifact asked for with --emit (IR, trace, SVG timeline). Exit codes:
 * 0 success, 1 user error, 2 internal error. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "frontend.h"
#include "ir.h"
#include "passes.h"
#include "report.h"
#include "support.h"

/* What octoc writes. */
typedef enum octoc_emit {
  EMIT_REPORT, /* the plan report (text or JSON, see octoc_opts.json) */
  EMIT_IR,     /* the textual IR */
  EMIT_TRACE,  /* Chrome / Perfetto trace of the simulated step */
  EMIT_SVG,    /* SVG timeline of the simulated step */
} octoc_emit;

/* Command-line options of octoc. */
typedef struct octoc_opts {
  const char *input;      /* spec file, "-" for stdin */
  const char *output;     /* -o FILE, NULL for stdout */
  octoc_emit emit;        /* --emit=KIND (--report selects EMIT_REPORT) */
  bool json;              /* --report=json: the report as one JSON object */
  bool explain;           /* --explain */
  bool verify_diags;      /* --verify-diagnostics */
  bool split;             /* --split-input-file */
  bool debuginfo;         /* --print-debuginfo */
  int error_limit;        /* --error-limit */
} octoc_opts;

/* Spellings of --emit, in octoc_emit order. */
static const char *const emit_kinds[] = {"report", "ir", "trace", "svg", NULL};

static void usage(FILE *f) {
  fputs("usage: octoc SPEC.octo [options]\n"
        "\n"
        "Compile an OctoPipe model/cluster/training spec to the pipeline IR, estimate every\n"
        "layer's costs, and report the result.\n"
        "\n"
        "options:\n"
        "  --emit=KIND            what to write: report (default), ir, trace (Chrome/Perfetto\n"
        "                         JSON of the simulated step), svg (timeline picture); trace\n"
        "                         and svg need a scheduled plan\n"
        "  --report[=FORMAT]      write the report as text (default) or json\n"
        "  -o FILE                write to FILE instead of stdout\n"
        "  --explain              report every default the compiler assumed\n"
        "  --print-debuginfo      print source locations in the IR\n"
        "  --verify-diagnostics   check the spec's '# expected-error {{...}}' comments\n"
        "  --split-input-file     compile each '# -----' separated chunk on its own\n"
        "  --error-limit=N        stop after N errors (default 20, 0 = no limit)\n"
        "  --help                 show this help\n"
        "  --version              show the version\n"
        "\n"
        "exit status: 0 success, 1 error in the input or the command line, 2 internal error\n",
        f);
}

/* Run the passes octoc applies after the front end: 'cost' when the module has devices to cost
 * on (a model-only spec has none), then 'simulate' when it has a schedule. Returns the manager's
 * status. */
static pass_status run_passes(ir_module *m, diag_engine *d) {
  pass_pipeline pl = {0};
  if (m->ndevices > 0) pass_pipeline_add(&pl, &pass_registry[PASS_ID_COST]);
  if (m->schedules && m->nstages > 0) pass_pipeline_add(&pl, &pass_registry[PASS_ID_SIMULATE]);
  pass_manager_opts po = {0};
  pass_status st = pass_pipeline_run(&pl, m, &po, d);
  pass_pipeline_free(&pl);
  return st;
}

/* Compile one source and append its output to 'out'. Returns 0 on success, 1 on an input error,
 * 2 on an internal error. */
static int compile_one(diag_engine *d, uint32_t src, const octoc_opts *o, strbuf *out) {
  fe_options fo = {o->explain};
  ir_module *m = fe_compile(d, src, &fo);
  if (!m) return 1;
  int rc = 0;
  diag_loc where = m->loc.src ? ir_diag_loc(m->loc) : diag_mkloc(src, 0, 0, 0);
  if (ir_verify(m, d, diag_mkloc(src, 0, 0, 0)) != 0) {
    rc = 1;
  } else {
    pass_status st = run_passes(m, d);
    if (st != PASS_OK) {
      rc = st == PASS_INTERNAL ? 2 : 1;
    } else if (o->emit == EMIT_IR) {
      if (!o->verify_diags) {
        ir_print_opts po = {o->debuginfo};
        ir_print(m, out, &po);
      }
    } else {
      report_kind k = o->emit == EMIT_TRACE ? REPORT_TRACE
                      : o->emit == EMIT_SVG ? REPORT_SVG
                      : o->json             ? REPORT_JSON
                                            : REPORT_TEXT;
      strbuf text = {0};
      if (report_emit(m, k, &text, d, where) != 0)
        rc = 1;
      else if (!o->verify_diags)
        strbuf_append(out, strbuf_cstr(&text), text.len);
      strbuf_free(&text);
    }
  }
  ir_module_free(m);
  return rc;
}

static bool starts(const char *arg, const char *prefix, const char **value) {
  size_t n = strlen(prefix);
  if (strncmp(arg, prefix, n) != 0) return false;
  *value = arg + n;
  return true;
}

/* Write 'text' to the file named 'path' (stdout when NULL). Returns 0, or 1 after saying why. */
static int write_output(const char *path, const strbuf *text) {
  FILE *f = stdout;
  if (path) {
    f = fopen(path, "w");
    if (!f) {
      fprintf(stderr, "octoc: error: cannot write '%s': %s\n", path, strerror(errno));
      return 1;
    }
  }
  bool ok = fwrite(strbuf_cstr(text), 1, text->len, f) == text->len;
  ok = (f == stdout ? fflush(f) : fclose(f)) == 0 && ok;
  if (!ok) {
    fprintf(stderr, "octoc: error: cannot write '%s'\n", path ? path : "<stdout>");
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  octoc_opts o = {NULL, NULL, EMIT_REPORT, false, false, false, false, false, 20};
  static const char *const flags[] = {"--emit=",         "--report",
                                      "-o",              "--explain",
                                      "--print-debuginfo", "--verify-diagnostics",
                                      "--split-input-file", "--error-limit=",
                                      "--help",          "--version",
                                      NULL};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v;
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      return 0;
    } else if (strcmp(a, "--version") == 0) {
      printf("octoc (OctoPipe) %s\n", OCTO_VERSION);
      return 0;
    } else if (starts(a, "--emit=", &v)) {
      int k;
      for (k = 0; emit_kinds[k] && strcmp(emit_kinds[k], v) != 0; k++) {}
      if (!emit_kinds[k]) {
        fprintf(stderr,
                "octoc: error: unknown --emit kind '%s' (expected report, ir, trace or svg)\n", v);
        return 1;
      }
      o.emit = (octoc_emit)k;
    } else if (strcmp(a, "--report") == 0 || strcmp(a, "--report=text") == 0) {
      o.emit = EMIT_REPORT;
      o.json = false;
    } else if (strcmp(a, "--report=json") == 0) {
      o.emit = EMIT_REPORT;
      o.json = true;
    } else if (starts(a, "--report=", &v)) {
      fprintf(stderr, "octoc: error: unknown --report format '%s' (expected text or json)\n", v);
      return 1;
    } else if (strcmp(a, "-o") == 0) {
      if (++i >= argc) {
        fputs("octoc: error: -o needs a file name\n", stderr);
        return 1;
      }
      o.output = argv[i];
    } else if (strcmp(a, "--explain") == 0) {
      o.explain = true;
    } else if (strcmp(a, "--print-debuginfo") == 0) {
      o.debuginfo = true;
    } else if (strcmp(a, "--verify-diagnostics") == 0) {
      o.verify_diags = true;
    } else if (strcmp(a, "--split-input-file") == 0) {
      o.split = true;
    } else if (starts(a, "--error-limit=", &v)) {
      char *end;
      long n = strtol(v, &end, 10);
      if (*v == 0 || *end || n < 0 || n > 1000000) {
        fprintf(stderr, "octoc: error: --error-limit expects a number, got '%s'\n", v);
        return 1;
      }
      o.error_limit = (int)n;
    } else if (a[0] == '-' && a[1] != 0) {
      fprintf(stderr, "octoc: error: unknown option '%s'\n", a);
      suggest sg;
      suggest_init(&sg, a);
      for (int k = 0; flags[k]; k++) suggest_add(&sg, flags[k]);
      if (suggest_result(&sg))
        fprintf(stderr, "octoc: note: did you mean '%s'?\n", suggest_result(&sg));
      return 1;
    } else if (o.input) {
      fprintf(stderr, "octoc: error: more than one input file ('%s' and '%s')\n", o.input, a);
      return 1;
    } else {
      o.input = a;
    }
  }
  if (!o.input) {
    fputs("octoc: error: no input file (try 'octoc --help')\n", stderr);
    return 1;
  }
  bool one_document =
      o.emit == EMIT_TRACE || o.emit == EMIT_SVG || (o.emit == EMIT_REPORT && o.json);
  if (o.split && one_document && !o.verify_diags) {
    fprintf(stderr, "octoc: error: --split-input-file cannot be combined with --emit=%s%s: the "
                    "output is one document\n",
            emit_kinds[o.emit], o.emit == EMIT_REPORT ? " --report=json" : "");
    return 1;
  }
  diag_engine *d = diag_new(stderr);
  diag_set_error_limit(d, o.error_limit);
  diag_set_verify(d, o.verify_diags);
  int rc = 0, produced = 0;
  strbuf out = {0};
  uint32_t src = diag_load_file(d, o.input, diag_mkloc(0, 0, 0, 0));
  if (!src) {
    rc = 1;
  } else if (o.split) {
    uint32_t *ids;
    int n = diag_split_source(d, src, &ids);
    for (int i = 0; i < n; i++) {
      if (i > 0 && !o.verify_diags) strbuf_puts(&out, "# -----\n");
      int r = compile_one(d, ids[i], &o, &out);
      if (r > rc) rc = r;
      produced += r == 0;
    }
    free(ids);
  } else {
    rc = compile_one(d, src, &o, &out);
    produced = rc == 0;
  }
  if (o.verify_diags) {
    int mismatches = diag_verify_finish(d);
    rc = rc == 2 ? 2 : mismatches ? 1 : 0;
  } else if (produced > 0 && write_output(o.output, &out) != 0) {
    rc = rc ? rc : 1;
  }
  strbuf_free(&out);
  diag_free(d);
  return rc;
}
