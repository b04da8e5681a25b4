/* hf.c -- reads a Hugging Face config.json (cJSON, plus a scan of the text for the position of
 * every key), checks each field against what the OctoPipe runtime computes, and writes the
 * model as .octo text: a header naming the source, the fields read and how, the fields ignored,
 * then the model block. Every refusal names the field, its value and what OctoPipe supports. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "frontend.h"
#include "import.h"

/* ---- Families and ignored fields (tables) ---- */

typedef enum hf_family_id {
#define HF_FAMILY(ID, TYPE, EPS, THETA, TIED, SUMMARY) HF_FAM_##ID,
#include "families.def"
#undef HF_FAMILY
  HF_FAM_COUNT
} hf_family_id;

/* One row of families.def. */
typedef struct hf_family {
  const char *type; /* model_type */
  double eps;       /* the config class's default RMSNorm epsilon */
  double theta;     /* its default RoPE theta (0: no rotary embedding) */
  bool tied;        /* its default tie_word_embeddings */
} hf_family;

static const hf_family hf_families[] = {
#define HF_FAMILY(ID, TYPE, EPS, THETA, TIED, SUMMARY) {TYPE, EPS, THETA, TIED},
#include "families.def"
#undef HF_FAMILY
};

/* One row of ignored.def. */
typedef struct hf_ignored {
  const char *field; /* config key */
  const char *why;   /* why it does not change the math */
} hf_ignored;

static const hf_ignored hf_ignored_fields[] = {
#define HF_IGNORED(FIELD, WHY) {FIELD, WHY},
#include "ignored.def"
#undef HF_IGNORED
};

/* The language's defaults of norm_eps and rope_theta (ir/layer_params.def): a value that differs
 * is written in the spec. */
#define HF_OCTO_EPS 1e-5
#define HF_OCTO_THETA 1e4

/* ---- The config text: keys and their positions ---- */

/* A key of the config: its dotted path ("rope_theta", "text_config.hidden_size") and where it
 * and its value are in the text. */
typedef struct hf_key {
  char *path;        /* dotted path (keys as written, escapes kept) */
  size_t off, len;   /* the key's quoted string */
  size_t voff, vlen; /* its value */
  bool used;         /* read by the family's handler */
} hf_key;

/* State of one import. */
typedef struct hf_ctx {
  diag_engine *d;      /* where errors go */
  uint32_t src;        /* the config's source */
  const char *text;    /* its bytes */
  size_t len;          /* their number */
  hf_key *keys;        /* every key of the objects, in text order */
  int nkeys, keys_cap; /* count, allocated */
  int errors;          /* errors reported */
  const hf_family *fam; /* the family (model_type) */
  strbuf read;         /* comment lines: the fields read and how they were used */
  strbuf ignored;      /* comment lines: the fields ignored and why */
} hf_ctx;

/* Location of text offset 'off' with a span of 'len' bytes (at most 200 underlined). */
static diag_loc hf_loc_at(const hf_ctx *c, size_t off, size_t len) {
  return diag_offset_loc(c->d, c->src, off, (uint32_t)(len < 200 ? len : 200));
}

static hf_key *hf_find_key(hf_ctx *c, const char *path) {
  for (int i = 0; i < c->nkeys; i++)
    if (strcmp(c->keys[i].path, path) == 0) return &c->keys[i];
  return NULL;
}

/* Location of key 'path' (the file without a line when the key is absent). */
static diag_loc hf_loc(hf_ctx *c, const char *path) {
  hf_key *k = path ? hf_find_key(c, path) : NULL;
  return k ? hf_loc_at(c, k->off, k->len) : diag_mkloc(c->src, 0, 0, 0);
}

/* Whether ch is whitespace as cJSON reads it: every byte from 1 to 32 (control bytes between
 * tokens, which cJSON accepts, included). */
static bool hf_blank(char ch) {
  return ch && (unsigned char)ch <= ' ';
}

/* Offset of the first byte at or after i that is not hf_blank. */
static size_t hf_ws(const hf_ctx *c, size_t i) {
  while (i < c->len && hf_blank(c->text[i])) i++;
  return i;
}

/* Scan the value at text[i] (valid JSON, cJSON said so), recording the keys of objects under
 * 'prefix' (NULL: inside an array, not recorded; deeper than 16: not recorded). Returns the
 * offset after the value. */
static size_t hf_scan(hf_ctx *c, size_t i, const char *prefix, int depth) {
  i = hf_ws(c, i);
  if (i >= c->len) return i;
  char ch = c->text[i];
  if (ch == '"') return support_json_string_end(c->text, c->len, i);
  if (ch == '{' || ch == '[') {
    i = hf_ws(c, i + 1);
    while (i < c->len && c->text[i] != (ch == '{' ? '}' : ']')) {
      size_t start = i; /* each member moves i on; a byte the scan cannot read ends it */
      if (ch == '{') {
        size_t k0 = i, k1 = support_json_string_end(c->text, c->len, i);
        i = hf_ws(c, k1);
        if (i < c->len && c->text[i] == ':') i++;
        size_t v0 = hf_ws(c, i);
        strbuf path = {0};
        bool rec = prefix && depth < 16;
        if (rec) {
          strbuf_printf(&path, "%s%.*s", prefix, (int)(k1 - k0 - 2), c->text + k0 + 1);
          if (hf_find_key(c, strbuf_cstr(&path))) {
            c->errors++;
            diag_error(c->d, hf_loc_at(c, k0, k1 - k0),
                       "field '%s' is given twice (Python's json keeps the last, cJSON the first)",
                       strbuf_cstr(&path));
          }
          strbuf_putc(&path, '.');
        }
        i = hf_scan(c, v0, rec ? strbuf_cstr(&path) : NULL, depth + 1);
        if (rec) {
          hf_key k = {xstrndup(path.data, path.len - 1), k0, k1 - k0, v0, i - v0, false};
          VEC_PUSH(c->keys, c->nkeys, c->keys_cap, k);
        }
        strbuf_free(&path);
      } else {
        i = hf_scan(c, i, NULL, depth + 1);
      }
      i = hf_ws(c, i);
      if (i < c->len && c->text[i] == ',') i = hf_ws(c, i + 1);
      if (i <= start) return c->len;
    }
    return i < c->len ? i + 1 : i;
  }
  while (i < c->len && c->text[i] && !hf_blank(c->text[i]) && !strchr(",]}", c->text[i])) i++;
  return i;
}

/* ---- Reading fields ---- */

/* The value of key 'path' as written (at most 60 bytes shown) in buf. */
static const char *hf_written(hf_ctx *c, const char *path, char buf[80]) {
  hf_key *k = hf_find_key(c, path);
  if (!k) return "(absent)";
  /* whitespace runs as one blank, at most 60 bytes */
  size_t o = 0;
  for (size_t i = 0; i < k->vlen && o < 60; i++) {
    char ch = c->text[k->voff + i];
    bool blank = ch == ' ' || ch == '\n' || ch == '\r' || ch == '\t';
    if (blank && (o == 0 || buf[o - 1] == ' ')) continue;
    buf[o++] = blank ? ' ' : ch;
  }
  if (o == 60) memcpy(buf + o, " ...", 4), o += 4;
  buf[o] = 0;
  return buf;
}

/* Path of field 'name' under prefix 'p' ("" or "text_config."), in a static buffer per call. */
typedef struct hf_path {
  char s[160]; /* the dotted path */
} hf_path;
static hf_path hf_mkpath(const char *p, const char *name) {
  hf_path r;
  snprintf(r.s, sizeof r.s, "%s%s", p, name);
  return r;
}

/* Item 'name' of obj (NULL when absent), marking key p+name as read. */
static const cJSON *hf_get(hf_ctx *c, const cJSON *obj, const char *p, const char *name) {
  hf_key *k = hf_find_key(c, hf_mkpath(p, name).s);
  if (k) k->used = true;
  return cJSON_GetObjectItemCaseSensitive(obj, name);
}

