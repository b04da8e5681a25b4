/* moe.c -- the "moe" layer kernel: a pre-norm residual mixture-of-experts feed-forward block
 * with top-k routing (Mixtral style) and optional shared experts.
 *
 * Definition. Dimensions: hidden (= in_w = out_w), experts E, top_k K (1 <= K <= E), ffn (one
 * expert's intermediate width), shared (shared experts, each of width ffn, 0 for none), gated,
 * act, B, S; N = B * S tokens, token t of sequence b is row b * S + t. Parameters, in layout order:
 *   "norm"       [hidden]            RMSNorm weight, constant 1
 *   "router"     [hidden, E]         uniform in +-sqrt(3 / hidden)
 *   "experts.w1" [E, hidden, ffn]    uniform in +-sqrt(3 / hidden)
 *   "experts.w3" [E, hidden, ffn]    (gated only) uniform in +-sqrt(3 / hidden)
 *   "experts.w2" [E, ffn, hidden]    uniform in +-0.5 * sqrt(3 / ffn)
 *   and when shared > 0:
 *   "shared.w1"  [shared, hidden, ffn]  as experts.w1
 *   "shared.w3"  [shared, hidden, ffn]  (gated only) as experts.w3
 *   "shared.w2"  [shared, ffn, hidden]  as experts.w2
 *   and with shared_gate (Qwen2-MoE's shared_expert_gate):
 *   "shared.gate" [hidden]           uniform in +-sqrt(3 / hidden)
 *   and with score_bias (DeepSeek-V3's e_score_correction_bias; no gradient trains it):
 *   "router.bias" [E]                constant 0
 * Forward: h = RMSNorm(x) * norm (rt_rmsnorm_fwd); logits = h router; per token, the K experts of
 * largest logit are selected (ties: the lower expert index first; slot k holds the k-th largest);
 * the routing weights are the softmax over the K selected logits (renorm, the default), or with
 * renorm = false the softmax over all E logits at the K selected (Qwen-MoE's norm_topk_prob =
 * false, DeepSeek-V2: they need not sum to 1); with sigmoid (DeepSeek-V3) the scores are
 * sigmoid(logit), the experts chosen by score + router.bias (score_bias) and weighted by their
 * scores, divided by the selected scores' sum unless renorm = false; with expert_groups G > 1
 * the experts are chosen only in the topk_groups groups (of E / G consecutive experts) of highest
 * group score (the largest choice score in the group; with sigmoid the sum of its two largest);
 * the weights are multiplied by routed_scale; the router gets its gradient through the softmax or
 * the sigmoids (the selection itself is not differentiated);
 *   FFN_e(h) = (act(h W1_e) [* (h W3_e)]) W2_e  (gated: SwiGLU for silu, GeGLU for gelu),
 *   routed = sum_k weight_k * FFN_{e_k}(h),  shared = sum_s FFN_s(h),  y = x + routed + shared,
 *   with shared_gate shared = sigmoid(h . gate) * sum_s FFN_s(h), per token.
 * Dropless: every token reaches all its K experts; there is no capacity limit and no auxiliary
 * (load-balancing) loss.
 * Implementation: kernels run on the current device (kdev.h); all element work is in the bodies
 * of kb_moe.h. The N * K (token, slot) pairs are grouped per expert by a stable counting sort
 * (moe_route: one body index per expert scans the pairs in order, so within an expert in token
 * order) into device scratch; only the E + 1 group offsets come to the host (one rt_to_host per
 * phase), to size the per-expert GEMMs. Each expert's rows are gathered and run through its FFN
 * with rt_gemm, and its weighted outputs are added to their tokens' rows, expert after expert in
 * index order, so every sum has a fixed order and the result is deterministic. The save block
 * keeps the selection as floats (expert indices, exact) and the grouping is recomputed from it in
 * each phase. Split backward: bwd_in leaves dy, dh, the router logits' gradient and every FFN's
 * pre-activation gradients in the save block; bwd_w accumulates all weight gradients from it. */
#include <math.h>
#include <stdlib.h>

#include "ffn.h"

/* Offsets (in floats) of the parts of a moe save block, and its size. R = N * K routed rows in
 * expert-grouped order; "shared" parts are per shared expert, N rows each. */
