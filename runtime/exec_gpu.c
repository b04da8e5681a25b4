/* exec_gpu.c -- the GPU backends of octo-run. The host only enqueues: each rank has a compute
 * stream and a communication stream; every instruction is enqueued on one of them and followed by
 * a marker event; a WAIT becomes cudaStreamWaitEvent on the compute stream, so nothing waits on
 * the host. A watchdog thread polls the markers (and NCCL's asynchronous errors): when no rank
 * has progressed for --timeout seconds it names the first unfinished instruction of each stuck
 * rank, aborts the NCCL communicators and fails the run.
 *   cuda: every rank of every replica in this process on one GPU. The host runs the ranks'
 *         programs cooperatively (a rank whose WAIT names a message not yet paired yields);
 *         sends and receives pair in posting order per pair of ranks, like the cpu backend, and a
 *         pair becomes a device-to-device copy on the sender's communication stream, after both
 *         sides' compute reached the SEND and the RECV.
 *   nccl: one process per GPU under mpirun (rank r on local GPU r mod GPUs per node); NCCL
 *         communicators bootstrapped with MPI, nonblocking (so that no NCCL call blocks the host
 *         past the deadline and ncclCommAbort can end any of them); each run of consecutive
 *         SEND/RECV instructions is one ncclGroupStart/ncclGroupEnd group on the communication
 *         stream, after the compute stream's work so far: exactly the semantics the deadlock
 *         checker proves. The all-reduce over replicas is ncclAllReduce on a communicator per
 *         pipeline rank. Set-up (initialization, warm-up, the barrier before the first step) is
 *         bound by --timeout too.
 * OFFLOAD and RELOAD (activation offload) are cudaMemcpyAsync calls between the slot's device
 * buffer and pinned host memory on a third stream per rank, the copy stream, after the compute
 * stream's work so far; the slot's event marks the copy's end, and the WAIT makes the compute
 * stream wait for it, as for a message.
 * TIE (tied embeddings) sums the two copies of the tied matrix's gradient as the cpu backend does
 * (each rank adds the other's copy to its own, so both hold the same sum bit for bit): cuda pairs
 * the two ranks' TIEs like an all-reduce (a device-to-device copy each way, then each adds), nccl
 * exchanges the copies in one NCCL group on the communication stream. Checkpoints (--init,
 * --resume, --save) are checkpoint.c's, run with the rank's GPU bound as the model's device, so
 * the files are the CPU backends' byte for byte. */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu.h"
#include "kernels.h"

#ifdef OCTO_HAVE_NCCL
#include <mpi.h>
#include <nccl.h>
#endif

/* One rank of one replica on the GPU. */
typedef struct grank {
  int rank, replica;           /* who */
  const be_program *p;         /* its program */
  rt_model *m;                 /* its model (its stages), in device memory */
  rg_dev *dev;                 /* the GPU as its model's device: its compute stream */
  rt_model *ref;               /* --check: the CPU sequential reference (all stages) */
  cudaStream_t compute, comm;  /* its streams */
  cudaStream_t copy;           /* its copy stream: OFFLOAD and RELOAD, to and from pinned host
                                  memory */
  rt_host_store host;          /* its offloaded tensors, in pinned host memory (host_pinned) */
  float **buf;                 /* per slot: device buffer */
  cudaEvent_t *ready;          /* per slot: the compute stream reached the SEND, RECV, OFFLOAD or
                                  RELOAD */
  cudaEvent_t *done;           /* per slot: its message or host copy completed */
  bool *paired;                /* cuda backend: the slot's message is paired (done recorded; a
                                  host copy always is) */
  int *posted_at;              /* per slot: address of its SEND, RECV, OFFLOAD or RELOAD */
  cudaEvent_t *mark;           /* per address: after the instruction (on its stream) */
  cudaEvent_t start;           /* the step's start on the compute stream */
  cudaEvent_t sync;            /* cuda backend: its compute stream reached the all-reduce */
  double loss;                 /* the step's sum of microbatch losses */
  int pc;                      /* cuda backend: next instruction of the step */
  int enqueued;                /* markers recorded this step (read by the watchdog: atomic) */
  bool at_reduce;              /* cuda backend: waiting at an ALLREDUCE for the other replicas */
  bool at_tie;                 /* cuda backend: waiting at a TIE for its twin's rank */
  float *tie_buf;              /* TIE with another rank: the twin's copy of the tied gradient
                                  (device), else NULL */
  cudaEvent_t tied;            /* TIE: cuda, its copy of the twin's gradient was taken; nccl, the
                                  exchange completed (on the communication stream) */
  rt_rank_stats *st;           /* its figures */
  cublasHandle_t blas;         /* for the single-process all-reduce */
#ifdef OCTO_HAVE_NCCL
  ncclComm_t pipe, reduce;     /* nccl backend: point-to-point and all-reduce communicators */
#endif
} grank;

/* The whole run on this process. */
typedef struct gpu_run {
  const be_stream *s;
  const rt_opts *mo;           /* the model's options (a checkpoint's manifest records them) */
  const rt_run_opts *o;
  int first;                   /* the training steps taken before this run (--resume) */
  grank *g;                    /* ranks of this process */
  int n;
  bool nccl;                   /* nccl backend (else cuda) */
  int device;                  /* CUDA device of the ranks (made current in the watchdog) */
  /* watchdog */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int step;                    /* step enqueued and watched, -1 none */
  bool step_done, stop;        /* the watched step completed; the watchdog must stop */
  bool failed, claimed;        /* the run failed (atomic); its message is being written */
  bool output;                 /* the failure is a checkpoint that cannot be written (RT_OUTPUT) */
  char why[480];               /* failure (fits rt_rank_stats.err) */
} gpu_run;

