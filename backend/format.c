/* format.c -- binary stream format (stub until written). */
#include "backend.h"
void be_write(const be_stream *s, strbuf *out) { (void)s; (void)out; }
be_stream *be_read(const uint8_t *data, size_t len, strbuf *err) {
  (void)data; (void)len; strbuf_puts(err, "not implemented"); return NULL; }
be_stream *be_read_file(const char *path, strbuf *err) {
  (void)path; strbuf_puts(err, "not implemented"); return NULL; }
