/* gpu_model.cu -- the GPU layer profiler (rg_profile, gpu.h): times the GEMMs of each layer kind
 * of a stream at full size with cuBLAS, bf16 inputs and float32 accumulation. (The model itself
 * runs on a GPU through the kernels' device, kernels_gpu.cu.) Kept C-like; the rg_* functions
 * have C linkage (declared in gpu.h inside extern "C"). */
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

extern "C" {
#include "gpu.h"
}

/* Threads per block of the profiler's kernels. */
#define RG_THREADS 256

/* Blocks for a grid-stride loop over n elements. */
static unsigned grid_for(size_t n) {
  size_t b = (n + RG_THREADS - 1) / RG_THREADS;
  return (unsigned)(b < 1 ? 1 : b > 65536 ? 65536 : b);
}

#define GRID_LOOP(i, n)                                                                          \
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n);                        \
       i += (size_t)gridDim.x * blockDim.x)

/* ---- Layer profiling ----------------------------------------------------------------------- */

/* Elements of one operand chunk above which a batched GEMM runs in several chunks (bounds the
 * memory of the attention scores at long sequences; the time is the sum either way). */
#define PROF_CHUNK_ELEMS ((size_t)1 << 29)
/* Most GEMMs of one phase of a measured layer. */
#define PROF_MAX_GEMMS 16

/* One GEMM of a measurement: row-major C (M x N) = op(A) op(B) as gemm(), 'batch' times over
 * consecutive matrices, in chunks of 'chunk'; C bf16, or float32 accumulated when acc. */
typedef struct pgemm {
  bool ta, tb;
  long M, N, K;
  long batch, chunk;
  bool acc;
} pgemm;

/* The GEMMs of F, B and W (phases 0, 1, 2) of one layer kind, or an embedding. */
typedef struct pplan {
  pgemm g[3][PROF_MAX_GEMMS];
  int n[3];
  bool embed;   /* an embedding: gather (F) and scatter-add (W) of T rows of h */
  long T, h, V; /* embedding: tokens, width, vocabulary */
} pplan;

/* Add a GEMM to phase ph of p. */
static void plan_add(pplan *p, int ph, bool ta, bool tb, long M, long N, long K, long batch,
                     bool acc) {
  if (p->n[ph] >= PROF_MAX_GEMMS) return;
  pgemm *g = &p->g[ph][p->n[ph]++];
  g->ta = ta;
  g->tb = tb;
  g->M = M;
  g->N = N;
  g->K = K;
  g->batch = batch;
  size_t one = (size_t)M * K;
  if ((size_t)K * N > one) one = (size_t)K * N;
  if ((size_t)M * N > one) one = (size_t)M * N;
  long c = (long)(PROF_CHUNK_ELEMS / (one ? one : 1));
  g->chunk = c < 1 ? 1 : c > batch ? batch : c;
  g->acc = acc;
}

/* A linear map of width in -> out over T rows: F y = x W; B dx = dy W^T; W dW += x^T dy. */
static void plan_linear(pplan *p, long T, long in, long out) {
  plan_add(p, 0, false, false, T, out, in, 1, false);
  plan_add(p, 1, false, true, T, in, out, 1, false);
  plan_add(p, 2, true, false, in, out, T, 1, true);
}

/* The attention core of 'batch' (sequence, head) pairs of S tokens and head width d: F scores
 * Q K^T and P V; B dP = dO V^T, dV = P^T dO, dQ = dS K, dK = dS^T Q. */
static void plan_attn_core(pplan *p, long S, long d, long batch) {
  plan_add(p, 0, false, true, S, S, d, batch, false);
  plan_add(p, 0, false, false, S, d, S, batch, false);
  plan_add(p, 1, false, true, S, S, d, batch, false);
  plan_add(p, 1, true, false, S, d, S, batch, false);
  plan_add(p, 1, false, false, S, d, S, batch, false);
  plan_add(p, 1, true, false, S, d, S, batch, false);
}

/* Parameter 'name' of layer i of s, rounded; else, for the model-level dimensions (hidden,
 * vocab, seq), that of the stream's first layer that has it; else 'def'. Values that are not
 * finite or negative count as absent. */
