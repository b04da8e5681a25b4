/* sim.c -- the pipeline simulator: a discrete-event engine over the operations of one training
 * step. Events are operation completions and transfer arrivals, kept in a binary heap ordered by
 * (time, sequence number) so ties break the same way everywhere. A device starts its next
 * operation when it is idle and the operation's inputs have arrived; in fixed mode "next" is the
 * module's order, in priority mode a callback picks among the ready operations. Transfers are
 * posted when their producer ends and queue FIFO per link direction. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

/* Operation slots: op id = (stage << mb_shift | mb) << SL_BITS | slot (sim_model.mb_shift; shifts
 * and masks, not divisions, take an id apart on the engine's hot path). A fused BW uses the B
 * slot. */
enum { SL_F, SL_B, SL_W, SL_N, SL_BITS = 2 };

/* Time inside the engine: whole picoseconds, so sums are exact and every platform computes the
 * same timeline (a duration is rounded to the picosecond once, when the problem is built). */
typedef int64_t tick;
#define TICKS_PER_S 1e12

/* Most operations (stages x microbatches x 3) one problem may have: IR_MAX_OPS, which bounds the
 * problem's memory and keeps event codes (op id x 2 + 1) far below INT32_MAX. */
#define SIM_MAX_OPS IR_MAX_OPS

/* Longest total of all durations of one step (every operation, transfer, all-reduce and
 * optimizer step) a problem may have, in seconds: no time of the timeline can exceed it, and in
 * ticks it stays far below INT64_MAX (1e6 s = 1e18 ps; about 11.6 days). */
#define SIM_MAX_STEP_S 1e6

/* Seconds to ticks (nearest) and back (correctly rounded, so 33 ms of ticks prints as 33ms). */
static tick to_tick(double s) { return (tick)llround(s * TICKS_PER_S); }
static double to_s(tick t) { return (double)t / TICKS_PER_S; }

/* Per-stage numbers of a problem. */
typedef struct sim_stage {
  int dev;              /* device the stage runs on */
  tick t[SL_N];         /* F, B, W time of one microbatch */
  double act, act_w;    /* activation bytes allocated at F; part kept after B until W */
  double rebuild;       /* bytes allocated at B's start and kept until W: the saved state a
                           recomputing stage's B rebuilds (ir_stage_layer_rebuild; 0 when the
                           stage does not recompute) */
  tick x_next;          /* time to send its output to the next stage (0 when on the same device) */
  tick x_prev;          /* time to send its input gradient to the previous stage (0: same device) */
  double out_bytes;     /* bytes of its output tensor (the next stage's input) */
  double in_bytes;      /* bytes of its input gradient (the previous stage's output) */
  int link_next;        /* link id towards the next stage's device, -1 when local or last */
  int link_prev;        /* link id towards the previous stage's device, -1 when local or first */
  int first_bucket;     /* with overlap_grad_reduce: its gradient buckets are
                           bucket[first_bucket .. first_bucket + nbuckets), one per layer in
                           backward order (last layer first) */
  int nbuckets;         /* 0 without overlap (or without data parallelism) */
  bool offload;         /* its activations go to host memory after F and come back before B */
  tick host;            /* offload: time of one copy of act over its device's PCIe link (each
                           direction) */
} sim_stage;

/* One bucket of gradients reduced over data parallelism while the backward still runs. */
typedef struct sim_bucket {
  tick comm;   /* its reduction's time */
  double frac; /* the share of its stage's last backward done when it is ready (0..1] */
} sim_bucket;

/* Per-device numbers of a problem. */
typedef struct sim_dev {
  double static_mem; /* parameter, gradient and optimizer-state bytes of its stages */
  double mem_limit;  /* its limit (INFINITY when unknown) */
  tick allreduce;    /* data-parallel gradient reduction at the end of the step, after the last
                        operation (without overlap_grad_reduce; else 0, see sim_stage.grad_comm) */
  tick gather;       /* ZeRO-1: all-gather of the updated weights after the optimizer step */
  tick optim;        /* optimizer step time */
  tick tie;          /* the tied-gradient exchange it takes part in (sim_model.tie), 0 when none */
  tick work;         /* total compute of the step: its stages' F+B+W for every microbatch + optim */
  tick head;         /* earliest start of its first operation: the forwards and transfers of one
                        microbatch before its first stage (-1 while unknown: no stage) */
  int first_stage;   /* its stages are dev_stages[first_stage .. first_stage + nstages) */
  int nstages;
} sim_dev;

/* A compiled problem (see sim.h): durations in ticks, stage and device figures, link ids. */
struct sim_model {
  int ndev, nstages, nmb; /* sizes */
  int mb_shift;           /* bits of a microbatch index in an op id: 2^mb_shift >= nmb */
  sim_stage *st;          /* per stage */
  sim_dev *dev;           /* per device */
  int *dev_stages;        /* stage indices grouped by device (CSR, see sim_dev) */
  sim_bucket *bucket;     /* gradient buckets of every stage (see sim_stage.first_bucket) */
  int nlinks;             /* distinct ordered device pairs that carry transfers */
  tick lb_critical;       /* one microbatch's critical path */
  int reduce_kind;        /* timeline kind of the gradient reductions: SIM_OP_REDUCE_SCATTER
                             with ZeRO-1, else SIM_OP_ALLREDUCE */
  int tie_dev[2];         /* tied embeddings on two devices: the device of the embedding's stage
                             and of the tied lm_head's, which exchange the shared matrix's
                             gradient at the end of the step; -1, -1 when the model has no tie or
                             both stages are on one device (a local sum, not charged) */
  tick tie;               /* that exchange's time (0 when tie_dev is -1) */
};

double sim_model_mem_limit(const sim_model *p, int dv) { return p->dev[dv].mem_limit; }
double sim_model_static_mem(const sim_model *p, int dv) { return p->dev[dv].static_mem; }

void sim_model_free(sim_model *p) {
  if (!p) return;
  free(p->st);
  free(p->dev);
  free(p->dev_stages);
  free(p->bucket);
  free(p);
}

/* Location of a stage for messages: where it was defined, else 'where'. */
static diag_loc stage_loc(const ir_module *m, int s, diag_loc where) {
  return m->stages[s].loc.line ? ir_diag_loc(m->stages[s].loc) : where;
}

/* Whether every field of a layer's cost record that the simulator reads is set. */
static const int cost_fields[] = {IR_F_COST_f,   IR_F_COST_b,   IR_F_COST_w,     IR_F_COST_act,
                                  IR_F_COST_act_w, IR_F_COST_out, IR_F_COST_param, IR_F_COST_grad};

/* Seconds of a message of 'bytes' over link l (pre: l->bw > 0). */
static double link_time(const ir_link_rec *l, double bytes) {
  double lat = ir_field_value(l, IR_F_LINK_lat);
  return lat + bytes / l->bw;
}

/* Seconds of a ring all-reduce of 'bytes' over n ranks on link l (Patarasuk & Yuan; NCCL's
 * ring): every rank sends and receives 2(n-1)/n of the data in 2(n-1) steps. Pre: l->bw > 0. */
static double ring_allreduce(const ir_link_rec *l, double bytes, int64_t n) {
  if (n <= 1 || bytes <= 0) return 0;
  double lat = ir_field_value(l, IR_F_LINK_lat);
  return 2.0 * (double)(n - 1) / (double)n * bytes / l->bw + 2.0 * (double)(n - 1) * lat;
}

/* Seconds of a ring reduce-scatter or all-gather of 'bytes' (the whole buffer) over n ranks:
 * half an all-reduce, (n-1)/n of the data in n-1 steps. Pre: l->bw > 0. */
static double ring_half(const ir_link_rec *l, double bytes, int64_t n) {
  return ring_allreduce(l, bytes, n) / 2;
}

/* Whether durations adding up to 'step' seconds stay within SIM_MAX_STEP_S; reports at 'where'
 * when they do not. */
static bool step_within_limit(double step, diag_engine *d, diag_loc where) {
  if (step <= SIM_MAX_STEP_S) return true;
  diag_error(d, where, "one step of this plan is too long to simulate: its operations, transfers "
             "and end-of-step work add up to %g s (at most %g s)", step, SIM_MAX_STEP_S);
  return false;
}

/* Link id of the ordered device pair (a, b) in the table 'ids' (ndev x ndev, -1 = none yet). */
static int link_id(int *ids, int ndev, int a, int b, int *nlinks) {
  int *slot = &ids[(size_t)a * ndev + b];
  if (*slot < 0) *slot = (*nlinks)++;
  return *slot;
}

/* The stage of m holding layer i (pre: the verified stages cover every layer), or -1. */
static int stage_of_layer(const ir_module *m, int i) {
  for (int s = 0; s < m->nstages; s++)
    if (i >= m->stages[s].first && i < m->stages[s].end) return s;
  return -1;
}

