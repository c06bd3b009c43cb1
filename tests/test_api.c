/* test_api.c — the public API end to end on small synthetic data: errors
 * on bad input, Keras naming and summary, initialisers, optimizer steps
 * against an independent double-precision computation, fit / evaluate /
 * predict semantics, Dropout and BatchNormalization. Only mxu.h is used. */
#include "check.h"
#include "mxu.h"

#include <stdint.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------
 */

/* The test's own generator (xorshift64*), independent of the library's. */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static double next_unit(void) {
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return (double)((rng_state * 0x2545F4914F6CDD1Dull) >> 11) * 0x1.0p-53;
}

static float next_float(float lo, float hi) {
  return lo + (hi - lo) * (float)next_unit();
}

static mxu_shape shape1(int64_t a) { return mxu_shape_make(1, &a); }

static mxu_shape shape3(int64_t a, int64_t b, int64_t c) {
  int64_t dims[3] = {a, b, c};
  return mxu_shape_make(3, dims);
}

/* count samples of the given shape, values in [lo, hi), labels cycling
 * through the classes in a shuffled-looking order. */
static mxu_dataset *make_data(int64_t count, mxu_shape shape, int classes,
                              float lo, float hi) {
  int64_t sample = mxu_shape_count(&shape);
  float *x = malloc((size_t)(count * sample) * sizeof *x);
  int32_t *y = malloc((size_t)count * sizeof *y);
  for (int64_t i = 0; i < count * sample; i++) x[i] = next_float(lo, hi);
  for (int64_t i = 0; i < count; i++) y[i] = (int32_t)((i * 7 + 3) % classes);
  mxu_dataset *data = NULL;
  CHECK_OK(mxu_dataset_from_arrays(x, y, count, shape, classes, &data));
  free(x);
  free(y);
  return data;
}

static char *read_all(FILE *f) {
  fflush(f);
  long n = ftell(f);
  if (n < 0) n = 0;
  rewind(f);
  char *text = malloc((size_t)n + 1);
  size_t got = fread(text, 1, (size_t)n, f);
  text[got] = 0;
  return text;
}

static mxu_compile_config compile_config(int batch, mxu_backend_kind backend,
                                         uint64_t seed) {
  mxu_compile_config c = mxu_compile_defaults();
  c.batch_size = batch;
  c.backend = backend;
  c.seed = seed;
  c.metrics[0] =
      "sparse_categorical_accuracy"; /* the name the progress shows */
  return c;
}

static mxu_fit_config quiet_fit(int epochs, int batch) {
  mxu_fit_config f = mxu_fit_defaults();
  f.epochs = epochs;
  f.batch_size = batch;
  f.verbose = 0;
  return f;
}

/* Input(in) -> Dense(units, softmax). */
static mxu_model *dense_softmax(int64_t in, int units) {
  mxu_model *model = mxu_sequential(NULL);
  mxu_dense_config d = mxu_dense_defaults(units);
  d.activation = MXU_SOFTMAX;
  CHECK_OK(mxu_add_input(model, NULL, shape1(in)));
  CHECK_OK(mxu_add_dense(model, &d));
  return model;
}

/* Input(in) -> Dense(hidden, relu) [-> Dropout(rate)] -> Dense(units,
 * softmax). */
static mxu_model *mlp(int64_t in, int hidden, int units, float rate) {
  mxu_model *model = mxu_sequential(NULL);
  mxu_dense_config h = mxu_dense_defaults(hidden),
                   d = mxu_dense_defaults(units);
  h.activation = MXU_RELU;
  d.activation = MXU_SOFTMAX;
  CHECK_OK(mxu_add_input(model, NULL, shape1(in)));
  CHECK_OK(mxu_add_dense(model, &h));
  if (rate > 0) CHECK_OK(mxu_add_dropout(model, NULL, rate));
  CHECK_OK(mxu_add_dense(model, &d));
  return model;
}

/* The Fashion recipe: Conv2D(64, 3x3) -> MaxPooling2D(2) -> relu ->
 * Flatten -> Dense(10) -> softmax on (28, 28, 1). */
static mxu_model *fashion(void) {
  mxu_model *model = mxu_sequential("sequential");
  mxu_conv2d_config conv = mxu_conv2d_defaults(64, 3, 3);
  mxu_pool2d_config pool = mxu_pool2d_defaults(2, 2);
  mxu_dense_config dense = mxu_dense_defaults(10);
  CHECK_OK(mxu_add_input(model, NULL, shape3(28, 28, 1)));
  CHECK_OK(mxu_add_conv2d(model, &conv));
  CHECK_OK(mxu_add_max_pooling2d(model, &pool));
  CHECK_OK(mxu_add_activation(model, NULL, MXU_RELU));
  CHECK_OK(mxu_add_flatten(model, NULL));
  CHECK_OK(mxu_add_dense(model, &dense));
  CHECK_OK(mxu_add_activation(model, NULL, MXU_SOFTMAX));
  return model;
}

static float *weight_data(const mxu_model *model, int layer, int index,
                          int64_t *count, const char **name) {
  mxu_tensor t;
  mxu_status s = mxu_layer_weight(model, layer, index, &t, name);
  CHECK_MSG(s == MXU_OK, "layer %d weight %d: %s", layer, index, mxu_errmsg());
  if (s != MXU_OK) {
    *count = 0;
    return NULL;
  }
  CHECK(t.dtype == MXU_FLOAT32);
  *count = mxu_shape_count(&t.shape);
  return t.data;
}

/* Every weight of a model, concatenated. */
static float *all_weights(const mxu_model *model, int64_t *total) {
  int64_t n = 0;
  for (int l = 0; l < mxu_model_layer_count(model); l++)
    for (int k = 0; k < mxu_layer_weight_count(model, l); k++) {
      int64_t c;
      weight_data(model, l, k, &c, NULL);
      n += c;
    }
  float *out = malloc((size_t)(n ? n : 1) * sizeof *out), *p = out;
  for (int l = 0; l < mxu_model_layer_count(model); l++)
    for (int k = 0; k < mxu_layer_weight_count(model, l); k++) {
      int64_t c;
      float *w = weight_data(model, l, k, &c, NULL);
      if (w) memcpy(p, w, (size_t)c * sizeof *p);
      p += c;
    }
  *total = n;
  return out;
}

static void copy_weights(const mxu_model *from, int from_layer, mxu_model *to,
                         int to_layer) {
  int n = mxu_layer_weight_count(from, from_layer);
  CHECK(n == mxu_layer_weight_count(to, to_layer));
  for (int k = 0; k < n; k++) {
    int64_t a, b;
    float *src = weight_data(from, from_layer, k, &a, NULL);
    float *dst = weight_data(to, to_layer, k, &b, NULL);
    CHECK(a == b);
    if (src && dst && a == b) memcpy(dst, src, (size_t)a * sizeof *dst);
  }
}

/* ---- errors -------------------------------------------------------------
 */

static void errors_compile(void) {
  mxu_model *model = dense_softmax(4, 3);
  mxu_compile_config c = compile_config(0, MXU_BACKEND_CPU, 1);
  EXPECT_FAIL(mxu_compile(model, &c), MXU_ERR_ARG, "batch");
  c.batch_size = -5;
  EXPECT_FAIL(mxu_compile(model, &c), MXU_ERR_ARG, "batch");
  EXPECT_FAIL(mxu_compile(model, NULL), MXU_ERR_ARG, NULL);
  /* The model survives a refused compile. */
  c.batch_size = 4;
  CHECK_OK(mxu_compile(model, &c));

  /* Nothing may be added after compile. */
  mxu_dense_config d = mxu_dense_defaults(2);
  EXPECT_FAIL(mxu_add_dense(model, &d), MXU_ERR_ARG, "compile");
  EXPECT_FAIL(mxu_add_activation(model, NULL, MXU_RELU), MXU_ERR_ARG,
              "compile");
  CHECK(mxu_model_layer_count(model) == 1);
  mxu_model_free(model);

  /* The last layer must give one score per class along its last axis:
   * each position's row is scored (each pixel's 2 classes here), which
   * the sparse loss then needs a label for. */
  model = mxu_sequential(NULL);
  mxu_conv2d_config conv = mxu_conv2d_defaults(2, 3, 3);
  CHECK_OK(mxu_add_input(model, NULL, shape3(4, 4, 1)));
  CHECK_OK(mxu_add_conv2d(model, &conv));
  c = compile_config(2, MXU_BACKEND_CPU, 1);
  CHECK_OK(mxu_compile(model, &c));
  float pixels[2 * 16] = {0};
  int32_t labels[2] = {0, 1};
  mxu_dataset *per_sample = NULL;
  CHECK_OK(mxu_dataset_from_arrays(pixels, labels, 2, shape3(4, 4, 1), 2,
                                   &per_sample));
  double loss, metric;
  EXPECT_FAIL(mxu_evaluate(model, per_sample, 0, &loss, &metric), MXU_ERR_SHAPE,
              "over the output's 4 positions needs a class index for each");
  mxu_dataset_free(per_sample);
  mxu_model_free(model);
  model = mxu_sequential(NULL);
  d = mxu_dense_defaults(1);
  CHECK_OK(mxu_add_input(model, NULL, shape1(4)));
  CHECK_OK(mxu_add_dense(model, &d));
  EXPECT_FAIL(mxu_compile(model, &c), MXU_ERR_SHAPE, "dense");
  mxu_model_free(model);

  /* A model without layers. */
  model = mxu_sequential(NULL);
  EXPECT_FAIL(mxu_compile(model, &c), MXU_ERR_ARG, NULL);
  CHECK_OK(mxu_add_input(model, NULL, shape1(4)));
  EXPECT_FAIL(mxu_compile(model, &c), MXU_ERR_ARG, NULL);
  mxu_model_free(model);
}

