/* passes.h -- the pass library: the registry of passes (generated from passes.def), textual pass
 * pipelines ("a,b{k=v},c") with located diagnostics, typed access to pass options, the pass
 * manager (verify-each, IR dumps before/after passes), and the octo-opt driver that reads
 * textual IR, runs a pipeline on it and prints the result. */
#ifndef OCTO_PASSES_H
#define OCTO_PASSES_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "ir.h"
#include "sim.h"
#include "support.h"

/* ---- Options of one pass invocation ---------------------------------------------------------*/

/* One "key=value" of a pass in a pipeline. */
typedef struct pass_option {
  const char *key;   /* option name (a declared option of the pass) */
  const char *value; /* value text; quotes removed and escapes resolved for quoted strings */
  bool quoted;       /* the value was written as a quoted string */
  diag_loc key_loc;  /* span of the key in the pipeline text */
  diag_loc value_loc; /* span of the value (quotes included) in the pipeline text */
} pass_option;

/* The options given to one pass invocation, as passed to its run function. */
typedef struct pass_options {
  const char *pass;   /* name of the pass they belong to (for messages) */
  diag_loc loc;       /* span of the pass name in the pipeline text (file 0 when built in code) */
  pass_option *items; /* options in the order written; keys are unique */
  int count;          /* number of options */
  struct pass_results *results; /* where a pass leaves its figures (pass_results_put; the pass
                                   manager sets it from pass_manager_opts.results; NULL:
                                   nowhere) */
} pass_options;

/* Run function of a pass. Pre: m is a module (verified unless the user asked otherwise); opts
 * holds only options the pass declared. Returns 0 on success, non-zero after reporting at least
 * one error through d; the module may then be partially transformed. */
typedef int (*pass_run_fn)(ir_module *m, const pass_options *opts, diag_engine *d);

/* ---- Registry (passes.def) ------------------------------------------------------------------*/

/* Registry index of each pass: PASS_ID_<ID> in table order. */
typedef enum pass_id {
#define PASS(ID, NAME, SUMMARY, RUN) PASS_ID_##ID,
#include "passes.def"
#undef PASS
  PASS_ID_COUNT
} pass_id;

/* Run functions named in passes.def (each defined in one file of passes/). */
#define PASS(ID, NAME, SUMMARY, RUN) \
  int RUN(ir_module *m, const pass_options *opts, diag_engine *d);
#include "passes.def"
#undef PASS

/* A registered pass. */
typedef struct pass_info {
  pass_id id;               /* its registry index */
  const char *name;         /* spelling in pipelines */
  const char *summary;      /* one line for --list-passes and docs */
  pass_run_fn run;          /* what it does */
} pass_info;

extern const pass_info pass_registry[PASS_ID_COUNT];

/* How a pass option's value is read (options.def's TYPE column). */
typedef enum pass_opt_type {
  PASS_OPT_COUNT,  /* a whole number, K/M/G suffixes allowed (pass_opt_int) */
  PASS_OPT_REAL,   /* a number without unit (pass_opt_real) */
  PASS_OPT_BOOL,   /* true or false (pass_opt_bool) */
  PASS_OPT_TIME,   /* a time with a unit (pass_opt_quantity) */
  PASS_OPT_BYTES,  /* a size with a unit (pass_opt_quantity) */
  PASS_OPT_BW,     /* a bandwidth with a unit (pass_opt_quantity) */
  PASS_OPT_CHOICE, /* one of the words of its syntax (pass_opt_choice) */
  PASS_OPT_SEED,   /* a whole number from 0 to 2^64 - 1 (pass_opt_seed) */
  PASS_OPT_TEXT,   /* any text (pass_opt_str) */
} pass_opt_type;

/* One declared option of a pass: a row of options.def. */
typedef struct pass_option_info {
  pass_id pass;       /* the pass it belongs to */
  const char *key;    /* its name in pipelines */
  pass_opt_type type; /* how its value is read */
  const char *syntax; /* what --list-passes shows after '=' (a choice: its words joined by '|') */
  double def;         /* its value when not given (a choice: the index of its word) */
  double min, max;    /* the values allowed when given (closed; infinite: no bound) */
  const char *help;   /* its meaning ("{D}" stands for the default) */
} pass_option_info;

