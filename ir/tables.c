/* tables.c -- descriptions generated from the .def tables, their lookups, generic record field
 * access, and canonical formatting of values. */
#include <math.h>
#include <stdlib.h>
#include <pthread.h>
#include <string.h>

#include "ir.h"

const ir_type_info ir_types[IR_T_COUNT_] = {
#define IR_TYPE(ID, NAME, DIM, DOC) {NAME, IR_DIM_##DIM},
#include "types.def"
#undef IR_TYPE
};

const ir_unit_info ir_units[] = {
#define IR_UNIT(NAME, DIM, SCALE, PRINT) {NAME, IR_DIM_##DIM, SCALE, PRINT},
#include "units.def"
#undef IR_UNIT
};
const int ir_unit_count = (int)(sizeof ir_units / sizeof ir_units[0]);

const ir_param_info ir_layer_params[IR_LP_COUNT] = {
#define LAYER_PARAM(K, ID, NAME, T, FM, DEF, TP, DOC)                                             \
  {IR_KIND_##K, NAME, IR_T_##T, FM, DEF, TP, DOC},
#include "layer_params.def"
#undef LAYER_PARAM
};

static int kind_first(int k) {
  int n = 0;
#define LAYER_PARAM(K, ID, NAME, T, FM, DEF, TP, DOC) n += IR_KIND_##K < k;
#include "layer_params.def"
#undef LAYER_PARAM
  return n;
}
static int kind_count(int k) {
  int n = 0;
#define LAYER_PARAM(K, ID, NAME, T, FM, DEF, TP, DOC) n += IR_KIND_##K == k;
#include "layer_params.def"
#undef LAYER_PARAM
  return n;
}

const ir_kind_info ir_kinds[IR_KIND_COUNT] = {
#define LAYER_KIND(ID, NAME, RC, DOC) {NAME, DOC, RC},
#include "layer_kinds.def"
#undef LAYER_KIND
};

const ir_model_dim_info ir_model_dims[IR_MD_COUNT] = {
#define MODEL_DIM(ID, NAME, T, DOC) {NAME, IR_T_##T, DOC},
#include "model_dims.def"
#undef MODEL_DIM
};

#define IR_REC_TYPE_TRAIN ir_train
#define IR_REC_TYPE_CLUSTER ir_cluster
#define IR_REC_TYPE_LINK ir_link_rec
#define IR_REC_TYPE_DEVICE ir_device_rec
#define IR_REC_TYPE_COST ir_cost
#define IR_REC_TYPE_PREDICT ir_predict
#define IR_REC_TYPE_DEVPREDICT ir_devpredict
#define IR_SCOPE_SPEC false
#define IR_SCOPE_IR true

const ir_field_info ir_fields[] = {
#define IR_FIELD(R, f, T, D, S, DOC)                                                             \
  {IR_REC_##R, #f, IR_T_##T, offsetof(IR_REC_TYPE_##R, f), D, IR_SCOPE_##S, DOC},
#include "records.def"
#undef IR_FIELD
};
const int ir_field_count = (int)(sizeof ir_fields / sizeof ir_fields[0]);

#define IR_ENUM(T, ID, S, DOC) {IR_T_##T, IR_##T##_##ID, S, DOC},
const ir_enum_info ir_enum_values[] = {
#include "enums.def"
};
#undef IR_ENUM
const int ir_enum_value_count = (int)(sizeof ir_enum_values / sizeof ir_enum_values[0]);

const char *const ir_record_names[IR_REC_COUNT] = {"train",  "cluster", "link",   "device",
                                                   "cost",   "predict", "predict"};
const char *const ir_op_names[IR_OP_COUNT] = {
#define IR_OP(ID, S, DOC) S,
#include "ops.def"
#undef IR_OP
};

/* Parameter ranges of the kinds, computed on first use (entries are contiguous per kind). */
static int kind_ranges_first[IR_KIND_COUNT], kind_ranges_count[IR_KIND_COUNT];
static void kind_ranges_init(void) {
  for (int k = 0; k < IR_KIND_COUNT; k++) {
    kind_ranges_first[k] = kind_first(k);
    kind_ranges_count[k] = kind_count(k);
  }
}
static void kind_ranges(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT; /* the tuner's threads may come here at once */
  pthread_once(&once, kind_ranges_init);
}

int ir_kind_first_param(ir_layer_kind k) {
  kind_ranges();
  return kind_ranges_first[k];
}
int ir_kind_nparams(ir_layer_kind k) {
  kind_ranges();
  return kind_ranges_count[k];
}

int ir_kind_lookup(const char *name) {
  for (int k = 0; k < IR_KIND_COUNT; k++)
    if (strcmp(ir_kinds[k].name, name) == 0) return k;
  return -1;
}

int ir_param_lookup(ir_layer_kind k, const char *name) {
  int first = ir_kind_first_param(k), n = ir_kind_nparams(k);
  for (int i = first; i < first + n; i++)
    if (strcmp(ir_layer_params[i].name, name) == 0) return i;
  return -1;
}

int ir_model_dim_lookup(const char *name) {
  for (int i = 0; i < IR_MD_COUNT; i++)
    if (strcmp(ir_model_dims[i].name, name) == 0) return i;
  return -1;
}

/* Each record's range of fields (contiguous in records.def), found once. */
static int record_firsts[IR_REC_COUNT], record_counts[IR_REC_COUNT];
static void record_ranges_init(void) {
  for (int i = ir_field_count - 1; i >= 0; i--) {
    record_firsts[ir_fields[i].record] = i;
    record_counts[ir_fields[i].record]++;
  }
}

void ir_record_fields(ir_record_kind r, int *first, int *count) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, record_ranges_init);
  *first = record_firsts[r];
  *count = record_counts[r];
}

