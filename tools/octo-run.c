/* octo-run.c -- the runtime tool: runs an instruction stream (.ois) for some training steps with
 * real float32 arithmetic on the plan's model (every layer with its real math, at a scale), with
 * every rank a thread (--backend=cpu) or an MPI process (--backend=mpi, under mpirun), and prints
 * per step the time and the loss (with --check also the sequential run's loss and the largest
 * gradient difference), per rank the busy and waiting time; --trace writes the timeline, --dump
 * every layer's tensors; --die and --stop inject faults, --mem-limit bounds the memory the run
 * may use. The process is the tool's: it starts and ends MPI around the runtime's MPI backends
 * and gives each outcome of the runtime (rt_status) its exit code (exit_codes; docs/runtime.md):
 * 0 success, 1 bad input or command line (a run that does not fit in memory too, an output or
 * --dump file that cannot be written), 3 a rank failed (timeout, transport error, a rank that
 * died or stopped), 4 --check found a difference above 1e-5, 5 a loss or gradient was NaN or
 * infinite. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "stream.h"
#include "runtime.h"
#include "cli.h"
#include "support.h"
#ifdef OCTO_HAVE_CUDA
#include "gpu.h"
#endif
#ifdef OCTO_HAVE_MPI
#include <mpi.h>
#endif

#define PROG "octo-run"

/* The exit code of each outcome of the runtime (docs/architecture.md, "Exit codes and limits");
 * the runtime ends a process with them where it must (rt_set_exit_codes). */
static const int exit_codes[RT_STATUS_COUNT] = {
    [RT_STATUS_OK] = 0,             [RT_STATUS_BAD_INPUT] = 1, [RT_STATUS_RUN_FAILED] = 3,
    [RT_STATUS_CHECK_MISMATCH] = 4, [RT_STATUS_NONFINITE] = 5,
};

/* Command-line flags. */
typedef enum flag_id {
  F_BACKEND, F_BF16, F_PROFILE, F_CALIBRATE, F_STEPS, F_SCALE, F_DUMP, F_SEED, F_LR, F_DATA,
  F_TIMEOUT, F_MEM_LIMIT, F_INIT, F_SAVE, F_SAVE_EVERY, F_SAVE_KEEP, F_RESUME, F_CHECK, F_TRACE,
  F_DIE, F_STOP, F_HELP, F_VERSION
} flag_id;

