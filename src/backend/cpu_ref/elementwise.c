/* elementwise.c — cpu_ref's activations (also fused into conv and dense),
 * their derivatives written in terms of the forward's output as backend.h
 * asks, and the elementwise product dropout uses. */
#include "backend/cpu_ref/ref.h"

#include <math.h>

mxu_status mxu_ref_activation_create(const mxu_activation_desc *desc,
                                     mxu_op **out) {
  *out = NULL;
  if (desc->rows <= 0 || desc->cols <= 0 || desc->activation < MXU_LINEAR ||
      desc->activation > MXU_SOFTMAX)
    return mxu_fail(MXU_ERR_ARG, "cpu_ref: activation %d over %lld x %d values",
                    (int)desc->activation, (long long)desc->rows, desc->cols);
  MXU_TRY(mxu_ref_op_new(out));
  (*out)->desc.activation = *desc;
  return MXU_OK;
}

/* Softmax is not elementwise, so it has no entry here: callers never fuse
 * it (it maps to the identity so a stray caller is merely wrong, not UB). */
float mxu_ref_activate(mxu_activation activation, float x) {
  switch (activation) {
  case MXU_RELU: return x > 0.0f ? x : 0.0f;
  case MXU_SIGMOID: return (float)(1.0 / (1.0 + exp(-(double)x)));
  case MXU_TANH: return (float)tanh((double)x);
  case MXU_LINEAR:
  case MXU_SOFTMAX: break;
  }
  return x;
}

/* Shifting by the row maximum keeps exp from overflowing. */
static void softmax_row(int cols, const float *x, float *y) {
  float max = x[0];
  for (int j = 1; j < cols; j++)
    if (x[j] > max) max = x[j];
  double sum = 0.0;
  for (int j = 0; j < cols; j++) sum += exp((double)x[j] - max);
  for (int j = 0; j < cols; j++) y[j] = (float)(exp((double)x[j] - max) / sum);
}

void mxu_ref_activation_forward(mxu_op *op, const float *x, float *y) {
  const mxu_activation_desc *d = &op->desc.activation;
  if (d->activation == MXU_SOFTMAX) {
    for (int64_t r = 0; r < d->rows; r++)
      softmax_row(d->cols, x + r * d->cols, y + r * d->cols);
    return;
  }
  for (int64_t i = 0; i < d->rows * d->cols; i++)
    y[i] = mxu_ref_activate(d->activation, x[i]);
}

/* dy * dsoftmax: y * (dy - sum(dy * y)); the sum is taken before any dx is
 * written because dx may be dy. */
static void softmax_row_backward(int cols, const float *y, const float *dy,
                                 float *dx) {
  double dot = 0.0;
  for (int j = 0; j < cols; j++) dot += (double)dy[j] * y[j];
  for (int j = 0; j < cols; j++) dx[j] = (float)(y[j] * (dy[j] - dot));
}

static float derivative_times(mxu_activation activation, float y, float dy) {
  switch (activation) {
  case MXU_RELU: return y > 0.0f ? dy : 0.0f;
  case MXU_SIGMOID: return (float)((double)dy * y * (1.0 - y));
  case MXU_TANH: return (float)((double)dy * (1.0 - (double)y * y));
  case MXU_LINEAR:
  case MXU_SOFTMAX: break;
  }
  return dy;
}

void mxu_ref_activation_backward(mxu_op *op, const float *y, const float *dy,
                                 float *dx) {
  const mxu_activation_desc *d = &op->desc.activation;
  if (d->activation == MXU_SOFTMAX) {
    for (int64_t r = 0; r < d->rows; r++)
      softmax_row_backward(d->cols, y + r * d->cols, dy + r * d->cols,
                           dx + r * d->cols);
    return;
  }
  for (int64_t i = 0; i < d->rows * d->cols; i++)
    dx[i] = derivative_times(d->activation, y[i], dy[i]);
}

void mxu_ref_multiply(int64_t count, const float *a, const float *b, float *y) {
  for (int64_t i = 0; i < count; i++) y[i] = a[i] * b[i];
}
