/* kb_mamba2.h -- the element-wise bodies of the mamba2 kernel (kernels/mamba2.c), see kdev.h and
 * bodies.def.
 *
 * Token t of sequence b is row b * S + t of every [T x n] array. In the scan's bodies, "the
 * chunk" is the l tokens the calling loop is on, for one head h: their per-token per-head arrays
 * (dt, cs) are passed pointing at the chunk's first token and head h, with row stride H; their
 * per-token vectors (xs, B, C, y and gradients) pointing at the chunk's first row of the head's
 * (or group's) columns, with the row stride of their array. The scan's double sums (cs, dcs,
 * ddt) live in double arrays of rt_scratch memory. Arithmetic is that of the former plain loops,
 * term for term and in the same order, so the CPU's results did not change. */
#ifndef OCTO_RT_KB_MAMBA2_H
#define OCTO_RT_KB_MAMBA2_H

#include "kb_common.h"

/* ---- Convolution, dt, gate and gated norm (one index per element, row or column) ----------- */

/* Element i of the T x CD convolution output: cpre[t,c] = b[c] + sum_k w[c,k] in[t-(K-1)+k, c]
 * within the sequence (k ascending, earlier terms skipped), xbc = silu(cpre). */
typedef struct rt_b_m2_conv_fwd_a {
  int S, K, CD, W;           /* tokens per sequence, taps, channels, row stride of in */
  const float *in, *w, *b;   /* T rows of stride W (the xBC columns), [CD x K], [CD] */
  float *cpre, *xbc;         /* T x CD each */
} rt_b_m2_conv_fwd_a;
RT_BODY_FN(m2_conv_fwd) {
  int CD = p->CD, K = p->K;
  long r = i / CD, c = i % CD, bb = r / p->S, t = r % p->S;
  float o = p->b[c];
  for (int k = 0; k < K; k++) {
    long tt = t - (K - 1) + k;
    if (tt < 0) continue;
    o += p->w[(size_t)c * K + k] * p->in[((size_t)bb * p->S + tt) * p->W + c];
  }
  p->cpre[i] = o;
  p->xbc[i] = rt_silu(o);
}

/* Element i of the T x CD input gradient of the convolution: din[t,c] = sum_k w[c,k]
 * dcpre[t+(K-1)-k, c] over the terms inside the sequence, later tokens first (the order in
 * which the former scatter loop added them), overwriting din. */
typedef struct rt_b_m2_conv_bwd_in_a {
  int S, K, CD, W;         /* tokens per sequence, taps, channels, row stride of din */
  const float *w, *dcpre;  /* [CD x K], T x CD */
  float *din;              /* T rows of stride W (the xBC columns) */
} rt_b_m2_conv_bwd_in_a;
RT_BODY_FN(m2_conv_bwd_in) {
  int CD = p->CD, K = p->K;
  long r = i / CD, c = i % CD, bb = r / p->S, tt = r % p->S;
  float s = 0.0f;
  for (int k = K - 1; k >= 0; k--) {
    long t = tt + (K - 1) - k;
    if (t >= p->S) break;
    s += p->w[(size_t)c * K + k] * p->dcpre[((size_t)bb * p->S + t) * CD + c];
  }
  p->din[(size_t)r * p->W + c] = s;
}

/* Element i of the CD x K taps' gradient: g[c,k] += sum over sequences and tokens (in order) of
 * dcpre[t,c] in[t-(K-1)+k, c], in double. */
typedef struct rt_b_m2_conv_bwd_w_a {
  int B, S, K, CD, W;       /* sequences, tokens per sequence, taps, channels, stride of in */
  const float *in, *dcpre;  /* T rows of stride W (the xBC columns before the conv), T x CD */
  float *g;                 /* [CD x K] */
} rt_b_m2_conv_bwd_w_a;
RT_BODY_FN(m2_conv_bwd_w) {
  int CD = p->CD, K = p->K;
  long c = i / K, k = i % K;
  double s = 0;
  for (int b = 0; b < p->B; b++)
    for (int t = 0; t < p->S; t++) {
      long tt = t - (K - 1) + k;
      if (tt < 0) continue;
      s += (double)p->dcpre[((size_t)b * p->S + t) * CD + c] *
           p->in[((size_t)b * p->S + tt) * p->W + c];
    }
  p->g[i] += (float)s;
}

