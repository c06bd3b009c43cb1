/* test_json.c — Keras model JSON: real tf.keras 2.x and Keras 3 to_json()
 * texts build the right models; the recipe files in models/ round-trip
 * through both writers; bad input fails with messages that name the
 * source, the layer and the key; no truncation or mutation crashes. */
#include "check.h"
#include "model/model.h"
#include "mxu.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Keras' model.layers[i] (a Sequential model's InputLayer is not one). */
#define LAYER(m, i) (&(m)->layers[mxu_model_node((m), (i))])

/* ---- real-world texts ---------------------------------------------------
 */

/* tf.keras 2.6's model.to_json() of the fashion recipe, built as
 * Sequential([Conv2D(64, (3, 3), input_shape=(28, 28, 1)), ...]): the
 * InputLayer is named after the first layer, which repeats the shape. */
static const char fashion_keras26[] =
    "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"sequential\", "
    "\"layers\": [{\"class_name\": \"InputLayer\", "
    "\"config\": {\"batch_input_shape\": [null, 28, 28, 1], "
    "\"dtype\": \"float32\", \"sparse\": false, \"ragged\": false, "
    "\"name\": \"conv2d_input\"}}, {\"class_name\": \"Conv2D\", "
    "\"config\": {\"name\": \"conv2d\", \"trainable\": true, "
    "\"batch_input_shape\": [null, 28, 28, 1], \"dtype\": \"float32\", "
    "\"filters\": 64, \"kernel_size\": [3, 3], \"strides\": [1, 1], "
    "\"padding\": \"valid\", \"data_format\": \"channels_last\", "
    "\"dilation_rate\": [1, 1], \"groups\": 1, \"activation\": \"linear\", "
    "\"use_bias\": true, "
    "\"kernel_initializer\": {\"class_name\": \"GlorotUniform\", "
    "\"config\": {\"seed\": null}}, "
    "\"bias_initializer\": {\"class_name\": \"Zeros\", \"config\": {}}, "
    "\"kernel_regularizer\": null, \"bias_regularizer\": null, "
    "\"activity_regularizer\": null, \"kernel_constraint\": null, "
    "\"bias_constraint\": null}}, {\"class_name\": \"MaxPooling2D\", "
    "\"config\": {\"name\": \"max_pooling2d\", \"trainable\": true, "
    "\"dtype\": \"float32\", \"pool_size\": [2, 2], \"padding\": \"valid\", "
    "\"strides\": [2, 2], \"data_format\": \"channels_last\"}}, "
    "{\"class_name\": \"Activation\", \"config\": {\"name\": \"activation\", "
    "\"trainable\": true, \"dtype\": \"float32\", \"activation\": \"relu\"}}, "
    "{\"class_name\": \"Flatten\", \"config\": {\"name\": \"flatten\", "
    "\"trainable\": true, \"dtype\": \"float32\", "
    "\"data_format\": \"channels_last\"}}, {\"class_name\": \"Dense\", "
    "\"config\": {\"name\": \"dense\", \"trainable\": true, "
    "\"dtype\": \"float32\", \"units\": 10, \"activation\": \"linear\", "
    "\"use_bias\": true, "
    "\"kernel_initializer\": {\"class_name\": \"GlorotUniform\", "
    "\"config\": {\"seed\": null}}, "
    "\"bias_initializer\": {\"class_name\": \"Zeros\", \"config\": {}}, "
    "\"kernel_regularizer\": null, \"bias_regularizer\": null, "
    "\"activity_regularizer\": null, \"kernel_constraint\": null, "
    "\"bias_constraint\": null}}, {\"class_name\": \"Activation\", "
    "\"config\": {\"name\": \"activation_1\", \"trainable\": true, "
    "\"dtype\": \"float32\", \"activation\": \"softmax\"}}]}, "
    "\"keras_version\": \"2.6.0\", \"backend\": \"tensorflow\"}";

/* Keras 3's model.to_json() of the cifar recipe after compile: module and
 * registered_name on every object, DTypePolicy dtypes, build_config. */
static const char cifar_keras3[] =
    "{\"module\": \"keras\", \"class_name\": \"Sequential\", "
    "\"config\": {\"name\": \"sequential\", \"trainable\": true, "
    "\"dtype\": {\"module\": \"keras\", \"class_name\": \"DTypePolicy\", "
    "\"config\": {\"name\": \"float32\"}, \"registered_name\": null}, "
    "\"layers\": [{\"module\": \"keras.layers\", "
    "\"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 32, "
    "32, 3], \"dtype\": \"float32\", \"sparse\": false, "
    "\"name\": \"input_layer\"}, \"registered_name\": null}, "
    "{\"module\": \"keras.layers\", \"class_name\": \"BatchNormalization\", "
    "\"config\": {\"name\": \"batch_normalization\", \"trainable\": true, "
    "\"dtype\": {\"module\": \"keras\", \"class_name\": \"DTypePolicy\", "
    "\"config\": {\"name\": \"float32\"}, \"registered_name\": null}, "
    "\"axis\": -1, \"momentum\": 0.99, \"epsilon\": 0.001, \"center\": true, "
    "\"scale\": true, "
    "\"beta_initializer\": {\"module\": \"keras.initializers\", "
    "\"class_name\": \"Zeros\", \"config\": {}, \"registered_name\": null}, "
    "\"gamma_initializer\": {\"module\": \"keras.initializers\", "
    "\"class_name\": \"Ones\", \"config\": {}, \"registered_name\": null}, "
    "\"moving_mean_initializer\": {\"module\": \"keras.initializers\", "
    "\"class_name\": \"Zeros\", \"config\": {}, \"registered_name\": null}, "
    "\"moving_variance_initializer\": {\"module\": \"keras.initializers\", "
    "\"class_name\": \"Ones\", \"config\": {}, \"registered_name\": null}, "
    "\"beta_regularizer\": null, \"gamma_regularizer\": null, "
    "\"beta_constraint\": null, \"gamma_constraint\": null, "
    "\"synchronized\": false}, \"registered_name\": null, "
    "\"build_config\": {\"input_shape\": [null, 32, 32, 3]}}, "
    "{\"module\": \"keras.layers\", \"class_name\": \"Conv2D\", "
    "\"config\": {\"name\": \"conv2d\", \"trainable\": true, "
    "\"dtype\": {\"module\": \"keras\", \"class_name\": \"DTypePolicy\", "
    "\"config\": {\"name\": \"float32\"}, \"registered_name\": null}, "
    "\"filters\": 32, \"kernel_size\": [3, 3], \"strides\": [1, 1], "
    "\"padding\": \"same\", \"data_format\": \"channels_last\", "
    "\"dilation_rate\": [1, 1], \"groups\": 1, \"activation\": \"relu\", "
    "\"use_bias\": true, "
    "\"kernel_initializer\": {\"module\": \"keras.initializers\", "
    "\"class_name\": \"GlorotUniform\", \"config\": {\"seed\": null}, "
    "\"registered_name\": null}, "
    "\"bias_initializer\": {\"module\": \"keras.initializers\", "
    "\"class_name\": \"Zeros\", \"config\": {}, \"registered_name\": null}, "
    "\"kernel_regularizer\": null, \"bias_regularizer\": null, "
    "\"activity_regularizer\": null, \"kernel_constraint\": null, "
    "\"bias_constraint\": null}, \"registered_name\": null, "
    "\"build_config\": {\"input_shape\": [null, 32, 32, 3]}}, "
    "{\"module\": \"keras.layers\", \"class_name\": \"Conv2D\", "
    "\"config\": {\"name\": \"conv2d_1\", \"trainable\": true, "
    "\"dtype\": {\"module\": \"keras\", \"class_name\": \"DTypePolicy\", "
    "\"config\": {\"name\": \"float32\"}, \"registered_name\": null}, "
    "\"filters\": 32, \"kernel_size\": [3, 3], \"strides\": [1, 1], "
    "\"padding\": \"same\", \"data_format\": \"channels_last\", "
    "\"dilation_rate\": [1, 1], \"groups\": 1, \"activation\": \"relu\", "
    "\"use_bias\": true, "
    "\"kernel_initializer\": {\"module\": \"keras.initializers\", "
    "\"class_name\": \"GlorotUniform\", \"config\": {\"seed\": null}, "
    "\"registered_name\": null}, "
    "\"bias_initializer\": {\"module\": \"keras.initializers\", "
    "\"class_name\": \"Zeros\", \"config\": {}, \"registered_name\": null}, "
    "\"kernel_regularizer\": null, \"bias_regularizer\": null, "
    "\"activity_regularizer\": null, \"kernel_constraint\": null, "
    "\"bias_constraint\": null}, \"registered_name\": null, "
    "\"build_config\": {\"input_shape\": [null, 32, 32, 32]}}, "
    "{\"module\": \"keras.layers\", \"class_name\": \"MaxPooling2D\", "
    "\"config\": {\"name\": \"max_pooling2d\", \"trainable\": true, "
    "\"dtype\": {\"module\": \"keras\", \"class_name\": \"DTypePolicy\", "
    "\"config\": {\"name\": \"float32\"}, \"registered_name\": null}, "
    "\"pool_size\": [2, 2], \"padding\": \"valid\", \"strides\": [2, 2], "
    "\"data_format\": \"channels_last\"}, \"registered_name\": null, "
    "\"build_config\": {\"input_shape\": [null, 32, 32, 32]}}, "
    "{\"module\": \"keras.layers\", \"class_name\": \"Dropout\", "
    "\"config\": {\"name\": \"dropout\", \"trainable\": true, "
    "\"dtype\": {\"module\": \"keras\", \"class_name\": \"DTypePolicy\", "
    "\"config\": {\"name\": \"float32\"}, \"registered_name\": null}, "
    "\"rate\": 0.25, \"seed\": null, \"noise_shape\": null}, "
    "\"registered_name\": null, \"build_config\": {\"input_shape\": [null, 16, "
    "16, 32]}}, {\"module\": \"keras.layers\", "
    "\"class_name\": \"BatchNormalization\", "
    "\"config\": {\"name\": \"batch_normalization_1\", \"trainable\": true, "
    "\"dtype\": {\"module\": \"keras\", \"class_name\": \"DTypePolicy\", "
    "\"config\": {\"name\": \"float32\"}, \"registered_name\": null}, "
    "\"axis\": -1, \"momentum\": 0.99, \"epsilon\": 0.001, \"center\": true, "
    "\"scale\": true, "
    "\"beta_initializer\": {\"module\": \"keras.initializers\", "
    "\"class_name\": \"Zeros\", \"config\": {}, \"registered_name\": null}, "
    "\"gamma_initializer\": {\"module\": \"keras.initializers\", "
    "\"class_name\": \"Ones\", \"config\": {}, \"registered_name\": null}, "
    "\"moving_mean_initializer\": {\"module\": \"keras.initializers\", "
    "\"class_name\": \"Zeros\", \"config\": {}, \"registered_name\": null}, "
    "\"moving_variance_initializer\": {\"module\": \"keras.initializers\", "
    "\"class_name\": \"Ones\", \"config\": {}, \"registered_name\": null}, "
    "\"beta_regularizer\": null, \"gamma_regularizer\": null, "
    "\"beta_constraint\": null, \"gamma_constraint\": null, "
    "\"synchronized\": false}, \"registered_name\": null, "
    "\"build_config\": {\"input_shape\": [null, 16, 16, 32]}}, "
    "{\"module\": \"keras.layers\", \"class_name\": \"Conv2D\", "
    "\"config\": {\"name\": \"conv2d_2\", \"trainable\": true, "
    "\"dtype\": {\"module\": \"keras\", \"class_name\": \"DTypePolicy\", "
    "\"config\": {\"name\": \"float32\"}, \"registered_name\": null}, "
    "\"filters\": 64, \"kernel_size\": [3, 3], \"strides\": [1, 1], "
    "\"padding\": \"same\", \"data_format\": \"channels_last\", "
    "\"dilation_rate\": [1, 1], \"groups\": 1, \"activation\": \"relu\", "
    "\"use_bias\": true, "
    "\"kernel_initializer\": {\"module\": \"keras.initializers\", "
    "\"class_name\": \"GlorotUniform\", \"config\": {\"seed\": null}, "
    "\"registered_name\": null}, "
    "\"bias_initializer\": {\"module\": \"keras.initializers\", "
    "\"class_name\": \"Zeros\", \"config\": {}, \"registered_name\": null}, "
    "\"kernel_regularizer\": null, \"bias_regularizer\": null, "
    "\"activity_regularizer\": null, \"kernel_constraint\": null, "
    "\"bias_constraint\": null}, \"registered_name\": null, "
    "\"build_config\": {\"input_shape\": [null, 16, 16, 32]}}, "
    "{\"module\": \"keras.layers\", \"class_name\": \"Conv2D\", "
    "\"config\": {\"name\": \"conv2d_3\", \"trainable\": true, "
    "\"dtype\": {\"module\": \"keras\", \"class_name\": \"DTypePolicy\", "
    "\"config\": {\"name\": \"float32\"}, \"registered_name\": null}, "
    "\"filters\": 64, \"kernel_size\": [3, 3], \"strides\": [1, 1], "
    "\"padding\": \"valid\", \"data_format\": \"channels_last\", "
    "\"dilation_rate\": [1, 1], \"groups\": 1, \"activation\": \"relu\", "
    "\"use_bias\": true, "
    "\"kernel_initializer\": {\"module\": \"keras.initializers\", "
    "\"class_name\": \"GlorotUniform\", \"config\": {\"seed\": null}, "
    "\"registered_name\": null}, "
    "\"bias_initializer\": {\"module\": \"keras.initializers\", "
    "\"class_name\": \"Zeros\", \"config\": {}, \"registered_name\": null}, "
    "\"kernel_regularizer\": null, \"bias_regularizer\": null, "
    "\"activity_regularizer\": null, \"kernel_constraint\": null, "
    "\"bias_constraint\": null}, \"registered_name\": null, "
    "\"build_config\": {\"input_shape\": [null, 16, 16, 64]}}, "
    "{\"module\": \"keras.layers\", \"class_name\": \"MaxPooling2D\", "
    "\"config\": {\"name\": \"max_pooling2d_1\", \"trainable\": true, "
    "\"dtype\": {\"module\": \"keras\", \"class_name\": \"DTypePolicy\", "
    "\"config\": {\"name\": \"float32\"}, \"registered_name\": null}, "
    "\"pool_size\": [2, 2], \"padding\": \"valid\", \"strides\": [2, 2], "
    "\"data_format\": \"channels_last\"}, \"registered_name\": null, "
    "\"build_config\": {\"input_shape\": [null, 14, 14, 64]}}, "
    "{\"module\": \"keras.layers\", \"class_name\": \"Dropout\", "
    "\"config\": {\"name\": \"dropout_1\", \"trainable\": true, "
    "\"dtype\": {\"module\": \"keras\", \"class_name\": \"DTypePolicy\", "
    "\"config\": {\"name\": \"float32\"}, \"registered_name\": null}, "
    "\"rate\": 0.25, \"seed\": null, \"noise_shape\": null}, "
    "\"registered_name\": null, \"build_config\": {\"input_shape\": [null, 7, "
    "7, 64]}}, {\"module\": \"keras.layers\", \"class_name\": \"Flatten\", "
    "\"config\": {\"name\": \"flatten\", \"trainable\": true, "
    "\"dtype\": {\"module\": \"keras\", \"class_name\": \"DTypePolicy\", "
    "\"config\": {\"name\": \"float32\"}, \"registered_name\": null}, "
    "\"data_format\": \"channels_last\"}, \"registered_name\": null, "
    "\"build_config\": {\"input_shape\": [null, 7, 7, 64]}}, "
    "{\"module\": \"keras.layers\", \"class_name\": \"Dense\", "
    "\"config\": {\"name\": \"dense\", \"trainable\": true, "
    "\"dtype\": {\"module\": \"keras\", \"class_name\": \"DTypePolicy\", "
    "\"config\": {\"name\": \"float32\"}, \"registered_name\": null}, "
    "\"units\": 512, \"activation\": \"relu\", \"use_bias\": true, "
    "\"kernel_initializer\": {\"module\": \"keras.initializers\", "
    "\"class_name\": \"GlorotUniform\", \"config\": {\"seed\": null}, "
    "\"registered_name\": null}, "
    "\"bias_initializer\": {\"module\": \"keras.initializers\", "
    "\"class_name\": \"Zeros\", \"config\": {}, \"registered_name\": null}, "
    "\"kernel_regularizer\": null, \"bias_regularizer\": null, "
    "\"kernel_constraint\": null, \"bias_constraint\": null}, "
    "\"registered_name\": null, \"build_config\": {\"input_shape\": [null, "
    "3136]}}, {\"module\": \"keras.layers\", \"class_name\": \"Dropout\", "
    "\"config\": {\"name\": \"dropout_2\", \"trainable\": true, "
    "\"dtype\": {\"module\": \"keras\", \"class_name\": \"DTypePolicy\", "
    "\"config\": {\"name\": \"float32\"}, \"registered_name\": null}, "
    "\"rate\": 0.5, \"seed\": null, \"noise_shape\": null}, "
    "\"registered_name\": null, \"build_config\": {\"input_shape\": [null, "
    "512]}}, {\"module\": \"keras.layers\", \"class_name\": \"Dense\", "
    "\"config\": {\"name\": \"dense_1\", \"trainable\": true, "
    "\"dtype\": {\"module\": \"keras\", \"class_name\": \"DTypePolicy\", "
    "\"config\": {\"name\": \"float32\"}, \"registered_name\": null}, "
    "\"units\": 10, \"activation\": \"softmax\", \"use_bias\": true, "
    "\"kernel_initializer\": {\"module\": \"keras.initializers\", "
    "\"class_name\": \"GlorotUniform\", \"config\": {\"seed\": null}, "
    "\"registered_name\": null}, "
    "\"bias_initializer\": {\"module\": \"keras.initializers\", "
    "\"class_name\": \"Zeros\", \"config\": {}, \"registered_name\": null}, "
    "\"kernel_regularizer\": null, \"bias_regularizer\": null, "
    "\"kernel_constraint\": null, \"bias_constraint\": null}, "
    "\"registered_name\": null, \"build_config\": {\"input_shape\": [null, "
    "512]}}], \"build_input_shape\": [null, 32, 32, 3]}, "
    "\"registered_name\": null, \"build_config\": {\"input_shape\": [null, 32, "
    "32, 3]}, "
    "\"compile_config\": {\"optimizer\": {\"module\": \"keras.optimizers\", "
    "\"class_name\": \"Adam\", \"config\": {\"name\": \"adam\", "
    "\"learning_rate\": 0.0010000000474974513, \"weight_decay\": null, "
    "\"clipnorm\": null, \"global_clipnorm\": null, \"clipvalue\": null, "
    "\"use_ema\": false, \"ema_momentum\": 0.99, "
    "\"ema_overwrite_frequency\": null, \"loss_scale_factor\": null, "
    "\"gradient_accumulation_steps\": null, \"beta_1\": 0.9, "
    "\"beta_2\": 0.999, \"epsilon\": 1e-07, \"amsgrad\": false}, "
    "\"registered_name\": null}, "
    "\"loss\": \"sparse_categorical_crossentropy\", \"loss_weights\": null, "
    "\"metrics\": [\"sparse_categorical_accuracy\"], "
    "\"weighted_metrics\": null, \"run_eagerly\": false, "
    "\"steps_per_execution\": 1, \"jit_compile\": false}}";

/* ---- helpers ------------------------------------------------------------
 */

static char *summary_of(const mxu_model *model) {
  char *text = NULL;
  size_t size = 0;
  FILE *f = open_memstream(&text, &size);
  if (!f) return NULL;
  mxu_summary(model, f);
  fclose(f);
  return text;
}

static mxu_model *read_json(const char *json, mxu_compile_config *compile,
                            int *has_compile) {
  mxu_model *model = NULL;
  mxu_status s =
      mxu_model_from_json(json, "test.json", &model, compile, has_compile);
  CHECK_MSG(s == MXU_OK, "from_json: %s: %s", mxu_status_name(s), mxu_errmsg());
  return model;
}

static char *write_json(const mxu_model *model, int keras3) {
  char *text = NULL;
  CHECK_OK(mxu_model_to_json(model, keras3, &text));
  return text;
}

/* The status and every needle in the message. */
static void expect_fail_at(int line, const char *json, mxu_status want,
                           const char *needle, const char *needle2) {
  mxu_model *model = (mxu_model *)1;
  mxu_compile_config compile = mxu_compile_defaults();
  mxu_status got =
      mxu_model_from_json(json, "test.json", &model, &compile, NULL);
  CHECK_MSG(got == want, "line %d: got %s, want %s (%s)", line,
            mxu_status_name(got), mxu_status_name(want), mxu_errmsg());
  CHECK_MSG(model == NULL, "line %d: *out must be NULL on failure", line);
  CHECK_MSG(has(mxu_errmsg(), "test.json"), "line %d: '%s' lacks the source",
            line, mxu_errmsg());
  CHECK_MSG(!needle || has(mxu_errmsg(), needle),
            "line %d: message '%s' lacks '%s'", line, mxu_errmsg(), needle);
  CHECK_MSG(!needle2 || has(mxu_errmsg(), needle2),
            "line %d: message '%s' lacks '%s'", line, mxu_errmsg(), needle2);
  mxu_model_free(got == MXU_OK ? model : NULL);
}

#define EXPECT_JSON_FAIL(json, want, needle, needle2)                          \
  expect_fail_at(__LINE__, json, want, needle, needle2)

/* A tf.keras 2.x Sequential: an InputLayer of the given shape, then the
 * given layer entries. */
static const char *model_with(const char *input_shape, const char *layers) {
  static char text[8192];
  snprintf(text, sizeof text,
           "{\"class_name\": \"Sequential\", \"config\": {\"name\": "
           "\"sequential\", \"layers\": [{\"class_name\": \"InputLayer\", "
           "\"config\": {\"batch_input_shape\": %s, \"dtype\": \"float32\", "
           "\"name\": \"input_1\"}}%s%s]}}",
           input_shape, layers[0] ? ", " : "", layers);
  return text;
}

static const char *image_model(const char *layers) {
  return model_with("[null, 28, 28, 1]", layers);
}

/* Input (4,) -> Dense(3), with the given compile section. */
static const char *compiled_with(const char *key, const char *compile) {
  static char text[8192];
  snprintf(text, sizeof text,
           "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"s\", "
           "\"layers\": [{\"class_name\": \"InputLayer\", \"config\": "
           "{\"batch_input_shape\": [null, 4], \"name\": \"in\"}}, "
           "{\"class_name\": \"Dense\", \"config\": {\"name\": \"dense\", "
           "\"units\": 3}}]}, \"%s\": %s}",
           key, compile);
  return text;
}

static const char *class_of(const mxu_model *model, int layer) {
  return LAYER(model, layer)->cls->class_name;
}

static int shape_is(mxu_shape s, int rank, int64_t a, int64_t b, int64_t c) {
  int64_t want[3] = {a, b, c};
  if (s.rank != rank) return 0;
  for (int i = 0; i < rank; i++)
    if (s.dims[i] != want[i]) return 0;
  return 1;
}

static int node_named(const mxu_model *m, const char *name) {
  for (int i = 0; i < m->layer_count; i++)
    if (strcmp(m->layers[i].name, name) == 0) return i;
  return 0;
}

/* ---- reading real files ---------------------------------------------------
 */

static void reads_tf_keras_2(void) {
  int has_compile = 7;
  mxu_compile_config compile = mxu_compile_defaults();
  compile.batch_size = 1000;
  mxu_model *m = read_json(fashion_keras26, &compile, &has_compile);
  if (!m) return;
  static const char *const names[] = {"conv2d",     "max_pooling2d",
                                      "activation", "flatten",
                                      "dense",      "activation_1"};
  static const char *const classes[] = {
      "Conv2D", "MaxPooling2D", "Activation", "Flatten", "Dense", "Activation"};
  CHECK(mxu_model_layer_count(m) == 6);
  for (int i = 0; i < 6 && i < mxu_model_layer_count(m); i++) {
    CHECK_MSG(strcmp(mxu_model_layer_name(m, i), names[i]) == 0, "layer %d: %s",
              i, mxu_model_layer_name(m, i));
    CHECK(strcmp(class_of(m, i), classes[i]) == 0);
  }
  CHECK(strcmp(m->name, "sequential") == 0);
  CHECK(strcmp(mxu_model_input(m)->name, "conv2d_input") == 0);
  CHECK(shape_is(mxu_model_input(m)->out_shape, 3, 28, 28, 1));
  CHECK(shape_is(mxu_model_layer_shape(m, 0), 3, 26, 26, 64));
  CHECK(shape_is(mxu_model_layer_shape(m, 1), 3, 13, 13, 64));
  CHECK(shape_is(mxu_model_layer_shape(m, 3), 1, 10816, 0, 0));
  CHECK(shape_is(mxu_model_layer_shape(m, 5), 1, 10, 0, 0));
  CHECK(mxu_model_param_count(m, 1) == 108810);
  CHECK(mxu_model_param_count(m, 0) == 0);
  const mxu_conv2d_config *conv = &LAYER(m, 0)->config.conv;
  CHECK(conv->filters == 64 && conv->kernel_size[0] == 3 &&
        conv->kernel_size[1] == 3 && conv->strides[0] == 1 &&
        conv->padding == MXU_VALID && conv->activation == MXU_LINEAR &&
        conv->use_bias);
  CHECK(LAYER(m, 1)->is_max_pool && LAYER(m, 1)->config.pool.strides[0] == 2);
  CHECK(LAYER(m, 2)->config.activation == MXU_RELU);
  CHECK(LAYER(m, 5)->config.activation == MXU_SOFTMAX);
  /* No compile section: the caller's settings stay as they were. */
  CHECK(has_compile == 0);
  CHECK(compile.batch_size == 1000 && compile.loss == 0 &&
        compile.metrics[0] == NULL);
  mxu_model_free(m);
}

/* Keras 3's text from a heap copy that is gone before the checks, so
 * compile.metrics[0] must not point into it (ASan would see that). */
static void reads_keras_3(void) {
  char *copy = strdup(cifar_keras3);
  int has_compile = 0;
  mxu_compile_config compile = mxu_compile_defaults();
  compile.optimizer = mxu_sgd(0.5f, 0.5f, 1);
  compile.loss = MXU_CATEGORICAL_CROSSENTROPY;
  mxu_model *m = read_json(copy, &compile, &has_compile);
  free(copy);
  if (!m) return;
  static const char *const names[] = {"batch_normalization",
                                      "conv2d",
                                      "conv2d_1",
                                      "max_pooling2d",
                                      "dropout",
                                      "batch_normalization_1",
                                      "conv2d_2",
                                      "conv2d_3",
                                      "max_pooling2d_1",
                                      "dropout_1",
                                      "flatten",
                                      "dense",
                                      "dropout_2",
                                      "dense_1"};
  CHECK(mxu_model_layer_count(m) == 14);
  for (int i = 0; i < 14 && i < mxu_model_layer_count(m); i++)
    CHECK_MSG(strcmp(mxu_model_layer_name(m, i), names[i]) == 0, "layer %d: %s",
              i, mxu_model_layer_name(m, i));
  CHECK(strcmp(mxu_model_input(m)->name, "input_layer") == 0);
  CHECK(strcmp(class_of(m, 0), "BatchNormalization") == 0);
  CHECK(strcmp(class_of(m, 4), "Dropout") == 0);
  CHECK(shape_is(mxu_model_layer_shape(m, 2), 3, 32, 32, 32));
  CHECK(shape_is(mxu_model_layer_shape(m, 7), 3, 14, 14, 64));
  CHECK(shape_is(mxu_model_layer_shape(m, 10), 1, 3136, 0, 0));
  CHECK(shape_is(mxu_model_layer_shape(m, 13), 1, 10, 0, 0));
  /* BN(3) 12 + 896 + 9248 + BN(32) 128 + 18496 + 36928 + 1606144 + 5130;
   * the moving statistics (2 * (3 + 32)) are not trainable. */
  CHECK(mxu_model_param_count(m, 1) + mxu_model_param_count(m, 0) == 1676982);
  CHECK(mxu_model_param_count(m, 0) == 70);
  const mxu_batchnorm_config *bn = &LAYER(m, 0)->config.batchnorm;
  CHECK(bn->momentum == 0.99f && bn->epsilon == 0.001f && bn->center &&
        bn->scale);
  CHECK(LAYER(m, 4)->config.dropout.rate == 0.25f);
  CHECK(LAYER(m, 2)->config.conv.padding == MXU_SAME);
  CHECK(LAYER(m, 7)->config.conv.padding == MXU_VALID);
  CHECK(LAYER(m, 13)->config.dense.activation == MXU_SOFTMAX);
  CHECK(has_compile == 1);
  CHECK(compile.optimizer.kind == MXU_ADAM);
  CHECK(compile.optimizer.learning_rate == 1e-3f);
  CHECK(compile.optimizer.beta_1 == 0.9f &&
        compile.optimizer.beta_2 == 0.999f &&
        compile.optimizer.epsilon == 1e-7f);
  CHECK(compile.loss == MXU_SPARSE_CATEGORICAL_CROSSENTROPY);
  CHECK(compile.from_logits == 0);
  CHECK(compile.metrics[0] &&
        strcmp(compile.metrics[0], "sparse_categorical_accuracy") == 0);
  mxu_model_free(m);
}

/* Every activation name Keras writes, in a Dense layer and an Activation
 * layer; hard_sigmoid as the Keras version that wrote the file meant it;
 * each written back under a name that reads as the same activation. */
