/* comm_mpi.c -- the mpi backend: one process per rank of every replica (world rank = replica x
 * nranks + rank), messages with MPI_Isend/MPI_Irecv on a private communicator (tags encode the
 * tensor, stage and microbatch, so pairing never depends on arrival order), WAIT as MPI_Test
 * polling until the deadline, the all-reduce over replicas with MPI_Iallreduce on a communicator
 * per pipeline rank, polled against the same deadline, and so are the report's, the memory
 * check's and the profiler's collectives; MPI_Comm_split and MPI_Comm_split_type, which have no
 * nonblocking form, run under a watchdog timer with the same deadline, and so do MPI_Init and
 * MPI_Finalize, which the tool calls between rt_mpi_open and rt_mpi_check, and between
 * rt_mpi_close and rt_mpi_closed. A failing rank prints its error and aborts the job
 * (rt_mpi_abort: MPI_Abort with the exit status the tool gave its outcome); every other process,
 * ended by mpirun with SIGTERM, says where it stopped and exits with the status of
 * RT_STATUS_RUN_FAILED, so that the job's status is the same whichever rank fails: the one
 * documented exception to "library code returns" (rt_set_exit_codes in runtime.h). rt_mpi_run is
 * the mpi backend's run: set-up, checks, the run, the gathered report; rt_mpi_profile its
 * profiler. */
#include <math.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "kernels.h"
#include "runtime.h"

/* This process's view of the job. */
typedef struct mpi_comm {
  MPI_Comm pipe;     /* the world, duplicated: point-to-point messages */
  MPI_Comm replicas; /* the processes of the same pipeline rank: the all-reduce */
  int base;          /* world rank of this replica's rank 0 */
  int nmb;           /* microbatches: tag encoding */
  int replica;       /* this process's replica */
  int nreplicas;     /* replicas of the stream (messages name the replica when > 1) */
  int nstages;       /* stages: tag encoding (a TIE's tags follow the others) */
} mpi_comm;

/* What the SIGTERM handler reports: set up by rt_mpi_open, rt_mpi_check and rt_mpi_run, read
 * only in the handler. */
static struct {
  int named;                      /* rank and replica are known (the stream was read) */
  int rank, replica, replicas;    /* this process's pipeline rank and replica; the replicas */
  const be_program *prog;         /* its program while the interpreter runs it, else NULL */
  const volatile sig_atomic_t *at; /* the interpreter's address (rt_comm.at), or NULL */
  const char *phase;              /* where rt_mpi_close left it (" in the closing barrier ..."), or
                                     NULL */
  volatile sig_atomic_t quiet;    /* this process already said why it ends: exit silently */
  double timeout;                 /* --timeout: the closing barrier's and MPI_Finalize's */
} mp_term = {0, 0, 0, 1, NULL, NULL, NULL, 0, 0};

/* Append decimal v (>= 0), at least 'width' digits, to out at *n (async-signal-safe). */
static void put_num(char *out, size_t *n, size_t cap, long v, int width) {
  char d[24];
  int k = 0;
  do {
    d[k++] = (char)('0' + v % 10);
    v /= 10;
  } while (v > 0 || k < width);
  while (k > 0 && *n + 1 < cap) out[(*n)++] = d[--k];
}

/* Append text to out at *n (async-signal-safe). */
static void put_str(char *out, size_t *n, size_t cap, const char *text) {
  while (*text && *n + 1 < cap) out[(*n)++] = *text++;
}

/* SIGTERM: mpirun ends the job because another process failed or exited. Say where this rank
 * stopped ("rank 1 at 0005 (WAIT): stopped ..."), then exit with the status of
 * RT_STATUS_RUN_FAILED. */
static void mp_on_term(int sig) {
  (void)sig;
  if (!mp_term.quiet) {
    char msg[256];
    size_t n = 0;
    put_str(msg, &n, sizeof msg, "octo-run: error: ");
    if (mp_term.replicas > 1) {
      put_str(msg, &n, sizeof msg, "replica ");
      put_num(msg, &n, sizeof msg, mp_term.replica, 1);
      put_str(msg, &n, sizeof msg, ": ");
    }
    put_str(msg, &n, sizeof msg, "rank ");
    put_num(msg, &n, sizeof msg, mp_term.rank, 1);
    int at = mp_term.at ? (int)*mp_term.at : -1;
    if (mp_term.prog && at >= 0 && at < mp_term.prog->ncode) {
      put_str(msg, &n, sizeof msg, " at ");
      put_num(msg, &n, sizeof msg, at, 4);
      put_str(msg, &n, sizeof msg, " (");
      put_str(msg, &n, sizeof msg, be_ops[mp_term.prog->code[at].op].name);
      put_str(msg, &n, sizeof msg, ")");
    } else if (at == RT_AT_SAVE) {
      put_str(msg, &n, sizeof msg, " in a checkpoint's save");
    }
    if (mp_term.phase) put_str(msg, &n, sizeof msg, mp_term.phase);
    put_str(msg, &n, sizeof msg, ": stopped because another process failed and mpirun ended "
            "the job\n");
    ssize_t w = write(STDERR_FILENO, msg, n);
    (void)w;
  }
  _exit(rt_exit_code(RT_STATUS_RUN_FAILED));
}

