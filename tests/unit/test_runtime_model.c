/* test_runtime_model.c -- unit tests of the runtime's model (runtime.h, "Model") on
 * streams built by hand: tensor sizes from the scaled dimensions, the data stream and targets,
 * a finite-difference check of the gradients, equality of pipelined (split B/W, any microbatch
 * order, replicas summed) and sequential gradients, deterministic initialization, training that
 * lowers the loss, and the error paths. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ir.h"
#include "kernels.h"
#include "runtime.h"
#include "stream_fixture.h"
#include "unit.h"

/* Streams are built by hand with stream_fixture.h. */


static const char *const rm_kinds5[] = {"embedding", "attention", "mlp", "moe", "lm_head", NULL};

/* The usual test stream: 5 layers (embedding, attention, mlp, moe, lm_head) in 3 stages [0,2)
 * [2,4) [4,5), width 'hidden' and vocabulary 'vocab'. */
static be_stream *rm_stream5(int nmb, int replicas, int micro_batch, int seq, const char *opt,
                             double hidden, double vocab) {
  static const int cuts[] = {2, 4};
  be_stream *s = fx_stream("test", rm_kinds5, 3, cuts, nmb, replicas, micro_batch, seq, opt);
  for (int l = 0; l < 5; l++) fx_layer_params(s, l, hidden, vocab);
  return s;
}

/* A model of s that must build; every stage initialized when 'init'. */
static rt_model *rm_model(const be_stream *s, int scale, uint64_t seed, double lr, bool init) {
  rt_opts o = {scale, seed, lr, NULL, NULL, false};
  strbuf err = {0};
  rt_model *m = rt_model_new(s, &o, &err);
  UNIT_CHECK(m != NULL);
  if (!m) printf("  rt_model_new: %s\n", strbuf_cstr(&err));
  strbuf_free(&err);
  for (int st = 0; m && init && st < s->nstages; st++) rt_model_init_stage(m, st);
  return m;
}

/* Zero the gradients of every stage of m. */
static void rm_zero_grads(rt_model *m, int nstages) {
  for (int st = 0; st < nstages; st++) {
    size_t n;
    float *g = rt_stage_grads(m, st, &n);
    memset(g, 0, n * sizeof *g);
  }
}

/* ---- Sizes ----------------------------------------------------------------------------------- */

void test_runtime_model_floats(void) {
  /* hidden 72 / 4 = 18, vocab 100 / 4 = 25, T = 2 x (32 / 4) = 16. */
  be_stream *s = rm_stream5(3, 1, 2, 32, "sgd", 72, 100);
  rt_model *m = rm_model(s, 4, 1, 0.1, false);
  UNIT_CHECK(rt_model_scale(m) == 4);
  UNIT_CHECK(rt_tensor_floats(m, BE_T_INPUT, 0) == 16);
  UNIT_CHECK(rt_tensor_floats(m, BE_T_ACT, 0) == 16 * 18);
  UNIT_CHECK(rt_tensor_floats(m, BE_T_ACT, 1) == 16 * 18);
  UNIT_CHECK(rt_tensor_floats(m, BE_T_ACT, 2) == 16 * 25);
  UNIT_CHECK(rt_tensor_floats(m, BE_T_GRAD, 0) == 0);
  UNIT_CHECK(rt_tensor_floats(m, BE_T_GRAD, 1) == 16 * 18);
  UNIT_CHECK(rt_tensor_floats(m, BE_T_GRAD, 3) == 16 * 25);
  UNIT_CHECK(rt_tensor_floats(m, BE_T_STASH, 1) == 0);
  /* WSTASH holds the stage's saved-state block: its layers' kernels' save_floats. */
  rt_layer_info L;
  size_t save = 0;
  for (int i = 0; i < rt_model_nlayers(m); i++) {
    rt_model_layer(m, i, &L);
    if (i >= s->stages[1].first && i < s->stages[1].end) save += L.p.save_floats;
  }
  UNIT_CHECK(save > 0 && rt_tensor_floats(m, BE_T_WSTASH, 1) == save);
  rt_model_free(m);
  /* Scale 0 picks a power of two; this small model runs at full size. */
  m = rm_model(s, 0, 1, 0.1, false);
  UNIT_CHECK(rt_model_scale(m) == 1);
  rt_model_free(m);
  be_stream_free(s);
  /* A large model: the automatic scale divides until a step is small, and the sizes follow. */
  s = rm_stream5(8, 1, 1, 4096, "adam", 4096, 128000);
  m = rm_model(s, 0, 1, 0.1, false);
  int k = rt_model_scale(m);
  UNIT_CHECK(k >= 16 && (k & (k - 1)) == 0);
  UNIT_CHECK(rt_tensor_floats(m, BE_T_INPUT, 0) == (size_t)(4096 / k));
  UNIT_CHECK(rt_tensor_floats(m, BE_T_ACT, 0) == (size_t)(4096 / k) * (4096 / k));
  rt_model_free(m);
  be_stream_free(s);
}

/* ---- Data ------------------------------------------------------------------------------------ */

/* Index of the smallest of n floats (the target column of a loss gradient). */
static int rm_argmin(const float *v, int n) {
  int best = 0;
  for (int i = 1; i < n; i++)
    if (v[i] < v[best]) best = i;
  return best;
}

/* The targets that rt_loss used for (step, replica, mb) of m, from the sign of its gradient. */
static void rm_targets(rt_model *m, int nstages, int step, int replica, int mb, int *targets) {
  size_t T = rt_tensor_floats(m, BE_T_INPUT, 0), C = rt_tensor_floats(m, BE_T_ACT, nstages - 1) / T;
  float *out = xcalloc(T * C, sizeof *out), *grad = xcalloc(T * C, sizeof *grad);
  for (size_t t = 0; t < T; t++) out[t * C + t % C] = 1.0f; /* any logits */
  double loss = rt_loss(m, step, replica, mb, out, grad);
  UNIT_CHECK(loss > 0 && isfinite(loss));
  for (size_t t = 0; t < T; t++) targets[t] = rm_argmin(grad + t * C, (int)C);
  free(out);
  free(grad);
}

