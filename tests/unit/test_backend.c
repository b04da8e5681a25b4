/* test_backend.c -- unit tests of lowering (backend/lower.c) and the deadlock checker
 * (stream/check.c): every classic schedule over a range of p, m and v lowers to streams that
 * validate and check, with activation buffers equal to the simulator's activation memory; random
 * plans (random partitions, placements and dependency-respecting orders) do too; each stream
 * carries the simulator's prediction exactly; hand-made deadlocking streams are rejected with
 * messages that name the ranks and instructions. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "passes.h"
#include "unit.h"

/* A module of n custom layers with random costs (activation memory split between B and W) on p
 * devices of one node, mb microbatches, 'data' replicas. */
static ir_module *tb_model(uint64_t *seed, int n, int p, int mb, int data) {
  ir_module *m = ir_module_new("rand");
  ir_field_set(&m->train, IR_F_TRAIN_microbatches, mb);
  ir_field_set(&m->train, IR_F_TRAIN_micro_batch, 2);
  ir_field_set(&m->train, IR_F_TRAIN_seq, 64);
  ir_field_set(&m->train, IR_F_TRAIN_data, data);
  ir_field_set(&m->intra, IR_F_LINK_bw, 100e9);
  ir_field_set(&m->intra, IR_F_LINK_lat, 5e-6);
  for (int i = 0; i < p; i++) {
    ir_device *d = ir_module_add_device(m, "x");
    ir_field_set(&d->rec, IR_F_DEVICE_mem, 80e9);
    ir_field_set(&d->rec, IR_F_DEVICE_hbm, 2e12);
    ir_field_set(&d->rec, IR_F_DEVICE_node, 0);
  }
  for (int i = 0; i < n; i++) {
    ir_layer *l = ir_module_add_layer(m, "l", IR_KIND_CUSTOM);
    double f = (0.1 + (double)(unit_rng(seed) % 1000) / 1000 * 1.9) * 1e-3;
    double act = (double)(1 + unit_rng(seed) % 64) * 1048576;
    double act_w = (double)(unit_rng(seed) % 3) * act / 4; /* 0, 1/4 or 1/2 of act */
    static const int fields[] = {IR_F_COST_f,     IR_F_COST_b,   IR_F_COST_w,     IR_F_COST_act,
                                 IR_F_COST_act_w, IR_F_COST_out, IR_F_COST_param, IR_F_COST_grad};
    /* Outputs of 64 KiB, or empty as the cost model makes an LM head's. */
    double out = unit_rng(seed) % 4 == 0 ? 0 : 2 * 64 * 256 * 2;
    double v[] = {f, f * 1.1, f * 0.9, act, act_w, out, 1e8, 1e6};
    for (int k = 0; k < 8; k++) ir_field_set(&l->cost, fields[k], v[k]);
    l->p[IR_LP_CUSTOM_F] = f; /* a custom layer's own times, which the IR requires */
    l->p[IR_LP_CUSTOM_B] = f * 1.1;
  }
  return m;
}

/* Whether the prediction s carries is the simulator's r of the module m it was lowered from: the
 * train fields scale and measured_on, the makespan, each rank's busy time and peak memory (the
 * simulator's peak_mem of its device, static memory included), and for each compute instruction
 * the start and end of its operation in r's timeline, bit for bit. Reports the first difference
 * on stderr ('what' names the case). Pre: r is a recorded SIM_OK run of m. */
