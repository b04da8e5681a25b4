/* exec.c -- the interpreter: runs one rank's program of an instruction stream on a transport
 * (rt_exec_rank; every rank as a thread on the hub: rt_run_threads), with the model (model.c)
 * doing the arithmetic; its failures name the rank, the
 * instruction and what it waited for. Also the run's report (per-step time and loss, per-rank
 * busy and waiting time, the comparison with the sequential reference) and its trace. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels.h"
#include "runtime.h"

/* Record a failure of rank r at address pc into st (first one wins). */
static void failed_at(rt_rank_stats *st, const be_stream *s, int r, int pc, const char *what) {
  if (st->status != RT_OK) return;
  const be_inst *in = &s->ranks[r].code[pc];
  snprintf(st->err, sizeof st->err, "rank %d at %04d (%s): %s", r, pc, be_ops[in->op].name, what);
  st->status = RT_FAILED;
}

/* A collective or exchange at pc of rank r that ended with rc (rt_comm.wait's results) makes st
 * fail, with *what (what it was) and, for rc 2 and other errors, why; frees both. */
static void comm_failed(rt_rank_stats *st, const be_stream *s, int r, int pc, int rc,
                        strbuf *what, strbuf *why, double timeout) {
  if (rc == 1)
    strbuf_printf(what, " did not complete within %g s", timeout);
  else if (rc == 2)
    strbuf_printf(what, ": stopped because %s", strbuf_cstr(why));
  else if (rc != 0)
    strbuf_printf(what, ": %s", strbuf_cstr(why));
  if (rc != 0) failed_at(st, s, r, pc, strbuf_cstr(what));
  if (rc == 2) st->status = RT_ABORTED;
  strbuf_free(what);
  strbuf_free(why);
}

/* TIE between this rank's stage 'own' and stage 'twin' on rank peer: send own's copy of the
 * tied matrix's gradient, receive twin's into *buf (allocated on first use, the caller frees
 * it), each waited for at most timeout seconds, then add it to own's. Both ranks add the other's
 * copy to their own, so both hold the same sum (addition commutes), bit for bit. Returns 0 or
 * rt_comm.wait's results (err filled). */
static int tie_exchange(rt_model *m, int own, int twin, int peer, rt_comm *c, double timeout,
                        float **buf, strbuf *err) {
  size_t n;
  float *g = rt_model_tied_grad(m, own, &n);
  if (!*buf) { /* the workspace the plan does not count, as the scratch between layers */
    *buf = rt_dev_malloc((n ? n : 1) * sizeof **buf);
    rt_model_count(m, RT_MEM_WORKSPACE, (double)n * sizeof **buf);
  }
  rt_req rq[2] = {0};
  be_tensor_ref out = {BE_T_TIED, own, 0}, in = {BE_T_TIED, twin, 0};
  if (c->isend(c->ctx, peer, out, g, n * sizeof *g, &rq[0]) != 0 ||
      c->irecv(c->ctx, peer, in, *buf, n * sizeof **buf, &rq[1]) != 0) {
    strbuf_puts(err, "the transport refused the message");
    return 3;
  }
  for (int k = 0; k < 2; k++) {
    int rc = c->wait(c->ctx, &rq[k], timeout, err);
    if (rc != 0) return rc;
  }
  rt_model_tie_add(m, own, *buf);
  return 0;
}

/* OFFLOAD or RELOAD at pc of rank r (of the tensor its slot holds, be_operand_tensor) on the cpu
 * and mpi backends, synchronously: OFFLOAD copies buffer b (the tensor's rt_tensor_floats, none for
 * a STASH, whose runtime size is 0) into h; RELOAD copies h's copy back into b, the tensor's new
 * buffer, and moves the model's saved state there (a WSTASH: rt_model_move_state). A RELOAD
 * without a copy held, or host memory that cannot be allocated, makes st fail at the
 * instruction. */
static void host_copy(rt_host_store *h, rt_model *m, const be_stream *s, int r, int pc,
                      float *b, rt_rank_stats *st) {
  const be_inst *in = &s->ranks[r].code[pc];
  be_tensor_ref t;
  be_operand_tensor(s, in, 0, &t); /* the copy's slot: a validated stream names its tensor */
  int kind = t.kind, stage = t.stage, mb = t.mb;
  size_t bytes = rt_tensor_floats(m, t.kind, stage) * sizeof(float);
  rt_host_copy *c = rt_host_at(h, kind, stage, mb);
  strbuf what = {0};
  if (!c) {
    strbuf_puts(&what, "no host copy of ");
    be_tensor_text(&what, t);
    strbuf_puts(&what, ": its stage does not offload on this rank");
  } else if (in->op == BE_OP_OFFLOAD) {
    void *to = rt_host_keep(h, c, bytes);
    if (!to && bytes) {
      strbuf_printf(&what, "cannot allocate %zu bytes of host memory to offload ", bytes);
      be_tensor_text(&what, t);
    } else if (bytes) {
      memcpy(to, b, bytes);
    }
  } else if (!c->held) {
    strbuf_puts(&what, "reload of ");
    be_tensor_text(&what, t);
    strbuf_puts(&what, ", but host memory holds no copy of it (no OFFLOAD of it this step)");
  } else {
    if (c->bytes) memcpy(b, c->data, c->bytes < bytes ? c->bytes : bytes);
    rt_host_drop(h, c);
    if (kind == BE_T_WSTASH && b) rt_model_move_state(m, stage, mb, b);
  }
  if (what.len) failed_at(st, s, r, pc, strbuf_cstr(&what));
  strbuf_free(&what);
}

