/* test_backend_format.c -- unit tests of the stream format and validator (placeholder). */
#include "backend.h"
#include "unit.h"
