/* fuzz_octo.c -- libFuzzer harness of the front end: any bytes as a .octo spec (lexer, parser,
 * semantic analysis; imports are not followed from memory sources). */
#include <stdio.h>

#include "frontend.h"
#include "fuzz.h"
#include "ir.h"
#include "support.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  FILE *null = fopen("/dev/null", "w");
  diag_engine *d = diag_new(null);
  uint32_t src = diag_add_source(d, "fuzz.octo", (const char *)data, size, 1);
  fe_options o = {false};
  ir_module *m = fe_compile(d, src, &o);
  ir_module_free(m);
  diag_free(d);
  if (null) fclose(null);
  return 0;
}
