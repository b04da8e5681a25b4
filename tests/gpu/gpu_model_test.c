/* gpu_model_test.c -- octo_gpu_tests: the stand-in model on a GPU (gpu.h) against the CPU model
 * (runtime.h) on streams built by hand: the same tokens, stage outputs, loss, loss gradient,
 * input gradients and weight gradients (float32, within 1e-4 relative) over two optimizer steps
 * with Adam and with SGD, with every microbatch's saved state in flight at once and W split from
 * B; a bf16 model in the same ballpark; the error paths; and rg_profile's timings and JSON.
 * Prints "no GPU: skipped" and exits 0 when no CUDA device is visible. Exit status 1 when a
 * check failed. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu.h"
#include "../unit/stream_fixture.h"

static int failures; /* failed checks */

/* Record a failed check with a printf-style explanation. */
#define CHECK(cond, ...)                                                                         \
  do {                                                                                           \
    if (!(cond)) {                                                                               \
      failures++;                                                                                \
      printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                                     \
      printf(__VA_ARGS__);                                                                       \
      printf("\n");                                                                              \
    }                                                                                            \
  } while (0)

/* Streams are built by hand with tests/unit/stream_fixture.h. */


/* ---- Comparison ----------------------------------------------------------------------------- */

/* max|a - b| / max|b| over n floats (max|a - b| when b is zero); NaN anywhere gives infinity. */
static double rel_diff(const float *a, const float *b, size_t n) {
  double md = 0, mb = 0;
  for (size_t k = 0; k < n; k++) {
    double d = fabs((double)a[k] - b[k]), v = fabs((double)b[k]);
    if (!(d == d)) return INFINITY;
    if (d > md) md = d;
    if (v > mb) mb = v;
  }
  return mb > 0 ? md / mb : md;
}

/* Largest rel_diff over the parameter tensors of stage st (layout of runtime.h's rt_si_dims:
 * per layer W or E, then b for dense layers) between GPU gradients a and CPU gradients b. */
static double grad_diff(const be_stream *s, rt_si_dims d, int st, const float *a,
                        const float *b) {
  size_t off = 0;
  double worst = 0;
  for (int i = s->stages[st].first; i < s->stages[st].end; i++) {
    bool emb = i == 0, head = d.head && i == s->nlayers - 1;
    size_t wn = emb ? (size_t)d.V * d.h : (size_t)d.h * (head ? d.V : d.h);
    size_t bn = emb || head ? 0 : (size_t)d.h;
    double x = rel_diff(a + off, b + off, wn);
    if (x > worst || x != x) worst = x;
    off += wn;
    if (bn) {
      x = rel_diff(a + off, b + off, bn);
      if (x > worst || x != x) worst = x;
      off += bn;
    }
  }
  return worst;
}

/* Copy n device floats to host memory h (after the stream's work). */
static void to_host(cudaStream_t cs, float *h, const float *dev, size_t n) {
  cudaStreamSynchronize(cs);
  cudaMemcpy(h, dev, n * sizeof *h, cudaMemcpyDeviceToHost);
}

/* Worst differences seen in a run. */
typedef struct worst {
  double act, gout, dx, loss, grad;
} worst;

static void keep(double *w, double x) {
  if (x > *w || x != x) *w = x;
}

/* ---- Equivalence ---------------------------------------------------------------------------- */

/* A device array of n floats (at least one); NULL counts as a failure. */
static float *dev_floats(size_t n) {
  void *p = NULL;
  cudaError_t e = cudaMalloc(&p, (n ? n : 1) * sizeof(float));
  CHECK(e == cudaSuccess, "cudaMalloc: %s", cudaGetErrorString(e));
  return e == cudaSuccess ? (float *)p : NULL;
}

/* Run 'steps' steps of stream s on the GPU model (float32, or bf16) and on the CPU model with
 * the same inputs, in the same order: per replica, F of every microbatch through every stage
 * and its loss, then B of every microbatch in reverse order through every stage, then W of
 * every (stage, microbatch); then the optimizer step. Per step, wst[step] gets the worst
 * differences (stage outputs, loss gradients, input gradients, loss, weight gradients). Tokens
 * must be equal. Returns false when something could not be set up. */
