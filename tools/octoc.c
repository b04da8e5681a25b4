/* octoc -- the OctoPipe compiler driver: compiles a .octo spec to the pipeline IR and prints a
 * report of the model, cluster and training set-up, or writes the artifact asked for with
 * --emit. Exit codes: 0 success, 1 user error, 2 internal error. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "frontend.h"
#include "ir.h"
#include "passes.h"
#include "support.h"

/* Command-line options of octoc. */
typedef struct octoc_opts {
  const char *input;      /* spec file, "-" for stdin */
  const char *output;     /* -o FILE, NULL for stdout */
  const char *emit;       /* "report" or "ir" */
  bool explain;           /* --explain */
  bool verify_diags;      /* --verify-diagnostics */
  bool split;             /* --split-input-file */
  bool debuginfo;         /* --print-debuginfo */
  int error_limit;        /* --error-limit */
} octoc_opts;

static const char *const emit_kinds[] = {"report", "ir", NULL};

static void usage(FILE *f) {
  fputs("usage: octoc SPEC.octo [options]\n"
        "\n"
        "Compile an OctoPipe model/cluster/training spec to the pipeline IR.\n"
        "\n"
        "options:\n"
        "  --emit=KIND            what to write: report (default), ir\n"
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

/* Print the human-readable summary of a compiled module. */
static void print_report(const ir_module *m, FILE *f) {
  int per_kind[IR_KIND_COUNT] = {0};
  for (int i = 0; i < m->nlayers; i++) per_kind[m->layers[i].kind]++;
  fprintf(f, "model %s: %d layer%s (", m->name, m->nlayers, m->nlayers == 1 ? "" : "s");
  bool first = true;
  for (int k = 0; k < IR_KIND_COUNT; k++)
    if (per_kind[k]) {
      fprintf(f, "%s%d %s", first ? "" : ", ", per_kind[k], ir_kinds[k].name);
      first = false;
    }
  fputs(")\n", f);
  const ir_train *t = &m->train;
  strbuf sb = {0};
  if (m->cluster_name && m->ndevices > 0) {
    const ir_device *d = &m->devices[0];
    strbuf_printf(&sb, "cluster %s: %lld node(s) x %lld GPUs of %s (", m->cluster_name,
                  (long long)m->cluster.nodes, (long long)m->cluster.gpus_per_node, d->type);
    ir_format_value(&sb, IR_T_FLOPS, d->rec.peak);
    strbuf_puts(&sb, ", ");
    ir_format_value(&sb, IR_T_BYTES, d->rec.mem);
    strbuf_puts(&sb, ", ");
    ir_format_value(&sb, IR_T_BW, d->rec.hbm);
    strbuf_printf(&sb, ", efficiency %g)\n", d->rec.efficiency);
  }
  strbuf_printf(&sb, "train: pipeline %lld x tensor %lld x data %lld; micro_batch %lld, "
                     "%lld microbatches, global batch %lld, seq %lld, %s, %s",
                (long long)t->pipeline, (long long)t->tensor, (long long)t->data,
                (long long)t->micro_batch, (long long)t->microbatches,
                (long long)t->global_batch, (long long)t->seq,
                ir_enum_name(IR_T_DTYPE, (int)t->dtype),
                ir_enum_name(IR_T_OPTIMIZER, (int)t->optimizer));
  if (t->mem_limit > 0) {
    strbuf_puts(&sb, ", mem_limit ");
    ir_format_value(&sb, IR_T_BYTES, t->mem_limit);
  }
  strbuf_putc(&sb, '\n');
  if (m->ndevices > 0) {
    strbuf_printf(&sb, "devices: %d pipeline devices ($d0..$d%d) on node(s) %lld..%lld\n",
                  m->ndevices, m->ndevices - 1, (long long)m->devices[0].rec.node,
                  (long long)m->devices[m->ndevices - 1].rec.node);
  }
  if (m->nstages == 0) strbuf_puts(&sb, "plan: none yet (no planning passes were run)\n");
  fputs(strbuf_cstr(&sb), f);
  strbuf_free(&sb);
}

/* Compile one source and write its output. Returns 0 on success, 1 on an input error. */
static int compile_one(diag_engine *d, uint32_t src, const octoc_opts *o, FILE *out) {
  fe_options fo = {o->explain};
  ir_module *m = fe_compile(d, src, &fo);
  if (!m) return 1;
  int rc = 0;
  if (ir_verify(m, d, diag_mkloc(src, 0, 0, 0)) != 0) {
    rc = 1;
  } else if (!o->verify_diags) {
    if (strcmp(o->emit, "ir") == 0) {
      ir_print_opts po = {o->debuginfo};
      ir_print_file(m, out, &po);
    } else {
      print_report(m, out);
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

int main(int argc, char **argv) {
  octoc_opts o = {NULL, NULL, "report", false, false, false, false, 20};
  static const char *const flags[] = {"--emit=",         "-o",
                                      "--explain",       "--print-debuginfo",
                                      "--verify-diagnostics", "--split-input-file",
                                      "--error-limit=",  "--help",
                                      "--version",       NULL};
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
        fprintf(stderr, "octoc: error: unknown --emit kind '%s' (expected report or ir)\n", v);
        return 1;
      }
      o.emit = emit_kinds[k];
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
      if (suggest_result(&sg)) fprintf(stderr, "octoc: note: did you mean '%s'?\n", suggest_result(&sg));
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
  FILE *out = stdout;
  if (o.output && !o.verify_diags) {
    out = fopen(o.output, "w");
    if (!out) {
      fprintf(stderr, "octoc: error: cannot write '%s': %s\n", o.output, strerror(errno));
      return 1;
    }
  }
  diag_engine *d = diag_new(stderr);
  diag_set_error_limit(d, o.error_limit);
  diag_set_verify(d, o.verify_diags);
  int rc = 0;
  uint32_t src = diag_load_file(d, o.input, diag_mkloc(0, 0, 0, 0));
  if (!src) {
    rc = 1;
  } else if (o.split) {
    uint32_t *ids;
    int n = diag_split_source(d, src, &ids);
    for (int i = 0; i < n; i++) {
      if (i > 0 && !o.verify_diags) fputs("# -----\n", out);
      if (compile_one(d, ids[i], &o, out)) rc = 1;
    }
    free(ids);
  } else {
    rc = compile_one(d, src, &o, out);
  }
  if (o.verify_diags) rc = diag_verify_finish(d) ? 1 : 0;
  diag_free(d);
  if (out != stdout && fclose(out) != 0) {
    fprintf(stderr, "octoc: error: cannot write '%s'\n", o.output);
    rc = 1;
  }
  return rc;
}
