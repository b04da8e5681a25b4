/* print.c -- printer of the textual IR: one statement per line, sections in a fixed order,
 * record fields in table order, values in their canonical text. Deterministic: ir_read accepts
 * every output and reading it back and printing again gives the same bytes. */
#include <math.h>
#include <string.h>

#include "ir.h"

/* Whether c may start an identifier ([A-Za-z_]). */
static bool ident_start(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

/* Whether c may continue an identifier ([A-Za-z0-9_.-]). */
static bool ident_char(unsigned char c) {
  return ident_start(c) || (c >= '0' && c <= '9') || c == '.' || c == '-';
}

/* Whether s reads back as one identifier token: [A-Za-z_][A-Za-z0-9_.-]*, without "->" (the
 * reader ends an identifier before an arrow). */
static bool is_ident(const char *s) {
  if (!ident_start((unsigned char)s[0])) return false;
  for (size_t i = 1; s[i]; i++) {
    if (!ident_char((unsigned char)s[i])) return false;
    if (s[i] == '-' && s[i + 1] == '>') return false;
  }
  return true;
}

/* Append s as a double-quoted string: '"', '\' , newline and tab as \" \\ \n \t, every other
 * byte outside printable ASCII as \xNN. */
static void print_string(strbuf *sb, const char *s) {
  static const char hex[] = "0123456789abcdef";
  strbuf_putc(sb, '"');
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    unsigned char c = *p;
    if (c == '"' || c == '\\') {
      strbuf_putc(sb, '\\');
      strbuf_putc(sb, (char)c);
    } else if (c == '\n') {
      strbuf_puts(sb, "\\n");
    } else if (c == '\t') {
      strbuf_puts(sb, "\\t");
    } else if (c < 0x20 || c >= 0x7f) {
      char esc[4] = {'\\', 'x', hex[c >> 4], hex[c & 15]};
      strbuf_append(sb, esc, 4);
    } else {
      strbuf_putc(sb, (char)c);
    }
  }
  strbuf_putc(sb, '"');
}

/* Append a name that follows '@' or a device index: bare when it is an identifier, else quoted
 * (the reader accepts both). */
static void print_name(strbuf *sb, const char *s) {
  if (s && is_ident(s))
    strbuf_puts(sb, s);
  else
    print_string(sb, s ? s : "");
}

/* The number of quantity dimensions: IR_DIM_NONE and those after it, indexing units[]. */
#define PRINT_NDIMS (IR_DIM_BW + 1)

/* Choose the unit of each quantity dimension of one record from the values it prints: types[i]
 * and vals[i] for i < n, the fields or parameters that are set. Pre: n <= 64. Post: units[d] is
 * ir_unit_for_values over the finite values of dimension d (NULL for IR_DIM_NONE), so that every
 * value of one dimension prints in one unit and reads back exactly. */
static void choose_units(const ir_type *types, const double *vals, int n,
                         const ir_unit_info *units[PRINT_NDIMS]) {
  units[IR_DIM_NONE] = NULL;
  for (int d = IR_DIM_NONE + 1; d < PRINT_NDIMS; d++) {
    double group[64];
    int k = 0;
    for (int i = 0; i < n; i++)
      if (ir_types[types[i]].dim == (ir_dim)d) group[k++] = vals[i];
    units[d] = ir_unit_for_values((ir_dim)d, group, k);
  }
}

/* Append value v of type t, a quantity in its record's unit for the dimension (units[], from
 * choose_units). Valid values go through ir_format_in_unit or ir_format_value; values no valid
 * module holds (NaN, infinities, fractions or out-of-range numbers in whole-number types) are
 * printed plainly so that the text shows them and the reader reports them, instead of being
 * mangled by a conversion to an integer. */
static void print_value(strbuf *sb, ir_type t, double v, const ir_unit_info *units[PRINT_NDIMS]) {
  if (isnan(v)) {
    strbuf_puts(sb, "nan");
    return;
  }
  if (isinf(v)) {
    strbuf_puts(sb, v > 0 ? "inf" : "-inf");
    return;
  }
  if (ir_type_is_integral(t) && (v != floor(v) || fabs(v) > 9007199254740992.0)) {
    strbuf_printf(sb, "%.17g", v);
    return;
  }
  ir_dim d = ir_types[t].dim;
  if (d != IR_DIM_NONE && ir_format_in_unit(sb, v, units[d])) return;
  ir_format_value(sb, t, v); /* plain values; a quantity only if its unit were not exact */
}

