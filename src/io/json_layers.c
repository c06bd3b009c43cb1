/* json_layers.c — each Keras layer class's config in both directions: the
 * reader maps every key mxu honours onto an mxu_add_* call and refuses the
 * options it cannot honour; the writer emits tf.keras' full key set. */
#include "io/json.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

/* ---- shared pieces ------------------------------------------------------ */

/* kernel_initializer, kernel_regularizer, kernel_constraint (or bias_...):
 * mxu's weights start as Keras' defaults and are never regularised or
 * constrained. */
static mxu_status read_weight_options(const mxu_json_where *where,
                                      const cJSON *config, const char *weight,
                                      const char *class_name,
                                      const char *alias) {
  char key[64];
  snprintf(key, sizeof key, "%s_initializer", weight);
  MXU_TRY(mxu_json_initializer(where, config, key, class_name, alias));
  snprintf(key, sizeof key, "%s_regularizer", weight);
  MXU_TRY(mxu_json_require_null(where, config, key));
  snprintf(key, sizeof key, "%s_constraint", weight);
  return mxu_json_require_null(where, config, key);
}

static void write_null_keys(mxu_json_out *out, cJSON *config,
                            const char *const *keys) {
  for (; *keys; keys++) mxu_json_put_null(out, config, *keys);
}

static const char *padding_name(mxu_padding padding) {
  return padding == MXU_SAME ? "same" : "valid";
}

/* ---- Conv2D --------------------------------------------------------------
 */

/* The keys Conv2D and Dense share for their kernel and bias. */
#define WEIGHT_OPTION_KEYS                                                     \
  "kernel_initializer", "bias_initializer", "kernel_regularizer",              \
      "bias_regularizer", "activity_regularizer", "kernel_constraint",         \
      "bias_constraint", NULL

static const char *const conv2d_keys[] = {
    "filters",     "kernel_size",     "strides", "padding",
    "data_format", "dilation_rate",   "groups",  "activation",
    "use_bias",    WEIGHT_OPTION_KEYS};

static mxu_status read_conv2d(const mxu_json_where *where, const cJSON *config,
                              mxu_json_node *node, const char *name) {
  mxu_conv2d_config conv = mxu_conv2d_defaults(0, 0, 0);
  conv.name = name;
  MXU_TRY(mxu_json_int(where, config, "filters", MXU_JSON_REQUIRED, 1, INT_MAX,
                       &conv.filters));
  MXU_TRY(mxu_json_int_pair(where, config, "kernel_size", MXU_JSON_REQUIRED,
                            conv.kernel_size));
  MXU_TRY(mxu_json_int_pair(where, config, "strides", MXU_JSON_OPTIONAL,
                            conv.strides));
  MXU_TRY(mxu_json_padding(where, config, &conv.padding));
  MXU_TRY(mxu_json_data_format(where, config));
  MXU_TRY(mxu_json_require_ones(where, config, "dilation_rate"));
  int groups = 1;
  MXU_TRY(mxu_json_int(where, config, "groups", MXU_JSON_OPTIONAL, 1, INT_MAX,
                       &groups));
  if (groups != 1)
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                         "groups %d is not supported (only 1)", groups);
  MXU_TRY(mxu_json_activation(where, config, "activation", &conv.activation));
  MXU_TRY(mxu_json_bool(where, config, "use_bias", &conv.use_bias));
  MXU_TRY(read_weight_options(where, config, "kernel", "GlorotUniform",
                              "glorot_uniform"));
  MXU_TRY(read_weight_options(where, config, "bias", "Zeros", "zeros"));
  MXU_TRY(mxu_json_require_null(where, config, "activity_regularizer"));
  return mxu_json_applied(
      where, node, mxu_apply_conv2d(node->model, &conv, node->inputs[0]));
}

static void write_conv2d(mxu_json_out *out, const mxu_layer *layer,
                         cJSON *config) {
  static const char *const nulls[] = {
      "kernel_regularizer", "bias_regularizer", "activity_regularizer",
      "kernel_constraint",  "bias_constraint",  NULL};
  const mxu_conv2d_config *conv = &layer->config.conv;
  static const int ones[2] = {1, 1};
  mxu_json_put_number(out, config, "filters", conv->filters);
  mxu_json_put_pair(out, config, "kernel_size", conv->kernel_size);
  mxu_json_put_pair(out, config, "strides", conv->strides);
  mxu_json_put_string(out, config, "padding", padding_name(conv->padding));
  mxu_json_put_string(out, config, "data_format", "channels_last");
  mxu_json_put_pair(out, config, "dilation_rate", ones);
  mxu_json_put_number(out, config, "groups", 1);
  mxu_json_put_string(out, config, "activation",
                      mxu_json_activation_name(conv->activation));
  mxu_json_put_bool(out, config, "use_bias", conv->use_bias);
  mxu_json_put_initializer(out, config, "kernel_initializer", "GlorotUniform");
  mxu_json_put_initializer(out, config, "bias_initializer", "Zeros");
  write_null_keys(out, config, nulls);
}

