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

#include "stream.h"
#include "cli.h"
#include "support.h"

#define PROG "octo-dis"

enum { EXIT_OK = 0, EXIT_USER = 1 };

/* Command-line flags. */
typedef enum flag_id { F_OUTPUT, F_ISA, F_HELP, F_VERSION } flag_id;

static const cli_flag flags[] = {
    {F_OUTPUT, "-o", "OUT", "write the output to OUT instead of stdout", false},
    {F_ISA, "--isa", NULL, "print the instruction-set reference (docs/isa.md's tables) instead", false},
    {F_HELP, "--help", NULL, "print this help and exit", false},
    {F_VERSION, "--version", NULL, "print the version and exit", false},
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
    const cli_flag *f = &flags[i];
    strbuf left = {0};
    strbuf_printf(&left, "%s%s%s", f->name, f->arg ? " " : "", f->arg ? f->arg : "");
    fprintf(out, "  %-14s %s\n", strbuf_cstr(&left), f->help);
    strbuf_free(&left);
  }
  fprintf(out, "\nexit status: 0 success, 1 bad input or command line, or an output that cannot\n"
               "be written (2 is never used: see docs/architecture.md).\n");
}

/* Report a command-line or input error. */
#define cl_error(...) cli_error(PROG, __VA_ARGS__)

/* Parse argv into cl. Returns false after reporting the first error. */
static bool parse_args(int argc, char **argv, cmdline *cl) {
  for (int i = 1; i < argc; i++) {
    const cli_flag *f;
    const char *value;
    cli_item it = cli_next(PROG, flags, NFLAGS, argc, argv, &i, &f, &value);
    if (it == CLI_ERROR) return false;
    if (it == CLI_INPUT) {
      if (cl->input) {
        cl_error("more than one input file ('%s' and '%s')", cl->input, value);
        return false;
      }
      cl->input = value;
      continue;
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

int main(int argc, char **argv) {
  cli_init();
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
  int code = cli_write_output(PROG, cl.output, &out) ? EXIT_USER : EXIT_OK;
  strbuf_free(&out);
  return code;
}