double sim_optim_rate(const ir_module *m, int dv) {
  /* a profile's measured optimizer rate, else the device's memory bandwidth */
  if (ir_field_is_set(&m->train, IR_F_TRAIN_optim_bw) && m->train.optim_bw > 0)
    return m->train.optim_bw;
  double hbm = m->devices[dv].rec.hbm;
  return hbm > 0 ? hbm : 0;
}

sim_model *sim_model_build(const ir_module *m, diag_engine *d) {
  diag_loc where = ir_diag_loc(m->loc);
  int errors = 0;
  if (m->nstages == 0) {
    diag_error(d, where, "the module has no stages: run a partition pass first");
    return NULL;
  }
  double mbs = ir_field_value(&m->train, IR_F_TRAIN_microbatches); /* NAN when unset */
  if (!(mbs >= 1)) {
    diag_error(d, ir_diag_loc(m->train_loc), "the simulator needs 'microbatches' (at least 1) in "
               "the train record");
    return NULL;
  }
  /* Op ids (and event codes, twice as large) must fit in an int. */
  if (mbs * m->nstages * SL_N > SIM_MAX_OPS) {
    diag_error(d, ir_diag_loc(m->train_loc), "%d stages x %.0f microbatches is too many "
               "operations to simulate (3 x stages x microbatches is at most %.0e)", m->nstages,
               mbs, SIM_MAX_OPS);
    return NULL;
  }
  int nmb = (int)mbs;
  for (int s = 0; s < m->nstages; s++) {
    int dv = m->stages[s].device;
    if (dv < 0 || dv >= m->ndevices) {
      if (dv < 0)
        diag_error(d, stage_loc(m, s, where), "stage @s%d is not placed on a device", s);
      else
        diag_error(d, stage_loc(m, s, where), "stage @s%d is placed on $d%d, which does not exist "
                   "(the module has %d device%s)", s, dv, m->ndevices, m->ndevices == 1 ? "" : "s");
      errors++;
    } else if (m->stages[s].offload && !(m->devices[dv].rec.pcie > 0)) {
      diag_error(d, stage_loc(m, s, where), "stage @s%d offloads its activations, but $d%d has no "
                 "'pcie' bandwidth to host memory", s, dv);
      errors++;
    }
  }
  for (int i = 0; i < m->nlayers && errors < 20; i++) {
    const ir_layer *l = &m->layers[i];
    for (int k = -1; k < l->ntcosts; k++) {
      const ir_cost *c = k < 0 ? &l->cost : &l->tcosts[k].cost;
      for (size_t f = 0; f < sizeof cost_fields / sizeof cost_fields[0]; f++)
        if (!ir_field_is_set(c, cost_fields[f])) {
          diag_error(d, l->loc.line ? ir_diag_loc(l->loc) : where,
                     "layer %%%d \"%s\" has no '%s' cost%s%s%s: run the cost pass first", i,
                     l->name, ir_fields[cost_fields[f]].name, k < 0 ? "" : " on \"",
                     k < 0 ? "" : l->tcosts[k].type, k < 0 ? "" : "\"");
          errors++;
          break;
        }
    }
  }
  if (errors) return NULL;
  /* Every duration of the step added up (seconds), checked before any becomes ticks; the
   * verified stages cover every layer once. */
  double step = 0;
  for (int s = 0; s < m->nstages; s++)
    for (int i = m->stages[s].first; i < m->stages[s].end; i++) {
      ir_cost c = ir_stage_layer_cost(m, &m->stages[s], i); /* recomputation included */
      step += c.f + c.b + c.w;
    }
  step *= nmb;
  if (!step_within_limit(step, d, where)) return NULL;

  sim_model *p = xcalloc(1, sizeof *p);
  p->ndev = m->ndevices;
  p->nstages = m->nstages;
  p->nmb = nmb;
  while ((1L << p->mb_shift) < nmb) p->mb_shift++;
  p->st = xcalloc((size_t)m->nstages, sizeof *p->st);
  p->dev = xcalloc((size_t)(m->ndevices ? m->ndevices : 1), sizeof *p->dev);
  p->dev_stages = xcalloc((size_t)m->nstages, sizeof *p->dev_stages);
  int *ids = xmalloc((size_t)m->ndevices * m->ndevices * sizeof *ids);
  for (size_t i = 0; i < (size_t)m->ndevices * m->ndevices; i++) ids[i] = -1;

  for (int dv = 0; dv < m->ndevices; dv++) p->dev[dv].mem_limit = ir_device_mem_limit(m, dv);

  /* Stage sums. */
  double *grad = xcalloc((size_t)(m->ndevices ? m->ndevices : 1), sizeof *grad);
  for (int s = 0; s < m->nstages; s++) {
    sim_stage *st = &p->st[s];
    const ir_stage *is = &m->stages[s];
    st->dev = is->device;
    for (int i = is->first; i < is->end; i++) {
      /* Its device's type; a recomputing stage's layers pay F again in B and keep their input
       * (ir_stage_layer_cost). */
      ir_cost c = ir_stage_layer_cost(m, is, i);
      st->t[SL_F] += to_tick(c.f);
      st->t[SL_B] += to_tick(c.b);
      st->t[SL_W] += to_tick(c.w);
      st->act += c.act;
      st->act_w += c.act_w;
      st->rebuild += ir_stage_layer_rebuild(m, is, i);
      p->dev[st->dev].static_mem += c.param;
      grad[st->dev] += c.grad;
    }
    st->out_bytes = m->layers[is->end - 1].cost.out;
    st->link_next = st->link_prev = -1;
    if (is->offload && st->act > 0) { /* the verifier saw the device's pcie */
      double t = st->act / m->devices[st->dev].rec.pcie;
      step += 2 * nmb * t;
      st->offload = true;
      st->host = to_tick(t);
    }
  }
  /* Transfers between consecutive stages on different devices. */
  int nlinks = 0;
  for (int s = 0; s + 1 < m->nstages && !errors; s++) {
    sim_stage *a = &p->st[s], *b = &p->st[s + 1];
    b->in_bytes = a->out_bytes;
    if (a->dev == b->dev) continue;
    const ir_link_rec *fw = ir_module_link(m, a->dev, b->dev);
    const ir_link_rec *bw = ir_module_link(m, b->dev, a->dev);
    if (!fw || !bw || !(fw->bw > 0) || !(bw->bw > 0)) {
      int x = fw && fw->bw > 0 ? b->dev : a->dev, y = fw && fw->bw > 0 ? a->dev : b->dev;
      diag_error(d, stage_loc(m, s + 1, where), "no link from $d%d to $d%d, which exchange "
                 "tensors between @s%d and @s%d: give the cluster an %s link or an explicit "
                 "'link $d%d -> $d%d'", x, y, s, s + 1,
                 m->devices[x].rec.node == m->devices[y].rec.node ? "intra" : "inter", x, y);
      errors++;
      break;
    }
    double xf = link_time(fw, a->out_bytes), xb = link_time(bw, b->in_bytes);
    step += nmb * (xf + xb);
    if (!step_within_limit(step, d, where)) {
      errors++;
      break;
    }
    a->x_next = to_tick(xf);
    b->x_prev = to_tick(xb);
    a->link_next = link_id(ids, m->ndevices, a->dev, b->dev, &nlinks);
    b->link_prev = link_id(ids, m->ndevices, b->dev, a->dev, &nlinks);
  }
  free(ids);
  p->nlinks = nlinks;

  /* End of step: data-parallel reduction of the gradients over the replicas of each pipeline
   * device (Megatron's rank order puts them in one block of tensor x data GPUs): a ring
   * all-reduce, or with ZeRO-1 a reduce-scatter, then the optimizer step, which reads and writes
   * every parameter, gradient and optimizer-state byte once, then (ZeRO-1) the all-gather of the
   * updated weights. With overlap_grad_reduce each stage's gradients are reduced as soon as its
   * last backward ends (one bucket per stage), overlapping the backwards still to run. */
  int64_t data = (int64_t)ir_field_value(&m->train, IR_F_TRAIN_data);
  bool zero = ir_field_value(&m->train, IR_F_TRAIN_zero) >= 1;
  bool overlap = ir_field_value(&m->train, IR_F_TRAIN_overlap_grad_reduce) != 0;
  p->reduce_kind = zero ? SIM_OP_REDUCE_SCATTER : SIM_OP_ALLREDUCE;
  /* weight bytes per gradient byte, for the all-gather: 2-byte weights (4 in fp32 and tf32)
   * against 2-byte gradients (4 in fp32, tf32 or with fp32_grads) */
  int dt = (int)ir_field_value(&m->train, IR_F_TRAIN_dtype);
  bool wide = dt == IR_DTYPE_FP32 || dt == IR_DTYPE_TF32;
  double w_per_g = wide ? 1 : ir_field_value(&m->train, IR_F_TRAIN_fp32_grads) != 0 ? 0.5 : 1;
  double tensor = ir_field_value(&m->train, IR_F_TRAIN_tensor);
  double gpn = ir_field_value(&m->cluster, IR_F_CLUSTER_gpus_per_node);
  const ir_link_rec *dp_link = tensor * (double)data <= gpn ? &m->intra : &m->inter;
  if (!dp_link->set) dp_link = m->intra.set ? &m->intra : &m->inter;
  for (int dv = 0; dv < m->ndevices && !errors; dv++) {
    sim_dev *x = &p->dev[dv];
    if (data > 1 && grad[dv] > 0) {
      if (!dp_link->set || !(dp_link->bw > 0)) {
        diag_error(d, where, "data = %lld needs a link for the gradient all-reduce: the cluster "
                   "has no intra or inter link", (long long)data);
        errors++;
        break;
      }
    }
    double hbm = sim_optim_rate(m, dv);
    double ar = 0, ag = 0;
    if (data > 1) {
      ar = zero ? ring_half(dp_link, grad[dv], data) : ring_allreduce(dp_link, grad[dv], data);
      ag = zero ? ring_half(dp_link, grad[dv] * w_per_g, data) : 0;
    }
    double opt = x->static_mem > 0 && hbm > 0 ? 2 * x->static_mem / hbm : 0;
    step += ar + opt + ag;
    if (!step_within_limit(step, d, where)) {
      errors++;
      break;
    }
    x->allreduce = overlap ? 0 : to_tick(ar);
    x->gather = to_tick(ag);
    x->optim = to_tick(opt);
  }
  if (!errors && overlap && data > 1) {
    /* one bucket per layer, ready when the share of its stage's last backward (W, or BW) up to
     * and including the layer is done: the backward runs the layers last to first */
    p->bucket = xcalloc((size_t)(m->nlayers ? m->nlayers : 1), sizeof *p->bucket);
    int nb = 0;
    for (int s = 0; s < m->nstages; s++) {
      const ir_stage *is = &m->stages[s];
      sim_stage *st = &p->st[s];
      double total = 0, done = 0;
      for (int i = is->first; i < is->end; i++)
        total += ir_layer_cost_on(m, &m->layers[i], is->device)->w;
      st->first_bucket = nb;
      for (int i = is->end - 1; i >= is->first; i--) {
        const ir_cost *c = ir_layer_cost_on(m, &m->layers[i], is->device);
        done += c->w;
        if (!(c->grad > 0)) continue;
        sim_bucket *b = &p->bucket[nb++];
        b->comm = to_tick(zero ? ring_half(dp_link, c->grad, data)
                               : ring_allreduce(dp_link, c->grad, data));
        b->frac = total > 0 ? done / total : (double)(is->end - i) / (is->end - is->first);
      }
      st->nbuckets = nb - st->first_bucket;
    }
  }
  free(grad);
  /* Tied embeddings (Megatron's embedding group): after both devices' data-parallel reductions,
   * the device of the embedding's stage and that of the tied lm_head's all-reduce the shared
   * matrix's gradient, the two copies' sum, before their optimizer steps. Its bytes are the
   * embedding's gradient bytes (its cost record's grad: V x h / tensor x the gradient bytes per
   * parameter, exactly the matrix's); its time a ring all-reduce over n = 2 (NCCL's: each sends
   * half, then the other half, bytes / bw + 2 lat), on the slower direction of the pair's links,
   * since both send at once. Every tensor-parallel and data-parallel copy of the pair does the
   * same at once on its own link. On one device it is a local sum, not charged. */
  p->tie_dev[0] = p->tie_dev[1] = -1;
  int temb, thead;
  if (!errors && ir_module_tie(m, &temb, &thead)) {
    int se = stage_of_layer(m, temb), sh = stage_of_layer(m, thead);
    int a = se >= 0 ? p->st[se].dev : -1, b = sh >= 0 ? p->st[sh].dev : -1;
    if (a >= 0 && b >= 0 && a != b) {
      const ir_link_rec *ab = ir_module_link(m, a, b), *ba = ir_module_link(m, b, a);
      if (!ab || !ba || !(ab->bw > 0) || !(ba->bw > 0)) {
        int x = ab && ab->bw > 0 ? b : a, y = ab && ab->bw > 0 ? a : b;
        diag_error(d, stage_loc(m, sh, where), "no link from $d%d to $d%d, which exchange the "
                   "gradient of the matrix that the tied lm_head %%%d \"%s\" (@s%d) shares with "
                   "embedding %%%d \"%s\" (@s%d): give the cluster an %s link or an explicit "
                   "'link $d%d -> $d%d'", x, y, thead, m->layers[thead].name, sh, temb,
                   m->layers[temb].name, se,
                   m->devices[x].rec.node == m->devices[y].rec.node ? "intra" : "inter", x, y);
        errors++;
      } else {
        double bytes = ir_layer_cost_on(m, &m->layers[temb], a)->grad;
        double t = fmax(ring_allreduce(ab, bytes, 2), ring_allreduce(ba, bytes, 2));
        step += t;
        if (!step_within_limit(step, d, where)) {
          errors++;
        } else if (to_tick(t) > 0) { /* no gradient bytes (custom costs): nothing to exchange */
          p->tie_dev[0] = a;
          p->tie_dev[1] = b;
          p->tie = to_tick(t);
          p->dev[a].tie = p->dev[b].tie = p->tie;
        }
      }
    }
  }
  if (errors) {
    sim_model_free(p);
    return NULL;
  }

  /* Stages grouped by device, and the lower bounds. */
  for (int s = 0; s < m->nstages; s++) p->dev[p->st[s].dev].nstages++;
  for (int dv = 0, at = 0; dv < m->ndevices; dv++) {
    p->dev[dv].first_stage = at;
    at += p->dev[dv].nstages;
    p->dev[dv].nstages = 0;
  }
  /* A device cannot start before the first microbatch's forwards reach its earliest stage. */
  tick head = 0;
  for (int dv = 0; dv < m->ndevices; dv++) p->dev[dv].head = -1;
  for (int s = 0; s < m->nstages; s++) {
    sim_dev *x = &p->dev[p->st[s].dev];
    p->dev_stages[x->first_stage + x->nstages++] = s;
    x->work += nmb * (p->st[s].t[SL_F] + p->st[s].t[SL_B] + p->st[s].t[SL_W]);
    if (x->head < 0) x->head = head;
    head += p->st[s].t[SL_F] + p->st[s].x_next;
  }
  tick cp = 0;
  for (int s = 0; s < m->nstages; s++)
    cp += p->st[s].t[SL_F] + p->st[s].x_next + p->st[s].t[SL_B] + p->st[s].x_prev;
  const sim_dev *d0 = &p->dev[p->st[0].dev];
  /* the tied exchange too when stage 0's device takes part: it starts after that device's
   * reduction and ends before its optimizer step */
  p->lb_critical = cp + p->st[0].t[SL_W] + d0->allreduce + d0->tie + d0->optim + d0->gather;
  for (int dv = 0; dv < m->ndevices; dv++) p->dev[dv].work += p->dev[dv].optim;
  return p;
}

