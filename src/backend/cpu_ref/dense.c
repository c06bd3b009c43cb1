/* dense.c — cpu_ref's fully connected layer: one textbook matrix product per
 * kernel over Keras' (in, units) kernel, each dot product accumulated in
 * double. */
#include "backend/cpu_ref/ref.h"

mxu_status mxu_ref_dense_create(const mxu_dense_desc *desc, mxu_op **out) {
  *out = NULL;
  if (desc->n <= 0 || desc->in <= 0 || desc->out <= 0)
    return mxu_fail(MXU_ERR_ARG, "cpu_ref: dense: batch %d, units %d->%d",
                    desc->n, desc->in, desc->out);
  MXU_TRY(mxu_ref_check_fused("dense", desc->activation));
  MXU_TRY(mxu_ref_op_new(out));
  (*out)->desc.dense = *desc;
  return MXU_OK;
}

void mxu_ref_dense_forward(mxu_op *op, const float *x, const float *w,
                           const float *b, float *y) {
  const mxu_dense_desc *d = &op->desc.dense;
  for (int n = 0; n < d->n; n++)
    for (int o = 0; o < d->out; o++) {
      double sum = d->has_bias ? b[o] : 0.0;
      for (int i = 0; i < d->in; i++)
        sum += (double)x[(int64_t)n * d->in + i] * w[(int64_t)i * d->out + o];
      y[(int64_t)n * d->out + o] = mxu_ref_activate(d->activation, (float)sum);
    }
}

/* dx = dy w^T */
void mxu_ref_dense_backward_data(mxu_op *op, const float *dy, const float *w,
                                 float *dx) {
  const mxu_dense_desc *d = &op->desc.dense;
  for (int n = 0; n < d->n; n++)
    for (int i = 0; i < d->in; i++) {
      double sum = 0.0;
      for (int o = 0; o < d->out; o++)
        sum += (double)dy[(int64_t)n * d->out + o] * w[(int64_t)i * d->out + o];
      dx[(int64_t)n * d->in + i] = (float)sum;
    }
}

/* dw = x^T dy, db = column sums of dy */
void mxu_ref_dense_backward_weights(mxu_op *op, const float *x, const float *dy,
                                    float *dw, float *db) {
  const mxu_dense_desc *d = &op->desc.dense;
  for (int i = 0; i < d->in; i++)
    for (int o = 0; o < d->out; o++) {
      double sum = 0.0;
      for (int n = 0; n < d->n; n++)
        sum += (double)x[(int64_t)n * d->in + i] * dy[(int64_t)n * d->out + o];
      dw[(int64_t)i * d->out + o] = (float)sum;
    }
  for (int o = 0; db && o < d->out; o++) {
    double sum = 0.0;
    for (int n = 0; n < d->n; n++) sum += dy[(int64_t)n * d->out + o];
    db[o] = (float)sum;
  }
}