/* Record the first failure (from either thread). */
static void run_fail(gpu_run *R, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void run_fail(gpu_run *R, const char *fmt, ...) {
  bool no = false;
  if (!__atomic_compare_exchange_n(&R->claimed, &no, true, false, __ATOMIC_ACQ_REL,
                                   __ATOMIC_ACQUIRE))
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(R->why, sizeof R->why, fmt, ap);
  va_end(ap);
  __atomic_store_n(&R->failed, true, __ATOMIC_RELEASE);
}

/* Whether the run failed. */
static bool failed(gpu_run *R) { return __atomic_load_n(&R->failed, __ATOMIC_ACQUIRE); }

/* "recv act s0 mb1 <- rank 0": the SEND or RECV at address a of program p, into out (n bytes). */
static void describe(char *out, size_t n, const be_program *p, int a) {
  strbuf sb = {0};
  be_msg_text(&sb, &p->code[a]);
  snprintf(out, n, "%s", strbuf_cstr(&sb));
  strbuf_free(&sb);
}

/* "the tied matrix's gradient exchange of s0 with s3 on rank 3": the TIE at address a of g (as
 * the cpu backend words it), into out (n bytes). */
static void describe_tie(char *out, size_t n, const gpu_run *R, const grank *g, int a) {
  const be_inst *in = &g->p->code[a];
  snprintf(out, n, "the tied matrix's gradient exchange of s%d with s%d on rank %d", (int)in->a[0],
           (int)in->a[1], (int)R->s->stages[in->a[1]].rank);
}

/* Index of the first instruction of g, from 'from' on, whose marker has not completed, or ncode.
 * (Markers of the compute stream complete in program order; a communication marker before a
 * finished compute marker has finished too, since compute waited for it.) */
static int first_unfinished(const grank *g, int from) {
  int hi = __atomic_load_n(&g->enqueued, __ATOMIC_ACQUIRE);
  for (int a = from > 0 ? from : 0; a < hi; a++)
    if (cudaEventQuery(g->mark[a]) == cudaErrorNotReady) return a;
  return hi;
}
/* (The host may not have enqueued the whole step yet: the result is at most 'enqueued'.) */

/* The watchdog: polls the markers of the step being run; declares it done, or failed when no
 * rank progressed for the timeout (or NCCL reported an asynchronous error). */
static void *watchdog(void *arg) {
  gpu_run *R = arg;
  int *where = xcalloc((size_t)R->n, sizeof *where);
  int *enq = xcalloc((size_t)R->n, sizeof *enq);
  double last = support_seconds();
  int seen = -1;
  cudaSetDevice(R->device); /* not device 0's context in every process of a node */
  pthread_mutex_lock(&R->mu);
  while (!R->stop) {
    if (R->step < 0 || R->step_done || failed(R)) {
      pthread_cond_wait(&R->cv, &R->mu);
      continue;
    }
    if (R->step != seen) { /* a new step: start watching from its first instruction */
      seen = R->step;
      last = support_seconds();
      for (int i = 0; i < R->n; i++) where[i] = enq[i] = 0;
    }
    pthread_mutex_unlock(&R->mu);
    bool all = true, moved = false;
    for (int i = 0; i < R->n; i++) {
      int e = __atomic_load_n(&R->g[i].enqueued, __ATOMIC_ACQUIRE);
      int a = first_unfinished(&R->g[i], where[i]);
      if (a != where[i] || e != enq[i]) moved = true; /* the GPU or the host went on */
      where[i] = a;
      enq[i] = e;
      all &= a == R->g[i].p->ncode;
    }
    char nccl_err[200] = "";
#ifdef OCTO_HAVE_NCCL
    if (R->nccl)
      for (int i = 0; i < R->n && !nccl_err[0]; i++) {
        ncclResult_t e = ncclSuccess, e2 = ncclSuccess;
        ncclCommGetAsyncError(R->g[i].pipe, &e);
        if (R->g[i].reduce) ncclCommGetAsyncError(R->g[i].reduce, &e2);
        if (e == ncclSuccess || e == ncclInProgress) e = e2;
        if (e != ncclSuccess && e != ncclInProgress)
          snprintf(nccl_err, sizeof nccl_err, "%s", ncclGetErrorString(e));
      }
#endif
    double t = support_seconds();
    if (moved) last = t;
    pthread_mutex_lock(&R->mu);
    if (all) {
      R->step_done = true;
      pthread_cond_broadcast(&R->cv);
    } else if (nccl_err[0] || t - last > R->o->timeout) {
      for (int i = 0; i < R->n && !failed(R); i++) {
        const grank *g = &R->g[i];
        int a = where[i];
        if (a >= g->p->ncode) continue;
        const be_inst *in = &g->p->code[a];
        char what[120] = "";
        if (in->op == BE_OP_WAIT) describe(what, sizeof what, g->p, g->posted_at[in->a[0]]);
        if (in->op == BE_OP_TIE) describe_tie(what, sizeof what, R, g, a);
        if (nccl_err[0])
          run_fail(R, "rank %d at %04d (%s)%s%s: NCCL error: %s", g->rank, a,
                   be_ops[in->op].name, what[0] ? ": " : "", what, nccl_err);
        else
          run_fail(R, "rank %d at %04d (%s)%s%s did not complete within %g s", g->rank, a,
                   be_ops[in->op].name, what[0] ? ": " : "", what, R->o->timeout);
      }
#ifdef OCTO_HAVE_NCCL
      if (R->nccl)
        for (int i = 0; i < R->n; i++) {
          ncclCommAbort(R->g[i].pipe);
          if (R->g[i].reduce) ncclCommAbort(R->g[i].reduce);
        }
#endif
      pthread_cond_broadcast(&R->cv);
    } else {
      pthread_mutex_unlock(&R->mu);
      struct timespec nap = {0, 200000}; /* 0.2 ms */
      nanosleep(&nap, NULL);
      pthread_mutex_lock(&R->mu);
    }
  }
  pthread_mutex_unlock(&R->mu);
  free(where);
  free(enq);
  return NULL;
}

/* ---- Instructions ------------------------------------------------------------------------- */

/* Record the marker of g's instruction at address a on 'stream' and publish it to the watchdog.
 * Pre: markers are recorded in address order within a step. */
static void marked(grank *g, int a, cudaStream_t stream) {
  cudaEventRecord(g->mark[a], stream);
  __atomic_store_n(&g->enqueued, a + 1, __ATOMIC_RELEASE);
}

/* Channels of the cuda backend: unpaired posts per (replica, from, to), like the cpu hub. */
typedef struct gpost {
  grank *g;   /* poster */
  int slot;   /* its buffer */
  size_t bytes;
} gpost;
typedef struct gchan {
  gpost *s, *r;
  int ns, nr, cs, cr, hs, hr;
} gchan;

static gchan *chans; /* [(replica * nranks + from) * nranks + to] of the cuda run */

/* Pair the channel's posts while both sides have one: a copy on the sender's communication
 * stream after both compute streams reached their instruction. */
static void pair_posts(gpu_run *R, gchan *c) {
  while (c->hs < c->ns && c->hr < c->nr) {
    gpost *x = &c->s[c->hs++], *y = &c->r[c->hr++];
    cudaStreamWaitEvent(x->g->comm, x->g->ready[x->slot], 0);
    cudaStreamWaitEvent(x->g->comm, y->g->ready[y->slot], 0);
    if (x->bytes != y->bytes)
      run_fail(R, "rank %d at %04d (SEND): a message of %zu bytes was paired with a receive of "
               "%zu bytes", x->g->rank, x->g->posted_at[x->slot], x->bytes, y->bytes);
    else if (x->bytes)
      cudaMemcpyAsync(y->g->buf[y->slot], x->g->buf[x->slot], x->bytes, cudaMemcpyDeviceToDevice,
                      x->g->comm);
    cudaEventRecord(x->g->done[x->slot], x->g->comm);
    cudaEventRecord(y->g->done[y->slot], x->g->comm);
    x->g->paired[x->slot] = y->g->paired[y->slot] = true;
  }
  if (c->hs == c->ns) c->ns = c->hs = 0;
  if (c->hr == c->nr) c->nr = c->hr = 0;
}

/* Enqueue the compute instruction at address a of g for training step 'step' (this run's
 * step - R->first): the model's operations on g's device (its compute stream); a TIE only when
 * g's rank holds both stages. LOSS waits for the stream (the loss comes to the host). */
static void enqueue_compute(gpu_run *R, grank *g, int a, int step) {
  const be_inst *in = &g->p->code[a];
  const int32_t *x = in->a;
  const rt_dev *prev = rt_dev_bind(rg_dev_kernels(g->dev));
  switch ((be_opcode)in->op) {
  case BE_OP_LOAD: rt_load(g->m, step, g->replica, x[1], g->buf[x[2]]); break;
  case BE_OP_FWD:
    if (x[5] >= 0 && g->buf[x[5]]) rt_model_use_state(g->m, x[0], x[1], g->buf[x[5]]);
    rt_forward(g->m, x[0], x[1], g->buf[x[2]], g->buf[x[3]]);
    break;
  case BE_OP_LOSS:
    g->loss += rt_loss(g->m, step, g->replica, x[1], g->buf[x[2]], g->buf[x[3]]);
    break;
  case BE_OP_BWD_IN:
    rt_backward_input(g->m, x[0], x[1], g->buf[x[2]], x[5] >= 0 ? g->buf[x[5]] : NULL);
    break;
  case BE_OP_BWD_W: rt_backward_weight(g->m, x[0], x[1]); break;
  case BE_OP_BWD:
    rt_backward_input(g->m, x[0], x[1], g->buf[x[2]], x[5] >= 0 ? g->buf[x[5]] : NULL);
    rt_backward_weight(g->m, x[0], x[1]);
    break;
  case BE_OP_STEP: {
    const be_stream *s = R->s;
    for (int i = 0; i < s->nstages; i++) {
      if (s->stages[i].rank != g->rank) continue;
      if (g->ref) { /* compare this stage's gradients with the sequential reference's */
        size_t n;
        const float *dg = rt_stage_grads(g->m, i, &n);
        float *host = xmalloc((n ? n : 1) * sizeof *host);
        while (cudaStreamQuery(g->compute) == cudaErrorNotReady && !failed(R)) {
          struct timespec nap = {0, 100000}; /* poll, so that the watchdog can fail the run */
          nanosleep(&nap, NULL);
        }
        if (!failed(R)) rt_to_host(host, dg, n * sizeof *host);
        if (!failed(R) && !rg_dev_error(g->dev)) {
          double rel = rt_grad_diff_host(host, n, g->ref, i);
          int k = step - R->first;
          if (rel > g->st->grad_diff[k] || rel != rel) g->st->grad_diff[k] = rel;
        }
        free(host);
      }
      rt_step(g->m, i);
    }
    if (g->ref) {
      rt_dev_bind(NULL); /* the reference is a CPU model */
      for (int i = 0; i < s->nstages; i++) rt_step(g->ref, i);
    }
    break;
  }
  case BE_OP_TIE: rt_model_tie_local(g->m); break; /* this rank holds both copies */
  default: break;
  }
  rt_dev_bind(prev);
}

#ifdef OCTO_HAVE_NCCL
/* nccl backend, nonblocking communicators: wait while comm has an operation in progress (being
 * enqueued or initialized), until the run failed (R not NULL: the watchdog aborted the
 * communicators) or 'until' (support_seconds) passed. Returns ncclSuccess, the communicator's
 * error, or ncclInProgress at the deadline or the failure. */
static ncclResult_t nccl_settle(gpu_run *R, ncclComm_t comm, double until) {
  for (;;) {
    /* The watchdog fails the run before it aborts (frees) the communicators: never query one
     * after that. */
    if (R && failed(R)) return ncclInProgress;
    ncclResult_t e = ncclSuccess;
    ncclResult_t q = ncclCommGetAsyncError(comm, &e);
    if (q != ncclSuccess) return q;
    if (e != ncclInProgress) return e;
    if (support_seconds() > until) return ncclInProgress;
    struct timespec nap = {0, 50000}; /* 50 us */
    nanosleep(&nap, NULL);
  }
}

/* nccl backend: after the NCCL call that returned r at address a of g (what: its name), wait
 * until its enqueueing finished (nccl_settle) within the timeout; a failure fails the run. */
static void nccl_done(gpu_run *R, grank *g, ncclComm_t comm, int a, const char *what,
                      ncclResult_t r) {
  if (r == ncclInProgress) r = nccl_settle(R, comm, support_seconds() + R->o->timeout);
  if (r == ncclSuccess || failed(R)) return;
  const be_inst *in = &g->p->code[a];
  if (r == ncclInProgress)
    run_fail(R, "rank %d at %04d (%s): %s did not complete within %g s", g->rank, a,
             be_ops[in->op].name, what, R->o->timeout);
  else
    run_fail(R, "rank %d at %04d (%s): %s: %s", g->rank, a, be_ops[in->op].name, what,
             ncclGetErrorString(r));
}

/* nccl backend: post SEND or RECV at address a inside the current group. */
static void enqueue_nccl_msg(gpu_run *R, grank *g, int a) {
  const be_inst *in = &g->p->code[a];
  be_tensor_ref tag = {(be_tensor_kind)in->a[2], in->a[3], in->a[4]};
  size_t n = rt_tensor_floats(g->m, tag.kind, tag.stage);
  int peer = g->replica * R->s->nranks + in->a[0];
  g->posted_at[in->a[1]] = a;
  ncclResult_t e = in->op == BE_OP_SEND
                       ? ncclSend(g->buf[in->a[1]], n, ncclFloat32, peer, g->pipe, g->comm)
                       : ncclRecv(g->buf[in->a[1]], n, ncclFloat32, peer, g->pipe, g->comm);
  if (e != ncclSuccess)
    run_fail(R, "rank %d at %04d (%s): %s", g->rank, a, be_ops[in->op].name,
             ncclGetErrorString(e));
}
#endif

/* ---- Steps -------------------------------------------------------------------------------- */

/* cuda backend: the TIE at address a of g, whose twin stage is on another rank q of g's replica.
 * Returns false (g yields) until q is at its TIE too; the second to arrive enqueues both: once
 * both compute streams reached their TIE, each copies the other's copy of the tied gradient into
 * its tie_buf; once both copies are taken, each adds the other's to its own (rt_model_tie_add),
 * so both hold the same sum bit for bit, as on the cpu backend. Then both are past their TIE.
 * Pre: g->pc == a. */
static bool tie_cuda(gpu_run *R, grank *g, int a) {
  const be_inst *in = &g->p->code[a];
  grank *q = &R->g[(size_t)g->replica * R->s->nranks + R->s->stages[in->a[1]].rank];
  g->at_tie = true;
  if (!q->at_tie) return false;
  const be_inst *qi = &q->p->code[q->pc];
  size_t n = 0, nq = 0;
  float *gg = rt_model_tied_grad(g->m, in->a[0], &n);
  float *gq = qi->op == BE_OP_TIE ? rt_model_tied_grad(q->m, qi->a[0], &nq) : NULL;
  if (!gg || !gq || n != nq || qi->a[1] != in->a[0] || !g->tie_buf || !q->tie_buf) {
    run_fail(R, "rank %d at %04d (TIE): its twin, rank %d at %04d (%s), is not the TIE of s%d "
             "with s%d", g->rank, a, q->rank, q->pc, be_ops[qi->op].name, (int)in->a[1],
             (int)in->a[0]);
    return false;
  }
  cudaEventRecord(g->sync, g->compute);
  cudaEventRecord(q->sync, q->compute);
  cudaStreamWaitEvent(g->compute, q->sync, 0); /* q's gradient is complete */
  cudaStreamWaitEvent(q->compute, g->sync, 0);
  cudaMemcpyAsync(g->tie_buf, gq, n * sizeof(float), cudaMemcpyDeviceToDevice, g->compute);
  cudaMemcpyAsync(q->tie_buf, gg, n * sizeof(float), cudaMemcpyDeviceToDevice, q->compute);
  cudaEventRecord(g->tied, g->compute);
  cudaEventRecord(q->tied, q->compute);
  cudaStreamWaitEvent(g->compute, q->tied, 0); /* q took its copy of g's gradient: g may add */
  cudaStreamWaitEvent(q->compute, g->tied, 0);
  grank *both[2] = {g, q};
  for (int i = 0; i < 2; i++) {
    grank *x = both[i];
    int at = x->pc;
    const rt_dev *prev = rt_dev_bind(rg_dev_kernels(x->dev));
    rt_model_tie_add(x->m, x->p->code[at].a[0], x->tie_buf);
    rt_dev_bind(prev);
    marked(x, at, x->compute);
    x->at_tie = false;
    x->pc++;
  }
  return true;
}

#ifdef OCTO_HAVE_NCCL
/* nccl backend: the TIE at address a of g, whose twin stage is on another rank: one NCCL group
 * on the communication stream, after the compute stream's work so far, sends g's copy of the
 * tied gradient to the twin's rank and receives the twin's into tie_buf; the compute stream
 * waits for the group and adds it to g's copy (rt_model_tie_add; the twin adds g's: the same sum
 * bit for bit). The caller records the marker, which the watchdog holds to the deadline. */
static void tie_nccl(gpu_run *R, grank *g, int a) {
  const be_inst *in = &g->p->code[a];
  int peer = g->replica * R->s->nranks + R->s->stages[in->a[1]].rank;
  size_t n = 0;
  float *own = rt_model_tied_grad(g->m, in->a[0], &n);
  cudaEventRecord(g->sync, g->compute);
  cudaStreamWaitEvent(g->comm, g->sync, 0);
  ncclGroupStart();
  ncclResult_t e = ncclSend(own, n, ncclFloat32, peer, g->pipe, g->comm);
  ncclResult_t e2 = ncclRecv(g->tie_buf, n, ncclFloat32, peer, g->pipe, g->comm);
  if (e == ncclSuccess) e = e2;
  if (e != ncclSuccess)
    run_fail(R, "rank %d at %04d (TIE): %s", g->rank, a, ncclGetErrorString(e));
  nccl_done(R, g, g->pipe, a, "ncclGroupEnd", ncclGroupEnd());
  cudaEventRecord(g->tied, g->comm);
  cudaStreamWaitEvent(g->compute, g->tied, 0);
  const rt_dev *prev = rt_dev_bind(rg_dev_kernels(g->dev));
  rt_model_tie_add(g->m, in->a[0], g->tie_buf);
  rt_dev_bind(prev);
}
#endif

/* The pinned host memory of the ranks' host stores (rt_host_store's allocator): NULL when
 * cudaMallocHost fails. */
static void *host_pinned(size_t n) {
  void *p = NULL;
  return cudaMallocHost(&p, n ? n : 1) == cudaSuccess ? p : NULL;
}
static void host_unpin(void *p) { cudaFreeHost(p); }

/* Enqueue OFFLOAD or RELOAD at address a of g (the tensor its slot a[0] holds,
 * be_operand_tensor): on g's copy stream, after the compute stream's work so far, a cudaMemcpyAsync from
 * the slot's buffer into its pinned copy in g's host store (OFFLOAD) or back into the slot's new
 * buffer (RELOAD, which also moves the model's saved state there: a WSTASH); the slot's done
 * event marks the copy's end, for its WAIT. A RELOAD without a copy held, or pinned memory that
 * cannot be allocated, fails the run naming the rank and the instruction. */
static void enqueue_copy(gpu_run *R, grank *g, int a) {
  const be_inst *in = &g->p->code[a];
  be_tensor_ref t;
  be_operand_tensor(R->s, in, 0, &t); /* a validated stream names the slot's tensor */
  int slot = in->a[0], kind = t.kind, stage = t.stage, mb = t.mb;
  bool out = in->op == BE_OP_OFFLOAD;
  g->posted_at[slot] = a;
  g->paired[slot] = true; /* no partner: its WAIT never yields */
  cudaEventRecord(g->ready[slot], g->compute);
  cudaStreamWaitEvent(g->copy, g->ready[slot], 0);
  size_t bytes = rt_tensor_floats(g->m, (be_tensor_kind)kind, stage) * sizeof(float);
  rt_host_copy *c = rt_host_at(&g->host, kind, stage, mb);
  strbuf tn = {0};
  be_tensor_text(&tn, t);
  const char *op = be_ops[in->op].name;
  if (!c) {
    run_fail(R, "rank %d at %04d (%s): no host copy of %s: its stage does not offload on this "
             "rank", g->rank, a, op, strbuf_cstr(&tn));
  } else if (out) {
    void *h = rt_host_keep(&g->host, c, bytes);
    if (!h && bytes)
      run_fail(R, "rank %d at %04d (%s): cannot allocate %zu bytes of pinned host memory to "
               "offload %s", g->rank, a, op, bytes, strbuf_cstr(&tn));
    else if (bytes && g->buf[slot])
      cudaMemcpyAsync(h, g->buf[slot], bytes, cudaMemcpyDeviceToHost, g->copy);
  } else if (!c->held) {
    run_fail(R, "rank %d at %04d (%s): reload of %s, but host memory holds no copy of it (no "
             "OFFLOAD of it this step)", g->rank, a, op, strbuf_cstr(&tn));
  } else {
    size_t n = c->bytes < bytes ? c->bytes : bytes;
    if (n && g->buf[slot])
      cudaMemcpyAsync(g->buf[slot], c->data, n, cudaMemcpyHostToDevice, g->copy);
    rt_host_drop(&g->host, c);
    if (kind == BE_T_WSTASH && g->buf[slot]) rt_model_move_state(g->m, stage, mb, g->buf[slot]);
  }
  strbuf_free(&tn);
  cudaEventRecord(g->done[slot], g->copy);
  marked(g, a, g->copy);
}

/* cuda backend: run one instruction of g (the host side); returns false when g must yield (a
 * WAIT on a message not yet paired, an ALLREDUCE waiting for the other replicas). */
static bool step_cuda(gpu_run *R, grank *g, int step) {
  const be_inst *in = &g->p->code[g->pc];
  int a = g->pc;
  switch ((be_opcode)in->op) {
  case BE_OP_SEND:
  case BE_OP_RECV: {
    int slot = in->a[1], peer = in->a[0];
    be_tensor_ref tag = {(be_tensor_kind)in->a[2], in->a[3], in->a[4]};
    g->posted_at[slot] = a;
    g->paired[slot] = false;
    cudaEventRecord(g->ready[slot], g->compute);
    bool send = in->op == BE_OP_SEND;
    int nr = R->s->nranks;
    gchan *c = &chans[((size_t)g->replica * nr + (send ? g->rank : peer)) * nr +
                      (send ? peer : g->rank)];
    gpost p = {g, slot, rt_tensor_floats(g->m, tag.kind, tag.stage) * sizeof(float)};
    if (send)
      VEC_PUSH(c->s, c->ns, c->cs, p);
    else
      VEC_PUSH(c->r, c->nr, c->cr, p);
    pair_posts(R, c);
    marked(g, a, g->compute);
    break;
  }
  case BE_OP_OFFLOAD:
  case BE_OP_RELOAD:
    enqueue_copy(R, g, a);
    break;
  case BE_OP_WAIT:
    if (!g->paired[in->a[0]]) return false;
    cudaStreamWaitEvent(g->compute, g->done[in->a[0]], 0);
    marked(g, a, g->compute);
    break;
  case BE_OP_ALLREDUCE: {
    if (R->s->replicas > 1) {
      g->at_reduce = true;
      /* The last replica to arrive sums into replica 0's gradients, in replica order. */
      for (int i = 0; i < R->n; i++)
        if (R->g[i].rank == g->rank && !R->g[i].at_reduce) return false;
      grank *g0 = NULL;
      for (int i = 0; i < R->n; i++)
        if (R->g[i].rank == g->rank && R->g[i].replica == 0) g0 = &R->g[i];
      size_t n;
      float *acc = rt_stage_grads(g0->m, in->a[0], &n);
      cublasSetStream(g0->blas, g0->compute);
      for (int i = 0; i < R->n; i++) {
        grank *q = &R->g[i];
        if (q->rank != g->rank || q == g0) continue;
        cudaEventRecord(q->sync, q->compute);
        cudaStreamWaitEvent(g0->compute, q->sync, 0);
        size_t nq;
        float *gq = rt_stage_grads(q->m, in->a[0], &nq);
        const float one = 1;
        cublasSaxpy(g0->blas, (int)n, &one, gq, 1, acc, 1);
      }
      marked(g0, a, g0->compute);
      for (int i = 0; i < R->n; i++) {
        grank *q = &R->g[i];
        if (q->rank != g->rank || q == g0) continue;
        size_t nq;
        float *gq = rt_stage_grads(q->m, in->a[0], &nq);
        cudaStreamWaitEvent(q->compute, g0->mark[a], 0);
        cudaMemcpyAsync(gq, acc, n * sizeof(float), cudaMemcpyDeviceToDevice, q->compute);
        marked(q, a, q->compute);
        /* replica 0's next work (its STEP zeroes acc) must not start before q copied the sum */
        cudaStreamWaitEvent(g0->compute, q->mark[a], 0);
        q->at_reduce = false;
        q->pc++;
      }
      g0->at_reduce = false;
      g0->pc++;
      return true;
    }
    marked(g, a, g->compute);
    break;
  }
  case BE_OP_TIE:
    if (R->s->stages[in->a[1]].rank != g->rank) return tie_cuda(R, g, a);
    enqueue_compute(R, g, a, step); /* both copies here */
    marked(g, a, g->compute);
    break;
  default:
    enqueue_compute(R, g, a, step);
    marked(g, a, g->compute);
    break;
  }
  g->pc++;
  return true;
}

/* nccl backend: enqueue the whole step of the one rank of this process. */
static void step_nccl(gpu_run *R, grank *g, int step) {
#ifdef OCTO_HAVE_NCCL
  const be_program *p = g->p;
  for (int a = 0; a < p->ncode && !failed(R); a++) {
    const be_inst *in = &p->code[a];
    if (in->op == BE_OP_SEND || in->op == BE_OP_RECV) {
      /* One group: every consecutive SEND/RECV, after the compute stream's work so far. */
      cudaEventRecord(g->ready[in->a[1]], g->compute);
      cudaStreamWaitEvent(g->comm, g->ready[in->a[1]], 0);
      int b = a;
      ncclGroupStart();
      while (b < p->ncode && (p->code[b].op == BE_OP_SEND || p->code[b].op == BE_OP_RECV))
        enqueue_nccl_msg(R, g, b++);
      nccl_done(R, g, g->pipe, a, "ncclGroupEnd", ncclGroupEnd());
      for (int k = a; k < b; k++) {
        cudaEventRecord(g->done[p->code[k].a[1]], g->comm);
        marked(g, k, g->comm);
      }
      a = b - 1;
    } else if (in->op == BE_OP_OFFLOAD || in->op == BE_OP_RELOAD) {
      enqueue_copy(R, g, a);
    } else if (in->op == BE_OP_WAIT) {
      cudaStreamWaitEvent(g->compute, g->done[in->a[0]], 0);
      marked(g, a, g->compute);
    } else if (in->op == BE_OP_ALLREDUCE) {
      size_t n;
      float *gr = rt_stage_grads(g->m, in->a[0], &n);
      if (R->s->replicas > 1)
        nccl_done(R, g, g->reduce, a, "ncclAllReduce",
                  ncclAllReduce(gr, gr, n, ncclFloat32, ncclSum, g->reduce, g->compute));
      marked(g, a, g->compute);
    } else if (in->op == BE_OP_TIE && R->s->stages[in->a[1]].rank != g->rank) {
      tie_nccl(R, g, a);
      marked(g, a, g->compute);
    } else {
      enqueue_compute(R, g, a, step);
      marked(g, a, g->compute);
    }
  }
#else
  (void)R;
  (void)g;
  (void)step;
#endif
}

/* After this run's step k (0: its first) completed: per-instruction spans from the markers into
 * each rank's figures. */
static void collect_step(gpu_run *R, int k) {
  for (int i = 0; i < R->n; i++) {
    grank *g = &R->g[i];
    const be_program *p = g->p;
    float last_ms = 0, ms = 0;
    for (int a = 0; a < p->ncode; a++) {
      const be_inst *in = &p->code[a];
      cudaEventElapsedTime(&ms, g->start, g->mark[a]);
      bool compute = (be_ops[in->op].flags & (BE_COMPUTE | BE_END)) != 0;
      bool on_compute = in->op != BE_OP_SEND && in->op != BE_OP_RECV &&
                        !(be_ops[in->op].flags & BE_COPY); /* those on the comm or copy stream */
      if (!on_compute) continue;
      double t0 = last_ms * 1e-3, t1 = ms * 1e-3;
      if (t1 < t0) t1 = t0;
      if (compute) g->st->busy_s += t1 - t0;
      if (in->op == BE_OP_WAIT) g->st->wait_s += t1 - t0;
      if (R->o->trace && (compute || in->op == BE_OP_WAIT)) {
        double base = 0;
        for (int j = 0; j < k; j++) base += g->st->step_s[j];
        rt_record(g->st, in, k, base + t0, base + t1);
      }
      last_ms = ms;
    }
    g->st->step_s[k] = last_ms * 1e-3;
    cudaError_t e = cudaStreamSynchronize(g->compute);
    if (e != cudaSuccess) /* e.g. a kernel's asynchronous fault, which no later call reports */
      run_fail(R, "rank %d: step %d: %s", g->rank, R->first + k + 1, cudaGetErrorString(e));
    g->st->loss[k] = g->loss;
  }
}

/* Set up rank g (its streams, its GPU device, its model on it, buffers, events). Returns false
 * with R failed. */
static bool grank_init(gpu_run *R, grank *g, int device, bool bf16, const rt_opts *mo) {
  const be_stream *s = R->s;
  strbuf err = {0};
  g->p = &s->ranks[g->rank];
  cudaSetDevice(device);
  cudaStreamCreateWithFlags(&g->compute, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&g->comm, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&g->copy, cudaStreamNonBlocking);
  rt_host_init(&g->host, s, g->rank, host_pinned, host_unpin);
  g->dev = rg_dev_new(device, g->compute, bf16, &err);
  const rt_dev *prev = g->dev ? rt_dev_bind(rg_dev_kernels(g->dev)) : NULL;
  g->m = g->dev ? rt_model_new(s, mo, &err) : NULL;
  for (int i = 0; g->m && i < s->nstages; i++)
    if (s->stages[i].rank == g->rank) rt_model_init_stage(g->m, i);
  /* --init's or --resume's weights (and moments) replace the initial ones: checkpoint.c's load,
   * through host buffers put on this device */
  double t_load = support_seconds();
  bool loaded = g->m && rt_ckpt_load(g->m, R->o, &err) == 0;
  g->st->load_s = support_seconds() - t_load;
  rt_dev_bind(prev);
  const char *e = g->dev ? rg_dev_error(g->dev) : NULL;
  if (!loaded || e) {
    run_fail(R, "rank %d: %s", g->rank, e ? e : strbuf_cstr(&err));
    strbuf_free(&err);
    return false;
  }
  if (R->o->check) { /* on the CPU, keeping every activation, as the cpu backend's */
    rt_opts ro = *mo;
    ro.no_recompute = true;
    g->ref = rt_model_new(s, &ro, &err);
    for (int i = 0; g->ref && i < s->nstages; i++) rt_model_init_stage(g->ref, i);
    if (!g->ref || rt_ckpt_load(g->ref, R->o, &err) != 0) {
      run_fail(R, "rank %d: --check's reference: %s", g->rank, strbuf_cstr(&err));
      strbuf_free(&err);
      return false;
    }
  }
  strbuf_free(&err);
  int ns = g->p->nslots ? g->p->nslots : 1;
  g->buf = xcalloc((size_t)ns, sizeof *g->buf);
  g->ready = xcalloc((size_t)ns, sizeof *g->ready);
  g->done = xcalloc((size_t)ns, sizeof *g->done);
  g->paired = xcalloc((size_t)ns, sizeof *g->paired);
  g->posted_at = xcalloc((size_t)ns, sizeof *g->posted_at);
  size_t *floats = xcalloc((size_t)ns, sizeof *floats);
  for (int a = 0; a < g->p->ncode; a++)
    for (int k = 0; k < be_ops[g->p->code[a].op].nops; k++) {
      be_tensor_ref t;
      if (!be_operand_tensor(s, &g->p->code[a], k, &t)) continue;
      size_t n = rt_tensor_floats(g->m, t.kind, t.stage);
      if (n > floats[g->p->code[a].a[k]]) floats[g->p->code[a].a[k]] = n;
    }
  bool ok = true;
  for (int i = 0; i < g->p->nslots; i++) {
    if (floats[i] && cudaMalloc((void **)&g->buf[i], floats[i] * sizeof(float)) != cudaSuccess)
      ok = false;
    cudaEventCreateWithFlags(&g->ready[i], cudaEventDisableTiming);
    cudaEventCreateWithFlags(&g->done[i], cudaEventDisableTiming);
  }
  free(floats);
  for (int a = 0; a < g->p->ncode && !g->tie_buf; a++) { /* a TIE with another rank */
    const be_inst *in = &g->p->code[a];
    if (in->op != BE_OP_TIE || s->stages[in->a[1]].rank == g->rank) continue;
    size_t n = 0;
    rt_model_tied_grad(g->m, in->a[0], &n);
    if (cudaMalloc((void **)&g->tie_buf, (n ? n : 1) * sizeof(float)) != cudaSuccess) {
      g->tie_buf = NULL;
      ok = false;
      break;
    }
    rt_model_count(g->m, RT_MEM_WORKSPACE, (double)n * sizeof(float)); /* as the cpu's */
  }
  g->mark = xcalloc((size_t)(g->p->ncode ? g->p->ncode : 1), sizeof *g->mark);
  for (int a = 0; a < g->p->ncode; a++) cudaEventCreate(&g->mark[a]);
  cudaEventCreate(&g->start);
  cudaEventCreateWithFlags(&g->sync, cudaEventDisableTiming);
  cudaEventCreateWithFlags(&g->tied, cudaEventDisableTiming);
  cublasCreate(&g->blas);
  if (!ok) run_fail(R, "rank %d: out of device memory for its buffers", g->rank);
  return ok;
}

static void grank_free(grank *g) {
  if (!g->p) return;
  for (int i = 0; g->buf && i < g->p->nslots; i++) { /* NULL when grank_init stopped early */
    cudaFree(g->buf[i]);
    cudaEventDestroy(g->ready[i]);
    cudaEventDestroy(g->done[i]);
  }
  for (int a = 0; a < g->p->ncode && g->mark; a++) cudaEventDestroy(g->mark[a]);
  if (g->start) cudaEventDestroy(g->start);
  if (g->sync) cudaEventDestroy(g->sync);
  if (g->tied) cudaEventDestroy(g->tied);
  cudaFree(g->tie_buf); /* NULL is fine */
  if (g->blas) cublasDestroy(g->blas);
  if (g->m) { /* its tensors are on its device */
    const rt_dev *prev = rt_dev_bind(rg_dev_kernels(g->dev));
    rt_model_free(g->m);
    rt_dev_bind(prev);
  }
  rg_dev_free(g->dev);
  if (g->compute) cudaStreamDestroy(g->compute);
  if (g->comm) cudaStreamDestroy(g->comm);
  if (g->copy) cudaStreamDestroy(g->copy);
  if (g->st) g->st->host_bytes = g->host.peak;
  rt_host_free(&g->host);
  free(g->buf);
  free(g->ready);
  free(g->done);
  free(g->paired);
  free(g->posted_at);
  free(g->mark);
  rt_model_free(g->ref);
}

#ifdef OCTO_HAVE_NCCL
/* nccl backend: a barrier of the save of step 'step' ('which': "first", "second") over every
 * process, MPI_Ibarrier polled until --timeout. Returns 0, or 1 with the reason in err, worded
 * as the cpu backend's (rt_ckpt_save). */
static int save_barrier(gpu_run *R, int step, const char *which, strbuf *err) {
  int rc = rt_mpi_barrier(R->o->timeout);
  if (rc == 1)
    strbuf_printf(err, "--save at step %d: the checkpoint's %s barrier did not complete within "
                  "%g s", step, which, R->o->timeout);
  else if (rc != 0)
    strbuf_printf(err, "--save at step %d: the checkpoint's %s barrier failed (MPI_Ibarrier)",
                  step, which);
  return rc != 0;
}
#endif

/* Save the checkpoint of training step 'step' (steps taken; every rank's step complete) into
 * o->save with checkpoint.c, each rank's state read from its GPU through host buffers (its
 * device bound), so that the files are the cpu backends' byte for byte: rt_ckpt_save_begin on
 * rank 0 of replica 0, rt_ckpt_save_rank on every rank of replica 0, rt_ckpt_save_end on rank 0
 * of replica 0 -- in turn on the cuda backend (every rank in this process), between two
 * barriers on nccl (as rt_ckpt_save). A rank whose GPU failed while it was read stops the save
 * before the rename (DIR/latest keeps the previous checkpoint). A failure fails the run
 * (R->output when a file could not be written); rank 0 of replica 0 counts the save. */
static void save_step(gpu_run *R, int step) {
  strbuf err = {0};
  double t0 = support_seconds();
  grank *lead = NULL; /* rank 0 of replica 0, when in this process */
  for (int i = 0; i < R->n; i++)
    if (R->g[i].rank == 0 && R->g[i].replica == 0) lead = &R->g[i];
  int rc = lead ? rt_ckpt_save_begin(R->o, step, &err) : 0, who = 0;
#ifdef OCTO_HAVE_NCCL
  if (rc == 0 && R->nccl) rc = save_barrier(R, step, "first", &err);
#endif
  for (int i = 0; i < R->n && rc == 0; i++) {
    grank *g = &R->g[i];
    if (g->replica != 0) continue;
    who = g->rank;
    const rt_dev *prev = rt_dev_bind(rg_dev_kernels(g->dev));
    rc = rt_ckpt_save_rank(R->s, g->m, g->rank, step, R->o, &err);
    rt_dev_bind(prev);
    const char *e = rg_dev_error(g->dev);
    if (rc == 0 && e) {
      strbuf_printf(&err, "--save at step %d: reading its state from the GPU: %s", step, e);
      rc = 1;
    }
  }
#ifdef OCTO_HAVE_NCCL
  if (rc == 0 && R->nccl) rc = save_barrier(R, step, "second", &err);
#endif
  if (rc == 0 && lead) {
    who = 0;
    rc = rt_ckpt_save_end(R->s, lead->m, step, R->mo, R->o, &err);
  }
  if (rc != 0 && !failed(R)) {
    R->output = rc < 0;
    run_fail(R, "rank %d: %s", who, strbuf_cstr(&err));
  } else if (rc == 0 && lead) {
    lead->st->saved_step = step;
    lead->st->saves++;
    lead->st->save_s += support_seconds() - t0;
  }
  strbuf_free(&err);
}

/* Run this run's steps (training steps R->first + 1 .. o->steps): enqueue each (cooperatively for
 * cuda), let the watchdog declare it done, collect its figures, then save a checkpoint when
 * --save asks for one after it (--save-every, and the last step). */
static void run_steps(gpu_run *R) {
  const be_stream *s = R->s;
  int steps = (R->o->steps > 0 ? R->o->steps : 1) - R->first; /* this run's */
  for (int k = 0; k < steps && !failed(R); k++) {
    int step = R->first + k; /* the training step: its data; k: its index in the figures */
    for (int i = 0; i < R->n; i++) {
      grank *g = &R->g[i];
      if (g->ref) g->st->ref_loss[k] = rt_reference_step(g->ref, step, s->replicas);
      rt_model_set_step(g->m, step, g->replica);
      g->loss = 0;
      cudaEventRecord(g->start, g->compute);
      g->pc = 0;
      g->at_reduce = g->at_tie = false;
      __atomic_store_n(&g->enqueued, 0, __ATOMIC_RELEASE);
    }
    /* The watchdog watches the step while it is enqueued, so that a host blocked in a CUDA or
     * NCCL call is caught too. */
    pthread_mutex_lock(&R->mu);
    R->step = step;
    R->step_done = false;
    pthread_cond_broadcast(&R->cv);
    pthread_mutex_unlock(&R->mu);
    if (R->nccl) {
      step_nccl(R, &R->g[0], step);
    } else {
      bool left = true;
      while (left && !failed(R)) {
        bool moved = false;
        left = false;
        for (int i = 0; i < R->n; i++) {
          grank *g = &R->g[i];
          while (g->pc < g->p->ncode && !g->at_reduce && !g->at_tie && step_cuda(R, g, step))
            moved = true;
          if (g->pc < g->p->ncode) left = true;
        }
        if (left && !moved) {
          for (int i = 0; i < R->n; i++) {
            grank *g = &R->g[i];
            if (g->pc >= g->p->ncode) continue;
            char what[120] = "";
            if (g->p->code[g->pc].op == BE_OP_WAIT)
              describe(what, sizeof what, g->p, g->posted_at[g->p->code[g->pc].a[0]]);
            if (g->p->code[g->pc].op == BE_OP_TIE) describe_tie(what, sizeof what, R, g, g->pc);
            run_fail(R, "rank %d at %04d (%s)%s%s: no rank can go on (the stream deadlocks)",
                     g->rank, g->pc, be_ops[g->p->code[g->pc].op].name, what[0] ? ": " : "",
                     what);
          }
        }
      }
    }
    pthread_mutex_lock(&R->mu);
    while (!R->step_done && !failed(R)) pthread_cond_wait(&R->cv, &R->mu);
    R->step = -1;
    pthread_mutex_unlock(&R->mu);
    if (!failed(R)) collect_step(R, k);
    for (int i = 0; i < R->n; i++) {
      const char *e = rg_dev_error(R->g[i].dev);
      if (e) run_fail(R, "rank %d: %s", R->g[i].rank, e);
    }
    bool last = k == steps - 1,
         every = R->o->save_every > 0 && (step + 1) % R->o->save_every == 0;
    if (R->o->save && !failed(R) && (last || every)) save_step(R, step + 1);
  }
}

/* Run R (its ranks set up) with the watchdog; fills the ranks' stats status. */
static void run_all(gpu_run *R) {
  pthread_mutex_init(&R->mu, NULL);
  pthread_cond_init(&R->cv, NULL);
  R->step = -1;
  pthread_t th;
  bool watched = pthread_create(&th, NULL, watchdog, R) == 0;
  if (!watched) run_fail(R, "cannot start the watchdog thread");
  else run_steps(R);
  pthread_mutex_lock(&R->mu);
  R->stop = true;
  pthread_cond_broadcast(&R->cv);
  pthread_mutex_unlock(&R->mu);
  if (watched) pthread_join(th, NULL);
  pthread_cond_destroy(&R->cv);
  pthread_mutex_destroy(&R->mu);
}

/* ---- The cuda backend's profiler ------------------------------------------------------------ */

/* One-way time of a device-to-device copy of 'bytes' on stream cs (median of reps, each from an
 * idle stream to its end), the cuda backend's message. */
static double prof_copy(cudaStream_t cs, void *dst, const void *src, size_t bytes, int reps) {
  double t[10];
  int n = reps < 10 ? reps : 10;
  for (int r = 0; r < n; r++) {
    cudaStreamSynchronize(cs);
    double t0 = support_seconds();
    cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cs);
    cudaStreamSynchronize(cs);
    t[r] = support_seconds() - t0;
  }
  return rt_median(t, n);
}