/* ---- MaxPooling2D, AveragePooling2D --------------------------------------
 */

static const char *const pool2d_keys[] = {"pool_size", "padding", "strides",
                                          "data_format", NULL};

static mxu_status read_pool2d(const mxu_json_where *where, const cJSON *config,
                              mxu_pool2d_config *pool, const char *name) {
  *pool = mxu_pool2d_defaults(2, 2);
  pool->name = name;
  MXU_TRY(mxu_json_int_pair(where, config, "pool_size", MXU_JSON_OPTIONAL,
                            pool->pool_size));
  /* Keras: strides=None means the pool size. */
  pool->strides[0] = pool->pool_size[0];
  pool->strides[1] = pool->pool_size[1];
  const cJSON *strides = mxu_json_get(config, "strides");
  if (strides && !cJSON_IsNull(strides))
    MXU_TRY(mxu_json_int_pair(where, config, "strides", MXU_JSON_OPTIONAL,
                              pool->strides));
  MXU_TRY(mxu_json_padding(where, config, &pool->padding));
  return mxu_json_data_format(where, config);
}

static mxu_status read_max_pooling2d(const mxu_json_where *where,
                                     const cJSON *config, mxu_json_node *node,
                                     const char *name) {
  mxu_pool2d_config pool;
  MXU_TRY(read_pool2d(where, config, &pool, name));
  return mxu_json_applied(
      where, node,
      mxu_apply_max_pooling2d(node->model, &pool, node->inputs[0]));
}

static mxu_status read_average_pooling2d(const mxu_json_where *where,
                                         const cJSON *config,
                                         mxu_json_node *node,
                                         const char *name) {
  mxu_pool2d_config pool;
  MXU_TRY(read_pool2d(where, config, &pool, name));
  return mxu_json_applied(
      where, node,
      mxu_apply_average_pooling2d(node->model, &pool, node->inputs[0]));
}

static void write_pool2d(mxu_json_out *out, const mxu_layer *layer,
                         cJSON *config) {
  const mxu_pool2d_config *pool = &layer->config.pool;
  mxu_json_put_pair(out, config, "pool_size", pool->pool_size);
  mxu_json_put_string(out, config, "padding", padding_name(pool->padding));
  mxu_json_put_pair(out, config, "strides", pool->strides);
  mxu_json_put_string(out, config, "data_format", "channels_last");
}

/* ---- Activation ----------------------------------------------------------
 */

static const char *const activation_keys[] = {"activation", NULL};

static mxu_status read_activation(const mxu_json_where *where,
                                  const cJSON *config, mxu_json_node *node,
                                  const char *name) {
  mxu_activation activation = MXU_LINEAR;
  if (!mxu_json_get(config, "activation"))
    return mxu_json_fail(where, MXU_ERR_FORMAT, "activation is missing");
  MXU_TRY(mxu_json_activation(where, config, "activation", &activation));
  return mxu_json_applied(
      where, node,
      mxu_apply_activation(node->model, name, activation, node->inputs[0]));
}

static void write_activation(mxu_json_out *out, const mxu_layer *layer,
                             cJSON *config) {
  mxu_json_put_string(out, config, "activation",
                      mxu_json_activation_name(layer->config.activation));
}

/* ---- Flatten -------------------------------------------------------------
 */

static const char *const flatten_keys[] = {"data_format", NULL};

static mxu_status read_flatten(const mxu_json_where *where, const cJSON *config,
                               mxu_json_node *node, const char *name) {
  /* channels_first would flatten in (c, h, w) order. */
  MXU_TRY(mxu_json_data_format(where, config));
  return mxu_json_applied(
      where, node, mxu_apply_flatten(node->model, name, node->inputs[0]));
}

static void write_flatten(mxu_json_out *out, const mxu_layer *layer,
                          cJSON *config) {
  (void)layer;
  mxu_json_put_string(out, config, "data_format", "channels_last");
}

/* ---- Dense ---------------------------------------------------------------
 */

static const char *const dense_keys[] = {"units", "activation", "use_bias",
                                         WEIGHT_OPTION_KEYS};

