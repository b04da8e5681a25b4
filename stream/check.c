/* check.c -- be_check: the deadlock checker. Runs every rank's program abstractly with the
 * blocking semantics of NCCL point-to-point operations (docs/isa.md, "Execution model"): each
 * rank's consecutive SEND/RECV instructions form a group, groups queue in posting order, a send
 * and a receive complete together when both are in their rank's front group and are the next
 * unmatched messages of their direction between the two ranks, and a WAIT blocks until its
 * message completed. Host copies (OFFLOAD, RELOAD) involve no other rank: their WAIT never
 * blocks. It proves that every rank reaches its end, or explains why not. A TIE
 * passes: the validator placed it after the rank's every message, so no rank waits on one in
 * TIE, and its twin is reached when every rank is. */
#include <stdlib.h>
#include <string.h>

#include "stream.h"

/* A posted send or receive. */
typedef struct msg {
  int rank, addr;     /* poster and the address of its SEND/RECV */
  int peer;           /* the other rank */
  bool send;          /* send (else receive) */
  int tensor, stage, mb; /* tag */
  long seq;           /* number among the messages of its direction between the two ranks */
  int group;          /* group number on its rank */
  bool done;          /* completed */
} msg;

/* slot_msg's mark of a slot with a pending host copy (OFFLOAD, RELOAD): no message, nothing
 * another rank does; its WAIT always passes. */
enum { CHECK_COPY = -2 };

/* Execution state of one rank. */
typedef struct rstate {
  int pc;          /* next instruction */
  bool finished;   /* ran past its last instruction */
  int *slot_msg;   /* per slot: the pending message posted on it, -1 when none, CHECK_COPY
                      for a pending host copy */
  int *posted;     /* its messages in posting order (indices into msgs) */
  int nposted, posted_cap;
  int head;        /* first of 'posted' not done */
  int groups;      /* groups started */
  bool in_group;   /* its previous instruction was a SEND or RECV */
} rstate;

/* Open-addressing map from 64-bit keys to longs. */
typedef struct kmap {
  uint64_t *keys;
  long *vals;
  size_t cap, n;
} kmap;

static uint64_t mix(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  return k;
}

/* Slot of key k (k != 0): where it is, or the empty slot where it would go. */
static size_t kmap_find(const kmap *h, uint64_t k) {
  size_t i = mix(k) & (h->cap - 1);
  while (h->keys[i] && h->keys[i] != k) i = (i + 1) & (h->cap - 1);
  return i;
}

static long *kmap_at(kmap *h, uint64_t k, long def) {
  if (2 * (h->n + 1) > h->cap) {
    kmap old = *h;
    h->cap = old.cap ? 2 * old.cap : 64;
    h->keys = xcalloc(h->cap, sizeof *h->keys);
    h->vals = xcalloc(h->cap, sizeof *h->vals);
    h->n = 0;
    for (size_t i = 0; i < old.cap; i++)
      if (old.keys[i]) {
        size_t j = kmap_find(h, old.keys[i]);
        h->keys[j] = old.keys[i];
        h->vals[j] = old.vals[i];
        h->n++;
      }
    free(old.keys);
    free(old.vals);
  }
  size_t i = kmap_find(h, k);
  if (!h->keys[i]) {
    h->keys[i] = k;
    h->vals[i] = def;
    h->n++;
  }
  return &h->vals[i];
}

static long kmap_get(const kmap *h, uint64_t k, long def) {
  if (!h->cap) return def;
  size_t i = kmap_find(h, k);
  return h->keys[i] ? h->vals[i] : def;
}

/* Key of the sends (or receives) from rank 'from' to rank 'to' (seq -1), or of the seq-th of
 * them: distinct for distinct arguments and never 0. Pre: ranks < 65536, -1 <= seq < 2^31 - 1. */
static uint64_t dir_key(int from, int to, bool send, long seq) {
  return (uint64_t)(uint16_t)from << 48 | (uint64_t)(uint16_t)to << 32 | (uint64_t)send << 31 |
         (uint64_t)(seq + 1);
}

typedef struct checker {
  const be_stream *s;
  rstate *rs;
  msg *msgs;
  int nmsgs, msgs_cap;
  kmap counts;  /* (from, to, send) -> messages posted so far in that direction */
  kmap by_seq;  /* (from, to, send, seq) -> message index */
} checker;

/* "send act s3 mb7 -> rank 4" or "recv grad s2 mb1 <- rank 3": the instruction that posted m. */
static void describe(strbuf *sb, const checker *c, const msg *m) {
  be_msg_text(sb, &c->s->ranks[m->rank].code[m->addr]);
}

