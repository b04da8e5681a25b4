/* kernels.h -- the layer kernels of the runtime: one rt_kernel per layer kind of ir/layer_kinds.def
 * (the stream library's be_kind), each defined in its own file runtime/kernels/KIND.c with
 * everything the runtime knows of the kind: its dimensions read from the stream's layer by
 * parameter number (be_layer_param; defaults from the IR's layer_params.def), its real math split
 * the way zero-bubble schedules need it: forward (F), input gradient (B) and weight gradient (W)
 * as separate functions, its FLOPs, and its parameter tensors' names (those of --dump). The CPU
 * model (model.c) and the tests use this table; every kernel is float32, row-major, deterministic
 * (same inputs, same bits), and single-threaded apart from BLAS, which runs one thread per rank.
 * Kernels run on the calling thread's device (kdev.h): the CPU, or a GPU bound by rt_dev_bind,
 * and then every pointer they take is that GPU's memory.
 * docs/runtime.md ("Real layers") gives each kind's definition; tests/runtime/torch_ref.py
 * rebuilds every kind in PyTorch from the same weights. */
#ifndef OCTO_RT_KERNELS_H
#define OCTO_RT_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kbodies.h"
#include "kdev.h"
#include "stream.h"
#include "support.h"

/* The dimensions of one layer as it runs (already divided by the scale). Fields a kind does not
 * use are 0. Tokens are laid out sequence-major: token t of sequence b is row b * S + t. */
typedef struct rt_ldims {
  int B;             /* sequences per microbatch */
  int S;             /* tokens per sequence (the layer's own; vit: its tokens) */
  int in_S;          /* tokens per sequence of the layer's input (embedding splicing, first vit;
                        vit_embed: pixel rows, channels x image; projector: its tokens) */
  int in_w;          /* width per token of the layer's input (1 for token ids; vit_embed: image,
                        one row of pixels; projector: the vision width) */
  int hidden;        /* model width (attention, mlp, moe, mamba2, vit, lm_head, embedding) */
  int heads;         /* attention / vit: query heads; mamba2: SSM heads */
  int kv_heads;      /* attention: key/value heads (divides heads); vit: = heads */
  int head_dim;      /* attention / vit / mamba2: width of one head */
  int ffn;           /* mlp / vit: intermediate width; moe: one expert's intermediate width */
  bool gated;        /* mlp / moe / vit: gated linear unit (up * act(gate)) */
  rt_act act;        /* mlp / moe / vit: activation */
  bool causal;       /* attention: causal mask */
  int window;        /* attention: sliding window in tokens (0: none) */
  double rope_theta; /* attention: rotary base frequency (> 0) */
  double rope_factor, rope_low, rope_high, rope_orig; /* attention: Llama 3.1 rope scaling
                                                          (factor 1: none) */
  double rope_linear; /* attention: linear rope scaling, positions divided by it (> 0; 1: none) */
  bool qkv_bias;     /* attention: the q, k and v projections have biases */
  bool qk_norm;      /* attention: RMSNorm (eps norm_eps) of each q and k head before rotary */
  bool no_rope;      /* attention: no rotary embedding of q and k (rope = false; NoPE) */
  double norm_eps;   /* every kind with a norm (not embedding, custom): its epsilon (> 0) */
  float norm_shift;  /* attention / mlp / lm_head: 1 with norm_plus_one (each RMSNorm multiplies
                        by 1 + weight, Gemma), else 0 */
  bool post_norm;    /* attention / mlp: an RMSNorm of the block's output before the residual */
  double score_dim;  /* attention: scores are q.k / sqrt(score_dim) (> 0; head_dim by default) */
  double softcap;    /* attention: scores, lm_head: logits capped to softcap tanh(./softcap);
                        0: none */
  bool scaled;       /* embedding: the output is multiplied by sqrt(hidden) (Gemma) */
  bool padded;       /* embedding: token pad_id's row gets no gradient from the lookup */
  int pad_id;        /* embedding: that token, with padded (Hugging Face's padding_idx) */
  int experts;       /* moe: routed experts */
  int top_k;         /* moe: experts per token */
  int shared;        /* moe: shared experts (always active, each of width ffn) */
  bool shared_gate;  /* moe: the shared experts' sum is scaled by sigmoid(h . gate) per token */
  bool all_probs;    /* moe: routing weights are the softmax over all experts' logits at the
                        selected ones (renorm = false), else over the top_k selected logits;
                        with sigmoid: the selected scores as they are, else divided by their sum */
  bool sigmoid;      /* moe: the router's scores are sigmoid(logit) (DeepSeek-V3) */
  bool score_bias;   /* moe: the "router.bias" [experts] added to the scores for the choice only */
  int egroups;       /* moe: expert groups of group-limited routing (0 or 1: none) */
  int tgroups;       /* moe: the groups kept (with egroups > 1) */
  double rscale;     /* moe: the routing weights' scale (0: 1, for dims made by hand) */
  int q_rank;        /* mla: rank of the queries' latent (0: none) */
  int kv_rank;       /* mla: rank of the keys' and values' latent */
  int nope_dim;      /* mla: a query and key head's width without positional embedding */
  int rope_dim;      /* mla: its rotary width (even), the shared rotary key's */
  int v_dim;         /* mla: a value head's width */
  double latent_eps; /* mla: the latents' RMSNorm epsilon */
  double yarn_factor; /* mla: YaRN's context extension (<= 1, 0 in dims made by hand: none) */
  double yarn_orig, yarn_beta_fast, yarn_beta_slow, yarn_mscale, yarn_mscale_all; /* YaRN's
                       pretraining context, ramp bounds and magnitude scales (mla) */
  int state;         /* mamba2: SSM state size per group (d_state) */
  int groups;        /* mamba2: B/C groups (divides heads) */
  int conv;          /* mamba2: causal depthwise convolution width */
  int inner;         /* mamba2: inner width = heads * head_dim */
  int chunk;         /* mamba2: SSD chunk length */
  int patch;         /* vit_embed: patch side in pixels */
  int channels;      /* vit_embed: colour channels of the pixels */
  int image;         /* vit_embed: image side in pixels (a multiple of patch) */
  bool unused;       /* vit: held, not computed (output = input, no weight gradient) */
  bool drop_class;   /* projector: the first (class) token of each image is not projected */
  bool vision_norm;  /* projector: it also holds the vision tower's unused final LayerNorm */
  int vocab;         /* embedding / lm_head: vocabulary */
  bool tied;         /* lm_head: its matrix is the first embedding's table, [vocab, hidden]
                        (else its own, [hidden, vocab]) */
  int out_w;         /* custom: output width per token */
} rt_ldims;

