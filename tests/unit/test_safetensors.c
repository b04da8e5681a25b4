/* test_safetensors.c -- unit tests of the safetensors library: the writer's bytes against the
 * reference implementation's own test vectors, write -> read round trips, the dtype conversions
 * (exact F16/BF16 values, BF16 rounding), every malformation the reader rejects (with the file,
 * the tensor and the problem in the message), the writer's refusals, and sharded sets. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "safetensors.h"
#include "support.h"
#include "unit.h"

/* A fresh directory for one test's files. Pre: buf holds 64 bytes. */
static const char *sf_tmpdir(char *buf) {
  strcpy(buf, "/tmp/octo_st_XXXXXX");
  return mkdtemp(buf);
}

/* Remove directory 'dir' and the files in it. */
static void sf_rmdir(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  char p[512];
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
      snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
      unlink(p);
    }
  closedir(d);
  rmdir(dir);
}

/* Write a file of the 8-byte length of 'header', the header, and 'data_len' bytes (0, 1, 2,
 * ...) to dir/name; the length written is 'hlen' when it is not -1. Returns the path (static). */
static const char *sf_file(const char *dir, const char *name, const char *header, long long hlen,
                           size_t data_len) {
  static char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  uint64_t n = hlen >= 0 ? (uint64_t)hlen : strlen(header);
  for (int i = 0; i < 8; i++) fputc((int)(n >> (8 * i)) & 0xff, f);
  fputs(header, f);
  for (size_t i = 0; i < data_len; i++) fputc((int)(i & 0xff), f);
  fclose(f);
  return path;
}

/* Empty *sb for the next check. */
static void sf_clear(strbuf *sb) {
  sb->len = 0;
  if (sb->data) sb->data[0] = '\0';
}

/* The whole file 'path' (caller frees), its length in *len. */
static char *sf_slurp(const char *path, size_t *len) {
  strbuf why = {0};
  char *d = support_read_file(path, len, &why);
  strbuf_free(&why);
  return d;
}

/* The reference implementation's serialization tests (safetensors/src/tensor.rs:
 * test_serialization, test_empty, test_serialization_forced_alignement): our bytes equal. */
void test_safetensors_reference_bytes(void) {
  char dbuf[64];
  const char *dir = sf_tmpdir(dbuf);
  char path[512];
  snprintf(path, sizeof path, "%s/a.safetensors", dir);
  strbuf err = {0};
  const float v[6] = {0, 1, 2, 3, 4, 5};
  size_t len;
  char *got;
  /* "attn.0" [1, 2, 3]: a 64-byte header, no padding */
  st_writer *w = st_writer_new();
  UNIT_CHECK(st_writer_add(w, "attn.0", ST_F32, 3, (const int64_t[]){1, 2, 3}, v, &err));
  UNIT_CHECK(st_writer_write(w, path, &err));
  got = sf_slurp(path, &len);
  const char h1[] = "@\0\0\0\0\0\0\0{\"attn.0\":{\"dtype\":\"F32\",\"shape\":[1,2,3],"
                    "\"data_offsets\":[0,24]}}";
  UNIT_CHECK(len == sizeof h1 - 1 + 24 && memcmp(got, h1, sizeof h1 - 1) == 0);
  UNIT_CHECK(memcmp(got + 72, "\0\0\0\0\0\0\x80\x3f\0\0\0\x40", 12) == 0);
  free(got);
  st_writer_free(w);
  /* "attn0" [1, 1, 2, 3]: padded by 7 spaces to 72 bytes */
  w = st_writer_new();
  UNIT_CHECK(st_writer_add(w, "attn0", ST_F32, 4, (const int64_t[]){1, 1, 2, 3}, v, &err));
  UNIT_CHECK(st_writer_write(w, path, &err));
  got = sf_slurp(path, &len);
  const char h2[] = "H\0\0\0\0\0\0\0{\"attn0\":{\"dtype\":\"F32\",\"shape\":[1,1,2,3],"
                    "\"data_offsets\":[0,24]}}       ";
  UNIT_CHECK(len == sizeof h2 - 1 + 24 && memcmp(got, h2, sizeof h2 - 1) == 0);
  free(got);
  st_writer_free(w);
  /* no tensors; then metadata only */
  w = st_writer_new();
  UNIT_CHECK(st_writer_write(w, path, &err));
  got = sf_slurp(path, &len);
  UNIT_CHECK(len == 16 && memcmp(got, "\x08\0\0\0\0\0\0\0{}      ", 16) == 0);
  free(got);
  st_writer_meta(w, "framework", "pt");
  UNIT_CHECK(st_writer_write(w, path, &err));
  got = sf_slurp(path, &len);
  const char h3[] = "(\0\0\0\0\0\0\0{\"__metadata__\":{\"framework\":\"pt\"}}     ";
  UNIT_CHECK(len == sizeof h3 - 1 && memcmp(got, h3, len) == 0);
  free(got);
  st_writer_free(w);
  UNIT_CHECK_STREQ(strbuf_cstr(&err), "");
  strbuf_free(&err);
  sf_rmdir(dir);
}

