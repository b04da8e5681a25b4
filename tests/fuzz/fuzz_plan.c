/* fuzz_plan.c -- libFuzzer harness of planning and lowering: any bytes as a .octo spec; a spec
 * that compiles (and is small enough to plan quickly) is costed, partitioned, placed and
 * scheduled with one of the classic pipelines (chosen by a hash of the input), lowered to
 * per-rank programs (be_lower), and the stream must then validate, pass the deadlock check and
 * survive the .ois format's round trip -- a failure of those is a bug, so the harness aborts. */
#include <stdio.h>
#include <stdlib.h>

#include "backend.h"
#include "frontend.h"
#include "fuzz.h"
#include "ir.h"
#include "passes.h"
#include "support.h"

/* Largest plans the harness lowers: more would make single inputs slow, not find more bugs. */
#define FUZZ_PLAN_MAX_LAYERS 64
#define FUZZ_PLAN_MAX_DEVICES 8
#define FUZZ_PLAN_MAX_MICROBATCHES 16

/* The pipelines tried, one per input. */
static const char *const fuzz_pipelines[] = {
    "cost,partition{method=uniform},place,schedule{method=1f1b}",
    "cost,partition{method=balanced},place,schedule{method=zb-h1}",
    "cost,partition{method=balanced, chunks=2},place{method=interleaved},"
    "schedule{method=interleaved-1f1b}",
    "cost,partition{method=balanced, chunks=2},place{method=vshape},schedule{method=zbv}",
    "cost,partition{method=balanced, chunks=2},place{method=interleaved},"
    "schedule{method=adaptive}",
};

/* Abort with a message: the lowering broke its postcondition. */
static void fuzz_plan_bug(const char *what, const strbuf *err) {
  fprintf(stderr, "fuzz_plan: %s: %s\n", what, strbuf_cstr(err));
  abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  FILE *null = fopen("/dev/null", "w");
  diag_engine *d = diag_new(null);
  uint32_t src = diag_add_source(d, "fuzz.octo", (const char *)data, size, 0);
  fe_options o = {false};
  ir_module *m = fe_compile(d, src, &o);
  double mb = m ? ir_field_value(&m->train, IR_F_TRAIN_microbatches) : 0;
  if (m && m->nlayers <= FUZZ_PLAN_MAX_LAYERS && m->ndevices <= FUZZ_PLAN_MAX_DEVICES &&
      mb <= FUZZ_PLAN_MAX_MICROBATCHES) {
    uint32_t h = 2166136261u; /* FNV-1a of the input picks the pipeline */
    for (size_t i = 0; i < size; i++) h = (h ^ data[i]) * 16777619u;
    const char *pipeline = fuzz_pipelines[h % (sizeof fuzz_pipelines / sizeof *fuzz_pipelines)];
    if (pass_run_text(m, pipeline, d) == PASS_OK) {
      be_stream *s = be_lower(m, d, diag_mkloc(0, 0, 0, 0));
      if (s) {
        strbuf err = {0}, bytes = {0};
        if (be_validate(s, &err) != 0) fuzz_plan_bug("lowered stream does not validate", &err);
        if (be_check(s, &err) != 0) fuzz_plan_bug("lowered stream deadlocks", &err);
        be_write(s, &bytes);
        be_stream *back = be_read((const uint8_t *)bytes.data, bytes.len, &err);
        if (!back) fuzz_plan_bug("lowered stream does not read back", &err);
        be_stream_free(back);
        strbuf_free(&bytes);
        strbuf_free(&err);
        be_stream_free(s);
      }
    }
  }
  ir_module_free(m);
  diag_free(d);
  if (null) fclose(null);
  return 0;
}