static bool tb_prediction_ok(const ir_module *m, const be_stream *s, const sim_result *r,
                             const char *what) {
  const char *on =
      ir_enum_name(IR_T_BACKEND, (int)ir_field_value(&m->train, IR_F_TRAIN_measured_on));
  if (s->scale != (int32_t)ir_field_value(&m->train, IR_F_TRAIN_scale) || !s->measured_on ||
      strcmp(s->measured_on, on) != 0) {
    fprintf(stderr, "  %s: scale %d measured_on %s\n", what, (int)s->scale,
            s->measured_on ? s->measured_on : "(null)");
    return false;
  }
  if (s->pred_step != r->makespan) {
    fprintf(stderr, "  %s: predicted step %.17g, makespan %.17g\n", what, s->pred_step,
            r->makespan);
    return false;
  }
  for (int k = 0; k < s->nranks; k++) {
    const be_program *p = &s->ranks[k];
    if (p->pred_busy != r->dev[p->device].busy) {
      fprintf(stderr, "  %s: rank %d predicted busy %.17g, simulator %.17g\n", what, k,
              p->pred_busy, r->dev[p->device].busy);
      return false;
    }
    if (p->pred_peak != r->dev[p->device].peak_mem) {
      fprintf(stderr, "  %s: rank %d predicted peak memory %.17g, simulator %.17g\n", what, k,
              p->pred_peak, r->dev[p->device].peak_mem);
      return false;
    }
    int j = 0;
    for (int pc = 0; pc < p->ncode; pc++) {
      const be_inst *in = &p->code[pc];
      if (!be_op_predicted(in->op)) continue;
      ir_op_kind kind = in->op == BE_OP_FWD      ? IR_OP_F
                        : in->op == BE_OP_BWD_IN ? IR_OP_B
                        : in->op == BE_OP_BWD_W  ? IR_OP_W
                                                 : IR_OP_BW;
      const sim_op_event *ev = NULL;
      for (int e = 0; e < r->nops && !ev; e++)
        if (r->ops[e].kind == kind && r->ops[e].stage == in->a[0] && r->ops[e].mb == in->a[1])
          ev = &r->ops[e];
      if (j >= p->npred || p->pred[j].addr != pc || !ev || ev->device != p->device ||
          p->pred[j].t0 != ev->start || p->pred[j].t1 != ev->end) {
        fprintf(stderr, "  %s: rank %d at %04d: predicted time %s\n", what, k, pc,
                j < p->npred ? "differs from the simulator's" : "missing");
        return false;
      }
      j++;
    }
    if (j != p->npred) {
      fprintf(stderr, "  %s: rank %d has %d predicted times for %d compute instructions\n", what,
              k, (int)p->npred, j);
      return false;
    }
  }
  return true;
}

/* The peak activation bytes of rank k of s, replaying its compute instructions in order with the
 * simulator's rules for m's stages (sim.h, sim_model_build): F allocates act at its start; B (or
 * a fused BW) allocates the rebuilt bytes (ir_stage_layer_rebuild) at its start when 'rebuilt'
 * and frees act - act_w at its end (a BW act and the rebuilt bytes), W frees act_w and the rebuilt
 * bytes. Without 'rebuilt' it is what the stream's stash and wstash buffers hold. */
static double tb_replay_peak(const ir_module *m, const be_stream *s, int k, bool rebuilt) {
  double live = 0, peak = 0;
  const be_program *p = &s->ranks[k];
  for (int pc = 0; pc < p->ncode; pc++) {
    const be_inst *in = &p->code[pc];
    if (!be_op_predicted(in->op)) continue;
    const ir_stage *st = &m->stages[in->a[0]];
    double act = 0, act_w = 0, rb = 0;
    for (int i = st->first; i < st->end; i++) {
      ir_cost c = ir_stage_layer_cost(m, st, i);
      act += c.act;
      act_w += c.act_w;
      if (rebuilt) rb += ir_stage_layer_rebuild(m, st, i);
    }
    if (in->op == BE_OP_FWD) live += act;
    if (in->op == BE_OP_BWD_IN || in->op == BE_OP_BWD) live += rb;
    if (live > peak) peak = live;
    if (in->op == BE_OP_BWD_IN) live -= act - act_w;
    if (in->op == BE_OP_BWD_W) live -= act_w + rb;
    if (in->op == BE_OP_BWD) live -= act + rb;
  }
  return peak;
}

/* Ranks tb_lower_ok saw whose simulated activation peak exceeds their buffers' (rebuilt state). */
static int tb_rebuilt_peaks;

/* Lower m and check that the stream validates and checks, that a write/read round trip keeps
 * it, that each rank's activation buffers peak at the simulator's activation memory less the
 * state recomputing stages rebuild in B (which the runtime keeps outside the buffers; exactly
 * that activation memory when no stage recomputes), that the replay of the rank's instructions
 * with the rebuilt state peaks at the simulator's activation memory, and that
 * it carries the simulator's prediction (tb_prediction_ok). Returns whether all held ('what'
 * names the case in failures). */
