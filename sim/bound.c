/* bound.c -- the plan-independent lower bound on a step: no partition of whole layers, placement
 * or schedule the simulator accepts can take less time. docs/tuner.md derives each part. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

/* Per layer, what every plan must pay for it wherever it goes (the cheapest device type's
 * costs). */
typedef struct bd_layer {
  double f, b, w; /* forward, input-gradient, weight-gradient time of one microbatch (s) */
  double opt;     /* its share of the optimizer step at the fastest rate (s) */
  double param;   /* static bytes: parameters, gradients, optimizer state */
  double act;     /* activation bytes one microbatch keeps from F to B */
  double hold;    /* the least time a microbatch keeps them after its F: the forwards of the
                     layers after it and the backward from the last layer down to it, or, when
                     a device can offload, their copy to the host and back and its own B, if
                     shorter (s) */
} bd_layer;

static int cmp_desc(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x < y) - (x > y);
}

/* Martello and Toth's bound L2 on the bins of capacity c that items x[0..n) need (sorted in
 * decreasing order, each at most c; sum[k] is the sum of the first k): for every threshold a in
 * {0} and the sizes <= c / 2, the items above c / 2 need a bin each, and those in [a, c / 2] fill
 * what the bins of the items in (c / 2, c - a] leave free, then whole bins. */
static double bins_l2(const double *x, const double *sum, int n, double c) {
  int h = 0; /* items above c / 2 */
  while (h < n && x[h] > c / 2) h++;
  double best = ceil(sum[n] / c - 1e-9);
  int j1 = 0; /* items above c - a */
  for (int at = n; at >= h; at--) { /* thresholds a = x[at] (0 when at == n), increasing */
    double a = at == n ? 0 : x[at];
    if (at + 1 < n && x[at + 1] == a) continue; /* the last of equal sizes stands for them */
    int k = at == n ? n : at + 1;               /* items >= a */
    while (j1 < h && x[j1] > c - a) j1++;
    double free2 = (double)(h - j1) * c - (sum[h] - sum[j1]);
    double extra = ceil((sum[k] - sum[h] - free2) / c - 1e-9);
    double l = (double)h + (extra > 0 ? extra : 0);
    if (l > best) best = l;
  }
  return best;
}

/* Whether no assignment of the items t[0..n) (sorted in decreasing order, prefix sums in sum)
 * to p bins keeps every bin within c. */
static bool bd_infeasible(const double *t, const double *sum, int n, double c, int p) {
  return t[0] > c * (1 + 1e-12) || bins_l2(t, sum, n, c) > p;
}

/* Layers of equal work and static memory, for the exact packing. */
typedef struct bd_type {
  double t;     /* work of one (every microbatch's F, B and W, and its optimizer share) */
  double mem;   /* its static bytes plus one microbatch's activations */
  double param; /* its static bytes */
  double held;  /* memory-time its activations take over a step, at least (byte-seconds: every
                   microbatch's act x hold; the least of the type's layers) */
  int count;    /* layers of this type */
} bd_type;

/* Most states (products of count + 1 over the types) and most states x configurations the exact
 * packing explores; beyond, only the bound L2 is used. */
enum { BD_MAX_TYPES = 12, BD_MAX_STATES = 200000 };
static const double bd_max_work = 4e6;

/* How few devices can hold each subset of the layers of types ty[0..nt), on p devices, the
 * k-th of which (0-based, by first layer) has c - head[k] of time (it cannot start before the
 * forward prefix of the k-th layer, at least), each within memory mcap: its static bytes and one
 * microbatch's activations, and its static bytes and the memory-time its activations take
 * spread over a step of c (a step of at most c leaves at most (mcap - static) x c for them).
 * Dynamic programming over the counts left (a mixed-radix state), where bins[v] is the fewest
 * devices holding state v, filled in order of decreasing room (using fewer devices always leaves
 * a larger next one; INT32_MAX when more than p). Returns 1 with *bins_out the array over the
 * states (the caller frees it; its last entry is the whole set), or -1 when the problem is too
 * large to decide. When 'next' is not NULL it receives the smallest capacity above 'above' at
 * which the answer can change: where some configuration starts to fit on some device (its work
 * plus the device's start, or the capacity at which its memory-time fits, whichever is
 * later). */