/* How a parameter tensor starts. */
typedef enum rt_init {
  RT_INIT_UNIFORM, /* uniform in [-scale, scale] from the layer's generator */
  RT_INIT_CONST,   /* every element = scale (0 for biases, 1 for norm weights) */
  RT_INIT_ALOG,    /* mamba2 A_log: log(uniform in [1, 16]) per head */
  RT_INIT_DTBIAS   /* mamba2 dt_bias: inverse softplus of dt log-uniform in [1e-3, 1e-1] */
} rt_init;

/* One parameter tensor of a layer (its shape is for dumps and the PyTorch check). */
typedef struct rt_ptensor {
  const char *name; /* short name, unique in the layer ("wq", "norm", "experts.w1") */
  int ndim;         /* 1..3 */
  int dim[3];       /* extents, outermost first; their product is the float count */
  rt_init init;     /* how it starts */
  float scale;      /* uniform bound or constant */
} rt_ptensor;

/* Most parameter tensors a layer has. */
#define RT_MAX_PT 24

/* What a kernel needs for a layer of given dimensions: its parameter tensors, laid out in this
 * order in one contiguous array (and the gradient array likewise), and the floats it keeps from
 * F for B and W ("save": also where B leaves what W needs). */
typedef struct rt_lplan {
  int npt;                 /* parameter tensors */
  rt_ptensor pt[RT_MAX_PT]; /* in layout order */
  size_t save_floats;      /* floats of one saved-state block */
  int out_w;               /* output width per token */
} rt_lplan;

/* Floats of parameter tensor t. */
size_t rt_ptensor_floats(const rt_ptensor *t);
/* Floats of all the plan's parameters. */
size_t rt_lplan_params(const rt_lplan *p);
/* Append parameter tensor 'name' of extents [d0], [d0, d1] (d2 0) or [d0, d1, d2] (a zero
 * extent ends the shape) with its initialization to p. Pre: p->npt < RT_MAX_PT. */
void rt_lplan_add(rt_lplan *p, const char *name, int d0, int d1, int d2, rt_init init,
                  float scale);

/* What a kind's dims function reads (rt_kernel.dims). */
typedef struct rt_dims_in {
  const be_stream *s; /* the stream */
  const be_layer *l;  /* the layer, of the kernel's kind */
  int scale;          /* the scale its dimensions are divided by (1: as written) */
  int prev_S, prev_w; /* tokens per sequence and width of what it receives (0 and 0 for the
                         model's first layer, which receives the stream's input) */
  bool first;         /* it is the model's first layer */
} rt_dims_in;

