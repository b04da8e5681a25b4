/* tables.c -- the instruction-set tables generated from isa.def, operands.def and tensors.def,
 * the measuring backends' names (from the IR's enums.def), the layer kinds and their parameters
 * (from the IR's layer_kinds.def and layer_params.def), and the stream container's helpers
 * (emit, free). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/layer_rules.h"
#include "stream.h"

#define BE_FLAGS_COMPUTE BE_COMPUTE
#define BE_FLAGS_COMM BE_COMM
#define BE_FLAGS_SYNC BE_SYNC
#define BE_FLAGS_MEM BE_MEM
#define BE_FLAGS_END BE_END
#define BE_FLAGS_COPY BE_COPY
const be_op_info be_ops[BE_OP_COUNT] = {
#define ISA_OP(ID, NAME, TRACE, FLAGS, NOPS, K0, K1, K2, K3, K4, K5, SYN)                       \
  {NAME, TRACE, BE_FLAGS_##FLAGS, NOPS, {BE_K_##K0, BE_K_##K1, BE_K_##K2, BE_K_##K3, BE_K_##K4,      \
                                  BE_K_##K5}, SYN},
#include "isa.def"
#undef ISA_OP
};

const be_operand_info be_operands[BE_K_COUNT] = {
#define ISA_OPERAND(ID, NAME, SLOT, ROLE, OPT, DOC) {NAME, SLOT, BE_ROLE_##ROLE, OPT, DOC},
#include "operands.def"
#undef ISA_OPERAND
};

const be_tensor_info be_tensors[BE_T_COUNT] = {
#define BE_TENSOR(ID, NAME, MSG, HOST, DOC) {NAME, MSG, HOST, DOC},
#include "tensors.def"
#undef BE_TENSOR
};

/* A named value of the IR's enumerated types: the type's name and the value's spelling. */
typedef struct be_ir_enum {
  const char *type; /* types.def ID of the type ("BACKEND") */
  const char *name; /* spelling of the value ("mpi") */
} be_ir_enum;

/* Every row of the IR's enums.def, in table order (the IR numbers a type's values in that order
 * from 0). The file is included, not linked: the IR's table is the one list of backends and the
 * stream library needs nothing of ir/. Only the rows of BACKEND are used. */
static const be_ir_enum be_ir_enums[] = {
#define IR_ENUM(T, ID, S, DOC) {#T, S},
#include "../ir/enums.def"
#undef IR_ENUM
};

/* The values of enum ACT that the parameter table's defaults name (IR_ACT_SILU), numbered in
 * table order from 0 as the IR numbers them (only ACT's rows become members). */
#define BE_EIN_ACT(ID) IR_ACT_##ID,
#define BE_EIN_DTYPE(ID)
#define BE_EIN_OPTIMIZER(ID)
#define BE_EIN_RECOMPUTE(ID)
#define BE_EIN_BACKEND(ID)
enum be_ir_act {
#define IR_ENUM(T, ID, S, DOC) BE_EIN_##T(ID)
#include "../ir/enums.def"
#undef IR_ENUM
};

/* The IR's value types (types.def), to tell the parameters of type ACT. */
enum be_ir_type {
#define IR_TYPE(ID, NAME, DIM, DOC) BE_IRT_##ID,
#include "../ir/types.def"
#undef IR_TYPE
};

const be_kind_info be_kinds[BE_KIND_COUNT] = {
#define LAYER_KIND(ID, NAME, RC, DOC) {NAME, RC},
#include "../ir/layer_kinds.def"
#undef LAYER_KIND
};

