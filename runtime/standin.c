/* standin.c -- the stand-in model that the GPU backends still run (standin.h): layer 0 is an embedding,
 * a final "lm_head" layer is a linear projection to the vocabulary, every other layer is a
 * residual dense block y = x + tanh(x W + b); all sized from the stream's layer dimensions
 * divided by the scale. It provides deterministic counter-based initialization, synthetic or file
 * data, softmax cross-entropy, the split backward (B: input gradient, W: weight gradient) with
 * the state saved per (stage, microbatch), SGD and Adam, and the sequential reference step that
 * pipelined runs are checked against. All arithmetic is plain float storage with double
 * accumulation in a fixed order, so every rank running the same binary computes bit-identical
 * per-microbatch results. A model is used by one thread at a time (it owns scratch buffers). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "standin.h"

/* ---- Definitions --------------------------------------------------------------------------- */

/* Largest width, vocabulary or token count accepted (tokens must be exact as floats). */
#define RT_MAX_DIM (1 << 24)

/* What stand-in a layer is. */
typedef enum lkind {
  LK_EMB,   /* layer 0: table E[V][h], out[t] = E[tok[t]] */
  LK_DENSE, /* y = x + tanh(x W + b), W[h][h], b[h] */
  LK_HEAD   /* last layer of kind "lm_head": logits = x W, W[h][V] */
} lkind;

/* One layer of the stand-in model: its shape and where its data lives inside its stage's
 * parameter arrays and inside a saved-state block of its stage. */
typedef struct mlayer {
  lkind kind;   /* stand-in kind */
  int in;       /* input width per token (1 for the embedding: the token id) */
  int out;      /* output width per token (h, or V for the lm_head) */
  size_t w_off; /* offset of W (or E) in the stage's parameter/gradient arrays */
  size_t w_n;   /* floats of W (or E) */
  size_t b_off; /* offset of b (dense only) */
  size_t b_n;   /* floats of b (0 unless dense) */
  size_t x_off; /* offset of the saved input (T x in) in a state block */
  size_t a_off; /* offset of the saved tanh(xW+b) (T x h; dense only) */
  size_t d_off; /* offset of the saved output gradient (T x out): dz, dlogits or dy */
} mlayer;

/* A saved (stage, microbatch) state between F, B and W. */
typedef struct msaved {
  float *buf;  /* state block (state_floats), NULL when nothing is in flight */
  bool b_done; /* rt_si_backward_input ran (the d slots are filled) */
} msaved;

/* A stage: its layer range, parameters, gradients, optimizer state and saved states. */
typedef struct mstage {
  int first, end;      /* layer range [first, end) */
  bool init;           /* parameters allocated and initialized */
  size_t nparams;      /* floats of w (and of g, am, av) */
  float *w;            /* parameters of all its layers, in layer order (W or E, then b) */
  float *g;            /* gradients, same layout */
  float *am, *av;      /* Adam first and second moments (NULL for SGD) */
  long adam_t;         /* Adam steps taken */
  double b1t, b2t;     /* beta1^t and beta2^t (bias correction) */
  size_t state_floats; /* floats of one saved-state block */
  msaved *saved;       /* nmb saved states */
} mstage;

struct rt_si_model {
  int nlayers;       /* layers */
  int nstages;       /* stages */
  int nmb;           /* microbatches per step */
  int replicas;      /* data-parallel replicas of the stream */
  int h;             /* model width */
  int V;             /* vocabulary */
  int T;             /* tokens per microbatch */
  int maxw;          /* max(h, V) */
  bool head;         /* the last layer is an lm_head */
  bool adam;         /* optimizer is Adam (else SGD) */
  double lr;         /* learning rate */
  uint64_t seed;     /* initialization and synthetic data seed */
  mlayer *layers;    /* nlayers layers */
  mstage *stages;    /* nstages stages */
  unsigned char *data; /* data file bytes, or NULL for synthetic data */
  size_t data_len;   /* their count (> 0 when data is set) */
  int *perm;         /* synthetic data: the successor of each token (a permutation of [0, V)) */
  double *dacc;      /* scratch: max(h, V) double accumulators */
  int *tok;          /* scratch: T + 1 token ids */
};

/* ---- Random numbers ------------------------------------------------------------------------ */

/* Uniform double in [0, 1) from the next draw (53 bits). */
static double next_unit(uint64_t *st) { return (double)(rt_next64(st) >> 11) * 0x1p-53; }

