/* export.c -- the plan in other frameworks' terms: the schedule as the CSV that PyTorch's
 * torch.distributed.pipelining reads (_load_csv, compute-only actions), and the partition as
 * Megatron-LM's --pipeline-model-parallel-layout string or --hybrid-layer-pattern with '|' cuts
 * (megatron-core 0.17 and later; 0.16.x's --hybrid-override-pattern in a comment), alone or as
 * Megatron-LM's command-line flags (with --untie-embeddings-and-output-weights unless the model
 * ties its lm_head to the embedding, which Megatron does by default). */
#include <stdlib.h>
#include <string.h>

#include "report_impl.h"

/* PyTorch's action letter of an IR op (torch's _ComputationType): F forward, I input gradient,
 * W weight gradient, B full backward. */
static char torch_action(ir_op_kind k) {
  switch (k) {
  case IR_OP_F: return 'F';
  case IR_OP_B: return 'I';
  case IR_OP_W: return 'W';
  case IR_OP_BW: return 'B';
  default: return '?';
  }
}

void report_torch_csv(const ir_module *m, strbuf *out) {
  for (int dv = 0; dv < m->ndevices; dv++) {
    const ir_schedule *s = &m->schedules[dv];
    for (int i = 0; i < s->nops; i++)
      strbuf_printf(out, "%s%d%c%d", i ? "," : "", s->ops[i].stage, torch_action(s->ops[i].kind),
                    s->ops[i].mb);
    strbuf_putc(out, '\n');
  }
}

/* Append symbol c repeated n times to a layout stage as "c" or "c*n", comma-separated. */
static void put_run(strbuf *out, bool *first, char c, int n) {
  if (n <= 0) return;
  if (!*first) strbuf_putc(out, ',');
  *first = false;
  if (n == 1)
    strbuf_putc(out, c);
  else
    strbuf_printf(out, "%c*%d", c, n);
}

/* The way forward named by the errors of a plan Megatron cannot express. */
#define MEGATRON_HINT "; plan with octoc --megatron for stages Megatron can express"

int report_megatron_layout(const ir_module *m, strbuf *out, diag_engine *d, diag_loc where) {
  int p = m->ndevices;
  if (p == 0 || m->nstages % p != 0) {
    diag_error(d, where, "cannot write a Megatron layout: Megatron gives every one of the %d "
               "pipeline ranks the same number of virtual stages, but the plan has %d stages"
               MEGATRON_HINT, p, m->nstages);
    return -1;
  }
  for (int s = 0; s < m->nstages; s++)
    if (m->stages[s].device != s % p) {
      diag_error(d, where, "cannot write a Megatron layout: Megatron places virtual stage s on "
                 "pipeline rank s mod %d, but @s%d is on $d%d (only sequential and interleaved "
                 "placements can be written)" MEGATRON_HINT, p, s, m->stages[s].device);
      return -1;
    }
  pass_layout_notation notation = pass_layout_notation_of(m);
  bool hybrid = notation == PASS_LAYOUT_HYBRID;
  strbuf sb = {0};
  for (int s = 0; s < m->nstages; s++) {
    const ir_stage *st = &m->stages[s];
    if (s) strbuf_putc(&sb, '|');
    size_t start = sb.len;
    bool first = true;
    char run = 0;
    int count = 0;
    for (int i = st->first; i < st->end; i++) {
      ir_layer_kind k = m->layers[i].kind;
      if (hybrid && ((k == IR_KIND_EMBEDDING && s == 0) ||
                     (k == IR_KIND_LM_HEAD && s == m->nstages - 1)))
        continue; /* implicit in a hybrid pattern */
      char c = pass_layout_symbol(notation, k);
      if (!hybrid && c == 't') { /* 't': the attention and its MLP or MoE */
        if (i + 1 < st->end &&
            (m->layers[i + 1].kind == IR_KIND_MLP || m->layers[i + 1].kind == IR_KIND_MOE))
          i++;
        else if (i + 1 < m->nlayers && (m->layers[i + 1].kind == IR_KIND_MLP ||
                                        m->layers[i + 1].kind == IR_KIND_MOE)) {
          diag_error(d, where, "cannot write a Megatron layout: @s%d ends between attention "
                     "layer %%%d \"%s\" and its %s (a Megatron 't' is both)" MEGATRON_HINT, s,
                     i, m->layers[i].name, ir_kinds[m->layers[i + 1].kind].name);
          strbuf_free(&sb);
          return -1;
        }
      }
      if (!c) {
        strbuf syms = {0};
        pass_layout_symbols(notation, &syms);
        diag_error(d, where, "cannot write a Megatron layout: layer %%%d \"%s\" (%s) has no "
                   "symbol in %s (%s)", i, m->layers[i].name, ir_kinds[k].name,
                   hybrid ? "a hybrid pattern" : "a layout", strbuf_cstr(&syms));
        strbuf_free(&syms);
        strbuf_free(&sb);
        return -1;
      }
      if (hybrid) { /* one character per layer, as Megatron's hybrid_override_pattern */
        strbuf_putc(&sb, c);
        continue;
      }
      if (c != run) {
        put_run(&sb, &first, run, count);
        run = c;
        count = 0;
      }
      count++;
    }
    put_run(&sb, &first, run, count);
    if (sb.len == start) { /* a hybrid stage of only the implicit embedding or LM head */
      diag_error(d, where, "cannot write a Megatron layout: @s%d holds only the %s, which a "
                 "hybrid pattern leaves implicit in the %s stage" MEGATRON_HINT, s,
                 ir_kinds[m->layers[st->first].kind].name, s == 0 ? "first" : "last");
      strbuf_free(&sb);
      return -1;
    }
  }
  strbuf_append(out, strbuf_cstr(&sb), sb.len);
  strbuf_putc(out, '\n');
  strbuf_free(&sb);
  return 0;
}

