/* sim.h -- the pipeline simulator: the cost model every planning pass calls. Given a module with
 * layer costs, stages, a placement and either a per-device order of operations (fixed mode) or a
 * priority callback that picks among ready operations (priority mode), it computes the timeline
 * of one training step: every operation and every transfer with start and end, transfers over
 * links with latency and bandwidth overlapping compute and queued per link direction, memory per
 * device over time, the data-parallel all-reduce, tied-gradient exchange and optimizer step at
 * the end, makespan, busy and idle time, bubble ratio, peak memory against the limit, and the
 * plan's lower bounds.
 * Deterministic: the same input gives the same output bit for bit (event ties break by a
 * sequence number, arithmetic is IEEE double without contraction). */
#ifndef OCTO_SIM_H
#define OCTO_SIM_H

#include <stdbool.h>
#include <stdint.h>

#include "ir.h"
#include "support.h"

/* ---- Problem ------------------------------------------------------------------------------- */

/* A compiled simulation problem: the per-stage and per-link numbers of one partition and
 * placement. Build once, run many schedules on it. Opaque. */
typedef struct sim_model sim_model;

/* Compile the partition and placement of m into a problem: each stage's F, B, W times and
 * activation bytes are the sums of its layers' costs as ir_stage_layer_cost gives them (a stage
 * with recompute = full pays F again in B and keeps its recomputable layers' inputs), and the
 * bytes its B rebuilds the sum of ir_stage_layer_rebuild. Memory per microbatch: F allocates
 * act at its start; B allocates the rebuilt bytes at its start (memory that grows at B, checked
 * against the peak there) and frees act - act_w at its end; W frees act_w and the rebuilt bytes;
 * a fused BW frees act and the rebuilt bytes. Pre: m passed ir_verify. Errors
 * (reported through d, at the entity's location when known): no stages; no microbatches, or more
 * than 1e9 operations (stages x microbatches x 3); a stage not placed or placed on a device that
 * does not exist; a layer without a complete cost record (f, b, w, act, act_w, out, param, grad);
 * no link between two devices that exchange tensors, or between the devices of a tied lm_head's
 * stage and of its embedding's (the tied-gradient exchange); data > 1 without a link for the
 * all-reduce;
 * a step whose durations add up to more than 1e6 s (the engine counts picoseconds in 64 bits).
 * Returns NULL after reporting; else a problem that does not refer to m (free it with
 * sim_model_free). */
sim_model *sim_model_build(const ir_module *m, diag_engine *d);
/* Free a problem (NULL is fine). */
void sim_model_free(sim_model *p);

/* Memory limit of device dv in bytes (ir_device_mem_limit), and its static memory: parameter,
 * gradient and optimizer-state bytes of its stages. Pre: 0 <= dv < the device count of the
 * module p was built from. */
double sim_model_mem_limit(const sim_model *p, int dv);
double sim_model_static_mem(const sim_model *p, int dv);

/* Bytes per second at which device dv's optimizer step reads and writes the static memory: a
 * profile's measured rate (train.optim_bw), else the device's memory bandwidth; 0 when neither
 * is known. Pre: 0 <= dv < m->ndevices. */
double sim_optim_rate(const ir_module *m, int dv);

/* ---- The plan-independent bound ------------------------------------------------------------ */

/* A lower bound on the step of every plan of a module's layers and devices (any partition into
 * whole layers, any placement, any schedule the simulator runs, within memory): the largest of
 * its parts. docs/tuner.md derives each. Times in seconds. */
typedef struct sim_bound {
  double bound;     /* the largest of the parts below */
  double work;      /* (a) the devices' work: whole layers packed onto the devices (and their
                       static memory and one microbatch's activations within the largest memory
                       limit, when the packing is exact); on devices that differ, at least the
                       relaxation that lets layers split over them (a'') */
  bool exact;       /* 'work' is the best packing (to 1e-7), not only a bound on it */
  double fill;      /* (a') the work with the devices' idle starts, on average */
  double chain;     /* (b) the forward prefix, one layer's F and B of every microbatch, and the
                       backward suffix */
  int chain_layer;  /* the layer of 'chain' (-1 if none) */
  double path;      /* (c) one microbatch's path through every layer */
  double memory;    /* (d) one layer's microbatches in flight, as few as memory allows, each held
                       for the backward above it; 0 when memory does not bind */
  int memory_layer; /* the layer of 'memory' (-1 if none) */
} sim_bound;

/* Compute the bound of m. Pre: m passed ir_verify. Returns false (and a zeroed *out) when m has
 * no layers, no devices, no microbatches or a layer without costs. */
bool sim_bound_compute(const ir_module *m, sim_bound *out);
/* The same without the exact packing of (a) (the bisection's counting test alone: exact false):
 * a weaker bound, at a small fraction of the cost, for searches that bound many modules. */
bool sim_bound_quick(const ir_module *m, sim_bound *out);

/* ---- Priority mode ------------------------------------------------------------------------- */

