/* shared.c — what the layer families share: the activation after Conv2D
 * and Dense (fused into the backend op where it can be, a separate softmax
 * where it cannot, and the matching backward), 2-D window shape inference,
 * shape formatting, and the plan, FLOPs and copies of layers that move
 * values without computing. */
#include "model/layers/layers.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

/* A conv or dense op fuses what the backend can; any other activation
 * runs after it as its own op, from the pre-activation values z kept in
 * scratch[0] (softmax's logits, and what the other derivatives read). */
mxu_status mxu_epilogue_plan(mxu_layer *layer, mxu_activation activation,
                             const mxu_backend *backend, int64_t rows, int cols,
                             mxu_arena *layout, mxu_activation *fused) {
  int separate = !mxu_activation_fusable(activation);
  *fused = separate ? MXU_LINEAR : activation;
  if (activation == MXU_LINEAR) return MXU_OK;
  mxu_activation_desc desc = {activation, rows, cols,
                              mxu_activation_alpha(activation)};
  MXU_TRY(backend->activation_create(&desc, &layer->compiled->ops[1]));
  size_t bytes = (size_t)rows * (size_t)cols * sizeof(float);
  if (separate) layer->compiled->scratch[0] = mxu_arena_reserve(layout, bytes);
  layer->compiled->scratch[1] = mxu_arena_reserve(layout, bytes);
  return MXU_OK;
}

static float *pre_activation(const mxu_layer *layer, const mxu_layer_run *run) {
  return (float *)(void *)(run->arena + layer->compiled->scratch[0]);
}

float *mxu_epilogue_target(const mxu_layer *layer, mxu_activation activation,
                           const mxu_layer_run *run) {
  return mxu_activation_fusable(activation) ? run->y
                                            : pre_activation(layer, run);
}

void mxu_epilogue_forward(const mxu_layer *layer, mxu_activation activation,
                          const mxu_layer_run *run) {
  if (!mxu_activation_fusable(activation))
    run->backend->activation_forward(run->ops[1], pre_activation(layer, run),
                                     run->y);
}

const float *mxu_epilogue_backward(const mxu_layer *layer,
                                   mxu_activation activation,
                                   const mxu_layer_run *run) {
  if (activation == MXU_LINEAR || run->fused_softmax) return run->dy;
  float *dz = (float *)(void *)(run->arena + layer->compiled->scratch[1]);
  run->backend->activation_backward(
      run->ops[1],
      mxu_activation_fusable(activation) ? NULL : pre_activation(layer, run),
      run->y, run->dy, dz);
  return dz;
}

const float *mxu_epilogue_logits(const mxu_layer *layer,
                                 mxu_activation activation,
                                 const mxu_layer_run *run) {
  if (activation != MXU_SOFTMAX) return NULL;
  return pre_activation(layer, run);
}

void mxu_shape_format(const mxu_shape *shape, char *out, size_t size) {
  size_t used = (size_t)snprintf(out, size, "(");
  for (int i = 0; i < shape->rank && used < size; i++)
    used += (size_t)snprintf(out + used, size - used, "%s%lld", i ? ", " : "",
                             (long long)shape->dims[i]);
  if (used < size) snprintf(out + used, size - used, ")");
}

const char *mxu_keras3_group(const mxu_layer *layer, int k) {
  if (layer->wrapped[0]) return "layer"; /* TimeDistributed's */
  return layer->cls->keras3_group ? layer->cls->keras3_group(layer, k) : NULL;
}

mxu_shape mxu_image_shape(const mxu_layer *layer, const mxu_shape *shape) {
  mxu_shape step = *shape;
  if (layer->time_steps && step.rank > 1) /* each step an image */
    step = mxu_shape_make(step.rank - 1, step.dims + 1);
  if (!layer->cls->sequence || step.rank != 2) return step;
  int64_t dims[3] = {1, step.dims[0], step.dims[1]};
  return mxu_shape_make(3, dims);
}

