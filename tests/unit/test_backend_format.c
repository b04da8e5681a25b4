/* test_backend_format.c -- unit tests of the validator (be_validate) and the binary stream format
 * (be_write, be_read, be_read_file): a small hand-built stream is accepted and round-trips
 * byte for byte, the prediction it carries (measurement scale and backend, step and busy times,
 * peak memory and per-instruction times) bit for bit; truncated, corrupted and fuzzed files are rejected cleanly;
 * and one targeted broken program per validator rule is rejected with the expected message; the
 * stream library's backend names are the IR's. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ir.h"
#include "stream.h"
#include "unit.h"

/* ---- A small valid stream ------------------------------------------------------------------ */

/* Append the instruction spelled "MNEMONIC a0 a1 ..." to p: a tiny assembler so that the
 * programs below read like a listing. Pre: the mnemonic exists and the operand count matches. */
static void fb_asm(be_program *p, const char *line) {
  char name[16] = {0};
  int n = 0;
  if (sscanf(line, "%15s%n", name, &n) != 1) {
    UNIT_CHECK(!"empty instruction text");
    return;
  }
  int op = be_op_lookup(name);
  UNIT_CHECK(op >= 0);
  if (op < 0) return;
  int32_t a[BE_MAX_OPERANDS] = {0};
  int na = 0;
  const char *q = line + n;
  char *end;
  for (long v = strtol(q, &end, 10); end != q; v = strtol(q, &end, 10)) {
    if (na < BE_MAX_OPERANDS) a[na] = (int32_t)v;
    na++;
    q = end;
  }
  UNIT_CHECK(na == be_ops[op].nops);
  be_emit(p, (be_opcode)op, be_ops[op].nops, a);
}

/* Rank 0 runs stage 0 (layers 0-1), rank 1 stage 1 (layers 2-3); two microbatches in 1F1B order
 * with split backward (B then W). Tensor kinds: 0 input, 1 act, 2 grad, 3 stash, 4 wstash. */
static const char *const fb_rank0[] = {
    "LOAD 0 0 0",          /* 0000 */
    "FWD 0 0 0 1 2 3",     /* 0001 */
    "FREE 0",              /* 0002 */
    "SEND 1 1 1 0 0",      /* 0003 act s0 mb0 -> r1 */
    "LOAD 0 1 0",          /* 0004 */
    "FWD 0 1 0 7 4 5",     /* 0005 */
    "FREE 0",              /* 0006 */
    "WAIT 1",              /* 0007 */
    "FREE 1",              /* 0008 */
    "SEND 1 7 1 0 1",      /* 0009 act s0 mb1 -> r1 */
    "RECV 1 6 2 1 0",      /* 0010 grad s1 mb0 <- r1 */
    "WAIT 6",              /* 0011 */
    "BWD_IN 0 0 6 2 3 -1", /* 0012 */
    "FREE 6",              /* 0013 */
    "FREE 2",              /* 0014 */
    "BWD_W 0 0 3",         /* 0015 */
    "FREE 3",              /* 0016 */
    "RECV 1 6 2 1 1",      /* 0017 grad s1 mb1 <- r1 */
    "WAIT 7",              /* 0018 */
    "FREE 7",              /* 0019 */
    "WAIT 6",              /* 0020 */
    "BWD_IN 0 1 6 4 5 -1", /* 0021 */
    "FREE 6",              /* 0022 */
    "FREE 4",              /* 0023 */
    "BWD_W 0 1 5",         /* 0024 */
    "FREE 5",              /* 0025 */
    "STEP",                /* 0026 */
    NULL};

static const char *const fb_rank1[] = {
    "RECV 0 0 1 0 0",     /* 0000 act s0 mb0 <- r0 */
    "RECV 0 6 1 0 1",     /* 0001 act s0 mb1 <- r0 */
    "WAIT 0",             /* 0002 */
    "FWD 1 0 0 1 2 3",    /* 0003 */
    "FREE 0",             /* 0004 */
    "LOSS 1 0 1 4",       /* 0005 */
    "FREE 1",             /* 0006 */
    "BWD_IN 1 0 4 2 3 5", /* 0007 */
    "FREE 4",             /* 0008 */
    "FREE 2",             /* 0009 */
    "SEND 0 5 2 1 0",     /* 0010 grad s1 mb0 -> r0 */
    "BWD_W 1 0 3",        /* 0011 */
    "FREE 3",             /* 0012 */
    "WAIT 6",             /* 0013 */
    "FWD 1 1 6 1 2 3",    /* 0014 */
    "FREE 6",             /* 0015 */
    "LOSS 1 1 1 4",       /* 0016 */
    "FREE 1",             /* 0017 */
    "WAIT 5",             /* 0018 */
    "FREE 5",             /* 0019 */
    "BWD_IN 1 1 4 2 3 5", /* 0020 */
    "FREE 4",             /* 0021 */
    "FREE 2",             /* 0022 */
    "SEND 0 5 2 1 1",     /* 0023 grad s1 mb1 -> r0 */
    "BWD_W 1 1 3",        /* 0024 */
    "FREE 3",             /* 0025 */
    "WAIT 5",             /* 0026 */
    "FREE 5",             /* 0027 */
    "STEP",               /* 0028 */
    NULL};

/* Slot tables: {offset, bytes, tensor}; fb_program lays the slots out one after the other. */
static const be_slot fb_slots0[] = {
    {0, 512, BE_T_INPUT},   {0, 16384, BE_T_ACT},     {0, 65536, BE_T_STASH},
    {0, 32768, BE_T_WSTASH}, {0, 65536, BE_T_STASH}, {0, 32768, BE_T_WSTASH},
    {0, 16384, BE_T_GRAD},    {0, 16384, BE_T_ACT}};
static const be_slot fb_slots1[] = {
    {0, 16384, BE_T_ACT},    {0, 131072, BE_T_ACT},  {0, 65536, BE_T_STASH},
    {0, 32768, BE_T_WSTASH}, {0, 131072, BE_T_GRAD}, {0, 16384, BE_T_GRAD},
    {0, 16384, BE_T_ACT}};

/* Layer 'i' of the model with its parameters (name/value pairs, NULL-terminated). */
static void fb_layer(be_layer *l, const char *name, const char *kind, const char *const *pn,
                     const double *pv) {
  l->name = xstrdup(name);
  l->kind = xstrdup(kind);
  int n = 0;
  while (pn[n]) n++;
  l->params = xcalloc((size_t)n, sizeof *l->params);
  l->nparams = n;
  for (int i = 0; i < n; i++) {
    l->params[i].name = xstrdup(pn[i]);
    l->params[i].value = pv[i];
  }
}

/* Give every FWD, BWD_IN, BWD_W and BWD instruction of p a predicted time (replacing any it
 * had): made-up times that grow with the address, 1 ms per instruction on rank r + 1 ms apart,
 * so that each entry differs; a busy time; and a peak memory of 1 GiB plus 1 MiB per rank. Post:
 * p's prediction passes be_validate. */
static void fb_predict(be_program *p, int r) {
  free(p->pred);
  p->pred = xcalloc((size_t)(p->ncode ? p->ncode : 1), sizeof *p->pred);
  p->npred = 0;
  for (int i = 0; i < p->ncode; i++)
    if (be_op_predicted(p->code[i].op))
      p->pred[p->npred++] = (be_pred){i, 1e-3 * (i + r), 1e-3 * (i + r) + 0.75e-3};
  p->pred_busy = 0.75e-3 * p->npred;
  p->pred_peak = (double)(1u << 30) + (double)(1u << 20) * r;
}

/* Program of rank r from its listing and slots, with predicted times (fb_predict). With 'fused',
 * each BWD_IN becomes a BWD and each BWD_W is dropped; with replicas > 1, "ALLREDUCE <stage r>"
 * goes before the STEP. */
static void fb_program(be_program *p, int r, const char *const *code, const be_slot *slots,
                       int nslots, bool fused, int replicas) {
  p->device = r;
  p->type = xstrdup("h100");
  p->node = 0;
  p->slots = xcalloc((size_t)nslots, sizeof *p->slots);
  memcpy(p->slots, slots, (size_t)nslots * sizeof *slots);
  p->nslots = nslots;
  for (int i = 1; i < nslots; i++) p->slots[i].offset = p->slots[i - 1].offset + p->slots[i - 1].bytes;
  char buf[64];
  for (int i = 0; code[i]; i++) {
    if (strcmp(code[i], "STEP") == 0 && replicas > 1) {
      snprintf(buf, sizeof buf, "ALLREDUCE %d", r);
      fb_asm(p, buf);
    }
    if (fused && strncmp(code[i], "BWD_W ", 6) == 0) continue;
    if (fused && strncmp(code[i], "BWD_IN ", 7) == 0) {
      snprintf(buf, sizeof buf, "BWD %s", code[i] + 7);
      fb_asm(p, buf);
      continue;
    }
    fb_asm(p, code[i]);
  }
  fb_predict(p, r);
}

