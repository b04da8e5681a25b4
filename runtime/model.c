/* model.c -- the model of a stream as the CPU runtime trains it (runtime.h, "Model"): every layer
 * of the stream with its real math from the kernel table (kernels.h), sized from the layer's
 * parameters divided by the scale; deterministic initialization, synthetic or file data, softmax
 * cross-entropy, the split backward (B, then W) with the state saved per (stage, microbatch),
 * SGD and Adam, the sequential reference step, finiteness checks, --dump, and a rank's buffer
 * arena (rt_arena) with its memory (rt_rank_memory). Between layers
 * whose shapes disagree (a spec's approximation, e.g. a vision encoder's class token or a
 * projector's width) a parameter-free adapter keeps the last tokens and zero-pads or cuts the
 * width; an embedding after other layers splices their tokens in front of its own. A model is
 * used by one thread at a time (it owns scratch buffers). docs/runtime.md describes it. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "kernels.h"
#include "runtime.h"

/* Floating-point work of one step that the automatic scale aims below (a few seconds on a core). */
#define RT_AUTO_FLOPS 3e9
/* Largest automatic scale. */
#define RT_AUTO_MAX 1024
/* Bound of a layer's size products: sequences per microbatch x the cube of its largest
 * dimension. Every size a kernel forms (a parameter tensor, a saved-state block: products of at
 * most the tokens and two widths, or three widths, summed over fewer than 64 terms) stays below
 * 2^63, so no size_t arithmetic overflows; the memory check (rt_mem_check) refuses far earlier. */
#define RT_MAX_WORK 0x1p57

/* Seconds of the calls of one kind recorded by rt_model_time. */
typedef struct msamples {
  double *v;  /* one per call, in call order */
  int n, cap; /* their count and capacity */
} msamples;

/* One layer as the runtime runs it. */
typedef struct mlayer {
  const char *name;   /* the stream's layer name */
  const rt_kernel *k; /* its kind's kernels */
  rt_ldims d;         /* dimensions at the model's scale */
  rt_lplan p;         /* parameters and saved state */
  size_t w_off, nw;   /* its parameters in the stage's arrays */
  size_t sv_off;      /* its saved state: in the stage's state block, or for a layer of a
                         recomputing stage that is not rebuilt, in the stage's kept buffer */
  bool rebuilt;       /* its stage recomputes it (its kind is recomputable and it is among the
                         stage's first recompute_layers of them, all when 0): F keeps only its
                         input (in the kept buffer at in_off), B runs its F again into the block */
  size_t in_off;      /* a rebuilt layer: its input (the kernel's x) in the kept buffer */
  int prev_S, prev_w; /* tokens per sequence and width of what it receives (the previous layer's
                         output; for layer 0 the stream's input) */
  bool splice;        /* an embedding after other layers: their prev_S tokens come first */
  bool adapt;         /* its input shape differs from what it receives: adapter */
  msamples timed[RT_PHASES]; /* rt_model_time: its F, B and W calls (adapter and splice
                                included; a recomputing stage's second forward not) */
} mlayer;

/* A saved (stage, microbatch) state between F, B and W. */
typedef struct msaved {
  float *buf;   /* state block (state_floats), NULL when nothing is in flight (a recomputing
                   stage: NULL from F until B rebuilds it) */
  float *kept;  /* a recomputing stage: its kept buffer (kept_floats), from F until W: the
                   rebuilt layers' inputs and the other layers' saved state */
  bool ext;     /* the stream's WSTASH buffer (rt_model_use_state) holds buf (a recomputing
                   stage: kept), not a block of the model's */
  bool f_done;  /* rt_forward ran (and no W or fused B since) */
  bool b_done;  /* rt_backward_input ran */
} msaved;

/* A stage: its layer range, parameters, gradients, optimizer state and saved states. */
typedef struct mstage {
  int first, end;      /* layer range [first, end) */
  bool init;           /* parameters allocated and initialized */
  size_t nparams;      /* floats of w (and of g, am, av) */
  float *w;            /* parameters of all its layers, in layer order */
  float *g;            /* gradients, same layout */
  float *am, *av;      /* Adam first and second moments (NULL for SGD) */
  long adam_t;         /* Adam steps taken */
  double b1t, b2t;     /* beta1^t and beta2^t (bias correction) */
  size_t state_floats; /* floats of one saved-state block (a recomputing stage: its rebuilt
                          layers' state, what B rebuilds) */
  size_t kept_floats;  /* a recomputing stage: floats of its kept buffer */
  bool recompute;      /* the stream's recompute flag: F keeps the rebuilt layers' inputs and
                          the other layers' state, B runs the rebuilt layers' F again */
  msaved *saved;       /* nmb saved states */
  float **pool;        /* state blocks of finished microbatches, for reuse (no allocation and
                          page faults per microbatch) */
  int npool, pool_cap; /* their count and capacity */
  float **kpool;       /* a recomputing stage: kept buffers of finished microbatches, for
                          reuse (so that, like the blocks, they count at their peak) */
  int nkpool, kpool_cap; /* their count and capacity */
} mstage;

/* Copies of one layer's tensors for --dump, kept from F to W of the dumped microbatch. */
typedef struct mdump {
  float *x, *y, *dy, *dx; /* kernel input, output (a splicing embedding's: after the splice),
                             output gradient, input gradient (or NULL) */
  float *xs, *dxs;        /* a splicing embedding: the tokens spliced in and their gradient */
} mdump;

struct rt_model {
  int nlayers, nstages; /* layers, stages */
  int nmb;              /* microbatches per step */
  int replicas;         /* data-parallel replicas of the stream */
  int scale;            /* the scale in force */
  int B;                /* sequences per microbatch */
  int S;                /* tokens per sequence of the data (an embedding's, else the last layer's) */
  int V;                /* vocabulary of the data (an embedding's or lm_head's, else the output width) */
  int prefix;           /* leading positions of each sequence without a loss (spliced tokens) */
  bool adam;            /* optimizer is Adam (else SGD) */
  double lr;            /* learning rate */
  uint64_t seed;        /* initialization and synthetic data seed */
  int step, replica;    /* what the data of rt_forward comes from (rt_model_set_step) */
  const char *dump;     /* --dump directory, or NULL */
  mdump *dumps;         /* per layer, while dumping */
  strbuf dump_err;      /* the first --dump write that failed (then nothing more is dumped) */
  mlayer *layers;       /* nlayers layers */
  int tie_src, tie_head; /* tied embeddings (be_stream_tie): the layer whose table a tied lm_head
                            shares and the head, each holding its copy; -1 when none */
  mstage *stages;       /* nstages stages */
  unsigned char *data;  /* data file bytes, or NULL for synthetic data */
  size_t data_len;      /* their count (> 0 when data is set) */
  int *perm;            /* synthetic data: the successor of each token (a permutation of [0, V)) */
  size_t scratch_n;     /* floats of each scratch buffer: the most any initialized stage needs
                           (stage_scratch) */
  float *scr[3];        /* scratch buffers for the layers of a stage */
  int *tok;             /* scratch: B x S + 1 token ids */
  float *hbuf;          /* host scratch of hbuf_n floats: ids, targets or features before they go
                           to the device (rt_put) */
  size_t hbuf_n;        /* its floats: the larger of B x S + 1 and the model's input */
  rt_mem_use mem;       /* bytes the tracker counts now, by kind (rt_model_count) */
  rt_mem_use mem_peak;  /* the same at the high-water mark of the total */
  bool timing;          /* rt_model_time: record every layer call's and loss's seconds */
  msamples loss_timed;  /* the recorded rt_loss calls */
};

/* ---- Dimensions ---------------------------------------------------------------------------- */

/* Fill L->d from stream layer l at scale k with its kind's dims function (L->k set; tokens B
 * per microbatch, seq the stream's); prev_S and prev_w are what the layer receives. Returns
 * false with the reason in err. */
static bool layer_dims(const be_stream *s, const be_layer *l, int k, int prev_S, int prev_w,
                       bool first, mlayer *L, strbuf *err) {
  rt_ldims *d = &L->d;
  memset(d, 0, sizeof *d);
  d->B = s->micro_batch;
  d->act = RT_ACT_SILU; /* what kinds without an activation or a gate report */
  d->gated = true;
  rt_dims_in in = {s, l, k, prev_S, prev_w, first};
  if (L->k->dims(&in, d, err) != 0) return false;
  if (d->hidden < 0 || d->S < 0 || d->vocab < 0 || d->ffn < 0 || d->head_dim < 0 ||
      d->state < 0 || d->chunk < 0 || d->window < 0 || d->out_w < 0) {
    strbuf_printf(err, "too large at scale %d", k);
    return false;
  }
  /* The kernel's input is what its kind says (ids, the previous width, or the layer's own
   * width); an adapter fills it when the previous layer disagrees. */
  bool ids = L->k->role & RT_ROLE_IDS;
  L->prev_S = prev_S;
  L->prev_w = prev_w;
  L->splice = ids && prev_w > 0;
  L->adapt = !ids && prev_w > 0 && (prev_S != d->in_S || prev_w != d->in_w);
  if (L->splice && (prev_w != d->hidden || prev_S >= d->S)) {
    strbuf_printf(err,
                  "an embedding after other layers splices their %d tokens of width %d in front "
                  "of its %d tokens of width %d: it needs fewer tokens of the same width",
                  prev_S, prev_w, d->S, d->hidden);
    return false;
  }
  return true;
}