/* Print "octo-run: error: [replica Q: ]why" for this process, then stay quiet when mpirun ends
 * it. */
static void mp_say(const mpi_comm *c, const char *why) {
  mp_term.quiet = 1;
  if (c->nreplicas > 1)
    fprintf(stderr, "octo-run: error: replica %d: %s\n", c->replica, why);
  else
    fprintf(stderr, "octo-run: error: %s\n", why);
  fflush(stderr);
}

/* Poll q with MPI_Test until it completes or 'timeout' seconds pass: 0 completed, 1 timed out,
 * -1 MPI error (err says so). */
static int mp_poll(MPI_Request *q, double timeout, strbuf *err) {
  double until = support_seconds() + timeout;
  int flag = 0;
  for (long spin = 0; !flag; spin++) {
    if (MPI_Test(q, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      if (err) strbuf_puts(err, "MPI_Test failed");
      return -1;
    }
    if (flag) break;
    if (support_seconds() > until) return 1;
    if (spin > 1000) {
      struct timespec nap = {0, 20000}; /* 20 us once the request is late */
      nanosleep(&nap, NULL);
    }
  }
  return 0;
}

/* Tag of a message: unique per (kind, stage, microbatch) within a step. */
static int tag_of(const mpi_comm *c, be_tensor_ref t) {
  if (t.kind == BE_T_TIED) return (int)(c->nstages * (int64_t)c->nmb * 2 + t.stage);
  return (int)((t.stage * (int64_t)c->nmb + t.mb) * 2 + (t.kind == BE_T_GRAD));
}

static int mp_isend(void *ctx, int peer, be_tensor_ref tag, const void *buf, size_t bytes,
                    rt_req *r) {
  mpi_comm *c = ctx;
  MPI_Request *q = xmalloc(sizeof *q);
  r->impl = q;
  r->done = false;
  return MPI_Isend(buf, (int)bytes, MPI_BYTE, c->base + peer, tag_of(c, tag), c->pipe, q) ==
                 MPI_SUCCESS
             ? 0
             : -1;
}

static int mp_irecv(void *ctx, int peer, be_tensor_ref tag, void *buf, size_t bytes, rt_req *r) {
  mpi_comm *c = ctx;
  MPI_Request *q = xmalloc(sizeof *q);
  r->impl = q;
  r->done = false;
  return MPI_Irecv(buf, (int)bytes, MPI_BYTE, c->base + peer, tag_of(c, tag), c->pipe, q) ==
                 MPI_SUCCESS
             ? 0
             : -1;
}

/* rc, this process's status once decided: when it is not RT_STATUS_OK, the process is about to
 * end, mpirun may end it first (another process exited first with its status), and it has said
 * what it had to: stay quiet. */
static rt_status mp_decided(rt_status rc) {
  if (rc != RT_STATUS_OK) mp_term.quiet = 1;
  return rc;
}

void rt_mpi_abort(rt_status st) { MPI_Abort(MPI_COMM_WORLD, rt_exit_code(st)); }

/* Defined with the watchdog below. */
static void mp_arm(double timeout);
/* The watchdog's message, formatted before it is armed (the SIGALRM handler only writes it). */
static struct {
  char msg[320];
  size_t len;
} mp_watch;

void rt_mpi_close(void) {
  int me = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  char who[64];
  if (!mp_term.named)
    snprintf(who, sizeof who, "process %d", me);
  else if (mp_term.replicas > 1)
    snprintf(who, sizeof who, "replica %d: rank %d", mp_term.replica, mp_term.rank);
  else
    snprintf(who, sizeof who, "rank %d", mp_term.rank);
  double timeout = mp_term.timeout > 0 ? mp_term.timeout : HUGE_VAL;
  if (!mp_term.quiet) {
    /* This process's run succeeded: wait until every other's did before the shut-down. Once a
     * process has died, MPI_Finalize may return as if nothing happened (its fence fails), and
     * this process would end with status 0 without a word; in the barrier it is ended by
     * mpirun and says so. */
    mp_term.phase = " in the closing barrier (after its run)";
    MPI_Request q;
    int rc = MPI_Ibarrier(MPI_COMM_WORLD, &q) == MPI_SUCCESS ? mp_poll(&q, timeout, NULL) : -1;
    if (rc != 0) {
      mp_term.quiet = 1;
      if (rc == 1)
        fprintf(stderr, "octo-run: error: %s: the closing barrier (after its run) did not "
                "complete within %g s (another process stopped)\n", who, timeout);
      else
        fprintf(stderr, "octo-run: error: %s: the closing barrier (after its run) failed\n", who);
      fflush(stderr);
      rt_mpi_abort(RT_STATUS_RUN_FAILED);
    }
  }
  if (mp_term.timeout > 0) {
    snprintf(mp_watch.msg, sizeof mp_watch.msg, "octo-run: error: %s: the MPI shut-down "
             "(MPI_Finalize) did not complete within %g s (another process stopped or ended)\n",
             who, mp_term.timeout);
    mp_watch.len = strlen(mp_watch.msg);
    mp_arm(mp_term.timeout);
  }
  mp_term.phase = " in the MPI shut-down (MPI_Finalize)";
}

void rt_mpi_closed(void) {
  mp_arm(0);
  mp_term.quiet = 1;
}

int rt_mpi_barrier(double timeout) {
  MPI_Request q;
  if (MPI_Ibarrier(MPI_COMM_WORLD, &q) != MPI_SUCCESS) return -1;
  return mp_poll(&q, timeout, NULL);
}

static int mp_wait(void *ctx, rt_req *r, double timeout, strbuf *err) {
  (void)ctx;
  MPI_Request *q = r->impl;
  int rc = mp_poll(q, timeout, err);
  if (rc != 0) return rc;
  free(q);
  r->impl = NULL;
  r->done = true;
  return 0;
}

/* The barrier of every process (MPI_Ibarrier on the world, polled). */
static int mp_barrier(void *ctx, double timeout, strbuf *err) {
  (void)ctx;
  MPI_Request q;
  if (MPI_Ibarrier(MPI_COMM_WORLD, &q) != MPI_SUCCESS) {
    strbuf_puts(err, "MPI_Ibarrier failed");
    return -1;
  }
  return mp_poll(&q, timeout, err);
}

static int mp_allreduce(void *ctx, float *buf, size_t n, double timeout, strbuf *err) {
  mpi_comm *c = ctx;
  MPI_Request q;
  if (n > (size_t)INT32_MAX) {
    strbuf_printf(err, "%zu floats are more than one MPI call carries", n);
    return -1;
  }
  if (MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, c->replicas, &q) !=
      MPI_SUCCESS) {
    strbuf_puts(err, "MPI_Iallreduce failed");
    return -1;
  }
  return mp_poll(&q, timeout, err);
}

