/* cost.h -- the cost model: for each layer, from its kind, dimensions, the training set-up
 * (micro-batch, sequence, dtype, tensor parallelism, recomputation) and the device, the time of
 * its forward (F), input-gradient (B) and weight-gradient (W) passes, the activation memory it
 * keeps between them, the bytes it sends to the next layer and its parameter, gradient and
 * optimizer-state bytes. Analytic (FLOPs and bytes per part, roofline time) by default; custom
 * layers and profile files (JSON, docs/cost-model.md) override any number. */
#ifndef OCTO_COST_H
#define OCTO_COST_H

#include "ir.h"
#include "support.h"

/* The three passes of a layer, indexing the per-pass arrays below. */
typedef enum cost_pass { COST_F, COST_B, COST_W, COST_NPASS } cost_pass;

/* Analytic estimate of one layer for one microbatch on one GPU of a tensor-parallel group. */
typedef struct cost_estimate {
  double flops[COST_NPASS]; /* floating-point operations of F, B, W (per GPU) */
  double bytes[COST_NPASS]; /* HBM bytes moved by F, B, W (per GPU) */
  double comm[COST_NPASS];  /* seconds of tensor-parallel collectives inside F, B, W */
  double time[COST_NPASS];  /* seconds of F, B, W on the device: roofline per part + comm */
  double act;               /* activation bytes kept from F until B (per GPU) */
  double act_w;             /* part of act still needed by W after B */
  double out;               /* bytes of the output tensor sent to the next layer */
  double params;            /* parameters of the layer per GPU (after tensor parallelism) */
  double tied_params;       /* part of params that is a copy of another layer's: a tied lm_head's
                               V x h matrix (the first embedding's table), per GPU; held, with
                               its gradient and optimizer state, like the rest (param_bytes
                               counts it), but not a parameter of the model of its own */
  double param_bytes;       /* parameter + gradient + optimizer-state bytes per GPU */
  double grad_bytes;        /* gradient bytes per GPU reduced over data parallel */
  double core_time;         /* with the module's selective recomputation: the seconds of the
                               attention core's forward that B runs again (in time[COST_B]);
                               0 otherwise */
} cost_estimate;

/* ---- Breakdown: the parts of a layer (docs/cost-model.md names the same parts) ---- */

/* How a part's forward FLOPs G split over the passes (the F/B/W rule). */
typedef enum cost_part_kind {
  COST_PART_GEMM, /* weight GEMM: G in F, G in B (input gradient), G in W (weight gradient) */
  COST_PART_CORE, /* weight-less compute (attention scores and values, SSD scan, conv): C in F,
                     2C in B, nothing in W */
  COST_PART_ELEM, /* memory-bound element-wise work (norms, activations, softmax, loss,
                     gathers): bytes only */
} cost_part_kind;

/* One piece of work of a layer, per microbatch on one GPU (after tensor parallelism). */
typedef struct cost_part {
  const char *name;         /* short name used in docs/cost-model.md ("qkv", "core_qk", ...) */
  cost_part_kind kind;      /* how its FLOPs split over F, B, W */
  bool tp_split;            /* tensor parallelism divides it (false: replicated, e.g. norms) */
  bool attn_core;           /* part of the attention core (recomputed by selective recompute) */
  double flops[COST_NPASS]; /* FLOPs of F, B, W (recomputation not included) */
  double bytes[COST_NPASS]; /* HBM bytes of F, B, W */
  double size;              /* GEMM: its smallest dimension on one GPU (M, K, N, the larger of K
                               and N divided by t when tensor parallelism splits it); 0 otherwise */
} cost_part;

/* Flags of an activation term. */
enum {
  COST_ACT_INPUT = 1, /* the layer's input: the only term full recomputation keeps */
  COST_ACT_W = 2,     /* input of a weight GEMM: W needs it, so it lives until W */
  COST_ACT_SCORE = 4, /* attention score-matrix term (softmax, dropout): dropped by selective
                         recomputation */
  COST_ACT_SPLIT = 8, /* divided by the tensor-parallel degree */
};

/* One tensor kept from F for the backward passes (Korthikanti et al. 2022, section 4). */
typedef struct cost_act_term {
  const char *name; /* short name used in docs/cost-model.md */
  double bytes;     /* bytes per GPU (after tensor parallelism) */
  unsigned flags;   /* COST_ACT_* */
} cost_act_term;

#define COST_MAX_PARTS 24 /* parts of one layer, at most (vit with a materialized softmax: 12) */
#define COST_MAX_ACT 24   /* activation terms of one layer, at most */

/* The analytic model of one layer before the device is applied: its parts, activation terms,
 * parameters and tensor-parallel collectives, per microbatch on one GPU. */
typedef struct cost_breakdown {
  cost_part parts[COST_MAX_PARTS]; /* compute and memory work, in execution order */
  int nparts;                      /* number of parts */
  cost_act_term act[COST_MAX_ACT]; /* activation terms, recomputation not applied */
  int nact;                        /* number of terms */
  double params;                   /* parameters per GPU (TP-split matrices divided by t) */
  double tied_params;              /* part of params that copies another layer's (a tied
                                      lm_head's V x h matrix, divided by t); 0 otherwise */
  int allreduces[COST_NPASS];      /* tensor-parallel all-reduces in F, B, W (0 when t == 1) */
  double allreduce_bytes;          /* bytes of each of them (b x s x hidden x element bytes) */
  double out;                      /* bytes of the output sent to the next layer */
} cost_breakdown;

