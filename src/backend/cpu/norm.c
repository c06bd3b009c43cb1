/* norm.c — batch normalisation on oneDNN over [rows, c] (rows = n*h*w of
 * an NHWC activation), with separate gamma (scale) and beta (shift) arrays:
 * training, inference on given statistics, and the full backward with
 * dgamma and dbeta.
 *
 * The data is described as NHWC [rows, c, 1, 1], the same bytes as a 2-D
 * 'nc' tensor: oneDNN 2.6 runs 'nc' through its generic ncsp kernel, about
 * 20x slower than the JIT nspc one it picks for the 4-D view. */
#include "backend/cpu/cpu.h"

enum { BN_TRAIN, BN_INFER, BN_BWD };

static const char BN[] = "batchnorm";

static const unsigned BN_FLAGS = dnnl_use_scale | dnnl_use_shift;

/* Training writes the batch mean and variance (oneDNN's is the biased
 * one, which is what Keras normalises with); inference reads the moving
 * ones. The argument lists are in the order cpu_run's callers pass
 * buffers. */
static mxu_status forward_create(mxu_op *op, const dnnl_memory_desc_t *md,
                                 float epsilon, int training) {
  static const int train_args[] = {DNNL_ARG_SRC,   DNNL_ARG_SCALE,
                                   DNNL_ARG_SHIFT, DNNL_ARG_DST,
                                   DNNL_ARG_MEAN,  DNNL_ARG_VARIANCE};
  static const int infer_args[] = {DNNL_ARG_SRC,      DNNL_ARG_SCALE,
                                   DNNL_ARG_SHIFT,    DNNL_ARG_MEAN,
                                   DNNL_ARG_VARIANCE, DNNL_ARG_DST};
  dnnl_batch_normalization_desc_t bd;
  CPU_TRY(BN, dnnl_batch_normalization_forward_desc_init, &bd,
          training ? dnnl_forward_training : dnnl_forward_inference, md,
          epsilon, training ? BN_FLAGS : BN_FLAGS | dnnl_use_global_stats);
  cpu_prim *p = &op->prim[training ? BN_TRAIN : BN_INFER];
  MXU_TRY(cpu_prim_create(p, &bd, dnnl_alg_kind_undef, NULL, BN,
                          training ? "forward_training" : "forward_inference"));
  const int *args = training ? train_args : infer_args;
  for (size_t i = 0; i < sizeof train_args / sizeof *train_args; i++)
    MXU_TRY(cpu_prim_arg(p, args[i], BN));
  return MXU_OK;
}

/* prop_kind backward (not backward_data) so dgamma and dbeta come out. */
static mxu_status backward_create(mxu_op *op, const dnnl_memory_desc_t *md,
                                  float epsilon) {
  dnnl_batch_normalization_desc_t bd;
  CPU_TRY(BN, dnnl_batch_normalization_backward_desc_init, &bd, dnnl_backward,
          md, md, epsilon, BN_FLAGS);
  cpu_prim *p = &op->prim[BN_BWD];
  MXU_TRY(cpu_prim_create(p, &bd, dnnl_alg_kind_undef, &op->prim[BN_TRAIN], BN,
                          "backward"));
  static const int args[] = {
      DNNL_ARG_SRC,      DNNL_ARG_DIFF_DST,   DNNL_ARG_SCALE,
      DNNL_ARG_SHIFT,    DNNL_ARG_MEAN,       DNNL_ARG_VARIANCE,
      DNNL_ARG_DIFF_SRC, DNNL_ARG_DIFF_SCALE, DNNL_ARG_DIFF_SHIFT};
  for (size_t i = 0; i < sizeof args / sizeof *args; i++)
    MXU_TRY(cpu_prim_arg(p, args[i], BN));
  return MXU_OK;
}

static mxu_status bn_build(mxu_op *op, const mxu_batchnorm_desc *d) {
  dnnl_dims_t dims = {d->rows, d->c, 1, 1};
  dnnl_memory_desc_t md;
  MXU_TRY(cpu_md(&md, 4, dims, dnnl_nhwc, BN));
  MXU_TRY(forward_create(op, &md, d->epsilon, 1));
  MXU_TRY(forward_create(op, &md, d->epsilon, 0));
  return backward_create(op, &md, d->epsilon);
}

mxu_status cpu_batchnorm_create(const mxu_batchnorm_desc *desc, mxu_op **out) {
  mxu_op *op;
  MXU_TRY(cpu_op_alloc(&op, BN));
  return cpu_op_finish(op, bn_build(op, desc), out);
}

void cpu_batchnorm_forward_training(mxu_op *op, const float *x,
                                    const float *gamma, const float *beta,
                                    float *y, float *mean, float *var) {
  cpu_run(&op->prim[BN_TRAIN], (const void *[]){x, gamma, beta, y, mean, var});
}

void cpu_batchnorm_forward_inference(mxu_op *op, const float *x,
                                     const float *gamma, const float *beta,
                                     const float *mean, const float *var,
                                     float *y) {
  cpu_run(&op->prim[BN_INFER], (const void *[]){x, gamma, beta, mean, var, y});
}

void cpu_batchnorm_backward(mxu_op *op, const float *x, const float *dy,
                            const float *gamma, const float *mean,
                            const float *var, float *dx, float *dgamma,
                            float *dbeta) {
  /* oneDNN 2.6 counts SHIFT among the backward's inputs (execute fails
   * with invalid_arguments without it) although no gradient depends on
   * beta; gamma, of the same shape, stands in for it. */
  cpu_run(&op->prim[BN_BWD],
          (const void *[]){x, dy, gamma, gamma, mean, var, dx, dgamma, dbeta});
}