static const cli_flag flags[] = {
    {F_BACKEND, "--backend", "cpu|mpi|cuda|nccl",
     "\ncpu: every rank a thread of this process (default); mpi: an MPI\n"
     "process; cuda: every rank in this process on one GPU (streams per\n"
     "rank); nccl: every rank an MPI process on its own GPU, NCCL messages", false},
    {F_BF16, "--bf16", NULL, "GPU backends: bf16 GEMMs with float32 accumulation (speed)", false},
    {F_PROFILE, "--profile", "FILE",
     "measure every layer's F, B, W as it runs at the scale in force\n"
     "(cpu, mpi: on this machine's cores; cuda: on GPU 0), the\n"
     "optimizer and the link between two ranks, and write the profile\n"
     "JSON that octoc reads (docs/cost-model.md)", false},
    {F_CALIBRATE, "--calibrate", "FILE",
     "cpu, mpi: time every layer's F, B, W and the optimizer inside\n"
     "the run's steps after the first (needs --steps >= 2) and write\n"
     "them as a profile without a link, to plan with after\n"
     "--profile's (octoc --profile=P.json --profile=FILE)", false},
    {F_STEPS, "--steps", "N", "training steps (default 1)", false},
    {F_SCALE, "--scale", "K|auto",
     "divide widths, vocabulary and sequence lengths by K; auto (the\n"
     "default) picks the smallest power of two whose step is a few\n"
     "seconds of CPU work (GPU backends: 64)", false},
    {F_DUMP, "--dump", "DIR",
     "write every layer's input, output, weights and gradients of\n"
     "step 1, microbatch 0, and its targets, as .npy files, then\n"
     "DIR/index.json (docs/runtime.md); a write that fails ends\n"
     "the run (exit 1)", true},
    {F_SEED, "--seed", "S", "initialization and synthetic data (default 1)", false},
    {F_LR, "--lr", "X", "learning rate (default 0.01)", false},
    {F_DATA, "--data", "FILE", "use FILE's bytes as the token stream instead of synthetic data",
     false},
    {F_TIMEOUT, "--timeout", "S",
     "seconds any blocking operation (a message, the all-reduce, the\n"
     "MPI report) may wait before the run fails (default 60)", false},
    {F_MEM_LIMIT, "--mem-limit", "SIZE",
     "memory the run may use on this machine (cpu: all ranks; mpi: the\n"
     "processes of a node), e.g. 16GiB; default: MemAvailable. A run\n"
     "that needs more is refused before it allocates", false},
    {F_INIT, "--init", "PATH",
     "start from the weights of a safetensors file, sharded index\n"
     "or directory (Hugging Face names for Llama-style models;\n"
     "docs/checkpoints.md); every tensor must be there, shaped for\n"
     "the model at the scale in force (default 1 with --init)", false},
    {F_SAVE, "--save", "DIR",
     "save a checkpoint (weights, Adam state, step) into\n"
     "DIR/step-N after the last step, and DIR/latest names it", false},
    {F_SAVE_EVERY, "--save-every", "N", "with --save: also after every N-th step", false},
    {F_SAVE_KEEP, "--save-keep", "K", "with --save: keep the K newest checkpoints (default 1)",
     false},
    {F_RESUME, "--resume", "DIR",
     "continue from DIR's latest checkpoint (or a step directory)\n"
     "up to --steps, which counts from the start of training", false},
    {F_CHECK, "--check", NULL,
     "run the sequential reference beside it and compare every step's\n"
     "loss and gradients (relative difference <= 1e-5)", false},
    {F_TRACE, "--trace", "FILE", "write the timeline as Chrome/Perfetto trace JSON", false},
    {F_DIE, "--die", "RANK[/REPLICA]:WHERE",
     "\ntesting: that rank (of replica 0 unless given) dies at WHERE of\n"
     "its first step: an address, allreduce (its first ALLREDUCE),\n"
     "optimizer (its STEP), tie (its TIE) or setup (mpi: before\n"
     "the communicators are made, or --profile's reduction; cpu:\n"
     "address 0) or init (mpi: before MPI_Init; cpu: as setup) or\n"
     "end (mpi only: after the report, before the closing barrier)\n"
     "or save (its first checkpoint's save, with --save); the\n"
     "others stop with its name", false},
    {F_STOP, "--stop", "RANK[/REPLICA]:WHERE",
     "\ntesting: the same, but the rank stops responding without dying\n"
     "(SIGSTOP under MPI); the others fail when --timeout passes", false},
    {F_HELP, "--help", NULL, "print this help and exit", false},
    {F_VERSION, "--version", NULL, "print the version and exit", false},
};
#define NFLAGS (int)(sizeof flags / sizeof flags[0])

static void usage(FILE *out) {
  fprintf(out,
          "usage: " PROG " PLAN.ois [--backend=cpu|mpi|cuda|nccl] [options]\n"
          "       mpirun -np N " PROG " PLAN.ois --backend=mpi|nccl [options]\n"
          "       " PROG " PLAN.ois [--backend=cpu|mpi|cuda] --profile=FILE.json\n\n"
          "Runs an OctoPipe instruction stream (octoc --emit=stream) with real float32\n"
          "arithmetic on the plan's model: every layer with its real math, its widths,\n"
          "vocabulary and sequence divided by the scale (docs/runtime.md); on the GPU backends\n"
          "the same kernels as CUDA kernels and cuBLAS GEMMs (default scale: the plan's\n"
          "profile's, else 1).\n\n"
          "options:\n");
  cli_usage(out, flags, NFLAGS, 18);
  fprintf(out,
          "\nexit status: 0 success, 1 bad input or command line (or no GPU for a GPU backend,\n"
          "more memory than the machine offers, an output or --dump file that cannot be\n"
          "written), 3 a rank failed (timeout, transport or\n"
          "NCCL error, a rank that died or stopped; under mpirun too, whichever rank), 4\n"
          "--check found a difference, 5 a loss or gradient was NaN or infinite.\n");
}

