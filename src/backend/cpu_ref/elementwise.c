/* elementwise.c — cpu_ref's activations (the fusable ones are also fused
 * into conv and dense), their derivatives (in terms of the forward's
 * output y for the fusable ones, as backend.h allows, of its input x for
 * the rest), and the elementwise product dropout uses. In double, as the
 * reference the fast backend is checked against. */
#include "backend/cpu_ref/ref.h"

#include <math.h>

mxu_status mxu_ref_activation_create(const mxu_activation_desc *desc,
                                     mxu_op **out) {
  *out = NULL;
  if (desc->rows <= 0 || desc->cols <= 0 || desc->activation < MXU_LINEAR ||
      desc->activation > MXU_LAST_ACTIVATION || !isfinite(desc->alpha))
    return mxu_fail(MXU_ERR_ARG, "cpu_ref: activation %d over %lld x %d values",
                    (int)desc->activation, (long long)desc->rows, desc->cols);
  MXU_TRY(mxu_ref_op_new(out));
  (*out)->desc.activation = *desc;
  return MXU_OK;
}

#define SELU_ALPHA 1.6732632423543772848170429916717
#define SELU_SCALE 1.0507009873554804934193349852946
#define SQRT_2_OVER_PI 0.79788456080286535587989211986876
#define GELU_CUBIC 0.044715

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

/* log(1 + e^x) without overflow for large x. */
static double softplus(double x) {
  return x > 0.0 ? x + log1p(exp(-x)) : log1p(exp(x));
}

static double relu6(double x) { return x < 0.0 ? 0.0 : x > 6.0 ? 6.0 : x; }

static double gelu_tanh_inner(double x) {
  return SQRT_2_OVER_PI * (x + GELU_CUBIC * x * x * x);
}

/* Keras 3's sparse_plus: 0, (x + 1)^2 / 4, then x, joined smoothly. */
static double sparse_plus(double x) {
  return x <= -1.0 ? 0.0 : x < 1.0 ? 0.25 * (x + 1.0) * (x + 1.0) : x;
}

static double shrunk(double x) { return fabs(x) > 0.5; }

/* Softmax and log_softmax are not elementwise, so they have no entry here:
 * callers never fuse them (they map to the identity so a stray caller is
 * merely wrong, not UB). */
static double activate(mxu_activation activation, double alpha, double x) {
  switch (activation) {
  case MXU_RELU: return x > 0.0 ? x : 0.0;
  case MXU_SIGMOID: return sigmoid(x);
  case MXU_TANH: return tanh(x);
  case MXU_RELU6: return relu6(x);
  case MXU_LEAKY_RELU: return x > 0.0 ? x : alpha * x;
  case MXU_ELU: return x > 0.0 ? x : alpha * expm1(x);
  case MXU_SELU: return SELU_SCALE * (x > 0.0 ? x : SELU_ALPHA * expm1(x));
  case MXU_GELU: return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
  case MXU_GELU_TANH: return 0.5 * x * (1.0 + tanh(gelu_tanh_inner(x)));
  case MXU_SILU: return x * sigmoid(x);
  case MXU_SOFTPLUS: return softplus(x);
  case MXU_SOFTSIGN: return x / (1.0 + fabs(x));
  case MXU_HARD_SIGMOID: return relu6(x + 3.0) / 6.0;
  case MXU_HARD_SIGMOID_TF2: {
    double v = 0.2 * x + 0.5;
    return v < 0.0 ? 0.0 : v > 1.0 ? 1.0 : v;
  }
  case MXU_HARD_SILU: return x * relu6(x + 3.0) / 6.0;
  case MXU_EXPONENTIAL: return exp(x);
  case MXU_MISH: return x * tanh(softplus(x));
  case MXU_CELU: return x > 0.0 ? x : expm1(x);
  case MXU_HARD_TANH: return x < -1.0 ? -1.0 : x > 1.0 ? 1.0 : x;
  case MXU_LOG_SIGMOID: return -softplus(-x);
  case MXU_TANH_SHRINK: return x - tanh(x);
  case MXU_SQUAREPLUS: return 0.5 * (x + sqrt(x * x + 4.0));
  case MXU_SPARSE_PLUS: return sparse_plus(x);
  case MXU_SPARSE_SIGMOID:
    return x <= -1.0 ? 0.0 : x >= 1.0 ? 1.0 : 0.5 * (x + 1.0);
  case MXU_SOFT_SHRINK: return shrunk(x) ? x - copysign(0.5, x) : 0.0;
  case MXU_HARD_SHRINK: return shrunk(x) ? x : 0.0;
  case MXU_LINEAR:
  case MXU_SOFTMAX:
  case MXU_LOG_SOFTMAX: break;
  }
  return x;
}

float mxu_ref_activate(mxu_activation activation, float x) {
  return (float)activate(activation, mxu_activation_alpha(activation), x);
}

