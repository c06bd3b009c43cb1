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

/* ---- merges ----------------------------------------------------------------
 * Add, Subtract, Multiply, Average, Maximum, Minimum: no keys of their own;
 * Concatenate: its axis, counting the batch as Keras does. */

static const char *const merge_keys[] = {NULL};
static const char *const concatenate_keys[] = {"axis", NULL};

static mxu_status read_merge(const mxu_json_where *where, mxu_json_node *node,
                             mxu_merge_kind kind, const char *name, int axis) {
  return mxu_json_applied(where, node,
                          mxu_merge(node->model, kind, name, node->inputs,
                                    node->input_count, axis));
}

#define MERGE_READER(function, kind)                                           \
  static mxu_status function(const mxu_json_where *where, const cJSON *config, \
                             mxu_json_node *node, const char *name) {          \
    (void)config;                                                              \
    return read_merge(where, node, kind, name, -1);                            \
  }
MERGE_READER(read_add, MXU_MERGE_ADD)
MERGE_READER(read_subtract, MXU_MERGE_SUBTRACT)
MERGE_READER(read_multiply, MXU_MERGE_MULTIPLY)
MERGE_READER(read_average, MXU_MERGE_AVERAGE)
MERGE_READER(read_maximum, MXU_MERGE_MAXIMUM)
MERGE_READER(read_minimum, MXU_MERGE_MINIMUM)

static void write_nothing(mxu_json_out *out, const mxu_layer *layer,
                          cJSON *config) {
  (void)out;
  (void)layer;
  (void)config;
}

static mxu_status read_concatenate(const mxu_json_where *where,
                                   const cJSON *config, mxu_json_node *node,
                                   const char *name) {
  int axis = -1;
  MXU_TRY(mxu_json_int(where, config, "axis", MXU_JSON_OPTIONAL, -MXU_MAX_RANK,
                       MXU_MAX_RANK, &axis));
  if (axis == 0)
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                         "axis 0 (the batch) is not supported");
  return read_merge(where, node, MXU_MERGE_CONCATENATE, name, axis);
}

static void write_concatenate(mxu_json_out *out, const mxu_layer *layer,
                              cJSON *config) {
  mxu_json_put_number(out, config, "axis", layer->config.merge.axis);
}

/* ---- GlobalAveragePooling2D, GlobalMaxPooling2D ------------------------- */

static const char *const global_pool_keys[] = {"data_format", "keepdims", NULL};

static mxu_status read_global_pool(const mxu_json_where *where,
                                   const cJSON *config, mxu_json_node *node,
                                   const char *name, int is_max) {
  mxu_global_pool2d_config pool = {name, is_max, 0};
  MXU_TRY(mxu_json_data_format(where, config));
  MXU_TRY(mxu_json_bool(where, config, "keepdims", &pool.keepdims));
  return mxu_json_applied(
      where, node,
      mxu_apply_global_pooling2d(node->model, &pool, node->inputs[0]));
}

static mxu_status read_global_average(const mxu_json_where *where,
                                      const cJSON *config, mxu_json_node *node,
                                      const char *name) {
  return read_global_pool(where, config, node, name, 0);
}

static mxu_status read_global_max(const mxu_json_where *where,
                                  const cJSON *config, mxu_json_node *node,
                                  const char *name) {
  return read_global_pool(where, config, node, name, 1);
}

static void write_global_pool(mxu_json_out *out, const mxu_layer *layer,
                              cJSON *config) {
  mxu_json_put_string(out, config, "data_format", "channels_last");
  mxu_json_put_bool(out, config, "keepdims",
                    layer->config.global_pool.keepdims);
}

/* ---- ZeroPadding2D ---------------------------------------------------------
 * padding: n (all sides), [rows, columns] (symmetric), or [[top, bottom],
 * [left, right]]. */

static const char *const zero_padding_keys[] = {"padding", "data_format", NULL};

