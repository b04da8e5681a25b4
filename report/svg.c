/* svg.c -- the SVG timeline of a simulated step (report_svg): a caption with the model, makespan
 * and bubble ratio; one row per device, labelled with the device and its type, with its
 * operations as coloured boxes ("s<stage>:<microbatch>", or the microbatch, inside when it fits;
 * idle time left white), its sends as a thin band under the row; a transfer between adjacent
 * rows as an arrow from the sender's row to the receiver's, one between rows further apart as a
 * short tick out of the sender's row and one into the receiver's (never drawn across the rows
 * in between); the peak memory at the row end; a time axis in ms and a legend. Self-contained,
 * fixed width. Operations under SVG_MIN_BOX px, and transfers too dense for arrows, are merged
 * per pixel column (svg_bins), so the file's size follows the picture, not the plan. Legend in
 * docs/report.md. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "report_impl.h"

/* Geometry of the picture (pixels). */
enum {
  SVG_WIDTH = 1600,   /* whole picture */
  SVG_LEFT = 70,      /* row labels */
  SVG_RIGHT = 200,    /* peak memory text after the rows */
  SVG_TOP = 64,       /* caption */
  SVG_ROW = 30,       /* height of a device row */
  SVG_GAP = 24,       /* space between rows (send band and transfer arrows) */
  SVG_BAND = 4,       /* height of the send band under a row */
  SVG_TICK = 8,       /* length of the tick of a transfer between rows that are not adjacent */
  SVG_MIN_BOX = 3,    /* operations at least this wide are boxes of their own (tooltip, label);
                         narrower ones are merged per pixel column (svg_bins) */
  SVG_XFER_SPACING = 4, /* arrows are drawn when the transfers leave room for them: at most one
                           per SVG_XFER_SPACING px of plot per row on average; else only the
                           send bands, merged per pixel column */
};

/* Colours of activation (F) and gradient (B) transfers. */
static const char *const xfer_color[] = {"#1f3b73", "#2f6b2a"};

/* Width of 11 px text in the sans-serif font, per character (an estimate for layout). */
#define SVG_CHAR_W 6.2

/* Append s escaped for XML text and attribute values. */
static void svg_escape(strbuf *sb, const char *s) {
  for (const unsigned char *p = (const unsigned char *)s; p && *p; p++) {
    switch (*p) {
    case '&': strbuf_puts(sb, "&amp;"); break;
    case '<': strbuf_puts(sb, "&lt;"); break;
    case '>': strbuf_puts(sb, "&gt;"); break;
    case '"': strbuf_puts(sb, "&quot;"); break;
    case '\'': strbuf_puts(sb, "&apos;"); break;
    default:
      /* XML 1.0 forbids most control characters even as references */
      if (*p < 0x20 && *p != '\t' && *p != '\n')
        strbuf_putc(sb, '?');
      else
        strbuf_putc(sb, (char)*p);
    }
  }
}

/* A "nice" tick step (1, 2 or 5 times a power of ten) giving about 'want' ticks over 'span'. */
static double nice_step(double span, int want) {
  if (!(span > 0)) return 1;
  double raw = span / want, p = pow(10, floor(log10(raw)));
  double f = raw / p;
  return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
}

/* Drawing context: scale and row positions. */
typedef struct svg_ctx {
  double t0;     /* time at the left edge of the plot (seconds) */
  double scale;  /* pixels per second */
  int ndev;      /* rows */
} svg_ctx;

/* x of time t (seconds). */
static double svg_x(const svg_ctx *c, double t) { return SVG_LEFT + (t - c->t0) * c->scale; }
/* y of the top of device row d. */
static double svg_row_y(int d) { return SVG_TOP + d * (SVG_ROW + SVG_GAP); }

/* Operations (or transfers) too narrow for boxes of their own, merged per pixel column: for each
 * row and one-pixel column of the plot, how much of the column each kind covers. A column is
 * painted in the kind that covers most of it when its kinds cover half of it or more, else left
 * white, so the picture has at most one box per row and column whatever the plan's size. */
