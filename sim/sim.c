/* sim.c -- the simulator (stub until written). */
#include "sim.h"