static long prof_param(const be_stream *s, int i, const char *name, long def) {
  bool model_level = strcmp(name, "hidden") == 0 || strcmp(name, "vocab") == 0 ||
                     strcmp(name, "seq") == 0;
  for (int pass = 0; pass < (model_level ? 2 : 1); pass++)
    for (int l = pass ? 0 : i; l < (pass ? s->nlayers : i + 1); l++)
      for (int k = 0; k < s->layers[l].nparams; k++) {
        const be_param *q = &s->layers[l].params[k];
        if (q->name && strcmp(q->name, name) == 0 && q->value >= 0 && q->value < 1e12)
          return lround(q->value);
      }
  return def;
}

/* prof_param, at least 1. */
static long prof_dim(const be_stream *s, int i, const char *name, long def) {
  long v = prof_param(s, i, name, def);
  return v < 1 ? 1 : v;
}

/* The plan of layer i of s (pre: not custom). Returns false with the reason in err. */
static bool make_plan(const be_stream *s, int i, pplan *p, strbuf *err) {
  const be_layer *L = &s->layers[i];
  const char *k = L->kind ? L->kind : "";
  memset(p, 0, sizeof *p);
  long mbs = s->micro_batch > 0 ? s->micro_batch : 1;
  long seq = prof_dim(s, i, "seq", s->seq > 0 ? s->seq : 1);
  long h = prof_param(s, i, "hidden", 0);
  if (h < 1) {
    if (err) strbuf_printf(err, "layer '%s' (%s): no hidden size to profile with", L->name, k);
    return false;
  }
  bool is_vit = strcmp(k, "vit") == 0, is_emb = strcmp(k, "embedding") == 0;
  if (is_vit) seq = prof_dim(s, i, "tokens", seq);
  long T = mbs * seq;
  if (is_emb || strcmp(k, "lm_head") == 0) {
    long V = prof_param(s, i, "vocab", 0);
    if (V < 1) {
      if (err) strbuf_printf(err, "layer '%s' (%s): no vocab size to profile with", L->name, k);
      return false;
    }
    if (is_emb) {
      p->embed = true;
      p->T = T;
      p->h = h;
      p->V = V;
    } else {
      plan_linear(p, T, h, V);
    }
  } else if (strcmp(k, "attention") == 0 || is_vit) {
    long heads = prof_dim(s, i, "heads", h / 128);
    long kv = is_vit ? heads : prof_dim(s, i, "kv_heads", heads);
    long hd = prof_dim(s, i, "head_dim", h / heads);
    plan_linear(p, T, h, (heads + 2 * kv) * hd);
    plan_attn_core(p, seq, hd, mbs * heads);
    plan_linear(p, T, heads * hd, h);
    if (is_vit) {
      long ffn = prof_dim(s, i, "ffn", 4 * h);
      plan_linear(p, T, h, ffn);
      if (prof_param(s, i, "gated", 0)) plan_linear(p, T, h, ffn);
      plan_linear(p, T, ffn, h);
    }
  } else if (strcmp(k, "mlp") == 0) {
    long ffn = prof_dim(s, i, "ffn", 4 * h);
    plan_linear(p, T, h, ffn);
    if (prof_param(s, i, "gated", 1)) plan_linear(p, T, h, ffn);
    plan_linear(p, T, ffn, h);
  } else if (strcmp(k, "moe") == 0) {
    long ex = prof_dim(s, i, "experts", 8), topk = prof_dim(s, i, "top_k", 2);
    long shared = prof_param(s, i, "shared_experts", 0);
    long effn = prof_dim(s, i, "expert_ffn", 4 * h);
    long Te = T * (topk + shared);
    plan_linear(p, T, h, ex); /* router */
    plan_linear(p, Te, h, effn);
    if (prof_param(s, i, "gated", 1)) plan_linear(p, Te, h, effn);
    plan_linear(p, Te, effn, h);
  } else {
    long ex = prof_param(s, i, "expand", strcmp(k, "mamba2") == 0 ? 2 : 0);
    if (ex > 0) {
      plan_linear(p, T, h, 2 * ex * h);
      plan_linear(p, T, ex * h, h);
    } else {
      plan_linear(p, T, h, h);
    }
  }
  for (int ph = 0; ph < 3; ph++)
    for (int g = 0; g < p->n[ph]; g++) {
      const pgemm *q = &p->g[ph][g];
      if (q->M > INT32_MAX || q->N > INT32_MAX || q->K > INT32_MAX || q->batch > INT32_MAX) {
        if (err) strbuf_printf(err, "layer '%s' (%s): a GEMM dimension is too large", L->name, k);
        return false;
      }
    }
  return true;
}