/* Whether a --dump write of m failed (at the instruction pc of rank r, which wrote it): then st
 * fails with RT_OUTPUT ("rank 0 at 0029 (BWD_W): --dump: cannot write ..."), which ends the run
 * with RT_STATUS_BAD_INPUT. */
static bool dump_failed(const rt_model *m, rt_rank_stats *st, const be_stream *s, int r, int pc) {
  const char *why = rt_model_dump_error(m);
  if (!why) return false;
  strbuf what = {0};
  strbuf_printf(&what, "--dump: %s", why);
  failed_at(st, s, r, pc, strbuf_cstr(&what));
  st->status = RT_OUTPUT;
  strbuf_free(&what);
  return true;
}

/* The names of the places a fault strikes (RT_FAULT_PLACES) and their opcodes. */
static const struct {
  const char *name;
  be_opcode op;
} fault_places[RT_PLACE_COUNT] = {
#define X(id, name, op) {name, op},
    RT_FAULT_PLACES(X)
#undef X
};

/* The option of each fault kind (RT_FAULT_KINDS), indexed by kind. */
static const char *const fault_options[] = {
    "",
#define X(id, opt) opt,
    RT_FAULT_KINDS(X)
#undef X
};

int rt_fault_parse(const char *text, rt_fault *f) {
  char *end;
  long r = strtol(text, &end, 10), q = 0;
  if (end == text || r < 0 || r > INT32_MAX || *text == '-' || *text == '+') return -1;
  if (*end == '/') {
    const char *t = end + 1;
    q = strtol(t, &end, 10);
    if (end == t || q < 0 || q > INT32_MAX || *t == '-' || *t == '+') return -1;
  }
  if (*end != ':' || !end[1]) return -1;
  const char *where = end + 1;
  f->rank = (int)r;
  f->replica = (int)q;
  f->addr = -1;
  f->place = -1;
  for (int i = 0; i < RT_PLACE_COUNT; i++)
    if (strcmp(where, fault_places[i].name) == 0) f->place = i;
  if (f->place >= 0) return 0;
  long a = strtol(where, &end, 10);
  if (end == where || *end || a < 0 || a > INT32_MAX || *where == '-' || *where == '+') return -1;
  f->addr = (int)a;
  return 0;
}

int rt_fault_resolve(const be_stream *s, rt_fault *f, strbuf *err) {
  if (f->kind == RT_FAULT_NONE) return 0;
  const char *opt = fault_options[f->kind];
  if (f->rank >= s->nranks) {
    if (s->nranks == 1)
      strbuf_printf(err, "--%s: the stream has no rank %d (only rank 0)", opt, f->rank);
    else
      strbuf_printf(err, "--%s: the stream has no rank %d (ranks 0 to %d)", opt, f->rank,
                    (int)s->nranks - 1);
    return -1;
  }
  if (f->replica >= s->replicas) {
    if (s->replicas == 1)
      strbuf_printf(err, "--%s: the stream has no replica %d (only replica 0)", opt, f->replica);
    else
      strbuf_printf(err, "--%s: the stream has no replica %d (replicas 0 to %d)", opt,
                    f->replica, (int)s->replicas - 1);
    return -1;
  }
  const be_program *p = &s->ranks[f->rank];
  if (f->place == RT_PLACE_END || f->place == RT_PLACE_SAVE) {
    f->addr = -1; /* no instruction: after the run (the mpi backend strikes it before
                     MPI_Finalize), or in the first save (the interpreter strikes it) */
  } else if (f->place >= 0 && fault_places[f->place].op == BE_OP_COUNT) {
    f->addr = 0; /* before any collective: on threads, before the first instruction */
    if (p->ncode == 0) {
      strbuf_printf(err, "--%s: rank %d has no instructions", opt, f->rank);
      return -1;
    }
  } else if (f->place >= 0) {
    for (int pc = 0; pc < p->ncode && f->addr < 0; pc++)
      if (p->code[pc].op == fault_places[f->place].op) f->addr = pc;
    if (f->addr < 0) {
      strbuf_printf(err, "--%s: rank %d has no %s instruction (%s)", opt, f->rank,
                    be_ops[fault_places[f->place].op].name, fault_places[f->place].name);
      return -1;
    }
  } else if (f->addr >= p->ncode) {
    strbuf_printf(err, "--%s: rank %d has no address %d (its program has %d instructions)", opt,
                  f->rank, f->addr, p->ncode);
    return -1;
  }
  return 0;
}

/* Strike o's fault on rank 'rank' at 'where' ("at 0003 (FWD)"): the transport kills or stops
 * the rank, st records it (RT_DIED). */
static void strike(const rt_run_opts *o, int rank, const char *where, rt_comm *c,
                   rt_rank_stats *st) {
  const rt_fault *f = &o->fault;
  snprintf(st->err, sizeof st->err, "rank %d %s %s as asked (--%s)", rank,
           f->kind == RT_FAULT_DIE ? "died" : "stopped", where, fault_options[f->kind]);
  st->status = RT_DIED;
  if (f->kind == RT_FAULT_DIE)
    c->die(c->ctx, st->err);
  else
    c->stop(c->ctx, st->err);
}

