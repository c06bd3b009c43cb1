/* norm.c — cpu_ref's batch normalisation over [rows, c] data, one channel
 * at a time: two-pass batch statistics in double, and the closed-form
 * gradient through the batch mean and variance. */
#include "backend/cpu_ref/ref.h"

#include <math.h>

mxu_status mxu_ref_batchnorm_create(const mxu_batchnorm_desc *desc,
                                    mxu_op **out) {
  *out = NULL;
  if (desc->rows <= 0 || desc->c <= 0 || !(desc->epsilon >= 0.0f) ||
      !mxu_batchnorm_fusable(desc->activation))
    return mxu_fail(MXU_ERR_ARG,
                    "cpu_ref: batchnorm: %lld rows, %d channels, epsilon %g, "
                    "activation %d",
                    (long long)desc->rows, desc->c, (double)desc->epsilon,
                    (int)desc->activation);
  MXU_TRY(mxu_ref_op_new(out));
  (*out)->desc.batchnorm = *desc;
  return MXU_OK;
}

/* A missing gamma or beta (Keras' scale=False / center=False) acts as 1 or 0
 * so a layer may pass NULL rather than a constant array. */
static double gamma_of(const float *gamma, int ch) {
  return gamma ? gamma[ch] : 1.0;
}

static double beta_of(const float *beta, int ch) {
  return beta ? beta[ch] : 0.0;
}

/* The normalised value, before the fused activation. */
static double normalised(float x, double gamma, double beta, double mean,
                         double inv_std) {
  return gamma * (x - mean) * inv_std + beta;
}

static void normalise_channel(const mxu_batchnorm_desc *d, const float *x,
                              double gamma, double beta, double mean,
                              double var, int ch, float *y) {
  double inv_std = 1.0 / sqrt(var + d->epsilon);
  for (int64_t r = 0; r < d->rows; r++) {
    int64_t i = r * d->c + ch;
    float v = (float)normalised(x[i], gamma, beta, mean, inv_std);
    if (d->activation == MXU_SILU || d->activation == MXU_HARD_SILU) {
      y[i] = mxu_ref_activate(d->activation, v);
      continue;
    }
    if (d->activation != MXU_LINEAR && v < 0.0f) v = 0.0f;
    y[i] = d->activation == MXU_RELU6 && v > 6.0f ? 6.0f : v;
  }
}

void mxu_ref_batchnorm_forward_training(mxu_op *op, const float *x,
                                        const float *gamma, const float *beta,
                                        float *y, float *mean, float *var) {
  const mxu_batchnorm_desc *d = &op->desc.batchnorm;
  for (int ch = 0; ch < d->c; ch++) {
    double sum = 0.0, squares = 0.0;
    for (int64_t r = 0; r < d->rows; r++) sum += x[r * d->c + ch];
    double mu = sum / (double)d->rows;
    for (int64_t r = 0; r < d->rows; r++) {
      double centred = x[r * d->c + ch] - mu;
      squares += centred * centred;
    }
    double sigma2 = squares / (double)d->rows; /* biased, as Keras */
    mean[ch] = (float)mu;
    var[ch] = (float)sigma2;
    normalise_channel(d, x, gamma_of(gamma, ch), beta_of(beta, ch), mu, sigma2,
                      ch, y);
  }
}

void mxu_ref_batchnorm_forward_inference(mxu_op *op, const float *x,
                                         const float *gamma, const float *beta,
                                         const float *mean, const float *var,
                                         float *y) {
  const mxu_batchnorm_desc *d = &op->desc.batchnorm;
  for (int ch = 0; ch < d->c; ch++)
    normalise_channel(d, x, gamma_of(gamma, ch), beta_of(beta, ch), mean[ch],
                      var[ch], ch, y);
}

/* The gradient at the normalisation's output v: dy, or with the relu
 * fused, dy where y > 0 (and, relu6, y < 6); with silu or hard_silu, dy
 * times its slope at v. */
static double dz_at(const mxu_batchnorm_desc *d, const float *y,
                    const float *dy, int64_t i, float v) {
  if (d->activation == MXU_LINEAR) return dy[i];
  if (d->activation == MXU_SILU || d->activation == MXU_HARD_SILU)
    return dy[i] * mxu_ref_slope(d->activation, v);
  int open = y[i] > 0.0f && (d->activation != MXU_RELU6 || y[i] < 6.0f);
  return open ? dy[i] : 0.0;
}

/* With xhat = (x - mean) / sqrt(var + eps), N rows and dz the gradient at
 * the normalisation's output: dbeta = sum dz, dgamma = sum dz xhat,
 * dx = gamma / sqrt(var + eps) / N * (N dz - dbeta - xhat dgamma). */
void mxu_ref_batchnorm_backward(mxu_op *op, const float *x, const float *y,
                                const float *dy, const float *gamma,
                                const float *beta, const float *mean,
                                const float *var, float *dx, float *dgamma,
                                float *dbeta) {
  const mxu_batchnorm_desc *d = &op->desc.batchnorm;
  double rows = (double)d->rows;
  for (int ch = 0; ch < d->c; ch++) {
    double inv_std = 1.0 / sqrt((double)var[ch] + d->epsilon);
    double g = gamma_of(gamma, ch), b = beta_of(beta, ch);
    double sum_dy = 0.0, sum_dy_xhat = 0.0;
    for (int64_t r = 0; r < d->rows; r++) {
      int64_t i = r * d->c + ch;
      float v = (float)normalised(x[i], g, b, mean[ch], inv_std);
      double dz = dz_at(d, y, dy, i, v);
      sum_dy += dz;
      sum_dy_xhat += dz * (x[i] - (double)mean[ch]) * inv_std;
    }
    for (int64_t r = 0; r < d->rows; r++) {
      int64_t i = r * d->c + ch;
      double xhat = (x[i] - (double)mean[ch]) * inv_std;
      float v = (float)normalised(x[i], g, b, mean[ch], inv_std);
      dx[i] =
          (float)(g * inv_std / rows *
                  (rows * dz_at(d, y, dy, i, v) - sum_dy - xhat * sum_dy_xhat));
    }
    if (dgamma) dgamma[ch] = (float)sum_dy_xhat;
    if (dbeta) dbeta[ch] = (float)sum_dy;
  }
}