/* The declared option 'key' of pass p, or NULL. */
const pass_option_info *pass_option_find(const pass_info *p, const char *key);

/* Add passes defined by a library above this one (the backend's check-stream) to the registry,
 * after passes.def's: tools call it once at start-up, before parsing pipelines. 'passes' must
 * stay valid; their id is PASS_ID_COUNT. A second call replaces the first. */
void pass_register_extra(const pass_info *passes, int n);
/* Number of registered passes, and the i-th (0 <= i < pass_count()) in --list-passes order. */
int pass_count(void);
const pass_info *pass_at(int i);

/* Pass spelled 'name', or NULL. */
const pass_info *pass_lookup(const char *name);
/* Closest registered pass name to a misspelled 'name' (suggest_* rules), or NULL. */
const char *pass_suggest(const char *name);
/* Whether pass p declares option 'key' (of length len). */
bool pass_declares_option(const pass_info *p, const char *key, size_t len);
/* Append the declared option names of p to sb as "a, b, c" (nothing when it has none). */
void pass_option_names(const pass_info *p, strbuf *sb);
/* Closest declared option of p to a misspelled 'key' (suggest_* rules): appends it to sb and
 * returns true, or returns false when none is close. */
bool pass_option_suggest(const pass_info *p, const char *key, strbuf *sb);

/* Print every registered pass, in table order, with its summary and its options, to 'out'. */
void pass_list(FILE *out);

/* ---- Typed access to options (for run functions) ----------------------------------------------
 * Each helper reads the option 'key' of opts's pass, which options.def must declare with the
 * helper's type. When it is absent, *out is its declared default and the helper returns 0. When
 * it is present, well-formed and within its declared range, *out is its value and the helper
 * returns 0. Otherwise it reports at the value ("invalid value ... for option 'key' of pass 'p':
 * expected ...", or "key must be between MIN and MAX") and returns -1, leaving *out the
 * default. Values are read by the value grammar of the DSL and the IR (ir_value_convert). */

/* The option 'key', or NULL when it was not given. */
const pass_option *pass_opt_find(const pass_options *opts, const char *key);
/* Its raw value text, or def. */
const char *pass_opt_str(const pass_options *opts, const char *key, const char *def);
/* A whole number (COUNT), optionally with a count suffix K, M or G (10K = 10000). */
int pass_opt_int(const pass_options *opts, const char *key, int64_t *out, diag_engine *d);
/* A seed (SEED): a whole number from 0 to 2^64 - 1, plain digits (a bit pattern, not a
 * quantity: the one option the value grammar's doubles do not hold exactly). */
int pass_opt_seed(const pass_options *opts, const char *key, uint64_t *out, diag_engine *d);
/* A real number without unit (REAL). */
int pass_opt_real(const pass_options *opts, const char *key, double *out, diag_engine *d);
/* true or false (BOOL). */
int pass_opt_bool(const pass_options *opts, const char *key, bool *out, diag_engine *d);
/* A quantity with a unit of units.def ("10s", "1.5GiB", "450GB/s") of the option's dimension
 * (TIME, BYTES, BW), in base units (seconds, bytes, bytes/s). */
int pass_opt_quantity(const pass_options *opts, const char *key, double *out, diag_engine *d);
/* One of the words of the option's syntax (CHOICE); *out is its index. A misspelling gets a
 * "did you mean" note. */
int pass_opt_choice(const pass_options *opts, const char *key, int *out, diag_engine *d);

/* ---- Planning algorithms (for the passes and their unit tests) ----------------------------- */

/* Exact min-max contiguous partition: cut n layers of integer costs cost[] into k non-empty
 * stages minimizing the largest stage cost. With cap > 0, stage i (0-based) must also keep its
 * static memory plus activations times min(k - i, mb) within cap (mem_static, mem_act: bytes
 * per layer). Among optimal cuts it gives later stages as many layers as possible. Writes the
 * exclusive end of each stage into ends[0..k) (ends[k-1] == n) and the optimum into
 * *bottleneck (when non-NULL). Returns 0; -1 when k < 1, n < k, a cost is negative or the costs
 * add up past INT64_MAX; -2 when the cap cannot be met. O(n log(sum of costs)). */
int pass_partition_balanced(const int64_t *cost, const double *mem_static, const double *mem_act,
                            int n, int k, double cap, int mb, int *ends, int64_t *bottleneck);

