/* text.c -- the plan report as aligned text tables (report_text): the model, cluster and
 * training set-up, per-layer-kind costs, the stages of the plan, the simulated step (per-device
 * busy/idle/memory, makespan, bubble, lower bound, memory verdict), the tuner's and the
 * configuration search's results, and the classic plans beside the plan. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cost.h"
#include "report_impl.h"

/* ---- Aligned tables ------------------------------------------------------------------------ */

enum { TABLE_MAX_COLS = 16 };

/* A text table: a header row and body rows of cells, printed with aligned columns. */
typedef struct text_table {
  int ncols;                        /* number of columns */
  const char *head[TABLE_MAX_COLS]; /* header cells (static strings) */
  bool right[TABLE_MAX_COLS];       /* right-align the column (numbers) */
  char **cells;                     /* body cells, row-major, owned */
  int ncells, cells_cap;            /* cells used, allocated */
} text_table;

/* Start a table whose columns are described by "name" (left-aligned) or ">name"
 * (right-aligned) strings; pre: 1 <= n <= TABLE_MAX_COLS. */
static void table_init(text_table *t, int n, const char *const *cols) {
  memset(t, 0, sizeof *t);
  t->ncols = n;
  for (int i = 0; i < n; i++) {
    t->right[i] = cols[i][0] == '>';
    t->head[i] = cols[i] + t->right[i];
  }
}

/* Append the next cell (rows fill left to right); takes a copy of s. */
static void table_cell(text_table *t, const char *s) {
  VEC_PUSH(t->cells, t->ncells, t->cells_cap, xstrdup(s));
}