/* Inject o's fault when it strikes rank 'rank' of replica 'replica' at pc of the run's step
 * 'step' (0: its first); or, pc -1, in its first checkpoint's save (RT_PLACE_SAVE), 'step' then
 * the training step saved less one. Returns whether it struck. */
static bool inject(const be_stream *s, const rt_run_opts *o, int rank, int replica, int step,
                   int pc, rt_comm *c, rt_rank_stats *st) {
  const rt_fault *f = &o->fault;
  if (f->kind == RT_FAULT_NONE || rank != f->rank || replica != f->replica)
    return false;
  char where[96];
  if (pc < 0 && f->place == RT_PLACE_SAVE && st->saves == 0)
    snprintf(where, sizeof where, "in the checkpoint's save of step %d (before its barrier)",
             step + 1);
  else if (pc >= 0 && step == 0 && pc == f->addr)
    snprintf(where, sizeof where, "at %04d (%s)", pc, be_ops[s->ranks[rank].code[pc].op].name);
  else
    return false;
  strike(o, rank, where, c, st);
  return true;
}

void rt_rank_stats_free(rt_rank_stats *st) {
  free(st->step_s);
  free(st->loss);
  free(st->ref_loss);
  free(st->grad_diff);
  free(st->ev);
  free(st->timed);
  st->timed = NULL;
  st->step_s = st->loss = st->ref_loss = st->grad_diff = NULL;
  st->ev = NULL;
  st->nev = st->ev_cap = 0;
}

void rt_record(rt_rank_stats *st, const be_inst *in, int step, double t0, double t1) {
  bool staged = be_ops[in->op].nops > 1 && (be_ops[in->op].flags & BE_COMPUTE);
  rt_event e = {in->op, staged || in->op == BE_OP_ALLREDUCE || in->op == BE_OP_TIE ? in->a[0] : -1,
                staged ? in->a[1] : -1, step, t0, t1};
  VEC_PUSH(st->ev, st->nev, st->ev_cap, e);
}

void rt_rank_stats_init(rt_rank_stats *st, int rank, int replica, int steps) {
  memset(st, 0, sizeof *st);
  st->rank = rank;
  st->replica = replica;
  st->step_s = xcalloc((size_t)steps, sizeof *st->step_s);
  st->loss = xcalloc((size_t)steps, sizeof *st->loss);
  st->ref_loss = xcalloc((size_t)steps, sizeof *st->ref_loss);
  st->grad_diff = xcalloc((size_t)steps, sizeof *st->grad_diff);
}

