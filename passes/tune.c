/* tune.c -- the OctoPipe tuner: co-optimizes partition, placement and schedule with the simulator
 * as the only judge. It evaluates the classic plans of the comparison (each with its own
 * schedule, and its partition and placement under the adaptive scheduler), then improves the
 * best one by local search: moves aimed at the busiest device (shift a stage boundary, move a
 * stage to another device or swap two, split or merge stages) and at the adaptive scheduler's
 * knobs, keeping a move when the simulated step is shorter and every device fits its memory;
 * when no move helps it perturbs the best plan with seeded random moves and searches again,
 * until several restarts in a row bring nothing or the budget is spent. Candidates are simulated
 * in batches of a fixed size on a pool of threads and judged in a fixed order, and the budget is
 * counted in plans simulated, so the plan does not depend on the thread count or the machine's
 * speed. The algorithm, its moves and knobs are documented in docs/tuner.md. */
#include <limits.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "passes.h"
#include "sim.h"

/* A candidate plan: stages, their devices and the adaptive scheduler's knobs. */
typedef struct tune_plan {
  int k;              /* number of stages */
  int *ends;          /* k stage ends (exclusive layer index; ends[k-1] == layers) */
  int *dev;           /* k stage devices */
  int *rc;            /* k: how the stage recomputes: 0 none, TUNE_RC_ALL every recomputable
                         layer (recompute = full), N (1 <= N < its recomputable layers) the
                         first N (recompute_layers = N); all 0 unless the module's policy is
                         not full and memory asked for it; a stage that kept it through a shift
                         but has no recomputable layer left recomputes nothing (plan_stage_mem) */
  bool *off;          /* k: the stage offloads its activations to host memory (only when
                         tuner.offload; never the last stage, plan_stage_mem) */
  pass_adaptive_opts knobs; /* schedule knobs */
} tune_plan;

/* What the simulator said of a plan. */
typedef struct tune_score {
  bool ok;          /* the plan could be simulated */
  bool fits;        /* every device within its memory limit */
  double makespan;  /* step time (s); INFINITY when !ok */
  double bubble;    /* bubble ratio */
  double spread;    /* sum over devices of the squared busy time (s^2): of two plans with the
                       same step, the one whose work is spread more evenly leads on */
  double overflow;  /* when !fits: bytes over the limit on the worst device */
  int overflow_dev; /* that device */
  int tight_dev;    /* when it fits: the device whose peak memory is nearest its limit, when at
                       least TUNE_TIGHT of it (else -1): where recomputing a stage may let the
                       adaptive scheduler keep more microbatches in flight */
  bool cut;         /* its simulation stopped at the batch's cutoff (tuner.cutoff): it is no
                       better than that, scored as not ok and not cached */
} tune_score;

/* The score of a plan not simulated to its end (pruned, cut, late) or that cannot run: never
 * better than a plan that ran. */
static const tune_score tune_worst = {false, false, INFINITY, 1, INFINITY, INFINITY, -1, -1, false};

/* The score of classic plan b as its own schedule runs it. */
static tune_score tune_score_of(const pass_baseline *b) {
  return (tune_score){true, b->fits, b->makespan, b->bubble, INFINITY, b->fits ? 0 : INFINITY,
                      -1, -1, false};
}

/* tune_plan.rc of a stage that recomputes every recomputable layer. */
#define TUNE_RC_ALL INT_MAX

/* Fraction of its memory limit above which a device is tight (see tune_score.tight_dev). */
#define TUNE_TIGHT 0.9

/* One entry of the evaluation cache (open addressing on the plan's 64-bit hash; two plans with
 * the same hash are taken to be the same plan). */
typedef struct tune_memo {
  uint64_t key;     /* plan hash; 0: empty slot */
  tune_score score; /* its score */
  double *busy;     /* per device: busy time in the simulated step (in the tuner's arena) */
} tune_memo;

/* What one thread needs to simulate plans. */
typedef struct tune_worker {
  ir_module *w;       /* work copy whose stages are rewritten for each evaluation */
  diag_engine *quiet; /* swallows the errors of plans that cannot be built */
  FILE *sink;         /* its output (/dev/null) */
  sim_result r;       /* reused simulation result */
} tune_worker;

/* A candidate of a batch. */
typedef struct tune_slot {
  tune_plan plan;   /* the plan */
  uint64_t key;     /* its hash */
  tune_score score; /* its score, once judged */
  double *busy;     /* per device: busy time when simulated here */
  int how;          /* SLOT_MEMO, SLOT_SAME (as an earlier slot), SLOT_PRUNED, SLOT_SIM, SLOT_LATE,
                       SLOT_SKIP (not needed: an earlier slot of the batch beats the plan it is
                       judged against; counted as passed over and not cached, whether it ran
                       or not) */
  int same;         /* SLOT_SAME: that slot */
} tune_slot;
enum { SLOT_MEMO, SLOT_SAME, SLOT_PRUNED, SLOT_SIM, SLOT_LATE, SLOT_SKIP };

/* Most candidates of one batch. */
enum { TUNE_BATCH = 64 };

/* The tuner's state. */
typedef struct tuner {
  const ir_module *m;      /* the module planned */
  const pass_tune_opts *o; /* options */
  int n, p, kmax;          /* layers, devices, most stages tried */
  bool recomp;             /* stages may recompute: the module's policy is not full and some layer
                              is recomputable */
  bool offload;            /* stages may offload: every device has a 'pcie' link to host memory
                              (and the option allows it) */
  int *cum_rc;             /* per layer i: recomputable layers < i */
  double nmb;              /* microbatches */
  double *lw;              /* per layer: F + B + W (for cost-aware splits) */
  double *cum;             /* per device dv, per layer i: (n + 1) x dv + i holds the sum of
                              F + B + W over layers < i at dv's costs (for the pruning bound) */
  double *cum_f;           /* per layer i: the cheapest F of the layers < i */
  double *cum_param;       /* per layer i: static bytes of the layers < i */
  double *rate;            /* per device: optimizer rate (bytes/s) */
  double *busy;            /* per device: busy time of the plan last looked up */
  double *scratch;         /* 3 x devices: the pruning bound's work */
  support_pool *pool;      /* the threads */
  tune_worker *workers;    /* one per thread */
  tune_slot slots[TUNE_BATCH]; /* the current batch */
  tune_memo *memo;         /* evaluation cache */
  size_t memo_cap;         /* its size (a power of two) */
  int memo_used;           /* its entries */
  arena mem;               /* the cache's busy arrays */
  int evals;               /* plans simulated */
  int passed;              /* moves passed over: a batch's moves after its first improving one
                              (SLOT_SKIP), not needed; the effort budget counts them with the
                              plans simulated, as it did when they were simulated, so that a
                              budget buys the same search */
  int pruned;              /* candidates discarded by the bound without simulating */
  int cut;                 /* simulations stopped at the cutoff (tune_score.cut) */
  double work;             /* operations of the plans simulated and passed over (3 x stages x
                              microbatches each, cut or not): the work budget's count */
  double cutoff;           /* the batch being judged: its simulations stop once their step
                              provably exceeds this (s; 0: none) */
  const tune_score *beat;  /* the batch being judged for a first improvement: the score to beat
                              (NULL: every slot is judged) */
  atomic_int first_win;    /* the lowest slot of that batch known to beat it (TUNE_BATCH: none
                              yet); the slots after it are not needed */
  int iters;               /* search iterations */
  uint64_t rng;            /* xorshift state */
  double t0;               /* start time */
  bool late;               /* the time budget ran out */
  double last_print;       /* last progress line */
  double ref;              /* makespan of the reference plan for progress (S-1F1B) */
} tuner;

static uint64_t rng_next(tuner *t) {
  t->rng ^= t->rng >> 12;
  t->rng ^= t->rng << 25;
  t->rng ^= t->rng >> 27;
  return t->rng * 2685821657736338717ull;
}

/* A uniform integer in [0, n). Pre: n > 0. */
static int rng_below(tuner *t, int n) { return (int)(rng_next(t) % (uint64_t)n); }

/* ---- Plans ------------------------------------------------------------------------------------*/