typedef struct moe_layout {
  size_t x;     /* N x hidden: the layer's input (fwd) */
  size_t rstd;  /* N: 1 / rms of each row (fwd) */
  size_t h;     /* N x hidden: normed input (fwd) */
  size_t sel;   /* N x K: selected expert of each slot, as a float (fwd) */
  size_t wt;    /* N x K: routing weight of each slot (fwd) */
  size_t ra;    /* R x ffn: routed h W1_e (fwd) */
  size_t ru;    /* R x ffn: routed h W3_e, gated only (fwd) */
  size_t rz;    /* R x ffn: routed act(a) [* u] (fwd) */
  size_t sa;    /* shared x N x ffn: shared h W1_s (fwd) */
  size_t su;    /* shared x N x ffn: shared h W3_s, gated only (fwd) */
  size_t sz;    /* shared x N x ffn: shared act(a) [* u] (fwd) */
  size_t ss;    /* N x hidden: the shared experts' sum, shared_gate only (fwd) */
  size_t sg;    /* N: the shared gate sigmoid(h . gate), shared_gate only (fwd) */
  size_t dy;    /* N x hidden: gradient of the output (bwd_in) */
  size_t dh;    /* N x hidden: gradient of h (bwd_in) */
  size_t dlog;  /* N x E: gradient of the router logits (bwd_in); without renormalization, from
                   fwd until then the softmax over all experts */
  size_t rda;   /* R x ffn: gradient of ra (bwd_in) */
  size_t rdu;   /* R x ffn: gradient of ru, gated only (bwd_in) */
  size_t sda;   /* shared x N x ffn: gradient of sa (bwd_in) */
  size_t sdu;   /* shared x N x ffn: gradient of su, gated only (bwd_in) */
  size_t sdy;   /* N x hidden: the shared experts' output gradient g * dy, shared_gate only */
  size_t sga;   /* N: gradient of the shared gate's logit, shared_gate only (bwd_in) */
  size_t total; /* floats of the whole block */
} moe_layout;

/* The save layout for dimensions d. Pre: d passed moe_plan. */
static moe_layout moe_layout_of(const rt_ldims *d) {
  size_t N = (size_t)d->B * d->S, K = d->top_k, R = N * K, nh = N * d->hidden;
  size_t rf = R * d->ffn, ruf = d->gated ? rf : 0;
  size_t sf = (size_t)d->shared * N * d->ffn, suf = d->gated ? sf : 0;
  size_t gh = d->shared_gate ? nh : 0, gn = d->shared_gate ? N : 0;
  moe_layout l;
  l.x = 0;
  l.rstd = l.x + nh;
  l.h = l.rstd + N;
  l.sel = l.h + nh;
  l.wt = l.sel + R;
  l.ra = l.wt + R;
  l.ru = l.ra + rf;
  l.rz = l.ru + ruf;
  l.sa = l.rz + rf;
  l.su = l.sa + sf;
  l.sz = l.su + suf;
  l.ss = l.sz + sf;
  l.sg = l.ss + gh;
  l.dy = l.sg + gn;
  l.dh = l.dy + nh;
  l.dlog = l.dh + nh;
  l.rda = l.dlog + N * d->experts;
  l.rdu = l.rda + rf;
  l.sda = l.rdu + ruf;
  l.sdu = l.sda + sf;
  l.sdy = l.sdu + suf;
  l.sga = l.sdy + gh;
  l.total = l.sga + gn;
  return l;
}

/* The feed-forward shape of one expert (routed or shared) of dimensions d. */
static rt_ffn moe_ffn(const rt_ldims *d) {
  rt_ffn f = {d->hidden, d->ffn, d->gated, d->act};
  return f;
}

