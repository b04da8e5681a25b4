/* read.c -- reader of the textual IR: a hand-written lexer and a recursive-descent parser that
 * build an ir_module from a diag source. Reports every syntactic and referential problem at
 * file:line:col and keeps going (a statement with a syntax error is skipped up to the next line
 * that starts a statement), so that one run shows many errors. Semantic invariants (stage cover,
 * schedule completeness, memory) are the verifier's (verify.c). Linear in the input size. */
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"

/* ---- Tokens ------------------------------------------------------------------------------- */

typedef enum rd_kind {
  RD_EOF,      /* end of the source */
  RD_ERROR,    /* a lexical error, already reported */
  RD_IDENT,    /* [A-Za-z_][A-Za-z0-9_.-]* */
  RD_NUMBER,   /* digits [. digits] [e [+-] digits] (a unit is scanned by the value parser) */
  RD_STRING,   /* "..." (decoded text in rd_parser.str) */
  RD_PERCENT,  /* %name: a layer reference */
  RD_DOLLAR,   /* $name: a device reference */
  RD_AT,       /* @name or @"name": a module, cluster or stage name */
  RD_LBRACE,   /* { */
  RD_RBRACE,   /* } */
  RD_LPAREN,   /* ( */
  RD_RPAREN,   /* ) */
  RD_LBRACKET, /* [ */
  RD_RBRACKET, /* ] */
  RD_COMMA,    /* , */
  RD_EQUAL,    /* = */
  RD_COLON,    /* : */
  RD_ARROW,    /* -> */
  RD_MINUS     /* - */
} rd_kind;

typedef struct rd_token {
  rd_kind kind;  /* what it is */
  size_t off;    /* offset of its first byte in the source text */
  size_t len;    /* length in bytes (0 at the end of the file) */
  uint32_t line; /* line, counting the source's line_base */
  uint32_t col;  /* 1-based byte column */
  bool bol;      /* first token of its line */
  bool quoted;   /* RD_AT written as @"..." (decoded text in rd_parser.str) */
} rd_token;

/* Statement kinds in the order the sections must come (the printer's order). */
typedef enum rd_rank {
  RK_PROFILE, RK_TRAIN, RK_CLUSTER, RK_NAMED_LINK, RK_DEVICE, RK_LINK, RK_LAYER, RK_STAGE,
  RK_PLACE, RK_SCHEDULE, RK_PREDICT, RK_DEVPREDICT, RK_COUNT
} rd_rank;

static const char *const rd_rank_names[RK_COUNT] = {
    "profile", "train",    "cluster",  "link intra/inter", "device",  "link $dA -> $dB",
    "layer",   "stage",    "place",    "schedule",         "predict", "predict $dI"};

/* Keywords that start a statement (recovery resumes at one that starts a line). */
static const char *const rd_keywords[] = {"profile", "train", "cluster", "link",     "device",
                                          "layer",   "stage", "place",   "schedule", "predict"};

typedef struct rd_parser {
  diag_engine *d;            /* where errors go */
  uint32_t file;             /* diag source id of the text */
  const char *text;          /* source text (may contain NUL bytes) */
  size_t len;                /* its length; nothing at or past it is read */
  size_t pos;                /* lexing position: just after the current token */
  uint32_t line;             /* line of pos */
  size_t line_start;         /* offset of the first byte of pos's line */
  bool at_bol;               /* no token yet on pos's line */
  int depth;                 /* braces opened and not closed, as lexed */
  rd_token tok;              /* current token */
  strbuf str;                /* decoded text of the current string token */
  strbuf name;               /* copy of a string kept across tokens (a layer's name) */
  bool skipping;             /* recovering: lexical errors inside skipped lines are not reported */
  bool eof_reported;         /* an "unexpected end of file" was reported */
  int errors;                /* errors reported */
  ir_module *m;              /* module being built */
  const char *file_name;     /* name of the IR file, in m's arena */
  const char *loc_file;      /* last file of a loc(...), in m's arena (reused while equal) */
  int next_layer;            /* number the next layer statement must have */
  int next_device;           /* number the next device statement must have */
  int next_stage;            /* number the next stage statement must have */
  int rank;                  /* highest statement rank seen */
  bool seen_train;           /* a train statement was read */
  bool seen_cluster;         /* a cluster statement was read */
  bool seen_intra;           /* a link intra statement was read */
  bool seen_inter;           /* a link inter statement was read */
  bool seen_predict;         /* a module-level predict statement was read */
  bool *sched_seen;          /* per device: a schedule statement was read (with m->schedules) */
  bool *devpredict_seen;     /* per device: a predict $dI statement was read */
} rd_parser;

/* ---- Errors ------------------------------------------------------------------------------- */

static void rd_error(rd_parser *p, diag_loc loc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void rd_error(rd_parser *p, diag_loc loc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  diag_vreport(p->d, DIAG_ERROR, loc, fmt, ap);
  va_end(ap);
  p->errors++;
}

/* Location of token t, spanning it (so that the caret line underlines it). */
static diag_loc rd_loc(const rd_parser *p, const rd_token *t) {
  return diag_mkloc(p->file, t->line, t->col, t->len > 200 ? 200 : (uint32_t)t->len);
}

/* Location of bytes [off, off+len) on the current lexing line. */
static diag_loc rd_span(const rd_parser *p, size_t off, size_t len) {
  size_t col = off - p->line_start + 1;
  return diag_mkloc(p->file, p->line, col > UINT32_MAX ? UINT32_MAX : (uint32_t)col,
                    len > 200 ? 200 : (uint32_t)len);
}

/* Append bytes as message text: printable ASCII as is, others as \xNN; at most 'max' bytes,
 * then "...". */
static void rd_put_text(strbuf *sb, const char *s, size_t n, size_t max) {
  for (size_t i = 0; i < n && i < max; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c < 0x20 || c >= 0x7f)
      strbuf_printf(sb, "\\x%02x", c);
    else
      strbuf_putc(sb, (char)c);
  }
  if (n > max) strbuf_puts(sb, "...");
}

/* Describe token t for "found ..." messages: 'text', or "end of file". */
static void rd_describe(const rd_parser *p, const rd_token *t, strbuf *sb) {
  if (t->kind == RD_EOF) {
    strbuf_puts(sb, "end of file");
    return;
  }
  strbuf_putc(sb, '\'');
  rd_put_text(sb, p->text + t->off, t->len, 40);
  strbuf_putc(sb, '\'');
}

/* Report that the current token is not 'what'. Silent for a lexical error token (already
 * reported) and for a second end of file. */
static void rd_expected(rd_parser *p, const char *what) {
  const rd_token *t = &p->tok;
  if (t->kind == RD_ERROR) return;
  if (t->kind == RD_EOF) {
    if (p->eof_reported) return;
    p->eof_reported = true;
    rd_error(p, rd_loc(p, t), "unexpected end of file, expected %s", what);
    return;
  }
  strbuf sb = {0};
  rd_describe(p, t, &sb);
  rd_error(p, rd_loc(p, t), "expected %s, found %s", what, strbuf_cstr(&sb));
  strbuf_free(&sb);
}

/* ---- Lexer -------------------------------------------------------------------------------- */

