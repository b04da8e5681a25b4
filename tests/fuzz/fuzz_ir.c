/* fuzz_ir.c -- libFuzzer harness of the textual IR reader and verifier: any bytes as IR. */
#include <stdio.h>

#include "fuzz.h"
#include "ir.h"
#include "support.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  FILE *null = fopen("/dev/null", "w");
  diag_engine *d = diag_new(null);
  uint32_t src = diag_add_source(d, "fuzz.oir", (const char *)data, size, 1);
  ir_module *m = ir_read(d, src);
  if (m) ir_verify(m, d, diag_mkloc(src, 0, 0, 0));
  ir_module_free(m);
  diag_free(d);
  if (null) fclose(null);
  return 0;
}
