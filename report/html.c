/* html.c -- the interactive HTML page of a plan (report_html): one self-contained document (inline
 * CSS, vanilla JavaScript, the data as JSON in a <script type="application/json"> element; no
 * network, no external files) with a zoomable, pannable canvas timeline of the simulated step,
 * a memory-over-time chart of a selectable device against its limit, the stage table and, with
 * --compare, a bar chart of the classic plans. The data embeds the JSON report (report_json)
 * unchanged under "report" beside the recorded timeline, which is written compactly: per device
 * columns of small integers (an index into a table of distinct record shapes, microbatch and
 * time deltas in 0.1 us ticks), so a 64-device, 512-microbatch plan makes a few MB. Layout in
 * docs/report.md. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "report_impl.h"

/* Append s escaped for HTML text. */
static void html_escape(strbuf *sb, const char *s) {
  for (const char *p = s; p && *p; p++) {
    switch (*p) {
    case '&': strbuf_puts(sb, "&amp;"); break;
    case '<': strbuf_puts(sb, "&lt;"); break;
    case '>': strbuf_puts(sb, "&gt;"); break;
    case '"': strbuf_puts(sb, "&quot;"); break;
    default: strbuf_putc(sb, *p);
    }
  }
}

void report_html_script_json(strbuf *out, const char *json, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (json[i] == '<')
      strbuf_puts(out, "\\u003c");
    else
      strbuf_putc(out, json[i]);
  }
}

/* The resolutions of the page's data: times in whole ticks of 0.1 us, memory in whole KiB. */
#define HTML_TICK_S 1e-7
#define HTML_MEM_UNIT 1024.0

/* t seconds in whole ticks (0 for NaN or infinite). */
static long long html_tick(double t) {
  double v = t / HTML_TICK_S;
  return isfinite(v) ? llround(v) : 0;
}

/* bytes in whole memory units (0 for NaN or infinite). */
static long long html_mem(double bytes) {
  double v = bytes / HTML_MEM_UNIT;
  return isfinite(v) ? llround(v) : 0;
}

/* One distinct shape of the timeline's records: an operation's (kind, stage, duration, memory
 * growth at its start, memory change after it) or a transfer's (grad, from, to, src_stage,
 * dst_stage, duration, bytes), in ticks and memory units. */
enum { HTML_SHAPE_MAX = 7 };
typedef struct html_shape {
  long long v[HTML_SHAPE_MAX]; /* the fields; unused ones 0 */
} html_shape;

/* Order shapes by their fields. */
static int html_shape_cmp(const void *a, const void *b) {
  const html_shape *x = a, *y = b;
  for (int i = 0; i < HTML_SHAPE_MAX; i++)
    if (x->v[i] != y->v[i]) return x->v[i] < y->v[i] ? -1 : 1;
  return 0;
}

/* A table of distinct shapes: sorted, without repeats. */
typedef struct html_shapes {
  html_shape *s; /* the shapes */
  int n;         /* how many */
} html_shapes;

/* The distinct shapes of all[0 .. n). Post: the result is sorted; all is reordered. */
static html_shapes html_shapes_of(html_shape *all, int n) {
  html_shapes t = {xmalloc(sizeof *t.s * ((size_t)n + 1)), 0};
  qsort(all, (size_t)n, sizeof *all, html_shape_cmp);
  for (int i = 0; i < n; i++)
    if (t.n == 0 || html_shape_cmp(&t.s[t.n - 1], &all[i]) != 0) t.s[t.n++] = all[i];
  return t;
}

/* Index of shape x in table t. Pre: x is in t. */
static int html_shape_index(const html_shapes *t, const html_shape *x) {
  const html_shape *p = bsearch(x, t->s, (size_t)t->n, sizeof *x, html_shape_cmp);
  return p ? (int)(p - t->s) : 0;
}

/* Write table t as "[[a,b,...],...]" with its first nfields fields. */
static void html_shapes_write(const html_shapes *t, int nfields, strbuf *out) {
  strbuf_putc(out, '[');
  for (int i = 0; i < t->n; i++) {
    strbuf_puts(out, i ? ",[" : "[");
    for (int f = 0; f < nfields; f++) strbuf_printf(out, "%s%lld", f ? "," : "", t->s[i].v[f]);
    strbuf_putc(out, ']');
  }
  strbuf_putc(out, ']');
}

/* A record to place in its device's list: its start and index. */
typedef struct html_item {
  double start; /* seconds */
  int idx;      /* index in r->ops or r->xfers */
} html_item;