/* Record in the header that field p+name was read and how it was used. */
static void hf_use(hf_ctx *c, const char *p, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void hf_use(hf_ctx *c, const char *p, const char *name, const char *fmt, ...) {
  char buf[80];
  hf_path path = hf_mkpath(p, name);
  strbuf line = {0};
  strbuf_printf(&line, "%s = %s", path.s, hf_written(c, path.s, buf));
  strbuf_printf(&c->read, "#   %-40s ", strbuf_cstr(&line));
  va_list ap;
  va_start(ap, fmt);
  strbuf_vprintf(&c->read, fmt, ap);
  va_end(ap);
  strbuf_putc(&c->read, '\n');
  strbuf_free(&line);
}

/* Report that field p+name (at its key) is not supported: "NAME = VALUE is not supported:
 * WHY (issue 27)". */
static void hf_refuse(hf_ctx *c, const char *p, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void hf_refuse(hf_ctx *c, const char *p, const char *name, const char *fmt, ...) {
  char buf[80];
  hf_path path = hf_mkpath(p, name);
  strbuf why = {0};
  va_list ap;
  va_start(ap, fmt);
  strbuf_vprintf(&why, fmt, ap);
  va_end(ap);
  c->errors++;
  if (hf_find_key(c, path.s))
    diag_error(c->d, hf_loc(c, path.s), "%s = %s is not supported: %s (issue 27)", path.s,
               hf_written(c, path.s, buf), strbuf_cstr(&why));
  else
    diag_error(c->d, hf_loc(c, NULL), "%s is not given, and %s (issue 27)", path.s,
               strbuf_cstr(&why));
  strbuf_free(&why);
}

/* A whole number >= 'min' at item v; false after reporting it otherwise. */
static bool hf_count_of(hf_ctx *c, const cJSON *v, const char *p, const char *name, double min,
                        double *out) {
  char buf[80];
  hf_path path = hf_mkpath(p, name);
  if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < min ||
      v->valuedouble > 9007199254740992.0) {
    c->errors++;
    diag_error(c->d, hf_loc(c, path.s), "%s = %s: expected a whole number of at least %g",
               path.s, hf_written(c, path.s, buf), min);
    return false;
  }
  *out = v->valuedouble;
  return true;
}

/* Positive number field p+name: its value, or 'dflt' when absent or null. Returns 0 after an
 * error. 'how' says how it is used (header). */
static double hf_positive(hf_ctx *c, const cJSON *obj, const char *p, const char *name,
                          double dflt, const char *how) {
  const cJSON *v = hf_get(c, obj, p, name);
  if (!v || cJSON_IsNull(v)) {
    if (v) hf_use(c, p, name, "null: %g, the %s default; %s", dflt, c->fam->type, how);
    return dflt;
  }
  if (!cJSON_IsNumber(v) || !(v->valuedouble > 0) || !isfinite(v->valuedouble)) {
    char buf[80];
    hf_path path = hf_mkpath(p, name);
    c->errors++;
    diag_error(c->d, hf_loc(c, path.s), "%s = %s: expected a positive number", path.s,
               hf_written(c, path.s, buf));
    return 0;
  }
  hf_use(c, p, name, "%s", how);
  return v->valuedouble;
}

/* Whole-number field p+name (at least min): its value, or 'dflt' when absent or null (dflt < 0:
 * required, an error). Returns 0 after an error. 'how' says how it is used (header). */
static double hf_count(hf_ctx *c, const cJSON *obj, const char *p, const char *name, double dflt,
                       double min, const char *how) {
  const cJSON *v = hf_get(c, obj, p, name);
  if (!v || cJSON_IsNull(v)) {
    if (dflt < 0) {
      c->errors++;
      diag_error(c->d, hf_loc(c, NULL), "%s%s is missing: a %s config needs it", p, name,
                 c->fam->type);
      return 0;
    }
    if (v && dflt == 0) hf_use(c, p, name, "null: none (%s)", how);
    else if (v) hf_use(c, p, name, "null: %g, the %s default; %s", dflt, c->fam->type, how);
    return dflt;
  }
  double x = 0;
  if (!hf_count_of(c, v, p, name, min, &x)) return 0;
  hf_use(c, p, name, "%s", how);
  return x;
}

/* Number field p+name that OctoPipe computes only at 'octo' ('dflt' when absent: the config
 * class's default). 'what' says what OctoPipe computes, for the refusal. */
static void hf_fixed(hf_ctx *c, const cJSON *obj, const char *p, const char *name, double dflt,
                     double octo, const char *what) {
  const cJSON *v = hf_get(c, obj, p, name);
  double x = dflt;
  if (v && !cJSON_IsNull(v)) {
    if (!cJSON_IsNumber(v)) {
      hf_refuse(c, p, name, "expected a number; %s", what);
      return;
    }
    x = v->valuedouble;
  }
  if (fabs(x - octo) > 1e-9 * fabs(octo)) {
    if (v && !cJSON_IsNull(v))
      hf_refuse(c, p, name, "%s", what);
    else
      hf_refuse(c, p, name, "the %s default is %g: %s", c->fam->type, dflt, what);
    return;
  }
  if (v) hf_use(c, p, name, "checked: %s", what);
}

/* Boolean field p+name that OctoPipe computes only as 'octo' ('dflt' when absent or null). */
static void hf_flag(hf_ctx *c, const cJSON *obj, const char *p, const char *name, bool dflt,
                    bool octo, const char *what) {
  const cJSON *v = hf_get(c, obj, p, name);
  bool x = dflt;
  if (v && !cJSON_IsNull(v)) {
    if (!cJSON_IsBool(v)) {
      hf_refuse(c, p, name, "expected true or false; %s", what);
      return;
    }
    x = cJSON_IsTrue(v);
  }
  if (x != octo) {
    if (v && !cJSON_IsNull(v)) hf_refuse(c, p, name, "%s", what);
    else hf_refuse(c, p, name, "the %s default is %s: %s", c->fam->type, dflt ? "true" : "false", what);
    return;
  }
  if (v) hf_use(c, p, name, "checked: %s", what);
}

/* Field p+name that must be absent or null (any other value changes the math: 'what'). */
static void hf_none(hf_ctx *c, const cJSON *obj, const char *p, const char *name,
                    const char *what) {
  const cJSON *v = hf_get(c, obj, p, name);
  if (v && !cJSON_IsNull(v)) hf_refuse(c, p, name, "%s", what);
  else if (v) hf_use(c, p, name, "checked: %s", what);
}

/* Whether string field p+name is 'want' ('dflt' when absent); refuses any other value with
 * 'what'. */
static void hf_string_is(hf_ctx *c, const cJSON *obj, const char *p, const char *name,
                         const char *dflt, const char *want, const char *what) {
  const cJSON *v = hf_get(c, obj, p, name);
  const char *s = v && cJSON_IsString(v) ? v->valuestring : v && !cJSON_IsNull(v) ? "" : dflt;
  if (strcmp(s, want) != 0) {
    if (v && !cJSON_IsNull(v)) hf_refuse(c, p, name, "%s", what);
    else hf_refuse(c, p, name, "the %s default is \"%s\": %s", c->fam->type, dflt, what);
    return;
  }
  if (v) hf_use(c, p, name, "checked: %s", what);
}

/* ---- The model ---- */

/* The model as the spec writes it. */
typedef struct hf_model {
  double hidden, heads, kv_heads, vocab, seq, ffn; /* model-level dimensions */
  double head_dim;          /* written when it is not hidden / heads; 0: not written */
  const char *act;          /* MLP activation (language name) */
  bool gated;               /* gated MLP */
  double window;            /* window of the windowed ('L') layers; 0: none */
  double theta;             /* RoPE base of every attention layer (rope_theta) */
  double local_theta;       /* that of the windowed layers when it differs; 0: theta */
  double rope_factor, rope_low, rope_high, rope_orig; /* Llama 3.1's rope scaling (factor 0:
                                                          none) */
  double rope_linear;       /* transformers' "linear" rope scaling's factor (0: none); Gemma 3:
                               its global layers only */
  double eps;               /* RMSNorm epsilon of the decoder layers and the head (norm_eps) */
  bool qkv_bias;            /* the attention's q, k and v projections have biases (Qwen2) */
  bool qk_norm;             /* the attention normalizes each q and k head (Qwen3) */
  bool no_rope;             /* the attention has no positional embedding (Nemotron-H:
                               'rope = false') */
  bool mla;                 /* the attention is DeepSeek's latent attention (mla layers) */
  double q_rank, kv_rank, nope_dim, rope_dim, v_dim; /* its ranks and head widths */
  bool sigmoid, score_bias; /* MoE routing by sigmoid scores with a choice bias (DeepSeek-V3) */
  double egroups, tgroups;  /* group-limited routing's groups and groups kept (0: none) */
  double rscale;            /* the routing weights' scale (0: none) */
  double yarn_factor;       /* DeepSeek's YaRN rope scaling on the mla layers (0: none), its */
  double yarn_orig, yarn_fast, yarn_slow, yarn_ms, yarn_msa; /* context, betas, mscales */
  bool shared_gate;         /* the shared experts' sum is scaled by a learned sigmoid gate
                               (Qwen2-MoE's shared_expert_gate: 'shared_gate = true') */
  bool no_renorm;           /* MoE routing weights are the softmax over all experts at the
                               selected ones (norm_topk_prob false: 'renorm = false') */
  bool tied;                /* the LM head's matrix is the embedding's table (tie_word_embeddings:
                               'tied = true' on the lm_head) */
  bool gemma;               /* Gemma: the embedding scaled by sqrt(hidden), (1 + w) norms,
                               sandwich norms ('scaled = true', 'norm_plus_one = true',
                               'post_norm = true') */
  bool padded;              /* the embedding has a padding token (pad_token_id: 'pad_id') */
  double pad_id;            /* that token */
  double attn_cap;          /* the attention scores' softcap (0: none) */
  double logit_cap;         /* the LM head's logit softcap (0: none) */
  double score_dim;         /* the scores' scale is score_dim^-0.5 (0: head_dim's) */
  double vit_eps;           /* LayerNorm epsilon of the ViT layers */
  double experts, top_k, expert_ffn, shared; /* MoE dimensions (experts 0: none) */
  char *layers;             /* per decoder layer: 'D' dense, 'E' MoE, 'L' windowed dense,
                               'W' windowed MoE; or, with 'hybrid', the pattern letters */
  bool hybrid;              /* Nemotron-H: 'layers' is the hybrid pattern (M, *, -) */
  double m_state, m_heads, m_head_dim, m_groups, m_conv, m_expand, m_chunk; /* Mamba-2 */
  double vit_layers, vit_hidden, vit_heads, vit_ffn, vit_patch, vit_image; /* LLaVA's ViT */
  double vit_channels;      /* its pixels' channels */
  const char *vit_act;      /* its MLP's activation (language name; CLIP's quick_gelu) */
  double vit_unused;        /* its last layers that LLaVA does not run (after
                               vision_feature_layer): written 'unused = true' */
  const char *proj_act;     /* LLaVA's projector's activation (language name) */
  bool keep_class;          /* the projector keeps the class token ("full": drop_class = false) */
} hf_model;

/* The activation of field p+name in the language ("silu", ...), or NULL after refusing it. */
static const char *hf_act(hf_ctx *c, const cJSON *obj, const char *p, const char *name,
                          const char *dflt) {
  static const struct {
    const char *hf, *octo;
  } acts[] = {{"silu", "silu"}, {"swish", "silu"}, {"gelu", "gelu"}, {"relu", "relu"},
              {"relu2", "relu2"}, {"tanh", "tanh"}, {"gelu_pytorch_tanh", "gelu_tanh"},
              {"gelu_new", "gelu_tanh"}, {"quick_gelu", "quick_gelu"}};
  const cJSON *v = hf_get(c, obj, p, name);
  const char *s = v && cJSON_IsString(v) ? v->valuestring : v ? "" : dflt;
  for (size_t i = 0; i < sizeof acts / sizeof *acts; i++)
    if (strcmp(s, acts[i].hf) == 0) {
      if (v) hf_use(c, p, name, "act = %s", acts[i].octo);
      return acts[i].octo;
    }
  const char *what = "OctoPipe's activations are silu, gelu (the erf form), gelu_tanh "
                     "(gelu_pytorch_tanh, gelu_new), quick_gelu, relu, relu2 and tanh";
  if (v) hf_refuse(c, p, name, "%s", what);
  else hf_refuse(c, p, name, "the %s default is \"%s\": %s", c->fam->type, dflt, what);
  return NULL;
}

static void hf_leftovers(hf_ctx *c, const cJSON *obj, const char *p);

/* Whether item v of field p+name is absent, null, true or false; false after reporting any other
 * value at its key ("NAME = VALUE: expected true or false"). */
static bool hf_bool_or_null(hf_ctx *c, const cJSON *v, const char *p, const char *name) {
  if (!v || cJSON_IsNull(v) || cJSON_IsBool(v)) return true;
  char buf[80];
  hf_path path = hf_mkpath(p, name);
  c->errors++;
  diag_error(c->d, hf_loc(c, path.s), "%s = %s: expected true or false", path.s,
             hf_written(c, path.s, buf));
  return false;
}

/* tie_word_embeddings under prefix p into m->tied, which the spec writes as 'tied = true' on the
 * lm_head (the first embedding's table is then its matrix). Absent: 'dflt', the config class's
 * default; null: false (transformers keeps None, which does not tie). Post: a value that is not
 * true, false or null is an error at its key (m->tied unchanged); otherwise the header says how
 * it was used. */
static void hf_tie(hf_ctx *c, const cJSON *obj, const char *p, bool dflt, hf_model *m) {
  const char *name = "tie_word_embeddings";
  const cJSON *v = hf_get(c, obj, p, name);
  if (!hf_bool_or_null(c, v, p, name)) return;
  m->tied = v ? cJSON_IsTrue(v) : dflt;
  const char *how = m->tied ? "tied = true on the lm_head (its matrix is the embedding's table)"
                            : "untied (two matrices: the embedding's and the LM head's)";
  if (v && cJSON_IsNull(v))
    hf_use(c, p, name, "null, which does not tie (transformers keeps None): %s", how);
  else if (v)
    hf_use(c, p, name, "%s", how);
}

/* norm_topk_prob under prefix p (absent: 'dflt', the config class's default) into m->no_renorm:
 * true renormalizes the top-k routing weights (OctoPipe's renorm = true, Mixtral's), false or
 * null (transformers' 'if self.norm_topk_prob' on None) takes the softmax over all experts at
 * the selected ones (renorm = false). Post: any other value is an error at its key. */
static void hf_renorm(hf_ctx *c, const cJSON *obj, const char *p, bool dflt, hf_model *m) {
  const char *name = "norm_topk_prob";
  const cJSON *v = hf_get(c, obj, p, name);
  if (!hf_bool_or_null(c, v, p, name)) return;
  m->no_renorm = !(v ? cJSON_IsTrue(v) : dflt);
  if (v)
    hf_use(c, p, name, "%s",
           m->sigmoid ? (m->no_renorm ? "renorm = false (the selected sigmoid scores)"
                                      : "renorm = true (the sigmoid scores over their sum)")
           : m->no_renorm ? "renorm = false (the softmax over all experts, at the selected ones)"
                          : "renorm = true (the softmax over the selected)");
}

/* Llama 3.1's rope scaling, object rs at path q (field 'field' under prefix p, its type read
 * from key tn): m->rope_*; errors name the fields. */
static void hf_rope_llama3(hf_ctx *c, const cJSON *rs, const char *p, const char *q,
                           const char *field, const char *tn, hf_model *m) {
  hf_use(c, q, tn, "Llama 3.1's rope scaling");
  m->rope_factor = hf_positive(c, rs, q, "factor", 0, "rope_factor");
  m->rope_low = hf_positive(c, rs, q, "low_freq_factor", 0, "rope_low_freq_factor");
  m->rope_high = hf_positive(c, rs, q, "high_freq_factor", 0, "rope_high_freq_factor");
  m->rope_orig = hf_count(c, rs, q, "original_max_position_embeddings", -1, 1,
                          "rope_original_seq");
  if (m->rope_factor == 0 || m->rope_low == 0 || m->rope_high == 0)
    hf_refuse(c, p, field, "rope_type llama3 needs factor, low_freq_factor and "
              "high_freq_factor");
  else if (m->rope_factor != 1 && !(m->rope_high > m->rope_low))
    hf_refuse(c, q, "high_freq_factor", "it must exceed low_freq_factor = %g", m->rope_low);
  hf_leftovers(c, rs, q);
}

/* transformers' "linear" rope scaling (every position divided by factor), object rs at path q
 * (field 'field' under prefix p, its type read from key tn): m->rope_linear. */
static void hf_rope_linear(hf_ctx *c, const cJSON *rs, const char *p, const char *q,
                           const char *field, const char *tn, hf_model *m) {
  hf_use(c, q, tn, "linear rope scaling (rope_linear)");
  m->rope_linear = hf_positive(c, rs, q, "factor", 0, "rope_linear");
  if (m->rope_linear == 0) hf_refuse(c, p, field, "rope_type linear needs factor");
  hf_leftovers(c, rs, q);
}

/* DeepSeek's YaRN rope scaling, object rs at path q (field 'field' under prefix p, its type read
 * from key tn): m->yarn_*, written on the mla layers. Both magnitude scales must be given (the
 * rotary factor is then their ratio, transformers' rule), no attention_factor, truncate true. */
static void hf_rope_yarn(hf_ctx *c, const cJSON *rs, const char *p, const char *q,
                         const char *field, const char *tn, hf_model *m) {
  hf_use(c, q, tn, "YaRN on the mla layers (yarn_*)");
  m->yarn_factor = hf_positive(c, rs, q, "factor", 0, "yarn_factor");
  m->yarn_orig = hf_count(c, rs, q, "original_max_position_embeddings", -1, 1,
                          "yarn_original_seq");
  m->yarn_fast = hf_positive(c, rs, q, "beta_fast", 32, "yarn_beta_fast");
  m->yarn_slow = hf_positive(c, rs, q, "beta_slow", 1, "yarn_beta_slow");
  m->yarn_ms = hf_positive(c, rs, q, "mscale", 0, "yarn_mscale");
  m->yarn_msa = hf_positive(c, rs, q, "mscale_all_dim", 0, "yarn_mscale_all_dim");
  if (m->yarn_factor == 0 || m->yarn_ms == 0 || m->yarn_msa == 0)
    hf_refuse(c, p, field, "OctoPipe's YaRN needs factor, mscale and mscale_all_dim");
  hf_none(c, rs, q, "attention_factor", "the rotary factor is mscale's over mscale_all_dim's");
  hf_flag(c, rs, q, "truncate", true, true, "the ramp's bounds are whole dimensions");
  hf_leftovers(c, rs, q);
}

/* Gemma 3's rope_parameters under transformers 5 (object rp, under prefix p): one object per
 * layer type. The local layers' ("sliding_attention": unscaled) base goes to m->local_theta;
 * returns the global layers' object ("full_attention"), the model's, and sets *fq to its path. */
static const cJSON *hf_rope_types(hf_ctx *c, const cJSON *rp, const char *p, hf_path *fq,
                                  hf_model *m) {
  hf_path q = hf_mkpath(p, "rope_parameters.");
  const cJSON *full = hf_get(c, rp, q.s, "full_attention");
  const cJSON *loc = hf_get(c, rp, q.s, "sliding_attention");
  hf_path lq = hf_mkpath(p, "rope_parameters.sliding_attention.");
  if (cJSON_IsObject(loc)) {
    m->local_theta = hf_positive(c, loc, lq.s, "rope_theta", 1e4, "rope_theta of the local layers");
    hf_string_is(c, loc, lq.s, "rope_type", "default", "default",
                 "OctoPipe scales no local layer's rotary embedding");
    hf_leftovers(c, loc, lq.s);
  } else if (loc) {
    hf_refuse(c, q.s, "sliding_attention", "expected an object");
  }
  hf_leftovers(c, rp, q.s);
  *fq = hf_mkpath(p, "rope_parameters.full_attention.");
  return full;
}

/* RoPE fields: rope_theta (any positive base: m->theta), rope_scaling (none, Llama 3.1's
 * "llama3": m->rope_*, or "linear": m->rope_linear; DeepSeek's mla layers: "yarn" only),
 * partial_rotary_factor (1). transformers 5 writes the two together as
 * rope_parameters, {"rope_theta": ..., "rope_type": "default" or "llama3", ...}, read the same
 * way (rope_type "default": no scaling), or per layer type for Gemma 3 (hf_rope_types). */
static void hf_rope(hf_ctx *c, const cJSON *obj, const char *p, hf_model *m) {
  const cJSON *rp = hf_get(c, obj, p, "rope_parameters");
  bool v5 = rp && !cJSON_IsNull(rp);
  const char *field = v5 ? "rope_parameters" : "rope_scaling";
  hf_path q = hf_mkpath(p, v5 ? "rope_parameters." : "rope_scaling.");
  if (v5 && cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(rp, "full_attention")))
    rp = hf_rope_types(c, rp, p, &q, m);
  m->theta = hf_positive(c, v5 ? rp : obj, v5 ? q.s : p, "rope_theta", c->fam->theta,
                         "rope_theta");
  const cJSON *rs = v5 ? rp : hf_get(c, obj, p, "rope_scaling");
  if (rs && !cJSON_IsNull(rs)) {
    const char *tn = cJSON_GetObjectItemCaseSensitive(rs, "rope_type") ? "rope_type" : "type";
    const cJSON *ty = hf_get(c, rs, q.s, tn);
    const char *type = cJSON_IsObject(rs) && cJSON_IsString(ty) ? ty->valuestring : "";
    if (v5 && strcmp(type, "default") == 0) {
      hf_use(c, q.s, tn, "no rope scaling");
      hf_leftovers(c, rs, q.s);
    } else if (strncmp(c->fam->type, "deepseek_v", 10) == 0) {
      if (strcmp(type, "yarn") != 0) {
        hf_refuse(c, p, field, "OctoPipe's mla layers scale their rotary part by YaRN only "
                  "(rope_type \"yarn\")");
        return;
      }
      hf_rope_yarn(c, rs, p, q.s, field, tn, m);
    } else if (strcmp(type, "linear") == 0) {
      hf_rope_linear(c, rs, p, q.s, field, tn, m);
    } else if (strcmp(type, "llama3") != 0) {
      hf_refuse(c, p, field, "OctoPipe's rope scalings are Llama 3.1's (rope_type \"llama3\") "
                "and \"linear\", not dynamic, yarn or longrope");
      return;
    } else {
      hf_rope_llama3(c, rs, p, q.s, field, tn, m);
    }
  } else if (rs) {
    hf_use(c, p, "rope_scaling", "checked: no scaling");
  }
  if (v5) { /* beside rope_parameters, the older fields may only repeat it */
    const cJSON *top = hf_get(c, obj, p, "rope_theta");
    if (top && !(cJSON_IsNumber(top) && top->valuedouble == m->theta))
      hf_refuse(c, p, "rope_theta", "it differs from rope_parameters.rope_theta = %g", m->theta);
    else if (top)
      hf_use(c, p, "rope_theta", "checked: rope_parameters.rope_theta");
    const cJSON *old = hf_get(c, obj, p, "rope_scaling");
    if (old && !cJSON_IsNull(old))
      hf_refuse(c, p, "rope_scaling", "rope_parameters gives the rope scaling");
    else if (old)
      hf_use(c, p, "rope_scaling", "checked: no scaling (rope_parameters gives it)");
  }
  hf_fixed(c, obj, p, "partial_rotary_factor", 1, 1,
           "OctoPipe rotates the whole head (no partial rotary)");
}

