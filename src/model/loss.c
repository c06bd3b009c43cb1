/* loss.c — the losses that compare the output with float targets (binary
 * cross-entropy, mean squared and absolute error, Huber, KL divergence,
 * the hinges, cosine similarity, the focal cross-entropies, ...), and the
 * metrics. The softmax cross-entropies are the backend's (they
 * touch every class score of large outputs); these read an output of a
 * few values a sample, so one plain-C version serves every backend. */
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Keras' backend epsilon, the clip of probabilities away from 0 and 1. */
#define LOSS_EPSILON 1e-7f

typedef struct {
  float loss, grad;
} elem_loss;

/* Keras 3's binary cross-entropy on a probability: p clipped into
 * [eps, 1 - eps] (the clip passes no gradient outside), then
 * -(t log p + (1 - t) log(1 - p)). */
static elem_loss bce_prob(float p, float t) {
  float c = fminf(fmaxf(p, LOSS_EPSILON), 1.0f - LOSS_EPSILON);
  elem_loss e = {-(t * logf(c) + (1.0f - t) * logf(1.0f - c)), 0.0f};
  if (p >= LOSS_EPSILON && p <= 1.0f - LOSS_EPSILON)
    e.grad = -(t / c - (1.0f - t) / (1.0f - c));
  return e;
}

/* TF's sigmoid_cross_entropy_with_logits, stable for any z:
 * max(z, 0) - z t + log(1 + exp(-|z|)); its gradient sigmoid(z) - t. */
static elem_loss bce_logit(float z, float t) {
  elem_loss e = {fmaxf(z, 0.0f) - z * t + log1pf(expf(-fabsf(z))), 0.0f};
  e.grad = 1.0f / (1.0f + expf(-z)) - t;
  return e;
}

static float sign(float v) { return (float)((v > 0.0f) - (v < 0.0f)); }

static elem_loss huber(float error, float delta) {
  float a = fabsf(error);
  if (a <= delta) return (elem_loss){0.5f * error * error, error};
  return (elem_loss){delta * a - 0.5f * delta * delta, delta * sign(error)};
}

/* t log(t / p) with both clipped into [eps, 1]; p's clip passes gradient
 * inside the range only. */
static elem_loss kl(float p, float t) {
  float tc = fminf(fmaxf(t, LOSS_EPSILON), 1.0f);
  float pc = fminf(fmaxf(p, LOSS_EPSILON), 1.0f);
  elem_loss e = {tc * logf(tc / pc), 0.0f};
  if (p >= LOSS_EPSILON && p <= 1.0f) e.grad = -tc / pc;
  return e;
}

/* Keras' mean_squared_logarithmic_error: max(y, eps) passes the gradient
 * where y >= eps only. */
static elem_loss msle(float y, float t) {
  float yc = fmaxf(y, LOSS_EPSILON);
  float d = logf(yc + 1.0f) - logf(fmaxf(t, LOSS_EPSILON) + 1.0f);
  return (elem_loss){d * d, y >= LOSS_EPSILON ? 2.0f * d / (yc + 1.0f) : 0};
}

/* log(cosh(x)) as Keras computes it, x + softplus(-2x) - log 2 (no
 * overflow for large |x|); its gradient tanh(x). */
static elem_loss log_cosh(float x) {
  float z = -2.0f * x;
  float softplus = fmaxf(z, 0.0f) + log1pf(expf(-fabsf(z)));
  return (elem_loss){x + softplus - 0.69314718f, tanhf(x)};
}

/* Keras 3's binary focal cross-entropy: of a probability (a logit's
 * sigmoid first), the clipped cross-entropy times (1 - p_t)^gamma, p_t =
 * t p + (1 - t)(1 - p) of the unclipped p; with class balancing times
 * alpha for a target 1, 1 - alpha for 0. */
static elem_loss binary_focal(const mxu_output_loss *o, float y, float t) {
  t = t * (1.0f - o->label_smoothing) + 0.5f * o->label_smoothing;
  float p = o->from_logits ? 1.0f / (1.0f + expf(-y)) : y;
  elem_loss bce = bce_prob(p, t);
  float base = 1.0f - (t * p + (1.0f - t) * (1.0f - p));
  float focal = powf(base, o->gamma), d_focal = 0.0f;
  if (base > 0.0f && o->gamma != 0.0f) /* d/dp of base^gamma */
    d_focal = -o->gamma * powf(base, o->gamma - 1.0f) * (2.0f * t - 1.0f);
  float w =
      o->apply_class_balancing ? t * o->alpha + (1 - t) * (1 - o->alpha) : 1.0f;
  elem_loss e = {w * focal * bce.loss,
                 w * (d_focal * bce.loss + focal * bce.grad)};
  if (o->from_logits) e.grad *= p * (1.0f - p);
  return e;
}

/* Hinge targets: -1 and 1, a 0 counting as -1 (see mxu_loss). */
static float hinge_margin(float y, float t) {
  return 1.0f - (t == 0.0f ? -1.0f : t) * y;
}

static elem_loss element(const mxu_loss_spec *spec, float y, float t) {
  switch (spec->o.loss) {
  case MXU_HINGE: {
    float m = hinge_margin(y, t);
    return m > 0 ? (elem_loss){m, (t == 0.0f ? 1.0f : -t)} : (elem_loss){0, 0};
  }
  case MXU_SQUARED_HINGE: {
    float m = hinge_margin(y, t);
    return m > 0 ? (elem_loss){m * m, 2.0f * m * (t == 0.0f ? 1.0f : -t)}
                 : (elem_loss){0, 0};
  }
  case MXU_BINARY_FOCAL_CROSSENTROPY: return binary_focal(&spec->o, y, t);
  case MXU_MEAN_ABSOLUTE_PERCENTAGE_ERROR: {
    float d = fmaxf(fabsf(t), LOSS_EPSILON);
    return (elem_loss){100.0f * fabsf(t - y) / d, 100.0f * sign(y - t) / d};
  }
  case MXU_MEAN_SQUARED_LOGARITHMIC_ERROR: return msle(y, t);
  case MXU_LOG_COSH: return log_cosh(y - t);
  case MXU_POISSON:
    return (elem_loss){y - t * logf(y + LOSS_EPSILON),
                       1.0f - t / (y + LOSS_EPSILON)};
  case MXU_BINARY_CROSSENTROPY:
    t = t * (1.0f - spec->o.label_smoothing) + 0.5f * spec->o.label_smoothing;
    return spec->o.from_logits ? bce_logit(y, t) : bce_prob(y, t);
  case MXU_MEAN_SQUARED_ERROR:
    return (elem_loss){(y - t) * (y - t), 2.0f * (y - t)};
  case MXU_MEAN_ABSOLUTE_ERROR: return (elem_loss){fabsf(y - t), sign(y - t)};
  case MXU_HUBER: return huber(y - t, spec->o.huber_delta);
  case MXU_KL_DIVERGENCE: return kl(y, t);
  default: return (elem_loss){NAN, NAN};
  }
}

/* ---- the losses of a whole vector (the output's last axis) ---------------
 * Each returns the vector's loss and its gradient in g (the hinge's and
 * the cosine's: unless NULL, for the metrics). */

