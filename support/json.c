/* json.c -- positions in the raw text of a JSON document, for messages that point at the byte
 * (cJSON builds the tree but keeps no positions): a strict RFC 8259 syntax check that finds the
 * exact byte of the first error (cJSON is lenient and its error pointer approximate), and the key
 * of a member reached by member indices (see support.h, "JSON text"). */
#include <string.h>

#include "support.h"

/* Where the value of t[0, n) may start: after a UTF-8 byte order mark. */
static size_t json_start(const char *t, size_t n) {
  return n >= 3 && memcmp(t, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0;
}

/* ---- Scanning valid JSON -------------------------------------------------------------------- */

/* Index of the first byte of t[0, n) at or after i that is not JSON whitespace (space, tab, LF,
 * CR); n when none. */
static size_t json_ws(const char *t, size_t n, size_t i) {
  while (i < n && (t[i] == ' ' || t[i] == '\t' || t[i] == '\n' || t[i] == '\r')) i++;
  return i;
}

size_t support_json_string_end(const char *t, size_t n, size_t i) {
  for (i++; i < n && t[i] != '"'; i++)
    if (t[i] == '\\') i++;
  return i < n ? i + 1 : n;
}

/* Index after the value starting at t[i] (valid JSON). */
static size_t json_value_end(const char *t, size_t n, size_t i) {
  if (i >= n) return n;
  if (t[i] == '"') return support_json_string_end(t, n, i);
  if (t[i] == '{' || t[i] == '[') {
    int level = 0;
    while (i < n) {
      char c = t[i];
      if (c == '"') {
        i = support_json_string_end(t, n, i);
        continue;
      }
      if (c == '{' || c == '[') level++;
      if (c == '}' || c == ']') {
        if (--level == 0) return i + 1;
      }
      i++;
    }
    return n;
  }
  while (i < n && !strchr(",}] \t\r\n", t[i])) i++;
  return i;
}

bool support_json_locate(const char *t, size_t n, const int *index, int depth, size_t *off,
                         size_t *len) {
  size_t i = json_ws(t, n, json_start(t, n));
  if (depth == 0) {
    *off = i;
    *len = 1;
    return i < n;
  }
  for (int k = 0; k < depth; k++) {
    if (i >= n || t[i] != '{') return false;
    i = json_ws(t, n, i + 1);
    for (int member = 0;; member++) {
      if (i >= n || t[i] != '"') return false;
      size_t key = i;
      i = support_json_string_end(t, n, i);
      size_t key_end = i;
      i = json_ws(t, n, i);
      if (i >= n || t[i] != ':') return false;
      i = json_ws(t, n, i + 1);
      if (member == index[k]) {
        if (k == depth - 1) {
          *off = key;
          *len = key_end - key;
          return true;
        }
        break; /* descend into the value at i */
      }
      i = json_ws(t, n, json_value_end(t, n, i));
      if (i < n && t[i] == ',') i = json_ws(t, n, i + 1);
    }
  }
  return false;
}

/* ---- Strict syntax check (RFC 8259) --------------------------------------------------------- */

#define JC_MAX_DEPTH 512 /* nesting limit (cJSON's is 1000) */

/* State of the syntax check. */
typedef struct js_check {
  const char *t;   /* text */
  size_t n;        /* its length */
  size_t i;        /* position */
  const char *msg; /* what was expected where it failed */
  int depth;       /* nesting of objects and arrays */
} js_check;

/* Record what was expected at the current position; returns false. */
static bool jc_fail(js_check *c, const char *msg) {
  c->msg = msg;
  return false;
}

/* Skip blanks. */
static void jc_ws(js_check *c) { c->i = json_ws(c->t, c->n, c->i); }

/* Skip digits; whether there was at least one. */
static bool jc_digits(js_check *c) {
  size_t from = c->i;
  while (c->i < c->n && c->t[c->i] >= '0' && c->t[c->i] <= '9') c->i++;
  return c->i > from;
}

/* A string at c->i ('"'): escapes valid, no raw control characters. Post: c->i after it. */
static bool jc_string(js_check *c) {
  c->i++; /* the opening quote */
  while (c->i < c->n) {
    unsigned char ch = (unsigned char)c->t[c->i];
    if (ch == '"') {
      c->i++;
      return true;
    }
    if (ch < 0x20) return jc_fail(c, "a control character must be escaped in a string");
    if (ch == '\\') {
      c->i++;
      if (c->i >= c->n) break;
      char e = c->t[c->i];
      if (e == 'u') {
        for (int k = 1; k <= 4; k++)
          if (c->i + k >= c->n || !strchr("0123456789abcdefABCDEF", c->t[c->i + k]) ||
              !c->t[c->i + k]) {
            c->i += (size_t)k;
            return jc_fail(c, "expected four hexadecimal digits after \\u");
          }
        c->i += 4;
      } else if (!e || !strchr("\"\\/bfnrt", e)) {
        return jc_fail(c, "invalid escape in a string");
      }
    }
    c->i++;
  }
  return jc_fail(c, "unterminated string");
}

/* A number at c->i ('-' or a digit) in RFC 8259 form. Post: c->i after it. */
static bool jc_number(js_check *c) {
  if (c->t[c->i] == '-') c->i++;
  if (c->i < c->n && c->t[c->i] == '0') c->i++;
  else if (!jc_digits(c)) return jc_fail(c, "expected a digit");
  if (c->i < c->n && c->t[c->i] == '.') {
    c->i++;
    if (!jc_digits(c)) return jc_fail(c, "expected a digit after '.'");
  }
  if (c->i < c->n && (c->t[c->i] == 'e' || c->t[c->i] == 'E')) {
    c->i++;
    if (c->i < c->n && (c->t[c->i] == '+' || c->t[c->i] == '-')) c->i++;
    if (!jc_digits(c)) return jc_fail(c, "expected a digit in the exponent");
  }
  if (c->i < c->n && c->t[c->i] >= '0' && c->t[c->i] <= '9')
    return jc_fail(c, "a number may not start with 0");
  return true;
}

static bool jc_value(js_check *c);

/* An object or array at c->i ('{' or '['). */
static bool jc_container(js_check *c) {
  bool object = c->t[c->i] == '{';
  char close = object ? '}' : ']';
  if (++c->depth > JC_MAX_DEPTH) return jc_fail(c, "objects and arrays nested too deeply");
  c->i++;
  jc_ws(c);
  if (c->i < c->n && c->t[c->i] == close) {
    c->i++;
    c->depth--;
    return true;
  }
  for (;;) {
    jc_ws(c);
    if (object) {
      if (c->i >= c->n || c->t[c->i] != '"') return jc_fail(c, "expected a string key");
      if (!jc_string(c)) return false;
      jc_ws(c);
      if (c->i >= c->n || c->t[c->i] != ':') return jc_fail(c, "expected ':' after the key");
      c->i++;
    }
    if (!jc_value(c)) return false;
    jc_ws(c);
    if (c->i < c->n && c->t[c->i] == ',') {
      c->i++;
      continue;
    }
    if (c->i < c->n && c->t[c->i] == close) {
      c->i++;
      c->depth--;
      return true;
    }
    return jc_fail(c, object ? "expected ',' or '}' in an object"
                             : "expected ',' or ']' in an array");
  }
}

/* Any value after blanks. Post: c->i after it, or c->msg says what was expected there. */
static bool jc_value(js_check *c) {
  jc_ws(c);
  if (c->i >= c->n) return jc_fail(c, "expected a value");
  char ch = c->t[c->i];
  if (ch == '{' || ch == '[') return jc_container(c);
  if (ch == '"') return jc_string(c);
  if (ch == '-' || (ch >= '0' && ch <= '9')) return jc_number(c);
  static const char *const words[] = {"true", "false", "null"};
  for (int k = 0; k < 3; k++) {
    size_t len = strlen(words[k]);
    if (c->n - c->i >= len && memcmp(c->t + c->i, words[k], len) == 0) {
      c->i += len;
      return true;
    }
  }
  return jc_fail(c, "expected a value");
}

bool support_json_check(const char *t, size_t n, size_t *at, const char **msg) {
  js_check jc = {t, n, json_start(t, n), NULL, 0};
  bool ok = jc_value(&jc);
  if (ok) {
    jc_ws(&jc);
    if (jc.i < jc.n) ok = jc_fail(&jc, "expected the end of the file after the JSON value");
  }
  *at = jc.i;
  *msg = ok ? NULL : jc.msg;
  return ok;
}
