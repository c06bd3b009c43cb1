/* test_regularizers.c — Keras' weight regularizers and constraints: the
 * penalty in the loss fit and evaluate log (against the weights' sums by
 * hand), its gradient in an SGD step (against the unregularized step),
 * each constraint against its formula, and the JSON form in both
 * dialects. */
#include "check.h"
#include "model/model.h"

enum { N = 12, IN = 5, OUT = 3 };

static mxu_dataset *data(void) {
  float x[N * IN];
  int32_t y[N];
  for (int i = 0; i < N * IN; i++) x[i] = (float)((i * 7) % 11) / 5.0f - 1.0f;
  for (int i = 0; i < N; i++) y[i] = i % OUT;
  int64_t dims[1] = {IN};
  mxu_dataset *d = NULL;
  CHECK_OK(mxu_dataset_from_arrays(x, y, N, mxu_shape_make(1, dims), OUT, &d));
  return d;
}

static mxu_model *dense_model(const mxu_weight_options *kernel,
                              const mxu_weight_options *bias, float lr) {
  mxu_model *m = mxu_sequential("r");
  int64_t dims[1] = {IN};
  CHECK_OK(mxu_add_input(m, NULL, mxu_shape_make(1, dims)));
  mxu_dense_config d = mxu_dense_defaults(OUT);
  d.activation = MXU_SOFTMAX;
  if (kernel) d.kernel = *kernel;
  if (bias) d.bias = *bias;
  CHECK_OK(mxu_add_dense(m, &d));
  mxu_compile_config c = mxu_compile_defaults();
  c.optimizer = mxu_sgd(lr, 0, 0);
  c.batch_size = N;
  c.threads = 1;
  c.seed = 3;
  CHECK_OK(mxu_compile(m, &c));
  return m;
}

static mxu_fit_config one_epoch(void) {
  mxu_fit_config f = mxu_fit_defaults();
  f.epochs = 1;
  f.batch_size = N;
  f.verbose = 0;
  f.shuffle = 0;
  return f;
}

/* The penalty joins evaluate's and fit's loss; its gradient the step's. */
static void penalties(void) {
  mxu_weight_options kernel = {0}, bias = {0};
  kernel.regularizer = (mxu_regularizer){0.01f, 0.02f};
  bias.regularizer = (mxu_regularizer){0, 0.1f};
  /* A nonzero bias to penalize: Keras' constant initializer. */
  CHECK_OK(mxu_initializer_from_name("constant", &bias.initializer));
  bias.initializer.value = 0.3f;
  mxu_weight_options plain_bias = {.initializer = bias.initializer};
  const float lr = 0.5f;
  mxu_model *a = dense_model(&kernel, &bias, lr);
  mxu_model *b = dense_model(NULL, &plain_bias, lr);
  mxu_dataset *d = data();
  CHECK(a->penalized && !b->penalized);
  CHECK(memcmp(a->weights, b->weights,
               (size_t)a->trainable_count * sizeof(float)) == 0);
  const mxu_param *k = &a->params[0], *bb = &a->params[1];
  double l1 = 0, l2 = 0, bl2 = 0;
  for (int64_t i = 0; i < k->count; i++) {
    float w = a->weights[k->offset + i];
    l1 += fabsf(w);
    l2 += (double)w * w;
  }
  for (int64_t i = 0; i < bb->count; i++)
    bl2 += (double)a->weights[bb->offset + i] * a->weights[bb->offset + i];
  double penalty = 0.01 * l1 + 0.02 * l2 + 0.1 * bl2;
  double la, lb, acc;
  CHECK_OK(mxu_evaluate(a, d, 0, &la, &acc));
  CHECK_OK(mxu_evaluate(b, d, 0, &lb, &acc));
  CHECK_MSG(fabs((la - lb) - penalty) < 1e-6, "penalty %g, by hand %g", la - lb,
            penalty);
  /* One step of the whole batch: fit logs the loss before it. */
  float before[IN * OUT + 16];
  memcpy(before, a->weights, sizeof before);
  mxu_fit_config f = one_epoch();
  const mxu_history *h = NULL;
  CHECK_OK(mxu_fit(a, d, &f, &h));
  CHECK(h && h->count == 1 && fabs(h->epochs[0].loss - la) < 1e-6);
  CHECK_OK(mxu_fit(b, d, &f, NULL));
  /* SGD: the difference is -lr times the penalty's gradient. */
  double worst = 0;
  for (int64_t i = 0; i < k->count; i++) {
    float w = before[k->offset + i];
    double g = 2 * 0.02 * w + 0.01 * ((w > 0) - (w < 0));
    worst = fmax(
        worst,
        fabs((a->weights[k->offset + i] - b->weights[k->offset + i]) + lr * g));
  }
  for (int64_t i = 0; i < bb->count; i++) {
    double g = 2 * 0.1 * before[bb->offset + i];
    worst = fmax(
        worst, fabs((a->weights[bb->offset + i] - b->weights[bb->offset + i]) +
                    lr * g));
  }
  CHECK_MSG(worst < 1e-6, "update differs from the penalty's by %g", worst);
  mxu_model_free(a);
  mxu_model_free(b);
  mxu_dataset_free(d);
}

