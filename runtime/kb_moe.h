/* kb_moe.h -- the element-wise bodies of the moe kernel (kernels/moe.c), see kdev.h and bodies.def:
 * the router's top-k selection and softmax, the grouping of the (token, slot) pairs per expert,
 * the gather and scatter-add of an expert's rows, and the routing softmax's gradient. Indices
 * (the grouped pairs, the per-expert offsets) are ints in device scratch; selected
 * experts are floats (exact), as the save block keeps them. Every body writes only what its own
 * index owns, and every sum runs in a fixed order inside one index. */
#ifndef OCTO_RT_KB_MOE_H
#define OCTO_RT_KB_MOE_H

#include <stdint.h>

#include "kb_common.h"

/* Token i: select its top K experts and their weights, in double. Experts are chosen by their
 * logit (softmax scoring, whose order it is) or by sigmoid(logit) + bias_e (sigmoid); with G > 1
 * groups of E / G consecutive experts, only in the TG groups of highest group score (the group's
 * largest choice score; with sigmoid the sum of its two largest). Ties go to the lower index;
 * slot k holds the k-th largest. Weights: the softmax over the K selected logits, or (probs not
 * NULL) the softmax over all E logits at the selected ones, all E probabilities written to probs
 * for the backward; with sigmoid the selected sigmoid(logit) (all E written to probs), divided by
 * their sum when renorm; then times scale. Pre: G <= 64 divides E, TG <= G, K <= TG * E / G. */
typedef struct rt_b_moe_select_a {
  int E, K;            /* experts, top_k */
  int G, TG;           /* expert groups (1: none), groups kept */
  bool sigmoid;        /* scores by sigmoid (else softmax) */
  bool renorm;         /* with sigmoid: the weights divided by their sum */
  double scale;        /* the weights' factor */
  const float *logits; /* N x E router logits */
  const float *bias;   /* E: the choice's bias (sigmoid), or NULL */
  float *sel, *wt;     /* N x K each: selected expert of each slot (as a float), its weight */
  float *probs;        /* N x E: the softmax over all experts (softmax weights without
                          renormalization) or the sigmoid scores (sigmoid); or NULL */
} rt_b_moe_select_a;
/* The choice score of expert e of token row lr (moe_select). */
RT_HD static inline double rt_moe_choice(const rt_b_moe_select_a *p, const float *lr, int e) {
  if (!p->sigmoid) return lr[e];
  return 1.0 / (1.0 + exp(-(double)lr[e])) + (p->bias ? p->bias[e] : 0.0);
}
RT_BODY_FN(moe_select) {
  int E = p->E, K = p->K, G = p->G > 1 ? p->G : 1, M = E / G;
  const float *lr = p->logits + (size_t)i * E;
  float *sr = p->sel + (size_t)i * K, *wr = p->wt + (size_t)i * K;
  uint64_t kept = G > 1 ? 0 : 1; /* bit g: group g may be chosen */
  for (int t = 0; G > 1 && t < p->TG; t++) {
    int bg = -1;
    double bs = 0;
    for (int g = 0; g < G; g++) {
      if (kept >> g & 1) continue;
      double a = -INFINITY, b = -INFINITY; /* the group's largest two choice scores */
      for (int e = g * M; e < (g + 1) * M; e++) {
        double c = rt_moe_choice(p, lr, e);
        if (c > a) b = a, a = c;
        else if (c > b) b = c;
      }
      double gs = p->sigmoid ? a + b : a;
      if (bg < 0 || gs > bs) bg = g, bs = gs;
    }
    kept |= (uint64_t)1 << bg;
  }
  for (int k = 0; k < K; k++) {
    int best = -1;
    double bc = 0;
    for (int e = 0; e < E; e++) {
      if (!(kept >> (G > 1 ? e / M : 0) & 1)) continue;
      double c = rt_moe_choice(p, lr, e);
      if (!(best < 0 || c > bc)) continue;
      bool taken = false; /* selected by an earlier slot of this token */
      for (int q = 0; q < k && !taken; q++) taken = (int)sr[q] == e;
      if (!taken) best = e, bc = c;
    }
    sr[k] = (float)best;
  }
  double sum = 0;
  if (p->sigmoid) {
    float *pr = p->probs + (size_t)i * E;
    for (int e = 0; e < E; e++) pr[e] = (float)(1.0 / (1.0 + exp(-(double)lr[e])));
    for (int k = 0; k < K; k++) sum += pr[(int)sr[k]];
    for (int k = 0; k < K; k++)
      wr[k] = (float)(p->scale * pr[(int)sr[k]] / (p->renorm ? sum : 1.0));
    return;
  }
  double mx = lr[(int)sr[0]];
  if (p->probs) {
    float *pr = p->probs + (size_t)i * E;
    for (int e = 0; e < E; e++) sum += exp((double)lr[e] - mx);
    for (int e = 0; e < E; e++) pr[e] = (float)(exp((double)lr[e] - mx) / sum);
    for (int k = 0; k < K; k++) wr[k] = (float)(p->scale * pr[(int)sr[k]]);
    return;
  }
  for (int k = 0; k < K; k++) sum += exp((double)lr[(int)sr[k]] - mx);
  for (int k = 0; k < K; k++) wr[k] = (float)(p->scale * exp((double)lr[(int)sr[k]] - mx) / sum);
}