int rt_exec_rank(const be_stream *s, int rank, int replica, const rt_opts *mo,
                 const rt_run_opts *o, rt_comm *c, rt_rank_stats *st) {
  int first = o->first_step, steps = (o->steps > 0 ? o->steps : 1) - first; /* this run's */
  rt_rank_stats_init(st, rank, replica, steps);
  strbuf err = {0};
  rt_model *m = rt_model_new(s, mo, &err);
  rt_opts ref_o = *mo;
  ref_o.dump = NULL;         /* the reference never dumps */
  ref_o.no_recompute = true; /* and keeps every activation: --check compares with it */
  if (m) ref_o.scale = rt_model_scale(m);
  rt_model *ref = o->check && m ? rt_model_new(s, &ref_o, &err) : NULL;
  bool ready = m && (!o->check || ref);
  if (ready) {
    st->scale = rt_model_scale(m);
    for (int i = 0; i < s->nstages; i++) {
      if (s->stages[i].rank == rank) rt_model_init_stage(m, i);
      if (ref) rt_model_init_stage(ref, i);
    }
    double t_load = support_seconds(); /* --init's or --resume's weights replace the initial */
    ready = rt_ckpt_load(m, o, &err) == 0;
    st->load_s = support_seconds() - t_load;
    ready = ready && (!ref || rt_ckpt_load(ref, o, &err) == 0);
  }
  if (!ready) {
    snprintf(st->err, sizeof st->err, "rank %d: %s", rank, strbuf_cstr(&err));
    st->status = RT_FAILED;
    c->fail(c->ctx, st->err, RT_STATUS_BAD_INPUT);
    strbuf_free(&err);
    rt_model_free(m);
    rt_model_free(ref);
    return st->status;
  }
  const be_program *p = &s->ranks[rank];
  /* Buffers: one arena, each slot at its offset (rt_arena: the stream's layout when its sizes
   * are the runtime's), as large as the largest runtime tensor it holds. */
  size_t *floats = xcalloc((size_t)(p->nslots ? p->nslots : 1), sizeof *floats);
  rt_slot_floats(s, rank, m, floats);
  uint64_t *off = xcalloc((size_t)(p->nslots ? p->nslots : 1), sizeof *off);
  double arena_bytes = 0;
  st->planned = rt_arena(s, rank, m, off, &arena_bytes);
  char *arena = xcalloc(arena_bytes > 0 ? (size_t)arena_bytes : 1, 1);
  rt_model_count(m, RT_MEM_ARENA, arena_bytes);
  float **buf = xcalloc((size_t)(p->nslots ? p->nslots : 1), sizeof *buf);
  for (int i = 0; i < p->nslots; i++) buf[i] = floats[i] ? (float *)(void *)(arena + off[i]) : NULL;
  rt_req *req = xcalloc((size_t)(p->nslots ? p->nslots : 1), sizeof *req);
  int *posted_at = xcalloc((size_t)(p->nslots ? p->nslots : 1), sizeof *posted_at);
  /* per slot: a host copy (OFFLOAD, RELOAD) is posted on it; the copy itself is synchronous */
  bool *copying = xcalloc((size_t)(p->nslots ? p->nslots : 1), sizeof *copying);
  rt_host_store host; /* the offloaded tensors, in host memory (malloc: not the device's) */
  rt_host_init(&host, s, rank, malloc, free);
  float *tie_buf = NULL; /* TIE: the twin's copy of the tied gradient (tie_exchange) */

  double *optim_s = xcalloc((size_t)steps, sizeof *optim_s); /* per step, with calibrate */
  double t_run = support_seconds();
  for (int k = 0; k < steps && st->status == RT_OK; k++) {
    int step = first + k; /* the training step: its data, and its index in the stats (k) */
    if (ref) st->ref_loss[k] = rt_reference_step(ref, step, s->replicas);
    rt_model_set_step(m, step, replica);
    if (o->calibrate) rt_model_time(m, k > 0); /* the first step warms up */
    double t_step = support_seconds();
    for (int pc = 0; pc < p->ncode && st->status == RT_OK; pc++) {
      const be_inst *in = &p->code[pc];
      const int32_t *a = in->a;
      c->at = pc;
      if (inject(s, o, rank, replica, k, pc, c, st)) break;
      double t0 = support_seconds(), blas0 = rt_blas_seconds();
      bool compute = true;
      switch ((be_opcode)in->op) {
      case BE_OP_LOAD: rt_load(m, step, replica, a[1], buf[a[2]]); break;
      case BE_OP_FWD:
        if (a[5] >= 0 && buf[a[5]]) rt_model_use_state(m, a[0], a[1], buf[a[5]]);
        rt_forward(m, a[0], a[1], buf[a[2]], buf[a[3]]);
        break;
      case BE_OP_LOSS: {
        double l = rt_loss(m, step, replica, a[1], buf[a[2]], buf[a[3]]);
        st->loss[k] += l;
        if (!dump_failed(m, st, s, rank, pc) && !isfinite(l)) { /* a dump: its targets */
          char what[96];
          snprintf(what, sizeof what, "step %d: the loss of microbatch %d is %s", step + 1,
                   (int)a[1], isnan(l) ? "NaN" : "infinite");
          failed_at(st, s, rank, pc, what);
          st->status = RT_NONFINITE;
        }
        break;
      }
      case BE_OP_BWD_IN: rt_backward_input(m, a[0], a[1], buf[a[2]], a[5] >= 0 ? buf[a[5]] : NULL); break;
      case BE_OP_BWD_W:
      case BE_OP_BWD:
        if (in->op == BE_OP_BWD)
          rt_backward_input(m, a[0], a[1], buf[a[2]], a[5] >= 0 ? buf[a[5]] : NULL);
        rt_backward_weight(m, a[0], a[1]);
        dump_failed(m, st, s, rank, pc); /* W writes the layers' dump */
        break;
      case BE_OP_SEND:
      case BE_OP_RECV: {
        compute = false;
        be_tensor_ref tag = {(be_tensor_kind)a[2], a[3], a[4]};
        size_t bytes = rt_tensor_floats(m, tag.kind, tag.stage) * sizeof(float);
        posted_at[a[1]] = pc;
        int rc = in->op == BE_OP_SEND ? c->isend(c->ctx, a[0], tag, buf[a[1]], bytes, &req[a[1]])
                                      : c->irecv(c->ctx, a[0], tag, buf[a[1]], bytes, &req[a[1]]);
        if (rc != 0) failed_at(st, s, rank, pc, "the transport refused the message");
        break;
      }
      case BE_OP_OFFLOAD:
      case BE_OP_RELOAD:
        compute = false;
        posted_at[a[0]] = pc;
        copying[a[0]] = true;
        host_copy(&host, m, s, rank, pc, buf[a[0]], st);
        break;
      case BE_OP_WAIT: {
        compute = false;
        if (copying[a[0]]) { /* the host copy was made when posted */
          copying[a[0]] = false;
          break;
        }
        strbuf why = {0};
        int rc = c->wait(c->ctx, &req[a[0]], o->timeout, &why);
        if (rc != 0) {
          strbuf what = {0};
          be_msg_text(&what, &p->code[posted_at[a[0]]]);
          if (rc == 1)
            strbuf_printf(&what, " (posted at %04d) did not complete within %g s",
                          posted_at[a[0]], o->timeout);
          else if (rc == 2)
            strbuf_printf(&what, ": stopped because %s", strbuf_cstr(&why));
          else
            strbuf_printf(&what, ": %s", strbuf_cstr(&why));
          failed_at(st, s, rank, pc, strbuf_cstr(&what));
          if (rc == 2) st->status = RT_ABORTED;
          strbuf_free(&what);
        }
        strbuf_free(&why);
        st->wait_s += support_seconds() - t0;
        break;
      }
      case BE_OP_FREE: compute = false; break;
      case BE_OP_ALLREDUCE: {
        size_t n;
        float *g = rt_stage_grads(m, a[0], &n);
        strbuf why = {0}, what = {0};
        int rc = c->allreduce(c->ctx, g, n, o->timeout, &why);
        strbuf_printf(&what, "the all-reduce of stage %d over %d replicas", (int)a[0],
                      (int)s->replicas);
        comm_failed(st, s, rank, pc, rc, &what, &why, o->timeout);
        break;
      }
      case BE_OP_TIE: {
        int peer = s->stages[a[1]].rank;
        if (peer == rank) { /* this rank holds both copies */
          rt_model_tie_local(m);
          break;
        }
        strbuf why = {0}, what = {0};
        int rc = tie_exchange(m, a[0], a[1], peer, c, o->timeout, &tie_buf, &why);
        strbuf_printf(&what, "the tied matrix's gradient exchange of s%d with s%d on rank %d",
                      (int)a[0], (int)a[1], peer);
        comm_failed(st, s, rank, pc, rc, &what, &why, o->timeout);
        break;
      }
      case BE_OP_STEP:
        for (int i = 0; i < s->nstages && st->status == RT_OK; i++) {
          if (s->stages[i].rank != rank) continue;
          strbuf why = {0};
          if (!rt_stage_finite(m, i, &why)) {
            strbuf what = {0};
            strbuf_printf(&what, "step %d: stage %d, %s", step + 1, i, strbuf_cstr(&why));
            failed_at(st, s, rank, pc, strbuf_cstr(&what));
            st->status = RT_NONFINITE;
            strbuf_free(&what);
          }
          strbuf_free(&why);
          if (ref) {
            double d = rt_grad_diff(m, ref, i);
            if (d > st->grad_diff[k]) st->grad_diff[k] = d;
          }
          rt_step(m, i);
        }
        if (ref)
          for (int i = 0; i < s->nstages; i++) rt_step(ref, i);
        optim_s[k] = support_seconds() - t0;
        break;
      default: break;
      }
      double t1 = support_seconds();
      if (compute) {
        st->busy_s += t1 - t0;
        st->blas_s += rt_blas_seconds() - blas0;
      }
      if (o->trace && (compute || in->op == BE_OP_WAIT))
        rt_record(st, in, k, t0 - t_run, t1 - t_run);
    }
    st->step_s[k] = support_seconds() - t_step;
    bool last = k == steps - 1, every = o->save_every > 0 && (step + 1) % o->save_every == 0;
    if (o->save && st->status == RT_OK && (last || every) &&
        !inject(s, o, rank, replica, step, -1, c, st)) {
      double t_save = support_seconds();
      c->at = RT_AT_SAVE;
      int rc = rt_ckpt_save(s, m, rank, replica, step + 1, mo, o, c, &err);
      c->at = -1;
      if (rc == 0 && rank == 0 && replica == 0) {
        st->saved_step = step + 1;
        st->saves++;
        st->save_s += support_seconds() - t_save;
      } else if (rc != 0) {
        snprintf(st->err, sizeof st->err, "rank %d: %s%s", rank,
                 rc == 2 ? "stopped in the checkpoint's save because " : "", strbuf_cstr(&err));
        st->status = rc == 2 ? RT_ABORTED : rc == 1 ? RT_FAILED : RT_OUTPUT;
      }
      strbuf_free(&err);
    }
  }
  c->at = -1;
  if (o->calibrate && st->status == RT_OK && steps > 1) {
    st->timed = xcalloc((size_t)s->nlayers, sizeof *st->timed);
    rt_model_timed_costs(m, st->timed);
    st->optim_s = rt_median(optim_s + 1, steps - 1);
    for (int i = 0; i < s->nlayers; i++) /* what the simulator's optimizer step updates */
      if (st->timed[i].measured) st->optim_bytes += st->timed[i].param_bytes;
  }
  free(optim_s);
  rt_model_peak(m, &st->mem); /* the high-water mark of what it allocated, the arena included */
  if (ref) {
    rt_mem_use r;
    rt_model_peak(ref, &r);
    st->ref_bytes = r.total;
  }
  if (st->status == RT_FAILED || st->status == RT_NONFINITE || st->status == RT_OUTPUT)
    c->fail(c->ctx, st->err, st->status == RT_NONFINITE ? RT_STATUS_NONFINITE
                             : st->status == RT_OUTPUT  ? RT_STATUS_BAD_INPUT
                                                        : RT_STATUS_RUN_FAILED);
  c->leave(c->ctx);
  free(arena);
  free(off);
  free(buf);
  free(floats);
  free(req);
  free(posted_at);
  free(copying);
  st->host_bytes = host.peak;
  rt_host_free(&host);
  rt_dev_mfree(tie_buf);
  strbuf_free(&err);
  rt_model_free(m);
  rt_model_free(ref);
  return st->status;
}