/* An operation the simulator offers to a device in priority mode: its next F, B (or fused BW)
 * and W of one of its stages, in microbatch order per stage and kind, whose inputs have arrived. */
typedef struct sim_cand {
  ir_op_kind kind; /* F, B, W, or BW when B and W are fused */
  int stage;       /* stage index */
  int mb;          /* microbatch */
  double act;      /* bytes an F allocates (0 for the others) */
  double rebuild;  /* bytes a B (or BW) allocates at its start and keeps until W: the state a
                      recomputing stage rebuilds (0 for the others) */
} sim_cand;

/* What a priority callback may look at. */
typedef struct sim_view {
  double now;         /* current time, seconds */
  int device;         /* the device choosing */
  double mem_used;    /* its memory in use now (static + live activations, rebuilt state), bytes */
  double mem_limit;   /* its memory limit, bytes */
  int in_flight;      /* microbatches this device has run F for and not yet finished W (BW) */
} sim_view;

/* Pick one of the n >= 1 candidates (return its index) or none (-1: wait; the device is offered
 * again when one of its inputs arrives -- nothing else changes while it is idle, its memory
 * included). Must be deterministic. */
typedef int (*sim_choose_fn)(void *ctx, const sim_view *v, const sim_cand *c, int n);

/* Told when an offloading stage's activations of microbatch mb leave device dv's memory (back =
 * false: their copy to the host ended) and when they come back (back = true: their copy back
 * was posted, and allocated). Must not fail. */
typedef void (*sim_host_fn)(void *ctx, int device, int stage, int mb, bool back);

/* ---- Running ------------------------------------------------------------------------------- */

/* How to run. Zero-initialize for the fixed mode without a timeline. */
typedef struct sim_opts {
  sim_choose_fn choose; /* NULL: fixed mode (the module's schedules); else priority mode */
  void *ctx;            /* passed to choose and host */
  sim_host_fn host;     /* NULL, or told of the offloading stages' copies (see sim_host_fn) */
  bool fused_bw;        /* priority mode: offer fused BW instead of separate B and W */
  bool record;          /* keep the timeline (operations, transfers) in the result */
  bool order;           /* priority mode: keep the order each device chose (sim_result.order) */
  double cutoff;        /* > 0: stop with SIM_CUTOFF once the step provably ends after this
                           many seconds (an operation starts at t on a device whose compute not
                           yet started, its optimizer step and tied exchange included, takes
                           more than cutoff - t); 0: run to the end */
  bool (*stop)(void *stop_ctx); /* NULL, or asked every SIM_STOP_EVERY events of the run (from
                                   its thread): true stops it with SIM_STOPPED (the caller no
                                   longer needs its result) */
  void *stop_ctx;       /* passed to stop */
} sim_opts;

/* Events between two questions to sim_opts.stop. */
#define SIM_STOP_EVERY 1024

/* One operation of the timeline (recorded runs only). */
typedef struct sim_op_event {
  ir_op_kind kind;  /* F, B, W, BW; the end-of-step operations: SIM_OP_* */
  int device;       /* device that ran it */
  int stage, mb;    /* stage and microbatch (-1 for the end-of-step operations) */
  double start, end; /* seconds */
  double mem;       /* memory of the device right after the operation's allocation (F) or
                       after its end (others; a B's rebuilt state stays until W), bytes */
  double mem_start; /* memory of the device right after the allocation at its start: an F's
                       activations (= mem), a recomputing stage's B or BW the state it rebuilds;
                       for the others the memory when they start, bytes */
} sim_op_event;

/* Kinds of the end-of-step operations, after the ir_op_kind values: the data-parallel gradient
 * all-reduce, the optimizer step, with ZeRO-1 the gradient reduce-scatter (instead of the
 * all-reduce) and the all-gather of the updated weights, and with tied embeddings on two devices
 * the exchange of the shared matrix's gradient (after the reduction, before the optimizer step,
 * on both devices at once); then the copies of an offloading stage's activations over its device's
 * PCIe link (stage and mb set; they overlap its compute): to host memory after F (OFFLOAD) and back
 * before B (RELOAD). SIM_OP_END is one past the last. */
enum { SIM_OP_ALLREDUCE = IR_OP_COUNT, SIM_OP_OPTIM, SIM_OP_REDUCE_SCATTER, SIM_OP_ALLGATHER,
       SIM_OP_TIE, SIM_OP_OFFLOAD, SIM_OP_RELOAD, SIM_OP_END };

/* One point-to-point transfer (recorded runs only). */
typedef struct sim_transfer {
  ir_op_kind kind;    /* F: activation to the next stage; B: input gradient to the previous */
  int from, to;       /* devices */
  int src_stage, dst_stage, mb; /* producing and consuming stage, microbatch */
  double bytes;       /* size */
  double ready;       /* when the producer finished (the transfer was posted) */
  double start, end;  /* on the link, after queueing behind earlier transfers */
} sim_transfer;