static int bd_bins(const bd_type *ty, int nt, double c, const double *head, double mcap,
                   int p, double above, double *next, int **bins_out) {
  long states = 1;
  long radix[BD_MAX_TYPES];
  for (int i = 0; i < nt; i++) {
    radix[i] = states;
    states *= ty[i].count + 1;
    if (states > BD_MAX_STATES) return -1;
  }
  /* The configurations: every vector of counts within the type counts that fits c and mcap. */
  long *cfg = NULL; /* state offsets of the configurations */
  int *cfg_k = NULL; /* their counts, nt per configuration */
  double *cfg_t = NULL; /* their work */
  int ncfg = 0, cfg_cap = 0;
  int k[BD_MAX_TYPES] = {0};
  for (;;) {
    /* next vector in mixed-radix order, pruned when it exceeds the capacity */
    int i = 0;
    for (; i < nt; i++) {
      if (k[i] < ty[i].count) {
        k[i]++;
        double tt = 0, mm = 0, ss = 0, hh = 0;
        for (int j = 0; j < nt; j++)
          tt += k[j] * ty[j].t, mm += k[j] * ty[j].mem, ss += k[j] * ty[j].param,
              hh += k[j] * ty[j].held;
        if (tt <= c * (1 + 1e-12) && mm <= mcap && (hh <= 0 || ss + hh / c <= mcap)) break;
      }
      k[i] = 0;
    }
    if (i == nt) break;
    long off = 0;
    for (int j = 0; j < nt; j++) off += k[j] * radix[j];
    if (ncfg == cfg_cap) {
      cfg_cap = cfg_cap ? 2 * cfg_cap : 64;
      cfg = xrealloc(cfg, (size_t)cfg_cap * sizeof *cfg);
      cfg_t = xrealloc(cfg_t, (size_t)cfg_cap * sizeof *cfg_t);
      cfg_k = xrealloc(cfg_k, (size_t)cfg_cap * nt * sizeof *cfg_k);
    }
    cfg[ncfg] = off;
    cfg_t[ncfg] = 0;
    for (int j = 0; j < nt; j++) cfg_t[ncfg] += k[j] * ty[j].t;
    /* the capacity from which the configuration fits in memory-time */
    double ss = 0, hh = 0;
    for (int j = 0; j < nt; j++) ss += k[j] * ty[j].param, hh += k[j] * ty[j].held;
    double from = hh > 0 ? hh / (mcap - ss) : 0;
    for (int b = 0; next && b < p; b++) {
      double at = cfg_t[ncfg] + head[b] > from ? cfg_t[ncfg] + head[b] : from;
      if (at > above && at < *next) *next = at;
    }
    memcpy(cfg_k + (size_t)ncfg * nt, k, (size_t)nt * sizeof *k);
    ncfg++;
    if ((double)ncfg * (double)states > bd_max_work) {
      free(cfg);
      free(cfg_k);
      free(cfg_t);
      return -1;
    }
  }
  /* bins[v]: fewest devices that hold the counts of state v. */
  int *bins = xmalloc((size_t)states * sizeof *bins);
  int *digit = xcalloc((size_t)nt, sizeof *digit);
  bins[0] = 0;
  for (long v = 1; v < states; v++) {
    for (int i = 0; i < nt; i++) { /* digits of v */
      if (++digit[i] <= ty[i].count) break;
      digit[i] = 0;
    }
    int best = INT32_MAX;
    for (int q = 0; q < ncfg; q++) {
      const int *kq = cfg_k + (size_t)q * nt;
      bool within = true;
      for (int i = 0; i < nt && within; i++) within = kq[i] <= digit[i];
      int before = within ? bins[v - cfg[q]] : INT32_MAX; /* devices the rest needs */
      if (before < p && cfg_t[q] <= (c - head[before]) * (1 + 1e-12) && before + 1 < best)
        best = before + 1;
    }
    bins[v] = best;
  }
  free(digit);
  free(cfg);
  free(cfg_k);
  free(cfg_t);
  *bins_out = bins;
  return 1;
}

