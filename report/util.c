/* util.c -- helpers shared by the report writers: JSON values, human-readable sizes, names of
 * timeline operations, memory limits, the first memory overflow of a run, cost sums over a
 * layer range and mean costs per layer kind (see report_impl.h). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "report_impl.h"

void rep_json_num(strbuf *sb, double v) {
  if (!isfinite(v)) {
    strbuf_puts(sb, "null");
    return;
  }
  char buf[48];
  fmt_shortest_scaled(buf, v, 1.0);
  strbuf_puts(sb, buf);
}

void rep_json_key(strbuf *sb, const char *key) {
  strbuf_json_str(sb, key);
  strbuf_puts(sb, ": ");
}

void rep_bytes(strbuf *sb, double bytes) {
  static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  if (isnan(bytes)) {
    strbuf_puts(sb, "-");
    return;
  }
  double a = fabs(bytes);
  if (a < 1024) {
    strbuf_printf(sb, "%.0f B", bytes);
    return;
  }
  int u = 0;
  double v = bytes / 1024;
  while (u < 4 && fabs(v) >= 1024) {
    v /= 1024;
    u++;
  }
  strbuf_printf(sb, "%.2f %s", v, units[u]);
}

/* The presentation of every timeline operation kind, indexed by kind (opkinds.def). */
static const rep_op_kind_info op_kinds[] = {
#define REPORT_OP_KIND(KIND, NAME, FILL, LEGEND, TAG) [KIND] = {NAME, FILL, LEGEND, TAG},
#include "opkinds.def"
#undef REPORT_OP_KIND
};
_Static_assert(sizeof op_kinds / sizeof op_kinds[0] == SIM_OP_END,
               "opkinds.def has one row per timeline operation kind");

const rep_op_kind_info *rep_op_kind(int kind) {
  static const rep_op_kind_info unknown = {"?", "#000", "?", "?"};
  return kind >= 0 && kind < SIM_OP_END ? &op_kinds[kind] : &unknown;
}

const char *rep_op_kind_name(int kind) { return rep_op_kind(kind)->name; }

bool rep_op_host_copy(int kind) { return kind == SIM_OP_OFFLOAD || kind == SIM_OP_RELOAD; }

double rep_lower_bound(const sim_result *r) {
  return r->lb_work > r->lb_critical ? r->lb_work : r->lb_critical;
}

double rep_mem_limit(const ir_module *m, int dev) {
  double lim = ir_device_mem_limit(m, dev);
  return isfinite(lim) ? lim : 0;
}

double rep_module_mem_limit(const ir_module *m) {
  if (ir_field_is_set(&m->train, IR_F_TRAIN_mem_limit) && m->train.mem_limit > 0)
    return m->train.mem_limit;
  double lim = NAN;
  for (int i = 0; i < m->ndevices; i++)
    if (ir_field_is_set(&m->devices[i].rec, IR_F_DEVICE_mem) &&
        (isnan(lim) || m->devices[i].rec.mem < lim))
      lim = m->devices[i].rec.mem;
  return lim;
}

double rep_op_mem_time(const sim_op_event *e) {
  return e->kind == IR_OP_F || (int)e->kind == SIM_OP_RELOAD ? e->start : e->end;
}

bool rep_first_oom(const ir_module *m, const sim_result *r, rep_oom *o) {
  bool found = false;
  for (int i = 0; i < r->nops; i++) {
    const sim_op_event *e = &r->ops[i];
    if (e->device < 0 || e->device >= m->ndevices) continue;
    double lim = rep_mem_limit(m, e->device);
    if (!(lim > 0)) continue;
    /* the figure after its end, and a B's (BW's) at its start (a recomputing stage's rebuilt
     * state grows there) */
    for (int at_start = 0; at_start < 2; at_start++) {
      bool b = e->kind == IR_OP_B || e->kind == IR_OP_BW;
      if (at_start && !b) continue;
      double mem = at_start ? e->mem_start : e->mem, t = at_start ? e->start : rep_op_mem_time(e);
      if (!(mem > lim)) continue;
      if (!found || t < o->time || (t == o->time && e->device < o->device)) {
        o->device = e->device;
        o->op = i;
        o->time = t;
        o->mem = mem;
        o->limit = lim;
        found = true;
      }
    }
  }
  if (found || r->fits) return found;
  int dv = r->oom_device;
  if (dv < 0 || dv >= r->ndevices || dv >= m->ndevices) return false;
  o->device = dv;
  o->op = -1;
  o->time = r->dev[dv].peak_time;
  o->mem = r->dev[dv].peak_mem;
  o->limit = rep_mem_limit(m, dv);
  return true;
}

