/* checkpoint.c -- weights and checkpoints in safetensors (runtime.h "Checkpoints";
 * docs/checkpoints.md): the names and layouts of a model's tensors (Hugging Face's for a
 * Llama-style model, Nemotron-H and LLaVA, ckpt_names.def; the runtime's own for any other),
 * --init's check and load, and the checkpoint a run saves (--save) and continues from
 * (--resume): one step
 * directory of weight shards and Adam-moment shards per rank, their indexes and a manifest with
 * every file's CRC-32, made under a temporary name and renamed whole. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cjson/cJSON.h>

#include "kernels.h"
#include "runtime.h"
#include "safetensors.h"

/* How a tensor of the runtime is stored in a file (ckpt_names.def LAYOUT). */
enum { CK_AS_IS, CK_T, CK_EXPERT_T, CK_CAT_IN_T, CK_CAT_OUT_T, CK_ROW, CK_CONV1D, CK_CONV2D };
/* Which naming a row has (ckpt_names.def EXPERTS): a Llama-style model's with any naming of its
 * moe layers (ANY), with one of them (the values of rt_run_opts.ckpt_experts, or DeepSeek's),
 * Nemotron-H's or LLaVA's; the model's structure chooses DeepSeek's, Nemotron-H's and LLaVA's
 * (ck_names_of). */
enum {
  CK_ANY = -1,
  CK_MIXTRAL = RT_CKPT_MIXTRAL,
  CK_QWEN_MOE = RT_CKPT_QWEN_MOE,
  CK_DEEPSEEK,
  CK_NEMOTRON_H,
  CK_LLAVA
};

/* One row of ckpt_names.def. */
typedef struct ck_row {
  be_kind kind;      /* the layer kind */
  const char *param; /* the kernel's tensor name */
  const char *fmt;   /* the file's name: block, then expert */
  int layout;        /* CK_AS_IS, CK_T, CK_EXPERT_T, CK_CAT_IN_T, CK_CAT_OUT_T, CK_ROW,
                        CK_CONV1D or CK_CONV2D */
  int experts;       /* CK_ANY, CK_MIXTRAL, CK_QWEN_MOE, CK_DEEPSEEK, CK_NEMOTRON_H or
                        CK_LLAVA */
} ck_row;

