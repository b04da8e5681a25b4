/* kb_moe.h -- the element-wise bodies of the moe kernel (k_moe.c), see kdev.h and bodies.def. */
#ifndef OCTO_RT_KB_MOE_H
#define OCTO_RT_KB_MOE_H

#include "kb_common.h"

#endif