int rt_profile_cuda(const be_stream *s, const rt_opts *mo, bool bf16, strbuf *json, strbuf *err) {
  rg_dev *dev = rg_dev_new(0, NULL, bf16, err);
  if (!dev) return -1;
  const rt_dev *prev = rt_dev_bind(rg_dev_kernels(dev));
  rt_model *m = rt_model_new(s, mo, err);
  rt_layer_cost *costs = xcalloc((size_t)(s->nlayers ? s->nlayers : 1), sizeof *costs);
  double optim = 0, lat = 0, bw = 0;
  if (m) {
    rt_profile_layers(m, 0, 1, costs);
    rt_profile_fill(m, costs);
    optim = rt_model_optimizer_rate(m);
    size_t big = 8;
    for (int i = 0; i < s->nlayers; i++)
      if (costs[i].out_bytes > (double)big) big = (size_t)costs[i].out_bytes;
    char *a = rt_dev_malloc(big), *b = rt_dev_malloc(big);
    cudaStream_t cs = NULL;
    if (a && b && cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking) == cudaSuccess) {
      lat = prof_copy(cs, b, a, 8, 10);
      double t = prof_copy(cs, b, a, big, 5) - lat;
      bw = t > 0 ? (double)(big - 8) / t : 1e12;
      cudaStreamDestroy(cs);
    }
    rt_dev_mfree(a);
    rt_dev_mfree(b);
  }
  const char *e = rg_dev_error(dev);
  if (m && e) strbuf_printf(err, "GPU 0: %s", e);
  int rc = m && !e ? 0 : -1;
  if (rc == 0) rt_profile_json(s, rt_model_scale(m), costs, "cuda", lat, bw, optim, json);
  rt_model_free(m);
  rt_dev_bind(prev);
  rg_dev_free(dev);
  free(costs);
  return rc;
}