static int padding_amount(const cJSON *v, int *out) {
  if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 1 << 20 ||
      v->valuedouble != (double)(int)v->valuedouble)
    return 0;
  *out = (int)v->valuedouble;
  return 1;
}

/* A pair [a, b], or a lone number meaning (n, n). */
static int padding_pair(const cJSON *v, int out[2]) {
  if (padding_amount(v, &out[0])) {
    out[1] = out[0];
    return 1;
  }
  return cJSON_IsArray(v) && cJSON_GetArraySize(v) == 2 &&
         padding_amount(v->child, &out[0]) &&
         padding_amount(v->child->next, &out[1]);
}

static mxu_status read_zero_padding(const mxu_json_where *where,
                                    const cJSON *config, mxu_json_node *node,
                                    const char *name) {
  const cJSON *v = mxu_json_get(config, "padding");
  int rows[2] = {1, 1}, cols[2] = {1, 1}; /* Keras' default: 1 */
  int ok = 1;
  if (v && padding_amount(v, &rows[0])) {
    rows[1] = cols[0] = cols[1] = rows[0];
  } else if (v) {
    ok = cJSON_IsArray(v) && cJSON_GetArraySize(v) == 2;
    int nested = ok && cJSON_IsArray(v->child);
    if (ok && nested) {
      ok = padding_pair(v->child, rows) && padding_pair(v->child->next, cols);
    } else if (ok) {
      ok = padding_amount(v->child, &rows[0]) &&
           padding_amount(v->child->next, &cols[0]);
      rows[1] = rows[0];
      cols[1] = cols[0];
    }
  }
  if (!ok) {
    char text[160];
    mxu_json_text(v, text, sizeof text);
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "padding must be n, [rows, columns] or [[top, "
                         "bottom], [left, right]] of integers >= 0, got %s",
                         text);
  }
  MXU_TRY(mxu_json_data_format(where, config));
  mxu_zero_padding2d_config pad = {name, rows[0], rows[1], cols[0], cols[1]};
  return mxu_json_applied(
      where, node,
      mxu_apply_zero_padding2d(node->model, &pad, node->inputs[0]));
}

static void write_zero_padding(mxu_json_out *out, const mxu_layer *layer,
                               cJSON *config) {
  const mxu_zero_padding2d_config *c = &layer->config.padding;
  int rows[2] = {c->top, c->bottom}, cols[2] = {c->left, c->right};
  cJSON *both = cJSON_CreateArray();
  if (!both || !cJSON_AddItemToArray(both, cJSON_CreateIntArray(rows, 2)) ||
      !cJSON_AddItemToArray(both, cJSON_CreateIntArray(cols, 2)))
    out->failed = 1;
  mxu_json_put(out, config, "padding", both);
  mxu_json_put_string(out, config, "data_format", "channels_last");
}

/* ---- ReLU ------------------------------------------------------------------
 */

static const char *const relu_keys[] = {"max_value", "negative_slope",
                                        "threshold", NULL};

static mxu_status read_relu(const mxu_json_where *where, const cJSON *config,
                            mxu_json_node *node, const char *name) {
  mxu_relu_config relu = mxu_relu_defaults();
  relu.name = name;
  const cJSON *top = mxu_json_get(config, "max_value");
  if (top && !cJSON_IsNull(top)) {
    MXU_TRY(mxu_json_float(where, config, "max_value", MXU_JSON_REQUIRED,
                           &relu.max_value));
    if (relu.max_value < 0)
      return mxu_json_fail(where, MXU_ERR_FORMAT,
                           "max_value must be >= 0 or null, got %g",
                           (double)relu.max_value);
  }
  MXU_TRY(mxu_json_float(where, config, "negative_slope", MXU_JSON_OPTIONAL,
                         &relu.negative_slope));
  MXU_TRY(mxu_json_float(where, config, "threshold", MXU_JSON_OPTIONAL,
                         &relu.threshold));
  return mxu_json_applied(where, node,
                          mxu_apply_relu(node->model, &relu, node->inputs[0]));
}