static void errors_layers(void) {
  /* A (2, 2, 1) input cannot take a 3x3 valid convolution. */
  mxu_model *model = mxu_sequential(NULL);
  CHECK_OK(mxu_add_input(model, NULL, shape3(2, 2, 1)));
  mxu_conv2d_config conv = mxu_conv2d_defaults(4, 3, 3);
  EXPECT_FAIL(mxu_add_conv2d(model, &conv), MXU_ERR_SHAPE, "conv2d");
  CHECK(mxu_model_layer_count(model) == 0);
  conv.name = "edge_detector";
  EXPECT_FAIL(mxu_add_conv2d(model, &conv), MXU_ERR_SHAPE, "edge_detector");
  /* With 'same' padding it fits. */
  conv.padding = MXU_SAME;
  CHECK_OK(mxu_add_conv2d(model, &conv));
  mxu_shape s = mxu_model_layer_shape(model, 0);
  CHECK(s.rank == 3 && s.dims[0] == 2 && s.dims[1] == 2 && s.dims[2] == 4);

  /* Dense on a rank-3 output acts on its last axis, as Keras' does. */
  mxu_dense_config d = mxu_dense_defaults(3);
  CHECK_OK(mxu_add_dense(model, &d));
  s = mxu_model_layer_shape(model, 1);
  CHECK(s.rank == 3 && s.dims[0] == 2 && s.dims[1] == 2 && s.dims[2] == 3);
  /* The conv's 3x3x1x4 + 4, the Dense's 4x3 + 3 (not 16x3 + 3). */
  CHECK(mxu_model_param_count(model, 1) == 40 + 15);

  /* Duplicate names. */
  CHECK_OK(mxu_add_flatten(model, "flat"));
  EXPECT_FAIL(mxu_add_flatten(model, "flat"), MXU_ERR_ARG, "flat");
  EXPECT_FAIL(mxu_add_activation(model, "edge_detector", MXU_RELU), MXU_ERR_ARG,
              "edge_detector");
  CHECK(mxu_model_layer_count(model) == 3);

  /* Dropout rate must be in [0, 1). */
  EXPECT_FAIL(mxu_add_dropout(model, NULL, 1.0f), MXU_ERR_ARG, "rate");
  EXPECT_FAIL(mxu_add_dropout(model, NULL, -0.1f), MXU_ERR_ARG, "rate");
  EXPECT_FAIL(mxu_add_dropout(model, NULL, NAN), MXU_ERR_ARG, "rate");
  CHECK(mxu_model_layer_count(model) == 3);
  CHECK_OK(mxu_add_dropout(model, NULL, 0.0f));
  mxu_model_free(model);

  /* The input comes first, and only once. */
  model = mxu_sequential(NULL);
  EXPECT_FAIL(mxu_add_dense(model, &d), MXU_ERR_ARG, "input");
  CHECK_OK(mxu_add_input(model, NULL, shape1(3)));
  EXPECT_FAIL(mxu_add_input(model, NULL, shape1(3)), MXU_ERR_ARG, NULL);
  int64_t zero = 0;
  mxu_model *other = mxu_sequential(NULL);
  EXPECT_FAIL(mxu_add_input(other, NULL, mxu_shape_make(1, &zero)),
              MXU_ERR_SHAPE, NULL);
  mxu_model_free(other);
  mxu_model_free(model);
}

static void errors_fit(void) {
  mxu_dataset *data = make_data(8, shape3(4, 4, 1), 3, 0, 1);
  mxu_model *model = mxu_sequential(NULL);
  mxu_dense_config d = mxu_dense_defaults(3);
  d.activation = MXU_SOFTMAX;
  CHECK_OK(mxu_add_input(model, NULL, shape3(4, 4, 1)));
  CHECK_OK(mxu_add_flatten(model, NULL));
  CHECK_OK(mxu_add_dense(model, &d));
  mxu_fit_config f = quiet_fit(1, 4);
  double loss, accuracy;
  float out[3];

  /* Before compile. */
  EXPECT_FAIL(mxu_fit(model, data, &f, NULL), MXU_ERR_ARG, "compile");
  EXPECT_FAIL(mxu_evaluate(model, data, 4, &loss, &accuracy), MXU_ERR_ARG,
              "compile");
  EXPECT_FAIL(mxu_predict(model, mxu_dataset_x(data), 1, out), MXU_ERR_ARG,
              "compile");

  mxu_compile_config c = compile_config(4, MXU_BACKEND_CPU, 1);
  CHECK_OK(mxu_compile(model, &c));

  /* Samples of another shape. */
  const mxu_shape wrong[] = {shape3(4, 4, 2), shape1(16), shape3(2, 8, 1)};
  for (size_t i = 0; i < sizeof wrong / sizeof *wrong; i++) {
    mxu_dataset *bad = make_data(8, wrong[i], 3, 0, 1);
    EXPECT_FAIL(mxu_fit(model, bad, &f, NULL), MXU_ERR_SHAPE, NULL);
    EXPECT_FAIL(mxu_evaluate(model, bad, 4, &loss, &accuracy), MXU_ERR_SHAPE,
                NULL);
    mxu_fit_config v = f;
    v.validation = bad;
    EXPECT_FAIL(mxu_fit(model, data, &v, NULL), MXU_ERR_SHAPE, NULL);
    mxu_dataset_free(bad);
  }
  mxu_dataset *other = make_data(8, shape3(2, 8, 1), 3, 0, 1);
  EXPECT_FAIL(mxu_fit(model, other, &f, NULL), MXU_ERR_SHAPE,
              "the samples are (2, 8, 1) but the model's input 'input_1' "
              "takes (4, 4, 1)");
  mxu_dataset_free(other);
  /* Axes of 1 aside, the same shape: (4, 4) samples, (1, 4, 4) too. */
  const mxu_shape same[] = {{2, {4, 4}}, shape3(1, 4, 4)};
  for (size_t i = 0; i < sizeof same / sizeof *same; i++) {
    mxu_dataset *ok = make_data(8, same[i], 3, 0, 1);
    CHECK_OK(mxu_fit(model, ok, &f, NULL));
    CHECK_OK(mxu_evaluate(model, ok, 4, &loss, &accuracy));
    mxu_dataset_free(ok);
  }
  /* More classes than the model scores. */
  mxu_dataset *many = make_data(8, shape3(4, 4, 1), 5, 0, 1);
  EXPECT_FAIL(mxu_fit(model, many, &f, NULL), MXU_ERR_SHAPE, "classes");
  mxu_dataset_free(many);

  /* Batches the data cannot fill. */
  f.batch_size = 16;
  EXPECT_FAIL(mxu_fit(model, data, &f, NULL), MXU_ERR_ARG, "16");
  f.batch_size = 4;
  f.steps_per_epoch = 3;
  EXPECT_FAIL(mxu_fit(model, data, &f, NULL), MXU_ERR_ARG, "3 steps");
  f.steps_per_epoch = 0;
  f.epochs = 0;
  EXPECT_FAIL(mxu_fit(model, data, &f, NULL), MXU_ERR_ARG, "epochs");
  f.epochs = 1;
  f.batch_size = -1;
  EXPECT_FAIL(mxu_fit(model, data, &f, NULL), MXU_ERR_ARG, NULL);
  f.batch_size = 4;
  EXPECT_FAIL(mxu_fit(model, data, NULL, NULL), MXU_ERR_ARG, NULL);
  EXPECT_FAIL(mxu_fit(model, NULL, &f, NULL), MXU_ERR_ARG, NULL);
  EXPECT_FAIL(mxu_evaluate(model, data, -2, &loss, &accuracy), MXU_ERR_ARG,
              NULL);
  EXPECT_FAIL(mxu_predict(model, NULL, 1, out), MXU_ERR_ARG, NULL);

  /* After all that, the model still trains. */
  CHECK_OK(mxu_fit(model, data, &f, NULL));
  mxu_model_free(model);
  mxu_dataset_free(data);
}

