/* cost.c -- the analytic cost model: for each layer kind a list of parts (weight GEMMs,
 * weight-less cores, memory-bound element-wise work) with their FLOPs and HBM bytes per pass,
 * the activation terms it keeps (Korthikanti et al. 2022), its parameters and its
 * tensor-parallel all-reduces; a roofline time per part on the device; recomputation; bytes per
 * parameter; and the cost pass driver (cost_run). docs/cost-model.md gives every formula with
 * its source and names the same parts. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cost.h"

/* ---- Precision and optimizer tables (keyed off ir/enums.def) ---- */

/* Byte sizes of one training precision. */
typedef struct cost_dtype_info {
  double act;    /* bytes of an activation element */
  double weight; /* bytes of a weight element as the GEMMs read it */
  double grad;   /* bytes of a gradient element (without fp32_grads) */
  double master; /* bytes of the fp32 master copy the optimizer keeps (0: weights are fp32) */
} cost_dtype_info;

/* One row per data type of enums.def: a new data type without a row here does not compile. */
#define COST_DTYPE_FP32 {4, 4, 4, 0}
#define COST_DTYPE_TF32 {4, 4, 4, 0}
#define COST_DTYPE_BF16 {2, 2, 2, 4}
#define COST_DTYPE_FP16 {2, 2, 2, 4}
#define COST_DTYPE_FP8 {2, 2, 2, 4} /* fp8 GEMMs, bf16 weights and activations elsewhere */
#define COST_ENUM_ACT(ID)
#define COST_ENUM_DTYPE(ID) [IR_DTYPE_##ID] = COST_DTYPE_##ID,
#define COST_ENUM_OPTIMIZER(ID)
#define COST_ENUM_RECOMPUTE(ID)
#define COST_ENUM_BACKEND(ID)
#define IR_ENUM(T, ID, S, DOC) COST_ENUM_##T(ID)
static const cost_dtype_info cost_dtypes[] = {
#include "enums.def"
};
#undef COST_ENUM_DTYPE
#define COST_ENUM_DTYPE(ID)

/* Optimizer state bytes per parameter besides the fp32 master copy. */
#define COST_OPTIMIZER_ADAM 8 /* two fp32 moments */
#define COST_OPTIMIZER_SGD 4  /* one fp32 momentum buffer */
#undef COST_ENUM_OPTIMIZER
#define COST_ENUM_OPTIMIZER(ID) [IR_OPTIMIZER_##ID] = COST_OPTIMIZER_##ID,
static const double cost_optimizer_state[] = {
#include "enums.def"
};
#undef COST_ENUM_OPTIMIZER
#undef IR_ENUM

#define COST_NDTYPES (int)(sizeof cost_dtypes / sizeof cost_dtypes[0])
#define COST_NOPTIMIZERS (int)(sizeof cost_optimizer_state / sizeof cost_optimizer_state[0])

/* ---- Training set-up as the formulas see it ---- */

/* The numbers of m->train the formulas use (unset fields at their records.def defaults). */
typedef struct cost_setup {
  double b;     /* sequences per microbatch */
  double t;     /* tensor-parallel degree */
  double e;     /* bytes of an activation element */
  double we;    /* bytes of a weight element */
  bool flash;   /* fused attention: no score matrix is stored */
  bool dropout; /* dropout masks are kept */
} cost_setup;

/* Value of train field f, at its default when unset. */
static double train_value(const ir_module *m, int f) { return ir_field_value(&m->train, f); }

/* Row of the training dtype (bf16 when out of range, which a verified module never is). */
static const cost_dtype_info *setup_dtype(const ir_module *m) {
  int dt = (int)train_value(m, IR_F_TRAIN_dtype);
  return &cost_dtypes[dt >= 0 && dt < COST_NDTYPES ? dt : IR_DTYPE_BF16];
}

/* Set-up of m. Pre: micro_batch, tensor >= 1 (cost_run checks). */
static cost_setup setup_of(const ir_module *m) {
  const cost_dtype_info *dt = setup_dtype(m);
  cost_setup su = {train_value(m, IR_F_TRAIN_micro_batch), train_value(m, IR_F_TRAIN_tensor),
                   dt->act, dt->weight, train_value(m, IR_F_TRAIN_flash) != 0,
                   train_value(m, IR_F_TRAIN_dropout) != 0};
  if (!(su.b >= 1)) su.b = 1;
  if (!(su.t >= 1)) su.t = 1;
  return su;
}

double cost_bytes_per_param(const ir_module *m, double *grad) {
  const cost_dtype_info *dt = setup_dtype(m);
  double g = train_value(m, IR_F_TRAIN_fp32_grads) != 0 ? 4 : dt->grad;
  int opt = (int)train_value(m, IR_F_TRAIN_optimizer);
  double state = dt->master + cost_optimizer_state[opt >= 0 && opt < COST_NOPTIMIZERS ? opt : 0];
  double data = train_value(m, IR_F_TRAIN_data);
  if (train_value(m, IR_F_TRAIN_zero) >= 1 && data > 1) state /= data;
  if (grad) *grad = g;
  return dt->weight + g + state;
}

double cost_act_elem_bytes(const ir_module *m) { return setup_dtype(m)->act; }

/* ---- Building a breakdown ---- */

/* Append a part; divides its numbers by t when split. */
static void add_part(cost_breakdown *bd, const cost_setup *su, const char *name,
                     cost_part_kind kind, bool split, bool attn_core, const double flops[3],
                     const double bytes[3]) {
  if (bd->nparts >= COST_MAX_PARTS) return; /* cannot happen: the kinds below add fewer */
  cost_part *p = &bd->parts[bd->nparts++];
  double div = split ? su->t : 1;
  p->name = name;
  p->kind = kind;
  p->tp_split = split;
  p->attn_core = attn_core;
  for (int i = 0; i < COST_NPASS; i++) {
    p->flops[i] = flops[i] / div;
    p->bytes[i] = bytes[i] / div;
  }
}

/* A weight GEMM [M x K] x [K x N] reading 'nweights' weight matrices of K x N (more than one
 * for routed experts): forward FLOPs G = 2MKN in each of F, B, W; bytes = input + weights +
 * output in every pass (B reads dY and W, writes dX; W reads X and dY, writes dW). */