/* ---- Construction -------------------------------------------------------------------------- */

/* Value of the first parameter named 'name' over the layers in order; false when none has it. */
static bool find_param(const be_stream *s, const char *name, double *v) {
  for (int i = 0; i < s->nlayers; i++)
    for (int k = 0; k < s->layers[i].nparams; k++)
      if (s->layers[i].params[k].name && strcmp(s->layers[i].params[k].name, name) == 0) {
        *v = s->layers[i].params[k].value;
        return true;
      }
  return false;
}

/* Dimension value / scale rounded, at least lo; -1 when it is not finite or above RT_MAX_DIM. */
static long scaled_dim(double value, int scale, long lo) {
  double d = value / scale;
  if (!(d == d) || d > RT_MAX_DIM) return -1;
  long r = d < lo ? lo : lround(d);
  return r < lo ? lo : r;
}

rt_si_model *rt_si_new(const be_stream *s, const rt_opts *o, strbuf *err) {
  if (o->scale < 1) {
    if (err) strbuf_printf(err, "scale must be at least 1 (got %d)", o->scale);
    return NULL;
  }
  if (!rt_stream_check(s, err)) return NULL;
  double hv = 0, vv = 0;
  long h = find_param(s, "hidden", &hv) ? scaled_dim(hv, o->scale, 4) : 16;
  long V = find_param(s, "vocab", &vv) ? scaled_dim(vv, o->scale, 8) : 32;
  long seq = s->seq / o->scale < 4 ? 4 : s->seq / o->scale;
  long long T = (long long)s->micro_batch * seq;
  if (h < 0 || V < 0 || T > RT_MAX_DIM) {
    if (err)
      strbuf_printf(err, "model too large at scale %d (hidden %g, vocab %g, %lld tokens)",
                    o->scale, hv, vv, T);
    return NULL;
  }
  rt_si_model *m = xcalloc(1, sizeof *m);
  m->nlayers = s->nlayers;
  m->nstages = s->nstages;
  m->nmb = s->nmb;
  m->replicas = s->replicas < 1 ? 1 : s->replicas;
  m->h = (int)h;
  m->V = (int)V;
  m->T = (int)T;
  m->maxw = m->h > m->V ? m->h : m->V;
  m->head = s->nlayers > 1 && s->layers[s->nlayers - 1].kind &&
            strcmp(s->layers[s->nlayers - 1].kind, "lm_head") == 0;
  m->adam = s->optimizer && strcmp(s->optimizer, "adam") == 0;
  m->lr = o->lr;
  m->seed = o->seed;
  if (o->data && !rt_data_read(o->data, &m->data, &m->data_len, err)) {
    free(m);
    return NULL;
  }
  m->perm = rt_data_perm(m->V, m->seed);
  m->dacc = xmalloc((size_t)m->maxw * sizeof *m->dacc);
  m->tok = xmalloc(((size_t)m->T + 1) * sizeof *m->tok);

  m->layers = xcalloc((size_t)m->nlayers, sizeof *m->layers);
  for (int i = 0; i < m->nlayers; i++) {
    mlayer *L = &m->layers[i];
    L->kind = i == 0 ? LK_EMB : (i == m->nlayers - 1 && m->head) ? LK_HEAD : LK_DENSE;
    L->in = L->kind == LK_EMB ? 1 : m->h;
    L->out = L->kind == LK_HEAD ? m->V : m->h;
  }
  m->stages = xcalloc((size_t)m->nstages, sizeof *m->stages);
  for (int si = 0; si < m->nstages; si++) {
    mstage *st = &m->stages[si];
    st->first = s->stages[si].first;
    st->end = s->stages[si].end;
    size_t p = 0, q = 0, T_ = (size_t)m->T;
    for (int i = st->first; i < st->end; i++) {
      mlayer *L = &m->layers[i];
      L->w_off = p;
      L->w_n = L->kind == LK_EMB ? (size_t)m->V * m->h : (size_t)m->h * L->out;
      p += L->w_n;
      L->b_off = p;
      L->b_n = L->kind == LK_DENSE ? (size_t)m->h : 0;
      p += L->b_n;
      L->x_off = q;
      q += T_ * L->in;
      L->a_off = q;
      q += L->kind == LK_DENSE ? T_ * m->h : 0;
      L->d_off = q;
      q += T_ * L->out;
    }
    st->nparams = p;
    st->state_floats = q;
    st->saved = xcalloc((size_t)m->nmb, sizeof *st->saved);
  }
  return m;
}

