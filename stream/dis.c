/* dis.c -- the disassembler: the text listing of an instruction stream (header with the
 * prediction, then per rank its device, buffer slots and instructions in fixed columns with a
 * comment naming what each instruction does to which tensor), and the instruction-set reference
 * tables of docs/isa.md, both generated from isa.def, operands.def and tensors.def. */
#include <stdlib.h>
#include <string.h>

#include "stream.h"

enum {
  DIS_MNEMONIC_WIDTH = 10, /* columns of the mnemonic */
  DIS_OPERANDS_WIDTH = 34, /* columns of the operand list before the comment */
  DIS_SLOT_NAME_WIDTH = 4, /* columns of "%N" in slot lines */
  DIS_TENSOR_WIDTH = 8,    /* columns of the tensor kind in slot lines */
  DIS_SIZE_WIDTH = 10      /* columns of the size in slot lines */
};

/* Append n spaces to out. */
static void put_spaces(strbuf *out, size_t n) {
  for (size_t i = 0; i < n; i++) strbuf_putc(out, ' ');
}

/* Append text padded with spaces to 'width' columns; text at least that long gets one space
 * after it instead. */
static void put_padded(strbuf *out, const char *text, size_t width) {
  size_t n = strlen(text);
  strbuf_puts(out, text);
  put_spaces(out, n < width ? width - n : 1);
}

/* Empty sb, keeping its memory. Post: strbuf_cstr(sb) is "". */
static void clear(strbuf *sb) {
  sb->len = 0;
  if (sb->data) sb->data[0] = '\0';
}

/* "s" when n is not 1: the plural ending of a count. */
static const char *plural(long long n) { return n == 1 ? "" : "s"; }

void be_put_bytes(strbuf *out, double bytes) {
  static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (u < 4 && bytes >= 1024) {
    bytes /= 1024;
    u++;
  }
  char num[64];
  snprintf(num, sizeof num, "%.2f", bytes);
  char *end = num + strlen(num);
  while (end > num && end[-1] == '0') *--end = 0;
  if (end > num && end[-1] == '.') *--end = 0;
  strbuf_printf(out, "%s%s", num, unit[u]);
}

/* Name of tensor kind t, or NULL when t is out of range. */
static const char *tensor_name(int32_t t) {
  return t >= 0 && t < BE_T_COUNT ? be_tensors[t].name : NULL;
}

/* Append operand value v of kind k as the listing spells it: s3, mb7, r4, act, %5 or - (an
 * absent optional slot). Values out of range print as plain numbers. */
static void put_operand(strbuf *out, be_operand_kind k, int32_t v) {
  switch (k) {
  case BE_K_STAGE: strbuf_printf(out, "s%d", (int)v); return;
  case BE_K_MB: strbuf_printf(out, "mb%d", (int)v); return;
  case BE_K_RANK: strbuf_printf(out, "r%d", (int)v); return;
  case BE_K_TENSOR:
  case BE_K_HTENSOR: {
    const char *n = tensor_name(v);
    if (n) strbuf_puts(out, n);
    else strbuf_printf(out, "%d", (int)v);
    return;
  }
  default: break;
  }
  if (be_operands[k].slot) {
    if (v < 0 && be_operands[k].optional) strbuf_putc(out, '-');
    else strbuf_printf(out, "%%%d", (int)v);
    return;
  }
  strbuf_printf(out, "%d", (int)v);
}

/* Per-slot state of one rank while its code is listed: what each slot holds (the label FREE
 * names) and the comment of the last message posted on it (what WAIT names). */
typedef struct dis_rank {
  int32_t nslots;
  strbuf *label; /* nslots labels: "act s0 mb1"; empty while unknown */
  strbuf *msg;   /* nslots comments: "send act s0 mb1 -> rank 1"; empty when none */
} dis_rank;

/* Slot v's label buffer, or NULL when v is not a slot of the rank. */
static strbuf *slot_label(dis_rank *dr, int32_t v) {
  return v >= 0 && v < dr->nslots ? &dr->label[v] : NULL;
}

