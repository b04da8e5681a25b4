/* test_report.c -- unit tests of the report library on a hand-built module and a hand-built
 * simulation result (2 devices, 2 stages, one microbatch, one transfer each way): the JSON
 * report parses back with the documented keys and values, the trace is valid JSON with the
 * process names, operation events, a flow pair per transfer and memory counters, the SVG has its
 * rows, legend and caption with escaped text, and the text report states the verdicts. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "report.h"
#include "unit.h"

/* ---- Fixture ------------------------------------------------------------------------------- */

static const double MiB = 1048576.0, GiB = 1073741824.0;

/* A module with two custom layers ("l0", "l1"), one stage each on $d0 and $d1 (h100, node 0 and
 * 1), one microbatch, a 1F1B-like schedule (F, B, W per stage), a 1 GiB memory limit. */
static ir_module *fixture_module(const char *name) {
  ir_module *m = ir_module_new(name);
  ir_field_set(&m->train, IR_F_TRAIN_pipeline, 2);
  ir_field_set(&m->train, IR_F_TRAIN_tensor, 1);
  ir_field_set(&m->train, IR_F_TRAIN_data, 1);
  ir_field_set(&m->train, IR_F_TRAIN_micro_batch, 1);
  ir_field_set(&m->train, IR_F_TRAIN_microbatches, 1);
  ir_field_set(&m->train, IR_F_TRAIN_mem_limit, GiB);
  for (int i = 0; i < 2; i++) {
    ir_device *dv = ir_module_add_device(m, "h100");
    ir_field_set(&dv->rec, IR_F_DEVICE_peak, 989e12);
    ir_field_set(&dv->rec, IR_F_DEVICE_mem, 80 * GiB);
    ir_field_set(&dv->rec, IR_F_DEVICE_hbm, 3.35e12);
    ir_field_set(&dv->rec, IR_F_DEVICE_efficiency, 0.5);
    ir_field_set(&dv->rec, IR_F_DEVICE_node, i);
  }
  for (int i = 0; i < 2; i++) {
    ir_layer *l = ir_module_add_layer(m, i ? "l1" : "l0", IR_KIND_CUSTOM);
    static const char *const params[] = {"f", "b", "w", "act", "out", "params"};
    static const double values[] = {1e-3, 1e-3, 1e-3, 64 * 1048576.0, 4 * 1048576.0, 0};
    for (int p = 0; p < 6; p++) l->p[ir_param_lookup(IR_KIND_CUSTOM, params[p])] = values[p];
    ir_field_set(&l->cost, IR_F_COST_f, 1e-3);
    ir_field_set(&l->cost, IR_F_COST_b, 1e-3);
    ir_field_set(&l->cost, IR_F_COST_w, 1e-3);
    ir_field_set(&l->cost, IR_F_COST_act, 64 * MiB);
    ir_field_set(&l->cost, IR_F_COST_act_w, 0);
    ir_field_set(&l->cost, IR_F_COST_out, 4 * MiB);
    ir_field_set(&l->cost, IR_F_COST_param, 128 * MiB);
    ir_field_set(&l->cost, IR_F_COST_grad, 0);
  }
  for (int s = 0; s < 2; s++) ir_module_add_stage(m, s, s + 1)->device = s;
  ir_module_init_schedules(m);
  for (int d = 0; d < 2; d++) {
    ir_schedule_push(&m->schedules[d], IR_OP_F, d, 0);
    ir_schedule_push(&m->schedules[d], IR_OP_B, d, 0);
    ir_schedule_push(&m->schedules[d], IR_OP_W, d, 0);
  }
  return m;
}

/* Storage of the hand-built timeline (sim_result points into it). */
typedef struct fixture_run {
  sim_result r;
  sim_device_stats dev[2];
  sim_op_event ops[6];
  sim_transfer xfers[2];
} fixture_run;

/* The timeline of fixture_module: $d0 runs F [0, 1] ms, B [4, 5], W [5, 6]; $d1 runs F [1.5,
 * 2.5], B [2.5, 3.5], W [3.5, 4.5]; the activation goes $d0 -> $d1 over [1, 1.5], the gradient
 * back over [3.5, 4]. Static memory 128 MiB, peak 192 MiB on each device, unless 'oom': then
 * $d1's F allocates 1.5 GiB, over the 1 GiB limit. */