/* The norm of column j (axis 0) of an (IN, OUT) kernel. */
static double column_norm(const float *w, int j) {
  double s = 0;
  for (int i = 0; i < IN; i++) s += (double)w[i * OUT + j] * w[i * OUT + j];
  return sqrt(s);
}

static void constraints(void) {
  static const struct {
    mxu_constraint_kind kind;
    float min_value, max_value;
  } cases[] = {{MXU_MAX_NORM, 0, 0.2f},
               {MXU_UNIT_NORM, 0, 0},
               {MXU_MIN_MAX_NORM, 0.5f, 0.6f},
               {MXU_NON_NEG, 0, 0}};
  mxu_dataset *d = data();
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    mxu_weight_options kernel = {0};
    kernel.constraint = (mxu_constraint){.kind = cases[c].kind,
                                         .min_value = cases[c].min_value,
                                         .max_value = cases[c].max_value,
                                         .rate = 1,
                                         .axes = {0},
                                         .axis_count = 1};
    mxu_model *m = dense_model(&kernel, NULL, 0.5f);
    mxu_fit_config f = one_epoch();
    CHECK_OK(mxu_fit(m, d, &f, NULL));
    const float *w = m->weights + m->params[0].offset;
    for (int j = 0; j < OUT; j++) {
      double norm = column_norm(w, j);
      int ok = cases[c].kind == MXU_MAX_NORM    ? norm <= 0.2 * (1 + 1e-6)
               : cases[c].kind == MXU_UNIT_NORM ? fabs(norm - 1) < 1e-6
               : cases[c].kind == MXU_MIN_MAX_NORM
                   ? norm >= 0.5 * (1 - 1e-6) && norm <= 0.6 * (1 + 1e-6)
                   : 1;
      CHECK_MSG(ok, "constraint %zu: column %d norm %g", c, j, norm);
    }
    for (int i = 0; cases[c].kind == MXU_NON_NEG && i < IN * OUT; i++)
      CHECK(w[i] >= 0);
    mxu_model_free(m);
  }
  mxu_dataset_free(d);
  /* The formula on known values: a column (3, 4) of norm 5 under
   * max_norm(2) is w * 2 / (1e-7 + 5); axis -1 reduces the rows. */
  mxu_weight_options rows = {0};
  rows.constraint = (mxu_constraint){
      .kind = MXU_MAX_NORM, .max_value = 2, .axes = {-1}, .axis_count = 1};
  mxu_model *m = dense_model(&rows, NULL, 0.5f);
  float *w = m->weights + m->params[0].offset;
  for (int i = 0; i < IN * OUT; i++) w[i] = 0;
  w[0] = 3, w[1] = 4; /* row 0: norm 5, scaled */
  w[OUT] = 0.5f;      /* row 1: norm 0.5, kept (times 0.5 / (0.5 + eps)) */
  mxu_apply_constraints(m);
  CHECK(w[0] == 3.0f * (2.0f / (1e-7f + 5.0f)) &&
        w[1] == 4.0f * (2.0f / (1e-7f + 5.0f)));
  CHECK(w[OUT] == 0.5f * (0.5f / (1e-7f + 0.5f)));
  mxu_model_free(m);
}