/* The test stream: model "tiny", 4 layers, 2 stages on 2 ranks, 2 microbatches, 'replicas'
 * data-parallel replicas, split (B/W) or fused backward. The caller frees it. Post: it passes
 * be_validate. */
static be_stream *fb_build(int replicas, bool fused) {
  be_stream *s = xcalloc(1, sizeof *s);
  s->model = xstrdup("tiny");
  s->nranks = 2;
  s->replicas = replicas;
  s->nstages = 2;
  s->nmb = 2;
  s->micro_batch = 1;
  s->seq = 128;
  s->dtype = xstrdup("bf16");
  s->optimizer = xstrdup("adam");
  s->scale = 8;
  s->measured_on = xstrdup("mpi");
  s->pred_step = 0.0421;
  s->nlayers = 4;
  s->layers = xcalloc(4, sizeof *s->layers);
  /* Layers the IR verifier would accept (be_validate checks them by its rules). */
  static const char *const tok_n[] = {"vocab", "hidden", "seq", NULL};
  static const double tok_v[] = {32000, 64, 128};
  static const char *const att_n[] = {"hidden", "heads", "kv_heads", "head_dim", "seq", NULL};
  static const double att_v[] = {64, 4, 2, 16, 128};
  static const char *const mlp_n[] = {"hidden", "ffn", "seq", "act", NULL};
  static const double mlp_v[] = {64, 256, 128, 2};
  fb_layer(&s->layers[0], "embed", "embedding", tok_n, tok_v);
  fb_layer(&s->layers[1], "block0", "attention", att_n, att_v);
  fb_layer(&s->layers[2], "block1", "mlp", mlp_n, mlp_v);
  fb_layer(&s->layers[3], "head", "lm_head", tok_n, tok_v);
  s->stages = xcalloc(2, sizeof *s->stages);
  /* Stage 0 sends a [1, 128, 64] bf16 activation (shape 0); stage 1's output is opaque. */
  s->stages[0] = (be_stage){0, 2, 0, 16384, 0, 65536, 32768, 0, 0, 0};
  s->stages[1] = (be_stage){2, 4, 1, 131072, -1, 65536, 32768, 1, 1, 0}; /* recomputes its mlp */
  s->nshapes = 2;
  s->shapes = xcalloc(2, sizeof *s->shapes);
  s->shapes[0] = (be_shape){2, 3, {1, 128, 64, 0}};
  s->shapes[1] = (be_shape){4, 1, {32000, 0, 0, 0}};
  s->ranks = xcalloc(2, sizeof *s->ranks);
  fb_program(&s->ranks[0], 0, fb_rank0, fb_slots0, 8, fused, replicas);
  fb_program(&s->ranks[1], 1, fb_rank1, fb_slots1, 7, fused, replicas);
  return s;
}

/* ---- Helpers --------------------------------------------------------------------------------- */

/* Replace instruction 'addr' of rank r by 'text'. */
static void fb_set(be_stream *s, int r, int addr, const char *text) {
  be_program *p = &s->ranks[r];
  be_program tmp = {0};
  fb_asm(&tmp, text);
  if (tmp.ncode == 1 && addr < p->ncode) p->code[addr] = tmp.code[0];
  free(tmp.code);
}

/* Insert 'text' before instruction 'addr' of rank r (addr == ncode appends). */
static void fb_ins(be_stream *s, int r, int addr, const char *text) {
  be_program *p = &s->ranks[r];
  fb_asm(p, text); /* appended; rotate it into place */
  be_inst in = p->code[p->ncode - 1];
  memmove(&p->code[addr + 1], &p->code[addr], (size_t)(p->ncode - 1 - addr) * sizeof in);
  p->code[addr] = in;
}

/* Delete instruction 'addr' of rank r. */
static void fb_del(be_stream *s, int r, int addr) {
  be_program *p = &s->ranks[r];
  memmove(&p->code[addr], &p->code[addr + 1], (size_t)(p->ncode - addr - 1) * sizeof *p->code);
  p->ncode--;
}

/* Encoding of s (caller frees the buffer). */
static strbuf fb_bytes(const be_stream *s) {
  strbuf b = {0};
  be_write(s, &b);
  return b;
}

/* CRC-32 (ISO-HDLC: reflected polynomial 0xEDB88320, init and final XOR 0xFFFFFFFF) of
 * data[0..len), computed bit by bit: an independent check of the format's checksum. */
static uint32_t fb_crc32(const uint8_t *data, size_t len) {
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < len; i++) {
    c ^= data[i];
    for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
  }
  return c ^ 0xffffffffu;
}

/* Store the CRC-32 of data[0..len-4) in its last four bytes (so that damage reaches the parser). */
static void fb_patch_crc(uint8_t *data, size_t len) {
  if (len < 4) return;
  uint32_t c = fb_crc32(data, len - 4);
  for (int i = 0; i < 4; i++) data[len - 4 + (size_t)i] = (uint8_t)(c >> (8 * i));
}

/* Byte offset of the measurement scale in the encoding of s: after the magic, version, model
 * name, six header integers, dtype, optimizer and dropout flag. */
static size_t fb_scale_at(const be_stream *s) {
  return 8 + 4 + 4 + strlen(s->model) + 6 * 4 + 4 + strlen(s->dtype) + 4 + strlen(s->optimizer) +
         4;
}

/* Byte offset of the layer count in the encoding of s: after the scale, the measuring backend
 * and the predicted step time. */
static size_t fb_layer_count_at(const be_stream *s) {
  return fb_scale_at(s) + 4 + 4 + strlen(s->measured_on) + 8;
}

/* Byte offset of the count of predicted times of the last rank of s in its encoding a: before
 * its entries (20 bytes each) and the checksum. */
static size_t fb_last_npred_at(const be_stream *s, const strbuf *a) {
  return a->len - 4 - 20 * (size_t)s->ranks[s->nranks - 1].npred - 4;
}

/* Whether doubles x and y have the same bits (NaN payloads and -0 included). */
static bool fb_same_f64(double x, double y) { return memcmp(&x, &y, sizeof x) == 0; }

/* True when two streams hold the same values everywhere. */
static bool fb_equal(const be_stream *a, const be_stream *b) {
  if (strcmp(a->model, b->model) || strcmp(a->dtype, b->dtype) ||
      strcmp(a->optimizer, b->optimizer) || strcmp(a->measured_on, b->measured_on) ||
      a->dropout != b->dropout || a->scale != b->scale || !fb_same_f64(a->pred_step, b->pred_step))
    return false;
  if (a->nranks != b->nranks || a->replicas != b->replicas || a->nstages != b->nstages ||
      a->nmb != b->nmb || a->micro_batch != b->micro_batch || a->seq != b->seq ||
      a->nlayers != b->nlayers || a->nshapes != b->nshapes)
    return false;
  for (int i = 0; i < a->nlayers; i++) {
    const be_layer *x = &a->layers[i], *y = &b->layers[i];
    if (strcmp(x->name, y->name) || strcmp(x->kind, y->kind) || x->nparams != y->nparams)
      return false;
    for (int j = 0; j < x->nparams; j++)
      if (strcmp(x->params[j].name, y->params[j].name) ||
          memcmp(&x->params[j].value, &y->params[j].value, sizeof(double)) != 0)
        return false;
  }
  for (int i = 0; i < a->nstages; i++)
    if (a->stages[i].first != b->stages[i].first || a->stages[i].end != b->stages[i].end ||
        a->stages[i].rank != b->stages[i].rank || a->stages[i].out_bytes != b->stages[i].out_bytes ||
        a->stages[i].out_shape != b->stages[i].out_shape ||
        a->stages[i].stash_bytes != b->stages[i].stash_bytes ||
        a->stages[i].wstash_bytes != b->stages[i].wstash_bytes ||
        a->stages[i].recompute != b->stages[i].recompute ||
        a->stages[i].recompute_layers != b->stages[i].recompute_layers ||
        a->stages[i].offload != b->stages[i].offload)
      return false;
  for (int i = 0; i < a->nshapes; i++) {
    const be_shape *x = &a->shapes[i], *y = &b->shapes[i];
    if (x->elem != y->elem || x->ndim != y->ndim) return false;
    for (int d = 0; d < 4; d++)
      if (x->dim[d] != y->dim[d]) return false;
  }
  for (int r = 0; r < a->nranks; r++) {
    const be_program *x = &a->ranks[r], *y = &b->ranks[r];
    if (x->device != y->device || strcmp(x->type, y->type) || x->node != y->node ||
        x->nslots != y->nslots || x->ncode != y->ncode)
      return false;
    for (int i = 0; i < x->nslots; i++)
      if (x->slots[i].bytes != y->slots[i].bytes ||
          x->slots[i].tensor != y->slots[i].tensor)
        return false;
    for (int i = 0; i < x->ncode; i++) {
      if (x->code[i].op != y->code[i].op) return false;
      for (int k = 0; k < BE_MAX_OPERANDS; k++)
        if (x->code[i].a[k] != y->code[i].a[k]) return false;
    }
    if (!fb_same_f64(x->pred_busy, y->pred_busy) || !fb_same_f64(x->pred_peak, y->pred_peak) ||
        x->npred != y->npred)
      return false;
    for (int i = 0; i < x->npred; i++)
      if (x->pred[i].addr != y->pred[i].addr || !fb_same_f64(x->pred[i].t0, y->pred[i].t0) ||
          !fb_same_f64(x->pred[i].t1, y->pred[i].t1))
        return false;
  }
  return true;
}