const char *rep_layer_name(const ir_module *m, int layer, char buf[24]) {
  if (layer >= 0 && layer < m->nlayers && m->layers[layer].name && m->layers[layer].name[0])
    return m->layers[layer].name;
  snprintf(buf, 24, "%%%d", layer);
  return buf;
}

rep_cost_sum rep_cost_range(const ir_module *m, int first, int end, int dev) {
  ir_stage whole = {.first = first, .end = end, .device = dev, .recompute = IR_RECOMPUTE_NONE};
  return rep_cost_stage(m, &whole);
}

rep_cost_sum rep_cost_stage(const ir_module *m, const ir_stage *st) {
  rep_cost_sum s = {0, 0, 0, 0, 0, false, true};
  for (int i = st->first; i < st->end && i < m->nlayers; i++) {
    ir_cost cs = ir_stage_layer_cost(m, st, i);
    const ir_cost *c = &cs;
    if (c->set) s.any = true;
    bool has_f = ir_field_is_set(c, IR_F_COST_f), has_b = ir_field_is_set(c, IR_F_COST_b),
         has_w = ir_field_is_set(c, IR_F_COST_w);
    if (!has_f || !has_b || !has_w) s.complete = false;
    if (has_f) s.f += c->f;
    if (has_b) s.b += c->b;
    if (has_w) s.w += c->w;
    if (ir_field_is_set(c, IR_F_COST_act)) s.act += c->act;
    if (ir_field_is_set(c, IR_F_COST_param)) s.param += c->param;
  }
  return s;
}

/* The cost record fields of REP_KC_F .. REP_KC_PARAM. */
static const int kind_cost_fields[REP_KC_NFIELDS] = {IR_F_COST_f, IR_F_COST_b, IR_F_COST_w,
                                                     IR_F_COST_act, IR_F_COST_param};

bool rep_collect_kind_costs(const ir_module *m, int dev, rep_kind_costs *k) {
  bool any = false;
  memset(k, 0, sizeof *k * IR_KIND_COUNT);
  for (int i = 0; i < m->nlayers; i++) {
    const ir_layer *l = &m->layers[i];
    const ir_cost *c = ir_layer_cost_on(m, l, dev);
    rep_kind_costs *kc = &k[l->kind];
    kc->count++;
    if (c->set) any = true;
    for (int f = 0; f < REP_KC_NFIELDS; f++)
      if (ir_field_is_set(c, kind_cost_fields[f])) {
        kc->field[f].sum += ir_field_get(c, kind_cost_fields[f]);
        kc->field[f].have++;
      }
  }
  return any;
}

double rep_kind_mean(const rep_kind_costs *kc, int f) {
  return kc->field[f].have ? kc->field[f].sum / kc->field[f].have : NAN;
}

double rep_stage_send_bytes(const ir_module *m, int s) {
  if (s + 1 >= m->nstages) return NAN;
  const ir_cost *c = &m->layers[m->stages[s].end - 1].cost;
  return ir_field_is_set(c, IR_F_COST_out) ? c->out : NAN;
}

bool rep_has_schedule(const ir_module *m) { return m->schedules && m->nstages > 0; }

int rep_type_devices(const ir_module *m, int *devs) {
  int n = 0;
  for (int d = 0; d < m->ndevices; d++) {
    bool seen = false;
    for (int k = 0; k < n && !seen; k++)
      seen = strcmp(m->devices[devs[k]].type, m->devices[d].type) == 0;
    if (!seen) devs[n++] = d;
  }
  return n;
}

bool rep_mixed(const ir_module *m) {
  for (int d = 1; d < m->ndevices; d++)
    if (strcmp(m->devices[d].type, m->devices[0].type) != 0) return true;
  return false;
}

const char *rep_schedule_method(const ir_module *m) {
  return m->schedule_method ? m->schedule_method : "given";
}
