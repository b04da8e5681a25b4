/* safetensors.h -- reading and writing safetensors files, Hugging Face's weight format: an 8-byte
 * little-endian header length N, N bytes of JSON header (an object: tensor name -> {"dtype",
 * "shape", "data_offsets": [begin, end)} relative to the data after the header, and an optional
 * "__metadata__" string-to-string map), then the tensors' raw little-endian bytes. A reader that
 * validates the whole header before any data is read, conversion of the float types to float32,
 * an atomic writer whose output is byte-for-byte the reference implementation's, and sharded
 * sets (a "model.safetensors.index.json" weight map). Needs support/ only. docs/checkpoints.md
 * describes the format as read and written here, the limits and the errors. */
#ifndef OCTO_SAFETENSORS_H
#define OCTO_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "support.h"

/* The longest header the reader accepts (the reference implementation's limit), in bytes. */
#define ST_MAX_HEADER_BYTES ((int64_t)100000000)
/* Shapes, element counts and offsets are below 2^53 (exact in a JSON number read as a double). */
#define ST_MAX_COUNT ((int64_t)1 << 53)
/* The file name a sharded set's index has in its directory. */
#define ST_INDEX_NAME "model.safetensors.index.json"
/* The file name of an unsharded checkpoint in its directory. */
#define ST_SINGLE_NAME "model.safetensors"

/* The element types (dtypes.def). */
typedef enum st_dtype {
#define ST_DTYPE(name, bytes, as_f32, write) ST_##name,
#include "dtypes.def"
#undef ST_DTYPE
  ST_DTYPE_COUNT
} st_dtype;

/* The header's spelling of dtype d ("BF16"). Pre: d < ST_DTYPE_COUNT. */
const char *st_dtype_name(st_dtype d);
/* Bytes of one element of d. */
int st_dtype_bytes(st_dtype d);
/* The dtype spelled 'name' (exactly, case included), or false. */
bool st_dtype_lookup(const char *name, st_dtype *out);

/* One tensor of a file, as its header describes it (validated by st_open). */
typedef struct st_tensor {
  const char *name;     /* its name (owned by the file; may be any UTF-8, even "") */
  st_dtype dtype;       /* element type */
  int rank;             /* number of dimensions (0: a scalar of one element) */
  const int64_t *shape; /* rank dimensions, outermost first (row-major); each below 2^53 */
  int64_t numel;        /* product of the dimensions (1 for a scalar; 0 if a dimension is 0) */
  int64_t begin;        /* first byte of its data, counted from the data after the header */
  int64_t end;          /* one past its last byte: end - begin == numel * st_dtype_bytes */
} st_tensor;

/* ---- Reading ----------------------------------------------------------------------------- */

/* An open safetensors file whose header was validated. */
typedef struct st_file st_file;

/* Open 'path' and validate its whole header: the header length (at most ST_MAX_HEADER_BYTES,
 * within the file), UTF-8 JSON that is one object and nothing but spaces after it, a
 * "__metadata__" of strings only, every tensor's dtype (a known name), shape (non-negative
 * integers) and data_offsets ([begin, end), end - begin == the shape's elements x the dtype's
 * size), no name twice, and offsets that, sorted, start at 0, follow one another with no gap
 * or overlap and end exactly where the file ends. No tensor data is read.
 * Returns the file, or NULL after appending one error to *err that names the file, the tensor
 * and the problem ("PATH: tensor 'x': ..."). Close with st_close. */
st_file *st_open(const char *path, strbuf *err);
void st_close(st_file *f);

/* The path the file was opened with. */
const char *st_path(const st_file *f);
/* Number of tensors. */
size_t st_count(const st_file *f);
/* Tensor i in file order (by data offset; tensors of no bytes at one offset in header order).
 * Pre: i < st_count(f). The pointer lives as long as the file. */
const st_tensor *st_at(const st_file *f, size_t i);
/* The tensor called 'name', or NULL (O(log n)). */
const st_tensor *st_find(const st_file *f, const char *name);
/* Number of "__metadata__" entries. */
size_t st_meta_count(const st_file *f);
/* Entry i of "__metadata__" in key order: its key, and its value in *value. Pre: i <
 * st_meta_count(f). */
const char *st_meta_at(const st_file *f, size_t i, const char **value);
/* The "__metadata__" value of 'key', or NULL. */
const char *st_meta(const st_file *f, const char *key);

