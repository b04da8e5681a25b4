/* runtime.h -- the runtime: executes instruction streams (backend.h) with real float32
 * arithmetic. Three parts:
 *   - the model (model.c): the stream's layers with their real math (the kernel table,
 *     kernels.h), sized from their dimensions divided by a scale, with deterministic
 *     initialization, forward, loss, the split backward (input gradient, then weight gradient),
 *     the optimizer step, synthetic or file data, and a sequential reference step (all
 *     microbatches through the unpartitioned model);
 *   - transports (comm_threads.c, comm_mpi.c): point-to-point messages with the posting,
 *     matching and completion semantics the deadlock checker assumes, and the all-reduce over
 *     data-parallel replicas;
 *   - the interpreter (exec.c): runs one rank's program on a transport, with timeouts, a
 *     recorded timeline and per-step figures.
 * docs/runtime.md describes it. */
#ifndef OCTO_RUNTIME_H
#define OCTO_RUNTIME_H

#include <stdbool.h>
#include <stddef.h>
#include <signal.h>
#include <stdint.h>

#include "stream.h"
#include "support.h"

/* ---- Outcomes ------------------------------------------------------------------------------ */

/* How a run, or the set-up before it, ended: X(ID). The runtime's entry points return an
 * rt_status; which exit status a process gives each is the tool's choice (tools/octo-run.c,
 * docs/architecture.md, "Exit codes and limits"), never the library's. */
#define RT_STATUSES(X)                                                                        \
  X(OK)             /* success */                                                            \
  X(BAD_INPUT)      /* bad input: the stream, an option, a file, more memory than the machine \
                       offers, a GPU backend without a GPU, an output that cannot be written */ \
  X(RUN_FAILED)     /* a rank failed: a deadline passed, a transport error, a rank died or   \
                       stopped */                                                            \
  X(CHECK_MISMATCH) /* --check found a difference from the sequential run */                 \
  X(NONFINITE)      /* a loss or gradient was NaN or infinite */

/* An outcome of RT_STATUSES: RT_STATUS_OK, RT_STATUS_BAD_INPUT, ... */
typedef enum rt_status {
#define X(id) RT_STATUS_##id,
  RT_STATUSES(X)
#undef X
  RT_STATUS_COUNT
} rt_status;

/* Ending the process: the one exception to "library code returns". Under MPI (the mpi and nccl
 * backends) a rank that fails must end the whole job on every rank, and a rank blocked inside a
 * call that MPI offers no deadline for (MPI_Init, MPI_Comm_split, MPI_Finalize) cannot return at
 * all, yet every wait has a deadline. So, in exactly these places, the runtime ends the process
 * itself (docs/runtime.md, "Failures"): a failing rank's MPI_Abort (rt_mpi_abort: the transport's
 * fail, a collective past its deadline, an NCCL failure), the SIGALRM watchdog over a blocking
 * MPI call (rt_mpi_watch, rt_mpi_open, rt_mpi_close), the SIGTERM handler of a rank that mpirun
 * ends because another failed, and the faults --die and --stop inject. Each ends it with the exit
 * status the tool gave that outcome here; the tool sets them once, before it starts the runtime.
 * Until then every outcome but RT_STATUS_OK ends with 1. */
void rt_set_exit_codes(const int codes[RT_STATUS_COUNT]);
/* The exit status set for st (rt_set_exit_codes). Async-signal-safe. */
int rt_exit_code(rt_status st);

/* ---- Model --------------------------------------------------------------------------------- */

/* How the model is built and trained. */
typedef struct rt_opts {
  int scale;         /* widths, vocabulary and sequence lengths are divided by it (>= 1); 0: the
                        smallest power of two whose step is a few seconds of CPU work */
  uint64_t seed;     /* initialization and synthetic data */
  double lr;         /* learning rate of SGD or Adam (the stream names the optimizer) */
  const char *data;  /* text file whose bytes are the token stream, or NULL for synthetic data */
  const char *dump;  /* directory for --dump (every layer's tensors of step 0, microbatch 0 of
                        replica 0), or NULL */
  bool no_recompute; /* ignore the stages' recompute flags (--check's sequential reference
                        keeps every activation) */
} rt_opts;

/* The model of a stream for one rank of one replica: every layer with its kernels (kernels.h)
 * at the scale in force, parameters and gradients of the stages it initialized, and the state
 * saved between F, B and W of each (stage, microbatch) in flight. Opaque.
 * Its tensors live on a device (kdev.h): every operation below that touches them runs on the
 * calling thread's, which must be the same for the model's whole life (the CPU unless the caller
 * binds a GPU with rt_dev_bind); tensor pointers passed in and out are that device's memory.
 * rt_grad_diff reads tensors on the host: CPU models only. */
typedef struct rt_model rt_model;

/* Build the model of stream s (dimensions only; nothing of the size of a tensor allocated, so
 * that rt_mem_check can refuse a run first). Returns NULL with the
 * reason appended to err: a layer the runtime cannot run at this scale ("layer attn.3
 * (attention): heads 6 is not a multiple of kv_heads 4"), a data file that cannot be read or is
 * empty, a negative scale. */
rt_model *rt_model_new(const be_stream *s, const rt_opts *o, strbuf *err);
void rt_model_free(rt_model *m);
/* The scale in force (o->scale, or the one chosen for 0). */
int rt_model_scale(const rt_model *m);
/* What a rank's memory holds, by kind: the classes the run's memory line reports. */
typedef enum rt_mem_kind {
  RT_MEM_STATIC,    /* parameters, gradients and optimizer state of its stages */
  RT_MEM_ARENA,     /* the stream's buffer arena: every slot (messages, inputs, outputs, and the
                       saved-state blocks that live in the stream's WSTASH buffers) */
  RT_MEM_REBUILT,   /* a recomputing stage's state blocks, the model's own: the one its F
                       writes and hands back, and those its B rebuilds and keeps until W, which
                       the plan counts (the simulator's rebuilt state, ir_stage_layer_rebuild) */
  RT_MEM_PRIVATE,   /* other saved state the stream has no buffer for, which the plan does not
                       count (a stage whose FWD names no WSTASH buffer: its blocks, or a
                       recomputing stage's kept buffers) */
  RT_MEM_WORKSPACE, /* the model's scratch between the layers of a stage, token ids, and the
                       sequential reference's step buffers */
  RT_MEM_KINDS
} rt_mem_kind;

