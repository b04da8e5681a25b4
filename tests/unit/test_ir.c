/* test_ir.c -- unit tests of the IR text form and verifier: a module built through the API
 * prints, reads back and prints identically; awkward values survive print and read exactly;
 * the reader records locations and rejects bad text; the verifier catches a bad stage cover. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"
#include "unit.h"

/* ---- Helpers ------------------------------------------------------------------------------ */

/* Set field 'name' of record rec (kind r) to v. */
static void set_field(void *rec, ir_record_kind r, const char *name, double v) {
  int f = ir_field_lookup(r, name);
  UNIT_CHECK(f >= 0);
  if (f >= 0) ir_field_set(rec, f, v);
}

/* Value of field 'name' of record rec (kind r); NAN when not set. */
static double get_field(const void *rec, ir_record_kind r, const char *name) {
  int f = ir_field_lookup(r, name);
  return f >= 0 && ir_field_is_set(rec, f) ? ir_field_get(rec, f) : NAN;
}

/* Set parameter 'name' of layer l. */
static void set_param(ir_layer *l, const char *name, double v) {
  int p = ir_param_lookup(l->kind, name);
  UNIT_CHECK(p >= 0);
  if (p >= 0) l->p[p] = v;
}

/* A diag engine whose output goes to a temporary file (read back with diag_text). */
typedef struct diag_capture {
  FILE *f;          /* where the engine prints */
  diag_engine *d;   /* the engine */
  char *text;       /* what it printed, after diag_text */
} diag_capture;

static void capture_init(diag_capture *c) {
  c->f = tmpfile();
  UNIT_CHECK(c->f != NULL);
  c->d = diag_new(c->f);
  c->text = NULL;
}

/* Everything printed so far (owned by c). */
static const char *capture_text(diag_capture *c) {
  free(c->text);
  long n = ftell(c->f);
  c->text = xcalloc((size_t)(n > 0 ? n : 0) + 1, 1);
  rewind(c->f);
  size_t got = fread(c->text, 1, (size_t)(n > 0 ? n : 0), c->f);
  c->text[got] = 0;
  fseek(c->f, 0, SEEK_END);
  return c->text;
}

static void capture_free(diag_capture *c) {
  diag_free(c->d);
  fclose(c->f);
  free(c->text);
}

/* Read IR text through engine d as a source named 'name'. */
static ir_module *read_text(diag_engine *d, const char *name, const char *text) {
  uint32_t id = diag_add_source(d, name, text, strlen(text), 0);
  return ir_read(d, id);
}

/* Print m without debug info into a new malloc'd string. */
static char *print_module(const ir_module *m, bool debuginfo) {
  strbuf sb = {0};
  ir_print_opts o = {debuginfo};
  ir_print(m, &sb, &o);
  char *s = xstrdup(strbuf_cstr(&sb));
  strbuf_free(&sb);
  return s;
}