static void gemm(cost_breakdown *bd, const cost_setup *su, const char *name, double M, double K,
                 double N, double nweights, bool split) {
  double g = 2 * M * K * N;
  double by = (M * K + M * N) * su->e + nweights * K * N * su->we;
  const double flops[3] = {g, g, g}, bytes[3] = {by, by, by};
  add_part(bd, su, name, COST_PART_GEMM, split, false, flops, bytes);
  double kn = split ? fmax(K, N) / su->t : fmax(K, N);
  bd->parts[bd->nparts - 1].size = fmin(M, fmin(kn, fmin(K, N)));
}

/* A weight-less core of forward FLOPs C and forward bytes 'by': C in F, 2C in B (gradients of
 * both operands), none in W; B moves twice the bytes. Always split by tensor parallelism. */
static void core(cost_breakdown *bd, const cost_setup *su, const char *name, double c, double by,
                 bool attn_core) {
  const double flops[3] = {c, 2 * c, 0}, bytes[3] = {by, 2 * by, 0};
  add_part(bd, su, name, COST_PART_CORE, true, attn_core, flops, bytes);
}

/* Memory-bound element-wise work: no FLOPs counted, bytes of F, B and W. */
static void elem(cost_breakdown *bd, const cost_setup *su, const char *name, double bf,
                 double bb, double bw, bool split, bool attn_core) {
  const double flops[3] = {0, 0, 0}, bytes[3] = {bf, bb, bw};
  add_part(bd, su, name, COST_PART_ELEM, split, attn_core, flops, bytes);
}

/* Append an activation term of 'bytes' (before tensor parallelism). */
static void act(cost_breakdown *bd, const cost_setup *su, const char *name, double bytes,
                unsigned flags) {
  if (bd->nact >= COST_MAX_ACT) return; /* cannot happen: the kinds below add fewer */
  cost_act_term *a = &bd->act[bd->nact++];
  a->name = name;
  a->bytes = flags & COST_ACT_SPLIT ? bytes / su->t : bytes;
  a->flags = flags;
}

/* Count 'n' parameters, divided by t when split. */
static void weights(cost_breakdown *bd, const cost_setup *su, double n, bool split) {
  bd->params += split ? n / su->t : n;
}

/* One all-reduce of the b x s x hidden activation in F and one in B (Megatron's f and g
 * operators around a tensor-parallel block). */
static void allreduce_fb(cost_breakdown *bd, const cost_setup *su, double tokens, double h) {
  if (su->t <= 1) return;
  bd->allreduces[COST_F]++;
  bd->allreduces[COST_B]++;
  bd->allreduce_bytes = tokens * h * su->e;
}

/* Attended (query, key) pairs of one sequence of s tokens: s^2 without a mask, s^2 / 2 when
 * causal (the usual halving: exactly s(s+1)/2); a window w < s keeps s w - w^2 / 2 causal pairs
 * (exactly s w - w(w-1)/2) or s(2w - 1) - w(w - 1) pairs within distance w when not causal. */
static double attn_pairs(double s, bool causal, double window) {
  if (window > 0 && window < s)
    return causal ? s * window - window * window / 2 : s * (2 * window - 1) - window * (window - 1);
  return causal ? s * s / 2 : s * s;
}

/* Self-attention with its norm over s tokens per sequence: a query heads, k key/value heads of
 * width d, hidden h. Parts attn_norm, qkv, core_qk, [softmax], core_pv, out_proj. */
static void attention_block(cost_breakdown *bd, const cost_setup *su, double h, double a,
                            double k, double d, double s, bool causal, double window,
                            bool qkv_bias, bool qk_norm) {
  double tok = su->b * s, e = su->e, sq = su->b * a * s * s; /* score-matrix elements */
  double c = 2 * su->b * attn_pairs(s, causal, window) * a * d; /* FLOPs of QK^T, and of PV */
  elem(bd, su, "attn_norm", 2 * tok * h * e, 3 * tok * h * e, 0, false, false);
  gemm(bd, su, "qkv", tok, h, (a + 2 * k) * d, 1, true);
  core(bd, su, "core_qk", c, tok * (a + k) * d * e + (su->flash ? 0 : sq * e), true);
  if (!su->flash) elem(bd, su, "softmax", 2 * sq * e, 3 * sq * e, 0, true, true);
  core(bd, su, "core_pv", c, tok * (k + a) * d * e + (su->flash ? 0 : sq * e), true);
  gemm(bd, su, "out_proj", tok, a * d, h, 1, true);
  weights(bd, su, h * (a + 2 * k) * d + a * d * h + (qkv_bias ? (a + 2 * k) * d : 0), true);
  weights(bd, su, h + (qk_norm ? 2 * d : 0), false); /* the RMSNorms: input, q and k heads */
  allreduce_fb(bd, su, tok, h);
  if (qk_norm) {
    elem(bd, su, "qk_norm", 2 * tok * (a + k) * d * e, 3 * tok * (a + k) * d * e, 0, true, false);
    act(bd, su, "qk_norm_in", tok * (a + k) * d * e, COST_ACT_SPLIT);
  }

  act(bd, su, "attn_norm_in", tok * h * e, COST_ACT_INPUT);
  act(bd, su, "qkv_in", tok * h * e, COST_ACT_W);
  act(bd, su, "q", tok * a * d * e, COST_ACT_SPLIT);
  act(bd, su, "kv", 2 * tok * k * d * e, COST_ACT_SPLIT);
  if (!su->flash) {
    act(bd, su, "softmax_out", sq * e, COST_ACT_SPLIT | COST_ACT_SCORE);
    if (su->dropout) {
      act(bd, su, "softmax_dropout_mask", sq, COST_ACT_SPLIT | COST_ACT_SCORE);
      act(bd, su, "softmax_dropout_out", sq * e, COST_ACT_SPLIT | COST_ACT_SCORE);
    }
  }
  act(bd, su, "out_proj_in", tok * a * d * e, COST_ACT_SPLIT | COST_ACT_W);
  if (su->dropout) act(bd, su, "attn_dropout_mask", tok * h, 0);
}

