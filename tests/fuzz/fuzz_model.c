/* fuzz_model.c -- libFuzzer harness of the runtime's set-up from a stream: any bytes as a .ois
 * file whose CRC-32 trailer is made to match them first, so that mutations reach past the
 * checksum into the validator (be_read) and, for a stream it accepts, into model building
 * (rt_model_new at the automatic scale) and every rank's memory figures (rt_rank_memory). */
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "fuzz.h"
#include "runtime.h"
#include "stream.h"
#include "support.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t *copy = malloc(size ? size : 1);
  if (size) memcpy(copy, data, size);
  if (size >= 16) {
    uint32_t c = (uint32_t)crc32(crc32(0L, Z_NULL, 0), copy, (uInt)(size - 4));
    for (int i = 0; i < 4; i++) copy[size - 4 + i] = (uint8_t)(c >> (8 * i));
  }
  strbuf err = {0};
  be_stream *s = be_read(copy, size, &err);
  if (s) {
    rt_opts o = {.scale = 0, .seed = 1, .lr = 1e-3};
    rt_model *m = rt_model_new(s, &o, &err);
    for (int r = 0; m && r < s->nranks; r++) {
      rt_mem_need need;
      rt_rank_memory(m, s, r, true, &need);
    }
    rt_model_free(m);
  }
  be_stream_free(s);
  strbuf_free(&err);
  free(copy);
  return 0;
}
