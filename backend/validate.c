/* validate.c -- be_validate (stub until written). */
#include "backend.h"
int be_validate(const be_stream *s, strbuf *err) { (void)s; (void)err; return 0; }
