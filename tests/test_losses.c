/* test_losses.c — the target losses and the metrics: values against
 * Keras' formulas written out here, gradients against central finite
 * differences, and training through the public API on float targets
 * (regression) and binary labels. */
#include "check.h"
#include "model/model.h"

enum { ROWS = 3, K = 4 };

static const float Y[ROWS * K] = {0.2f, 0.7f, 0.05f, 0.9f, -1.5f, 0.3f,
                                  2.5f, 0.5f, 0.6f,  0.4f, 0.01f, 0.99f};
static const float T[ROWS * K] = {0.0f,  1.0f, 0.0f, 1.0f, 1.0f, 0.0f,
                                  0.25f, 0.5f, 0.0f, 0.0f, 0.0f, 1.0f};
static const float MASK[ROWS] = {1, 1, 1};
/* The targets check_loss_at scores against: T, or others it is given. */
static const float *targets = T;

static mxu_loss_spec spec_of(mxu_loss loss) {
  mxu_loss_spec s = {mxu_output_loss_defaults(), K, K};
  s.o.loss = loss;
  return s;
}

/* Keras' per-element formula in double, the row's loss its mean (KL: sum). */
static double keras_element(const mxu_loss_spec *s, double y, double t) {
  const double eps = 1e-7;
  switch (s->o.loss) {
  case MXU_BINARY_CROSSENTROPY: {
    t = t * (1 - s->o.label_smoothing) + 0.5 * s->o.label_smoothing;
    if (s->o.from_logits) {
      double p = 1 / (1 + exp(-y));
      return -(t * log(p) + (1 - t) * log(1 - p));
    }
    /* The clip's upper bound is float32's 1 - 1e-7, as in Keras. */
    double c = fmin(fmax(y, eps), (double)(1.0f - 1e-7f));
    return -(t * log(c) + (1 - t) * log(1 - c));
  }
  case MXU_MEAN_SQUARED_ERROR: return (y - t) * (y - t);
  case MXU_MEAN_ABSOLUTE_ERROR: return fabs(y - t);
  case MXU_HUBER: {
    double e = fabs(y - t), d = s->o.huber_delta;
    return e <= d ? 0.5 * e * e : d * e - 0.5 * d * d;
  }
  case MXU_KL_DIVERGENCE: {
    double tc = fmin(fmax(t, eps), 1), pc = fmin(fmax(y, eps), 1);
    return tc * log(tc / pc);
  }
  case MXU_MEAN_ABSOLUTE_PERCENTAGE_ERROR:
    return 100 * fabs((t - y) / fmax(fabs(t), eps));
  case MXU_MEAN_SQUARED_LOGARITHMIC_ERROR: {
    double d = log(fmax(y, eps) + 1) - log(fmax(t, eps) + 1);
    return d * d;
  }
  case MXU_LOG_COSH: return log(cosh(y - t));
  case MXU_POISSON: return y - t * log(y + eps);
  case MXU_HINGE:
  case MXU_SQUARED_HINGE: { /* labels 0 and 1 as -1 and 1 */
    double m = fmax(1 - (t == 0 ? -1 : t) * y, 0);
    return s->o.loss == MXU_HINGE ? m : m * m;
  }
  case MXU_BINARY_FOCAL_CROSSENTROPY: {
    const mxu_output_loss *o = &s->o;
    t = t * (1 - o->label_smoothing) + 0.5 * o->label_smoothing;
    double p = o->from_logits ? 1 / (1 + exp(-y)) : y;
    double c = fmin(fmax(p, eps), (double)(1.0f - 1e-7f));
    double bce = -(t * log(c) + (1 - t) * log(1 - c));
    double w =
        o->apply_class_balancing ? t * o->alpha + (1 - t) * (1 - o->alpha) : 1;
    return w * pow(1 - (t * p + (1 - t) * (1 - p)), o->gamma) * bce;
  }
  default: return NAN;
  }
}

