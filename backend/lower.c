/* lower.c -- be_lower: turn a scheduled module into one program per rank.
 *
 * The simulator's timeline of the plan gives a reference order of every operation of the step
 * (a linearization that respects the data dependencies, ordered by predicted start). Walking it,
 * each operation is emitted on its rank; when an operation starts, the receives of the tensors it
 * will send are posted at their consumers (the producer places the consumer's receive), so that
 * on every pair of ranks sends and receives come in the same order and every receive is posted
 * before its send in the reference order. WAITs go just before the first use, FREEs after the
 * last, and the buffer of a send is released (WAIT, FREE) when the reference order has run its
 * consumer. An offloading stage's stash and wstash go to host memory right after its F (OFFLOAD;
 * WAIT and FREE before the rank's next F, or before their RELOAD) and come back into new buffers
 * (RELOAD) where the simulator posted their copy back: before the first operation of the rank
 * that starts at or after that time (at the latest before the B, which WAITs for them). Buffers
 * are first virtual (one per tensor) and then packed into slots per rank. The
 * stream keeps the prediction: the simulated makespan, each rank's busy time and peak memory,
 * and the simulated start and end of each compute instruction. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cost.h"
#include "sim.h"

/* A tensor of the lowering, before slots are assigned. */
typedef struct vbuf {
  int rank;       /* rank holding it */
  uint64_t bytes; /* size */
  uint8_t tensor; /* be_tensor_kind */
  int slot;       /* slot assigned (-1 before) */
} vbuf;

/* A send whose buffer is released once the reference order has passed 'due'. */
typedef struct release {
  int rank;  /* sending rank */
  int buf;   /* vbuf of the sent tensor */
  long due;  /* position in the reference order of the consumer */
} release;

/* A buffer offloaded to host memory, released once the simulator's copy of its cell ended. */
typedef struct offloaded {
  int rank; /* its rank */
  int buf;  /* its vbuf */
  int cell; /* stage * microbatches + microbatch (for lower.offload_end) */
} offloaded;

/* A copy back the simulator posted: when, and its cell (stage * microbatches + microbatch). */
typedef struct reload_ev {
  double at; /* seconds */
  int cell;
} reload_ev;

/* Order copies back by time, then cell. */
static int reload_cmp(const void *a, const void *b) {
  const reload_ev *x = a, *y = b;
  if (x->at != y->at) return x->at < y->at ? -1 : 1;
  return (x->cell > y->cell) - (x->cell < y->cell);
}

/* Lowering state. */
typedef struct lower {
  const ir_module *m;
  be_stream *s;
  int nst, nmb;     /* stages, microbatches */
  int *rank_of;     /* per stage: its rank */
  vbuf *bufs;       /* every tensor */
  int nbufs, bufs_cap;
  int *act_in;      /* [s * nmb + m]: vbuf holding act s at its consumer (stage s+1, or LOSS) */
  int *grad_in;     /* [s * nmb + m], s in 0..nst: vbuf holding grad s at its consumer */
  bool *must_wait;  /* per vbuf: a RECV is pending (WAIT before first use) */
  int *stash, *wstash; /* [s * nmb + m]: vbufs F keeps for B and W (-1: none) */
  long *pos;        /* [(s * nmb + m) * 3 + slot]: position in the reference order (F, B, W) */
  release *rel;     /* pending releases of sent buffers */
  int nrel, rel_cap;
  offloaded *off;   /* offloaded buffers whose copy to host memory is pending */
  double *offload_end; /* [s * nmb + m]: when the simulator's copy to host memory ended (the
                       device freed the activations) */
  int noff, off_cap;
  bool *reloaded;   /* [s * nmb + m]: the cell's copy back is RELOADed */
  reload_ev *reloads; /* per rank, the simulator's copies back in time order:
                       reloads[reload_first[r] .. reload_first[r + 1]) */
  int *reload_first; /* ranks + 1 entries */
  int *reload_next; /* per rank: the next of its reloads not yet emitted */
  double *when;     /* [((s * nmb + m) * 3 + slot) * 2 + 0/1]: simulated start and end of the
                       operation (a fused BW in the B slot) */
  int *pred_cap;    /* per rank: entries allocated in its program's pred table */
} lower;

enum { SL_F, SL_B, SL_W };

/* A new tensor (kind t of stage s, as be_tensor_bytes names it) on rank 'rank'; returns its id,
 * or -1 for a stash of 0 bytes, which gets no buffer. */
static int new_buf(lower *L, int rank, be_tensor_kind t, int s) {
  uint64_t bytes = be_tensor_bytes(L->s, t, s);
  if ((t == BE_T_STASH || t == BE_T_WSTASH) && bytes == 0) return -1;
  vbuf b = {rank, bytes, (uint8_t)t, -1};
  VEC_PUSH(L->bufs, L->nbufs, L->bufs_cap, b);
  L->must_wait = xrealloc(L->must_wait, (size_t)L->bufs_cap * sizeof *L->must_wait);
  L->must_wait[L->nbufs - 1] = false;
  return L->nbufs - 1;
}

/* Emit an instruction on rank r; slot operands hold vbuf ids until assign_slots. Returns its
 * address. */
static int emit(lower *L, int r, be_opcode op, int32_t a0, int32_t a1, int32_t a2, int32_t a3,
                int32_t a4, int32_t a5) {
  int32_t a[BE_MAX_OPERANDS] = {a0, a1, a2, a3, a4, a5};
  return be_emit(&L->s->ranks[r], op, be_ops[op].nops, a);
}

