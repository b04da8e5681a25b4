/* gpu_profile.c -- the profile file of measured layer costs (gpu.h, rg_profile_json): the JSON
 * object of docs/cost-model.md, "Profile files", that the cost pass reads. Plain C without CUDA,
 * built in every configuration so that its format is tested without a GPU. */
#include <math.h>
#include <string.h>

#include "gpu.h"

/* Append s to out as a JSON string (quotes, backslashes and control characters escaped). */
static void json_string(strbuf *out, const char *s) {
  strbuf_putc(out, '"');
  for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
    if (*c == '"' || *c == '\\') {
      strbuf_putc(out, '\\');
      strbuf_putc(out, (char)*c);
    } else if (*c < 0x20) {
      strbuf_printf(out, "\\u%04x", *c);
    } else {
      strbuf_putc(out, (char)*c);
    }
  }
  strbuf_putc(out, '"');
}

/* Append the number v (finite) as JSON, in its shortest round-trip form. */
static void json_number(strbuf *out, double v) {
  char buf[40];
  fmt_shortest_scaled(buf, v, 1.0);
  strbuf_puts(out, buf);
}

/* A valid measured time in seconds: finite and not negative. */
static bool time_ok(double t) { return isfinite(t) && t >= 0; }

int rg_profile_json(const be_stream *s, const rg_layer_profile *p, int n, const char *device_type,
                    strbuf *out) {
  if (n < 0 || (n > 0 && !p)) return -1;
  for (int i = 0; i < n; i++) {
    if (!p[i].kind || !time_ok(p[i].f) || !time_ok(p[i].b) || !time_ok(p[i].w)) return -1;
    for (int j = 0; j < i; j++)
      if (strcmp(p[i].kind, p[j].kind) == 0) return -1;
  }
  strbuf_puts(out, "{\n  \"format\": \"octopipe-profile\",\n  \"version\": 1,\n");
  if (device_type) {
    strbuf_puts(out, "  \"device\": ");
    json_string(out, device_type);
    strbuf_puts(out, ",\n");
  }
  strbuf_printf(out, "  \"micro_batch\": %d,\n  \"seq\": %d,\n  \"tensor\": 1,\n",
                s->micro_batch > 0 ? (int)s->micro_batch : 1, s->seq > 0 ? (int)s->seq : 1);
  strbuf_puts(out, "  \"dtype\": \"bf16\",\n  \"kinds\": {");
  for (int i = 0; i < n; i++) {
    strbuf_puts(out, i ? ",\n    " : "\n    ");
    json_string(out, p[i].kind);
    strbuf_puts(out, ": {\"f_ms\": ");
    json_number(out, p[i].f * 1e3);
    strbuf_puts(out, ", \"b_ms\": ");
    json_number(out, p[i].b * 1e3);
    strbuf_puts(out, ", \"w_ms\": ");
    json_number(out, p[i].w * 1e3);
    strbuf_putc(out, '}');
  }
  strbuf_puts(out, n ? "\n  }\n}\n" : "}\n}\n");
  return 0;
}