/* Keras' formulas of a vector of n values. */
static double keras_vector(const mxu_loss_spec *s, const float *y,
                           const float *t, int n) {
  const mxu_output_loss *o = &s->o;
  double ty = 0, yy = 0, tt = 0, neg = -INFINITY, ps = 0, max = -INFINITY;
  for (int j = 0; j < n; j++) {
    ty += (double)t[j] * y[j];
    yy += (double)y[j] * y[j];
    tt += (double)t[j] * t[j];
    neg = fmax(neg, (1 - t[j]) * y[j]);
    max = fmax(max, y[j]);
  }
  if (o->loss == MXU_CATEGORICAL_HINGE) return fmax(neg - ty + 1, 0);
  if (o->loss == MXU_COSINE_SIMILARITY)
    return -ty * fmin(1 / sqrt(yy), 1e7) * fmin(1 / sqrt(tt), 1e7);
  double p[K], loss = 0;
  for (int j = 0; j < n; j++) {
    p[j] = o->from_logits ? exp(y[j] - max) : y[j];
    ps += p[j];
  }
  for (int j = 0; j < n; j++) { /* the categorical focal cross-entropy */
    double c = fmin(fmax(p[j] / ps, 1e-7), (double)(1.0f - 1e-7f));
    double tj = t[j] * (1 - o->label_smoothing) + o->label_smoothing / n;
    loss -= o->alpha * pow(1 - c, o->gamma) * tj * log(c);
  }
  return loss;
}

/* A row's loss: the mean of its values' (KL: the sum), or the mean of
 * its vectors'. */
static double keras_row(const mxu_loss_spec *s, const float *y,
                        const float *t) {
  double sum = 0;
  if (mxu_loss_of_vectors(s->o.loss)) {
    for (int j = 0; j < K; j += (int)s->last)
      sum += keras_vector(s, y + j, t + j, (int)s->last);
    return sum / (double)(K / s->last);
  }
  for (int j = 0; j < K; j++) sum += keras_element(s, y[j], t[j]);
  return s->o.loss == MXU_KL_DIVERGENCE ? sum : sum / K;
}

static double loss_total(const mxu_loss_spec *s, const float *y) {
  float loss[ROWS], grad[ROWS * K];
  mxu_target_loss(s, ROWS, y, targets, MASK, 1.0f, loss, grad);
  double total = 0;
  for (int r = 0; r < ROWS; r++) total += loss[r];
  return total;
}

/* At outputs Y (or base, for losses of positive outputs only). */
static void check_loss_at(mxu_loss_spec s, const char *what,
                          const float *base) {
  float loss[ROWS], grad[ROWS * K];
  const float scale = 0.5f;
  mxu_target_loss(&s, ROWS, base, targets, MASK, scale, loss, grad);
  for (int r = 0; r < ROWS; r++) {
    double want = keras_row(&s, base + r * K, targets + r * K);
    CHECK_MSG(fabs(loss[r] - want) <= 1e-5 * fmax(1, fabs(want)),
              "%s row %d: %.8g, Keras' formula %.8g", what, r, loss[r], want);
  }
  /* The gradient of scale * sum of row losses, element by element. */
  for (int i = 0; i < ROWS * K; i++) {
    float y[ROWS * K];
    memcpy(y, base, sizeof y);
    /* Away from the kinks (|y - t| = 0, delta; the clip bounds), a step
     * small beside y where log(y) curves fast. */
    const float h = 1e-3f * fmaxf(fabsf(base[i]), 0.1f);
    y[i] = base[i] + h;
    double up = loss_total(&s, y);
    y[i] = base[i] - h;
    double down = loss_total(&s, y);
    double want = scale * (up - down) / (2 * (double)h);
    CHECK_MSG(fabs(grad[i] - want) <= 5e-3 * fmax(1, fabs(want)),
              "%s d/dy[%d]: %.6g, finite differences %.6g", what, i, grad[i],
              want);
  }
}

static void check_loss(mxu_loss_spec s, const char *what) {
  check_loss_at(s, what, Y);
}