static void write_relu(mxu_json_out *out, const mxu_layer *layer,
                       cJSON *config) {
  const mxu_relu_config *c = &layer->config.relu;
  if (c->max_value >= 0)
    mxu_json_put_float(out, config, "max_value", c->max_value);
  else
    mxu_json_put_null(out, config, "max_value");
  mxu_json_put_float(out, config, "negative_slope", c->negative_slope);
  mxu_json_put_float(out, config, "threshold", c->threshold);
}

/* ---- Reshape ---------------------------------------------------------------
 */

static const char *const reshape_keys[] = {"target_shape", NULL};

static mxu_status read_reshape(const mxu_json_where *where, const cJSON *config,
                               mxu_json_node *node, const char *name) {
  const cJSON *v = mxu_json_get(config, "target_shape");
  int count = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : 0;
  char text[160];
  mxu_json_text(v, text, sizeof text);
  if (count < 1 || count > MXU_MAX_RANK)
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "target_shape must be a list of 1 to %d dimensions, "
                         "got %s",
                         MXU_MAX_RANK, text);
  mxu_reshape_config reshape = {name, {count, {0}}};
  int d = 0;
  for (const cJSON *dim = v->child; dim; dim = dim->next, d++) {
    if (!cJSON_IsNumber(dim) || dim->valuedouble < -1 ||
        dim->valuedouble > (double)(1 << 30) ||
        dim->valuedouble != (double)(int64_t)dim->valuedouble)
      return mxu_json_fail(where, MXU_ERR_FORMAT,
                           "target_shape %s: dimensions must be integers, "
                           "-1 for one inferred",
                           text);
    reshape.target.dims[d] = (int64_t)dim->valuedouble;
  }
  return mxu_json_applied(
      where, node, mxu_apply_reshape(node->model, &reshape, node->inputs[0]));
}

static void write_reshape(mxu_json_out *out, const mxu_layer *layer,
                          cJSON *config) {
  const mxu_shape *t = &layer->config.reshape.target;
  cJSON *dims = cJSON_CreateArray();
  for (int d = 0; d < t->rank; d++)
    if (!dims ||
        !cJSON_AddItemToArray(dims, cJSON_CreateNumber((double)t->dims[d])))
      out->failed = 1;
  mxu_json_put(out, config, "target_shape", dims);
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
    {"Add", read_add, write_nothing, merge_keys, 0},
    {"Subtract", read_subtract, write_nothing, merge_keys, 0},
    {"Multiply", read_multiply, write_nothing, merge_keys, 0},
    {"Average", read_average, write_nothing, merge_keys, 0},
    {"Maximum", read_maximum, write_nothing, merge_keys, 0},
    {"Minimum", read_minimum, write_nothing, merge_keys, 0},
    {"Concatenate", read_concatenate, write_concatenate, concatenate_keys, 0},
    {"GlobalAveragePooling2D", read_global_average, write_global_pool,
     global_pool_keys, 0},
    {"GlobalMaxPooling2D", read_global_max, write_global_pool, global_pool_keys,
     0},
    {"ZeroPadding2D", read_zero_padding, write_zero_padding, zero_padding_keys,
     0},
    {"ReLU", read_relu, write_relu, relu_keys, 0},
    {"Reshape", read_reshape, write_reshape, reshape_keys, 0},
    /* Keras' aliases; it always writes the names above. */
    {"Convolution2D", read_conv2d, write_conv2d, conv2d_keys, 1},
    {"MaxPool2D", read_max_pooling2d, write_pool2d, pool2d_keys, 1},
    {"AvgPool2D", read_average_pooling2d, write_pool2d, pool2d_keys, 1},
    {"GlobalAvgPool2D", read_global_average, write_global_pool,
     global_pool_keys, 1},
    {"GlobalMaxPool2D", read_global_max, write_global_pool, global_pool_keys,
     1},
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
