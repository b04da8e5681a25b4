/* k_mamba2.c -- the mamba2 kernel: a pre-norm Mamba-2 mixer block (Dao & Gu 2024; mamba_ssm's
 * Mamba2 with ngroups, norm_before_gate=False, no projection biases) with its residual:
 *   h = RMSNorm(x)*norm; [z | xBC | dt] = h in_proj; xBC = silu(causal depthwise conv(xBC)+b);
 *   [xs | B | C] = xBC; dt = softplus(dt + dt_bias); A = -exp(A_log); per sequence and SSM head
 *   (head h reads group h / (heads/groups) of B and C): s_t = exp(dt_t A) s_{t-1} +
 *   dt_t xs_t B_t^T, y_t = s_t C_t + D xs_t; yg = y * silu(z), RMSNorm over each of the groups'
 *   inner/groups channels times gate_norm; out = yg out_proj; y = x + out.
 * The scan runs as the chunked SSD algorithm: within a chunk of 'chunk' tokens the quadratic form
 * with the decay mask exp(cs_t - cs_s) from the cumulative sums cs of dt*A, between chunks the
 * state passed on; its backward is the exact gradient of that chunked form, chunks in reverse. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

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

/* ---- Convolution and gated norm ------------------------------------------------------------ */

/* Causal depthwise convolution within each sequence: cpre[t,c] = b[c] + sum_k w[c,k] *
 * in[t-(K-1)+k, c] (terms before the sequence's start are 0), xbc = silu(cpre).
 * Pre: in has row stride m->W; cpre and xbc hold T x CD. Post: both written. */
static void m2_conv_fwd(const m2_dims *m, const float *in, const float *w, const float *b,
                        float *cpre, float *xbc) {
  int CD = m->CD, K = m->K;
  for (int bb = 0; bb < m->B; bb++)
    for (int t = 0; t < m->S; t++) {
      size_t r = (size_t)bb * m->S + t;
      float *o = cpre + r * CD;
      memcpy(o, b, (size_t)CD * sizeof *o);
      for (int k = 0; k < K; k++) {
        int tt = t - (K - 1) + k;
        if (tt < 0) continue;
        const float *src = in + ((size_t)bb * m->S + tt) * m->W;
        for (int c = 0; c < CD; c++) o[c] += w[(size_t)c * K + k] * src[c];
      }
      float *a = xbc + r * CD;
      for (int c = 0; c < CD; c++) a[c] = rt_silu(o[c]);
    }
}

/* Input gradient of the convolution: din[tt,c] = sum_k w[c,k] dcpre[tt+(K-1)-k, c] over the
 * terms inside the sequence. Pre: din has row stride m->W; dcpre is T x CD. Post: the CD
 * columns of din written (overwritten). */
static void m2_conv_bwd_in(const m2_dims *m, const float *w, const float *dcpre, float *din) {
  int CD = m->CD, K = m->K;
  for (int r = 0; r < m->T; r++) memset(din + (size_t)r * m->W, 0, (size_t)CD * sizeof *din);
  for (int bb = 0; bb < m->B; bb++)
    for (int t = 0; t < m->S; t++) {
      const float *g = dcpre + ((size_t)bb * m->S + t) * CD;
      for (int k = 0; k < K; k++) {
        int tt = t - (K - 1) + k;
        if (tt < 0) continue;
        float *dst = din + ((size_t)bb * m->S + tt) * m->W;
        for (int c = 0; c < CD; c++) dst[c] += w[(size_t)c * K + k] * g[c];
      }
    }
}

/* Gated norm forward: per token and group of gw channels, rstd = 1 / sqrt(mean(yg^2) + eps),
 * ygn = yg * rstd * gamma. Pre: yg is T x I. Post: ygn (T x I) and rstd (T x G) written. */
static void m2_gnorm_fwd(const m2_dims *m, const float *yg, const float *gamma, float *ygn,
                         float *rstd) {
  int n = m->gw;
  for (size_t r = 0; r < (size_t)m->T * m->G; r++) {
    const float *v = yg + r * n;
    const float *gm = gamma + (r % m->G) * n;
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)v[i] * v[i];
    float rs = (float)(1.0 / sqrt(ss / n + RT_NORM_EPS));
    rstd[r] = rs;
    for (int i = 0; i < n; i++) ygn[r * n + i] = v[i] * rs * gm[i];
  }
}