/* Check d and fill p: see the file comment. Returns 0, or -1 with the reason appended to err. */
static int moe_plan(const rt_ldims *d, rt_lplan *p, strbuf *err) {
  if (d->B <= 0 || d->S <= 0 || d->hidden <= 0 || d->ffn <= 0) {
    strbuf_printf(err, "moe needs positive B, S, hidden and ffn (got %d, %d, %d, %d)", d->B, d->S,
                  d->hidden, d->ffn);
    return -1;
  }
  if (d->experts <= 0) {
    strbuf_printf(err, "moe needs at least one expert (got experts %d)", d->experts);
    return -1;
  }
  if (d->top_k < 1 || d->top_k > d->experts) {
    strbuf_printf(err, "moe top_k %d outside 1..experts (%d)", d->top_k, d->experts);
    return -1;
  }
  if (d->shared < 0) {
    strbuf_printf(err, "moe shared experts %d negative", d->shared);
    return -1;
  }
  if (d->shared_gate && d->shared == 0) {
    strbuf_puts(err, "moe shared_gate needs shared experts");
    return -1;
  }
  int G = d->egroups > 1 ? d->egroups : 1, TG = G > 1 ? d->tgroups : 1;
  if (G > 64 || d->experts % G != 0 || TG < 1 || TG > G ||
      d->top_k > TG * (d->experts / G) || (G > 1 && d->sigmoid && d->experts / G < 2)) {
    strbuf_printf(err, "moe expert_groups %d (at most 64, dividing experts %d, of at least 2 "
                  "experts with sigmoid) with topk_groups %d cannot route top_k %d",
                  d->egroups, d->experts, d->tgroups, d->top_k);
    return -1;
  }
  if (d->score_bias && !d->sigmoid) {
    strbuf_puts(err, "moe score_bias needs sigmoid scoring");
    return -1;
  }
  if (d->in_w != 0 && d->in_w != d->hidden) {
    strbuf_printf(err, "moe input width %d differs from hidden %d", d->in_w, d->hidden);
    return -1;
  }
  if (d->in_S != 0 && d->in_S != d->S) {
    strbuf_printf(err, "moe input tokens %d differ from its tokens %d", d->in_S, d->S);
    return -1;
  }
  if ((int)d->act < 0 || (int)d->act >= RT_ACT_COUNT) {
    strbuf_printf(err, "moe activation %d unknown", (int)d->act);
    return -1;
  }
  if ((double)d->B * d->S * d->top_k > (double)INT32_MAX / 2) {
    strbuf_printf(err, "moe routes too many rows (%d x %d tokens x top_k %d)", d->B, d->S,
                  d->top_k);
    return -1;
  }
  int H = d->hidden, F = d->ffn, E = d->experts, Sh = d->shared;
  float s1 = sqrtf(3.0f / H), s2 = 0.5f * sqrtf(3.0f / F);
  p->npt = 0;
  rt_lplan_add(p, "norm", H, 0, 0, RT_INIT_CONST, 1.0f);
  rt_lplan_add(p, "router", H, E, 0, RT_INIT_UNIFORM, s1);
  rt_lplan_add(p, "experts.w1", E, H, F, RT_INIT_UNIFORM, s1);
  if (d->gated) rt_lplan_add(p, "experts.w3", E, H, F, RT_INIT_UNIFORM, s1);
  rt_lplan_add(p, "experts.w2", E, F, H, RT_INIT_UNIFORM, s2);
  if (Sh > 0) {
    rt_lplan_add(p, "shared.w1", Sh, H, F, RT_INIT_UNIFORM, s1);
    if (d->gated) rt_lplan_add(p, "shared.w3", Sh, H, F, RT_INIT_UNIFORM, s1);
    rt_lplan_add(p, "shared.w2", Sh, F, H, RT_INIT_UNIFORM, s2);
    if (d->shared_gate) rt_lplan_add(p, "shared.gate", H, 0, 0, RT_INIT_UNIFORM, s1);
  }
  if (d->score_bias) rt_lplan_add(p, "router.bias", E, 0, 0, RT_INIT_CONST, 0.0f);
  p->save_floats = moe_layout_of(d).total;
  p->out_w = H;
  return 0;
}

/* Parameter pointers of a moe layer within w (or its gradient g). */
typedef struct moe_params {
  float *norm;   /* [hidden] */
  float *router; /* [hidden, E] */
  float *ew1;    /* [E, hidden, ffn] */
  float *ew3;    /* [E, hidden, ffn], NULL when not gated */
  float *ew2;    /* [E, ffn, hidden] */
  float *sw1;    /* [shared, hidden, ffn], NULL when shared = 0 */
  float *sw3;    /* [shared, hidden, ffn], NULL when not gated or shared = 0 */
  float *sw2;    /* [shared, ffn, hidden], NULL when shared = 0 */
  float *sgate;  /* [hidden], NULL without shared_gate */
  float *rbias;  /* [E], NULL without score_bias */
} moe_params;

