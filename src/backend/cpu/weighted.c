/* weighted.c — the three primitives of a layer with weights (convolution
 * or inner product): forward with bias and activation fused as a post-op,
 * backward data and backward weights (+ bias), both hinted by the forward
 * pd so oneDNN picks matching implementations. Where a primitive chose its
 * own weights layout, a reorder to or from the caller's runs beside it.
 * In bf16 the same reorders also round the weights to bfloat16.
 * Where the primitives read x and dy in another layout or type than the
 * caller's (bf16, or Winograd's blocked nChw16c), the op keeps copies of
 * both in that form; where they write y and dx blocked, those go through
 * the copy buffers and are reordered out into the caller's. */
#include "backend/cpu/cpu.h"

#include <string.h>

enum {
  FWD = CPU_PASS_FORWARD,
  BWD_DATA = CPU_PASS_BACKWARD_DATA,
  BWD_WEIGHTS = CPU_PASS_BACKWARD_WEIGHTS,
  REORDER,              /* prim[REORDER + i]: weights for primitive i */
  SRC_IN = REORDER + 3, /* x into op->src_copy */
  DIFF_DST_IN,          /* dy into op->diff_dst_copy */
  DST_OUT,              /* y out of op->diff_dst_copy */
  DIFF_SRC_OUT          /* dx out of op->src_copy */
};

/* Weights buffer of the layout primitive i chose, with its reorder, when
 * that differs from the plain one. The backward-weights reorder runs the
 * other way: from the chosen layout into the caller's dw. Backward data
 * in bf16 shares the forward's copy when both chose the same layout. */
static mxu_status plan_weights(mxu_op *op, int i,
                               const dnnl_memory_desc_t *plain,
                               const char *name) {
  int arg = i == BWD_WEIGHTS ? DNNL_ARG_DIFF_WEIGHTS : DNNL_ARG_WEIGHTS;
  const dnnl_memory_desc_t *chosen =
      dnnl_primitive_desc_query_md(op->prim[i].pd, dnnl_query_exec_arg_md, arg);
  if (!chosen || dnnl_memory_desc_equal(chosen, plain)) return MXU_OK;
  if (op->bf16 && i == BWD_DATA &&
      dnnl_memory_desc_equal(
          chosen, dnnl_primitive_desc_query_md(op->prim[FWD].pd,
                                               dnnl_query_exec_arg_md, arg))) {
    op->share_weights = 1;
    return MXU_OK;
  }
  size_t bytes = dnnl_memory_desc_get_size(chosen);
  op->blocked[i] = mxu_aligned_alloc(bytes);
  if (!op->blocked[i])
    return mxu_fail(MXU_ERR_NOMEM,
                    "onednn: %s: no memory for %zu bytes of "
                    "reordered weights",
                    name, bytes);
  int out = i == BWD_WEIGHTS;
  return cpu_reorder_create(&op->prim[REORDER + i], out ? chosen : plain,
                            out ? plain : chosen, name, "weights");
}

/* Whether a conversion between the caller's `plain` layout and the
 * primitive's `chosen` one is NHWC <-> nChw16c in f32 with whole blocks,
 * which layout.c's loops do (with n, c and h*w for them). */
static int own_convert_fits(const dnnl_memory_desc_t *plain,
                            const dnnl_memory_desc_t *chosen,
                            cpu_convert *convert) {
  dnnl_memory_desc_t nhwc, blocked;
  if (plain->ndims != 4 || plain->data_type != dnnl_f32 ||
      plain->dims[1] % 16 != 0)
    return 0;
  if (dnnl_memory_desc_init_by_tag(&nhwc, 4, plain->dims, dnnl_f32,
                                   dnnl_nhwc) != dnnl_success ||
      dnnl_memory_desc_init_by_tag(&blocked, 4, plain->dims, dnnl_f32,
                                   dnnl_nChw16c) != dnnl_success)
    return 0;
  if (!dnnl_memory_desc_equal(plain, &nhwc) ||
      !dnnl_memory_desc_equal(chosen, &blocked))
    return 0;
  convert->n = plain->dims[0];
  convert->c = plain->dims[1];
  convert->hw = plain->dims[2] * plain->dims[3];
  return 1;
}

