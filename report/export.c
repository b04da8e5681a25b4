/* export.c -- the plan in other frameworks' terms: the schedule as the CSV that PyTorch's
 * torch.distributed.pipelining reads (_load_csv, compute-only actions), and the partition as
 * Megatron-LM's --pipeline-model-parallel-layout string or hybrid layer pattern with '|' cuts. */
#include <string.h>

#include "report_impl.h"

/* PyTorch's action letter of an IR op (torch's _ComputationType): F forward, I input gradient,
 * W weight gradient, B full backward. */
static char torch_action(ir_op_kind k) {
  switch (k) {
  case IR_OP_F: return 'F';
  case IR_OP_B: return 'I';
  case IR_OP_W: return 'W';
  case IR_OP_BW: return 'B';
  default: return '?';
  }
}

void report_torch_csv(const ir_module *m, strbuf *out) {
  for (int dv = 0; dv < m->ndevices; dv++) {
    const ir_schedule *s = &m->schedules[dv];
    for (int i = 0; i < s->nops; i++)
      strbuf_printf(out, "%s%d%c%d", i ? "," : "", s->ops[i].stage, torch_action(s->ops[i].kind),
                    s->ops[i].mb);
    strbuf_putc(out, '\n');
  }
}

/* Append symbol c repeated n times to a layout stage as "c" or "c*n", comma-separated. */
static void put_run(strbuf *out, bool *first, char c, int n) {
  if (n <= 0) return;
  if (!*first) strbuf_putc(out, ',');
  *first = false;
  if (n == 1)
    strbuf_putc(out, c);
  else
    strbuf_printf(out, "%c*%d", c, n);
}

int report_megatron_layout(const ir_module *m, strbuf *out, diag_engine *d, diag_loc where) {
  int p = m->ndevices;
  if (p == 0 || m->nstages % p != 0) {
    diag_error(d, where, "cannot write a Megatron layout: Megatron gives every one of the %d "
               "pipeline ranks the same number of virtual stages, but the plan has %d stages",
               p, m->nstages);
    return -1;
  }
  for (int s = 0; s < m->nstages; s++)
    if (m->stages[s].device != s % p) {
      diag_error(d, where, "cannot write a Megatron layout: Megatron places virtual stage s on "
                 "pipeline rank s mod %d, but @s%d is on $d%d (only sequential and interleaved "
                 "placements can be written)", p, s, m->stages[s].device);
      return -1;
    }
  bool hybrid = false;
  for (int i = 0; i < m->nlayers; i++)
    if (m->layers[i].kind == IR_KIND_MAMBA2) hybrid = true;
  pass_layout_notation notation = hybrid ? PASS_LAYOUT_HYBRID : PASS_LAYOUT_MEGATRON;
  strbuf sb = {0};
  for (int s = 0; s < m->nstages; s++) {
    const ir_stage *st = &m->stages[s];
    if (s) strbuf_putc(&sb, '|');
    bool first = true;
    char run = 0;
    int count = 0;
    for (int i = st->first; i < st->end; i++) {
      ir_layer_kind k = m->layers[i].kind;
      if (hybrid && ((k == IR_KIND_EMBEDDING && s == 0) ||
                     (k == IR_KIND_LM_HEAD && s == m->nstages - 1)))
        continue; /* implicit in a hybrid pattern */
      char c = pass_layout_symbol(notation, k);
      if (!hybrid && k == IR_KIND_ATTENTION) { /* 't': the attention and its MLP or MoE */
        if (i + 1 < st->end &&
            (m->layers[i + 1].kind == IR_KIND_MLP || m->layers[i + 1].kind == IR_KIND_MOE))
          i++;
        else if (i + 1 < m->nlayers && (m->layers[i + 1].kind == IR_KIND_MLP ||
                                        m->layers[i + 1].kind == IR_KIND_MOE)) {
          diag_error(d, where, "cannot write a Megatron layout: @s%d ends between attention "
                     "layer %%%d \"%s\" and its %s (a Megatron 't' is both)", s, i,
                     m->layers[i].name, ir_kinds[m->layers[i + 1].kind].name);
          strbuf_free(&sb);
          return -1;
        }
      }
      if (!c) {
        strbuf syms = {0};
        pass_layout_symbols(notation, &syms);
        diag_error(d, where, "cannot write a Megatron layout: layer %%%d \"%s\" (%s) has no "
                   "symbol in %s (%s)", i, m->layers[i].name, ir_kinds[k].name,
                   hybrid ? "a hybrid pattern" : "a layout", strbuf_cstr(&syms));
        strbuf_free(&syms);
        strbuf_free(&sb);
        return -1;
      }
      if (hybrid) { /* one character per layer, as Megatron's hybrid_override_pattern */
        strbuf_putc(&sb, c);
        continue;
      }
      if (c != run) {
        put_run(&sb, &first, run, count);
        run = c;
        count = 0;
      }
      count++;
    }
    put_run(&sb, &first, run, count);
  }
  strbuf_append(out, strbuf_cstr(&sb), sb.len);
  strbuf_putc(out, '\n');
  strbuf_free(&sb);
  return 0;
}