/* ---- Engine ---------------------------------------------------------------------------------*/

/* A pending event: an operation ending, a tensor arriving for an operation, or a copy between
 * device and host memory of an offloading stage ending. */
typedef struct sim_event {
  tick time;    /* when */
  uint32_t seq; /* posting order: breaks ties deterministically */
  int32_t code; /* op id * 2 + (0: operation done, 1: input arrived); negative: -1 - (op id * 2 +
                   (0: F's activations reached the host, 1: B's came back)) */
} sim_event;

/* Run state of one operation slot. */
typedef struct sim_wop {
  uint8_t deps;  /* inputs not yet arrived */
  uint8_t state; /* low bits 0 not started, 1 running, 2 done; 0x10: in the schedule, 0x20:
                    scheduled as a fused BW (fixed mode); 0x40 (B of an offloading stage): its
                    activations' copy back is posted */
} sim_wop;

/* Run state of one device. */
typedef struct sim_wdev {
  int pos;        /* fixed mode: next index in the device's order; priority: ops started;
                     finished: -1 - that count */
  int running;    /* op running on the device, -1 when idle */
  bool fused;     /* the running op is a fused BW */
  double mem;     /* memory in use */
  int remaining;  /* operations not yet started */
  tick left;      /* compute not yet started: its operations', its tied exchange and optimizer
                     step (for sim_opts.cutoff) */
  int inflight;   /* F started and W (or BW) not finished */
  tick busy;      /* compute time so far */
  tick comm;      /* end-of-step communication so far: reductions, the tied exchange */
  tick end;       /* when its step ends (after finishing) */
  tick ready;     /* a device of the tied exchange: when its gradients were reduced */
  int event;      /* recorded runs: the timeline index of the running operation's event */
  int out;        /* copies to host memory in flight: its next F waits until they end (the
                     runtime frees their buffers before it) */
  int nready;     /* priority mode: entries of its ready list (sim_work.ready) */
  bool at_tie;    /* it waits at the exchange for its twin (sim_model.tie_dev) */
} sim_wdev;