int rt_run_cuda(const be_stream *s, const rt_opts *mo, const rt_run_opts *o, bool bf16,
                rt_rank_stats *stats) {
  int ndev = 0;
  int steps = (o->steps > 0 ? o->steps : 1) - o->first_step; /* this run's */
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    rt_rank_stats_init(&stats[0], 0, 0, steps);
    snprintf(stats[0].err, sizeof stats[0].err, "no CUDA device is visible");
    stats[0].status = RT_FAILED;
    return -1;
  }
  gpu_run R;
  memset(&R, 0, sizeof R);
  R.s = s;
  R.mo = mo;
  R.o = o;
  R.first = o->first_step;
  R.n = s->nranks * s->replicas;
  R.g = xcalloc((size_t)R.n, sizeof *R.g);
  chans = xcalloc((size_t)s->replicas * s->nranks * s->nranks, sizeof *chans);
  bool ok = true;
  for (int w = 0; w < R.n; w++) {
    rt_rank_stats_init(&stats[w], w % s->nranks, w / s->nranks, steps);
    stats[w].scale = mo->scale;
    R.g[w].rank = w % s->nranks;
    R.g[w].replica = w / s->nranks;
    R.g[w].st = &stats[w];
  }
  for (int w = 0; w < R.n && ok; w++) ok = grank_init(&R, &R.g[w], 0, bf16, mo);
  if (ok) run_all(&R);
  if (failed(&R)) { /* RT_OUTPUT: a checkpoint that cannot be written, exit 1 as on the cpu */
    snprintf(stats[0].err, sizeof stats[0].err, "%s", R.why);
    stats[0].status = R.output ? RT_OUTPUT : RT_FAILED;
  }
  cudaDeviceSynchronize();
  for (int w = 0; w < R.n; w++) grank_free(&R.g[w]);
  for (size_t i = 0; i < (size_t)s->replicas * s->nranks * s->nranks; i++) {
    free(chans[i].s);
    free(chans[i].r);
  }
  free(chans);
  chans = NULL;
  free(R.g);
  return failed(&R) ? -1 : 0;
}

