/* format.c -- the binary instruction-stream format (.ois): be_write encodes a stream field by
 * field in little-endian byte order, be_read decodes one with every read and every count checked
 * against the bytes that remain, verifies the CRC-32 trailer, then hands the result to the
 * validator and the deadlock checker. The layout is documented in docs/isa.md ("File format");
 * any change to it, or to the opcode numbering of isa.def, bumps BE_FORMAT_VERSION. */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "stream.h"

/* The 8-byte magic at the start of every file (PNG-style: a high byte, the name, CR LF, ^Z, LF,
 * so that text-mode transfers and truncation to 7 bits are detected). */
static const uint8_t fmt_magic[8] = {0x89, 'O', 'I', 'S', '\r', '\n', 0x1a, '\n'};

/* Longest string stored (validate.c rejects longer ones before a stream is written). */
enum { FMT_MAX_STRING = 4096 };

/* Smallest encodings of the repeated records, for checking counts before allocating. */
enum {
  FMT_MIN_LAYER = 4 + 4 + 4,         /* name "", kind "", no params */
  FMT_MIN_PARAM = 4 + 8,             /* name "", value */
  FMT_MIN_STAGE = 4 * 3 + 8 + 4 + 8 + 8 + 4 + 4 + 4, /* first, end, rank, out bytes and shape,
                                                        stashes, recompute, recompute_layers,
                                                        offload */
  FMT_MIN_SHAPE = 4 + 4 + 8,         /* elem, ndim, one extent */
  FMT_MIN_RANK = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4, /* device, type "", node, no slots, no code,
                                                   busy, peak, no predicted times */
  FMT_SLOT = 8 + 8 + 1,              /* offset, bytes, tensor */
  FMT_PRED = 4 + 8 + 8,              /* addr, t0, t1 */
  FMT_MIN_INST = 1                   /* an opcode without operands */
};

/* ---- Writing ---------------------------------------------------------------------------- */

/* Append the n low bytes of v, least significant first. */
static void put_le(strbuf *o, uint64_t v, int n) {
  char b[8];
  for (int i = 0; i < n; i++) b[i] = (char)(uint8_t)(v >> (8 * i));
  strbuf_append(o, b, (size_t)n);
}

static void put_u8(strbuf *o, uint8_t v) { put_le(o, v, 1); }
static void put_u32(strbuf *o, uint32_t v) { put_le(o, v, 4); }
static void put_i32(strbuf *o, int32_t v) { put_le(o, (uint32_t)v, 4); }
static void put_i64(strbuf *o, int64_t v) { put_le(o, (uint64_t)v, 8); }

/* A double as its IEEE-754 bit pattern (exact round trip, NaN payloads included). */
static void put_f64(strbuf *o, double v) {
  uint64_t u;
  memcpy(&u, &v, sizeof u);
  put_le(o, u, 8);
}

/* A string: u32 length, then its bytes. NULL is written as "". Pre: at most FMT_MAX_STRING
 * bytes (be_validate checks); a longer one is cut there so the output stays readable. */
static void put_str(strbuf *o, const char *s) {
  size_t n = s ? strlen(s) : 0;
  if (n > FMT_MAX_STRING) n = FMT_MAX_STRING;
  put_u32(o, (uint32_t)n);
  if (n) strbuf_append(o, s, n);
}

/* A count (an int32 field of the stream that is never negative in a valid stream). */
static void put_count(strbuf *o, int32_t n) { put_u32(o, n > 0 ? (uint32_t)n : 0); }

/* CRC-32 (zlib's polynomial) of data[0..len). */
static uint32_t fmt_crc(const uint8_t *data, size_t len) {
  uLong c = crc32(0L, Z_NULL, 0);
  while (len > 0) {
    uInt n = len > (1u << 30) ? (1u << 30) : (uInt)len;
    c = crc32(c, data, n);
    data += n;
    len -= n;
  }
  return (uint32_t)c;
}

/* See backend.h. Post: out grows by the encoding of s, checksum included; its earlier contents
 * are untouched (the checksum covers only what this call appended). Strings that are NULL are
 * written as "". Only an invalid stream can hold an opcode past the table: it is written without
 * operands, which is how the tests make files with unknown opcodes. */