/* Split w (the plan's layout) into its tensors. */
static moe_params moe_params_of(const rt_ldims *d, const float *w) {
  size_t H = d->hidden, HF = H * d->ffn, E = d->experts, Sh = d->shared;
  float *q = (float *)w;
  moe_params m;
  m.norm = q;
  q += H;
  m.router = q;
  q += H * E;
  m.ew1 = q;
  q += E * HF;
  m.ew3 = d->gated ? q : NULL;
  q += d->gated ? E * HF : 0;
  m.ew2 = q;
  q += E * HF;
  m.sw1 = Sh ? q : NULL;
  q += Sh * HF;
  m.sw3 = Sh && d->gated ? q : NULL;
  q += d->gated ? Sh * HF : 0;
  m.sw2 = Sh ? q : NULL;
  q += Sh * HF;
  m.sgate = d->shared_gate ? q : NULL;
  q += d->shared_gate ? H : 0;
  m.rbias = d->score_bias ? q : NULL;
  return m;
}

/* The routing weights' factor of d: routed_scale (0, in dims made by hand: 1). */
static double moe_scale(const rt_ldims *d) { return d->rscale > 0 ? d->rscale : 1.0; }

/* The per-expert grouping of the N * K (token, slot) pairs, rebuilt from the saved selection. */
typedef struct moe_route {
  int *off;  /* host, E + 1: expert e's rows are off[e] .. off[e + 1] - 1 of the grouped order */
  int *dev;  /* device scratch: the E + 1 offsets, then pair */
  int *pair; /* device, R: grouped row r holds pair t * K + k (token t, slot k) */
  int max;   /* the most rows of one expert (sizes the per-expert buffers) */
} moe_route;

/* Group the pairs by the selected expert sel (N x K floats, device), within an expert by token
 * index (body moe_route), and bring the offsets to the host (the phase's one rt_to_host).
 * Post: *rt filled (free with moe_route_free). */
static void moe_route_build(const rt_ldims *d, const float *sel, moe_route *rt) {
  int E = d->experts, R = d->B * d->S * d->top_k;
  rt->dev = rt_scratch_bytes(((size_t)E + 1 + (size_t)R) * sizeof *rt->dev);
  rt->pair = rt->dev + E + 1;
  RT_FOR(moe_route, E, .R = R, .E = E, .sel = sel, .off = rt->dev, .pair = rt->pair);
  rt->off = xmalloc(((size_t)E + 1) * sizeof *rt->off);
  rt_to_host(rt->off, rt->dev, ((size_t)E + 1) * sizeof *rt->off);
  rt->max = 0;
  for (int e = 0; e < E; e++)
    if (rt->off[e + 1] - rt->off[e] > rt->max) rt->max = rt->off[e + 1] - rt->off[e];
}

/* Release what moe_route_build allocated. */
static void moe_route_free(moe_route *rt) {
  free(rt->off);
  rt_scratch_free(rt->dev);
}

/* Gather expert e's rows: out[j] = scale_j * src[token of grouped row off[e] + j] (width n), with
 * scale_j the routing weight wt of that row's pair when wt is not NULL, else 1. Returns the row
 * count. Pre: out holds rt->max rows. */
static int moe_gather(const rt_ldims *d, const moe_route *rt, int e, int n, const float *src,
                      const float *wt, float *out) {
  int o = rt->off[e], c = rt->off[e + 1] - o;
  RT_FOR(moe_gather, (size_t)c * n, .n = n, .K = d->top_k, .pair = rt->pair + o, .src = src,
         .wt = wt, .dst = out);
  return c;
}

/* Scatter-add expert e's rows: dst[token of grouped row off[e] + j] += scale_j * src[j] (width n),
 * scale_j as in moe_gather. Called for e = 0, 1, ... in order, so every token's sum has a fixed
 * order (its experts by index). */
static void moe_scatter_add(const rt_ldims *d, const moe_route *rt, int e, int n, const float *src,
                            const float *wt, float *dst) {
  int o = rt->off[e], c = rt->off[e + 1] - o;
  RT_FOR(moe_scatter_add, (size_t)c * n, .n = n, .K = d->top_k, .pair = rt->pair + o, .src = src,
         .wt = wt, .dst = dst);
}

/* F: y = x + routed + shared (file comment). Pre: save holds save_floats. Post: save has x, rstd,
 * h, sel, wt and every expert's a, u, z. x and y may be the same array. */