static void fixture_timeline(fixture_run *f, bool oom) {
  memset(f, 0, sizeof *f);
  sim_result *r = &f->r;
  r->status = SIM_OK;
  r->makespan = 6e-3;
  r->ndevices = 2;
  r->dev = f->dev;
  r->ops = f->ops;
  r->xfers = f->xfers;
  static const struct {
    ir_op_kind k;
    int dev;
    double start, end;
  } ops[6] = {{IR_OP_F, 0, 0, 1},     {IR_OP_F, 1, 1.5, 2.5}, {IR_OP_B, 1, 2.5, 3.5},
              {IR_OP_W, 1, 3.5, 4.5}, {IR_OP_B, 0, 4, 5},     {IR_OP_W, 0, 5, 6}};
  for (int i = 0; i < 6; i++) {
    sim_op_event *e = &f->ops[r->nops++];
    e->kind = ops[i].k;
    e->device = ops[i].dev;
    e->stage = ops[i].dev;
    e->mb = 0;
    e->start = ops[i].start * 1e-3;
    e->end = ops[i].end * 1e-3;
    e->mem = ops[i].k == IR_OP_F ? 192 * MiB : ops[i].k == IR_OP_B ? 160 * MiB : 128 * MiB;
    /* after the allocation at its start: no stage rebuilds state, so a B starts where F left */
    e->mem_start = ops[i].k == IR_OP_W ? 160 * MiB : 192 * MiB;
  }
  if (oom) f->ops[1].mem = f->ops[1].mem_start = 1.5 * GiB;
  for (int d = 0; d < 2; d++) {
    sim_device_stats *ds = &f->dev[d];
    ds->busy = 3e-3;
    ds->idle = 3e-3;
    ds->end = d ? 4.5e-3 : 6e-3;
    ds->static_mem = 128 * MiB;
    ds->peak_mem = d && oom ? 1.5 * GiB : 192 * MiB;
    ds->mem_limit = GiB;
    ds->peak_op = 0;
    ds->peak_time = d ? 1.5e-3 : 0;
  }
  r->bubble = 0.5;
  r->peak_mem = oom ? 1.5 * GiB : 192 * MiB;
  r->fits = !oom;
  r->oom_device = oom ? 1 : -1;
  r->lb_work = 3e-3;
  r->lb_critical = 5e-3;
  sim_transfer *x = &f->xfers[r->nxfers++];
  *x = (sim_transfer){IR_OP_F, 0, 1, 0, 1, 0, 4 * MiB, 1e-3, 1e-3, 1.5e-3};
  x = &f->xfers[r->nxfers++];
  *x = (sim_transfer){IR_OP_B, 1, 0, 1, 0, 0, 4 * MiB, 3.5e-3, 3.5e-3, 4e-3};
}