/* The row's maximum into *max and sum(e^(x - max)): shifting by the
 * maximum keeps exp from overflowing. */
static double shifted_sum(int cols, const float *x, float *max) {
  *max = x[0];
  for (int j = 1; j < cols; j++)
    if (x[j] > *max) *max = x[j];
  double sum = 0.0;
  for (int j = 0; j < cols; j++) sum += exp((double)x[j] - *max);
  return sum;
}

static void softmax_row(int cols, const float *x, float *y) {
  float max;
  double sum = shifted_sum(cols, x, &max);
  for (int j = 0; j < cols; j++) y[j] = (float)(exp((double)x[j] - max) / sum);
}

/* x - max - log(sum(e^(x - max))). */
static void log_softmax_row(int cols, const float *x, float *y) {
  float max;
  double log_sum = log(shifted_sum(cols, x, &max));
  for (int j = 0; j < cols; j++) y[j] = (float)((double)x[j] - max - log_sum);
}

void mxu_ref_activation_forward(mxu_op *op, const float *x, float *y) {
  const mxu_activation_desc *d = &op->desc.activation;
  if (mxu_activation_rowwise(d->activation)) {
    for (int64_t r = 0; r < d->rows; r++)
      (d->activation == MXU_SOFTMAX ? softmax_row : log_softmax_row)(
          d->cols, x + r * d->cols, y + r * d->cols);
    return;
  }
  for (int64_t i = 0; i < d->rows * d->cols; i++)
    y[i] = (float)activate(d->activation, d->alpha, x[i]);
}

/* dy * dsoftmax: y * (dy - sum(dy * y)); the sum is taken before any dx is
 * written because dx may be dy. */
static void softmax_row_backward(int cols, const float *y, const float *dy,
                                 float *dx) {
  double dot = 0.0;
  for (int j = 0; j < cols; j++) dot += (double)dy[j] * y[j];
  for (int j = 0; j < cols; j++) dx[j] = (float)(y[j] * (dy[j] - dot));
}

/* dy - softmax * sum(dy), softmax being e^y; the sum is taken first, as
 * dx may be dy. */
static void log_softmax_row_backward(int cols, const float *y, const float *dy,
                                     float *dx) {
  double sum = 0.0;
  for (int j = 0; j < cols; j++) sum += dy[j];
  for (int j = 0; j < cols; j++)
    dx[j] = (float)(dy[j] - exp((double)y[j]) * sum);
}

/* The derivative at x (y for the fusable ones). Where a derivative jumps,
 * the side TensorFlow's gradient takes: relu6 and hard_sigmoid pass only
 * strictly inside their ramps, clip_by_value (tf.keras 2's hard_sigmoid,
 * hard_tanh) at its ends too; the where()s of Keras 3's sparse and shrink
 * ones the branch their comparisons choose. */
static double derivative(mxu_activation activation, double alpha, double x,
                         double y) {
  switch (activation) {
  case MXU_RELU: return y > 0.0 ? 1.0 : 0.0;
  case MXU_SIGMOID: return y * (1.0 - y);
  case MXU_TANH: return 1.0 - y * y;
  case MXU_RELU6: return x > 0.0 && x < 6.0 ? 1.0 : 0.0;
  case MXU_LEAKY_RELU: return x > 0.0 ? 1.0 : alpha;
  case MXU_ELU: return x > 0.0 ? 1.0 : alpha * exp(x);
  case MXU_SELU: return SELU_SCALE * (x > 0.0 ? 1.0 : SELU_ALPHA * exp(x));
  case MXU_GELU:
    return 0.5 * (1.0 + erf(x / sqrt(2.0))) +
           x * exp(-0.5 * x * x) * (SQRT_2_OVER_PI / 2.0);
  case MXU_GELU_TANH: {
    double t = tanh(gelu_tanh_inner(x));
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * SQRT_2_OVER_PI *
                                 (1.0 + 3.0 * GELU_CUBIC * x * x);
  }
  case MXU_SILU: {
    double s = sigmoid(x);
    return s * (1.0 + x * (1.0 - s));
  }
  case MXU_SOFTPLUS: return sigmoid(x);
  case MXU_SOFTSIGN: return 1.0 / ((1.0 + fabs(x)) * (1.0 + fabs(x)));
  case MXU_HARD_SIGMOID: return x > -3.0 && x < 3.0 ? 1.0 / 6.0 : 0.0;
  case MXU_HARD_SIGMOID_TF2: return x >= -2.5 && x <= 2.5 ? 0.2 : 0.0;
  case MXU_HARD_SILU:
    return relu6(x + 3.0) / 6.0 + (x > -3.0 && x < 3.0 ? x / 6.0 : 0.0);
  case MXU_EXPONENTIAL: return exp(x);
  case MXU_MISH: {
    double t = tanh(softplus(x));
    return t + x * (1.0 - t * t) * sigmoid(x);
  }
  case MXU_CELU: return x > 0.0 ? 1.0 : exp(x);
  case MXU_HARD_TANH: return x >= -1.0 && x <= 1.0 ? 1.0 : 0.0;
  case MXU_LOG_SIGMOID: return sigmoid(-x);
  case MXU_TANH_SHRINK: return tanh(x) * tanh(x);
  case MXU_SQUAREPLUS: return 0.5 * (1.0 + x / sqrt(x * x + 4.0));
  case MXU_SPARSE_PLUS:
    return x <= -1.0 ? 0.0 : x < 1.0 ? 0.5 * (x + 1.0) : 1.0;
  case MXU_SPARSE_SIGMOID: return x > -1.0 && x < 1.0 ? 0.5 : 0.0;
  case MXU_SOFT_SHRINK:
  case MXU_HARD_SHRINK: return shrunk(x);
  case MXU_LINEAR:
  case MXU_SOFTMAX:
  case MXU_LOG_SOFTMAX: break;
  }
  return 1.0;
}