/* The conversion in slot (SRC_IN .. DIFF_SRC_OUT) between the caller's
 * layout and the primitive's: layout.c's loops where they fit, else a
 * oneDNN reorder in prim[slot]. */
static mxu_status plan_convert(mxu_op *op, int slot,
                               const dnnl_memory_desc_t *plain,
                               const dnnl_memory_desc_t *chosen,
                               const char *name) {
  cpu_convert *convert = &op->convert[slot - SRC_IN];
  int in = slot < DST_OUT;
  int own = own_convert_fits(plain, chosen, convert);
  convert->how = own ? CPU_CONVERT_OWN : CPU_CONVERT_ONEDNN;
  if (own) return MXU_OK;
  return cpu_reorder_create(&op->prim[slot], in ? plain : chosen,
                            in ? chosen : plain, name,
                            in ? "copy in" : "copy out");
}

static int has_convert(const mxu_op *op, int slot) {
  return op->convert[slot - SRC_IN].how != CPU_CONVERT_NONE;
}

static void convert(mxu_op *op, int slot, const void *from, void *to) {
  const cpu_convert *c = &op->convert[slot - SRC_IN];
  if (c->how == CPU_CONVERT_OWN)
    cpu_layout_convert(from, to, c->n, c->hw, c->c, slot < DST_OUT);
  else
    cpu_run(&op->prim[slot], (const void *[]){from, to});
}

/* The layout primitive i reads or writes `arg` in, when it differs from
 * the caller's `plain`; NULL when they are the same. */
static const dnnl_memory_desc_t *
chosen_layout(const mxu_op *op, int i, int arg,
              const dnnl_memory_desc_t *plain) {
  const dnnl_memory_desc_t *md =
      dnnl_primitive_desc_query_md(op->prim[i].pd, dnnl_query_exec_arg_md, arg);
  return md && !dnnl_memory_desc_equal(md, plain) ? md : NULL;
}

/* A copy of the tensor primitive i reads as arg (x or dy) in its layout
 * and type, with the conversion (slot) from the caller's; none where the
 * primitive reads the caller's buffer as it is. */
static mxu_status plan_copy(mxu_op *op, int i, int arg, int slot,
                            const dnnl_memory_desc_t *plain, void **copy,
                            size_t *bytes, const char *name) {
  const dnnl_memory_desc_t *md = chosen_layout(op, i, arg, plain);
  if (!md) return MXU_OK;
  *bytes = dnnl_memory_desc_get_size(md);
  *copy = mxu_aligned_alloc(*bytes);
  if (!*copy)
    return mxu_fail(MXU_ERR_NOMEM,
                    "onednn: %s: no memory for a %zu-byte copy of %s", name,
                    *bytes, arg == DNNL_ARG_SRC ? "x" : "dy");
  return plan_convert(op, slot, plain, md, name);
}

/* Where primitive i writes arg (y or dx) in its own layout, it writes
 * into one of the op's copy buffers (free at that moment, via_bytes
 * long) and the conversion in slot moves it out into the caller's. */
static mxu_status plan_out(mxu_op *op, int i, int arg, int slot,
                           const dnnl_memory_desc_t *plain, size_t via_bytes,
                           const char *name) {
  const dnnl_memory_desc_t *md = chosen_layout(op, i, arg, plain);
  if (!md) return MXU_OK;
  if (dnnl_memory_desc_get_size(md) > via_bytes)
    return mxu_fail(MXU_ERR_UNSUPPORTED,
                    "onednn: %s: %s is written in a layout its inputs lack",
                    name, arg == DNNL_ARG_DST ? "y" : "dx");
  return plan_convert(op, slot, plain, md, name);
}

/* Backward weights reads x and dy through the copies the forward and
 * backward data made, so it must read them in the same layouts. */
