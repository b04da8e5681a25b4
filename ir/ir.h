/* ir.h -- the pipeline IR: a module holding the model's layers, the training set-up, the devices
 * and links of the cluster, and the plan sections that passes fill (stages, placement, schedule,
 * prediction); its textual printer and reader, and the verifier. Everything that has a list is
 * generated from the .def tables next to this header. */
#ifndef OCTO_IR_H
#define OCTO_IR_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "support.h"

/* ---- Tables ------------------------------------------------------------------------------ */

/* Physical dimension of a quantity; a unit belongs to exactly one. */
typedef enum ir_dim { IR_DIM_NONE, IR_DIM_TIME, IR_DIM_BYTES, IR_DIM_FLOPS, IR_DIM_BW } ir_dim;

typedef enum ir_type {
#define IR_TYPE(ID, NAME, DIM, DOC) IR_T_##ID,
#include "types.def"
#undef IR_TYPE
  IR_T_COUNT_
} ir_type;

/* Named values of enumerated types: IR_<TYPE>_<ID>, numbered from 0 within each type (the
 * IR_EIN_<TYPE> switch selects one type's entries per inclusion of enums.def). */
#define IR_ESKIP_(T, ID)
#define IR_EMEMBER_(T, ID) IR_##T##_##ID,
#define IR_ENUM(T, ID, S, DOC) IR_EIN_##T(T, ID)
#define IR_EIN_ACT IR_EMEMBER_
#define IR_EIN_DTYPE IR_ESKIP_
#define IR_EIN_OPTIMIZER IR_ESKIP_
#define IR_EIN_RECOMPUTE IR_ESKIP_
#define IR_EIN_BACKEND IR_ESKIP_
typedef enum ir_act {
#include "enums.def"
} ir_act;
#undef IR_EIN_ACT
#define IR_EIN_ACT IR_ESKIP_
#undef IR_EIN_DTYPE
#define IR_EIN_DTYPE IR_EMEMBER_
typedef enum ir_dtype {
#include "enums.def"
} ir_dtype;
#undef IR_EIN_DTYPE
#define IR_EIN_DTYPE IR_ESKIP_
#undef IR_EIN_OPTIMIZER
#define IR_EIN_OPTIMIZER IR_EMEMBER_
typedef enum ir_optimizer {
#include "enums.def"
} ir_optimizer;
#undef IR_EIN_OPTIMIZER
#define IR_EIN_OPTIMIZER IR_ESKIP_
#undef IR_EIN_RECOMPUTE
#define IR_EIN_RECOMPUTE IR_EMEMBER_
typedef enum ir_recompute {
#include "enums.def"
} ir_recompute;
#undef IR_EIN_RECOMPUTE
#define IR_EIN_RECOMPUTE IR_ESKIP_
#undef IR_EIN_BACKEND
#define IR_EIN_BACKEND IR_EMEMBER_
typedef enum ir_backend {
#include "enums.def"
} ir_backend;
#undef IR_EIN_BACKEND
#define IR_EIN_BACKEND IR_ESKIP_
#undef IR_ENUM

typedef enum ir_layer_kind {
#define LAYER_KIND(ID, NAME, RC, DOC) IR_KIND_##ID,
#include "layer_kinds.def"
#undef LAYER_KIND
  IR_KIND_COUNT
} ir_layer_kind;

typedef enum ir_layer_param {
#define LAYER_PARAM(K, ID, NAME, T, FM, DEF, TP, DOC) IR_LP_##K##_##ID,
#include "layer_params.def"
#undef LAYER_PARAM
  IR_LP_COUNT
} ir_layer_param;

typedef enum ir_model_dim {
#define MODEL_DIM(ID, NAME, T, DOC) IR_MD_##ID,
#include "model_dims.def"
#undef MODEL_DIM
  IR_MD_COUNT
} ir_model_dim;

typedef enum ir_op_kind {
#define IR_OP(ID, S, DOC) IR_OP_##ID,
#include "ops.def"
#undef IR_OP
  IR_OP_COUNT
} ir_op_kind;