void test_runtime_model_data(void) {
  /* Synthetic: T = 8, V = 16; 2 replicas, 3 microbatches. */
  be_stream *s = rm_stream5(3, 2, 1, 8, "sgd", 16, 16);
  rt_model *m = rm_model(s, 1, 7, 0.1, false), *m2 = rm_model(s, 1, 7, 0.1, false);
  float tok[8], tok2[8], next[8];
  int succ[16], tg[8];
  for (int i = 0; i < 16; i++) succ[i] = -1;
  bool differ = false;
  for (int step = 0; step < 3; step++)
    for (int r = 0; r < 2; r++)
      for (int mb = 0; mb < 3; mb++) {
        rt_load(m, step, r, mb, tok);
        rt_load(m2, step, r, mb, tok2);
        UNIT_CHECK(memcmp(tok, tok2, sizeof tok) == 0);
        if (step == 0 && r == 0 && mb == 0) {
          rt_load(m, 0, 0, 1, tok2);
          differ = memcmp(tok, tok2, sizeof tok) != 0;
        }
        /* A chain through a fixed successor table: equal tokens have equal successors. */
        for (int i = 0; i < 8; i++) {
          UNIT_CHECK(tok[i] >= 0 && tok[i] < 16 && tok[i] == floorf(tok[i]));
          if (i + 1 < 8) {
            int a = (int)tok[i], b = (int)tok[i + 1];
            UNIT_CHECK(succ[a] < 0 || succ[a] == b);
            succ[a] = b;
          }
        }
        /* Targets: the next tokens of the same stream (crossing into the next microbatch,
         * replica or step). */
        rm_targets(m, 3, step, r, mb, tg);
        int nstep = step, nr = r, nmb = mb + 1;
        if (nmb == 3) nmb = 0, nr++;
        if (nr == 2) nr = 0, nstep++;
        rt_load(m, nstep, nr, nmb, next);
        for (int i = 0; i < 8; i++) UNIT_CHECK(tg[i] == (int)(i + 1 < 8 ? tok[i + 1] : next[0]));
      }
  UNIT_CHECK(differ);
  rt_model_free(m);
  rt_model_free(m2);
  /* A different seed gives different data. */
  m = rm_model(s, 1, 7, 0.1, false);
  m2 = rm_model(s, 1, 8, 0.1, false);
  differ = false;
  for (int mb = 0; mb < 3; mb++) {
    rt_load(m, 0, 0, mb, tok);
    rt_load(m2, 0, 0, mb, tok2);
    differ |= memcmp(tok, tok2, sizeof tok) != 0;
  }
  UNIT_CHECK(differ);
  rt_model_free(m);
  rt_model_free(m2);

  /* A data file of 11 bytes: token(p) = byte[p mod 11] % 16; it wraps around. */
  char path[] = "/tmp/octo_model_data_XXXXXX";
  int fd = mkstemp(path);
  UNIT_CHECK(fd >= 0);
  static const char text[] = "hello world";
  UNIT_CHECK(write(fd, text, 11) == 11);
  close(fd);
  rt_opts o = {1, 7, 0.1, path, NULL, false};
  strbuf err = {0};
  m = rt_model_new(s, &o, &err);
  UNIT_CHECK(m != NULL);
  for (int step = 0; m && step < 2; step++)
    for (int r = 0; r < 2; r++)
      for (int mb = 0; mb < 3; mb++) {
        rt_load(m, step, r, mb, tok);
        rm_targets(m, 3, step, r, mb, tg);
        long p0 = (((long)step * 2 + r) * 3 + mb) * 8;
        for (int i = 0; i < 8; i++) {
          UNIT_CHECK((int)tok[i] == (unsigned char)text[(p0 + i) % 11] % 16);
          UNIT_CHECK(tg[i] == (unsigned char)text[(p0 + i + 1) % 11] % 16);
        }
      }
  rt_model_free(m);
  strbuf_free(&err);
  unlink(path);
  be_stream_free(s);
}

/* ---- Gradients ------------------------------------------------------------------------------- */

/* Apply w[j] of stage st += delta through an SGD step with learning rate 1 (g = -delta). */
static void rm_nudge(rt_model *m, int nstages, int st, size_t j, float delta) {
  rm_zero_grads(m, nstages);
  size_t n;
  rt_stage_grads(m, st, &n)[j] = -delta;
  rt_step(m, st);
}

/* Finite-difference check of the whole model's loss (2 replicas) against the gradients of every
 * stage of s (3 stages, SGD): the 4 largest gradients of each stage and 4 spread-out entries. */