/* What rt_run_threads's threads share. */
typedef struct run_args {
  const be_stream *s;   /* the stream */
  const rt_opts *mo;    /* the model's options */
  const rt_run_opts *o; /* the run's */
  rt_rank_stats *stats; /* nranks x replicas, indexed replica x nranks + rank */
} run_args;

/* One thread of rt_run_threads: its rank's program. */
static void run_rank(rt_comm *c, int rank, int replica, void *arg) {
  const run_args *a = arg;
  rt_exec_rank(a->s, rank, replica, a->mo, a->o, c,
               &a->stats[(size_t)replica * a->s->nranks + rank]);
}

int rt_run_threads(const be_stream *s, const rt_opts *mo, const rt_run_opts *o,
                   rt_rank_stats *stats) {
  run_args a = {s, mo, o, stats};
  return rt_threads_run(s->nranks, s->replicas, run_rank, &a);
}

bool rt_prediction_comparable(const be_stream *s, const rt_run_opts *o, int scale, strbuf *why) {
  const char *on = s->measured_on ? s->measured_on : "none";
  if (s->scale <= 0) {
    if (why)
      strbuf_printf(why, "the plan predicts %.3f ms on its own cluster (analytic costs of the "
                    "full-size model), not comparable with this run; plan with a profile of this "
                    "machine (octo-run --profile, then octoc --profile) to compare",
                    s->pred_step * 1e3);
    return false;
  }
  if (s->scale != scale) {
    if (why)
      strbuf_printf(why, "the plan's costs were measured at scale %d, this run is at scale %d: "
                    "not compared", (int)s->scale, scale);
    return false;
  }
  if (o && o->backend && strcmp(on, o->backend) != 0) {
    if (why)
      strbuf_printf(why, "the plan's costs were measured on the %s backend, this run is on %s: "
                    "not compared", on, o->backend);
    return false;
  }
  return true;
}

