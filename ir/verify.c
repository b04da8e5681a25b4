/* verify.c -- the IR verifier: checks every invariant of a module at the level it has reached
 * (layers, training set-up, devices and links always; costs, stages, placement, schedule and
 * prediction when present) and reports each broken one with the entity and the numbers. Linear
 * in the size of the module (the schedule check uses arrays indexed by stage and microbatch). */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"

/* Largest number of (stage, microbatch) pairs whose schedule is checked op by op. */
#define VF_MAX_PAIRS ((int64_t)1 << 26)

typedef struct vf_ctx {
  const ir_module *m; /* module checked */
  diag_engine *d;     /* where problems go */
  diag_loc where;     /* location of problems whose entity has none */
  int errors;         /* problems reported */
  int first[IR_REC_COUNT]; /* per record kind: index of its first field in ir_fields */
  int count[IR_REC_COUNT]; /* per record kind: number of its fields */
} vf_ctx;

static void vf_error(vf_ctx *v, ir_loc at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Report a problem at entity location 'at' (or at v->where when that is unknown). */
static void vf_error(vf_ctx *v, ir_loc at, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  diag_vreport(v->d, DIAG_ERROR, at.src ? ir_diag_loc(at) : v->where, fmt, ap);
  va_end(ap);
  v->errors++;
}

/* Canonical text of value x of type t, in a caller-provided buffer of 48 bytes. */
static const char *vf_fmt(char *buf, ir_type t, double x) {
  if (!isfinite(x) || (ir_type_is_integral(t) && (x != floor(x) || fabs(x) > 9e18))) {
    snprintf(buf, 48, "%g", x);
    return buf;
  }
  strbuf sb = {0};
  ir_format_value(&sb, t, x);
  snprintf(buf, 48, "%s", strbuf_cstr(&sb));
  strbuf_free(&sb);
  return buf;
}

/* Field index of record r spelled name, or -1 (the tables define every name used here). */
static int vf_field(const vf_ctx *v, ir_record_kind r, const char *name) {
  for (int i = v->first[r]; i < v->first[r] + v->count[r]; i++)
    if (strcmp(ir_fields[i].name, name) == 0) return i;
  return -1;
}

/* Value of field 'name' of record rec (kind r) when set; false when not set. */
static bool vf_get(const vf_ctx *v, const void *rec, ir_record_kind r, const char *name,
                   double *out) {
  int f = vf_field(v, r, name);
  if (f < 0 || !((*ir_record_mask((void *)rec, r) >> (f - v->first[r])) & 1)) return false;
  *out = ir_field_get(rec, f);
  return true;
}

/* ---- Training set-up ---------------------------------------------------------------------- */

/* The training set-up: required degrees and batch sizes, batch arithmetic, ZeRO stage, limit. */
static void vf_train(vf_ctx *v) {
  const ir_module *m = v->m;
  const ir_train *t = &m->train;
  static const char *const required[] = {"pipeline", "tensor", "data", "micro_batch",
                                         "microbatches"};
  /* Free fields wait for the config pass, which runs first. */
  bool planned = m->nstages > 0 || m->schedules;
  for (int i = 0; i < m->nlayers && !planned; i++) planned = m->layers[i].cost.set != 0;
  double x;
  bool batch_free = ir_train_is_free(t, IR_F_TRAIN_micro_batch) ||
                    ir_train_is_free(t, IR_F_TRAIN_data);
  int free_f = ir_train_first_free(m);
  if (free_f >= 0 && planned)
    vf_error(v, m->train_loc, "train: '%s' is free (for the config pass) but the module already "
             "has costs or a plan", ir_fields[free_f].name);
  for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
    int f = vf_field(v, IR_REC_TRAIN, required[i]);
    bool is_free = ir_train_is_free(t, f) || (f == IR_F_TRAIN_microbatches && batch_free);
    if (!vf_get(v, t, IR_REC_TRAIN, required[i], &x)) {
      if (!is_free) vf_error(v, m->train_loc, "train: '%s' is not set", required[i]);
    } else if (!(x >= 1))
      vf_error(v, m->train_loc, "train: %s = %g must be at least 1", required[i], x);
  }
  double gb, mbs, mb, dp;
  if (vf_get(v, t, IR_REC_TRAIN, "global_batch", &gb) &&
      vf_get(v, t, IR_REC_TRAIN, "microbatches", &mbs) &&
      vf_get(v, t, IR_REC_TRAIN, "micro_batch", &mb) && vf_get(v, t, IR_REC_TRAIN, "data", &dp) &&
      gb != mbs * mb * dp)
    vf_error(v, m->train_loc,
             "train: global_batch = %g does not equal microbatches x micro_batch x data = "
             "%g x %g x %g = %g", gb, mbs, mb, dp, mbs * mb * dp);
  double zero;
  if (vf_get(v, t, IR_REC_TRAIN, "zero", &zero) && zero != 0 && zero != 1)
    vf_error(v, m->train_loc, "train: zero = %g must be 0 or 1", zero);
  double lim;
  char b1[48];
  if (vf_get(v, t, IR_REC_TRAIN, "mem_limit", &lim) && !(lim > 0 && isfinite(lim)))
    vf_error(v, m->train_loc, "train: mem_limit = %s must be positive",
             vf_fmt(b1, IR_T_BYTES, lim));
}