/* Whether stage st of s (an operand, maybe out of range) recomputes. */
static bool recomputes(const be_stream *s, int32_t st) {
  return st >= 0 && st < s->nstages && s->stages[st].recompute;
}

/* Append the comment of instruction 'in' of a rank of s (without "; ") and update the rank's
 * slot state dr with what the instruction does to its slots. */
static void put_comment(strbuf *out, const be_stream *s, const be_inst *in, dis_rank *dr,
                        const be_program *p) {
  const int32_t *a = in->a;
  switch ((be_opcode)in->op) {
  case BE_OP_LOAD: strbuf_printf(out, "input mb%d", (int)a[1]); break;
  case BE_OP_FWD:
    strbuf_printf(out, "forward s%d mb%d", (int)a[0], (int)a[1]);
    if (recomputes(s, a[0])) strbuf_puts(out, ", keeping its layers' inputs");
    break;
  case BE_OP_LOSS: strbuf_printf(out, "loss mb%d", (int)a[1]); break;
  case BE_OP_BWD_IN:
    strbuf_printf(out, "input-gradient backward s%d mb%d", (int)a[0], (int)a[1]);
    if (recomputes(s, a[0])) strbuf_puts(out, ", forward recomputed first");
    break;
  case BE_OP_BWD_W:
    strbuf_printf(out, "weight-gradient backward s%d mb%d", (int)a[0], (int)a[1]);
    break;
  case BE_OP_BWD:
    strbuf_printf(out, "backward s%d mb%d", (int)a[0], (int)a[1]);
    if (recomputes(s, a[0])) strbuf_puts(out, ", forward recomputed first");
    break;
  case BE_OP_SEND:
  case BE_OP_RECV:
  case BE_OP_OFFLOAD:
  case BE_OP_RELOAD: be_msg_text(out, in); break;
  case BE_OP_WAIT: {
    strbuf_puts(out, "wait for ");
    if (slot_label(dr, a[0]) && dr->msg[a[0]].len) strbuf_puts(out, strbuf_cstr(&dr->msg[a[0]]));
    else strbuf_printf(out, "%%%d", (int)a[0]);
    break;
  }
  case BE_OP_FREE: {
    strbuf *l = slot_label(dr, a[0]);
    strbuf_puts(out, "free ");
    if (l && l->len) strbuf_puts(out, strbuf_cstr(l));
    else if (l && tensor_name(p->slots[a[0]].tensor))
      strbuf_puts(out, tensor_name(p->slots[a[0]].tensor));
    else strbuf_printf(out, "%%%d", (int)a[0]);
    if (l) {
      clear(l);
      clear(&dr->msg[a[0]]);
    }
    break;
  }
  case BE_OP_ALLREDUCE:
    strbuf_printf(out, "all-reduce s%d weight gradients over %d replica%s", (int)a[0],
                  (int)s->replicas, plural(s->replicas));
    break;
  case BE_OP_STEP:
    strbuf_printf(out, "optimizer step (%s)", s->optimizer ? s->optimizer : "?");
    break;
  case BE_OP_TIE:
    if (a[1] >= 0 && a[1] < s->nstages && s->stages[a[1]].rank != s->stages[a[0]].rank)
      strbuf_printf(out, "sum the tied matrix's gradient of s%d with its copy in s%d (r%d)",
                    (int)a[0], (int)a[1], (int)s->stages[a[1]].rank);
    else
      strbuf_printf(out, "sum the tied matrix's gradient of s%d with its copy in s%d (here)",
                    (int)a[0], (int)a[1]);
    break;
  case BE_OP_COUNT: break;
  }
  /* What the instruction leaves in its slots: the tensor a new buffer holds (what FREE names),
   * and the message posted on it (what WAIT names). */
  for (int k = 0; k < be_ops[in->op].nops; k++) {
    be_role role = be_operands[be_ops[in->op].kinds[k]].role;
    strbuf *l = slot_label(dr, a[k]);
    be_tensor_ref t;
    if (!l || (role != BE_ROLE_DEF && role != BE_ROLE_RECV && role != BE_ROLE_SEND) ||
        !be_operand_tensor(s, in, k, &t))
      continue;
    if (role != BE_ROLE_SEND) {
      clear(l);
      be_tensor_text(l, t);
    }
    if (role != BE_ROLE_DEF) {
      clear(&dr->msg[a[k]]);
      be_msg_text(&dr->msg[a[k]], in);
    }
  }
}