static void reads_activation_names(void) {
  static const struct {
    const char *name;
    mxu_activation keras3, keras2;
  } names[] = {
      {"linear", MXU_LINEAR, MXU_LINEAR},
      {"relu6", MXU_RELU6, MXU_RELU6},
      {"leaky_relu", MXU_LEAKY_RELU, MXU_LEAKY_RELU},
      {"elu", MXU_ELU, MXU_ELU},
      {"selu", MXU_SELU, MXU_SELU},
      {"gelu", MXU_GELU, MXU_GELU},
      {"silu", MXU_SILU, MXU_SILU},
      {"swish", MXU_SILU, MXU_SILU},
      {"softplus", MXU_SOFTPLUS, MXU_SOFTPLUS},
      {"softsign", MXU_SOFTSIGN, MXU_SOFTSIGN},
      {"hard_sigmoid", MXU_HARD_SIGMOID, MXU_HARD_SIGMOID_TF2},
      {"hard_silu", MXU_HARD_SILU, MXU_HARD_SILU},
      {"hard_swish", MXU_HARD_SILU, MXU_HARD_SILU},
      {"exponential", MXU_EXPONENTIAL, MXU_EXPONENTIAL},
      {"mish", MXU_MISH, MXU_MISH},
      {"celu", MXU_CELU, MXU_CELU},
      {"hard_tanh", MXU_HARD_TANH, MXU_HARD_TANH},
      {"log_sigmoid", MXU_LOG_SIGMOID, MXU_LOG_SIGMOID},
      {"tanh_shrink", MXU_TANH_SHRINK, MXU_TANH_SHRINK},
      {"squareplus", MXU_SQUAREPLUS, MXU_SQUAREPLUS},
      {"sparse_plus", MXU_SPARSE_PLUS, MXU_SPARSE_PLUS},
      {"sparse_sigmoid", MXU_SPARSE_SIGMOID, MXU_SPARSE_SIGMOID},
      {"soft_shrink", MXU_SOFT_SHRINK, MXU_SOFT_SHRINK},
      {"hard_shrink", MXU_HARD_SHRINK, MXU_HARD_SHRINK},
      {"log_softmax", MXU_LOG_SOFTMAX, MXU_LOG_SOFTMAX},
  };
  for (size_t i = 0; i < sizeof names / sizeof *names; i++)
    for (int keras2 = 0; keras2 < 2; keras2++) {
      char json[1024];
      snprintf(json, sizeof json,
               "{\"class_name\": \"Sequential\", \"config\": {\"name\": "
               "\"m\", \"layers\": [{\"class_name\": \"InputLayer\", "
               "\"config\": {\"batch_input_shape\": [null, 4]}}, "
               "{\"class_name\": \"Dense\", \"config\": {\"units\": 3, "
               "\"activation\": \"%s\"}}, {\"class_name\": \"Activation\", "
               "\"config\": {\"activation\": \"%s\"}}]}, "
               "\"keras_version\": \"%s\"}",
               names[i].name, names[i].name, keras2 ? "2.15.0" : "3.6.0");
      mxu_model *m = read_json(json, NULL, NULL);
      if (!m) continue;
      mxu_activation want = keras2 ? names[i].keras2 : names[i].keras3;
      CHECK_MSG(LAYER(m, 0)->config.dense.activation == want &&
                    LAYER(m, 1)->config.activation == want,
                "%s (keras %d)", names[i].name, keras2 ? 2 : 3);
      char *text = NULL;
      CHECK_OK(mxu_model_to_json(m, !keras2, &text));
      mxu_model *back = text ? read_json(text, NULL, NULL) : NULL;
      if (back)
        CHECK_MSG(LAYER(back, 1)->config.activation == want, "%s written",
                  names[i].name);
      mxu_model_free(back);
      free(text);
      mxu_model_free(m);
    }
}

/* RandomContrast as each Keras writes it: tf.keras 2's factor 0.2 is
 * contrast in [0.8, 1.2], Keras 3's own (0, 0.2) [1, 1.2]. */
static void reads_random_contrast(void) {
  static const struct {
    const char *config;
    float a, b, low, high;
  } cases[] = {
      {"\"factor\": 0.2, \"seed\": null, \"rng_type\": \"stateful\"", 0.2f,
       0.2f, 0.0f, 255.0f},
      {"\"factor\": [0, 0.2], \"value_range\": [0, 1], \"seed\": null, "
       "\"data_format\": \"channels_last\"",
       0.0f, 0.2f, 0.0f, 1.0f},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char json[1024];
    snprintf(json, sizeof json,
             "{\"class_name\": \"Sequential\", \"config\": {\"name\": "
             "\"m\", \"layers\": [{\"class_name\": \"InputLayer\", "
             "\"config\": {\"batch_input_shape\": [null, 4, 4, 3]}}, "
             "{\"class_name\": \"RandomContrast\", \"config\": {%s}}]}}",
             cases[i].config);
    mxu_model *m = read_json(json, NULL, NULL);
    if (!m) continue;
    const mxu_random_config *r = &LAYER(m, 0)->config.random;
    CHECK_MSG(r->kind == MXU_RANDOM_CONTRAST && r->factor[0] == cases[i].a &&
                  r->factor[1] == cases[i].b &&
                  r->value_range[0] == cases[i].low &&
                  r->value_range[1] == cases[i].high,
              "case %zu: factor (%g, %g), range (%g, %g)", i,
              (double)r->factor[0], (double)r->factor[1],
              (double)r->value_range[0], (double)r->value_range[1]);
    mxu_model_free(m);
  }
}

/* Older tf.keras writes no InputLayer: the first layer carries
 * batch_input_shape, and Keras names the input after it. */
static void reads_without_input_layer(void) {
  const char *json =
      "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"mlp\", "
      "\"layers\": [{\"class_name\": \"Dense\", \"config\": {\"name\": "
      "\"hidden\", \"trainable\": true, \"batch_input_shape\": [null, 784], "
      "\"dtype\": \"float32\", \"units\": 32, \"activation\": \"relu\", "
      "\"use_bias\": false}}, {\"class_name\": \"Dense\", \"config\": "
      "{\"name\": \"out\", \"units\": 10, \"activation\": null}}]}, "
      "\"keras_version\": \"2.2.4\", \"backend\": \"tensorflow\"}";
  mxu_model *m = read_json(json, NULL, NULL);
  if (!m) return;
  CHECK(strcmp(m->name, "mlp") == 0);
  CHECK(strcmp(mxu_model_input(m)->name, "hidden_input") == 0);
  CHECK(shape_is(mxu_model_input(m)->out_shape, 1, 784, 0, 0));
  CHECK(mxu_model_layer_count(m) == 2);
  CHECK(LAYER(m, 0)->config.dense.use_bias == 0);
  CHECK(LAYER(m, 1)->config.dense.activation == MXU_LINEAR);
  CHECK(mxu_model_param_count(m, 1) == 784 * 32 + 32 * 10 + 10);
  mxu_model_free(m);

  /* Keras 3 keeps the shape at the model level too. */
  const char *keras3 =
      "{\"module\": \"keras\", \"class_name\": \"Sequential\", \"config\": "
      "{\"name\": \"s\", \"layers\": [{\"module\": \"keras.layers\", "
      "\"class_name\": \"Flatten\", \"config\": {\"name\": \"flatten\"}, "
      "\"registered_name\": null}], \"build_input_shape\": [null, 4, 4, 2]}, "
      "\"registered_name\": null}";
  m = read_json(keras3, NULL, NULL);
  if (m) CHECK(shape_is(mxu_model_layer_shape(m, 0), 1, 32, 0, 0));
  mxu_model_free(m);
}

/* Ints for pairs, null strides on a pool, aliases and harmless keys. */
static void reads_keras_variants(void) {
  mxu_model *m = read_json(
      image_model(
          "{\"class_name\": \"Convolution2D\", \"config\": {\"name\": \"c\", "
          "\"filters\": 4, \"kernel_size\": 5, \"strides\": 2, \"padding\": "
          "\"SAME\", \"data_format\": null, \"dilation_rate\": 1, "
          "\"kernel_initializer\": \"glorot_uniform\", \"bias_initializer\": "
          "\"zeros\", \"lora_rank\": null, \"seed\": null}}, "
          "{\"class_name\": \"AvgPool2D\", \"config\": {\"name\": \"p\", "
          "\"pool_size\": 3, \"strides\": null}}, "
          "{\"class_name\": \"BatchNormalization\", \"config\": {\"name\": "
          "\"bn\", \"axis\": 3, \"momentum\": 0.9, \"center\": false, "
          "\"renorm\": false, \"synchronized\": false}}"),
      NULL, NULL);
  if (!m) return;
  CHECK(LAYER(m, 0)->config.conv.kernel_size[1] == 5);
  CHECK(LAYER(m, 0)->config.conv.strides[0] == 2);
  CHECK(LAYER(m, 0)->config.conv.padding == MXU_SAME);
  CHECK(shape_is(mxu_model_layer_shape(m, 0), 3, 14, 14, 4));
  CHECK(strcmp(class_of(m, 1), "AveragePooling2D") == 0);
  CHECK(LAYER(m, 1)->config.pool.strides[1] == 3);
  CHECK(shape_is(mxu_model_layer_shape(m, 1), 3, 4, 4, 4));
  CHECK(LAYER(m, 2)->config.batchnorm.momentum == 0.9f);
  CHECK(LAYER(m, 2)->config.batchnorm.center == 0);
  mxu_model_free(m);
}

/* ---- round trips ----------------------------------------------------------
 */

/* Every configured field, class by class (names are compared by the
 * summaries). */
static int same_config(const mxu_layer *a, const mxu_layer *b) {
  if (a->cls != b->cls || a->is_max_pool != b->is_max_pool) return 0;
  const char *cls = a->cls->class_name;
  if (strcmp(cls, "Conv2D") == 0) {
    const mxu_conv2d_config *x = &a->config.conv, *y = &b->config.conv;
    return x->filters == y->filters && x->kernel_size[0] == y->kernel_size[0] &&
           x->kernel_size[1] == y->kernel_size[1] &&
           x->strides[0] == y->strides[0] && x->strides[1] == y->strides[1] &&
           x->padding == y->padding && x->activation == y->activation &&
           x->use_bias == y->use_bias;
  }
  if (strcmp(cls, "Conv1D") == 0) {
    const mxu_conv2d_config *x = &a->config.conv, *y = &b->config.conv;
    return x->filters == y->filters && x->kernel_size[1] == y->kernel_size[1] &&
           x->strides[1] == y->strides[1] &&
           x->dilation_rate[1] == y->dilation_rate[1] &&
           x->groups == y->groups && x->padding == y->padding &&
           x->activation == y->activation && x->use_bias == y->use_bias;
  }
  if (strcmp(cls, "Embedding") == 0)
    return a->config.embedding.input_dim == b->config.embedding.input_dim &&
           a->config.embedding.output_dim == b->config.embedding.output_dim;
  if (strcmp(cls, "InputLayer") == 0)
    return a->config.input_dtype == b->config.input_dtype;
  if (strstr(cls, "Pooling2D") || strstr(cls, "Pooling1D")) {
    const mxu_pool2d_config *x = &a->config.pool, *y = &b->config.pool;
    return x->pool_size[0] == y->pool_size[0] &&
           x->pool_size[1] == y->pool_size[1] &&
           x->strides[0] == y->strides[0] && x->strides[1] == y->strides[1] &&
           x->padding == y->padding;
  }
  if (strcmp(cls, "Dense") == 0)
    return a->config.dense.units == b->config.dense.units &&
           a->config.dense.activation == b->config.dense.activation &&
           a->config.dense.use_bias == b->config.dense.use_bias;
  if (strcmp(cls, "BatchNormalization") == 0) {
    const mxu_batchnorm_config *x = &a->config.batchnorm,
                               *y = &b->config.batchnorm;
    return x->momentum == y->momentum && x->epsilon == y->epsilon &&
           x->center == y->center && x->scale == y->scale;
  }
  if (strcmp(cls, "Dropout") == 0)
    return a->config.dropout.rate == b->config.dropout.rate;
  if (strcmp(cls, "Normalization") == 0) {
    const mxu_normalization_config *x = &a->config.normalization,
                                   *y = &b->config.normalization;
    int same = x->invert == y->invert && x->given == y->given;
    for (int i = 0; same && i < x->given; i++)
      same = x->mean[i] == y->mean[i] && x->variance[i] == y->variance[i];
    return same;
  }
  if (strcmp(cls, "Activation") == 0)
    return a->config.activation == b->config.activation;
  return 1;
}

static void round_trip_text(const char *label, const mxu_model *original,
                            int keras3) {
  char *first = write_json(original, keras3);
  mxu_model *again = first ? read_json(first, NULL, NULL) : NULL;
  char *second = again ? write_json(again, keras3) : NULL;
  CHECK_MSG(first && second && strcmp(first, second) == 0,
            "%s keras3=%d: written texts differ", label, keras3);
  char *a = summary_of(original), *b = again ? summary_of(again) : NULL;
  CHECK_MSG(a && b && strcmp(a, b) == 0,
            "%s keras3=%d: summaries differ:\n%s\n%s", label, keras3, a, b);
  CHECK(again &&
        mxu_model_param_count(again, 1) == mxu_model_param_count(original, 1));
  CHECK(again &&
        mxu_model_param_count(again, 0) == mxu_model_param_count(original, 0));
  CHECK(again && strcmp(mxu_model_input(again)->name,
                        mxu_model_input(original)->name) == 0);
  for (int i = 0; again && i < original->layer_count; i++)
    CHECK_MSG(i < again->layer_count &&
                  same_config(&again->layers[i], &original->layers[i]),
              "%s: layer %d config differs", label, i);
  free(a);
  free(b);
  free(first);
  free(second);
  mxu_model_free(again);
}

static void round_trips(void) {
  static const struct {
    const char *path;
    int64_t params;
    mxu_loss loss;
    const char *metric;
  } files[] = {
      {"models/fashion_mnist.json", 108810, MXU_SPARSE_CATEGORICAL_CROSSENTROPY,
       "sparse_categorical_accuracy"},
      {"models/cifar10.json", 1676982, MXU_SPARSE_CATEGORICAL_CROSSENTROPY,
       "sparse_categorical_accuracy"},
      {"models/cifar10_augmented.json", 1250858, MXU_CATEGORICAL_CROSSENTROPY,
       "accuracy"},
  };
  for (size_t f = 0; f < sizeof files / sizeof *files; f++) {
    mxu_model *m = NULL;
    int has_compile = 0;
    mxu_compile_config compile = mxu_compile_defaults();
    CHECK_OK(mxu_model_load_json(files[f].path, &m, &compile, &has_compile));
    if (!m) continue;
    CHECK_MSG(
        mxu_model_param_count(m, 1) + mxu_model_param_count(m, 0) ==
            files[f].params,
        "%s: %lld params", files[f].path,
        (long long)(mxu_model_param_count(m, 1) + mxu_model_param_count(m, 0)));
    CHECK(has_compile == 1);
    CHECK(compile.optimizer.kind == MXU_ADAM &&
          compile.optimizer.learning_rate == 1e-3f);
    CHECK(compile.loss == files[f].loss);
    CHECK(compile.metrics[0] &&
          strcmp(compile.metrics[0], files[f].metric) == 0);
    round_trip_text(files[f].path, m, 0);
    round_trip_text(files[f].path, m, 1);
    /* Keras 3 text read back writes the same tf.keras 2.x text. */
    char *k2 = write_json(m, 0), *k3 = write_json(m, 1);
    mxu_model *from3 = k3 ? read_json(k3, NULL, NULL) : NULL;
    char *k2_again = from3 ? write_json(from3, 0) : NULL;
    CHECK(k2 && k2_again && strcmp(k2, k2_again) == 0);
    free(k2);
    free(k3);
    free(k2_again);
    mxu_model_free(from3);
    mxu_model_free(m);
  }
}

/* Short floats, the full tf.keras key set, and the Keras 3 markers. */
static void writes_keras_text(void) {
  mxu_model *m = NULL;
  CHECK_OK(mxu_model_load_json("models/cifar10.json", &m, NULL, NULL));
  if (!m) return;
  char *k2 = write_json(m, 0), *k3 = write_json(m, 1);
  CHECK(has(k2, "\"momentum\": 0.99,"));
  CHECK(has(k2, "\"epsilon\": 0.001,"));
  CHECK(has(k2, "\"axis\": [3],"));
  CHECK(has(k2, "\"rate\": 0.25,"));
  CHECK(has(k2, "\"batch_input_shape\": [null, 32, 32, 3]"));
  CHECK(has(k2, "\"dilation_rate\": [1, 1]"));
  CHECK(has(k2, "\"activity_regularizer\": null"));
  CHECK(has(k2, "\"keras_version\": \"2.15.0\""));
  CHECK(!has(k2, "module"));
  CHECK(!has(k2, "compile_config")); /* not compiled */
  CHECK(has(k3, "\"batch_shape\": [null, 32, 32, 3]"));
  CHECK(has(k3, "\"module\": \"keras.layers\""));
  CHECK(has(k3, "\"registered_name\": null"));
  CHECK(has(k3, "\"class_name\": \"DTypePolicy\""));
  CHECK(has(k3, "\"axis\": -1,"));
  CHECK(has(k3, "\"build_config\""));
  CHECK(!has(k3, "batch_input_shape"));
  /* What cJSON itself makes of the text: a valid document. */
  cJSON *doc = k3 ? cJSON_Parse(k3) : NULL;
  CHECK(doc != NULL);
  cJSON_Delete(doc);
  free(k2);
  free(k3);
  mxu_model_free(m);
}

/* Names with quotes, braces, backslashes and UTF-8 come back as they
 * were. */
static void odd_names(void) {
  static const char *const names[] = {"a{\n}b \"q\" \\ { }", "r\u00e9seau_1"};
  mxu_model *m = mxu_sequential("mod{ }\"el\"");
  int64_t dims[1] = {4};
  mxu_dense_config d = mxu_dense_defaults(3);
  d.name = names[0];
  CHECK_OK(mxu_add_input(m, names[1], mxu_shape_make(1, dims)));
  CHECK_OK(mxu_add_dense(m, &d));
  for (int keras3 = 0; keras3 < 2; keras3++) {
    char *text = write_json(m, keras3);
    mxu_model *back = text ? read_json(text, NULL, NULL) : NULL;
    CHECK(back && strcmp(back->name, m->name) == 0);
    CHECK(back && strcmp(mxu_model_input(back)->name, names[1]) == 0);
    CHECK(back && strcmp(mxu_model_layer_name(back, 0), names[0]) == 0);
    free(text);
    mxu_model_free(back);
  }
  mxu_model_free(m);
}

/* A compiled model carries its compile settings into the text. */
static void writes_compile_config(void) {
  mxu_model *m = read_json(compiled_with("unused", "null"), NULL, NULL);
  if (!m) return;
  mxu_compile_config c = mxu_compile_defaults();
  c.optimizer = mxu_sgd(0.05f, 0.9f, 1);
  c.optimizer.use_ema = 1;
  c.optimizer.ema_momentum = 0.75f;
  c.optimizer.ema_overwrite_frequency = 3;
  c.from_logits = 1;
  c.loss = MXU_SPARSE_CATEGORICAL_CROSSENTROPY;
  c.metrics[0] = "acc";
  c.batch_size = 4;
  c.backend = MXU_BACKEND_CPU_REF;
  CHECK_OK(mxu_compile(m, &c));
  for (int keras3 = 0; keras3 < 2; keras3++) {
    char *text = write_json(m, keras3);
    int has_compile = 0;
    mxu_compile_config back = mxu_compile_defaults();
    mxu_model *again = text ? read_json(text, &back, &has_compile) : NULL;
    CHECK(has_compile == 1);
    CHECK(back.optimizer.kind == MXU_SGD);
    CHECK(back.optimizer.learning_rate == 0.05f);
    CHECK(back.optimizer.momentum == 0.9f && back.optimizer.nesterov == 1);
    CHECK(back.optimizer.use_ema == 1 && back.optimizer.ema_momentum == 0.75f &&
          back.optimizer.ema_overwrite_frequency == 3);
    /* tf.keras 2 builds its legacy optimizer without the flag. */
    CHECK(keras3 || (text && has(text, "\"is_legacy_optimizer\": false") &&
                     has(text, "\"Custom>SGD\"")));
    CHECK(back.from_logits == 1);
    CHECK(back.metrics[0] && strcmp(back.metrics[0], "acc") == 0);
    free(text);
    mxu_model_free(again);
  }
  /* Every loss with its options, and a metric of each kind. */
  static const struct {
    mxu_loss loss;
    int from_logits;
    float smoothing, delta;
    const char *metric;
    float gamma, alpha;
    int balanced;
  } losses[] = {
      {MXU_CATEGORICAL_CROSSENTROPY, 0, 0.2f, 1.0f,
       "top_k_categorical_accuracy", 2.0f, 0.25f, 0},
      {MXU_BINARY_CROSSENTROPY, 1, 0.1f, 1.0f, "binary_accuracy", 2.0f, 0.25f,
       0},
      {MXU_BINARY_CROSSENTROPY, 0, 0.0f, 1.0f, "accuracy", 2.0f, 0.25f, 0},
      {MXU_MEAN_SQUARED_ERROR, 0, 0.0f, 1.0f, "mae", 2.0f, 0.25f, 0},
      {MXU_MEAN_ABSOLUTE_ERROR, 0, 0.0f, 1.0f, "mean_squared_error", 2.0f,
       0.25f, 0},
      {MXU_HUBER, 0, 0.0f, 0.5f, "mse", 2.0f, 0.25f, 0},
      {MXU_KL_DIVERGENCE, 0, 0.0f, 1.0f, "categorical_accuracy", 2.0f, 0.25f,
       0},
      {MXU_HINGE, 0, 0.0f, 1.0f, "squared_hinge", 2.0f, 0.25f, 0},
      {MXU_SQUARED_HINGE, 0, 0.0f, 1.0f, "hinge", 2.0f, 0.25f, 0},
      {MXU_CATEGORICAL_HINGE, 0, 0.0f, 1.0f, "cosine_similarity", 2.0f, 0.25f,
       0},
      {MXU_COSINE_SIMILARITY, 0, 0.0f, 1.0f, "categorical_hinge", 2.0f, 0.25f,
       0},
      {MXU_BINARY_FOCAL_CROSSENTROPY, 1, 0.1f, 1.0f, "accuracy", 1.5f, 0.4f, 1},
      {MXU_BINARY_FOCAL_CROSSENTROPY, 0, 0.0f, 1.0f, "accuracy", 2.0f, 0.25f,
       0},
      {MXU_CATEGORICAL_FOCAL_CROSSENTROPY, 0, 0.0f, 1.0f, "accuracy", 0.5f,
       0.75f, 0},
  };
  for (size_t i = 0; i < sizeof losses / sizeof *losses; i++) {
    c.gamma = losses[i].gamma;
    c.alpha = losses[i].alpha;
    c.apply_class_balancing = losses[i].balanced;
    c.loss = losses[i].loss;
    c.from_logits = losses[i].from_logits;
    c.label_smoothing = losses[i].smoothing;
    c.huber_delta = losses[i].delta;
    c.metrics[0] = losses[i].metric;
    CHECK_OK(mxu_compile(m, &c));
    for (int keras3 = 0; keras3 < 2; keras3++) {
      char *text = write_json(m, keras3);
      mxu_compile_config back = mxu_compile_defaults();
      int has_compile = 0;
      mxu_model *again = text ? read_json(text, &back, &has_compile) : NULL;
      CHECK_MSG(back.loss == c.loss && back.from_logits == c.from_logits &&
                    back.label_smoothing == c.label_smoothing &&
                    back.huber_delta == c.huber_delta &&
                    back.gamma == c.gamma && back.alpha == c.alpha &&
                    back.apply_class_balancing == c.apply_class_balancing &&
                    back.metrics[0] &&
                    strcmp(back.metrics[0], c.metrics[0]) == 0,
                "loss %s, keras3 %d", mxu_loss_name(c.loss), keras3);
      free(text);
      mxu_model_free(again);
    }
  }
  /* The sparse cross-entropy's ignore_class, in range or not; on another
   * loss compile refuses it. */
  c = mxu_compile_defaults();
  c.has_ignore_class = 1;
  for (int i = 0; i < 2; i++) {
    c.ignore_class = i ? 255 : -1;
    CHECK_OK(mxu_compile(m, &c));
    for (int keras3 = 0; keras3 < 2; keras3++) {
      char *text = write_json(m, keras3);
      mxu_compile_config back = mxu_compile_defaults();
      int has_compile = 0;
      mxu_model *again = text ? read_json(text, &back, &has_compile) : NULL;
      CHECK_MSG(text && strstr(text, "\"SparseCategoricalCrossentropy\"") &&
                    back.loss == MXU_SPARSE_CATEGORICAL_CROSSENTROPY &&
                    back.has_ignore_class &&
                    back.ignore_class == c.ignore_class,
                "ignore_class %d, keras3 %d: read back %d %d", c.ignore_class,
                keras3, back.has_ignore_class, back.ignore_class);
      free(text);
      mxu_model_free(again);
    }
  }
  c.loss = MXU_CATEGORICAL_CROSSENTROPY;
  CHECK(mxu_compile(m, &c) == MXU_ERR_ARG &&
        strstr(mxu_errmsg(), "ignore_class is an option of the sparse"));
  mxu_model_free(m);
}

/* ---- files ------------------------------------------------------------------
 */

static int count_entries(const char *dir) {
  DIR *d = opendir(dir);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));) n += e->d_name[0] != '.';
  if (d) closedir(d);
  return n;
}

static void files(void) {
  char dir[] = "/tmp/mxu_json_XXXXXX", path[64], missing_path[96];
  if (!mkdtemp(dir)) {
    CHECK_MSG(0, "mkdtemp failed");
    return;
  }
  snprintf(path, sizeof path, "%s/model.json", dir);
  mxu_model *m = NULL, *back = NULL;
  CHECK_OK(mxu_model_load_json("models/fashion_mnist.json", &m, NULL, NULL));
  CHECK_OK(mxu_model_save_json(m, path, 0));
  CHECK_OK(mxu_model_save_json(m, path, 1)); /* replaces it */
  CHECK(count_entries(dir) == 1);            /* no temporary left */
  CHECK_OK(mxu_model_load_json(path, &back, NULL, NULL));
  char *a = m ? write_json(m, 1) : NULL, *b = back ? write_json(back, 1) : NULL;
  CHECK(a && b && strcmp(a, b) == 0);
  free(a);
  free(b);
  mxu_model_free(back);

  snprintf(missing_path, sizeof missing_path, "%s/no/such/model.json", dir);
  CHECK(mxu_model_save_json(m, missing_path, 0) == MXU_ERR_IO);
  CHECK(has(mxu_errmsg(), missing_path));
  back = (mxu_model *)1;
  CHECK(mxu_model_load_json(missing_path, &back, NULL, NULL) == MXU_ERR_IO);
  CHECK(has(mxu_errmsg(), missing_path));
  CHECK(back == NULL);

  /* A malformed file names the file. */
  FILE *f = fopen(path, "w");
  if (f) {
    fputs("{\"class_name\": \"Sequential\",\n \"config\": {\"layers\": [}}\n",
          f);
    fclose(f);
  }
  CHECK(mxu_model_load_json(path, &back, NULL, NULL) == MXU_ERR_FORMAT);
  CHECK_MSG(has(mxu_errmsg(), path) && has(mxu_errmsg(), "line 2"), "%s",
            mxu_errmsg());
  unlink(path);
  rmdir(dir);
  mxu_model_free(m);
}

/* ---- functional models ------------------------------------------------------
 */

/* The name in a layer list entry's config. */
static const char *entry_name(const cJSON *entry) {
  return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
      cJSON_GetObjectItemCaseSensitive(entry, "config"), "name"));
}

/* got[0..count) against the names of a file's config.layers, in order
 * (Keras matches weights to layers by position). */
static void check_order(const char *label, const char *const *got, int count,
                        const cJSON *layers) {
  int i = 0, wrong = 0, first = -1;
  const char *first_got = NULL, *first_want = NULL;
  for (const cJSON *e = layers ? layers->child : NULL; e; e = e->next, i++) {
    const char *want = entry_name(e);
    const char *name = i < count ? got[i] : NULL;
    if (want && name && strcmp(want, name) == 0) continue;
    if (!wrong++) first = i, first_got = name, first_want = want;
  }
  CHECK_MSG(wrong == 0,
            "%s: %d layers out of the file's order; the first, layer %d, is "
            "'%s', the file's is '%s'",
            label, wrong, first, first_got ? first_got : "(none)",
            first_want ? first_want : "(none)");
  CHECK_MSG(i > 0 && i == count, "%s: %d layers, the file lists %d", label,
            count, i);
}

/* mxu's model.layers against the file's. */
static void check_names(const char *label, const mxu_model *m,
                        const cJSON *layers) {
  int count = mxu_model_layer_count(m);
  const char **names = calloc((size_t)count + 1, sizeof *names);
  for (int i = 0; names && i < count; i++)
    names[i] = mxu_model_layer_name(m, i);
  if (names) check_order(label, names, count, layers);
  free(names);
}

/* A written text's layer list against the file's. */
static void check_list(const char *label, const cJSON *written,
                       const cJSON *layers) {
  int count = cJSON_GetArraySize(written), i = 0;
  const char **names = calloc((size_t)count + 1, sizeof *names);
  for (const cJSON *e = written ? written->child : NULL; names && e;
       e = e->next)
    names[i++] = entry_name(e);
  if (names) check_order(label, names, count, layers);
  free(names);
}

static const cJSON *layers_of(const cJSON *doc) {
  return cJSON_GetObjectItemCaseSensitive(
      cJSON_GetObjectItemCaseSensitive(doc, "config"), "layers");
}

typedef struct keras_counts {
  int64_t total, trainable, non_trainable;
  int layers;
} keras_counts;

/* counts.json's numbers for an app, a size and a dialect. */
static keras_counts counts_of(const cJSON *counts, const char *app,
                              const char *size, const char *dialect) {
  const cJSON *c = cJSON_GetObjectItemCaseSensitive(
      cJSON_GetObjectItemCaseSensitive(
          cJSON_GetObjectItemCaseSensitive(counts, app), size),
      dialect);
  keras_counts k = {-1, -1, -1, -1};
  const cJSON *v;
  if ((v = cJSON_GetObjectItemCaseSensitive(c, "total")) && cJSON_IsNumber(v))
    k.total = (int64_t)v->valuedouble;
  if ((v = cJSON_GetObjectItemCaseSensitive(c, "trainable")) &&
      cJSON_IsNumber(v))
    k.trainable = (int64_t)v->valuedouble;
  if ((v = cJSON_GetObjectItemCaseSensitive(c, "non_trainable")) &&
      cJSON_IsNumber(v))
    k.non_trainable = (int64_t)v->valuedouble;
  if ((v = cJSON_GetObjectItemCaseSensitive(c, "layers")) && cJSON_IsNumber(v))
    k.layers = v->valueint;
  CHECK_MSG(
      k.total > 0 && k.trainable + k.non_trainable == k.total && k.layers > 0,
      "counts.json: %s %s %s is missing or inconsistent", app, size, dialect);
  return k;
}

static void check_counts(const char *label, const mxu_model *m,
                         keras_counts want) {
  int64_t trainable = mxu_model_param_count(m, 1);
  int64_t non_trainable = mxu_model_param_count(m, 0);
  CHECK_MSG(trainable == want.trainable && non_trainable == want.non_trainable,
            "%s: %lld trainable + %lld non-trainable params, Keras has %lld + "
            "%lld",
            label, (long long)trainable, (long long)non_trainable,
            (long long)want.trainable, (long long)want.non_trainable);
  CHECK_MSG(trainable + non_trainable == want.total, "%s: %lld params", label,
            (long long)(trainable + non_trainable));
  /* Keras 3 lists no op it records as a layer (x + 3.0) among the
   * model's layers; tf.keras 2 lists its TFOpLambdas. */
  int layers = mxu_model_layer_count(m), ops = 0;
  for (int i = 0; i < m->layer_count; i++) ops += m->layers[i].op != 0;
  if (has(label, ".k3.")) layers -= ops;
  CHECK_MSG(layers == want.layers, "%s: %d layers, Keras has %d", label, layers,
            want.layers);
}

/* Both writers keep the file's layer order, in the text and in the model
 * read back from it; a Keras 3 text read back writes the same tf.keras 2
 * text. */
static void check_written(const char *label, const mxu_model *m,
                          const cJSON *layers) {
  round_trip_text(label, m, 0);
  round_trip_text(label, m, 1);
  char *k2 = write_json(m, 0);
  for (int keras3 = 0; keras3 < 2; keras3++) {
    char *text = keras3 ? write_json(m, 1) : NULL;
    const char *t = keras3 ? text : k2;
    cJSON *doc = t ? cJSON_Parse(t) : NULL;
    CHECK_MSG(doc != NULL, "%s keras3=%d: written text does not parse", label,
              keras3);
    char where[160];
    snprintf(where, sizeof where, "%s written keras3=%d", label, keras3);
    check_list(where, doc ? layers_of(doc) : NULL, layers);
    mxu_model *back = t ? read_json(t, NULL, NULL) : NULL;
    if (back) check_names(where, back, layers);
    if (back && keras3) {
      char *k2_again = write_json(back, 0);
      CHECK_MSG(k2 && k2_again && strcmp(k2, k2_again) == 0,
                "%s: Keras 3 text read back writes another tf.keras 2 text",
                label);
      free(k2_again);
    }
    mxu_model_free(back);
    cJSON_Delete(doc);
    free(text);
  }
  free(k2);
}