static const ck_row ck_rows[] = {
#define CKPT_HF(KIND, PARAM, NAME, LAYOUT, EXPERTS) \
  {BE_KIND_##KIND, PARAM, NAME, CK_##LAYOUT, CK_##EXPERTS},
#include "ckpt_names.def"
#undef CKPT_HF
};

/* The generations of LLaVA's names (ckpt_renames.def), CK_GEN_SAVED first. */
enum {
#define CKPT_GEN(ID, WHAT) CK_GEN_##ID,
#define CKPT_RENAME(ID, FROM, TO)
#include "ckpt_renames.def"
#undef CKPT_GEN
#undef CKPT_RENAME
  CK_NGEN
};

/* What each generation is, for the messages. */
static const char *const ck_gen_what[CK_NGEN] = {
#define CKPT_GEN(ID, WHAT) WHAT,
#define CKPT_RENAME(ID, FROM, TO)
#include "ckpt_renames.def"
#undef CKPT_GEN
#undef CKPT_RENAME
};

/* One prefix change of a generation (ckpt_renames.def). */
typedef struct ck_rename {
  int gen;          /* CK_GEN_* */
  const char *from; /* the first generation's prefix */
  const char *to;   /* this generation's */
} ck_rename;

static const ck_rename ck_renames[] = {
#define CKPT_GEN(ID, WHAT)
#define CKPT_RENAME(ID, FROM, TO) {CK_GEN_##ID, FROM, TO},
#include "ckpt_renames.def"
#undef CKPT_GEN
#undef CKPT_RENAME
};

/* name (the first generation's, at most cap - 1 bytes) as generation gen names it, in place:
 * the first prefix change of gen that applies. */
static void ck_rename_to(char *name, size_t cap, int gen) {
  for (size_t i = 0; i < sizeof ck_renames / sizeof *ck_renames; i++) {
    const ck_rename *r = &ck_renames[i];
    size_t nf = strlen(r->from);
    if (r->gen != gen || strncmp(name, r->from, nf) != 0) continue;
    char tmp[256];
    int n = snprintf(tmp, sizeof tmp, "%s%s", r->to, name + nf);
    if (n > 0 && (size_t)n < cap) memcpy(name, tmp, (size_t)n + 1); /* the rows' names fit */
    return;
  }
}

/* One tensor of a file: a part of one parameter tensor of one layer (the whole tensor, or one
 * expert's matrix). */
typedef struct ck_part {
  char name[160];   /* its name in the file */
  int layer, pt;    /* the layer and its parameter tensor (rt_lplan index) */
  int part;         /* the expert (EXPERT_T), else 0 */
  int layout;       /* CK_* */
  int ndim;         /* its shape in the file */
  int64_t shape[4];
  size_t floats;    /* its element count */
  bool copy;        /* the tied lm_head's copy of the embedding's table: read by the table's
                       name, never written (the table's part is) */
} ck_part;

/* The tensors of a model in a file, by the scheme its structure allows. */
typedef struct ck_names {
  bool hf;       /* Hugging Face's names (ckpt_names.def), else "layers.I.PARAM" */
  int experts;   /* with hf: the moe layers' names (CK_MIXTRAL, CK_QWEN_MOE or CK_DEEPSEEK), or
                    CK_NEMOTRON_H for Nemotron-H's names, CK_LLAVA for LLaVA's */
  int gen;       /* with CK_LLAVA: the generation of its names (CK_GEN_*; checkpoints are
                    written with CK_GEN_SAVED's) */
  ck_part *part; /* every part of every layer, in layer and rt_lplan order */
  size_t n;
} ck_names;

/* The row of (kind, param) in the naming 'experts', or NULL. */
static const ck_row *ck_row_of(be_kind kind, const char *param, int experts) {
  for (size_t i = 0; i < sizeof ck_rows / sizeof *ck_rows; i++)
    if (ck_rows[i].kind == kind && strcmp(ck_rows[i].param, param) == 0 &&
        (ck_rows[i].experts == experts ||
         (ck_rows[i].experts == CK_ANY && experts != CK_NEMOTRON_H && experts != CK_LLAVA)))
      return &ck_rows[i];
  return NULL;
}

/* The index of the text model's first layer in a LLaVA-structured m: vit_embed, vit layers,
 * projector, then the text model's layers; -1 when m does not start so. */
static int ck_llava_text(const rt_model *m) {
  int n = rt_model_nlayers(m), i = 0;
  rt_layer_info L;
  rt_model_layer(m, 0, &L);
  if (L.k->id != BE_KIND_VIT_EMBED) return -1;
  for (i = 1; i < n; i++) {
    rt_model_layer(m, i, &L);
    if (L.k->id != BE_KIND_VIT) break;
  }
  return i < n && L.k->id == BE_KIND_PROJECTOR ? i + 1 : -1;
}

/* Whether every row of m's tensors is named in the naming 'experts', and m has its structure:
 * embedding, then (attention or mla, gated mlp or moe) pairs, then lm_head for the Llama-style
 * namings; embedding, then mamba2, attention without rotary embedding and plain mlp layers,
 * then lm_head for CK_NEMOTRON_H; vit_embed, vit layers, projector, then the Llama-style
 * structure for CK_LLAVA. */
static bool ck_is_hf(const rt_model *m, int experts) {
  int n = rt_model_nlayers(m), from = 0;
  if (n < 2) return false;
  bool nemo = experts == CK_NEMOTRON_H, llava = experts == CK_LLAVA;
  if (llava && (from = ck_llava_text(m)) < 0) return false;
  if (n - from < 2) return false;
  for (int i = 0; i < n; i++) {
    rt_layer_info L;
    rt_model_layer(m, i, &L);
    be_kind k = L.k->id, want;
    int j = i - from; /* the index in the text model */
    if (j < 0) want = k; /* the vision tower and the projector: ck_llava_text checked them */
    else if (j == 0) want = BE_KIND_EMBEDDING;
    else if (i == n - 1) want = BE_KIND_LM_HEAD;
    else if (nemo) want = k == BE_KIND_ATTENTION || k == BE_KIND_MAMBA2 ? k : BE_KIND_MLP;
    else if (j % 2 == 1) want = k == BE_KIND_MLA && !llava ? k : BE_KIND_ATTENTION;
    else want = k == BE_KIND_MOE && !llava ? BE_KIND_MOE : BE_KIND_MLP;
    bool ffn = k == BE_KIND_MLP || k == BE_KIND_MOE;
    if (k != want || (ffn && L.d.gated == nemo) ||
        (k == BE_KIND_ATTENTION && L.d.no_rope != nemo))
      return false;
    for (int t = 0; t < L.p.npt; t++)
      if (nemo || llava || experts == CK_DEEPSEEK ? !ck_row_of(k, L.p.pt[t].name, experts)
                                         : !ck_row_of(k, L.p.pt[t].name, CK_MIXTRAL) &&
                                               !ck_row_of(k, L.p.pt[t].name, CK_QWEN_MOE))
        return false;
  }
  return true;
}

/* Every tensor of m as a file names and shapes it: a Llama-style model's with the moe layers'
 * router and experts named as 'experts' says (RT_CKPT_MIXTRAL or RT_CKPT_QWEN_MOE), a
 * Nemotron-H model's with Nemotron-H's names, a LLaVA model's with generation gen's (CK_GEN_*;
 * ignored for the other models). */
static void ck_names_of(const rt_model *m, int experts, int gen, ck_names *out) {
  memset(out, 0, sizeof *out);
  for (int i = 0; i < rt_model_nlayers(m); i++) { /* latent attention: DeepSeek's names */
    rt_layer_info L;
    rt_model_layer(m, i, &L);
    if (L.k->id == BE_KIND_MLA) experts = CK_DEEPSEEK;
  }
  if (ck_llava_text(m) >= 0) experts = CK_LLAVA; /* a vision tower first: LLaVA's names */
  out->hf = ck_is_hf(m, experts);
  out->experts = experts;
  out->gen = out->hf && experts == CK_LLAVA ? gen : CK_GEN_SAVED;
  if (!out->hf && ck_is_hf(m, CK_NEMOTRON_H)) out->hf = true, out->experts = CK_NEMOTRON_H;
  size_t cap = 0;
  for (int i = 0, block = -1, vblock = -1; i < rt_model_nlayers(m); i++) {
    rt_layer_info L;
    rt_model_layer(m, i, &L);
    if (L.k->id == BE_KIND_ATTENTION || L.k->id == BE_KIND_MLA ||
        (out->experts == CK_NEMOTRON_H && i > 0))
      block++;
    if (L.k->id == BE_KIND_VIT) vblock++; /* the vision encoder's layers have their own */
    for (int t = 0; t < L.p.npt; t++) {
      const rt_ptensor *pt = &L.p.pt[t];
      const ck_row *row = out->hf ? ck_row_of(L.k->id, pt->name, out->experts) : NULL;
      int layout = row ? row->layout : CK_AS_IS;
      int parts = layout == CK_EXPERT_T ? pt->dim[0] : 1;
      for (int e = 0; e < parts; e++) {
        ck_part p;
        memset(&p, 0, sizeof p);
        if (row) {
          snprintf(p.name, sizeof p.name, row->fmt, L.k->id == BE_KIND_VIT ? vblock : block, e);
          ck_rename_to(p.name, sizeof p.name, out->gen);
        } else
          snprintf(p.name, sizeof p.name, "layers.%d.%s", i, pt->name);
        p.layer = i;
        p.pt = t;
        p.part = e;
        p.layout = layout;
        if (layout == CK_AS_IS) {
          p.ndim = pt->ndim;
          for (int d = 0; d < pt->ndim; d++) p.shape[d] = pt->dim[d];
        } else if (layout == CK_ROW) {
          p.ndim = 2;
          p.shape[0] = 1;
          p.shape[1] = pt->dim[0];
        } else if (layout == CK_CONV2D) { /* [C, p^2, out] as [out, C, p, p] */
          int64_t side = (int64_t)lround(sqrt((double)pt->dim[1]));
          p.ndim = 4;
          p.shape[0] = pt->dim[2];
          p.shape[1] = pt->dim[0];
          p.shape[2] = p.shape[3] = side;
        } else if (layout == CK_CONV1D) {
          p.ndim = 3;
          p.shape[0] = pt->dim[0];
          p.shape[1] = 1;
          p.shape[2] = pt->dim[1];
        } else if (layout == CK_CAT_IN_T || layout == CK_CAT_OUT_T) {
          int64_t S = pt->dim[0], A = pt->dim[1], Bd = pt->dim[2]; /* [S, A, B] */
          p.ndim = 2;
          p.shape[0] = layout == CK_CAT_IN_T ? S * Bd : Bd;
          p.shape[1] = layout == CK_CAT_IN_T ? A : S * A;
        } else {
          int a = layout == CK_T ? 0 : 1; /* the matrix's [in, out] dimensions */
          p.ndim = 2;
          p.shape[0] = pt->dim[a + 1];
          p.shape[1] = pt->dim[a];
        }
        p.floats = 1;
        for (int d = 0; d < p.ndim; d++) p.floats *= (size_t)p.shape[d];
        if (i == rt_model_tie_layer(m, true) && t == L.p.npt - 1) /* its last tensor, [V, h] */
          for (size_t q = 0; q < out->n; q++)
            if (out->part[q].layer == rt_model_tie_layer(m, false)) {
              memcpy(p.name, out->part[q].name, sizeof p.name);
              memcpy(p.shape, out->part[q].shape, sizeof p.shape); /* the kernel's [V, h] */
              p.layout = CK_AS_IS;
              p.copy = true;
            }
        VEC_PUSH(out->part, out->n, cap, p);
      }
    }
  }
}

/* The manifest's "names" of nm: "hf", "hf-qwen-moe", "hf-deepseek", "hf-nemotron-h", "hf-llava"
 * or "octopipe". */
static const char *ck_scheme_name(const ck_names *nm) {
  return !nm->hf                         ? "octopipe"
         : nm->experts == CK_QWEN_MOE    ? "hf-qwen-moe"
         : nm->experts == CK_DEEPSEEK    ? "hf-deepseek"
         : nm->experts == CK_NEMOTRON_H ? "hf-nemotron-h"
         : nm->experts == CK_LLAVA      ? "hf-llava"
                                         : "hf";
}

/* "[2, 3]" of a shape. */
static void ck_shape_str(strbuf *sb, int ndim, const int64_t *shape) {
  strbuf_putc(sb, '[');
  for (int d = 0; d < ndim; d++)
    strbuf_printf(sb, "%s%lld", d ? ", " : "", (long long)shape[d]);
  strbuf_putc(sb, ']');
}

/* What part p is of model m ("layer 3 attn (attention), parameter wq"). */
static void ck_part_what(strbuf *sb, const be_stream *s, const ck_part *p, const rt_model *m) {
  rt_layer_info L;
  rt_model_layer(m, p->layer, &L);
  strbuf_printf(sb, "layer %d %s (%s), parameter %s", p->layer, s->layers[p->layer].name,
                rt_kernel_name(L.k), L.p.pt[p->pt].name);
}

/* Tensors a file may hold that no model parameter is: buffers transformers recomputes (the
 * rotary frequencies, CLIP's position ids in older vision towers). */
static bool ck_ignored(const char *name) {
  static const char *const tails[] = {".rotary_emb.inv_freq", ".embeddings.position_ids"};
  size_t n = strlen(name);
  for (size_t i = 0; i < sizeof tails / sizeof *tails; i++)
    if (n >= strlen(tails[i]) && strcmp(name + n - strlen(tails[i]), tails[i]) == 0) return true;
  return false;
}

static int ck_cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Check that the set opened from 'path' holds exactly the tensors of nm, each name with each
 * of the nsuf suffixes appended ("" for weights, the Adam moments' for the optimizer's set),
 * each of its shape and a float dtype, and nothing else but ignorable buffers. 'what' names the
 * option ("--init"). */
static int ck_check_set(const st_set *set, const char *path, const ck_names *nm,
                        const char *const *suf, int nsuf, const be_stream *s, const rt_model *m,
                        const char *what, strbuf *err) {
  char llava[192]; /* LLaVA's names of another generation say which */
  snprintf(llava, sizeof llava, "Hugging Face's, LLaVA's%s%s",
           nm->gen != CK_GEN_SAVED ? " of " : "", nm->gen != CK_GEN_SAVED ? ck_gen_what[nm->gen] : "");
  const char *scheme = !nm->hf                        ? "the runtime's own"
                       : nm->experts == CK_QWEN_MOE   ? "Hugging Face's, Qwen-MoE's for experts"
                       : nm->experts == CK_DEEPSEEK   ? "Hugging Face's, DeepSeek's"
                       : nm->experts == CK_NEMOTRON_H ? "Hugging Face's, Nemotron-H's"
                       : nm->experts == CK_LLAVA      ? llava
                                                      : "Hugging Face's";
  size_t nwant = nm->n * (size_t)nsuf;
  char **want = xcalloc(nwant ? nwant : 1, sizeof *want);
  int rc = 0;
  for (size_t i = 0; i < nwant && rc == 0; i++) {
    const ck_part *p = &nm->part[i / (size_t)nsuf];
    strbuf name = {0};
    strbuf_printf(&name, "%s%s", p->name, suf[i % (size_t)nsuf]);
    want[i] = xstrdup(strbuf_cstr(&name));
    strbuf_free(&name);
    const st_file *f;
    const st_tensor *t = st_set_find(set, want[i], &f);
    if (!t) {
      strbuf_printf(err, "%s: %s has no tensor '%s' (", what, path, want[i]);
      ck_part_what(err, s, p, m);
      strbuf_printf(err, "; the model's names are %s)", scheme);
      rc = -1;
      break;
    }
    bool same = t->rank == p->ndim;
    for (int d = 0; same && d < p->ndim; d++) same = t->shape[d] == p->shape[d];
    if (!same) {
      strbuf_printf(err, "%s: %s: tensor '%s' has shape ", what, st_path(f), want[i]);
      ck_shape_str(err, t->rank, t->shape);
      strbuf_printf(err, ", but the model at scale %d needs ", rt_model_scale(m));
      ck_shape_str(err, p->ndim, p->shape);
      strbuf_puts(err, " (");
      ck_part_what(err, s, p, m);
      strbuf_puts(err, ")");
      rc = -1;
    } else if (t->dtype != ST_F32 && t->dtype != ST_BF16 && t->dtype != ST_F16 &&
               t->dtype != ST_F64) {
      strbuf_printf(err, "%s: %s: tensor '%s' is %s, not a float type (F32, BF16, F16, F64)",
                    what, st_path(f), want[i], st_dtype_name(t->dtype));
      rc = -1;
    }
  }
  if (rc == 0) {
    qsort(want, nwant, sizeof *want, ck_cmp_str);
    for (size_t i = 0; i < st_set_count(set); i++) {
      const st_file *f;
      const st_tensor *t = st_set_at(set, i, &f);
      const char *key = t->name;
      if (ck_ignored(key) || bsearch(&key, want, nwant, sizeof *want, ck_cmp_str)) continue;
      strbuf_printf(err, "%s: %s: tensor '%s' is no parameter of this model (its names are %s)",
                    what, st_path(f), key, scheme);
      rc = -1;
      break;
    }
  }
  for (size_t i = 0; i < nwant; i++) free(want[i]);
  free(want);
  return rc;
}

/* The two sets of a checkpoint: the weights (k 0; index ST_INDEX_NAME) and, with Adam, the
 * moments (k 1): their shards' prefix, and the moments' index. */
#define CK_OPTIM_INDEX "optimizer.safetensors.index.json"
static const char *const ck_set_prefix[2] = {"model", "optimizer"};

/* The Adam moments' suffixes (PyTorch's state names) and the weights' (none). */
static const char *const ck_moments[2] = {".exp_avg", ".exp_avg_sq"};
static const char *const ck_plain[1] = {""};

/* Offset (floats) of parameter tensor t in its layer's array. */
static size_t ck_pt_off(const rt_lplan *p, int t) {
  size_t off = 0;
  for (int k = 0; k < t; k++) off += rt_ptensor_floats(&p->pt[k]);
  return off;
}

/* Copy part p between its tensor in the runtime's layout (ours: the whole parameter tensor pt)
 * and the file's (file: p->floats). */
static void ck_convert(const ck_part *p, const rt_ptensor *pt, float *ours, float *file,
                       bool to_file) {
  if (p->layout == CK_AS_IS || p->layout == CK_ROW || p->layout == CK_CONV1D) {
    if (to_file) memcpy(file, ours, p->floats * sizeof *file);
    else memcpy(ours, file, p->floats * sizeof *file);
    return;
  }
  if (p->layout == CK_CAT_IN_T || p->layout == CK_CAT_OUT_T) {
    /* ours [S, A, B]; CAT_IN_T: file [S x B, A], (s B + b, a) = ours (s, a, b); CAT_OUT_T: file
     * [B, S x A], (b, s A + a) = ours (s, a, b) */
    size_t S = (size_t)pt->dim[0], A = (size_t)pt->dim[1], Bd = (size_t)pt->dim[2];
    for (size_t s = 0; s < S; s++)
      for (size_t a = 0; a < A; a++)
        for (size_t b = 0; b < Bd; b++) {
          size_t o = (s * A + a) * Bd + b;
          size_t f = p->layout == CK_CAT_IN_T ? (s * Bd + b) * A + a : b * (S * A) + s * A + a;
          if (to_file) file[f] = ours[o];
          else ours[o] = file[f];
        }
    return;
  }
  int a = p->layout == CK_T ? 0 : 1;
  size_t R = (size_t)pt->dim[a], C = (size_t)pt->dim[a + 1]; /* ours: [R, C]; the file: [C, R] */
  if (p->layout == CK_CONV2D) /* ours [channels x p^2, out], the file [out, channels x p^2] */
    R = (size_t)pt->dim[0] * (size_t)pt->dim[1], C = (size_t)pt->dim[2];
  float *mat = ours + (size_t)p->part * R * C;
  enum { TILE = 32 }; /* in tiles, so that both sides stay in the cache */
  for (size_t r0 = 0; r0 < R; r0 += TILE)
    for (size_t c0 = 0; c0 < C; c0 += TILE)
      for (size_t r = r0; r < R && r < r0 + TILE; r++)
        for (size_t c = c0; c < C && c < c0 + TILE; c++) {
          if (to_file) file[c * R + r] = mat[r * C + c];
          else mat[r * C + c] = file[c * R + r];
        }
}

/* Fill layer i's tensor array 'arr' (host, its parameters' floats) from set, each part's name
 * with suffix. */
static int ck_read_layer(const st_set *set, const ck_names *nm, int i, const rt_lplan *pl,
                         const char *suffix, float *arr, strbuf *err) {
  for (size_t k = 0; k < nm->n; k++) {
    const ck_part *p = &nm->part[k];
    if (p->layer != i) continue;
    char name[192];
    snprintf(name, sizeof name, "%s%s", p->name, suffix);
    const st_file *f;
    const st_tensor *t = st_set_find(set, name, &f);
    if (!t || t->numel != (int64_t)p->floats) { /* checked by rt_ckpt_prepare: changed since */
      strbuf_printf(err, "tensor '%s' is missing or misshapen (the file changed)", name);
      return -1;
    }
    float *tmp = xmalloc((p->floats ? p->floats : 1) * sizeof *tmp);
    bool ok = st_read_f32(f, t, tmp, t->numel, err);
    if (ok) ck_convert(p, &pl->pt[p->pt], arr + ck_pt_off(pl, p->pt), tmp, false);
    free(tmp);
    if (!ok) return -1;
  }
  return 0;
}

/* Put "prefix: " before the message in err. */
static void ck_prefix(strbuf *err, const char *prefix) {
  strbuf why = {0};
  strbuf_printf(&why, "%s: %s", prefix, strbuf_cstr(err));
  strbuf_free(err);
  *err = why;
}

/* The path of 'name' in directory dir. */
static void ck_path(strbuf *sb, const char *dir, const char *name) {
  strbuf_printf(sb, "%s/%s", dir, name);
}

int rt_ckpt_load(rt_model *m, const rt_run_opts *o, strbuf *err) {
  bool resume = o->resume_dir[0] != '\0';
  if (!resume && !o->init) return 0;
  strbuf wpath = {0}, opath = {0};
  if (resume) {
    ck_path(&wpath, o->resume_dir, ST_INDEX_NAME);
    ck_path(&opath, o->resume_dir, CK_OPTIM_INDEX);
  } else {
    strbuf_puts(&wpath, o->init);
  }
  const char *what = resume ? "--resume" : "--init";
  ck_names nm; /* --init's file has its generation's names, a checkpoint the first */
  ck_names_of(m, o->ckpt_experts, resume ? CK_GEN_SAVED : o->ckpt_gen, &nm);
  st_set *ws = st_set_open(strbuf_cstr(&wpath), err);
  st_set *os = ws && resume && rt_model_adam(m) ? st_set_open(strbuf_cstr(&opath), err) : NULL;
  int rc = ws && (os || !resume || !rt_model_adam(m)) ? 0 : -1;
  for (int i = 0; i < rt_model_nlayers(m) && rc == 0; i++) {
    float *w, *am, *av;
    if (!rt_model_layer_state(m, i, &w, &am, &av)) continue;
    rt_layer_info L;
    rt_model_layer(m, i, &L);
    size_t nw = rt_lplan_params(&L.p);
    float *host = xmalloc((nw ? nw : 1) * sizeof *host);
    float *dev[3] = {w, am, av};
    for (int k = 0; k < (os ? 3 : 1) && rc == 0; k++) {
      rc = ck_read_layer(k ? os : ws, &nm, i, &L.p, k ? ck_moments[k - 1] : "", host, err);
      if (rc == 0) rt_put(dev[k], host, nw * sizeof *host);
    }
    free(host);
  }
  if (rc == 0 && resume) rt_model_set_adam_steps(m, o->first_step);
  if (rc != 0) ck_prefix(err, what);
  st_set_close(ws);
  st_set_close(os);
  free(nm.part);
  strbuf_free(&wpath);
  strbuf_free(&opath);
  return rc;
}

/* ---- Saving -------------------------------------------------------------------------------- */

/* The shard file of rank r of n: "model-00001-of-00004.safetensors". */
static void ck_shard(strbuf *sb, const char *what, int r, int n) {
  strbuf_printf(sb, "%s-%05d-of-%05d.safetensors", what, r + 1, n);
}

/* The rank that runs layer i of s. */
static int ck_rank_of(const be_stream *s, int i) {
  for (int k = 0; k < s->nstages; k++)
    if (i >= s->stages[k].first && i < s->stages[k].end) return s->stages[k].rank;
  return 0;
}

/* Write rank 'rank''s shards of its layers into dir: the weights, and with Adam the moments;
 * moe layers with the names of 'experts'. */
static int ck_write_shards(const be_stream *s, rt_model *m, int rank, int experts,
                           const char *dir, strbuf *err) {
  ck_names nm;
  ck_names_of(m, experts, CK_GEN_SAVED, &nm);
  bool adam = rt_model_adam(m);
  st_writer *wr[2] = {st_writer_new(), adam ? st_writer_new() : NULL};
  float **keep = NULL; /* the host copies the writers borrow */
  size_t nkeep = 0, keep_cap = 0;
  int rc = 0;
  for (int i = 0; i < rt_model_nlayers(m) && rc == 0; i++) {
    float *dev[3];
    if (ck_rank_of(s, i) != rank || !rt_model_layer_state(m, i, &dev[0], &dev[1], &dev[2]))
      continue;
    rt_layer_info L;
    rt_model_layer(m, i, &L);
    size_t nw = rt_lplan_params(&L.p);
    for (int k = 0; k < (adam ? 3 : 1) && rc == 0; k++) {
      float *host = xmalloc((nw ? nw : 1) * sizeof *host), *file = xmalloc((nw ? nw : 1) * sizeof *file);
      rt_to_host(host, dev[k], nw * sizeof *host);
      VEC_PUSH(keep, nkeep, keep_cap, file);
      size_t at = 0;
      for (size_t q = 0; q < nm.n && rc == 0; q++) {
        const ck_part *p = &nm.part[q];
        if (p->layer != i || p->copy) continue;
        ck_convert(p, &L.p.pt[p->pt], host + ck_pt_off(&L.p, p->pt), file + at, true);
        char name[192];
        snprintf(name, sizeof name, "%s%s", p->name, k ? ck_moments[k - 1] : "");
        if (!st_writer_add(wr[k ? 1 : 0], name, ST_F32, p->ndim, p->shape, file + at, err))
          rc = -1;
        at += p->floats;
      }
      free(host);
    }
  }
  for (int k = 0; k < (adam ? 2 : 1) && rc == 0; k++) {
    strbuf name = {0}, path = {0};
    ck_shard(&name, ck_set_prefix[k], rank, s->nranks);
    ck_path(&path, dir, strbuf_cstr(&name));
    st_writer_meta(wr[k], "format", "pt"); /* transformers refuses shards without it */
    if (!st_writer_write(wr[k], strbuf_cstr(&path), err)) rc = -1;
    strbuf_free(&name);
    strbuf_free(&path);
  }
  for (size_t i = 0; i < nkeep; i++) free(keep[i]);
  free(keep);
  st_writer_free(wr[0]);
  st_writer_free(wr[1]);
  free(nm.part);
  return rc;
}

/* Size and CRC-32 of the file at path. Returns 0, or -1 with the reason in err. */
static int ck_crc_file(const char *path, uint64_t *bytes, uint32_t *crc, strbuf *err) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    strbuf_printf(err, "cannot read '%s': %s", path, strerror(errno));
    return -1;
  }
  unsigned char *buf = xmalloc(1 << 16);
  uLong c = crc32(0L, Z_NULL, 0);
  uint64_t n = 0;
  size_t got;
  while ((got = fread(buf, 1, 1 << 16, f)) > 0) {
    c = crc32(c, buf, (uInt)got);
    n += got;
  }
  free(buf);
  bool bad = ferror(f);
  fclose(f);
  if (bad) {
    strbuf_printf(err, "cannot read '%s': %s", path, strerror(errno));
    return -1;
  }
  *bytes = n;
  *crc = (uint32_t)c;
  return 0;
}

