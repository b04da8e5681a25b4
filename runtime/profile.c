/* profile.c -- octo-run --profile on CPUs (runtime.h, "Profiler"): times every layer of a stream
 * as the model runs it (its kernels at the scale in force, F, B and W apart, the median of several
 * repetitions after a warm-up), measures the transport's point-to-point latency and bandwidth
 * with a ping-pong between two ranks, the optimizer step's rate with every rank updating at
 * once, and writes the cost model's profile JSON (docs/cost-model.md, "Profile files") with the
 * scale, the backend, the link, the optimizer rate and each layer's shape, so that octoc plans with the costs of the machine the plan will run on. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "runtime.h"

/* Repetitions of each measurement after the warm-up, and the time after which fewer suffice. */
#define PR_REPS 7
#define PR_MIN_REPS 3
#define PR_BUDGET_S 0.5

/* Whether layers i and j of m run the same computation (same kernels and dimensions; the last
 * layer, which carries the loss, is like no other). */
static bool pr_same(const rt_model *m, int i, int j) {
  int last = rt_model_nlayers(m) - 1;
  if (i != j && (i == last || j == last)) return false;
  rt_layer_info a, b;
  rt_model_layer(m, i, &a);
  rt_model_layer(m, j, &b);
  return a.k == b.k && memcmp(&a.d, &b.d, sizeof a.d) == 0;
}

/* Bytes written between two timed phases, to push the layer's data out of the core's cache as
 * the other layers and microbatches of a pipelined step do (L2 caches are a few MiB). */
#define PR_FLUSH_BYTES (16u << 20)

/* Write the flush buffer once (volatile: not optimized away). */
static void pr_flush(unsigned char *buf) {
  volatile unsigned char *b = buf;
  for (size_t i = 0; i < PR_FLUSH_BYTES; i += 64) b[i] = (unsigned char)(b[i] + 1);
}

/* A copy of the n host floats h on the current device (h itself on the CPU); frees h when it
 * copied. */
static float *pr_to_device(float *h, size_t n) {
  if (!rt_dev_current()) return h;
  float *d = rt_dev_malloc(n * sizeof *d);
  rt_put(d, h, n * sizeof *h);
  free(h);
  return d;
}

/* Time layer i's kernels into *c, on the calling thread's device (a GPU: each phase from an idle
 * stream to its end, rt_sync). */
static void pr_measure(rt_model *m, int i, rt_layer_cost *c) {
  rt_layer_info L;
  rt_model_layer(m, i, &L);
  const rt_ldims *d = &L.d;
  size_t nx = (size_t)d->B * d->in_S * d->in_w, ny = (size_t)d->B * d->S * L.p.out_w;
  size_t nw = rt_lplan_params(&L.p);
  bool gpu = rt_dev_current() != NULL;
  float *x = xmalloc((nx ? nx : 1) * sizeof *x), *dy = xmalloc((ny ? ny : 1) * sizeof *dy);
  float *w = xmalloc((nw ? nw : 1) * sizeof *w);
  float *y = rt_dev_malloc(ny * sizeof *y), *dx = rt_dev_malloc(nx * sizeof *dx);
  float *g = rt_dev_malloc(nw * sizeof *g), *save = rt_dev_malloc(L.p.save_floats * sizeof *save);
  rt_kernel_init_params(&L.p, 0x70726f66ULL + (uint64_t)i, w);
  uint64_t st = 0x9e3779b97f4a7c15ULL * (uint64_t)(i + 1);
  bool ids = L.k->role & RT_ROLE_IDS;
  for (size_t k = 0; k < nx; k++) {
    st = st * 6364136223846793005ULL + 1442695040888963407ULL;
    double u = (double)(st >> 11) * 0x1p-53;
    x[k] = ids ? (float)floor(u * d->vocab) : (float)(2 * u - 1);
  }
  for (size_t k = 0; k < ny; k++) dy[k] = (float)(1e-3 * (double)((k * 7919) % 200 - 100));
  x = pr_to_device(x, nx);
  dy = pr_to_device(dy, ny);
  w = pr_to_device(w, nw);
  double tf[PR_REPS], tb[PR_REPS], tw[PR_REPS];
  /* the CPU: the caches flushed between phases; a GPU's L2 is not the point there */
  unsigned char *flush = gpu ? NULL : xcalloc(PR_FLUSH_BYTES, 1);
  int n = 0;
  double start = support_seconds();
  for (int r = -1; r < PR_REPS; r++) { /* r = -1: the warm-up */
    if (flush) pr_flush(flush);
    rt_sync();
    double t0 = support_seconds();
    L.k->fwd(d, w, x, y, save);
    rt_sync();
    double t1 = support_seconds();
    if (flush) pr_flush(flush);
    double t2 = support_seconds();
    L.k->bwd_in(d, w, save, dy, i > 0 ? dx : NULL);
    rt_sync();
    double t3 = support_seconds();
    if (flush) pr_flush(flush);
    double t4 = support_seconds();
    L.k->bwd_w(d, w, save, g);
    rt_sync();
    double t5 = support_seconds();
    if (r >= 0) {
      tf[n] = t1 - t0;
      tb[n] = t3 - t2;
      tw[n] = t5 - t4;
      n++;
    }
    if (n >= PR_MIN_REPS && support_seconds() - start > PR_BUDGET_S) break;
  }
  free(flush);
  c->f = rt_median(tf, n);
  c->b = rt_median(tb, n);
  c->w = rt_median(tw, n);
  if (i == rt_model_nlayers(m) - 1) c->f += rt_model_loss_seconds(m); /* LOSS follows the last layer */
  rt_model_layer_bytes(m, i, c);
  c->measured = true;
  float *all[] = {x, y, dy, dx, w, g, save}; /* the CPU's host arrays are its device's too */
  for (size_t k = 0; k < sizeof all / sizeof *all; k++) rt_dev_mfree(all[k]);
}