/* Append the prediction line: the predicted step time and where the costs come from, "analytic
 * costs" when no scale and no measuring backend are set (a NULL backend counts as "none"). */
static void put_prediction(strbuf *out, const be_stream *s) {
  const char *on = s->measured_on ? s->measured_on : "none";
  bool measured = strcmp(on, "none") != 0;
  strbuf_printf(out, "; predicted step %.3f ms (", s->pred_step * 1e3);
  if (s->scale == 0 && !measured) {
    strbuf_puts(out, "analytic costs)\n");
    return;
  }
  strbuf_puts(out, "costs measured by octo-run");
  if (s->scale != 0) strbuf_printf(out, " at scale %d", (int)s->scale);
  if (measured) strbuf_printf(out, ", backend %s", on);
  strbuf_puts(out, ")\n");
}

/* Append the header: format line, model line, prediction line and one line per stage. */
static void put_header(strbuf *out, const be_stream *s) {
  strbuf_printf(out, "; OctoPipe instruction stream, format %u\n", BE_FORMAT_VERSION);
  strbuf_printf(out,
                "; model @%s: %d rank%s x %d replica%s, %d stage%s, %d microbatch%s of %d x %d "
                "tokens, %s, %s\n",
                s->model ? s->model : "?", (int)s->nranks, plural(s->nranks), (int)s->replicas,
                plural(s->replicas), (int)s->nstages, plural(s->nstages), (int)s->nmb,
                s->nmb == 1 ? "" : "es", (int)s->micro_batch, (int)s->seq,
                s->dtype ? s->dtype : "?", s->optimizer ? s->optimizer : "?");
  put_prediction(out, s);
  for (int i = 0; i < s->nstages; i++) {
    const be_stage *st = &s->stages[i];
    strbuf_printf(out, "; stage s%d: ", i);
    if (st->end - st->first == 1) strbuf_printf(out, "layer %%%d", (int)st->first);
    else if (st->end > st->first)
      strbuf_printf(out, "layers %%%d..%%%d", (int)st->first, (int)st->end - 1);
    else strbuf_puts(out, "no layers");
    strbuf_printf(out, " on rank %d; out ", (int)st->rank);
    be_put_bytes(out, (double)st->out_bytes);
    if (st->out_shape >= 0 && st->out_shape < s->nshapes) {
      const be_shape *sh = &s->shapes[st->out_shape];
      strbuf_puts(out, " [");
      for (int d = 0; d < sh->ndim && d < 4; d++)
        strbuf_printf(out, "%s%lld", d ? "x" : "", (long long)sh->dim[d]);
      strbuf_printf(out, "] x%d", (int)sh->elem);
    }
    strbuf_puts(out, ", stash ");
    be_put_bytes(out, (double)st->stash_bytes);
    strbuf_puts(out, ", wstash ");
    be_put_bytes(out, (double)st->wstash_bytes);
    if (st->recompute && st->recompute_layers > 0)
      strbuf_printf(out, ", recompute its first %d recomputable layers (B recomputes their "
                    "forward)", (int)st->recompute_layers);
    else if (st->recompute)
      strbuf_puts(out, ", recompute (B recomputes the forward)");
    if (st->offload) strbuf_puts(out, ", offload (F's stash and wstash go to host memory until B)");
    strbuf_putc(out, '\n');
  }
}

/* Append rank r's line: device, stages, slot total, the figures of be_mem_stats, the
 * predicted busy time and the predicted peak memory. */
