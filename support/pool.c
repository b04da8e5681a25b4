/* pool.c -- a fixed set of worker threads that run the iterations of a loop (fork-join), for the
 * tuner's parallel evaluations. Iterations are handed out one at a time from a shared counter, so
 * which thread runs which iteration varies; callers that need results independent of the thread
 * count write each iteration's result to its own slot and combine them in index order. */
#define _GNU_SOURCE /* sched_getaffinity */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#include "support.h"

struct support_pool {
  int jobs;                       /* threads running iterations, the caller's included */
  pthread_t *threads;             /* jobs - 1 workers */
  pthread_mutex_t mu;             /* guards every field below */
  pthread_cond_t start;           /* a new loop (or the end) for the workers */
  pthread_cond_t done;            /* the last worker left the loop */
  uint64_t generation;            /* loops started so far */
  bool quit;                      /* workers exit */
  int n;                          /* iterations of the current loop */
  int next;                       /* next iteration to hand out */
  int busy;                       /* workers still inside the current loop */
  support_pool_fn fn;             /* body of the current loop */
  void *ctx;                      /* its context */
};

/* Run iterations of the current loop as 'worker' until none is left. Pre: p->mu held; returns
 * with it held. */
static void pool_drain(support_pool *p, int worker) {
  while (p->next < p->n) {
    int i = p->next++;
    pthread_mutex_unlock(&p->mu);
    p->fn(p->ctx, i, worker);
    pthread_mutex_lock(&p->mu);
  }
}

/* Worker thread: waits for each loop, helps run it, reports when it leaves. */
typedef struct pool_arg {
  support_pool *p; /* its pool */
  int worker;      /* its index (1 .. jobs - 1; the caller is 0) */
} pool_arg;

static void *pool_main(void *arg) {
  pool_arg a = *(pool_arg *)arg;
  free(arg);
  support_pool *p = a.p;
  uint64_t seen = 0;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (!p->quit && p->generation == seen) pthread_cond_wait(&p->start, &p->mu);
    if (p->quit) break;
    seen = p->generation;
    pool_drain(p, a.worker);
    if (--p->busy == 0) pthread_cond_signal(&p->done);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

int support_cores(void) {
#ifdef CPU_COUNT
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
#endif
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

support_pool *support_pool_new(int jobs) {
  support_pool *p = xcalloc(1, sizeof *p);
  p->jobs = jobs < 1 ? 1 : jobs;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->start, NULL);
  pthread_cond_init(&p->done, NULL);
  p->threads = xcalloc((size_t)p->jobs, sizeof *p->threads);
  for (int i = 1; i < p->jobs; i++) {
    pool_arg *a = xmalloc(sizeof *a);
    a->p = p;
    a->worker = i;
    if (pthread_create(&p->threads[i - 1], NULL, pool_main, a) != 0) {
      free(a); /* fewer threads than asked: the loops still run, on those that started */
      p->jobs = i;
      break;
    }
  }
  return p;
}

int support_pool_jobs(const support_pool *p) { return p->jobs; }

void support_pool_run(support_pool *p, int n, support_pool_fn fn, void *ctx) {
  if (n <= 0) return;
  if (p->jobs == 1 || n == 1) {
    for (int i = 0; i < n; i++) fn(ctx, i, 0);
    return;
  }
  pthread_mutex_lock(&p->mu);
  p->fn = fn;
  p->ctx = ctx;
  p->n = n;
  p->next = 0;
  p->busy = p->jobs - 1;
  p->generation++;
  pthread_cond_broadcast(&p->start);
  pool_drain(p, 0);
  while (p->busy > 0) pthread_cond_wait(&p->done, &p->mu);
  pthread_mutex_unlock(&p->mu);
}

void support_pool_free(support_pool *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  p->quit = true;
  pthread_cond_broadcast(&p->start);
  pthread_mutex_unlock(&p->mu);
  for (int i = 1; i < p->jobs; i++) pthread_join(p->threads[i - 1], NULL);
  pthread_cond_destroy(&p->start);
  pthread_cond_destroy(&p->done);
  pthread_mutex_destroy(&p->mu);
  free(p->threads);
  free(p);
}