void be_write(const be_stream *s, strbuf *out) {
  size_t start = out->len;
  strbuf_append(out, (const char *)fmt_magic, sizeof fmt_magic);
  put_u32(out, BE_FORMAT_VERSION);
  put_str(out, s->model);
  put_i32(out, s->nranks);
  put_i32(out, s->replicas);
  put_i32(out, s->nstages);
  put_i32(out, s->nmb);
  put_i32(out, s->micro_batch);
  put_i32(out, s->seq);
  put_str(out, s->dtype);
  put_str(out, s->optimizer);
  put_i32(out, s->dropout);
  put_i32(out, s->scale);
  put_str(out, s->measured_on);
  put_f64(out, s->pred_step);
  put_count(out, s->nlayers);
  for (int i = 0; i < s->nlayers; i++) {
    const be_layer *l = &s->layers[i];
    put_str(out, l->name);
    put_str(out, l->kind);
    put_count(out, l->nparams);
    for (int j = 0; j < l->nparams; j++) {
      put_str(out, l->params[j].name);
      put_f64(out, l->params[j].value);
    }
  }
  for (int i = 0; i < s->nstages; i++) {
    put_i32(out, s->stages[i].first);
    put_i32(out, s->stages[i].end);
    put_i32(out, s->stages[i].rank);
    put_le(out, s->stages[i].out_bytes, 8);
    put_i32(out, s->stages[i].out_shape);
    put_le(out, s->stages[i].stash_bytes, 8);
    put_le(out, s->stages[i].wstash_bytes, 8);
    put_i32(out, s->stages[i].recompute);
    put_i32(out, s->stages[i].recompute_layers);
    put_i32(out, s->stages[i].offload);
  }
  put_count(out, s->nshapes);
  for (int i = 0; i < s->nshapes; i++) {
    const be_shape *sh = &s->shapes[i];
    put_i32(out, sh->elem);
    put_i32(out, sh->ndim);
    for (int d = 0; d < sh->ndim && d < 4; d++) put_i64(out, sh->dim[d]);
  }
  for (int r = 0; r < s->nranks; r++) {
    const be_program *p = &s->ranks[r];
    put_i32(out, p->device);
    put_str(out, p->type);
    put_i32(out, p->node);
    put_count(out, p->nslots);
    for (int i = 0; i < p->nslots; i++) {
      put_le(out, p->slots[i].offset, 8);
      put_le(out, p->slots[i].bytes, 8);
      put_u8(out, p->slots[i].tensor);
    }
    put_count(out, p->ncode);
    for (int i = 0; i < p->ncode; i++) {
      const be_inst *in = &p->code[i];
      put_u8(out, in->op);
      int nops = in->op < BE_OP_COUNT ? be_ops[in->op].nops : 0;
      for (int k = 0; k < nops; k++) put_i32(out, in->a[k]);
    }
    put_f64(out, p->pred_busy);
    put_f64(out, p->pred_peak);
    put_count(out, p->npred);
    for (int i = 0; i < p->npred; i++) {
      put_i32(out, p->pred[i].addr);
      put_f64(out, p->pred[i].t0);
      put_f64(out, p->pred[i].t1);
    }
  }
  put_u32(out, fmt_crc((const uint8_t *)out->data + start, out->len - start));
}

/* ---- Reading ---------------------------------------------------------------------------- */

/* Decoder state. The first problem is kept in msg; once 'bad' is set every read returns 0 and
 * the caller stops at the next check. */
typedef struct rd {
  const uint8_t *d;  /* the file */
  size_t len, pos;   /* its length, the next byte to read */
  bool bad;          /* a problem was found */
  bool trunc;        /* ... and it is that the data ended early */
  strbuf msg;        /* the problem */
  const char *ctx;   /* printf format naming what is being read ("rank %d slot %d") */
  int ca, cb;        /* its arguments */
} rd;

/* Set the context of the following reads (fmt takes up to two ints). */
static void set_ctx(rd *r, const char *fmt, int a, int b) {
  r->ctx = fmt;
  r->ca = a;
  r->cb = b;
}