/* Names of the parts and terms of one feed-forward network, per use. */
typedef struct ffn_names {
  const char *gate, *up, *down, *fc1, *fc2, *act;              /* parts */
  const char *gate_out, *up_out, *down_in, *act_in, *fc2_in;   /* activation terms */
} ffn_names;
static const ffn_names ffn_dense = {"gate", "up", "down", "fc1", "fc2", "act",
                                    "gate_out", "up_out", "down_in", "act_in", "fc2_in"};
static const ffn_names ffn_expert = {"expert_gate", "expert_up", "expert_down", "expert_fc1",
                                     "expert_fc2", "expert_act", "expert_gate_out",
                                     "expert_up_out", "expert_down_in", "expert_act_in",
                                     "expert_fc2_in"};
static const ffn_names ffn_shared = {"shared_gate", "shared_up", "shared_down", "shared_fc1",
                                     "shared_fc2", "shared_act", "shared_gate_out",
                                     "shared_up_out", "shared_down_in", "shared_act_in",
                                     "shared_fc2_in"};

/* A feed-forward network h -> f -> h over 'rows' token rows, reading 'nw' copies of each weight
 * matrix (experts that receive tokens), without its norm and input term (callers add them).
 * Gated: gate, up (h x f), act (silu(gate) * up), down (f x h); plain: fc1, act, fc2. */
static void ffn(cost_breakdown *bd, const cost_setup *su, const ffn_names *nm, double rows,
                double h, double f, bool gated, double nw) {
  double e = su->e;
  if (gated) {
    gemm(bd, su, nm->gate, rows, h, f, nw, true);
    gemm(bd, su, nm->up, rows, h, f, nw, true);
    elem(bd, su, nm->act, 3 * rows * f * e, 5 * rows * f * e, 0, true, false);
    gemm(bd, su, nm->down, rows, f, h, nw, true);
    act(bd, su, nm->gate_out, rows * f * e, COST_ACT_SPLIT);
    act(bd, su, nm->up_out, rows * f * e, COST_ACT_SPLIT);
    act(bd, su, nm->down_in, rows * f * e, COST_ACT_SPLIT | COST_ACT_W);
  } else {
    gemm(bd, su, nm->fc1, rows, h, f, nw, true);
    elem(bd, su, nm->act, 2 * rows * f * e, 3 * rows * f * e, 0, true, false);
    gemm(bd, su, nm->fc2, rows, f, h, nw, true);
    act(bd, su, nm->act_in, rows * f * e, COST_ACT_SPLIT);
    act(bd, su, nm->fc2_in, rows * f * e, COST_ACT_SPLIT | COST_ACT_W);
  }
}

/* Dense MLP with its norm: mlp_norm + ffn; input terms mlp_norm_in and mlp_in. */
static void mlp_block(cost_breakdown *bd, const cost_setup *su, double h, double f, bool gated,
                      double s, unsigned norm_flags) {
  double tok = su->b * s, e = su->e;
  elem(bd, su, "mlp_norm", 2 * tok * h * e, 3 * tok * h * e, 0, false, false);
  act(bd, su, "mlp_norm_in", tok * h * e, norm_flags);
  act(bd, su, "mlp_in", tok * h * e, COST_ACT_W);
  ffn(bd, su, &ffn_dense, tok, h, f, gated, 1);
  weights(bd, su, (gated ? 3 : 2) * h * f, true);
  weights(bd, su, h, false);
  allreduce_fb(bd, su, tok, h);
  if (su->dropout) act(bd, su, "mlp_dropout_mask", tok * h, 0);
}

/* Gemma's norm of a block's output before the residual add (post_norm), over s tokens of width
 * h: part and input term 'name' (an RMSNorm like the block's input norm) and its weight. */
static void post_norm(cost_breakdown *bd, const cost_setup *su, const char *name, double h,
                      double s) {
  double tok = su->b * s, e = su->e;
  elem(bd, su, name, 2 * tok * h * e, 3 * tok * h * e, 0, false, false);
  act(bd, su, name, tok * h * e, COST_ACT_W);
  weights(bd, su, h, false);
}

/* Parameter value of l as a double. */
#define P(ID) (l->p[IR_LP_##ID])

/* attention: the attention block over the layer's seq; outputs b s h e. Gemma's variants: the
 * score softcapping (softcap > 0) reads and writes the materialized scores once more in F and B
 * and keeps the tanh's output for B (fused into the flash kernel: nothing); post_norm (above).
 * score_dim only changes a factor; norm_plus_one changes no figure. */
static void kind_attention(cost_breakdown *bd, const cost_setup *su, const ir_layer *l) {
  double s = P(ATTENTION_SEQ), h = P(ATTENTION_HIDDEN);
  attention_block(bd, su, h, P(ATTENTION_HEADS), P(ATTENTION_KV_HEADS), P(ATTENTION_HEAD_DIM),
                  s, P(ATTENTION_CAUSAL) != 0, P(ATTENTION_WINDOW), P(ATTENTION_QKV_BIAS) != 0,
                  P(ATTENTION_QK_NORM) != 0);
  if (P(ATTENTION_SOFTCAP) > 0 && !su->flash) {
    double sq = su->b * P(ATTENTION_HEADS) * s * s * su->e; /* score-matrix bytes */
    elem(bd, su, "softcap", 2 * sq, 3 * sq, 0, true, true);
    act(bd, su, "softcap_out", sq, COST_ACT_SPLIT | COST_ACT_SCORE);
  }
  if (P(ATTENTION_POST_NORM) == 1) post_norm(bd, su, "attn_post_norm", h, s);
  bd->out = su->b * s * h * su->e;
}

/* mla: multi-head latent attention (DeepSeek-V2/V3) over the layer's seq, causal: a heads, the
 * query and key head width d = nope_dim + rope_dim, value heads of v_dim, latents of ranks q_rank
 * (0: none) and kv_rank, hidden h. Parts attn_norm, q (q_a, q_norm, q_b with a query latent),
 * kv_a, kv_norm, kv_b, core_qk, [softmax], core_pv, out_proj; outputs b s h e. Parameters as
 * transformers' DeepseekV2Attention holds them (with its input norm). */
