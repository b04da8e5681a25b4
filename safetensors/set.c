/* set.c -- sharded safetensors checkpoints read as one set: an index file's "weight_map"
 * (tensor name -> shard file beside it), every shard opened and validated, and the map checked
 * against the shards' contents both ways; or a single file as a set of one. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "internal.h"

/* One tensor of the set and the shard that holds it. */
typedef struct st_entry {
  const st_tensor *t; /* the tensor */
  const st_file *f;   /* its shard */
} st_entry;

/* An open set. */
struct st_set {
  st_file **files;   /* the shards, by file name */
  size_t nfiles;     /* their number */
  st_entry *all;     /* every tensor in set order */
  size_t n;          /* their number */
  st_entry *by_name; /* the same, sorted by name */
};

/* One weight-map entry of an index. */
typedef struct st_mapped {
  const char *name;  /* tensor name */
  const char *shard; /* its file name */
} st_mapped;

static int st_cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int st_cmp_entry(const void *a, const void *b) {
  return strcmp(((const st_entry *)a)->t->name, ((const st_entry *)b)->t->name);
}

/* The mapped entry of 'name' among map[0 .. n) sorted by name, or NULL. */
static const st_mapped *st_map_find(const st_mapped *map, size_t n, const char *name) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(map[mid].name, name);
    if (c == 0) return &map[mid];
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return NULL;
}

/* Fill s's tensor tables from its open shards (file order within each). */
static void st_set_index(st_set *s) {
  for (size_t i = 0; i < s->nfiles; i++) s->n += st_count(s->files[i]);
  s->all = xmalloc((s->n ? s->n : 1) * sizeof *s->all);
  s->by_name = xmalloc((s->n ? s->n : 1) * sizeof *s->by_name);
  size_t k = 0;
  for (size_t i = 0; i < s->nfiles; i++)
    for (size_t j = 0; j < st_count(s->files[i]); j++)
      s->all[k++] = (st_entry){st_at(s->files[i], j), s->files[i]};
  memcpy(s->by_name, s->all, s->n * sizeof *s->all);
  qsort(s->by_name, s->n, sizeof *s->by_name, st_cmp_entry);
}

/* Open the shards named by index 'path' (whose JSON is 'text') into s, checking the weight map
 * against them. Returns false after appending the error. */
static bool st_set_load_index(st_set *s, const char *path, const char *text, size_t len,
                              strbuf *err) {
  cJSON *root = cJSON_ParseWithLength(text, len);
  st_mapped *map = NULL;
  const char **shards = NULL;
  size_t nmap = 0, nshards = 0;
  bool ok = false;
  const cJSON *wm = NULL, *meta = NULL;
  if (!cJSON_IsObject(root)) {
    st_err_at(err, path, NULL);
    strbuf_puts(err, "not a JSON object (a safetensors index has \"weight_map\")");
    goto out;
  }
  for (const cJSON *c = root->child; c; c = c->next) {
    if (strcmp(c->string, "weight_map") == 0 && !wm) {
      wm = c;
    } else if (strcmp(c->string, "metadata") == 0 && cJSON_IsObject(c) && !meta) {
      meta = c; /* "total_size" and the like: information only */
    } else {
      st_err_at(err, path, NULL);
      strbuf_puts(err, "unexpected key ");
      st_quote(err, c->string);
      strbuf_puts(err,
                  " (an index has \"weight_map\" and an optional \"metadata\" object, each once)");
      goto out;
    }
  }
  if (!cJSON_IsObject(wm)) {
    st_err_at(err, path, NULL);
    strbuf_puts(err, "no \"weight_map\" object (tensor name -> shard file name)");
    goto out;
  }
  size_t cap = (size_t)cJSON_GetArraySize(wm);
  map = xmalloc((cap ? cap : 1) * sizeof *map);
  shards = xmalloc((cap ? cap : 1) * sizeof *shards);
  for (const cJSON *c = wm->child; c; c = c->next) {
    const char *f = cJSON_IsString(c) ? c->valuestring : NULL;
    if (!f || !*f || strchr(f, '/') || strcmp(f, ".") == 0 || strcmp(f, "..") == 0) {
      st_err_at(err, path, c->string);
      strbuf_puts(err, "its shard is not a file name (a string without '/')");
      goto out;
    }
    map[nmap++] = (st_mapped){c->string, f};
    shards[nshards++] = f;
  }
  qsort(map, nmap, sizeof *map, st_cmp_str);
  for (size_t i = 1; i < nmap; i++)
    if (strcmp(map[i].name, map[i - 1].name) == 0) {
      st_err_at(err, path, map[i].name);
      strbuf_puts(err, "given twice in the weight map");
      goto out;
    }
  qsort(shards, nshards, sizeof *shards, st_cmp_str);
  size_t u = 0;
  for (size_t i = 0; i < nshards; i++)
    if (!u || strcmp(shards[i], shards[u - 1]) != 0) shards[u++] = shards[i];
  nshards = u;
  /* the shards, beside the index */
  const char *slash = strrchr(path, '/');
  size_t dirlen = slash ? (size_t)(slash - path + 1) : 0;
  s->files = xcalloc(nshards ? nshards : 1, sizeof *s->files);
  for (size_t i = 0; i < nshards; i++) {
    strbuf p = {0};
    strbuf_append(&p, path, dirlen);
    strbuf_puts(&p, shards[i]);
    s->files[i] = st_open(p.data, err);
    strbuf_free(&p);
    if (!s->files[i]) goto out;
    s->nfiles++;
  }
  /* every mapped tensor in its shard ... */
  for (size_t i = 0; i < nmap; i++) {
    const char **sh = bsearch(&map[i].shard, shards, nshards, sizeof *shards, st_cmp_str);
    const st_file *f = s->files[sh - shards];
    if (!st_find(f, map[i].name)) {
      st_err_at(err, path, map[i].name);
      strbuf_puts(err, "the weight map puts it in ");
      st_quote(err, map[i].shard);
      strbuf_puts(err, ", which does not hold it");
      goto out;
    }
  }
  /* ... and every shard's tensor in the map, there */
  for (size_t i = 0; i < s->nfiles; i++)
    for (size_t j = 0; j < st_count(s->files[i]); j++) {
      const st_tensor *t = st_at(s->files[i], j);
      const st_mapped *m = st_map_find(map, nmap, t->name);
      if (!m || strcmp(m->shard, shards[i]) != 0) {
        st_err_at(err, st_path(s->files[i]), t->name);
        if (!m) {
          strbuf_puts(err, "not in the weight map of ");
          strbuf_puts(err, path);
        } else {
          strbuf_printf(err, "also in this shard, but %s's weight map puts it in ", path);
          st_quote(err, m->shard);
        }
        goto out;
      }
    }
  ok = true;
out:
  free(map);
  free(shards);
  cJSON_Delete(root);
  return ok;
}

