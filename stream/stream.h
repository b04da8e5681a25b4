/* stream.h -- the instruction-stream library: the per-rank instruction streams the backend
 * lowers plans to and the runtime executes, their tables (the instruction set isa.def, operand
 * kinds operands.def, tensor kinds tensors.def; docs/isa.md describes them), the static validator
 * and the deadlock checker that every stream passes before it is written or run, the versioned
 * binary stream format (.ois) with its validating reader, the per-rank buffer figures, and the
 * disassembler. It depends on support/ only (the names of enum BACKEND, the layer kinds and
 * their parameters come from the IR's enums.def, layer_kinds.def and layer_params.def by
 * inclusion, not by linking), so the runtime and octo-dis link nothing above it. */
#ifndef OCTO_STREAM_H
#define OCTO_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "support.h"

/* ---- Tables -------------------------------------------------------------------------------- */

typedef enum be_opcode {
#define ISA_OP(ID, NAME, TRACE, FLAGS, NOPS, K0, K1, K2, K3, K4, K5, SYN) BE_OP_##ID,
#include "isa.def"
#undef ISA_OP
  BE_OP_COUNT
} be_opcode;

typedef enum be_operand_kind {
#define ISA_OPERAND(ID, NAME, SLOT, ROLE, OPT, DOC) BE_K_##ID,
#include "operands.def"
#undef ISA_OPERAND
  BE_K_COUNT
} be_operand_kind;

typedef enum be_tensor_kind {
#define BE_TENSOR(ID, NAME, MSG, HOST, DOC) BE_T_##ID,
#include "tensors.def"
#undef BE_TENSOR
  BE_T_COUNT
} be_tensor_kind;

/* What an instruction does (isa.def FLAGS). */
typedef enum be_flag {
  BE_COMPUTE = 1, BE_COMM = 2, BE_SYNC = 4, BE_MEM = 8, BE_END = 16, BE_COPY = 32
} be_flag;

/* What an instruction does with a slot operand (operands.def ROLE). */
typedef enum be_role {
  BE_ROLE_NONE, BE_ROLE_USE, BE_ROLE_DEF, BE_ROLE_MOD, BE_ROLE_SEND, BE_ROLE_RECV, BE_ROLE_WAIT,
  BE_ROLE_KILL
} be_role;

enum { BE_MAX_OPERANDS = 6 };

typedef struct be_op_info {
  const char *name;                   /* mnemonic ("FWD") */
  const char *trace;                  /* name in timelines ("F", "BW"; isa.def TRACE) */
  unsigned flags;                     /* be_flag bits */
  int nops;                           /* operand count */
  be_operand_kind kinds[BE_MAX_OPERANDS]; /* operand kinds (BE_K_NONE past nops) */
  const char *synopsis;               /* one line */
} be_op_info;
extern const be_op_info be_ops[BE_OP_COUNT];

typedef struct be_operand_info {
  const char *name; /* short name for docs */
  bool slot;        /* a buffer slot of the rank */
  be_role role;     /* what is done with the buffer */
  bool optional;    /* -1 allowed ("no buffer") */
  const char *doc;  /* meaning */
} be_operand_info;
extern const be_operand_info be_operands[BE_K_COUNT];

typedef struct be_tensor_info {
  const char *name; /* "act" */
  bool msg;         /* may travel in a message */
  bool host;        /* may be copied to host memory and back (OFFLOAD, RELOAD) */
  const char *doc;  /* meaning */
} be_tensor_info;
extern const be_tensor_info be_tensors[BE_T_COUNT];

/* Opcode spelled 'name' (case-sensitive mnemonic), or -1. */
int be_op_lookup(const char *name);
/* True for the opcodes whose instructions carry a predicted time in their program's pred table
 * (FWD, BWD_IN, BWD_W, BWD); false for every other value, out-of-range ones included. */
bool be_op_predicted(int op);