/* Give compute instruction 'addr' of rank r, the operation in slot sl (SL_F, SL_B, SL_W) of stage
 * s and microbatch mb, its simulated start and end. Pre: addr is past every earlier entry of the
 * rank (instructions are emitted in address order). */
static void add_pred(lower *L, int r, int addr, int s, int mb, int sl) {
  be_program *p = &L->s->ranks[r];
  const double *w = &L->when[(((long)s * L->nmb + mb) * 3 + sl) * 2];
  be_pred e = {addr, w[0], w[1]};
  VEC_PUSH(p->pred, p->npred, L->pred_cap[r], e);
}

/* WAIT for a received buffer on rank r before its first use. */
static void wait_if_pending(lower *L, int r, int buf) {
  if (buf >= 0 && L->must_wait[buf]) {
    emit(L, r, BE_OP_WAIT, buf, 0, 0, 0, 0, 0);
    L->must_wait[buf] = false;
  }
}

static void free_buf(lower *L, int r, int buf) {
  if (buf >= 0) emit(L, r, BE_OP_FREE, buf, 0, 0, 0, 0, 0);
}

/* Release (WAIT, FREE) the sent buffers of rank r whose consumer ran before position 'now'
 * (every one when now < 0). */
static void release_due(lower *L, int r, long now) {
  int k = 0;
  for (int i = 0; i < L->nrel; i++) {
    release *x = &L->rel[i];
    if (x->rank == r && (now < 0 || x->due < now)) {
      emit(L, r, BE_OP_WAIT, x->buf, 0, 0, 0, 0, 0);
      emit(L, r, BE_OP_FREE, x->buf, 0, 0, 0, 0, 0);
    } else {
      L->rel[k++] = *x;
    }
  }
  L->nrel = k;
}

/* Release (WAIT, FREE) the buffers of rank r whose copy to host memory is pending and that the
 * simulator freed by time t (their copy ended): at each operation of the rank, as its start
 * passes their end; all of them (t = INFINITY) before the rank's next F allocates and at the end
 * of the step. */
static void release_offloads(lower *L, int r, double t) {
  int k = 0;
  for (int i = 0; i < L->noff; i++) {
    offloaded *x = &L->off[i];
    if (x->rank == r && L->offload_end[x->cell] <= t) {
      emit(L, r, BE_OP_WAIT, x->buf, 0, 0, 0, 0, 0);
      emit(L, r, BE_OP_FREE, x->buf, 0, 0, 0, 0, 0);
    } else {
      L->off[k++] = *x;
    }
  }
  L->noff = k;
}

/* OFFLOAD buffer 'buf' (tensor t of stage s, microbatch mb; -1: none) of rank r to host memory;
 * it is released by release_offloads. */
static void offload(lower *L, int r, int buf, be_tensor_kind t, int s, int mb) {
  if (buf < 0) return;
  emit(L, r, BE_OP_OFFLOAD, buf, t, s, mb, 0, 0);
  offloaded x = {r, buf, s * L->nmb + mb};
  VEC_PUSH(L->off, L->noff, L->off_cap, x);
}

/* Post the RELOAD of tensor t of stage s, microbatch mb into a new buffer of rank r when 'had'
 * (the buffer F kept, -1: none) was offloaded; returns the new buffer (or -1), which B WAITs
 * for. */
static int reload(lower *L, int r, int had, be_tensor_kind t, int s, int mb) {
  if (had < 0) return -1;
  int b = new_buf(L, r, t, s);
  emit(L, r, BE_OP_RELOAD, b, t, s, mb, 0, 0);
  return b;
}

/* The copy back of cell i (stage s * nmb + microbatch) on rank r, once, after its copies out
 * (which ended before the simulator posted it): RELOAD its stash and wstash. */
static void reload_cell(lower *L, int r, int i) {
  if (L->reloaded[i]) return;
  L->reloaded[i] = true;
  release_offloads(L, r, L->offload_end[i]);
  int s = i / L->nmb, mb = i % L->nmb;
  L->stash[i] = reload(L, r, L->stash[i], BE_T_STASH, s, mb);
  L->wstash[i] = reload(L, r, L->wstash[i], BE_T_WSTASH, s, mb);
}

/* The copies back of rank r that the simulator posted at or before time t. */
static void reload_due(lower *L, int r, double t) {
  while (L->reload_next[r] < L->reload_first[r + 1] && L->reloads[L->reload_next[r]].at <= t)
    reload_cell(L, r, L->reloads[L->reload_next[r]++].cell);
}

/* Post at the consumer the receive of what operation (kind, s, mb) will produce, when that
 * crosses ranks: act s for F, grad s for B and BW. */
static void post_receives(lower *L, ir_op_kind kind, int s, int mb) {
  int r = L->rank_of[s];
  if (kind == IR_OP_F && s + 1 < L->nst && L->rank_of[s + 1] != r) {
    int q = L->rank_of[s + 1];
    int v = new_buf(L, q, BE_T_ACT, s);
    emit(L, q, BE_OP_RECV, r, v, BE_T_ACT, s, mb, 0);
    L->must_wait[v] = true;
    L->act_in[s * L->nmb + mb] = v;
  } else if ((kind == IR_OP_B || kind == IR_OP_BW) && s > 0 && L->rank_of[s - 1] != r) {
    int q = L->rank_of[s - 1];
    int v = new_buf(L, q, BE_T_GRAD, s);
    emit(L, q, BE_OP_RECV, r, v, BE_T_GRAD, s, mb, 0);
    L->must_wait[v] = true;
    L->grad_in[s * L->nmb + mb] = v;
  }
}

