/* place.c -- the place pass: put every stage on a device.
 *   sequential   stage i on device i (one stage per device);
 *   interleaved  Megatron's loop placement of v virtual stages per device: stage s on device
 *                s mod p (so device i holds stages i, i + p, i + 2p, ...);
 *   vshape       two stages per device in a V (ZB-V, DualPipeV): stage s on device s for the
 *                first half, mirrored back (device 2p - 1 - s) for the second;
 *   explicit     the device of each stage given as devices="0,1,1,0", or the placement the module
 *                already has.
 * Shapes a method does not support are errors that say what would fit. The pass drops schedules
 * and predictions (they belong to the old placement). */
#include <stdlib.h>

#include "passes.h"

/* The methods, in the order of the 'method' option's words (options.def). */
enum { PLACE_SEQUENTIAL, PLACE_INTERLEAVED, PLACE_VSHAPE, PLACE_EXPLICIT, PLACE_NMETHODS };

/* explicit: devices="a,b,...", one device index per stage (a '$d' prefix is allowed). */
static int place_list(ir_module *m, const pass_option *o, diag_engine *d) {
  int *dev = xmalloc((size_t)m->nstages * sizeof *dev);
  int n = 0;
  const char *p = o->value;
  while (*p) {
    while (*p == ' ') p++;
    if (p[0] == '$' && p[1] == 'd') p += 2;
    char *e;
    long v = strtol(p, &e, 10);
    if (e == p) {
      diag_error(d, o->value_loc, "devices: expected device numbers separated by commas, got "
                 "'%s'", o->value);
      free(dev);
      return 1;
    }
    if (v < 0 || v >= m->ndevices) {
      diag_error(d, o->value_loc, "devices: $d%ld does not exist (the module has %d device%s)", v,
                 m->ndevices, m->ndevices == 1 ? "" : "s");
      free(dev);
      return 1;
    }
    if (n < m->nstages) dev[n] = (int)v;
    n++;
    p = e;
    while (*p == ' ') p++;
    if (*p == ',') p++;
  }
  if (n != m->nstages) {
    diag_error(d, o->value_loc, "devices lists %d device%s but the module has %d stage%s", n,
               n == 1 ? "" : "s", m->nstages, m->nstages == 1 ? "" : "s");
    free(dev);
    return 1;
  }
  for (int s = 0; s < m->nstages; s++) m->stages[s].device = dev[s];
  free(dev);
  return 0;
}

int pass_run_place(ir_module *m, const pass_options *opts, diag_engine *d) {
  int method;
  int64_t v;
  if (pass_opt_choice(opts, "method", &method, d) || pass_opt_int(opts, "v", &v, d))
    return 1;
  const pass_option *list = pass_opt_find(opts, "devices");
  const pass_option *vopt = pass_opt_find(opts, "v");
  if (list && method != PLACE_EXPLICIT) {
    diag_error(d, list->key_loc, "'devices' is for method=explicit");
    return 1;
  }
  if (vopt && method != PLACE_INTERLEAVED) {
    diag_error(d, vopt->key_loc, "'v' is for method=interleaved");
    return 1;
  }
  int p = m->ndevices, n = m->nstages;
  if (n == 0) {
    diag_error(d, opts->loc, "the module has no stages: run a partition pass before 'place'");
    return 1;
  }
  if (p == 0) {
    diag_error(d, opts->loc, "the module has no devices to place stages on");
    return 1;
  }
  switch (method) {
  case PLACE_SEQUENTIAL:
    if (n != p) {
      diag_error(d, opts->loc, "place{method=sequential} puts stage i on device i: %d stage%s on "
                 "%d device%s %s", n, n == 1 ? "" : "s", p, p == 1 ? "" : "s",
                 n > p && n % p == 0
                     ? "need interleaved or vshape placement (several stages per device)"
                     : "would leave devices without a stage or stages without a device");
      return 1;
    }
    for (int s = 0; s < n; s++) m->stages[s].device = s;
    break;
  case PLACE_INTERLEAVED: {
    int vv = vopt ? (int)v : n / p;
    if ((int64_t)vv * p != n || vv < 1) {
      if (vopt)
        diag_error(d, vopt->value_loc, "place{method=interleaved, v=%d} needs v x devices = %lld "
                   "stages; the module has %d (partition with chunks=%d)", vv,
                   (long long)vv * p, n, vv);
      else
        diag_error(d, opts->loc, "place{method=interleaved} needs a multiple of the %d devices as "
                   "stages; the module has %d (partition with chunks=v)", p, n);
      return 1;
    }
    for (int s = 0; s < n; s++) m->stages[s].device = s % p;
    break;
  }
  case PLACE_VSHAPE:
    if (n != 2 * p) {
      diag_error(d, opts->loc, "place{method=vshape} needs two stages per device (%d stages for "
                 "%d devices); the module has %d (partition with chunks=2)", 2 * p, p, n);
      return 1;
    }
    for (int s = 0; s < n; s++) m->stages[s].device = s < p ? s : 2 * p - 1 - s;
    break;
  default: /* PLACE_EXPLICIT */
    if (list) {
      if (place_list(m, list, d)) return 1;
    } else {
      for (int s = 0; s < n; s++)
        if (m->stages[s].device < 0) {
          diag_error(d, opts->loc, "place{method=explicit} needs devices=\"...\" or a module whose "
                     "stages are all placed (@s%d is not)", s);
          return 1;
        }
    }
    break;
  }
  ir_module_clear_schedules(m); /* they belong to the old placement */
  return 0;
}
