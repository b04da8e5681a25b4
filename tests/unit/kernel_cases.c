/* kernel_cases.c -- small fixed configurations of every layer kind (runtime/kernels.h), run three
 * ways:
 *   octo_kernel_cases check-fd             finite-difference check of every input and weight
 *                                          gradient, determinism, and that B without dx leaves
 *                                          W's gradients unchanged;
 *   octo_kernel_cases dump DIR             write each case's tensors as an octo-run --dump would
 *                                          (for tests/runtime/torch_ref.py);
 *   octo_kernel_cases check-fixtures DIR   compare y, dx and every weight gradient with the
 *                                          PyTorch results committed in DIR (relative 1e-4);
 *   octo_kernel_cases check-gpu [--bf16]   (CUDA builds) run every case, and every case with 8
 *                                          times its sequences, on GPU 0 with the same weights
 *                                          and compare y, dx and the weight gradients with the
 *                                          CPU's (relative 1e-4; bf16 GEMM inputs: 3e-2); prints
 *                                          "no GPU: skipped" and exits 0 without a device.
 * Exit status 0 when every case passes, 1 otherwise. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

/* One case: a name, a kind, its dimensions (in_S and in_w default to S and hidden). */
typedef struct kcase {
  const char *name; /* file prefix of its tensors */
  const char *kind; /* layer kind */
  rt_ldims d;       /* dimensions */
} kcase;

