/* standin.h -- the stand-in model of the GPU backends (standin.c, and gpu_model.cu's CUDA
 * version): layer 0 an embedding, every middle layer y = x + tanh(x W + b), an lm_head
 * projection, sized from the stream's hidden size, vocabulary and sequence divided by the scale.
 * The CPU runtime trains the real layers (kernels.h, model.c); the GPU backends run this model
 * until the layer kernels have CUDA versions (docs/runtime.md, "GPU backends"). */
#ifndef OCTO_RT_STANDIN_H
#define OCTO_RT_STANDIN_H

#include "runtime.h"


/* The stand-in model of a stream for one rank of one replica: dimensions of every layer,
 * parameters and gradients of the stages it initialized, and the state saved between F, B and W
 * of each (stage, microbatch) in flight. Opaque. */
typedef struct rt_si_model rt_si_model;

/* Build the model of stream s (dimensions only; no stage initialized). Returns NULL with the
 * reason appended to err (a data file that cannot be read or is empty, a scale < 1). */
rt_si_model *rt_si_new(const be_stream *s, const rt_opts *o, strbuf *err);
void rt_si_free(rt_si_model *m);

/* Allocate and initialize the parameters (and zeroed gradients and optimizer state) of stage st.
 * Deterministic: the values depend only on the seed and the layer index, so every rank and the
 * reference build the same weights. Idempotent. */
void rt_si_init_stage(rt_si_model *m, int st);

/* The stand-in's dimensions, for other implementations of the same model (gpu_model.cu), which
 * lay out each stage's parameters as model.c does: per layer in order, W (E[V][h] for layer 0,
 * W[h][V] for an lm_head, W[h][h] for a dense layer) then b[h] (dense layers only). */
typedef struct rt_si_dims {
  int h, V, T;       /* width, vocabulary, tokens per microbatch */
  int nmb, replicas; /* microbatches per step, data-parallel replicas (>= 1) */
  bool head;         /* the last layer is an lm_head (layer 0 is always the embedding) */
  bool adam;         /* the optimizer is Adam (else SGD) */
  double lr;         /* learning rate */
} rt_si_dims;
rt_si_dims rt_si_get_dims(const rt_si_model *m);

/* Write stage st's initial parameters (the values rt_si_init_stage gives it, in
 * rt_si_stage_grads order) into w of n floats, without initializing st in m. Returns 0, or -1 when
 * st is out of range or n is not the stage's parameter count. */
int rt_si_init_values(const rt_si_model *m, int st, float *w, size_t n);

/* Number of floats of tensor (kind, stage) at runtime: INPUT holds the microbatch's token ids
 * (as floats), ACT s the output of stage s, GRAD s the gradient of the input of stage s (grad
 * nstages: of the last stage's output). 0 for STASH and WSTASH, which the model keeps itself. */
size_t rt_si_tensor_floats(const rt_si_model *m, be_tensor_kind k, int stage);

/* Token ids of microbatch mb of replica 'replica' at step 'step' into tokens
 * (rt_si_tensor_floats(INPUT) floats). */
void rt_si_load(rt_si_model *m, int step, int replica, int mb, float *tokens);

/* Forward of stage st on microbatch mb: in -> out; keeps what the backward needs. Pre: stage
 * initialized; in holds the stage's input (tokens for stage 0). */
void rt_si_forward(rt_si_model *m, int st, int mb, const float *in, float *out);

/* Cross-entropy loss of microbatch mb (targets: the next tokens of the same data) from the last
 * stage's output; writes into grad the gradient of the step's loss (the mean over all tokens of
 * all microbatches of all replicas) with respect to out. Returns the microbatch's mean loss. */
double rt_si_loss(rt_si_model *m, int step, int replica, int mb, const float *out, float *grad);

/* Input-gradient backward (B) of stage st on mb: grad (of the stage's output) -> dx (of its
 * input; NULL for stage 0); keeps what W needs. Pre: rt_si_forward(st, mb) ran. */
void rt_si_backward_input(rt_si_model *m, int st, int mb, const float *grad, float *dx);
/* Weight-gradient backward (W): accumulate st's weight gradients from mb; frees mb's state.
 * Pre: rt_si_backward_input(st, mb) ran. */
void rt_si_backward_weight(rt_si_model *m, int st, int mb);

/* The gradients of stage st as one contiguous array of *n floats (for the all-reduce). */
float *rt_si_stage_grads(rt_si_model *m, int st, size_t *n);
/* Optimizer step of stage st (SGD or Adam), then zero its gradients. */
void rt_si_step(rt_si_model *m, int st);

/* The sequential reference of one step: for each replica and microbatch in order, forward
 * through every stage, loss, backward through every stage (B then W), accumulating gradients.
 * Pre: every stage initialized. Returns the mean loss; leaves the gradients (no optimizer step). */
double rt_si_reference_step(rt_si_model *m, int step, int replicas);

/* Largest, over the parameter tensors of stage st, of max|a - b| / max|b| between the gradients
 * of a and b (0 when both are zero). Pre: st initialized in both. */
double rt_si_grad_diff(const rt_si_model *a, const rt_si_model *b, int st);
/* The same, with a's gradients given as an array g of n floats in rt_si_stage_grads order (a GPU
 * model's, copied to the host). INFINITY when n is not the stage's parameter count. */
double rt_si_grad_diff_array(const float *g, size_t n, const rt_si_model *b, int st);

#endif