static bool tb_lower_ok(const ir_module *m, const char *what) {
  diag_engine *d = diag_new(stderr);
  be_stream *s = be_lower(m, d, diag_mkloc(0, 0, 0, 0));
  bool ok = s != NULL;
  if (!ok) fprintf(stderr, "  %s: lowering failed\n", what);
  sim_model *p = ok ? sim_model_build(m, d) : NULL;
  sim_result r = {0};
  sim_opts so = {.record = true};
  if (p && sim_run(p, m, &so, &r) == SIM_OK) {
    ok = tb_prediction_ok(m, s, &r, what);
    for (int k = 0; k < s->nranks; k++) {
      be_mem mm = be_mem_stats(s, k);
      int dv = s->ranks[k].device;
      if (mm.arena_bytes < mm.peak_live || mm.peak_live < mm.peak_stash) {
        fprintf(stderr, "  %s: rank %d arena %.0f, peak live %.0f, activations %.0f\n", what, k,
                mm.arena_bytes, mm.peak_live, mm.peak_stash);
        ok = false;
      }
      double sim_act = r.dev[dv].peak_mem - r.dev[dv].static_mem;
      double bufs = tb_replay_peak(m, s, k, false), all = tb_replay_peak(m, s, k, true);
      if (fabs(mm.peak_stash - bufs) > 0.5 || fabs(all - sim_act) > 0.5 ||
          mm.peak_stash > sim_act + 0.5) {
        fprintf(stderr, "  %s: rank %d activations %.0f (replayed %.0f), simulator %.0f "
                "(replayed with the rebuilt state %.0f)\n", what, k, mm.peak_stash, bufs, sim_act,
                all);
        ok = false;
      }
      if (all > bufs + 0.5) tb_rebuilt_peaks++;
    }
  } else if (ok) {
    ok = false;
  }
  if (ok) {
    strbuf bin = {0}, err = {0};
    be_write(s, &bin);
    be_stream *back = be_read((const uint8_t *)bin.data, bin.len, &err);
    if (!back) fprintf(stderr, "  %s: read back: %s\n", what, strbuf_cstr(&err));
    ok = back != NULL;
    be_stream_free(back);
    strbuf_free(&bin);
    strbuf_free(&err);
  }
  sim_result_free(&r);
  sim_model_free(p);
  be_stream_free(s);
  diag_free(d);
  return ok;
}

void test_backend_classic(void) {
  static const char *const plans[] = {
      "partition{method=uniform},place{method=sequential},schedule{method=gpipe}",
      "partition{method=uniform},place{method=sequential},schedule{method=1f1b}",
      "partition{method=balanced},place{method=sequential},schedule{method=zb-h1}",
      "partition{method=uniform, chunks=2},place{method=interleaved},"
      "schedule{method=interleaved-1f1b}",
      "partition{method=uniform, chunks=3},place{method=interleaved},"
      "schedule{method=interleaved-1f1b}",
      "partition{method=balanced, chunks=2},place{method=vshape},schedule{method=zbv}",
      "partition{method=balanced, chunks=2},place{method=interleaved},schedule{method=adaptive}",
      "partition{method=balanced},place{method=sequential},schedule{method=adaptive}",
  };
  static const int ps[] = {2, 3, 4, 8};
  static const int mbs[] = {1, 2, 4, 8, 12, 16};
  uint64_t seed = 7;
  int lowered = 0;
  for (size_t pi = 0; pi < sizeof ps / sizeof *ps; pi++)
    for (size_t mi = 0; mi < sizeof mbs / sizeof *mbs; mi++)
      for (size_t k = 0; k < sizeof plans / sizeof *plans; k++) {
        int p = ps[pi], mb = mbs[mi];
        ir_module *m = tb_model(&seed, 3 * p * 2, p, mb, mi % 2 ? 2 : 1);
        /* Costs "measured" at some scale on some backend, or analytic: the stream says which. */
        if (k % 3) ir_field_set(&m->train, IR_F_TRAIN_scale, (double)(k % 3) * 4);
        ir_field_set(&m->train, IR_F_TRAIN_measured_on, (double)((k + pi) % 5));
        FILE *null = fopen("/dev/null", "w");
        diag_engine *q = diag_new(null);
        /* A method may refuse a shape (interleaving needs m divisible by p, ...). */
        if (pass_run_text(m, plans[k], q) == PASS_OK) {
          char what[300];
          snprintf(what, sizeof what, "p=%d m=%d %s", p, mb, plans[k]);
          UNIT_CHECK(tb_lower_ok(m, what));
          lowered++;
        }
        diag_free(q);
        fclose(null);
        ir_module_free(m);
      }
  UNIT_CHECK(lowered >= 150); /* most combinations are accepted by their schedule pass */
}

