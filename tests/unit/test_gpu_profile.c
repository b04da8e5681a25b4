/* test_gpu_profile.c -- unit tests of the profile file written from GPU measurements
 * (gpu.h, rg_profile_json; plain C, no GPU needed): the exact text, the entries it refuses, and
 * that the cost pass's profile reader accepts it and sets every layer of each kind to the
 * measured times. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cost.h"
#include "gpu.h"
#include "unit.h"

/* A stream of the given layer kinds (NULL-terminated), one stage, micro_batch 2, seq 16. */
static be_stream *gp_stream(const char *const *kinds) {
  be_stream *s = xcalloc(1, sizeof *s);
  s->model = xstrdup("profile");
  s->dtype = xstrdup("bf16");
  s->optimizer = xstrdup("adam");
  s->nmb = 1;
  s->replicas = 1;
  s->micro_batch = 2;
  s->seq = 16;
  int n = 0;
  while (kinds[n]) n++;
  s->nlayers = n;
  s->layers = xcalloc((size_t)n, sizeof *s->layers);
  for (int i = 0; i < n; i++) {
    s->layers[i].name = xstrdup(kinds[i]);
    s->layers[i].kind = xstrdup(kinds[i]);
  }
  return s;
}

/* A module with one h100 device, train micro_batch 2, seq 16, and layers of the same kinds. */
static ir_module *gp_module(void) {
  ir_module *m = ir_module_new("t");
  ir_field_set(&m->train, IR_F_TRAIN_pipeline, 1);
  ir_field_set(&m->train, IR_F_TRAIN_tensor, 1);
  ir_field_set(&m->train, IR_F_TRAIN_data, 1);
  ir_field_set(&m->train, IR_F_TRAIN_micro_batch, 2);
  ir_field_set(&m->train, IR_F_TRAIN_microbatches, 1);
  ir_field_set(&m->train, IR_F_TRAIN_seq, 16);
  ir_device *dv = ir_module_add_device(m, "h100");
  ir_field_set(&dv->rec, IR_F_DEVICE_peak, 989e12);
  ir_field_set(&dv->rec, IR_F_DEVICE_mem, 80.0 * 1073741824.0);
  ir_field_set(&dv->rec, IR_F_DEVICE_hbm, 3.35e12);
  ir_field_set(&dv->rec, IR_F_DEVICE_efficiency, 0.5);
  static const struct {
    const char *name;
    ir_layer_kind k;
    const char *spec;
  } layers[] = {
      {"emb", IR_KIND_EMBEDDING, "hidden=64 vocab=100 seq=16"},
      {"attn.0", IR_KIND_ATTENTION, "hidden=64 heads=4 seq=16"},
      {"mlp.0", IR_KIND_MLP, "hidden=64 ffn=256 seq=16"},
      {"attn.1", IR_KIND_ATTENTION, "hidden=64 heads=4 seq=16"},
      {"head", IR_KIND_LM_HEAD, "hidden=64 vocab=100 seq=16"},
  };
  for (size_t i = 0; i < sizeof layers / sizeof layers[0]; i++) {
    ir_layer *l = ir_module_add_layer(m, layers[i].name, layers[i].k);
    char *copy = xstrdup(layers[i].spec);
    for (char *tok = strtok(copy, " "); tok; tok = strtok(NULL, " ")) {
      char *eq = strchr(tok, '=');
      *eq = 0;
      int p = ir_param_lookup(layers[i].k, tok);
      UNIT_CHECK(p >= 0);
      if (p >= 0) l->p[p] = strtod(eq + 1, NULL);
    }
    free(copy);
    int first = ir_kind_first_param(layers[i].k), n = ir_kind_nparams(layers[i].k);
    for (int k = first; k < first + n; k++)
      if (isnan(l->p[k]) && !isnan(ir_layer_params[k].def)) l->p[k] = ir_layer_params[k].def;
    ir_layer_derive(l, NULL, NULL);
  }
  return m;
}