static void plan_init(tune_plan *pl, int cap) {
  pl->k = 0;
  pl->ends = xmalloc((size_t)cap * sizeof *pl->ends);
  pl->dev = xmalloc((size_t)cap * sizeof *pl->dev);
  pl->rc = xcalloc((size_t)cap, sizeof *pl->rc);
  pl->off = xcalloc((size_t)cap, sizeof *pl->off);
  pl->knobs = pass_adaptive_default();
}

static void plan_free(tune_plan *pl) {
  free(pl->ends);
  free(pl->dev);
  free(pl->rc);
  free(pl->off);
}

/* Copy src into dst. Pre: dst has room for src->k stages. */
static void plan_copy(tune_plan *dst, const tune_plan *src) {
  dst->k = src->k;
  memcpy(dst->ends, src->ends, (size_t)src->k * sizeof *src->ends);
  memcpy(dst->dev, src->dev, (size_t)src->k * sizeof *src->dev);
  memcpy(dst->rc, src->rc, (size_t)src->k * sizeof *src->rc);
  memcpy(dst->off, src->off, (size_t)src->k * sizeof *src->off);
  dst->knobs = src->knobs;
}

/* First layer of stage s. */
static int plan_first(const tune_plan *pl, int s) { return s ? pl->ends[s - 1] : 0; }


/* The recomputable layers of stage s of pl. */
static int tune_rc_count(const tuner *t, const tune_plan *pl, int s) {
  return t->cum_rc[pl->ends[s]] - t->cum_rc[plan_first(pl, s)];
}

/* Write stage s of pl's memory choices into is: recompute and recompute_layers (none for a
 * stage without recomputable layers, whatever its flag), and offload (never for the last stage,
 * whose B follows its F at once, whatever its flag). */
static void plan_stage_mem(const tuner *t, const tune_plan *pl, int s, ir_stage *is) {
  int rc = tune_rc_count(t, pl, s) > 0 ? pl->rc[s] : 0;
  is->recompute = rc ? IR_RECOMPUTE_FULL : IR_RECOMPUTE_NONE;
  is->recompute_layers = rc && rc != TUNE_RC_ALL ? rc : 0;
  is->offload = pl->off[s] && s + 1 < pl->k;
}

/* FNV-1a hash of a plan (never 0). */
static uint64_t plan_hash(const tune_plan *pl) {
  uint64_t h = 1469598103934665603ull;
  int words[3] = {pl->k, pl->knobs.split, (int)llround(pl->knobs.mem_margin * 1000)};
  for (int i = 0; i < 3; i++) h = (h ^ (uint64_t)(uint32_t)words[i]) * 1099511628211ull;
  for (int i = 0; i < pl->k; i++) {
    h = (h ^ (uint64_t)(uint32_t)pl->ends[i]) * 1099511628211ull;
    h = (h ^ (uint64_t)(uint32_t)pl->dev[i]) * 1099511628211ull;
    if (pl->rc[i]) /* only then: plans without recomputation hash as before */
      h = (h ^ (0x80000000u | (uint64_t)(uint32_t)i)) * 1099511628211ull;
    if (pl->rc[i] && pl->rc[i] != TUNE_RC_ALL) /* and full recomputation as before too */
      h = (h ^ (0x40000000u | (uint64_t)(uint32_t)pl->rc[i])) * 1099511628211ull;
    if (pl->off[i] && i + 1 < pl->k) /* as plan_stage_mem writes it */
      h = (h ^ (0x20000000u | (uint64_t)(uint32_t)i)) * 1099511628211ull;
  }
  return h ? h : 1;
}

/* Whether a is better than b: fitting beats not fitting; among fitting plans the shorter step
 * wins, and of two equal steps the more even spread of work (several devices at the same
 * largest load must all shed work before the step shortens: the spread lets the search cross
 * that plateau one device at a time); among the others the smaller overflow. */
static bool score_better(const tune_score *a, const tune_score *b) {
  if (a->ok != b->ok) return a->ok;
  if (a->fits != b->fits) return a->fits;
  if (a->fits) {
    if (a->makespan < b->makespan * (1 - 1e-9)) return true;
    return a->makespan <= b->makespan * (1 + 1e-9) && a->spread < b->spread * (1 - 1e-9);
  }
  return a->overflow < b->overflow;
}

/* ---- Evaluation ------------------------------------------------------------------------------ */

/* Whether the search must stop: the effort budget is spent, or the time budget (when given). */
static bool tune_spent(tuner *t) {
  if (t->o->evals > 0 && t->evals + t->passed >= t->o->evals) return true;
  if (t->o->work > 0 && t->work >= t->o->work) return true;
  if (t->o->budget > 0 && support_seconds() - t->t0 > t->o->budget) t->late = true;
  return t->late;
}

/* Simulate plan pl with the adaptive scheduler on worker wk, within 'limits' (its cutoff and stop,
 * as pass_adaptive_run); busy[] receives the devices' busy times (0 unless the plan runs);
 * *stopped says whether limits' stop ended the run (the score is then tune_worst's). Thread-safe
 * for distinct workers. */
static tune_score tune_simulate(const tuner *t, tune_worker *wk, const tune_plan *pl,
                                const sim_opts *limits, double *busy, bool *stopped) {
  tune_score sc = tune_worst;
  memset(busy, 0, (size_t)t->p * sizeof *busy);
  ir_module *w = wk->w;
  w->nstages = 0;
  for (int s = 0; s < pl->k; s++) {
    ir_stage *is = ir_module_add_stage(w, plan_first(pl, s), pl->ends[s]);
    is->device = pl->dev[s];
    plan_stage_mem(t, pl, s, is);
  }
  sim_model *p = sim_model_build(w, wk->quiet);
  if (p) {
    sim_status st = pass_adaptive_run(p, w, &pl->knobs, limits, &wk->r, &sc.overflow_dev,
                                      &sc.overflow);
    sc.cut = st == SIM_CUTOFF;
    *stopped = st == SIM_STOPPED;
    if (st == SIM_OK) {
      sc.ok = true;
      sc.fits = wk->r.fits;
      sc.makespan = wk->r.makespan;
      sc.bubble = wk->r.bubble;
      sc.overflow = 0;
      for (int dv = 0; dv < wk->r.ndevices && !sc.fits; dv++) {
        double over = wk->r.dev[dv].peak_mem - wk->r.dev[dv].mem_limit;
        if (over > sc.overflow) sc.overflow = over, sc.overflow_dev = dv;
      }
      sc.spread = 0;
      double tight = TUNE_TIGHT;
      for (int dv = 0; dv < t->p; dv++) {
        busy[dv] = wk->r.dev[dv].busy;
        sc.spread += busy[dv] * busy[dv];
        double lim = wk->r.dev[dv].mem_limit, use = wk->r.dev[dv].peak_mem / lim;
        if (sc.fits && lim > 0 && isfinite(lim) && use >= tight) tight = use, sc.tight_dev = dv;
      }
    } else if (sc.overflow_dev >= 0) {
      sc.ok = true; /* it would run if memory allowed: an overflow to shrink */
    }
    sim_model_free(p);
  }
  return sc;
}

/* A lower bound on the step of plan pl (as the simulator's work bound): over its devices, the
 * first microbatch's cheapest forwards before the device's first stage, then every microbatch's
 * F, B and W of its stages and its optimizer step. Transfers are left out. */
static double tune_plan_bound(const tuner *t, const tune_plan *pl, double *work, double *stat,
                              double *head) {
  for (int dv = 0; dv < t->p; dv++) work[dv] = stat[dv] = 0, head[dv] = -1;
  for (int s = 0; s < pl->k; s++) {
    int dv = pl->dev[s], a = plan_first(pl, s), b = pl->ends[s];
    const double *c = t->cum + (size_t)(t->n + 1) * dv;
    work[dv] += t->nmb * (c[b] - c[a]);
    stat[dv] += t->cum_param[b] - t->cum_param[a];
    if (head[dv] < 0) head[dv] = t->cum_f[a];
  }
  double lb = 0;
  for (int dv = 0; dv < t->p; dv++) {
    if (head[dv] < 0) continue;
    double opt = stat[dv] > 0 && t->rate[dv] > 0 ? 2 * stat[dv] / t->rate[dv] : 0;
    double x = head[dv] + work[dv] + opt;
    if (x > lb) lb = x;
  }
  return lb;
}