/* The measuring backends a stream's measured_on may name: enum BACKEND of the IR's enums.def
 * ("none", "cpu", "mpi", "cuda", "nccl"), included by stream/tables.c so that the two agree
 * without a link to ir/. be_backend_lookup gives the value spelled 'name' (its position in the
 * table, as the IR numbers it), or -1; be_backend_name the spelling of value b, or NULL when b is
 * out of range. */
int be_backend_lookup(const char *name);
const char *be_backend_name(int b);

/* The layer kinds and their parameters: the IR's layer_kinds.def and layer_params.def, included
 * (not linked) so that the numbers are the IR's. A stream spells a layer's kind and parameters
 * (be_layer); be_layer_kind and be_layer_param give them as these numbers, so that the runtime
 * reads a layer by typed index and matches no kind or parameter by its spelling. */
typedef enum be_kind {
#define LAYER_KIND(ID, NAME, RC, DOC) BE_KIND_##ID,
#include "../ir/layer_kinds.def"
#undef LAYER_KIND
  BE_KIND_COUNT
} be_kind;

/* Parameter ID of kind KIND is BE_LP_<KIND>_<ID>, numbered as the IR's IR_LP_<KIND>_<ID>. */
typedef enum be_lparam {
#define LAYER_PARAM(KIND, ID, NAME, T, FM, DEF, TP, DOC) BE_LP_##KIND##_##ID,
#include "../ir/layer_params.def"
#undef LAYER_PARAM
  BE_LP_COUNT
} be_lparam;

typedef struct be_kind_info {
  const char *name;  /* spelling ("attention") */
  bool recomputable; /* 'recompute = full' runs its forward again (layer_kinds.def) */
} be_kind_info;
extern const be_kind_info be_kinds[BE_KIND_COUNT];

typedef struct be_lparam_info {
  be_kind kind;     /* kind it belongs to */
  const char *name; /* spelling ("head_dim") */
  double def;       /* the IR's constant default (layer_params.def DEFAULT); NAN: derived from
                       other parameters, from the model, or required */
  bool act;         /* its value is an activation (type ACT: a value of enums.def's ACT) */
} be_lparam_info;
extern const be_lparam_info be_lparams[BE_LP_COUNT];

/* Kind spelled 'name' (NULL is fine), or -1. */
int be_kind_lookup(const char *name);
/* Parameter of kind k spelled 'name' (NULL is fine), or -1. */
int be_lparam_lookup(int k, const char *name);

/* A tensor of a step: kind, stage (as tensors.def names it) and microbatch. */
typedef struct be_tensor_ref {
  be_tensor_kind kind;
  int32_t stage, mb;
} be_tensor_ref;

/* ---- Streams -------------------------------------------------------------------------------- */

/* Version of the binary format written by be_write and the only one be_read accepts. */
#define BE_FORMAT_VERSION 7u

/* One instruction: an opcode and its operands (be_ops[op].nops of them; the rest are 0). */
typedef struct be_inst {
  uint8_t op;                     /* be_opcode */
  int32_t a[BE_MAX_OPERANDS];     /* operands; -1 for an absent optional slot */
} be_inst;

/* A buffer slot of a rank: a range of the rank's buffer arena, which the runtime allocates once;
 * the slot holds, one after the other, every tensor the backend assigned to it (their sizes and
 * shapes are in the stage table: be_tensor_bytes). Slots whose tensors are never live at the
 * same time may share addresses. */
typedef struct be_slot {
  uint64_t offset; /* where it starts in the arena */
  uint64_t bytes;  /* size: at least that of every tensor it holds */
  uint8_t tensor;  /* be_tensor_kind of the tensors it holds */
} be_slot;

/* The predicted time of one compute instruction of a rank's program: when the simulated timeline
 * of the plan (the one the lowering follows) starts and ends its operation. */
typedef struct be_pred {
  int32_t addr;  /* address of a FWD, BWD_IN, BWD_W or BWD instruction of the program */
  double t0, t1; /* predicted start and end, seconds from the step's start */
} be_pred;

