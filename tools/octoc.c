/* octoc -- the OctoPipe compiler driver: compiles a .octo spec to the pipeline IR, plans it
 * (the default pipeline below, or --passes), and writes the report (text or JSON, with the
 * classic plans beside it with --compare) or the artifact asked for with --emit (IR, trace, SVG
 * timeline, PyTorch schedule CSV, Megatron layout). Exit codes: 0 success, 1 user error,
 * 2 internal error. */
#include <errno.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "frontend.h"
#include "import.h"
#include "ir.h"
#include "backend.h"
#include "passes.h"
#include "report.h"
#include "cli.h"
#include "support.h"

/* Command-line options of octoc. */
typedef struct octoc_opts {
  const char *input;      /* spec file, "-" for stdin */
  const char *output;     /* -o FILE, NULL for stdout */
  report_kind emit;       /* --emit=KIND (--report selects REPORT_TEXT or REPORT_JSON) */
  const char *passes;     /* --passes: the pipeline after the front end, NULL for the default */
  const char *budget;     /* --budget: the tune pass's budget ("30s"), NULL when not given (the
                             pass's default); --seed likewise */
  const char *seed;       /* --seed: the tune (config) pass's seed */
  int64_t evals;          /* --evals: the tune pass's evals (config's long_evals); -1: not
                             given; --jobs likewise */
  int64_t jobs;           /* --jobs: the tune (config) pass's jobs */
  bool compare;           /* --compare: run the classic plans too */
  bool search_config;     /* --search=config: the train fields the spec omits are chosen */
  bool megatron;          /* --megatron with --search=config: every configuration is planned
                             by the megatron pass, so the table and the plan written agree */
  bool explain;           /* --explain */
  bool verify_diags;      /* --verify-diagnostics */
  bool split;             /* --split-input-file */
  bool debuginfo;         /* --print-debuginfo */
  int error_limit;        /* --error-limit */
  const char *profiles[16]; /* --profile=FILE: measured costs, after the spec's own profiles */
  int nprofiles;            /* their count */
  bool hf;                  /* --hf=PATH: the input is a Hugging Face config (import.h) */
  const char *with;         /* --with=SPEC: its devices, clusters and train block */
} octoc_opts;

/* Command-line flags. */
typedef enum flag_id {
  F_EMIT, F_REPORT, F_COMPARE, F_EVALS, F_BUDGET, F_JOBS, F_SEED, F_PROFILE, F_PASSES, F_SEARCH,
  F_MEGATRON, F_OUTPUT, F_EXPLAIN, F_DEBUGINFO, F_VERIFY_DIAGS, F_SPLIT, F_ERROR_LIMIT, F_HF,
  F_WITH, F_HELP, F_VERSION
} flag_id;