/* Flush the file or directory at path to disk (a rename is durable once its directory is). */
static void ck_sync(const char *path) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) return;
  (void)fsync(fd);
  close(fd);
}

/* Remove directory path and the plain files in it (a checkpoint's step directory has no
 * subdirectories). Returns 0, or -1 with the reason in err. ENOENT is no error. */
static int ck_remove_dir(const char *path, strbuf *err) {
  DIR *d = opendir(path);
  if (!d) {
    if (errno == ENOENT) return 0;
    strbuf_printf(err, "cannot remove '%s': %s", path, strerror(errno));
    return -1;
  }
  struct dirent *e;
  int rc = 0;
  while ((e = readdir(d)) != NULL && rc == 0) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    strbuf f = {0};
    ck_path(&f, path, e->d_name);
    if (unlink(strbuf_cstr(&f)) != 0 && errno != ENOENT) {
      strbuf_printf(err, "cannot remove '%s': %s", strbuf_cstr(&f), strerror(errno));
      rc = -1;
    }
    strbuf_free(&f);
  }
  closedir(d);
  if (rc == 0 && rmdir(path) != 0 && errno != ENOENT) {
    strbuf_printf(err, "cannot remove '%s': %s", path, strerror(errno));
    rc = -1;
  }
  return rc;
}