static void errors_nan(void) {
  mxu_dataset *data = make_data(8, shape1(3), 2, 0.5f, 1);
  mxu_model *model = dense_softmax(3, 2);
  mxu_compile_config c = compile_config(4, MXU_BACKEND_CPU_REF, 1);
  CHECK_OK(mxu_compile(model, &c));
  int64_t n;
  float *kernel = weight_data(model, 0, 0, &n, NULL);
  if (kernel)
    for (int64_t i = 0; i < n; i++) kernel[i] = NAN;
  mxu_fit_config f = quiet_fit(2, 4);
  EXPECT_FAIL(mxu_fit(model, data, &f, NULL), MXU_ERR_NUMERIC, "epoch 1");
  CHECK_MSG(has(mxu_errmsg(), "step 1"), "'%s'", mxu_errmsg());
  CHECK_MSG(has(mxu_errmsg(), "NaN"), "'%s'", mxu_errmsg());
  mxu_model_free(model);

  /* Same on oneDNN. */
  model = dense_softmax(3, 2);
  c.backend = MXU_BACKEND_CPU;
  CHECK_OK(mxu_compile(model, &c));
  float *bias = weight_data(model, 0, 1, &n, NULL);
  if (bias) bias[1] = NAN;
  EXPECT_FAIL(mxu_fit(model, data, &f, NULL), MXU_ERR_NUMERIC, "step 1");
  mxu_model_free(model);
  mxu_dataset_free(data);
}

/* ---- naming -------------------------------------------------------------
 */

static void naming(void) {
  mxu_model *model = mxu_sequential(NULL);
  mxu_conv2d_config conv = mxu_conv2d_defaults(2, 3, 3);
  conv.padding = MXU_SAME;
  mxu_pool2d_config pool = mxu_pool2d_defaults(2, 2);
  mxu_batchnorm_config bn = mxu_batchnorm_defaults();
  mxu_dense_config dense = mxu_dense_defaults(4);
  CHECK_OK(mxu_add_input(model, NULL, shape3(8, 8, 1)));
  CHECK_OK(mxu_add_conv2d(model, &conv));
  CHECK_OK(mxu_add_conv2d(model, &conv));
  CHECK_OK(mxu_add_max_pooling2d(model, &pool));
  CHECK_OK(mxu_add_activation(model, NULL, MXU_RELU));
  CHECK_OK(mxu_add_activation(model, NULL, MXU_TANH));
  CHECK_OK(mxu_add_batch_normalization(model, &bn));
  CHECK_OK(mxu_add_average_pooling2d(model, &pool));
  CHECK_OK(mxu_add_conv2d(model, &conv));
  CHECK_OK(mxu_add_flatten(model, NULL));
  CHECK_OK(mxu_add_dense(model, &dense));
  CHECK_OK(mxu_add_dense(model, &dense));
  CHECK_OK(mxu_add_dropout(model, NULL, 0.5f));
  CHECK_OK(mxu_add_activation(model, NULL, MXU_SOFTMAX));
  static const char *const want[] = {"conv2d",
                                     "conv2d_1",
                                     "max_pooling2d",
                                     "activation",
                                     "activation_1",
                                     "batch_normalization",
                                     "average_pooling2d",
                                     "conv2d_2",
                                     "flatten",
                                     "dense",
                                     "dense_1",
                                     "dropout",
                                     "activation_2"};
  int n = (int)(sizeof want / sizeof *want);
  CHECK(mxu_model_layer_count(model) == n);
  for (int i = 0; i < n && i < mxu_model_layer_count(model); i++) {
    const char *got = mxu_model_layer_name(model, i);
    CHECK_MSG(got && strcmp(got, want[i]) == 0, "layer %d: '%s', want '%s'", i,
              got ? got : "(null)", want[i]);
  }
  CHECK(mxu_model_layer_name(model, n) == NULL);
  CHECK(mxu_model_layer_name(model, -1) == NULL);
  mxu_model_free(model);

  /* Automatic names never repeat a name the user gave: Keras refuses a
   * Sequential model whose layer names are not unique, and the weights
   * files key everything by name. */
  model = mxu_sequential(NULL);
  CHECK_OK(mxu_add_input(model, NULL, shape1(4)));
  dense.name = "dense_1";
  CHECK_OK(mxu_add_dense(model, &dense));
  dense.name = NULL;
  CHECK_OK(mxu_add_dense(model, &dense));
  const char *a = mxu_model_layer_name(model, 0);
  const char *b = mxu_model_layer_name(model, 1);
  CHECK_MSG(a && b && strcmp(a, b) != 0,
            "two layers are both named '%s' and '%s'", a ? a : "(null)",
            b ? b : "(null)");
  mxu_model_free(model);
}

/* ---- summary ------------------------------------------------------------
 */

/* The line that starts (after the leading space) with "name (". */
static const char *summary_row(char **lines, int count, const char *name) {
  size_t len = strlen(name);
  for (int i = 0; i < count; i++) {
    const char *p = lines[i];
    while (*p == ' ') p++;
    if (strncmp(p, name, len) == 0 && strncmp(p + len, " (", 2) == 0)
      return lines[i];
  }
  return NULL;
}

static const char *last_token(const char *line, char *out, size_t size) {
  size_t end = strlen(line);
  while (end && line[end - 1] == ' ') end--;
  size_t start = end;
  while (start && line[start - 1] != ' ') start--;
  size_t n = end - start < size - 1 ? end - start : size - 1;
  memcpy(out, line + start, n);
  out[n] = 0;
  return out;
}

static int split_lines(char *text, char **lines, int max) {
  int n = 0;
  for (char *p = text; *p && n < max;) {
    lines[n++] = p;
    char *nl = strchr(p, '\n');
    if (!nl) break;
    *nl = 0;
    p = nl + 1;
  }
  return n;
}

static char *summary_text(const mxu_model *model) {
  FILE *f = tmpfile();
  CHECK(f != NULL);
  if (!f) return NULL;
  mxu_summary(model, f);
  char *text = read_all(f);
  fclose(f);
  return text;
}

typedef struct summary_expect {
  const char *name, *shape;
  int64_t params;
} summary_expect;

static void check_summary(const mxu_model *model, const summary_expect *rows,
                          int row_count, const char *total,
                          const char *trainable, const char *fixed) {
  char *text = summary_text(model);
  if (!text) return;
  char *copy = strdup(text);
  char *lines[256];
  int n = split_lines(copy, lines, 256);
  int rules_under = 0, rules_equal = 0, too_long = 0;
  for (int i = 0; i < n; i++) {
    size_t len = strlen(lines[i]);
    if (len > 65) too_long++;
    if (len && strspn(lines[i], "_") == len) {
      rules_under++;
      CHECK_MSG(len == 65, "rule of %zu characters", len);
    }
    if (len && strspn(lines[i], "=") == len) {
      rules_equal++;
      CHECK_MSG(len == 65, "rule of %zu characters", len);
    }
  }
  CHECK_MSG(too_long == 0, "%d lines over 65 characters:\n%s", too_long, text);
  CHECK(rules_under >= 2 && rules_equal >= 2);
  CHECK_MSG(n > 0 && strcmp(lines[0], "Model: \"sequential\"") == 0, "'%s'",
            n ? lines[0] : "");
  CHECK(has(text, "Layer (type)") && has(text, "Output Shape") &&
        has(text, "Param #"));
  for (int r = 0; r < row_count; r++) {
    const char *line = summary_row(lines, n, rows[r].name);
    CHECK_MSG(line != NULL, "no row for %s in:\n%s", rows[r].name, text);
    if (!line) continue;
    CHECK_MSG(has(line, rows[r].shape), "%s: '%s' lacks %s", rows[r].name, line,
              rows[r].shape);
    char token[32], want[32];
    snprintf(want, sizeof want, "%lld", (long long)rows[r].params);
    CHECK_MSG(strcmp(last_token(line, token, sizeof token), want) == 0,
              "%s: params '%s', want %s", rows[r].name, token, want);
  }
  CHECK_MSG(has(text, total), "no '%s' in:\n%s", total, text);
  CHECK_MSG(has(text, trainable), "no '%s' in:\n%s", trainable, text);
  CHECK_MSG(has(text, fixed), "no '%s' in:\n%s", fixed, text);
  free(copy);
  free(text);
}