/* Slot of key in the cache: its entry, or the empty slot where it goes. */
static tune_memo *memo_slot(tune_memo *memo, size_t cap, uint64_t key) {
  size_t at = (size_t)key & (cap - 1);
  while (memo[at].key && memo[at].key != key) at = (at + 1) & (cap - 1);
  return &memo[at];
}

/* Cache score sc (and busy[], copied) of the plan with hash key. */
static void memo_put(tuner *t, uint64_t key, const tune_score *sc, const double *busy) {
  if ((size_t)(t->memo_used + 1) * 2 > t->memo_cap) { /* grow: rehash into twice the room */
    size_t cap = t->memo_cap * 2;
    tune_memo *nm = xcalloc(cap, sizeof *nm);
    for (size_t i = 0; i < t->memo_cap; i++)
      if (t->memo[i].key) *memo_slot(nm, cap, t->memo[i].key) = t->memo[i];
    free(t->memo);
    t->memo = nm;
    t->memo_cap = cap;
  }
  tune_memo *e = memo_slot(t->memo, t->memo_cap, key);
  e->key = key;
  e->score = *sc;
  e->busy = arena_alloc(&t->mem, (size_t)t->p * sizeof *e->busy);
  memcpy(e->busy, busy, (size_t)t->p * sizeof *e->busy);
  t->memo_used++;
}

/* Pool body: simulate the i-th slot that needs it. */
typedef struct tune_job {
  tuner *t;   /* the tuner */
  int *which; /* slots to simulate */
} tune_job;

/* What a slot's simulation asks now and then: whether an earlier slot of its batch already beats
 * the plan the batch is judged against. */
typedef struct tune_stop_ctx {
  tuner *t;  /* the tuner */
  int slot;  /* the slot simulated */
} tune_stop_ctx;

/* sim_opts.stop of a slot's simulation (tune_stop_ctx). */
static bool tune_stop(void *ctx) {
  const tune_stop_ctx *c = ctx;
  return atomic_load_explicit(&c->t->first_win, memory_order_relaxed) < c->slot;
}

static void tune_job_run(void *ctx, int i, int worker) {
  tune_job *j = ctx;
  tuner *t = j->t;
  int slot = j->which[i];
  tune_slot *sl = &t->slots[slot];
  if (t->o->budget > 0 && support_seconds() - t->t0 > t->o->budget) {
    sl->how = SLOT_LATE; /* past the time budget: not simulated */
    return;
  }
  tune_stop_ctx sc = {t, slot};
  sim_opts limits = {.cutoff = t->cutoff};
  if (t->beat) {
    if (tune_stop(&sc)) { /* an earlier slot wins: this one is not needed */
      sl->how = SLOT_SKIP;
      return;
    }
    limits.stop = tune_stop, limits.stop_ctx = &sc;
  }
  bool stopped = false;
  sl->score = tune_simulate(t, &t->workers[worker], &sl->plan, &limits, sl->busy, &stopped);
  if (stopped) sl->how = SLOT_SKIP;
  if (!t->beat || stopped || !score_better(&sl->score, t->beat)) return;
  int won = atomic_load(&t->first_win);
  while (slot < won && !atomic_compare_exchange_weak(&t->first_win, &won, slot)) {
  }
}

/* Judge the first n slots of the batch: from the cache, as an earlier slot of the same batch,
 * discarded when their bound is above 'cutoff' (a step no better plan can have; INFINITY: no
 * discarding), else simulated on the pool, each simulation stopped once its step provably
 * exceeds 'cutoff', and cached when it ran to the end, in slot order. Pruned, cut, late and
 * passed-over slots get a score that is never better than any plan that ran.
 *
 * With 'beat' (NULL: none) the slots are the local search's: nends logical batches, the b-th
 * ending at ends[b] (ascending, the last n), judged in turn for the first slot whose score is
 * better than *beat (tune_descend's batches). The slots after it are not needed: they are not
 * started, or stopped when it turns out to be better (SLOT_SKIP), and the rest of its logical
 * batch is counted as passed over (tuner.passed), not cached, even where it ran to its end; the
 * logical batches after it are neither counted nor cached, as if never built. Before each
 * logical batch but the first the effort budget is checked (tune_spent) and, when it is spent,
 * the judging stops there. So what is counted and cached does not depend on the threads, while
 * idle threads go on to the later logical batches' plans. Returns the number of slots judged
 * (their scores are set): n, or the end of the logical batch holding the first better slot, or
 * the start of the first logical batch the budget did not allow. */
static int tune_batch(tuner *t, int n, double cutoff, const tune_score *beat, const int *ends,
                      int nends) {
  int which[TUNE_BATCH], nsim = 0;
  double *work = t->scratch, *stat = work + t->p, *head = stat + t->p;
  int won = TUNE_BATCH; /* the first cached slot that beats *beat */
  for (int i = 0; i < n; i++) {
    tune_slot *sl = &t->slots[i];
    sl->key = plan_hash(&sl->plan);
    tune_memo *e = memo_slot(t->memo, t->memo_cap, sl->key);
    sl->how = SLOT_SIM;
    if (e->key == sl->key) {
      sl->how = SLOT_MEMO;
      sl->score = e->score;
      if (beat && won == TUNE_BATCH && score_better(&sl->score, beat)) won = i;
      continue;
    }
    for (int j = 0; j < i && sl->how == SLOT_SIM; j++)
      if (t->slots[j].key == sl->key && t->slots[j].how != SLOT_SAME) sl->how = SLOT_SAME, sl->same = j;
    if (sl->how == SLOT_SAME) continue;
    if (isfinite(cutoff) && tune_plan_bound(t, &sl->plan, work, stat, head) > cutoff * (1 + 1e-9)) {
      sl->how = SLOT_PRUNED;
      sl->score = tune_worst;
      continue;
    }
    which[nsim++] = i;
  }
  tune_job job = {t, which};
  t->cutoff = isfinite(cutoff) ? cutoff * (1 + 1e-9) : 0;
  t->beat = beat;
  atomic_store(&t->first_win, won);
  support_pool_run(t->pool, nsim, tune_job_run, &job);
  won = atomic_load(&t->first_win);
  t->cutoff = 0;
  t->beat = NULL;
  int one[1] = {n};
  if (!beat) ends = one, nends = 1;
  for (int b = 0, lo = 0; b < nends; lo = ends[b++]) {
    if (b > 0 && (won < lo || tune_spent(t))) return lo;
    for (int i = lo; i < ends[b]; i++) {
      tune_slot *sl = &t->slots[i];
      if (i > won && (sl->how == SLOT_SIM || sl->how == SLOT_SKIP)) {
        sl->how = SLOT_SKIP;
        sl->score = tune_worst;
        t->passed++;
        t->work += 3.0 * sl->plan.k * t->nmb;
      } else if (sl->how == SLOT_SIM) {
        t->evals++;
        t->work += 3.0 * sl->plan.k * t->nmb;
        if (sl->score.cut)
          t->cut++; /* its score only says "worse than the cutoff": not cached */
        else
          memo_put(t, sl->key, &sl->score, sl->busy);
      } else if (sl->how == SLOT_PRUNED) {
        t->pruned++;
      } else if (sl->how == SLOT_LATE) {
        sl->score = tune_worst;
        t->late = true;
      } else if (sl->how == SLOT_SAME) {
        sl->score = t->slots[sl->same].score;
      }
    }
  }
  return n;
}

/* The score of plan pl: from the cache, else simulated (and cached). */
static tune_score tune_eval(tuner *t, const tune_plan *pl) {
  plan_copy(&t->slots[0].plan, pl);
  tune_batch(t, 1, INFINITY, NULL, NULL, 0);
  return t->slots[0].score;
}

/* Make t->busy hold the busy times of plan pl's devices (zeros when it was never simulated). */
static void tune_busy(tuner *t, const tune_plan *pl) {
  uint64_t key = plan_hash(pl);
  tune_memo *e = memo_slot(t->memo, t->memo_cap, key);
  if (e->key == key) memcpy(t->busy, e->busy, (size_t)t->p * sizeof *t->busy);
  else memset(t->busy, 0, (size_t)t->p * sizeof *t->busy);
}