static const kcase kc_cases[] = {
    {"embedding", "embedding", {.B = 2, .S = 6, .in_w = 1, .hidden = 8, .vocab = 11}},
    {"lm_head", "lm_head", {.B = 2, .S = 6, .hidden = 8, .vocab = 13}},
    {"embedding_scaled", "embedding", /* Gemma's sqrt(hidden) factor */
     {.B = 2, .S = 6, .in_w = 1, .hidden = 8, .vocab = 11, .scaled = true}},
    {"lm_head_gemma", "lm_head", /* Gemma 2's (1 + w) norm and logit softcapping */
     {.B = 2, .S = 6, .hidden = 8, .vocab = 13, .norm_shift = 1, .softcap = 0.75}},
    {"custom_res", "custom", {.B = 2, .S = 4, .in_w = 8, .out_w = 8}},
    {"custom_proj", "custom", {.B = 2, .S = 4, .in_w = 8, .out_w = 5}},
    {"attn_gqa", "attention",
     {.B = 2, .S = 8, .hidden = 16, .heads = 4, .kv_heads = 2, .head_dim = 4, .causal = true,
      .rope_theta = 1e4}},
    {"attn_window", "attention",
     {.B = 2, .S = 8, .hidden = 16, .heads = 4, .kv_heads = 2, .head_dim = 4, .causal = true,
      .window = 3, .rope_theta = 1e4}},
    {"attn_mqa", "attention",
     {.B = 1, .S = 7, .hidden = 12, .heads = 2, .kv_heads = 1, .head_dim = 6, .causal = true,
      .rope_theta = 1e4}},
    {"attn_full", "attention",
     {.B = 2, .S = 5, .hidden = 16, .heads = 2, .kv_heads = 2, .head_dim = 8, .rope_theta = 1e4}},
    {"attn_bias", "attention", /* Qwen2's q, k and v biases */
     {.B = 2, .S = 6, .hidden = 16, .heads = 4, .kv_heads = 2, .head_dim = 4, .causal = true,
      .rope_theta = 1e6, .qkv_bias = true}},
    {"attn_qknorm", "attention", /* Qwen3's RMSNorm of each query and key head */
     {.B = 2, .S = 6, .hidden = 16, .heads = 4, .kv_heads = 2, .head_dim = 4, .causal = true,
      .rope_theta = 1e6, .qk_norm = true, .norm_eps = 1e-6}},
    {"attn_gemma", "attention", /* Gemma 2: (1 + w) norms, sandwich norm, score_dim, softcap */
     {.B = 2, .S = 8, .hidden = 16, .heads = 4, .kv_heads = 2, .head_dim = 4, .causal = true,
      .window = 3, .rope_theta = 1e4, .norm_eps = 1e-6, .norm_shift = 1, .post_norm = true,
      .score_dim = 6, .softcap = 0.75}},
    {"attn_gemma3", "attention", /* Gemma 3: its (1 + w) QK-norm, no softcapping */
     {.B = 2, .S = 6, .hidden = 16, .heads = 4, .kv_heads = 2, .head_dim = 4, .causal = true,
      .rope_theta = 1e6, .qk_norm = true, .norm_shift = 1, .post_norm = true}},
    {"attn_llama31", "attention", /* Llama 3.1's rope scaling: every band of wavelengths */
     {.B = 2, .S = 12, .hidden = 32, .heads = 2, .kv_heads = 1, .head_dim = 16, .causal = true,
      .rope_theta = 5e5, .rope_factor = 8, .rope_low = 1, .rope_high = 4, .rope_orig = 64}},
    {"attn_nope", "attention", /* Nemotron-H's attention: no rotary embedding, odd head width */
     {.B = 2, .S = 6, .hidden = 15, .heads = 3, .kv_heads = 1, .head_dim = 5, .causal = true,
      .no_rope = true}},
    {"attn_theta", "attention", /* Llama 3's base: long wavelengths, S past the short ones */
     {.B = 2, .S = 12, .hidden = 16, .heads = 4, .kv_heads = 1, .head_dim = 4, .causal = true,
      .rope_theta = 5e5}},
    {"mlp_swiglu", "mlp", {.B = 2, .S = 6, .hidden = 16, .ffn = 24, .gated = true, .act = RT_ACT_SILU}},
    {"mlp_geglu", "mlp", {.B = 2, .S = 6, .hidden = 16, .ffn = 24, .gated = true, .act = RT_ACT_GELU}},
    {"mlp_relu2", "mlp", {.B = 2, .S = 6, .hidden = 16, .ffn = 24, .act = RT_ACT_RELU2}},
    {"mlp_gelu", "mlp", {.B = 2, .S = 6, .hidden = 16, .ffn = 24, .act = RT_ACT_GELU}},
    {"mlp_geglu_tanh", "mlp", /* Gemma's GeGLU with the tanh approximation */
     {.B = 2, .S = 6, .hidden = 16, .ffn = 24, .gated = true, .act = RT_ACT_GELU_TANH}},
    {"mlp_eps", "mlp", /* an epsilon large enough to show in every output */
     {.B = 2, .S = 6, .hidden = 16, .ffn = 24, .gated = true, .act = RT_ACT_SILU, .norm_eps = 0.25}},
    {"mlp_gemma", "mlp", /* Gemma's sandwich: (1 + w) pre_norm and post_norm, GeGLU-tanh */
     {.B = 2, .S = 6, .hidden = 16, .ffn = 24, .gated = true, .act = RT_ACT_GELU_TANH,
      .norm_eps = 1e-6, .norm_shift = 1, .post_norm = true}},
    {"moe_shared", "moe",
     {.B = 2, .S = 6, .hidden = 16, .experts = 4, .top_k = 2, .ffn = 8, .shared = 1, .gated = true,
      .act = RT_ACT_SILU}},
    {"moe_top1", "moe",
     {.B = 2, .S = 6, .hidden = 16, .experts = 3, .top_k = 1, .ffn = 8, .act = RT_ACT_RELU}},
    /* Qwen2-MoE's variants, one each: central differences of 1e-2 cross a top-k tie (a jump of
     * the loss) at some router entry of several such cases, the two together among them (PyTorch's
     * own differences in float64 jump there too), so the combination is checked against
     * PyTorch's autograd only (check-fixtures, dump-torch.test, bench/hf_parity.py) */
    {"moe_gate", "moe", /* the gated shared experts */
     {.B = 2, .S = 6, .hidden = 16, .experts = 4, .top_k = 2, .ffn = 8, .shared = 2, .gated = true,
      .act = RT_ACT_SILU, .shared_gate = true}},
    {"moe_top1_probs", "moe", /* top 1 without renormalization: the router gets its gradient */
     {.B = 2, .S = 6, .hidden = 16, .experts = 3, .top_k = 1, .ffn = 8, .act = RT_ACT_RELU,
      .all_probs = true}},
    {"moe_v3", "moe", /* DeepSeek-V3's routing: sigmoid scores, a choice bias, 2 of 4 groups,
                         renormalized, scaled */
     {.B = 2, .S = 6, .hidden = 16, .experts = 8, .top_k = 3, .ffn = 8, .shared = 1, .gated = true,
      .act = RT_ACT_SILU, .sigmoid = true, .score_bias = true, .egroups = 4, .tgroups = 2,
      .rscale = 2.5}},
    {"moe_v2", "moe", /* DeepSeek-V2's: the softmax over all experts, 2 of 3 groups, scaled */
     {.B = 2, .S = 6, .hidden = 12, .experts = 6, .top_k = 2, .ffn = 8, .act = RT_ACT_SILU,
      .gated = true, .all_probs = true, .egroups = 3, .tgroups = 2, .rscale = 1.5}},
    {"moe_sigmoid_raw", "moe", /* sigmoid weights as they are (renorm = false) */
     {.B = 2, .S = 6, .hidden = 16, .experts = 4, .top_k = 2, .ffn = 8, .act = RT_ACT_RELU,
      .sigmoid = true, .all_probs = true}},
    {"mamba2_chunk4", "mamba2",
     {.B = 2, .S = 10, .hidden = 8, .heads = 4, .head_dim = 4, .inner = 16, .state = 4, .groups = 2,
      .conv = 4, .chunk = 4}},
    {"mamba2_chunk16", "mamba2",
     {.B = 2, .S = 10, .hidden = 8, .heads = 4, .head_dim = 4, .inner = 16, .state = 4, .groups = 1,
      .conv = 4, .chunk = 16}},
    {"vit_gelu", "vit",
     {.B = 2, .S = 5, .hidden = 16, .heads = 2, .kv_heads = 2, .head_dim = 8, .ffn = 24,
      .act = RT_ACT_GELU}},
    {"vit_eps", "vit",
     {.B = 2, .S = 5, .hidden = 16, .heads = 2, .kv_heads = 2, .head_dim = 8, .ffn = 24,
      .act = RT_ACT_GELU, .norm_eps = 0.25}},
    {"vit_gated", "vit",
     {.B = 2, .S = 5, .hidden = 16, .heads = 2, .kv_heads = 2, .head_dim = 8, .ffn = 24,
      .gated = true, .act = RT_ACT_SILU}},
    {"mla_lite", "mla", /* DeepSeek-V2-Lite's latent attention: queries from the input */
     {.B = 2, .S = 6, .hidden = 16, .heads = 2, .kv_rank = 8, .nope_dim = 4, .rope_dim = 4,
      .v_dim = 3, .rope_theta = 1e4, .norm_eps = 1e-6, .latent_eps = 1e-6}},
    {"mla_q", "mla", /* DeepSeek-V2/V3's: a query latent too, values as wide as the queries */
     {.B = 2, .S = 5, .hidden = 12, .heads = 3, .q_rank = 6, .kv_rank = 5, .nope_dim = 2,
      .rope_dim = 4, .v_dim = 6, .rope_theta = 500, .norm_eps = 1e-5, .latent_eps = 0.25}},
    {"mla_yarn", "mla", /* DeepSeek's YaRN: a pretraining context of 8 tokens extended 4 times,
                           magnitude scales that differ; pair 0 kept, 1 and 2 blended, 3 slowed */
     {.B = 2, .S = 8, .hidden = 12, .heads = 2, .kv_rank = 6, .nope_dim = 4, .rope_dim = 8,
      .v_dim = 4, .rope_theta = 100, .norm_eps = 1e-6, .latent_eps = 1e-6, .yarn_factor = 4,
      .yarn_orig = 8, .yarn_beta_fast = 4, .yarn_beta_slow = 0.05, .yarn_mscale = 0.9,
      .yarn_mscale_all = 0.6}},
    {"vit_clip", "vit", /* CLIP's encoder layer: quick_gelu, a LayerNorm epsilon that shows */
     {.B = 2, .S = 5, .hidden = 16, .heads = 2, .kv_heads = 2, .head_dim = 8, .ffn = 24,
      .act = RT_ACT_QUICK_GELU, .norm_eps = 0.25}},
    {"vit_unused", "vit", /* LLaVA's encoder layer after vision_feature_layer: the identity */
     {.B = 2, .S = 5, .hidden = 16, .heads = 2, .kv_heads = 2, .head_dim = 8, .ffn = 24,
      .act = RT_ACT_QUICK_GELU, .unused = true}},
    {"vit_embed", "vit_embed", /* CLIP's embeddings: 3 channels of 4 x 4 pixels, 2 x 2 patches */
     {.B = 2, .S = 5, .in_S = 12, .in_w = 4, .hidden = 8, .patch = 2, .channels = 3, .image = 4,
      .norm_eps = 0.25}},
    {"vit_embed_part", "vit_embed", /* at a scale: the first 5 patches of a 3 x 3 grid */
     {.B = 2, .S = 6, .in_S = 12, .in_w = 6, .hidden = 8, .patch = 2, .channels = 2, .image = 6}},
    {"projector", "projector", /* LLaVA's: the class token dropped, GELU */
     {.B = 2, .S = 4, .in_S = 5, .in_w = 8, .hidden = 12, .act = RT_ACT_GELU, .drop_class = true}},
    {"projector_full", "projector", /* every token kept; the unused vision norm held */
     {.B = 2, .S = 5, .in_S = 5, .in_w = 8, .hidden = 12, .act = RT_ACT_QUICK_GELU,
      .vision_norm = true}},
    {"attn_linear", "attention", /* Gemma 3's global layers: linear rope scaling by 8 */
     {.B = 2, .S = 12, .hidden = 32, .heads = 2, .kv_heads = 1, .head_dim = 16, .causal = true,
      .rope_theta = 1e6, .rope_linear = 8, .qk_norm = true, .norm_shift = 1, .post_norm = true}},
};
enum { KC_N = sizeof kc_cases / sizeof kc_cases[0] };

