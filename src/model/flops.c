/* flops.c — what mxu bench measures against: the floating-point work of
 * one training step per sample, counted from the layer shapes, and the
 * per-layer times the strategy collects while profiling. */
#include "model/model.h"

#include <stdlib.h>
#include <string.h>

/* ---- FLOPs --------------------------------------------------------------
 * Counted as the kernels compute (cpu_ref spells each one out): a
 * multiply-add is 2; an add, multiply, division, square root, exp, log or
 * tanh is 1; so is a comparison that selects a value (max pooling, relu,
 * the dropout keep test). Integer work (the dropout RNG, index arithmetic)
 * and copies (Flatten) are free. Convolutions count every tap of the
 * window, padding included, as a dense kernel computes them. */

/* Per element of an activation: forward, backward. */
static const double activation_cost[][2] = {
    [MXU_LINEAR] = {0, 0},  [MXU_RELU] = {1, 1}, /* max(x, 0); dy where y > 0 */
    [MXU_SIGMOID] = {4, 3}, /* 1 / (1 + exp(-x)); dy * y * (1 - y) */
    [MXU_TANH] = {1, 3},    /* tanh; dy * (1 - y * y) */
    [MXU_SOFTMAX] = {5, 4}, /* max, subtract, exp, sum, divide;
                             * y * (dy - sum(dy * y)) */
};

/* BatchNormalization per element: forward mean 1, variance 3, normalise
 * 2, scale and shift 2; backward sums of dy and dy * xhat 3, xhat 2, dx 4
 * (the kernel always computes dx, even for the first layer). Per channel
 * and step the moving statistics take 2 adds per replica and 8 more. */
#define BN_FORWARD 8.0
#define BN_BACKWARD 9.0
#define BN_STATE_PER_REPLICA 2.0
#define BN_STATE 8.0

/* Dropout per element: the keep test and the multiply; backward one
 * multiply. */
#define DROPOUT_FORWARD 2.0
#define DROPOUT_BACKWARD 1.0

/* The loss per class: softmax cross-entropy from logits is a softmax (5)
 * and the gradient (p - t) * scale (2); Keras' cross-entropy on
 * probabilities normalises (2), forms -t / q and its dot with q (3) and
 * the gradient (g - dot) / sum * scale with q and g recomputed (5). Either
 * takes one log per sample. */
#define SOFTMAX_CE_PER_CLASS 7.0
#define CE_PER_CLASS 10.0
#define LOSS_PER_SAMPLE 1.0

/* Optimizer per trainable weight and step. Adam: m = b1 m + (1 - b1) g
 * (3), v = b2 v + (1 - b2) g g (4), w -= lr m / (sqrt(v) + eps) (5).
 * SGD: w -= lr g (2); with momentum v = mu v - lr g, w += v (4); Nesterov
 * w += mu v - lr g instead (7). */
#define ADAM_PER_WEIGHT 12.0
#define SGD_PER_WEIGHT 2.0
#define MOMENTUM_PER_WEIGHT 4.0
#define NESTEROV_PER_WEIGHT 7.0

/* Before compile there is no batch yet: Keras' default fit batch. */
#define DEFAULT_BATCH 32

/* Global batch and replica count of the plan the next step runs. */
static void step_shape(const mxu_model *model, double *batch,
                       double *replicas) {
  *batch = DEFAULT_BATCH;
  *replicas = 1;
  if (!model->compiled || model->plan.batch <= 0) return;
  *batch = (double)model->plan.batch * model->plan.replicas;
  *replicas = model->plan.replicas; /* slices: the tree adds over them */
}

/* The softmax the loss reads the logits of has no backward pass of its
 * own; compile decides it, and before compile it is Keras' default. */
static int fused_softmax(const mxu_model *model) {
  if (model->compiled) return model->plan.fused_softmax;
  const mxu_layer *last = &model->layers[mxu_model_output(model)];
  if (last->cls == &mxu_activation_class)
    return last->config.activation == MXU_SOFTMAX;
  if (last->cls == &mxu_dense_class)
    return last->config.dense.activation == MXU_SOFTMAX;
  return 0;
}

/* Conv2D and Dense: outputs values, each a dot product over `window`
 * inputs. The weight gradient and the data gradient each cost what
 * forward does; the first layer skips the data gradient. The bias costs
 * an add forward and a sum backward; the fused activation its epilogue,
 * whose backward a fused softmax skips. */