/* The bounds of ir/limits.def on the train and cluster records, and the cluster's GPU count:
 * checked before any pass sizes its work by them. */
static void vf_limits(vf_ctx *v) {
  const ir_module *m = v->m;
  int errors = v->errors;
  static const ir_record_kind recs[] = {IR_REC_TRAIN, IR_REC_CLUSTER};
  for (size_t r = 0; r < sizeof recs / sizeof recs[0]; r++) {
    const void *rec = recs[r] == IR_REC_TRAIN ? (const void *)&m->train : &m->cluster;
    for (int f = v->first[recs[r]]; f < v->first[recs[r]] + v->count[recs[r]]; f++) {
      const ir_limit_info *lim = ir_field_limit(f);
      double x;
      if (lim && vf_get(v, rec, recs[r], ir_fields[f].name, &x) && x > lim->max)
        vf_error(v, recs[r] == IR_REC_TRAIN ? m->train_loc : m->loc,
                 "%s: %s = %.0f exceeds the limit of %.0f (%s)", ir_record_names[recs[r]],
                 ir_fields[f].name, x, lim->max, lim->why);
    }
  }
  double nodes, gpn;
  if (v->errors == errors && vf_get(v, &m->cluster, IR_REC_CLUSTER, "nodes", &nodes) &&
      vf_get(v, &m->cluster, IR_REC_CLUSTER, "gpus_per_node", &gpn) &&
      nodes * gpn > IR_MAX_GPUS)
    vf_error(v, m->loc, "cluster: %.0f x %.0f = %.0f GPUs, more than the limit of %d", nodes, gpn,
             nodes * gpn, IR_MAX_GPUS);
}

/* ---- Devices and links -------------------------------------------------------------------- */

/* Devices: one per pipeline rank, positive hardware figures, node in the cluster, enough memory
 * for train.mem_limit. */