void test_safetensors_roundtrip(void) {
  char dbuf[64];
  const char *dir = sf_tmpdir(dbuf);
  char path[512];
  snprintf(path, sizeof path, "%s/rt.safetensors", dir);
  strbuf err = {0};
  float a[6] = {1.5f, -2, 3.25f, 0, -0.0f, 1e-30f};
  float b[4] = {1, 1.00390625f /* 1 + 2^-8: ties to 1 */, 1.01171875f /* 1 + 3 * 2^-8 */, 3e38f};
  float s = 42;
  st_writer *w = st_writer_new();
  UNIT_CHECK(st_writer_add(w, "z.weight", ST_F32, 2, (const int64_t[]){2, 3}, a, &err));
  UNIT_CHECK(st_writer_add(w, "m.bf", ST_BF16, 1, (const int64_t[]){4}, b, &err));
  UNIT_CHECK(st_writer_add(w, "a.scalar", ST_F32, 0, NULL, &s, &err));
  UNIT_CHECK(st_writer_add(w, "empty", ST_BF16, 2, (const int64_t[]){0, 5}, NULL, &err));
  st_writer_meta(w, "format", "pt");
  st_writer_meta(w, "b", "first");
  st_writer_meta(w, "b", "two\n\"quoted\"");
  UNIT_CHECK(st_writer_write(w, path, &err));
  st_writer_free(w);
  UNIT_CHECK_STREQ(strbuf_cstr(&err), "");
  st_file *f = st_open(path, &err);
  UNIT_CHECK_STREQ(strbuf_cstr(&err), "");
  UNIT_CHECK(f != NULL);
  if (!f) return;
  /* file order: F32 by name, then BF16 by name; a tensor of no bytes before the one at its
   * offset only when they tie on begin and end */
  UNIT_CHECK(st_count(f) == 4);
  UNIT_CHECK_STREQ(st_at(f, 0)->name, "a.scalar");
  UNIT_CHECK_STREQ(st_at(f, 1)->name, "z.weight");
  UNIT_CHECK_STREQ(st_at(f, 2)->name, "empty");
  UNIT_CHECK_STREQ(st_at(f, 3)->name, "m.bf");
  const st_tensor *t = st_find(f, "z.weight");
  UNIT_CHECK(t && t->dtype == ST_F32 && t->rank == 2 && t->shape[0] == 2 && t->shape[1] == 3 &&
             t->numel == 6 && t->begin == 4 && t->end == 28);
  float out[6];
  UNIT_CHECK(t && st_read_f32(f, t, out, 6, &err));
  UNIT_CHECK(memcmp(out, a, sizeof a) == 0);
  t = st_find(f, "a.scalar");
  UNIT_CHECK(t && t->rank == 0 && t->numel == 1 && st_read_f32(f, t, out, 1, &err) && out[0] == 42);
  t = st_find(f, "empty");
  UNIT_CHECK(t && t->numel == 0 && t->begin == t->end && st_read_f32(f, t, out, 0, &err));
  t = st_find(f, "m.bf");
  UNIT_CHECK(t && t->dtype == ST_BF16 && t->end - t->begin == 8 && st_read_f32(f, t, out, 4, &err));
  UNIT_CHECK_EQ_DBL(out[0], 1);
  UNIT_CHECK_EQ_DBL(out[1], 1);
  UNIT_CHECK_EQ_DBL(out[2], 1.015625);
  UNIT_CHECK_EQ_DBL(out[3], st_bf16_to_f32(st_f32_to_bf16(3e38f)));
  unsigned char raw[8];
  UNIT_CHECK(t && st_read_raw(f, t, raw, 8, &err) && raw[0] == 0x80 && raw[1] == 0x3f);
  UNIT_CHECK(st_find(f, "nope") == NULL);
  UNIT_CHECK(st_meta_count(f) == 2);
  const char *val;
  UNIT_CHECK_STREQ(st_meta_at(f, 0, &val), "b");
  UNIT_CHECK_STREQ(val, "two\n\"quoted\"");
  UNIT_CHECK_STREQ(st_meta(f, "format"), "pt");
  UNIT_CHECK(st_meta(f, "missing") == NULL);
  UNIT_CHECK_STREQ(strbuf_cstr(&err), "");
  st_close(f);
  /* the header is padded to 8 bytes and nothing but the target is left in the directory */
  size_t len;
  char *bytes = sf_slurp(path, &len);
  UNIT_CHECK(bytes && (unsigned char)bytes[0] % 8 == 0);
  free(bytes);
  DIR *d = opendir(dir);
  int entries = 0;
  for (struct dirent *e; d && (e = readdir(d));) entries += e->d_name[0] != '.';
  if (d) closedir(d);
  UNIT_CHECK(entries == 1);
  strbuf_free(&err);
  sf_rmdir(dir);
}

