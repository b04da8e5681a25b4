/* mamba2.c -- the mamba2 kernel: a pre-norm Mamba-2 mixer block (Dao & Gu 2024; mamba_ssm's
 * Mamba2 with ngroups, norm_before_gate=False, no projection biases) with its residual:
 *   h = RMSNorm(x)*norm; [z | xBC | dt] = h in_proj; xBC = silu(causal depthwise conv(xBC)+b);
 *   [xs | B | C] = xBC; dt = softplus(dt + dt_bias); A = -exp(A_log); per sequence and SSM head
 *   (head h reads group h / (heads/groups) of B and C): s_t = exp(dt_t A) s_{t-1} +
 *   dt_t xs_t B_t^T, y_t = s_t C_t + D xs_t; yg = y * silu(z), RMSNorm over each of the groups'
 *   inner/groups channels times gate_norm; out = yg out_proj; y = x + out.
 * The scan runs as the chunked SSD algorithm: within a chunk of 'chunk' tokens the quadratic form
 * with the decay mask exp(cs_t - cs_s) from the cumulative sums cs of dt*A, between chunks the
 * state passed on; its backward is the exact gradient of that chunked form, chunks in reverse.
 * The kernels run on the calling thread's device (kdev.h): the host code below sequences GEMMs
 * (rt_gemm, the scan's per chunk, group and head), copies and the element work, which is the
 * bodies of kb_mamba2.h (one index per element, row, column, chunk or token of a chunk). */
#include <math.h>

#include "kernels.h"

/* The sizes of one mamba2 layer, derived from its rt_ldims. */
typedef struct m2_dims {
  int B;   /* sequences */
  int S;   /* tokens per sequence */
  int T;   /* tokens, B * S */
  int hd;  /* hidden: input and output width */
  int H;   /* SSM heads */
  int P;   /* head_dim */
  int I;   /* inner = H * P */
  int N;   /* state per group */
  int G;   /* groups of B / C (and of the gated norm) */
  int GN;  /* G * N */
  int K;   /* convolution width */
  int L;   /* chunk length */
  int nc;  /* chunks per sequence, ceil(S / L) */
  int CD;  /* convolved channels: I + 2 * GN (xs | B | C) */
  int W;   /* in_proj width: 2 * I + 2 * GN + H (z | xBC | dt) */
  int hpg; /* heads per group, H / G */
  int gw;  /* channels per group of the gated norm, I / G */
} m2_dims;

/* Float offsets of the parameter tensors in w (and of their gradients in g), plan order. */
typedef struct m2_woff {
  size_t norm;    /* [hd] pre-norm weight */
  size_t in_proj; /* [hd, W] */
  size_t convw;   /* [CD, K] depthwise convolution taps */
  size_t convb;   /* [CD] convolution bias */
  size_t dtb;     /* [H] dt_bias */
  size_t alog;    /* [H] A_log */
  size_t D;       /* [H] skip coefficient */
  size_t gnorm;   /* [I] gated-norm weight */
  size_t out;     /* [I, hd] out_proj */
} m2_woff;

/* Float offsets of the regions of a save block. F writes the first group, B the second, W reads
 * both. Row t of a [T x n] region is token t. */
typedef struct m2_soff {
  size_t x;     /* [T x hd] input */
  size_t rstd1; /* [T] 1 / rms of the pre-norm */
  size_t hn;    /* [T x hd] normed input h */
  size_t zx;    /* [T x W] in_proj output (z | xBC before the conv | raw dt) */
  size_t cpre;  /* [T x CD] convolution output before silu */
  size_t xbc;   /* [T x CD] silu of it: xs | B | C */
  size_t dt;    /* [T x H] dt after softplus */
  size_t ys;    /* [T x I] SSM output y (with the D term) */
  size_t yg;    /* [T x I] y * silu(z) */
  size_t rstd2; /* [T x G] 1 / rms of each group of yg */
  size_t ygn;   /* [T x I] gated-norm output (out_proj input) */
  size_t st;    /* [B x nc x H x P x N] SSM state at the start of each chunk */
  size_t dy;    /* [T x hd] output gradient (B) */
  size_t dygn;  /* [T x I] gradient of ygn (B) */
  size_t dzx;   /* [T x W] gradient of the in_proj output (B) */
  size_t dcpre; /* [T x CD] gradient of the convolution output before silu (B) */
  size_t da;    /* [T x H] gradient of the log decay dt*A per token (B) */
  size_t dD;    /* [T x H] per-token gradient of D, dy_t . xs_t (B) */
  size_t dh;    /* [T x hd] gradient of h (B) */
  size_t total; /* floats of the block */
} m2_soff;