static void mp_fail(void *ctx, const char *why, rt_status st) {
  mp_say(ctx, why);
  rt_mpi_abort(st);
}

static void mp_die(void *ctx, const char *why) {
  mp_say(ctx, why);
  _Exit(rt_exit_code(RT_STATUS_RUN_FAILED)); /* a crash, as far as the other processes can tell */
}

static void mp_stop(void *ctx, const char *why) {
  mp_say(ctx, why);
  raise(SIGSTOP);
  _Exit(rt_exit_code(RT_STATUS_RUN_FAILED)); /* continued without being ended */
}

/* Nothing to forget: a rank leaves with every message completed, or the job is aborted. */
static void mp_leave(void *ctx) { (void)ctx; }

/* Doubles per layer cost (cost_pack): f, b, w, act, out, param, grad, measured. */
#define PROF_PER 8

/* c as PROF_PER doubles at d. */
static void cost_pack(const rt_layer_cost *c, double *d) {
  double v[PROF_PER] = {c->f, c->b, c->w, c->act_bytes, c->out_bytes, c->param_bytes,
                        c->grad_bytes, c->measured ? 1 : 0};
  memcpy(d, v, sizeof v);
}

/* The layer cost packed at d (cost_pack). */
static rt_layer_cost cost_unpack(const double *d) {
  return (rt_layer_cost){d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7] > 0};
}

/* Doubles before the per-step figures in a packed rank. */
#define PACK_HEAD (14 + RT_MEM_KINDS)

/* Doubles of a packed rank of a run of 'steps' steps of s, with calibrate. */
static int pack_size(const be_stream *s, int steps, bool calibrate) {
  return PACK_HEAD + 4 * steps + (calibrate ? PROF_PER * s->nlayers : 0);
}

/* The figures of one rank as doubles, for MPI_Gather: status, busy, wait, nev, BLAS time, peak
 * bytes, the reference's, whether the arena was the stream's, the optimizer's calibration time
 * and bytes, the checkpoints saved (count, last step, seconds), the seconds of --init's or
 * --resume's read, the peak bytes by kind, then per step the time, loss, reference loss and gradient
 * difference, then with calibrate (nlayers > 0) the timed cost of every layer (cost_pack). */
static void pack(const rt_rank_stats *st, int steps, int nlayers, double *d) {
  d[0] = st->status;
  d[1] = st->busy_s;
  d[2] = st->wait_s;
  d[3] = st->nev;
  d[4] = st->blas_s;
  d[5] = st->mem.total;
  d[6] = st->ref_bytes;
  d[7] = st->planned;
  d[8] = st->optim_s;
  d[9] = st->optim_bytes;
  d[10] = st->saves;
  d[11] = st->saved_step;
  d[12] = st->save_s;
  d[13] = st->load_s;
  for (int k = 0; k < RT_MEM_KINDS; k++) d[14 + k] = st->mem.kind[k];
  for (int k = 0; k < steps; k++) {
    d[PACK_HEAD + k] = st->step_s[k];
    d[PACK_HEAD + steps + k] = st->loss[k];
    d[PACK_HEAD + 2 * steps + k] = st->ref_loss[k];
    d[PACK_HEAD + 3 * steps + k] = st->grad_diff[k];
  }
  for (int i = 0; i < nlayers && st->timed; i++)
    cost_pack(&st->timed[i], d + PACK_HEAD + 4 * steps + (size_t)i * PROF_PER);
}

