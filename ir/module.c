/* module.c -- construction and destruction of IR modules. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"

ir_module *ir_module_new(const char *name) {
  ir_module *m = xcalloc(1, sizeof *m);
  m->name = arena_strdup(&m->arena, name ? name : "");
  return m;
}

/* Free the schedules' operation arrays and the array of schedules. */
static void free_schedules(ir_module *m) {
  if (m->schedules)
    for (int i = 0; i < m->ndevices; i++) free(m->schedules[i].ops);
  free(m->schedules);
  m->schedules = NULL;
}

void ir_module_free(ir_module *m) {
  if (!m) return;
  free_schedules(m);
  free(m->profiles);
  free(m->devices);
  free(m->links);
  for (int i = 0; i < m->nlayers; i++) free(m->layers[i].tcosts);
  free(m->layers);
  free(m->stages);
  arena_free(&m->arena);
  free(m);
}

ir_layer *ir_module_add_layer(ir_module *m, const char *name, ir_layer_kind k) {
  VEC_RESERVE(m->layers, m->nlayers, m->layers_cap);
  ir_layer *l = &m->layers[m->nlayers++];
  memset(l, 0, sizeof *l);
  l->name = arena_strdup(&m->arena, name);
  l->kind = k;
  for (int i = 0; i < IR_LP_COUNT; i++) l->p[i] = NAN;
  return l;
}

ir_device *ir_module_add_device(ir_module *m, const char *type) {
  VEC_RESERVE(m->devices, m->ndevices, m->devices_cap);
  ir_device *d = &m->devices[m->ndevices++];
  memset(d, 0, sizeof *d);
  d->type = arena_strdup(&m->arena, type);
  return d;
}

ir_cost *ir_layer_add_type_cost(ir_module *m, ir_layer *l, const char *type) {
  for (int i = 0; i < l->ntcosts; i++)
    if (strcmp(l->tcosts[i].type, type) == 0) return &l->tcosts[i].cost;
  VEC_RESERVE(l->tcosts, l->ntcosts, l->tcosts_cap);
  ir_type_cost *tc = &l->tcosts[l->ntcosts++];
  memset(tc, 0, sizeof *tc);
  tc->type = arena_strdup(&m->arena, type);
  return &tc->cost;
}

const ir_cost *ir_layer_cost_on(const ir_module *m, const ir_layer *l, int dv) {
  if (l->ntcosts == 0 || dv <= 0 || dv >= m->ndevices) return &l->cost;
  const char *type = m->devices[dv].type;
  if (strcmp(type, m->devices[0].type) == 0) return &l->cost;
  for (int i = 0; i < l->ntcosts; i++)
    if (strcmp(l->tcosts[i].type, type) == 0) return &l->tcosts[i].cost;
  return &l->cost;
}

double ir_device_mem_limit(const ir_module *m, int dv) {
  double lim = ir_field_value(&m->train, IR_F_TRAIN_mem_limit);
  double mem = ir_field_value(&m->devices[dv].rec, IR_F_DEVICE_mem);
  return lim > 0 ? lim : mem > 0 ? mem : INFINITY;
}

void ir_module_clear_type_costs(ir_module *m) {
  for (int i = 0; i < m->nlayers; i++) {
    free(m->layers[i].tcosts);
    m->layers[i].tcosts = NULL;
    m->layers[i].ntcosts = m->layers[i].tcosts_cap = 0;
  }
}

void ir_module_add_profile(ir_module *m, const char *path) {
  const char *copy = arena_strdup(&m->arena, path);
  VEC_PUSH(m->profiles, m->nprofiles, m->profiles_cap, copy);
}

ir_link *ir_module_add_link(ir_module *m, int from, int to) {
  VEC_RESERVE(m->links, m->nlinks, m->links_cap);
  ir_link *l = &m->links[m->nlinks++];
  memset(l, 0, sizeof *l);
  l->from = from;
  l->to = to;
  return l;
}

ir_stage *ir_module_add_stage(ir_module *m, int first, int end) {
  VEC_RESERVE(m->stages, m->nstages, m->stages_cap);
  ir_stage *s = &m->stages[m->nstages++];
  memset(s, 0, sizeof *s);
  s->first = first;
  s->end = end;
  s->device = -1;
  return s;
}

bool ir_kind_recomputable(ir_layer_kind k) {
  return (unsigned)k < IR_KIND_COUNT && ir_kinds[k].recomputable;
}