typedef enum ir_record_kind {
  IR_REC_TRAIN, IR_REC_CLUSTER, IR_REC_LINK, IR_REC_DEVICE, IR_REC_COST, IR_REC_PREDICT,
  IR_REC_DEVPREDICT, IR_REC_COUNT
} ir_record_kind;

/* Global index of each record field in ir_fields: IR_F_<RECORD>_<field>, in records.def order. */
typedef enum ir_field_id {
#define IR_FIELD(R, f, T, D, S, DOC) IR_F_##R##_##f,
#include "records.def"
#undef IR_FIELD
  IR_F_COUNT_
} ir_field_id;

/* C storage of a record field of each type: whole-number types as int64_t, the rest double. */
#define IR_CTYPE_COUNT int64_t
#define IR_CTYPE_BOOL int64_t
#define IR_CTYPE_ACT int64_t
#define IR_CTYPE_DTYPE int64_t
#define IR_CTYPE_OPTIMIZER int64_t
#define IR_CTYPE_RECOMPUTE int64_t
#define IR_CTYPE_BACKEND int64_t
#define IR_CTYPE_REAL double
#define IR_CTYPE_TIME double
#define IR_CTYPE_BYTES double
#define IR_CTYPE_FLOPS double
#define IR_CTYPE_BW double

/* Record structs: one member per IR_FIELD of the record, plus 'set', the mask of given fields
 * (bit i = i-th field of the record in records.def order). */
#define IR_SKIP_(f, T)
#define IR_MEMBER_(f, T) IR_CTYPE_##T f;
#define IR_FIELD(R, f, T, D, S, DOC) IR_IN_##R(f, T)
#define IR_IN_TRAIN IR_SKIP_
#define IR_IN_CLUSTER IR_SKIP_
#define IR_IN_LINK IR_SKIP_
#define IR_IN_DEVICE IR_SKIP_
#define IR_IN_COST IR_SKIP_
#define IR_IN_PREDICT IR_SKIP_
#define IR_IN_DEVPREDICT IR_SKIP_
#undef IR_IN_TRAIN
#define IR_IN_TRAIN IR_MEMBER_
/* Training set-up: parallel degrees, batch, precision, memory (records.def TRAIN). */
typedef struct ir_train {
#include "records.def"
  uint64_t set;  /* mask of fields given */
  uint64_t free; /* mask of fields left for the config pass to choose (IR_TRAIN_FREE_FIELDS;
                    never also in 'set'); printed "field = free" */
} ir_train;
#undef IR_IN_TRAIN
#define IR_IN_TRAIN IR_SKIP_
/* The train fields a configuration search may choose (octoc --search=config, the config pass):
 * unset in a module they are free, and only the config pass may run on it. */
#define IR_TRAIN_FREE_FIELDS "pipeline tensor data micro_batch recompute zero"
#undef IR_IN_CLUSTER
#define IR_IN_CLUSTER IR_MEMBER_
/* Shape of the cluster (records.def CLUSTER). */
typedef struct ir_cluster {
#include "records.def"
  uint64_t set; /* mask of fields given */
} ir_cluster;
#undef IR_IN_CLUSTER
#define IR_IN_CLUSTER IR_SKIP_
#undef IR_IN_LINK
#define IR_IN_LINK IR_MEMBER_
/* One interconnect: bandwidth and latency (records.def LINK). */
typedef struct ir_link_rec {
#include "records.def"
  uint64_t set; /* mask of fields given */
} ir_link_rec;
#undef IR_IN_LINK
#define IR_IN_LINK IR_SKIP_
#undef IR_IN_DEVICE
#define IR_IN_DEVICE IR_MEMBER_
/* Properties of one pipeline device (records.def DEVICE). */
typedef struct ir_device_rec {
#include "records.def"
  uint64_t set; /* mask of fields given */
} ir_device_rec;
#undef IR_IN_DEVICE
#define IR_IN_DEVICE IR_SKIP_
#undef IR_IN_COST
#define IR_IN_COST IR_MEMBER_
/* Costs of one layer, filled by the cost pass (records.def COST). */
typedef struct ir_cost {
#include "records.def"
  uint64_t set; /* mask of fields given */
} ir_cost;
#undef IR_IN_COST
#define IR_IN_COST IR_SKIP_
#undef IR_IN_PREDICT
#define IR_IN_PREDICT IR_MEMBER_
/* Whole-plan prediction of the simulator (records.def PREDICT). */
typedef struct ir_predict {
#include "records.def"
  uint64_t set; /* mask of fields given */
} ir_predict;
#undef IR_IN_PREDICT
#define IR_IN_PREDICT IR_SKIP_
#undef IR_IN_DEVPREDICT
#define IR_IN_DEVPREDICT IR_MEMBER_
/* Per-device prediction of the simulator (records.def DEVPREDICT). */
typedef struct ir_devpredict {
#include "records.def"
  uint64_t set; /* mask of fields given */
} ir_devpredict;
#undef IR_IN_DEVPREDICT
#define IR_IN_DEVPREDICT IR_SKIP_
#undef IR_FIELD