/* What a kind is to the model beyond its math (rt_kernel.role bits). */
enum {
  RT_ROLE_IDS = 1,  /* its input is the data's token ids; the first such layer gives the data's
                       tokens per sequence and vocabulary, and one after other layers splices
                       their tokens in front of its own (embedding) */
  RT_ROLE_VOCAB = 2 /* its vocab is the data's when no RT_ROLE_IDS layer gives one (lm_head) */
};

/* The kernels of one layer kind. Pointers: w the layer's parameters (rt_lplan order), g its
 * gradients, save its saved-state block (save_floats), x its input (B*in_S x in_w), y its output
 * (B*S x out_w), dy the gradient of the loss with respect to y, dx that with respect to x. */
typedef struct rt_kernel {
  be_kind id;     /* its kind (its name and recomputable are be_kinds[id]'s) */
  unsigned role;  /* RT_ROLE_* bits */
  /* Fill d's dimensions from in->l at in->scale (rt_sdim), in_S and in_w included. Pre: d holds
   * B and the values of kinds without the field (act silu, gated). Returns 0, or -1 with the
   * reason appended to err (a layer the runtime cannot run as written); the caller names the
   * layer and checks sizes. */
  int (*dims)(const rt_dims_in *in, rt_ldims *d, strbuf *err);
  /* Check d for this kind and fill p. Returns 0, or -1 with the reason appended to err (e.g.
   * "heads 6 not divisible by kv_heads 4"); the caller names the layer. */
  int (*plan)(const rt_ldims *d, rt_lplan *p, strbuf *err);
  /* F: y from x; keeps in save what B and W need. */
  void (*fwd)(const rt_ldims *d, const float *w, const float *x, float *y, float *save);
  /* B: dx from dy (dx NULL: not needed, the layer is the model's first); leaves in save what W
   * needs. Pre: fwd ran on this save block. Must not write g. */
  void (*bwd_in)(const rt_ldims *d, const float *w, float *save, const float *dy, float *dx);
  /* W: adds this microbatch's weight gradients to g. Pre: bwd_in ran on this save block. */
  void (*bwd_w)(const rt_ldims *d, const float *w, const float *save, float *g);
  /* Floating-point operations of one forward on a microbatch of dims d with nw parameters (a
   * GEMM costs 2 per weight and token, rt_flops_gemm; the step counts 3 x F). */
  double (*flops)(const rt_ldims *d, double nw);
} rt_kernel;

/* The table, indexed by be_kind: entry k is rt_kernel_<ID> of runtime/kernels/KIND.c, one per
 * row of ir/layer_kinds.def (a row without its file does not link). */
extern const rt_kernel *const rt_kernels[BE_KIND_COUNT];

/* The kernel of layer kind 'kind' (its spelling), or NULL when the runtime has none. */
const rt_kernel *rt_kernel_find(const char *kind);
/* The spelling of k's kind ("attention"). */
const char *rt_kernel_name(const rt_kernel *k);
/* Whether a recomputing stage runs k's F again in B from its kept input (the kinds the cost
 * model charges again, layer_kinds.def RECOMPUTABLE); a layer of another kind keeps its state
 * from F. */
bool rt_kernel_recomputable(const rt_kernel *k);

/* ---- Dimensions, for the kinds' dims functions (kcommon.c) ---------------------------------- */

/* Largest dimension accepted (token ids must be exact as floats). */
#define RT_MAX_DIM (1 << 24)

/* Parameter p of in->l (be_layer_param: the layer's value, else the IR's constant default), or
 * dflt when neither is there. Pre: in->l is of p's kind. */
double rt_lp(const rt_dims_in *in, be_lparam p, double dflt);
/* value / scale rounded to a multiple of 'mult', at least lo; -1 when not finite or above the
 * runtime's largest dimension (2^24). */
long rt_sdim(double value, int scale, long lo, long mult);
/* Heads of a head-structured width at scale k: 'heads' heads of width hd in 'units' groups
 * (key/value heads, or Mamba-2's B/C groups; heads / units heads each). The head width is
 * divided first, down to 4 (a multiple of mult); the rest of the division takes whole groups
 * away, so the total width heads * hd shrinks by about k and the ratio heads / units stays.
 * Pre: heads >= 1, units >= 1, units divides heads. */