/* The hinges (labels 0 and 1, as -1 and 1), the vectors' losses over
 * one vector a row and over two, the focal cross-entropies. */
static void test_hinge_and_focal_losses(const float *positive) {
  check_loss(spec_of(MXU_HINGE), "hinge");
  check_loss(spec_of(MXU_SQUARED_HINGE), "squared_hinge");
  static const float signs[ROWS * K] = {-1, 1, -1, 1,  1, -1,
                                        1,  1, -1, -1, 1, -1};
  targets = signs;
  check_loss(spec_of(MXU_HINGE), "hinge of labels -1 and 1");
  targets = T;
  static const mxu_loss vectors[] = {MXU_CATEGORICAL_HINGE,
                                     MXU_COSINE_SIMILARITY,
                                     MXU_CATEGORICAL_FOCAL_CROSSENTROPY};
  for (int i = 0; i < 3; i++)
    for (int last = K; last >= 2; last /= 2) {
      mxu_loss_spec v = spec_of(vectors[i]);
      v.last = last;
      char what[96];
      snprintf(what, sizeof what, "%s, vectors of %d", mxu_loss_name(v.o.loss),
               last);
      check_loss_at(v, what, i == 2 ? positive : Y);
    }
  /* Probabilities for the binary focal cross-entropy. */
  float p[ROWS * K];
  for (int i = 0; i < ROWS * K; i++) p[i] = positive[i] / 3.0f;
  mxu_loss_spec f = spec_of(MXU_BINARY_FOCAL_CROSSENTROPY);
  check_loss_at(f, "binary_focal_crossentropy", p);
  f.o.gamma = 0.5f;
  f.o.apply_class_balancing = 1;
  f.o.alpha = 0.3f;
  f.o.label_smoothing = 0.1f;
  check_loss_at(f, "binary_focal_crossentropy gamma 0.5, balanced", p);
  f.o.from_logits = 1;
  check_loss(f, "binary_focal_crossentropy from logits");
  mxu_loss_spec c = spec_of(MXU_CATEGORICAL_FOCAL_CROSSENTROPY);
  c.o.gamma = 1.5f;
  c.o.alpha = 0.7f;
  c.o.label_smoothing = 0.2f;
  c.o.from_logits = 1;
  check_loss(c, "categorical_focal_crossentropy from logits");
  /* gamma 0, alpha 1: the categorical cross-entropy of the normalized
   * output. */
  c = spec_of(MXU_CATEGORICAL_FOCAL_CROSSENTROPY);
  c.o.gamma = 0.0f;
  c.o.alpha = 1.0f;
  float loss[ROWS], grad[ROWS * K];
  mxu_target_loss(&c, ROWS, positive, T, MASK, 1.0f, loss, grad);
  double sum = 0, cce = 0;
  for (int j = 0; j < K; j++) sum += positive[j];
  for (int j = 0; j < K; j++) cce -= T[j] * log(positive[j] / sum);
  CHECK_MSG(fabs(loss[0] - cce) < 1e-5, "focal, gamma 0: %g, cce %g", loss[0],
            cce);
  /* The categorical hinge's max shared among ties, as TensorFlow's. */
  mxu_loss_spec h = spec_of(MXU_CATEGORICAL_HINGE);
  const float tied[K] = {0.5f, 0.5f, 0.2f, 0.5f}, hot[K] = {0, 0, 1, 0};
  float one = 1.0f;
  mxu_target_loss(&h, 1, tied, hot, &one, 1.0f, loss, grad);
  CHECK_MSG(
      fabsf(loss[0] - 1.3f) < 1e-6f && fabsf(grad[0] - 1.0f / 3) < 1e-6f &&
          fabsf(grad[2] + 1.0f) < 1e-6f,
      "categorical hinge of ties: %g, d/dy %g %g", loss[0], grad[0], grad[2]);
}