/* Read data[0..len): expect a rejection whose message contains 'want' (any message when NULL). */
static void fb_expect_reject(const uint8_t *data, size_t len, const char *want) {
  strbuf err = {0};
  be_stream *s = be_read(data, len, &err);
  UNIT_CHECK(s == NULL);
  UNIT_CHECK(err.len > 0);
  if (want && !strstr(strbuf_cstr(&err), want)) UNIT_CHECK_STREQ(strbuf_cstr(&err), want);
  be_stream_free(s);
  strbuf_free(&err);
}

/* ---- Tests ---------------------------------------------------------------------------------- */

/* The hand-built stream and its variants (fused backward, data parallelism) are valid. */
void test_backend_format_validate_ok(void) {
  for (int v = 0; v < 4; v++) {
    be_stream *s = fb_build(v & 1 ? 2 : 1, v & 2);
    strbuf err = {0};
    UNIT_CHECK(be_validate(s, &err) == 0);
    UNIT_CHECK_STREQ(strbuf_cstr(&err), "");
    strbuf_free(&err);
    be_stream_free(s);
  }
}

/* write -> read -> write gives identical bytes and an equal stream; the writer only appends. */
void test_backend_format_roundtrip(void) {
  for (int v = 0; v < 4; v++) {
    be_stream *s = fb_build(v & 1 ? 4 : 1, v & 2);
    strbuf a = fb_bytes(s);
    strbuf err = {0};
    be_stream *t = be_read((const uint8_t *)a.data, a.len, &err);
    UNIT_CHECK(t != NULL);
    UNIT_CHECK_STREQ(strbuf_cstr(&err), "");
    if (t) {
      UNIT_CHECK(fb_equal(s, t));
      strbuf b = fb_bytes(t);
      UNIT_CHECK(a.len == b.len && memcmp(a.data, b.data, a.len) == 0);
      strbuf_free(&b);
    }
    /* Appending to a non-empty buffer adds the same bytes after what was there. */
    strbuf c = {0};
    strbuf_puts(&c, "prefix");
    be_write(s, &c);
    UNIT_CHECK(c.len == 6 + a.len && memcmp(c.data + 6, a.data, a.len) == 0);
    strbuf_free(&c);
    be_stream_free(t);
    be_stream_free(s);
    strbuf_free(&a);
    strbuf_free(&err);
  }
  /* The layout: magic, version 7 little-endian. */
  be_stream *s = fb_build(1, false);
  strbuf a = fb_bytes(s);
  UNIT_CHECK(a.len > 16 && memcmp(a.data, "\x89OIS\r\n\x1a\n", 8) == 0);
  UNIT_CHECK(a.data[8] == 7 && a.data[9] == 0 && a.data[10] == 0 && a.data[11] == 0);
  /* The trailer is the standard CRC-32 of the rest ("123456789" -> 0xCBF43926). */
  UNIT_CHECK(fb_crc32((const uint8_t *)"123456789", 9) == 0xcbf43926u);
  uint8_t *patched = xmalloc(a.len);
  memcpy(patched, a.data, a.len);
  fb_patch_crc(patched, a.len);
  UNIT_CHECK(memcmp(patched, a.data, a.len) == 0);
  free(patched);
  strbuf_free(&a);
  be_stream_free(s);
}

/* Little-endian u64 at data + at. */
static uint64_t fb_le64(const char *data, size_t at) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)(uint8_t)data[at + (size_t)i] << (8 * i);
  return v;
}

/* Little-endian u32 at data + at. */
static uint32_t fb_le32(const char *data, size_t at) { return (uint32_t)fb_le64(data, at); }