/* Bytes by kind, and their sum. */
typedef struct rt_mem_use {
  double kind[RT_MEM_KINDS]; /* bytes of each rt_mem_kind */
  double total;              /* their sum */
} rt_mem_use;

/* Count 'bytes' more (negative: fewer) of kind k against m's allocation tracker, which records
 * the high-water mark of the total. The model counts its own allocations; the interpreter counts
 * the buffer arena it allocates for m's rank. */
void rt_model_count(rt_model *m, rt_mem_kind k, double bytes);
/* The figures of m's tracker at its high-water mark (the first time the total reached it). */
void rt_model_peak(const rt_model *m, rt_mem_use *peak);
/* Bytes m's tracker counts now (the model's allocations, and any arena counted against it). */
size_t rt_model_bytes(const rt_model *m);

/* Give the model the state buffer of (stage st, microbatch mb) for its next F: buf, of
 * rt_tensor_floats(m, BE_T_WSTASH, st) floats, is the stream's WSTASH buffer of that F, live
 * until its W (or fused B). A stage that does not recompute keeps its saved-state block there; a
 * recomputing stage its kept buffer: its recomputable layers' inputs and its other layers' saved
 * state (the recomputable layers' blocks, rebuilt in B, stay the model's own). Pre:
 * no F of (st, mb) is in flight. Without it, the model keeps the state in blocks of its own. */
void rt_model_use_state(rt_model *m, int st, int mb, float *buf);

/* Move the saved state of (stage st, microbatch mb), which the stream's WSTASH buffer holds
 * (rt_model_use_state), to buf: a copy of that buffer (the stream's RELOAD of it after its
 * OFFLOAD), which B and W then read. Pre: F of (st, mb) ran and its W (or fused B) has not; buf
 * holds rt_tensor_floats(m, BE_T_WSTASH, st) floats equal to the old buffer's. Without a WSTASH
 * buffer at that F (the model's own blocks hold the state) it does nothing. */
void rt_model_move_state(rt_model *m, int st, int mb, float *buf);

/* One copy of a rank's host store: an offloaded tensor's bytes in host memory. */
typedef struct rt_host_copy {
  void *data;   /* the allocation (kept for the next step's copy), or NULL */
  size_t bytes; /* bytes of the copy held */
  size_t cap;   /* bytes allocated */
  bool held;    /* a copy is held (OFFLOAD wrote it, its RELOAD has not taken it yet) */
} rt_host_copy;

/* The host memory of one rank's offloaded tensors (OFFLOAD, RELOAD): one copy per (tensor kind
 * stash or wstash, stage, microbatch) of the rank's offloading stages. It is host memory, not
 * the device's: the model's memory tracker does not count it. */
typedef struct rt_host_store {
  int nstages, nmb;              /* the stream's */
  int *index;                    /* per stage: its place among the rank's offloading stages, or
                                    -1 */
  rt_host_copy *copies;          /* [(index x nmb + mb) x 2 + (kind == wstash)] */
  size_t ncopies;                /* their count */
  double bytes, peak;            /* bytes of the copies held now, and the most at once */
  void *(*alloc)(size_t);        /* host allocation (malloc; the GPU backends: pinned memory),
                                    NULL when it fails */
  void (*release)(void *);       /* its release */
} rt_host_store;

/* Set up h for rank 'rank' of s, with allocator alloc and its release. Post: no copy held. */
void rt_host_init(rt_host_store *h, const be_stream *s, int rank, void *(*alloc)(size_t),
                  void (*release)(void *));
/* The copy of tensor (kind, stage, mb), or NULL when the stage is not an offloading stage of
 * the rank or the kind is neither stash nor wstash. */
rt_host_copy *rt_host_at(rt_host_store *h, int kind, int stage, int mb);
/* Make c hold a copy of 'bytes' bytes (replacing one held): returns where to write them, or
 * NULL when the host memory cannot be allocated (nothing held then). Counts them in h. */
void *rt_host_keep(rt_host_store *h, rt_host_copy *c, size_t bytes);
/* c no longer holds a copy (its RELOAD took it); the allocation stays for reuse. */
void rt_host_drop(rt_host_store *h, rt_host_copy *c);
/* Release every allocation of h. */
void rt_host_free(rt_host_store *h);

/* What one rank of a run holds at its peak, in bytes (in double: no sum overflows, however
 * large the model). */
typedef struct rt_mem_need {
  double params;    /* its stages' parameters */
  double grads;     /* their gradients */
  double optim;     /* Adam's two moments (0 with SGD) */
  double state;     /* saved state: the most the stream's WSTASH buffers hold at once, and the
                       blocks the stream has no buffer for (rt_model_use_state) */
  double buffers;   /* the rest of the buffer arena (messages, inputs, outputs) */
  double workspace; /* the model's scratch between the layers of its stages, token ids */
  double reference; /* with --check: the sequential reference (every stage's parameters,
                       gradients, optimizer state, one saved block each, its buffers) */
  double total;     /* the sum */
} rt_mem_need;

/* The peak memory of rank 'rank' of stream s run with model m (built by rt_model_new for s;
 * nothing needs to be allocated), with the sequential reference when check. */
void rt_rank_memory(const rt_model *m, const be_stream *s, int rank, bool check, rt_mem_need *out);

/* The step and replica whose data rt_forward's spliced embeddings read (the interpreter sets it
 * at every step; the reference sets it itself). */
void rt_model_set_step(rt_model *m, int step, int replica);

/* Allocate and initialize the parameters (and zeroed gradients and optimizer state) of stage st.
 * Deterministic: the values depend only on the seed and the layer index, so every rank and the
 * reference build the same weights. Idempotent. */
void rt_model_init_stage(rt_model *m, int st);

/* Number of floats of tensor (kind, stage) at runtime: INPUT the first layer's input (token ids
 * as floats, or dense features when the model does not start with an embedding), ACT s the
 * output of stage s, GRAD s the gradient of the input of stage s (grad nstages: of the last
 * stage's output), WSTASH s what the model keeps in the stream's WSTASH buffer of stage s (its
 * saved-state block; a recomputing stage: its kept buffer; rt_model_use_state), 0 for STASH
 * (the kernels' saved state lives from F to W as one block, so the F-to-B part has no use). */
size_t rt_tensor_floats(const rt_model *m, be_tensor_kind k, int stage);