/* Pre: st's per-step arrays allocated (rt_rank_stats_init). With nlayers > 0, allocates
 * st->timed. */
static void unpack(rt_rank_stats *st, int steps, int nlayers, const double *d) {
  st->status = (int)d[0];
  st->busy_s = d[1];
  st->wait_s = d[2];
  st->nev = (int)d[3];
  st->blas_s = d[4];
  st->mem.total = d[5];
  st->ref_bytes = d[6];
  st->planned = d[7] != 0;
  st->optim_s = d[8];
  st->optim_bytes = d[9];
  st->saves = (int)d[10];
  st->saved_step = (int)d[11];
  st->save_s = d[12];
  st->load_s = d[13];
  for (int k = 0; k < RT_MEM_KINDS; k++) st->mem.kind[k] = d[14 + k];
  for (int k = 0; k < steps; k++) {
    st->step_s[k] = d[PACK_HEAD + k];
    st->loss[k] = d[PACK_HEAD + steps + k];
    st->ref_loss[k] = d[PACK_HEAD + 2 * steps + k];
    st->grad_diff[k] = d[PACK_HEAD + 3 * steps + k];
  }
  if (nlayers > 0) st->timed = xcalloc((size_t)nlayers, sizeof *st->timed);
  for (int i = 0; i < nlayers; i++)
    st->timed[i] = cost_unpack(d + PACK_HEAD + 4 * steps + (size_t)i * PROF_PER);
}

/* Complete collective q ('what': "the report's gather of the figures") within 'timeout' seconds
 * (the run's --timeout), or say so, naming this process's rank, and abort the job
 * (rt_mpi_abort with RT_STATUS_RUN_FAILED). */
static void collective_wait(MPI_Request *q, const be_stream *s, double timeout,
                            const char *what) {
  strbuf err = {0};
  int rc = mp_poll(q, timeout, &err);
  if (rc == 0) return;
  int me;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  mpi_comm c = {MPI_COMM_NULL, MPI_COMM_NULL, 0, 0, me / s->nranks, s->replicas, s->nstages};
  strbuf why = {0};
  strbuf_printf(&why, "rank %d: %s ", me % s->nranks, what);
  if (rc == 1)
    strbuf_printf(&why, "did not complete within %g s (another process stopped)", timeout);
  else
    strbuf_printf(&why, "failed: %s", strbuf_cstr(&err));
  mp_fail(&c, strbuf_cstr(&why), RT_STATUS_RUN_FAILED);
}

/* SIGALRM: a blocking MPI call under the watchdog outlived the deadline. Print the message and
 * exit with the status of RT_STATUS_RUN_FAILED: mpirun then ends the others, as after a process
 * that died. */
static void mp_on_alarm(int sig) {
  (void)sig;
  ssize_t w = write(STDERR_FILENO, mp_watch.msg, mp_watch.len);
  (void)w;
  _exit(rt_exit_code(RT_STATUS_RUN_FAILED));
}

/* Arm (timeout > 0) or disarm (0) the SIGALRM watchdog with the message in mp_watch. */
static void mp_arm(double timeout) {
  struct itimerval t;
  memset(&t, 0, sizeof t);
  if (timeout > 0) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = mp_on_alarm;
    sigaction(SIGALRM, &sa, NULL);
    t.it_value.tv_sec = (time_t)timeout;
    t.it_value.tv_usec = (suseconds_t)((timeout - (double)(time_t)timeout) * 1e6);
    if (t.it_value.tv_sec == 0 && t.it_value.tv_usec == 0) t.it_value.tv_usec = 1;
  }
  setitimer(ITIMER_REAL, &t, NULL);
  if (timeout <= 0) signal(SIGALRM, SIG_DFL);
}

void rt_mpi_watch(const be_stream *s, double timeout, const char *what) {
  if (timeout > 0) {
    int me;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    char replica[32] = "";
    if (s->replicas > 1) snprintf(replica, sizeof replica, "replica %d: ", me / s->nranks);
    snprintf(mp_watch.msg, sizeof mp_watch.msg,
             "octo-run: error: %srank %d: %s did not complete within %g s (another process "
             "stopped)\n", replica, me % s->nranks, what, timeout);
    mp_watch.len = strlen(mp_watch.msg);
  }
  mp_arm(timeout);
}

/* Inject o's fault when it is at 'place' (RT_PLACE_SETUP or RT_PLACE_END, named 'name') and
 * strikes this process: it dies or stops (and never returns then) with "rank R stopped at
 * NAME (before WHERE) as asked (--stop)". */