static const cli_flag flags[] = {
    {F_EMIT, "--emit", "KIND", "what to write (see below; default report)", false},
    {F_REPORT, "--report", "FORMAT", "write the report as text (default) or json", true},
    {F_COMPARE, "--compare", NULL,
     "add the classic plans (S-1F1B, balanced 1F1B, I-1F1B, ZB-H1,\n"
     "ZB-V, adaptive) to the report (or --emit=html), with their\nspeedup", false},
    {F_EVALS, "--evals", "N",
     "plans the tuner may simulate (default: until 20 restarts in\n"
     "a row find nothing better, at most 4000 plans and 2.5e8\n"
     "simulated operations; given, N plans and no operations cap;\n"
     "0: no limit); the plan is the same on every machine; with\n"
     "--search=config, the long tune of each of the best\n"
     "configurations (config's long_evals; the short tunes keep\ntheirs)", false},
    {F_BUDGET, "--budget", "SECONDS",
     "time the tuner may take (default: no limit); the plan then\n"
     "depends on the machine's speed and load", false},
    {F_JOBS, "--jobs", "N",
     "the tuner's threads (default 0: every core); the plan does\nnot depend on it", false},
    {F_SEED, "--seed", "N", "seed of the tuner's random restarts (default 1)", false},
    {F_PROFILE, "--profile", "FILE",
     "measured costs (octo-run --profile), applied after the\n"
     "spec's own profile lines; may be repeated", false},
    {F_PASSES, "--passes", "PIPELINE",
     "the passes after the front end instead of the default plan\n"
     "(costs, then the tuner's plan, then simulate);\n"
     "e.g. 'cost,partition,place,schedule{method=zb-h1},simulate'\n"
     "(see octo-opt --list-passes); --passes= runs none", false},
    {F_SEARCH, "--search", "config",
     "choose the train fields the spec leaves out (tensor, pipeline,\n"
     "data, micro_batch, recompute, zero) with the plan: the\n"
     "report lists the best configurations (the config pass)", false},
    {F_MEGATRON, "--megatron", NULL,
     "plan stages Megatron-LM can express (for --emit=megatron-*;\n"
     "with --search=config, every configuration's plan): cuts\n"
     "between transformer blocks balanced on each stage's device\n"
     "and within its memory, one stage per device, 1F1B; full\n"
     "recomputation when it is faster or the only fit; an error\nwhen nothing fits", false},
    {F_OUTPUT, "-o", "FILE", "write to FILE instead of stdout", false},
    {F_EXPLAIN, "--explain", NULL, "report every default the compiler assumed", false},
    {F_DEBUGINFO, "--print-debuginfo", NULL, "print source locations in the IR", false},
    {F_VERIFY_DIAGS, "--verify-diagnostics", NULL,
     "check the spec's '# expected-error {{...}}' comments", false},
    {F_SPLIT, "--split-input-file", NULL, "compile each '# -----' separated chunk on its own",
     false},
    {F_ERROR_LIMIT, "--error-limit", "N", "stop after N errors (default 20, 0 = no limit)", false},
    {F_HF, "--hf", "PATH",
     "compile the model of a Hugging Face config.json (or a folder\n"
     "holding one) instead of a spec (docs/import.md)", false},
    {F_WITH, "--with", "SPEC", "with --hf: the devices, clusters and train block of SPEC", false},
    {F_HELP, "--help", NULL, "show this help", false},
    {F_VERSION, "--version", NULL, "show the version", false},
};
#define NFLAGS (int)(sizeof flags / sizeof flags[0])

/* Print the help text to f. */
static void usage(FILE *f) {
  fputs("usage: octoc SPEC.octo [options]\n"
        "\n"
        "Compile an OctoPipe model/cluster/training spec to the pipeline IR, estimate every\n"
        "layer's costs, plan the pipeline, simulate a step, and report the result.\n"
        "\n"
        "options:\n",
        f);
  cli_usage(f, flags, NFLAGS, 22);
  fputs("\nartifacts (--emit=KIND):\n", f);
  for (int k = 0; k < REPORT_KIND_COUNT; k++)
    fprintf(f, "  %-22s %s\n", report_kinds[k].name, report_kinds[k].help);
  fputs("\n"
        "exit status: 0 success, 1 error in the input or the command line, 2 internal error\n",
        f);
}

/* The pipeline octoc runs when --passes is not given, into 'text': with --search=config the
 * config pass (--evals its long tunes' effort, long_evals; 0: no limit), then simulate; else,
 * with devices to plan for, the cost pass, the tuner's plan (never slower than the best classic
 * plan) and simulate. A partition given in the spec is kept instead of tuned: one stage per
 * device runs 1F1B, more are placed in Megatron's loop and scheduled by the adaptive scheduler.
 * Without devices the pipeline is empty (nothing to cost on, nothing to plan). */