/* Input gradient of the gated norm: dyg from dygn. Pre: m2_gnorm_fwd's yg and rstd. Post: dyg
 * (T x I) written. */
static void m2_gnorm_bwd_in(const m2_dims *m, const float *yg, const float *gamma,
                            const float *rstd, const float *dygn, float *dyg) {
  int n = m->gw;
  for (size_t r = 0; r < (size_t)m->T * m->G; r++) {
    const float *v = yg + r * n, *dv = dygn + r * n;
    const float *gm = gamma + (r % m->G) * n;
    double rs = rstd[r], dot = 0;
    for (int i = 0; i < n; i++) dot += (double)dv[i] * gm[i] * v[i];
    double c = dot * rs * rs / n;
    for (int i = 0; i < n; i++) dyg[r * n + i] = (float)(rs * ((double)dv[i] * gm[i] - v[i] * c));
  }
}

/* ---- SSD scan -------------------------------------------------------------------------------- */

/* Scratch of the chunked scan, sized for one chunk. */
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
  double *cs;  /* [L] cumulative sums of dt*A within the chunk */
  double *dcs; /* [L] their gradients */
  double *ddt; /* [L] gradients of dt */
} m2_scratch;

/* Allocate scratch for sizes m. Post: every buffer allocated (dCB zeroed); free with
 * m2_scratch_free. */
static m2_scratch m2_scratch_new(const m2_dims *m) {
  size_t LL = (size_t)m->L * m->L;
  m2_scratch w;
  w.CB = xmalloc(LL * sizeof(float));
  w.Lm = xmalloc(LL * sizeof(float));
  w.Mf = xmalloc(LL * sizeof(float));
  w.dMf = xmalloc(LL * sizeof(float));
  w.dCB = xcalloc(LL, sizeof(float));
  w.tmp = xmalloc((size_t)m->L * m->P * sizeof(float));
  w.dYs = xmalloc((size_t)m->L * m->P * sizeof(float));
  w.Bw = xmalloc((size_t)m->L * m->N * sizeof(float));
  w.XdS = xmalloc((size_t)m->L * m->N * sizeof(float));
  w.dSn = xmalloc((size_t)m->P * m->N * sizeof(float));
  w.cs = xmalloc((size_t)m->L * sizeof(double));
  w.dcs = xmalloc((size_t)m->L * sizeof(double));
  w.ddt = xmalloc((size_t)m->L * sizeof(double));
  return w;
}

/* Free what m2_scratch_new allocated. */
static void m2_scratch_free(m2_scratch *w) {
  free(w->CB);
  free(w->Lm);
  free(w->Mf);
  free(w->dMf);
  free(w->dCB);
  free(w->tmp);
  free(w->dYs);
  free(w->Bw);
  free(w->XdS);
  free(w->dSn);
  free(w->cs);
  free(w->dcs);
  free(w->ddt);
}

/* For head h of the chunk of l tokens starting at row t0: cs (inclusive cumulative sums of
 * dt*A), Lm (decay matrix) and Mf = CB * Lm * dt_s, both l x l and zero above the diagonal.
 * Pre: w->CB holds the head's group's C B^T (l x l). */
static void m2_chunk_mix(const m2_dims *m, const float *dt, double A, int t0, int l, int h,
                         m2_scratch *w) {
  double acc = 0;
  for (int i = 0; i < l; i++) {
    acc += (double)dt[(size_t)(t0 + i) * m->H + h] * A;
    w->cs[i] = acc;
  }
  for (int t = 0; t < l; t++) {
    for (int s = 0; s <= t; s++) {
      float e = (float)exp(w->cs[t] - w->cs[s]);
      w->Lm[t * l + s] = e;
      w->Mf[t * l + s] = w->CB[t * l + s] * e * dt[(size_t)(t0 + s) * m->H + h];
    }
    for (int s = t + 1; s < l; s++) w->Lm[t * l + s] = w->Mf[t * l + s] = 0;
  }
}

/* Chunked SSD forward. Pre: xbc (T x CD: xs | B | C) and dt (T x H) of F. Post: ys (T x I) holds
 * y_t = s_t C_t + D xs_t, st the state at the start of every chunk (zero for the first). */