void rt_profile_layers(rt_model *m, int worker, int nworkers, rt_layer_cost *costs) {
  int n = rt_model_nlayers(m), config = 0;
  for (int i = 0; i < n; i++) {
    int first = i;
    for (int j = 0; j < i && first == i; j++)
      if (pr_same(m, i, j)) first = j;
    if (first != i) continue; /* measured with its first layer of the same configuration */
    if (config++ % nworkers != worker) continue;
    pr_measure(m, i, &costs[i]);
  }
}

void rt_profile_fill(const rt_model *m, rt_layer_cost *costs) {
  int n = rt_model_nlayers(m);
  for (int i = 0; i < n; i++)
    for (int j = 0; j < i && !costs[i].measured; j++)
      if (costs[j].measured && pr_same(m, i, j)) costs[i] = costs[j];
}

int rt_profile_link(rt_comm *c, int me, size_t big, double timeout, double *lat_s,
                    double *bw_Bps, strbuf *err) {
  size_t sizes[2] = {8, big < 8 ? 8 : big};
  int reps[2] = {200, 10};
  double t[2];
  char *buf = xcalloc(sizes[1], 1);
  be_tensor_ref tag = {BE_T_ACT, 0, 0};
  int rc = 0;
  for (int k = 0; k < 2 && rc == 0; k++) {
    double t0 = support_seconds();
    for (int r = 0; r < reps[k] && rc == 0; r++) {
      rt_req q = {0};
      for (int dir = 0; dir < 2 && rc == 0; dir++) {
        bool sending = (dir == 0) == (me == 0);
        rc = sending ? c->isend(c->ctx, 1 - me, tag, buf, sizes[k], &q)
                     : c->irecv(c->ctx, 1 - me, tag, buf, sizes[k], &q);
        if (rc == 0 && c->wait(c->ctx, &q, timeout, err) != 0) {
          if (!err->len) strbuf_puts(err, "the link measurement's message did not complete");
          rc = -1;
        }
        memset(&q, 0, sizeof q);
      }
    }
    t[k] = (support_seconds() - t0) / (2.0 * reps[k]); /* one way */
  }
  free(buf);
  if (rc) return -1;
  *lat_s = t[0];
  double extra = t[1] - t[0];
  *bw_Bps = extra > 0 ? (double)(sizes[1] - sizes[0]) / extra : 1e12;
  return 0;
}