/* Hand tensor 'buf' (kind t of stage s) to its consumer on rank q: by buffer on the same rank,
 * else by a send released when the consumer (at reference position 'due') has run. */
static void hand_over(lower *L, int r, int q, int buf, be_tensor_kind t, int s, int mb, long due,
                      int *slot_at_consumer) {
  if (q == r) {
    *slot_at_consumer = buf;
    return;
  }
  emit(L, r, BE_OP_SEND, q, buf, t, s, mb, 0);
  release x = {r, buf, due};
  VEC_PUSH(L->rel, L->nrel, L->rel_cap, x);
}

/* Emit operation o of stage s's rank at reference position 'now'. */
static void lower_op(lower *L, const ir_op *o, long now) {
  int s = o->stage, mb = o->mb, nmb = L->nmb, r = L->rank_of[s];
  int i = s * nmb + mb;
  bool offloads = L->s->stages[s].offload;
  double t = L->when[(i * 3 + (o->kind == IR_OP_F ? SL_F : o->kind == IR_OP_W ? SL_W : SL_B)) * 2];
  release_due(L, r, now);
  release_offloads(L, r, t);
  reload_due(L, r, t);
  post_receives(L, o->kind, s, mb);
  if (o->kind == IR_OP_F) {
    release_offloads(L, r, INFINITY); /* the copies out end before this F allocates */
    int in;
    if (s == 0) {
      in = new_buf(L, r, BE_T_INPUT, 0);
      emit(L, r, BE_OP_LOAD, 0, mb, in, 0, 0, 0);
    } else {
      in = L->act_in[(s - 1) * nmb + mb];
      wait_if_pending(L, r, in);
    }
    int out = new_buf(L, r, BE_T_ACT, s);
    int st = new_buf(L, r, BE_T_STASH, s), sw = new_buf(L, r, BE_T_WSTASH, s);
    L->stash[i] = st;
    L->wstash[i] = sw;
    add_pred(L, r, emit(L, r, BE_OP_FWD, s, mb, in, out, st, sw), s, mb, SL_F);
    if (offloads) {
      offload(L, r, st, BE_T_STASH, s, mb);
      offload(L, r, sw, BE_T_WSTASH, s, mb);
    }
    free_buf(L, r, in);
    if (s + 1 == L->nst) {
      int g = new_buf(L, r, BE_T_GRAD, L->nst);
      emit(L, r, BE_OP_LOSS, s, mb, out, g, 0, 0);
      free_buf(L, r, out);
      L->grad_in[L->nst * nmb + mb] = g;
    } else {
      hand_over(L, r, L->rank_of[s + 1], out, BE_T_ACT, s, mb, L->pos[((i + nmb) * 3) + SL_F],
                &L->act_in[i]);
    }
  } else if (o->kind == IR_OP_B || o->kind == IR_OP_BW) {
    int g = L->grad_in[(s + 1) * nmb + mb];
    wait_if_pending(L, r, g);
    if (offloads) { /* the copies back (posted here unless the simulator posted them earlier) */
      reload_cell(L, r, i);
      int back[2] = {L->stash[i], L->wstash[i]};
      for (int k = 0; k < 2; k++)
        if (back[k] >= 0) emit(L, r, BE_OP_WAIT, back[k], 0, 0, 0, 0, 0);
    }
    int dx = s > 0 ? new_buf(L, r, BE_T_GRAD, s) : -1;
    bool fused = o->kind == IR_OP_BW;
    int at = emit(L, r, fused ? BE_OP_BWD : BE_OP_BWD_IN, s, mb, g, L->stash[i], L->wstash[i], dx);
    add_pred(L, r, at, s, mb, SL_B);
    free_buf(L, r, g);
    free_buf(L, r, L->stash[i]);
    if (fused) free_buf(L, r, L->wstash[i]);
    if (s > 0)
      hand_over(L, r, L->rank_of[s - 1], dx, BE_T_GRAD, s, mb, L->pos[((i - nmb) * 3) + SL_B],
                &L->grad_in[i]);
  } else {
    add_pred(L, r, emit(L, r, BE_OP_BWD_W, s, mb, L->wstash[i], 0, 0, 0), s, mb, SL_W);
    free_buf(L, r, L->wstash[i]);
  }
}

/* The reference order: every operation of every device's schedule, merged so that each comes
 * after the operations it depends on (its device's earlier ones, F of the previous stage, B of
 * the next, the same microbatch's F before B before W), ordered by predicted start time among
 * those ready, ties by device. Writes the order into ord (device, index pairs) and each
 * operation's position into L->pos. Returns false when the schedules cannot all run (which the
 * simulator has excluded before). */