static void put_rank_line(strbuf *out, const be_stream *s, int r) {
  const be_program *p = &s->ranks[r];
  strbuf_printf(out, "rank %d: $d%d %s, node %d; ", r, (int)p->device, p->type ? p->type : "?",
                (int)p->node);
  int nst = 0;
  for (int i = 0; i < s->nstages; i++) nst += s->stages[i].rank == r;
  if (nst == 0) strbuf_puts(out, "no stages");
  else strbuf_printf(out, "stage%s", plural(nst));
  for (int i = 0; i < s->nstages; i++)
    if (s->stages[i].rank == r) strbuf_printf(out, " s%d", i);
  be_mem m = be_mem_stats(s, r);
  strbuf_printf(out, "; %d slot%s, ", (int)p->nslots, plural(p->nslots));
  be_put_bytes(out, m.arena_bytes);
  strbuf_puts(out, "; peak live ");
  be_put_bytes(out, m.peak_live);
  if (m.peak_at >= 0) strbuf_printf(out, " at %04d", m.peak_at);
  strbuf_puts(out, "; activations ");
  be_put_bytes(out, m.peak_stash);
  strbuf_printf(out, "; predicted busy %.3f ms; predicted peak ", p->pred_busy * 1e3);
  be_put_bytes(out, p->pred_peak);
  strbuf_putc(out, '\n');
}

/* Append the line of slot i of rank program p: "  slot %1  act     32MiB     at 200MiB" (size
 * and offset in the rank's arena). */
static void put_slot(strbuf *out, const be_program *p, int i) {
  const be_slot *sl = &p->slots[i];
  strbuf name = {0};
  strbuf_printf(&name, "%%%d", i);
  strbuf_puts(out, "  slot ");
  put_padded(out, strbuf_cstr(&name), DIS_SLOT_NAME_WIDTH);
  strbuf_free(&name);
  const char *t = tensor_name(sl->tensor);
  if (t) put_padded(out, t, DIS_TENSOR_WIDTH);
  else {
    strbuf num = {0};
    strbuf_printf(&num, "%d", (int)sl->tensor);
    put_padded(out, strbuf_cstr(&num), DIS_TENSOR_WIDTH);
    strbuf_free(&num);
  }
  strbuf size = {0};
  be_put_bytes(&size, (double)sl->bytes);
  put_padded(out, strbuf_cstr(&size), DIS_SIZE_WIDTH);
  strbuf_free(&size);
  strbuf_puts(out, "at ");
  be_put_bytes(out, (double)sl->offset);
  strbuf_putc(out, '\n');
}

/* Append the listing of rank r: its line, its slots, its instructions. */
static void put_rank(strbuf *out, const be_stream *s, int r) {
  const be_program *p = &s->ranks[r];
  put_rank_line(out, s, r);
  for (int i = 0; i < p->nslots; i++) put_slot(out, p, i);
  dis_rank dr = {p->nslots > 0 ? p->nslots : 0, NULL, NULL};
  if (dr.nslots > 0) {
    dr.label = xcalloc((size_t)dr.nslots, sizeof *dr.label);
    dr.msg = xcalloc((size_t)dr.nslots, sizeof *dr.msg);
  }
  strbuf ops = {0};
  for (int pc = 0; pc < p->ncode; pc++) {
    const be_inst *in = &p->code[pc];
    strbuf_printf(out, "  %04d  ", pc);
    if (in->op >= BE_OP_COUNT) {
      strbuf_printf(out, "?%d\n", (int)in->op);
      continue;
    }
    const be_op_info *info = &be_ops[in->op];
    clear(&ops);
    for (int k = 0; k < info->nops && k < BE_MAX_OPERANDS; k++) {
      if (k) strbuf_putc(&ops, ' ');
      put_operand(&ops, info->kinds[k], in->a[k]);
    }
    put_padded(out, info->name, DIS_MNEMONIC_WIDTH);
    put_padded(out, strbuf_cstr(&ops), DIS_OPERANDS_WIDTH);
    strbuf_puts(out, "; ");
    put_comment(out, s, in, &dr, p);
    strbuf_putc(out, '\n');
  }
  strbuf_free(&ops);
  for (int i = 0; i < dr.nslots; i++) {
    strbuf_free(&dr.label[i]);
    strbuf_free(&dr.msg[i]);
  }
  free(dr.label);
  free(dr.msg);
}