mxu_shape mxu_steps_shape(const mxu_layer *layer, mxu_shape step) {
  if (!layer->time_steps) return step;
  int64_t dims[MXU_MAX_RANK] = {layer->time_steps};
  for (int i = 0; i < step.rank && i + 1 < MXU_MAX_RANK; i++)
    dims[i + 1] = step.dims[i];
  return mxu_shape_make(step.rank + 1, dims);
}

mxu_status mxu_window_infer(mxu_layer *layer, const char *window,
                            const int size[2], const int strides[2],
                            mxu_padding padding, int causal, int channels_out) {
  char text[64];
  mxu_shape_format(&layer->in_shape, text, sizeof text);
  int sequence = layer->cls->sequence, steps = layer->time_steps > 0;
  if (layer->in_shape.rank != (sequence ? 2 : 3) + steps)
    return mxu_fail(
        MXU_ERR_SHAPE, "%s: expects %s input, got %s", layer->name,
        sequence ? (steps ? "(steps, steps, channels)" : "(steps, channels)")
        : steps  ? "(steps, height, width, channels)"
                 : "(height, width, channels)",
        text);
  if (size[0] <= 0 || size[1] <= 0 || strides[0] <= 0 || strides[1] <= 0 ||
      size[0] > MXU_MAX_WINDOW || size[1] > MXU_MAX_WINDOW ||
      strides[0] > MXU_MAX_WINDOW || strides[1] > MXU_MAX_WINDOW)
    return mxu_fail(MXU_ERR_ARG,
                    "%s: %s size %dx%d and strides %dx%d must be in 1..%d "
                    "(MXU_MAX_WINDOW)",
                    layer->name, window, size[0], size[1], strides[0],
                    strides[1], MXU_MAX_WINDOW);
  if (padding == MXU_CAUSAL && !causal)
    return mxu_fail(MXU_ERR_ARG,
                    "%s: padding 'causal' is Conv1D's only (as in Keras): use "
                    "'valid' or 'same'",
                    layer->name);
  mxu_shape image = mxu_image_shape(layer, &layer->in_shape);
  int64_t out[3];
  for (int i = 0; i < 2; i++) {
    out[i] = mxu_conv_output_size((int)image.dims[i], size[i], strides[i],
                                  padding, NULL, NULL);
    if (out[i] <= 0)
      return mxu_fail(MXU_ERR_SHAPE,
                      "%s: input %s is smaller than the %dx%d %s with "
                      "'valid' padding (use 'same' or a larger input)",
                      layer->name, text, size[0], size[1], window);
  }
  out[2] = channels_out;
  layer->out_shape = mxu_steps_shape(
      layer, sequence ? mxu_shape_make(2, &out[1]) : mxu_shape_make(3, out));
  return MXU_OK;
}

void mxu_write_nothing(mxu_json_out *out, const mxu_layer *layer,
                       cJSON *config) {
  (void)out;
  (void)layer;
  (void)config;
}

mxu_status mxu_no_plan(mxu_layer *layer, const mxu_backend *backend, int batch,
                       mxu_arena *layout) {
  (void)layer;
  (void)backend;
  (void)batch;
  (void)layout;
  return MXU_OK;
}

double mxu_no_flops(const mxu_layer *layer, const mxu_flops_step *step) {
  (void)layer;
  (void)step;
  return 0.0;
}

