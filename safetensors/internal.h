/* internal.h -- what the files of the safetensors library share and do not export. */
#ifndef OCTO_ST_INTERNAL_H
#define OCTO_ST_INTERNAL_H

#include "safetensors.h"

/* Append s to *sb for an error message: in single quotes, control characters as \xNN, cut to
 * DIAG_MAX_QUOTED bytes and "..." when longer. */
void st_quote(strbuf *sb, const char *s);

/* Start an error about file 'path': "PATH: " and, when 'tensor' is not NULL, "tensor 'T': ". */
void st_err_at(strbuf *err, const char *path, const char *tensor);

/* Append s as a JSON string literal exactly as serde_json (the reference writer) does: '"' and
 * '\\' escaped, \b \f \n \r \t, other control characters as \u00xx, everything else (UTF-8
 * included) as is. */
void st_json_str(strbuf *sb, const char *s);

#endif