/* Sizes of d. Pre: d passed m2_plan's checks. */
static m2_dims m2_dims_of(const rt_ldims *d) {
  m2_dims m;
  m.B = d->B;
  m.S = d->S;
  m.T = d->B * d->S;
  m.hd = d->hidden;
  m.H = d->heads;
  m.P = d->head_dim;
  m.I = m.H * m.P;
  m.N = d->state;
  m.G = d->groups;
  m.GN = m.G * m.N;
  m.K = d->conv;
  m.L = d->chunk;
  m.nc = (m.S + m.L - 1) / m.L;
  m.CD = m.I + 2 * m.GN;
  m.W = 2 * m.I + 2 * m.GN + m.H;
  m.hpg = m.H / m.G;
  m.gw = m.I / m.G;
  return m;
}

/* Parameter offsets for sizes m. */
static m2_woff m2_woff_of(const m2_dims *m) {
  m2_woff o;
  o.norm = 0;
  o.in_proj = o.norm + (size_t)m->hd;
  o.convw = o.in_proj + (size_t)m->hd * m->W;
  o.convb = o.convw + (size_t)m->CD * m->K;
  o.dtb = o.convb + (size_t)m->CD;
  o.alog = o.dtb + (size_t)m->H;
  o.D = o.alog + (size_t)m->H;
  o.gnorm = o.D + (size_t)m->H;
  o.out = o.gnorm + (size_t)m->I;
  return o;
}

/* Save-block offsets for sizes m; total is the block's size. */
static m2_soff m2_soff_of(const m2_dims *m) {
  size_t T = (size_t)m->T, at = 0;
  m2_soff s;
#define M2_REGION(f, n) (s.f = at, at += (n))
  M2_REGION(x, T * m->hd);
  M2_REGION(rstd1, T);
  M2_REGION(hn, T * m->hd);
  M2_REGION(zx, T * m->W);
  M2_REGION(cpre, T * m->CD);
  M2_REGION(xbc, T * m->CD);
  M2_REGION(dt, T * m->H);
  M2_REGION(ys, T * m->I);
  M2_REGION(yg, T * m->I);
  M2_REGION(rstd2, T * m->G);
  M2_REGION(ygn, T * m->I);
  M2_REGION(st, (size_t)m->B * m->nc * m->H * m->P * m->N);
  M2_REGION(dy, T * m->hd);
  M2_REGION(dygn, T * m->I);
  M2_REGION(dzx, T * m->W);
  M2_REGION(dcpre, T * m->CD);
  M2_REGION(da, T * m->H);
  M2_REGION(dD, T * m->H);
  M2_REGION(dh, T * m->hd);
#undef M2_REGION
  s.total = at;
  return s;
}

/* Check d and fill p. Post: 0 with p filled (npt from 0), or -1 with the first failed check
 * appended to err. */