void be_disasm(const be_stream *s, strbuf *out) {
  put_header(out, s);
  for (int r = 0; r < s->nranks; r++) {
    if (r) strbuf_putc(out, '\n');
    put_rank(out, s, r);
  }
}

/* ---- Instruction-set reference -------------------------------------------------------------- */

/* Append text as a Markdown table cell's contents ('|' escaped). */
static void put_cell(strbuf *out, const char *text) {
  for (const char *c = text; *c; c++) {
    if (*c == '|') strbuf_putc(out, '\\');
    strbuf_putc(out, *c);
  }
}

/* Spelling of the be_flag bits in isa.def. */
static const struct {
  unsigned bit;
  const char *name;
} dis_flags[] = {{BE_COMPUTE, "COMPUTE"}, {BE_COMM, "COMM"}, {BE_SYNC, "SYNC"},
                 {BE_MEM, "MEM"},         {BE_END, "END"},   {BE_COPY, "COPY"}};

/* Spelling of the slot roles of operands.def, indexed by be_role. */
static const char *const dis_roles[] = {"—", "use", "def", "mod", "send", "recv", "wait", "kill"};

void be_isa_doc(strbuf *out) {
  strbuf_puts(out, "### Opcodes\n\n");
  strbuf_puts(out, "| opcode | mnemonic | operands | flags | synopsis |\n");
  strbuf_puts(out, "|---:|---|---|---|---|\n");
  for (int op = 0; op < BE_OP_COUNT; op++) {
    const be_op_info *info = &be_ops[op];
    strbuf_printf(out, "| %d | `%s` | ", op, info->name);
    if (info->nops == 0) strbuf_puts(out, "—");
    else {
      strbuf_putc(out, '`');
      for (int k = 0; k < info->nops && k < BE_MAX_OPERANDS; k++) {
        if (k) strbuf_putc(out, ' ');
        put_cell(out, be_operands[info->kinds[k]].name);
      }
      strbuf_putc(out, '`');
    }
    strbuf_puts(out, " | ");
    bool any = false;
    for (size_t f = 0; f < sizeof dis_flags / sizeof dis_flags[0]; f++) {
      if (!(info->flags & dis_flags[f].bit)) continue;
      strbuf_printf(out, "%s%s", any ? ", " : "", dis_flags[f].name);
      any = true;
    }
    if (!any) strbuf_puts(out, "—");
    strbuf_puts(out, " | ");
    put_cell(out, info->synopsis);
    strbuf_puts(out, " |\n");
  }

  strbuf_puts(out, "\n### Operand kinds\n\n");
  strbuf_puts(out, "| kind | slot | role | optional | meaning |\n");
  strbuf_puts(out, "|---|---|---|---|---|\n");
  for (int k = 0; k < BE_K_COUNT; k++) {
    const be_operand_info *oi = &be_operands[k];
    if (k == BE_K_NONE) continue; /* "no operand": the filler past an opcode's operands */
    strbuf_puts(out, "| `");
    put_cell(out, oi->name);
    strbuf_printf(out, "` | %s | %s | %s | ", oi->slot ? "yes" : "no",
                  (unsigned)oi->role < sizeof dis_roles / sizeof dis_roles[0]
                      ? dis_roles[oi->role]
                      : "?",
                  oi->optional ? "yes" : "no");
    put_cell(out, oi->doc);
    strbuf_puts(out, " |\n");
  }

  strbuf_puts(out, "\n### Tensor kinds\n\n");
  strbuf_puts(out, "| tensor | in messages | to host memory | meaning |\n");
  strbuf_puts(out, "|---|---|---|---|\n");
  for (int t = 0; t < BE_T_COUNT; t++) {
    strbuf_puts(out, "| `");
    put_cell(out, be_tensors[t].name);
    strbuf_printf(out, "` | %s | %s | ", be_tensors[t].msg ? "yes" : "no",
                  be_tensors[t].host ? "yes" : "no");
    put_cell(out, be_tensors[t].doc);
    strbuf_puts(out, " |\n");
  }
}
