/* activations.c — the layers that apply an activation: Activation,
 * ReLU, LeakyReLU, ELU, Softmax (through the backend's activation ops)
 * and PReLU (its slopes learned). */
#include "model/layers/layers.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static int64_t batch_rows(const mxu_layer *layer, const mxu_shape *shape) {
  /* Values per row of the last axis: activations and softmax act on it. */
  return (int64_t)layer->compiled->batch * mxu_shape_count(shape) /
         shape->dims[shape->rank - 1];
}

static size_t batch_bytes(const mxu_layer *layer, const mxu_shape *shape) {
  return (size_t)layer->compiled->batch * (size_t)mxu_shape_count(shape) *
         sizeof(float);
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
  MXU_TRY(mxu_json_activation(where, config, "activation",
                              node->model->keras2_names, &activation));
  return mxu_json_applied(
      where, node,
      mxu_apply_activation(node->model, name, activation, node->inputs[0]));
}

static void write_activation(mxu_json_out *out, const mxu_layer *layer,
                             cJSON *config) {
  mxu_json_put_string(out, config, "activation",
                      mxu_json_activation_name(layer->config.activation));
}

/* ---- Activation ---------------------------------------------------------
 */

/* The Activation layer's kind with its name's alpha; the others' own. */
static mxu_activation kind_of(const mxu_layer *layer) {
  return layer->cls == &mxu_activation_class ? layer->config.activation
                                             : layer->config.act.kind;
}

static float alpha_of(const mxu_layer *layer) {
  return layer->cls == &mxu_activation_class
             ? mxu_activation_alpha(layer->config.activation)
             : layer->config.act.alpha;
}

/* The backend's op of `kind` over the layer's input, as ops[0]. */
static mxu_status create_op(mxu_layer *layer, const mxu_backend *backend,
                            mxu_activation kind, float alpha) {
  const mxu_shape *s = &layer->in_shape;
  mxu_activation_desc d = {kind, batch_rows(layer, s),
                           (int)s->dims[s->rank - 1], alpha};
  return backend->activation_create(&d, &layer->compiled->ops[0]);
}

static mxu_status activation_plan(mxu_layer *layer, const mxu_backend *backend,
                                  int batch, mxu_arena *layout) {
  (void)batch;
  (void)layout;
  return create_op(layer, backend, kind_of(layer), alpha_of(layer));
}

static void activation_forward(mxu_layer *layer, const mxu_layer_run *run) {
  (void)layer;
  run->backend->activation_forward(run->ops[0], run->x, run->y);
}

static void activation_backward(mxu_layer *layer, const mxu_layer_run *run) {
  if (!run->need_dx) return;
  if (run->fused_softmax)
    memcpy(run->dx, run->dy, batch_bytes(layer, &layer->in_shape));
  else
    run->backend->activation_backward(run->ops[0], run->x, run->y, run->dy,
                                      run->dx);
}

static const float *activation_logits(const mxu_layer *layer,
                                      const mxu_layer_run *run) {
  return kind_of(layer) == MXU_SOFTMAX ? run->x : NULL;
}

static double activation_flops(const mxu_layer *layer,
                               const mxu_flops_step *step) {
  mxu_activation a = kind_of(layer);
  double backward =
      step->need_dx && !step->fused_softmax ? mxu_activation_cost(a, 1) : 0.0;
  return (double)mxu_shape_count(&layer->in_shape) *
         (mxu_activation_cost(a, 0) + backward);
}

static int activation_ends_in_softmax(const mxu_layer *layer) {
  return kind_of(layer) == MXU_SOFTMAX;
}

static mxu_hlo_value activation_emit(const mxu_layer *layer, mxu_emit *e) {
  return mxu_emit_activation(e, kind_of(layer), alpha_of(layer), e->in[0]);
}

const mxu_layer_class mxu_activation_class = {
    .output_mask = mxu_input_mask,
    .positionwise = 1,
    .class_name = "Activation",
    .flops = activation_flops,
    .ends_in_softmax = activation_ends_in_softmax,
    .config_keys = activation_keys,
    .read_config = read_activation,
    .write_config = write_activation,
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = mxu_same_shape_infer,
    .plan = activation_plan,
    .forward = activation_forward,
    .emit = activation_emit,
    .backward = activation_backward,
    .logits = activation_logits,
};

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