static void summary(void) {
  mxu_model *model = fashion();
  /* Params from Keras' rules: Conv2D kh*kw*in*out + out = 9*64 + 64;
   * Flatten gives 13*13*64 = 10816; Dense 10816*10 + 10 = 108170. */
  const int64_t conv = 3 * 3 * 1 * 64 + 64, flat = 13 * 13 * 64;
  const int64_t dense = flat * 10 + 10;
  const summary_expect rows[] = {
      {"conv2d", "(None, 26, 26, 64)", conv},
      {"max_pooling2d", "(None, 13, 13, 64)", 0},
      {"activation", "(None, 13, 13, 64)", 0},
      {"flatten", "(None, 10816)", 0},
      {"dense", "(None, 10)", dense},
      {"activation_1", "(None, 10)", 0},
  };
  CHECK(conv == 640 && dense == 108170);
  check_summary(model, rows, 6, "Total params: 108,810",
                "Trainable params: 108,810", "Non-trainable params: 0");
  CHECK(mxu_model_param_count(model, 1) == conv + dense);
  CHECK(mxu_model_param_count(model, 0) == 0);
  /* The same after compile. */
  mxu_compile_config c = compile_config(1, MXU_BACKEND_CPU, 1);
  CHECK_OK(mxu_compile(model, &c));
  check_summary(model, rows, 6, "Total params: 108,810",
                "Trainable params: 108,810", "Non-trainable params: 0");
  mxu_model_free(model);

  /* BatchNormalization: moving mean and variance are non-trainable. */
  model = mxu_sequential("sequential");
  mxu_batchnorm_config bn = mxu_batchnorm_defaults();
  mxu_dense_config d = mxu_dense_defaults(2);
  CHECK_OK(mxu_add_input(model, NULL, shape3(4, 4, 3)));
  CHECK_OK(mxu_add_batch_normalization(model, &bn));
  CHECK_OK(mxu_add_flatten(model, NULL));
  CHECK_OK(mxu_add_dense(model, &d));
  const summary_expect bn_rows[] = {
      {"batch_normalization", "(None, 4, 4, 3)", 4 * 3},
      {"flatten", "(None, 48)", 0},
      {"dense", "(None, 2)", 48 * 2 + 2},
  };
  /* trainable: gamma, beta (6) + dense (98); non-trainable 2 * 3. */
  check_summary(model, bn_rows, 3, "Total params: 110", "Trainable params: 104",
                "Non-trainable params: 6");
  CHECK(mxu_model_param_count(model, 0) == 2 * 3);
  CHECK(mxu_model_param_count(model, 1) == 104);
  mxu_model_free(model);
}

/* ---- initialisers -------------------------------------------------------
 */

static void check_glorot(const float *w, int64_t n, double fan_in,
                         double fan_out, const char *what) {
  double limit = sqrt(6.0 / (fan_in + fan_out));
  double lo = 1e9, hi = -1e9, sum = 0, sum2 = 0;
  int64_t quarter[4] = {0, 0, 0, 0};
  for (int64_t i = 0; i < n; i++) {
    lo = w[i] < lo ? w[i] : lo;
    hi = w[i] > hi ? w[i] : hi;
    sum += w[i];
    sum2 += (double)w[i] * w[i];
    int q = (int)((w[i] + limit) / (2 * limit) * 4);
    if (q >= 0 && q < 4) quarter[q]++;
  }
  double mean = sum / n, var = sum2 / n - mean * mean;
  CHECK_MSG(lo >= -limit && hi <= limit, "%s: [%g, %g] outside +-%g", what, lo,
            hi, limit);
  /* n uniform draws leave a gap of about 2*limit/n at each end. */
  double gap = 2 * limit * 20.0 / (double)n;
  CHECK_MSG(lo < -limit + gap && hi > limit - gap,
            "%s: [%g, %g] does not reach +-%g", what, lo, hi, limit);
  /* Standard error of the mean: limit / sqrt(3n); allow six. */
  CHECK_MSG(fabs(mean) < 6 * limit / sqrt(3.0 * n), "%s: mean %g", what, mean);
  CHECK_MSG(fabs(var / (limit * limit / 3.0) - 1.0) < 0.15,
            "%s: variance %g, uniform gives %g", what, var,
            limit * limit / 3.0);
  for (int q = 0; q < 4; q++)
    CHECK_MSG(fabs((double)quarter[q] / n - 0.25) < 0.06, "%s: quarter %d %g",
              what, q, (double)quarter[q] / n);
}

static void initialisers(void) {
  mxu_model *model = fashion();
  mxu_compile_config c = compile_config(1, MXU_BACKEND_CPU, 1);
  CHECK_OK(mxu_compile(model, &c));
  int64_t n;
  const char *name = NULL;
  float *kernel = weight_data(model, 0, 0, &n, &name);
  CHECK(name && strcmp(name, "kernel") == 0);
  CHECK(n == 3 * 3 * 1 * 64);
  if (kernel) check_glorot(kernel, n, 3 * 3 * 1, 3 * 3 * 64, "conv2d kernel");
  float *bias = weight_data(model, 0, 1, &n, &name);
  CHECK(name && strcmp(name, "bias") == 0);
  int zeros = 1;
  for (int64_t i = 0; bias && i < n; i++) zeros &= bias[i] == 0.0f;
  CHECK(n == 64 && zeros);
  kernel = weight_data(model, 4, 0, &n, NULL);
  CHECK(n == 10816 * 10);
  if (kernel) check_glorot(kernel, n, 10816, 10, "dense kernel");
  bias = weight_data(model, 4, 1, &n, NULL);
  zeros = 1;
  for (int64_t i = 0; bias && i < n; i++) zeros &= bias[i] == 0.0f;
  CHECK(n == 10 && zeros);
  for (int l = 1; l < 4; l++) CHECK(mxu_layer_weight_count(model, l) == 0);
  CHECK(mxu_layer_weight_count(model, 5) == 0);

  /* Same seed, same weights; another seed, other weights. */
  int64_t total_a, total_b, total_c;
  float *a = all_weights(model, &total_a);
  mxu_model *again = fashion(), *other = fashion();
  CHECK_OK(mxu_compile(again, &c));
  c.seed = 2;
  CHECK_OK(mxu_compile(other, &c));
  float *b = all_weights(again, &total_b);
  float *d = all_weights(other, &total_c);
  CHECK(total_a == total_b && total_a == total_c);
  CHECK(memcmp(a, b, (size_t)total_a * sizeof *a) == 0);
  int64_t differ = 0;
  for (int64_t i = 0; i < total_a && i < total_c; i++) differ += a[i] != d[i];
  /* Every kernel value differs, the zero biases do not. */
  CHECK_MSG(differ > (total_a - 74) * 9 / 10, "%lld of %lld differ",
            (long long)differ, (long long)total_a);
  free(a);
  free(b);
  free(d);
  mxu_model_free(model);
  mxu_model_free(again);
  mxu_model_free(other);

  /* Two layers of the same shape draw different kernels. */
  model = mxu_sequential(NULL);
  mxu_dense_config h = mxu_dense_defaults(6);
  CHECK_OK(mxu_add_input(model, NULL, shape1(6)));
  CHECK_OK(mxu_add_dense(model, &h));
  CHECK_OK(mxu_add_dense(model, &h));
  c = compile_config(2, MXU_BACKEND_CPU_REF, 3);
  CHECK_OK(mxu_compile(model, &c));
  int64_t n0, n1;
  float *k0 = weight_data(model, 0, 0, &n0, NULL);
  float *k1 = weight_data(model, 1, 0, &n1, NULL);
  CHECK(n0 == n1 && k0 && k1 && memcmp(k0, k1, (size_t)n0 * 4) != 0);
  mxu_model_free(model);

  /* BatchNormalization starts as gamma 1, beta 0, mean 0, variance 1. */
  model = mxu_sequential(NULL);
  mxu_batchnorm_config bn = mxu_batchnorm_defaults();
  mxu_dense_config out = mxu_dense_defaults(2);
  CHECK_OK(mxu_add_input(model, NULL, shape3(3, 3, 5)));
  CHECK_OK(mxu_add_batch_normalization(model, &bn));
  CHECK_OK(mxu_add_flatten(model, NULL));
  CHECK_OK(mxu_add_dense(model, &out));
  CHECK_OK(mxu_compile(model, &c));
  CHECK(mxu_layer_weight_count(model, 0) == 4);
  static const char *const names[4] = {"gamma", "beta", "moving_mean",
                                       "moving_variance"};
  static const float values[4] = {1, 0, 0, 1};
  for (int k = 0; k < 4; k++) {
    float *w = weight_data(model, 0, k, &n, &name);
    CHECK_MSG(name && strcmp(name, names[k]) == 0, "weight %d is '%s'", k,
              name ? name : "(null)");
    int ok = n == 5;
    for (int64_t i = 0; w && i < n; i++) ok &= w[i] == values[k];
    CHECK_MSG(ok, "%s is not all %g", names[k], (double)values[k]);
  }
  mxu_tensor t;
  EXPECT_FAIL(mxu_layer_weight(model, 0, 4, &t, NULL), MXU_ERR_ARG, NULL);
  EXPECT_FAIL(mxu_layer_weight(model, 9, 0, &t, NULL), MXU_ERR_ARG, NULL);
  mxu_model_free(model);
}

