/* test_sim.c -- unit tests of the sim library. */
#include "unit.h"
#include "sim.h"

void test_sim_placeholder(void) { UNIT_CHECK(1); }