static void kind_mla(cost_breakdown *bd, const cost_setup *su, const ir_layer *l) {
  double h = P(MLA_HIDDEN), a = P(MLA_HEADS), s = P(MLA_SEQ), qr = P(MLA_Q_RANK);
  double kvr = P(MLA_KV_RANK), dr = P(MLA_ROPE_DIM), d = P(MLA_NOPE_DIM) + dr, dv = P(MLA_V_DIM);
  double tok = su->b * s, e = su->e, sq = su->b * a * s * s, pairs = attn_pairs(s, true, 0);
  elem(bd, su, "attn_norm", 2 * tok * h * e, 3 * tok * h * e, 0, false, false);
  if (qr > 0) {
    gemm(bd, su, "q_a", tok, h, qr, 1, false);
    elem(bd, su, "q_norm", 2 * tok * qr * e, 3 * tok * qr * e, 0, false, false);
    gemm(bd, su, "q_b", tok, qr, a * d, 1, true);
  } else {
    gemm(bd, su, "q", tok, h, a * d, 1, true);
  }
  gemm(bd, su, "kv_a", tok, h, kvr + dr, 1, false);
  elem(bd, su, "kv_norm", 2 * tok * kvr * e, 3 * tok * kvr * e, 0, false, false);
  gemm(bd, su, "kv_b", tok, kvr, a * (d - dr + dv), 1, true);
  core(bd, su, "core_qk", 2 * su->b * pairs * a * d, tok * 2 * a * d * e + (su->flash ? 0 : sq * e),
       true);
  if (!su->flash) elem(bd, su, "softmax", 2 * sq * e, 3 * sq * e, 0, true, true);
  core(bd, su, "core_pv", 2 * su->b * pairs * a * dv, tok * a * dv * e + (su->flash ? 0 : sq * e),
       true);
  gemm(bd, su, "out_proj", tok, a * dv, h, 1, true);
  weights(bd, su, (qr > 0 ? qr * a * d : h * a * d) + kvr * a * (d - dr + dv) + a * dv * h, true);
  weights(bd, su, h + (qr > 0 ? h * qr + qr : 0) + h * (kvr + dr) + kvr, false);
  allreduce_fb(bd, su, tok, h);
  act(bd, su, "attn_norm_in", tok * h * e, COST_ACT_INPUT);
  act(bd, su, "latents", tok * (qr + kvr + dr) * 2 * e, COST_ACT_W);
  act(bd, su, "q", tok * a * d * e, COST_ACT_SPLIT);
  act(bd, su, "kv", tok * a * (d + dv) * e, COST_ACT_SPLIT);
  if (!su->flash) act(bd, su, "softmax_out", sq * e, COST_ACT_SPLIT | COST_ACT_SCORE);
  act(bd, su, "out_proj_in", tok * a * dv * e, COST_ACT_SPLIT | COST_ACT_W);
  bd->out = tok * h * e;
}

/* mlp: the MLP block with its norm (and Gemma's post_norm); outputs b s h e. */
static void kind_mlp(cost_breakdown *bd, const cost_setup *su, const ir_layer *l) {
  mlp_block(bd, su, P(MLP_HIDDEN), P(MLP_FFN), P(MLP_GATED) != 0, P(MLP_SEQ), COST_ACT_INPUT);
  if (P(MLP_POST_NORM) == 1) post_norm(bd, su, "mlp_post_norm", P(MLP_HIDDEN), P(MLP_SEQ));
  bd->out = su->b * P(MLP_SEQ) * P(MLP_HIDDEN) * su->e;
}

/* Mixture of experts: moe_norm, router (h x E, replicated), dispatch of top_k copies of each
 * token, the routed experts' FFNs over tokens x top_k rows, combine, and shared experts' FFNs
 * over every token. */
static void kind_moe(cost_breakdown *bd, const cost_setup *su, const ir_layer *l) {
  double h = P(MOE_HIDDEN), E = P(MOE_EXPERTS), k = P(MOE_TOP_K), f = P(MOE_EXPERT_FFN);
  double sh = P(MOE_SHARED), s = P(MOE_SEQ), tok = su->b * s, e = su->e;
  bool gated = P(MOE_GATED) != 0;
  double active = fmin(E, tok * k); /* experts that receive tokens: their weights are read */
  elem(bd, su, "moe_norm", 2 * tok * h * e, 3 * tok * h * e, 0, false, false);
  gemm(bd, su, "router", tok, h, E, 1, false);
  elem(bd, su, "dispatch", 2 * tok * k * h * e, 2 * tok * k * h * e, 0, false, false);
  act(bd, su, "moe_norm_in", tok * h * e, COST_ACT_INPUT);
  act(bd, su, "router_in", tok * h * e, COST_ACT_W);
  act(bd, su, "dispatched", tok * k * h * e, COST_ACT_W);
  ffn(bd, su, &ffn_expert, tok * k, h, f, gated, active);
  elem(bd, su, "combine", (k + 1) * tok * h * e, (k + 1) * tok * h * e, 0, false, false);
  if (sh > 0) ffn(bd, su, &ffn_shared, tok * sh, h, f, gated, sh);
  weights(bd, su, (E + sh) * (gated ? 3 : 2) * h * f, true);
  weights(bd, su, h * E + h, false);
  if (P(MOE_SHARED_GATE) == 1) weights(bd, su, h, false); /* Qwen2-MoE's shared_expert_gate */
  allreduce_fb(bd, su, tok, h);
  if (su->dropout) act(bd, su, "moe_dropout_mask", tok * h, 0);
  bd->out = tok * h * e;
}

/* Mamba-2 mixer (SSD): di = expand x hidden = heads x head_dim. Parts mamba_norm, in_proj
 * (z, x, B, C, dt), conv (causal depthwise), ssd (chunked scan), gate_norm (gated RMSNorm),
 * out_proj. */
