/* gpu_model.cu -- the stand-in model of runtime.h on a GPU (gpu.h): the layers, parameter layout,
 * initial values (generated on the host by model.c), data, loss, split backward and optimizers
 * of model.c, with parameters, gradients, optimizer state and the saved (stage, microbatch)
 * state in device memory, computed with cuBLAS GEMMs (float32 without TF32, or bf16 inputs with
 * float32 accumulation) and small kernels; and the layer profiler (rg_profile), which times the
 * GEMMs of each layer kind of a stream at full size. Kept C-like; the rg_* functions have C
 * linkage (declared in gpu.h inside extern "C"). */
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

/* ---- Definitions --------------------------------------------------------------------------- */

/* Threads per block of every kernel (a power of two: the block reductions need it). */
#define RG_THREADS 256

/* What stand-in a layer is (model.c's lkind). */
enum { GL_EMB, GL_DENSE, GL_HEAD };

/* One layer: its shape and where its data lives in its stage's parameter arrays and in a saved
 * state block (the layout of model.c's mlayer, recomputed from the same rules). */
typedef struct glayer {
  int kind;        /* GL_* */
  int in, out;     /* widths per token (in 1 for the embedding: the token id) */
  size_t w_off, w_n; /* W (or E) in the stage's parameters */
  size_t b_off, b_n; /* b (dense only) */
  size_t x_off;    /* saved input (T x in) in a state block */
  size_t a_off;    /* saved tanh(xW+b) (T x h; dense only) */
  size_t d_off;    /* saved output gradient (T x out): dz, dlogits or dy */
} glayer;

/* The saved state of one (stage, microbatch). */
typedef struct gsaved {
  float *buf;   /* device state block (from the model's pool), NULL when nothing is in flight */
  bool b_done;  /* rg_backward_input ran */
} gsaved;

/* A stage: its layers, device parameters, gradients, Adam state and saved states. */
typedef struct gstage {
  int first, end;        /* layer range [first, end) */
  bool init;             /* parameters allocated and initialized */
  size_t nparams;        /* floats of w, g, am, av */
  float *w, *g;          /* device parameters and gradients */
  float *am, *av;        /* device Adam moments (NULL for SGD) */
  long adam_t;           /* Adam steps taken */
  double b1t, b2t;       /* beta1^t, beta2^t */
  size_t state_floats;   /* floats of one saved state block */
  gsaved *saved;         /* nmb saved states */
} gstage;

/* A staging slot for host-generated data (tokens, targets): pinned host memory that a copy reads
 * asynchronously, device memory for the targets and the per-row losses, and the event after the
 * last operation that read them; the slot is reused only once that event completed. */
typedef struct gslot {
  void *host;      /* pinned, T x 4 bytes */
  double *rowloss; /* device, T doubles */
  int *target;     /* device, T ints */
  cudaEvent_t ev;  /* after the slot's last use */
  bool used;       /* ev was recorded */
} gslot;

struct rg_model {
  rt_si_model *cpu;       /* the CPU model: dimensions, data, initial values */
  int device;          /* CUDA device */
  bool dev_ok;         /* the device was made current (CUDA calls are possible) */
  bool bf16;           /* bf16 GEMM inputs */
  int nlayers, nstages, nmb, replicas, h, V, T;
  bool adam;
  double lr;
  glayer *layers;      /* nlayers layers */
  gstage *stages;      /* nstages stages */
  cublasHandle_t blas; /* the model's cuBLAS handle */
  bool blas_ok;        /* blas was created */
  cudaMemPool_t pool;  /* stream-ordered pool of the saved state blocks */
  bool pool_ok;        /* pool was created */
  __nv_bfloat16 *sa, *sb; /* bf16 copies of a GEMM's A and B (bf16 mode) */
  size_t sa_n, sb_n;   /* their capacities in elements */
  gslot *slots;        /* staging ring */
  int nslots, next_slot;
  float *htmp;         /* host scratch: T floats */
  bool failed;         /* an operation failed: err holds the first error */
  char err[512];
};

/* ---- Errors -------------------------------------------------------------------------------- */