static bool run_pair(const be_stream *s, bool bf16, double lr, int steps, worst *wst) {
  rt_opts o = {1, 42, lr, NULL, NULL, false};
  strbuf err = {0};
  rt_si_model *cpu = rt_si_new(s, &o, &err);
  rg_model *gpu = cpu ? rg_model_new(s, &o, 0, bf16, &err) : NULL;
  CHECK(cpu && gpu, "model: %s", strbuf_cstr(&err));
  strbuf_free(&err);
  if (!cpu || !gpu) {
    rt_si_free(cpu);
    return false;
  }
  int S = s->nstages, M = s->nmb, R = s->replicas;
  rt_si_dims d = rt_si_get_dims(cpu);
  for (int st = 0; st < S; st++) {
    rt_si_init_stage(cpu, st);
    rg_model_init_stage(gpu, st);
    CHECK(rg_tensor_floats(gpu, BE_T_ACT, st) == rt_si_tensor_floats(cpu, BE_T_ACT, st), "act %d", st);
  }
  size_t T = rt_si_tensor_floats(cpu, BE_T_INPUT, 0), big = T * (size_t)(d.h > d.V ? d.h : d.V);
  cudaStream_t cs;
  cudaStreamCreate(&cs);
  /* Host: CPU tensors, and GPU results copied back. */
  float *tok = xmalloc(T * sizeof *tok), *tok_g = xmalloc(T * sizeof *tok_g);
  float *act = xmalloc((size_t)S * big * sizeof *act), *h = xmalloc(big * sizeof *h);
  float *gout = xmalloc((size_t)M * big * sizeof *gout);
  float *dx = xmalloc((size_t)(S + 1) * big * sizeof *dx);
  /* Device: tokens, stage outputs, loss gradients per microbatch, input gradients, loss. */
  float *d_tok = dev_floats(T), *d_act = dev_floats((size_t)S * big);
  float *d_gout = dev_floats((size_t)M * big), *d_dx = dev_floats((size_t)(S + 1) * big);
  float *d_loss = dev_floats(1);
  bool ok = d_tok && d_act && d_gout && d_dx && d_loss;
  for (int step = 0; ok && step < steps; step++) {
    worst *w = &wst[step];
    memset(w, 0, sizeof *w);
    double loss = 0;
    cudaMemsetAsync(d_loss, 0, sizeof(float), cs);
    for (int r = 0; r < R; r++) {
      for (int mb = 0; mb < M; mb++) {
        rt_si_load(cpu, step, r, mb, tok);
        rg_load(gpu, cs, step, r, mb, d_tok);
        to_host(cs, tok_g, d_tok, T);
        CHECK(memcmp(tok, tok_g, T * sizeof *tok) == 0, "tokens of step %d replica %d mb %d",
              step, r, mb);
        for (int st = 0; st < S; st++) {
          size_t n = rt_si_tensor_floats(cpu, BE_T_ACT, st);
          rt_si_forward(cpu, st, mb, st ? act + (size_t)(st - 1) * big : tok, act + (size_t)st * big);
          rg_forward(gpu, cs, st, mb, st ? d_act + (size_t)(st - 1) * big : d_tok,
                     d_act + (size_t)st * big);
          to_host(cs, h, d_act + (size_t)st * big, n);
          keep(&w->act, rel_diff(h, act + (size_t)st * big, n));
        }
        size_t nl = rt_si_tensor_floats(cpu, BE_T_GRAD, S);
        loss += rt_si_loss(cpu, step, r, mb, act + (size_t)(S - 1) * big, gout + (size_t)mb * big);
        rg_loss(gpu, cs, step, r, mb, d_act + (size_t)(S - 1) * big, d_gout + (size_t)mb * big,
                d_loss);
        to_host(cs, h, d_gout + (size_t)mb * big, nl);
        keep(&w->gout, rel_diff(h, gout + (size_t)mb * big, nl));
      }
      /* B of every microbatch, last first, every stage; dx slot st holds grad st. */
      for (int mb = M - 1; mb >= 0; mb--)
        for (int st = S - 1; st >= 0; st--) {
          const float *gin = st == S - 1 ? gout + (size_t)mb * big : dx + (size_t)(st + 1) * big;
          const float *dgin = st == S - 1 ? d_gout + (size_t)mb * big : d_dx + (size_t)(st + 1) * big;
          rt_si_backward_input(cpu, st, mb, gin, st ? dx + (size_t)st * big : NULL);
          rg_backward_input(gpu, cs, st, mb, dgin, st ? d_dx + (size_t)st * big : NULL);
          if (st) {
            size_t n = rt_si_tensor_floats(cpu, BE_T_GRAD, st);
            to_host(cs, h, d_dx + (size_t)st * big, n);
            keep(&w->dx, rel_diff(h, dx + (size_t)st * big, n));
          }
        }
      /* Then W, first microbatch first. */
      for (int mb = 0; mb < M; mb++)
        for (int st = 0; st < S; st++) {
          rt_si_backward_weight(cpu, st, mb);
          rg_backward_weight(gpu, cs, st, mb);
        }
    }
    float lg = 0;
    to_host(cs, &lg, d_loss, 1);
    keep(&w->loss, fabs(lg - loss) / fabs(loss));
    for (int st = 0; st < S; st++) {
      size_t n = 0, ng = 0;
      float *gc = rt_si_stage_grads(cpu, st, &n);
      CHECK(rg_stage_grads(gpu, st, &ng) != NULL && ng == n, "stage %d: %zu gradients, CPU %zu",
            st, ng, n);
      float *gg = xmalloc((n ? n : 1) * sizeof *gg);
      CHECK(rg_stage_grads_to_host(gpu, st, gg, n + 1) == -1, "wrong count accepted");
      CHECK(rg_stage_grads_to_host(gpu, st, gg, n) == 0, "stage %d: %s", st,
            rg_model_error(gpu) ? rg_model_error(gpu) : "-1");
      keep(&w->grad, grad_diff(s, d, st, gg, gc));
      free(gg);
      rt_si_step(cpu, st);
      rg_step(gpu, cs, st);
    }
    cudaStreamSynchronize(cs);
  }
  CHECK(rg_model_error(gpu) == NULL, "%s", rg_model_error(gpu));
  free(tok);
  free(tok_g);
  free(act);
  free(h);
  free(gout);
  free(dx);
  cudaFree(d_tok);
  cudaFree(d_act);
  cudaFree(d_gout);
  cudaFree(d_dx);
  cudaFree(d_loss);
  cudaStreamDestroy(cs);
  rg_model_free(gpu);
  rt_si_free(cpu);
  return ok;
}