/* A case run once: its plan, tensors and results. */
typedef struct krun {
  const rt_kernel *k; /* the kind's kernels */
  rt_ldims d;         /* dimensions, in_S and in_w filled */
  rt_lplan p;         /* plan */
  size_t nx, ny, nw;  /* floats of x, y, w */
  float *x, *y, *dy, *dx, *w, *g, *save; /* tensors */
} krun;

/* xorshift64* draw in [-1, 1). */
static double kc_rand(uint64_t *s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return (double)((*s * 0x2545F4914F6CDD1DULL) >> 11) * 0x1p-52 - 1.0;
}

/* L = sum(y * dy) in double. */
static double kc_loss(const krun *r) {
  double l = 0;
  for (size_t i = 0; i < r->ny; i++) l += (double)r->y[i] * r->dy[i];
  return l;
}

/* Set up case c: plan, weights (the kind's initialization, then perturbed so that norms and
 * biases are not trivial), input and output gradient. Returns false with the reason printed. */
static bool kc_setup(const kcase *c, krun *r) {
  memset(r, 0, sizeof *r);
  r->d = c->d;
  if (!r->d.in_S) r->d.in_S = r->d.S;
  if (!r->d.in_w) r->d.in_w = r->d.hidden;
  if (!r->d.norm_eps) r->d.norm_eps = 1e-5; /* the language's default (layer_params.def) */
  if (!r->d.score_dim) r->d.score_dim = r->d.head_dim; /* derived so (ir/layers.c) */
  if (!r->d.rope_factor) { /* no rope scaling, as the language's defaults */
    r->d.rope_factor = r->d.rope_low = 1;
    r->d.rope_high = 4;
    r->d.rope_orig = 8192;
  }
  if (!r->d.rope_linear) r->d.rope_linear = 1;
  r->k = rt_kernel_find(c->kind);
  strbuf err = {0};
  if (!r->k || r->k->plan(&r->d, &r->p, &err) != 0) {
    printf("FAIL %s: no plan: %s\n", c->name, strbuf_cstr(&err));
    strbuf_free(&err);
    return false;
  }
  strbuf_free(&err);
  r->nx = (size_t)r->d.B * r->d.in_S * r->d.in_w;
  r->ny = (size_t)r->d.B * r->d.S * r->p.out_w;
  r->nw = rt_lplan_params(&r->p);
  r->x = xmalloc(r->nx * sizeof *r->x);
  r->y = xcalloc(r->ny, sizeof *r->y);
  r->dy = xmalloc(r->ny * sizeof *r->dy);
  r->dx = xcalloc(r->nx, sizeof *r->dx);
  r->w = xmalloc((r->nw ? r->nw : 1) * sizeof *r->w);
  r->g = xcalloc(r->nw ? r->nw : 1, sizeof *r->g);
  r->save = xcalloc(r->p.save_floats ? r->p.save_floats : 1, sizeof *r->save);
  uint64_t s = 0x1234567ULL + (uint64_t)strlen(c->name) * 977;
  for (const char *q = c->name; *q; q++) s = s * 131 + (unsigned char)*q;
  rt_kernel_init_params(&r->p, s, r->w);
  float *w = r->w;
  for (int i = 0; i < r->p.npt; i++) {
    size_t n = rt_ptensor_floats(&r->p.pt[i]);
    if (r->p.pt[i].init != RT_INIT_UNIFORM)
      for (size_t k = 0; k < n; k++) w[k] += (float)(0.1 * kc_rand(&s));
    w += n;
  }
  bool ids = r->d.in_w == 1 && strcmp(c->kind, "embedding") == 0;
  for (size_t i = 0; i < r->nx; i++)
    r->x[i] = ids ? (float)((kc_rand(&s) + 1.0) * 0.5 * r->d.vocab) : (float)kc_rand(&s);
  if (ids)
    for (size_t i = 0; i < r->nx; i++) r->x[i] = floorf(r->x[i]);
  for (size_t i = 0; i < r->ny; i++) r->dy[i] = (float)kc_rand(&s);
  return true;
}

