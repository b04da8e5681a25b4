/* test_backend_dis.c -- unit tests of the disassembler (be_disasm) on streams built by hand, and
 * of the instruction-set reference (be_isa_doc). */
#include <stdlib.h>
#include <string.h>

#include "stream.h"
#include "unit.h"

/* A new stream with the header fields set and no layers, stages, shapes or ranks. */
static be_stream *new_stream(const char *model, int nranks, int replicas, int nstages, int nmb,
                             int micro_batch, int seq, const char *dtype, const char *opt) {
  be_stream *s = xcalloc(1, sizeof *s);
  s->model = xstrdup(model);
  s->nranks = nranks;
  s->replicas = replicas;
  s->nstages = nstages;
  s->nmb = nmb;
  s->micro_batch = micro_batch;
  s->seq = seq;
  s->dtype = xstrdup(dtype);
  s->optimizer = xstrdup(opt);
  s->stages = xcalloc((size_t)nstages, sizeof *s->stages);
  s->ranks = xcalloc((size_t)nranks, sizeof *s->ranks);
  return s;
}

/* Give s 'n' layers named l0, l1, ... of kind "mlp". */
static void add_layers(be_stream *s, int n) {
  s->layers = xcalloc((size_t)n, sizeof *s->layers);
  s->nlayers = n;
  for (int i = 0; i < n; i++) {
    strbuf name = {0};
    strbuf_printf(&name, "l%d", i);
    s->layers[i].name = xstrdup(strbuf_cstr(&name));
    s->layers[i].kind = xstrdup("mlp");
    strbuf_free(&name);
  }
}

/* Set rank r's device and give it n zeroed slots. */
static void set_rank(be_stream *s, int r, int device, const char *type, int node, int nslots) {
  be_program *p = &s->ranks[r];
  p->device = device;
  p->type = xstrdup(type);
  p->node = node;
  p->nslots = nslots;
  p->slots = xcalloc((size_t)nslots, sizeof *p->slots);
}

/* Set slot i of rank r; it starts where slot i - 1 ends. */
static void set_slot(be_stream *s, int r, int i, be_tensor_kind t, uint64_t bytes) {
  be_slot *sl = &s->ranks[r].slots[i];
  sl->tensor = (uint8_t)t;
  sl->bytes = bytes;
  sl->offset = i > 0 ? sl[-1].offset + sl[-1].bytes : 0;
}

/* Append instruction op with up to 6 operands (the rest ignored) to rank r. */
static void emit(be_stream *s, int r, be_opcode op, int32_t a0, int32_t a1, int32_t a2, int32_t a3,
                 int32_t a4, int32_t a5) {
  int32_t a[BE_MAX_OPERANDS] = {a0, a1, a2, a3, a4, a5};
  be_emit(&s->ranks[r], op, be_ops[op].nops, a);
}
#define E0(s, r, op) emit(s, r, BE_OP_##op, 0, 0, 0, 0, 0, 0)
#define E1(s, r, op, a) emit(s, r, BE_OP_##op, a, 0, 0, 0, 0, 0)
#define E3(s, r, op, a, b, c) emit(s, r, BE_OP_##op, a, b, c, 0, 0, 0)
#define E4(s, r, op, a, b, c, d) emit(s, r, BE_OP_##op, a, b, c, d, 0, 0)
#define E5(s, r, op, a, b, c, d, e) emit(s, r, BE_OP_##op, a, b, c, d, e, 0)
#define E6(s, r, op, a, b, c, d, e, f) emit(s, r, BE_OP_##op, a, b, c, d, e, f)

enum { KIB = 1024, MIB = 1024 * 1024 };

/* The expected rank line: 'head' ("rank 0: $d0 h100, node 0; stages s0; 7 slots") and the
 * figures of be_mem_stats as the listing rounds them ('figures'), checked against be_mem_stats'
 * exact values (arena, peak live, its address, activations). */
static void rank_line(strbuf *out, const be_stream *s, int r, const char *head, double arena,
                      double live, int at, double act, const char *figures) {
  be_mem m = be_mem_stats(s, r);
  UNIT_CHECK_EQ_DBL(m.arena_bytes, arena);
  UNIT_CHECK_EQ_DBL(m.peak_live, live);
  UNIT_CHECK(m.peak_at == at);
  UNIT_CHECK_EQ_DBL(m.peak_stash, act);
  strbuf_printf(out, "%s, %s\n", head, figures);
}