double mxu_ref_slope(mxu_activation activation, double x) {
  double alpha = mxu_activation_alpha(activation);
  return derivative(activation, alpha, x, activate(activation, alpha, x));
}

void mxu_ref_activation_backward(mxu_op *op, const float *x, const float *y,
                                 const float *dy, float *dx) {
  const mxu_activation_desc *d = &op->desc.activation;
  if (mxu_activation_rowwise(d->activation)) {
    for (int64_t r = 0; r < d->rows; r++)
      (d->activation == MXU_SOFTMAX ? softmax_row_backward
                                    : log_softmax_row_backward)(
          d->cols, y + r * d->cols, dy + r * d->cols, dx + r * d->cols);
    return;
  }
  int fusable = mxu_activation_fusable(d->activation);
  for (int64_t i = 0; i < d->rows * d->cols; i++)
    dx[i] = (float)((double)dy[i] * derivative(d->activation, d->alpha,
                                               fusable ? 0.0 : x[i], y[i]));
}

void mxu_ref_multiply(int64_t count, const float *a, const float *b, float *y) {
  for (int64_t i = 0; i < count; i++) y[i] = a[i] * b[i];
}

void mxu_ref_scale_shift(int64_t count, const float *x, float scale,
                         float offset, float *y) {
  for (int64_t i = 0; i < count; i++) y[i] = x[i] * scale + offset;
}

void mxu_ref_add(int64_t count, const float *a, const float *b, int relu,
                 float *y) {
  for (int64_t i = 0; i < count; i++) {
    float v = a[i] + b[i];
    y[i] = relu && v < 0.0f ? 0.0f : v;
  }
}

/* ---- per channel over each image's pixels (sums in double) -------------- */

void mxu_ref_scale_channels(int64_t n, int64_t pixels, int c, const float *x,
                            const float *s, float *y) {
  for (int64_t i = 0; i < n; i++)
    for (int64_t p = 0; p < pixels; p++)
      for (int k = 0; k < c; k++) {
        int64_t at = (i * pixels + p) * c + k;
        y[at] = x[at] * s[i * c + k];
      }
}

void mxu_ref_scale_channels_backward(int64_t n, int64_t pixels, int c,
                                     const float *x, const float *s,
                                     const float *dy, float *dx, float *ds) {
  for (int64_t i = 0; i < n; i++)
    for (int k = 0; k < c; k++) {
      double sum = 0.0;
      for (int64_t p = 0; p < pixels; p++) {
        int64_t at = (i * pixels + p) * c + k;
        if (dx) dx[at] = dy[at] * s[i * c + k];
        sum += (double)dy[at] * x[at];
      }
      if (ds) ds[i * c + k] = (float)sum;
    }
}

void mxu_ref_copy_rows(int64_t rows, int64_t width, const float *src,
                       int64_t src_stride, float *dst, int64_t dst_stride) {
  for (int64_t r = 0; r < rows; r++)
    for (int64_t i = 0; i < width; i++)
      dst[r * dst_stride + i] = src[r * src_stride + i];
}

void mxu_ref_channel_mean(int64_t n, int64_t pixels, int c, const float *x,
                          float *y) {
  for (int64_t i = 0; i < n; i++)
    for (int k = 0; k < c; k++) {
      double sum = 0.0;
      for (int64_t p = 0; p < pixels; p++) sum += x[(i * pixels + p) * c + k];
      y[i * c + k] = (float)(sum / (double)pixels);
    }
}

void mxu_ref_channel_mean_backward(int64_t n, int64_t pixels, int c,
                                   const float *dy, float *dx) {
  for (int64_t i = 0; i < n; i++)
    for (int64_t p = 0; p < pixels; p++)
      for (int k = 0; k < c; k++)
        dx[(i * pixels + p) * c + k] = dy[i * c + k] / (float)pixels;
}
