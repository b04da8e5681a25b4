/* profile.c -- profile files: measured per-layer costs in JSON (format "octopipe-profile",
 * version 1, docs/cost-model.md) that replace analytic estimates per layer kind and per layer
 * name, checked against the layer shapes they were measured with, and the measuring run's scale,
 * backend and point-to-point link, which set the module's train scale and measured_on and
 * replace its links. A strict syntax check (support_json_check) finds the exact byte of a syntax
 * error, cJSON builds the tree, and every other problem is reported at its key in the file (line
 * and column found by support_json_locate over the raw text) with its JSON path. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cost.h"

#define PROF_FORMAT "octopipe-profile"
#define PROF_VERSION 1
#define PROF_MAX_DEPTH 4 /* below the top level: kinds|layers, name, field|shape, parameter */

/* A cost field of a profile entry: its JSON key, the cost record field it sets, and the scale
 * of the JSON number in base units (seconds, bytes). */
typedef struct prof_field {
  const char *key; /* JSON key */
  int field;       /* IR_F_COST_* */
  double scale;    /* value of 1 in base units */
} prof_field;

static const prof_field prof_fields[] = {
    {"f_ms", IR_F_COST_f, 1e-3},          {"b_ms", IR_F_COST_b, 1e-3},
    {"w_ms", IR_F_COST_w, 1e-3},          {"act_bytes", IR_F_COST_act, 1},
    {"act_w_bytes", IR_F_COST_act_w, 1},  {"out_bytes", IR_F_COST_out, 1},
    {"param_bytes", IR_F_COST_param, 1},  {"grad_bytes", IR_F_COST_grad, 1},
};
#define PROF_NFIELDS (int)(sizeof prof_fields / sizeof prof_fields[0])

/* Top-level keys of a profile. */
typedef enum prof_key {
  PK_FORMAT, PK_VERSION, PK_DEVICE, PK_MICRO_BATCH, PK_SEQ, PK_TENSOR, PK_DTYPE, PK_SCALE,
  PK_BACKEND, PK_LINK, PK_OPTIMIZER, PK_KINDS, PK_LAYERS, PK_COUNT
} prof_key;
static const char *const prof_keys[PK_COUNT] = {
    "format", "version", "device", "micro_batch", "seq", "tensor", "dtype", "scale", "backend",
    "link", "optimizer_gbs", "kinds", "layers"};

/* The key of a cost entry that holds the layer shape it was measured with. */
#define PROF_SHAPE "shape"

/* Keys of the "link" object: its JSON key, the link record field it sets, and the scale of the
 * JSON number in base units (bytes per second, seconds). */
static const prof_field prof_link_fields[] = {
    {"bw_gbs", IR_F_LINK_bw, 1e9},
    {"lat_us", IR_F_LINK_lat, 1e-6},
};
#define PROF_NLINK (int)(sizeof prof_link_fields / sizeof prof_link_fields[0])

/* A path from the top-level object down to one member: member indices (for locating the key in
 * the text) and keys (for messages). */
typedef struct prof_path {
  int depth;                         /* members below the top level (0: the top level) */
  int index[PROF_MAX_DEPTH];         /* position of each member in its object */
  const char *key[PROF_MAX_DEPTH];   /* its key */
} prof_path;

/* A layer's name and index, for sorting and binary search. */
typedef struct prof_named {
  const char *name; /* layer name */
  int index;        /* layer index in the module */
} prof_named;

/* State of reading one profile file. */
typedef struct prof_ctx {
  ir_module *m;        /* module the profile applies to */
  const bool *apply;   /* layers it may change (NULL: all) */
  diag_engine *d;      /* where problems go */
  uint32_t src;        /* source id of the file */
  const char *text;    /* its text */
  size_t len;          /* its length */
  prof_named *order;   /* the layers sorted by name, then index (for lookups) */
} prof_ctx;

/* The "shape" of a cost entry: the layer kind and parameters it was measured with. */
typedef struct prof_shape {
  bool given;                  /* the entry has a "shape" */
  int kind;                    /* measured kind (ir_layer_kind) */
  double p[IR_LP_COUNT];       /* measured parameters, indexed like ir_layer.p (NAN: not given) */
  prof_path kind_path;         /* path of its "kind" key */
  prof_path path[IR_LP_COUNT]; /* path of each given parameter's key */
  bool kind_reported;          /* a kind mismatch was reported (once per entry) */
  bool reported[IR_LP_COUNT];  /* a mismatch of that parameter was reported (once per entry) */
} prof_shape;

/* ---- Paths and their locations in the file ---- */

/* Diagnostic location of byte 'off' of the file, spanning 'len' bytes. */
static diag_loc prof_loc(const prof_ctx *c, size_t off, size_t len) {
  return diag_offset_loc(c->d, c->src, off, (uint32_t)len);
}

