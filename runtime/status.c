/* status.c -- the exit statuses the tool gives the outcomes of a run (RT_STATUSES), which the
 * runtime uses only where it must end a process itself (rt_set_exit_codes in runtime.h). */
#include "runtime.h"

/* The exit status of each outcome where the runtime ends a process (rt_set_exit_codes): 0 for
 * success and 1 for the others until the tool sets its own. */
static int rt_exit_codes[RT_STATUS_COUNT] = {[RT_STATUS_BAD_INPUT] = 1, [RT_STATUS_RUN_FAILED] = 1,
                                             [RT_STATUS_CHECK_MISMATCH] = 1,
                                             [RT_STATUS_NONFINITE] = 1};

void rt_set_exit_codes(const int codes[RT_STATUS_COUNT]) {
  for (int i = 0; i < RT_STATUS_COUNT; i++) rt_exit_codes[i] = codes[i];
}

int rt_exit_code(rt_status st) {
  return st >= 0 && st < RT_STATUS_COUNT ? rt_exit_codes[st] : 1;
}