static void mp_inject_at(const be_stream *s, const rt_run_opts *o, int place, const char *name,
                         const char *where) {
  const rt_fault *f = &o->fault;
  int me;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  if (f->kind == RT_FAULT_NONE || f->place != place || me % s->nranks != f->rank ||
      me / s->nranks != f->replica)
    return;
  mpi_comm c = {MPI_COMM_NULL, MPI_COMM_NULL, 0, 0, me / s->nranks, s->replicas, s->nstages};
  char why[200];
  snprintf(why, sizeof why, "rank %d %s at %s (before %s) as asked (--%s)", f->rank,
           f->kind == RT_FAULT_DIE ? "died" : "stopped", name, where,
           f->kind == RT_FAULT_DIE ? "die" : "stop");
  if (f->kind == RT_FAULT_DIE)
    mp_die(&c, why);
  else
    mp_stop(&c, why);
}

rt_status rt_mpi_report(const be_stream *s, const rt_run_opts *o, const rt_rank_stats *mine,
                        const char *path, const char *backend, const char *trace_path,
                        const rt_opts *mo) {
  int me, world;
  rt_status rc = RT_STATUS_OK;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  int steps = (o->steps > 0 ? o->steps : 1) - o->first_step, per = pack_size(s, steps, o->calibrate);
  int nlayers = o->calibrate ? s->nlayers : 0;
  double *packed = xcalloc((size_t)per, sizeof *packed), *all = NULL;
  pack(mine, steps, nlayers, packed);
  if (me == 0) all = xcalloc((size_t)per * world, sizeof *all);
  MPI_Request q;
  MPI_Igather(packed, per, MPI_DOUBLE, all, per, MPI_DOUBLE, 0, MPI_COMM_WORLD, &q);
  collective_wait(&q, s, o->timeout, "the report's gather of the figures");
  int evbytes = (int)(mine->nev * sizeof(rt_event));
  int *counts = me == 0 ? xcalloc((size_t)world, sizeof *counts) : NULL;
  int *displs = me == 0 ? xcalloc((size_t)world, sizeof *displs) : NULL;
  MPI_Igather(&evbytes, 1, MPI_INT, counts, 1, MPI_INT, 0, MPI_COMM_WORLD, &q);
  collective_wait(&q, s, o->timeout, "the report's gather of the timelines");
  char *evs = NULL;
  if (me == 0) {
    long total = 0;
    for (int w = 0; w < world; w++) {
      displs[w] = (int)total;
      total += counts[w];
    }
    evs = xmalloc((size_t)(total ? total : 1));
  }
  MPI_Igatherv(mine->ev, evbytes, MPI_BYTE, evs, counts, displs, MPI_BYTE, 0, MPI_COMM_WORLD, &q);
  collective_wait(&q, s, o->timeout, "the report's gather of the timelines");
  if (me == 0) {
    rt_rank_stats *stats = xcalloc((size_t)world, sizeof *stats);
    for (int w = 0; w < world; w++) {
      rt_rank_stats_init(&stats[w], w % s->nranks, w / s->nranks, steps);
      unpack(&stats[w], steps, nlayers, all + (size_t)per * w);
      stats[w].scale = mine->scale; /* every process built the same model */
      stats[w].ev = (rt_event *)(evs + displs[w]);
    }
    strbuf out = {0}, errs = {0};
    printf("%s: %d rank%s x %d replica%s, %d stages, %d microbatches; backend %s, %d step%s, "
           "scale %d\n", path, (int)s->nranks, s->nranks == 1 ? "" : "s", (int)s->replicas,
           s->replicas == 1 ? "" : "s", (int)s->nstages, (int)s->nmb, backend, steps,
           steps == 1 ? "" : "s", mine->scale);
    rc = rt_report_run(s, o, stats, world, &out, &errs);
    fputs(strbuf_cstr(&out), stdout);
    fputs(strbuf_cstr(&errs), stderr);
    fflush(stdout);
    if (trace_path && rc != RT_STATUS_RUN_FAILED) {
      strbuf tr = {0};
      rt_trace(s, stats, world, &tr);
      strbuf why = {0};
      if (!support_write_file(trace_path, strbuf_cstr(&tr), tr.len, &why)) {
        fprintf(stderr, "octo-run: error: cannot write '%s': %s\n", trace_path, strbuf_cstr(&why));
        if (rc == RT_STATUS_OK) rc = RT_STATUS_BAD_INPUT;
      }
      strbuf_free(&why);
      strbuf_free(&tr);
    }
    if (o->calibrate && rc == RT_STATUS_OK) {
      rt_status wrc = rt_calibration_write(s, o, stats, world, mine->scale, "mpi");
      if (wrc != RT_STATUS_OK) rc = wrc;
    }
    if (rc == RT_STATUS_OK) rc = rt_dump_finish(s, mo); /* last: every file it names is there */
    for (int w = 0; w < world; w++) {
      stats[w].ev = NULL; /* owned by evs */
      rt_rank_stats_free(&stats[w]);
    }
    free(stats);
    strbuf_free(&out);
    strbuf_free(&errs);
  }
  int code = (int)rc; /* the status as it travels */
  MPI_Ibcast(&code, 1, MPI_INT, 0, MPI_COMM_WORLD, &q);
  collective_wait(&q, s, o->timeout, "the report's broadcast of the exit status");
  rc = mp_decided((rt_status)code);
  free(packed);
  free(all);
  free(counts);
  free(displs);
  free(evs);
  return rc;
}