/* Descriptions generated from the tables. */
typedef struct ir_type_info {
  const char *name; /* what error messages call a value of the type */
  ir_dim dim;       /* dimension a written quantity must have */
} ir_type_info;
extern const ir_type_info ir_types[IR_T_COUNT_];

typedef struct ir_unit_info {
  const char *name; /* spelling after a number */
  ir_dim dim;       /* dimension it measures */
  double scale;     /* value of 1 unit in base units */
  bool printable;   /* the printer may choose it */
} ir_unit_info;
extern const ir_unit_info ir_units[];
extern const int ir_unit_count;

typedef struct ir_kind_info {
  const char *name;    /* spelling in specs and IR */
  const char *summary; /* one line for docs and --help */
  bool recomputable;   /* 'recompute = full' runs its forward again (layer_kinds.def) */
} ir_kind_info;
extern const ir_kind_info ir_kinds[IR_KIND_COUNT];

typedef struct ir_param_info {
  ir_layer_kind kind; /* kind the parameter belongs to */
  const char *name;   /* spelling */
  ir_type type;       /* value type */
  bool from_model;    /* defaults to the model-level dimension of the same name */
  double def;         /* default when not given; NAN: derived or required */
  bool tp_split;      /* tensor parallelism splits it: the tensor degree must divide it */
  const char *doc;    /* meaning */
} ir_param_info;
extern const ir_param_info ir_layer_params[IR_LP_COUNT];

typedef struct ir_model_dim_info {
  const char *name; /* spelling */
  ir_type type;     /* value type */
  const char *doc;  /* meaning */
} ir_model_dim_info;
extern const ir_model_dim_info ir_model_dims[IR_MD_COUNT];

typedef struct ir_field_info {
  ir_record_kind record; /* record it belongs to */
  const char *name;      /* spelling */
  ir_type type;          /* value type */
  size_t offset;         /* offset of its member in the record struct */
  double def;            /* default applied by the front end; NAN: required or computed */
  bool ir_only;          /* computed by the compiler; not accepted in a spec */
  const char *doc;       /* meaning */
} ir_field_info;
extern const ir_field_info ir_fields[];
extern const int ir_field_count;

typedef struct ir_enum_info {
  ir_type type;     /* enumerated type it belongs to */
  int value;        /* its number within that type */
  const char *name; /* spelling */
  const char *doc;  /* meaning */
} ir_enum_info;
extern const ir_enum_info ir_enum_values[];
extern const int ir_enum_value_count;

extern const char *const ir_record_names[IR_REC_COUNT]; /* "train", "cluster", ... */
extern const char *const ir_op_names[IR_OP_COUNT];      /* "F", "B", ... */

/* ---- Table lookups (all return -1 / NULL when not found) ---------------------------------- */

