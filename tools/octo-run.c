/* octo-run.c -- the runtime tool: runs an instruction stream (.ois) for some training steps with
 * real float32 arithmetic on the stand-in model, with every rank a thread (--backend=cpu) or an
 * MPI process (--backend=mpi, under mpirun), and prints per step the time and the loss (with
 * --check also the sequential run's loss and the largest gradient difference), per rank the busy
 * and waiting time; --trace writes the timeline. Exit codes (docs/runtime.md): 0 success, 1 bad
 * input or command line, 3 a rank failed (timeout, transport error, a rank that died), 4 --check
 * found a difference above 1e-5. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "runtime.h"
#include "support.h"

#define PROG "octo-run"

static void usage(FILE *out) {
  fprintf(out,
          "usage: " PROG " PLAN.ois [--backend=cpu|mpi] [options]\n"
          "       mpirun -np N " PROG " PLAN.ois --backend=mpi [options]\n\n"
          "Runs an OctoPipe instruction stream (octoc --emit=stream) with real float32\n"
          "arithmetic on a stand-in model sized from the plan's layers (docs/runtime.md).\n\n"
          "options:\n"
          "  --backend=cpu|mpi  every rank a thread of this process (default), or an MPI process\n"
          "  --steps=N          training steps (default 1)\n"
          "  --scale=K          divide hidden size, vocabulary and sequence length by K (default 64)\n"
          "  --seed=S           initialization and synthetic data (default 1)\n"
          "  --lr=X             learning rate (default 0.01)\n"
          "  --data=FILE        use FILE's bytes as the token stream instead of synthetic data\n"
          "  --timeout=S        seconds a rank may wait for a message before the run fails\n"
          "                     (default 60)\n"
          "  --check            run the sequential reference beside it and compare every step's\n"
          "                     loss and gradients (relative difference <= 1e-5)\n"
          "  --trace=FILE       write the timeline as Chrome/Perfetto trace JSON\n"
          "  --die=RANK:ADDR    testing: rank RANK stops dead at address ADDR of its first step\n"
          "  --help, --version\n\n"
          "exit status: 0 success, 1 bad input or command line, 3 a rank failed (timeout,\n"
          "transport error, a rank that died), 4 --check found a difference.\n");
}

/* Whether arg starts with prefix; *value then points just after it. */
static bool starts(const char *arg, const char *prefix, const char **value) {
  size_t n = strlen(prefix);
  if (strncmp(arg, prefix, n) != 0) return false;
  *value = arg + n;
  return true;
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

static int bad_value(const char *flag, const char *value, const char *want) {
  fprintf(stderr, PROG ": error: %s expects %s, got '%s'\n", flag, want, value);
  return RT_EXIT_INPUT;
}

/* Write text to path. Returns 0, or 1 after saying why. */
static int write_file(const char *path, const strbuf *text) {
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, PROG ": error: cannot write '%s': %s\n", path, strerror(errno));
    return 1;
  }
  bool ok = fwrite(strbuf_cstr(text), 1, text->len, f) == text->len;
  if (fclose(f) != 0 || !ok) {
    fprintf(stderr, PROG ": error: cannot write '%s'\n", path);
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  const char *input = NULL, *trace_path = NULL, *backend = "cpu";
  rt_opts mo = {64, 1, 0.01, NULL};
  rt_run_opts o = {1, 60, false, false, -1, -1};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v;
    double x;
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      return 0;
    } else if (strcmp(a, "--version") == 0) {
      printf(PROG " (OctoPipe) %s\n", OCTO_VERSION);
      return 0;
    } else if (starts(a, "--backend=", &v)) {
      if (strcmp(v, "cpu") != 0 && strcmp(v, "mpi") != 0)
        return bad_value("--backend", v, "cpu or mpi");
      backend = v;
    } else if (starts(a, "--steps=", &v)) {
      if (!number(v, 1, 1e6, &x) || x != (int)x) return bad_value("--steps", v, "a count >= 1");
      o.steps = (int)x;
    } else if (starts(a, "--scale=", &v)) {
      if (!number(v, 1, 1e9, &x) || x != (int)x) return bad_value("--scale", v, "a whole number >= 1");
      mo.scale = (int)x;
    } else if (starts(a, "--seed=", &v)) {
      if (!number(v, 0, 1e18, &x) || x != (double)(uint64_t)x)
        return bad_value("--seed", v, "a non-negative whole number");
      mo.seed = (uint64_t)x;
    } else if (starts(a, "--lr=", &v)) {
      if (!number(v, 0, 1e6, &x)) return bad_value("--lr", v, "a non-negative number");
      mo.lr = x;
    } else if (starts(a, "--data=", &v)) {
      mo.data = v;
    } else if (starts(a, "--timeout=", &v)) {
      if (!number(v, 0.001, 1e6, &x)) return bad_value("--timeout", v, "seconds > 0");
      o.timeout = x;
    } else if (strcmp(a, "--check") == 0) {
      o.check = true;
    } else if (starts(a, "--trace=", &v)) {
      trace_path = v;
      o.trace = true;
    } else if (starts(a, "--die=", &v)) {
      int r, ad;
      char tail;
      if (sscanf(v, "%d:%d%c", &r, &ad, &tail) != 2 || r < 0 || ad < 0)
        return bad_value("--die", v, "RANK:ADDR");
      o.die_rank = r;
      o.die_addr = ad;
    } else if (a[0] == '-' && a[1]) {
      fprintf(stderr, PROG ": error: unknown option '%s' (try '" PROG " --help')\n", a);
      return RT_EXIT_INPUT;
    } else if (input) {
      fprintf(stderr, PROG ": error: more than one input file ('%s' and '%s')\n", input, a);
      return RT_EXIT_INPUT;
    } else {
      input = a;
    }
  }
  if (!input) {
    fputs(PROG ": error: no input file (try '" PROG " --help')\n", stderr);
    return RT_EXIT_INPUT;
  }
  if (strcmp(backend, "mpi") == 0) {
#ifdef OCTO_HAVE_MPI
    return rt_main_mpi(&argc, &argv, input, &mo, &o, trace_path);
#else
    fputs(PROG ": error: this octo-run was built without MPI (install OpenMPI and rebuild)\n",
          stderr);
    return RT_EXIT_INPUT;
#endif
  }
  strbuf err = {0};
  be_stream *s = be_read_file(input, &err);
  if (!s) {
    fprintf(stderr, PROG ": error: %s\n", strbuf_cstr(&err));
    strbuf_free(&err);
    return RT_EXIT_INPUT;
  }
  rt_model *probe = rt_model_new(s, &mo, &err); /* the data file and the scale, checked once */
  if (!probe) {
    fprintf(stderr, PROG ": error: %s\n", strbuf_cstr(&err));
    strbuf_free(&err);
    be_stream_free(s);
    return RT_EXIT_INPUT;
  }
  rt_model_free(probe);
  int world = s->nranks * s->replicas;
  rt_rank_stats *stats = xcalloc((size_t)world, sizeof *stats);
  int rc;
  if (rt_run_threads(s, &mo, &o, stats) != 0) {
    fputs(PROG ": error: cannot start the rank threads\n", stderr);
    rc = RT_EXIT_RUNTIME;
  } else {
    strbuf out = {0}, errs = {0};
    printf("%s: %d rank%s x %d replica%s, %d stages, %d microbatches; backend cpu (threads), "
           "%d step%s\n", input, (int)s->nranks, s->nranks == 1 ? "" : "s", (int)s->replicas,
           s->replicas == 1 ? "" : "s", (int)s->nstages, (int)s->nmb, o.steps,
           o.steps == 1 ? "" : "s");
    rc = rt_report_run(s, &o, stats, world, &out, &errs);
    fputs(strbuf_cstr(&out), stdout);
    fflush(stdout);
    for (const char *l = strbuf_cstr(&errs); *l;) {
      const char *e = strchr(l, '\n');
      fprintf(stderr, PROG ": %.*s\n", (int)(e ? e - l : (long)strlen(l)), l);
      l = e ? e + 1 : l + strlen(l);
    }
    if (trace_path && rc != RT_EXIT_RUNTIME) {
      strbuf tr = {0};
      rt_trace(s, stats, world, &tr);
      if (write_file(trace_path, &tr) != 0 && rc == RT_EXIT_OK) rc = RT_EXIT_INPUT;
      strbuf_free(&tr);
    }
    strbuf_free(&out);
    strbuf_free(&errs);
  }
  for (int i = 0; i < world; i++) rt_rank_stats_free(&stats[i]);
  free(stats);
  be_stream_free(s);
  strbuf_free(&err);
  return rc;
}