/* A complete, valid module: every section, every layer kind, a BW schedule. */
static ir_module *build_full_module(void) {
  ir_module *m = ir_module_new("unit_full");
  ir_module_add_profile(m, "profiles/h100 \"fast\".json");
  set_field(&m->train, IR_REC_TRAIN, "pipeline", 2);
  set_field(&m->train, IR_REC_TRAIN, "tensor", 1);
  set_field(&m->train, IR_REC_TRAIN, "data", 1);
  set_field(&m->train, IR_REC_TRAIN, "micro_batch", 1);
  set_field(&m->train, IR_REC_TRAIN, "global_batch", 2);
  set_field(&m->train, IR_REC_TRAIN, "microbatches", 2);
  set_field(&m->train, IR_REC_TRAIN, "seq", 4096);
  set_field(&m->train, IR_REC_TRAIN, "dtype", IR_DTYPE_BF16);
  set_field(&m->train, IR_REC_TRAIN, "optimizer", IR_OPTIMIZER_ADAM);
  set_field(&m->train, IR_REC_TRAIN, "zero", 1);
  set_field(&m->train, IR_REC_TRAIN, "mem_limit", 72.0 * 1073741824.0);
  set_field(&m->train, IR_REC_TRAIN, "recompute", IR_RECOMPUTE_SELECTIVE);
  m->cluster_name = arena_strdup(&m->arena, "dgx");
  set_field(&m->cluster, IR_REC_CLUSTER, "nodes", 2);
  set_field(&m->cluster, IR_REC_CLUSTER, "gpus_per_node", 8);
  set_field(&m->intra, IR_REC_LINK, "bw", 370e9);
  set_field(&m->intra, IR_REC_LINK, "lat", 3e-6);
  set_field(&m->inter, IR_REC_LINK, "bw", 48e9);
  set_field(&m->inter, IR_REC_LINK, "lat", 15e-6);
  for (int i = 0; i < 2; i++) {
    ir_device *dv = ir_module_add_device(m, i ? "h100-sxm" : "h100");
    set_field(&dv->rec, IR_REC_DEVICE, "peak", 989e12);
    set_field(&dv->rec, IR_REC_DEVICE, "mem", 80.0 * 1073741824.0);
    set_field(&dv->rec, IR_REC_DEVICE, "hbm", 3.35e12);
    set_field(&dv->rec, IR_REC_DEVICE, "efficiency", 0.45);
    set_field(&dv->rec, IR_REC_DEVICE, "node", i);
  }
  ir_link *lk = ir_module_add_link(m, 0, 1);
  set_field(&lk->rec, IR_REC_LINK, "bw", 900e9);
  set_field(&lk->rec, IR_REC_LINK, "lat", 2e-6);

  ir_layer *l = ir_module_add_layer(m, "embed", IR_KIND_EMBEDDING);
  set_param(l, "hidden", 1024);
  set_param(l, "vocab", 32000);
  set_param(l, "seq", 4096);
  set_param(l, "scaled", 1);
  l = ir_module_add_layer(m, "attn \"0\"\n\tnext\\", IR_KIND_ATTENTION);
  set_param(l, "hidden", 1024);
  set_param(l, "heads", 16);
  set_param(l, "kv_heads", 4);
  set_param(l, "head_dim", 64);
  set_param(l, "seq", 4096);
  set_param(l, "causal", 1);
  set_param(l, "window", 0);
  set_param(l, "rope_theta", 500000);
  set_param(l, "rope_factor", 8);
  set_param(l, "rope_low_freq_factor", 1);
  set_param(l, "rope_high_freq_factor", 4);
  set_param(l, "rope_original_seq", 8192);
  set_param(l, "qkv_bias", 1);
  set_param(l, "qk_norm", 1);
  set_param(l, "norm_eps", 1e-6);
  set_param(l, "norm_plus_one", 1);
  set_param(l, "post_norm", 1);
  set_param(l, "score_dim", 48);
  set_param(l, "softcap", 50);
  set_param(l, "rope", 1);
  set_param(l, "rope_linear", 1);
  set_field(&l->cost, IR_REC_COST, "f", 1.2e-3);
  set_field(&l->cost, IR_REC_COST, "b", 2.4e-3);
  set_field(&l->cost, IR_REC_COST, "w", 1.2e-3);
  set_field(&l->cost, IR_REC_COST, "act", 64.0 * 1048576);
  set_field(&l->cost, IR_REC_COST, "act_w", 16.0 * 1048576);
  set_field(&l->cost, IR_REC_COST, "out", 8.0 * 1048576);
  set_field(&l->cost, IR_REC_COST, "param", 1073741824.0);
  l = ir_module_add_layer(m, "mlp\x01\xc3\xa9", IR_KIND_MLP);
  set_param(l, "hidden", 1024);
  set_param(l, "ffn", 4096);
  set_param(l, "gated", 1);
  set_param(l, "act", IR_ACT_SILU);
  set_param(l, "seq", 4096);
  set_param(l, "norm_eps", 1e-6);
  set_param(l, "norm_plus_one", 0);
  set_param(l, "post_norm", 1);
  l = ir_module_add_layer(m, "moe", IR_KIND_MOE);
  set_param(l, "hidden", 1024);
  set_param(l, "experts", 64);
  set_param(l, "top_k", 6);
  set_param(l, "expert_ffn", 1408);
  set_param(l, "shared_experts", 2);
  set_param(l, "gated", 1);
  set_param(l, "act", IR_ACT_GELU);
  set_param(l, "seq", 4096);
  set_param(l, "norm_eps", 1e-5);
  set_param(l, "shared_gate", 0);
  set_param(l, "renorm", 1);
  set_param(l, "sigmoid", 1);
  set_param(l, "score_bias", 1);
  set_param(l, "expert_groups", 8);
  set_param(l, "topk_groups", 3);
  set_param(l, "routed_scale", 2.5);
  l = ir_module_add_layer(m, "mamba", IR_KIND_MAMBA2);
  set_param(l, "hidden", 1024);
  set_param(l, "state", 128);
  set_param(l, "heads", 32);
  set_param(l, "head_dim", 64);
  set_param(l, "groups", 8);
  set_param(l, "conv", 4);
  set_param(l, "expand", 2);
  set_param(l, "chunk", 256);
  set_param(l, "seq", 4096);
  set_param(l, "norm_eps", 1e-5);
  l = ir_module_add_layer(m, "vit", IR_KIND_VIT);
  set_param(l, "hidden", 1024);
  set_param(l, "heads", 16);
  set_param(l, "head_dim", 64);
  set_param(l, "ffn", 4096);
  set_param(l, "gated", 0);
  set_param(l, "act", IR_ACT_GELU);
  set_param(l, "patch", 14);
  set_param(l, "image", 336);
  set_param(l, "tokens", 577);
  set_param(l, "norm_eps", 1e-12);
  set_param(l, "unused", 0);
  l = ir_module_add_layer(m, "custom", IR_KIND_CUSTOM);
  set_param(l, "f", 1.0 / 3.0);
  set_param(l, "b", 1e-4);
  set_param(l, "w", 0);
  set_param(l, "act", 80e9);
  set_param(l, "out", 12345);
  set_param(l, "params", 200e6);
  l = ir_module_add_layer(m, "head", IR_KIND_LM_HEAD);
  set_param(l, "hidden", 1024);
  set_param(l, "vocab", 32000);
  set_param(l, "seq", 4096);
  set_param(l, "loss", 1);
  set_param(l, "norm_eps", 1e-6);
  set_param(l, "norm_plus_one", 1);
  set_param(l, "softcap", 30);
  set_param(l, "tied", 0);

  ir_module_add_stage(m, 0, 4)->device = 0;
  ir_module_add_stage(m, 4, 8)->device = 1;
  ir_module_init_schedules(m);
  for (int mb = 0; mb < 2; mb++) ir_schedule_push(&m->schedules[0], IR_OP_F, 0, mb);
  for (int mb = 0; mb < 2; mb++) {
    ir_schedule_push(&m->schedules[0], IR_OP_B, 0, mb);
    ir_schedule_push(&m->schedules[0], IR_OP_W, 0, mb);
  }
  for (int mb = 0; mb < 2; mb++) {
    ir_schedule_push(&m->schedules[1], IR_OP_F, 1, mb);
    ir_schedule_push(&m->schedules[1], IR_OP_BW, 1, mb);
  }
  set_field(&m->predict, IR_REC_PREDICT, "makespan", 1.93);
  set_field(&m->predict, IR_REC_PREDICT, "bubble", 0.041);
  set_field(&m->predict, IR_REC_PREDICT, "peak_mem", 61.0 * 1073741824.0);
  set_field(&m->predict, IR_REC_PREDICT, "fits", 1);
  set_field(&m->devices[1].predict, IR_REC_DEVPREDICT, "busy", 1.8);
  set_field(&m->devices[1].predict, IR_REC_DEVPREDICT, "idle", 0.13);
  set_field(&m->devices[1].predict, IR_REC_DEVPREDICT, "peak_mem", 61.0 * 1073741824.0);
  return m;
}

