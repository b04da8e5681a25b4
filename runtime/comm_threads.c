/* comm_threads.c -- the cpu backend's transport: every rank of every replica is a thread of one
 * process, and messages go through an in-process hub with the checker's semantics: posting never
 * blocks; between two ranks, sends and receives pair in posting order; the pair completes (the
 * data is copied) as soon as both sides are posted, by whichever thread posts second; WAIT blocks
 * on a condition variable until its message completed, the deadline passed or a rank failed. The
 * all-reduce over the replicas of a rank sums in replica order, so results do not depend on
 * thread timing, and waits against the same deadline. A rank that fails or dies (--die) marks
 * the hub failed, names itself, and wakes every waiter, so that its peers stop at once with its
 * name. Also rt_threads_run, the hub's one lifecycle: it starts the threads, each with its
 * rank's rt_comm, and frees the hub after them (the interpreter's rt_run_threads and the
 * profiler's link measurement run on it). */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime.h"

/* A posted, not yet paired message. */
typedef struct post {
  be_tensor_ref tag; /* what it carries */
  void *buf;         /* data (send) or destination (receive) */
  size_t bytes;      /* size */
  rt_req *req;       /* completed when paired */
  int addr_rank;     /* the posting rank, for messages */
} post;

/* The unpaired sends and receives from one rank to another, in posting order. */
typedef struct channel {
  post *sends, *recvs;
  int nsends, sends_cap, nrecvs, recvs_cap;
  int send_head, recv_head; /* first unpaired */
} channel;

/* The all-reduce state of one pipeline rank across replicas. */
typedef struct reduce {
  int round;      /* rounds completed */
  int arrived;    /* replicas that deposited their buffer this round */
  int departed;   /* replicas that took the sum */
  bool ready;     /* the sum is in acc */
  float **bufs;   /* per replica: its buffer */
  float *acc;     /* the sum */
  size_t n;       /* floats */
} reduce;

/* State shared by the threads of one run. */
typedef struct rt_hub {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int nranks, replicas;
  channel *ch;     /* [(replica * nranks + from) * nranks + to] */
  reduce *red;     /* per pipeline rank */
  bool failed;     /* some rank failed or died: waits return 2 */
  char culprit[64]; /* who, for the others' messages: "rank 2 died", "rank 1 of replica 1
                       failed" (the first) */
  int left;        /* ranks that left (th_leave) */
  int bar_in;      /* ranks in the current barrier (th_barrier) */
  int bar_round;   /* barriers completed */
  char error[256]; /* a transport error (tag mismatch), "" when none */
} rt_hub;

/* One thread's view: the hub, its rank and replica, its all-reduce rounds. */
typedef struct thread_comm {
  rt_hub *hub;
  int rank, replica;
  int rounds; /* all-reduces it entered */
} thread_comm;

static channel *chan(rt_hub *h, int replica, int from, int to) {
  return &h->ch[((size_t)replica * h->nranks + from) * h->nranks + to];
}

/* Pair the first unpaired send and receive of c while both exist. Pre: h->mu held. */
static void pair_up(rt_hub *h, channel *c) {
  while (c->send_head < c->nsends && c->recv_head < c->nrecvs) {
    post *s = &c->sends[c->send_head++], *r = &c->recvs[c->recv_head++];
    if (s->tag.kind != r->tag.kind || s->tag.stage != r->tag.stage || s->tag.mb != r->tag.mb ||
        s->bytes != r->bytes) {
      if (!h->error[0])
        snprintf(h->error, sizeof h->error,
                 "a send of %s s%d mb%d (%zu bytes) was paired with a receive of %s s%d mb%d "
                 "(%zu bytes)", be_tensors[s->tag.kind].name, (int)s->tag.stage, (int)s->tag.mb,
                 s->bytes, be_tensors[r->tag.kind].name, (int)r->tag.stage, (int)r->tag.mb,
                 r->bytes);
      h->failed = true;
    } else if (s->bytes) {
      memcpy(r->buf, s->buf, s->bytes);
    }
    s->req->done = r->req->done = true;
  }
  if (c->send_head == c->nsends) c->nsends = c->send_head = 0;
  if (c->recv_head == c->nrecvs) c->nrecvs = c->recv_head = 0;
  pthread_cond_broadcast(&h->cv);
}

static int post_msg(void *ctx, int peer, be_tensor_ref tag, void *buf, size_t bytes, rt_req *r,
                    bool send) {
  thread_comm *t = ctx;
  rt_hub *h = t->hub;
  r->done = false;
  r->impl = NULL;
  post p = {tag, buf, bytes, r, t->rank};
  pthread_mutex_lock(&h->mu);
  channel *c = send ? chan(h, t->replica, t->rank, peer) : chan(h, t->replica, peer, t->rank);
  if (send)
    VEC_PUSH(c->sends, c->nsends, c->sends_cap, p);
  else
    VEC_PUSH(c->recvs, c->nrecvs, c->recvs_cap, p);
  pair_up(h, c);
  pthread_mutex_unlock(&h->mu);
  return 0;
}

