/* module.c -- construction and destruction of IR modules. */
#include <stdlib.h>
#include <string.h>

#include "ir.h"

ir_module *ir_module_new(const char *name) {
  ir_module *m = xcalloc(1, sizeof *m);
  m->name = arena_strdup(&m->arena, name ? name : "");
  return m;
}

void ir_module_free(ir_module *m) {
  if (!m) return;
  if (m->schedules)
    for (int i = 0; i < m->ndevices; i++) free(m->schedules[i].ops);
  free(m->schedules);
  free(m->profiles);
  free(m->devices);
  free(m->links);
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

void ir_module_init_schedules(ir_module *m) {
  if (!m->schedules) m->schedules = xcalloc((size_t)(m->ndevices ? m->ndevices : 1), sizeof *m->schedules);
}

void ir_schedule_push(ir_schedule *s, ir_op_kind k, int stage, int mb) {
  ir_op op = {k, stage, mb};
  VEC_PUSH(s->ops, s->nops, s->cap, op);
}

void ir_module_clear_plan(ir_module *m) {
  if (m->schedules)
    for (int i = 0; i < m->ndevices; i++) free(m->schedules[i].ops);
  free(m->schedules);
  m->schedules = NULL;
  m->nstages = 0;
  memset(&m->predict, 0, sizeof m->predict);
  for (int i = 0; i < m->ndevices; i++) memset(&m->devices[i].predict, 0, sizeof m->devices[i].predict);
}

const ir_link_rec *ir_module_link(const ir_module *m, int a, int b) {
  for (int i = 0; i < m->nlinks; i++)
    if ((m->links[i].from == a && m->links[i].to == b)) return &m->links[i].rec;
  if (a < 0 || b < 0 || a >= m->ndevices || b >= m->ndevices) return NULL;
  bool same = m->devices[a].rec.node == m->devices[b].rec.node;
  const ir_link_rec *r = same ? &m->intra : &m->inter;
  return r->set ? r : NULL;
}
