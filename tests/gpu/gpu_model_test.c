/* gpu_model_test.c -- octo_gpu_tests: the model (runtime.h, real layers) on a GPU (its tensors
 * on an rg_dev, gpu.h) against the same model on the CPU, on streams built by hand: the same
 * inputs, stage outputs, loss, loss gradient, input gradients and weight gradients (float32,
 * within 1e-4 relative) over two optimizer steps with Adam and with SGD, with every microbatch's
 * saved state in flight at once and W split from B; bf16 GEMM inputs in the same ballpark; and
 * the error path of a missing device. Prints "no GPU: skipped" and exits 0 when no
 * CUDA device is visible; `octo_gpu_tests --cpu` runs the comparison with both models on the
 * CPU (a self-test of the harness, for machines without a GPU). Exit status 1 when a check
 * failed. */
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

/* Worst differences seen in a run. */
typedef struct worst {
  double act, gout, dx, loss, grad;
} worst;

static void keep(double *w, double x) {
  if (x > *w || x != x) *w = x;
}

/* ---- Equivalence ---------------------------------------------------------------------------- */

/* The device of the second model: GPU 0, or NULL (--cpu: both models on the CPU, a self-test
 * of this harness where no GPU is visible). */
static bool on_gpu;

/* Run 'steps' steps of stream s on a model on GPU 0 (float32, or bf16 GEMM inputs) and on a CPU
 * model with the same inputs, in the same order: per replica, F of every microbatch through
 * every stage and its loss, then B of every microbatch in reverse order through every stage,
 * then W of every (stage, microbatch); then the optimizer step. Per step, wst[step] gets the
 * worst differences (stage outputs, loss gradients, input gradients, loss, weight gradients).
 * Inputs must be equal. Returns false when something could not be set up. */