/* ---- ReLU -----------------------------------------------------------------
 * Keras' ReLU layer as its backend computes it: v = x where x > threshold
 * (else 0), clipped to [0, max_value] when there is one, minus
 * negative_slope * relu(threshold - x). At x == threshold that gives 0,
 * as Keras does. */

static mxu_status relu_infer(mxu_layer *layer) {
  const mxu_relu_config *c = &layer->config.relu;
  if (!isfinite(c->negative_slope) || !isfinite(c->threshold) ||
      c->negative_slope < 0 || isnan(c->max_value))
    return mxu_fail(MXU_ERR_ARG,
                    "%s: negative_slope must be >= 0 and threshold finite",
                    layer->name);
  return mxu_same_shape_infer(layer);
}

static double relu_flops(const mxu_layer *layer, const mxu_flops_step *step) {
  return (double)mxu_shape_count(&layer->in_shape) *
         (step->need_dx ? 4.0 : 2.0);
}

/* relu and relu6 (MobileNetV2's ReLU(6.)) as the backend's activation
 * ops, vectorised and threaded: the same values, since both only select
 * and clip (and relu6's gradient passes inside (0, 6) only, as below).
 * The loops below take the other configurations. */
static mxu_activation relu_kind(const mxu_relu_config *c) {
  if (c->threshold != 0.0f || c->negative_slope != 0.0f) return MXU_LINEAR;
  if (c->max_value < 0) return MXU_RELU;
  return c->max_value == 6.0f ? MXU_RELU6 : MXU_LINEAR;
}

mxu_activation mxu_layer_activation_kind(const mxu_layer *layer) {
  if (layer->cls == &mxu_activation_class) return layer->config.activation;
  if (layer->cls == &mxu_relu_class) return relu_kind(&layer->config.relu);
  return MXU_LINEAR;
}

static mxu_status relu_plan(mxu_layer *layer, const mxu_backend *backend,
                            int batch, mxu_arena *layout) {
  (void)batch;
  (void)layout;
  mxu_activation kind = relu_kind(&layer->config.relu);
  return kind == MXU_LINEAR ? MXU_OK : create_op(layer, backend, kind, 0.0f);
}

static void relu_forward(mxu_layer *layer, const mxu_layer_run *run) {
  if (run->ops[0]) {
    activation_forward(layer, run);
    return;
  }
  const mxu_relu_config *c = &layer->config.relu;
  int64_t count = mxu_batch_values(layer);
  float top = c->max_value, slope = c->negative_slope, t = c->threshold;
  int capped = top >= 0;
  for (int64_t i = 0; i < count; i++) {
    float x = run->x[i], v = x > t ? x : 0.0f;
    if (capped) v = v < 0.0f ? 0.0f : v > top ? top : v;
    run->y[i] = x < t ? v - slope * (t - x) : v;
  }
}

/* 1 where x passes (above the threshold, inside the clip), negative_slope
 * below the threshold, 0 elsewhere; tf.nn.relu6's open interval for the
 * relu6 case, which Keras routes there. */
static void relu_backward(mxu_layer *layer, const mxu_layer_run *run) {
  if (run->ops[0]) {
    activation_backward(layer, run);
    return;
  }
  if (!run->need_dx) return;
  const mxu_relu_config *c = &layer->config.relu;
  int64_t count = mxu_batch_values(layer);
  float top = c->max_value, slope = c->negative_slope, t = c->threshold;
  int capped = top >= 0, relu6 = t == 0.0f && top == 6.0f;
  for (int64_t i = 0; i < count; i++) {
    float x = run->x[i], g = 0.0f;
    if (x > t)
      g = !capped || (relu6 ? x < top : x >= 0.0f && x <= top) ? 1.0f : 0.0f;
    else if (x < t)
      g = slope;
    run->dx[i] = g * run->dy[i];
  }
}

static mxu_hlo_value relu_emit(const mxu_layer *layer, mxu_emit *e) {
  const mxu_relu_config *c = &layer->config.relu;
  mxu_hlo *h = e->h;
  mxu_hlo_value x = e->in[0], t = mxu_hlo_full_like(h, x, c->threshold);
  mxu_hlo_value zero = mxu_hlo_full_like(h, x, 0.0);
  mxu_hlo_value v =
      mxu_hlo_select(h, mxu_hlo_compare_op(h, MXU_HLO_GT, x, t), x, zero);
  if (c->max_value >= 0)
    v = mxu_hlo_binary(h, MXU_HLO_MINIMUM,
                       mxu_hlo_binary(h, MXU_HLO_MAXIMUM, v, zero),
                       mxu_hlo_full_like(h, x, c->max_value));
  if (c->negative_slope == 0) return v;
  mxu_hlo_value below =
      mxu_hlo_binary(h, MXU_HLO_SUBTRACT, v,
                     mxu_hlo_binary(h, MXU_HLO_MULTIPLY,
                                    mxu_hlo_full_like(h, x, c->negative_slope),
                                    mxu_hlo_binary(h, MXU_HLO_SUBTRACT, t, x)));
  return mxu_hlo_select(h, mxu_hlo_compare_op(h, MXU_HLO_LT, x, t), below, v);
}