static void kind_mamba2(cost_breakdown *bd, const cost_setup *su, const ir_layer *l) {
  double h = P(MAMBA2_HIDDEN), H = P(MAMBA2_HEADS), Pd = P(MAMBA2_HEAD_DIM);
  double N = P(MAMBA2_STATE), g = P(MAMBA2_GROUPS), cw = P(MAMBA2_CONV);
  double s = P(MAMBA2_SEQ), Q = fmin(P(MAMBA2_CHUNK), s), di = H * Pd;
  double tok = su->b * s, e = su->e;
  double proj = 2 * di + 2 * g * N + H; /* in_proj outputs: z, x, B, C, dt */
  double xbc = di + 2 * g * N;          /* channels of the convolution */
  /* per token: causal-halved C B^T within a chunk (Q N g) and its product with X (Q P H),
   * chunk states B^T X (2 N P H), state-to-output C h (2 N P H) */
  double ssd = Q * N * g + Q * Pd * H + 4 * N * Pd * H;
  elem(bd, su, "mamba_norm", 2 * tok * h * e, 3 * tok * h * e, 0, false, false);
  gemm(bd, su, "in_proj", tok, h, proj, 1, true);
  core(bd, su, "conv", 2 * tok * cw * xbc, 2 * tok * xbc * e, false);
  core(bd, su, "ssd", tok * ssd, tok * (2 * di + 2 * g * N + H) * e, false);
  elem(bd, su, "gate_norm", 3 * tok * di * e, 5 * tok * di * e, 0, true, false);
  gemm(bd, su, "out_proj", tok, di, h, 1, true);
  weights(bd, su, h * proj + xbc * (cw + 1) + 3 * H + di + di * h, true);
  weights(bd, su, h, false);
  allreduce_fb(bd, su, tok, h);

  act(bd, su, "mamba_norm_in", tok * h * e, COST_ACT_INPUT);
  act(bd, su, "in_proj_in", tok * h * e, COST_ACT_W);
  act(bd, su, "in_proj_out", tok * proj * e, COST_ACT_SPLIT);
  act(bd, su, "conv_out", tok * xbc * e, COST_ACT_SPLIT);
  act(bd, su, "ssd_out", tok * di * e, COST_ACT_SPLIT);
  act(bd, su, "out_proj_in", tok * di * e, COST_ACT_SPLIT | COST_ACT_W);
  bd->out = tok * h * e;
}

/* LM head with the final norm: logits GEMM (vocabulary split by tensor parallelism) and, with the loss, softmax
 * cross-entropy over fp32 logits. One all-reduce in B (the input gradient). Tied (tied = true):
 * the same work and memory (its stage holds its own copy of the matrix, as Megatron does), the
 * V x h matrix marked as a copy (tied_params). */
static void kind_lm_head(cost_breakdown *bd, const cost_setup *su, const ir_layer *l) {
  double h = P(LM_HEAD_HIDDEN), V = P(LM_HEAD_VOCAB), s = P(LM_HEAD_SEQ);
  double tok = su->b * s, e = su->e;
  bool loss = P(LM_HEAD_LOSS) != 0;
  gemm(bd, su, "logits", tok, h, V, 1, true);
  if (loss) elem(bd, su, "cross_entropy", tok * V * (e + 4), tok * V * (4 + e), 0, true, false);
  weights(bd, su, V * h, true);
  if (P(LM_HEAD_TIED) == 1) bd->tied_params = V * h / su->t; /* the embedding's table, copied */
  weights(bd, su, h, false); /* the final norm's weight (its element work, under 0.1% of the
                                logits' GEMM, is not charged) */
  if (su->t > 1) {
    bd->allreduces[COST_B]++;
    bd->allreduce_bytes = tok * h * e;
  }
  act(bd, su, "head_in", tok * h * e, COST_ACT_INPUT | COST_ACT_W);
  if (loss) act(bd, su, "logits_fp32", tok * V * 4, COST_ACT_SPLIT);
  if (P(LM_HEAD_SOFTCAP) > 0) { /* Gemma 2: the fp32 logits capped, the tanh's output kept */
    elem(bd, su, "logit_softcap", 2 * tok * V * 4, 3 * tok * V * 4, 0, true, false);
    act(bd, su, "logits_capped", tok * V * 4, COST_ACT_SPLIT);
  }
  bd->out = loss ? 0 : tok * V * e;
}

/* Embedding: F gathers b x s rows (read and write), B does nothing (the input is token ids), W
 * scatters the output gradient into the table (read it, read and write the rows). One
 * all-reduce in F (vocabulary-parallel table). Nothing is kept but the ids (counted as 0). */
static void kind_embedding(cost_breakdown *bd, const cost_setup *su, const ir_layer *l) {
  double h = P(EMBEDDING_HIDDEN), V = P(EMBEDDING_VOCAB), s = P(EMBEDDING_SEQ);
  double tok = su->b * s, e = su->e;
  elem(bd, su, "gather", 2 * tok * h * e, 0, 3 * tok * h * e, false, false);
  if (P(EMBEDDING_SCALED) == 1) /* Gemma's sqrt(hidden) factor: one more pass in F and W */
    elem(bd, su, "embed_scale", 2 * tok * h * e, 0, 2 * tok * h * e, false, false);
  weights(bd, su, V * h, true);
  if (su->t > 1) {
    bd->allreduces[COST_F]++;
    bd->allreduce_bytes = tok * h * e;
  }
  bd->out = tok * h * e;
}

/* ViT encoder layer (runtime/kernels/vit.c): non-causal multi-head attention and an MLP over
 * the tokens of b images, with the biases CLIP's layer has (q, k, v, o, fc1, fc2 and the two
 * LayerNorms'). An unused layer (LLaVA's after vision_feature_layer) holds the same weights and
 * does no work: its output is its input. */
static void kind_vit(cost_breakdown *bd, const cost_setup *su, const ir_layer *l) {
  double h = P(VIT_HIDDEN), a = P(VIT_HEADS), s = P(VIT_TOKENS), f = P(VIT_FFN);
  bool gated = P(VIT_GATED) != 0;
  cost_breakdown work;
  memset(&work, 0, sizeof work);
  attention_block(&work, su, h, a, a, P(VIT_HEAD_DIM), s, false, 0, true, false);
  mlp_block(&work, su, h, f, gated, s, 0);
  weights(&work, su, 4 * h + (gated ? 2 : 1) * f, false); /* o, fc2, LayerNorm biases; fc1's */
  if (P(VIT_UNUSED) == 1)
    bd->params = work.params;
  else
    *bd = work;
  bd->out = su->b * s * h * su->e;
}