/* Whether d's size products stay within RT_MAX_WORK; else false with the reason in err. */
static bool layer_bounded(const rt_ldims *d, strbuf *err) {
  const int dims[] = {d->S, d->in_S, d->in_w, d->hidden, d->heads, d->kv_heads, d->head_dim,
                      d->ffn, d->experts, d->top_k, d->shared, d->state, d->groups, d->conv,
                      d->inner, d->chunk, d->vocab, d->out_w};
  double big = 1;
  for (size_t i = 0; i < sizeof dims / sizeof *dims; i++)
    if (dims[i] > big) big = dims[i];
  double work = (d->B > 1 ? d->B : 1) * big * big * big;
  if (work < RT_MAX_WORK) return true;
  strbuf_printf(err, "too large for the runtime: %d sequence%s x its largest dimension %.0f cubed "
                "is %.3g, above 2^57", d->B, d->B == 1 ? "" : "s", big, work);
  return false;
}

/* a + b, or SIZE_MAX when the sum does not fit (sizes the memory check then refuses). */
static size_t sat_add(size_t a, size_t b) { return a > SIZE_MAX - b ? SIZE_MAX : a + b; }

/* Build every layer at scale k into m->layers (allocated by the caller). Returns false with
 * "layer NAME (KIND): reason" in err. */
static bool build_layers(rt_model *m, const be_stream *s, int k, strbuf *err) {
  int prev_S = 0, prev_w = 0;
  for (int i = 0; i < s->nlayers; i++) {
    const be_layer *l = &s->layers[i];
    mlayer *L = &m->layers[i];
    memset(L, 0, sizeof *L);
    L->name = l->name ? l->name : "?";
    int kind = be_layer_kind(l);
    L->k = kind < 0 ? NULL : rt_kernels[kind];
    strbuf why = {0};
    bool ok = L->k != NULL;
    if (!ok) strbuf_printf(&why, "the runtime has no kernels for this kind");
    ok = ok && layer_dims(s, l, k, prev_S, prev_w, i == 0, L, &why);
    ok = ok && layer_bounded(&L->d, &why) && L->k->plan(&L->d, &L->p, &why) == 0;
    if (!ok) {
      strbuf_printf(err, "layer %s (%s): %s", L->name, l->kind ? l->kind : "?",
                    strbuf_cstr(&why));
      strbuf_free(&why);
      return false;
    }
    strbuf_free(&why);
    L->nw = rt_lplan_params(&L->p);
    prev_S = L->d.S;
    prev_w = L->p.out_w;
  }
  m->tie_src = m->tie_head = -1;
  int src, head;
  if (be_stream_tie(s, &src, &head)) { /* the copies: same shape, the table's whole plan */
    const mlayer *E = &m->layers[src], *H = &m->layers[head];
    if (!H->d.tied || E->d.vocab != H->d.vocab || E->d.hidden != H->d.hidden ||
        E->p.npt != 1 || E->nw > H->nw) {
      strbuf_printf(err, "layer %s (lm_head): tied = true, but its matrix (%d x %d at scale %d) "
                    "is not the shape of layer %s's table (%d x %d)", H->name, H->d.vocab,
                    H->d.hidden, k, E->name, E->d.vocab, E->d.hidden);
      return false;
    }
    m->tie_src = src;
    m->tie_head = head;
  }
  return true;
}

/* The floats of the tied matrix and its offset in the tied head's parameters (its last tensor). */
static size_t tie_floats(const rt_model *m) { return m->layers[m->tie_src].nw; }
static size_t tie_off(const rt_model *m) {
  return m->layers[m->tie_head].nw - tie_floats(m);
}

/* The initial generator of layer i's parameters. */
static uint64_t layer_seed(const rt_model *m, int i) {
  return rt_mix64(m->seed ^ ((uint64_t)(i + 1) * 0xd1b54a32d192ed03ULL));
}

/* Floating-point operations of one training step of the model as built (F + B + W ~ 3 x F;
 * each kind's forward, rt_kernel.flops). */
static double step_flops(const rt_model *m) {
  double f = 0;
  for (int i = 0; i < m->nlayers; i++) {
    const mlayer *L = &m->layers[i];
    f += L->k->flops(&L->d, (double)L->nw);
  }
  return 3 * f * m->nmb * m->replicas;
}

/* ---- Construction -------------------------------------------------------------------------- */

/* Bytes of the model's data and token buffers: the data file, the synthetic successor
 * permutation, the token ids of a microbatch and their host staging buffer (hbuf). */
static double model_data_bytes(const rt_model *m) {
  return (double)m->data_len + (double)m->V * sizeof(int) +
         ((double)m->B * m->S + 1) * sizeof(int) + (double)m->hbuf_n * sizeof(float);
}

/* Bytes rt_loss holds while it runs: the rows' losses and targets on the device, the losses on
 * the host. */
static double loss_bytes(const rt_model *m) { return (double)m->B * m->S * (3 * 4 + 8); }

/* Choose the scale: o->scale, or (0) the smallest power of two whose step fits RT_AUTO_FLOPS. */
static bool choose_scale(rt_model *m, const be_stream *s, const rt_opts *o, strbuf *err) {
  if (o->scale > 0) {
    m->scale = o->scale;
    return build_layers(m, s, o->scale, err);
  }
  strbuf why = {0};
  for (int k = 1; k <= RT_AUTO_MAX; k *= 2) {
    strbuf_free(&why);
    if (build_layers(m, s, k, &why) && step_flops(m) <= RT_AUTO_FLOPS) {
      m->scale = k;
      strbuf_free(&why);
      return true;
    }
  }
  strbuf_printf(err, "no scale up to %d runs this model on a CPU (%s)", RT_AUTO_MAX,
                why.len ? strbuf_cstr(&why) : "too much work per step");
  strbuf_free(&why);
  return false;
}

rt_model *rt_model_new(const be_stream *s, const rt_opts *o, strbuf *err) {
  if (o->scale < 0) {
    strbuf_printf(err, "scale must be at least 1 (got %d)", o->scale);
    return NULL;
  }
  if (!rt_stream_check(s, err)) return NULL;
  if (s->dropout) {
    strbuf_puts(err, "dropout = true (train field dropout) is not supported: the runtime trains "
                     "without dropout");
    return NULL;
  }
  rt_model *m = xcalloc(1, sizeof *m);
  m->nlayers = s->nlayers;
  m->nstages = s->nstages;
  m->nmb = s->nmb;
  m->replicas = s->replicas < 1 ? 1 : s->replicas;
  m->B = s->micro_batch;
  m->adam = s->optimizer && strcmp(s->optimizer, "adam") == 0;
  m->lr = o->lr;
  m->seed = o->seed;
  m->dump = o->dump;
  m->layers = xcalloc((size_t)m->nlayers, sizeof *m->layers);
  if (!choose_scale(m, s, o, err)) {
    rt_model_free(m);
    return NULL;
  }
  /* The data: the first embedding's sequence and vocabulary, else the lm_head's, else the
   * output's width; spliced positions carry no loss. */
  const mlayer *last = &m->layers[m->nlayers - 1];
  m->S = last->d.S;
  m->V = last->p.out_w;
  for (int i = m->nlayers - 1; i >= 0; i--)
    if (m->layers[i].k->role & RT_ROLE_VOCAB) m->V = m->layers[i].d.vocab;
  for (int i = m->nlayers - 1; i >= 0; i--)
    if (m->layers[i].k->role & RT_ROLE_IDS) {
      m->S = m->layers[i].d.S;
      m->V = m->layers[i].d.vocab;
      m->prefix = m->layers[i].splice ? m->layers[i].prev_S : 0;
    }
  if (last->d.S != m->S || (long long)m->B * m->S > RT_MAX_DIM) {
    strbuf_printf(err, "layer %s (%s): its output has %d tokens per sequence, the data %d",
                  last->name, rt_kernel_name(last->k), last->d.S, m->S);
    rt_model_free(m);
    return NULL;
  }
  if (o->data && !rt_data_read(o->data, &m->data, &m->data_len, err)) {
    rt_model_free(m);
    return NULL;
  }
  m->perm = rt_data_perm(m->V, m->seed);
  m->tok = xmalloc(((size_t)m->B * m->S + 1) * sizeof *m->tok);
  size_t nin = rt_tensor_floats(m, BE_T_INPUT, 0);
  m->hbuf_n = nin > (size_t)m->B * m->S + 1 ? nin : (size_t)m->B * m->S + 1;
  m->hbuf = xmalloc(m->hbuf_n * sizeof *m->hbuf);
  rt_model_count(m, RT_MEM_WORKSPACE, model_data_bytes(m));
  m->stages = xcalloc((size_t)m->nstages, sizeof *m->stages);
  for (int si = 0; si < m->nstages; si++) {
    mstage *st = &m->stages[si];
    st->first = s->stages[si].first;
    st->end = s->stages[si].end;
    st->recompute = s->stages[si].recompute && !o->no_recompute;
    size_t p = 0, q = 0, k = 0; /* parameters, block, kept buffer */
    for (int i = st->first; i < st->end; i++) {
      mlayer *L = &m->layers[i];
      L->w_off = p;
      p = sat_add(p, L->nw);
      /* The stage's first recompute_layers recomputable layers (all when 0), as the plan
       * charges them (be_stage_layer_recomputes, the IR's ir_stage_layer_recomputes). */
      L->rebuilt = st->recompute && rt_kernel_recomputable(L->k) &&
                   be_stage_layer_recomputes(s, &s->stages[si], i);
      if (L->rebuilt) {
        L->in_off = k;
        k = sat_add(k, (size_t)m->B * L->d.in_S * L->d.in_w);
      }
      if (st->recompute && !L->rebuilt) {
        L->sv_off = k;
        k = sat_add(k, L->p.save_floats);
      } else {
        L->sv_off = q;
        q = sat_add(q, L->p.save_floats);
      }
    }
    st->nparams = p;
    st->state_floats = q;
    st->kept_floats = k;
    st->saved = xcalloc((size_t)m->nmb, sizeof *st->saved);
  }
  if (m->dump) m->dumps = xcalloc((size_t)m->nlayers, sizeof *m->dumps);
  return m;
}

