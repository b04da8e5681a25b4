/* fuzz.h -- the entry point every harness of tests/fuzz defines: libFuzzer's, called with one
 * input. Built with -fsanitize=fuzzer when OCTO_FUZZ is on (clang), else linked with replay.c,
 * which calls it on files named on the command line (the seeds), so that every harness builds
 * and runs in every configuration. */
#ifndef OCTO_FUZZ_H
#define OCTO_FUZZ_H

#include <stddef.h>
#include <stdint.h>

/* Run one input through the reader; must not crash, hang or leak whatever the bytes. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
