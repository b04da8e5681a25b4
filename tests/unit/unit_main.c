/* unit_main.c -- runner of the C unit tests: runs every test of tests.def (or those whose name
 * contains the first argument), prints "PASS name" or one "FAIL name: file:line: check" line per
 * failed check, and exits 1 when any test failed. */
#include <stdio.h>
#include <string.h>

#include "unit.h"

/* One registered test. */
typedef struct unit_entry {
  const char *name; /* function name */
  void (*run)(void); /* the test */
} unit_entry;

static const unit_entry unit_tests[] = {
#define UNIT_TEST(n) {#n, n},
#include "tests.def"
#undef UNIT_TEST
};

static const char *unit_current; /* name of the running test */
static int unit_failures;        /* failed checks of the running test */

void unit_fail(const char *file, int line, const char *what) {
  printf("FAIL %s: %s:%d: %s\n", unit_current, file, line, what);
  unit_failures++;
}

void unit_fail_str(const char *file, int line, const char *what, const char *a, const char *b) {
  printf("FAIL %s: %s:%d: %s\n  left:  %s\n  right: %s\n", unit_current, file, line, what,
         a ? a : "(null)", b ? b : "(null)");
  unit_failures++;
}

void unit_fail_dbl(const char *file, int line, const char *what, double a, double b) {
  printf("FAIL %s: %s:%d: %s (%.17g vs %.17g)\n", unit_current, file, line, what, a, b);
  unit_failures++;
}

int main(int argc, char **argv) {
  const char *filter = argc > 1 ? argv[1] : NULL;
  int failed = 0, run = 0;
  for (size_t i = 0; i < sizeof unit_tests / sizeof unit_tests[0]; i++) {
    if (filter && !strstr(unit_tests[i].name, filter)) continue;
    unit_current = unit_tests[i].name;
    unit_failures = 0;
    unit_tests[i].run();
    fflush(stdout);
    run++;
    if (unit_failures) failed++;
    else printf("PASS %s\n", unit_current);
  }
  printf("%d test%s, %d failed\n", run, run == 1 ? "" : "s", failed);
  return failed ? 1 : 0;
}
