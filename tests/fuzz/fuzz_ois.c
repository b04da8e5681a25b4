/* fuzz_ois.c -- libFuzzer harness of the instruction-stream reader (be_read: decoding,
 * validation, deadlock check): any bytes as a .ois file. */
#include "stream.h"
#include "fuzz.h"
#include "support.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  strbuf err = {0};
  be_stream *s = be_read(data, size, &err);
  be_stream_free(s);
  strbuf_free(&err);
  return 0;
}