void rt_heads_dims(double heads, double units, double hd, int k, int mult, int *heads_s,
                   int *units_s, int *hd_s);
/* The width and tokens most kinds share: hidden (at least 4) and seq (default: the stream's),
 * into d->hidden and d->S, with in_S = S and in_w = hidden. */
void rt_dims_tokens(const rt_dims_in *in, be_lparam hidden, be_lparam seq, rt_ldims *d);
/* 2 x nw x the tokens of a microbatch: the forward FLOPs of the layer's GEMMs. */
double rt_flops_gemm(const rt_ldims *d, double nw);

/* Fill w (rt_lplan_params(p) floats) with the initial values of p's tensors: uniform ones from a
 * generator seeded by (seed, tensor index), so a layer's weights depend only on the seed. */
void rt_kernel_init_params(const rt_lplan *p, uint64_t seed, float *w);

/* ---- Dumps (dump.c): NumPy files of a layer's tensors, for users and the PyTorch check ------ */

/* The version of the dump format (docs/runtime.md, "Dumps"): 2 names files by rt_dump_stem and
 * writes the activation by name, the run's counts, loss scale and targets. */
#define RT_DUMP_VERSION 2
/* The most bytes of a layer's name that a dump's file name keeps (rt_dump_stem). */
#define RT_DUMP_NAME_MAX 64

/* Write the float32 array a of ndim (1..4) extents dim as a NumPy .npy file at path, through a
 * temporary renamed over it (support_write_file: complete or absent). Returns 0, or -1 with
 * "cannot write 'PATH': reason" appended to err. */
int rt_npy_write(const char *path, const float *a, int ndim, const int64_t *dim, strbuf *err);
/* The same for an int32 array. */
int rt_npy_write_i32(const char *path, const int32_t *a, int ndim, const int64_t *dim,
                     strbuf *err);

/* Append the file-name stem of layer 'layer' named 'name' to out: the index as three digits or
 * more, '-', then the name with every byte outside [A-Za-z0-9._-] (and a leading '.') as '_',
 * cut to RT_DUMP_NAME_MAX bytes ("layer" when empty): "007-attn.3". Unique per layer, and no
 * name ("../../x", "/etc/passwd", control bytes) reaches a path outside the dump's directory. */
void rt_dump_stem(strbuf *out, int layer, const char *name);
/* Whether stem is one a dump's files may be named by: only [A-Za-z0-9._-], not starting with
 * '.', at most RT_DUMP_NAME_MAX + 16 bytes. */
bool rt_dump_stem_safe(const char *stem);

/* The tensors of one layer run on one microbatch; dx, g, xs and dxs may be NULL (not
 * computed). */
typedef struct rt_dump_tensors {
  const float *x, *y, *dy, *dx; /* input, output, output gradient, input gradient */
  const float *w, *g;           /* parameters and their gradients (rt_lplan order) */
  const float *xs, *dxs;        /* a splicing embedding: the tokens it splices in front of its
                                   own (B x xs_S rows of xs_w) and their gradient */
  int xs_S, xs_w;               /* their tokens per sequence and width */
} rt_dump_tensors;

/* Write the tensors of a layer to directory dir as STEM.x.npy, STEM.y.npy, STEM.dy.npy,
 * STEM.dx.npy (when t->dx is set), STEM.xs.npy and STEM.dxs.npy (when set), STEM.w.PARAM.npy
 * and STEM.g.PARAM.npy, each complete or absent. Pre: t->w and t->g set. Returns 0, or -1 with
 * the reason in err (a stem that is not rt_dump_stem_safe, a write that failed). */
int rt_dump_layer(const char *dir, const char *stem, const rt_ldims *d, const rt_lplan *p,
                  const rt_dump_tensors *t, strbuf *err);
/* Append layer 'layer''s JSON object for index.json (its index, name, kind, dims with the
 * activation by name, parameter names and shapes, its files' prefix rt_dump_stem + ".",
 * whether PREFIX.dx.npy exists, the tokens it splices in front of its own: 0 unless it is a
 * splicing embedding) to index, after a comma when index is not empty. */
void rt_dump_entry(strbuf *index, int layer, const char *name, const char *kind,
                   const rt_ldims *d, const rt_lplan *p, bool has_dx, int splice_tokens);