/* Two ranks, two stages (s0: layers 0-1 on rank 0, s1: layer 2 on rank 1), two microbatches,
 * two replicas: sends, receives, waits and frees of every kind of buffer. */
static be_stream *two_rank_stream(void) {
  be_stream *s = new_stream("tiny", 2, 2, 2, 2, 1, 4096, "bf16", "adam");
  s->scale = 8;
  s->measured_on = xstrdup("mpi");
  s->pred_step = 0.012345;
  add_layers(s, 3);
  s->stages[0] = (be_stage){0, 2, 0, 8 * MIB, 0, 100 * MIB, (uint64_t)1536 * MIB, 0, 0, 0};
  s->stages[1] = (be_stage){2, 3, 1, 8 * MIB, 0, 100 * MIB, 0, 0, 0, 0};
  s->shapes = xcalloc(1, sizeof *s->shapes);
  s->nshapes = 1;
  s->shapes[0] = (be_shape){2, 3, {1, 4096, 1024, 0}};

  set_rank(s, 0, 0, "h100", 0, 7);
  s->ranks[0].pred_busy = 0.0105;
  s->ranks[0].pred_peak = 2048.0 * MIB + 1736.0 * MIB; /* static 2GiB + activations */
  set_slot(s, 0, 0, BE_T_INPUT, 16 * KIB);
  set_slot(s, 0, 1, BE_T_ACT, 8 * MIB);
  set_slot(s, 0, 2, BE_T_STASH, 100 * MIB);
  set_slot(s, 0, 3, BE_T_ACT, 8 * MIB);
  set_slot(s, 0, 4, BE_T_STASH, 100 * MIB);
  set_slot(s, 0, 5, BE_T_GRAD, 8 * MIB);
  set_slot(s, 0, 6, BE_T_WSTASH, (uint64_t)1536 * MIB);
  E3(s, 0, LOAD, 0, 0, 0);
  E6(s, 0, FWD, 0, 0, 0, 1, 2, -1);
  E1(s, 0, FREE, 0);
  E5(s, 0, SEND, 1, 1, BE_T_ACT, 0, 0);
  E3(s, 0, LOAD, 0, 1, 0);
  E6(s, 0, FWD, 0, 1, 0, 3, 4, 6);
  E1(s, 0, FREE, 0);
  E5(s, 0, SEND, 1, 3, BE_T_ACT, 0, 1);
  E5(s, 0, RECV, 1, 5, BE_T_GRAD, 1, 0);
  E1(s, 0, WAIT, 1);
  E1(s, 0, FREE, 1);
  E1(s, 0, WAIT, 5);
  E6(s, 0, BWD, 0, 0, 5, 2, -1, -1);
  E1(s, 0, FREE, 5);
  E1(s, 0, FREE, 2);
  E5(s, 0, RECV, 1, 5, BE_T_GRAD, 1, 1);
  E1(s, 0, WAIT, 3);
  E1(s, 0, FREE, 3);
  E1(s, 0, WAIT, 5);
  E6(s, 0, BWD_IN, 0, 1, 5, 4, 6, -1);
  E1(s, 0, FREE, 5);
  E1(s, 0, FREE, 4);
  E3(s, 0, BWD_W, 0, 1, 6);
  E1(s, 0, FREE, 6);
  E1(s, 0, ALLREDUCE, 0);
  E0(s, 0, STEP);

  set_rank(s, 1, 4, "a100", 1, 5);
  s->ranks[1].pred_busy = 0.00025;
  s->ranks[1].pred_peak = 612.0 * MIB;
  set_slot(s, 1, 0, BE_T_ACT, 8 * MIB);
  set_slot(s, 1, 1, BE_T_STASH, 100 * MIB);
  set_slot(s, 1, 2, BE_T_ACT, 8 * MIB);
  set_slot(s, 1, 3, BE_T_GRAD, 8 * MIB);
  set_slot(s, 1, 4, BE_T_GRAD, 8 * MIB);
  for (int mb = 0; mb < 2; mb++) {
    E5(s, 1, RECV, 0, 0, BE_T_ACT, 0, mb);
    E1(s, 1, WAIT, 0);
    E6(s, 1, FWD, 1, mb, 0, 2, 1, -1);
    E1(s, 1, FREE, 0);
    E4(s, 1, LOSS, 1, mb, 2, 3);
    E1(s, 1, FREE, 2);
    if (mb == 1) {
      E1(s, 1, WAIT, 4);
      E1(s, 1, FREE, 4);
    }
    E6(s, 1, BWD, 1, mb, 3, 1, -1, 4);
    E1(s, 1, FREE, 3);
    E1(s, 1, FREE, 1);
    E5(s, 1, SEND, 0, 4, BE_T_GRAD, 1, mb);
  }
  E1(s, 1, WAIT, 4);
  E1(s, 1, FREE, 4);
  E1(s, 1, ALLREDUCE, 1);
  E0(s, 1, STEP);
  return s;
}

