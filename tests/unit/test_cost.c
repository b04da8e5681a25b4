/* test_cost.c -- unit tests of the cost library against worked numbers: forward FLOPs of
 * Llama-3-8B, Gemma-2-2B and Nemotron-H-8B layers (re-derived by hand below), the F/B/W split
 * rule, Korthikanti et al.'s activation identities, bytes per parameter, tensor-parallel
 * scaling, the roofline, recomputation, custom layers, the cost pass's errors, and the profile
 * reader on random edits of a valid file. Each test prints the figures it computed
 * ("cost: ..."), so a disagreement shows the numbers. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cost.h"
#include "unit.h"

/* ---- Helpers ------------------------------------------------------------------------------ */

/* Check |a - b| <= rel * |b|, printing both numbers when they disagree. */
#define CHECK_REL(a, b, rel)                                                                     \
  do {                                                                                           \
    double cr_a_ = (a), cr_b_ = (b);                                                             \
    if (!(fabs(cr_a_ - cr_b_) <= (rel) * fabs(cr_b_)))                                           \
      unit_fail_dbl(__FILE__, __LINE__, #a " ~ " #b " within " #rel, cr_a_, cr_b_);             \
  } while (0)

/* Check lo <= a <= hi. */
#define CHECK_RANGE(a, lo, hi)                                                                   \
  do {                                                                                           \
    double rg_a_ = (a);                                                                          \
    if (!(rg_a_ >= (lo) && rg_a_ <= (hi)))                                                       \
      unit_fail_dbl(__FILE__, __LINE__, #a " in [" #lo ", " #hi "] (value, lo)", rg_a_, (lo));  \
  } while (0)

/* A module with one H100-like device (989 TFLOPS, 3.35 TB/s, efficiency 0.5), a 450 GB/s
 * 3 us intra link, and train micro_batch = 1, tensor = 1 (other fields unset: defaults). */
static ir_module *new_module(void) {
  ir_module *m = ir_module_new("t");
  ir_field_set(&m->train, IR_F_TRAIN_pipeline, 1);
  ir_field_set(&m->train, IR_F_TRAIN_tensor, 1);
  ir_field_set(&m->train, IR_F_TRAIN_data, 1);
  ir_field_set(&m->train, IR_F_TRAIN_micro_batch, 1);
  ir_field_set(&m->train, IR_F_TRAIN_microbatches, 1);
  ir_field_set(&m->intra, IR_F_LINK_bw, 450e9);
  ir_field_set(&m->intra, IR_F_LINK_lat, 3e-6);
  ir_device *dv = ir_module_add_device(m, "h100");
  ir_field_set(&dv->rec, IR_F_DEVICE_peak, 989e12);
  ir_field_set(&dv->rec, IR_F_DEVICE_mem, 80.0 * 1073741824.0);
  ir_field_set(&dv->rec, IR_F_DEVICE_hbm, 3.35e12);
  ir_field_set(&dv->rec, IR_F_DEVICE_efficiency, 0.5);
  return m;
}

/* Add a layer of kind k whose parameters are given as "name=value ..." in 'spec'; the rest take
 * their table defaults and derivations, and the layer must pass ir_layer_check. Returns its
 * index (pointers move when layers are added). */
static int add_layer(ir_module *m, const char *name, ir_layer_kind k, const char *spec) {
  ir_layer *l = ir_module_add_layer(m, name, k);
  char *copy = xstrdup(spec);
  for (char *tok = strtok(copy, " "); tok; tok = strtok(NULL, " ")) {
    char *eq = strchr(tok, '=');
    UNIT_CHECK(eq != NULL);
    if (!eq) continue;
    *eq = 0;
    int p = ir_param_lookup(k, tok);
    UNIT_CHECK_STREQ(p >= 0 ? tok : "(unknown)", tok);
    if (p >= 0) l->p[p] = strtod(eq + 1, NULL);
  }
  free(copy);
  int first = ir_kind_first_param(k), n = ir_kind_nparams(k);
  for (int i = first; i < first + n; i++)
    if (isnan(l->p[i]) && !isnan(ir_layer_params[i].def)) l->p[i] = ir_layer_params[i].def;
  ir_layer_derive(l, NULL, NULL);
  diag_engine *d = diag_new(stdout);
  UNIT_CHECK(ir_layer_check(l, d, diag_mkloc(0, 0, 0, 0)) == 0);
  diag_free(d);
  return m->nlayers - 1;
}

/* Estimate layer i of m on device 0; the estimate must succeed. */
static cost_estimate estimate(const ir_module *m, int i) {
  cost_estimate e;
  const char *why = NULL;
  UNIT_CHECK(cost_estimate_layer(m, &m->layers[i], &m->devices[0].rec, &e, &why) == 0);
  return e;
}

/* Forward FLOPs of the weight-less cores of layer i (C of the split rule). */
static double core_flops(const ir_module *m, int i) {
  cost_breakdown bd;
  cost_layer_breakdown(m, &m->layers[i], &bd);
  double c = 0;
  for (int k = 0; k < bd.nparts; k++)
    if (bd.parts[k].kind == COST_PART_CORE) c += bd.parts[k].flops[COST_F];
  return c;
}

/* Sum of the activation terms of layer i that have all of 'flags'. */
static double act_terms(const ir_module *m, int i, unsigned flags) {
  cost_breakdown bd;
  cost_layer_breakdown(m, &m->layers[i], &bd);
  double s = 0;
  for (int k = 0; k < bd.nact; k++)
    if ((bd.act[k].flags & flags) == flags) s += bd.act[k].bytes;
  return s;
}

#define LLAMA_ATTN "hidden=4096 heads=32 kv_heads=8 head_dim=128 seq=4096"
#define LLAMA_MLP "hidden=4096 ffn=14336 gated=1 seq=4096"

/* ---- Worked numbers ----------------------------------------------------------------------- */

/* Llama-3-8B at s = 4096: attention + MLP forward = 0.470 GFLOP per token per layer. By hand:
 * QKV 2 h (a d + 2 k d) = 50.33M, output 2 a d h = 33.55M, causal core 2 s a d = 33.55M
 * (QK^T and PV, each 2 s^2 a d / 2 per sequence), MLP 3 x 2 h f = 352.32M: 469.76M. */
void test_cost_llama3_flops(void) {
  ir_module *m = new_module();
  int a = add_layer(m, "attn", IR_KIND_ATTENTION, LLAMA_ATTN);
  int f = add_layer(m, "mlp", IR_KIND_MLP, LLAMA_MLP);
  double per_token = (cost_forward_flops_per_sequence(m, &m->layers[a]) +
                      cost_forward_flops_per_sequence(m, &m->layers[f])) / 4096;
  printf("cost: llama3-8b s=4096 attention+mlp forward = %.4f GFLOP/token/layer (issue: 0.470)\n",
         per_token / 1e9);
  CHECK_REL(per_token, 0.470e9, 0.005);
  double by_hand = 2.0 * 4096 * (4096 + 2 * 1024) + 2.0 * 4096 * 4096 + 2.0 * 4096 * 4096 +
                   3 * 2.0 * 4096 * 14336;
  CHECK_REL(per_token, by_hand, 1e-12);
  ir_module_free(m);
}

/* Gemma-2-2B at s = 4096: LM head forward / (attention + MLP forward) ~ 6.8. By hand per token:
 * head 2 h V = 1179.6M; attention 2 h (a d + 2 k d) + 2 a d h + 2 s a d = 45.09M, MLP
 * 3 x 2 h f = 127.40M: 1179.6 / 172.49 = 6.84. */
void test_cost_gemma2_head_ratio(void) {
  ir_module *m = new_module();
  int a = add_layer(m, "attn", IR_KIND_ATTENTION,
                    "hidden=2304 heads=8 kv_heads=4 head_dim=256 seq=4096");
  int f = add_layer(m, "mlp", IR_KIND_MLP, "hidden=2304 ffn=9216 gated=1 act=2 seq=4096");
  int h = add_layer(m, "head", IR_KIND_LM_HEAD, "hidden=2304 vocab=256000 seq=4096");
  double layer = cost_forward_flops_per_sequence(m, &m->layers[a]) +
                 cost_forward_flops_per_sequence(m, &m->layers[f]);
  double ratio = cost_forward_flops_per_sequence(m, &m->layers[h]) / layer;
  printf("cost: gemma2-2b s=4096 lm_head / (attention+mlp) forward = %.3f (issue: 6.8)\n", ratio);
  CHECK_RANGE(ratio, 6.75, 6.90);
  ir_module_free(m);
}

/* Nemotron-H-8B at s = 8192, TFLOP per sequence per layer forward. By hand per token:
 * attention 2 h (a d + 2 k d) + 2 a d h + 2 s a d = 150.99M -> 1.2369T (issue: 1.24);
 * MLP 2 x 2 h f = 352.32M -> 2.8862T (issue: 2.89);
 * Mamba-2 (di 8192, H 128, P 64, N 128, g 8, Q 256, conv 4): in_proj 2 h (2 di + 2 g N + H)
 * = 152.04M, out_proj 2 di h = 67.11M, conv 2 c (di + 2 g N) = 0.08M, SSD Q N g + Q P H +
 * 4 N P H = 6.55M: 225.79M -> 1.8497T. The issue quotes 1.86, 0.56 % above what the decided
 * formula gives (not halving the intra-chunk products would give 1.869T): the test checks the
 * re-derived 1.8497T and prints the comparison. */
void test_cost_nemotron_flops(void) {
  ir_module *m = new_module();
  int mb = add_layer(m, "mamba", IR_KIND_MAMBA2,
                     "hidden=4096 heads=128 head_dim=64 state=128 groups=8 conv=4 expand=2 "
                     "chunk=256 seq=8192");
  int a = add_layer(m, "attn", IR_KIND_ATTENTION,
                    "hidden=4096 heads=32 kv_heads=8 head_dim=128 seq=8192");
  int f = add_layer(m, "mlp", IR_KIND_MLP, "hidden=4096 ffn=21504 gated=0 act=1 seq=8192");
  double tm = cost_forward_flops_per_sequence(m, &m->layers[mb]) / 1e12;
  double ta = cost_forward_flops_per_sequence(m, &m->layers[a]) / 1e12;
  double tf = cost_forward_flops_per_sequence(m, &m->layers[f]) / 1e12;
  printf("cost: nemotron-h-8b s=8192 forward TFLOP/sequence/layer: mamba2 %.4f (issue 1.86, "
         "%+.2f%%), attention %.4f (issue 1.24, %+.2f%%), mlp %.4f (issue 2.89, %+.2f%%)\n",
         tm, 100 * (tm / 1.86 - 1), ta, 100 * (ta / 1.24 - 1), tf, 100 * (tf / 2.89 - 1));
  double mamba_by_hand = 8192.0 * (2.0 * 4096 * (2 * 8192 + 2 * 8 * 128 + 128) +
                                   2.0 * 8192 * 4096 + 2.0 * 4 * (8192 + 2 * 8 * 128) +
                                   (256.0 * 128 * 8 + 256.0 * 64 * 128 + 4.0 * 128 * 64 * 128));
  CHECK_REL(tm * 1e12, mamba_by_hand, 1e-12);
  CHECK_REL(tm, 1.85, 0.005);
  CHECK_REL(ta, 1.24, 0.005);
  CHECK_REL(tf, 2.89, 0.005);
  ir_module_free(m);
}

/* ---- Rules ---------------------------------------------------------------------------------*/

/* F/B/W split: weight GEMMs G go to F, B and W alike; cores C to F and twice to B: B = F + C,
 * W = F - C. A plain MLP has no core: F = B = W. */
void test_cost_split_rule(void) {
  ir_module *m = new_module();
  int layers[] = {
      add_layer(m, "attn", IR_KIND_ATTENTION, LLAMA_ATTN),
      add_layer(m, "mlp", IR_KIND_MLP, LLAMA_MLP),
      add_layer(m, "mamba", IR_KIND_MAMBA2, "hidden=1024 seq=2048"),
      add_layer(m, "moe", IR_KIND_MOE,
                "hidden=1024 experts=16 top_k=2 expert_ffn=512 shared_experts=1 seq=2048"),
      add_layer(m, "vit", IR_KIND_VIT, "hidden=1024 heads=16 ffn=4096"),
      add_layer(m, "head", IR_KIND_LM_HEAD, "hidden=1024 vocab=32000 seq=2048"),
  };
  for (size_t i = 0; i < sizeof layers / sizeof layers[0]; i++) {
    cost_estimate e = estimate(m, layers[i]);
    double c = core_flops(m, layers[i]);
    CHECK_REL(e.flops[COST_B], e.flops[COST_F] + c, 1e-12);
    CHECK_REL(e.flops[COST_W], e.flops[COST_F] - c, 1e-12);
    UNIT_CHECK(e.flops[COST_F] > 0);
    UNIT_CHECK(e.act_w <= e.act);
    UNIT_CHECK(e.act_w >= 0 && e.out >= 0 && e.param_bytes > 0 && e.grad_bytes > 0);
    for (int k = 0; k < COST_NPASS; k++) UNIT_CHECK(isfinite(e.time[k]) && e.time[k] >= 0);
  }
  UNIT_CHECK(core_flops(m, layers[1]) == 0);
  cost_estimate mlp = estimate(m, layers[1]);
  UNIT_CHECK_EQ_DBL(mlp.flops[COST_F], mlp.flops[COST_B]);
  UNIT_CHECK_EQ_DBL(mlp.flops[COST_F], mlp.flops[COST_W]);
  /* attention core of a causal sequence: QK^T and PV, each 2 s^2 a d / 2 */
  CHECK_REL(core_flops(m, layers[0]), 2 * 2.0 * 4096 * 4096 * 32 * 128 / 2, 1e-12);
  ir_module_free(m);
}

/* Sliding window: the core counts s w - w^2 / 2 causal pairs instead of s^2 / 2; w = s is full
 * causal attention. */
void test_cost_window(void) {
  ir_module *m = new_module();
  int w = add_layer(m, "local", IR_KIND_ATTENTION, "hidden=2304 heads=8 kv_heads=4 head_dim=256 "
                                                   "seq=8192 window=4096");
  int full = add_layer(m, "full", IR_KIND_ATTENTION, "hidden=2304 heads=8 kv_heads=4 "
                                                     "head_dim=256 seq=8192 window=8192");
  int causal = add_layer(m, "causal", IR_KIND_ATTENTION, "hidden=2304 heads=8 kv_heads=4 "
                                                         "head_dim=256 seq=8192");
  double pairs = 8192.0 * 4096 - 4096.0 * 4096 / 2;
  CHECK_REL(core_flops(m, w), 4 * pairs * 8 * 256, 1e-12);
  UNIT_CHECK_EQ_DBL(core_flops(m, full), core_flops(m, causal));
  CHECK_REL(core_flops(m, causal), 4 * 8192.0 * 8192 / 2 * 8 * 256, 1e-12);
  ir_module_free(m);
}

/* MoE: router 2 h E, then (top_k + shared) expert MLPs per token; parameters of all experts,
 * shared ones and the router. */
void test_cost_moe(void) {
  ir_module *m = new_module();
  int i = add_layer(m, "moe", IR_KIND_MOE,
                    "hidden=1024 experts=16 top_k=2 expert_ffn=512 shared_experts=1 seq=2048");
  double per_token = cost_forward_flops_per_sequence(m, &m->layers[i]) / 2048;
  CHECK_REL(per_token, 2.0 * 1024 * 16 + (2 + 1) * 3 * 2.0 * 1024 * 512, 1e-12);
  cost_estimate e = estimate(m, i);
  CHECK_REL(e.params, (16 + 1) * 3.0 * 1024 * 512 + 1024.0 * 16 + 1024, 1e-12);
  ir_module_free(m);
}

/* Korthikanti et al. 2022, equations 1 and 2: MHA (k = a, d = h / a), plain MLP with f = 4h,
 * flash off, dropout on, bf16: attention + MLP = 34 s b h + 5 a s^2 b at t = 1 and
 * s b h (10 + 24 / t + 5 a s / (h t)) at t > 1. */
void test_cost_korthikanti(void) {
  const double s = 2048, b = 2, h = 1024, a = 16;
  for (int t = 1; t <= 8; t *= 2) {
    ir_module *m = new_module();
    ir_field_set(&m->train, IR_F_TRAIN_tensor, t);
    ir_field_set(&m->train, IR_F_TRAIN_micro_batch, b);
    ir_field_set(&m->train, IR_F_TRAIN_flash, 0);
    ir_field_set(&m->train, IR_F_TRAIN_dropout, 1);
    int at = add_layer(m, "attn", IR_KIND_ATTENTION, "hidden=1024 heads=16 seq=2048");
    int ml = add_layer(m, "mlp", IR_KIND_MLP, "hidden=1024 ffn=4096 gated=0 act=2 seq=2048");
    double got = estimate(m, at).act + estimate(m, ml).act;
    double want = t == 1 ? 34 * s * b * h + 5 * a * s * s * b
                         : s * b * h * (10 + 24.0 / t + 5 * a * s / (h * t));
    if (t == 1 || t == 4)
      printf("cost: korthikanti t=%d: attention+mlp act = %.0f bytes, paper %.0f\n", t, got, want);
    CHECK_REL(got, want, 1e-12);
    /* with flash attention and no dropout the score and mask terms go: 34 - 2 - 10 ... */
    ir_field_set(&m->train, IR_F_TRAIN_flash, 1);
    ir_field_set(&m->train, IR_F_TRAIN_dropout, 0);
    double flash = estimate(m, at).act + estimate(m, ml).act;
    CHECK_REL(flash, s * b * h * (8 + 24.0 / t), 1e-12);
    ir_module_free(m);
  }
}

/* Bytes per parameter: bf16 + Adam 16 (2 + 2 + 12), with fp32 gradient buffers 18, ZeRO-1 over
 * 4 replicas 2 + 2 + 3 = 7, fp32 + Adam 16 (4 + 4 + 8), bf16 + SGD 12, fp32 + SGD 12, fp8 16. */
void test_cost_bytes_per_param(void) {
  ir_module *m = new_module();
  double g;
  CHECK_REL(cost_bytes_per_param(m, &g), 16, 0);
  UNIT_CHECK_EQ_DBL(g, 2);
  ir_field_set(&m->train, IR_F_TRAIN_fp32_grads, 1);
  CHECK_REL(cost_bytes_per_param(m, &g), 18, 0);
  UNIT_CHECK_EQ_DBL(g, 4);
  ir_field_set(&m->train, IR_F_TRAIN_fp32_grads, 0);
  ir_field_set(&m->train, IR_F_TRAIN_zero, 1);
  ir_field_set(&m->train, IR_F_TRAIN_data, 4);
  CHECK_REL(cost_bytes_per_param(m, NULL), 7, 0);
  ir_field_set(&m->train, IR_F_TRAIN_zero, 0);
  CHECK_REL(cost_bytes_per_param(m, NULL), 16, 0);
  ir_field_set(&m->train, IR_F_TRAIN_dtype, IR_DTYPE_FP32);
  CHECK_REL(cost_bytes_per_param(m, &g), 16, 0);
  UNIT_CHECK_EQ_DBL(g, 4);
  ir_field_set(&m->train, IR_F_TRAIN_optimizer, IR_OPTIMIZER_SGD);
  CHECK_REL(cost_bytes_per_param(m, NULL), 12, 0);
  ir_field_set(&m->train, IR_F_TRAIN_dtype, IR_DTYPE_BF16);
  CHECK_REL(cost_bytes_per_param(m, NULL), 12, 0);
  ir_field_set(&m->train, IR_F_TRAIN_optimizer, IR_OPTIMIZER_ADAM);
  ir_field_set(&m->train, IR_F_TRAIN_dtype, IR_DTYPE_FP8);
  CHECK_REL(cost_bytes_per_param(m, NULL), 16, 0);
  /* an estimate: param and grad bytes of a Llama MLP (3 h f + h weights) */
  ir_field_set(&m->train, IR_F_TRAIN_dtype, IR_DTYPE_BF16);
  int i = add_layer(m, "mlp", IR_KIND_MLP, LLAMA_MLP);
  cost_estimate e = estimate(m, i);
  double n = 3.0 * 4096 * 14336 + 4096;
  UNIT_CHECK_EQ_DBL(e.params, n);
  UNIT_CHECK_EQ_DBL(e.param_bytes, 16 * n);
  UNIT_CHECK_EQ_DBL(e.grad_bytes, 2 * n);
  ir_module_free(m);
}

/* Tensor parallelism: GEMM and core FLOPs divide by t, norms and the router stay; weights of
 * split matrices divide by t, norms do not; two all-reduces of b s h e bytes (F and B) per
 * block, timed by the ring formula. */
void test_cost_tensor_parallel(void) {
  ir_module *m1 = new_module(), *m4 = new_module();
  ir_field_set(&m4->train, IR_F_TRAIN_tensor, 4);
  int a1 = add_layer(m1, "attn", IR_KIND_ATTENTION, LLAMA_ATTN);
  int a4 = add_layer(m4, "attn", IR_KIND_ATTENTION, LLAMA_ATTN);
  cost_estimate e1 = estimate(m1, a1), e4 = estimate(m4, a4);
  for (int k = 0; k < COST_NPASS; k++) CHECK_REL(e4.flops[k], e1.flops[k] / 4, 1e-12);
  double matrices = 4096.0 * (32 + 2 * 8) * 128 + 32.0 * 128 * 4096;
  UNIT_CHECK_EQ_DBL(e1.params, matrices + 4096);
  UNIT_CHECK_EQ_DBL(e4.params, matrices / 4 + 4096);
  double bytes = 4096.0 * 4096 * 2; /* b s h e */
  double ring = 2 * 3.0 / 4 * bytes / 450e9 + 2 * 3 * 3e-6;
  CHECK_REL(e4.comm[COST_F], ring, 1e-12);
  CHECK_REL(e4.comm[COST_B], ring, 1e-12);
  UNIT_CHECK(e4.comm[COST_W] == 0 && e1.comm[COST_F] == 0);
  /* norm inputs and the QKV input (width h) are not split; Q, K, V, out-proj input are */
  CHECK_REL(e4.act, 4096.0 * 4096 * 2 * (2 + (1 + 0.25 + 0.25 + 1) / 4), 1e-12);
  /* the LM head: one all-reduce, in B */
  int h4 = add_layer(m4, "head", IR_KIND_LM_HEAD, "hidden=4096 vocab=128256 seq=4096");
  cost_estimate eh = estimate(m4, h4);
  UNIT_CHECK(eh.comm[COST_F] == 0 && eh.comm[COST_W] == 0);
  CHECK_REL(eh.comm[COST_B], ring, 1e-12);
  /* without an intra link, tensor parallelism cannot be timed */
  memset(&m4->intra, 0, sizeof m4->intra);
  cost_estimate e;
  const char *why = NULL;
  UNIT_CHECK(cost_estimate_layer(m4, &m4->layers[a4], &m4->devices[0].rec, &e, &why) == -1);
  UNIT_CHECK_STREQ(why, "intra link");
  ir_module_free(m1);
  ir_module_free(m4);
}

/* Roofline: a tiny layer is bandwidth-bound (time = bytes / hbm), a large GEMM compute-bound
 * (time = FLOPs / (peak x efficiency)). */
void test_cost_roofline(void) {
  ir_module *m = new_module();
  int tiny = add_layer(m, "tiny", IR_KIND_MLP, "hidden=64 ffn=256 gated=0 seq=16");
  int big = add_layer(m, "big", IR_KIND_MLP, "hidden=8192 ffn=32768 gated=0 seq=8192");
  cost_estimate t = estimate(m, tiny), b = estimate(m, big);
  for (int k = 0; k < COST_NPASS; k++) CHECK_REL(t.time[k], t.bytes[k] / 3.35e12, 1e-12);
  UNIT_CHECK(t.time[COST_F] > t.flops[COST_F] / (989e12 * 0.5));
  /* the big MLP: GEMMs compute-bound, its activation part bandwidth-bound */
  cost_breakdown bd;
  cost_layer_breakdown(m, &m->layers[big], &bd);
  double want = 0;
  for (int k = 0; k < bd.nparts; k++)
    want += bd.parts[k].kind == COST_PART_GEMM ? bd.parts[k].flops[COST_F] / (989e12 * 0.5)
                                               : bd.parts[k].bytes[COST_F] / 3.35e12;
  CHECK_REL(b.time[COST_F], want, 1e-12);
  printf("cost: roofline: tiny mlp F %.3g us (bandwidth-bound), big mlp F %.3g ms\n",
         t.time[COST_F] * 1e6, b.time[COST_F] * 1e3);
  /* a device without hbm cannot time an analytic layer */
  ir_device_rec nohbm = m->devices[0].rec;
  nohbm.set &= ~((uint64_t)1 << (IR_F_DEVICE_hbm - IR_F_DEVICE_peak));
  cost_estimate e;
  const char *why = NULL;
  UNIT_CHECK(cost_estimate_layer(m, &m->layers[tiny], &nohbm, &e, &why) == -1);
  UNIT_CHECK_STREQ(why, "hbm");
  ir_module_free(m);
}

/* Recomputation: selective drops the score-matrix terms and adds the attention core's forward
 * to B; full keeps the layer input only (also as act_w) and adds all of F to B. */
void test_cost_recompute(void) {
  ir_module *m = new_module();
  ir_field_set(&m->train, IR_F_TRAIN_flash, 0);
  ir_field_set(&m->train, IR_F_TRAIN_dropout, 1);
  int a = add_layer(m, "attn", IR_KIND_ATTENTION, "hidden=1024 heads=16 seq=2048");
  int h = add_layer(m, "head", IR_KIND_LM_HEAD, "hidden=1024 vocab=32000 seq=2048");
  cost_estimate none = estimate(m, a), hnone = estimate(m, h);
  double score = act_terms(m, a, COST_ACT_SCORE);
  CHECK_REL(score, 5 * 16 * 2048.0 * 2048, 1e-12);
  ir_field_set(&m->train, IR_F_TRAIN_recompute, IR_RECOMPUTE_SELECTIVE);
  cost_estimate sel = estimate(m, a);
  CHECK_REL(sel.act, none.act - score, 1e-12);
  UNIT_CHECK_EQ_DBL(sel.act_w, none.act_w);
  UNIT_CHECK(sel.time[COST_B] > none.time[COST_B]);
  UNIT_CHECK_EQ_DBL(sel.time[COST_F], none.time[COST_F]);
  CHECK_REL(sel.flops[COST_B], none.flops[COST_B] + core_flops(m, a), 1e-12);
  ir_field_set(&m->train, IR_F_TRAIN_recompute, IR_RECOMPUTE_FULL);
  cost_estimate full = estimate(m, a), hfull = estimate(m, h);
  UNIT_CHECK_EQ_DBL(full.act, 2048.0 * 1024 * 2);
  UNIT_CHECK_EQ_DBL(full.act_w, full.act);
  CHECK_REL(full.time[COST_B], none.time[COST_B] + none.time[COST_F], 1e-12);
  /* the LM head is not recomputed */
  UNIT_CHECK_EQ_DBL(hfull.act, hnone.act);
  UNIT_CHECK_EQ_DBL(hfull.time[COST_B], hnone.time[COST_B]);
  ir_module_free(m);
}

/* Output bytes and act_w: hidden-state layers send b s h e; the LM head with the loss sends
 * nothing and keeps fp32 logits, without it sends b s V e; the embedding keeps nothing. */
void test_cost_outputs(void) {
  ir_module *m = new_module();
  int emb = add_layer(m, "embed", IR_KIND_EMBEDDING, "hidden=1024 vocab=32000 seq=2048");
  int head = add_layer(m, "head", IR_KIND_LM_HEAD, "hidden=1024 vocab=32000 seq=2048");
  int noloss = add_layer(m, "logits", IR_KIND_LM_HEAD, "hidden=1024 vocab=32000 seq=2048 loss=0");
  int vit = add_layer(m, "vit", IR_KIND_VIT, "hidden=1024 heads=16 ffn=4096");
  cost_estimate ee = estimate(m, emb), eh = estimate(m, head), en = estimate(m, noloss),
                ev = estimate(m, vit);
  UNIT_CHECK_EQ_DBL(ee.out, 2048.0 * 1024 * 2);
  UNIT_CHECK(ee.act == 0 && ee.act_w == 0 && ee.flops[COST_F] == 0 && ee.time[COST_B] == 0);
  UNIT_CHECK(ee.time[COST_W] > 0);
  UNIT_CHECK_EQ_DBL(eh.out, 0);
  UNIT_CHECK_EQ_DBL(eh.act, 2048.0 * 1024 * 2 + 2048.0 * 32000 * 4);
  UNIT_CHECK_EQ_DBL(eh.act_w, 2048.0 * 1024 * 2);
  UNIT_CHECK_EQ_DBL(en.out, 2048.0 * 32000 * 2);
  UNIT_CHECK_EQ_DBL(ev.out, 577.0 * 1024 * 2);
  ir_module_free(m);
}

/* Custom layers pass their numbers through: f, b, w, act, out; act_w = 0; param and grad bytes
 * from the parameter count. No device property is needed. */
void test_cost_custom(void) {
  ir_module *m = new_module();
  int c = add_layer(m, "c", IR_KIND_CUSTOM,
                    "f=0.0012 b=0.0011 w=0.0009 act=536870912 out=33554432 params=200000000");
  ir_device_rec empty = {0};
  cost_estimate e;
  const char *why = NULL;
  UNIT_CHECK(cost_estimate_layer(m, &m->layers[c], &empty, &e, &why) == 0);
  UNIT_CHECK_EQ_DBL(e.time[COST_F], 0.0012);
  UNIT_CHECK_EQ_DBL(e.time[COST_B], 0.0011);
  UNIT_CHECK_EQ_DBL(e.time[COST_W], 0.0009);
  UNIT_CHECK_EQ_DBL(e.act, 536870912);
  UNIT_CHECK_EQ_DBL(e.act_w, 0);
  UNIT_CHECK_EQ_DBL(e.out, 33554432);
  UNIT_CHECK_EQ_DBL(e.param_bytes, 16 * 200e6);
  UNIT_CHECK_EQ_DBL(e.grad_bytes, 2 * 200e6);
  ir_module_free(m);
}

/* cost_run: fills complete records; keeps complete ones with overwrite = false; a module
 * without devices is an error unless every layer to estimate is custom. */
void test_cost_run(void) {
  FILE *sink = tmpfile();
  diag_engine *d = diag_new(sink);
  ir_module *m = new_module();
  int a = add_layer(m, "attn", IR_KIND_ATTENTION, LLAMA_ATTN);
  int f = add_layer(m, "mlp", IR_KIND_MLP, LLAMA_MLP);
  UNIT_CHECK(cost_run(m, true, d) == 0);
  UNIT_CHECK(m->layers[a].cost.set == m->layers[f].cost.set && m->layers[a].cost.set == 0xff);
  cost_estimate e = estimate(m, a);
  UNIT_CHECK(fabs(m->layers[a].cost.f - e.time[COST_F]) <= 0.5e-9); /* to the ns */
  UNIT_CHECK_EQ_DBL(m->layers[a].cost.act_w, e.act_w);
  m->layers[a].cost.f = 1;
  UNIT_CHECK(cost_run(m, false, d) == 0);
  UNIT_CHECK_EQ_DBL(m->layers[a].cost.f, 1);
  UNIT_CHECK(cost_run(m, true, d) == 0);
  UNIT_CHECK(fabs(m->layers[a].cost.f - e.time[COST_F]) <= 0.5e-9); /* to the ns */
  ir_module_free(m);

  ir_module *nodev = ir_module_new("nodev");
  ir_field_set(&nodev->train, IR_F_TRAIN_micro_batch, 1);
  add_layer(nodev, "c", IR_KIND_CUSTOM, "f=0.001 b=0.002");
  UNIT_CHECK(cost_run(nodev, true, d) == 0);
  UNIT_CHECK(nodev->layers[0].cost.set == 0xff);
  add_layer(nodev, "mlp", IR_KIND_MLP, LLAMA_MLP);
  UNIT_CHECK(cost_run(nodev, true, d) == 1);
  UNIT_CHECK(nodev->layers[1].cost.set == 0);
  ir_module_free(nodev);
  diag_free(d);
  fclose(sink);
}

/* The profile reader on random edits of a valid profile (deterministic): it never crashes or
 * leaks, reports errors or accepts the file, and an accepted file leaves act_w <= act. */
void test_cost_profile_mutations(void) {
  static const char base[] =
      "{\"format\": \"octopipe-profile\", \"version\": 1, \"micro_batch\": 1, \"dtype\": \"bf16\",\n"
      " \"kinds\": {\"mlp\": {\"f_ms\": 0.5, \"act_bytes\": 1e6, \"act_w_bytes\": 5e5}},\n"
      " \"layers\": {\"attn\": {\"b_ms\": 2, \"out_bytes\": 64}, \"mlp\": {\"w_ms\": 0}}}\n";
  static const char edits[] = "{}[]\",:\\ 0-1.eE\n\tu\"xtruefalsenull_abfkmsw0123456789";
  char path[] = "/tmp/octo_cost_profile_XXXXXX";
  int fd = mkstemp(path);
  UNIT_CHECK(fd >= 0);
  if (fd < 0) return;
  close(fd);
  FILE *sink = tmpfile();
  diag_engine *d = diag_new(sink);
  unsigned seed = 12345;
  int accepted = 0;
  for (int round = 0; round < 400; round++) {
    char text[sizeof base + 8];
    memcpy(text, base, sizeof base);
    size_t len = sizeof base - 1;
    for (int k = 0; k < 1 + round % 3; k++) {
      seed = seed * 1103515245u + 12345u;
      size_t at = (seed >> 8) % len;
      seed = seed * 1103515245u + 12345u;
      char ch = edits[(seed >> 8) % (sizeof edits - 1)];
      if (round % 5 == 0 && len > 1) { /* delete */
        memmove(text + at, text + at + 1, len - at);
        len--;
      } else {
        text[at] = ch;
      }
    }
    FILE *f = fopen(path, "wb");
    UNIT_CHECK(f != NULL);
    if (!f) break;
    fwrite(text, 1, len, f);
    fclose(f);
    ir_module *m = new_module();
    add_layer(m, "attn", IR_KIND_ATTENTION, "hidden=64 heads=4 seq=16");
    add_layer(m, "mlp", IR_KIND_MLP, "hidden=64 ffn=256 seq=16");
    UNIT_CHECK(cost_run(m, true, d) == 0);
    if (cost_profile_apply(m, path, NULL, diag_mkloc(0, 0, 0, 0), d) == 0) {
      accepted++;
      for (int i = 0; i < m->nlayers; i++) UNIT_CHECK(m->layers[i].cost.act_w <= m->layers[i].cost.act);
    }
    ir_module_free(m);
  }
  printf("cost: profile mutations: %d of 400 accepted\n", accepted);
  UNIT_CHECK(accepted > 0 && accepted < 400);
  diag_free(d);
  fclose(sink);
  remove(path);
}