const mxu_layer_class mxu_relu_class = {
    .output_mask = mxu_input_mask,
    .positionwise = 1,
    .class_name = "ReLU",
    .config_keys = relu_keys,
    .read_config = read_relu,
    .write_config = write_relu,
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = relu_infer,
    .flops = relu_flops,
    .plan = relu_plan,
    .forward = relu_forward,
    .backward = relu_backward,
    .emit = relu_emit,
};

/* ---- LeakyReLU, ELU, Softmax ------------------------------------------------
 * The Activation layer's ops with the layer's own parameter. LeakyReLU's
 * slope is negative_slope in Keras 3 and alpha in tf.keras 2. */

static const char *const leaky_relu_keys[] = {"negative_slope", "alpha", NULL};
static const char *const elu_keys[] = {"alpha", NULL};
static const char *const softmax_keys[] = {"axis", NULL};

static mxu_status read_leaky_relu(const mxu_json_where *where,
                                  const cJSON *config, mxu_json_node *node,
                                  const char *name) {
  float slope = 0.3f;
  MXU_TRY(mxu_json_float(where, config, "alpha", MXU_JSON_OPTIONAL, &slope));
  MXU_TRY(mxu_json_float(where, config, "negative_slope", MXU_JSON_OPTIONAL,
                         &slope));
  return mxu_json_applied(
      where, node,
      mxu_apply_leaky_relu(node->model, name, slope, node->inputs[0]));
}

static void write_leaky_relu(mxu_json_out *out, const mxu_layer *layer,
                             cJSON *config) {
  mxu_json_put_float(out, config, out->keras3 ? "negative_slope" : "alpha",
                     layer->config.act.alpha);
}

static mxu_status read_elu(const mxu_json_where *where, const cJSON *config,
                           mxu_json_node *node, const char *name) {
  float alpha = 1.0f;
  MXU_TRY(mxu_json_float(where, config, "alpha", MXU_JSON_OPTIONAL, &alpha));
  return mxu_json_applied(
      where, node, mxu_apply_elu(node->model, name, alpha, node->inputs[0]));
}

static void write_elu(mxu_json_out *out, const mxu_layer *layer,
                      cJSON *config) {
  mxu_json_put_float(out, config, "alpha", layer->config.act.alpha);
}

static mxu_status read_softmax(const mxu_json_where *where, const cJSON *config,
                               mxu_json_node *node, const char *name) {
  MXU_TRY(mxu_json_last_axis(where, config, node));
  return mxu_json_applied(
      where, node, mxu_apply_softmax(node->model, name, node->inputs[0]));
}

static void write_softmax(mxu_json_out *out, const mxu_layer *layer,
                          cJSON *config) {
  (void)layer;
  mxu_json_put_number(out, config, "axis", -1);
}

static mxu_status alpha_infer(mxu_layer *layer) {
  if (!isfinite(layer->config.act.alpha))
    return mxu_fail(MXU_ERR_ARG, "%s: alpha must be finite", layer->name);
  return mxu_same_shape_infer(layer);
}

#define ACTIVATION_LAYER(symbol, keras_name, reader, writer, keys)             \
  const mxu_layer_class symbol = {                                             \
      .output_mask = mxu_input_mask,                                           \
      .positionwise = 1,                                                       \
      .class_name = keras_name,                                                \
      .flops = activation_flops,                                               \
      .ends_in_softmax = activation_ends_in_softmax,                           \
      .config_keys = keys,                                                     \
      .read_config = reader,                                                   \
      .write_config = writer,                                                  \
      .min_inputs = 1,                                                         \
      .max_inputs = 1,                                                         \
      .infer = alpha_infer,                                                    \
      .plan = activation_plan,                                                 \
      .forward = activation_forward,                                           \
      .backward = activation_backward,                                         \
      .logits = activation_logits,                                             \
      .emit = activation_emit,                                                 \
  }