void test_backend_dis_listing(void) {
  be_stream *s = two_rank_stream();
  strbuf want = {0};
  strbuf_puts(&want,
              "; OctoPipe instruction stream, format 7\n"
              "; model @tiny: 2 ranks x 2 replicas, 2 stages, 2 microbatches of 1 x 4096 tokens, "
              "bf16, adam\n"
              "; predicted step 12.345 ms (costs measured by octo-run at scale 8, backend mpi)\n"
              "; stage s0: layers %0..%1 on rank 0; out 8MiB [1x4096x1024] x2, stash 100MiB, "
              "wstash 1.5GiB\n"
              "; stage s1: layer %2 on rank 1; out 8MiB [1x4096x1024] x2, stash 100MiB, wstash 0B\n");
  rank_line(&want, s, 0, "rank 0: $d0 h100, node 0; stage s0; 7 slots", 1802256.0 * KIB,
            1760.0 * MIB, 8, 1736.0 * MIB,
            "1.72GiB; peak live 1.72GiB at 0008; activations 1.7GiB; predicted busy 10.500 ms; "
            "predicted peak 3.7GiB");
  strbuf_puts(
      &want,
      "  slot %0  input   16KiB     at 0B\n"
      "  slot %1  act     8MiB      at 16KiB\n"
      "  slot %2  stash   100MiB    at 8.02MiB\n"
      "  slot %3  act     8MiB      at 108.02MiB\n"
      "  slot %4  stash   100MiB    at 116.02MiB\n"
      "  slot %5  grad    8MiB      at 216.02MiB\n"
      "  slot %6  wstash  1.5GiB    at 224.02MiB\n"
      "  0000  LOAD      s0 mb0 %0                         ; input mb0\n"
      "  0001  FWD       s0 mb0 %0 %1 %2 -                 ; forward s0 mb0\n"
      "  0002  FREE      %0                                ; free input s0 mb0\n"
      "  0003  SEND      r1 %1 act s0 mb0                  ; send act s0 mb0 -> rank 1\n"
      "  0004  LOAD      s0 mb1 %0                         ; input mb1\n"
      "  0005  FWD       s0 mb1 %0 %3 %4 %6                ; forward s0 mb1\n"
      "  0006  FREE      %0                                ; free input s0 mb1\n"
      "  0007  SEND      r1 %3 act s0 mb1                  ; send act s0 mb1 -> rank 1\n"
      "  0008  RECV      r1 %5 grad s1 mb0                 ; recv grad s1 mb0 <- rank 1\n"
      "  0009  WAIT      %1                                ; wait for send act s0 mb0 -> rank 1\n"
      "  0010  FREE      %1                                ; free act s0 mb0\n"
      "  0011  WAIT      %5                                ; wait for recv grad s1 mb0 <- rank 1\n"
      "  0012  BWD       s0 mb0 %5 %2 - -                  ; backward s0 mb0\n"
      "  0013  FREE      %5                                ; free grad s1 mb0\n"
      "  0014  FREE      %2                                ; free stash s0 mb0\n"
      "  0015  RECV      r1 %5 grad s1 mb1                 ; recv grad s1 mb1 <- rank 1\n"
      "  0016  WAIT      %3                                ; wait for send act s0 mb1 -> rank 1\n"
      "  0017  FREE      %3                                ; free act s0 mb1\n"
      "  0018  WAIT      %5                                ; wait for recv grad s1 mb1 <- rank 1\n"
      "  0019  BWD_IN    s0 mb1 %5 %4 %6 -                 ; input-gradient backward s0 mb1\n"
      "  0020  FREE      %5                                ; free grad s1 mb1\n"
      "  0021  FREE      %4                                ; free stash s0 mb1\n"
      "  0022  BWD_W     s0 mb1 %6                         ; weight-gradient backward s0 mb1\n"
      "  0023  FREE      %6                                ; free wstash s0 mb1\n"
      "  0024  ALLREDUCE s0                                ; all-reduce s0 weight gradients over 2 "
      "replicas\n"
      "  0025  STEP                                        ; optimizer step (adam)\n"
      "\n");
  rank_line(&want, s, 1, "rank 1: $d4 a100, node 1; stage s1; 5 slots", 132.0 * MIB,
            124.0 * MIB, 12, 100.0 * MIB,
            "132MiB; peak live 124MiB at 0012; activations 100MiB; predicted busy 0.250 ms; "
            "predicted peak 612MiB");
  strbuf_puts(
      &want,
      "  slot %0  act     8MiB      at 0B\n"
      "  slot %1  stash   100MiB    at 8MiB\n"
      "  slot %2  act     8MiB      at 108MiB\n"
      "  slot %3  grad    8MiB      at 116MiB\n"
      "  slot %4  grad    8MiB      at 124MiB\n"
      "  0000  RECV      r0 %0 act s0 mb0                  ; recv act s0 mb0 <- rank 0\n"
      "  0001  WAIT      %0                                ; wait for recv act s0 mb0 <- rank 0\n"
      "  0002  FWD       s1 mb0 %0 %2 %1 -                 ; forward s1 mb0\n"
      "  0003  FREE      %0                                ; free act s0 mb0\n"
      "  0004  LOSS      s1 mb0 %2 %3                      ; loss mb0\n"
      "  0005  FREE      %2                                ; free act s1 mb0\n"
      "  0006  BWD       s1 mb0 %3 %1 - %4                 ; backward s1 mb0\n"
      "  0007  FREE      %3                                ; free grad s2 mb0\n"
      "  0008  FREE      %1                                ; free stash s1 mb0\n"
      "  0009  SEND      r0 %4 grad s1 mb0                 ; send grad s1 mb0 -> rank 0\n"
      "  0010  RECV      r0 %0 act s0 mb1                  ; recv act s0 mb1 <- rank 0\n"
      "  0011  WAIT      %0                                ; wait for recv act s0 mb1 <- rank 0\n"
      "  0012  FWD       s1 mb1 %0 %2 %1 -                 ; forward s1 mb1\n"
      "  0013  FREE      %0                                ; free act s0 mb1\n"
      "  0014  LOSS      s1 mb1 %2 %3                      ; loss mb1\n"
      "  0015  FREE      %2                                ; free act s1 mb1\n"
      "  0016  WAIT      %4                                ; wait for send grad s1 mb0 -> rank 0\n"
      "  0017  FREE      %4                                ; free grad s1 mb0\n"
      "  0018  BWD       s1 mb1 %3 %1 - %4                 ; backward s1 mb1\n"
      "  0019  FREE      %3                                ; free grad s2 mb1\n"
      "  0020  FREE      %1                                ; free stash s1 mb1\n"
      "  0021  SEND      r0 %4 grad s1 mb1                 ; send grad s1 mb1 -> rank 0\n"
      "  0022  WAIT      %4                                ; wait for send grad s1 mb1 -> rank 0\n"
      "  0023  FREE      %4                                ; free grad s1 mb1\n"
      "  0024  ALLREDUCE s1                                ; all-reduce s1 weight gradients over 2 "
      "replicas\n"
      "  0025  STEP                                        ; optimizer step (adam)\n");
  strbuf got = {0};
  be_disasm(s, &got);
  UNIT_CHECK_STREQ(strbuf_cstr(&got), strbuf_cstr(&want));
  /* Appending: what was in the buffer stays; the listing is the same again. */
  strbuf twice = {0};
  strbuf_puts(&twice, "x");
  be_disasm(s, &twice);
  UNIT_CHECK(twice.len == got.len + 1 && strcmp(twice.data + 1, strbuf_cstr(&got)) == 0);
  strbuf_free(&twice);
  strbuf_free(&got);
  strbuf_free(&want);
  be_stream_free(s);
}

