/* validate.c -- be_validate: the static validator every instruction stream passes before it is
 * written, read back or run. It checks the header (counts, stages, shapes, slots), then
 * interprets each rank's program once, in order, tracking the state and the tensor ("label")
 * of every buffer slot, then pairs the messages of all ranks and checks coverage (every stage's
 * forward and backward of every microbatch exactly once), and last the prediction the stream
 * carries (each compute instruction's predicted start and end). It must stay safe on any input:
 * the reader hands it whatever a file said. */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/layer_rules.h"
#include "stream.h"

/* Longest string the binary format stores (format.c reads no longer ones). */
enum { V_MAX_STRING = 4096 };
/* Most address comparisons of simultaneously live buffers the validator makes. */
#define V_MAX_WORK 400000000u

/* Header limits (listed in docs/isa.md, "File format"). */
#define V_MAX_RANKS 65536
#define V_MAX_STAGES (1 << 20)
#define V_MAX_MB (1 << 24)

/* State of a buffer slot while a program is interpreted: dead, live, or live with a pending send,
 * receive, copy to host memory (OFFLOAD) or copy from it (RELOAD). */
typedef enum vstate { V_DEAD, V_LIVE, V_PSEND, V_PRECV, V_POFF, V_PREL } vstate;

/* What is pending on a slot in state x, for messages ("send", "offload"). Pre: x is pending. */
static const char *pending_name(vstate x) {
  return x == V_PSEND ? "send" : x == V_PRECV ? "receive" : x == V_POFF ? "offload" : "reload";
}

/* Whether state x has a pending send or receive or host copy. */
static bool pending(vstate x) { return x != V_DEAD && x != V_LIVE; }

/* The tensor a buffer holds: (kind, stage, microbatch). */
typedef struct vlabel {
  int32_t t, s, m;
} vlabel;

/* A slot of the rank being interpreted. */
typedef struct vslot {
  vstate state;
  vlabel l; /* valid unless V_DEAD */
} vslot;

/* Coverage bits of one (stage, microbatch). */
enum {
  COV_F = 1,         /* FWD seen */
  COV_B = 2,         /* fused BWD seen */
  COV_BI = 4,        /* BWD_IN seen */
  COV_W = 8,         /* BWD_W seen */
  COV_LOAD = 16,     /* LOAD of this mb (stage 0 only) */
  COV_LOSS = 32,     /* LOSS of this mb (last stage only) */
  COV_SEND_ACT = 64, /* act s mb sent */
  COV_RECV_ACT = 128,
  COV_SEND_GRAD = 256, /* grad s mb sent */
  COV_RECV_GRAD = 512,
  COV_OFF_STASH = 1024, /* stash s mb offloaded (OFFLOAD) */
  COV_OFF_WSTASH = 2048,
  COV_REL_STASH = 4096, /* stash s mb reloaded (RELOAD) */
  COV_REL_WSTASH = 8192
};

/* A posted send or receive, for the pairing pass. */
typedef struct vmsg {
  int32_t t, s, m;   /* tag */
  int32_t rank, addr; /* where it is posted */
  int32_t peer;      /* the other rank */
} vmsg;

/* Everything the validator keeps. */
typedef struct vctx {
  const be_stream *s;
  strbuf *err;
  uint16_t *cov;     /* nstages x nmb coverage bits */
  uint8_t *reduced;  /* per stage: ALLREDUCE seen */
  int32_t tie[2];    /* the stages of the tied embedding and lm_head (be_stream_tie), or -1 */
  uint8_t *tied;     /* per rank: TIE seen */
  vmsg *sends, *recvs;
  size_t nsends, csends, nrecvs, crecvs;
  int32_t *live;     /* slots of the rank holding a tensor now (any order) ... */
  int32_t *live_pos; /* ... and each slot's index in it, -1 when dead */
  int nlive;
  uint64_t work;     /* address comparisons made: bounded, so a hostile stream cannot stall */
  int rank, addr;    /* instruction being checked */
  const be_inst *in;
} vctx;

/* Append "rank R at ADDR (OP): " and the formatted text to the error buffer; returns -1. Pre:
 * v->rank, v->addr and v->in describe the instruction. */
