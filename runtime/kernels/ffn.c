/* ffn.c -- the feed-forward block the mlp and moe kinds share (ffn.h). */
#include "ffn.h"

/* ---- The shared feed-forward block (ffn.h) -------------------------------------------------- */

void rt_ffn_fwd(const rt_ffn *f, int r, const float *h, const float *w1, const float *w3,
                const float *w2, float *a, float *u, float *z, float *out, float beta) {
  if (r <= 0) return;
  int H = f->hidden, F = f->ffn;
  size_t n = (size_t)r * F;
  rt_gemm(false, false, r, F, H, 1.0f, h, H, w1, F, 0.0f, a, F);
  if (f->gated) {
    rt_gemm(false, false, r, F, H, 1.0f, h, H, w3, F, 0.0f, u, F);
  }
  RT_FOR(ffn_act, n, .act = f->act, .gated = f->gated, .a = a, .u = u, .z = z);
  rt_gemm(false, false, r, H, F, 1.0f, z, F, w2, H, beta, out, H);
}

void rt_ffn_bwd_act(const rt_ffn *f, int r, const float *a, const float *u, const float *dz,
                    float *da, float *du) {
  size_t n = r > 0 ? (size_t)r * f->ffn : 0;
  RT_FOR(ffn_bwd_act, n, .act = f->act, .gated = f->gated, .a = a, .u = u, .dz = dz, .da = da,
         .du = du);
}

void rt_ffn_bwd_h(const rt_ffn *f, int r, const float *w1, const float *w3, const float *da,
                  const float *du, float *dh, float beta) {
  if (r <= 0) return;
  int H = f->hidden, F = f->ffn;
  rt_gemm(false, true, r, H, F, 1.0f, da, F, w1, F, beta, dh, H);
  if (f->gated) rt_gemm(false, true, r, H, F, 1.0f, du, F, w3, F, 1.0f, dh, H);
}

void rt_ffn_bwd_w(const rt_ffn *f, int r, const float *h, const float *da, const float *du,
                  const float *z, const float *dout, float *g1, float *g3, float *g2) {
  if (r <= 0) return;
  int H = f->hidden, F = f->ffn;
  rt_gemm(true, false, H, F, r, 1.0f, h, H, da, F, 1.0f, g1, F);
  if (f->gated) rt_gemm(true, false, H, F, r, 1.0f, h, H, du, F, 1.0f, g3, F);
  rt_gemm(true, false, F, H, r, 1.0f, z, F, dout, H, 1.0f, g2, H);
}