static void test_target_losses(void) {
  check_loss(spec_of(MXU_MEAN_SQUARED_ERROR), "mse");
  check_loss(spec_of(MXU_MEAN_ABSOLUTE_ERROR), "mae");
  check_loss(spec_of(MXU_HUBER), "huber");
  mxu_loss_spec h = spec_of(MXU_HUBER);
  h.o.huber_delta = 0.3f;
  check_loss(h, "huber delta 0.3");
  check_loss(spec_of(MXU_KL_DIVERGENCE), "kl_divergence");
  /* MAPE divides by |t|: where t is 0 by 1e-7, a loss too large for
   * finite differences in float32, so targets away from 0 here. */
  static const float away[ROWS * K] = {0.5f,  1.0f, -0.3f, 1.0f,  1.0f, 0.2f,
                                       0.25f, 0.5f, 2.0f,  -1.0f, 0.1f, 1.0f};
  targets = away;
  check_loss(spec_of(MXU_MEAN_ABSOLUTE_PERCENTAGE_ERROR), "mape");
  targets = T;
  float big[ROWS], big_grad[ROWS * K];
  mxu_loss_spec mape = spec_of(MXU_MEAN_ABSOLUTE_PERCENTAGE_ERROR);
  mxu_target_loss(&mape, ROWS, Y, T, MASK, 1.0f, big, big_grad);
  CHECK_MSG(fabs(big[0] - keras_row(&mape, Y, T)) <= 1e-6 * big[0],
            "mape of targets 0: %g", big[0]);
  check_loss(spec_of(MXU_LOG_COSH), "log_cosh");
  /* MSLE clips negative outputs (no gradient there); Poisson takes the
   * positive outputs it is meant for. */
  check_loss(spec_of(MXU_MEAN_SQUARED_LOGARITHMIC_ERROR), "msle");
  float positive[ROWS * K];
  for (int i = 0; i < ROWS * K; i++) positive[i] = fabsf(Y[i]) + 0.05f;
  check_loss_at(spec_of(MXU_POISSON), "poisson", positive);
  check_loss_at(spec_of(MXU_MEAN_SQUARED_LOGARITHMIC_ERROR),
                "msle of positive outputs", positive);
  /* Probabilities for the binary cross-entropy: |Y| folded into (0, 1). */
  mxu_loss_spec b = spec_of(MXU_BINARY_CROSSENTROPY);
  check_loss(b, "binary_crossentropy");
  b.o.label_smoothing = 0.2f;
  check_loss(b, "binary_crossentropy, label_smoothing 0.2");
  b.o.from_logits = 1;
  check_loss(b, "binary_crossentropy from logits, label_smoothing 0.2");
  test_hinge_and_focal_losses(positive);
  /* A masked row costs nothing and passes no gradient. */
  float loss[ROWS], grad[ROWS * K], mask[ROWS] = {1, 0, 1};
  mxu_loss_spec m = spec_of(MXU_MEAN_SQUARED_ERROR);
  mxu_target_loss(&m, ROWS, Y, T, mask, 1.0f, loss, grad);
  CHECK(loss[1] == 0.0f && grad[K] == 0.0f && grad[2 * K - 1] == 0.0f);
  CHECK(loss[0] > 0.0f);
}

/* The logits form stays finite where the probability form would need
 * log(0): z = +-100. */
static void test_bce_logits_extremes(void) {
  mxu_loss_spec s = spec_of(MXU_BINARY_CROSSENTROPY);
  s.o.from_logits = 1;
  s.values = s.last = 2;
  float y[2] = {100.0f, -100.0f}, t[2] = {0.0f, 0.0f}, loss, grad[2], mask = 1;
  mxu_target_loss(&s, 1, y, t, &mask, 1.0f, &loss, grad);
  CHECK_MSG(fabs(loss - 50.0) < 1e-3, "loss %g", loss);
  CHECK(fabsf(grad[0] - 0.5f) < 1e-6f && fabsf(grad[1]) < 1e-6f);
}

static void test_smoothing(void) {
  float t[K] = {0, 0, 1, 0}, out[K];
  mxu_smooth_targets(1, K, 0.1f, t, out);
  CHECK(fabsf(out[0] - 0.025f) < 1e-7f && fabsf(out[2] - 0.925f) < 1e-7f);
}

