/* octo-import.c -- writes the .octo spec of a Hugging Face config.json (import/import.h): the
 * model, its source and every field read or ignored as comments, and with --with an import of
 * the spec that holds the devices, clusters and train block. The spec is compiled before it is
 * written, so what is written compiles. Exit codes (docs/architecture.md): 0 success, 1 a
 * refused or bad config, a bad command line or an output that cannot be written. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "import.h"
#include "support.h"

#define PROG "octo-import"

enum { EXIT_OK = 0, EXIT_USER = 1 };

/* Command-line flags. */
typedef enum flag_id { F_OUTPUT, F_SEQ, F_NAME, F_WITH, F_HELP, F_VERSION } flag_id;

static const cli_flag flags[] = {
    {F_OUTPUT, "-o", "FILE", "write the spec to FILE (atomically) instead of stdout", false},
    {F_SEQ, "--seq", "N", "sequence length (default: the config's max_position_embeddings)", false},
    {F_NAME, "--name", "NAME", "model name (default: from the config's folder or file name)", false},
    {F_WITH, "--with", "SPEC.octo", "import SPEC's devices, clusters and train block", false},
    {F_HELP, "--help", NULL, "print this help and exit", false},
    {F_VERSION, "--version", NULL, "print the version and exit", false},
};
#define NFLAGS (int)(sizeof flags / sizeof flags[0])

/* Everything the command line asked for. */
typedef struct cmdline {
  const char *input;  /* config.json or a folder holding one; NULL when not given */
  const char *output; /* -o FILE, NULL for stdout */
  const char *seq;    /* --seq, NULL when not given */
  const char *name;   /* --name, NULL when not given */
  const char *with;   /* --with, NULL when not given */
  bool help, version; /* --help, --version */
} cmdline;

/* Print the help text to out. */
static void usage(FILE *out) {
  fprintf(out, "usage: " PROG " PATH [-o FILE] [--seq=N] [--name=NAME] [--with=SPEC.octo]\n\n"
               "Reads a Hugging Face config.json (PATH, or PATH/config.json when PATH is a\n"
               "folder) and writes the model as an OctoPipe spec (docs/import.md). A field that\n"
               "changes the model in a way OctoPipe does not compute is an error naming it.\n"
               "\noptions:\n");
  for (int i = 0; i < NFLAGS; i++) {
    const cli_flag *f = &flags[i];
    strbuf left = {0};
    strbuf_printf(&left, "%s%s%s", f->name, f->arg ? (f->name[1] == '-' ? "=" : " ") : "",
                  f->arg ? f->arg : "");
    fprintf(out, "  %-18s %s\n", strbuf_cstr(&left), f->help);
    strbuf_free(&left);
  }
  fprintf(out, "\nexit status: 0 success, 1 a refused or bad config, a bad command line, or an\n"
               "output that cannot be written.\n");
}

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
        cl_error("more than one input ('%s' and '%s')", cl->input, value);
        return false;
      }
      cl->input = value;
      continue;
    }
    switch (f->id) {
    case F_OUTPUT: cl->output = value; break;
    case F_SEQ: cl->seq = value; break;
    case F_NAME: cl->name = value; break;
    case F_WITH: cl->with = value; break;
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
  if (!cl.input) {
    cl_error("no input (a config.json, or a folder holding one)");
    fprintf(stderr, PROG ": note: run '" PROG " --help' for the usage\n");
    return EXIT_USER;
  }
  hf_options o = {cl.name, 0, NULL, cl.with};
  if (cl.seq) {
    char *end;
    errno = 0;
    double s = strtod(cl.seq, &end);
    if (end == cl.seq || *end || errno || !(s >= 1 && s <= 9007199254740992.0) || s != (double)(long long)s) {
      cl_error("--seq expects a whole number of at least 1, got '%s'", cl.seq);
      return EXIT_USER;
    }
    o.seq = s;
  }
  diag_engine *d = diag_new(stderr);
  /* the spec is compiled as if it were already the output file, so its import resolves */
  uint32_t src = hf_load(d, cl.input, &o, cl.output && strcmp(cl.output, "-") ? cl.output : "stdout.octo");
  int code = EXIT_USER;
  if (!src) {
    cl_error("'%s' is not imported (%d error%s): nothing was written", cl.input,
             diag_error_count(d), diag_error_count(d) == 1 ? "" : "s");
  } else {
    const diag_source *s = diag_get_source(d, src);
    strbuf out = {0};
    strbuf_append(&out, s->text, s->len);
    code = cli_write_output(PROG, cl.output, &out) ? EXIT_USER : EXIT_OK;
    strbuf_free(&out);
  }
  diag_free(d);
  return code;
}
