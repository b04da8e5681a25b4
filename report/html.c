/* html.c -- the interactive HTML page of a plan (report_html): one self-contained document (inline
 * CSS, vanilla JavaScript, the data as JSON in a <script type="application/json"> element; no
 * network, no external files) with a zoomable, pannable canvas timeline of the simulated step,
 * a memory-over-time chart of a selectable device against its limit, the stage table and, with
 * --compare, a bar chart of the classic plans. The data embeds the JSON report (report_json)
 * unchanged under "report" beside the recorded timeline. Layout in docs/report.md. */
#include <math.h>
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

/* Append a time (seconds) as milliseconds with at most 4 decimals (0.1 us), trailing zeros
 * removed; "0" for NaN. Pre: none. Post: sb holds a JSON number. */
static void html_ms(strbuf *sb, double seconds) {
  char buf[48];
  double ms = seconds * 1e3;
  if (!isfinite(ms)) ms = 0;
  snprintf(buf, sizeof buf, "%.4f", ms);
  size_t n = strlen(buf);
  while (n > 1 && buf[n - 1] == '0') buf[--n] = 0;
  if (buf[n - 1] == '.') buf[--n] = 0;
  strbuf_puts(sb, strcmp(buf, "-0") == 0 ? "0" : buf);
}

/* Append a byte count as MiB with at most 2 decimals (a JSON number). */
static void html_mib(strbuf *sb, double bytes) {
  char buf[48];
  double v = bytes / 1048576.0;
  if (!isfinite(v)) v = 0;
  snprintf(buf, sizeof buf, "%.2f", v);
  size_t n = strlen(buf);
  while (n > 1 && buf[n - 1] == '0') buf[--n] = 0;
  if (buf[n - 1] == '.') buf[--n] = 0;
  strbuf_puts(sb, buf);
}

/* The data object: {"report": <JSON report>, "timeline": {...}}. Pre: r is a recorded SIM_OK
 * run of m. Post: out holds one JSON object (not yet escaped for the script element). */