/* Element i of T x H: dt[t,h] = softplus(zx[t, dt column h] + dt_bias[h]). */
typedef struct rt_b_m2_dt_fwd_a {
  int H, W;                /* heads, row stride of zdt */
  const float *zdt, *dtb;  /* T rows of stride W (the raw dt columns), [H] */
  float *dt;               /* T x H */
} rt_b_m2_dt_fwd_a;
RT_BODY_FN(m2_dt_fwd) {
  long t = i / p->H, h = i % p->H;
  p->dt[i] = rt_softplus(p->zdt[(size_t)t * p->W + h] + p->dtb[h]);
}

/* Element i of T x H: dzdt[t,h] = ddt[t,h] * sigmoid(zdt[t,h] + dt_bias[h]). */
typedef struct rt_b_m2_dt_bwd_a {
  int H, W;                     /* heads, row stride of zdt and dzdt */
  const float *zdt, *dtb, *ddt; /* T rows of stride W, [H], T x H */
  float *dzdt;                  /* T rows of stride W (the dt columns of dzx) */
} rt_b_m2_dt_bwd_a;
RT_BODY_FN(m2_dt_bwd) {
  long t = i / p->H, h = i % p->H;
  size_t c = (size_t)t * p->W + h;
  p->dzdt[c] = p->ddt[i] * rt_sigmoid(p->zdt[c] + p->dtb[h]);
}

/* Element i of T x I: yg = ys * silu(z). */
typedef struct rt_b_m2_gate_fwd_a {
  int inner, W;             /* inner width, row stride of z */
  const float *ys, *z;  /* T x I, T rows of stride W (the z columns) */
  float *yg;            /* T x I */
} rt_b_m2_gate_fwd_a;
RT_BODY_FN(m2_gate_fwd) {
  long t = i / p->inner, k = i % p->inner;
  p->yg[i] = p->ys[i] * rt_silu(p->z[(size_t)t * p->W + k]);
}

/* Element i of T x I, through yg = ys * silu(z): dz = dyg * ys * silu'(z) (into dzx's z
 * columns), then dyg *= silu(z) in place (it becomes the gradient of ys). */
typedef struct rt_b_m2_gate_bwd_a {
  int inner, W;             /* inner width, row stride of z and dz */
  const float *ys, *z;  /* T x I, T rows of stride W */
  float *dyg, *dz;      /* T x I (in place), T rows of stride W */
} rt_b_m2_gate_bwd_a;
RT_BODY_FN(m2_gate_bwd) {
  long t = i / p->inner, k = i % p->inner;
  float z = p->z[(size_t)t * p->W + k];
  p->dz[(size_t)t * p->W + k] = p->dyg[i] * p->ys[i] * rt_silu_grad(z);
  p->dyg[i] *= rt_silu(z);
}

/* Element i: d[i] = g[i] * silu'(a[i]). */
typedef struct rt_b_m2_silu_bwd_a {
  const float *g, *a; /* gradient of silu(a), a */
  float *d;           /* gradient of a */
} rt_b_m2_silu_bwd_a;
RT_BODY_FN(m2_silu_bwd) { p->d[i] = p->g[i] * rt_silu_grad(p->a[i]); }

/* Row i of the T*G rows of width n (token i / G, group i % G): the gated norm, rstd[i] =
 * 1 / sqrt(mean(yg^2) + eps), ygn = yg * rstd * gamma[group's n channels]. */