static mxu_status check_shared_layouts(const mxu_op *op, const char *name) {
  static const int args[2][2] = {{FWD, DNNL_ARG_SRC},
                                 {BWD_DATA, DNNL_ARG_DIFF_DST}};
  for (int k = 0; k < 2; k++) {
    int arg = args[k][1];
    const dnnl_memory_desc_t *theirs = dnnl_primitive_desc_query_md(
        op->prim[args[k][0]].pd, dnnl_query_exec_arg_md, arg);
    const dnnl_memory_desc_t *mine = dnnl_primitive_desc_query_md(
        op->prim[BWD_WEIGHTS].pd, dnnl_query_exec_arg_md, arg);
    if (!theirs || !mine || !dnnl_memory_desc_equal(theirs, mine))
      return mxu_fail(MXU_ERR_UNSUPPORTED,
                      "onednn: %s: backward weights reads %s in another "
                      "layout than the %s",
                      name, k ? "dy" : "x", k ? "backward data" : "forward");
  }
  return MXU_OK;
}

/* oneDNN falls back to its reference kernels where it has no bf16 one
 * (a CPU without AVX512_BF16 or AVX512 emulation): those are far slower
 * than f32, so bf16 is refused and the caller builds the f32 op. */
static mxu_status check_bf16_kernel(const mxu_op *op, int i, const char *name,
                                    const char *what) {
  const char *impl = NULL;
  if (!op->bf16) return MXU_OK;
  dnnl_primitive_desc_query(op->prim[i].pd, dnnl_query_impl_info_str, 0, &impl);
  if (impl && strncmp(impl, "ref", 3) != 0) return MXU_OK;
  return mxu_fail(MXU_ERR_UNSUPPORTED,
                  "onednn: %s: %s: no fast bf16 kernel (%s)", name, what,
                  impl ? impl : "unknown");
}

int cpu_weighted_generic(const mxu_op *op, cpu_pass pass) {
  const char *impl = NULL;
  dnnl_primitive_desc_query(op->prim[pass].pd, dnnl_query_impl_info_str, 0,
                            &impl);
  return !impl || strstr(impl, "gemm") || strncmp(impl, "ref", 3) == 0;
}

/* The caller's layouts of x and y. */
static const dnnl_memory_desc_t *plain_x(const cpu_weighted_descs *d) {
  return d->plain_x ? d->plain_x : d->plain_src;
}

static const dnnl_memory_desc_t *plain_y(const cpu_weighted_descs *d) {
  return d->plain_y ? d->plain_y : d->plain_dst;
}

static mxu_status forward_create(mxu_op *op, const cpu_weighted_descs *d,
                                 const char *name) {
  dnnl_alg_kind_t post;
  MXU_TRY(cpu_fused_alg(d->activation, name, &post));
  cpu_prim *p = &op->prim[FWD];
  MXU_TRY(cpu_prim_create(p, d->forward, post, NULL, name, "forward"));
  MXU_TRY(check_bf16_kernel(op, FWD, name, "forward"));
  MXU_TRY(cpu_prim_arg(p, DNNL_ARG_SRC, name));
  MXU_TRY(cpu_prim_arg(p, DNNL_ARG_WEIGHTS, name));
  if (d->has_bias) MXU_TRY(cpu_prim_arg(p, DNNL_ARG_BIAS, name));
  MXU_TRY(cpu_prim_arg(p, DNNL_ARG_DST, name));
  MXU_TRY(plan_copy(op, FWD, DNNL_ARG_SRC, SRC_IN, plain_x(d), &op->src_copy,
                    &op->src_copy_bytes, name));
  return plan_weights(op, FWD, d->plain_weights, name);
}

static mxu_status backward_data_create(mxu_op *op, const cpu_weighted_descs *d,
                                       const char *name) {
  cpu_prim *p = &op->prim[BWD_DATA];
  MXU_TRY(cpu_prim_create(p, d->backward_data, dnnl_alg_kind_undef,
                          &op->prim[FWD], name, "backward_data"));
  MXU_TRY(check_bf16_kernel(op, BWD_DATA, name, "backward_data"));
  MXU_TRY(cpu_prim_arg(p, DNNL_ARG_DIFF_DST, name));
  MXU_TRY(cpu_prim_arg(p, DNNL_ARG_WEIGHTS, name));
  MXU_TRY(cpu_prim_arg(p, DNNL_ARG_DIFF_SRC, name));
  MXU_TRY(plan_copy(op, BWD_DATA, DNNL_ARG_DIFF_DST, DIFF_DST_IN, d->plain_dst,
                    &op->diff_dst_copy, &op->diff_dst_copy_bytes, name));
  /* y is written before the step's dy exists, and dx after its x was last
   * read (backward weights), or x is copied again: see below. */
  MXU_TRY(plan_out(op, FWD, DNNL_ARG_DST, DST_OUT, plain_y(d),
                   op->diff_dst_copy_bytes, name));
  MXU_TRY(plan_out(op, BWD_DATA, DNNL_ARG_DIFF_SRC, DIFF_SRC_OUT, d->plain_src,
                   op->src_copy_bytes, name));
  return plan_weights(op, BWD_DATA, d->plain_weights, name);
}

