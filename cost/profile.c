/* profile.c -- profile files (stub until written). */
#include "cost.h"
