/* driver.c -- what octo-opt does once its command line is parsed: read textual IR (whole, or
 * chunk by chunk with --split-input-file), verify it, run a pass pipeline, print the result, and
 * check expected diagnostics with --verify-diagnostics. The tool only maps the result to an exit
 * code. */
#include <stdlib.h>
#include <string.h>

#include "passes.h"

/* Worse of two statuses (OK < FAILED < INTERNAL). */
static pass_status worst(pass_status a, pass_status b) { return a > b ? a : b; }

/* Read, verify, transform and print the module of source 'src' (or hand it to cfg->emit). Pre:
 * pl parsed without error. Appends the output to 'out' on success (unless verify-diagnostics
 * mode). */
static pass_status process_module(const pass_opt_config *cfg, const pass_pipeline *pl,
                                  uint32_t src, diag_engine *d, strbuf *out) {
  int errors = diag_error_count(d);
  ir_module *m = ir_read(d, src);
  if (!m || diag_error_count(d) > errors) {
    ir_module_free(m);
    return PASS_FAILED;
  }
  const diag_source *s = diag_get_source(d, src);
  diag_loc start = diag_mkloc(src, s->line_base + 1, 1, 0);
  if (!cfg->no_verify && ir_verify(m, d, start) > 0) {
    ir_module_free(m);
    return PASS_FAILED;
  }
  pass_results res = {0};
  pass_manager_opts pm = cfg->pm;
  pm.results = &res;
  pass_status st = pass_pipeline_run(pl, m, &pm, d);
  if (st == PASS_OK && cfg->emit) {
    strbuf text = {0};
    diag_loc where = m->loc.src == src ? ir_diag_loc(m->loc) : start;
    if (cfg->emit(cfg->emit_ctx, m, &res, d, where, &text) != 0)
      st = PASS_FAILED;
    else if (!cfg->verify_diagnostics)
      strbuf_append(out, strbuf_cstr(&text), text.len);
    strbuf_free(&text);
  } else if (st == PASS_OK && !cfg->verify_diagnostics) {
    ir_print_opts po = {cfg->pm.print_debuginfo};
    ir_print(m, out, &po);
  }
  pass_results_free(&res);
  ir_module_free(m);
  return st;
}

pass_opt_result pass_opt_process(const pass_opt_config *cfg, diag_engine *d, strbuf *out) {
  pass_opt_result r = {PASS_OK, 0, 0};
  pass_pipeline pl = {0};
  uint32_t *ids = NULL;
  if (cfg->verify_diagnostics) diag_set_verify(d, true);
  if (cfg->passes && pass_pipeline_parse(&pl, cfg->passes, d) != 0) {
    r.status = PASS_FAILED;
    goto finish;
  }
  if (cfg->dump_pipeline) {
    strbuf sb = {0};
    pass_pipeline_print(&pl, &sb);
    fprintf(cfg->dump_pipeline, "pipeline: %s\n", strbuf_cstr(&sb));
    strbuf_free(&sb);
  }
  uint32_t file = diag_load_file(d, cfg->input ? cfg->input : "-", diag_mkloc(0, 0, 0, 0));
  if (!file) {
    r.status = PASS_FAILED;
    goto finish;
  }
  int n = 1;
  if (cfg->split_input_file) {
    n = diag_split_source(d, file, &ids);
  } else {
    ids = xmalloc(sizeof *ids);
    ids[0] = file;
  }
  for (int i = 0; i < n && !diag_limit_reached(d); i++) {
    if (i && !cfg->verify_diagnostics) strbuf_puts(out, "# -----\n");
    pass_status st = process_module(cfg, &pl, ids[i], d, out);
    r.chunks++;
    r.chunks_ok += st == PASS_OK;
    r.status = worst(r.status, st);
  }
finish:
  if (cfg->verify_diagnostics) {
    int mismatches = diag_verify_finish(d);
    diag_set_verify(d, false);
    /* the diagnostics were the expected outcome: only mismatches (and broken passes) count */
    r.status = r.status == PASS_INTERNAL ? PASS_INTERNAL : mismatches ? PASS_FAILED : PASS_OK;
  }
  free(ids);
  pass_pipeline_free(&pl);
  return r;
}
