/* report.h -- what people look at: the plan report as a table or one JSON object, the
 * Chrome/Perfetto trace of a simulated step, and an SVG timeline picture. Each writer takes the
 * module and, when the module has a plan, its recorded simulation; report_emit does the whole
 * job for the tools (simulate when needed, then write). docs/report.md documents the formats. */
#ifndef OCTO_REPORT_H
#define OCTO_REPORT_H

#include <stdio.h>

#include "ir.h"
#include "sim.h"
#include "support.h"

/* The artifacts, in the order --help lists them. */
typedef enum report_kind {
  REPORT_TEXT,  /* the plan and its prediction as tables (octoc's default output) */
  REPORT_JSON,  /* one JSON object (schema in docs/report.md) */
  REPORT_TRACE, /* Chrome / Perfetto trace JSON */
  REPORT_SVG,   /* SVG timeline */
} report_kind;

/* Text report of m. r: a recorded SIM_OK run of m's plan, or NULL when m has no schedule (the
 * report then shows the model, cluster, set-up and per-layer costs, and says there is no plan). */
void report_text(const ir_module *m, const sim_result *r, strbuf *out);
/* JSON report of m (same pre as report_text); keys in docs/report.md. */
void report_json(const ir_module *m, const sim_result *r, strbuf *out);
/* Trace of r (pre: r is a recorded SIM_OK run of m). */
void report_trace(const ir_module *m, const sim_result *r, strbuf *out);
/* SVG timeline of r (pre: r is a recorded SIM_OK run of m). */
void report_svg(const ir_module *m, const sim_result *r, strbuf *out);

/* Simulate m's plan when it has one (stages and schedules; recorded, fixed mode) and write
 * artifact k to 'out'. Pre: m passed ir_verify. Trace and SVG need a scheduled module: without
 * one, an error through d at 'where'. A plan that does not simulate (sim_model_build's errors such
 * as missing costs or links, a deadlocking or invalid order) is reported through d (at 'where'
 * or the entity concerned). Returns 0 (out holds the artifact), or -1 after reporting (out is
 * unchanged). */
int report_emit(const ir_module *m, report_kind k, strbuf *out, diag_engine *d, diag_loc where);

#endif