/* Record the first error of m (later ones are dropped). */
static void set_error(rg_model *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_error(rg_model *m, const char *fmt, ...) {
  if (m->failed) return;
  m->failed = true;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(m->err, sizeof m->err, fmt, ap);
  va_end(ap);
}

/* True when e is cudaSuccess; else records "op: what: reason" and returns false. */
static bool cuda_ok(rg_model *m, cudaError_t e, const char *op, const char *what) {
  if (e == cudaSuccess) return true;
  set_error(m, "%s: %s: %s", op, what, cudaGetErrorString(e));
  return false;
}

/* True when e is CUBLAS_STATUS_SUCCESS; else records the error and returns false. */
static bool blas_ok(rg_model *m, cublasStatus_t e, const char *op, const char *what) {
  if (e == CUBLAS_STATUS_SUCCESS) return true;
  set_error(m, "%s: %s: %s", op, what, cublasGetStatusString(e));
  return false;
}

/* Start operation 'op': false (do nothing) when m already failed or its device cannot be made
 * current. */
static bool op_begin(rg_model *m, const char *op) {
  if (m->failed || !cuda_ok(m, cudaSetDevice(m->device), op, "cudaSetDevice")) return false;
  /* Forget an error another caller left in this thread's last-error state, so that op_end
   * reports only this operation's (a sticky error fails the next CUDA call anyway). */
  (void)cudaGetLastError();
  return true;
}

/* End operation 'op': record a kernel launch error (or an earlier asynchronous one). */
static void op_end(rg_model *m, const char *op) {
  cuda_ok(m, cudaGetLastError(), op, "kernel");
}

const char *rg_model_error(const rg_model *m) { return m && m->failed ? m->err : NULL; }

/* True when CUDA device 'device' exists; else false with the reason in why[n] ("no CUDA device
 * is visible (...)", or no such device). */
static bool device_visible(int device, char *why, size_t n) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    snprintf(why, n, "no CUDA device is visible (%s)",
             e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    (void)cudaGetLastError();
    return false;
  }
  if (device < 0 || device >= count) {
    snprintf(why, n, "CUDA device %d: no such device (%d visible)", device, count);
    return false;
  }
  return true;
}

/* ---- Kernels ------------------------------------------------------------------------------- */

/* Blocks for a grid-stride loop over n elements. */
static unsigned grid_for(size_t n) {
  size_t b = (n + RG_THREADS - 1) / RG_THREADS;
  return (unsigned)(b < 1 ? 1 : b > 65536 ? 65536 : b);
}

#define GRID_LOOP(i, n)                                                                          \
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n);                        \
       i += (size_t)gridDim.x * blockDim.x)

/* Token id stored in a float, clamped into [0, V) as model.c's token_id. */
static __device__ int d_token_id(float f, int V) { return f >= 0.0f && f < (float)V ? (int)f : 0; }

/* y[t][k] = E[tok(x[t])][k] over n = T x h elements. */
static __global__ void k_embed_fwd(const float *x, const float *E, float *y, size_t n, int h,
                                   int V) {
  GRID_LOOP(i, n) {
    size_t t = i / (size_t)h, k = i % (size_t)h;
    y[i] = E[(size_t)d_token_id(x[t], V) * h + k];
  }
}

/* Dense forward after the GEMM: a holds x W; a = tanh(x W + b), y = x + a (n = T x h). */
static __global__ void k_dense_fwd(const float *x, const float *b, float *a, float *y, size_t n,
                                   int h) {
  GRID_LOOP(i, n) {
    double z = (double)b[i % (size_t)h] + (double)a[i];
    float at = (float)tanh(z);
    a[i] = at;
    y[i] = x[i] + at;
  }
}

/* Dense input-gradient, elementwise part: dx = dy (when dx is set), d = dz = dy (1 - a^2) in
 * place (n = T x h). */
static __global__ void k_dense_bin(float *d, const float *a, float *dx, size_t n) {
  GRID_LOOP(i, n) {
    float dy = d[i];
    if (dx) dx[i] = dy;
    d[i] = (float)((double)dy * (1.0 - (double)a[i] * a[i]));
  }
}

/* gb[k] += sum over t of d[t][k], accumulated in double in token order (one thread a column). */
static __global__ void k_colsum_add(const float *d, float *gb, int T, int h) {
  int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= h) return;
  double acc = 0;
  for (int t = 0; t < T; t++) acc += d[(size_t)t * h + k];
  gb[k] = (float)((double)gb[k] + acc);
}

/* gE[tok(x[t])][k] += d[t][k] (n = T x h). */
static __global__ void k_embed_bwd(const float *x, const float *d, float *gE, size_t n, int h,
                                   int V) {
  GRID_LOOP(i, n) {
    size_t t = i / (size_t)h, k = i % (size_t)h;
    atomicAdd(&gE[(size_t)d_token_id(x[t], V) * h + k], d[i]);
  }
}

/* SGD: w -= lr g, then g = 0. */
static __global__ void k_sgd(float *w, float *g, size_t n, double lr) {
  GRID_LOOP(k, n) {
    w[k] = (float)((double)w[k] - lr * g[k]);
    g[k] = 0.0f;
  }
}