/* "rank R at ADDR (OP %S)" for rank r's current instruction. */
static void where(strbuf *sb, const checker *c, int r) {
  const be_program *p = &c->s->ranks[r];
  int pc = c->rs[r].pc;
  strbuf_printf(sb, "rank %d at %04d (%s", r, pc, be_ops[p->code[pc].op].name);
  if (be_ops[p->code[pc].op].nops > 0) strbuf_printf(sb, " %%%d", p->code[pc].a[0]);
  strbuf_putc(sb, ')');
}

/* Post the SEND or RECV 'in' at address pc of rank r. */
static void post(checker *c, int r, int pc, const be_inst *in) {
  rstate *st = &c->rs[r];
  bool send = in->op == BE_OP_SEND;
  if (!st->in_group) st->groups++;
  st->in_group = true;
  int from = send ? r : in->a[0], to = send ? in->a[0] : r;
  long *cnt = kmap_at(&c->counts, dir_key(from, to, send, -1), 0);
  msg m = {r, pc, in->a[0], send, in->a[2], in->a[3], in->a[4], (*cnt)++, st->groups, false};
  VEC_PUSH(c->msgs, c->nmsgs, c->msgs_cap, m);
  *kmap_at(&c->by_seq, dir_key(from, to, send, m.seq), -1) = c->nmsgs - 1;
  VEC_PUSH(st->posted, st->nposted, st->posted_cap, c->nmsgs - 1);
  int slot = in->a[1];
  if (slot >= 0 && slot < c->s->ranks[r].nslots) st->slot_msg[slot] = c->nmsgs - 1;
}

/* Run rank r until it blocks or ends. Returns whether it moved; -1 with err filled when an
 * instruction is malformed for the checker (a WAIT without a pending message). */
static int run_rank(checker *c, int r, strbuf *err) {
  rstate *st = &c->rs[r];
  const be_program *p = &c->s->ranks[r];
  int moved = 0;
  while (st->pc < p->ncode) {
    const be_inst *in = &p->code[st->pc];
    if (in->op == BE_OP_SEND || in->op == BE_OP_RECV) {
      if (in->a[0] < 0 || in->a[0] >= c->s->nranks || c->s->nranks > 65536 ||
          c->nmsgs >= 0x7ffffffe) {
        where(err, c, r);
        strbuf_puts(err, ": peer out of range or too many messages for the checker");
        return -1;
      }
      post(c, r, st->pc, in);
    } else {
      st->in_group = false;
      if (be_ops[in->op].flags & BE_COPY) { /* a host copy: local, it completes by itself */
        int slot = in->a[0];
        if (slot >= 0 && slot < p->nslots) st->slot_msg[slot] = CHECK_COPY;
      } else if (in->op == BE_OP_WAIT) {
        int slot = in->a[0];
        int mi = slot >= 0 && slot < p->nslots ? st->slot_msg[slot] : -1;
        if (mi == -1) {
          where(err, c, r);
          strbuf_puts(err, ": WAIT on a buffer without a pending send, receive or host copy");
          return -1;
        }
        if (mi >= 0 && !c->msgs[mi].done) return moved;
        st->slot_msg[slot] = -1;
      }
    }
    st->pc++;
    moved = 1;
  }
  st->finished = true;
  return moved;
}

/* Group at the front of rank r's queue (0 when nothing is pending). */
static int front_group(checker *c, int r) {
  rstate *st = &c->rs[r];
  while (st->head < st->nposted && c->msgs[st->posted[st->head]].done) st->head++;
  return st->head < st->nposted ? c->msgs[st->posted[st->head]].group : 0;
}

/* The message paired with m (same direction and number on the peer), or -1 if not posted. */
static int partner(const checker *c, const msg *m) {
  int from = m->send ? m->rank : m->peer, to = m->send ? m->peer : m->rank;
  return (int)kmap_get(&c->by_seq, dir_key(from, to, !m->send, m->seq), -1);
}

/* Complete every pair of messages that can complete. Returns how many completed, or -1 with err
 * filled when two messages paired by order carry different tags. */
static int match(checker *c, strbuf *err) {
  int n = 0;
  for (int r = 0; r < c->s->nranks; r++) {
    int g = front_group(c, r);
    rstate *st = &c->rs[r];
    for (int k = st->head; k < st->nposted; k++) {
      msg *m = &c->msgs[st->posted[k]];
      if (m->group != g) break;
      if (m->done || !m->send) continue;
      int pi = partner(c, m);
      if (pi < 0) continue;
      msg *q = &c->msgs[pi];
      if (q->group != front_group(c, q->rank)) continue;
      if (q->tensor != m->tensor || q->stage != m->stage || q->mb != m->mb) {
        strbuf_printf(err, "message order mismatch between rank %d and rank %d: the send at "
                      "%04d on rank %d (", m->rank, m->peer, m->addr, m->rank);
        describe(err, c, m);
        strbuf_printf(err, ") would be paired with the receive at %04d on rank %d (", q->addr,
                      q->rank);
        describe(err, c, q);
        strbuf_puts(err, "): NCCL pairs the messages between two ranks in posting order");
        return -1;
      }
      m->done = q->done = true;
      n++;
    }
  }
  return n;
}