int ir_kind_lookup(const char *name);
/* Index in ir_layer_params of kind k's first parameter, and the number of its parameters. */
int ir_kind_first_param(ir_layer_kind k);
int ir_kind_nparams(ir_layer_kind k);
/* Parameter of kind 'k' spelled 'name', or -1. */
int ir_param_lookup(ir_layer_kind k, const char *name);
int ir_model_dim_lookup(const char *name);
/* First field index and count of a record in ir_fields. */
void ir_record_fields(ir_record_kind r, int *first, int *count);
/* Field of record r spelled 'name' (global index into ir_fields), or -1. */
int ir_field_lookup(ir_record_kind r, const char *name);

/* A bound of ir/limits.def: the largest value a set-up field may take. */
typedef struct ir_limit_info {
  int field;       /* index into ir_fields */
  double max;      /* the largest value allowed */
  const char *why; /* what the bound stands for, for the error */
} ir_limit_info;
/* The bound of field f (an index into ir_fields), or NULL when it has none. */
const ir_limit_info *ir_field_limit(int f);
/* The largest cluster (nodes x gpus_per_node) the compiler plans for. */
#define IR_MAX_GPUS 1048576
/* The most schedule operations of a plan (F, B and W of every stage and microbatch: 3 x stages x
 * microbatches), checked by the schedule passes and the simulator before they allocate. */
#define IR_MAX_OPS 1e7
const ir_unit_info *ir_unit_lookup(const char *name, size_t len);
/* Value of enumerated type t spelled 'name', or -1; and the spelling of a value, or NULL. */
int ir_enum_lookup(ir_type t, const char *name);
const char *ir_enum_name(ir_type t, int value);
bool ir_type_is_enum(ir_type t);
/* Whether values of t are stored as int64_t (whole numbers, booleans, enums). */
bool ir_type_is_integral(ir_type t);
/* Name of a dimension for messages ("time", "size", ...). */
const char *ir_dim_name(ir_dim d);

/* Generic record access. 'rec' points at the record struct of the field's record. */
double ir_field_get(const void *rec, int field);
void ir_field_set(void *rec, int field, double v);
bool ir_field_is_set(const void *rec, int field);
/* The field's value when set, else its records.def default (NAN when it has none). */
double ir_field_value(const void *rec, int field);
/* Mask word of a record struct (every record struct ends with 'uint64_t set'). */
uint64_t *ir_record_mask(void *rec, ir_record_kind r);

/* ---- Formatting of values ---------------------------------------------------------------- */

/* Append the canonical text of value v of type t to 'sb': integers plainly, booleans as
 * true/false, enums by name, quantities in the unit ir_unit_for_values chooses for v alone (the
 * printer chooses one unit for all the values of a dimension in a record instead). Post:
 * parsing the text back with ir_unit_lookup's scale gives exactly v. */
void ir_format_value(strbuf *sb, ir_type t, double v);

/* The unit in which the printer writes every value of dimension 'dim' of one record (the rule
 * of docs/ir.md, "How the printer writes a value"): among the printable units of dim in which
 * every finite value of vals[0..n) has an exact text, the one with the smallest sum of squared
 * scores (score: text length, plus 2 for a number below 1, plus 1 per integer digit beyond 4)
 * over the non-zero values; ties go to the unit listed first in units.def. Pre: dim is a quantity
 * dimension (not IR_DIM_NONE), n >= 0. Post: never NULL; the dimension's base unit (scale 1,
 * in which every finite value is exact) when no value is finite and non-zero. */
const ir_unit_info *ir_unit_for_values(ir_dim dim, const double *vals, int n);

/* Append v's shortest exact text in unit u, followed by the unit's name ("640.0625MiB").
 * Returns false and appends nothing when u is NULL, v is not finite, or no text of up to 17
 * digits reads back as exactly v in u. Post (on true): scale_apply(strtod(number), u->scale)
 * == v. */
bool ir_format_in_unit(strbuf *sb, double v, const ir_unit_info *u);

/* ---- Values as written (value.c): the one grammar of the DSL, the IR and pass options ---- */

/* A value as written: ['+' | '-'] number [blanks] [unit], or a word. The texts point into the
 * caller's buffer. */
