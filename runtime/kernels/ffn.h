/* ffn.h -- the feed-forward block the mlp and moe kinds share (defined in ffn.c): over r
 * rows of normed input h (r x hidden), a = h W1, u = h W3 (gated only), z = act(a) * u (gated) or
 * act(a) (plain), out = z W2; with the matching split gradients. Weights are [hidden, ffn] for
 * W1 / W3 and [ffn, hidden] for W2, row-major; every projection goes through rt_gemm. */
#ifndef OCTO_RT_FFN_H
#define OCTO_RT_FFN_H

#include "kernels.h"

/* The shape of one feed-forward block. */
typedef struct rt_ffn {
  int hidden; /* width of the input and output rows */
  int ffn;    /* intermediate width */
  bool gated; /* z = act(a) * u (true) or act(a) (false) */
  rt_act act; /* the activation */
} rt_ffn;

/* Forward over r rows: a = h w1 (r x ffn), u = h w3 (gated; u and w3 ignored otherwise),
 * z = act(a) [* u], out = beta * out + z w2 (r x hidden, row stride hidden).
 * Pre: a, u, z hold r * ffn floats each; beta is 0 (overwrite) or 1 (accumulate).
 * Post: a, u, z, out written; nothing else. r = 0 does nothing. */
void rt_ffn_fwd(const rt_ffn *f, int r, const float *h, const float *w1, const float *w3,
                const float *w2, float *a, float *u, float *z, float *out, float beta);

/* Pre-activation gradients from dz (r x ffn, the gradient of z): da = dz * act'(a) [* u] and,
 * gated, du = dz * act(a). Pre: a, u as rt_ffn_fwd left them; dz may be the same array as da.
 * Post: da (and du) written. */
void rt_ffn_bwd_act(const rt_ffn *f, int r, const float *a, const float *u, const float *dz,
                    float *da, float *du);

/* Input gradient: dh = beta * dh + da w1^T [+ du w3^T] (r x hidden). beta is 0 or 1. */
void rt_ffn_bwd_h(const rt_ffn *f, int r, const float *w1, const float *w3, const float *da,
                  const float *du, float *dh, float beta);

/* Weight gradients, accumulated: g1 += h^T da, g3 += h^T du (gated), g2 += z^T dout, where dout
 * (r x hidden) is the gradient of the block's output. r = 0 leaves g unchanged. */
void rt_ffn_bwd_w(const rt_ffn *f, int r, const float *h, const float *da, const float *du,
                  const float *z, const float *dout, float *g1, float *g3, float *g2);

#endif
