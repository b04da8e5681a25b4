/* cost.c -- the analytic cost model (stub until written). */
#include "cost.h"