void test_gpu_profile_json(void) {
  static const char *const kinds[] = {"embedding", "attention", "mlp", "attention", "lm_head",
                                      NULL};
  be_stream *s = gp_stream(kinds);
  rg_layer_profile p[4] = {
      {s->layers[0].kind, 0, 0.000125, 0, 0.0005, 1e6},
      {s->layers[1].kind, 1, 0.0012, 0.002, 0.0011, 2e6},
      {s->layers[2].kind, 2, 0.0015, 0.003, 0.0014999999999999999, 3e6},
      {s->layers[4].kind, 4, 1e-8, 2.5e-3, 1.25e-3, 4e6},
  };
  strbuf out = {0};
  UNIT_CHECK(rg_profile_json(s, p, 4, "h100", &out) == 0);
  UNIT_CHECK_STREQ(strbuf_cstr(&out),
                   "{\n"
                   "  \"format\": \"octopipe-profile\",\n"
                   "  \"version\": 1,\n"
                   "  \"device\": \"h100\",\n"
                   "  \"micro_batch\": 2,\n"
                   "  \"seq\": 16,\n"
                   "  \"tensor\": 1,\n"
                   "  \"dtype\": \"bf16\",\n"
                   "  \"kinds\": {\n"
                   "    \"embedding\": {\"f_ms\": 0.125, \"b_ms\": 0, \"w_ms\": 0.5},\n"
                   "    \"attention\": {\"f_ms\": 1.2, \"b_ms\": 2, \"w_ms\": 1.1},\n"
                   "    \"mlp\": {\"f_ms\": 1.5, \"b_ms\": 3, \"w_ms\": 1.4999999999999998},\n"
                   "    \"lm_head\": {\"f_ms\": 1e-05, \"b_ms\": 2.5, \"w_ms\": 1.25}\n"
                   "  }\n"
                   "}\n");

  /* The cost pass reads it back: every layer of a kind gets its times (in seconds). */
  char path[] = "/tmp/octo_gpu_profile_XXXXXX";
  int fd = mkstemp(path);
  UNIT_CHECK(fd >= 0);
  if (fd >= 0) {
    UNIT_CHECK(write(fd, out.data, out.len) == (ssize_t)out.len);
    close(fd);
    ir_module *m = gp_module();
    diag_engine *d = diag_new(stdout);
    UNIT_CHECK(cost_run(m, true, d) == 0);
    UNIT_CHECK(cost_profile_apply(m, path, NULL, diag_mkloc(0, 0, 0, 0), d) == 0);
    static const int kind_of[] = {0, 1, 2, 1, 3}; /* entry of p for each module layer */
    for (int i = 0; i < m->nlayers; i++) {
      const rg_layer_profile *q = &p[kind_of[i]];
      UNIT_CHECK(fabs(m->layers[i].cost.f - q->f) <= 1e-15 * q->f + 1e-20);
      UNIT_CHECK(fabs(m->layers[i].cost.b - q->b) <= 1e-15 * q->b + 1e-20);
      UNIT_CHECK(fabs(m->layers[i].cost.w - q->w) <= 1e-15 * q->w + 1e-20);
    }
    diag_free(d);
    ir_module_free(m);
    remove(path);
  }

  /* Without a device type the key is left out; no entries give an empty "kinds". */
  strbuf_free(&out);
  UNIT_CHECK(rg_profile_json(s, p, 0, NULL, &out) == 0);
  UNIT_CHECK(strstr(strbuf_cstr(&out), "device") == NULL);
  UNIT_CHECK(strstr(strbuf_cstr(&out), "\"kinds\": {}\n}\n") != NULL);

  /* Refused, leaving out untouched: a kind twice, no kind, negative or non-finite times, n < 0. */
  strbuf_free(&out);
  rg_layer_profile bad[2] = {p[1], p[1]};
  UNIT_CHECK(rg_profile_json(s, bad, 2, "h100", &out) == -1);
  bad[1] = p[2];
  bad[1].kind = NULL;
  UNIT_CHECK(rg_profile_json(s, bad, 2, "h100", &out) == -1);
  bad[1] = p[2];
  bad[1].b = -1e-3;
  UNIT_CHECK(rg_profile_json(s, bad, 2, "h100", &out) == -1);
  bad[1].b = NAN;
  UNIT_CHECK(rg_profile_json(s, bad, 2, "h100", &out) == -1);
  bad[1].b = INFINITY;
  UNIT_CHECK(rg_profile_json(s, bad, 2, "h100", &out) == -1);
  UNIT_CHECK(rg_profile_json(s, p, -1, "h100", &out) == -1);
  UNIT_CHECK(out.len == 0);

  /* Strings are escaped. */
  rg_layer_profile q = {"a\"b\\c\n", 0, 0.001, 0.001, 0.001, 0};
  UNIT_CHECK(rg_profile_json(s, &q, 1, "x\ty", &out) == 0);
  UNIT_CHECK(strstr(strbuf_cstr(&out), "\"device\": \"x\\u0009y\"") != NULL);
  UNIT_CHECK(strstr(strbuf_cstr(&out), "\"a\\\"b\\\\c\\u000a\": {\"f_ms\": 1,") != NULL);
  strbuf_free(&out);
  be_stream_free(s);
}