/* Replace m's plan by a random one: random contiguous partition into k stages, random
 * placement, and per-device orders from a random linearization of the dependencies (split or
 * fused backward). */
static void tb_random_plan(ir_module *m, uint64_t *seed) {
  int n = m->nlayers, p = m->ndevices;
  int k = 1 + (int)(unit_rng(seed) % (uint64_t)(n < 3 * p ? n : 3 * p));
  ir_module_clear_plan(m);
  /* k - 1 distinct cut points among 1..n-1. */
  bool *cut = calloc((size_t)n, sizeof *cut);
  for (int c = 0; c < k - 1;) {
    int at = 1 + (int)(unit_rng(seed) % (uint64_t)(n - 1));
    if (!cut[at]) cut[at] = true, c++;
  }
  int first = 0;
  for (int i = 1; i <= n; i++)
    if (i == n || cut[i]) {
      ir_module_add_stage(m, first, i)->device = (int)(unit_rng(seed) % (uint64_t)p);
      first = i;
    }
  free(cut);
  int nst = m->nstages, mb = (int)ir_field_value(&m->train, IR_F_TRAIN_microbatches);
  bool fused = unit_rng(seed) % 2;
  m->schedules = calloc((size_t)p, sizeof *m->schedules);
  /* state per (stage, mb): 0 nothing, 1 F done, 2 B done, 3 W done */
  int *state = calloc((size_t)nst * mb, sizeof *state);
  int total = nst * mb * (fused ? 2 : 3);
  for (int done = 0; done < total; done++) {
    int ready[4096], nready = 0;
    for (int s = 0; s < nst; s++)
      for (int j = 0; j < mb && nready < 4096; j++) {
        int st = state[s * mb + j];
        bool ok = st == 0 ? s == 0 || state[(s - 1) * mb + j] >= 1
                : st == 1 ? s + 1 == nst || state[(s + 1) * mb + j] >= 2
                          : st == 2 && !fused;
        if (ok) ready[nready++] = s * mb + j;
      }
    int c = ready[unit_rng(seed) % (uint64_t)nready];
    int s = c / mb, j = c % mb;
    int st = state[c];
    ir_op_kind kind = st == 0 ? IR_OP_F : st == 1 ? (fused ? IR_OP_BW : IR_OP_B) : IR_OP_W;
    ir_op op = {kind, s, j};
    ir_schedule *sc = &m->schedules[m->stages[s].device];
    VEC_PUSH(sc->ops, sc->nops, sc->cap, op);
    state[c] = fused && st == 1 ? 3 : st + 1;
  }
  free(state);
}

void test_backend_random_plans(void) {
  uint64_t seed = 2026;
  for (int it = 0; it < 300; it++) {
    int p = 1 + (int)(unit_rng(&seed) % 6), mb = 1 + (int)(unit_rng(&seed) % 9);
    int n = 1 + (int)(unit_rng(&seed) % 14);
    ir_module *m = tb_model(&seed, n, p, mb, 1 + (int)(unit_rng(&seed) % 2));
    tb_random_plan(m, &seed);
    char what[64];
    snprintf(what, sizeof what, "random plan %d", it);
    UNIT_CHECK(tb_lower_ok(m, what));
    ir_module_free(m);
  }
}

/* Random plans whose layers alternate custom and mlp (recomputable) and whose stages recompute at
 * random: the stream's stash and wstash follow the stages' recomputation, so the activations
 * peak at the simulator's less the state B rebuilds (tb_lower_ok), and every stage carries its
 * flag; some plan's simulated peak includes rebuilt state. */