/* The input of microbatch mb of replica 'replica' at step 'step' (rt_tensor_floats(INPUT)). */
void rt_load(rt_model *m, int step, int replica, int mb, float *in);

/* Forward of stage st on microbatch mb: in -> out; keeps what the backward needs (a stage the
 * stream marks recompute: only a copy of in, from which rt_backward_input runs the forward
 * again). Pre: in holds the stage's input. */
void rt_forward(rt_model *m, int st, int mb, const float *in, float *out);

/* Cross-entropy loss of microbatch mb (targets: the next tokens of the same data; spliced
 * positions carry none) from the last stage's output; writes into grad the gradient of the
 * step's loss (the mean over all counted tokens of all microbatches of all replicas) with
 * respect to out. Returns the microbatch's mean loss. */
double rt_loss(rt_model *m, int step, int replica, int mb, const float *out, float *grad);

/* Input-gradient backward (B) of stage st on mb: grad (of the stage's output) -> dx (of its
 * input; NULL for stage 0); keeps what W needs. A recomputing stage first runs its forward again
 * from the input rt_forward kept (bit for bit the same state). Pre: rt_forward(st, mb) ran. */
void rt_backward_input(rt_model *m, int st, int mb, const float *grad, float *dx);
/* Weight-gradient backward (W): accumulate st's weight gradients from mb; frees mb's state.
 * Pre: rt_backward_input(st, mb) ran. */
void rt_backward_weight(rt_model *m, int st, int mb);

/* The gradients of stage st as one contiguous array of *n floats (for the all-reduce). */
float *rt_stage_grads(rt_model *m, int st, size_t *n);
/* Tied embeddings (the stream's TIE): the stage holding the tied lm_head's copy (head) or the
 * embedding's table, or -1 when m has none. */
int rt_model_tie_stage(const rt_model *m, bool head);
/* The layer of the tied lm_head (head) or of the table it shares, or -1 when m has none. */
int rt_model_tie_layer(const rt_model *m, bool head);
/* The gradient of the tied matrix's copy that stage st holds (the head's, when st holds both),
 * *n floats; NULL and 0 when st holds neither. */
float *rt_model_tied_grad(rt_model *m, int st, size_t *n);
/* Add 'other' (the twin's copy, rt_model_tied_grad's *n floats on the model's device) to the
 * copy of the tied gradient that stage st holds (the TIE of two ranks). */
void rt_model_tie_add(rt_model *m, int st, const float *other);
/* Both copies' gradients become their sum, bit for bit equal (one rank holds both stages; the
 * --check reference). No-op without tied embeddings. */
void rt_model_tie_local(rt_model *m);
/* True when every gradient of stage st is finite; else false with "layer NAME (KIND): gradient
 * of PARAM[i] is NaN" appended to why. */
bool rt_stage_finite(const rt_model *m, int st, strbuf *why);
/* Optimizer step of stage st (SGD or Adam), then zero its gradients. */
void rt_step(rt_model *m, int st);

/* The sequential reference of one step: for each replica and microbatch in order, forward
 * through every stage, loss, backward through every stage (B then W), accumulating gradients;
 * the replicas' gradients are summed in replica order, as the all-reduce does. Pre: every stage
 * initialized, gradients zero. Returns the mean loss; leaves the gradients (no optimizer step). */
double rt_reference_step(rt_model *m, int step, int replicas);

/* Largest, over the parameter tensors of stage st, of max|a - b| / max|b| between the gradients
 * of a and b (0 when both are zero). Pre: st initialized in both. */
double rt_grad_diff(const rt_model *a, const rt_model *b, int st);
/* The same for n host floats g (stage st's gradients of another model of the same stream, e.g.
 * copied from a GPU) against CPU model ref's: INFINITY when n is not the stage's size. */
double rt_grad_diff_host(const float *g, size_t n, const rt_model *ref, int st);

/* With a dump directory: write its index.json (the run's counts and loss scale, every layer's
 * index, name, kind, dimensions, parameters and file prefix; docs/runtime.md, "Dumps"). Each
 * rank writes the .npy files of its own layers as it runs; the launcher writes the index once
 * every rank succeeded, so that an index names only files that are complete. Returns 0, or -1
 * with the reason in err. */
int rt_model_dump_index(const rt_model *m, strbuf *err);
/* The first --dump write of m that failed ("cannot write 'DIR/007-mlp.y.npy': No space left on
 * device"), or NULL; after one, m dumps nothing more. */
const char *rt_model_dump_error(const rt_model *m);
/* With mo->dump: write the index of stream s's dump (rt_model_dump_index of a model built
 * from s and mo), after a run whose every rank succeeded. Returns RT_STATUS_OK, or
 * RT_STATUS_BAD_INPUT after printing "octo-run: error: --dump: ..." on stderr. */
rt_status rt_dump_finish(const be_stream *s, const rt_opts *mo);

/* ---- Transports ------------------------------------------------------------------------------ */

/* A posted message, filled by the transport. */
typedef struct rt_req {
  void *impl;   /* transport's handle */
  bool done;    /* completed */
} rt_req;

/* A transport between the ranks of one replica (peers are pipeline ranks), plus the all-reduce
 * over the replicas of a rank. Posting never blocks; a send and a receive between the same two
 * ranks pair in posting order (as NCCL); a message completes when both sides are posted. Every
 * blocking call takes the run's deadline. */