/* Every occurrence of from in text replaced by to; *count says how many. */
static char *replace_all(const char *text, const char *from, const char *to,
                         int *count) {
  size_t from_n = strlen(from), to_n = strlen(to);
  *count = 0;
  for (const char *p = text; (p = strstr(p, from)); p += from_n) (*count)++;
  char *out = malloc(strlen(text) + (size_t)*count * to_n + 1);
  if (!out) return NULL;
  char *o = out;
  for (const char *p = text;;) {
    const char *hit = strstr(p, from);
    size_t n = hit ? (size_t)(hit - p) : strlen(p);
    memcpy(o, p, n);
    o += n;
    if (!hit) break;
    memcpy(o, to, to_n);
    o += to_n;
    p = hit + from_n;
  }
  *o = 0;
  return out;
}

/* Normalization with Keras' mean and variance given in its config, as
 * keras.applications' ConvNeXt and EfficientNetV2 write it (each Keras
 * version's dialect): one per channel, a number for every channel (a
 * list of one too), and the adapted kind beside them. Given statistics
 * are float32 constants, not weights; both writers give them back as
 * lists, and null for the adapted layer. */
static void reads_given_normalization(void) {
  static const char *const layers_tf2 =
      "{\"class_name\": \"Normalization\", \"config\": {\"name\": \"pre\", "
      "\"trainable\": true, \"dtype\": \"float32\", \"axis\": [-1], "
      "\"invert\": false, \"mean\": [123.675, 116.28, 103.53], "
      "\"variance\": [3409.9760250000004, 3262.6944000000003, 3291.890625]}}, "
      "{\"class_name\": \"Normalization\", \"config\": {\"name\": \"one\", "
      "\"axis\": 3, \"invert\": true, \"mean\": 0.5, \"variance\": 4}}, "
      "{\"class_name\": \"Normalization\", \"config\": {\"name\": \"listed\", "
      "\"axis\": -1, \"mean\": [-0.25], \"variance\": [0.0]}}, "
      "{\"class_name\": \"Normalization\", \"config\": {\"name\": "
      "\"adapted\", \"axis\": [3], \"mean\": null, \"variance\": null}}";
  static const char *const layer_k3 =
      "{\"module\": \"keras.layers\", \"class_name\": \"Normalization\", "
      "\"config\": {\"name\": \"pre\", \"trainable\": true, \"dtype\": "
      "{\"module\": \"keras\", \"class_name\": \"DTypePolicy\", \"config\": "
      "{\"name\": \"float32\"}, \"registered_name\": null}, \"axis\": [-1], "
      "\"invert\": false, \"mean\": [123.675, 116.28, 103.53], "
      "\"variance\": [3409.9760250000004, 3262.6944000000003, 3291.890625]}, "
      "\"registered_name\": null, \"build_config\": {\"input_shape\": [null, "
      "4, 4, 3]}}";
  static const struct {
    const char *name;
    int given, invert;
    double mean[3], variance[3];
  } want[] = {
      {"pre",
       3,
       0,
       {123.675, 116.28, 103.53},
       {3409.9760250000004, 3262.6944000000003, 3291.890625}},
      {"one", 1, 1, {0.5}, {4}},
      {"listed", 1, 0, {-0.25}, {0}},
      {"adapted", 0, 0, {0}, {0}},
  };
  char keras3[4096];
  snprintf(keras3, sizeof keras3,
           "{\"module\": \"keras\", \"class_name\": \"Sequential\", "
           "\"config\": {\"name\": \"s\", \"layers\": [{\"module\": "
           "\"keras.layers\", \"class_name\": \"InputLayer\", \"config\": "
           "{\"batch_shape\": [null, 4, 4, 3], \"dtype\": \"float32\", "
           "\"sparse\": false, \"name\": \"input_layer\"}, "
           "\"registered_name\": null}, %s]}, \"registered_name\": null}",
           layer_k3);
  for (int dialect = 0; dialect < 2; dialect++) {
    mxu_model *m =
        read_json(dialect ? keras3 : model_with("[null, 4, 4, 3]", layers_tf2),
                  NULL, NULL);
    if (!m) continue;
    int count = dialect ? 1 : 4;
    CHECK(mxu_model_layer_count(m) == count);
    /* No weights but the adapted layer's mean, variance and count. */
    CHECK(mxu_model_param_count(m, 1) == 0);
    CHECK(mxu_model_param_count(m, 0) == (dialect ? 0 : 7));
    for (int i = 0; i < count; i++) {
      const mxu_normalization_config *n = &LAYER(m, i)->config.normalization;
      int same = strcmp(LAYER(m, i)->name, want[i].name) == 0 &&
                 n->given == want[i].given && n->invert == want[i].invert;
      for (int k = 0; k < n->given; k++)
        same &= n->mean[k] == (float)want[i].mean[k] &&
                n->variance[k] == (float)want[i].variance[k];
      CHECK_MSG(same, "dialect %d: layer %d (%s) read as given %d", dialect, i,
                want[i].name, n->given);
    }
    for (int keras3_out = 0; keras3_out < 2; keras3_out++) {
      round_trip_text("given Normalization", m, keras3_out);
      char *text = write_json(m, keras3_out);
      cJSON *doc = text ? cJSON_Parse(text) : NULL;
      const cJSON *layer = NULL;
      int i = 0;
      cJSON_ArrayForEach(layer, layers_of(doc)) {
        const cJSON *config = cJSON_GetObjectItem(layer, "config");
        if (strcmp(
                cJSON_GetStringValue(cJSON_GetObjectItem(layer, "class_name")),
                "InputLayer") == 0)
          continue;
        const cJSON *mean = cJSON_GetObjectItem(config, "mean");
        const cJSON *variance = cJSON_GetObjectItem(config, "variance");
        int same =
            i < count &&
            (want[i].given ? cJSON_IsArray(mean) && cJSON_IsArray(variance)
                           : cJSON_IsNull(mean) && cJSON_IsNull(variance));
        for (int k = 0; same && k < want[i].given; k++)
          same = cJSON_GetArraySize(mean) == want[i].given &&
                 (float)cJSON_GetArrayItem(mean, k)->valuedouble ==
                     (float)want[i].mean[k] &&
                 (float)cJSON_GetArrayItem(variance, k)->valuedouble ==
                     (float)want[i].variance[k];
        CHECK_MSG(same,
                  "dialect %d written keras3=%d: layer %d's mean and "
                  "variance",
                  dialect, keras3_out, i);
        i++;
      }
      CHECK_MSG(i == count, "dialect %d written keras3=%d: %d layers", dialect,
                keras3_out, i);
      cJSON_Delete(doc);
      free(text);
    }
    mxu_model_free(m);
  }

  /* What Keras refuses, and more than mxu keeps. */
  static const struct {
    const char *config;
    mxu_status status;
    const char *needle;
  } refused[] = {
      {"\"mean\": [1, 2, 3], \"variance\": null", MXU_ERR_FORMAT,
       "mean and variance are given together or not at all (here only mean)"},
      {"\"variance\": 2", MXU_ERR_FORMAT,
       "mean and variance are given together or not at all (here only "
       "variance)"},
      {"\"mean\": [1, 2, 3], \"variance\": [1, 2]", MXU_ERR_FORMAT,
       "mean has 3 values and variance 2"},
      {"\"mean\": [1, 2], \"variance\": [1, 2]", MXU_ERR_SHAPE,
       "mean and variance have 2 values, and the input's last axis 3 "
       "channels"},
      {"\"mean\": [1, \"2\", 3], \"variance\": [1, 2, 3]", MXU_ERR_FORMAT,
       "mean must be null, a number or a list of numbers, got [1, '2', 3]"},
      {"\"mean\": [[1, 2, 3]], \"variance\": [[1, 2, 3]]", MXU_ERR_FORMAT,
       "mean must be null, a number or a list of numbers"},
      {"\"mean\": \"imagenet\", \"variance\": 1", MXU_ERR_FORMAT,
       "mean must be null, a number or a list of numbers, got 'imagenet'"},
      {"\"mean\": [], \"variance\": []", MXU_ERR_FORMAT,
       "mean is an empty list"},
      {"\"mean\": 1, \"variance\": 1e39", MXU_ERR_ARG,
       "variance 1e+39 is beyond float32's range"},
      {"\"mean\": [0, 0, 0], \"variance\": [1, -1, 1]", MXU_ERR_ARG,
       "mean 0 and variance -1 (value 1) must be finite, the variance >= 0"},
  };
  for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
    char layer[512];
    snprintf(layer, sizeof layer,
             "{\"class_name\": \"Normalization\", \"config\": {\"name\": "
             "\"norm\", %s}}",
             refused[i].config);
    EXPECT_JSON_FAIL(model_with("[null, 4, 4, 3]", layer), refused[i].status,
                     "layer 'norm' (Normalization)", refused[i].needle);
  }
  /* 65 channels: one value more than mxu keeps. */
  char values[512] = "[0", layer[1536];
  for (int i = 1; i <= MXU_NORMALIZATION_VALUES; i++) strcat(values, ", 1");
  strcat(values, "]");
  snprintf(layer, sizeof layer,
           "{\"class_name\": \"Normalization\", \"config\": {\"name\": "
           "\"norm\", \"mean\": %s, \"variance\": %s}}",
           values, values);
  EXPECT_JSON_FAIL(model_with("[null, 65]", layer), MXU_ERR_UNSUPPORTED,
                   "layer 'norm' (Normalization): mean has 65 values; mxu "
                   "takes at most 64",
                   "as the adapted layer's weights instead");
}

/* keras.applications ConvNeXt's LayerScale as each Keras writes it (the
 * module and registered name tf_keras 2 and Keras 3 give it; older
 * tf.keras gives neither): its config, its one trainable weight, and both
 * writers giving back the module and registered name Keras finds the
 * class by. */
static void reads_layer_scale(void) {
  static const char *const entries[] = {
      "{\"module\": \"tf_keras.src.applications.convnext\", \"class_name\": "
      "\"LayerScale\", \"config\": {\"name\": \"ls\", \"trainable\": true, "
      "\"dtype\": \"float32\", \"init_values\": 1e-06, \"projection_dim\": "
      "3}, \"registered_name\": \"LayerScale\", \"build_config\": "
      "{\"input_shape\": [null, 4, 4, 3]}}",
      "{\"class_name\": \"LayerScale\", \"config\": {\"name\": \"ls\", "
      "\"trainable\": true, \"dtype\": \"float32\", \"init_values\": 1e-06, "
      "\"projection_dim\": 3}}",
      "{\"module\": \"keras.src.applications.convnext\", \"class_name\": "
      "\"LayerScale\", \"config\": {\"name\": \"ls\", \"trainable\": true, "
      "\"dtype\": {\"module\": \"keras\", \"class_name\": \"DTypePolicy\", "
      "\"config\": {\"name\": \"float32\"}, \"registered_name\": null}, "
      "\"init_values\": 1e-06, \"projection_dim\": 3}, \"registered_name\": "
      "\"LayerScale\", \"build_config\": {\"input_shape\": [null, 4, 4, "
      "3]}}",
  };
  for (size_t e = 0; e < sizeof entries / sizeof *entries; e++) {
    mxu_model *m =
        read_json(model_with("[null, 4, 4, 3]", entries[e]), NULL, NULL);
    if (!m) continue;
    const mxu_layer *ls = LAYER(m, 0);
    CHECK_MSG(strcmp(class_of(m, 0), "LayerScale") == 0 &&
                  ls->config.layer_scale.init_values == 1e-6f &&
                  ls->config.layer_scale.projection_dim == 3,
              "entry %zu: read as %s", e, class_of(m, 0));
    CHECK(mxu_model_param_count(m, 1) == 3 && mxu_model_param_count(m, 0) == 0);
    round_trip_text("LayerScale", m, 0);
    round_trip_text("LayerScale", m, 1);
    for (int keras3 = 0; keras3 < 2; keras3++) {
      char *text = write_json(m, keras3);
      cJSON *doc = text ? cJSON_Parse(text) : NULL;
      const cJSON *entry = cJSON_GetArrayItem(layers_of(doc), 1);
      const cJSON *config = cJSON_GetObjectItem(entry, "config");
      const char *module =
          cJSON_GetStringValue(cJSON_GetObjectItem(entry, "module"));
      const char *registered =
          cJSON_GetStringValue(cJSON_GetObjectItem(entry, "registered_name"));
      const cJSON *init = cJSON_GetObjectItem(config, "init_values");
      const cJSON *dim = cJSON_GetObjectItem(config, "projection_dim");
      CHECK_MSG(
          module &&
              strcmp(module, keras3
                                 ? "keras.src.applications.convnext"
                                 : "tf_keras.src.applications.convnext") == 0 &&
              registered && strcmp(registered, "LayerScale") == 0,
          "entry %zu keras3=%d: module %s, registered_name %s", e, keras3,
          module ? module : "(none)", registered ? registered : "(none)");
      CHECK_MSG(cJSON_IsNumber(init) && init->valuedouble == 1e-6 &&
                    cJSON_IsNumber(dim) && dim->valueint == 3,
                "entry %zu keras3=%d: init_values, projection_dim", e, keras3);
      cJSON_Delete(doc);
      free(text);
    }
    mxu_model_free(m);
  }
  static const struct {
    const char *entry;
    mxu_status status;
    const char *needle;
  } refused[] = {
      {"{\"class_name\": \"LayerScale\", \"config\": {\"name\": \"ls\", "
       "\"init_values\": 0.1, \"projection_dim\": 4}}",
       MXU_ERR_SHAPE,
       "projection_dim 4, but the input (4, 4, 3) has 3 values on its last "
       "axis"},
      {"{\"class_name\": \"LayerScale\", \"config\": {\"name\": \"ls\", "
       "\"init_values\": 0.1}}",
       MXU_ERR_FORMAT, "projection_dim is missing"},
      {"{\"class_name\": \"LayerScale\", \"config\": {\"name\": \"ls\", "
       "\"projection_dim\": 3}}",
       MXU_ERR_FORMAT, "init_values is missing"},
      {"{\"class_name\": \"LayerScale\", \"config\": {\"name\": \"ls\", "
       "\"init_values\": \"small\", \"projection_dim\": 3}}",
       MXU_ERR_FORMAT, "init_values must be a number, got 'small'"},
      /* Someone else's LayerScale is not ConvNeXt's. */
      {"{\"module\": \"my_model.layers\", \"class_name\": \"LayerScale\", "
       "\"config\": {\"name\": \"ls\", \"init_values\": 0.1, "
       "\"projection_dim\": 3}, \"registered_name\": \"LayerScale\"}",
       MXU_ERR_UNSUPPORTED, "custom layers are not supported"},
      {"{\"module\": \"keras.src.applications.convnext\", \"class_name\": "
       "\"LayerScale\", \"config\": {\"name\": \"ls\", \"init_values\": 0.1, "
       "\"projection_dim\": 3}, \"registered_name\": \"MyLayerScale\"}",
       MXU_ERR_UNSUPPORTED, "registered_name 'MyLayerScale'"},
  };
  for (size_t i = 0; i < sizeof refused / sizeof *refused; i++)
    EXPECT_JSON_FAIL(model_with("[null, 4, 4, 3]", refused[i].entry),
                     refused[i].status, "layer 'ls' (LayerScale)",
                     refused[i].needle);
}

/* Keras' applications at 32x32x3 from both Keras versions, and again at
 * 224x224x3: Keras' own parameter and layer counts, the file's order. */
static void reads_keras_apps(void) {
  static const char *const apps[] = {
      "ResNet50",         "DenseNet121",    "VGG16",
      "MobileNetV2",      "EfficientNetB0", "MobileNetV3Small",
      "EfficientNetV2B0", "ConvNeXtTiny"};
  static const char *const dialects[] = {"tf2", "k3"};
  char *counts_text = check_slurp("tests/keras_apps/counts.json");
  cJSON *counts = counts_text ? cJSON_Parse(counts_text) : NULL;
  free(counts_text);
  CHECK_MSG(counts != NULL, "tests/keras_apps/counts.json: cannot read it");
  if (!counts) return;
  for (size_t a = 0; a < sizeof apps / sizeof *apps; a++)
    for (int d = 0; d < 2; d++) {
      char path[160];
      snprintf(path, sizeof path, "tests/keras_apps/%s_32.%s.json", apps[a],
               dialects[d]);
      char *text = check_slurp(path);
      cJSON *doc = text ? cJSON_Parse(text) : NULL;
      free(text);
      CHECK_MSG(doc != NULL, "%s: cannot read it", path);
      if (!doc) continue;
      mxu_model *m = NULL;
      CHECK_OK(mxu_model_load_json(path, &m, NULL, NULL));
      if (m) {
        check_counts(path, m,
                     counts_of(counts, apps[a], "32x32x3", dialects[d]));
        check_names(path, m, layers_of(doc));
        check_written(path, m, layers_of(doc));
      }
      mxu_model_free(m);

      /* The same model for 224x224 images. The fixtures are indented, so
       * the shapes are put on one line first, as cJSON_Print writes them
       * ("[null, 32, 32, 3]"). ConvNeXt's downsampling blocks are
       * Sequential models built for their own input shapes, which this
       * edit leaves at 32x32's. */
      if (strcmp(apps[a], "ConvNeXtTiny") == 0) {
        cJSON_Delete(doc);
        continue;
      }
      char *flat = cJSON_Print(doc);
      int replaced = 0;
      char *big =
          flat ? replace_all(flat, "32, 32, 3]", "224, 224, 3]", &replaced)
               : NULL;
      cJSON_free(flat);
      CHECK_MSG(big && replaced > 0, "%s: no 32x32x3 shape to replace", path);
      char label[200];
      snprintf(label, sizeof label, "%s at 224x224x3", path);
      m = NULL;
      mxu_status s =
          big ? mxu_model_from_json(big, label, &m, NULL, NULL) : MXU_ERR_NOMEM;
      CHECK_MSG(s == MXU_OK, "%s: %s: %s", label, mxu_status_name(s),
                mxu_errmsg());
      if (m) {
        mxu_shape in = mxu_model_input_shape(m);
        CHECK_MSG(in.rank == 3 && in.dims[0] == 224 && in.dims[1] == 224 &&
                      in.dims[2] == 3,
                  "%s: input is not 224x224x3", label);
        check_counts(label, m,
                     counts_of(counts, apps[a], "224x224x3", dialects[d]));
        check_names(label, m, layers_of(doc));
        check_written(label, m, layers_of(doc));
      }
      mxu_model_free(m);
      free(big);
      cJSON_Delete(doc);
    }
  cJSON_Delete(counts);
}

/* test_golden's other nets as Keras wrote them: models used as layers
 * (a Functional and a Sequential inside a Functional) and shared layers:
 * Keras' counts and layer list (a model used as a layer is one layer),
 * round trips in both dialects, and for the nested one tf_keras 2.21's
 * summary table (a chain of layers: the Sequential layout). */
static void reads_nested_and_shared(void) {
  static const struct {
    const char *path;
    keras_counts want;
  } nets[] = {
      {"tests/golden/nested/model.tf2.json", {112, 106, 6, 4}},
      {"tests/golden/nested/model.k3.json", {112, 106, 6, 4}},
      {"tests/golden/shared/model.tf2.json", {77, 77, 0, 9}},
      {"tests/golden/shared/model.k3.json", {77, 77, 0, 9}},
  };
  for (size_t n = 0; n < sizeof nets / sizeof *nets; n++) {
    char *text = check_slurp(nets[n].path);
    cJSON *doc = text ? cJSON_Parse(text) : NULL;
    free(text);
    mxu_model *m = NULL;
    CHECK_OK(mxu_model_load_json(nets[n].path, &m, NULL, NULL));
    if (m && doc) {
      check_counts(nets[n].path, m, nets[n].want);
      check_names(nets[n].path, m, layers_of(doc));
      check_written(nets[n].path, m, layers_of(doc));
    }
    if (m && n == 0) {
      char *golden = check_slurp("tests/golden/nested/summary.txt");
      char *mine = summary_of(m);
      size_t body = golden ? strstr(golden, "Total params") - golden : 0;
      CHECK_MSG(golden && mine && strncmp(golden, mine, body) == 0,
                "nested summary:\n%s\nKeras:\n%s", mine, golden);
      free(golden);
      free(mine);
    }
    cJSON_Delete(doc);
    mxu_model_free(m);
  }
}

/* The small residual net of test_golden: counts, order, round trips, and
 * tf_keras 2.21's model.summary() table line for line (up to the totals,
 * which Keras follows with sizes in bytes). */
static void reads_tiny_resnet(void) {
  static const char *const paths[] = {"tests/golden/tiny_resnet.tf2.json",
                                      "tests/golden/tiny_resnet.k3.json"};
  const keras_counts want = {1161, 1129, 32, 24};
  for (int d = 0; d < 2; d++) {
    char *text = check_slurp(paths[d]);
    cJSON *doc = text ? cJSON_Parse(text) : NULL;
    free(text);
    CHECK_MSG(doc != NULL, "%s: cannot read it", paths[d]);
    mxu_model *m = NULL;
    CHECK_OK(mxu_model_load_json(paths[d], &m, NULL, NULL));
    if (m && doc) {
      check_counts(paths[d], m, want);
      check_names(paths[d], m, layers_of(doc));
      check_written(paths[d], m, layers_of(doc));
    }
    if (m && d == 0) {
      char *golden = check_slurp("tests/golden/tiny_resnet.summary.txt");
      char *mine = summary_of(m);
      CHECK_MSG(golden && mine, "tiny_resnet summary: cannot read or write it");
      const char *g = golden, *s = mine;
      int line = 1, totals = 0;
      while (g && s && *g) {
        if (strncmp(g, "Total params", 12) == 0) {
          totals = 1;
          CHECK_MSG(strncmp(s, "Total params", 12) == 0,
                    "tiny_resnet summary line %d: '%.*s', want the totals",
                    line, (int)strcspn(s, "\n"), s);
          break;
        }
        size_t gn = strcspn(g, "\n"), sn = strcspn(s, "\n");
        CHECK_MSG(gn == sn && memcmp(g, s, gn) == 0,
                  "tiny_resnet summary line %d:\n  mxu:   '%.*s'\n  Keras: "
                  "'%.*s'",
                  line, (int)sn, s, (int)gn, g);
        g += gn + (g[gn] == '\n');
        s += sn + (s[sn] == '\n');
        line++;
      }
      CHECK_MSG(totals && line > 60,
                "tiny_resnet summary: stopped at line %d before the totals",
                line);
      free(golden);
      free(mine);
    }
    mxu_model_free(m);
    cJSON_Delete(doc);
  }
}

/* A tf.keras 2 Functional model: an InputLayer "in" of shape (4,), then
 * the given layer entries, inputs and outputs. */
static const char *functional_with(const char *layers, const char *inputs,
                                   const char *outputs) {
  static char text[8192];
  snprintf(text, sizeof text,
           "{\"class_name\": \"Functional\", \"config\": {\"name\": \"f\", "
           "\"trainable\": true, \"layers\": [{\"class_name\": "
           "\"InputLayer\", \"config\": {\"batch_input_shape\": [null, 4], "
           "\"dtype\": \"float32\", \"name\": \"in\"}, \"name\": \"in\", "
           "\"inbound_nodes\": []}%s%s], \"input_layers\": %s, "
           "\"output_layers\": %s}, \"keras_version\": \"2.21.0\", "
           "\"backend\": \"tensorflow\"}",
           layers[0] ? ", " : "", layers, inputs, outputs);
  return text;
}

/* A Dense layer named name with the given inbound_nodes. */
static const char *dense_reading(const char *name, const char *inbound) {
  static char text[4][1024];
  static int next;
  char *t = text[next++ % 4];
  snprintf(t, 1024,
           "{\"class_name\": \"Dense\", \"config\": {\"name\": \"%s\", "
           "\"units\": 2}, \"name\": \"%s\", \"inbound_nodes\": %s}",
           name, name, inbound);
  return t;
}

/* Refusals name the source, the layer and what it reads. */
static void errors_functional(void) {
  const char *in = "[[\"in\", 0, 0]]", *out_d = "[[\"d\", 0, 0]]";
  /* The well-formed base the cases below break. */
  mxu_model *m = read_json(
      functional_with(dense_reading("d", "[[[\"in\", 0, 0, {}]]]"), in, out_d),
      NULL, NULL);
  CHECK(m && mxu_model_layer_count(m) == 2 &&
        mxu_model_param_count(m, 1) == 10);
  mxu_model_free(m);

  /* A name no layer defines, in tf.keras 2's form and Keras 3's. */
  EXPECT_JSON_FAIL(
      functional_with(dense_reading("d", "[[[\"nowhere\", 0, 0, {}]]]"), in,
                      out_d),
      MXU_ERR_FORMAT, "layer 'd' (Dense)", "'nowhere'");
  EXPECT_JSON_FAIL(
      functional_with(
          dense_reading("d", "[{\"args\": [{\"class_name\": "
                             "\"__keras_tensor__\", \"config\": {\"shape\": "
                             "[null, 4], \"dtype\": \"float32\", "
                             "\"keras_history\": [\"ghost\", 0, 0]}}], "
                             "\"kwargs\": {}}]"),
          in, out_d),
      MXU_ERR_FORMAT, "layer 'd' (Dense)", "'ghost'");
  EXPECT_JSON_FAIL(functional_with(dense_reading("d", "[]"), in, out_d),
                   MXU_ERR_FORMAT, "layer 'd' (Dense)",
                   "inbound_nodes is empty: the layer reads nothing");
  /* Two tensors into an Add, one of them nobody's. */
  char two[2048];
  snprintf(two, sizeof two,
           "%s, {\"class_name\": \"Add\", \"config\": {\"name\": \"sum\"}, "
           "\"name\": \"sum\", \"inbound_nodes\": [[[\"d\", 0, 0, {}], "
           "[\"missing\", 0, 0, {}]]]}",
           dense_reading("d", "[[[\"in\", 0, 0, {}]]]"));
  EXPECT_JSON_FAIL(functional_with(two, in, "[[\"sum\", 0, 0]]"),
                   MXU_ERR_FORMAT, "layer 'sum' (Add)", "'missing'");
  /* Two inbound nodes (the layer called twice), the second reading a
   * name no layer defines. */
  EXPECT_JSON_FAIL(
      functional_with(dense_reading("d", "[[[\"in\", 0, 0, {}]], "
                                         "[[\"nada\", 0, 0, {}]]]"),
                      in, out_d),
      MXU_ERR_FORMAT, "layer 'd' (Dense)", "'nada'");
  EXPECT_JSON_FAIL(functional_with(dense_reading("d", "[[[\"in\", 0, 0, {}]]]"),
                                   in, "[[\"unknown\", 0, 0]]"),
                   MXU_ERR_FORMAT, "output_layers", "'unknown'");
  EXPECT_JSON_FAIL(functional_with(dense_reading("d", "[[[\"in\", 0, 0, {}]]]"),
                                   "[[\"d\", 0, 0]]", out_d),
                   MXU_ERR_FORMAT,
                   "config.input_layers names 'd', which is not an InputLayer",
                   NULL);
  EXPECT_JSON_FAIL(
      functional_with(
          "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"inner\", "
          "\"layers\": []}, \"name\": \"inner\", \"inbound_nodes\": "
          "[[[\"in\", 0, 0, {}]]]}",
          in, "[[\"inner\", 0, 0]]"),
      MXU_ERR_FORMAT, "layer 'inner' (Sequential)",
      "a Sequential used as a layer has no layers");
}

/* A tf.keras 2 TFOpLambda named name: function on the tensor ref with
 * kwargs y and name (the reference alone, not in a list). */
static const char *tf2_op(const char *name, const char *function,
                          const char *ref, const char *y) {
  static char text[4][1024];
  static int next;
  char *t = text[next++ % 4];
  snprintf(t, 1024,
           "{\"module\": \"tf_keras.src.layers.core.tf_op_layer\", "
           "\"class_name\": \"TFOpLambda\", \"config\": {\"name\": \"%s\", "
           "\"trainable\": true, \"dtype\": \"float32\", \"function\": "
           "\"%s\"}, \"registered_name\": \"TFOpLambda\", \"name\": \"%s\", "
           "\"inbound_nodes\": [[\"%s\", 0, 0, {\"y\": %s, \"name\": null}]]}",
           name, function, name, ref, y);
  return t;
}

/* A Keras 3 tensor reference to layer's output of shape (4,). */
#define K3_REF(layer)                                                          \
  "{\"class_name\": \"__keras_tensor__\", \"config\": {\"shape\": [null, "     \
  "4], \"dtype\": \"float32\", \"keras_history\": [\"" layer "\", 0, 0]}}"

/* A Keras 3 keras.src.ops.numpy op named name, of class op, on args. */
static const char *k3_op_in(const char *module, const char *name,
                            const char *op, const char *args) {
  static char text[4][1024];
  static int next;
  char *t = text[next++ % 4];
  snprintf(t, 1024,
           "{\"module\": \"%s\", \"class_name\": \"%s\", "
           "\"config\": {\"name\": \"%s\"}, \"registered_name\": \"%s\", "
           "\"name\": \"%s\", \"inbound_nodes\": [{\"args\": [%s], "
           "\"kwargs\": {}}]}",
           module, op, name, op, name, args);
  return t;
}

static const char *k3_op(const char *name, const char *op, const char *args) {
  return k3_op_in("keras.src.ops.numpy", name, op, args);
}

/* A Keras 3 Functional model: InputLayer "in" of shape (4,), then the
 * given layers, its output the layer named out. */
static const char *k3_functional_with(const char *layers, const char *out) {
  static char text[8192];
  snprintf(text, sizeof text,
           "{\"module\": \"keras\", \"class_name\": \"Functional\", "
           "\"config\": {\"name\": \"f\", \"trainable\": true, \"layers\": "
           "[{\"module\": \"keras.layers\", \"class_name\": \"InputLayer\", "
           "\"config\": {\"batch_shape\": [null, 4], \"dtype\": \"float32\", "
           "\"sparse\": false, \"name\": \"in\"}, \"registered_name\": null, "
           "\"name\": \"in\", \"inbound_nodes\": []}, %s], \"input_layers\": "
           "[\"in\", 0, 0], \"output_layers\": [\"%s\", 0, 0]}, "
           "\"registered_name\": \"Functional\"}",
           layers, out);
  return text;
}

/* The layer named name, which must be there and read the layer named
 * `from` first; NULL where it is not. */
static const mxu_layer *reading(const char *label, const mxu_model *m,
                                const char *name, const char *from) {
  for (int i = 0; i < m->layer_count; i++) {
    const mxu_layer *l = &m->layers[i];
    if (strcmp(l->name, name) != 0) continue;
    const char *first = l->input_count ? m->layers[l->inputs[0]].name : "";
    CHECK_MSG(strcmp(first, from) == 0, "%s: '%s' reads '%s', want '%s'", label,
              name, first, from);
    return strcmp(first, from) == 0 ? l : NULL;
  }
  CHECK_MSG(0, "%s: no layer '%s'", label, name);
  return NULL;
}