static int m2_plan(const rt_ldims *d, rt_lplan *p, strbuf *err) {
  if (d->B < 1 || d->S < 1 || d->hidden < 1 || d->heads < 1 || d->head_dim < 1 || d->state < 1 ||
      d->groups < 1 || d->conv < 1 || d->chunk < 1) {
    strbuf_printf(err, "mamba2 needs B, S, hidden, heads, head_dim, state, groups, conv and chunk "
                       "of at least 1");
    return -1;
  }
  if (d->heads % d->groups != 0) {
    strbuf_printf(err, "mamba2 heads %d not divisible by groups %d", d->heads, d->groups);
    return -1;
  }
  if (d->inner != d->heads * d->head_dim) {
    strbuf_printf(err, "mamba2 inner %d is not heads %d x head_dim %d", d->inner, d->heads,
                  d->head_dim);
    return -1;
  }
  if (d->in_w != d->hidden) {
    strbuf_printf(err, "mamba2 needs an input of width hidden (%d), not %d", d->hidden, d->in_w);
    return -1;
  }
  m2_dims m = m2_dims_of(d);
  p->npt = 0;
  rt_lplan_add(p, "norm", m.hd, 0, 0, RT_INIT_CONST, 1.0f);
  rt_lplan_add(p, "in_proj", m.hd, m.W, 0, RT_INIT_UNIFORM, sqrtf(3.0f / (float)m.hd));
  rt_lplan_add(p, "conv.w", m.CD, m.K, 0, RT_INIT_UNIFORM, sqrtf(1.0f / (float)m.K));
  rt_lplan_add(p, "conv.b", m.CD, 0, 0, RT_INIT_CONST, 0.0f);
  rt_lplan_add(p, "dt_bias", m.H, 0, 0, RT_INIT_DTBIAS, 0.0f);
  rt_lplan_add(p, "A_log", m.H, 0, 0, RT_INIT_ALOG, 0.0f);
  rt_lplan_add(p, "D", m.H, 0, 0, RT_INIT_CONST, 1.0f);
  rt_lplan_add(p, "gate_norm", m.I, 0, 0, RT_INIT_CONST, 1.0f);
  rt_lplan_add(p, "out_proj", m.I, m.hd, 0, RT_INIT_UNIFORM, 0.5f * sqrtf(3.0f / (float)m.I));
  p->save_floats = m2_soff_of(&m).total;
  p->out_w = m.hd;
  return 0;
}

/* ---- SSD scan -------------------------------------------------------------------------------- */

/* Scratch of the chunked scan (rt_scratch, on the current device), sized for one chunk but for
 * cs, which holds the whole microbatch. */
typedef struct m2_scratch {
  float *CB;   /* [L x L] C_t . B_s of one group */
  float *Lm;   /* [L x L] decay exp(cs_t - cs_s), s <= t (0 above the diagonal) */
  float *Mf;   /* [L x L] CB * Lm * dt_s: the intra-chunk mixing matrix of one head */
  float *dMf;  /* [L x L] its gradient dY_t . xs_s */
  float *dCB;  /* [L x L] gradient of CB summed over the group's heads */
  float *tmp;  /* [L x P] C_t S_prev^T */
  float *dYs;  /* [L x P] exp(cs_t) dY_t */
  float *Bw;   /* [L x N] B_s scaled by the decay to the chunk's end times dt_s */
  float *XdS;  /* [L x N] xs_s^T dS_end */
  float *dSn;  /* [P x N] gradient of the chunk's starting state */
  double *cs;  /* [T x H] cumulative sums of dt*A within each chunk, per head (m2_cs) */
  double *dcs; /* [L] their gradients (one chunk and head) */
  double *ddt; /* [L] gradients of dt */
  double *q;   /* [L] the end state's terms of the gradient of cs (m2_ssd_carry) */
} m2_scratch;

/* Allocate scratch for sizes m. Post: every buffer allocated, uninitialized; free with
 * m2_scratch_free. */
static m2_scratch m2_scratch_new(const m2_dims *m) {
  size_t LL = (size_t)m->L * m->L;
  m2_scratch w;
  w.CB = rt_scratch(LL);
  w.Lm = rt_scratch(LL);
  w.Mf = rt_scratch(LL);
  w.dMf = rt_scratch(LL);
  w.dCB = rt_scratch(LL);
  w.tmp = rt_scratch((size_t)m->L * m->P);
  w.dYs = rt_scratch((size_t)m->L * m->P);
  w.Bw = rt_scratch((size_t)m->L * m->N);
  w.XdS = rt_scratch((size_t)m->L * m->N);
  w.dSn = rt_scratch((size_t)m->P * m->N);
  w.cs = rt_scratch_bytes((size_t)m->T * m->H * sizeof(double));
  w.dcs = rt_scratch_bytes((size_t)m->L * sizeof(double));
  w.ddt = rt_scratch_bytes((size_t)m->L * sizeof(double));
  w.q = rt_scratch_bytes((size_t)m->L * sizeof(double));
  return w;
}