/* The rank that blocked rank r waits for, with the reason appended to sb; -1 when that rank
 * has finished (the reason says so). Pre: r is blocked at a WAIT. */
static int waits_for(checker *c, int r, strbuf *sb) {
  rstate *st = &c->rs[r];
  const be_inst *in = &c->s->ranks[r].code[st->pc];
  const msg *m = &c->msgs[st->slot_msg[in->a[0]]];
  where(sb, c, r);
  strbuf_puts(sb, " waits for ");
  describe(sb, c, m);
  const msg *b = m;
  if (m->group != front_group(c, r)) {
    b = &c->msgs[st->posted[st->head]];
    strbuf_puts(sb, ", queued behind ");
    describe(sb, c, b);
    strbuf_printf(sb, " posted at %04d", b->addr);
  }
  int pi = partner(c, b);
  int q = b->peer;
  if (pi < 0) {
    strbuf_printf(sb, c->rs[q].finished ? "; rank %d finished without posting the matching %s"
                                        : "; rank %d has not posted the matching %s",
                  q, b->send ? "receive" : "send");
    return c->rs[q].finished ? -1 : q;
  }
  strbuf_printf(sb, "; rank %d's matching %s at %04d is queued behind its earlier messages", q,
                b->send ? "receive" : "send", c->msgs[pi].addr);
  return q;
}

/* Explain the deadlock of the blocked ranks into err. */
static void explain(checker *c, strbuf *err) {
  int n = c->s->nranks, start = -1;
  for (int r = 0; r < n && start < 0; r++)
    if (!c->rs[r].finished) start = r;
  int *step = xmalloc((size_t)n * sizeof *step); /* order of visit along the chain, -1 unseen */
  int *chain = xmalloc((size_t)n * sizeof *chain);
  strbuf *why = xcalloc((size_t)n, sizeof *why);
  for (int r = 0; r < n; r++) step[r] = -1;
  int len = 0, r = start, cycle_from = -1;
  while (r >= 0) {
    if (step[r] >= 0) {
      cycle_from = step[r];
      break;
    }
    step[r] = len;
    chain[len++] = r;
    r = waits_for(c, r, &why[r]);
  }
  if (cycle_from >= 0) {
    strbuf_puts(err, "deadlock: ranks ");
    for (int i = cycle_from; i < len; i++) strbuf_printf(err, "%d -> ", chain[i]);
    strbuf_printf(err, "%d wait for each other in a cycle", chain[cycle_from]);
    for (int i = cycle_from; i < len; i++) strbuf_printf(err, "\n  %s", strbuf_cstr(&why[chain[i]]));
  } else {
    strbuf_printf(err, "deadlock: rank %d can never finish", start);
    for (int i = 0; i < len; i++) strbuf_printf(err, "\n  %s", strbuf_cstr(&why[chain[i]]));
  }
  for (int i = 0; i < n; i++) strbuf_free(&why[i]);
  free(why);
  free(step);
  free(chain);
}

int be_check(const be_stream *s, strbuf *err) {
  checker c = {0};
  c.s = s;
  c.rs = xcalloc((size_t)s->nranks, sizeof *c.rs);
  for (int r = 0; r < s->nranks; r++) {
    c.rs[r].slot_msg = xmalloc((size_t)(s->ranks[r].nslots + 1) * sizeof(int));
    for (int k = 0; k < s->ranks[r].nslots; k++) c.rs[r].slot_msg[k] = -1;
  }
  int rc = 0;
  for (;;) {
    int progress = 0;
    for (int r = 0; r < s->nranks && rc == 0; r++) {
      int mv = c.rs[r].finished ? 0 : run_rank(&c, r, err);
      if (mv < 0) rc = -1;
      progress += mv > 0;
    }
    int mt = rc == 0 ? match(&c, err) : 0;
    if (mt < 0) rc = -1;
    if (rc != 0) break;
    if (progress + mt == 0) break;
  }
  if (rc == 0) {
    for (int r = 0; r < s->nranks && rc == 0; r++)
      if (!c.rs[r].finished) rc = -1;
    if (rc != 0) explain(&c, err);
  }
  for (int r = 0; r < s->nranks; r++) {
    free(c.rs[r].slot_msg);
    free(c.rs[r].posted);
  }
  free(c.rs);
  free(c.msgs);
  free(c.counts.keys);
  free(c.counts.vals);
  free(c.by_seq.keys);
  free(c.by_seq.vals);
  return rc;
}