/* Exact min-max contiguous partition with costs that depend on the stage (the device it runs
 * on): cut n units into k non-empty stages, unit u costing cost[s * n + u] (>= 0) as stage s and
 * needing mem[s * n + u] bytes there, within cap[s] (INFINITY: no limit; cap NULL: none). It
 * minimises the largest stage cost (1F1B's steady state: every microbatch passes the slowest
 * stage), then, among the cuts that reach it, the sum of the stage costs (one microbatch's fill
 * and drain), then gives later stages as many units as possible. Writes the exclusive end of
 * each stage into ends[0..k) (ends[k-1] == n) and the optimum into *bottleneck (when non-NULL).
 * Returns 0; -1 when k < 1, n < k, a cost is negative or the costs add up past INT64_MAX / 2;
 * -2 when no cut meets the caps. O(k n^2) time, O(k n) memory. */
int pass_partition_minmax(const int64_t *cost, const double *mem, const double *cap, int n,
                          int k, int *ends, int64_t *bottleneck);

/* ---- The adaptive scheduler, for the tuner ----------------------------------------------- */

/* Knobs of the adaptive scheduler (schedule{method=adaptive, split=..., mem_margin=...}). */
typedef struct pass_adaptive_opts {
  bool split;        /* split the backward into B and W (else fused BW) */
  double mem_margin; /* fraction of the memory limit above which W is preferred */
} pass_adaptive_opts;

/* The adaptive scheduler's defaults: the schedule pass's split and mem_margin (options.def). */
pass_adaptive_opts pass_adaptive_default(void);

/* Run the adaptive scheduler on problem p, built by sim_model_build from m (stages all placed,
 * costs complete), into r (priority mode; the order chosen is not kept). Reports nothing.
 * Returns SIM_OK, or SIM_DEADLOCK when a device cannot hold even one microbatch: then
 * *overflow_dev and *overflow (bytes over its limit, the worst device) say where, and r is not
 * run; or, when 'limits' (NULL: none) gives them, SIM_CUTOFF as soon as the step provably ends
 * after its cutoff and SIM_STOPPED when its stop says so (only limits' cutoff, stop and stop_ctx
 * are read). Pre: r zero-initialized or reused. */
sim_status pass_adaptive_run(const sim_model *p, const ir_module *m, const pass_adaptive_opts *o,
                             const sim_opts *limits, sim_result *r, int *overflow_dev,
                             double *overflow);

/* ---- Megatron's partition notations (layout.def) ------------------------------------------ */

typedef enum pass_layout_notation { PASS_LAYOUT_MEGATRON, PASS_LAYOUT_HYBRID } pass_layout_notation;

/* The first layer kind that symbol c stands for in notation n, or -1 (a symbol may stand for
 * several: pass_layout_kinds). */
int pass_layout_kind(pass_layout_notation n, char c);
/* The symbol of layer kind k in notation n, or 0 when it has none. */
char pass_layout_symbol(pass_layout_notation n, ir_layer_kind k);
/* Append notation n's symbols to sb as "E, t and L" (each once). */
void pass_layout_symbols(pass_layout_notation n, strbuf *sb);
/* Append the kinds symbol c stands for in notation n to sb as "attention or mla". */
void pass_layout_kinds(pass_layout_notation n, char c, strbuf *sb);
/* The notation m's partition is written in: the hybrid pattern when m has Mamba-2 layers, else
 * the pipeline layout. */
pass_layout_notation pass_layout_notation_of(const ir_module *m);
/* Whether Megatron can start a stage at layer i (0 < i < m->nlayers) of m: not between an
 * attention (or mla) layer and the MLP or MoE after it (a layout's 't' is both); in a hybrid pattern, not
 * after a leading embedding or before a trailing LM head (both implicit, so a stage of either
 * alone cannot be written). */
bool pass_megatron_cut_ok(const ir_module *m, int i);
/* The octoc --megatron plan: the megatron pass (passes/megatron.c) after the costs. */
#define PASS_MEGATRON_PIPELINE "cost,megatron"

/* ---- Comparison with the classic plans --------------------------------------------------- */