/* Layer named name is a Rescaling of input `from` by scale and offset. */
static void check_rescaling(const char *label, const mxu_model *m,
                            const char *name, const char *from, float scale,
                            float offset) {
  const mxu_layer *l = reading(label, m, name, from);
  CHECK_MSG(!l || (l->cls == &mxu_rescaling_class && l->input_count == 1 &&
                   l->config.rescaling.scale == scale &&
                   l->config.rescaling.offset == offset),
            "%s: '%s' is %s(%g, %g), want Rescaling(%g, %g)", label, name,
            l->cls->class_name, (double)l->config.rescaling.scale,
            (double)l->config.rescaling.offset, (double)scale, (double)offset);
}

/* Layer named name divides input `from` by divisor. */
static void check_divide(const char *label, const mxu_model *m,
                         const char *name, const char *from, float divisor) {
  const mxu_layer *l = reading(label, m, name, from);
  CHECK_MSG(!l || (l->cls == &mxu_divide_class && l->op == MXU_OP_DIVIDE &&
                   l->config.rescaling.scale == divisor),
            "%s: '%s' is %s by %g, want %s / %g", label, name,
            l->cls->class_name, (double)l->config.rescaling.scale, from,
            (double)divisor);
}

/* Layer named name is the op-read Activation act of input `from`. */
static void check_activation(const char *label, const mxu_model *m,
                             const char *name, const char *from,
                             mxu_activation act) {
  const mxu_layer *l = reading(label, m, name, from);
  CHECK_MSG(!l || (l->cls == &mxu_activation_class &&
                   l->op == MXU_OP_ACTIVATION &&
                   mxu_layer_activation_kind(l) == act),
            "%s: '%s' is %s (op %d), want activation %d", label, name,
            l->cls->class_name, (int)l->op, (int)act);
}

/* Activations of one tensor as ops, both dialects, read and written back
 * (tf.nn.relu(x) gives {"name": null}, tf.math.sigmoid(x) {}). */
static void reads_activation_ops(void) {
  char layers[4096];
  snprintf(layers, sizeof layers, "%s, %s",
           tf2_op("tf.nn.relu", "nn.relu", "in", "null"),
           tf2_op("tf.math.sigmoid", "math.sigmoid", "tf.nn.relu", "null"));
  /* tf2_op gives y; these take none. */
  char *y;
  while ((y = strstr(layers, "\"y\": null, ")))
    memmove(y, y + 11, strlen(y + 11) + 1);
  const char *tf2 = functional_with(layers, "[[\"in\", 0, 0]]",
                                    "[[\"tf.math.sigmoid\", 0, 0]]");
  snprintf(layers, sizeof layers, "%s, %s",
           k3_op_in("keras.src.ops.nn", "relu6", "Relu6", K3_REF("in")),
           k3_op("tanh", "Tanh", K3_REF("relu6")));
  char k3[8192];
  snprintf(k3, sizeof k3, "%s", k3_functional_with(layers, "tanh"));
  const char *texts[2] = {tf2, k3};
  for (int d = 0; d < 2; d++) {
    mxu_model *m = read_json(texts[d], NULL, NULL);
    for (int keras3 = -1; m && keras3 < 2; keras3++) {
      /* keras3 -1: the model as read; 0 and 1: written and read back. */
      char *text = keras3 >= 0 ? write_json(m, keras3) : NULL;
      mxu_model *back = text ? read_json(text, NULL, NULL) : m;
      const char *label = d ? "k3 activations" : "tf2 activations";
      if (back && d == 0) {
        check_activation(label, back, "tf.nn.relu", "in", MXU_RELU);
        check_activation(label, back, "tf.math.sigmoid", "tf.nn.relu",
                         MXU_SIGMOID);
      } else if (back) {
        check_activation(label, back, "relu6", "in", MXU_RELU6);
        check_activation(label, back, "tanh", "relu6", MXU_TANH);
      }
      if (back != m) mxu_model_free(back);
      free(text);
    }
    mxu_model_free(m);
  }
  const char *in = "[[\"in\", 0, 0]]", *out = "[[\"op\", 0, 0]]";
  EXPECT_JSON_FAIL(k3_functional_with(k3_op_in("keras.src.ops.nn", "op", "Relu",
                                               K3_REF("in") ", " K3_REF("in")),
                                      "op"),
                   MXU_ERR_FORMAT, "layer 'op' (Relu)",
                   "the op's 1 operand in args");
  EXPECT_JSON_FAIL(
      functional_with(tf2_op("op", "nn.relu", "in", "2.0"), in, out),
      MXU_ERR_FORMAT, "layer 'op' (TFOpLambda)",
      "an op of one operand a second, y");
  char gelu[1024];
  snprintf(gelu, sizeof gelu, "%s", tf2_op("op", "nn.gelu", "in", "null"));
  if ((y = strstr(gelu, "\"y\": null, ")))
    memmove(y, y + 11, strlen(y + 11) + 1);
  EXPECT_JSON_FAIL(functional_with(gelu, in, out), MXU_ERR_UNSUPPORTED,
                   "layer 'op' (TFOpLambda)",
                   "the op 'nn.gelu' is not supported");
}

/* tf.concat and tf.reshape as ops (keras.ops.concatenate and .reshape in
 * Keras 3's files: their axis and new shape in the config): a
 * Concatenate and a Reshape, written back as ops; the batch stays. */
static void reads_shape_ops(void) {
  const char *tf2_layers =
      "{\"class_name\": \"TFOpLambda\", \"config\": {\"name\": \"tf.concat\", "
      "\"function\": \"concat\"}, \"name\": \"tf.concat\", \"inbound_nodes\": "
      "[[[\"in\", 0, 0, {\"axis\": -1}], [\"in\", 0, 0, {\"axis\": -1}]]]}, "
      "{\"class_name\": \"TFOpLambda\", \"config\": {\"name\": "
      "\"tf.reshape\", \"function\": \"reshape\"}, \"name\": \"tf.reshape\", "
      "\"inbound_nodes\": [[\"tf.concat\", 0, 0, {\"shape\": [-1, 2, 4], "
      "\"name\": null}]]}";
  char k3_layers[4096], k3[8192];
  snprintf(k3_layers, sizeof k3_layers,
           "{\"module\": \"keras.src.ops.numpy\", \"class_name\": "
           "\"Concatenate\", \"config\": {\"name\": \"concatenate\", \"axis\": "
           "1}, \"registered_name\": \"Concatenate\", \"name\": "
           "\"concatenate\", \"inbound_nodes\": [{\"args\": [[%s, %s]], "
           "\"kwargs\": {}}]}, {\"module\": \"keras.src.ops.numpy\", "
           "\"class_name\": \"Reshape\", \"config\": {\"name\": \"reshape\", "
           "\"newshape\": [-1, 4, -1]}, \"registered_name\": \"Reshape\", "
           "\"name\": \"reshape\", \"inbound_nodes\": [{\"args\": "
           "[{\"class_name\": \"__keras_tensor__\", \"config\": {\"shape\": "
           "[null, 8], \"dtype\": \"float32\", \"keras_history\": "
           "[\"concatenate\", 0, 0]}}], \"kwargs\": {}}]}",
           K3_REF("in"), K3_REF("in"));
  snprintf(k3, sizeof k3, "%s", k3_functional_with(k3_layers, "reshape"));
  const char *texts[2] = {functional_with(tf2_layers, "[[\"in\", 0, 0]]",
                                          "[[\"tf.reshape\", 0, 0]]"),
                          k3};
  static const char *const names[2][2] = {{"tf.concat", "tf.reshape"},
                                          {"concatenate", "reshape"}};
  for (int d = 0; d < 2; d++) {
    char text0[8192];
    snprintf(text0, sizeof text0, "%s", texts[d]);
    mxu_model *m = read_json(text0, NULL, NULL);
    for (int keras3 = -1; m && keras3 < 2; keras3++) {
      char *text = keras3 >= 0 ? write_json(m, keras3) : NULL;
      mxu_model *back = text ? read_json(text, NULL, NULL) : m;
      for (int i = 0; back && i < back->layer_count; i++) {
        const mxu_layer *l = &back->layers[i];
        if (!strcmp(l->name, names[d][0]))
          CHECK_MSG(l->cls == &mxu_concatenate_class && l->input_count == 2 &&
                        l->op == MXU_OP_CONCATENATE &&
                        l->config.merge.axis == (d ? 1 : -1) &&
                        shape_is(l->out_shape, 1, 8, 0, 0),
                    "dialect %d written %d: '%s'", d, keras3, l->name);
        if (!strcmp(l->name, names[d][1]))
          CHECK_MSG(l->cls == &mxu_reshape_class && l->op == MXU_OP_RESHAPE &&
                        shape_is(l->out_shape, 2, d ? 4 : 2, d ? 2 : 4, 0),
                    "dialect %d written %d: '%s'", d, keras3, l->name);
      }
      if (back != m) mxu_model_free(back);
      free(text);
    }
    mxu_model_free(m);
  }
  /* The batch stays where it is. */
  char bad[2048];
  snprintf(bad, sizeof bad, "%s", tf2_layers);
  char *at = strstr(bad, "{\"axis\": -1}], [\"in\", 0, 0, {\"axis\": -1}");
  if (at) memcpy(at, "{\"axis\":  0}], [\"in\", 0, 0, {\"axis\":  0}", 40);
  EXPECT_JSON_FAIL(
      functional_with(bad, "[[\"in\", 0, 0]]", "[[\"tf.reshape\", 0, 0]]"),
      MXU_ERR_UNSUPPORTED, "layer 'tf.concat' (TFOpLambda)",
      "along the batch (axis 0)");
  snprintf(bad, sizeof bad, "%s", tf2_layers);
  at = strstr(bad, "[-1, 2, 4]");
  if (at) memcpy(at, "[ 2, 2, 4]", 10);
  EXPECT_JSON_FAIL(
      functional_with(bad, "[[\"in\", 0, 0]]", "[[\"tf.reshape\", 0, 0]]"),
      MXU_ERR_UNSUPPORTED, "layer 'tf.reshape' (TFOpLambda)",
      "shape must be a list [-1, ...] keeping the batch");
}

/* Layer named name is the merge cls of inputs a and b. */
static void check_merge(const char *label, const mxu_model *m, const char *name,
                        const mxu_layer_class *cls, const char *a,
                        const char *b) {
  const mxu_layer *l = reading(label, m, name, a);
  CHECK_MSG(!l || (l->cls == cls && l->input_count == 2 &&
                   strcmp(m->layers[l->inputs[1]].name, b) == 0),
            "%s: '%s' is %s of %d inputs, want %s('%s', '%s')", label, name,
            l->cls->class_name, l->input_count, cls->class_name, a, b);
}

/* Ops on tensors that Keras records as layers (MobileNetV3's x + 3.0 and
 * x * (1 / 6), ConvNeXt's residual x + y): a number makes a Rescaling of
 * the same bits, two tensors the merge of the op's name. */
static void reads_ops(void) {
  char layers[4096];
  snprintf(layers, sizeof layers, "%s, %s, %s, %s",
           tf2_op("tf.__operators__.add", "__operators__.add", "in", "3.0"),
           tf2_op("tf.math.multiply", "math.multiply", "tf.__operators__.add",
                  "0.16666666666666666"),
           tf2_op("tf.math.subtract", "math.subtract", "tf.math.multiply", "2"),
           tf2_op("tf.__operators__.add_1", "__operators__.add",
                  "tf.math.subtract", "[\"in\", 0, 0]"));
  /* 1.5 - x, a number first as tf.keras 2 writes it, then that / 4. */
  size_t used = strlen(layers);
  snprintf(
      layers + used, sizeof layers - used,
      ", {\"class_name\": \"TFOpLambda\", \"config\": {\"name\": "
      "\"tf.math.subtract_1\", \"function\": \"math.subtract\"}, "
      "\"name\": \"tf.math.subtract_1\", \"inbound_nodes\": "
      "[[\"_CONSTANT_VALUE\", -1, 1.5, {\"y\": [\"tf.math.subtract\", 0, "
      "0], \"name\": null}]]}, %s",
      tf2_op("tf.math.truediv", "math.truediv", "tf.math.subtract_1", "4.0"));
  const char *tf2 = functional_with(layers, "[[\"in\", 0, 0]]",
                                    "[[\"tf.__operators__.add_1\", 0, 0], "
                                    "[\"tf.math.truediv\", 0, 0]]");
  mxu_model *m = read_json(tf2, NULL, NULL);
  if (m) {
    check_rescaling("tf2", m, "tf.__operators__.add", "in", 1.0f, 3.0f);
    check_rescaling("tf2", m, "tf.math.multiply", "tf.__operators__.add",
                    1.0f / 6.0f, 0.0f);
    check_rescaling("tf2", m, "tf.math.subtract", "tf.math.multiply", 1.0f,
                    -2.0f);
    check_merge("tf2", m, "tf.__operators__.add_1", &mxu_add_class,
                "tf.math.subtract", "in");
    check_rescaling("tf2", m, "tf.math.subtract_1", "tf.math.subtract", -1.0f,
                    1.5f);
    check_divide("tf2", m, "tf.math.truediv", "tf.math.subtract_1", 4.0f);
    /* Written back as the ops Keras wrote, which read back the same. */
    for (int keras3 = 0; keras3 < 2; keras3++) {
      char *text = write_json(m, keras3);
      mxu_model *back = text ? read_json(text, NULL, NULL) : NULL;
      const char *label = keras3 ? "written k3" : "written tf2";
      CHECK_MSG(text && has(text, keras3 ? "\"keras.src.ops.numpy\""
                                         : "\"TFOpLambda\""),
                "%s: no op in the text", label);
      if (back) {
        check_rescaling(label, back, "tf.__operators__.add", "in", 1.0f, 3.0f);
        check_rescaling(label, back, "tf.math.multiply", "tf.__operators__.add",
                        1.0f / 6.0f, 0.0f);
        check_rescaling(label, back, "tf.math.subtract", "tf.math.multiply",
                        1.0f, -2.0f);
        check_merge(label, back, "tf.__operators__.add_1", &mxu_add_class,
                    "tf.math.subtract", "in");
        check_rescaling(label, back, "tf.math.subtract_1", "tf.math.subtract",
                        -1.0f, 1.5f);
        check_divide(label, back, "tf.math.truediv", "tf.math.subtract_1",
                     4.0f);
        for (int i = 0; i < back->layer_count; i++)
          CHECK_MSG(back->layers[i].op == m->layers[i].op,
                    "%s: layer '%s' op %d, read %d", label,
                    back->layers[i].name, back->layers[i].op, m->layers[i].op);
      }
      mxu_model_free(back);
      free(text);
    }
  }
  mxu_model_free(m);

  snprintf(layers, sizeof layers, "%s, %s, %s, %s",
           k3_op("add", "Add", K3_REF("in") ", 3.0"),
           k3_op("multiply", "Multiply", "0.5, " K3_REF("add")),
           k3_op("subtract", "Subtract", "1.5, " K3_REF("multiply")),
           k3_op("add_1", "Add", K3_REF("subtract") ", " K3_REF("in")));
  m = read_json(k3_functional_with(layers, "add_1"), NULL, NULL);
  if (m) {
    check_rescaling("k3", m, "add", "in", 1.0f, 3.0f);
    check_rescaling("k3", m, "multiply", "add", 0.5f, 0.0f);
    check_rescaling("k3", m, "subtract", "multiply", -1.0f, 1.5f); /* 1.5 - x */
    check_merge("k3", m, "add_1", &mxu_add_class, "subtract", "in");
    char *text = write_json(m, 1);
    mxu_model *back = text ? read_json(text, NULL, NULL) : NULL;
    if (back) /* 1.5 - x stays so */
      check_rescaling("k3 written", back, "subtract", "multiply", -1.0f, 1.5f);
    mxu_model_free(back);
    free(text);
  }
  mxu_model_free(m);

  /* What mxu cannot read, named. */
  const char *out = "[[\"op\", 0, 0]]", *in = "[[\"in\", 0, 0]]";
  EXPECT_JSON_FAIL(
      functional_with(tf2_op("op", "math.pow", "in", "2.0"), in, out),
      MXU_ERR_UNSUPPORTED, "layer 'op' (TFOpLambda)",
      "the op 'math.pow' is not supported");
  EXPECT_JSON_FAIL(
      k3_functional_with(k3_op("op", "Power", K3_REF("in") ", 2.0"), "op"),
      MXU_ERR_UNSUPPORTED, "layer 'op' (Power)",
      "the op Power is not supported");
  EXPECT_JSON_FAIL(
      k3_functional_with(k3_op("op", "TrueDivide", "2.0, " K3_REF("in")), "op"),
      MXU_ERR_UNSUPPORTED, "layer 'op' (TrueDivide)",
      "only of a tensor by a number");
  EXPECT_JSON_FAIL(
      functional_with(tf2_op("op", "math.truediv", "in", "[\"in\", 0, 0]"), in,
                      out),
      MXU_ERR_UNSUPPORTED, "layer 'op' (TFOpLambda)",
      "only of a tensor by a number");
  /* Listed with the other items a file has that mxu cannot honour. */
  char both[2048];
  snprintf(both, sizeof both, "%s, %s", tf2_op("half", "math.pow", "in", "2.0"),
           tf2_op("op", "math.floordiv", "half", "2.0"));
  EXPECT_JSON_FAIL(functional_with(both, in, out), MXU_ERR_UNSUPPORTED,
                   "1. test.json: layer 'half' (TFOpLambda): the op "
                   "'math.pow'",
                   "2. test.json: layer 'op' (TFOpLambda): the op "
                   "'math.floordiv'");
  EXPECT_JSON_FAIL(k3_functional_with(k3_op("op", "Add", "1.0, 2.0"), "op"),
                   MXU_ERR_UNSUPPORTED, "layer 'op' (Add)",
                   "an op on two numbers");
  EXPECT_JSON_FAIL(k3_functional_with(k3_op("op", "Add", K3_REF("in")), "op"),
                   MXU_ERR_FORMAT, "layer 'op' (Add)", "the op's 2 operands");
  char bad[1024];
  snprintf(bad, sizeof bad, "%s", tf2_op("op", "math.add", "in", "1.0"));
  char *kw = strstr(bad, "\"name\": null");
  if (kw) memcpy(kw, "\"nom\": 1.0  ", 12);
  EXPECT_JSON_FAIL(functional_with(bad, in, out), MXU_ERR_UNSUPPORTED,
                   "layer 'op' (TFOpLambda)", "op argument 'nom'");
  snprintf(bad, sizeof bad, "%s", tf2_op("op", "math.add", "in", "1.0"));
  kw = strstr(bad, "\"y\": 1.0");
  if (kw) memcpy(kw, "\"x\"", 3);
  EXPECT_JSON_FAIL(functional_with(bad, in, out), MXU_ERR_FORMAT,
                   "layer 'op' (TFOpLambda)", "no operand y");
}

/* A Keras 3 tensor argument: layer name's output, of shape (None, 2). */
#define K3_TENSOR(name)                                                        \
  "{\"class_name\": \"__keras_tensor__\", \"config\": {\"shape\": [null, "     \
  "2], \"dtype\": \"float32\", \"keras_history\": [\"" name "\", 0, 0]}}"
/* A Keras 3 Dense(2) named name reading the input "in". */
#define K3_DENSE(name)                                                         \
  "{\"module\": \"keras.layers\", \"class_name\": \"Dense\", \"config\": "     \
  "{\"name\": \"" name "\", \"units\": 2}, \"registered_name\": null, "        \
  "\"name\": \"" name "\", \"inbound_nodes\": [{\"args\": [{\"class_name\": "  \
  "\"__keras_tensor__\", \"config\": {\"shape\": [null, 4], \"dtype\": "       \
  "\"float32\", \"keras_history\": [\"in\", 0, 0]}}], \"kwargs\": {}}]}"

/* keras.applications InceptionResNetV2's CustomScaleLayer as each Keras
 * writes it: d1 + d2 * scale of two Dense layers; both writers give back
 * its module and registered name (tf_keras registers it as
 * Custom>CustomScaleLayer) and its two inputs. */
static void reads_custom_scale(void) {
  char tf2[2048];
  snprintf(tf2, sizeof tf2,
           "%s, %s, {\"module\": "
           "\"tf_keras.src.applications.inception_resnet_v2\", "
           "\"class_name\": \"CustomScaleLayer\", \"config\": {\"name\": "
           "\"cs\", \"trainable\": true, \"dtype\": \"float32\", \"scale\": "
           "0.17}, \"registered_name\": \"Custom>CustomScaleLayer\", "
           "\"build_config\": {\"input_shape\": [[null, 2], [null, 2]]}, "
           "\"name\": \"cs\", \"inbound_nodes\": [[[\"d1\", 0, 0, {}], "
           "[\"d2\", 0, 0, {}]]]}",
           dense_reading("d1", "[[[\"in\", 0, 0, {}]]]"),
           dense_reading("d2", "[[[\"in\", 0, 0, {}]]]"));
  static const char keras3[] =
      "{\"module\": \"keras\", \"class_name\": \"Functional\", \"config\": "
      "{\"name\": \"f\", \"trainable\": true, \"layers\": [{\"module\": "
      "\"keras.layers\", \"class_name\": \"InputLayer\", \"config\": "
      "{\"batch_shape\": [null, 4], \"dtype\": \"float32\", \"sparse\": "
      "false, \"name\": \"in\"}, \"registered_name\": null, \"name\": \"in\", "
      "\"inbound_nodes\": []}, " K3_DENSE("d1") ", " K3_DENSE(
          "d2") ", "
                "{\"module\": \"keras.src.applications.inception_resnet_v2\", "
                "\"class_name\": \"CustomScaleLayer\", \"config\": {\"name\": "
                "\"cs\", "
                "\"trainable\": true, \"dtype\": {\"module\": \"keras\", "
                "\"class_name\": \"DTypePolicy\", \"config\": {\"name\": "
                "\"float32\"}, "
                "\"registered_name\": null}, \"scale\": 0.17}, "
                "\"registered_name\": "
                "\"CustomScaleLayer\", \"build_config\": {\"input_shape\": "
                "[[null, 2], "
                "[null, 2]]}, \"name\": \"cs\", \"inbound_nodes\": [{\"args\": "
                "[[" K3_TENSOR("d1") ", " K3_TENSOR(
                    "d2") "]], \"kwargs\": {}}]}], "
                          "\"input_layers\": [\"in\", 0, 0], "
                          "\"output_layers\": [\"cs\", 0, 0]}, "
                          "\"registered_name\": \"Functional\"}";
  for (int dialect = 0; dialect < 2; dialect++) {
    mxu_model *m = read_json(
        dialect ? keras3
                : functional_with(tf2, "[[\"in\", 0, 0]]", "[[\"cs\", 0, 0]]"),
        NULL, NULL);
    if (!m) continue;
    CHECK(mxu_model_layer_count(m) == 4);
    const mxu_layer *cs = LAYER(m, 3);
    CHECK_MSG(strcmp(class_of(m, 3), "CustomScaleLayer") == 0 &&
                  cs->config.custom_scale == 0.17f && cs->input_count == 2 &&
                  strcmp(m->layers[cs->inputs[0]].name, "d1") == 0 &&
                  strcmp(m->layers[cs->inputs[1]].name, "d2") == 0,
              "dialect %d: read as %s", dialect, class_of(m, 3));
    CHECK(mxu_model_param_count(m, 1) == 20);
    round_trip_text("CustomScaleLayer", m, 0);
    round_trip_text("CustomScaleLayer", m, 1);
    for (int keras3_out = 0; keras3_out < 2; keras3_out++) {
      char *text = write_json(m, keras3_out);
      cJSON *doc = text ? cJSON_Parse(text) : NULL;
      const cJSON *entry = cJSON_GetArrayItem(layers_of(doc), 3);
      const char *module =
          cJSON_GetStringValue(cJSON_GetObjectItem(entry, "module"));
      const char *registered =
          cJSON_GetStringValue(cJSON_GetObjectItem(entry, "registered_name"));
      const cJSON *scale =
          cJSON_GetObjectItem(cJSON_GetObjectItem(entry, "config"), "scale");
      CHECK_MSG(
          module && registered &&
              strcmp(module, keras3_out
                                 ? "keras.src.applications.inception_resnet_v2"
                                 : "tf_keras.src.applications."
                                   "inception_resnet_v2") == 0 &&
              strcmp(registered, keras3_out ? "CustomScaleLayer"
                                            : "Custom>CustomScaleLayer") == 0,
          "dialect %d keras3=%d: module %s, registered_name %s", dialect,
          keras3_out, module ? module : "(none)",
          registered ? registered : "(none)");
      CHECK_MSG(cJSON_IsNumber(scale) && scale->valuedouble == 0.17,
                "dialect %d keras3=%d: scale", dialect, keras3_out);
      /* Keras 3: the two tensors as one list argument, as Keras calls it. */
      const cJSON *node =
          cJSON_GetArrayItem(cJSON_GetObjectItem(entry, "inbound_nodes"), 0);
      const cJSON *arg =
          keras3_out ? cJSON_GetArrayItem(cJSON_GetObjectItem(node, "args"), 0)
                     : node;
      CHECK_MSG(cJSON_IsArray(arg) && cJSON_GetArraySize(arg) == 2,
                "dialect %d keras3=%d: inbound node", dialect, keras3_out);
      cJSON_Delete(doc);
      free(text);
    }
    mxu_model_free(m);
  }
  /* Its scale is required; its inputs are of one shape. */
  const char *in = "[[\"in\", 0, 0]]", *out = "[[\"cs\", 0, 0]]";
  char bad[2048];
  snprintf(bad, sizeof bad,
           "%s, %s, {\"class_name\": \"CustomScaleLayer\", \"config\": "
           "{\"name\": \"cs\"}, \"name\": \"cs\", \"inbound_nodes\": "
           "[[[\"d1\", 0, 0, {}], [\"d2\", 0, 0, {}]]]}",
           dense_reading("d1", "[[[\"in\", 0, 0, {}]]]"),
           dense_reading("d2", "[[[\"in\", 0, 0, {}]]]"));
  EXPECT_JSON_FAIL(functional_with(bad, in, out), MXU_ERR_FORMAT,
                   "layer 'cs' (CustomScaleLayer)", "scale is missing");
  snprintf(bad, sizeof bad,
           "%s, {\"class_name\": \"CustomScaleLayer\", \"config\": "
           "{\"name\": \"cs\", \"scale\": 0.1}, \"name\": \"cs\", "
           "\"inbound_nodes\": [[[\"d1\", 0, 0, {}], [\"in\", 0, 0, {}]]]}",
           dense_reading("d1", "[[[\"in\", 0, 0, {}]]]"));
  EXPECT_JSON_FAIL(functional_with(bad, in, out), MXU_ERR_SHAPE,
                   "layer 'cs' (CustomScaleLayer)",
                   "inputs of shapes (2) and (4); CustomScaleLayer takes two "
                   "of one shape");
  snprintf(bad, sizeof bad,
           "%s, {\"class_name\": \"CustomScaleLayer\", \"config\": "
           "{\"name\": \"cs\", \"scale\": 0.1}, \"name\": \"cs\", "
           "\"inbound_nodes\": [[[\"d1\", 0, 0, {}]]]}",
           dense_reading("d1", "[[[\"in\", 0, 0, {}]]]"));
  EXPECT_JSON_FAIL(functional_with(bad, in, out), MXU_ERR_FORMAT,
                   "layer 'cs' (CustomScaleLayer)",
                   "CustomScaleLayer takes 2 inputs, got 1");
}

static void reads_functional(void) {
  reads_keras_apps();
  reads_tiny_resnet();
  reads_nested_and_shared();
  /* The repository's own Functional recipes. */
  static const char *const recipes[] = {"models/resnet20.json",
                                        "models/cifar10_functional.json"};
  for (int r = 0; r < 2; r++) {
    char *text = check_slurp(recipes[r]);
    cJSON *doc = text ? cJSON_Parse(text) : NULL;
    free(text);
    mxu_model *m = NULL;
    CHECK_OK(mxu_model_load_json(recipes[r], &m, NULL, NULL));
    if (m && doc) {
      check_names(recipes[r], m, layers_of(doc));
      check_written(recipes[r], m, layers_of(doc));
    }
    mxu_model_free(m);
    cJSON_Delete(doc);
  }
  errors_functional();
  reads_ops();
  reads_activation_ops();
  reads_shape_ops();
}

/* ---- errors -------------------------------------------------------------
 */

/* A model file far larger than a model JSON (sparse: no disk). */
static void too_large(void) {
  char path[] = "/tmp/mxu_test_json_huge_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0 && write(fd, "{", 1) == 1 &&
        ftruncate(fd, (off_t)65 << 20) == 0);
  if (fd >= 0) close(fd);
  mxu_model *m = NULL;
  CHECK(mxu_model_load_json(path, &m, NULL, NULL) == MXU_ERR_FORMAT && !m);
  CHECK_MSG(has(mxu_errmsg(), "MXU_MAX_TEXT_BYTES") && has(mxu_errmsg(), path),
            "%s", mxu_errmsg());
  unlink(path);
}

static void errors_text(void) {
  too_large();
  /* Truncated: the source and the place where cJSON stopped. */
  char cut[600];
  snprintf(cut, sizeof cut, "%.*s", 500, fashion_keras26);
  EXPECT_JSON_FAIL(cut, MXU_ERR_FORMAT, "malformed JSON at line 1, column",
                   "ends before the value is complete");
  EXPECT_JSON_FAIL(
      "{\"class_name\": \"Sequential\",\n  \"config\": {\"layers\": "
      "[1,]}}",
      MXU_ERR_FORMAT, "line 2, column", "not valid JSON");
  /* A mistake mid-file with a bracket left open is no cut (it was said
   * to be); a cut in a string or a number is. */
  EXPECT_JSON_FAIL(
      "{\"class_name\": \"Sequential\",\n \"config\": {\"layers\": [{\"a\": "
      "1}, {\"b\": 2}},\n \"x\": 1}",
      MXU_ERR_FORMAT, "line 2, column 42", "not valid JSON here");
  EXPECT_JSON_FAIL("{\"class_name\": \"Seq", MXU_ERR_FORMAT, "column 17",
                   "ends before the value is complete");
  EXPECT_JSON_FAIL("{\"a\": [1, 2.5", MXU_ERR_FORMAT, "malformed",
                   "ends before the value is complete");
  EXPECT_JSON_FAIL("{} trailing", MXU_ERR_FORMAT, "text after the end", NULL);
  EXPECT_JSON_FAIL("", MXU_ERR_FORMAT, "empty", NULL);
  EXPECT_JSON_FAIL("[1, 2]", MXU_ERR_FORMAT, "class_name", NULL);
  EXPECT_JSON_FAIL("{\"config\": {}}", MXU_ERR_FORMAT, "class_name is missing",
                   NULL);
  EXPECT_JSON_FAIL(
      "{\"class_name\": \"Functional\", \"config\": {\"name\": \"m\", "
      "\"layers\": [], \"input_layers\": [], \"output_layers\": []}}",
      MXU_ERR_FORMAT, "input_layers must list", NULL);
  EXPECT_JSON_FAIL("{\"class_name\": \"Subclassed\", \"config\": {}}",
                   MXU_ERR_UNSUPPORTED, "model class 'Subclassed'",
                   "Functional");
  EXPECT_JSON_FAIL("{\"class_name\": \"Sequential\"}", MXU_ERR_FORMAT,
                   "config is missing", NULL);
  EXPECT_JSON_FAIL(
      "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"s\"}}",
      MXU_ERR_FORMAT, "config.layers is missing", NULL);
  EXPECT_JSON_FAIL(
      "{\"class_name\": \"Sequential\", \"config\": {\"layers\": []}}",
      MXU_ERR_FORMAT, "no layers", NULL);
  EXPECT_JSON_FAIL(image_model("42"), MXU_ERR_FORMAT, "layer 1",
                   "must be an object");
  EXPECT_JSON_FAIL(image_model("{\"class_name\": \"Conv2D\"}"), MXU_ERR_FORMAT,
                   "layer 1 (Conv2D)", "config is missing");
  EXPECT_JSON_FAIL(image_model("{\"class_name\": \"Conv2D\", \"config\": [1]}"),
                   MXU_ERR_FORMAT, "config must be an object", NULL);
}