/* Order items by start, then index. */
static int html_item_cmp(const void *a, const void *b) {
  const html_item *x = a, *y = b;
  if (x->start != y->start) return x->start < y->start ? -1 : 1;
  return (x->idx > y->idx) - (x->idx < y->idx);
}

/* Per device, its records' indexes sorted by start: items[first[d] .. first[d + 1]). */
typedef struct html_lists {
  html_item *items;
  int *first; /* ndev + 1 offsets */
} html_lists;

/* Group r's n operations, or (xfers) transfers by sender, by device, each device's in start
 * order; records with a device outside [0, ndev) are left out, and so are the copies to and
 * from host memory (they overlap the device's compute, which its row shows; the trace has them). */
static html_lists html_group(const sim_result *r, int n, int ndev, bool xfers) {
  html_lists l = {xmalloc(sizeof *l.items * ((size_t)n + 1)),
                  xcalloc((size_t)ndev + 2, sizeof *l.first)};
  for (int pass = 0; pass < 2; pass++) {
    int *fill = xcalloc((size_t)ndev + 1, sizeof *fill);
    for (int i = 0; i < n; i++) {
      int d = xfers ? r->xfers[i].from : r->ops[i].device;
      bool ok = d >= 0 && d < ndev &&
                (xfers ? r->xfers[i].to >= 0 && r->xfers[i].to < ndev
                       : !rep_op_host_copy((int)r->ops[i].kind));
      if (!ok) continue;
      if (pass == 0)
        l.first[d + 1]++;
      else
        l.items[l.first[d] + fill[d]++] =
            (html_item){xfers ? r->xfers[i].start : r->ops[i].start, i};
    }
    free(fill);
    if (pass == 0)
      for (int d = 0; d < ndev; d++) l.first[d + 1] += l.first[d];
  }
  for (int d = 0; d < ndev; d++)
    qsort(l.items + l.first[d], (size_t)(l.first[d + 1] - l.first[d]), sizeof *l.items,
          html_item_cmp);
  return l;
}

static void html_lists_free(html_lists *l) {
  free(l->items);
  free(l->first);
}

/* The shape of operation e whose device's memory before it was 'prev' (memory units). */
static html_shape html_op_shape(const sim_op_event *e, long long prev) {
  long long t0 = html_tick(e->start), ms = html_mem(e->mem_start);
  return (html_shape){{(long long)e->kind, e->stage, html_tick(e->end) - t0, ms - prev,
                       html_mem(e->mem) - ms, 0, 0}};
}

/* The shape of transfer x. */
static html_shape html_xfer_shape(const sim_transfer *x) {
  return (html_shape){{x->kind == IR_OP_F ? 0 : 1, x->from, x->to, x->src_stage, x->dst_stage,
                       html_tick(x->end) - html_tick(x->start),
                       isfinite(x->bytes) ? llround(x->bytes) : 0}};
}

/* Write the per device columns of the operations or (xfers) transfers: for each device
 * {"shape": [...], "mb": [...], "gap" or "dstart": [...]} in start order. shape: the record's
 * index in its shape table (shapes[i], of nshapes); mb: its microbatch minus that of the
 * device's previous record of the same shape (-1 before the first: mostly 1); gap: an
 * operation's start minus the previous operation's end (ticks; 0 for the first's start at 0);
 * dstart: a transfer's start minus the previous transfer's start. */
static void html_columns(const sim_result *r, const html_lists *l, int ndev, const int *shapes,
                         int nshapes, bool xfers, strbuf *out) {
  int *last_mb = xmalloc(sizeof *last_mb * ((size_t)nshapes + 1));
  strbuf_putc(out, '[');
  for (int d = 0; d < ndev; d++) {
    strbuf_puts(out, d ? ",\n{\"shape\": [" : "\n{\"shape\": [");
    for (int k = l->first[d]; k < l->first[d + 1]; k++)
      strbuf_printf(out, "%s%d", k > l->first[d] ? "," : "", shapes[l->items[k].idx]);
    strbuf_puts(out, "], \"mb\": [");
    for (int i = 0; i < nshapes; i++) last_mb[i] = -1;
    for (int k = l->first[d]; k < l->first[d + 1]; k++) {
      int i = l->items[k].idx, mb = xfers ? r->xfers[i].mb : r->ops[i].mb;
      strbuf_printf(out, "%s%d", k > l->first[d] ? "," : "", mb - last_mb[shapes[i]]);
      last_mb[shapes[i]] = mb;
    }
    strbuf_puts(out, xfers ? "], \"dstart\": [" : "], \"gap\": [");
    long long prev = 0;
    for (int k = l->first[d]; k < l->first[d + 1]; k++) {
      int i = l->items[k].idx;
      long long t0 = html_tick(xfers ? r->xfers[i].start : r->ops[i].start);
      strbuf_printf(out, "%s%lld", k > l->first[d] ? "," : "", t0 - prev);
      prev = xfers ? t0 : html_tick(r->ops[i].end);
    }
    strbuf_puts(out, "]}");
  }
  strbuf_putc(out, ']');
  free(last_mb);
}