static void vf_devices(vf_ctx *v) {
  const ir_module *m = v->m;
  char b1[48], b2[48];
  double pipeline;
  if (m->ndevices > 0 && vf_get(v, &m->train, IR_REC_TRAIN, "pipeline", &pipeline) &&
      pipeline != m->ndevices)
    vf_error(v, m->train_loc, "the module has %d device%s but train pipeline = %g", m->ndevices,
             m->ndevices == 1 ? "" : "s", pipeline);
  double nodes = 0, lim = 0;
  bool has_nodes = m->cluster_name && vf_get(v, &m->cluster, IR_REC_CLUSTER, "nodes", &nodes);
  bool has_lim = vf_get(v, &m->train, IR_REC_TRAIN, "mem_limit", &lim);
  static const char *const positive[] = {"peak", "mem", "hbm"};
  for (int i = 0; i < m->ndevices; i++) {
    const ir_device *dv = &m->devices[i];
    for (size_t k = 0; k < sizeof positive / sizeof positive[0]; k++) {
      int f = vf_field(v, IR_REC_DEVICE, positive[k]);
      double x;
      if (!vf_get(v, &dv->rec, IR_REC_DEVICE, positive[k], &x))
        vf_error(v, dv->loc, "device $d%d: '%s' is not set", i, positive[k]);
      else if (!(x > 0 && isfinite(x)))
        vf_error(v, dv->loc, "device $d%d: %s = %s must be positive", i, positive[k],
                 vf_fmt(b1, ir_fields[f].type, x));
    }
    double eff;
    if (!vf_get(v, &dv->rec, IR_REC_DEVICE, "efficiency", &eff))
      vf_error(v, dv->loc, "device $d%d: 'efficiency' is not set", i);
    else if (!(eff > 0 && eff <= 1))
      vf_error(v, dv->loc, "device $d%d: efficiency = %g must be in (0, 1]", i, eff);
    double node;
    if (has_nodes && vf_get(v, &dv->rec, IR_REC_DEVICE, "node", &node) && node >= nodes)
      vf_error(v, dv->loc, "device $d%d: node %g is outside cluster @%s (nodes = %g)", i, node,
               m->cluster_name, nodes);
    double mem;
    if (has_lim && vf_get(v, &dv->rec, IR_REC_DEVICE, "mem", &mem) && lim > mem)
      vf_error(v, dv->loc, "train mem_limit = %s exceeds the memory of device $d%d (%s)",
               vf_fmt(b1, IR_T_BYTES, lim), i, vf_fmt(b2, IR_T_BYTES, mem));
  }
}

/* Check one link record named 'what'. */
static void vf_link_rec(vf_ctx *v, const ir_link_rec *r, const char *what) {
  char b1[48];
  double bw, lat;
  if (!vf_get(v, r, IR_REC_LINK, "bw", &bw))
    vf_error(v, v->m->loc, "%s: 'bw' is not set", what);
  else if (!(bw > 0 && isfinite(bw)))
    vf_error(v, v->m->loc, "%s: bw = %s must be positive", what, vf_fmt(b1, IR_T_BW, bw));
  if (vf_get(v, r, IR_REC_LINK, "lat", &lat) && !(lat >= 0 && isfinite(lat)))
    vf_error(v, v->m->loc, "%s: lat = %s must be finite and non-negative", what,
             vf_fmt(b1, IR_T_TIME, lat));
}

/* Links: intra/inter when given, and explicit device-pair links between distinct devices. */
static void vf_links(vf_ctx *v) {
  const ir_module *m = v->m;
  if (m->intra.set) vf_link_rec(v, &m->intra, "link intra");
  if (m->inter.set) vf_link_rec(v, &m->inter, "link inter");
  for (int i = 0; i < m->nlinks; i++) {
    const ir_link *l = &m->links[i];
    char what[64];
    snprintf(what, sizeof what, "link $d%d -> $d%d", l->from, l->to);
    if (l->from < 0 || l->from >= m->ndevices || l->to < 0 || l->to >= m->ndevices) {
      vf_error(v, m->loc, "%s names a device that does not exist (the module has %d devices)",
               what, m->ndevices);
      continue;
    }
    if (l->from == l->to) vf_error(v, m->loc, "%s connects a device to itself", what);
    vf_link_rec(v, &l->rec, what);
  }
}

/* ---- Layers ------------------------------------------------------------------------------- */

/* Layers: at least one; each passes ir_layer_check; cost records, when present, are complete
 * (f, b, w) and non-negative. */