/* Scratch of a run, kept in sim_result.work between runs. */
typedef struct sim_work {
  sim_wop *op;        /* per op id */
  size_t nops_cap;    /* capacity of 'op' */
  sim_wdev *dev;      /* per device */
  int dev_cap;        /* capacity of 'dev' */
  int *next_mb;       /* priority mode: per stage and slot, next microbatch to offer */
  int *ready;         /* priority mode: per device dv, from SL_N x its first_stage on, the
                         stage-and-slot keys (s * SL_N + slot) whose next microbatch has all its
                         inputs (sim_wdev.nready of them, ascending: the order offered) */
  int stage_cap;      /* capacity of next_mb and ready */
  tick *grad_ready;   /* per stage: when its last backward (W or BW) started so far ends ... */
  tick *grad_start;   /* ... and when it started */
  int ready_cap;      /* capacity of both */
  tick *link_free;    /* per link: when it finishes its queued transfers */
  int link_cap;       /* capacity of link_free */
  tick *host_free;    /* per device dv: [2 dv] when its copies to host memory, [2 dv + 1] its
                         copies back, finish the ones queued */
  int host_cap;       /* capacity of host_free, in devices */
  int *defer;         /* B ops (of offloading stages) whose copy back waits for memory, in the
                         order they became due */
  int ndefer, defer_cap; /* entries, allocated */
  sim_event *heap;    /* pending events */
  int nheap, heap_cap; /* events pending, allocated */
  uint32_t seq;       /* next event sequence number */
  sim_cand *cands;    /* priority mode: candidates offered (room for stage_cap) */
} sim_work;

/* Heap order of events: earlier time first, then earlier posting. */
static bool ev_less(const sim_event *a, const sim_event *b) {
  return a->time < b->time || (a->time == b->time && a->seq < b->seq);
}

/* Add an event (time, code) with the next sequence number. */
static void heap_push(sim_work *w, tick time, int32_t code) {
  VEC_RESERVE(w->heap, w->nheap, w->heap_cap);
  int i = w->nheap++;
  sim_event e = {time, w->seq++, code};
  while (i > 0) {
    int parent = (i - 1) / 2;
    if (!ev_less(&e, &w->heap[parent])) break;
    w->heap[i] = w->heap[parent];
    i = parent;
  }
  w->heap[i] = e;
}

/* Remove and return the first event. Pre: the heap is not empty. */
static sim_event heap_pop(sim_work *w) {
  sim_event top = w->heap[0], last = w->heap[--w->nheap];
  int i = 0, n = w->nheap;
  for (;;) {
    int c = 2 * i + 1;
    if (c >= n) break;
    if (c + 1 < n && ev_less(&w->heap[c + 1], &w->heap[c])) c++;
    if (!ev_less(&w->heap[c], &last)) break;
    w->heap[i] = w->heap[c];
    i = c;
  }
  if (n > 0) w->heap[i] = last;
  return top;
}

/* Everything one run works with. */
typedef struct sim_ctx {
  const sim_model *p; /* the problem */
  const ir_module *m; /* its module (fixed mode reads the schedules) */
  const sim_opts *o;  /* how to run */
  sim_result *r;      /* what the run fills */
  sim_work *w;        /* its scratch (r->work) */
  tick now;           /* current time */
  int done_devs;      /* devices that finished their step */
  tick cutoff;        /* sim_opts.cutoff in ticks (0: none) */
  bool cut;           /* the step provably ends after the cutoff: stop */
} sim_ctx;

/* Op id of slot 'slot' of stage s, microbatch mb (see SL_F; fits an int: SIM_MAX_OPS). */
static inline int op_id(const sim_model *p, int s, int mb, int slot) {
  return (s << p->mb_shift | mb) << SL_BITS | slot;
}

/* Stage, microbatch and slot of op id op. */
static inline int op_stage(const sim_model *p, int op) { return op >> SL_BITS >> p->mb_shift; }
static inline int op_mb(const sim_model *p, int op) {
  return (op >> SL_BITS) & ((1 << p->mb_shift) - 1);
}
static inline int op_slot(int op) { return op & ((1 << SL_BITS) - 1); }

/* Op ids of a problem: one past the largest. */
static size_t op_count(const sim_model *p) { return (size_t)p->nstages << p->mb_shift << SL_BITS; }

/* Resize scratch array 'a' to n elements of size 'sz' (at least one, so never NULL). */
static void *grow(void *a, size_t sz, size_t n) { return xrealloc(a, (n ? n : 1) * sz); }

/* Make the scratch fit p and reset it for a run. */
static void work_reset(sim_work *w, const sim_model *p) {
  size_t nops = op_count(p);
  if (nops > w->nops_cap) {
    w->op = grow(w->op, sizeof *w->op, nops);
    w->nops_cap = nops;
  }
  if (p->ndev > w->dev_cap) {
    w->dev = grow(w->dev, sizeof *w->dev, (size_t)p->ndev);
    w->dev_cap = p->ndev;
  }
  if (p->nstages * SL_N > w->stage_cap) {
    w->next_mb = grow(w->next_mb, sizeof(int), (size_t)p->nstages * SL_N);
    w->ready = grow(w->ready, sizeof(int), (size_t)p->nstages * SL_N);
    w->cands = grow(w->cands, sizeof *w->cands, (size_t)p->nstages * SL_N);
    w->stage_cap = p->nstages * SL_N;
  }
  if (p->nstages > w->ready_cap) {
    w->grad_ready = grow(w->grad_ready, sizeof(tick), (size_t)p->nstages);
    w->grad_start = grow(w->grad_start, sizeof(tick), (size_t)p->nstages);
    w->ready_cap = p->nstages;
  }
  for (int s = 0; s < p->nstages; s++) w->grad_ready[s] = w->grad_start[s] = 0;
  if (p->nlinks > w->link_cap) {
    w->link_free = grow(w->link_free, sizeof(tick), p->nlinks);
    w->link_cap = p->nlinks;
  }
  memset(w->op, 0, nops * sizeof *w->op);
  for (int s = 0; s < p->nstages; s++) {
    /* an offloading stage's B also waits for its activations' copy to the host and back (it
     * counts F's end as the first of these) */
    uint8_t df = s > 0, db = (uint8_t)(1 + (s + 1 < p->nstages) + p->st[s].offload), dw = 1;
    for (int mb = 0; mb < p->nmb; mb++) {
      int base = op_id(p, s, mb, 0);
      w->op[base + SL_F].deps = df;
      w->op[base + SL_B].deps = db;
      w->op[base + SL_W].deps = dw;
    }
  }
  for (int dv = 0; dv < p->ndev; dv++)
    w->dev[dv] = (sim_wdev){.running = -1, .mem = p->dev[dv].static_mem};
  for (int i = 0; i < p->nstages * SL_N; i++) w->next_mb[i] = 0;
  for (int i = 0; i < p->nlinks; i++) w->link_free[i] = 0;
  if (p->ndev > w->host_cap) {
    w->host_free = grow(w->host_free, 2 * sizeof(tick), (size_t)p->ndev);
    w->host_cap = p->ndev;
  }
  for (int i = 0; i < 2 * p->ndev; i++) w->host_free[i] = 0;
  w->ndefer = 0;
  w->nheap = 0;
  w->seq = 0;
}

/* Record an operation of the timeline (mem and mem_start as sim_op_event says). */
static void record_op(sim_ctx *c, int kind, int dev, int s, int mb, tick start, tick end,
                      double mem, double mem_start) {
  sim_result *r = c->r;
  sim_op_event e = {(ir_op_kind)kind, dev, s, mb, to_s(start), to_s(end), mem, mem_start};
  VEC_PUSH(r->ops, r->nops, r->ops_cap, e);
}

/* Priority mode: the next microbatch of stage s's slot has all its inputs: add the key to its
 * device's ready list, in order. */