/* Number member 'key' of object o, NAN when absent or not a number. */
static double json_num(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* String member 'key' of object o, NULL when absent or not a string. */
static const char *json_str(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Whether member 'key' of o is JSON null. */
static bool json_is_null(const cJSON *o, const char *key) {
  return cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(o, key));
}

/* ---- JSON report --------------------------------------------------------------------------- */

void test_report_json(void) {
  ir_module *m = fixture_module("tiny \"q\"");
  fixture_run f;
  fixture_timeline(&f, false);
  strbuf sb = {0};
  report_json(m, &f.r, NULL, &sb);
  cJSON *j = cJSON_Parse(strbuf_cstr(&sb));
  UNIT_CHECK(j != NULL);
  if (j) {
    UNIT_CHECK_STREQ(json_str(j, "model"), "tiny \"q\"");
    UNIT_CHECK_EQ_DBL(json_num(j, "devices"), 2);
    UNIT_CHECK_EQ_DBL(json_num(j, "microbatches"), 1);
    UNIT_CHECK_EQ_DBL(json_num(j, "makespan_ms"), 6);
    UNIT_CHECK_EQ_DBL(json_num(j, "bubble_ratio"), 0.5);
    UNIT_CHECK_EQ_DBL(json_num(j, "lower_bound_ms"), 5);
    UNIT_CHECK_EQ_DBL(json_num(j, "lower_bound_work_ms"), 3);
    UNIT_CHECK_EQ_DBL(json_num(j, "lower_bound_critical_ms"), 5);
    UNIT_CHECK_EQ_DBL(json_num(j, "peak_mem_bytes"), 192 * MiB);
    UNIT_CHECK_EQ_DBL(json_num(j, "mem_limit_bytes"), GiB);
    UNIT_CHECK(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(j, "oom")));
    UNIT_CHECK(json_is_null(j, "oom_at"));
    UNIT_CHECK_STREQ(json_str(j, "schedule_method"), "given");
    const cJSON *pd = cJSON_GetObjectItemCaseSensitive(j, "per_device");
    UNIT_CHECK(cJSON_GetArraySize(pd) == 2);
    const cJSON *d1 = cJSON_GetArrayItem(pd, 1);
    UNIT_CHECK_EQ_DBL(json_num(d1, "device"), 1);
    UNIT_CHECK_EQ_DBL(json_num(d1, "busy_ms"), 3);
    UNIT_CHECK_EQ_DBL(json_num(d1, "idle_ms"), 3);
    UNIT_CHECK_EQ_DBL(json_num(d1, "peak_mem_bytes"), 192 * MiB);
    UNIT_CHECK_EQ_DBL(json_num(d1, "mem_limit_bytes"), GiB);
    UNIT_CHECK(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(d1, "oom")));
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(j, "stages");
    UNIT_CHECK(cJSON_GetArraySize(st) == 2);
    const cJSON *s1 = cJSON_GetArrayItem(st, 1);
    UNIT_CHECK_EQ_DBL(json_num(s1, "stage"), 1);
    UNIT_CHECK_EQ_DBL(json_num(s1, "first"), 1);
    UNIT_CHECK_EQ_DBL(json_num(s1, "end"), 2);
    UNIT_CHECK_STREQ(json_str(s1, "first_layer"), "l1");
    UNIT_CHECK_STREQ(json_str(s1, "last_layer"), "l1");
    UNIT_CHECK_EQ_DBL(json_num(s1, "device"), 1);
    const cJSON *kinds = cJSON_GetObjectItemCaseSensitive(j, "layer_kinds");
    UNIT_CHECK(cJSON_GetArraySize(kinds) == 1);
    UNIT_CHECK_STREQ(json_str(cJSON_GetArrayItem(kinds, 0), "kind"), "custom");
    UNIT_CHECK_EQ_DBL(json_num(cJSON_GetArrayItem(kinds, 0), "count"), 2);
  }
  cJSON_Delete(j);

  /* the keys come in the documented order */
  const char *order[] = {"\"model\"", "\"layers\"", "\"devices\"", "\"microbatches\"",
                         "\"data\"", "\"recompute\"", "\"mem_limit_bytes\"", "\"layer_kinds\"", "\"schedule_method\"",
                         "\"stages\"", "\"makespan_ms\"", "\"bubble_ratio\"",
                         "\"lower_bound_ms\"", "\"lower_bound_work_ms\"",
                         "\"lower_bound_critical_ms\"", "\"peak_mem_bytes\"", "\"oom\"",
                         "\"oom_at\"", "\"per_device\""};
  const char *at = strbuf_cstr(&sb);
  for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
    const char *p = strstr(at, order[i]);
    UNIT_CHECK(p != NULL);
    if (p) at = p;
  }

  /* deterministic: the same input gives the same text */
  strbuf again = {0};
  report_json(m, &f.r, NULL, &again);
  UNIT_CHECK_STREQ(strbuf_cstr(&sb), strbuf_cstr(&again));
  strbuf_free(&again);
  strbuf_free(&sb);

  /* out of memory: where it first happened */
  fixture_timeline(&f, true);
  report_json(m, &f.r, NULL, &sb);
  j = cJSON_Parse(strbuf_cstr(&sb));
  UNIT_CHECK(j != NULL);
  if (j) {
    UNIT_CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "oom")));
    const cJSON *at_ = cJSON_GetObjectItemCaseSensitive(j, "oom_at");
    UNIT_CHECK_EQ_DBL(json_num(at_, "device"), 1);
    UNIT_CHECK_STREQ(json_str(at_, "op"), "F");
    UNIT_CHECK_EQ_DBL(json_num(at_, "time_ms"), 1.5);
    const cJSON *d1 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "per_device"), 1);
    UNIT_CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(d1, "oom")));
  }
  cJSON_Delete(j);
  strbuf_free(&sb);

  /* without a plan: the plan keys are null or empty */
  ir_module_clear_plan(m);
  report_json(m, NULL, NULL, &sb);
  j = cJSON_Parse(strbuf_cstr(&sb));
  UNIT_CHECK(j != NULL);
  if (j) {
    UNIT_CHECK(json_is_null(j, "makespan_ms"));
    UNIT_CHECK(json_is_null(j, "bubble_ratio"));
    UNIT_CHECK(json_is_null(j, "lower_bound_ms"));
    UNIT_CHECK(json_is_null(j, "oom"));
    UNIT_CHECK(json_is_null(j, "schedule_method"));
    UNIT_CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "stages")) == 0);
    UNIT_CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "per_device")) == 0);
    UNIT_CHECK_EQ_DBL(json_num(j, "devices"), 2);
  }
  cJSON_Delete(j);
  strbuf_free(&sb);
  ir_module_free(m);
}