/* The directory name of the checkpoint of step n: "step-00000006". */
static void ck_step_name(strbuf *sb, int n) { strbuf_printf(sb, "step-%08d", n); }

/* Whether name is a step directory's ("step-" and 8 digits or more). */
static bool ck_is_step_name(const char *name) {
  if (strncmp(name, "step-", 5) != 0 || strlen(name) < 13) return false;
  for (const char *c = name + 5; *c; c++)
    if (*c < '0' || *c > '9') return false;
  return true;
}

/* Write the index of the weights (k 0) or Adam moments (k 1) of s's model m into dir: every
 * tensor's shard by the rank of its layer, and their total size. */
static int ck_write_index(const be_stream *s, const rt_model *m, int k, int experts,
                          const char *dir, strbuf *err) {
  ck_names nm;
  ck_names_of(m, experts, CK_GEN_SAVED, &nm);
  size_t nsuf = k ? 2 : 1, n = 0;
  char **line = xcalloc(nm.n ? nm.n * nsuf : 1, sizeof *line);
  double total = 0;
  for (size_t i = 0; i < nm.n * nsuf; i++) {
    const ck_part *p = &nm.part[i / nsuf];
    if (p->copy) continue;
    strbuf name = {0}, l = {0};
    strbuf_printf(&name, "%s%s", p->name, k ? ck_moments[i % nsuf] : "");
    strbuf_json_str(&l, strbuf_cstr(&name));
    strbuf_puts(&l, ": ");
    strbuf shard = {0};
    ck_shard(&shard, ck_set_prefix[k], ck_rank_of(s, p->layer), s->nranks);
    strbuf_json_str(&l, strbuf_cstr(&shard));
    line[n++] = xstrdup(strbuf_cstr(&l));
    total += 4.0 * (double)p->floats;
    strbuf_free(&name);
    strbuf_free(&l);
    strbuf_free(&shard);
  }
  qsort(line, n, sizeof *line, ck_cmp_str); /* by name, as transformers writes it */
  strbuf j = {0}, path = {0}, why = {0};
  strbuf_printf(&j, "{\n  \"metadata\": {\n    \"total_size\": %.0f\n  },\n  \"weight_map\": {", total);
  for (size_t i = 0; i < n; i++) strbuf_printf(&j, "%s\n    %s", i ? "," : "", line[i]);
  strbuf_puts(&j, "\n  }\n}\n");
  ck_path(&path, dir, k ? CK_OPTIM_INDEX : ST_INDEX_NAME);
  int rc = 0;
  if (!support_write_file(strbuf_cstr(&path), j.data, j.len, &why)) {
    strbuf_printf(err, "cannot write '%s': %s", strbuf_cstr(&path), strbuf_cstr(&why));
    rc = -1;
  } else {
    ck_sync(strbuf_cstr(&path));
  }
  for (size_t i = 0; i < n; i++) free(line[i]);
  free(line);
  free(nm.part);
  strbuf_free(&j);
  strbuf_free(&path);
  strbuf_free(&why);
  return rc;
}