double mxu_activation_cost(mxu_activation activation, int backward) {
  /* Per element: forward, backward. */
  static const double cost[][2] = {
      [MXU_LINEAR] = {0, 0},
      [MXU_RELU] = {1, 1},    /* max(x, 0); dy, y > 0 */
      [MXU_SIGMOID] = {4, 3}, /* 1 / (1 + exp(-x)); dy * y * (1 - y) */
      [MXU_TANH] = {1, 3},    /* tanh; dy * (1 - y * y) */
      [MXU_SOFTMAX] = {5, 4}, /* max, subtract, exp, sum, divide;
                               * y * (dy - sum(dy * y)) */
      /* The others as their formulas count, a transcendental as one. */
      [MXU_RELU6] = {2, 2},
      [MXU_LEAKY_RELU] = {2, 2},
      [MXU_ELU] = {3, 3},
      [MXU_SELU] = {4, 4},
      [MXU_GELU] = {5, 7},
      [MXU_GELU_TANH] = {8, 14},
      [MXU_SILU] = {5, 6},
      [MXU_SOFTPLUS] = {3, 4},
      [MXU_SOFTSIGN] = {3, 4},
      [MXU_HARD_SIGMOID] = {4, 3},
      [MXU_HARD_SIGMOID_TF2] = {4, 3},
      [MXU_HARD_SILU] = {5, 6},
      [MXU_EXPONENTIAL] = {1, 1},
      [MXU_MISH] = {7, 12},
      [MXU_CELU] = {3, 3},
      [MXU_HARD_TANH] = {2, 2},
      [MXU_LOG_SIGMOID] = {4, 4},
      [MXU_TANH_SHRINK] = {2, 3},
      [MXU_SQUAREPLUS] = {5, 6},
      [MXU_SPARSE_PLUS] = {4, 3},
      [MXU_SPARSE_SIGMOID] = {4, 2},
      [MXU_SOFT_SHRINK] = {3, 2},
      [MXU_HARD_SHRINK] = {2, 2},
      [MXU_LOG_SOFTMAX] = {5, 4}, /* as softmax, a log for the divide */
  };
  return cost[activation][backward != 0];
}

/* The weight gradient and the data gradient each cost what forward does;
 * the first layer skips the data gradient. The bias costs an add forward
 * and a sum backward; the fused activation its epilogue, whose backward a
 * fused softmax skips. */
double mxu_weighted_flops(double outputs, double window, int use_bias,
                          mxu_activation activation,
                          const mxu_flops_step *step) {
  double dot = 2.0 * outputs * window;
  double bias = use_bias ? 2.0 * outputs : 0.0;
  double epilogue = mxu_activation_cost(activation, 0) * outputs;
  if (!step->fused_softmax)
    epilogue += mxu_activation_cost(activation, 1) * outputs;
  return dot * (2 + step->need_dx) + bias + epilogue;
}

/* The bytes of the layer's input over the batch (a TimeDistributed
 * layer's compiled batch counts its steps: its in_shape holds them). */
static size_t input_bytes(const mxu_layer *layer) {
  int64_t samples =
      layer->compiled->batch / (layer->time_steps ? layer->time_steps : 1);
  return (size_t)(samples * mxu_shape_count(&layer->in_shape)) * sizeof(float);
}

void mxu_view_forward(mxu_layer *layer, const mxu_layer_run *run) {
  if (run->y != run->x) memcpy(run->y, run->x, input_bytes(layer));
}

void mxu_view_backward(mxu_layer *layer, const mxu_layer_run *run) {
  if (run->need_dx && run->dx != run->dy)
    memcpy(run->dx, run->dy, input_bytes(layer));
}

mxu_status mxu_config_weight_options(const mxu_json_where *where,
                                     const cJSON *config, const char *weight,
                                     mxu_weight_options *options) {
  char key[64];
  snprintf(key, sizeof key, "%s_initializer", weight);
  MXU_TRY(mxu_json_initializer(where, config, key, &options->initializer));
  snprintf(key, sizeof key, "%s_regularizer", weight);
  MXU_TRY(mxu_json_regularizer(where, config, key, &options->regularizer));
  snprintf(key, sizeof key, "%s_constraint", weight);
  return mxu_json_constraint(where, config, key, &options->constraint);
}

mxu_param_decl mxu_weight_decl(const char *name, mxu_shape shape,
                               const mxu_weight_options *options,
                               mxu_initializer fallback) {
  return (mxu_param_decl){.name = name,
                          .shape = shape,
                          .init = mxu_init_or(&options->initializer, fallback),
                          .trainable = 1,
                          .regularizer = options->regularizer,
                          .constraint = options->constraint};
}