typedef struct svg_bins {
  int nrows, nbins, nkinds; /* rows (devices), columns (plot pixels), kinds */
  double *cov;  /* [row][column][kind]: covered width, px */
  int *count;   /* [row][kind]: operations merged */
} svg_bins;

/* Bins for nrows rows (0: none) of nbins columns and nkinds kinds, all empty. */
static svg_bins svg_bins_new(int nrows, int nbins, int nkinds) {
  svg_bins b = {nrows, nbins, nkinds, NULL, NULL};
  b.cov = xcalloc((size_t)nrows * (size_t)nbins * (size_t)nkinds + 1, sizeof *b.cov);
  b.count = xcalloc((size_t)nrows * (size_t)nkinds + 1, sizeof *b.count);
  return b;
}

/* Free what b holds. */
static void svg_bins_free(svg_bins *b) {
  free(b->cov);
  free(b->count);
}

/* Add an item of kind k on row 'row' from x (px from the plot's left edge) over w px (at least
 * half a pixel, as a lone box would be drawn). Pre: row and k in range. */
static void svg_bins_add(svg_bins *b, int row, int k, double x, double w) {
  if (w < 0.5) w = 0.5;
  double x1 = x + w;
  if (x < 0) x = 0;
  if (x1 > b->nbins) x1 = b->nbins;
  b->count[row * b->nkinds + k]++;
  for (int col = (int)floor(x); col < b->nbins && col < x1; col++) {
    double lo = x > col ? x : col, hi = x1 < col + 1 ? x1 : col + 1;
    if (hi > lo) b->cov[((size_t)row * b->nbins + col) * b->nkinds + k] += hi - lo;
  }
}

/* Write row 'row' of b: per kind present, one <path class="merged"> of the columns painted in it
 * (runs of adjacent columns as one rectangle, y to y + h), with a tooltip "$dN <name>: <count>
 * <what>, merged per pixel column". */
static void svg_bins_write(const svg_bins *b, int row, double y, int h, const char *const *fills,
                           const char *const *names, const char *what, strbuf *out) {
  int *paint = xmalloc(sizeof *paint * ((size_t)b->nbins + 1));
  for (int col = 0; col < b->nbins; col++) {
    const double *cv = &b->cov[((size_t)row * b->nbins + col) * b->nkinds];
    double total = 0;
    int best = 0;
    for (int k = 0; k < b->nkinds; k++) {
      total += cv[k];
      if (cv[k] > cv[best]) best = k;
    }
    paint[col] = total >= 0.5 ? best : -1;
  }
  for (int k = 0; k < b->nkinds; k++) {
    if (!b->count[row * b->nkinds + k]) continue;
    bool any = false;
    int last = 0; /* left edge of the previous run: later runs move relative to it */
    for (int col = 0; col < b->nbins;) {
      if (paint[col] != k) {
        col++;
        continue;
      }
      int end = col;
      while (end < b->nbins && paint[end] == k) end++;
      if (!any)
        strbuf_printf(out, "<path class=\"merged\" fill=\"%s\" d=\"M%d %.0f", fills[k],
                      SVG_LEFT + col, y);
      else
        strbuf_printf(out, "m%d 0", col - last);
      strbuf_printf(out, "h%dv%dh%dz", end - col, h, col - end);
      any = true;
      last = col;
      col = end;
    }
    if (any)
      strbuf_printf(out, "\"><title>$d%d %s: %d %s, merged per pixel column</title></path>\n",
                    row, names[k], b->count[row * b->nkinds + k], what);
  }
  free(paint);
}

