/* test_plan.c -- unit tests of the planning algorithms of passes/: the balanced partition is the
 * exact min-max split (checked against brute force on many small random cases, with and without
 * a memory cap), and so is the min-max with stage-dependent costs and caps; the cuts Megatron's
 * notations allow. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "passes.h"
#include "unit.h"

/* Deterministic pseudo-random numbers (xorshift64*). */
static uint64_t rng_next(uint64_t *s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 2685821657736338717ull;
}

/* Best bottleneck over all ways to cut n layers into k non-empty stages (every stage i within
 * cap with min(k - i, mb) microbatches of activations), by enumerating the cut positions;
 * INT64_MAX when none fits. */
static int64_t brute(const int64_t *cost, const double *ms, const double *ma, int n, int k,
                     double cap, int mb, int stage, int first) {
  if (stage == k - 1) {
    int64_t c = 0;
    double s = 0, a = 0;
    for (int j = first; j < n; j++) c += cost[j], s += ms[j], a += ma[j];
    int inflight = k - stage < mb ? k - stage : mb;
    return cap > 0 && s + a * inflight > cap ? INT64_MAX : c;
  }
  int64_t best = INT64_MAX;
  for (int end = first + 1; end <= n - (k - 1 - stage); end++) {
    int64_t c = 0;
    double s = 0, a = 0;
    for (int j = first; j < end; j++) c += cost[j], s += ms[j], a += ma[j];
    int inflight = k - stage < mb ? k - stage : mb;
    if (cap > 0 && s + a * inflight > cap) continue;
    int64_t rest = brute(cost, ms, ma, n, k, cap, mb, stage + 1, end);
    int64_t worst = rest > c ? rest : c;
    if (worst < best) best = worst;
  }
  return best;
}

void test_plan_balanced_brute_force(void) {
  uint64_t seed = 0x9e3779b97f4a7c15ull;
  for (int trial = 0; trial < 600; trial++) {
    int n = 1 + (int)(rng_next(&seed) % 11);
    int k = 1 + (int)(rng_next(&seed) % (uint64_t)n);
    int mb = 1 + (int)(rng_next(&seed) % 6);
    int64_t cost[12];
    double ms[12], ma[12];
    for (int i = 0; i < n; i++) {
      cost[i] = 1 + (int64_t)(rng_next(&seed) % (trial % 3 == 0 ? 5 : 1000));
      ms[i] = (double)(rng_next(&seed) % 50);
      ma[i] = (double)(rng_next(&seed) % 20);
    }
    double cap = trial % 2 ? 60.0 + (double)(rng_next(&seed) % 200) : 0;
    int ends[12];
    int64_t got = -1;
    int rc = pass_partition_balanced(cost, ms, ma, n, k, cap, mb, ends, &got);
    int64_t want = brute(cost, ms, ma, n, k, cap, mb, 0, 0);
    if (want == INT64_MAX) {
      UNIT_CHECK(rc == -2);
      continue;
    }
    UNIT_CHECK(rc == 0);
    if (rc != 0) continue;
    UNIT_CHECK(got == want);
    /* The cuts themselves: k non-empty stages covering the layers, none above the optimum and
     * each within the cap. */
    int first = 0;
    for (int i = 0; i < k; i++) {
      UNIT_CHECK(ends[i] > first);
      int64_t c = 0;
      double s = 0, a = 0;
      for (int j = first; j < ends[i] && j < n; j++) c += cost[j], s += ms[j], a += ma[j];
      UNIT_CHECK(c <= want);
      int inflight = k - i < mb ? k - i : mb;
      UNIT_CHECK(cap <= 0 || s + a * inflight <= cap);
      first = ends[i];
    }
    UNIT_CHECK(ends[k - 1] == n);
  }
}

void test_plan_balanced_bad_args(void) {
  int64_t cost[3] = {1, 2, 3};
  double z[3] = {0, 0, 0};
  int ends[4];
  UNIT_CHECK(pass_partition_balanced(cost, z, z, 3, 4, 0, 1, ends, NULL) == -1);
  UNIT_CHECK(pass_partition_balanced(cost, z, z, 3, 0, 0, 1, ends, NULL) == -1);
  double big[3] = {10, 10, 10};
  UNIT_CHECK(pass_partition_balanced(cost, big, z, 3, 3, 5, 1, ends, NULL) == -2);
}

/* Costs whose sum does not fit in int64_t, and negative costs, are refused (the sum overflowed
 * in the bisection's upper bound before: UBSan reported signed overflow). */
void test_plan_balanced_overflow(void) {
  int64_t big[3] = {INT64_MAX / 2, INT64_MAX / 2, INT64_MAX / 2};
  int64_t neg[3] = {5, -1, 5};
  int64_t edge[2] = {INT64_MAX / 2, INT64_MAX / 2};
  double z[3] = {0, 0, 0};
  int ends[3];
  int64_t got = 0;
  UNIT_CHECK(pass_partition_balanced(big, z, z, 3, 2, 0, 1, ends, NULL) == -1);
  UNIT_CHECK(pass_partition_balanced(neg, z, z, 3, 2, 0, 1, ends, NULL) == -1);
  /* The largest sum that fits still works. */
  UNIT_CHECK(pass_partition_balanced(edge, z, z, 2, 1, 0, 1, ends, &got) == 0);
  UNIT_CHECK(got == INT64_MAX / 2 * 2 && ends[0] == 2);
}

/* The smallest largest stage cost of units [from, n) in stages kk.. of k, with stage-dependent
 * costs (k x n) and memory within caps: brute force over every cut (INT64_MAX: none). */