static void html_data(const ir_module *m, const sim_result *r, const report_extra *x,
                      strbuf *out) {
  int ndev = r->ndevices < m->ndevices ? r->ndevices : m->ndevices;
  strbuf_puts(out, "{\"report\": ");
  report_json(m, r, x, out);
  while (out->len && (out->data[out->len - 1] == '\n')) out->data[--out->len] = 0;
  strbuf_puts(out, ",\n\"timeline\": {\"kinds\": [");
  for (int k = 0; k <= SIM_OP_OPTIM; k++)
    strbuf_printf(out, "%s\"%s\"", k ? ", " : "", rep_op_kind_name(k));
  strbuf_puts(out, "], \"makespan_ms\": ");
  html_ms(out, r->makespan);
  strbuf_printf(out, ", \"devices\": %d, \"static_mib\": [", ndev);
  for (int d = 0; d < ndev; d++) {
    if (d) strbuf_puts(out, ", ");
    html_mib(out, r->dev[d].static_mem);
  }
  strbuf_puts(out, "], \"limit_mib\": [");
  for (int d = 0; d < ndev; d++) {
    if (d) strbuf_puts(out, ", ");
    html_mib(out, rep_mem_limit(m, d));
  }
  strbuf_puts(out, "], \"types\": [");
  for (int d = 0; d < ndev; d++) {
    if (d) strbuf_puts(out, ", ");
    strbuf_json_str(out, m->devices[d].type ? m->devices[d].type : "?");
  }
  /* ops: [kind, device, stage, mb, start_ms, duration_ms, mem_MiB, mem_time_ms,
   * mem_start_MiB (sim_op_event.mem_start: a recomputing stage's B grows at its start)] */
  strbuf_puts(out, "],\n\"ops_fields\": [\"kind\", \"device\", \"stage\", \"mb\", \"start_ms\", "
                   "\"dur_ms\", \"mem_mib\", \"mem_time_ms\", \"mem_start_mib\"],\n\"ops\": [");
  bool first = true;
  for (int i = 0; i < r->nops; i++) {
    const sim_op_event *e = &r->ops[i];
    if (e->device < 0 || e->device >= ndev) continue;
    strbuf_puts(out, first ? "\n[" : ",\n[");
    first = false;
    strbuf_printf(out, "%d,%d,%d,%d,", (int)e->kind, e->device, e->stage, e->mb);
    html_ms(out, e->start);
    strbuf_putc(out, ',');
    html_ms(out, e->end - e->start);
    strbuf_putc(out, ',');
    html_mib(out, e->mem);
    strbuf_putc(out, ',');
    html_ms(out, rep_op_mem_time(e));
    strbuf_putc(out, ',');
    html_mib(out, e->mem_start);
    strbuf_putc(out, ']');
  }
  /* xfers: [kind (0 activation, 1 gradient), from, to, src_stage, dst_stage, mb, start_ms,
   * duration_ms, bytes] */
  strbuf_puts(out, "],\n\"xfers_fields\": [\"grad\", \"from\", \"to\", \"src_stage\", "
                   "\"dst_stage\", \"mb\", \"start_ms\", \"dur_ms\", \"bytes\"],\n\"xfers\": [");
  first = true;
  for (int i = 0; i < r->nxfers; i++) {
    const sim_transfer *t = &r->xfers[i];
    if (t->from < 0 || t->from >= ndev || t->to < 0 || t->to >= ndev) continue;
    strbuf_puts(out, first ? "\n[" : ",\n[");
    first = false;
    strbuf_printf(out, "%d,%d,%d,%d,%d,%d,", t->kind == IR_OP_F ? 0 : 1, t->from, t->to,
                  t->src_stage, t->dst_stage, t->mb);
    html_ms(out, t->start);
    strbuf_putc(out, ',');
    html_ms(out, t->end - t->start);
    strbuf_printf(out, ",%.0f]", isfinite(t->bytes) ? t->bytes : 0.0);
  }
  strbuf_puts(out, "]}}");
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

/* The page's script (no double quotes or backslashes inside, so it is written as is). */
static const char *const html_js[] = {
    "(function(){",
    "var body=document.body;",
    "window.onerror=function(m){body.setAttribute('data-ok','0');"
    "body.setAttribute('data-error',String(m));};",
    "var D=JSON.parse(document.getElementById('octo-data').textContent);",
    "var R=D.report,T=D.timeline,ND=T.devices,OPS=T.ops,XF=T.xfers;",
    "var COL=['#4e79a7','#59a14f','#f28e2b','#17807a','#8c8c8c','#9c5fa0'];",
    "var XCOL=['#1f3b73','#2f6b2a'];",
    "var KN=T.kinds;",
    "function fmtB(b){var u=['B','KiB','MiB','GiB','TiB'],i=0;while(b>=1024&&i<4){b/=1024;i++;}"
    "return (i?b.toFixed(2):b)+' '+u[i];}",
    "function el(t,a,x){var e=document.createElement(t);if(a)e.className=a;"
    "if(x!==undefined)e.textContent=x;return e;}",
    /* per-device op lists sorted by start, for hover */
    "var byDev=[],xbyDev=[];for(var d=0;d<ND;d++){byDev.push([]);xbyDev.push([]);}",
    "OPS.forEach(function(o){byDev[o[1]].push(o);});",
    "XF.forEach(function(x){xbyDev[x[1]].push(x);});",
    "byDev.forEach(function(l){l.sort(function(a,b){return a[4]-b[4];});});",
    "xbyDev.forEach(function(l){l.sort(function(a,b){return a[6]-b[6];});});",
    "var ST=R.stages||[];",
    "function layers(s){var st=ST[s];if(!st)return '';return '['+st.first+', '+st.end+') '+"
    "(st.first_layer||'')+' .. '+(st.last_layer||'');}",
    /* caption */
    "document.getElementById('cap').textContent=ND+' devices, '+OPS.length+' operations, '+"
    "XF.length+' transfers; makespan '+T.makespan_ms.toFixed(3)+' ms, bubble '+"
    "((R.bubble_ratio||0)*100).toFixed(1)+'%; schedule '+R.schedule_method+"
    "(R.oom?'; OUT OF MEMORY':'; memory fits');",
    /* legend */
    "var lg=document.getElementById('legend');KN.forEach(function(k,i){var s=el('span');"
    "var c=el('i');c.style.background=COL[i];s.appendChild(c);s.appendChild("
    "document.createTextNode(k));lg.appendChild(s);});",
    "['activation transfer','gradient transfer'].forEach(function(k,i){var s=el('span');"
    "var c=el('i');c.style.background=XCOL[i];c.style.height='4px';s.appendChild(c);"
    "s.appendChild(document.createTextNode(k));lg.appendChild(s);});",
    /* timeline */
    "var cv=document.getElementById('tl'),ctx=cv.getContext('2d');",
    "var LEFT=70,TOP=4,AX=22,RH=Math.max(8,Math.min(28,Math.floor(640/Math.max(ND,1))));",
    "var BAND=Math.max(2,Math.floor(RH/6));",
    "var span=T.makespan_ms>0?T.makespan_ms:1,v0=0,v1=span,drawn=0;",
    "function W(){return cv.width-LEFT-8;}",
    "function X(t){return LEFT+(t-v0)/(v1-v0)*W();}",
    "function size(){cv.width=Math.max(400,document.getElementById('tlwrap').clientWidth||1200);"
    "cv.height=TOP+ND*RH+AX;}",
    "function step(s){var r=s/10,p=Math.pow(10,Math.floor(Math.log10(r))),f=r/p;"
    "return (f<1.5?1:f<3.5?2:f<7.5?5:10)*p;}",
    "function draw(){ctx.clearRect(0,0,cv.width,cv.height);ctx.font='11px sans-serif';"
    "var w=W(),y0;drawn=0;",
    " for(var d=0;d<ND;d++){y0=TOP+d*RH;ctx.fillStyle=d%2?'#fafafa':'#fff';"
    "ctx.fillRect(LEFT,y0,w,RH);ctx.fillStyle='#222';"
    "if(RH>=10)ctx.fillText('$d'+d+(RH>=20?' '+T.types[d]:''),2,y0+Math.min(RH-2,12));}",
    " ctx.save();ctx.beginPath();ctx.rect(LEFT,0,w,TOP+ND*RH);ctx.clip();",
    " for(var i=0;i<OPS.length;i++){var o=OPS[i],x=X(o[4]),x2=X(o[4]+o[5]);"
    "if(x2<LEFT||x>LEFT+w){continue;}drawn++;var bw=Math.max(1,x2-x);"
    "ctx.fillStyle=COL[o[0]]||'#000';ctx.fillRect(x,TOP+o[1]*RH+1,bw,RH-BAND-2);"
    "if(bw>30&&RH>=14&&o[0]<4){ctx.fillStyle='#fff';var lb='s'+o[2]+':'+o[3];"
    "if(ctx.measureText(lb).width+4>bw)lb=''+o[3];if(ctx.measureText(lb).width+4<=bw)"
    "ctx.fillText(lb,x+2,TOP+o[1]*RH+Math.min(RH-BAND-4,12));}}",
    " for(var j=0;j<XF.length;j++){var q=XF[j],a=X(q[6]),b=X(q[6]+q[7]);"
    "if(b<LEFT||a>LEFT+w)continue;ctx.fillStyle=XCOL[q[0]];"
    "ctx.fillRect(a,TOP+q[1]*RH+RH-BAND,Math.max(1,b-a),BAND-1);}",
    " ctx.restore();var ay=TOP+ND*RH;ctx.strokeStyle='#444';ctx.fillStyle='#444';"
    "ctx.beginPath();ctx.moveTo(LEFT,ay);ctx.lineTo(LEFT+w,ay);ctx.stroke();"
    "var st=step(v1-v0);for(var t=Math.ceil(v0/st)*st;t<=v1+1e-9;t+=st){var tx=X(t);"
    "ctx.beginPath();ctx.moveTo(tx,ay);ctx.lineTo(tx,ay+4);ctx.stroke();"
    "ctx.fillText(+t.toPrecision(6)+'',tx-8,ay+15);}ctx.fillText('ms',2,ay+15);",
    " body.setAttribute('data-drawn-ops',String(drawn));}",
    "function clampView(){var s=v1-v0;if(s>span){s=span;}if(s<span*1e-6)s=span*1e-6;"
    "if(v0<0)v0=0;v1=v0+s;if(v1>span){v1=span;v0=span-s;}}",
    "cv.addEventListener('wheel',function(ev){ev.preventDefault();var r=cv.getBoundingClientRect();"
    "var px=ev.clientX-r.left;if(px<LEFT)px=LEFT;var t=v0+(px-LEFT)/W()*(v1-v0);"
    "var f=Math.exp(ev.deltaY*0.0015);v0=t-(t-v0)*f;v1=t+(v1-t)*f;clampView();draw();},"
    "{passive:false});",
    "var drag=null;cv.addEventListener('mousedown',function(ev){drag={x:ev.clientX,a:v0,b:v1};});",
    "window.addEventListener('mouseup',function(){drag=null;});",
    "var tip=document.getElementById('tip');",
    "function find(l,t,si,di){var lo=0,hi=l.length-1,best=-1;while(lo<=hi){var m=(lo+hi)>>1;"
    "if(l[m][si]<=t){best=m;lo=m+1;}else hi=m-1;}"
    "for(var k=best;k>=0&&k>best-64;k--){if(l[k][si]<=t&&t<=l[k][si]+l[k][di])return l[k];}"
    "return null;}",
    "cv.addEventListener('mousemove',function(ev){var r=cv.getBoundingClientRect();"
    "var px=ev.clientX-r.left,py=ev.clientY-r.top;",
    " if(drag){var dt=(ev.clientX-drag.x)/W()*(drag.b-drag.a);v0=drag.a-dt;v1=drag.b-dt;"
    "clampView();draw();tip.style.display='none';return;}",
    " var d=Math.floor((py-TOP)/RH),t=v0+(px-LEFT)/W()*(v1-v0),s='';",
    " if(px>=LEFT&&d>=0&&d<ND){var tol=(v1-v0)/W();var inBand=py-TOP-d*RH>=RH-BAND-1;",
    "  if(inBand){var q=find(xbyDev[d],t,6,7)||find(xbyDev[d],t-tol,6,7);if(q)s=(q[0]?"
    "'gradient':'activation')+' transfer s'+q[3]+' -> s'+q[4]+' mb'+q[5]+'\\n$d'+q[1]+"
    "' -> $d'+q[2]+'\\nstart '+q[6].toFixed(3)+' ms, duration '+q[7].toFixed(3)+"
    "' ms\\nbytes '+q[8]+' ('+fmtB(q[8])+')';}",
    "  if(!s){var o=find(byDev[d],t,4,5)||find(byDev[d],t-tol,4,5);if(o){s=KN[o[0]]+"
    "(o[0]<4?' stage '+o[2]+' microbatch '+o[3]+'\\nlayers '+layers(o[2]):'')+"
    "'\\n$d'+o[1]+' '+T.types[o[1]]+'\\nstart '+o[4].toFixed(3)+' ms, duration '+"
    "o[5].toFixed(3)+' ms\\nmemory '+fmtB(o[6]*1048576);}}}",
    " if(s){tip.textContent=s;tip.style.display='block';tip.style.left=(ev.clientX+12)+'px';"
    "tip.style.top=(ev.clientY+12)+'px';}else tip.style.display='none';});",
    "cv.addEventListener('mouseleave',function(){tip.style.display='none';});",
    "document.getElementById('reset').onclick=function(){v0=0;v1=span;draw();};",
    /* memory chart */
    "var mc=document.getElementById('mem'),mx=mc.getContext('2d'),sel=document.getElementById"
    "('dev');for(var d2=0;d2<ND;d2++){var op=el('option',null,'$d'+d2+' '+T.types[d2]);"
    "op.value=d2;sel.appendChild(op);}",
    "function memPts(d){var p=[[0,T.static_mib[d],-1]];byDev[d].forEach(function(o,i){"
    "if(KN[o[0]]=='B'||KN[o[0]]=='BW')p.push([o[4],o[8],2*i]);p.push([o[7],o[6],2*i+1]);});"
    "p.sort(function(a,b){return a[0]-b[0]||a[2]-b[2];});return p;}",
    "function drawMem(){var d=+sel.value||0,p=memPts(d),lim=T.limit_mib[d];"
    "mc.width=cv.width;mc.height=220;var L=70,Wd=mc.width-L-8,H=190,top=8;"
    "var pk=0;p.forEach(function(q){if(q[1]>pk)pk=q[1];});"
    /* the limit sets the scale only when it is near the peak (else the curve would be flat) */
    "var show=lim>0&&lim<=2*pk,mmax=show&&lim>pk?lim:pk;if(!(mmax>0))mmax=1;"
    "mmax*=1.05;mx.clearRect(0,0,mc.width,mc.height);mx.font='11px sans-serif';"
    "function xx(t){return L+t/span*Wd;}function yy(v){return top+H-v/mmax*H;}"
    "mx.strokeStyle='#444';mx.strokeRect(L,top,Wd,H);mx.fillStyle='#444';"
    "mx.fillText(fmtB(mmax*1048576),2,top+10);mx.fillText('0',2,top+H);"
    "mx.strokeStyle='#4e79a7';mx.lineWidth=1.5;mx.beginPath();mx.moveTo(xx(0),yy(p[0][1]));"
    "for(var i=1;i<p.length;i++){mx.lineTo(xx(p[i][0]),yy(p[i-1][1]));"
    "mx.lineTo(xx(p[i][0]),yy(p[i][1]));}mx.lineTo(xx(span),yy(p[p.length-1][1]));mx.stroke();"
    "mx.lineWidth=1;if(show){mx.strokeStyle='#c00';mx.setLineDash([5,4]);mx.beginPath();"
    "mx.moveTo(L,yy(lim));mx.lineTo(L+Wd,yy(lim));mx.stroke();mx.setLineDash([]);"
    "mx.fillStyle='#c00';mx.fillText('limit '+fmtB(lim*1048576),L+4,yy(lim)-3);}"
    "else if(lim>0){mx.fillStyle='#c00';mx.fillText('limit '+fmtB(lim*1048576)+"
    "', above the scale',L+4,top+12);}mx.fillStyle='#222';"
    "mx.fillText('$d'+d+' peak '+fmtB(pk*1048576)+', 0 to '+span.toFixed(3)+' ms',L+4,top+H+16);}",
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
    "body.setAttribute('data-ops',String(OPS.length));",
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