/* Free what m2_scratch_new allocated. */
static void m2_scratch_free(m2_scratch *w) {
  rt_scratch_free(w->CB);
  rt_scratch_free(w->Lm);
  rt_scratch_free(w->Mf);
  rt_scratch_free(w->dMf);
  rt_scratch_free(w->dCB);
  rt_scratch_free(w->tmp);
  rt_scratch_free(w->dYs);
  rt_scratch_free(w->Bw);
  rt_scratch_free(w->XdS);
  rt_scratch_free(w->dSn);
  rt_scratch_free(w->cs);
  rt_scratch_free(w->dcs);
  rt_scratch_free(w->ddt);
  rt_scratch_free(w->q);
}

/* w->cs = the cumulative sums of dt*A within every chunk, per head. Pre: dt (T x H) of F. */
static void m2_cumsums(const m2_dims *m, const float *alog, const float *dt, m2_scratch *w) {
  RT_FOR(m2_cs, (long)m->B * m->nc * m->H, .S = m->S, .L = m->L, .nc = m->nc, .H = m->H,
         .dt = dt, .alog = alog, .cs = w->cs);
}

/* For head h of the chunk of l tokens starting at row t0: Lm (decay matrix) and Mf = CB * Lm *
 * dt_s, both l x l and zero above the diagonal. Pre: m2_cumsums ran; w->CB holds the head's
 * group's C B^T (l x l). */
static void m2_chunk_mix(const m2_dims *m, const float *dt, int t0, int l, int h,
                         m2_scratch *w) {
  size_t r0 = (size_t)t0 * m->H + h;
  RT_FOR(m2_mix, (long)l * l, .l = l, .H = m->H, .cs = w->cs + r0, .dt = dt + r0, .CB = w->CB,
         .Lm = w->Lm, .Mf = w->Mf);
}

/* Chunked SSD forward. Pre: xbc (T x CD: xs | B | C) and dt (T x H) of F. Post: ys (T x I) holds
 * y_t = s_t C_t + D xs_t, st the state at the start of every chunk (zero for the first). */
static void m2_ssd_fwd(const m2_dims *m, const float *alog, const float *Dp, const float *xbc,
                       const float *dt, float *ys, float *st) {
  int P = m->P, N = m->N, CD = m->CD, I = m->I, L = m->L, H = m->H;
  size_t PN = (size_t)P * N;
  float *S = rt_scratch((size_t)H * PN);
  m2_scratch w = m2_scratch_new(m);
  m2_cumsums(m, alog, dt, &w);
  for (int b = 0; b < m->B; b++) {
    rt_zero(S, (size_t)H * PN);
    for (int c = 0; c < m->nc; c++) {
      int t0 = b * m->S + c * L, l = m->S - c * L < L ? m->S - c * L : L;
      rt_copy(st + ((size_t)b * m->nc + c) * H * PN, S, (size_t)H * PN);
      for (int g = 0; g < m->G; g++) {
        const float *Bp = xbc + (size_t)t0 * CD + I + (size_t)g * N;
        const float *Cp = Bp + m->GN;
        rt_gemm(false, true, l, l, N, 1.0f, Cp, CD, Bp, CD, 0.0f, w.CB, l);
        for (int h = g * m->hpg; h < (g + 1) * m->hpg; h++) {
          size_t r0 = (size_t)t0 * H + h; /* the chunk's first token at head h in T x H */
          m2_chunk_mix(m, dt, t0, l, h, &w);
          const float *Xp = xbc + (size_t)t0 * CD + (size_t)h * P;
          float *Yp = ys + (size_t)t0 * I + (size_t)h * P, *Sh = S + h * PN;
          rt_gemm(false, false, l, P, l, 1.0f, w.Mf, l, Xp, CD, 0.0f, Yp, I);
          if (c > 0) rt_gemm(false, true, l, P, N, 1.0f, Cp, CD, Sh, N, 0.0f, w.tmp, P);
          RT_FOR(m2_ssd_y, (long)l * P, .P = P, .H = H, .inner = I, .CD = CD, .inter = c > 0,
                 .cs = w.cs + r0, .tmp = w.tmp, .D = Dp + h, .xs = Xp, .y = Yp);
          if (c == m->nc - 1) continue; /* the last chunk's end state is not needed */
          RT_FOR(m2_bw, (long)l * N, .l = l, .N = N, .H = H, .CD = CD, .cs = w.cs + r0,
                 .dt = dt + r0, .Bm = Bp, .Bw = w.Bw);
          RT_FOR(m2_decay, PN, .l = l, .H = H, .cs = w.cs + r0, .S = Sh);
          rt_gemm(true, false, P, N, l, 1.0f, Xp, CD, w.Bw, N, 1.0f, Sh, N);
        }
      }
    }
  }
  m2_scratch_free(&w);
  rt_scratch_free(S);
}