static bool reference_order(lower *L, const sim_result *res, int (*ord)[2]) {
  const ir_module *m = L->m;
  int nst = L->nst, nmb = L->nmb, nd = m->ndevices;
  double *start = xmalloc((size_t)nst * nmb * 3 * sizeof *start);
  for (long k = 0; k < (long)nst * nmb * 3; k++) start[k] = 0;
  for (int e = 0; e < res->nops; e++) {
    const sim_op_event *ev = &res->ops[e];
    if ((int)ev->kind >= IR_OP_COUNT || ev->stage < 0) continue;
    int sl = ev->kind == IR_OP_F ? SL_F : ev->kind == IR_OP_W ? SL_W : SL_B;
    start[((long)ev->stage * nmb + ev->mb) * 3 + sl] = ev->start;
  }
  bool *done = xcalloc((size_t)nst * nmb * 3, sizeof *done);
  int *next = xcalloc((size_t)nd, sizeof *next);
  long total = 0, n = 0;
  for (int dv = 0; dv < nd; dv++) total += m->schedules[dv].nops;
  bool ok = true;
  while (n < total) {
    int best = -1;
    double best_t = 0;
    for (int dv = 0; dv < nd; dv++) {
      if (next[dv] >= m->schedules[dv].nops) continue;
      const ir_op *o = &m->schedules[dv].ops[next[dv]];
      long i = (long)o->stage * nmb + o->mb;
      bool ready;
      if (o->kind == IR_OP_F)
        ready = o->stage == 0 || done[(i - nmb) * 3 + SL_F];
      else if (o->kind == IR_OP_W)
        ready = done[i * 3 + SL_B];
      else
        ready = done[i * 3 + SL_F] && (o->stage + 1 == nst || done[(i + nmb) * 3 + SL_B]);
      int sl = o->kind == IR_OP_F ? SL_F : o->kind == IR_OP_W ? SL_W : SL_B;
      if (ready && (best < 0 || start[i * 3 + sl] < best_t)) {
        best = dv;
        best_t = start[i * 3 + sl];
      }
    }
    if (best < 0) {
      ok = false;
      break;
    }
    const ir_op *o = &m->schedules[best].ops[next[best]];
    long i = (long)o->stage * nmb + o->mb;
    int sl = o->kind == IR_OP_F ? SL_F : o->kind == IR_OP_W ? SL_W : SL_B;
    done[i * 3 + sl] = true;
    if (o->kind == IR_OP_BW) done[i * 3 + SL_W] = true;
    L->pos[i * 3 + sl] = n;
    if (o->kind == IR_OP_BW) L->pos[i * 3 + SL_W] = n;
    ord[n][0] = best;
    ord[n][1] = next[best]++;
    n++;
  }
  free(start);
  free(done);
  free(next);
  return ok;
}

/* A tensor's life on its rank: from the instruction that defines it to its FREE, and its place. */
typedef struct life {
  int buf;         /* vbuf id */
  uint64_t bytes;  /* its size */
  int def, kill;   /* addresses */
  uint64_t offset; /* where it was placed in the arena */
} life;


/* An address range of the arena taken by a placed tensor. */
typedef struct range {
  uint64_t lo, hi; /* [lo, hi) */
} range;

static int by_lo(const void *x, const void *y) {
  const range *a = x, *b = y;
  return (a->lo > b->lo) - (a->lo < b->lo);
}

/* Orders in which first fit may place a rank's tensors. */
typedef enum fit_order { FIT_SIZE, FIT_START, FIT_LENGTH, FIT_COUNT } fit_order;
/* Ranks with more tensors than this try two placements instead of six. */
enum { FIT_ALL_MAX = 4000 };
static fit_order fit_by;

/* Tensors in placement order: larger first (FIT_SIZE), earlier first (FIT_START) or longer-lived
 * first (FIT_LENGTH), ties by size, then program order. */
static int fit_cmp(const void *x, const void *y) {
  const life *a = x, *b = y;
  if (fit_by == FIT_START && a->def != b->def) return a->def < b->def ? -1 : 1;
  if (fit_by == FIT_LENGTH && a->kill - a->def != b->kill - b->def)
    return a->kill - a->def > b->kill - b->def ? -1 : 1;
  if (a->bytes != b->bytes) return a->bytes < b->bytes ? 1 : -1;
  return (a->def > b->def) - (a->def < b->def);
}

/* Time blocks of a rank's program, each listing the placed tensors whose lives touch it, so that
 * finding the tensors live at the same time as another looks only at its blocks. */
typedef struct blocks {
  int span;        /* instructions per block */
  int n;           /* blocks */
  int **items;     /* per block: indices into the lives array */
  int *count, *cap;
  int *stamp;      /* per life: the last query that saw it (dedup across blocks) */
  int query;       /* current query number */
} blocks;

static void blocks_init(blocks *bl, int ncode, int nlives) {
  bl->n = 256;
  bl->span = ncode / bl->n + 1;
  bl->items = xcalloc((size_t)bl->n, sizeof *bl->items);
  bl->count = xcalloc((size_t)bl->n, sizeof *bl->count);
  bl->cap = xcalloc((size_t)bl->n, sizeof *bl->cap);
  bl->stamp = xcalloc((size_t)(nlives ? nlives : 1), sizeof *bl->stamp);
  bl->query = 0;
}

static void blocks_clear(blocks *bl, int nlives) {
  for (int b = 0; b < bl->n; b++) bl->count[b] = 0;
  for (int i = 0; i < nlives; i++) bl->stamp[i] = 0;
  bl->query = 0;
}

static void blocks_free(blocks *bl) {
  for (int b = 0; b < bl->n; b++) free(bl->items[b]);
  free(bl->items);
  free(bl->count);
  free(bl->cap);
  free(bl->stamp);
}

/* Address space a tensor takes: its size, but at least one byte, so that empty tensors live at
 * the same time get different slots. */
static uint64_t room(const life *x) { return x->bytes ? x->bytes : 1; }

/* Place lives[0..n) in the order they are in, each where no earlier one live at the same time
 * is: at the lowest such address (first fit), or in the smallest gap that holds it, else at the
 * top (best fit). Returns the arena size. 'busy' has room for n ranges; bl is cleared. */
