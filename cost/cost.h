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
  double param_bytes;       /* parameter + gradient + optimizer-state bytes per GPU */
  double grad_bytes;        /* gradient bytes per GPU reduced over data parallel */
} cost_estimate;

/* Estimate layer l of module m on a device with properties 'dev' (peak, hbm, efficiency).
 * Pre: l's parameters are complete (as after ir_layer_check); m->train holds the set-up (unset
 * fields take their records.def defaults); m->intra is the link used by tensor-parallel
 * collectives when tensor > 1. Custom layers take their given numbers. Post: every field of *e
 * is finite and non-negative. Returns 0, or -1 when the device lacks a property the layer needs
 * (peak or hbm), with *why set to a static description. */
int cost_estimate_layer(const ir_module *m, const ir_layer *l, const ir_device_rec *dev,
                        cost_estimate *e, const char **why);

/* Forward FLOPs of layer l for one sequence of the module's length on one GPU without tensor
 * parallelism (the figure papers quote; for the unit tests and --explain). */
double cost_forward_flops_per_sequence(const ir_module *m, const ir_layer *l);

/* The cost pass: fill the cost record of every layer of m from the analytic model on the
 * pipeline's device type (device 0), then apply the profile files m names (in order, later files
 * winning; paths relative to the working directory), per layer kind and then per layer name.
 * Layers whose cost record is already complete keep it unless 'overwrite'. Reports problems
 * (unreadable or malformed profile: file and JSON path; unknown layer or kind name, with a
 * suggestion; a device without peak or hbm) through d. Returns the number of errors. */
int cost_run(ir_module *m, bool overwrite, diag_engine *d);

#endif
