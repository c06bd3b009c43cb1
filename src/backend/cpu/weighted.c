/* weighted.c — the three primitives of a layer with weights (convolution
 * or inner product): forward with bias and activation fused as a post-op,
 * backward data and backward weights (+ bias), both hinted by the forward
 * pd so oneDNN picks matching implementations. Where a primitive chose its
 * own weights layout, a reorder to or from the caller's runs beside it.
 * In bf16 the same reorders also round the weights to bfloat16, and two
 * more round x and dy into bfloat16 copies the op owns. */
#include "backend/cpu/cpu.h"

#include <string.h>

enum {
  FWD,
  BWD_DATA,
  BWD_WEIGHTS,
  REORDER,                   /* prim[REORDER + i]: weights for primitive i */
  TO_BF16_SRC = REORDER + 3, /* x into op->src_bf16 */
  TO_BF16_DIFF_DST           /* dy into op->diff_dst_bf16 */
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

/* A bf16 copy of the tensor primitive i reads as arg (x or dy), with the
 * reorder (prim[slot]) that rounds the caller's f32 into it. */
static mxu_status plan_bf16_copy(mxu_op *op, int i, int arg, int slot,
                                 const dnnl_memory_desc_t *plain, void **copy,
                                 const char *name) {
  const dnnl_memory_desc_t *md =
      dnnl_primitive_desc_query_md(op->prim[i].pd, dnnl_query_exec_arg_md, arg);
  size_t bytes = md ? dnnl_memory_desc_get_size(md) : 0;
  *copy = bytes ? mxu_aligned_alloc(bytes) : NULL;
  if (!*copy)
    return mxu_fail(MXU_ERR_NOMEM,
                    "onednn: %s: no memory for a %zu-byte bf16 copy", name,
                    bytes);
  return cpu_reorder_create(&op->prim[slot], plain, md, name, "to bf16");
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
  if (op->bf16)
    MXU_TRY(plan_bf16_copy(op, FWD, DNNL_ARG_SRC, TO_BF16_SRC, d->plain_src,
                           &op->src_bf16, name));
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
  if (op->bf16)
    MXU_TRY(plan_bf16_copy(op, BWD_DATA, DNNL_ARG_DIFF_DST, TO_BF16_DIFF_DST,
                           d->plain_dst, &op->diff_dst_bf16, name));
  return plan_weights(op, BWD_DATA, d->plain_weights, name);
}

static mxu_status backward_weights_create(mxu_op *op,
                                          const cpu_weighted_descs *d,
                                          const char *name) {
  cpu_prim *p = &op->prim[BWD_WEIGHTS];
  MXU_TRY(cpu_prim_create(p, d->backward_weights, dnnl_alg_kind_undef,
                          &op->prim[FWD], name, "backward_weights"));
  MXU_TRY(check_bf16_kernel(op, BWD_WEIGHTS, name, "backward_weights"));
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
  return backward_weights_create(op, d, name);
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

/* x as the primitives read it: itself in f32; in bf16 the forward's copy
 * when made from this buffer, else a new one. */
static const void *src_for(mxu_op *op, const float *x) {
  if (!op->bf16) return x;
  if (op->src_from != x) {
    cpu_run(&op->prim[TO_BF16_SRC], (const void *[]){x, op->src_bf16});
    op->src_from = x;
  }
  return op->src_bf16;
}

/* dy likewise: rounded once per step, by whichever backward runs first. */
static const void *diff_dst_for(mxu_op *op, const float *dy) {
  if (!op->bf16) return dy;
  if (op->diff_dst_from != dy) {
    cpu_run(&op->prim[TO_BF16_DIFF_DST],
            (const void *[]){dy, op->diff_dst_bf16});
    op->diff_dst_from = dy;
  }
  return op->diff_dst_bf16;
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

void cpu_weighted_forward(mxu_op *op, const float *x, const float *w,
                          const float *b, float *y) {
  /* A forward starts a step: the copies of the last one are stale. */
  op->src_from = op->weights_from = op->diff_dst_from = NULL;
  const void *xs = src_for(op, x);
  const void *wf = weights_for(op, FWD, w);
  op->weights_from = w;
  if (op->has_bias)
    cpu_run(&op->prim[FWD], (const void *[]){xs, wf, b, y});
  else
    cpu_run(&op->prim[FWD], (const void *[]){xs, wf, y});
}

void cpu_weighted_backward_data(mxu_op *op, const float *dy, const float *w,
                                float *dx) {
  const void *dys = diff_dst_for(op, dy);
  const void *wb = backward_data_weights(op, w);
  cpu_run(&op->prim[BWD_DATA], (const void *[]){dys, wb, dx});
}

/* Without a bias there is no fourth argument, so db (NULL) is not read. */
void cpu_weighted_backward_weights(mxu_op *op, const float *x, const float *dy,
                                   float *dw, float *db) {
  void *blocked = op->blocked[BWD_WEIGHTS];
  const void *xs = src_for(op, x), *dys = diff_dst_for(op, dy);
  cpu_run(&op->prim[BWD_WEIGHTS],
          (const void *[]){xs, dys, blocked ? blocked : dw, db});
  if (blocked)
    cpu_run(&op->prim[REORDER + BWD_WEIGHTS], (const void *[]){blocked, dw});
}