/* Free layer i's dump copies. */
static void dump_free(rt_model *m, int i) {
  mdump *D = &m->dumps[i];
  free(D->x);
  free(D->y);
  free(D->dy);
  free(D->dx);
  free(D->xs);
  free(D->dxs);
  memset(D, 0, sizeof *D);
}

void rt_model_free(rt_model *m) {
  if (!m) return;
  for (int si = 0; m->stages && si < m->nstages; si++) {
    mstage *st = &m->stages[si];
    for (int k = 0; k < m->nmb; k++) { /* the stream's buffers are the interpreter's */
      msaved *sv = &st->saved[k];
      if (!sv->ext || st->recompute) rt_dev_mfree(sv->buf);
      if (!sv->ext || !st->recompute) rt_dev_mfree(sv->kept);
    }
    free(st->saved);
    for (int k = 0; k < st->npool; k++) rt_dev_mfree(st->pool[k]);
    free(st->pool);
    for (int k = 0; k < st->nkpool; k++) rt_dev_mfree(st->kpool[k]);
    free(st->kpool);
    rt_dev_mfree(st->w);
    rt_dev_mfree(st->g);
    rt_dev_mfree(st->am);
    rt_dev_mfree(st->av);
  }
  for (int i = 0; m->dumps && i < m->nlayers; i++) dump_free(m, i);
  free(m->dumps);
  strbuf_free(&m->dump_err);
  free(m->stages);
  for (int i = 0; m->layers && i < m->nlayers; i++)
    for (int ph = 0; ph < RT_PHASES; ph++) free(m->layers[i].timed[ph].v);
  free(m->loss_timed.v);
  free(m->layers);
  free(m->data);
  free(m->perm);
  for (int i = 0; i < 3; i++) rt_dev_mfree(m->scr[i]);
  free(m->tok);
  free(m->hbuf);
  free(m);
}

int rt_model_scale(const rt_model *m) { return m->scale; }

void rt_model_count(rt_model *m, rt_mem_kind k, double bytes) {
  m->mem.kind[k] += bytes;
  m->mem.total += bytes;
  if (m->mem.total > m->mem_peak.total) m->mem_peak = m->mem;
}

void rt_model_peak(const rt_model *m, rt_mem_use *peak) { *peak = m->mem_peak; }

size_t rt_model_bytes(const rt_model *m) { return (size_t)m->mem.total; }

static mstage *stage_of(rt_model *m, int st);

void rt_model_use_state(rt_model *m, int st_i, int mb, float *buf) {
  if (st_i < 0 || st_i >= m->nstages || mb < 0 || mb >= m->nmb || !buf) return;
  mstage *st = stage_of(m, st_i);
  msaved *sv = &st->saved[mb];
  if (sv->f_done) return; /* an F in flight: precondition broken */
  if (st->recompute) {
    if (sv->kept && !sv->ext) VEC_PUSH(st->kpool, st->nkpool, st->kpool_cap, sv->kept);
    sv->kept = buf;
  } else {
    if (sv->buf && !sv->ext) VEC_PUSH(st->pool, st->npool, st->pool_cap, sv->buf);
    sv->buf = buf;
  }
  sv->ext = true;
}

void rt_model_move_state(rt_model *m, int st_i, int mb, float *buf) {
  if (st_i < 0 || st_i >= m->nstages || mb < 0 || mb >= m->nmb || !buf) return;
  mstage *st = stage_of(m, st_i);
  msaved *sv = &st->saved[mb];
  if (!sv->ext) return; /* the model's own blocks hold it */
  if (st->recompute) sv->kept = buf;
  else sv->buf = buf;
}

/* ---- The buffer arena of a rank (rt_arena), the interpreter's and the memory plan's ---- */

void rt_slot_floats(const be_stream *s, int rank, const rt_model *m, size_t *floats) {
  const be_program *p = &s->ranks[rank];
  for (int pc = 0; pc < p->ncode; pc++)
    for (int k = 0; k < be_ops[p->code[pc].op].nops; k++) {
      be_tensor_ref t;
      if (!be_operand_tensor(s, &p->code[pc], k, &t)) continue;
      size_t n = rt_tensor_floats(m, t.kind, t.stage);
      int slot = p->code[pc].a[k];
      if (n > floats[slot]) floats[slot] = n;
    }
}

/* A slot in the order of the runtime's layout: by the stream's offset, then by index. */
typedef struct arena_key {
  uint64_t offset; /* the stream's offset */
  int slot;        /* its index */
} arena_key;
static int arena_cmp(const void *a, const void *b) {
  const arena_key *x = a, *y = b;
  if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
  return (x->slot > y->slot) - (x->slot < y->slot);
}

/* A placed range [lo, hi) of the runtime's layout. */
typedef struct arena_range {
  uint64_t lo, hi; /* bytes */
} arena_range;
static int range_cmp(const void *a, const void *b) {
  const arena_range *x = a, *y = b;
  return x->lo < y->lo ? -1 : x->lo > y->lo;
}

bool rt_arena(const be_stream *s, int rank, const rt_model *m, uint64_t *off, double *bytes) {
  const be_program *p = &s->ranks[rank];
  int n = p->nslots;
  size_t *floats = xcalloc((size_t)(n ? n : 1), sizeof *floats);
  rt_slot_floats(s, rank, m, floats);
  bool plan = s->scale == rt_model_scale(m);
  double end = 0;
  for (int i = 0; i < n; i++) {
    const be_slot *sl = &p->slots[i];
    if ((double)floats[i] * sizeof(float) > (double)sl->bytes || sl->offset % sizeof(float))
      plan = false;
    if ((double)sl->offset + (double)sl->bytes > end) end = (double)sl->offset + (double)sl->bytes;
  }
  if (plan) { /* the stream's own layout */
    for (int i = 0; i < n; i++) off[i] = p->slots[i].offset;
    *bytes = end;
    free(floats);
    return true;
  }
  /* First fit of the runtime's sizes, in the order of the stream's offsets: slot i avoids every
   * placed slot j whose stream range is disjoint from its own (the stream lets those be live at
   * the same time; overlapping ones never are). */
  arena_key *order = xcalloc((size_t)(n ? n : 1), sizeof *order);
  for (int i = 0; i < n; i++) order[i] = (arena_key){p->slots[i].offset, i};
  qsort(order, (size_t)n, sizeof *order, arena_cmp);
  arena_range *busy = xcalloc((size_t)(n ? n : 1), sizeof *busy);
  bool *placed = xcalloc((size_t)(n ? n : 1), sizeof *placed);
  end = 0;
  for (int k = 0; k < n; k++) {
    int i = order[k].slot;
    uint64_t size = ((uint64_t)floats[i] * sizeof(float) + 63) / 64 * 64;
    off[i] = 0;
    if (size == 0) continue;
    const be_slot *a = &p->slots[i];
    int nb = 0;
    for (int j = 0; j < n; j++) {
      const be_slot *b = &p->slots[j];
      bool share = a->offset < b->offset + b->bytes && b->offset < a->offset + a->bytes;
      if (!placed[j] || share) continue;
      uint64_t sj = ((uint64_t)floats[j] * sizeof(float) + 63) / 64 * 64;
      busy[nb++] = (arena_range){off[j], off[j] + sj};
    }
    qsort(busy, (size_t)nb, sizeof *busy, range_cmp);
    uint64_t at = 0;
    for (int q = 0; q < nb && busy[q].lo < at + size; q++)
      if (busy[q].hi > at) at = busy[q].hi;
    off[i] = at;
    placed[i] = true;
    if ((double)(at + size) > end) end = (double)(at + size);
  }
  *bytes = end;
  free(order);
  free(busy);
  free(placed);
  free(floats);
  return false;
}