void test_safetensors_convert(void) {
  /* F16: every class of value, exactly */
  UNIT_CHECK_EQ_DBL(st_f16_to_f32(0x3c00), 1);
  UNIT_CHECK_EQ_DBL(st_f16_to_f32(0xc000), -2);
  UNIT_CHECK_EQ_DBL(st_f16_to_f32(0x3555), 0.333251953125);
  UNIT_CHECK_EQ_DBL(st_f16_to_f32(0x7bff), 65504);
  UNIT_CHECK_EQ_DBL(st_f16_to_f32(0x0400), ldexp(1, -14));
  UNIT_CHECK_EQ_DBL(st_f16_to_f32(0x0001), ldexp(1, -24));
  UNIT_CHECK_EQ_DBL(st_f16_to_f32(0x03ff), ldexp(1023, -24));
  UNIT_CHECK_EQ_DBL(st_f16_to_f32(0x8001), -ldexp(1, -24));
  UNIT_CHECK(st_f16_to_f32(0x8000) == 0 && signbit(st_f16_to_f32(0x8000)));
  UNIT_CHECK(isinf(st_f16_to_f32(0x7c00)) && st_f16_to_f32(0x7c00) > 0);
  UNIT_CHECK(isinf(st_f16_to_f32(0xfc00)) && st_f16_to_f32(0xfc00) < 0);
  UNIT_CHECK(isnan(st_f16_to_f32(0x7e00)));
  /* every finite half is the float whose value it encodes */
  int bad = 0;
  for (uint32_t h = 0; h < 0x10000; h++) {
    int ex = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (ex == 0x1f) continue;
    double want = (ex ? ldexp(1024 + man, ex - 25) : ldexp(man, -24)) * (h & 0x8000 ? -1 : 1);
    bad += st_f16_to_f32((uint16_t)h) != want;
  }
  UNIT_CHECK(bad == 0);
  /* BF16 */
  UNIT_CHECK_EQ_DBL(st_bf16_to_f32(0x3f80), 1);
  UNIT_CHECK_EQ_DBL(st_bf16_to_f32(0xc040), -3);
  UNIT_CHECK_EQ_DBL(st_bf16_to_f32(0x7f7f), ldexp(255, 120));
  UNIT_CHECK_EQ_DBL(st_bf16_to_f32(0x0001), ldexp(1, -133));
  UNIT_CHECK(isinf(st_bf16_to_f32(0x7f80)));
  /* float32 -> BF16: nearest, ties to even; NaN as PyTorch writes it; overflow to infinity */
  UNIT_CHECK(st_f32_to_bf16(1.0f) == 0x3f80);
  UNIT_CHECK(st_f32_to_bf16(1.00390625f) == 0x3f80); /* 1 + 2^-8: tie, even down */
  UNIT_CHECK(st_f32_to_bf16(1.01171875f) == 0x3f82); /* 1 + 3 * 2^-8: tie, even up */
  UNIT_CHECK(st_f32_to_bf16(1.00390637f) == 0x3f81); /* just above the tie */
  UNIT_CHECK(st_f32_to_bf16(-3.0f) == 0xc040);
  UNIT_CHECK(st_f32_to_bf16(NAN) == 0x7fc0);
  UNIT_CHECK(st_f32_to_bf16(3.4028235e38f) == 0x7f80);
  UNIT_CHECK(st_f32_to_bf16(INFINITY) == 0x7f80);
  /* through a file: F16, BF16, F64 (rounded), and the refusals */
  char dbuf[64];
  const char *dir = sf_tmpdir(dbuf);
  strbuf err = {0};
  char path[512];
  snprintf(path, sizeof path, "%s/c.safetensors", dir);
  unsigned char data[] = {0x00, 0x3c, 0x00, 0xc0, 0x01, 0x00,             /* F16 1, -2, 2^-24 */
                          0x80, 0x3f, 0x40, 0xc0,                         /* BF16 1, -3 */
                          0,    0,    0,    0,    0,    0,    0xf0, 0x3f, /* F64 1 */
                          0x9a, 0x99, 0x99, 0x99, 0x99, 0x99, 0xb9, 0x3f, /* F64 0.1 */
                          0x9c, 0x75, 0x00, 0x88, 0x3c, 0xe4, 0x37, 0x7e, /* F64 1e300 */
                          7,    0,    0,    0};                           /* I32 7 */
  const char *hdr = "{\"h\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[0,6]},"
                    "\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[6,10]},"
                    "\"d\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[10,26]},"
                    "\"big\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[26,34]},"
                    "\"i\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[34,38]}}";
  FILE *fp = fopen(path, "wb");
  uint64_t hl = strlen(hdr);
  for (int i = 0; i < 8; i++) fputc((int)(hl >> (8 * i)) & 0xff, fp);
  fputs(hdr, fp);
  fwrite(data, 1, sizeof data, fp);
  fclose(fp);
  st_file *f = st_open(path, &err);
  UNIT_CHECK(f != NULL);
  UNIT_CHECK_STREQ(strbuf_cstr(&err), "");
  if (f) {
    float o[3];
    UNIT_CHECK(st_read_f32(f, st_find(f, "h"), o, 3, &err));
    UNIT_CHECK(o[0] == 1 && o[1] == -2 && o[2] == (float)ldexp(1, -24));
    UNIT_CHECK(st_read_f32(f, st_find(f, "b"), o, 2, &err) && o[0] == 1 && o[1] == -3);
    UNIT_CHECK(st_read_f32(f, st_find(f, "d"), o, 2, &err) && o[0] == 1 && o[1] == 0.1f);
    UNIT_CHECK_STREQ(strbuf_cstr(&err), "");
    UNIT_CHECK(!st_read_f32(f, st_find(f, "big"), o, 1, &err));
    UNIT_CHECK(strstr(strbuf_cstr(&err),
                      "c.safetensors: tensor 'big': element 0 (1.0000000000000001e+300) "
                      "is outside float32's range"));
    sf_clear(&err);
    UNIT_CHECK(!st_read_f32(f, st_find(f, "i"), o, 1, &err));
    UNIT_CHECK(strstr(strbuf_cstr(&err), "tensor 'i': dtype I32 is not a float type"));
    /* the file shrinks after st_open: a read error naming the tensor, not garbage */
    sf_clear(&err);
    UNIT_CHECK(truncate(path, 8 + (off_t)hl + 20) == 0);
    UNIT_CHECK(!st_read_f32(f, st_find(f, "d"), o, 2, &err));
    UNIT_CHECK(strstr(strbuf_cstr(&err), "tensor 'd': truncated: the file shrank"));
    st_close(f);
  }
  strbuf_free(&err);
  sf_rmdir(dir);
}