/* Append the body "{ k = v, ... }" of record 'rec' of kind r: its set fields in table order,
 * each dimension's quantities in one unit (choose_units); "{ }" when none is set. */
static void print_record(strbuf *sb, ir_record_kind r, const void *rec) {
  int first, count;
  ir_record_fields(r, &first, &count);
  ir_type types[64] = {0};
  double vals[64] = {0};
  int n = 0;
  for (int i = first; i < first + count && n < 64; i++) {
    if (!ir_field_is_set(rec, i) || (r == IR_REC_TRAIN && ir_train_is_free(rec, i))) continue;
    types[n] = ir_fields[i].type;
    vals[n++] = ir_field_get(rec, i);
  }
  const ir_unit_info *units[PRINT_NDIMS];
  choose_units(types, vals, n, units);
  bool any = false;
  strbuf_putc(sb, '{');
  for (int i = first; i < first + count; i++) {
    bool free = r == IR_REC_TRAIN && ir_train_is_free(rec, i);
    if (!ir_field_is_set(rec, i) && !free) continue;
    strbuf_puts(sb, any ? ", " : " ");
    strbuf_puts(sb, ir_fields[i].name);
    strbuf_puts(sb, " = ");
    if (free) strbuf_puts(sb, "free");
    else print_value(sb, ir_fields[i].type, ir_field_get(rec, i), units);
    any = true;
  }
  strbuf_puts(sb, " }");
}

/* Append the parameter body of layer l: its kind's parameters that are set, in table order,
 * each dimension's quantities in one unit (choose_units). */
static void print_params(strbuf *sb, const ir_layer *l) {
  int first = ir_kind_first_param(l->kind), n = ir_kind_nparams(l->kind);
  ir_type types[64] = {0};
  double vals[64] = {0};
  int nset = 0;
  for (int i = first; i < first + n && nset < 64; i++) {
    if (isnan(l->p[i])) continue;
    types[nset] = ir_layer_params[i].type;
    vals[nset++] = l->p[i];
  }
  const ir_unit_info *units[PRINT_NDIMS];
  choose_units(types, vals, nset, units);
  bool any = false;
  strbuf_putc(sb, '{');
  for (int i = first; i < first + n; i++) {
    if (isnan(l->p[i])) continue;
    strbuf_puts(sb, any ? ", " : " ");
    strbuf_puts(sb, ir_layer_params[i].name);
    strbuf_puts(sb, " = ");
    print_value(sb, ir_layer_params[i].type, l->p[i], units);
    any = true;
  }
  strbuf_puts(sb, " }");
}

/* Append " loc("file":line:col)" when debug info is on and the location is known. */
static void print_loc(strbuf *sb, const ir_loc *l, bool debuginfo) {
  if (!debuginfo || !l->file || l->line == 0) return;
  strbuf_puts(sb, " loc(");
  print_string(sb, l->file);
  strbuf_printf(sb, ":%u:%u)", l->line, l->col);
}