static void ready_add(sim_ctx *c, int s, int slot) {
  const sim_model *p = c->p;
  sim_wdev *wd = &c->w->dev[p->st[s].dev];
  int *list = c->w->ready + (size_t)p->dev[p->st[s].dev].first_stage * SL_N;
  int key = s * SL_N + slot, i = wd->nready++;
  for (; i > 0 && list[i - 1] > key; i--) list[i] = list[i - 1];
  list[i] = key;
}

/* One input of 'op' has arrived (operations start at the current time, so only the count of
 * missing inputs matters); in priority mode, the op joins its device's ready list when that was
 * its last input and it is its stage's next of its kind to offer. */
static inline void satisfy(sim_ctx *c, int op) {
  sim_work *w = c->w;
  if (--w->op[op].deps != 0 || !c->o->choose) return;
  int slot = op_slot(op), s = op_stage(c->p, op);
  if (w->next_mb[s * SL_N + slot] == op_mb(c->p, op) && !(slot == SL_W && c->o->fused_bw))
    ready_add(c, s, slot);
}

/* Send a tensor to 'op' (input of stage s2) over link 'link' taking 'dur', posted at now. */
static void transfer(sim_ctx *c, int link, tick dur, int op, ir_op_kind kind, int s1, int s2,
                     int mb, double bytes) {
  sim_work *w = c->w;
  tick start = w->link_free[link] > c->now ? w->link_free[link] : c->now;
  tick end = start + dur;
  w->link_free[link] = end;
  heap_push(w, end, op * 2 + 1);
  if (c->o->record) {
    sim_transfer x = {kind,  c->p->st[s1].dev, c->p->st[s2].dev, s1,        s2,
                      mb,    bytes,            to_s(c->now),     to_s(start), to_s(end)};
    VEC_PUSH(c->r->xfers, c->r->nxfers, c->r->xfers_cap, x);
  }
}

/* Device dv's memory grew at now for operation (kind, s, mb): note a new peak. */
static void note_peak(sim_ctx *c, int dv, ir_op_kind kind, int s, int mb) {
  sim_wdev *wd = &c->w->dev[dv];
  sim_device_stats *ds = &c->r->dev[dv];
  if (wd->mem <= ds->peak_mem) return;
  ds->peak_mem = wd->mem;
  ds->peak_op = wd->pos;
  ds->peak_at = (ir_op){kind, s, mb};
  ds->peak_time = to_s(c->now);
}

/* Post a copy of an offloading stage's activations of one microbatch over its device's PCIe
 * link at now, queued behind the earlier ones of its direction: back = false, to the host (op
 * is the F that ended); back = true, back to the device for its B (op), allocated at once. */
static void host_copy(sim_ctx *c, int op, bool back) {
  const sim_model *p = c->p;
  sim_work *w = c->w;
  int s = op_stage(p, op), mb = op_mb(p, op);
  const sim_stage *st = &p->st[s];
  int dv = st->dev;
  sim_wdev *wd = &w->dev[dv];
  tick *q = &w->host_free[2 * dv + back];
  tick start = *q > c->now ? *q : c->now, end = start + st->host;
  *q = end;
  heap_push(w, end, -1 - (op * 2 + back));
  if (!back) { /* recorded when it ends (host_done) */
    wd->out++;
    return;
  }
  w->op[op].state |= 0x40;
  wd->mem += st->act;
  bool fused = (w->op[op].state & 0x20) || (c->o->choose && c->o->fused_bw);
  note_peak(c, dv, fused ? IR_OP_BW : IR_OP_B, s, mb);
  if (c->o->host) c->o->host(c->o->ctx, dv, s, mb, true);
  if (c->o->record) record_op(c, SIM_OP_RELOAD, dv, s, mb, c->now, end, wd->mem, wd->mem);
}

/* Whether B op's activations fit back in their device's memory now (within its limit). */
static bool reload_fits(const sim_ctx *c, int op) {
  const sim_stage *st = &c->p->st[op_stage(c->p, op)];
  double lim = c->p->dev[st->dev].mem_limit;
  return c->w->dev[st->dev].mem + st->act <= lim + 1e-9 * lim;
}

/* Device dv's memory shrank: post the copies back that wait for it, in the order they became
 * due, as long as the next one fits. */
static void retry_reloads(sim_ctx *c, int dv) {
  sim_work *w = c->w;
  int k = 0;
  bool blocked = false;
  for (int i = 0; i < w->ndefer; i++) {
    int op = w->defer[i];
    if (c->p->st[op_stage(c->p, op)].dev != dv || blocked || !reload_fits(c, op)) {
      blocked |= c->p->st[op_stage(c->p, op)].dev == dv;
      w->defer[k++] = op;
    } else {
      host_copy(c, op, true);
    }
  }
  w->ndefer = k;
}

/* An input of op arrived (a tensor, or its F's end): count it; for the B of an offloading stage
 * whose input gradient has arrived and whose activations reached the host, post their copy back
 * (the last input it then waits for) when it fits in memory and none due earlier on the device
 * waits, else queue it for retry_reloads. */
static void arrive(sim_ctx *c, int op) {
  sim_work *w = c->w;
  satisfy(c, op);
  if (op_slot(op) != SL_B || !c->p->st[op_stage(c->p, op)].offload || w->op[op].deps != 1 ||
      (w->op[op].state & 0x40))
    return;
  int dv = c->p->st[op_stage(c->p, op)].dev;
  bool queued = false;
  for (int i = 0; i < w->ndefer && !queued; i++)
    queued = c->p->st[op_stage(c->p, w->defer[i])].dev == dv;
  if (!queued && reload_fits(c, op)) {
    host_copy(c, op, true);
  } else {
    w->op[op].state |= 0x40; /* due: posted by retry_reloads */
    VEC_PUSH(w->defer, w->ndefer, w->defer_cap, op);
  }
}

/* The copy to the host of F op's activations (an offloading stage's) ended at now: the device
 * frees them. */
static void host_done(sim_ctx *c, int op) {
  const sim_model *p = c->p;
  int s = op_stage(p, op), mb = op_mb(p, op), dv = p->st[s].dev;
  sim_wdev *wd = &c->w->dev[dv];
  wd->mem -= p->st[s].act;
  wd->out--;
  if (c->o->host) c->o->host(c->o->ctx, dv, s, mb, false);
  if (c->o->record)
    record_op(c, SIM_OP_OFFLOAD, dv, s, mb, c->now - p->st[s].host, c->now, wd->mem, wd->mem);
  if (c->w->ndefer) retry_reloads(c, dv);
}

/* Start op (slot 'slot' of stage s, microbatch mb; fused: a BW) on device dv at now. */
static void start_op(sim_ctx *c, int dv, int s, int mb, int slot, bool fused) {
  const sim_model *p = c->p;
  sim_work *w = c->w;
  const sim_stage *st = &p->st[s];
  sim_wdev *wd = &w->dev[dv];
  int op = op_id(p, s, mb, slot);
  tick dur = st->t[slot] + (fused ? st->t[SL_W] : 0);
  w->op[op].state = (uint8_t)((w->op[op].state & 0xf0) | 1);
  wd->running = op;
  wd->fused = fused;
  wd->remaining--;
  if (c->cutoff > 0 && c->now + wd->left > c->cutoff) c->cut = true;
  wd->left -= dur;
  wd->busy += dur;
  if ((slot == SL_W || fused) && c->now + dur > w->grad_ready[s]) {
    w->grad_ready[s] = c->now + dur;
    w->grad_start[s] = fused ? c->now + st->t[SL_B] : c->now; /* a BW's W part comes last */
  }
  /* Memory that grows at the start: F's activations; a recomputing stage's B (or BW) the state
   * it rebuilds, while F's activations are still held. */
  double grow = slot == SL_F ? st->act : slot == SL_B ? st->rebuild : 0;
  if (slot == SL_F) wd->inflight++;
  if (slot == SL_F || grow > 0) {
    wd->mem += grow;
    note_peak(c, dv, fused ? IR_OP_BW : (ir_op_kind)slot, s, mb);
  }
  if (c->r->order) ir_schedule_push(&c->r->order[dv], fused ? IR_OP_BW : (ir_op_kind)slot, s, mb);
  wd->pos++;
  if (c->o->record) { /* a backward's memory after its end is written by op_done */
    record_op(c, fused ? IR_OP_BW : slot, dv, s, mb, c->now, c->now + dur, wd->mem, wd->mem);
    wd->event = c->r->nops - 1;
  }
  heap_push(w, c->now + dur, op * 2);
}

/* The end of dv's step from t, when its gradients are final (reduced, and summed with the tied
 * copy's): the optimizer step, then ZeRO-1's all-gather; sets its end. */