/* Bytes in a MiB, for the report. */
#define MIB 1048576.0

double rt_predicted_bytes(const be_stream *s, const rt_rank_stats *x) {
  return x->planned ? be_mem_stats(s, x->rank).need : s->ranks[x->rank].pred_peak;
}

/* Append the memory line of rank x: what it held at its high-water mark, by kind, and with a
 * comparable prediction (pred) the plan's figure beside it. The plan's peak counts the state
 * recomputing stages rebuild (shown apart, as the model's own blocks), not the workspace nor
 * other saved state outside the stream's buffers, which the line names as not in the plan. */
static void report_memory(const be_stream *s, const rt_rank_stats *x, bool pred, strbuf *out) {
  if (!(x->mem.total > 0)) return;
  const double *k = x->mem.kind;
  strbuf_puts(out, "memory: ");
  if (s->replicas > 1) strbuf_printf(out, "replica %d ", x->replica);
  strbuf_printf(out, "rank %d: measured %.2f MiB", x->rank, x->mem.total / MIB);
  if (pred) {
    double p = rt_predicted_bytes(s, x), peak = s->ranks[x->rank].pred_peak;
    strbuf_printf(out, ", predicted %.2f MiB (%+.1f%%) = the plan's peak %.2f MiB", p / MIB,
                  p > 0 ? 100 * (x->mem.total - p) / p : 0.0, peak / MIB);
    if (x->planned) strbuf_printf(out, " + message buffers %.2f MiB", (p - peak) / MIB);
  }
  strbuf_printf(out, "; held: parameters, gradients and optimizer state %.2f MiB, %s %.2f MiB",
                k[RT_MEM_STATIC] / MIB,
                x->planned ? "the stream's buffers" : "buffers (the runtime's sizes)",
                k[RT_MEM_ARENA] / MIB);
  if (k[RT_MEM_REBUILT] > 0)
    strbuf_printf(out, ", state rebuilt for recomputation %.2f MiB", k[RT_MEM_REBUILT] / MIB);
  strbuf_printf(out, ", workspace %.2f MiB", k[RT_MEM_WORKSPACE] / MIB);
  if (k[RT_MEM_PRIVATE] > 0)
    strbuf_printf(out, ", saved state outside the stream's buffers %.2f MiB",
                  k[RT_MEM_PRIVATE] / MIB);
  if (pred) strbuf_puts(out, k[RT_MEM_PRIVATE] > 0 ? " (the last two not in the plan)"
                                                   : " (not in the plan)");
  if (x->host_bytes > 0)
    strbuf_printf(out, "; host memory of offloaded activations %.2f MiB (not device memory)",
                  x->host_bytes / MIB);
  if (x->ref_bytes > 0) strbuf_printf(out, "; --check's reference %.2f MiB besides",
                                      x->ref_bytes / MIB);
  strbuf_putc(out, '\n');
}