void ir_print(const ir_module *m, strbuf *out, const ir_print_opts *o) {
  bool dbg = o && o->debuginfo;
  strbuf_puts(out, "module @");
  print_name(out, m->name);
  strbuf_puts(out, " {\n");

  for (int i = 0; i < m->nprofiles; i++) {
    strbuf_puts(out, "  profile ");
    print_string(out, m->profiles[i]);
    strbuf_putc(out, '\n');
  }

  strbuf_puts(out, "  train ");
  print_record(out, IR_REC_TRAIN, &m->train);
  strbuf_putc(out, '\n');

  if (m->cluster_name) {
    strbuf_puts(out, "  cluster @");
    print_name(out, m->cluster_name);
    strbuf_putc(out, ' ');
    print_record(out, IR_REC_CLUSTER, &m->cluster);
    strbuf_putc(out, '\n');
  }
  if (m->intra.set) {
    strbuf_puts(out, "  link intra ");
    print_record(out, IR_REC_LINK, &m->intra);
    strbuf_putc(out, '\n');
  }
  if (m->inter.set) {
    strbuf_puts(out, "  link inter ");
    print_record(out, IR_REC_LINK, &m->inter);
    strbuf_putc(out, '\n');
  }

  for (int i = 0; i < m->ndevices; i++) {
    const ir_device *dv = &m->devices[i];
    strbuf_printf(out, "  device $d%d ", i);
    print_name(out, dv->type);
    strbuf_putc(out, ' ');
    print_record(out, IR_REC_DEVICE, &dv->rec);
    print_loc(out, &dv->loc, dbg);
    strbuf_putc(out, '\n');
  }

  for (int i = 0; i < m->nlinks; i++) {
    const ir_link *lk = &m->links[i];
    strbuf_printf(out, "  link $d%d -> $d%d ", lk->from, lk->to);
    print_record(out, IR_REC_LINK, &lk->rec);
    strbuf_putc(out, '\n');
  }

  for (int i = 0; i < m->nlayers; i++) {
    const ir_layer *l = &m->layers[i];
    strbuf_printf(out, "  layer %%%d ", i);
    print_string(out, l->name ? l->name : "");
    strbuf_putc(out, ' ');
    strbuf_puts(out, (unsigned)l->kind < IR_KIND_COUNT ? ir_kinds[l->kind].name : "?");
    strbuf_putc(out, ' ');
    if ((unsigned)l->kind < IR_KIND_COUNT)
      print_params(out, l);
    else
      strbuf_puts(out, "{ }");
    if (l->cost.set) {
      strbuf_puts(out, " cost ");
      print_record(out, IR_REC_COST, &l->cost);
    }
    for (int k = 0; k < l->ntcosts; k++) {
      strbuf_puts(out, " cost ");
      print_string(out, l->tcosts[k].type);
      strbuf_putc(out, ' ');
      print_record(out, IR_REC_COST, &l->tcosts[k].cost);
    }
    print_loc(out, &l->loc, dbg);
    strbuf_putc(out, '\n');
  }

  for (int i = 0; i < m->nstages; i++) {
    const ir_stage *s = &m->stages[i];
    strbuf_printf(out, "  stage @s%d = [%%%d, %%%d)", i, s->first, s->end);
    const char *sep = " { ";
    if (s->recompute != IR_RECOMPUTE_NONE || s->recompute_layers != 0) {
      strbuf_printf(out, "%srecompute = %s", sep, ir_enum_name(IR_T_RECOMPUTE, (int)s->recompute));
      if (s->recompute_layers != 0) strbuf_printf(out, ", recompute_layers = %d", s->recompute_layers);
      sep = ", ";
    }
    if (s->offload) strbuf_printf(out, "%soffload = true", sep), sep = ", ";
    if (sep[1] == ' ') strbuf_puts(out, " }");
    print_loc(out, &s->loc, dbg);
    strbuf_putc(out, '\n');
  }
  for (int i = 0; i < m->nstages; i++)
    if (m->stages[i].device >= 0)
      strbuf_printf(out, "  place @s%d on $d%d\n", i, m->stages[i].device);

  if (m->schedules) {
    if (m->schedule_method) {
      strbuf_puts(out, "  schedule method ");
      print_string(out, m->schedule_method);
      strbuf_putc(out, '\n');
    }
    for (int i = 0; i < m->ndevices; i++) {
      const ir_schedule *s = &m->schedules[i];
      strbuf_printf(out, "  schedule $d%d {", i);
      for (int j = 0; j < s->nops; j++) {
        const ir_op *op = &s->ops[j];
        strbuf_printf(out, "%s%s @s%d %d", j ? ", " : " ",
                      (unsigned)op->kind < IR_OP_COUNT ? ir_op_names[op->kind] : "?", op->stage,
                      op->mb);
      }
      strbuf_puts(out, " }");
      print_loc(out, &s->loc, dbg);
      strbuf_putc(out, '\n');
    }
  }

  if (m->predict.set) {
    strbuf_puts(out, "  predict ");
    print_record(out, IR_REC_PREDICT, &m->predict);
    strbuf_putc(out, '\n');
  }
  for (int i = 0; i < m->ndevices; i++) {
    if (!m->devices[i].predict.set) continue;
    strbuf_printf(out, "  predict $d%d ", i);
    print_record(out, IR_REC_DEVPREDICT, &m->devices[i].predict);
    strbuf_putc(out, '\n');
  }
  strbuf_puts(out, "}\n");
}

void ir_print_file(const ir_module *m, FILE *f, const ir_print_opts *o) {
  strbuf sb = {0};
  ir_print(m, &sb, o);
  fwrite(strbuf_cstr(&sb), 1, sb.len, f);
  strbuf_free(&sb);
}