void rt_profile_json(const be_stream *s, int scale, const rt_layer_cost *costs,
                     const char *backend, double lat_s, double bw_Bps, double optim_Bps,
                     strbuf *out) {
  strbuf_puts(out, "{\n  \"format\": \"octopipe-profile\",\n  \"version\": 1,\n  \"device\": ");
  strbuf_json_str(out, s->nranks > 0 && s->ranks[0].type ? s->ranks[0].type : "cpu");
  strbuf_printf(out, ",\n  \"micro_batch\": %d,\n  \"seq\": %d,\n  \"tensor\": 1,\n"
                "  \"dtype\": \"fp32\",\n  \"scale\": %d,\n  \"backend\": ",
                (int)s->micro_batch, (int)s->seq, scale);
  strbuf_json_str(out, backend);
  if (lat_s >= 0)
    strbuf_printf(out, ",\n  \"link\": {\"bw_gbs\": %.6g, \"lat_us\": %.6g}", bw_Bps / 1e9,
                  lat_s * 1e6);
  if (optim_Bps > 0) strbuf_printf(out, ",\n  \"optimizer_gbs\": %.6g", optim_Bps / 1e9);
  strbuf_puts(out, ",\n  \"layers\": {");
  for (int i = 0; i < s->nlayers; i++) {
    const rt_layer_cost *c = &costs[i];
    const be_layer *l = &s->layers[i];
    strbuf_puts(out, i ? ",\n    " : "\n    ");
    strbuf_json_str(out, l->name);
    strbuf_printf(out, ": {\"f_ms\": %.6g, \"b_ms\": %.6g, \"w_ms\": %.6g, \"act_bytes\": %.0f, "
                  "\"act_w_bytes\": %.0f, \"out_bytes\": %.0f, \"param_bytes\": %.0f, "
                  "\"grad_bytes\": %.0f,\n      \"shape\": {\"kind\": ",
                  c->f * 1e3, c->b * 1e3, c->w * 1e3, c->act_bytes, c->act_bytes, c->out_bytes,
                  c->param_bytes, c->grad_bytes);
    strbuf_json_str(out, l->kind);
    for (int k = 0; k < l->nparams; k++) {
      strbuf_puts(out, ", ");
      strbuf_json_str(out, l->params[k].name);
      int p = be_lparam_lookup(be_layer_kind(l), l->params[k].name);
      if (p >= 0 && be_lparams[p].act) { /* an activation is named */
        strbuf_puts(out, ": ");
        strbuf_json_str(out, rt_act_name((rt_act)(int)l->params[k].value));
      } else { /* the shortest text that reads back exactly (1e-05, not 1.0000000000000001e-05) */
        char num[40];
        fmt_shortest_scaled(num, l->params[k].value, 1.0);
        strbuf_printf(out, ": %s", num);
      }
    }
    strbuf_puts(out, "}}");
  }
  strbuf_puts(out, "\n  }\n}\n");
}

int rt_calibration_json(const be_stream *s, const rt_rank_stats *stats, int n, int scale,
                        const char *backend, strbuf *json, strbuf *err) {
  rt_layer_cost *costs = xcalloc((size_t)(s->nlayers ? s->nlayers : 1), sizeof *costs);
  double bytes = 0, secs = 0;
  for (int k = 0; k < n; k++) {
    if (stats[k].optim_s > 0) {
      bytes += stats[k].optim_bytes;
      secs += stats[k].optim_s;
    }
  }
  int rc = 0;
  for (int i = 0; i < s->nlayers && rc == 0; i++) {
    int got = 0;
    rt_layer_cost *c = &costs[i];
    for (int k = 0; k < n; k++) {
      const rt_layer_cost *t = stats[k].timed ? &stats[k].timed[i] : NULL;
      if (!t || !t->measured) continue;
      if (got++ == 0) { /* the first: its bytes; the times are averaged */
        *c = *t;
        c->f = c->b = c->w = 0;
      }
      c->f += t->f;
      c->b += t->b;
      c->w += t->w;
    }
    if (!got) {
      strbuf_printf(err, "--calibrate: no rank timed layer '%s' (the run needs at least 2 steps, "
                    "and every rank must finish)", s->layers[i].name);
      rc = -1;
      break;
    }
    c->f /= got;
    c->b /= got;
    c->w /= got;
  }
  if (rc == 0)
    rt_profile_json(s, scale, costs, backend, -1, 0, secs > 0 ? 2 * bytes / secs : 0, json);
  free(costs);
  return rc;
}

rt_status rt_calibration_write(const be_stream *s, const rt_run_opts *o,
                               const rt_rank_stats *stats, int n, int scale,
                               const char *backend) {
  strbuf json = {0}, err = {0};
  rt_status rc = RT_STATUS_OK;
  if (rt_calibration_json(s, stats, n, scale, backend, &json, &err) != 0) {
    fprintf(stderr, "octo-run: error: %s\n", strbuf_cstr(&err));
    rc = RT_STATUS_RUN_FAILED;
  } else if (!support_write_output(o->calibrate, strbuf_cstr(&json), json.len, &err)) {
    fprintf(stderr, "octo-run: error: cannot write '%s': %s\n", o->calibrate, strbuf_cstr(&err));
    rc = RT_STATUS_BAD_INPUT;
  } else {
    printf("calibration: %d layers' F, B and W and the optimizer as steps 2 to %d of this plan ran "
           "them, at scale %d on %s: %s\n", (int)s->nlayers, o->steps, scale, backend,
           o->calibrate);
  }
  fflush(stdout);
  strbuf_free(&json);
  strbuf_free(&err);
  return rc;
}

/* ---- The cpu backend's profiler: rank threads ------------------------------------------------ */

/* One side of the link's ping-pong between two threads of the hub. */
typedef struct link_side {
  size_t big;     /* large message bytes */
  double lat, bw; /* results (rank 0) */
  strbuf err;     /* its failure */
  int rc;         /* 0 or -1 */
} link_side;