/* This process's number in the job before MPI_Init, from the launcher's environment (Open
 * MPI, PMIx, MPICH), or -1 when none says. */
static long mp_env_rank(void) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *v = getenv(vars[i]);
    char *end;
    long r = v ? strtol(v, &end, 10) : -1;
    if (v && *v && !*end && r >= 0) return r;
  }
  return -1;
}

/* mpirun ends the others with SIGTERM when one process fails: make world process 'me' of s say
 * where it stopped (mp_on_term). */
static void mp_on_term_setup(const be_stream *s, long me) {
  long n = s->nranks > 0 ? s->nranks : 1;
  mp_term.named = 1;
  mp_term.replicas = s->replicas;
  mp_term.rank = (int)(me % n);
  mp_term.replica = (int)(me / n);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = mp_on_term;
  sigaction(SIGTERM, &sa, NULL);
}

be_stream *rt_mpi_open(const char *path, const rt_run_opts *o, strbuf *err) {
  be_stream *s = be_read_file(path, err); /* first: the start-up names the rank */
  long proc = mp_env_rank();
  mp_term.timeout = o ? o->timeout : 0;
  if (s && proc >= 0) mp_on_term_setup(s, proc); /* also while MPI starts */
  /* o's fault at 'init' strikes before MPI_Init: the others' watchdog ends them. */
  const rt_fault *f = o ? &o->fault : NULL;
  if (s && f && f->kind != RT_FAULT_NONE && f->place == RT_PLACE_INIT &&
      proc == (long)f->replica * s->nranks + f->rank) {
    mpi_comm c = {MPI_COMM_NULL, MPI_COMM_NULL, 0, 0, f->replica, s->replicas, s->nstages};
    char why[160];
    snprintf(why, sizeof why, "rank %d %s before the MPI start-up as asked (--%s)", f->rank,
             f->kind == RT_FAULT_DIE ? "died" : "stopped", f->kind == RT_FAULT_DIE ? "die" : "stop");
    if (f->kind == RT_FAULT_DIE)
      mp_die(&c, why);
    else
      mp_stop(&c, why);
  }
  /* MPI_Init under the watchdog: every process waits at most max(o->timeout,
   * RT_MPI_INIT_MIN_TIMEOUT) for the others to start. */
  double timeout = fmax(o ? o->timeout : 0, RT_MPI_INIT_MIN_TIMEOUT);
  char who[64] = ""; /* "[replica Q: ]rank R: " as the other messages, when known */
  if (s && proc >= 0 && s->replicas > 1)
    snprintf(who, sizeof who, "replica %ld: rank %ld: ", proc / s->nranks, proc % s->nranks);
  else if (s && proc >= 0)
    snprintf(who, sizeof who, "rank %ld: ", proc % s->nranks);
  snprintf(mp_watch.msg, sizeof mp_watch.msg, "octo-run: error: %sthe MPI start-up (MPI_Init) "
           "did not complete within %g s (another process stopped or did not start)\n", who,
           timeout);
  mp_watch.len = strlen(mp_watch.msg);
  mp_arm(timeout);
  return s;
}

rt_status rt_mpi_check(const be_stream *s, const strbuf *err, const char *path,
                       const rt_opts *mo) {
  mp_arm(0); /* MPI_Init returned */
  int me, world;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  rt_status rc = RT_STATUS_OK;
  if (s) mp_on_term_setup(s, me); /* the world's own numbering, now that MPI has it */
  if (!s) {
    if (me == 0) fprintf(stderr, "octo-run: error: %s\n", strbuf_cstr(err));
    rc = RT_STATUS_BAD_INPUT;
  } else if (world != s->nranks * s->replicas) {
    if (me == 0)
      fprintf(stderr, "octo-run: error: %s is a plan for %d rank%s x %d replica%s = %d processes, "
              "but mpirun started %d\n", path, (int)s->nranks, s->nranks == 1 ? "" : "s",
              (int)s->replicas, s->replicas == 1 ? "" : "s", (int)(s->nranks * s->replicas),
              world);
    rc = RT_STATUS_BAD_INPUT;
  }
  strbuf why = {0};
  if (rc == RT_STATUS_OK) {
    rt_model *probe = rt_model_new(s, mo, &why); /* the data file and the scale */
    if (!probe) {
      if (me == 0) fprintf(stderr, "octo-run: error: %s\n", strbuf_cstr(&why));
      rc = RT_STATUS_BAD_INPUT;
    }
    rt_model_free(probe);
  }
  strbuf_free(&why);
  if (rc == RT_STATUS_OK) {
    void *ub;
    int flag;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
    if (flag && (int64_t)s->nstages * s->nmb * 2 + s->nstages > (int64_t)*(int *)ub) {
      if (me == 0)
        fprintf(stderr, "octo-run: error: %d stages x %d microbatches need more message tags "
                "than this MPI offers (%d)\n", (int)s->nstages, (int)s->nmb, *(int *)ub);
      rc = RT_STATUS_BAD_INPUT;
    }
  }
  return mp_decided(rc);
}