rt_status rt_report_run(const be_stream *s, const rt_run_opts *o, const rt_rank_stats *stats,
                        int n, strbuf *out, strbuf *errs) {
  int first_step = o->first_step, steps = (o->steps > 0 ? o->steps : 1) - first_step;
  rt_status rc = RT_STATUS_OK;
  /* Failures first: the ranks that failed or died, then where each other rank stopped because
   * of them. */
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < n; i++) {
      const rt_rank_stats *x = &stats[i];
      bool culprit = x->status == RT_FAILED || x->status == RT_DIED ||
                     x->status == RT_NONFINITE || x->status == RT_OUTPUT;
      if (pass == 0 ? !culprit : x->status != RT_ABORTED) continue;
      strbuf_puts(errs, pass == 0 ? "error: " : "note: ");
      if (s->replicas > 1) strbuf_printf(errs, "replica %d: ", x->replica);
      strbuf_printf(errs, "%s\n", x->err);
      /* the worst: a NaN, then a rank that failed, then a --dump file that cannot be written
       * (the ranks it stopped do not make it a failed rank) */
      if (x->status == RT_NONFINITE)
        rc = RT_STATUS_NONFINITE;
      else if (x->status == RT_OUTPUT || pass == 1)
        rc = rc == RT_STATUS_OK ? (pass == 0 ? RT_STATUS_BAD_INPUT : RT_STATUS_RUN_FAILED) : rc;
      else if (rc != RT_STATUS_NONFINITE)
        rc = RT_STATUS_RUN_FAILED;
    }
  if (rc != RT_STATUS_OK) return rc;
  bool pred = rt_prediction_comparable(s, o, stats[0].scale, NULL);
  double load_s = 0; /* the slowest rank's */
  for (int i = 0; i < n; i++)
    if (stats[i].load_s > load_s) load_s = stats[i].load_s;
  if (o->resume_dir[0])
    strbuf_printf(out, "resumed: %s (step %d), read in %.3f s\n", o->resume_dir, first_step,
                  load_s);
  else if (o->init)
    strbuf_printf(out, "initialized: %s, read in %.3f s\n", o->init, load_s);
  double first = 0, last = 0;
  double *times = xcalloc((size_t)steps, sizeof *times);
  for (int step = 0; step < steps; step++) {
    double t = 0, loss = 0, ref = 0, diff = 0;
    for (int i = 0; i < n; i++) {
      if (stats[i].step_s[step] > t) t = stats[i].step_s[step];
      loss += stats[i].loss[step];
      if (stats[i].grad_diff[step] > diff) diff = stats[i].grad_diff[step];
      if (i == 0) ref = stats[i].ref_loss[step];
    }
    loss /= (double)s->nmb * s->replicas;
    if (step == 0) first = loss;
    last = loss;
    times[step] = t;
    strbuf_printf(out, "step %d: %.3f ms", first_step + step + 1, t * 1e3);
    if (pred) strbuf_printf(out, " (predicted %.3f ms)", s->pred_step * 1e3);
    strbuf_printf(out, ", loss %.6f", loss);
    if (o->check) {
      double rel = fabs(loss - ref) / (fabs(ref) > 0 ? fabs(ref) : 1);
      strbuf_printf(out, " (sequential %.6f), gradients max rel diff %.2e", ref, diff);
      if (rel > 1e-5 || diff > 1e-5 || !isfinite(loss)) {
        strbuf_puts(out, "  MISMATCH");
        rc = RT_STATUS_CHECK_MISMATCH;
      }
    }
    strbuf_putc(out, '\n');
  }
  if (steps > 1) strbuf_printf(out, "loss: %.6f -> %.6f over %d steps\n", first, last, steps);
  if (stats[0].saves > 0)
    strbuf_printf(out, "saved: %s/step-%08d, %d checkpoint%s in %.3f s\n", o->save,
                  stats[0].saved_step, stats[0].saves, stats[0].saves == 1 ? "" : "s",
                  stats[0].save_s);
  for (int i = 0; i < n; i++) {
    const rt_rank_stats *x = &stats[i];
    double total = 0;
    for (int step = 0; step < steps; step++) total += x->step_s[step];
    if (s->replicas > 1)
      strbuf_printf(out, "replica %d ", x->replica);
    strbuf_printf(out, "rank %d: busy %.3f ms", x->rank, x->busy_s * 1e3);
    if (pred) strbuf_printf(out, " (predicted %.3f ms)", s->ranks[x->rank].pred_busy * steps * 1e3);
    strbuf_printf(out, ", waiting %.3f ms, idle %.1f%%", x->wait_s * 1e3,
                  total > 0 ? 100 * (1 - x->busy_s / total) : 0.0);
    if (x->blas_s > 0)
      strbuf_printf(out, ", BLAS %.1f%% of busy", x->busy_s > 0 ? 100 * x->blas_s / x->busy_s : 0.0);
    if (x->mem.total > 0) strbuf_printf(out, ", memory %.2f MiB", x->mem.total / MIB);
    if (x->mem.total > 0 && pred)
      strbuf_printf(out, " (predicted %.2f MiB)", rt_predicted_bytes(s, x) / MIB);
    strbuf_putc(out, '\n');
  }
  for (int i = 0; i < n; i++) report_memory(s, &stats[i], pred, out);
  strbuf why = {0};
  if (rt_prediction_comparable(s, o, stats[0].scale, &why)) {
    /* the median of the steps after the first (the first warms caches and allocates) */
    int k0 = steps > 1 ? 1 : 0, n = steps - k0;
    double med = rt_median(times + k0, n);
    strbuf_printf(out, "prediction: %.3f ms predicted, %.3f ms measured (median of %d step%s): "
                  "%+.1f%%\n", s->pred_step * 1e3, med * 1e3, n, n == 1 ? "" : "s",
                  s->pred_step > 0 ? 100 * (med - s->pred_step) / s->pred_step : 0.0);
  } else {
    strbuf_printf(out, "prediction: %s\n", strbuf_cstr(&why));
  }
  strbuf_free(&why);
  free(times);
  if (o->check)
    strbuf_printf(out, "check: %s\n", rc == RT_STATUS_OK ? "every step matches the sequential run "
                                                        "(relative difference <= 1e-5)"
                                                      : "MISMATCH with the sequential run");
  return rc;
}

/* The predicted timeline of every step, for each rank of replica 0, as processes after the
 * measured ones (process nranks x replicas + rank, pid and tid by trace_id_pid/trace_id_tid with
 * 'stride'): step k's prediction starts where the earliest rank measured step k's first event. */