/* max(max((1 - t) y) - t . y + 1, 0); the max's gradient split among its
 * ties, as TensorFlow's and JAX's. */
static float categorical_hinge(const float *y, const float *t, int64_t n,
                               float *g) {
  double pos = 0.0;
  float neg = -INFINITY;
  for (int64_t j = 0; j < n; j++) {
    pos += t[j] * y[j];
    neg = fmaxf(neg, (1.0f - t[j]) * y[j]);
  }
  float margin = neg - (float)pos + 1.0f;
  int ties = 0;
  for (int64_t j = 0; g && j < n; j++) ties += (1.0f - t[j]) * y[j] == neg;
  for (int64_t j = 0; g && j < n; j++) {
    g[j] = 0.0f;
    if (!(margin > 0.0f)) continue;
    g[j] = -t[j];
    if ((1.0f - t[j]) * y[j] == neg) g[j] += (1.0f - t[j]) / (float)ties;
  }
  return margin > 0.0f ? margin : 0.0f;
}

/* Keras 3's normalize: x * min(rsqrt(x . x), 1 / 1e-7). */
static float inverse_norm(const float *x, int64_t n) {
  double sum = 0.0;
  for (int64_t j = 0; j < n; j++) sum += (double)x[j] * x[j];
  return fminf(1.0f / sqrtf((float)sum), 1.0f / LOSS_EPSILON);
}

/* -(t |t|^-1) . (y |y|^-1); where |y|'s inverse is capped, a constant. */
static float cosine_loss(const float *y, const float *t, int64_t n, float *g) {
  float iy = inverse_norm(y, n), it = inverse_norm(t, n);
  double ty = 0.0;
  for (int64_t j = 0; j < n; j++) ty += (double)t[j] * y[j];
  int capped = iy == 1.0f / LOSS_EPSILON;
  for (int64_t j = 0; g && j < n; j++)
    g[j] =
        -it * (t[j] * iy - (capped ? 0.0f : (float)ty * iy * iy * iy * y[j]));
  return -(float)ty * iy * it;
}

/* Keras 3's categorical focal cross-entropy of a row of probabilities p
 * (a logit row's softmax first): q = p / sum(p) clipped into [eps, 1 -
 * eps], the loss -sum alpha (1 - q)^gamma t log q. */
/* p_j of a row: y_j, or a logit row's softmax (max its largest, z its
 * exponentials' sum). */
static float probability(const mxu_output_loss *o, const float *y, int64_t j,
                         float max, float z) {
  return o->from_logits ? expf(y[j] - max) / z : y[j];
}

static float categorical_focal(const mxu_output_loss *o, const float *y,
                               const float *targets, int64_t n, float *g) {
  float max = y[0], z = 0.0f, s = 0.0f;
  for (int64_t j = 1; j < n; j++) max = fmaxf(max, y[j]);
  if (o->from_logits)
    for (int64_t j = 0; j < n; j++) z += expf(y[j] - max);
#define P(j) probability(o, y, j, max, z)
  for (int64_t j = 0; j < n; j++) s += P(j);
  double loss = 0.0, dq_q = 0.0, dp_p = 0.0;
  float smooth = o->label_smoothing;
  for (int64_t j = 0; j < n; j++) { /* g: d/dq */
    float t = targets[j] * (1.0f - smooth) + smooth / (float)n;
    float q = P(j) / s, c = fminf(fmaxf(q, LOSS_EPSILON), 1 - LOSS_EPSILON);
    float focal = powf(1.0f - c, o->gamma);
    loss -= o->alpha * focal * t * logf(c);
    g[j] = 0.0f;
    if (q >= LOSS_EPSILON && q <= 1 - LOSS_EPSILON)
      g[j] = -o->alpha * t *
             (focal / c - o->gamma * powf(1.0f - c, o->gamma - 1.0f) * logf(c));
    dq_q += g[j] * q;
  }
  for (int64_t j = 0; j < n; j++) { /* g: d/dp, through q = p / s */
    g[j] = (g[j] - (float)dq_q) / s;
    dp_p += g[j] * P(j);
  }
  if (o->from_logits) /* through the softmax */
    for (int64_t j = 0; j < n; j++) g[j] = P(j) * (g[j] - (float)dp_p);
#undef P
  return (float)loss;
}

int mxu_loss_of_vectors(mxu_loss loss) {
  return loss == MXU_CATEGORICAL_HINGE || loss == MXU_COSINE_SIMILARITY ||
         loss == MXU_CATEGORICAL_FOCAL_CROSSENTROPY;
}

static float vector_loss(const mxu_output_loss *o, const float *y,
                         const float *t, int64_t n, float *g) {
  switch (o->loss) {
  case MXU_CATEGORICAL_HINGE: return categorical_hinge(y, t, n, g);
  case MXU_COSINE_SIMILARITY: return cosine_loss(y, t, n, g);
  default: return categorical_focal(o, y, t, n, g);
  }
}

/* Keras means each loss over the output's last axis, except KL divergence
 * and the vectors' losses, which sum over it; all then mean over the
 * other axes and the batch. */
static float row_divisor(const mxu_loss_spec *spec) {
  if (spec->o.loss == MXU_KL_DIVERGENCE || mxu_loss_of_vectors(spec->o.loss))
    return (float)(spec->values / spec->last);
  return (float)spec->values;
}

void mxu_target_loss(const mxu_loss_spec *spec, int64_t rows, const float *y,
                     const float *targets, const float *mask, float scale,
                     float *loss, float *grad) {
  int64_t k = spec->values;
  float divisor = row_divisor(spec), factor = scale / divisor;
  for (int64_t r = 0; r < rows; r++) {
    float *d = grad + r * k;
    if (mask[r] == 0.0f) {
      loss[r] = 0.0f;
      memset(d, 0, (size_t)k * sizeof *d);
      continue;
    }
    double sum = 0.0;
    if (mxu_loss_of_vectors(spec->o.loss)) {
      for (int64_t j = 0; j < k; j += spec->last)
        sum += vector_loss(&spec->o, y + r * k + j, targets + r * k + j,
                           spec->last, d + j);
      for (int64_t j = 0; j < k; j++) d[j] *= factor;
    } else {
      for (int64_t j = 0; j < k; j++) {
        elem_loss e = element(spec, y[r * k + j], targets[r * k + j]);
        sum += e.loss;
        d[j] = e.grad * factor;
      }
    }
    loss[r] = (float)(sum / divisor);
  }
}

mxu_output_loss mxu_output_loss_defaults(void) {
  mxu_output_loss o = {.loss = MXU_SPARSE_CATEGORICAL_CROSSENTROPY,
                       .huber_delta = 1.0f,
                       .gamma = 2.0f,
                       .alpha = 0.25f,
                       .weight = 1.0f};
  return o;
}

int mxu_loss_is_softmax(mxu_loss loss) {
  return loss == MXU_SPARSE_CATEGORICAL_CROSSENTROPY ||
         loss == MXU_CATEGORICAL_CROSSENTROPY;
}

int mxu_loss_smooths(mxu_loss loss) {
  return loss == MXU_CATEGORICAL_CROSSENTROPY ||
         loss == MXU_BINARY_CROSSENTROPY ||
         loss == MXU_BINARY_FOCAL_CROSSENTROPY ||
         loss == MXU_CATEGORICAL_FOCAL_CROSSENTROPY;
}