/* Deterministic small values in [-0.05, 0.05) into n bf16 elements. */
static __global__ void k_fill_bf16(__nv_bfloat16 *p, size_t n, unsigned seed) {
  GRID_LOOP(i, n) {
    unsigned x = (unsigned)i * 2654435761u ^ seed;
    x ^= x >> 15;
    x *= 2246822519u;
    x ^= x >> 13;
    p[i] = __float2bfloat16(((float)(x & 0xffffu) / 65536.0f - 0.5f) * 0.1f);
  }
}

/* Token ids in [0, V) into T ints. */
static __global__ void k_fill_tokens(int *tok, size_t T, int V) {
  GRID_LOOP(i, T) tok[i] = (int)(((unsigned)i * 2654435761u) % (unsigned)V);
}

/* Profiling embedding F: y[t] = E[tok[t]] (bf16, n = T x h). */
static __global__ void k_gather(const int *tok, const __nv_bfloat16 *E, __nv_bfloat16 *y,
                                size_t n, int h) {
  GRID_LOOP(i, n) y[i] = E[(size_t)tok[i / (size_t)h] * h + i % (size_t)h];
}

/* Profiling embedding W: dE[tok[t]] += dy[t] in float32 (n = T x h). */
static __global__ void k_scatter_add(const int *tok, const __nv_bfloat16 *dy, float *dE,
                                     size_t n, int h) {
  GRID_LOOP(i, n) atomicAdd(&dE[(size_t)tok[i / (size_t)h] * h + i % (size_t)h],
                            __bfloat162float(dy[i]));
}

/* The device buffers of one measurement. */
typedef struct pbufs {
  __nv_bfloat16 *a, *b, *c; /* A and B operands, bf16 outputs */
  float *c32;               /* float32 accumulated outputs */
  int *tok;                 /* embedding token ids */
} pbufs;

/* Elements of A, B, C of one chunk of g. */
static size_t chunk_a(const pgemm *g) { return (size_t)g->M * g->K * g->chunk; }
static size_t chunk_b(const pgemm *g) { return (size_t)g->K * g->N * g->chunk; }
static size_t chunk_c(const pgemm *g) { return (size_t)g->M * g->N * g->chunk; }