static void m2_ssd_fwd(const m2_dims *m, const float *alog, const float *Dp, const float *xbc,
                       const float *dt, float *ys, float *st) {
  int P = m->P, N = m->N, CD = m->CD, I = m->I, L = m->L;
  size_t PN = (size_t)P * N;
  float *S = xcalloc((size_t)m->H * PN, sizeof *S);
  m2_scratch w = m2_scratch_new(m);
  for (int b = 0; b < m->B; b++) {
    memset(S, 0, (size_t)m->H * PN * sizeof *S);
    for (int c = 0; c < m->nc; c++) {
      int t0 = b * m->S + c * L, l = m->S - c * L < L ? m->S - c * L : L;
      memcpy(st + ((size_t)b * m->nc + c) * m->H * PN, S, (size_t)m->H * PN * sizeof *S);
      for (int g = 0; g < m->G; g++) {
        const float *Bp = xbc + (size_t)t0 * CD + I + (size_t)g * N;
        const float *Cp = Bp + m->GN;
        rt_gemm(false, true, l, l, N, 1.0f, Cp, CD, Bp, CD, 0.0f, w.CB, l);
        for (int h = g * m->hpg; h < (g + 1) * m->hpg; h++) {
          double A = -exp((double)alog[h]);
          m2_chunk_mix(m, dt, A, t0, l, h, &w);
          const float *Xp = xbc + (size_t)t0 * CD + (size_t)h * P;
          float *Yp = ys + (size_t)t0 * I + (size_t)h * P, *Sh = S + h * PN;
          rt_gemm(false, false, l, P, l, 1.0f, w.Mf, l, Xp, CD, 0.0f, Yp, I);
          if (c > 0) rt_gemm(false, true, l, P, N, 1.0f, Cp, CD, Sh, N, 0.0f, w.tmp, P);
          for (int t = 0; t < l; t++) {
            float e = (float)exp(w.cs[t]);
            for (int p = 0; p < P; p++)
              Yp[(size_t)t * I + p] += (c > 0 ? e * w.tmp[t * P + p] : 0.0f) +
                                       Dp[h] * Xp[(size_t)t * CD + p];
          }
          if (c == m->nc - 1) continue; /* the last chunk's end state is not needed */
          double ce = w.cs[l - 1];
          for (int s = 0; s < l; s++) {
            float ws = (float)exp(ce - w.cs[s]) * dt[(size_t)(t0 + s) * m->H + h];
            for (int n = 0; n < N; n++) w.Bw[s * N + n] = ws * Bp[(size_t)s * CD + n];
          }
          float e = (float)exp(ce);
          for (size_t k = 0; k < PN; k++) Sh[k] *= e;
          rt_gemm(true, false, P, N, l, 1.0f, Xp, CD, w.Bw, N, 1.0f, Sh, N);
        }
      }
    }
  }
  m2_scratch_free(&w);
  free(S);
}

/* Chunked SSD backward, chunks in reverse carrying the gradient of each chunk's end state.
 * Pre: F's xbc, dt, st; dys (T x I) the gradient of ys; dxbc (T x CD) zeroed.
 * Post: dxbc += gradients of xs, B, C; ddt (T x H) = gradient of dt; da (T x H) = gradient of
 * the log decay dt*A; dD (T x H) = dys_t . xs_t per token and head. */