typedef struct ir_value_text {
  bool word;        /* a word: true, false, an enum value, or a word where a number belongs */
  bool negative;    /* written with a leading '-' */
  const char *num;  /* the number (digits [. digits] [e [+-] digits]) or the word */
  size_t num_len;   /* its length */
  const char *unit; /* the unit's spelling (NULL: none) */
  size_t unit_len;  /* its length (0: none) */
} ir_value_text;

/* Why a value does not fit its type, in the order ir_value_convert checks. */
typedef enum ir_value_error {
  IR_VALUE_OK,           /* it fits */
  IR_VALUE_NOT_BOOL,     /* a word other than true or false for a boolean */
  IR_VALUE_NOT_ENUM,     /* a word that is none of the enumerated type's spellings */
  IR_VALUE_NOT_FINITE,   /* nan, inf, ... where a number belongs */
  IR_VALUE_WORD,         /* another word where a number belongs */
  IR_VALUE_NUMBER,       /* a number for a boolean or an enumerated type */
  IR_VALUE_NEGATIVE,     /* a negative number (other than -0) where values are non-negative */
  IR_VALUE_UNKNOWN_UNIT, /* the unit is not in units.def */
  IR_VALUE_SUFFIX,       /* a count suffix (K, M, G) on a plain type other than a count */
  IR_VALUE_WRONG_DIM,    /* a unit of another dimension (*unit tells which) */
  IR_VALUE_NO_UNIT,      /* a quantity of a dimension written without unit */
  IR_VALUE_RANGE,        /* the scaled value is not a finite double */
  IR_VALUE_FRACTION,     /* a count that is not whole */
  IR_VALUE_TOO_LARGE,    /* a count above 2^53 */
  IR_VALUE_INEXACT,      /* plain digits of a count that a double rounds (2^53 + 1) */
} ir_value_error;

/* Flags of ir_value_convert: negative values allowed; counts up to 9e18, not 2^53. */
#define IR_VALUE_SIGNED 1u
#define IR_VALUE_INT64 2u
/* Split s[0, n) into a value: a sign, a number and (after optional blanks) the rest as its
 * unit, or a word ([A-Za-z_][A-Za-z0-9_]*, the bytes after it not taken). Returns the bytes
 * taken (n for a number), or 0 when s starts with neither. */
size_t ir_value_scan(const char *s, size_t n, ir_value_text *v);
/* The number text s[0, n) (digits [. digits] [e [+-] digits]) as strtod reads it; plain digits
 * of up to 15 without strtod. */
double ir_value_number(const char *s, size_t n);
/* Convert v to a value of type t: booleans 0 or 1, enums their index, numbers the written number
 * times the unit's scale by scale_apply (exactly the text the printer checks), in base units.
 * A negative value is refused unless flags has IR_VALUE_SIGNED; a count is at most 2^53, or
 * 9e18 (exact as written) with IR_VALUE_INT64 (pass options held in int64_t). Returns IR_VALUE_OK with *out set, or why v
 * does not fit (*out: the value it would read as when that is known, else 0). *unit (when
 * non-NULL) receives the unit found in units.def, NULL when none. */
ir_value_error ir_value_convert(const ir_value_text *v, ir_type t, unsigned flags, double *out,
                                const ir_unit_info **unit);
/* For messages: "a" or "an" before 'word'; the spellings of enumerated type t as "a, b, c"; the
 * units of dimension dim (the printable ones only when printable_only) as "s, ms". */
const char *ir_article(const char *word);
void ir_enum_names(strbuf *sb, ir_type t);
void ir_unit_names(strbuf *sb, ir_dim dim, bool printable_only);

/* ---- Module --------------------------------------------------------------------------------*/

/* Source position of an IR entity: where the spec or IR text defined it. */
typedef struct ir_loc {
  const char *file; /* file name (module arena), NULL when unknown; printed by --print-debuginfo */
  uint32_t src;     /* diag source id in the engine that read it; 0 when unknown */
  uint32_t line;    /* 1-based line; 0 when unknown */
  uint32_t col;     /* 1-based column */
} ir_loc;

/* Diagnostic location of an IR location (file 0 when unknown). */
static inline diag_loc ir_diag_loc(ir_loc l) { return diag_mkloc(l.src, l.line, l.col, 0); }