/* Bits of x, as the format stores an f64. */
static uint64_t fb_bits(double x) {
  uint64_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

/* The prediction survives write and read exactly: awkward values (inexact sums, a subnormal, -0,
 * the largest double, equal bounds) come back with the same bits, in the documented layout. */
void test_backend_format_prediction_roundtrip(void) {
  be_stream *s = fb_build(2, false);
  s->dropout = 1;
  s->scale = 123456;
  free(s->measured_on);
  s->measured_on = xstrdup("nccl");
  s->pred_step = 0.1 + 0.2;
  s->ranks[0].pred_busy = 5e-324;
  s->ranks[1].pred_busy = 1.0 / 3;
  s->ranks[0].pred_peak = 0x1p53 + 2; /* past 2^53 bytes: whole, but no longer every integer */
  s->ranks[1].pred_peak = 1e6 / 3;    /* not a whole number of bytes */
  s->ranks[0].pred[0].t0 = -0.0;
  s->ranks[0].pred[0].t1 = 0.0;
  s->ranks[0].pred[1].t0 = s->ranks[0].pred[1].t1 = 1.0 / 7;
  s->ranks[1].pred[5].t1 = DBL_MAX;
  strbuf a = fb_bytes(s), err = {0};
  be_stream *t = be_read((const uint8_t *)a.data, a.len, &err);
  UNIT_CHECK_STREQ(strbuf_cstr(&err), "");
  UNIT_CHECK(t != NULL);
  if (t) {
    UNIT_CHECK(fb_equal(s, t));
    UNIT_CHECK(t->scale == 123456 && t->dropout == 1);
    UNIT_CHECK_STREQ(t->measured_on, "nccl");
    UNIT_CHECK(fb_bits(t->pred_step) == fb_bits(0.1 + 0.2) && t->pred_step != 0.3);
    UNIT_CHECK(fb_bits(t->ranks[0].pred_busy) == fb_bits(5e-324));
    UNIT_CHECK(fb_bits(t->ranks[0].pred_peak) == fb_bits(0x1p53 + 2));
    UNIT_CHECK(fb_bits(t->ranks[1].pred_peak) == fb_bits(1e6 / 3));
    UNIT_CHECK(signbit(t->ranks[0].pred[0].t0) && t->ranks[0].pred[0].t0 == 0);
    UNIT_CHECK(!signbit(t->ranks[0].pred[0].t1));
    UNIT_CHECK(t->ranks[0].pred[1].t0 == 1.0 / 7 && t->ranks[0].pred[1].t1 == 1.0 / 7);
    UNIT_CHECK(t->ranks[1].pred[5].t1 == DBL_MAX);
    for (int r = 0; r < 2; r++) {
      UNIT_CHECK(t->ranks[r].npred == 6);
      for (int i = 0; i < t->ranks[r].npred; i++)
        UNIT_CHECK(be_op_predicted(t->ranks[r].code[t->ranks[r].pred[i].addr].op));
    }
    strbuf b = fb_bytes(t);
    UNIT_CHECK(a.len == b.len && memcmp(a.data, b.data, a.len) == 0);
    strbuf_free(&b);
  }
  /* The layout: after the optimizer, i32 dropout, i32 scale, str measured_on, f64 pred_step ... */
  size_t at = fb_scale_at(s);
  UNIT_CHECK(fb_le32(a.data, at - 4) == 1);
  UNIT_CHECK(fb_le32(a.data, at) == 123456);
  UNIT_CHECK(fb_le32(a.data, at + 4) == 4 && memcmp(a.data + at + 8, "nccl", 4) == 0);
  UNIT_CHECK(fb_le64(a.data, at + 12) == fb_bits(0.1 + 0.2));
  UNIT_CHECK(fb_le32(a.data, at + 20) == 4); /* then the layer count */
  /* ... and after each program's code, f64 pred_busy, f64 pred_peak, count npred, npred x (i32,
   * f64, f64). */
  at = fb_last_npred_at(s, &a);
  UNIT_CHECK(fb_le64(a.data, at - 16) == fb_bits(1.0 / 3));
  UNIT_CHECK(fb_le64(a.data, at - 8) == fb_bits(1e6 / 3));
  UNIT_CHECK(fb_le32(a.data, at) == 6);
  UNIT_CHECK(fb_le32(a.data, at + 4) == (uint32_t)s->ranks[1].pred[0].addr);
  UNIT_CHECK(fb_le64(a.data, at + 8) == fb_bits(s->ranks[1].pred[0].t0));
  UNIT_CHECK(fb_le64(a.data, at + 16) == fb_bits(s->ranks[1].pred[0].t1));
  UNIT_CHECK(fb_le64(a.data, a.len - 12) == fb_bits(DBL_MAX)); /* the last t1 */
  be_stream_free(t);
  strbuf_free(&err);
  strbuf_free(&a);
  be_stream_free(s);
}

/* Every proper prefix of a valid file is rejected with a message, never read past. */
void test_backend_format_truncation(void) {
  be_stream *s = fb_build(2, false);
  strbuf a = fb_bytes(s);
  for (size_t n = 0; n < a.len; n++) {
    /* A private copy of exactly n bytes, so that ASan catches any read past the end. */
    uint8_t *copy = xmalloc(n ? n : 1);
    memcpy(copy, a.data, n);
    fb_expect_reject(copy, n, n == 0 ? "not an OctoPipe instruction stream" : "truncated at byte");
    free(copy);
  }
  strbuf_free(&a);
  be_stream_free(s);
}

/* Every single-byte change is rejected: by the checksum, or by the magic or version check, or,
 * where it breaks the structure, as a truncation. */
void test_backend_format_corruption(void) {
  be_stream *s = fb_build(1, false);
  strbuf a = fb_bytes(s);
  uint8_t *copy = xmalloc(a.len);
  static const uint8_t flips[] = {0x01, 0x80, 0xff};
  int checksum = 0, total = 0;
  for (size_t i = 0; i < a.len; i++) {
    for (size_t f = 0; f < sizeof flips; f++) {
      memcpy(copy, a.data, a.len);
      copy[i] ^= flips[f];
      strbuf err = {0};
      be_stream *t = be_read(copy, a.len, &err);
      UNIT_CHECK(t == NULL);
      const char *m = strbuf_cstr(&err);
      bool known = strstr(m, "checksum mismatch: the file is corrupted") ||
                   strstr(m, "truncated at byte") || strstr(m, "not an OctoPipe") ||
                   strstr(m, "format version");
      if (!known) UNIT_CHECK_STREQ(m, "a corruption message");
      checksum += strstr(m, "checksum mismatch") != NULL;
      total++;
      be_stream_free(t);
      strbuf_free(&err);
    }
  }
  UNIT_CHECK(checksum * 10 > total * 8); /* most damage is seen by the checksum */
  free(copy);
  strbuf_free(&a);
  be_stream_free(s);
}

/* Deterministic generator for the fuzz tests (xorshift64*). */
static uint64_t fb_rand(uint64_t *state) {
  *state ^= *state >> 12;
  *state ^= *state << 25;
  *state ^= *state >> 27;
  return *state * 0x2545F4914F6CDD1Dull;
}

/* Random damage with the checksum patched so that the parser and the validator see it: each
 * result is a clean rejection, or a stream that validates again and encodes to the same bytes. */
void test_backend_format_fuzz(void) {
  uint64_t seed = 0x0c70919e5eedull;
  int accepted = 0;
  for (int v = 0; v < 2; v++) {
    be_stream *s = fb_build(v ? 2 : 1, v);
    strbuf a = fb_bytes(s);
    uint8_t *copy = xmalloc(a.len);
    for (int it = 0; it < 12000; it++) {
      memcpy(copy, a.data, a.len);
      int nmut = 1 + (int)(fb_rand(&seed) % 4);
      for (int k = 0; k < nmut; k++) {
        size_t at = 12 + (size_t)(fb_rand(&seed) % (a.len - 16));
        uint64_t r = fb_rand(&seed);
        switch (r % 5) {
        case 0: copy[at] = (uint8_t)(r >> 8); break;          /* any byte */
        case 1: copy[at] = (uint8_t)((r >> 8) % 4); break;    /* small values */
        case 2: copy[at] = 0xff; break;                       /* -1 */
        case 3: copy[at]++; break;
        default: copy[at]--; break;
        }
      }
      fb_patch_crc(copy, a.len);
      strbuf err = {0};
      be_stream *t = be_read(copy, a.len, &err);
      if (t) {
        accepted++;
        strbuf e2 = {0};
        UNIT_CHECK(be_validate(t, &e2) == 0);
        strbuf b = fb_bytes(t);
        UNIT_CHECK(b.len == a.len && memcmp(b.data, copy, a.len) == 0);
        strbuf_free(&b);
        strbuf_free(&e2);
      } else {
        UNIT_CHECK(err.len > 0);
      }
      be_stream_free(t);
      strbuf_free(&err);
    }
    free(copy);
    strbuf_free(&a);
    be_stream_free(s);
  }
  UNIT_CHECK(accepted > 0); /* e.g. damage to names or layer parameters is harmless */
}

/* Random edits of the programs themselves (operands, deleted, duplicated or swapped
 * instructions) reach deep into the validator: it never misbehaves, and whatever it accepts
 * round-trips through the format. */
void test_backend_format_fuzz_programs(void) {
  uint64_t seed = 42;
  int accepted = 0;
  for (int it = 0; it < 6000; it++) {
    be_stream *s = fb_build(it % 3 == 0 ? 2 : 1, it % 2);
    int nmut = 1 + (int)(fb_rand(&seed) % 3);
    for (int k = 0; k < nmut; k++) {
      be_program *p = &s->ranks[fb_rand(&seed) % 2];
      int i = (int)(fb_rand(&seed) % (uint64_t)p->ncode);
      int j = (int)(fb_rand(&seed) % (uint64_t)p->ncode);
      uint64_t r = fb_rand(&seed);
      switch (r % 6) {
      case 0: /* an operand, small values mostly */
      case 1:
        p->code[i].a[(r >> 8) % BE_MAX_OPERANDS] = (int32_t)((r >> 16) % 11) - 2;
        break;
      case 2: /* delete */
        if (p->ncode > 1) fb_del(s, (int)(p - s->ranks), i);
        break;
      case 3: { /* duplicate */
        be_inst in = p->code[i];
        VEC_PUSH(p->code, p->ncode, p->code_cap, in);
        memmove(&p->code[i + 1], &p->code[i], (size_t)(p->ncode - 1 - i) * sizeof in);
        break;
      }
      case 4: { /* swap */
        be_inst t = p->code[i];
        p->code[i] = p->code[j];
        p->code[j] = t;
        break;
      }
      default: /* a slot's tensor kind */
        p->slots[(r >> 8) % (uint64_t)p->nslots].tensor = (uint8_t)((r >> 16) % 6);
        break;
      }
    }
    strbuf err = {0};
    if (be_validate(s, &err) == 0) {
      accepted++;
      strbuf b = fb_bytes(s);
      strbuf e2 = {0};
      be_stream *t = be_read((const uint8_t *)b.data, b.len, &e2);
      UNIT_CHECK(t != NULL);
      if (t) UNIT_CHECK(fb_equal(s, t));
      be_stream_free(t);
      strbuf_free(&e2);
      strbuf_free(&b);
    } else {
      UNIT_CHECK(strncmp(strbuf_cstr(&err), "rank ", 5) == 0);
    }
    strbuf_free(&err);
    be_stream_free(s);
  }
  UNIT_CHECK(accepted > 0); /* some edits are harmless (a swap of independent instructions) */
}

/* Header-level rejections of the reader: magic, version, trailing bytes, huge counts, bad
 * strings, unknown opcodes, and the validator's message passed through. */
void test_backend_format_header_errors(void) {
  be_stream *s = fb_build(1, false);
  strbuf a = fb_bytes(s);
  uint8_t *c = xmalloc(a.len + 1);

  memcpy(c, a.data, a.len);
  c[1] = 'X';
  fb_expect_reject(c, a.len, "not an OctoPipe instruction stream");
  fb_expect_reject((const uint8_t *)"#!octo\n", 7, "not an OctoPipe instruction stream");

  memcpy(c, a.data, a.len);
  c[8] = 8;
  fb_patch_crc(c, a.len);
  fb_expect_reject(c, a.len, "format version 8, this build reads version 7");
  memcpy(c, a.data, a.len);
  c[8] = 1; /* a file of the format before streams carried the prediction */
  fb_patch_crc(c, a.len);
  fb_expect_reject(c, a.len, "format version 1, this build reads version 7");
  memcpy(c, a.data, a.len);
  c[8] = 2; /* before stages carried their recomputation */
  fb_patch_crc(c, a.len);
  fb_expect_reject(c, a.len, "format version 2, this build reads version 7");
  memcpy(c, a.data, a.len);
  c[8] = 3; /* before the header carried dropout */
  fb_patch_crc(c, a.len);
  fb_expect_reject(c, a.len, "format version 3, this build reads version 7");
  memcpy(c, a.data, a.len);
  c[8] = 4; /* before the TIE instruction (tied embeddings) */
  fb_patch_crc(c, a.len);
  fb_expect_reject(c, a.len, "format version 4, this build reads version 7");
  memcpy(c, a.data, a.len);
  c[8] = 5; /* before stages carried how many layers recompute (recompute_layers) */
  fb_patch_crc(c, a.len);
  fb_expect_reject(c, a.len, "format version 5, this build reads version 7");
  memcpy(c, a.data, a.len);
  c[8] = 6; /* before stages carried their offload flag and OFFLOAD and RELOAD */
  fb_patch_crc(c, a.len);
  fb_expect_reject(c, a.len, "format version 6, this build reads version 7");

  memcpy(c, a.data, a.len);
  c[a.len] = 0;
  char want[96];
  snprintf(want, sizeof want, "1 trailing byte after the checksum at byte %zu", a.len);
  fb_expect_reject(c, a.len + 1, want);

  /* A layer count of 2^31 - 1 in a small file: no huge allocation, a truncation. */
  size_t at = fb_layer_count_at(s);
  UNIT_CHECK(c[at] == 4);
  memcpy(c, a.data, a.len);
  c[at] = c[at + 1] = c[at + 2] = 0xff;
  c[at + 3] = 0x7f;
  fb_patch_crc(c, a.len);
  snprintf(want, sizeof want, "truncated at byte %zu: 2147483647 layers need at least", at);
  fb_expect_reject(c, a.len, want);
  c[at + 3] = 0xff; /* 2^32 - 1: not even an int */
  fb_patch_crc(c, a.len);
  fb_expect_reject(c, a.len, "count of layers 4294967295 out of range at byte");

  /* A count of predicted times past the file's end: no allocation, a truncation; one above
   * 2^31 - 1: out of range. */
  at = fb_last_npred_at(s, &a);
  UNIT_CHECK(c[at] == 6 && c[at + 1] == 0);
  memcpy(c, a.data, a.len);
  c[at + 1] = 1; /* 262 entries */
  fb_patch_crc(c, a.len);
  snprintf(want, sizeof want, "truncated at byte %zu: 262 predicted times need at least 5240 "
           "bytes (rank 1), 124 remain", at);
  fb_expect_reject(c, a.len, want);
  c[at] = c[at + 1] = c[at + 2] = c[at + 3] = 0xff;
  fb_patch_crc(c, a.len);
  snprintf(want, sizeof want, "count of predicted times 4294967295 out of range at byte %zu "
           "(rank 1)", at);
  fb_expect_reject(c, a.len, want);
  /* A file that ends inside the last rank's predicted peak memory. */
  at = fb_last_npred_at(s, &a) - 8;
  snprintf(want, sizeof want, "truncated at byte %zu: expected the predicted peak memory (8 "
           "bytes) of rank 1, 3 remain", at);
  fb_expect_reject((const uint8_t *)a.data, at + 3, want);
  /* The measuring backend's length past 4096. */
  at = fb_scale_at(s) + 4;
  memcpy(c, a.data, a.len);
  c[at + 2] = 1;
  fb_patch_crc(c, a.len);
  snprintf(want, sizeof want, "length 65539 of the measuring backend out of range (at most 4096) "
           "at byte %zu (the header)", at);
  fb_expect_reject(c, a.len, want);

  /* The model name: too long a length, and a NUL inside. */
  memcpy(c, a.data, a.len);
  c[13] = 0x20; /* length 0x2004 */
  fb_patch_crc(c, a.len);
  fb_expect_reject(c, a.len,
                   "length 8196 of the model name out of range (at most 4096) at byte 12");
  memcpy(c, a.data, a.len);
  c[17] = 0;
  fb_patch_crc(c, a.len);
  fb_expect_reject(c, a.len, "NUL byte inside the model name at byte 17");

  /* Unknown opcode: written by be_write from an (invalid) stream, which takes no operands. */
  s->ranks[1].code[3].op = 200;
  strbuf b = fb_bytes(s);
  fb_expect_reject((const uint8_t *)b.data, b.len, "unknown opcode 200 at byte ");
  fb_expect_reject((const uint8_t *)b.data, b.len, "(rank 1 instruction 0003)");
  strbuf_free(&b);
  s->ranks[1].code[3].op = BE_OP_FWD;

  /* A well-formed file of an invalid stream: the validator's message. */
  s->nmb = 3;
  b = fb_bytes(s);
  fb_expect_reject((const uint8_t *)b.data, b.len, "no LOAD of mb2");
  strbuf_free(&b);

  free(c);
  strbuf_free(&a);
  be_stream_free(s);
}

/* be_read_file: a file written and read back; a missing file; a corrupted one. */
void test_backend_format_read_file(void) {
  char path[] = "/tmp/octo_fmt_XXXXXX";
  int fd = mkstemp(path);
  UNIT_CHECK(fd >= 0);
  if (fd < 0) return;
  be_stream *s = fb_build(2, true);
  strbuf a = fb_bytes(s);
  UNIT_CHECK(write(fd, a.data, a.len) == (ssize_t)a.len);
  close(fd);
  strbuf err = {0};
  be_stream *t = be_read_file(path, &err);
  UNIT_CHECK(t && fb_equal(s, t));
  UNIT_CHECK_STREQ(strbuf_cstr(&err), "");
  be_stream_free(t);

  FILE *f = fopen(path, "r+b");
  UNIT_CHECK(f != NULL);
  if (f) {
    fseek(f, 40, SEEK_SET);
    fputc(a.data[40] ^ 0x10, f);
    fclose(f);
  }
  t = be_read_file(path, &err);
  UNIT_CHECK(t == NULL);
  char want[128];
  snprintf(want, sizeof want, "%s: checksum mismatch: the file is corrupted", path);
  UNIT_CHECK_STREQ(strbuf_cstr(&err), want);
  strbuf_free(&err);
  unlink(path);

  t = be_read_file(path, &err);
  UNIT_CHECK(t == NULL);
  snprintf(want, sizeof want, "%s: No such file or directory", path);
  UNIT_CHECK_STREQ(strbuf_cstr(&err), want);
  strbuf_free(&err);

  t = be_read_file("/", &err); /* opens, but cannot be read */
  UNIT_CHECK(t == NULL);
  UNIT_CHECK_STREQ(strbuf_cstr(&err), "/: Is a directory");
  strbuf_free(&err);
  strbuf_free(&a);
  be_stream_free(s);
}

/* ---- Targeted invalid programs ------------------------------------------------------------ */

/* One broken stream: how to break the valid one, and what the validator must say. */
typedef struct fb_case {
  const char *what;                 /* the rule */
  int replicas;                     /* of the base stream */
  void (*edit)(be_stream *s);       /* the damage */
  const char *want;                 /* substring of the message */
  bool raw;                         /* the damage does not survive encoding (the reader sees
                                       another stream or stops earlier) */
} fb_case;

static void e_wait_missing(be_stream *s) { fb_del(s, 1, 2); }
static void e_double_def(be_stream *s) { fb_set(s, 0, 5, "FWD 0 1 0 1 4 5"); }
static void e_free_pending(be_stream *s) { fb_set(s, 0, 7, "FREE 1"); }
static void e_leak(be_stream *s) { fb_del(s, 0, 25); }
static void e_leak_pending(be_stream *s) {
  fb_del(s, 1, 27);
  fb_del(s, 1, 26);
}
static void e_wrong_label(be_stream *s) { fb_set(s, 1, 3, "FWD 1 1 0 1 2 3"); }
static void e_tag_mismatch(be_stream *s) { fb_set(s, 0, 3, "SEND 1 1 1 0 1"); }
static void e_unreceived(be_stream *s) {
  /* Rank 1 handles microbatch 0 only: rank 0's act s0 mb1 goes nowhere. */
  for (int a = 25; a >= 13; a--) fb_del(s, 1, a);
  fb_del(s, 1, 1);
}
static void e_unsent(be_stream *s) {
  fb_del(s, 0, 18); /* WAIT 7 */
  fb_del(s, 0, 9);  /* SEND act s0 mb1 */
}
static void e_size(be_stream *s) { s->ranks[1].slots[6].bytes = 8192; }
static void e_shape(be_stream *s) { s->stages[0].out_shape = 1; }
static void e_stash_size(be_stream *s) { s->stages[0].stash_bytes = 65537; }
static void e_recompute_flag(be_stream *s) { s->stages[0].recompute = 2; }
static void e_recompute_layers_alone(be_stream *s) { s->stages[0].recompute_layers = 1; }
static void e_recompute_layers_many(be_stream *s) { s->stages[1].recompute_layers = 2; }
static void e_recompute_layers_neg(be_stream *s) { s->stages[1].recompute_layers = -1; }
static void e_overlap(be_stream *s) { s->ranks[0].slots[2].offset = 8192; }
static void e_no_w(be_stream *s) { fb_del(s, 0, 15); }
static void e_w_before_b(be_stream *s) {
  fb_set(s, 0, 12, "BWD_W 0 0 3");
  fb_set(s, 0, 15, "BWD_IN 0 0 6 2 3 -1");
}
static void e_mixed(be_stream *s) { fb_set(s, 0, 21, "BWD 0 1 6 4 5 -1"); }
static void e_step_not_last(be_stream *s) { fb_ins(s, 0, 0, "STEP"); }
static void e_no_step(be_stream *s) { fb_del(s, 1, 28); }
static void e_allreduce_1(be_stream *s) { fb_ins(s, 0, 26, "ALLREDUCE 0"); }
static void e_allreduce_missing(be_stream *s) { fb_del(s, 1, 28); }
static void e_allreduce_early(be_stream *s) {
  fb_del(s, 0, 26);
  fb_ins(s, 0, 20, "ALLREDUCE 0");
}
static void e_allreduce_twice(be_stream *s) { fb_ins(s, 0, 26, "ALLREDUCE 0"); }
/* The head (layer 3) ties its matrix to the embedding's table (stages 0 and 1, ranks 0 and 1). */
static void fb_tie(be_stream *s) {
  be_layer *l = &s->layers[3];
  l->params = xrealloc(l->params, (size_t)(l->nparams + 1) * sizeof *l->params);
  l->params[l->nparams].name = xstrdup("tied");
  l->params[l->nparams++].value = 1;
}
static void e_tie_untied(be_stream *s) { fb_ins(s, 0, 26, "TIE 0 1"); }
static void e_tie_missing(be_stream *s) {
  fb_tie(s);
  fb_ins(s, 0, 26, "TIE 0 1");
}
static void e_tie_pair(be_stream *s) {
  fb_tie(s);
  fb_ins(s, 0, 26, "TIE 0 0");
}
static void e_tie_twice(be_stream *s) {
  fb_tie(s);
  fb_ins(s, 0, 26, "TIE 0 1");
  fb_ins(s, 0, 26, "TIE 0 1");
}
static void e_tie_early(be_stream *s) {
  fb_tie(s);
  fb_ins(s, 0, 0, "TIE 0 1");
}
static void e_tie_before_allreduce(be_stream *s) {
  fb_tie(s);
  fb_ins(s, 0, 26, "TIE 0 1");
  fb_ins(s, 1, 29, "TIE 1 0");
}
static void e_tie_not_owner(be_stream *s) {
  fb_tie(s);
  fb_ins(s, 0, 26, "TIE 1 0");
}
static void e_tie_vocab(be_stream *s) {
  fb_tie(s);
  s->layers[3].params[0].value = 1000; /* vocab */
}
static void e_peer_self(be_stream *s) { fb_set(s, 0, 3, "SEND 0 1 1 0 0"); }
static void e_mb_range(be_stream *s) { fb_set(s, 0, 0, "LOAD 0 2 0"); }
static void e_slot_range(be_stream *s) { fb_set(s, 0, 2, "FREE 8"); }
static void e_slot_none(be_stream *s) { fb_set(s, 0, 1, "FWD 0 0 -1 1 2 3"); }
static void e_past_nops(be_stream *s) { s->ranks[0].code[8].a[1] = 5; }
static void e_opcode(be_stream *s) { s->ranks[0].code[4].op = BE_OP_COUNT; }
static void e_not_owner(be_stream *s) { fb_set(s, 1, 3, "FWD 0 0 0 1 2 3"); }
static void e_load_stage(be_stream *s) { fb_ins(s, 1, 0, "LOAD 1 0 0"); }
static void e_loss_stage(be_stream *s) { fb_set(s, 0, 2, "LOSS 0 0 1 6"); }
static void e_dx_first(be_stream *s) { fb_set(s, 0, 12, "BWD_IN 0 0 6 2 3 7"); }
static void e_dx_missing(be_stream *s) { fb_set(s, 1, 7, "BWD_IN 1 0 4 2 3 -1"); }
static void e_not_msg(be_stream *s) { fb_set(s, 0, 3, "SEND 1 1 3 0 0"); }
static void e_grad_s0(be_stream *s) { fb_set(s, 0, 3, "SEND 1 1 2 0 0"); }
static void e_act_last(be_stream *s) { fb_set(s, 1, 10, "SEND 0 5 1 1 0"); }
static void e_wait_idle(be_stream *s) { fb_ins(s, 0, 1, "WAIT 0"); }
static void e_use_dead(be_stream *s) { fb_set(s, 0, 1, "FWD 0 0 4 1 2 3"); }
static void e_slot_kind(be_stream *s) { s->ranks[0].slots[0].tensor = BE_T_ACT; }
static void e_sent_twice(be_stream *s) {
  fb_ins(s, 0, 8, "SEND 1 1 1 0 0");
  fb_ins(s, 0, 9, "WAIT 1");
}
static void e_no_stage(be_stream *s) { s->stages[0].end = 0; }
static void e_gap(be_stream *s) { s->stages[1].first = 3; }
static void e_layers_end(be_stream *s) { s->stages[1].end = 3; }
static void e_stage_rank(be_stream *s) { s->stages[1].rank = 2; }
static void e_idle_rank(be_stream *s) {
  s->ranks = xrealloc(s->ranks, 3 * sizeof *s->ranks);
  memset(&s->ranks[2], 0, sizeof s->ranks[2]);
  s->nranks = 3;
}
static void e_nranks(be_stream *s) { s->nranks = 0; }
static void e_replicas(be_stream *s) { s->replicas = 0; }
static void e_nmb_range(be_stream *s) { s->nmb = (1 << 24) + 1; }
static void e_nmb_big(be_stream *s) { s->nmb = 1 << 20; }
static void e_shape_dims(be_stream *s) { s->shapes[1].ndim = 5; }
static void e_shape_extent(be_stream *s) { s->shapes[0].dim[2] = 0; }
static void e_out_shape(be_stream *s) { s->stages[1].out_shape = 7; }
static void e_slot_tensor(be_stream *s) { s->ranks[0].slots[1].tensor = 9; }
static void e_scale(be_stream *s) { s->scale = -3; }
static void e_dropout(be_stream *s) { s->dropout = 2; }
static void e_backend_null(be_stream *s) {
  free(s->measured_on);
  s->measured_on = NULL;
}
static void e_backend_case(be_stream *s) {
  free(s->measured_on);
  s->measured_on = xstrdup("MPI");
}
static void e_backend_ugly(be_stream *s) {
  free(s->measured_on);
  s->measured_on = xstrdup("a\nb\"c\\0123456789012345678901234567890123456789");
}
static void e_step_nan(be_stream *s) { s->pred_step = NAN; }
static void e_step_inf(be_stream *s) { s->pred_step = INFINITY; }
static void e_step_neg(be_stream *s) { s->pred_step = -0.25; }
static void e_busy(be_stream *s) { s->ranks[0].pred_busy = -1e-3; }
static void e_peak_nan(be_stream *s) { s->ranks[1].pred_peak = NAN; }
static void e_peak_inf(be_stream *s) { s->ranks[0].pred_peak = INFINITY; }
static void e_peak_neg(be_stream *s) { s->ranks[1].pred_peak = -4096; }
static void e_npred_neg(be_stream *s) { s->ranks[1].npred = -1; }
static void e_pred_null(be_stream *s) {
  free(s->ranks[1].pred);
  s->ranks[1].pred = NULL;
}
static void e_pred_order(be_stream *s) {
  be_pred x = s->ranks[0].pred[0];
  s->ranks[0].pred[0] = s->ranks[0].pred[1];
  s->ranks[0].pred[1] = x;
}
static void e_pred_dup(be_stream *s) { s->ranks[0].pred[1].addr = 1; }
static void e_pred_past(be_stream *s) { s->ranks[0].pred[5].addr = 27; }
static void e_pred_negative(be_stream *s) { s->ranks[0].pred[0].addr = -1; }
static void e_pred_kind(be_stream *s) { s->ranks[0].pred[0].addr = 0; }
static void e_pred_missing(be_stream *s) { s->ranks[1].npred--; }
static void e_pred_hole(be_stream *s) {
  be_program *p = &s->ranks[1];
  memmove(&p->pred[1], &p->pred[2], (size_t)(p->npred - 2) * sizeof *p->pred);
  p->npred--;
}
static void e_pred_reversed(be_stream *s) {
  s->ranks[1].pred[2].t0 = 0.003;
  s->ranks[1].pred[2].t1 = 0.002;
}
static void e_pred_t0(be_stream *s) { s->ranks[1].pred[2].t0 = -0.001; }
static void e_pred_t0_nan(be_stream *s) { s->ranks[1].pred[2].t0 = NAN; }
static void e_pred_t1_inf(be_stream *s) { s->ranks[1].pred[2].t1 = INFINITY; }
static void e_pred_stale(be_stream *s) {
  /* A valid program edit (a FREE swapped with the BWD_W after it) that leaves the times behind:
   * the entry of 0015 now names the FREE. */
  be_program *p = &s->ranks[0];
  be_inst x = p->code[14];
  p->code[14] = p->code[15];
  p->code[15] = x;
}

static const fb_case fb_cases[] = {
    {"use before WAIT", 1, e_wait_missing,
     "rank 1 at 0002 (FWD): slot %0 (act s0 mb0) used before its WAIT", false},
    {"double DEF", 1, e_double_def,
     "rank 0 at 0005 (FWD): defines slot %1, which still holds act s0 mb0", false},
    {"FREE with a pending send", 1, e_free_pending,
     "rank 0 at 0007 (FREE): frees slot %1 (act s0 mb0) while its send is pending", false},
    {"leaked slot", 1, e_leak,
     "rank 0 at 0025 (STEP): slot %5 (wstash s0 mb1) is still live at the end of the "
     "program", false},
    {"leaked send", 1, e_leak_pending,
     "slot %5 (grad s1 mb1) is still being sent at the end", false},
    {"wrong label into FWD", 1, e_wrong_label,
     "rank 1 at 0003 (FWD): slot %0 holds act s0 mb0, expected act s0 mb1", false},
    {"SEND tag vs slot label", 1, e_tag_mismatch,
     "rank 0 at 0003 (SEND): the tag act s0 mb1 does not match slot %1, which holds act s0 "
     "mb0", false},
    {"SEND never received", 1, e_unreceived,
     "rank 0 at 0009 (SEND): act s0 mb1 to rank 1 is never received", false},
    {"RECV never sent", 1, e_unsent,
     "rank 1 at 0001 (RECV): act s0 mb1 from rank 0 is never sent", false},
    {"receive buffer too small", 1, e_size,
     "rank 1 at 0001 (RECV): slot %6 of 8192 bytes is too small for act s0 mb1 (16384 bytes)",
     false},
    {"output shape", 1, e_shape,
     "stage 0: output of 16384 bytes does not match its shape 1 (128000 bytes)", false},
    {"buffers overlapping in memory", 1, e_overlap,
     "rank 0 at 0001 (FWD): slot %2 (bytes 8192..73728) overlaps slot %1, which still holds act "
     "s0 mb0", false},
    {"recompute flag", 1, e_recompute_flag, "stage 0: recompute flag 2 is neither 0 nor 1", true},
    {"recomputed layers without the flag", 1, e_recompute_layers_alone,
     "stage 0: 1 recomputed layers without the recompute flag", false},
    {"more recomputed layers than recomputable", 1, e_recompute_layers_many,
     "stage 1: 2 recomputed layers, but it has 1 recomputable layer", false},
    {"negative recomputed layers", 1, e_recompute_layers_neg, "recomputed layers -1 is negative",
     true},
    {"stash too small", 1, e_stash_size,
     "rank 0 at 0001 (FWD): slot %2 of 65536 bytes is too small for stash s0 mb0 (65537 bytes)",
     false},
    {"missing BWD_W", 1, e_no_w, "rank 0: BWD_IN of s0 mb0 has no BWD_W", false},
    {"BWD_W before BWD_IN", 1, e_w_before_b,
     "rank 0 at 0012 (BWD_W): BWD_W of s0 mb0 before its BWD_IN", false},
    {"fused and split mixed", 1, e_mixed,
     "rank 0 at 0024 (BWD_W): s0 mb1 already has a fused BWD; a split backward cannot be "
     "mixed", false},
    {"STEP not last", 1, e_step_not_last,
     "rank 0 at 0000 (STEP): STEP is not the last instruction", false},
    {"no STEP", 1, e_no_step, "rank 1: the program does not end with STEP", false},
    {"ALLREDUCE with one replica", 1, e_allreduce_1,
     "rank 0 at 0026 (ALLREDUCE): ALLREDUCE with a single replica", false},
    {"ALLREDUCE missing", 2, e_allreduce_missing,
     "rank 1: no ALLREDUCE of stage 1 (2 replicas)", false},
    {"ALLREDUCE too early", 2, e_allreduce_early,
     "rank 0 at 0020 (ALLREDUCE): ALLREDUCE of stage 0 before the backward of s0 mb1", false},
    {"ALLREDUCE twice", 2, e_allreduce_twice, "second ALLREDUCE of stage 0", false},
    {"TIE without tied embeddings", 1, e_tie_untied,
     "rank 0 at 0026 (TIE): TIE, but the stream has no tied lm_head", false},
    {"TIE missing on a rank", 1, e_tie_missing,
     "rank 1: no TIE of the tied embedding (s0) and lm_head (s1)", false},
    {"TIE of the wrong stages", 1, e_tie_pair,
     "rank 0 at 0026 (TIE): TIE of s0 and s0, but the tied pair is s0 (embedding) and s1 "
     "(lm_head)", false},
    {"TIE twice", 1, e_tie_twice, "rank 0 at 0027 (TIE): second TIE", false},
    {"TIE before the backward", 1, e_tie_early,
     "rank 0 at 0000 (TIE): TIE before the backward of s0 mb0", false},
    {"TIE before the all-reduce", 2, e_tie_before_allreduce,
     "rank 0 at 0026 (TIE): TIE before the ALLREDUCE of stage 0", false},
    {"TIE of another rank's stage", 1, e_tie_not_owner,
     "rank 0 at 0026 (TIE): stage 1 runs on rank 1, not here", false},
    {"tied vocabulary differs", 1, e_tie_vocab,
     "layer 3 \"head\" (lm_head): tied = true shares the table of layer 'embed', whose vocab "
     "= 32000 is not 1000", false},
    {"peer is self", 1, e_peer_self,
     "rank 0 at 0003 (SEND): peer rank 0 is the rank itself", false},
    {"microbatch range", 1, e_mb_range,
     "rank 0 at 0000 (LOAD): operand 1: microbatch 2 out of range (2 microbatches)", false},
    {"slot range", 1, e_slot_range,
     "rank 0 at 0002 (FREE): operand 0 (dead): slot 8 out of range (8 slots)", false},
    {"no slot for a required operand", 1, e_slot_none,
     "operand 2 (in): slot -1 out of range", false},
    {"operand past nops", 1, e_past_nops,
     "rank 0 at 0008 (FREE): operand 1 is 5, past the 1 operand of FREE (the rest must be "
     "0)", true},
    {"unknown opcode", 1, e_opcode, "rank 0 at 0004 (opcode 15): unknown opcode 15", true},
    {"stage not owned", 1, e_not_owner,
     "rank 1 at 0003 (FWD): stage 0 runs on rank 0, not here", false},
    {"LOAD not on stage 0", 1, e_load_stage,
     "only the first stage loads input, not stage 1", false},
    {"LOSS not on the last stage", 1, e_loss_stage,
     "rank 0 at 0002 (LOSS): the loss is computed on the last stage (1), not stage 0", false},
    {"input gradient of stage 0", 1, e_dx_first, "the first stage has no input gradient", false},
    {"no input gradient", 1, e_dx_missing, "stage 1 needs a buffer for its input gradient", false},
    {"tensor that cannot travel", 1, e_not_msg,
     "operand 2: stash tensors do not travel in messages", false},
    {"grad of stage 0 sent", 1, e_grad_s0,
     "grad s0 mb0: the first stage's input gradient goes to no stage", false},
    {"act of last stage sent", 1, e_act_last,
     "act s1 mb0: the last stage's activation goes to no other stage", false},
    {"WAIT without message", 1, e_wait_idle,
     "rank 0 at 0001 (WAIT): waits on slot %0, which has no pending message", false},
    {"use of a dead slot", 1, e_use_dead,
     "rank 0 at 0001 (FWD): reads slot %4, which holds no tensor", false},
    {"slot kind", 1, e_slot_kind,
     "rank 0 at 0000 (LOAD): slot %0 is for act tensors, not input s0 mb0", false},
    {"sent twice", 1, e_sent_twice, "rank 0 at 0008 (SEND): act s0 mb0 is sent twice", false},
    {"stage without layers", 1, e_no_stage, "stage 0 has no layers", false},
    {"stage gap", 1, e_gap, "stage 1 starts at layer 3, expected 2", false},
    {"layers not covered", 1, e_layers_end,
     "the stages end at layer 3, but the model has 4 layers", false},
    {"stage rank range", 1, e_stage_rank, "stage 1 runs on rank 2, out of range [0, 2)", false},
    {"rank without stage", 1, e_idle_rank, "rank 2 owns no stage", false},
    {"rank count", 1, e_nranks, "rank count 0 out of range [1, 65536]", false},
    {"replica count", 1, e_replicas, "replica count 0 must be at least 1", false},
    {"microbatch count", 1, e_nmb_range, "microbatch count 16777217 out of range", false},
    {"too few instructions", 1, e_nmb_big, "the programs have 56 instructions, too few", false},
    {"shape rank", 1, e_shape_dims, "shape 1: 5 dimensions, expected 1 to 4", true},
    {"shape extent", 1, e_shape_extent,
     "shape 0: extent 0 of dimension 2 must be at least 1", false},
    {"output shape range", 1, e_out_shape, "stage 1: output shape 7 out of range (2 shapes)",
     false},
    {"slot tensor kind", 1, e_slot_tensor,
     "rank 0: slot %1 holds tensor kind 9, out of range", false},
    {"dropout flag", 1, e_dropout, "dropout flag 2 must be 0 or 1", false},
    {"measurement scale", 1, e_scale,
     "measurement scale -3 must be at least 0 (0: analytic costs)", false},
    {"no measuring backend", 1, e_backend_null,
     "measuring backend \"\" is not one of none, cpu, mpi, cuda, nccl", false},
    {"measuring backend", 1, e_backend_case,
     "measuring backend \"MPI\" is not one of none, cpu, mpi, cuda, nccl", false},
    {"measuring backend quoted", 1, e_backend_ugly,
     "measuring backend \"a\\x0ab\\x22c\\x5c01234567890123456789012345...\" is not one of",
     false},
    {"predicted step NaN", 1, e_step_nan, "predicted step time nan must be finite and at least 0",
     false},
    {"predicted step infinite", 1, e_step_inf,
     "predicted step time inf must be finite and at least 0", false},
    {"predicted step negative", 1, e_step_neg,
     "predicted step time -0.25 must be finite and at least 0", false},
    {"predicted busy time", 1, e_busy,
     "rank 0: predicted busy time -0.001 must be finite and at least 0", false},
    {"predicted peak memory NaN", 1, e_peak_nan,
     "rank 1: predicted peak memory nan must be finite and at least 0", false},
    {"predicted peak memory infinite", 1, e_peak_inf,
     "rank 0: predicted peak memory inf must be finite and at least 0", false},
    {"predicted peak memory negative", 1, e_peak_neg,
     "rank 1: predicted peak memory -4096 must be finite and at least 0", false},
    {"predicted time count", 1, e_npred_neg, "rank 1: predicted time count -1 out of range", true},
    {"predicted times missing", 1, e_pred_null, "rank 1: predicted time count 6 out of range",
     true},
    {"predicted times out of order", 1, e_pred_order,
     "rank 0: predicted time of 0001 (FWD) after that of 0005 (entries go in increasing address "
     "order)", false},
    {"predicted time twice", 1, e_pred_dup, "rank 0: second predicted time of 0001 (FWD)", false},
    {"predicted time past the code", 1, e_pred_past,
     "rank 0: predicted time 5 names address 27, out of range (27 instructions)", false},
    {"predicted time before the code", 1, e_pred_negative,
     "rank 0: predicted time 0 names address -1, out of range (27 instructions)", false},
    {"predicted time of a LOAD", 1, e_pred_kind,
     "rank 0: predicted time of 0000 (LOAD), which is not a FWD, BWD_IN, BWD_W or BWD "
     "instruction", false},
    {"last predicted time missing", 1, e_pred_missing,
     "rank 1 at 0024 (BWD_W): no predicted time", false},
    {"predicted time missing", 1, e_pred_hole, "rank 1 at 0007 (BWD_IN): no predicted time",
     false},
    {"predicted end before start", 1, e_pred_reversed,
     "rank 1: predicted time of 0011 (BWD_W): t1 0.002 before t0 0.003", false},
    {"predicted start negative", 1, e_pred_t0,
     "rank 1: predicted time of 0011 (BWD_W): t0 -0.001 must be finite and at least 0", false},
    {"predicted start NaN", 1, e_pred_t0_nan,
     "rank 1: predicted time of 0011 (BWD_W): t0 nan must be finite and at least 0", false},
    {"predicted end infinite", 1, e_pred_t1_inf,
     "rank 1: predicted time of 0011 (BWD_W): t1 inf must be finite", false},
    {"predicted times left behind", 1, e_pred_stale,
     "rank 0: predicted time of 0015 (FREE), which is not a FWD", false},
};

/* A tied stream with its TIE on both ranks, after the all-reduces, is valid, free of deadlock,
 * and survives its encoding. */
void test_backend_format_tie(void) {
  for (int replicas = 1; replicas <= 2; replicas++) {
    be_stream *s = fb_build(replicas, false);
    fb_tie(s);
    fb_ins(s, 0, s->ranks[0].ncode - 1, "TIE 0 1");
    fb_ins(s, 1, s->ranks[1].ncode - 1, "TIE 1 0");
    strbuf err = {0};
    UNIT_CHECK(be_validate(s, &err) == 0);
    UNIT_CHECK(be_check(s, &err) == 0);
    UNIT_CHECK_STREQ(strbuf_cstr(&err), "");
    int emb, head;
    UNIT_CHECK(be_stream_tie(s, &emb, &head) && emb == 0 && head == 3);
    strbuf b = fb_bytes(s);
    be_stream *t = be_read((const uint8_t *)b.data, b.len, &err);
    UNIT_CHECK(t != NULL && t->ranks[1].code[t->ranks[1].ncode - 2].op == BE_OP_TIE);
    be_stream_free(t);
    strbuf_free(&b);
    strbuf_free(&err);
    be_stream_free(s);
  }
}

/* Each broken program of the table is rejected with its message (exactly one message), by the
 * validator and by the reader of its encoding. */
void test_backend_format_invalid_programs(void) {
  for (size_t i = 0; i < sizeof fb_cases / sizeof fb_cases[0]; i++) {
    const fb_case *c = &fb_cases[i];
    be_stream *s = fb_build(c->replicas, false);
    int32_t nranks = s->nranks; /* programs to free, whatever the edit claims */
    c->edit(s);
    strbuf err = {0};
    int rc = be_validate(s, &err);
    UNIT_CHECK(rc == -1);
    if (!strstr(strbuf_cstr(&err), c->want)) {
      printf("  case: %s\n", c->what);
      UNIT_CHECK_STREQ(strbuf_cstr(&err), c->want);
    }
    UNIT_CHECK(strchr(strbuf_cstr(&err), '\n') == NULL);
    /* The reader rejects the same stream with the same message (when it can be encoded). */
    if (!c->raw) {
      strbuf b = fb_bytes(s), e2 = {0};
      be_stream *t = be_read((const uint8_t *)b.data, b.len, &e2);
      UNIT_CHECK(t == NULL);
      if (!strstr(strbuf_cstr(&e2), c->want)) {
        printf("  case (read): %s\n", c->what);
        UNIT_CHECK_STREQ(strbuf_cstr(&e2), c->want);
      }
      be_stream_free(t);
      strbuf_free(&b);
      strbuf_free(&e2);
    }
    strbuf_free(&err);
    if (s->nranks < nranks) s->nranks = nranks;
    be_stream_free(s);
  }
}

/* The measuring backends the stream library accepts (be_backend_*, from the IR's enums.def by
 * inclusion) are enum BACKEND of the IR, value for value, and nothing else. */
void test_backend_format_backend_names(void) {
  int n = 0;
  for (; ir_enum_name(IR_T_BACKEND, n); n++) {
    UNIT_CHECK_STREQ(be_backend_name(n), ir_enum_name(IR_T_BACKEND, n));
    UNIT_CHECK(be_backend_lookup(ir_enum_name(IR_T_BACKEND, n)) == n);
  }
  UNIT_CHECK(n == 5);
  UNIT_CHECK(be_backend_name(n) == NULL);
  UNIT_CHECK(be_backend_name(-1) == NULL);
  UNIT_CHECK(be_backend_lookup("MPI") == -1);
  UNIT_CHECK(be_backend_lookup("relu") == -1); /* a value of another enum */
}