int64_t mxu_loss_positions(const mxu_model *model, int h) {
  const mxu_head *head = &model->heads[h];
  const mxu_shape *s = &model->layers[head->node].out_shape;
  int scored = mxu_loss_is_softmax(head->spec.loss) ||
               model->plan.head[h].loss_mask >= 0;
  if (!scored || s->rank < 2) return 1;
  return mxu_shape_count(s) / s->dims[s->rank - 1];
}

int mxu_loss_keeps_rows(const mxu_model *model, int h) {
  return model->plan.head[h].loss_mask >= 0 ||
         model->heads[h].spec.has_ignore_class;
}

int64_t mxu_head_row_values(const mxu_model *model, int h) {
  const mxu_shape *s = &model->layers[model->heads[h].node].out_shape;
  return mxu_shape_count(s) / mxu_loss_positions(model, h);
}

void mxu_smooth_targets(int64_t rows, int k, float smoothing,
                        const float *targets, float *out) {
  for (int64_t i = 0; i < rows * k; i++)
    out[i] = targets[i] * (1.0f - smoothing) + smoothing / (float)k;
}

/* ---- metrics -------------------------------------------------------------
 */

static int64_t argmax(const float *row, int64_t k) {
  int64_t best = 0;
  for (int64_t j = 1; j < k; j++)
    if (row[j] > row[best]) best = j;
  return best;
}

/* tf.math.in_top_k: the target's score is among the k highest, ties at the
 * boundary counting in; a non-finite score never is. */
static int in_top_k(const float *row, int64_t classes, int64_t target, int k) {
  if (target < 0 || target >= classes || !isfinite(row[target])) return 0;
  int64_t above = 0;
  for (int64_t j = 0; j < classes; j++) above += row[j] > row[target];
  return above < k;
}

/* Keras' confusion-matrix prediction of value j of a row of k: above the
 * threshold (0.5, or -inf with top_k) and, with top_k, among the row's
 * top_k largest (ties to the lower index, as top_k's). */
static int predicted(const mxu_metric_options *o, const float *row, int64_t k,
                     int64_t j) {
  int top = o && o->top_k > 0;
  float threshold = o && o->has_threshold ? (float)o->threshold
                    : top                 ? -INFINITY
                                          : 0.5f;
  if (!(row[j] > threshold)) return 0;
  int64_t above = 0;
  for (int64_t i = 0; top && i < k; i++)
    above += row[i] > row[j] || (row[i] == row[j] && i < j);
  return !top || above < o->top_k;
}

/* The values of a row of k the confusion metrics count: all, or
 * class_id's. */
static int64_t counted_first(const mxu_metric_options *o) {
  return o && o->has_class_id ? o->class_id : 0;
}

static int64_t counted_end(const mxu_metric_options *o, int64_t k) {
  return o && o->has_class_id ? o->class_id + 1 : k;
}

/* Whether a value's prediction and its target fall in the confusion
 * matrix's cell the kind counts (precision's and recall's: the true
 * positives). */
static int in_cell(mxu_metric_kind kind, int says, float t) {
  int positive = t != 0.0f;
  switch (kind) {
  case MXU_METRIC_FALSE_POSITIVES: return says && !positive;
  case MXU_METRIC_TRUE_NEGATIVES: return !says && !positive;
  case MXU_METRIC_FALSE_NEGATIVES: return !says && positive;
  default: return says && positive;
  }
}

mxu_loss mxu_metric_loss(mxu_metric_kind kind) {
  switch (kind) {
  case MXU_METRIC_MAPE: return MXU_MEAN_ABSOLUTE_PERCENTAGE_ERROR;
  case MXU_METRIC_MSLE: return MXU_MEAN_SQUARED_LOGARITHMIC_ERROR;
  case MXU_METRIC_LOGCOSH: return MXU_LOG_COSH;
  case MXU_METRIC_POISSON: return MXU_POISSON;
  case MXU_METRIC_HINGE: return MXU_HINGE;
  case MXU_METRIC_SQUARED_HINGE: return MXU_SQUARED_HINGE;
  default: return MXU_BINARY_CROSSENTROPY; /* the metric's: probabilities */
  }
}

static double row_metric(mxu_metric_kind kind, const mxu_metric_options *o,
                         const float *y, int64_t k, int32_t label,
                         const float *t) {
  double sum = 0.0;
  switch (kind) {
  case MXU_METRIC_AUC:
  case MXU_METRIC_AUC_PR:
  case MXU_METRIC_F_SCORE:
  case MXU_METRIC_MEAN_IOU:
  case MXU_METRIC_ONE_HOT_MEAN_IOU:
  case MXU_METRIC_BINARY_IOU: return 0.0; /* a tally: mxu_metric_tally */
  case MXU_METRIC_PRECISION:              /* true positives */
  case MXU_METRIC_RECALL:
  case MXU_METRIC_TRUE_POSITIVES:
  case MXU_METRIC_FALSE_POSITIVES:
  case MXU_METRIC_TRUE_NEGATIVES:
  case MXU_METRIC_FALSE_NEGATIVES:
    for (int64_t j = counted_first(o); j < counted_end(o, k); j++)
      sum += in_cell(kind, predicted(o, y, k, j), t[j]);
    return sum;
  case MXU_METRIC_BINARY_CROSSENTROPY:
  case MXU_METRIC_MAPE:
  case MXU_METRIC_MSLE:
  case MXU_METRIC_LOGCOSH:
  case MXU_METRIC_POISSON:
  case MXU_METRIC_HINGE:
  case MXU_METRIC_SQUARED_HINGE: {
    mxu_loss_spec spec = {mxu_output_loss_defaults(), k, k};
    spec.o.loss = mxu_metric_loss(kind);
    for (int64_t j = 0; j < k; j++) sum += element(&spec, y[j], t[j]).loss;
    break;
  }
  case MXU_METRIC_CATEGORICAL_HINGE: /* the mean over the vectors */
  case MXU_METRIC_COSINE_SIMILARITY: {
    int64_t n = o && o->vector > 0 ? o->vector : k;
    for (int64_t j = 0; j < k; j += n)
      sum += kind == MXU_METRIC_COSINE_SIMILARITY
                 ? -cosine_loss(y + j, t + j, n, NULL)
                 : categorical_hinge(y + j, t + j, n, NULL);
    return sum * (double)n / (double)k;
  }
  case MXU_METRIC_SPARSE_ACCURACY: return argmax(y, k) == label;
  case MXU_METRIC_CATEGORICAL_ACCURACY: return argmax(y, k) == argmax(t, k);
  case MXU_METRIC_SPARSE_TOP_K: return in_top_k(y, k, label, MXU_TOP_K);
  case MXU_METRIC_TOP_K: return in_top_k(y, k, argmax(t, k), MXU_TOP_K);
  case MXU_METRIC_BINARY_ACCURACY: {
    float threshold = o && o->has_threshold ? (float)o->threshold : 0.5f;
    for (int64_t j = 0; j < k; j++) sum += (float)(y[j] > threshold) == t[j];
    break;
  }
  case MXU_METRIC_MAE:
    for (int64_t j = 0; j < k; j++) sum += fabsf(y[j] - t[j]);
    break;
  case MXU_METRIC_MSE:
  case MXU_METRIC_RMSE:
    for (int64_t j = 0; j < k; j++) sum += (y[j] - t[j]) * (y[j] - t[j]);
    break;
  }
  return sum / (double)k;
}