/* Append the next cell formatted with printf. */
static void table_cellf(text_table *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void table_cellf(text_table *t, const char *fmt, ...) {
  strbuf sb = {0};
  va_list ap;
  va_start(ap, fmt);
  strbuf_vprintf(&sb, fmt, ap);
  va_end(ap);
  table_cell(t, strbuf_cstr(&sb));
  strbuf_free(&sb);
}

/* Append a byte count cell (rep_bytes). */
static void table_bytes(text_table *t, double v) {
  strbuf sb = {0};
  rep_bytes(&sb, v);
  table_cell(t, strbuf_cstr(&sb));
  strbuf_free(&sb);
}

/* Append a time cell in ms with 3 decimals, "-" for NaN. */
static void table_ms(text_table *t, double seconds) {
  if (isnan(seconds))
    table_cell(t, "-");
  else
    table_cellf(t, "%.3f", seconds * 1e3);
}

/* Print the table to out, each line indented by two spaces, columns two spaces apart, without
 * trailing blanks; then free it. Pre: the cells fill whole rows. */
static void table_flush(text_table *t, strbuf *out) {
  size_t width[TABLE_MAX_COLS];
  for (int c = 0; c < t->ncols; c++) width[c] = strlen(t->head[c]);
  for (int i = 0; i < t->ncells; i++) {
    size_t n = strlen(t->cells[i]);
    if (n > width[i % t->ncols]) width[i % t->ncols] = n;
  }
  int nrows = t->ncells / t->ncols;
  for (int r = -1; r < nrows; r++) {
    strbuf line = {0};
    strbuf_puts(&line, "  ");
    for (int c = 0; c < t->ncols; c++) {
      const char *s = r < 0 ? t->head[c] : t->cells[r * t->ncols + c];
      int pad = (int)(width[c] - strlen(s));
      if (c) strbuf_puts(&line, "  ");
      if (t->right[c]) strbuf_printf(&line, "%*s", pad, "");
      strbuf_puts(&line, s);
      if (!t->right[c]) strbuf_printf(&line, "%*s", pad, "");
    }
    while (line.len && line.data[line.len - 1] == ' ') line.data[--line.len] = 0;
    strbuf_puts(out, strbuf_cstr(&line));
    strbuf_putc(out, '\n');
    strbuf_free(&line);
  }
  for (int i = 0; i < t->ncells; i++) free(t->cells[i]);
  free(t->cells);
  memset(t, 0, sizeof *t);
}

/* ---- Cells of the plan's tables ------------------------------------------------------------- */

/* A device's cell in the stage and device tables: "$d2", or "$d2 a100" in a mixed cluster. */
static void table_device(text_table *t, const ir_module *m, int dev, bool mixed) {
  if (dev < 0 || dev >= m->ndevices)
    table_cell(t, "-");
  else if (mixed)
    table_cellf(t, "$d%d %s", dev, m->devices[dev].type);
  else
    table_cellf(t, "$d%d", dev);
}

/* Append the stages of device 'dev' as "@s0 @s2" (or "-"). */
static void device_stages(const ir_module *m, int dev, strbuf *sb) {
  size_t start = sb->len;
  for (int s = 0; s < m->nstages; s++)
    if (m->stages[s].device == dev) strbuf_printf(sb, "%s@s%d", sb->len > start ? " " : "", s);
  if (sb->len == start) strbuf_puts(sb, "-");
}

/* Append a timeline operation in IR notation: "F @s2 1", "allreduce". */
static void op_text(const sim_op_event *e, strbuf *sb) {
  if (e->stage >= 0)
    strbuf_printf(sb, "%s @s%d %d", rep_op_kind_name(e->kind), e->stage, e->mb);
  else
    strbuf_puts(sb, rep_op_kind_name(e->kind));
}

/* ---- Text report ---------------------------------------------------------------------------- */

/* Append an integer field of the train record, "?" when unset. */
static void train_count(strbuf *sb, const ir_train *t, int field) {
  if (ir_field_is_set(t, field))
    strbuf_printf(sb, "%lld", (long long)ir_field_get(t, field));
  else
    strbuf_putc(sb, '?');
}

/* Model (its layers by kind and its parameter count), cluster, train and devices lines (the
 * summary octoc always printed). */
static void text_header(const ir_module *m, strbuf *sb) {
  int per_kind[IR_KIND_COUNT] = {0};
  for (int i = 0; i < m->nlayers; i++) per_kind[m->layers[i].kind]++;
  strbuf_printf(sb, "model %s: %d layer%s (", m->name, m->nlayers, m->nlayers == 1 ? "" : "s");
  bool first = true;
  for (int k = 0; k < IR_KIND_COUNT; k++)
    if (per_kind[k]) {
      strbuf_printf(sb, "%s%d %s", first ? "" : ", ", per_kind[k], ir_kinds[k].name);
      first = false;
    }
  strbuf_putc(sb, ')');
  /* the parameter count as Hugging Face's num_parameters() gives it (none known: not shown) */
  double params = cost_module_parameters(m);
  if (params > 0) {
    strbuf_printf(sb, ", %.0f parameters", params);
    if (cost_module_tied_parameters(m) > 0) strbuf_puts(sb, " (embeddings tied: counted once)");
  }
  strbuf_putc(sb, '\n');
  if (m->cluster_name && m->ndevices > 0) {
    /* "... GPUs of h100 (...)", or for a mixed cluster "... GPUs: 8 h100 (...), 8 a100 (...)" */
    int *types = xmalloc(sizeof *types * ((size_t)m->ndevices + 1));
    int ntypes = rep_type_devices(m, types);
    strbuf_printf(sb, "cluster %s: %lld node(s) x %lld GPUs%s", m->cluster_name,
                  (long long)m->cluster.nodes, (long long)m->cluster.gpus_per_node,
                  ntypes > 1 ? ":" : " of");
    for (int k = 0; k < ntypes; k++) {
      const ir_device *d = &m->devices[types[k]];
      int count = 0;
      for (int dv = 0; dv < m->ndevices; dv++) count += strcmp(m->devices[dv].type, d->type) == 0;
      strbuf_puts(sb, k ? ", " : " ");
      if (ntypes > 1) strbuf_printf(sb, "%d ", count);
      strbuf_printf(sb, "%s (", d->type);
      ir_format_value(sb, IR_T_FLOPS, d->rec.peak);
      strbuf_puts(sb, ", ");
      ir_format_value(sb, IR_T_BYTES, d->rec.mem);
      strbuf_puts(sb, ", ");
      ir_format_value(sb, IR_T_BW, d->rec.hbm);
      strbuf_printf(sb, ", efficiency %g)", d->rec.efficiency);
    }
    strbuf_putc(sb, '\n');
    free(types);
  }
  /* "train: pipeline P x tensor T x data D; micro_batch B, M microbatches, global batch G,
   * seq S": each count after its text. */
  static const struct {
    const char *text; /* what comes before the count */
    int field;        /* the train field */
  } counts[] = {
      {"train: pipeline ", IR_F_TRAIN_pipeline},
      {" x tensor ", IR_F_TRAIN_tensor},
      {" x data ", IR_F_TRAIN_data},
      {"; micro_batch ", IR_F_TRAIN_micro_batch},
      {", ", IR_F_TRAIN_microbatches},
      {" microbatches, global batch ", IR_F_TRAIN_global_batch},
      {", seq ", IR_F_TRAIN_seq},
  };
  const ir_train *t = &m->train;
  for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
    strbuf_puts(sb, counts[i].text);
    train_count(sb, t, counts[i].field);
  }
  const char *dtype = ir_enum_name(IR_T_DTYPE, (int)ir_field_value(t, IR_F_TRAIN_dtype));
  const char *opt = ir_enum_name(IR_T_OPTIMIZER, (int)ir_field_value(t, IR_F_TRAIN_optimizer));
  strbuf_printf(sb, ", %s, %s", dtype ? dtype : "?", opt ? opt : "?");
  if (ir_field_is_set(t, IR_F_TRAIN_mem_limit) && t->mem_limit > 0) {
    strbuf_puts(sb, ", mem_limit ");
    ir_format_value(sb, IR_T_BYTES, t->mem_limit);
  }
  strbuf_putc(sb, '\n');
  if (m->ndevices > 0)
    strbuf_printf(sb, "devices: %d pipeline devices ($d0..$d%d) on node(s) %lld..%lld\n",
                  m->ndevices, m->ndevices - 1, (long long)m->devices[0].rec.node,
                  (long long)m->devices[m->ndevices - 1].rec.node);
}

