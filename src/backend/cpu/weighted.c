/* weighted.c — the three primitives of a layer with weights (convolution
 * or inner product): forward with bias and activation fused as a post-op,
 * backward data and backward weights (+ bias), both hinted by the forward
 * pd so oneDNN picks matching implementations. Where a primitive chose its
 * own weights layout, a reorder to or from the caller's runs beside it. */
#include "backend/cpu/cpu.h"

enum { FWD, BWD_DATA, BWD_WEIGHTS, REORDER }; /* prim[REORDER + i]: for i */

/* Weights buffer of the layout primitive i chose, with its reorder, when
 * that differs from the plain one. The backward-weights reorder runs the
 * other way: from the chosen layout into the caller's dw. */
static mxu_status plan_weights(mxu_op *op, int i,
                               const dnnl_memory_desc_t *plain,
                               const char *name) {
  int arg = i == BWD_WEIGHTS ? DNNL_ARG_DIFF_WEIGHTS : DNNL_ARG_WEIGHTS;
  const dnnl_memory_desc_t *chosen =
      dnnl_primitive_desc_query_md(op->prim[i].pd, dnnl_query_exec_arg_md, arg);
  if (!chosen || dnnl_memory_desc_equal(chosen, plain)) return MXU_OK;
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

static mxu_status forward_create(mxu_op *op, const cpu_weighted_descs *d,
                                 const char *name) {
  dnnl_alg_kind_t post;
  MXU_TRY(cpu_fused_alg(d->activation, name, &post));
  cpu_prim *p = &op->prim[FWD];
  MXU_TRY(cpu_prim_create(p, d->forward, post, NULL, name, "forward"));
  MXU_TRY(cpu_prim_arg(p, DNNL_ARG_SRC, name));
  MXU_TRY(cpu_prim_arg(p, DNNL_ARG_WEIGHTS, name));
  if (d->has_bias) MXU_TRY(cpu_prim_arg(p, DNNL_ARG_BIAS, name));
  MXU_TRY(cpu_prim_arg(p, DNNL_ARG_DST, name));
  return plan_weights(op, FWD, d->plain_weights, name);
}

static mxu_status backward_data_create(mxu_op *op, const cpu_weighted_descs *d,
                                       const char *name) {
  cpu_prim *p = &op->prim[BWD_DATA];
  MXU_TRY(cpu_prim_create(p, d->backward_data, dnnl_alg_kind_undef,
                          &op->prim[FWD], name, "backward_data"));
  MXU_TRY(cpu_prim_arg(p, DNNL_ARG_DIFF_DST, name));
  MXU_TRY(cpu_prim_arg(p, DNNL_ARG_WEIGHTS, name));
  MXU_TRY(cpu_prim_arg(p, DNNL_ARG_DIFF_SRC, name));
  return plan_weights(op, BWD_DATA, d->plain_weights, name);
}

static mxu_status backward_weights_create(mxu_op *op,
                                          const cpu_weighted_descs *d,
                                          const char *name) {
  cpu_prim *p = &op->prim[BWD_WEIGHTS];
  MXU_TRY(cpu_prim_create(p, d->backward_weights, dnnl_alg_kind_undef,
                          &op->prim[FWD], name, "backward_weights"));
  MXU_TRY(cpu_prim_arg(p, DNNL_ARG_SRC, name));
  MXU_TRY(cpu_prim_arg(p, DNNL_ARG_DIFF_DST, name));
  MXU_TRY(cpu_prim_arg(p, DNNL_ARG_DIFF_WEIGHTS, name));
  if (d->has_bias) MXU_TRY(cpu_prim_arg(p, DNNL_ARG_DIFF_BIAS, name));
  return plan_weights(op, BWD_WEIGHTS, d->plain_weights, name);
}

static mxu_status build(mxu_op *op, const cpu_weighted_descs *d,
                        const char *name) {
  op->has_bias = d->has_bias;
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
 * convolution), so nothing assumes w is unchanged between calls. */
static const void *weights_for(mxu_op *op, int i, const float *w) {
  if (!op->blocked[i]) return w;
  cpu_run(&op->prim[REORDER + i], (const void *[]){w, op->blocked[i]});
  return op->blocked[i];
}

void cpu_weighted_forward(mxu_op *op, const float *x, const float *w,
                          const float *b, float *y) {
  const void *wf = weights_for(op, FWD, w);
  if (op->has_bias)
    cpu_run(&op->prim[FWD], (const void *[]){x, wf, b, y});
  else
    cpu_run(&op->prim[FWD], (const void *[]){x, wf, y});
}

void cpu_weighted_backward_data(mxu_op *op, const float *dy, const float *w,
                                float *dx) {
  const void *wb = weights_for(op, BWD_DATA, w);
  cpu_run(&op->prim[BWD_DATA], (const void *[]){dy, wb, dx});
}

/* Without a bias there is no fourth argument, so db (NULL) is not read. */
void cpu_weighted_backward_weights(mxu_op *op, const float *x, const float *dy,
                                   float *dw, float *db) {
  void *blocked = op->blocked[BWD_WEIGHTS];
  cpu_run(&op->prim[BWD_WEIGHTS],
          (const void *[]){x, dy, blocked ? blocked : dw, db});
  if (blocked)
    cpu_run(&op->prim[REORDER + BWD_WEIGHTS], (const void *[]){blocked, dw});
}