/* One layer after a (28, 28, 1) input, and what its refusal says. */
static const struct {
  const char *layer;
  mxu_status status;
  const char *needle;
} layer_cases[] = {
    {"{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c\", "
     "\"filters\": "
     "8, \"kernel_size\": 3, \"padding\": \"causal\"}}",
     MXU_ERR_UNSUPPORTED, "padding 'causal'"},
    {"{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c\", "
     "\"filters\": "
     "8, \"kernel_size\": 3, \"kernel_initializer\": {\"class_name\": "
     "\"STFTInitializer\", \"config\": {\"seed\": null}}}}",
     MXU_ERR_UNSUPPORTED,
     "kernel_initializer: initializer 'STFTInitializer' is not supported"},
    {"{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c\", "
     "\"filters\": "
     "8, \"kernel_size\": 3, \"bias_initializer\": {\"class_name\": "
     "\"VarianceScaling\", \"config\": {\"mode\": \"fan_sum\"}}}}",
     MXU_ERR_UNSUPPORTED, "mode 'fan_sum' is not supported"},
    {"{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c\", "
     "\"filters\": "
     "8, \"kernel_size\": 3, \"kernel_regularizer\": {\"class_name\": "
     "\"OrthogonalRegularizer\", \"config\": {\"factor\": 0.01}}}}",
     MXU_ERR_UNSUPPORTED,
     "kernel_regularizer {'class_name': 'OrthogonalRegularizer'"},
    {"{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c\", "
     "\"filters\": "
     "8, \"kernel_size\": 3, \"activity_regularizer\": {\"class_name\": "
     "\"OrthogonalRegularizer\", \"config\": {\"factor\": 0.01}}}}",
     MXU_ERR_UNSUPPORTED,
     "activity_regularizer {'class_name': 'OrthogonalRegularizer'"},
    {"{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c\", "
     "\"filters\": "
     "8, \"kernel_size\": 3, \"kernel_constraint\": \"radial\"}}",
     MXU_ERR_UNSUPPORTED, "kernel_constraint 'radial'"},
    {"{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c\", "
     "\"filters\": "
     "8, \"kernel_size\": 3, \"activation\": \"glu\"}}",
     MXU_ERR_UNSUPPORTED, "activation 'glu' is not supported (only linear"},
    {"{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c\", "
     "\"filters\": "
     "8, \"kernel_size\": [3]}}",
     MXU_ERR_FORMAT, "kernel_size must be"},
    {"{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c\", "
     "\"filters\": "
     "8}}",
     MXU_ERR_FORMAT, "kernel_size is missing"},
    {"{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c\", "
     "\"filters\": "
     "8, \"kernel_size\": 3, \"lora_rank\": 4}}",
     MXU_ERR_UNSUPPORTED, "lora_rank 4"},
    {"{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c\", "
     "\"filters\": "
     "8, \"kernel_size\": 3, \"trainable\": false}}",
     MXU_ERR_UNSUPPORTED, "trainable false"},
    {"{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c\", "
     "\"filters\": "
     "8, \"kernel_size\": 3, \"dtype\": {\"module\": \"keras\", "
     "\"class_name\": \"DTypePolicy\", \"config\": {\"name\": "
     "\"mixed_bfloat16\"}, \"registered_name\": null}}}",
     MXU_ERR_UNSUPPORTED, "dtype 'mixed_bfloat16'"},
    {"{\"module\": \"my_layers\", \"class_name\": \"Conv2D\", \"config\": "
     "{\"name\": \"c\", \"filters\": 8, \"kernel_size\": 3}}",
     MXU_ERR_UNSUPPORTED, "module 'my_layers'"},
    {"{\"class_name\": \"Dropout\", \"config\": {\"name\": \"d\", \"rate\": "
     "0.5, \"noise_shape\": [4, 1, 1, 1]}}",
     MXU_ERR_UNSUPPORTED, "noise_shape [4, 1, 1, 1] is not supported"},
    {"{\"class_name\": \"Dropout\", \"config\": {\"name\": \"d\", \"rate\": "
     "1.5}}",
     MXU_ERR_ARG, "rate must be in [0, 1)"},
    {"{\"class_name\": \"BatchNormalization\", \"config\": {\"name\": "
     "\"bn\", "
     "\"axis\": [1]}}",
     MXU_ERR_UNSUPPORTED,
     "axis [1] is not supported (only the last axis, -1 "
     "or 3)"},
    {"{\"class_name\": \"BatchNormalization\", \"config\": {\"name\": "
     "\"bn\", "
     "\"renorm\": true}}",
     MXU_ERR_UNSUPPORTED, "renorm true"},
    {"{\"class_name\": \"BatchNormalization\", \"config\": {\"name\": "
     "\"bn\", "
     "\"momentum\": \"high\"}}",
     MXU_ERR_FORMAT, "momentum must be a number, got 'high'"},
    {"{\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": "
     "0}}",
     MXU_ERR_FORMAT, "units must be a positive integer, got 0"},
    {"{\"class_name\": \"Activation\", \"config\": {\"name\": \"a\"}}",
     MXU_ERR_FORMAT, "activation is missing"},
    {"{\"class_name\": \"Flatten\", \"config\": {\"name\": \"f\"}}, "
     "{\"class_name\": \"Flatten\", \"config\": {\"name\": \"f\"}}",
     MXU_ERR_ARG, "already used"},
    {"{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": "
     "[null, 2]}}",
     MXU_ERR_FORMAT, "InputLayer must be the first"},
};
/* Every unsupported layer of a file in one message; reading goes on past
 * each (an identity stands in), and an error it then meets is said to
 * come after them. */
static void errors_listed_together(void) {
  mxu_model *m = NULL;
  CHECK(mxu_model_from_json(
            image_model("{\"class_name\": \"Conv2D\", \"config\": {\"name\": "
                        "\"c1\", \"filters\": 4, \"kernel_size\": 3, "
                        "\"activation\": \"glu\"}}, {\"class_name\": "
                        "\"LocallyConnected2D\", "
                        "\"config\": {\"name\": \"c3d\", \"filters\": 4}}, "
                        "{\"class_name\": \"Conv2D\", \"config\": {\"name\": "
                        "\"c2\", \"filters\": 4, \"kernel_size\": 3, "
                        "\"kernel_initializer\": \"mystery\"}}"),
            "model.json", &m, NULL, NULL) == MXU_ERR_UNSUPPORTED);
  CHECK(m == NULL);
  const char *msg = mxu_errmsg();
  CHECK_MSG(
      has(msg, "model.json: 3 layers are not supported") &&
          has(msg, "1. model.json: layer 'c1' (Conv2D): activation "
                   "'glu' is not supported") &&
          has(msg,
              "2. model.json: layer 'c3d' (LocallyConnected2D): layer class "
              "LocallyConnected2D is not supported\n") &&
          has(msg, "3. model.json: layer 'c2' (Conv2D): "
                   "kernel_initializer: initializer 'mystery'") &&
          has(msg, "mxu has the layer classes Conv2D"),
      "%s", msg);
  /* A shape the stand-in cannot give stops the reading after the items. */
  CHECK(mxu_model_from_json(
            image_model("{\"class_name\": \"LocallyConnected2D\", \"config\": "
                        "{\"name\": \"c3d\", \"filters\": 4}}, "
                        "{\"class_name\": \"Conv2D\", \"config\": "
                        "{\"name\": \"big\", \"filters\": 4, "
                        "\"kernel_size\": 40}}"),
            "model.json", &m, NULL, NULL) == MXU_ERR_UNSUPPORTED);
  CHECK_MSG(has(mxu_errmsg(),
                "layer class LocallyConnected2D is not supported (mxu has") &&
                has(mxu_errmsg(), mxu_layer_class_names()) &&
                has(mxu_errmsg(), "reading stopped after them at: "
                                  "model.json: layer 'big' (Conv2D)"),
            "%s", mxu_errmsg());
}

static void errors_layers(void) {
  EXPECT_JSON_FAIL(
      image_model(
          "{\"class_name\": \"LocallyConnected2D\", \"config\": {\"name\": "
          "\"c3d\", \"filters\": 8}}"),
      MXU_ERR_UNSUPPORTED, "layer 'c3d' (LocallyConnected2D)",
      "layer class LocallyConnected2D is not supported");
  /* The whole message, as the issue spells it. */
  mxu_model *m = NULL;
  CHECK(mxu_model_from_json(
            image_model("{\"class_name\": \"Conv2D\", \"config\": {\"name\": "
                        "\"conv2d_1\", \"filters\": 8, \"kernel_size\": [3, "
                        "3], \"data_format\": \"channels_first\"}}"),
            "model.json", &m, NULL, NULL) == MXU_ERR_UNSUPPORTED);
  CHECK_MSG(strcmp(mxu_errmsg(),
                   "model.json: layer 'conv2d_1' (Conv2D): data_format "
                   "'channels_first' is not supported (only "
                   "'channels_last')") == 0,
            "%s", mxu_errmsg());
  /* Groups must divide the channels (the image has 1). */
  EXPECT_JSON_FAIL(
      image_model("{\"class_name\": \"Conv2D\", \"config\": {\"name\": "
                  "\"c\", \"filters\": 8, \"kernel_size\": 3, "
                  "\"groups\": 2}}"),
      MXU_ERR_ARG, "layer 'c' (Conv2D)", "groups 2 must divide the input's 1");
  EXPECT_JSON_FAIL(
      image_model("{\"class_name\": \"Conv2D\", \"config\": {\"name\": "
                  "\"c\", \"filters\": 8, \"kernel_size\": 3, "
                  "\"strides\": 2, \"dilation_rate\": 2}}"),
      MXU_ERR_ARG, "layer 'c' (Conv2D)",
      "dilation_rate > 1 with strides > 1 is not supported");
  EXPECT_JSON_FAIL(
      image_model("{\"class_name\": \"Conv2D\", \"config\": {\"name\": "
                  "\"c\", \"filters\": 8, \"kernel_size\": 3, "
                  "\"data_format\": \"channels_first\"}}"),
      MXU_ERR_UNSUPPORTED, "layer 'c' (Conv2D)",
      "data_format 'channels_first' is not supported");
  EXPECT_JSON_FAIL(
      image_model("{\"class_name\": \"Conv2D\", \"config\": {\"name\": "
                  "\"conv2d\", \"filters\": \"64\", \"kernel_size\": "
                  "3}}"),
      MXU_ERR_FORMAT, "layer 'conv2d' (Conv2D)",
      "filters must be a positive integer, got '64'");

  for (size_t i = 0; i < sizeof layer_cases / sizeof *layer_cases; i++)
    EXPECT_JSON_FAIL(image_model(layer_cases[i].layer), layer_cases[i].status,
                     layer_cases[i].needle, NULL);
  EXPECT_JSON_FAIL(model_with("[null, null, 28, 1]", ""), MXU_ERR_SHAPE,
                   "dimension 1 is null", NULL);
  EXPECT_JSON_FAIL(model_with("[null, 28, \"28\", 1]", ""), MXU_ERR_FORMAT,
                   "batch_input_shape", "positive integers");
  EXPECT_JSON_FAIL(model_with("[null, 4]",
                              "{\"class_name\": \"Dense\", \"config\": "
                              "{\"name\": \"d\", \"units\": 3, "
                              "\"batch_input_shape\": [null, 5]}}"),
                   MXU_ERR_FORMAT, "does not match the InputLayer", NULL);
  EXPECT_JSON_FAIL(
      "{\"class_name\": \"Sequential\", \"config\": {\"layers\": "
      "[{\"class_name\": \"Dense\", \"config\": {\"units\": 3}}]}}",
      MXU_ERR_FORMAT, "input shape is unknown", NULL);
}