/* Whether m's lm_head shares the embedding's table (a lm_head with tied = true; the verifier
 * checked that its embedding exists). */
static bool module_tied(const ir_module *m) {
  for (int i = 0; i < m->nlayers; i++)
    if (m->layers[i].kind == IR_KIND_LM_HEAD && m->layers[i].p[IR_LP_LM_HEAD_TIED] == 1)
      return true;
  return false;
}

/* Megatron's layers in stage s of m (a written layout's: a 't' is an attention layer with the
 * MLP or MoE after it; in a hybrid pattern each layer is one) that recomputation applies to:
 * *units of them, of which the first *done recompute. Returns -1 when a Megatron layer is only
 * partly recomputed (its attention and not its MLP): *units holds that layer's first IR layer. */
static int megatron_recompute_units(const ir_module *m, int s, bool hybrid, int *units,
                                    int *done) {
  const ir_stage *st = &m->stages[s];
  *units = *done = 0;
  for (int i = st->first; i < st->end; i++) {
    if (!ir_kind_recomputable(m->layers[i].kind)) continue;
    int last = i; /* the unit's last IR layer */
    if (!hybrid && (m->layers[i].kind == IR_KIND_ATTENTION || m->layers[i].kind == IR_KIND_MLA) &&
        i + 1 < st->end &&
        (m->layers[i + 1].kind == IR_KIND_MLP || m->layers[i + 1].kind == IR_KIND_MOE))
      last = i + 1;
    bool a = ir_stage_layer_recomputes(m, st, i), b = ir_stage_layer_recomputes(m, st, last);
    if (a != b) {
      *units = i;
      return -1;
    }
    (*units)++;
    *done += a;
    i = last;
  }
  return 0;
}