/* Append the manifest's "data" to j: null (synthetic), or the data file's name, and its size
 * and CRC-32 as rt_ckpt_prepare measured them. */
static void ck_data_json(strbuf *j, const char *data, const rt_run_opts *o) {
  strbuf_puts(j, "  \"data\": ");
  if (!data) {
    strbuf_puts(j, "null,\n");
    return;
  }
  strbuf_puts(j, "{\"file\": ");
  strbuf_json_str(j, data);
  strbuf_printf(j, ", \"bytes\": %llu, \"crc32\": \"%08x\"},\n",
                (unsigned long long)o->data_bytes, o->data_crc);
}

/* A step directory of the save directory, for pruning. */
typedef struct ck_step_dir {
  char *name; /* "step-00000006" */
  long step;  /* 6 */
} ck_step_dir;

static int ck_cmp_step_desc(const void *a, const void *b) {
  long x = ((const ck_step_dir *)a)->step, y = ((const ck_step_dir *)b)->step;
  return x < y ? 1 : x > y ? -1 : 0;
}

/* After the checkpoint of step 'step' is complete and DIR/latest names it: remove the
 * temporaries of killed saves (".step-N.tmp"), the step directories of later steps (a run that
 * was abandoned: this one went on from an earlier step) and all but the o->save_keep - 1 newest
 * of the earlier ones. Returns 0, or -1 with the reason in err. */
static int ck_prune(const rt_run_opts *o, int step, strbuf *err) {
  DIR *dd = opendir(o->save);
  if (!dd) {
    strbuf_printf(err, "cannot read '%s': %s", o->save, strerror(errno));
    return -1;
  }
  ck_step_dir *dirs = NULL;
  size_t n = 0, cap = 0;
  int rc = 0;
  for (struct dirent *e; (e = readdir(dd)) != NULL;) {
    size_t len = strlen(e->d_name);
    bool tmp = strncmp(e->d_name, ".step-", 6) == 0 && len > 10 &&
               strcmp(e->d_name + len - 4, ".tmp") == 0;
    if (tmp || ck_is_step_name(e->d_name)) {
      ck_step_dir sd = {xstrdup(e->d_name), tmp ? -1 : strtol(e->d_name + 5, NULL, 10)};
      VEC_PUSH(dirs, n, cap, sd);
    }
  }
  closedir(dd);
  qsort(dirs, n, sizeof *dirs, ck_cmp_step_desc);
  int keep = o->save_keep > 0 ? o->save_keep : 1, kept = 0;
  for (size_t i = 0; i < n; i++) {
    bool stays = dirs[i].step >= 0 && dirs[i].step <= step && kept < keep;
    kept += stays;
    if (!stays && rc == 0) {
      strbuf p = {0};
      ck_path(&p, o->save, dirs[i].name);
      rc = ck_remove_dir(strbuf_cstr(&p), err);
      strbuf_free(&p);
    }
    free(dirs[i].name);
  }
  free(dirs);
  return rc;
}

/* Rank 0's part of a save, after every shard is in tmp: the indexes, the manifest, the rename to
 * final, DIR/latest, and the older checkpoints removed. */
static int ck_finish(const be_stream *s, const rt_model *m, const rt_opts *mo,
                     const rt_run_opts *o, int step, const char *tmp, const char *final,
                     strbuf *err) {
  bool adam = rt_model_adam(m);
  for (int k = 0; k < (adam ? 2 : 1); k++)
    if (ck_write_index(s, m, k, o->ckpt_experts, tmp, err) != 0) return -1;
  strbuf j = {0};
  strbuf_printf(&j, "{\n  \"format\": \"octopipe-checkpoint\",\n  \"version\": %d,\n",
                RT_CKPT_VERSION);
  strbuf_puts(&j, "  \"model\": ");
  strbuf_json_str(&j, s->model);
  ck_names nm;
  ck_names_of(m, o->ckpt_experts, CK_GEN_SAVED, &nm);
  strbuf_printf(&j, ",\n  \"step\": %d,\n  \"names\": \"%s\",\n  \"scale\": %d,\n", step,
                ck_scheme_name(&nm), rt_model_scale(m));
  free(nm.part);
  strbuf_printf(&j, "  \"seed\": \"%llu\",\n  \"optimizer\": \"%s\",\n  \"lr\": %.17g,\n",
                (unsigned long long)mo->seed, adam ? "adam" : "sgd", mo->lr);
  strbuf_printf(&j, "  \"sequences_per_step\": %d,\n  \"seq\": %d,\n",
                (int)(s->replicas * s->nmb * s->micro_batch), (int)s->seq);
  ck_data_json(&j, mo->data, o);
  strbuf_puts(&j, "  \"layers\": [");
  for (int i = 0; i < s->nlayers; i++) {
    strbuf_puts(&j, i ? ",\n    {\"name\": " : "\n    {\"name\": ");
    strbuf_json_str(&j, s->layers[i].name);
    strbuf_puts(&j, ", \"kind\": ");
    strbuf_json_str(&j, s->layers[i].kind);
    strbuf_puts(&j, "}");
  }
  strbuf_puts(&j, "\n  ],\n  \"files\": {");
  /* every file of the directory but the manifest, by name */
  char **names = NULL;
  size_t nnames = 0, cap = 0;
  int rc = 0;
  DIR *d = opendir(tmp);
  if (!d) {
    strbuf_printf(err, "cannot read '%s': %s", tmp, strerror(errno));
    rc = -1;
  }
  for (struct dirent *e; d && (e = readdir(d)) != NULL;)
    if (e->d_name[0] != '.') VEC_PUSH(names, nnames, cap, xstrdup(e->d_name));
  if (d) closedir(d);
  qsort(names, nnames, sizeof *names, ck_cmp_str);
  for (size_t i = 0; i < nnames && rc == 0; i++) {
    strbuf path = {0};
    ck_path(&path, tmp, names[i]);
    uint64_t bytes;
    uint32_t crc;
    rc = ck_crc_file(strbuf_cstr(&path), &bytes, &crc, err);
    strbuf_printf(&j, "%s\n    ", i ? "," : "");
    strbuf_json_str(&j, names[i]);
    strbuf_printf(&j, ": {\"bytes\": %llu, \"crc32\": \"%08x\"}", (unsigned long long)bytes, crc);
    strbuf_free(&path);
  }
  for (size_t i = 0; i < nnames; i++) free(names[i]);
  free(names);
  strbuf_puts(&j, "\n  }\n}\n");
  strbuf path = {0}, why = {0}, old = {0}, latest = {0}, sname = {0};
  ck_path(&path, tmp, RT_CKPT_MANIFEST);
  if (rc == 0 && !support_write_file(strbuf_cstr(&path), j.data, j.len, &why)) {
    strbuf_printf(err, "cannot write '%s': %s", strbuf_cstr(&path), strbuf_cstr(&why));
    rc = -1;
  }
  if (rc == 0) {
    ck_sync(strbuf_cstr(&path));
    ck_sync(tmp);
    /* a step directory of the same name (an earlier run's) goes aside first */
    strbuf_printf(&old, "%s.old", tmp);
    if (ck_remove_dir(strbuf_cstr(&old), err) != 0) rc = -1;
    else if (rename(final, strbuf_cstr(&old)) != 0 && errno != ENOENT) {
      strbuf_printf(err, "cannot move '%s' aside: %s", final, strerror(errno));
      rc = -1;
    } else if (rename(tmp, final) != 0) {
      strbuf_printf(err, "cannot rename '%s' to '%s': %s", tmp, final, strerror(errno));
      rc = -1;
    }
  }
  if (rc == 0) {
    ck_sync(o->save);
    ck_step_name(&sname, step);
    strbuf_putc(&sname, '\n');
    ck_path(&latest, o->save, "latest");
    strbuf_free(&why);
    if (!support_write_file(strbuf_cstr(&latest), sname.data, sname.len, &why)) {
      strbuf_printf(err, "cannot write '%s': %s", strbuf_cstr(&latest), strbuf_cstr(&why));
      rc = -1;
    } else {
      ck_sync(strbuf_cstr(&latest));
      ck_sync(o->save);
    }
  }
  if (rc == 0) /* DIR/latest names the new one: the others can go */
    rc = ck_remove_dir(strbuf_cstr(&old), err) == 0 ? ck_prune(o, step, err) : -1;
  strbuf_free(&j);
  strbuf_free(&path);
  strbuf_free(&why);
  strbuf_free(&old);
  strbuf_free(&latest);
  strbuf_free(&sname);
  return rc;
}