/* Expert i: its rows of the grouped order (a stable counting sort of the R = N * K pairs by
 * selected expert): off[i] = the pairs whose expert is below i, and pair[off[i] + j] = the j-th
 * pair (t * K + k, in pair order, so token order) whose expert is i; expert E - 1 also writes
 * off[E] = R. One index per expert scans all pairs in order: race-free and deterministic. */
typedef struct rt_b_moe_route_a {
  long R;           /* pairs */
  int E;            /* experts */
  const float *sel; /* R: selected expert of each pair, as a float */
  int *off, *pair;  /* E + 1 offsets, R grouped pairs */
} rt_b_moe_route_a;
RT_BODY_FN(moe_route) {
  int e = (int)i, o = 0, c = 0;
  for (long r = 0; r < p->R; r++) {
    int s = (int)p->sel[r];
    if (s < e) o++;
    else if (s == e) c++;
  }
  p->off[e] = o;
  if (e == p->E - 1) p->off[e + 1] = o + c;
  for (long r = 0; r < p->R; r++)
    if ((int)p->sel[r] == e) p->pair[o++] = (int)r;
}

/* Rows of one expert's part of the grouped list, between the tokens' rows (N x n) and the
 * expert's rows (rows x n): row j is pair[j], whose token is pair[j] / K and whose scale is
 * wt[pair[j]] when wt is not NULL, else 1.
 * moe_gather, element i of the expert's rows: dst[j][k] = scale_j * src[token][k].
 * moe_scatter_add, element i of the expert's rows: dst[token][k] += scale_j * src[j][k];
 * race-free when the rows' tokens are distinct (one expert's rows: a token selects an expert at
 * most once); the caller orders the launches (experts by index). */
typedef struct rt_b_moe_rows_a {
  int n, K;              /* row width, top_k */
  const int *pair;       /* rows: the pairs of the expert's rows */
  const float *src, *wt; /* gather: N x n; scatter: rows x n; scales N x K or NULL */
  float *dst;            /* gather: rows x n; scatter: N x n */
} rt_b_moe_rows_a;
typedef rt_b_moe_rows_a rt_b_moe_gather_a;
typedef rt_b_moe_rows_a rt_b_moe_scatter_add_a;
RT_BODY_FN(moe_gather) {
  long j = i / p->n, k = i % p->n;
  int q = p->pair[j];
  float v = p->src[(size_t)(q / p->K) * p->n + k];
  p->dst[i] = p->wt ? p->wt[q] * v : v;
}
RT_BODY_FN(moe_scatter_add) {
  long j = i / p->n, k = i % p->n;
  int q = p->pair[j];
  float w = p->wt ? p->wt[q] : 1.0f;
  p->dst[(size_t)(q / p->K) * p->n + k] += w * p->src[i];
}

/* Grouped row i: dwt[pair[i]] = G_i . z_i (in double, the gradient of that pair's routing
 * weight), then G_i *= wt[pair[i]] (the gradient of the expert's z). pair is a permutation, so
 * every index writes its own dwt element and its own row. */
typedef struct rt_b_moe_wgrad_a {
  int F;                /* row width (ffn) */
  const int *pair;      /* R grouped pairs */
  const float *z, *wt;  /* R x F expert activations (grouped), N x K routing weights */
  float *g;             /* R x F: dy W2_e^T per grouped row, scaled in place */
  double *dwt;          /* N x K */
} rt_b_moe_wgrad_a;
RT_BODY_FN(moe_wgrad) {
  int F = p->F, q = p->pair[i];
  float *gr = p->g + (size_t)i * F;
  const float *zr = p->z + (size_t)i * F;
  double dot = 0;
  for (int j = 0; j < F; j++) dot += (double)gr[j] * zr[j];
  p->dwt[q] = dot;
  float c0 = p->wt[q];
  for (int j = 0; j < F; j++) gr[j] *= c0;
}