/* F, B (with dx unless no_dx), W from zero gradients. */
static void kc_run(krun *r, bool no_dx) {
  memset(r->g, 0, r->nw * sizeof *r->g);
  r->k->fwd(&r->d, r->w, r->x, r->y, r->save);
  r->k->bwd_in(&r->d, r->w, r->save, r->dy, no_dx ? NULL : r->dx);
  r->k->bwd_w(&r->d, r->w, r->save, r->g);
}

static void kc_free(krun *r) {
  free(r->x);
  free(r->y);
  free(r->dy);
  free(r->dx);
  free(r->w);
  free(r->g);
  free(r->save);
}

/* Finite-difference check of the gradient an[] of tensor v (n floats) by central differences of
 * L; samples up to 6 entries. Returns the worst error relative to the tensor's largest analytic
 * gradient. */
static double kc_fd(krun *r, float *v, const float *an, size_t n, uint64_t *s) {
  double amax = 0;
  for (size_t i = 0; i < n; i++) amax = fmax(amax, fabs(an[i]));
  double worst = 0;
  int samples = n < 6 ? (int)n : 6;
  for (int k = 0; k < samples; k++) {
    size_t i = n <= 6 ? (size_t)k : (size_t)((kc_rand(s) + 1.0) * 0.5 * (double)n) % n;
    float keep = v[i];
    float eps = 1e-2f * fmaxf(1.0f, fabsf(keep));
    v[i] = keep + eps;
    r->k->fwd(&r->d, r->w, r->x, r->y, r->save);
    double lp = kc_loss(r);
    v[i] = keep - eps;
    r->k->fwd(&r->d, r->w, r->x, r->y, r->save);
    double lm = kc_loss(r);
    v[i] = keep;
    double fd = (lp - lm) / (2.0 * eps);
    double e = fabs(fd - an[i]) / fmax(amax, 1e-2); /* a zero gradient (a key bias) sees noise */
    if (e > worst) worst = e;
  }
  return worst;
}