static double weighted_flops(double outputs, double window, int use_bias,
                             mxu_activation activation, int need_dx,
                             int fused) {
  double dot = 2.0 * outputs * window;
  double bias = use_bias ? 2.0 * outputs : 0.0;
  double epilogue = activation_cost[activation][0] * outputs;
  if (!fused) epilogue += activation_cost[activation][1] * outputs;
  return dot * (2 + need_dx) + bias + epilogue;
}

/* Max: window - 1 comparisons per output, and backward one add routing dy
 * into dx. Average: window - 1 adds and a division, and backward the
 * division and window adds. */
static double pool_flops(const mxu_layer *layer, double outputs, int need_dx) {
  const mxu_pool2d_config *c = &layer->config.pool;
  double window = (double)c->pool_size[0] * c->pool_size[1];
  if (layer->is_max_pool) return outputs * (window - 1 + (need_dx ? 1 : 0));
  return outputs * (window + (need_dx ? window + 1 : 0));
}

static double batchnorm_flops(const mxu_layer *layer, double elements,
                              double batch, double replicas) {
  double channels = (double)layer->in_shape.dims[layer->in_shape.rank - 1];
  double state = channels * (BN_STATE_PER_REPLICA * replicas + BN_STATE);
  return elements * (BN_FORWARD + BN_BACKWARD) + state / batch;
}

static double activation_layer_flops(mxu_activation activation, double elements,
                                     int need_dx, int fused) {
  double backward = need_dx && !fused ? activation_cost[activation][1] : 0.0;
  return elements * (activation_cost[activation][0] + backward);
}

static double dropout_flops(const mxu_layer *layer, double elements,
                            int need_dx) {
  if (layer->config.dropout.rate == 0.0f) return 0.0; /* copies */
  return elements * (DROPOUT_FORWARD + (need_dx ? DROPOUT_BACKWARD : 0.0));
}

/* Forward and backward of layer i per sample, as step.c runs it. */
static double layer_flops(const mxu_model *model, int i, double batch,
                          double replicas) {
  const mxu_layer *layer = &model->layers[i];
  const mxu_layer_class *cls = layer->cls;
  if (cls == &mxu_input_layer_class) return 0.0;
  int need_dx = model->layers[layer->inputs[0]].cls != &mxu_input_layer_class;
  if (cls->flops) return cls->flops(layer, need_dx);
  int fused = i == mxu_model_output(model) && fused_softmax(model);
  double outputs = (double)mxu_shape_count(&layer->out_shape);
  double inputs = (double)mxu_shape_count(&layer->in_shape);
  if (cls == &mxu_conv2d_class) {
    const mxu_conv2d_config *c = &layer->config.conv;
    double window = (double)c->kernel_size[0] * c->kernel_size[1] *
                    (double)layer->in_shape.dims[2];
    return weighted_flops(outputs, window, c->use_bias, c->activation, need_dx,
                          fused);
  }
  if (cls == &mxu_dense_class) {
    const mxu_dense_config *c = &layer->config.dense;
    return weighted_flops(outputs, inputs, c->use_bias, c->activation, need_dx,
                          fused);
  }
  if (cls == &mxu_max_pooling2d_class || cls == &mxu_average_pooling2d_class)
    return pool_flops(layer, outputs, need_dx);
  if (cls == &mxu_batch_normalization_class)
    return batchnorm_flops(layer, inputs, batch, replicas);
  if (cls == &mxu_activation_class)
    return activation_layer_flops(layer->config.activation, inputs, need_dx,
                                  fused);
  if (cls == &mxu_dropout_class) return dropout_flops(layer, inputs, need_dx);
  return 0.0; /* Flatten: a copy */
}

static double loss_flops(const mxu_model *model) {
  const mxu_layer *last = &model->layers[mxu_model_output(model)];
  double classes = (double)mxu_shape_count(&last->out_shape);
  int logits = fused_softmax(model) || model->compile.from_logits;
  return classes * (logits ? SOFTMAX_CE_PER_CLASS : CE_PER_CLASS) +
         LOSS_PER_SAMPLE;
}

static double optimizer_per_weight(const mxu_optimizer_config *o) {
  if (o->kind == MXU_ADAM) return ADAM_PER_WEIGHT;
  if (o->momentum == 0.0f) return SGD_PER_WEIGHT;
  return o->nesterov ? NESTEROV_PER_WEIGHT : MOMENTUM_PER_WEIGHT;
}