/* Chunked SSD backward, chunks in reverse carrying the gradient of each chunk's end state.
 * Pre: F's xbc, dt, st; dys (T x I) the gradient of ys; dxbc (T x CD) zeroed.
 * Post: dxbc += gradients of xs, B, C; ddt (T x H) = gradient of dt; da (T x H) = gradient of
 * the log decay dt*A; dD (T x H) = dys_t . xs_t per token and head. */
static void m2_ssd_bwd(const m2_dims *m, const float *alog, const float *Dp, const float *xbc,
                       const float *dt, const float *st, const float *dys, float *dxbc,
                       float *ddt, float *da, float *dD) {
  int P = m->P, N = m->N, CD = m->CD, I = m->I, L = m->L, H = m->H;
  size_t PN = (size_t)P * N;
  float *dS = rt_scratch((size_t)H * PN);
  m2_scratch w = m2_scratch_new(m);
  m2_cumsums(m, alog, dt, &w);
  for (int b = 0; b < m->B; b++) {
    rt_zero(dS, (size_t)H * PN);
    for (int c = m->nc - 1; c >= 0; c--) {
      int t0 = b * m->S + c * L, l = m->S - c * L < L ? m->S - c * L : L;
      bool inter = c > 0, carry = c < m->nc - 1; /* nonzero start state / end-state gradient */
      for (int g = 0; g < m->G; g++) {
        const float *Bp = xbc + (size_t)t0 * CD + I + (size_t)g * N;
        const float *Cp = Bp + m->GN;
        float *dBp = dxbc + (size_t)t0 * CD + I + (size_t)g * N, *dCp = dBp + m->GN;
        rt_gemm(false, true, l, l, N, 1.0f, Cp, CD, Bp, CD, 0.0f, w.CB, l);
        rt_zero(w.dCB, (size_t)l * l);
        for (int h = g * m->hpg; h < (g + 1) * m->hpg; h++) {
          size_t r0 = (size_t)t0 * H + h; /* the chunk's first token at head h in T x H */
          m2_chunk_mix(m, dt, t0, l, h, &w);
          const float *Xp = xbc + (size_t)t0 * CD + (size_t)h * P;
          const float *dYp = dys + (size_t)t0 * I + (size_t)h * P;
          const float *Sp = st + (((size_t)b * m->nc + c) * H + h) * PN;
          float *dXp = dxbc + (size_t)t0 * CD + (size_t)h * P, *dSh = dS + h * PN;
          /* skip term D xs_t */
          RT_FOR(m2_ssd_skip, l, .P = P, .H = H, .inner = I, .CD = CD, .D = Dp + h, .dy = dYp,
                 .xs = Xp, .dxs = dXp, .dD = dD + r0);
          /* intra-chunk: Y = Mf X (m2_ssd_intra sets dcs and ddt) */
          rt_gemm(false, true, l, l, P, 1.0f, dYp, I, Xp, CD, 0.0f, w.dMf, l);
          rt_gemm(true, false, l, P, l, 1.0f, w.Mf, l, dYp, I, 1.0f, dXp, CD);
          RT_FOR(m2_ssd_intra, l, .l = l, .H = H, .dt = dt + r0, .dMf = w.dMf, .Lm = w.Lm,
                 .CB = w.CB, .dCB = w.dCB, .dcs = w.dcs, .ddt = w.ddt);
          /* inter-chunk output: y_t += exp(cs_t) S_prev C_t */
          if (inter) {
            rt_gemm(false, true, l, P, N, 1.0f, Cp, CD, Sp, N, 0.0f, w.tmp, P);
            RT_FOR(m2_ssd_inter, l, .P = P, .H = H, .inner = I, .cs = w.cs + r0, .dy = dYp,
                   .tmp = w.tmp, .dys = w.dYs, .dcs = w.dcs);
            rt_gemm(false, false, l, N, P, 1.0f, w.dYs, P, Sp, N, 1.0f, dCp, CD);
            rt_gemm(true, false, P, N, l, 1.0f, w.dYs, P, Cp, CD, 0.0f, w.dSn, N);
          }
          /* chunk end state: S_end = exp(cs_e) S_prev + sum_s w_s xs_s B_s^T */
          if (carry) {
            RT_FOR(m2_bw, (long)l * N, .l = l, .N = N, .H = H, .CD = CD, .cs = w.cs + r0,
                   .dt = dt + r0, .Bm = Bp, .Bw = w.Bw);
            rt_gemm(false, true, l, P, N, 1.0f, w.Bw, N, dSh, N, 1.0f, dXp, CD);
            rt_gemm(false, false, l, N, P, 1.0f, Xp, CD, dSh, N, 0.0f, w.XdS, N);
            RT_FOR(m2_ssd_carry, l, .l = l, .N = N, .H = H, .CD = CD, .cs = w.cs + r0,
                   .dt = dt + r0, .Bm = Bp, .XdS = w.XdS, .dB = dBp, .ddt = w.ddt,
                   .dcs = w.dcs, .q = w.q);
            if (inter)
              RT_FOR(m2_ssd_dsn, PN, .l = l, .H = H, .cs = w.cs + r0, .dS = dSh, .dSn = w.dSn);
          }
          /* the end state's terms of dcs[l-1]; cs_i = sum_{j <= i} a_j: da_j = sum_{i >= j}
           * dcs_i; a = dt * A */
          RT_FOR(m2_ssd_da, 1, .l = l, .H = H, .PN = (int)PN, .carry = carry, .inter = inter,
                 .cs = w.cs + r0, .q = w.q, .ddt = w.ddt, .dS = dSh, .Sp = Sp, .alog = alog + h,
                 .dcs = w.dcs, .da = da + r0, .ddt_out = ddt + r0);
          if (inter) rt_copy(dSh, w.dSn, PN);
        }
        /* CB_ts = C_t . B_s, summed over the group's heads */
        rt_gemm(false, false, l, N, l, 1.0f, w.dCB, l, Bp, CD, 1.0f, dCp, CD);
        rt_gemm(true, false, l, N, l, 1.0f, w.dCB, l, Cp, CD, 1.0f, dBp, CD);
      }
    }
  }
  m2_scratch_free(&w);
  rt_scratch_free(dS);
}