/* ---- Trace --------------------------------------------------------------------------------- */

/* The event of 'events' with phase ph and name 'name' (and pid when >= 0), or NULL. */
static const cJSON *find_event(const cJSON *events, const char *ph, const char *name, int pid) {
  const cJSON *e;
  cJSON_ArrayForEach(e, events) {
    const char *p = json_str(e, "ph"), *n = json_str(e, "name");
    if (p && n && strcmp(p, ph) == 0 && strcmp(n, name) == 0 &&
        (pid < 0 || json_num(e, "pid") == pid))
      return e;
  }
  return NULL;
}

void test_report_trace(void) {
  ir_module *m = fixture_module("tiny");
  fixture_run f;
  fixture_timeline(&f, false);
  strbuf sb = {0};
  report_trace(m, &f.r, &sb);
  cJSON *j = cJSON_Parse(strbuf_cstr(&sb));
  UNIT_CHECK(j != NULL);
  if (j) {
    UNIT_CHECK_STREQ(json_str(j, "displayTimeUnit"), "ms");
    const cJSON *ev = cJSON_GetObjectItemCaseSensitive(j, "traceEvents");
    UNIT_CHECK(cJSON_IsArray(ev));
    /* processes (pid device + 1) and threads (tid pid * 10 + thread: never 0 or a pid) */
    const cJSON *pn = find_event(ev, "M", "process_name", 2);
    UNIT_CHECK(pn != NULL);
    if (pn)
      UNIT_CHECK_STREQ(json_str(cJSON_GetObjectItemCaseSensitive(pn, "args"), "name"),
                       "$d1 h100 (node 1)");
    int threads = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, ev) {
      const char *n = json_str(e, "name");
      if (n && strcmp(n, "thread_name") == 0) threads++;
    }
    UNIT_CHECK(threads == 8); /* compute, send, recv, data-parallel on each device */
    /* an operation with real microsecond times and its arguments */
    const cJSON *fw = find_event(ev, "X", "F s1 mb0", 2);
    UNIT_CHECK(fw != NULL);
    if (fw) {
      UNIT_CHECK_EQ_DBL(json_num(fw, "ts"), 1500);
      UNIT_CHECK_EQ_DBL(json_num(fw, "dur"), 1000);
      UNIT_CHECK_EQ_DBL(json_num(fw, "tid"), 20);
      UNIT_CHECK_STREQ(json_str(fw, "cat"), "F");
      const cJSON *args = cJSON_GetObjectItemCaseSensitive(fw, "args");
      UNIT_CHECK_EQ_DBL(json_num(args, "stage"), 1);
      UNIT_CHECK_EQ_DBL(json_num(args, "mb"), 0);
      UNIT_CHECK_STREQ(json_str(args, "layers"), "[%1, %2)");
    }
    UNIT_CHECK(find_event(ev, "X", "W s0 mb0", 1) != NULL);
    /* each transfer on both ends, with a flow pair of the same id */
    const cJSON *send = find_event(ev, "X", "act s0->s1 mb0", 1);
    const cJSON *recv = find_event(ev, "X", "act s0->s1 mb0", 2);
    UNIT_CHECK(send && recv);
    if (send && recv) {
      UNIT_CHECK_EQ_DBL(json_num(send, "tid"), 11);
      UNIT_CHECK_EQ_DBL(json_num(recv, "tid"), 22);
      UNIT_CHECK_EQ_DBL(json_num(send, "ts"), 1000);
      UNIT_CHECK_EQ_DBL(json_num(send, "dur"), 500);
      UNIT_CHECK_EQ_DBL(json_num(cJSON_GetObjectItemCaseSensitive(send, "args"), "bytes"),
                        4 * MiB);
    }
    const cJSON *fs = find_event(ev, "s", "grad s1->s0 mb0", 2);
    const cJSON *ff = find_event(ev, "f", "grad s1->s0 mb0", 1);
    UNIT_CHECK(fs && ff);
    if (fs && ff) {
      UNIT_CHECK_EQ_DBL(json_num(fs, "id"), json_num(ff, "id"));
      UNIT_CHECK_STREQ(json_str(ff, "bp"), "e");
      UNIT_CHECK_EQ_DBL(json_num(fs, "tid"), 21);
      UNIT_CHECK_EQ_DBL(json_num(ff, "tid"), 12);
    }
    /* memory counters: static memory at 0, then each change, per device */
    int counters = 0;
    double last_gib = NAN;
    cJSON_ArrayForEach(e, ev) {
      const char *p = json_str(e, "ph");
      if (p && strcmp(p, "C") == 0 && json_num(e, "pid") == 1) {
        counters++;
        last_gib = json_num(cJSON_GetObjectItemCaseSensitive(e, "args"), "GiB");
        if (counters == 1) UNIT_CHECK_EQ_DBL(json_num(e, "ts"), 0);
      }
    }
    UNIT_CHECK(counters == 4); /* 128 MiB, F 192, B 160, W 128 */
    UNIT_CHECK_EQ_DBL(last_gib, 0.125);
  }
  cJSON_Delete(j);
  strbuf_free(&sb);
  ir_module_free(m);
}