int ir_stage_recomputable(const ir_module *m, const ir_stage *s) {
  int n = 0;
  for (int i = s->first; i < s->end; i++) n += ir_kind_recomputable(m->layers[i].kind);
  return n;
}

bool ir_stage_layer_recomputes(const ir_module *m, const ir_stage *s, int i) {
  if (s->recompute != IR_RECOMPUTE_FULL || !ir_kind_recomputable(m->layers[i].kind)) return false;
  if (s->recompute_layers <= 0) return true;
  int before = 0; /* recomputable layers of s before i */
  for (int j = s->first; j < i && before < s->recompute_layers; j++)
    before += ir_kind_recomputable(m->layers[j].kind);
  return before < s->recompute_layers;
}

ir_cost ir_stage_layer_cost(const ir_module *m, const ir_stage *s, int i) {
  const ir_layer *l = &m->layers[i];
  ir_cost c = *ir_layer_cost_on(m, l, s->device);
  if (!ir_stage_layer_recomputes(m, s, i)) return c;
  const ir_cost *src = i > 0 ? ir_layer_cost_on(m, &m->layers[i - 1], s->device) : &c;
  if (ir_field_is_set(&c, IR_F_COST_b) && ir_field_is_set(&c, IR_F_COST_f)) /* the whole */
    c.b += c.f - (ir_field_is_set(&c, IR_F_COST_core) ? c.core : 0); /* forward, not the core */
  if (ir_field_is_set(src, IR_F_COST_out)) { /* unset costs stay unset */
    double in = src->out;
    if (ir_field_is_set(&c, IR_F_COST_act)) c.act = in;
    if (ir_field_is_set(&c, IR_F_COST_act_w)) c.act_w = in;
  }
  return c;
}

double ir_stage_layer_rebuild(const ir_module *m, const ir_stage *s, int i) {
  const ir_layer *l = &m->layers[i];
  if (!ir_stage_layer_recomputes(m, s, i)) return 0;
  const ir_cost *c = ir_layer_cost_on(m, l, s->device);
  return ir_field_is_set(c, IR_F_COST_act_w) ? c->act_w : 0;
}

void ir_module_init_schedules(ir_module *m) {
  if (!m->schedules)
    m->schedules = xcalloc((size_t)(m->ndevices ? m->ndevices : 1), sizeof *m->schedules);
}

void ir_schedule_push(ir_schedule *s, ir_op_kind k, int stage, int mb) {
  ir_op op = {k, stage, mb};
  VEC_PUSH(s->ops, s->nops, s->cap, op);
}

void ir_module_clear_schedules(ir_module *m) {
  free_schedules(m);
  m->schedule_method = NULL;
  memset(&m->predict, 0, sizeof m->predict);
  for (int i = 0; i < m->ndevices; i++)
    memset(&m->devices[i].predict, 0, sizeof m->devices[i].predict);
}

void ir_module_clear_plan(ir_module *m) {
  ir_module_clear_schedules(m);
  m->nstages = 0;
}

void ir_module_body(const ir_module *m, int *first, int *end) {
  int lead = 0, trail = 0, n = m->nlayers;
  while (lead < n && m->layers[lead].kind == IR_KIND_EMBEDDING) lead++;
  while (trail < n - lead && m->layers[n - 1 - trail].kind == IR_KIND_LM_HEAD) trail++;
  *first = lead;
  *end = n - trail;
}

const ir_link_rec *ir_module_link(const ir_module *m, int a, int b) {
  for (int i = 0; i < m->nlinks; i++)
    if ((m->links[i].from == a && m->links[i].to == b)) return &m->links[i].rec;
  if (a < 0 || b < 0 || a >= m->ndevices || b >= m->ndevices) return NULL;
  bool same = m->devices[a].rec.node == m->devices[b].rec.node;
  const ir_link_rec *r = same ? &m->intra : &m->inter;
  return r->set ? r : NULL;
}

/* Copy of string s in m's arena; consecutive requests for the same pointer share one copy. */
static const char *clone_str(ir_module *m, const char *s, const char **last_in,
                             const char **last_out) {
  if (!s) return NULL;
  if (s == *last_in) return *last_out;
  *last_in = s;
  *last_out = arena_strdup(&m->arena, s);
  return *last_out;
}

/* Copy n elements of array a (NULL when n == 0). */
static void *clone_array(const void *a, int n, size_t size) {
  if (n <= 0 || !a) return NULL;
  void *c = xmalloc((size_t)n * size);
  memcpy(c, a, (size_t)n * size);
  return c;
}