/* Append the current context ("layer 3") to the message. */
static void put_ctx(rd *r) {
  char buf[96];
  snprintf(buf, sizeof buf, r->ctx ? r->ctx : "the header", r->ca, r->cb);
  strbuf_puts(&r->msg, buf);
}

/* Ensure n more bytes are there for 'what'; else record "truncated at byte N". */
static bool need(rd *r, size_t n, const char *what) {
  if (r->bad) return false;
  if (r->len - r->pos >= n) return true;
  r->bad = r->trunc = true;
  strbuf_printf(&r->msg, "truncated at byte %zu: expected %s (%zu byte%s) of ", r->pos, what, n,
                n == 1 ? "" : "s");
  put_ctx(r);
  strbuf_printf(&r->msg, ", %zu remain", r->len - r->pos);
  return false;
}

/* Read n bytes (1..8) little-endian; 0 once bad. */
static uint64_t get_le(rd *r, int n, const char *what) {
  if (!need(r, (size_t)n, what)) return 0;
  uint64_t v = 0;
  for (int i = 0; i < n; i++) v |= (uint64_t)r->d[r->pos + (size_t)i] << (8 * i);
  r->pos += (size_t)n;
  return v;
}

static uint8_t get_u8(rd *r, const char *what) { return (uint8_t)get_le(r, 1, what); }
static uint32_t get_u32(rd *r, const char *what) { return (uint32_t)get_le(r, 4, what); }

/* Two's complement decoding without implementation-defined conversions. */
static int32_t get_i32(rd *r, const char *what) {
  uint32_t u = get_u32(r, what);
  return u <= INT32_MAX ? (int32_t)u : (int32_t)(u - 0x80000000u) - INT32_MAX - 1;
}

static int64_t get_i64(rd *r, const char *what) {
  uint64_t u = get_le(r, 8, what);
  return u <= INT64_MAX ? (int64_t)u : (int64_t)(u - 0x8000000000000000u) - INT64_MAX - 1;
}

static double get_f64(rd *r, const char *what) {
  uint64_t u = get_le(r, 8, what);
  double v;
  memcpy(&v, &u, sizeof v);
  return v;
}