typedef struct rt_comm {
  const char *name;  /* "cpu" or "mpi" */
  void *ctx;         /* the transport's state for this rank */
  /* Post a send of bytes from buf to peer (tag: tensor kind, stage, microbatch). */
  int (*isend)(void *ctx, int peer, be_tensor_ref tag, const void *buf, size_t bytes,
               rt_req *r);
  /* Post a receive of bytes from peer into buf. */
  int (*irecv)(void *ctx, int peer, be_tensor_ref tag, void *buf, size_t bytes, rt_req *r);
  /* Wait up to 'timeout' seconds for r: 0 completed, 1 timed out, 2 another rank failed or died
   * (who, e.g. "rank 2 died", appended to err), -1 transport error (message in err). */
  int (*wait)(void *ctx, rt_req *r, double timeout, strbuf *err);
  /* Sum n floats over the replicas of this rank (in place), waiting at most 'timeout' seconds:
   * the results of wait. */
  int (*allreduce)(void *ctx, float *buf, size_t n, double timeout, strbuf *err);
  /* Wait until every rank of every replica has entered the barrier, at most 'timeout'
   * seconds: the results of wait. */
  int (*barrier)(void *ctx, double timeout, strbuf *err);
  /* Tell every rank that this one failed with message 'why' (they stop at their next wait, or the
   * transport ends the job with the exit status the tool gave outcome st: rt_mpi_abort). */
  void (*fail)(void *ctx, const char *why, rt_status st);
  /* Testing (--die): this rank dies with message 'why', as a crash would. Threads: the hub marks
   * it dead and wakes every waiter, whose waits return 2 at once (a process notices a crashed
   * thread). MPI: the process prints why and exits with rt_exit_code(RT_STATUS_RUN_FAILED)
   * without a word to the others (mpirun then ends the job); it does not return. */
  void (*die)(void *ctx, const char *why);
  /* Testing (--stop): this rank stops responding without dying, as SIGSTOP does; its peers'
   * deadlines pass. Threads: returns once the run failed or every other rank left. MPI: the
   * process prints why and stops itself with SIGSTOP; if it is ever continued, it exits with
   * rt_exit_code(RT_STATUS_RUN_FAILED). */
  void (*stop)(void *ctx, const char *why);
  /* This rank is done (normally or not) and its buffers go away: forget its messages that are
   * still unpaired, so that no other rank's post touches them. */
  void (*leave)(void *ctx);
  volatile sig_atomic_t at; /* the address the interpreter runs (-1 outside the program,
                               RT_AT_SAVE in a checkpoint's save), for a transport that reports
                               from a signal handler */
} rt_comm;

/* rt_comm.at while the rank saves a checkpoint (rt_ckpt_save). */
#define RT_AT_SAVE (-2)

/* ---- Interpreter and launchers --------------------------------------------------------------- */

/* The kinds of fault a run can inject for testing: X(ID, option). */
#define RT_FAULT_KINDS(X)                                                                  \
  X(DIE, "die")   /* the rank dies (its thread ends, its process exits), as a crash would */ \
  X(STOP, "stop") /* it stops responding without dying, as SIGSTOP does (under MPI it is) */

/* Named places a fault strikes, besides an address: X(ID, name, opcode): the rank's first
 * instruction with that opcode; BE_OP_COUNT: before the run's first collective (MPI: before the
 * communicators are made, or before --profile's reduction; threads: at address 0). */
#define RT_FAULT_PLACES(X)                                                                 \
  X(ALLREDUCE, "allreduce", BE_OP_ALLREDUCE) /* its first all-reduce, before it adds in */ \
  X(OPTIMIZER, "optimizer", BE_OP_STEP)      /* its optimizer step, after the all-reduce */ \
  X(TIE, "tie", BE_OP_TIE)                   /* its tied gradient's exchange, before it sends */ \
  X(SETUP, "setup", BE_OP_COUNT)             /* before the first collective (see above) */ \
  X(INIT, "init", BE_OP_COUNT) /* MPI: before MPI_Init (the others' start-up watchdog ends them); \
                                  threads: as setup */                                      \
  X(END, "end", BE_OP_COUNT) /* MPI only: after the run's report, before the closing barrier  \
                                and MPI_Finalize (the others wait in the barrier) */         \
  X(SAVE, "save", BE_OP_COUNT) /* with --save: its first checkpoint's save, before the save's \
                                  first barrier (the others wait in it) */

enum {
  RT_FAULT_NONE,
#define X(id, opt) RT_FAULT_##id,
  RT_FAULT_KINDS(X)
#undef X
};
enum {
#define X(id, name, op) RT_PLACE_##id,
  RT_FAULT_PLACES(X)
#undef X
  RT_PLACE_COUNT
};

/* A fault to inject (--die, --stop): one rank of one replica, at one address of its first
 * step. */
typedef struct rt_fault {
  int kind;          /* RT_FAULT_NONE (no fault), RT_FAULT_DIE or RT_FAULT_STOP */
  int rank, replica; /* the rank it strikes */
  int addr;          /* the address (>= 0); -1 before rt_fault_resolve when place names it, and
                        after it at RT_PLACE_END and RT_PLACE_SAVE (no instruction: it strikes
                        after the run, or in the first save) */
  int place;         /* an RT_PLACE_* index, or -1 when addr was given */
} rt_fault;

/* How to run a stream. */
typedef struct rt_run_opts {
  int steps;        /* training steps (>= 1) */
  double timeout;   /* seconds any blocking operation (a WAIT, an all-reduce, the MPI report's
                       collectives) may block before the run fails */
  bool check;       /* keep a sequential reference and compare losses and gradients each step */
  bool trace;       /* record the timeline (rt_rank_stats.ev) */
  rt_fault fault;   /* testing: the fault to inject (kind RT_FAULT_NONE: none) */
  const char *backend; /* the backend's name as profiles spell it ("cpu", "mpi", "cuda",
                          "nccl"): compared with the one that measured the plan's costs */
  double mem_limit; /* bytes the run may hold in all on this machine (cpu: all ranks; mpi: the
                       processes of one node); 0: the machine's available memory */
  const char *calibrate; /* --calibrate: the profile to write from the run's own timings of its
                            layers and optimizer steps (rt_calibration_json), or NULL */
  const char *init;     /* --init: the weights to start from (a safetensors file, an index or a
                           directory; rt_ckpt_prepare checks them), or NULL */
  const char *save;     /* --save: the checkpoint directory, or NULL */
  int save_every;       /* --save-every: also save after every that many steps (0: at the end) */
  int save_keep;        /* --save-keep: the newest checkpoints kept (0: 1) */
  const char *resume;   /* --resume: the checkpoint directory given, or NULL */
  char resume_dir[1024]; /* the step directory rt_ckpt_prepare found in it ("" without resume) */
  int first_step;       /* steps the resumed checkpoint had taken (0 without): the run takes
                           steps first_step + 1 .. steps */
  uint64_t data_bytes;  /* with --save and --data: the data file's size and CRC-32, measured */
  uint32_t data_crc;    /* once by rt_ckpt_prepare for every save's manifest */
  int ckpt_experts;     /* the names of moe layers' routers and experts in checkpoints:
                           RT_CKPT_MIXTRAL, or RT_CKPT_QWEN_MOE when --init's or --resume's
                           files have Qwen-MoE's (rt_ckpt_prepare) */
  int ckpt_gen;         /* the generation of LLaVA's names --init's file has (checkpoint.c,
                           ckpt_renames.def; rt_ckpt_prepare): 0, those checkpoints are written
                           with, or another */
} rt_run_opts;