/* The data object: {"report": <JSON report>, "timeline": {...}} (layout in docs/report.md). Pre:
 * r is a recorded SIM_OK run of m. Post: out holds one JSON object (not yet escaped for the
 * script element). */
static void html_data(const ir_module *m, const sim_result *r, const report_extra *x,
                      strbuf *out) {
  int ndev = r->ndevices < m->ndevices ? r->ndevices : m->ndevices;
  strbuf_puts(out, "{\"report\": ");
  report_json(m, r, x, out);
  while (out->len && (out->data[out->len - 1] == '\n')) out->data[--out->len] = 0;
  strbuf_puts(out, ",\n\"timeline\": {\"kinds\": [");
  for (int k = 0; k < SIM_OP_END; k++)
    strbuf_printf(out, "%s\"%s\"", k ? ", " : "", rep_op_kind_name(k));
  strbuf_puts(out, "], \"fills\": [");
  for (int k = 0; k < SIM_OP_END; k++)
    strbuf_printf(out, "%s\"%s\"", k ? ", " : "", rep_op_kind(k)->fill);
  strbuf_puts(out, "], \"tags\": [");
  for (int k = 0; k < SIM_OP_END; k++)
    strbuf_printf(out, "%s\"%s\"", k ? ", " : "", rep_op_kind(k)->tag);
  strbuf_printf(out, "],\n\"tick_ms\": %g, \"mem_unit_bytes\": %.0f, \"makespan\": %lld, "
                     "\"devices\": %d, \"static_mem\": [",
                HTML_TICK_S * 1e3, HTML_MEM_UNIT, html_tick(r->makespan), ndev);
  for (int d = 0; d < ndev; d++)
    strbuf_printf(out, "%s%lld", d ? ", " : "", html_mem(r->dev[d].static_mem));
  strbuf_puts(out, "], \"limit_mem\": [");
  for (int d = 0; d < ndev; d++)
    strbuf_printf(out, "%s%lld", d ? ", " : "", html_mem(rep_mem_limit(m, d)));
  strbuf_puts(out, "], \"types\": [");
  for (int d = 0; d < ndev; d++) {
    if (d) strbuf_puts(out, ", ");
    strbuf_json_str(out, m->devices[d].type ? m->devices[d].type : "?");
  }
  strbuf_puts(out, "],\n");

  /* operations: the shapes, then per device its columns in start order */
  html_lists ol = html_group(r, r->nops, ndev, false);
  int *oshape = xcalloc((size_t)r->nops + 1, sizeof *oshape);
  size_t most = (size_t)(r->nops > r->nxfers ? r->nops : r->nxfers);
  html_shape *all = xmalloc(sizeof *all * (most + 1));
  int n = 0;
  for (int d = 0; d < ndev; d++) {
    long long prev = html_mem(r->dev[d].static_mem);
    for (int k = ol.first[d]; k < ol.first[d + 1]; k++) {
      const sim_op_event *e = &r->ops[ol.items[k].idx];
      all[n++] = html_op_shape(e, prev);
      prev = html_mem(e->mem);
    }
  }
  html_shapes ot = html_shapes_of(all, n);
  for (int d = 0; d < ndev; d++) {
    long long prev = html_mem(r->dev[d].static_mem);
    for (int k = ol.first[d]; k < ol.first[d + 1]; k++) {
      const sim_op_event *e = &r->ops[ol.items[k].idx];
      html_shape sh = html_op_shape(e, prev);
      oshape[ol.items[k].idx] = html_shape_index(&ot, &sh);
      prev = html_mem(e->mem);
    }
  }
  strbuf_puts(out, "\"op_shapes_fields\": [\"kind\", \"stage\", \"dur\", \"mem_start_delta\", "
                   "\"mem_delta\"],\n\"op_shapes\": ");
  html_shapes_write(&ot, 5, out);
  strbuf_puts(out, ",\n\"ops\": ");
  html_columns(r, &ol, ndev, oshape, ot.n, false, out);

  /* transfers, per sending device */
  html_lists xl = html_group(r, r->nxfers, ndev, true);
  int *xshape = xcalloc((size_t)r->nxfers + 1, sizeof *xshape);
  n = 0;
  for (int k = 0; k < xl.first[ndev]; k++) all[n++] = html_xfer_shape(&r->xfers[xl.items[k].idx]);
  html_shapes xt = html_shapes_of(all, n);
  for (int k = 0; k < xl.first[ndev]; k++) {
    html_shape sh = html_xfer_shape(&r->xfers[xl.items[k].idx]);
    xshape[xl.items[k].idx] = html_shape_index(&xt, &sh);
  }
  strbuf_puts(out, ",\n\"xfer_shapes_fields\": [\"grad\", \"from\", \"to\", \"src_stage\", "
                   "\"dst_stage\", \"dur\", \"bytes\"],\n\"xfer_shapes\": ");
  html_shapes_write(&xt, 7, out);
  strbuf_puts(out, ",\n\"xfers\": ");
  html_columns(r, &xl, ndev, xshape, xt.n, true, out);
  strbuf_puts(out, "}}");
  free(all);
  free(oshape);
  free(xshape);
  free(ot.s);
  free(xt.s);
  html_lists_free(&ol);
  html_lists_free(&xl);
}