/* ---- optimizers through fit ---------------------------------------------
 */

enum { OPT_IN = 3, OPT_UNITS = 3, OPT_BATCH = 4, OPT_STEPS = 2 };
enum { OPT_PARAMS = OPT_IN * OPT_UNITS + OPT_UNITS };

/* Mean softmax cross-entropy of rows of x under theta = (kernel (in,
 * units) row-major, bias), and its gradient; all in double. */
static double dense_softmax_loss(const double *theta, const float *x,
                                 const int32_t *labels, int rows, double *g) {
  const double *w = theta, *b = theta + OPT_IN * OPT_UNITS;
  double loss = 0;
  if (g) memset(g, 0, OPT_PARAMS * sizeof *g);
  for (int r = 0; r < rows; r++) {
    double z[OPT_UNITS], max = -INFINITY, sum = 0;
    for (int j = 0; j < OPT_UNITS; j++) {
      z[j] = b[j];
      for (int i = 0; i < OPT_IN; i++)
        z[j] += x[r * OPT_IN + i] * w[i * OPT_UNITS + j];
      max = z[j] > max ? z[j] : max;
    }
    for (int j = 0; j < OPT_UNITS; j++) sum += exp(z[j] - max);
    loss += -(z[labels[r]] - max - log(sum)) / rows;
    for (int j = 0; g && j < OPT_UNITS; j++) {
      double d = (exp(z[j] - max) / sum - (labels[r] == j)) / rows;
      for (int i = 0; i < OPT_IN; i++)
        g[i * OPT_UNITS + j] += x[r * OPT_IN + i] * d;
      g[OPT_IN * OPT_UNITS + j] += d;
    }
  }
  return loss;
}

/* Keras' update rules (KERAS.md), in double. */
static void reference_update(const mxu_optimizer_config *o, int t,
                             double *theta, const double *g, double *m,
                             double *v) {
  for (int i = 0; i < OPT_PARAMS; i++) {
    if (o->kind == MXU_ADAM) {
      double b1 = o->beta_1, b2 = o->beta_2;
      double lr_t = o->learning_rate * sqrt(1 - pow(b2, t)) / (1 - pow(b1, t));
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
      theta[i] -= lr_t * m[i] / (sqrt(v[i]) + o->epsilon);
    } else if (o->momentum == 0) {
      theta[i] -= o->learning_rate * g[i];
    } else {
      m[i] = o->momentum * m[i] - o->learning_rate * g[i];
      if (o->nesterov)
        theta[i] += o->momentum * m[i] - o->learning_rate * g[i];
      else
        theta[i] += m[i];
    }
  }
}

static void optimizer_case(mxu_optimizer_config opt, const char *what) {
  enum { COUNT = OPT_BATCH * OPT_STEPS };
  float x[COUNT * OPT_IN];
  int32_t labels[COUNT] = {0, 1, 2, 1, 2, 0, 0, 1};
  for (int i = 0; i < COUNT * OPT_IN; i++) x[i] = next_float(-2, 2);
  mxu_dataset *data = NULL;
  CHECK_OK(mxu_dataset_from_arrays(x, labels, COUNT, shape1(OPT_IN), OPT_UNITS,
                                   &data));
  mxu_model *model = dense_softmax(OPT_IN, OPT_UNITS);
  mxu_compile_config c = compile_config(OPT_BATCH, MXU_BACKEND_CPU_REF, 17);
  c.optimizer = opt;
  CHECK_OK(mxu_compile(model, &c));

  double theta[OPT_PARAMS], start[OPT_PARAMS], g[OPT_PARAMS];
  double m[OPT_PARAMS] = {0}, v[OPT_PARAMS] = {0};
  int64_t nk, nb;
  float *kernel = weight_data(model, 0, 0, &nk, NULL);
  float *bias = weight_data(model, 0, 1, &nb, NULL);
  CHECK(nk == OPT_IN * OPT_UNITS && nb == OPT_UNITS);
  if (!kernel || !bias || nk != OPT_IN * OPT_UNITS || nb != OPT_UNITS) {
    mxu_model_free(model);
    mxu_dataset_free(data);
    return;
  }
  for (int i = 0; i < nk; i++) theta[i] = kernel[i];
  for (int i = 0; i < nb; i++) theta[nk + i] = bias[i];
  memcpy(start, theta, sizeof theta);

  /* Step s trains on samples [s*B, (s+1)*B), shuffle off. */
  double loss_sum = 0;
  int correct = 0;
  for (int s = 0; s < OPT_STEPS; s++) {
    for (int r = s * OPT_BATCH; r < (s + 1) * OPT_BATCH; r++) {
      double z[OPT_UNITS];
      int best = 0;
      for (int j = 0; j < OPT_UNITS; j++) {
        z[j] = theta[OPT_IN * OPT_UNITS + j];
        for (int i = 0; i < OPT_IN; i++)
          z[j] += x[r * OPT_IN + i] * theta[i * OPT_UNITS + j];
        best = z[j] > z[best] ? j : best;
      }
      correct += best == labels[r];
    }
    loss_sum += dense_softmax_loss(theta, x + s * OPT_BATCH * OPT_IN,
                                   labels + s * OPT_BATCH, OPT_BATCH, g);
    reference_update(&opt, s + 1, theta, g, m, v);
  }

  mxu_fit_config f = quiet_fit(1, OPT_BATCH);
  f.steps_per_epoch = OPT_STEPS;
  f.shuffle = 0;
  const mxu_history *history = NULL;
  CHECK_OK(mxu_fit(model, data, &f, &history));

  double moved = 0;
  for (int i = 0; i < OPT_PARAMS; i++) {
    double got = i < nk ? kernel[i] : bias[i - nk];
    moved = fmax(moved, fabs(theta[i] - start[i]));
    double tol = 1e-5 * fmax(fabs(theta[i]), opt.learning_rate);
    CHECK_MSG(fabs(got - theta[i]) <= tol,
              "%s: parameter %d: mxu %.9g, reference %.9g (start %.9g)", what,
              i, got, theta[i], start[i]);
  }
  CHECK_MSG(moved > opt.learning_rate * 0.1, "%s: the reference barely moved",
            what);
  if (history && history->count == 1) {
    CHECK_NEAR(history->epochs[0].loss, loss_sum / OPT_STEPS, 1e-5 * loss_sum);
    CHECK(history->epochs[0].samples == COUNT);
    CHECK_NEAR(history->epochs[0].accuracy, (double)correct / COUNT, 1e-12);
  } else {
    CHECK(history && history->count == 1);
  }
  mxu_model_free(model);
  mxu_dataset_free(data);
}

static void optimizers(void) {
  optimizer_case(mxu_adam(0.05f), "adam");
  mxu_optimizer_config adam = mxu_adam(0.02f);
  adam.beta_1 = 0.8f;
  adam.beta_2 = 0.95f;
  adam.epsilon = 1e-3f;
  optimizer_case(adam, "adam (custom betas, epsilon)");
  optimizer_case(mxu_sgd(0.1f, 0.0f, 0), "sgd");
  optimizer_case(mxu_sgd(0.1f, 0.9f, 0), "sgd momentum");
  optimizer_case(mxu_sgd(0.1f, 0.9f, 1), "sgd nesterov");
  /* Keras' defaults. */
  mxu_optimizer_config a = mxu_adam(1e-3f);
  CHECK(a.kind == MXU_ADAM && a.beta_1 == 0.9f && a.beta_2 == 0.999f &&
        a.epsilon == 1e-7f);
}

/* ---- fit ----------------------------------------------------------------
 */

static mxu_model *fit_model(mxu_backend_kind backend, uint64_t seed,
                            float dropout) {
  mxu_model *model = mlp(4, 8, 3, dropout);
  mxu_compile_config c = compile_config(10, backend, seed);
  CHECK_OK(mxu_compile(model, &c));
  return model;
}