ir_module *ir_module_clone(const ir_module *src) {
  ir_module *m = xcalloc(1, sizeof *m);
  *m = *src;
  m->arena = (arena){0};
  const char *li = NULL, *lo = NULL, *fi = NULL, *fo = NULL;
  m->name = clone_str(m, src->name, &li, &lo);
  m->cluster_name = clone_str(m, src->cluster_name, &li, &lo);
  m->schedule_method = clone_str(m, src->schedule_method, &li, &lo);
  m->loc.file = clone_str(m, src->loc.file, &fi, &fo);
  m->train_loc.file = clone_str(m, src->train_loc.file, &fi, &fo);
  m->profiles = clone_array(src->profiles, src->nprofiles, sizeof *src->profiles);
  m->profiles_cap = src->nprofiles;
  for (int i = 0; i < m->nprofiles; i++) m->profiles[i] = clone_str(m, src->profiles[i], &li, &lo);
  m->devices = clone_array(src->devices, src->ndevices, sizeof *src->devices);
  m->devices_cap = src->ndevices;
  for (int i = 0; i < m->ndevices; i++) {
    m->devices[i].type = clone_str(m, src->devices[i].type, &li, &lo);
    m->devices[i].loc.file = clone_str(m, src->devices[i].loc.file, &fi, &fo);
  }
  m->links = clone_array(src->links, src->nlinks, sizeof *src->links);
  m->links_cap = src->nlinks;
  m->layers = clone_array(src->layers, src->nlayers, sizeof *src->layers);
  m->layers_cap = src->nlayers;
  for (int i = 0; i < m->nlayers; i++) {
    m->layers[i].name = arena_strdup(&m->arena, src->layers[i].name);
    const ir_layer *sl = &src->layers[i];
    m->layers[i].tcosts = clone_array(sl->tcosts, sl->ntcosts, sizeof *sl->tcosts);
    m->layers[i].tcosts_cap = sl->ntcosts;
    for (int k = 0; k < sl->ntcosts; k++)
      m->layers[i].tcosts[k].type = arena_strdup(&m->arena, sl->tcosts[k].type);
    m->layers[i].loc.file = clone_str(m, src->layers[i].loc.file, &fi, &fo);
  }
  m->stages = clone_array(src->stages, src->nstages, sizeof *src->stages);
  m->stages_cap = src->nstages;
  for (int i = 0; i < m->nstages; i++)
    m->stages[i].loc.file = clone_str(m, src->stages[i].loc.file, &fi, &fo);
  if (src->schedules) {
    m->schedules = xcalloc((size_t)(src->ndevices ? src->ndevices : 1), sizeof *m->schedules);
    for (int i = 0; i < src->ndevices; i++) {
      const ir_schedule *s = &src->schedules[i];
      m->schedules[i] = *s;
      m->schedules[i].ops = clone_array(s->ops, s->nops, sizeof *s->ops);
      m->schedules[i].cap = s->nops;
      m->schedules[i].loc.file = clone_str(m, s->loc.file, &fi, &fo);
    }
  }
  return m;
}

/* Bit of train field f in the train masks. */
static uint64_t train_bit(int f) {
  int first, n;
  ir_record_fields(IR_REC_TRAIN, &first, &n);
  return (uint64_t)1 << (f - first);
}

bool ir_train_is_free(const ir_train *t, int f) { return (t->free & train_bit(f)) != 0; }

void ir_train_set_free(ir_train *t, int f, bool free) {
  if (free) {
    t->free |= train_bit(f);
    t->set &= ~train_bit(f);
  } else {
    t->free &= ~train_bit(f);
  }
}

int ir_layer_tp_misfit(const ir_layer *l, int64_t t) {
  int first = ir_kind_first_param(l->kind);
  for (int p = first; p < first + ir_kind_nparams(l->kind); p++)
    if (ir_layer_params[p].tp_split && !isnan(l->p[p]) && fmod(l->p[p], (double)t) != 0)
      return p;
  return -1;
}

bool ir_train_may_be_free(int f) {
  const char *list = IR_TRAIN_FREE_FIELDS, *name = ir_fields[f].name;
  size_t n = strlen(name);
  for (const char *q = strstr(list, name); q; q = strstr(q + 1, name))
    if ((q == list || q[-1] == ' ') && (q[n] == ' ' || q[n] == 0)) return true;
  return false;
}

int ir_train_first_free(const ir_module *m) {
  int first, n;
  ir_record_fields(IR_REC_TRAIN, &first, &n);
  for (int f = first; f < first + n; f++)
    if (ir_train_is_free(&m->train, f)) return f;
  return -1;
}