/* Check the worst differences of a run against tolerances (loss, everything else). */
static void expect(const char *what, int step, const worst *w, double tol_loss, double tol) {
  printf("%s step %d: act %.2e, loss grad %.2e, dx %.2e, loss %.2e, weight grads %.2e\n", what,
         step, w->act, w->gout, w->dx, w->loss, w->grad);
  CHECK(w->loss <= tol_loss, "%s step %d: loss differs by %g", what, step, w->loss);
  CHECK(w->act <= tol, "%s step %d: stage outputs differ by %g", what, step, w->act);
  CHECK(w->gout <= tol, "%s step %d: loss gradients differ by %g", what, step, w->gout);
  CHECK(w->dx <= tol, "%s step %d: input gradients differ by %g", what, step, w->dx);
  CHECK(w->grad <= tol, "%s step %d: weight gradients differ by %g", what, step, w->grad);
}

static const char *const kinds5[] = {"embedding", "attention", "mlp", "moe", "lm_head", NULL};

/* The usual stream: 5 layers (embedding, 3 dense, lm_head) in 3 stages [0,2) [2,4) [4,5), 3
 * microbatches, 2 replicas; odd sizes (h 40, V 77, T 2 x 13). */
static be_stream *stream5(const char *opt) {
  static const int cuts[] = {2, 4};
  be_stream *s = fx_stream("gpu-test", kinds5, 3, cuts, 3, 2, 2, 13, opt);
  fx_param(s, 1, "hidden", 40);
  fx_param(s, 4, "vocab", 77);
  return s;
}