/* check-fd: every case. */
static int kc_check_fd(void) {
  int bad = 0;
  for (int c = 0; c < KC_N; c++) {
    krun r;
    if (!kc_setup(&kc_cases[c], &r)) {
      bad++;
      continue;
    }
    kc_run(&r, false);
    /* Determinism, and B without dx: the same y and g. */
    float *y0 = xmalloc(r.ny * sizeof *y0), *g0 = xmalloc((r.nw ? r.nw : 1) * sizeof *g0);
    float *dx0 = xmalloc(r.nx * sizeof *dx0);
    memcpy(y0, r.y, r.ny * sizeof *y0);
    memcpy(g0, r.g, r.nw * sizeof *g0);
    memcpy(dx0, r.dx, r.nx * sizeof *dx0);
    kc_run(&r, true);
    bool same = memcmp(y0, r.y, r.ny * sizeof *y0) == 0 && memcmp(g0, r.g, r.nw * sizeof *g0) == 0;
    kc_run(&r, false);
    same = same && memcmp(dx0, r.dx, r.nx * sizeof *dx0) == 0;
    bool finite = true;
    for (size_t i = 0; i < r.ny; i++) finite = finite && isfinite(r.y[i]);
    uint64_t s = 99 + (uint64_t)c;
    double worst = 0;
    const char *where = "x";
    if (strcmp(rt_kernel_name(r.k), "embedding") != 0) worst = kc_fd(&r, r.x, dx0, r.nx, &s);
    float *w = r.w;
    const float *g = g0;
    for (int i = 0; i < r.p.npt; i++) {
      size_t n = rt_ptensor_floats(&r.p.pt[i]);
      double e = kc_fd(&r, w, g, n, &s);
      if (e > worst) {
        worst = e;
        where = r.p.pt[i].name;
      }
      w += n;
      g += n;
    }
    bool ok = same && finite && worst <= 2e-2;
    printf("%s %s (%s): finite-difference error %.2e (worst: %s)%s%s\n", ok ? "PASS" : "FAIL",
           kc_cases[c].name, rt_kernel_name(r.k), worst, where, same ? "" : ", not deterministic",
           finite ? "" : ", non-finite output");
    bad += !ok;
    free(y0);
    free(g0);
    free(dx0);
    kc_free(&r);
  }
  printf("%d passed, %d failed\n", KC_N - bad, bad);
  return bad ? 1 : 0;
}