/* "N/N [==============================] - 0s 2ms/step - loss: 1.0986" and
 * the rest of Keras' final progress line. */
static int number_4(const char **p) {
  const char *s = *p;
  if (*s == '-') s++;
  if (!(*s >= '0' && *s <= '9')) return 0;
  while (*s >= '0' && *s <= '9') s++;
  if (*s++ != '.') return 0;
  for (int i = 0; i < 4; i++, s++)
    if (!(*s >= '0' && *s <= '9')) return 0;
  if (*s == 'e') { /* %.4e */
    s++;
    if (*s != '+' && *s != '-') return 0;
    s++;
    if (!(s[0] >= '0' && s[0] <= '9' && s[1] >= '0' && s[1] <= '9')) return 0;
    while (*s >= '0' && *s <= '9') s++;
  }
  if (*s != 0 && *s != ' ') return 0;
  *p = s;
  return 1;
}

static int keras_final_line(const char *line, int steps) {
  char head[128];
  snprintf(head, sizeof head, "%d/%d [==============================] - ",
           steps, steps);
  if (strncmp(line, head, strlen(head)) != 0) return 0;
  const char *p = line + strlen(head);
  if (!(*p >= '0' && *p <= '9')) return 0;
  while (*p >= '0' && *p <= '9') p++;
  if (strncmp(p, "s ", 2) != 0) return 0;
  p += 2;
  if (!(*p >= '0' && *p <= '9')) return 0;
  while (*p >= '0' && *p <= '9') p++;
  if (strncmp(p, "ms/step", 7) && strncmp(p, "us/step", 7) &&
      strncmp(p, "s/step", 6))
    return 0;
  p = strstr(p, " - loss: ");
  if (!p) return 0;
  p += strlen(" - loss: ");
  if (!number_4(&p)) return 0;
  /* Every other metric is printed the same way. */
  while ((p = strstr(p, ": ")) != NULL) {
    p += 2;
    if (!number_4(&p)) return 0;
  }
  return 1;
}

static char *fit_output(mxu_model *model, const mxu_dataset *data,
                        mxu_fit_config f, mxu_status *status) {
  FILE *out = tmpfile();
  CHECK(out != NULL);
  if (!out) return strdup("");
  f.out = out;
  *status = mxu_fit(model, data, &f, NULL);
  char *text = read_all(out);
  fclose(out);
  return text;
}

static void fit_batches(void) {
  mxu_dataset *data = make_data(60, shape1(4), 3, -1, 1);
  mxu_model *model = fit_model(MXU_BACKEND_CPU, 1, 0);
  const mxu_history *history = NULL;
  mxu_status status;

  /* steps_per_epoch without a batch size: batch = ceil(60 / 6) = 10. */
  mxu_fit_config f = mxu_fit_defaults();
  f.steps_per_epoch = 6;
  f.epochs = 2;
  f.verbose = 0;
  CHECK(f.batch_size == 0);
  CHECK_OK(mxu_fit(model, data, &f, &history));
  CHECK(history && history->count == 2);
  for (int e = 0; history && e < history->count; e++) {
    CHECK(history->epochs[e].epoch == e + 1);
    CHECK_MSG(history->epochs[e].samples == 60, "samples %lld",
              (long long)history->epochs[e].samples);
    CHECK(isfinite(history->epochs[e].loss));
    CHECK(history->epochs[e].accuracy >= 0 && history->epochs[e].accuracy <= 1);
    CHECK(isnan(history->epochs[e].val_loss)); /* no validation data */
  }
  f.verbose = 1;
  char *text = fit_output(model, data, f, &status);
  CHECK_OK(status);
  CHECK_MSG(has(text, "Epoch 1/2\n") && has(text, "Epoch 2/2\n"), "%s", text);
  CHECK_MSG(has(text, "6/6 ["), "%s", text);
  free(text);

  /* With neither: 32. 63 samples give one batch of 32 (and no other batch
   * size gives 32 samples per epoch). */
  mxu_dataset *odd = make_data(63, shape1(4), 3, -1, 1);
  f = mxu_fit_defaults();
  f.verbose = 0;
  CHECK_OK(mxu_fit(model, odd, &f, &history));
  CHECK(history && history->count == 1 && history->epochs[0].samples == 32);
  mxu_dataset_free(odd);

  /* Keras infers batch = ceil(61 / 6) = 11. Shapes are static, so the
   * last partial batch (6 samples) is dropped, as on a TPU: 5 steps. */
  mxu_dataset *uneven = make_data(61, shape1(4), 3, -1, 1);
  f = quiet_fit(1, 0);
  f.steps_per_epoch = 6;
  mxu_status uneven_status = mxu_fit(model, uneven, &f, &history);
  CHECK_MSG(uneven_status == MXU_OK, "steps_per_epoch 6 on 61 samples: %s: %s",
            mxu_status_name(uneven_status), mxu_errmsg());
  if (uneven_status == MXU_OK)
    CHECK(history && history->count == 1 && history->epochs[0].samples == 55);
  mxu_dataset_free(uneven);

  /* The history belongs to the last fit. */
  f = quiet_fit(3, 20);
  CHECK_OK(mxu_fit(model, data, &f, &history));
  CHECK(history && history->count == 3 && history->epochs[2].epoch == 3 &&
        history->epochs[2].samples == 60);
  mxu_model_free(model);
  mxu_dataset_free(data);
}

static void fit_validation(void) {
  mxu_dataset *data = make_data(40, shape1(4), 3, -1, 1);
  mxu_dataset *val = make_data(10, shape1(4), 3, -1, 1);
  mxu_model *model = fit_model(MXU_BACKEND_CPU, 2, 0);
  mxu_fit_config f = quiet_fit(4, 10);
  f.validation = val;
  f.validation_freq = 2;
  const mxu_history *history = NULL;
  CHECK_OK(mxu_fit(model, data, &f, &history));
  CHECK(history && history->count == 4);
  for (int e = 0; history && e < history->count; e++) {
    const mxu_epoch_log *log = &history->epochs[e];
    if ((e + 1) % 2 == 0)
      CHECK_MSG(isfinite(log->val_loss) && log->val_accuracy >= 0 &&
                    log->val_accuracy <= 1,
                "epoch %d: val_loss %g", e + 1, log->val_loss);
    else
      CHECK_MSG(isnan(log->val_loss) && isnan(log->val_accuracy),
                "epoch %d: val_loss %g", e + 1, log->val_loss);
  }
  /* The last validation ran on the final weights. */
  double loss, accuracy;
  CHECK_OK(mxu_evaluate(model, val, 0, &loss, &accuracy));
  if (history && history->count == 4) {
    CHECK_NEAR(history->epochs[3].val_loss, loss, 1e-6 * fabs(loss));
    CHECK_NEAR(history->epochs[3].val_accuracy, accuracy, 1e-12);
  }

  /* validation_freq 3 over 4 epochs: only epoch 3. */
  f.validation_freq = 3;
  CHECK_OK(mxu_fit(model, data, &f, &history));
  for (int e = 0; history && e < history->count; e++)
    CHECK_MSG(isnan(history->epochs[e].val_loss) == (e != 2),
              "freq 3, epoch %d: val_loss %g", e + 1,
              history->epochs[e].val_loss);
  mxu_model_free(model);
  mxu_dataset_free(data);
  mxu_dataset_free(val);
}

static int weights_equal(const mxu_model *a, const mxu_model *b) {
  int64_t na, nb;
  float *wa = all_weights(a, &na), *wb = all_weights(b, &nb);
  int same = na == nb && memcmp(wa, wb, (size_t)na * sizeof *wa) == 0;
  free(wa);
  free(wb);
  return same;
}

static void fit_determinism(void) {
  mxu_dataset *data = make_data(60, shape1(4), 3, -1, 1);
  mxu_model *a = fit_model(MXU_BACKEND_CPU, 5, 0.3f);
  mxu_model *b = fit_model(MXU_BACKEND_CPU, 5, 0.3f);
  mxu_model *c = fit_model(MXU_BACKEND_CPU, 5, 0.3f);
  mxu_model *d = fit_model(MXU_BACKEND_CPU, 5, 0);
  mxu_model *e = fit_model(MXU_BACKEND_CPU, 5, 0);
  CHECK(weights_equal(a, b) && weights_equal(a, c));
  mxu_fit_config f = quiet_fit(2, 10);
  f.seed = 11;
  CHECK_OK(mxu_fit(a, data, &f, NULL));
  CHECK_OK(mxu_fit(b, data, &f, NULL));
  CHECK_MSG(weights_equal(a, b), "the same seed gave different weights");
  f.seed = 12;
  CHECK_OK(mxu_fit(c, data, &f, NULL));
  CHECK_MSG(!weights_equal(a, c), "another seed gave the same weights");
  /* Without dropout only the shuffle depends on the seed. */
  f.seed = 11;
  CHECK_OK(mxu_fit(d, data, &f, NULL));
  f.seed = 12;
  CHECK_OK(mxu_fit(e, data, &f, NULL));
  CHECK_MSG(!weights_equal(d, e), "the shuffle ignores the seed");
  mxu_model_free(a);
  mxu_model_free(b);
  mxu_model_free(c);
  mxu_model_free(d);
  mxu_model_free(e);
  mxu_dataset_free(data);
}