double rt_wstash_peak(const be_stream *s, int rank, const rt_model *m) {
  const be_program *p = &s->ranks[rank];
  double *held = xcalloc((size_t)(p->nslots ? p->nslots : 1), sizeof *held), live = 0, peak = 0;
  for (int pc = 0; pc < p->ncode; pc++) {
    const be_inst *in = &p->code[pc];
    /* a WSTASH buffer: FWD's, or one RELOAD fills (an offloading stage's, back before B) */
    bool reload = in->op == BE_OP_RELOAD && in->a[1] == BE_T_WSTASH;
    int slot = in->op == BE_OP_FWD ? in->a[5] : in->op == BE_OP_FREE || reload ? in->a[0] : -1;
    int stage = reload ? in->a[2] : in->a[0];
    if (slot < 0 || slot >= p->nslots) continue;
    live -= held[slot];
    held[slot] = (in->op == BE_OP_FWD || reload) && stage >= 0 && stage < s->nstages
                     ? (double)rt_tensor_floats(m, BE_T_WSTASH, stage) * sizeof(float)
                     : 0;
    live += held[slot];
    if (live > peak) peak = live;
  }
  free(held);
  return peak;
}

/* Floats of each of the three scratch buffers stage st needs (stage_forward and
 * rt_backward_input): the tensors between its layers, a spliced embedding's ids, an adapter's
 * input; not its first layer's input nor its last layer's output, which are the caller's, but
 * that output when the forward runs again without one (recomputation). */
static size_t stage_scratch(const rt_model *m, const mstage *st) {
  size_t need = 0, B = (size_t)m->B;
  for (int i = st->first; i < st->end; i++) {
    const mlayer *L = &m->layers[i];
    size_t in = B * L->d.in_S * L->d.in_w, out = B * L->d.S * L->p.out_w;
    size_t prev = B * (size_t)L->prev_S * L->prev_w;
    bool last = i == st->end - 1, first = i == st->first;
    size_t uses[] = {
        !last || st->recompute ? out : 0,    /* its output, when not the stage's */
        L->splice ? in : 0,                  /* a spliced embedding's ids, */
        L->splice ? prev : 0,                /* the spliced tokens' gradient, */
        L->splice ? out : 0,                 /* a copy of its output's gradient */
        L->adapt ? in : 0,                   /* an adapter's input (and its gradient) */
        L->adapt && !first ? prev : 0,       /* the adapter's input gradient */
        i > 0 && (!first || L->adapt) ? in : 0, /* the layer's input gradient */
    };
    for (size_t u = 0; u < sizeof uses / sizeof *uses; u++)
      if (uses[u] > need) need = uses[u];
  }
  return need;
}

void rt_rank_memory(const rt_model *m, const be_stream *s, int rank, bool check,
                    rt_mem_need *out) {
  memset(out, 0, sizeof *out);
  const be_program *p = &s->ranks[rank];
  const double f = sizeof(float), opt = m->adam ? 2 : 0;
  /* Saved state the stream has no buffer for (private blocks): per stage whose F names no
   * WSTASH buffer, the most microbatches between its F and its W at once; for a recomputing
   * stage, its blocks: the most between its B and its W (one more while F or a fused B runs),
   * and, without a WSTASH buffer, the most kept buffers between its F and its W. */
  int ns = m->nstages;
  int *live = xcalloc((size_t)ns, sizeof *live), *peak = xcalloc((size_t)ns, sizeof *peak);
  int *live_in = xcalloc((size_t)ns, sizeof *live_in), *peak_in = xcalloc((size_t)ns,
                                                                         sizeof *peak_in);
  bool *ext = xcalloc((size_t)ns, sizeof *ext), *noext = xcalloc((size_t)ns, sizeof *noext);
  for (int pc = 0; pc < p->ncode; pc++) {
    const be_inst *in = &p->code[pc];
    int st = in->a[0];
    if (in->op != BE_OP_FWD && in->op != BE_OP_BWD_IN && in->op != BE_OP_BWD_W &&
        in->op != BE_OP_BWD)
      continue;
    if (st < 0 || st >= ns) continue;
    if (in->op == BE_OP_FWD && in->a[5] >= 0 && in->a[5] < p->nslots)
      ext[st] = true;
    else if (in->op == BE_OP_FWD)
      noext[st] = true;
    if (!m->stages[st].recompute) {
      if (in->op == BE_OP_BWD_IN) continue;
      live[st] += in->op == BE_OP_FWD ? 1 : -1;
    } else if (in->op == BE_OP_BWD_W) {
      live[st]--;
    } else {
      live[st]++; /* F's or B's block */
      if (in->op == BE_OP_FWD) live_in[st]++;
    }
    if (live[st] > peak[st]) peak[st] = live[st];
    if (live_in[st] > peak_in[st]) peak_in[st] = live_in[st];
    if (m->stages[st].recompute && (in->op == BE_OP_FWD || in->op == BE_OP_BWD))
      live[st]--; /* F's block goes back to the pool; a fused B's with its W */
    if (m->stages[st].recompute && (in->op == BE_OP_BWD_W || in->op == BE_OP_BWD))
      live_in[st]--; /* the kept buffer, at the end of W */
  }
  double all_params = 0, all_state = 0;
  size_t scratch = 0, all_scratch = 0;
  for (int si = 0; si < m->nstages; si++) {
    const mstage *st = &m->stages[si];
    all_params += (double)st->nparams;
    for (int i = st->first; i < st->end; i++) /* the reference keeps every layer's state */
      all_state += (double)m->layers[i].p.save_floats;
    size_t need = stage_scratch(m, st);
    if (need > all_scratch) all_scratch = need;
    if (s->stages[si].rank != rank) continue;
    if (need > scratch) scratch = need;
    out->params += (double)st->nparams * f;
    bool in_stream = ext[si] && !noext[si]; /* every F of the stage names a WSTASH buffer */
    if (st->recompute || !in_stream) out->state += (double)peak[si] * (double)st->state_floats * f;
    if (st->recompute && !in_stream) out->state += (double)peak_in[si] * (double)st->kept_floats * f;
  }
  free(live);
  free(peak);
  free(live_in);
  free(peak_in);
  free(ext);
  free(noext);
  out->grads = out->params;
  out->optim = opt * out->params;
  /* The arena, of which the WSTASH buffers' peak is saved state. */
  uint64_t *off = xcalloc((size_t)(p->nslots ? p->nslots : 1), sizeof *off);
  double arena = 0, held = rt_wstash_peak(s, rank, m);
  rt_arena(s, rank, m, off, &arena);
  free(off);
  out->state += held;
  out->buffers = arena > held ? arena - held : 0;
  double tok = model_data_bytes(m);
  out->workspace = 3 * (double)(scratch ? scratch : 1) * f + tok; /* as init_stage allocates */
  if (s->stages[ns - 1].rank == rank) out->workspace += loss_bytes(m); /* while LOSS runs */
  if (check) {
    /* Its model, one saved block per stage, and rt_reference_step's buffers: the input, every
     * stage's output, two gradients and, with replicas, a second copy of the gradients. */
    double big = 1;
    for (int si = 0; si < m->nstages; si++)
      if ((double)rt_tensor_floats(m, BE_T_ACT, si) > big)
        big = (double)rt_tensor_floats(m, BE_T_ACT, si);
    out->reference = all_params * f * (2 + opt + (m->replicas > 1)) + all_state * f +
                     3 * (double)all_scratch * f + tok + loss_bytes(m) +
                     ((double)rt_tensor_floats(m, BE_T_INPUT, 0) + (m->nstages + 2) * big) * f;
  }
  out->total = out->params + out->grads + out->optim + out->state + out->buffers +
               out->workspace + out->reference;
}

void rt_model_set_step(rt_model *m, int step, int replica) {
  m->step = step;
  m->replica = replica;
}

void rt_model_init_stage(rt_model *m, int st_i) {
  if (st_i < 0 || st_i >= m->nstages) return;
  mstage *st = &m->stages[st_i];
  if (st->init) return;
  size_t need = stage_scratch(m, st); /* the scratch buffers grow to the stage's need */
  if (need > m->scratch_n || !m->scr[0]) {
    if (need < 1) need = 1;
    if (need < m->scratch_n) need = m->scratch_n;
    rt_model_count(m, RT_MEM_WORKSPACE, 3 * ((double)need - (double)m->scratch_n) * sizeof(float));
    for (int k = 0; k < 3; k++) {
      rt_dev_mfree(m->scr[k]);
      m->scr[k] = rt_dev_malloc(need * sizeof *m->scr[k]);
    }
    m->scratch_n = need;
  }
  st->w = rt_dev_malloc(st->nparams * sizeof *st->w);
  st->g = rt_dev_malloc(st->nparams * sizeof *st->g);
  if (m->adam) {
    st->am = rt_dev_malloc(st->nparams * sizeof *st->am);
    st->av = rt_dev_malloc(st->nparams * sizeof *st->av);
  }
  rt_model_count(m, RT_MEM_STATIC, (double)st->nparams * sizeof(float) * (m->adam ? 4 : 2));
  st->b1t = st->b2t = 1.0;
  /* generated on the host (the same values on every device), then copied to the model's */
  float *w = rt_dev_current() ? xmalloc((st->nparams ? st->nparams : 1) * sizeof *w) : st->w;
  for (int i = st->first; i < st->end; i++) {
    const mlayer *L = &m->layers[i];
    rt_kernel_init_params(&L->p, layer_seed(m, i), w + L->w_off);
    if (i == m->tie_head) /* the copy starts as the table does, on whichever rank */
      rt_kernel_init_params(&m->layers[m->tie_src].p, layer_seed(m, m->tie_src),
                            w + L->w_off + tie_off(m));
  }
  if (w != st->w) {
    rt_put(st->w, w, st->nparams * sizeof *w);
    free(w);
  }
  st->init = true;
}

