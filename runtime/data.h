/* data.h -- what the runtime's model (model.c) and the kernels' initialization share: the
 * splitmix64 generator behind every deterministic initialization and synthetic datum, the
 * data file, the synthetic token chain's successor table, the check of a stream's partition and
 * the relative difference of two tensors that --check reports. Internal to runtime/. */
#ifndef OCTO_RT_DATA_H
#define OCTO_RT_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stream.h"
#include "support.h"

/* splitmix64's finalizer: a bijective mix of z. */
uint64_t rt_mix64(uint64_t z);
/* The next draw of the splitmix64 generator with state *st. */
uint64_t rt_next64(uint64_t *st);

/* Read the data file at path into *bytes (xmalloc'd) and *len (> 0). Returns false with
 * "PATH: reason" appended to err (when set): unreadable, larger than SUPPORT_MAX_FILE_BYTES,
 * or an empty data file. */
bool rt_data_read(const char *path, unsigned char **bytes, size_t *len, strbuf *err);
/* A Fisher-Yates permutation of [0, V) from the seed (xmalloc'd): the synthetic data's
 * successor table. */
int *rt_data_perm(int V, uint64_t seed);

/* Check the stream's counts and that its stages continue the partition of its layers; false
 * with the reason appended to err (when set). */
bool rt_stream_check(const be_stream *s, strbuf *err);

/* max|a - b| / max|b| over n floats (max|a - b| when b is all zero; NaN wins). */
double rt_tensor_diff(const float *a, const float *b, size_t n);

#endif