static uint64_t fit(life *lives, int n, range *busy, bool best, blocks *bl) {
  uint64_t top = 0;
  blocks_clear(bl, n);
  for (int i = 0; i < n; i++) {
    life *x = &lives[i];
    int nb = 0, b0 = x->def / bl->span, b1 = x->kill / bl->span;
    bl->query++;
    for (int b = b0; b <= b1; b++)
      for (int k = 0; k < bl->count[b]; k++) {
        int j = bl->items[b][k];
        if (bl->stamp[j] == bl->query) continue;
        bl->stamp[j] = bl->query;
        if (lives[j].def <= x->kill && x->def <= lives[j].kill)
          busy[nb++] = (range){lives[j].offset, lives[j].offset + room(&lives[j])};
      }
    if (nb) qsort(busy, (size_t)nb, sizeof *busy, by_lo);
    uint64_t end = 0, gap = 0, at = 0;
    bool found = false;
    for (int k = 0; k <= nb; k++) {
      uint64_t lo = k < nb ? busy[k].lo : UINT64_MAX; /* the gap [end, lo) */
      if (lo >= end && lo - end >= room(x) && (!found || lo - end < gap)) {
        gap = lo - end;
        at = end;
        found = true;
        if (!best) break;
      }
      if (k < nb && busy[k].hi > end) end = busy[k].hi;
    }
    x->offset = at;
    if (at + x->bytes > top) top = at + x->bytes;
    for (int b = b0; b <= b1; b++) VEC_PUSH(bl->items[b], bl->count[b], bl->cap[b], i);
  }
  return top;
}

/* Give each tensor of a rank an address in the rank's buffer arena, then slots: first fit or best
 * fit (the classic offline heuristics for dynamic storage allocation) with the tensors in one of
 * the fit_order orders (six combinations, two on large ranks), and the smallest arena wins;
 * tensors at the same address with the same size and kind share a slot, numbered in the order
 * the program first uses them. Operands are rewritten from tensor ids to slot numbers. Time:
 * tensors x the tensors live at the same time, per combination. */
static void assign_slots(lower *L) {
  for (int r = 0; r < L->s->nranks; r++) {
    be_program *p = &L->s->ranks[r];
    life *lives = NULL;
    int nlives = 0, lives_cap = 0;
    int *life_of = xmalloc((size_t)(L->nbufs ? L->nbufs : 1) * sizeof *life_of);
    for (int pc = 0; pc < p->ncode; pc++) {
      const be_inst *in = &p->code[pc];
      const be_op_info *oi = &be_ops[in->op];
      for (int k = 0; k < oi->nops; k++) {
        const be_operand_info *ki = &be_operands[oi->kinds[k]];
        if (!ki->slot || in->a[k] < 0) continue;
        int b = in->a[k];
        if (ki->role == BE_ROLE_DEF || ki->role == BE_ROLE_RECV) {
          life l = {b, L->bufs[b].bytes, pc, p->ncode, 0};
          life_of[b] = nlives;
          VEC_PUSH(lives, nlives, lives_cap, l);
        } else if (ki->role == BE_ROLE_KILL) {
          lives[life_of[b]].kill = pc;
        }
      }
    }
    range *busy = xmalloc((size_t)(nlives ? nlives : 1) * sizeof *busy);
    blocks bl;
    blocks_init(&bl, p->ncode, nlives);
    /* Every combination of order and fit on ranks of up to FIT_ALL_MAX tensors; on larger ones
     * only the two that win most often (bench/stream_speed), to bound the time. */
    int ntries = nlives <= FIT_ALL_MAX ? 2 * FIT_COUNT : 2, choice = 0;
    uint64_t least = UINT64_MAX;
    for (int c = 0; c < ntries && nlives; c++) {
      fit_by = (fit_order)(c % FIT_COUNT);
      qsort(lives, (size_t)nlives, sizeof *lives, fit_cmp);
      uint64_t top = fit(lives, nlives, busy, c >= FIT_COUNT, &bl);
      if (top < least) least = top, choice = c;
    }
    if (nlives && choice != ntries - 1) { /* the last try's placement is still in lives */
      fit_by = (fit_order)(choice % FIT_COUNT);
      qsort(lives, (size_t)nlives, sizeof *lives, fit_cmp);
      fit(lives, nlives, busy, choice >= FIT_COUNT, &bl);
    }
    blocks_free(&bl);
    be_slot *slots = NULL;
    int nslots = 0, slots_cap = 0;
    for (int i = 0; i < nlives; i++) {
      const life *x = &lives[i];
      vbuf *b = &L->bufs[x->buf];
      for (int c = 0; c < nslots && b->slot < 0; c++)
        if (slots[c].offset == x->offset && slots[c].bytes == x->bytes &&
            slots[c].tensor == b->tensor)
          b->slot = c;
      if (b->slot < 0) {
        be_slot ns = {x->offset, x->bytes, b->tensor};
        VEC_PUSH(slots, nslots, slots_cap, ns);
        b->slot = nslots - 1;
      }
    }
    /* Slots are numbered in the order the program first uses them. */
    int *number = xmalloc((size_t)(nslots ? nslots : 1) * sizeof *number);
    for (int c = 0; c < nslots; c++) number[c] = -1;
    be_slot *ordered = xmalloc((size_t)(nslots ? nslots : 1) * sizeof *ordered);
    int used = 0;
    for (int pc = 0; pc < p->ncode; pc++) {
      be_inst *in = &p->code[pc];
      const be_op_info *oi = &be_ops[in->op];
      for (int k = 0; k < oi->nops; k++) {
        if (!be_operands[oi->kinds[k]].slot || in->a[k] < 0) continue;
        int c = L->bufs[in->a[k]].slot;
        if (number[c] < 0) {
          number[c] = used;
          ordered[used++] = slots[c];
        }
        in->a[k] = number[c];
      }
    }
    free(slots);
    slots = ordered;
    free(number);
    free(busy);
    free(lives);
    free(life_of);
    p->slots = slots;
    p->nslots = nslots;
  }
}

