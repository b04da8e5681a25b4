/* gpu_model.cu -- the stand-in model on a GPU (being written). */
#include "gpu.h"