/* The two Hugging Face namings of a moe layer's router and experts (docs/checkpoints.md). */
enum { RT_CKPT_MIXTRAL, RT_CKPT_QWEN_MOE };

/* Parse "RANK[/REPLICA]:WHERE" (WHERE: an address or an RT_FAULT_PLACES name) into f's rank,
 * replica, addr and place (f->kind is left as it is). Returns 0, or -1 when text is not one. */
int rt_fault_parse(const char *text, rt_fault *f);
/* Check f against stream s and resolve a named place to its address: the rank, replica and
 * address must exist in s, a place must occur in the rank's program. Returns 0, or -1 with the
 * reason ("--die=7:3: the stream has ranks 0 to 3") in err. Nothing to do for RT_FAULT_NONE. */
int rt_fault_resolve(const be_stream *s, rt_fault *f, strbuf *err);

/* Bytes of memory this machine offers a run: MemAvailable of /proc/meminfo, else the free
 * physical pages (sysconf); 0 when neither is known. */
double rt_mem_available(void);

/* Parse a size: bytes, or a number with K, M, G or T (powers of 1024, optionally followed by
 * "iB" or "B"), e.g. "512MiB", "16G". Returns 0 with *bytes > 0, or -1 when text is not one. */
int rt_parse_bytes(const char *text, double *bytes);

/* Check, before anything is allocated, that the ranks that run on this machine fit in its
 * memory: the world ranks ranks[0 .. n) (world rank = replica x nranks + rank; ranks NULL: 0 to
 * n - 1) of stream s run with model m and o (o->check, o->mem_limit) need at most o->mem_limit
 * bytes together, or rt_mem_available() when that is 0 (unknown: nothing is checked). Returns
 * 0, or -1 with the reason in err: the total, the limit and where it comes from, and the largest
 * rank with its need by kind ("rank 0 needs 310.2 GiB: parameters ..."). */
int rt_mem_check(const be_stream *s, const rt_model *m, const rt_run_opts *o, const int *ranks,
                 int n, strbuf *err);

/* The measured costs of one layer, per microbatch, at the model's scale. */
typedef struct rt_layer_cost {
  double f, b, w;        /* median seconds of F, B and W (the last layer's F includes the loss) */
  double act_bytes;      /* its saved state, kept from F until W */
  double out_bytes;      /* its output */
  double param_bytes;    /* weights, gradients and optimizer state */
  double grad_bytes;     /* gradients (what data parallelism reduces) */
  bool measured;         /* filled */
} rt_layer_cost;

/* One recorded instruction of the timeline. */
typedef struct rt_event {
  uint8_t op;       /* be_opcode */
  int32_t stage, mb; /* its stage and microbatch (-1 when none) */
  int step;         /* training step */
  double t0, t1;    /* seconds since the run's start on this rank */
} rt_event;

/* What one rank of one replica did. */
typedef struct rt_rank_stats {
  int rank, replica;   /* who */
  int scale;           /* the model's scale (rt_model_scale; 0 when it was not built) */
  int status;          /* RT_OK, RT_FAILED (it failed: err says why), RT_ABORTED (another rank
                          failed; err says where it stopped), RT_DIED (an injected fault struck
                          it), RT_NONFINITE (a loss or
                          gradient was NaN or infinite: err names the step, layer and tensor),
                          RT_OUTPUT (a --dump file could not be written: err says which, why) */
  char err[512];       /* its error message */
  double *step_s;      /* per step: wall time from its start to its STEP */
  double *loss;        /* per step: sum of its microbatches' losses (last stage only, else 0) */
  double *ref_loss;    /* per step, with check: the reference's mean loss */
  double *grad_diff;   /* per step, with check: largest rt_grad_diff over its stages */
  double busy_s;       /* time in compute instructions and all-reduces */
  double blas_s;       /* of which in BLAS GEMMs (cpu and mpi backends) */
  rt_mem_use mem;      /* its memory at the high-water mark, tracked as the run allocates
                          (rt_model_peak of its model, with the buffer arena) */
  double ref_bytes;    /* with check: the sequential reference's high-water mark */
  bool planned;        /* its buffer arena is the stream's own layout (rt_arena) */
  double host_bytes;   /* the most host memory its offloaded tensors held at once (OFFLOAD;
                          not device memory, not in mem) */
  double wait_s;       /* time blocked in WAIT */
  rt_event *ev;        /* timeline (with trace) */
  int nev, ev_cap;
  rt_layer_cost *timed; /* with calibrate: per layer of the stream, the medians of its calls in
                           the steps after the first (rt_model_timed_costs; measured: this rank
                           ran it), else NULL */
  double optim_s;      /* with calibrate: median seconds of its STEPs after the first */
  double optim_bytes;  /* the bytes they update, as the simulator counts them (parameters,
                          gradients and optimizer state of its stages) */
  double load_s;       /* with --init or --resume: seconds reading its weights (and moments) */
  int saves;           /* with --save, rank 0 of replica 0: checkpoints it completed */
  int saved_step;      /* the step of the last of them */
  double save_s;       /* seconds they took in all */
} rt_rank_stats;

enum { RT_OK = 0, RT_FAILED = 1, RT_ABORTED = 2, RT_DIED = 3, RT_NONFINITE = 4, RT_OUTPUT = 5 };

/* Run rank 'rank' of replica 'replica': build its model (stages it runs), allocate its buffers,
 * interpret its program o->steps times on transport c; fills *st (allocating its arrays; free
 * them with rt_rank_stats_free). A failure (a WAIT or an all-reduce past its timeout, a
 * transport error) is recorded in st with the rank, address, opcode and what it waited for, and
 * announced to the other ranks through c->fail; o->fault (resolved: rt_fault_resolve) strikes
 * through c->die or c->stop. Returns st->status. */
int rt_exec_rank(const be_stream *s, int rank, int replica, const rt_opts *mo,
                 const rt_run_opts *o, rt_comm *c, rt_rank_stats *st);
/* Floats of each slot buffer of rank 'rank' of s with model m: the largest runtime tensor the
 * slot holds (0 when it holds none). floats has s->ranks[rank].nslots entries. */