/* The per-layer-kind cost table (when any layer has costs): in a mixed cluster, a "type" column
 * and the rows of every kind once per device type, and an "all layers" line per type. */
static void text_costs(const ir_module *m, strbuf *sb) {
  rep_kind_costs k[IR_KIND_COUNT];
  if (!rep_collect_kind_costs(m, -1, k)) {
    strbuf_puts(sb, m->ndevices ? "costs: none (no layer has a cost record: run the cost pass)\n"
                                : "costs: none (no devices to estimate them on)\n");
    return;
  }
  int *types = xmalloc(sizeof *types * ((size_t)m->ndevices + 1));
  int ntypes = rep_type_devices(m, types);
  bool mixed = ntypes > 1;
  strbuf_puts(sb, "\ncosts per layer kind (mean per layer, one microbatch):\n");
  static const char *const cols[] = {"kind", "type", ">layers", ">F ms", ">B ms", ">W ms", ">act",
                                     ">param"};
  const char *pick[8];
  int ncols = 0;
  for (int c = 0; c < 8; c++)
    if (c != 1 || mixed) pick[ncols++] = cols[c];
  text_table t;
  table_init(&t, ncols, pick);
  for (int i = 0; i < IR_KIND_COUNT; i++)
    for (int ty = 0; ty < (mixed ? ntypes : 1); ty++) {
      if (mixed) rep_collect_kind_costs(m, types[ty], k);
      if (!k[i].count) continue;
      table_cell(&t, ir_kinds[i].name);
      if (mixed) table_cell(&t, m->devices[types[ty]].type);
      table_cellf(&t, "%d", k[i].count);
      for (int f = REP_KC_F; f <= REP_KC_W; f++) table_ms(&t, rep_kind_mean(&k[i], f));
      table_bytes(&t, rep_kind_mean(&k[i], REP_KC_ACT));
      table_bytes(&t, rep_kind_mean(&k[i], REP_KC_PARAM));
    }
  table_flush(&t, sb);
  for (int ty = 0; ty < (mixed ? ntypes : 1); ty++) {
    rep_cost_sum all = rep_cost_range(m, 0, m->nlayers, mixed ? types[ty] : -1);
    strbuf_printf(sb, "  all %d layers", m->nlayers);
    if (mixed) strbuf_printf(sb, " on %s", m->devices[types[ty]].type);
    strbuf_printf(sb, ": F %.3f ms, B %.3f ms, W %.3f ms, act ", all.f * 1e3, all.b * 1e3,
                  all.w * 1e3);
    rep_bytes(sb, all.act);
    strbuf_puts(sb, ", param ");
    rep_bytes(sb, all.param);
    strbuf_putc(sb, '\n');
  }
  free(types);
}