/* Keras' JSON: read, written in both dialects, read back the same; an
 * axis outside the weight is refused at compile. */
static void json_forms(void) {
  static const char *text =
      "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"s\", "
      "\"layers\": [{\"class_name\": \"InputLayer\", \"config\": "
      "{\"batch_input_shape\": [null, 6, 6, 2], \"name\": \"in\"}}, "
      "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c\", "
      "\"filters\": 3, \"kernel_size\": 3, \"kernel_regularizer\": "
      "{\"class_name\": \"L2\", \"config\": {\"l2\": 0.0005}}, "
      "\"bias_regularizer\": \"l1\", \"kernel_constraint\": {\"class_name\": "
      "\"MaxNorm\", \"config\": {\"max_value\": 3, \"axis\": [0, 1, 2]}}}}, "
      "{\"class_name\": \"BatchNormalization\", \"config\": {\"name\": \"bn\", "
      "\"gamma_regularizer\": {\"class_name\": \"L1L2\", \"config\": "
      "{\"l1\": 0.001, \"l2\": 0.002}}, \"beta_constraint\": \"non_neg\"}}, "
      "{\"class_name\": \"Flatten\", \"config\": {\"name\": \"f\"}}, "
      "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 2, "
      "\"kernel_constraint\": {\"class_name\": \"MinMaxNorm\", \"config\": "
      "{\"min_value\": 0.1, \"max_value\": 2, \"rate\": 0.5, \"axis\": 0}}, "
      "\"bias_constraint\": \"unit_norm\"}}]}}";
  mxu_model *m = NULL;
  CHECK_OK(mxu_model_from_json(text, "reg.json", &m, NULL, NULL));
  if (!m) return;
  const mxu_conv2d_config *conv = &m->layers[1].config.conv;
  CHECK(conv->kernel.regularizer.l2 == 0.0005f &&
        conv->bias.regularizer.l1 == 0.01f &&
        conv->kernel.constraint.kind == MXU_MAX_NORM &&
        conv->kernel.constraint.axis_count == 3);
  const mxu_dense_config *dense = &m->layers[m->layer_count - 1].config.dense;
  CHECK(dense->kernel.constraint.kind == MXU_MIN_MAX_NORM &&
        dense->kernel.constraint.rate == 0.5f &&
        dense->bias.constraint.kind == MXU_UNIT_NORM);
  for (int keras3 = 0; keras3 < 2; keras3++) {
    char *out = NULL;
    CHECK_OK(mxu_model_to_json(m, keras3, &out));
    mxu_model *again = NULL;
    CHECK_OK(mxu_model_from_json(out, "again.json", &again, NULL, NULL));
    char *twice = NULL;
    if (again) CHECK_OK(mxu_model_to_json(again, keras3, &twice));
    CHECK(out && twice && strcmp(out, twice) == 0 &&
          strstr(out, "\"MaxNorm\"") && strstr(out, "\"L1L2\"") &&
          strstr(out, "\"NonNeg\"") && strstr(out, "\"MinMaxNorm\""));
    free(out);
    free(twice);
    mxu_model_free(again);
  }
  mxu_model_free(m);
  /* axis 4 of a 4-D conv kernel. */
  const char *bad = strstr(text, "[0, 1, 2]");
  char *wrong = strdup(text);
  if (bad && wrong) memcpy(wrong + (bad - text), "[0, 1, 4]", 9);
  CHECK_OK(mxu_model_from_json(wrong, "bad.json", &m, NULL, NULL));
  mxu_compile_config c = mxu_compile_defaults();
  c.batch_size = 1;
  if (m)
    EXPECT_FAIL(mxu_compile(m, &c), MXU_ERR_SHAPE,
                "layer 'c': the constraint of kernel has axis 4");
  mxu_model_free(m);
  free(wrong);
}

int main(void) {
  penalties();
  constraints();
  json_forms();
  return check_report("test_regularizers");
}