static void moe_fwd(const rt_ldims *d, const float *w, const float *x, float *y, float *save) {
  moe_layout l = moe_layout_of(d);
  moe_params m = moe_params_of(d, w);
  rt_ffn f = moe_ffn(d);
  int N = d->B * d->S, H = d->hidden, F = d->ffn, E = d->experts;
  size_t nh = (size_t)N * H, HF = (size_t)H * F, NF = (size_t)N * F;
  rt_copy(save + l.x, x, nh);
  rt_rmsnorm_fwd(N, H, d->norm_eps, save + l.x, m.norm, 0.0f, save + l.h, save + l.rstd);
  float *logits = rt_scratch((size_t)N * E);
  rt_gemm(false, false, N, E, H, 1.0f, save + l.h, H, m.router, E, 0.0f, logits, E);
  /* each token's top K experts (ties: lower index first) and their weights */
  RT_FOR(moe_select, N, .E = E, .K = d->top_k, .G = d->egroups, .TG = d->tgroups,
         .sigmoid = d->sigmoid, .renorm = !d->all_probs, .scale = moe_scale(d), .logits = logits,
         .bias = m.rbias, .sel = save + l.sel, .wt = save + l.wt,
         .probs = d->all_probs || d->sigmoid ? save + l.dlog : NULL);
  rt_scratch_free(logits);

  /* routed experts on their gathered rows, added to y expert by expert */
  if (y != x) rt_copy(y, save + l.x, nh);
  moe_route rt;
  moe_route_build(d, save + l.sel, &rt);
  float *hg = rt_scratch((size_t)rt.max * H);
  float *og = rt_scratch((size_t)rt.max * H);
  for (int e = 0; e < E; e++) {
    int c = moe_gather(d, &rt, e, H, save + l.h, NULL, hg);
    size_t of = (size_t)rt.off[e] * F;
    rt_ffn_fwd(&f, c, hg, m.ew1 + e * HF, d->gated ? m.ew3 + e * HF : NULL, m.ew2 + e * HF,
               save + l.ra + of, save + l.ru + of, save + l.rz + of, og, 0.0f);
    moe_scatter_add(d, &rt, e, H, og, save + l.wt, y);
  }
  rt_scratch_free(hg);
  rt_scratch_free(og);
  moe_route_free(&rt);

  /* shared experts on every token: added to y, or with the gate summed apart, then y += g s */
  float *sum = d->shared_gate ? save + l.ss : y;
  for (int s = 0; s < d->shared; s++)
    rt_ffn_fwd(&f, N, save + l.h, m.sw1 + s * HF, d->gated ? m.sw3 + s * HF : NULL,
               m.sw2 + s * HF, save + l.sa + s * NF, save + l.su + s * NF, save + l.sz + s * NF,
               sum, d->shared_gate && s == 0 ? 0.0f : 1.0f);
  if (d->shared_gate) {
    rt_gemm(false, false, N, 1, H, 1.0f, save + l.h, H, m.sgate, 1, 0.0f, save + l.sg, 1);
    RT_FOR(moe_gate_fwd, N, .g = save + l.sg);
    RT_FOR(moe_gate_scale, nh, .n = H, .add = true, .g = save + l.sg, .src = save + l.ss, .dst = y);
  }
}

/* B: dx from dy through the shared and routed experts, the routing softmax, the router and the
 * norm. Pre: moe_fwd ran on save. Post: save has dy, dh, dlog and every expert's da, du; dx (when
 * not NULL) written; dx and dy may be the same array. */