static void vf_layers(vf_ctx *v) {
  const ir_module *m = v->m;
  if (m->nlayers == 0) vf_error(v, m->loc, "module @%s has no layers", m->name);
  static const char *const times[] = {"f", "b", "w"};
  static const char *const sizes[] = {"act", "act_w", "out", "param", "grad"};
  char b1[48];
  for (int i = 0; i < m->nlayers; i++) {
    const ir_layer *l = &m->layers[i];
    if ((unsigned)l->kind >= IR_KIND_COUNT) {
      vf_error(v, l->loc, "layer %%%d \"%s\" has an invalid kind %d", i, l->name, (int)l->kind);
      continue;
    }
    v->errors += ir_layer_check(l, v->d, l->loc.src ? ir_diag_loc(l->loc) : v->where);
    v->errors += ir_layer_check_tie(m, i, v->d, l->loc.src ? ir_diag_loc(l->loc) : v->where);
    /* Records for other device types: of a type some device has, other than the first's. */
    for (int k = 0; k < l->ntcosts; k++) {
      const char *type = l->tcosts[k].type;
      bool known = false;
      for (int d = 1; d < m->ndevices; d++)
        known |= strcmp(m->devices[d].type, type) == 0;
      if (m->ndevices > 0 && strcmp(m->devices[0].type, type) == 0)
        vf_error(v, l->loc, "layer %%%d \"%s\": cost \"%s\" is the first device's type, whose "
                 "costs are the plain cost record", i, l->name, type);
      else if (!known)
        vf_error(v, l->loc, "layer %%%d \"%s\": cost \"%s\" names a device type no device has",
                 i, l->name, type);
    }
    for (int k = -1; k < l->ntcosts; k++) {
      const ir_cost *c = k < 0 ? &l->cost : &l->tcosts[k].cost;
      if (!c->set) continue;
      for (size_t j = 0; j < sizeof times / sizeof times[0]; j++) {
        double x;
        if (!vf_get(v, c, IR_REC_COST, times[j], &x))
          vf_error(v, l->loc, "layer %%%d \"%s\": cost '%s' is not set", i, l->name, times[j]);
        else if (!(x >= 0 && isfinite(x)))
          vf_error(v, l->loc, "layer %%%d \"%s\": cost %s = %s must be finite and non-negative",
                   i, l->name, times[j], vf_fmt(b1, IR_T_TIME, x));
      }
      for (size_t j = 0; j < sizeof sizes / sizeof sizes[0]; j++) {
        double x;
        if (vf_get(v, c, IR_REC_COST, sizes[j], &x) && !(x >= 0 && isfinite(x)))
          vf_error(v, l->loc, "layer %%%d \"%s\": cost %s = %s must be finite and non-negative",
                   i, l->name, sizes[j], vf_fmt(b1, IR_T_BYTES, x));
      }
    }
  }
}

/* ---- Stages and placement ----------------------------------------------------------------- */

/* Check that the stages cover the layers exactly once, contiguously and in order. */
static void vf_stages(vf_ctx *v) {
  const ir_module *m = v->m;
  int n = m->nlayers, cursor = 0, holder = -1; /* layers [0, cursor) covered; last by 'holder' */
  for (int i = 0; i < m->nstages; i++) {
    const ir_stage *s = &m->stages[i];
    if (s->first < 0 || s->end > n) {
      vf_error(v, s->loc, "stage @s%d = [%%%d, %%%d) is outside the module's layers [%%0, %%%d)",
               i, s->first, s->end, n);
      continue;
    }
    if (s->first >= s->end) {
      vf_error(v, s->loc, "stage @s%d = [%%%d, %%%d) is empty", i, s->first, s->end);
      continue;
    }
    if (s->first > cursor) {
      if (holder < 0)
        vf_error(v, s->loc, "layers [%%%d, %%%d) before the first stage @s%d are in no stage",
                 cursor, s->first, i);
      else
        vf_error(v, s->loc, "layers [%%%d, %%%d) between @s%d and @s%d are in no stage", cursor,
                 s->first, holder, i);
    } else if (s->first < cursor) {
      const ir_stage *h = &m->stages[holder];
      if (s->end > h->first)
        vf_error(v, s->loc, "stage @s%d = [%%%d, %%%d) overlaps @s%d = [%%%d, %%%d)", i, s->first,
                 s->end, holder, h->first, h->end);
      else
        vf_error(v, s->loc, "stage @s%d = [%%%d, %%%d) is out of order: it comes after @s%d = "
                 "[%%%d, %%%d) but covers earlier layers", i, s->first, s->end, holder, h->first,
                 h->end);
    }
    if (s->end > cursor) {
      cursor = s->end;
      holder = i;
    }
  }
  if (m->nstages > 0 && cursor < n)
    vf_error(v, m->stages[m->nstages - 1].loc,
             "layers [%%%d, %%%d) after the last stage @s%d are in no stage", cursor, n,
             m->nstages - 1);
}

