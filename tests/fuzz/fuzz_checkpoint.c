/* fuzz_checkpoint.c -- libFuzzer harness of the checkpoint reader (rt_ckpt_prepare with
 * --resume): any bytes as the manifest (octopipe.json) of a step directory whose shards and
 * indexes are a real checkpoint of a small Llama-style plan, saved once by a run at start-up;
 * the reader must refuse or accept it with a message, never crash, hang or leak. The seeds
 * (seeds.py) are manifests of that plan with and without their files' sizes and CRCs. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "frontend.h"
#include "fuzz.h"
#include "passes.h"
#include "runtime.h"
#include "support.h"

/* The plan: embedding, attention, mlp and LM head on two ranks, with Adam. */
static const char fz_spec[] =
    "device cpu { peak = 100 TFLOPS  mem = 80 GiB  hbm = 2 TB/s  efficiency = 0.5 }\n"
    "cluster box { nodes = 1, gpus_per_node = 2, gpu = cpu\n"
    "  intra = link { bw = 100 GB/s, lat = 5 us } }\n"
    "model fz {\n"
    "  hidden = 16  heads = 2  head_dim = 8  vocab = 32  seq = 8  ffn = 32\n"
    "  layer embed : embedding\n  layer attn : attention\n  layer mlp : mlp\n"
    "  layer head : lm_head\n}\n"
    "train { cluster = box  pipeline = 2, tensor = 1, data = 1  micro_batch = 1\n"
    "  global_batch = 2  dtype = fp32  optimizer = adam }\n";

/* The checkpoint's directory (made on the first input, removed at exit), its step directory and
 * manifest, and the plan's stream. */
static char fz_dir[] = "/tmp/octo-fuzz-ckpt-XXXXXX";
static char fz_step[96], fz_manifest[128];
static be_stream *fz_stream;

/* Remove the checkpoint directory, whose directories hold plain files only. */
static void fz_remove(const char *path) {
  DIR *d = opendir(path);
  if (!d) return;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    char p[512];
    snprintf(p, sizeof p, "%s/%s", path, e->d_name);
    if (unlink(p) != 0) fz_remove(p);
  }
  closedir(d);
  rmdir(path);
}

static void fz_cleanup(void) {
  fz_remove(fz_dir);
  be_stream_free(fz_stream);
}

/* Plan the spec and save its checkpoint of step 1 once. Returns false when it cannot. */
static bool fz_setup(void) {
  static int state; /* 0: not yet, 1: ready, 2: failed */
  if (state) return state == 1;
  state = 2;
  if (!mkdtemp(fz_dir)) return false;
  atexit(fz_cleanup);
  FILE *null = fopen("/dev/null", "w");
  diag_engine *d = diag_new(null);
  uint32_t src = diag_add_source(d, "fz.octo", fz_spec, sizeof fz_spec - 1, 0);
  fe_options fo = {false};
  ir_module *m = fe_compile(d, src, &fo);
  if (m && pass_run_text(m, "cost,partition{method=balanced},place,schedule{method=1f1b}", d) ==
               PASS_OK)
    fz_stream = be_lower(m, d, diag_mkloc(0, 0, 0, 0));
  ir_module_free(m);
  diag_free(d);
  if (null) fclose(null);
  if (!fz_stream) return false;
  rt_opts mo = {.scale = 1, .seed = 1, .lr = 0.01};
  rt_run_opts o = {.steps = 1, .timeout = 60, .fault = {RT_FAULT_NONE, 0, 0, -1, -1},
                   .backend = "cpu", .save = fz_dir};
  int n = fz_stream->nranks * fz_stream->replicas;
  rt_rank_stats *stats = xcalloc((size_t)n, sizeof *stats);
  bool ok = rt_run_threads(fz_stream, &mo, &o, stats) == 0 && stats[0].status == RT_OK;
  for (int i = 0; i < n; i++) rt_rank_stats_free(&stats[i]);
  free(stats);
  snprintf(fz_step, sizeof fz_step, "%s/step-00000001", fz_dir);
  snprintf(fz_manifest, sizeof fz_manifest, "%s/%s", fz_step, RT_CKPT_MANIFEST);
  state = ok ? 1 : 2;
  return ok;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!fz_setup()) return 0;
  strbuf why = {0};
  if (!support_write_file(fz_manifest, data, size, &why)) {
    strbuf_free(&why);
    return 0;
  }
  rt_opts mo = {.scale = 0, .seed = 1, .lr = 0.01};
  rt_run_opts o = {.steps = 2, .timeout = 60, .fault = {RT_FAULT_NONE, 0, 0, -1, -1},
                   .backend = "cpu", .resume = fz_step};
  strbuf err = {0};
  rt_ckpt_prepare(fz_stream, &mo, &o, &err);
  strbuf_free(&err);
  strbuf_free(&why);
  return 0;
}