/* What index.json says of the run beside its layers. */
typedef struct rt_dump_run {
  int microbatches, replicas; /* per step, of the stream */
  int micro_batch, seq;       /* sequences per microbatch, tokens per sequence of the data */
  int classes;                /* the loss's classes (the last layer's output width) */
  int loss_prefix;            /* leading positions of each sequence without a loss */
  double loss_scale;          /* the loss's gradient factor, 1 / (counted positions of a
                                 microbatch x microbatches x replicas) */
  bool targets;               /* targets.npy is written */
} rt_dump_run;
/* Write dir/index.json (through a temporary renamed over it): {"format": "octopipe-dump",
 * "version": RT_DUMP_VERSION, the run's figures, "layers": [INDEX]}. Returns 0, or -1 with the
 * reason in err. */
int rt_dump_index(const char *dir, const rt_dump_run *run, const strbuf *index, strbuf *err);

/* ---- The model's layers, for the profiler --------------------------------------------------- */

typedef struct rt_model rt_model;
/* One layer of a model as it runs: its kernels, dimensions and plan. */
typedef struct rt_layer_info {
  const rt_kernel *k; /* its kind's kernels */
  rt_ldims d;         /* dimensions at the model's scale */
  rt_lplan p;         /* parameters and saved state */
} rt_layer_info;
/* Layer i of m into *out. Pre: 0 <= i < rt_model_nlayers(m). */
void rt_model_layer(const rt_model *m, int i, rt_layer_info *out);
int rt_model_nlayers(const rt_model *m);
/* The optimizer step's rate as the simulator counts it: 2 x (parameter, gradient and optimizer
 * state bytes) per second, measured with rt_step on m's largest stage (median of 5; it changes
 * that stage's weights: for a model used only to measure). */
double rt_model_optimizer_rate(rt_model *m);
/* Median seconds of the loss (softmax cross-entropy and its gradient) of one microbatch. */
double rt_model_loss_seconds(rt_model *m);

/* ---- Shared building blocks (kcommon.c), for the kernels ----------------------------------- */

/* C (m x n) = alpha * op(A) op(B) + beta * C, row-major, op transposes when ta / tb; lda, ldb, ldc
 * the row strides as stored. On the current device (kdev.h): BLAS (cblas_sgemm) on
 * the CPU, the bound device's GEMM (cuBLAS) on a GPU. */
void rt_gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float *A, int lda,
             const float *B, int ldb, float beta, float *C, int ldc);

/* Median of n >= 1 values (sorts v in place). */
double rt_median(double *v, int n);

/* Seconds this thread has spent in BLAS (rt_gemm on the CPU) since it started (the run's BLAS
 * share). */
double rt_blas_seconds(void);

/* The norms (their bodies are in kb_common.h), over 'rows' rows of width n on the current
 * device (kdev.h), with epsilon eps (> 0, the layer's norm_eps).
 * RMSNorm: y = x / rms(x) * (gamma + shift), rms = sqrt(mean(x^2) + eps), shift 0 or 1 (the
 * layer's norm_shift: Gemma's 1 + weight); rstd (one per row) receives 1 / rms. */
void rt_rmsnorm_fwd(int rows, int n, double eps, const float *x, const float *gamma, float shift,
                    float *y, float *rstd);
/* Input gradient of rt_rmsnorm_fwd: dx (+)= d/dx given dy; accumulate into dx when acc. */
void rt_rmsnorm_bwd_in(int rows, int n, const float *x, const float *gamma, float shift,
                       const float *rstd, const float *dy, float *dx, bool acc);
/* Weight gradient (of gamma, whatever the shift): dgamma += sum over rows of dy * x * rstd. */
void rt_rmsnorm_bwd_w(int rows, int n, const float *x, const float *rstd, const float *dy,
                      float *dgamma);

/* LayerNorm with weight gamma and bias beta (vit): y = (x - mean) * rstd * gamma + beta; mean
 * and rstd (one per row) saved. */
void rt_layernorm_fwd(int rows, int n, double eps, const float *x, const float *gamma,
                      const float *beta, float *y, float *mean, float *rstd);
void rt_layernorm_bwd_in(int rows, int n, const float *x, const float *gamma, const float *mean,
                         const float *rstd, const float *dy, float *dx, bool acc);
/* dgamma += sum dy * xhat, dbeta += sum dy. */
void rt_layernorm_bwd_w(int rows, int n, const float *x, const float *mean, const float *rstd,
                        const float *dy, float *dgamma, float *dbeta);

/* The spelling of activation a ("silu"), as ir/enums.def's ACT type. The activations themselves
 * (rt_act_fwd, rt_act_grad, rt_silu, rt_sigmoid, rt_softplus) are in kb_common.h. */
const char *rt_act_name(rt_act a);

#endif