/* ---- Moves ----------------------------------------------------------------------------------- */

/* A neighbour of cur: *out = cur changed by move 'kind' around stage s (and device d). Returns
 * false when the move does not apply. Kinds: 0 shift boundary s|s+1 left, 1 right, 2 move stage
 * s to device d, 3 swap the devices of stages s and d (a stage index), 4 split stage s (second
 * half to device d), 5 merge stages s and s+1 (same device), 6 toggle split, 7 set mem_margin to
 * the d-th value of margins[], 8 toggle stage s's recomputation between none and all its
 * recomputable layers (when t->recomp and the stage has one; how many of them is tune_trim's
 * choice, after the search), 9 toggle stage s's activation offload (when t->offload, not the
 * last stage). A stage keeps its recomputation and offload through shifts, moves and swaps;
 * both halves of a split keep them; a merged stage takes the first of the two's. */
static const double margins[] = {0.5, 0.7, 0.85, 0.95, 1.0};
enum { MV_LEFT, MV_RIGHT, MV_MOVE, MV_SWAP, MV_SPLIT, MV_MERGE, MV_KNOB_SPLIT, MV_KNOB_MARGIN,
       MV_RECOMP, MV_OFFLOAD };


static bool tune_move(const tuner *t, const tune_plan *cur, int kind, int s, int d,
                      tune_plan *out) {
  plan_copy(out, cur);
  int k = cur->k;
  switch (kind) {
  case MV_LEFT: /* stage s gives its last layer to s + 1 */
    if (s + 1 >= k || cur->ends[s] - plan_first(cur, s) < 2) return false;
    out->ends[s]--;
    return true;
  case MV_RIGHT: /* stage s + 1 gives its first layer to s */
    if (s + 1 >= k || cur->ends[s + 1] - cur->ends[s] < 2) return false;
    out->ends[s]++;
    return true;
  case MV_MOVE:
    if (d == cur->dev[s]) return false;
    out->dev[s] = d;
    return true;
  case MV_SWAP:
    if (d == s || cur->dev[d] == cur->dev[s]) return false;
    out->dev[s] = cur->dev[d];
    out->dev[d] = cur->dev[s];
    return true;
  case MV_SPLIT: {
    int first = plan_first(cur, s), end = cur->ends[s];
    if (k >= t->kmax || end - first < 2) return false;
    /* Cut where the stage's cost is halved (at least one layer on each side). */
    double total = 0, run = 0;
    for (int l = first; l < end; l++) total += t->lw[l];
    int cut = first + 1;
    for (int l = first; l < end - 1; l++) {
      run += t->lw[l];
      cut = l + 1;
      if (run >= total / 2) break;
    }
    memmove(out->ends + s + 1, cur->ends + s, (size_t)(k - s) * sizeof *out->ends);
    memmove(out->dev + s + 1, cur->dev + s, (size_t)(k - s) * sizeof *out->dev);
    memmove(out->rc + s + 1, cur->rc + s, (size_t)(k - s) * sizeof *out->rc);
    memmove(out->off + s + 1, cur->off + s, (size_t)(k - s) * sizeof *out->off);
    out->ends[s] = cut;
    out->dev[s + 1] = d;
    out->k = k + 1;
    return true;
  }
  case MV_MERGE:
    if (s + 1 >= k || cur->dev[s] != cur->dev[s + 1]) return false;
    memmove(out->ends + s, cur->ends + s + 1, (size_t)(k - s - 1) * sizeof *out->ends);
    memmove(out->dev + s + 1, cur->dev + s + 2, (size_t)(k - s - 2) * sizeof *out->dev);
    memmove(out->rc + s + 1, cur->rc + s + 2, (size_t)(k - s - 2) * sizeof *out->rc);
    memmove(out->off + s + 1, cur->off + s + 2, (size_t)(k - s - 2) * sizeof *out->off);
    out->k = k - 1;
    return true;
  case MV_KNOB_SPLIT:
    out->knobs.split = !cur->knobs.split;
    return true;
  case MV_KNOB_MARGIN:
    if (fabs(margins[d] - cur->knobs.mem_margin) < 1e-9) return false;
    out->knobs.mem_margin = margins[d];
    return true;
  case MV_RECOMP:
    if (!t->recomp || tune_rc_count(t, cur, s) == 0) return false;
    out->rc[s] = cur->rc[s] ? 0 : TUNE_RC_ALL;
    return true;
  case MV_OFFLOAD:
    if (!t->offload || s + 1 >= k) return false;
    out->off[s] = !cur->off[s];
    return true;
  default:
    return false;
  }
}

/* Print a progress line on the terminal (at most every 0.2 s unless 'last'). */
static void tune_progress(tuner *t, const tune_score *best, bool last) {
  if (!t->o->progress) return;
  double now = support_seconds();
  if (!last && now - t->last_print < 0.2) return;
  t->last_print = now;
  fprintf(stderr, "\rtune: iteration %d, %d plans, best step %.3f ms", t->iters, t->evals,
          best->makespan * 1e3);
  if (t->ref > 0 && best->fits) fprintf(stderr, " (%.2fx over S-1F1B)", t->ref / best->makespan);
  fprintf(stderr, ", %.1f s%s", now - t->t0, last ? "\n" : "   ");
  fflush(stderr);
}

/* A move of the local search: kind, stage and device (or second stage) of tune_move. */
typedef struct tune_mv {
  int kind, s, d;
} tune_mv;

/* Sizes of the successive (logical) batches of one local-search iteration: small first (an early
 * move often helps), larger later. Fixed, so the moves judged do not depend on the thread count;
 * tune_batch gets as many of them at once as TUNE_BATCH slots hold, so that idle threads may go
 * on to the next ones. */
static const int batch_sizes[] = {2, 4, 8, 16, 32, TUNE_BATCH};

/* First-improvement local search from *cur (score *cs): returns when no move improves or the
 * budget is spent. Moves are aimed at the busiest device; they are judged in batches, in a
 * fixed order, and the first that improves in that order is taken. */