static void finish_optim(sim_ctx *c, int dv, tick t) {
  const sim_dev *x = &c->p->dev[dv];
  sim_wdev *wd = &c->w->dev[dv];
  if (x->optim > 0) {
    if (c->o->record) record_op(c, SIM_OP_OPTIM, dv, -1, -1, t, t + x->optim, wd->mem, wd->mem);
    wd->busy += x->optim;
    t += x->optim;
  }
  if (x->gather > 0) {
    if (c->o->record)
      record_op(c, SIM_OP_ALLGATHER, dv, -1, -1, t, t + x->gather, wd->mem, wd->mem);
    wd->comm += x->gather;
    t += x->gather;
  }
  wd->end = t;
}

/* Device dv has no operation left: run its end-of-step work and mark it finished. A device of
 * the tied exchange whose twin has not finished yet waits there (its end provisional, the
 * reduction's); the twin's finish runs the exchange for both, from when both are ready, and
 * then each one's optimizer step. */
static void finish_device(sim_ctx *c, int dv) {
  const sim_dev *x = &c->p->dev[dv];
  sim_wdev *wd = &c->w->dev[dv];
  const sim_model *p = c->p;
  tick t = c->now;
  /* overlapped buckets: each stage's, as its last backward makes them ready, one at a time in
   * the order they become ready (stages by the end of their last backward) */
  tick link = 0;
  bool *done = NULL;
  for (int k = 0; k < x->nstages; k++) {
    int pick = -1;
    for (int i = 0; i < x->nstages; i++) {
      int s = p->dev_stages[x->first_stage + i];
      if (p->st[s].nbuckets == 0 || (done && done[i])) continue;
      if (pick < 0 || c->w->grad_ready[s] < c->w->grad_ready[p->dev_stages[x->first_stage + pick]])
        pick = i;
    }
    if (pick < 0) break;
    if (!done) done = xcalloc((size_t)x->nstages, sizeof *done);
    done[pick] = true;
    int s = p->dev_stages[x->first_stage + pick];
    tick t0 = c->w->grad_start[s], len = c->w->grad_ready[s] - t0;
    for (int j = 0; j < p->st[s].nbuckets; j++) {
      const sim_bucket *b = &p->bucket[p->st[s].first_bucket + j];
      tick ready = t0 + (tick)llround(b->frac * (double)len);
      tick start = link > ready ? link : ready;
      link = start + b->comm;
      if (c->o->record)
        record_op(c, p->reduce_kind, dv, -1, -1, start, link, wd->mem, wd->mem);
      wd->comm += b->comm;
    }
  }
  free(done);
  if (link > t) t = link;
  if (x->allreduce > 0) {
    if (c->o->record)
      record_op(c, p->reduce_kind, dv, -1, -1, t, t + x->allreduce, wd->mem, wd->mem);
    wd->comm += x->allreduce;
    t += x->allreduce;
  }
  wd->pos = -1 - wd->pos; /* finished: keep the count, negative */
  c->done_devs++;
  int k = p->tie_dev[0] == dv ? 0 : p->tie_dev[1] == dv ? 1 : -1;
  if (k < 0) {
    finish_optim(c, dv, t);
    return;
  }
  sim_wdev *twin = &c->w->dev[p->tie_dev[1 - k]];
  if (!twin->at_tie) { /* the first of the two: wait for the other */
    wd->ready = wd->end = t;
    wd->at_tie = true;
    return;
  }
  tick start = twin->ready > t ? twin->ready : t, end = start + p->tie;
  twin->at_tie = false;
  for (int j = 0; j < 2; j++) { /* the embedding's device, then the lm_head's */
    int e = p->tie_dev[j];
    sim_wdev *we = &c->w->dev[e];
    if (c->o->record) record_op(c, SIM_OP_TIE, e, -1, -1, start, end, we->mem, we->mem);
    we->comm += p->tie;
    finish_optim(c, e, end);
  }
}

/* Priority mode: offer dv its ready operations (its ready list's, an F only once its copies to
 * host memory in flight ended) and start the one the callback picks; the stage's next
 * microbatch of that kind joins the list when its inputs are all there. */
static void offer(sim_ctx *c, int dv) {
  const sim_model *p = c->p;
  sim_work *w = c->w;
  sim_wdev *wd = &w->dev[dv];
  int *list = w->ready + (size_t)p->dev[dv].first_stage * SL_N, n = 0;
  for (int i = 0; i < wd->nready; i++) {
    int s = list[i] / SL_N, slot = list[i] % SL_N;
    if (slot == SL_F && wd->out) continue; /* after the copies to host in flight */
    bool fb = slot == SL_B && c->o->fused_bw;
    w->cands[n++] = (sim_cand){fb ? IR_OP_BW : (ir_op_kind)slot, s, w->next_mb[list[i]],
                               slot == SL_F ? p->st[s].act : 0,
                               slot == SL_B ? p->st[s].rebuild : 0};
  }
  if (n == 0) return;
  sim_view v = {c->now, dv, wd->mem, p->dev[dv].mem_limit, wd->inflight};
  int k = c->o->choose(c->o->ctx, &v, w->cands, n);
  if (k < 0 || k >= n) return; /* offered again when one of its inputs arrives */
  const sim_cand *cd = &w->cands[k];
  int s = cd->stage, slot = cd->kind == IR_OP_F ? SL_F : cd->kind == IR_OP_W ? SL_W : SL_B;
  int key = s * SL_N + slot, i = 0;
  while (list[i] != key) i++;
  for (wd->nready--; i < wd->nready; i++) list[i] = list[i + 1];
  int next = ++w->next_mb[key];
  start_op(c, dv, s, cd->mb, slot, cd->kind == IR_OP_BW);
  if (next < p->nmb && w->op[op_id(p, s, next, slot)].deps == 0) ready_add(c, s, slot);
}

/* Device dv is idle at now: start what it can. */
static void try_start(sim_ctx *c, int dv) {
  const sim_wdev *wd = &c->w->dev[dv];
  if (wd->running >= 0 || wd->pos < 0) return;
  if (wd->remaining == 0) {
    finish_device(c, dv);
    return;
  }
  if (c->o->choose) {
    offer(c, dv);
    return;
  }
  const ir_op *o = &c->m->schedules[dv].ops[wd->pos];
  int slot = o->kind == IR_OP_F ? SL_F : o->kind == IR_OP_W ? SL_W : SL_B;
  if (c->w->op[op_id(c->p, o->stage, o->mb, slot)].deps != 0 || (slot == SL_F && wd->out)) return;
  start_op(c, dv, o->stage, o->mb, slot, o->kind == IR_OP_BW);
}

/* Operation op (on device dv) ended at now: free memory, hand its output on, free the device. */
static void op_done(sim_ctx *c, int op) {
  const sim_model *p = c->p;
  sim_work *w = c->w;
  int slot = op_slot(op), s = op_stage(p, op), mb = op_mb(p, op);
  const sim_stage *st = &p->st[s];
  int dv = st->dev;
  sim_wdev *wd = &w->dev[dv];
  bool fused = wd->fused;
  wd->running = -1;
  w->op[op].state = (uint8_t)((w->op[op].state & 0xf0) | 2);
  if (slot == SL_F) {
    if (st->offload)
      host_copy(c, op, false);
    else
      satisfy(c, op + SL_B);
    if (s + 1 < p->nstages) {
      int nxt = op_id(p, s + 1, mb, SL_F);
      if (st->link_next < 0) {
        satisfy(c, nxt);
      } else {
        transfer(c, st->link_next, st->x_next, nxt, IR_OP_F, s, s + 1, mb, st->out_bytes);
      }
    }
  } else if (slot == SL_B) {
    if (fused) {
      w->op[op + 1].state = (uint8_t)((w->op[op + 1].state & 0xf0) | 2);
      wd->mem -= st->act + st->rebuild;
      wd->inflight--;
    } else {
      wd->mem -= st->act - st->act_w; /* the rebuilt state stays with act_w until W */
      satisfy(c, op + 1);
    }
    if (s > 0) {
      int prv = op_id(p, s - 1, mb, SL_B);
      if (st->link_prev < 0)
        arrive(c, prv);
      else
        transfer(c, st->link_prev, st->x_prev, prv, IR_OP_B, s, s - 1, mb, st->in_bytes);
    }
  } else {
    wd->mem -= st->act_w + st->rebuild;
    wd->inflight--;
  }
  /* a backward's memory after its end (a copy to the host may have ended meanwhile) */
  if (c->o->record && slot != SL_F) c->r->ops[wd->event].mem = wd->mem;
  if (w->ndefer && slot != SL_F) retry_reloads(c, dv);
  try_start(c, dv);
}

/* Fixed mode: check that the module's schedules hold every operation of the problem exactly once,
 * on the right device, and count each device's operations. Returns false with r->why set. */
