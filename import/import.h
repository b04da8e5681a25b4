/* import.h -- Hugging Face model import: reads a transformers config.json and writes the model
 * as .octo spec text, field by field what the OctoPipe runtime computes today; a field that
 * changes the math in a way OctoPipe does not compute is an error naming it (docs/import.md). */
#ifndef OCTO_IMPORT_H
#define OCTO_IMPORT_H

#include <stdbool.h>
#include <stdint.h>

#include "support.h"

/* Options of one import. */
typedef struct hf_options {
  const char *name;       /* model name of the spec; NULL: derived from the path */
  double seq;             /* sequence length; 0: the config's max_position_embeddings */
  const char *with_import; /* NULL, or the path written in an 'import "..."' line at the top of
                              the spec (the file with the cluster and train blocks) */
  const char *with;        /* for hf_load: NULL, or that file as the user named it (relative to
                              the working directory); hf_load writes its import (with_import
                              is then ignored) */
} hf_options;

/* The config file of 'path': path itself, or path/config.json when path is a directory.
 * Returns a malloc'ed string (caller frees). */
char *hf_config_path(const char *path);

/* Import the config in source 'src' of d (its name is the config's path, shown in the spec's
 * header). Pre: the source holds the file's bytes. Post: returns 0 with the spec text appended
 * to *spec, or 1 after reporting every error found (JSON syntax at file:line:col, each refused
 * or unknown field at its key) through d; *spec is then unchanged. */
int hf_import_source(diag_engine *d, uint32_t src, const hf_options *o, strbuf *spec);

/* Read the config of 'path' (hf_config_path) into d and import it. Returns as
 * hf_import_source; a file that cannot be read is an error too. */
int hf_import(diag_engine *d, const char *path, const hf_options *o, strbuf *spec);

/* Import 'path' and add the spec text to d as a source named 'spec_name' (NULL: after the
 * config, "PATH.octo"; the import of o->with is written relative to the name's directory),
 * then compile it once to check that it compiles and that the model it trains is the imported
 * one (a --with spec that defines a model of its own would otherwise be compiled instead).
 * Returns the source id, or 0 after reporting the errors through d. */
uint32_t hf_load(diag_engine *d, const char *path, const hf_options *o, const char *spec_name);

/* The text to write in 'import "..."' for the spec 'with' (as given on the command line, relative
 * to the working directory) in a spec that will be written to 'out' (NULL or "-": standard
 * output, read from the working directory): 'with' relative to out's directory when both
 * exist, else an absolute path. Returns a malloc'ed string, or NULL after appending the reason
 * ('with' does not exist) to *why. */
char *hf_with_path(const char *with, const char *out, strbuf *why);

#endif