static void tune_descend(tuner *t, tune_plan *cur, tune_score *cs, tune_plan *best_n,
                         const tune_score *global_best) {
  tune_mv *mv = NULL;
  int nmv = 0, mv_cap = 0;
  for (;;) {
    if (tune_spent(t)) break;
    t->iters++;
    tune_busy(t, cur);
    int hot = 0, cold = 0;
    for (int dv = 1; dv < t->p; dv++) {
      if (t->busy[dv] > t->busy[hot]) hot = dv;
      if (t->busy[dv] < t->busy[cold]) cold = dv;
    }
    /* The three least busy devices are the targets of moves off the busiest one. */
    int targets[3] = {cold, -1, -1};
    for (int j = 1; j < 3; j++)
      for (int dv = 0; dv < t->p; dv++) {
        bool taken = dv == hot;
        for (int i = 0; i < j; i++) taken |= targets[i] == dv;
        if (!taken && (targets[j] < 0 || t->busy[dv] < t->busy[targets[j]])) targets[j] = dv;
      }
    /* The moves, in the order they are judged. The scan starts at a stage that rotates with the
     * iterations so that no part of the model is always tried first. */
    nmv = 0;
    bool memory = !cs->fits; /* out of memory: every move may help */
    for (int i0 = 0; i0 < cur->k; i0++) {
      int s = (i0 + t->iters) % cur->k;
      bool on_hot = cur->dev[s] == hot;
      bool next_hot = s + 1 < cur->k && cur->dev[s + 1] == hot;
      int kinds[8], nk = 0;
      if (on_hot || next_hot || memory) kinds[nk++] = MV_LEFT, kinds[nk++] = MV_RIGHT;
      if (on_hot || memory) kinds[nk++] = MV_MOVE, kinds[nk++] = MV_SPLIT, kinds[nk++] = MV_SWAP;
      if (on_hot) kinds[nk++] = MV_MERGE;
      for (int i = 0; i < nk; i++) {
        int reps = kinds[i] == MV_MOVE || kinds[i] == MV_SPLIT ? 3
                   : kinds[i] == MV_SWAP                       ? cur->k
                                                               : 1;
        for (int r = 0; r < reps; r++) {
          int d = kinds[i] == MV_SWAP ? r : targets[r];
          if (d < 0) continue;
          /* Swaps exchange a stage of the busiest device with one of the least busy ones. */
          if (kinds[i] == MV_SWAP && cur->dev[r] != targets[0] && cur->dev[r] != targets[1] &&
              cur->dev[r] != targets[2])
            continue;
          VEC_PUSH(mv, nmv, mv_cap, ((tune_mv){kinds[i], s, d}));
        }
      }
    }
    VEC_PUSH(mv, nmv, mv_cap, ((tune_mv){MV_KNOB_SPLIT, 0, 0}));
    for (int i = 0; i < (int)(sizeof margins / sizeof margins[0]); i++)
      VEC_PUSH(mv, nmv, mv_cap, ((tune_mv){MV_KNOB_MARGIN, 0, i}));
    /* Recomputation, last: a stage that recomputes may stop (its B gets shorter); out of memory,
     * any stage may start (its activations shrink to its layers' inputs); a stage of the device
     * whose memory is tight may start (more microbatches fit in flight there). Plans that fit
     * with every device below TUNE_TIGHT of its limit and no stage recomputing get none of these
     * moves, so their search is as without them. A stage starts with all its recomputable
     * layers; tune_trim chooses how many after the search. */
    for (int kind = MV_RECOMP; kind <= MV_OFFLOAD; kind++) {
      if (!(kind == MV_RECOMP ? t->recomp : t->offload)) continue;
      for (int i0 = 0; i0 < cur->k; i0++) {
        int s = (i0 + t->iters) % cur->k;
        bool on = kind == MV_RECOMP ? cur->rc[s] != 0 : cur->off[s];
        /* recomputation also on the tight device (more microbatches in flight for one more
         * forward); offload not (its copies cost every plan they are tried on a full
         * simulation, and the all-offloading starts cover the crowded cases) */
        bool tight = cs->tight_dev >= 0 && cur->dev[s] == cs->tight_dev;
        if (on || memory || (tight && kind == MV_RECOMP))
          VEC_PUSH(mv, nmv, mv_cap, ((tune_mv){kind, s, 0}));
      }
    }
    /* Judge them batch by batch, as many batches at once as the slots hold; a fitting plan
     * prunes candidates whose bound is not shorter. */
    int found = -1, size_at = 0, nsizes = (int)(sizeof batch_sizes / sizeof batch_sizes[0]);
    for (int at = 0; at < nmv && found < 0;) {
      if (at > 0 && tune_spent(t)) break;
      int n = 0, ends[sizeof batch_sizes / sizeof batch_sizes[0]], nends = 0;
      while (at < nmv && nends < nsizes && n + batch_sizes[size_at] <= TUNE_BATCH) {
        for (int got = 0; at < nmv && got < batch_sizes[size_at]; at++)
          if (tune_move(t, cur, mv[at].kind, mv[at].s, mv[at].d, &t->slots[n].plan)) n++, got++;
        ends[nends++] = n;
        if (size_at + 1 < nsizes) size_at++;
      }
      int judged = tune_batch(t, n, cs->fits ? cs->makespan : INFINITY, cs, ends, nends);
      for (int i = 0; i < judged && found < 0; i++)
        if (score_better(&t->slots[i].score, cs)) found = i;
      if (judged < n) break; /* the budget ran out between two batches */
    }
    if (found < 0) break;
    plan_copy(best_n, &t->slots[found].plan);
    *cs = t->slots[found].score;
    plan_copy(cur, best_n);
    tune_progress(t, score_better(cs, global_best) ? cs : global_best, false);
  }
  free(mv);
}

/* A random move (for perturbation). Returns false when the drawn move does not apply. */
static bool tune_random_move(tuner *t, const tune_plan *cur, tune_plan *out) {
  int kind = rng_below(t, 6), s = rng_below(t, cur->k);
  int d = kind == MV_SWAP ? rng_below(t, cur->k) : rng_below(t, t->p);
  return tune_move(t, cur, kind, s, d, out);
}

/* Per-layer recomputation of the search's best plan *best (score *bs): for each stage that
 * recomputes all its R >= 2 recomputable layers, in stage order, a bisection over the count N of
 * its first recomputable layers that recompute (recompute_layers; Megatron's block method) for
 * the smallest N with which the plan still fits, each stage's choice made with the earlier
 * stages' in place; of the plans simulated (N = R included) the best by score_better is kept,
 * so the plan is never worse than the search's. Fewer recomputed layers shorten the stage's B
 * and hold more memory. Deterministic; adds at most ceil(log2 R) plans per recomputing stage to
 * the evaluations, after the search's effort budget (none when no stage recomputes, with
 * whole_stages, when the best does not fit or the time budget ran out). cand: scratch with room
 * for best->k stages. */
static void tune_trim(tuner *t, tune_plan *best, tune_score *bs, tune_plan *cand) {
  if (!t->recomp || t->o->whole_stages || !bs->ok || !bs->fits) return;
  for (int s = 0; s < best->k && !t->late; s++) {
    int r = tune_rc_count(t, best, s);
    if (best->rc[s] != TUNE_RC_ALL || r < 2) continue;
    int lo = 1, hi = r, keep = TUNE_RC_ALL; /* N = hi fits */
    tune_score ks = *bs;
    while (lo < hi && !t->late) {
      int mid = lo + (hi - lo) / 2;
      plan_copy(cand, best);
      cand->rc[s] = mid;
      tune_score sc = tune_eval(t, cand);
      if (sc.ok && sc.fits) {
        hi = mid;
        if (score_better(&sc, &ks)) ks = sc, keep = mid;
      } else {
        lo = mid + 1;
      }
    }
    best->rc[s] = keep;
    *bs = ks;
  }
}

/* Most plans an exhaustive search may simulate. */
enum { TUNE_EXHAUSTIVE = 20000 };

/* Number of (partition, placement) pairs of n layers on p devices with at most kmax stages:
 * sum over k of C(n-1, k-1) p^k, saturated at TUNE_EXHAUSTIVE + 1. */
static double tune_space(int n, int p, int kmax) {
  double total = 0, binom = 1, pk = p; /* C(n-1, 0), p^1 */
  for (int k = 1; k <= kmax && k <= n; k++) {
    total += binom * pk;
    if (total > TUNE_EXHAUSTIVE) return TUNE_EXHAUSTIVE + 1;
    binom = binom * (n - k) / k;
    pk *= p;
  }
  return total;
}

/* Judge the n plans of the enumeration's batch, keeping the best in *best / *bs. */
static void enum_flush(tuner *t, int *n, tune_plan *best, tune_score *bs) {
  tune_batch(t, *n, bs->fits ? bs->makespan : INFINITY, NULL, NULL, 0);
  for (int i = 0; i < *n; i++)
    if (score_better(&t->slots[i].score, bs)) {
      *bs = t->slots[i].score;
      plan_copy(best, &t->slots[i].plan);
    }
  *n = 0;
}

/* Enumerate every partition and placement extending the first k stages of *pl (which end at
 * layer 'at') into batches (*n plans pending), keeping the best in *best / *bs; stops early
 * when the budget is spent. */
static void tune_enumerate(tuner *t, tune_plan *pl, int k, int at, int *n, tune_plan *best,
                           tune_score *bs) {
  if (at == t->n) {
    pl->k = k;
    pl->knobs = pass_adaptive_default();
    plan_copy(&t->slots[(*n)++].plan, pl);
    if (*n == TUNE_BATCH && !tune_spent(t)) enum_flush(t, n, best, bs);
    return;
  }
  if (k >= t->kmax) return;
  for (int end = at + 1; end <= t->n && !tune_spent(t); end++)
    for (int dv = 0; dv < t->p; dv++) {
      pl->ends[k] = end;
      pl->dev[k] = dv;
      pl->rc[k] = 0;
      pl->off[k] = false;
      tune_enumerate(t, pl, k + 1, end, n, best, bs);
    }
}

/* After a search replaced the best plan: the index of the classic plan whose own schedule is
 * still at least as good (kept as the answer), else -1. */