static bool check_schedule(sim_ctx *c) {
  const sim_model *p = c->p;
  const ir_module *m = c->m;
  sim_work *w = c->w;
  if (!m->schedules) {
    snprintf(c->r->why, sizeof c->r->why, "the module has no schedule: run a schedule pass first");
    return false;
  }
  for (int dv = 0; dv < p->ndev; dv++) {
    const ir_schedule *sc = &m->schedules[dv];
    for (int i = 0; i < sc->nops; i++) {
      const ir_op *o = &sc->ops[i];
      const char *kn = o->kind < IR_OP_COUNT ? ir_op_names[o->kind] : "?";
      if (o->stage < 0 || o->stage >= p->nstages || o->mb < 0 || o->mb >= p->nmb ||
          o->kind >= IR_OP_COUNT) {
        snprintf(c->r->why, sizeof c->r->why, "$d%d #%d: %s @s%d %d is out of range", dv, i, kn,
                 o->stage, o->mb);
        return false;
      }
      if (p->st[o->stage].dev != dv) {
        snprintf(c->r->why, sizeof c->r->why, "$d%d #%d: %s @s%d %d belongs to $d%d", dv, i, kn,
                 o->stage, o->mb, p->st[o->stage].dev);
        return false;
      }
      int base = op_id(p, o->stage, o->mb, 0);
      int slots[2] = {o->kind == IR_OP_F ? SL_F : o->kind == IR_OP_W ? SL_W : SL_B,
                      o->kind == IR_OP_BW ? SL_W : -1};
      for (int k = 0; k < 2 && slots[k] >= 0; k++) {
        if (w->op[base + slots[k]].state & 0x10) {
          snprintf(c->r->why, sizeof c->r->why, "$d%d #%d: %s @s%d %d repeats an operation "
                   "scheduled before", dv, i, kn, o->stage, o->mb);
          return false;
        }
        w->op[base + slots[k]].state |= 0x10;
      }
      if (o->kind == IR_OP_BW) w->op[base + SL_B].state |= 0x20;
    }
    w->dev[dv].remaining = sc->nops;
  }
  for (int s = 0; s < p->nstages; s++)
    for (int mb = 0; mb < p->nmb; mb++)
      for (int slot = 0; slot < SL_N; slot++)
        if (!(w->op[op_id(p, s, mb, slot)].state & 0x10)) {
          snprintf(c->r->why, sizeof c->r->why, "%s @s%d %d is missing from the schedule of $d%d",
                   slot == SL_B ? "B (or BW)" : ir_op_names[slot], s, mb, p->st[s].dev);
          return false;
        }
  return true;
}

/* The op that blocks op (not yet done), and its device; returns false when none does. */
static bool blocker(const sim_ctx *c, int s, int mb, int slot, ir_op *waits, int *dev) {
  const sim_model *p = c->p;
  const sim_wop *ops = c->w->op;
  int cand[2][2] = {{-1, -1}, {-1, -1}}; /* (stage, slot) of its inputs */
  if (slot == SL_F) {
    if (s > 0) cand[0][0] = s - 1, cand[0][1] = SL_F;
  } else if (slot == SL_B) {
    cand[0][0] = s, cand[0][1] = SL_F;
    if (s + 1 < p->nstages) cand[1][0] = s + 1, cand[1][1] = SL_B;
  } else {
    cand[0][0] = s, cand[0][1] = SL_B;
  }
  for (int k = 0; k < 2; k++) {
    if (cand[k][0] < 0) continue;
    if ((ops[op_id(p, cand[k][0], mb, cand[k][1])].state & 0xf) != 2) {
      int op = op_id(p, cand[k][0], mb, cand[k][1]);
      bool fused = (ops[op].state & 0x20) || (c->o->choose && c->o->fused_bw && cand[k][1] == SL_B);
      *waits = (ir_op){fused ? IR_OP_BW : (ir_op_kind)cand[k][1], cand[k][0], mb};
      *dev = p->st[cand[k][0]].dev;
      return true;
    }
  }
  return false;
}

/* No event is left but some device has work: record who waits for what. */
static void collect_stuck(sim_ctx *c) {
  const sim_model *p = c->p;
  sim_work *w = c->w;
  sim_result *r = c->r;
  for (int dv = 0; dv < p->ndev; dv++) {
    if (w->dev[dv].pos < 0) continue;
    sim_stuck st = {dv, -1, {IR_OP_F, -1, -1}, {IR_OP_F, -1, -1}, -1, false};
    if (!c->o->choose) {
      const ir_op *o = &c->m->schedules[dv].ops[w->dev[dv].pos];
      int slot = o->kind == IR_OP_F ? SL_F : o->kind == IR_OP_W ? SL_W : SL_B;
      st.index = w->dev[dv].pos;
      st.op = *o;
      int op = op_id(p, o->stage, o->mb, slot);
      if (!blocker(c, o->stage, o->mb, slot, &st.waits, &st.waits_on))
        st.memory = slot == SL_B && (w->op[op].state & 0x40) && w->op[op].deps != 0;
    } else {
      /* Priority mode: the first stage's next operation that is not ready, or a declined one. */
      const sim_dev *x = &p->dev[dv];
      for (int i = 0; i < x->nstages && st.op.stage < 0; i++) {
        int s = p->dev_stages[x->first_stage + i];
        for (int slot = 0; slot < SL_N && st.op.stage < 0; slot++) {
          if (slot == SL_W && c->o->fused_bw) continue;
          int mb = w->next_mb[s * SL_N + slot];
          if (mb >= p->nmb) continue;
          bool fb = slot == SL_B && c->o->fused_bw;
          st.op = (ir_op){fb ? IR_OP_BW : (ir_op_kind)slot, s, mb};
          blocker(c, s, mb, slot, &st.waits, &st.waits_on);
        }
      }
    }
    VEC_PUSH(r->stuck, r->nstuck, r->stuck_cap, st);
  }
}