void test_backend_random_recompute(void) {
  uint64_t seed = 77;
  tb_rebuilt_peaks = 0;
  for (int it = 0; it < 100; it++) {
    int p = 1 + (int)(unit_rng(&seed) % 4), mb = 1 + (int)(unit_rng(&seed) % 6);
    int n = 2 + (int)(unit_rng(&seed) % 10);
    ir_module *m = tb_model(&seed, n, p, mb, 1);
    for (int i = 1; i < n; i += 2) {
      ir_layer *l = &m->layers[i];
      l->kind = IR_KIND_MLP;
      l->p[IR_LP_MLP_HIDDEN] = 256;
      l->p[IR_LP_MLP_FFN] = 1024;
      l->p[IR_LP_MLP_SEQ] = 64;
    }
    tb_random_plan(m, &seed);
    for (int s = 0; s < m->nstages; s++)
      if (unit_rng(&seed) % 2) m->stages[s].recompute = IR_RECOMPUTE_FULL;
    char what[64];
    snprintf(what, sizeof what, "random recompute plan %d", it);
    UNIT_CHECK(tb_lower_ok(m, what));
    diag_engine *d = diag_new(stderr);
    be_stream *s = be_lower(m, d, diag_mkloc(0, 0, 0, 0));
    UNIT_CHECK(s != NULL);
    for (int st = 0; s && st < m->nstages; st++)
      UNIT_CHECK(s->stages[st].recompute == (m->stages[st].recompute == IR_RECOMPUTE_FULL));
    be_stream_free(s);
    diag_free(d);
    ir_module_free(m);
  }
  UNIT_CHECK(tb_rebuilt_peaks > 0);
}

/* ---- Hand-made streams ---------------------------------------------------------------------- */

/* A stream of nr ranks with stage s on rank s, one microbatch and one slot per rank, without
 * code: the checker tests write the programs. */
static be_stream *tb_stream(int nr) {
  be_stream *s = calloc(1, sizeof *s);
  s->model = xstrdup("hand");
  s->nranks = s->nstages = nr;
  s->replicas = s->nmb = s->micro_batch = s->seq = 1;
  s->ranks = calloc((size_t)nr, sizeof *s->ranks);
  for (int r = 0; r < nr; r++) {
    s->ranks[r].type = xstrdup("x");
    s->ranks[r].nslots = 4;
    s->ranks[r].slots = calloc(4, sizeof *s->ranks[r].slots);
  }
  return s;
}

static void tb_emit(be_stream *s, int r, be_opcode op, int32_t a0, int32_t a1, int32_t a2,
                    int32_t a3, int32_t a4) {
  int32_t a[BE_MAX_OPERANDS] = {a0, a1, a2, a3, a4, 0};
  be_emit(&s->ranks[r], op, be_ops[op].nops, a);
}

/* be_check's message for s, or "" when it passes (static buffer). */
static const char *tb_check(const be_stream *s) {
  static char msg[4096];
  strbuf err = {0};
  int rc = be_check(s, &err);
  snprintf(msg, sizeof msg, "%s", rc == 0 ? "" : strbuf_cstr(&err));
  if (rc != 0 && !msg[0]) snprintf(msg, sizeof msg, "(failed without a message)");
  strbuf_free(&err);
  return msg;
}

#define TB_HAS(msg, text)                                                                        \
  do {                                                                                           \
    if (!strstr((msg), (text))) unit_fail_str(__FILE__, __LINE__, "message holds", msg, text);   \
  } while (0)

void test_backend_check_crossed(void) {
  /* Rank 0 sends mb1 before mb0; rank 1 receives mb0 first: NCCL would pair them wrongly. */
  be_stream *s = tb_stream(2);
  tb_emit(s, 0, BE_OP_SEND, 1, 0, BE_T_ACT, 0, 1);
  tb_emit(s, 0, BE_OP_SEND, 1, 1, BE_T_ACT, 0, 0);
  tb_emit(s, 0, BE_OP_WAIT, 0, 0, 0, 0, 0);
  tb_emit(s, 0, BE_OP_WAIT, 1, 0, 0, 0, 0);
  tb_emit(s, 1, BE_OP_RECV, 0, 0, BE_T_ACT, 0, 0);
  tb_emit(s, 1, BE_OP_RECV, 0, 1, BE_T_ACT, 0, 1);
  tb_emit(s, 1, BE_OP_WAIT, 0, 0, 0, 0, 0);
  tb_emit(s, 1, BE_OP_WAIT, 1, 0, 0, 0, 0);
  const char *msg = tb_check(s);
  TB_HAS(msg, "message order mismatch between rank 0 and rank 1");
  TB_HAS(msg, "send at 0000 on rank 0 (send act s0 mb1 -> rank 1)");
  TB_HAS(msg, "receive at 0000 on rank 1 (recv act s0 mb0 <- rank 0)");
  be_stream_free(s);
}

