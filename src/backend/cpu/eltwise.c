/* eltwise.c — standalone activations on oneDNN over [rows, cols]: relu,
 * sigmoid and tanh as eltwise primitives, softmax over each row; backward
 * from the forward's output y. Linear is a copy and needs no primitive. */
#include "backend/cpu/cpu.h"

#include <string.h>

enum { ACT_FWD, ACT_BWD };

static const char ACT[] = "activation";

/* The *_use_dst_for_bwd algorithms compute the derivative from y, which is
 * what the table hands backward; forward uses the same algorithm so the
 * backward's hint matches it. */
static dnnl_alg_kind_t eltwise_alg(mxu_activation activation) {
  switch (activation) {
  case MXU_RELU: return dnnl_eltwise_relu_use_dst_for_bwd;
  case MXU_SIGMOID: return dnnl_eltwise_logistic_use_dst_for_bwd;
  case MXU_TANH: return dnnl_eltwise_tanh_use_dst_for_bwd;
  default: return dnnl_alg_kind_undef;
  }
}

/* Either kind of op desc; oneDNN tells them apart by their first field. */
typedef union act_desc {
  dnnl_eltwise_desc_t eltwise;
  dnnl_softmax_desc_t softmax;
} act_desc;

static mxu_status descs_init(const mxu_activation_desc *d,
                             const dnnl_memory_desc_t *md, act_desc *fwd,
                             act_desc *bwd) {
  if (d->activation == MXU_SOFTMAX) {
    CPU_TRY(ACT, dnnl_softmax_forward_desc_init, &fwd->softmax,
            dnnl_forward_training, md, 1);
    CPU_TRY(ACT, dnnl_softmax_backward_desc_init, &bwd->softmax, md, md, 1);
    return MXU_OK;
  }
  dnnl_alg_kind_t alg = eltwise_alg(d->activation);
  if (alg == dnnl_alg_kind_undef)
    return mxu_fail(MXU_ERR_ARG, "onednn: %s: unknown activation %d", ACT,
                    (int)d->activation);
  CPU_TRY(ACT, dnnl_eltwise_forward_desc_init, &fwd->eltwise,
          dnnl_forward_training, alg, md, 0.0f, 0.0f);
  CPU_TRY(ACT, dnnl_eltwise_backward_desc_init, &bwd->eltwise, alg, md, md,
          0.0f, 0.0f);
  return MXU_OK;
}

static mxu_status act_build(mxu_op *op, const mxu_activation_desc *d) {
  dnnl_dims_t dims = {d->rows, d->cols};
  dnnl_memory_desc_t md;
  MXU_TRY(cpu_md(&md, 2, dims, dnnl_nc, ACT));
  act_desc fwd, bwd;
  MXU_TRY(descs_init(d, &md, &fwd, &bwd));
  cpu_prim *f = &op->prim[ACT_FWD], *b = &op->prim[ACT_BWD];
  MXU_TRY(cpu_prim_create(f, &fwd, dnnl_alg_kind_undef, NULL, ACT, "forward"));
  MXU_TRY(cpu_prim_arg(f, DNNL_ARG_SRC, ACT));
  MXU_TRY(cpu_prim_arg(f, DNNL_ARG_DST, ACT));
  MXU_TRY(cpu_prim_create(b, &bwd, dnnl_alg_kind_undef, f, ACT, "backward"));
  MXU_TRY(cpu_prim_arg(b, DNNL_ARG_DST, ACT));
  MXU_TRY(cpu_prim_arg(b, DNNL_ARG_DIFF_DST, ACT));
  return cpu_prim_arg(b, DNNL_ARG_DIFF_SRC, ACT);
}

mxu_status cpu_activation_create(const mxu_activation_desc *desc,
                                 mxu_op **out) {
  mxu_op *op;
  MXU_TRY(cpu_op_alloc(&op, ACT));
  op->activation = desc->activation;
  op->count = desc->rows * desc->cols;
  return cpu_op_finish(
      op, desc->activation == MXU_LINEAR ? MXU_OK : act_build(op, desc), out);
}

void cpu_activation_forward(mxu_op *op, const float *x, float *y) {
  if (op->activation != MXU_LINEAR)
    cpu_run(&op->prim[ACT_FWD], (const void *[]){x, y});
  else if (x != y)
    memcpy(y, x, (size_t)op->count * sizeof *y);
}

/* Elementwise, so dx may alias dy: oneDNN reads each dy before writing
 * the same dx. */
void cpu_activation_backward(mxu_op *op, const float *y, const float *dy,
                             float *dx) {
  if (op->activation != MXU_LINEAR)
    cpu_run(&op->prim[ACT_BWD], (const void *[]){y, dy, dx});
  else if (dx != dy)
    memcpy(dx, dy, (size_t)op->count * sizeof *dx);
}