static void m2_ssd_bwd(const m2_dims *m, const float *alog, const float *Dp, const float *xbc,
                       const float *dt, const float *st, const float *dys, float *dxbc,
                       float *ddt, float *da, float *dD) {
  int P = m->P, N = m->N, CD = m->CD, I = m->I, L = m->L;
  size_t PN = (size_t)P * N;
  float *dS = xcalloc((size_t)m->H * PN, sizeof *dS);
  m2_scratch w = m2_scratch_new(m);
  for (int b = 0; b < m->B; b++) {
    memset(dS, 0, (size_t)m->H * PN * sizeof *dS);
    for (int c = m->nc - 1; c >= 0; c--) {
      int t0 = b * m->S + c * L, l = m->S - c * L < L ? m->S - c * L : L;
      bool inter = c > 0, carry = c < m->nc - 1; /* nonzero start state / end-state gradient */
      for (int g = 0; g < m->G; g++) {
        const float *Bp = xbc + (size_t)t0 * CD + I + (size_t)g * N;
        const float *Cp = Bp + m->GN;
        float *dBp = dxbc + (size_t)t0 * CD + I + (size_t)g * N, *dCp = dBp + m->GN;
        rt_gemm(false, true, l, l, N, 1.0f, Cp, CD, Bp, CD, 0.0f, w.CB, l);
        memset(w.dCB, 0, (size_t)l * l * sizeof *w.dCB);
        for (int h = g * m->hpg; h < (g + 1) * m->hpg; h++) {
          double A = -exp((double)alog[h]);
          m2_chunk_mix(m, dt, A, t0, l, h, &w);
          const float *Xp = xbc + (size_t)t0 * CD + (size_t)h * P;
          const float *dYp = dys + (size_t)t0 * I + (size_t)h * P;
          const float *Sp = st + (((size_t)b * m->nc + c) * m->H + h) * PN;
          float *dXp = dxbc + (size_t)t0 * CD + (size_t)h * P, *dSh = dS + h * PN;
          for (int i = 0; i < l; i++) w.dcs[i] = w.ddt[i] = 0;
          /* skip term D xs_t */
          for (int t = 0; t < l; t++) {
            double s = 0;
            for (int p = 0; p < P; p++) {
              s += (double)dYp[(size_t)t * I + p] * Xp[(size_t)t * CD + p];
              dXp[(size_t)t * CD + p] += Dp[h] * dYp[(size_t)t * I + p];
            }
            dD[(size_t)(t0 + t) * m->H + h] = (float)s;
          }
          /* intra-chunk: Y = Mf X */
          rt_gemm(false, true, l, l, P, 1.0f, dYp, I, Xp, CD, 0.0f, w.dMf, l);
          rt_gemm(true, false, l, P, l, 1.0f, w.Mf, l, dYp, I, 1.0f, dXp, CD);
          for (int t = 0; t < l; t++)
            for (int s = 0; s <= t; s++) {
              double gm = w.dMf[t * l + s], e = w.Lm[t * l + s];
              double dts = dt[(size_t)(t0 + s) * m->H + h], cb = w.CB[t * l + s];
              w.dCB[t * l + s] += (float)(gm * e * dts);
              w.ddt[s] += gm * e * cb;
              double dl = gm * cb * dts * e;
              w.dcs[t] += dl;
              w.dcs[s] -= dl;
            }
          /* inter-chunk output: y_t += exp(cs_t) S_prev C_t */
          if (inter) {
            rt_gemm(false, true, l, P, N, 1.0f, Cp, CD, Sp, N, 0.0f, w.tmp, P);
            for (int t = 0; t < l; t++) {
              double e = exp(w.cs[t]), s = 0;
              for (int p = 0; p < P; p++) {
                s += (double)dYp[(size_t)t * I + p] * w.tmp[t * P + p];
                w.dYs[t * P + p] = (float)e * dYp[(size_t)t * I + p];
              }
              w.dcs[t] += e * s;
            }
            rt_gemm(false, false, l, N, P, 1.0f, w.dYs, P, Sp, N, 1.0f, dCp, CD);
            rt_gemm(true, false, P, N, l, 1.0f, w.dYs, P, Cp, CD, 0.0f, w.dSn, N);
          }
          /* chunk end state: S_end = exp(cs_e) S_prev + sum_s w_s xs_s B_s^T */
          if (carry) {
            double ce = w.cs[l - 1];
            for (int s = 0; s < l; s++) {
              float ws = (float)exp(ce - w.cs[s]) * dt[(size_t)(t0 + s) * m->H + h];
              for (int n = 0; n < N; n++) w.Bw[s * N + n] = ws * Bp[(size_t)s * CD + n];
            }
            rt_gemm(false, true, l, P, N, 1.0f, w.Bw, N, dSh, N, 1.0f, dXp, CD);
            rt_gemm(false, false, l, N, P, 1.0f, Xp, CD, dSh, N, 0.0f, w.XdS, N);
            for (int s = 0; s < l; s++) {
              double dec = exp(ce - w.cs[s]), dts = dt[(size_t)(t0 + s) * m->H + h];
              double ws = dec * dts, dw = 0;
              for (int n = 0; n < N; n++) {
                dw += (double)w.XdS[s * N + n] * Bp[(size_t)s * CD + n];
                dBp[(size_t)s * CD + n] += (float)ws * w.XdS[s * N + n];
              }
              w.ddt[s] += dw * dec;
              w.dcs[l - 1] += dw * ws;
              w.dcs[s] -= dw * ws;
            }
            if (inter) {
              double e = exp(ce), f = 0;
              for (size_t k = 0; k < PN; k++) {
                f += (double)dSh[k] * Sp[k];
                w.dSn[k] += (float)e * dSh[k];
              }
              w.dcs[l - 1] += e * f;
            }
          }
          /* cs_i = sum_{j <= i} a_j: da_j = sum_{i >= j} dcs_i; a = dt * A */
          double acc = 0;
          for (int i = l - 1; i >= 0; i--) {
            acc += w.dcs[i];
            size_t r = (size_t)(t0 + i) * m->H + h;
            da[r] = (float)acc;
            ddt[r] = (float)(w.ddt[i] + acc * A);
          }
          if (inter) memcpy(dSh, w.dSn, PN * sizeof *dSh);
        }
        /* CB_ts = C_t . B_s, summed over the group's heads */
        rt_gemm(false, false, l, N, l, 1.0f, w.dCB, l, Bp, CD, 1.0f, dCp, CD);
        rt_gemm(true, false, l, N, l, 1.0f, w.dCB, l, Cp, CD, 1.0f, dBp, CD);
      }
    }
  }
  m2_scratch_free(&w);
  free(dS);
}