static mxu_status backward_weights_create(mxu_op *op,
                                          const cpu_weighted_descs *d,
                                          const char *name) {
  cpu_prim *p = &op->prim[BWD_WEIGHTS];
  MXU_TRY(cpu_prim_create(p, d->backward_weights, dnnl_alg_kind_undef,
                          &op->prim[FWD], name, "backward_weights"));
  MXU_TRY(check_bf16_kernel(op, BWD_WEIGHTS, name, "backward_weights"));
  MXU_TRY(check_shared_layouts(op, name));
  MXU_TRY(cpu_prim_arg(p, DNNL_ARG_SRC, name));
  MXU_TRY(cpu_prim_arg(p, DNNL_ARG_DIFF_DST, name));
  MXU_TRY(cpu_prim_arg(p, DNNL_ARG_DIFF_WEIGHTS, name));
  if (d->has_bias) MXU_TRY(cpu_prim_arg(p, DNNL_ARG_DIFF_BIAS, name));
  return plan_weights(op, BWD_WEIGHTS, d->plain_weights, name);
}

static mxu_status build(mxu_op *op, const cpu_weighted_descs *d,
                        const char *name) {
  op->has_bias = d->has_bias;
  op->bf16 = d->bf16;
  MXU_TRY(forward_create(op, d, name));
  MXU_TRY(backward_data_create(op, d, name));
  MXU_TRY(backward_weights_create(op, d, name));
  return cpu_prims_share_scratch(op->prim, CPU_MAX_PRIMS, name);
}

mxu_status cpu_weighted_create(const cpu_weighted_descs *descs,
                               const char *name, mxu_op **out) {
  mxu_op *op;
  MXU_TRY(cpu_op_alloc(&op, name));
  return cpu_op_finish(op, build(op, descs, name), out);
}

/* The weights primitive i reads: w itself, or w reordered into its
 * layout. Reordered on every call (a few KB to MB, cheap next to the
 * convolution), so nothing assumes w is unchanged between calls; only a
 * bf16 backward data may reuse its forward's copy, within one step. */
static const void *weights_for(mxu_op *op, int i, const float *w) {
  if (!op->blocked[i]) return w;
  cpu_run(&op->prim[REORDER + i], (const void *[]){w, op->blocked[i]});
  return op->blocked[i];
}

/* x or dy as the primitives read it: the caller's buffer itself, or the
 * op's copy (converted in `slot`) when made from this buffer, else a new
 * one. x's copy comes from the forward; dy's from whichever backward runs
 * first, unless the caller wrote dy into the copy itself (see
 * cpu_weighted_dst_layout). */
static const void *input_for(mxu_op *op, int slot, const float *from,
                             void *copy, const void **made_from) {
  if (!copy || from == copy) return from;
  if (*made_from != from) {
    convert(op, slot, from, copy);
    *made_from = from;
  }
  return copy;
}

static const void *src_for(mxu_op *op, const float *x) {
  return input_for(op, SRC_IN, x, op->src_copy, &op->src_from);
}

static const void *diff_dst_for(mxu_op *op, const float *dy) {
  return input_for(op, DIFF_DST_IN, dy, op->diff_dst_copy, &op->diff_dst_from);
}

/* Backward data's weights; in bf16 the forward's rounded copy when both
 * primitives read one layout and it was made from w. */
static const void *backward_data_weights(mxu_op *op, const float *w) {
  if (!op->share_weights) return weights_for(op, BWD_DATA, w);
  if (op->weights_from != w) {
    weights_for(op, FWD, w);
    op->weights_from = w;
  }
  return op->blocked[FWD];
}

