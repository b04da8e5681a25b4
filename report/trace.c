/* trace.c -- the Chrome / Perfetto trace of a simulated step (report_trace): one process per
 * device (pid device + 1, in device order) with a compute, send, receive and data-parallel
 * thread (tids unique in the trace and never a pid: trace_id_tid), a complete event per
 * operation and per transfer (on both ends), flow arrows from each send to its receive, and a
 * memory counter per device. Layout documented in docs/report.md. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "report_impl.h"

/* Thread number (within its process) of a device's operations (its transfers use lane_thread). */
enum { THREAD_COMPUTE = 0 };

/* A time in whole nanoseconds (the trace's resolution): t seconds rounded to the nearest ns. */
static long long trace_ns(double seconds) { return llround(seconds * 1e9); }

/* Append a time in nanoseconds as trace microseconds with at most 3 decimals, trailing zeros
 * and a trailing dot removed ("1500", "12.25"). Durations are differences of rounded times, so
 * ts + dur of one slice equals the ts of a slice that starts where it ends. */
static void trace_us_ns(strbuf *sb, long long ns) {
  char buf[48];
  const char *sign = ns < 0 ? "-" : "";
  unsigned long long a = ns < 0 ? 0ULL - (unsigned long long)ns : (unsigned long long)ns;
  snprintf(buf, sizeof buf, "%s%llu.%03llu", sign, a / 1000, a % 1000);
  size_t n = strlen(buf);
  while (buf[n - 1] == '0') buf[--n] = 0;
  if (buf[n - 1] == '.') buf[--n] = 0;
  strbuf_puts(sb, strcmp(buf, "-0") == 0 ? "0" : buf);
}

/* Append a time in seconds as trace microseconds (trace_us_ns of its rounded value). */
static void trace_us(strbuf *sb, double seconds) { trace_us_ns(sb, trace_ns(seconds)); }

/* Append the duration of [start, end] (seconds) as the difference of the rounded ends. */
static void trace_dur(strbuf *sb, double start, double end) {
  trace_us_ns(sb, trace_ns(end) - trace_ns(start));
}

/* Start the next event of the traceEvents array. */
static void trace_event_start(strbuf *sb, bool *first) {
  strbuf_puts(sb, *first ? "\n  {" : ",\n  {");
  *first = false;
}

/* A metadata event: name is "process_name", "thread_name", "process_sort_index", ...; exactly
 * one of value (a string argument "name") or sort (an integer argument "sort_index") is used. */
static void trace_meta(strbuf *sb, bool *first, const char *name, int pid, int tid,
                       const char *value, int sort) {
  trace_event_start(sb, first);
  strbuf_puts(sb, "\"name\": ");
  strbuf_json_str(sb, name);
  strbuf_printf(sb, ", \"ph\": \"M\", \"pid\": %d", pid);
  if (tid >= 0) strbuf_printf(sb, ", \"tid\": %d", tid);
  if (value) {
    strbuf_puts(sb, ", \"args\": {\"name\": ");
    strbuf_json_str(sb, value);
    strbuf_puts(sb, "}}");
  } else {
    strbuf_printf(sb, ", \"args\": {\"sort_index\": %d}}", sort);
  }
}

/* The common head of an event: name, category, phase, process, thread and timestamp. */
static void trace_head(strbuf *sb, bool *first, const char *name, const char *cat, const char *ph,
                       int pid, int tid, double ts) {
  trace_event_start(sb, first);
  strbuf_puts(sb, "\"name\": ");
  strbuf_json_str(sb, name);
  strbuf_puts(sb, ", \"cat\": ");
  strbuf_json_str(sb, cat);
  strbuf_printf(sb, ", \"ph\": \"%s\", \"pid\": %d", ph, pid);
  if (tid >= 0) strbuf_printf(sb, ", \"tid\": %d", tid);
  strbuf_puts(sb, ", \"ts\": ");
  trace_us(sb, ts);
}

/* One point of a memory counter track. */
typedef struct mem_point {
  double t;   /* seconds */
  double mem; /* bytes */
  int seq;    /* position in the timeline (tie break): 2i for operation i's start, 2i + 1 for
                 its figure at rep_op_mem_time */
} mem_point;