st_set *st_set_open(const char *path, strbuf *err) {
  st_set *s = xcalloc(1, sizeof *s);
  strbuf target = {0};
  strbuf_puts(&target, path);
  struct stat st;
  bool index = false, ok = false;
  if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
    target.len = 0;
    strbuf_printf(&target, "%s%s%s", path, path[strlen(path) - 1] == '/' ? "" : "/", ST_INDEX_NAME);
    index = stat(target.data, &st) == 0;
    if (!index) {
      target.len -= strlen(ST_INDEX_NAME);
      strbuf_puts(&target, ST_SINGLE_NAME);
      if (stat(target.data, &st) != 0) {
        strbuf_printf(err, "%s: a directory with neither %s nor %s", path, ST_INDEX_NAME,
                      ST_SINGLE_NAME);
        goto out;
      }
    }
  } else {
    size_t n = strlen(path);
    index = n >= 5 && strcmp(path + n - 5, ".json") == 0;
  }
  if (index) {
    strbuf why = {0};
    size_t len;
    char *text = support_read_file(target.data, &len, &why);
    if (!text) {
      strbuf_printf(err, "%s: %s", target.data, why.data);
      strbuf_free(&why);
      goto out;
    }
    ok = st_set_load_index(s, target.data, text, len, err);
    free(text);
  } else {
    s->files = xmalloc(sizeof *s->files);
    s->files[0] = st_open(target.data, err);
    s->nfiles = s->files[0] ? 1 : 0;
    ok = s->nfiles == 1;
  }
out:
  strbuf_free(&target);
  if (!ok) {
    st_set_close(s);
    return NULL;
  }
  st_set_index(s);
  return s;
}

void st_set_close(st_set *s) {
  if (!s) return;
  for (size_t i = 0; i < s->nfiles; i++) st_close(s->files[i]);
  free(s->files);
  free(s->all);
  free(s->by_name);
  free(s);
}

size_t st_set_count(const st_set *s) { return s->n; }

const st_tensor *st_set_at(const st_set *s, size_t i, const st_file **file) {
  if (file) *file = s->all[i].f;
  return s->all[i].t;
}

const st_tensor *st_set_find(const st_set *s, const char *name, const st_file **file) {
  size_t lo = 0, hi = s->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(s->by_name[mid].t->name, name);
    if (c == 0) {
      if (file) *file = s->by_name[mid].f;
      return s->by_name[mid].t;
    }
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return NULL;
}

size_t st_set_files(const st_set *s) { return s->nfiles; }
const st_file *st_set_file(const st_set *s, size_t i) { return s->files[i]; }