sim_status sim_run(const sim_model *p, const ir_module *m, const sim_opts *opts, sim_result *r) {
  static const sim_opts none = {0};
  if (!opts) opts = &none;
  if (!r->work) r->work = xcalloc(1, sizeof(sim_work));
  sim_work *w = r->work;
  work_reset(w, p);
  r->status = SIM_OK;
  r->nops = r->nxfers = r->nstuck = 0;
  r->why[0] = 0;
  if (r->ndevices != p->ndev || !r->dev) {
    free(r->dev);
    r->dev = xcalloc((size_t)(p->ndev ? p->ndev : 1), sizeof *r->dev);
    if (r->order) {
      for (int i = 0; i < r->ndevices; i++) free(r->order[i].ops);
      free(r->order);
      r->order = NULL;
    }
    r->ndevices = p->ndev;
  }
  for (int dv = 0; dv < p->ndev; dv++) {
    r->dev[dv] = (sim_device_stats){0};
    r->dev[dv].static_mem = r->dev[dv].peak_mem = p->dev[dv].static_mem;
    r->dev[dv].mem_limit = p->dev[dv].mem_limit;
    r->dev[dv].peak_op = -1;
    r->dev[dv].peak_at = (ir_op){IR_OP_F, -1, -1};
  }
  if (opts->choose)
    for (int dv = 0; dv < p->ndev; dv++)
      w->dev[dv].remaining = p->dev[dv].nstages * p->nmb * (opts->fused_bw ? 2 : 3);
  if (opts->choose && opts->order) {
    if (!r->order) r->order = xcalloc((size_t)(p->ndev ? p->ndev : 1), sizeof *r->order);
    for (int dv = 0; dv < p->ndev; dv++) r->order[dv].nops = 0;
  } else if (r->order) {
    for (int i = 0; i < r->ndevices; i++) free(r->order[i].ops);
    free(r->order);
    r->order = NULL;
  }
  sim_ctx c = {p, m, opts, r, w, 0, 0, opts->cutoff > 0 ? to_tick(opts->cutoff) : 0, false};
  for (int dv = 0; dv < p->ndev; dv++) w->dev[dv].left = p->dev[dv].work + p->dev[dv].tie;
  if (!opts->choose && !check_schedule(&c)) {
    r->status = SIM_INVALID;
    return r->status;
  }
  for (int s = 0; opts->choose && s < p->nstages; s++) /* the first stage's F, in effect */
    for (int slot = 0; slot < SL_N; slot++)
      if (w->op[op_id(p, s, 0, slot)].deps == 0 && !(slot == SL_W && opts->fused_bw))
        ready_add(&c, s, slot);
  for (int dv = 0; dv < p->ndev; dv++) try_start(&c, dv);
  for (unsigned nev = 1; w->nheap > 0 && !c.cut; nev++) {
    if (opts->stop && nev % SIM_STOP_EVERY == 0 && opts->stop(opts->stop_ctx)) {
      r->status = SIM_STOPPED;
      snprintf(r->why, sizeof r->why, "stopped by the caller");
      return r->status;
    }
    sim_event e = heap_pop(w);
    c.now = e.time;
    int code = e.code < 0 ? -1 - e.code : e.code, op = code >> 1;
    if (e.code < 0 && !(code & 1)) { /* F's activations reached the host: now B's input */
      host_done(&c, op);
      int dv = p->st[op_stage(p, op)].dev;
      if (!w->dev[dv].out && w->dev[dv].running < 0) try_start(&c, dv); /* its F may go on */
      op += SL_B - SL_F;
    }
    if (e.code < 0 || (e.code & 1)) {
      arrive(&c, op);
      /* Only an input that makes its operation startable can change what an idle device does:
       * in priority mode, the operation must also be its stage's next of its kind. */
      int s = op_stage(p, op), dv = p->st[s].dev;
      if (w->dev[dv].running < 0 && w->op[op].deps == 0 &&
          (!opts->choose || w->next_mb[s * SL_N + op_slot(op)] == op_mb(p, op)))
        try_start(&c, dv);
    } else {
      op_done(&c, op);
    }
  }
  if (c.cut) {
    r->status = SIM_CUTOFF;
    snprintf(r->why, sizeof r->why, "the step ends after the cutoff of %g s", opts->cutoff);
    return r->status;
  }
  /* Devices whose last operation ended and that never got another chance (priority mode may
   * decline until the end). */
  if (c.done_devs < p->ndev) {
    r->status = SIM_DEADLOCK;
    collect_stuck(&c);
  }
  tick makespan = 0, idle = 0, lb_work = 0;
  for (int dv = 0; dv < p->ndev; dv++)
    if (w->dev[dv].end > makespan) makespan = w->dev[dv].end;
  r->makespan = to_s(makespan);
  r->peak_mem = 0;
  r->fits = true;
  r->oom_device = -1;
  r->lb_work = 0;
  for (int dv = 0; dv < p->ndev; dv++) {
    sim_device_stats *ds = &r->dev[dv];
    tick di = makespan > w->dev[dv].busy ? makespan - w->dev[dv].busy : 0;
    idle += di;
    ds->busy = to_s(w->dev[dv].busy);
    ds->comm = to_s(w->dev[dv].comm);
    ds->end = to_s(w->dev[dv].end);
    ds->idle = to_s(di);
    if (ds->peak_mem > r->peak_mem) r->peak_mem = ds->peak_mem;
    if (ds->peak_mem > ds->mem_limit && r->fits) {
      r->fits = false;
      r->oom_device = dv;
    }
    /* its compute, one op at a time from its head; the tied exchange after the last one and
     * before the optimizer step */
    tick bound = p->dev[dv].work + p->dev[dv].tie + (p->dev[dv].head > 0 ? p->dev[dv].head : 0);
    if (bound > lb_work) lb_work = bound;
  }
  r->bubble = makespan > 0 && p->ndev > 0 ? (double)idle / ((double)p->ndev * makespan) : 0;
  r->lb_work = to_s(lb_work);
  r->lb_critical = to_s(p->lb_critical);
  return r->status;
}

void sim_result_free(sim_result *r) {
  if (!r) return;
  free(r->dev);
  free(r->ops);
  free(r->xfers);
  free(r->stuck);
  if (r->order) {
    for (int i = 0; i < r->ndevices; i++) free(r->order[i].ops);
    free(r->order);
  }
  sim_work *w = r->work;
  if (w) {
    free(w->op);
    free(w->dev);
    free(w->next_mb);
    free(w->ready);
    free(w->grad_ready);
    free(w->grad_start);
    free(w->link_free);
    free(w->host_free);
    free(w->defer);
    free(w->heap);
    free(w->cands);
    free(w);
  }
  memset(r, 0, sizeof *r);
}

/* ---- Reporting ------------------------------------------------------------------------------*/

/* Append "F @s2 3" for op o. */
static void put_op(strbuf *sb, ir_op o) {
  strbuf_printf(sb, "%s @s%d %d", ir_op_names[o.kind], o.stage, o.mb);
}

void sim_report_failure(const sim_result *r, diag_engine *d, diag_loc where) {
  if (r->status == SIM_INVALID) {
    diag_error(d, where, "the schedule does not fit the plan: %s", r->why);
    return;
  }
  if (r->status != SIM_DEADLOCK) return;
  /* Follow the waits from the first stuck device to find a cycle. */
  int n = r->nstuck, at = 0, cyc = -1;
  int *seen = xcalloc((size_t)(r->ndevices ? r->ndevices : 1), sizeof *seen);
  int *idx = xmalloc((size_t)(r->ndevices ? r->ndevices : 1) * sizeof *idx);
  for (int i = 0; i < r->ndevices; i++) idx[i] = -1;
  for (int i = 0; i < n; i++) idx[r->stuck[i].device] = i;
  for (int step = 1; n > 0 && step <= n + 1; step++) {
    const sim_stuck *s = &r->stuck[at];
    if (seen[s->device]) {
      cyc = s->device;
      break;
    }
    seen[s->device] = step;
    if (s->waits_on < 0 || idx[s->waits_on] < 0) break;
    at = idx[s->waits_on];
  }
  if (cyc >= 0)
    diag_error(d, where, "the schedule deadlocks: the devices wait for each other in a cycle");
  else
    diag_error(d, where, "the schedule deadlocks: %d device%s can never go on", n,
               n == 1 ? "" : "s");
  /* Notes: the cycle first (in order), then the other waiting devices. */
  strbuf sb = {0};
  for (int pass = 0; pass < 2; pass++) {
    int start = pass == 0 ? cyc : -1;
    if (pass == 0 && start < 0) continue;
    for (int i = 0; i < n; i++) {
      const sim_stuck *s;
      if (pass == 0) {
        s = &r->stuck[idx[start]];
        start = s->waits_on;
        if (i > 0 && s->device == cyc) break;
      } else {
        s = &r->stuck[i];
        if (cyc >= 0 && seen[s->device] && seen[s->device] >= seen[cyc]) continue;
      }
      sb.len = 0;
      if (sb.data) sb.data[0] = 0;
      strbuf_printf(&sb, "$d%d waits ", s->device);
      if (s->index >= 0) {
        strbuf_printf(&sb, "at #%d ", s->index);
        put_op(&sb, s->op);
      } else if (s->op.stage >= 0) {
        strbuf_puts(&sb, "to run ");
        put_op(&sb, s->op);
      }
      if (s->waits_on >= 0) {
        strbuf_puts(&sb, " for ");
        put_op(&sb, s->waits);
        strbuf_printf(&sb, " on $d%d", s->waits_on);
      } else if (s->memory) {
        strbuf_puts(&sb, " for memory to bring its activations back from the host");
      } else {
        strbuf_puts(&sb, ", which is ready: the priority rule declined it");
      }
      diag_note(d, where, "%s", strbuf_cstr(&sb));
      if (pass == 0 && s->waits_on < 0) break;
    }
  }
  strbuf_free(&sb);
  free(seen);
  free(idx);
}

void sim_store_prediction(const sim_result *r, ir_module *m) {
  memset(&m->predict, 0, sizeof m->predict);
  ir_field_set(&m->predict, IR_F_PREDICT_makespan, r->makespan);
  ir_field_set(&m->predict, IR_F_PREDICT_bubble, r->bubble);
  ir_field_set(&m->predict, IR_F_PREDICT_peak_mem, r->peak_mem);
  ir_field_set(&m->predict, IR_F_PREDICT_fits, r->fits);
  ir_field_set(&m->predict, IR_F_PREDICT_bound,
               r->lb_work > r->lb_critical ? r->lb_work : r->lb_critical);
  for (int dv = 0; dv < m->ndevices && dv < r->ndevices; dv++) {
    ir_devpredict *dp = &m->devices[dv].predict;
    memset(dp, 0, sizeof *dp);
    ir_field_set(dp, IR_F_DEVPREDICT_busy, r->dev[dv].busy);
    ir_field_set(dp, IR_F_DEVPREDICT_idle, r->dev[dv].idle);
    ir_field_set(dp, IR_F_DEVPREDICT_peak_mem, r->dev[dv].peak_mem);
  }
}

void sim_store_order(const sim_result *r, ir_module *m) {
  if (!r->order) return;
  ir_module_init_schedules(m);
  for (int dv = 0; dv < m->ndevices && dv < r->ndevices; dv++) {
    ir_schedule *s = &m->schedules[dv];
    s->nops = 0;
    for (int i = 0; i < r->order[dv].nops; i++) {
      const ir_op *o = &r->order[dv].ops[i];
      ir_schedule_push(s, o->kind, o->stage, o->mb);
    }
  }
}