/* pad_token_id under prefix p: transformers makes it the embedding's padding_idx, whose row the
 * lookup gives no gradient: m->padded and m->pad_id ('pad_id' on the embedding). Null or absent:
 * none. Post: a token outside the vocabulary (transformers refuses it too) is an error. */
static void hf_pad(hf_ctx *c, const cJSON *obj, const char *p, hf_model *m) {
  const cJSON *v = hf_get(c, obj, p, "pad_token_id");
  if (!v) return;
  if (cJSON_IsNull(v)) {
    hf_use(c, p, "pad_token_id", "null: no padding token");
    return;
  }
  if (!hf_count_of(c, v, p, "pad_token_id", 0, &m->pad_id)) return;
  if (m->vocab > 0 && m->pad_id >= m->vocab) {
    hf_refuse(c, p, "pad_token_id", "it is not a token of vocab_size = %g", m->vocab);
    return;
  }
  m->padded = true;
  hf_use(c, p, "pad_token_id", "pad_id of the embedding (transformers' padding_idx: the lookup "
         "gives its row no gradient)");
}

/* Fields every decoder family shares. Fills the attention and dense-MLP dimensions of *m and
 * the number of decoder layers *n. */
static void hf_decoder_common(hf_ctx *c, const cJSON *obj, const char *p, hf_model *m, double *n,
                              const char *act_field, const char *act_dflt, double ffn_dflt) {
  m->hidden = hf_count(c, obj, p, "hidden_size", -1, 1, "hidden");
  *n = hf_count(c, obj, p, "num_hidden_layers", -1, 1, "decoder layers (attention + feed-forward)");
  m->heads = hf_count(c, obj, p, "num_attention_heads", -1, 1, "heads");
  m->kv_heads = hf_count(c, obj, p, "num_key_value_heads", m->heads, 1, "kv_heads");
  double hd = hf_count(c, obj, p, "head_dim", 0, 1, "head_dim (written when not hidden / heads)");
  if (hd > 0 && m->heads > 0 && hd * m->heads != m->hidden) m->head_dim = hd;
  if (ffn_dflt != 0) m->ffn = hf_count(c, obj, p, "intermediate_size", ffn_dflt, 1, "ffn");
  m->vocab = hf_count(c, obj, p, "vocab_size", -1, 1, "vocab (embedding and lm_head)");
  m->act = hf_act(c, obj, p, act_field, act_dflt);
  m->gated = true;
  m->eps = hf_positive(c, obj, p, "rms_norm_eps", c->fam->eps, "norm_eps");
  hf_rope(c, obj, p, m);
  hf_flag(c, obj, p, "attention_bias", false, false, "OctoPipe's attention projections have no bias");
  hf_flag(c, obj, p, "mlp_bias", false, false, "OctoPipe's MLP projections have no bias");
  hf_fixed(c, obj, p, "attention_dropout", 0, 0, "OctoPipe has no attention dropout");
  hf_tie(c, obj, p, c->fam->tied, m);
  hf_pad(c, obj, p, m);
}

/* layer_types (transformers 5's list of "full_attention" and "sliding_attention", one per
 * decoder layer) into m->layers: a sliding layer's 'D' becomes 'L', its 'E' 'W'. False after
 * refusing a list of another length or with another type. */
static bool hf_layer_types(hf_ctx *c, const cJSON *types, const char *p, hf_model *m, double n) {
  if (!cJSON_IsArray(types) || cJSON_GetArraySize(types) != n) {
    hf_refuse(c, p, "layer_types", "expected a list of num_hidden_layers = %g entries", n);
    return false;
  }
  int i = 0;
  const cJSON *t;
  cJSON_ArrayForEach(t, types) {
    bool slide = cJSON_IsString(t) && strcmp(t->valuestring, "sliding_attention") == 0;
    if (!slide && !(cJSON_IsString(t) && strcmp(t->valuestring, "full_attention") == 0)) {
      hf_refuse(c, p, "layer_types", "entry %d is not \"sliding_attention\" or "
                "\"full_attention\"", i);
      return false;
    }
    if (slide) m->layers[i] = m->layers[i] == 'E' ? 'W' : 'L';
    i++;
  }
  hf_use(c, p, "layer_types", "windowed (sliding_attention) and full layers");
  return true;
}

/* Sliding-window fields of Mistral/Mixtral (every layer) or Qwen (use_sliding_window, layers from
 * max_window_layers on, or transformers 5's layer_types): marks windowed layers 'L' in
 * m->layers. */