/* The stage table: each stage's costs on its own device's type. */
static void text_stages(const ir_module *m, strbuf *sb) {
  bool mixed = rep_mixed(m);
  strbuf_printf(sb, "\nstages (%d):\n", m->nstages);
  const char *cols[13] = {"stage", "layers", "first", "last", "device", ">F ms",
                          ">B ms", ">W ms", ">act", ">param", ">send"};
  /* the recompute and offload columns only when some stage recomputes (offloads) */
  bool recomputes = false, offloads = false;
  for (int s = 0; s < m->nstages; s++) {
    recomputes |= m->stages[s].recompute != IR_RECOMPUTE_NONE;
    offloads |= m->stages[s].offload;
  }
  int ncols = 11;
  if (recomputes) cols[ncols++] = "recompute";
  if (offloads) cols[ncols++] = "offload";
  text_table t;
  table_init(&t, ncols, cols);
  for (int s = 0; s < m->nstages; s++) {
    const ir_stage *st = &m->stages[s];
    char b1[24], b2[24];
    rep_cost_sum c = rep_cost_stage(m, st);
    table_cellf(&t, "@s%d", s);
    table_cellf(&t, "[%%%d, %%%d)", st->first, st->end);
    table_cell(&t, rep_layer_name(m, st->first, b1));
    table_cell(&t, rep_layer_name(m, st->end - 1, b2));
    table_device(&t, m, st->device, mixed);
    table_ms(&t, c.any ? c.f : NAN);
    table_ms(&t, c.any ? c.b : NAN);
    table_ms(&t, c.any ? c.w : NAN);
    table_bytes(&t, c.any ? c.act : NAN);
    table_bytes(&t, c.any ? c.param : NAN);
    table_bytes(&t, rep_stage_send_bytes(m, s));
    if (recomputes && st->recompute_layers > 0) /* the first N recomputable layers */
      table_cellf(&t, "full, first %d", st->recompute_layers);
    else if (recomputes)
      table_cell(&t, ir_enum_name(IR_T_RECOMPUTE, (int)st->recompute));
    if (offloads) table_cell(&t, st->offload ? "yes" : "-");
  }
  table_flush(&t, sb);
}