/* Per-device figures. */
typedef struct sim_device_stats {
  double busy;       /* compute time: F, B, W and the optimizer step */
  double comm;       /* communication at the end of the step: the data-parallel reduction (and
                        ZeRO-1's all-gather), and the tied-gradient exchange */
  double idle;       /* makespan - busy */
  double end;        /* when its last operation ends */
  double static_mem; /* parameters, gradients and optimizer state of its stages */
  double peak_mem;   /* static + largest live activations (rebuilt state included) */
  double mem_limit;  /* its limit */
  int peak_op;       /* index in its order of the operation at which the peak was reached
                        (-1: none) */
  ir_op peak_at;     /* that operation: an F, or the B (BW) of a recomputing stage */
  double peak_time;  /* when */
} sim_device_stats;

/* Outcome of sim_run. */
typedef enum sim_status {
  SIM_OK = 0,       /* every operation ran */
  SIM_DEADLOCK = 1, /* some operation can never run: see 'stuck' */
  SIM_INVALID = 2,  /* the schedule does not fit the model (an operation missing, repeated, on
                       the wrong device or out of range): see 'why' */
  SIM_CUTOFF = 3,   /* stopped early: the step would end after sim_opts.cutoff (the figures of
                       the result are not filled) */
  SIM_STOPPED = 4,  /* stopped early because sim_opts.stop said so (not filled either) */
} sim_status;

/* What a device was waiting for when the simulation could not go on. */
typedef struct sim_stuck {
  int device;   /* the waiting device */
  int index;    /* position of its next operation in its order (fixed mode), or -1 */
  ir_op op;     /* that operation (fixed mode) */
  ir_op waits;  /* the operation it waits for (kind, stage, mb) */
  int waits_on; /* device of that operation */
  bool memory;  /* it waits (waits_on -1) for memory to bring its activations back from the host
                   (an offloading stage's B) */
} sim_stuck;

/* Result of a run; reusable across runs (sim_result_free releases it). */
typedef struct sim_result {
  sim_status status;    /* outcome of the last run */
  double makespan;      /* end of the step, seconds */
  double bubble;        /* sum of idle / (devices x makespan) */
  double peak_mem;      /* largest peak over devices */
  bool fits;            /* every device within its limit */
  int oom_device;       /* first device over its limit, -1 if none */
  double lb_work;       /* work bound: over devices, the earliest start of its first operation
                           (one microbatch's forwards and transfers before its first stage) plus
                           its compute (and the tied-gradient exchange it takes part in) */
  double lb_critical;   /* critical path of one microbatch through all stages and links, then
                           stage 0's device's end of step (its tied exchange included) */
  int ndevices;            /* entries of dev (and of order) */
  sim_device_stats *dev;   /* per device */
  sim_op_event *ops;       /* timeline in start order (record only) */
  int nops, ops_cap;       /* events recorded, allocated */
  sim_transfer *xfers;     /* transfers in posting order (record only) */
  int nxfers, xfers_cap;   /* transfers recorded, allocated */
  ir_schedule *order;      /* priority mode with sim_opts.order: the order each device chose
                              (ndevices entries); else NULL */
  sim_stuck *stuck;        /* status DEADLOCK: one entry per device that still had work */
  int nstuck, stuck_cap;   /* entries, allocated */
  char why[200];           /* status INVALID: what is wrong with the schedule */
  void *work;              /* scratch kept between runs (private to sim.c) */
} sim_result;

/* Simulate one step. Fixed mode: m's schedules give each device's order (the module must be the
 * one p was built from, with schedules for every device). Priority mode: opts->choose picks.
 * Post: on SIM_OK every field is filled; on SIM_DEADLOCK 'stuck' says who waits for what, and
 * the times are those reached. Never hangs: every call finishes in time linear in the number of
 * operations (times a logarithm). */
sim_status sim_run(const sim_model *p, const ir_module *m, const sim_opts *opts, sim_result *r);
/* Free what r holds and zero it (r itself is the caller's; a zeroed result is fine). */
void sim_result_free(sim_result *r);

/* Report a failed run (status DEADLOCK or INVALID) as an error through d at 'where'; nothing for
 * SIM_OK. A deadlock gets one note per waiting device ("$d1 waits at #5 B @s2 3 for B @s3 3 on
 * $d2"), the devices of the wait cycle first, in cycle order, when there is one. */
void sim_report_failure(const sim_result *r, diag_engine *d, diag_loc where);

/* Write the figures of r into m: predict record and per-device predict records. Pre: r is a
 * SIM_OK run of a problem built from m. */
void sim_store_prediction(const sim_result *r, ir_module *m);

/* Replace m's schedules with the order r chose (pre: a SIM_OK priority-mode run of a problem built
 * from m, with sim_opts.order; nothing happens for other runs). The 'schedule method' is left as
 * it is. */
void sim_store_order(const sim_result *r, ir_module *m);

#endif