/* True when 'text' has a line that is exactly 'line'. */
static bool has_line(const char *text, const char *line) {
  size_t n = strlen(line);
  for (const char *p = text; *p;) {
    if (strncmp(p, line, n) == 0 && (p[n] == '\n' || p[n] == '\0')) return true;
    const char *nl = strchr(p, '\n');
    if (!nl) break;
    p = nl + 1;
  }
  return false;
}

void test_backend_dis_singular_and_wide(void) {
  /* One of everything (singular words), slot numbers of five digits (the slot column grows, the
   * operand list overflows its 34 columns and is followed by a single space). */
  be_stream *s = new_stream("w", 1, 1, 1, 100, 2, 128, "fp32", "sgd");
  add_layers(s, 1);
  s->stages[0] = (be_stage){0, 1, 0, 1 * KIB, -1, 1 * KIB, 1 * KIB, 0, 0, 0};
  set_rank(s, 0, 3, "h100", 2, 10004);
  set_slot(s, 0, 10000, BE_T_INPUT, 1 * KIB);
  set_slot(s, 0, 10001, BE_T_ACT, 1 * KIB);
  set_slot(s, 0, 10002, BE_T_STASH, 1 * KIB);
  set_slot(s, 0, 10003, BE_T_WSTASH, 1 * KIB);
  E3(s, 0, LOAD, 0, 99, 10000);
  E6(s, 0, FWD, 0, 99, 10000, 10001, 10002, 10003);
  E1(s, 0, FREE, 10000);
  E1(s, 0, FREE, 10001);
  E1(s, 0, FREE, 10002);
  E1(s, 0, FREE, 10003);
  E0(s, 0, STEP);
  strbuf got = {0};
  be_disasm(s, &got);
  const char *t = strbuf_cstr(&got);
  const char *head = "; OctoPipe instruction stream, format 7\n"
                     "; model @w: 1 rank x 1 replica, 1 stage, 100 microbatches of 2 x 128 "
                     "tokens, fp32, sgd\n"
                     "; predicted step 0.000 ms (analytic costs)\n"
                     "; stage s0: layer %0 on rank 0; out 1KiB, stash 1KiB, wstash 1KiB\n"
                     "rank 0: $d3 h100, node 2; stage s0; 10004 slots, ";
  UNIT_CHECK(strncmp(t, head, strlen(head)) == 0);
  static const char *const lines[] = {
      "  slot %0  input   0B        at 0B",
      "  slot %123 input   0B        at 0B",
      "  slot %1000 input   0B        at 0B",
      "  slot %10003 wstash  1KiB      at 3KiB",
      "  0000  LOAD      s0 mb99 %10000                    ; input mb99",
      "  0001  FWD       s0 mb99 %10000 %10001 %10002 %10003 ; forward s0 mb99",
      "  0002  FREE      %10000                            ; free input s0 mb99",
      "  0003  FREE      %10001                            ; free act s0 mb99",
      "  0004  FREE      %10002                            ; free stash s0 mb99",
      "  0005  FREE      %10003                            ; free wstash s0 mb99",
      "  0006  STEP                                        ; optimizer step (sgd)",
  };
  for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++)
    if (!has_line(t, lines[i])) unit_fail_str(__FILE__, __LINE__, "line missing", t, lines[i]);
  UNIT_CHECK(t[got.len - 1] == '\n' && !strstr(t, "\n\n"));
  strbuf_free(&got);
  be_stream_free(s);
}