/* Parse a number in [lo, hi] from text (the whole text); false when it is not one. */
static bool number(const char *text, double lo, double hi, double *out) {
  char *end;
  errno = 0;
  double v = strtod(text, &end);
  if (end == text || *end || errno || !(v >= lo && v <= hi)) return false;
  *out = v;
  return true;
}

/* Say that flag's value is not 'want'. Returns RT_STATUS_BAD_INPUT. */
static rt_status bad_value(const char *flag, const char *value, const char *want) {
  fprintf(stderr, PROG ": error: %s expects %s, got '%s'\n", flag, want, value);
  return RT_STATUS_BAD_INPUT;
}

/* --dump=DIR, before any step runs: make DIR (its parent must exist), or check that the one
 * there is a directory this process can write, and remove an index.json left there, so that an
 * index is only ever that of a run which wrote every file it names (rt_dump_finish). Returns 0,
 * or -1 after saying why. */
static int dump_prepare(const char *dir) {
  struct stat st;
  const char *why = NULL;
  if (mkdir(dir, 0777) != 0 && errno != EEXIST)
    why = strerror(errno);
  else if (stat(dir, &st) != 0)
    why = strerror(errno);
  else if (!S_ISDIR(st.st_mode))
    why = "exists and is not a directory";
  else if (access(dir, W_OK | X_OK) != 0)
    why = strerror(errno);
  strbuf index = {0};
  strbuf_printf(&index, "%s/index.json", dir);
  if (!why && unlink(strbuf_cstr(&index)) != 0 && errno != ENOENT) why = strerror(errno);
  strbuf_free(&index);
  if (why) fprintf(stderr, PROG ": error: --dump=%s: %s\n", dir, why);
  return why ? -1 : 0;
}

/* --profile: measure s's layers at mo's scale (the cpu backend: with the rank threads and the
 * hub's link; cuda: on GPU 0, bf16 GEMM inputs when asked), write the profile JSON to path and say
 * what it measured. */
static rt_status write_profile(const be_stream *s, const rt_opts *mo, bool cuda, bool bf16,
                               const char *path) {
  strbuf json = {0}, err = {0};
  double t0 = support_seconds();
  rt_status rc = RT_STATUS_OK;
#ifdef OCTO_HAVE_CUDA
  int got = cuda ? rt_profile_cuda(s, mo, bf16, &json, &err) : rt_profile_threads(s, mo, &json, &err);
#else
  (void)cuda;
  (void)bf16;
  int got = rt_profile_threads(s, mo, &json, &err);
#endif
  if (got != 0) {
    fprintf(stderr, PROG ": error: %s\n", strbuf_cstr(&err));
    rc = strstr(strbuf_cstr(&err), "no CUDA") ? RT_STATUS_BAD_INPUT : RT_STATUS_RUN_FAILED;
  } else if (cli_write_output(PROG, path, &json) != 0) {
    rc = RT_STATUS_BAD_INPUT;
  } else if (cuda) {
    printf("%s: profiled %d layers at scale %d on GPU 0 in %.1f s: %s\n", s->model,
           (int)s->nlayers, mo->scale, support_seconds() - t0, path);
  } else {
    printf("%s: profiled %d layers at scale %d on %d rank threads in %.1f s: %s\n", s->model,
           (int)s->nlayers, mo->scale, (int)s->nranks, support_seconds() - t0, path);
  }
  strbuf_free(&json);
  strbuf_free(&err);
  return rc;
}