/* Check the stages' recompute attributes: a stage recomputes only 'none' or 'full', and 'full'
 * only when the module's recompute is none or selective (the cost records then hold the costs
 * without recomputation, or with selective's and its core, which ir_stage_layer_cost adjusts;
 * the module's full is in every record already); recompute_layers = N only with 'full', and
 * N at most the stage's recomputable layers. */
static void vf_stage_recompute(vf_ctx *v) {
  const ir_module *m = v->m;
  int global = (int)ir_field_value(&m->train, IR_F_TRAIN_recompute);
  for (int i = 0; i < m->nstages; i++) {
    const ir_stage *s = &m->stages[i];
    if (s->recompute == IR_RECOMPUTE_SELECTIVE)
      vf_error(v, s->loc, "stage @s%d: recompute = selective is not a per-stage choice (with "
               "flash attention it saves no memory); use none or full", i);
    else if (s->recompute == IR_RECOMPUTE_FULL && global == IR_RECOMPUTE_FULL)
      vf_error(v, s->loc, "stage @s%d: recompute = full needs the module's recompute to be none "
               "or selective (it is full, already in every layer's costs)", i);
    if (s->recompute_layers == 0) continue;
    if (s->first < 0 || s->first > s->end || s->end > m->nlayers) continue; /* reported */
    int n = ir_stage_recomputable(m, s);
    if (s->recompute != IR_RECOMPUTE_FULL)
      vf_error(v, s->loc, "stage @s%d: recompute_layers = %d needs recompute = full (it is %s)", i,
               s->recompute_layers, ir_enum_name(IR_T_RECOMPUTE, (int)s->recompute));
    else if (s->recompute_layers > n)
      vf_error(v, s->loc, "stage @s%d: recompute_layers = %d, but the stage has %d recomputable "
               "layer%s", i, s->recompute_layers, n, n == 1 ? "" : "s");
  }
}

/* Check the stages' offload attributes: a stage offloads only from a device whose link to host
 * memory is known (its 'pcie' bandwidth); an unplaced stage is the placement check's. */
static void vf_stage_offload(vf_ctx *v) {
  const ir_module *m = v->m;
  for (int i = 0; i < m->nstages; i++) {
    const ir_stage *s = &m->stages[i];
    int dv = s->device;
    if (!s->offload || dv < 0 || dv >= m->ndevices) continue;
    const ir_device_rec *r = &m->devices[dv].rec;
    if (!ir_field_is_set(r, IR_F_DEVICE_pcie) || !(r->pcie > 0))
      vf_error(v, s->loc, "stage @s%d: offload = true needs the bandwidth of $d%d's link to host "
               "memory: give device type \"%s\" a 'pcie' field", i, dv, m->devices[dv].type);
  }
}

/* Check the placement: when any stage is placed or the module is scheduled, every stage is
 * placed, on an existing device. */