/* The memory check (rt_mem_check) of the processes on this node, in every process; the first
 * process of a node that does not fit prints why. Returns the status for every process:
 * RT_STATUS_OK, or RT_STATUS_BAD_INPUT when some node does not fit. */
static rt_status mem_check(const be_stream *s, const rt_opts *mo, const rt_run_opts *o, strbuf *err) {
  int me, local, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm node;
  rt_mpi_watch(s, o->timeout, "the memory check's split of the world by node");
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, me, MPI_INFO_NULL, &node);
  rt_mpi_watch(s, 0, NULL);
  MPI_Comm_rank(node, &local);
  MPI_Comm_size(node, &n);
  int *members = xcalloc((size_t)n, sizeof *members);
  MPI_Request q;
  MPI_Iallgather(&me, 1, MPI_INT, members, 1, MPI_INT, node, &q);
  collective_wait(&q, s, o->timeout, "the memory check's gather of the node's processes");
  MPI_Comm_free(&node);
  rt_model *m = rt_model_new(s, mo, NULL); /* rt_mpi_check built one already: it cannot fail */
  /* statuses as they travel: the larger is the worse of OK and BAD_INPUT */
  int rc = m && rt_mem_check(s, m, o, members, n, err) != 0 ? RT_STATUS_BAD_INPUT : RT_STATUS_OK,
      worst;
  if (rc != RT_STATUS_OK && local == 0) fprintf(stderr, "octo-run: error: %s\n", strbuf_cstr(err));
  rt_model_free(m);
  free(members);
  MPI_Iallreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, &q);
  collective_wait(&q, s, o->timeout, "the memory check's verdict");
  return mp_decided((rt_status)worst);
}

rt_status rt_mpi_run(const be_stream *s, const char *path, const rt_opts *mo,
                     const rt_run_opts *o, const char *trace_path) {
  int me;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  int rank = me % s->nranks, replica = me / s->nranks;
  rt_opts mo1 = *mo;
  if (mo1.scale == 0 && s->scale > 0) mo1.scale = s->scale; /* where its costs were measured */
  mo = &mo1;
  rt_run_opts o1 = *o;
  strbuf err = {0};
  rt_status rc = mp_decided(rt_fault_resolve(s, &o1.fault, &err) == 0 &&
                                    rt_ckpt_prepare(s, &mo1, &o1, &err) == 0
                                ? RT_STATUS_OK
                                : RT_STATUS_BAD_INPUT);
  if (rc != RT_STATUS_OK) { /* every process finds it: rank 0 says it */
    if (me == 0) fprintf(stderr, "octo-run: error: %s\n", strbuf_cstr(&err));
    strbuf_free(&err);
    return rc;
  }
  rc = mem_check(s, mo, &o1, &err);
  strbuf_free(&err);
  if (rc != RT_STATUS_OK) return rc;
  o = &o1;
  mpi_comm mc;
  MPI_Request q;
  MPI_Comm_idup(MPI_COMM_WORLD, &mc.pipe, &q);
  collective_wait(&q, s, o->timeout, "duplicating the world for the messages");
  mp_inject_at(s, o, RT_PLACE_SETUP, "setup", "MPI_Comm_split");
  rt_mpi_watch(s, o->timeout, "making the replicas' communicator (MPI_Comm_split)");
  MPI_Comm_split(MPI_COMM_WORLD, rank, replica, &mc.replicas);
  rt_mpi_watch(s, 0, NULL);
  mc.base = replica * s->nranks;
  mc.nmb = s->nmb;
  mc.nstages = s->nstages;
  mc.replica = replica;
  mc.nreplicas = s->replicas;
  rt_comm c = {"mpi", &mc, mp_isend, mp_irecv, mp_wait, mp_allreduce, mp_barrier, mp_fail,
               mp_die, mp_stop, mp_leave, -1};
  mp_term.prog = &s->ranks[rank];
  mp_term.at = &c.at;
  rt_rank_stats st;
  rt_exec_rank(s, rank, replica, mo, o, &c, &st); /* a failure aborted the job */
  mp_term.at = NULL;
  mp_term.prog = NULL;
  char what[64];
  snprintf(what, sizeof what, "mpi (%d processes)", (int)(s->nranks * s->replicas));
  rc = rt_mpi_report(s, o, &st, path, what, trace_path, mo);
  if (rc == RT_STATUS_OK) mp_inject_at(s, o, RT_PLACE_END, "end", "the closing barrier");
  rt_rank_stats_free(&st);
  MPI_Comm_free(&mc.pipe);
  MPI_Comm_free(&mc.replicas);
  return rc;
}