/* Precision's divisor: the predicted positives; recall's: the true ones. */
static double row_positives(mxu_metric_kind kind, const mxu_metric_options *o,
                            const float *y, int64_t k, const float *t) {
  double n = 0.0;
  for (int64_t j = counted_first(o); j < counted_end(o, k); j++)
    n += kind == MXU_METRIC_PRECISION ? predicted(o, y, k, j) : t[j] != 0.0f;
  return n;
}

int mxu_metric_is_mean(mxu_metric_kind kind) {
  switch (kind) {
  case MXU_METRIC_PRECISION:
  case MXU_METRIC_RECALL:
  case MXU_METRIC_AUC:
  case MXU_METRIC_AUC_PR:
  case MXU_METRIC_TRUE_POSITIVES:
  case MXU_METRIC_FALSE_POSITIVES:
  case MXU_METRIC_TRUE_NEGATIVES:
  case MXU_METRIC_FALSE_NEGATIVES:
  case MXU_METRIC_F_SCORE:
  case MXU_METRIC_MEAN_IOU:
  case MXU_METRIC_ONE_HOT_MEAN_IOU:
  case MXU_METRIC_BINARY_IOU: return 0;
  default: return 1;
  }
}

int mxu_metric_has_curve(mxu_metric_kind kind) {
  return kind == MXU_METRIC_AUC || kind == MXU_METRIC_AUC_PR;
}

int64_t mxu_metric_tally_size(mxu_metric_kind kind, int64_t values) {
  if (mxu_metric_has_curve(kind)) return MXU_AUC_VALUES;
  if (kind == MXU_METRIC_BINARY_IOU) return 8;
  return kind == MXU_METRIC_F_SCORE || mxu_metric_is_iou(kind) ? 4 * values : 0;
}

/* The counts' value is their sum; precision and recall divide it. */
static int is_count(mxu_metric_kind kind) {
  return !mxu_metric_is_mean(kind) && !mxu_metric_tally_size(kind, 1) &&
         kind != MXU_METRIC_PRECISION && kind != MXU_METRIC_RECALL;
}

double mxu_metric_sum(mxu_metric_kind kind, const mxu_metric_options *options,
                      int64_t rows, int64_t k, const float *y,
                      const int32_t *labels, const float *targets,
                      const float *mask, double *divisor) {
  double total = 0.0, of = 0.0;
  int mean = mxu_metric_is_mean(kind), ratio = !mean && !is_count(kind);
  *divisor = 0.0;
  if (mxu_metric_tally_size(kind, k)) return 0.0; /* mxu_metric_tally */
  for (int64_t r = 0; r < rows; r++) {
    if (mask[r] == 0.0f) continue; /* a masked row's values may be any */
    double w = mask[r];
    total +=
        w * row_metric(kind, options, y + r * k, k, labels[r], targets + r * k);
    if (mean)
      of += w;
    else if (ratio) /* precision's and recall's */
      of += w * row_positives(kind, options, y + r * k, k, targets + r * k);
  }
  *divisor = of;
  return total;
}

/* Keras' bucket of a prediction: the thresholds i / (T - 1) it is above,
 * ceil(y (T - 1)) - 1, in float32 as Keras computes it; below 0 the
 * first (the threshold -epsilon), above 1 the last. */
static int auc_bucket(float y) {
  float b = ceilf(y * (float)(MXU_AUC_THRESHOLDS - 1)) - 1.0f;
  if (!(b > 0.0f)) return 0;
  return b >= MXU_AUC_THRESHOLDS - 1 ? MXU_AUC_THRESHOLDS - 1 : (int)b;
}

void mxu_auc_counts(int64_t rows, int64_t k, const float *y,
                    const float *targets, const float *mask, int from_logits,
                    float *curve) {
  for (int64_t r = 0; r < rows; r++) {
    if (mask[r] == 0.0f) continue;
    for (int64_t j = r * k; j < (r + 1) * k; j++) {
      int b = auc_bucket(from_logits ? 1.0f / (1.0f + expf(-y[j])) : y[j]);
      curve[b] += mask[r] * targets[j];
      curve[MXU_AUC_THRESHOLDS + b] += mask[r] * (1.0f - targets[j]);
    }
  }
}

static double divide_no_nan(double a, double b) { return b != 0 ? a / b : 0.0; }

/* Keras' interpolation of the precision-recall curve: between thresholds
 * precision varies as TP and P = TP + FP do, linearly, whose integral over
 * P is slope (dTP + intercept log(P_i / P_i+1)), over all positives. */
static double pr_area(const double *tp, const double *fp, double positives) {
  double area = 0.0;
  for (int i = 0; i + 1 < MXU_AUC_THRESHOLDS; i++) {
    double dtp = tp[i] - tp[i + 1];
    double p = tp[i] + fp[i], next = tp[i + 1] + fp[i + 1];
    double slope = divide_no_nan(dtp, fmax(p - next, 0.0));
    double intercept = tp[i + 1] - slope * next;
    double ratio = p > 0 && next > 0 ? divide_no_nan(p, fmax(next, 0.0)) : 1.0;
    area += divide_no_nan(slope * (dtp + intercept * log(ratio)),
                          fmax(positives, 0.0));
  }
  return area;
}

double mxu_auc_result(mxu_metric_kind kind, const double *curve) {
  /* At threshold i: the true and false values above it, the buckets from
   * i on; their rates over all true (all false) values. */
  double tp[MXU_AUC_THRESHOLDS], fp[MXU_AUC_THRESHOLDS], t = 0.0, f = 0.0;
  for (int i = MXU_AUC_THRESHOLDS - 1; i >= 0; i--) {
    tp[i] = t += curve[i];
    fp[i] = f += curve[MXU_AUC_THRESHOLDS + i];
  }
  if (kind == MXU_METRIC_AUC_PR) return pr_area(tp, fp, t);
  double area = 0.0;
  for (int i = 0; i + 1 < MXU_AUC_THRESHOLDS; i++) {
    double tpr = t > 0 ? tp[i] / t : 0.0,
           next_tpr = t > 0 ? tp[i + 1] / t : 0.0;
    double fpr = f > 0 ? fp[i] / f : 0.0,
           next_fpr = f > 0 ? fp[i + 1] / f : 0.0;
    area += (fpr - next_fpr) * (tpr + next_tpr) / 2.0;
  }
  return area;
}

/* Keras' F-score counts: a value is predicted positive above the
 * threshold, or without one where it is its row's largest and not 0;
 * per value of the row, the true positives, false positives, false
 * negatives and the targets' sum (each class's support), in turn. */