void rt_si_free(rt_si_model *m) {
  if (!m) return;
  for (int si = 0; si < m->nstages; si++) {
    mstage *st = &m->stages[si];
    for (int k = 0; k < m->nmb; k++) free(st->saved[k].buf);
    free(st->saved);
    free(st->w);
    free(st->g);
    free(st->am);
    free(st->av);
  }
  free(m->stages);
  free(m->layers);
  free(m->data);
  free(m->perm);
  free(m->dacc);
  free(m->tok);
  free(m);
}

/* Fill w (the stage's nparams floats) with stage st's initial parameters: each layer's W (or E)
 * from its own generator, b zero. */
static void init_values(const rt_si_model *m, const mstage *st, float *w) {
  memset(w, 0, st->nparams * sizeof *w);
  for (int i = st->first; i < st->end; i++) {
    const mlayer *L = &m->layers[i];
    uint64_t rs = rt_mix64(m->seed ^ ((uint64_t)(i + 1) * 0xd1b54a32d192ed03ULL));
    double a = L->kind == LK_EMB ? 1.0 : sqrt(3.0 / m->h);
    float *wl = w + L->w_off;
    for (size_t k = 0; k < L->w_n; k++) wl[k] = (float)((2.0 * next_unit(&rs) - 1.0) * a);
  }
}

void rt_si_init_stage(rt_si_model *m, int st_i) {
  if (st_i < 0 || st_i >= m->nstages) return;
  mstage *st = &m->stages[st_i];
  if (st->init) return;
  st->w = xmalloc(st->nparams * sizeof *st->w);
  st->g = xcalloc(st->nparams, sizeof *st->g);
  if (m->adam) {
    st->am = xcalloc(st->nparams, sizeof *st->am);
    st->av = xcalloc(st->nparams, sizeof *st->av);
  }
  st->b1t = st->b2t = 1.0;
  init_values(m, st, st->w);
  st->init = true;
}

rt_si_dims rt_si_get_dims(const rt_si_model *m) {
  rt_si_dims d = {m->h, m->V, m->T, m->nmb, m->replicas, m->head, m->adam, m->lr};
  return d;
}

int rt_si_init_values(const rt_si_model *m, int st, float *w, size_t n) {
  if (st < 0 || st >= m->nstages || n != m->stages[st].nparams) return -1;
  init_values(m, &m->stages[st], w);
  return 0;
}

/* Stage st, initialized on first use (init is deterministic and idempotent). */
static mstage *stage_of(rt_si_model *m, int st) {
  rt_si_init_stage(m, st);
  return &m->stages[st];
}

/* Output width per token of stage st (that of its last layer). */
static int stage_out(const rt_si_model *m, int st) {
  return m->layers[m->stages[st].end - 1].out;
}

size_t rt_si_tensor_floats(const rt_si_model *m, be_tensor_kind k, int stage) {
  size_t T = (size_t)m->T;
  switch (k) {
  case BE_T_INPUT: return T;
  case BE_T_ACT: return stage >= 0 && stage < m->nstages ? T * stage_out(m, stage) : 0;
  case BE_T_GRAD: return stage >= 1 && stage <= m->nstages ? T * stage_out(m, stage - 1) : 0;
  default: return 0;
  }
}

/* ---- Data ---------------------------------------------------------------------------------- */

/* Token at stream position p. */
static int token_at(const rt_si_model *m, uint64_t p) {
  if (m->data) return m->data[p % m->data_len] % m->V;
  uint64_t start = p - p % (uint64_t)m->T;
  int t = (int)(rt_mix64(rt_mix64(m->seed ^ 0x5345515354415254ULL) ^ rt_mix64(start)) % (uint64_t)m->V);
  for (uint64_t q = start; q < p; q++) t = m->perm[t];
  return t;
}

/* Tokens of stream positions p .. p + n - 1 into out. */
static void tokens_from(const rt_si_model *m, uint64_t p, int n, int *out) {
  for (int i = 0; i < n; i++) {
    uint64_t q = p + (uint64_t)i;
    if (i == 0 || m->data || q % (uint64_t)m->T == 0) out[i] = token_at(m, q);
    else out[i] = m->perm[out[i - 1]];
  }
}