/* Adam (model.c's formulas; c1, c2 the bias corrections), then g = 0. */
static __global__ void k_adam(float *w, float *g, float *am, float *av, size_t n, double lr,
                              double c1, double c2) {
  const double b1 = 0.9, b2 = 0.999, eps = 1e-8;
  GRID_LOOP(k, n) {
    double gk = g[k];
    double mk = b1 * am[k] + (1.0 - b1) * gk;
    double vk = b2 * av[k] + (1.0 - b2) * gk * gk;
    am[k] = (float)mk;
    av[k] = (float)vk;
    w[k] = (float)((double)w[k] - lr * (mk / c1) / (sqrt(vk / c2) + eps));
    g[k] = 0.0f;
  }
}

/* float -> bf16 (round to nearest even). */
static __global__ void k_to_bf16(const float *x, __nv_bfloat16 *y, size_t n) {
  GRID_LOOP(i, n) y[i] = __float2bfloat16(x[i]);
}

/* Sum of v over the block (blockDim.x a power of two, red of blockDim.x doubles), in a fixed
 * order; every thread gets it. */
static __device__ double block_sum(double v, double *red) {
  red[threadIdx.x] = v;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  double r = red[0];
  __syncthreads();
  return r;
}

/* Maximum of v over the block (as block_sum). */
static __device__ double block_max(double v, double *red) {
  red[threadIdx.x] = v;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s && red[threadIdx.x + s] > red[threadIdx.x])
      red[threadIdx.x] = red[threadIdx.x + s];
    __syncthreads();
  }
  double r = red[0];
  __syncthreads();
  return r;
}

/* Softmax cross-entropy of row blockIdx.x of out (C columns) against target[row]: rowloss[row]
 * = log sum exp(o - max) - (o[target] - max); grad = (softmax - onehot) x scale. One block of
 * RG_THREADS threads per row. */
static __global__ void k_loss_rows(const float *out, float *grad, const int *target,
                                   double *rowloss, int C, double scale) {
  __shared__ double red[RG_THREADS];
  size_t t = blockIdx.x;
  const float *o = out + t * (size_t)C;
  float *g = grad + t * (size_t)C;
  double mx = o[0];
  for (int c = threadIdx.x; c < C; c += blockDim.x)
    if (o[c] > mx) mx = o[c];
  mx = block_max(mx, red);
  double sum = 0;
  for (int c = threadIdx.x; c < C; c += blockDim.x) sum += exp((double)o[c] - mx);
  sum = block_sum(sum, red);
  int tg = target[t];
  if (threadIdx.x == 0) rowloss[t] = log(sum) - ((double)o[tg] - mx);
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    double p = exp((double)o[c] - mx) / sum;
    g[c] = (float)((p - (c == tg ? 1.0 : 0.0)) * scale);
  }
}

/* *acc += (sum of the T row losses) / T, summed in a fixed order. One block of RG_THREADS. */
static __global__ void k_loss_sum(const double *rowloss, int T, float *acc) {
  __shared__ double red[RG_THREADS];
  double v = 0;
  for (int t = threadIdx.x; t < T; t += blockDim.x) v += rowloss[t];
  v = block_sum(v, red);
  if (threadIdx.x == 0) *acc = (float)((double)*acc + v / T);
}

/* ---- GEMM ---------------------------------------------------------------------------------- */

/* Row-major C (M x N) = op(A) op(B) + beta C, where A is stored M x K (K x M when ta) and B is
 * K x N (N x K when tb): the column-major product C^T = op(B)^T op(A)^T. float32 (TF32 off), or
 * bf16 copies of A and B in the model's scratch with float32 accumulation. Pre: m's device is
 * current; in bf16 mode the scratch holds M x K and K x N elements (init_stage sized it).
 * False with m's error on failure. */
static bool gemm(rg_model *m, cudaStream_t s, const char *op, bool ta, bool tb, int M, int N,
                 int K, const float *A, const float *B, float beta, float *C) {
  const float one = 1.0f;
  cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  int lda = ta ? M : K, ldb = tb ? K : N;
  if (!blas_ok(m, cublasSetStream(m->blas, s), op, "cublasSetStream")) return false;
  if (!m->bf16)
    return blas_ok(m, cublasSgemm(m->blas, ob, oa, N, M, K, &one, B, ldb, A, lda, &beta, C, N),
                   op, "cublasSgemm");
  size_t na = (size_t)M * K, nb = (size_t)K * N;
  if (na > m->sa_n || nb > m->sb_n) {
    set_error(m, "%s: bf16 scratch too small (internal error)", op);
    return false;
  }
  k_to_bf16<<<grid_for(na), RG_THREADS, 0, s>>>(A, m->sa, na);
  k_to_bf16<<<grid_for(nb), RG_THREADS, 0, s>>>(B, m->sb, nb);
  return blas_ok(m,
                 cublasGemmEx(m->blas, ob, oa, N, M, K, &one, m->sb, CUDA_R_16BF, ldb, m->sa,
                              CUDA_R_16BF, lda, &beta, C, CUDA_R_32F, N, CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT),
                 op, "cublasGemmEx");
}