/* The arrowhead markers and the shared style. */
static void svg_defs(strbuf *sb) {
  strbuf_puts(sb, "<defs>\n");
  for (int k = 0; k < 2; k++)
    strbuf_printf(sb,
                  "  <marker id=\"arrow-%s\" viewBox=\"0 0 6 6\" refX=\"6\" refY=\"3\" "
                  "markerWidth=\"5\" markerHeight=\"5\" orient=\"auto\"><path d=\"M0,0 L6,3 "
                  "L0,6 z\" fill=\"%s\"/></marker>\n",
                  k ? "grad" : "act", xfer_color[k]);
  strbuf_puts(sb, "</defs>\n<style>text { font-family: sans-serif; } "
                  ".mb { font-size: 11px; fill: #fff; text-anchor: middle; } "
                  ".type { font-size: 10px; fill: #555; } "
                  ".op { stroke: #fff; stroke-width: 0.5; }</style>\n");
}

void report_svg(const ir_module *m, const sim_result *r, strbuf *out) {
  svg_ctx c;
  c.ndev = r->ndevices < m->ndevices ? r->ndevices : m->ndevices;
  c.t0 = 0;
  double span = r->makespan > 0 ? r->makespan : 1e-3;
  double plot_w = SVG_WIDTH - SVG_LEFT - SVG_RIGHT;
  c.scale = plot_w / span;
  double rows_end = svg_row_y(c.ndev);
  double axis_y = rows_end - SVG_GAP + 14;
  double legend_y = axis_y + 36;
  int height = (int)legend_y + 50;

  strbuf_printf(out,
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
                "viewBox=\"0 0 %d %d\">\n",
                SVG_WIDTH, height, SVG_WIDTH, height);
  svg_defs(out);
  strbuf_printf(out, "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#fff\"/>\n",
                SVG_WIDTH, height);

  /* caption */
  strbuf_puts(out, "<g id=\"caption\">\n<text x=\"10\" y=\"24\" font-size=\"16\" "
                   "font-weight=\"bold\">");
  svg_escape(out, m->name);
  strbuf_printf(out, ": makespan %.3f ms, bubble ratio %.1f%%</text>\n", r->makespan * 1e3,
                r->bubble * 100);
  double lb = rep_lower_bound(r);
  strbuf_printf(out,
                "<text x=\"10\" y=\"44\" font-size=\"12\" fill=\"#444\">%d device%s, %lld "
                "microbatch%s, schedule ",
                c.ndev, c.ndev == 1 ? "" : "s", (long long)m->train.microbatches,
                m->train.microbatches == 1 ? "" : "es");
  svg_escape(out, rep_schedule_method(m));
  strbuf_printf(out, "; lower bound %.3f ms", lb * 1e3);
  if (lb > 0 && r->makespan > 0) strbuf_printf(out, " (makespan %.2fx)", r->makespan / lb);
  strbuf_puts(out, r->fits ? "; memory fits" : "; OUT OF MEMORY");
  strbuf_puts(out, "</text>\n</g>\n");

  /* rows: label, empty (idle) background, peak memory */
  strbuf_puts(out, "<g id=\"rows\">\n");
  strbuf label = {0};
  for (int d = 0; d < c.ndev; d++) {
    double y = svg_row_y(d), lim = rep_mem_limit(m, d);
    bool oom = lim > 0 && r->dev[d].peak_mem > lim;
    strbuf_printf(out,
                  "<text x=\"10\" y=\"%.2f\" font-size=\"13\" font-weight=\"bold\">$d%d</text>\n"
                  "<text class=\"type\" x=\"10\" y=\"%.2f\"",
                  y + 13, d, y + SVG_ROW - 3);
    /* a long type name is squeezed into the label column */
    const char *type = m->devices[d].type ? m->devices[d].type : "?";
    if (SVG_CHAR_W * 10 / 11 * (double)strlen(type) > SVG_LEFT - 14)
      strbuf_printf(out, " textLength=\"%d\" lengthAdjust=\"spacingAndGlyphs\"", SVG_LEFT - 14);
    strbuf_putc(out, '>');
    svg_escape(out, type);
    strbuf_printf(out,
                  "</text>\n<rect class=\"row\" x=\"%d\" y=\"%.2f\" width=\"%.2f\" "
                  "height=\"%d\" fill=\"#fff\" stroke=\"#bbb\"/>\n",
                  SVG_LEFT, y, plot_w, SVG_ROW);
    label.len = 0;
    strbuf_puts(&label, "peak ");
    rep_bytes(&label, r->dev[d].peak_mem);
    if (lim > 0) {
      strbuf_puts(&label, " / ");
      rep_bytes(&label, lim);
    }
    if (oom) strbuf_puts(&label, " OOM");
    strbuf_printf(out, "<text x=\"%.2f\" y=\"%.2f\" font-size=\"11\"%s", SVG_LEFT + plot_w + 8,
                  y + 12, oom ? " fill=\"#c00\"" : "");
    /* A label wider than the column (large sizes, OOM) is squeezed to fit the picture. */
    double room = SVG_RIGHT - 8 - 4;
    if (SVG_CHAR_W * (double)label.len > room)
      strbuf_printf(out, " textLength=\"%.0f\" lengthAdjust=\"spacingAndGlyphs\"", room);
    strbuf_putc(out, '>');
    svg_escape(out, strbuf_cstr(&label));
    strbuf_puts(out, "</text>\n");
    /* the stages of the row, under the peak: "stages 0 8 16 24" */
    label.len = 0;
    for (int s = 0; s < m->nstages; s++)
      if (m->stages[s].device == d) strbuf_printf(&label, " %d", s);
    if (label.len) {
      strbuf_printf(out, "<text class=\"stages\" x=\"%.2f\" y=\"%.2f\" font-size=\"10\" "
                    "fill=\"#555\"", SVG_LEFT + plot_w + 8, y + SVG_ROW - 3);
      if (SVG_CHAR_W * 10 / 11 * (double)(label.len + 6) > room)
        strbuf_printf(out, " textLength=\"%.0f\" lengthAdjust=\"spacingAndGlyphs\"", room);
      strbuf_printf(out, ">stages%s</text>\n", strbuf_cstr(&label));
    }
  }
  strbuf_free(&label);
  strbuf_puts(out, "</g>\n");

  /* grid and axis */
  double step = nice_step(span, 12);
  strbuf_puts(out, "<g id=\"axis\" font-size=\"11\" fill=\"#444\">\n");
  for (int i = 0;; i++) {
    double t = i * step;
    if (t > span * (1 + 1e-9)) break;
    double x = svg_x(&c, t);
    strbuf_printf(out,
                  "<line x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#e4e4e4\"/>\n"
                  "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#444\"/>\n"
                  "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\">%g</text>\n",
                  x, SVG_TOP - 6, x, axis_y, x, axis_y, x, axis_y + 5, x, axis_y + 17,
                  t * 1e3);
  }
  strbuf_printf(out,
                "<line x1=\"%d\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#444\"/>\n"
                "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"start\">ms</text>\n</g>\n",
                SVG_LEFT, axis_y, svg_x(&c, span), axis_y, svg_x(&c, span) + 20, axis_y + 17);

  /* operations: boxes of their own when at least SVG_MIN_BOX px wide, else merged per pixel
   * column (a 64-device, 512-microbatch plan has 200,000 operations under half a pixel) */
  int nbins = (int)ceil(plot_w);
  svg_bins ops = svg_bins_new(c.ndev, nbins, SIM_OP_END);
  bool present[SIM_OP_END] = {false};
  strbuf_puts(out, "<g id=\"ops\">\n");
  for (int i = 0; i < r->nops; i++) {
    const sim_op_event *e = &r->ops[i];
    /* the host copies run on the PCIe link, beside the compute this row shows */
    if (e->device < 0 || e->device >= c.ndev || e->kind < 0 || (int)e->kind >= SIM_OP_END ||
        rep_op_host_copy((int)e->kind))
      continue;
    present[e->kind] = true;
    const rep_op_kind_info *st = rep_op_kind(e->kind);
    double x = svg_x(&c, e->start), w = (e->end - e->start) * c.scale;
    if (w < SVG_MIN_BOX) {
      svg_bins_add(&ops, e->device, e->kind, x - SVG_LEFT, w);
      continue;
    }
    double y = svg_row_y(e->device);
    strbuf_printf(out, "<rect class=\"op\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%d\" "
                       "fill=\"%s\"><title>",
                  x, y, w, SVG_ROW, st->fill);
    if (e->kind < IR_OP_COUNT)
      strbuf_printf(out, "%s s%d mb%d", st->name, e->stage, e->mb);
    else
      strbuf_puts(out, st->name);
    strbuf_printf(out, ": %.3f to %.3f ms</title></rect>\n", e->start * 1e3, e->end * 1e3);
    /* "s<stage>:<mb>" where it fits, else the microbatch alone */
    char label[40];
    if (e->kind < IR_OP_COUNT) {
      snprintf(label, sizeof label, "s%d:%d", e->stage, e->mb);
      if (w < 7.0 * (double)strlen(label) + 4) snprintf(label, sizeof label, "%d", e->mb);
    } else {
      snprintf(label, sizeof label, "%s", st->tag);
    }
    if (w >= 7.0 * (double)strlen(label) + 4)
      strbuf_printf(out, "<text class=\"mb\" x=\"%.2f\" y=\"%.2f\">%s</text>\n", x + w / 2,
                    y + SVG_ROW / 2.0 + 4, label);
  }
  const char *fills[SIM_OP_END], *names[SIM_OP_END];
  for (int k = 0; k < SIM_OP_END; k++) {
    fills[k] = rep_op_kind(k)->fill;
    names[k] = rep_op_kind(k)->name;
  }
  for (int d = 0; d < c.ndev; d++)
    svg_bins_write(&ops, d, svg_row_y(d), SVG_ROW, fills, names,
                   "operations narrower than 3 px", out);
  svg_bins_free(&ops);
  strbuf_puts(out, "</g>\n");

  /* transfers: the sender's send band, then an arrow from sender to receiver when their rows
   * are adjacent, else a tick out of the sender's row and one into the receiver's; when they
   * are too dense for arrows, only the send bands, merged per pixel column */
  int nx = 0;
  for (int i = 0; i < r->nxfers; i++) {
    const sim_transfer *x = &r->xfers[i];
    nx += x->from >= 0 && x->from < c.ndev && x->to >= 0 && x->to < c.ndev;
  }
  bool dense = nx > (double)c.ndev * plot_w / SVG_XFER_SPACING;
  svg_bins bands = svg_bins_new(dense ? c.ndev : 0, nbins, 2);
  strbuf_printf(out, "<g id=\"transfers\"%s>\n", dense ? " class=\"dense\"" : "");
  for (int i = 0; i < r->nxfers; i++) {
    const sim_transfer *x = &r->xfers[i];
    if (x->from < 0 || x->from >= c.ndev || x->to < 0 || x->to >= c.ndev) continue;
    int k = x->kind == IR_OP_F ? 0 : 1;
    double x1 = svg_x(&c, x->start), x2 = svg_x(&c, x->end);
    if (dense) {
      svg_bins_add(&bands, x->from, k, x1 - SVG_LEFT, x2 - x1);
      continue;
    }
    double w = x2 - x1 < 0.5 ? 0.5 : x2 - x1;
    strbuf_printf(out,
                  "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%d\" fill=\"%s\" "
                  "opacity=\"0.8\"/>\n",
                  x1, svg_row_y(x->from) + SVG_ROW + 2, w, SVG_BAND, xfer_color[k]);
    bool down = x->to > x->from;
    double y1 = down ? svg_row_y(x->from) + SVG_ROW + 2 + SVG_BAND : svg_row_y(x->from);
    double y2 = down ? svg_row_y(x->to) : svg_row_y(x->to) + SVG_ROW;
    bool adjacent = x->to - x->from == 1 || x->from - x->to == 1;
    /* (x, y) pairs of the lines: one arrow, or the sender's tick and the receiver's */
    double seg[2][4] = {{x1, y1, x2, y2}, {0, 0, 0, 0}};
    if (!adjacent) {
      double dir = down ? 1 : -1;
      seg[0][2] = x1;
      seg[0][3] = y1 + dir * SVG_TICK;
      seg[1][0] = x2;
      seg[1][1] = y2 - dir * SVG_TICK;
      seg[1][2] = x2;
      seg[1][3] = y2;
    }
    for (int s = 0; s < (adjacent ? 1 : 2); s++) {
      strbuf_printf(out,
                    "<line class=\"%s\" x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" "
                    "stroke=\"%s\" stroke-width=\"1\" opacity=\"0.75\" "
                    "marker-end=\"url(#arrow-%s)\"><title>%s s%d-&gt;s%d mb%d ($d%d to $d%d",
                    adjacent ? "arrow" : s ? "tick-in" : "tick-out", seg[s][0], seg[s][1],
                    seg[s][2], seg[s][3], xfer_color[k], k ? "grad" : "act", k ? "grad" : "act",
                    x->src_stage, x->dst_stage, x->mb, x->from, x->to);
      strbuf_printf(out, "): %.3f to %.3f ms</title></line>\n", x->start * 1e3, x->end * 1e3);
    }
  }
  for (int d = 0; d < bands.nrows; d++) {
    static const char *const band_names[] = {"activation sends", "gradient sends"};
    svg_bins_write(&bands, d, svg_row_y(d) + SVG_ROW + 2, SVG_BAND, xfer_color, band_names,
                   "transfers", out);
  }
  svg_bins_free(&bands);
  strbuf_puts(out, "</g>\n");

  /* legend */
  strbuf_puts(out, "<g id=\"legend\" font-size=\"12\">\n");
  double lx = SVG_LEFT;
  /* F, B, W, BW always; the end-of-step kinds the timeline has */
  for (int k = 0; k < SIM_OP_END; k++) {
    if (k >= IR_OP_COUNT && !present[k]) continue;
    const rep_op_kind_info *st = rep_op_kind(k);
    strbuf_printf(out,
                  "<rect x=\"%.2f\" y=\"%.2f\" width=\"14\" height=\"14\" fill=\"%s\"/>"
                  "<text x=\"%.2f\" y=\"%.2f\">%s</text>\n",
                  lx, legend_y - 11, st->fill, lx + 19, legend_y, st->legend);
    lx += 26 + 7.0 * (double)strlen(st->legend);
  }
  static const char *const xfer_legend[] = {"activation transfer", "gradient transfer"};
  /* label key and tick legend on a line of their own */
  strbuf_printf(out,
                "<text x=\"%d\" y=\"%.2f\" fill=\"#444\">boxes: s&lt;stage&gt;:&lt;microbatch&gt;"
                " (the microbatch alone when narrow; operations under %d px merged per pixel "
                "column); %s</text>\n",
                SVG_LEFT, legend_y + 20, SVG_MIN_BOX,
                dense ? "transfers too dense for arrows: only the send bands"
                      : "a transfer between rows that are not adjacent: a tick out of the "
                        "sender's row and one into the receiver's");
  for (int k = 0; k < 2; k++) {
    strbuf_printf(out,
                  "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"%s\" "
                  "stroke-width=\"2\" marker-end=\"url(#arrow-%s)\"/>"
                  "<text x=\"%.2f\" y=\"%.2f\">%s</text>\n",
                  lx, legend_y - 4, lx + 16, legend_y - 4, xfer_color[k], k ? "grad" : "act",
                  lx + 21, legend_y, xfer_legend[k]);
    lx += 28 + 7.0 * (double)strlen(xfer_legend[k]);
  }
  strbuf_printf(out,
                "<rect x=\"%.2f\" y=\"%.2f\" width=\"14\" height=\"14\" fill=\"#fff\" "
                "stroke=\"#bbb\"/><text x=\"%.2f\" y=\"%.2f\">idle</text>\n",
                lx, legend_y - 11, lx + 19, legend_y);
  strbuf_puts(out, "</g>\n</svg>\n");
}