/* ---- Kernel entry points --------------------------------------------------------------------- */

/* F. Pre: m2_plan accepted d; w holds the plan's parameters; save has save_floats floats.
 * Post: y (T x hidden) = x + mixer(x); the forward regions of save written. */
static void m2_fwd(const rt_ldims *d, const float *w, const float *x, float *y, float *save) {
  m2_dims m = m2_dims_of(d);
  m2_woff o = m2_woff_of(&m);
  m2_soff so = m2_soff_of(&m);
  int T = m.T, hd = m.hd, W = m.W, I = m.I, H = m.H;
  float *xs = save + so.x, *rstd1 = save + so.rstd1, *hn = save + so.hn, *zx = save + so.zx;
  float *dt = save + so.dt, *ys = save + so.ys, *yg = save + so.yg, *ygn = save + so.ygn;
  float *xbc = save + so.xbc;
  memcpy(xs, x, (size_t)T * hd * sizeof *x);
  rt_rmsnorm_fwd(T, hd, x, w + o.norm, hn, rstd1);
  rt_gemm(false, false, T, W, hd, 1.0f, hn, hd, w + o.in_proj, W, 0.0f, zx, W);
  m2_conv_fwd(&m, zx + I, w + o.convw, w + o.convb, save + so.cpre, xbc);
  for (int t = 0; t < T; t++)
    for (int h = 0; h < H; h++)
      dt[(size_t)t * H + h] = rt_softplus(zx[(size_t)t * W + I + m.CD + h] + w[o.dtb + h]);
  m2_ssd_fwd(&m, w + o.alog, w + o.D, xbc, dt, ys, save + so.st);
  for (int t = 0; t < T; t++)
    for (int i = 0; i < I; i++)
      yg[(size_t)t * I + i] = ys[(size_t)t * I + i] * rt_silu(zx[(size_t)t * W + i]);
  m2_gnorm_fwd(&m, yg, w + o.gnorm, ygn, save + so.rstd2);
  memcpy(y, x, (size_t)T * hd * sizeof *y);
  rt_gemm(false, false, T, hd, I, 1.0f, ygn, I, w + o.out, hd, 1.0f, y, hd);
}