/* Enqueue phase ph of plan p on stream s (handle bound to s). False with err on failure. */
static bool run_phase(cublasHandle_t blas, cudaStream_t s, const pplan *p, const pbufs *b, int ph,
                      strbuf *err) {
  if (p->embed) {
    size_t n = (size_t)p->T * p->h;
    if (ph == 0) k_gather<<<grid_for(n), RG_THREADS, 0, s>>>(b->tok, b->b, b->c, n, (int)p->h);
    if (ph == 2)
      k_scatter_add<<<grid_for(n), RG_THREADS, 0, s>>>(b->tok, b->a, b->c32, n, (int)p->h);
    return true;
  }
  const float one = 1.0f, zero = 0.0f;
  for (int k = 0; k < p->n[ph]; k++) {
    const pgemm *g = &p->g[ph][k];
    int M = (int)g->M, N = (int)g->N, K = (int)g->K;
    cublasOperation_t oa = g->ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = g->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    int lda = g->ta ? M : K, ldb = g->tb ? K : N;
    for (long done = 0; done < g->batch; done += g->chunk) {
      int cnt = (int)(g->batch - done < g->chunk ? g->batch - done : g->chunk);
      cublasStatus_t st = cublasGemmStridedBatchedEx(
          blas, ob, oa, N, M, K, &one, b->b, CUDA_R_16BF, ldb, (long long)K * N, b->a,
          CUDA_R_16BF, lda, (long long)M * K, g->acc ? &one : &zero,
          g->acc ? (void *)b->c32 : (void *)b->c, g->acc ? CUDA_R_32F : CUDA_R_16BF, N,
          (long long)M * N, cnt, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      if (st != CUBLAS_STATUS_SUCCESS) {
        if (err)
          strbuf_printf(err, "cublasGemmStridedBatchedEx (%d x %d x %d, batch %d): %s", M, N, K,
                        cnt, cublasGetStatusString(st));
        return false;
      }
    }
  }
  return true;
}

/* qsort comparison of doubles. */
static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Median of n > 0 values (sorted in place). */
static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* "kind: what: reason" into err; returns false. */
static bool prof_fail(strbuf *err, const char *kind, const char *what, cudaError_t e) {
  if (err) strbuf_printf(err, "profiling %s: %s: %s", kind, what, cudaGetErrorString(e));
  return false;
}

/* Measure plan p of layer kind 'kind' into *r (f, b, w, peak_bytes). Pre: device current,
 * blas bound to s, ev holds 6 events. False with err. */
static bool measure(cublasHandle_t blas, cudaStream_t s, cudaEvent_t *ev, const pplan *p,
                    const char *kind, int warmup, int repeats, rg_layer_profile *r, strbuf *err) {
  size_t na = 0, nb = 0, nc = 0, nc32 = 0;
  if (p->embed) {
    na = nc = (size_t)p->T * p->h;
    nb = nc32 = (size_t)p->V * p->h;
  }
  for (int ph = 0; ph < 3; ph++)
    for (int k = 0; k < p->n[ph]; k++) {
      const pgemm *g = &p->g[ph][k];
      if (chunk_a(g) > na) na = chunk_a(g);
      if (chunk_b(g) > nb) nb = chunk_b(g);
      if (g->acc && chunk_c(g) > nc32) nc32 = chunk_c(g);
      if (!g->acc && chunk_c(g) > nc) nc = chunk_c(g);
    }
  size_t free0 = 0, free1 = 0, free2 = 0, total = 0;
  cudaError_t e = cudaMemGetInfo(&free0, &total);
  if (e != cudaSuccess) return prof_fail(err, kind, "cudaMemGetInfo", e);
  pbufs b;
  memset(&b, 0, sizeof b);
  bool ok = false;
  double *t = (double *)xcalloc(3 * (size_t)repeats, sizeof *t);
  if ((e = cudaMalloc((void **)&b.a, (na ? na : 1) * sizeof *b.a)) != cudaSuccess ||
      (e = cudaMalloc((void **)&b.b, (nb ? nb : 1) * sizeof *b.b)) != cudaSuccess ||
      (e = cudaMalloc((void **)&b.c, (nc ? nc : 1) * sizeof *b.c)) != cudaSuccess ||
      (e = cudaMalloc((void **)&b.c32, (nc32 ? nc32 : 1) * sizeof *b.c32)) != cudaSuccess ||
      (e = cudaMalloc((void **)&b.tok, (p->embed ? (size_t)p->T : 1) * sizeof *b.tok)) !=
          cudaSuccess) {
    prof_fail(err, kind, "cudaMalloc", e);
    goto done;
  }
  k_fill_bf16<<<grid_for(na ? na : 1), RG_THREADS, 0, s>>>(b.a, na ? na : 1, 1u);
  k_fill_bf16<<<grid_for(nb ? nb : 1), RG_THREADS, 0, s>>>(b.b, nb ? nb : 1, 2u);
  if (p->embed) k_fill_tokens<<<grid_for((size_t)p->T), RG_THREADS, 0, s>>>(b.tok, (size_t)p->T, (int)p->V);
  if ((e = cudaMemsetAsync(b.c32, 0, (nc32 ? nc32 : 1) * sizeof *b.c32, s)) != cudaSuccess ||
      (e = cudaStreamSynchronize(s)) != cudaSuccess || (e = cudaGetLastError()) != cudaSuccess) {
    prof_fail(err, kind, "initializing the buffers", e);
    goto done;
  }
  if ((e = cudaMemGetInfo(&free1, &total)) != cudaSuccess) {
    prof_fail(err, kind, "cudaMemGetInfo", e);
    goto done;
  }
  for (int it = 0; it < warmup + repeats; it++) {
    for (int ph = 0; ph < 3; ph++) {
      if ((e = cudaEventRecord(ev[2 * ph], s)) != cudaSuccess) {
        prof_fail(err, kind, "cudaEventRecord", e);
        goto done;
      }
      if (!run_phase(blas, s, p, &b, ph, err)) goto done;
      if ((e = cudaEventRecord(ev[2 * ph + 1], s)) != cudaSuccess) {
        prof_fail(err, kind, "cudaEventRecord", e);
        goto done;
      }
    }
    if ((e = cudaStreamSynchronize(s)) != cudaSuccess || (e = cudaGetLastError()) != cudaSuccess) {
      prof_fail(err, kind, "running the layer", e);
      goto done;
    }
    if (it < warmup) continue;
    for (int ph = 0; ph < 3; ph++) {
      float ms = 0;
      if ((e = cudaEventElapsedTime(&ms, ev[2 * ph], ev[2 * ph + 1])) != cudaSuccess) {
        prof_fail(err, kind, "cudaEventElapsedTime", e);
        goto done;
      }
      t[(size_t)ph * repeats + (it - warmup)] = ms * 1e-3;
    }
  }
  if ((e = cudaMemGetInfo(&free2, &total)) != cudaSuccess) {
    prof_fail(err, kind, "cudaMemGetInfo", e);
    goto done;
  }
  r->f = median(t, repeats);
  r->b = p->embed ? 0.0 : median(t + repeats, repeats);
  r->w = median(t + 2 * (size_t)repeats, repeats);
  {
    size_t low = free1 < free2 ? free1 : free2;
    r->peak_bytes = free0 > low ? (double)(free0 - low) : 0.0;
  }
  ok = true;
done:
  (void)cudaStreamSynchronize(s);
  if (b.a) (void)cudaFree(b.a);
  if (b.b) (void)cudaFree(b.b);
  if (b.c) (void)cudaFree(b.c);
  if (b.c32) (void)cudaFree(b.c32);
  if (b.tok) (void)cudaFree(b.tok);
  free(t);
  return ok;
}

int rg_profile(const be_stream *s, int device, int warmup, int repeats, rg_layer_profile **out,
               strbuf *err) {
  *out = NULL;
  if (warmup < 0) warmup = 0;
  if (repeats < 1) repeats = 1;
  if (!rg_device_check(device, err)) return -1;
  cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) {
    if (err) strbuf_printf(err, "CUDA device %d: %s", device, cudaGetErrorString(e));
    return -1;
  }
  (void)cudaGetLastError(); /* as op_begin */
  cudaStream_t st = NULL;
  cublasHandle_t blas = NULL;
  cudaEvent_t ev[6];
  int nev = 0, n = 0;
  bool ok = false;
  rg_layer_profile *res = (rg_layer_profile *)xcalloc((size_t)(s->nlayers > 0 ? s->nlayers : 1),
                                                      sizeof *res);
  cublasStatus_t bs;
  if ((e = cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking)) != cudaSuccess) {
    prof_fail(err, "the stream", "cudaStreamCreate", e);
    goto done;
  }
  for (; nev < 6; nev++)
    if ((e = cudaEventCreate(&ev[nev])) != cudaSuccess) {
      prof_fail(err, "the stream", "cudaEventCreate", e);
      goto done;
    }
  if ((bs = cublasCreate(&blas)) != CUBLAS_STATUS_SUCCESS ||
      (bs = cublasSetStream(blas, st)) != CUBLAS_STATUS_SUCCESS) {
    if (err) strbuf_printf(err, "CUDA device %d: cuBLAS: %s", device, cublasGetStatusString(bs));
    goto done;
  }
  for (int i = 0; i < s->nlayers; i++) {
    const char *kind = s->layers[i].kind ? s->layers[i].kind : "";
    bool seen = strcmp(kind, "custom") == 0 || kind[0] == 0;
    for (int j = 0; j < n && !seen; j++) seen = strcmp(res[j].kind, kind) == 0;
    if (seen) continue;
    pplan p;
    if (!make_plan(s, i, &p, err)) goto done;
    rg_layer_profile *r = &res[n];
    r->kind = kind;
    r->layer = i;
    if (!measure(blas, st, ev, &p, kind, warmup, repeats, r, err)) goto done;
    n++;
  }
  ok = true;
done:
  if (blas) (void)cublasDestroy(blas);
  for (int k = 0; k < nev; k++) (void)cudaEventDestroy(ev[k]);
  if (st) (void)cudaStreamDestroy(st);
  (void)cudaGetLastError();
  if (!ok) {
    free(res);
    return -1;
  }
  if (n == 0) {
    free(res);
    res = NULL;
  }
  *out = res;
  return n;
}