static void test_equivalence(void) {
  worst w[2];
  /* Adam: step 1 compares everything before any update. At step 2, an Adam update normalizes
   * each gradient (about lr x sign(g)), so a weight whose gradient is within rounding of zero
   * may move either way: step 2's tensors only get a loose bound, its loss (insensitive to
   * those weights to first order) the tight one. */
  be_stream *s = stream5("adam");
  if (run_pair(s, false, 1e-2, 2, w)) {
    expect("float32 adam", 1, &w[0], 1e-4, 1e-4);
    expect("float32 adam", 2, &w[1], 1e-4, 5e-2);
  }
  be_stream_free(s);
  /* SGD: both steps tight. */
  s = stream5("sgd");
  if (run_pair(s, false, 0.1, 2, w)) {
    expect("float32 sgd", 1, &w[0], 1e-4, 1e-4);
    expect("float32 sgd", 2, &w[1], 1e-4, 1e-4);
  }
  be_stream_free(s);
  /* No lm_head: the output is T x h and the targets are taken mod h; the first stage is only
   * the embedding; 4 microbatches, 1 replica. */
  static const char *const kinds[] = {"embedding", "mlp", "mamba2", "custom", NULL};
  static const int cuts[] = {1};
  s = fx_stream("gpu-test", kinds, 2, cuts, 4, 1, 1, 9, "sgd");
  fx_param(s, 1, "hidden", 24);
  if (run_pair(s, false, 0.1, 2, w)) {
    expect("float32 no head", 1, &w[0], 1e-4, 1e-4);
    expect("float32 no head", 2, &w[1], 1e-4, 1e-4);
  }
  be_stream_free(s);
  /* bf16 GEMM inputs: the same computation within bf16 rounding. */
  s = stream5("adam");
  if (run_pair(s, true, 1e-2, 1, w)) expect("bf16 adam", 1, &w[0], 2e-2, 1e-1);
  be_stream_free(s);
}

/* ---- Errors --------------------------------------------------------------------------------- */

static void test_errors(int ndev) {
  be_stream *s = stream5("sgd");
  rt_opts o = {1, 1, 0.1, NULL, NULL, false};
  strbuf err = {0};
  rg_model *m = rg_model_new(s, &o, ndev, false, &err);
  CHECK(m == NULL && err.len > 0, "device %d accepted", ndev);
  printf("device %d: %s\n", ndev, strbuf_cstr(&err));
  rg_model_free(m);
  strbuf_free(&err);
  o.scale = 0;
  m = rg_model_new(s, &o, 0, false, &err);
  CHECK(m == NULL && strstr(strbuf_cstr(&err), "scale") != NULL, "scale 0: %s", strbuf_cstr(&err));
  rg_model_free(m);
  strbuf_free(&err);
  rg_layer_profile *p = NULL;
  CHECK(rg_profile(s, ndev, 1, 1, &p, &err) == -1 && err.len > 0, "profile on device %d", ndev);
  free(p);
  strbuf_free(&err);
  /* A stream without any hidden size cannot be profiled. */
  static const char *const kinds[] = {"embedding", "mlp", NULL};
  static const int cuts[] = {1};
  be_stream *s2 = fx_stream("gpu-test", kinds, 2, cuts, 1, 1, 1, 8, "sgd");
  CHECK(rg_profile(s2, 0, 1, 1, &p, &err) == -1 && strstr(strbuf_cstr(&err), "hidden"),
        "no hidden: %s", strbuf_cstr(&err));
  free(p);
  strbuf_free(&err);
  be_stream_free(s2);
  be_stream_free(s);
}