static int64_t brute_mm(const int64_t *cost, const double *mem, const double *cap, int n, int k,
                        int from, int kk) {
  if (kk == k) return from == n ? 0 : INT64_MAX;
  int64_t best = INT64_MAX, c = 0;
  double m = 0;
  for (int end = from + 1; end <= n - (k - kk - 1); end++) {
    c += cost[kk * n + end - 1];
    m += mem[kk * n + end - 1];
    if (m > cap[kk]) break;
    int64_t rest = brute_mm(cost, mem, cap, n, k, end, kk + 1);
    if (rest == INT64_MAX) continue;
    int64_t v = c > rest ? c : rest;
    if (v < best) best = v;
  }
  return best;
}

/* pass_partition_minmax is the exact min-max with costs and caps that depend on the stage
 * (the --megatron split on mixed devices), against brute force on random cases. */
void test_plan_minmax_brute_force(void) {
  uint64_t seed = 0x243f6a8885a308d3ull;
  for (int trial = 0; trial < 600; trial++) {
    int n = 1 + (int)(rng_next(&seed) % 10);
    int k = 1 + (int)(rng_next(&seed) % (uint64_t)n);
    int64_t cost[10 * 10];
    double mem[10 * 10], cap[10];
    for (int s = 0; s < k; s++) {
      int64_t speed = 1 + (int64_t)(rng_next(&seed) % 4); /* the device's slowness */
      cap[s] = trial % 2 ? 40.0 + (double)(rng_next(&seed) % 100) : INFINITY;
      for (int u = 0; u < n; u++) {
        cost[s * n + u] = speed * (int64_t)(1 + u % 3) * 10 + (int64_t)(rng_next(&seed) % 7);
        mem[s * n + u] = (double)(rng_next(&seed) % 30);
      }
    }
    int ends[10];
    int64_t got = -1;
    int rc = pass_partition_minmax(cost, mem, cap, n, k, ends, &got);
    int64_t want = brute_mm(cost, mem, cap, n, k, 0, 0);
    if (want == INT64_MAX) {
      UNIT_CHECK(rc == -2);
      continue;
    }
    UNIT_CHECK(rc == 0);
    if (rc != 0) continue;
    UNIT_CHECK(got == want);
    for (int s = 0, first = 0; s < k; first = ends[s++]) {
      UNIT_CHECK(ends[s] > first);
      int64_t c = 0;
      double m = 0;
      for (int u = first; u < ends[s] && u < n; u++) c += cost[s * n + u], m += mem[s * n + u];
      UNIT_CHECK(c <= want && m <= cap[s]);
    }
    UNIT_CHECK(ends[k - 1] == n);
  }
}

/* A fast and a three times slower device: the split gives the fast one three times the units
 * (the split of costs of the first device alone would give both the same), and among the
 * splits that reach the optimum it takes the least total. Bad input is refused. */
void test_plan_minmax_mixed(void) {
  int64_t cost[2 * 8];
  double mem[2 * 8] = {0};
  for (int u = 0; u < 8; u++) cost[u] = 1, cost[8 + u] = 3;
  int ends[2];
  int64_t got = 0;
  UNIT_CHECK(pass_partition_minmax(cost, mem, NULL, 8, 2, ends, &got) == 0);
  UNIT_CHECK(got == 6 && ends[0] == 6 && ends[1] == 8);
  double cap[2] = {3, INFINITY}; /* the fast one holds only three units */
  for (int u = 0; u < 16; u++) mem[u] = 1;
  UNIT_CHECK(pass_partition_minmax(cost, mem, cap, 8, 2, ends, &got) == 0);
  UNIT_CHECK(got == 15 && ends[0] == 3);
  cap[1] = 4;
  UNIT_CHECK(pass_partition_minmax(cost, mem, cap, 8, 2, ends, &got) == -2);
  UNIT_CHECK(pass_partition_minmax(cost, mem, NULL, 8, 9, ends, &got) == -1);
  cost[3] = -1;
  UNIT_CHECK(pass_partition_minmax(cost, mem, NULL, 8, 2, ends, &got) == -1);
}

/* Megatron's cuts: never between an attention layer and the MLP or MoE after it (a layout's
 * 't'); in a hybrid model (Mamba-2 layers) any cut but those that would leave the implicit
 * embedding or LM head alone in a stage. */
void test_plan_megatron_cuts(void) {
  static const ir_layer_kind dense[] = {IR_KIND_EMBEDDING, IR_KIND_ATTENTION, IR_KIND_MLP,
                                        IR_KIND_ATTENTION, IR_KIND_MOE,       IR_KIND_LM_HEAD};
  static const bool dense_ok[] = {false, true, false, true, false, true};
  static const ir_layer_kind hybrid[] = {IR_KIND_EMBEDDING, IR_KIND_MAMBA2, IR_KIND_ATTENTION,
                                         IR_KIND_MLP,       IR_KIND_MAMBA2, IR_KIND_LM_HEAD};
  static const bool hybrid_ok[] = {false, false, true, true, true, false};
  for (int h = 0; h < 2; h++) {
    ir_module *m = ir_module_new("cuts");
    for (int i = 0; i < 6; i++) ir_module_add_layer(m, "l", h ? hybrid[i] : dense[i]);
    UNIT_CHECK(pass_layout_notation_of(m) == (h ? PASS_LAYOUT_HYBRID : PASS_LAYOUT_MEGATRON));
    for (int i = 1; i < 6; i++)
      UNIT_CHECK(pass_megatron_cut_ok(m, i) == (h ? hybrid_ok : dense_ok)[i]);
    ir_module_free(m);
  }
}