/* The program of one pipeline rank. */
typedef struct be_program {
  int32_t device;   /* pipeline device of the plan ($dN) it runs on */
  char *type;       /* that device's type name ("h100") */
  int32_t node;     /* machine it is in */
  be_slot *slots;   /* its buffer slots */
  int32_t nslots;
  be_inst *code;    /* its instructions, executed in order */
  int32_t ncode, code_cap;
  double pred_busy; /* predicted compute time per step, seconds: the simulator's busy time of the
                       device (its F, B and W and the optimizer step; not the all-reduce) */
  double pred_peak; /* predicted peak memory of the device, bytes: the simulator's peak_mem of it
                       (static memory of its stages plus its largest live activations; the
                       report's "peak memory") */
  be_pred *pred;    /* one entry per FWD, BWD_IN, BWD_W and BWD instruction, in address order */
  int32_t npred;
} be_program;

/* A named number describing a layer (a layer parameter of the IR: "hidden", "ffn", "vocab"). */
typedef struct be_param {
  char *name;   /* parameter name (layer_params.def spelling) */
  double value; /* its value */
} be_param;

/* A layer of the model, for the runtime to build a stand-in of. */
typedef struct be_layer {
  char *name;        /* the IR layer's name */
  char *kind;        /* layer kind spelling ("attention", "mlp", "lm_head", ...) */
  be_param *params;  /* its parameters that are set */
  int32_t nparams;
} be_layer;

/* Kind of layer l (be_kind_lookup of its spelling), or -1 when it is none of the table's. */
int be_layer_kind(const be_layer *l);
/* Value of parameter p of layer l: the one the layer carries, else be_lparams[p].def (NAN when
 * the table has none). Pre: l is of p's kind. */
double be_layer_param(const be_layer *l, be_lparam p);


/* A stage: the layers [first, end) run by one rank, and the sizes of its tensors. */
typedef struct be_stage {
  int32_t first, end;    /* layer range */
  int32_t rank;          /* rank that runs it */
  uint64_t out_bytes;    /* its output (act s), also the size of the gradient of that output */
  int32_t out_shape;     /* shape of its output (index into shapes), -1 for opaque bytes */
  uint64_t stash_bytes;  /* what F keeps until B (0: none, no STASH buffer) */
  uint64_t wstash_bytes; /* what F and B keep until W (0: none, no WSTASH buffer) */
  int32_t recompute;     /* 1: the stage recomputes (IR 'recompute = full'): its FWD keeps only
                            what STASH and WSTASH count (its input), and its BWD_IN and BWD run
                            the forward again first; 0: no */
  int32_t recompute_layers; /* with recompute 1: how many of its recomputable layers do, the
                               first ones (IR 'recompute_layers'); 0: all of them (and always 0
                               without recompute) */
  int32_t offload;       /* 1: the stage offloads (IR 'offload = true'): its STASH and WSTASH
                            buffers go to host memory after its F (OFFLOAD) and come back before
                            its B (RELOAD); 0: no, and no OFFLOAD or RELOAD names the stage */
} be_stage;


/* Shape of a tensor that travels between stages. */
typedef struct be_shape {
  int32_t elem;     /* bytes per element */
  int32_t ndim;     /* 1..4 */
  int64_t dim[4];   /* extents, outermost first */
} be_shape;

/* An instruction stream: the whole step of one pipeline replica. Every replica of data
 * parallelism runs the same programs; world rank = replica x nranks + rank. */
typedef struct be_stream {
  char *model;        /* model name */
  int32_t nranks;     /* pipeline ranks (programs) */
  int32_t replicas;   /* data-parallel replicas */
  int32_t nstages;    /* stages */
  int32_t nmb;        /* microbatches per step */
  int32_t micro_batch; /* sequences per microbatch */
  int32_t seq;        /* tokens per sequence */
  char *dtype;        /* training precision ("bf16") */
  char *optimizer;    /* "adam" or "sgd" */
  int32_t dropout;    /* 1: the plan trains with dropout (train field dropout), which octo-run
                         does not implement and refuses; 0: without */
  int32_t scale;      /* octo-run scale the plan's costs were measured at (train field scale);
                         0: analytic costs of the full-size model */
  char *measured_on;  /* octo-run backend that measured them (train field measured_on, enum
                         BACKEND: "none", "cpu", "mpi", "cuda", "nccl"); never NULL after
                         be_lower or be_read */
  double pred_step;   /* predicted step time, seconds: the simulator's makespan of the plan */
  be_layer *layers;   /* the model's layers */
  int32_t nlayers;
  be_stage *stages;   /* nstages entries */
  be_shape *shapes;   /* shapes of the tensors messages and slots refer to */
  int32_t nshapes;
  be_program *ranks;  /* nranks programs */
} be_stream;