/* Vision embedding (runtime/kernels/vit_embed.c): the patch projection (a GEMM over the b x
 * (image / patch)^2 unfolded patches of channels x patch^2 pixels), the class token and the
 * positions added, the LayerNorm. Weights: the projection, the class token, a position per
 * token, the LayerNorm's weight and bias. Kept: the patches (for W) and the norm's input. */
static void kind_vit_embed(cost_breakdown *bd, const cost_setup *su, const ir_layer *l) {
  double h = P(VIT_EMBED_HIDDEN), side = P(VIT_EMBED_IMAGE) / P(VIT_EMBED_PATCH);
  double np = side * side, s = np + 1, tok = su->b * s, e = su->e;
  double k = P(VIT_EMBED_CHANNELS) * P(VIT_EMBED_PATCH) * P(VIT_EMBED_PATCH);
  elem(bd, su, "unfold", 2 * su->b * np * k * e, 2 * su->b * np * k * e, 0, false, false);
  gemm(bd, su, "patch_proj", su->b * np, k, h, 1, false);
  elem(bd, su, "positions", 3 * tok * h * e, tok * h * e, 2 * tok * h * e, false, false);
  elem(bd, su, "pre_norm", 2 * tok * h * e, 3 * tok * h * e, 0, false, false);
  weights(bd, su, k * h + h + s * h + 2 * h, false);
  act(bd, su, "patches", su->b * np * k * e, COST_ACT_W);
  act(bd, su, "pre_norm_in", tok * h * e, 0);
  bd->out = tok * h * e;
}

/* Projector (runtime/kernels/projector.c): linear (in_hidden -> hidden, bias), activation,
 * linear (hidden -> hidden, bias) over the tokens it keeps (tokens, or tokens - 1 without the
 * class token). vision_norm adds the unused LayerNorm's 2 x in_hidden weights. */
static void kind_projector(cost_breakdown *bd, const cost_setup *su, const ir_layer *l) {
  double h = P(PROJECTOR_HIDDEN), v = P(PROJECTOR_IN_HIDDEN);
  double s = P(PROJECTOR_TOKENS) - (P(PROJECTOR_DROP_CLASS) == 1 ? 1 : 0);
  double tok = su->b * s, e = su->e;
  gemm(bd, su, "linear_1", tok, v, h, 1, false);
  elem(bd, su, "act", 2 * tok * h * e, 3 * tok * h * e, 0, false, false);
  gemm(bd, su, "linear_2", tok, h, h, 1, false);
  weights(bd, su, v * h + h + h * h + h, false);
  if (P(PROJECTOR_VISION_NORM) == 1) weights(bd, su, 2 * v, false);
  act(bd, su, "linear_1_in", tok * v * e, COST_ACT_INPUT | COST_ACT_W);
  act(bd, su, "act_in", tok * h * e, 0);
  act(bd, su, "linear_2_in", tok * h * e, COST_ACT_W);
  bd->out = tok * h * e;
}

#undef P

/* Breakdown of l under set-up su (the public functions choose su). Post: *bd is filled. */
static void breakdown(const ir_layer *l, const cost_setup *su, cost_breakdown *bd) {
  memset(bd, 0, sizeof *bd);
  switch (l->kind) {
  case IR_KIND_EMBEDDING: kind_embedding(bd, su, l); break;
  case IR_KIND_ATTENTION: kind_attention(bd, su, l); break;
  case IR_KIND_MLP: kind_mlp(bd, su, l); break;
  case IR_KIND_MOE: kind_moe(bd, su, l); break;
  case IR_KIND_MAMBA2: kind_mamba2(bd, su, l); break;
  case IR_KIND_LM_HEAD: kind_lm_head(bd, su, l); break;
  case IR_KIND_VIT: kind_vit(bd, su, l); break;
  case IR_KIND_MLA: kind_mla(bd, su, l); break;
  case IR_KIND_VIT_EMBED: kind_vit_embed(bd, su, l); break;
  case IR_KIND_PROJECTOR: kind_projector(bd, su, l); break;
  case IR_KIND_CUSTOM:
    bd->out = l->p[IR_LP_CUSTOM_OUT];
    bd->params = l->p[IR_LP_CUSTOM_PARAMS];
    break;
  case IR_KIND_COUNT: break;
  }
}

void cost_layer_breakdown(const ir_module *m, const ir_layer *l, cost_breakdown *bd) {
  cost_setup su = setup_of(m);
  breakdown(l, &su, bd);
}

/* The parameters of m's layers without tensor parallelism: all of them (*held) and the copies of
 * other layers' among them (*tied). */
static void module_parameters(const ir_module *m, double *held, double *tied) {
  cost_setup su = setup_of(m);
  su.t = 1;
  *held = *tied = 0;
  for (int i = 0; i < m->nlayers; i++) {
    cost_breakdown bd;
    breakdown(&m->layers[i], &su, &bd);
    *held += bd.params;
    *tied += bd.tied_params;
  }
}

double cost_module_parameters(const ir_module *m) {
  double held, tied;
  module_parameters(m, &held, &tied);
  return held - tied;
}

double cost_module_tied_parameters(const ir_module *m) {
  double held, tied;
  module_parameters(m, &held, &tied);
  return tied;
}

double cost_forward_flops_per_sequence(const ir_module *m, const ir_layer *l) {
  cost_setup su = setup_of(m);
  su.b = 1;
  su.t = 1;
  cost_breakdown bd;
  breakdown(l, &su, &bd);
  double f = 0;
  for (int i = 0; i < bd.nparts; i++) f += bd.parts[i].flops[COST_F];
  return f;
}

/* ---- Estimate on a device ---- */