/* One classic plan evaluated on a model. */
typedef struct pass_baseline {
  char name[32];       /* "S-1F1B", "ZB-V", ... */
  char pipeline[256];  /* the passes that made it */
  bool ok;             /* the passes accepted the model and the plan simulated */
  char why[240];       /* when !ok: the first error the passes reported */
  double makespan;     /* predicted step time, s */
  double bubble;       /* idle / (devices x makespan) */
  double bound;        /* the simulator's lower bound for its partition and placement, s */
  bool fits;           /* every device within its memory limit */
  int ndevices;        /* entries of peak_mem */
  double *peak_mem;    /* per device, bytes (owned) */
  int nstages;         /* when ok: the plan's stages ... */
  int *stage_end;      /* ... their exclusive layer ends (owned) ... */
  int *stage_dev;      /* ... and devices (owned) */
} pass_baseline;

/* Run every classic combination of compare.def (and interleaved 1F1B with the best v > 2 that
 * divides the layers) on a copy of m, which must have layer costs, and simulate each. m is not
 * changed. *out receives the rows (free with pass_baseline_free(rows, n, true)); returns n. */
int pass_compare(const ir_module *m, pass_baseline **out);
/* The same, running the plans on the threads of 'pool' (NULL: on the caller's). */
int pass_compare_on(const ir_module *m, support_pool *pool, pass_baseline **out);
/* Only the plans Megatron-LM runs: uniform 1F1B and interleaved 1F1B (v = 2 and the best v > 2
 * that divides the layers), on the threads of 'pool' (NULL: the caller's). */
int pass_compare_megatron(const ir_module *m, support_pool *pool, pass_baseline **out);

/* Messages of passes run quietly (on a copy, for a search): collected, never printed. */
typedef struct pass_quiet {
  diag_engine *d; /* give this to the passes */
  FILE *f;        /* its stream */
  char *text;     /* what it collected (after pass_quiet_end) */
  size_t len;
} pass_quiet;
/* Start collecting; false when no stream could be opened (out of memory). */
bool pass_quiet_begin(pass_quiet *q);
/* Stop collecting and copy the first error message, without its location, into why[0..n)
 * ("" when there was none). */
void pass_quiet_end(pass_quiet *q, char *why, size_t n);
/* Free the arrays of n rows, and the array itself when 'array'. */
void pass_baseline_free(pass_baseline *rows, int n, bool array);

/* ---- The tuner ------------------------------------------------------------------------------ */

/* Options of the tuner (tune{evals=..., budget=..., jobs=..., seed=..., restarts=...,
 * max_stages=..., progress=...}). */
typedef struct pass_tune_opts {
  int evals;        /* plans the search may simulate (the effort budget; deterministic); 0: no
                       limit */
  double work;      /* operations the search may simulate, a plan counting 3 x its stages x
                       microbatches (deterministic; bounds large problems' time); 0: no limit */
  double budget;    /* seconds the search may take (machine-dependent); 0: no limit */
  int jobs;         /* threads simulating candidates; 0: the cores available. The plan does not
                       depend on it */
  uint64_t seed;    /* seed of the perturbations: the same seed gives the same plan */
  int restarts;     /* perturbation rounds in a row without improvement before stopping */
  int max_stages;   /* most stages a plan may have; 0: 4 x devices (at most the layers) */
  bool progress;    /* print a progress line to stderr */
  bool no_recompute; /* never make a stage recompute (the default lets it, when the module's
                        recompute policy is none; see docs/tuner.md) */
  bool whole_stages; /* a recomputing stage recomputes all its recomputable layers (the default
                        lets the search choose how many, the first N: recompute_layers) */
  bool no_offload;   /* never make a stage offload its activations (the default lets it when
                        every device has a 'pcie' link to host memory; docs/tuner.md) */
} pass_tune_opts;

/* The tuner's defaults: the tune pass's options' (options.def), no progress line. */
pass_tune_opts pass_tune_defaults(void);