static void test_metrics(void) {
  double of = 0;
  const int32_t labels[ROWS] = {3, 2, 0};
  const float mask[ROWS] = {1, 1, 0};
  /* argmax rows: 3, 2, 3; target argmax: 1 (the first of a tie, as
   * TF's), 0, 3. */
  CHECK(mxu_metric_sum(MXU_METRIC_SPARSE_ACCURACY, NULL, ROWS, K, Y, labels, T,
                       MASK, &of) == 2.0);
  CHECK(mxu_metric_sum(MXU_METRIC_SPARSE_ACCURACY, NULL, ROWS, K, Y, labels, T,
                       mask, &of) == 2.0);
  CHECK(mxu_metric_sum(MXU_METRIC_CATEGORICAL_ACCURACY, NULL, ROWS, K, Y,
                       labels, T, MASK, &of) == 1.0);
  /* binary: row 0 (y > 0.5) = 0 1 0 1 vs 0 1 0 1: 4 of 4; row 1: 0 0 1 0
   * vs 1 0 0.25 0.5: 1 of 4; row 2: 1 0 0 1 vs 0 0 0 1: 3 of 4. */
  double binary = mxu_metric_sum(MXU_METRIC_BINARY_ACCURACY, NULL, ROWS, K, Y,
                                 labels, T, MASK, &of);
  CHECK_MSG(fabs(binary - 2.0) < 1e-12, "binary accuracy sum %g", binary);
  double mae = 0, mse = 0;
  for (int i = 0; i < ROWS * K; i++) {
    mae += fabs(Y[i] - T[i]) / K;
    mse += (Y[i] - T[i]) * (Y[i] - T[i]) / K;
  }
  CHECK(fabs(mxu_metric_sum(MXU_METRIC_MAE, NULL, ROWS, K, Y, labels, T, MASK,
                            &of) -
             mae) < 1e-6);
  CHECK(fabs(mxu_metric_sum(MXU_METRIC_MSE, NULL, ROWS, K, Y, labels, T, MASK,
                            &of) -
             mse) < 1e-6);
  /* The hinges and the cosine similarity as the losses compute them,
   * the cosine positive; over vectors of 2 the mean of theirs. */
  mxu_metric_options two = {.vector = 2};
  for (int i = 0; i < 4; i++) {
    static const mxu_metric_kind kinds[] = {
        MXU_METRIC_HINGE, MXU_METRIC_SQUARED_HINGE,
        MXU_METRIC_CATEGORICAL_HINGE, MXU_METRIC_COSINE_SIMILARITY};
    static const mxu_loss losses[] = {MXU_HINGE, MXU_SQUARED_HINGE,
                                      MXU_CATEGORICAL_HINGE,
                                      MXU_COSINE_SIMILARITY};
    mxu_loss_spec s = spec_of(losses[i]);
    s.last = i >= 2 ? 2 : K;
    double want = 0;
    for (int r = 0; r < 2; r++) want += keras_row(&s, Y + r * K, T + r * K);
    if (kinds[i] == MXU_METRIC_COSINE_SIMILARITY) want = -want;
    double got =
        mxu_metric_sum(kinds[i], &two, ROWS, K, Y, labels, T, mask, &of);
    CHECK_MSG(fabs(got - want) < 1e-5 && of == 2, "%s: %g, want %g (of %g)",
              mxu_loss_name(losses[i]), got, want, of);
  }
  /* Top 5 of 7 classes; ties at the boundary count in, as in_top_k. */
  float scores[2 * 7] = {7, 6, 5, 4, 3, 2, 1, 1, 1, 1, 1, 1, 1, 1};
  int32_t top[2] = {5, 6};
  float onehot[2 * 7] = {0};
  onehot[4] = 1; /* row 0: class 4, rank 5 */
  onehot[7 + 6] = 1;
  float both[2] = {1, 1};
  CHECK(mxu_metric_sum(MXU_METRIC_SPARSE_TOP_K, NULL, 2, 7, scores, top, onehot,
                       both, &of) == 1.0);
  CHECK(mxu_metric_sum(MXU_METRIC_TOP_K, NULL, 2, 7, scores, top, onehot, both,
                       &of) == 2.0);
}