const be_lparam_info be_lparams[BE_LP_COUNT] = {
#define LAYER_PARAM(KIND, ID, NAME, T, FM, DEF, TP, DOC) \
  {BE_KIND_##KIND, NAME, DEF, BE_IRT_##T == BE_IRT_ACT},
#include "../ir/layer_params.def"
#undef LAYER_PARAM
};

int be_kind_lookup(const char *name) {
  for (int k = 0; name && k < BE_KIND_COUNT; k++)
    if (strcmp(be_kinds[k].name, name) == 0) return k;
  return -1;
}

int be_lparam_lookup(int k, const char *name) {
  for (int p = 0; name && p < BE_LP_COUNT; p++)
    if ((int)be_lparams[p].kind == k && strcmp(be_lparams[p].name, name) == 0) return p;
  return -1;
}

int be_layer_kind(const be_layer *l) { return be_kind_lookup(l->kind); }

/* Whether layer l's kind is known and recomputable. */
static bool layer_recomputable(const be_layer *l) {
  int k = be_layer_kind(l);
  return k >= 0 && be_kinds[k].recomputable;
}

int be_stage_recomputable(const be_stream *s, const be_stage *st) {
  int n = 0;
  for (int i = st->first; i < st->end; i++) n += layer_recomputable(&s->layers[i]);
  return n;
}

bool be_stage_layer_recomputes(const be_stream *s, const be_stage *st, int i) {
  if (!st->recompute || !layer_recomputable(&s->layers[i])) return false;
  if (st->recompute_layers <= 0) return true;
  int before = 0; /* recomputable layers of st before i */
  for (int j = st->first; j < i && before < st->recompute_layers; j++)
    before += layer_recomputable(&s->layers[j]);
  return before < st->recompute_layers;
}

double be_layer_param(const be_layer *l, be_lparam p) {
  for (int k = 0; k < l->nparams; k++)
    if (l->params[k].name && strcmp(l->params[k].name, be_lparams[p].name) == 0)
      return l->params[k].value;
  return be_lparams[p].def;
}

/* lr_tie_source's view of a stream's layer kinds. */
static int stream_kind(const void *ctx, int i) {
  return be_layer_kind(&((const be_stream *)ctx)->layers[i]);
}

int be_stream_tie_source(const be_stream *s) { return lr_tie_source(s->nlayers, stream_kind, s); }

bool be_stream_tie(const be_stream *s, int *emb, int *head) {
  *emb = *head = -1;
  for (int i = 0; i < s->nlayers; i++)
    if (be_layer_kind(&s->layers[i]) == BE_KIND_LM_HEAD &&
        be_layer_param(&s->layers[i], BE_LP_LM_HEAD_TIED) == 1)
      *head = i;
  if (*head >= 0) *emb = be_stream_tie_source(s);
  if (*emb < 0) *head = -1;
  return *head >= 0;
}

int be_stage_of_layer(const be_stream *s, int i) {
  for (int k = 0; k < s->nstages; k++)
    if (i >= s->stages[k].first && i < s->stages[k].end) return k;
  return -1;
}

int be_backend_lookup(const char *name) {
  int v = 0;
  for (size_t i = 0; i < sizeof be_ir_enums / sizeof *be_ir_enums; i++) {
    if (strcmp(be_ir_enums[i].type, "BACKEND") != 0) continue;
    if (strcmp(be_ir_enums[i].name, name) == 0) return v;
    v++;
  }
  return -1;
}

const char *be_backend_name(int b) {
  int v = 0;
  for (size_t i = 0; i < sizeof be_ir_enums / sizeof *be_ir_enums; i++) {
    if (strcmp(be_ir_enums[i].type, "BACKEND") != 0) continue;
    if (v++ == b) return be_ir_enums[i].name;
  }
  return NULL;
}

int be_op_lookup(const char *name) {
  for (int i = 0; i < BE_OP_COUNT; i++)
    if (strcmp(be_ops[i].name, name) == 0) return i;
  return -1;
}

bool be_op_predicted(int op) {
  return op == BE_OP_FWD || op == BE_OP_BWD_IN || op == BE_OP_BWD_W || op == BE_OP_BWD;
}

int be_emit(be_program *p, be_opcode op, int nargs, const int32_t *args) {
  be_inst in = {(uint8_t)op, {0}};
  for (int i = 0; i < nargs && i < BE_MAX_OPERANDS; i++) in.a[i] = args[i];
  VEC_PUSH(p->code, p->ncode, p->code_cap, in);
  return p->ncode - 1;
}

void be_tensor_text(strbuf *sb, be_tensor_ref t) {
  if ((int)t.kind >= 0 && t.kind < BE_T_COUNT)
    strbuf_printf(sb, "%s s%d mb%d", be_tensors[t.kind].name, (int)t.stage, (int)t.mb);
  else
    strbuf_printf(sb, "%d s%d mb%d", (int)t.kind, (int)t.stage, (int)t.mb);
}

/* The tag of a message or host copy (SEND, RECV, OFFLOAD, RELOAD): its tensor-kind operand and
 * the stage and microbatch after it, wherever isa.def puts them. Pre: in->op is one of those. */
static be_tensor_ref tag_of(const be_inst *in) {
  const be_op_info *o = &be_ops[in->op];
  int j = 0;
  while (j + 2 < o->nops && o->kinds[j] != BE_K_TENSOR && o->kinds[j] != BE_K_HTENSOR) j++;
  return (be_tensor_ref){(be_tensor_kind)in->a[j], in->a[j + 1], in->a[j + 2]};
}

void be_msg_text(strbuf *sb, const be_inst *in) {
  be_tensor_ref t = tag_of(in);
  if (in->op == BE_OP_OFFLOAD || in->op == BE_OP_RELOAD) {
    bool out = in->op == BE_OP_OFFLOAD;
    strbuf_puts(sb, out ? "offload " : "reload ");
    be_tensor_text(sb, t);
    strbuf_puts(sb, out ? " to host" : " from host");
    return;
  }
  bool send = in->op == BE_OP_SEND;
  strbuf_puts(sb, send ? "send " : "recv ");
  be_tensor_text(sb, t);
  strbuf_printf(sb, " %s rank %d", send ? "->" : "<-", (int)in->a[0]);
}

void be_stream_free(be_stream *s) {
  if (!s) return;
  free(s->model);
  free(s->dtype);
  free(s->optimizer);
  free(s->measured_on);
  for (int i = 0; s->layers && i < s->nlayers; i++) {
    free(s->layers[i].name);
    free(s->layers[i].kind);
    for (int j = 0; j < s->layers[i].nparams; j++) free(s->layers[i].params[j].name);
    free(s->layers[i].params);
  }
  free(s->layers);
  free(s->stages);
  free(s->shapes);
  for (int r = 0; s->ranks && r < s->nranks; r++) {
    free(s->ranks[r].type);
    free(s->ranks[r].slots);
    free(s->ranks[r].code);
    free(s->ranks[r].pred);
  }
  free(s->ranks);
  free(s);
}

uint64_t be_tensor_bytes(const be_stream *s, be_tensor_kind kind, int stage) {
  switch (kind) {
  case BE_T_INPUT: return (uint64_t)s->micro_batch * (uint64_t)s->seq * 4u;
  case BE_T_ACT: return s->stages[stage].out_bytes;
  case BE_T_GRAD: return s->stages[stage > 0 ? stage - 1 : 0].out_bytes;
  case BE_T_STASH: return s->stages[stage].stash_bytes;
  case BE_T_WSTASH: return s->stages[stage].wstash_bytes;
  default: return 0;
  }
}

bool be_operand_tensor(const be_stream *s, const be_inst *in, int k, be_tensor_ref *t) {
  if (in->op >= BE_OP_COUNT || k < 0 || k >= be_ops[in->op].nops) return false;
  if (!be_operands[be_ops[in->op].kinds[k]].slot || in->a[k] < 0) return false;
  int32_t st = in->a[0], mb = in->a[1];
  be_tensor_kind kind;
  switch (in->op) {
  case BE_OP_LOAD: kind = BE_T_INPUT; break;
  case BE_OP_FWD: {
    static const be_tensor_kind fk[] = {0, 0, BE_T_ACT, BE_T_ACT, BE_T_STASH, BE_T_WSTASH};
    kind = fk[k];
    if (k == 2) {
      kind = st == 0 ? BE_T_INPUT : BE_T_ACT;
      st = st == 0 ? 0 : st - 1;
    }
    break;
  }
  case BE_OP_LOSS:
    kind = k == 2 ? BE_T_ACT : BE_T_GRAD;
    if (k == 3) st = s->nstages;
    break;
  case BE_OP_BWD_IN:
  case BE_OP_BWD: {
    static const be_tensor_kind bk[] = {0, 0, BE_T_GRAD, BE_T_STASH, BE_T_WSTASH, BE_T_GRAD};
    kind = bk[k];
    if (k == 2) st = st + 1;
    break;
  }
  case BE_OP_BWD_W: kind = BE_T_WSTASH; break;
  case BE_OP_SEND:
  case BE_OP_RECV:
  case BE_OP_OFFLOAD:
  case BE_OP_RELOAD:
    *t = tag_of(in);
    return true;
  default: return false;
  }
  t->kind = kind;
  t->stage = st;
  t->mb = mb;
  return true;
}