/* Ring all-reduce of 'bytes' over t GPUs on a link: 2(t-1)/t x bytes / bw + 2(t-1) x lat. */
static double ring_allreduce(double t, double bytes, const ir_link_rec *link) {
  if (t <= 1) return 0;
  return 2 * (t - 1) / t * bytes / link->bw + 2 * (t - 1) * ir_field_value(link, IR_F_LINK_lat);
}

int cost_estimate_layer(const ir_module *m, const ir_layer *l, const ir_device_rec *dev,
                        cost_estimate *e, const char **why) {
  memset(e, 0, sizeof *e);
  cost_setup su = setup_of(m);
  double bpp_grad, bpp = cost_bytes_per_param(m, &bpp_grad);
  cost_breakdown bd;
  breakdown(l, &su, &bd);
  e->out = bd.out;
  e->params = bd.params;
  e->tied_params = bd.tied_params;
  e->param_bytes = bd.params * bpp;
  e->grad_bytes = bd.params * bpp_grad;
  if (l->kind == IR_KIND_CUSTOM) {
    e->time[COST_F] = l->p[IR_LP_CUSTOM_F];
    e->time[COST_B] = l->p[IR_LP_CUSTOM_B];
    e->time[COST_W] = l->p[IR_LP_CUSTOM_W];
    e->act = l->p[IR_LP_CUSTOM_ACT_MEM];
    return 0;
  }
  if (!ir_field_is_set(dev, IR_F_DEVICE_peak) || !(dev->peak > 0)) {
    *why = "peak";
    return -1;
  }
  if (!ir_field_is_set(dev, IR_F_DEVICE_hbm) || !(dev->hbm > 0)) {
    *why = "hbm";
    return -1;
  }
  if (su.t > 1 && (!ir_field_is_set(&m->intra, IR_F_LINK_bw) || !(m->intra.bw > 0))) {
    *why = "intra link";
    return -1;
  }
  double rate = dev->peak * ir_field_value(dev, IR_F_DEVICE_efficiency);
  double half = ir_field_value(dev, IR_F_DEVICE_gemm_half);
  double core_time = 0, core_flops = 0, core_bytes = 0; /* forward of the attention core */
  for (int i = 0; i < bd.nparts; i++) {
    const cost_part *p = &bd.parts[i];
    /* a small GEMM reaches less of the peak: efficiency x size / (size + gemm_half) */
    double r = half > 0 && p->size > 0 ? rate * p->size / (p->size + half) : rate;
    for (int k = 0; k < COST_NPASS; k++) {
      double t = fmax(p->flops[k] / r, p->bytes[k] / dev->hbm);
      e->flops[k] += p->flops[k];
      e->bytes[k] += p->bytes[k];
      e->time[k] += t;
      if (k == COST_F && p->attn_core) {
        core_time += t;
        core_flops += p->flops[k];
        core_bytes += p->bytes[k];
      }
    }
  }
  for (int k = 0; k < COST_NPASS; k++) {
    e->comm[k] = bd.allreduces[k] * ring_allreduce(su.t, bd.allreduce_bytes, &m->intra);
    e->time[k] += e->comm[k];
  }
  double all = 0, w = 0, kept = 0, input = 0;
  for (int i = 0; i < bd.nact; i++) {
    const cost_act_term *a = &bd.act[i];
    all += a->bytes;
    if (a->flags & COST_ACT_W) w += a->bytes;
    if (!(a->flags & COST_ACT_SCORE)) kept += a->bytes;
    if (a->flags & COST_ACT_INPUT) input += a->bytes;
  }
  e->act = all;
  e->act_w = w;
  int rc = (int)train_value(m, IR_F_TRAIN_recompute);
  if (ir_kind_recomputable(l->kind) && rc == IR_RECOMPUTE_SELECTIVE) {
    e->act = kept; /* W inputs are never score terms */
    e->flops[COST_B] += core_flops;
    e->bytes[COST_B] += core_bytes;
    e->time[COST_B] += core_time;
    e->core_time = core_time;
  } else if (ir_kind_recomputable(l->kind) && rc == IR_RECOMPUTE_FULL) {
    e->act = input;
    e->act_w = input;
    e->flops[COST_B] += e->flops[COST_F];
    e->bytes[COST_B] += e->bytes[COST_F];
    e->comm[COST_B] += e->comm[COST_F];
    e->time[COST_B] += e->time[COST_F];
  }
  return 0;
}

/* ---- The pass ---- */

/* Whether every field of a cost record is set but core (set only where selective
 * recomputation repeats an attention core). */
static bool cost_complete(const ir_cost *c) {
  int first, n;
  ir_record_fields(IR_REC_COST, &first, &n);
  for (int i = first; i < first + n; i++)
    if (i != IR_F_COST_core && !ir_field_is_set(c, i)) return false;
  return true;
}

/* A time rounded to the nanosecond and made exactly the value the IR reader gives for its text
 * in the unit of its size ("2.819417ms", "40.065us", "12ns"), so the IR prints it short. The
 * model is nowhere near that precise. */
static double whole_ns(double t) {
  double scale = t >= 1e-3 ? 1e-3 : t >= 1e-6 ? 1e-6 : 1e-9;
  double per_ns = scale == 1e-3 ? 1e6 : scale == 1e-6 ? 1e3 : 1;
  return scale_apply(round(t / scale * per_ns) / per_ns, scale);
}

/* Store an estimate in a layer's cost record (every field set, core only when selective
 * recomputation repeats some; times to the nanosecond, bytes whole). */
static void store(ir_cost *c, const cost_estimate *e) {
  memset(c, 0, sizeof *c);
  ir_field_set(c, IR_F_COST_f, whole_ns(e->time[COST_F]));
  ir_field_set(c, IR_F_COST_b, whole_ns(e->time[COST_B]));
  ir_field_set(c, IR_F_COST_w, whole_ns(e->time[COST_W]));
  ir_field_set(c, IR_F_COST_act, round(e->act));
  ir_field_set(c, IR_F_COST_act_w, round(e->act_w));
  ir_field_set(c, IR_F_COST_out, round(e->out));
  ir_field_set(c, IR_F_COST_param, round(e->param_bytes));
  ir_field_set(c, IR_F_COST_grad, round(e->grad_bytes));
  if (e->core_time > 0) ir_field_set(c, IR_F_COST_core, whole_ns(e->core_time));
}

