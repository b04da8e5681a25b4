/* report.c -- reports (stub until written). */
#include "report.h"