/* The costs of a layer on a device type other than the first device's ('cost "TYPE" {...}'). */
typedef struct ir_type_cost {
  const char *type; /* device type name (module arena) */
  ir_cost cost;     /* the layer's costs on a device of that type */
} ir_type_cost;

typedef struct ir_layer {
  const char *name;      /* human-readable name, unique within the module by convention */
  ir_layer_kind kind;    /* what the layer computes */
  double p[IR_LP_COUNT]; /* parameters, indexed by ir_layer_param; NAN when not set; only the
                            kind's own entries are meaningful */
  ir_cost cost;          /* costs on the first device's type (cost.set == 0 until the cost pass
                            runs) */
  ir_type_cost *tcosts;  /* costs on the module's other device types, in order of appearance */
  int ntcosts, tcosts_cap; /* count, allocated */
  ir_loc loc;            /* where it was defined */
} ir_layer;

typedef struct ir_device {
  const char *type; /* device type name (e.g. "h100") */
  ir_device_rec rec; /* peak, memory, bandwidth, efficiency, node */
  ir_devpredict predict; /* simulator's per-device figures (predict.set == 0 when absent) */
  ir_loc loc;       /* where it was defined */
} ir_device;

/* An explicit link between two devices that overrides the cluster's intra/inter links. */
typedef struct ir_link {
  int from, to;    /* device indices */
  ir_link_rec rec; /* bandwidth and latency */
} ir_link;

/* A pipeline stage: the half-open layer range [first, end), placed on 'device' (-1 if not yet). */
typedef struct ir_stage {
  int first, end; /* layer range */
  int device;     /* device index or -1 */
  ir_recompute recompute; /* per-stage recomputation: NONE (the layers cost as recorded) or FULL
                             (its recomputable layers keep only their input and pay F again
                             before B; only when the module's train.recompute is none) */
  int recompute_layers;   /* with FULL: how many of its recomputable layers recompute, the first
                             ones (Megatron's block method); 0: all of them (and always 0 with
                             NONE); ir_stage_layer_recomputes */
  bool offload;           /* its activations of each microbatch go to host memory over the
                             device's PCIe link when F ends and come back before B
                             (docs/simulator.md, activation offload); needs the device's 'pcie' */
  ir_loc loc;     /* where it was defined */
} ir_stage;

/* One scheduled operation of a device. */
typedef struct ir_op {
  ir_op_kind kind; /* F, B, W or BW */
  int stage;       /* stage index */
  int mb;          /* microbatch index */
} ir_op;

/* The ordered operations of one device. */
typedef struct ir_schedule {
  ir_op *ops; /* in execution order */
  int nops;   /* number of ops */
  int cap;    /* allocated */
  ir_loc loc; /* where it was defined */
} ir_schedule;

typedef struct ir_module {
  arena arena;            /* owns all strings of the module */
  const char *name;       /* module name (the model's) */
  ir_loc loc;             /* where the module (model) was defined */
  ir_loc train_loc;       /* where the train settings were defined */
  const char **profiles;  /* profile files named by the spec */
  int nprofiles, profiles_cap; /* count, allocated */
  ir_train train;         /* training set-up */
  const char *cluster_name; /* name of the cluster, NULL if none */
  ir_cluster cluster;     /* its shape */
  ir_link_rec intra, inter; /* links inside a node and between nodes (set == 0 when absent) */
  ir_device *devices;     /* pipeline devices $d0.. */
  int ndevices, devices_cap;
  ir_link *links;         /* explicit device-pair links */
  int nlinks, links_cap;
  ir_layer *layers;       /* layers %0.. in model order */
  int nlayers, layers_cap;
  ir_stage *stages;       /* stages @s0.. (nstages == 0 before partitioning) */
  int nstages, stages_cap;
  ir_schedule *schedules; /* per device; NULL before scheduling, else ndevices entries */
  ir_predict predict;     /* whole-plan prediction (set == 0 when absent) */
  const char *schedule_method; /* what made the schedules ("1f1b", ...; module arena), NULL when
                                  unknown (written by hand) */
} ir_module;