/* Token i: the routing weights' gradient onto its logits, s = sum_k wt_k dwt_k, c the weights'
 * scale (wt includes it). Renormalized softmax (all and sigmoid false): dlog[i][sel_k] = wt_k
 * (dwt_k - s / c), the other logits left as they are (zero). Over all experts (all true): dlog
 * holds the E probabilities p_e (moe_select's probs) and becomes p_e (c g_e - s) for every e,
 * g_e = dwt_k when e = sel_k, else 0. Sigmoid: dlog holds the scores q_e and becomes
 * q_e (1 - q_e) times c g_e, or with renorm (c / Q) (g_e - s / c), Q the selected scores' sum,
 * at the selected experts and 0 elsewhere. */
typedef struct rt_b_moe_dlog_a {
  int E, K;                /* experts, top_k */
  bool all;                /* the weights are the softmax over all experts (dlog: its probs);
                              with sigmoid: the scores as they are (not renormalized) */
  bool sigmoid;            /* the scores are sigmoids (dlog: them) */
  double scale;            /* c, the weights' factor */
  const float *sel, *wt;   /* N x K each */
  const double *dwt;       /* N x K: gradient of the routing weights */
  float *dlog;             /* N x E */
} rt_b_moe_dlog_a;
RT_BODY_FN(moe_dlog) {
  int E = p->E, K = p->K;
  size_t t = (size_t)i;
  double s = 0, c = p->scale;
  for (int k = 0; k < K; k++) s += (double)p->wt[t * K + k] * p->dwt[t * K + k];
  if (p->sigmoid) {
    float *dr = p->dlog + t * E;
    double Q = 0;
    for (int k = 0; k < K; k++) Q += dr[(int)p->sel[t * K + k]];
    for (int e = 0; e < E; e++) {
      double g = 0, q = dr[e];
      bool on = false;
      for (int k = 0; k < K; k++)
        if ((int)p->sel[t * K + k] == e) g = p->dwt[t * K + k], on = true;
      double dq = !on ? 0 : p->all ? c * g : c / Q * (g - s / c);
      dr[e] = (float)(dq * q * (1 - q));
    }
    return;
  }
  if (p->all) {
    float *dr = p->dlog + t * E;
    for (int e = 0; e < E; e++) {
      double g = 0;
      for (int k = 0; k < K; k++)
        if ((int)p->sel[t * K + k] == e) g = p->dwt[t * K + k];
      dr[e] = (float)((double)dr[e] * (c * g - s));
    }
    return;
  }
  for (int k = 0; k < K; k++)
    p->dlog[t * E + (int)p->sel[t * K + k]] =
        (float)(p->wt[t * K + k] * (p->dwt[t * K + k] - s / c));
}

/* The shared experts' sigmoid gate (Qwen2-MoE), g_t = sigmoid(a_t), a_t = h_t . w.
 * moe_gate_fwd, token i: g[i] = sigmoid(g[i]) in place (g holds a, the gate's logit, before).
 * moe_gate_scale, element i of N x n: dst[i] (+)= g[i / n] * src[i] (add: accumulate). */
typedef struct rt_b_moe_gate_fwd_a {
  float *g; /* N: the logits, then the gates */
} rt_b_moe_gate_fwd_a;
RT_BODY_FN(moe_gate_fwd) { p->g[i] = (float)(1.0 / (1.0 + exp(-(double)p->g[i]))); }
typedef struct rt_b_moe_gate_scale_a {
  int n;                /* row width */
  bool add;             /* dst += (else dst =) */
  const float *g, *src; /* N gates; N x n */
  float *dst;           /* N x n */
} rt_b_moe_gate_scale_a;
RT_BODY_FN(moe_gate_scale) {
  float v = p->g[i / p->n] * p->src[i];
  p->dst[i] = p->add ? p->dst[i] + v : v;
}

/* Token i: the gradient of the gate's logit, da[i] = g (1 - g) (dy_i . s_i), s the shared
 * experts' sum, in double. */
typedef struct rt_b_moe_gate_bwd_a {
  int n;                      /* row width (hidden) */
  const float *g, *dy, *s;    /* N gates; N x n each */
  float *da;                  /* N */
} rt_b_moe_gate_bwd_a;
RT_BODY_FN(moe_gate_bwd) {
  const float *dr = p->dy + (size_t)i * p->n, *sr = p->s + (size_t)i * p->n;
  double dot = 0, g = p->g[i];
  for (int j = 0; j < p->n; j++) dot += (double)dr[j] * sr[j];
  p->da[i] = (float)(g * (1 - g) * dot);
}

#endif