/* dump DIR: every case's tensors and the index. */
static int kc_dump(const char *dir) {
  strbuf index = {0}, err = {0};
  int rc = 0;
  for (int c = 0; c < KC_N && rc == 0; c++) {
    krun r;
    if (!kc_setup(&kc_cases[c], &r)) return 1;
    kc_run(&r, false);
    bool ids = strcmp(rt_kernel_name(r.k), "embedding") == 0;
    rt_dump_tensors t = {r.x, r.y, r.dy, ids ? NULL : r.dx, r.w, r.g, NULL, NULL, 0, 0};
    strbuf stem = {0};
    rt_dump_stem(&stem, c, kc_cases[c].name);
    rc = rt_dump_layer(dir, strbuf_cstr(&stem), &r.d, &r.p, &t, &err);
    strbuf_free(&stem);
    rt_dump_entry(&index, c, kc_cases[c].name, rt_kernel_name(r.k), &r.d, &r.p, !ids, 0);
    kc_free(&r);
  }
  rt_dump_run run = {0}; /* kernels alone: no run, no targets */
  if (rc == 0) rc = rt_dump_index(dir, &run, &index, &err);
  if (rc) fprintf(stderr, "octo_kernel_cases: %s\n", strbuf_cstr(&err));
  strbuf_free(&index);
  strbuf_free(&err);
  return rc ? 1 : 0;
}

/* Read a float32 .npy file of exactly n floats into a; false with the reason printed. */
static bool kc_npy_read(const char *path, float *a, size_t n) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    printf("  %s: cannot open\n", path);
    return false;
  }
  unsigned char pre[10];
  bool ok = fread(pre, 1, 10, f) == 10 && memcmp(pre, "\x93NUMPY", 6) == 0 && pre[6] == 1;
  size_t hl = ok ? (size_t)pre[8] | (size_t)pre[9] << 8 : 0;
  char hdr[1024];
  ok = ok && hl < sizeof hdr && fread(hdr, 1, hl, f) == hl;
  if (ok) {
    hdr[hl] = 0;
    ok = strstr(hdr, "'<f4'") && strstr(hdr, "'fortran_order': False");
  }
  ok = ok && fread(a, sizeof *a, n, f) == n && fgetc(f) == EOF;
  fclose(f);
  if (!ok) printf("  %s: not a float32 array of %zu elements\n", path, n);
  return ok;
}