static int tune_classic_kept(const pass_tune_stats *st, const tune_score *bs, int classic) {
  if (classic < 0) return -1;
  const pass_baseline *b = &st->baselines[classic];
  tune_score as_is = tune_score_of(b);
  return score_better(bs, &as_is) ? -1 : classic;
}

/* The best few starting plans (each improved by local search before the restarts). */
enum { TUNE_SEEDS = 3 };
typedef struct tune_pool {
  tune_plan plan[TUNE_SEEDS + 1]; /* best first (once filled: the best start placed for balance
                                     goes in front of them) */
  tune_score score[TUNE_SEEDS + 1];
  int n;                      /* plans held */
} tune_pool;

/* Offer plan pl with score sc to the pool: kept when among the best TUNE_SEEDS distinct plans. */
static void pool_offer(tune_pool *pool, const tune_plan *pl, const tune_score *sc) {
  uint64_t h = plan_hash(pl);
  for (int i = 0; i < pool->n; i++)
    if (plan_hash(&pool->plan[i]) == h) return;
  int at = pool->n < TUNE_SEEDS ? pool->n : TUNE_SEEDS;
  while (at > 0 && score_better(sc, &pool->score[at - 1])) at--;
  if (at >= TUNE_SEEDS) return;
  int last = pool->n < TUNE_SEEDS ? pool->n : TUNE_SEEDS - 1;
  tune_plan spare = pool->plan[last]; /* the dropped (or unused) slot's arrays are reused */
  for (int i = last; i > at; i--) {
    pool->plan[i] = pool->plan[i - 1];
    pool->score[i] = pool->score[i - 1];
  }
  pool->plan[at] = spare;
  plan_copy(&pool->plan[at], pl);
  pool->score[at] = *sc;
  if (pool->n < TUNE_SEEDS) pool->n++;
}

/* Stages and devices of a module's plan as a tune_plan. */
static void plan_from_module(const ir_module *m, tune_plan *pl) {
  pl->k = m->nstages;
  for (int s = 0; s < m->nstages; s++) {
    pl->ends[s] = m->stages[s].end;
    pl->dev[s] = m->stages[s].device;
    pl->rc[s] = 0;
    pl->off[s] = false;
  }
}

/* Run pipeline 'text' on a copy of m; on success fill *pl with its stages. */
static bool plan_from_pipeline(const ir_module *m, const char *text, diag_engine *quiet,
                               tune_plan *pl, int cap) {
  ir_module *c = ir_module_clone(m);
  bool ok = pass_run_text(c, text, quiet) == PASS_OK && c->nstages <= cap;
  if (ok) plan_from_module(c, pl);
  ir_module_free(c);
  return ok;
}

/* Place the stages of pl for balance: largest first (at the first device's costs), each onto
 * the device whose load (at its own costs) ends lowest, ties to the lower index. */
static void tune_place_lpt(tuner *t, tune_plan *pl) {
  int *order = xmalloc((size_t)pl->k * sizeof *order);
  double *load = xcalloc((size_t)t->p, sizeof *load);
  for (int s = 0; s < pl->k; s++) order[s] = s;
  for (int i = 1; i < pl->k; i++) { /* insertion sort by decreasing cost, stable */
    int s = order[i], j = i;
    double cs = t->cum[pl->ends[s]] - t->cum[plan_first(pl, s)];
    while (j > 0) {
      int r = order[j - 1];
      if (t->cum[pl->ends[r]] - t->cum[plan_first(pl, r)] >= cs) break;
      order[j] = r;
      j--;
    }
    order[j] = s;
  }
  for (int i = 0; i < pl->k; i++) {
    int s = order[i], best = 0;
    double best_end = INFINITY;
    for (int dv = 0; dv < t->p; dv++) {
      const double *c = t->cum + (size_t)(t->n + 1) * dv;
      double end = load[dv] + c[pl->ends[s]] - c[plan_first(pl, s)];
      if (end < best_end) best_end = end, best = dv;
    }
    pl->dev[s] = best;
    load[best] = best_end;
  }
  free(order);
  free(load);
}

/* Allocate what the search needs: the threads and their workers, the batch, the cache, and the
 * per-layer sums of the pruning bound. Pre: t->m, t->o, t->n, t->p, t->nmb are set. */
static void tune_setup(tuner *t) {
  const ir_module *m = t->m;
  int jobs = t->o->jobs > 0 ? t->o->jobs : support_cores();
  t->pool = support_pool_new(jobs);
  jobs = support_pool_jobs(t->pool);
  t->workers = xcalloc((size_t)jobs, sizeof *t->workers);
  for (int i = 0; i < jobs; i++) {
    tune_worker *wk = &t->workers[i];
    wk->sink = fopen("/dev/null", "w");
    wk->quiet = diag_new(wk->sink ? wk->sink : stderr);
    diag_set_error_limit(wk->quiet, 0); /* its errors go to /dev/null */
    wk->w = ir_module_clone(m);
    ir_module_clear_plan(wk->w);
  }
  for (int i = 0; i < TUNE_BATCH; i++) {
    plan_init(&t->slots[i].plan, t->n + 1);
    t->slots[i].busy = xcalloc((size_t)t->p, sizeof *t->slots[i].busy);
  }
  t->lw = xmalloc((size_t)t->n * sizeof *t->lw);
  t->cum = xmalloc((size_t)(t->n + 1) * t->p * sizeof *t->cum);
  t->cum_f = xmalloc((size_t)(t->n + 1) * sizeof *t->cum_f);
  t->cum_param = xmalloc((size_t)(t->n + 1) * sizeof *t->cum_param);
  t->cum_rc = xcalloc((size_t)(t->n + 1), sizeof *t->cum_rc);
  for (int i = 0; i < t->n; i++)
    t->cum_rc[i + 1] = t->cum_rc[i] + ir_kind_recomputable(m->layers[i].kind);
  t->recomp = t->cum_rc[t->n] > 0 && !t->o->no_recompute &&
              (int)ir_field_value(&m->train, IR_F_TRAIN_recompute) != IR_RECOMPUTE_FULL;
  t->offload = !t->o->no_offload && t->p > 0;
  for (int dv = 0; dv < t->p; dv++) t->offload &= m->devices[dv].rec.pcie > 0;
  t->rate = xmalloc((size_t)t->p * sizeof *t->rate);
  t->cum_f[0] = t->cum_param[0] = 0;
  for (int i = 0; i < t->n; i++) {
    const ir_cost *c = &m->layers[i].cost;
    t->lw[i] = c->f + c->b + c->w;
    double f = c->f;
    for (int dv = 0; dv < t->p; dv++) {
      const ir_cost *cd = ir_layer_cost_on(m, &m->layers[i], dv);
      if (cd->f < f) f = cd->f;
    }
    t->cum_f[i + 1] = t->cum_f[i] + f;
    t->cum_param[i + 1] = t->cum_param[i] + c->param;
  }
  for (int dv = 0; dv < t->p; dv++) {
    double *cum = t->cum + (size_t)(t->n + 1) * dv;
    cum[0] = 0;
    for (int i = 0; i < t->n; i++) {
      const ir_cost *c = ir_layer_cost_on(m, &m->layers[i], dv);
      cum[i + 1] = cum[i] + c->f + c->b + c->w;
    }
    t->rate[dv] = sim_optim_rate(m, dv);
  }
  t->busy = xcalloc((size_t)t->p, sizeof *t->busy);
  t->scratch = xcalloc(3 * (size_t)t->p, sizeof *t->scratch);
  t->memo_cap = 1024;
  t->memo = xcalloc(t->memo_cap, sizeof *t->memo);
}

/* Free what tune_setup allocated. */
static void tune_teardown(tuner *t) {
  int jobs = support_pool_jobs(t->pool);
  support_pool_free(t->pool);
  for (int i = 0; i < jobs; i++) {
    tune_worker *wk = &t->workers[i];
    sim_result_free(&wk->r);
    ir_module_free(wk->w);
    diag_free(wk->quiet);
    if (wk->sink) fclose(wk->sink);
  }
  free(t->workers);
  for (int i = 0; i < TUNE_BATCH; i++) {
    plan_free(&t->slots[i].plan);
    free(t->slots[i].busy);
  }
  free(t->lw);
  free(t->cum);
  free(t->cum_f);
  free(t->cum_param);
  free(t->cum_rc);
  free(t->rate);
  free(t->busy);
  free(t->scratch);
  free(t->memo);
  arena_free(&t->mem);
}