static bool rd_digit(unsigned char c) { return c >= '0' && c <= '9'; }
static bool rd_alpha(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
static bool rd_hex(unsigned char c, int *v) {
  if (rd_digit(c)) *v = c - '0';
  else if (c >= 'a' && c <= 'f') *v = c - 'a' + 10;
  else if (c >= 'A' && c <= 'F') *v = c - 'A' + 10;
  else return false;
  return true;
}

/* End of a run of name characters [A-Za-z0-9_.-] from i, stopping before an arrow "->". */
static size_t rd_scan_name(const rd_parser *p, size_t i) {
  const char *s = p->text;
  while (i < p->len) {
    unsigned char c = (unsigned char)s[i];
    if (!(rd_alpha(c) || rd_digit(c) || c == '.' || c == '-')) break;
    if (c == '-' && i + 1 < p->len && s[i + 1] == '>') break;
    i++;
  }
  return i;
}

/* Report a lexical error unless it lies inside a line being skipped by recovery (a token that
 * starts a line is always reported: recovery may resume there). */
static void rd_lex_error(rd_parser *p, const rd_token *t, diag_loc loc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void rd_lex_error(rd_parser *p, const rd_token *t, diag_loc loc, const char *fmt, ...) {
  if (p->skipping && !t->bol) return;
  va_list ap;
  va_start(ap, fmt);
  diag_vreport(p->d, DIAG_ERROR, loc, fmt, ap);
  va_end(ap);
  p->errors++;
}

/* Lex a string whose opening quote is at offset i into p->str. Sets *end past the closing quote
 * (or to the end of the line when unterminated). Returns RD_STRING, or RD_ERROR after reporting
 * an unterminated string, a bad escape or a raw control character. */
static rd_kind rd_lex_string(rd_parser *p, const rd_token *t, size_t i, size_t *end) {
  const char *s = p->text;
  p->str.len = 0;
  if (p->str.data) p->str.data[0] = 0;
  bool ok = true;
  size_t j = i + 1;
  for (;;) {
    if (j >= p->len || s[j] == '\n') {
      rd_lex_error(p, t, rd_span(p, i, j - i), "unterminated string: missing '\"' before the end "
                   "of the %s", j >= p->len ? "file" : "line");
      *end = j;
      return RD_ERROR;
    }
    unsigned char c = (unsigned char)s[j];
    if (c == '"') {
      *end = j + 1;
      return ok ? RD_STRING : RD_ERROR;
    }
    if (c == '\\') {
      unsigned char e = j + 1 < p->len ? (unsigned char)s[j + 1] : 0;
      int h1, h2;
      if (e == '"' || e == '\\') {
        strbuf_putc(&p->str, (char)e);
        j += 2;
      } else if (e == 'n') {
        strbuf_putc(&p->str, '\n');
        j += 2;
      } else if (e == 't') {
        strbuf_putc(&p->str, '\t');
        j += 2;
      } else if (e == 'x' && j + 3 < p->len && rd_hex((unsigned char)s[j + 2], &h1) &&
                 rd_hex((unsigned char)s[j + 3], &h2)) {
        if (h1 == 0 && h2 == 0) {
          rd_lex_error(p, t, rd_span(p, j, 4), "a string cannot contain a NUL character");
          ok = false;
        } else {
          strbuf_putc(&p->str, (char)(h1 * 16 + h2));
        }
        j += 4;
      } else if (j + 1 >= p->len || e == '\n') {
        j++; /* reported as unterminated */
      } else {
        strbuf sb = {0};
        rd_put_text(&sb, s + j, 2, 2);
        rd_lex_error(p, t, rd_span(p, j, 2),
                     "invalid escape '%s' in string; the escapes are \\\" \\\\ \\n \\t \\xNN",
                     strbuf_cstr(&sb));
        strbuf_free(&sb);
        ok = false;
        j += 2;
      }
      continue;
    }
    if ((c < 0x20 && c != '\t') || c == 0x7f) {
      rd_lex_error(p, t, rd_span(p, j, 1),
                   "invalid character '\\x%02x' in string; write it as the escape \\x%02x", c, c);
      ok = false;
      j++;
      continue;
    }
    strbuf_putc(&p->str, (char)c);
    j++;
  }
}

/* Advance to the next token: skip whitespace and comments, lex one token into p->tok. */
static void rd_next(rd_parser *p) {
  const char *s = p->text;
  size_t i = p->pos;
  while (i < p->len) {
    char c = s[i];
    if (c == '\n') {
      i++;
      p->line++;
      p->line_start = i;
      p->at_bol = true;
    } else if (c == ' ' || c == '\t' || c == '\r') {
      i++;
    } else if (c == '#') {
      while (i < p->len && s[i] != '\n') i++;
    } else {
      break;
    }
  }
  rd_token t = {0};
  t.off = i;
  t.line = p->line;
  size_t col = i - p->line_start + 1;
  t.col = col > UINT32_MAX ? UINT32_MAX : (uint32_t)col;
  t.bol = p->at_bol;
  p->at_bol = false;
  if (i >= p->len) {
    t.kind = RD_EOF;
    p->pos = i;
    p->tok = t;
    return;
  }
  unsigned char c = (unsigned char)s[i];
  size_t j = i + 1;
  if (rd_alpha(c)) {
    t.kind = RD_IDENT;
    j = rd_scan_name(p, j);
  } else if (rd_digit(c)) {
    t.kind = RD_NUMBER;
    while (j < p->len && rd_digit((unsigned char)s[j])) j++;
    if (j < p->len && s[j] == '.') {
      j++;
      while (j < p->len && rd_digit((unsigned char)s[j])) j++;
    }
    if (j < p->len && (s[j] == 'e' || s[j] == 'E')) {
      size_t k = j + 1;
      if (k < p->len && (s[k] == '+' || s[k] == '-')) k++;
      if (k < p->len && rd_digit((unsigned char)s[k])) {
        while (k < p->len && rd_digit((unsigned char)s[k])) k++;
        j = k;
      }
    }
  } else if (c == '"') {
    t.kind = rd_lex_string(p, &t, i, &j);
  } else if (c == '%' || c == '$') {
    t.kind = c == '%' ? RD_PERCENT : RD_DOLLAR;
    j = rd_scan_name(p, j);
  } else if (c == '@') {
    if (j < p->len && s[j] == '"') {
      t.kind = rd_lex_string(p, &t, j, &j) == RD_STRING ? RD_AT : RD_ERROR;
      t.quoted = true;
    } else {
      t.kind = RD_AT;
      j = rd_scan_name(p, j);
    }
  } else {
    switch (c) {
    case '{': t.kind = RD_LBRACE; p->depth++; break;
    case '}': t.kind = RD_RBRACE; p->depth--; break;
    case '(': t.kind = RD_LPAREN; break;
    case ')': t.kind = RD_RPAREN; break;
    case '[': t.kind = RD_LBRACKET; break;
    case ']': t.kind = RD_RBRACKET; break;
    case ',': t.kind = RD_COMMA; break;
    case '=': t.kind = RD_EQUAL; break;
    case ':': t.kind = RD_COLON; break;
    case '-':
      if (j < p->len && s[j] == '>') {
        t.kind = RD_ARROW;
        j++;
      } else {
        t.kind = RD_MINUS;
      }
      break;
    default:
      t.kind = RD_ERROR;
      if (c >= 0x20 && c < 0x7f)
        rd_lex_error(p, &t, rd_span(p, i, 1), "invalid character '%c'", c);
      else
        rd_lex_error(p, &t, rd_span(p, i, 1), "invalid character '\\x%02x'", c);
      break;
    }
  }
  t.len = j - i;
  p->pos = j;
  p->tok = t;
}

/* Whether token t is the identifier 'word'. */
static bool rd_is(const rd_parser *p, const rd_token *t, const char *word) {
  size_t n = strlen(word);
  return t->kind == RD_IDENT && t->len == n && memcmp(p->text + t->off, word, n) == 0;
}

/* Copy the text of token t, without its first 'skip' bytes, into buf as a C string. Returns
 * false (buf holding a truncated copy) when it does not fit. */
static bool rd_text(const rd_parser *p, const rd_token *t, size_t skip, char *buf, size_t n) {
  size_t len = t->len > skip ? t->len - skip : 0;
  bool fits = len < n;
  if (!fits) len = n - 1;
  memcpy(buf, p->text + t->off + skip, len);
  buf[len] = 0;
  return fits;
}

/* Consume a token of kind k, or report that 'what' was expected. */
static bool rd_expect(rd_parser *p, rd_kind k, const char *what) {
  if (p->tok.kind != k) {
    rd_expected(p, what);
    return false;
  }
  rd_next(p);
  return true;
}

/* ---- Names, references, numbers ----------------------------------------------------------- */

/* Parse the current token as a reference '<sigil><prefix><number>' (a layer %3, a device $d3, a
 * stage @s3) without consuming it. 'what' names the entity ("layer"). Returns the number, or -1
 * after reporting (a syntax error: the caller abandons the statement). */
static int rd_ref_peek(rd_parser *p, rd_kind k, const char *prefix, const char *what) {
  char sigil = k == RD_PERCENT ? '%' : k == RD_DOLLAR ? '$' : '@';
  if (p->tok.kind != k) {
    char buf[64];
    snprintf(buf, sizeof buf, "a %s like %c%s0", what, sigil, prefix);
    rd_expected(p, buf);
    return -1;
  }
  const rd_token *t = &p->tok;
  const char *s = p->text + t->off + 1;
  size_t n = t->len - 1, plen = strlen(prefix);
  bool ok = !t->quoted && n > plen && memcmp(s, prefix, plen) == 0 && n - plen <= 9;
  long v = 0;
  for (size_t i = plen; ok && i < n; i++) {
    if (!rd_digit((unsigned char)s[i])) ok = false;
    v = v * 10 + (s[i] - '0');
  }
  if (ok && n - plen > 1 && s[plen] == '0') ok = false; /* no leading zeros */
  if (!ok) {
    strbuf sb = {0};
    rd_describe(p, t, &sb);
    rd_error(p, rd_loc(p, t), "invalid %s name %s; %ss are named %c%s0, %c%s1, ...", what,
             strbuf_cstr(&sb), what, sigil, prefix, sigil, prefix);
    strbuf_free(&sb);
    return -1;
  }
  return (int)v;
}

/* rd_ref_peek, then consume the token when it is a valid reference. */
static int rd_ref(rd_parser *p, rd_kind k, const char *prefix, const char *what) {
  int v = rd_ref_peek(p, k, prefix, what);
  if (v >= 0) rd_next(p);
  return v;
}

/* Parse the number of a definition (layer %N, device $dN, stage @sN), check that it is the one
 * expected next, continue the numbering after it (so one gap gives one error), and consume it.
 * Returns the number, or -1 after reporting a syntax error. */
static int rd_def(rd_parser *p, rd_kind k, const char *prefix, const char *what, int *next) {
  rd_token t = p->tok;
  int found = rd_ref_peek(p, k, prefix, what);
  if (found < 0) return -1;
  const char *sigil = k == RD_PERCENT ? "%" : k == RD_DOLLAR ? "$d" : "@s";
  if (found != *next)
    rd_error(p, rd_loc(p, &t), "expected %s %s%d, found %s%d; %ss are numbered in order", what,
             sigil, *next, sigil, found, what);
  *next = found + 1;
  rd_next(p);
  return found;
}

/* Parse the current token as a non-negative whole number without unit (a microbatch, a line
 * number) at most 'max'; consume it. Returns false after reporting. */
static bool rd_uint(rd_parser *p, const char *what, uint64_t max, uint64_t *out) {
  const rd_token *t = &p->tok;
  if (t->kind != RD_NUMBER) {
    rd_expected(p, what);
    return false;
  }
  uint64_t v = 0;
  const char *s = p->text + t->off;
  for (size_t i = 0; i < t->len; i++) {
    if (!rd_digit((unsigned char)s[i])) {
      strbuf sb = {0};
      rd_describe(p, t, &sb);
      rd_error(p, rd_loc(p, t), "expected %s, found %s", what, strbuf_cstr(&sb));
      strbuf_free(&sb);
      return false;
    }
    v = v * 10 + (uint64_t)(s[i] - '0');
    if (v > max) {
      rd_error(p, rd_loc(p, t), "%s is too large (at most %llu)", what, (unsigned long long)max);
      return false;
    }
  }
  *out = v;
  rd_next(p);
  return true;
}

/* Take the name of the current '@' token (module or cluster): an identifier or a quoted string.
 * Returns a copy in m's arena, or, before the module exists, in p->name (valid until p->name is
 * reused); NULL after reporting an invalid name. Does not consume the token. */
static const char *rd_at_name(rd_parser *p, const char *what) {
  const rd_token *t = &p->tok;
  if (t->kind != RD_AT) {
    char buf[64];
    snprintf(buf, sizeof buf, "a %s name like @name", what);
    rd_expected(p, buf);
    return NULL;
  }
  if (!t->quoted) {
    if (t->len < 2 || !rd_alpha((unsigned char)p->text[t->off + 1])) {
      strbuf sb = {0};
      rd_describe(p, t, &sb);
      rd_error(p, rd_loc(p, t),
               "invalid %s name %s: a name is a letter or '_' followed by letters, digits, "
               "'_', '.' or '-'", what, strbuf_cstr(&sb));
      strbuf_free(&sb);
      return NULL;
    }
    p->str.len = 0;
    strbuf_append(&p->str, p->text + t->off + 1, t->len - 1);
  }
  if (p->m) return arena_strdup(&p->m->arena, strbuf_cstr(&p->str));
  p->name.len = 0;
  strbuf_append(&p->name, strbuf_cstr(&p->str), p->str.len);
  return strbuf_cstr(&p->name);
}

/* ---- Values ------------------------------------------------------------------------------- */

/* A value as written, before it is checked against the type of its field. */
typedef struct rd_value {
  bool ident;       /* an identifier (true, false, an enum value, or a misplaced word) */
  bool negative;    /* written with a leading '-' */
  size_t off, len;  /* the number's or identifier's text */
  size_t unit_off;  /* the unit's text (unit_len 0: none) */
  size_t unit_len;  /* its length */
  diag_loc loc;     /* the whole value */
  diag_loc unit_loc; /* the unit */
} rd_value;

/* After a number token, take the unit that follows it: attached ("3.35TB/s") or after spaces and
 * tabs ("80 GiB"). A unit is [A-Za-z_][A-Za-z0-9_]* with an optional "/" part. Sets v's unit and
 * moves p->pos past it. */
static void rd_scan_unit(rd_parser *p, rd_value *v) {
  const char *s = p->text;
  size_t k = p->pos;
  bool spaced = false;
  while (k < p->len && (s[k] == ' ' || s[k] == '\t')) {
    k++;
    spaced = true;
  }
  if (k >= p->len || !rd_alpha((unsigned char)s[k])) return;
  size_t e = k + 1;
  while (e < p->len && (rd_alpha((unsigned char)s[e]) || rd_digit((unsigned char)s[e]))) e++;
  if (e + 1 < p->len && s[e] == '/' &&
      (rd_alpha((unsigned char)s[e + 1]) || rd_digit((unsigned char)s[e + 1]))) {
    e++;
    while (e < p->len && (rd_alpha((unsigned char)s[e]) || rd_digit((unsigned char)s[e]))) e++;
  }
  if (spaced && !ir_unit_lookup(s + k, e - k)) {
    /* An unknown word after a space is a unit only where the value ends: before ',', '}', a
     * comment or the end of the line ("48 furlongs }"), not before '=' (the next field's name)
     * or anything else ("0 cost {"). */
    size_t q = e;
    while (q < p->len && (s[q] == ' ' || s[q] == '\t' || s[q] == '\r')) q++;
    if (q < p->len && s[q] != ',' && s[q] != '}' && s[q] != '#' && s[q] != '\n') return;
  }
  v->unit_off = k;
  v->unit_len = e - k;
  v->unit_loc = rd_span(p, k, e - k);
  p->pos = e;
}

/* Parse a value: ['-'] number [unit], or an identifier. 'what' is the field's name for messages.
 * The value's last token stays current (the caller checks the value, then calls rd_next, so that
 * errors come in text order). Returns false after reporting a syntax error. */
static bool rd_parse_value(rd_parser *p, rd_value *v, const char *what) {
  memset(v, 0, sizeof *v);
  rd_token start = p->tok;
  if (p->tok.kind == RD_MINUS) {
    v->negative = true;
    rd_next(p);
    if (p->tok.kind != RD_NUMBER) {
      rd_expected(p, "a number after '-'");
      return false;
    }
  }
  if (p->tok.kind == RD_NUMBER) {
    const rd_token *t = &p->tok;
    v->off = t->off;
    v->len = t->len;
    rd_scan_unit(p, v);
    size_t end = v->unit_len ? v->unit_off + v->unit_len : t->off + t->len;
    v->loc = rd_loc(p, &start);
    if (start.line == t->line)
      v->loc.len = (uint32_t)(end - start.off > 200 ? 200 : end - start.off);
    return true;
  }
  if (p->tok.kind == RD_IDENT && !v->negative) {
    v->ident = true;
    v->off = p->tok.off;
    v->len = p->tok.len;
    v->loc = rd_loc(p, &p->tok);
    return true;
  }
  char buf[96];
  snprintf(buf, sizeof buf, "a value for '%s'", what);
  rd_expected(p, buf);
  return false;
}

/* Write the text of value v (number or word, with its unit) into buf for messages: printable
 * ASCII as is, other bytes as \xNN, long texts cut with "...". */
static const char *rd_value_text(const rd_parser *p, const rd_value *v, char *buf, size_t n) {
  size_t o = 0;
  for (int part = 0; part < 2; part++) {
    const char *s = p->text + (part ? v->unit_off : v->off);
    size_t len = part ? v->unit_len : v->len;
    for (size_t i = 0; i < len; i++) {
      unsigned char c = (unsigned char)s[i];
      if (o + 8 >= n) {
        memcpy(buf + o, "...", 3);
        o += 3;
        part = 2;
        break;
      }
      if (c < 0x20 || c >= 0x7f)
        o += (size_t)snprintf(buf + o, n - o, "\\x%02x", c);
      else
        buf[o++] = (char)c;
    }
  }
  buf[o] = 0;
  return buf;
}

/* Report an unknown unit of v, suggesting a unit equal but for case, else the closest spelling
 * (among the units of dimension want, or all of them when it is IR_DIM_NONE). */
static void rd_unknown_unit(rd_parser *p, const rd_value *v, ir_dim want) {
  strbuf unit = {0};
  rd_put_text(&unit, p->text + v->unit_off, v->unit_len, 40);
  const char *best = NULL;
  char ubuf[64];
  if (v->unit_len < sizeof ubuf) {
    memcpy(ubuf, p->text + v->unit_off, v->unit_len);
    ubuf[v->unit_len] = 0;
    for (int i = 0; i < ir_unit_count && !best; i++) {
      const char *a = ir_units[i].name, *b = ubuf;
      while (*a && *b && (*a | 0x20) == (*b | 0x20)) a++, b++;
      if (!*a && !*b && (want == IR_DIM_NONE || ir_units[i].dim == want)) best = ir_units[i].name;
    }
    if (!best) {
      suggest sg;
      suggest_init(&sg, ubuf);
      for (int i = 0; i < ir_unit_count; i++)
        if (want == IR_DIM_NONE || ir_units[i].dim == want) suggest_add(&sg, ir_units[i].name);
      best = suggest_result(&sg);
    }
  }
  if (best)
    rd_error(p, v->unit_loc, "unknown unit '%s'; did you mean '%s'?", strbuf_cstr(&unit), best);
  else
    rd_error(p, v->unit_loc, "unknown unit '%s'", strbuf_cstr(&unit));
  strbuf_free(&unit);
}

/* Check value v against type t of field 'what' and compute it with ir_value_convert (the value
 * grammar the DSL and pass options share: the printed text reads back identically). Returns
 * false after reporting why v is not a valid value. */
static bool rd_convert(rd_parser *p, const rd_value *v, ir_type t, const char *what,
                       double *out) {
  const char *tname = ir_types[t].name;
  char text[128]; /* the value's text with its unit, for messages */
  ir_value_text vt = {v->ident, v->negative, p->text + v->off, v->len,
                      v->unit_len ? p->text + v->unit_off : NULL, v->unit_len};
  const ir_unit_info *u = NULL;
  double x = 0;
  ir_value_error e = ir_value_convert(&vt, t, 0, &x, &u);
  if (e == IR_VALUE_OK) {
    *out = x;
    return true;
  }
  rd_value_text(p, v, text, sizeof text);
  strbuf sb = {0};
  switch (e) {
  case IR_VALUE_OK: break;
  case IR_VALUE_NOT_BOOL:
    rd_error(p, v->loc, "expected true or false for '%s', found '%s'", what, text);
    break;
  case IR_VALUE_NOT_ENUM: {
    char word[64];
    bool fits = v->len < sizeof word;
    memcpy(word, p->text + v->off, fits ? v->len : 0);
    word[fits ? v->len : 0] = 0;
    suggest sg;
    suggest_init(&sg, word);
    for (int i = 0; i < ir_enum_value_count; i++)
      if (ir_enum_values[i].type == t) suggest_add(&sg, ir_enum_values[i].name);
    if (suggest_result(&sg)) {
      strbuf_printf(&sb, "did you mean '%s'?", suggest_result(&sg));
    } else {
      strbuf_puts(&sb, "expected one of ");
      ir_enum_names(&sb, t);
    }
    rd_error(p, v->loc, "unknown %s '%s' for '%s'; %s", tname, text, what, strbuf_cstr(&sb));
    break;
  }
  case IR_VALUE_NOT_FINITE:
    rd_error(p, v->loc, "'%s' is not a valid %s for '%s': values must be finite numbers", text,
             tname, what);
    break;
  case IR_VALUE_WORD:
    rd_error(p, v->loc, "expected %s %s for '%s', found '%s'", ir_article(tname), tname, what,
             text);
    break;
  case IR_VALUE_NUMBER:
    if (t == IR_T_BOOL) {
      strbuf_puts(&sb, "true or false");
    } else {
      strbuf_printf(&sb, "%s %s (", ir_article(tname), tname);
      ir_enum_names(&sb, t);
      strbuf_putc(&sb, ')');
    }
    rd_error(p, v->loc, "expected %s for '%s', found '%s'", strbuf_cstr(&sb), what, text);
    break;
  case IR_VALUE_NEGATIVE: rd_error(p, v->loc, "'%s' cannot be negative", what); break;
  case IR_VALUE_UNKNOWN_UNIT: rd_unknown_unit(p, v, ir_types[t].dim); break;
  case IR_VALUE_SUFFIX:
  case IR_VALUE_WRONG_DIM: {
    const char *got = u->dim == IR_DIM_NONE ? "count suffix" : ir_dim_name(u->dim);
    rd_put_text(&sb, p->text + v->unit_off, v->unit_len, 40);
    rd_error(p, v->unit_loc, "expected %s %s for '%s', got %s %s '%s'", ir_article(tname), tname,
             what, ir_article(got), got, strbuf_cstr(&sb));
    break;
  }
  case IR_VALUE_NO_UNIT:
    ir_unit_names(&sb, ir_types[t].dim, false);
    rd_error(p, v->loc, "missing unit on '%s': %s needs one of %s", what, tname,
             strbuf_cstr(&sb));
    break;
  case IR_VALUE_RANGE: rd_error(p, v->loc, "number '%s' is out of range", text); break;
  case IR_VALUE_FRACTION:
    rd_error(p, v->loc, "expected an integer for '%s', found %s", what, text);
    break;
  case IR_VALUE_TOO_LARGE:
    rd_error(p, v->loc, "'%s' = %s is too large: integers are at most 2^53 = 9007199254740992",
             what, text);
    break;
  case IR_VALUE_INEXACT:
    rd_error(p, v->loc, "'%s' = %s is not exact: above 2^53 not every integer is held (it "
             "would read as %.0f)", what, text, x);
    break;
  }
  strbuf_free(&sb);
  return false;
}

/* ---- Record bodies ------------------------------------------------------------------------ */

/* Target of a "{ name = value, ... }" body: a record struct, or the parameters of a layer. */
typedef struct rd_body {
  ir_record_kind kind; /* record kind, when rec is set */
  void *rec;           /* record struct to fill, or NULL */
  ir_layer *layer;     /* layer whose parameters to fill, or NULL */
  bool unchecked;      /* check only the syntax (the layer's kind is unknown) */
  int first, count;    /* the record's fields in ir_fields (set by rd_parse_body) */
} rd_body;

/* Field of the body's record spelled name (index into ir_fields), or -1: ir_field_lookup limited
 * to the record's own fields. */
static int rd_field_lookup(const rd_body *b, const char *name) {
  for (int i = b->first; i < b->first + b->count; i++)
    if (strcmp(ir_fields[i].name, name) == 0) return i;
  return -1;
}

/* Whether field idx of the body's record is set. */
static bool rd_field_is_set(const rd_body *b, int idx) {
  return (*ir_record_mask(b->rec, b->kind) >> (idx - b->first)) & 1;
}

/* Store value x in field idx of the body's record and mark it set: ir_field_set without its
 * table scans (whole-number types as int64_t, the rest as double). */
static void rd_field_store(const rd_body *b, int idx, double x) {
  char *at = (char *)b->rec + ir_fields[idx].offset;
  if (ir_type_is_integral(ir_fields[idx].type)) {
    int64_t iv = (int64_t)x;
    memcpy(at, &iv, sizeof iv);
  } else {
    memcpy(at, &x, sizeof x);
  }
  *ir_record_mask(b->rec, b->kind) |= (uint64_t)1 << (idx - b->first);
}

/* Report an unknown field name of record kind r. */
static void rd_unknown_field(rd_parser *p, const rd_token *t, const char *name, ir_record_kind r) {
  int first, n;
  ir_record_fields(r, &first, &n);
  suggest sg;
  suggest_init(&sg, name);
  for (int i = first; i < first + n; i++) suggest_add(&sg, ir_fields[i].name);
  strbuf sb = {0}, word = {0};
  rd_put_text(&word, p->text + t->off, t->len, 40);
  if (suggest_result(&sg)) {
    strbuf_printf(&sb, "did you mean '%s'?", suggest_result(&sg));
  } else {
    strbuf_puts(&sb, "expected one of ");
    for (int i = first; i < first + n; i++)
      strbuf_printf(&sb, "%s%s", i > first ? ", " : "", ir_fields[i].name);
  }
  rd_error(p, rd_loc(p, t), "unknown field '%s' in %s record; %s", strbuf_cstr(&word),
           ir_record_names[r], strbuf_cstr(&sb));
  strbuf_free(&sb);
  strbuf_free(&word);
}

/* Report a parameter name that kind k lacks: one of another kind, or an unknown one. */
static void rd_unknown_param(rd_parser *p, const rd_token *t, const char *name, ir_layer_kind k) {
  strbuf sb = {0}, word = {0};
  rd_put_text(&word, p->text + t->off, t->len, 40);
  bool owned[IR_KIND_COUNT] = {false};
  bool other = false;
  for (int i = 0; i < IR_LP_COUNT; i++)
    if (strcmp(ir_layer_params[i].name, name) == 0) owned[ir_layer_params[i].kind] = other = true;
  if (other) {
    for (int j = 0; j < IR_KIND_COUNT; j++)
      if (owned[j]) strbuf_printf(&sb, "%s%s", sb.len ? ", " : "", ir_kinds[j].name);
    rd_error(p, rd_loc(p, t), "parameter '%s' belongs to %s layers, not to %s",
             strbuf_cstr(&word), strbuf_cstr(&sb), ir_kinds[k].name);
  } else {
    int first = ir_kind_first_param(k), n = ir_kind_nparams(k);
    suggest sg;
    suggest_init(&sg, name);
    for (int i = first; i < first + n; i++) suggest_add(&sg, ir_layer_params[i].name);
    if (suggest_result(&sg)) {
      strbuf_printf(&sb, "did you mean '%s'?", suggest_result(&sg));
    } else {
      strbuf_puts(&sb, "expected one of ");
      for (int i = first; i < first + n; i++)
        strbuf_printf(&sb, "%s%s", i > first ? ", " : "", ir_layer_params[i].name);
    }
    rd_error(p, rd_loc(p, t), "unknown parameter '%s' for %s layer; %s", strbuf_cstr(&word),
             ir_kinds[k].name, strbuf_cstr(&sb));
  }
  strbuf_free(&sb);
  strbuf_free(&word);
}

/* Parse "{ [name = value (, name = value)*] }" into body b. Unknown names, duplicates and bad
 * values are reported and parsing goes on; returns false only after a syntax error. */
static bool rd_parse_body(rd_parser *p, rd_body *b) {
  if (!rd_expect(p, RD_LBRACE, "'{'")) return false;
  if (p->tok.kind == RD_RBRACE) {
    rd_next(p);
    return true;
  }
  if (!b->layer) ir_record_fields(b->kind, &b->first, &b->count);
  for (;;) {
    if (p->tok.kind != RD_IDENT) {
      rd_expected(p, b->layer ? "a parameter name" : "a field name");
      return false;
    }
    rd_token nt = p->tok;
    char name[64];
    bool fits = rd_text(p, &nt, 0, name, sizeof name);
    int idx = -1;
    ir_type type = IR_T_REAL;
    if (!b->unchecked) {
      if (b->layer) {
        idx = fits ? ir_param_lookup(b->layer->kind, name) : -1;
        if (idx < 0) rd_unknown_param(p, &nt, name, b->layer->kind);
        else type = ir_layer_params[idx].type;
      } else {
        idx = fits ? rd_field_lookup(b, name) : -1;
        if (idx < 0) rd_unknown_field(p, &nt, name, b->kind);
        else type = ir_fields[idx].type;
      }
    }
    rd_next(p);
    if (!rd_expect(p, RD_EQUAL, "'='")) return false;
    rd_value v;
    if (!rd_parse_value(p, &v, name)) return false;
    bool free_word = !b->layer && b->kind == IR_REC_TRAIN && v.ident && v.len == 4 &&
                     memcmp(p->text + v.off, "free", 4) == 0;
    if (idx >= 0) {
      bool dup = b->layer ? !isnan(b->layer->p[idx]) : rd_field_is_set(b, idx);
      if (!b->layer && b->kind == IR_REC_TRAIN && ir_train_is_free(b->rec, idx)) dup = true;
      double x;
      if (dup)
        rd_error(p, rd_loc(p, &nt), "duplicate %s '%s'", b->layer ? "parameter" : "field", name);
      else if (free_word && ir_train_may_be_free(idx))
        ir_train_set_free(b->rec, idx, true);
      else if (free_word)
        rd_error(p, v.loc, "train '%s' cannot be free: only %s can (for the config pass)", name,
                 IR_TRAIN_FREE_FIELDS);
      else if (rd_convert(p, &v, type, name, &x)) {
        if (b->layer)
          b->layer->p[idx] = x;
        else
          rd_field_store(b, idx, x);
      }
    }
    rd_next(p);
    if (p->tok.kind == RD_COMMA) {
      rd_next(p);
      continue;
    }
    if (p->tok.kind == RD_RBRACE) {
      rd_next(p);
      return true;
    }
    rd_expected(p, "',' or '}'");
    return false;
  }
}

/* Parse a record body of kind r into rec. */
static bool rd_record(rd_parser *p, ir_record_kind r, void *rec) {
  rd_body b = {r, rec, NULL, false, 0, 0};
  return rd_parse_body(p, &b);
}

/* ---- Statements --------------------------------------------------------------------------- */

/* Location of a statement starting at keyword t, in the IR text. */
static ir_loc rd_stmt_loc(const rd_parser *p, const rd_token *t) {
  ir_loc l = {p->file_name, p->file, t->line, t->col};
  return l;
}

/* Check that a statement of rank r (keyword t) comes in section order. */
static bool rd_order(rd_parser *p, const rd_token *t, rd_rank r) {
  if ((int)r < p->rank && p->rank < RK_COUNT) {
    rd_error(p, rd_loc(p, t), "out of order: '%s' statements must come before '%s' statements",
             rd_rank_names[r], rd_rank_names[p->rank]);
    return false;
  }
  p->rank = (int)r;
  return true;
}

/* Parse an optional "loc("file":line:col)" after a statement into *l (file in m's arena,
 * src 0: the engine does not hold that file). */
static bool rd_opt_loc(rd_parser *p, ir_loc *l, bool *seen) {
  if (!rd_is(p, &p->tok, "loc")) return true;
  if (*seen) rd_error(p, rd_loc(p, &p->tok), "duplicate loc(...)");
  *seen = true;
  rd_next(p);
  if (!rd_expect(p, RD_LPAREN, "'('")) return false;
  if (p->tok.kind != RD_STRING) {
    rd_expected(p, "a file name in double quotes");
    return false;
  }
  const char *file = p->loc_file;
  if (!file || strcmp(file, strbuf_cstr(&p->str)) != 0)
    file = p->loc_file = arena_strdup(&p->m->arena, strbuf_cstr(&p->str));
  rd_next(p);
  uint64_t line, col;
  if (!rd_expect(p, RD_COLON, "':'")) return false;
  rd_token lt = p->tok;
  if (!rd_uint(p, "a line number", UINT32_MAX, &line)) return false;
  if (line == 0) rd_error(p, rd_loc(p, &lt), "line numbers start at 1");
  if (!rd_expect(p, RD_COLON, "':'")) return false;
  if (!rd_uint(p, "a column number", UINT32_MAX, &col)) return false;
  if (!rd_expect(p, RD_RPAREN, "')'")) return false;
  l->file = file;
  l->src = 0;
  l->line = (uint32_t)line;
  l->col = (uint32_t)col;
  return true;
}

/* Report a reference to a missing entity: "unknown device $d9 (the module has 2 devices)". */
static bool rd_exists(rd_parser *p, const rd_token *t, int idx, int count, const char *what,
                      const char *sigil) {
  if (idx < count) return true;
  rd_error(p, rd_loc(p, t), "unknown %s %s%d (the module has %d %s%s)", what, sigil, idx, count,
           what, count == 1 ? "" : "s");
  return false;
}

/* profile "file" */
static bool rd_profile(rd_parser *p) {
  rd_token kw = p->tok;
  rd_next(p);
  if (!rd_order(p, &kw, RK_PROFILE)) return false;
  if (p->tok.kind != RD_STRING) {
    rd_expected(p, "a profile file name in double quotes");
    return false;
  }
  ir_module *m = p->m;
  ir_module_add_profile(m, strbuf_cstr(&p->str));
  rd_next(p);
  return true;
}

/* train { ... } */
static bool rd_train(rd_parser *p) {
  rd_token kw = p->tok;
  rd_next(p);
  if (!rd_order(p, &kw, RK_TRAIN)) return false;
  ir_train scratch = {0};
  void *rec = &p->m->train;
  if (p->seen_train) {
    rd_error(p, rd_loc(p, &kw), "duplicate 'train' statement");
    rec = &scratch;
  } else {
    p->m->train_loc = rd_stmt_loc(p, &kw);
  }
  p->seen_train = true;
  return rd_record(p, IR_REC_TRAIN, rec);
}

/* cluster @name { ... } */
static bool rd_cluster(rd_parser *p) {
  rd_token kw = p->tok;
  rd_next(p);
  if (!rd_order(p, &kw, RK_CLUSTER)) return false;
  const char *name = rd_at_name(p, "cluster");
  if (!name) return false;
  rd_next(p);
  ir_cluster scratch = {0};
  void *rec = &p->m->cluster;
  if (p->seen_cluster) {
    rd_error(p, rd_loc(p, &kw), "duplicate 'cluster' statement");
    rec = &scratch;
  } else {
    p->m->cluster_name = name;
  }
  p->seen_cluster = true;
  return rd_record(p, IR_REC_CLUSTER, rec);
}

/* link intra { ... } | link inter { ... } | link $dA -> $dB { ... } */
static bool rd_link(rd_parser *p) {
  rd_token kw = p->tok;
  rd_next(p);
  ir_module *m = p->m;
  ir_link_rec scratch = {0};
  if (rd_is(p, &p->tok, "intra") || rd_is(p, &p->tok, "inter")) {
    if (!rd_order(p, &kw, RK_NAMED_LINK)) return false;
    bool intra = rd_is(p, &p->tok, "intra");
    bool *seen = intra ? &p->seen_intra : &p->seen_inter;
    void *rec = intra ? &m->intra : &m->inter;
    if (*seen) {
      rd_error(p, rd_loc(p, &p->tok), "duplicate 'link %s' statement", intra ? "intra" : "inter");
      rec = &scratch;
    }
    *seen = true;
    rd_next(p);
    return rd_record(p, IR_REC_LINK, rec);
  }
  if (p->tok.kind != RD_DOLLAR) {
    rd_expected(p, "'intra', 'inter' or a device like $d0");
    return false;
  }
  if (!rd_order(p, &kw, RK_LINK)) return false;
  rd_token ft = p->tok;
  int from = rd_ref(p, RD_DOLLAR, "d", "device");
  if (from < 0 || !rd_expect(p, RD_ARROW, "'->'")) return false;
  rd_token tt = p->tok;
  int to = rd_ref(p, RD_DOLLAR, "d", "device");
  if (to < 0) return false;
  bool ok = rd_exists(p, &ft, from, m->ndevices, "device", "$d");
  ok = rd_exists(p, &tt, to, m->ndevices, "device", "$d") && ok;
  void *rec = &scratch;
  if (ok) rec = &ir_module_add_link(m, from, to)->rec;
  return rd_record(p, IR_REC_LINK, rec);
}

/* device $dI type { ... } [loc(...)] */
static bool rd_device(rd_parser *p) {
  rd_token kw = p->tok;
  rd_next(p);
  if (!rd_order(p, &kw, RK_DEVICE)) return false;
  if (rd_def(p, RD_DOLLAR, "d", "device", &p->next_device) < 0) return false;
  if (p->tok.kind != RD_IDENT && p->tok.kind != RD_STRING) {
    rd_expected(p, "a device type name");
    return false;
  }
  if (p->tok.kind == RD_IDENT) {
    p->str.len = 0;
    strbuf_append(&p->str, p->text + p->tok.off, p->tok.len);
  }
  ir_device *dv = ir_module_add_device(p->m, strbuf_cstr(&p->str));
  dv->loc = rd_stmt_loc(p, &kw);
  rd_next(p);
  if (!rd_record(p, IR_REC_DEVICE, &dv->rec)) return false;
  bool seen = false;
  return rd_opt_loc(p, &dv->loc, &seen);
}

/* layer %N "name" kind { params } [cost { ... }] [loc(...)] (cost and loc in either order) */
static bool rd_layer(rd_parser *p) {
  rd_token kw = p->tok;
  rd_next(p);
  if (!rd_order(p, &kw, RK_LAYER)) return false;
  if (rd_def(p, RD_PERCENT, "", "layer", &p->next_layer) < 0) return false;
  if (p->tok.kind != RD_STRING) {
    rd_expected(p, "a layer name in double quotes");
    return false;
  }
  p->name.len = 0;
  strbuf_append(&p->name, strbuf_cstr(&p->str), p->str.len);
  rd_next(p);
  if (p->tok.kind != RD_IDENT) {
    rd_expected(p, "a layer kind");
    return false;
  }
  rd_token kt = p->tok;
  char kname[64];
  int kind = rd_text(p, &kt, 0, kname, sizeof kname) ? ir_kind_lookup(kname) : -1;
  if (kind < 0) {
    suggest sg;
    suggest_init(&sg, kname);
    for (int k = 0; k < IR_KIND_COUNT; k++) suggest_add(&sg, ir_kinds[k].name);
    strbuf sb = {0}, word = {0};
    rd_put_text(&word, p->text + kt.off, kt.len, 40);
    if (suggest_result(&sg)) {
      strbuf_printf(&sb, "did you mean '%s'?", suggest_result(&sg));
    } else {
      strbuf_puts(&sb, "expected one of ");
      for (int k = 0; k < IR_KIND_COUNT; k++)
        strbuf_printf(&sb, "%s%s", k ? ", " : "", ir_kinds[k].name);
    }
    rd_error(p, rd_loc(p, &kt), "unknown layer kind '%s'; %s", strbuf_cstr(&word),
             strbuf_cstr(&sb));
    strbuf_free(&sb);
    strbuf_free(&word);
  }
  rd_next(p);
  ir_layer *l = ir_module_add_layer(p->m, strbuf_cstr(&p->name),
                                    kind < 0 ? IR_KIND_CUSTOM : (ir_layer_kind)kind);
  l->loc = rd_stmt_loc(p, &kw);
  rd_body b = {IR_REC_COST, NULL, l, kind < 0, 0, 0};
  if (!rd_parse_body(p, &b)) return false;
  bool seen_cost = false, seen_loc = false;
  for (;;) {
    if (rd_is(p, &p->tok, "cost")) {
      ir_cost scratch = {0};
      void *rec = &l->cost;
      rd_token ct = p->tok;
      rd_next(p);
      if (p->tok.kind == RD_STRING) { /* cost "TYPE" { ... }: on another device type */
        const char *type = strbuf_cstr(&p->str);
        bool dup = false;
        for (int k = 0; k < l->ntcosts; k++) dup |= strcmp(l->tcosts[k].type, type) == 0;
        if (dup)
          rd_error(p, rd_loc(p, &p->tok), "duplicate cost record for device type \"%s\"", type);
        else
          rec = ir_layer_add_type_cost(p->m, l, type);
        rd_next(p);
      } else {
        if (seen_cost) {
          rd_error(p, rd_loc(p, &ct), "duplicate cost record");
          rec = &scratch;
        }
        seen_cost = true;
      }
      if (!rd_record(p, IR_REC_COST, rec)) return false;
    } else if (rd_is(p, &p->tok, "loc")) {
      if (!rd_opt_loc(p, &l->loc, &seen_loc)) return false;
    } else {
      return true;
    }
  }
}

/* The attributes a stage may carry, in the order the printer writes them (tests/fuzz/dict.py
 * reads the names): its recomputation policy, how many of its recomputable layers recompute, and
 * whether its activations go to host memory between F and B. */
static const char *const rd_stage_attr_names[] = {"recompute", "recompute_layers", "offload"};
enum { RD_STAGE_RECOMPUTE, RD_STAGE_RECOMPUTE_LAYERS, RD_STAGE_OFFLOAD, RD_STAGE_ATTRS };

/* The attributes of stage si: "{ [NAME = VALUE {, NAME = VALUE}] }" with the names of
 * rd_stage_attr_names, each at most once, in any order (which combinations a stage may take is
 * ir_verify's check; a recompute_layers below 1 or beyond an int is the reader's). Pre: the
 * current token is '{'. Unknown names, duplicates and bad values are reported and parsing goes
 * on; returns false only after a syntax error. */
static bool rd_stage_attrs(rd_parser *p, int si) {
  rd_next(p);
  bool seen[RD_STAGE_ATTRS] = {false};
  while (p->tok.kind != RD_RBRACE) {
    if (p->tok.kind != RD_IDENT) {
      rd_expected(p, "an attribute name (recompute, recompute_layers, offload) or '}'");
      return false;
    }
    rd_token nt = p->tok;
    char name[64];
    int a = -1; /* the attribute's index in rd_stage_attr_names */
    if (rd_text(p, &nt, 0, name, sizeof name))
      for (int k = 0; k < RD_STAGE_ATTRS && a < 0; k++)
        if (strcmp(name, rd_stage_attr_names[k]) == 0) a = k;
    if (a < 0) {
      strbuf word = {0};
      rd_put_text(&word, p->text + nt.off, nt.len, 40);
      rd_error(p, rd_loc(p, &nt),
               "unknown stage attribute '%s'; expected recompute, recompute_layers or offload",
               strbuf_cstr(&word));
      strbuf_free(&word);
    } else if (seen[a]) {
      rd_error(p, rd_loc(p, &nt), "duplicate attribute '%s'", rd_stage_attr_names[a]);
    }
    rd_next(p);
    if (!rd_expect(p, RD_EQUAL, "'='")) return false;
    rd_value v;
    const char *what = a < 0 ? "recompute" : rd_stage_attr_names[a];
    if (!rd_parse_value(p, &v, what)) return false;
    double x;
    ir_stage *s = &p->m->stages[si];
    if (a == RD_STAGE_RECOMPUTE && !seen[a] && rd_convert(p, &v, IR_T_RECOMPUTE, what, &x)) {
      s->recompute = (ir_recompute)x;
    } else if (a == RD_STAGE_RECOMPUTE_LAYERS && !seen[a] &&
               rd_convert(p, &v, IR_T_COUNT, what, &x)) {
      if (x < 1 || x > INT_MAX)
        rd_error(p, v.loc, "'recompute_layers' = %.17g is out of range: a stage recomputes 1 to "
                 "%d of its layers (0 is recompute = none)", x, INT_MAX);
      else
        s->recompute_layers = (int)x;
    } else if (a == RD_STAGE_OFFLOAD && !seen[a] && rd_convert(p, &v, IR_T_BOOL, what, &x)) {
      s->offload = x != 0;
    }
    if (a >= 0) seen[a] = true;
    rd_next(p);
    if (p->tok.kind == RD_COMMA) {
      rd_next(p);
      continue;
    }
    if (p->tok.kind != RD_RBRACE) {
      rd_expected(p, "',' or '}'");
      return false;
    }
  }
  rd_next(p);
  return true;
}

/* stage @sI = [%a, %b) [{ recompute = none|full [, recompute_layers = N] [, offload = BOOL] }]
 * [loc(...)] */
static bool rd_stage(rd_parser *p) {
  rd_token kw = p->tok;
  rd_next(p);
  if (!rd_order(p, &kw, RK_STAGE)) return false;
  if (rd_def(p, RD_AT, "s", "stage", &p->next_stage) < 0) return false;
  if (!rd_expect(p, RD_EQUAL, "'='") || !rd_expect(p, RD_LBRACKET, "'['")) return false;
  rd_token ft = p->tok;
  int first = rd_ref(p, RD_PERCENT, "", "layer");
  if (first < 0 || !rd_expect(p, RD_COMMA, "','")) return false;
  rd_token et = p->tok;
  int end = rd_ref(p, RD_PERCENT, "", "layer");
  if (end < 0) return false;
  if (p->tok.kind == RD_RBRACKET) {
    rd_error(p, rd_loc(p, &p->tok),
             "expected ')' to end the layer range: stage ranges are half-open, [%%first, %%end)");
    return false;
  }
  if (!rd_expect(p, RD_RPAREN, "')'")) return false;
  int n = p->m->nlayers;
  rd_exists(p, &ft, first, n, "layer", "%");
  if (end > n)
    rd_error(p, rd_loc(p, &et), "range end %%%d is past the last layer (the module has %d layer%s, "
             "so a range ends at %%%d at most)", end, n, n == 1 ? "" : "s", n);
  ir_stage *s = ir_module_add_stage(p->m, first, end);
  s->loc = rd_stmt_loc(p, &kw);
  if (p->tok.kind == RD_LBRACE && !rd_stage_attrs(p, p->m->nstages - 1)) return false;
  s = &p->m->stages[p->m->nstages - 1];
  bool seen = false;
  return rd_opt_loc(p, &s->loc, &seen);
}

/* place @sI on $dJ */
static bool rd_place(rd_parser *p) {
  rd_token kw = p->tok;
  rd_next(p);
  if (!rd_order(p, &kw, RK_PLACE)) return false;
  rd_token st = p->tok;
  int s = rd_ref(p, RD_AT, "s", "stage");
  if (s < 0) return false;
  if (!rd_is(p, &p->tok, "on")) {
    rd_expected(p, "'on'");
    return false;
  }
  rd_next(p);
  rd_token dt = p->tok;
  int dv = rd_ref(p, RD_DOLLAR, "d", "device");
  if (dv < 0) return false;
  ir_module *m = p->m;
  bool ok = rd_exists(p, &st, s, m->nstages, "stage", "@s");
  ok = rd_exists(p, &dt, dv, m->ndevices, "device", "$d") && ok;
  if (!ok) return true;
  if (m->stages[s].device >= 0)
    rd_error(p, rd_loc(p, &kw), "stage @s%d is already placed on $d%d", s, m->stages[s].device);
  else
    m->stages[s].device = dv;
  return true;
}

/* schedule method "NAME" | schedule $dI { [op @sJ mb (, op @sJ mb)*] } [loc(...)] */
static bool rd_schedule(rd_parser *p) {
  rd_token kw = p->tok;
  rd_next(p);
  if (!rd_order(p, &kw, RK_SCHEDULE)) return false;
  ir_module *m = p->m;
  if (p->tok.kind == RD_IDENT && rd_is(p, &p->tok, "method")) {
    rd_next(p);
    if (p->tok.kind != RD_STRING) {
      rd_expected(p, "the schedule method's name in double quotes");
      return false;
    }
    if (m->schedule_method)
      rd_error(p, rd_loc(p, &kw), "duplicate 'schedule method'");
    else
      m->schedule_method = arena_strdup(&m->arena, strbuf_cstr(&p->str));
    rd_next(p);
    return true;
  }
  rd_token dt = p->tok;
  int dv = rd_ref(p, RD_DOLLAR, "d", "device");
  if (dv < 0) return false;
  if (!m->schedules) {
    ir_module_init_schedules(m);
    p->sched_seen = xcalloc((size_t)m->ndevices + 1, sizeof *p->sched_seen);
  }
  ir_schedule scratch = {0};
  ir_schedule *sc = &scratch;
  if (rd_exists(p, &dt, dv, m->ndevices, "device", "$d")) {
    if (p->sched_seen[dv])
      rd_error(p, rd_loc(p, &kw), "duplicate schedule for $d%d", dv);
    else
      sc = &m->schedules[dv];
    p->sched_seen[dv] = true;
  }
  sc->loc = rd_stmt_loc(p, &kw);
  bool ok = rd_expect(p, RD_LBRACE, "'{'");
  if (ok && p->tok.kind == RD_RBRACE) {
    rd_next(p);
  } else {
    while (ok) {
      if (p->tok.kind != RD_IDENT) {
        rd_expected(p, "an operation (F, B, W or BW)");
        ok = false;
        break;
      }
      rd_token ot = p->tok;
      int kind = -1;
      for (int k = 0; k < IR_OP_COUNT; k++)
        if (rd_is(p, &ot, ir_op_names[k])) kind = k;
      if (kind < 0) {
        strbuf sb = {0};
        rd_describe(p, &ot, &sb);
        strbuf_puts(&sb, "; expected one of ");
        for (int k = 0; k < IR_OP_COUNT; k++)
          strbuf_printf(&sb, "%s%s", k ? ", " : "", ir_op_names[k]);
        rd_error(p, rd_loc(p, &ot), "unknown operation %s", strbuf_cstr(&sb));
        strbuf_free(&sb);
      }
      rd_next(p);
      rd_token st = p->tok;
      int s = rd_ref_peek(p, RD_AT, "s", "stage");
      if (s < 0) {
        ok = false;
        break;
      }
      bool good = rd_exists(p, &st, s, m->nstages, "stage", "@s") && kind >= 0;
      rd_next(p);
      uint64_t mb = 0;
      if (!rd_uint(p, "a microbatch number", 1000000000, &mb)) {
        ok = false;
        break;
      }
      if (good && sc != &scratch) ir_schedule_push(sc, (ir_op_kind)kind, s, (int)mb);
      if (p->tok.kind == RD_COMMA) {
        rd_next(p);
        continue;
      }
      if (p->tok.kind == RD_RBRACE) {
        rd_next(p);
        break;
      }
      rd_expected(p, "',' or '}'");
      ok = false;
    }
  }
  if (ok) {
    bool seen = false;
    ok = rd_opt_loc(p, &sc->loc, &seen);
  }
  free(scratch.ops);
  return ok;
}

/* predict { ... } | predict $dI { ... } */
static bool rd_predict(rd_parser *p) {
  rd_token kw = p->tok;
  rd_next(p);
  ir_module *m = p->m;
  if (p->tok.kind == RD_LBRACE) {
    if (!rd_order(p, &kw, RK_PREDICT)) return false;
    ir_predict scratch = {0};
    void *rec = &m->predict;
    if (p->seen_predict) {
      rd_error(p, rd_loc(p, &kw), "duplicate 'predict' statement");
      rec = &scratch;
    }
    p->seen_predict = true;
    return rd_record(p, IR_REC_PREDICT, rec);
  }
  if (p->tok.kind != RD_DOLLAR) {
    rd_expected(p, "'{' or a device like $d0");
    return false;
  }
  if (!rd_order(p, &kw, RK_DEVPREDICT)) return false;
  rd_token dt = p->tok;
  int dv = rd_ref(p, RD_DOLLAR, "d", "device");
  if (dv < 0) return false;
  ir_devpredict scratch = {0};
  void *rec = &scratch;
  if (rd_exists(p, &dt, dv, m->ndevices, "device", "$d")) {
    if (!p->devpredict_seen) p->devpredict_seen = xcalloc((size_t)m->ndevices + 1, sizeof(bool));
    if (p->devpredict_seen[dv])
      rd_error(p, rd_loc(p, &kw), "duplicate predict for $d%d", dv);
    else
      rec = &m->devices[dv].predict;
    p->devpredict_seen[dv] = true;
  }
  return rd_record(p, IR_REC_DEVPREDICT, rec);
}

/* One statement of the module body. Returns false after a syntax error (reported). */
static bool rd_statement(rd_parser *p) {
  const rd_token *t = &p->tok;
  if (rd_is(p, t, "layer")) return rd_layer(p);
  if (rd_is(p, t, "device")) return rd_device(p);
  if (rd_is(p, t, "stage")) return rd_stage(p);
  if (rd_is(p, t, "place")) return rd_place(p);
  if (rd_is(p, t, "schedule")) return rd_schedule(p);
  if (rd_is(p, t, "link")) return rd_link(p);
  if (rd_is(p, t, "predict")) return rd_predict(p);
  if (rd_is(p, t, "train")) return rd_train(p);
  if (rd_is(p, t, "cluster")) return rd_cluster(p);
  if (rd_is(p, t, "profile")) return rd_profile(p);
  if (t->kind == RD_IDENT) {
    char word[64];
    if (rd_text(p, t, 0, word, sizeof word)) {
      suggest sg;
      suggest_init(&sg, word);
      for (size_t i = 0; i < sizeof rd_keywords / sizeof rd_keywords[0]; i++)
        suggest_add(&sg, rd_keywords[i]);
      if (suggest_result(&sg)) {
        rd_error(p, rd_loc(p, t), "unknown statement '%s'; did you mean '%s'?", word,
                 suggest_result(&sg));
        return false;
      }
    }
  }
  rd_expected(p, "a statement (profile, train, cluster, link, device, layer, stage, place, "
                 "schedule, predict) or '}'");
  return false;
}

/* Whether token t is a statement keyword. */
static bool rd_is_keyword(const rd_parser *p, const rd_token *t) {
  for (size_t i = 0; i < sizeof rd_keywords / sizeof rd_keywords[0]; i++)
    if (rd_is(p, t, rd_keywords[i])) return true;
  return false;
}

/* After a syntax error in the statement that started at 'start': skip tokens up to one past it
 * that starts a line and is a statement keyword, or a '}' at the start of a line that closes the
 * module (by brace depth), or the end of the file. */
static void rd_recover(rd_parser *p, const rd_token *start) {
  p->skipping = true;
  for (;;) {
    const rd_token *t = &p->tok;
    if (t->kind == RD_EOF) break;
    if (t->off > start->off && t->bol) {
      if (t->kind == RD_IDENT && rd_is_keyword(p, t)) {
        p->depth = 1;
        break;
      }
      if (t->kind == RD_RBRACE && p->depth <= 0) {
        p->depth = 0;
        break;
      }
    }
    rd_next(p);
  }
  p->skipping = false;
}

ir_module *ir_read(diag_engine *d, uint32_t file) {
  const diag_source *src = diag_get_source(d, file);
  if (!src) {
    diag_error(d, diag_mkloc(0, 0, 0, 0), "no IR source numbered %u", file);
    return NULL;
  }
  rd_parser p = {0};
  p.d = d;
  p.file = file;
  p.text = src->text;
  p.len = src->len;
  p.line = src->line_base + 1;
  p.at_bol = true;
  rd_next(&p);

  /* module @name { */
  rd_token kw = p.tok;
  const char *name = NULL;
  if (!rd_is(&p, &kw, "module")) {
    rd_expected(&p, "'module'");
  } else {
    rd_next(&p);
    name = rd_at_name(&p, "module");
    if (name) {
      rd_next(&p);
      if (!rd_expect(&p, RD_LBRACE, "'{'")) name = NULL;
    }
  }
  if (!name) {
    strbuf_free(&p.str);
    strbuf_free(&p.name);
    return NULL;
  }
  ir_module *m = ir_module_new(name);
  p.m = m;
  p.file_name = arena_strdup(&m->arena, src->name);
  m->loc = rd_stmt_loc(&p, &kw);

  bool closed = false;
  while (!(p.errors && diag_limit_reached(d))) { /* stop once our errors passed the limit */
    if (p.tok.kind == RD_RBRACE) {
      closed = true;
      rd_next(&p);
      break;
    }
    if (p.tok.kind == RD_EOF) {
      rd_expected(&p, "'}'");
      break;
    }
    rd_token start = p.tok;
    if (!rd_statement(&p)) rd_recover(&p, &start);
  }
  if (closed && p.tok.kind != RD_EOF && p.tok.kind != RD_ERROR) {
    strbuf sb = {0};
    rd_describe(&p, &p.tok, &sb);
    rd_error(&p, rd_loc(&p, &p.tok), "unexpected %s after the end of the module",
             strbuf_cstr(&sb));
    strbuf_free(&sb);
  }

  free(p.sched_seen);
  free(p.devpredict_seen);
  strbuf_free(&p.str);
  strbuf_free(&p.name);
  if (p.errors > 0) {
    ir_module_free(m);
    return NULL;
  }
  return m;
}