/* One malformed file and the error it must get: the header (its length field 'hlen', or the
 * header's own length when -1), the data bytes after it, and a part of the message. */
typedef struct sf_bad {
  const char *header; /* header text */
  long long hlen;     /* length field, -1: strlen(header) */
  size_t data;        /* data bytes after the header */
  const char *error;  /* expected in the message (after "PATH: ") */
} sf_bad;

#define T1 "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}"

static const sf_bad sf_bads[] = {
    {"", 0, 0, "the header is not a JSON object"},
    {"{}", 1000, 0, "header length 1000 runs past the end of the file (10 bytes)"},
    {"{}", 100000001, 0, "header length 100000001 is over 100000000 bytes, the limit"},
    {"{}", 0x7fffffffffffffffLL, 0, "header length 9223372036854775807 is over"},
    {"[1, 2]", -1, 0, "the header is not a JSON object (it must start with '{')"},
    {"{\"a\": 1", -1, 0, "the header is not valid JSON (at byte 6 of the header)"},
    {"{} {}", -1, 0, "more than one JSON value (byte 3 of the header"},
    {"{}\x01", -1, 0, "control character 0x01 at byte 2"},
    {"{\"\xff\":1}", -1, 0, "the header is not UTF-8 (at byte 2 of the header)"},
    {"{\"\xc0\x80\":1}", -1, 0, "not UTF-8"},
    {"{\"a\\u0000b\":1}", -1, 0, "a \\u0000 in a string (at byte 3 of the header)"},
    {"{\"a\":[]}", -1, 0, "tensor 'a': its entry is not a JSON object"},
    {"{\"a\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", -1, 8,
     "tensor 'a': unknown dtype 'F33' (did you mean 'F32'?)"},
    {"{\"a\":{\"dtype\":4,\"shape\":[2],\"data_offsets\":[0,8]}}", -1, 8,
     "tensor 'a': \"dtype\" is not a string"},
    {"{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", -1, 8, "tensor 'a': no \"shape\""},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"offsets\":[0,8]}}", -1, 8,
     "tensor 'a': unknown key 'offsets'"},
    {"{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", -1, 8,
     "tensor 'a': key 'dtype' given twice"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,8]}}", -1, 8,
     "tensor 'a': shape dimension 0 is not an integer in [0, 2^53)"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2, 1.5],\"data_offsets\":[0,8]}}", -1, 8,
     "shape dimension 1 is not an integer"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":3,\"data_offsets\":[0,8]}}", -1, 8,
     "\"shape\" is not an array"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4503599627370496,4503599627370496],"
     "\"data_offsets\":[0,8]}}",
     -1, 8, "tensor 'a': the shape has 2^53 elements or more"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", -1, 8,
     "\"data_offsets\" is not [begin, end]"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", -1, 8,
     "\"data_offsets\" is not [begin, end]"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", -1, 4,
     "tensor 'a': shape [2] of F32 is 8 bytes but data_offsets [0, 4) hold 4"},
    {"{\"a\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,8]}}", -1, 8,
     "shape [2, 3] of BF16 is 12 bytes but data_offsets [0, 8) hold 8"},
    {T1 ",\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", -1, 12,
     "tensor 'b': data_offsets [4, 12) overlap tensor 'a''s [0, 8)"},
    {T1 ",\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[12,16]}}", -1, 16,
     "tensor 'b': data_offsets [12, 16) leave a gap of 4 bytes after tensor 'a' (which ends at 8)"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", -1, 8,
     "tensor 'a': the first tensor's data starts at byte 4, not 0"},
    {T1 ",\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", -1, 16,
     "tensor 'a': named twice in the header"},
    {T1 ",\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}", -1, 12,
     "tensor 'b': truncated: its data [8, 24) runs past the end of the data, which holds 12 bytes"},
    {T1 "}", -1, 5, "tensor 'a': truncated"},
    {T1 "}", -1, 12, "4 bytes after the last tensor's data"},
    {"{\"__metadata__\":{\"n\":1}}", -1, 0, "\"__metadata__\" entry 'n' is not a string"},
    {"{\"__metadata__\":[]}", -1, 0, "\"__metadata__\" is not an object of strings"},
    {"{\"__metadata__\":{\"k\":\"a\",\"k\":\"b\"}}", -1, 0, "\"__metadata__\" key 'k' given twice"},
    {"{\"__metadata__\":{},\"__metadata__\":{}}", -1, 0, "\"__metadata__\" given twice"},
};