/* Stage st, initialized on first use (init is deterministic and idempotent). */
static mstage *stage_of(rt_model *m, int st) {
  rt_model_init_stage(m, st);
  return &m->stages[st];
}

size_t rt_tensor_floats(const rt_model *m, be_tensor_kind k, int stage) {
  const mlayer *L0 = &m->layers[0];
  switch (k) {
  case BE_T_INPUT: return (size_t)m->B * L0->d.in_S * L0->d.in_w;
  case BE_T_ACT:
    if (stage < 0 || stage >= m->nstages) return 0;
    return (size_t)m->B * m->layers[m->stages[stage].end - 1].d.S *
           m->layers[m->stages[stage].end - 1].p.out_w;
  case BE_T_GRAD:
    if (stage < 1 || stage > m->nstages) return 0;
    return rt_tensor_floats(m, BE_T_ACT, stage - 1);
  case BE_T_WSTASH:
    if (stage < 0 || stage >= m->nstages) return 0;
    return m->stages[stage].recompute ? m->stages[stage].kept_floats
                                      : m->stages[stage].state_floats;
  default: return 0;
  }
}

/* ---- Data ---------------------------------------------------------------------------------- */

/* Token at stream position p: the data file's byte, or the synthetic chain (a random start per
 * sequence, then each token's successor in the permutation). */
static int token_at(const rt_model *m, uint64_t p) {
  if (m->data) return m->data[p % m->data_len] % m->V;
  uint64_t start = p - p % (uint64_t)m->S;
  int t = (int)(rt_mix64(rt_mix64(m->seed ^ 0x5345515354415254ULL) ^ rt_mix64(start)) % (uint64_t)m->V);
  for (uint64_t q = start; q < p; q++) t = m->perm[t];
  return t;
}

/* Tokens of stream positions p .. p + n - 1 into out. */
static void tokens_from(const rt_model *m, uint64_t p, int n, int *out) {
  for (int i = 0; i < n; i++) {
    uint64_t q = p + (uint64_t)i;
    if (i == 0 || m->data || q % (uint64_t)m->S == 0) out[i] = token_at(m, q);
    else out[i] = m->perm[out[i - 1]];
  }
}

/* Stream position of token 0 of (step, replica, mb). */
static uint64_t mb_pos(const rt_model *m, int step, int replica, int mb) {
  return (((uint64_t)step * (uint64_t)m->replicas + (uint64_t)replica) * (uint64_t)m->nmb +
          (uint64_t)mb) * (uint64_t)m->B * (uint64_t)m->S;
}

/* Token ids of microbatch mb of the current step and replica as floats into ids (B x S, on the
 * current device). */
static void load_ids(rt_model *m, int step, int replica, int mb, float *ids) {
  int T = m->B * m->S;
  tokens_from(m, mb_pos(m, step, replica, mb), T, m->tok);
  for (int i = 0; i < T; i++) m->hbuf[i] = (float)m->tok[i];
  rt_put(ids, m->hbuf, (size_t)T * sizeof *ids);
}

void rt_load(rt_model *m, int step, int replica, int mb, float *in) {
  const mlayer *L0 = &m->layers[0];
  if (L0->k->role & RT_ROLE_IDS) {
    load_ids(m, step, replica, mb, in);
    return;
  }
  /* Dense features (e.g. embedded image patches), uniform in [-1, 1) from the position. */
  size_t n = rt_tensor_floats(m, BE_T_INPUT, 0);
  uint64_t st = rt_mix64(m->seed ^ 0x494d414745ULL ^ rt_mix64(mb_pos(m, step, replica, mb) + 1));
  for (size_t i = 0; i < n; i++)
    m->hbuf[i] = (float)((double)(rt_next64(&st) >> 11) * 0x1p-52 - 1.0);
  rt_put(in, m->hbuf, n * sizeof *in);
}

/* ---- Forward and loss ---------------------------------------------------------------------- */

/* Adapter: a tensor of B sequences of prev_S tokens of width prev_w into one of in_S tokens of
 * width in_w, keeping each sequence's last tokens and the first columns (zeros where none). */
static void adapt_fwd(const rt_model *m, const mlayer *L, const float *in, float *out) {
  RT_FOR(model_adapt_fwd, (size_t)m->B * L->d.in_S * L->d.in_w, .S0 = L->prev_S, .w0 = L->prev_w,
         .S1 = L->d.in_S, .w1 = L->d.in_w, .src = in, .dst = out);
}

/* Its transpose: the gradient of the adapter's input from that of its output. */
static void adapt_bwd(const rt_model *m, const mlayer *L, const float *dout, float *din) {
  RT_FOR(model_adapt_bwd, (size_t)m->B * L->prev_S * L->prev_w, .S0 = L->prev_S, .w0 = L->prev_w,
         .S1 = L->d.in_S, .w1 = L->d.in_w, .src = dout, .dst = din);
}

/* A scratch buffer that is neither a nor b. */
static float *other_scr(rt_model *m, const float *a, const float *b) {
  for (int i = 0; i < 3; i++)
    if (m->scr[i] != a && m->scr[i] != b) return m->scr[i];
  return NULL;
}

/* A host copy of n floats of a (on the current device), for --dump. */
static float *dup_floats(const float *a, size_t n) {
  float *c = xmalloc((n ? n : 1) * sizeof *c);
  rt_to_host(c, a, n * sizeof *c);
  return c;
}

/* Whether microbatch mb of the current step is the one --dump writes. */
static bool dumping(const rt_model *m, int mb) {
  return m->dump && m->step == 0 && m->replica == 0 && mb == 0 && !m->dump_err.len;
}

/* Where a recorded call starts (rt_model_time): the clock after the device's queue drained; 0
 * when m is not recording. */
static double time_begin(const rt_model *m) {
  if (!m->timing) return 0;
  rt_sync();
  return support_seconds();
}

/* End a recorded call that began at t0 (time_begin): its seconds, after the device's queue
 * drained, go to s. Nothing when m is not recording. */
static void time_end(const rt_model *m, msamples *s, double t0) {
  if (!m->timing) return;
  rt_sync();
  double t = support_seconds() - t0;
  VEC_PUSH(s->v, s->n, s->cap, t);
}

/* A state block of stage st: one of its pool, else a new one (counted as rebuilt state for a
 * recomputing stage, which the plan counts, else as private saved state). */
static float *block_take(rt_model *m, mstage *st) {
  if (st->npool) return st->pool[--st->npool];
  size_t n = st->state_floats ? st->state_floats : 1; /* never NULL: buf marks a state in flight */
  rt_model_count(m, st->recompute ? RT_MEM_REBUILT : RT_MEM_PRIVATE, (double)n * sizeof(float));
  return rt_dev_malloc(n * sizeof(float));
}

/* Where layer L of stage st keeps its saved state: in 'block', or for a layer of a recomputing
 * stage that is not rebuilt, in the stage's kept buffer 'kept'. */
static float *state_of(const mstage *st, const mlayer *L, float *block, float *kept) {
  return st->recompute && !L->rebuilt ? kept + L->sv_off : block + L->sv_off;
}

/* The forward of stage st on microbatch mb: in -> out (the last layer writes it directly),
 * filling the state block 'state' with what B and W need; a recomputing stage (kept: its kept
 * buffer) also copies each rebuilt layer's input into kept and writes the other layers' state
 * there. Deterministic: run again on the same input with the same weights a layer writes the
 * same state and output bit for bit, which is what recomputation relies on. */
