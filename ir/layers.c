/* layers.c -- per-kind rules of layer parameters: derivation of the parameters that follow from
 * others, and the consistency checks shared by the front end and the IR verifier (the rules
 * themselves are layer_rules.h's, which the stream validator shares). */
#include <math.h>
#include <string.h>

#include "ir.h"
#include "layer_rules.h"

/* Set parameter p of l to v when unset; tell 'note' which rule filled it. */
static void derive(ir_layer *l, ir_layer_param p, double v, const char *rule,
                   void (*note)(void *, int, const char *), void *ctx) {
  if (!isnan(l->p[p]) || isnan(v)) return;
  l->p[p] = v;
  if (note) note(ctx, p, rule);
}

/* a / b when both are set, b > 0 and b divides a exactly; NAN otherwise. */
static double exact_div(double a, double b) {
  if (isnan(a) || isnan(b) || b <= 0 || fmod(a, b) != 0) return NAN;
  return a / b;
}

void ir_layer_derive(ir_layer *l, void (*note)(void *ctx, int param, const char *rule),
                     void *ctx) {
  double *p = l->p;
  switch (l->kind) {
  case IR_KIND_ATTENTION:
    derive(l, IR_LP_ATTENTION_KV_HEADS, p[IR_LP_ATTENTION_HEADS], "as many as heads", note, ctx);
    derive(l, IR_LP_ATTENTION_HEAD_DIM,
           exact_div(p[IR_LP_ATTENTION_HIDDEN], p[IR_LP_ATTENTION_HEADS]),
           "hidden / heads", note, ctx);
    derive(l, IR_LP_ATTENTION_SCORE_DIM, p[IR_LP_ATTENTION_HEAD_DIM], "head_dim", note, ctx);
    break;
  case IR_KIND_MAMBA2:
    derive(l, IR_LP_MAMBA2_HEADS,
           exact_div(p[IR_LP_MAMBA2_EXPAND] * p[IR_LP_MAMBA2_HIDDEN], p[IR_LP_MAMBA2_HEAD_DIM]),
           "expand * hidden / head_dim", note, ctx);
    break;
  case IR_KIND_VIT: {
    derive(l, IR_LP_VIT_HEAD_DIM, exact_div(p[IR_LP_VIT_HIDDEN], p[IR_LP_VIT_HEADS]),
           "hidden / heads", note, ctx);
    double side = exact_div(p[IR_LP_VIT_IMAGE], p[IR_LP_VIT_PATCH]);
    derive(l, IR_LP_VIT_TOKENS, side * side + 1, "(image / patch)^2 + 1", note, ctx);
    break;
  }
  default:
    break;
  }
}

/* Reporting context of one layer check. */
typedef struct check_ctx {
  const ir_layer *l; /* layer checked */
  diag_engine *d;    /* where problems go */
  diag_loc loc;      /* where they point */
} check_ctx;

/* lr_report's receiver: the problem as an error naming the layer. */
static void problem(void *ctx, const char *message) {
  const check_ctx *c = ctx;
  diag_error(c->d, c->loc, "layer '%s' (%s): %s", c->l->name, ir_kinds[c->l->kind].name, message);
}

_Static_assert((int)LR_P_N == (int)IR_LP_COUNT && (int)LR_KIND_N == (int)IR_KIND_COUNT,
               "layer_rules.h numbers the layer tables as the IR does");

int ir_layer_check(const ir_layer *l, diag_engine *d, diag_loc loc) {
  check_ctx c = {l, d, loc};
  lr_report r = {problem, &c, 0};
  return lr_layer_check((int)l->kind, l->p, &r);
}

/* lr_tie_source's view of a module's layer kinds. */
static int module_kind(const void *ctx, int i) { return (int)((const ir_module *)ctx)->layers[i].kind; }

bool ir_module_tie(const ir_module *m, int *emb, int *head) {
  *emb = *head = -1;
  for (int i = 0; i < m->nlayers; i++)
    if (m->layers[i].kind == IR_KIND_LM_HEAD && m->layers[i].p[IR_LP_LM_HEAD_TIED] == 1) *head = i;
  if (*head >= 0) *emb = lr_tie_source(m->nlayers, module_kind, m);
  if (*emb < 0) *head = -1;
  return *head >= 0;
}

int ir_layer_check_tie(const ir_module *m, int i, diag_engine *d, diag_loc loc) {
  const ir_layer *l = &m->layers[i];
  if (l->kind != IR_KIND_LM_HEAD || !(l->p[IR_LP_LM_HEAD_TIED] == 1)) return 0;
  check_ctx c = {l, d, loc};
  lr_report r = {problem, &c, 0};
  int src = lr_tie_source(m->nlayers, module_kind, m);
  return lr_tie_check(i, l->p, src, src >= 0 ? m->layers[src].name : NULL,
                      src >= 0 ? m->layers[src].p : NULL, &r);
}