/* Whether the packing bd_bins describes fits on p devices: 1, 0, or -1 (too large to decide). */
static int bd_pack(const bd_type *ty, int nt, double c, const double *head, double mcap,
                   int p, double above, double *next) {
  int *bins;
  if (bd_bins(ty, nt, c, head, mcap, p, above, next, &bins) < 0) return -1;
  long last = 1;
  for (int i = 0; i < nt; i++) last *= ty[i].count + 1;
  int fits = bins[last - 1] <= p;
  free(bins);
  return fits;
}

/* A feasible step for the packing of (a), as an upper end for its bisection: the layers,
 * largest work first, each onto the device that then ends lowest (its start included) with room
 * in memory; INFINITY when memory leaves some layer nowhere. */
static double bd_greedy(const bd_layer *ly, int n, double mbs, const double *head, double mcap,
                        int p) {
  int *order = xmalloc((size_t)n * sizeof *order);
  double *key = xmalloc((size_t)n * sizeof *key);
  double *load = xcalloc((size_t)p, sizeof *load), *mem = xcalloc((size_t)p, sizeof *mem);
  for (int i = 0; i < n; i++) {
    key[i] = mbs * (ly[i].f + ly[i].b + ly[i].w) + ly[i].opt;
    order[i] = i;
  }
  for (int i = 1; i < n; i++) { /* insertion sort by decreasing work */
    int x = order[i], j = i;
    while (j > 0 && key[order[j - 1]] < key[x]) order[j] = order[j - 1], j--;
    order[j] = x;
  }
  double step = 0;
  for (int i = 0; i < n && isfinite(step); i++) {
    int l = order[i], best = -1;
    double mi = ly[l].param + ly[l].act;
    for (int k = 0; k < p; k++)
      if (mem[k] + mi <= mcap &&
          (best < 0 || load[k] + head[k] + key[l] < load[best] + head[best] + key[l]))
        best = k;
    if (best < 0) {
      step = INFINITY;
      break;
    }
    load[best] += key[l];
    mem[best] += mi;
    if (load[best] + head[best] > step) step = load[best] + head[best];
  }
  free(order);
  free(key);
  free(load);
  free(mem);
  return step;
}

/* Most device classes bd_speed optimizes over; with more it keeps the uniform weights. */
enum { BD_MAX_CLASSES = 8 };

/* sum_i min_g (w[g] / cnt[g]) t[i * k + g]: the dual value of the weights w. */
static double bd_speed_value(const double *t, int n, int k, const int *cnt, const double *w) {
  double v = 0;
  for (int i = 0; i < n; i++) {
    double lo = INFINITY;
    for (int g = 0; g < k; g++) {
      double x = w[g] / cnt[g] * t[(size_t)i * k + g];
      if (x < lo) lo = x;
    }
    v += lo;
  }
  return v;
}

/* (a'') The devices' work when they differ (several device types, or optimizer rates): every
 * plan puts each layer on one device, so each device's work is at most the step, and the
 * relaxation that lets layers split over devices gives, by its dual, for any weights w_g >= 0
 * summing to 1 over the classes of equal devices (cnt_g devices each, layer i taking t_ig of
 * work on one), a step of at least sum_i min_g (w_g / cnt_g) t_ig. The weights are improved by
 * golden-section searches between pairs of classes (the value is concave in w; any w gives a
 * valid bound). 'work' gives each layer's work on each device: t[i * p + dv]. Returns 0 when
 * every device is alike (the packing of (a) covers that case) or when there are too many
 * classes. */