ACTIVATION_LAYER(mxu_leaky_relu_class, "LeakyReLU", read_leaky_relu,
                 write_leaky_relu, leaky_relu_keys);
ACTIVATION_LAYER(mxu_elu_class, "ELU", read_elu, write_elu, elu_keys);
ACTIVATION_LAYER(mxu_softmax_class, "Softmax", read_softmax, write_softmax,
                 softmax_keys);

/* ---- PReLU ---------------------------------------------------------------
 * Keras computes relu(x) - alpha * relu(-x): the slope alpha below 0, and
 * a gradient of 0 at 0 itself. alpha has the input's shape with each
 * shared axis 1, spread over the input as merges broadcast. */

static const char *const prelu_keys[] = {
    "alpha_initializer", "alpha_regularizer", "alpha_constraint", "shared_axes",
    NULL};

static mxu_status read_prelu(const mxu_json_where *where, const cJSON *config,
                             mxu_json_node *node, const char *name) {
  mxu_prelu_config c = {0};
  c.name = name;
  MXU_TRY(mxu_config_weight_options(where, config, "alpha", &c.alpha));
  const cJSON *axes = mxu_json_get(config, "shared_axes");
  if (cJSON_IsNumber(axes)) {
    c.shared_axes[c.shared_axis_count++] = (int)axes->valuedouble;
  } else if (cJSON_IsArray(axes)) {
    for (const cJSON *a = axes->child; a; a = a->next) {
      if (!cJSON_IsNumber(a) || c.shared_axis_count == MXU_MAX_RANK)
        return mxu_json_fail(where, MXU_ERR_FORMAT,
                             "shared_axes must be a list of at most %d axes",
                             MXU_MAX_RANK);
      c.shared_axes[c.shared_axis_count++] = (int)a->valuedouble;
    }
  } else if (axes && !cJSON_IsNull(axes)) {
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "shared_axes must be null or a list of axes");
  }
  return mxu_json_applied(where, node,
                          mxu_apply_prelu(node->model, &c, node->inputs[0]));
}

static void write_prelu(mxu_json_out *out, const mxu_layer *layer,
                        cJSON *config) {
  const mxu_prelu_config *c = &layer->config.prelu;
  mxu_initializer init = mxu_init_or(&c->alpha.initializer, mxu_init_zeros());
  mxu_json_put_initializer(out, config, "alpha_initializer", &init);
  mxu_json_put_regularizer(out, config, "alpha_regularizer",
                           &c->alpha.regularizer);
  mxu_json_put_constraint(out, config, "alpha_constraint",
                          &c->alpha.constraint);
  if (!c->shared_axis_count) {
    mxu_json_put_null(out, config, "shared_axes");
    return;
  }
  cJSON *axes = cJSON_CreateArray();
  for (int i = 0; axes && i < c->shared_axis_count; i++)
    cJSON_AddItemToArray(axes, cJSON_CreateNumber(c->shared_axes[i]));
  mxu_json_put(out, config, "shared_axes", axes);
}

static mxu_shape alpha_shape(const mxu_layer *layer) {
  mxu_shape s = layer->in_shape;
  const mxu_prelu_config *c = &layer->config.prelu;
  for (int i = 0; i < c->shared_axis_count; i++) {
    int axis = c->shared_axes[i];
    if (axis >= 1 && axis <= s.rank) s.dims[axis - 1] = 1;
  }
  return s;
}

static mxu_status prelu_infer(mxu_layer *layer) {
  const mxu_prelu_config *c = &layer->config.prelu;
  if (layer->in_shape.rank >= MXU_MAX_RANK) /* backward adds the batch */
    return mxu_fail(MXU_ERR_SHAPE, "%s: input of rank %d (at most %d)",
                    layer->name, layer->in_shape.rank, MXU_MAX_RANK - 1);
  for (int i = 0; i < c->shared_axis_count; i++)
    if (c->shared_axes[i] < 1 || c->shared_axes[i] > layer->in_shape.rank)
      return mxu_fail(MXU_ERR_ARG,
                      "%s: shared axis %d is not an axis of the input "
                      "(1..%d; 0 is the batch)",
                      layer->name, c->shared_axes[i], layer->in_shape.rank);
  return mxu_same_shape_infer(layer);
}

static int prelu_declare(const mxu_layer *layer, mxu_param_decl *decls) {
  decls[0] = mxu_weight_decl("alpha", alpha_shape(layer),
                             &layer->config.prelu.alpha, mxu_init_zeros());
  return 1;
}