/* Order memory points by time, then timeline position. */
static int mem_point_cmp(const void *a, const void *b) {
  const mem_point *x = a, *y = b;
  if (x->t != y->t) return x->t < y->t ? -1 : 1;
  return (x->seq > y->seq) - (x->seq < y->seq);
}

/* The memory counter events of device dev: static memory at 0, then a point wherever the
 * memory changes (a B's or BW's start too: a recomputing stage's rebuilt state grows there). */
static void trace_memory(const sim_result *r, int dev, strbuf *sb, bool *first) {
  mem_point *pts = xmalloc(sizeof *pts * (size_t)(2 * r->nops + 1));
  int n = 0;
  pts[n++] = (mem_point){0, r->dev[dev].static_mem, -1};
  for (int i = 0; i < r->nops; i++) {
    const sim_op_event *e = &r->ops[i];
    if (e->device != dev) continue;
    if (e->kind == IR_OP_B || e->kind == IR_OP_BW)
      pts[n++] = (mem_point){e->start, e->mem_start, 2 * i};
    pts[n++] = (mem_point){rep_op_mem_time(e), e->mem, 2 * i + 1};
  }
  qsort(pts, (size_t)n, sizeof *pts, mem_point_cmp);
  double last = -1;
  for (int i = 0; i < n; i++) {
    if (i > 0 && pts[i].mem == last) continue;
    last = pts[i].mem;
    trace_head(sb, first, "memory", "memory", "C", trace_id_pid(dev), -1, pts[i].t);
    strbuf_puts(sb, ", \"args\": {\"GiB\": ");
    rep_json_num(sb, pts[i].mem / 1073741824.0);
    strbuf_puts(sb, "}}");
  }
  free(pts);
}

/* Thread lanes of the transfers: a device's sends (or receives) that overlap in time go to
 * separate threads, so that every thread's slices nest (Perfetto requires it). Lane 0 is the
 * "send" (thread 1) or "recv" (thread 2) thread; lane k > 0 is "send k+1" / "recv k+1". Index [0]
 * of each pair is the sending side, [1] the receiving side (the 'dir' of lane_thread). */
typedef struct xfer_lanes {
  int (*lane)[2];   /* per transfer: its lane on the sender and on the receiver */
  int (*nlanes)[2]; /* per device: send and receive lanes used */
} xfer_lanes;

/* A transfer to place in a lane: its start and index. */
typedef struct lane_item {
  double start; /* seconds */
  int idx;      /* index in r->xfers */
} lane_item;

/* Order lane items by start time, then index. */
static int lane_cmp(const void *a, const void *b) {
  const lane_item *x = a, *y = b;
  if (x->start != y->start) return x->start < y->start ? -1 : 1;
  return (x->idx > y->idx) - (x->idx < y->idx);
}

/* Assign lanes: for each device and direction, greedily in start order, the first lane whose
 * last transfer has ended. */
static void assign_lanes(const sim_result *r, int ndev, xfer_lanes *l) {
  l->lane = xcalloc((size_t)r->nxfers + 1, sizeof *l->lane);
  l->nlanes = xcalloc((size_t)ndev + 1, sizeof *l->nlanes);
  lane_item *items = xmalloc(sizeof *items * ((size_t)r->nxfers + 1));
  double *lane_end = xmalloc(sizeof *lane_end * ((size_t)r->nxfers + 1));
  for (int dir = 0; dir < 2; dir++) {
    for (int d = 0; d < ndev; d++) {
      int n = 0;
      for (int i = 0; i < r->nxfers; i++)
        if ((dir ? r->xfers[i].to : r->xfers[i].from) == d)
          items[n++] = (lane_item){r->xfers[i].start, i};
      qsort(items, (size_t)n, sizeof *items, lane_cmp);
      int lanes = 0;
      for (int k = 0; k < n; k++) {
        const sim_transfer *x = &r->xfers[items[k].idx];
        int lane = 0;
        while (lane < lanes && lane_end[lane] > x->start) lane++;
        if (lane == lanes) lanes++;
        lane_end[lane] = x->end;
        l->lane[items[k].idx][dir] = lane;
      }
      l->nlanes[d][dir] = lanes;
    }
  }
  free(items);
  free(lane_end);
}