/* Stream position of token 0 of (step, replica, mb). */
static uint64_t mb_pos(const rt_si_model *m, int step, int replica, int mb) {
  return (((uint64_t)step * (uint64_t)m->replicas + (uint64_t)replica) * (uint64_t)m->nmb +
          (uint64_t)mb) * (uint64_t)m->T;
}

void rt_si_load(rt_si_model *m, int step, int replica, int mb, float *tokens) {
  tokens_from(m, mb_pos(m, step, replica, mb), m->T, m->tok);
  for (int i = 0; i < m->T; i++) tokens[i] = (float)m->tok[i];
}

/* Token id stored in a float, clamped into [0, V) (0 for anything that is not a valid id). */
static int token_id(const rt_si_model *m, float f) {
  return f >= 0 && f < (float)m->V ? (int)f : 0;
}

/* ---- Forward and loss ---------------------------------------------------------------------- */

/* Forward of layer L: x (T x in) -> y (T x out); a (T x h) receives tanh(xW+b) for dense. */
static void layer_forward(rt_si_model *m, const mlayer *L, const float *w, const float *x, float *a,
                          float *y) {
  int T = m->T, h = m->h;
  double *acc = m->dacc;
  if (L->kind == LK_EMB) {
    for (int t = 0; t < T; t++) {
      const float *row = w + L->w_off + (size_t)token_id(m, x[t]) * h;
      memcpy(y + (size_t)t * h, row, (size_t)h * sizeof *y);
    }
    return;
  }
  const float *W = w + L->w_off;
  int n = L->out;
  for (int t = 0; t < T; t++) {
    const float *xt = x + (size_t)t * h;
    for (int k = 0; k < n; k++) acc[k] = L->kind == LK_DENSE ? (double)w[L->b_off + k] : 0.0;
    for (int i = 0; i < h; i++) {
      double xi = xt[i];
      const float *Wi = W + (size_t)i * n;
      for (int k = 0; k < n; k++) acc[k] += xi * Wi[k];
    }
    float *yt = y + (size_t)t * n;
    if (L->kind == LK_HEAD) {
      for (int k = 0; k < n; k++) yt[k] = (float)acc[k];
    } else {
      float *at = a + (size_t)t * h;
      for (int k = 0; k < n; k++) {
        at[k] = (float)tanh(acc[k]);
        yt[k] = xt[k] + at[k];
      }
    }
  }
}

void rt_si_forward(rt_si_model *m, int st_i, int mb, const float *in, float *out) {
  if (st_i < 0 || st_i >= m->nstages || mb < 0 || mb >= m->nmb) return;
  mstage *st = stage_of(m, st_i);
  msaved *sv = &st->saved[mb];
  if (!sv->buf) sv->buf = xmalloc(st->state_floats * sizeof *sv->buf);
  sv->b_done = false;
  float *blk = sv->buf;
  const mlayer *L0 = &m->layers[st->first];
  memcpy(blk + L0->x_off, in, (size_t)m->T * L0->in * sizeof *in);
  for (int i = st->first; i < st->end; i++) {
    const mlayer *L = &m->layers[i];
    float *y = i + 1 < st->end ? blk + m->layers[i + 1].x_off : out;
    layer_forward(m, L, st->w, blk + L->x_off, blk + L->a_off, y);
  }
}

double rt_si_loss(rt_si_model *m, int step, int replica, int mb, const float *out, float *grad) {
  int T = m->T, C = stage_out(m, m->nstages - 1);
  tokens_from(m, mb_pos(m, step, replica, mb) + 1, T, m->tok);
  double scale = 1.0 / ((double)T * m->nmb * m->replicas);
  double total = 0;
  for (int t = 0; t < T; t++) {
    const float *o = out + (size_t)t * C;
    float *g = grad + (size_t)t * C;
    int target = m->tok[t] % C;
    double mx = o[0];
    for (int c = 1; c < C; c++)
      if (o[c] > mx) mx = o[c];
    double sum = 0;
    for (int c = 0; c < C; c++) sum += exp((double)o[c] - mx);
    total += log(sum) - ((double)o[target] - mx);
    for (int c = 0; c < C; c++) {
      double p = exp((double)o[c] - mx) / sum;
      g[c] = (float)((p - (c == target ? 1.0 : 0.0)) * scale);
    }
  }
  return total / T;
}

/* ---- Backward ------------------------------------------------------------------------------ */