/* ---- SVG and text --------------------------------------------------------------------------- */

void test_report_svg(void) {
  ir_module *m = fixture_module("a&b<c>");
  fixture_run f;
  fixture_timeline(&f, true);
  strbuf sb = {0};
  report_svg(m, &f.r, &sb);
  const char *s = strbuf_cstr(&sb);
  UNIT_CHECK(strncmp(s, "<?xml", 5) == 0);
  UNIT_CHECK(strstr(s, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"1600\"") != NULL);
  UNIT_CHECK(strstr(s, "</svg>\n") != NULL);
  UNIT_CHECK(strstr(s, "a&amp;b&lt;c&gt;: makespan 6.000 ms, bubble ratio 50.0%") != NULL);
  UNIT_CHECK(strstr(s, "a&b") == NULL);
  UNIT_CHECK(strstr(s, ">$d0</text>") != NULL);
  UNIT_CHECK(strstr(s, ">$d1</text>") != NULL);
  UNIT_CHECK(strstr(s, "<g id=\"legend\"") != NULL);
  UNIT_CHECK(strstr(s, "F forward") != NULL);
  UNIT_CHECK(strstr(s, "gradient transfer") != NULL);
  UNIT_CHECK(strstr(s, "peak 1.50 GiB / 1.00 GiB OOM") != NULL);
  UNIT_CHECK(strstr(s, "marker-end=\"url(#arrow-act)\"><title>act s0-&gt;s1 mb0") != NULL);
  strbuf_free(&sb);
  ir_module_free(m);
}

/* The HTML page: self-contained, the model name escaped in the text and in the embedded JSON
 * (no "</script" but the page's own), the data parsing back with every operation. */