/* The per-device table and the step figures of a simulated plan. */
static void text_simulation(const ir_module *m, const sim_result *r, strbuf *sb) {
  bool any_comm = false;
  for (int i = 0; i < r->ndevices; i++)
    if (r->dev[i].comm > 0) any_comm = true;
  strbuf_puts(sb, "\ndevices:\n");
  static const char *const cols[] = {"device",  "stages",        ">busy ms", ">idle ms",
                                     ">bubble", ">allreduce ms", ">static",  ">peak memory",
                                     ">limit",  "memory"};
  enum { NCOLS = sizeof cols / sizeof cols[0], COL_ALLREDUCE = 5 }; /* shown only when used */
  const char *pick[NCOLS];
  int n = 0;
  for (int c = 0; c < NCOLS; c++)
    if (c != COL_ALLREDUCE || any_comm) pick[n++] = cols[c];
  text_table t;
  table_init(&t, n, pick);
  bool mixed = rep_mixed(m);
  for (int i = 0; i < r->ndevices && i < m->ndevices; i++) {
    const sim_device_stats *ds = &r->dev[i];
    strbuf stages = {0};
    device_stages(m, i, &stages);
    double lim = rep_mem_limit(m, i);
    table_device(&t, m, i, mixed);
    table_cell(&t, strbuf_cstr(&stages));
    strbuf_free(&stages);
    table_ms(&t, ds->busy);
    table_ms(&t, ds->idle);
    table_cellf(&t, "%.1f%%", r->makespan > 0 ? 100 * ds->idle / r->makespan : 0.0);
    if (any_comm) table_ms(&t, ds->comm);
    table_bytes(&t, ds->static_mem);
    table_bytes(&t, ds->peak_mem);
    table_bytes(&t, lim > 0 ? lim : NAN);
    table_cell(&t, lim > 0 && ds->peak_mem > lim ? "OOM" : "fits");
  }
  table_flush(&t, sb);

  strbuf_printf(sb,
                "\nstep: makespan %.3f ms, bubble ratio %.1f%% (%d device%s, %lld microbatch%s, "
                "schedule %s)\n",
                r->makespan * 1e3, r->bubble * 100, r->ndevices, r->ndevices == 1 ? "" : "s",
                (long long)m->train.microbatches, m->train.microbatches == 1 ? "" : "es",
                rep_schedule_method(m));
  double lb = rep_lower_bound(r);
  strbuf_printf(sb, "lower bound %.3f ms (work %.3f ms, critical path %.3f ms)", lb * 1e3,
                r->lb_work * 1e3, r->lb_critical * 1e3);
  if (lb > 0 && r->makespan > 0)
    strbuf_printf(sb, ": %.1f%% of the makespan (makespan is %.2fx the bound)",
                  100 * lb / r->makespan, r->makespan / lb);
  strbuf_putc(sb, '\n');
  sim_bound bd;
  if (sim_bound_compute(m, &bd) && bd.bound > 0 && r->makespan > 0) {
    strbuf_printf(sb, "bound %.3f ms for any plan of these layers on these devices: the plan is "
                  "%.1f%% above it (work %.3f, with fill %.3f, chain %.3f, path %.3f",
                  bd.bound * 1e3, 100 * (r->makespan / bd.bound - 1), bd.work * 1e3,
                  bd.fill * 1e3, bd.chain * 1e3, bd.path * 1e3);
    if (bd.memory > 0) strbuf_printf(sb, ", memory %.3f", bd.memory * 1e3);
    strbuf_puts(sb, " ms)\n");
  }

  rep_oom o;
  if (rep_first_oom(m, r, &o)) {
    strbuf_printf(sb, "memory: OOM: $d%d first exceeds its limit ", o.device);
    rep_bytes(sb, o.limit);
    strbuf_puts(sb, " with ");
    rep_bytes(sb, o.mem);
    if (o.op >= 0) {
      strbuf_puts(sb, " at ");
      op_text(&r->ops[o.op], sb);
    } else {
      strbuf_puts(sb, " at its peak");
    }
    strbuf_printf(sb, ", t = %.3f ms (peak ", o.time * 1e3);
    rep_bytes(sb, r->dev[o.device].peak_mem);
    strbuf_puts(sb, ")\n");
  } else {
    int worst = 0;
    double worst_frac = -1;
    for (int i = 0; i < r->ndevices && i < m->ndevices; i++) {
      double lim = rep_mem_limit(m, i);
      double frac = lim > 0 ? r->dev[i].peak_mem / lim : 0;
      /* highest fraction of the limit; without limits, the highest use */
      if (frac > worst_frac ||
          (frac == worst_frac && r->dev[i].peak_mem > r->dev[worst].peak_mem)) {
        worst_frac = frac;
        worst = i;
      }
    }
    strbuf_puts(sb, "memory: fits; highest use ");
    rep_bytes(sb, r->ndevices ? r->dev[worst].peak_mem : 0);
    strbuf_printf(sb, " on $d%d", worst);
    double lim = r->ndevices && m->ndevices ? rep_mem_limit(m, worst) : 0;
    if (lim > 0) {
      strbuf_puts(sb, " of ");
      rep_bytes(sb, lim);
      strbuf_printf(sb, " (%.1f%%)", 100 * worst_frac);
    }
    strbuf_putc(sb, '\n');
  }
}