static void vf_placement(vf_ctx *v) {
  const ir_module *m = v->m;
  bool any = false;
  for (int i = 0; i < m->nstages; i++)
    if (m->stages[i].device >= 0) any = true;
  for (int i = 0; i < m->nstages; i++) {
    const ir_stage *s = &m->stages[i];
    if (s->device >= m->ndevices) {
      vf_error(v, s->loc, "stage @s%d is placed on $d%d, which does not exist (the module has "
               "%d device%s)", i, s->device, m->ndevices, m->ndevices == 1 ? "" : "s");
    } else if (s->device < 0 && m->schedules) {
      vf_error(v, s->loc, "stage @s%d is not placed but the module has a schedule", i);
    } else if (s->device < 0 && any) {
      vf_error(v, s->loc, "stage @s%d is not placed (other stages are)", i);
    }
  }
}

/* ---- Schedule ----------------------------------------------------------------------------- */

/* Per (stage, microbatch): how many of each op the schedule has, and where the first of each is
 * in its stage's device's schedule (-1: none there). */
typedef struct vf_pair {
  int count[IR_OP_COUNT]; /* ops of each kind, on any device */
  int pos[IR_OP_COUNT];   /* index of the first one in the stage's device's schedule, or -1 */
} vf_pair;

/* Whether stage s is placed on an existing device. */
static bool vf_placed(const ir_module *m, int s) {
  return m->stages[s].device >= 0 && m->stages[s].device < m->ndevices;
}

/* Check the schedules: each op's stage, microbatch and device; then, per (stage, microbatch) of
 * the placed stages, exactly one F and one B and one W, or one F and one BW, with F before B
 * before W (F before BW) on the stage's device. Pre: m->schedules != NULL. */