#ifdef OCTO_HAVE_MPI
/* What a process under mpirun runs: the mpi backend's run or profiler, or the nccl backend. */
typedef enum mpi_job { JOB_MPI, JOB_MPI_PROFILE, JOB_NCCL } mpi_job;

/* One process of an MPI backend (the stream at path; out: the trace, or --profile's file): MPI
 * started and ended around the runtime's parts, in the order rt_mpi_open gives. Returns this
 * process's status (the same on every process; a rank that fails ends the job instead). */
static rt_status run_mpi(int *argc, char ***argv, mpi_job job, const char *path,
                         const rt_opts *mo, const rt_run_opts *o, bool bf16, const char *out) {
  strbuf err = {0};
  be_stream *s = rt_mpi_open(path, o, &err); /* arms the start-up's watchdog */
  MPI_Init(argc, argv);
  rt_status st = rt_mpi_check(s, &err, path, mo);
  if (st == RT_STATUS_OK) {
    switch (job) {
    case JOB_MPI: st = rt_mpi_run(s, path, mo, o, out); break;
    case JOB_MPI_PROFILE: st = rt_mpi_profile(s, mo, o, out); break;
    case JOB_NCCL:
#ifdef OCTO_HAVE_NCCL
      st = rt_nccl_run(s, path, mo, o, bf16, out);
#endif
      break;
    }
  }
  (void)bf16;
  be_stream_free(s);
  strbuf_free(&err);
  rt_mpi_close(); /* the closing barrier; arms the shut-down's watchdog */
  MPI_Finalize();
  rt_mpi_closed();
  return st;
}
#endif

/* octo-run's whole run from its command line: every outcome as a status (main gives it its exit
 * code). */