/* A barrier of the save ('which': "first", "second"): 0, 2 (another rank failed: who in err),
 * or 1 with the reason in err (its deadline passed, or a transport error). */
static int ck_barrier(rt_comm *c, const rt_run_opts *o, const char *which, strbuf *err) {
  strbuf why = {0};
  int rc = c->barrier(c->ctx, o->timeout, &why);
  if (rc == 1)
    strbuf_printf(err, "the checkpoint's %s barrier did not complete within %g s", which,
                  o->timeout);
  else if (rc != 0)
    strbuf_puts(err, strbuf_cstr(&why));
  strbuf_free(&why);
  return rc == 0 ? 0 : rc == 2 ? 2 : 1;
}

/* The temporary and final step directories of the save of step 'step': DIR/.step-N.tmp and
 * DIR/step-N (appended to tmp and final). */
static void ck_save_dirs(const rt_run_opts *o, int step, strbuf *tmp, strbuf *final) {
  strbuf name = {0};
  ck_step_name(&name, step);
  strbuf_printf(tmp, "%s/.%s.tmp", o->save, strbuf_cstr(&name));
  ck_path(final, o->save, strbuf_cstr(&name));
  strbuf_free(&name);
}

/* Put "--save at step N: " before the message in err. */
static void ck_save_prefix(strbuf *err, int step) {
  char what[48];
  snprintf(what, sizeof what, "--save at step %d", step);
  ck_prefix(err, what);
}

/* rt_ckpt_save_begin without the prefix. */
static int ck_save_begin(const rt_run_opts *o, int step, strbuf *err) {
  strbuf tmp = {0}, final = {0};
  ck_save_dirs(o, step, &tmp, &final);
  int rc = 0; /* a temporary left by a run that was killed while saving goes first */
  if (ck_remove_dir(strbuf_cstr(&tmp), err) != 0) {
    rc = -1;
  } else if (mkdir(strbuf_cstr(&tmp), 0777) != 0) {
    strbuf_printf(err, "cannot make '%s': %s", strbuf_cstr(&tmp), strerror(errno));
    rc = -1;
  }
  strbuf_free(&tmp);
  strbuf_free(&final);
  return rc;
}

/* rt_ckpt_save_rank without the prefix. */
static int ck_save_rank(const be_stream *s, rt_model *m, int rank, int step,
                        const rt_run_opts *o, strbuf *err) {
  strbuf tmp = {0}, final = {0};
  ck_save_dirs(o, step, &tmp, &final);
  int rc = ck_write_shards(s, m, rank, o->ckpt_experts, strbuf_cstr(&tmp), err);
  strbuf_free(&tmp);
  strbuf_free(&final);
  return rc;
}

/* rt_ckpt_save_end without the prefix. */
static int ck_save_end(const be_stream *s, const rt_model *m, int step, const rt_opts *mo,
                       const rt_run_opts *o, strbuf *err) {
  strbuf tmp = {0}, final = {0};
  ck_save_dirs(o, step, &tmp, &final);
  int rc = ck_finish(s, m, mo, o, step, strbuf_cstr(&tmp), strbuf_cstr(&final), err);
  strbuf_free(&tmp);
  strbuf_free(&final);
  return rc;
}

int rt_ckpt_save_begin(const rt_run_opts *o, int step, strbuf *err) {
  int rc = ck_save_begin(o, step, err);
  if (rc != 0) ck_save_prefix(err, step);
  return rc;
}

int rt_ckpt_save_rank(const be_stream *s, rt_model *m, int rank, int step,
                      const rt_run_opts *o, strbuf *err) {
  int rc = ck_save_rank(s, m, rank, step, o, err);
  if (rc != 0) ck_save_prefix(err, step);
  return rc;
}

int rt_ckpt_save_end(const be_stream *s, const rt_model *m, int step, const rt_opts *mo,
                     const rt_run_opts *o, strbuf *err) {
  int rc = ck_save_end(s, m, step, mo, o, err);
  if (rc != 0) ck_save_prefix(err, step);
  return rc;
}

int rt_ckpt_save(const be_stream *s, rt_model *m, int rank, int replica, int step,
                 const rt_opts *mo, const rt_run_opts *o, rt_comm *c, strbuf *err) {
  bool lead = rank == 0 && replica == 0;
  int rc = lead ? ck_save_begin(o, step, err) : 0;
  if (rc == 0) rc = ck_barrier(c, o, "first", err);
  if (rc == 0 && replica == 0) rc = ck_save_rank(s, m, rank, step, o, err);
  if (rc == 0) rc = ck_barrier(c, o, "second", err);
  if (rc == 0 && lead) rc = ck_save_end(s, m, step, mo, o, err);
  if (rc != 0 && rc != 2) ck_save_prefix(err, step);
  return rc;
}

/* ---- Before a run -------------------------------------------------------------------------- */

/* The moe naming of set for model m: Qwen-MoE's when the set holds the first moe router's
 * Qwen-MoE name and not its Mixtral one, else Mixtral's. */
static int ck_probe_experts(const st_set *set, const rt_model *m) {
  ck_names a, b;
  ck_names_of(m, CK_MIXTRAL, CK_GEN_SAVED, &a);
  ck_names_of(m, CK_QWEN_MOE, CK_GEN_SAVED, &b); /* the same parts in the same order, other names */
  int experts = CK_MIXTRAL;
  for (size_t i = 0; i < a.n; i++)
    if (strcmp(a.part[i].name, b.part[i].name) != 0) {
      if (!st_set_find(set, a.part[i].name, NULL) && st_set_find(set, b.part[i].name, NULL))
        experts = CK_QWEN_MOE;
      break;
    }
  free(a.part);
  free(b.part);
  return experts;
}

/* The generation of LLaVA's names (CK_GEN_*) that set has for model m, its moe layers named as
 * 'experts' says: the one under which the set holds the most of m's tensors, the first of equals;
 * CK_GEN_SAVED for a model without LLaVA's names. */
static int ck_probe_gen(const st_set *set, const rt_model *m, int experts) {
  int best = CK_GEN_SAVED;
  size_t most = 0;
  for (int g = 0; g < CK_NGEN; g++) {
    ck_names nm;
    ck_names_of(m, experts, g, &nm);
    size_t n = 0;
    for (size_t i = 0; nm.gen == g && i < nm.n; i++) n += st_set_find(set, nm.part[i].name, NULL) != NULL;
    bool other = nm.gen != g; /* not LLaVA's names: one generation */
    free(nm.part);
    if (other) break;
    if (n > most) most = n, best = g;
  }
  return best;
}

/* Whether set, whose LLaVA tensors nm names (its generation nm->gen), also holds a tensor of m
 * by another generation's name: then -1 with the error naming the tensor, the file and both
 * generations ('what': the option); else 0 (also for a model without LLaVA's names). */
static int ck_check_mixed(const st_set *set, const ck_names *nm, const rt_model *m,
                          const char *what, strbuf *err) {
  if (!nm->hf || nm->experts != CK_LLAVA) return 0;
  int rc = 0;
  for (int g = 0; g < CK_NGEN && rc == 0; g++) {
    if (g == nm->gen) continue;
    ck_names other; /* the same parts in the same order, other names */
    ck_names_of(m, nm->experts, g, &other);
    for (size_t i = 0; i < other.n && i < nm->n && rc == 0; i++) {
      const st_file *f;
      if (strcmp(other.part[i].name, nm->part[i].name) == 0 ||
          !st_set_find(set, other.part[i].name, &f))
        continue;
      strbuf_printf(err, "%s: %s: tensor '%s' has LLaVA's names of %s, the file's others those "
                    "of %s (a file has one generation of names; '%s' would be '%s')", what,
                    st_path(f), other.part[i].name, ck_gen_what[g], ck_gen_what[nm->gen],
                    other.part[i].name, nm->part[i].name);
      rc = -1;
    }
    free(other.part);
  }
  return rc;
}