/* Largest |a - b| / max(max|b|, floor) over n floats. */
static double kc_rel(const float *a, const float *b, size_t n, double floor) {
  double md = 0, mb = floor;
  for (size_t i = 0; i < n; i++) {
    md = fmax(md, fabs((double)a[i] - b[i]));
    mb = fmax(mb, fabs((double)b[i]));
  }
  return mb > 0 ? md / mb : md;
}

/* Compare n floats of a with fixture DIR/CASE.WHAT.npy; returns the relative error (INFINITY
 * when the fixture cannot be read); floor: the least denominator (a gradient that is zero in
 * exact arithmetic is compared on the layer's scale). */
static double kc_cmp(const char *dir, const char *name, const char *what, const float *a,
                     size_t n, double floor) {
  strbuf path = {0};
  strbuf_printf(&path, "%s/%s.%s.npy", dir, name, what);
  float *ref = xmalloc((n ? n : 1) * sizeof *ref);
  double e = kc_npy_read(strbuf_cstr(&path), ref, n) ? kc_rel(a, ref, n, floor) : INFINITY;
  if (e > 1e-4) printf("  %s.%s: relative error %.3e\n", name, what, e);
  free(ref);
  strbuf_free(&path);
  return e;
}

/* check-fixtures DIR: every case against PyTorch's results. */
static int kc_check_fixtures(const char *dir) {
  int bad = 0;
  for (int c = 0; c < KC_N; c++) {
    krun r;
    if (!kc_setup(&kc_cases[c], &r)) {
      bad++;
      continue;
    }
    kc_run(&r, false);
    const char *nm = kc_cases[c].name;
    double worst = kc_cmp(dir, nm, "y", r.y, r.ny, 0);
    if (strcmp(rt_kernel_name(r.k), "embedding") != 0)
      worst = fmax(worst, kc_cmp(dir, nm, "dx", r.dx, r.nx, 0));
    double floor = 0;
    for (size_t i = 0; i < r.nw; i++) floor = fmax(floor, 1e-6 * fabs(r.g[i]));
    const float *g = r.g;
    for (int i = 0; i < r.p.npt; i++) {
      size_t n = rt_ptensor_floats(&r.p.pt[i]);
      strbuf what = {0};
      strbuf_printf(&what, "g.%s", r.p.pt[i].name);
      worst = fmax(worst, kc_cmp(dir, nm, strbuf_cstr(&what), g, n, floor));
      strbuf_free(&what);
      g += n;
    }
    bool ok = worst <= 1e-4;
    printf("%s %s (%s): largest relative error against PyTorch %.2e\n", ok ? "PASS" : "FAIL", nm,
           rt_kernel_name(r.k), worst);
    bad += !ok;
    kc_free(&r);
  }
  printf("%d passed, %d failed\n", KC_N - bad, bad);
  return bad ? 1 : 0;
}

#ifdef OCTO_HAVE_CUDA
#include "gpu.h"

/* A device copy of n host floats a (the device bound). */
static float *kc_put(const float *a, size_t n) {
  float *d = rt_dev_malloc(n * sizeof *d);
  rt_put(d, a, n * sizeof *a);
  return d;
}

/* Run case r (already run on the CPU) on device dev: F, B with dx, W from zero gradients; y, dx
 * and g are read back into gy, gdx, gg. Returns the device's error, or NULL. */