/* Thread number (within its process) of lane 'lane' of the send (dir 0) or receive (dir 1)
 * threads; trace_id_tid makes it a tid. */
static int lane_thread(int dir, int lane) { return lane == 0 ? 1 + dir : 1 + 2 * lane + dir; }

void report_trace(const ir_module *m, const sim_result *r, strbuf *out) {
  bool first = true;
  int ndev = r->ndevices < m->ndevices ? r->ndevices : m->ndevices;
  xfer_lanes lanes;
  assign_lanes(r, ndev, &lanes);
  int nthreads = 1; /* thread numbers used by any device: compute and its lanes */
  for (int d = 0; d < ndev; d++)
    for (int dir = 0; dir < 2; dir++)
      if (lanes.nlanes[d][dir] > 0 && lane_thread(dir, lanes.nlanes[d][dir] - 1) + 1 > nthreads)
        nthreads = lane_thread(dir, lanes.nlanes[d][dir] - 1) + 1;
  if (nthreads < 3) nthreads = 3; /* every device names a send and a recv thread */
  int dp_thread = nthreads++; /* the data-parallel reductions: they may overlap compute */
  bool *copies = xcalloc((size_t)(ndev ? ndev : 1), sizeof *copies); /* devices with copies */
  bool any_copies = false;
  for (int i = 0; i < r->nops; i++)
    if (r->ops[i].device >= 0 && r->ops[i].device < ndev && rep_op_host_copy((int)r->ops[i].kind))
      copies[r->ops[i].device] = any_copies = true;
  int host_thread = nthreads; /* then the copies to and from host memory (one thread each) */
  if (any_copies) nthreads += 2;
  int stride = trace_id_stride(trace_id_pid(ndev - 1), nthreads);
  strbuf_puts(out, "{\"displayTimeUnit\": \"ms\",\n\"otherData\": {\"model\": ");
  strbuf_json_str(out, m->name);
  strbuf_puts(out, ", \"makespan_ms\": ");
  rep_json_num(out, r->makespan * 1e3);
  strbuf_puts(out, ", \"bubble_ratio\": ");
  rep_json_num(out, r->bubble);
  strbuf_puts(out, "},\n\"traceEvents\": [");

  for (int d = 0; d < ndev; d++) {
    strbuf name = {0};
    strbuf_printf(&name, "$d%d %s (node %lld)", d, m->devices[d].type,
                  (long long)m->devices[d].rec.node);
    int pid = trace_id_pid(d);
    trace_meta(out, &first, "process_name", pid, -1, strbuf_cstr(&name), 0);
    trace_meta(out, &first, "process_sort_index", pid, -1, NULL, d);
    trace_meta(out, &first, "thread_name", pid, trace_id_tid(pid, THREAD_COMPUTE, stride),
               "compute", 0);
    trace_meta(out, &first, "thread_sort_index", pid, trace_id_tid(pid, THREAD_COMPUTE, stride),
               NULL, 0);
    int nsend = lanes.nlanes[d][0] > 1 ? lanes.nlanes[d][0] : 1;
    int nrecv = lanes.nlanes[d][1] > 1 ? lanes.nlanes[d][1] : 1;
    for (int dir = 0; dir < 2; dir++)
      for (int k = 0; k < (dir ? nrecv : nsend); k++) {
        char tname[32];
        snprintf(tname, sizeof tname, k ? "%s %d" : "%s", dir ? "recv" : "send", k + 1);
        int tid = trace_id_tid(pid, lane_thread(dir, k), stride);
        trace_meta(out, &first, "thread_name", pid, tid, tname, 0);
        trace_meta(out, &first, "thread_sort_index", pid, tid, NULL, 1 + k + (dir ? nsend : 0));
      }
    trace_meta(out, &first, "thread_name", pid, trace_id_tid(pid, dp_thread, stride),
               "data-parallel", 0);
    trace_meta(out, &first, "thread_sort_index", pid, trace_id_tid(pid, dp_thread, stride), NULL,
               1 + nsend + nrecv);
    for (int k = 0; k < 2 && copies[d]; k++) {
      int tid = trace_id_tid(pid, host_thread + k, stride);
      trace_meta(out, &first, "thread_name", pid, tid, k ? "from host" : "to host", 0);
      trace_meta(out, &first, "thread_sort_index", pid, tid, NULL, 2 + nsend + nrecv + k);
    }
    strbuf_free(&name);
  }

  for (int i = 0; i < r->nops; i++) {
    const sim_op_event *e = &r->ops[i];
    if (e->device < 0 || e->device >= ndev) continue;
    const char *kind = rep_op_kind_name(e->kind);
    char name[64];
    if (e->stage >= 0)
      snprintf(name, sizeof name, "%s s%d mb%d", kind, e->stage, e->mb);
    else
      snprintf(name, sizeof name, "%s", kind);
    int pid = trace_id_pid(e->device);
    /* the data-parallel collectives (all-reduce; ZeRO-1's reduce-scatter and all-gather) */
    bool collective = (int)e->kind == SIM_OP_ALLREDUCE || (int)e->kind == SIM_OP_REDUCE_SCATTER ||
                      (int)e->kind == SIM_OP_ALLGATHER;
    int thread = collective                       ? dp_thread
                 : (int)e->kind == SIM_OP_OFFLOAD ? host_thread
                 : (int)e->kind == SIM_OP_RELOAD  ? host_thread + 1
                                                  : THREAD_COMPUTE;
    trace_head(out, &first, name, kind, "X", pid, trace_id_tid(pid, thread, stride), e->start);
    strbuf_puts(out, ", \"dur\": ");
    trace_dur(out, e->start, e->end);
    strbuf_puts(out, ", \"args\": {");
    if (e->stage >= 0 && e->stage < m->nstages) {
      const ir_stage *st = &m->stages[e->stage];
      strbuf_printf(out, "\"stage\": %d, \"mb\": %d, \"layers\": \"[%%%d, %%%d)\", ", e->stage,
                    e->mb, st->first, st->end);
    }
    strbuf_puts(out, "\"mem_GiB\": ");
    rep_json_num(out, e->mem / 1073741824.0);
    strbuf_puts(out, "}}");
  }

  for (int i = 0; i < r->nxfers; i++) {
    const sim_transfer *x = &r->xfers[i];
    if (x->from < 0 || x->from >= ndev || x->to < 0 || x->to >= ndev) continue;
    const char *cat = x->kind == IR_OP_F ? "act" : "grad";
    char name[80];
    snprintf(name, sizeof name, "%s s%d->s%d mb%d", cat, x->src_stage, x->dst_stage, x->mb);
    double mid = x->start + (x->end - x->start) / 2;
    for (int end = 0; end < 2; end++) {
      int pid = trace_id_pid(end ? x->to : x->from);
      int tid = trace_id_tid(pid, lane_thread(end, lanes.lane[i][end]), stride);
      trace_head(out, &first, name, cat, "X", pid, tid, x->start);
      strbuf_puts(out, ", \"dur\": ");
      trace_dur(out, x->start, x->end);
      strbuf_printf(out, ", \"args\": {\"from\": \"$d%d\", \"to\": \"$d%d\", \"bytes\": ", x->from,
                    x->to);
      rep_json_num(out, x->bytes);
      strbuf_puts(out, ", \"queued_us\": ");
      trace_dur(out, x->ready, x->start);
      strbuf_puts(out, "}}");
      trace_head(out, &first, name, cat, end ? "f" : "s", pid, tid, mid);
      strbuf_printf(out, ", \"id\": %d%s}", i + 1, end ? ", \"bp\": \"e\"" : "");
    }
  }

  for (int d = 0; d < ndev; d++) trace_memory(r, d, out, &first);
  strbuf_puts(out, "\n]}\n");
  free(lanes.lane);
  free(lanes.nlanes);
  free(copies);
}