static double bd_speed(const double *work, int n, int p, const int *cls) {
  int k = 0, id[BD_MAX_CLASSES], cnt[BD_MAX_CLASSES] = {0};
  for (int dv = 0; dv < p; dv++) {
    if (cls[dv] != dv) continue;
    if (k == BD_MAX_CLASSES) return 0;
    id[k++] = dv;
  }
  if (k < 2) return 0;
  double *t = xmalloc((size_t)n * k * sizeof *t);
  for (int g = 0; g < k; g++) {
    for (int dv = 0; dv < p; dv++) cnt[g] += cls[dv] == id[g];
    for (int i = 0; i < n; i++) t[(size_t)i * k + g] = work[(size_t)i * p + id[g]];
  }
  double w[BD_MAX_CLASSES];
  for (int g = 0; g < k; g++) w[g] = (double)cnt[g] / p;
  double best = bd_speed_value(t, n, k, cnt, w);
  const double phi = 0.6180339887498949;
  for (int sweep = 0; sweep < 30; sweep++) {
    double before = best;
    for (int g = 0; g < k; g++)
      for (int h = g + 1; h < k; h++) { /* move mass d from h to g, d in [-w_g, w_h] */
        double a = -w[g], b = w[h], wg = w[g], wh = w[h];
        for (int it = 0; it < 60 && b - a > 1e-12; it++) {
          double x1 = b - phi * (b - a), x2 = a + phi * (b - a);
          w[g] = wg + x1, w[h] = wh - x1;
          double v1 = bd_speed_value(t, n, k, cnt, w);
          w[g] = wg + x2, w[h] = wh - x2;
          double v2 = bd_speed_value(t, n, k, cnt, w);
          if (v1 < v2) a = x1;
          else b = x2;
        }
        double d = (a + b) / 2;
        w[g] = wg + d, w[h] = wh - d;
        double v = bd_speed_value(t, n, k, cnt, w);
        if (v > best) best = v;
        else w[g] = wg, w[h] = wh;
      }
    if (!(best > before * (1 + 1e-9))) break;
  }
  free(t);
  return best;
}

/* Whether the layers fit on two classes of devices within a step of c: the types' work on a
 * device of the first class (tyA) and of the second (tyB: the same counts and memory), nA and nB
 * devices, each within memory mcap; some subset of the layers must fit on the first class and the
 * rest on the second (bd_bins on each, without the devices' starts). 1, 0, or -1 (too large). */
static int bd_fits2(const bd_type *tyA, const bd_type *tyB, int nt, double c, double mcap,
                    int nA, int nB, const double *zero) {
  int *ba, *bb;
  if (bd_bins(tyA, nt, c, zero, mcap, nA, 0, NULL, &ba) < 0) return -1;
  if (bd_bins(tyB, nt, c, zero, mcap, nB, 0, NULL, &bb) < 0) {
    free(ba);
    return -1;
  }
  long states = 1;
  for (int i = 0; i < nt; i++) states *= tyA[i].count + 1;
  int fits = 0; /* the complement of state v is states - 1 - v */
  for (long v = 0; v < states && !fits; v++) fits = ba[v] <= nA && bb[states - 1 - v] <= nB;
  free(ba);
  free(bb);
  return fits;
}

/* (a''), whole layers on two classes of devices: the smallest step above lo (a step no plan can
 * reach) at which the layers can be packed, by bisection on bd_fits2, as the packing of (a) does
 * on one class; the layers grouped by their work on each class and their memory (at most
 * BD_MAX_TYPES kinds). 'work' as in bd_speed, classes cls[dv] (exactly two). Returns lo when the
 * packing is too large to decide, or no step fits. */
static double bd_pack2(const bd_layer *ly, const double *work, int n, int p, const int *cls,
                       double mcap, double lo) {
  int a = -1, b = -1, nA = 0, nB = 0;
  for (int dv = 0; dv < p; dv++) {
    if (cls[dv] == dv && a < 0) a = dv;
    else if (cls[dv] == dv) b = dv;
    if (cls[dv] == a) nA++;
    else nB++;
  }
  bd_type tyA[BD_MAX_TYPES], tyB[BD_MAX_TYPES];
  int nt = 0;
  for (int i = 0; i < n; i++) {
    double ta = work[(size_t)i * p + a], tb = work[(size_t)i * p + b];
    double mi = ly[i].param + ly[i].act;
    int j = 0;
    while (j < nt && !(tyA[j].t == ta && tyB[j].t == tb && tyA[j].mem == mi)) j++;
    if (j == nt) {
      if (nt == BD_MAX_TYPES) return lo;
      tyA[nt] = (bd_type){ta, mi, ly[i].param, 0, 0};
      tyB[nt++] = (bd_type){tb, mi, ly[i].param, 0, 0};
    }
    tyA[j].count++, tyB[j].count++;
  }
  double *zero = xcalloc((size_t)p, sizeof *zero);
  double hi = lo > 0 ? lo : 1e-9;
  int f = 0;
  for (int it = 0; it < 40 && (f = bd_fits2(tyA, tyB, nt, hi, mcap, nA, nB, zero)) == 0; it++)
    hi *= 2;
  if (f == 1) {
    for (int it = 0; it < 30 && hi - lo > 1e-9 * hi; it++) {
      double mid = (lo + hi) / 2;
      int fm = bd_fits2(tyA, tyB, nt, mid, mcap, nA, nB, zero);
      if (fm < 0) break;
      if (fm == 0) lo = mid;
      else hi = mid;
    }
  }
  free(zero);
  return lo;
}

