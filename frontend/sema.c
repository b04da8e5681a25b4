/* sema.c -- meaning of a .octo spec: follows imports, resolves names, checks every value
 * against the tables of ir/ (types, units, ranges, per-kind rules), expands repeat / use /
 * pattern into layers, applies defaults (reported with --explain), checks the training set-up
 * against the cluster, and builds the IR module. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ast.h"
#include "frontend.h"

/* Limits of the input (docs/language.md, "Limits"); each is checked before the work it bounds. */
#define SEMA_MAX_LAYERS 1000000 /* a larger model is surely a runaway repeat */
#define SEMA_MAX_IMPORT_DEPTH 32
#define SEMA_MAX_EXPAND_DEPTH 256 /* repeats and block uses inside one another while expanding */
#define SEMA_MAX_EXPANDED 10000000 /* expansion steps: items, repeat rounds, pattern characters */

/* A named top-level definition. */
typedef struct sema_def {
  fe_stmt *stmt; /* defining statement */
} sema_def;

/* A list of definitions of one namespace, with a hash index of their names (so that many
 * definitions cost linear time, not quadratic). */
typedef struct sema_defs {
  fe_stmt **v;   /* statements */
  int n, cap;    /* count, capacity */
  int *slots;    /* open-addressing index: position in v + 1 of a name, 0 empty */
  size_t nslots; /* a power of two larger than 2n (0 before the first push) */
} sema_defs;

/* State of one compilation. */
typedef struct sema {
  diag_engine *d;        /* diagnostics */
  const fe_options *o;   /* options */
  arena a;               /* syntax trees of every file */
  sema_defs models, blocks, devices, clusters; /* namespaces */
  fe_stmt *train;        /* the train statement, or NULL */
  sema_defs profiles;    /* profile statements */
  char **loaded;         /* real paths of files read (import once) */
  int nloaded, loaded_cap;
  ir_module *m;          /* module being built */
  double dims[IR_MD_COUNT];  /* model-level dimensions (NAN: not given) */
  fe_loc dim_loc[IR_MD_COUNT]; /* where each was given */
  const char **block_stack;  /* blocks being expanded (cycle check) */
  int block_depth, block_cap;
  int expand_depth;      /* repeats and blocks being expanded, one inside the other */
  long expanded;         /* expansion steps so far (bounded by SEMA_MAX_EXPANDED) */
  bool too_many;         /* a limit of the expansion was reported: expansion stops */
  bool quiet;            /* convert() reports nothing (repeated instances of a statement) */
  int syntax_errors;     /* syntax errors in any file read: the trees are incomplete */
  bool dims_bad;         /* a model dimension was rejected: layer checks would only cascade */
  bool train_bad;        /* the train block had errors: checks against the cluster would cascade */
  fe_assign *stages;     /* the train block's 'stages = [...]', or NULL */
  int *cuts;             /* layer count at each '|' of the patterns expanded, in order */
  int ncuts, cuts_cap;
  fe_loc cut_loc;        /* the first '|' */
} sema;

/* ---- Helpers ---- */

static diag_loc L(fe_loc l) { return fe_diag_loc(l); }

/* FNV-1a hash of a name. */
static size_t defs_hash(const char *name) {
  uint64_t h = 1469598103934665603ull;
  for (const unsigned char *p = (const unsigned char *)name; *p; p++)
    h = (h ^ *p) * 1099511628211ull;
  return (size_t)h;
}

/* The index slot of 'name': its entry, or the empty slot where it would go. Pre: nslots > 0. */
static int *defs_slot(const sema_defs *ds, const char *name) {
  size_t at = defs_hash(name) & (ds->nslots - 1);
  while (ds->slots[at] && strcmp(ds->v[ds->slots[at] - 1]->name, name) != 0)
    at = (at + 1) & (ds->nslots - 1);
  return &ds->slots[at];
}

/* Append st. Pre: no definition of ds has st's name (a later one would not be found). */
static void defs_push(sema_defs *ds, fe_stmt *st) {
  VEC_PUSH(ds->v, ds->n, ds->cap, st);
  if ((size_t)ds->n * 2 > ds->nslots) { /* grow the index and enter every name again */
    free(ds->slots);
    ds->nslots = ds->nslots ? ds->nslots * 2 : 16;
    ds->slots = xcalloc(ds->nslots, sizeof *ds->slots);
    for (int i = 0; i < ds->n - 1; i++) *defs_slot(ds, ds->v[i]->name) = i + 1;
  }
  int *slot = defs_slot(ds, st->name);
  if (!*slot) *slot = ds->n;
}

static fe_stmt *defs_find(const sema_defs *ds, const char *name) {
  if (!ds->nslots) return NULL;
  int at = *defs_slot(ds, name);
  return at ? ds->v[at - 1] : NULL;
}

static void note_suggestion(sema *s, fe_loc at, suggest *sg) {
  if (suggest_result(sg)) diag_note(s->d, L(at), "did you mean '%s'?", suggest_result(sg));
}

/* Report an unknown reference and suggest the closest name among the definitions; without one,
 * a cluster or device reference is told where such definitions come from (a forgotten import). */
static void unknown_ref(sema *s, fe_loc at, const char *what, const char *name,
                        const sema_defs *ds) {
  diag_error(s->d, L(at), "unknown %s '%s'", what, name);
  suggest sg;
  suggest_init(&sg, name);
  for (int i = 0; i < ds->n; i++) suggest_add(&sg, ds->v[i]->name);
  note_suggestion(s, at, &sg);
  if (!suggest_result(&sg) && (strcmp(what, "cluster") == 0 || strcmp(what, "device") == 0))
    diag_note(s->d, L(at), "no %s of that name is defined in this file or the files it imports; "
              "define one, or import the file that does (the examples import "
              "\"clusters/h100.octo\", which defines dgx_h100)", what);
}

