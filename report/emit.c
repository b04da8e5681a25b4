/* emit.c -- report_emit: what the tools call to write an artifact. Simulates the module's plan
 * when it has one (recorded, fixed mode), reports a plan that does not simulate, and hands the
 * timeline to the writer asked for. */
#include "report_impl.h"

/* What an artifact is called in messages. */
static const char *kind_text(report_kind k) {
  switch (k) {
  case REPORT_TEXT: return "a report";
  case REPORT_JSON: return "a JSON report";
  case REPORT_TRACE: return "a trace";
  case REPORT_SVG: return "an SVG timeline";
  }
  return "an artifact";
}

int report_emit(const ir_module *m, report_kind k, strbuf *out, diag_engine *d, diag_loc where) {
  bool scheduled = m->schedules && m->nstages > 0;
  if (!scheduled) {
    if (k == REPORT_TRACE || k == REPORT_SVG) {
      diag_error(d, where,
                 "cannot write %s: module @%s has no schedule (a plan with stages, placement "
                 "and a schedule per device is needed to simulate a step)",
                 kind_text(k), m->name);
      return -1;
    }
    if (k == REPORT_TEXT)
      report_text(m, NULL, out);
    else
      report_json(m, NULL, out);
    return 0;
  }
  sim_model *p = sim_model_build(m, d);
  if (!p) return -1;
  sim_opts o = {0};
  o.record = true;
  sim_result r = {0};
  int rc = 0;
  if (sim_run(p, m, &o, &r) != SIM_OK) {
    sim_report_failure(&r, d, where);
    rc = -1;
  } else {
    switch (k) {
    case REPORT_TEXT: report_text(m, &r, out); break;
    case REPORT_JSON: report_json(m, &r, out); break;
    case REPORT_TRACE: report_trace(m, &r, out); break;
    case REPORT_SVG: report_svg(m, &r, out); break;
    }
  }
  sim_result_free(&r);
  sim_model_free(p);
  return rc;
}