static const ir_limit_info ir_limits[] = {
#define IR_LIMIT(R, f, MAX, WHY) {IR_F_##R##_##f, MAX, WHY},
#include "limits.def"
#undef IR_LIMIT
};

const ir_limit_info *ir_field_limit(int f) {
  for (size_t i = 0; i < sizeof ir_limits / sizeof ir_limits[0]; i++)
    if (ir_limits[i].field == f) return &ir_limits[i];
  return NULL;
}

int ir_field_lookup(ir_record_kind r, const char *name) {
  for (int i = 0; i < ir_field_count; i++)
    if (ir_fields[i].record == r && strcmp(ir_fields[i].name, name) == 0) return i;
  return -1;
}

const ir_unit_info *ir_unit_lookup(const char *name, size_t len) {
  for (int i = 0; i < ir_unit_count; i++)
    if (strlen(ir_units[i].name) == len && memcmp(ir_units[i].name, name, len) == 0)
      return &ir_units[i];
  return NULL;
}

int ir_enum_lookup(ir_type t, const char *name) {
  for (int i = 0; i < ir_enum_value_count; i++)
    if (ir_enum_values[i].type == t && strcmp(ir_enum_values[i].name, name) == 0)
      return ir_enum_values[i].value;
  return -1;
}

const char *ir_enum_name(ir_type t, int value) {
  for (int i = 0; i < ir_enum_value_count; i++)
    if (ir_enum_values[i].type == t && ir_enum_values[i].value == value)
      return ir_enum_values[i].name;
  return NULL;
}

bool ir_type_is_enum(ir_type t) {
  return t == IR_T_ACT || t == IR_T_DTYPE || t == IR_T_OPTIMIZER || t == IR_T_RECOMPUTE ||
         t == IR_T_BACKEND;
}

bool ir_type_is_integral(ir_type t) {
  return t == IR_T_COUNT || t == IR_T_BOOL || ir_type_is_enum(t);
}

const char *ir_dim_name(ir_dim d) {
  switch (d) {
  case IR_DIM_NONE: return "plain number";
  case IR_DIM_TIME: return "time";
  case IR_DIM_BYTES: return "size";
  case IR_DIM_FLOPS: return "compute rate";
  case IR_DIM_BW: return "bandwidth";
  }
  return "?";
}

/* Index of a field within its record, for the 'set' mask. */
static int field_bit(int field) {
  int first, n;
  ir_record_fields(ir_fields[field].record, &first, &n);
  return field - first;
}

double ir_field_get(const void *rec, int field) {
  const ir_field_info *f = &ir_fields[field];
  const char *p = (const char *)rec + f->offset;
  if (ir_type_is_integral(f->type)) {
    int64_t v;
    memcpy(&v, p, sizeof v);
    return (double)v;
  }
  double v;
  memcpy(&v, p, sizeof v);
  return v;
}

uint64_t *ir_record_mask(void *rec, ir_record_kind r) {
  size_t off = 0;
  switch (r) {
  case IR_REC_TRAIN: off = offsetof(ir_train, set); break;
  case IR_REC_CLUSTER: off = offsetof(ir_cluster, set); break;
  case IR_REC_LINK: off = offsetof(ir_link_rec, set); break;
  case IR_REC_DEVICE: off = offsetof(ir_device_rec, set); break;
  case IR_REC_COST: off = offsetof(ir_cost, set); break;
  case IR_REC_PREDICT: off = offsetof(ir_predict, set); break;
  case IR_REC_DEVPREDICT: off = offsetof(ir_devpredict, set); break;
  case IR_REC_COUNT: break;
  }
  return (uint64_t *)((char *)rec + off);
}