/* ---- Kernel entry points --------------------------------------------------------------------- */

/* F. Pre: m2_plan accepted d; w holds the plan's parameters; save has save_floats floats.
 * Post: y (T x hidden) = x + mixer(x); the forward regions of save written. x and y may be the
 * same array. */
static void m2_fwd(const rt_ldims *d, const float *w, const float *x, float *y, float *save) {
  m2_dims m = m2_dims_of(d);
  m2_woff o = m2_woff_of(&m);
  m2_soff so = m2_soff_of(&m);
  int T = m.T, hd = m.hd, W = m.W, I = m.I, H = m.H, CD = m.CD;
  float *xs = save + so.x, *rstd1 = save + so.rstd1, *hn = save + so.hn, *zx = save + so.zx;
  float *dt = save + so.dt, *ys = save + so.ys, *yg = save + so.yg, *ygn = save + so.ygn;
  float *xbc = save + so.xbc;
  rt_copy(xs, x, (size_t)T * hd);
  rt_rmsnorm_fwd(T, hd, d->norm_eps, xs, w + o.norm, 0.0f, hn, rstd1);
  rt_gemm(false, false, T, W, hd, 1.0f, hn, hd, w + o.in_proj, W, 0.0f, zx, W);
  /* causal depthwise convolution of the xBC columns, then silu */
  RT_FOR(m2_conv_fwd, (long)T * CD, .S = m.S, .K = m.K, .CD = CD, .W = W, .in = zx + I,
         .w = w + o.convw, .b = w + o.convb, .cpre = save + so.cpre, .xbc = xbc);
  RT_FOR(m2_dt_fwd, (long)T * H, .H = H, .W = W, .zdt = zx + I + CD, .dtb = w + o.dtb, .dt = dt);
  m2_ssd_fwd(&m, w + o.alog, w + o.D, xbc, dt, ys, save + so.st);
  RT_FOR(m2_gate_fwd, (long)T * I, .inner = I, .W = W, .ys = ys, .z = zx, .yg = yg);
  RT_FOR(m2_gnorm_fwd, (long)T * m.G, .n = m.gw, .G = m.G, .eps = d->norm_eps, .yg = yg,
         .gamma = w + o.gnorm, .ygn = ygn, .rstd = save + so.rstd2);
  rt_copy(y, xs, (size_t)T * hd);
  rt_gemm(false, false, T, hd, I, 1.0f, ygn, I, w + o.out, hd, 1.0f, y, hd);
}