/* Input-gradient backward of L: dy (its saved d slot, T x out) -> dx (T x in; may be NULL).
 * Dense layers turn dy into dz in place; the head keeps dlogits as they are. */
static void layer_backward_input(rt_si_model *m, const mlayer *L, const float *w, float *dy,
                                 const float *a, float *dx) {
  int T = m->T, h = m->h, n = L->out;
  if (L->kind == LK_EMB) return;
  const float *W = w + L->w_off;
  for (int t = 0; t < T; t++) {
    float *dyt = dy + (size_t)t * n;
    if (L->kind == LK_DENSE) {
      const float *at = a + (size_t)t * h;
      if (dx) memcpy(dx + (size_t)t * h, dyt, (size_t)h * sizeof *dx);
      for (int k = 0; k < h; k++) dyt[k] = (float)((double)dyt[k] * (1.0 - (double)at[k] * at[k]));
    }
    if (!dx) continue;
    float *dxt = dx + (size_t)t * h;
    for (int i = 0; i < h; i++) {
      const float *Wi = W + (size_t)i * n;
      double acc = L->kind == LK_DENSE ? (double)dxt[i] : 0.0;
      for (int k = 0; k < n; k++) acc += (double)dyt[k] * Wi[k];
      dxt[i] = (float)acc;
    }
  }
}

void rt_si_backward_input(rt_si_model *m, int st_i, int mb, const float *grad, float *dx) {
  if (st_i < 0 || st_i >= m->nstages || mb < 0 || mb >= m->nmb) return;
  mstage *st = stage_of(m, st_i);
  msaved *sv = &st->saved[mb];
  if (!sv->buf) return; /* no forward: precondition broken */
  float *blk = sv->buf;
  const mlayer *Ll = &m->layers[st->end - 1];
  memcpy(blk + Ll->d_off, grad, (size_t)m->T * Ll->out * sizeof *grad);
  for (int i = st->end - 1; i >= st->first; i--) {
    const mlayer *L = &m->layers[i];
    float *d = i > st->first ? blk + m->layers[i - 1].d_off : dx;
    layer_backward_input(m, L, st->w, blk + L->d_off, blk + L->a_off, d);
  }
  sv->b_done = true;
}

/* Weight-gradient backward of L into the stage's gradients g from its saved x and d. */
static void layer_backward_weight(rt_si_model *m, const mlayer *L, float *g, const float *x,
                                  const float *d) {
  int T = m->T, h = m->h, n = L->out;
  double *acc = m->dacc;
  if (L->kind == LK_EMB) {
    for (int t = 0; t < T; t++) {
      float *gr = g + L->w_off + (size_t)token_id(m, x[t]) * h;
      const float *dt = d + (size_t)t * h;
      for (int k = 0; k < h; k++) gr[k] += dt[k];
    }
    return;
  }
  float *gW = g + L->w_off;
  for (int i = 0; i < h; i++) {
    for (int k = 0; k < n; k++) acc[k] = 0;
    for (int t = 0; t < T; t++) {
      double xi = x[(size_t)t * h + i];
      const float *dt = d + (size_t)t * n;
      for (int k = 0; k < n; k++) acc[k] += xi * dt[k];
    }
    float *gi = gW + (size_t)i * n;
    for (int k = 0; k < n; k++) gi[k] = (float)((double)gi[k] + acc[k]);
  }
  if (L->kind == LK_DENSE) {
    for (int k = 0; k < h; k++) acc[k] = 0;
    for (int t = 0; t < T; t++)
      for (int k = 0; k < h; k++) acc[k] += d[(size_t)t * h + k];
    float *gb = g + L->b_off;
    for (int k = 0; k < h; k++) gb[k] = (float)((double)gb[k] + acc[k]);
  }
}

void rt_si_backward_weight(rt_si_model *m, int st_i, int mb) {
  if (st_i < 0 || st_i >= m->nstages || mb < 0 || mb >= m->nmb) return;
  mstage *st = stage_of(m, st_i);
  msaved *sv = &st->saved[mb];
  if (!sv->buf || !sv->b_done) return; /* no B: precondition broken */
  for (int i = st->first; i < st->end; i++) {
    const mlayer *L = &m->layers[i];
    layer_backward_weight(m, L, st->g, sv->buf + L->x_off, sv->buf + L->d_off);
  }
  free(sv->buf);
  sv->buf = NULL;
  sv->b_done = false;
}

/* ---- Gradients and optimizer --------------------------------------------------------------- */