static void rm_gradcheck(const be_stream *s) {
  rt_model *m = rm_model(s, 1, 3, 1.0, true);
  rm_zero_grads(m, 3);
  double l0 = rt_reference_step(m, 0, 2);
  UNIT_CHECK(isfinite(l0) && l0 > 0);
  const float eps = 1e-2f;
  int checked = 0, bad = 0;
  float *saved[3]; /* the analytic gradients (the nudges below overwrite the model's) */
  size_t counts[3];
  for (int st = 0; st < 3; st++) {
    float *g0 = rt_stage_grads(m, st, &counts[st]);
    saved[st] = xmalloc(counts[st] * sizeof *saved[st]);
    memcpy(saved[st], g0, counts[st] * sizeof *g0);
  }
  for (int st = 0; st < 3; st++) {
    size_t n = counts[st];
    float *g = saved[st];
    double gmax = 0;
    for (size_t k = 0; k < n; k++) gmax = fmax(gmax, fabs(g[k]));
    UNIT_CHECK(gmax > 0);
    /* The 4 largest gradients of the stage, and 4 spread-out entries. */
    size_t pick[8];
    for (int q = 0; q < 4; q++) {
      size_t best = 0;
      double bv = -1;
      for (size_t k = 0; k < n; k++) {
        bool used = false;
        for (int u = 0; u < q; u++) used |= pick[u] == k;
        if (!used && fabs(g[k]) > bv) bv = fabs(g[k]), best = k;
      }
      pick[q] = best;
    }
    for (int q = 4; q < 8; q++) pick[q] = (size_t)(q - 4) * n / 4 + n / 8;
    for (int q = 0; q < 8; q++) {
      size_t j = pick[q];
      rm_nudge(m, 3, st, j, eps);
      rm_zero_grads(m, 3);
      double lp = rt_reference_step(m, 0, 2);
      rm_nudge(m, 3, st, j, -2 * eps);
      rm_zero_grads(m, 3);
      double lm = rt_reference_step(m, 0, 2);
      rm_nudge(m, 3, st, j, eps);
      double num = (lp - lm) / (2.0 * eps);
      double tol = 1e-2 * fabs(g[j]) + 1e-4 * gmax;
      checked++;
      if (!(fabs(num - g[j]) <= tol)) {
        bad++;
        printf("  stage %d param %zu: analytic %.8g numeric %.8g\n", st, j, g[j], num);
      }
    }
    free(saved[st]);
  }
  UNIT_CHECK(checked == 24 && bad == 0);
  /* The nudges restored the weights (up to rounding): the loss is back. */
  rm_zero_grads(m, 3);
  UNIT_CHECK(fabs(rt_reference_step(m, 0, 2) - l0) < 1e-6);
  rt_model_free(m);
}

void test_runtime_model_gradcheck(void) {
  /* h 8, V 12, T 4, 2 microbatches, 2 replicas, SGD with lr 1 (used only to nudge weights). */
  be_stream *s = rm_stream5(2, 2, 1, 4, "sgd", 8, 12);
  rm_gradcheck(s);
  be_stream_free(s);
  /* A vision-language model: a vit over 5 tokens of width 8, an mlp of width 16 over 4 tokens
   * (the adapter drops the first token and pads the width), an embedding of 8 tokens that
   * splices the 4 image tokens in front, attention and the head; mamba2 in the middle. */
  static const char *const kinds[] = {"vit", "mlp", "embedding", "mamba2", "attention",
                                      "lm_head", NULL};
  static const int cuts[] = {2, 4};
  s = fx_stream("vlm", kinds, 3, cuts, 2, 2, 1, 8, "sgd");
  fx_layer_params(s, 0, 8, 12);
  fx_param(s, 0, "tokens", 5);
  fx_layer_params(s, 1, 16, 12);
  fx_param(s, 1, "seq", 4);
  for (int l = 2; l < 6; l++) fx_layer_params(s, l, 16, 12);
  rm_gradcheck(s);
  be_stream_free(s);
}

/* One step of a pipelined run of replica 'replica' of stream s on m: F of every microbatch stage
 * by stage, then the backward with B and W separated, in a scrambled microbatch order that
 * differs per stage, and W of a stage deferred past B of the stage before it (as zero-bubble
 * schedules do). Returns the sum of the microbatch losses. */
static double rm_pipelined_step(rt_model *m, const be_stream *s, int step, int replica) {
  int S = s->nstages, M = s->nmb;
  float **act = xcalloc((size_t)(S * M), sizeof *act);
  float **grad = xcalloc((size_t)((S + 1) * M), sizeof *grad);
  float *tokens = xmalloc(rt_tensor_floats(m, BE_T_INPUT, 0) * sizeof *tokens);
  double loss = 0;
  for (int st = 0; st < S; st++)
    for (int mb = 0; mb < M; mb++) {
      act[st * M + mb] = xmalloc(rt_tensor_floats(m, BE_T_ACT, st) * sizeof(float));
      if (st == 0) rt_load(m, step, replica, mb, tokens);
      rt_forward(m, st, mb, st == 0 ? tokens : act[(st - 1) * M + mb], act[st * M + mb]);
    }
  for (int mb = M - 1; mb >= 0; mb--) {
    grad[S * M + mb] = xmalloc(rt_tensor_floats(m, BE_T_GRAD, S) * sizeof(float));
    loss += rt_loss(m, step, replica, mb, act[(S - 1) * M + mb], grad[S * M + mb]);
  }
  for (int st = S - 1; st >= 0; st--) {
    for (int q = 0; q < M; q++) {
      int mb = ((M - 1) * q + st) % M; /* descending, rotated by the stage: a permutation */
      float *dx = NULL;
      if (st > 0)
        dx = grad[st * M + mb] = xmalloc(rt_tensor_floats(m, BE_T_GRAD, st) * sizeof(float));
      rt_backward_input(m, st, mb, grad[(st + 1) * M + mb], dx);
      if (st == S - 1 && q == 0) rt_backward_weight(m, st, mb); /* fused for one */
    }
    /* W of the stage after this one, in reverse order, after this stage's B. */
    if (st + 1 < S)
      for (int mb = M - 1; mb >= 0; mb--) rt_backward_weight(m, st + 1, mb);
  }
  for (int st = S - 1; st >= 0; st--)
    for (int mb = 0; mb < M; mb++) rt_backward_weight(m, st, mb); /* the rest (no-ops if done) */
  for (int k = 0; k < S * M; k++) free(act[k]);
  for (int k = 0; k < (S + 1) * M; k++) free(grad[k]);
  free(act);
  free(grad);
  free(tokens);
  return loss;
}

/* Pipelined runs of every replica on their own models, all-reduced, against the reference on a
 * fresh model, for 'steps' steps with optimizer steps in between. */
