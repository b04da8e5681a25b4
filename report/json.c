/* json.c -- the plan report as one JSON object (report_json, schema in docs/report.md): the
 * same figures as the text report, with the classic plans, the tuner's and the configuration
 * search's results when they were run; keys in a fixed order, numbers shortest round-trip. */
#include <math.h>
#include <stdlib.h>

#include "cost.h"
#include "report_impl.h"

/* Start a top-level key: separator, newline, indentation. */
static void top_key(strbuf *sb, const char *key, bool *first) {
  strbuf_puts(sb, *first ? "\n  " : ",\n  ");
  *first = false;
  rep_json_key(sb, key);
}

/* Append a member "key": value inside a one-line object; *first tracks the separator. */
static void inner_key(strbuf *sb, const char *key, bool *first) {
  if (!*first) strbuf_puts(sb, ", ");
  *first = false;
  rep_json_key(sb, key);
}

/* Append seconds as milliseconds (JSON number). */
static void json_ms(strbuf *sb, double seconds) { rep_json_num(sb, seconds * 1e3); }

/* Append a member "key": v (a number; null when not finite) inside a one-line object. */
static void member_num(strbuf *sb, const char *key, double v, bool *first) {
  inner_key(sb, key, first);
  rep_json_num(sb, v);
}

/* Append a member "key": seconds as milliseconds inside a one-line object. */
static void member_ms(strbuf *sb, const char *key, double seconds, bool *first) {
  inner_key(sb, key, first);
  json_ms(sb, seconds);
}

/* The "baselines" list: one object per classic plan. */
static void json_baselines(const pass_baseline *b, int nb, strbuf *out) {
  strbuf_putc(out, '[');
  for (int i = 0; i < nb; i++) {
    strbuf_puts(out, i ? ",\n    {" : "\n    {");
    bool f1 = true;
    inner_key(out, "name", &f1);
    strbuf_json_str(out, b[i].name);
    inner_key(out, "pipeline", &f1);
    strbuf_json_str(out, b[i].pipeline);
    inner_key(out, "ok", &f1);
    strbuf_puts(out, b[i].ok ? "true" : "false");
    if (!b[i].ok) {
      inner_key(out, "why", &f1);
      strbuf_json_str(out, b[i].why);
      strbuf_putc(out, '}');
      continue;
    }
    member_ms(out, "makespan_ms", b[i].makespan, &f1);
    member_num(out, "bubble_ratio", b[i].bubble, &f1);
    member_ms(out, "lower_bound_ms", b[i].bound, &f1);
    inner_key(out, "peak_mem_bytes", &f1);
    strbuf_putc(out, '[');
    for (int d = 0; d < b[i].ndevices; d++) {
      if (d) strbuf_puts(out, ", ");
      rep_json_num(out, b[i].peak_mem[d]);
    }
    strbuf_putc(out, ']');
    inner_key(out, "oom", &f1);
    strbuf_puts(out, b[i].fits ? "false" : "true");
    strbuf_putc(out, '}');
  }
  strbuf_puts(out, nb ? "\n  ]" : "]");
}

/* The "bound_parts" object: each part of the plan-independent bound (null when unknown). */
static void json_bound_parts(const sim_bound *bd, strbuf *out) {
  if (!bd) {
    strbuf_puts(out, "null");
    return;
  }
  bool f1 = true;
  strbuf_putc(out, '{');
  member_ms(out, "work_ms", bd->work, &f1);
  inner_key(out, "work_exact", &f1);
  strbuf_puts(out, bd->exact ? "true" : "false");
  member_ms(out, "fill_ms", bd->fill, &f1);
  member_ms(out, "chain_ms", bd->chain, &f1);
  member_num(out, "chain_layer", bd->chain_layer, &f1);
  member_ms(out, "path_ms", bd->path, &f1);
  member_ms(out, "memory_ms", bd->memory, &f1);
  member_num(out, "memory_layer", bd->memory_layer, &f1);
  strbuf_putc(out, '}');
}