/* ---- Construction -------------------------------------------------------------------------- */

/* Free the staging slots of m. Pre: m's device is current and idle. */
static void free_slots(rg_model *m) {
  for (int i = 0; i < m->nslots; i++) {
    gslot *sl = &m->slots[i];
    if (sl->host) (void)cudaFreeHost(sl->host);
    if (sl->rowloss) (void)cudaFree(sl->rowloss);
    if (sl->ev) (void)cudaEventDestroy(sl->ev);
  }
  free(m->slots);
  m->slots = NULL;
  m->nslots = 0;
}

void rg_model_free(rg_model *m) {
  if (!m) return;
  if (m->dev_ok && cudaSetDevice(m->device) == cudaSuccess) {
    (void)cudaDeviceSynchronize();
    for (int si = 0; si < m->nstages; si++) {
      gstage *st = &m->stages[si];
      for (int k = 0; st->saved && k < m->nmb; k++)
        if (st->saved[k].buf) (void)cudaFreeAsync(st->saved[k].buf, 0);
      if (st->w) (void)cudaFree(st->w);
      if (st->g) (void)cudaFree(st->g);
      if (st->am) (void)cudaFree(st->am);
      if (st->av) (void)cudaFree(st->av);
    }
    (void)cudaDeviceSynchronize();
    if (m->pool_ok) (void)cudaMemPoolDestroy(m->pool);
    if (m->sa) (void)cudaFree(m->sa);
    if (m->sb) (void)cudaFree(m->sb);
    free_slots(m);
    if (m->blas_ok) (void)cublasDestroy(m->blas);
    (void)cudaGetLastError(); /* leave no error behind for the caller's next call */
  }
  for (int si = 0; m->stages && si < m->nstages; si++) free(m->stages[si].saved);
  free(m->stages);
  free(m->layers);
  free(m->slots);
  free(m->htmp);
  rt_si_free(m->cpu);
  free(m);
}

/* Lay out m's layers and stages as model.c does (rt_si_new). */
static void layout(rg_model *m, const be_stream *s, bool head) {
  m->layers = (glayer *)xcalloc((size_t)m->nlayers, sizeof *m->layers);
  for (int i = 0; i < m->nlayers; i++) {
    glayer *L = &m->layers[i];
    L->kind = i == 0 ? GL_EMB : (i == m->nlayers - 1 && head) ? GL_HEAD : GL_DENSE;
    L->in = L->kind == GL_EMB ? 1 : m->h;
    L->out = L->kind == GL_HEAD ? m->V : m->h;
  }
  m->stages = (gstage *)xcalloc((size_t)m->nstages, sizeof *m->stages);
  size_t T = (size_t)m->T;
  for (int si = 0; si < m->nstages; si++) {
    gstage *st = &m->stages[si];
    st->first = s->stages[si].first;
    st->end = s->stages[si].end;
    size_t p = 0, q = 0;
    for (int i = st->first; i < st->end; i++) {
      glayer *L = &m->layers[i];
      L->w_off = p;
      L->w_n = L->kind == GL_EMB ? (size_t)m->V * m->h : (size_t)m->h * L->out;
      p += L->w_n;
      L->b_off = p;
      L->b_n = L->kind == GL_DENSE ? (size_t)m->h : 0;
      p += L->b_n;
      L->x_off = q;
      q += T * L->in;
      L->a_off = q;
      q += L->kind == GL_DENSE ? T * m->h : 0;
      L->d_off = q;
      q += T * L->out;
    }
    st->nparams = p;
    st->state_floats = q;
    st->saved = (gsaved *)xcalloc((size_t)m->nmb, sizeof *st->saved);
  }
}

/* rg_model_new's failure: "what: reason" into err, m freed; returns NULL. */
static rg_model *new_fail(rg_model *m, strbuf *err, const char *what, const char *reason) {
  if (err) strbuf_printf(err, "CUDA device %d: %s: %s", m->device, what, reason);
  rg_model_free(m);
  return NULL;
}

