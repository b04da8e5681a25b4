/* fuzz_import.c -- libFuzzer harness of the Hugging Face import (hf_import_source): any bytes as
 * a config.json, imported to spec text (JSON parse, key scan, every family's checks, writing). */
#include <stdio.h>

#include "fuzz.h"
#include "import.h"
#include "support.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  FILE *null = fopen("/dev/null", "w");
  diag_engine *d = diag_new(null);
  uint32_t src = diag_add_source(d, "config.json", (const char *)data, size, 0);
  hf_options o = {NULL, 0, NULL, NULL};
  strbuf spec = {0};
  hf_import_source(d, src, &o, &spec);
  strbuf_free(&spec);
  diag_free(d);
  if (null) fclose(null);
  return 0;
}