ir_module *ir_module_new(const char *name);
void ir_module_free(ir_module *m);
/* A deep copy of src (strings, arrays, plan and locations); independent of src afterwards. */
ir_module *ir_module_clone(const ir_module *src);
/* Append a layer of kind k with all parameters unset; returns it (valid until the next add). */
ir_layer *ir_module_add_layer(ir_module *m, const char *name, ir_layer_kind k);
ir_device *ir_module_add_device(ir_module *m, const char *type);
/* The cost record of layer l for device type 'type' (add it, unset, when absent). Pre: type is
 * not the first device's type (that one is l->cost). */
ir_cost *ir_layer_add_type_cost(ir_module *m, ir_layer *l, const char *type);
/* The costs of layer l on device dv of m: l->cost on the first device's type (or when m has no
 * record for dv's type), else the record of dv's type. */
const ir_cost *ir_layer_cost_on(const ir_module *m, const ir_layer *l, int dv);
/* Whether recomputation applies to layers of kind k (layer_kinds.def RECOMPUTABLE: the
 * transformer-stack kinds; Megatron recomputes neither the embedding nor the LM head). */
bool ir_kind_recomputable(ir_layer_kind k);
/* Number of layers of stage s whose kind is recomputable. */
int ir_stage_recomputable(const ir_module *m, const ir_stage *s);
/* Whether stage s recomputes its layer i: s->recompute is FULL, the layer's kind is recomputable
 * and, when s->recompute_layers = N > 0, it is one of the stage's first N recomputable layers
 * (Megatron's block method; docs/ir.md "Stage recomputation" says why the first). Takes
 * O(i - s->first) when N > 0, O(1) otherwise. Pre: s->first <= i < s->end. */
bool ir_stage_layer_recomputes(const ir_module *m, const ir_stage *s, int i);
/* The cost record of layer i as stage s (on its device's type, ir_layer_cost_on) charges it:
 * the recorded costs, or, when the stage recomputes the layer (ir_stage_layer_recomputes), b + f
 * (the forward again before B; b - core + f when the module's selective recomputation put the
 * attention core's forward, core, in b already) and act = act_w = the bytes of the layer's input (the previous
 * layer's out; the layer's own out for layer 0), held from F until W; the state B rebuilds from
 * that input is not in the record but ir_stage_layer_rebuild's. Pre: s->first <= i < s->end,
 * costs set. */
ir_cost ir_stage_layer_cost(const ir_module *m, const ir_stage *s, int i);
/* The bytes that B of layer i rebuilds as stage s runs it and keeps until W (memory that grows at
 * B, beside what ir_stage_layer_cost charges): when the stage recomputes the layer
 * (ir_stage_layer_recomputes), its recorded act_w (on its device's type: the saved state the forward run again
 * writes, which W needs); else 0. The module-wide policies change the records instead and rebuild
 * nothing here. Pre: s->first <= i < s->end. Post: >= 0 when the record's act_w is. */
double ir_stage_layer_rebuild(const ir_module *m, const ir_stage *s, int i);
/* The memory limit of device dv (pre: 0 <= dv < m->ndevices): the train record's mem_limit when
 * given, else the device's memory, else INFINITY (no limit known). */
double ir_device_mem_limit(const ir_module *m, int dv);
/* Whether train field f (an IR_F_TRAIN_* index) is free, and marking it free (which unsets it)
 * or not. Only the fields of IR_TRAIN_FREE_FIELDS may be free. */
bool ir_train_is_free(const ir_train *t, int f);
void ir_train_set_free(ir_train *t, int f, bool free);
/* The first parameter of layer l that tensor parallelism splits (layer_params.def TP) and that
 * tensor degree t does not divide, or -1 when t divides every one. Pre: t >= 1. */