typedef struct rt_b_m2_gnorm_fwd_a {
  int n, G;                /* channels per group, groups */
  double eps;              /* epsilon (> 0) */
  const float *yg, *gamma; /* T x G*n, [G*n] */
  float *ygn, *rstd;       /* T x G*n, [T x G] */
} rt_b_m2_gnorm_fwd_a;
RT_BODY_FN(m2_gnorm_fwd) {
  int n = p->n;
  const float *v = p->yg + (size_t)i * n;
  const float *gm = p->gamma + (size_t)(i % p->G) * n;
  double ss = 0;
  for (int k = 0; k < n; k++) ss += (double)v[k] * v[k];
  float rs = (float)(1.0 / sqrt(ss / n + p->eps));
  p->rstd[i] = rs;
  for (int k = 0; k < n; k++) p->ygn[(size_t)i * n + k] = v[k] * rs * gm[k];
}

/* Row i as in m2_gnorm_fwd: dyg = its input gradient given dygn (overwritten). */
typedef struct rt_b_m2_gnorm_bwd_in_a {
  int n, G;                              /* channels per group, groups */
  const float *yg, *gamma, *rstd, *dygn; /* as m2_gnorm_fwd saw them, the output gradient */
  float *dyg;                            /* T x G*n */
} rt_b_m2_gnorm_bwd_in_a;
RT_BODY_FN(m2_gnorm_bwd_in) {
  int n = p->n;
  const float *v = p->yg + (size_t)i * n, *dv = p->dygn + (size_t)i * n;
  const float *gm = p->gamma + (size_t)(i % p->G) * n;
  double rs = p->rstd[i], dot = 0;
  for (int k = 0; k < n; k++) dot += (double)dv[k] * gm[k] * v[k];
  double c = dot * rs * rs / n;
  for (int k = 0; k < n; k++)
    p->dyg[(size_t)i * n + k] = (float)(rs * ((double)dv[k] * gm[k] - v[k] * c));
}

/* Channel i of the gated-norm weight: g[i] += sum over tokens of dygn yg rstd (its group's),
 * in double. */
typedef struct rt_b_m2_gnorm_bwd_w_a {
  int T, inner, G, gw;                 /* tokens, inner width, groups, channels per group */
  const float *yg, *dygn, *rstd;   /* T x I, T x I, T x G */
  float *g;                        /* [I] */
} rt_b_m2_gnorm_bwd_w_a;
RT_BODY_FN(m2_gnorm_bwd_w) {
  double s = 0;
  for (int t = 0; t < p->T; t++)
    s += (double)p->dygn[(size_t)t * p->inner + i] * p->yg[(size_t)t * p->inner + i] *
         p->rstd[(size_t)t * p->G + i / p->gw];
  p->g[i] += (float)s;
}

/* Head i's parameters: dt_bias += sum_t ddt_raw, A_log += (sum_t da dt) * A (dA/dA_log = A,
 * A = -exp(A_log)), D += sum_t dD; sums over tokens in order, in double. */
typedef struct rt_b_m2_head_bwd_w_a {
  int T, H, W;                       /* tokens, heads, row stride of dzdt */
  const float *dzdt, *da, *dt, *dD;  /* T rows of stride W (dt columns of dzx), T x H each */
  const float *alog;                 /* [H] */
  float *gdtb, *galog, *gD;          /* [H] each */
} rt_b_m2_head_bwd_w_a;
RT_BODY_FN(m2_head_bwd_w) {
  double sb = 0, sa = 0, sd = 0;
  for (int t = 0; t < p->T; t++) {
    size_t r = (size_t)t * p->H + i;
    sb += p->dzdt[(size_t)t * p->W + i];
    sa += (double)p->da[r] * p->dt[r];
    sd += p->dD[r];
  }
  p->gdtb[i] += (float)sb;
  p->galog[i] += (float)(sa * -exp((double)p->alog[i]));
  p->gD[i] += (float)sd;
}

/* ---- SSD scan -------------------------------------------------------------------------------- */

/* Chunk i of the B*nc chunks of every head (i = (b * nc + c) * H + h): cs, the inclusive
 * cumulative sums of dt*A over the chunk's tokens, A = -exp(A_log[h]). */