static void f_score_counts(const mxu_metric_options *o, int64_t rows, int64_t k,
                           const float *y, const float *targets,
                           const float *mask, float *tally) {
  for (int64_t r = 0; r < rows; r++) {
    if (mask[r] == 0.0f) continue;
    const float *row = y + r * k, *t = targets + r * k;
    float max = row[0];
    for (int64_t j = 1; j < k; j++) max = row[j] > max ? row[j] : max;
    for (int64_t j = 0; j < k; j++) {
      float p = o->has_threshold
                    ? (float)(row[j] > (float)o->threshold)
                    : (float)(row[j] >= max && fabsf(row[j]) > 1e-9f);
      float w = mask[r];
      tally[j] += w * p * t[j];
      tally[k + j] += w * p * (1.0f - t[j]);
      tally[2 * k + j] += w * (1.0f - p) * t[j];
      tally[3 * k + j] += w * t[j];
    }
  }
}

int mxu_metric_is_iou(mxu_metric_kind kind) {
  return kind == MXU_METRIC_MEAN_IOU || kind == MXU_METRIC_ONE_HOT_MEAN_IOU;
}

/* Keras' MeanIoU counts: each row's predicted class (the output's argmax)
 * against its true class (the label, or the targets' argmax), per class
 * the true positives, false positives, false negatives and true rows, in
 * turn (an F-score's counts of the argmax). A row whose true class is the
 * ignore_class, or no class, is left out, as Keras' bounds mask leaves it
 * out of the confusion matrix. */
static void iou_counts(mxu_metric_kind kind, const mxu_metric_options *o,
                       int64_t rows, int64_t k, const float *y,
                       const int32_t *labels, const float *targets,
                       const float *mask, float *tally) {
  for (int64_t r = 0; r < rows; r++) {
    int64_t truth =
        kind == MXU_METRIC_MEAN_IOU ? labels[r] : argmax(targets + r * k, k);
    if (mask[r] == 0.0f || truth < 0 || truth >= k ||
        (o->has_ignore_class && truth == o->ignore_class))
      continue;
    int64_t predicted = argmax(y + r * k, k);
    if (predicted == truth) {
      tally[truth] += mask[r];
    } else {
      tally[k + predicted] += mask[r];
      tally[2 * k + truth] += mask[r];
    }
    tally[3 * k + truth] += mask[r];
  }
}

/* BinaryIoU's counts, as iou_counts' of two classes: every value of a
 * row, predicted 1 at or above the threshold, its true class the target
 * truncated (a target truncating to neither class left out). */
static void binary_iou_counts(const mxu_metric_options *o, int64_t rows,
                              int64_t k, const float *y, const float *targets,
                              const float *mask, float *tally) {
  float threshold = o->has_threshold ? (float)o->threshold : 0.5f;
  for (int64_t i = 0; i < rows * k; i++) {
    float t = targets[i], w = mask[i / k];
    if (w == 0.0f || !(t > -1.0f && t < 2.0f)) continue;
    int truth = t >= 1.0f, predicted = y[i] >= threshold;
    if (predicted == truth) {
      tally[truth] += w;
    } else {
      tally[2 + predicted] += w;
      tally[4 + truth] += w;
    }
    tally[6 + truth] += w;
  }
}

void mxu_metric_tally(mxu_metric_kind kind, const mxu_metric_options *options,
                      int64_t rows, int64_t k, const float *y,
                      const int32_t *labels, const float *targets,
                      const float *mask, float *tally) {
  if (kind == MXU_METRIC_BINARY_IOU)
    binary_iou_counts(options, rows, k, y, targets, mask, tally);
  else if (kind == MXU_METRIC_F_SCORE)
    f_score_counts(options, rows, k, y, targets, mask, tally);
  else if (mxu_metric_is_iou(kind))
    iou_counts(kind, options, rows, k, y, labels, targets, mask, tally);
  else
    mxu_auc_counts(rows, k, y, targets, mask, options->from_logits, tally);
}

/* Keras' F-beta of the counts, its epsilon (1e-7) where it divides. */
static double f_beta(double tp, double fp, double fn, double beta) {
  const double eps = 1e-7, b2 = beta * beta;
  double precision = tp / (tp + fp + eps), recall = tp / (tp + fn + eps);
  return precision * recall / (b2 * precision + recall + eps) * (1 + b2);
}

static double f_score_result(const mxu_metric_options *o, const double *tally,
                             int64_t k) {
  const double *tp = tally, *fp = tally + k, *fn = tally + 2 * k,
               *support = tally + 3 * k;
  double score = 0.0, sums[3] = {0}, total = 0.0;
  for (int64_t j = 0; j < k; j++) {
    sums[0] += tp[j];
    sums[1] += fp[j];
    sums[2] += fn[j];
    total += support[j];
  }
  if (o->average == MXU_AVERAGE_MICRO)
    return f_beta(sums[0], sums[1], sums[2], o->beta);
  for (int64_t j = 0; j < k; j++) {
    double f = f_beta(tp[j], fp[j], fn[j], o->beta);
    score += o->average == MXU_AVERAGE_WEIGHTED
                 ? f * support[j] / (total + 1e-7)
                 : f / (double)k;
  }
  return score;
}

/* Keras' IoU.result: per class (of first .. end) tp / (tp + fp + fn +
 * 1e-7), meaned over the classes whose denominator is above 1e-9 (the
 * others count 0), the count plus 1e-7. */
static double iou_result(const double *tally, int64_t k, int64_t first,
                         int64_t end) {
  const double eps = 1e-7;
  double sum = 0.0, seen = 0.0;
  for (int64_t j = first; j < end; j++) {
    double tp = tally[j], denominator = tp + tally[k + j] + tally[2 * k + j];
    if (!(denominator > 1e-9)) continue;
    sum += tp / (denominator + eps);
    seen += 1.0;
  }
  return sum / (seen + eps);
}

double mxu_tally_result(mxu_metric_kind kind, const mxu_metric_options *options,
                        const double *tally, int64_t values) {
  if (kind == MXU_METRIC_F_SCORE) return f_score_result(options, tally, values);
  if (mxu_metric_is_iou(kind)) return iou_result(tally, values, 0, values);
  if (kind == MXU_METRIC_BINARY_IOU)
    return iou_result(tally, 2, counted_first(options),
                      counted_end(options, 2));
  return mxu_auc_result(kind, tally);
}

double mxu_metric_result(mxu_metric_kind kind, double sum, double divisor) {
  if (is_count(kind)) return sum;
  double mean = divisor > 0 ? sum / divisor : 0.0;
  return kind == MXU_METRIC_RMSE ? sqrt(mean) : mean;
}

/* ---- names ---------------------------------------------------------------
 */

/* In mxu_loss order: Keras' function name (written back), its class, and
 * the other names its get() takes. */
static const struct {
  const char *name, *class_name, *alias[2];
} losses[] = {
    {"sparse_categorical_crossentropy", "SparseCategoricalCrossentropy", {0}},
    {"categorical_crossentropy", "CategoricalCrossentropy", {0}},
    {"binary_crossentropy", "BinaryCrossentropy", {0}},
    {"mean_squared_error", "MeanSquaredError", {"mse", NULL}},
    {"mean_absolute_error", "MeanAbsoluteError", {"mae", NULL}},
    {"huber", "Huber", {"huber_loss", NULL}},
    {"kl_divergence", "KLDivergence", {"kld", "kullback_leibler_divergence"}},
    {"mean_absolute_percentage_error",
     "MeanAbsolutePercentageError",
     {"mape", NULL}},
    {"mean_squared_logarithmic_error",
     "MeanSquaredLogarithmicError",
     {"msle", NULL}},
    {"log_cosh", "LogCosh", {"logcosh", NULL}},
    {"poisson", "Poisson", {0}},
    {"hinge", "Hinge", {0}},
    {"squared_hinge", "SquaredHinge", {0}},
    {"categorical_hinge", "CategoricalHinge", {0}},
    {"cosine_similarity", "CosineSimilarity", {0}},
    {"binary_focal_crossentropy", "BinaryFocalCrossentropy", {0}},
    {"categorical_focal_crossentropy", "CategoricalFocalCrossentropy", {0}},
};