static void hf_windows(hf_ctx *c, const cJSON *obj, const char *p, hf_model *m, double n, bool qwen) {
  bool on = true;
  double from = 0;
  const cJSON *types = qwen ? hf_get(c, obj, p, "layer_types") : NULL;
  if (types) { /* transformers 5 writes which layers are windowed */
    if (hf_layer_types(c, types, p, m, n) && strpbrk(m->layers, "LW")) {
      m->window = hf_count(c, obj, p, "sliding_window", -1, 1, "window of the windowed layers");
      if (m->window >= m->seq) {
        for (char *l = m->layers; *l; l++) *l = *l == 'L' ? 'D' : *l == 'W' ? 'E' : *l;
        m->window = 0;
      }
    } else if (hf_get(c, obj, p, "sliding_window")) {
      hf_use(c, p, "sliding_window", "unused: no layer_types entry is sliding_attention");
    }
    if (hf_get(c, obj, p, "use_sliding_window"))
      hf_use(c, p, "use_sliding_window", "unused: layer_types gives the windowed layers");
    if (hf_get(c, obj, p, "max_window_layers"))
      hf_use(c, p, "max_window_layers", "unused: layer_types gives the windowed layers");
    return;
  }
  if (qwen) {
    const cJSON *u = hf_get(c, obj, p, "use_sliding_window");
    on = cJSON_IsTrue(u);
    if (u) hf_use(c, p, "use_sliding_window", on ? "windowed layers from max_window_layers on"
                                                  : "no windowed layer: sliding_window unused");
    if (!on) {
      hf_get(c, obj, p, "sliding_window");
      hf_get(c, obj, p, "max_window_layers");
      if (hf_find_key(c, hf_mkpath(p, "sliding_window").s))
        hf_use(c, p, "sliding_window", "unused (use_sliding_window is false)");
      if (hf_find_key(c, hf_mkpath(p, "max_window_layers").s))
        hf_use(c, p, "max_window_layers", "unused (use_sliding_window is false)");
      return;
    }
    from = hf_count(c, obj, p, "max_window_layers", 28, 0, "first windowed layer");
  }
  double w = hf_count(c, obj, p, "sliding_window", 0, 1, "window of the attention layers");
  if (!on || w <= 0) return;
  if (w >= m->seq) {
    hf_use(c, p, "sliding_window", "not less than seq: full attention");
    return;
  }
  m->window = w;
  for (double i = from; i < n; i++) m->layers[(size_t)i] = m->layers[(size_t)i] == 'E' ? 'W' : 'L';
}

/* Mixtral-style routing checks: router_jitter_noise 0, no auxiliary loss in the loss. */
static void hf_router_common(hf_ctx *c, const cJSON *obj, const char *p) {
  hf_fixed(c, obj, p, "router_jitter_noise", 0, 0, "OctoPipe's router adds no noise");
  hf_flag(c, obj, p, "output_router_logits", false, false,
          "with it the loss adds the router's auxiliary load-balancing loss, which OctoPipe does "
          "not compute");
  if (hf_get(c, obj, p, "router_aux_loss_coef"))
    hf_use(c, p, "router_aux_loss_coef", "unused: output_router_logits is false, no auxiliary loss");
}

/* MoE layers from decoder_sparse_step and mlp_only_layers (Qwen MoE): 'E' or 'D' per layer. */
static void hf_sparse_layers(hf_ctx *c, const cJSON *obj, const char *p, hf_model *m, double n) {
  double step = hf_count(c, obj, p, "decoder_sparse_step", 1, 1, "every step-th layer is MoE");
  const cJSON *only = hf_get(c, obj, p, "mlp_only_layers");
  for (double i = 0; i < n; i++)
    m->layers[(size_t)i] = fmod(i + 1, step) == 0 ? 'E' : 'D';
  if (only && !cJSON_IsNull(only)) {
    if (!cJSON_IsArray(only)) {
      hf_refuse(c, p, "mlp_only_layers", "expected a list of layer indices");
      return;
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, only) {
      if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= n ||
          e->valuedouble != floor(e->valuedouble)) {
        hf_refuse(c, p, "mlp_only_layers", "every entry must be a layer index below %g", n);
        return;
      }
      m->layers[(size_t)e->valuedouble] = 'D';
    }
    hf_use(c, p, "mlp_only_layers", "these layers are dense MLPs");
  }
}

/* DeepSeek's latent attention into m (mla layers): q_lora_rank (null: none), kv_lora_rank, the
 * head widths; num_key_value_heads must be the heads (the latent gives every head its key) and
 * a head_dim, which transformers sets to qk_rope_head_dim, that. */
static void hf_deepseek_mla(hf_ctx *c, const cJSON *obj, const char *p, hf_model *m) {
  m->mla = true;
  const cJSON *qr = hf_get(c, obj, p, "q_lora_rank");
  if (qr && cJSON_IsNull(qr))
    hf_use(c, p, "q_lora_rank", "null: mla q_rank = 0 (the queries projected directly)");
  else
    m->q_rank = hf_count(c, obj, p, "q_lora_rank", 1536, 1, "mla q_rank");
  m->kv_rank = hf_count(c, obj, p, "kv_lora_rank", 512, 1, "mla kv_rank");
  m->nope_dim = hf_count(c, obj, p, "qk_nope_head_dim", 128, 1, "mla nope_dim");
  m->rope_dim = hf_count(c, obj, p, "qk_rope_head_dim", 64, 2, "mla rope_dim");
  m->v_dim = hf_count(c, obj, p, "v_head_dim", 128, 1, "mla v_dim");
  const cJSON *qk = hf_get(c, obj, p, "qk_head_dim"); /* transformers 5 writes the sum */
  if (qk && !(cJSON_IsNumber(qk) && qk->valuedouble == m->nope_dim + m->rope_dim))
    hf_refuse(c, p, "qk_head_dim", "it must be qk_nope_head_dim + qk_rope_head_dim = %g",
              m->nope_dim + m->rope_dim);
  else if (qk)
    hf_use(c, p, "qk_head_dim", "checked: nope_dim + rope_dim");
  hf_flag(c, obj, p, "rope_interleave", true, true,
          "OctoPipe's mla turns the interleaved pairs (2i, 2i + 1) of the rotary parts");
  if (m->kv_heads != m->heads)
    hf_refuse(c, p, "num_key_value_heads", "DeepSeek's latent attention gives every head its "
              "key and value: it must be num_attention_heads = %g", m->heads);
  const cJSON *hd = cJSON_GetObjectItemCaseSensitive(obj, "head_dim");
  if (hd && !cJSON_IsNull(hd) && !(cJSON_IsNumber(hd) && hd->valuedouble == m->rope_dim))
    hf_refuse(c, p, "head_dim", "transformers' DeepSeek models take it as qk_rope_head_dim = %g",
              m->rope_dim);
  m->head_dim = 0; /* an attention's parameter; mla layers have their own widths */
}

/* DeepSeek's router into m: V2 a softmax over all experts (transformers' DeepseekV2TopkRouter
 * renormalizes nothing), the plain top-k (topk_method "greedy") or the group-limited one
 * ("group_limited_greedy"); V3 sigmoid scores with the correction bias and groups (its only
 * router, "noaux_tc"), renormalized by norm_topk_prob; both scaled by routed_scaling_factor. */
static void hf_deepseek_router(hf_ctx *c, const cJSON *obj, const char *p, bool v3, hf_model *m) {
  hf_flag(c, obj, p, "output_router_logits", false, false,
          "with it the loss adds the router's auxiliary loss, which OctoPipe does not compute");
  hf_string_is(c, obj, p, "scoring_func", v3 ? "sigmoid" : "softmax", v3 ? "sigmoid" : "softmax",
               v3 ? "transformers' DeepseekV3 router scores by sigmoid"
                  : "transformers' DeepseekV2 router scores by softmax");
  const cJSON *tm = hf_get(c, obj, p, "topk_method");
  const char *method = cJSON_IsString(tm) ? tm->valuestring : v3 ? "noaux_tc" : "greedy";
  bool groups = v3 || strcmp(method, "group_limited_greedy") == 0;
  if (v3 ? strcmp(method, "noaux_tc") != 0
         : strcmp(method, "greedy") != 0 && strcmp(method, "group_limited_greedy") != 0)
    hf_refuse(c, p, "topk_method", "%s", v3 ? "transformers' DeepseekV3 router is \"noaux_tc\""
                                            : "OctoPipe imports \"greedy\" and "
                                              "\"group_limited_greedy\"");
  else if (tm)
    hf_use(c, p, "topk_method", groups ? "group-limited top-k (expert_groups, topk_groups)"
                                       : "checked: the plain top-k");
  const char *use = groups ? "expert_groups" : "unused: the plain top-k";
  double g = hf_count(c, obj, p, "n_group", v3 ? 8 : 1, 1, use);
  double tg = hf_count(c, obj, p, "topk_group", v3 ? 4 : 1, 1,
                       groups ? "topk_groups" : "unused: the plain top-k");
  if (groups && g > 1) m->egroups = g, m->tgroups = tg;
  if (v3) {
    m->sigmoid = m->score_bias = true;
    hf_renorm(c, obj, p, true, m); /* the V3 class default: true */
  } else {
    m->no_renorm = true;
    hf_flag(c, obj, p, "norm_topk_prob", false, false,
            "transformers' DeepseekV2 router does not renormalize the selected weights");
  }
  m->rscale = hf_positive(c, obj, p, "routed_scaling_factor", v3 ? 2.5 : 1, "routed_scale");
}

/* Softcap field p+name (Gemma's attn_logit_softcapping, final_logit_softcapping): its value,
 * 'dflt' when absent (the config class's default), 0 (none) when null, as transformers skips a
 * None cap. Returns 0 after an error. */
static double hf_softcap(hf_ctx *c, const cJSON *obj, const char *p, const char *name,
                         double dflt, const char *how) {
  const cJSON *v = hf_get(c, obj, p, name);
  if (v && cJSON_IsNull(v)) {
    hf_use(c, p, name, "null: no softcapping");
    return 0;
  }
  return hf_positive(c, obj, p, name, dflt, how);
}

/* Gemma's local/global layers into m->layers ('L': windowed, when m->window > 0): layer_types
 * when given (transformers 5: "sliding_attention" or "full_attention" per layer), else layer i
 * local when (i + 1) mod 'every' is not 0 (Gemma 2: every = 2, layer 0 local; Gemma 3:
 * sliding_window_pattern). */
static void hf_gemma_layers(hf_ctx *c, const cJSON *obj, const char *p, hf_model *m, double n,
                            double every) {
  const cJSON *lt = hf_get(c, obj, p, "layer_types");
  if (lt && !cJSON_IsNull(lt)) {
    if (hf_layer_types(c, lt, p, m, n) && m->window <= 0) /* no window: all layers full */
      for (char *l = m->layers; *l; l++) *l = *l == 'L' ? 'D' : *l;
    return;
  }
  for (int i = 0; i < (int)n; i++)
    if (fmod(i + 1, every) != 0 && m->window > 0) m->layers[i] = 'L';
}