typedef struct rt_b_m2_cs_a {
  int S, L, nc, H;          /* tokens per sequence, chunk length, chunks per sequence, heads */
  const float *dt, *alog;   /* T x H, [H] */
  double *cs;               /* T x H */
} rt_b_m2_cs_a;
RT_BODY_FN(m2_cs) {
  long h = i % p->H, bc = i / p->H, b = bc / p->nc, c = bc % p->nc;
  int l = p->S - (int)c * p->L < p->L ? p->S - (int)c * p->L : p->L;
  size_t r0 = (size_t)b * p->S + (size_t)c * p->L;
  double A = -exp((double)p->alog[h]);
  double acc = 0;
  for (int k = 0; k < l; k++) {
    size_t r = (r0 + k) * p->H + h;
    acc += (double)p->dt[r] * A;
    p->cs[r] = acc;
  }
}

/* Element i = t * l + s of the chunk's l x l matrices: Lm = exp(cs_t - cs_s) and
 * Mf = CB * Lm * dt_s for s <= t, both 0 above the diagonal. */
typedef struct rt_b_m2_mix_a {
  int l, H;              /* chunk tokens, stride of dt and cs */
  const double *cs;      /* the chunk's cs at head h */
  const float *dt, *CB;  /* the chunk's dt at head h, l x l C_t . B_s */
  float *Lm, *Mf;        /* l x l */
} rt_b_m2_mix_a;
RT_BODY_FN(m2_mix) {
  long t = i / p->l, s = i % p->l;
  if (s > t) {
    p->Lm[i] = p->Mf[i] = 0;
    return;
  }
  float e = (float)exp(p->cs[(size_t)t * p->H] - p->cs[(size_t)s * p->H]);
  p->Lm[i] = e;
  p->Mf[i] = p->CB[i] * e * p->dt[(size_t)s * p->H];
}

/* Element i = t * P + p of the chunk's head output: y[t,p] += (inter ? exp(cs_t) tmp[t,p] : 0)
 * + D xs[t,p] (the inter-chunk term and the skip, after y = Mf xs). */
typedef struct rt_b_m2_ssd_y_a {
  int P, H, inner, CD;             /* head width, stride of cs, strides of y and xs */
  bool inter;                  /* the chunk has a start state (tmp = C S_prev^T) */
  const double *cs;            /* the chunk's cs at head h */
  const float *tmp, *D, *xs;   /* l x P, &D[h], the chunk's xs of head h */
  float *y;                    /* the chunk's y of head h */
} rt_b_m2_ssd_y_a;
RT_BODY_FN(m2_ssd_y) {
  long t = i / p->P, q = i % p->P;
  float e = (float)exp(p->cs[(size_t)t * p->H]);
  p->y[(size_t)t * p->inner + q] +=
      (p->inter ? e * p->tmp[i] : 0.0f) + p->D[0] * p->xs[(size_t)t * p->CD + q];
}

/* Element i = s * N + n: Bw[s,n] = exp(cs_end - cs_s) dt_s B[s,n], B_s weighted by its decay to
 * the chunk's end (l tokens) and dt_s. */
typedef struct rt_b_m2_bw_a {
  int l, N, H, CD;         /* chunk tokens, state, stride of cs and dt, stride of B */
  const double *cs;        /* the chunk's cs at head h */
  const float *dt, *Bm;    /* the chunk's dt at head h, its B of the head's group */
  float *Bw;               /* l x N */
} rt_b_m2_bw_a;
RT_BODY_FN(m2_bw) {
  long s = i / p->N, n = i % p->N;
  double ce = p->cs[(size_t)(p->l - 1) * p->H];
  float ws = (float)exp(ce - p->cs[(size_t)s * p->H]) * p->dt[(size_t)s * p->H];
  p->Bw[i] = ws * p->Bm[(size_t)s * p->CD + n];
}

/* Element i of a head's P x N state: S *= exp(cs_end), the decay over the chunk of l tokens. */
typedef struct rt_b_m2_decay_a {
  int l, H;          /* chunk tokens, stride of cs */
  const double *cs;  /* the chunk's cs at head h */
  float *S;          /* P x N */
} rt_b_m2_decay_a;
RT_BODY_FN(m2_decay) { p->S[i] *= (float)exp(p->cs[(size_t)(p->l - 1) * p->H]); }