void rt_slot_floats(const be_stream *s, int rank, const rt_model *m, size_t *floats);
/* The buffer arena of rank 'rank' of s with model m: the byte offset of each slot (off, nslots
 * entries) and the arena's size. When the stream's sizes are the runtime's (its costs measured at
 * m's scale, every slot at least as large as the runtime tensors it holds, offsets aligned for
 * floats), the stream's own layout: its offsets and arena, exactly what the plan accounted.
 * Otherwise the runtime's sizes (rounded up to 64 bytes) laid out first-fit in the order of the
 * stream's offsets, two slots sharing bytes only where the stream's do (so never two buffers
 * live at once). Returns whether the stream's layout was used; *bytes is the arena's size. */
bool rt_arena(const be_stream *s, int rank, const rt_model *m, uint64_t *off, double *bytes);
/* The most bytes of saved state the WSTASH buffers of rank 'rank' hold at once (runtime
 * sizes), walking its program: an FWD with a WSTASH buffer adds its stage's, the FREE of that
 * buffer takes it away. */
double rt_wstash_peak(const be_stream *s, int rank, const rt_model *m);
/* Add instruction 'in' of step 'step', run from t0 to t1 seconds, to st's timeline: its stage and
 * microbatch when it has them (compute instructions, ALLREDUCE's stage). */
void rt_record(rt_rank_stats *st, const be_inst *in, int step, double t0, double t1);

/* Zero st for rank 'rank' of replica 'replica' and allocate its per-step arrays (zeroed). */
void rt_rank_stats_init(rt_rank_stats *st, int rank, int replica, int steps);
void rt_rank_stats_free(rt_rank_stats *st);

/* What a thread of the hub runs: c is its rank's transport. */
typedef void (*rt_thread_body)(rt_comm *c, int rank, int replica, void *arg);
/* The hub (comm_threads.c): run body(c, rank, replica, arg) on nranks x replicas threads of this
 * process that talk through one in-process hub, and free the hub after them. Returns 0, or -1
 * when a thread could not be started (the hub is then failed: the started ones stop at their
 * next wait). */
int rt_threads_run(int nranks, int replicas, rt_thread_body body, void *arg);

/* The cpu backend: every rank of every replica as a thread of this process. stats has
 * nranks x replicas entries, indexed replica x nranks + rank. Returns 0, or -1 when threads could
 * not be started. */
int rt_run_threads(const be_stream *s, const rt_opts *mo, const rt_run_opts *o,
                   rt_rank_stats *stats);

/* The MPI backends (mpi, mpi --profile, nccl) run one process per rank of every replica (world
 * rank = replica x nranks + rank). The tool owns the process: it calls MPI_Init and
 * MPI_Finalize itself and maps the status to an exit code; the runtime supplies what goes around
 * them, in this order (each defined only when the runtime was built with MPI, OCTO_HAVE_MPI):
 *
 *   s = rt_mpi_open(path, o, &err);  MPI_Init(&argc, &argv);
 *   st = rt_mpi_check(s, &err, path, mo);
 *   if (st == RT_STATUS_OK) st = rt_mpi_run(s, ...)  (or rt_mpi_profile, rt_nccl_run);
 *   rt_mpi_close();  MPI_Finalize();  rt_mpi_closed();  be_stream_free(s);
 *
 * Every process returns the same status; a rank that fails ends the job instead (rt_mpi_abort). */

/* Before MPI_Init, in every process: read the stream at path (NULL with the reason in err, which
 * rt_mpi_check reports), name this process for the message of a rank that mpirun ends, inject
 * o's fault at 'init', and arm the watchdog over MPI_Init (RT_MPI_INIT_MIN_TIMEOUT: a process
 * that stopped or never started ends the others with a message and
 * rt_exit_code(RT_STATUS_RUN_FAILED)). Post: the caller calls MPI_Init, then rt_mpi_check. */
be_stream *rt_mpi_open(const char *path, const rt_run_opts *o, strbuf *err);
/* After MPI_Init: disarm rt_mpi_open's watchdog, then check the world size (ranks x replicas),
 * the model's options (data file, scale) and MPI's tag range; world rank 0 prints any problem,
 * and err's when s is NULL (rt_mpi_open failed). Returns RT_STATUS_OK or RT_STATUS_BAD_INPUT,
 * the same on every process. */
rt_status rt_mpi_check(const be_stream *s, const strbuf *err, const char *path,
                       const rt_opts *mo);
/* The mpi backend: resolve o's fault, prepare --init, --save and --resume, check the memory of
 * each node, then run this process's rank with MPI non-blocking point-to-point messages and an
 * all-reduce over replicas, and gather the figures on world rank 0, which prints the report (to
 * stdout, errors to stderr) and writes the trace to trace_path when given. A failing rank prints
 * its error and ends the job (rt_mpi_abort). Returns the run's status. Pre: rt_mpi_check
 * returned RT_STATUS_OK for s. */
rt_status rt_mpi_run(const be_stream *s, const char *path, const rt_opts *mo,
                     const rt_run_opts *o, const char *trace_path);
/* Before MPI_Finalize, every process: one that has not failed first waits in a barrier (polled,
 * --timeout deadline) until every other has finished too; then the watchdog is armed over the
 * MPI shut-down with the same deadline (a stopped process would hold the others in it for ever).
 * When another process fails or is killed meanwhile, mpirun ends this one with SIGTERM: a process
 * whose status is not RT_STATUS_OK has said why and exits without a message (the first status is
 * the job's); any other says where it was ended. Post: the caller calls MPI_Finalize, then
 * rt_mpi_closed. */
void rt_mpi_close(void);
/* After MPI_Finalize: disarm rt_mpi_close's watchdog. */
void rt_mpi_closed(void);
/* The deadline of MPI_Init: --timeout, but at least this many seconds (a loaded machine starts
 * processes slowly). */
#define RT_MPI_INIT_MIN_TIMEOUT 10.0

/* For the MPI backends: end the job on every process (MPI_Abort) with the exit status the tool
 * gave st (rt_exit_code); the one way a failing rank ends a job (see rt_set_exit_codes). Does not
 * return. */
void rt_mpi_abort(rt_status st);

/* For the MPI launchers: MPI_Ibarrier on the world, polled until it completes or 'timeout'
 * seconds pass. Returns 0, or 1 at the deadline (-1: an MPI error). Defined when built with
 * MPI. */
int rt_mpi_barrier(double timeout);

