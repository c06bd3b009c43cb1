/* loss.c — the two cross-entropy kernels of the oneDNN backend, in plain C
 * (oneDNN has no loss primitives): softmax fused with cross-entropy from
 * logits, and Keras' cross-entropy on probabilities with its normalise and
 * clip. Rows are independent; the inner loops are over k classes. */
#include "backend/cpu/cpu.h"

#include <math.h>
#include <string.h>

/* Keras' backend epsilon, the clip of probabilities away from 0 and 1. */
#define CE_EPSILON 1e-7f

/* p = softmax(z); returns log(sum exp(z - max)) and the max, so the loss is
 * log-sum-exp minus the shifted logit: no log of an underflowed p. */
static float softmax_row(int k, const float *restrict z, float *restrict p,
                         float *max_out) {
  float max = z[0];
  for (int j = 1; j < k; j++) max = z[j] > max ? z[j] : max;
  double sum = 0.0;
  for (int j = 0; j < k; j++) {
    p[j] = expf(z[j] - max);
    sum += p[j];
  }
  float inv = (float)(1.0 / sum);
  for (int j = 0; j < k; j++) p[j] *= inv;
  *max_out = max;
  return (float)log(sum);
}

static int row_masked(const float *mask, int64_t i) {
  return mask && mask[i] == 0.0f;
}

static int label_ok(int32_t label, int k) { return label >= 0 && label < k; }

/* An out-of-range label poisons its row with NaN (as cpu_ref does), so a
 * bad batch shows up as a non-finite loss rather than training on nothing. */
static void bad_label_row(int k, float *loss, float *d) {
  *loss = NAN;
  for (int j = 0; j < k; j++) d[j] = NAN;
}

void cpu_softmax_cross_entropy(int64_t n, int k, const float *logits,
                               const int32_t *labels, const float *onehot,
                               const float *mask, float scale, float *probs,
                               float *loss, float *dlogits) {
  for (int64_t i = 0; i < n; i++) {
    const float *restrict z = logits + i * k;
    float *restrict p = probs + i * k, *restrict d = dlogits + i * k;
    float max, lse = softmax_row(k, z, p, &max);
    if (row_masked(mask, i)) {
      loss[i] = 0.0f;
      memset(d, 0, (size_t)k * sizeof *d);
      continue;
    }
    for (int j = 0; j < k; j++) d[j] = p[j] * scale;
    if (labels) {
      int32_t t = labels[i];
      if (label_ok(t, k)) {
        loss[i] = lse - (z[t] - max);
        d[t] -= scale;
      } else {
        bad_label_row(k, &loss[i], d);
      }
      continue;
    }
    const float *restrict t = onehot + i * k;
    float row_loss = 0.0f;
    for (int j = 0; j < k; j++) {
      row_loss += t[j] * (lse - (z[j] - max));
      d[j] -= t[j] * scale;
    }
    loss[i] = row_loss;
  }
}

/* q = p / sum(p), c = clip(q, eps, 1 - eps), loss = -sum t log c. The
 * clip passes gradient only where q lies inside [eps, 1 - eps], as TF's
 * clip_by_value does, so g_j = -t_j / c_j there and 0 elsewhere; through
 * the normalisation dL/dp_m = (g_m - sum_j g_j q_j) / sum(p). d holds q,
 * then g, then the result: no scratch. */
static float cross_entropy_row(int k, const float *restrict p,
                               const float *restrict target, int32_t label,
                               float scale, float *restrict d) {
  float sum = 0.0f;
  for (int j = 0; j < k; j++) sum += p[j];
  float inv = 1.0f / sum, dot = 0.0f;
  for (int j = 0; j < k; j++) d[j] = p[j] * inv;
  float row_loss = 0.0f;
  for (int j = 0; j < k; j++) {
    float t = target ? target[j] : (float)(j == label);
    float q = d[j], c = fminf(fmaxf(q, CE_EPSILON), 1.0f - CE_EPSILON);
    float g = q >= CE_EPSILON && q <= 1.0f - CE_EPSILON ? -t / c : 0.0f;
    row_loss -= t != 0.0f ? t * logf(c) : 0.0f;
    dot += g * q;
    d[j] = g;
  }
  float factor = scale * inv;
  for (int j = 0; j < k; j++) d[j] = (d[j] - dot) * factor;
  return row_loss;
}

void cpu_cross_entropy(int64_t n, int k, const float *probs,
                       const int32_t *labels, const float *onehot,
                       const float *mask, float scale, float *loss,
                       float *dprobs) {
  for (int64_t i = 0; i < n; i++) {
    float *d = dprobs + i * k;
    if (row_masked(mask, i)) {
      loss[i] = 0.0f;
      memset(d, 0, (size_t)k * sizeof *d);
      continue;
    }
    int32_t label = labels ? labels[i] : -1;
    if (labels && !label_ok(label, k)) {
      bad_label_row(k, &loss[i], d);
      continue;
    }
    loss[i] = cross_entropy_row(
        k, probs + i * k, onehot ? onehot + i * k : NULL, label, scale, d);
  }
}