static int th_isend(void *ctx, int peer, be_tensor_ref tag, const void *buf, size_t bytes,
                    rt_req *r) {
  return post_msg(ctx, peer, tag, (void *)buf, bytes, r, true);
}

static int th_irecv(void *ctx, int peer, be_tensor_ref tag, void *buf, size_t bytes, rt_req *r) {
  return post_msg(ctx, peer, tag, buf, bytes, r, false);
}

/* The absolute time 'seconds' from now, for pthread_cond_timedwait. */
static struct timespec deadline(double seconds) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  double whole = (double)(long long)seconds;
  t.tv_sec += (time_t)whole;
  t.tv_nsec += (long)((seconds - whole) * 1e9);
  if (t.tv_nsec >= 1000000000L) {
    t.tv_sec++;
    t.tv_nsec -= 1000000000L;
  }
  return t;
}

/* Mark the hub failed by rank t, which 'did' ("failed", "died"), and wake every waiter. Pre:
 * h->mu held. */
static void mark_failed(thread_comm *t, const char *did) {
  rt_hub *h = t->hub;
  if (!h->failed) {
    if (h->replicas > 1)
      snprintf(h->culprit, sizeof h->culprit, "rank %d of replica %d %s", t->rank, t->replica, did);
    else
      snprintf(h->culprit, sizeof h->culprit, "rank %d %s", t->rank, did);
  }
  h->failed = true;
  pthread_cond_broadcast(&h->cv);
}

/* Block on the hub until done() or the hub failed or the deadline 'until' passed. Returns 0,
 * 1 (deadline) or 2 (failed: who appended to err). Pre: h->mu held. */
static int hub_wait(rt_hub *h, bool (*done)(void *), void *arg, const struct timespec *until,
                    strbuf *err) {
  int rc = 0;
  while (!done(arg) && !h->failed && rc == 0)
    if (pthread_cond_timedwait(&h->cv, &h->mu, until) == ETIMEDOUT) rc = 1;
  if (done(arg)) return 0; /* completed just as the deadline passed */
  if (h->failed) {
    if (err) strbuf_puts(err, h->culprit[0] ? h->culprit : "another rank failed");
    return 2;
  }
  return rc;
}

static bool req_done(void *r) { return ((rt_req *)r)->done; }

static int th_wait(void *ctx, rt_req *r, double timeout, strbuf *err) {
  thread_comm *t = ctx;
  rt_hub *h = t->hub;
  struct timespec until = deadline(timeout);
  pthread_mutex_lock(&h->mu);
  int rc = h->error[0] ? -1 : hub_wait(h, req_done, r, &until, err);
  if (h->error[0] && err) {
    strbuf_puts(err, h->error);
    rc = -1;
  }
  pthread_mutex_unlock(&h->mu);
  return rc;
}

/* An all-reduce that a replica waits on: the reduce and the round it waits for. */
typedef struct round_at {
  reduce *x;
  int round;
} round_at;

static bool round_reached(void *arg) {
  round_at *r = arg;
  return r->x->round == r->round;
}

static bool sum_ready(void *arg) { return ((reduce *)arg)->ready; }

static int th_allreduce(void *ctx, float *buf, size_t n, double timeout, strbuf *err) {
  thread_comm *t = ctx;
  rt_hub *h = t->hub;
  reduce *x = &h->red[t->rank];
  int R = h->replicas;
  struct timespec until = deadline(timeout);
  round_at mine = {x, t->rounds};
  pthread_mutex_lock(&h->mu);
  int rc = hub_wait(h, round_reached, &mine, &until, err);
  if (rc == 0 && h->failed) {
    /* a replica that arrived before the failure may have left and freed its buffer: no sum */
    if (err) strbuf_puts(err, h->culprit[0] ? h->culprit : "another rank failed");
    rc = 2;
  }
  if (rc == 0) {
    x->bufs[t->replica] = buf;
    x->n = n;
    if (++x->arrived == R) {
      x->acc = xrealloc(x->acc, (n ? n : 1) * sizeof *x->acc);
      for (size_t i = 0; i < n; i++) {
        float sum = 0;
        for (int q = 0; q < R; q++) sum += x->bufs[q][i]; /* replica order: deterministic */
        x->acc[i] = sum;
      }
      x->ready = true;
      pthread_cond_broadcast(&h->cv);
    }
    rc = hub_wait(h, sum_ready, x, &until, err);
  }
  if (rc == 0) {
    memcpy(buf, x->acc, n * sizeof *buf);
    if (++x->departed == R) {
      x->arrived = x->departed = 0;
      x->ready = false;
      x->round++;
      pthread_cond_broadcast(&h->cv);
    }
  }
  t->rounds++;
  pthread_mutex_unlock(&h->mu);
  return rc;
}

/* A barrier that a rank waits on: the hub and the round it waits to see completed. */
typedef struct bar_at {
  rt_hub *h;
  int round;
} bar_at;