/* ---- Tests -------------------------------------------------------------------------------- */

/* A module built through the API is valid, and print -> read -> print is the identity. */
void test_ir_roundtrip_programmatic(void) {
  diag_capture c;
  capture_init(&c);
  ir_module *m = build_full_module();
  UNIT_CHECK(ir_verify(m, c.d, diag_mkloc(0, 0, 0, 0)) == 0);
  char *first = print_module(m, false);
  ir_module *back = read_text(c.d, "full.oir", first);
  UNIT_CHECK(back != NULL);
  if (back) {
    char *second = print_module(back, false);
    UNIT_CHECK_STREQ(first, second);
    UNIT_CHECK(ir_verify(back, c.d, diag_mkloc(0, 0, 0, 0)) == 0);
    UNIT_CHECK_STREQ(back->layers[1].name, m->layers[1].name);
    UNIT_CHECK_STREQ(back->layers[2].name, m->layers[2].name);
    UNIT_CHECK_STREQ(back->profiles[0], m->profiles[0]);
    UNIT_CHECK(back->schedules && back->schedules[1].nops == 4);
    UNIT_CHECK(back->schedules && back->schedules[1].ops[1].kind == IR_OP_BW);
    UNIT_CHECK(back->stages[1].device == 1);
    free(second);
  }
  UNIT_CHECK(strstr(first, "  stage @s1 = [%4, %8)\n") != NULL);
  UNIT_CHECK(strstr(first, "  link $d0 -> $d1 { bw = 900GB/s, lat = 2us }\n") != NULL);
  UNIT_CHECK(strstr(first, "\"attn \\\"0\\\"\\n\\tnext\\\\\"") != NULL);
  UNIT_CHECK(strstr(first, "\"mlp\\x01\\xc3\\xa9\"") != NULL);
  UNIT_CHECK_STREQ(capture_text(&c), "");
  free(first);
  ir_module_free(back);
  ir_module_free(m);
  capture_free(&c);
}

/* Awkward values survive print and read exactly. */
/* The end of a round trip of module m printed as text and read back as back (NULL: no
 * diagnostic may have been captured in c): back prints as text again; then everything is freed. */
static void roundtrip_end(diag_capture *c, ir_module *back, ir_module *m, char *text) {
  if (back) {
    char *again = print_module(back, false);
    UNIT_CHECK_STREQ(text, again);
    free(again);
  } else {
    UNIT_CHECK_STREQ(capture_text(c), "");
  }
  ir_module_free(back);
  ir_module_free(m);
  free(text);
  capture_free(c);
}