/* B. Pre: m2_fwd ran on save. Post: dx (when not NULL) = dL/dx; the backward regions of save
 * (dy, dygn, dzx, dcpre, da, dD, dh) written for m2_bwd_w. g is not touched. dx and dy may be
 * the same array. */
static void m2_bwd_in(const rt_ldims *d, const float *w, float *save, const float *dy,
                      float *dx) {
  m2_dims m = m2_dims_of(d);
  m2_woff o = m2_woff_of(&m);
  m2_soff so = m2_soff_of(&m);
  int T = m.T, hd = m.hd, W = m.W, I = m.I, H = m.H, CD = m.CD;
  const float *zx = save + so.zx, *ys = save + so.ys, *dt = save + so.dt;
  const float *cpre = save + so.cpre;
  float *dys_save = save + so.dy, *dygn = save + so.dygn, *dzx = save + so.dzx;
  float *dcpre = save + so.dcpre, *dh = save + so.dh;
  rt_copy(dys_save, dy, (size_t)T * hd);
  rt_gemm(false, true, T, I, hd, 1.0f, dys_save, hd, w + o.out, hd, 0.0f, dygn, I);
  float *dyg = rt_scratch((size_t)T * I);
  RT_FOR(m2_gnorm_bwd_in, (long)T * m.G, .n = m.gw, .G = m.G, .yg = save + so.yg,
         .gamma = w + o.gnorm, .rstd = save + so.rstd2, .dygn = dygn, .dyg = dyg);
  /* yg = ys * silu(z): dz into dzx's z columns, dys in place of dyg */
  RT_FOR(m2_gate_bwd, (long)T * I, .inner = I, .W = W, .ys = ys, .z = zx, .dyg = dyg, .dz = dzx);
  float *dxbc = rt_scratch((size_t)T * CD);
  rt_zero(dxbc, (size_t)T * CD);
  float *ddt = rt_scratch((size_t)T * H);
  m2_ssd_bwd(&m, w + o.alog, w + o.D, save + so.xbc, dt, save + so.st, dyg, dxbc, ddt,
             save + so.da, save + so.dD);
  RT_FOR(m2_silu_bwd, (long)T * CD, .g = dxbc, .a = cpre, .d = dcpre);
  RT_FOR(m2_conv_bwd_in, (long)T * CD, .S = m.S, .K = m.K, .CD = CD, .W = W, .w = w + o.convw,
         .dcpre = dcpre, .din = dzx + I);
  RT_FOR(m2_dt_bwd, (long)T * H, .H = H, .W = W, .zdt = zx + I + CD, .dtb = w + o.dtb,
         .ddt = ddt, .dzdt = dzx + I + CD);
  rt_scratch_free(dyg);
  rt_scratch_free(dxbc);
  rt_scratch_free(ddt);
  rt_gemm(false, true, T, hd, W, 1.0f, dzx, W, w + o.in_proj, W, 0.0f, dh, hd);
  if (dx) {
    rt_copy(dx, dys_save, (size_t)T * hd);
    rt_rmsnorm_bwd_in(T, hd, save + so.x, w + o.norm, 0.0f, save + so.rstd1, dh, dx, true);
  }
}