static void moe_bwd_in(const rt_ldims *d, const float *w, float *save, const float *dy,
                       float *dx) {
  moe_layout l = moe_layout_of(d);
  moe_params m = moe_params_of(d, w);
  rt_ffn f = moe_ffn(d);
  int N = d->B * d->S, H = d->hidden, F = d->ffn, E = d->experts, K = d->top_k, R = N * K;
  size_t nh = (size_t)N * H, HF = (size_t)H * F, NF = (size_t)N * F;
  rt_copy(save + l.dy, dy, nh);
  const float *sel = save + l.sel, *wt = save + l.wt;

  /* routed experts: G = dy W2_e^T per row (unweighted), built in the rda slot expert by expert;
   * then per grouped row dL/dweight = G . z and dz = weight * G (moe_wgrad), and da, du */
  moe_route rt;
  moe_route_build(d, sel, &rt);
  float *buf = rt_scratch((size_t)rt.max * H);
  double *dwt = rt_scratch_bytes((size_t)R * sizeof *dwt);
  for (int e = 0; e < E; e++) {
    int o = rt.off[e], c = moe_gather(d, &rt, e, H, save + l.dy, NULL, buf);
    if (c == 0) continue;
    rt_gemm(false, true, c, F, H, 1.0f, buf, H, m.ew2 + e * HF, H, 0.0f,
            save + l.rda + (size_t)o * F, F);
  }
  RT_FOR(moe_wgrad, R, .F = F, .pair = rt.pair, .z = save + l.rz, .wt = wt, .g = save + l.rda,
         .dwt = dwt);
  rt_ffn_bwd_act(&f, R, save + l.ra, save + l.ru, save + l.rda, save + l.rda, save + l.rdu);

  /* the routing softmax over the selected logits, then the router */
  float *dlog = save + l.dlog; /* F's probabilities or sigmoids where it kept them, in place */
  if (!d->all_probs && !d->sigmoid) rt_zero(dlog, (size_t)N * E);
  RT_FOR(moe_dlog, N, .E = E, .K = K, .all = d->all_probs, .sigmoid = d->sigmoid,
         .scale = moe_scale(d), .sel = sel, .wt = wt, .dwt = dwt, .dlog = dlog);
  rt_scratch_free(dwt);
  rt_gemm(false, true, N, H, E, 1.0f, dlog, E, m.router, E, 0.0f, save + l.dh, H);

  /* dh of the routed experts, per expert on its rows, added back expert by expert */
  for (int e = 0; e < E; e++) {
    int o = rt.off[e], c = rt.off[e + 1] - o;
    size_t of = (size_t)o * F;
    rt_ffn_bwd_h(&f, c, m.ew1 + e * HF, d->gated ? m.ew3 + e * HF : NULL, save + l.rda + of,
                 save + l.rdu + of, buf, 0.0f);
    moe_scatter_add(d, &rt, e, H, buf, NULL, save + l.dh);
  }
  rt_scratch_free(buf);
  moe_route_free(&rt);

  /* shared experts, from g dy with the gate (whose logit's gradient goes to dh) */
  const float *sdy = save + l.dy;
  if (d->shared_gate) {
    RT_FOR(moe_gate_bwd, N, .n = H, .g = save + l.sg, .dy = save + l.dy, .s = save + l.ss,
           .da = save + l.sga);
    RT_FOR(moe_gate_scale, nh, .n = H, .add = false, .g = save + l.sg, .src = save + l.dy,
           .dst = save + l.sdy);
    sdy = save + l.sdy;
    rt_gemm(false, false, N, H, 1, 1.0f, save + l.sga, 1, m.sgate, H, 1.0f, save + l.dh, H);
  }
  for (int s = 0; s < d->shared; s++) {
    float *da = save + l.sda + s * NF, *du = save + l.sdu + s * NF;
    rt_gemm(false, true, N, F, H, 1.0f, sdy, H, m.sw2 + s * HF, H, 0.0f, da, F);
    rt_ffn_bwd_act(&f, N, save + l.sa + s * NF, save + l.su + s * NF, da, da, du);
    rt_ffn_bwd_h(&f, N, m.sw1 + s * HF, d->gated ? m.sw3 + s * HF : NULL, da, du, save + l.dh,
                 1.0f);
  }

  if (dx) {
    rt_copy(dx, save + l.dy, nh); /* nothing when dx is dy */
    rt_rmsnorm_bwd_in(N, H, save + l.x, m.norm, 0.0f, save + l.rstd, save + l.dh, dx, true);
  }
}

/* W: g += the gradients of every parameter tensor. Pre: moe_bwd_in ran on save. Reads save (and
 * nothing of w). */