/* The prediction line says where the costs come from: analytic costs (no scale, backend "none"
 * or, in a stream built by hand, none given), or a profile's scale and backend, either alone;
 * times print in milliseconds with three decimals. */
void test_backend_dis_prediction(void) {
  static const struct {
    int32_t scale;
    const char *on;
    double step;
    const char *line;
  } cases[] = {
      {0, NULL, 0, "; predicted step 0.000 ms (analytic costs)"},
      {0, "none", 1.2345e-3, "; predicted step 1.234 ms (analytic costs)"},
      {8, "mpi", 12.345e-3, "; predicted step 12.345 ms (costs measured by octo-run at scale 8, "
                            "backend mpi)"},
      {4, "none", 2.5, "; predicted step 2500.000 ms (costs measured by octo-run at scale 4)"},
      {0, "cuda", 4e-6, "; predicted step 0.004 ms (costs measured by octo-run, backend cuda)"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    be_stream *s = new_stream("p", 1, 1, 1, 1, 1, 1, "bf16", "adam");
    add_layers(s, 1);
    s->stages[0] = (be_stage){0, 1, 0, 0, -1, 0, 0, 0, 0, 0};
    set_rank(s, 0, 0, "h100", 0, 0);
    s->ranks[0].pred_busy = 0.0125;
    s->ranks[0].pred_peak = 1536;
    E0(s, 0, STEP);
    s->scale = cases[i].scale;
    s->measured_on = cases[i].on ? xstrdup(cases[i].on) : NULL;
    s->pred_step = cases[i].step;
    strbuf got = {0};
    be_disasm(s, &got);
    const char *t = strbuf_cstr(&got);
    if (!has_line(t, cases[i].line))
      unit_fail_str(__FILE__, __LINE__, "line missing", t, cases[i].line);
    const char *model = strstr(t, "\n; model @p:");
    const char *pred = strstr(t, "\n; predicted step ");
    UNIT_CHECK(model && pred && strchr(model + 1, '\n') == pred); /* right after the model line */
    UNIT_CHECK(has_line(t, "rank 0: $d0 h100, node 0; stage s0; 0 slots, 0B; peak live 0B; "
                           "activations 0B; predicted busy 12.500 ms; predicted peak 1.5KiB"));
    strbuf_free(&got);
    be_stream_free(s);
  }
}

void test_backend_isa_doc(void) {
  strbuf doc = {0}, again = {0};
  be_isa_doc(&doc);
  be_isa_doc(&again);
  const char *t = strbuf_cstr(&doc);
  UNIT_CHECK_STREQ(t, strbuf_cstr(&again));
  /* Every opcode with its number and mnemonic, every operand kind and every tensor kind. */
  for (int op = 0; op < BE_OP_COUNT; op++) {
    strbuf row = {0};
    strbuf_printf(&row, "\n| %d | `%s` | ", op, be_ops[op].name);
    if (!strstr(t, strbuf_cstr(&row)))
      unit_fail_str(__FILE__, __LINE__, "opcode row", t, row.data);
    if (!strstr(t, be_ops[op].synopsis)) UNIT_CHECK_STREQ(t, be_ops[op].synopsis);
    strbuf_free(&row);
  }
  for (int k = 1; k < BE_K_COUNT; k++) {
    strbuf row = {0};
    strbuf_printf(&row, "\n| `%s` | %s | ", be_operands[k].name,
                  be_operands[k].slot ? "yes" : "no");
    if (!strstr(t, strbuf_cstr(&row)))
      unit_fail_str(__FILE__, __LINE__, "operand row", t, row.data);
    strbuf_free(&row);
  }
  for (int k = 0; k < BE_T_COUNT; k++) {
    strbuf row = {0};
    strbuf_printf(&row, "\n| `%s` | %s | %s | %s |\n", be_tensors[k].name,
                  be_tensors[k].msg ? "yes" : "no", be_tensors[k].host ? "yes" : "no",
                  be_tensors[k].doc);
    if (!strstr(t, strbuf_cstr(&row)))
      unit_fail_str(__FILE__, __LINE__, "tensor row", t, row.data);
    strbuf_free(&row);
  }
  UNIT_CHECK(has_line(t, "| 1 | `FWD` | `stage mb in out out? out?` | COMPUTE | forward of "
                         "STAGE on MB: read IN, write OUT, keep STASH until B and WSTASH until "
                         "W |"));
  UNIT_CHECK(has_line(t, "| 11 | `STEP` | — | END | optimizer step of every stage of the rank |"));
  UNIT_CHECK(has_line(t, "| `msg-out` | yes | recv | no | a new buffer a receive fills |"));
  UNIT_CHECK(has_line(t, "| `stage` | no | — | no | a stage of the plan, 0 <= s < stages "
                         "(printed s3) |"));
  UNIT_CHECK(has_line(t, "### Opcodes") && has_line(t, "### Operand kinds") &&
             has_line(t, "### Tensor kinds"));
  /* No trailing spaces, one newline at the end. */
  UNIT_CHECK(!strstr(t, " \n") && doc.len > 1 && t[doc.len - 1] == '\n' && t[doc.len - 2] != '\n');
  strbuf_free(&doc);
  strbuf_free(&again);
}