rg_model *rg_model_new(const be_stream *s, const rt_opts *o, int device, bool bf16,
                       strbuf *err) {
  rt_si_model *cpu = rt_si_new(s, o, err);
  if (!cpu) return NULL;
  rg_model *m = (rg_model *)xcalloc(1, sizeof *m);
  m->cpu = cpu;
  m->device = device;
  m->bf16 = bf16;
  rt_si_dims d = rt_si_get_dims(cpu);
  m->nlayers = s->nlayers;
  m->nstages = s->nstages;
  m->nmb = d.nmb;
  m->replicas = d.replicas;
  m->h = d.h;
  m->V = d.V;
  m->T = d.T;
  m->adam = d.adam;
  m->lr = d.lr;
  layout(m, s, d.head);
  m->htmp = (float *)xmalloc((size_t)m->T * sizeof *m->htmp);

  char why[160];
  if (!device_visible(device, why, sizeof why)) {
    if (err) strbuf_puts(err, why);
    rg_model_free(m);
    return NULL;
  }
  cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) return new_fail(m, err, "cudaSetDevice", cudaGetErrorString(e));
  m->dev_ok = true;
  cublasStatus_t bs = cublasCreate(&m->blas);
  if (bs != CUBLAS_STATUS_SUCCESS) return new_fail(m, err, "cublasCreate", cublasGetStatusString(bs));
  m->blas_ok = true;
  /* float32: pedantic math (no TF32 or other reduced-precision emulation), for equivalence with
   * the CPU; bf16 inputs go through cublasGemmEx with float32 compute either way. */
  bs = cublasSetMathMode(m->blas, bf16 ? CUBLAS_DEFAULT_MATH : CUBLAS_PEDANTIC_MATH);
  if (bs != CUBLAS_STATUS_SUCCESS)
    return new_fail(m, err, "cublasSetMathMode", cublasGetStatusString(bs));

  cudaMemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  e = cudaMemPoolCreate(&m->pool, &props);
  if (e != cudaSuccess) return new_fail(m, err, "cudaMemPoolCreate", cudaGetErrorString(e));
  m->pool_ok = true;
  uint64_t keep = UINT64_MAX; /* keep freed blocks for reuse: no allocation after warm-up */
  e = cudaMemPoolSetAttribute(m->pool, cudaMemPoolAttrReleaseThreshold, &keep);
  if (e != cudaSuccess) return new_fail(m, err, "cudaMemPoolSetAttribute", cudaGetErrorString(e));

  /* Staging ring: a step's loads and losses, and some slack. */
  m->nslots = 2 * m->nmb + 4;
  m->slots = (gslot *)xcalloc((size_t)m->nslots, sizeof *m->slots);
  size_t T = (size_t)m->T;
  for (int i = 0; i < m->nslots; i++) {
    gslot *sl = &m->slots[i];
    e = cudaMallocHost(&sl->host, T * 4);
    if (e != cudaSuccess) return new_fail(m, err, "cudaMallocHost", cudaGetErrorString(e));
    e = cudaMalloc((void **)&sl->rowloss, T * (sizeof(double) + sizeof(int)));
    if (e != cudaSuccess) return new_fail(m, err, "cudaMalloc", cudaGetErrorString(e));
    sl->target = (int *)(sl->rowloss + T);
    e = cudaEventCreateWithFlags(&sl->ev, cudaEventDisableTiming);
    if (e != cudaSuccess) return new_fail(m, err, "cudaEventCreate", cudaGetErrorString(e));
  }
  return m;
}

/* Make sure m's bf16 scratch can hold the GEMM operands of stage st's layers. Pre: the device
 * is current. False with m's error. */
static bool grow_scratch(rg_model *m, const gstage *st, const char *op) {
  if (!m->bf16) return true;
  size_t T = (size_t)m->T, h = (size_t)m->h, na = 0, nb = 0;
  for (int i = st->first; i < st->end; i++) {
    const glayer *L = &m->layers[i];
    if (L->kind == GL_EMB) continue;
    size_t n = (size_t)L->out;
    /* F: x (T x h) . W (h x n); B: d (T x n) . W^T; W: x^T (T x h) . d (T x n). */
    size_t a = T * (h > n ? h : n), b = (h > T ? h : T) * n;
    if (a > na) na = a;
    if (b > nb) nb = b;
  }
  if (na > m->sa_n) {
    if (m->sa) (void)cudaFree(m->sa);
    m->sa = NULL;
    m->sa_n = 0;
    if (!cuda_ok(m, cudaMalloc((void **)&m->sa, na * sizeof *m->sa), op, "cudaMalloc")) return false;
    m->sa_n = na;
  }
  if (nb > m->sb_n) {
    if (m->sb) (void)cudaFree(m->sb);
    m->sb = NULL;
    m->sb_n = 0;
    if (!cuda_ok(m, cudaMalloc((void **)&m->sb, nb * sizeof *m->sb), op, "cudaMalloc")) return false;
    m->sb_n = nb;
  }
  return true;
}