static void stage_forward(rt_model *m, mstage *st, int mb, const float *in, float *out,
                          float *state, float *kept) {
  const float *cur = in;
  for (int i = st->first; i < st->end; i++) {
    mlayer *L = &m->layers[i];
    double t0 = time_begin(m);
    const float *x = cur;
    if (L->splice) {
      float *ids = other_scr(m, cur, NULL);
      load_ids(m, m->step, m->replica, mb, ids);
      x = ids;
    } else if (L->adapt) {
      float *a = other_scr(m, cur, NULL);
      adapt_fwd(m, L, cur, a);
      x = a;
    }
    /* the last layer writes the stage's output directly (stage_scratch counts on it) */
    float *y = i == st->end - 1 && out ? out : other_scr(m, cur, x);
    if (L->rebuilt) rt_copy(kept + L->in_off, x, (size_t)m->B * L->d.in_S * L->d.in_w);
    L->k->fwd(&L->d, st->w + L->w_off, x, y, state_of(st, L, state, kept));
    if (L->splice) { /* the previous layers' tokens come first in each sequence */
      long n = (long)L->prev_S * L->prev_w;
      RT_FOR(model_splice_fwd, (size_t)m->B * n, .n = n, .stride = (long)L->d.S * L->d.hidden,
             .a = (float *)cur, .b = y);
    }
    if (dumping(m, mb)) { /* the layer's output as the next layer sees it: after the splice */
      dump_free(m, i);
      m->dumps[i].x = dup_floats(x, (size_t)m->B * L->d.in_S * L->d.in_w);
      m->dumps[i].y = dup_floats(y, (size_t)m->B * L->d.S * L->p.out_w);
      if (L->splice) m->dumps[i].xs = dup_floats(cur, (size_t)m->B * L->prev_S * L->prev_w);
    }
    time_end(m, &L->timed[RT_PH_F], t0);
    cur = y;
  }
}

void rt_forward(rt_model *m, int st_i, int mb, const float *in, float *out) {
  if (st_i < 0 || st_i >= m->nstages || mb < 0 || mb >= m->nmb) return;
  mstage *st = stage_of(m, st_i);
  msaved *sv = &st->saved[mb];
  sv->f_done = true;
  sv->b_done = false;
  if (!st->recompute) {
    if (!sv->buf) sv->buf = block_take(m, st);
    stage_forward(m, st, mb, in, out, sv->buf, NULL);
    return;
  }
  /* Recomputation: the kept buffer takes the rebuilt layers' inputs and the others' state; the
   * rebuilt layers' state block goes back to the pool (B rebuilds it). */
  if (!sv->kept && st->nkpool) {
    sv->kept = st->kpool[--st->nkpool];
  } else if (!sv->kept) {
    rt_model_count(m, RT_MEM_PRIVATE, (double)st->kept_floats * sizeof(float));
    sv->kept = rt_dev_malloc(st->kept_floats * sizeof *sv->kept);
  }
  float *blk = block_take(m, st);
  stage_forward(m, st, mb, in, out, blk, sv->kept);
  VEC_PUSH(st->pool, st->npool, st->pool_cap, blk);
}

/* Before B of a recomputing stage: rebuild the state of mb's rebuilt layers into a block by
 * running each one's forward again from its kept input (their outputs are not needed; the
 * other layers' state is still in the kept buffer). No-op for other stages, when it was rebuilt
 * already, or without an F. Counted in neither F's nor B's recorded time (rt_model_time). */
static void rebuild_state(rt_model *m, mstage *st, int mb) {
  msaved *sv = &st->saved[mb];
  if (!st->recompute || sv->buf || !sv->kept || !sv->f_done) return;
  sv->buf = block_take(m, st);
  for (int i = st->first; i < st->end; i++) {
    const mlayer *L = &m->layers[i];
    if (L->rebuilt)
      L->k->fwd(&L->d, st->w + L->w_off, sv->kept + L->in_off, other_scr(m, NULL, NULL),
                sv->buf + L->sv_off);
  }
}

/* The factor of the loss's gradient: 1 / (positions with a loss in a microbatch x microbatches x
 * replicas), so that the step's gradient is that of the mean loss over all of them. */
static double loss_scale(const rt_model *m) {
  return 1.0 / ((double)m->B * (m->S - m->prefix) * m->nmb * m->replicas);
}

/* --dump: write the targets of the dumped microbatch (host ids tok of T positions, C classes) as
 * DIR/targets.npy, -1 where a position has no loss; a failure goes to m->dump_err. */
static void dump_targets(rt_model *m, const int *tok, int T, int C) {
  int32_t *t = xmalloc((size_t)T * sizeof *t);
  for (int r = 0; r < T; r++) t[r] = r % m->S < m->prefix ? -1 : tok[r] % C;
  strbuf path = {0};
  strbuf_printf(&path, "%s/targets.npy", m->dump);
  int64_t dim[1] = {T};
  rt_npy_write_i32(strbuf_cstr(&path), t, 1, dim, &m->dump_err);
  strbuf_free(&path);
  free(t);
}

double rt_loss(rt_model *m, int step, int replica, int mb, const float *out, float *grad) {
  double t0 = time_begin(m);
  int S = m->S, C = m->layers[m->nlayers - 1].p.out_w, T = m->B * S;
  tokens_from(m, mb_pos(m, step, replica, mb) + 1, T, m->tok);
  for (int r = 0; r < T; r++) m->hbuf[r] = (float)(m->tok[r] % C);
  if (m->dump && step == 0 && replica == 0 && mb == 0 && !m->dump_err.len)
    dump_targets(m, m->tok, T, C);
  int counted = m->B * (S - m->prefix);
  /* the targets and the rows' losses on the device */
  float *target = rt_scratch((size_t)T);
  double *row_loss = rt_scratch_bytes((size_t)T * sizeof *row_loss);
  double *loss = xmalloc((size_t)T * sizeof *loss);
  rt_put(target, m->hbuf, (size_t)T * sizeof *target);
  rt_model_count(m, RT_MEM_WORKSPACE, loss_bytes(m));
  RT_FOR(model_loss, T, .S = S, .C = C, .prefix = m->prefix, .out = out, .target = target,
         .grad = grad, .loss = row_loss, .scale = loss_scale(m));
  rt_to_host(loss, row_loss, (size_t)T * sizeof *loss);
  rt_scratch_free(target);
  rt_scratch_free(row_loss);
  rt_model_count(m, RT_MEM_WORKSPACE, -loss_bytes(m));
  double total = 0;
  for (int r = 0; r < T; r++) total += loss[r]; /* in row order, as one loop would */
  free(loss);
  time_end(m, &m->loss_timed, t0);
  return total / counted;
}

/* ---- Backward ------------------------------------------------------------------------------ */

void rt_backward_input(rt_model *m, int st_i, int mb, const float *grad, float *dx) {
  if (st_i < 0 || st_i >= m->nstages || mb < 0 || mb >= m->nmb) return;
  mstage *st = stage_of(m, st_i);
  msaved *sv = &st->saved[mb];
  rebuild_state(m, st, mb); /* a recomputing stage: its rebuilt layers' forward again, first */
  if (!sv->buf) return; /* no forward: precondition broken */
  /* The gradient flows through the scratch buffers, read from the caller's grad and written
   * into its dx directly (stage_scratch counts on it). */
  const float *cur = grad;
  float *cur_scr = NULL; /* cur when it is a scratch buffer (writable) */
  for (int i = st->end - 1; i >= st->first; i--) {
    mlayer *L = &m->layers[i];
    double t0 = time_begin(m);
    bool first = i == st->first, need = i > 0 && (!first || dx);
    float *dprev = NULL;
    if (L->splice) {
      /* the spliced tokens' gradient goes back; the table's rows see the rest */
      float *gc = cur_scr;
      if (!gc) {
        gc = other_scr(m, NULL, NULL);
        rt_copy(gc, cur, (size_t)m->B * L->d.S * L->p.out_w);
      }
      dprev = first && dx ? dx : other_scr(m, gc, NULL);
      long n = (long)L->prev_S * L->prev_w;
      if (dumping(m, mb)) m->dumps[i].dy = dup_floats(gc, (size_t)m->B * L->d.S * L->p.out_w);
      RT_FOR(model_splice_bwd, (size_t)m->B * n, .n = n, .stride = (long)L->d.S * L->d.hidden,
             .a = dprev, .b = gc);
      if (dumping(m, mb)) m->dumps[i].dxs = dup_floats(dprev, (size_t)m->B * n);
      cur = gc;
      L->k->bwd_in(&L->d, st->w + L->w_off, state_of(st, L, sv->buf, sv->kept), cur, NULL);
    } else {
      float *dk = !need ? NULL : first && !L->adapt ? dx : other_scr(m, cur, NULL);
      L->k->bwd_in(&L->d, st->w + L->w_off, state_of(st, L, sv->buf, sv->kept), cur, dk);
      if (dk && L->adapt) {
        dprev = first ? dx : other_scr(m, cur, dk);
        adapt_bwd(m, L, dk, dprev);
      } else {
        dprev = dk;
      }
      if (dumping(m, mb)) {
        m->dumps[i].dx = dk ? dup_floats(dk, (size_t)m->B * L->d.in_S * L->d.in_w) : NULL;
        m->dumps[i].dy = dup_floats(cur, (size_t)m->B * L->d.S * L->p.out_w);
      }
    }
    time_end(m, &L->timed[RT_PH_B], t0);
    cur = dprev;
    cur_scr = dprev != dx ? dprev : NULL;
    if (!cur) break;
  }
  if (dx && cur && cur != dx) rt_copy(dx, cur, rt_tensor_floats(m, BE_T_GRAD, st_i));
  sv->b_done = true;
}

/* Write layer i's dump (its copies, the stage's weights and this microbatch's gradient g, both on
 * the current device); a write that fails is kept in m->dump_err (rt_model_dump_error). */