/* Whether stage st of s recomputes its layer i: st->recompute, the layer's kind recomputable
 * (be_kinds) and, with st->recompute_layers = N > 0, among the stage's first N recomputable
 * layers. Pre: st->first <= i < st->end <= s->nlayers. */
bool be_stage_layer_recomputes(const be_stream *s, const be_stage *st, int i);
/* The recomputable layers of stage st of s (those of a kind of be_kinds marked recomputable).
 * Pre: 0 <= st->first <= st->end <= s->nlayers. */
int be_stage_recomputable(const be_stream *s, const be_stage *st);

/* The tied embeddings of s (layer_rules.h lr_tie_source): when the stream has a tied lm_head,
 * sets *emb and *head to the shared table's layer (the first embedding) and the head's layer and
 * returns true; else false (*emb and *head -1). Pre: s's layers are valid (be_validate's header
 * checks: the rule holds). */
bool be_stream_tie(const be_stream *s, int *emb, int *head);
/* The layer whose table a tied lm_head of s would share (lr_tie_source: the first embedding),
 * or -1. */
int be_stream_tie_source(const be_stream *s);
/* The stage holding layer i of s, or -1. */
int be_stage_of_layer(const be_stream *s, int i);

/* Size in bytes of tensor (kind, stage) of s: input tokens micro_batch x seq x 4; act s the
 * out_bytes of stage s; grad s those of stage s - 1 (of the last stage for s == nstages); stash
 * and wstash the stage's. Pre: the stage is in range for the kind. */
uint64_t be_tensor_bytes(const be_stream *s, be_tensor_kind kind, int stage);

/* The tensor that slot operand k of instruction 'in' defines, reads or posts (from the opcode and
 * its stage, microbatch or tag operands): true with *t filled; false for operands that are not
 * slots, for absent optional slots, and for WAIT and FREE, which name a buffer, not a tensor.
 * Pre: the operands are in range (a validated stream, or checked by the caller). */
bool be_operand_tensor(const be_stream *s, const be_inst *in, int k, be_tensor_ref *t);

/* Append the name of tensor t, "act s3 mb7" (a kind out of range prints as its number). */
void be_tensor_text(strbuf *sb, be_tensor_ref t);
/* Append what SEND, RECV, OFFLOAD or RELOAD instruction 'in' posts: "send act s3 mb7 -> rank 4",
 * "recv grad s2 mb1 <- rank 3", "offload stash s1 mb0 to host", "reload wstash s1 mb0 from
 * host". */
void be_msg_text(strbuf *sb, const be_inst *in);

/* Free s and everything it owns (NULL is fine). */
void be_stream_free(be_stream *s);
/* Append instruction (op, operands) to program p; returns its address. Pre: nargs equals
 * be_ops[op].nops. */
int be_emit(be_program *p, be_opcode op, int nargs, const int32_t *args);

/* ---- Validation and checking ---------------------------------------------------------------- */

/* Static validation of everything a stream says: counts and ranges, operand kinds and values,
 * each rank's buffer discipline (a slot defined while live, used while dead or pending, a
 * receive used before its WAIT, a buffer freed with a message pending or left live at the end),
 * host copies (OFFLOAD and RELOAD only of an offloading stage's stash and wstash, each tensor
 * offloaded and reloaded at most once and reloaded only after its offload completed, no buffer
 * used while its copy is pending, none pending at the end),
 * dataflow (each FWD reads the tensor it needs, each message carries the tensor its tag names),
 * coverage (each stage's F, B and W, or BW, of every microbatch exactly once on its rank, LOSS
 * on the last stage, ALLREDUCE of each stage when replicas > 1, STEP at the end), messages
 * that pair up (each send has exactly one receive with the same peer, tag and size), and the
 * prediction (dropout 0 or 1, scale >= 0, measured_on a BACKEND name, finite non-negative step and busy times
 * and peak memory, and exactly one predicted time 0 <= t0 <= t1 per FWD, BWD_IN, BWD_W and BWD
 * instruction, in address order; checked after the programs, so a broken program is reported as
 * such).
 * Returns 0, or -1 with the first problem appended to err as "rank R at ADDR (OP): what". */
