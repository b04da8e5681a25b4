/* dis.c -- disassembler (stub until written). */
#include "backend.h"
void be_disasm(const be_stream *s, strbuf *out) { (void)s; (void)out; }
void be_isa_doc(strbuf *out) { (void)out; }