enum { LOSS_COUNT = sizeof losses / sizeof *losses };

const char *mxu_loss_name(mxu_loss loss) {
  return (unsigned)loss < LOSS_COUNT ? losses[loss].name : "unknown";
}

const char *mxu_loss_class_name(mxu_loss loss) {
  return (unsigned)loss < LOSS_COUNT ? losses[loss].class_name : "Unknown";
}

mxu_status mxu_loss_from_name(const char *name, mxu_loss *out) {
  for (int i = 0; name && i < LOSS_COUNT; i++) {
    int match = strcmp(name, losses[i].name) == 0 ||
                strcmp(name, losses[i].class_name) == 0;
    for (int a = 0; a < 2 && losses[i].alias[a]; a++)
      match |= strcmp(name, losses[i].alias[a]) == 0;
    if (!match) continue;
    *out = (mxu_loss)i;
    return MXU_OK;
  }
  return mxu_fail(MXU_ERR_UNSUPPORTED,
                  "loss '%s' is not supported (supported: "
                  "sparse_categorical_crossentropy, categorical_crossentropy, "
                  "binary_crossentropy, mean_squared_error (mse), "
                  "mean_absolute_error (mae), huber, kl_divergence (kld), "
                  "mean_absolute_percentage_error (mape), "
                  "mean_squared_logarithmic_error (msle), log_cosh, "
                  "poisson, hinge, squared_hinge, categorical_hinge, "
                  "cosine_similarity, binary_focal_crossentropy, "
                  "categorical_focal_crossentropy, or their classes)",
                  name ? name : "(null)");
}

static const struct {
  const char *name;
  mxu_metric_kind kind; /* for "accuracy": decided by the loss */
  int accuracy;
} metric_names[] = {
    {"accuracy", MXU_METRIC_SPARSE_ACCURACY, 1},
    {"acc", MXU_METRIC_SPARSE_ACCURACY, 1},
    {"sparse_categorical_accuracy", MXU_METRIC_SPARSE_ACCURACY, 0},
    {"categorical_accuracy", MXU_METRIC_CATEGORICAL_ACCURACY, 0},
    {"binary_accuracy", MXU_METRIC_BINARY_ACCURACY, 0},
    {"top_k_categorical_accuracy", MXU_METRIC_TOP_K, 0},
    {"sparse_top_k_categorical_accuracy", MXU_METRIC_SPARSE_TOP_K, 0},
    {"mae", MXU_METRIC_MAE, 0},
    {"mean_absolute_error", MXU_METRIC_MAE, 0},
    {"mse", MXU_METRIC_MSE, 0},
    {"mean_squared_error", MXU_METRIC_MSE, 0},
    {"root_mean_squared_error", MXU_METRIC_RMSE, 0},
    {"precision", MXU_METRIC_PRECISION, 0},
    {"recall", MXU_METRIC_RECALL, 0},
    {"auc", MXU_METRIC_AUC, 0},
    {"prc", MXU_METRIC_AUC_PR, 0},
    {"true_positives", MXU_METRIC_TRUE_POSITIVES, 0},
    {"false_positives", MXU_METRIC_FALSE_POSITIVES, 0},
    {"true_negatives", MXU_METRIC_TRUE_NEGATIVES, 0},
    {"false_negatives", MXU_METRIC_FALSE_NEGATIVES, 0},
    {"binary_crossentropy", MXU_METRIC_BINARY_CROSSENTROPY, 0},
    {"mape", MXU_METRIC_MAPE, 0},
    {"mean_absolute_percentage_error", MXU_METRIC_MAPE, 0},
    {"msle", MXU_METRIC_MSLE, 0},
    {"mean_squared_logarithmic_error", MXU_METRIC_MSLE, 0},
    {"logcosh", MXU_METRIC_LOGCOSH, 0},
    {"poisson", MXU_METRIC_POISSON, 0},
    {"hinge", MXU_METRIC_HINGE, 0},
    {"squared_hinge", MXU_METRIC_SQUARED_HINGE, 0},
    {"categorical_hinge", MXU_METRIC_CATEGORICAL_HINGE, 0},
    {"cosine_similarity", MXU_METRIC_COSINE_SIMILARITY, 0},
    {"f1_score", MXU_METRIC_F_SCORE, 0},
    {"fbeta_score", MXU_METRIC_F_SCORE, 0},
    {"mean_iou", MXU_METRIC_MEAN_IOU, 0},
    {"one_hot_mean_iou", MXU_METRIC_ONE_HOT_MEAN_IOU, 0},
    {"binary_iou", MXU_METRIC_BINARY_IOU, 0},
};

const char *mxu_metric_name(const char *name) {
  for (size_t i = 0; i < sizeof metric_names / sizeof *metric_names; i++)
    if (strcmp(name, metric_names[i].name) == 0) return metric_names[i].name;
  return NULL;
}

int mxu_metric_says(const char *name, const char *metric) {
  int a = -1, b = -1;
  for (int i = 0; i < (int)(sizeof metric_names / sizeof *metric_names); i++) {
    if (strcmp(name, metric_names[i].name) == 0) a = i;
    if (strcmp(metric, metric_names[i].name) == 0) b = i;
  }
  if (a < 0 || b < 0) return 0;
  mxu_metric_kind kind = metric_names[b].kind;
  if (metric_names[a].accuracy)
    return metric_names[b].accuracy || kind == MXU_METRIC_SPARSE_ACCURACY ||
           kind == MXU_METRIC_CATEGORICAL_ACCURACY ||
           kind == MXU_METRIC_BINARY_ACCURACY;
  return !metric_names[b].accuracy && metric_names[a].kind == kind;
}