void test_ir_value_roundtrip(void) {
  static const struct {
    ir_record_kind rec;
    const char *field;
    double v;
  } cases[] = {
      {IR_REC_COST, "f", 0.1e-3},         {IR_REC_COST, "f", 1.0 / 3.0},
      {IR_REC_COST, "f", 1e-9},           {IR_REC_COST, "f", 0},
      {IR_REC_COST, "f", 123456.789},     {IR_REC_COST, "f", 5e-324},
      {IR_REC_COST, "act", 80e9},         {IR_REC_COST, "act", 1e300},
      {IR_REC_COST, "act", 3.0},          {IR_REC_COST, "act", 1073741824.0 * 1.5},
      {IR_REC_COST, "act", 9007199254740993.0}, {IR_REC_LINK, "bw", 3.35e12},
      {IR_REC_LINK, "bw", 1.0 / 7.0},    {IR_REC_LINK, "bw", 12.5e9},
      {IR_REC_DEVICE, "peak", 989e12},    {IR_REC_DEVICE, "peak", 0.3},
      {IR_REC_DEVICE, "efficiency", 0.1}, {IR_REC_DEVICE, "efficiency", 1e-20},
      {IR_REC_DEVICE, "efficiency", 2.0 / 3.0}, {IR_REC_DEVICE, "node", 9007199254740992.0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    ir_module *m = ir_module_new("values");
    ir_layer *l = ir_module_add_layer(m, "x", IR_KIND_CUSTOM);
    ir_device *dv = ir_module_add_device(m, "gpu");
    void *rec = cases[i].rec == IR_REC_COST     ? (void *)&l->cost
                : cases[i].rec == IR_REC_DEVICE ? (void *)&dv->rec
                                                : (void *)&m->intra;
    set_field(rec, cases[i].rec, cases[i].field, cases[i].v);
    char *text = print_module(m, false);
    diag_capture c;
    capture_init(&c);
    ir_module *back = read_text(c.d, "values.oir", text);
    UNIT_CHECK(back != NULL);
    if (back) {
      const void *brec = cases[i].rec == IR_REC_COST     ? (void *)&back->layers[0].cost
                         : cases[i].rec == IR_REC_DEVICE ? (void *)&back->devices[0].rec
                                                         : (void *)&back->intra;
      UNIT_CHECK_EQ_DBL(get_field(brec, cases[i].rec, cases[i].field), cases[i].v);
    }
    roundtrip_end(&c, back, m, text);
  }
}

/* The value grammar (ir/value.c) that the DSL, the IR reader and pass options share: a text
 * scanned and converted gives the exact value or the one reason it does not fit. */
void test_ir_value_grammar(void) {
  static const struct {
    const char *text;
    ir_type t;
    unsigned flags;
    ir_value_error want;
    double v;
  } cases[] = {
      {"0.1ms", IR_T_TIME, 0, IR_VALUE_OK, 1e-4},
      {"80 GiB", IR_T_BYTES, 0, IR_VALUE_OK, 80.0 * 1073741824.0},
      {"3.35TB/s", IR_T_BW, 0, IR_VALUE_OK, 3.35e12},
      {"10K", IR_T_COUNT, 0, IR_VALUE_OK, 10000},
      {"-0", IR_T_COUNT, 0, IR_VALUE_OK, 0},
      {"-3", IR_T_COUNT, IR_VALUE_SIGNED, IR_VALUE_OK, -3},
      {"true", IR_T_BOOL, 0, IR_VALUE_OK, 1},
      {"bf16", IR_T_DTYPE, 0, IR_VALUE_OK, IR_DTYPE_BF16},
      {"yes", IR_T_BOOL, 0, IR_VALUE_NOT_BOOL, 0},
      {"bf61", IR_T_DTYPE, 0, IR_VALUE_NOT_ENUM, 0},
      {"inf", IR_T_REAL, 0, IR_VALUE_NOT_FINITE, 0},
      {"lots", IR_T_BYTES, 0, IR_VALUE_WORD, 0},
      {"1", IR_T_BOOL, 0, IR_VALUE_NUMBER, 0},
      {"-3", IR_T_COUNT, 0, IR_VALUE_NEGATIVE, 0},
      {"3Gib", IR_T_BYTES, 0, IR_VALUE_UNKNOWN_UNIT, 0},
      {"2K", IR_T_REAL, 0, IR_VALUE_SUFFIX, 0},
      {"2GiB", IR_T_TIME, 0, IR_VALUE_WRONG_DIM, 0},
      {"80", IR_T_BYTES, 0, IR_VALUE_NO_UNIT, 0},
      {"1e400GB/s", IR_T_BW, 0, IR_VALUE_RANGE, 0},
      {"2.5", IR_T_COUNT, 0, IR_VALUE_FRACTION, 0},
      {"9007199254740994", IR_T_COUNT, 0, IR_VALUE_TOO_LARGE, 0},
      {"9007199254740994", IR_T_COUNT, IR_VALUE_INT64, IR_VALUE_OK, 9007199254740994.0},
      {"9007199254740993", IR_T_COUNT, IR_VALUE_INT64, IR_VALUE_INEXACT, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    ir_value_text v;
    size_t n = strlen(cases[i].text);
    UNIT_CHECK(ir_value_scan(cases[i].text, n, &v) == n);
    double x = -1;
    ir_value_error e = ir_value_convert(&v, cases[i].t, cases[i].flags, &x, NULL);
    UNIT_CHECK(e == cases[i].want);
    if (e == IR_VALUE_OK) UNIT_CHECK_EQ_DBL(x, cases[i].v);
  }
  ir_value_text v;
  UNIT_CHECK(ir_value_scan("+", 1, &v) == 0);
  UNIT_CHECK(ir_value_scan("gelu}", 5, &v) == 4 && v.word);
}

/* The unit of the quantity that follows "name = " in 'line' (the letters after its number),
 * copied into 'unit' (16 bytes); "" when the field is absent. */
static void field_unit(const char *line, const char *name, char *unit) {
  char key[32];
  snprintf(key, sizeof key, " %s = ", name);
  const char *p = strstr(line, key);
  unit[0] = 0;
  if (!p) return;
  p += strlen(key);
  p += strspn(p, "-0123456789.e+");
  size_t n = strcspn(p, ", }");
  if (n > 15) n = 15;
  memcpy(unit, p, n);
  unit[n] = 0;
}

/* One unit per dimension in a record: cost records whose times and sizes span many magnitudes
 * (awkward decimals, binary and decimal sizes, zeros) print each dimension in one unit, and read
 * back to exactly the same values. */
void test_ir_record_units(void) {
  static const double times[] = {0.1e-3, 1.0 / 3.0, 1e-9, 0, 7.538, 670766.125532 / 1e6,
                                 2819417 / 1e9, 40 / 1e6, 1.5, 0.791261872376, 123456.789};
  static const double sizes[] = {0, 1024, 512, 80e9, 21.778e6, 640.0625 * 1048576,
                                 81928.0 * 1024, 1073741824.0 * 1.5, 3.0, 1e15, 22300457472.0};
  static const char *const tf[] = {"f", "b", "w"};
  static const char *const sf[] = {"act", "act_w", "out", "param", "grad"};
  const int nt = (int)(sizeof times / sizeof times[0]), ns = (int)(sizeof sizes / sizeof sizes[0]);
  for (int k = 0; k < 200; k++) {
    ir_module *m = ir_module_new("units");
    ir_layer *l = ir_module_add_layer(m, "x", IR_KIND_CUSTOM);
    ir_module_add_device(m, "gpu");
    double tv[3], sv[5];
    for (int i = 0; i < 3; i++) {
      tv[i] = times[(k * 7 + i * 5 + k / 11) % nt];
      set_field(&l->cost, IR_REC_COST, tf[i], tv[i]);
    }
    for (int i = 0; i < 5; i++) {
      sv[i] = sizes[(k * 3 + i * 4 + k / 13) % ns];
      set_field(&l->cost, IR_REC_COST, sf[i], sv[i]);
    }
    char *text = print_module(m, false);
    const char *line = strstr(text, " cost {");
    UNIT_CHECK(line != NULL);
    if (!line) line = "";
    char first[16], unit[16];
    field_unit(line, tf[0], first);
    for (int i = 1; i < 3; i++) {
      field_unit(line, tf[i], unit);
      UNIT_CHECK_STREQ(unit, first);
    }
    field_unit(line, sf[0], first);
    for (int i = 1; i < 5; i++) {
      field_unit(line, sf[i], unit);
      UNIT_CHECK_STREQ(unit, first);
    }
    diag_capture c;
    capture_init(&c);
    ir_module *back = read_text(c.d, "units.oir", text);
    UNIT_CHECK(back != NULL);
    if (back) {
      for (int i = 0; i < 3; i++)
        UNIT_CHECK_EQ_DBL(get_field(&back->layers[0].cost, IR_REC_COST, tf[i]), tv[i]);
      for (int i = 0; i < 5; i++)
        UNIT_CHECK_EQ_DBL(get_field(&back->layers[0].cost, IR_REC_COST, sf[i]), sv[i]);
    }
    roundtrip_end(&c, back, m, text);
  }
}

/* Units, spaces between number and unit, exponents and count suffixes are read as written. */
void test_ir_read_units(void) {
  diag_capture c;
  capture_init(&c);
  ir_module *m = read_text(c.d, "units.oir",
                           "module @u {\n"
                           "  link intra { bw = 3.35 TB/s, lat = 1e3ns }\n"
                           "  layer %0 \"x\" custom { f = 0.1ms, b = 2E-3 s, act = 80e9B, "
                           "params = 1.5K }\n"
                           "}\n");
  UNIT_CHECK(m != NULL);
  if (m) {
    UNIT_CHECK_EQ_DBL(get_field(&m->intra, IR_REC_LINK, "bw"), 3.35 * 1e12);
    UNIT_CHECK_EQ_DBL(get_field(&m->intra, IR_REC_LINK, "lat"), scale_apply(1e3, 1e-9));
    const ir_layer *l = &m->layers[0];
    UNIT_CHECK_EQ_DBL(l->p[IR_LP_CUSTOM_F], scale_apply(0.1, 1e-3));
    UNIT_CHECK_EQ_DBL(l->p[IR_LP_CUSTOM_B], 2e-3);
    UNIT_CHECK_EQ_DBL(l->p[IR_LP_CUSTOM_ACT_MEM], 80e9);
    UNIT_CHECK_EQ_DBL(l->p[IR_LP_CUSTOM_PARAMS], 1500);
  }
  UNIT_CHECK_STREQ(capture_text(&c), "");
  ir_module_free(m);
  capture_free(&c);
}

/* The reader records statement positions; loc(...) replaces them and clears src; debug info
 * round-trips. */
void test_ir_locations(void) {
  diag_capture c;
  capture_init(&c);
  const char *text = "# leading comment\n"
                     "module @loc {\n"
                     "  train { pipeline = 1 }\n"
                     "  device $d0 gpu { } loc(\"spec.octo\":7:5)\n"
                     "    layer %0 \"a\" custom { f = 1ms }\n"
                     "  layer %1 \"b\" custom { f = 1ms } loc(\"spec.octo\":12:3) "
                     "cost { f = 2ms }\n"
                     "}\n";
  ir_module *m = read_text(c.d, "loc.oir", text);
  UNIT_CHECK(m != NULL);
  if (m) {
    UNIT_CHECK(m->loc.line == 2 && m->loc.col == 1 && m->loc.src != 0);
    UNIT_CHECK(m->train_loc.line == 3 && m->train_loc.col == 3);
    UNIT_CHECK_STREQ(m->devices[0].loc.file, "spec.octo");
    UNIT_CHECK(m->devices[0].loc.src == 0 && m->devices[0].loc.line == 7);
    UNIT_CHECK(m->devices[0].loc.col == 5);
    UNIT_CHECK_STREQ(m->layers[0].loc.file, "loc.oir");
    UNIT_CHECK(m->layers[0].loc.src != 0);
    UNIT_CHECK(m->layers[0].loc.line == 5 && m->layers[0].loc.col == 5);
    UNIT_CHECK(m->layers[1].loc.src == 0 && m->layers[1].loc.line == 12);
    UNIT_CHECK(m->layers[1].cost.set != 0);
    char *dbg = print_module(m, true);
    UNIT_CHECK(strstr(dbg, "  layer %0 \"a\" custom { f = 1ms } loc(\"loc.oir\":5:5)\n") != NULL);
    UNIT_CHECK(strstr(dbg, "cost { f = 2ms } loc(\"spec.octo\":12:3)\n") != NULL);
    ir_module *back = read_text(c.d, "loc2.oir", dbg);
    UNIT_CHECK(back != NULL);
    if (back) {
      char *again = print_module(back, true);
      UNIT_CHECK_STREQ(dbg, again);
      free(again);
    }
    char *plain = print_module(m, false);
    UNIT_CHECK(strstr(plain, "loc(") == NULL);
    free(plain);
    free(dbg);
    ir_module_free(back);
  }
  UNIT_CHECK_STREQ(capture_text(&c), "");
  ir_module_free(m);
  capture_free(&c);
}

/* Bad text: NULL, every error reported with its position, and no partial module. */
void test_ir_read_errors(void) {
  diag_capture c;
  capture_init(&c);
  ir_module *m = read_text(c.d, "bad.oir",
                           "module @bad {\n"
                           "  train { pipelin = 1 }\n"
                           "  layer %0 \"a\" custom { f = 1GiB }\n"
                           "  layer %1 \"b\" custom { f = 1ms\n"
                           "  layer %2 \"c\" custom { f = 1ms }\n"
                           "}\n");
  UNIT_CHECK(m == NULL);
  UNIT_CHECK(diag_error_count(c.d) == 3);
  const char *out = capture_text(&c);
  UNIT_CHECK(strstr(out, "bad.oir:2:11: error: unknown field 'pipelin' in train record; did you "
                         "mean 'pipeline'?") != NULL);
  UNIT_CHECK(strstr(out, "bad.oir:3:30: error: expected a time for 'f', got a size 'GiB'") != NULL);
  UNIT_CHECK(strstr(out, "bad.oir:5:3: error: expected ',' or '}', found 'layer'") != NULL);
  ir_module_free(m);

  static const char *const bad[] = {
      "", "module", "module @m", "module @m {", "module @m { } x", "\x01", "module @m { \"",
      "module @m { layer %0 \"a\" custom { f = 1ms } \x00 }",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int before = diag_error_count(c.d);
    size_t len = i + 1 == sizeof bad / sizeof bad[0] ? 45 : strlen(bad[i]);
    uint32_t id = diag_add_source(c.d, "bad2.oir", bad[i], len, 0);
    ir_module *b = ir_read(c.d, id);
    UNIT_CHECK(b == NULL);
    UNIT_CHECK(diag_error_count(c.d) > before);
    ir_module_free(b);
  }
  capture_free(&c);
}

/* The verifier catches stages that do not cover the layers exactly once. */
void test_ir_verify_stage_cover(void) {
  diag_capture c;
  capture_init(&c);
  ir_module *m = build_full_module();
  m->stages[1].first = 3; /* overlaps @s0 = [%0, %4) */
  UNIT_CHECK(ir_verify(m, c.d, diag_mkloc(0, 0, 0, 0)) == 1);
  UNIT_CHECK(strstr(capture_text(&c), "stage @s1 = [%3, %8) overlaps @s0 = [%0, %4)") != NULL);
  m->stages[1].first = 5; /* leaves %4 out */
  UNIT_CHECK(ir_verify(m, c.d, diag_mkloc(0, 0, 0, 0)) == 1);
  UNIT_CHECK(strstr(capture_text(&c), "layers [%4, %5) between @s0 and @s1 are in no stage"));
  m->stages[1].first = 4;
  m->stages[1].end = 7; /* leaves the last layer out */
  UNIT_CHECK(ir_verify(m, c.d, diag_mkloc(0, 0, 0, 0)) == 1);
  UNIT_CHECK(strstr(capture_text(&c), "layers [%7, %8) after the last stage @s1 are in no stage"));
  m->stages[1].end = 8;
  UNIT_CHECK(ir_verify(m, c.d, diag_mkloc(0, 0, 0, 0)) == 0);
  ir_module_free(m);
  capture_free(&c);
}

/* The verifier checks a cost record's 'grad' like its other sizes (it was left out: a negative or
 * NaN gradient size built in code passed the verifier and reached the simulator's all-reduce). */
void test_ir_verify_cost_grad(void) {
  diag_capture c;
  capture_init(&c);
  ir_module *m = build_full_module();
  ir_field_set(&m->layers[1].cost, IR_F_COST_grad, -1.0);
  UNIT_CHECK(ir_verify(m, c.d, diag_mkloc(0, 0, 0, 0)) == 1);
  UNIT_CHECK(strstr(capture_text(&c), "cost grad = -1B must be finite and non-negative") != NULL);
  ir_field_set(&m->layers[1].cost, IR_F_COST_grad, 2.0 * 1073741824.0);
  UNIT_CHECK(ir_verify(m, c.d, diag_mkloc(0, 0, 0, 0)) == 0);
  ir_module_free(m);
  capture_free(&c);
}

/* The verifier catches schedule errors: a missing W, a duplicated F, an op on the wrong device. */
void test_ir_verify_schedule(void) {
  diag_capture c;
  capture_init(&c);
  ir_module *m = build_full_module();
  ir_schedule *s0 = &m->schedules[0];
  s0->nops--;                                 /* drop W @s0 1 */
  ir_schedule_push(s0, IR_OP_F, 0, 0);        /* F @s0 0 twice */
  ir_schedule_push(s0, IR_OP_F, 1, 0);        /* @s1 is on $d1 */
  int n = ir_verify(m, c.d, diag_mkloc(0, 0, 0, 0));
  const char *out = capture_text(&c);
  UNIT_CHECK(n == 4); /* F @s1 0 is both misplaced and, with the one on $d1, duplicated */
  UNIT_CHECK(strstr(out, "W @s0 1 is missing from the schedule of $d0") != NULL);
  UNIT_CHECK(strstr(out, "F @s0 0 is scheduled 2 times") != NULL);
  UNIT_CHECK(strstr(out, "F @s1 0 is scheduled 2 times") != NULL);
  UNIT_CHECK(strstr(out, "F @s1 0 is scheduled on $d0 but @s1 is placed on $d1") != NULL);
  ir_module_free(m);
  capture_free(&c);
}

/* Every proper prefix of a complete module is rejected with at least one error (and no crash or
 * read past the end); the text without its final newline still reads. */
void test_ir_read_prefixes(void) {
  ir_module *m = build_full_module();
  ir_print_opts o = {true};
  m->layers[0].loc = (ir_loc){"model.octo", 0, 3, 5};
  strbuf sb = {0};
  ir_print(m, &sb, &o);
  FILE *null = fopen("/dev/null", "w");
  UNIT_CHECK(null != NULL);
  int bad = 0;
  for (size_t n = 0; n + 1 < sb.len; n++) {
    diag_engine *d = diag_new(null);
    ir_module *b = ir_read(d, diag_add_source(d, "prefix.oir", sb.data, n, 0));
    if (b || diag_error_count(d) == 0) bad++;
    ir_module_free(b);
    diag_free(d);
  }
  UNIT_CHECK(bad == 0);
  diag_engine *d = diag_new(null);
  ir_module *b = ir_read(d, diag_add_source(d, "whole.oir", sb.data, sb.len - 1, 0));
  UNIT_CHECK(b != NULL);
  ir_module_free(b);
  diag_free(d);
  fclose(null);
  strbuf_free(&sb);
  ir_module_free(m);
}

/* Random byte edits of a valid module (printed with debug info): the reader never crashes; when
 * it accepts the result, the printer's output of it reads back to the same text (the printer is
 * canonical), with and without debug info. */
void test_ir_read_mutations(void) {
  ir_module *m = build_full_module();
  ir_print_opts o = {true}, plain = {false};
  strbuf base = {0};
  ir_print(m, &base, &o);
  FILE *null = fopen("/dev/null", "w");
  UNIT_CHECK(null != NULL);
  static const char interesting[] = {0, '\n', '"', '{', '}', ',', '=', '%', '$', '@', '#', '\\',
                                     '-', '.', 'e', '9', ' ', (char)0xff, (char)0x80, '(', ')'};
  uint64_t seed = 0x9e3779b97f4a7c15u;
  int accepted = 0, mismatched = 0;
  for (int iter = 0; iter < 3000; iter++) {
    char *text = xmalloc(base.len + 1);
    memcpy(text, base.data, base.len);
    size_t len = base.len;
    int edits = 1 + (int)(seed % 3);
    for (int e = 0; e < edits; e++) {
      seed = seed * 6364136223846793005u + 1442695040888963407u;
      size_t at = (size_t)(seed >> 33) % len;
      unsigned pick = (unsigned)(seed >> 20) % 4;
      if (pick == 0 && len > 1) { /* delete a byte */
        memmove(text + at, text + at + 1, len - at - 1);
        len--;
      } else if (pick == 1) { /* a random byte */
        text[at] = (char)(seed >> 13);
      } else { /* a byte the grammar cares about */
        text[at] = interesting[(seed >> 7) % sizeof interesting];
      }
    }
    diag_engine *d = diag_new(null);
    ir_module *b = ir_read(d, diag_add_source(d, "mut.oir", text, len, 0));
    UNIT_CHECK((b != NULL) == (diag_error_count(d) == 0));
    if (b) {
      accepted++;
      ir_verify(b, d, diag_mkloc(0, 0, 0, 0));
      /* Plain printing round-trips exactly. */
      strbuf once = {0}, twice = {0};
      ir_print(b, &once, &plain);
      ir_module *c = ir_read(d, diag_add_source(d, "again.oir", once.data, once.len, 0));
      if (c) ir_print(c, &twice, &plain);
      if (!c || strcmp(strbuf_cstr(&once), strbuf_cstr(&twice)) != 0) mismatched++;
      /* With debug info too, once every entity has a location (c's come from its text). */
      strbuf dbg1 = {0}, dbg2 = {0};
      if (c) ir_print(c, &dbg1, &o);
      ir_module *e = c ? ir_read(d, diag_add_source(d, "dbg.oir", dbg1.data, dbg1.len, 0)) : NULL;
      if (e) ir_print(e, &dbg2, &o);
      if (c && (!e || strcmp(strbuf_cstr(&dbg1), strbuf_cstr(&dbg2)) != 0)) mismatched++;
      ir_module_free(e);
      ir_module_free(c);
      strbuf_free(&once);
      strbuf_free(&twice);
      strbuf_free(&dbg1);
      strbuf_free(&dbg2);
    }
    ir_module_free(b);
    diag_free(d);
    free(text);
  }
  UNIT_CHECK(mismatched == 0);
  UNIT_CHECK(accepted > 0); /* some edits (in names, comments, numbers) keep the text valid */
  fclose(null);
  strbuf_free(&base);
  ir_module_free(m);
}

/* A clone prints like the original, with and without debug info, and outlives it; changing the
 * clone's plan leaves the original alone. */
void test_ir_clone(void) {
  ir_module *m = build_full_module();
  m->layers[0].loc = (ir_loc){"spec.octo", 1, 3, 5};
  char *a = print_module(m, true);
  ir_module *c = ir_module_clone(m);
  ir_module_clear_plan(c);
  UNIT_CHECK(m->nstages > 0 && m->schedules != NULL);
  ir_module_free(c);
  c = ir_module_clone(m);
  ir_module_free(m);
  char *b = print_module(c, true);
  UNIT_CHECK_STREQ(a, b);
  UNIT_CHECK(strstr(b, "spec.octo") != NULL);
  free(a);
  free(b);
  ir_module_free(c);
}