static mxu_status read_dense(const mxu_json_where *where, const cJSON *config,
                             mxu_json_node *node, const char *name) {
  mxu_dense_config dense = mxu_dense_defaults(0);
  dense.name = name;
  MXU_TRY(mxu_json_int(where, config, "units", MXU_JSON_REQUIRED, 1, INT_MAX,
                       &dense.units));
  MXU_TRY(mxu_json_activation(where, config, "activation", &dense.activation));
  MXU_TRY(mxu_json_bool(where, config, "use_bias", &dense.use_bias));
  MXU_TRY(read_weight_options(where, config, "kernel", "GlorotUniform",
                              "glorot_uniform"));
  MXU_TRY(read_weight_options(where, config, "bias", "Zeros", "zeros"));
  MXU_TRY(mxu_json_require_null(where, config, "activity_regularizer"));
  return mxu_json_applied(
      where, node, mxu_apply_dense(node->model, &dense, node->inputs[0]));
}

static void write_dense(mxu_json_out *out, const mxu_layer *layer,
                        cJSON *config) {
  const mxu_dense_config *dense = &layer->config.dense;
  mxu_json_put_number(out, config, "units", dense->units);
  mxu_json_put_string(out, config, "activation",
                      mxu_json_activation_name(dense->activation));
  mxu_json_put_bool(out, config, "use_bias", dense->use_bias);
  mxu_json_put_initializer(out, config, "kernel_initializer", "GlorotUniform");
  mxu_json_put_initializer(out, config, "bias_initializer", "Zeros");
  mxu_json_put_null(out, config, "kernel_regularizer");
  mxu_json_put_null(out, config, "bias_regularizer");
  /* Keras 3 writes activity_regularizer only when one is set. */
  if (!out->keras3) mxu_json_put_null(out, config, "activity_regularizer");
  mxu_json_put_null(out, config, "kernel_constraint");
  mxu_json_put_null(out, config, "bias_constraint");
}

/* ---- Dropout -------------------------------------------------------------
 */

static const char *const dropout_keys[] = {"rate", "noise_shape", "seed", NULL};

static mxu_status read_dropout(const mxu_json_where *where, const cJSON *config,
                               mxu_json_node *node, const char *name) {
  float rate = 0;
  MXU_TRY(mxu_json_float(where, config, "rate", MXU_JSON_REQUIRED, &rate));
  MXU_TRY(mxu_json_require_null(where, config, "noise_shape"));
  /* The seed is ignored: mxu's masks come from its own counter-based
   * streams, keyed by the fit seed. */
  return mxu_json_applied(
      where, node, mxu_apply_dropout(node->model, name, rate, node->inputs[0]));
}

static void write_dropout(mxu_json_out *out, const mxu_layer *layer,
                          cJSON *config) {
  mxu_json_put_float(out, config, "rate", layer->config.dropout.rate);
  mxu_json_put_null(out, config, "noise_shape");
  mxu_json_put_null(out, config, "seed");
}

/* ---- BatchNormalization --------------------------------------------------
 */

static const char *const batchnorm_keys[] = {"axis",
                                             "momentum",
                                             "epsilon",
                                             "center",
                                             "scale",
                                             "beta_initializer",
                                             "gamma_initializer",
                                             "moving_mean_initializer",
                                             "moving_variance_initializer",
                                             "beta_regularizer",
                                             "gamma_regularizer",
                                             "beta_constraint",
                                             "gamma_constraint",
                                             "renorm",
                                             "renorm_clipping",
                                             "renorm_momentum",
                                             "virtual_batch_size",
                                             "synchronized",
                                             "fused",
                                             NULL};

static mxu_shape input_shape(const mxu_json_node *node) {
  return node->model->layers[node->inputs[0]].out_shape;
}

/* mxu normalises over the last axis only: -1, or its index counting the
 * batch axis as tf.keras writes it once built ([3] for images). */
static mxu_status read_batchnorm_axis(const mxu_json_where *where,
                                      const cJSON *config,
                                      const mxu_json_node *node) {
  const cJSON *v = mxu_json_get(config, "axis");
  if (!v) return MXU_OK;
  const cJSON *axis =
      cJSON_IsArray(v) && cJSON_GetArraySize(v) == 1 ? v->child : v;
  int rank = input_shape(node).rank;
  int is_int = cJSON_IsNumber(axis) && axis->valuedouble >= -1e6 &&
               axis->valuedouble <= 1e6 &&
               axis->valuedouble == (double)(int)axis->valuedouble;
  char text[160];
  mxu_json_text(v, text, sizeof text);
  if (!is_int && !cJSON_IsArray(v))
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "axis must be an integer or a list of integers, got "
                         "%s",
                         text);
  if (is_int &&
      ((int)axis->valuedouble == -1 || (int)axis->valuedouble == rank))
    return MXU_OK;
  return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                       "axis %s is not supported (only the last axis, -1 or "
                       "%d)",
                       text, rank);
}