static void explain(sema *s, fe_loc at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void explain(sema *s, fe_loc at, const char *fmt, ...) {
  if (!s->o || !s->o->explain) return;
  va_list ap;
  va_start(ap, fmt);
  diag_vreport(s->d, DIAG_REMARK, L(at), fmt, ap);
  va_end(ap);
}

/* What a value of kind k is called in messages. */
static const char *value_kind_name(const fe_value *v) {
  switch (v->kind) {
  case FE_V_NUMBER: return v->number.unit ? ir_dim_name(v->number.unit->dim) : "number";
  case FE_V_IDENT: return "name";
  case FE_V_STRING: return "string";
  case FE_V_BOOL: return "boolean";
  case FE_V_LINK: return "link";
  case FE_V_LIST: return "list";
  }
  return "value";
}

/* Error of convert(), unless the compilation is in quiet mode. */
static void conv_error(sema *s, diag_loc at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void conv_error(sema *s, diag_loc at, const char *fmt, ...) {
  if (s->quiet) return;
  va_list ap;
  va_start(ap, fmt);
  diag_vreport(s->d, DIAG_ERROR, at, fmt, ap);
  va_end(ap);
}

/* Convert value v to type t with ir_value_convert (the value grammar the IR reader and pass
 * options share). Reports and returns false when it does not fit. 'what' names the field in
 * messages. Post: *out holds the value in base units (enums: their number). */
static bool convert(sema *s, const fe_value *v, ir_type t, const char *what, double *out) {
  const ir_type_info *ti = &ir_types[t];
  ir_value_text vt = {0};
  if (v->kind == FE_V_BOOL) {
    vt.word = true;
    vt.num = v->boolean ? "true" : "false";
  } else if (v->kind == FE_V_IDENT) {
    vt.word = true;
    vt.num = v->str;
  } else if (v->kind == FE_V_NUMBER) {
    if (v->number.bad) return false; /* the lexer has reported it */
    vt.num = v->number.text;
    vt.num_len = v->number.num_len;
    if (v->number.unit) {
      vt.unit = v->number.unit->name;
      vt.unit_len = strlen(vt.unit);
    }
  }
  if (vt.word) vt.num_len = strlen(vt.num);
  ir_value_error e = IR_VALUE_OK;
  const ir_unit_info *u = NULL;
  if (vt.num) {
    e = ir_value_convert(&vt, t, 0, out, &u);
  } else { /* a string, a link or a list: no value of a field's type */
    e = t == IR_T_BOOL || ir_type_is_enum(t) ? IR_VALUE_NUMBER : IR_VALUE_WORD;
  }
  const char *got = value_kind_name(v), *text = v->kind == FE_V_NUMBER ? v->number.text : "";
  strbuf sb = {0};
  switch (e) {
  case IR_VALUE_OK: return true;
  case IR_VALUE_NOT_BOOL:
  case IR_VALUE_NUMBER:
    if (t == IR_T_BOOL) {
      conv_error(s, L(v->loc), "'%s' expects true or false, got a %s", what, got);
      break;
    }
    ir_enum_names(&sb, t);
    conv_error(s, L(v->loc), "'%s' expects a %s (one of %s), got a %s", what, ti->name,
               strbuf_cstr(&sb), got);
    break;
  case IR_VALUE_NOT_ENUM: {
    ir_enum_names(&sb, t);
    if (v->kind != FE_V_IDENT) { /* true or false */
      conv_error(s, L(v->loc), "'%s' expects a %s (one of %s), got a %s", what, ti->name,
                 strbuf_cstr(&sb), got);
      break;
    }
    conv_error(s, L(v->loc), "unknown %s '%s' for '%s'; expected one of %s", ti->name, v->str,
               what, strbuf_cstr(&sb));
    suggest sg;
    suggest_init(&sg, v->str);
    for (int i = 0; i < ir_enum_value_count; i++)
      if (ir_enum_values[i].type == t) suggest_add(&sg, ir_enum_values[i].name);
    if (!s->quiet) note_suggestion(s, v->loc, &sg);
    break;
  }
  case IR_VALUE_NOT_FINITE:
  case IR_VALUE_WORD:
    conv_error(s, L(v->loc), "'%s' expects %s %s, got %s %s", what, ir_article(ti->name),
               ti->name, ir_article(got), got);
    break;
  case IR_VALUE_SUFFIX:
    conv_error(s, L(v->loc), "'%s' expects %s %s without the count suffix '%s'", what,
               ir_article(ti->name), ti->name, u->name);
    break;
  case IR_VALUE_WRONG_DIM:
    conv_error(s, L(v->loc), "'%s' expects a %s%s, got a %s in '%s'", what,
               ti->dim == IR_DIM_NONE ? "plain " : "", ti->name, ir_dim_name(u->dim), u->name);
    break;
  case IR_VALUE_NO_UNIT:
    ir_unit_names(&sb, ti->dim, true);
    conv_error(s, L(v->loc), "'%s' expects a %s with a unit (%s), got the plain number %s",
               what, ti->name, strbuf_cstr(&sb), text);
    break;
  case IR_VALUE_FRACTION:
    conv_error(s, L(v->loc), "'%s' expects a whole number, got %s", what, text);
    break;
  case IR_VALUE_TOO_LARGE:
    conv_error(s, L(v->loc), "'%s' = %s is too large (at most 2^53)", what, text);
    break;
  case IR_VALUE_INEXACT:
    conv_error(s, L(v->loc), "'%s' = %s is not exact: above 2^53 not every whole number is "
               "held (it would read as %.0f)", what, text, *out);
    break;
  case IR_VALUE_NEGATIVE:     /* the language has no sign */
  case IR_VALUE_UNKNOWN_UNIT: /* the lexer reported it */
  case IR_VALUE_RANGE:        /* the lexer reported it */
    break;
  }
  strbuf_free(&sb);
  *out = 0;
  return false;
}

/* ---- Loading: parse files and their imports, register definitions ---- */

/* Directory part of a path, "" for a bare name (arena string). */
static char *dir_of(sema *s, const char *path) {
  const char *slash = strrchr(path, '/');
  return slash ? arena_strndup(&s->a, path, (size_t)(slash - path + 1)) : arena_strdup(&s->a, "");
}

static char *join_path(sema *s, const char *dir, const char *rel) {
  if (rel[0] == '/' || !dir[0]) return arena_strdup(&s->a, rel);
  strbuf sb = {0};
  strbuf_printf(&sb, "%s%s", dir, rel);
  char *r = arena_strdup(&s->a, strbuf_cstr(&sb));
  strbuf_free(&sb);
  return r;
}

/* Remember a file as read; false if it was read before. */
static bool mark_loaded(sema *s, const char *path) {
  char *real = realpath(path, NULL);
  const char *key = real ? real : path;
  for (int i = 0; i < s->nloaded; i++)
    if (strcmp(s->loaded[i], key) == 0) {
      free(real);
      return false;
    }
  char *copy = real ? real : xstrdup(path);
  VEC_PUSH(s->loaded, s->nloaded, s->loaded_cap, copy);
  return true;
}

static void register_def(sema *s, sema_defs *ds, fe_stmt *st, const char *what) {
  fe_stmt *prev = defs_find(ds, st->name);
  if (prev) {
    diag_error(s->d, L(st->name_loc), "redefinition of %s '%s'", what, st->name);
    diag_note(s->d, L(prev->name_loc), "previous definition is here");
    return;
  }
  defs_push(ds, st);
}

static void load(sema *s, uint32_t file, int depth) {
  int syntax = 0;
  fe_stmt *stmts = fe_parse(s->d, &s->a, file, &syntax);
  s->syntax_errors += syntax;
  const char *dir = dir_of(s, diag_get_source(s->d, file)->name);
  for (fe_stmt *st = stmts; st; st = st->next) {
    switch (st->kind) {
    case FE_S_IMPORT: {
      if (depth >= SEMA_MAX_IMPORT_DEPTH) {
        diag_error(s->d, L(st->loc), "imports nested more than %d deep", SEMA_MAX_IMPORT_DEPTH);
        break;
      }
      char *path = join_path(s, dir, st->name);
      if (!mark_loaded(s, path)) break; /* already read: imports are idempotent */
      uint32_t id = diag_load_file(s->d, path, L(st->name_loc));
      if (id) load(s, id, depth + 1);
      break;
    }
    case FE_S_PROFILE:
      st->name = join_path(s, dir, st->name);
      defs_push(&s->profiles, st);
      break;
    case FE_S_MODEL: register_def(s, &s->models, st, "model"); break;
    case FE_S_BLOCK: register_def(s, &s->blocks, st, "block"); break;
    case FE_S_DEVICE: register_def(s, &s->devices, st, "device"); break;
    case FE_S_CLUSTER: register_def(s, &s->clusters, st, "cluster"); break;
    case FE_S_TRAIN:
      if (s->train) {
        diag_error(s->d, L(st->loc), "more than one train block");
        diag_note(s->d, L(s->train->loc), "previous train block is here");
      } else {
        s->train = st;
      }
      break;
    }
  }
}

/* ---- Records (train, cluster, device, link) ---- */

/* Location of the train block's assignment to 'key', or of the train keyword. */
static fe_loc train_key(sema *s, const char *key) {
  if (!s->train) return (fe_loc){0};
  for (fe_assign *a = s->train->assigns; a; a = a->next)
    if (strcmp(a->key, key) == 0) return a->key_loc;
  return s->train->loc;
}

/* Keys a record statement accepts besides its record fields. */
typedef struct extra_keys {
  const char *const *names; /* NULL-terminated */
  fe_assign **found;        /* parallel to names: the assignment given, or NULL */
} extra_keys;

/* Fill record 'rec' of kind r from assignments; keys in 'extra' are returned instead. Returns
 * the mask of fields whose value was rejected (they are marked given, with value 0). */
static uint64_t fill_record(sema *s, fe_assign *as, ir_record_kind r, void *rec, extra_keys *extra,
                        const char *what) {
  int first, n;
  uint64_t failed = 0;
  ir_record_fields(r, &first, &n);
  for (fe_assign *a = as; a; a = a->next) {
    bool handled = false;
    for (int k = 0; extra && extra->names[k]; k++)
      if (strcmp(extra->names[k], a->key) == 0) {
        if (extra->found[k]) {
          diag_error(s->d, L(a->key_loc), "'%s' is given twice in %s", a->key, what);
          diag_note(s->d, L(extra->found[k]->key_loc), "first given here");
        } else {
          extra->found[k] = a;
        }
        handled = true;
      }
    if (handled) continue;
    int f = ir_field_lookup(r, a->key);
    if (f < 0 || ir_fields[f].ir_only) {
      diag_error(s->d, L(a->key_loc), "unknown field '%s' in %s", a->key, what);
      suggest sg;
      suggest_init(&sg, a->key);
      for (int i = first; i < first + n; i++)
        if (!ir_fields[i].ir_only) suggest_add(&sg, ir_fields[i].name);
      for (int k = 0; extra && extra->names[k]; k++) suggest_add(&sg, extra->names[k]);
      note_suggestion(s, a->key_loc, &sg);
      continue;
    }
    if (ir_field_is_set(rec, f)) {
      diag_error(s->d, L(a->key_loc), "'%s' is given twice in %s", a->key, what);
      continue;
    }
    double v;
    /* a value that failed is still "given": no second error for a missing field */
    bool ok = convert(s, &a->val, ir_fields[f].type, a->key, &v);
    ir_field_set(rec, f, ok ? v : 0);
    if (!ok) failed |= (uint64_t)1 << (f - first);
  }
  return failed;
}

/* Apply the defaults of record fields not given; required ones missing are reported at 'at'. */
static void record_defaults(sema *s, ir_record_kind r, void *rec, fe_loc at, const char *what,
                            const char *skip) {
  int first, n;
  ir_record_fields(r, &first, &n);
  for (int i = first; i < first + n; i++) {
    const ir_field_info *f = &ir_fields[i];
    if (f->ir_only || ir_field_is_set(rec, i) || (skip && strstr(skip, f->name))) continue;
    if (isnan(f->def)) {
      diag_error(s->d, L(at), "%s needs '%s' (%s)", what, f->name, f->doc);
      continue;
    }
    ir_field_set(rec, i, f->def);
    strbuf sb = {0};
    ir_format_value(&sb, f->type, f->def);
    explain(s, at, "%s: %s = %s (default)", what, f->name, strbuf_cstr(&sb));
    strbuf_free(&sb);
  }
}

/* Range checks of the quantities of a record: every set field > 0, except those allowed 0
 * and those in mask 'skip' (rejected values), and at most its bound of ir/limits.def.
 * Returns whether every checked field is in range (errors are reported for the others). */
static bool record_positive(sema *s, const void *rec, ir_record_kind r, fe_loc at,
                            const char *what, const char *zero_ok, uint64_t skip) {
  bool ok = true;
  int first, n;
  ir_record_fields(r, &first, &n);
  for (int i = first; i < first + n; i++) {
    if ((skip >> (i - first)) & 1) continue;
    if (!ir_field_is_set(rec, i) || ir_type_is_enum(ir_fields[i].type) ||
        ir_fields[i].type == IR_T_BOOL)
      continue;
    double v = ir_field_get(rec, i);
    bool zero = zero_ok && strstr(zero_ok, ir_fields[i].name);
    const ir_limit_info *lim = ir_field_limit(i);
    if (v < 0 || (v == 0 && !zero)) {
      diag_error(s->d, L(at), "%s: '%s' must be %s", what, ir_fields[i].name,
                 zero ? "non-negative" : "positive");
      ok = false;
    } else if (lim && v > lim->max) {
      diag_error(s->d, L(at), "%s: %s = %.0f exceeds the limit of %.0f (%s)", what,
                 ir_fields[i].name, v, lim->max, lim->why);
      ok = false;
    }
  }
  return ok;
}

/* ---- Layers ---- */

static void explain_derived(void *ctx, int p, const char *rule) {
  void **c = ctx;
  sema *s = c[0];
  const ir_layer *l = c[1];
  const fe_loc *at = c[2];
  explain(s, *at, "layer '%s' (%s): %s = %g (%s)", l->name, ir_kinds[l->kind].name,
          ir_layer_params[p].name, l->p[p], rule);
}

/* Add a layer of kind k named 'name' with the given parameters. 'first' is true for the first
 * instance of its statement: defaults are explained and the result checked only then (every
 * instance of one statement is identical). */
static void make_layer(sema *s, const char *name, ir_layer_kind k, fe_assign *params, fe_loc at,
                       bool first) {
  if (s->m->nlayers >= SEMA_MAX_LAYERS) {
    if (!s->too_many)
      diag_error(s->d, L(at), "the model has more than %d layers", SEMA_MAX_LAYERS);
    s->too_many = true;
    return;
  }
  ir_layer *l = ir_module_add_layer(s->m, name, k);
  const diag_source *src = diag_get_source(s->d, at.file);
  l->loc.file = src ? src->name : NULL; /* replaced by a module copy in sema_finish */
  l->loc.src = at.file;
  l->loc.line = (uint32_t)at.first_line;
  l->loc.col = (uint32_t)at.first_column;
  bool ok = true;
  for (fe_assign *a = params; a; a = a->next) {
    int p = ir_param_lookup(k, a->key);
    if (p < 0) {
      if (!first) continue;
      diag_error(s->d, L(a->key_loc), "unknown parameter '%s' for layer kind '%s'", a->key,
                 ir_kinds[k].name);
      suggest sg;
      suggest_init(&sg, a->key);
      for (int i = ir_kind_first_param(k); i < ir_kind_first_param(k) + ir_kind_nparams(k); i++)
        suggest_add(&sg, ir_layer_params[i].name);
      note_suggestion(s, a->key_loc, &sg);
      ok = false;
      continue;
    }
    if (!isnan(l->p[p])) {
      if (first) diag_error(s->d, L(a->key_loc), "parameter '%s' is given twice", a->key);
      ok = false;
      continue;
    }
    double v;
    s->quiet = !first; /* later instances repeat the first one's conversion */
    if (convert(s, &a->val, ir_layer_params[p].type, a->key, &v))
      l->p[p] = v;
    else
      ok = false;
    s->quiet = false;
  }
  for (int p = ir_kind_first_param(k); p < ir_kind_first_param(k) + ir_kind_nparams(k); p++) {
    if (!isnan(l->p[p])) continue;
    const ir_param_info *pi = &ir_layer_params[p];
    int md = pi->from_model ? ir_model_dim_lookup(pi->name) : -1;
    if (md >= 0 && !isnan(s->dims[md])) {
      l->p[p] = s->dims[md];
    } else if (!isnan(pi->def)) {
      l->p[p] = pi->def;
      if (first) {
        strbuf sb = {0};
        ir_format_value(&sb, pi->type, pi->def);
        explain(s, at, "layer '%s' (%s): %s = %s (default)", name, ir_kinds[k].name, pi->name,
                strbuf_cstr(&sb));
        strbuf_free(&sb);
      }
    }
  }
  void *ctx[3] = {s, l, &at};
  ir_layer_derive(l, first ? explain_derived : NULL, ctx);
  if (first && ok && !s->dims_bad) ir_layer_check(l, s->d, L(at));
}

static void expand_items(sema *s, fe_item *items, bool nested);

/* Whether the expansion may go on: no limit reported, the error limit not reached. Counts one
 * expansion step; the first step past SEMA_MAX_EXPANDED is reported at 'at' and stops the
 * expansion (so that no input makes it run for long, whatever it produces). */
static bool expand_step(sema *s, fe_loc at) {
  if (s->too_many || diag_limit_reached(s->d)) return false;
  if (++s->expanded > SEMA_MAX_EXPANDED) {
    diag_error(s->d, L(at), "the model's expansion takes more than %d steps (layers, uses, "
               "repeat rounds and pattern characters together)", SEMA_MAX_EXPANDED);
    s->too_many = true;
    return false;
  }
  return true;
}

/* Enter one more level of repeat or block expansion at 'at'. Returns false (after reporting
 * the first time, which stops the expansion) when that would be more than
 * SEMA_MAX_EXPAND_DEPTH levels. */
static bool expand_enter(sema *s, fe_loc at, const char *what) {
  if (s->expand_depth >= SEMA_MAX_EXPAND_DEPTH) {
    diag_error(s->d, L(at), "%s nested more than %d deep (repeats and blocks using blocks, "
               "counted together)", what, SEMA_MAX_EXPAND_DEPTH);
    s->too_many = true;
    return false;
  }
  s->expand_depth++;
  return true;
}

/* Expand block 'name' referenced at 'at'. */
static void expand_block(sema *s, const char *name, fe_loc at) {
  fe_stmt *b = defs_find(&s->blocks, name);
  if (!b) {
    unknown_ref(s, at, "block", name, &s->blocks);
    return;
  }
  for (int i = 0; i < s->block_depth; i++) /* at most SEMA_MAX_EXPAND_DEPTH entries */
    if (strcmp(s->block_stack[i], name) == 0) {
      diag_error(s->d, L(at), "block '%s' uses itself", name);
      diag_note(s->d, L(b->name_loc), "block '%s' is defined here", name);
      return;
    }
  if (!expand_enter(s, at, "blocks used")) return;
  VEC_PUSH(s->block_stack, s->block_depth, s->block_cap, name);
  expand_items(s, b->items, true);
  s->block_depth--;
  s->expand_depth--;
}

static void expand_pattern(sema *s, fe_item *it) {
  fe_letter *defs[256] = {0};
  for (fe_letter *lt = it->letters; lt; lt = lt->next) {
    unsigned char c = (unsigned char)lt->letter;
    if (defs[c]) {
      if (!it->seen) {
        diag_error(s->d, L(lt->loc), "pattern letter '%c' is defined twice", lt->letter);
        diag_note(s->d, L(defs[c]->loc), "first definition is here");
      }
      continue;
    }
    defs[c] = lt;
  }
  bool used[256] = {false};
  for (const char *c = it->pattern; *c; c++) {
    unsigned char ch = (unsigned char)*c;
    fe_loc at = it->pattern_loc;
    at.first_column += 1 + (int)(c - it->pattern);
    at.last_column = at.first_column;
    at.last_line = at.first_line;
    if (!expand_step(s, at)) return; /* every character: a long pattern repeated is bounded */
    if (ch == ' ' || ch == '\t') continue;
    if (ch == '|') {
      if (s->ncuts == 0) s->cut_loc = at;
      VEC_PUSH(s->cuts, s->ncuts, s->cuts_cap, s->m->nlayers);
      continue;
    }
    fe_letter *lt = defs[ch];
    if (!lt) {
      if (!it->seen && !used[ch])
        diag_error(s->d, L(at), "pattern letter '%c' has no definition", ch);
      used[ch] = true;
      continue;
    }
    used[ch] = true;
    int k = ir_kind_lookup(lt->target);
    if (k >= 0) {
      make_layer(s, ir_kinds[k].name, (ir_layer_kind)k, lt->params, lt->target_loc, !lt->seen);
      lt->seen = true;
    } else if (defs_find(&s->blocks, lt->target)) {
      if (lt->params && !lt->seen)
        diag_error(s->d, L(lt->target_loc), "block '%s' takes no parameters", lt->target);
      lt->seen = true;
      expand_block(s, lt->target, lt->target_loc);
    } else if (!lt->seen) {
      lt->seen = true;
      diag_error(s->d, L(lt->target_loc), "unknown layer kind or block '%s'", lt->target);
      suggest sg;
      suggest_init(&sg, lt->target);
      for (int i = 0; i < IR_KIND_COUNT; i++) suggest_add(&sg, ir_kinds[i].name);
      for (int i = 0; i < s->blocks.n; i++) suggest_add(&sg, s->blocks.v[i]->name);
      note_suggestion(s, lt->target_loc, &sg);
    }
    if (s->too_many || diag_limit_reached(s->d)) return;
  }
  if (!it->seen)
    for (fe_letter *lt = it->letters; lt; lt = lt->next)
      if (!used[(unsigned char)lt->letter] && defs[(unsigned char)lt->letter] == lt)
        diag_warning(s->d, L(lt->loc), "pattern letter '%c' is not used", lt->letter);
}

static void expand_items(sema *s, fe_item *items, bool nested) {
  for (fe_item *it = items; it && expand_step(s, it->loc); it = it->next) {
    switch (it->kind) {
    case FE_I_ASSIGN:
      if (nested && !it->seen)
        diag_error(s->d, L(it->loc),
                   "model dimension '%s' must be set in the model body, not in a block or "
                   "repeat", it->assign->key);
      it->seen = true;
      break;
    case FE_I_LAYER: {
      int k = ir_kind_lookup(it->kind_name);
      if (k < 0) {
        if (!it->seen) {
          diag_error(s->d, L(it->kind_loc), "unknown layer kind '%s'", it->kind_name);
          if (defs_find(&s->blocks, it->kind_name))
            diag_note(s->d, L(it->kind_loc), "'%s' is a block: write 'use %s'", it->kind_name,
                      it->kind_name);
          suggest sg;
          suggest_init(&sg, it->kind_name);
          for (int i = 0; i < IR_KIND_COUNT; i++) suggest_add(&sg, ir_kinds[i].name);
          note_suggestion(s, it->kind_loc, &sg);
        }
        it->seen = true;
        break;
      }
      make_layer(s, it->name, (ir_layer_kind)k, it->params, it->name_loc, !it->seen);
      it->seen = true;
      break;
    }
    case FE_I_REPEAT: {
      if (it->count < 1) {
        if (!it->seen)
          diag_error(s->d, L(it->count_loc), "repeat count must be a whole number of at least 1");
        it->seen = true;
        break;
      }
      if (it->count > SEMA_MAX_LAYERS) {
        if (!it->seen)
          diag_error(s->d, L(it->count_loc), "repeat count %s exceeds the limit of %d layers",
                     it->count_text, SEMA_MAX_LAYERS);
        it->seen = true;
        break;
      }
      it->seen = true;
      if (!expand_enter(s, it->loc, "repeats")) break;
      for (long i = 0; i < (long)it->count && expand_step(s, it->loc); i++) {
        int layers = s->m->nlayers, cuts = s->ncuts;
        expand_items(s, it->body, true);
        /* A round that adds nothing adds nothing the next time either (only errors, reported
         * once): the other rounds are skipped, so empty nests of repeats cost nothing. */
        if (s->m->nlayers == layers && s->ncuts == cuts) break;
      }
      s->expand_depth--;
      break;
    }
    case FE_I_USE:
      expand_block(s, it->name, it->name_loc);
      it->seen = true;
      break;
    case FE_I_PATTERN:
      expand_pattern(s, it);
      it->seen = true;
      break;
    }
  }
}

/* Make repeated names unique: a base name used k > 1 times gets ".0" ... ".k-1". */
static void number_names(sema *s) {
  ir_module *m = s->m;
  size_t cap = 16;
  while (cap < 2 * (size_t)m->nlayers) cap *= 2;
  /* open-addressing table of base names: counts, then running indices */
  typedef struct slot { const char *name; int count, next; } slot;
  slot *tab = xcalloc(cap, sizeof *tab);
  int *which = xmalloc(sizeof(int) * (size_t)(m->nlayers ? m->nlayers : 1));
  for (int i = 0; i < m->nlayers; i++) {
    uint64_t h = 1469598103934665603ull;
    for (const char *c = m->layers[i].name; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ull;
    size_t j = h & (cap - 1);
    while (tab[j].name && strcmp(tab[j].name, m->layers[i].name) != 0) j = (j + 1) & (cap - 1);
    tab[j].name = m->layers[i].name;
    tab[j].count++;
    which[i] = (int)j;
  }
  for (int i = 0; i < m->nlayers; i++) {
    slot *sl = &tab[which[i]];
    if (sl->count < 2) continue;
    strbuf sb = {0};
    strbuf_printf(&sb, "%s.%d", sl->name, sl->next++);
    m->layers[i].name = arena_strdup(&m->arena, strbuf_cstr(&sb));
    strbuf_free(&sb);
  }
  free(which);
  free(tab);
}

/* ---- Model, train, cluster ---- */

static fe_stmt *choose_model(sema *s, fe_assign *model_ref) {
  if (model_ref) {
    if (model_ref->val.kind != FE_V_IDENT) {
      diag_error(s->d, L(model_ref->val.loc), "'model' expects the name of a model");
      return NULL;
    }
    fe_stmt *m = defs_find(&s->models, model_ref->val.str);
    if (!m) unknown_ref(s, model_ref->val.loc, "model", model_ref->val.str, &s->models);
    return m;
  }
  if (s->models.n == 1) return s->models.v[0];
  if (s->models.n == 0) {
    diag_error(s->d, diag_mkloc(0, 0, 0, 0), "no model is defined");
    return NULL;
  }
  fe_loc at = s->train ? s->train->loc : s->models.v[1]->loc;
  diag_error(s->d, L(at), "%d models are defined; say which one to train with 'model = NAME' "
                          "in the train block", s->models.n);
  return NULL;
}

static void model_dims(sema *s, fe_stmt *model) {
  for (int i = 0; i < IR_MD_COUNT; i++) s->dims[i] = NAN;
  for (fe_item *it = model->items; it; it = it->next) {
    if (it->kind != FE_I_ASSIGN) continue;
    fe_assign *a = it->assign;
    int md = ir_model_dim_lookup(a->key);
    if (md < 0) {
      diag_error(s->d, L(a->key_loc), "unknown model dimension '%s'", a->key);
      suggest sg;
      suggest_init(&sg, a->key);
      for (int i = 0; i < IR_MD_COUNT; i++) suggest_add(&sg, ir_model_dims[i].name);
      note_suggestion(s, a->key_loc, &sg);
      continue;
    }
    if (!isnan(s->dims[md])) {
      diag_error(s->d, L(a->key_loc), "model dimension '%s' is given twice", a->key);
      diag_note(s->d, L(s->dim_loc[md]), "first given here");
      continue;
    }
    double v;
    if (convert(s, &a->val, ir_model_dims[md].type, a->key, &v)) {
      s->dims[md] = v;
      s->dim_loc[md] = a->key_loc;
    } else {
      s->dims_bad = true;
    }
  }
}

/* Apply the train statement (or defaults) to m->train. */
static void train_settings(sema *s, fe_assign **cluster_ref) {
  ir_train *t = &s->m->train;
  static const char *const extra_names[] = {"cluster", "model", "stages", NULL};
  fe_assign *found[3] = {NULL, NULL, NULL};
  extra_keys ex = {extra_names, found};
  fe_loc at = s->train ? s->train->loc : s->models.n ? s->models.v[0]->loc : (fe_loc){0};
  uint64_t failed = 0;
  if (s->train) failed = fill_record(s, s->train->assigns, IR_REC_TRAIN, t, &ex, "train");
  *cluster_ref = found[0];
  s->stages = found[2];
  int f_seq = ir_field_lookup(IR_REC_TRAIN, "seq");
  if (ir_field_is_set(t, f_seq)) {
    s->dims[IR_MD_SEQ] = (double)t->seq; /* the train block's seq overrides the model's */
  } else if (!isnan(s->dims[IR_MD_SEQ])) {
    ir_field_set(t, f_seq, s->dims[IR_MD_SEQ]);
  }
  /* global batch and microbatches: one determines the other */
  int f_gb = ir_field_lookup(IR_REC_TRAIN, "global_batch");
  int f_mb = ir_field_lookup(IR_REC_TRAIN, "microbatches");
#define SEMA_TRAIN_NO_DEFAULT "global_batch microbatches seq mem_limit overlap_grad_reduce"
  record_defaults(s, IR_REC_TRAIN, t, at, "train",
                  s->o->free_config ? SEMA_TRAIN_NO_DEFAULT " " IR_TRAIN_FREE_FIELDS
                                    : SEMA_TRAIN_NO_DEFAULT);
  if (!record_positive(s, t, IR_REC_TRAIN, at, "train", "zero", failed)) failed |= 1;
  int first, nf;
  ir_record_fields(IR_REC_TRAIN, &first, &nf);
  for (int f = first; f < first + nf && s->o->free_config; f++)
    if (!ir_field_is_set(t, f) && ir_train_may_be_free(f)) {
      ir_train_set_free(t, f, true);
      explain(s, at, "train: %s is free: the configuration search chooses it", ir_fields[f].name);
    }
  if (failed) return; /* the batch arithmetic below would only repeat the error */
  if (ir_field_is_set(t, IR_F_TRAIN_zero) && t->zero > 1)
    diag_error(s->d, L(train_key(s, "zero")), "train: zero = %lld is not supported (0 or 1)",
               (long long)t->zero);
  if (!ir_field_is_set(t, IR_F_TRAIN_micro_batch) || !ir_field_is_set(t, IR_F_TRAIN_data)) {
    /* free micro_batch or data: the config pass derives microbatches from the global batch */
    const char *free_f = ir_field_is_set(t, IR_F_TRAIN_data) ? "micro_batch" : "data";
    if (ir_field_is_set(t, f_mb))
      diag_error(s->d, L(train_key(s, "microbatches")), "microbatches cannot be fixed while "
                 "%s is free: give global_batch instead", free_f);
    else if (!ir_field_is_set(t, f_gb))
      diag_error(s->d, L(at), "the configuration search needs 'global_batch' in the train block "
                 "(the microbatches follow from it once %s is chosen)", free_f);
    return;
  }
  int64_t per_mb = t->micro_batch * t->data;
  bool gb = ir_field_is_set(t, f_gb), mb = ir_field_is_set(t, f_mb);
  if (per_mb <= 0) return;
  if (gb && t->global_batch % per_mb != 0) {
    diag_error(s->d, L(train_key(s, "global_batch")),
               "global_batch = %lld is not divisible by micro_batch x data = %lld x %lld",
               (long long)t->global_batch, (long long)t->micro_batch, (long long)t->data);
  } else if (gb && mb && t->global_batch / per_mb != t->microbatches) {
    diag_error(s->d, L(train_key(s, "microbatches")),
               "microbatches = %lld contradicts global_batch = %lld (which gives %lld "
               "microbatches of %lld x %lld)",
               (long long)t->microbatches, (long long)t->global_batch,
               (long long)(t->global_batch / per_mb), (long long)t->micro_batch,
               (long long)t->data);
  } else if (gb) {
    ir_field_set(t, f_mb, (double)(t->global_batch / per_mb));
    explain(s, at, "train: microbatches = %lld (global_batch / (micro_batch x data))",
            (long long)t->microbatches);
  } else if (mb) {
    ir_field_set(t, f_gb, (double)(t->microbatches * per_mb));
    explain(s, at, "train: global_batch = %lld (microbatches x micro_batch x data)",
            (long long)t->global_batch);
  } else if (s->train) {
    diag_error(s->d, L(at), "train needs 'global_batch' or 'microbatches'");
  } else {
    ir_field_set(t, f_mb, 1);
    ir_field_set(t, f_gb, (double)per_mb);
    explain(s, at, "train: no train block; one microbatch per step");
  }
}

/* Read a link { bw, lat } value into rec. */
static bool link_value(sema *s, fe_assign *a, ir_link_rec *rec, const char *what) {
  if (a->val.kind != FE_V_LINK) {
    diag_error(s->d, L(a->val.loc), "'%s' expects 'link { bw = ..., lat = ... }', got a %s",
               a->key, value_kind_name(&a->val));
    return false;
  }
  int before = diag_error_count(s->d);
  uint64_t failed = fill_record(s, a->val.fields, IR_REC_LINK, rec, NULL, what);
  record_defaults(s, IR_REC_LINK, rec, a->val.loc, what, NULL);
  record_positive(s, rec, IR_REC_LINK, a->val.loc, what, "lat", failed);
  return diag_error_count(s->d) == before;
}

/* Check cluster definition c into (cl, intra, inter). Returns the device type of each node
 * (cl->nodes entries, xmalloc'd: 'gpu = NAME' for all, or 'gpu = [A, B, ...]' one per node), or
 * NULL after reporting why there is none. */
static fe_stmt **cluster_def(sema *s, fe_stmt *c, ir_cluster *cl, ir_link_rec *intra,
                             ir_link_rec *inter) {
  static const char *const extra_names[] = {"gpu", "intra", "inter", NULL};
  fe_assign *found[3] = {NULL, NULL, NULL};
  extra_keys ex = {extra_names, found};
  char what[160];
  snprintf(what, sizeof what, "cluster '%s'", c->name);
  uint64_t failed = fill_record(s, c->assigns, IR_REC_CLUSTER, cl, &ex, what);
  record_defaults(s, IR_REC_CLUSTER, cl, c->name_loc, what, NULL);
  if (!record_positive(s, cl, IR_REC_CLUSTER, c->name_loc, what, NULL, failed))
    return NULL; /* the device tables below are as large as the cluster */
  if (cl->nodes * cl->gpus_per_node > IR_MAX_GPUS) {
    diag_error(s->d, L(c->name_loc), "%s has %lld x %lld = %lld GPUs, more than the limit of %d",
               what, (long long)cl->nodes, (long long)cl->gpus_per_node,
               (long long)(cl->nodes * cl->gpus_per_node), IR_MAX_GPUS);
    return NULL;
  }
  if (found[1]) link_value(s, found[1], intra, "intra link");
  else if (cl->gpus_per_node > 1)
    diag_error(s->d, L(c->name_loc), "%s needs 'intra' (the link between GPUs of a node)", what);
  if (found[2]) link_value(s, found[2], inter, "inter link");
  else if (cl->nodes > 1)
    diag_error(s->d, L(c->name_loc), "%s needs 'inter' (the link between nodes)", what);
  if (!found[0]) {
    diag_error(s->d, L(c->name_loc), "%s needs 'gpu' (a device type)", what);
    return NULL;
  }
  const fe_value *g = &found[0]->val;
  int n = 0;
  for (const fe_elem *e = g->kind == FE_V_LIST ? g->elems : NULL; e; e = e->next) n++;
  if (g->kind != FE_V_IDENT && g->kind != FE_V_LIST) {
    diag_error(s->d, L(g->loc), "'gpu' expects the name of a device, or a list of one per node");
    return NULL;
  }
  if (g->kind == FE_V_LIST && n != cl->nodes) {
    diag_error(s->d, L(g->loc), "'gpu' lists %d device type%s for %lld node%s: give one per node",
               n, n == 1 ? "" : "s", (long long)cl->nodes, cl->nodes == 1 ? "" : "s");
    return NULL;
  }
  int64_t nodes = cl->nodes > 0 ? cl->nodes : 1;
  fe_stmt **types = xcalloc((size_t)nodes, sizeof *types);
  const fe_elem *e = g->kind == FE_V_LIST ? g->elems : NULL;
  bool ok = true;
  for (int64_t i = 0; i < nodes; i++) {
    const fe_value *v = e ? &e->val : g;
    if (e) e = e->next;
    if (v->kind != FE_V_IDENT) {
      diag_error(s->d, L(v->loc), "'gpu' expects the name of a device");
      ok = false;
      continue;
    }
    types[i] = defs_find(&s->devices, v->str);
    if (!types[i] && (v == g || ok)) unknown_ref(s, v->loc, "device", v->str, &s->devices);
    if (!types[i]) ok = false;
    if (v == g && !ok) break;
  }
  if (!ok) {
    free(types);
    return NULL;
  }
  return types;
}

/* Check device definition dev into rec; false after reporting a problem. */
static bool device_def(sema *s, fe_stmt *dev, ir_device_rec *rec) {
  memset(rec, 0, sizeof *rec);
  char what[160];
  snprintf(what, sizeof what, "device '%s'", dev->name);
  int before = diag_error_count(s->d);
  uint64_t failed = fill_record(s, dev->assigns, IR_REC_DEVICE, rec, NULL, what);
  record_defaults(s, IR_REC_DEVICE, rec, dev->name_loc, what, "gemm_half pcie");
  record_positive(s, rec, IR_REC_DEVICE, dev->name_loc, what, "node gemm_half", failed);
  if (rec->efficiency > 1)
    diag_error(s->d, L(dev->name_loc), "%s: efficiency = %g must be at most 1", what,
               rec->efficiency);
  return diag_error_count(s->d) == before;
}

/* Choose the cluster, check it and its device type, and create the pipeline devices. Every
 * other cluster and device definition is checked too. */
static void cluster_devices(sema *s, fe_assign *cluster_ref) {
  ir_module *m = s->m;
  fe_stmt *c = NULL, *dev = NULL;
  fe_loc train_at = s->train ? s->train->loc : (fe_loc){0};
  if (cluster_ref) {
    if (cluster_ref->val.kind != FE_V_IDENT)
      diag_error(s->d, L(cluster_ref->val.loc), "'cluster' expects the name of a cluster");
    else if (!(c = defs_find(&s->clusters, cluster_ref->val.str)))
      unknown_ref(s, cluster_ref->val.loc, "cluster", cluster_ref->val.str, &s->clusters);
  } else if (!s->train) {
    /* no train block: the model alone is compiled, on no cluster */
  } else if (s->clusters.n == 1) {
    c = s->clusters.v[0];
    explain(s, train_at, "train: cluster = %s (the only cluster defined)", c->name);
  } else if (s->clusters.n > 1) {
    diag_error(s->d, L(train_at), "%d clusters are defined; say which one with 'cluster = NAME' "
                                  "in the train block", s->clusters.n);
  } else if (s->o->free_config) {
    diag_error(s->d, L(train_at), "the configuration search needs a cluster: define one and "
                                  "name it with 'cluster = NAME'");
  } else if (m->train.pipeline > 1) {
    diag_error(s->d, L(train_at), "pipeline = %lld needs a cluster: define one and name it "
                                  "with 'cluster = NAME'", (long long)m->train.pipeline);
  }
  fe_stmt **types = NULL; /* per node */
  ir_device_rec *recs = NULL; /* per node */
  bool ok = false;
  if (c) {
    types = cluster_def(s, c, &m->cluster, &m->intra, &m->inter);
    m->cluster_name = arena_strdup(&m->arena, c->name);
    if (types) {
      recs = xcalloc((size_t)m->cluster.nodes, sizeof *recs);
      ok = true;
      for (int64_t i = 0; i < m->cluster.nodes; i++) {
        bool again = false; /* each type is checked (and reported) once */
        for (int64_t j = 0; j < i && !again; j++)
          if (types[j] == types[i]) recs[i] = recs[j], again = true;
        if (!again) ok = device_def(s, types[i], &recs[i]) && ok;
      }
    }
  }
  for (int i = 0; i < s->clusters.n; i++)
    if (s->clusters.v[i] != c) {
      ir_cluster cl = {0};
      ir_link_rec a = {0}, b = {0};
      free(cluster_def(s, s->clusters.v[i], &cl, &a, &b));
    }
  for (int i = 0; i < s->devices.n; i++) {
    bool used = false;
    for (int64_t j = 0; types && j < m->cluster.nodes; j++) used |= types[j] == s->devices.v[i];
    if (!used) {
      ir_device_rec r;
      device_def(s, s->devices.v[i], &r);
    }
  }
  if (!ok || s->train_bad) {
    free(types);
    free(recs);
    return;
  }
  /* The smallest memory of the types in use (the limit a spec's mem_limit may not exceed). */
  int small = 0;
  bool same_mem = true;
  for (int64_t i = 1; i < m->cluster.nodes; i++) {
    if (recs[i].mem < recs[small].mem) small = (int)i;
    same_mem &= recs[i].mem == recs[0].mem;
  }
  dev = types[small];
  ir_device_rec rec = recs[small];

  ir_train *t = &m->train;
  int64_t gpus = m->cluster.nodes * m->cluster.gpus_per_node;
  if (ir_field_is_set(t, IR_F_TRAIN_tensor) && t->tensor > m->cluster.gpus_per_node) {
    diag_error(s->d, L(train_key(s, "tensor")),
               "tensor = %lld exceeds the %lld GPUs of a node of cluster '%s': a tensor-parallel "
               "group stays within a node", (long long)t->tensor,
               (long long)m->cluster.gpus_per_node, c->name);
    free(types);
    free(recs);
    return;
  }
  /* free degrees (octoc --search=config) count as 1; a free pipeline takes every GPU left */
  int64_t fixed = 1;
  bool any_free = false;
  static const int degrees[] = {IR_F_TRAIN_pipeline, IR_F_TRAIN_tensor, IR_F_TRAIN_data};
  for (int i = 0; i < 3; i++) {
    if (!ir_field_is_set(t, degrees[i])) {
      any_free = true;
      continue;
    }
    int64_t deg = (int64_t)ir_field_get(t, degrees[i]);
    if (deg > gpus) { /* also keeps the product below 2^63: each factor is at most IR_MAX_GPUS */
      diag_error(s->d, L(train_key(s, ir_fields[degrees[i]].name)),
                 "%s = %lld exceeds the %lld GPUs of cluster '%s'", ir_fields[degrees[i]].name,
                 (long long)deg, (long long)gpus, c->name);
      free(types);
      free(recs);
      return;
    }
    fixed *= deg;
  }
  if (any_free && (fixed > gpus || gpus % fixed != 0)) {
    diag_error(s->d, L(train_at), "the fixed degrees (pipeline x tensor x data) use %lld GPUs, "
               "which does not divide the %lld GPUs of cluster '%s'", (long long)fixed,
               (long long)gpus, c->name);
    free(types);
    free(recs);
    return;
  }
  int64_t want = any_free ? gpus : t->pipeline * t->tensor * t->data;
  int64_t npipe = ir_field_is_set(t, IR_F_TRAIN_pipeline) ? t->pipeline : gpus / fixed;
  int64_t group = any_free ? gpus / npipe : t->tensor * t->data; /* GPUs per pipeline device */
  if (want != gpus) {
    diag_error(s->d, L(train_at),
               "pipeline x tensor x data = %lld x %lld x %lld = %lld GPUs, but cluster '%s' "
               "has %lld x %lld = %lld GPUs",
               (long long)t->pipeline, (long long)t->tensor, (long long)t->data, (long long)want,
               c->name, (long long)m->cluster.nodes, (long long)m->cluster.gpus_per_node,
               (long long)gpus);
    diag_note(s->d, L(train_at), "or leave the degrees out and let the compiler choose them: "
              "octoc --search=config");
    free(types);
    free(recs);
    return;
  }
  int f_mem = ir_field_lookup(IR_REC_TRAIN, "mem_limit");
  if (!ir_field_is_set(t, f_mem) && same_mem) {
    ir_field_set(t, f_mem, rec.mem);
    explain(s, train_at, "train: mem_limit = memory of device '%s'", dev->name);
  } else if (!ir_field_is_set(t, f_mem)) {
    explain(s, train_at, "train: no mem_limit: each device is limited by its own memory");
  } else if (t->mem_limit > rec.mem) {
    strbuf a = {0}, b = {0};
    ir_format_value(&a, IR_T_BYTES, t->mem_limit);
    ir_format_value(&b, IR_T_BYTES, rec.mem);
    diag_error(s->d, L(train_key(s, "mem_limit")), "mem_limit = %s exceeds the %s of device '%s'",
               strbuf_cstr(&a), strbuf_cstr(&b), dev->name);
    strbuf_free(&a);
    strbuf_free(&b);
  }
  int f_node = ir_field_lookup(IR_REC_DEVICE, "node");
  for (int64_t i = 0; i < npipe; i++) {
    int64_t node = (i * group) / m->cluster.gpus_per_node;
    fe_stmt *type = types[node];
    ir_device *d = ir_module_add_device(m, type->name);
    d->rec = recs[node];
    ir_field_set(&d->rec, f_node, (double)node);
    d->loc.src = type->name_loc.file;
    d->loc.line = (uint32_t)type->name_loc.first_line;
    d->loc.col = (uint32_t)type->name_loc.first_column;
  }
  free(types);
  free(recs);
}

/* The partition the spec gives, as 'stages = [n, ...]' in train or '|' cuts in patterns: the
 * module's stages (not placed). A cut's stage boundary is the layer count at the cut; layers
 * before the first and after the last cut (embedding, LM head) join the first and last stage. */
static void spec_stages(sema *s) {
  ir_module *m = s->m;
  int *ends = NULL, n = 0, cap = 0;
  fe_loc at;
  if (s->stages && s->ncuts) {
    diag_error(s->d, L(s->stages->key_loc), "the partition is given twice: by 'stages' and by "
               "'|' cuts in a pattern");
    diag_note(s->d, L(s->cut_loc), "first cut here");
    return;
  }
  if (s->stages) {
    at = s->stages->val.loc;
    if (s->stages->val.kind != FE_V_LIST) {
      diag_error(s->d, L(at), "'stages' expects a list of layer counts like [9, 9, 8, 6], got %s "
                 "%s", ir_article(value_kind_name(&s->stages->val)), value_kind_name(&s->stages->val));
      return;
    }
    /* Counts go up to 2^53 each: sum them as doubles (exact while the sum is small enough to
     * matter) and keep the ends only while they are layer indices. */
    double sum = 0;
    int count = 0;
    bool bad = false;
    for (fe_elem *e = s->stages->val.elems; e; e = e->next) {
      double v;
      if (!convert(s, &e->val, IR_T_COUNT, "stages", &v)) {
        bad = true;
        continue;
      }
      if (v < 1) {
        diag_error(s->d, L(e->val.loc), "a stage needs at least one layer");
        bad = true;
        continue;
      }
      sum += v;
      count++;
      if (sum <= m->nlayers) VEC_PUSH(ends, n, cap, (int)sum);
    }
    if (!bad && count == 0) diag_error(s->d, L(at), "'stages' is empty");
    else if (!bad && sum != m->nlayers)
      diag_error(s->d, L(at), "stages add up to %.0f layers but model '%s' has %d", sum, m->name,
                 m->nlayers);
    if (bad || count == 0 || sum != m->nlayers) {
      free(ends);
      return;
    }
  } else if (s->ncuts) {
    at = s->cut_loc;
    for (int i = 0; i < s->ncuts; i++) {
      int c = s->cuts[i];
      if (c == (n ? ends[n - 1] : 0) || c == m->nlayers) {
        diag_error(s->d, L(at), "the '|' cuts of the patterns leave stage %d without layers",
                   c == m->nlayers ? n + 1 : n);
        free(ends);
        return;
      }
      VEC_PUSH(ends, n, cap, c);
    }
    VEC_PUSH(ends, n, cap, m->nlayers);
  } else {
    return;
  }
  int64_t p = m->train.pipeline;
  if (p > 0 && n % p != 0) {
    diag_error(s->d, L(at), "%d stages do not fit pipeline = %lld: give a multiple of %lld (one "
               "or more stages per device)", n, (long long)p, (long long)p);
    free(ends);
    return;
  }
  for (int i = 0, first = 0; i < n; first = ends[i++]) {
    ir_stage *st = ir_module_add_stage(m, first, ends[i]);
    st->loc.src = at.file;
    st->loc.line = (uint32_t)at.first_line;
    st->loc.col = (uint32_t)at.first_column;
  }
  free(ends);
}

/* Checks that need both the layers and the training set-up. */
/* A model-level norm_plus_one (Gemma's (1 + w) RMSNorms) reaches the kinds that have the
 * parameter; a layer whose RMSNorm has none (moe, mamba2, mla) is an error at the dimension, never
 * a model with some norms shifted and others not. */
static void norm_shift_check(sema *s) {
  if (s->dims[IR_MD_NORM_PLUS1] != 1) return;
  for (int i = 0; i < s->m->nlayers; i++) {
    const ir_layer *l = &s->m->layers[i];
    if (l->kind != IR_KIND_MOE && l->kind != IR_KIND_MAMBA2 && l->kind != IR_KIND_MLA) continue;
    diag_error(s->d, L(s->dim_loc[IR_MD_NORM_PLUS1]),
               "norm_plus_one = true: layer '%s' (%s) normalizes with x / rms(x) * w, not "
               "(1 + w)", l->name, ir_kinds[l->kind].name);
    return;
  }
}

static void cross_checks(sema *s) {
  ir_module *m = s->m;
  ir_train *t = &m->train;
  if (m->nlayers > 0 && ir_field_is_set(t, IR_F_TRAIN_pipeline) && t->pipeline > m->nlayers)
    diag_error(s->d, L(train_key(s, "pipeline")),
               "pipeline = %lld exceeds the %d layers of model '%s'", (long long)t->pipeline,
               m->nlayers, m->name);
  if (t->tensor <= 1) return;
  /* every dimension that tensor parallelism splits (layer_params.def TP), reported once per
   * kind: the first failing layer names the problem */
  bool reported[IR_KIND_COUNT] = {false};
  for (int i = 0; i < m->nlayers; i++) {
    const ir_layer *l = &m->layers[i];
    int p = reported[l->kind] ? -1 : ir_layer_tp_misfit(l, t->tensor);
    if (p < 0) continue;
    diag_error(s->d, L(train_key(s, "tensor")),
               "tensor = %lld does not divide %s = %g of layer '%s' (%s)", (long long)t->tensor,
               ir_layer_params[p].name, l->p[p], l->name, ir_kinds[l->kind].name);
    reported[l->kind] = true;
  }
}

/* Copy source file names into the module so it outlives the diagnostics engine. */
static void own_locations(sema *s) {
  ir_module *m = s->m;
  const char *last_name = NULL, *last_copy = NULL;
  for (int i = 0; i < m->nlayers; i++) {
    ir_loc *l = &m->layers[i].loc;
    const diag_source *src = diag_get_source(s->d, l->src);
    if (!src) continue;
    if (src->name != last_name) {
      last_name = src->name;
      last_copy = arena_strdup(&m->arena, src->name);
    }
    l->file = last_copy;
  }
  for (int i = 0; i < m->ndevices; i++) {
    const diag_source *src = diag_get_source(s->d, m->devices[i].loc.src);
    if (src) m->devices[i].loc.file = arena_strdup(&m->arena, src->name);
  }
  for (int i = 0; i < m->nstages; i++) {
    const diag_source *src = diag_get_source(s->d, m->stages[i].loc.src);
    if (src) m->stages[i].loc.file = i > 0 ? m->stages[0].loc.file
                                           : arena_strdup(&m->arena, src->name);
  }
}

ir_module *fe_compile(diag_engine *d, uint32_t file, const fe_options *o) {
  sema s;
  memset(&s, 0, sizeof s);
  s.d = d;
  s.o = o;
  int errors_before = diag_error_count(d);
  const diag_source *src = diag_get_source(d, file);
  mark_loaded(&s, src->name);
  load(&s, file, 0);
  ir_module *m = NULL;
  fe_stmt *model = NULL;
  if (s.syntax_errors == 0 && !diag_limit_reached(d)) {
    fe_assign *model_ref = NULL;
    if (s.train)
      for (fe_assign *a = s.train->assigns; a; a = a->next)
        if (strcmp(a->key, "model") == 0) model_ref = a;
    model = choose_model(&s, model_ref);
  }
  if (model) {
    m = ir_module_new(model->name);
    s.m = m;
    m->loc.src = model->name_loc.file;
    m->loc.line = (uint32_t)model->name_loc.first_line;
    m->loc.col = (uint32_t)model->name_loc.first_column;
    m->loc.file = arena_strdup(&m->arena, diag_get_source(d, model->name_loc.file)->name);
    if (s.train) {
      m->train_loc = m->loc;
      m->train_loc.src = s.train->loc.file;
      m->train_loc.line = (uint32_t)s.train->loc.first_line;
      m->train_loc.col = (uint32_t)s.train->loc.first_column;
    }
    for (int i = 0; i < s.profiles.n; i++) ir_module_add_profile(m, s.profiles.v[i]->name);
    model_dims(&s, model);
    fe_assign *cluster_ref = NULL;
    int before_train = diag_error_count(d);
    train_settings(&s, &cluster_ref);
    s.train_bad = diag_error_count(d) != before_train;
    expand_items(&s, model->items, false);
    norm_shift_check(&s);
    if (m->nlayers == 0 && !s.too_many && diag_error_count(d) == errors_before)
      diag_error(d, L(model->name_loc), "model '%s' has no layers", model->name);
    number_names(&s);
    cluster_devices(&s, cluster_ref);
    if (!s.train_bad) cross_checks(&s);
    if (!s.too_many && diag_error_count(d) == errors_before) spec_stages(&s);
    own_locations(&s);
  }
  for (int i = 0; i < s.nloaded; i++) free(s.loaded[i]);
  free(s.loaded);
  sema_defs *all[] = {&s.models, &s.blocks, &s.devices, &s.clusters, &s.profiles};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) {
    free(all[i]->v);
    free(all[i]->slots);
  }
  free(s.block_stack);
  free(s.cuts);
  arena_free(&s.a);
  if (m && diag_error_count(d) != errors_before) {
    ir_module_free(m);
    m = NULL;
  }
  return m;
}