/* Add shape (elem, dims) to the stream unless present; returns its index. */
static int add_shape(be_stream *s, int elem, int ndim, const int64_t *dim) {
  for (int i = 0; i < s->nshapes; i++) {
    const be_shape *h = &s->shapes[i];
    if (h->elem == elem && h->ndim == ndim && memcmp(h->dim, dim, ndim * sizeof *dim) == 0)
      return i;
  }
  s->shapes = xrealloc(s->shapes, (size_t)(s->nshapes + 1) * sizeof *s->shapes);
  be_shape h = {elem, ndim, {0, 0, 0, 0}};
  memcpy(h.dim, dim, ndim * sizeof *dim);
  s->shapes[s->nshapes] = h;
  return s->nshapes++;
}

/* Fill the stream's header, layer, stage, rank and shape tables from m, and L's per-stage sizes.
 * Ranks are the devices that hold stages, in device order. The prediction's figures (pred_step,
 * pred_busy, pred_peak, pred) are be_lower's. */
static void build_tables(lower *L) {
  const ir_module *m = L->m;
  be_stream *s = L->s;
  s->model = xstrdup(m->name);
  s->replicas = (int32_t)ir_field_value(&m->train, IR_F_TRAIN_data);
  s->nstages = L->nst;
  s->nmb = L->nmb;
  double mbs = ir_field_value(&m->train, IR_F_TRAIN_micro_batch);
  double seq = ir_field_value(&m->train, IR_F_TRAIN_seq);
  s->micro_batch = (int32_t)(mbs >= 1 ? mbs : 1);
  s->seq = (int32_t)(seq >= 1 ? seq : 1);
  s->dtype = xstrdup(ir_enum_name(IR_T_DTYPE, (int)ir_field_value(&m->train, IR_F_TRAIN_dtype)));
  s->optimizer = xstrdup(
      ir_enum_name(IR_T_OPTIMIZER, (int)ir_field_value(&m->train, IR_F_TRAIN_optimizer)));
  s->dropout = ir_field_value(&m->train, IR_F_TRAIN_dropout) != 0;
  double scale = ir_field_value(&m->train, IR_F_TRAIN_scale);
  s->scale = (int32_t)(scale >= 0 && scale <= INT32_MAX ? scale : 0);
  const char *on =
      ir_enum_name(IR_T_BACKEND, (int)ir_field_value(&m->train, IR_F_TRAIN_measured_on));
  s->measured_on = xstrdup(on ? on : ir_enum_name(IR_T_BACKEND, IR_BACKEND_NONE));
  s->nlayers = m->nlayers;
  s->layers = xcalloc((size_t)m->nlayers, sizeof *s->layers);
  for (int i = 0; i < m->nlayers; i++) {
    const ir_layer *l = &m->layers[i];
    be_layer *bl = &s->layers[i];
    bl->name = xstrdup(l->name);
    bl->kind = xstrdup(ir_kinds[l->kind].name);
    int first = ir_kind_first_param(l->kind), np = ir_kind_nparams(l->kind);
    bl->params = xcalloc((size_t)(np ? np : 1), sizeof *bl->params);
    for (int k = first; k < first + np; k++) {
      if (isnan(l->p[k])) continue;
      bl->params[bl->nparams].name = xstrdup(ir_layer_params[k].name);
      bl->params[bl->nparams++].value = l->p[k];
    }
  }
  /* Ranks: devices with stages. */
  int *rank_of_dev = xmalloc((size_t)m->ndevices * sizeof *rank_of_dev);
  for (int dv = 0; dv < m->ndevices; dv++) rank_of_dev[dv] = -1;
  for (int st = 0; st < m->nstages; st++) rank_of_dev[m->stages[st].device] = 0;
  for (int dv = 0; dv < m->ndevices; dv++)
    if (rank_of_dev[dv] == 0) rank_of_dev[dv] = s->nranks++;
  s->ranks = xcalloc((size_t)s->nranks, sizeof *s->ranks);
  for (int dv = 0; dv < m->ndevices; dv++) {
    if (rank_of_dev[dv] < 0) continue;
    be_program *p = &s->ranks[rank_of_dev[dv]];
    p->device = dv;
    p->type = xstrdup(m->devices[dv].type);
    p->node = (int32_t)ir_field_value(&m->devices[dv].rec, IR_F_DEVICE_node);
  }
  int elem = (int)cost_act_elem_bytes(m);
  s->stages = xcalloc((size_t)L->nst, sizeof *s->stages);
  for (int st = 0; st < L->nst; st++) {
    const ir_stage *is = &m->stages[st];
    be_stage *bs = &s->stages[st];
    bs->first = is->first;
    bs->end = is->end;
    bs->rank = L->rank_of[st] = rank_of_dev[is->device];
    /* What F keeps: the stage's activations on its device's type, as the simulator counts them,
     * split into the part B frees and the part W frees. The state a recomputing stage's B
     * rebuilds (ir_stage_layer_rebuild, in the simulator's peak) gets no buffer: the runtime
     * keeps it in the model's own blocks. */
    double stash = 0, wstash = 0;
    for (int i = is->first; i < is->end; i++) {
      ir_cost c = ir_stage_layer_cost(m, is, i); /* a recomputing stage keeps layer inputs */
      stash += c.act - c.act_w;
      wstash += c.act_w;
    }
    bs->recompute = is->recompute == IR_RECOMPUTE_FULL;
    bs->recompute_layers = bs->recompute ? is->recompute_layers : 0; /* the first N (0: all) */
    bs->offload = is->offload;
    bs->stash_bytes = (uint64_t)llround(stash);
    bs->wstash_bytes = (uint64_t)llround(wstash);
    /* The output's size as the simulator sends it: the last layer's, on the first device
     * type; a shape [micro_batch, seq, width] when the bytes divide evenly. */
    double out = m->layers[is->end - 1].cost.out;
    bs->out_bytes = (uint64_t)llround(out);
    double width = out / ((double)s->micro_batch * s->seq * elem);
    bs->out_shape = -1;
    if (out > 0 && width == floor(width) && width < 1e15) {
      int64_t d[3] = {s->micro_batch, s->seq, (int64_t)width};
      bs->out_shape = add_shape(s, elem, 3, d);
    }
  }
  free(rank_of_dev);
}