int be_validate(const be_stream *s, strbuf *err);

/* The deadlock checker. Pre: s passed be_validate. Executes every rank abstractly with NCCL
 * point-to-point semantics (docs/isa.md): a rank's consecutive SEND/RECV instructions form a
 * group; its groups queue in order; a send and a receive complete together, only when both are
 * in their rank's front group and are the first unmatched messages between the two ranks in
 * that direction; a WAIT blocks until its message completed. Returns 0 when every rank runs to
 * the end; else -1 with a message appended to err: the cycle of waiting ranks with each one's
 * instruction and what it waits for, a rank waiting for one that has finished, or two messages
 * that would be paired although their tags differ. */
int be_check(const be_stream *s, strbuf *err);

/* ---- Binary format ---------------------------------------------------------------------------- */

/* Append the binary encoding of s (docs/isa.md, "File format") to out. Pre: s passed
 * be_validate. */
void be_write(const be_stream *s, strbuf *out);

/* Decode a stream from data[0..len), then validate it (be_validate) and check it (be_check).
 * Returns the stream, or NULL with the reason appended to err (bad magic, another version,
 * truncated at byte N, a count or value out of range at byte N, a checksum mismatch, or the
 * validator's or checker's message). Never reads outside data. */
be_stream *be_read(const uint8_t *data, size_t len, strbuf *err);

/* Read file 'path' with be_read; errors are prefixed with "PATH: ". */
be_stream *be_read_file(const char *path, strbuf *err);

/* ---- Buffer figures ------------------------------------------------------------------------ */

/* Buffer figures of one rank (be_mem_stats). */
typedef struct be_mem {
  double arena_bytes; /* end of its highest slot: the buffer arena the runtime allocates */
  double peak_live;   /* largest sum of live buffers at any instruction */
  double peak_stash;  /* largest sum of live STASH and WSTASH buffers: the simulator's activation
                         memory (peak_mem - static memory) of the device less the state that
                         recomputing stages rebuild in B (the runtime's own blocks) */
  int peak_at;        /* address at which peak_live was reached (-1 when no buffers) */
  double need;        /* what the rank needs: the simulator's peak (pred_peak) plus the rest of
                         its arena, the message and input buffers the simulator does not count
                         (pred_peak - peak_stash + arena_bytes; octo-run's prediction) */
} be_mem;

/* Buffer figures of rank r of s. Pre: s passed be_validate. */
be_mem be_mem_stats(const be_stream *s, int r);

/* ---- Disassembler ----------------------------------------------------------------------------- */

/* Append the listing of s to out: a header (model, ranks, predicted step time and where the
 * costs come from, stages), then per rank its device, memory figures, predicted busy time and
 * peak memory, its slots and its instructions in fixed columns (address, opcode, operands,
 * comment such as "; send act s3 mb7 -> rank 4"). Pre: s passed be_validate. */
void be_disasm(const be_stream *s, strbuf *out);

/* Append a size for people: in the largest binary unit (B, KiB, MiB, GiB, TiB) that keeps it at
 * least 1, with at most two decimals and no trailing zeros ("512B", "1.5GiB", "37216MiB" is
 * "36.34GiB"), as the listing and the lowering's warnings print sizes (the exact sizes are in
 * the file). */
void be_put_bytes(strbuf *out, double bytes);

/* Append the instruction-set reference (the tables of docs/isa.md) to out, from isa.def,
 * operands.def and tensors.def. */
void be_isa_doc(strbuf *out);

#endif
