/* layer_rules.h -- the rules a layer's parameters obey (each required one present, each value in
 * its type's domain, the relations between them), written once for the IR verifier (ir/layers.c)
 * and the stream validator (stream/validate.c). Both include this header: it needs only the
 * IR's .def tables and support.h, so the stream library checks a layer exactly as the verifier
 * does without linking ir/. Parameters are indexed as layer_params.def orders them, which is
 * also the numbering of IR_LP_* and BE_LP_*. */
#ifndef OCTO_LAYER_RULES_H
#define OCTO_LAYER_RULES_H

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

#include "support.h"

/* Value types, numbered as types.def orders them (LR_T_N: their count). */
enum lr_type {
#define IR_TYPE(ID, NAME, DIM, DOC) LR_T_##ID,
#include "types.def"
#undef IR_TYPE
  LR_T_N
};

/* Layer kinds, numbered as layer_kinds.def orders them (LR_KIND_N: their count). */
enum lr_kind {
#define LAYER_KIND(ID, NAME, RC, DOC) LR_KIND_##ID,
#include "layer_kinds.def"
#undef LAYER_KIND
  LR_KIND_N
};

/* Layer parameters: LR_P_<KIND>_<ID>, numbered as layer_params.def orders them (LR_P_N: their
 * count). */
enum lr_param {
#define LAYER_PARAM(KIND, ID, NAME, T, FM, DEF, TP, DOC) LR_P_##KIND##_##ID,
#include "layer_params.def"
#undef LAYER_PARAM
  LR_P_N
};

/* What the rules need to know of one parameter. */
typedef struct lr_param_info {
  enum lr_kind kind; /* kind it belongs to */
  const char *name;  /* spelling ("head_dim") */
  enum lr_type type; /* value type */
  double def;        /* constant default of a number (NAN: derived or required); 0 for enums */
  const char *doc;   /* meaning, for "missing" */
} lr_param_info;

/* The default column of a number, kept; an enum's (IR_ACT_SILU, which this header need not
 * know) dropped: the rules ask only whether a number's default is NAN or 0. */