static void rm_check_pipelined(const be_stream *s, double lr, int steps) {
  int S = s->nstages, R = s->replicas;
  rt_model *ref = rm_model(s, 1, 11, lr, true);
  rt_model *rep[2] = {NULL, NULL};
  for (int r = 0; r < R; r++) {
    rep[r] = rm_model(s, 1, 11, lr, false);
    for (int st = S - 1; st >= 0; st--) rt_model_init_stage(rep[r], (st + r) % S);
  }
  for (int step = 0; step < steps; step++) {
    double lref = rt_reference_step(ref, step, R), lsum = 0;
    for (int r = 0; r < R; r++) lsum += rm_pipelined_step(rep[r], s, step, r);
    /* Step 0 has the same weights: each microbatch's loss is bit-identical, only the order of
     * the sum differs. Later steps follow weights that differ by the rounding of gradients
     * accumulated in another order. */
    double tol = (step == 0 ? 1e-14 : 1e-6) * fabs(lref);
    if (!(fabs(lsum / (R * s->nmb) - lref) <= tol))
      printf("  step %d: loss %.17g vs %.17g\n", step, lsum / (R * s->nmb), lref);
    UNIT_CHECK(fabs(lsum / (R * s->nmb) - lref) <= tol);
    for (int st = 0; st < S; st++) {
      /* The all-reduce: sum over the replicas into each. */
      size_t n, n1;
      float *g0 = rt_stage_grads(rep[0], st, &n);
      if (R == 2) {
        float *g1 = rt_stage_grads(rep[1], st, &n1);
        UNIT_CHECK(n == n1);
        for (size_t k = 0; k < n; k++) g1[k] = g0[k] = g0[k] + g1[k];
      }
      for (int r = 0; r < R; r++) {
        double d = rt_grad_diff(rep[r], ref, st);
        if (!(d < 1e-5)) printf("  step %d stage %d replica %d: diff %g\n", step, st, r, d);
        UNIT_CHECK(d < 1e-5);
      }
      rt_step(ref, st);
      for (int r = 0; r < R; r++) rt_step(rep[r], st);
    }
  }
  rt_model_free(ref);
  for (int r = 0; r < R; r++) rt_model_free(rep[r]);
}

void test_runtime_model_pipelined(void) {
  /* 5 layers with an lm_head in 3 stages, 3 microbatches, 2 replicas, Adam. */
  be_stream *s = rm_stream5(3, 2, 2, 8, "adam", 16, 24);
  rm_check_pipelined(s, 1e-2, 3);
  be_stream_free(s);
  /* 4 layers without lm_head in 2 stages (the first only the embedding), 4 microbatches, SGD. */
  static const char *const kinds[] = {"embedding", "mlp", "mamba2", "custom", NULL};
  static const int cut1[] = {1};
  s = fx_stream("test", kinds, 2, cut1, 4, 1, 1, 8, "sgd");
  for (int l = 0; l < 4; l++) fx_layer_params(s, l, 8, 16);
  rm_check_pipelined(s, 0.1, 3);
  be_stream_free(s);
}

/* ---- Determinism ----------------------------------------------------------------------------- */

void test_runtime_model_determinism(void) {
  be_stream *s = rm_stream5(3, 1, 1, 8, "adam", 16, 16);
  rt_model *a = rm_model(s, 1, 5, 1e-2, true);
  rt_model *b = rm_model(s, 1, 5, 1e-2, false);
  rt_model *c = rm_model(s, 1, 6, 1e-2, true);
  static const int order[] = {2, 0, 2, 1, 0};
  for (int k = 0; k < 5; k++) rt_model_init_stage(b, order[k]);
  for (int step = 0; step < 3; step++) {
    double la = rt_reference_step(a, step, 1), lb = rt_reference_step(b, step, 1);
    rt_reference_step(c, step, 1);
    UNIT_CHECK_EQ_DBL(la, lb);
    for (int st = 0; st < 3; st++) {
      UNIT_CHECK_EQ_DBL(rt_grad_diff(a, b, st), 0);
      UNIT_CHECK(rt_grad_diff(a, c, st) > 1e-3); /* another seed: other weights and data */
      size_t na, nb;
      float *ga = rt_stage_grads(a, st, &na), *gb = rt_stage_grads(b, st, &nb);
      UNIT_CHECK(na == nb && memcmp(ga, gb, na * sizeof *ga) == 0);
      rt_step(a, st);
      rt_step(b, st);
      rt_step(c, st);
    }
  }
  /* After a step the gradients are zero; rt_grad_diff of zero gradients is 0. */
  for (int st = 0; st < 3; st++) UNIT_CHECK_EQ_DBL(rt_grad_diff(a, c, st), 0);
  /* State left in flight is freed by rt_model_free (checked by the sanitizer build). */
  float tok[8], out0[8 * 16], out1[8 * 16];
  rt_load(a, 0, 0, 1, tok);
  rt_forward(a, 0, 1, tok, out0);
  rt_forward(a, 1, 1, out0, out1);
  rt_model_free(a);
  rt_model_free(b);
  rt_model_free(c);
  be_stream_free(s);
}

/* ---- Training -------------------------------------------------------------------------------- */

/* 100 steps of the reference with optimizer steps; the loss must fall below half its start. */
static void rm_check_learns(const char *opt, double lr) {
  be_stream *s = rm_stream5(3, 1, 1, 8, opt, 16, 16);
  rt_model *m = rm_model(s, 1, 9, lr, true);
  double first = 0, last = 0;
  for (int step = 0; step < 100; step++) {
    double l = rt_reference_step(m, step, 1);
    if (step == 0) first = l;
    last = l;
    for (int st = 0; st < 3; st++) rt_step(m, st);
  }
  if (!(last < 0.5 * first)) printf("  %s: loss %g -> %g\n", opt, first, last);
  UNIT_CHECK(isfinite(first) && last < 0.5 * first);
  rt_model_free(m);
  be_stream_free(s);
}