const char *mxu_metric_function(mxu_metric_kind kind) {
  switch (kind) {
  case MXU_METRIC_SPARSE_ACCURACY: return "sparse_categorical_accuracy";
  case MXU_METRIC_CATEGORICAL_ACCURACY: return "categorical_accuracy";
  case MXU_METRIC_BINARY_ACCURACY: return "binary_accuracy";
  case MXU_METRIC_TOP_K: return "top_k_categorical_accuracy";
  case MXU_METRIC_SPARSE_TOP_K: return "sparse_top_k_categorical_accuracy";
  case MXU_METRIC_MAE: return "mean_absolute_error";
  case MXU_METRIC_MSE: return "mean_squared_error";
  case MXU_METRIC_RMSE: return "root_mean_squared_error";
  case MXU_METRIC_PRECISION: return "precision";
  case MXU_METRIC_RECALL: return "recall";
  case MXU_METRIC_AUC: return "auc";
  case MXU_METRIC_AUC_PR: return "prc";
  case MXU_METRIC_TRUE_POSITIVES: return "true_positives";
  case MXU_METRIC_FALSE_POSITIVES: return "false_positives";
  case MXU_METRIC_TRUE_NEGATIVES: return "true_negatives";
  case MXU_METRIC_FALSE_NEGATIVES: return "false_negatives";
  case MXU_METRIC_BINARY_CROSSENTROPY: return "binary_crossentropy";
  case MXU_METRIC_MAPE: return "mean_absolute_percentage_error";
  case MXU_METRIC_MSLE: return "mean_squared_logarithmic_error";
  case MXU_METRIC_LOGCOSH: return "logcosh";
  case MXU_METRIC_POISSON: return "poisson";
  case MXU_METRIC_HINGE: return "hinge";
  case MXU_METRIC_SQUARED_HINGE: return "squared_hinge";
  case MXU_METRIC_CATEGORICAL_HINGE: return "categorical_hinge";
  case MXU_METRIC_COSINE_SIMILARITY: return "cosine_similarity";
  case MXU_METRIC_F_SCORE: return "f1_score";
  case MXU_METRIC_MEAN_IOU: return "mean_iou";
  case MXU_METRIC_ONE_HOT_MEAN_IOU: return "one_hot_mean_iou";
  case MXU_METRIC_BINARY_IOU: return "binary_iou";
  }
  return "";
}

const char *mxu_metric_names(void) {
  return "accuracy, acc, sparse_categorical_accuracy, categorical_accuracy, "
         "binary_accuracy, top_k_categorical_accuracy, "
         "sparse_top_k_categorical_accuracy, mae, mean_absolute_error, mse, "
         "mean_squared_error, root_mean_squared_error, precision, recall, "
         "auc, prc, true_positives, false_positives, true_negatives, "
         "false_negatives, binary_crossentropy, mape, msle, logcosh, "
         "poisson, hinge, squared_hinge, categorical_hinge, "
         "cosine_similarity, f1_score(average=A) and "
         "fbeta_score(average=A,beta=B) (A micro, macro or weighted; "
         "threshold=T too), precision and recall with "
         "(threshold=T,top_k=K,class_id=C), the counts with (threshold=T), "
         "mean_iou(num_classes=N[,ignore_class=C]) of class labels and "
         "one_hot_mean_iou(num_classes=N[,ignore_class=C]) of one-hot "
         "targets, binary_iou(threshold=T,class_id=C)";
}

/* Keras resolves "accuracy" by the loss and the output: binary for the
 * binary cross-entropy or a one-value output, sparse for the sparse loss,
 * categorical otherwise. */
static mxu_metric_kind accuracy_for(mxu_loss loss, int64_t outputs) {
  if (loss == MXU_BINARY_CROSSENTROPY || outputs == 1)
    return MXU_METRIC_BINARY_ACCURACY;
  if (loss == MXU_SPARSE_CATEGORICAL_CROSSENTROPY)
    return MXU_METRIC_SPARSE_ACCURACY;
  return MXU_METRIC_CATEGORICAL_ACCURACY;
}

mxu_status mxu_metric_kind_of(const char *name, mxu_loss loss, int64_t outputs,
                              mxu_metric_kind *out) {
  for (size_t i = 0; i < sizeof metric_names / sizeof *metric_names; i++) {
    if (strcmp(name, metric_names[i].name) != 0) continue;
    *out = metric_names[i].accuracy ? accuracy_for(loss, outputs)
                                    : metric_names[i].kind;
    return MXU_OK;
  }
  return mxu_fail(MXU_ERR_UNSUPPORTED,
                  "compile: metric '%s' is not supported (supported: %s)", name,
                  mxu_metric_names());
}

/* Which options a metric takes: an F-score's average, beta (FBetaScore)
 * and threshold in (0, 1]; BinaryAccuracy's threshold, any; an AUC's
 * from_logits; the counts' threshold in [0, 1], and Precision's and
 * Recall's top_k and class_id too. */
typedef enum {
  TAKES_NONE,
  TAKES_F,
  TAKES_FBETA,
  TAKES_THRESHOLD,
  TAKES_LOGITS,
  TAKES_COUNT,
  TAKES_PR,
  TAKES_IOU,
  TAKES_BINARY_IOU
} takes;

static takes options_taken(mxu_metric_kind kind, const char *metric) {
  switch (kind) {
  case MXU_METRIC_F_SCORE:
    return strcmp(metric, "fbeta_score") == 0 ? TAKES_FBETA : TAKES_F;
  case MXU_METRIC_BINARY_ACCURACY:
    return strcmp(metric, "binary_accuracy") == 0 ? TAKES_THRESHOLD
                                                  : TAKES_NONE;
  case MXU_METRIC_AUC:
  case MXU_METRIC_AUC_PR: return TAKES_LOGITS;
  case MXU_METRIC_PRECISION:
  case MXU_METRIC_RECALL: return TAKES_PR;
  case MXU_METRIC_TRUE_POSITIVES:
  case MXU_METRIC_FALSE_POSITIVES:
  case MXU_METRIC_TRUE_NEGATIVES:
  case MXU_METRIC_FALSE_NEGATIVES: return TAKES_COUNT;
  case MXU_METRIC_MEAN_IOU:
  case MXU_METRIC_ONE_HOT_MEAN_IOU: return TAKES_IOU;
  case MXU_METRIC_BINARY_IOU: return TAKES_BINARY_IOU;
  default: return TAKES_NONE;
  }
}

