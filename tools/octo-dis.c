/* octo-dis.c -- the disassembler tool: reads a binary instruction stream (.ois) with be_read_file,
 * which validates and deadlock-checks it, and prints its listing (be_disasm), or with --isa the
 * instruction-set reference tables of docs/isa.md (be_isa_doc). Exit codes (the table of
 * docs/architecture.md): 0 success, 1 bad input, command line or an output that cannot be
 * written. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "support.h"

#define PROG "octo-dis"

enum { EXIT_OK = 0, EXIT_USER = 1 };

/* Command-line flags. */
typedef enum flag_id { F_OUTPUT, F_ISA, F_HELP, F_VERSION } flag_id;

/* One flag: its spelling, whether it takes a value, and its line of --help. */
typedef struct flag_info {
  flag_id id;       /* what it sets */
  const char *name; /* spelling with dashes */
  const char *arg;  /* name of its value in --help, NULL when it takes none */
  const char *help; /* meaning */
} flag_info;

static const flag_info flags[] = {
    {F_OUTPUT, "-o", "OUT", "write the output to OUT instead of stdout"},
    {F_ISA, "--isa", NULL, "print the instruction-set reference (docs/isa.md's tables) instead"},
    {F_HELP, "--help", NULL, "print this help and exit"},
    {F_VERSION, "--version", NULL, "print the version and exit"},
};
#define NFLAGS (int)(sizeof flags / sizeof flags[0])

/* Everything the command line asked for. */
typedef struct cmdline {
  const char *input;  /* FILE.ois, NULL when not given */
  const char *output; /* -o FILE, NULL for stdout */
  bool isa;           /* --isa */
  bool help, version; /* --help, --version */
} cmdline;

/* Print the help text to out. */
static void usage(FILE *out) {
  fprintf(out, "usage: " PROG " FILE.ois [-o OUT]\n"
               "       " PROG " --isa [-o OUT]\n\n"
               "Reads an OctoPipe instruction stream (the binary .ois file that octoc\n"
               "--emit=stream writes), validates and deadlock-checks it, and prints its listing:\n"
               "the model and stages, then per rank its device, buffer slots and instructions\n"
               "(docs/isa.md).\n"
               "\noptions:\n");
  for (int i = 0; i < NFLAGS; i++) {
    const flag_info *f = &flags[i];
    strbuf left = {0};
    strbuf_printf(&left, "%s%s%s", f->name, f->arg ? " " : "", f->arg ? f->arg : "");
    fprintf(out, "  %-14s %s\n", strbuf_cstr(&left), f->help);
    strbuf_free(&left);
  }
  fprintf(out, "\nexit status: 0 success, 1 bad input or command line, or an output that cannot\n"
               "be written (2 is never used: see docs/architecture.md).\n");
}

/* Report a command-line or input error. */
static void cl_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void cl_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, PROG ": error: ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

/* The flag spelled name[0..len), or NULL. */
static const flag_info *find_flag(const char *name, size_t len) {
  for (int i = 0; i < NFLAGS; i++)
    if (strlen(flags[i].name) == len && memcmp(flags[i].name, name, len) == 0) return &flags[i];
  return NULL;
}

/* Report unknown option name[0..len) with the closest known spelling. */
static void unknown_option(const char *name, size_t len) {
  char *n = xstrndup(name, len);
  cl_error("unknown option '%s'", n);
  suggest s;
  suggest_init(&s, n);
  for (int k = 0; k < NFLAGS; k++) suggest_add(&s, flags[k].name);
  if (suggest_result(&s)) fprintf(stderr, PROG ": note: did you mean '%s'?\n", suggest_result(&s));
  fprintf(stderr, PROG ": note: run '" PROG " --help' for the list of options\n");
  free(n);
}

/* Parse argv into cl. Returns false after reporting the first error. */
static bool parse_args(int argc, char **argv, cmdline *cl) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (a[0] != '-' || a[1] == '\0') {
      if (cl->input) {
        cl_error("more than one input file ('%s' and '%s')", cl->input, a);
        return false;
      }
      cl->input = a;
      continue;
    }
    if (strcmp(a, "-h") == 0) a = "--help";
    const flag_info *f;
    const char *value = NULL;
    if (a[1] == 'o') { /* -o FILE, -oFILE, -o=FILE */
      f = find_flag("-o", 2);
      if (a[2]) value = a[2] == '=' ? a + 3 : a + 2;
    } else {
      const char *eq = a[1] == '-' ? strchr(a, '=') : NULL;
      size_t len = eq ? (size_t)(eq - a) : strlen(a);
      f = find_flag(a, len);
      if (!f) {
        unknown_option(a, len);
        return false;
      }
      if (eq) {
        if (!f->arg) {
          cl_error("option '%s' takes no value", f->name);
          return false;
        }
        value = eq + 1;
      }
    }
    if (f->arg && !value) {
      if (i + 1 >= argc) {
        cl_error("option '%s' needs a value (%s)", f->name, f->arg);
        return false;
      }
      value = argv[++i];
    }
    switch (f->id) {
    case F_OUTPUT: cl->output = value; break;
    case F_ISA: cl->isa = true; break;
    case F_HELP: cl->help = true; break;
    case F_VERSION: cl->version = true; break;
    }
  }
  return true;
}

/* Write out to cl->output (replaced atomically, support_write_file; "-" or NULL: stdout).
 * Returns the exit code: EXIT_USER when it cannot be written. */
static int write_output(const cmdline *cl, const strbuf *out) {
  strbuf why = {0};
  bool ok = support_write_output(cl->output, strbuf_cstr(out), out->len, &why);
  if (!ok)
    cl_error("cannot write '%s': %s",
             cl->output && strcmp(cl->output, "-") != 0 ? cl->output : "<stdout>",
             strbuf_cstr(&why));
  strbuf_free(&why);
  return ok ? EXIT_OK : EXIT_USER;
}

int main(int argc, char **argv) {
  cmdline cl;
  memset(&cl, 0, sizeof cl);
  if (!parse_args(argc, argv, &cl)) return EXIT_USER;
  if (cl.help) {
    usage(stdout);
    return fflush(stdout) == 0 ? EXIT_OK : EXIT_USER;
  }
  if (cl.version) {
    printf(PROG " (OctoPipe) " OCTO_VERSION "\n");
    return fflush(stdout) == 0 ? EXIT_OK : EXIT_USER;
  }
  if (cl.isa && cl.input) {
    cl_error("--isa takes no input file (got '%s')", cl.input);
    return EXIT_USER;
  }
  if (!cl.isa && !cl.input) {
    cl_error("no input file");
    fprintf(stderr, PROG ": note: run '" PROG " --help' for the usage\n");
    return EXIT_USER;
  }

  strbuf out = {0};
  if (cl.isa) {
    be_isa_doc(&out);
  } else {
    strbuf err = {0};
    be_stream *s = be_read_file(cl.input, &err);
    if (!s) {
      cl_error("%s", err.len ? strbuf_cstr(&err) : "cannot read the stream");
      strbuf_free(&err);
      strbuf_free(&out);
      return EXIT_USER;
    }
    strbuf_free(&err);
    be_disasm(s, &out);
    be_stream_free(s);
  }
  int code = write_output(&cl, &out);
  strbuf_free(&out);
  return code;
}
