/* loss.c — cpu_ref's cross-entropy kernels, one row at a time in double:
 * softmax fused with cross-entropy from logits (log-sum-exp form), and
 * Keras' normalise-then-clip cross-entropy on probabilities. */
#include "backend/cpu_ref/ref.h"

#include <math.h>

/* Target probability of class j in row i, from sparse labels or one-hot
 * rows. An out-of-range label gives NaN so the bad batch surfaces as a
 * non-finite loss instead of silently training on nothing. */
static double target_at(const int32_t *labels, const float *onehot, int64_t i,
                        int k, int j) {
  if (!labels) return onehot[i * k + j];
  if (labels[i] < 0 || labels[i] >= k) return NAN;
  return labels[i] == j ? 1.0 : 0.0;
}

static int row_active(const float *mask, int64_t i) {
  return !mask || mask[i] != 0.0f;
}

static double log_sum_exp(int k, const float *x) {
  double max = x[0], sum = 0.0;
  for (int j = 1; j < k; j++)
    if (x[j] > max) max = x[j];
  for (int j = 0; j < k; j++) sum += exp(x[j] - max);
  return max + log(sum);
}

void mxu_ref_softmax_cross_entropy(int64_t n, int k, const float *logits,
                                   const int32_t *labels, const float *onehot,
                                   const float *mask, float scale, float *probs,
                                   float *loss, float *dlogits) {
  for (int64_t i = 0; i < n; i++) {
    const float *z = logits + i * k;
    double lse = log_sum_exp(k, z), row_loss = 0.0;
    int active = row_active(mask, i);
    for (int j = 0; j < k; j++) {
      double p = exp(z[j] - lse);
      double t = active ? target_at(labels, onehot, i, k, j) : 0.0;
      probs[i * k + j] = (float)p;
      if (t != 0.0) row_loss -= t * (z[j] - lse); /* -t log p */
      dlogits[i * k + j] = active ? (float)((p - t) * scale) : 0.0f;
    }
    loss[i] = (float)row_loss;
  }
}

/* Keras' float32 clip bounds for probabilities. */
static const double prob_lo = 1e-7f, prob_hi = 1.0f - 1e-7f;

/* dloss/dq for one normalised probability q with target t: the clip passes
 * no gradient where it bites. */
static double clipped_grad(double q, double t) {
  return (q < prob_lo || q > prob_hi) ? 0.0 : -t / q;
}

/* One row of Keras' categorical_crossentropy on probabilities:
 * q = p / sum(p), c = clip(q, 1e-7, 1 - 1e-7), loss = -sum t log c.
 * With g = dloss/dq, dloss/dp_i = (g_i - sum_j g_j q_j) / sum(p). */
static double probs_row(int k, const float *p, const int32_t *labels,
                        const float *onehot, int64_t i, double scale,
                        float *dp) {
  double sum = 0.0, loss = 0.0, dot = 0.0;
  for (int j = 0; j < k; j++) sum += p[j];
  for (int j = 0; j < k; j++) {
    double q = p[j] / sum, t = target_at(labels, onehot, i, k, j);
    double c = q < prob_lo ? prob_lo : q > prob_hi ? prob_hi : q;
    if (t != 0.0) loss -= t * log(c);
    dot += clipped_grad(q, t) * q;
  }
  for (int j = 0; j < k; j++) {
    double q = p[j] / sum, t = target_at(labels, onehot, i, k, j);
    dp[j] = (float)((clipped_grad(q, t) - dot) / sum * scale);
  }
  return loss;
}

void mxu_ref_cross_entropy(int64_t n, int k, const float *probs,
                           const int32_t *labels, const float *onehot,
                           const float *mask, float scale, float *loss,
                           float *dprobs) {
  for (int64_t i = 0; i < n; i++) {
    float *dp = dprobs + i * k;
    if (row_active(mask, i)) {
      loss[i] =
          (float)probs_row(k, probs + i * k, labels, onehot, i, scale, dp);
      continue;
    }
    loss[i] = 0.0f;
    for (int j = 0; j < k; j++) dp[j] = 0.0f;
  }
}
