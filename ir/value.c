/* value.c -- the one value grammar of the DSL, the IR reader and pass options: a number with an
 * optional unit of units.def, or a word (true, false, an enum value), converted to a value of an
 * ir_type exactly (the unit's scale applied by scale_apply, the computation the printer checks
 * its texts with) and classified, when it does not fit, by one ir_value_error that each reader
 * words in its own messages. */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"

/* The largest whole number a value may hold: every whole number up to it is a double. */
#define IR_VALUE_MAX_WHOLE 9007199254740992.0

static bool is_digit(int c) { return c >= '0' && c <= '9'; }

size_t ir_value_scan(const char *s, size_t n, ir_value_text *v) {
  memset(v, 0, sizeof *v);
  size_t i = 0;
  if (i < n && (s[i] == '+' || s[i] == '-')) v->negative = s[i++] == '-';
  size_t start = i;
  while (i < n && is_digit((unsigned char)s[i])) i++;
  bool digits = i > start;
  if (i < n && s[i] == '.' && (digits || (i + 1 < n && is_digit((unsigned char)s[i + 1])))) {
    i++;
    while (i < n && is_digit((unsigned char)s[i])) i++;
    digits = true;
  }
  if (!digits) { /* a word, or nothing this grammar reads */
    if (i != 0 || i >= n || !(isalpha((unsigned char)s[i]) || s[i] == '_')) return 0;
    while (i < n && (isalnum((unsigned char)s[i]) || s[i] == '_')) i++;
    v->word = true;
    v->num = s;
    v->num_len = i;
    return i;
  }
  if (i + 1 < n && (s[i] == 'e' || s[i] == 'E')) { /* an exponent only when digits follow */
    size_t e = i + 1;
    if (e < n && (s[e] == '+' || s[e] == '-')) e++;
    if (e < n && is_digit((unsigned char)s[e])) {
      while (e < n && is_digit((unsigned char)s[e])) e++;
      i = e;
    }
  }
  v->num = s + start;
  v->num_len = i - start;
  size_t u = i;
  while (u < n && (s[u] == ' ' || s[u] == '\t')) u++;
  if (u < n) {
    v->unit = s + u;
    v->unit_len = n - u;
  }
  return n;
}

double ir_value_number(const char *s, size_t n) {
  if (n <= 15) { /* plain digits of up to 15: exact without strtod */
    int64_t x = 0;
    size_t i = 0;
    while (i < n && is_digit((unsigned char)s[i])) x = x * 10 + (s[i++] - '0');
    if (i == n) return (double)x;
  }
  char small[64];
  char *num = n < sizeof small ? small : xmalloc(n + 1);
  memcpy(num, s, n);
  num[n] = 0;
  double x = strtod(num, NULL);
  if (num != small) free(num);
  return x;
}

/* Whether word w (of length n) is one of the spellings strtod would read as a non-finite
 * number: a number's place holds it, but no value is infinite or not a number. */
static bool is_nonfinite_word(const char *w, size_t n) {
  static const char *const words[] = {"nan", "NaN", "NAN", "inf", "Inf", "INF", "infinity",
                                      "Infinity"};
  for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
    if (strlen(words[i]) == n && memcmp(words[i], w, n) == 0) return true;
  return false;
}

ir_value_error ir_value_convert(const ir_value_text *v, ir_type t, unsigned flags, double *out,
                                const ir_unit_info **unit) {
  *out = 0;
  if (unit) *unit = NULL;
  if (v->word) {
    char word[64];
    bool fits = v->num_len < sizeof word;
    memcpy(word, v->num, fits ? v->num_len : 0);
    word[fits ? v->num_len : 0] = 0;
    if (t == IR_T_BOOL) {
      if (strcmp(word, "true") != 0 && strcmp(word, "false") != 0) return IR_VALUE_NOT_BOOL;
      *out = word[0] == 't';
      return IR_VALUE_OK;
    }
    if (ir_type_is_enum(t)) {
      int e = fits ? ir_enum_lookup(t, word) : -1;
      if (e < 0) return IR_VALUE_NOT_ENUM;
      *out = e;
      return IR_VALUE_OK;
    }
    return is_nonfinite_word(v->num, v->num_len) ? IR_VALUE_NOT_FINITE : IR_VALUE_WORD;
  }
  if (t == IR_T_BOOL || ir_type_is_enum(t)) return IR_VALUE_NUMBER;
  double x = ir_value_number(v->num, v->num_len);
  if (v->negative && x != 0 && !(flags & IR_VALUE_SIGNED)) return IR_VALUE_NEGATIVE;
  if (v->negative) x = -x; /* negative zero reads back as itself */
  double scale = 1.0;
  ir_dim want = ir_types[t].dim;
  if (v->unit_len) {
    const ir_unit_info *u = ir_unit_lookup(v->unit, v->unit_len);
    if (!u) return IR_VALUE_UNKNOWN_UNIT;
    if (unit) *unit = u;
    if (want == IR_DIM_NONE && u->dim == IR_DIM_NONE && t != IR_T_COUNT) return IR_VALUE_SUFFIX;
    if (u->dim != want) return IR_VALUE_WRONG_DIM;
    scale = u->scale;
  } else if (want != IR_DIM_NONE) {
    return IR_VALUE_NO_UNIT;
  }
  double val = scale == 1.0 ? x : scale_apply(x, scale);
  if (!isfinite(val)) return IR_VALUE_RANGE;
  *out = val;
  if (t == IR_T_COUNT) {
    if (val != floor(val)) return IR_VALUE_FRACTION;
    if (flags & IR_VALUE_INT64 ? fabs(val) >= 9.0e18 : fabs(val) > IR_VALUE_MAX_WHOLE)
      return IR_VALUE_TOO_LARGE;
    bool plain = !v->unit_len && strspn(v->num, "0123456789") == v->num_len;
    if (plain && !support_digits_exact(v->num, v->num_len, fabs(x))) return IR_VALUE_INEXACT;
  }
  return IR_VALUE_OK;
}

const char *ir_article(const char *word) { return strchr("aeiou", word[0]) ? "an" : "a"; }

void ir_enum_names(strbuf *sb, ir_type t) {
  bool first = true;
  for (int i = 0; i < ir_enum_value_count; i++) {
    if (ir_enum_values[i].type != t) continue;
    strbuf_puts(sb, first ? "" : ", ");
    strbuf_puts(sb, ir_enum_values[i].name);
    first = false;
  }
}

void ir_unit_names(strbuf *sb, ir_dim dim, bool printable_only) {
  bool first = true;
  for (int i = 0; i < ir_unit_count; i++) {
    if (ir_units[i].dim != dim || (printable_only && !ir_units[i].printable)) continue;
    strbuf_puts(sb, first ? "" : ", ");
    strbuf_puts(sb, ir_units[i].name);
    first = false;
  }
}