static void errors_compile(void) {
  static const struct {
    const char *compile;
    const char *needle;
  } cases[] = {
      {"{\"optimizer\": \"ftrl\"}", "optimizer 'ftrl' is not supported"},
      {"{\"optimizer\": {\"class_name\": \"RMSprop\", \"config\": "
       "{\"learning_rate\": 0.001, \"gradient_accumulation_steps\": 4}}}",
       "gradient_accumulation_steps 4 is not supported"},
      {"{\"optimizer\": {\"class_name\": \"Adam\", \"config\": "
       "{\"learning_rate\": {\"class_name\": \"WarmupSchedule\", "
       "\"config\": {}}}}}",
       "schedule 'WarmupSchedule' is not supported"},
      {"{\"optimizer\": {\"class_name\": \"Adamax\", \"config\": "
       "{\"amsgrad\": true}}}",
       "amsgrad true"},
      {"{\"loss\": \"ctc\"}", "loss: loss 'ctc' is not supported"},
      {"{\"loss\": {\"class_name\": \"SparseCategoricalCrossentropy\", "
       "\"config\": {\"label_smoothing\": 0.1}}}",
       "label_smoothing 0.1"},
      {"{\"loss\": {\"class_name\": \"CategoricalCrossentropy\", "
       "\"config\": {\"ignore_class\": 3}}}",
       "ignore_class is an option of SparseCategoricalCrossentropy only"},
      {"{\"loss\": {\"class_name\": \"CategoricalFocalCrossentropy\", "
       "\"config\": {\"alpha\": [0.2, 0.3, 0.5]}}}",
       "alpha must be one number (a weight per class is not supported)"},
      {"{\"metrics\": [{\"class_name\": \"CosineSimilarity\", "
       "\"config\": {\"axis\": 1}}]}",
       "CosineSimilarity with axis 1 is not supported"},
      {"{\"metrics\": [{\"class_name\": \"MeanIoU\", \"config\": "
       "{\"num_classes\": 3, \"sparse_y_pred\": true}}]}",
       "MeanIoU with sparse_y_pred true takes the output as class ids"},
      {"{\"metrics\": [{\"class_name\": \"BinaryIoU\", \"config\": "
       "{\"target_class_ids\": [0, 2], \"threshold\": 0.5}}]}",
       "BinaryIoU's target_class_ids [0, 2]: expected [0, 1], [0] or [1]"},
      {"{\"metrics\": [\"pearson_correlation\"]}",
       "metrics: 'pearson_correlation' is not supported"},
      {"{\"metrics\": [\"f1_score\"]}",
       "metrics: 'f1_score' is Keras' F1Score(), whose average None logs a "
       "score per class"},
      {"{\"metrics\": [{\"class_name\": \"AUC\", \"config\": {\"name\": "
       "\"prg\", \"curve\": \"PRGAIN\"}}]}",
       "AUC with curve 'PRGAIN' is not supported"},
      {"{\"metrics\": [{\"class_name\": \"AUC\", \"config\": "
       "{\"num_thresholds\": 100}}]}",
       "AUC with num_thresholds 100 is not supported"},
      {"{\"metrics\": [{\"class_name\": \"TopKCategoricalAccuracy\", "
       "\"config\": {\"name\": \"top3\", \"k\": 3}}]}",
       "TopKCategoricalAccuracy with k 3 is not supported: mxu computes "
       "Keras' default k=5"},
      {"{\"metrics\": [{\"class_name\": \"F1Score\", \"config\": "
       "{\"name\": \"f1_score\", \"average\": null, \"threshold\": null}}]}",
       "metrics: F1Score with average None logs a score per class"},
      {"{\"metrics\": [{\"class_name\": \"AUC\", \"config\": "
       "{\"multi_label\": true}}]}",
       "AUC with multi_label true is not supported"},
      {"{\"metrics\": [{\"class_name\": \"AUC\", \"config\": {\"name\": "
       "\"a_name_of_sixty_four_characters_or_more_which_mxu_cannot_log_"
       "at_all\"}}]}",
       "mxu logs names of at most 63 characters"},
      {"{\"metrics\": [\"accuracy\", {\"class_name\": \"AUC\", "
       "\"config\": {\"name\": \"accuracy\"}}]}",
       "is listed twice"},
      {"{\"metrics\": [\"accuracy\", \"mse\", \"accuracy\"]}",
       "metrics: 'accuracy' is listed twice"},
      {"{\"metrics\": [\"accuracy\", \"mse\", \"mae\", \"acc\", "
       "\"precision\", \"recall\", \"root_mean_squared_error\", "
       "\"top_k_categorical_accuracy\", \"auc\", \"prc\", "
       "\"true_positives\", \"false_positives\", \"true_negatives\", "
       "\"false_negatives\", \"binary_crossentropy\", "
       "\"mean_squared_error\", \"binary_accuracy\"]}",
       "'binary_accuracy': mxu computes at most 16 metrics"},
      {"{\"metrics\": [{\"class_name\": \"Precision\", \"config\": "
       "{\"thresholds\": [0.3, 0.7]}}]}",
       "Precision with thresholds [0.3, 0.7] is not supported"},
      {"{\"metrics\": [{\"class_name\": \"Recall\", \"config\": "
       "{\"thresholds\": 1.5}}]}",
       "Recall with thresholds 1.5 is not supported"},
      {"{\"loss_weights\": \"half\"}", "loss_weights: 'half'"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    mxu_model *m = NULL;
    mxu_compile_config compile = mxu_compile_defaults();
    compile.batch_size = 77;
    int has_compile = 5;
    mxu_status s =
        mxu_model_from_json(compiled_with("compile_config", cases[i].compile),
                            "test.json", &m, &compile, &has_compile);
    CHECK_MSG(s == MXU_ERR_UNSUPPORTED && m == NULL, "case %zu: %s: %s", i,
              mxu_status_name(s), mxu_errmsg());
    CHECK_MSG(has(mxu_errmsg(), "test.json: compile_config") &&
                  has(mxu_errmsg(), cases[i].needle),
              "case %zu: '%s' lacks '%s'", i, mxu_errmsg(), cases[i].needle);
    /* A refused read leaves the caller's settings alone. */
    CHECK(compile.batch_size == 77 && compile.optimizer.kind == MXU_ADAM &&
          compile.metrics[0] == NULL && has_compile == 0);
    mxu_model_free(m);
  }
  /* Without a compile config to fill, the section is not read at all. */
  mxu_model *m = read_json(
      compiled_with("compile_config", "{\"loss\": \"mse\"}"), NULL, NULL);
  mxu_model_free(m);
}

static void missing_file(void) {
  mxu_model *m = (mxu_model *)1;
  mxu_status s =
      mxu_model_load_json("/nonexistent/mxu/model.json", &m, NULL, NULL);
  CHECK(s == MXU_ERR_IO && m == NULL);
  CHECK(has(mxu_errmsg(), "/nonexistent/mxu/model.json"));
  CHECK(mxu_model_from_json(NULL, "x", &m, NULL, NULL) == MXU_ERR_ARG);
  CHECK(mxu_model_to_json(NULL, 0, NULL) == MXU_ERR_ARG);
}

/* ---- compile_config forms -------------------------------------------------
 */

/* The model the last compile settings were read with: names they give
 * ("roc=auc") point at text it keeps, so it lives until the next read. */
static mxu_model *settings_model;

static void keep_settings_model(mxu_model *m) {
  mxu_model_free(settings_model);
  settings_model = m;
}

static mxu_compile_config compile_of(const char *key, const char *compile) {
  mxu_compile_config c = mxu_compile_defaults();
  int has_compile = 0;
  keep_settings_model(read_json(compiled_with(key, compile), &c, &has_compile));
  CHECK(has_compile == 1);
  return c;
}

static void compile_forms(void) {
  /* AMSGrad and centered RMSprop, read as Keras writes them. */
  mxu_compile_config a =
      compile_of("compile_config", "{\"optimizer\": {\"class_name\": \"Adam\", "
                                   "\"config\": {\"amsgrad\": true}}}");
  CHECK(a.optimizer.kind == MXU_ADAM && a.optimizer.amsgrad == 1);
  a = compile_of("compile_config",
                 "{\"optimizer\": {\"class_name\": \"RMSprop\", "
                 "\"config\": {\"centered\": true, \"momentum\": 0.5}}}");
  CHECK(a.optimizer.kind == MXU_RMSPROP && a.optimizer.centered == 1 &&
        a.optimizer.momentum == 0.5f);
  /* use_ema with Keras' defaults (momentum 0.99, no overwrites). */
  a = compile_of("compile_config",
                 "{\"optimizer\": {\"class_name\": \"Adam\", \"config\": "
                 "{\"use_ema\": true, \"ema_overwrite_frequency\": null}}}");
  CHECK(a.optimizer.use_ema == 1 && a.optimizer.ema_momentum == 0.99f &&
        a.optimizer.ema_overwrite_frequency == 0);
  mxu_compile_config c = compile_of(
      "compile_config", "{\"optimizer\": \"sgd\", \"loss\": "
                        "\"categorical_crossentropy\", \"metrics\": "
                        "[\"accuracy\"], \"steps_per_execution\": 100}");
  CHECK(c.optimizer.kind == MXU_SGD && c.optimizer.learning_rate == 0.01f &&
        c.optimizer.momentum == 0 && c.optimizer.nesterov == 0);
  CHECK(c.loss == MXU_CATEGORICAL_CROSSENTROPY && !c.from_logits);
  CHECK(c.metrics[0] && strcmp(c.metrics[0], "accuracy") == 0);

  c = compile_of(
      "compile_config",
      "{\"optimizer\": {\"module\": \"keras.optimizers\", "
      "\"class_name\": \"SGD\", \"config\": {\"name\": \"SGD\", "
      "\"learning_rate\": 0.05, \"momentum\": 0.9, \"nesterov\": "
      "true, \"weight_decay\": null, \"use_ema\": false}, "
      "\"registered_name\": null}, \"loss\": {\"module\": "
      "\"keras.losses\", \"class_name\": "
      "\"SparseCategoricalCrossentropy\", \"config\": {\"name\": "
      "\"sparse_categorical_crossentropy\", \"reduction\": "
      "\"sum_over_batch_size\", \"from_logits\": true, "
      "\"ignore_class\": null}, \"registered_name\": null}, "
      "\"metrics\": [{\"module\": \"keras.metrics\", \"class_name\": "
      "\"CategoricalAccuracy\", \"config\": {\"name\": "
      "\"categorical_accuracy\", \"dtype\": \"float32\"}, "
      "\"registered_name\": null}]}");
  CHECK(c.optimizer.kind == MXU_SGD && c.optimizer.learning_rate == 0.05f &&
        c.optimizer.momentum == 0.9f && c.optimizer.nesterov == 1);
  CHECK(c.loss == MXU_SPARSE_CATEGORICAL_CROSSENTROPY && c.from_logits == 1);
  CHECK(c.metrics[0] && strcmp(c.metrics[0], "categorical_accuracy") == 0);

  c = compile_of("compile_config",
                 "{\"optimizer\": {\"class_name\": \"Adam\", \"config\": "
                 "{\"learning_rate\": 0.0003, \"beta_1\": 0.8, \"beta_2\": "
                 "0.99, \"epsilon\": 1e-08}}, \"metrics\": "
                 "[\"sparse_categorical_accuracy\"]}");
  CHECK(c.optimizer.kind == MXU_ADAM && c.optimizer.learning_rate == 3e-4f &&
        c.optimizer.beta_1 == 0.8f && c.optimizer.beta_2 == 0.99f &&
        c.optimizer.epsilon == 1e-8f);
  CHECK(c.loss == MXU_SPARSE_CATEGORICAL_CROSSENTROPY); /* the default */

  /* tf.keras 2.x h5 files: training_config, optimizer_config, metrics
   * wrapped and nested. */
  c = compile_of(
      "training_config",
      "{\"loss\": \"sparse_categorical_crossentropy\", \"metrics\": "
      "[[{\"class_name\": \"MeanMetricWrapper\", \"config\": {\"name\": "
      "\"accuracy\", \"dtype\": \"float32\", \"fn\": "
      "\"sparse_categorical_accuracy\"}}]], \"weighted_metrics\": null, "
      "\"loss_weights\": null, \"optimizer_config\": {\"class_name\": "
      "\"Adam\", \"config\": {\"name\": \"Adam\", \"learning_rate\": 0.0005, "
      "\"decay\": 0.0, \"beta_1\": 0.9, \"beta_2\": 0.999, \"epsilon\": "
      "1e-07, \"amsgrad\": false}}}");
  CHECK(c.optimizer.kind == MXU_ADAM && c.optimizer.learning_rate == 5e-4f);
  CHECK(c.metrics[0] && strcmp(c.metrics[0], "accuracy") == 0);

  /* The target losses by alias and class, with their options. */
  c = compile_of("compile_config",
                 "{\"loss\": \"mse\", \"metrics\": [\"mae\"]}");
  CHECK(c.loss == MXU_MEAN_SQUARED_ERROR && strcmp(c.metrics[0], "mae") == 0);
  c = compile_of("compile_config",
                 "{\"loss\": {\"class_name\": \"BinaryCrossentropy\", "
                 "\"config\": {\"name\": \"binary_crossentropy\", "
                 "\"from_logits\": true, \"label_smoothing\": 0.1, \"axis\": "
                 "-1, \"reduction\": \"sum_over_batch_size\"}}, \"metrics\": "
                 "[{\"class_name\": \"BinaryAccuracy\", \"config\": "
                 "{\"name\": \"binary_accuracy\", \"threshold\": 0.5}}]}");
  CHECK(c.loss == MXU_BINARY_CROSSENTROPY && c.from_logits == 1 &&
        c.label_smoothing == 0.1f);
  CHECK(c.metrics[0] && strcmp(c.metrics[0], "binary_accuracy") == 0);
  c = compile_of("compile_config",
                 "{\"loss\": {\"class_name\": \"Huber\", \"config\": "
                 "{\"name\": \"huber_loss\", \"delta\": 2.5}}, \"metrics\": "
                 "[{\"class_name\": \"MeanSquaredError\", \"config\": "
                 "{\"name\": \"mean_squared_error\"}}]}");
  CHECK(c.loss == MXU_HUBER && c.huber_delta == 2.5f);
  CHECK(c.metrics[0] && strcmp(c.metrics[0], "mean_squared_error") == 0);
  c = compile_of("compile_config",
                 "{\"loss\": {\"class_name\": "
                 "\"SparseCategoricalCrossentropy\", \"config\": {\"name\": "
                 "\"sparse_categorical_crossentropy\", \"from_logits\": true, "
                 "\"ignore_class\": 255}}}");
  CHECK(c.loss == MXU_SPARSE_CATEGORICAL_CROSSENTROPY && c.from_logits &&
        c.has_ignore_class && c.ignore_class == 255);
  c = compile_of("compile_config",
                 "{\"loss\": {\"class_name\": "
                 "\"SparseCategoricalCrossentropy\", \"config\": "
                 "{\"ignore_class\": null}}}");
  CHECK(!c.has_ignore_class);
  /* Keras' MeanIoU of one-hot targets is OneHotMeanIoU, under its name. */
  c = compile_of("compile_config",
                 "{\"metrics\": [{\"class_name\": \"MeanIoU\", \"config\": "
                 "{\"name\": \"mean_io_u\", \"num_classes\": 3, "
                 "\"ignore_class\": null, \"sparse_y_true\": false, "
                 "\"sparse_y_pred\": false, \"axis\": -1}}]}");
  CHECK_MSG(
      c.metrics[0] &&
          !strcmp(c.metrics[0], "mean_io_u=one_hot_mean_iou(num_classes=3)"),
      "read as %s", c.metrics[0] ? c.metrics[0] : "nothing");
  mxu_model *refused = NULL;
  CHECK(mxu_model_from_json(
            compiled_with("compile_config",
                          "{\"loss\": {\"class_name\": "
                          "\"SparseCategoricalCrossentropy\", \"config\": "
                          "{\"ignore_class\": 2.5}}}"),
            "test.json", &refused, &c, NULL) == MXU_ERR_FORMAT &&
        has(mxu_errmsg(), "ignore_class must be an integer") && !refused);
  c = compile_of("training_config", "{\"loss\": \"kld\"}");
  CHECK(c.loss == MXU_KL_DIVERGENCE);
}

/* ---- models of several outputs ------------------------------------------
 */

/* Input "in" (4,) -> Dense "a", "b" (and "c"), each a model output in that
 * order, with the given compile section under key. */
static const char *outputs_with(int three, const char *key,
                                const char *compile) {
  static char text[16384];
  const char *in = "[[[\"in\", 0, 0, {}]]]";
  char layers[4096];
  snprintf(layers, sizeof layers, "%s, %s%s%s", dense_reading("a", in),
           dense_reading("b", in), three ? ", " : "",
           three ? dense_reading("c", in) : "");
  const char *model =
      functional_with(layers, "[[\"in\", 0, 0]]",
                      three ? "[[\"a\", 0, 0], [\"b\", 0, 0], [\"c\", 0, 0]]"
                            : "[[\"a\", 0, 0], [\"b\", 0, 0]]");
  size_t n = strlen(model); /* without its closing brace */
  snprintf(text, sizeof text, "%.*s, \"%s\": %s}", (int)(n - 1), model, key,
           compile);
  return text;
}

static mxu_compile_config outputs_compile(int three, const char *key,
                                          const char *compile) {
  mxu_compile_config c = mxu_compile_defaults();
  int has_compile = 0;
  mxu_model *m = read_json(outputs_with(three, key, compile), &c, &has_compile);
  CHECK(m && mxu_model_output_count(m) == (three ? 3 : 2));
  CHECK(has_compile == 1);
  keep_settings_model(m);
  return c;
}

static int same_name(const char *a, const char *b) {
  return a == b || (a && b && strcmp(a, b) == 0);
}

/* Output k's entry is loss (from_logits, label_smoothing), weight and
 * metric (NULL: none). */
static void expect_output_at(int line, const mxu_compile_config *c, int k,
                             mxu_loss loss, int from_logits, float smoothing,
                             float weight, const char *metric) {
  const mxu_output_loss *o = &c->outputs[k];
  CHECK_MSG(k < c->output_count && o->loss == loss &&
                o->from_logits == from_logits &&
                o->label_smoothing == smoothing && o->weight == weight &&
                same_name(o->metrics[0], metric) && !o->metrics[1],
            "line %d: output %d of %d: loss %s, from_logits %d, smoothing "
            "%g, weight %g, metric %s",
            line, k, c->output_count, mxu_loss_name(o->loss), o->from_logits,
            (double)o->label_smoothing, (double)o->weight,
            o->metrics[0] ? o->metrics[0] : "(none)");
}

#define EXPECT_OUTPUT(c, k, loss, logits, smoothing, weight, metric)           \
  expect_output_at(__LINE__, &(c), k, loss, logits, smoothing, weight, metric)

static void reads_output_losses(void) {
  /* Keras 3: a dict by output name of names and objects, weights for
   * some outputs, metrics for some. */
  mxu_compile_config c = outputs_compile(
      1, "compile_config",
      "{\"optimizer\": \"sgd\", \"loss\": {\"b\": \"mse\", \"a\": "
      "\"sparse_categorical_crossentropy\", \"c\": {\"module\": "
      "\"keras.losses\", \"class_name\": \"BinaryCrossentropy\", \"config\": "
      "{\"name\": \"binary_crossentropy\", \"reduction\": "
      "\"sum_over_batch_size\", \"from_logits\": true, \"label_smoothing\": "
      "0.1, \"axis\": -1}, \"registered_name\": null}}, \"loss_weights\": "
      "{\"b\": 0.5, \"c\": 2.0}, \"metrics\": {\"a\": [\"accuracy\"], \"b\": "
      "\"mae\"}, \"weighted_metrics\": null}");
  CHECK(c.output_count == 3 && c.optimizer.kind == MXU_SGD);
  EXPECT_OUTPUT(c, 0, MXU_SPARSE_CATEGORICAL_CROSSENTROPY, 0, 0.0f, 1.0f,
                "accuracy");
  EXPECT_OUTPUT(c, 1, MXU_MEAN_SQUARED_ERROR, 0, 0.0f, 0.5f, "mae");
  EXPECT_OUTPUT(c, 2, MXU_BINARY_CROSSENTROPY, 1, 0.1f, 2.0f, NULL);

  /* Lists in output order; a list of lists of metrics (Keras 3). */
  c = outputs_compile(1, "compile_config",
                      "{\"loss\": [\"mse\", \"mae\", {\"class_name\": "
                      "\"Huber\", \"config\": {\"delta\": 2.5}}], "
                      "\"loss_weights\": [1, 2, 3], \"metrics\": [[\"mse\"], "
                      "[], [{\"class_name\": \"MeanAbsoluteError\", "
                      "\"config\": {\"name\": \"mean_absolute_error\"}}]]}");
  CHECK(c.output_count == 3);
  EXPECT_OUTPUT(c, 0, MXU_MEAN_SQUARED_ERROR, 0, 0.0f, 1.0f, "mse");
  EXPECT_OUTPUT(c, 1, MXU_MEAN_ABSOLUTE_ERROR, 0, 0.0f, 2.0f, NULL);
  EXPECT_OUTPUT(c, 2, MXU_HUBER, 0, 0.0f, 3.0f, "mean_absolute_error");
  CHECK(c.outputs[2].huber_delta == 2.5f && c.outputs[0].huber_delta == 1.0f);

  /* A list of losses the same for every output is still a list. */
  c = outputs_compile(0, "compile_config",
                      "{\"loss\": [\"mse\", \"mse\"], \"metrics\": "
                      "[[\"mae\"], [\"mae\"]]}");
  CHECK(c.output_count == 2);
  EXPECT_OUTPUT(c, 0, MXU_MEAN_SQUARED_ERROR, 0, 0.0f, 1.0f, "mae");
  EXPECT_OUTPUT(c, 1, MXU_MEAN_SQUARED_ERROR, 0, 0.0f, 1.0f, "mae");

  /* One loss and one metric for every output: the plain fields. */
  c = outputs_compile(0, "compile_config",
                      "{\"loss\": \"mse\", \"loss_weights\": null, "
                      "\"metrics\": [\"mae\"]}");
  CHECK(c.output_count == 0 && c.loss == MXU_MEAN_SQUARED_ERROR &&
        same_name(c.metrics[0], "mae"));
  c = outputs_compile(0, "compile_config",
                      "{\"loss\": \"mse\", \"loss_weights\": [1, 1.0], "
                      "\"metrics\": {\"a\": \"mae\", \"b\": [\"mae\"]}}");
  CHECK(c.output_count == 0 && c.loss == MXU_MEAN_SQUARED_ERROR &&
        same_name(c.metrics[0], "mae"));
  c = outputs_compile(1, "compile_config", "{\"loss\": \"kld\"}");
  CHECK(c.output_count == 0 && c.loss == MXU_KL_DIVERGENCE && !c.metrics[0]);

  /* One loss with weights, or metrics for some outputs only: copies. */
  c = outputs_compile(0, "compile_config",
                      "{\"loss\": {\"class_name\": "
                      "\"CategoricalCrossentropy\", \"config\": "
                      "{\"from_logits\": true}}, \"loss_weights\": [1, 0.5], "
                      "\"metrics\": [\"accuracy\"]}");
  CHECK(c.output_count == 2);
  EXPECT_OUTPUT(c, 0, MXU_CATEGORICAL_CROSSENTROPY, 1, 0.0f, 1.0f, "accuracy");
  EXPECT_OUTPUT(c, 1, MXU_CATEGORICAL_CROSSENTROPY, 1, 0.0f, 0.5f, "accuracy");
  c = outputs_compile(0, "compile_config",
                      "{\"loss\": \"mse\", \"metrics\": {\"b\": [\"mse\"]}}");
  CHECK(c.output_count == 2);
  EXPECT_OUTPUT(c, 0, MXU_MEAN_SQUARED_ERROR, 0, 0.0f, 1.0f, NULL);
  EXPECT_OUTPUT(c, 1, MXU_MEAN_SQUARED_ERROR, 0, 0.0f, 1.0f, "mse");
  c = outputs_compile(0, "compile_config",
                      "{\"loss\": \"mse\", \"metrics\": {}}");
  CHECK(c.output_count == 2);
  EXPECT_OUTPUT(c, 0, MXU_MEAN_SQUARED_ERROR, 0, 0.0f, 1.0f, NULL);
  EXPECT_OUTPUT(c, 1, MXU_MEAN_SQUARED_ERROR, 0, 0.0f, 1.0f, NULL);

  /* tf.keras 2 h5: training_config's dicts, its losses with fn, and the
   * metrics a list per output, named after the output. */
  c = outputs_compile(
      0, "training_config",
      "{\"loss\": {\"a\": \"sparse_categorical_crossentropy\", \"b\": "
      "{\"class_name\": \"BinaryCrossentropy\", \"config\": {\"reduction\": "
      "\"auto\", \"name\": \"binary_crossentropy\", \"from_logits\": true, "
      "\"label_smoothing\": 0.1, \"axis\": -1, \"fn\": "
      "\"binary_crossentropy\"}}}, \"metrics\": [[{\"class_name\": "
      "\"MeanMetricWrapper\", \"config\": {\"name\": \"a_accuracy\", "
      "\"dtype\": \"float32\", \"fn\": \"sparse_categorical_accuracy\"}}], "
      "[{\"class_name\": \"MeanMetricWrapper\", \"config\": {\"name\": "
      "\"b_mae\", \"dtype\": \"float32\", \"fn\": "
      "\"mean_absolute_error\"}}]], \"weighted_metrics\": null, "
      "\"loss_weights\": {\"a\": 1.0, \"b\": 0.25}, \"optimizer_config\": "
      "{\"class_name\": \"Custom>SGD\", \"config\": {\"name\": \"SGD\", "
      "\"learning_rate\": 0.1, \"is_legacy_optimizer\": false}}}");
  CHECK(c.output_count == 2 && c.optimizer.kind == MXU_SGD);
  EXPECT_OUTPUT(c, 0, MXU_SPARSE_CATEGORICAL_CROSSENTROPY, 0, 0.0f, 1.0f,
                "accuracy");
  EXPECT_OUTPUT(c, 1, MXU_BINARY_CROSSENTROPY, 1, 0.1f, 0.25f, "mae");
  /* tf.keras 2's list for every output, and [null] for an output
   * without. */
  c = outputs_compile(0, "training_config",
                      "{\"loss\": \"mse\", \"metrics\": [\"mae\"]}");
  CHECK(c.output_count == 0 && same_name(c.metrics[0], "mae"));
  c = outputs_compile(0, "training_config",
                      "{\"loss\": \"mse\", \"metrics\": [[\"mae\"], "
                      "[null]]}");
  CHECK(c.output_count == 2);
  EXPECT_OUTPUT(c, 0, MXU_MEAN_SQUARED_ERROR, 0, 0.0f, 1.0f, "mae");
  EXPECT_OUTPUT(c, 1, MXU_MEAN_SQUARED_ERROR, 0, 0.0f, 1.0f, NULL);

  /* A model of one output ("dense"): a list or dict of one is its loss;
   * only a weight other than 1 makes an entry. */
  c = compile_of("compile_config", "{\"loss\": [\"mse\"]}");
  CHECK(c.output_count == 0 && c.loss == MXU_MEAN_SQUARED_ERROR);
  c = compile_of("compile_config",
                 "{\"loss\": {\"dense\": \"mae\"}, \"loss_weights\": "
                 "{\"dense\": 1.0}, \"metrics\": {\"dense\": [\"mse\"]}}");
  CHECK(c.output_count == 0 && c.loss == MXU_MEAN_ABSOLUTE_ERROR &&
        same_name(c.metrics[0], "mse"));
  c = compile_of("compile_config",
                 "{\"loss\": \"categorical_crossentropy\", \"loss_weights\": "
                 "[0.5], \"metrics\": [\"accuracy\"]}");
  CHECK(c.output_count == 1 && c.loss == MXU_CATEGORICAL_CROSSENTROPY);
  EXPECT_OUTPUT(c, 0, MXU_CATEGORICAL_CROSSENTROPY, 0, 0.0f, 0.5f, "accuracy");
}

/* Several metrics an output: lists, objects (Precision, Recall,
 * RootMeanSquaredError in both dialects' forms), in order. */
static void reads_several_metrics(void) {
  mxu_compile_config c = outputs_compile(
      0, "compile_config",
      "{\"loss\": {\"a\": \"binary_crossentropy\", \"b\": \"mse\"}, "
      "\"metrics\": {\"a\": [\"accuracy\", {\"module\": \"keras.metrics\", "
      "\"class_name\": \"Precision\", \"config\": {\"name\": "
      "\"precision_2\", \"dtype\": \"float32\", \"thresholds\": null, "
      "\"top_k\": null, \"class_id\": null}, \"registered_name\": null}, "
      "\"recall\"], \"b\": [\"mae\", {\"class_name\": "
      "\"RootMeanSquaredError\", \"config\": {\"name\": "
      "\"root_mean_squared_error\"}}]}}");
  CHECK(c.output_count == 2);
  const char *a[] = {"accuracy", "precision_2=precision", "recall", NULL};
  const char *b[] = {"mae", "root_mean_squared_error", NULL};
  for (int m = 0; m < 4; m++) {
    CHECK_MSG(same_name(c.outputs[0].metrics[m], a[m]), "a's metric %d: %s", m,
              c.outputs[0].metrics[m] ? c.outputs[0].metrics[m] : "none");
    CHECK_MSG(same_name(c.outputs[1].metrics[m], m < 3 ? b[m] : NULL),
              "b's metric %d", m);
  }
  /* tf.keras 2's h5: a list per output, each named after it; one flat
   * list (Keras' every output) the same for both. */
  c = outputs_compile(
      0, "training_config",
      "{\"loss\": \"mse\", \"metrics\": [[{\"class_name\": "
      "\"MeanMetricWrapper\", \"config\": {\"name\": \"a_mae\", \"fn\": "
      "\"mean_absolute_error\"}}, {\"class_name\": \"Recall\", \"config\": "
      "{\"name\": \"a_recall\", \"thresholds\": 0.5}}], [null]]}");
  CHECK(c.output_count == 2 && same_name(c.outputs[0].metrics[0], "mae") &&
        same_name(c.outputs[0].metrics[1], "recall") &&
        !c.outputs[0].metrics[2] && !c.outputs[1].metrics[0]);
  /* An AUC's curve, not its name, decides what it computes; Keras logs
   * each by its own name (AUC(curve="PR") keeps the default "auc"), as do
   * the counts ("tp"). */
  c = compile_of("compile_config",
                 "{\"loss\": \"binary_crossentropy\", \"metrics\": "
                 "[{\"class_name\": \"AUC\", \"config\": {\"name\": \"auc\", "
                 "\"curve\": \"PR\"}}, {\"class_name\": \"AUC\", \"config\": "
                 "{\"name\": \"auc_1\"}}, {\"class_name\": \"TruePositives\", "
                 "\"config\": {\"name\": \"tp\", \"thresholds\": null}}]}");
  CHECK(same_name(c.metrics[0], "auc=prc") &&
        same_name(c.metrics[1], "auc_1=auc") &&
        same_name(c.metrics[2], "tp=true_positives") && !c.metrics[3]);
  c = outputs_compile(0, "compile_config",
                      "{\"loss\": \"mse\", \"metrics\": [\"mae\", \"mse\"]}");
  CHECK(c.output_count == 0 && same_name(c.metrics[0], "mae") &&
        same_name(c.metrics[1], "mse") && !c.metrics[2]);
}

/* Refusals name the key path, what is wrong and the outputs. */
static void errors_output_losses(void) {
  static const struct {
    const char *compile;
    mxu_status status;
    const char *needle, *needle2;
  } cases[] = {
      {"{\"loss\": {\"a\": \"mse\", \"x\": \"mae\", \"b\": \"mse\"}}",
       MXU_ERR_FORMAT, "compile_config: loss: 'x' is not an output",
       "'a', 'b'"},
      {"{\"loss\": {\"a\": \"mse\", \"x\": \"mae\", \"y\": \"mse\"}}",
       MXU_ERR_FORMAT, "loss: 'x', 'y' are not outputs", "'a', 'b'"},
      {"{\"loss\": {\"a\": \"mse\"}}", MXU_ERR_FORMAT,
       "compile_config: loss: output 'b' has no loss", "'a', 'b'"},
      {"{\"loss\": [\"mse\"]}", MXU_ERR_FORMAT,
       "compile_config: loss: a list of 1 losses for a model of 2 outputs",
       "'a', 'b'"},
      {"{\"loss\": [\"mse\", \"ctc\"]}", MXU_ERR_UNSUPPORTED,
       "compile_config: loss[1]: loss 'ctc' is not supported", NULL},
      {"{\"loss\": {\"a\": \"mse\", \"b\": {\"class_name\": \"Huber\", "
       "\"config\": {\"delta\": -1}}}}",
       MXU_ERR_FORMAT, "compile_config: loss['b']: delta must be positive",
       NULL},
      {"{\"metrics\": {\"a\": [\"mae\", \"mse\", \"mae\"]}}",
       MXU_ERR_UNSUPPORTED,
       "compile_config: metrics['a']: 'mae' is listed twice", NULL},
      {"{\"metrics\": [[\"mae\"], [\"accuracy\", {\"class_name\": "
       "\"Precision\", \"config\": {\"thresholds\": [0.2, 0.4]}}]]}",
       MXU_ERR_UNSUPPORTED,
       "compile_config: metrics[1]: Precision with thresholds [0.2, 0.4] is "
       "not supported",
       "one threshold"},
      {"{\"metrics\": [\"accuracy\", \"mae\", \"ctc\"]}", MXU_ERR_UNSUPPORTED,
       "compile_config: metrics: 'ctc'", "is not supported"},
      {"{\"metrics\": [[\"mae\"]]}", MXU_ERR_FORMAT,
       "compile_config: metrics: a list of 1 lists of metrics", "'a', 'b'"},
      {"{\"metrics\": [\"mae\", [\"mae\"]]}", MXU_ERR_FORMAT,
       "compile_config: metrics: mixes metrics and lists", NULL},
      {"{\"metrics\": {\"a\": [\"mae\"], \"z\": [\"mae\"]}}", MXU_ERR_FORMAT,
       "compile_config: metrics: 'z' is not an output", "'a', 'b'"},
      {"{\"metrics\": {\"b\": [\"ctc\"]}}", MXU_ERR_UNSUPPORTED,
       "compile_config: metrics['b']: 'ctc' is not supported", NULL},
      {"{\"metrics\": \"accuracy\"}", MXU_ERR_UNSUPPORTED,
       "compile_config: metrics: 'accuracy' is not supported", NULL},
      {"{\"loss_weights\": {\"a\": 1, \"z\": 2}}", MXU_ERR_FORMAT,
       "compile_config: loss_weights: 'z' is not an output", "'a', 'b'"},
      {"{\"loss_weights\": [1, 2, 3]}", MXU_ERR_FORMAT,
       "compile_config: loss_weights: a list of 3 loss weights", "'a', 'b'"},
      {"{\"loss_weights\": [1, \"x\"]}", MXU_ERR_FORMAT,
       "compile_config: loss_weights[1]: 'x' is not a loss weight", NULL},
      {"{\"loss_weights\": {\"b\": -2}}", MXU_ERR_FORMAT,
       "compile_config: loss_weights['b']: -2 is not a loss weight", NULL},
      {"{\"loss_weights\": 0.5}", MXU_ERR_UNSUPPORTED,
       "compile_config: loss_weights: 0.5 is not supported", NULL},
  };
  /* Failures say "line <the case's index>". */
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
    expect_fail_at((int)i, outputs_with(0, "compile_config", cases[i].compile),
                   cases[i].status, cases[i].needle, cases[i].needle2);
  /* A model of one output: its name in a dict, one entry in a list. */
  EXPECT_JSON_FAIL(compiled_with("compile_config", "{\"loss\": {\"a\": "
                                                   "\"mse\"}}"),
                   MXU_ERR_FORMAT, "compile_config: loss: 'a' is not an output",
                   "'dense'");
  EXPECT_JSON_FAIL(
      compiled_with("training_config", "{\"loss_weights\": [0.5, 0.5]}"),
      MXU_ERR_FORMAT,
      "training_config: loss_weights: a list of 2 loss weights "
      "for a model of 1 output",
      NULL);
}

/* Keras' own files: golden/outputs (make_outputs.py) compiled with
 * dicts by output name, Keras 3's compile_config and tf.keras 2's
 * training_config. */
static void reads_golden_outputs(void) {
  static const char *const files[] = {"tests/golden/outputs/model.keras",
                                      "tests/golden/outputs/model.h5"};
  for (int f = 0; f < 2; f++) {
    mxu_model *m = NULL;
    mxu_compile_config c = mxu_compile_defaults();
    int has_compile = 0;
    CHECK_OK(mxu_model_load_json(files[f], &m, &c, &has_compile));
    CHECK_MSG(has_compile == 1 && c.output_count == 3, "%s: output_count %d",
              files[f], c.output_count);
    CHECK(m && mxu_model_output_count(m) == 3);
    EXPECT_OUTPUT(c, 0, MXU_SPARSE_CATEGORICAL_CROSSENTROPY, 0, 0.0f, 1.0f,
                  "accuracy");
    EXPECT_OUTPUT(c, 1, MXU_MEAN_SQUARED_ERROR, 0, 0.0f, 0.5f, "mae");
    EXPECT_OUTPUT(c, 2, MXU_BINARY_CROSSENTROPY, 1, 0.1f, 2.0f, "accuracy");
    CHECK(c.optimizer.kind == MXU_SGD && c.optimizer.learning_rate == 0.1f);
    mxu_model_free(m);
  }
}

static int same_metrics(const char *const *a, const char *const *b) {
  for (int m = 0; m < MXU_MAX_METRICS; m++)
    if (!same_name(a[m], b[m])) return 0;
  return 1;
}

static void expect_same_outputs(const char *label, const mxu_compile_config *a,
                                const mxu_compile_config *b) {
  CHECK_MSG(a->output_count == b->output_count, "%s: output_count %d, want %d",
            label, a->output_count, b->output_count);
  for (int k = 0; k < a->output_count && k < b->output_count; k++) {
    const mxu_output_loss *x = &a->outputs[k], *y = &b->outputs[k];
    CHECK_MSG(x->loss == y->loss && x->from_logits == y->from_logits &&
                  x->label_smoothing == y->label_smoothing &&
                  x->huber_delta == y->huber_delta && x->weight == y->weight &&
                  same_metrics(x->metrics, y->metrics),
              "%s: output %d differs (%s/%s, weight %g/%g, metric %s/%s)",
              label, k, mxu_loss_name(x->loss), mxu_loss_name(y->loss),
              (double)x->weight, (double)y->weight,
              x->metrics[0] ? x->metrics[0] : "(none)",
              y->metrics[0] ? y->metrics[0] : "(none)");
  }
}

/* A compiled model's per-output settings come back through both JSON
 * dialects, the .h5's training_config and the .keras archive. */
static void writes_output_losses(void) {
  mxu_model *m = read_json(outputs_with(1, "unused", "null"), NULL, NULL);
  if (!m) return;
  mxu_compile_config c = mxu_compile_defaults();
  c.optimizer = mxu_sgd(0.1f, 0.0f, 0);
  c.batch_size = 4;
  c.backend = MXU_BACKEND_CPU_REF;
  c.output_count = 3;
  for (int k = 0; k < 3; k++) c.outputs[k] = mxu_output_loss_defaults();
  c.outputs[0].from_logits = 1;
  c.outputs[0].metrics[0] = "accuracy";
  c.outputs[1].loss = MXU_HUBER;
  c.outputs[1].huber_delta = 2.5f;
  c.outputs[1].weight = 0.5f;
  c.outputs[1].metrics[0] = "mae";
  c.outputs[1].metrics[1] = "root_mean_squared_error";
  c.outputs[1].metrics[2] = "recall";
  c.outputs[2].loss = MXU_BINARY_CROSSENTROPY;
  c.outputs[2].from_logits = 1;
  c.outputs[2].label_smoothing = 0.1f;
  c.outputs[2].weight = 2.0f;
  mxu_status s = mxu_compile(m, &c);
  CHECK_MSG(s == MXU_OK, "compile of three outputs: %s: %s", mxu_status_name(s),
            mxu_errmsg());
  if (s != MXU_OK) {
    mxu_model_free(m);
    return;
  }
  for (int keras3 = 0; keras3 < 2; keras3++) {
    char *text = write_json(m, keras3);
    cJSON *doc = text ? cJSON_Parse(text) : NULL;
    const cJSON *config = cJSON_GetObjectItem(doc, "compile_config");
    /* Keras' dicts by output name, as its own files have them. */
    const cJSON *loss = cJSON_GetObjectItem(config, "loss"),
                *weights = cJSON_GetObjectItem(config, "loss_weights"),
                *metrics = cJSON_GetObjectItem(config, "metrics");
    CHECK(cJSON_IsString(cJSON_GetObjectItem(loss, "c")) == 0 &&
          cJSON_IsObject(cJSON_GetObjectItem(loss, "c")));
    CHECK(cJSON_GetArraySize(loss) == 3 && cJSON_GetArraySize(weights) == 3);
    CHECK(cJSON_GetObjectItem(weights, "b") &&
          cJSON_GetObjectItem(weights, "b")->valuedouble == 0.5);
    CHECK(cJSON_GetArraySize(metrics) == 2 &&
          cJSON_GetArraySize(cJSON_GetObjectItem(metrics, "b")) == 3 &&
          !cJSON_GetObjectItem(metrics, "c"));
    /* RootMeanSquaredError and Recall are classes, written as objects. */
    const cJSON *rmse =
        cJSON_GetArrayItem(cJSON_GetObjectItem(metrics, "b"), 1);
    CHECK(cJSON_IsObject(rmse) &&
          has(cJSON_GetObjectItem(rmse, "class_name")->valuestring,
              "RootMeanSquaredError"));
    cJSON_Delete(doc);
    mxu_compile_config back = mxu_compile_defaults();
    int has_compile = 0;
    mxu_model *again = text ? read_json(text, &back, &has_compile) : NULL;
    CHECK(has_compile == 1);
    expect_same_outputs(keras3 ? "keras 3 json" : "tf.keras 2 json", &back, &c);
    free(text);
    mxu_model_free(again);
  }
  CHECK(check_temp_make("json_outputs"));
  static const char *const names[] = {"outputs.h5", "outputs.keras"};
  for (int f = 0; f < 2; f++) {
    const char *path = temp_path(names[f]);
    CHECK_OK(mxu_save_model(m, path, NULL));
    mxu_model *again = NULL;
    mxu_compile_config back = mxu_compile_defaults();
    int has_compile = 0;
    CHECK_OK(mxu_model_load_json(path, &again, &back, &has_compile));
    CHECK(has_compile == 1);
    expect_same_outputs(path, &back, &c);
    mxu_model_free(again);
    /* Loaded whole, compiled as saved. */
    again = NULL;
    CHECK_OK(mxu_load_model(path, MXU_BACKEND_CPU_REF, &again, NULL));
    if (again) expect_same_outputs(path, &again->compile, &c);
    mxu_model_free(again);
  }
  check_remove_tree(check_temp_dir);
  /* Several outputs under one loss: the one loss, and the metric for each
   * output in a dict Keras 3 takes (its flat list needs one per output). */
  mxu_compile_config one = mxu_compile_defaults();
  one.loss = MXU_MEAN_SQUARED_ERROR;
  one.metrics[0] = "mae";
  one.batch_size = 4;
  one.backend = MXU_BACKEND_CPU_REF;
  CHECK_OK(mxu_compile(m, &one));
  for (int keras3 = 0; keras3 < 2; keras3++) {
    char *text = write_json(m, keras3);
    CHECK(text && has(text, "\"loss\": \"mean_squared_error\"") &&
          has(text, "\"loss_weights\": null"));
    mxu_compile_config back = mxu_compile_defaults();
    mxu_model *again = text ? read_json(text, &back, NULL) : NULL;
    CHECK(back.output_count == 0 && back.loss == MXU_MEAN_SQUARED_ERROR &&
          same_name(back.metrics[0], "mae"));
    free(text);
    mxu_model_free(again);
  }
  mxu_model_free(m);
}

/* ---- robustness
 * ---------------------------------------------------------------
 */

/* Every prefix of a real text is malformed, and says so. */
static void every_truncation(void) {
  size_t length = strlen(fashion_keras26);
  char *text = malloc(length + 1);
  int wrong = 0;
  for (size_t n = 0; text && n < length; n++) {
    memcpy(text, fashion_keras26, n);
    text[n] = 0;
    mxu_model *m = NULL;
    mxu_status s = mxu_model_from_json(text, "cut.json", &m, NULL, NULL);
    wrong += s != MXU_ERR_FORMAT || m != NULL;
    mxu_model_free(m);
  }
  CHECK_MSG(wrong == 0, "%d prefixes were not refused as malformed", wrong);
  free(text);
}

typedef struct node_ref {
  cJSON *parent, *item;
} node_ref;

static int collect(cJSON *parent, node_ref *refs, int count, int capacity) {
  for (cJSON *c = parent->child; c && count < capacity; c = c->next) {
    refs[count++] = (node_ref){parent, c};
    count = collect(c, refs, count, capacity);
  }
  return count;
}

static cJSON *replacement(int kind) {
  switch (kind) {
  case 0: return cJSON_CreateNull();
  case 1: return cJSON_CreateString("x");
  case 2: return cJSON_CreateNumber(-1);
  case 3: return cJSON_CreateNumber(1e300);
  case 4: return cJSON_CreateTrue();
  case 5: return cJSON_CreateArray();
  case 6: return cJSON_CreateObject();
  default: return NULL; /* remove the node */
  }
}

/* Each node of a real document, replaced by each kind of value or removed:
 * the reader answers every one without crashing (ASan/UBSan check it). */
/* Each node of the document replaced by each kind of odd value, or
 * removed: a message or a model, never a crash. */
static void mutate_every_node(const char *label, const char *text) {
  enum { KINDS = 8, MAX_NODES = 4096 };
  node_ref *refs = malloc(MAX_NODES * sizeof *refs);
  cJSON *probe = cJSON_Parse(text);
  int nodes = probe && refs ? collect(probe, refs, 0, MAX_NODES) : 0;
  cJSON_Delete(probe);
  CHECK_MSG(nodes > 300, "%s: %d nodes", label, nodes);
  int accepted = 0, runs = 0;
  for (int i = 0; i < nodes; i++)
    for (int kind = 0; kind < KINDS; kind++) {
      cJSON *doc = cJSON_Parse(text);
      collect(doc, refs, 0, MAX_NODES);
      cJSON *with = replacement(kind);
      /* cJSON's replace by pointer drops the key; keep it. */
      if (with && refs[i].item->string)
        with->string = strdup(refs[i].item->string);
      if (with)
        cJSON_ReplaceItemViaPointer(refs[i].parent, refs[i].item, with);
      else
        cJSON_Delete(cJSON_DetachItemViaPointer(refs[i].parent, refs[i].item));
      char *mutant = cJSON_PrintUnformatted(doc);
      cJSON_Delete(doc);
      mxu_model *m = NULL;
      mxu_compile_config c = mxu_compile_defaults();
      int has_compile = 0;
      mxu_status s =
          mxu_model_from_json(mutant, "mutant", &m, &c, &has_compile);
      CHECK((s == MXU_OK) == (m != NULL));
      CHECK(s == MXU_OK || strlen(mxu_errmsg()) > 0);
      accepted += s == MXU_OK;
      runs++;
      mxu_model_free(m);
      cJSON_free(mutant);
    }
  printf("mutations of %s: %d runs, %d accepted (harmless changes)\n", label,
         runs, accepted);
  free(refs);
}

/* A config value of the written entry named `name`, as compact text. */
static char *written_value(const cJSON *doc, const char *name,
                           const char *key) {
  for (const cJSON *e = layers_of(doc) ? layers_of(doc)->child : NULL; e;
       e = e->next) {
    const cJSON *config = cJSON_GetObjectItemCaseSensitive(e, "config");
    const char *n =
        cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(config, "name"));
    if (n && strcmp(n, name) == 0)
      return cJSON_PrintUnformatted(
          cJSON_GetObjectItemCaseSensitive(config, key));
  }
  return NULL;
}

/* A key of the written entry named `name` (beside its config), as compact
 * text. */
static char *written_entry_key(const cJSON *doc, const char *name,
                               const char *key) {
  for (const cJSON *e = layers_of(doc) ? layers_of(doc)->child : NULL; e;
       e = e->next) {
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(e, "config"), "name");
    if (cJSON_IsString(n) && strcmp(n->valuestring, name) == 0)
      return cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(e, key));
  }
  return NULL;
}

/* Each (layer, key, value as compact text) of want in the written doc. */
static void expect_written(const char *label, int keras3, const cJSON *doc,
                           const char *const (*want)[3], size_t count) {
  for (size_t i = 0; i < count; i++) {
    char *got = doc ? written_value(doc, want[i][0], want[i][1]) : NULL;
    CHECK_MSG(got && strcmp(got, want[i][2]) == 0,
              "%s keras3=%d: %s's %s written as %s, want %s", label, keras3,
              want[i][0], want[i][1], got ? got : "(none)", want[i][2]);
    cJSON_free(got);
  }
}

/* A layer entry after an InputLayer of `shape`, refused with `status`
 * and a message naming layer 'e' and holding needle. */
typedef struct refusal {
  const char *shape, *entry;
  mxu_status status;
  const char *needle;
} refusal;

static void expect_refused(const refusal *refused, size_t count) {
  for (size_t i = 0; i < count; i++)
    EXPECT_JSON_FAIL(model_with(refused[i].shape, refused[i].entry),
                     refused[i].status, "layer 'e'", refused[i].needle);
}

/* The sequence net of test_golden (make_sequence.py) in both dialects:
 * int32 ids, Embedding, Conv1D causal/strided/grouped, the 1-D poolings;
 * read as Keras wrote them and written back with sizes as lists of one,
 * padding 'causal' and the input's dtype. Then what is refused. */