static int fail_at(vctx *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail_at(vctx *v, const char *fmt, ...) {
  if (v->in->op < BE_OP_COUNT)
    strbuf_printf(v->err, "rank %d at %04d (%s): ", v->rank, v->addr, be_ops[v->in->op].name);
  else
    strbuf_printf(v->err, "rank %d at %04d (opcode %u): ", v->rank, v->addr, (unsigned)v->in->op);
  va_list ap;
  va_start(ap, fmt);
  strbuf_vprintf(v->err, fmt, ap);
  va_end(ap);
  return -1;
}

/* Append a plain sentence to the error buffer; returns -1. */
static int fail(vctx *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(vctx *v, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  strbuf_vprintf(v->err, fmt, ap);
  va_end(ap);
  return -1;
}

/* Name of tensor label l ("act s3 mb7") in buf (64 bytes). Pre: l.t < BE_T_COUNT. */
static const char *lname(char *buf, vlabel l) {
  snprintf(buf, 64, "%s s%d mb%d", be_tensors[l.t].name, (int)l.s, (int)l.m);
  return buf;
}

static bool leq(vlabel a, vlabel b) { return a.t == b.t && a.s == b.s && a.m == b.m; }

static vlabel mklabel(int t, int32_t s, int32_t m) {
  vlabel l = {t, s, m};
  return l;
}

/* True when string 'str' (NULL counts as empty) is short enough for the binary format. */
static bool str_ok(const char *str) { return !str || strlen(str) <= V_MAX_STRING; }

/* Longest part of a string that messages quote. */
enum { V_QUOTE_MAX = 32 };

/* Append str (NULL as "") to the error buffer in double quotes, for a message: bytes outside
 * printable ASCII, quotes and backslashes as \xNN, at most V_QUOTE_MAX bytes and then "...", so
 * that the message stays one short line whatever a file holds. */
static void put_quoted(vctx *v, const char *str) {
  const char *p = str ? str : "";
  size_t n = strlen(p);
  strbuf_putc(v->err, '"');
  for (size_t i = 0; i < n && i < V_QUOTE_MAX; i++) {
    unsigned char c = (unsigned char)p[i];
    if (c < 0x20 || c > 0x7e || c == '"' || c == '\\') strbuf_printf(v->err, "\\x%02x", c);
    else strbuf_putc(v->err, (char)c);
  }
  strbuf_puts(v->err, n > V_QUOTE_MAX ? "...\"" : "\"");
}

/* True when x is a finite number of seconds, at least 0. */
static bool time_ok(double x) { return isfinite(x) && x >= 0; }

/* True when x is a finite number of bytes, at least 0 (not necessarily whole: the simulator's
 * memory figures are sums of costs). */
static bool bytes_ok(double x) { return isfinite(x) && x >= 0; }

/* The header's prediction: the measurement scale, the measuring backend (a name of enum BACKEND)
 * and the predicted step time. Returns 0 or -1 after reporting. */
static int check_prediction_header(vctx *v) {
  const be_stream *s = v->s;
  if (s->dropout != 0 && s->dropout != 1)
    return fail(v, "dropout flag %d must be 0 or 1", (int)s->dropout);
  if (s->scale < 0)
    return fail(v, "measurement scale %d must be at least 0 (0: analytic costs)", (int)s->scale);
  if (!s->measured_on || be_backend_lookup(s->measured_on) < 0) {
    fail(v, "measuring backend ");
    put_quoted(v, s->measured_on);
    strbuf_puts(v->err, " is not one of");
    for (int b = 0; be_backend_name(b); b++)
      strbuf_printf(v->err, "%s %s", b ? "," : "", be_backend_name(b));
    return -1;
  }
  if (!time_ok(s->pred_step))
    return fail(v, "predicted step time %.9g must be finite and at least 0", s->pred_step);
  return 0;
}

/* The first problem lr_layer_check reports (it goes on; the validator stops at the first). */
static void first_problem(void *ctx, const char *message) {
  strbuf *first = ctx;
  if (!first->len) strbuf_puts(first, message);
}

/* Begin the message of a problem of layer i: 'layer I "NAME"', then ' (KIND)' when k >= 0. */
static void fail_layer(vctx *v, int i, int k) {
  fail(v, "layer %d ", i);
  put_quoted(v, v->s->layers[i].name);
  if (k >= 0) strbuf_printf(v->err, " (%s)", be_kinds[k].name);
}

_Static_assert((int)LR_P_N == (int)BE_LP_COUNT && (int)LR_KIND_N == (int)BE_KIND_COUNT,
               "layer_rules.h numbers the layer tables as stream.h does");

/* Layer i (its strings checked): a kind of layer_kinds.def, each parameter one of that kind's,
 * given once, and the whole set obeying the IR's rules (layer_rules.h: required ones present,
 * every value in its domain, the relations), so that the runtime never sees a layer the IR
 * verifier would refuse. Fills p[LR_P_N] with the values the runtime reads. Returns 0 or -1
 * after reporting. */
static int check_layer_params(vctx *v, int i, double *p) {
  const be_layer *l = &v->s->layers[i];
  int k = be_layer_kind(l);
  if (k < 0) {
    fail_layer(v, i, k);
    strbuf_puts(v->err, ": kind ");
    put_quoted(v, l->kind);
    strbuf_puts(v->err, " is not a layer kind");
    return -1;
  }
  /* p: what the runtime reads (be_layer_param): the value given, else the default */
  for (int q = 0; q < LR_P_N; q++) p[q] = NAN;
  for (int j = 0; j < l->nparams; j++) {
    int q = be_lparam_lookup(k, l->params[j].name);
    if (q < 0 || !isnan(p[q])) {
      fail_layer(v, i, k);
      strbuf_puts(v->err, ": parameter ");
      put_quoted(v, l->params[j].name);
      strbuf_puts(v->err, q < 0 ? " is not one of its kind's" : " is given twice");
      return -1;
    }
    /* NAN is no value of any parameter; as "not set" it would pass for a derived one. */
    p[q] = isnan(l->params[j].value) ? INFINITY : l->params[j].value;
  }
  for (int q = 0; q < LR_P_N; q++)
    if (isnan(p[q])) p[q] = be_lparams[q].def;
  strbuf first = {0};
  lr_report r = {first_problem, &first, 0};
  if (lr_layer_check(k, p, &r) > 0) {
    fail_layer(v, i, k);
    strbuf_printf(v->err, ": %s", strbuf_cstr(&first));
  }
  strbuf_free(&first);
  return r.count > 0 ? -1 : 0;
}

/* Header checks: ranges of the counts, strings, layers, stages (contiguous, each on a rank, each
 * rank with a stage), shapes, and each rank's slot table. Returns 0 or -1 after reporting. */
static int check_header(vctx *v) {
  const be_stream *s = v->s;
  if (s->nranks < 1 || s->nranks > V_MAX_RANKS)
    return fail(v, "rank count %d out of range [1, %d]", (int)s->nranks, V_MAX_RANKS);
  if (s->replicas < 1) return fail(v, "replica count %d must be at least 1", (int)s->replicas);
  if (s->nstages < 1 || s->nstages > V_MAX_STAGES)
    return fail(v, "stage count %d out of range [1, %d]", (int)s->nstages, V_MAX_STAGES);
  if (s->nmb < 1 || s->nmb > V_MAX_MB)
    return fail(v, "microbatch count %d out of range [1, %d]", (int)s->nmb, V_MAX_MB);
  if (s->micro_batch < 1)
    return fail(v, "micro-batch size %d must be at least 1", (int)s->micro_batch);
  if (s->seq < 1) return fail(v, "sequence length %d must be at least 1", (int)s->seq);
  if (s->nlayers < 1 || !s->layers) return fail(v, "the stream has no layers");
  if (!s->stages) return fail(v, "the stream has no stage table");
  if (!s->ranks) return fail(v, "the stream has no programs");
  if (s->nshapes < 0 || (s->nshapes > 0 && !s->shapes))
    return fail(v, "shape count %d out of range", (int)s->nshapes);
  if (!str_ok(s->model) || !str_ok(s->dtype) || !str_ok(s->optimizer) || !str_ok(s->measured_on))
    return fail(v, "a header string is longer than %d bytes", V_MAX_STRING);
  for (int i = 0; i < s->nlayers; i++) {
    const be_layer *l = &s->layers[i];
    if (!str_ok(l->name) || !str_ok(l->kind))
      return fail(v, "layer %d: a string is longer than %d bytes", i, V_MAX_STRING);
    if (l->nparams < 0 || (l->nparams > 0 && !l->params))
      return fail(v, "layer %d: parameter count %d out of range", i, (int)l->nparams);
    for (int j = 0; j < l->nparams; j++)
      if (!str_ok(l->params[j].name))
        return fail(v, "layer %d: parameter %d's name is longer than %d bytes", i, j, V_MAX_STRING);
    double p[LR_P_N];
    if (check_layer_params(v, i, p) != 0) return -1;
  }
  for (int i = 0; i < s->nlayers; i++) { /* a tied lm_head: the module-level rule */
    if (be_layer_kind(&s->layers[i]) != BE_KIND_LM_HEAD ||
        be_layer_param(&s->layers[i], BE_LP_LM_HEAD_TIED) != 1)
      continue;
    double ph[LR_P_N], ps[LR_P_N];
    int src = be_stream_tie_source(s);
    check_layer_params(v, i, ph); /* both passed above */
    if (src >= 0) check_layer_params(v, src, ps);
    strbuf first = {0};
    lr_report r = {first_problem, &first, 0};
    if (lr_tie_check(i, ph, src, src >= 0 ? s->layers[src].name : NULL, src >= 0 ? ps : NULL,
                     &r) > 0) {
      fail_layer(v, i, BE_KIND_LM_HEAD);
      strbuf_printf(v->err, ": %s", strbuf_cstr(&first));
    }
    strbuf_free(&first);
    if (r.count > 0) return -1;
  }
  int32_t next = 0;
  for (int i = 0; i < s->nstages; i++) {
    const be_stage *st = &s->stages[i];
    if (st->first != next)
      return fail(v, "stage %d starts at layer %d, expected %d (stages cover the layers in order)",
                  i, (int)st->first, (int)next);
    if (st->end <= st->first) return fail(v, "stage %d has no layers", i);
    if (st->end > s->nlayers)
      return fail(v, "stage %d ends at layer %d, past the model's %d layers", i, (int)st->end,
                  (int)s->nlayers);
    if (st->rank < 0 || st->rank >= s->nranks)
      return fail(v, "stage %d runs on rank %d, out of range [0, %d)", i, (int)st->rank,
                  (int)s->nranks);
    if (st->recompute != 0 && st->recompute != 1)
      return fail(v, "stage %d: recompute flag %d is neither 0 nor 1", i, (int)st->recompute);
    if (st->recompute_layers < 0)
      return fail(v, "stage %d: recomputed layers %d is negative", i, (int)st->recompute_layers);
    if (st->recompute_layers > 0 && !st->recompute)
      return fail(v, "stage %d: %d recomputed layers without the recompute flag", i,
                  (int)st->recompute_layers);
    if (st->offload != 0 && st->offload != 1)
      return fail(v, "stage %d: offload flag %d is neither 0 nor 1", i, (int)st->offload);
    if (st->recompute_layers > be_stage_recomputable(s, st))
      return fail(v, "stage %d: %d recomputed layers, but it has %d recomputable layer%s", i,
                  (int)st->recompute_layers, be_stage_recomputable(s, st),
                  be_stage_recomputable(s, st) == 1 ? "" : "s");
    next = st->end;
  }
  if (next != s->nlayers)
    return fail(v, "the stages end at layer %d, but the model has %d layers", (int)next,
                (int)s->nlayers);
  uint8_t *owns = xcalloc((size_t)s->nranks, 1);
  for (int i = 0; i < s->nstages; i++) owns[s->stages[i].rank] = 1;
  int idle = -1;
  for (int r = 0; r < s->nranks && idle < 0; r++)
    if (!owns[r]) idle = r;
  free(owns);
  if (idle >= 0) return fail(v, "rank %d owns no stage", idle);
  for (int i = 0; i < s->nshapes; i++) {
    const be_shape *sh = &s->shapes[i];
    if (sh->elem < 1)
      return fail(v, "shape %d: element size %d must be at least 1", i, (int)sh->elem);
    if (sh->ndim < 1 || sh->ndim > 4)
      return fail(v, "shape %d: %d dimensions, expected 1 to 4", i, (int)sh->ndim);
    for (int d = 0; d < sh->ndim; d++)
      if (sh->dim[d] < 1)
        return fail(v, "shape %d: extent %" PRId64 " of dimension %d must be at least 1", i,
                    sh->dim[d], d);
  }
  /* Stage outputs: a shape, when given, must hold exactly the stage's output bytes. */
  for (int i = 0; i < s->nstages; i++) {
    const be_stage *st = &s->stages[i];
    if (st->out_shape < -1 || st->out_shape >= s->nshapes)
      return fail(v, "stage %d: output shape %d out of range (%d shapes)", i, (int)st->out_shape,
                  (int)s->nshapes);
    if (st->out_shape >= 0) {
      const be_shape *sh = &s->shapes[st->out_shape];
      double n = sh->elem;
      for (int d = 0; d < sh->ndim; d++) n *= (double)sh->dim[d];
      if (n != (double)st->out_bytes)
        return fail(v, "stage %d: output of %" PRIu64 " bytes does not match its shape %d "
                    "(%.0f bytes)", i, st->out_bytes, (int)st->out_shape, n);
    }
  }
  for (int r = 0; r < s->nranks; r++) {
    const be_program *p = &s->ranks[r];
    if (!str_ok(p->type))
      return fail(v, "rank %d: device type name longer than %d bytes", r, V_MAX_STRING);
    if (p->nslots < 0 || (p->nslots > 0 && !p->slots))
      return fail(v, "rank %d: slot count %d out of range", r, (int)p->nslots);
    if (p->ncode < 0 || (p->ncode > 0 && !p->code))
      return fail(v, "rank %d: instruction count %d out of range", r, (int)p->ncode);
    if (p->npred < 0 || (p->npred > 0 && !p->pred))
      return fail(v, "rank %d: predicted time count %d out of range", r, (int)p->npred);
    if (!time_ok(p->pred_busy))
      return fail(v, "rank %d: predicted busy time %.9g must be finite and at least 0", r,
                  p->pred_busy);
    if (!bytes_ok(p->pred_peak))
      return fail(v, "rank %d: predicted peak memory %.9g must be finite and at least 0", r,
                  p->pred_peak);
    for (int i = 0; i < p->nslots; i++) {
      const be_slot *sl = &p->slots[i];
      if (sl->offset > UINT64_MAX - sl->bytes)
        return fail(v, "rank %d: slot %%%d ends past 2^64 bytes", r, i);
      if (sl->tensor >= BE_T_COUNT)
        return fail(v, "rank %d: slot %%%d holds tensor kind %u, out of range", r, i,
                    (unsigned)sl->tensor);
    }
  }
  return check_prediction_header(v);
}

/* Range checks of every operand of v->in on rank r: values of each kind, -1 only for optional
 * slots, zeros past the operand count. Pre: the opcode is valid. Returns 0 or -1. */
static int check_operands(vctx *v, const be_program *p) {
  const be_stream *s = v->s;
  const be_op_info *info = &be_ops[v->in->op];
  for (int i = 0; i < BE_MAX_OPERANDS; i++) {
    int32_t a = v->in->a[i];
    be_operand_kind k = i < info->nops ? info->kinds[i] : BE_K_NONE;
    if (k == BE_K_NONE) {
      if (a != 0)
        return fail_at(v, "operand %d is %d, past the %d operand%s of %s (the rest must be 0)",
                       i, (int)a, info->nops, info->nops == 1 ? "" : "s", info->name);
      continue;
    }
    const be_operand_info *ok = &be_operands[k];
    if (ok->slot) {
      if (a == -1 && ok->optional) continue;
      if (a < 0 || a >= p->nslots)
        return fail_at(v, "operand %d (%s): slot %d out of range (%d slots%s)", i, ok->name,
                       (int)a, (int)p->nslots, ok->optional ? ", or -1 for none" : "");
      continue;
    }
    switch (k) {
    case BE_K_STAGE:
      if (a < 0 || a >= s->nstages)
        return fail_at(v, "operand %d: stage %d out of range (%d stages)", i, (int)a,
                       (int)s->nstages);
      break;
    case BE_K_MB:
      if (a < 0 || a >= s->nmb)
        return fail_at(v, "operand %d: microbatch %d out of range (%d microbatches)", i, (int)a,
                       (int)s->nmb);
      break;
    case BE_K_RANK:
      if (a < 0 || a >= s->nranks)
        return fail_at(v, "operand %d: rank %d out of range (%d ranks)", i, (int)a,
                       (int)s->nranks);
      if (a == v->rank) return fail_at(v, "peer rank %d is the rank itself", (int)a);
      break;
    case BE_K_TENSOR:
      if (a < 0 || a >= BE_T_COUNT)
        return fail_at(v, "operand %d: tensor kind %d out of range", i, (int)a);
      if (!be_tensors[a].msg)
        return fail_at(v, "operand %d: %s tensors do not travel in messages", i,
                       be_tensors[a].name);
      break;
    case BE_K_HTENSOR:
      if (a < 0 || a >= BE_T_COUNT)
        return fail_at(v, "operand %d: tensor kind %d out of range", i, (int)a);
      if (!be_tensors[a].host)
        return fail_at(v, "operand %d: %s tensors are not copied to host memory (only what F "
                       "keeps: stash and wstash)", i, be_tensors[a].name);
      break;
    default:
      return fail_at(v, "operand %d has an unknown kind", i); /* table error */
    }
  }
  return 0;
}

/* Apply the slot roles of v->in in operand order: check each slot's state and label against
 * want[i] (for USE, MOD and SEND) and set the new state and label (want[i] for DEF and RECV).
 * Pre: operands range-checked; want[] filled for every slot operand that has a label rule.
 * Returns 0 or -1. */
static int apply_slots(vctx *v, const be_program *p, vslot *st, const vlabel *want) {
  const be_op_info *info = &be_ops[v->in->op];
  bool copy = info->flags & BE_COPY; /* OFFLOAD, RELOAD: the SEND and RECV roles are copies */
  char b1[64], b2[64];
  for (int i = 0; i < info->nops; i++) {
    const be_operand_info *ok = &be_operands[info->kinds[i]];
    int32_t a = v->in->a[i];
    if (!ok->slot || a < 0) continue;
    vslot *sl = &st[a];
    switch (ok->role) {
    case BE_ROLE_USE:
      if (sl->state == V_DEAD) return fail_at(v, "reads slot %%%d, which holds no tensor", (int)a);
      if (sl->state == V_PRECV || sl->state == V_PREL)
        return fail_at(v, "slot %%%d (%s) used before its WAIT", (int)a, lname(b1, sl->l));
      if (sl->state == V_POFF)
        return fail_at(v, "slot %%%d (%s) used while its offload is pending", (int)a,
                       lname(b1, sl->l));
      if (!leq(sl->l, want[i]))
        return fail_at(v, "slot %%%d holds %s, expected %s", (int)a, lname(b1, sl->l),
                       lname(b2, want[i]));
      break;
    case BE_ROLE_MOD:
      if (sl->state == V_DEAD)
        return fail_at(v, "writes into slot %%%d, which holds no tensor", (int)a);
      if (sl->state != V_LIVE)
        return fail_at(v, "writes into slot %%%d (%s) while its %s is pending", (int)a,
                       lname(b1, sl->l), pending_name(sl->state));
      if (!leq(sl->l, want[i]))
        return fail_at(v, "slot %%%d holds %s, expected %s", (int)a, lname(b1, sl->l),
                       lname(b2, want[i]));
      break;
    case BE_ROLE_SEND: {
      const char *verb = copy ? "offloads" : "sends";
      if (sl->state == V_DEAD)
        return fail_at(v, "%s slot %%%d, which holds no tensor", verb, (int)a);
      if (sl->state != V_LIVE)
        return fail_at(v, "%s slot %%%d (%s) while its %s is pending", verb, (int)a,
                       lname(b1, sl->l), pending_name(sl->state));
      if (!leq(sl->l, want[i]))
        return fail_at(v, "the tag %s does not match slot %%%d, which holds %s",
                       lname(b2, want[i]), (int)a, lname(b1, sl->l));
      sl->state = copy ? V_POFF : V_PSEND;
      break;
    }
    case BE_ROLE_DEF:
    case BE_ROLE_RECV:
      if (sl->state != V_DEAD)
        return fail_at(v, "%s slot %%%d, which still holds %s",
                       ok->role == BE_ROLE_DEF ? "defines"
                       : copy                  ? "reloads into"
                                               : "receives into",
                       (int)a, lname(b1, sl->l));
      if (p->slots[a].tensor != want[i].t)
        return fail_at(v, "slot %%%d is for %s tensors, not %s", (int)a,
                       be_tensors[p->slots[a].tensor].name, lname(b1, want[i]));
      uint64_t need = be_tensor_bytes(v->s, (be_tensor_kind)want[i].t, want[i].s);
      if (p->slots[a].bytes < need)
        return fail_at(v, "slot %%%d of %" PRIu64 " bytes is too small for %s (%" PRIu64
                       " bytes)", (int)a, p->slots[a].bytes, lname(b1, want[i]), need);
      /* Its addresses must not be in use by another live buffer. */
      const be_slot *x = &p->slots[a];
      v->work += (uint64_t)v->nlive;
      if (v->work > V_MAX_WORK)
        return fail_at(v, "too many buffers live at once to check their addresses");
      for (int j = 0; j < v->nlive; j++) {
        const be_slot *y = &p->slots[v->live[j]];
        if (x->bytes && y->bytes && x->offset < y->offset + y->bytes &&
            y->offset < x->offset + x->bytes)
          return fail_at(v, "slot %%%d (bytes %" PRIu64 "..%" PRIu64 ") overlaps slot %%%d, "
                         "which still holds %s", (int)a, x->offset, x->offset + x->bytes,
                         (int)v->live[j], lname(b1, st[v->live[j]].l));
      }
      v->live_pos[a] = v->nlive;
      v->live[v->nlive++] = a;
      sl->state = ok->role == BE_ROLE_DEF ? V_LIVE : copy ? V_PREL : V_PRECV;
      sl->l = want[i];
      break;
    case BE_ROLE_WAIT:
      if (!pending(sl->state))
        return fail_at(v, "waits on slot %%%d, which has no pending message or host copy",
                       (int)a);
      sl->state = V_LIVE;
      break;
    case BE_ROLE_KILL:
      if (sl->state == V_DEAD) return fail_at(v, "frees slot %%%d, which holds no tensor", (int)a);
      if (sl->state != V_LIVE)
        return fail_at(v, "frees slot %%%d (%s) while its %s is pending", (int)a,
                       lname(b1, sl->l), pending_name(sl->state));
      sl->state = V_DEAD;
      int32_t last = v->live[--v->nlive];
      v->live[v->live_pos[a]] = last;
      v->live_pos[last] = v->live_pos[a];
      v->live_pos[a] = -1;
      break;
    case BE_ROLE_NONE:
      break;
    }
  }
  return 0;
}

/* The message rules of SEND or RECV v->in on rank r: the tag's stage belongs to the sender, the
 * neighbouring stage (in the direction of the tensor kind) to the receiver. Pre: operands
 * range-checked. Returns 0 or -1. */
static int check_message(vctx *v, bool send) {
  const be_stream *s = v->s;
  const int32_t *a = v->in->a;
  int32_t peer = a[0], t = a[2], st = a[3], m = a[4];
  char b[64];
  const char *tn = lname(b, mklabel(t, st, m));
  int32_t sender = send ? v->rank : peer, receiver = send ? peer : v->rank;
  int32_t to_stage;
  if (t == BE_T_ACT) {
    if (st + 1 >= s->nstages)
      return fail_at(v, "%s: the last stage's activation goes to no other stage", tn);
    to_stage = st + 1;
  } else {
    if (st < 1) return fail_at(v, "%s: the first stage's input gradient goes to no stage", tn);
    to_stage = st - 1;
  }
  if (s->stages[st].rank != sender)
    return fail_at(v, "%s is produced by stage %d on rank %d, not rank %d", tn, (int)st,
                   (int)s->stages[st].rank, (int)sender);
  if (s->stages[to_stage].rank != receiver)
    return fail_at(v, "%s is consumed by stage %d on rank %d, not rank %d", tn, (int)to_stage,
                   (int)s->stages[to_stage].rank, (int)receiver);
  return 0;
}

/* Record SEND or RECV v->in for the pairing pass; a tag sent (or received) twice is an error.
 * Pre: check_message passed. Returns 0 or -1. */
static int record_message(vctx *v, bool send) {
  const int32_t *a = v->in->a;
  int32_t t = a[2], st = a[3], m = a[4];
  char b[64];
  uint16_t bit = t == BE_T_ACT ? (send ? COV_SEND_ACT : COV_RECV_ACT)
                               : (send ? COV_SEND_GRAD : COV_RECV_GRAD);
  uint16_t *c = &v->cov[(size_t)st * (size_t)v->s->nmb + (size_t)m];
  if (*c & bit)
    return fail_at(v, "%s is %s twice", lname(b, mklabel(t, st, m)), send ? "sent" : "received");
  *c |= bit;
  vmsg msg = {t, st, m, v->rank, v->addr, a[0]};
  if (send) VEC_PUSH(v->sends, v->nsends, v->csends, msg);
  else VEC_PUSH(v->recvs, v->nrecvs, v->crecvs, msg);
  return 0;
}

/* Record compute instruction v->in of (s, m) in the coverage table: duplicates, a fused backward
 * mixed with a split one, BWD_W before its BWD_IN. Returns 0 or -1. */
static int cover(vctx *v, int32_t s, int32_t m) {
  uint16_t *c = &v->cov[(size_t)s * (size_t)v->s->nmb + (size_t)m];
  char b[32];
  snprintf(b, sizeof b, "s%d mb%d", (int)s, (int)m);
  switch (v->in->op) {
  case BE_OP_LOAD:
    if (*c & COV_LOAD) return fail_at(v, "mb%d is loaded twice", (int)m);
    *c |= COV_LOAD;
    break;
  case BE_OP_LOSS:
    if (*c & COV_LOSS) return fail_at(v, "second LOSS of mb%d", (int)m);
    *c |= COV_LOSS;
    break;
  case BE_OP_FWD:
    if (*c & COV_F) return fail_at(v, "second FWD of %s", b);
    *c |= COV_F;
    break;
  case BE_OP_BWD:
    if (*c & COV_B) return fail_at(v, "second BWD of %s", b);
    if (*c & (COV_BI | COV_W))
      return fail_at(v, "%s already has a split backward (BWD_IN/BWD_W); a fused BWD cannot be "
                        "mixed with it", b);
    *c |= COV_B;
    break;
  case BE_OP_BWD_IN:
    if (*c & COV_BI) return fail_at(v, "second BWD_IN of %s", b);
    if (*c & COV_B)
      return fail_at(v, "%s already has a fused BWD; a split backward cannot be mixed with it", b);
    *c |= COV_BI;
    break;
  case BE_OP_BWD_W:
    if (*c & COV_W) return fail_at(v, "second BWD_W of %s", b);
    if (*c & COV_B)
      return fail_at(v, "%s already has a fused BWD; a split backward cannot be mixed with it", b);
    if (!(*c & COV_BI)) return fail_at(v, "BWD_W of %s before its BWD_IN", b);
    *c |= COV_W;
    break;
  default:
    break;
  }
  return 0;
}

/* The TIE at v->addr (its first stage runs here; st: the rank's slots): the stream's tied pair
 * of stages, once per rank, after every backward of the pair's stages on this rank and their
 * ALLREDUCE (so that both copies sum the same replica-reduced gradients and stay equal), and
 * with no message pending (so that nothing else can wait on this rank: the deadlock checker
 * treats TIE as the exchange its twin completes). Returns 0 or -1 after reporting. */
static int check_tie(vctx *v, const vslot *st) {
  const be_stream *s = v->s;
  int32_t a = v->in->a[0], b = v->in->a[1], te = v->tie[0], th = v->tie[1];
  if (te < 0) return fail_at(v, "TIE, but the stream has no tied lm_head");
  if (!((a == te && b == th) || (a == th && b == te)))
    return fail_at(v, "TIE of s%d and s%d, but the tied pair is s%d (embedding) and s%d "
                   "(lm_head)", (int)a, (int)b, (int)te, (int)th);
  if (v->tied[v->rank]) return fail_at(v, "second TIE");
  v->tied[v->rank] = 1;
  int32_t pair[2] = {a, b};
  for (int k = 0; k < 2; k++) {
    int32_t x = pair[k];
    if (s->stages[x].rank != v->rank) continue;
    for (int32_t mb = 0; mb < s->nmb; mb++) {
      uint16_t c = v->cov[(size_t)x * (size_t)s->nmb + (size_t)mb];
      if (!(c & COV_B) && !((c & COV_BI) && (c & COV_W)))
        return fail_at(v, "TIE before the backward of s%d mb%d", (int)x, (int)mb);
    }
    if (s->replicas > 1 && !v->reduced[x])
      return fail_at(v, "TIE before the ALLREDUCE of stage %d", (int)x);
  }
  for (int i = 0; i < s->ranks[v->rank].nslots; i++)
    if (pending(st[i].state))
      return fail_at(v, "TIE while slot %%%d's %s is pending", i, pending_name(st[i].state));
  return 0;
}

/* The host copy OFFLOAD or RELOAD v->in of (kind a[1], stage stg, microbatch m) on this rank
 * (the stage's, checked; st: the rank's slots): the stage offloads, each tensor is offloaded
 * once and reloaded once, only after its offload, and only once no buffer of this rank still
 * holds it with its offload pending (the copy back reads what the copy out wrote). Records it in
 * the coverage table. Returns 0 or -1 after reporting. */
static int check_copy(vctx *v, const vslot *st, int32_t stg, int32_t m) {
  bool out = v->in->op == BE_OP_OFFLOAD;
  int32_t t = v->in->a[1];
  char b[64];
  vlabel l = mklabel(t, stg, m);
  if (!v->s->stages[stg].offload)
    return fail_at(v, "stage %d does not offload (its stage-table offload flag is 0)", (int)stg);
  uint16_t *c = &v->cov[(size_t)stg * (size_t)v->s->nmb + (size_t)m];
  bool wst = t == BE_T_WSTASH;
  uint16_t off = wst ? COV_OFF_WSTASH : COV_OFF_STASH, rel = wst ? COV_REL_WSTASH : COV_REL_STASH;
  if (out) {
    if (*c & off) return fail_at(v, "%s is offloaded twice", lname(b, l));
    *c |= off;
    return 0;
  }
  if (!(*c & off))
    return fail_at(v, "reloads %s, which was never offloaded", lname(b, l));
  if (*c & rel) return fail_at(v, "%s is reloaded twice", lname(b, l));
  for (int j = 0; j < v->nlive; j++)
    if (st[v->live[j]].state == V_POFF && leq(st[v->live[j]].l, l))
      return fail_at(v, "reloads %s while its offload from slot %%%d is pending (no WAIT)",
                     lname(b, l), (int)v->live[j]);
  *c |= rel;
  return 0;
}

/* Interpret program r once. Returns 0 or -1 after reporting the first problem. */
static int check_rank(vctx *v, int r) {
  const be_stream *s = v->s;
  const be_program *p = &s->ranks[r];
  vslot *st = xcalloc((size_t)p->nslots, sizeof *st);
  v->live = xmalloc((size_t)(p->nslots ? p->nslots : 1) * sizeof *v->live);
  v->live_pos = xmalloc((size_t)(p->nslots ? p->nslots : 1) * sizeof *v->live_pos);
  for (int i = 0; i < p->nslots; i++) v->live_pos[i] = -1;
  v->nlive = 0;
  char b1[64];
  int rc = 0;
  v->rank = r;
  for (int addr = 0; addr < p->ncode && rc == 0; addr++) {
    v->addr = addr;
    v->in = &p->code[addr];
    const int32_t *a = v->in->a;
    if (v->in->op >= BE_OP_COUNT) {
      rc = fail_at(v, "unknown opcode %u", (unsigned)v->in->op);
      break;
    }
    if ((rc = check_operands(v, p))) break;
    /* The tensor each slot operand must hold (or will hold): be_operand_tensor's rules. */
    vlabel want[BE_MAX_OPERANDS];
    memset(want, 0, sizeof want);
    be_opcode op = (be_opcode)v->in->op;
    for (int k = 0; k < be_ops[op].nops; k++) {
      be_tensor_ref t;
      if (be_operand_tensor(s, v->in, k, &t)) want[k] = mklabel(t.kind, t.stage, t.mb);
    }
    int32_t stg = a[0], m = a[1];
    if (be_ops[op].flags & BE_COPY) stg = a[2], m = a[3];
    if ((be_ops[op].flags & (BE_COMPUTE | BE_COPY)) || op == BE_OP_ALLREDUCE || op == BE_OP_TIE) {
      if (s->stages[stg].rank != r) {
        rc = fail_at(v, "stage %d runs on rank %d, not here", (int)stg, (int)s->stages[stg].rank);
        break;
      }
    }
    switch (op) {
    case BE_OP_LOAD:
      if (stg != 0) rc = fail_at(v, "only the first stage loads input, not stage %d", (int)stg);
      break;
    case BE_OP_LOSS:
      if (stg != s->nstages - 1)
        rc = fail_at(v, "the loss is computed on the last stage (%d), not stage %d",
                     (int)s->nstages - 1, (int)stg);
      break;
    case BE_OP_BWD_IN:
    case BE_OP_BWD:
      if (stg == 0 && a[5] != -1)
        rc = fail_at(v, "the first stage has no input gradient: the last operand must be -1");
      else if (stg != 0 && a[5] == -1)
        rc = fail_at(v, "stage %d needs a buffer for its input gradient", (int)stg);
      break;
    case BE_OP_SEND:
    case BE_OP_RECV:
      rc = check_message(v, op == BE_OP_SEND);
      break;
    case BE_OP_ALLREDUCE:
      if (s->replicas == 1) {
        rc = fail_at(v, "ALLREDUCE with a single replica");
        break;
      }
      if (v->reduced[stg]) {
        rc = fail_at(v, "second ALLREDUCE of stage %d", (int)stg);
        break;
      }
      v->reduced[stg] = 1;
      for (int32_t mb = 0; mb < s->nmb; mb++) {
        uint16_t c = v->cov[(size_t)stg * (size_t)s->nmb + (size_t)mb];
        if (!(c & COV_B) && !((c & COV_BI) && (c & COV_W))) {
          rc = fail_at(v, "ALLREDUCE of stage %d before the backward of s%d mb%d", (int)stg,
                       (int)stg, (int)mb);
          break;
        }
      }
      break;
    case BE_OP_TIE:
      rc = check_tie(v, st);
      break;
    case BE_OP_OFFLOAD:
    case BE_OP_RELOAD:
      rc = check_copy(v, st, stg, m);
      break;
    case BE_OP_STEP:
      if (addr != p->ncode - 1) {
        rc = fail_at(v, "STEP is not the last instruction");
        break;
      }
      for (int i = 0; i < p->nslots; i++) {
        if (st[i].state == V_DEAD) continue;
        rc = fail_at(v, "slot %%%d (%s) is %s at the end of the program", i, lname(b1, st[i].l),
                     st[i].state == V_LIVE    ? "still live"
                     : st[i].state == V_PSEND ? "still being sent"
                     : st[i].state == V_PRECV ? "still being received"
                     : st[i].state == V_POFF  ? "still being offloaded (no WAIT)"
                                              : "still being reloaded (no WAIT)");
        break;
      }
      break;
    default:
      break;
    }
    if (rc) break;
    if ((rc = apply_slots(v, p, st, want))) break;
    if (op == BE_OP_SEND || op == BE_OP_RECV) rc = record_message(v, op == BE_OP_SEND);
    else if (be_ops[op].flags & BE_COMPUTE) rc = cover(v, stg, m);
  }
  if (rc == 0 && (p->ncode == 0 || p->code[p->ncode - 1].op != BE_OP_STEP))
    rc = fail(v, "rank %d: the program does not end with STEP", r);
  free(st);
  free(v->live);
  free(v->live_pos);
  v->live = v->live_pos = NULL;
  return rc;
}

/* Order of messages by tag. */
static int msg_cmp(const void *x, const void *y) {
  const vmsg *a = x, *b = y;
  if (a->t != b->t) return a->t < b->t ? -1 : 1;
  if (a->s != b->s) return a->s < b->s ? -1 : 1;
  if (a->m != b->m) return a->m < b->m ? -1 : 1;
  return 0;
}

/* Coverage after every rank ran: each (s, m) forward and backward, each mb's LOAD and LOSS, each
 * stage's ALLREDUCE when there are replicas, and a TIE on the ranks of a tied pair's stages. Returns 0 or -1. */
static int check_coverage(vctx *v) {
  const be_stream *s = v->s;
  for (int32_t st = 0; st < s->nstages; st++) {
    int r = s->stages[st].rank;
    for (int32_t m = 0; m < s->nmb; m++) {
      uint16_t c = v->cov[(size_t)st * (size_t)s->nmb + (size_t)m];
      if (st == 0 && !(c & COV_LOAD)) return fail(v, "rank %d: no LOAD of mb%d", r, (int)m);
      if (!(c & COV_F)) return fail(v, "rank %d: no FWD of s%d mb%d", r, (int)st, (int)m);
      if (st == s->nstages - 1 && !(c & COV_LOSS))
        return fail(v, "rank %d: no LOSS of mb%d", r, (int)m);
      if ((c & COV_BI) && !(c & COV_W))
        return fail(v, "rank %d: BWD_IN of s%d mb%d has no BWD_W", r, (int)st, (int)m);
      if (!(c & (COV_B | COV_BI)))
        return fail(v, "rank %d: no backward (BWD, or BWD_IN and BWD_W) of s%d mb%d", r, (int)st,
                    (int)m);
    }
    if (s->replicas > 1 && !v->reduced[st])
      return fail(v, "rank %d: no ALLREDUCE of stage %d (%d replicas)", r, (int)st,
                  (int)s->replicas);
  }
  for (int k = 0; k < 2 && v->tie[0] >= 0; k++) {
    int r = s->stages[v->tie[k]].rank;
    if (!v->tied[r])
      return fail(v, "rank %d: no TIE of the tied embedding (s%d) and lm_head (s%d)", r,
                  (int)v->tie[0], (int)v->tie[1]);
  }
  return 0;
}

/* Pair every send with its receive by tag (each tag occurs at most once per side, which the
 * rank passes ensured): a missing partner is an error (both sides' buffers hold the tensor's
 * size, which the stage table fixes).
 * Returns 0 or -1. */
static int check_pairs(vctx *v) {
  if (v->nsends) qsort(v->sends, v->nsends, sizeof *v->sends, msg_cmp);
  if (v->nrecvs) qsort(v->recvs, v->nrecvs, sizeof *v->recvs, msg_cmp);
  size_t i = 0, j = 0;
  char b[64];
  while (i < v->nsends || j < v->nrecvs) {
    int c = i == v->nsends ? 1 : j == v->nrecvs ? -1 : msg_cmp(&v->sends[i], &v->recvs[j]);
    if (c < 0) {
      const vmsg *x = &v->sends[i];
      return fail(v, "rank %d at %04d (SEND): %s to rank %d is never received", (int)x->rank,
                  (int)x->addr, lname(b, mklabel(x->t, x->s, x->m)), (int)x->peer);
    }
    if (c > 0) {
      const vmsg *y = &v->recvs[j];
      return fail(v, "rank %d at %04d (RECV): %s from rank %d is never sent", (int)y->rank,
                  (int)y->addr, lname(b, mklabel(y->t, y->s, y->m)), (int)y->peer);
    }
    i++;
    j++;
  }
  return 0;
}

/* The predicted times of rank r: each entry names an instruction of the program (entries in
 * strictly increasing address order) that is a FWD, BWD_IN, BWD_W or BWD, with a finite start
 * t0 >= 0 and an end t1 >= t0; and each such instruction has an entry. Pre: the header checks
 * passed (npred entries are there). Returns 0 or -1 after reporting. */
static int check_pred(vctx *v, int r) {
  const be_program *p = &v->s->ranks[r];
  for (int i = 0; i < p->npred; i++) {
    const be_pred *e = &p->pred[i];
    if (e->addr < 0 || e->addr >= p->ncode)
      return fail(v, "rank %d: predicted time %d names address %d, out of range (%d "
                  "instructions)", r, i, (int)e->addr, (int)p->ncode);
    const be_inst *in = &p->code[e->addr];
    const char *op = in->op < BE_OP_COUNT ? be_ops[in->op].name : "?";
    if (i > 0 && e->addr == p->pred[i - 1].addr)
      return fail(v, "rank %d: second predicted time of %04d (%s)", r, (int)e->addr, op);
    if (i > 0 && e->addr < p->pred[i - 1].addr)
      return fail(v, "rank %d: predicted time of %04d (%s) after that of %04d (entries go in "
                  "increasing address order)", r, (int)e->addr, op, (int)p->pred[i - 1].addr);
    if (!be_op_predicted(in->op))
      return fail(v, "rank %d: predicted time of %04d (%s), which is not a FWD, BWD_IN, BWD_W or "
                  "BWD instruction", r, (int)e->addr, op);
    if (!time_ok(e->t0))
      return fail(v, "rank %d: predicted time of %04d (%s): t0 %.9g must be finite and at least "
                  "0", r, (int)e->addr, op, e->t0);
    if (!isfinite(e->t1))
      return fail(v, "rank %d: predicted time of %04d (%s): t1 %.9g must be finite", r,
                  (int)e->addr, op, e->t1);
    if (e->t1 < e->t0)
      return fail(v, "rank %d: predicted time of %04d (%s): t1 %.9g before t0 %.9g", r,
                  (int)e->addr, op, e->t1, e->t0);
  }
  int j = 0;
  for (int addr = 0; addr < p->ncode; addr++) {
    if (!be_op_predicted(p->code[addr].op)) continue;
    if (j < p->npred && p->pred[j].addr == addr) {
      j++;
      continue;
    }
    return fail(v, "rank %d at %04d (%s): no predicted time", r, addr,
                be_ops[p->code[addr].op].name);
  }
  return 0;
}

/* See backend.h. Pre: s is a stream whose arrays hold the counts it states (a NULL array with a
 * positive count is reported, not read). Post: returns 0 when every rule holds; else -1 with
 * exactly one message appended to err. Memory: the slots of one rank, a coverage table of
 * nstages x nmb entries (allocated only when the programs are long enough to cover it), and the
 * list of messages. */
int be_validate(const be_stream *s, strbuf *err) {
  vctx v = {0};
  v.s = s;
  v.err = err;
  if (!s) return fail(&v, "no stream");
  if (check_header(&v)) return -1;
  int64_t total = 0;
  for (int r = 0; r < s->nranks; r++) total += s->ranks[r].ncode;
  int64_t need = 2 * (int64_t)s->nstages * (int64_t)s->nmb;
  if (total < need)
    return fail(&v,
                "the programs have %" PRId64 " instructions, too few for a forward and a "
                "backward of each of %d stages x %d microbatches",
                total, (int)s->nstages, (int)s->nmb);
  v.cov = xcalloc((size_t)need / 2, sizeof *v.cov);
  v.reduced = xcalloc((size_t)s->nstages, 1);
  v.tied = xcalloc((size_t)s->nranks, 1);
  int emb, head;
  v.tie[0] = v.tie[1] = -1;
  if (be_stream_tie(s, &emb, &head)) {
    v.tie[0] = be_stage_of_layer(s, emb);
    v.tie[1] = be_stage_of_layer(s, head);
  }
  int rc = 0;
  for (int r = 0; r < s->nranks && rc == 0; r++) rc = check_rank(&v, r);
  if (rc == 0) rc = check_pairs(&v);
  if (rc == 0) rc = check_coverage(&v);
  for (int r = 0; r < s->nranks && rc == 0; r++) rc = check_pred(&v, r);
  free(v.cov);
  free(v.reduced);
  free(v.tied);
  free(v.sends);
  free(v.recvs);
  return rc;
}