/* The tuner's line: what it did and its speedups over S-1F1B and the best classic plan. */
static void text_tuner(const pass_tune_stats *st, strbuf *out) {
  strbuf_printf(out, "tuner: %d iterations, %d plans simulated (%d cut short, %d pruned by their "
                "bound, %d passed over) in %.2f s on %d thread%s, %s", st->iterations,
                st->evaluations, st->cut, st->pruned, st->passed, st->seconds, st->jobs,
                st->jobs == 1 ? "" : "s",
                strcmp(st->stop, "converged") == 0 ? "converged"
                : strcmp(st->stop, "effort") == 0  ? "effort budget spent"
                                                   : "time budget spent");
  double s1 = 0, best = 0;
  const char *best_name = NULL;
  for (int i = 0; i < st->nbaselines; i++) {
    const pass_baseline *b = &st->baselines[i];
    if (!b->ok || !b->fits) continue;
    if (strcmp(b->name, "S-1F1B") == 0) s1 = b->makespan;
    if (!best_name || b->makespan < best) best = b->makespan, best_name = b->name;
  }
  if (s1 > 0 && st->makespan > 0) strbuf_printf(out, "; %.2fx over S-1F1B", s1 / st->makespan);
  if (best_name && st->makespan > 0)
    strbuf_printf(out, ", %.2fx over the best classic plan (%s)", best / st->makespan, best_name);
  if (st->bound.bound > 0 && st->makespan > 0)
    strbuf_printf(out, "; %.1f%% above the bound", 100 * (st->makespan / st->bound.bound - 1));
  strbuf_putc(out, '\n');
}

static void text_compare(const ir_module *m, const sim_result *r, const report_extra *x,
                         strbuf *out);

/* "tensor 2 x pipeline 4 x data 1, micro_batch 2, recompute none, zero 0" for row c. */
static void config_text(const pass_config_row *c, strbuf *out) {
  strbuf_printf(out, "tensor %lld x pipeline %lld x data %lld, micro_batch %lld, recompute %s, "
                "zero %d", (long long)c->tensor, (long long)c->pipeline, (long long)c->data,
                (long long)c->micro_batch, ir_enum_name(IR_T_RECOMPUTE, c->recompute), c->zero);
}

/* The configuration search: the best ten configurations and the baselines beside them. */
static void text_configs(const ir_module *m, const pass_config_stats *st, strbuf *out) {
  strbuf_printf(out, "\nconfigurations (%d enumerated, %d pruned by their bound, %d short and %d "
                "long tunes, %.2f s; the first was chosen", st->candidates, st->pruned,
                st->short_tuned, st->long_tuned, st->seconds);
  if (st->nrows && st->bound > 0 && isfinite(st->bound))
    strbuf_printf(out, ", %.1f%% above the smallest bound of any configuration",
                  100 * (st->rows[0].makespan / st->bound - 1));
  strbuf_puts(out, "):\n");
  static const char *const cols[] = {">#", ">tensor", ">pipeline", ">data", ">micro_batch",
                                     "recompute", ">zero", ">step ms", ">tokens/s/GPU", ">MFU",
                                     ">peak memory", "plan"};
  text_table t;
  table_init(&t, 12, cols);
  for (int i = 0; i < st->nrows && i < 10; i++) {
    const pass_config_row *c = &st->rows[i];
    table_cellf(&t, "%d", i + 1);
    table_cellf(&t, "%lld", (long long)c->tensor);
    table_cellf(&t, "%lld", (long long)c->pipeline);
    table_cellf(&t, "%lld", (long long)c->data);
    table_cellf(&t, "%lld", (long long)c->micro_batch);
    table_cell(&t, ir_enum_name(IR_T_RECOMPUTE, c->recompute));
    table_cellf(&t, "%d", c->zero);
    table_ms(&t, c->makespan);
    table_cellf(&t, "%.0f", c->tokens_per_gpu);
    table_cellf(&t, "%.1f%%", 100 * c->mfu);
    table_bytes(&t, c->peak_mem);
    table_cell(&t, c->plan);
  }
  table_flush(&t, out);
  const pass_config_row *best = st->nrows ? &st->rows[0] : NULL;
  int64_t gpus = (int64_t)(ir_field_value(&m->cluster, IR_F_CLUSTER_nodes) *
                           ir_field_value(&m->cluster, IR_F_CLUSTER_gpus_per_node));
  if (best && best->gpus < gpus)
    strbuf_printf(out, "the chosen configuration uses %lld of the %lld GPUs: it is faster than "
                  "every configuration that uses them all\n", (long long)best->gpus,
                  (long long)gpus);
  const struct {
    const char *name;
    bool has;
    const pass_config_row *row;
  } base[] = {{"best Megatron grid configuration", st->has_grid, &st->grid},
              {"PP-only tuned plan", st->has_pp_only, &st->pp_only}};
  for (size_t i = 0; i < sizeof base / sizeof base[0] && best; i++) {
    if (!base[i].has) continue;
    strbuf_printf(out, "%s: ", base[i].name);
    config_text(base[i].row, out);
    strbuf_printf(out, ", %s: step %.3f ms; the chosen one is %.2fx faster\n", base[i].row->plan,
                  base[i].row->makespan * 1e3, base[i].row->makespan / best->makespan);
  }
}

