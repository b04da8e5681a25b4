/* test_backend.c -- unit tests of lowering and the deadlock checker (placeholder). */
#include "backend.h"
#include "unit.h"