/* Whether every layer has the cost fields the sizes need; else report the first that lacks them. */
static bool costs_complete(const ir_module *m, diag_engine *d, diag_loc where) {
  static const int need[] = {IR_F_COST_act, IR_F_COST_act_w, IR_F_COST_out};
  for (int st = 0; st < m->nstages; st++)
    for (int i = m->stages[st].first; i < m->stages[st].end; i++)
      for (size_t k = 0; k < sizeof need / sizeof *need; k++) {
        const ir_cost *c = ir_layer_cost_on(m, &m->layers[i], m->stages[st].device);
        if (!ir_field_is_set(c, need[k]) || !(ir_field_get(c, need[k]) >= 0)) {
          diag_error(d, m->layers[i].loc.line ? ir_diag_loc(m->layers[i].loc) : where,
                     "cannot lower @%s: layer %%%d has no '%s' in its cost record (run the cost "
                     "pass)", m->name, i, ir_fields[need[k]].name);
          return false;
        }
      }
  return true;
}

/* Warn about each rank of stream s (lowered from m) whose device's memory limit the simulator's
 * peak fits in but the peak with the rest of its buffer arena does not: the buffers of the
 * messages (a stage's input, output and gradient; an LM head's logits and their gradient),
 * which the simulator does not count and the runtime allocates (octo-run's predicted memory). */
static void warn_message_buffers(const ir_module *m, const be_stream *s, diag_engine *d,
                                 diag_loc where) {
  for (int r = 0; r < s->nranks; r++) {
    int dv = s->ranks[r].device;
    double lim = ir_device_mem_limit(m, dv), peak = s->ranks[r].pred_peak;
    be_mem bm = be_mem_stats(s, r);
    if (!(peak <= lim && bm.need > lim)) continue;
    strbuf t[4] = {{0}};
    double v[4] = {bm.need, lim, peak, bm.need - peak};
    for (int k = 0; k < 4; k++) be_put_bytes(&t[k], v[k]);
    diag_loc at = m->devices[dv].loc.line ? ir_diag_loc(m->devices[dv].loc) : where;
    diag_warning(d, at, "$d%d (rank %d) needs %s with the buffers of its messages, more than its "
                 "memory limit of %s: the simulator's peak %s does not count the %s of stage "
                 "inputs, outputs and gradients its buffer arena holds besides the saved "
                 "activations", dv, r, strbuf_cstr(&t[0]), strbuf_cstr(&t[1]),
                 strbuf_cstr(&t[2]), strbuf_cstr(&t[3]));
    for (int k = 0; k < 4; k++) strbuf_free(&t[k]);
  }
}