void rg_model_init_stage(rg_model *m, int si) {
  const char *op = "rg_model_init_stage";
  if (!m || si < 0 || si >= m->nstages) return;
  gstage *st = &m->stages[si];
  if (st->init || !op_begin(m, op)) return;
  size_t n = st->nparams, bytes = n * sizeof(float);
  float *hw = (float *)xmalloc(n ? bytes : 1);
  if (rt_si_init_values(m->cpu, si, hw, n) != 0) {
    set_error(m, "%s: stage %d: the parameter layout differs from the CPU model's", op, si);
    free(hw);
    return;
  }
  bool ok = cuda_ok(m, cudaMalloc((void **)&st->w, bytes), op, "cudaMalloc") &&
            cuda_ok(m, cudaMalloc((void **)&st->g, bytes), op, "cudaMalloc") &&
            (!m->adam || (cuda_ok(m, cudaMalloc((void **)&st->am, bytes), op, "cudaMalloc") &&
                          cuda_ok(m, cudaMalloc((void **)&st->av, bytes), op, "cudaMalloc"))) &&
            cuda_ok(m, cudaMemcpy(st->w, hw, bytes, cudaMemcpyHostToDevice), op, "cudaMemcpy") &&
            cuda_ok(m, cudaMemset(st->g, 0, bytes), op, "cudaMemset") &&
            (!m->adam || (cuda_ok(m, cudaMemset(st->am, 0, bytes), op, "cudaMemset") &&
                          cuda_ok(m, cudaMemset(st->av, 0, bytes), op, "cudaMemset"))) &&
            grow_scratch(m, st, op) &&
            /* the copies and memsets ran on the default stream: finish them before any other
             * stream touches the stage */
            cuda_ok(m, cudaDeviceSynchronize(), op, "cudaDeviceSynchronize");
  free(hw);
  if (!ok) return;
  st->adam_t = 0;
  st->b1t = st->b2t = 1.0;
  st->init = true;
}

/* Stage si, initialized on first use as on the CPU; NULL when that failed. */
static gstage *stage_of(rg_model *m, int si) {
  rg_model_init_stage(m, si);
  return m->stages[si].init ? &m->stages[si] : NULL;
}

size_t rg_tensor_floats(const rg_model *m, be_tensor_kind k, int stage) {
  return rt_si_tensor_floats(m->cpu, k, stage);
}

/* ---- Data ---------------------------------------------------------------------------------- */

/* The next staging slot, once its previous use completed; NULL with m's error. */
static gslot *slot_take(rg_model *m, const char *op) {
  gslot *sl = &m->slots[m->next_slot];
  m->next_slot = (m->next_slot + 1) % m->nslots;
  if (sl->used && !cuda_ok(m, cudaEventSynchronize(sl->ev), op, "cudaEventSynchronize"))
    return NULL;
  sl->used = false;
  return sl;
}

/* Mark slot sl in use until what was enqueued on s so far completed. */
static void slot_release(rg_model *m, gslot *sl, cudaStream_t s, const char *op) {
  if (cuda_ok(m, cudaEventRecord(sl->ev, s), op, "cudaEventRecord")) sl->used = true;
}

void rg_load(rg_model *m, void *stream, int step, int replica, int mb, float *tokens) {
  const char *op = "rg_load";
  cudaStream_t s = (cudaStream_t)stream;
  if (!op_begin(m, op)) return;
  gslot *sl = slot_take(m, op);
  if (!sl) return;
  rt_si_load(m->cpu, step, replica, mb, (float *)sl->host);
  if (cuda_ok(m, cudaMemcpyAsync(tokens, sl->host, (size_t)m->T * sizeof(float),
                                 cudaMemcpyHostToDevice, s), op, "cudaMemcpyAsync"))
    slot_release(m, sl, s, op);
}

/* ---- Forward and loss ---------------------------------------------------------------------- */

/* Forward of layer L (parameters w): x -> y; a receives tanh(xW+b) for a dense layer. */
static void layer_forward(rg_model *m, cudaStream_t s, const glayer *L, const float *w,
                          const float *x, float *a, float *y) {
  const char *op = "rg_forward";
  size_t n = (size_t)m->T * m->h;
  if (L->kind == GL_EMB) {
    k_embed_fwd<<<grid_for(n), RG_THREADS, 0, s>>>(x, w + L->w_off, y, n, m->h, m->V);
  } else if (L->kind == GL_DENSE) {
    if (gemm(m, s, op, false, false, m->T, m->h, m->h, x, w + L->w_off, 0.0f, a))
      k_dense_fwd<<<grid_for(n), RG_THREADS, 0, s>>>(x, w + L->b_off, a, y, n, m->h);
  } else {
    gemm(m, s, op, false, false, m->T, m->V, m->h, x, w + L->w_off, 0.0f, y);
  }
}