/* ---- Profiling ------------------------------------------------------------------------------ */

static void test_profile(void) {
  static const char *const kinds[] = {"embedding", "attention", "mlp", "attention", "mamba2",
                                      "moe", "custom", "lm_head", NULL};
  static const int cuts[] = {4};
  be_stream *s = fx_stream("gpu-test", kinds, 2, cuts, 4, 1, 1, 1024, "adam");
  fx_param(s, 0, "hidden", 1024);
  fx_param(s, 0, "vocab", 32000);
  fx_param(s, 1, "hidden", 1024);
  fx_param(s, 1, "heads", 16);
  fx_param(s, 1, "kv_heads", 4);
  fx_param(s, 1, "head_dim", 64);
  fx_param(s, 2, "hidden", 1024);
  fx_param(s, 2, "ffn", 4096);
  fx_param(s, 2, "gated", 1);
  fx_param(s, 4, "expand", 2);
  fx_param(s, 5, "experts", 8);
  fx_param(s, 5, "top_k", 2);
  fx_param(s, 5, "expert_ffn", 1024);
  strbuf err = {0}, json = {0};
  rg_layer_profile *p = NULL;
  int n = rg_profile(s, 0, 2, 5, &p, &err);
  CHECK(n == 6, "rg_profile: %d entries (%s)", n, strbuf_cstr(&err));
  static const char *const want[] = {"embedding", "attention", "mlp", "mamba2", "moe", "lm_head"};
  static const int layer[] = {0, 1, 2, 4, 5, 7};
  for (int i = 0; i < n && i < 6; i++) {
    printf("profile %-10s layer %d: F %.4f ms, B %.4f ms, W %.4f ms, peak %.1f MiB\n", p[i].kind,
           p[i].layer, p[i].f * 1e3, p[i].b * 1e3, p[i].w * 1e3, p[i].peak_bytes / 1048576.0);
    CHECK(strcmp(p[i].kind, want[i]) == 0 && p[i].layer == layer[i], "entry %d: %s layer %d", i,
          p[i].kind, p[i].layer);
    bool emb = strcmp(p[i].kind, "embedding") == 0;
    CHECK(p[i].f > 0 && p[i].f < 1 && p[i].w > 0 && p[i].w < 1, "%s: F %g W %g", p[i].kind,
          p[i].f, p[i].w);
    CHECK(emb ? p[i].b == 0 : p[i].b > 0 && p[i].b < 1, "%s: B %g", p[i].kind, p[i].b);
    CHECK(p[i].peak_bytes > 0, "%s: peak %g", p[i].kind, p[i].peak_bytes);
  }
  /* Timings follow the work: F of the MLP (three 1024 x 1024 x 4096 GEMMs, 25.8 GFLOP) takes
   * longer than F of the Mamba-2 stand-in (12.9 GFLOP). */
  if (n == 6) CHECK(p[2].f > p[3].f, "mlp F %g vs mamba2 F %g", p[2].f, p[3].f);
  CHECK(n < 0 || rg_profile_json(s, p, n, "h200", &json) == 0, "rg_profile_json failed");
  CHECK(strstr(strbuf_cstr(&json), "\"format\": \"octopipe-profile\"") &&
            strstr(strbuf_cstr(&json), "\"attention\": {\"f_ms\": "),
        "json:\n%s", strbuf_cstr(&json));
  printf("%s", strbuf_cstr(&json));
  free(p);
  strbuf_free(&err);
  strbuf_free(&json);
  be_stream_free(s);
}

int main(void) {
  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess || ndev == 0) {
    printf("no GPU: skipped (%s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return 0;
  }
  struct cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) printf("GPU 0: %s\n", prop.name);
  test_equivalence();
  test_errors(ndev);
  test_profile();
  printf("%s (%d failed check%s)\n", failures ? "FAILED" : "PASSED", failures,
         failures == 1 ? "" : "s");
  return failures ? 1 : 0;
}