static bool run_pair(const be_stream *s, bool bf16, double lr, int steps, worst *wst) {
  rt_opts o = {1, 42, lr, NULL, NULL, false};
  strbuf err = {0};
  rt_model *cpu = rt_model_new(s, &o, &err);
  rg_dev *dev = cpu && on_gpu ? rg_dev_new(0, NULL, bf16, &err) : NULL;
  const rt_dev *dv = dev ? rg_dev_kernels(dev) : NULL;
  rt_model *gpu = cpu && (dev || !on_gpu) ? rt_model_new(s, &o, &err) : NULL;
  CHECK(cpu && gpu, "model: %s", strbuf_cstr(&err));
  strbuf_free(&err);
  if (!cpu || !gpu) {
    rt_model_free(cpu);
    rt_model_free(gpu);
    rg_dev_free(dev);
    return false;
  }
  int S = s->nstages, M = s->nmb, R = s->replicas;
  size_t T = rt_tensor_floats(cpu, BE_T_INPUT, 0), big = T;
  for (int st = 0; st < S; st++) {
    rt_model_init_stage(cpu, st);
    rt_dev_bind(dv);
    rt_model_init_stage(gpu, st);
    rt_dev_bind(NULL);
    CHECK(rt_tensor_floats(gpu, BE_T_ACT, st) == rt_tensor_floats(cpu, BE_T_ACT, st), "act %d", st);
    if (rt_tensor_floats(cpu, BE_T_ACT, st) > big) big = rt_tensor_floats(cpu, BE_T_ACT, st);
  }
  /* Host: CPU tensors, and the device's results copied back. */
  float *in = xmalloc(T * sizeof *in), *in_g = xmalloc(T * sizeof *in_g);
  float *act = xmalloc((size_t)S * big * sizeof *act), *h = xmalloc(big * sizeof *h);
  float *gout = xmalloc((size_t)M * big * sizeof *gout);
  float *dx = xmalloc((size_t)(S + 1) * big * sizeof *dx);
  /* Device: inputs, stage outputs, loss gradients per microbatch, input gradients. */
  rt_dev_bind(dv);
  float *d_in = rt_dev_malloc(T * sizeof(float)), *d_act = rt_dev_malloc((size_t)S * big * 4);
  float *d_gout = rt_dev_malloc((size_t)M * big * 4), *d_dx = rt_dev_malloc((size_t)(S + 1) * big * 4);
  rt_dev_bind(NULL);
  bool ok = d_in && d_act && d_gout && d_dx;
  for (int step = 0; ok && step < steps; step++) {
    worst *w = &wst[step];
    memset(w, 0, sizeof *w);
    double loss = 0, loss_g = 0;
    for (int r = 0; r < R; r++) {
      rt_model_set_step(cpu, step, r);
      rt_model_set_step(gpu, step, r);
      for (int mb = 0; mb < M; mb++) {
        rt_load(cpu, step, r, mb, in);
        rt_dev_bind(dv);
        rt_load(gpu, step, r, mb, d_in);
        rt_to_host(in_g, d_in, T * sizeof *in_g);
        rt_dev_bind(NULL);
        CHECK(memcmp(in, in_g, T * sizeof *in) == 0, "inputs of step %d replica %d mb %d",
              step, r, mb);
        for (int st = 0; st < S; st++) {
          size_t n = rt_tensor_floats(cpu, BE_T_ACT, st);
          rt_forward(cpu, st, mb, st ? act + (size_t)(st - 1) * big : in, act + (size_t)st * big);
          rt_dev_bind(dv);
          rt_forward(gpu, st, mb, st ? d_act + (size_t)(st - 1) * big : d_in,
                     d_act + (size_t)st * big);
          rt_to_host(h, d_act + (size_t)st * big, n * sizeof *h);
          rt_dev_bind(NULL);
          keep(&w->act, rel_diff(h, act + (size_t)st * big, n));
        }
        size_t nl = rt_tensor_floats(cpu, BE_T_GRAD, S);
        loss += rt_loss(cpu, step, r, mb, act + (size_t)(S - 1) * big, gout + (size_t)mb * big);
        rt_dev_bind(dv);
        loss_g += rt_loss(gpu, step, r, mb, d_act + (size_t)(S - 1) * big,
                          d_gout + (size_t)mb * big);
        rt_to_host(h, d_gout + (size_t)mb * big, nl * sizeof *h);
        rt_dev_bind(NULL);
        keep(&w->gout, rel_diff(h, gout + (size_t)mb * big, nl));
      }
      /* B of every microbatch, last first, every stage; dx slot st holds grad st. */
      for (int mb = M - 1; mb >= 0; mb--)
        for (int st = S - 1; st >= 0; st--) {
          const float *gin = st == S - 1 ? gout + (size_t)mb * big : dx + (size_t)(st + 1) * big;
          const float *dgin = st == S - 1 ? d_gout + (size_t)mb * big : d_dx + (size_t)(st + 1) * big;
          rt_backward_input(cpu, st, mb, gin, st ? dx + (size_t)st * big : NULL);
          rt_dev_bind(dv);
          rt_backward_input(gpu, st, mb, dgin, st ? d_dx + (size_t)st * big : NULL);
          size_t n = st ? rt_tensor_floats(cpu, BE_T_GRAD, st) : 0;
          rt_to_host(h, d_dx + (size_t)st * big, n * sizeof *h);
          rt_dev_bind(NULL);
          if (st) keep(&w->dx, rel_diff(h, dx + (size_t)st * big, n));
        }
      /* Then W, first microbatch first. */
      for (int mb = 0; mb < M; mb++)
        for (int st = 0; st < S; st++) {
          rt_backward_weight(cpu, st, mb);
          rt_dev_bind(dv);
          rt_backward_weight(gpu, st, mb);
          rt_dev_bind(NULL);
        }
    }
    keep(&w->loss, fabs(loss_g - loss) / fabs(loss));
    for (int st = 0; st < S; st++) {
      size_t n = 0, ng = 0;
      rt_stage_grads(cpu, st, &n);
      const float *dg = rt_stage_grads(gpu, st, &ng);
      CHECK(dg != NULL && ng == n, "stage %d: %zu gradients, CPU %zu", st, ng, n);
      float *gg = xmalloc((n ? n : 1) * sizeof *gg);
      rt_dev_bind(dv);
      rt_to_host(gg, dg, n * sizeof *gg);
      rt_dev_bind(NULL);
      keep(&w->grad, rt_grad_diff_host(gg, n, cpu, st));
      free(gg);
      rt_step(cpu, st);
      rt_dev_bind(dv);
      rt_step(gpu, st);
      rt_dev_bind(NULL);
    }
  }
  CHECK(!dev || rg_dev_error(dev) == NULL, "%s", rg_dev_error(dev));
  free(in);
  free(in_g);
  free(act);
  free(h);
  free(gout);
  free(dx);
  rt_dev_bind(dv);
  rt_dev_mfree(d_in);
  rt_dev_mfree(d_act);
  rt_dev_mfree(d_gout);
  rt_dev_mfree(d_dx);
  rt_model_free(gpu);
  rt_dev_bind(NULL);
  rg_dev_free(dev);
  rt_model_free(cpu);
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

/* The usual stream: 5 layers (embedding, attention, mlp, moe, lm_head) in 3 stages [0,2) [2,4)
 * [4,5), 3 microbatches, 2 replicas; odd sizes (h 40, V 77, T 2 x 13). */
static be_stream *stream5(const char *opt) {
  static const int cuts[] = {2, 4};
  be_stream *s = fx_stream("gpu-test", kinds5, 3, cuts, 3, 2, 2, 13, opt);
  for (int l = 0; l < 5; l++) fx_layer_params(s, l, 40, 77);
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
  for (int l = 0; l < 4; l++) fx_layer_params(s, l, 24, 50);
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

/* A device number past the visible ones is refused with a reason. */
static void test_errors(int ndev) {
  strbuf err = {0};
  rg_dev *d = rg_dev_new(ndev, NULL, false, &err);
  CHECK(d == NULL && err.len > 0, "device %d accepted", ndev);
  printf("device %d: %s\n", ndev, strbuf_cstr(&err));
  rg_dev_free(d);
  strbuf_free(&err);
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "--cpu") == 0) { /* the harness alone, both models on the CPU */
    test_equivalence();
    printf("%s (%d failed check%s)\n", failures ? "FAILED" : "PASSED", failures,
           failures == 1 ? "" : "s");
    return failures ? 1 : 0;
  }
  on_gpu = true;
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
  printf("%s (%d failed check%s)\n", failures ? "FAILED" : "PASSED", failures,
         failures == 1 ? "" : "s");
  return failures ? 1 : 0;
}