static rt_status octo_run(int argc, char **argv) {
  const char *input = NULL, *trace_path = NULL, *backend = "cpu", *profile = NULL;
  bool bf16 = false;
  rt_opts mo = {0, 1, 0.01, NULL, NULL, false};
  rt_run_opts o = {.steps = 1, .timeout = 60, .fault = {RT_FAULT_NONE, 0, 0, -1, -1},
                   .backend = "cpu"};
  for (int i = 1; i < argc; i++) {
    const cli_flag *f;
    const char *v;
    double x;
    cli_item it = cli_next(PROG, flags, NFLAGS, argc, argv, &i, &f, &v);
    if (it == CLI_ERROR) return RT_STATUS_BAD_INPUT;
    if (it == CLI_INPUT) {
      if (input) {
        fprintf(stderr, PROG ": error: more than one input file ('%s' and '%s')\n", input, v);
        return RT_STATUS_BAD_INPUT;
      }
      input = v;
      continue;
    }
    switch ((flag_id)f->id) {
    case F_HELP: usage(stdout); return RT_STATUS_OK;
    case F_VERSION: printf(PROG " (OctoPipe) %s\n", OCTO_VERSION); return RT_STATUS_OK;
    case F_BACKEND:
      if (strcmp(v, "cpu") != 0 && strcmp(v, "mpi") != 0 && strcmp(v, "cuda") != 0 &&
          strcmp(v, "nccl") != 0)
        return bad_value("--backend", v, "cpu, mpi, cuda or nccl");
      backend = v;
      o.backend = v;
      break;
    case F_STEPS:
      if (!number(v, 1, 1e6, &x) || x != (int)x) return bad_value("--steps", v, "a count >= 1");
      o.steps = (int)x;
      break;
    case F_SCALE:
      if (strcmp(v, "auto") == 0)
        mo.scale = 0;
      else if (!number(v, 1, 1e9, &x) || x != (int)x)
        return bad_value("--scale", v, "a whole number >= 1 or auto");
      else
        mo.scale = (int)x;
      break;
    case F_DUMP:
      if (!v) {
        fputs(PROG ": error: --dump needs a directory: --dump=DIR\n", stderr);
        return RT_STATUS_BAD_INPUT;
      }
      if (!*v) return bad_value("--dump", v, "a directory");
      mo.dump = v;
      break;
    case F_SEED: {
      char *end;
      errno = 0;
      unsigned long long sd = strtoull(v, &end, 10);
      if (end == v || *end || *v == '-' || *v == '+' || errno == ERANGE)
        return bad_value("--seed", v, "a whole number from 0 to 18446744073709551615");
      mo.seed = (uint64_t)sd;
      break;
    }
    case F_LR:
      if (!number(v, 0, 1e6, &x)) return bad_value("--lr", v, "a non-negative number");
      mo.lr = x;
      break;
    case F_DATA: mo.data = v; break;
    case F_TIMEOUT:
      if (!number(v, 0.001, 1e6, &x)) return bad_value("--timeout", v, "seconds > 0");
      o.timeout = x;
      break;
    case F_MEM_LIMIT:
      if (rt_parse_bytes(v, &o.mem_limit) != 0)
        return bad_value("--mem-limit", v, "a size (bytes, or with K, M, G or T: 16GiB)");
      break;
    case F_BF16: bf16 = true; break;
    case F_PROFILE: profile = v; break;
    case F_CALIBRATE:
      if (!*v) return bad_value("--calibrate", v, "a file name");
      o.calibrate = v;
      break;
    case F_INIT:
      if (!*v) return bad_value("--init", v, "a safetensors file, index or directory");
      o.init = v;
      break;
    case F_SAVE:
      if (!*v) return bad_value("--save", v, "a directory");
      o.save = v;
      break;
    case F_SAVE_EVERY:
    case F_SAVE_KEEP:
      if (!number(v, 1, 1e6, &x) || x != (int)x) return bad_value(f->name, v, "a count >= 1");
      *(f->id == F_SAVE_EVERY ? &o.save_every : &o.save_keep) = (int)x;
      break;
    case F_RESUME:
      if (!*v) return bad_value("--resume", v, "a checkpoint directory");
      o.resume = v;
      break;
    case F_CHECK: o.check = true; break;
    case F_TRACE:
      trace_path = v;
      o.trace = true;
      break;
    case F_DIE:
    case F_STOP:
      if (rt_fault_parse(v, &o.fault) != 0)
        return bad_value(f->name, v,
                         "RANK[/REPLICA]:WHERE (WHERE: an address, allreduce, optimizer, "
                         "tie, setup, init, end or save)");
      o.fault.kind = f->id == F_DIE ? RT_FAULT_DIE : RT_FAULT_STOP;
      break;
    }
  }
  if (!input) {
    fputs(PROG ": error: no input file (try '" PROG " --help')\n", stderr);
    return RT_STATUS_BAD_INPUT;
  }
  bool gpu = strcmp(backend, "cuda") == 0 || strcmp(backend, "nccl") == 0;
  if (profile && strcmp(backend, "nccl") == 0) {
    fputs(PROG ": error: --profile runs with --backend=cpu, mpi or cuda\n", stderr);
    return RT_STATUS_BAD_INPUT;
  }
  if (o.calibrate) {
    const char *why = gpu ? "runs with --backend=cpu or mpi"
                    : profile ? "times a run, --profile the layers alone: give one of them"
                    : o.check ? "times a plain run: without --check"
                    : o.steps < 2 ? "needs --steps=2 or more (the first step warms up)" : NULL;
    if (why) {
      fprintf(stderr, PROG ": error: --calibrate %s\n", why);
      return RT_STATUS_BAD_INPUT;
    }
  }
  /* --profile on mpi has one place to strike: before its reduction (setup). */
  bool profile_setup = profile && strcmp(backend, "mpi") == 0 &&
                       o.fault.place == RT_PLACE_SETUP;
  if (o.fault.kind != RT_FAULT_NONE && (gpu || (profile && !profile_setup))) {
    fputs(PROG ": error: --die and --stop run with --backend=cpu or mpi, without --profile "
          "(with it only on mpi at 'setup')\n", stderr);
    return RT_STATUS_BAD_INPUT;
  }
  if (o.fault.kind != RT_FAULT_NONE && o.fault.place == RT_PLACE_SAVE && !o.save) {
    fputs(PROG ": error: --die and --stop at 'save' need --save=DIR\n", stderr);
    return RT_STATUS_BAD_INPUT;
  }
  if (o.fault.kind != RT_FAULT_NONE && o.fault.place == RT_PLACE_END &&
      strcmp(backend, "mpi") != 0) {
    fputs(PROG ": error: --die and --stop at 'end' (after the report) run with "
          "--backend=mpi\n", stderr);
    return RT_STATUS_BAD_INPUT;
  }
  /* nccl reads the stream in each process: the real size unless --scale says (or, resuming, the
   * checkpoint: rt_nccl_run) */
  if (strcmp(backend, "nccl") == 0 && mo.scale == 0 && !o.resume) mo.scale = 1;
  if (gpu && mo.dump) {
    fputs(PROG ": error: --dump needs the cpu or mpi backend\n", stderr);
    return RT_STATUS_BAD_INPUT;
  }
  if (profile && (o.init || o.save || o.resume)) {
    fputs(PROG ": error: --init, --save and --resume run without --profile\n", stderr);
    return RT_STATUS_BAD_INPUT;
  }
  if (mo.dump && dump_prepare(mo.dump) != 0) return RT_STATUS_BAD_INPUT;
#ifndef OCTO_HAVE_CUDA
  if (gpu) {
    fputs(PROG ": error: this octo-run was built without CUDA (the GPU backends and --profile "
          "need the CUDA toolkit at build time)\n", stderr);
    return RT_STATUS_BAD_INPUT;
  }
#else
  if (strcmp(backend, "nccl") == 0) {
#ifdef OCTO_HAVE_NCCL
    return run_mpi(&argc, &argv, JOB_NCCL, input, &mo, &o, bf16, trace_path);
#else
    fputs(PROG ": error: this octo-run was built without NCCL and MPI\n", stderr);
    return RT_STATUS_BAD_INPUT;
#endif
  }
#endif
  (void)gpu;
  if (strcmp(backend, "mpi") == 0) {
#ifdef OCTO_HAVE_MPI
    if (profile) return run_mpi(&argc, &argv, JOB_MPI_PROFILE, input, &mo, &o, bf16, profile);
    return run_mpi(&argc, &argv, JOB_MPI, input, &mo, &o, bf16, trace_path);
#else
    fputs(PROG ": error: this octo-run was built without MPI (install OpenMPI and rebuild)\n",
          stderr);
    return RT_STATUS_BAD_INPUT;
#endif
  }
  strbuf err = {0};
  be_stream *s = be_read_file(input, &err);
  if (!s) {
    fprintf(stderr, PROG ": error: %s\n", strbuf_cstr(&err));
    strbuf_free(&err);
    return RT_STATUS_BAD_INPUT;
  }
  if (rt_fault_resolve(s, &o.fault, &err) != 0) {
    fprintf(stderr, PROG ": error: %s\n", strbuf_cstr(&err));
    strbuf_free(&err);
    be_stream_free(s);
    return RT_STATUS_BAD_INPUT;
  }
  if (mo.scale == 0 && s->scale > 0) mo.scale = s->scale; /* where its costs were measured */
  if (mo.scale == 0 && gpu && !o.resume) mo.scale = 1;    /* GPUs run the real size */
  if (rt_ckpt_prepare(s, &mo, &o, &err) != 0) {
    fprintf(stderr, PROG ": error: %s\n", strbuf_cstr(&err));
    strbuf_free(&err);
    be_stream_free(s);
    return RT_STATUS_BAD_INPUT;
  }
  rt_model *probe = rt_model_new(s, &mo, &err); /* the data file and the scale, checked once */
  if (!probe) {
    fprintf(stderr, PROG ": error: %s\n", strbuf_cstr(&err));
    strbuf_free(&err);
    be_stream_free(s);
    return RT_STATUS_BAD_INPUT;
  }
  mo.scale = rt_model_scale(probe); /* every rank builds the same */
  if (!gpu && !profile && rt_mem_check(s, probe, &o, NULL, s->nranks * s->replicas, &err) != 0) {
    fprintf(stderr, PROG ": error: %s\n", strbuf_cstr(&err));
    strbuf_free(&err);
    rt_model_free(probe);
    be_stream_free(s);
    return RT_STATUS_BAD_INPUT;
  }
  rt_model_free(probe);
  if (profile) {
    rt_status rc = write_profile(s, &mo, gpu, bf16, profile);
    be_stream_free(s);
    strbuf_free(&err);
    return rc;
  }
  int world = s->nranks * s->replicas;
  rt_rank_stats *stats = xcalloc((size_t)world, sizeof *stats);
  rt_status rc;
  bool cuda = strcmp(backend, "cuda") == 0;
#ifdef OCTO_HAVE_CUDA
  int started = cuda ? rt_run_cuda(s, &mo, &o, bf16, stats) : rt_run_threads(s, &mo, &o, stats);
#else
  int started = rt_run_threads(s, &mo, &o, stats);
#endif
  if (started != 0 && !cuda) {
    fputs(PROG ": error: cannot start the rank threads\n", stderr);
    rc = RT_STATUS_RUN_FAILED;
  } else if (started != 0 && stats[0].status == RT_FAILED && strstr(stats[0].err, "no CUDA")) {
    fprintf(stderr, PROG ": error: %s\n", stats[0].err);
    rc = RT_STATUS_BAD_INPUT;
  } else {
    strbuf out = {0}, errs = {0};
    printf("%s: %d rank%s x %d replica%s, %d stages, %d microbatches; backend %s, "
           "%d step%s, scale %d\n", input, (int)s->nranks, s->nranks == 1 ? "" : "s", (int)s->replicas,
           s->replicas == 1 ? "" : "s", (int)s->nstages, (int)s->nmb,
           cuda ? (bf16 ? "cuda (one GPU, bf16)" : "cuda (one GPU)") : "cpu (threads)",
           o.steps - o.first_step, o.steps - o.first_step == 1 ? "" : "s", mo.scale);
    rc = rt_report_run(s, &o, stats, world, &out, &errs);
    fputs(strbuf_cstr(&out), stdout);
    fflush(stdout);
    for (const char *l = strbuf_cstr(&errs); *l;) {
      const char *e = strchr(l, '\n');
      fprintf(stderr, PROG ": %.*s\n", (int)(e ? e - l : (long)strlen(l)), l);
      l = e ? e + 1 : l + strlen(l);
    }
    if (trace_path && rc != RT_STATUS_RUN_FAILED) {
      strbuf tr = {0};
      rt_trace(s, stats, world, &tr);
      if (cli_write_output(PROG, trace_path, &tr) != 0 && rc == RT_STATUS_OK)
        rc = RT_STATUS_BAD_INPUT;
      strbuf_free(&tr);
    }
    if (o.calibrate && rc == RT_STATUS_OK)
      rc = rt_calibration_write(s, &o, stats, world, mo.scale, "cpu");
    if (rc == RT_STATUS_OK) rc = rt_dump_finish(s, &mo); /* last: every file it names is there */
    strbuf_free(&out);
    strbuf_free(&errs);
  }
  for (int i = 0; i < world; i++) rt_rank_stats_free(&stats[i]);
  free(stats);
  be_stream_free(s);
  strbuf_free(&err);
  return rc;
}

int main(int argc, char **argv) {
  cli_init();
#ifdef __GLIBC__
  /* Kernels allocate their temporaries per call: keep freed memory in the heap instead of
   * giving it back to the system and faulting it in again at the next call. */
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
  rt_set_exit_codes(exit_codes); /* before anything of the runtime runs */
  return exit_codes[octo_run(argc, argv)];
}