static void moe_bwd_w(const rt_ldims *d, const float *w, const float *save, float *g) {
  (void)w;
  moe_layout l = moe_layout_of(d);
  moe_params gp = moe_params_of(d, g);
  rt_ffn f = moe_ffn(d);
  int N = d->B * d->S, H = d->hidden, F = d->ffn, E = d->experts;
  size_t HF = (size_t)H * F, NF = (size_t)N * F;
  rt_rmsnorm_bwd_w(N, H, save + l.x, save + l.rstd, save + l.dh, gp.norm);
  rt_gemm(true, false, H, E, N, 1.0f, save + l.h, H, save + l.dlog, E, 1.0f, gp.router, E);

  moe_route rt;
  moe_route_build(d, save + l.sel, &rt);
  float *hg = rt_scratch((size_t)rt.max * H);
  float *dog = rt_scratch((size_t)rt.max * H); /* gradient of the expert's output */
  for (int e = 0; e < E; e++) {
    int c = moe_gather(d, &rt, e, H, save + l.h, NULL, hg);
    moe_gather(d, &rt, e, H, save + l.dy, save + l.wt, dog);
    size_t of = (size_t)rt.off[e] * F;
    rt_ffn_bwd_w(&f, c, hg, save + l.rda + of, save + l.rdu + of, save + l.rz + of, dog,
                 gp.ew1 + e * HF, d->gated ? gp.ew3 + e * HF : NULL, gp.ew2 + e * HF);
  }
  rt_scratch_free(hg);
  rt_scratch_free(dog);
  moe_route_free(&rt);

  const float *sdy = d->shared_gate ? save + l.sdy : save + l.dy;
  for (int s = 0; s < d->shared; s++)
    rt_ffn_bwd_w(&f, N, save + l.h, save + l.sda + s * NF, save + l.sdu + s * NF,
                 save + l.sz + s * NF, sdy, gp.sw1 + s * HF,
                 d->gated ? gp.sw3 + s * HF : NULL, gp.sw2 + s * HF);
  if (d->shared_gate)
    rt_gemm(true, false, H, 1, N, 1.0f, save + l.h, H, save + l.sga, 1, 1.0f, gp.sgate, 1);
}

/* Dimensions: hidden, seq, experts, top_k, shared experts, one expert's ffn, gated, act,
 * norm_eps, renorm, shared_gate, sigmoid, score_bias, expert_groups, topk_groups, routed_scale. */
static int moe_dims(const rt_dims_in *in, rt_ldims *d, strbuf *err) {
  (void)err;
  rt_dims_tokens(in, BE_LP_MOE_HIDDEN, BE_LP_MOE_SEQ, d);
  d->experts = (int)rt_lp(in, BE_LP_MOE_EXPERTS, 0);
  d->top_k = (int)rt_lp(in, BE_LP_MOE_TOP_K, 0);
  d->shared = (int)rt_lp(in, BE_LP_MOE_SHARED, 0);
  d->ffn = (int)rt_sdim(rt_lp(in, BE_LP_MOE_EXPERT_FFN, 0), in->scale, 1, 1);
  d->gated = rt_lp(in, BE_LP_MOE_GATED, 1) != 0;
  d->act = (rt_act)(int)rt_lp(in, BE_LP_MOE_ACT, RT_ACT_SILU);
  d->norm_eps = rt_lp(in, BE_LP_MOE_NORM_EPS, 1e-5);
  d->all_probs = rt_lp(in, BE_LP_MOE_RENORM, 1) == 0;
  d->shared_gate = rt_lp(in, BE_LP_MOE_SHARED_GATE, 0) == 1;
  d->sigmoid = rt_lp(in, BE_LP_MOE_SIGMOID, 0) == 1;
  d->score_bias = rt_lp(in, BE_LP_MOE_SCORE_BIAS, 0) == 1;
  d->egroups = (int)rt_lp(in, BE_LP_MOE_EXPERT_GROUPS, 1);
  d->tgroups = (int)rt_lp(in, BE_LP_MOE_TOPK_GROUPS, 1);
  d->rscale = rt_lp(in, BE_LP_MOE_ROUTED_SCALE, 1);
  return 0;
}

/* The GEMMs of the experts a token runs: top_k routed and the shared ones, of all of them. */
static double moe_flops(const rt_ldims *d, double nw) {
  if (d->experts > 0) nw = nw * (d->top_k + d->shared) / (d->experts + d->shared);
  return rt_flops_gemm(d, nw);
}

const rt_kernel rt_kernel_MOE = {BE_KIND_MOE, 0, moe_dims, moe_plan, moe_fwd, moe_bwd_in,
                                 moe_bwd_w, moe_flops};