int ir_layer_tp_misfit(const ir_layer *l, int64_t t);
/* Whether f is one of IR_TRAIN_FREE_FIELDS. */
bool ir_train_may_be_free(int f);
/* The first free train field of m, or -1 when none is. */
int ir_train_first_free(const ir_module *m);
/* Drop every layer's records for other device types. */
void ir_module_clear_type_costs(ir_module *m);
/* Record a profile file named by the spec (the path is copied into the module). */
void ir_module_add_profile(ir_module *m, const char *path);
ir_link *ir_module_add_link(ir_module *m, int from, int to);
ir_stage *ir_module_add_stage(ir_module *m, int first, int end);
/* Create empty schedules for every device (no-op if they exist). */
void ir_module_init_schedules(ir_module *m);
void ir_schedule_push(ir_schedule *s, ir_op_kind k, int stage, int mb);
/* Remove the schedules, the method that made them ('schedule method') and the predictions
 * (which came from them), keeping stages and placement. Post: m->schedules == NULL. */
void ir_module_clear_schedules(ir_module *m);
/* Remove stages, placement, schedules and predictions (the plan), keeping costs. */
void ir_module_clear_plan(ir_module *m);
/* The body of m's layers: [*first, *end) without the leading embedding layers and the trailing
 * LM head layers (what Megatron's uniform split divides). Post: 0 <= *first <= *end <= nlayers. */
void ir_module_body(const ir_module *m, int *first, int *end);
/* Effective link between devices a != b: an explicit link, else intra or inter by node.
 * Returns NULL when no link is known. */
const ir_link_rec *ir_module_link(const ir_module *m, int a, int b);

/* Parameter helpers. */
static inline bool ir_layer_has(const ir_layer *l, ir_layer_param p) { return !isnan(l->p[p]); }
static inline int64_t ir_layer_int(const ir_layer *l, ir_layer_param p) { return (int64_t)l->p[p]; }

/* Fill the parameters of 'l' that are unset and derivable from others (head_dim from hidden
 * and heads, ...). For each one filled, calls note(ctx, param, rule) with a short rule text when
 * note is non-NULL. Pre: explicit and default values are set. */
void ir_layer_derive(ir_layer *l, void (*note)(void *ctx, int param, const char *rule), void *ctx);

/* Check the parameters of one layer: every parameter of its kind set, values in range, and the
 * kind's consistency rules (heads divide hidden, top_k <= experts, ...). Reports each problem
 * with diag at 'loc' prefixed by the layer name; returns the number of problems. */
int ir_layer_check(const ir_layer *l, diag_engine *d, diag_loc loc);
/* The module-level rule of layer i of m when it is a tied lm_head (layer_rules.h lr_tie_check:
 * an embedding before it with its vocab and hidden), reported at loc; other layers pass.
 * Returns the number of errors. */
int ir_layer_check_tie(const ir_module *m, int i, diag_engine *d, diag_loc loc);
/* The tied embeddings of m, as the stream's be_stream_tie: when a lm_head has tied = true and
 * the model an embedding (lr_tie_source), sets *emb and *head to the shared table's layer and
 * the head's and returns true; else false (both -1). Pre: the layers are verified. */
bool ir_module_tie(const ir_module *m, int *emb, int *head);

/* ---- Text form ----------------------------------------------------------------------------*/

typedef struct ir_print_opts {
  bool debuginfo; /* print loc(...) after layers and devices */
} ir_print_opts;

/* Print m in the textual IR form. Deterministic; ir_read accepts every output. */
void ir_print(const ir_module *m, strbuf *out, const ir_print_opts *o);
/* Print to a FILE (convenience). */
void ir_print_file(const ir_module *m, FILE *f, const ir_print_opts *o);

/* Parse the textual IR in source 'file' of diag engine d. Returns the module, or NULL after
 * reporting every error found with file:line:col. print(read(t)) == t for printer output. */
ir_module *ir_read(diag_engine *d, uint32_t file);

/* ---- Verifier ------------------------------------------------------------------------------*/

/* Check every invariant of m at the level it has reached (layers, train and devices always;
 * stages, placement, schedule and prediction when present). Reports through d (at the module's
 * locations when known, else at 'where'); returns the number of errors. */
int ir_verify(const ir_module *m, diag_engine *d, diag_loc where);

#endif