void test_report_html(void) {
  ir_module *m = fixture_module("a</script><!--b&");
  fixture_run f;
  fixture_timeline(&f, true);
  strbuf sb = {0};
  report_html(m, &f.r, NULL, &sb);
  const char *s = strbuf_cstr(&sb);
  UNIT_CHECK(strncmp(s, "<!DOCTYPE html>", 15) == 0);
  UNIT_CHECK(strstr(s, "http://") == NULL && strstr(s, "https://") == NULL);
  UNIT_CHECK(strstr(s, "src=") == NULL);
  UNIT_CHECK(strstr(s, "<title>a&lt;/script&gt;&lt;!--b&amp; -- OctoPipe plan</title>") != NULL);
  int closes = 0;
  for (const char *p = strstr(s, "</script"); p; p = strstr(p + 1, "</script")) closes++;
  UNIT_CHECK(closes == 2); /* the data element's and the script's */
  UNIT_CHECK(strstr(s, "<!--") == NULL);
  const char *open = "<script type=\"application/json\" id=\"octo-data\">";
  const char *b = strstr(s, open);
  UNIT_CHECK(b != NULL);
  if (b) {
    b += strlen(open);
    const char *e = strstr(b, "</script>");
    UNIT_CHECK(e != NULL);
    char *text = xmalloc((size_t)(e - b) + 1);
    memcpy(text, b, (size_t)(e - b));
    text[e - b] = 0;
    cJSON *j = cJSON_Parse(text);
    UNIT_CHECK(j != NULL);
    cJSON *rep = cJSON_GetObjectItem(j, "report"), *tl = cJSON_GetObjectItem(j, "timeline");
    UNIT_CHECK(rep && tl);
    if (rep && tl) {
      UNIT_CHECK_STREQ(cJSON_GetStringValue(cJSON_GetObjectItem(rep, "model")),
                       "a</script><!--b&");
      /* per device columns: their lengths add up to the operations and the transfers */
      int nops = 0, nxfers = 0;
      cJSON *dev;
      cJSON_ArrayForEach(dev, cJSON_GetObjectItem(tl, "ops"))
        nops += cJSON_GetArraySize(cJSON_GetObjectItem(dev, "shape"));
      cJSON_ArrayForEach(dev, cJSON_GetObjectItem(tl, "xfers"))
        nxfers += cJSON_GetArraySize(cJSON_GetObjectItem(dev, "shape"));
      UNIT_CHECK(nops == f.r.nops);
      UNIT_CHECK(nxfers == f.r.nxfers);
    }
    cJSON_Delete(j);
    free(text);
  }
  strbuf_free(&sb);
  /* the escaping alone: every '<', nothing else */
  strbuf esc = {0};
  const char *js = "{\"k\": \"</script>x<y\"}";
  report_html_script_json(&esc, js, strlen(js));
  UNIT_CHECK_STREQ(strbuf_cstr(&esc), "{\"k\": \"\\u003c/script>x\\u003cy\"}");
  strbuf_free(&esc);
  ir_module_free(m);
}

void test_report_text(void) {
  ir_module *m = fixture_module("tiny");
  fixture_run f;
  fixture_timeline(&f, false);
  strbuf sb = {0};
  report_text(m, &f.r, NULL, &sb);
  const char *s = strbuf_cstr(&sb);
  UNIT_CHECK(strstr(s, "model tiny: 2 layers (2 custom)\n") != NULL);
  UNIT_CHECK(strstr(s, "  custom       2  1.000  1.000  1.000  64.00 MiB  128.00 MiB\n") != NULL);
  UNIT_CHECK(strstr(s, "  @s1    [%1, %2)  l1     l1    $d1") != NULL);
  UNIT_CHECK(strstr(s, "step: makespan 6.000 ms, bubble ratio 50.0%") != NULL);
  UNIT_CHECK(strstr(s, "lower bound 5.000 ms (work 3.000 ms, critical path 5.000 ms): 83.3% of "
                       "the makespan (makespan is 1.20x the bound)\n") != NULL);
  UNIT_CHECK(strstr(s, "memory: fits; highest use 192.00 MiB on $d0 of 1.00 GiB (18.8%)\n") !=
             NULL);
  strbuf_free(&sb);
  fixture_timeline(&f, true);
  report_text(m, &f.r, NULL, &sb);
  s = strbuf_cstr(&sb);
  UNIT_CHECK(strstr(s, "memory: OOM: $d1 first exceeds its limit 1.00 GiB with 1.50 GiB at "
                       "F @s1 0, t = 1.500 ms") != NULL);
  UNIT_CHECK(strstr(s, "OOM\n") != NULL);
  strbuf_free(&sb);
  ir_module_clear_plan(m);
  report_text(m, NULL, NULL, &sb);
  UNIT_CHECK(strstr(strbuf_cstr(&sb), "plan: none yet") != NULL);
  strbuf_free(&sb);
  ir_module_free(m);
}

