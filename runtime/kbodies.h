/* kbodies.h -- every element-wise body of the layer kernels (bodies.def), for the kernels (C),
 * the CPU loops (kcommon.c) and the GPU launches (kernels_gpu.cu). */
#ifndef OCTO_RT_KBODIES_H
#define OCTO_RT_KBODIES_H

#include "kb_common.h"
#include "kb_attention.h"
#include "kb_moe.h"
#include "kb_mamba2.h"
#include "kb_mla.h"
#include "kb_vision.h"
#include "kb_model.h"

#endif