be_stream *be_lower(const ir_module *m, diag_engine *d, diag_loc where) {
  if (m->nstages == 0 || !m->schedules) {
    diag_error(d, where, "cannot lower @%s: it has no %s (run partition, place and schedule "
               "passes)", m->name, m->nstages == 0 ? "stages" : "schedule");
    return NULL;
  }
  if (!costs_complete(m, d, where)) return NULL;
  sim_model *p = sim_model_build(m, d);
  if (!p) return NULL;
  sim_opts so = {.record = true};
  sim_result res = {0};
  if (sim_run(p, m, &so, &res) != SIM_OK) {
    sim_report_failure(&res, d, where);
    sim_result_free(&res);
    sim_model_free(p);
    return NULL;
  }
  lower L = {0};
  L.m = m;
  L.nst = m->nstages;
  L.nmb = (int)ir_field_value(&m->train, IR_F_TRAIN_microbatches);
  long cells = (long)L.nst * L.nmb;
  L.s = xcalloc(1, sizeof *L.s);
  L.rank_of = xcalloc((size_t)L.nst, sizeof *L.rank_of);
  L.act_in = xcalloc((size_t)cells, sizeof *L.act_in);
  L.grad_in = xcalloc((size_t)(cells + L.nmb), sizeof *L.grad_in);
  L.stash = xcalloc((size_t)cells, sizeof *L.stash);
  L.wstash = xcalloc((size_t)cells, sizeof *L.wstash);
  L.pos = xcalloc((size_t)cells * 3, sizeof *L.pos);
  L.when = xcalloc((size_t)cells * 3 * 2, sizeof *L.when);
  for (int e = 0; e < res.nops; e++) {
    const sim_op_event *ev = &res.ops[e];
    if ((int)ev->kind >= IR_OP_COUNT || ev->stage < 0) continue;
    int sl = ev->kind == IR_OP_F ? SL_F : ev->kind == IR_OP_W ? SL_W : SL_B;
    double *w = &L.when[(((long)ev->stage * L.nmb + ev->mb) * 3 + sl) * 2];
    w[0] = ev->start;
    w[1] = ev->end;
  }
  build_tables(&L);
  /* the simulator's copies back, per rank in the order it posted them */
  int nr = L.s->nranks;
  L.reloaded = xcalloc((size_t)(cells ? cells : 1), sizeof *L.reloaded);
  L.offload_end = xcalloc((size_t)(cells ? cells : 1), sizeof *L.offload_end);
  for (int e = 0; e < res.nops; e++)
    if ((int)res.ops[e].kind == SIM_OP_OFFLOAD && res.ops[e].stage >= 0)
      L.offload_end[res.ops[e].stage * L.nmb + res.ops[e].mb] = res.ops[e].end;
  L.reloads = xmalloc((size_t)(cells ? cells : 1) * sizeof *L.reloads);
  L.reload_first = xcalloc((size_t)nr + 1, sizeof *L.reload_first);
  L.reload_next = xcalloc((size_t)(nr ? nr : 1), sizeof *L.reload_next);
  for (int e = 0; e < res.nops; e++)
    if ((int)res.ops[e].kind == SIM_OP_RELOAD && res.ops[e].stage >= 0)
      L.reload_first[L.rank_of[res.ops[e].stage] + 1]++;
  for (int r = 0; r < nr; r++) {
    L.reload_first[r + 1] += L.reload_first[r];
    L.reload_next[r] = L.reload_first[r];
  }
  for (int e = 0; e < res.nops; e++) {
    const sim_op_event *ev = &res.ops[e];
    if ((int)ev->kind != SIM_OP_RELOAD || ev->stage < 0) continue;
    int r = L.rank_of[ev->stage];
    L.reloads[L.reload_next[r]++] = (reload_ev){ev->start, ev->stage * L.nmb + ev->mb};
  }
  for (int r = 0; r < nr; r++) {
    L.reload_next[r] = L.reload_first[r];
    qsort(L.reloads + L.reload_first[r], (size_t)(L.reload_first[r + 1] - L.reload_first[r]),
          sizeof *L.reloads, reload_cmp);
  }
  L.pred_cap = xcalloc((size_t)(L.s->nranks ? L.s->nranks : 1), sizeof *L.pred_cap);
  L.s->pred_step = res.makespan;
  for (int r = 0; r < L.s->nranks; r++) {
    const sim_device_stats *ds = &res.dev[L.s->ranks[r].device];
    L.s->ranks[r].pred_busy = ds->busy;
    L.s->ranks[r].pred_peak = ds->peak_mem;
  }
  long total = 0;
  for (int dv = 0; dv < m->ndevices; dv++) total += m->schedules[dv].nops;
  int(*ord)[2] = xmalloc((size_t)(total ? total : 1) * sizeof *ord);
  be_stream *out = NULL;
  if (!reference_order(&L, &res, ord)) {
    diag_error(d, where, "internal compiler error: no order of @%s's operations respects their "
               "dependencies, although the simulator ran the plan", m->name);
  } else {
    for (long n = 0; n < total; n++) lower_op(&L, &m->schedules[ord[n][0]].ops[ord[n][1]], n);
    /* the end of the step: the all-reduces, then the tied matrix's exchange (between the
     * replica-reduced copies, so that both stay equal), then the optimizer */
    int emb, head, te = -1, th = -1;
    if (be_stream_tie(L.s, &emb, &head)) {
      te = be_stage_of_layer(L.s, emb);
      th = be_stage_of_layer(L.s, head);
    }
    for (int r = 0; r < L.s->nranks; r++) {
      release_due(&L, r, -1);
      release_offloads(&L, r, INFINITY);
      for (int st = 0; st < L.nst && L.s->replicas > 1; st++)
        if (L.rank_of[st] == r) emit(&L, r, BE_OP_ALLREDUCE, st, 0, 0, 0, 0, 0);
      if (te >= 0 && L.rank_of[te] == r) emit(&L, r, BE_OP_TIE, te, th, 0, 0, 0, 0);
      else if (th >= 0 && L.rank_of[th] == r) emit(&L, r, BE_OP_TIE, th, te, 0, 0, 0, 0);
      emit(&L, r, BE_OP_STEP, 0, 0, 0, 0, 0, 0);
    }
    assign_slots(&L);
    strbuf why = {0};
    if (be_validate(L.s, &why) != 0 || be_check(L.s, &why) != 0) {
      diag_error(d, where, "internal compiler error: the instruction stream lowered from @%s is "
                 "invalid: %s", m->name, strbuf_cstr(&why));
    } else {
      out = L.s;
      L.s = NULL;
      warn_message_buffers(m, out, d, where);
    }
    strbuf_free(&why);
  }
  free(ord);
  be_stream_free(L.s);
  free(L.rank_of);
  free(L.bufs);
  free(L.must_wait);
  free(L.act_in);
  free(L.grad_in);
  free(L.stash);
  free(L.wstash);
  free(L.pos);
  free(L.when);
  free(L.pred_cap);
  free(L.rel);
  free(L.off);
  free(L.reloaded);
  free(L.offload_end);
  free(L.reloads);
  free(L.reload_first);
  free(L.reload_next);
  sim_result_free(&res);
  sim_model_free(p);
  return out;
}