static void vf_schedules(vf_ctx *v) {
  const ir_module *m = v->m;
  double mbs_d = 0;
  bool have_mbs = vf_get(v, &m->train, IR_REC_TRAIN, "microbatches", &mbs_d) && mbs_d >= 1 &&
                  mbs_d <= 9007199254740992.0;
  int64_t mbs = have_mbs ? (int64_t)mbs_d : 0;
  bool too_many = have_mbs && (double)m->nstages * mbs_d > (double)VF_MAX_PAIRS;
  bool complete_check = have_mbs && m->nstages > 0 && !too_many;
  int64_t npairs = complete_check ? (int64_t)m->nstages * mbs : 0;
  if (too_many && m->nstages > 0)
    vf_error(v, m->train_loc, "the schedule cannot be checked: %d stages x %lld microbatches is "
             "too many", m->nstages, (long long)mbs);
  vf_pair *pairs = NULL;
  if (complete_check) {
    pairs = xmalloc((size_t)npairs * sizeof *pairs);
    for (int64_t i = 0; i < npairs; i++) {
      memset(pairs[i].count, 0, sizeof pairs[i].count);
      for (int k = 0; k < IR_OP_COUNT; k++) pairs[i].pos[k] = -1;
    }
  }
  for (int dv = 0; dv < m->ndevices; dv++) {
    const ir_schedule *sc = &m->schedules[dv];
    for (int j = 0; j < sc->nops; j++) {
      const ir_op *op = &sc->ops[j];
      if ((unsigned)op->kind >= IR_OP_COUNT) {
        vf_error(v, sc->loc, "operation %d of $d%d has an invalid kind %d", j, dv, (int)op->kind);
        continue;
      }
      const char *on = ir_op_names[op->kind];
      if (op->stage < 0 || op->stage >= m->nstages) {
        vf_error(v, sc->loc, "%s @s%d %d on $d%d names a stage that does not exist (the module "
                 "has %d stage%s)", on, op->stage, op->mb, dv, m->nstages,
                 m->nstages == 1 ? "" : "s");
        continue;
      }
      if (op->mb < 0 || (have_mbs && op->mb >= mbs)) {
        vf_error(v, sc->loc, "%s @s%d %d on $d%d: microbatch %d is out of range (microbatches = "
                 "%lld)", on, op->stage, op->mb, dv, op->mb, (long long)mbs);
        continue;
      }
      /* An unplaced stage was reported by the placement check, not once per op. */
      if (!vf_placed(m, op->stage)) continue;
      int sdev = m->stages[op->stage].device;
      bool here = sdev == dv;
      if (!here)
        vf_error(v, sc->loc, "%s @s%d %d is scheduled on $d%d but @s%d is placed on $d%d", on,
                 op->stage, op->mb, dv, op->stage, sdev);
      if (pairs) {
        vf_pair *pr = &pairs[(int64_t)op->stage * mbs + op->mb];
        pr->count[op->kind]++;
        if (here && pr->pos[op->kind] < 0) pr->pos[op->kind] = j;
      }
    }
  }
  if (!pairs) return;
  for (int s = 0; s < m->nstages; s++) {
    if (!vf_placed(m, s)) continue;
    ir_loc at = m->schedules[m->stages[s].device].loc;
    char dn[24];
    snprintf(dn, sizeof dn, "$d%d", m->stages[s].device);
    for (int64_t mb = 0; mb < mbs; mb++) {
      const vf_pair *pr = &pairs[(int64_t)s * mbs + mb];
      const int *c = pr->count;
      const int *pos = pr->pos;
      long long b = (long long)mb;
      if (c[IR_OP_F] == 0)
        vf_error(v, at, "F @s%d %lld is missing from the schedule of %s", s, b, dn);
      else if (c[IR_OP_F] > 1)
        vf_error(v, at, "F @s%d %lld is scheduled %d times", s, b, c[IR_OP_F]);
      bool split = c[IR_OP_B] > 0 || c[IR_OP_W] > 0;
      if (split && c[IR_OP_BW] > 0) {
        vf_error(v, at, "@s%d microbatch %lld has both a fused BW and a split B/W backward", s, b);
        continue;
      }
      if (c[IR_OP_BW] > 0) {
        if (c[IR_OP_BW] > 1)
          vf_error(v, at, "BW @s%d %lld is scheduled %d times", s, b, c[IR_OP_BW]);
        if (pos[IR_OP_F] >= 0 && pos[IR_OP_BW] >= 0 && pos[IR_OP_BW] < pos[IR_OP_F])
          vf_error(v, at, "BW @s%d %lld comes before F @s%d %lld on %s", s, b, s, b, dn);
        continue;
      }
      if (c[IR_OP_B] == 0 && c[IR_OP_W] == 0) { /* no backward at all: one error */
        vf_error(v, at, "B @s%d %lld (or a fused BW) is missing from the schedule of %s", s, b,
                 dn);
        continue;
      }
      if (c[IR_OP_B] == 0)
        vf_error(v, at, "B @s%d %lld is missing from the schedule of %s", s, b, dn);
      else if (c[IR_OP_B] > 1)
        vf_error(v, at, "B @s%d %lld is scheduled %d times", s, b, c[IR_OP_B]);
      if (c[IR_OP_W] == 0)
        vf_error(v, at, "W @s%d %lld is missing from the schedule of %s", s, b, dn);
      else if (c[IR_OP_W] > 1)
        vf_error(v, at, "W @s%d %lld is scheduled %d times", s, b, c[IR_OP_W]);
      if (pos[IR_OP_F] >= 0 && pos[IR_OP_B] >= 0 && pos[IR_OP_B] < pos[IR_OP_F])
        vf_error(v, at, "B @s%d %lld comes before F @s%d %lld on %s", s, b, s, b, dn);
      if (pos[IR_OP_B] >= 0 && pos[IR_OP_W] >= 0 && pos[IR_OP_W] < pos[IR_OP_B])
        vf_error(v, at, "W @s%d %lld comes before B @s%d %lld on %s", s, b, s, b, dn);
      else if (pos[IR_OP_B] < 0 && pos[IR_OP_F] >= 0 && pos[IR_OP_W] >= 0 &&
               pos[IR_OP_W] < pos[IR_OP_F])
        vf_error(v, at, "W @s%d %lld comes before F @s%d %lld on %s", s, b, s, b, dn);
    }
  }
  free(pairs);
}