/* Token t = i of the chunk, the skip term's gradient: dD_t = dy_t . xs_t (double),
 * dxs_t += D dy_t. */
typedef struct rt_b_m2_ssd_skip_a {
  int P, H, inner, CD;             /* head width, stride of dD, stride of dy, stride of xs, dxs */
  const float *D, *dy, *xs;    /* &D[h], the chunk's dy and xs of head h */
  float *dxs, *dD;             /* the chunk's dxs of head h, its dD at head h */
} rt_b_m2_ssd_skip_a;
RT_BODY_FN(m2_ssd_skip) {
  double s = 0;
  for (int q = 0; q < p->P; q++) {
    s += (double)p->dy[(size_t)i * p->inner + q] * p->xs[(size_t)i * p->CD + q];
    p->dxs[(size_t)i * p->CD + q] += p->D[0] * p->dy[(size_t)i * p->inner + q];
  }
  p->dD[(size_t)i * p->H] = (float)s;
}

/* Token j = i of the chunk, the intra-chunk gradient through Mf = CB * Lm * dt_s (dMf = dy xs^T):
 * column j of dCB += dMf Lm dt_j; ddt[j] = sum_t dMf Lm CB over column j; dcs[j] = sum over
 * row j of dl - sum over column j of dl, dl = dMf CB dt_s Lm (the terms in the order the former
 * loop over t, then s <= t, added them: row j, then its diagonal term, then column j below it).
 * Overwrites dcs[j] and ddt[j]. */
typedef struct rt_b_m2_ssd_intra_a {
  int l, H;                          /* chunk tokens, stride of dt */
  const float *dt, *dMf, *Lm, *CB;   /* the chunk's dt at head h, l x l each */
  float *dCB;                        /* l x l, accumulated over the group's heads */
  double *dcs, *ddt;                 /* [l] each */
} rt_b_m2_ssd_intra_a;
RT_BODY_FN(m2_ssd_intra) {
  int l = p->l;
  long j = i;
  double dc = 0, dd = 0;
  for (long s = 0; s <= j; s++) {
    double gm = p->dMf[j * l + s], e = p->Lm[j * l + s];
    double dts = p->dt[(size_t)s * p->H], cb = p->CB[j * l + s];
    dc += gm * cb * dts * e;
  }
  double dts = p->dt[(size_t)j * p->H];
  for (long t = j; t < l; t++) {
    double gm = p->dMf[t * l + j], e = p->Lm[t * l + j], cb = p->CB[t * l + j];
    p->dCB[t * l + j] += (float)(gm * e * dts);
    dd += gm * e * cb;
    dc -= gm * cb * dts * e;
  }
  p->dcs[j] = dc;
  p->ddt[j] = dd;
}

/* Token t = i of the chunk, the gradient through y_t += exp(cs_t) S_prev C_t: dys_t =
 * exp(cs_t) dy_t (for dC and dS_prev), dcs[t] += exp(cs_t) dy_t . tmp_t (tmp = C S_prev^T). */
typedef struct rt_b_m2_ssd_inter_a {
  int P, H, inner;              /* head width, stride of cs, stride of dy */
  const double *cs;         /* the chunk's cs at head h */
  const float *dy, *tmp;    /* the chunk's dy of head h, l x P */
  float *dys;               /* l x P */
  double *dcs;              /* [l] */
} rt_b_m2_ssd_inter_a;
RT_BODY_FN(m2_ssd_inter) {
  double e = exp(p->cs[(size_t)i * p->H]), s = 0;
  for (int q = 0; q < p->P; q++) {
    s += (double)p->dy[(size_t)i * p->inner + q] * p->tmp[(size_t)i * p->P + q];
    p->dys[(size_t)i * p->P + q] = (float)e * p->dy[(size_t)i * p->inner + q];
  }
  p->dcs[i] += e * s;
}

/* Token s = i of the chunk, the gradient through the end state's sum_s w_s xs_s B_s^T, w_s =
 * exp(cs_end - cs_s) dt_s (XdS = xs dS_end): dw = XdS_s . B_s (double), dB_s += w_s XdS_s,
 * ddt[s] += dw exp(cs_end - cs_s), q[s] = dw w_s, dcs[s] -= q[s] except for the chunk's last
 * token (m2_ssd_da adds and subtracts its q terms in the former order). */
