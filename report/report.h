/* report.h -- what people look at: the plan report as a table or one JSON object (with the
 * classic plans beside it), the Chrome/Perfetto trace of a simulated step, an SVG timeline
 * picture, and the plan exported for PyTorch (schedule CSV) and Megatron (layout string). Each
 * writer takes the module and, when the module has a plan, its recorded simulation; report_emit
 * does the whole job for the tools (simulate when needed, then write). docs/report.md documents
 * the formats. */
#ifndef OCTO_REPORT_H
#define OCTO_REPORT_H

#include <stdio.h>

#include "ir.h"
#include "passes.h"
#include "sim.h"
#include "support.h"

/* The artifacts of artifacts.def: REPORT_<ID>. */
typedef enum report_kind {
#define REPORT_ARTIFACT(ID, NAME, NEEDS, ONE, HELP) REPORT_##ID,
#include "artifacts.def"
#undef REPORT_ARTIFACT
  REPORT_KIND_COUNT
} report_kind;

/* What a module must have for an artifact to be written. */
typedef enum report_needs {
  REPORT_NEEDS_NOTHING,  /* any module */
  REPORT_NEEDS_STAGES,   /* stages (and a placement) */
  REPORT_NEEDS_SCHEDULE, /* stages and a schedule per device */
} report_needs;

/* Description of an artifact (artifacts.def). */
typedef struct report_kind_info {
  const char *name;   /* spelling after --emit= */
  report_needs needs; /* what the module must have */
  bool one_document; /* cannot be split into chunks */
  const char *help;  /* one line for --help */
} report_kind_info;
extern const report_kind_info report_kinds[REPORT_KIND_COUNT];

/* The artifact spelled 'name', or -1 with the reason ("unknown --emit kind ...") in *err. */
int report_kind_lookup(const char *name, strbuf *err);

/* What else goes into an artifact. Zero-initialize for the defaults. */
typedef struct report_opts {
  bool debuginfo;    /* IR: print loc(...) */
  bool compare;      /* report and JSON: show the classic plans (run them unless 'tuner' has) */
  const pass_tune_stats *tuner; /* the tuner's figures when it made the plan, else NULL */
  const pass_config_stats *config; /* the configuration search's figures when it chose the
                                      configuration, else NULL */
} report_opts;

/* What the report shows besides the module and its simulation. */
typedef struct report_extra {
  const pass_baseline *baselines; /* the classic plans to show beside the plan, NULL: none */
  int nbaselines;                 /* their number */
  const pass_tune_stats *tuner;   /* the tuner's figures, NULL: not tuned */
  const pass_config_stats *config; /* the configuration search's figures, NULL: none ran */
} report_extra;

/* Whether the tools may write artifact k with options o (compare: only with the report) and
 * --split-input-file when 'split' (only for artifacts that are not one document). Returns
 * false with the reason in *err. */
bool report_check_options(report_kind k, const report_opts *o, bool split, strbuf *err);

/* Text report of m. r: a recorded SIM_OK run of m's plan, or NULL when m has no schedule (the
 * report then shows the model, cluster, set-up and per-layer costs, and says there is no plan). */
void report_text(const ir_module *m, const sim_result *r, const report_extra *x, strbuf *out);
/* JSON report of m (same pre as report_text); keys in docs/report.md. x (may be NULL) adds the
 * "baselines" list and the "tuner" object. */
void report_json(const ir_module *m, const sim_result *r, const report_extra *x, strbuf *out);
/* The schedule of m as PyTorch torch.distributed.pipelining CSV, compute only: one row per
 * device, cells "<stage>F<mb>", "<stage>I<mb>" (B), "<stage>W<mb>", "<stage>B<mb>" (fused BW), as
 * torch's _load_csv(format="compute_only") reads them. Pre: m has schedules. */
void report_torch_csv(const ir_module *m, strbuf *out);
/* The partition of m as Megatron's --pipeline-model-parallel-layout ("E,t*3|t*4|...,L": E
 * embedding, t attention with its MLP or MoE, L LM head, '|' between stages in virtual-stage
 * order) or, for hybrid models, the hybrid pattern with '|' cuts (M Mamba-2, * attention, - MLP,
 * E MoE). Megatron places virtual stage s on rank s mod p, so a placement other than sequential
 * or interleaved, or layers these notations cannot spell, are errors through d at 'where'.
 * Returns 0, or -1 after reporting. */
int report_megatron_layout(const ir_module *m, strbuf *out, diag_engine *d, diag_loc where);
/* Megatron-LM's flags for m's partition, one line: "--pipeline-model-parallel-size P
 * --pipeline-model-parallel-layout '...'", or for hybrid models "... --hybrid-layer-pattern
 * '...'" followed by a comment line for megatron-core 0.16 and earlier, which reject '|' in
 * hybrid patterns: the pattern without the cuts, and whether the even split those versions make
 * is this plan's; --untie-embeddings-and-output-weights unless the lm_head is tied (Megatron
 * ties by default). Errors as report_megatron_layout. Returns 0, or -1 after reporting. */
int report_megatron_args(const ir_module *m, strbuf *out, diag_engine *d, diag_loc where);
/* Trace of r (pre: r is a recorded SIM_OK run of m). */
void report_trace(const ir_module *m, const sim_result *r, strbuf *out);
/* SVG timeline of r (pre: r is a recorded SIM_OK run of m). */
void report_svg(const ir_module *m, const sim_result *r, strbuf *out);
/* The interactive HTML page of r (pre: r is a recorded SIM_OK run of m; x may be NULL, its
 * baselines add the comparison chart). Post: out holds one self-contained HTML document whose
 * data (the JSON report and the timeline) sits in a <script type="application/json"> element. */
void report_html(const ir_module *m, const sim_result *r, const report_extra *x, strbuf *out);
/* Append the n bytes of JSON text 'json' to out for a <script> element: every '<' becomes
 * \u003c (valid inside JSON strings; JSON has no '<' elsewhere), so no name can close the
 * element ("</script") or open a comment. Pre: json is JSON text. Post: out holds JSON that
 * parses to the same value and contains no '<'. */
void report_html_script_json(strbuf *out, const char *json, size_t n);

/* Simulate m's plan when it has one (stages and schedules; recorded, fixed mode) and write
 * artifact k to 'out'. Pre: m passed ir_verify. Trace and SVG need a scheduled module: without
 * one, an error through d at 'where'. A plan that does not simulate (sim_model_build's errors such
 * as missing costs or links, a deadlocking or invalid order) is reported through d (at 'where'
 * or the entity concerned). Returns 0 (out holds the artifact), or -1 after reporting (out is
 * unchanged). */
int report_emit(const ir_module *m, report_kind k, const report_opts *o, strbuf *out,
                diag_engine *d, diag_loc where);

#endif
