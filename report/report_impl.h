/* report_impl.h -- helpers shared by the writers of the report library (text and JSON report,
 * trace, SVG): JSON value output, human-readable units, names of timeline operations, the
 * memory limit of a device and the first memory overflow of a recorded run, mean costs per layer
 * kind and a stage's send size. Internal: not installed, not used outside report/. */
#ifndef OCTO_REPORT_IMPL_H
#define OCTO_REPORT_IMPL_H

#include <stdbool.h>

#include "report.h"

/* ---- JSON values ---------------------------------------------------------------------------- */

/* JSON strings: strbuf_json_str (support.h). */
/* Append v as a JSON number: the shortest decimal text that reads back as exactly v (%g style,
 * up to 17 digits); null when v is NaN or infinite. Deterministic. */
void rep_json_num(strbuf *sb, double v);
/* Append a JSON key with its colon: "key": */
void rep_json_key(strbuf *sb, const char *key);

/* ---- Units for people ----------------------------------------------------------------------- */

/* Append a byte count as "512 B", "1.50 KiB", "3.00 MiB", "72.25 GiB", "1.00 TiB" (binary units,
 * two decimals, the largest unit the value reaches); "-" for NaN. */
void rep_bytes(strbuf *sb, double bytes);

/* ---- Timeline -------------------------------------------------------------------------------- */

/* How the reports show a timeline operation kind (a row of opkinds.def). */
typedef struct rep_op_kind_info {
  const char *name;   /* "F", "B", "W", "BW", "allreduce", "optimizer", "reduce-scatter",
                         "all-gather" */
  const char *fill;   /* box colour, "#rrggbb" */
  const char *legend; /* legend text */
  const char *tag;    /* label of an end-of-step operation's box ("" for F, B, W, BW) */
} rep_op_kind_info;

/* The presentation of kind (an ir_op_kind or SIM_OP_* value); a "?" row when out of range. */
const rep_op_kind_info *rep_op_kind(int kind);
/* Name of a timeline operation kind: rep_op_kind(kind)->name. */
const char *rep_op_kind_name(int kind);
/* Whether kind is a copy of activations to or from host memory (SIM_OP_OFFLOAD, SIM_OP_RELOAD):
 * it runs on the device's PCIe link, beside the compute a device's row shows. */
bool rep_op_host_copy(int kind);

/* Name of the method that made m's schedules, "given" when the module does not say (written by
 * hand). */
const char *rep_schedule_method(const ir_module *m);


/* Lower bound of a run: the larger of the work bound and the critical path (seconds). */
double rep_lower_bound(const sim_result *r);

/* Memory limit of device 'dev' (pre: 0 <= dev < m->ndevices): ir_device_mem_limit, the
 * simulator's rule; 0 when none is known. */
double rep_mem_limit(const ir_module *m, int dev);

/* The module-wide memory limit: train.mem_limit when set, else the smallest device memory; NAN
 * when the module has neither. */
double rep_module_mem_limit(const ir_module *m);

/* Where memory first went over a device's limit in a recorded run. */
typedef struct rep_oom {
  int device;  /* the device */
  int op;      /* index in r->ops of the operation after whose allocation (F; a B or BW whose
                  stage rebuilds state at its start) or end (others) the memory was over the
                  limit; -1 when only the end-of-run figures show it */
  double time; /* when (seconds): the start of an F (or of such a B or BW), the end of the
                  others */
  double mem;  /* memory at that point (bytes) */
  double limit; /* the device's limit (bytes) */
} rep_oom;

/* Find the earliest point of r's timeline at which a device's memory exceeds its limit (ties:
 * the lower device, then the earlier operation). Pre: r is a SIM_OK run of m. Returns false when
 * every device fits; when r->fits is false but no recorded point is over (no timeline), *o names
 * r->oom_device at its peak operation with op = -1. */
bool rep_first_oom(const ir_module *m, const sim_result *r, rep_oom *o);

/* The time at which the memory figure of operation e holds: its start for F (memory is
 * allocated when F starts), its end for the others. */
double rep_op_mem_time(const sim_op_event *e);

/* Name of a layer for the reports: its name, or "%I" when it has none. */
const char *rep_layer_name(const ir_module *m, int layer, char buf[24]);

/* Sums of the cost records of layers [first, end) on device 'dev' (its type's records,
 * ir_layer_cost_on; dev < 0: the first device's type): F, B, W times (seconds), activation and
 * parameter bytes. Unset fields count as 0; complete says whether every layer had f, b, w. */
typedef struct rep_cost_sum {
  double f, b, w;     /* seconds */
  double act, param;  /* bytes */
  bool any;           /* some layer of the range has a cost record */
  bool complete;      /* every layer of the range has f, b and w */
} rep_cost_sum;
rep_cost_sum rep_cost_range(const ir_module *m, int first, int end, int dev);
/* The same for stage st as the simulator charges it (its recomputation included,
 * ir_stage_layer_cost). */
rep_cost_sum rep_cost_stage(const ir_module *m, const ir_stage *st);

/* ---- Figures of the text and JSON reports --------------------------------------------------- */

/* The cost record fields summarised per layer kind, indexing rep_kind_costs.field. */
enum { REP_KC_F, REP_KC_B, REP_KC_W, REP_KC_ACT, REP_KC_PARAM, REP_KC_NFIELDS };

/* Mean per-layer costs of one layer kind (over the layers of the kind that have each field). */
typedef struct rep_kind_costs {
  int count; /* layers of the kind */
  struct {
    double sum; /* sum over the layers that have the field */
    int have;   /* how many layers have it */
  } field[REP_KC_NFIELDS]; /* per REP_KC_* field */
} rep_kind_costs;

/* Fill k[IR_KIND_COUNT] from m's layers' costs on device 'dev' (its type; dev < 0: the first
 * device's type); returns whether any layer has a cost record. */
bool rep_collect_kind_costs(const ir_module *m, int dev, rep_kind_costs *k);
/* Mean of field f (REP_KC_*) of kind costs kc, NAN when no layer has it. */
double rep_kind_mean(const rep_kind_costs *kc, int f);

/* Bytes stage s sends to the next stage per microbatch (its last layer's output; the same
 * size of gradient comes back); NAN for the last stage or without a cost record. */
double rep_stage_send_bytes(const ir_module *m, int s);

/* Whether m has a plan that can be simulated: stages and schedules. */
bool rep_has_schedule(const ir_module *m);

/* ---- Device types ---------------------------------------------------------------------------- */

/* The first device of each of m's device types, in device order, into devs[] (room for
 * m->ndevices); returns how many types there are (0 without devices). */
int rep_type_devices(const ir_module *m, int *devs);
/* Whether m's devices are of more than one type (a mixed cluster). */
bool rep_mixed(const ir_module *m);

#endif