/* The decoder families. */
static void hf_decoder(hf_ctx *c, const cJSON *obj, const char *p, hf_family_id f, hf_model *m,
                       double *n) {
  bool gemma = f == HF_FAM_GEMMA2 || f == HF_FAM_GEMMA3_TEXT;
  bool qwen_moe = f == HF_FAM_QWEN2_MOE || f == HF_FAM_QWEN3_MOE;
  hf_decoder_common(c, obj, p, m, n, gemma ? "hidden_activation" : "hidden_act",
                    gemma ? "gelu_pytorch_tanh" : "silu", f == HF_FAM_QWEN3_MOE ? 0 : -1);
  if (gemma && hf_find_key(c, hf_mkpath(p, "hidden_act").s)) {
    hf_get(c, obj, p, "hidden_act");
    hf_use(c, p, "hidden_act", "unused: Gemma reads hidden_activation");
  }
  if (f == HF_FAM_QWEN3_MOE) /* intermediate_size is that of the dense layers, if any */
    m->ffn = hf_count(c, obj, p, "intermediate_size", 6144, 1, "ffn (dense layers)");
  double seq = hf_count(c, obj, p, "max_position_embeddings", m->seq > 0 ? 2048 : -1, 1,
                        m->seq > 0 ? "unused: --seq was given" : "seq");
  if (m->seq <= 0) m->seq = seq;
  if (*n > 1000000)
    hf_refuse(c, p, "num_hidden_layers", "a model has at most 1000000 layers");
  if (*n <= 0 || *n > 1000000) return;
  m->layers = xcalloc((size_t)*n + 1, 1);
  memset(m->layers, 'D', (size_t)*n);
  switch (f) {
  case HF_FAM_LLAMA: break;
  case HF_FAM_MISTRAL: hf_windows(c, obj, p, m, *n, false); break;
  case HF_FAM_MIXTRAL:
    m->experts = hf_count(c, obj, p, "num_local_experts", 8, 1, "experts");
    m->top_k = hf_count(c, obj, p, "num_experts_per_tok", 2, 1, "top_k (softmax top-k, renormalised)");
    m->expert_ffn = m->ffn;
    memset(m->layers, 'E', (size_t)*n);
    hf_router_common(c, obj, p);
    hf_windows(c, obj, p, m, *n, false);
    break;
  case HF_FAM_QWEN2:
  case HF_FAM_QWEN2_MOE:
    m->qkv_bias = true; /* Qwen2's q, k and v projections have biases; no field says so */
    if (f == HF_FAM_QWEN2) {
      hf_windows(c, obj, p, m, *n, true);
      break;
    }
    __attribute__((fallthrough)); /* Qwen2-MoE: the MoE fields below */
  case HF_FAM_QWEN3_MOE:
    if (f == HF_FAM_QWEN3_MOE) m->qk_norm = true; /* Qwen3's QK-norm; no field says so */
    /* transformers 5 writes Qwen3-MoE's num_experts as num_local_experts */
    const char *ne = !hf_find_key(c, hf_mkpath(p, "num_experts").s) &&
                             hf_find_key(c, hf_mkpath(p, "num_local_experts").s)
                         ? "num_local_experts" : "num_experts";
    m->experts = hf_count(c, obj, p, ne, f == HF_FAM_QWEN2_MOE ? 60 : 128, 1, "experts");
    m->top_k = hf_count(c, obj, p, "num_experts_per_tok", f == HF_FAM_QWEN2_MOE ? 4 : 8, 1, "top_k");
    m->expert_ffn = hf_count(c, obj, p, "moe_intermediate_size", f == HF_FAM_QWEN2_MOE ? 1408 : 768,
                             1, "expert_ffn");
    hf_renorm(c, obj, p, false, m); /* both classes' default: false */
    hf_router_common(c, obj, p);
    hf_sparse_layers(c, obj, p, m, *n);
    if (f == HF_FAM_QWEN2_MOE) {
      hf_flag(c, obj, p, "qkv_bias", true, true, "Qwen2-MoE's q, k and v projections have "
              "biases (qkv_bias = true)");
      double sh = hf_count(c, obj, p, "shared_expert_intermediate_size", 5632, 1,
                           "shared_experts = this / moe_intermediate_size");
      if (m->expert_ffn > 0 && fmod(sh, m->expert_ffn) != 0)
        hf_refuse(c, p, "shared_expert_intermediate_size",
                  "OctoPipe's shared experts are experts of width expert_ffn = %g, and %g is not a "
                  "multiple of it", m->expert_ffn, sh);
      else if (m->expert_ffn > 0)
        m->shared = sh / m->expert_ffn;
      m->shared_gate = true; /* its shared_expert_gate; no field says so */
    }
    if (qwen_moe) hf_windows(c, obj, p, m, *n, true);
    break;
  case HF_FAM_QWEN3:
    m->qk_norm = true; /* Qwen3 normalizes each query and key head (QK-norm); no field says so */
    hf_windows(c, obj, p, m, *n, true);
    break;
  case HF_FAM_GEMMA2:
  case HF_FAM_GEMMA3_TEXT: {
    bool g3 = f == HF_FAM_GEMMA3_TEXT;
    m->gemma = true; /* embedding scale, (1 + w) norms, sandwich norms: no field says so */
    if (g3) m->qk_norm = true; /* Gemma 3's QK-norm; no field says so */
    m->attn_cap = hf_softcap(c, obj, p, "attn_logit_softcapping", g3 ? 0 : 50,
                             "softcap of the attention layers");
    m->logit_cap = hf_softcap(c, obj, p, "final_logit_softcapping", g3 ? 0 : 30,
                              "softcap of the lm_head");
    double hd = m->head_dim > 0 ? m->head_dim : m->heads > 0 ? m->hidden / m->heads : 0;
    double q = hf_positive(c, obj, p, "query_pre_attn_scalar", 256,
                           "score_dim (written when not head_dim)");
    if (q != hd) m->score_dim = q;
    hf_flag(c, obj, p, "use_bidirectional_attention", false, false,
            "OctoPipe's Gemma attention is causal");
    if (g3 && m->local_theta == 0) /* else rope_parameters gave it */
      m->local_theta = hf_positive(c, obj, p, "rope_local_base_freq", 1e4,
                                   "rope_theta of the local layers");
    double w = hf_count(c, obj, p, "sliding_window", 4096, 1, "window of the local layers");
    const char *pat = hf_find_key(c, hf_mkpath(p, "_sliding_window_pattern").s)
                          ? "_sliding_window_pattern" /* transformers 5 writes it so */
                          : "sliding_window_pattern";
    double every = g3 ? hf_count(c, obj, p, pat, 6, 1, "every pattern-th layer is global (unless "
                                 "layer_types)")
                      : 2;
    if (w < m->seq) m->window = w;
    if (every > 0) hf_gemma_layers(c, obj, p, m, *n, every);
    break;
  }
  case HF_FAM_DEEPSEEK_V2:
  case HF_FAM_DEEPSEEK_V3: {
    bool v3 = f == HF_FAM_DEEPSEEK_V3;
    hf_deepseek_mla(c, obj, p, m);
    m->experts = hf_count(c, obj, p, "n_routed_experts", v3 ? 256 : 160, 1, "experts");
    m->top_k = hf_count(c, obj, p, "num_experts_per_tok", v3 ? 8 : 6, 1, "top_k");
    m->expert_ffn = hf_count(c, obj, p, "moe_intermediate_size", v3 ? 2048 : 1407, 1, "expert_ffn");
    m->shared = hf_count(c, obj, p, "n_shared_experts", v3 ? 1 : 2, 0, "shared_experts");
    double dense = hf_count(c, obj, p, "first_k_dense_replace", v3 ? 3 : 0, 0,
                            "the first layers are dense MLPs");
    double freq = hf_count(c, obj, p, "moe_layer_freq", 1, 1, "checked: every layer after them is MoE");
    if (freq != 1)
      hf_refuse(c, p, "moe_layer_freq", "OctoPipe's import makes every layer after "
                                        "first_k_dense_replace MoE (moe_layer_freq = 1)");
    for (double i = 0; i < *n; i++) m->layers[(size_t)i] = i < dense ? 'D' : 'E';
    hf_deepseek_router(c, obj, p, v3, m);
    if (hf_get(c, obj, p, "aux_loss_alpha"))
      hf_use(c, p, "aux_loss_alpha", "unused: the transformers model adds no auxiliary loss");
    if (hf_get(c, obj, p, "seq_aux"))
      hf_use(c, p, "seq_aux", "unused: the transformers model adds no auxiliary loss");
    break;
  }
  case HF_FAM_NEMOTRON_H:
  case HF_FAM_LLAVA:
  case HF_FAM_COUNT: break;
  }
}

/* The pattern letter of a Nemotron-H layer type of transformers' layers_block_type (the legacy
 * names too), or 0. */
static char hf_nemotron_letter(const char *type) {
  static const struct { const char *type; char letter; } t[] = {
      {"mamba", 'M'}, {"linear_attention", 'M'}, {"attention", '*'}, {"full_attention", '*'},
      {"mlp", '-'}};
  for (size_t i = 0; i < sizeof t / sizeof *t; i++)
    if (strcmp(type, t[i].type) == 0) return t[i].letter;
  return 0;
}

/* Nemotron-H's layers into m: the hybrid pattern of Mamba-2 (M), attention (*) and MLP (-)
 * blocks, from hybrid_override_pattern (the published configs) or from layers_block_type (what
 * transformers 5 writes, without num_hidden_layers). */
static void hf_nemotron_pattern(hf_ctx *c, const cJSON *obj, hf_model *m) {
  const char *p = "";
  const cJSON *pat = hf_get(c, obj, p, "hybrid_override_pattern");
  const cJSON *types = pat ? NULL : hf_get(c, obj, p, "layers_block_type");
  double n = hf_count(c, obj, p, "num_hidden_layers", types ? 0 : -1, 1,
                      "checked: the pattern's length");
  strbuf letters = {0};
  if (types) {
    const cJSON *t;
    cJSON_ArrayForEach(t, types) {
      char l = cJSON_IsString(t) ? hf_nemotron_letter(t->valuestring) : 0;
      if (!l) {
        hf_refuse(c, p, "layers_block_type", "OctoPipe imports layers of the types mamba "
                  "(linear_attention), attention (full_attention) and mlp, not %s",
                  cJSON_IsString(t) ? t->valuestring : "a non-string");
        strbuf_free(&letters);
        return;
      }
      strbuf_putc(&letters, l);
    }
    if (!cJSON_IsArray(types) || letters.len == 0) {
      hf_refuse(c, p, "layers_block_type", "expected a list of layer types");
      strbuf_free(&letters);
      return;
    }
    if (n > 0 && (double)letters.len != n)
      hf_refuse(c, p, "layers_block_type", "its length is not num_hidden_layers = %g", n);
    hf_use(c, p, "layers_block_type", "pattern \"%s\" (M = mamba2, * = attention, - = mlp)",
           strbuf_cstr(&letters));
  } else if (!cJSON_IsString(pat) ||
             strspn(pat->valuestring, "M*-") != strlen(pat->valuestring) ||
             !pat->valuestring[0]) {
    hf_refuse(c, p, "hybrid_override_pattern",
              "OctoPipe imports patterns of M (Mamba-2), * (attention) and - (MLP)");
    return;
  } else {
    if ((double)strlen(pat->valuestring) != n)
      hf_refuse(c, p, "hybrid_override_pattern", "its length is not num_hidden_layers = %g", n);
    strbuf_puts(&letters, pat->valuestring);
    hf_use(c, p, "hybrid_override_pattern", "pattern (M = mamba2, * = attention, - = mlp)");
  }
  m->layers = xstrdup(strbuf_cstr(&letters));
  strbuf_free(&letters);
  m->hybrid = true;
}

/* Nemotron-H: the hybrid pattern of Mamba-2 (M), attention (*) and MLP (-) blocks. */
static void hf_nemotron_h(hf_ctx *c, const cJSON *obj, hf_model *m) {
  const char *p = "";
  m->hidden = hf_count(c, obj, p, "hidden_size", -1, 1, "hidden");
  hf_nemotron_pattern(c, obj, m);
  m->heads = hf_count(c, obj, p, "num_attention_heads", -1, 1, "heads");
  m->kv_heads = hf_count(c, obj, p, "num_key_value_heads", m->heads, 1, "kv_heads");
  double hd = hf_count(c, obj, p, "head_dim", 0, 1, "head_dim (written when not hidden / heads)");
  double ahd = hf_count(c, obj, p, "attention_head_dim", 0, 1,
                        hd > 0 ? "checked: head_dim" : "head_dim"); /* transformers 5: both */
  if (hd > 0 && ahd > 0 && hd != ahd)
    hf_refuse(c, p, "attention_head_dim", "it differs from head_dim = %g", hd);
  if (hd == 0) hd = ahd;
  if (hd > 0 && hd * m->heads != m->hidden) m->head_dim = hd;
  m->ffn = hf_count(c, obj, p, "intermediate_size", -1, 1, "ffn");
  m->act = hf_act(c, obj, p, "mlp_hidden_act", "relu2");
  m->gated = false;
  m->vocab = hf_count(c, obj, p, "vocab_size", -1, 1, "vocab (embedding and lm_head)");
  double seq = hf_count(c, obj, p, "max_position_embeddings", m->seq > 0 ? 4096 : -1, 1,
                        m->seq > 0 ? "unused: --seq was given" : "seq");
  if (m->seq <= 0) m->seq = seq;
  m->m_heads = hf_count(c, obj, p, "mamba_num_heads", 128, 1, "mamba2 heads");
  m->m_head_dim = hf_count(c, obj, p, "mamba_head_dim", 64, 1, "mamba2 head_dim");
  m->m_state = hf_count(c, obj, p, "ssm_state_size", 128, 1, "mamba2 state");
  m->m_groups = hf_count(c, obj, p, "n_groups", 8, 1, "mamba2 groups");
  m->m_conv = hf_count(c, obj, p, "conv_kernel", 4, 1, "mamba2 conv");
  m->m_expand = hf_count(c, obj, p, "expand", 2, 1, "mamba2 expand");
  m->m_chunk = hf_count(c, obj, p, "chunk_size", 128, 1, "mamba2 chunk");
  if (m->m_heads * m->m_head_dim != m->m_expand * m->hidden)
    hf_refuse(c, p, "mamba_num_heads", "OctoPipe's Mamba-2 needs heads x head_dim = expand x "
              "hidden (%g x %g != %g x %g)", m->m_heads, m->m_head_dim, m->m_expand, m->hidden);
  hf_string_is(c, obj, p, "mamba_hidden_act", "silu", "silu",
               "OctoPipe's Mamba-2 applies SiLU after the convolution");
  hf_flag(c, obj, p, "use_conv_bias", true, true, "OctoPipe's Mamba-2 convolution has a bias");
  hf_flag(c, obj, p, "use_bias", false, false, "OctoPipe's Mamba-2 projections have no bias");
  hf_flag(c, obj, p, "mamba_proj_bias", false, false,
          "OctoPipe's Mamba-2 projections have no bias");
  hf_flag(c, obj, p, "mlp_bias", false, false, "OctoPipe's MLP projections have no bias");
  hf_flag(c, obj, p, "attention_bias", false, false, "OctoPipe's attention projections have no bias");
  const cJSON *lim = hf_get(c, obj, p, "time_step_limit");
  const cJSON *hi = cJSON_GetArrayItem(lim, 1);
  const cJSON *big = cJSON_GetObjectItemCaseSensitive(hi, "__float__"); /* transformers 5's
                                                                            infinity */
  if (lim && !(cJSON_IsArray(lim) && cJSON_GetArraySize(lim) == 2 &&
               cJSON_IsNumber(cJSON_GetArrayItem(lim, 0)) &&
               cJSON_GetArrayItem(lim, 0)->valuedouble == 0 &&
               ((cJSON_IsNumber(hi) && isinf(hi->valuedouble)) ||
                (cJSON_IsObject(hi) && cJSON_GetArraySize(hi) == 1 && cJSON_IsString(big) &&
                 strcmp(big->valuestring, "Infinity") == 0))))
    hf_refuse(c, p, "time_step_limit", "OctoPipe's Mamba-2 does not clamp dt (limit [0, inf])");
  else if (lim)
    hf_use(c, p, "time_step_limit", "checked: dt is not clamped");
  m->eps = hf_positive(c, obj, p, "layer_norm_epsilon", c->fam->eps, "norm_eps (RMSNorm)");
  hf_fixed(c, obj, p, "attention_dropout", 0, 0, "OctoPipe has no attention dropout");
  hf_fixed(c, obj, p, "hidden_dropout", 0, 0, "OctoPipe has no dropout");
  hf_none(c, obj, p, "sliding_window", "Nemotron-H's attention sees every earlier token");
  hf_tie(c, obj, p, c->fam->tied, m);
  /* transformers 5 writes its MoE and multi-token-prediction fields into every config */
  static const char *const moe[] = {
      "moe_intermediate_size", "moe_latent_size", "moe_shared_expert_intermediate_size",
      "moe_shared_expert_overlap", "n_group", "n_routed_experts", "n_shared_experts",
      "norm_topk_prob", "num_experts_per_tok", "output_router_logits", "routed_scaling_factor",
      "topk_group", "mtp_layers_block_type"};
  for (size_t i = 0; i < sizeof moe / sizeof *moe; i++)
    if (hf_get(c, obj, p, moe[i]))
      hf_use(c, p, moe[i], "unused: no moe layer%s",
             i + 1 == sizeof moe / sizeof *moe ? " (the multi-token-prediction layers are "
                                                 "not built)" : "");
  m->no_rope = true; /* Nemotron-H's attention has no positional embedding; no field says so */
}