/* Location of the train block, else of the module. */
static diag_loc train_loc(const ir_module *m) {
  return m->train_loc.src ? ir_diag_loc(m->train_loc) : ir_diag_loc(m->loc);
}

/* Check the train fields the formulas divide by or index with; returns the problems found. */
static int check_train(const ir_module *m, diag_engine *d) {
  static const int whole[] = {IR_F_TRAIN_micro_batch, IR_F_TRAIN_tensor, IR_F_TRAIN_data};
  int bad = 0;
  int free_f = ir_train_first_free(m);
  if (free_f >= 0) {
    diag_error(d, train_loc(m), "train '%s' is free: the config pass must choose the "
               "configuration first (octoc --search=config, or 'config' first in --passes)",
               ir_fields[free_f].name);
    return 1;
  }
  for (size_t i = 0; i < sizeof whole / sizeof whole[0]; i++) {
    double v = train_value(m, whole[i]);
    if (!(v >= 1)) {
      diag_error(d, train_loc(m), "the cost model needs train %s >= 1, found %g",
                 ir_fields[whole[i]].name, v);
      bad++;
    }
  }
  return bad;
}

/* Costs on the module's other device types (cost "TYPE" records): the analytic model on the
 * first device of each type. A custom layer's numbers are the same on every type; profiles
 * describe the first device's type. Layers kept by !overwrite keep complete records. */
static void other_types(ir_module *m, const bool *todo, bool overwrite, diag_engine *d) {
  for (int dv = 1; dv < m->ndevices; dv++) {
    const ir_device *x = &m->devices[dv];
    bool seen = strcmp(x->type, m->devices[0].type) == 0;
    for (int j = 1; j < dv && !seen; j++) seen = strcmp(m->devices[j].type, x->type) == 0;
    if (seen) continue;
    for (int i = 0; i < m->nlayers; i++) {
      ir_layer *l = &m->layers[i];
      const ir_cost *have = ir_layer_cost_on(m, l, dv);
      if (!todo[i] && !overwrite && have != &l->cost && cost_complete(have)) continue;
      ir_cost *c = ir_layer_add_type_cost(m, l, x->type);
      if (l->kind == IR_KIND_CUSTOM) {
        *c = l->cost;
        continue;
      }
      cost_estimate e;
      const char *why = NULL;
      if (cost_estimate_layer(m, l, &x->rec, &e, &why) == 0) {
        store(c, &e);
        continue;
      }
      diag_error(d, ir_diag_loc(x->loc), "device $d%d (%s) has no '%s': the cost model needs it "
                 "for layer '%s' (%s)", dv, x->type, why, l->name, ir_kinds[l->kind].name);
      return;
    }
  }
}

/* Mark train field f of m as not given (its records.def default applies). */
static void train_unset(ir_module *m, int f) {
  int first, n;
  ir_record_fields(IR_REC_TRAIN, &first, &n);
  *ir_record_mask(&m->train, IR_REC_TRAIN) &= ~((uint64_t)1 << (f - first));
}

int cost_run(ir_module *m, bool overwrite, diag_engine *d) {
  int errors = diag_error_count(d);
  if (overwrite) { /* every cost is estimated afresh: only this run's profiles measured them */
    train_unset(m, IR_F_TRAIN_scale);
    train_unset(m, IR_F_TRAIN_measured_on);
    train_unset(m, IR_F_TRAIN_optim_bw);
  }
  bool *todo = xcalloc((size_t)(m->nlayers > 0 ? m->nlayers : 1), sizeof *todo);
  const ir_layer *needs_device = NULL; /* first layer to estimate that is not custom */
  for (int i = 0; i < m->nlayers; i++) {
    ir_layer *l = &m->layers[i];
    todo[i] = overwrite || !cost_complete(&l->cost);
    if (todo[i] && ir_layer_check(l, d, ir_diag_loc(l->loc)) > 0) todo[i] = false;
    if (todo[i] && l->kind != IR_KIND_CUSTOM && !needs_device) needs_device = l;
  }
  bool any = false;
  for (int i = 0; i < m->nlayers; i++) any = any || todo[i];
  if (any && check_train(m, d) > 0) {
    free(todo);
    return diag_error_count(d) - errors;
  }
  if (needs_device && m->ndevices == 0) {
    diag_error(d, ir_diag_loc(m->loc),
               "the cost model needs a device: module '%s' has no devices to estimate layer "
               "'%s' (%s) on",
               m->name, needs_device->name, ir_kinds[needs_device->kind].name);
  } else {
    const ir_device *dev = m->ndevices ? &m->devices[0] : NULL;
    ir_device_rec none = {0};
    bool reported_missing[3] = {false, false, false}; /* peak, hbm, intra link */
    for (int i = 0; i < m->nlayers; i++) {
      if (!todo[i]) continue;
      ir_layer *l = &m->layers[i];
      cost_estimate e;
      const char *why = NULL;
      if (cost_estimate_layer(m, l, dev ? &dev->rec : &none, &e, &why) == 0) {
        store(&l->cost, &e);
        continue;
      }
      int which = strcmp(why, "peak") == 0 ? 0 : strcmp(why, "hbm") == 0 ? 1 : 2;
      if (reported_missing[which]) continue;
      reported_missing[which] = true;
      if (which < 2)
        diag_error(d, ir_diag_loc(dev->loc),
                   "device $d0 (%s) has no '%s': the cost model needs it for layer '%s' (%s)",
                   dev->type, why, l->name, ir_kinds[l->kind].name);
      else
        diag_error(d, train_loc(m),
                   "tensor = %g needs the intra-node link for tensor-parallel all-reduces: the "
                   "module has no 'link intra'",
                   train_value(m, IR_F_TRAIN_tensor));
    }
  }
  for (int i = 0; i < m->nprofiles; i++)
    cost_profile_apply(m, m->profiles[i], todo, ir_diag_loc(m->loc), d);
  if (diag_error_count(d) == errors) other_types(m, todo, overwrite, d);
  free(todo);
  return diag_error_count(d) - errors;
}