static void test_metric_names(void) {
  mxu_metric_kind k;
  CHECK_OK(mxu_metric_kind_of("accuracy", MXU_BINARY_CROSSENTROPY, 3, &k));
  CHECK(k == MXU_METRIC_BINARY_ACCURACY);
  CHECK_OK(mxu_metric_kind_of("acc", MXU_MEAN_SQUARED_ERROR, 1, &k));
  CHECK(k == MXU_METRIC_BINARY_ACCURACY);
  CHECK_OK(
      mxu_metric_kind_of("accuracy", MXU_CATEGORICAL_CROSSENTROPY, 10, &k));
  CHECK(k == MXU_METRIC_CATEGORICAL_ACCURACY);
  CHECK_OK(mxu_metric_kind_of("accuracy", MXU_SPARSE_CATEGORICAL_CROSSENTROPY,
                              10, &k));
  CHECK(k == MXU_METRIC_SPARSE_ACCURACY);
  CHECK_OK(mxu_metric_kind_of("mean_absolute_error", MXU_HUBER, 1, &k));
  CHECK(k == MXU_METRIC_MAE);
  EXPECT_FAIL(mxu_metric_kind_of("r2_score", MXU_HUBER, 1, &k),
              MXU_ERR_UNSUPPORTED, "metric 'r2_score' is not supported");
  CHECK_OK(mxu_metric_kind_of("cosine_similarity", MXU_HUBER, 4, &k));
  CHECK(k == MXU_METRIC_COSINE_SIMILARITY);
}

/* y = 2 x0 - 3 x1 + 0.5 from a Dense(1) with MSE: the fit finds it. */
static void test_regression_fit(void) {
  enum { N = 256 };
  float x[N * 2], y[N];
  mxu_rng rng = mxu_rng_make(5, 1, 0, 0, 0);
  mxu_rng_uniform(&rng, 0, x, N * 2);
  for (int i = 0; i < N; i++) {
    x[2 * i] = 2 * x[2 * i] - 1;
    x[2 * i + 1] = 2 * x[2 * i + 1] - 1;
    y[i] = 2 * x[2 * i] - 3 * x[2 * i + 1] + 0.5f;
  }
  int64_t dims[1] = {2};
  mxu_dataset *data = NULL;
  CHECK_OK(
      mxu_dataset_from_targets(x, y, N, mxu_shape_make(1, dims), 1, &data));
  CHECK(data && mxu_dataset_num_classes(data) == 0);
  mxu_model *model = mxu_sequential(NULL);
  CHECK_OK(mxu_add_input(model, NULL, mxu_shape_make(1, dims)));
  mxu_dense_config d = mxu_dense_defaults(1);
  CHECK_OK(mxu_add_dense(model, &d));
  mxu_compile_config c = mxu_compile_defaults();
  c.loss = MXU_MEAN_SQUARED_ERROR;
  c.metrics[0] = "mae";
  c.optimizer = mxu_adam(0.05f);
  c.batch_size = 32;
  c.threads = 1;
  CHECK_OK(mxu_compile(model, &c));
  double before = NAN, mae_before = NAN, after = NAN, mae = NAN;
  CHECK_OK(mxu_evaluate(model, data, 0, &before, &mae_before));
  mxu_fit_config f = mxu_fit_defaults();
  f.epochs = 40;
  f.verbose = 0;
  CHECK_OK(mxu_fit(model, data, &f, NULL));
  CHECK_OK(mxu_evaluate(model, data, 0, &after, &mae));
  CHECK_MSG(before > 1.0 && after < 1e-3 && mae < 0.03,
            "mse %g -> %g, mae %g -> %g", before, after, mae_before, mae);
  /* evaluate's loss is the mean of (predict - y)^2. */
  float out[N];
  CHECK_OK(mxu_predict(model, x, N, out));
  double mse = 0;
  for (int i = 0; i < N; i++) mse += (out[i] - y[i]) * (out[i] - y[i]) / N;
  CHECK_MSG(fabs(mse - after) <= 1e-5 * fmax(mse, 1e-6) + 1e-9,
            "predict's mse %g, evaluate's %g", mse, after);
  /* Sparse losses need class labels, which float targets are not. */
  c.loss = MXU_SPARSE_CATEGORICAL_CROSSENTROPY;
  mxu_model_free(model);
  mxu_dataset_free(data);
}