static bool bar_passed(void *arg) {
  bar_at *b = arg;
  return b->h->bar_round > b->round;
}

static int th_barrier(void *ctx, double timeout, strbuf *err) {
  thread_comm *t = ctx;
  rt_hub *h = t->hub;
  struct timespec until = deadline(timeout);
  pthread_mutex_lock(&h->mu);
  bar_at mine = {h, h->bar_round};
  if (++h->bar_in == h->nranks * h->replicas) {
    h->bar_in = 0;
    h->bar_round++;
    pthread_cond_broadcast(&h->cv);
  }
  int rc = hub_wait(h, bar_passed, &mine, &until, err);
  pthread_mutex_unlock(&h->mu);
  return rc;
}

static void th_fail(void *ctx, const char *why, rt_status st) {
  (void)why; /* the launcher reports it, and the run's status, from the rank's stats */
  (void)st;
  thread_comm *t = ctx;
  pthread_mutex_lock(&t->hub->mu);
  mark_failed(t, "failed");
  pthread_mutex_unlock(&t->hub->mu);
}

static void th_die(void *ctx, const char *why) {
  (void)why; /* reported from the rank's stats */
  thread_comm *t = ctx;
  pthread_mutex_lock(&t->hub->mu);
  mark_failed(t, "died");
  pthread_mutex_unlock(&t->hub->mu);
}

/* Sleep, as a stopped process does, until the run failed (the others' deadlines passed) or
 * every other rank left: no peer is left to notice. */
static void th_stop(void *ctx, const char *why) {
  (void)why;
  thread_comm *t = ctx;
  rt_hub *h = t->hub;
  pthread_mutex_lock(&h->mu);
  while (!h->failed && h->left < h->nranks * h->replicas - 1) pthread_cond_wait(&h->cv, &h->mu);
  pthread_mutex_unlock(&h->mu);
}

/* Drop rank t's unpaired posts: its sends in the channels from it, its receives in the channels
 * to it. */
static void th_leave(void *ctx) {
  thread_comm *t = ctx;
  rt_hub *h = t->hub;
  pthread_mutex_lock(&h->mu);
  for (int q = 0; q < h->nranks; q++) {
    channel *out = chan(h, t->replica, t->rank, q), *in = chan(h, t->replica, q, t->rank);
    out->nsends = out->send_head = 0;
    in->nrecvs = in->recv_head = 0;
  }
  h->left++;
  pthread_cond_broadcast(&h->cv);
  pthread_mutex_unlock(&h->mu);
}

/* What one thread runs: body on its rank's rt_comm. */
typedef struct job {
  thread_comm tc;      /* its view of the hub */
  rt_thread_body body; /* what it does */
  void *arg;           /* body's argument */
} job;

static void *run_job(void *arg) {
  job *j = arg;
  rt_comm c = {"cpu", &j->tc, th_isend, th_irecv, th_wait, th_allreduce, th_barrier, th_fail,
               th_die, th_stop, th_leave, -1};
  j->body(&c, j->tc.rank, j->tc.replica, j->arg);
  return NULL;
}

int rt_threads_run(int nranks, int replicas, rt_thread_body body, void *arg) {
  rt_hub h;
  memset(&h, 0, sizeof h);
  pthread_mutex_init(&h.mu, NULL);
  pthread_cond_init(&h.cv, NULL);
  h.nranks = nranks;
  h.replicas = replicas;
  int world = nranks * replicas;
  size_t nch = (size_t)replicas * nranks * nranks;
  h.ch = xcalloc(nch, sizeof *h.ch);
  h.red = xcalloc((size_t)nranks, sizeof *h.red);
  for (int r = 0; r < nranks; r++) h.red[r].bufs = xcalloc((size_t)replicas, sizeof(float *));
  job *jobs = xcalloc((size_t)world, sizeof *jobs);
  pthread_t *th = xcalloc((size_t)world, sizeof *th);
  int started = 0, rc = 0;
  for (int w = 0; w < world; w++) {
    job *j = &jobs[w];
    j->tc.hub = &h;
    j->tc.rank = w % nranks;
    j->tc.replica = w / nranks;
    j->body = body;
    j->arg = arg;
    if (pthread_create(&th[w], NULL, run_job, j) != 0) {
      rc = -1; /* the started ones stop at their next wait */
      pthread_mutex_lock(&h.mu);
      h.failed = true;
      pthread_cond_broadcast(&h.cv);
      pthread_mutex_unlock(&h.mu);
      break;
    }
    started++;
  }
  for (int w = 0; w < started; w++) pthread_join(th[w], NULL);
  for (size_t i = 0; i < nch; i++) {
    free(h.ch[i].sends);
    free(h.ch[i].recvs);
  }
  for (int r = 0; r < nranks; r++) {
    free(h.red[r].bufs);
    free(h.red[r].acc);
  }
  free(h.ch);
  free(h.red);
  free(jobs);
  free(th);
  pthread_cond_destroy(&h.cv);
  pthread_mutex_destroy(&h.mu);
  return rc;
}