static void default_pipeline(const ir_module *m, const octoc_opts *o, strbuf *text) {
  if (o->search_config) {
    strbuf_puts(text, "config{");
    if (o->evals >= 0) /* 0: no limit, the most long_evals allows */
      strbuf_printf(text, "long_evals=%lld, ", (long long)(o->evals ? o->evals : 1000000000));
    if (o->jobs >= 0) strbuf_printf(text, "jobs=%lld, ", (long long)o->jobs);
    if (o->seed) strbuf_printf(text, "seed=%s, ", o->seed);
    strbuf_printf(text, "megatron=%s},simulate", o->megatron ? "true" : "false");
  } else if (m->ndevices > 0 && m->nstages > 0) {
    int v = m->nstages / m->ndevices; /* the front end checked that it divides */
    strbuf_printf(text, "cost,partition{method=explicit, chunks=%d},place{method=%s},"
                  "schedule{method=%s},simulate", v, v > 1 ? "interleaved" : "sequential",
                  v > 1 ? "adaptive" : "1f1b");
  } else if (m->ndevices > 0) {
    strbuf_printf(text, "cost,tune{progress=%s", o->verify_diags ? "false" : "auto");
    if (o->evals >= 0) strbuf_printf(text, ", evals=%lld, work=0", (long long)o->evals);
    if (o->budget) strbuf_printf(text, ", budget=%s", o->budget);
    if (o->jobs >= 0) strbuf_printf(text, ", jobs=%lld", (long long)o->jobs);
    if (o->seed) strbuf_printf(text, ", seed=%s", o->seed);
    strbuf_puts(text, "},simulate");
  }
}

/* Run the pipeline 'text' on m, leaving the figures of its passes in *res. A built-in pipeline
 * (octoc's default) has no place in the user's text: its passes report at the module. */
static pass_status run_passes(ir_module *m, const char *text, bool builtin, pass_results *res,
                              diag_engine *d) {
  pass_pipeline pl = {0};
  pass_status st = PASS_FAILED;
  pass_manager_opts pm = {0};
  pm.results = res;
  if (pass_pipeline_parse(&pl, text, d) == 0) {
    for (int i = 0; builtin && i < pl.count; i++) pl.entries[i].opts.loc = diag_mkloc(0, 0, 0, 0);
    st = pass_pipeline_run(&pl, m, &pm, d);
  }
  pass_pipeline_free(&pl);
  return st;
}

/* Compile one source and append its output to 'out'. Returns 0 on success, 1 on an input error,
 * 2 on an internal error. */
static int compile_one(diag_engine *d, uint32_t src, const octoc_opts *o, strbuf *out) {
  fe_options fo = {o->explain, o->search_config};
  ir_module *m = fe_compile(d, src, &fo);
  if (!m) return 1;
  for (int i = 0; i < o->nprofiles; i++) ir_module_add_profile(m, o->profiles[i]);
  int rc = 0;
  diag_loc where = m->loc.src ? ir_diag_loc(m->loc) : diag_mkloc(src, 0, 0, 0);
  if (ir_verify(m, d, diag_mkloc(src, 0, 0, 0)) != 0) {
    rc = 1;
  } else {
    pass_results res = {0};
    strbuf plan = {0};
    if (!o->passes) default_pipeline(m, o, &plan);
    pass_status st = run_passes(m, o->passes ? o->passes : strbuf_cstr(&plan), !o->passes, &res,
                                d);
    strbuf_free(&plan);
    if (st == PASS_OK && m->ndevices == 0 && report_kinds[o->emit].needs != REPORT_NEEDS_NOTHING) {
      /* nothing to plan for: say what is missing rather than that the plan is */
      diag_error(d, where, "cannot write --emit=%s: the spec has no cluster, so there is no plan "
                 "to write (add a device, a cluster and a train block that names it: "
                 "docs/language.md, sections 4.4 to 4.6)", report_kinds[o->emit].name);
      st = PASS_FAILED;
    }
    if (st != PASS_OK) {
      rc = st == PASS_INTERNAL ? 2 : 1;
    } else {
      report_opts ro = {o->debuginfo, o->compare, pass_results_get(&res, PASS_ID_TUNE),
                        pass_results_get(&res, PASS_ID_CONFIG)};
      strbuf text = {0};
      if (report_emit(m, o->emit, &ro, &text, d, where) != 0)
        rc = 1;
      else if (!o->verify_diags)
        strbuf_append(out, strbuf_cstr(&text), text.len);
      strbuf_free(&text);
    }
    pass_results_free(&res);
  }
  ir_module_free(m);
  return rc;
}