/* alpha spread to the input's shape (scratch[0]); alpha's gradient at
 * every value before it is summed back (scratch[1]). */
static mxu_status prelu_plan(mxu_layer *layer, const mxu_backend *backend,
                             int batch, mxu_arena *layout) {
  (void)backend;
  size_t bytes = batch_bytes(layer, &layer->in_shape) / (size_t)batch;
  layer->compiled->scratch[0] = mxu_arena_reserve(layout, bytes);
  layer->compiled->scratch[1] =
      mxu_arena_reserve(layout, bytes * (size_t)batch);
  return MXU_OK;
}

static float *prelu_scratch(const mxu_layer_run *run, const mxu_layer *layer,
                            int k) {
  return (float *)(void *)(run->arena + layer->compiled->scratch[k]);
}

static void prelu_forward(mxu_layer *layer, const mxu_layer_run *run) {
  mxu_shape shape = alpha_shape(layer);
  mxu_spread p = mxu_spread_of(&shape, &layer->in_shape);
  float *alpha = prelu_scratch(run, layer, 0);
  mxu_spread_move(&p, 1, run->w[0], alpha, 1);
  int64_t per = mxu_shape_count(&layer->in_shape);
  for (int64_t b = 0; b < layer->compiled->batch; b++)
    for (int64_t i = 0; i < per; i++) {
      float x = run->x[b * per + i];
      run->y[b * per + i] = x > 0.0f ? x : alpha[i] * x;
    }
}

static void prelu_backward(mxu_layer *layer, const mxu_layer_run *run) {
  mxu_shape shape = alpha_shape(layer);
  const float *alpha = prelu_scratch(run, layer, 0);
  float *dalpha = prelu_scratch(run, layer, 1);
  int64_t per = mxu_shape_count(&layer->in_shape),
          batch = layer->compiled->batch;
  for (int64_t b = 0; b < batch; b++)
    for (int64_t i = 0; i < per; i++) {
      float x = run->x[b * per + i], dy = run->dy[b * per + i];
      if (run->need_dx)
        run->dx[b * per + i] = x > 0.0f ? dy : x < 0.0f ? alpha[i] * dy : 0.0f;
      dalpha[b * per + i] = x < 0.0f ? dy * x : 0.0f;
    }
  /* Summed over the batch and the shared axes, as one sample of the
   * batch's extent. */
  mxu_shape whole = layer->in_shape;
  for (int d = whole.rank; d > 0; d--) whole.dims[d] = whole.dims[d - 1];
  whole.dims[0] = batch;
  whole.rank++;
  mxu_shape one = shape;
  for (int d = one.rank; d > 0; d--) one.dims[d] = one.dims[d - 1];
  one.dims[0] = 1;
  one.rank++;
  mxu_spread p = mxu_spread_of(&one, &whole);
  mxu_spread_move(&p, 1, dalpha, run->dw[0], 0);
}

static double prelu_flops(const mxu_layer *layer, const mxu_flops_step *step) {
  return (double)mxu_shape_count(&layer->in_shape) *
         (step->need_dx ? 4.0 : 2.0);
}

/* alpha spread over the batch and the shared axes. */
static mxu_hlo_value prelu_emit(const mxu_layer *layer, mxu_emit *e) {
  mxu_hlo *h = e->h;
  mxu_hlo_value x = e->in[0];
  mxu_hlo_shape s = *mxu_hlo_shape_of(h, x);
  int64_t dims[MXU_HLO_MAX_RANK];
  for (int d = 0; d + 1 < s.rank; d++) dims[d] = d + 1;
  mxu_hlo_value alpha = mxu_hlo_broadcast(h, e->w[0], s, dims);
  (void)layer;
  return mxu_hlo_select(
      h, mxu_hlo_compare_op(h, MXU_HLO_GT, x, mxu_hlo_full_like(h, x, 0.0)), x,
      mxu_hlo_binary(h, MXU_HLO_MULTIPLY, alpha, x));
}

const mxu_layer_class mxu_prelu_class = {
    .output_mask = mxu_input_mask,
    .class_name = "PReLU",
    .flops = prelu_flops,
    .config_keys = prelu_keys,
    .read_config = read_prelu,
    .write_config = write_prelu,
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = prelu_infer,
    .declare = prelu_declare,
    .plan = prelu_plan,
    .forward = prelu_forward,
    .backward = prelu_backward,
    .emit = prelu_emit,
};