/* For the MPI launchers: arm (timeout > 0) or disarm (timeout 0) a watchdog timer over a
 * blocking MPI call that has no nonblocking form in MPI 3 (MPI_Comm_split) or that a launcher
 * makes blocking ('what': "making the replicas' communicator (MPI_Comm_split)"). Pre: s read, MPI
 * initialized; one armed at a time. Post (armed): if it is not disarmed within 'timeout' seconds,
 * the process prints "octo-run: error: [replica Q: ]rank R: WHAT did not complete within T s
 * (another process stopped)" and exits with rt_exit_code(RT_STATUS_RUN_FAILED) (mpirun then ends
 * the others).
 * Defined when built with MPI. */
void rt_mpi_watch(const be_stream *s, double timeout, const char *what);

/* For the MPI launchers (mpi and nccl backends): gather every process's figures (mine) on world
 * rank 0, which prints the run line ("PATH: ... backend BACKEND, N steps"), the report and writes
 * the trace and, with mo->dump and every rank successful, the dump's index (rt_dump_finish; mo
 * NULL: no dump); every process returns the run's status. Defined when built with MPI. */
rt_status rt_mpi_report(const be_stream *s, const rt_run_opts *o, const rt_rank_stats *mine,
                  const char *path, const char *backend, const char *trace_path,
                  const rt_opts *mo);

/* ---- Checkpoints (checkpoint.c; docs/checkpoints.md) ---------------------------------------- */

/* The name of a checkpoint's manifest in its step directory. */
#define RT_CKPT_MANIFEST "octopipe.json"
/* The version of the checkpoint format the manifest states. */
#define RT_CKPT_VERSION 1

/* Before a run, in every process: check the options of o against stream s run with mo.
 * --init: the weights hold exactly the tensors of the model at mo's scale (every name, its
 * shape and a float dtype; nothing else), mo->scale 0 (auto) becoming 1. --resume: find the checkpoint (its step directory, or
 * DIR/latest's), verify the manifest and every file's size and CRC-32, check that it is a
 * checkpoint of this model (layers, scale, optimizer, sequences per step, sequence length, data
 * file) and that it holds every tensor, then set o->resume_dir, o->first_step (its step; below
 * o->steps), mo->seed and mo->scale (mo->scale 0 or the same) from it. --save: make the
 * directory (its parent must exist). Returns 0, or -1 with the reason in err, which names the
 * option, the file and the tensor. */
int rt_ckpt_prepare(const be_stream *s, rt_opts *mo, rt_run_opts *o, strbuf *err);
/* Replace the weights of every initialized stage of m (and, resuming, its Adam moments and
 * step count) with the checkpoint's of o (resume_dir, else init; neither: nothing). Pre:
 * rt_ckpt_prepare checked o. Returns 0, or -1 with the reason in err (a file changed since). */
int rt_ckpt_load(rt_model *m, const rt_run_opts *o, strbuf *err);
/* Save the checkpoint of step 'step' (steps taken) into o->save, a collective of every rank of
 * every replica (after their STEP; rank 'rank' of replica 'replica' runs model m of stream s):
 * rank 0 of replica 0 makes DIR/.step-N.tmp, each rank of replica 0 writes its stages' shards,
 * then rank 0 writes the indexes and the manifest with every file's CRC-32, renames the directory
 * to DIR/step-N, points DIR/latest at it and removes the older ones but the o->save_keep - 1
 * newest (and those of later steps, from an abandoned run); two barriers (c->barrier,
 * o->timeout) order it. A SIGKILL at any moment leaves DIR/latest's checkpoint whole. Returns 0,
 * 2 (another rank failed: who in err), 1 (a barrier's deadline passed or the transport failed)
 * or -1 (a file could not be written), with the reason in err. Pre: rt_ckpt_prepare ran on o
 * (it measured the data file the manifest names). */
int rt_ckpt_save(const be_stream *s, rt_model *m, int rank, int replica, int step,
                 const rt_opts *mo, const rt_run_opts *o, rt_comm *c, strbuf *err);
/* rt_ckpt_save's three parts, for a process that holds every rank's model itself (the cuda
 * backend), which orders them without barriers: rt_ckpt_save_begin (once: makes
 * DIR/.step-N.tmp, an earlier run's leftover removed), then rt_ckpt_save_rank for every rank r of
 * replica 0 with its model (its shards; the model's device bound to the calling thread, its
 * step complete), then rt_ckpt_save_end (once, with any rank's model of the stream: the indexes,
 * the manifest, the rename, DIR/latest, the pruning). Each returns 0, or -1 with the reason in
 * err ("--save at step N: cannot write ..."); after a failure the previous checkpoint stays
 * DIR/latest's. The files are rt_ckpt_save's, byte for byte. */
int rt_ckpt_save_begin(const rt_run_opts *o, int step, strbuf *err);
int rt_ckpt_save_rank(const be_stream *s, rt_model *m, int rank, int step,
                      const rt_run_opts *o, strbuf *err);
int rt_ckpt_save_end(const be_stream *s, const rt_model *m, int step, const rt_opts *mo,
                     const rt_run_opts *o, strbuf *err);

/* For the checkpoints: device pointers to layer i's weights and Adam moments (NULL with SGD)
 * in its stage's arrays (rt_lplan order). Returns false when its stage is not initialized. */
bool rt_model_layer_state(rt_model *m, int i, float **w, float **am, float **av);
/* Whether m's optimizer is Adam. */
bool rt_model_adam(const rt_model *m);
/* Set the Adam steps every stage of m has taken to t, and the bias corrections with them, bit
 * for bit as t calls of rt_step form them. */
void rt_model_set_adam_steps(rt_model *m, long t);

/* ---- Profiler (profile.c) ----------------------------------------------------------------- */


/* Layer i's bytes as a profile records them into c's act_bytes (its saved-state block),
 * out_bytes, param_bytes (weights, gradients and, with Adam, two moments) and grad_bytes; the
 * rest of c is left as it is. Pre: 0 <= i < the stream's layer count. */
void rt_model_layer_bytes(const rt_model *m, int i, rt_layer_cost *c);

/* The phases of a layer that a run times apart. */
typedef enum rt_phase { RT_PH_F, RT_PH_B, RT_PH_W, RT_PHASES } rt_phase;

/* From now on record (on) or stop recording the seconds of every call of a layer's F, B and W
 * and of the loss that m runs (octo-run --calibrate: the steps after the first). A recomputing
 * stage's second forward counts in neither F nor B (the cost model charges B the F again). On a
 * GPU each call is bracketed by rt_sync, which serializes the rank's stream. */