/* LLaVA: CLIP vision tower, projector, and the Llama text model of text_config. */
static void hf_llava(hf_ctx *c, const cJSON *obj, hf_model *m, double *n) {
  const cJSON *vc = hf_get(c, obj, "", "vision_config");
  const cJSON *tc = hf_get(c, obj, "", "text_config");
  /* transformers 4 ties LLaVA's matrices by the text model's config (the language model's own
   * tie_weights); transformers 5 by the outer field, which its LlavaConfig sets to the outer
   * OR the text model's: they agree unless the outer is true and the text model's false, which
   * is refused below; the outer must be a boolean */
  const cJSON *tie = hf_get(c, obj, "", "tie_word_embeddings");
  bool outer_tie = hf_bool_or_null(c, tie, "", "tie_word_embeddings") && cJSON_IsTrue(tie);
  if (hf_get(c, obj, "", "vocab_size"))
    hf_use(c, "", "vocab_size", "unused: the text model's vocab_size is read");
  if (cJSON_IsObject(vc)) {
    static const hf_family clip = {"clip_vision_model", 1e-5, 0, false};
    const hf_family *outer = c->fam;
    c->fam = &clip; /* the defaults of CLIPVisionConfig */
    const char *p = "vision_config.";
    const cJSON *mt = hf_get(c, vc, p, "model_type");
    if (!cJSON_IsString(mt) || strcmp(mt->valuestring, "clip_vision_model") != 0)
      hf_refuse(c, p, "model_type", "OctoPipe's import reads CLIP vision towers (clip_vision_model)");
    else
      hf_use(c, p, "model_type", "CLIP ViT: vit_embed and vit layers");
    m->vit_hidden = hf_count(c, vc, p, "hidden_size", 768, 1, "vit_embed, vit and projector widths");
    m->vit_layers = hf_count(c, vc, p, "num_hidden_layers", 12, 1, "vit layers");
    m->vit_heads = hf_count(c, vc, p, "num_attention_heads", 12, 1, "vit heads");
    m->vit_ffn = hf_count(c, vc, p, "intermediate_size", 3072, 1, "vit ffn");
    m->vit_patch = hf_count(c, vc, p, "patch_size", 32, 1, "vit_embed and vit patch");
    m->vit_image = hf_count(c, vc, p, "image_size", 224, 1, "vit_embed and vit image");
    m->vit_channels = hf_count(c, vc, p, "num_channels", 3, 1, "vit_embed channels");
    m->vit_eps = hf_positive(c, vc, p, "layer_norm_eps", 1e-5,
                             "norm_eps of the vit_embed and vit LayerNorms");
    m->vit_act = hf_act(c, vc, p, "hidden_act", "quick_gelu");
    hf_fixed(c, vc, p, "attention_dropout", 0, 0, "OctoPipe has no attention dropout");
    hf_fixed(c, vc, p, "dropout", 0, 0, "OctoPipe has no dropout");
    if (m->vit_hidden > 0 && m->vit_heads > 0 && fmod(m->vit_hidden, m->vit_heads) != 0)
      hf_refuse(c, p, "num_attention_heads", "it must divide hidden_size %.0f (CLIP's head "
                "width is hidden_size / num_attention_heads)", m->vit_hidden);
    if (m->vit_patch > 0 && m->vit_image > 0 && fmod(m->vit_image, m->vit_patch) != 0)
      hf_refuse(c, p, "image_size", "OctoPipe's vit_embed needs patch_size %.0f to divide it",
                m->vit_patch);
    if (hf_get(c, vc, p, "projection_dim"))
      hf_use(c, p, "projection_dim", "unused: CLIP's contrastive projection is not in LLaVA");
    if (hf_get(c, vc, p, "vocab_size")) hf_use(c, p, "vocab_size", "unused by a vision tower");
    if (hf_get(c, vc, p, "initializer_factor"))
      hf_use(c, p, "initializer_factor", "unused: initialization only");
    c->fam = outer;
  } else {
    hf_refuse(c, "", "vision_config", "expected the vision tower's config (an object)");
  }
  m->proj_act = hf_act(c, obj, "", "projector_hidden_act", "gelu");
  hf_flag(c, obj, "", "multimodal_projector_bias", true, true,
          "OctoPipe's projector's linear layers have biases");
  /* vision_feature_layer: the index of the encoder's hidden states LLaVA projects (0: the
   * embeddings, i: the output of layer i; negative from the end, -1 the last layer's); the
   * layers after it are held but not run */
  const cJSON *vl = hf_get(c, obj, "", "vision_feature_layer");
  double feat = -2, L = m->vit_layers;
  if (vl && !cJSON_IsNull(vl)) {
    if (!cJSON_IsNumber(vl) || vl->valuedouble != floor(vl->valuedouble)) {
      hf_refuse(c, "", "vision_feature_layer", "OctoPipe projects one layer's hidden states (a "
                "whole number; a list of layers concatenated is not supported)");
      feat = NAN;
    } else {
      feat = vl->valuedouble;
    }
  }
  double idx = feat < 0 ? L + 1 + feat : feat; /* into hidden_states[0 .. L] */
  if (!isnan(feat) && L > 0 && !(idx >= 0 && idx <= L)) {
    hf_refuse(c, "", "vision_feature_layer", "the vision tower's hidden states are 0 .. %.0f "
              "(-%.0f .. -1 from the end)", L, L + 1);
  } else if (!isnan(feat) && L > 0) {
    m->vit_unused = L - idx;
    if (vl)
      hf_use(c, "", "vision_feature_layer", "the output of vit layer %.0f is projected; the "
             "%.0f after it 'unused = true'", idx, m->vit_unused);
  }
  const cJSON *vs = hf_get(c, obj, "", "vision_feature_select_strategy");
  const char *strat = vs && cJSON_IsString(vs) ? vs->valuestring : vs && !cJSON_IsNull(vs) ? "" : "default";
  if (strcmp(strat, "default") == 0) {
    if (vs) hf_use(c, "", "vision_feature_select_strategy", "the class token is dropped (the "
                   "projector's drop_class)");
  } else if (strcmp(strat, "full") == 0) {
    m->keep_class = true;
    hf_use(c, "", "vision_feature_select_strategy", "every token is projected: drop_class = false");
  } else {
    hf_refuse(c, "", "vision_feature_select_strategy", "OctoPipe's projector takes \"default\" "
              "(the class token dropped) or \"full\"");
  }
  static const char *const image_token[] = {"image_token_index", "image_token_id"};
  for (int i = 0; i < 2; i++)
    if (hf_get(c, obj, "", image_token[i]))
      hf_use(c, "", image_token[i], "the image tokens: the projected features take the first "
             "positions of each sequence, which have no loss (docs/import.md)");
  if (!cJSON_IsObject(tc)) {
    hf_refuse(c, "", "text_config", "expected the language model's config (an object)");
    return;
  }
  const char *p = "text_config.";
  const cJSON *mt = hf_get(c, tc, p, "model_type");
  if (!cJSON_IsString(mt) || strcmp(mt->valuestring, "llama") != 0) {
    hf_refuse(c, p, "model_type", "OctoPipe's import reads LLaVA with a llama text model");
    return;
  }
  hf_use(c, p, "model_type", "the text model (llama)");
  const hf_family *outer = c->fam;
  c->fam = &hf_families[HF_FAM_LLAMA];
  /* transformers fills an absent text_config field from LlamaConfig's defaults */
  m->hidden = hf_count(c, tc, p, "hidden_size", 4096, 1, "hidden");
  *n = hf_count(c, tc, p, "num_hidden_layers", 32, 1, "decoder layers");
  bool seq_flag = m->seq > 0; /* --seq was given */
  m->heads = hf_count(c, tc, p, "num_attention_heads", 32, 1, "heads");
  m->kv_heads = hf_count(c, tc, p, "num_key_value_heads", m->heads, 1, "kv_heads");
  double hd = hf_count(c, tc, p, "head_dim", 0, 1, "head_dim (written when not hidden / heads)");
  if (hd > 0 && m->heads > 0 && hd * m->heads != m->hidden) m->head_dim = hd;
  m->ffn = hf_count(c, tc, p, "intermediate_size", 11008, 1, "ffn");
  m->vocab = hf_count(c, tc, p, "vocab_size", 32000, 1, "vocab");
  double seq = hf_count(c, tc, p, "max_position_embeddings", 2048, 1,
                        m->seq > 0 ? "unused: --seq was given" : "seq");
  if (m->seq <= 0) m->seq = seq;
  m->act = hf_act(c, tc, p, "hidden_act", "silu");
  m->gated = true;
  m->eps = hf_positive(c, tc, p, "rms_norm_eps", c->fam->eps, "norm_eps");
  hf_rope(c, tc, p, m);
  hf_flag(c, tc, p, "attention_bias", false, false, "OctoPipe's attention projections have no bias");
  hf_flag(c, tc, p, "mlp_bias", false, false, "OctoPipe's MLP projections have no bias");
  hf_fixed(c, tc, p, "attention_dropout", 0, 0, "OctoPipe has no attention dropout");
  hf_tie(c, tc, p, c->fam->tied, m); /* LlamaConfig's default: false */
  hf_pad(c, tc, p, m);
  if (outer_tie && !m->tied)
    hf_refuse(c, "", "tie_word_embeddings", "transformers 5 ties the text model's matrices by "
              "it, transformers 4 by text_config.tie_word_embeddings, which is not true: give "
              "both the same value");
  else if (tie && !cJSON_IsNull(tie) && cJSON_IsBool(tie))
    hf_use(c, "", "tie_word_embeddings", "checked: transformers 5 ties by it or "
           "text_config.tie_word_embeddings, 4 by the latter");
  const cJSON *arch = hf_get(c, tc, p, "architectures");
  if (arch) hf_use(c, p, "architectures", "the text model's class");
  c->fam = outer;
  double side = m->vit_patch > 0 ? floor(m->vit_image / m->vit_patch) : 0;
  double image_tokens = side * side + (m->keep_class ? 1 : 0);
  if (m->seq > 0 && image_tokens >= m->seq && seq_flag) {
    c->errors++;
    diag_error(c->d, hf_loc(c, NULL), "--seq = %.0f: the %.0f image tokens take the first "
               "positions of each sequence, which needs more", m->seq, image_tokens);
  } else if (m->seq > 0 && image_tokens >= m->seq) {
    hf_refuse(c, p, "max_position_embeddings", "the %.0f image tokens take the first positions "
              "of each sequence: it needs more", image_tokens);
  }
  if (*n > 0 && *n <= 1000000) {
    m->layers = xcalloc((size_t)*n + 1, 1);
    memset(m->layers, 'D', (size_t)*n);
  }
}

