/* layers.c -- per-kind rules of layer parameters: derivation of the parameters that follow from
 * others, and the consistency checks shared by the front end and the IR verifier. */
#include <math.h>
#include <string.h>

#include "ir.h"

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

/* Parameters that ir_layer_derive fills from others: when missing, the kind's own check says
 * why they could not be derived (or the missing inputs are reported). */
static bool is_derived(int p) {
  return p == IR_LP_ATTENTION_KV_HEADS || p == IR_LP_ATTENTION_HEAD_DIM ||
         p == IR_LP_MAMBA2_HEADS || p == IR_LP_VIT_HEAD_DIM || p == IR_LP_VIT_TOKENS;
}

/* Reporting context of one layer check. */
typedef struct check_ctx {
  const ir_layer *l; /* layer checked */
  diag_engine *d;    /* where problems go */
  diag_loc loc;      /* where they point */
  int problems;      /* reported so far */
} check_ctx;

static void problem(check_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void problem(check_ctx *c, const char *fmt, ...) {
  strbuf sb = {0};
  va_list ap;
  va_start(ap, fmt);
  strbuf_vprintf(&sb, fmt, ap);
  va_end(ap);
  diag_error(c->d, c->loc, "layer '%s' (%s): %s", c->l->name, ir_kinds[c->l->kind].name,
             strbuf_cstr(&sb));
  strbuf_free(&sb);
  c->problems++;
}

static double P(const check_ctx *c, ir_layer_param p) { return c->l->p[p]; }

/* Check a relation only when both sides are known (missing ones are reported separately). */
#define KNOWN2(a, b) (!isnan(a) && !isnan(b))

int ir_layer_check(const ir_layer *l, diag_engine *d, diag_loc loc) {
  check_ctx c = {l, d, loc, 0};
  int first = ir_kind_first_param(l->kind), n = ir_kind_nparams(l->kind);
  for (int i = first; i < first + n; i++) {
    const ir_param_info *pi = &ir_layer_params[i];
    double v = l->p[i];
    if (isnan(v)) {
      if (!is_derived(i)) problem(&c, "missing '%s' (%s)", pi->name, pi->doc);
      continue;
    }
    if (!isfinite(v) || v < 0) {
      problem(&c, "'%s' must be a finite non-negative %s", pi->name, ir_types[pi->type].name);
      continue;
    }
    if (ir_type_is_integral(pi->type) && v != floor(v)) {
      problem(&c, "'%s' must be a whole number", pi->name);
      continue;
    }
    if (pi->type == IR_T_COUNT && v == 0 && pi->def != 0)
      problem(&c, "'%s' must be at least 1", pi->name);
    if (pi->type == IR_T_BOOL && v > 1) problem(&c, "'%s' must be true or false", pi->name);
    if (ir_type_is_enum(pi->type) && !ir_enum_name(pi->type, (int)v))
      problem(&c, "'%s' has no %s numbered %g", pi->name, ir_types[pi->type].name, v);
  }
  switch (l->kind) {
  case IR_KIND_ATTENTION: {
    double h = P(&c, IR_LP_ATTENTION_HEADS), kv = P(&c, IR_LP_ATTENTION_KV_HEADS);
    double hid = P(&c, IR_LP_ATTENTION_HIDDEN);
    if (KNOWN2(h, kv) && kv > 0 && (kv > h || fmod(h, kv) != 0))
      problem(&c, "kv_heads = %g must divide heads = %g", kv, h);
    if (isnan(P(&c, IR_LP_ATTENTION_HEAD_DIM)) && KNOWN2(h, hid) && h > 0 && fmod(hid, h) != 0)
      problem(&c, "heads = %g does not divide hidden = %g; give head_dim explicitly", h, hid);
    double seq = P(&c, IR_LP_ATTENTION_SEQ), win = P(&c, IR_LP_ATTENTION_WINDOW);
    if (KNOWN2(seq, win) && win > seq)
      problem(&c, "window = %g is longer than seq = %g", win, seq);
    break;
  }
  case IR_KIND_MOE: {
    double e = P(&c, IR_LP_MOE_EXPERTS), k = P(&c, IR_LP_MOE_TOP_K);
    if (KNOWN2(e, k) && k > e) problem(&c, "top_k = %g exceeds experts = %g", k, e);
    break;
  }
  case IR_KIND_MAMBA2: {
    double h = P(&c, IR_LP_MAMBA2_HEADS), g = P(&c, IR_LP_MAMBA2_GROUPS);
    double hd = P(&c, IR_LP_MAMBA2_HEAD_DIM);
    double inner = P(&c, IR_LP_MAMBA2_EXPAND) * P(&c, IR_LP_MAMBA2_HIDDEN);
    if (isnan(h) && KNOWN2(inner, hd))
      problem(&c, "head_dim = %g does not divide expand * hidden = %g; give heads explicitly",
              hd, inner);
    if (KNOWN2(h, g) && g > 0 && fmod(h, g) != 0)
      problem(&c, "groups = %g must divide heads = %g", g, h);
    if (KNOWN2(h, hd) && !isnan(inner) && h * hd != inner)
      problem(&c, "heads x head_dim = %g x %g must equal expand x hidden = %g", h, hd, inner);
    break;
  }
  case IR_KIND_VIT: {
    double img = P(&c, IR_LP_VIT_IMAGE), pat = P(&c, IR_LP_VIT_PATCH);
    if (KNOWN2(img, pat) && pat > 0 && fmod(img, pat) != 0 && isnan(P(&c, IR_LP_VIT_TOKENS)))
      problem(&c, "patch = %g does not divide image = %g", pat, img);
    double h = P(&c, IR_LP_VIT_HEADS), hid = P(&c, IR_LP_VIT_HIDDEN);
    if (isnan(P(&c, IR_LP_VIT_HEAD_DIM)) && KNOWN2(h, hid) && h > 0 && fmod(hid, h) != 0)
      problem(&c, "heads = %g does not divide hidden = %g; give head_dim explicitly", h, hid);
    break;
  }
  default:
    break;
  }
  return c.problems;
}
