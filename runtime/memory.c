/* memory.c -- the memory limit of a run: what the machine offers (MemAvailable, or a
 * --mem-limit), and the check, before anything of a tensor's size is allocated, that the ranks
 * running on this machine fit in it, with an error that names the largest rank and its need by
 * kind (rt_rank_memory, model.c) instead of an abort or the OOM killer. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime.h"

double rt_mem_available(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (f) {
    char line[256];
    unsigned long long kib;
    while (fgets(line, sizeof line, f))
      if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1) {
        fclose(f);
        return (double)kib * 1024;
      }
    fclose(f);
  }
#ifdef _SC_AVPHYS_PAGES
  long pages = sysconf(_SC_AVPHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  if (pages > 0 && size > 0) return (double)pages * (double)size;
#endif
  return 0;
}

int rt_parse_bytes(const char *text, double *bytes) {
  static const char units[] = "KMGT";
  char *end;
  double v = strtod(text, &end);
  if (end == text || !(v > 0) || !isfinite(v)) return -1;
  const char *u = *end ? strchr(units, *end) : NULL;
  if (u) {
    v *= pow(1024, (double)(u - units + 1));
    end++;
    if (strcmp(end, "iB") == 0 || strcmp(end, "B") == 0) end += strlen(end);
  } else if (strcmp(end, "B") == 0) {
    end++;
  }
  if (*end || !isfinite(v) || v < 1) return -1;
  *bytes = v;
  return 0;
}

/* Append bytes as "1.5 GiB" (B, KiB, MiB, GiB, TiB, PiB; larger stays in PiB) to out. */
static void put_bytes(strbuf *out, double bytes) {
  static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (u < 5 && bytes >= 1024) {
    bytes /= 1024;
    u++;
  }
  strbuf_printf(out, u ? "%.1f %s" : "%.0f %s", bytes, unit[u]);
}

int rt_mem_check(const be_stream *s, const rt_model *m, const rt_run_opts *o, const int *ranks,
                 int n, strbuf *err) {
  double limit = o->mem_limit > 0 ? o->mem_limit : rt_mem_available();
  if (!(limit > 0)) return 0; /* nothing known to compare with */
  double total = 0;
  int worst = -1;
  rt_mem_need worst_need = {0};
  for (int i = 0; i < n; i++) {
    int w = ranks ? ranks[i] : i;
    rt_mem_need need;
    rt_rank_memory(m, s, w % s->nranks, o->check, &need);
    total += need.total;
    if (worst < 0 || need.total > worst_need.total) {
      worst = w;
      worst_need = need;
    }
  }
  if (total <= limit) return 0;
  const struct {
    const char *what;
    double bytes;
  } parts[] = {{"parameters", worst_need.params},  {"gradients", worst_need.grads},
               {"optimizer state", worst_need.optim}, {"saved state", worst_need.state},
               {"buffers", worst_need.buffers},     {"workspace", worst_need.workspace},
               {"--check's reference", worst_need.reference}};
  strbuf who = {0}, need = {0}; /* "replica 1, rank 2", "3.0 GiB (parameters ...)" */
  if (s->replicas > 1) strbuf_printf(&who, "replica %d, ", worst / s->nranks);
  strbuf_printf(&who, "rank %d", worst % s->nranks);
  put_bytes(&need, worst_need.total);
  const char *sep = " (";
  for (size_t i = 0; i < sizeof parts / sizeof *parts; i++) {
    if (parts[i].bytes <= 0) continue;
    strbuf_printf(&need, "%s%s ", sep, parts[i].what);
    put_bytes(&need, parts[i].bytes);
    sep = ", ";
  }
  strbuf_puts(&need, ")");
  if (n == 1) {
    strbuf_printf(err, "%s needs %s", strbuf_cstr(&who), strbuf_cstr(&need));
  } else {
    strbuf_printf(err, "the %d ranks on this machine need ", n);
    put_bytes(err, total);
  }
  strbuf_printf(err, " at scale %d, more than ", rt_model_scale(m));
  if (o->mem_limit > 0) {
    strbuf_puts(err, "the --mem-limit of ");
    put_bytes(err, limit);
  } else {
    strbuf_puts(err, "the ");
    put_bytes(err, limit);
    strbuf_puts(err, " this machine has available");
  }
  if (n > 1)
    strbuf_printf(err, "; the largest, %s, needs %s", strbuf_cstr(&who), strbuf_cstr(&need));
  strbuf_puts(err, "; use a larger --scale");
  strbuf_free(&who);
  strbuf_free(&need);
  return -1;
}