/* Report that no plan could be simulated, with the reason the first classic plan gave (every
 * plan fails for the same reasons: too many operations, times adding up beyond the limit). */
static void tune_no_plan(const tuner *t, const pass_tune_stats *st, diag_engine *d,
                         diag_loc where) {
  for (int i = 0; i < st->nbaselines; i++)
    if (!st->baselines[i].ok && st->baselines[i].why[0]) {
      diag_error(d, where, "the tuner found no plan that can run: %s (%s)", st->baselines[i].why,
                 st->baselines[i].name);
      return;
    }
  diag_error(d, where, "the tuner found no plan that can run%s",
             t->late ? ": the time budget ran out before any plan was simulated" : "");
}

int pass_tune(ir_module *m, const pass_tune_opts *o, pass_tune_stats *st, diag_engine *d,
              diag_loc where) {
  memset(st, 0, sizeof *st);
  if (m->ndevices == 0 || m->nlayers == 0) {
    diag_error(d, where, "the tuner needs devices and layers");
    return 1;
  }
  for (int i = 0; i < m->nlayers; i++)
    if (!ir_field_is_set(&m->layers[i].cost, IR_F_COST_f)) {
      diag_error(d, where, "the tuner needs layer costs (layer %%%d \"%s\" has none): run the "
                 "cost pass first", i, m->layers[i].name);
      return 1;
    }
  tuner t = {0};
  t.m = m;
  t.o = o;
  t.n = m->nlayers;
  t.p = m->ndevices;
  t.nmb = ir_field_value(&m->train, IR_F_TRAIN_microbatches);
  t.kmax = o->max_stages > 0 ? o->max_stages : 4 * t.p;
  if (t.kmax > t.n) t.kmax = t.n;
  if (t.kmax < t.p) t.kmax = t.p < t.n ? t.p : t.n;
  t.t0 = support_seconds();
  t.rng = o->seed * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull;
  if (!t.rng) t.rng = 1;
  tune_setup(&t);
  int cap = t.n + 1;
  tune_plan best, cur, cand, nb;
  tune_pool pool = {.n = 0};
  for (int i = 0; i <= TUNE_SEEDS; i++) plan_init(&pool.plan[i], cap);
  plan_init(&best, cap);
  plan_init(&cur, cap);
  plan_init(&cand, cap);
  plan_init(&nb, cap);

  /* Starts: every classic plan, as it is and under the adaptive scheduler. */
  st->nbaselines = pass_compare_on(m, t.pool, &st->baselines);
  tune_score bs = tune_worst;
  int classic = -1; /* a classic plan with its own schedule that is still the best */
  int nstart = 0;   /* starting plans in the batch */
  for (int i = 0; i < st->nbaselines; i++) {
    const pass_baseline *b = &st->baselines[i];
    if (!b->ok) continue;
    if (strcmp(b->name, "S-1F1B") == 0) t.ref = b->makespan;
    if (b->nstages > t.kmax) continue; /* more stages than max_stages allows */
    tune_score as_is = tune_score_of(b);
    if (score_better(&as_is, &bs)) {
      bs = as_is;
      best.k = b->nstages; /* the plan pass_compare made */
      memcpy(best.ends, b->stage_end, (size_t)b->nstages * sizeof *best.ends);
      memcpy(best.dev, b->stage_dev, (size_t)b->nstages * sizeof *best.dev);
      memset(best.rc, 0, (size_t)b->nstages * sizeof *best.rc);
      memset(best.off, 0, (size_t)b->nstages * sizeof *best.off);
      best.knobs = pass_adaptive_default();
      classic = i;
    }
    tune_plan *sp = &t.slots[nstart++].plan;
    sp->k = b->nstages;
    memcpy(sp->ends, b->stage_end, (size_t)b->nstages * sizeof *sp->ends);
    memcpy(sp->dev, b->stage_dev, (size_t)b->nstages * sizeof *sp->dev);
    memset(sp->rc, 0, (size_t)b->nstages * sizeof *sp->rc);
    memset(sp->off, 0, (size_t)b->nstages * sizeof *sp->off);
    sp->knobs = pass_adaptive_default();
  }
  /* More starts under the adaptive scheduler: balanced partitions with more stages per device
   * (a shorter fill and drain), in Megatron's loop and in a V. */
  static const char *const starts[] = {
      "partition{method=balanced},place",
      "partition{method=balanced, chunks=2},place{method=interleaved}",
      "partition{method=balanced, chunks=2},place{method=vshape}",
      "partition{method=balanced, chunks=3},place{method=interleaved}",
      "partition{method=balanced, chunks=4},place{method=interleaved}",
  };
  for (size_t i = 0; i < sizeof starts / sizeof starts[0] && nstart < TUNE_BATCH; i++)
    if (plan_from_pipeline(m, starts[i], t.workers[0].quiet, &t.slots[nstart].plan, cap) &&
        t.slots[nstart].plan.k <= t.kmax)
      nstart++;
  /* The same plans with every stage recomputing: where activations crowd the devices' memory
   * (long sequences), no one stage's recomputation pays, but all of them together keep many
   * microbatches in flight; the search may then stop stages recomputing, and the trim keeps
   * only the layers that must. */
  int n0 = nstart;
  for (int i = 0; t.recomp && i < n0 && nstart < TUNE_BATCH; i++) {
    tune_plan *rp = &t.slots[nstart++].plan;
    plan_copy(rp, &t.slots[i].plan);
    for (int s = 0; s < rp->k; s++) rp->rc[s] = tune_rc_count(&t, rp, s) > 0 ? TUNE_RC_ALL : 0;
  }
  /* And with every stage but the last offloading its activations (memory-crowded plans whose
   * forwards take longer than their activations' copy over PCIe keep many microbatches in
   * flight without paying a forward again). */
  int off_from = nstart; /* the all-offloading starts follow */
  for (int i = 0; t.offload && i < n0 && nstart < TUNE_BATCH; i++) {
    tune_plan *op = &t.slots[nstart++].plan;
    plan_copy(op, &t.slots[i].plan);
    for (int s = 0; s < op->k; s++) op->off[s] = s + 1 < op->k;
  }
  /* The balanced partitions with several stages per device again, placed for balance instead of
   * order (largest stage first onto the device where it ends earliest): layers of very
   * different costs that no contiguous split evens out. */
  int balanced_from = nstart; /* the starts placed for balance follow */
  for (int i = 0; i < n0 && nstart < TUNE_BATCH; i++)
    if (t.slots[i].plan.k >= 2 * t.p) {
      plan_copy(&t.slots[nstart].plan, &t.slots[i].plan);
      tune_place_lpt(&t, &t.slots[nstart].plan);
      nstart++;
    }
  tune_batch(&t, nstart, INFINITY, NULL, NULL, 0);
  int balanced = -1; /* the best start placed for balance: a seed of its own (its local optimum
                        differs most from those of the starts in pipeline order) */
  /* the best start that recomputes nothing (of the first n0), and the best all-offloading one */
  int plain = 0, offbest = -1;
  for (int i = 1; i < balanced_from; i++) {
    int *b = i < n0 ? &plain : i >= off_from ? &offbest : NULL;
    if (b && (*b < 0 || score_better(&t.slots[i].score, &t.slots[*b].score))) *b = i;
  }
  for (int i = 0; i < nstart; i++) {
    /* an all-recomputing or all-offloading start seeds a search only when it beats every plain
     * one: descending from it stops its stages recomputing (offloading) one move at a time,
     * long on many stages; of the all-offloading starts only the best, so that they do not
     * crowd the recomputing ones out of the seeds */
    bool all = i >= n0 && i < balanced_from && (i < off_from || i == offbest);
    if (i < n0 || (all && score_better(&t.slots[i].score, &t.slots[plain].score)))
      pool_offer(&pool, &t.slots[i].plan, &t.slots[i].score);
    else if (i >= balanced_from &&
             (balanced < 0 || score_better(&t.slots[i].score, &t.slots[balanced].score)))
      balanced = i;
    if (score_better(&t.slots[i].score, &bs)) {
      bs = t.slots[i].score;
      plan_copy(&best, &t.slots[i].plan);
      classic = -1;
    }
  }
  if (balanced >= 0 && t.slots[balanced].score.ok) { /* descended first */
    tune_plan spare = pool.plan[pool.n];
    for (int i = pool.n; i > 0; i--) pool.plan[i] = pool.plan[i - 1], pool.score[i] = pool.score[i - 1];
    pool.plan[0] = spare;
    plan_copy(&pool.plan[0], &t.slots[balanced].plan);
    pool.score[0] = t.slots[balanced].score;
    pool.n++;
  }
  /* Small problems are searched exhaustively (every partition and placement, default knobs). */
  if (tune_space(t.n, t.p, t.kmax) <= TUNE_EXHAUSTIVE) {
    int pending = 0;
    tune_enumerate(&t, &cand, 0, 0, &pending, &best, &bs);
    if (pending > 0 && !tune_spent(&t)) enum_flush(&t, &pending, &best, &bs);
    if (best.k > 0 && bs.ok) classic = tune_classic_kept(st, &bs, classic);
  }
  tune_progress(&t, &bs, false);

  /* Local search from the best start, then perturb-and-search until 'restarts' rounds in a row
   * bring nothing. */
  int idle_rounds = 0;
  if (best.k > 0) {
    /* Each of the best starting plans is improved first: their local optima differ. */
    tune_score cs;
    for (int i = 0; i < pool.n && !tune_spent(&t); i++) {
      plan_copy(&cur, &pool.plan[i]);
      cs = pool.score[i];
      tune_descend(&t, &cur, &cs, &nb, &bs);
      if (score_better(&cs, &bs)) {
        bs = cs;
        plan_copy(&best, &cur);
        classic = -1;
      }
    }
    plan_copy(&cur, &best);
    cs = tune_eval(&t, &cur);
    while (idle_rounds < o->restarts && !tune_spent(&t)) {
      tune_descend(&t, &cur, &cs, &nb, &bs);
      if (score_better(&cs, &bs)) {
        bs = cs;
        plan_copy(&best, &cur);
        classic = -1;
        idle_rounds = 0;
      } else {
        idle_rounds++;
      }
      /* Perturb the best plan: 1 to 4 random moves that apply. */
      plan_copy(&cur, &best);
      int moves = 1 + rng_below(&t, 4);
      for (int i = 0, tries = 0; i < moves && tries < 50; tries++)
        if (tune_random_move(&t, &cur, &cand)) {
          plan_copy(&cur, &cand);
          i++;
        }
      cs = tune_eval(&t, &cur);
    }
  }
  if (classic < 0) tune_trim(&t, &best, &bs, &cand);
  tune_progress(&t, &bs, true);

  st->iterations = t.iters;
  st->evaluations = t.evals;
  st->passed = t.passed;
  st->pruned = t.pruned;
  st->cut = t.cut;
  st->jobs = support_pool_jobs(t.pool);
  st->makespan = bs.makespan;
  st->bubble = bs.bubble;
  st->fits = bs.fits;
  snprintf(st->stop, sizeof st->stop, "%s", t.late ? "time" : tune_spent(&t) ? "effort" : "converged");
  int rc = 0;
  if (best.k == 0 || !bs.ok) {
    tune_no_plan(&t, st, d, where);
    rc = 1;
  } else if (!bs.fits) {
    st->overflow = bs.overflow;
    strbuf sb = {0};
    ir_format_value(&sb, IR_T_BYTES, bs.overflow);
    diag_error(d, where, "no plan fits in memory: the best the tuner found still needs %s more "
               "than the limit on $d%d", strbuf_cstr(&sb), bs.overflow_dev);
    strbuf_free(&sb);
    rc = 1;
  } else {
    /* Apply the winner to m: a classic plan's own pipeline, or the tuned stages with the
     * adaptive scheduler. */
    strbuf text = {0};
    ir_module_clear_plan(m);
    if (classic >= 0) {
      strbuf_puts(&text, st->baselines[classic].pipeline);
      snprintf(st->start, sizeof st->start, "%s", st->baselines[classic].name);
    } else {
      for (int s = 0; s < best.k; s++) {
        ir_stage *is = ir_module_add_stage(m, plan_first(&best, s), best.ends[s]);
        is->device = best.dev[s];
        plan_stage_mem(&t, &best, s, is);
      }
      strbuf_printf(&text, "schedule{method=adaptive, split=%s, mem_margin=%g}",
                    best.knobs.split ? "true" : "false", best.knobs.mem_margin);
      snprintf(st->start, sizeof st->start, "tuned");
    }
    if (pass_run_text(m, strbuf_cstr(&text), d) != PASS_OK) rc = 1;
    strbuf_free(&text);
  }
  st->seconds = support_seconds() - t.t0;
  if (!sim_bound_compute(m, &st->bound)) st->bound.bound = NAN; /* not part of the search */
  for (int i = 0; i <= TUNE_SEEDS; i++) plan_free(&pool.plan[i]);
  plan_free(&best);
  plan_free(&cur);
  plan_free(&cand);
  plan_free(&nb);
  tune_teardown(&t);
  return rc;
}