/* ---- Prediction --------------------------------------------------------------------------- */

/* Predictions: ranges of the whole-plan figures, the fits verdict, and each device's predicted
 * peak memory against train.mem_limit. */
static void vf_predict(vf_ctx *v) {
  const ir_module *m = v->m;
  char b1[48], b2[48];
  double x;
  if (m->predict.set) {
    if (vf_get(v, &m->predict, IR_REC_PREDICT, "makespan", &x) && !(x >= 0 && isfinite(x)))
      vf_error(v, m->loc, "predict: makespan = %s must be finite and non-negative",
               vf_fmt(b1, IR_T_TIME, x));
    if (vf_get(v, &m->predict, IR_REC_PREDICT, "bubble", &x) && !(x >= 0 && x <= 1))
      vf_error(v, m->loc, "predict: bubble = %g is outside [0, 1]", x);
    if (vf_get(v, &m->predict, IR_REC_PREDICT, "peak_mem", &x) && !(x >= 0 && isfinite(x)))
      vf_error(v, m->loc, "predict: peak_mem = %s must be finite and non-negative",
               vf_fmt(b1, IR_T_BYTES, x));
  }
  /* A plan over its memory limit is a valid plan that does not fit (the simulate pass warns);
   * a prediction that says it fits while a device is over the limit contradicts itself. */
  bool fits = vf_get(v, &m->predict, IR_REC_PREDICT, "fits", &x) && x != 0;
  double lim = 0;
  bool has_lim = vf_get(v, &m->train, IR_REC_TRAIN, "mem_limit", &lim);
  for (int i = 0; i < m->ndevices; i++) {
    const ir_devpredict *dp = &m->devices[i].predict;
    if (!dp->set) continue;
    ir_loc at = m->devices[i].loc;
    if (vf_get(v, dp, IR_REC_DEVPREDICT, "busy", &x) && !(x >= 0 && isfinite(x)))
      vf_error(v, at, "predict $d%d: busy = %s must be finite and non-negative", i,
               vf_fmt(b1, IR_T_TIME, x));
    if (vf_get(v, dp, IR_REC_DEVPREDICT, "idle", &x) && !(x >= 0 && isfinite(x)))
      vf_error(v, at, "predict $d%d: idle = %s must be finite and non-negative", i,
               vf_fmt(b1, IR_T_TIME, x));
    if (vf_get(v, dp, IR_REC_DEVPREDICT, "peak_mem", &x)) {
      if (!(x >= 0 && isfinite(x)))
        vf_error(v, at, "predict $d%d: peak_mem = %s must be finite and non-negative", i,
                 vf_fmt(b1, IR_T_BYTES, x));
      else if (fits && has_lim && x > lim)
        vf_error(v, at, "predict says the plan fits, but the peak memory of $d%d, %s, exceeds "
                 "the memory limit %s", i, vf_fmt(b1, IR_T_BYTES, x), vf_fmt(b2, IR_T_BYTES, lim));
    }
  }
}

int ir_verify(const ir_module *m, diag_engine *d, diag_loc where) {
  vf_ctx v = {m, d, where, 0, {0}, {0}};
  for (int r = 0; r < IR_REC_COUNT; r++)
    ir_record_fields((ir_record_kind)r, &v.first[r], &v.count[r]);
  vf_layers(&v);
  vf_train(&v);
  vf_limits(&v);
  vf_devices(&v);
  vf_links(&v);
  vf_stages(&v);
  if (m->nstages > 0) vf_placement(&v);
  if (m->nstages > 0) vf_stage_recompute(&v);
  if (m->nstages > 0) vf_stage_offload(&v);
  if (m->schedules) vf_schedules(&v);
  if (m->schedule_method && !m->schedules)
    vf_error(&v, m->loc, "'schedule method \"%s\"' names the method of schedules the module does "
             "not have", m->schedule_method);
  vf_predict(&v);
  return v.errors;
}