static void fit_verbose(void) {
  mxu_dataset *data = make_data(60, shape1(4), 3, -1, 1);
  mxu_dataset *val = make_data(10, shape1(4), 3, -1, 1);
  mxu_model *model = fit_model(MXU_BACKEND_CPU, 3, 0);
  mxu_status status;

  mxu_fit_config f = quiet_fit(2, 10);
  char *text = fit_output(model, data, f, &status);
  CHECK_OK(status);
  CHECK_MSG(text[0] == 0, "verbose 0 printed '%s'", text);
  free(text);

  f.verbose = 1;
  f.validation = val;
  text = fit_output(model, data, f, &status);
  CHECK_OK(status);
  CHECK_MSG(has(text, "Epoch 1/2\n") && has(text, "Epoch 2/2\n"), "%s", text);
  char *copy = strdup(text), *lines[512];
  int n = split_lines(copy, lines, 512), finals = 0;
  for (int i = 0; i < n; i++) {
    /* A redrawn line keeps only what follows the last carriage return. */
    char *cr = strrchr(lines[i], '\r');
    const char *line = cr ? cr + 1 : lines[i];
    if (keras_final_line(line, 6)) {
      finals++;
      CHECK_MSG(has(line, " - sparse_categorical_accuracy: "), "'%s'", line);
      CHECK_MSG(has(line, " - val_loss: ") &&
                    has(line, " - val_sparse_categorical_accuracy: "),
                "'%s'", line);
    }
  }
  CHECK_MSG(finals == 2, "%d final lines in:\n%s", finals, text);
  free(copy);
  free(text);

  /* Keras prints "Epoch 1/1" only when there is more than one epoch. */
  f.epochs = 1;
  f.validation = NULL;
  text = fit_output(model, data, f, &status);
  CHECK_OK(status);
  CHECK_MSG(!has(text, "Epoch 1/1"), "one epoch printed:\n%s", text);
  CHECK_MSG(has(text, "6/6 [=============================="), "%s", text);
  free(text);

  f.epochs = 2;
  f.verbose = 2;
  text = fit_output(model, data, f, &status);
  CHECK_OK(status);
  CHECK_MSG(!has(text, "["), "verbose 2 printed a bar:\n%s", text);
  CHECK_MSG(has(text, " - loss: "), "%s", text);
  CHECK_MSG(has(text, "Epoch 2/2"), "%s", text);
  copy = strdup(text);
  n = split_lines(copy, lines, 512);
  int metric_lines = 0;
  for (int i = 0; i < n; i++) metric_lines += has(lines[i], " - loss: ");
  CHECK_MSG(metric_lines == 2, "verbose 2: %d lines with the loss:\n%s",
            metric_lines, text);
  free(copy);
  free(text);
  mxu_model_free(model);
  mxu_dataset_free(data);
  mxu_dataset_free(val);
}

/* ---- evaluate and predict -----------------------------------------------
 */

/* The loss of one sample from the model's output: probabilities, or
 * logits when from_logits. */
static double sample_loss(const float *out, int classes, int label,
                          int from_logits) {
  if (!from_logits) return -log((double)out[label]);
  double max = out[0], sum = 0;
  for (int k = 1; k < classes; k++) max = out[k] > max ? out[k] : max;
  for (int k = 0; k < classes; k++) sum += exp(out[k] - max);
  return max + log(sum) - out[label];
}

static void evaluate_matches_predict(mxu_backend_kind backend, mxu_loss kind,
                                     int from_logits) {
  const char *what = backend == MXU_BACKEND_CPU ? "cpu" : "cpu_ref";
  enum { COUNT = 10, CLASSES = 3, IN = 5 };
  mxu_dataset *data = make_data(COUNT, shape1(IN), CLASSES, -2, 2);
  mxu_model *model = mxu_sequential(NULL);
  mxu_dense_config h = mxu_dense_defaults(6), o = mxu_dense_defaults(CLASSES);
  h.activation = MXU_RELU;
  CHECK_OK(mxu_add_input(model, NULL, shape1(IN)));
  CHECK_OK(mxu_add_dense(model, &h));
  CHECK_OK(mxu_add_dense(model, &o));
  if (!from_logits) CHECK_OK(mxu_add_activation(model, NULL, MXU_SOFTMAX));
  mxu_compile_config c = compile_config(4, backend, 9);
  c.loss = kind;
  c.from_logits = from_logits;
  CHECK_OK(mxu_compile(model, &c));
  /* Move off the initial weights a little so the classes differ. */
  mxu_fit_config f = quiet_fit(3, 2);
  CHECK_OK(mxu_fit(model, data, &f, NULL));

  double loss = NAN, accuracy = NAN;
  CHECK_OK(mxu_evaluate(model, data, 4, &loss, &accuracy));
  float probs[COUNT * CLASSES];
  CHECK_OK(mxu_predict(model, mxu_dataset_x(data), COUNT, probs));
  const int32_t *labels = mxu_dataset_labels(data);
  double want_loss = 0, want_acc = 0;
  for (int r = 0; r < COUNT; r++) {
    const float *p = probs + r * CLASSES;
    int best = 0;
    for (int k = 1; k < CLASSES; k++) best = p[k] > p[best] ? k : best;
    want_acc += best == labels[r];
    want_loss += sample_loss(p, CLASSES, labels[r], from_logits);
  }
  want_loss /= COUNT;
  want_acc /= COUNT;
  CHECK_MSG(fabs(loss - want_loss) <= 1e-5 * want_loss,
            "%s, loss %d, from_logits %d: loss %.9g, %.9g", what, (int)kind,
            from_logits, loss, want_loss);
  CHECK_MSG(fabs(accuracy - want_acc) < 1e-12,
            "%s, loss %d, from_logits %d: accuracy %g, %g", what, (int)kind,
            from_logits, accuracy, want_acc);
  /* The batch size does not change the score. */
  const int batches[] = {3, 10, 1, 7};
  for (size_t i = 0; i < sizeof batches / sizeof *batches; i++) {
    double l2, a2;
    CHECK_OK(mxu_evaluate(model, data, batches[i], &l2, &a2));
    CHECK_NEAR(l2, want_loss, 1e-5 * want_loss);
    CHECK_NEAR(a2, want_acc, 1e-12);
  }
  /* The first 6 samples alone are 6 samples, not a padded batch of 8. */
  mxu_dataset *head = NULL;
  CHECK_OK(mxu_dataset_slice(data, 0, 6, &head));
  double l6, a6, want6 = 0;
  for (int r = 0; r < 6; r++)
    want6 += sample_loss(probs + r * CLASSES, CLASSES, labels[r], from_logits);
  CHECK_OK(mxu_evaluate(model, head, 4, &l6, &a6));
  CHECK_NEAR(l6, want6 / 6, 1e-5 * want6 / 6);
  mxu_dataset_free(head);
  mxu_model_free(model);
  mxu_dataset_free(data);
}