/* B. Pre: m2_fwd ran on save. Post: dx (when not NULL) = dL/dx; the backward regions of save
 * (dy, dygn, dzx, dcpre, da, dD, dh) written for m2_bwd_w. g is not touched. */
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
  memcpy(dys_save, dy, (size_t)T * hd * sizeof *dy);
  rt_gemm(false, true, T, I, hd, 1.0f, dy, hd, w + o.out, hd, 0.0f, dygn, I);
  float *dyg = xmalloc((size_t)T * I * sizeof *dyg);
  m2_gnorm_bwd_in(&m, save + so.yg, w + o.gnorm, save + so.rstd2, dygn, dyg);
  /* yg = ys * silu(z): dz into dzx's z columns, dys in place of dyg */
  for (int t = 0; t < T; t++)
    for (int i = 0; i < I; i++) {
      size_t k = (size_t)t * I + i;
      float z = zx[(size_t)t * W + i];
      dzx[(size_t)t * W + i] = dyg[k] * ys[k] * rt_silu_grad(z);
      dyg[k] *= rt_silu(z);
    }
  float *dxbc = xcalloc((size_t)T * CD, sizeof *dxbc);
  float *ddt = xmalloc((size_t)T * H * sizeof *ddt);
  m2_ssd_bwd(&m, w + o.alog, w + o.D, save + so.xbc, dt, save + so.st, dyg, dxbc, ddt,
             save + so.da, save + so.dD);
  for (size_t k = 0; k < (size_t)T * CD; k++) dcpre[k] = dxbc[k] * rt_silu_grad(cpre[k]);
  m2_conv_bwd_in(&m, w + o.convw, dcpre, dzx + I);
  for (int t = 0; t < T; t++)
    for (int h = 0; h < H; h++) {
      size_t c = (size_t)t * W + I + CD + h;
      dzx[c] = ddt[(size_t)t * H + h] * rt_sigmoid(zx[c] + w[o.dtb + h]);
    }
  free(dyg);
  free(dxbc);
  free(ddt);
  rt_gemm(false, true, T, hd, W, 1.0f, dzx, W, w + o.in_proj, W, 0.0f, dh, hd);
  if (dx) {
    memcpy(dx, dy, (size_t)T * hd * sizeof *dx);
    rt_rmsnorm_bwd_in(T, hd, save + so.x, w + o.norm, save + so.rstd1, dh, dx, true);
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
  double *acc = xcalloc((size_t)CD * (K + 1), sizeof *acc); /* [CD x K] taps | [CD] bias */
  for (int b = 0; b < m.B; b++)
    for (int t = 0; t < m.S; t++) {
      const float *gr = dcpre + ((size_t)b * m.S + t) * CD;
      for (int k = 0; k < K; k++) {
        int tt = t - (K - 1) + k;
        if (tt < 0) continue;
        const float *src = zx + ((size_t)b * m.S + tt) * W + I;
        for (int c = 0; c < CD; c++) acc[(size_t)c * K + k] += (double)gr[c] * src[c];
      }
      for (int c = 0; c < CD; c++) acc[(size_t)CD * K + c] += gr[c];
    }
  for (size_t k = 0; k < (size_t)CD * K; k++) g[o.convw + k] += (float)acc[k];
  for (int c = 0; c < CD; c++) g[o.convb + c] += (float)acc[(size_t)CD * K + c];
  free(acc);
  /* per-head parameters: dt_bias, A_log (dA/dA_log = A), D */
  const float *dt = save + so.dt, *da = save + so.da, *dD = save + so.dD;
  for (int h = 0; h < H; h++) {
    double sb = 0, sa = 0, sd = 0;
    for (int t = 0; t < T; t++) {
      size_t r = (size_t)t * H + h;
      sb += dzx[(size_t)t * W + I + CD + h];
      sa += (double)da[r] * dt[r];
      sd += dD[r];
    }
    g[o.dtb + h] += (float)sb;
    g[o.alog + h] += (float)(sa * -exp((double)w[o.alog + h]));
    g[o.D + h] += (float)sd;
  }
  /* gated-norm weight */
  const float *yg = save + so.yg, *dygn = save + so.dygn, *rstd2 = save + so.rstd2;
  double *gs = xcalloc((size_t)I, sizeof *gs);
  for (int t = 0; t < T; t++)
    for (int i = 0; i < I; i++)
      gs[i] += (double)dygn[(size_t)t * I + i] * yg[(size_t)t * I + i] *
               rstd2[(size_t)t * m.G + i / m.gw];
  for (int i = 0; i < I; i++) g[o.gnorm + i] += (float)gs[i];
  free(gs);
  rt_gemm(true, false, I, hd, T, 1.0f, save + so.ygn, I, save + so.dy, hd, 1.0f, g + o.out, hd);
}

const rt_kernel rt_k_mamba2 = {"mamba2", m2_plan, m2_fwd, m2_bwd_in, m2_bwd_w};