/* What the tuner did. */
typedef struct pass_tune_stats {
  int iterations;            /* local-search iterations */
  int evaluations;           /* plans simulated */
  int pruned;                /* candidates discarded by their bound without simulating */
  int cut;                   /* of the plans simulated, those stopped once they provably could
                                not beat the plan they were compared with (sim_opts.cutoff) */
  int passed;                /* moves not needed: after the first improving one of their batch
                                (counted in the effort budget with the plans simulated) */
  int jobs;                  /* threads used */
  double seconds;            /* time taken */
  char stop[16];             /* why the search ended: "converged", "effort" or "time" */
  double makespan, bubble;   /* the returned plan's step time (s) and bubble ratio */
  bool fits;                 /* it fits in memory */
  sim_bound bound;           /* the plan-independent bound (bound.bound NAN when unknown) */
  char start[32];            /* "tuned", or the classic plan kept as it was */
  double overflow;           /* when no plan fits: bytes the best plan found needs over the
                                limit (0 otherwise) */
  pass_baseline *baselines;  /* the classic plans evaluated (pass_compare) */
  int nbaselines;
} pass_tune_stats;

/* Co-optimize the partition, placement and schedule of m (costs complete, devices present) with
 * the simulator as the judge (docs/tuner.md), and replace m's plan with the best found: never
 * slower than the best classic plan it evaluated, never over any device's memory limit. Fills
 * *st (free with pass_tune_stats_free). Returns 0, or 1 after reporting through d at 'where'
 * (no plan fits: the smallest overflow found and its device; no costs or devices). */
int pass_tune(ir_module *m, const pass_tune_opts *o, pass_tune_stats *st, diag_engine *d,
              diag_loc where);
void pass_tune_stats_free(pass_tune_stats *st);

/* ---- The configuration search (the config pass, docs/passes.md#config) ------------------- */

/* Options of the search (config{evals=..., long_evals=..., top=..., ...}). */
typedef struct pass_config_opts {
  int evals;          /* plans the short tune of each surviving configuration simulates */
  int long_evals;     /* plans the long tune of each of the best 'top' simulates */
  int top;            /* configurations given a long tune */
  int max_micro_batch; /* largest micro_batch tried */
  bool fewer;         /* also try configurations that leave GPUs unused */
  bool exhaustive;    /* no pruning and no short tunes: every configuration gets a long tune (for
                         tests: the search must find the same configuration) */
  bool baselines;     /* also evaluate the Megatron grid and the PP-only plan */
  bool megatron;      /* plan every configuration with the megatron pass (recompute=false: the
                         configuration's own policy) instead of the tuner, so the rows, the
                         choice and the plan written are Megatron's */
  int jobs;           /* threads (pass_tune_opts.jobs); the result does not depend on it */
  uint64_t seed;      /* the tuner's seed */
} pass_config_opts;


/* One configuration: the choice of the free train fields and what it gives. */
typedef struct pass_config_row {
  int64_t tensor, pipeline, data, micro_batch; /* degrees and sequences per microbatch */
  int recompute, zero;   /* IR_RECOMPUTE_*, ZeRO stage */
  int64_t gpus;          /* pipeline x tensor x data: the GPUs it uses */
  double bound;          /* the plan-independent lower bound of its step (sim_bound), s */
  double makespan;       /* predicted step of its best plan, s (INFINITY: no plan) */
  double bubble;         /* idle / (devices x makespan) */
  double peak_mem;       /* largest peak memory of a GPU, bytes */
  double tokens_per_gpu; /* tokens per second per GPU used */
  double mfu;            /* model FLOPs (3 x forward) per second / (GPUs x peak) */
  int evals;             /* plans simulated for it (0: pruned by its bound) */
  char plan[32];         /* how its plan was made: "tuned", a classic plan's name, "-" */
  char why[200];         /* when makespan is INFINITY: the first reason */
} pass_config_row;

/* What the search did and found. */
typedef struct pass_config_stats {
  int candidates;        /* configurations enumerated */
  int pruned;            /* skipped: bound not below the best step found */
  int short_tuned;       /* given a short tune */
  int long_tuned;        /* given a long tune */
  double seconds;        /* time taken */
  double bound;          /* the smallest bound of any configuration (s): no plan of any is
                            faster, so rows[0] is within rows[0].makespan / bound of optimal */
  pass_config_row *rows; /* every configuration with a plan, best first; rows[0] was chosen */
  int nrows;
  bool has_grid;         /* grid: the best Megatron grid configuration (uniform 1F1B or
                            interleaved 1F1B, no tuner) */
  pass_config_row grid;
  bool has_pp_only;      /* pp_only: the tuned plan with tensor = data = 1 */
  pass_config_row pp_only;
} pass_config_stats;