static void predict(void) {
  enum { COUNT = 7, IN = 4, CLASSES = 3 };
  float x[COUNT * IN];
  for (int i = 0; i < COUNT * IN; i++) x[i] = next_float(-3, 3);
  const mxu_backend_kind backends[] = {MXU_BACKEND_CPU_REF, MXU_BACKEND_CPU};
  for (int bi = 0; bi < 2; bi++) {
    mxu_model *model = dense_softmax(IN, CLASSES);
    mxu_compile_config c = compile_config(4, backends[bi], 21);
    CHECK_OK(mxu_compile(model, &c));
    int64_t nk, nb;
    float *kernel = weight_data(model, 0, 0, &nk, NULL);
    float *bias = weight_data(model, 0, 1, &nb, NULL);
    if (bias)
      for (int j = 0; j < nb; j++) bias[j] = 0.1f * (float)(j + 1);
    float out[COUNT * CLASSES], one[CLASSES];
    for (int i = 0; i < COUNT * CLASSES; i++) out[i] = NAN;
    CHECK_OK(mxu_predict(model, x, COUNT, out)); /* 4 + 3 */
    for (int r = 0; r < COUNT && kernel && bias; r++) {
      double z[CLASSES], max = -INFINITY, sum = 0, row = 0;
      for (int j = 0; j < CLASSES; j++) {
        z[j] = bias[j];
        for (int i = 0; i < IN; i++)
          z[j] += (double)x[r * IN + i] * kernel[i * CLASSES + j];
        max = z[j] > max ? z[j] : max;
      }
      for (int j = 0; j < CLASSES; j++) sum += exp(z[j] - max);
      for (int j = 0; j < CLASSES; j++) {
        double want = exp(z[j] - max) / sum;
        row += out[r * CLASSES + j];
        CHECK_MSG(fabs(out[r * CLASSES + j] - want) <= 1e-5,
                  "backend %d row %d class %d: %g, want %g", bi, r, j,
                  (double)out[r * CLASSES + j], want);
      }
      CHECK_NEAR(row, 1.0, 1e-5);
      /* One sample on its own gives the same row. */
      CHECK_OK(mxu_predict(model, x + r * IN, 1, one));
      for (int j = 0; j < CLASSES; j++)
        CHECK_NEAR(one[j], out[r * CLASSES + j], 1e-6);
    }
    CHECK_OK(mxu_predict(model, x, 0, out));
    mxu_model_free(model);
  }
}

/* ---- Dropout and BatchNormalization -------------------------------------
 */

static void dropout_identity(void) {
  enum { COUNT = 9, IN = 6 };
  mxu_dataset *data = make_data(COUNT, shape1(IN), 3, -1, 1);
  mxu_model *with = mlp(IN, 8, 3, 0.5f), *without = mlp(IN, 8, 3, 0);
  mxu_compile_config c = compile_config(4, MXU_BACKEND_CPU, 4);
  c.optimizer = mxu_sgd(0.5f, 0, 0);
  CHECK_OK(mxu_compile(with, &c));
  c.seed = 99;
  CHECK_OK(mxu_compile(without, &c));
  copy_weights(with, 0, without, 0);
  copy_weights(with, 2, without, 1);
  CHECK(weights_equal(with, without));
  float a[COUNT * 3], b[COUNT * 3];
  CHECK_OK(mxu_predict(with, mxu_dataset_x(data), COUNT, a));
  CHECK_OK(mxu_predict(without, mxu_dataset_x(data), COUNT, b));
  for (int i = 0; i < COUNT * 3; i++)
    CHECK_MSG(fabsf(a[i] - b[i]) <= 1e-6f, "prediction %d: %g vs %g", i,
              (double)a[i], (double)b[i]);
  double la, aa, lb, ab;
  CHECK_OK(mxu_evaluate(with, data, 0, &la, &aa));
  CHECK_OK(mxu_evaluate(without, data, 0, &lb, &ab));
  CHECK_NEAR(la, lb, 1e-6);
  CHECK_NEAR(aa, ab, 1e-12);
  /* ... while in training it does drop: one step moves the weights
   * differently. */
  mxu_fit_config f = quiet_fit(1, 8);
  f.shuffle = 0;
  CHECK_OK(mxu_fit(with, data, &f, NULL));
  CHECK_OK(mxu_fit(without, data, &f, NULL));
  CHECK(!weights_equal(with, without));
  mxu_model_free(with);
  mxu_model_free(without);
  mxu_dataset_free(data);
}

static void batchnorm_moving_statistics(mxu_backend_kind backend) {
  enum { COUNT = 8, H = 2, W = 2, C = 3 };
  float x[COUNT * H * W * C];
  /* Channel c centred on c - 1 with spread 1 + c. */
  for (int i = 0; i < COUNT * H * W; i++)
    for (int ch = 0; ch < C; ch++)
      x[i * C + ch] = (float)(ch - 1) + (1.0f + ch) * next_float(-1, 1);
  int32_t labels[COUNT];
  for (int i = 0; i < COUNT; i++) labels[i] = i % 2;
  mxu_dataset *data = NULL;
  CHECK_OK(
      mxu_dataset_from_arrays(x, labels, COUNT, shape3(H, W, C), 2, &data));
  mxu_model *model = mxu_sequential(NULL);
  mxu_batchnorm_config bn = mxu_batchnorm_defaults();
  mxu_dense_config d = mxu_dense_defaults(2);
  d.activation = MXU_SOFTMAX;
  CHECK(bn.momentum == 0.99f && bn.epsilon == 1e-3f);
  CHECK_OK(mxu_add_input(model, NULL, shape3(H, W, C)));
  CHECK_OK(mxu_add_batch_normalization(model, &bn));
  CHECK_OK(mxu_add_flatten(model, NULL));
  CHECK_OK(mxu_add_dense(model, &d));
  mxu_compile_config c = compile_config(COUNT, backend, 8);
  CHECK_OK(mxu_compile(model, &c));
  mxu_fit_config f = quiet_fit(1, COUNT);
  f.shuffle = 0;
  CHECK_OK(mxu_fit(model, data, &f, NULL));
  int64_t n;
  float *mean = weight_data(model, 0, 2, &n, NULL);
  float *var = weight_data(model, 0, 3, &n, NULL);
  CHECK(n == C);
  const double m = 0.99, values = COUNT * H * W;
  for (int ch = 0; ch < C && mean && var && n == C; ch++) {
    double sum = 0, sum2 = 0;
    for (int i = 0; i < COUNT * H * W; i++) sum += x[i * C + ch];
    double mu = sum / values;
    for (int i = 0; i < COUNT * H * W; i++)
      sum2 += (x[i * C + ch] - mu) * (x[i * C + ch] - mu);
    double unbiased = sum2 / (values - 1);
    double want_mean = m * 0 + (1 - m) * mu;
    double want_var = m * 1 + (1 - m) * unbiased;
    CHECK_MSG(fabs(mean[ch] - want_mean) <= 1e-6 + 1e-5 * fabs(want_mean),
              "channel %d: moving_mean %.9g, want %.9g", ch, (double)mean[ch],
              want_mean);
    CHECK_MSG(fabs(var[ch] - want_var) <= 1e-6 + 1e-5 * want_var,
              "channel %d: moving_variance %.9g, want %.9g (biased gives "
              "%.9g)",
              ch, (double)var[ch], want_var, m + (1 - m) * sum2 / values);
  }

  /* Inference normalises with the moving statistics (and the trained gamma
   * and beta): predict against a forward pass in double. */
  int64_t ng, nbeta, nk, nb;
  float *gamma = weight_data(model, 0, 0, &ng, NULL);
  float *beta = weight_data(model, 0, 1, &nbeta, NULL);
  float *kernel = weight_data(model, 2, 0, &nk, NULL);
  float *bias = weight_data(model, 2, 1, &nb, NULL);
  float probs[COUNT * 2];
  CHECK_OK(mxu_predict(model, x, COUNT, probs));
  for (int r = 0; r < COUNT && gamma && beta && kernel && bias && mean && var;
       r++) {
    double z[2] = {bias[0], bias[1]};
    for (int i = 0; i < H * W * C; i++) {
      int ch = i % C;
      double y = gamma[ch] * (x[r * H * W * C + i] - mean[ch]) /
                     sqrt((double)var[ch] + (double)bn.epsilon) +
                 beta[ch];
      z[0] += y * kernel[i * 2];
      z[1] += y * kernel[i * 2 + 1];
    }
    double p0 = 1.0 / (1.0 + exp(z[1] - z[0]));
    CHECK_MSG(fabs(probs[r * 2] - p0) <= 1e-5, "sample %d: %.7g, want %.7g", r,
              (double)probs[r * 2], p0);
  }
  mxu_model_free(model);
  mxu_dataset_free(data);
}

int main(void) {
  errors_compile();
  errors_layers();
  errors_fit();
  errors_nan();
  naming();
  summary();
  initialisers();
  optimizers();
  fit_batches();
  fit_validation();
  fit_determinism();
  fit_verbose();
  const mxu_backend_kind backends[] = {MXU_BACKEND_CPU_REF, MXU_BACKEND_CPU};
  for (int b = 0; b < 2; b++) {
    evaluate_matches_predict(backends[b], MXU_SPARSE_CATEGORICAL_CROSSENTROPY,
                             0);
    evaluate_matches_predict(backends[b], MXU_CATEGORICAL_CROSSENTROPY, 0);
    evaluate_matches_predict(backends[b], MXU_SPARSE_CATEGORICAL_CROSSENTROPY,
                             1);
  }
  predict();
  dropout_identity();
  batchnorm_moving_statistics(MXU_BACKEND_CPU_REF);
  batchnorm_moving_statistics(MXU_BACKEND_CPU);
  return check_report("test_api");
}
