/* replay.c -- runs a fuzz harness (fuzz.h) over the files named on the command line, for builds
 * without libFuzzer: "HARNESS FILE..." prints "N inputs" and exits 0 when none crashed. */
#include <stdio.h>
#include <stdlib.h>

#include "fuzz.h"

int main(int argc, char **argv) {
  int n = 0;
  for (int i = 1; i < argc; i++) {
    FILE *f = fopen(argv[i], "rb");
    if (!f) {
      fprintf(stderr, "replay: cannot open %s\n", argv[i]);
      return 2;
    }
    size_t cap = 1 << 16, len = 0, got;
    unsigned char *buf = malloc(cap);
    while (buf && (got = fread(buf + len, 1, cap - len, f)) > 0) {
      len += got;
      if (len == cap) buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    if (!buf) return 2;
    LLVMFuzzerTestOneInput(buf, len);
    free(buf);
    n++;
  }
  printf("%d inputs\n", n);
  return 0;
}
