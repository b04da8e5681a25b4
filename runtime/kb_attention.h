/* kb_attention.h -- the element-wise bodies of the attention kernel (k_attention.c), see kdev.h and bodies.def. */
#ifndef OCTO_RT_KB_ATTENTION_H
#define OCTO_RT_KB_ATTENTION_H

#include "kb_common.h"

#endif