void test_safetensors_malformed(void) {
  char dbuf[64];
  const char *dir = sf_tmpdir(dbuf);
  strbuf err = {0};
  for (size_t i = 0; i < sizeof sf_bads / sizeof sf_bads[0]; i++) {
    const sf_bad *b = &sf_bads[i];
    const char *path = sf_file(dir, "bad.safetensors", b->header, b->hlen, b->data);
    sf_clear(&err);
    st_file *f = st_open(path, &err);
    UNIT_CHECK(f == NULL);
    st_close(f);
    const char *msg = strbuf_cstr(&err);
    if (strncmp(msg, path, strlen(path)) != 0 || !strstr(msg, b->error))
      unit_fail_str(__FILE__, __LINE__, "message", msg, b->error);
  }
  /* valid edge cases: an empty header object padded with spaces, and a header with newlines */
  const char *ok[] = {
      "{}      ", "{\n\t\"a\" : {\"shape\": [], \"dtype\": \"U8\", \"data_offsets\": [0, 1]}\r\n}"};
  for (int i = 0; i < 2; i++) {
    sf_clear(&err);
    st_file *f = st_open(sf_file(dir, "ok.safetensors", ok[i], -1, (size_t)i), &err);
    UNIT_CHECK(f != NULL && st_count(f) == (size_t)i);
    st_close(f);
  }
  UNIT_CHECK_STREQ(strbuf_cstr(&err), "");
  /* too short, a directory, a FIFO (no writer: the open must not wait for one), a missing file */
  const char *p = sf_file(dir, "short.safetensors", "", 0, 0);
  UNIT_CHECK(truncate(p, 4) == 0);
  UNIT_CHECK(st_open(p, &err) == NULL);
  UNIT_CHECK(strstr(strbuf_cstr(&err), "short.safetensors: 4 bytes: too short"));
  sf_clear(&err);
  UNIT_CHECK(st_open(dir, &err) == NULL && strstr(strbuf_cstr(&err), ": is a directory"));
  sf_clear(&err);
  char fifo[512];
  snprintf(fifo, sizeof fifo, "%s/fifo", dir);
  UNIT_CHECK(mkfifo(fifo, 0600) == 0);
  UNIT_CHECK(st_open(fifo, &err) == NULL && strstr(strbuf_cstr(&err), "fifo: not a regular file"));
  sf_clear(&err);
  UNIT_CHECK(st_open("/nonexistent/x.safetensors", &err) == NULL);
  UNIT_CHECK_STREQ(strbuf_cstr(&err), "/nonexistent/x.safetensors: No such file or directory");
  /* a name in a message is cut to DIAG_MAX_QUOTED bytes */
  strbuf h = {0};
  strbuf_puts(&h, "{\"");
  for (int i = 0; i < 1000; i++) strbuf_putc(&h, 'n');
  strbuf_puts(&h, "\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,8]}}");
  sf_clear(&err);
  UNIT_CHECK(st_open(sf_file(dir, "long.safetensors", h.data, -1, 8), &err) == NULL);
  UNIT_CHECK(strstr(strbuf_cstr(&err), "nnn...': shape [1]") && err.len < 400);
  strbuf_free(&h);
  strbuf_free(&err);
  sf_rmdir(dir);
}