static const char *kc_gpu_run(rg_dev *dev, const krun *r, float *gy, float *gdx, float *gg) {
  const rt_dev *prev = rt_dev_bind(rg_dev_kernels(dev));
  float *x = kc_put(r->x, r->nx), *dy = kc_put(r->dy, r->ny), *w = kc_put(r->w, r->nw);
  float *y = rt_dev_malloc(r->ny * sizeof *y), *dx = rt_dev_malloc(r->nx * sizeof *dx);
  float *g = rt_dev_malloc(r->nw * sizeof *g);
  float *save = rt_dev_malloc(r->p.save_floats * sizeof *save);
  if (!rg_dev_error(dev)) {
    r->k->fwd(&r->d, w, x, y, save);
    r->k->bwd_in(&r->d, w, save, dy, dx);
    r->k->bwd_w(&r->d, w, save, g);
    rt_to_host(gy, y, r->ny * sizeof *gy);
    rt_to_host(gdx, dx, r->nx * sizeof *gdx);
    rt_to_host(gg, g, r->nw * sizeof *gg);
  }
  float *all[] = {x, y, dy, dx, w, g, save};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) rt_dev_mfree(all[i]);
  rt_dev_bind(prev);
  return rg_dev_error(dev);
}

/* check-gpu: every case at its size and with 8 times its sequences, GPU against CPU. */
static int kc_check_gpu(bool bf16) {
  strbuf err = {0};
  rg_dev *dev = rg_dev_new(0, NULL, bf16, &err);
  if (!dev) {
    printf("no GPU: skipped (%s)\n", strbuf_cstr(&err));
    strbuf_free(&err);
    return 0;
  }
  double tol = bf16 ? 3e-2 : 1e-4;
  int bad = 0, n = 0;
  for (int big = 0; big < 2; big++)
    for (int c = 0; c < KC_N; c++, n++) {
      kcase kcs = kc_cases[c];
      if (big) kcs.d.B *= 8;
      krun r;
      if (!kc_setup(&kcs, &r)) {
        bad++;
        continue;
      }
      kc_run(&r, false);
      float *gy = xcalloc(r.ny, sizeof *gy), *gdx = xcalloc(r.nx, sizeof *gdx);
      float *gg = xcalloc(r.nw ? r.nw : 1, sizeof *gg);
      const char *e = kc_gpu_run(dev, &r, gy, gdx, gg);
      double ey = kc_rel(gy, r.y, r.ny, 0), edx = 0, eg = 0;
      if (strcmp(rt_kernel_name(r.k), "embedding") != 0) edx = kc_rel(gdx, r.dx, r.nx, 0);
      const float *gc = r.g, *gd = gg;
      for (int i = 0; i < r.p.npt; i++) {
        size_t k = rt_ptensor_floats(&r.p.pt[i]);
        eg = fmax(eg, kc_rel(gd, gc, k, 1e-3));
        gc += k;
        gd += k;
      }
      bool ok = !e && ey <= tol && edx <= tol && eg <= tol;
      printf("%s %s%s (%s): GPU vs CPU relative error y %.2e, dx %.2e, weight gradients %.2e%s%s\n",
             ok ? "PASS" : "FAIL", kcs.name, big ? " x8" : "", rt_kernel_name(r.k), ey, edx, eg,
             e ? ": " : "", e ? e : "");
      bad += !ok;
      free(gy);
      free(gdx);
      free(gg);
      kc_free(&r);
      if (e) break;
    }
  printf("%d passed, %d failed\n", n - bad, bad);
  rg_dev_free(dev);
  strbuf_free(&err);
  return bad ? 1 : 0;
}
#endif

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "check-fd") == 0) return kc_check_fd();
  if (argc == 3 && strcmp(argv[1], "dump") == 0) return kc_dump(argv[2]);
  if (argc == 3 && strcmp(argv[1], "check-fixtures") == 0) return kc_check_fixtures(argv[2]);
#ifdef OCTO_HAVE_CUDA
  if (argc >= 2 && argc <= 3 && strcmp(argv[1], "check-gpu") == 0 &&
      (argc == 2 || strcmp(argv[2], "--bf16") == 0))
    return kc_check_gpu(argc == 3);
#endif
  fprintf(stderr, "usage: octo_kernel_cases check-fd | dump DIR | check-fixtures DIR | check-gpu "
                  "[--bf16]\n");
  return 2;
}
