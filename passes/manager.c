/* manager.c -- the pass registry generated from passes.def and the options declared in
 * options.def, the pipeline text parser and printer, typed access to pass options (their types,
 * defaults and ranges from options.def), and the pass manager that runs a pipeline with
 * verification and IR dumps and keeps the passes' figures (pass_results). */
#include <ctype.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "passes.h"

/* ---- Registry -----------------------------------------------------------------------------*/

const pass_info pass_registry[PASS_ID_COUNT] = {
#define PASS(ID, NAME, SUMMARY, RUN) {PASS_ID_##ID, NAME, SUMMARY, RUN},
#include "passes.def"
#undef PASS
};

/* Every declared option (options.def), its pass's rows in --list-passes order. */
static const pass_option_info pass_option_rows[] = {
#define PASS_OPTION(PASS, KEY, TYPE, SYNTAX, DEFAULT, MIN, MAX, HELP) \
  {PASS_ID_##PASS, #KEY, PASS_OPT_##TYPE, SYNTAX, DEFAULT, MIN, MAX, HELP},
#include "options.def"
#undef PASS_OPTION
};
enum { NOPTION_ROWS = sizeof pass_option_rows / sizeof pass_option_rows[0] };

/* Passes that libraries above this one registered (pass_register_extra). */
static const pass_info *extra_passes;
static int nextra_passes;

void pass_register_extra(const pass_info *passes, int n) {
  extra_passes = passes;
  nextra_passes = n;
}

int pass_count(void) { return PASS_ID_COUNT + nextra_passes; }

const pass_info *pass_at(int i) {
  return i < PASS_ID_COUNT ? &pass_registry[i] : &extra_passes[i - PASS_ID_COUNT];
}

const pass_info *pass_lookup(const char *name) {
  for (int i = 0; i < pass_count(); i++)
    if (strcmp(pass_at(i)->name, name) == 0) return pass_at(i);
  return NULL;
}

const char *pass_suggest(const char *name) {
  suggest s;
  suggest_init(&s, name);
  for (int i = 0; i < pass_count(); i++) suggest_add(&s, pass_at(i)->name);
  return suggest_result(&s);
}

/* The next declared option of p after 'prev' (NULL: its first), or NULL. */
static const pass_option_info *next_option(const pass_info *p, const pass_option_info *prev) {
  for (const pass_option_info *o = prev ? prev + 1 : pass_option_rows;
       o < pass_option_rows + NOPTION_ROWS; o++)
    if (o->pass == p->id) return o;
  return NULL;
}

const pass_option_info *pass_option_find(const pass_info *p, const char *key) {
  for (const pass_option_info *o = next_option(p, NULL); o; o = next_option(p, o))
    if (strcmp(o->key, key) == 0) return o;
  return NULL;
}

bool pass_declares_option(const pass_info *p, const char *key, size_t len) {
  for (const pass_option_info *o = next_option(p, NULL); o; o = next_option(p, o))
    if (strlen(o->key) == len && memcmp(o->key, key, len) == 0) return true;
  return false;
}

void pass_option_names(const pass_info *p, strbuf *sb) {
  for (const pass_option_info *o = next_option(p, NULL); o; o = next_option(p, o))
    strbuf_printf(sb, "%s%s", o == next_option(p, NULL) ? "" : ", ", o->key);
}

bool pass_option_suggest(const pass_info *p, const char *key, strbuf *sb) {
  suggest s;
  suggest_init(&s, key);
  for (const pass_option_info *o = next_option(p, NULL); o; o = next_option(p, o))
    suggest_add(&s, o->key);
  if (!suggest_result(&s)) return false;
  strbuf_puts(sb, suggest_result(&s));
  return true;
}

/* Append the word of index i of a choice's syntax ("a|b|c"). */
static void choice_word(strbuf *sb, const char *syntax, int i) {
  for (; i > 0 && syntax; i--) {
    syntax = strchr(syntax, '|');
    if (syntax) syntax++;
  }
  if (syntax) strbuf_append(sb, syntax, strcspn(syntax, "|"));
}

/* Append option o's default as its help shows it. */
static void default_text(strbuf *sb, const pass_option_info *o) {
  char num[40];
  switch (o->type) {
  case PASS_OPT_BOOL: strbuf_puts(sb, o->def != 0 ? "true" : "false"); break;
  case PASS_OPT_CHOICE: choice_word(sb, o->syntax, (int)o->def); break;
  default:
    fmt_shortest_scaled(num, o->def, 1.0);
    strbuf_puts(sb, num);
    break;
  }
}

void pass_list(FILE *out) {
  size_t width = 0;
  for (int i = 0; i < pass_count(); i++)
    if (strlen(pass_at(i)->name) > width) width = strlen(pass_at(i)->name);
  fprintf(out, "Available passes:\n");
  strbuf help = {0};
  for (int i = 0; i < pass_count(); i++) {
    const pass_info *p = pass_at(i);
    fprintf(out, "  %-*s  %s\n", (int)width, p->name, p->summary);
    for (const pass_option_info *o = next_option(p, NULL); o; o = next_option(p, o)) {
      help.len = 0;
      for (const char *h = o->help; *h;) {
        const char *at = strstr(h, "{D}");
        size_t n = at ? (size_t)(at - h) : strlen(h);
        strbuf_append(&help, h, n);
        h += n;
        if (at) {
          default_text(&help, o);
          h += 3;
        }
      }
      fprintf(out, "  %-*s    %s=%s: %s\n", (int)width, "", o->key, o->syntax, strbuf_cstr(&help));
    }
  }
  strbuf_free(&help);
}

/* ---- Options --------------------------------------------------------------------------------*/

const pass_option *pass_opt_find(const pass_options *opts, const char *key) {
  if (!opts) return NULL;
  for (int i = 0; i < opts->count; i++)
    if (strcmp(opts->items[i].key, key) == 0) return &opts->items[i];
  return NULL;
}

const char *pass_opt_str(const pass_options *opts, const char *key, const char *def) {
  const pass_option *o = pass_opt_find(opts, key);
  return o ? o->value : def;
}

/* Report a malformed value of option o. */
static void bad_value(diag_engine *d, const pass_options *opts, const pass_option *o,
                      const char *expected) {
  diag_error(d, o->value_loc, "invalid value '%s' for option '%s' of pass '%s': expected %s",
             o->value, o->key, opts->pass ? opts->pass : "?", expected);
}

/* The declaration of option 'key' of opts's pass, which must have type t; NULL after reporting
 * an internal error (a pass reading an option options.def does not declare so). */
static const pass_option_info *declared(const pass_options *opts, const char *key,
                                        pass_opt_type t, diag_engine *d) {
  const pass_info *p = opts && opts->pass ? pass_lookup(opts->pass) : NULL;
  const pass_option_info *r = p ? pass_option_find(p, key) : NULL;
  if (!r || r->type != t) {
    diag_error(d, opts ? opts->loc : diag_mkloc(0, 0, 0, 0),
               "internal error: pass '%s' reads option '%s', which options.def does not declare "
               "with that type", opts && opts->pass ? opts->pass : "?", key);
    return NULL;
  }
  return r;
}

/* Append a bound of option r in its unit. */
static void bound_text(strbuf *sb, const pass_option_info *r, double v) {
  char num[40];
  double scale = 1.0;
  const char *unit = r->type == PASS_OPT_TIME ? "s" : r->type == PASS_OPT_BYTES ? "B"
                     : r->type == PASS_OPT_BW ? "B/s" : "";
  fmt_shortest_scaled(num, v, scale);
  strbuf_printf(sb, "%s%s", num, unit);
}

/* Check value v of the given option o against r's range: 0, or -1 after reporting at it. */
static int check_range(diag_engine *d, const pass_option *o, const pass_option_info *r,
                       double v) {
  if (v >= r->min && v <= r->max) return 0;
  strbuf sb = {0};
  if (isfinite(r->min) && isfinite(r->max)) {
    strbuf_puts(&sb, "between ");
    bound_text(&sb, r, r->min);
    strbuf_puts(&sb, " and ");
    bound_text(&sb, r, r->max);
  } else {
    strbuf_puts(&sb, isfinite(r->min) ? "at least " : "at most ");
    bound_text(&sb, r, isfinite(r->min) ? r->min : r->max);
  }
  diag_error(d, o->value_loc, "%s must be %s", o->key, strbuf_cstr(&sb));
  strbuf_free(&sb);
  return -1;
}

/* The ir_type an option type reads its values as. */
static ir_type value_type(pass_opt_type t) {
  switch (t) {
  case PASS_OPT_COUNT: return IR_T_COUNT;
  case PASS_OPT_BOOL: return IR_T_BOOL;
  case PASS_OPT_TIME: return IR_T_TIME;
  case PASS_OPT_BYTES: return IR_T_BYTES;
  case PASS_OPT_BW: return IR_T_BW;
  default: return IR_T_REAL;
  }
}

/* Read the option 'key' of type t: *out its value or default; *given whether it was given.
 * Returns 0, or -1 after reporting (a malformed value: 'expected'; out of range). */
static int read_number(const pass_options *opts, const char *key, pass_opt_type t,
                       const char *expected, double *out, diag_engine *d) {
  const pass_option_info *r = declared(opts, key, t, d);
  *out = r ? r->def : 0;
  if (!r) return -1;
  const pass_option *o = pass_opt_find(opts, key);
  if (!o) return 0;
  ir_value_text v;
  size_t n = strlen(o->value);
  double x = 0;
  ir_value_error e = IR_VALUE_WORD;
  if (!o->quoted && ir_value_scan(o->value, n, &v) == n)
    e = ir_value_convert(&v, value_type(t), IR_VALUE_SIGNED | IR_VALUE_INT64, &x, NULL);
  if (e == IR_VALUE_INEXACT) {
    bad_value(d, opts, o, "an exact whole number (above 2^53 not every one is held)");
    return -1;
  }
  if (e != IR_VALUE_OK) {
    bad_value(d, opts, o, expected);
    return -1;
  }
  if (t != PASS_OPT_BOOL && check_range(d, o, r, x)) return -1;
  *out = x;
  return 0;
}

int pass_opt_int(const pass_options *opts, const char *key, int64_t *out, diag_engine *d) {
  double v;
  int rc = read_number(opts, key, PASS_OPT_COUNT, "a whole number (K, M, G suffixes allowed)",
                       &v, d);
  *out = (int64_t)v;
  return rc;
}

int pass_opt_real(const pass_options *opts, const char *key, double *out, diag_engine *d) {
  return read_number(opts, key, PASS_OPT_REAL, "a number", out, d);
}

int pass_opt_bool(const pass_options *opts, const char *key, bool *out, diag_engine *d) {
  double v;
  int rc = read_number(opts, key, PASS_OPT_BOOL, "true or false", &v, d);
  *out = v != 0;
  return rc;
}

int pass_opt_quantity(const pass_options *opts, const char *key, double *out, diag_engine *d) {
  const pass_info *p = opts && opts->pass ? pass_lookup(opts->pass) : NULL;
  const pass_option_info *r = p ? pass_option_find(p, key) : NULL;
  pass_opt_type t = r ? r->type : PASS_OPT_TIME;
  ir_dim dim = ir_types[value_type(t)].dim;
  char expected[96];
  const char *example = dim == IR_DIM_TIME ? "10s" : dim == IR_DIM_BYTES ? "2GiB" : "450GB/s";
  snprintf(expected, sizeof expected, "a %s with a unit (e.g. %s)", ir_dim_name(dim), example);
  if (t != PASS_OPT_BYTES && t != PASS_OPT_BW) t = PASS_OPT_TIME; /* else: declared() reports */
  return read_number(opts, key, t, expected, out, d);
}

int pass_opt_seed(const pass_options *opts, const char *key, uint64_t *out, diag_engine *d) {
  const pass_option_info *r = declared(opts, key, PASS_OPT_SEED, d);
  *out = r ? (uint64_t)r->def : 0;
  if (!r) return -1;
  const pass_option *o = pass_opt_find(opts, key);
  if (!o) return 0;
  size_t n = strlen(o->value);
  uint64_t v = 0;
  bool ok = !o->quoted && n > 0 && strspn(o->value, "0123456789") == n;
  for (size_t i = 0; ok && i < n; i++) {
    unsigned digit = (unsigned)(o->value[i] - '0');
    ok = v <= (UINT64_MAX - digit) / 10;
    v = v * 10 + digit;
  }
  if (!ok) {
    bad_value(d, opts, o, "a whole number from 0 to 18446744073709551615");
    return -1;
  }
  *out = v;
  return 0;
}

int pass_opt_choice(const pass_options *opts, const char *key, int *out, diag_engine *d) {
  const pass_option_info *r = declared(opts, key, PASS_OPT_CHOICE, d);
  *out = r ? (int)r->def : 0;
  if (!r) return -1;
  const pass_option *o = pass_opt_find(opts, key);
  if (!o) return 0;
  strbuf words = {0}, word = {0};
  suggest s;
  suggest_init(&s, o->value);
  int n = 0;
  for (const char *w = r->syntax; w; w = strchr(w, '|') ? strchr(w, '|') + 1 : NULL) n++;
  char **cand = xmalloc((size_t)n * sizeof *cand);
  int found = -1;
  for (int i = 0; i < n; i++) {
    word.len = 0;
    choice_word(&word, r->syntax, i);
    cand[i] = xstrdup(strbuf_cstr(&word));
    if (strcmp(cand[i], o->value) == 0) found = i;
    if (i) strbuf_puts(&words, i + 1 == n ? " or " : ", ");
    strbuf_puts(&words, cand[i]);
    suggest_add(&s, cand[i]);
  }
  if (found >= 0) {
    *out = found;
  } else {
    bad_value(d, opts, o, strbuf_cstr(&words));
    if (suggest_result(&s))
      diag_note(d, diag_mkloc(0, 0, 0, 0), "did you mean '%s'?", suggest_result(&s));
  }
  for (int i = 0; i < n; i++) free(cand[i]);
  free(cand);
  strbuf_free(&words);
  strbuf_free(&word);
  return found >= 0 ? 0 : -1;
}

/* ---- Pipeline text ----------------------------------------------------------------------------*/

/* State of one pipeline parse. */
typedef struct pparser {
  const char *text;   /* the pipeline text */
  size_t len;         /* its length */
  size_t pos;         /* current offset */
  uint32_t line, col; /* position of 'pos' (1-based) */
  uint32_t src;       /* diag source id of the text */
  diag_engine *d;     /* where errors go */
  pass_pipeline *pl;  /* what is being filled */
  int errors;         /* errors reported by this parse */
} pparser;

static int peek(const pparser *p) { return p->pos < p->len ? (unsigned char)p->text[p->pos] : -1; }

static void advance(pparser *p, size_t n) {
  for (size_t i = 0; i < n && p->pos < p->len; i++, p->pos++) {
    if (p->text[p->pos] == '\n') {
      p->line++;
      p->col = 1;
    } else {
      p->col++;
    }
  }
}

static void skip_ws(pparser *p) {
  while (p->pos < p->len && isspace((unsigned char)p->text[p->pos])) advance(p, 1);
}

static diag_loc here(const pparser *p, uint32_t len) {
  return diag_mkloc(p->src, p->line, p->col, len);
}

static bool is_name_char(int c) { return c >= 0 && (isalnum(c) || c == '_' || c == '-'); }
static bool is_key_start(int c) { return c >= 0 && (isalpha(c) || c == '_'); }
/* Characters of an unquoted option value: identifiers, numbers, units (10s, 450GB/s, 5%). */
static bool is_value_char(int c) {
  return c >= 0 && (isalnum(c) || c == '_' || c == '-' || c == '+' || c == '.' || c == '/' ||
                    c == '%');
}

/* Describe the character at the cursor for "found ..." messages. */
static void describe_here(const pparser *p, char *buf, size_t n) {
  int c = peek(p);
  if (c < 0)
    snprintf(buf, n, "end of pipeline");
  else if (isprint(c))
    snprintf(buf, n, "'%c'", c);
  else
    snprintf(buf, n, "character 0x%02x", (unsigned)c);
}

/* Report a syntax error at the cursor (a one-character span, or a caret at the end). */
static void syntax_error(pparser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void syntax_error(pparser *p, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  diag_vreport(p->d, DIAG_ERROR, here(p, peek(p) < 0 ? 0 : 1), fmt, ap);
  va_end(ap);
  p->errors++;
}

/* Parse a quoted string starting at '"'; *out gets the unescaped text (arena). */
static bool parse_quoted(pparser *p, char **out) {
  diag_loc open = here(p, 1);
  advance(p, 1);
  strbuf sb = {0};
  for (;;) {
    int c = peek(p);
    if (c < 0) {
      diag_error(p->d, open, "unterminated string in pipeline");
      p->errors++;
      strbuf_free(&sb);
      return false;
    }
    if (c == '"') {
      advance(p, 1);
      break;
    }
    if (c == '\\' && p->pos + 1 < p->len) {
      advance(p, 1);
      c = peek(p);
    }
    strbuf_putc(&sb, (char)c);
    advance(p, 1);
  }
  *out = arena_strndup(&p->pl->arena, strbuf_cstr(&sb), sb.len);
  strbuf_free(&sb);
  return true;
}

/* Parse "{k=v, ...}" of one entry (the cursor is on '{'). 'pass' is NULL for an unknown pass
 * (options are then parsed but not checked). Returns false on a syntax error. */
static bool parse_options(pparser *p, const pass_info *pass, const char *pass_name,
                          pass_options *opts) {
  diag_loc open = here(p, 1);
  advance(p, 1);
  pass_option *items = NULL;
  int n = 0, cap = 0;
  bool ok = true;
  skip_ws(p);
  if (peek(p) == '}') {
    advance(p, 1);
    return true;
  }
  for (;;) {
    skip_ws(p);
    int c = peek(p);
    if (c < 0) {
      diag_error(p->d, open, "unbalanced '{': missing '}' after the options of pass '%s'",
                 pass_name);
      p->errors++;
      ok = false;
      break;
    }
    if (!is_key_start(c)) {
      char found[32];
      describe_here(p, found, sizeof found);
      syntax_error(p, "expected an option name, found %s", found);
      ok = false;
      break;
    }
    pass_option o;
    memset(&o, 0, sizeof o);
    size_t kstart = p->pos;
    uint32_t kline = p->line, kcol = p->col;
    while (is_name_char(peek(p))) advance(p, 1);
    size_t klen = p->pos - kstart;
    o.key = arena_strndup(&p->pl->arena, p->text + kstart, klen);
    o.key_loc = diag_mkloc(p->src, kline, kcol, (uint32_t)klen);
    skip_ws(p);
    if (peek(p) != '=') {
      syntax_error(p, "missing '=' after option '%s'", o.key);
      ok = false;
      break;
    }
    advance(p, 1);
    skip_ws(p);
    uint32_t vline = p->line, vcol = p->col;
    size_t vstart = p->pos;
    if (peek(p) == '"') {
      char *v;
      if (!parse_quoted(p, &v)) {
        ok = false;
        break;
      }
      o.value = v;
      o.quoted = true;
    } else {
      while (is_value_char(peek(p))) advance(p, 1);
      if (p->pos == vstart) {
        syntax_error(p, "missing value for option '%s'", o.key);
        ok = false;
        break;
      }
      o.value = arena_strndup(&p->pl->arena, p->text + vstart, p->pos - vstart);
    }
    o.value_loc = diag_mkloc(p->src, vline, vcol, (uint32_t)(p->pos - vstart));
    /* semantic checks: declared, not given twice */
    const pass_option *dup = NULL;
    for (int i = 0; i < n; i++)
      if (strcmp(items[i].key, o.key) == 0) dup = &items[i];
    if (pass && !pass_declares_option(pass, o.key, klen)) {
      diag_error(p->d, o.key_loc, "pass '%s' has no option '%s'", pass->name, o.key);
      p->errors++;
      strbuf sb = {0};
      if (pass_option_suggest(pass, o.key, &sb))
        diag_note(p->d, diag_mkloc(0, 0, 0, 0), "did you mean '%s'?", strbuf_cstr(&sb));
      strbuf_free(&sb);
      pass_option_names(pass, &sb);
      if (sb.len)
        diag_note(p->d, diag_mkloc(0, 0, 0, 0), "options of pass '%s': %s", pass->name,
                  strbuf_cstr(&sb));
      else
        diag_note(p->d, diag_mkloc(0, 0, 0, 0), "pass '%s' takes no options", pass->name);
      strbuf_free(&sb);
    } else if (dup) {
      diag_error(p->d, o.key_loc, "option '%s' given twice for pass '%s'", o.key, pass_name);
      diag_note(p->d, dup->key_loc, "first given here");
      p->errors++;
    } else {
      VEC_PUSH(items, n, cap, o);
    }
    skip_ws(p);
    c = peek(p);
    if (c == ',') {
      advance(p, 1);
      continue;
    }
    if (c == '}') {
      advance(p, 1);
      break;
    }
    if (c < 0) {
      diag_error(p->d, open, "unbalanced '{': missing '}' after the options of pass '%s'",
                 pass_name);
      p->errors++;
    } else {
      char found[32];
      describe_here(p, found, sizeof found);
      syntax_error(p, "expected ',' or '}' after the value of option '%s', found %s", o.key,
                   found);
    }
    ok = false;
    break;
  }
  if (ok && n) {
    opts->items = arena_alloc(&p->pl->arena, (size_t)n * sizeof *items);
    memcpy(opts->items, items, (size_t)n * sizeof *items);
    opts->count = n;
  }
  free(items);
  return ok;
}

/* Report an unknown pass name at 'loc' with a suggestion or the list of passes. */
static void unknown_pass(diag_engine *d, diag_loc loc, const char *name) {
  diag_error(d, loc, "unknown pass '%s'", name);
  const char *s = pass_suggest(name);
  if (s) {
    diag_note(d, diag_mkloc(0, 0, 0, 0), "did you mean '%s'?", s);
  } else {
    strbuf sb = {0};
    for (int i = 0; i < pass_count(); i++)
      strbuf_printf(&sb, "%s%s", i ? ", " : "", pass_at(i)->name);
    diag_note(d, diag_mkloc(0, 0, 0, 0), "available passes: %s", strbuf_cstr(&sb));
    strbuf_free(&sb);
  }
}

pass_status pass_run_text(ir_module *m, const char *text, diag_engine *d) {
  pass_pipeline pl = {0};
  pass_manager_opts po = {0};
  pass_status st = pass_pipeline_parse(&pl, text, d) == 0 ? pass_pipeline_run(&pl, m, &po, d)
                                                           : PASS_FAILED;
  pass_pipeline_free(&pl);
  return st;
}

int pass_pipeline_parse(pass_pipeline *pl, const char *text, diag_engine *d) {
  pparser p;
  memset(&p, 0, sizeof p);
  p.text = text;
  p.len = strlen(text);
  p.line = p.col = 1;
  p.d = d;
  p.pl = pl;
  p.src = diag_add_source(d, "<pipeline>", text, p.len, 0);
  skip_ws(&p);
  if (peek(&p) < 0) return 0; /* the empty pipeline */
  for (;;) {
    skip_ws(&p);
    uint32_t line = p.line, col = p.col;
    size_t start = p.pos;
    while (is_name_char(peek(&p))) advance(&p, 1);
    size_t nlen = p.pos - start;
    if (nlen == 0) {
      int c = peek(&p);
      char found[32];
      describe_here(&p, found, sizeof found);
      if (c < 0 || c == ',' || c == '{' || c == '}')
        syntax_error(&p, "empty pass name");
      else
        syntax_error(&p, "expected a pass name, found %s", found);
      break;
    }
    char *name = arena_strndup(&pl->arena, text + start, nlen);
    diag_loc nloc = diag_mkloc(p.src, line, col, (uint32_t)nlen);
    const pass_info *pass = pass_lookup(name);
    if (!pass) {
      unknown_pass(d, nloc, name);
      p.errors++;
    }
    pass_options opts;
    memset(&opts, 0, sizeof opts);
    opts.pass = pass ? pass->name : name;
    opts.loc = nloc;
    skip_ws(&p);
    if (peek(&p) == '{' && !parse_options(&p, pass, name, &opts)) break;
    if (pass) {
      pass_pipeline_entry *e = pass_pipeline_add(pl, pass);
      e->opts = opts;
    }
    skip_ws(&p);
    int c = peek(&p);
    if (c < 0) break;
    if (c == ',') {
      advance(&p, 1);
      continue;
    }
    char found[32];
    describe_here(&p, found, sizeof found);
    if (c == '}')
      syntax_error(&p, "unbalanced '}' in pipeline");
    else
      syntax_error(&p, "expected ',' between passes, found %s", found);
    break;
  }
  return p.errors;
}

pass_pipeline_entry *pass_pipeline_add(pass_pipeline *pl, const pass_info *p) {
  VEC_RESERVE(pl->entries, pl->count, pl->cap);
  pass_pipeline_entry *e = &pl->entries[pl->count++];
  memset(e, 0, sizeof *e);
  e->pass = p;
  e->opts.pass = p->name;
  return e;
}

void pass_pipeline_print(const pass_pipeline *pl, strbuf *sb) {
  for (int i = 0; i < pl->count; i++) {
    const pass_pipeline_entry *e = &pl->entries[i];
    if (i) strbuf_putc(sb, ',');
    strbuf_puts(sb, e->pass->name);
    if (!e->opts.count) continue;
    strbuf_putc(sb, '{');
    for (int j = 0; j < e->opts.count; j++) {
      const pass_option *o = &e->opts.items[j];
      if (j) strbuf_putc(sb, ',');
      strbuf_printf(sb, "%s=", o->key);
      bool bare = !o->quoted && *o->value;
      for (const char *c = o->value; bare && *c; c++) bare = is_value_char((unsigned char)*c);
      if (bare) {
        strbuf_puts(sb, o->value);
        continue;
      }
      strbuf_putc(sb, '"');
      for (const char *c = o->value; *c; c++) {
        if (*c == '"' || *c == '\\') strbuf_putc(sb, '\\');
        strbuf_putc(sb, *c);
      }
      strbuf_putc(sb, '"');
    }
    strbuf_putc(sb, '}');
  }
}

void pass_pipeline_free(pass_pipeline *pl) {
  free(pl->entries);
  arena_free(&pl->arena);
  memset(pl, 0, sizeof *pl);
}

/* ---- Pass manager -----------------------------------------------------------------------------*/

void pass_results_put(pass_results *r, pass_id id, void *figures, void (*free_figures)(void *)) {
  if (!r) {
    free_figures(figures);
    return;
  }
  for (int i = 0; i < r->count; i++)
    if (r->items[i].pass == id) {
      r->items[i].free_figures(r->items[i].figures);
      r->items[i].figures = figures;
      r->items[i].free_figures = free_figures;
      return;
    }
  pass_result x = {id, figures, free_figures};
  VEC_PUSH(r->items, r->count, r->cap, x);
}

int pass_results_keep(pass_results *r, pass_id id, int rc, void *figures,
                      void (*free_figures)(void *)) {
  if (rc == 0)
    pass_results_put(r, id, figures, free_figures);
  else
    free_figures(figures);
  return rc;
}

const void *pass_results_get(const pass_results *r, pass_id id) {
  for (int i = 0; r && i < r->count; i++)
    if (r->items[i].pass == id) return r->items[i].figures;
  return NULL;
}

void pass_results_free(pass_results *r) {
  for (int i = 0; i < r->count; i++) r->items[i].free_figures(r->items[i].figures);
  free(r->items);
  memset(r, 0, sizeof *r);
}

bool pass_name_in_list(const char *name, const char *list) {
  if (!list) return false;
  size_t n = strlen(name);
  for (const char *p = list; *p;) {
    while (*p == ',' || isspace((unsigned char)*p)) p++;
    const char *start = p;
    while (*p && *p != ',' && !isspace((unsigned char)*p)) p++;
    if ((size_t)(p - start) == n && memcmp(start, name, n) == 0) return true;
  }
  return false;
}

/* Whether a comma list names at least one pass. */
static bool pass_name_list_nonempty(const char *list) {
  for (const char *p = list; *p; p++)
    if (*p != ',' && !isspace((unsigned char)*p)) return true;
  return false;
}

int pass_check_name_list(const char *list, const char *flag, const char *prog, FILE *err) {
  int bad = 0;
  strbuf name = {0};
  for (const char *p = list; *p;) {
    while (*p == ',' || isspace((unsigned char)*p)) p++;
    const char *start = p;
    while (*p && *p != ',' && !isspace((unsigned char)*p)) p++;
    if (p == start) break;
    name.len = 0;
    strbuf_append(&name, start, (size_t)(p - start));
    if (pass_lookup(strbuf_cstr(&name))) continue;
    fprintf(err, "%s: error: unknown pass '%s' in %s\n", prog, strbuf_cstr(&name), flag);
    const char *s = pass_suggest(strbuf_cstr(&name));
    if (s) fprintf(err, "%s: note: did you mean '%s'?\n", prog, s);
    bad++;
  }
  strbuf_free(&name);
  if (!bad && !pass_name_list_nonempty(list)) {
    fprintf(err, "%s: error: %s needs a pass name\n", prog, flag);
    bad++;
  }
  return bad;
}

/* Write an IR dump with its header to 'out'. */
static void dump_ir(FILE *out, const char *when, const char *pass, const char *suffix,
                    const ir_module *m, const pass_manager_opts *o) {
  ir_print_opts po = {o->print_debuginfo};
  strbuf sb = {0};
  ir_print(m, &sb, &po);
  fprintf(out, "# -----// IR Dump %s %s%s //----- #\n%s\n", when, pass, suffix, strbuf_cstr(&sb));
  fflush(out);
  strbuf_free(&sb);
}

/* Number of verifier errors of m, found without printing anything. */
static int count_verify_errors(const ir_module *m) {
  diag_engine *quiet = diag_new(NULL);
  diag_set_verify(quiet, true); /* collect, never print */
  int n = ir_verify(m, quiet, diag_mkloc(0, 0, 0, 0));
  diag_free(quiet);
  return n;
}

pass_status pass_pipeline_run(const pass_pipeline *pl, ir_module *m, const pass_manager_opts *o,
                              diag_engine *d) {
  pass_manager_opts none;
  if (!o) {
    memset(&none, 0, sizeof none);
    o = &none;
  }
  FILE *dump = o->dump ? o->dump : stderr;
  for (int i = 0; i < pl->count; i++) {
    const pass_pipeline_entry *e = &pl->entries[i];
    const char *name = e->pass->name;
    bool after = o->print_ir_after_all || pass_name_in_list(name, o->print_ir_after);
    if (o->print_ir_before_all || pass_name_in_list(name, o->print_ir_before))
      dump_ir(dump, "Before", name, "", m, o);
    int errors = diag_error_count(d);
    pass_options po = e->opts;
    po.results = o ? o->results : NULL;
    int rc = e->pass->run(m, &po, d);
    bool reported = diag_error_count(d) > errors;
    if (rc != 0 || reported) {
      if (after) dump_ir(dump, "After", name, " Failed", m, o);
      if (rc != 0 && !reported) {
        diag_error(d, e->opts.loc, "internal error: pass '%s' failed without reporting an error",
                   name);
        return PASS_INTERNAL;
      }
      if (rc == 0) {
        diag_error(d, e->opts.loc, "internal error: pass '%s' reported errors but succeeded",
                   name);
        return PASS_INTERNAL;
      }
      return PASS_FAILED;
    }
    if (o->verify_each && count_verify_errors(m) > 0) {
      diag_error(d, e->opts.loc, "IR is invalid after pass '%s'", name);
      ir_verify(m, d, e->opts.loc);
      if (after) dump_ir(dump, "After", name, " Failed", m, o);
      return PASS_FAILED;
    }
    if (after) dump_ir(dump, "After", name, "", m, o);
  }
  return PASS_OK;
}