static mxu_status read_batchnorm(const mxu_json_where *where,
                                 const cJSON *config, mxu_json_node *node,
                                 const char *name) {
  mxu_batchnorm_config bn = mxu_batchnorm_defaults();
  bn.name = name;
  MXU_TRY(read_batchnorm_axis(where, config, node));
  MXU_TRY(mxu_json_float(where, config, "momentum", MXU_JSON_OPTIONAL,
                         &bn.momentum));
  MXU_TRY(
      mxu_json_float(where, config, "epsilon", MXU_JSON_OPTIONAL, &bn.epsilon));
  MXU_TRY(mxu_json_bool(where, config, "center", &bn.center));
  MXU_TRY(mxu_json_bool(where, config, "scale", &bn.scale));
  MXU_TRY(read_weight_options(where, config, "beta", "Zeros", "zeros"));
  MXU_TRY(read_weight_options(where, config, "gamma", "Ones", "ones"));
  MXU_TRY(mxu_json_initializer(where, config, "moving_mean_initializer",
                               "Zeros", "zeros"));
  MXU_TRY(mxu_json_initializer(where, config, "moving_variance_initializer",
                               "Ones", "ones"));
  MXU_TRY(mxu_json_require_false(where, config, "renorm"));
  MXU_TRY(mxu_json_require_null(where, config, "virtual_batch_size"));
  MXU_TRY(mxu_json_bool(where, config, "synchronized", &bn.synchronized));
  return mxu_json_applied(
      where, node,
      mxu_apply_batch_normalization(node->model, &bn, node->inputs[0]));
}

static void write_batchnorm(mxu_json_out *out, const mxu_layer *layer,
                            cJSON *config) {
  static const char *const nulls[] = {"beta_regularizer", "gamma_regularizer",
                                      "beta_constraint", "gamma_constraint",
                                      NULL};
  const mxu_batchnorm_config *bn = &layer->config.batchnorm;
  if (out->keras3) {
    mxu_json_put_number(out, config, "axis", -1);
  } else {
    /* tf.keras turns axis -1 into [last index] when the layer is built. */
    int last = layer->in_shape.rank;
    mxu_json_put(out, config, "axis", cJSON_CreateIntArray(&last, 1));
  }
  mxu_json_put_float(out, config, "momentum", bn->momentum);
  mxu_json_put_float(out, config, "epsilon", bn->epsilon);
  mxu_json_put_bool(out, config, "center", bn->center);
  mxu_json_put_bool(out, config, "scale", bn->scale);
  mxu_json_put_initializer(out, config, "beta_initializer", "Zeros");
  mxu_json_put_initializer(out, config, "gamma_initializer", "Ones");
  mxu_json_put_initializer(out, config, "moving_mean_initializer", "Zeros");
  mxu_json_put_initializer(out, config, "moving_variance_initializer", "Ones");
  write_null_keys(out, config, nulls);
  /* tf.keras knows the key since 2.12; older ones would reject it. */
  if (out->keras3 || bn->synchronized)
    mxu_json_put_bool(out, config, "synchronized", bn->synchronized);
}

/* ---- the table -----------------------------------------------------------
 */

static const mxu_json_layer_io layer_io[] = {
    {"Conv2D", read_conv2d, write_conv2d, conv2d_keys, 0},
    {"MaxPooling2D", read_max_pooling2d, write_pool2d, pool2d_keys, 0},
    {"AveragePooling2D", read_average_pooling2d, write_pool2d, pool2d_keys, 0},
    {"Activation", read_activation, write_activation, activation_keys, 0},
    {"Flatten", read_flatten, write_flatten, flatten_keys, 0},
    {"Dense", read_dense, write_dense, dense_keys, 0},
    {"Dropout", read_dropout, write_dropout, dropout_keys, 0},
    {"BatchNormalization", read_batchnorm, write_batchnorm, batchnorm_keys, 0},
    /* Keras' aliases; it always writes the names above. */
    {"Convolution2D", read_conv2d, write_conv2d, conv2d_keys, 1},
    {"MaxPool2D", read_max_pooling2d, write_pool2d, pool2d_keys, 1},
    {"AvgPool2D", read_average_pooling2d, write_pool2d, pool2d_keys, 1},
};

const char *mxu_json_layer_names(void) {
  static char names[1024];
  if (names[0]) return names;
  size_t used = 0;
  for (size_t i = 0; i < sizeof layer_io / sizeof *layer_io; i++)
    if (!layer_io[i].alias)
      used += (size_t)snprintf(names + used, sizeof names - used, "%s%s",
                               used ? ", " : "", layer_io[i].class_name);
  return names;
}

const mxu_json_layer_io *mxu_json_layer_io_find(const char *class_name) {
  for (size_t i = 0; i < sizeof layer_io / sizeof *layer_io; i++)
    if (strcmp(layer_io[i].class_name, class_name) == 0) return &layer_io[i];
  return NULL;
}