#ifdef OCTO_HAVE_NCCL
rt_status rt_nccl_run(const be_stream *s, const char *path, const rt_opts *mo,
                      const rt_run_opts *o, bool bf16, const char *trace_path) {
  rt_status rc = RT_STATUS_OK;
  int me, world;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  /* --init, --resume, --save: checked in every process, as rt_mpi_run does (the same verdict
   * everywhere: rank 0 says it); a resumed run takes the checkpoint's scale */
  rt_opts mo1 = *mo;
  rt_run_opts o1 = *o;
  if (mo1.scale == 0 && s->scale > 0) mo1.scale = s->scale; /* where its costs were measured */
  strbuf cerr = {0};
  if (rt_ckpt_prepare(s, &mo1, &o1, &cerr) != 0) {
    if (me == 0) fprintf(stderr, "octo-run: error: %s\n", strbuf_cstr(&cerr));
    strbuf_free(&cerr);
    return RT_STATUS_BAD_INPUT;
  }
  strbuf_free(&cerr);
  if (mo1.scale == 0) mo1.scale = 1; /* GPUs run the real size */
  mo = &mo1;
  o = &o1;
  /* Local rank: the processes on this machine, in world order. */
  MPI_Comm node;
  rt_mpi_watch(s, o->timeout, "the split of the world by node (MPI_Comm_split_type)");
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, me, MPI_INFO_NULL, &node);
  rt_mpi_watch(s, 0, NULL);
  int local = 0, ndev = 0;
  MPI_Comm_rank(node, &local);
  MPI_Comm_free(&node);
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    fprintf(stderr, "octo-run: error: process %d: no CUDA device is visible\n", me);
    rc = RT_STATUS_BAD_INPUT;
  }
  int worst = rc; /* statuses as they travel: the larger is the worse of OK and BAD_INPUT */
  rt_mpi_watch(s, o->timeout, "the check for a CUDA device on every process (MPI_Allreduce)");
  int mine = rc;
  MPI_Allreduce(&mine, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  rt_mpi_watch(s, 0, NULL);
  if (worst != RT_STATUS_OK) return (rt_status)worst;
  int device = local % ndev;
  cudaSetDevice(device);
  int rank = me % s->nranks, replica = me / s->nranks;
  int steps = (o->steps > 0 ? o->steps : 1) - o->first_step; /* this run's */
  gpu_run R;
  memset(&R, 0, sizeof R);
  R.s = s;
  R.mo = mo;
  R.o = o;
  R.first = o->first_step;
  R.n = 1;
  R.nccl = true;
  R.device = device;
  R.g = xcalloc(1, sizeof *R.g);
  rt_rank_stats st;
  rt_rank_stats_init(&st, rank, replica, steps);
  st.scale = mo->scale;
  grank *g = &R.g[0];
  g->rank = rank;
  g->replica = replica;
  g->st = &st;
  /* Communicators: the world for point-to-point, and one per pipeline rank for the all-reduce;
   * NCCL ids made on the first process of each and broadcast with MPI. */
  /* Nonblocking: every call returns at once (ncclInProgress) and is settled against the deadline
   * (nccl_settle), so that a peer that stopped cannot block this process forever. */
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclUniqueId id;
  if (me == 0) ncclGetUniqueId(&id);
  rt_mpi_watch(s, o->timeout, "the broadcast of the NCCL id (MPI_Bcast)");
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  rt_mpi_watch(s, 0, NULL);
  ncclResult_t e = ncclCommInitRankConfig(&g->pipe, world, id, me, &config);
  if (e == ncclInProgress) e = nccl_settle(NULL, g->pipe, support_seconds() + o->timeout);
  MPI_Comm group;
  rt_mpi_watch(s, o->timeout, "making the replicas' communicator (MPI_Comm_split)");
  MPI_Comm_split(MPI_COMM_WORLD, rank, replica, &group);
  rt_mpi_watch(s, 0, NULL);
  if (e == ncclSuccess && s->replicas > 1) {
    ncclUniqueId rid;
    if (replica == 0) ncclGetUniqueId(&rid);
    rt_mpi_watch(s, o->timeout, "the broadcast of the replicas' NCCL id (MPI_Bcast)");
    MPI_Bcast(&rid, sizeof rid, MPI_BYTE, 0, group);
    rt_mpi_watch(s, 0, NULL);
    e = ncclCommInitRankConfig(&g->reduce, s->replicas, rid, replica, &config);
    if (e == ncclInProgress) e = nccl_settle(NULL, g->reduce, support_seconds() + o->timeout);
  }
  MPI_Comm_free(&group);
  if (e != ncclSuccess) {
    if (e == ncclInProgress)
      fprintf(stderr, "octo-run: error: rank %d: NCCL initialization did not complete within "
              "%g s\n", rank, o->timeout);
    else
      fprintf(stderr, "octo-run: error: rank %d: NCCL initialization failed: %s\n", rank,
              ncclGetErrorString(e));
    fflush(stderr);
    rt_mpi_abort(RT_STATUS_RUN_FAILED);
  }
  if (grank_init(&R, g, device, bf16, mo)) {
    /* Warm up every peer pair this rank talks to before timing (NCCL connects a pair on its
     * first message): one float each way with every peer, in one group. The pairs are
     * symmetric: a stage boundary carries activations one way and gradients the other. */
    bool *peer = xcalloc((size_t)s->nranks, sizeof *peer);
    for (int a = 0; a < g->p->ncode; a++) {
      const be_inst *in = &g->p->code[a];
      if (in->op == BE_OP_SEND || in->op == BE_OP_RECV) peer[in->a[0]] = true;
      if (in->op == BE_OP_TIE && s->stages[in->a[1]].rank != rank) /* its twin talks back */
        peer[s->stages[in->a[1]].rank] = true;
    }
    float *warm = NULL;
    cudaMalloc((void **)&warm, 2 * (size_t)s->nranks * sizeof *warm);
    ncclGroupStart();
    for (int q = 0; q < s->nranks; q++)
      if (peer[q] && warm) {
        ncclSend(warm + 2 * q, 1, ncclFloat32, replica * s->nranks + q, g->pipe, g->comm);
        ncclRecv(warm + 2 * q + 1, 1, ncclFloat32, replica * s->nranks + q, g->pipe, g->comm);
      }
    double until = support_seconds() + o->timeout;
    e = ncclGroupEnd();
    if (e == ncclInProgress) e = nccl_settle(NULL, g->pipe, until);
    cudaError_t ce = cudaErrorNotReady;
    while (e == ncclSuccess && (ce = cudaStreamQuery(g->comm)) == cudaErrorNotReady &&
           support_seconds() <= until) {
      ncclCommGetAsyncError(g->pipe, &e);
      if (e == ncclInProgress) e = ncclSuccess;
      struct timespec nap = {0, 100000}; /* 0.1 ms */
      nanosleep(&nap, NULL);
    }
    if (e != ncclSuccess || ce != cudaSuccess)
      run_fail(&R, "rank %d: the warm-up messages with its peers %s", rank,
               e != ncclSuccess ? ncclGetErrorString(e)
               : ce == cudaErrorNotReady ? "did not complete within the timeout"
                                          : cudaGetErrorString(ce));
    else if (rt_mpi_barrier(o->timeout) != 0)
      run_fail(&R, "rank %d: the barrier before the first step did not complete within %g s",
               rank, o->timeout);
    if (!failed(&R)) run_all(&R);
    cudaFree(warm);
    free(peer);
  }
  if (failed(&R)) { /* a checkpoint that cannot be written: exit 1, as on the mpi backend */
    fprintf(stderr, "octo-run: error: %s\n", R.why);
    fflush(stderr);
    rt_mpi_abort(R.output ? RT_STATUS_BAD_INPUT : RT_STATUS_RUN_FAILED);
  }
  char what[64];
  snprintf(what, sizeof what, "nccl (%d GPUs)", world);
  rc = rt_mpi_report(s, o, &st, path, what, trace_path, NULL); /* no --dump on GPUs */
  cudaDeviceSynchronize();
  /* Nonblocking communicators: finalize (settled), then destroy. */
  double until = support_seconds() + o->timeout;
  if (ncclCommFinalize(g->pipe) == ncclInProgress) nccl_settle(NULL, g->pipe, until);
  if (g->reduce && ncclCommFinalize(g->reduce) == ncclInProgress)
    nccl_settle(NULL, g->reduce, until);
  ncclCommDestroy(g->pipe);
  if (g->reduce) ncclCommDestroy(g->reduce);
  grank_free(g);
  free(R.g);
  rt_rank_stats_free(&st);
  return rc;
}
#endif