/* The page's style sheet. */
static const char html_css[] =
    "body{font:13px sans-serif;margin:16px;color:#222}h1{font-size:18px;margin:0 0 4px}"
    "h2{font-size:15px;margin:18px 0 6px}.sub{color:#555}"
    "#tlwrap{position:relative;border:1px solid #bbb}canvas{display:block}"
    "#tip{position:fixed;display:none;background:#fffbe6;border:1px solid #999;padding:4px 6px;"
    "font-size:12px;pointer-events:none;white-space:pre;z-index:9}"
    ".legend span{display:inline-block;margin-right:12px}"
    ".legend i{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:middle}"
    "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}"
    "th{background:#f2f2f2}td.l{text-align:left}.bar{height:14px;display:inline-block}"
    ".oom{color:#c00}";

/* The page's script (no double quotes inside, so it is written as is). */
static const char *const html_js[] = {
    "(function(){",
    "var body=document.body;",
    "window.onerror=function(m){body.setAttribute('data-ok','0');body.setAttribute('data-error',"
    "String(m));};",
    "var D=JSON.parse(document.getElementById('octo-data').textContent);",
    "var R=D.report,T=D.timeline,ND=T.devices,TK=T.tick_ms,MU=T.mem_unit_bytes/1048576;",
    "var KN=T.kinds,COL=T.fills,TAG=T.tags,NC=4,XCOL=['#1f3b73','#2f6b2a'];",
    "function fmtB(b){var u=['B','KiB','MiB','GiB','TiB'],i=0;while(b>=1024&&i<4){b/=1024;i++;"
    "}return (i?b.toFixed(2):b)+' '+u[i];}",
    "function el(t,a,x){var e=document.createElement(t);if(a)e.className=a;if(x!==undefined)"
    "e.textContent=x;"
    "return e;}",
    "/* decode a device's columns (docs/report.md): shapes, microbatch deltas per shape,"
    " time deltas */",
    "function dec(c,sh,isx,d){var n=c.shape.length,o={n:n,k:new Int8Array(n),s:new Int32Array(n),"
    "m:new Int32Array(n),t0:new Float64Array(n),t1:new Float64Array(n)};",
    " var lm=new Int32Array(sh.length).fill(-1),prev=0,mem=T.static_mem[d];",
    " if(isx){o.to=new Int32Array(n);o.ds=new Int32Array(n);o.b=new Float64Array(n);}else{"
    "o.mem=new Float64Array(n);"
    "o.ms=new Float64Array(n);}",
    " for(var i=0;i<n;i++){var j=c.shape[i],q=sh[j],mb=lm[j]+c.mb[i],t;lm[j]=mb;o.m[i]=mb;",
    "  if(isx){t=prev+c.dstart[i];prev=t;o.k[i]=q[0];o.to[i]=q[2];o.s[i]=q[3];o.ds[i]=q[4];"
    "o.t0[i]=t*TK;o.t1[i]=(t+q[5])*TK;o.b[i]=q[6];}",
    "  else{t=prev+c.gap[i];prev=t+q[2];o.k[i]=q[0];o.s[i]=q[1];o.t0[i]=t*TK;o.t1[i]=prev*TK;"
    "var a=mem+q[3];mem=a+q[4];o.ms[i]=a*MU;o.mem[i]=mem*MU;}}",
    " return o;}",
    "var OP=[],XF=[],NOPS=0,NXF=0,LAST=0;",
    "for(var d=0;d<ND;d++){OP.push(dec(T.ops[d],T.op_shapes,false,d));XF.push(dec(T.xfers[d],"
    "T.xfer_shapes,true,d));NOPS+=OP[d].n;NXF+=XF[d].n;",
    " for(var i=0;i<OP[d].n;i++)if(OP[d].t1[i]>LAST)LAST=OP[d].t1[i];}",
    "var ST=R.stages||[];",
    "function layers(s){var st=ST[s];if(!st)return '';return '['+st.first+', '+st.end+')"
    " '+(st.first_layer||'')+' .. '+(st.last_layer||'');"
    "}",
    "var span=T.makespan*TK>0?T.makespan*TK:1,v0=0,v1=span,drawn=0;",
    /* a first view from the address: page.html#10-12.5 shows 10 to 12.5 ms */
    "var hv=/^#([0-9.]+)-([0-9.]+)$/.exec(location.hash);if(hv&&+hv[2]>+hv[1]){v0=+hv[1];"
    "v1=+hv[2];}",
    "document.getElementById('cap').textContent=ND+' devices, '+NOPS+' operations,"
    " '+NXF+' transfers;"
    " makespan '+(T.makespan*TK).toFixed(3)+' ms, bubble '+((R.bubble_ratio||0)*100).toFixed(1)+'%;"
    " schedule '+R.schedule_method+(R.oom?'; OUT OF MEMORY':'; memory fits');",
    "/* legend: the kinds the timeline has (F, B, W, BW always) */",
    "var seen={};OP.forEach(function(o){for(var i=0;i<o.n;i++)seen[o.k[i]]=1;});",
    "var lg=document.getElementById('legend');KN.forEach(function(k,i){if(i>=NC&&!seen[i])return;"
    "var s=el('span');var c=el('i');c.style.background=COL[i];s.appendChild(c);"
    "s.appendChild(document.createTextNode(k));"
    "lg.appendChild(s);});",
    "['activation transfer','gradient transfer'].forEach(function(k,i){var s=el('span');"
    "var c=el('i');"
    "c.style.background=XCOL[i];c.style.height='4px';s.appendChild(c);"
    "s.appendChild(document.createTextNode(k));"
    "lg.appendChild(s);});",
    "/* timeline: rows of at least 18 px (labels fit in the boxes), 28 px with few devices */",
    "var cv=document.getElementById('tl'),ctx=cv.getContext('2d');",
    "var LEFT=70,TOP=4,AX=22,RH=Math.max(18,Math.min(28,Math.floor(640/Math.max(ND,1))));",
    "var BAND=Math.max(2,Math.floor(RH/6)),BH=RH-BAND-2;",
    "function W(){return cv.width-LEFT-8;}",
    "function X(t){return LEFT+(t-v0)/(v1-v0)*W();}",
    "function size(){cv.width=Math.max(400,document.getElementById('tlwrap').clientWidth||1200);"
    "cv.height=TOP+ND*RH+AX;}",
    "function step(s){var r=s/10,p=Math.pow(10,Math.floor(Math.log10(r))),f=r/p;"
    "return (f<1.5?1:f<3.5?2:f<7.5?5:10)*p;"
    "}",
    "/* first index of sorted a[0..n) with a[i] >= t */",
    "function lb(a,n,t){var lo=0,hi=n;while(lo<hi){var m=(lo+hi)>>1;if(a[m]<t)lo=m+1;else hi=m;"
    "}return lo;}",
    "/* the record of list o in view from index: the ones that start before v0 and still run */",
    "function from(o){var i=lb(o.t0,o.n,v0);return i>64?i-64:0;}",
    "function draw(){ctx.clearRect(0,0,cv.width,cv.height);var w=W(),y0,split=0,nlab=0;drawn=0;"
    "ctx.font='11px sans-serif';",
    " for(var d=0;d<ND;d++){y0=TOP+d*RH;ctx.fillStyle=d%2?'#f4f4f4':'#fff';ctx.fillRect(LEFT,"
    "y0,w,RH);ctx.fillStyle='#222';ctx.fillText('$d'+d+(RH>=20?' '+T.types[d]:''),2,"
    "y0+Math.min(RH-3,"
    "13));}",
    " ctx.save();ctx.beginPath();ctx.rect(LEFT,0,w,TOP+ND*RH);ctx.clip();"
    "ctx.font='10px sans-serif';"
    "ctx.textBaseline='middle';",
    " for(d=0;d<ND;d++){var o=OP[d],y=TOP+d*RH+1;",
    "  for(var i=from(o);i<o.n;i++){if(o.t0[i]>v1)break;if(o.t1[i]<v0)continue;drawn++;",
    "   var x=X(o.t0[i]),bw=X(o.t1[i])-x,k=o.k[i];ctx.fillStyle=COL[k]||'#000';",
    "   /* a 1 px white gap ends every box wide enough, so neighbours of one kind stay apart */",
    "   if(bw>=4)split++;ctx.fillRect(x,y,bw>=4?bw-1:Math.max(1,bw),BH);",
    "   if(bw>=14&&BH>=11){var lb2=k<NC?'s'+o.s[i]+':'+o.m[i]:TAG[k];if(ctx.measureText(lb2)"
    ".width+4>bw-1&&k<NC)lb2=''+o.m[i];",
    "    if(ctx.measureText(lb2).width+4<=bw-1){ctx.fillStyle='#fff';ctx.fillText(lb2,x+2,"
    "y+BH/2+0.5);nlab++;"
    "}}}}",
    " for(d=0;d<ND;d++){var q=XF[d],yb=TOP+d*RH+RH-BAND;",
    "  for(var j=from(q);j<q.n;j++){if(q.t0[j]>v1)break;if(q.t1[j]<v0)continue;var a=X(q.t0[j]);"
    "ctx.fillStyle=XCOL[q.k[j]];ctx.fillRect(a,yb,Math.max(1,X(q.t1[j])-a),BAND-1);}}",
    " ctx.restore();ctx.textBaseline='alphabetic';ctx.font='11px sans-serif';var ay=TOP+ND*RH;"
    "ctx.strokeStyle='#444';ctx.fillStyle='#444';",
    " ctx.beginPath();ctx.moveTo(LEFT,ay);ctx.lineTo(LEFT+w,ay);ctx.stroke();",
    " var st=step(v1-v0);for(var t=Math.ceil(v0/st)*st;t<=v1+1e-9;t+=st){var tx=X(t);"
    "ctx.beginPath();"
    "ctx.moveTo(tx,ay);ctx.lineTo(tx,ay+4);ctx.stroke();ctx.fillText(+t.toPrecision(6)+'',tx-8,"
    "ay+15);}ctx.fillText('ms',2,ay+15);",
    " body.setAttribute('data-drawn-ops',String(drawn));body.setAttribute('data-split-ops',"
    "String(split));body.setAttribute('data-labels',String(nlab));}",
    "function clampView(){var s=v1-v0;if(s>span){s=span;}if(s<span*1e-7)s=span*1e-7;if(v0<0)v0=0;"
    "v1=v0+s;if(v1>span){v1=span;v0=span-s;}}",
    "cv.addEventListener('wheel',function(ev){ev.preventDefault();var r=cv.getBoundingClientRect();"
    "var px=ev.clientX-r.left;if(px<LEFT)px=LEFT;var t=v0+(px-LEFT)/W()*(v1-v0);",
    " var f=Math.exp(ev.deltaY*0.0015);v0=t-(t-v0)*f;v1=t+(v1-t)*f;clampView();draw();},{"
    "passive:false});",
    "var drag=null;cv.addEventListener('mousedown',function(ev){drag={x:ev.clientX,a:v0,b:v1};"
    "});",
    "window.addEventListener('mouseup',function(){drag=null;});",
    "var tip=document.getElementById('tip');",
    "/* the record of list o running at t (the latest to start), -1 when none */",
    "function find(o,t){for(var k=lb(o.t0,o.n,t+1e-12)-1,e=k-64;k>=0&&k>e;k--){"
    "if(o.t0[k]<=t&&t<=o.t1[k])return k;"
    "}return -1;}",
    "cv.addEventListener('mousemove',function(ev){var r=cv.getBoundingClientRect();"
    "var px=ev.clientX-r.left,"
    "py=ev.clientY-r.top;",
    " if(drag){var dt=(ev.clientX-drag.x)/W()*(drag.b-drag.a);v0=drag.a-dt;v1=drag.b-dt;"
    "clampView();"
    "draw();tip.style.display='none';return;}",
    " var d=Math.floor((py-TOP)/RH),t=v0+(px-LEFT)/W()*(v1-v0),s='';",
    " if(px>=LEFT&&d>=0&&d<ND){var tol=(v1-v0)/W();var inBand=py-TOP-d*RH>=RH-BAND-1;",
    "  if(inBand){var q=XF[d],j=find(q,t);if(j<0)j=find(q,t-tol);if(j>=0)"
    "s=(q.k[j]?'gradient':'activation')"
    "+' transfer s'+q.s[j]+' -> s'+q.ds[j]+' mb'+q.m[j]+'\\n$d'+d+' -> $d'+q.to[j]+'\\nstart '"
    "+q.t0[j].toFixed(3)+' ms,"
    " duration '+(q.t1[j]-q.t0[j]).toFixed(3)+' ms\\nbytes '+q.b[j]+' ('+fmtB(q.b[j])+')';}",
    "  if(!s){var o=OP[d],i=find(o,t);if(i<0)i=find(o,t-tol);if(i>=0){var k=o.k[i];"
    "s=KN[k]+(k<NC?' stage '+o.s[i]+' microbatch '+o.m[i]+'\\nlayers '+layers(o.s[i]):'')"
    "+'\\n$d'+d+' '+T.types[d]+'\\nstart '+o.t0[i].toFixed(3)+' ms,"
    " duration '+(o.t1[i]-o.t0[i]).toFixed(3)+' ms\\nmemory '+fmtB(o.mem[i]*1048576);}}}",
    " if(s){tip.textContent=s;tip.style.display='block';tip.style.left=(ev.clientX+12)+'px';"
    "tip.style.top=(ev.clientY+12)+'px';}else tip.style.display='none';});",
    "cv.addEventListener('mouseleave',function(){tip.style.display='none';});",
    "document.getElementById('reset').onclick=function(){v0=0;v1=span;draw();};",
    "/* memory chart */",
    "var mc=document.getElementById('mem'),mx=mc.getContext('2d'),"
    "sel=document.getElementById('dev');",
    "for(var d2=0;d2<ND;d2++){var op=el('option',null,'$d'+d2+' '+T.types[d2]);op.value=d2;"
    "sel.appendChild(op);}",
    "function memPts(d){var o=OP[d],p=[[0,T.static_mem[d]*MU,-1]];for(var i=0;i<o.n;i++){"
    "var kn=KN[o.k[i]];",
    " if(kn=='B'||kn=='BW')p.push([o.t0[i],o.ms[i],2*i]);p.push([kn=='F'?o.t0[i]:o.t1[i],o.mem[i],"
    "2*i+1]);}",
    " p.sort(function(a,b){return a[0]-b[0]||a[2]-b[2];});return p;}",
    "function drawMem(){var d=+sel.value||0,p=memPts(d),lim=T.limit_mem[d]*MU;mc.width=cv.width;"
    "mc.height=220;var L=70,Wd=mc.width-L-8,H=190,top=8;",
    " var pk=0;p.forEach(function(q){if(q[1]>pk)pk=q[1];});",
    " /* the limit sets the scale only when it is near the peak (else the curve would be flat) */",
    " var show=lim>0&&lim<=2*pk,mmax=show&&lim>pk?lim:pk;if(!(mmax>0))mmax=1;mmax*=1.05;"
    "mx.clearRect(0,"
    "0,mc.width,mc.height);mx.font='11px sans-serif';",
    " function xx(t){return L+t/span*Wd;}function yy(v){return top+H-v/mmax*H;}",
    " mx.strokeStyle='#444';mx.strokeRect(L,top,Wd,H);mx.fillStyle='#444';"
    "mx.fillText(fmtB(mmax*1048576),"
    "2,top+10);mx.fillText('0',2,top+H);",
    " mx.strokeStyle='#4e79a7';mx.lineWidth=1.5;mx.beginPath();mx.moveTo(xx(0),yy(p[0][1]));",
    " for(var i=1;i<p.length;i++){mx.lineTo(xx(p[i][0]),yy(p[i-1][1]));mx.lineTo(xx(p[i][0]),"
    "yy(p[i][1]));}mx.lineTo(xx(span),yy(p[p.length-1][1]));mx.stroke();",
    " mx.lineWidth=1;if(show){mx.strokeStyle='#c00';mx.setLineDash([5,4]);mx.beginPath();"
    "mx.moveTo(L,"
    "yy(lim));mx.lineTo(L+Wd,yy(lim));mx.stroke();mx.setLineDash([]);",
    " mx.fillStyle='#c00';mx.fillText('limit '+fmtB(lim*1048576),L+4,yy(lim)-3);}",
    " else if(lim>0){mx.fillStyle='#c00';mx.fillText('limit '+fmtB(lim*1048576)+',"
    " above the scale',"
    "L+4,top+12);}mx.fillStyle='#222';",
    " mx.fillText('$d'+d+' peak '+fmtB(pk*1048576)+', 0 to '+span.toFixed(3)+' ms',L+4,top+H+16);"
    "}",
    "sel.onchange=drawMem;",
    /* stage table */
    "var tb=document.getElementById('stages');ST.forEach(function(s){var tr=el('tr');"
    "function c(v,l){var td=el('td',l?'l':null,v===null||v===undefined?'-':String(v));"
    "tr.appendChild(td);}function ms(v){return v===null||v===undefined?'-':v.toFixed(3);}"
    "c(s.stage);c('['+s.first+', '+s.end+')');c(s.first_layer,1);c(s.last_layer,1);"
    "c(s.device===null?'-':'$d'+s.device+' '+(s.device_type||''),1);c(ms(s.f_ms));"
    "c(ms(s.b_ms));c(ms(s.w_ms));c(s.act_bytes===null?'-':fmtB(s.act_bytes));"
    "c(s.param_bytes===null?'-':fmtB(s.param_bytes));tb.appendChild(tr);});",
    /* comparison */
    "var bl=R.baselines;if(bl&&bl.length){document.getElementById('cmpsec').style.display='';"
    "var rows=[{name:'this plan',ok:true,makespan_ms:R.makespan_ms,bubble_ratio:R.bubble_ratio,"
    "oom:R.oom}].concat(bl),mk=0;rows.forEach(function(b){if(b.ok&&b.makespan_ms>mk)"
    "mk=b.makespan_ms;});var ct=document.getElementById('cmp');rows.forEach(function(b){"
    "var tr=el('tr');tr.appendChild(el('td','l',b.name));var td=el('td','l');"
    "if(b.ok){var br=el('span','bar');br.style.width=Math.max(1,b.makespan_ms/mk*400)+'px';"
    "br.style.background=b.name==='this plan'?'#f28e2b':'#4e79a7';td.appendChild(br);"
    "td.appendChild(document.createTextNode(' '+b.makespan_ms.toFixed(3)+' ms'));}"
    "else td.textContent='failed: '+(b.why||'');tr.appendChild(td);var tb2=el('td','l');"
    "if(b.ok){var bb=el('span','bar');bb.style.width=Math.max(1,(b.bubble_ratio||0)*200)+'px';"
    "bb.style.background='#bbb';tb2.appendChild(bb);tb2.appendChild(document.createTextNode("
    "' '+((b.bubble_ratio||0)*100).toFixed(1)+'%'));}tr.appendChild(tb2);"
    "tr.appendChild(el('td',b.oom?'oom':null,b.ok?(b.oom?'OOM':'fits'):'-'));"
    "ct.appendChild(tr);});}",
    "size();draw();drawMem();",
    "window.addEventListener('resize',function(){size();draw();drawMem();});",
    "body.setAttribute('data-ops',String(NOPS));body.setAttribute('data-end-ms',String(LAST));",
    "if(body.getAttribute('data-ok')!=='0')body.setAttribute('data-ok','1');",
    "})();",
};