void ir_field_set(void *rec, int field, double v) {
  const ir_field_info *f = &ir_fields[field];
  char *p = (char *)rec + f->offset;
  if (ir_type_is_integral(f->type)) {
    /* callers pass whole numbers in range; clamp anything else rather than overflow */
    int64_t iv = !(v == v) ? 0 : v >= 9.2e18 ? INT64_MAX : v <= -9.2e18 ? INT64_MIN : (int64_t)v;
    memcpy(p, &iv, sizeof iv);
  } else {
    memcpy(p, &v, sizeof v);
  }
  *ir_record_mask(rec, f->record) |= (uint64_t)1 << field_bit(field);
}

bool ir_field_is_set(const void *rec, int field) {
  uint64_t m = *ir_record_mask((void *)rec, ir_fields[field].record);
  return (m >> field_bit(field)) & 1;
}

double ir_field_value(const void *rec, int field) {
  return ir_field_is_set(rec, field) ? ir_field_get(rec, field) : ir_fields[field].def;
}

/* Score of value v written as 'text' in unit u, the readability measure of the unit rule:
 * the text's length, plus two when the number is below 1 in u (0.37TB/s loses to 370GB/s, 0.1ms
 * beats 100000ns) and one for each integer digit beyond four (2.819417ms beats 2819417ns).
 * Pre: text is v's exact text in u, v != 0. */
static size_t unit_score(const char *text, double v, const ir_unit_info *u) {
  size_t digits = strspn(text + (text[0] == '-'), "0123456789");
  return strlen(text) + (fabs(v) >= u->scale ? 0 : 2) + (digits > 4 ? digits - 4 : 0);
}

const ir_unit_info *ir_unit_for_values(ir_dim dim, const double *vals, int n) {
  const ir_unit_info *base = NULL, *best = NULL;
  size_t best_score = (size_t)-1;
  bool any_nonzero = false;
  for (int j = 0; j < n; j++) any_nonzero |= isfinite(vals[j]) && vals[j] != 0;
  for (int i = 0; i < ir_unit_count; i++) {
    const ir_unit_info *u = &ir_units[i];
    if (u->dim != dim || !u->printable) continue;
    if (u->scale == 1.0 && !base) base = u;
    size_t score = 0;
    bool exact = true;
    for (int j = 0; j < n && exact; j++) {
      char buf[48];
      if (!isfinite(vals[j])) continue;
      exact = fmt_shortest_scaled(buf, vals[j], u->scale);
      size_t sc = exact && vals[j] != 0 ? unit_score(buf, vals[j], u) : 0;
      score += sc * sc; /* squares: one long text weighs more than a few short ones */
    }
    if (exact && any_nonzero && score < best_score) {
      best_score = score;
      best = u;
    }
  }
  return best ? best : base;
}

bool ir_format_in_unit(strbuf *sb, double v, const ir_unit_info *u) {
  char buf[48];
  if (!u || !isfinite(v) || !fmt_shortest_scaled(buf, v, u->scale)) return false;
  strbuf_puts(sb, buf);
  strbuf_puts(sb, u->name);
  return true;
}

void ir_format_value(strbuf *sb, ir_type t, double v) {
  char buf[48];
  if (t == IR_T_BOOL) {
    strbuf_puts(sb, v != 0 ? "true" : "false");
    return;
  }
  if (ir_type_is_enum(t)) {
    const char *n = ir_enum_name(t, (int)v);
    strbuf_puts(sb, n ? n : "?");
    return;
  }
  if (t == IR_T_COUNT) {
    strbuf_printf(sb, "%lld", (long long)v);
    return;
  }
  ir_dim dim = ir_types[t].dim;
  if (dim == IR_DIM_NONE || !isfinite(v)) {
    fmt_shortest_scaled(buf, v, 1.0);
    strbuf_puts(sb, buf);
    return;
  }
  /* A lone value: the unit rule applied to a group of one. */
  if (!ir_format_in_unit(sb, v, ir_unit_for_values(dim, &v, 1))) {
    fmt_shortest_scaled(buf, v, 1.0); /* unreachable: the base unit is always exact */
    strbuf_puts(sb, buf);
  }
}