/* Parts, activation terms, parameters and collectives of layer l under m's training set-up.
 * Pre: as cost_estimate_layer, except that no device is needed. Custom layers have no parts
 * and no terms (their numbers are given). Post: *bd is filled; every number is finite and
 * non-negative. */
void cost_layer_breakdown(const ir_module *m, const ir_layer *l, cost_breakdown *bd);

/* The model's parameter count as Hugging Face's num_parameters() gives it: every layer's
 * parameters without tensor parallelism (tensor degree 1, whatever m->train says), a tied
 * matrix counted once (each layer's params less its tied_params). Pre: m's layers are complete
 * (as after ir_layer_check; a tied lm_head's rule, ir_layer_check_tie, holds); no device or cost
 * record is needed. Post: a finite count >= 0; custom layers count their given params. */
double cost_module_parameters(const ir_module *m);
/* The parameters of m that are copies of another layer's (each layer's tied_params, tensor degree
 * 1): a tied lm_head's V x h matrix; 0 when nothing is tied. Pre: as cost_module_parameters.
 * Post: a finite count >= 0; cost_module_parameters(m) + this is what every layer holds. */
double cost_module_tied_parameters(const ir_module *m);

/* Bytes per parameter under m's set-up: weights + gradients + optimizer state (the optimizer
 * part divided by data when zero >= 1); *grad (may be NULL) receives the gradient bytes alone.
 * Pre: m->train's dtype, optimizer, zero, data, fp32_grads are valid or unset. */
double cost_bytes_per_param(const ir_module *m, double *grad);
/* Bytes of an activation element at m's training precision (fp32 and tf32: 4; bf16, fp16 and fp8,
 * which keeps bf16 activations: 2). */
double cost_act_elem_bytes(const ir_module *m);

/* ---- Estimates ---- */

/* Estimate layer l of module m on a device with properties 'dev' (peak, hbm, efficiency).
 * Pre: l's parameters are complete (as after ir_layer_check); m->train holds the set-up (unset
 * fields take their records.def defaults); m->intra is the link used by tensor-parallel
 * collectives when tensor > 1. Custom layers take their given numbers. Post: every field of *e
 * is finite and non-negative. Returns 0, or -1 when the device lacks a property the layer needs
 * (peak or hbm), or tensor > 1 and m has no intra-node link, with *why set to a static
 * description ("peak", "hbm", "intra link"). */
int cost_estimate_layer(const ir_module *m, const ir_layer *l, const ir_device_rec *dev,
                        cost_estimate *e, const char **why);

/* Forward FLOPs of layer l for one sequence of the module's length on one GPU without tensor
 * parallelism (the figure papers quote; for the unit tests and --explain). A vit layer's
 * sequence is one image (its tokens); custom layers give 0. */
double cost_forward_flops_per_sequence(const ir_module *m, const ir_layer *l);

/* Apply the profile file at 'path' (JSON, docs/cost-model.md) to the layers i of m with
 * apply[i] (every layer when apply is NULL): first its "kinds" entries, then its "layers"
 * entries, each setting the cost fields it names unless its "shape" (the layer kind and
 * parameters measured) disagrees with one of those layers. Its "scale" and "backend" set m's
 * train fields scale and measured_on, and its "link" replaces the bandwidth and latency of m's
 * intra and inter links (setting them when absent) and of every explicit link, whatever
 * 'apply' says. Pre: m's layers are valid; 'from' locates a failure to read the file. Reports
 * each problem (syntax error at file:line:col; unknown key, wrong type, negative number, unknown
 * layer, kind, parameter or backend name with a suggestion, a set-up field that disagrees with
 * m, a scale or backend other than the one an earlier profile set, a shape that disagrees with
 * a layer, act_w above act) at its place in the file, prefixed with its JSON path. Post: entries
 * and keys without problems are applied. Returns the number of errors reported. */
int cost_profile_apply(ir_module *m, const char *path, const bool *apply, diag_loc from,
                       diag_engine *d);

/* The cost pass: fill the cost record of every layer of m from the analytic model on the
 * pipeline's device type (device 0), then apply the profile files m names (in order, later files
 * winning; paths relative to the working directory), per layer kind and then per layer name,
 * with their scale, backend and link (cost_profile_apply). Layers whose cost record is already
 * complete keep it unless 'overwrite' (profiles do not touch them either); with 'overwrite' the
 * train fields scale and measured_on are first unset, since every cost is estimated afresh.
 * Custom layers need no device; any other layer to estimate needs one. Reports
 * problems (unreadable or malformed profile: file and JSON path; unknown layer or kind name,
 * with a suggestion; no device, or a device without peak or hbm; tensor > 1 without an intra
 * link) through d. Post: every layer estimated without error has a complete cost record.
 * Returns the number of errors. */
int cost_run(ir_module *m, bool overwrite, diag_engine *d);

#endif