void report_html(const ir_module *m, const sim_result *r, const report_extra *x, strbuf *out) {
  strbuf_puts(out, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                   "<title>");
  html_escape(out, m->name);
  strbuf_printf(out, " -- OctoPipe plan</title>\n<style>%s</style>\n</head>\n<body>\n<h1>",
                html_css);
  html_escape(out, m->name);
  strbuf_puts(out,
              "</h1>\n<div class=\"sub\" id=\"cap\"></div>\n"
              "<h2>Timeline</h2>\n<div class=\"sub\">Mouse wheel: zoom around the cursor; drag: "
              "pan; hover: details. <button id=\"reset\">reset zoom</button></div>\n"
              "<div class=\"legend\" id=\"legend\"></div>\n"
              "<div id=\"tlwrap\"><canvas id=\"tl\"></canvas></div>\n<div id=\"tip\"></div>\n"
              "<h2>Memory over time</h2>\n<div>device <select id=\"dev\"></select> "
              "(dashed red: its limit)</div>\n<canvas id=\"mem\"></canvas>\n"
              "<h2>Stages</h2>\n<table>\n<thead><tr><th>stage</th><th>layers</th><th>first "
              "layer</th><th>last layer</th><th>device</th><th>F ms</th><th>B ms</th><th>W "
              "ms</th><th>act</th><th>param</th></tr></thead>\n<tbody id=\"stages\"></tbody>\n"
              "</table>\n<div id=\"cmpsec\" style=\"display:none\">\n<h2>Classic plans</h2>\n"
              "<table>\n<thead><tr><th>plan</th><th>step time</th><th>bubble</th><th>memory</th>"
              "</tr></thead>\n<tbody id=\"cmp\"></tbody>\n</table>\n</div>\n"
              "<script type=\"application/json\" id=\"octo-data\">\n");
  strbuf data = {0};
  html_data(m, r, x, &data);
  report_html_script_json(out, data.data ? data.data : "", data.len);
  strbuf_free(&data);
  strbuf_puts(out, "\n</script>\n<script>\n");
  for (size_t i = 0; i < sizeof html_js / sizeof html_js[0]; i++) {
    strbuf_puts(out, html_js[i]);
    strbuf_putc(out, '\n');
  }
  strbuf_puts(out, "</script>\n</body>\n</html>\n");
}
