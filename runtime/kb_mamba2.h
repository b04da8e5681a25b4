/* kb_mamba2.h -- the element-wise bodies of the mamba2 kernel (k_mamba2.c), see kdev.h and bodies.def. */
#ifndef OCTO_RT_KB_MAMBA2_H
#define OCTO_RT_KB_MAMBA2_H

#include "kb_common.h"

#endif