void test_runtime_model_learns(void) {
  rm_check_learns("adam", 2e-2);
  rm_check_learns("sgd", 1.0);
}

/* ---- Errors ---------------------------------------------------------------------------------- */

/* rt_model_new on s with options o must fail with a message containing 'want'. */
static void rm_check_fails(const be_stream *s, rt_opts o, const char *want) {
  strbuf err = {0};
  rt_model *m = rt_model_new(s, &o, &err);
  UNIT_CHECK(m == NULL);
  if (!strstr(strbuf_cstr(&err), want)) UNIT_CHECK_STREQ(strbuf_cstr(&err), want);
  rt_model_free(m);
  strbuf_free(&err);
}

void test_runtime_model_errors(void) {
  be_stream *s = rm_stream5(2, 1, 1, 8, "sgd", 16, 16);
  rm_check_fails(s, (rt_opts){-3, 1, 0.1, NULL, NULL, false}, "scale must be at least 1");
  rm_check_fails(s, (rt_opts){1, 1, 0.1, "/nonexistent/octo.txt", NULL, false},
                 "/nonexistent/octo.txt: No such file or directory");
  char path[] = "/tmp/octo_model_empty_XXXXXX";
  int fd = mkstemp(path);
  UNIT_CHECK(fd >= 0);
  close(fd);
  strbuf want = {0};
  strbuf_printf(&want, "%s: empty data file", path);
  rm_check_fails(s, (rt_opts){1, 1, 0.1, path, NULL, false}, strbuf_cstr(&want));
  strbuf_free(&want);
  unlink(path);
  /* A partition with a gap. */
  s->stages[1].first = 3;
  rm_check_fails(s, (rt_opts){1, 1, 0.1, NULL, NULL, false}, "stage 1: layers [3, 4)");
  s->stages[1].first = 2;
  /* Dimensions past the float-exact range. */
  s->layers[4].params[0].value = 1e12;
  rm_check_fails(s, (rt_opts){1, 1, 0.1, NULL, NULL, false}, "layer l4 (lm_head): too large at scale 1");
  s->layers[4].params[0].value = 16;
  /* Heads that the key/value heads do not divide; a kind without kernels. */
  fx_param(s, 1, "kv_heads", 3); /* the first value of a name counts: replace it */
  for (int k = 0; k < s->layers[1].nparams; k++)
    if (!strcmp(s->layers[1].params[k].name, "kv_heads")) s->layers[1].params[k].value = 3;
  rm_check_fails(s, (rt_opts){1, 1, 0.1, NULL, NULL, false}, "layer l1 (attention): heads 2 is not a multiple of kv_heads 3");
  free(s->layers[1].kind);
  s->layers[1].kind = xstrdup("conv3d");
  rm_check_fails(s, (rt_opts){1, 1, 0.1, NULL, NULL, false}, "layer l1 (conv3d): the runtime has no kernels for this kind");
  rt_model_free(NULL);
  be_stream_free(s);
}

/* ---- Numerics and dumps ---------------------------------------------------------------------- */

void test_runtime_model_nonfinite(void) {
  be_stream *s = rm_stream5(1, 1, 1, 8, "sgd", 16, 16);
  rt_model *m = rm_model(s, 1, 1, 0.1, true);
  rt_reference_step(m, 0, 1);
  strbuf why = {0};
  for (int st = 0; st < 3; st++) UNIT_CHECK(rt_stage_finite(m, st, &why));
  size_t n;
  float *g = rt_stage_grads(m, 1, &n);
  g[17] = NAN; /* stage 1 = layers l2 (mlp: norm[16], w1 ...) */
  UNIT_CHECK(!rt_stage_finite(m, 1, &why));
  UNIT_CHECK_STREQ(strbuf_cstr(&why), "layer l2 (mlp): gradient of w1[1] is NaN");
  strbuf_free(&why);
  rt_model_free(m);
  be_stream_free(s);
}

void test_runtime_model_dump(void) {
  char dir[] = "/tmp/octo_dump_XXXXXX";
  UNIT_CHECK(mkdtemp(dir) != NULL);
  be_stream *s = rm_stream5(2, 1, 1, 8, "sgd", 16, 16);
  rt_opts o = {1, 1, 0.1, NULL, dir, false};
  strbuf err = {0};
  rt_model *m = rt_model_new(s, &o, &err);
  UNIT_CHECK(m && rt_model_dump_index(m, &err) == 0);
  for (int st = 0; m && st < 3; st++) rt_model_init_stage(m, st);
  rt_model_set_step(m, 0, 0);
  rm_pipelined_step(m, s, 0, 0);
  /* Every layer's files of microbatch 0; no dx for the embedding (token ids). */
  static const char *const files[] = {"index.json",         "000-l0.x.npy",
                                      "000-l0.y.npy",       "000-l0.dy.npy",
                                      "000-l0.w.table.npy", "000-l0.g.table.npy",
                                      "001-l1.dx.npy",      "003-l3.g.experts.w2.npy",
                                      "004-l4.g.w.npy",     "targets.npy", NULL};
  for (int i = 0; files[i]; i++) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, files[i]);
    if (access(path, R_OK) != 0) printf("  missing %s\n", path);
    UNIT_CHECK(access(path, R_OK) == 0);
    unlink(path);
  }
  char path[128];
  snprintf(path, sizeof path, "%s/000-l0.dx.npy", dir);
  UNIT_CHECK(access(path, R_OK) != 0);
  char rm[160];
  snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
  UNIT_CHECK(system(rm) == 0);
  strbuf_free(&err);
  rt_model_free(m);
  be_stream_free(s);
}