static void reads_sequences(void) {
  static const char *const files[] = {"tests/golden/sequence/model.tf2.json",
                                      "tests/golden/sequence/model.k3.json"};
  for (int f = 0; f < 2; f++) {
    mxu_model *m = NULL;
    CHECK_OK(mxu_model_load_json(files[f], &m, NULL, NULL));
    if (!m) continue;
    CHECK(mxu_model_param_count(m, 1) == 761 && mxu_model_layer_count(m) == 12);
    const mxu_layer *in = mxu_model_input(m);
    CHECK(in->config.input_dtype == 1 && in->out_shape.rank == 1 &&
          in->out_shape.dims[0] == 16);
    int causal = mxu_model_node(m, 2);
    const mxu_layer *c = &m->layers[causal];
    CHECK_MSG(strcmp(c->name, "causal") == 0 && c->cls == &mxu_conv1d_class &&
                  c->config.conv.padding == MXU_CAUSAL &&
                  c->config.conv.kernel_size[0] == 1 &&
                  c->config.conv.kernel_size[1] == 3 &&
                  c->config.conv.dilation_rate[1] == 2 &&
                  shape_is(c->out_shape, 2, 16, 6, 0),
              "%s: layer 2 is %s", files[f], c->name);
    for (int keras3 = 0; keras3 < 2; keras3++) {
      round_trip_text(files[f], m, keras3);
      char *text = write_json(m, keras3);
      cJSON *doc = text ? cJSON_Parse(text) : NULL;
      static const char *const want[][3] = {
          {"ids", "dtype", "\"int32\""},
          {"causal", "kernel_size", "[3]"},
          {"causal", "padding", "\"causal\""},
          {"causal", "dilation_rate", "[2]"},
          {"strided", "strides", "[2]"},
          {"grouped", "groups", "2"},
          {"max1d", "pool_size", "[2]"},
          {"avg1d", "strides", "[1]"},
          {"embed", "output_dim", "8"},
          {"embed", "mask_zero", "false"},
          {"gmp1d", "keepdims", "false"},
      };
      expect_written(files[f], keras3, doc, want, sizeof want / sizeof *want);
      cJSON_Delete(doc);
      free(text);
    }
    mxu_model_free(m);
  }
  static const refusal refused[] = {
      {"[null, 2, 3]",
       "{\"class_name\": \"Embedding\", \"config\": {\"name\": \"e\", "
       "\"input_dim\": 10, \"output_dim\": 4, \"mask_zero\": true}}",
       MXU_ERR_UNSUPPORTED, "mask_zero over ids (2, 3) is not supported"},
      {"[null, 6]",
       "{\"class_name\": \"Embedding\", \"config\": {\"name\": \"e\", "
       "\"output_dim\": 4}}",
       MXU_ERR_FORMAT, "input_dim is missing"},
      {"[null, 6]",
       "{\"class_name\": \"Embedding\", \"config\": {\"name\": \"e\", "
       "\"input_dim\": 10, \"output_dim\": 4, \"lora_rank\": 4}}",
       MXU_ERR_FORMAT, "lora_rank"},
      {"[null, 4, 4, 3]",
       "{\"class_name\": \"Conv1D\", \"config\": {\"name\": \"e\", "
       "\"filters\": 2, \"kernel_size\": [3]}}",
       MXU_ERR_SHAPE, "expects (steps, channels) input, got (4, 4, 3)"},
      {"[null, 8, 3]",
       "{\"class_name\": \"Conv1D\", \"config\": {\"name\": \"e\", "
       "\"filters\": 2, \"kernel_size\": [3, 3]}}",
       MXU_ERR_FORMAT, "a positive integer or a list of one"},
      {"[null, 8, 3]",
       "{\"class_name\": \"Conv1D\", \"config\": {\"name\": \"e\", "
       "\"filters\": 2, \"kernel_size\": 3, \"padding\": \"full\"}}",
       MXU_ERR_UNSUPPORTED, "'valid', 'same' or 'causal'"},
      {"[null, 8, 3]",
       "{\"class_name\": \"MaxPooling1D\", \"config\": {\"name\": \"e\", "
       "\"pool_size\": 2, \"padding\": \"causal\"}}",
       MXU_ERR_UNSUPPORTED, "'valid' or 'same'"},
      {"[null, 4, 4, 3]",
       "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"e\", "
       "\"filters\": 2, \"kernel_size\": 3, \"padding\": \"causal\"}}",
       MXU_ERR_UNSUPPORTED, "'valid' or 'same'"},
      {"[null, 2, 3]",
       "{\"class_name\": \"Conv1D\", \"config\": {\"name\": \"e\", "
       "\"filters\": 2, \"kernel_size\": 3}}",
       MXU_ERR_SHAPE, "smaller than the 1x3 kernel"},
      {"[null, 4, 4, 3]",
       "{\"class_name\": \"GlobalAveragePooling1D\", \"config\": {\"name\": "
       "\"e\"}}",
       MXU_ERR_SHAPE, "expects (steps, channels) input"},
  };
  expect_refused(refused, sizeof refused / sizeof *refused);
  /* A sequence of any length (Keras' Input(shape=(None, 3))): refused
   * alone, read for data of (12, 3) samples, (12, 3, 1) too. */
  const char *any_length = temp_path("any_length.json");
  const char *text =
      model_with("[null, null, 3]", "{\"class_name\": \"LSTM\", \"config\": "
                                    "{\"name\": \"l\", \"units\": 2}}");
  check_write_bytes(any_length, text, strlen(text));
  mxu_model *m = NULL;
  EXPECT_FAIL(mxu_model_load_json(any_length, &m, NULL, NULL), MXU_ERR_SHAPE,
              "dimension 1 is null (any length)");
  const mxu_shape samples[] = {{2, {12, 3}}, {3, {12, 3, 1}}};
  for (int i = 0; i < 2; i++) {
    CHECK_OK(mxu_model_load_json_for(any_length, samples[i], &m, NULL, NULL));
    CHECK(m && shape_is(mxu_model_input(m)->out_shape, 2, 12, 3, 0));
    mxu_model_free(m);
    m = NULL;
  }
  EXPECT_FAIL(
      mxu_model_load_json_for(any_length, (mxu_shape){1, {36}}, &m, NULL, NULL),
      MXU_ERR_SHAPE, "dimension 1 is null");
  /* tf.keras 2 writes a first layer's own [null, null] after an
   * InputLayer of [null, 7]: the InputLayer's length. */
  mxu_model *after = read_json(
      model_with("[null, 7]",
                 "{\"class_name\": \"Embedding\", \"config\": {\"name\": "
                 "\"e\", \"batch_input_shape\": [null, null], \"input_dim\": "
                 "20, \"output_dim\": 4}}"),
      NULL, NULL);
  CHECK(after && shape_is(LAYER(after, 0)->out_shape, 2, 7, 4, 0));
  mxu_model_free(after);
  /* SpatialDropout1D: one draw per channel of (steps, channels). */
  mxu_model *dropped = read_json(
      model_with("[null, 6, 3]",
                 "{\"class_name\": \"SpatialDropout1D\", \"config\": "
                 "{\"name\": \"sd\", \"rate\": 0.2, \"noise_shape\": null, "
                 "\"seed\": null}}"),
      NULL, NULL);
  if (dropped) {
    CHECK(LAYER(dropped, 0)->cls == &mxu_spatial_dropout1d_class &&
          LAYER(dropped, 0)->config.dropout.rate == 0.2f);
    round_trip_text("SpatialDropout1D", dropped, 0);
    round_trip_text("SpatialDropout1D", dropped, 1);
  }
  mxu_model_free(dropped);
  EXPECT_JSON_FAIL(model_with("[null, 4, 4, 3]",
                              "{\"class_name\": \"SpatialDropout1D\", "
                              "\"config\": {\"name\": \"e\", \"rate\": 0.2}}"),
                   MXU_ERR_SHAPE, "layer 'e'", "takes (steps, channels)");
  /* An input of strings (TextVectorization's) is not one mxu reads. */
  EXPECT_JSON_FAIL(
      "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"s\", "
      "\"layers\": [{\"class_name\": \"InputLayer\", \"config\": "
      "{\"batch_input_shape\": [null, 1], \"dtype\": \"string\", \"name\": "
      "\"text\"}}]}}",
      MXU_ERR_UNSUPPORTED, "dtype string is not supported",
      "int32 or int64 token ids");
}

/* EinsumDense (the einsum_dense golden net, both Kerases' texts): round
 * trips; equations Dense does not compute, and a bias over some of the
 * new axes, refused with what mxu takes. */
static void reads_einsum_dense(void) {
  static const char *const files[] = {
      "tests/golden/einsum_dense/model.tf2.json",
      "tests/golden/einsum_dense/model.k3.json"};
  for (int f = 0; f < 2; f++) {
    mxu_model *m = NULL;
    CHECK_OK(mxu_model_load_json(files[f], &m, NULL, NULL));
    if (!m) continue;
    int merge = node_named(m, "merge"), split = node_named(m, "split");
    CHECK(merge >= 0 && m->layers[merge].config.dense.contracted == 2 &&
          !m->layers[merge].config.dense.use_bias &&
          m->layers[merge].out_shape.rank == 2);
    mxu_param_decl decls[MXU_MAX_LAYER_PARAMS];
    CHECK(split >= 0 && m->layers[split].out_shape.rank == 3 &&
          mxu_layer_declare(&m->layers[split], decls) == 2 &&
          decls[0].shape.rank == 3 && decls[1].shape.rank == 2);
    round_trip_text(files[f], m, 0);
    round_trip_text(files[f], m, 1);
    mxu_model_free(m);
  }
  static const char *const refused[][2] = {
      {"\"equation\": \"abc,cd->adb\", \"output_shape\": [4, null]",
       "equation 'abc,cd->adb' is not supported"},
      {"\"equation\": \"abc,cde->abde\", \"output_shape\": [null, 2, 3], "
       "\"bias_axes\": \"e\"",
       "bias_axes 'e' is not supported"},
      {"\"equation\": \"abc,cd->abd\", \"output_shape\": [null, null]",
       "output_shape must give the size of output axis 'd'"}};
  for (int k = 0; k < 3; k++) {
    char layer[512];
    snprintf(layer, sizeof layer,
             "{\"class_name\": \"EinsumDense\", \"config\": {\"name\": "
             "\"e\", %s}}",
             refused[k][0]);
    mxu_model *m = (mxu_model *)1;
    mxu_status s = mxu_model_from_json(model_with("[null, 5, 6]", layer), "m",
                                       &m, NULL, NULL);
    CHECK_MSG(s != MXU_OK && strstr(mxu_errmsg(), refused[k][1]) &&
                  strstr(mxu_errmsg(), "layer 'e'"),
              "%s: %s", refused[k][1], mxu_errmsg());
  }
}

/* Keras 3's colour layers as it writes them: each read, its text
 * round-tripping in both dialects. */
static void reads_color_layers(void) {
  const char *json =
      "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"m\", "
      "\"layers\": [{\"class_name\": \"InputLayer\", \"config\": "
      "{\"batch_shape\": [null, 8, 8, 3]}}, "
      "{\"class_name\": \"RandomGrayscale\", \"config\": {\"name\": "
      "\"random_grayscale\", \"trainable\": true, \"data_format\": "
      "\"channels_last\", \"factor\": 0.3}}, "
      "{\"class_name\": \"RandomInvert\", \"config\": {\"name\": "
      "\"random_invert\", \"data_format\": \"channels_last\", \"factor\": "
      "[0, 0.4], \"value_range\": [0, 255], \"seed\": null}}, "
      "{\"class_name\": \"Solarization\", \"config\": {\"name\": "
      "\"solarization\", \"data_format\": \"channels_last\", "
      "\"value_range\": [0, 255], \"addition_factor\": [0, 0.2], "
      "\"threshold_factor\": [0, 0.1], \"seed\": null}}, "
      "{\"class_name\": \"RandomPosterization\", \"config\": {\"name\": "
      "\"random_posterization\", \"data_format\": \"channels_last\", "
      "\"factor\": 4, \"value_range\": [0, 1], \"seed\": null}}, "
      "{\"class_name\": \"RandomColorDegeneration\", \"config\": {\"name\": "
      "\"deg\", \"data_format\": \"channels_last\", \"factor\": [-0.4, 0.4], "
      "\"value_range\": [0, 255], \"seed\": null}}, "
      "{\"class_name\": \"RandomSharpness\", \"config\": {\"name\": "
      "\"sharp\", \"data_format\": \"channels_last\", \"factor\": [0.0, 0.6], "
      "\"value_range\": [0, 255], \"seed\": null}}]}}";
  mxu_model *m = read_json(json, NULL, NULL);
  if (!m) return;
  CHECK(LAYER(m, 4)->cls == &mxu_random_color_degeneration_class &&
        LAYER(m, 4)->config.random.factor[0] == -0.4f &&
        LAYER(m, 4)->config.random.factor[1] == 0.4f);
  CHECK(LAYER(m, 5)->cls == &mxu_random_sharpness_class &&
        LAYER(m, 5)->config.random.factor[1] == 0.6f);
  const mxu_random_config *g = &LAYER(m, 0)->config.random,
                          *i = &LAYER(m, 1)->config.random,
                          *s = &LAYER(m, 2)->config.random,
                          *p = &LAYER(m, 3)->config.random;
  CHECK(g->kind == MXU_RANDOM_GRAYSCALE && g->factor[1] == 0.3f);
  CHECK(i->kind == MXU_RANDOM_INVERT && i->factor[0] == 0.0f &&
        i->factor[1] == 0.4f);
  CHECK(s->kind == MXU_SOLARIZATION && s->factor[1] == 0.2f &&
        s->threshold[1] == 0.1f);
  /* Keras' _set_factor: 4 is (1, 4) bits. */
  CHECK(p->kind == MXU_RANDOM_POSTERIZATION && p->factor[0] == 1.0f &&
        p->factor[1] == 4.0f && p->value_range[1] == 1.0f);
  round_trip_text("colour layers", m, 0);
  round_trip_text("colour layers", m, 1);
  mxu_model_free(m);
  EXPECT_JSON_FAIL(model_with("[null, 4, 4, 3]",
                              "{\"class_name\": \"RandomPosterization\", "
                              "\"config\": {\"name\": \"p\", \"factor\": "
                              "[2, 9]}}"),
                   MXU_ERR_FORMAT, "layer 'p'", "must be in [1, 8]");
  EXPECT_JSON_FAIL(model_with("[null, 4, 4, 3]",
                              "{\"class_name\": \"RandomColorDegeneration\", "
                              "\"config\": {\"name\": \"d\"}}"),
                   MXU_ERR_FORMAT, "layer 'd'", "factor is missing");
}

/* Keras 3's RandomShear as it writes it (y_factor given as (0.3, 0.1),
 * which Keras sorts), and a pair out of order. */
static void reads_random_shear(void) {
  mxu_model *m = read_json(
      model_with("[null, 6, 6, 3]",
                 "{\"class_name\": \"RandomShear\", \"config\": {\"name\": "
                 "\"shear\", \"trainable\": true, \"data_format\": "
                 "\"channels_last\", \"x_factor\": [-0.2, 0.2], \"y_factor\": "
                 "[0.1, 0.3], \"fill_mode\": \"constant\", \"interpolation\": "
                 "\"bilinear\", \"seed\": null, \"fill_value\": 0.5}}, "
                 "{\"class_name\": \"RandomShear\", \"config\": {\"name\": "
                 "\"sorted\", \"x_factor\": [0.4, 0.1], \"y_factor\": 0.25}}"),
      NULL, NULL);
  if (!m) return;
  const mxu_random_config *a = &LAYER(m, 0)->config.random,
                          *b = &LAYER(m, 1)->config.random;
  CHECK(LAYER(m, 0)->cls == &mxu_random_shear_class &&
        a->kind == MXU_RANDOM_SHEAR && a->width[0] == -0.2f &&
        a->width[1] == 0.2f && a->height[0] == 0.1f && a->height[1] == 0.3f &&
        a->fill_mode == MXU_FILL_CONSTANT && a->fill_value == 0.5f);
  CHECK(b->width[0] == 0.1f && b->width[1] == 0.4f && b->height[0] == -0.25f &&
        b->height[1] == 0.25f && b->fill_mode == MXU_FILL_REFLECT);
  for (int keras3 = 0; keras3 < 2; keras3++) {
    char *text = write_json(m, keras3);
    cJSON *doc = text ? cJSON_Parse(text) : NULL;
    /* [-0.2, 0.2] as 0.2, which Keras 3.15 reads (its own pair it
     * refuses). */
    static const char *const want[][3] = {
        {"shear", "x_factor", "0.2"},
        {"shear", "y_factor", "[0.1,0.3]"},
        {"shear", "fill_mode", "\"constant\""},
        {"sorted", "x_factor", "[0.1,0.4]"}};
    expect_written("RandomShear", keras3, doc, want, 4);
    round_trip_text("RandomShear", m, keras3);
    cJSON_Delete(doc);
    free(text);
  }
  mxu_model_free(m);
}

/* SpatialDropout3D, AlphaDropout and Identity as each Keras writes them
 * (Keras 3 the first two layers, tf.keras 2 the last two: AlphaDropout
 * without its noise_shape). Keras 3's SpatialDropouts refuse trainable
 * and noise_shape: mxu's Keras 3 text leaves them out. */
static void reads_volume_dropouts(void) {
  mxu_model *m = read_json(
      model_with(
          "[null, 2, 3, 3, 4]",
          "{\"class_name\": \"SpatialDropout3D\", \"config\": {\"rate\": 0.2, "
          "\"seed\": null, \"name\": \"sd3\", \"dtype\": \"float32\", "
          "\"data_format\": \"channels_last\"}}, "
          "{\"class_name\": \"AlphaDropout\", \"config\": {\"name\": \"ad\", "
          "\"trainable\": true, \"dtype\": {\"module\": \"keras\", "
          "\"class_name\": \"DTypePolicy\", \"config\": {\"name\": "
          "\"float32\"}, \"registered_name\": null}, \"rate\": 0.1, \"seed\": "
          "null, \"noise_shape\": [null, 1, 1, 1, 4]}}, "
          "{\"class_name\": \"AlphaDropout\", \"config\": {\"name\": \"ad2\", "
          "\"trainable\": true, \"dtype\": \"float32\", \"rate\": 0.3, "
          "\"seed\": null}}, "
          "{\"class_name\": \"Identity\", \"config\": {\"name\": \"id\", "
          "\"trainable\": true, \"dtype\": \"float32\"}}"),
      NULL, NULL);
  if (!m) return;
  const mxu_layer *sd = LAYER(m, 0), *ad = LAYER(m, 1), *ad2 = LAYER(m, 2);
  CHECK(sd->cls == &mxu_spatial_dropout3d_class &&
        sd->config.dropout.rate == 0.2f);
  CHECK(ad->cls == &mxu_alpha_dropout_class &&
        ad->config.dropout.rate == 0.1f && ad->config.dropout.noise.rank == 4 &&
        ad->config.dropout.noise.dims[0] == 1 &&
        ad->config.dropout.noise.dims[3] == 4);
  CHECK(ad2->cls == &mxu_alpha_dropout_class &&
        ad2->config.dropout.rate == 0.3f &&
        ad2->config.dropout.noise.rank == 0);
  CHECK(LAYER(m, 3)->cls == &mxu_identity_class &&
        LAYER(m, 3)->out_shape.rank == 4);
  round_trip_text("volume dropouts", m, 0);
  round_trip_text("volume dropouts", m, 1);
  char *k3 = write_json(m, 1);
  cJSON *root = k3 ? cJSON_Parse(k3) : NULL;
  const cJSON *c = cJSON_GetObjectItemCaseSensitive(
      cJSON_GetArrayItem(
          cJSON_GetObjectItemCaseSensitive(
              cJSON_GetObjectItemCaseSensitive(root, "config"), "layers"),
          1),
      "config");
  CHECK_MSG(
      c && !cJSON_HasObjectItem(c, "trainable") &&
          !cJSON_HasObjectItem(c, "noise_shape") &&
          cJSON_IsString(cJSON_GetObjectItemCaseSensitive(c, "dtype")) &&
          cJSON_IsString(cJSON_GetObjectItemCaseSensitive(c, "data_format")),
      "Keras 3's SpatialDropout3D config: %s", k3);
  cJSON_Delete(root);
  free(k3);
  mxu_model_free(m);
  EXPECT_JSON_FAIL(model_with("[null, 4, 4, 3]",
                              "{\"class_name\": \"SpatialDropout3D\", "
                              "\"config\": {\"name\": \"e\", \"rate\": 0.2}}"),
                   MXU_ERR_SHAPE, "layer 'e'",
                   "takes (depth, height, width, channels)");
}

/* Keras' RNN(cell), both Kerases' texts (the rnn_cells golden net): a node
 * of the cell's computation named RNN, written back with the sequence's
 * options in the RNN's config and the cell's in the cell's. */
static void reads_rnn_cells(void) {
  static const char *const files[] = {"tests/golden/rnn_cells/model.tf2.json",
                                      "tests/golden/rnn_cells/model.k3.json"};
  for (int f = 0; f < 2; f++) {
    mxu_model *m = NULL;
    CHECK_OK(mxu_model_load_json(files[f], &m, NULL, NULL));
    if (!m) continue;
    int lstm = node_named(m, "lstm_rnn"), gru = node_named(m, "gru_rnn");
    CHECK(lstm >= 0 && m->layers[lstm].cls == &mxu_rnn_class &&
          m->layers[lstm].config.rnn.kind == MXU_LSTM &&
          m->layers[lstm].config.rnn.return_state &&
          m->layers[lstm].config.rnn.return_sequences);
    CHECK(gru >= 0 && m->layers[gru].config.rnn.kind == MXU_GRU &&
          m->layers[gru].config.rnn.go_backwards);
    round_trip_text(files[f], m, 0);
    round_trip_text(files[f], m, 1);
    for (int keras3 = 0; keras3 < 2; keras3++) {
      char *text = write_json(m, keras3);
      cJSON *root = text ? cJSON_Parse(text) : NULL;
      const cJSON *layer = cJSON_GetArrayItem(
          cJSON_GetObjectItemCaseSensitive(
              cJSON_GetObjectItemCaseSensitive(root, "config"), "layers"),
          lstm);
      const cJSON *config = cJSON_GetObjectItemCaseSensitive(layer, "config");
      const cJSON *cell = cJSON_GetObjectItemCaseSensitive(config, "cell");
      const cJSON *cell_config =
          cJSON_GetObjectItemCaseSensitive(cell, "config");
      CHECK_MSG(
          cJSON_IsTrue(
              cJSON_GetObjectItemCaseSensitive(config, "return_state")) &&
              strcmp(cJSON_GetStringValue(
                         cJSON_GetObjectItemCaseSensitive(cell, "class_name")),
                     "LSTMCell") == 0 &&
              cJSON_GetObjectItemCaseSensitive(cell_config, "units") &&
              !cJSON_HasObjectItem(cell_config, "return_state") &&
              !cJSON_HasObjectItem(cell_config, "go_backwards") &&
              !cJSON_HasObjectItem(config, "time_major") &&
              !cJSON_HasObjectItem(cell_config, "activity_regularizer") &&
              cJSON_IsString(cJSON_GetObjectItemCaseSensitive(cell, "module")),
          "%s keras3=%d: RNN entry in %s", files[f], keras3, text);
      cJSON_Delete(root);
      free(text);
    }
    mxu_model_free(m);
  }
  EXPECT_JSON_FAIL(
      model_with("[null, 5, 3]",
                 "{\"class_name\": \"RNN\", \"config\": {\"name\": \"r\", "
                 "\"cell\": {\"class_name\": \"StackedRNNCells\", \"config\": "
                 "{\"cells\": []}}}}"),
      MXU_ERR_UNSUPPORTED, "layer 'r' (RNN)",
      "StackedRNNCells is not supported: give each cell an RNN layer");
  EXPECT_JSON_FAIL(
      model_with("[null, 5, 3]",
                 "{\"class_name\": \"RNN\", \"config\": {\"name\": \"r\", "
                 "\"cell\": {\"class_name\": \"LSTMCell\", \"config\": "
                 "{\"units\": 2, \"return_sequences\": true}}}}"),
      MXU_ERR_FORMAT, "layer 'r' (RNN)",
      "return_sequences is the RNN layer's option");
  EXPECT_JSON_FAIL(
      model_with("[null, 5, 3]",
                 "{\"class_name\": \"RNN\", \"config\": {\"name\": \"r\", "
                 "\"cell\": {\"class_name\": \"MinimalRNNCell\", "
                 "\"config\": {\"units\": 2}}}}"),
      MXU_ERR_UNSUPPORTED, "layer 'r' (RNN)",
      "MinimalRNNCell is not supported");
}

/* Keras 3's GroupQueryAttention as it wrote it (the group_attention golden
 * net): round trips, the causal mask kept; gates and windows refused. */
static void reads_group_attention(void) {
  mxu_model *m = NULL;
  CHECK_OK(mxu_model_load_json("tests/golden/group_attention/model.k3.json", &m,
                               NULL, NULL));
  if (!m) return;
  int gqa = node_named(m, "gqa"), mqa = node_named(m, "mqa");
  CHECK(gqa >= 0 && m->layers[gqa].cls == &mxu_group_query_attention_class &&
        m->layers[gqa].config.attention.num_heads == 4 &&
        m->layers[gqa].config.attention.kv_heads == 2 &&
        m->layers[gqa].config.attention.key_dim == 3);
  CHECK(mqa >= 0 && m->layers[mqa].config.attention.kv_heads == 1 &&
        m->layers[mqa].config.attention.causal &&
        !m->layers[mqa].config.attention.use_bias &&
        m->layers[mqa].input_count == 3);
  round_trip_text("group_attention", m, 1);
  round_trip_text("group_attention", m, 0);
  /* Keras' summary names the Python class, GroupedQueryAttention. */
  char *text = summary_of(m);
  CHECK_MSG(text && has(text, "(GroupedQueryAttention"), "%s", text);
  free(text);
  mxu_model_free(m);
  static const char *const refused[][2] = {
      {"\"use_gate\": true", "use_gate"},
      {"\"sliding_window\": 4", "sliding_window"}};
  for (int k = 0; k < 2; k++) {
    char layer[512];
    snprintf(layer, sizeof layer,
             "{\"class_name\": \"GroupQueryAttention\", \"config\": "
             "{\"name\": \"g\", \"head_dim\": 2, \"num_query_heads\": 2, "
             "\"num_key_value_heads\": 1, %s}, \"inbound_nodes\": [[[\"x\", "
             "0, 0, {}], [\"x\", 0, 0, {}]]]}",
             refused[k][0]);
    char model[1024];
    snprintf(model, sizeof model,
             "{\"class_name\": \"Functional\", \"config\": {\"name\": "
             "\"f\", \"layers\": [{\"class_name\": \"InputLayer\", "
             "\"config\": {\"batch_input_shape\": [null, 4, 6], \"name\": "
             "\"x\"}, \"name\": \"x\", \"inbound_nodes\": []}, %s], "
             "\"input_layers\": [[\"x\", 0, 0]], \"output_layers\": "
             "[[\"g\", 0, 0]]}}",
             layer);
    EXPECT_JSON_FAIL(model, MXU_ERR_UNSUPPORTED, "layer 'g'", refused[k][1]);
  }
}

/* Keras 3's RMSNormalization and LayerNormalization(rms_scaling), as it
 * wrote them (the rms_norm golden net): both texts round-trip; tf.keras 2's
 * text names rms_scaling only where it is set, a key tf.keras 2 does not
 * have. */
static void reads_rms_norms(void) {
  mxu_model *m = NULL;
  CHECK_OK(mxu_model_load_json("tests/golden/rms_norm/model.k3.json", &m, NULL,
                               NULL));
  if (!m) return;
  int rms = node_named(m, "rms"), ln = node_named(m, "ln_rms");
  CHECK(rms >= 0 && m->layers[rms].cls == &mxu_rms_normalization_class &&
        m->layers[rms].config.layer_norm.epsilon == 1e-6f);
  CHECK(ln >= 0 && m->layers[ln].config.layer_norm.rms_scaling == 1);
  /* scale (8), gamma (8), Dense kernels and biases */
  CHECK(mxu_model_param_count(m, 1) ==
        5 * 8 + 8 + 8 + 8 * 8 + 8 + 8 + 8 * 3 + 3);
  round_trip_text("rms_norm", m, 0);
  round_trip_text("rms_norm", m, 1);
  char *k2 = write_json(m, 0);
  CHECK(has(k2, "\"rms_scaling\": true") && !has(k2, "\"rms_scaling\": false"));
  free(k2);
  mxu_model_free(m);
  EXPECT_JSON_FAIL(model_with("[null, 4, 3]",
                              "{\"class_name\": \"RMSNormalization\", "
                              "\"config\": {\"name\": \"r\", \"axis\": 1}}"),
                   MXU_ERR_UNSUPPORTED, "layer 'r'", "axis 1 is not supported");
}

/* The recurrent net of test_golden (make_recurrent.py) in both dialects,
 * written back; what mxu's recurrent layers refuse. */
/* GRU's reset_after false: read, its bias one row, written back. */
static void reads_gru_reset_before(void) {
  mxu_model *m = read_json(
      model_with("[null, 5, 3]",
                 "{\"class_name\": \"GRU\", \"config\": {\"name\": \"g\", "
                 "\"units\": 4, \"reset_after\": false}}"),
      NULL, NULL);
  CHECK(m && LAYER(m, 0)->config.rnn.reset_before);
  for (int p = 0; m && p < m->param_count; p++)
    if (strstr(m->params[p].name, "bias"))
      CHECK(shape_is(m->params[p].shape, 1, 12, 0, 0));
  for (int keras3 = 0; m && keras3 < 2; keras3++) {
    char *text = write_json(m, keras3);
    cJSON *doc = text ? cJSON_Parse(text) : NULL;
    static const char *const want[][3] = {{"g", "reset_after", "false"}};
    expect_written("GRU reset_after false", keras3, doc, want, 1);
    round_trip_text("GRU reset_after false", m, keras3);
    cJSON_Delete(doc);
    free(text);
  }
  mxu_model_free(m);
}