/* Class labels 0/1 with a one-value sigmoid output: the binary cross-
 * entropy reads them as numbers, "accuracy" is binary_accuracy. */
static void test_binary_fit(void) {
  enum { N = 200 };
  float x[N * 2];
  int32_t labels[N];
  mxu_rng rng = mxu_rng_make(6, 1, 0, 0, 0);
  mxu_rng_uniform(&rng, 0, x, N * 2);
  for (int i = 0; i < N; i++) labels[i] = x[2 * i] + x[2 * i + 1] > 1.0f;
  int64_t dims[1] = {2};
  mxu_dataset *data = NULL;
  CHECK_OK(
      mxu_dataset_from_arrays(x, labels, N, mxu_shape_make(1, dims), 2, &data));
  mxu_model *model = mxu_sequential(NULL);
  CHECK_OK(mxu_add_input(model, NULL, mxu_shape_make(1, dims)));
  mxu_dense_config d = mxu_dense_defaults(1);
  d.activation = MXU_SIGMOID;
  CHECK_OK(mxu_add_dense(model, &d));
  mxu_compile_config c = mxu_compile_defaults();
  c.loss = MXU_BINARY_CROSSENTROPY;
  c.optimizer = mxu_adam(0.1f);
  c.batch_size = 20;
  c.threads = 1;
  CHECK_OK(mxu_compile(model, &c));
  CHECK(model->heads[0].metric_kind[0] == MXU_METRIC_BINARY_ACCURACY);
  mxu_fit_config f = mxu_fit_defaults();
  f.epochs = 30;
  f.verbose = 0;
  CHECK_OK(mxu_fit(model, data, &f, NULL));
  double loss = NAN, accuracy = NAN;
  CHECK_OK(mxu_evaluate(model, data, 0, &loss, &accuracy));
  CHECK_MSG(accuracy >= 0.95 && loss < 0.3, "loss %g, accuracy %g", loss,
            accuracy);
  /* The same model on the sparse loss is refused at compile (one output). */
  c.loss = MXU_SPARSE_CATEGORICAL_CROSSENTROPY;
  EXPECT_FAIL(mxu_compile(model, &c), MXU_ERR_SHAPE, "at least 2 classes");
  mxu_model_free(model);
  mxu_dataset_free(data);
}

/* Float targets under a sparse loss, and targets of the wrong size, are
 * refused by name. */
static void test_target_mismatch(void) {
  float x[4] = {0, 1, 2, 3}, y[4] = {0.5f, 1.5f, 2.5f, 3.5f};
  int64_t one[1] = {1};
  mxu_dataset *data = NULL;
  CHECK_OK(mxu_dataset_from_targets(x, y, 2, mxu_shape_make(1, one), 2, &data));
  mxu_model *model = mxu_sequential(NULL);
  CHECK_OK(mxu_add_input(model, NULL, mxu_shape_make(1, one)));
  mxu_dense_config d = mxu_dense_defaults(3);
  CHECK_OK(mxu_add_dense(model, &d));
  mxu_compile_config c = mxu_compile_defaults();
  c.batch_size = 2;
  c.threads = 1;
  CHECK_OK(mxu_compile(model, &c));
  double loss, metric;
  EXPECT_FAIL(mxu_evaluate(model, data, 0, &loss, &metric), MXU_ERR_SHAPE,
              "not class labels");
  c.loss = MXU_MEAN_SQUARED_ERROR;
  c.metrics[0] = "mse";
  CHECK_OK(mxu_compile(model, &c));
  EXPECT_FAIL(mxu_evaluate(model, data, 0, &loss, &metric), MXU_ERR_SHAPE,
              "targets are 2 float values a sample, but the model outputs 3");
  c.label_smoothing = 0.1f;
  EXPECT_FAIL(mxu_compile(model, &c), MXU_ERR_ARG, "label_smoothing");
  mxu_model_free(model);
  mxu_dataset_free(data);
}