void rg_forward(rg_model *m, void *stream, int si, int mb, const float *in, float *out) {
  const char *op = "rg_forward";
  cudaStream_t s = (cudaStream_t)stream;
  if (si < 0 || si >= m->nstages || mb < 0 || mb >= m->nmb || !op_begin(m, op)) return;
  gstage *st = stage_of(m, si);
  if (!st) return;
  gsaved *sv = &st->saved[mb];
  if (!sv->buf &&
      !cuda_ok(m, cudaMallocFromPoolAsync((void **)&sv->buf, st->state_floats * sizeof(float),
                                          m->pool, s), op, "cudaMallocFromPoolAsync")) {
    sv->buf = NULL;
    return;
  }
  sv->b_done = false;
  float *blk = sv->buf;
  const glayer *L0 = &m->layers[st->first];
  if (!cuda_ok(m, cudaMemcpyAsync(blk + L0->x_off, in, (size_t)m->T * L0->in * sizeof(float),
                                  cudaMemcpyDeviceToDevice, s), op, "cudaMemcpyAsync"))
    return;
  for (int i = st->first; i < st->end && !m->failed; i++) {
    const glayer *L = &m->layers[i];
    float *y = i + 1 < st->end ? blk + m->layers[i + 1].x_off : out;
    layer_forward(m, s, L, st->w, blk + L->x_off, blk + L->a_off, y);
  }
  op_end(m, op);
}

void rg_loss(rg_model *m, void *stream, int step, int replica, int mb, const float *out,
             float *grad, float *loss_acc) {
  const char *op = "rg_loss";
  cudaStream_t s = (cudaStream_t)stream;
  if (!op_begin(m, op)) return;
  gslot *sl = slot_take(m, op);
  if (!sl) return;
  int T = m->T, C = m->layers[m->nlayers - 1].out;
  /* Targets: the next tokens of the stream, i.e. tokens 1..T-1 of this microbatch and token 0
   * of the next one (the next microbatch, replica or step: the next stream position). */
  int *tg = (int *)sl->host;
  rt_si_load(m->cpu, step, replica, mb, m->htmp);
  for (int t = 0; t + 1 < T; t++) tg[t] = (int)m->htmp[t + 1] % C;
  int nstep = step, nrep = replica, nmb = mb + 1;
  if (nmb == m->nmb) nmb = 0, nrep++;
  if (nrep == m->replicas) nrep = 0, nstep++;
  rt_si_load(m->cpu, nstep, nrep, nmb, m->htmp);
  tg[T - 1] = (int)m->htmp[0] % C;
  if (!cuda_ok(m, cudaMemcpyAsync(sl->target, tg, (size_t)T * sizeof(int),
                                  cudaMemcpyHostToDevice, s), op, "cudaMemcpyAsync"))
    return;
  double scale = 1.0 / ((double)T * m->nmb * m->replicas);
  k_loss_rows<<<T, RG_THREADS, 0, s>>>(out, grad, sl->target, sl->rowloss, C, scale);
  k_loss_sum<<<1, RG_THREADS, 0, s>>>(sl->rowloss, T, loss_acc);
  slot_release(m, sl, s, op);
  op_end(m, op);
}

/* ---- Backward ------------------------------------------------------------------------------ */

/* Input-gradient backward of L: its saved d slot (dy) -> dx (may be NULL); dense layers turn dy
 * into dz in place, the head keeps dlogits. */
static void layer_backward_input(rg_model *m, cudaStream_t s, const glayer *L, const float *w,
                                 float *d, const float *a, float *dx) {
  const char *op = "rg_backward_input";
  size_t n = (size_t)m->T * m->h;
  if (L->kind == GL_DENSE) {
    k_dense_bin<<<grid_for(n), RG_THREADS, 0, s>>>(d, a, dx, n);
    if (dx) gemm(m, s, op, false, true, m->T, m->h, m->h, d, w + L->w_off, 1.0f, dx);
  } else if (L->kind == GL_HEAD && dx) {
    gemm(m, s, op, false, true, m->T, m->h, m->V, d, w + L->w_off, 0.0f, dx);
  }
}