/* sim_bound_compute, with the exact packing of (a) only when 'exact'. */
static bool bound_compute(const ir_module *m, sim_bound *out, bool exact_packing) {
  memset(out, 0, sizeof *out);
  out->chain_layer = out->memory_layer = -1;
  int n = m->nlayers, p = m->ndevices;
  double mbs = ir_field_value(&m->train, IR_F_TRAIN_microbatches);
  if (n == 0 || p == 0 || !(mbs >= 1)) return false;
  bd_layer *ly = xcalloc((size_t)n, sizeof *ly);
  bool recomp_free = (int)ir_field_value(&m->train, IR_F_TRAIN_recompute) != IR_RECOMPUTE_FULL;
  double mcap = 0;   /* the largest memory limit: no device holds more */
  double mtotal = 0; /* all devices' limits together */
  double rate = 0; /* the fastest optimizer rate */
  double pcie = 0; /* the fastest link to host memory (0: no device can offload) */
  for (int dv = 0; dv < p; dv++) {
    if (m->devices[dv].rec.pcie > pcie) pcie = m->devices[dv].rec.pcie;
    double lim = ir_device_mem_limit(m, dv);
    if (!isfinite(lim)) mcap = INFINITY;
    else if (lim > mcap) mcap = lim;
    mtotal += lim;
    double r = sim_optim_rate(m, dv);
    if (r > rate) rate = r;
  }
  /* Devices of one type and optimizer rate form a class (cls: its first device); work[i * p +
   * dv] is layer i's work on device dv (every microbatch's F, B and W, and its optimizer share),
   * for (a''). */
  int *cls = xmalloc((size_t)p * sizeof *cls);
  for (int dv = 0; dv < p; dv++) {
    cls[dv] = dv;
    for (int e = 0; e < dv && cls[dv] == dv; e++)
      if (cls[e] == e && strcmp(m->devices[e].type, m->devices[dv].type) == 0 &&
          sim_optim_rate(m, e) == sim_optim_rate(m, dv))
        cls[dv] = e;
  }
  double *work = xmalloc((size_t)n * p * sizeof *work);
  for (int i = 0; i < n; i++) {
    bd_layer *l = &ly[i];
    l->f = l->b = l->w = INFINITY;
    double param = m->layers[i].cost.param;
    for (int dv = 0; dv < p; dv++) {
      const ir_cost *c = ir_layer_cost_on(m, &m->layers[i], dv);
      if (!ir_field_is_set(c, IR_F_COST_f)) {
        free(ly);
        free(cls);
        free(work);
        return false;
      }
      if (c->f < l->f) l->f = c->f;
      if (c->b < l->b) l->b = c->b;
      if (c->w < l->w) l->w = c->w;
      double r = sim_optim_rate(m, dv);
      work[(size_t)i * p + dv] = mbs * (c->f + c->b + c->w) + (param > 0 && r > 0 ? 2 * param / r : 0);
    }
    const ir_cost *c = &m->layers[i].cost;
    l->opt = c->param > 0 && rate > 0 ? 2 * c->param / rate : 0;
    l->param = c->param;
    l->act = c->act;
    /* A plan may recompute the layer's stage (when the module's policy is none or selective; b
     * then grows by f - core >= 0, so the recorded b stays a lower bound): then it keeps
     * only its input from F (ir_stage_layer_cost), and pays more B and holds the state B
     * rebuilds (ir_stage_layer_rebuild) from B until W, which the bound need not count: both
     * only make such a plan longer or larger. */
    if (recomp_free && ir_kind_recomputable(m->layers[i].kind)) {
      ir_stage whole = {.first = i, .end = i + 1, .device = -1, .recompute = IR_RECOMPUTE_FULL};
      double in = ir_stage_layer_cost(m, &whole, i).act;
      if (in < l->act) l->act = in;
    }
  }

  double hold = 0; /* f of the layers after i, b of i .. n-1 */
  for (int i = n - 1; i >= 0; i--) {
    hold += ly[i].b;
    ly[i].hold = hold;
    /* an offloading stage keeps a layer's activations on the device only while they are copied
     * to the host (at least its act over the fastest link) and back, and through its B */
    double off = pcie > 0 ? 2 * ly[i].act / pcie + ly[i].b : INFINITY;
    if (off < ly[i].hold) ly[i].hold = off;
    hold += ly[i].f;
  }

  /* (b) the chain through each layer, (c) one microbatch's path, (d) the microbatches memory
   * lets each layer keep in flight. Each holds for a stage [a, c] containing layer L, not only
   * for L alone: the stage's F starts after the prefix up to a (shorter than up to L by D, the
   * forwards of a..L-1) but runs m times longer than f_L by at least m x D >= D, and its B
   * likewise covers b_L and the backward of a..L-1, which is what the suffix after L lost; the
   * round trip of a stage's last layer c plus the stage's own backward is at least the round
   * trip from L. For (d) the window starts at the stage's F end, so only backward times count. */
  double prefix_f = 0, prefix_b = 0, above = 0;
  for (int i = 0; i < n; i++) above += ly[i].f + ly[i].b;
  out->path = above + ly[0].w + ly[0].opt;
  for (int i = 0; i < n; i++) {
    const bd_layer *l = &ly[i];
    above -= l->f + l->b; /* the path of the layers after i */
    double backs = mbs * l->b > above + l->b ? mbs * l->b : above + l->b;
    double chain = prefix_f + mbs * l->f + backs + prefix_b;
    double whole = prefix_f + mbs * (l->f + l->b + l->w) + l->opt;
    if (whole > chain) chain = whole;
    if (chain > out->chain) out->chain = chain, out->chain_layer = i;
    if (isfinite(mcap) && l->act > 0 && mcap > l->param) {
      double inflight = floor((mcap - l->param) / l->act);
      if (inflight >= 1 && inflight < mbs) {
        /* each microbatch holds them from its F's end to its B's end for at least 'hold' */
        double mem = prefix_f + l->f + mbs / inflight * l->hold + prefix_b;
        if (mem > out->memory) out->memory = mem, out->memory_layer = i;
      }
    }
    prefix_f += l->f;
    prefix_b += l->b;
  }

  /* (d') every microbatch holds each layer's activations for at least its 'hold' after its F:
   * that memory-time, over the step, fits in what the devices' limits leave beside the static
   * memory. */
  if (isfinite(mtotal)) {
    double held = 0, stat = 0;
    for (int i = n - 1; i >= 0; i--) {
      held += ly[i].act * ly[i].hold;
      stat += ly[i].param;
    }
    if (mtotal > stat && held > 0) {
      double mem = mbs * held / (mtotal - stat);
      if (mem > out->memory) out->memory = mem, out->memory_layer = -1;
    }
  }

  /* (a) whole layers over the devices: each device's work (every microbatch's F, B and W of its
   * layers, then its optimizer step) as a bin packing; the smallest capacity not proven
   * infeasible, by bisection. */
  double *t = xmalloc((size_t)n * sizeof *t), *sum = xmalloc((size_t)(n + 1) * sizeof *sum);
  for (int i = 0; i < n; i++) t[i] = mbs * (ly[i].f + ly[i].b + ly[i].w) + ly[i].opt;
  qsort(t, (size_t)n, sizeof *t, cmp_desc);
  sum[0] = 0;
  for (int i = 0; i < n; i++) sum[i + 1] = sum[i] + t[i];
  /* The layers by type (equal work and memory): the exact packing when they are few. */
  bd_type ty[BD_MAX_TYPES];
  int nt = 0;
  if (!exact_packing) nt = -1;
  for (int i = 0; i < n && nt >= 0; i++) {
    double ti = mbs * (ly[i].f + ly[i].b + ly[i].w) + ly[i].opt, mi = ly[i].param + ly[i].act;
    double hq = isfinite(mcap) ? mbs * ly[i].act * ly[i].hold : 0;
    int j = 0;
    while (j < nt && !(ty[j].t == ti && ty[j].mem == mi)) j++;
    if (j == nt) {
      if (nt == BD_MAX_TYPES) {
        nt = -1; /* too many types */
        break;
      }
      ty[nt++] = (bd_type){ti, mi, ly[i].param, hq, 0};
    }
    if (hq < ty[j].held) ty[j].held = hq;
    ty[j].count++;
  }
  double pack_mem = isfinite(mcap) ? mcap : INFINITY;
  double *head = xmalloc((size_t)p * sizeof *head); /* the k-th device's earliest start */
  head[0] = 0;
  for (int k = 1; k < p; k++) head[k] = head[k - 1] + (k - 1 < n ? ly[k - 1].f : 0);
  double lo = t[0] > sum[n] / p ? t[0] : sum[n] / p;
  double hi = bd_greedy(ly, n, mbs, head, pack_mem, p);
  if (!(hi >= lo) || !isfinite(hi)) hi = sum[n] > lo ? sum[n] : lo;
  int exact = nt > 0 ? bd_pack(ty, nt, lo, head, pack_mem, p, 0, NULL) : -1;
  if (bd_infeasible(t, sum, n, lo, p) || exact == 0) {
    for (int it = 0; it < 40 && hi - lo > 1e-9 * hi; it++) {
      double mid = (lo + hi) / 2;
      bool no = bd_infeasible(t, sum, n, mid, p);
      if (!no && exact >= 0) no = bd_pack(ty, nt, mid, head, pack_mem, p, 0, NULL) == 0;
      if (no) lo = mid;
      else hi = mid;
    }
  }
  if (exact == 0) { /* the packing's threshold is where a configuration starts to fit on some
                       device (its load, or where its memory-time fits): the first above lo */
    double next = hi;
    if (bd_pack(ty, nt, hi, head, pack_mem, p, lo, &next) >= 0 && next > lo) lo = next;
  }
  out->work = lo;
  out->exact = exact >= 0;
  double speed = bd_speed(work, n, p, cls);
  if (speed > out->work) out->work = speed, out->exact = false;
  int classes = 0;
  for (int dv = 0; dv < p; dv++) classes += cls[dv] == dv;
  if (classes == 2 && exact_packing) {
    double packed = bd_pack2(ly, work, n, p, cls, pack_mem, out->work);
    if (packed > out->work) out->work = packed;
  }
  free(cls);
  free(work);
  free(head);
  /* (a') the same work with each device's idle start: the u devices that hold layers start at
   * distinct first layers, so they wait at least the forward prefixes of layers 0 .. u-1. */
  double heads = 0;
  out->fill = INFINITY;
  prefix_f = 0;
  for (int u = 1; u <= p && u <= n; u++) {
    heads += prefix_f;
    prefix_f += ly[u - 1].f;
    double avg = (sum[n] + heads) / u;
    if (avg < out->fill) out->fill = avg;
  }
  free(t);
  free(sum);
  free(ly);
  out->bound = out->work;
  if (out->fill > out->bound) out->bound = out->fill;
  if (out->chain > out->bound) out->bound = out->chain;
  if (out->path > out->bound) out->bound = out->path;
  if (out->memory > out->bound) out->bound = out->memory;
  return true;
}

bool sim_bound_compute(const ir_module *m, sim_bound *out) { return bound_compute(m, out, true); }

bool sim_bound_quick(const ir_module *m, sim_bound *out) { return bound_compute(m, out, false); }
