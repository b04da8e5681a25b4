/* check.c -- deadlock checker (stub until written). */
#include "backend.h"
int be_check(const be_stream *s, strbuf *err) { (void)s; (void)err; return 0; }