typedef struct rt_b_m2_ssd_carry_a {
  int l, N, H, CD;              /* chunk tokens, state, stride of cs and dt, stride of B, dB */
  const double *cs;             /* the chunk's cs at head h */
  const float *dt, *Bm, *XdS;   /* the chunk's dt at head h, its B of the group, l x N */
  float *dB;                    /* the chunk's dB of the group */
  double *ddt, *dcs, *q;        /* [l] each */
} rt_b_m2_ssd_carry_a;
RT_BODY_FN(m2_ssd_carry) {
  double ce = p->cs[(size_t)(p->l - 1) * p->H];
  double dec = exp(ce - p->cs[(size_t)i * p->H]), dts = p->dt[(size_t)i * p->H];
  double ws = dec * dts, dw = 0;
  for (int n = 0; n < p->N; n++) {
    dw += (double)p->XdS[(size_t)i * p->N + n] * p->Bm[(size_t)i * p->CD + n];
    p->dB[(size_t)i * p->CD + n] += (float)ws * p->XdS[(size_t)i * p->N + n];
  }
  p->ddt[i] += dw * dec;
  p->q[i] = dw * ws;
  if (i < p->l - 1) p->dcs[i] -= dw * ws;
}

/* Element i of a head's P x N state gradient: dSn += exp(cs_end) dS_end (the start state's
 * gradient through the decay). */
typedef struct rt_b_m2_ssd_dsn_a {
  int l, H;          /* chunk tokens, stride of cs */
  const double *cs;  /* the chunk's cs at head h */
  const float *dS;   /* P x N, gradient of the end state */
  float *dSn;        /* P x N, gradient of the start state */
} rt_b_m2_ssd_dsn_a;
RT_BODY_FN(m2_ssd_dsn) { p->dSn[i] += (float)exp(p->cs[(size_t)(p->l - 1) * p->H]) * p->dS[i]; }

/* The chunk's head (i = 0 only; sequential over tokens): when carry, dcs[l-1] gets the end
 * state's terms (+ q[s] for every s, - q[l-1], and when inter exp(cs_end) dS_end . S_prev in
 * double); then cs_i = sum_{j <= i} a_j, a = dt * A, gives da_j = sum_{i >= j} dcs_i (later
 * tokens first) and ddt_j = ddt[j] + da_j A, A = -exp(A_log[h]). */
typedef struct rt_b_m2_ssd_da_a {
  int l, H, PN;                /* chunk tokens, stride of cs, da, ddt_out, state size P*N */
  bool carry, inter;           /* end-state gradient present, start state nonzero */
  const double *cs;            /* the chunk's cs at head h */
  const double *q, *ddt;       /* [l] each (q: when carry) */
  const float *dS, *Sp, *alog; /* P x N end-state gradient, start state (when both), &A_log[h] */
  double *dcs;                 /* [l] */
  float *da, *ddt_out;         /* the chunk's da and ddt at head h */
} rt_b_m2_ssd_da_a;
RT_BODY_FN(m2_ssd_da) {
  (void)i;
  int l = p->l;
  if (p->carry) {
    for (int s = 0; s < l; s++) p->dcs[l - 1] += p->q[s];
    p->dcs[l - 1] -= p->q[l - 1];
    if (p->inter) {
      double e = exp(p->cs[(size_t)(l - 1) * p->H]), f = 0;
      for (int k = 0; k < p->PN; k++) f += (double)p->dS[k] * p->Sp[k];
      p->dcs[l - 1] += e * f;
    }
  }
  double A = -exp((double)p->alog[0]);
  double acc = 0;
  for (int k = l - 1; k >= 0; k--) {
    acc += p->dcs[k];
    size_t r = (size_t)k * p->H;
    p->da[r] = (float)acc;
    p->ddt_out[r] = (float)(p->ddt[k] + acc * A);
  }
}

#endif
