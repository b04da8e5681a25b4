/* emit.c -- report_emit: what the tools call to write an artifact. Checks that the module has
 * what the artifact needs (artifacts.def), runs the classic plans when a comparison is asked
 * for, simulates the module's plan when it has one (recorded, fixed mode), reports a plan that
 * does not simulate, and hands the timeline to the writer asked for. */
#include <string.h>

#include "backend.h"
#include "report_impl.h"

const report_kind_info report_kinds[REPORT_KIND_COUNT] = {
#define REPORT_ARTIFACT(ID, NAME, NEEDS, ONE, HELP) {NAME, REPORT_NEEDS_##NEEDS, ONE, HELP},
#include "artifacts.def"
#undef REPORT_ARTIFACT
};

int report_kind_lookup(const char *name, strbuf *err) {
  for (int k = 0; k < REPORT_KIND_COUNT; k++)
    if (strcmp(report_kinds[k].name, name) == 0) return k;
  strbuf_printf(err, "unknown --emit kind '%s' (expected ", name);
  for (int k = 0; k < REPORT_KIND_COUNT; k++)
    strbuf_printf(err, "%s%s", k == 0 ? "" : k + 1 == REPORT_KIND_COUNT ? " or " : ", ",
                  report_kinds[k].name);
  strbuf_putc(err, ')');
  return -1;
}

bool report_check_options(report_kind k, const report_opts *o, bool split, strbuf *err) {
  if (split && report_kinds[k].one_document) {
    strbuf_printf(err, "--split-input-file cannot be combined with --emit=%s: the output is one "
                  "document", report_kinds[k].name);
    return false;
  }
  if (o->compare && k != REPORT_TEXT && k != REPORT_JSON && k != REPORT_HTML) {
    strbuf_puts(err, "--compare adds to the report: use it with --report (text or json) or "
                "--emit=html");
    return false;
  }
  return true;
}

int report_emit(const ir_module *m, report_kind k, const report_opts *o, strbuf *out,
                diag_engine *d, diag_loc where) {
  static const report_opts none = {0};
  if (!o) o = &none;
  const report_kind_info *ki = &report_kinds[k];
  bool scheduled = rep_has_schedule(m);
  if (ki->needs == REPORT_NEEDS_SCHEDULE && !scheduled) {
    diag_error(d, where, "cannot write --emit=%s: module @%s has no schedule (a plan with "
               "stages, placement and a schedule per device is needed)", ki->name, m->name);
    return -1;
  }
  if (ki->needs == REPORT_NEEDS_STAGES && m->nstages == 0) {
    diag_error(d, where, "cannot write --emit=%s: module @%s has no stages (run a partition "
               "pass)", ki->name, m->name);
    return -1;
  }
  switch (k) {
  case REPORT_IR: {
    ir_print_opts po = {o->debuginfo};
    ir_print(m, out, &po);
    return 0;
  }
  case REPORT_TORCH_CSV: report_torch_csv(m, out); return 0;
  case REPORT_STREAM:
  case REPORT_ASM: {
    be_stream *s = be_lower(m, d, where);
    if (!s) return -1;
    if (k == REPORT_STREAM)
      be_write(s, out);
    else
      be_disasm(s, out);
    be_stream_free(s);
    return 0;
  }
  case REPORT_MEGATRON_LAYOUT: return report_megatron_layout(m, out, d, where);
  case REPORT_MEGATRON_ARGS: return report_megatron_args(m, out, d, where);
  default: break;
  }
  /* The classic plans: the tuner's when it ran them, else run now when asked for. */
  pass_baseline *base = NULL;
  int nbase = 0;
  report_extra x = {NULL, 0, o->tuner, o->config};
  if (o->compare && o->tuner) {
    x.baselines = o->tuner->baselines;
    x.nbaselines = o->tuner->nbaselines;
  } else if (o->compare && (k == REPORT_TEXT || k == REPORT_JSON || k == REPORT_HTML)) {
    nbase = pass_compare(m, &base);
    x.baselines = base;
    x.nbaselines = nbase;
  }
  sim_model *p = NULL;
  sim_result r = {0};
  int rc = 0;
  if (scheduled) {
    p = sim_model_build(m, d);
    sim_opts so = {0};
    so.record = true;
    if (!p) {
      rc = -1;
    } else if (sim_run(p, m, &so, &r) != SIM_OK) {
      sim_report_failure(&r, d, where);
      rc = -1;
    }
  }
  if (rc == 0) {
    const sim_result *rr = scheduled ? &r : NULL;
    switch (k) {
    case REPORT_TEXT:
      report_text(m, rr, &x, out);
      break;
    case REPORT_JSON: report_json(m, rr, &x, out); break;
    case REPORT_TRACE: report_trace(m, rr, out); break;
    case REPORT_SVG: report_svg(m, rr, out); break;
    case REPORT_HTML: report_html(m, rr, &x, out); break;
    default: break;
    }
  }
  pass_baseline_free(base, nbase, true);
  sim_result_free(&r);
  sim_model_free(p);
  return rc;
}
