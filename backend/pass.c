/* pass.c -- backend passes (stub until written). */
#include "backend.h"