/* Read v as a whole number (the value grammar's) within the range of the tune pass's option
 * 'key' (options.def) into *out; prints "FLAG expects ..." and returns false when it is not. */
static bool tune_count(const char *flag, const char *key, const char *v, int64_t *out) {
  const pass_option_info *r = pass_option_find(&pass_registry[PASS_ID_TUNE], key);
  ir_value_text t;
  double x = 0;
  size_t n = strlen(v);
  bool ok = ir_value_scan(v, n, &t) == n &&
            ir_value_convert(&t, IR_T_COUNT, IR_VALUE_SIGNED, &x, NULL) == IR_VALUE_OK &&
            x >= r->min && x <= r->max;
  if (!ok)
    cli_error("octoc", "%s expects a whole number from %.0f to %.0f, got '%s'", flag, r->min,
              r->max, v);
  *out = (int64_t)x;
  return ok;
}

/* Whether the digits v are at most 2^64 - 1. */
static bool seed_ok(const char *v) {
  errno = 0;
  strtoull(v, NULL, 10);
  return errno != ERANGE;
}

/* Apply flag f with value v (NULL when it has none) to o. Returns -1 to go on, or the exit
 * status: 0 after --help or --version, 1 after reporting a bad value. */
static int apply_flag(octoc_opts *o, const cli_flag *f, const char *v, bool *megatron) {
  switch ((flag_id)f->id) {
  case F_HELP: usage(stdout); return 0;
  case F_VERSION: printf("octoc (OctoPipe) %s\n", OCTO_VERSION); return 0;
  case F_EMIT: {
    strbuf why = {0};
    int k = report_kind_lookup(v, &why);
    if (k < 0) cli_error("octoc", "%s", strbuf_cstr(&why));
    strbuf_free(&why);
    if (k < 0) return 1;
    o->emit = (report_kind)k;
    break;
  }
  case F_REPORT:
    if (v && strcmp(v, "json") != 0 && strcmp(v, "text") != 0) {
      cli_error("octoc", "unknown --report format '%s' (expected text or json)", v);
      return 1;
    }
    o->emit = v && strcmp(v, "json") == 0 ? REPORT_JSON : REPORT_TEXT;
    break;
  case F_COMPARE: o->compare = true; break;
  case F_WITH: o->with = v; break;
  case F_HF:
    if (o->input) {
      cli_error("octoc", "more than one input file ('%s' and '%s')", o->input, v);
      return 1;
    }
    o->input = v;
    o->hf = true;
    break;
  case F_PASSES: o->passes = v; break;
  case F_MEGATRON: *megatron = true; break;
  case F_SEARCH:
    if (strcmp(v, "config") != 0) {
      cli_error("octoc", "unknown --search '%s' (expected config)", v);
      return 1;
    }
    o->search_config = true;
    break;
  case F_PROFILE:
    if (!*v || o->nprofiles == (int)(sizeof o->profiles / sizeof *o->profiles)) {
      cli_error("octoc", *v ? "at most 16 --profile files" : "--profile expects a file name");
      return 1;
    }
    o->profiles[o->nprofiles++] = v;
    break;
  case F_BUDGET: {
    char *end;
    double b = strtod(v, &end);
    if (end == v || !(b > 0 && b <= 1e6) || (*end && strcmp(end, "s") != 0)) {
      cli_error("octoc", "--budget expects seconds (e.g. 30 or 30s), got '%s'", v);
      return 1;
    }
    static char budget[48]; /* the tune pass's budget: seconds with their unit */
    snprintf(budget, sizeof budget, "%.17gs", b);
    o->budget = budget;
    break;
  }
  case F_EVALS:
  case F_JOBS: {
    bool evals = f->id == F_EVALS;
    if (!tune_count(f->name, evals ? "evals" : "jobs", v, evals ? &o->evals : &o->jobs))
      return 1;
    break;
  }
  case F_SEED:
    if (*v == 0 || strspn(v, "0123456789") != strlen(v) || !seed_ok(v)) {
      cli_error("octoc", "--seed expects a whole number from 0 to %llu, got '%s'",
                (unsigned long long)UINT64_MAX, v);
      return 1;
    }
    o->seed = v;
    break;
  case F_OUTPUT: o->output = v; break;
  case F_EXPLAIN: o->explain = true; break;
  case F_DEBUGINFO: o->debuginfo = true; break;
  case F_VERIFY_DIAGS: o->verify_diags = true; break;
  case F_SPLIT: o->split = true; break;
  case F_ERROR_LIMIT: {
    char *end;
    long n = strtol(v, &end, 10);
    if (*v == 0 || *end || n < 0 || n > 1000000) {
      cli_error("octoc", "--error-limit expects a number, got '%s'", v);
      return 1;
    }
    o->error_limit = (int)n;
    break;
  }
  }
  return -1;
}

