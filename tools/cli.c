/* cli.c -- the command-line helpers the tools share (cli.h). */
#include "cli.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cli_init(void) { signal(SIGXFSZ, SIG_IGN); }

void cli_error(const char *prog, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s: error: ", prog);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

/* The flag of 'flags' spelled name[0..len), or NULL. */
static const cli_flag *find_flag(const cli_flag *flags, int n, const char *name, size_t len) {
  for (int i = 0; i < n; i++)
    if (strlen(flags[i].name) == len && memcmp(flags[i].name, name, len) == 0) return &flags[i];
  return NULL;
}

/* Report unknown option name[0..len) with the closest known spelling. */
static void unknown_option(const char *prog, const cli_flag *flags, int n, const char *name,
                           size_t len) {
  char *opt = xstrndup(name, len);
  cli_error(prog, "unknown option '%s'", opt);
  suggest s;
  suggest_init(&s, opt);
  for (int k = 0; k < n; k++) suggest_add(&s, flags[k].name);
  if (suggest_result(&s)) fprintf(stderr, "%s: note: did you mean '%s'?\n", prog, suggest_result(&s));
  fprintf(stderr, "%s: note: run '%s --help' for the list of options\n", prog, prog);
  free(opt);
}

cli_item cli_next(const char *prog, const cli_flag *flags, int n, int argc, char **argv, int *i,
                  const cli_flag **flag, const char **value) {
  const char *a = argv[*i];
  *flag = NULL;
  *value = NULL;
  if (a[0] != '-' || a[1] == '\0') {
    *value = a;
    return CLI_INPUT;
  }
  if (strcmp(a, "-h") == 0) a = "--help";
  const cli_flag *f;
  if (a[1] == 'o') { /* -o FILE, -oFILE, -o=FILE */
    f = find_flag(flags, n, "-o", 2);
    if (f && a[2]) *value = a[2] == '=' ? a + 3 : a + 2;
  } else {
    const char *eq = a[1] == '-' ? strchr(a, '=') : NULL;
    size_t len = eq ? (size_t)(eq - a) : strlen(a);
    f = find_flag(flags, n, a, len);
    if (!f) {
      unknown_option(prog, flags, n, a, len);
      return CLI_ERROR;
    }
    if (eq) {
      if (!f->arg) {
        cli_error(prog, "option '%s' takes no value", f->name);
        return CLI_ERROR;
      }
      *value = eq + 1;
    }
  }
  if (!f) {
    unknown_option(prog, flags, n, a, strlen(a));
    return CLI_ERROR;
  }
  if (f->arg && !*value && !f->optional) {
    if (*i + 1 >= argc) {
      cli_error(prog, "option '%s' needs a value (%s)", f->name, f->arg);
      return CLI_ERROR;
    }
    *value = argv[++*i];
  }
  *flag = f;
  return CLI_FLAG;
}

void cli_usage(FILE *out, const cli_flag *flags, int n, int width) {
  for (int i = 0; i < n; i++) {
    char left[64];
    const cli_flag *f = &flags[i];
    if (f->arg && f->optional)
      snprintf(left, sizeof left, "%s[=%s]", f->name, f->arg);
    else if (f->arg)
      snprintf(left, sizeof left, "%s%s%s", f->name, f->name[1] == '-' ? "=" : " ", f->arg);
    else
      snprintf(left, sizeof left, "%s", f->name);
    const char *h = f->help;
    size_t len = strcspn(h, "\n");
    if (len)
      fprintf(out, "  %-*s %.*s\n", width, left, (int)len, h);
    else /* the help starts on the next line */
      fprintf(out, "  %s\n", left);
    for (h += len; *h; h += len) {
      h++; /* the '\n' */
      len = strcspn(h, "\n");
      fprintf(out, "  %-*s %.*s\n", width, "", (int)len, h);
    }
  }
}

bool cli_starts(const char *arg, const char *prefix, const char **value) {
  size_t n = strlen(prefix);
  if (strncmp(arg, prefix, n) != 0) return false;
  *value = arg + n;
  return true;
}

int cli_write_output(const char *prog, const char *path, const strbuf *text) {
  strbuf why = {0};
  bool ok = support_write_output(path, strbuf_cstr(text), text->len, &why);
  if (!ok)
    cli_error(prog, "cannot write '%s': %s", path && strcmp(path, "-") != 0 ? path : "<stdout>",
              strbuf_cstr(&why));
  strbuf_free(&why);
  return ok ? 0 : 1;
}