/* One configuration as a JSON object (the keys of a "configs" entry). */
static void json_config(const pass_config_row *c, strbuf *out) {
  bool f = true;
  strbuf_putc(out, '{');
  member_num(out, "tensor", (double)c->tensor, &f);
  member_num(out, "pipeline", (double)c->pipeline, &f);
  member_num(out, "data", (double)c->data, &f);
  member_num(out, "micro_batch", (double)c->micro_batch, &f);
  inner_key(out, "recompute", &f);
  strbuf_json_str(out, ir_enum_name(IR_T_RECOMPUTE, c->recompute));
  member_num(out, "zero", c->zero, &f);
  member_num(out, "gpus", (double)c->gpus, &f);
  member_ms(out, "makespan_ms", c->makespan, &f);
  member_ms(out, "bound_ms", c->bound, &f);
  member_num(out, "bubble_ratio", c->bubble, &f);
  member_num(out, "tokens_per_s_per_gpu", c->tokens_per_gpu, &f);
  member_num(out, "mfu", c->mfu, &f);
  member_num(out, "peak_mem_bytes", c->peak_mem, &f);
  inner_key(out, "plan", &f);
  strbuf_json_str(out, c->plan);
  member_num(out, "evals", c->evals, &f);
  strbuf_putc(out, '}');
}

/* The configuration search's keys: "configs" (best ten, best first), "megatron_grid",
 * "pp_only" (null when not evaluated) and "config_search" (what it did). */
static void json_configs(const pass_config_stats *st, strbuf *out, bool *first) {
  top_key(out, "configs", first);
  strbuf_putc(out, '[');
  for (int i = 0; i < st->nrows && i < 10; i++) {
    strbuf_puts(out, i ? ",\n    " : "\n    ");
    json_config(&st->rows[i], out);
  }
  strbuf_puts(out, st->nrows ? "\n  ]" : "]");
  top_key(out, "megatron_grid", first);
  if (st->has_grid) json_config(&st->grid, out);
  else strbuf_puts(out, "null");
  top_key(out, "pp_only", first);
  if (st->has_pp_only) json_config(&st->pp_only, out);
  else strbuf_puts(out, "null");
  top_key(out, "config_search", first);
  bool f = true;
  strbuf_putc(out, '{');
  member_num(out, "candidates", st->candidates, &f);
  member_num(out, "pruned", st->pruned, &f);
  member_num(out, "short_tunes", st->short_tuned, &f);
  member_num(out, "long_tunes", st->long_tuned, &f);
  member_num(out, "seconds", st->seconds, &f);
  member_ms(out, "bound_ms", st->bound, &f);
  strbuf_putc(out, '}');
}

/* The "tuner" object. */
static void json_tuner(const pass_tune_stats *st, strbuf *out) {
  bool f1 = true;
  strbuf_putc(out, '{');
  member_num(out, "iterations", st->iterations, &f1);
  member_num(out, "evaluations", st->evaluations, &f1);
  member_num(out, "pruned", st->pruned, &f1);
  member_num(out, "cut", st->cut, &f1);
  member_num(out, "passed", st->passed, &f1);
  member_num(out, "jobs", st->jobs, &f1);
  member_num(out, "seconds", st->seconds, &f1);
  inner_key(out, "stop", &f1);
  strbuf_json_str(out, st->stop);
  member_ms(out, "bound_ms", st->bound.bound, &f1);
  member_num(out, "gap", st->bound.bound > 0 ? st->makespan / st->bound.bound - 1 : NAN, &f1);
  member_ms(out, "makespan_ms", st->makespan, &f1);
  member_num(out, "bubble_ratio", st->bubble, &f1);
  inner_key(out, "start", &f1);
  strbuf_json_str(out, st->start);
  inner_key(out, "speedup_vs", &f1);
  strbuf_putc(out, '{');
  bool f2 = true;
  for (int i = 0; i < st->nbaselines; i++) {
    const pass_baseline *b = &st->baselines[i];
    if (!b->ok || st->makespan <= 0) continue;
    inner_key(out, b->name, &f2);
    rep_json_num(out, b->makespan / st->makespan);
  }
  strbuf_puts(out, "}}");
}