/* Open the set at path and check it against model m (rt_ckpt_prepare), the moe layers with the
 * names of *experts, LLaVA's of generation *gen; probe (--init): find both first
 * (ck_probe_experts, ck_probe_gen) into *experts and *gen, and refuse a file that mixes LLaVA's
 * generations (ck_check_mixed). */
static int ck_check_path(const char *path, int *experts, int *gen, bool probe,
                         const char *const *suf, int nsuf, const be_stream *s, const rt_model *m,
                         const char *what, strbuf *err) {
  strbuf why = {0};
  st_set *set = st_set_open(path, &why);
  int rc = -1;
  if (set) {
    if (probe) *experts = ck_probe_experts(set, m);
    if (probe) *gen = ck_probe_gen(set, m, *experts);
    ck_names nm;
    ck_names_of(m, *experts, *gen, &nm);
    rc = probe ? ck_check_mixed(set, &nm, m, what, err) : 0;
    if (rc == 0) rc = ck_check_set(set, path, &nm, suf, nsuf, s, m, what, err);
    free(nm.part);
  } else {
    strbuf_printf(err, "%s: %s", what, strbuf_cstr(&why));
  }
  st_set_close(set);
  strbuf_free(&why);
  return rc;
}

/* Find the step directory of --resume=dir into o->resume_dir: dir itself when it holds a
 * manifest, else the one dir/latest names. */
static int ck_find_step(const char *dir, rt_run_opts *o, strbuf *err) {
  strbuf p = {0}, why = {0};
  ck_path(&p, dir, RT_CKPT_MANIFEST);
  struct stat st;
  int rc = 0;
  if (stat(strbuf_cstr(&p), &st) == 0) {
    if (strlen(dir) >= sizeof o->resume_dir) {
      strbuf_printf(err, "--resume=%s: the path is longer than %zu bytes", dir,
                    sizeof o->resume_dir - 1);
      rc = -1;
    } else {
      snprintf(o->resume_dir, sizeof o->resume_dir, "%s", dir);
    }
  } else {
    p.len = 0;
    ck_path(&p, dir, "latest");
    size_t n = 0;
    char *name = support_read_file(strbuf_cstr(&p), &n, &why);
    if (!name) {
      struct stat ds;
      if (stat(dir, &ds) != 0 || !S_ISDIR(ds.st_mode))
        strbuf_printf(err, "--resume=%s: %s", dir,
                      stat(dir, &ds) != 0 ? strerror(errno) : "not a directory");
      else
        strbuf_printf(err, "--resume=%s: no checkpoint there (neither %s nor latest)", dir,
                      RT_CKPT_MANIFEST);
      rc = -1;
    } else {
      while (n > 0 && (name[n - 1] == '\n' || name[n - 1] == '\r')) name[--n] = '\0';
      if (!ck_is_step_name(name) || strlen(name) != n) {
        strbuf_printf(err, "--resume=%s: latest does not name a step directory (step-NNNNNNNN)",
                      dir);
        rc = -1;
      } else if (snprintf(o->resume_dir, sizeof o->resume_dir, "%s/%s", dir, name) >=
                 (int)sizeof o->resume_dir) { /* checking the length is what silences GCC 13 */
        strbuf_printf(err, "--resume=%s: the path is longer than %zu bytes", dir,
                      sizeof o->resume_dir - 1);
        o->resume_dir[0] = 0;
        rc = -1;
      }
      free(name);
    }
  }
  strbuf_free(&p);
  strbuf_free(&why);
  return rc;
}

/* The manifest's member 'key' of JSON type 'type' (cJSON_Number, ...), or NULL after appending
 * "MANIFEST: no KEY" to err. */
static const cJSON *ck_member(const cJSON *j, const char *key, int type, const char *path,
                              strbuf *err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
  if (!v || !(v->type & type)) {
    strbuf_printf(err, "--resume: %s: \"%s\" is missing or not a%s", path, key,
                  type == cJSON_Number ? " number" : type == cJSON_String ? " string"
                  : type == cJSON_Array ? "n array" : "n object");
    return NULL;
  }
  return v;
}

/* Check the manifest text of the checkpoint at o->resume_dir against stream s run with mo and o,
 * and verify every file it lists; set o->first_step, mo->seed and mo->scale. */