static void reads_recurrent(void) {
  /* dropout and recurrent_dropout: read and written back. */
  mxu_model *d = read_json(
      model_with("[null, 5, 3]",
                 "{\"class_name\": \"LSTM\", \"config\": {\"name\": \"l\", "
                 "\"units\": 2, \"dropout\": 0.25, \"recurrent_dropout\": "
                 "0.5}}"),
      NULL, NULL);
  CHECK(d && LAYER(d, 0)->config.rnn.dropout == 0.25f &&
        LAYER(d, 0)->config.rnn.recurrent_dropout == 0.5f);
  for (int keras3 = 0; d && keras3 < 2; keras3++) {
    char *text = write_json(d, keras3);
    cJSON *doc = text ? cJSON_Parse(text) : NULL;
    static const char *const want[][3] = {{"l", "dropout", "0.25"},
                                          {"l", "recurrent_dropout", "0.5"}};
    expect_written("LSTM dropout", keras3, doc, want, 2);
    cJSON_Delete(doc);
    free(text);
  }
  mxu_model_free(d);
  static const char *const files[] = {"tests/golden/recurrent/model.tf2.json",
                                      "tests/golden/recurrent/model.k3.json"};
  for (int f = 0; f < 2; f++) {
    mxu_model *m = NULL;
    CHECK_OK(mxu_model_load_json(files[f], &m, NULL, NULL));
    if (!m) continue;
    CHECK(mxu_model_param_count(m, 1) == 802 && mxu_model_layer_count(m) == 9);
    const mxu_layer *bi = &m->layers[node_named(m, "bi_gru")];
    CHECK(bi->cls == &mxu_bidirectional_class &&
          bi->config.bidirectional.merge == MXU_MERGE_ADD &&
          bi->config.bidirectional.rnn.kind == MXU_GRU &&
          strcmp(bi->config.bidirectional.inner, "last") == 0 &&
          shape_is(bi->out_shape, 1, 2, 0, 0));
    const mxu_layer *gru = &m->layers[mxu_model_node(m, 2)];
    CHECK(gru->cls == &mxu_gru_class && gru->config.rnn.units == 4 &&
          gru->config.rnn.go_backwards && gru->config.rnn.return_sequences &&
          shape_is(gru->out_shape, 2, 7, 4, 0));
    for (int keras3 = 0; keras3 < 2; keras3++) {
      round_trip_text(files[f], m, keras3);
      char *text = write_json(m, keras3);
      cJSON *doc = text ? cJSON_Parse(text) : NULL;
      static const char *const want[][3] = {
          {"lstm", "return_sequences", "true"},
          {"lstm", "unit_forget_bias", "true"},
          {"lstm", "recurrent_activation", "\"sigmoid\""},
          {"gru", "go_backwards", "true"},
          {"gru", "reset_after", "true"},
          {"rnn", "return_sequences", "false"},
          {"lstm_back", "activation", "\"relu\""},
          {"lstm_back", "units", "4"},
          {"bi_gru", "merge_mode", "\"sum\""},
          {"bi_lstm", "merge_mode", "\"concat\""},
      };
      expect_written(files[f], keras3, doc, want, sizeof want / sizeof *want);
      /* The wrapped layer as each Keras writes it: Keras 3 its name with
       * forward_ and its copy as backward_layer. */
      char *layer = doc ? written_value(doc, "bi_gru", "layer") : NULL;
      char *back = doc ? written_value(doc, "bi_gru", "backward_layer") : NULL;
      CHECK_MSG(layer && has(layer, keras3 ? "\"name\":\"forward_last\""
                                           : "\"name\":\"last\""),
                "keras3=%d: layer %s", keras3, layer ? layer : "(none)");
      CHECK_MSG(keras3 ? back && has(back, "\"name\":\"backward_last\"") &&
                             has(back, "\"go_backwards\":true")
                       : back == NULL || strcmp(back, "null") == 0,
                "keras3=%d: backward_layer %s", keras3, back ? back : "(none)");
      cJSON_free(layer);
      cJSON_free(back);
      cJSON_Delete(doc);
      free(text);
    }
    mxu_model_free(m);
  }
  static const refusal refused[] = {
      {"[null, 5, 3]",
       "{\"class_name\": \"Bidirectional\", \"config\": {\"name\": \"e\", "
       "\"merge_mode\": null, \"layer\": {\"class_name\": \"LSTM\", "
       "\"config\": {\"name\": \"l\", \"units\": 2}}}}",
       MXU_ERR_UNSUPPORTED, "merge_mode null is not supported"},
      {"[null, 5, 3]",
       "{\"class_name\": \"Bidirectional\", \"config\": {\"name\": \"e\", "
       "\"layer\": {\"class_name\": \"Dense\", \"config\": {\"name\": "
       "\"d\", \"units\": 2}}}}",
       MXU_ERR_UNSUPPORTED, "wrapping Dense is not supported"},
      {"[null, 5, 3]",
       "{\"class_name\": \"Bidirectional\", \"config\": {\"name\": \"e\", "
       "\"layer\": {\"class_name\": \"LSTM\", \"config\": {\"name\": "
       "\"l\", \"units\": 2}}, \"backward_layer\": {\"class_name\": "
       "\"LSTM\", \"config\": {\"name\": \"b\", \"units\": 3, "
       "\"go_backwards\": true}}}}",
       MXU_ERR_UNSUPPORTED, "a backward layer other than the layer"},
      {"[null, 5, 3]",
       "{\"class_name\": \"Bidirectional\", \"config\": {\"name\": \"e\"}}",
       MXU_ERR_FORMAT, "layer is missing"},
      {"[null, 5, 3]",
       "{\"class_name\": \"LSTM\", \"config\": {\"name\": \"e\", \"units\": 4, "
       "\"return_state\": true}}",
       MXU_ERR_UNSUPPORTED, "returns several tensors (return_state)"},
      {"[null, 5, 3]",
       "{\"class_name\": \"Bidirectional\", \"config\": {\"name\": \"e\", "
       "\"layer\": {\"class_name\": \"LSTM\", \"config\": {\"name\": "
       "\"l\", \"units\": 2, \"return_state\": true}}}}",
       MXU_ERR_UNSUPPORTED, "returns several tensors (return_state)"},
      {"[null, 5, 3]",
       "{\"class_name\": \"GRU\", \"config\": {\"name\": \"e\", \"units\": 4, "
       "\"stateful\": true}}",
       MXU_ERR_UNSUPPORTED, "stateful"},
      {"[null, 5, 3]",
       "{\"class_name\": \"LSTM\", \"config\": {\"name\": \"e\", \"units\": 4, "
       "\"recurrent_dropout\": 1.2}}",
       MXU_ERR_FORMAT, "recurrent_dropout 1.2 must be in [0, 1)"},
      {"[null, 5, 3]",
       "{\"class_name\": \"AdaptiveMaxPooling1D\", \"config\": {\"name\": "
       "\"e\", \"output_size\": [2, 2]}}",
       MXU_ERR_FORMAT, "output_size"},
      {"[null, 5, 4, 3]",
       "{\"class_name\": \"AdaptiveAveragePooling2D\", \"config\": {\"name\": "
       "\"e\", \"output_size\": 2, \"data_format\": \"channels_first\"}}",
       MXU_ERR_UNSUPPORTED, "data_format 'channels_first'"},
      {"[null, 5, 3]",
       "{\"class_name\": \"AdaptiveAveragePooling2D\", \"config\": {\"name\": "
       "\"e\", \"output_size\": [2, 2]}}",
       MXU_ERR_SHAPE, "expects 2 spatial axes and channels, got (5, 3)"},
      {"[null, 5, 3]",
       "{\"class_name\": \"SimpleRNN\", \"config\": {\"name\": \"e\", "
       "\"units\": 4, \"activation\": \"gelu\"}}",
       MXU_ERR_UNSUPPORTED, "tanh, sigmoid, hard_sigmoid, relu or linear"},
      {"[null, 5, 3]",
       "{\"class_name\": \"LSTM\", \"config\": {\"name\": \"e\"}}",
       MXU_ERR_FORMAT, "units is missing"},
      {"[null, 4, 4, 3]",
       "{\"class_name\": \"LSTM\", \"config\": {\"name\": \"e\", \"units\": "
       "4}}",
       MXU_ERR_SHAPE, "expects (steps, features) input, got (4, 4, 3)"},
  };
  expect_refused(refused, sizeof refused / sizeof *refused);
}

/* The masking net of test_golden (make_masking.py) in both dialects
 * (Keras 3's with the ops and kwargs by which it passes masks): where the
 * Embedding's mask goes, and mask_zero and Bidirectional's zeroed
 * sequences written back. */
static void reads_masking(void) {
  static const char *const files[] = {"tests/golden/masking/model.tf2.json",
                                      "tests/golden/masking/model.k3.json"};
  for (int f = 0; f < 2; f++) {
    mxu_model *m = NULL;
    CHECK_OK(mxu_model_load_json(files[f], &m, NULL, NULL));
    if (!m) continue;
    int ids = node_named(m, "ids");
    static const struct {
      const char *node;
      int in, out; /* masked */
    } want[] = {{"embed", 0, 1},       {"lstm", 1, 1},       {"gru", 1, 0},
                {"bi", 1, 1},          {"from_embed", 1, 1}, {"add", 1, 1},
                {"pool", 1, 0},        {"rnn", 1, 0},        {"attend", 1, 1},
                {"pool_attend", 1, 0}, {"concat", 0, 0},     {"probs", 0, 0}};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
      const mxu_layer *l = &m->layers[node_named(m, want[i].node)];
      CHECK_MSG(l->mask_in == (want[i].in ? ids : -1) &&
                    l->mask_out == (want[i].out ? ids : -1),
                "%s: %s's masks %d, %d", files[f], want[i].node, l->mask_in,
                l->mask_out);
    }
    CHECK(m->layers[node_named(m, "bi")]
              .config.bidirectional.rnn.zero_output_for_mask);
    CHECK(mxu_model_layer_count(m) == 14);
    for (int keras3 = 0; keras3 < 2; keras3++) {
      round_trip_text(files[f], m, keras3);
      char *text = write_json(m, keras3);
      cJSON *doc = text ? cJSON_Parse(text) : NULL;
      static const char *const written[][3] = {{"embed", "mask_zero", "true"}};
      expect_written(files[f], keras3, doc, written, 1);
      cJSON_Delete(doc);
      free(text);
    }
    mxu_model_free(m);
  }
}

/* The timeseries net of test_golden (make_timeseries.py) in both
 * dialects (Keras 3's with the NotEqual and Any ops by which it records
 * Masking's mask): each Masking holds the mask of the layers after it,
 * which TimeDistributed(Dense) keeps; mask_value, RepeatVector's n and
 * the TimeDistributed wrappers written back. */
static void reads_timeseries(void) {
  static const char *const files[] = {"tests/golden/timeseries/model.tf2.json",
                                      "tests/golden/timeseries/model.k3.json"};
  for (int f = 0; f < 2; f++) {
    mxu_model *m = NULL;
    CHECK_OK(mxu_model_load_json(files[f], &m, NULL, NULL));
    if (!m) continue;
    int mask = node_named(m, "mask"), shift = node_named(m, "mask_shift");
    static const struct {
      const char *node;
      int in, out; /* 1: "mask"'s, 2: "mask_shift"'s */
    } want[] = {{"mask", 0, 1},     {"lstm", 1, 1},   {"gru", 1, 0},
                {"each", 1, 1},     {"pool", 1, 0},   {"mask_shift", 0, 2},
                {"rnn", 2, 0},      {"repeat", 0, 0}, {"decode", 0, 0},
                {"each_step", 0, 0}};
    const int holder[3] = {-1, mask, shift};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
      const mxu_layer *l = &m->layers[node_named(m, want[i].node)];
      CHECK_MSG(l->mask_in == holder[want[i].in] &&
                    l->mask_out == holder[want[i].out],
                "%s: %s's masks %d, %d", files[f], want[i].node, l->mask_in,
                l->mask_out);
    }
    const mxu_layer *repeat = &m->layers[node_named(m, "repeat")];
    CHECK(m->layers[shift].config.mask_value == 1.0f &&
          repeat->config.repeats == 3 &&
          shape_is(repeat->out_shape, 2, 3, 4, 0));
    const mxu_layer *each = &m->layers[node_named(m, "each_step")];
    CHECK(each->cls == &mxu_dense_class &&
          strcmp(each->wrapped, "inner") == 0 &&
          each->config.dense.activation == MXU_TANH &&
          shape_is(each->out_shape, 2, 3, 2, 0));
    CHECK(mxu_model_layer_count(m) == 27);
    const mxu_layer *steps = &m->layers[node_named(m, "over_steps")];
    CHECK(steps->cls == &mxu_dot_class && steps->config.dot.axes[0] == 1 &&
          steps->config.dot.axes[1] == 1 &&
          shape_is(steps->out_shape, 2, 3, 3, 0));
    for (int keras3 = 0; keras3 < 2; keras3++) {
      round_trip_text(files[f], m, keras3);
      char *text = write_json(m, keras3);
      cJSON *doc = text ? cJSON_Parse(text) : NULL;
      static const char *const written[][3] = {
          {"mask", "mask_value", "0"},
          {"mask_shift", "mask_value", "1"},
          {"repeat", "n", "3"},
          {"up", "size", "2"},
          {"pad", "padding", "[1,2]"},
          {"crop", "cropping", "[2,3]"},
          {"up_conv", "strides", "[2]"},
          {"dot", "axes", "1"},
          {"cosine", "normalize", "true"},
          {"over_steps", "axes", "1"}};
      expect_written(files[f], keras3, doc, written,
                     sizeof written / sizeof *written);
      /* Keras 3's Conv1DTranspose takes no groups, tf.keras 2's does. */
      char *groups = doc ? written_value(doc, "up_conv", "groups") : NULL;
      CHECK_MSG(keras3 ? !groups : groups && strcmp(groups, "1") == 0,
                "%s keras3=%d: groups written as %s", files[f], keras3,
                groups ? groups : "(none)");
      cJSON_free(groups);
      char *cls = doc ? written_entry_key(doc, "each", "class_name") : NULL;
      char *inner = doc ? written_value(doc, "each", "layer") : NULL;
      CHECK_MSG(cls && strcmp(cls, "\"TimeDistributed\"") == 0 && inner &&
                    strstr(inner, "\"class_name\":\"Dense\"") &&
                    strstr(inner, "\"name\":\"dense\""),
                "%s keras3=%d: each written as %s, %s", files[f], keras3,
                cls ? cls : "(none)", inner ? inner : "(none)");
      cJSON_free(cls);
      cJSON_free(inner);
      cJSON_Delete(doc);
      free(text);
    }
    mxu_model_free(m);
  }
  static const refusal refused[] = {
      {"[null, 5, 4, 4, 3]",
       "{\"class_name\": \"TimeDistributed\", \"config\": {\"name\": \"e\", "
       "\"layer\": {\"class_name\": \"Conv2DTranspose\", \"config\": "
       "{\"name\": \"c\", \"filters\": 2, \"kernel_size\": 3}}}}",
       MXU_ERR_UNSUPPORTED,
       "TimeDistributed(Conv2DTranspose) is not supported"},
      {"[null, 5, 3]",
       "{\"class_name\": \"TimeDistributed\", \"config\": {\"name\": \"e\", "
       "\"layer\": {\"class_name\": \"Dropout\", \"config\": {\"name\": "
       "\"d\", \"rate\": 0.5, \"noise_shape\": [null, 1]}}}}",
       MXU_ERR_UNSUPPORTED, "with a noise_shape"},
      {"[null, 3]",
       "{\"class_name\": \"TimeDistributed\", \"config\": {\"name\": \"e\", "
       "\"layer\": {\"class_name\": \"Dense\", \"config\": {\"name\": "
       "\"d\", \"units\": 2}}}}",
       MXU_ERR_SHAPE, "one input of (steps, ...)"},
      {"[null, 5, 3]",
       "{\"class_name\": \"TimeDistributed\", \"config\": {\"name\": \"e\", "
       "\"layer\": \"Dense\"}}",
       MXU_ERR_FORMAT, "layer must be a layer object"},
      {"[null, 5, 3]",
       "{\"class_name\": \"TimeDistributed\", \"config\": {\"name\": \"e\", "
       "\"layer\": {\"class_name\": \"Dense\", \"config\": {\"name\": "
       "\"d\", \"units\": 0}}}}",
       MXU_ERR_FORMAT, "units"},
      {"[null, 4, 4, 3]",
       "{\"class_name\": \"Masking\", \"config\": {\"name\": \"e\", "
       "\"mask_value\": 0.0}}",
       MXU_ERR_UNSUPPORTED, "Masking over (4, 4, 3) is not supported"},
      {"[null, 5, 3]",
       "{\"class_name\": \"RepeatVector\", \"config\": {\"name\": \"e\", "
       "\"n\": 2}}",
       MXU_ERR_SHAPE, "RepeatVector takes a vector"},
      {"[null, 5, 3]",
       "{\"class_name\": \"Conv1DTranspose\", \"config\": {\"name\": \"e\", "
       "\"filters\": 2, \"kernel_size\": 3, \"padding\": \"causal\"}}",
       MXU_ERR_UNSUPPORTED, "padding 'causal' is Conv1D's only"},
      {"[null, 5, 3]",
       "{\"class_name\": \"Conv1DTranspose\", \"config\": {\"name\": \"e\", "
       "\"filters\": 2, \"kernel_size\": 3, \"output_padding\": 1}}",
       MXU_ERR_UNSUPPORTED, "output_padding"},
      {"[null, 5, 3]",
       "{\"class_name\": \"Cropping1D\", \"config\": {\"name\": \"e\", "
       "\"cropping\": [2, 3]}}",
       MXU_ERR_SHAPE, "cropping (2, 3) leaves none of 5 steps"},
      {"[null, 5, 3]",
       "{\"class_name\": \"ZeroPadding1D\", \"config\": {\"name\": \"e\", "
       "\"padding\": [1, -2]}}",
       MXU_ERR_FORMAT, "padding must be n or [before, after]"},
      {"[null, 4, 4, 3]",
       "{\"class_name\": \"UpSampling1D\", \"config\": {\"name\": \"e\", "
       "\"size\": 2}}",
       MXU_ERR_SHAPE, "UpSampling1D takes (steps, channels)"},
  };
  expect_refused(refused, sizeof refused / sizeof *refused);
}

/* A Keras 3 Functional model: input x (5, 4), then MultiHeadAttention 'e'
 * with the config's keys after its name, called with args and kwargs. */
static const char *attention_with(const char *config, const char *args,
                                  const char *kwargs) {
  static char text[4096];
  snprintf(text, sizeof text,
           "{\"class_name\": \"Functional\", \"config\": {\"name\": \"f\", "
           "\"layers\": [{\"class_name\": \"InputLayer\", \"name\": \"x\", "
           "\"config\": {\"name\": \"x\", \"batch_shape\": [null, 5, 4]}, "
           "\"inbound_nodes\": []}, {\"class_name\": \"MultiHeadAttention\", "
           "\"name\": \"e\", \"config\": {\"name\": \"e\", \"num_heads\": 2, "
           "\"key_dim\": 3%s}, \"inbound_nodes\": [{\"args\": [%s], "
           "\"kwargs\": {%s}}]}], \"input_layers\": [[\"x\", 0, 0]], "
           "\"output_layers\": [[\"e\", 0, 0]]}}",
           config, args, kwargs);
  return text;
}

#define X_TENSOR                                                               \
  "{\"class_name\": \"__keras_tensor__\", \"config\": {\"keras_history\": "    \
  "[\"x\", 0, 0]}}"

/* The attention net of test_golden (make_attention.py) in both dialects,
 * its calls and configs written back as each Keras writes them; what
 * MultiHeadAttention refuses. */
static void reads_attention(void) {
  static const char *const files[] = {"tests/golden/attention/model.tf2.json",
                                      "tests/golden/attention/model.k3.json"};
  for (int f = 0; f < 2; f++) {
    mxu_model *m = NULL;
    CHECK_OK(mxu_model_load_json(files[f], &m, NULL, NULL));
    if (!m) continue;
    const mxu_layer *self = &m->layers[node_named(m, "self")];
    const mxu_layer *cross = &m->layers[node_named(m, "cross")];
    const mxu_layer *grid = &m->layers[node_named(m, "over_grid")];
    CHECK(self->config.attention.causal && self->input_count == 2 &&
          self->config.attention.value_dim == 4 &&
          self->config.attention.output_dim == 5 &&
          shape_is(self->out_shape, 2, 6, 5, 0));
    CHECK(!cross->config.attention.causal && cross->input_count == 3 &&
          !cross->config.attention.use_bias &&
          cross->inputs[2] == node_named(m, "keys"));
    CHECK(grid->input_count == 2 && grid->inputs[0] == grid->inputs[1] &&
          shape_is(grid->out_shape, 3, 2, 3, 4));
    CHECK(self->config.attention.tf2_fans == (f == 0));
    for (int keras3 = 0; keras3 < 2; keras3++) {
      round_trip_text(files[f], m, keras3);
      char *text = write_json(m, keras3);
      cJSON *doc = text ? cJSON_Parse(text) : NULL;
      static const char *const want[][3] = {
          {"self", "num_heads", "2"},
          {"self", "key_dim", "3"},
          {"self", "value_dim", "4"},
          {"self", "output_shape", "5"},
          {"self", "attention_axes", "[1]"},
          {"cross", "use_bias", "false"},
          {"cross", "value_dim", "2"},
          {"cross", "output_shape", "null"},
          {"over_grid", "attention_axes", "[1,2]"}};
      expect_written(files[f], keras3, doc, want, sizeof want / sizeof *want);
      /* The calls: Keras 3 every tensor by position, tf.keras 2 the value
       * and the key by name; the causal mask in the kwargs. */
      static const char *const calls[2][2] = {
          {"[[[\"x\",0,0,{\"value\":[\"x\",0,0],\"use_causal_mask\":true}]]]",
           "[[[\"norm\",0,0,{\"value\":[\"x\",0,0],\"key\":[\"keys\",0,0]}]]]"},
          {"\"kwargs\":{\"use_causal_mask\":true}",
           "\"keras_history\":[\"keys\""}};
      char *self_call =
          doc ? written_entry_key(doc, "self", "inbound_nodes") : NULL;
      char *cross_call =
          doc ? written_entry_key(doc, "cross", "inbound_nodes") : NULL;
      CHECK_MSG(self_call && has(self_call, calls[keras3][0]),
                "keras3=%d: self called as %s", keras3,
                self_call ? self_call : "(none)");
      CHECK_MSG(cross_call && has(cross_call, calls[keras3][1]),
                "keras3=%d: cross called as %s", keras3,
                cross_call ? cross_call : "(none)");
      cJSON_free(self_call);
      cJSON_free(cross_call);
      cJSON_Delete(doc);
      free(text);
    }
    mxu_model_free(m);
  }
  /* Keras 3 may pass the tensors by name too. */
  mxu_model *named = read_json(
      attention_with("", "", "\"query\": " X_TENSOR ", \"value\": " X_TENSOR),
      NULL, NULL);
  CHECK(named && named->layers[node_named(named, "e")].input_count == 2);
  mxu_model_free(named);
  static const struct {
    const char *config, *args, *kwargs;
    mxu_status status;
    const char *needle;
  } refused[] = {
      {", \"use_gate\": true", X_TENSOR ", " X_TENSOR, "", MXU_ERR_UNSUPPORTED,
       "use_gate"},
      {", \"attention_axes\": [2]", X_TENSOR ", " X_TENSOR, "",
       MXU_ERR_UNSUPPORTED, "attention_axes [2] is not supported"},
      {", \"output_shape\": [2, 3]", X_TENSOR ", " X_TENSOR, "",
       MXU_ERR_UNSUPPORTED, "output_shape [2, 3] is not supported"},
      {"", X_TENSOR ", " X_TENSOR, "\"return_attention_scores\": true",
       MXU_ERR_UNSUPPORTED, "return_attention_scores"},
      {"", X_TENSOR ", " X_TENSOR, "\"attention_mask\": " X_TENSOR,
       MXU_ERR_UNSUPPORTED, "call argument 'attention_mask'"},
      {"", X_TENSOR, "\"key\": " X_TENSOR, MXU_ERR_UNSUPPORTED,
       "passing key without value"},
      {"", X_TENSOR ", " X_TENSOR, "\"value\": " X_TENSOR, MXU_ERR_FORMAT,
       "passes value twice"},
      {"", X_TENSOR ", " X_TENSOR ", " X_TENSOR ", " X_TENSOR, "",
       MXU_ERR_FORMAT, "passes 4 tensors (at most 3)"},
      {", \"dropout\": 1.5", X_TENSOR ", " X_TENSOR, "", MXU_ERR_FORMAT,
       "dropout 1.5"},
  };
  for (size_t i = 0; i < sizeof refused / sizeof *refused; i++)
    EXPECT_JSON_FAIL(
        attention_with(refused[i].config, refused[i].args, refused[i].kwargs),
        refused[i].status, "layer 'e'", refused[i].needle);
}

/* The cifar model, and a Functional net of ops recorded as layers, given
 * statistics, LayerScale and CustomScaleLayer in both dialects. */
/* The model read from file (keras3: Keras 3's dialect) written back in
 * its dialect: the entry key `key` of layer `name` as Keras wrote it. */
static void expect_as_keras(const char *file, const mxu_model *m, int keras3,
                            const char *name, const char *key) {
  char *text = check_slurp(file), *mine = write_json(m, keras3);
  cJSON *keras = text ? cJSON_Parse(text) : NULL;
  cJSON *doc = mine ? cJSON_Parse(mine) : NULL;
  char *got = written_entry_key(doc, name, key);
  char *want = written_entry_key(keras, name, key);
  CHECK_MSG(got && want && strcmp(got, want) == 0,
            "%s: %s's %s written as %s, Keras wrote %s", file, name, key,
            got ? got : "(none)", want ? want : "(none)");
  cJSON_free(got);
  cJSON_free(want);
  cJSON_Delete(doc);
  cJSON_Delete(keras);
  free(mine);
  free(text);
}

/* Keras' encoder-decoder in both dialects (make_encdec.py): two inputs,
 * an LSTM's, a GRU's and a Bidirectional's final states (return_state,
 * tensors 1.. of the call) starting the decoders (initial_state). Written back,
 * each decoder's call and Keras 3's build_config are Keras' own. */
static void reads_encdec(void) {
  static const char *const files[] = {"tests/golden/encdec/model.tf2.json",
                                      "tests/golden/encdec/model.k3.json"};
  for (int f = 0; f < 2; f++) {
    mxu_model *m = NULL;
    CHECK_OK(mxu_model_load_json(files[f], &m, NULL, NULL));
    if (!m) continue;
    const mxu_layer *enc = &m->layers[node_named(m, "encoder")];
    const mxu_layer *dec = &m->layers[node_named(m, "decoder")];
    const mxu_layer *gru = &m->layers[node_named(m, "gru_decoder")];
    /* Its output (6), then h and c: flat. */
    CHECK(enc->config.rnn.return_state &&
          shape_is(enc->out_shape, 1, 18, 0, 0));
    CHECK(dec->input_count == 3 && gru->input_count == 2);
    for (int k = 1; k < 3; k++) {
      const mxu_layer *part = &m->layers[dec->inputs[k]];
      CHECK(part->cls == &mxu_output_part_class &&
            part->inputs[0] == enc->index && part->config.part.index == k);
    }
    CHECK(m->input_count == 2 && mxu_model_layer_count(m) == 10);
    CHECK(m->layers[node_named(m, "bi_decoder")].input_count == 5);
    round_trip_text(files[f], m, f);
    static const char *const names[] = {"decoder", "gru_decoder", "bi_decoder",
                                        "both"};
    /* tf.keras 2 writes a Bidirectional's call with null initial_state
     * and constants in each tensor's kwargs, which its load_model does
     * without. */
    for (int n = 0; n < 4; n++) {
      if (f || n != 2)
        expect_as_keras(files[f], m, f, names[n], "inbound_nodes");
      if (f) expect_as_keras(files[f], m, f, names[n], "build_config");
    }
    mxu_model_free(m);
  }
}

/* Keras' Attention and AdditiveAttention in both dialects
 * (make_dense_attention.py): their configs read, and written back with
 * Keras' own calls (use_causal_mask: Keras 3's kwargs, tf.keras 2's in
 * each tensor's), and Keras 3's config and build_config. */
static void reads_dense_attention(void) {
  static const char *const files[] = {
      "tests/golden/dense_attention/model.tf2.json",
      "tests/golden/dense_attention/model.k3.json"};
  for (int f = 0; f < 2; f++) {
    mxu_model *m = NULL;
    CHECK_OK(mxu_model_load_json(files[f], &m, NULL, NULL));
    if (!m) continue;
    const mxu_dense_attention_config *luong =
        &m->layers[node_named(m, "luong")].config.dense_attention;
    const mxu_dense_attention_config *concat =
        &m->layers[node_named(m, "concat")].config.dense_attention;
    const mxu_dense_attention_config *sum =
        &m->layers[node_named(m, "plain_sum")].config.dense_attention;
    const mxu_dense_attention_config *causal =
        &m->layers[node_named(m, "causal")].config.dense_attention;
    CHECK(luong->use_scale && !luong->concat && !luong->additive);
    CHECK(concat->concat && concat->use_scale);
    CHECK(sum->additive && !sum->use_scale);
    CHECK(causal->causal && !causal->use_scale);
    CHECK(m->layers[node_named(m, "concat")].input_count == 3);
    round_trip_text(files[f], m, f);
    static const char *const names[] = {"luong", "concat", "bahdanau",
                                        "plain_sum", "causal"};
    static const char *const keys[] = {"inbound_nodes", "config",
                                       "build_config"};
    /* tf.keras 2 orders the config's keys otherwise and needs no
     * build_config. */
    for (int n = 0; n < 5; n++)
      for (int k = 0; k < (f ? 3 : 1); k++)
        expect_as_keras(files[f], m, f, names[n], keys[k]);
    mxu_model_free(m);
  }
}

static void every_mutation(void) {
  mutate_every_node("cifar (Keras 3)", cifar_keras3);
  static const char *const nets[] = {
      "tests/golden/apps_layers/model.tf2.json",
      "tests/golden/apps_layers/model.k3.json",
      "tests/golden/sequence/model.tf2.json",
      "tests/golden/sequence/model.k3.json",
      "tests/golden/recurrent/model.tf2.json",
      "tests/golden/recurrent/model.k3.json",
      "tests/golden/attention/model.tf2.json",
      "tests/golden/attention/model.k3.json",
      "tests/golden/masking/model.tf2.json",
      "tests/golden/masking/model.k3.json",
      "tests/golden/timeseries/model.tf2.json",
      "tests/golden/timeseries/model.k3.json",
      "tests/golden/encdec/model.tf2.json",
      "tests/golden/encdec/model.k3.json",
      "tests/golden/dense_attention/model.tf2.json",
      "tests/golden/dense_attention/model.k3.json"};
  for (size_t n = 0; n < sizeof nets / sizeof *nets; n++) {
    char *text = check_slurp(nets[n]);
    CHECK_MSG(text != NULL, "%s: cannot read it", nets[n]);
    if (text) mutate_every_node(nets[n], text);
    free(text);
  }
}

int main(void) {
  reads_tf_keras_2();
  reads_keras_3();
  reads_without_input_layer();
  reads_activation_names();
  reads_random_contrast();
  reads_color_layers();
  reads_einsum_dense();
  reads_given_normalization();
  reads_layer_scale();
  reads_custom_scale();
  reads_sequences();
  reads_volume_dropouts();
  reads_rms_norms();
  reads_rnn_cells();
  reads_group_attention();
  reads_recurrent();
  reads_random_shear();
  reads_gru_reset_before();
  reads_attention();
  reads_masking();
  reads_timeseries();
  reads_encdec();
  reads_dense_attention();
  reads_keras_variants();
  round_trips();
  writes_keras_text();
  writes_compile_config();
  odd_names();
  files();
  reads_functional();
  errors_text();
  errors_layers();
  errors_listed_together();
  errors_compile();
  missing_file();
  compile_forms();
  reads_output_losses();
  reads_several_metrics();
  errors_output_losses();
  reads_golden_outputs();
  writes_output_losses();
  every_truncation();
  every_mutation();
  keep_settings_model(NULL);
  return check_report("test_json");
}