static void dump_layer(rt_model *m, int i, const float *w, const float *g) {
  mlayer *L = &m->layers[i];
  mdump *D = &m->dumps[i];
  if (!D->x || !D->y || !D->dy) return;
  float *hw = dup_floats(w, L->nw), *hg = dup_floats(g, L->nw);
  rt_dump_tensors t = {D->x, D->y, D->dy, D->dx, hw, hg, D->xs, D->dxs, L->prev_S, L->prev_w};
  strbuf stem = {0};
  rt_dump_stem(&stem, i, L->name);
  if (rt_dump_layer(m->dump, strbuf_cstr(&stem), &L->d, &L->p, &t, &m->dump_err) != 0 &&
      !m->dump_err.len)
    strbuf_puts(&m->dump_err, "a write failed");
  strbuf_free(&stem);
  free(hw);
  free(hg);
  dump_free(m, i);
}

void rt_backward_weight(rt_model *m, int st_i, int mb) {
  if (st_i < 0 || st_i >= m->nstages || mb < 0 || mb >= m->nmb) return;
  mstage *st = stage_of(m, st_i);
  msaved *sv = &st->saved[mb];
  if (!sv->buf || !sv->b_done) return; /* no B: precondition broken */
  for (int i = st->first; i < st->end; i++) {
    mlayer *L = &m->layers[i];
    double t0 = time_begin(m);
    L->k->bwd_w(&L->d, st->w + L->w_off, state_of(st, L, sv->buf, sv->kept), st->g + L->w_off);
    time_end(m, &L->timed[RT_PH_W], t0);
    if (dumping(m, mb)) { /* this microbatch's own gradient, into a zeroed copy */
      float *g1 = rt_dev_malloc(L->nw * sizeof *g1);
      L->k->bwd_w(&L->d, st->w + L->w_off, state_of(st, L, sv->buf, sv->kept), g1);
      dump_layer(m, i, st->w + L->w_off, g1);
      rt_dev_mfree(g1);
    }
  }
  if (!sv->ext || st->recompute) VEC_PUSH(st->pool, st->npool, st->pool_cap, sv->buf);
  if (sv->kept && !sv->ext) VEC_PUSH(st->kpool, st->nkpool, st->kpool_cap, sv->kept);
  sv->buf = NULL;
  sv->kept = NULL;
  sv->ext = false;
  sv->b_done = false;
  sv->f_done = false;
}

const char *rt_model_dump_error(const rt_model *m) {
  return m->dump_err.len ? strbuf_cstr(&m->dump_err) : NULL;
}

int rt_model_dump_index(const rt_model *m, strbuf *err) {
  if (!m->dump) return 0;
  strbuf index = {0};
  for (int i = 0; i < m->nlayers; i++) {
    const mlayer *L = &m->layers[i];
    rt_dump_entry(&index, i, L->name, rt_kernel_name(L->k), &L->d, &L->p, i > 0 && !L->splice,
                  L->splice ? L->prev_S : 0);
  }
  rt_dump_run run = {m->nmb, m->replicas, m->B, m->S, m->layers[m->nlayers - 1].p.out_w,
                     m->prefix, loss_scale(m), true};
  int rc = rt_dump_index(m->dump, &run, &index, err);
  strbuf_free(&index);
  return rc;
}

rt_status rt_dump_finish(const be_stream *s, const rt_opts *mo) {
  if (!mo || !mo->dump) return RT_STATUS_OK;
  strbuf err = {0};
  rt_model *m = rt_model_new(s, mo, &err); /* the run built the same: it cannot fail */
  rt_status rc = m && rt_model_dump_index(m, &err) == 0 ? RT_STATUS_OK : RT_STATUS_BAD_INPUT;
  if (rc != RT_STATUS_OK) fprintf(stderr, "octo-run: error: --dump: %s\n", strbuf_cstr(&err));
  rt_model_free(m);
  strbuf_free(&err);
  return rc;
}

/* ---- Gradients and optimizer --------------------------------------------------------------- */

float *rt_stage_grads(rt_model *m, int st_i, size_t *n) {
  if (st_i < 0 || st_i >= m->nstages) {
    *n = 0;
    return NULL;
  }
  mstage *st = stage_of(m, st_i);
  *n = st->nparams;
  return st->g;
}

int rt_model_tie_layer(const rt_model *m, bool head) { return head ? m->tie_head : m->tie_src; }

int rt_model_tie_stage(const rt_model *m, bool head) {
  int i = head ? m->tie_head : m->tie_src;
  for (int k = 0; i >= 0 && k < m->nstages; k++)
    if (i >= m->stages[k].first && i < m->stages[k].end) return k;
  return -1;
}

/* The gradient of the tied head's copy (head) or of the table. Pre: m has tied embeddings. */
static float *tie_grad(rt_model *m, bool head) {
  mstage *st = stage_of(m, rt_model_tie_stage(m, head));
  return st->g + m->layers[head ? m->tie_head : m->tie_src].w_off + (head ? tie_off(m) : 0);
}

float *rt_model_tied_grad(rt_model *m, int st_i, size_t *n) {
  *n = 0;
  if (m->tie_head < 0) return NULL;
  bool head = rt_model_tie_stage(m, true) == st_i;
  if (!head && rt_model_tie_stage(m, false) != st_i) return NULL;
  *n = tie_floats(m);
  return tie_grad(m, head);
}

void rt_model_tie_add(rt_model *m, int st, const float *other) {
  size_t n;
  float *g = rt_model_tied_grad(m, st, &n);
  if (g) RT_FOR(add, n, .x = other, .y = g);
}

void rt_model_tie_local(rt_model *m) {
  if (m->tie_head < 0) return;
  float *ge = tie_grad(m, false), *gh = tie_grad(m, true);
  RT_FOR(add, tie_floats(m), .x = gh, .y = ge);
  rt_copy(gh, ge, tie_floats(m));
}

/* Whether any of n floats of g (on the current device) is NaN or infinite. */
static bool any_nonfinite(const float *g, size_t n) {
  size_t nb = (n + RT_SCAN_BLOCK - 1) / RT_SCAN_BLOCK;
  if (nb == 0) return false;
  int *bad = xmalloc(nb * sizeof *bad);
  int *dbad = rt_scratch_bytes(nb * sizeof *dbad);
  RT_FOR(model_nonfinite, nb, .n = n, .x = g, .bad = dbad);
  rt_to_host(bad, dbad, nb * sizeof *bad);
  rt_scratch_free(dbad);
  int any = 0;
  for (size_t k = 0; k < nb; k++) any |= bad[k];
  free(bad);
  return any != 0;
}

bool rt_stage_finite(const rt_model *m, int st_i, strbuf *why) {
  if (st_i < 0 || st_i >= m->nstages || !m->stages[st_i].init) return true;
  const mstage *st = &m->stages[st_i];
  if (!any_nonfinite(st->g, st->nparams)) return true; /* else find and name the first */
  float *host = xmalloc((st->nparams ? st->nparams : 1) * sizeof *host);
  rt_to_host(host, st->g, st->nparams * sizeof *host);
  bool finite = true;
  for (int i = st->first; i < st->end && finite; i++) {
    const mlayer *L = &m->layers[i];
    const float *g = host + L->w_off;
    for (int t = 0; t < L->p.npt; t++) {
      size_t n = rt_ptensor_floats(&L->p.pt[t]);
      for (size_t k = 0; k < n && finite; k++)
        if (!isfinite(g[k])) {
          strbuf_printf(why, "layer %s (%s): gradient of %s[%zu] is %s", L->name, rt_kernel_name(L->k),
                        L->p.pt[t].name, k, isnan(g[k]) ? "NaN" : "infinite");
          finite = false;
        }
      g += n;
    }
  }
  free(host);
  return finite;
}

void rt_step(rt_model *m, int st_i) {
  if (st_i < 0 || st_i >= m->nstages) return;
  mstage *st = stage_of(m, st_i);
  float c1 = 1, c2 = 1;
  if (m->adam) {
    st->adam_t++;
    st->b1t *= 0.9;
    st->b2t *= 0.999;
    c1 = (float)(1.0 / (1.0 - st->b1t));
    c2 = (float)(1.0 / (1.0 - st->b2t));
  }
  RT_FOR(model_opt, st->nparams, .w = st->w, .g = st->g, .am = st->am, .av = st->av,
         .lr = (float)m->lr, .c1 = c1, .c2 = c2);
  rt_zero(st->g, st->nparams);
}

double rt_model_optimizer_rate(rt_model *m) {
  int big = 0; /* the largest stage: the step's own arrays, at their own addresses */
  for (int i = 1; i < m->nstages; i++)
    if (m->stages[i].nparams > m->stages[big].nparams) big = i;
  mstage *st = stage_of(m, big);
  float *g = xmalloc((st->nparams ? st->nparams : 1) * sizeof *g);
  for (size_t k = 0; k < st->nparams; k++) g[k] = (float)(1e-4 * ((double)(k % 2000) - 1000));
  double t[5];
  for (int r = 0; r < 5; r++) {
    rt_put(st->g, g, st->nparams * sizeof *g);
    rt_sync();
    double t0 = support_seconds();
    rt_step(m, big);
    rt_sync();
    t[r] = support_seconds() - t0;
  }
  free(g);
  double med = rt_median(t, 5);
  double bytes = (double)st->nparams * sizeof(float) * (m->adam ? 4 : 2); /* the simulator's */
  return med > 0 ? 2 * bytes / med : 0;
}