void mxu_config_put_initializers(mxu_json_out *out, cJSON *config,
                                 const char *first, const mxu_initializer *a,
                                 mxu_initializer a_default, const char *second,
                                 const mxu_initializer *b,
                                 mxu_initializer b_default) {
  char key[64];
  mxu_initializer init = mxu_init_or(a, a_default);
  snprintf(key, sizeof key, "%s_initializer", first);
  mxu_json_put_initializer(out, config, key, &init);
  init = mxu_init_or(b, b_default);
  snprintf(key, sizeof key, "%s_initializer", second);
  mxu_json_put_initializer(out, config, key, &init);
}

void mxu_config_put_penalties(mxu_json_out *out, cJSON *config,
                              const char *first, const mxu_weight_options *a,
                              const char *second, const mxu_weight_options *b,
                              int activity) {
  char key[64];
  snprintf(key, sizeof key, "%s_regularizer", first);
  mxu_json_put_regularizer(out, config, key, &a->regularizer);
  snprintf(key, sizeof key, "%s_regularizer", second);
  mxu_json_put_regularizer(out, config, key, &b->regularizer);
  if (activity) mxu_json_put_null(out, config, "activity_regularizer");
  snprintf(key, sizeof key, "%s_constraint", first);
  mxu_json_put_constraint(out, config, key, &a->constraint);
  snprintf(key, sizeof key, "%s_constraint", second);
  mxu_json_put_constraint(out, config, key, &b->constraint);
}

mxu_status mxu_config_window_size(const mxu_json_where *where,
                                  const cJSON *config, const char *key,
                                  int required, int sequence, int size[2]) {
  if (sequence) return mxu_json_int_one(where, config, key, required, &size[1]);
  return mxu_json_int_pair(where, config, key, required, size);
}

void mxu_config_put_window_size(mxu_json_out *out, cJSON *config,
                                const char *key, const int size[2],
                                int sequence) {
  if (sequence)
    mxu_json_put_one(out, config, key, size[1]);
  else
    mxu_json_put_pair(out, config, key, size);
}

const char *mxu_padding_name(mxu_padding padding) {
  return padding == MXU_SAME     ? "same"
         : padding == MXU_CAUSAL ? "causal"
                                 : "valid";
}

/* Runs of `run` values (the trailing dims not broadcast), each starting in
 * the input where the output coordinates before them say. */
mxu_spread mxu_spread_of(const mxu_shape *in, const mxu_shape *out) {
  mxu_spread p = {1, mxu_shape_count(in), mxu_shape_count(out), in, out};
  for (int d = out->rank - 1; d >= 0 && in->dims[d] == out->dims[d]; d--)
    p.run *= out->dims[d];
  return p;
}

/* The input offset of the output's value at `at` (a run's start). */
static int64_t spread_at(const mxu_spread *p, int64_t at) {
  int64_t offset = 0, stride = 1;
  for (int d = p->out->rank - 1; d >= 0; d--) {
    int64_t coord = at % p->out->dims[d];
    at /= p->out->dims[d];
    if (p->in->dims[d] != 1) offset += coord * stride;
    stride *= p->in->dims[d];
  }
  return offset;
}

/* to_out: y = x spread; else dx = the sum of g over where x was spread. */
void mxu_spread_move(const mxu_spread *p, int64_t batch, const float *from,
                     float *to, int to_out) {
  if (!to_out) memset(to, 0, (size_t)(batch * p->in_count) * sizeof(float));
  for (int64_t b = 0; b < batch; b++)
    for (int64_t at = 0; at < p->out_count; at += p->run) {
      int64_t i = b * p->in_count + spread_at(p, at), o = b * p->out_count + at;
      if (to_out)
        memcpy(to + o, from + i, (size_t)p->run * sizeof(float));
      else
        for (int64_t j = 0; j < p->run; j++) to[i + j] += from[o + j];
    }
}