#define LR_DEF_COUNT(d) d
#define LR_DEF_REAL(d) d
#define LR_DEF_BOOL(d) d
#define LR_DEF_TIME(d) d
#define LR_DEF_BYTES(d) d
#define LR_DEF_ACT(d) 0
static const lr_param_info lr_params[LR_P_N] = {
#define LAYER_PARAM(KIND, ID, NAME, T, FM, DEF, TP, DOC) \
  {LR_KIND_##KIND, NAME, LR_T_##T, LR_DEF_##T(DEF), DOC},
#include "layer_params.def"
#undef LAYER_PARAM
};

/* types.def's name of each type ("integer"), for the messages. */
static const char *const lr_type_names[LR_T_N] = {
#define IR_TYPE(ID, NAME, DIM, DOC) NAME,
#include "types.def"
#undef IR_TYPE
};

/* The type of each row of enums.def: a value v of an enumerated type t is valid when t has more
 * than v rows. */
static const enum lr_type lr_enum_rows[] = {
#define IR_ENUM(T, ID, S, DOC) LR_T_##T,
#include "enums.def"
#undef IR_ENUM
};

/* Number of values of type t (0: t is not enumerated). */
static inline int lr_enum_count(enum lr_type t) {
  int n = 0;
  for (size_t i = 0; i < sizeof lr_enum_rows / sizeof *lr_enum_rows; i++) n += lr_enum_rows[i] == t;
  return n;
}

/* Parameters that the IR derives from others (ir_layer_derive) when they are not given: when
 * missing, the kind's relations say why they could not be derived. */
static inline bool lr_derived(int p) {
  return p == LR_P_ATTENTION_KV_HEADS || p == LR_P_ATTENTION_HEAD_DIM ||
         p == LR_P_ATTENTION_SCORE_DIM ||
         p == LR_P_MAMBA2_HEADS || p == LR_P_VIT_HEAD_DIM || p == LR_P_VIT_TOKENS;
}

/* Parameters that may stay unset, meaning none (an embedding's padding token): no default, and a
 * count of them may be 0. */
static inline bool lr_optional(int p) { return p == LR_P_EMBEDDING_PAD_ID; }

/* Receiver of the problems one check finds: each message once, without the layer's name. */
typedef struct lr_report {
  void (*problem)(void *ctx, const char *message);
  void *ctx;
  int count; /* problems reported so far */
} lr_report;

static void lr_problem(lr_report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void lr_problem(lr_report *r, const char *fmt, ...) {
  strbuf sb = {0};
  va_list ap;
  va_start(ap, fmt);
  strbuf_vprintf(&sb, fmt, ap);
  va_end(ap);
  r->problem(r->ctx, strbuf_cstr(&sb));
  strbuf_free(&sb);
  r->count++;
}

/* Both sides of a relation are known (a missing one is reported on its own). */
#define LR_KNOWN2(a, b) (!isnan(a) && !isnan(b))

/* The group-limited routing of moe parameters p (expert_groups > 1): groups that divide the
 * experts, at most 64, no more kept than there are, enough experts in the kept groups for top_k,
 * and two experts a group for sigmoid's group score. The first problem goes to r. */
static inline void lr_moe_groups(const double *p, lr_report *r) {
  double e = p[LR_P_MOE_EXPERTS], k = p[LR_P_MOE_TOP_K];
  double g = p[LR_P_MOE_EXPERT_GROUPS], tg = p[LR_P_MOE_TOPK_GROUPS];
  if (!LR_KNOWN2(g, tg) || g <= 1) return; /* no group-limited routing */
  if (!isnan(e) && fmod(e, g) != 0)
    lr_problem(r, "expert_groups = %g must divide experts = %g", g, e);
  else if (tg > g)
    lr_problem(r, "topk_groups = %g exceeds expert_groups = %g", tg, g);
  else if (LR_KNOWN2(e, k) && k > tg * (e / g))
    lr_problem(r, "top_k = %g exceeds the %g experts of topk_groups = %g groups", k,
               tg * (e / g), tg);
  else if (g > 64)
    lr_problem(r, "expert_groups = %g exceeds 64", g);
  else if (!isnan(e) && p[LR_P_MOE_SIGMOID] == 1 && e / g < 2)
    lr_problem(r, "sigmoid routing ranks a group by its two largest scores: expert_groups = %g "
               "leaves %g expert per group", g, e / g);
}

/* Check a layer of kind 'kind' (in range) whose parameters are p[0..LR_P_N) (NAN: not set;
 * only the kind's own are read): each one present unless derived or optional, each value finite, non-negative,
 * whole when its type is, at least 1 for a count whose default is not 0, positive for a number
 * whose default is not 0 (rope_theta, norm_eps; softcap's 0 is none), 0 or 1 for a boolean, a
 * value of its enumerated type; then the kind's relations. Each problem goes to r. Returns the
 * number found. */
static inline int lr_layer_check(int kind, const double *p, lr_report *r) {
  int before = r->count;
  for (int i = 0; i < LR_P_N; i++) {
    const lr_param_info *pi = &lr_params[i];
    double v = p[i];
    if ((int)pi->kind != kind) continue;
    if (isnan(v)) {
      if (!lr_derived(i) && !lr_optional(i))
        lr_problem(r, "missing '%s' (%s)", pi->name, pi->doc);
      continue;
    }
    int values = lr_enum_count(pi->type); /* 0 unless an enumeration */
    bool integral = pi->type == LR_T_COUNT || pi->type == LR_T_BOOL || values;
    if (!isfinite(v) || v < 0)
      lr_problem(r, "'%s' must be a finite non-negative %s", pi->name, lr_type_names[pi->type]);
    else if (integral && v != floor(v))
      lr_problem(r, "'%s' must be a whole number", pi->name);
    else if (pi->type == LR_T_COUNT && v == 0 && pi->def != 0 && !lr_optional(i))
      lr_problem(r, "'%s' must be at least 1", pi->name);
    else if (pi->type == LR_T_REAL && v == 0 && pi->def != 0) /* a base, an epsilon */
      lr_problem(r, "'%s' must be positive", pi->name);
    else if (pi->type == LR_T_BOOL && v > 1)
      lr_problem(r, "'%s' must be true or false", pi->name);
    else if (values && v >= values)
      lr_problem(r, "'%s' has no %s numbered %g", pi->name, lr_type_names[pi->type], v);
  }
  switch (kind) {
  case LR_KIND_EMBEDDING: {
    double pad = p[LR_P_EMBEDDING_PAD_ID], v = p[LR_P_EMBEDDING_VOCAB];
    if (LR_KNOWN2(pad, v) && pad >= v)
      lr_problem(r, "pad_id = %g is not a token of vocab = %g", pad, v);
    break;
  }
  case LR_KIND_ATTENTION: {
    double h = p[LR_P_ATTENTION_HEADS], kv = p[LR_P_ATTENTION_KV_HEADS];
    double hid = p[LR_P_ATTENTION_HIDDEN];
    if (LR_KNOWN2(h, kv) && kv > 0 && (kv > h || fmod(h, kv) != 0))
      lr_problem(r, "kv_heads = %g must divide heads = %g", kv, h);
    if (isnan(p[LR_P_ATTENTION_HEAD_DIM]) && LR_KNOWN2(h, hid) && h > 0 && fmod(hid, h) != 0)
      lr_problem(r, "heads = %g does not divide hidden = %g; give head_dim explicitly", h, hid);
    double seq = p[LR_P_ATTENTION_SEQ], win = p[LR_P_ATTENTION_WINDOW];
    if (LR_KNOWN2(seq, win) && win > seq)
      lr_problem(r, "window = %g is longer than seq = %g", win, seq);
    double lo = p[LR_P_ATTENTION_ROPE_LOW], hi = p[LR_P_ATTENTION_ROPE_HIGH];
    if (p[LR_P_ATTENTION_ROPE_FACTOR] != 1 && LR_KNOWN2(lo, hi) && !(hi > lo))
      lr_problem(r, "rope_high_freq_factor = %g must exceed rope_low_freq_factor = %g when "
                 "rope_factor is not 1", hi, lo);
    double fac = p[LR_P_ATTENTION_ROPE_FACTOR], lin = p[LR_P_ATTENTION_ROPE_LINEAR];
    if (LR_KNOWN2(fac, lin) && fac != 1 && lin != 1)
      lr_problem(r, "rope_factor = %g and rope_linear = %g are two rope scalings; give one", fac,
                 lin);
    break;
  }
  case LR_KIND_MOE: {
    double e = p[LR_P_MOE_EXPERTS], k = p[LR_P_MOE_TOP_K];
    if (LR_KNOWN2(e, k) && k > e) lr_problem(r, "top_k = %g exceeds experts = %g", k, e);
    if (p[LR_P_MOE_SHARED_GATE] == 1 && p[LR_P_MOE_SHARED] == 0)
      lr_problem(r, "shared_gate = true needs shared experts (shared_experts = 0)");
    if (p[LR_P_MOE_SCORE_BIAS] == 1 && p[LR_P_MOE_SIGMOID] == 0)
      lr_problem(r, "score_bias = true needs sigmoid = true (the bias shifts sigmoid scores)");
    lr_moe_groups(p, r);
    break;
  }
  case LR_KIND_MLA: {
    double rd = p[LR_P_MLA_ROPE_DIM];
    if (!isnan(rd) && fmod(rd, 2) != 0)
      lr_problem(r, "rope_dim = %g is odd: the rotary embedding turns pairs", rd);
    break;
  }
  case LR_KIND_MAMBA2: {
    double h = p[LR_P_MAMBA2_HEADS], g = p[LR_P_MAMBA2_GROUPS];
    double hd = p[LR_P_MAMBA2_HEAD_DIM];
    double inner = p[LR_P_MAMBA2_EXPAND] * p[LR_P_MAMBA2_HIDDEN];
    if (isnan(h) && LR_KNOWN2(inner, hd))
      lr_problem(r, "head_dim = %g does not divide expand * hidden = %g; give heads explicitly",
                 hd, inner);
    if (LR_KNOWN2(h, g) && g > 0 && fmod(h, g) != 0)
      lr_problem(r, "groups = %g must divide heads = %g", g, h);
    if (LR_KNOWN2(h, hd) && !isnan(inner) && h * hd != inner)
      lr_problem(r, "heads x head_dim = %g x %g must equal expand x hidden = %g", h, hd, inner);
    break;
  }
  case LR_KIND_VIT: {
    double img = p[LR_P_VIT_IMAGE], pat = p[LR_P_VIT_PATCH];
    if (LR_KNOWN2(img, pat) && pat > 0 && fmod(img, pat) != 0 && isnan(p[LR_P_VIT_TOKENS]))
      lr_problem(r, "patch = %g does not divide image = %g", pat, img);
    double h = p[LR_P_VIT_HEADS], hid = p[LR_P_VIT_HIDDEN];
    if (isnan(p[LR_P_VIT_HEAD_DIM]) && LR_KNOWN2(h, hid) && h > 0 && fmod(hid, h) != 0)
      lr_problem(r, "heads = %g does not divide hidden = %g; give head_dim explicitly", h, hid);
    break;
  }
  case LR_KIND_VIT_EMBED: {
    double img = p[LR_P_VIT_EMBED_IMAGE], pat = p[LR_P_VIT_EMBED_PATCH];
    if (LR_KNOWN2(img, pat) && pat > 0 && fmod(img, pat) != 0)
      lr_problem(r, "patch = %g does not divide image = %g", pat, img);
    break;
  }
  case LR_KIND_PROJECTOR:
    if (p[LR_P_PROJECTOR_DROP_CLASS] == 1 && p[LR_P_PROJECTOR_TOKENS] < 2)
      lr_problem(r, "drop_class = true needs tokens of at least 2 (the class token and one more)");
    break;
  default:
    break;
  }
  return r->count - before;
}

/* Index of the layer whose table a tied lm_head (tied = true) shares: the first embedding of
 * the model, whose kinds are kind_of(ctx, i) for i < n; -1 when it has none. */
static inline int lr_tie_source(int n, int (*kind_of)(const void *ctx, int i), const void *ctx) {
  for (int i = 0; i < n; i++)
    if (kind_of(ctx, i) == LR_KIND_EMBEDDING) return i;
  return -1;
}

/* The rule of a tied lm_head (parameters ph, its index head) and its source (lr_tie_source:
 * index src, name sname, parameters ps; both NULL when src < 0): the source exists, comes
 * before the head, and has the head's vocab and hidden. Each problem goes to r. Returns the
 * number found. */
static inline int lr_tie_check(int head, const double *ph, int src, const char *sname,
                               const double *ps, lr_report *r) {
  int before = r->count;
  if (src < 0 || src > head) {
    lr_problem(r, "tied = true needs an embedding layer before it, whose table it shares");
    return r->count - before;
  }
  double v = ph[LR_P_LM_HEAD_VOCAB], h = ph[LR_P_LM_HEAD_HIDDEN];
  double sv = ps[LR_P_EMBEDDING_VOCAB], sh = ps[LR_P_EMBEDDING_HIDDEN];
  if (LR_KNOWN2(v, sv) && v != sv)
    lr_problem(r, "tied = true shares the table of layer '%s', whose vocab = %g is not %g",
               sname, sv, v);
  if (LR_KNOWN2(h, sh) && h != sh)
    lr_problem(r, "tied = true shares the table of layer '%s', whose hidden = %g is not %g",
               sname, sh, h);
  return r->count - before;
}

#endif