/* ---- Writing the spec ---- */

/* Append "NAME = VALUE" (a whole number) with a leading blank. */
static void hf_dim(strbuf *s, const char *name, double v) {
  strbuf_printf(s, "  %s = %.0f", name, v);
}

/* Append "SEP NAME = VALUE" for a real v that is not the language's default 'dflt' (v > 0), in
 * the shortest text that reads back exactly. */
static void hf_real(strbuf *s, const char *sep, const char *name, double v, double dflt) {
  char buf[40];
  if (v <= 0 || v == dflt) return;
  fmt_shortest_scaled(buf, v, 1.0);
  strbuf_printf(s, "%s%s = %s", sep, name, buf);
}

/* Append the line "INDENT TEXT { ITEMS }" (without the braces when 'items' is empty; each item is
 * written with a leading ", ") and free items. */
static void hf_line(strbuf *s, const char *indent, const char *text, strbuf *items) {
  if (items->len) strbuf_printf(s, "%s%s { %s }\n", indent, text, strbuf_cstr(items) + 2);
  else strbuf_printf(s, "%s%s\n", indent, text);
  strbuf_free(items);
}

/* The items of decoder layer letter 'k' ('D', 'E', 'L', 'W'): attention and feed-forward. */
static void hf_decoder_items(strbuf *s, const hf_model *m, char k, const char *indent) {
  strbuf a = {0}; /* the attention's parameters, each with a leading ", " */
  if (m->mla) {
    hf_real(&a, ", ", "q_rank", m->q_rank, 0);
    strbuf_printf(&a, ", kv_rank = %.0f, nope_dim = %.0f, rope_dim = %.0f, v_dim = %.0f",
                  m->kv_rank, m->nope_dim, m->rope_dim, m->v_dim);
    if (m->yarn_factor > 0) {
      hf_real(&a, ", ", "yarn_factor", m->yarn_factor, 0);
      strbuf_printf(&a, ", yarn_original_seq = %.0f", m->yarn_orig);
      hf_real(&a, ", ", "yarn_beta_fast", m->yarn_fast, 0);
      hf_real(&a, ", ", "yarn_beta_slow", m->yarn_slow, 0);
      hf_real(&a, ", ", "yarn_mscale", m->yarn_ms, 0);
      hf_real(&a, ", ", "yarn_mscale_all_dim", m->yarn_msa, 0);
    }
  } else if (k == 'L' || k == 'W') {
    strbuf_printf(&a, ", window = %.0f", m->window);
    if (m->local_theta != m->theta) hf_real(&a, ", ", "rope_theta", m->local_theta, 0);
    if (m->local_theta > 0 && m->rope_factor > 0 && m->rope_factor != 1) /* Gemma 3: scaled */
      strbuf_puts(&a, ", rope_factor = 1"); /* are the global layers only */
    if (m->local_theta > 0 && m->rope_linear > 0 && m->rope_linear != 1)
      strbuf_puts(&a, ", rope_linear = 1");
  }
  hf_real(&a, ", ", "score_dim", m->score_dim, 0);
  hf_real(&a, ", ", "softcap", m->attn_cap, 0);
  hf_line(s, indent, m->mla ? "layer attn : mla" : "layer attn : attention", &a);
  strbuf_printf(s, "%slayer %s\n", indent, k == 'E' || k == 'W' ? "moe : moe" : "mlp : mlp");
}

/* Append LLaVA's vision tower and projector to s: the vit_embed, the vit layers LLaVA runs, the
 * ones after vision_feature_layer with 'unused = true', the projector (which holds CLIP's
 * post_layernorm: 'vision_norm = true'). */
static void hf_write_vision(strbuf *s, const hf_model *m) {
  strbuf v = {0}; /* what the vit_embed and the vit layers share */
  strbuf_printf(&v, "hidden = %.0f, patch = %.0f, image = %.0f", m->vit_hidden, m->vit_patch,
                m->vit_image);
  hf_real(&v, ", ", "norm_eps", m->vit_eps, HF_OCTO_EPS);
  strbuf_printf(s, "  layer patches : vit_embed { %s", strbuf_cstr(&v));
  if (m->vit_channels != 3) strbuf_printf(s, ", channels = %.0f", m->vit_channels);
  strbuf_puts(s, " }\n");
  strbuf_printf(&v, ", heads = %.0f, ffn = %.0f", m->vit_heads, m->vit_ffn);
  if (strcmp(m->vit_act, "gelu") != 0) strbuf_printf(&v, ", act = %s", m->vit_act);
  double used = m->vit_layers - m->vit_unused;
  if (used > 0)
    strbuf_printf(s, "  repeat %.0f {\n    layer vision : vit { %s }\n  }\n", used,
                  strbuf_cstr(&v));
  if (m->vit_unused > 0)
    strbuf_printf(s, "  repeat %.0f {\n    layer vision_unused : vit { %s, unused = true }\n  }\n",
                  m->vit_unused, strbuf_cstr(&v));
  strbuf_free(&v);
  strbuf_printf(s, "  layer projector : projector { in_hidden = %.0f, tokens = %.0f",
                m->vit_hidden, floor(m->vit_image / m->vit_patch) * floor(m->vit_image / m->vit_patch) + 1);
  if (strcmp(m->proj_act, "gelu") != 0) strbuf_printf(s, ", act = %s", m->proj_act);
  if (m->keep_class) strbuf_puts(s, ", drop_class = false");
  strbuf_puts(s, ", vision_norm = true }\n");
}

/* Write the spec of m named 'name' to s (header lines already there). */
static void hf_write_model(strbuf *s, const hf_model *m, const char *name, double n) {
  static const char letters[] = "DELW";
  static const char *const blocks[] = {"dense", "moe", "local", "local_moe"};
  bool used[4] = {false};
  int kinds = 0;
  if (!m->hybrid)
    for (int k = 0; k < 4; k++) {
      used[k] = strchr(m->layers, letters[k]) != NULL;
      kinds += used[k];
    }
  if (kinds > 1)
    for (int k = 0; k < 4; k++)
      if (used[k]) {
        strbuf_printf(s, "block %s_%s {\n", name, blocks[k]);
        hf_decoder_items(s, m, letters[k], "  ");
        strbuf_puts(s, "}\n\n");
      }
  strbuf_printf(s, "model %s {\n", name);
  hf_dim(s, "hidden", m->hidden);
  hf_dim(s, "heads", m->heads);
  hf_dim(s, "kv_heads", m->kv_heads);
  if (m->head_dim > 0) hf_dim(s, "head_dim", m->head_dim);
  hf_dim(s, "vocab", m->vocab);
  hf_dim(s, "seq", m->seq);
  if (m->ffn > 0) hf_dim(s, "ffn", m->ffn);
  if (strcmp(m->act, "silu") != 0) strbuf_printf(s, "  act = %s", m->act);
  if (!m->gated) strbuf_puts(s, "  gated = false");
  if (m->no_rope)
    strbuf_puts(s, "  rope = false");
  else
    hf_real(s, "  ", "rope_theta", m->theta, HF_OCTO_THETA);
  if (m->rope_factor > 0 && m->rope_factor != 1) {
    hf_real(s, "\n  ", "rope_factor", m->rope_factor, 0);
    hf_real(s, "  ", "rope_low_freq_factor", m->rope_low, 0);
    hf_real(s, "  ", "rope_high_freq_factor", m->rope_high, 0);
    hf_dim(s, "rope_original_seq", m->rope_orig);
  }
  hf_real(s, "  ", "rope_linear", m->rope_linear, 1);
  hf_real(s, "  ", "norm_eps", m->eps, HF_OCTO_EPS);
  if (m->qkv_bias) strbuf_puts(s, "  qkv_bias = true");
  if (m->qk_norm) strbuf_puts(s, "  qk_norm = true");
  if (m->gemma) strbuf_puts(s, "  norm_plus_one = true  post_norm = true");
  strbuf_putc(s, '\n');
  if (m->experts > 0) {
    hf_dim(s, "experts", m->experts);
    hf_dim(s, "top_k", m->top_k);
    hf_dim(s, "expert_ffn", m->expert_ffn);
    if (m->shared > 0) hf_dim(s, "shared_experts", m->shared);
    if (m->shared_gate) strbuf_puts(s, "  shared_gate = true");
    if (m->no_renorm) strbuf_puts(s, "  renorm = false");
    if (m->sigmoid) strbuf_puts(s, "  sigmoid = true");
    if (m->score_bias) strbuf_puts(s, "  score_bias = true");
    if (m->egroups > 1)
      strbuf_printf(s, "  expert_groups = %.0f  topk_groups = %.0f", m->egroups, m->tgroups);
    if (m->rscale > 0) hf_real(s, "  ", "routed_scale", m->rscale, 1);
    strbuf_putc(s, '\n');
  }
  if (m->vit_layers > 0) hf_write_vision(s, m);
  strbuf e = {0}; /* the embedding's parameters, each with a leading ", " */
  if (m->gemma) strbuf_puts(&e, ", scaled = true");
  if (m->padded) strbuf_printf(&e, ", pad_id = %.0f", m->pad_id);
  hf_line(s, "  ", "layer embed : embedding", &e);
  if (m->hybrid) {
    strbuf_printf(s, "  pattern \"%s\" {\n", m->layers);
    strbuf_printf(s, "    M = mamba2 { state = %.0f, heads = %.0f, head_dim = %.0f, groups = %.0f, "
                  "conv = %.0f, expand = %.0f, chunk = %.0f }\n", m->m_state, m->m_heads,
                  m->m_head_dim, m->m_groups, m->m_conv, m->m_expand, fmin(m->m_chunk, m->seq));
    strbuf_puts(s, "    * = attention\n    - = mlp\n  }\n");
  } else if (kinds == 1) {
    strbuf_printf(s, "  repeat %.0f {\n", n);
    hf_decoder_items(s, m, m->layers[0], "    ");
    strbuf_puts(s, "  }\n");
  } else {
    strbuf_printf(s, "  pattern \"%s\" {\n", m->layers);
    for (int k = 0; k < 4; k++)
      if (used[k]) strbuf_printf(s, "    %c = %s_%s\n", letters[k], name, blocks[k]);
    strbuf_puts(s, "  }\n");
  }
  strbuf head = {0}; /* the head's parameters, each with a leading ", " */
  if (m->tied) strbuf_puts(&head, ", tied = true");
  hf_real(&head, ", ", "softcap", m->logit_cap, 0);
  hf_line(s, "  ", "layer head : lm_head", &head);
  strbuf_puts(s, "}\n");
}

/* Keywords of the language, which a model name may not be. */
static bool hf_keyword(const char *s) {
  static const char *const kw[] = {"model", "block", "device", "cluster", "train", "import",
                                   "profile", "layer", "repeat", "use", "pattern", "link",
                                   "true", "false"};
  for (size_t i = 0; i < sizeof kw / sizeof *kw; i++)
    if (strcmp(s, kw[i]) == 0) return true;
  return false;
}

/* A model name from the config's path: its folder's name for "DIR/config.json", else the file
 * name without ".json"; lower case, other characters as '_'. */