float *rt_si_stage_grads(rt_si_model *m, int st_i, size_t *n) {
  if (st_i < 0 || st_i >= m->nstages) {
    *n = 0;
    return NULL;
  }
  mstage *st = stage_of(m, st_i);
  *n = st->nparams;
  return st->g;
}

void rt_si_step(rt_si_model *m, int st_i) {
  if (st_i < 0 || st_i >= m->nstages) return;
  mstage *st = stage_of(m, st_i);
  float *w = st->w, *g = st->g;
  if (m->adam) {
    const double b1 = 0.9, b2 = 0.999, eps = 1e-8;
    st->adam_t++;
    st->b1t *= b1;
    st->b2t *= b2;
    double c1 = 1.0 - st->b1t, c2 = 1.0 - st->b2t;
    for (size_t k = 0; k < st->nparams; k++) {
      double gk = g[k];
      double mk = b1 * st->am[k] + (1.0 - b1) * gk;
      double vk = b2 * st->av[k] + (1.0 - b2) * gk * gk;
      st->am[k] = (float)mk;
      st->av[k] = (float)vk;
      w[k] = (float)((double)w[k] - m->lr * (mk / c1) / (sqrt(vk / c2) + eps));
    }
  } else {
    for (size_t k = 0; k < st->nparams; k++) w[k] = (float)((double)w[k] - m->lr * g[k]);
  }
  memset(g, 0, st->nparams * sizeof *g);
}

/* ---- Reference and comparison -------------------------------------------------------------- */

double rt_si_reference_step(rt_si_model *m, int step, int replicas) {
  size_t big = (size_t)m->T * m->maxw;
  float *tokens = xmalloc((size_t)m->T * sizeof *tokens);
  float *act = xmalloc((size_t)m->nstages * big * sizeof *act); /* output of each stage */
  float *ga = xmalloc(big * sizeof *ga), *gb = xmalloc(big * sizeof *gb);
  double total = 0;
  for (int r = 0; r < replicas; r++)
    for (int mb = 0; mb < m->nmb; mb++) {
      rt_si_load(m, step, r, mb, tokens);
      for (int s = 0; s < m->nstages; s++)
        rt_si_forward(m, s, mb, s == 0 ? tokens : act + (size_t)(s - 1) * big, act + (size_t)s * big);
      total += rt_si_loss(m, step, r, mb, act + (size_t)(m->nstages - 1) * big, ga);
      for (int s = m->nstages - 1; s >= 0; s--) {
        rt_si_backward_input(m, s, mb, ga, s == 0 ? NULL : gb);
        rt_si_backward_weight(m, s, mb);
        float *t = ga;
        ga = gb;
        gb = t;
      }
    }
  free(tokens);
  free(act);
  free(ga);
  free(gb);
  return replicas > 0 ? total / ((double)replicas * m->nmb) : 0.0;
}

/* The largest per-tensor difference between gradients ga and gb of stage st_i of m (both in
 * rt_si_stage_grads order). */
static double grads_diff(const rt_si_model *m, int st_i, const float *ga, const float *gb) {
  const mstage *sa = &m->stages[st_i];
  double worst = 0;
  for (int i = sa->first; i < sa->end; i++) {
    const mlayer *L = &m->layers[i];
    double d = rt_tensor_diff(ga + L->w_off, gb + L->w_off, L->w_n);
    if (L->b_n) {
      double db = rt_tensor_diff(ga + L->b_off, gb + L->b_off, L->b_n);
      if (db > d || db != db) d = db;
    }
    if (d > worst || d != d) worst = d;
  }
  return worst;
}

double rt_si_grad_diff(const rt_si_model *a, const rt_si_model *b, int st_i) {
  if (st_i < 0 || st_i >= a->nstages || st_i >= b->nstages) return 0;
  const mstage *sa = &a->stages[st_i], *sb = &b->stages[st_i];
  if (!sa->init || !sb->init || sa->nparams != sb->nparams) return INFINITY;
  return grads_diff(a, st_i, sa->g, sb->g);
}

double rt_si_grad_diff_array(const float *g, size_t n, const rt_si_model *b, int st_i) {
  if (st_i < 0 || st_i >= b->nstages) return 0;
  const mstage *sb = &b->stages[st_i];
  if (!sb->init || (size_t)sb->nparams != n) return INFINITY;
  return grads_diff(b, st_i, g, sb->g);
}