void test_safetensors_writer_errors(void) {
  char dbuf[64];
  const char *dir = sf_tmpdir(dbuf);
  strbuf err = {0};
  float v[2] = {1, 2};
  st_writer *w = st_writer_new();
  UNIT_CHECK(st_writer_add(w, "x", ST_F32, 1, (const int64_t[]){2}, v, &err));
  UNIT_CHECK(!st_writer_add(w, "x", ST_BF16, 1, (const int64_t[]){2}, v, &err));
  UNIT_CHECK_STREQ(strbuf_cstr(&err), "tensor 'x': added twice");
  sf_clear(&err);
  UNIT_CHECK(!st_writer_add(w, "__metadata__", ST_F32, 1, (const int64_t[]){2}, v, &err));
  UNIT_CHECK(strstr(strbuf_cstr(&err), "is the header's metadata key"));
  sf_clear(&err);
  UNIT_CHECK(!st_writer_add(w, "h", ST_F16, 1, (const int64_t[]){2}, v, &err));
  UNIT_CHECK_STREQ(strbuf_cstr(&err), "tensor 'h': the writer writes F32 and BF16 only");
  sf_clear(&err);
  UNIT_CHECK(!st_writer_add(w, "n", ST_F32, 2, (const int64_t[]){2, -1}, v, &err));
  UNIT_CHECK_STREQ(strbuf_cstr(&err), "tensor 'n': dimension 1 is -1, not in [0, 2^53)");
  sf_clear(&err);
  UNIT_CHECK(!st_writer_add(w, "d", ST_F32, 1, (const int64_t[]){2}, NULL, &err));
  UNIT_CHECK_STREQ(strbuf_cstr(&err), "tensor 'd': no data");
  sf_clear(&err);
  /* a target that is a directory, or in a directory that does not exist: nothing written */
  UNIT_CHECK(!st_writer_write(w, dir, &err));
  UNIT_CHECK(strstr(strbuf_cstr(&err), "exists and is not a regular file"));
  sf_clear(&err);
  char path[512];
  snprintf(path, sizeof path, "%s/no/such/x.safetensors", dir);
  UNIT_CHECK(!st_writer_write(w, path, &err));
  UNIT_CHECK(strstr(strbuf_cstr(&err), "x.safetensors: No such file or directory"));
  /* an existing file is replaced whole */
  snprintf(path, sizeof path, "%s/x.safetensors", dir);
  sf_file(dir, "x.safetensors", "old", -1, 100);
  sf_clear(&err);
  UNIT_CHECK(st_writer_write(w, path, &err));
  st_file *f = st_open(path, &err);
  UNIT_CHECK(f && st_count(f) == 1);
  st_close(f);
  UNIT_CHECK_STREQ(strbuf_cstr(&err), "");
  st_writer_free(w);
  strbuf_free(&err);
  sf_rmdir(dir);
}