static char *hf_default_name(const char *path) {
  const char *end = path + strlen(path), *base;
  const char *slash = strrchr(path, '/');
  base = slash ? slash + 1 : path;
  if (strcmp(base, "config.json") == 0 && slash) {
    end = slash;
    while (end > path && end[-1] == '/') end--;
    base = end;
    while (base > path && base[-1] != '/') base--;
  } else if (end - base > 5 && strcmp(end - 5, ".json") == 0) {
    end -= 5;
  }
  strbuf sb = {0};
  if (base == end || isdigit((unsigned char)*base)) strbuf_puts(&sb, "m_");
  for (const char *q = base; q < end; q++)
    strbuf_putc(&sb, isalnum((unsigned char)*q) ? (char)tolower((unsigned char)*q) : '_');
  if (hf_keyword(strbuf_cstr(&sb))) strbuf_puts(&sb, "_model");
  char *r = xstrdup(strbuf_cstr(&sb));
  strbuf_free(&sb);
  return r;
}

/* Whether s is an identifier of the language that is not a keyword. */
static bool hf_ident(const char *s) {
  if (!s[0] || !(isalpha((unsigned char)s[0]) || s[0] == '_')) return false;
  for (const char *q = s; *q; q++)
    if (!(isalnum((unsigned char)*q) || *q == '_')) return false;
  return !hf_keyword(s);
}

/* List the keys of object 'obj' (under prefix p) that were not read: ignored.def's are listed as
 * ignored, any other is an error. */
static void hf_leftovers(hf_ctx *c, const cJSON *obj, const char *p) {
  const cJSON *it;
  cJSON_ArrayForEach(it, obj) {
    hf_key *k = hf_find_key(c, hf_mkpath(p, it->string ? it->string : "").s);
    if (!k || k->used) continue;
    k->used = true;
    const char *why = NULL;
    for (size_t i = 0; i < sizeof hf_ignored_fields / sizeof *hf_ignored_fields; i++)
      if (strcmp(it->string, hf_ignored_fields[i].field) == 0) why = hf_ignored_fields[i].why;
    char buf[80];
    if (why) {
      strbuf line = {0};
      strbuf_printf(&line, "%s = %s", k->path, hf_written(c, k->path, buf));
      strbuf_printf(&c->ignored, "#   %-40s %s\n", strbuf_cstr(&line), why);
      strbuf_free(&line);
    } else {
      c->errors++;
      diag_error(c->d, hf_loc_at(c, k->off, k->len),
                 "unknown field '%s' of a %s config: OctoPipe does not know whether it changes "
                 "the model (issue 27)", k->path, c->fam->type);
    }
  }
}

/* Check 'architectures' (p: prefix): a causal LM (or LLaVA's conditional generation). */
static void hf_architectures(hf_ctx *c, const cJSON *obj, bool llava) {
  const cJSON *a = hf_get(c, obj, "", "architectures");
  if (!a || cJSON_IsNull(a)) return;
  const char *want = llava ? "ForConditionalGeneration" : "ForCausalLM";
  bool ok = cJSON_IsArray(a) && cJSON_GetArraySize(a) == 1;
  if (ok) {
    const cJSON *s = cJSON_GetArrayItem(a, 0);
    size_t n = cJSON_IsString(s) ? strlen(s->valuestring) : 0;
    ok = n >= strlen(want) && strcmp(s->valuestring + n - strlen(want), want) == 0;
  }
  if (!ok)
    hf_refuse(c, "", "architectures",
              "OctoPipe trains a language model with its next-token loss (one class named "
              "...%s)", want);
  else
    hf_use(c, "", "architectures", "checked: a language model with its loss (lm_head)");
}

int hf_import_source(diag_engine *d, uint32_t src, const hf_options *o, strbuf *spec) {
  const diag_source *s = diag_get_source(d, src);
  hf_ctx c = {.d = d, .src = src, .text = s->text, .len = s->len};
  cJSON *root = NULL;
  hf_model m = {0};
  double n = 0;
  const char *end = NULL;
  if (memchr(c.text, 0, c.len)) {
    size_t at = (size_t)((const char *)memchr(c.text, 0, c.len) - c.text);
    diag_error(d, hf_loc_at(&c, at, 1), "invalid JSON: NUL byte at byte offset %zu", at);
    c.errors++;
    goto out;
  }
  root = cJSON_ParseWithLengthOpts(c.text, c.len + 1, &end, true); /* with its NUL */
  if (!root) {
    size_t at = end && end >= c.text && end <= c.text + c.len ? (size_t)(end - c.text) : 0;
    if (!end) end = cJSON_GetErrorPtr();
    if (end && end >= c.text && end <= c.text + c.len) at = (size_t)(end - c.text);
    diag_error(d, hf_loc_at(&c, at, 1), "invalid JSON at byte offset %zu", at);
    c.errors++;
    goto out;
  }
  if (!cJSON_IsObject(root)) {
    diag_error(d, hf_loc_at(&c, hf_ws(&c, 0), 1), "a config.json holds one JSON object");
    c.errors++;
    goto out;
  }
  hf_scan(&c, 0, "", 0);
  if (c.errors) goto out;
  const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
  hf_key *mtk = hf_find_key(&c, "model_type");
  if (mtk) mtk->used = true;
  int fam = -1;
  for (int i = 0; i < HF_FAM_COUNT && cJSON_IsString(mt); i++)
    if (strcmp(mt->valuestring, hf_families[i].type) == 0) fam = i;
  if (fam < 0) {
    char buf[80];
    strbuf list = {0};
    for (int i = 0; i < HF_FAM_COUNT; i++) strbuf_printf(&list, "%s%s", i ? ", " : "", hf_families[i].type);
    diag_error(d, hf_loc(&c, mtk ? "model_type" : NULL), "model_type%s%s is not a family OctoPipe "
               "imports (%s)", mtk ? " = " : " is missing: it", mtk ? hf_written(&c, "model_type", buf) : "",
               strbuf_cstr(&list));
    strbuf_free(&list);
    c.errors++;
    goto out;
  }
  c.fam = &hf_families[fam];
  m.seq = o->seq;
  hf_architectures(&c, root, fam == HF_FAM_LLAVA);
  if (fam == HF_FAM_NEMOTRON_H) {
    hf_nemotron_h(&c, root, &m);
    n = m.layers ? (double)strlen(m.layers) : 0;
  } else if (fam == HF_FAM_LLAVA) {
    hf_llava(&c, root, &m, &n);
  } else {
    hf_decoder(&c, root, "", (hf_family_id)fam, &m, &n);
  }
  hf_leftovers(&c, root, "");
  const cJSON *sub;
  if (fam == HF_FAM_LLAVA && cJSON_IsObject(sub = cJSON_GetObjectItemCaseSensitive(root, "text_config")))
    hf_leftovers(&c, sub, "text_config.");
  if (fam == HF_FAM_LLAVA && cJSON_IsObject(sub = cJSON_GetObjectItemCaseSensitive(root, "vision_config")))
    hf_leftovers(&c, sub, "vision_config.");
  if (o->name && !hf_ident(o->name)) {
    diag_error(d, diag_mkloc(0, 0, 0, 0), "--name '%s' is not a model name (letters, digits and "
               "'_', not starting with a digit, not a keyword)", o->name);
    c.errors++;
  }
  if (!c.errors && (!m.layers || !m.act)) { /* each handler refuses what leaves these unset */
    diag_error(d, hf_loc(&c, NULL), "no layers could be made of this config");
    c.errors++;
  }
  if (c.errors) goto out;
  char *name = o->name ? xstrdup(o->name) : hf_default_name(s->name);
  char buf[80];
  strbuf_printf(spec, "# %s: imported from the Hugging Face config %s by octo-import (OctoPipe %s)\n",
                name, s->name, OCTO_VERSION);
  strbuf_printf(spec, "# model_type = \"%s\", architectures = %s\n", c.fam->type,
                hf_find_key(&c, "architectures") ? hf_written(&c, "architectures", buf) : "(absent)");
  strbuf_puts(spec, "#\n# Fields read, and how each was used:\n");
  strbuf_append(spec, c.read.data ? c.read.data : "", c.read.len);
  if (c.ignored.len) {
    strbuf_puts(spec, "# Fields ignored (they do not change what is trained):\n");
    strbuf_append(spec, c.ignored.data, c.ignored.len);
  }
  if (o->seq > 0) strbuf_printf(spec, "# seq = %.0f: given with --seq\n", o->seq);
  strbuf_puts(spec, "# Norms and rotary embeddings are folded into the layers (docs/runtime.md).\n\n");
  if (o->with_import) {
    strbuf_puts(spec, "# The devices, clusters and train block:\nimport ");
    strbuf_json_str(spec, o->with_import);
    strbuf_puts(spec, "\n\n");
  }
  hf_write_model(spec, &m, name, n);
  free(name);
out:
  cJSON_Delete(root);
  for (int i = 0; i < c.nkeys; i++) free(c.keys[i].path);
  free(c.keys);
  free(m.layers);
  strbuf_free(&c.read);
  strbuf_free(&c.ignored);
  return c.errors ? 1 : 0;
}

char *hf_config_path(const char *path) {
  struct stat st;
  if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
    strbuf sb = {0};
    size_t n = strlen(path);
    strbuf_printf(&sb, "%s%sconfig.json", path, n && path[n - 1] == '/' ? "" : "/");
    char *r = xstrdup(strbuf_cstr(&sb));
    strbuf_free(&sb);
    return r;
  }
  return xstrdup(path);
}

int hf_import(diag_engine *d, const char *path, const hf_options *o, strbuf *spec) {
  char *file = hf_config_path(path);
  uint32_t src = diag_load_file(d, file, diag_mkloc(0, 0, 0, 0));
  free(file);
  return src ? hf_import_source(d, src, o, spec) : 1;
}

uint32_t hf_load(diag_engine *d, const char *path, const hf_options *o, const char *spec_name) {
  strbuf spec = {0}, name = {0};
  char *file = hf_config_path(path);
  uint32_t src = 0;
  if (spec_name) strbuf_puts(&name, spec_name);
  else strbuf_printf(&name, "%s.octo", file);
  hf_options oo = *o;
  char *with = NULL;
  if (o->with) {
    strbuf why = {0};
    oo.with_import = with = hf_with_path(o->with, strbuf_cstr(&name), &why);
    if (!with) diag_error(d, diag_mkloc(0, 0, 0, 0), "%s", strbuf_cstr(&why));
    strbuf_free(&why);
  }
  if ((!o->with || with) && hf_import(d, path, &oo, &spec) == 0) {
    src = diag_add_source(d, strbuf_cstr(&name), strbuf_cstr(&spec), spec.len, 0);
    fe_options fo = {false, false};
    ir_module *m = fe_compile(d, src, &fo);
    const char *want = strstr(strbuf_cstr(&spec), "\nmodel ") + 7;
    size_t wn = strcspn(want, " ");
    if (!m) {
      src = 0;
    } else if (strlen(m->name) != wn || strncmp(m->name, want, wn) != 0) {
      diag_error(d, diag_mkloc(0, 0, 0, 0), "the train block of the --with spec trains model '%s', "
                 "not the imported model '%.*s': give a spec of devices, clusters and a train "
                 "block without a model of its own", m->name, (int)wn, want);
      src = 0;
    }
    ir_module_free(m);
  }
  free(file);
  free(with);
  strbuf_free(&name);
  strbuf_free(&spec);
  return src;
}

/* Directory part of path ("." for a bare name), malloc'ed. */
static char *hf_dirname(const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash) return xstrdup(".");
  if (slash == path) return xstrdup("/");
  return xstrndup(path, (size_t)(slash - path));
}

char *hf_with_path(const char *with, const char *out, strbuf *why) {
  char *target = realpath(with, NULL);
  if (!target) {
    strbuf_printf(why, "--with '%s': %s", with, strerror(errno));
    return NULL;
  }
  char *odir = hf_dirname(out && strcmp(out, "-") != 0 ? out : "./x");
  char *from = realpath(odir, NULL);
  free(odir);
  if (!from) return target;
  /* the directories both paths start with, then one ".." per directory of 'from' left */
  size_t common = 0; /* length of the common prefix that ends at a directory boundary */
  for (size_t i = 0;; i++) {
    bool fend = from[i] == 0 || from[i] == '/', tend = target[i] == '/';
    if (fend && tend) common = i;
    if (!from[i] || !target[i] || from[i] != target[i]) break;
  }
  strbuf sb = {0};
  for (const char *q = from + common; *q; q++)
    if (*q == '/' && q[1]) strbuf_puts(&sb, "../");
  strbuf_puts(&sb, target + common + 1);
  free(from);
  free(target);
  char *r = xstrdup(strbuf_cstr(&sb));
  strbuf_free(&sb);
  return r;
}
