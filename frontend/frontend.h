/* frontend.h -- the .octo language front end: parse a spec (following its imports), check its
 * meaning, and build the IR module of its model, cluster and training set-up. */
#ifndef OCTO_FRONTEND_H
#define OCTO_FRONTEND_H

#include "ir.h"
#include "support.h"

/* Options of one compilation. */
typedef struct fe_options {
  bool explain; /* report every default the compiler assumed as a remark */
  bool free_config; /* octoc --search=config: the train fields of IR_TRAIN_FREE_FIELDS that the
                       spec omits stay unset (free, for the config pass), and the devices are
                       the pipeline of every GPU the fixed degrees leave (docs/language.md) */
} fe_options;

/* Compile source 'file' (already added to d, e.g. with diag_load_file or a split chunk).
 * Imports are read relative to the directory of the importing file. Returns the module, or
 * NULL after reporting every error found (file:line:col with caret lines). */
ir_module *fe_compile(diag_engine *d, uint32_t file, const fe_options *o);

#endif