/* A thread of link_threads: rt_profile_link on its rank; a failure stops the other side. */
static void link_body(rt_comm *c, int rank, int replica, void *arg) {
  link_side *j = &((link_side *)arg)[rank];
  (void)replica;
  j->rc = rt_profile_link(c, rank, j->big, 30.0, &j->lat, &j->bw, &j->err);
  if (j->rc) c->fail(c->ctx, strbuf_cstr(&j->err), RT_STATUS_RUN_FAILED);
}

/* The hub's link between two threads (rt_profile_link on rt_threads_run): latency and bandwidth
 * into *lat_s, *bw_Bps. Returns 0, or -1 with the reason in err. */
static int link_threads(size_t big, double *lat_s, double *bw_Bps, strbuf *err) {
  link_side sides[2];
  memset(sides, 0, sizeof sides);
  sides[0].big = sides[1].big = big;
  int rc = rt_threads_run(2, 1, link_body, sides);
  for (int r = 0; r < 2; r++) {
    if (rc == 0 && sides[r].rc) {
      strbuf_puts(err, strbuf_cstr(&sides[r].err));
      rc = -1;
    }
    strbuf_free(&sides[r].err);
  }
  if (rc == 0) {
    *lat_s = sides[0].lat;
    *bw_Bps = sides[0].bw;
  } else if (!err->len) {
    strbuf_puts(err, "cannot start the link measurement's threads");
  }
  return rc;
}

/* One worker thread of rt_profile_threads. */
typedef struct pr_job {
  const be_stream *s;  /* the stream */
  const rt_opts *mo;   /* its model's options */
  int worker, nworkers; /* which share of the configurations */
  rt_layer_cost *costs; /* per layer (shared; each worker writes its own layers) */
  pthread_barrier_t *at_optim; /* all workers measure the optimizer together */
  double optim_Bps;     /* its measurement of the optimizer's rate */
  bool ok;              /* its model was built */
} pr_job;

static void *pr_run(void *arg) {
  pr_job *j = arg;
  rt_model *m = rt_model_new(j->s, j->mo, NULL);
  j->ok = m != NULL;
  if (m) rt_profile_layers(m, j->worker, j->nworkers, j->costs);
  pthread_barrier_wait(j->at_optim); /* every rank updates at once, as at the end of a step */
  if (m) j->optim_Bps = rt_model_optimizer_rate(m);
  rt_model_free(m);
  return NULL;
}

int rt_profile_threads(const be_stream *s, const rt_opts *mo, strbuf *json, strbuf *err) {
  strbuf why = {0};
  rt_model *m = rt_model_new(s, mo, &why);
  if (!m) {
    strbuf_puts(err, strbuf_cstr(&why));
    strbuf_free(&why);
    return -1;
  }
  int n = s->nranks < 1 ? 1 : s->nranks; /* as many busy cores as the run will have */
  rt_layer_cost *costs = xcalloc((size_t)s->nlayers, sizeof *costs);
  pr_job *jobs = xcalloc((size_t)n, sizeof *jobs);
  pthread_t *th = xcalloc((size_t)n, sizeof *th);
  pthread_barrier_t at_optim;
  pthread_barrier_init(&at_optim, NULL, (unsigned)n);
  int started = 0;
  for (int w = 0; w < n; w++) {
    jobs[w] = (pr_job){s, mo, w, n, costs, &at_optim, 0, false};
    if (pthread_create(&th[w], NULL, pr_run, &jobs[w]) != 0) break;
    started++;
  }
  if (started < n) { /* the started ones wait at the barrier: let them through */
    for (int w = started; w < n; w++) pthread_barrier_wait(&at_optim);
  }
  for (int w = 0; w < started; w++) pthread_join(th[w], NULL);
  pthread_barrier_destroy(&at_optim);
  int rc = started == n ? 0 : -1;
  if (rc) strbuf_puts(err, "cannot start the profiler's threads");
  double optim = 0;
  for (int w = 0; w < started; w++) optim += jobs[w].optim_Bps / n;
  rt_profile_fill(m, costs);
  double lat = 0, bw = 0;
  size_t big = 0;
  for (int i = 0; i < s->nlayers; i++)
    if (costs[i].out_bytes > (double)big) big = (size_t)costs[i].out_bytes;
  if (rc == 0 && link_threads(big, &lat, &bw, err) != 0) rc = -1;
  if (rc == 0) rt_profile_json(s, rt_model_scale(m), costs, "cpu", lat, bw, optim, json);
  free(costs);
  free(jobs);
  free(th);
  rt_model_free(m);
  strbuf_free(&why);
  return rc;
}
