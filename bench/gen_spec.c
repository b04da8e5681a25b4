/* gen_spec.c -- writes a large synthetic .octo spec for the front-end scaling benchmark
 * (bench/parse_scale.sh): an embedding, N-2 body layers cycling through attention, mlp, mamba2
 * and moe (some with their own parameters), and an LM head, plus device, cluster and train
 * blocks. By default every layer is its own statement, so the parser really sees N layer
 * statements; with --repeat the body is written as one 'repeat' of an 8-layer group (the rest
 * explicitly), which exercises expansion instead of parsing. Output is deterministic.
 *
 * usage: gen_spec [-n LAYERS] [--repeat] [-o FILE] */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One layer of the repeating body pattern. */
typedef struct body_layer {
  const char *prefix; /* name prefix (the layer index or a letter is appended) */
  const char *kind;   /* layer kind */
  const char *params; /* parameter block including braces, or "" */
} body_layer;

/* A hybrid Nemotron-H / DeepSeek-like mix: attention and mamba2 mixers, dense and MoE MLPs. */
static const body_layer pattern[] = {
    {"attn", "attention", ""},
    {"mlp", "mlp", ""},
    {"mamba", "mamba2", " { state = 128 }"},
    {"mlp", "mlp", " { ffn = 8192, act = relu2, gated = false }"},
    {"attn", "attention", " { window = 2048 }"},
    {"moe", "moe", " { experts = 64, top_k = 8, expert_ffn = 2048 }"},
    {"mamba", "mamba2", " { state = 64, head_dim = 64 }"},
    {"moe", "moe", " { experts = 64, top_k = 8, expert_ffn = 2048, shared_experts = 1 }"},
};
#define PATTERN_LEN (int)(sizeof pattern / sizeof pattern[0])

static void usage(FILE *f) {
  fprintf(f, "usage: gen_spec [-n LAYERS] [--repeat] [-o FILE]\n"
             "  -n LAYERS   total layers including embedding and head (default 10000, min 3)\n"
             "  --repeat    write the body as 'repeat K { 8 layers }' instead of K*8 statements\n"
             "  -o FILE     output file (default stdout)\n");
}

/* Write the spec. Pre: n >= 3. Returns 0, or -1 when a write failed. */
static int write_spec(FILE *f, long n, int use_repeat) {
  long body = n - 2;
  fprintf(f, "# Synthetic %ld-layer hybrid model written by bench/gen_spec (%s body).\n", n,
          use_repeat ? "repeat" : "explicit");
  fprintf(f, "model big {\n"
             "  hidden = 4096  heads = 32  kv_heads = 8  vocab = 128256  seq = 4096  ffn = 14336\n"
             "  layer embed : embedding\n");
  long explicit_from = 0;
  if (use_repeat && body >= PATTERN_LEN) {
    long groups = body / PATTERN_LEN;
    fprintf(f, "  repeat %ld {\n", groups);
    for (int i = 0; i < PATTERN_LEN; i++)
      fprintf(f, "    layer %s_%c : %s%s\n", pattern[i].prefix, 'a' + i, pattern[i].kind,
              pattern[i].params);
    fprintf(f, "  }\n");
    explicit_from = groups * PATTERN_LEN;
  }
  for (long i = explicit_from; i < body; i++) {
    const body_layer *b = &pattern[i % PATTERN_LEN];
    fprintf(f, "  layer %s_%ld : %s%s\n", b->prefix, i, b->kind, b->params);
  }
  fprintf(f, "  layer head : lm_head\n"
             "}\n\n"
             "device h100 { peak = 989 TFLOPS, mem = 80 GiB, hbm = 3.35 TB/s, efficiency = 0.45 }\n"
             "cluster c { nodes = 1, gpus_per_node = 8, gpu = h100,\n"
             "  intra = link { bw = 450 GB/s, lat = 3 us },\n"
             "  inter = link { bw = 50 GB/s, lat = 10 us } }\n"
             "train { cluster = c, pipeline = 8, global_batch = 64 }\n");
  return ferror(f) ? -1 : 0;
}

int main(int argc, char **argv) {
  long n = 10000;
  int use_repeat = 0;
  const char *out = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-n") == 0 && i + 1 < argc) {
      char *end;
      errno = 0;
      n = strtol(argv[++i], &end, 10);
      if (*end || errno || n < 3) {
        fprintf(stderr, "gen_spec: error: -n needs a whole number of at least 3, not '%s'\n",
                argv[i]);
        return 1;
      }
    } else if (strcmp(argv[i], "--repeat") == 0) {
      use_repeat = 1;
    } else if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) {
      out = argv[++i];
    } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "gen_spec: error: unknown or incomplete option '%s'\n", argv[i]);
      usage(stderr);
      return 1;
    }
  }
  FILE *f = out ? fopen(out, "w") : stdout;
  if (!f) {
    fprintf(stderr, "gen_spec: error: cannot open '%s': %s\n", out, strerror(errno));
    return 1;
  }
  int rc = write_spec(f, n, use_repeat);
  if ((out ? fclose(f) : fflush(f)) != 0) rc = -1;
  if (rc) {
    fprintf(stderr, "gen_spec: error: cannot write '%s'\n", out ? out : "<stdout>");
    return 1;
  }
  return 0;
}
