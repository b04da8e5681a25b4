/* cli.h -- what the command-line tools share: the process set-up (signals), error lines that
 * name the tool, a table of flags parsed with its misspellings answered ("did you mean"),
 * "--name=value" prefixes, and writing an output to a file (atomically) or to stdout. Only the tools' mains use it; nothing here
 * decides an exit code. */
#ifndef OCTO_TOOLS_CLI_H
#define OCTO_TOOLS_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "support.h"

/* One flag of a tool: its spelling, whether it takes a value, and its line of --help. */
typedef struct cli_flag {
  int id;           /* the tool's own code for it */
  const char *name; /* spelling with dashes ("-o", "--emit") */
  const char *arg;  /* name of its value in --help, NULL when it takes none */
  const char *help; /* meaning */
  bool optional;    /* the value may be left out (only as "--name=VALUE" then) */
} cli_flag;

/* The set-up every tool's main does first: SIGXFSZ is ignored, so that a write past the
 * file-size limit (ulimit -f) fails with EFBIG, which the tool reports ("File too large") and
 * after which the atomic writer removes its temporary, instead of the signal killing the process
 * silently with the temporary left behind. */
void cli_init(void);

/* Print "PROG: error: " and the formatted message as one line on stderr. */
void cli_error(const char *prog, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* What cli_next found at argv[*i]. */
typedef enum cli_item {
  CLI_ERROR = -1, /* a bad option, already reported (with a suggestion when one is close) */
  CLI_INPUT = 0,  /* a file name (or "-"): *value */
  CLI_FLAG = 1,   /* flag *flag with *value (NULL when it has none) */
} cli_item;

/* Read the command-line item at argv[*i] against the n flags of 'flags' ("-h" is "--help"; "-o"
 * takes "-o FILE", "-oFILE" and "-o=FILE"; a long flag "--name=VALUE" or "--name VALUE").
 * Pre: 1 <= *i < argc. Post: *i is the last argv index used (a value in the next argument moves
 * it on); errors are reported as cli_error(prog, ...) with notes. */
cli_item cli_next(const char *prog, const cli_flag *flags, int n, int argc, char **argv, int *i,
                  const cli_flag **flag, const char **value);

/* Print the n flags' lines of --help to out: "  NAME=ARG" (or "NAME[=ARG]", "-o ARG") padded
 * to 'width', then the help; a help's further lines ('\n' in it) under its first. */
void cli_usage(FILE *out, const cli_flag *flags, int n, int width);

/* Whether arg starts with prefix; *value then points just after it. */
bool cli_starts(const char *arg, const char *prefix, const char **value);

/* Write text to path (replaced atomically, support_write_file), or to stdout when path is NULL
 * or "-". Returns 0, or 1 after reporting why with cli_error. */
int cli_write_output(const char *prog, const char *path, const strbuf *text);

#endif