void report_text(const ir_module *m, const sim_result *r, const report_extra *x, strbuf *out) {
  text_header(m, out);
  text_costs(m, out);
  bool simulated = r && r->status == SIM_OK && r->dev;
  if (m->nstages == 0) {
    strbuf_puts(out, "plan: none yet (no planning passes were run)\n");
  } else {
    text_stages(m, out);
    if (!rep_has_schedule(m))
      strbuf_puts(out, "plan: stages only, no schedule yet (nothing to simulate)\n");
    else if (!simulated)
      strbuf_puts(out, "plan: scheduled, not simulated\n");
    else
      text_simulation(m, r, out);
  }
  if (x && x->tuner) text_tuner(x->tuner, out);
  if (x && x->config) text_configs(m, x->config, out);
  if (x && x->baselines)
    text_compare(m, simulated && rep_has_schedule(m) ? r : NULL, x, out);
}

/* ---- Comparison with the classic plans ------------------------------------------------------ */

/* The table of the classic plans x->baselines beside m's own plan (r: its recorded run, or
 * NULL), which is called the tuned plan when x->tuner made it. */
static void text_compare(const ir_module *m, const sim_result *r, const report_extra *x,
                         strbuf *out) {
  const pass_baseline *b = x->baselines;
  int nb = x->nbaselines;
  /* The reference is S-1F1B (the first baseline) when it ran, else the plan itself. */
  double ref = nb > 0 && b[0].ok ? b[0].makespan : r && r->status == SIM_OK ? r->makespan : 0;
  static const char *const cols[] = {"plan", ">step ms", ">speedup", ">bubble", ">peak memory",
                                     "memory"};
  text_table t;
  table_init(&t, 6, cols);
  /* the star: the fastest row that fits, the plan itself included (it wins ties) */
  int best = -1;
  for (int i = 0; i < nb; i++)
    if (b[i].ok && b[i].fits && (best < 0 || b[i].makespan < b[best].makespan)) best = i;
  bool plan_best = r && r->status == SIM_OK && r->fits &&
                   (best < 0 || r->makespan <= b[best].makespan);
  if (plan_best) best = -1;
  if (r && r->status == SIM_OK) {
    strbuf name = {0};
    strbuf_printf(&name, "%s plan (%s)%s", x->tuner ? "tuned" : "this", rep_schedule_method(m),
                  plan_best ? " *" : "");
    table_cell(&t, strbuf_cstr(&name));
    strbuf_free(&name);
    table_ms(&t, r->makespan);
    table_cellf(&t, "%.2fx", ref > 0 && r->makespan > 0 ? ref / r->makespan : 0.0);
    table_cellf(&t, "%.1f%%", 100 * r->bubble);
    table_bytes(&t, r->peak_mem);
    table_cell(&t, r->fits ? "fits" : "OOM");
  }
  for (int i = 0; i < nb; i++) {
    table_cellf(&t, "%s%s", b[i].name, i == best ? " *" : "");
    if (!b[i].ok) {
      for (int c = 0; c < 4; c++) table_cell(&t, "-");
      table_cell(&t, "n/a");
      continue;
    }
    table_ms(&t, b[i].makespan);
    table_cellf(&t, "%.2fx", ref > 0 && b[i].makespan > 0 ? ref / b[i].makespan : 0.0);
    table_cellf(&t, "%.1f%%", 100 * b[i].bubble);
    double peak = 0;
    for (int d = 0; d < b[i].ndevices; d++)
      if (b[i].peak_mem[d] > peak) peak = b[i].peak_mem[d];
    table_bytes(&t, peak);
    table_cell(&t, b[i].fits ? "fits" : "OOM");
  }
  strbuf_puts(out, "\nclassic plans (speedup over S-1F1B; * the fastest that fits):\n");
  table_flush(&t, out);
  for (int i = 0; i < nb; i++)
    if (!b[i].ok) strbuf_printf(out, "  %s: n/a: %s\n", b[i].name, b[i].why);
}