/* rt_dump_stem: a dump's file names from any layer name stay in the dump's directory, are
 * unique per layer and bounded; rt_dump_stem_safe accepts exactly such stems. */
void test_runtime_dump_stem(void) {
  static const struct {
    int layer;
    const char *name, *stem;
  } cases[] = {
      {3, "mlp.0", "003-mlp.0"},
      {1, "../../../PWNED", "001-_._.._.._PWNED"},
      {2, "/etc/passwd", "002-_etc_passwd"},
      {12, ".hidden", "012-_hidden"},
      {7, "a b\x01\n\"c\\", "007-a_b___c_"},
      {1234, "", "1234-layer"},
      {0, "\xc3\xa9t\xc3\xa9", "000-__t__"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    strbuf st = {0};
    rt_dump_stem(&st, cases[i].layer, cases[i].name);
    UNIT_CHECK_STREQ(strbuf_cstr(&st), cases[i].stem);
    UNIT_CHECK(rt_dump_stem_safe(strbuf_cstr(&st)));
    strbuf_free(&st);
  }
  char name[300];
  memset(name, 'n', sizeof name - 1);
  name[sizeof name - 1] = 0;
  strbuf st = {0};
  rt_dump_stem(&st, 5, name);
  UNIT_CHECK(st.len == 4 + RT_DUMP_NAME_MAX && rt_dump_stem_safe(strbuf_cstr(&st)));
  strbuf_free(&st);
  static const char *const unsafe[] = {"", ".", "..", "../x", "a/b", ".x", "a\nb", "a b"};
  for (size_t i = 0; i < sizeof unsafe / sizeof *unsafe; i++)
    UNIT_CHECK(!rt_dump_stem_safe(unsafe[i]));
  strbuf err = {0};
  rt_dump_tensors t = {0};
  rt_ldims d = {0};
  rt_lplan p = {0};
  UNIT_CHECK(rt_dump_layer("/tmp", "../x", &d, &p, &t, &err) != 0);
  UNIT_CHECK(strstr(strbuf_cstr(&err), "got \"../x\"") != NULL);
  strbuf_free(&err);
}

/* rt_fault_parse and rt_fault_resolve: the spellings of --die and --stop, and the checks against
 * a stream (a rank, replica, address or place it lacks). */
void test_runtime_fault(void) {
  rt_fault f = {RT_FAULT_DIE, 0, 0, -1, -1};
  UNIT_CHECK(rt_fault_parse("2:17", &f) == 0 && f.rank == 2 && f.replica == 0 && f.addr == 17 &&
             f.place == -1);
  UNIT_CHECK(rt_fault_parse("1/3:allreduce", &f) == 0 && f.rank == 1 && f.replica == 3 &&
             f.addr == -1 && f.place == RT_PLACE_ALLREDUCE);
  UNIT_CHECK(rt_fault_parse("0:optimizer", &f) == 0 && f.place == RT_PLACE_OPTIMIZER);
  static const char *const bad[] = {"", "3", "3:", ":3", "-1:3", "1:-3", "1/:3", "1/-1:3",
                                    "1:3x", "1:backward", "x:3", "1/2/3:4", "99999999999:1"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) UNIT_CHECK(rt_fault_parse(bad[i], &f) != 0);
  /* Rank 0 runs FWD, ALLREDUCE, STEP; rank 1 FWD only. */
  be_stream *s = rm_stream5(2, 2, 1, 8, "sgd", 16, 16);
  static const be_opcode ops0[] = {BE_OP_FWD, BE_OP_ALLREDUCE, BE_OP_STEP};
  s->ranks[0].code = xcalloc(3, sizeof *s->ranks[0].code);
  s->ranks[0].ncode = 3;
  for (int i = 0; i < 3; i++) s->ranks[0].code[i].op = (uint8_t)ops0[i];
  s->ranks[1].code = xcalloc(1, sizeof *s->ranks[1].code);
  s->ranks[1].ncode = 1;
  s->ranks[1].code[0].op = BE_OP_FWD;
  static const struct {
    const char *spec;
    int kind, addr;    /* addr: the resolved address, or -1 for an error */
    const char *error; /* its message */
  } cases[] = {
      {"0:optimizer", RT_FAULT_DIE, 2, NULL},
      {"0/1:allreduce", RT_FAULT_STOP, 1, NULL},
      {"1:0", RT_FAULT_DIE, 0, NULL},
      {"3:0", RT_FAULT_DIE, -1, "--die: the stream has no rank 3 (ranks 0 to 2)"},
      {"0/2:0", RT_FAULT_STOP, -1, "--stop: the stream has no replica 2 (replicas 0 to 1)"},
      {"1:1", RT_FAULT_DIE, -1, "--die: rank 1 has no address 1 (its program has 1 instructions)"},
      {"1:allreduce", RT_FAULT_DIE, -1, "--die: rank 1 has no ALLREDUCE instruction (allreduce)"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    strbuf err = {0};
    UNIT_CHECK(rt_fault_parse(cases[i].spec, &f) == 0);
    f.kind = cases[i].kind;
    int rc = rt_fault_resolve(s, &f, &err);
    UNIT_CHECK(rc == (cases[i].addr >= 0 ? 0 : -1));
    if (cases[i].addr >= 0) UNIT_CHECK(f.addr == cases[i].addr);
    UNIT_CHECK_STREQ(cases[i].error ? strbuf_cstr(&err) : NULL, cases[i].error);
    strbuf_free(&err);
  }
  f.kind = RT_FAULT_NONE; /* nothing to check */
  f.rank = 99;
  UNIT_CHECK(rt_fault_resolve(s, &f, NULL) == 0);
  be_stream_free(s);
}

/* rt_parse_bytes: bytes and binary units. */
void test_runtime_parse_bytes(void) {
  double b = 0;
  UNIT_CHECK(rt_parse_bytes("4096", &b) == 0 && b == 4096);
  UNIT_CHECK(rt_parse_bytes("512B", &b) == 0 && b == 512);
  UNIT_CHECK(rt_parse_bytes("2K", &b) == 0 && b == 2048);
  UNIT_CHECK(rt_parse_bytes("1.5MiB", &b) == 0 && b == 1.5 * 1048576);
  UNIT_CHECK(rt_parse_bytes("16GB", &b) == 0 && b == 16.0 * 1073741824);
  UNIT_CHECK(rt_parse_bytes("2TiB", &b) == 0 && b == 2.0 * 1099511627776.0);
  static const char *const bad[] = {"", "0", "-1G", "12X", "1Gi", "G", "nan", "inf", "0.5"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) UNIT_CHECK(rt_parse_bytes(bad[i], &b) != 0);
}

/* rt_rank_memory counts what a rank holds: with its stages initialized, the parameters,
 * gradients, Adam moments and workspace are rt_model_bytes (the tracker's count); the
 * saved-state peak follows the program (two microbatches between F and W at once; this program
 * names no WSTASH buffers, so the model keeps the blocks itself); rt_mem_check compares the sum with a
 * limit and names the largest rank; a layer whose size products could overflow is refused. */
void test_runtime_memory(void) {
  be_stream *s = rm_stream5(4, 1, 1, 8, "adam", 16, 16);
  /* Rank 0 (stage 0): F mb0, F mb1, BW mb0, F mb2, BW mb1, BW mb2: at most 2 in flight. */
  static const be_opcode ops[] = {BE_OP_FWD, BE_OP_FWD, BE_OP_BWD, BE_OP_FWD, BE_OP_BWD, BE_OP_BWD};
  s->ranks[0].code = xcalloc(6, sizeof *s->ranks[0].code);
  s->ranks[0].ncode = 6;
  for (int i = 0; i < 6; i++) s->ranks[0].code[i].op = (uint8_t)ops[i];
  rt_model *m = rm_model(s, 1, 1, 0.1, false);
  rt_mem_need need;
  rt_rank_memory(m, s, 0, false, &need);
  rt_model_init_stage(m, 0);
  UNIT_CHECK(need.params > 0 && need.grads == need.params && need.optim == 2 * need.params);
  UNIT_CHECK(need.buffers == 0); /* no slots */
  UNIT_CHECK_EQ_DBL(need.params + need.grads + need.optim + need.workspace, (double)rt_model_bytes(m));
  /* Run the program's F and BW on stage 0: the blocks it allocated are the predicted peak. */
  size_t nin = rt_tensor_floats(m, BE_T_INPUT, 0), nout = rt_tensor_floats(m, BE_T_ACT, 0);
  float *in = xcalloc(nin, sizeof *in), *out = xcalloc(nout, sizeof *out);
  float *g = xcalloc(nout, sizeof *g);
  int order[][2] = {{0, 0}, {0, 1}, {1, 0}, {0, 2}, {1, 1}, {1, 2}};
  for (int i = 0; i < 6; i++) {
    if (order[i][0] == 0) {
      rt_load(m, 0, 0, order[i][1], in);
      rt_forward(m, 0, order[i][1], in, out);
    } else {
      rt_backward_input(m, 0, order[i][1], g, NULL);
      rt_backward_weight(m, 0, order[i][1]);
    }
  }
  UNIT_CHECK(need.state > 0);
  UNIT_CHECK_EQ_DBL(need.params + need.grads + need.optim + need.workspace + need.state,
                    (double)rt_model_bytes(m));
  free(in);
  free(out);
  free(g);
  rt_mem_need with_ref;
  rt_rank_memory(m, s, 0, true, &with_ref);
  UNIT_CHECK(with_ref.reference > need.params * 4 && with_ref.total > need.total);
  rt_run_opts o = {.steps = 1, .timeout = 60, .fault = {RT_FAULT_NONE, 0, 0, -1, -1},
                   .backend = "cpu", .mem_limit = 1e12};
  strbuf err = {0};
  UNIT_CHECK(rt_mem_check(s, m, &o, NULL, 3, &err) == 0 && err.len == 0);
  o.mem_limit = need.total; /* rank 0 alone fits exactly; all three do not */
  int only0 = 0;
  UNIT_CHECK(rt_mem_check(s, m, &o, &only0, 1, &err) == 0);
  UNIT_CHECK(rt_mem_check(s, m, &o, NULL, 3, &err) == -1);
  UNIT_CHECK(strstr(strbuf_cstr(&err), "the 3 ranks on this machine need ") != NULL);
  UNIT_CHECK(strstr(strbuf_cstr(&err), "more than the --mem-limit of ") != NULL);
  UNIT_CHECK(strstr(strbuf_cstr(&err), "; the largest, rank ") != NULL);
  strbuf_free(&err);
  rt_model_free(m);
  be_stream_free(s);
  /* A vocabulary of 2^20: 2^60 for a size product, refused before any size is computed. */
  s = rm_stream5(2, 1, 1, 8, "sgd", 16, 1 << 20);
  rm_check_fails(s, (rt_opts){1, 1, 0.1, NULL, NULL, false},
                 "layer l0 (embedding): too large for the runtime: 1 sequence x its largest "
                 "dimension 1048576 cubed is 1.15e+18, above 2^57");
  be_stream_free(s);
}

/* ---- In-run timings (octo-run --calibrate) --------------------------------------------------- */

/* rt_model_time records only while on, per layer of the stages that ran; rt_model_timed_costs
 * gives those layers medians and the profiler's bytes and leaves the others alone;
 * rt_calibration_json averages replicas' layers, sums the ranks' optimizer figures into one
 * rate, writes no link, and names a layer no rank timed. */
void test_runtime_calibration(void) {
  be_stream *s = rm_stream5(2, 1, 1, 8, "adam", 16, 16);
  rt_model *m = rm_model(s, 1, 1, 0.1, true);
  size_t nin = rt_tensor_floats(m, BE_T_INPUT, 0), nout = rt_tensor_floats(m, BE_T_ACT, 0);
  float *in = xcalloc(nin, sizeof *in), *out = xcalloc(nout, sizeof *out);
  float *g = xcalloc(nout, sizeof *g);
  rt_layer_cost costs[5] = {{0}};
  for (int on = 0; on < 2; on++) { /* not recorded, then recorded */
    rt_model_time(m, on);
    for (int mb = 0; mb < 2; mb++) {
      rt_load(m, 0, 0, mb, in);
      rt_forward(m, 0, mb, in, out);
      rt_backward_input(m, 0, mb, g, NULL);
      rt_backward_weight(m, 0, mb);
    }
    if (!on) {
      rt_model_timed_costs(m, costs);
      for (int i = 0; i < 5; i++) UNIT_CHECK(!costs[i].measured);
    }
  }
  rt_model_timed_costs(m, costs);
  for (int i = 0; i < 5; i++) UNIT_CHECK(costs[i].measured == (i < 2)); /* stage 0: l0, l1 */
  rt_layer_cost bytes = {0};
  rt_model_layer_bytes(m, 1, &bytes);
  UNIT_CHECK(costs[1].f > 0 && costs[1].b > 0 && costs[1].w > 0);
  UNIT_CHECK(costs[1].act_bytes == bytes.act_bytes && costs[1].act_bytes > 0);
  UNIT_CHECK(costs[1].param_bytes == bytes.param_bytes && costs[1].param_bytes > 0);
  free(in);
  free(out);
  free(g);
  rt_model_free(m);

  /* Three ranks' figures: stage 0's (just timed), l2..l4 by hand, and a replica's l4. */
  rt_rank_stats st[3];
  memset(st, 0, sizeof st);
  for (int k = 0; k < 3; k++) st[k].timed = xcalloc(5, sizeof *st[k].timed);
  memcpy(st[0].timed, costs, sizeof costs);
  for (int i = 2; i < 5; i++) st[1].timed[i] = (rt_layer_cost){0.002, 0.001, 0.0005, 64, 32, 128, 32, true};
  st[2].timed[4] = (rt_layer_cost){0.004, 0.003, 0.0015, 64, 32, 128, 32, true};
  st[0].optim_s = 0.01, st[0].optim_bytes = 1e6;
  st[1].optim_s = 0.03, st[1].optim_bytes = 3e6;
  strbuf json = {0}, err = {0};
  UNIT_CHECK(rt_calibration_json(s, st, 3, 4, "mpi", &json, &err) == 0);
  const char *j = strbuf_cstr(&json);
  UNIT_CHECK(strstr(j, "\"scale\": 4,\n  \"backend\": \"mpi\",\n  \"optimizer_gbs\": 0.2,\n") != NULL);
  UNIT_CHECK(strstr(j, "\"link\"") == NULL);
  UNIT_CHECK(strstr(j, "\"l2\": {\"f_ms\": 2, \"b_ms\": 1, \"w_ms\": 0.5, \"act_bytes\": 64") != NULL);
  UNIT_CHECK(strstr(j, "\"l4\": {\"f_ms\": 3, \"b_ms\": 2, \"w_ms\": 1, \"act_bytes\": 64") != NULL);
  /* Without the rank of l2..l4: l2 is named. */
  strbuf_free(&json);
  st[1].timed[2].measured = false;
  UNIT_CHECK(rt_calibration_json(s, st, 3, 4, "mpi", &json, &err) == -1);
  UNIT_CHECK(strstr(strbuf_cstr(&err), "no rank timed layer 'l2'") != NULL);
  for (int k = 0; k < 3; k++) free(st[k].timed);
  strbuf_free(&json);
  strbuf_free(&err);
  be_stream_free(s);
}

/* The runtime's kernel table mirrors the IR's layer kinds (the runtime may not depend on ir/; the
 * stream library includes the IR's tables): every kind has its kernels at its own index, and a
 * recomputing stage recomputes exactly the kinds the cost model charges again
 * (ir_kind_recomputable), so the run keeps what the plan sizes. */
void test_runtime_kernel_table(void) {
  UNIT_CHECK((int)BE_KIND_COUNT == (int)IR_KIND_COUNT && (int)BE_LP_COUNT == (int)IR_LP_COUNT);
  for (int k = 0; k < IR_KIND_COUNT; k++) {
    const rt_kernel *rk = rt_kernel_find(ir_kinds[k].name);
    UNIT_CHECK(rk != NULL && rk == rt_kernels[k] && (int)rk->id == k);
    if (rk) UNIT_CHECK(rt_kernel_recomputable(rk) == ir_kind_recomputable((ir_layer_kind)k));
    if (rk) UNIT_CHECK(strcmp(rt_kernel_name(rk), ir_kinds[k].name) == 0);
  }
  for (int p = 0; p < IR_LP_COUNT; p++) {
    const ir_param_info *ip = &ir_layer_params[p];
    UNIT_CHECK((int)be_lparams[p].kind == (int)ip->kind && strcmp(be_lparams[p].name, ip->name) == 0);
    UNIT_CHECK(be_lparams[p].act == (ip->type == IR_T_ACT));
    UNIT_CHECK(isnan(ip->def) ? isnan(be_lparams[p].def) : be_lparams[p].def == ip->def);
  }
  for (int a = 0; a < RT_ACT_COUNT; a++)
    UNIT_CHECK(strcmp(rt_act_name((rt_act)a), ir_enum_name(IR_T_ACT, a)) == 0);
  UNIT_CHECK(ir_enum_name(IR_T_ACT, RT_ACT_COUNT) == NULL);
}