void rt_model_time(rt_model *m, bool on);
/* The medians of m's recorded calls into costs (one per layer): each layer with recorded calls
 * gets f, b and w (the last layer's f with the loss's median added, as the profiler measures
 * it), its bytes (rt_model_layer_bytes) and measured = true; the others are left as they are. */
void rt_model_timed_costs(const rt_model *m, rt_layer_cost *costs);

/* Measure the layers of m whose configuration falls to worker 'worker' of 'nworkers' (distinct
 * configurations are dealt round-robin; each is measured on its first layer) into costs (one per
 * layer; the others are left as they are). */
void rt_profile_layers(rt_model *m, int worker, int nworkers, rt_layer_cost *costs);
/* Give every layer not measured the figures of the measured layer of the same configuration. */
void rt_profile_fill(const rt_model *m, rt_layer_cost *costs);
/* Ping-pong over transport c between pipeline ranks 0 and 1 (me: 0 or 1): one-way latency of an
 * 8-byte message and bandwidth of messages of 'big' bytes, each message waiting at most
 * 'timeout' seconds. Returns 0, or -1 with the reason. */
int rt_profile_link(rt_comm *c, int me, size_t big, double timeout, double *lat_s,
                    double *bw_Bps, strbuf *err);
/* The profile JSON (docs/cost-model.md) of stream s measured at 'scale' on 'backend', costs
 * one per layer (all measured); no "link" when lat_s < 0 (nothing measured it); optim_Bps: the
 * optimizer's rate (rt_model_optimizer_rate), none when 0. Appended to out. */
void rt_profile_json(const be_stream *s, int scale, const rt_layer_cost *costs,
                     const char *backend, double lat_s, double bw_Bps, double optim_Bps,
                     strbuf *out);
/* The calibration profile of a run of stream s (octo-run --calibrate) from the figures of its n
 * ranks (stats[k].timed and optim_s, filled with rt_run_opts.calibrate; replicas that ran the
 * same layer are averaged), measured at 'scale' on 'backend': every layer's F, B and W as the run
 * timed them inside its steps, and the optimizer's rate as the total of the ranks' updated
 * bytes over the total of their STEP times; no link (the profile of octo-run --profile keeps
 * it). Appended to json; returns 0, or -1 with the reason in err: a layer no rank timed (names
 * it: a rank failed, or the run had one step). */
int rt_calibration_json(const be_stream *s, const rt_rank_stats *stats, int n, int scale,
                        const char *backend, strbuf *json, strbuf *err);
/* rt_calibration_json written to o->calibrate (atomically; "-": stdout), with a line on stdout
 * that says what it holds,
 * or an error on stderr. Returns RT_STATUS_OK, RT_STATUS_RUN_FAILED (no calibration: a layer no
 * rank timed) or RT_STATUS_BAD_INPUT (the file cannot be written). */
rt_status rt_calibration_write(const be_stream *s, const rt_run_opts *o, const rt_rank_stats *stats,
                         int n, int scale, const char *backend);
/* The cpu backend's profiler: the stream's ranks as threads measure the layers (each distinct
 * configuration once), two threads measure the hub's link; the profile JSON is appended to
 * json. Returns 0, or -1 with the reason in err. */
int rt_profile_threads(const be_stream *s, const rt_opts *mo, strbuf *json, strbuf *err);
/* The mpi backend's profiler: every process measures its share of the layers, world ranks 0 and
 * 1 the link; rank 0 writes the profile to out_path. Every collective and message waits at most
 * o->timeout seconds (past it the job ends, naming the rank: rt_mpi_abort with
 * RT_STATUS_RUN_FAILED); o->fault may only be at RT_PLACE_SETUP (before the reduction). Returns
 * the status, the same on every process. Pre: rt_mpi_check returned RT_STATUS_OK for s (see
 * rt_mpi_open). Defined when built with MPI. */
rt_status rt_mpi_profile(const be_stream *s, const rt_opts *mo, const rt_run_opts *o,
                         const char *out_path);

/* Print the run's figures from every rank's stats (n = nranks x replicas entries): per step the
 * time and the loss (and, with check, the sequential loss and the gradient difference), per rank
 * the busy and waiting time; or the failure. When the stream's costs were measured at the run's
 * scale (s->scale), the plan's predicted step and busy times stand beside the measured ones and
 * a "prediction:" line compares the median step after the first with the prediction; otherwise
 * that line says why they are not compared. Returns the run's status: RT_STATUS_NONFINITE when
 * a loss or gradient was not finite, RT_STATUS_RUN_FAILED when a rank failed or died,
 * RT_STATUS_BAD_INPUT when only a --dump file could not be written, RT_STATUS_CHECK_MISMATCH
 * when a loss or gradient differs from the reference by more than 1e-5 (relative), else
 * RT_STATUS_OK. */
rt_status rt_report_run(const be_stream *s, const rt_run_opts *o, const rt_rank_stats *stats, int n,
                  strbuf *out, strbuf *errs);

/* The plan's prediction of rank x's peak bytes for a run whose prediction is comparable
 * (rt_prediction_comparable): the simulator's peak of its device (pred_peak: parameters,
 * gradients, optimizer state and the live saved state, with the state recomputing stages rebuild
 * between B and W, which the run keeps as RT_MEM_REBUILT) plus, when the run laid out the stream's
 * own arena (x->planned), the rest of that arena (the message, input and output buffers the
 * simulator does not count: be_mem_stats' arena_bytes - peak_stash). */
double rt_predicted_bytes(const be_stream *s, const rt_rank_stats *x);

/* Whether the stream's prediction is comparable with a run at 'scale' on o->backend (o may be
 * NULL: the backend is not compared): its costs were measured by octo-run at that scale on that
 * backend. False with the reason appended to why (when set). */
bool rt_prediction_comparable(const be_stream *s, const rt_run_opts *o, int scale, strbuf *why);

/* Append the Chrome/Perfetto trace of the recorded timelines (the format of the simulator's
 * trace: one process per rank, compute events named like "F s0 mb3") to out; with a comparable
 * prediction (see rt_report_run), also one process per rank of replica 0 with the predicted
 * timeline of each step, laid from the step's measured start. */
void rt_trace(const be_stream *s, const rt_rank_stats *stats, int n, strbuf *out);

#endif
