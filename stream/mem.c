/* mem.c -- be_mem_stats: a rank's buffer figures (its arena, its largest live set and where,
 * its largest stash, and what it needs), from its slots and its instructions' operand roles. The
 * lowering warns with them, the disassembler lists them, octo-run predicts a rank's memory. */
#include <stdlib.h>

#include "stream.h"

be_mem be_mem_stats(const be_stream *s, int r) {
  be_mem mm = {0, 0, 0, -1, 0};
  const be_program *p = &s->ranks[r];
  for (int i = 0; i < p->nslots; i++) {
    double end = (double)p->slots[i].offset + (double)p->slots[i].bytes;
    if (end > mm.arena_bytes) mm.arena_bytes = end;
  }
  /* Bytes of the tensor each slot holds now. */
  double *held = xcalloc((size_t)(p->nslots ? p->nslots : 1), sizeof *held);
  double live = 0, stash = 0;
  for (int pc = 0; pc < p->ncode; pc++) {
    const be_inst *in = &p->code[pc];
    const be_op_info *oi = &be_ops[in->op];
    for (int k = 0; k < oi->nops; k++) {
      const be_operand_info *ki = &be_operands[oi->kinds[k]];
      if (!ki->slot || in->a[k] < 0) continue;
      int slot = in->a[k];
      bool kept = p->slots[slot].tensor == BE_T_STASH || p->slots[slot].tensor == BE_T_WSTASH;
      be_tensor_ref t;
      if ((ki->role == BE_ROLE_DEF || ki->role == BE_ROLE_RECV) &&
          be_operand_tensor(s, in, k, &t)) {
        held[slot] = (double)be_tensor_bytes(s, t.kind, t.stage);
        live += held[slot];
        if (kept) stash += held[slot];
      } else if (ki->role == BE_ROLE_KILL) {
        live -= held[slot];
        if (kept) stash -= held[slot];
        held[slot] = 0;
      }
    }
    if (live > mm.peak_live) {
      mm.peak_live = live;
      mm.peak_at = pc;
    }
    if (stash > mm.peak_stash) mm.peak_stash = stash;
  }
  free(held);
  mm.need = p->pred_peak - mm.peak_stash + mm.arena_bytes;
  return mm;
}