void test_backend_check_cycle(void) {
  /* Each of three ranks waits for a receive from the next before sending to the previous. */
  be_stream *s = tb_stream(3);
  for (int r = 0; r < 3; r++) {
    int nx = (r + 1) % 3, pv = (r + 2) % 3;
    tb_emit(s, r, BE_OP_RECV, nx, 0, BE_T_GRAD, 1, 0);
    tb_emit(s, r, BE_OP_WAIT, 0, 0, 0, 0, 0);
    tb_emit(s, r, BE_OP_SEND, pv, 1, BE_T_GRAD, 1, 0);
    tb_emit(s, r, BE_OP_WAIT, 1, 0, 0, 0, 0);
  }
  const char *msg = tb_check(s);
  TB_HAS(msg, "deadlock: ranks 0 -> 1 -> 2 -> 0 wait for each other in a cycle");
  TB_HAS(msg, "rank 0 at 0001 (WAIT %0) waits for recv grad s1 mb0 <- rank 1; rank 1 has not "
              "posted the matching send");
  TB_HAS(msg, "rank 2 at 0001 (WAIT %0) waits for recv grad s1 mb0 <- rank 0");
  be_stream_free(s);
}

void test_backend_check_missing_receive(void) {
  be_stream *s = tb_stream(2);
  tb_emit(s, 0, BE_OP_SEND, 1, 0, BE_T_ACT, 0, 0);
  tb_emit(s, 0, BE_OP_WAIT, 0, 0, 0, 0, 0);
  tb_emit(s, 1, BE_OP_STEP, 0, 0, 0, 0, 0);
  const char *msg = tb_check(s);
  TB_HAS(msg, "deadlock: rank 0 can never finish");
  TB_HAS(msg, "rank 0 at 0001 (WAIT %0) waits for send act s0 mb0 -> rank 1; rank 1 finished "
              "without posting the matching receive");
  be_stream_free(s);
}

void test_backend_check_groups(void) {
  /* Two ranks exchange: each posts its receive and then its send as one group, so both
   * progress, although each one's receive comes first (as batch_isend_irecv does). */
  be_stream *s = tb_stream(2);
  tb_emit(s, 0, BE_OP_RECV, 1, 0, BE_T_GRAD, 1, 0);
  tb_emit(s, 0, BE_OP_SEND, 1, 1, BE_T_ACT, 0, 1);
  tb_emit(s, 0, BE_OP_WAIT, 0, 0, 0, 0, 0);
  tb_emit(s, 0, BE_OP_WAIT, 1, 0, 0, 0, 0);
  tb_emit(s, 1, BE_OP_RECV, 0, 0, BE_T_ACT, 0, 1);
  tb_emit(s, 1, BE_OP_SEND, 0, 1, BE_T_GRAD, 1, 0);
  tb_emit(s, 1, BE_OP_WAIT, 0, 0, 0, 0, 0);
  tb_emit(s, 1, BE_OP_WAIT, 1, 0, 0, 0, 0);
  UNIT_CHECK_STREQ(tb_check(s), "");
  /* Split into separate groups by a WAIT in between, the same exchange deadlocks: each rank's
   * receive holds its queue and the sends behind it never start. */
  be_stream *t = tb_stream(2);
  for (int r = 0; r < 2; r++) {
    tb_emit(t, r, BE_OP_RECV, 1 - r, 0, r ? BE_T_ACT : BE_T_GRAD, r ? 0 : 1, r ? 1 : 0);
    tb_emit(t, r, BE_OP_FREE, 3, 0, 0, 0, 0); /* any non-message instruction ends a group */
    tb_emit(t, r, BE_OP_SEND, 1 - r, 1, r ? BE_T_GRAD : BE_T_ACT, r ? 1 : 0, r ? 0 : 1);
    tb_emit(t, r, BE_OP_WAIT, 0, 0, 0, 0, 0);
    tb_emit(t, r, BE_OP_WAIT, 1, 0, 0, 0, 0);
  }
  const char *msg = tb_check(t);
  TB_HAS(msg, "deadlock: ranks 0 -> 1 -> 0 wait for each other in a cycle");
  TB_HAS(msg, "rank 0 at 0003 (WAIT %0) waits for recv grad s1 mb0 <- rank 1; rank 1's matching "
              "send at 0002 is queued behind its earlier messages");
  be_stream_free(s);
  be_stream_free(t);
}