/* Choose m's free train fields (IR_TRAIN_FREE_FIELDS unset) and plan the best configuration:
 * enumerate every valid choice, estimate each one's costs and bound, tune them in bound order
 * (pruning those whose bound cannot beat the best step found), give the best o->top a long tune,
 * and write the winner into m: train fields, devices, costs, partition, placement, schedule and
 * prediction. Deterministic for given options. Pre: m verified; free fields unset, fixed ones
 * set; a cluster. Fills *st (free with pass_config_stats_free). Returns 0, or 1 after reporting
 * at 'where' (no configuration: the smallest memory overflow or the divisibility that fails). */
int pass_config(ir_module *m, const pass_config_opts *o, pass_config_stats *st, diag_engine *d,
                diag_loc where);
void pass_config_stats_free(pass_config_stats *st);

/* Figures one pass left for the tools' reports: the tune pass's pass_tune_stats, the config
 * pass's pass_config_stats. The manager keeps them without knowing their type. */
typedef struct pass_result {
  pass_id pass;                 /* the pass that left them */
  void *figures;                /* its figures (owned; of the type the pass documents) */
  void (*free_figures)(void *); /* frees what figures holds and figures itself */
} pass_result;

/* The figures passes left in a pipeline run, the last of each pass. Zero-initialize; free with
 * pass_results_free. */
typedef struct pass_results {
  pass_result *items; /* one per pass that left figures */
  int count, cap;
} pass_results;
/* Keep 'figures' (malloc'ed, freed by free_figures) as pass id's, replacing (and freeing) what
 * it left before. r NULL: nobody asked for them, they are freed at once. */
void pass_results_put(pass_results *r, pass_id id, void *figures, void (*free_figures)(void *));
/* How a pass that leaves figures ends: when rc is 0 (it succeeded), keep 'figures' as pass id's
 * in r (pass_results_put); otherwise free them at once (free_figures). Returns rc. Pre: figures
 * malloc'ed and filled as far as the pass got (free_figures frees what it holds either way). */
int pass_results_keep(pass_results *r, pass_id id, int rc, void *figures,
                      void (*free_figures)(void *));
/* The figures pass id left in r, or NULL (r NULL, or the pass did not run or failed). */
const void *pass_results_get(const pass_results *r, pass_id id);
void pass_results_free(pass_results *r);

/* ---- Pipelines ------------------------------------------------------------------------------*/

/* One pass invocation of a pipeline. */
typedef struct pass_pipeline_entry {
  const pass_info *pass; /* the pass */
  pass_options opts;     /* its options (strings owned by the pipeline's arena) */
} pass_pipeline_entry;

/* A parsed pipeline. Zero-initialize, fill with pass_pipeline_parse or pass_pipeline_add, free
 * with pass_pipeline_free. */
typedef struct pass_pipeline {
  pass_pipeline_entry *entries; /* invocations in order */
  int count, cap;               /* number of entries, allocated */
  arena arena;                  /* owns option keys, values and option arrays */
} pass_pipeline;

/* Parse pipeline text into pl (appending to what it holds). The text is added to d as a source
 * named "<pipeline>" so errors point into it with a caret. Syntax errors (empty pass name,
 * unbalanced braces, missing '=' or value, unterminated string) stop the parse; unknown passes
 * and options, and options given twice, are reported and the parse goes on to find more.
 * Whitespace around tokens is allowed; an empty or blank text is the empty pipeline.
 * Returns the number of errors reported (0: pl is complete and valid). */
int pass_pipeline_parse(pass_pipeline *pl, const char *text, diag_engine *d);
/* Append an invocation of p without options (for pipelines built in code); returns it. */
pass_pipeline_entry *pass_pipeline_add(pass_pipeline *pl, const pass_info *p);
/* Canonical text of pl: no whitespace, values quoted when they were quoted or need it.
 * Parsing the text gives the same pipeline. */
void pass_pipeline_print(const pass_pipeline *pl, strbuf *sb);
void pass_pipeline_free(pass_pipeline *pl);

/* ---- Pass manager ---------------------------------------------------------------------------*/

/* Outcome of running passes. */
typedef enum pass_status {
  PASS_OK = 0,       /* every pass succeeded */
  PASS_FAILED = 1,   /* a pass reported errors, or the IR was invalid after a pass */
  PASS_INTERNAL = 2, /* a pass broke its contract (failed silently, or reported errors and
                        claimed success), or output could not be written */
} pass_status;