/* Record a value problem found at byte 'at': the formatted text, " at byte N (context)". */
static void bad_at(rd *r, size_t at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void bad_at(rd *r, size_t at, const char *fmt, ...) {
  if (r->bad) return;
  r->bad = true;
  va_list ap;
  va_start(ap, fmt);
  strbuf_vprintf(&r->msg, fmt, ap);
  va_end(ap);
  strbuf_printf(&r->msg, " at byte %zu (", at);
  put_ctx(r);
  strbuf_puts(&r->msg, ")");
}

/* A count of records of at least 'min' bytes each: at most INT32_MAX, and small enough that the
 * records fit in the bytes that remain (so no allocation exceeds the file's size). Returns -1
 * once bad. */
static int32_t get_count(rd *r, const char *what, size_t min) {
  size_t at = r->pos;
  uint32_t n = get_u32(r, what);
  if (r->bad) return -1;
  if (n > INT32_MAX) {
    bad_at(r, at, "count of %s %u out of range", what, (unsigned)n);
    return -1;
  }
  if ((uint64_t)n * min > r->len - r->pos) {
    r->bad = r->trunc = true;
    strbuf_printf(&r->msg, "truncated at byte %zu: %u %s need at least %llu bytes (", at,
                  (unsigned)n, what, (unsigned long long)n * min);
    put_ctx(r);
    strbuf_printf(&r->msg, "), %zu remain", r->len - r->pos);
    return -1;
  }
  return (int32_t)n;
}

/* A header count stored as i32 that sizes a table read later: >= 0 (the validator checks the
 * finer range). */
static int32_t check_nonneg(rd *r, int32_t v, size_t at, const char *what) {
  if (!r->bad && v < 0) bad_at(r, at, "%s %d out of range", what, (int)v);
  return v;
}

/* A string: u32 length (at most FMT_MAX_STRING), that many bytes, no NUL among them. Returns a
 * new string, or NULL once bad. */
static char *get_str(rd *r, const char *what) {
  size_t at = r->pos;
  uint32_t n = get_u32(r, what);
  if (r->bad) return NULL;
  if (n > FMT_MAX_STRING) {
    bad_at(r, at, "length %u of %s out of range (at most %d)", (unsigned)n, what, FMT_MAX_STRING);
    return NULL;
  }
  if (!need(r, n, what)) return NULL;
  const char *p = (const char *)r->d + r->pos;
  const char *nul = memchr(p, 0, n);
  if (nul) {
    bad_at(r, r->pos + (size_t)(nul - p), "NUL byte inside %s", what);
    return NULL;
  }
  r->pos += n;
  return xstrndup(p, n);
}

/* Decode the body after magic and version into s. Post: r->bad set on the first problem; s
 * holds whatever was read so far (be_stream_free can free it). */
static void read_body(rd *r, be_stream *s) {
  set_ctx(r, "the header", 0, 0);
  s->model = get_str(r, "the model name");
  size_t at = r->pos;
  s->nranks = check_nonneg(r, get_i32(r, "the rank count"), at, "rank count");
  s->replicas = get_i32(r, "the replica count");
  at = r->pos;
  s->nstages = check_nonneg(r, get_i32(r, "the stage count"), at, "stage count");
  s->nmb = get_i32(r, "the microbatch count");
  s->micro_batch = get_i32(r, "the micro-batch size");
  s->seq = get_i32(r, "the sequence length");
  s->dtype = get_str(r, "the training precision");
  s->optimizer = get_str(r, "the optimizer");
  s->dropout = get_i32(r, "the dropout flag");
  s->scale = get_i32(r, "the measurement scale");
  s->measured_on = get_str(r, "the measuring backend");
  s->pred_step = get_f64(r, "the predicted step time");
  if (r->bad) return;

  set_ctx(r, "the layer table", 0, 0);
  int32_t n = get_count(r, "layers", FMT_MIN_LAYER);
  if (r->bad) return;
  s->layers = xcalloc((size_t)n, sizeof *s->layers);
  s->nlayers = n;
  for (int i = 0; i < n && !r->bad; i++) {
    be_layer *l = &s->layers[i];
    set_ctx(r, "layer %d", i, 0);
    l->name = get_str(r, "the layer name");
    l->kind = get_str(r, "the layer kind");
    int32_t np = get_count(r, "parameters", FMT_MIN_PARAM);
    if (r->bad) return;
    l->params = xcalloc((size_t)np, sizeof *l->params);
    l->nparams = np;
    for (int j = 0; j < np && !r->bad; j++) {
      set_ctx(r, "layer %d parameter %d", i, j);
      l->params[j].name = get_str(r, "the parameter name");
      l->params[j].value = get_f64(r, "the parameter value");
    }
  }
  if (r->bad) return;

  set_ctx(r, "the stage table", 0, 0);
  if ((uint64_t)s->nstages * FMT_MIN_STAGE > r->len - r->pos) {
    r->bad = r->trunc = true;
    strbuf_printf(&r->msg, "truncated at byte %zu: %d stages need %llu bytes, %zu remain", r->pos,
                  (int)s->nstages, (unsigned long long)s->nstages * FMT_MIN_STAGE,
                  r->len - r->pos);
    return;
  }
  s->stages = xcalloc((size_t)s->nstages, sizeof *s->stages);
  for (int i = 0; i < s->nstages && !r->bad; i++) {
    set_ctx(r, "stage %d", i, 0);
    s->stages[i].first = get_i32(r, "the first layer");
    s->stages[i].end = get_i32(r, "the end layer");
    s->stages[i].rank = get_i32(r, "the rank");
    s->stages[i].out_bytes = get_le(r, 8, "the output size");
    s->stages[i].out_shape = get_i32(r, "the output shape");
    s->stages[i].stash_bytes = get_le(r, 8, "the stash size");
    s->stages[i].wstash_bytes = get_le(r, 8, "the wstash size");
    size_t at_rc = r->pos;
    s->stages[i].recompute = get_i32(r, "the recompute flag");
    if (!r->bad && s->stages[i].recompute != 0 && s->stages[i].recompute != 1) {
      bad_at(r, at_rc, "recompute flag %d is neither 0 nor 1", (int)s->stages[i].recompute);
      return;
    }
    size_t at_rl = r->pos;
    s->stages[i].recompute_layers = get_i32(r, "the recomputed layers");
    if (!r->bad && s->stages[i].recompute_layers < 0) {
      bad_at(r, at_rl, "recomputed layers %d is negative", (int)s->stages[i].recompute_layers);
      return;
    }
    size_t at_off = r->pos;
    s->stages[i].offload = get_i32(r, "the offload flag");
    if (!r->bad && s->stages[i].offload != 0 && s->stages[i].offload != 1) {
      bad_at(r, at_off, "offload flag %d is neither 0 nor 1", (int)s->stages[i].offload);
      return;
    }
  }
  if (r->bad) return;

  set_ctx(r, "the shape table", 0, 0);
  n = get_count(r, "shapes", FMT_MIN_SHAPE);
  if (r->bad) return;
  s->shapes = xcalloc((size_t)n, sizeof *s->shapes);
  s->nshapes = n;
  for (int i = 0; i < n && !r->bad; i++) {
    be_shape *sh = &s->shapes[i];
    set_ctx(r, "shape %d", i, 0);
    sh->elem = get_i32(r, "the element size");
    at = r->pos;
    sh->ndim = get_i32(r, "the dimension count");
    if (!r->bad && (sh->ndim < 1 || sh->ndim > 4)) {
      bad_at(r, at, "dimension count %d out of range [1, 4]", (int)sh->ndim);
      return;
    }
    for (int d = 0; d < sh->ndim && !r->bad; d++) sh->dim[d] = get_i64(r, "an extent");
  }
  if (r->bad) return;

  set_ctx(r, "the programs", 0, 0);
  if ((uint64_t)s->nranks * FMT_MIN_RANK > r->len - r->pos) {
    r->bad = r->trunc = true;
    strbuf_printf(&r->msg,
                  "truncated at byte %zu: %d programs need at least %llu bytes, %zu remain", r->pos,
                  (int)s->nranks, (unsigned long long)s->nranks * FMT_MIN_RANK, r->len - r->pos);
    return;
  }
  s->ranks = xcalloc((size_t)s->nranks, sizeof *s->ranks);
  for (int k = 0; k < s->nranks && !r->bad; k++) {
    be_program *p = &s->ranks[k];
    set_ctx(r, "rank %d", k, 0);
    p->device = get_i32(r, "the device");
    p->type = get_str(r, "the device type");
    p->node = get_i32(r, "the node");
    int32_t ns = get_count(r, "slots", FMT_SLOT);
    if (r->bad) return;
    p->slots = xcalloc((size_t)ns, sizeof *p->slots);
    p->nslots = ns;
    for (int i = 0; i < ns && !r->bad; i++) {
      set_ctx(r, "rank %d slot %d", k, i);
      p->slots[i].offset = get_le(r, 8, "the offset");
      p->slots[i].bytes = get_le(r, 8, "the size");
      p->slots[i].tensor = get_u8(r, "the tensor kind");
    }
    if (r->bad) return;
    set_ctx(r, "rank %d", k, 0);
    int32_t nc = get_count(r, "instructions", FMT_MIN_INST);
    if (r->bad) return;
    p->code = xcalloc((size_t)nc, sizeof *p->code);
    p->ncode = p->code_cap = nc;
    for (int i = 0; i < nc && !r->bad; i++) {
      be_inst *in = &p->code[i];
      set_ctx(r, "rank %d instruction %04d", k, i);
      at = r->pos;
      in->op = get_u8(r, "the opcode");
      if (r->bad) return;
      if (in->op >= BE_OP_COUNT) {
        bad_at(r, at, "unknown opcode %u", (unsigned)in->op);
        return;
      }
      for (int j = 0; j < be_ops[in->op].nops && !r->bad; j++)
        in->a[j] = get_i32(r, "an operand");
    }
    if (r->bad) return;
    set_ctx(r, "rank %d", k, 0);
    p->pred_busy = get_f64(r, "the predicted busy time");
    p->pred_peak = get_f64(r, "the predicted peak memory");
    int32_t np = get_count(r, "predicted times", FMT_PRED);
    if (r->bad) return;
    p->pred = xcalloc((size_t)np, sizeof *p->pred);
    p->npred = np;
    for (int i = 0; i < np && !r->bad; i++) {
      set_ctx(r, "rank %d predicted time %d", k, i);
      p->pred[i].addr = get_i32(r, "the address");
      p->pred[i].t0 = get_f64(r, "the start");
      p->pred[i].t1 = get_f64(r, "the end");
    }
  }
}

/* See backend.h. Order of checks: magic, version, the structure (every read and count within
 * the data), the checksum, trailing bytes, be_validate, be_check. When the structure is broken
 * and the checksum does not match either, the file was damaged: a short read is reported as
 * truncation, anything else as a checksum mismatch. Post: NULL and one message appended to err,
 * or a stream that passed be_validate and be_check (the caller frees it). */
be_stream *be_read(const uint8_t *data, size_t len, strbuf *err) {
  if (!data) len = 0;
  if (len < sizeof fmt_magic) {
    if (len == 0 || memcmp(data, fmt_magic, len) != 0) {
      strbuf_puts(err, "not an OctoPipe instruction stream");
    } else {
      strbuf_printf(err, "truncated at byte %zu: expected the 8-byte magic", len);
    }
    return NULL;
  }
  if (memcmp(data, fmt_magic, sizeof fmt_magic) != 0) {
    strbuf_puts(err, "not an OctoPipe instruction stream");
    return NULL;
  }
  rd r = {data, len, sizeof fmt_magic, false, false, {0}, NULL, 0, 0};
  uint32_t version = get_u32(&r, "the format version");
  if (r.bad) {
    strbuf_puts(err, strbuf_cstr(&r.msg));
    strbuf_free(&r.msg);
    return NULL;
  }
  if (version != BE_FORMAT_VERSION) {
    strbuf_printf(err, "format version %u, this build reads version %u", (unsigned)version,
                  (unsigned)BE_FORMAT_VERSION);
    return NULL;
  }
  be_stream *s = xcalloc(1, sizeof *s);
  read_body(&r, s);
  if (r.bad) {
    bool crc_ok = len >= 16 && fmt_crc(data, len - 4) == (uint32_t)(data[len - 4] |
                                                                    (uint32_t)data[len - 3] << 8 |
                                                                    (uint32_t)data[len - 2] << 16 |
                                                                    (uint32_t)data[len - 1] << 24);
    if (crc_ok || r.trunc) strbuf_puts(err, strbuf_cstr(&r.msg));
    else strbuf_puts(err, "checksum mismatch: the file is corrupted");
    goto fail;
  }
  size_t end = r.pos;
  set_ctx(&r, "the file", 0, 0);
  uint32_t crc = get_u32(&r, "the checksum");
  if (r.bad) {
    strbuf_puts(err, strbuf_cstr(&r.msg));
    goto fail;
  }
  if (crc != fmt_crc(data, end)) {
    strbuf_puts(err, "checksum mismatch: the file is corrupted");
    goto fail;
  }
  if (r.pos != len) {
    strbuf_printf(err, "%zu trailing byte%s after the checksum at byte %zu", len - r.pos,
                  len - r.pos == 1 ? "" : "s", r.pos);
    goto fail;
  }
  strbuf_free(&r.msg);
  if (be_validate(s, err) || be_check(s, err)) {
    be_stream_free(s);
    return NULL;
  }
  return s;
fail:
  strbuf_free(&r.msg);
  be_stream_free(s);
  return NULL;
}

/* See backend.h. Post: as be_read; a file that cannot be opened or read gives "PATH: reason"
 * (support_read_file's: strerror text, or the size limit), and every message of be_read is
 * prefixed with "PATH: ". */
be_stream *be_read_file(const char *path, strbuf *err) {
  size_t len = 0;
  strbuf why = {0};
  char *buf = support_read_file(path, &len, &why);
  if (!buf) {
    strbuf_printf(err, "%s: %s", path, strbuf_cstr(&why));
    strbuf_free(&why);
    return NULL;
  }
  strbuf msg = {0};
  be_stream *s = be_read((const uint8_t *)buf, len, &msg);
  if (!s) strbuf_printf(err, "%s: %s", path, strbuf_cstr(&msg));
  strbuf_free(&msg);
  free(buf);
  return s;
}