/* W. Pre: m2_bwd_in ran on save. Post: g += this microbatch's gradients of every parameter. */
static void m2_bwd_w(const rt_ldims *d, const float *w, const float *save, float *g) {
  m2_dims m = m2_dims_of(d);
  m2_woff o = m2_woff_of(&m);
  m2_soff so = m2_soff_of(&m);
  int T = m.T, hd = m.hd, W = m.W, I = m.I, H = m.H, CD = m.CD, K = m.K;
  const float *zx = save + so.zx, *dzx = save + so.dzx, *dcpre = save + so.dcpre;
  rt_rmsnorm_bwd_w(T, hd, save + so.x, save + so.rstd1, save + so.dh, g + o.norm);
  rt_gemm(true, false, hd, W, T, 1.0f, save + so.hn, hd, dzx, W, 1.0f, g + o.in_proj, W);
  /* convolution taps and bias */
  RT_FOR(m2_conv_bwd_w, (long)CD * K, .B = m.B, .S = m.S, .K = K, .CD = CD, .W = W,
         .in = zx + I, .dcpre = dcpre, .g = g + o.convw);
  RT_FOR(col_sum, CD, .rows = T, .n = CD, .m = dcpre, .g = g + o.convb);
  /* per-head parameters: dt_bias, A_log (dA/dA_log = A), D */
  RT_FOR(m2_head_bwd_w, H, .T = T, .H = H, .W = W, .dzdt = dzx + I + CD, .da = save + so.da,
         .dt = save + so.dt, .dD = save + so.dD, .alog = w + o.alog, .gdtb = g + o.dtb,
         .galog = g + o.alog, .gD = g + o.D);
  /* gated-norm weight */
  RT_FOR(m2_gnorm_bwd_w, I, .T = T, .inner = I, .G = m.G, .gw = m.gw, .yg = save + so.yg,
         .dygn = save + so.dygn, .rstd = save + so.rstd2, .g = g + o.gnorm);
  rt_gemm(true, false, I, hd, T, 1.0f, save + so.ygn, I, save + so.dy, hd, 1.0f, g + o.out, hd);
}

/* Dimensions: hidden, seq, SSM heads and head width (rt_heads_dims over the groups), state,
 * conv, chunk and norm_eps. */
static int m2_ldims(const rt_dims_in *in, rt_ldims *d, strbuf *err) {
  (void)err;
  int k = in->scale;
  rt_dims_tokens(in, BE_LP_MAMBA2_HIDDEN, BE_LP_MAMBA2_SEQ, d);
  double hidden = rt_lp(in, BE_LP_MAMBA2_HIDDEN, 0);
  double hd = rt_lp(in, BE_LP_MAMBA2_HEAD_DIM, 64), expand = rt_lp(in, BE_LP_MAMBA2_EXPAND, 2);
  double heads = rt_lp(in, BE_LP_MAMBA2_HEADS, hd > 0 ? expand * hidden / hd : 0);
  double groups = rt_lp(in, BE_LP_MAMBA2_GROUPS, 8), state = rt_lp(in, BE_LP_MAMBA2_STATE, 128);
  double chunk = rt_lp(in, BE_LP_MAMBA2_CHUNK, 256);
  if (heads < 1 || groups < 1 || fmod(heads, groups) != 0) { /* the plan says why */
    d->heads = (int)heads;
    d->groups = (int)groups;
    d->head_dim = (int)rt_sdim(hd, k, 1, 1);
  } else {
    rt_heads_dims(heads, groups, hd, k, 1, &d->heads, &d->groups, &d->head_dim);
  }
  d->inner = d->heads * d->head_dim;
  d->state = (int)rt_sdim(state, k, state < 4 ? (long)state : 4, 1);
  d->conv = (int)rt_lp(in, BE_LP_MAMBA2_CONV, 4);
  d->chunk = (int)rt_sdim(chunk, k, chunk < 8 ? (long)chunk : 8, 1);
  d->norm_eps = rt_lp(in, BE_LP_MAMBA2_NORM_EPS, 1e-5); /* the input norm's and the gated one's */
  return 0;
}

/* The projections' GEMMs and the scan: within chunks and their states. */
static double m2_flops(const rt_ldims *d, double nw) {
  double T = (double)d->B * d->S;
  return rt_flops_gemm(d, nw) +
         2.0 * T * d->heads * ((double)d->chunk * (d->head_dim + d->state) +
                               2.0 * d->head_dim * d->state);
}

const rt_kernel rt_kernel_MAMBA2 = {BE_KIND_MAMBA2, 0, m2_ldims, m2_plan, m2_fwd, m2_bwd_in,
                                    m2_bwd_w, m2_flops};