/* ---- report_emit -------------------------------------------------------------------------- */

void test_report_emit(void) {
  const char *show = getenv("REPORT_TEST_DIAGS"); /* set to see the diagnostics */
  FILE *sink = show && *show ? stderr : fopen("/dev/null", "w");
  UNIT_CHECK(sink != NULL);
  diag_engine *d = diag_new(sink);
  ir_module *m = fixture_module("tiny");
  ir_field_set(&m->intra, IR_F_LINK_bw, 100e9);
  ir_field_set(&m->intra, IR_F_LINK_lat, 0);
  ir_field_set(&m->cluster, IR_F_CLUSTER_nodes, 1);
  ir_field_set(&m->cluster, IR_F_CLUSTER_gpus_per_node, 2);
  ir_field_set(&m->devices[1].rec, IR_F_DEVICE_node, 0);
  m->cluster_name = arena_strdup(&m->arena, "c");
  UNIT_CHECK(ir_verify(m, d, diag_mkloc(0, 0, 0, 0)) == 0);

  /* every kind of output simulates the plan; the JSON figures are the simulator's */
  strbuf sb = {0};
  UNIT_CHECK(report_emit(m, REPORT_JSON, NULL, &sb, d, diag_mkloc(0, 0, 0, 0)) == 0);
  cJSON *j = cJSON_Parse(strbuf_cstr(&sb));
  UNIT_CHECK(j != NULL);
  if (j) {
    /* F0 F1 B1 B0 W0 (1 ms each) plus two 0.04 ms transfers and the optimizer step */
    UNIT_CHECK(json_num(j, "makespan_ms") > 5.08 && json_num(j, "makespan_ms") < 6);
    UNIT_CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "per_device")) == 2);
    UNIT_CHECK_STREQ(json_str(j, "schedule_method"), "given");
  }
  cJSON_Delete(j);
  for (int k = REPORT_TEXT; k <= REPORT_SVG; k++) {
    strbuf_free(&sb);
    UNIT_CHECK(report_emit(m, (report_kind)k, NULL, &sb, d, diag_mkloc(0, 0, 0, 0)) == 0);
    UNIT_CHECK(sb.len > 0);
  }
  strbuf_free(&sb);
  UNIT_CHECK(diag_error_count(d) == 0);

  /* an order the simulator cannot run (W before B on $d1) is an error; nothing is written */
  ir_schedule *s1 = &m->schedules[1];
  s1->nops = 0;
  ir_schedule_push(s1, IR_OP_F, 1, 0);
  ir_schedule_push(s1, IR_OP_W, 1, 0);
  ir_schedule_push(s1, IR_OP_B, 1, 0);
  UNIT_CHECK(report_emit(m, REPORT_JSON, NULL, &sb, d, diag_mkloc(0, 0, 0, 0)) == -1);
  UNIT_CHECK(sb.len == 0);
  UNIT_CHECK(diag_error_count(d) == 1);

  /* without a schedule: text and JSON work, trace and SVG are errors */
  ir_module_clear_plan(m);
  UNIT_CHECK(report_emit(m, REPORT_TEXT, NULL, &sb, d, diag_mkloc(0, 0, 0, 0)) == 0);
  UNIT_CHECK(strstr(strbuf_cstr(&sb), "plan: none yet") != NULL);
  strbuf_free(&sb);
  UNIT_CHECK(report_emit(m, REPORT_TRACE, NULL, &sb, d, diag_mkloc(0, 0, 0, 0)) == -1);
  UNIT_CHECK(report_emit(m, REPORT_SVG, NULL, &sb, d, diag_mkloc(0, 0, 0, 0)) == -1);
  UNIT_CHECK(sb.len == 0);
  UNIT_CHECK(diag_error_count(d) == 3);
  strbuf_free(&sb);
  ir_module_free(m);
  diag_free(d);
  if (sink) fclose(sink);
}