void pass_tune_stats_free(pass_tune_stats *st) {
  pass_baseline_free(st->baselines, st->nbaselines, true);
  st->baselines = NULL;
  st->nbaselines = 0;
}

pass_tune_opts pass_tune_defaults(void) {
  static const char *const keys[] = {"evals",    "budget",     "jobs",      "seed",
                                     "restarts", "max_stages", "recompute", "recompute_layers",
                                     "work", "offload"};
  enum { NKEYS = sizeof keys / sizeof keys[0] };
  const pass_info *p = &pass_registry[PASS_ID_TUNE];
  double v[NKEYS];
  for (int i = 0; i < NKEYS; i++) v[i] = pass_option_find(p, keys[i])->def;
  pass_tune_opts o = {.evals = (int)v[0], .budget = v[1], .jobs = (int)v[2],
                      .seed = (uint64_t)v[3], .restarts = (int)v[4], .max_stages = (int)v[5],
                      .progress = false, .no_recompute = v[6] == 0, .whole_stages = v[7] == 0,
                      .work = v[8], .no_offload = v[9] == 0};
  return o;
}

/* Free a heap pass_tune_stats and what it holds (pass_results' free_figures). */
static void tune_stats_delete(void *p) {
  pass_tune_stats_free(p);
  free(p);
}

/* tune: the tuner as a pass; its figures (pass_tune_stats) go to opts->results when given. */
int pass_run_tune(ir_module *m, const pass_options *opts, diag_engine *d) {
  pass_tune_opts o = pass_tune_defaults();
  int64_t restarts, max_stages, evals, jobs, work;
  int pr;
  bool recompute, partial, offload;
  if (pass_opt_int(opts, "evals", &evals, d) || pass_opt_int(opts, "work", &work, d) ||
      pass_opt_quantity(opts, "budget", &o.budget, d) ||
      pass_opt_int(opts, "jobs", &jobs, d) || pass_opt_seed(opts, "seed", &o.seed, d) ||
      pass_opt_int(opts, "restarts", &restarts, d) ||
      pass_opt_int(opts, "max_stages", &max_stages, d) ||
      pass_opt_choice(opts, "progress", &pr, d) || pass_opt_bool(opts, "recompute", &recompute, d) ||
      pass_opt_bool(opts, "recompute_layers", &partial, d) ||
      pass_opt_bool(opts, "offload", &offload, d))
    return 1;
  o.no_offload = !offload;
  o.no_recompute = !recompute;
  o.whole_stages = !partial;
  o.evals = (int)evals;
  o.work = (double)work;
  o.jobs = (int)jobs;
  o.restarts = (int)restarts;
  o.max_stages = (int)max_stages;
  o.progress = pr == 1 || (pr == 0 && isatty(2)); /* auto, true, false */
  pass_tune_stats *st = xmalloc(sizeof *st);
  diag_loc where = opts->loc.file ? opts->loc : ir_diag_loc(m->loc);
  return pass_results_keep(opts->results, PASS_ID_TUNE, pass_tune(m, &o, st, d, where), st,
                           tune_stats_delete);
}