int main(int argc, char **argv) {
  cli_init();
  be_register_passes();
  octoc_opts o = {.emit = REPORT_TEXT, .evals = -1, .jobs = -1, .error_limit = 20};
  bool megatron = false; /* --megatron: the passes are PASS_MEGATRON_PIPELINE */
  for (int i = 1; i < argc; i++) {
    const cli_flag *f;
    const char *v;
    cli_item it = cli_next("octoc", flags, NFLAGS, argc, argv, &i, &f, &v);
    if (it == CLI_ERROR) return 1;
    if (it == CLI_INPUT) {
      if (o.input) {
        cli_error("octoc", "more than one input file ('%s' and '%s')", o.input, v);
        return 1;
      }
      o.input = v;
      continue;
    }
    int rc = apply_flag(&o, f, v, &megatron);
    if (rc >= 0) return rc;
  }
  if (o.with && !o.hf) {
    cli_error("octoc", "--with goes with --hf (a spec imports its own clusters)");
    return 1;
  }
  if (megatron && o.passes) {
    cli_error("octoc", "--megatron chooses the passes: give either it or --passes");
    return 1;
  }
  if (megatron && o.search_config) o.megatron = true;
  else if (megatron) o.passes = PASS_MEGATRON_PIPELINE;
  if (o.search_config && o.passes && *o.passes && !strstr(o.passes, "config")) {
    cli_error("octoc", "--search=config needs the config pass: put 'config' first in --passes "
              "(or leave --passes and --megatron out)");
    return 1;
  }
  if (!o.input) {
    cli_error("octoc", "no input file (try 'octoc --help')");
    return 1;
  }
  if (o.emit == REPORT_STREAM && !o.output && isatty(1)) {
    cli_error("octoc", "--emit=stream writes a binary file: give it a name with -o FILE");
    return 1;
  }
  report_opts check = {false, o.compare, NULL, NULL};
  strbuf why = {0};
  bool ok = report_check_options(o.emit, &check, o.split && !o.verify_diags, &why);
  if (!ok) cli_error("octoc", "%s", strbuf_cstr(&why));
  strbuf_free(&why);
  if (!ok) return 1;
  diag_engine *d = diag_new(stderr);
  diag_set_program(d, "octoc");
  diag_set_error_limit(d, o.error_limit);
  diag_set_verify(d, o.verify_diags);
  int rc = 0, produced = 0;
  strbuf out = {0};
  uint32_t src = o.hf ? hf_load(d, o.input, &(hf_options){.with = o.with}, NULL)
                 : diag_load_file(d, o.input, diag_mkloc(0, 0, 0, 0));
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
  } else if (produced > 0 && cli_write_output("octoc", o.output, &out) != 0) {
    rc = rc ? rc : 1;
  }
  strbuf_free(&out);
  diag_free(d);
  return rc;
}