static void trace_predicted(const be_stream *s, const rt_rank_stats *stats, int n, int stride,
                            strbuf *out) {
  int steps = 0;
  for (int i = 0; i < n; i++)
    for (int k = 0; k < stats[i].nev; k++)
      if (stats[i].ev[k].step + 1 > steps) steps = stats[i].ev[k].step + 1;
  double *start = xcalloc((size_t)(steps ? steps : 1), sizeof *start);
  for (int k = 0; k < steps; k++) start[k] = INFINITY;
  for (int i = 0; i < n; i++)
    for (int k = 0; k < stats[i].nev; k++) {
      const rt_event *e = &stats[i].ev[k];
      if (e->t0 < start[e->step]) start[e->step] = e->t0;
    }
  int base = s->nranks * s->replicas;
  for (int r = 0; r < s->nranks; r++) {
    const be_program *p = &s->ranks[r];
    int pid = trace_id_pid(base + r), tid = trace_id_tid(pid, 0, stride);
    strbuf_printf(out, ",\n{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, "
                  "\"args\": {\"name\": \"rank %d predicted\"}}", pid, r);
    strbuf_printf(out, ",\n{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": %d, "
                  "\"args\": {\"sort_index\": %d}}", pid, 2 * r + 1);
    strbuf_printf(out, ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, "
                  "\"tid\": %d, \"args\": {\"name\": \"compute\"}}", pid, tid);
    for (int k = 0; k < steps; k++) {
      if (!isfinite(start[k])) continue;
      for (int q = 0; q < p->npred; q++) {
        const be_inst *in = &p->code[p->pred[q].addr];
        bool staged = be_ops[in->op].nops > 1;
        strbuf_printf(out, ",\n{\"name\": \"%s s%d mb%d\", \"cat\": \"%s\", \"ph\": \"X\", "
                      "\"pid\": %d, \"tid\": %d, \"ts\": %.3f, \"dur\": %.3f, "
                      "\"args\": {\"step\": %d, \"predicted\": true}}",
                      be_ops[in->op].trace, staged ? (int)in->a[0] : -1,
                      staged ? (int)in->a[1] : -1, be_ops[in->op].trace, pid, tid,
                      (start[k] + p->pred[q].t0) * 1e6, (p->pred[q].t1 - p->pred[q].t0) * 1e6,
                      k + 1);
      }
    }
  }
  free(start);
}

void rt_trace(const be_stream *s, const rt_rank_stats *stats, int n, strbuf *out) {
  strbuf_puts(out, "{\"displayTimeUnit\": \"ms\",\n\"otherData\": {\"model\": ");
  strbuf_json_str(out, s->model ? s->model : "");
  strbuf_puts(out, ", \"source\": \"octo-run\"},\n\"traceEvents\": [");
  bool first = true;
  /* processes: the measured ranks of every replica, then the predicted ranks; threads: compute
   * (0) and wait (1) */
  int stride = trace_id_stride(trace_id_pid(s->nranks * (s->replicas + 1) - 1), 2);
  for (int i = 0; i < n; i++) {
    const rt_rank_stats *x = &stats[i];
    int index = x->replica * s->nranks + x->rank, pid = trace_id_pid(index);
    int tid_compute = trace_id_tid(pid, 0, stride), tid_wait = trace_id_tid(pid, 1, stride);
    const be_program *p = &s->ranks[x->rank];
    strbuf_printf(out, "%s\n{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, "
                  "\"args\": {\"name\": \"$d%d %s (node %d) rank %d%s\"}}",
                  first ? "" : ",", pid, (int)p->device, p->type ? p->type : "?", (int)p->node,
                  x->rank, x->replica ? " (replica)" : "");
    first = false;
    strbuf_printf(out, ",\n{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": %d, "
                  "\"args\": {\"sort_index\": %d}}", pid, 2 * index); /* its prediction next */
    strbuf_printf(out, ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, "
                  "\"args\": {\"name\": \"compute\"}}", pid, tid_compute);
    strbuf_printf(out, ",\n{\"name\": \"thread_sort_index\", \"ph\": \"M\", \"pid\": %d, "
                  "\"tid\": %d, \"args\": {\"sort_index\": 0}}", pid, tid_compute);
    strbuf_printf(out, ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, "
                  "\"args\": {\"name\": \"wait\"}}", pid, tid_wait);
    strbuf_printf(out, ",\n{\"name\": \"thread_sort_index\", \"ph\": \"M\", \"pid\": %d, "
                  "\"tid\": %d, \"args\": {\"sort_index\": 1}}", pid, tid_wait);
    for (int k = 0; k < x->nev; k++) {
      const rt_event *e = &x->ev[k];
      const char *k_name = e->op < BE_OP_COUNT ? be_ops[e->op].trace : "?";
      char name[64];
      if (e->mb >= 0)
        snprintf(name, sizeof name, "%s s%d mb%d", k_name, (int)e->stage, (int)e->mb);
      else if (e->stage >= 0)
        snprintf(name, sizeof name, "%s s%d", k_name, (int)e->stage);
      else
        snprintf(name, sizeof name, "%s", k_name);
      strbuf_printf(out, ",\n{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": %d, "
                    "\"tid\": %d, \"ts\": %.3f, \"dur\": %.3f, \"args\": {\"step\": %d}}",
                    name, k_name, pid, e->op == BE_OP_WAIT ? tid_wait : tid_compute, e->t0 * 1e6,
                    (e->t1 - e->t0) * 1e6, e->step + 1);
    }
  }
  if (n > 0 && rt_prediction_comparable(s, NULL, stats[0].scale, NULL))
    trace_predicted(s, stats, n, stride, out);
  strbuf_puts(out, "\n]}\n");
}
