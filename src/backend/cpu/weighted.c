/* weighted.c — the three primitives of a layer with weights (convolution
 * or inner product): forward with bias and activation fused as a post-op,
 * backward data and backward weights (+ bias), both hinted by the forward
 * pd so oneDNN picks matching implementations. */
#include "backend/cpu/cpu.h"

enum { FWD, BWD_DATA, BWD_WEIGHTS };

static mxu_status forward_create(mxu_op *op, const cpu_weighted_descs *d,
                                 const char *name) {
  dnnl_alg_kind_t post;
  MXU_TRY(cpu_fused_alg(d->activation, name, &post));
  cpu_prim *p = &op->prim[FWD];
  MXU_TRY(cpu_prim_create(p, d->forward, post, NULL, name, "forward"));
  MXU_TRY(cpu_prim_arg(p, DNNL_ARG_SRC, name));
  MXU_TRY(cpu_prim_arg(p, DNNL_ARG_WEIGHTS, name));
  if (d->has_bias) MXU_TRY(cpu_prim_arg(p, DNNL_ARG_BIAS, name));
  return cpu_prim_arg(p, DNNL_ARG_DST, name);
}

static mxu_status backward_data_create(mxu_op *op, const cpu_weighted_descs *d,
                                       const char *name) {
  cpu_prim *p = &op->prim[BWD_DATA];
  MXU_TRY(cpu_prim_create(p, d->backward_data, dnnl_alg_kind_undef,
                          &op->prim[FWD], name, "backward_data"));
  MXU_TRY(cpu_prim_arg(p, DNNL_ARG_DIFF_DST, name));
  MXU_TRY(cpu_prim_arg(p, DNNL_ARG_WEIGHTS, name));
  return cpu_prim_arg(p, DNNL_ARG_DIFF_SRC, name);
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
  return MXU_OK;
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

void cpu_weighted_forward(mxu_op *op, const float *x, const float *w,
                          const float *b, float *y) {
  if (op->has_bias)
    cpu_run(&op->prim[FWD], (const void *[]){x, w, b, y});
  else
    cpu_run(&op->prim[FWD], (const void *[]){x, w, y});
}

void cpu_weighted_backward_data(mxu_op *op, const float *dy, const float *w,
                                float *dx) {
  cpu_run(&op->prim[BWD_DATA], (const void *[]){dy, w, dx});
}

/* Without a bias there is no fourth argument, so db (NULL) is not read. */
void cpu_weighted_backward_weights(mxu_op *op, const float *x, const float *dy,
                                   float *dw, float *db) {
  cpu_run(&op->prim[BWD_WEIGHTS], (const void *[]){x, dy, dw, db});
}
