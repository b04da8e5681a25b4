/* kb_model.h -- the element-wise bodies of the model around the kernels (model.c; kdev.h,
 * bodies.def): the loss, the optimizers, the shape adapter, the embedding's splice, and the
 * finiteness scan, so that the model runs on whichever device its thread is bound to. */
#ifndef OCTO_RT_KB_MODEL_H
#define OCTO_RT_KB_MODEL_H

#include "kb_common.h"

/* Row i of the softmax cross-entropy: grad's row = scale * (softmax(out's row) - onehot(target))
 * and loss[i] = its loss, or both zero for the first 'prefix' positions of each sequence. */
typedef struct rt_b_model_loss_a {
  int S, C, prefix;      /* tokens per sequence, classes, positions without a loss */
  const float *out;      /* rows x C logits */
  const float *target;   /* [rows] target ids as floats (< C) */
  float *grad;           /* rows x C */
  double *loss;          /* [rows] */
  double scale;          /* 1 / (counted positions x microbatches x replicas) */
} rt_b_model_loss_a;
RT_BODY_FN(model_loss) {
  int C = p->C;
  const float *o = p->out + (size_t)i * C;
  float *g = p->grad + (size_t)i * C;
  if (i % p->S < p->prefix) {
    for (int c = 0; c < C; c++) g[c] = 0;
    p->loss[i] = 0;
    return;
  }
  int target = (int)p->target[i];
  float mx = o[0];
  for (int c = 1; c < C; c++)
    if (o[c] > mx) mx = o[c];
  double sum = 0;
  for (int c = 0; c < C; c++) { /* exp once, kept in the gradient's row */
    g[c] = expf(o[c] - mx);
    sum += g[c];
  }
  p->loss[i] = log(sum) - ((double)o[target] - mx);
  float k = (float)(p->scale / sum);
  for (int c = 0; c < C; c++) g[c] *= k;
  g[target] -= (float)p->scale;
}

/* Parameter i's update: SGD (am NULL) w -= lr g, or Adam with moments am, av and the bias
 * corrections c1 = 1 / (1 - beta1^t), c2 = 1 / (1 - beta2^t). */
typedef struct rt_b_model_opt_a {
  float *w;             /* parameters */
  const float *g;       /* gradients */
  float *am, *av;       /* Adam moments (NULL for SGD) */
  float lr, c1, c2;     /* learning rate, bias corrections */
} rt_b_model_opt_a;
RT_BODY_FN(model_opt) {
  if (!p->am) {
    p->w[i] -= p->lr * p->g[i];
    return;
  }
  const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
  float gk = p->g[i];
  float mk = b1 * p->am[i] + (1.0f - b1) * gk;
  float vk = b2 * p->av[i] + (1.0f - b2) * gk * gk;
  p->am[i] = mk;
  p->av[i] = vk;
  p->w[i] -= p->lr * (mk * p->c1) / (sqrtf(vk * p->c2) + eps);
}

/* The shape adapter between layers: B sequences of S0 tokens of width w0 in, of S1 tokens of
 * width w1 out, keeping each sequence's last tokens and the first columns (zeros where none).
 * fwd: element i of the output; bwd: element i of the input's gradient (its transpose). */
typedef struct rt_b_model_adapt_a {
  int S0, w0, S1, w1;   /* shapes in and out */
  const float *src;     /* fwd: the input; bwd: the output's gradient */
  float *dst;           /* fwd: the output; bwd: the input's gradient */
} rt_b_model_adapt_a;
typedef rt_b_model_adapt_a rt_b_model_adapt_fwd_a;
typedef rt_b_model_adapt_a rt_b_model_adapt_bwd_a;
RT_BODY_FN(model_adapt_fwd) {
  long per = (long)p->S1 * p->w1, b = i / per, t = i % per / p->w1, c = i % p->w1;
  long src = t + p->S0 - p->S1;
  p->dst[i] = src >= 0 && c < p->w0 ? p->src[((size_t)b * p->S0 + src) * p->w0 + c] : 0.0f;
}
RT_BODY_FN(model_adapt_bwd) {
  long per = (long)p->S0 * p->w0, b = i / per, s = i % per / p->w0, c = i % p->w0;
  long t = s - (p->S0 - p->S1);
  p->dst[i] = t >= 0 && t < p->S1 && c < p->w1 ? p->src[((size_t)b * p->S1 + t) * p->w1 + c]
                                               : 0.0f;
}

/* The embedding's splice, element i of B x n (n = the spliced floats per sequence): fwd copies
 * the previous layers' tokens (a, packed) in front of each sequence of the output (b, row
 * stride 'stride' per sequence); bwd moves that part of the gradient b back into a packed and
 * zeroes it in b. */
typedef struct rt_b_model_splice_a {
  long n, stride;  /* spliced floats per sequence, floats per sequence of b */
  float *a;        /* B x n, packed */
  float *b;        /* B sequences of stride floats */
} rt_b_model_splice_a;
typedef rt_b_model_splice_a rt_b_model_splice_fwd_a;
typedef rt_b_model_splice_a rt_b_model_splice_bwd_a;
RT_BODY_FN(model_splice_fwd) { p->b[(size_t)(i / p->n) * p->stride + i % p->n] = p->a[i]; }
RT_BODY_FN(model_splice_bwd) {
  float *g = p->b + (size_t)(i / p->n) * p->stride + i % p->n;
  p->a[i] = *g;
  *g = 0;
}

/* Block i of 4096 floats of x (n in all): bad[i] = 1 when one is NaN or infinite, else 0. */
#define RT_SCAN_BLOCK 4096
typedef struct rt_b_model_nonfinite_a {
  size_t n;          /* floats of x */
  const float *x;    /* scanned */
  int *bad;          /* [ceil(n / RT_SCAN_BLOCK)] */
} rt_b_model_nonfinite_a;
RT_BODY_FN(model_nonfinite) {
  size_t lo = (size_t)i * RT_SCAN_BLOCK, hi = lo + RT_SCAN_BLOCK < p->n ? lo + RT_SCAN_BLOCK : p->n;
  int bad = 0;
  for (size_t k = lo; k < hi; k++) bad |= !isfinite(p->x[k]);
  p->bad[i] = bad;
}

#endif