void cpu_weighted_new_inputs(mxu_op *op) {
  op->src_from = op->weights_from = op->diff_dst_from = NULL;
}

void cpu_weighted_forward(mxu_op *op, const float *x, const float *w,
                          const float *b, float *y) {
  /* A forward starts a step: the copies of the last one are stale. */
  cpu_weighted_new_inputs(op);
  const void *xs = src_for(op, x);
  const void *wf = weights_for(op, FWD, w);
  op->weights_from = w;
  int out = has_convert(op, DST_OUT) && y != op->diff_dst_copy;
  void *to = out ? op->diff_dst_copy : y;
  if (op->has_bias)
    cpu_run(&op->prim[FWD], (const void *[]){xs, wf, b, to});
  else
    cpu_run(&op->prim[FWD], (const void *[]){xs, wf, to});
  if (out) convert(op, DST_OUT, to, y);
}

void cpu_weighted_backward_data(mxu_op *op, const float *dy, const float *w,
                                float *dx) {
  const void *dys = diff_dst_for(op, dy);
  const void *wb = backward_data_weights(op, w);
  if (!has_convert(op, DIFF_SRC_OUT)) {
    cpu_run(&op->prim[BWD_DATA], (const void *[]){dys, wb, dx});
    return;
  }
  /* dx passes through x's copy, which is then no longer x's. */
  op->src_from = NULL;
  cpu_run(&op->prim[BWD_DATA], (const void *[]){dys, wb, op->src_copy});
  convert(op, DIFF_SRC_OUT, op->src_copy, dx);
}

/* Without a bias there is no fourth argument, so db (NULL) is not read. */
void cpu_weighted_backward_weights(mxu_op *op, const float *x, const float *dy,
                                   float *dw, float *db) {
  void *blocked = op->blocked[BWD_WEIGHTS];
  const void *xs = src_for(op, x), *dys = diff_dst_for(op, dy);
  if (op->weights_blocks)
    cpu_weighted_blocks_run(op, xs, dys, blocked ? blocked : dw, db);
  else
    cpu_run(&op->prim[BWD_WEIGHTS],
            (const void *[]){xs, dys, blocked ? blocked : dw, db});
  if (blocked)
    cpu_run(&op->prim[REORDER + BWD_WEIGHTS], (const void *[]){blocked, dw});
}

/* copy, where pass i's primitive reads arg from it as NHWC bfloat16. */
static uint16_t *nhwc_bf16(const mxu_op *op, int i, int arg, void *copy) {
  const dnnl_memory_desc_t *md = NULL;
  if (op->bf16 && copy)
    md = dnnl_primitive_desc_query_md(op->prim[i].pd, dnnl_query_exec_arg_md,
                                      arg);
  dnnl_memory_desc_t nhwc;
  if (!md || md->ndims != 4 ||
      dnnl_memory_desc_init_by_tag(&nhwc, 4, md->dims, dnnl_bf16, dnnl_nhwc) !=
          dnnl_success ||
      !dnnl_memory_desc_equal(md, &nhwc))
    return NULL;
  return copy;
}

uint16_t *cpu_weighted_bf16_dy(const mxu_op *op) {
  return nhwc_bf16(op, BWD_DATA, DNNL_ARG_DIFF_DST, op->diff_dst_copy);
}

uint16_t *cpu_weighted_bf16_x(const mxu_op *op) {
  return nhwc_bf16(op, BWD_WEIGHTS, DNNL_ARG_SRC, op->src_copy);
}

void cpu_weighted_made_x(mxu_op *op, const float *x) { op->src_from = x; }

int cpu_weighted_dst_layout(mxu_op *op, void **copy) {
  cpu_convert_how out = op->convert[DST_OUT - SRC_IN].how;
  cpu_convert_how in = op->convert[DIFF_DST_IN - SRC_IN].how;
  *copy = NULL;
  if (out == CPU_CONVERT_NONE) return 0;
  if (out != CPU_CONVERT_OWN || in != CPU_CONVERT_OWN) return -1;
  *copy = op->diff_dst_copy;
  return 1;
}