void rg_backward_input(rg_model *m, void *stream, int si, int mb, const float *grad, float *dx) {
  const char *op = "rg_backward_input";
  cudaStream_t s = (cudaStream_t)stream;
  if (si < 0 || si >= m->nstages || mb < 0 || mb >= m->nmb || !op_begin(m, op)) return;
  gstage *st = stage_of(m, si);
  if (!st) return;
  gsaved *sv = &st->saved[mb];
  if (!sv->buf) return; /* no forward: precondition broken (as on the CPU) */
  float *blk = sv->buf;
  const glayer *Ll = &m->layers[st->end - 1];
  if (!cuda_ok(m, cudaMemcpyAsync(blk + Ll->d_off, grad, (size_t)m->T * Ll->out * sizeof(float),
                                  cudaMemcpyDeviceToDevice, s), op, "cudaMemcpyAsync"))
    return;
  for (int i = st->end - 1; i >= st->first && !m->failed; i--) {
    const glayer *L = &m->layers[i];
    float *d = i > st->first ? blk + m->layers[i - 1].d_off : dx;
    layer_backward_input(m, s, L, st->w, blk + L->d_off, blk + L->a_off, d);
  }
  sv->b_done = true;
  op_end(m, op);
}

/* Weight-gradient backward of L into gradients g from its saved x and d. */
static void layer_backward_weight(rg_model *m, cudaStream_t s, const glayer *L, float *g,
                                  const float *x, const float *d) {
  const char *op = "rg_backward_weight";
  size_t n = (size_t)m->T * m->h;
  if (L->kind == GL_EMB) {
    k_embed_bwd<<<grid_for(n), RG_THREADS, 0, s>>>(x, d, g + L->w_off, n, m->h, m->V);
    return;
  }
  if (!gemm(m, s, op, true, false, m->h, L->out, m->T, x, d, 1.0f, g + L->w_off)) return;
  if (L->kind == GL_DENSE)
    k_colsum_add<<<(m->h + RG_THREADS - 1) / RG_THREADS, RG_THREADS, 0, s>>>(d, g + L->b_off,
                                                                            m->T, m->h);
}

void rg_backward_weight(rg_model *m, void *stream, int si, int mb) {
  const char *op = "rg_backward_weight";
  cudaStream_t s = (cudaStream_t)stream;
  if (si < 0 || si >= m->nstages || mb < 0 || mb >= m->nmb || !op_begin(m, op)) return;
  gstage *st = stage_of(m, si);
  if (!st) return;
  gsaved *sv = &st->saved[mb];
  if (!sv->buf || !sv->b_done) return; /* no B: precondition broken (as on the CPU) */
  for (int i = st->first; i < st->end && !m->failed; i++) {
    const glayer *L = &m->layers[i];
    layer_backward_weight(m, s, L, st->g, sv->buf + L->x_off, sv->buf + L->d_off);
  }
  cuda_ok(m, cudaFreeAsync(sv->buf, s), op, "cudaFreeAsync");
  sv->buf = NULL;
  sv->b_done = false;
  op_end(m, op);
}

/* ---- Gradients and optimizer --------------------------------------------------------------- */

float *rg_stage_grads(rg_model *m, int si, size_t *n) {
  *n = 0;
  if (si < 0 || si >= m->nstages) return NULL;
  gstage *st = stage_of(m, si);
  if (!st) return NULL;
  *n = st->nparams;
  return st->g;
}

int rg_stage_grads_to_host(rg_model *m, int si, float *out, size_t n) {
  const char *op = "rg_stage_grads_to_host";
  if (si < 0 || si >= m->nstages || !op_begin(m, op)) return -1;
  gstage *st = stage_of(m, si);
  if (!st || n != st->nparams) return -1;
  if (!cuda_ok(m, cudaDeviceSynchronize(), op, "cudaDeviceSynchronize") ||
      !cuda_ok(m, cudaMemcpy(out, st->g, n * sizeof(float), cudaMemcpyDeviceToHost), op,
               "cudaMemcpy"))
    return -1;
  return 0;
}

void rg_step(rg_model *m, void *stream, int si) {
  const char *op = "rg_step";
  cudaStream_t s = (cudaStream_t)stream;
  if (si < 0 || si >= m->nstages || !op_begin(m, op)) return;
  gstage *st = stage_of(m, si);
  if (!st || st->nparams == 0) return;
  size_t n = st->nparams;
  if (m->adam) {
    st->adam_t++;
    st->b1t *= 0.9;
    st->b2t *= 0.999;
    k_adam<<<grid_for(n), RG_THREADS, 0, s>>>(st->w, st->g, st->am, st->av, n, m->lr,
                                              1.0 - st->b1t, 1.0 - st->b2t);
  } else {
    k_sgd<<<grid_for(n), RG_THREADS, 0, s>>>(st->w, st->g, n, m->lr);
  }
  op_end(m, op);
}

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
  char why[160];
  if (!device_visible(device, why, sizeof why)) {
    if (err) strbuf_puts(err, why);
    return -1;
  }
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