/* Read tensor t of file f as float32 into out[0 .. n): F32 as stored, F16 and BF16 exactly, F64
 * rounded to the nearest float (NaN and infinities kept). Pre: t is st_at/st_find's of f, n ==
 * t->numel. Returns true, or false after appending the reason to *err: a dtype that is not a
 * float type, an F64 value outside float32's range, a read error or a file that shrank since
 * st_open (each naming the file and the tensor). */
bool st_read_f32(const st_file *f, const st_tensor *t, float *out, int64_t n, strbuf *err);
/* Read tensor t's raw bytes (little-endian, as stored) into out[0 .. len). Pre: len == t->end -
 * t->begin. Returns true, or false after appending the reason to *err. */
bool st_read_raw(const st_file *f, const st_tensor *t, void *out, int64_t len, strbuf *err);

/* Element conversions (exact where the target has the value; round to nearest even else). */
float st_f16_to_f32(uint16_t h);
float st_bf16_to_f32(uint16_t b);
/* float32 to bfloat16, rounded to nearest even; NaN becomes 0x7fc0 (as PyTorch does). */
uint16_t st_f32_to_bf16(float f);

/* ---- Writing ----------------------------------------------------------------------------- */

/* Collects named tensors and "__metadata__" entries, then writes them as one file. */
typedef struct st_writer st_writer;

st_writer *st_writer_new(void);
void st_writer_free(st_writer *w);
/* Add tensor 'name' of element type 'dtype' (ST_F32 or ST_BF16: written from float32 data,
 * BF16 rounded to nearest even), 'rank' dimensions shape[0 .. rank), whose numel float32
 * values in row-major order are at 'data'. The name and shape are copied; 'data' is borrowed
 * and must stay valid until st_writer_write returns (nothing is copied: a model's weights are
 * not doubled in memory). Returns true, or false after appending the reason to *err: a name
 * already added or "__metadata__", a dtype the writer does not produce, a negative dimension,
 * a count of 2^53 or more, NULL data for a tensor with elements. */
bool st_writer_add(st_writer *w, const char *name, st_dtype dtype, int rank,
                   const int64_t *shape, const float *data, strbuf *err);
/* Set "__metadata__" entry 'key' to 'value' (both copied; a key set twice keeps the last). */
void st_writer_meta(st_writer *w, const char *key, const char *value);
/* Write the file 'path': the header lists "__metadata__" (keys sorted) and then the tensors in
 * the order of their data, which is the reference writer's: by decreasing dtype alignment,
 * then by name (bytewise); the header is padded with spaces to a multiple of 8 bytes, so each
 * tensor's data is aligned. The bytes go to a temporary beside 'path' ("PATH.tmpPID.N"),
 * flushed to disk and renamed over 'path', so 'path' is at every moment either its old self or
 * the whole new file. Returns true, or false after appending the reason (naming the path) to
 * *err: the header over ST_MAX_HEADER_BYTES, 'path' existing but not a regular file, a system
 * error (the temporary is removed). The writer is unchanged and can write again. */
bool st_writer_write(const st_writer *w, const char *path, strbuf *err);

/* ---- Sharded sets ------------------------------------------------------------------------ */

/* Several files read as one: a checkpoint split into shards by an index, or one file. */
typedef struct st_set st_set;

/* Open 'path' as a set: a safetensors file (a set of one); an index file (JSON: "weight_map",
 * tensor name -> shard file name in the index's directory, and an optional "metadata"
 * object); or a directory holding ST_INDEX_NAME (used first) or ST_SINGLE_NAME. Each shard is
 * opened with st_open (its whole header validated) and must hold exactly the tensors the
 * weight map gives it; a shard name is a plain file name (no '/'). Returns the set, or NULL
 * after appending one error to *err naming the file (and the tensor) at fault. */
st_set *st_set_open(const char *path, strbuf *err);
void st_set_close(st_set *s);
/* Number of tensors in all shards. */
size_t st_set_count(const st_set *s);
/* Tensor i in the set's order (shards by file name, each in file order), and its file in
 * *file (when file is not NULL). Pre: i < st_set_count(s). */
const st_tensor *st_set_at(const st_set *s, size_t i, const st_file **file);
/* The tensor called 'name' and its file in *file, or NULL (O(log n)). */
const st_tensor *st_set_find(const st_set *s, const char *name, const st_file **file);
/* Number of shards, and shard i (in file name order). */
size_t st_set_files(const st_set *s);
const st_file *st_set_file(const st_set *s, size_t i);

#endif