int mxu_input_mask(const mxu_layer *layer) { return layer->mask_in; }

mxu_status mxu_same_shape_infer(mxu_layer *layer) {
  if (layer->in_shape.rank < 1)
    return mxu_fail(MXU_ERR_SHAPE, "%s: input has no dimensions", layer->name);
  layer->out_shape = layer->in_shape;
  return MXU_OK;
}

mxu_status mxu_json_rate(const mxu_json_where *where, const cJSON *config,
                         const char *key, float *rate) {
  MXU_TRY(mxu_json_float(where, config, key, MXU_JSON_OPTIONAL, rate));
  if (*rate >= 0.0f && *rate < 1.0f) return MXU_OK;
  return mxu_json_fail(where, MXU_ERR_FORMAT, "%s %g must be in [0, 1)", key,
                       (double)*rate);
}

mxu_status mxu_json_last_axis(const mxu_json_where *where, const cJSON *config,
                              const mxu_json_node *node) {
  const cJSON *v = mxu_json_get(config, "axis");
  if (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 1)
    v = cJSON_GetArrayItem(v, 0);
  int rank = node->model->layers[node->inputs[0]].out_shape.rank;
  /* Under TimeDistributed the layer's own input has no steps axis. */
  if (node->model->time_distributed) rank--;
  if (!v || (cJSON_IsNumber(v) &&
             (v->valuedouble == -1 || v->valuedouble == (double)rank)))
    return MXU_OK;
  char text[160];
  mxu_json_text(mxu_json_get(config, "axis"), text, sizeof text);
  return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                       "axis %s is not supported (only the last axis, -1 or "
                       "%d)",
                       text, rank);
}

int64_t mxu_batch_values(const mxu_layer *layer) {
  return (int64_t)layer->compiled->batch * mxu_shape_count(&layer->in_shape);
}

/* ---- pjrt emitters --------------------------------------------------------
 */

int mxu_host_output(const mxu_layer *layer, const mxu_layer_run *run,
                    float *out) {
  if (!out) return 1;                /* asked whether it gives its output */
  mxu_layer *l = (mxu_layer *)layer; /* forward's signature; run's buffers */
  l->cls->forward(l, run);
  memcpy(out, run->y,
         (size_t)(layer->compiled->batch * mxu_shape_count(&layer->out_shape)) *
             sizeof(float));
  return 1;
}

int mxu_stream_noise(const mxu_layer_run *run, float *out) {
  if (!out) return 1; /* asked whether it draws */
  uint32_t words[4] = {run->rng.key[0], run->rng.key[1], run->rng.stream[0],
                       run->rng.stream[1]};
  memcpy(out, words, sizeof words);
  return 1;
}

mxu_hlo_value mxu_emit_host_output(const mxu_layer *layer, mxu_emit *e) {
  (void)layer;
  return e->training ? e->noise : e->in[0];
}

mxu_hlo_value mxu_emit_image_input(const mxu_layer *layer, mxu_emit *e) {
  if (!layer->cls->sequence && !layer->time_steps) return e->in[0];
  mxu_shape image = mxu_image_shape(layer, &layer->in_shape);
  return mxu_hlo_reshape(
      e->h, e->in[0], mxu_batch_shape(mxu_layer_rows(layer, e->batch), &image));
}

mxu_hlo_value mxu_emit_sequence_output(const mxu_layer *layer, mxu_emit *e,
                                       mxu_hlo_value y) {
  if (!layer->cls->sequence && !layer->time_steps) return y;
  return mxu_hlo_reshape(e->h, y, mxu_batch_shape(e->batch, &layer->out_shape));
}

mxu_hlo_value mxu_emit_view(const mxu_layer *layer, mxu_emit *e) {
  return mxu_hlo_reshape(e->h, e->in[0],
                         mxu_batch_shape(e->batch, &layer->out_shape));
}