/* The layers of stage st whose activations the plan recomputes, as a JSON array of layer
 * indices: those the stage recomputes (ir_stage_layer_recomputes: of a recomputable kind, the
 * first recompute_layers of them when given) when the stage's own recompute is full, else those
 * of a recomputable kind (ir_kind_recomputable) when the module's is not none (its kind, selective or full, is the module's
 * "recompute"); [] when none. Pre: st is a stage of m. */
static void json_recompute_layers(const ir_module *m, const ir_stage *st, strbuf *out) {
  bool on = st->recompute == IR_RECOMPUTE_FULL ||
            (int)ir_field_value(&m->train, IR_F_TRAIN_recompute) != IR_RECOMPUTE_NONE;
  bool f = true;
  strbuf_putc(out, '[');
  for (int i = st->first; on && i < st->end; i++)
    if (i >= 0 && i < m->nlayers &&
        (st->recompute == IR_RECOMPUTE_FULL ? ir_stage_layer_recomputes(m, st, i)
                                            : ir_kind_recomputable(m->layers[i].kind))) {
      strbuf_printf(out, f ? "%d" : ", %d", i);
      f = false;
    }
  strbuf_putc(out, ']');
}

void report_json(const ir_module *m, const sim_result *r, const report_extra *x, strbuf *out) {
  bool sim = r && r->status == SIM_OK && r->dev && rep_has_schedule(m);
  bool first = true;
  strbuf_putc(out, '{');
  top_key(out, "model", &first);
  strbuf_json_str(out, m->name);
  top_key(out, "layers", &first);
  strbuf_printf(out, "%d", m->nlayers);
  /* Hugging Face's parameter count (a tied matrix once): a whole number, written in full */
  top_key(out, "parameters", &first);
  double params = cost_module_parameters(m);
  if (isfinite(params)) strbuf_printf(out, "%.0f", params);
  else strbuf_puts(out, "null");
  top_key(out, "devices", &first);
  strbuf_printf(out, "%d", m->ndevices);
  top_key(out, "microbatches", &first);
  if (ir_field_is_set(&m->train, IR_F_TRAIN_microbatches))
    strbuf_printf(out, "%lld", (long long)m->train.microbatches);
  else
    strbuf_puts(out, "null");
  top_key(out, "data", &first);
  strbuf_printf(out, "%lld", (long long)ir_field_value(&m->train, IR_F_TRAIN_data));
  top_key(out, "recompute", &first);
  strbuf_json_str(out, ir_enum_name(IR_T_RECOMPUTE,
                                    (int)ir_field_value(&m->train, IR_F_TRAIN_recompute)));
  top_key(out, "mem_limit_bytes", &first);
  rep_json_num(out, rep_module_mem_limit(m));

  top_key(out, "layer_kinds", &first);
  rep_kind_costs k[IR_KIND_COUNT];
  bool costs = rep_collect_kind_costs(m, -1, k);
  int *types = xmalloc(sizeof *types * ((size_t)m->ndevices + 1));
  int ntypes = rep_type_devices(m, types);
  strbuf_putc(out, '[');
  bool first_kind = true;
  for (int i = 0; costs && i < IR_KIND_COUNT; i++)
    for (int ty = 0; ty < (ntypes > 1 ? ntypes : 1); ty++) {
      if (ntypes > 1) rep_collect_kind_costs(m, types[ty], k);
      if (!k[i].count) continue;
      strbuf_puts(out, first_kind ? "\n    {" : ",\n    {");
      first_kind = false;
      bool f1 = true;
      inner_key(out, "kind", &f1);
      strbuf_json_str(out, ir_kinds[i].name);
      inner_key(out, "device_type", &f1);
      strbuf_json_str(out, ntypes > 0 ? m->devices[types[ty]].type : NULL);
      inner_key(out, "count", &f1);
      strbuf_printf(out, "%d", k[i].count);
      member_ms(out, "f_ms", rep_kind_mean(&k[i], REP_KC_F), &f1);
      member_ms(out, "b_ms", rep_kind_mean(&k[i], REP_KC_B), &f1);
      member_ms(out, "w_ms", rep_kind_mean(&k[i], REP_KC_W), &f1);
      member_num(out, "act_bytes", rep_kind_mean(&k[i], REP_KC_ACT), &f1);
      member_num(out, "param_bytes", rep_kind_mean(&k[i], REP_KC_PARAM), &f1);
      strbuf_putc(out, '}');
    }
  free(types);
  strbuf_puts(out, first_kind ? "]" : "\n  ]");

  top_key(out, "schedule_method", &first);
  if (rep_has_schedule(m))
    strbuf_json_str(out, rep_schedule_method(m));
  else
    strbuf_puts(out, "null");

  top_key(out, "stages", &first);
  strbuf_putc(out, '[');
  for (int s = 0; s < m->nstages; s++) {
    const ir_stage *st = &m->stages[s];
    char b1[24], b2[24];
    rep_cost_sum c = rep_cost_stage(m, st);
    strbuf_puts(out, s ? ",\n    {" : "\n    {");
    bool f1 = true;
    inner_key(out, "stage", &f1);
    strbuf_printf(out, "%d", s);
    inner_key(out, "first", &f1);
    strbuf_printf(out, "%d", st->first);
    inner_key(out, "end", &f1);
    strbuf_printf(out, "%d", st->end);
    inner_key(out, "first_layer", &f1);
    strbuf_json_str(out, rep_layer_name(m, st->first, b1));
    inner_key(out, "last_layer", &f1);
    strbuf_json_str(out, rep_layer_name(m, st->end - 1, b2));
    inner_key(out, "device", &f1);
    if (st->device >= 0)
      strbuf_printf(out, "%d", st->device);
    else
      strbuf_puts(out, "null");
    inner_key(out, "device_type", &f1);
    strbuf_json_str(out, st->device >= 0 && st->device < m->ndevices
                             ? m->devices[st->device].type : NULL);
    member_ms(out, "f_ms", c.any ? c.f : NAN, &f1);
    member_ms(out, "b_ms", c.any ? c.b : NAN, &f1);
    member_ms(out, "w_ms", c.any ? c.w : NAN, &f1);
    member_num(out, "act_bytes", c.any ? c.act : NAN, &f1);
    member_num(out, "param_bytes", c.any ? c.param : NAN, &f1);
    member_num(out, "send_bytes", rep_stage_send_bytes(m, s), &f1);
    inner_key(out, "recompute", &f1);
    strbuf_json_str(out, ir_enum_name(IR_T_RECOMPUTE, (int)st->recompute));
    inner_key(out, "recompute_layers", &f1);
    json_recompute_layers(m, st, out);
    inner_key(out, "offload", &f1);
    strbuf_puts(out, st->offload ? "true" : "false");
    strbuf_putc(out, '}');
  }
  strbuf_puts(out, m->nstages ? "\n  ]" : "]");

  top_key(out, "makespan_ms", &first);
  json_ms(out, sim ? r->makespan : NAN);
  top_key(out, "bubble_ratio", &first);
  rep_json_num(out, sim ? r->bubble : NAN);
  top_key(out, "lower_bound_ms", &first);
  json_ms(out, sim ? rep_lower_bound(r) : NAN);
  top_key(out, "lower_bound_work_ms", &first);
  json_ms(out, sim ? r->lb_work : NAN);
  top_key(out, "lower_bound_critical_ms", &first);
  json_ms(out, sim ? r->lb_critical : NAN);
  sim_bound bd;
  bool have_bound = sim_bound_compute(m, &bd) && bd.bound > 0;
  top_key(out, "bound_ms", &first);
  json_ms(out, have_bound ? bd.bound : NAN);
  top_key(out, "gap", &first);
  rep_json_num(out, have_bound && sim ? r->makespan / bd.bound - 1 : NAN);
  top_key(out, "bound_parts", &first);
  json_bound_parts(have_bound ? &bd : NULL, out);
  top_key(out, "peak_mem_bytes", &first);
  rep_json_num(out, sim ? r->peak_mem : NAN);
  top_key(out, "oom", &first);
  rep_oom o;
  bool oom = sim && rep_first_oom(m, r, &o);
  strbuf_puts(out, !sim ? "null" : oom ? "true" : "false");
  top_key(out, "oom_at", &first);
  if (oom) {
    bool f1 = true;
    strbuf_putc(out, '{');
    inner_key(out, "device", &f1);
    strbuf_printf(out, "%d", o.device);
    inner_key(out, "op", &f1);
    if (o.op >= 0) {
      const sim_op_event *e = &r->ops[o.op];
      strbuf_json_str(out, rep_op_kind_name(e->kind));
      inner_key(out, "stage", &f1);
      strbuf_printf(out, "%d", e->stage);
      inner_key(out, "mb", &f1);
      strbuf_printf(out, "%d", e->mb);
    } else {
      strbuf_puts(out, "null");
    }
    member_ms(out, "time_ms", o.time, &f1);
    member_num(out, "mem_bytes", o.mem, &f1);
    member_num(out, "mem_limit_bytes", o.limit, &f1);
    strbuf_putc(out, '}');
  } else {
    strbuf_puts(out, "null");
  }

  top_key(out, "per_device", &first);
  strbuf_putc(out, '[');
  int ndev = sim ? (r->ndevices < m->ndevices ? r->ndevices : m->ndevices) : 0;
  for (int i = 0; i < ndev; i++) {
    const sim_device_stats *ds = &r->dev[i];
    double lim = rep_mem_limit(m, i);
    strbuf_puts(out, i ? ",\n    {" : "\n    {");
    bool f1 = true;
    inner_key(out, "device", &f1);
    strbuf_printf(out, "%d", i);
    inner_key(out, "type", &f1);
    strbuf_json_str(out, m->devices[i].type);
    inner_key(out, "node", &f1);
    strbuf_printf(out, "%lld", (long long)m->devices[i].rec.node);
    inner_key(out, "stages", &f1);
    strbuf_putc(out, '[');
    bool fs = true;
    for (int s = 0; s < m->nstages; s++)
      if (m->stages[s].device == i) {
        strbuf_printf(out, "%s%d", fs ? "" : ", ", s);
        fs = false;
      }
    strbuf_putc(out, ']');
    member_ms(out, "busy_ms", ds->busy, &f1);
    member_ms(out, "idle_ms", ds->idle, &f1);
    member_ms(out, "comm_ms", ds->comm, &f1);
    member_ms(out, "end_ms", ds->end, &f1);
    member_num(out, "bubble_ratio", r->makespan > 0 ? ds->idle / r->makespan : 0.0, &f1);
    member_num(out, "static_mem_bytes", ds->static_mem, &f1);
    member_num(out, "peak_mem_bytes", ds->peak_mem, &f1);
    member_ms(out, "peak_time_ms", ds->peak_time, &f1);
    member_num(out, "mem_limit_bytes", lim > 0 ? lim : NAN, &f1);
    inner_key(out, "oom", &f1);
    strbuf_puts(out, lim > 0 && ds->peak_mem > lim ? "true" : "false");
    strbuf_putc(out, '}');
  }
  strbuf_puts(out, ndev ? "\n  ]" : "]");
  if (x && x->baselines) {
    top_key(out, "baselines", &first);
    json_baselines(x->baselines, x->nbaselines, out);
  }
  if (x && x->tuner) {
    top_key(out, "tuner", &first);
    json_tuner(x->tuner, out);
  }
  if (x && x->config) json_configs(x->config, out, &first);
  strbuf_puts(out, "\n}\n");
}