/* Option "key=value" (n characters) of a metric taking `t`, into o. */
static mxu_status read_option(const char *spec, const char *text, size_t n,
                              takes t, mxu_metric_options *o) {
  static const char *const averages[] = {"micro", "macro", "weighted"};
  static const char *const offered[] = {
      [TAKES_F] = "average=micro|macro|weighted, threshold=T (0 < T <= 1)",
      [TAKES_FBETA] = "average=micro|macro|weighted, threshold=T (0 < T <= "
                      "1), beta=B (B > 0)",
      [TAKES_THRESHOLD] = "threshold=T",
      [TAKES_LOGITS] = "from_logits=0|1",
      [TAKES_COUNT] = "threshold=T (0 <= T <= 1)",
      [TAKES_PR] = "threshold=T (0 <= T <= 1), top_k=K (K >= 1), "
                   "class_id=C (C >= 0)",
      [TAKES_IOU] = "num_classes=N (N >= 1), ignore_class=C (an integer)",
      [TAKES_BINARY_IOU] = "threshold=T, class_id=0|1 (the one class to "
                           "mean)"};
  char option[64];
  snprintf(option, sizeof option, "%.*s", (int)(n < 63 ? n : 63), text);
  char *value = strchr(option, '=');
  if (value) *value++ = '\0';
  char *end = NULL;
  double number = value ? strtod(value, &end) : NAN;
  int is_number = value && *value && end && !*end && isfinite(number);
  int f = t == TAKES_F || t == TAKES_FBETA;
  int counts = t == TAKES_COUNT || t == TAKES_PR;
  int whole = is_number && number == (double)(int)number && number >= 0 &&
              number < 1 << 20;
  if (counts && is_number && !strcmp(option, "threshold")) {
    if (number >= 0 && number <= 1) {
      o->threshold = number;
      o->has_threshold = 1;
      return MXU_OK;
    }
  } else if (t == TAKES_PR && whole && number >= 1 &&
             !strcmp(option, "top_k")) {
    o->top_k = (int)number;
    return MXU_OK;
  } else if (t == TAKES_BINARY_IOU && is_number &&
             !strcmp(option, "threshold")) {
    o->threshold = number;
    o->has_threshold = 1;
    return MXU_OK;
  } else if (t == TAKES_BINARY_IOU && whole && number <= 1 &&
             !strcmp(option, "class_id")) {
    o->class_id = (int)number;
    o->has_class_id = 1;
    return MXU_OK;
  } else if (t == TAKES_PR && whole && !strcmp(option, "class_id")) {
    o->class_id = (int)number;
    o->has_class_id = 1;
    return MXU_OK;
  } else if (f && value && !strcmp(option, "average")) {
    for (int i = 0; i < 3; i++)
      if (!strcmp(value, averages[i])) {
        o->average = (mxu_metric_average)(MXU_AVERAGE_MICRO + i);
        return MXU_OK;
      }
  } else if ((f || t == TAKES_THRESHOLD) && is_number &&
             !strcmp(option, "threshold")) {
    if (!f || (number > 0 && number <= 1)) {
      o->threshold = number;
      o->has_threshold = 1;
      return MXU_OK;
    }
  } else if (t == TAKES_FBETA && is_number && !strcmp(option, "beta")) {
    if (number > 0) {
      o->beta = number;
      return MXU_OK;
    }
  } else if (t == TAKES_IOU && whole && number >= 1 &&
             !strcmp(option, "num_classes")) {
    o->num_classes = (int)number;
    return MXU_OK;
  } else if (t == TAKES_IOU && is_number && number == floor(number) &&
             fabs(number) < 2147483648.0 && !strcmp(option, "ignore_class")) {
    o->ignore_class = (int)number;
    o->has_ignore_class = 1;
    return MXU_OK;
  } else if (t == TAKES_LOGITS && is_number && !strcmp(option, "from_logits")) {
    if (number == 0 || number == 1) {
      o->from_logits = number == 1;
      return MXU_OK;
    }
  }
  return mxu_fail(MXU_ERR_ARG,
                  "compile: metric '%s': option '%.*s' is not one of %s", spec,
                  (int)n, text, offered[t]);
}

/* The options in parentheses of a metric (the text between them). */
static mxu_status read_options(const char *spec, const char *text, size_t n,
                               takes t, mxu_metric_options *o) {
  for (size_t at = 0; text && at < n;) {
    size_t len = 0;
    while (at + len < n && text[at + len] != ',') len++;
    MXU_TRY(read_option(spec, text + at, len, t, o));
    at += len + 1;
  }
  if (t == TAKES_IOU && !o->num_classes)
    return mxu_fail(MXU_ERR_ARG,
                    "compile: metric '%s' needs its classes, as Keras' "
                    "MeanIoU(num_classes): give num_classes=N, the output's "
                    "last axis (mean_iou(num_classes=N))",
                    spec);
  if (o->average || (t != TAKES_F && t != TAKES_FBETA)) return MXU_OK;
  return mxu_fail(MXU_ERR_UNSUPPORTED,
                  "compile: metric '%s': without an average Keras logs a "
                  "score per class, and mxu logs one number a metric: give "
                  "one, as in f1_score(average=macro) (micro, macro or "
                  "weighted)",
                  spec);
}

/* Where a metric's text ends before its options (the parentheses it ends
 * with), and where its METRIC starts (after the last '=' before them; 0
 * without a NAME=). */
static void metric_parts(const char *spec, size_t *head, size_t *metric) {
  size_t length = strlen(spec);
  const char *open =
      length && spec[length - 1] == ')' ? strrchr(spec, '(') : NULL;
  *head = open ? (size_t)(open - spec) : length;
  *metric = 0;
  for (size_t i = *head; i > 0 && !*metric; i--) /* a name may hold '=' */
    if (spec[i - 1] == '=') *metric = i;
}

size_t mxu_metric_logged_length(const char *spec) {
  size_t head, metric;
  metric_parts(spec, &head, &metric);
  return metric ? metric - 1 : head;
}

mxu_status mxu_metric_parse(const char *spec, mxu_loss loss, int64_t outputs,
                            char log[MXU_METRIC_LOG_SIZE],
                            mxu_metric_kind *kind,
                            mxu_metric_options *options) {
  mxu_metric_options own;
  if (!options) options = &own;
  *options = (mxu_metric_options){.beta = 1.0};
  size_t head, at, length = strlen(spec);
  metric_parts(spec, &head, &at);
  const char *open = head < length ? spec + head : NULL;
  size_t n = mxu_metric_logged_length(spec);
  const char *name = spec + at;
  size_t name_length = head - at;
  if (n == 0 || n >= MXU_METRIC_LOG_SIZE)
    return mxu_fail(MXU_ERR_ARG,
                    "compile: metric '%s': the name it is logged under must "
                    "be 1 to %d characters (\"NAME=METRIC\" logs METRIC as "
                    "NAME)",
                    spec, MXU_METRIC_LOG_SIZE - 1);
  memcpy(log, spec, n);
  log[n] = '\0';
  char metric[MXU_METRIC_LOG_SIZE];
  snprintf(metric, sizeof metric, "%.*s",
           (int)(name_length < sizeof metric ? name_length : sizeof metric - 1),
           name);
  MXU_TRY(mxu_metric_kind_of(metric, loss, outputs, kind));
  takes t = options_taken(*kind, metric);
  if (open && t == TAKES_NONE)
    return mxu_fail(MXU_ERR_ARG, "compile: metric '%s': %s takes no options",
                    spec, metric);
  return read_options(spec, open ? open + 1 : NULL,
                      open ? length - head - 2 : 0, t, options);
}

int mxu_metric_direction(mxu_metric_kind kind) {
  switch (kind) {
  case MXU_METRIC_MAE:
  case MXU_METRIC_MSE:
  case MXU_METRIC_RMSE:
  case MXU_METRIC_BINARY_CROSSENTROPY:
  case MXU_METRIC_MAPE:
  case MXU_METRIC_MSLE:
  case MXU_METRIC_LOGCOSH:
  case MXU_METRIC_POISSON:
  case MXU_METRIC_HINGE:
  case MXU_METRIC_SQUARED_HINGE:
  case MXU_METRIC_CATEGORICAL_HINGE: return -1;
  case MXU_METRIC_TRUE_POSITIVES:
  case MXU_METRIC_FALSE_POSITIVES:
  case MXU_METRIC_TRUE_NEGATIVES:
  case MXU_METRIC_FALSE_NEGATIVES: return 0;
  default: return 1; /* the accuracies, precision, recall, the AUCs */
  }
}

int mxu_metric_needs_labels(mxu_metric_kind kind) {
  return kind == MXU_METRIC_SPARSE_ACCURACY ||
         kind == MXU_METRIC_SPARSE_TOP_K || kind == MXU_METRIC_MEAN_IOU;
}