/* Whether a key can be written bare in a path (an identifier). */
static bool path_bare(const char *k) {
  if (!(k[0] == '_' || (k[0] >= 'a' && k[0] <= 'z') || (k[0] >= 'A' && k[0] <= 'Z'))) return false;
  for (const char *q = k; *q; q++)
    if (!(*q == '_' || (*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') ||
          (*q >= '0' && *q <= '9')))
      return false;
  return true;
}

/* Append path p as text: keys joined with '.', quoted (JSON escapes) unless identifiers. */
static void path_text(strbuf *sb, const prof_path *p) {
  for (int k = 0; k < p->depth; k++) {
    if (k) strbuf_putc(sb, '.');
    const char *key = p->key[k];
    if (path_bare(key)) {
      strbuf_puts(sb, key);
      continue;
    }
    strbuf_putc(sb, '"');
    for (const unsigned char *q = (const unsigned char *)key; *q; q++) {
      if (*q == '"' || *q == '\\') strbuf_printf(sb, "\\%c", *q);
      else if (*q < 32) strbuf_printf(sb, "\\u%04x", *q);
      else strbuf_putc(sb, (char)*q);
    }
    strbuf_putc(sb, '"');
  }
}

/* Report an error at path p: "PATH: message" at the path's key (the file's start when the
 * path cannot be located; the top level's message has no prefix). */
static void perr(prof_ctx *c, const prof_path *p, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void perr(prof_ctx *c, const prof_path *p, const char *fmt, ...) {
  strbuf sb = {0};
  path_text(&sb, p);
  if (p->depth) strbuf_puts(&sb, ": ");
  va_list ap;
  va_start(ap, fmt);
  strbuf_vprintf(&sb, fmt, ap);
  va_end(ap);
  size_t off = 0, len = 1;
  diag_loc at = support_json_locate(c->text, c->len, p->index, p->depth, &off, &len)
                    ? prof_loc(c, off, len)
                    : diag_mkloc(c->src, 1, 1, 0);
  diag_error(c->d, at, "%s", strbuf_cstr(&sb));
  strbuf_free(&sb);
}

/* Path p extended by member 'index' with key 'key'. */
static prof_path path_child(const prof_path *p, int index, const char *key) {
  prof_path q = *p;
  if (q.depth < PROF_MAX_DEPTH) {
    q.index[q.depth] = index;
    q.key[q.depth] = key;
    q.depth++;
  }
  return q;
}

/* What a JSON value is called in messages. */
static const char *json_type(const cJSON *v) {
  if (cJSON_IsObject(v)) return "an object";
  if (cJSON_IsArray(v)) return "an array";
  if (cJSON_IsString(v)) return "a string";
  if (cJSON_IsNumber(v)) return "a number";
  if (cJSON_IsBool(v)) return "a boolean";
  return "null";
}

/* ---- Checking values ---- */

/* One member of an object with its position. */
typedef struct prof_member {
  const cJSON *item; /* the member */
  int index;         /* its position in the object */
} prof_member;

/* qsort order of members: by key, then by position. */
static int cmp_prof_member(const void *a, const void *b) {
  const prof_member *x = a, *y = b;
  int r = strcmp(x->item->string, y->item->string);
  return r ? r : (x->index > y->index) - (x->index < y->index);
}

/* Members of object 'obj' whose key occurred earlier in it: returns a malloc'd array of *count
 * flags, true for each such member (callers report it as a duplicate and skip it). */
static bool *find_duplicates(const cJSON *obj, int *count) {
  int n = cJSON_GetArraySize(obj);
  *count = n;
  bool *dup = xcalloc((size_t)(n > 0 ? n : 1), sizeof *dup);
  prof_member *ms = xcalloc((size_t)(n > 0 ? n : 1), sizeof *ms);
  int i = 0;
  for (const cJSON *it = obj->child; it && i < n; it = it->next, i++) ms[i] = (prof_member){it, i};
  qsort(ms, (size_t)n, sizeof *ms, cmp_prof_member);
  for (i = 1; i < n; i++)
    if (strcmp(ms[i].item->string, ms[i - 1].item->string) == 0) dup[ms[i].index] = true;
  free(ms);
  return dup;
}

/* A number >= 0 (finite) at path p, or an error. */
static bool get_nonneg(prof_ctx *c, const prof_path *p, const cJSON *v, double *out) {
  if (!cJSON_IsNumber(v)) {
    perr(c, p, "expected a number, found %s", json_type(v));
    return false;
  }
  if (!isfinite(v->valuedouble)) {
    perr(c, p, "the number is out of range");
    return false;
  }
  if (v->valuedouble < 0) {
    perr(c, p, "must be >= 0, found %.17g", v->valuedouble);
    return false;
  }
  *out = v->valuedouble;
  return true;
}

/* A whole number >= 1 at path p, or an error. */
static bool get_count(prof_ctx *c, const prof_path *p, const cJSON *v, double *out) {
  if (!cJSON_IsNumber(v)) {
    perr(c, p, "expected a whole number, found %s", json_type(v));
    return false;
  }
  double x = v->valuedouble;
  if (!isfinite(x) || x < 1 || x != floor(x) || x > 9007199254740992.0) {
    perr(c, p, "expected a whole number from 1 to 2^53, found %.17g", x);
    return false;
  }
  *out = x;
  return true;
}

/* Report a name that matches none of 'n' candidates, with the closest one. */
static void unknown_name(prof_ctx *c, const prof_path *p, const char *what,
                         const char *const *cands, int n, const char *name) {
  suggest sg;
  suggest_init(&sg, name);
  for (int i = 0; i < n; i++) suggest_add(&sg, cands[i]);
  if (suggest_result(&sg))
    perr(c, p, "%s (did you mean '%s'?)", what, suggest_result(&sg));
  else
    perr(c, p, "%s", what);
}

/* ---- Set-up fields ---- */

/* Check a whole-number set-up key against train field f. */
static void check_count_field(prof_ctx *c, const prof_path *p, const cJSON *v, int f) {
  double x;
  if (!get_count(c, p, v, &x)) return;
  double want = ir_field_value(&c->m->train, f);
  if (isnan(want) || x == want) return;
  perr(c, p, "profile measured with %s = %g, but the module trains with %s = %g",
       ir_fields[f].name, x, ir_fields[f].name, want);
}

/* Check the "dtype" key: a data type name equal to the module's. */
static void check_dtype(prof_ctx *c, const prof_path *p, const cJSON *v) {
  if (!cJSON_IsString(v)) {
    perr(c, p, "expected a string, found %s", json_type(v));
    return;
  }
  int dt = ir_enum_lookup(IR_T_DTYPE, v->valuestring);
  if (dt < 0) {
    const char *names[16];
    int n = 0;
    for (int i = 0; i < ir_enum_value_count && n < 16; i++)
      if (ir_enum_values[i].type == IR_T_DTYPE) names[n++] = ir_enum_values[i].name;
    strbuf sb = {0};
    strbuf_printf(&sb, "unknown data type '%s'", v->valuestring);
    unknown_name(c, p, strbuf_cstr(&sb), names, n, v->valuestring);
    strbuf_free(&sb);
    return;
  }
  int want = (int)ir_field_value(&c->m->train, IR_F_TRAIN_dtype);
  if (dt != want)
    perr(c, p, "profile measured in %s, but the module trains in %s", v->valuestring,
         ir_enum_name(IR_T_DTYPE, want));
}

/* Check the "device" key: a string equal to device 0's type (when the module has devices). */
static void check_device(prof_ctx *c, const prof_path *p, const cJSON *v) {
  if (!cJSON_IsString(v)) {
    perr(c, p, "expected a string, found %s", json_type(v));
    return;
  }
  if (c->m->ndevices == 0) return; /* nothing to compare with */
  if (strcmp(v->valuestring, c->m->devices[0].type) != 0)
    perr(c, p, "profile measured on '%s', but the pipeline's device is '%s'", v->valuestring,
         c->m->devices[0].type);
}

/* The article of a layer kind's name in messages ("an attention", "a mlp"). */
static const char *kind_article(int kind) {
  return strchr("aeiou", ir_kinds[kind].name[0]) ? "an" : "a";
}

/* The "scale" key: a whole number >= 1 that sets the module's train scale; a module one profile
 * already set to another scale is an error. */
static void apply_scale(prof_ctx *c, const prof_path *p, const cJSON *v) {
  double x;
  if (!get_count(c, p, v, &x)) return;
  ir_train *t = &c->m->train;
  if (ir_field_is_set(t, IR_F_TRAIN_scale) && t->scale >= 1 && (double)t->scale != x) {
    perr(c, p, "profile measured at scale %g, but an earlier profile of this module at scale %lld",
         x, (long long)t->scale);
    return;
  }
  ir_field_set(t, IR_F_TRAIN_scale, x);
}

/* The "backend" key: a backend name other than "none" that sets the module's train
 * measured_on; a module one profile already set to another backend is an error. */
static void apply_backend(prof_ctx *c, const prof_path *p, const cJSON *v) {
  if (!cJSON_IsString(v)) {
    perr(c, p, "expected a string, found %s", json_type(v));
    return;
  }
  int b = ir_enum_lookup(IR_T_BACKEND, v->valuestring);
  if (b == IR_BACKEND_NONE) {
    perr(c, p, "'none' is not a backend that measures (expected 'cpu', 'mpi', 'cuda' or 'nccl')");
    return;
  }
  if (b < 0) {
    const char *names[16];
    int n = 0;
    for (int i = 0; i < ir_enum_value_count && n < 16; i++)
      if (ir_enum_values[i].type == IR_T_BACKEND && ir_enum_values[i].value != IR_BACKEND_NONE)
        names[n++] = ir_enum_values[i].name;
    strbuf sb = {0};
    strbuf_printf(&sb, "unknown backend '%s'", v->valuestring);
    unknown_name(c, p, strbuf_cstr(&sb), names, n, v->valuestring);
    strbuf_free(&sb);
    return;
  }
  ir_train *t = &c->m->train;
  if (ir_field_is_set(t, IR_F_TRAIN_measured_on) && t->measured_on != IR_BACKEND_NONE &&
      t->measured_on != b) {
    perr(c, p, "profile measured on %s, but an earlier profile of this module on %s",
         v->valuestring, ir_enum_name(IR_T_BACKEND, (int)t->measured_on));
    return;
  }
  ir_field_set(t, IR_F_TRAIN_measured_on, b);
}

/* The "optimizer_gbs" key: a number > 0, the optimizer step's measured rate in GB/s (2 x the
 * parameter, gradient and optimizer-state bytes per second, as the simulator counts it); sets
 * the module's train optim_bw, which the simulator uses instead of the device's hbm. */
static void apply_optimizer(prof_ctx *c, const prof_path *p, const cJSON *v) {
  double x;
  if (!get_nonneg(c, p, v, &x)) return;
  if (!(x > 0)) {
    perr(c, p, "must be > 0, found %.17g", x);
    return;
  }
  ir_field_set(&c->m->train, IR_F_TRAIN_optim_bw, x * 1e9);
}

/* The "link" key: an object of prof_link_fields keys, both required (bw_gbs > 0, lat_us >= 0),
 * that replaces the bandwidth and latency of the module's intra and inter links (setting them
 * when absent) and of every explicit device-pair link. */
static void apply_link(prof_ctx *c, const prof_path *p, const cJSON *v) {
  if (!cJSON_IsObject(v)) {
    perr(c, p, "expected an object with \"bw_gbs\" and \"lat_us\", found %s", json_type(v));
    return;
  }
  int n;
  bool *dup = find_duplicates(v, &n);
  bool ok = true, given[PROF_NLINK] = {false};
  double val[PROF_NLINK] = {0};
  int i = 0;
  for (const cJSON *it = v->child; it; it = it->next, i++) {
    prof_path q = path_child(p, i, it->string);
    if (dup[i]) {
      perr(c, &q, "duplicate key");
      ok = false;
      continue;
    }
    int f;
    for (f = 0; f < PROF_NLINK; f++)
      if (strcmp(it->string, prof_link_fields[f].key) == 0) break;
    if (f == PROF_NLINK) {
      const char *keys[PROF_NLINK];
      for (int k = 0; k < PROF_NLINK; k++) keys[k] = prof_link_fields[k].key;
      unknown_name(c, &q, "unknown link key", keys, PROF_NLINK, it->string);
      ok = false;
      continue;
    }
    given[f] = true;
    if (!get_nonneg(c, &q, it, &val[f])) {
      ok = false;
      continue;
    }
    if (prof_link_fields[f].field == IR_F_LINK_bw && !(val[f] > 0)) {
      perr(c, &q, "must be > 0, found %.17g", val[f]);
      ok = false;
    }
  }
  free(dup);
  for (int f = 0; f < PROF_NLINK; f++)
    if (!given[f]) {
      perr(c, p, "missing key \"%s\"", prof_link_fields[f].key);
      ok = false;
    }
  if (!ok) return;
  ir_module *m = c->m;
  for (int f = 0; f < PROF_NLINK; f++) {
    double x = scale_apply(val[f], prof_link_fields[f].scale);
    ir_field_set(&m->intra, prof_link_fields[f].field, x);
    ir_field_set(&m->inter, prof_link_fields[f].field, x);
    for (int k = 0; k < m->nlinks; k++)
      ir_field_set(&m->links[k].rec, prof_link_fields[f].field, x);
  }
}

/* ---- Shapes ---- */

/* Read the value of layer parameter 'param' at path p into *out: an enum name for enumerated
 * types, true/false (or 0/1) for booleans, a whole number >= 0 for counts, else a number >= 0
 * in base units. Returns false after reporting a problem. */
static bool read_param(prof_ctx *c, const prof_path *p, const cJSON *v, int param, double *out) {
  ir_type t = ir_layer_params[param].type;
  if (ir_type_is_enum(t)) {
    if (!cJSON_IsString(v)) {
      perr(c, p, "expected a string, found %s", json_type(v));
      return false;
    }
    int e = ir_enum_lookup(t, v->valuestring);
    if (e < 0) {
      const char *names[16];
      int n = 0;
      for (int i = 0; i < ir_enum_value_count && n < 16; i++)
        if (ir_enum_values[i].type == t) names[n++] = ir_enum_values[i].name;
      strbuf sb = {0};
      strbuf_printf(&sb, "unknown %s '%s'", ir_types[t].name, v->valuestring);
      unknown_name(c, p, strbuf_cstr(&sb), names, n, v->valuestring);
      strbuf_free(&sb);
      return false;
    }
    *out = e;
    return true;
  }
  if (t == IR_T_BOOL) {
    if (cJSON_IsBool(v)) {
      *out = cJSON_IsTrue(v) ? 1 : 0;
      return true;
    }
    if (cJSON_IsNumber(v) && (v->valuedouble == 0 || v->valuedouble == 1)) {
      *out = v->valuedouble;
      return true;
    }
    if (cJSON_IsNumber(v))
      perr(c, p, "expected true or false, found %.17g", v->valuedouble);
    else
      perr(c, p, "expected true or false, found %s", json_type(v));
    return false;
  }
  if (!get_nonneg(c, p, v, out)) return false;
  if (t == IR_T_COUNT && *out != floor(*out)) {
    perr(c, p, "expected a whole number >= 0, found %.17g", *out);
    return false;
  }
  if (t == IR_T_COUNT && *out > 9007199254740992.0) { /* 2^53: beyond it not every whole number */
    perr(c, p, "the number is out of range");
    return false;
  }
  return true;
}

/* Read the "shape" object at path p into *s: its "kind" (required, a layer kind name) and
 * parameters of that kind. Returns false after reporting a problem. */
static bool read_shape(prof_ctx *c, const prof_path *p, const cJSON *v, prof_shape *s) {
  s->given = true;
  s->kind = -1;
  for (int k = 0; k < IR_LP_COUNT; k++) s->p[k] = NAN;
  if (!cJSON_IsObject(v)) {
    perr(c, p, "expected an object of the layer's kind and parameters, found %s", json_type(v));
    return false;
  }
  int n;
  bool *dup = find_duplicates(v, &n);
  const cJSON *kind = NULL;
  int i = 0;
  for (const cJSON *it = v->child; it; it = it->next, i++)
    if (!dup[i] && strcmp(it->string, "kind") == 0) {
      kind = it;
      s->kind_path = path_child(p, i, it->string);
    }
  bool ok = true;
  if (!kind) {
    perr(c, p, "missing key \"kind\" (the kind of the layer measured)");
    ok = false;
  } else if (!cJSON_IsString(kind)) {
    perr(c, &s->kind_path, "expected a string, found %s", json_type(kind));
    ok = false;
  } else if ((s->kind = ir_kind_lookup(kind->valuestring)) < 0) {
    const char *names[IR_KIND_COUNT];
    for (int k = 0; k < IR_KIND_COUNT; k++) names[k] = ir_kinds[k].name;
    strbuf sb = {0};
    strbuf_printf(&sb, "unknown layer kind '%s'", kind->valuestring);
    unknown_name(c, &s->kind_path, strbuf_cstr(&sb), names, IR_KIND_COUNT, kind->valuestring);
    strbuf_free(&sb);
    ok = false;
  }
  i = 0;
  for (const cJSON *it = v->child; it; it = it->next, i++) {
    prof_path q = path_child(p, i, it->string);
    if (dup[i]) {
      perr(c, &q, "duplicate key");
      ok = false;
      continue;
    }
    if (it == kind || s->kind < 0) continue; /* parameters need a kind to be named by */
    int param = ir_param_lookup((ir_layer_kind)s->kind, it->string);
    if (param < 0) {
      const char *names[IR_LP_COUNT + 1];
      int first = ir_kind_first_param((ir_layer_kind)s->kind);
      int np = ir_kind_nparams((ir_layer_kind)s->kind);
      for (int k = 0; k < np; k++) names[k] = ir_layer_params[first + k].name;
      names[np] = "kind";
      strbuf sb = {0};
      strbuf_printf(&sb, "unknown parameter of %s %s layer", kind_article(s->kind),
                    ir_kinds[s->kind].name);
      unknown_name(c, &q, strbuf_cstr(&sb), names, np + 1, it->string);
      strbuf_free(&sb);
      ok = false;
      continue;
    }
    if (!read_param(c, &q, it, param, &s->p[param])) {
      ok = false;
      continue;
    }
    s->path[param] = q;
  }
  free(dup);
  return ok;
}

/* Check layer l against shape s: the same kind, and every parameter both give equal. Reports
 * each disagreement once per entry; returns whether l matches. */
static bool shape_matches(prof_ctx *c, prof_shape *s, const ir_layer *l) {
  if ((int)l->kind != s->kind) {
    if (!s->kind_reported)
      perr(c, &s->kind_path, "profile measured %s %s layer, but '%s' is %s %s layer",
           kind_article(s->kind), ir_kinds[s->kind].name, l->name, kind_article((int)l->kind),
           ir_kinds[l->kind].name);
    s->kind_reported = true;
    return false;
  }
  bool ok = true;
  int first = ir_kind_first_param(l->kind), np = ir_kind_nparams(l->kind);
  for (int k = first; k < first + np; k++) {
    if (isnan(s->p[k]) || isnan(l->p[k]) || s->p[k] == l->p[k]) continue;
    ok = false;
    if (s->reported[k]) continue;
    s->reported[k] = true;
    strbuf want = {0}, have = {0};
    ir_format_value(&want, ir_layer_params[k].type, s->p[k]);
    ir_format_value(&have, ir_layer_params[k].type, l->p[k]);
    perr(c, &s->path[k], "profile measured with %s = %s, but layer '%s' has %s = %s",
         ir_layer_params[k].name, strbuf_cstr(&want), l->name, ir_layer_params[k].name,
         strbuf_cstr(&have));
    strbuf_free(&want);
    strbuf_free(&have);
  }
  return ok;
}

/* ---- Entries ---- */

/* Read a cost entry (object of prof_fields keys and an optional "shape") at path p into *out
 * (only given fields set) and *shape. Returns false after reporting a problem. */
static bool read_entry(prof_ctx *c, const prof_path *p, const cJSON *v, ir_cost *out,
                       prof_shape *shape) {
  memset(out, 0, sizeof *out);
  memset(shape, 0, sizeof *shape);
  if (!cJSON_IsObject(v)) {
    perr(c, p, "expected an object of costs, found %s", json_type(v));
    return false;
  }
  int n;
  bool *dup = find_duplicates(v, &n);
  bool ok = true;
  int i = 0;
  for (const cJSON *it = v->child; it; it = it->next, i++) {
    prof_path q = path_child(p, i, it->string);
    if (dup[i]) {
      perr(c, &q, "duplicate key");
      ok = false;
      continue;
    }
    if (strcmp(it->string, PROF_SHAPE) == 0) {
      if (!read_shape(c, &q, it, shape)) ok = false;
      continue;
    }
    int f;
    for (f = 0; f < PROF_NFIELDS; f++)
      if (strcmp(it->string, prof_fields[f].key) == 0) break;
    if (f == PROF_NFIELDS) {
      const char *keys[PROF_NFIELDS + 1];
      for (int k = 0; k < PROF_NFIELDS; k++) keys[k] = prof_fields[k].key;
      keys[PROF_NFIELDS] = PROF_SHAPE;
      unknown_name(c, &q, "unknown cost key", keys, PROF_NFIELDS + 1, it->string);
      ok = false;
      continue;
    }
    double x;
    if (!get_nonneg(c, &q, it, &x)) {
      ok = false;
      continue;
    }
    ir_field_set(out, prof_fields[f].field, scale_apply(x, prof_fields[f].scale));
  }
  free(dup);
  return ok;
}

/* Apply entry e to layer l: *merged receives l's cost record with e's fields set over it; l
 * takes it unless it would keep more after B than until B (act_w > act: returns false, l is
 * unchanged). */
static bool apply_entry(ir_layer *l, const ir_cost *e, ir_cost *merged) {
  ir_cost r = l->cost;
  int first, n;
  ir_record_fields(IR_REC_COST, &first, &n);
  for (int f = first; f < first + n; f++)
    if (ir_field_is_set(e, f)) ir_field_set(&r, f, ir_field_get(e, f));
  *merged = r;
  if (ir_field_is_set(&r, IR_F_COST_act) && ir_field_is_set(&r, IR_F_COST_act_w) &&
      r.act_w > r.act)
    return false;
  l->cost = r;
  return true;
}

/* Apply entry e to layer i when allowed; reports act_w > act once per entry via *bad. */
static void apply_to(prof_ctx *c, const prof_path *p, int i, const ir_cost *e, bool *bad) {
  if (c->apply && !c->apply[i]) return;
  ir_layer *l = &c->m->layers[i];
  ir_cost r;
  if (apply_entry(l, e, &r) || *bad) return;
  *bad = true;
  perr(c, p, "act_w = %.17g bytes would exceed act = %.17g bytes of layer '%s'", r.act_w, r.act,
       l->name);
}

/* qsort order of layers: by name, then by index. */
static int cmp_named(const void *a, const void *b) {
  const prof_named *x = a, *y = b;
  int r = strcmp(x->name, y->name);
  return r ? r : (x->index > y->index) - (x->index < y->index);
}

/* First position in c->order of a layer named 'name', or -1. */
static int find_layer(const prof_ctx *c, const char *name) {
  int lo = 0, hi = c->m->nlayers;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    if (strcmp(c->order[mid].name, name) < 0) lo = mid + 1;
    else hi = mid;
  }
  return lo < c->m->nlayers && strcmp(c->order[lo].name, name) == 0 ? lo : -1;
}

/* The "kinds" object (by_kind) or the "layers" object at path p: each valid entry is applied to
 * every layer of its kind, or to the layers of its name (those c->apply allows), unless its
 * shape disagrees with one of them. */
static void entries_section(prof_ctx *c, const prof_path *p, const cJSON *v, bool by_kind) {
  if (!cJSON_IsObject(v)) {
    perr(c, p, "expected an object of layer %s, found %s", by_kind ? "kinds" : "names",
         json_type(v));
    return;
  }
  int n;
  bool *dup = find_duplicates(v, &n);
  int *targets = xmalloc((size_t)(c->m->nlayers > 0 ? c->m->nlayers : 1) * sizeof *targets);
  int i = 0;
  for (const cJSON *it = v->child; it; it = it->next, i++) {
    prof_path q = path_child(p, i, it->string);
    if (dup[i]) {
      perr(c, &q, "duplicate key");
      continue;
    }
    /* by kind: the kind's index; by name: the first position in c->order */
    int key = by_kind ? ir_kind_lookup(it->string) : find_layer(c, it->string);
    if (key < 0 && by_kind) {
      const char *names[IR_KIND_COUNT];
      for (int j = 0; j < IR_KIND_COUNT; j++) names[j] = ir_kinds[j].name;
      unknown_name(c, &q, "unknown layer kind", names, IR_KIND_COUNT, it->string);
      continue;
    }
    if (key < 0) {
      suggest sg;
      suggest_init(&sg, it->string);
      for (int l = 0; l < c->m->nlayers; l++) suggest_add(&sg, c->m->layers[l].name);
      if (suggest_result(&sg))
        perr(c, &q, "no layer of that name (did you mean '%s'?)", suggest_result(&sg));
      else
        perr(c, &q, "no layer of that name");
      continue;
    }
    ir_cost e;
    prof_shape shape;
    if (!read_entry(c, &q, it, &e, &shape)) continue;
    /* the layers the entry applies to */
    int nt = 0;
    if (by_kind) {
      for (int l = 0; l < c->m->nlayers; l++)
        if ((int)c->m->layers[l].kind == key && (!c->apply || c->apply[l])) targets[nt++] = l;
    } else {
      for (int k = key; k < c->m->nlayers && strcmp(c->order[k].name, it->string) == 0; k++)
        if (!c->apply || c->apply[c->order[k].index]) targets[nt++] = c->order[k].index;
    }
    bool fits = true;
    for (int t = 0; t < nt && shape.given; t++)
      if (!shape_matches(c, &shape, &c->m->layers[targets[t]])) fits = false;
    if (!fits) continue;
    bool bad = false;
    for (int t = 0; t < nt; t++) apply_to(c, &q, targets[t], &e, &bad);
  }
  free(targets);
  free(dup);
}

/* ---- The file ---- */

/* Check that the file is one JSON value (support_json_check: strict, for exact error positions);
 * on failure report the first error at its byte. */
static bool syntax_ok(prof_ctx *c) {
  size_t at;
  const char *msg;
  if (support_json_check(c->text, c->len, &at, &msg)) return true;
  if (at >= c->len) {
    diag_error(c->d, prof_loc(c, c->len, 1), "malformed JSON: %s, found the end of the file",
               msg);
    return false;
  }
  unsigned char ch = (unsigned char)c->text[at];
  if (ch >= 32 && ch < 127)
    diag_error(c->d, prof_loc(c, at, 1), "malformed JSON: %s, found '%c'", msg, ch);
  else
    diag_error(c->d, prof_loc(c, at, 1), "malformed JSON: %s, found byte 0x%02x", msg, ch);
  return false;
}

/* Check the header and set-up keys, apply scale, backend and link, then kinds and layers. */
static void read_profile(prof_ctx *c, const cJSON *root) {
  prof_path top = {0};
  if (!cJSON_IsObject(root)) {
    perr(c, &top, "a profile is a JSON object, found %s", json_type(root));
    return;
  }
  int n;
  bool *dup = find_duplicates(root, &n);
  const cJSON *val[PK_COUNT] = {0};
  int idx[PK_COUNT] = {0};
  int i = 0;
  for (const cJSON *it = root->child; it; it = it->next, i++) {
    if (dup[i]) {
      prof_path q = path_child(&top, i, it->string);
      perr(c, &q, "duplicate key");
      continue;
    }
    int k;
    for (k = 0; k < PK_COUNT; k++)
      if (strcmp(it->string, prof_keys[k]) == 0) break;
    if (k == PK_COUNT) {
      prof_path q = path_child(&top, i, it->string);
      unknown_name(c, &q, "unknown key", prof_keys, PK_COUNT, it->string);
      continue;
    }
    val[k] = it;
    idx[k] = i;
  }
  free(dup);
  prof_path pk[PK_COUNT];
  for (int k = 0; k < PK_COUNT; k++) pk[k] = path_child(&top, idx[k], prof_keys[k]);
  /* format and version first: without them the file is not a profile */
  if (!val[PK_FORMAT]) {
    perr(c, &top, "not an OctoPipe profile: missing key \"format\": \"" PROF_FORMAT "\"");
    return;
  }
  if (!cJSON_IsString(val[PK_FORMAT]) || strcmp(val[PK_FORMAT]->valuestring, PROF_FORMAT) != 0) {
    perr(c, &pk[PK_FORMAT], "expected \"" PROF_FORMAT "\"");
    return;
  }
  if (!val[PK_VERSION]) {
    perr(c, &top, "missing key \"version\" (this compiler reads version %d)", PROF_VERSION);
    return;
  }
  if (!cJSON_IsNumber(val[PK_VERSION]) || val[PK_VERSION]->valuedouble != PROF_VERSION) {
    if (cJSON_IsNumber(val[PK_VERSION]))
      perr(c, &pk[PK_VERSION], "unsupported profile version %.17g (this compiler reads version %d)",
           val[PK_VERSION]->valuedouble, PROF_VERSION);
    else
      perr(c, &pk[PK_VERSION], "expected a number, found %s", json_type(val[PK_VERSION]));
    return;
  }
  if (val[PK_DEVICE]) check_device(c, &pk[PK_DEVICE], val[PK_DEVICE]);
  if (val[PK_MICRO_BATCH])
    check_count_field(c, &pk[PK_MICRO_BATCH], val[PK_MICRO_BATCH], IR_F_TRAIN_micro_batch);
  if (val[PK_SEQ]) check_count_field(c, &pk[PK_SEQ], val[PK_SEQ], IR_F_TRAIN_seq);
  if (val[PK_TENSOR]) check_count_field(c, &pk[PK_TENSOR], val[PK_TENSOR], IR_F_TRAIN_tensor);
  if (val[PK_DTYPE]) check_dtype(c, &pk[PK_DTYPE], val[PK_DTYPE]);
  if (val[PK_SCALE]) apply_scale(c, &pk[PK_SCALE], val[PK_SCALE]);
  if (val[PK_BACKEND]) apply_backend(c, &pk[PK_BACKEND], val[PK_BACKEND]);
  if (val[PK_LINK]) apply_link(c, &pk[PK_LINK], val[PK_LINK]);
  if (val[PK_OPTIMIZER]) apply_optimizer(c, &pk[PK_OPTIMIZER], val[PK_OPTIMIZER]);
  if (val[PK_KINDS]) entries_section(c, &pk[PK_KINDS], val[PK_KINDS], true);
  if (val[PK_LAYERS]) entries_section(c, &pk[PK_LAYERS], val[PK_LAYERS], false);
}

int cost_profile_apply(ir_module *m, const char *path, const bool *apply, diag_loc from,
                       diag_engine *d) {
  int errors = diag_error_count(d);
  uint32_t src = diag_load_file(d, path, from);
  if (!src) return diag_error_count(d) - errors;
  const diag_source *s = diag_get_source(d, src);
  prof_ctx c = {m, apply, d, src, s->text, s->len, NULL};
  if (!syntax_ok(&c)) return diag_error_count(d) - errors;
  /* the length includes the terminating NUL: cJSON wants to see it after the value */
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(s->text, s->len + 1, &end, true);
  if (!root) { /* valid JSON that cJSON rejects (a NUL byte inside a string) */
    size_t off = end && end >= s->text ? (size_t)(end - s->text) : 0;
    diag_error(d, prof_loc(&c, off, 1), "malformed JSON: cannot read the value here");
    return diag_error_count(d) - errors;
  }
  c.order = xmalloc((size_t)(m->nlayers > 0 ? m->nlayers : 1) * sizeof *c.order);
  for (int i = 0; i < m->nlayers; i++) c.order[i] = (prof_named){m->layers[i].name, i};
  qsort(c.order, (size_t)m->nlayers, sizeof *c.order, cmp_named);
  read_profile(&c, root);
  cJSON_Delete(root);
  free(c.order);
  return diag_error_count(d) - errors;
}