/* ---- The profiler on MPI processes ------------------------------------------------------------ */

rt_status rt_mpi_profile(const be_stream *s, const rt_opts *mo, const rt_run_opts *o,
                         const char *out_path) {
  rt_status rc = RT_STATUS_OK;
  int me, world;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  double t0 = support_seconds();
  rt_model *m = rt_model_new(s, mo, NULL); /* rt_mpi_check built one already: it cannot fail */
  int n = s->nlayers;
  rt_layer_cost *costs = xcalloc((size_t)n, sizeof *costs);
  rt_profile_layers(m, me, world, costs); /* every process busy, as in the run */
  double *mine = xcalloc((size_t)n * PROF_PER, sizeof *mine);
  double *all = xcalloc((size_t)n * PROF_PER, sizeof *all);
  for (int i = 0; i < n; i++) cost_pack(&costs[i], mine + (size_t)i * PROF_PER);
  rt_run_opts o1 = *o;
  strbuf err = {0};
  if (rt_fault_resolve(s, &o1.fault, &err) != 0) { /* checked by octo-run already */
    if (me == 0) fprintf(stderr, "octo-run: error: %s\n", strbuf_cstr(&err));
    mp_decided(RT_STATUS_BAD_INPUT);
    rt_mpi_abort(RT_STATUS_BAD_INPUT);
  }
  mp_inject_at(s, &o1, RT_PLACE_SETUP, "setup", "the profile's reduction");
  /* Each configuration was measured by one process: the sum is its figures. */
  MPI_Request q;
  MPI_Iallreduce(mine, all, n * PROF_PER, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &q);
  collective_wait(&q, s, o->timeout, "the profile's reduction of the layer figures");
  size_t big = 8;
  for (int i = 0; i < n; i++) {
    costs[i] = cost_unpack(all + (size_t)i * PROF_PER);
    if (costs[i].out_bytes > (double)big) big = (size_t)costs[i].out_bytes;
  }
  /* The optimizer's rate with every process updating at once, as at the end of a step. */
  MPI_Ibarrier(MPI_COMM_WORLD, &q);
  collective_wait(&q, s, o->timeout, "the profile's barrier before the optimizer");
  double rate = rt_model_optimizer_rate(m), rate_sum = 0;
  MPI_Iallreduce(&rate, &rate_sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &q);
  collective_wait(&q, s, o->timeout, "the profile's reduction of the optimizer rate");
  double lat = 0, bw = 0;
  if (world >= 2 && me < 2) {
    mpi_comm mc = {MPI_COMM_NULL, MPI_COMM_NULL, 0, 1, 0, 1, 1};
    MPI_Comm_dup(MPI_COMM_SELF, &mc.replicas);
    mc.pipe = MPI_COMM_WORLD;
    rt_comm c = {"mpi", &mc, mp_isend, mp_irecv, mp_wait, mp_allreduce, mp_barrier, mp_fail,
                 mp_die, mp_stop, mp_leave, -1};
    if (rt_profile_link(&c, me, big, o->timeout, &lat, &bw, &err) != 0) {
      strbuf why = {0};
      strbuf_printf(&why, "rank %d: the profile's link measurement: %s", me, strbuf_cstr(&err));
      mp_fail(&mc, strbuf_cstr(&why), RT_STATUS_RUN_FAILED);
    }
    MPI_Comm_free(&mc.replicas);
  }
  if (me == 0) {
    rt_profile_fill(m, costs);
    strbuf json = {0};
    /* With one process there is no link to measure: the cluster's stays (no "link" key). */
    rt_profile_json(s, rt_model_scale(m), costs, "mpi", world >= 2 ? lat : -1, bw, rate_sum / world, &json);
    strbuf why = {0};
    if (!support_write_file(out_path, strbuf_cstr(&json), json.len, &why)) {
      fprintf(stderr, "octo-run: error: cannot write '%s': %s\n", out_path, strbuf_cstr(&why));
      rc = RT_STATUS_BAD_INPUT;
    }
    strbuf_free(&why);
    if (rc == RT_STATUS_OK)
      printf("%s: profiled %d layers at scale %d on %d MPI processes in %.1f s: %s\n", s->model,
             n, rt_model_scale(m), world, support_seconds() - t0, out_path);
    strbuf_free(&json);
  }
  int code = (int)rc; /* the status as it travels */
  MPI_Ibcast(&code, 1, MPI_INT, 0, MPI_COMM_WORLD, &q);
  collective_wait(&q, s, o->timeout, "the profile's broadcast of the exit status");
  rc = mp_decided((rt_status)code);
  strbuf_free(&err);
  free(mine);
  free(all);
  free(costs);
  rt_model_free(m);
  return rc;
}