/* ---- Reference and comparison -------------------------------------------------------------- */

/* One replica's part of the reference: every microbatch through every stage, accumulating into
 * the stages' gradients. Returns the sum of the microbatch losses. */
static double reference_replica(rt_model *m, int step, int r, size_t big, float *in, float *act,
                                float *ga, float *gb) {
  double total = 0;
  rt_model_set_step(m, step, r);
  for (int mb = 0; mb < m->nmb; mb++) {
    rt_load(m, step, r, mb, in);
    for (int s = 0; s < m->nstages; s++)
      rt_forward(m, s, mb, s == 0 ? in : act + (size_t)(s - 1) * big, act + (size_t)s * big);
    total += rt_loss(m, step, r, mb, act + (size_t)(m->nstages - 1) * big, ga);
    for (int s = m->nstages - 1; s >= 0; s--) {
      rt_backward_input(m, s, mb, ga, s == 0 ? NULL : gb);
      rt_backward_weight(m, s, mb);
      float *t = ga;
      ga = gb;
      gb = t;
    }
  }
  return total;
}

double rt_reference_step(rt_model *m, int step, int replicas) {
  size_t big = 1;
  for (int s = 0; s < m->nstages; s++) {
    size_t n = rt_tensor_floats(m, BE_T_ACT, s);
    if (n > big) big = n;
  }
  size_t nin = rt_tensor_floats(m, BE_T_INPUT, 0);
  float *in = rt_dev_malloc(nin * sizeof *in);
  float *act = rt_dev_malloc((size_t)m->nstages * big * sizeof *act); /* output of each stage */
  float *ga = rt_dev_malloc(big * sizeof *ga), *gb = rt_dev_malloc(big * sizeof *gb);
  /* Each replica's gradients apart, then summed in replica order: the all-reduce's sum. */
  float **sum = xcalloc((size_t)m->nstages, sizeof *sum);
  double bufs = ((double)nin + ((double)m->nstages + 2) * (double)big) * sizeof(float);
  for (int s = 0; replicas > 1 && s < m->nstages; s++) bufs += (double)m->stages[s].nparams * 4;
  rt_model_count(m, RT_MEM_WORKSPACE, bufs); /* the step's buffers, for the tracker */
  double total = 0;
  int keep_step = m->step, keep_replica = m->replica;
  for (int r = 0; r < replicas; r++) {
    for (int s = 0; r > 0 && s < m->nstages; s++) {
      mstage *st = stage_of(m, s);
      if (r == 1) sum[s] = rt_dev_malloc(st->nparams * sizeof *sum[s]);
      if (r == 1) rt_copy(sum[s], st->g, st->nparams);
      rt_zero(st->g, st->nparams);
    }
    total += reference_replica(m, step, r, big, in, act, ga, gb);
    for (int s = 0; r > 0 && s < m->nstages; s++) {
      mstage *st = &m->stages[s];
      RT_FOR(add, st->nparams, .x = st->g, .y = sum[s]);
      if (r == replicas - 1) rt_copy(st->g, sum[s], st->nparams);
    }
  }
  rt_model_tie_local(m); /* as the stream's TIE: after the all-reduce */
  for (int s = 0; s < m->nstages; s++) rt_dev_mfree(sum[s]);
  free(sum);
  rt_model_set_step(m, keep_step, keep_replica);
  rt_model_count(m, RT_MEM_WORKSPACE, -bufs);
  rt_dev_mfree(in);
  rt_dev_mfree(act);
  rt_dev_mfree(ga);
  rt_dev_mfree(gb);
  return replicas > 0 ? total / ((double)replicas * m->nmb) : 0.0;
}

double rt_grad_diff_host(const float *g, size_t n, const rt_model *ref, int st_i) {
  if (st_i < 0 || st_i >= ref->nstages) return 0;
  const mstage *sr = &ref->stages[st_i];
  if (!sr->init || sr->nparams != n) return INFINITY;
  double worst = 0;
  for (int i = sr->first; i < sr->end; i++) {
    const mlayer *L = &ref->layers[i];
    size_t off = L->w_off;
    for (int t = 0; t < L->p.npt; t++) {
      size_t k = rt_ptensor_floats(&L->p.pt[t]);
      double d = rt_tensor_diff(g + off, sr->g + off, k);
      if (d > worst || d != d) worst = d;
      off += k;
    }
  }
  return worst;
}

double rt_grad_diff(const rt_model *a, const rt_model *b, int st_i) {
  if (st_i < 0 || st_i >= a->nstages || st_i >= b->nstages) return 0;
  const mstage *sa = &a->stages[st_i];
  if (!sa->init) return INFINITY;
  return rt_grad_diff_host(sa->g, sa->nparams, b, st_i);
}

/* ---- For the profiler (kernels.h) ------------------------------------------------------------ */

void rt_model_layer(const rt_model *m, int i, rt_layer_info *out) {
  out->k = m->layers[i].k;
  out->d = m->layers[i].d;
  out->p = m->layers[i].p;
}

int rt_model_nlayers(const rt_model *m) { return m->nlayers; }

bool rt_model_layer_state(rt_model *m, int i, float **w, float **am, float **av) {
  int st_i = 0;
  while (st_i < m->nstages && m->stages[st_i].end <= i) st_i++;
  if (i < 0 || i >= m->nlayers || st_i == m->nstages || !m->stages[st_i].init) return false;
  const mstage *st = &m->stages[st_i];
  size_t off = m->layers[i].w_off;
  *w = st->w + off;
  *am = st->am ? st->am + off : NULL;
  *av = st->av ? st->av + off : NULL;
  return true;
}

bool rt_model_adam(const rt_model *m) { return m->adam; }

void rt_model_set_adam_steps(rt_model *m, long t) {
  for (int i = 0; i < m->nstages; i++) {
    mstage *st = &m->stages[i];
    st->adam_t = t;
    st->b1t = st->b2t = 1.0;
    for (long k = 0; k < t; k++) { /* the products rt_step forms, in its order: the same bits */
      st->b1t *= 0.9;
      st->b2t *= 0.999;
    }
  }
}

void rt_model_layer_bytes(const rt_model *m, int i, rt_layer_cost *c) {
  const mlayer *L = &m->layers[i];
  double nw = (double)rt_lplan_params(&L->p);
  c->act_bytes = 4.0 * (double)L->p.save_floats;
  c->out_bytes = 4.0 * (double)m->B * L->d.S * L->p.out_w;
  c->grad_bytes = 4.0 * nw;
  c->param_bytes = (m->adam ? 16.0 : 8.0) * nw; /* weights, gradients (, two moments) */
}

void rt_model_time(rt_model *m, bool on) { m->timing = on; }

/* The median of the recorded calls s (0 when none). */
static double samples_median(const msamples *s) {
  if (s->n == 0) return 0;
  double *v = xmalloc((size_t)s->n * sizeof *v);
  memcpy(v, s->v, (size_t)s->n * sizeof *v);
  double med = rt_median(v, s->n);
  free(v);
  return med;
}

void rt_model_timed_costs(const rt_model *m, rt_layer_cost *costs) {
  for (int i = 0; i < m->nlayers; i++) {
    const mlayer *L = &m->layers[i];
    if (L->timed[RT_PH_F].n == 0) continue; /* not this rank's, or nothing recorded */
    rt_layer_cost *c = &costs[i];
    c->f = samples_median(&L->timed[RT_PH_F]);
    c->b = samples_median(&L->timed[RT_PH_B]);
    c->w = samples_median(&L->timed[RT_PH_W]);
    if (i == m->nlayers - 1) c->f += samples_median(&m->loss_timed); /* as the profiler's */
    rt_model_layer_bytes(m, i, c);
    c->measured = true;
  }
}

double rt_model_loss_seconds(rt_model *m) {
  size_t n = rt_tensor_floats(m, BE_T_ACT, m->nstages - 1);
  float *h = xmalloc((n ? n : 1) * sizeof *h);
  for (size_t k = 0; k < n; k++) h[k] = (float)((k * 2654435761u) % 1000) * 1e-3f;
  float *out = rt_dev_malloc(n * sizeof *out), *grad = rt_dev_malloc(n * sizeof *grad);
  rt_put(out, h, n * sizeof *h);
  free(h);
  double t[5];
  for (int r = 0; r < 5; r++) {
    rt_sync();
    double t0 = support_seconds();
    rt_loss(m, 0, 0, 0, out, grad);
    t[r] = support_seconds() - t0; /* rt_loss returns after its result reached the host */
  }
  rt_dev_mfree(out);
  rt_dev_mfree(grad);
  return rt_median(t, 5);
}