/* Write a shard dir/name holding float32 tensors called by names[0 .. n) (shape [1]). */
static void sf_shard(const char *dir, const char *name, const char *const *names, int n) {
  static const float one = 1;
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  strbuf err = {0};
  st_writer *w = st_writer_new();
  for (int i = 0; i < n; i++)
    st_writer_add(w, names[i], ST_F32, 1, (const int64_t[]){1}, &one, &err);
  st_writer_write(w, path, &err);
  st_writer_free(w);
  strbuf_free(&err);
}

/* Write dir/model.safetensors.index.json with text 'json'. */
static void sf_index(const char *dir, const char *json) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, ST_INDEX_NAME);
  FILE *f = fopen(path, "w");
  fputs(json, f);
  fclose(f);
}

void test_safetensors_set(void) {
  char dbuf[64];
  const char *dir = sf_tmpdir(dbuf);
  strbuf err = {0};
  /* an empty directory, then a single model.safetensors */
  UNIT_CHECK(st_set_open(dir, &err) == NULL);
  UNIT_CHECK(strstr(strbuf_cstr(&err),
                    "a directory with neither model.safetensors.index.json nor model.safetensors"));
  sf_clear(&err);
  sf_shard(dir, "model.safetensors", (const char *[]){"w"}, 1);
  st_set *s = st_set_open(dir, &err);
  UNIT_CHECK(s && st_set_count(s) == 1 && st_set_files(s) == 1 && st_set_find(s, "w", NULL));
  st_set_close(s);
  /* two shards and their index: read as one, in shard order */
  sf_shard(dir, "model-00001-of-00002.safetensors", (const char *[]){"b", "a"}, 2);
  sf_shard(dir, "model-00002-of-00002.safetensors", (const char *[]){"c"}, 1);
  sf_index(dir,
           "{\"metadata\":{\"total_size\":12},\"weight_map\":{"
           "\"a\":\"model-00001-of-00002.safetensors\",\"c\":\"model-00002-of-00002.safetensors\","
           "\"b\":\"model-00001-of-00002.safetensors\"}}");
  s = st_set_open(dir, &err);
  UNIT_CHECK_STREQ(strbuf_cstr(&err), "");
  UNIT_CHECK(s && st_set_count(s) == 3 && st_set_files(s) == 2);
  if (s) {
    const st_file *f;
    UNIT_CHECK_STREQ(st_set_at(s, 0, NULL)->name, "a");
    UNIT_CHECK_STREQ(st_set_at(s, 2, &f)->name, "c");
    UNIT_CHECK(strstr(st_path(f), "/model-00002-of-00002.safetensors"));
    const st_tensor *t = st_set_find(s, "b", &f);
    float v = 0;
    UNIT_CHECK(t && st_read_f32(f, t, &v, 1, &err) && v == 1);
    UNIT_CHECK(st_set_find(s, "z", NULL) == NULL);
  }
  st_set_close(s);
  char ipath[512];
  snprintf(ipath, sizeof ipath, "%s/%s", dir, ST_INDEX_NAME);
  s = st_set_open(ipath, &err); /* the index file itself */
  UNIT_CHECK(s && st_set_count(s) == 3);
  st_set_close(s);
  char one[512];
  snprintf(one, sizeof one, "%s/model-00002-of-00002.safetensors", dir);
  s = st_set_open(one, &err); /* a shard alone */
  UNIT_CHECK(s && st_set_count(s) == 1);
  st_set_close(s);
  UNIT_CHECK_STREQ(strbuf_cstr(&err), "");
  /* the weight map against the shards */
  static const struct {
    const char *json;  /* the index */
    const char *error; /* part of the message */
  } bad[] = {
      {"[]", "model.safetensors.index.json: not a JSON object"},
      {"{\"metadata\":{}}", "no \"weight_map\" object"},
      {"{\"weight_map\":{},\"extra\":1}", "unexpected key 'extra'"},
      {"{\"weight_map\":{\"a\":\"../x.safetensors\"}}", "tensor 'a': its shard is not a file name"},
      {"{\"weight_map\":{\"a\":7}}", "tensor 'a': its shard is not a file name"},
      {"{\"weight_map\":{\"a\":\"missing.safetensors\"}}", "missing.safetensors: No such file"},
      {"{\"weight_map\":{\"a\":\"model-00001-of-00002.safetensors\",\"a\":\"model-00001-of-00002."
       "safetensors\"}}",
       "tensor 'a': given twice in the weight map"},
      {"{\"weight_map\":{\"a\":\"model-00002-of-00002.safetensors\",\"c\":\"model-00002-of-00002."
       "safetensors\"}}",
       "tensor 'a': the weight map puts it in 'model-00002-of-00002.safetensors', which does not "
       "hold it"},
      {"{\"weight_map\":{\"a\":\"model-00001-of-00002.safetensors\"}}",
       "model-00001-of-00002.safetensors: tensor 'b': not in the weight map of"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    sf_index(dir, bad[i].json);
    sf_clear(&err);
    s = st_set_open(dir, &err);
    UNIT_CHECK(s == NULL);
    st_set_close(s);
    if (!strstr(strbuf_cstr(&err), bad[i].error))
      unit_fail_str(__FILE__, __LINE__, "message", strbuf_cstr(&err), bad[i].error);
  }
  /* a tensor in two shards */
  sf_shard(dir, "model-00002-of-00002.safetensors", (const char *[]){"c", "a"}, 2);
  sf_index(dir, "{\"weight_map\":{\"a\":\"model-00001-of-00002.safetensors\",\"b\":\"model-00001-"
                "of-00002.safetensors\","
                "\"c\":\"model-00002-of-00002.safetensors\"}}");
  sf_clear(&err);
  UNIT_CHECK(st_set_open(dir, &err) == NULL);
  UNIT_CHECK(strstr(strbuf_cstr(&err),
                    "model-00002-of-00002.safetensors: tensor 'a': also in this shard, "
                    "but"));
  strbuf_free(&err);
  sf_rmdir(dir);
}