/* The sparse loss's ignore_class over labels given as numbers (an .npy
 * holding -1 loads as float targets): the ignored samples add no loss,
 * the loss is the others' mean, the accuracy counts every sample (an
 * ignored one never hits); a label neither a class nor the ignored one is
 * refused by name; a batch of ignored labels only has loss 0. */
static void test_ignore_class(void) {
  enum { N = 6, K = 3 };
  float x[N] = {-1.0f, -0.5f, 0.0f, 0.3f, 0.7f, 1.2f};
  float y[N] = {0, -1, 2, -1, 1, 2};
  int64_t one[1] = {1};
  mxu_dataset *data = NULL;
  CHECK_OK(mxu_dataset_from_targets(x, y, N, mxu_shape_make(1, one), 1, &data));
  mxu_model *model = mxu_sequential(NULL);
  CHECK_OK(mxu_add_input(model, NULL, mxu_shape_make(1, one)));
  mxu_dense_config d = mxu_dense_defaults(K);
  d.activation = MXU_SOFTMAX;
  CHECK_OK(mxu_add_dense(model, &d));
  mxu_compile_config c = mxu_compile_defaults();
  c.batch_size = N;
  c.threads = 1;
  c.has_ignore_class = 1;
  c.ignore_class = -1;
  CHECK_OK(mxu_compile(model, &c));
  float p[N * K];
  CHECK_OK(mxu_predict(model, x, N, p));
  double want = 0, hits = 0, kept = 0;
  for (int i = 0; i < N; i++) {
    int label = (int)y[i], best = 0;
    for (int j = 1; j < K; j++)
      best = p[i * K + j] > p[i * K + best] ? j : best;
    hits += best == label;
    if (label < 0) continue;
    want -= log(p[i * K + label]);
    kept++;
  }
  double loss = NAN, accuracy = NAN;
  CHECK_OK(mxu_evaluate(model, data, 0, &loss, &accuracy));
  CHECK_MSG(fabs(loss - want / kept) <= 1e-6 * want / kept &&
                accuracy == hits / N,
            "loss %.9g (the kept labels' mean %.9g), accuracy %g (%g)", loss,
            want / kept, accuracy, hits / N);
  for (int i = 0; i < N; i++) y[i] = -1;
  mxu_dataset_free(data);
  CHECK_OK(mxu_dataset_from_targets(x, y, N, mxu_shape_make(1, one), 1, &data));
  CHECK_OK(mxu_evaluate(model, data, 0, &loss, &accuracy));
  CHECK_MSG(loss == 0.0 && accuracy == 0.0, "all ignored: loss %g, accuracy %g",
            loss, accuracy);
  y[4] = 255;
  mxu_dataset_free(data);
  CHECK_OK(mxu_dataset_from_targets(x, y, N, mxu_shape_make(1, one), 1, &data));
  EXPECT_FAIL(mxu_evaluate(model, data, 0, &loss, &accuracy), MXU_ERR_ARG,
              "label at position 0 is 255, not a class index in 0..2 or the "
              "ignore_class");
  mxu_model_free(model);
  mxu_dataset_free(data);
}

int main(void) {
  test_target_losses();
  test_bce_logits_extremes();
  test_smoothing();
  test_metrics();
  test_metric_names();
  test_regression_fit();
  test_binary_fit();
  test_target_mismatch();
  test_ignore_class();
  return check_report("test_losses");
}
