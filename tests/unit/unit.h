/* unit.h -- a tiny unit-test harness for the C unit tests of the libraries: check macros that
 * record failures without stopping the test, and the declarations of every test listed in
 * tests.def (run by unit_main.c). */
#ifndef OCTO_UNIT_H
#define OCTO_UNIT_H

#include <stdint.h>
#include <string.h>

/* Record a failed check of the running test (prints "FAIL test: file:line: what"). */
void unit_fail(const char *file, int line, const char *what);
/* Record a failed string comparison, showing both strings. */
void unit_fail_str(const char *file, int line, const char *what, const char *a, const char *b);
/* Record a failed number comparison, showing both numbers exactly. */
void unit_fail_dbl(const char *file, int line, const char *what, double a, double b);

/* Check that cond holds. */
#define UNIT_CHECK(cond)                                                                         \
  do {                                                                                           \
    if (!(cond)) unit_fail(__FILE__, __LINE__, #cond);                                           \
  } while (0)

/* Check that two C strings are equal (NULL equals only NULL). */
#define UNIT_CHECK_STREQ(a, b)                                                                   \
  do {                                                                                           \
    const char *unit_a_ = (a), *unit_b_ = (b);                                                   \
    if (unit_a_ != unit_b_ && (!unit_a_ || !unit_b_ || strcmp(unit_a_, unit_b_) != 0))           \
      unit_fail_str(__FILE__, __LINE__, #a " == " #b, unit_a_, unit_b_);                         \
  } while (0)

/* Check that two doubles are exactly equal (round trips must be exact). */
#define UNIT_CHECK_EQ_DBL(a, b)                                                                  \
  do {                                                                                           \
    double unit_a_ = (a), unit_b_ = (b);                                                         \
    if (!(unit_a_ == unit_b_)) unit_fail_dbl(__FILE__, __LINE__, #a " == " #b, unit_a_, unit_b_); \
  } while (0)

/* Deterministic pseudo-random numbers for the tests (xorshift64*): the next number of state *s. */
static inline uint64_t unit_rng(uint64_t *s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 2685821657736338717ull;
}

/* Every test: void name(void), listed once in tests.def. */
#define UNIT_TEST(name) void name(void);
#include "tests.def"
#undef UNIT_TEST

#endif