static int ck_check_manifest(const char *text, const char *path, const be_stream *s, rt_opts *mo,
                             rt_run_opts *o, strbuf *err) {
  cJSON *j = cJSON_Parse(text);
  const cJSON *v;
  int rc = -1;
  if (!j || !cJSON_IsObject(j)) {
    strbuf_printf(err, "--resume: %s: not a JSON object", path);
    goto out;
  }
  if (!(v = ck_member(j, "format", cJSON_String, path, err))) goto out;
  if (strcmp(v->valuestring, "octopipe-checkpoint") != 0) {
    strbuf_printf(err, "--resume: %s: format '%s' is not octopipe-checkpoint", path,
                  v->valuestring);
    goto out;
  }
  if (!(v = ck_member(j, "version", cJSON_Number, path, err))) goto out;
  if (v->valuedouble != RT_CKPT_VERSION) {
    strbuf_printf(err, "--resume: %s: version %g; this octo-run reads version %d", path,
                  v->valuedouble, RT_CKPT_VERSION);
    goto out;
  }
  const cJSON *names = ck_member(j, "names", cJSON_String, path, err);
  const cJSON *step = names ? ck_member(j, "step", cJSON_Number, path, err) : NULL;
  const cJSON *scale = step ? ck_member(j, "scale", cJSON_Number, path, err) : NULL;
  const cJSON *seed = scale ? ck_member(j, "seed", cJSON_String, path, err) : NULL;
  const cJSON *opt = seed ? ck_member(j, "optimizer", cJSON_String, path, err) : NULL;
  const cJSON *sps = opt ? ck_member(j, "sequences_per_step", cJSON_Number, path, err) : NULL;
  const cJSON *seq = sps ? ck_member(j, "seq", cJSON_Number, path, err) : NULL;
  const cJSON *layers = seq ? ck_member(j, "layers", cJSON_Array, path, err) : NULL;
  const cJSON *files = layers ? ck_member(j, "files", cJSON_Object, path, err) : NULL;
  const cJSON *data = files ? cJSON_GetObjectItemCaseSensitive(j, "data") : NULL;
  if (!files) goto out;
  double st = step->valuedouble, sc = scale->valuedouble;
  if (!(st >= 1 && st <= 1e9 && st == floor(st) && sc >= 1 && sc <= 1e9 && sc == floor(sc))) {
    strbuf_printf(err, "--resume: %s: step %g or scale %g is not a whole number from 1 to 1e9",
                  path, st, sc);
    goto out;
  }
  char *end;
  errno = 0;
  unsigned long long sd = strtoull(seed->valuestring, &end, 10);
  if (end == seed->valuestring || *end || errno) {
    strbuf_printf(err, "--resume: %s: seed '%s' is not a whole number", path, seed->valuestring);
    goto out;
  }
  /* the model: its layers, optimizer, data per step and scale */
  const char *s_opt = s->optimizer ? s->optimizer : "sgd";
  int nl = cJSON_GetArraySize(layers), want_sps = (int)(s->replicas * s->nmb * s->micro_batch);
  if (nl != s->nlayers) {
    strbuf_printf(err, "--resume: %s: the checkpoint's model has %d layers, this plan's %d", path,
                  nl, (int)s->nlayers);
    goto out;
  }
  for (int i = 0; i < nl; i++) {
    const cJSON *L = cJSON_GetArrayItem(layers, i);
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(L, "name");
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(L, "kind");
    if (!cJSON_IsString(n) || !cJSON_IsString(k) || strcmp(n->valuestring, s->layers[i].name) ||
        strcmp(k->valuestring, s->layers[i].kind)) {
      strbuf_printf(err, "--resume: %s: layer %d is ", path, i);
      if (cJSON_IsString(n) && cJSON_IsString(k))
        strbuf_printf(err, "%s (%s)", n->valuestring, k->valuestring);
      else
        strbuf_puts(err, "not {\"name\", \"kind\"}");
      strbuf_printf(err, " in the checkpoint, %s (%s) in this plan", s->layers[i].name,
                    s->layers[i].kind);
      goto out;
    }
  }
  if (strcmp(opt->valuestring, s_opt) != 0) {
    strbuf_printf(err, "--resume: %s: the checkpoint's optimizer is %s, this plan's %s", path,
                  opt->valuestring, s_opt);
    goto out;
  }
  if (sps->valuedouble != want_sps || seq->valuedouble != s->seq) {
    strbuf_printf(err, "--resume: %s: the checkpoint took %g sequences of %g tokens per step, "
                  "this plan takes %d of %d (replicas x microbatches x micro_batch and seq "
                  "must stay, so that every step reads the same data)", path, sps->valuedouble,
                  seq->valuedouble, want_sps, (int)s->seq);
    goto out;
  }
  if (mo->scale != 0 && mo->scale != (int)sc) {
    strbuf_printf(err, "--resume: %s: the checkpoint is at scale %d, not --scale=%d", path,
                  (int)sc, mo->scale);
    goto out;
  }
  /* the data the steps read */
  const cJSON *df = cJSON_IsObject(data) ? cJSON_GetObjectItemCaseSensitive(data, "crc32") : NULL;
  const cJSON *db = cJSON_IsObject(data) ? cJSON_GetObjectItemCaseSensitive(data, "bytes") : NULL;
  if (!cJSON_IsNull(data) && (!cJSON_IsString(df) || !cJSON_IsNumber(db))) {
    strbuf_printf(err, "--resume: %s: \"data\" is neither null nor {\"file\", \"bytes\", "
                  "\"crc32\"}", path);
    goto out;
  }
  if (cJSON_IsNull(data) != (mo->data == NULL)) {
    strbuf_printf(err, "--resume: %s: the checkpoint was trained on %s, this run %s", path,
                  cJSON_IsNull(data) ? "synthetic data" : "a data file (--data)",
                  mo->data ? "on --data" : "on synthetic data");
    goto out;
  }
  if (mo->data) {
    uint64_t bytes;
    uint32_t crc;
    char hex[16];
    if (ck_crc_file(mo->data, &bytes, &crc, err) != 0) goto out;
    o->data_bytes = bytes; /* the manifests of this run's saves say the same */
    o->data_crc = crc;
    snprintf(hex, sizeof hex, "%08x", crc);
    if (strcmp(hex, df->valuestring) != 0 || (double)bytes != db->valuedouble) {
      strbuf_printf(err, "--resume: --data=%s is not the file the checkpoint was trained on "
                    "(%llu bytes of CRC-32 %s, the checkpoint's %.0f of %s)", mo->data,
                    (unsigned long long)bytes, hex, db->valuedouble, df->valuestring);
      goto out;
    }
  }
  /* every file whole */
  for (const cJSON *f = files->child; f; f = f->next) {
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(f, "bytes");
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(f, "crc32");
    if (!f->string || strchr(f->string, '/') || !cJSON_IsNumber(b) || !cJSON_IsString(c)) {
      strbuf_printf(err, "--resume: %s: a \"files\" entry is not NAME: {\"bytes\", \"crc32\"} "
                    "with a plain file name", path);
      goto out;
    }
    strbuf fp = {0};
    ck_path(&fp, o->resume_dir, f->string);
    uint64_t bytes;
    uint32_t crc;
    char hex[16];
    int got = ck_crc_file(strbuf_cstr(&fp), &bytes, &crc, err);
    snprintf(hex, sizeof hex, "%08x", got == 0 ? crc : 0u);
    if (got != 0) {
      ck_prefix(err, "--resume");
    } else if ((double)bytes != b->valuedouble) {
      strbuf_printf(err, "--resume: %s is %llu bytes, the manifest says %.0f (truncated or "
                    "changed)", strbuf_cstr(&fp), (unsigned long long)bytes, b->valuedouble);
      got = -1;
    } else if (strcmp(hex, c->valuestring) != 0) {
      strbuf_printf(err, "--resume: %s: CRC-32 %s, the manifest says %s (the file is corrupted)",
                    strbuf_cstr(&fp), hex, c->valuestring);
      got = -1;
    }
    strbuf_free(&fp);
    if (got != 0) goto out;
  }
  if (st >= o->steps) {
    strbuf_printf(err, "--resume: the checkpoint is at step %d and --steps=%d asks for no more "
                  "(--steps counts from the start of training)", (int)st, o->steps);
    goto out;
  }
  o->first_step = (int)st;
  o->ckpt_experts = strcmp(names->valuestring, "hf-qwen-moe") == 0 ? CK_QWEN_MOE : CK_MIXTRAL;
  mo->seed = (uint64_t)sd;
  mo->scale = (int)sc;
  rc = 0;
out:
  cJSON_Delete(j);
  return rc;
}

int rt_ckpt_prepare(const be_stream *s, rt_opts *mo, rt_run_opts *o, strbuf *err) {
  o->resume_dir[0] = '\0';
  o->first_step = 0;
  /* a run from scratch names moe layers as Mixtral does, or as Qwen-MoE does when they have
   * shared experts (Mixtral has none) */
  o->ckpt_experts = RT_CKPT_MIXTRAL;
  o->ckpt_gen = 0; /* LLaVA's names as checkpoints have them; --init's file may have others */
  for (int i = 0; i < s->nlayers; i++)
    if (be_layer_kind(&s->layers[i]) == BE_KIND_MOE &&
        be_layer_param(&s->layers[i], BE_LP_MOE_SHARED) > 0)
      o->ckpt_experts = RT_CKPT_QWEN_MOE;
  if (o->init && o->resume) {
    strbuf_puts(err, "--init and --resume: give one (a checkpoint holds its weights)");
    return -1;
  }
  if (o->init && mo->scale == 0) mo->scale = 1; /* weights are for the model as written */
  if (o->resume && mo->dump) {
    strbuf_puts(err, "--dump writes the tensors of step 1, which a resumed run does not take");
    return -1;
  }
  if ((o->save_every > 0 || o->save_keep > 0) && !o->save) {
    strbuf_puts(err, o->save_every > 0 ? "--save-every needs --save=DIR"
                                       : "--save-keep needs --save=DIR");
    return -1;
  }
  if (o->resume) {
    if (ck_find_step(o->resume, o, err) != 0) return -1;
    strbuf mp = {0}, why = {0};
    ck_path(&mp, o->resume_dir, RT_CKPT_MANIFEST);
    size_t n;
    char *text = support_read_file(strbuf_cstr(&mp), &n, &why);
    int rc = text ? ck_check_manifest(text, strbuf_cstr(&mp), s, mo, o, err) : -1;
    if (!text) strbuf_printf(err, "--resume: %s: %s", strbuf_cstr(&mp), strbuf_cstr(&why));
    free(text);
    strbuf_free(&mp);
    strbuf_free(&why);
    if (rc != 0) return -1;
  }
  if (o->init || o->resume) {
    rt_model *m = rt_model_new(s, mo, err);
    if (!m) return -1;
    int rc, *ex = &o->ckpt_experts, *gen = &o->ckpt_gen;
    if (o->init) {
      rc = ck_check_path(o->init, ex, gen, true, ck_plain, 1, s, m, "--init", err);
    } else { /* the manifest gave the names */
      strbuf p = {0};
      ck_path(&p, o->resume_dir, ST_INDEX_NAME);
      rc = ck_check_path(strbuf_cstr(&p), ex, gen, false, ck_plain, 1, s, m, "--resume", err);
      p.len = 0;
      ck_path(&p, o->resume_dir, CK_OPTIM_INDEX);
      if (rc == 0 && rt_model_adam(m))
        rc = ck_check_path(strbuf_cstr(&p), ex, gen, false, ck_moments, 2, s, m, "--resume", err);
      strbuf_free(&p);
    }
    rt_model_free(m);
    if (rc != 0) return -1;
  }
  if (o->save && mo->data && !o->resume &&
      ck_crc_file(mo->data, &o->data_bytes, &o->data_crc, err) != 0) /* resume: measured there */
    return -1;
  if (o->save) {
    struct stat st;
    const char *why = NULL;
    if (mkdir(o->save, 0777) != 0 && errno != EEXIST) why = strerror(errno);
    else if (stat(o->save, &st) != 0) why = strerror(errno);
    else if (!S_ISDIR(st.st_mode)) why = "exists and is not a directory";
    else if (access(o->save, W_OK | X_OK) != 0) why = strerror(errno);
    if (why) {
      strbuf_printf(err, "--save=%s: %s", o->save, why);
      return -1;
    }
  }
  return 0;
}