int report_megatron_args(const ir_module *m, strbuf *out, diag_engine *d, diag_loc where) {
  strbuf layout = {0};
  if (report_megatron_layout(m, &layout, d, where) != 0) {
    strbuf_free(&layout);
    return -1;
  }
  layout.data[--layout.len] = 0; /* the newline */
  bool hybrid = pass_layout_notation_of(m) == PASS_LAYOUT_HYBRID;
  int p = m->ndevices; /* the layout's '|' cuts give the virtual stages per rank */
  /* the configuration: degrees, batch, recomputation, distributed optimizer, overlap */
  const ir_train *t = &m->train;
  for (int s = 0; s < m->nstages; s++)
    if (m->stages[s].offload) { /* megatron/core/transformer/transformer_config.py */
      diag_error(d, where, "cannot write Megatron flags: @s%d offloads its activations to host "
                 "memory, and Megatron-LM's CPU offloading does not run with pipeline "
                 "parallelism" MEGATRON_HINT, s);
      strbuf_free(&layout);
      return -1;
    }
  int rc = (int)ir_field_value(t, IR_F_TRAIN_recompute), own = 0;
  for (int s = 0; s < m->nstages; s++) own += m->stages[s].recompute == IR_RECOMPUTE_FULL;
  if (own > 0 && own < m->nstages) {
    int yes = 0, no = 0;
    while (m->stages[yes].recompute != IR_RECOMPUTE_FULL) yes++;
    while (m->stages[no].recompute == IR_RECOMPUTE_FULL) no++;
    diag_error(d, where, "cannot write Megatron flags: @s%d recomputes and @s%d does not, but "
               "Megatron recomputes the same way on every stage" MEGATRON_HINT, yes, no);
    strbuf_free(&layout);
    return -1;
  }
  /* every stage recomputes: Megatron's full recomputation of every layer (method uniform, one
   * layer a checkpoint), or of the first K layers of every stage (method block) */
  int block = 0; /* K; 0: every layer */
  for (int s = 0; own > 0 && s < m->nstages; s++) {
    int units, done;
    if (megatron_recompute_units(m, s, hybrid, &units, &done) != 0) {
      diag_error(d, where, "cannot write Megatron flags: @s%d recomputes attention layer %%%d "
                 "\"%s\" but not the layer after it, and Megatron recomputes a transformer "
                 "layer whole" MEGATRON_HINT, s, units, m->layers[units].name);
      strbuf_free(&layout);
      return -1;
    }
    if (done < units && block == 0) block = done;
  }
  for (int s = 0; block > 0 && s < m->nstages; s++) {
    int units, done;
    megatron_recompute_units(m, s, hybrid, &units, &done);
    if (done != (units < block ? units : block)) {
      diag_error(d, where, "cannot write Megatron flags: @s%d recomputes %d of its %d layers, "
                 "but Megatron's block method recomputes the first %d of every stage (as "
                 "another stage does)" MEGATRON_HINT, s, done, units, block);
      strbuf_free(&layout);
      return -1;
    }
  }
  if (own > 0) rc = IR_RECOMPUTE_FULL; /* every stage recomputes: the module-wide policy */
  int64_t tensor = (int64_t)ir_field_value(t, IR_F_TRAIN_tensor);
  strbuf_printf(out, "--tensor-model-parallel-size %lld\n", (long long)tensor);
  strbuf_printf(out, "--micro-batch-size %lld --global-batch-size %lld\n",
                (long long)ir_field_value(t, IR_F_TRAIN_micro_batch),
                (long long)ir_field_value(t, IR_F_TRAIN_global_batch));
  if (rc == IR_RECOMPUTE_SELECTIVE) strbuf_puts(out, "--recompute-granularity selective\n");
  if (rc == IR_RECOMPUTE_FULL && block > 0)
    strbuf_printf(out, "--recompute-granularity full --recompute-method block "
                       "--recompute-num-layers %d\n", block);
  else if (rc == IR_RECOMPUTE_FULL)
    strbuf_puts(out, "--recompute-granularity full --recompute-method uniform "
                     "--recompute-num-layers 1\n");
  if (ir_field_value(t, IR_F_TRAIN_zero) >= 1) strbuf_puts(out, "--use-distributed-optimizer\n");
  if (ir_field_value(t, IR_F_TRAIN_overlap_grad_reduce) != 0)
    strbuf_puts(out, "--overlap-grad-reduce\n");
  /* Megatron ties the output layer to the embedding by default
   * (share_embeddings_and_output_weights); an untied model must say so */
  if (!module_tied(m)) strbuf_puts(out, "--untie-embeddings-and-output-weights\n");
  strbuf_printf(out, "# data-parallel size %lld: launch tensor x pipeline x data = %lld ranks\n",
                (long long)ir_field_value(t, IR_F_TRAIN_data),
                (long long)(tensor * p * ir_field_value(t, IR_F_TRAIN_data)));
  if (tensor > 1) /* megatron/training/arguments.py, validate_args */
    strbuf_puts(out, "# environment: CUDA_DEVICE_MAX_CONNECTIONS=1 (Megatron's validate_args "
                     "requires it with tensor parallelism on GPUs before Blackwell, unless FSDP "
                     "or --overlap-moe-expert-parallel-comm is used)\n");
  strbuf_printf(out, "--pipeline-model-parallel-size %d", p);
  strbuf_printf(out, " %s '%s'\n",
                hybrid ? "--hybrid-layer-pattern" : "--pipeline-model-parallel-layout",
                strbuf_cstr(&layout));
  if (hybrid) {
    /* megatron-core 0.16.x: --hybrid-override-pattern without '|' and --num-layers; the ranks get
     * equal counts, or the first and last their own (--decoder-first/last-pipeline-num-layers,
     * megatron/core/ssm/mamba_block.py) and the middle ones equal ones; no virtual stages */
    strbuf plain = {0};
    int *count = xcalloc((size_t)m->nstages, sizeof *count), ns = 0;
    for (const char *c = strbuf_cstr(&layout);; c++) {
      if (*c == '|' || *c == 0) {
        ns++;
        if (!*c) break;
      } else {
        strbuf_putc(&plain, *c);
        count[ns]++;
      }
    }
    bool even = true, middle = true;
    for (int s = 1; s < ns; s++) even = even && count[s] == count[0];
    for (int s = 2; s + 1 < ns; s++) middle = middle && count[s] == count[1];
    strbuf_puts(out, "# megatron-core 0.17 and later read the line above; 0.16.x has no "
                     "--hybrid-layer-pattern and no '|': there ");
    if (ns != p)
      strbuf_printf(out, "this plan cannot be written: its hybrid model has no virtual pipeline "
                    "stages, and the plan has %d stages on %d ranks\n", ns, p);
    else if (even)
      strbuf_printf(out, "--pipeline-model-parallel-size %d --hybrid-override-pattern '%s' "
                    "--num-layers %zu splits the layers evenly, as this plan does\n", p,
                    strbuf_cstr(&plain), plain.len);
    else if (middle)
      strbuf_printf(out, "--pipeline-model-parallel-size %d --hybrid-override-pattern '%s' "
                    "--num-layers %zu --decoder-first-pipeline-num-layers %d "
                    "--decoder-last-pipeline-num-layers %d splits the layers as this plan does\n",
                    p, strbuf_cstr(&plain), plain.len, count[0], count[ns - 1]);
    else
      strbuf_printf(out, "this plan cannot be written: only the first and last ranks may take "
                    "their own layer counts (--decoder-first/last-pipeline-num-layers), and its "
                    "middle ranks differ (partition{method=uniform} plans an even split)\n");
    free(count);
    strbuf_free(&plain);
  }
  strbuf_free(&layout);
  return 0;
}
