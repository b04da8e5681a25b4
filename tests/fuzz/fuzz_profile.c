/* fuzz_profile.c -- libFuzzer harness of the profile reader (cost_profile_apply): any bytes as
 * a profile file, applied to a small module with every layer kind. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "cost.h"
#include "fuzz.h"
#include "ir.h"
#include "support.h"

/* The module the profiles apply to (textual IR). */
static const char fz_module[] =
    "module @m {\n"
    "  train { pipeline = 1, tensor = 1, data = 1, micro_batch = 1, microbatches = 1, seq = 64 }\n"
    "  cluster @c { nodes = 1, gpus_per_node = 1 }\n"
    "  link intra { bw = 10GB/s, lat = 1us }\n"
    "  device $d0 cpu { peak = 1TFLOPS, mem = 8GiB, hbm = 100GB/s, efficiency = 0.5 }\n"
    "  layer %0 \"embed\" embedding { hidden = 64, vocab = 128, seq = 64 }\n"
    "  layer %1 \"attn\" attention { hidden = 64, heads = 4, kv_heads = 2, head_dim = 16, seq = 64, norm_eps = 1e-05 }\n"
    "  layer %2 \"mlp\" mlp { hidden = 64, ffn = 128, seq = 64, norm_eps = 1e-05 }\n"
    "  layer %3 \"moe\" moe { hidden = 64, experts = 4, top_k = 2, expert_ffn = 32, seq = 64, norm_eps = 1e-05 }\n"
    "  layer %4 \"ssm\" mamba2 { hidden = 64, heads = 2, head_dim = 32, seq = 64, norm_eps = 1e-05 }\n"
    "  layer %5 \"head\" lm_head { hidden = 64, vocab = 128, seq = 64, norm_eps = 1e-05 }\n"
    "}\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char path[] = "/tmp/octo-fuzz-profile-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return 0;
  FILE *f = fdopen(fd, "wb");
  if (!f) {
    close(fd);
    unlink(path);
    return 0;
  }
  fwrite(data, 1, size, f);
  fclose(f);
  FILE *null = fopen("/dev/null", "w");
  diag_engine *d = diag_new(null);
  uint32_t src = diag_add_source(d, "m.oir", fz_module, sizeof fz_module - 1, 1);
  ir_module *m = ir_read(d, src);
  if (m) cost_profile_apply(m, path, NULL, diag_mkloc(src, 0, 0, 0), d);
  ir_module_free(m);
  diag_free(d);
  if (null) fclose(null);
  unlink(path);
  return 0;
}