/* Instrumentation of a pipeline run. Zero-initialize for none. */
typedef struct pass_manager_opts {
  bool verify_each;            /* run ir_verify after every pass; stop when it fails */
  const char *print_ir_before; /* dump the IR before passes with these names (comma list) */
  const char *print_ir_after;  /* dump the IR after passes with these names (comma list) */
  bool print_ir_before_all;    /* dump the IR before every pass */
  bool print_ir_after_all;     /* dump the IR after every pass */
  bool print_debuginfo;        /* dumps include loc(...) */
  FILE *dump;                  /* where dumps go; stderr when NULL */
  struct pass_results *results; /* where passes leave their figures; NULL: dropped */
} pass_manager_opts;

/* Whether 'name' is one of the comma-separated names in 'list' (NULL: none). */
bool pass_name_in_list(const char *name, const char *list);

/* Check a comma-separated list of pass names given to a command-line flag (e.g.
 * --print-ir-after): prints each unknown name to 'err' as "PROG: error: unknown pass 'x' in
 * FLAG" (+ "PROG: note: did you mean 'y'?"), and an empty list as "FLAG needs a pass name".
 * Returns the number of problems. */
int pass_check_name_list(const char *list, const char *flag, const char *prog, FILE *err);

/* Run the passes of pl in order on m. Dumps are written as a header line
 * "# -----// IR Dump Before|After NAME //----- #" followed by the IR and an empty line; a pass
 * that fails gets an "After NAME Failed" dump when after-dumps were asked for. Stops at the first
 * failing pass. With verify_each, an invalid module after pass x is reported as "IR is invalid
 * after pass 'x'" at the pass in the pipeline text, followed by the verifier's errors.
 * Returns PASS_OK, PASS_FAILED or PASS_INTERNAL (see pass_status). */
pass_status pass_pipeline_run(const pass_pipeline *pl, ir_module *m, const pass_manager_opts *o,
                              diag_engine *d);

/* Parse pipeline 'text' and run it on m without instrumentation (pass_pipeline_parse, then
 * pass_pipeline_run). Returns PASS_FAILED when the text does not parse. */
pass_status pass_run_text(ir_module *m, const char *text, diag_engine *d);

/* ---- octo-opt driver --------------------------------------------------------------------------*/

/* What octo-opt was asked to do (after its command line was parsed by the tool). */
typedef struct pass_opt_config {
  const char *input;          /* input file; "-" for stdin */
  const char *passes;         /* pipeline text, NULL for none */
  bool no_verify;             /* skip ir_verify after reading */
  bool verify_diagnostics;    /* check diagnostics against expected-* comments; print no IR */
  bool split_input_file;      /* process each "# -----" chunk as its own module */
  pass_manager_opts pm;       /* instrumentation of the pipeline run */
  FILE *dump_pipeline;        /* when non-NULL, the parsed pipeline is printed there */
  /* When non-NULL, called with each module after its passes instead of printing the IR: appends
   * the output to 'out' and returns 0, or returns -1 after reporting through d ('where' is the
   * module's location; res: the figures its passes left). */
  int (*emit)(void *ctx, const ir_module *m, const pass_results *res, diag_engine *d,
              diag_loc where, strbuf *out);
  void *emit_ctx;             /* passed to emit */
} pass_opt_config;

/* Result of pass_opt_process. */
typedef struct pass_opt_result {
  pass_status status;  /* worst status over all chunks: FAILED when input could not be read or
                          parsed, failed verification or a pass failed; in verify-diagnostics
                          mode FAILED iff expectations did not match */
  int chunks;          /* modules processed */
  int chunks_ok;       /* of which produced output */
} pass_opt_result;

/* Read cfg->input (through d), parse the pipeline, and for each module (each chunk with
 * split_input_file): read it, verify it unless no_verify, run the pipeline, and append its
 * printed IR to 'out' (chunks' outputs separated by a line "# -----"). In verify-diagnostics
 * mode d collects diagnostics, nothing is appended to 'out', and the expectations are checked
 * at the end. Diagnostics go through d; dumps to cfg->pm.dump. Never exits. */
pass_opt_result pass_opt_process(const pass_opt_config *cfg, diag_engine *d, strbuf *out);

#endif