/* Once per step, so a sample's share is the step's work over the global
 * batch: the all-reduce's adds (replicas - 1 per weight) and the update.
 * Before compile the optimizer is Keras' default, Adam. */
static double update_flops(const mxu_model *model, double batch,
                           double replicas) {
  double weights = (double)mxu_model_param_count(model, 1);
  double per_weight = model->compiled
                          ? optimizer_per_weight(&model->compile.optimizer)
                          : ADAM_PER_WEIGHT;
  return weights * (replicas - 1 + per_weight) / batch;
}

double mxu_model_train_flops(const mxu_model *model) {
  if (!model || mxu_model_layer_count(model) == 0) return 0.0;
  double batch, replicas;
  step_shape(model, &batch, &replicas);
  double total = loss_flops(model) + update_flops(model, batch, replicas);
  for (int i = 0; i < model->layer_count; i++)
    total += layer_flops(model, i, batch, replicas);
  return total;
}

/* ---- profile ------------------------------------------------------------
 * The strategy adds the times (replicas.c); here they are switched on,
 * cleared and read. A compiled model only: its layer count is final. */

mxu_status mxu_profile_enable(mxu_model *model, int on) {
  if (!model) return mxu_fail(MXU_ERR_ARG, "profile: model is NULL");
  if (!on) {
    model->profiling = 0; /* the totals stay readable */
    return MXU_OK;
  }
  if (!model->compiled)
    return mxu_fail(MXU_ERR_ARG,
                    "profile: compile the model first, so its layers are "
                    "final");
  size_t bytes = 2 * (size_t)model->layer_count * sizeof(double);
  if (!model->profile) model->profile = malloc(bytes);
  if (!model->profile) return mxu_fail(MXU_ERR_NOMEM, "profile: out of memory");
  memset(model->profile, 0, bytes);
  model->profile_steps = 0;
  model->profiling = 1;
  return MXU_OK;
}

/* The node that runs node i inside its own op, or NULL. */
static const mxu_layer *fused_into(const mxu_model *model, int i) {
  for (int k = 0; k < model->layer_count; k++)
    for (int f = 0; f < model->layers[k].compiled->fused_layers; f++)
      if (model->layers[k].compiled->fused[f] == &model->layers[i])
        return &model->layers[k];
  return NULL;
}

/* The time of Keras' layer l: its node's, with a shared layer's other
 * calls; a model used as a layer: all its nodes'. */
static void layer_seconds(const mxu_model *model, int l, double *forward,
                          double *backward) {
  int node = mxu_model_node(model, l), first = node, last = node;
  if (node < 0) {
    const char *name = mxu_model_layer_name(model, l);
    for (int s = 1; s < model->scope_count; s++)
      if (!model->scopes[s].parent && !strcmp(model->scopes[s].name, name))
        first = model->scopes[s].first, last = model->scopes[s].last;
  }
  *forward = *backward = 0.0;
  for (int i = 0; model->profile && i < model->layer_count; i++)
    if ((i >= first && i <= last) ||
        (node >= 0 && model->layers[i].owner == node)) {
      *forward += model->profile[2 * i];
      *backward += model->profile[2 * i + 1];
    }
}

int mxu_profile_read(const mxu_model *model, mxu_layer_profile *out,
                     int capacity) {
  if (!model) return 0;
  int count = mxu_model_layer_count(model);
  for (int l = 0; out && l < count && l < capacity; l++) {
    int i = mxu_model_node(model, l);
    const mxu_layer *layer = i >= 0 ? &model->layers[i] : NULL;
    const mxu_layer *head =
        layer && layer->compiled && layer->compiled->absorbed
            ? fused_into(model, i)
            : NULL;
    double forward, backward;
    layer_seconds(model, l, &forward, &backward);
    out[l] = (mxu_layer_profile){mxu_model_layer_name(model, l),
                                 layer ? layer->cls->class_name : "Model",
                                 forward,
                                 backward,
                                 model->profile ? model->profile_steps : 0,
                                 head ? head->name : NULL};
  }
  return count;
}

int mxu_model_slice_rows(const mxu_model *model) {
  return model && model->compiled ? model->plan.batch : 0;
}
