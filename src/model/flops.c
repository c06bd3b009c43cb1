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
 * window, padding included, as a dense kernel computes them. Each layer
 * class counts its own (its flops hook); here: the loss, the update. */

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
  if (model->compiled) return model->plan.head[0].fused_softmax;
  return mxu_layer_ends_in_softmax(&model->layers[mxu_model_output(model)]);
}

/* Forward and backward of node i per sample, as step.c runs it: the
 * class counts its own. */
static double layer_flops(const mxu_model *model, int i,
                          const unsigned char *has_grad, double batch,
                          double replicas) {
  const mxu_layer *layer = &model->layers[i];
  if (!layer->cls->flops) return 0.0;
  mxu_flops_step step = {layer->input_count && has_grad[layer->inputs[0]],
                         i == mxu_model_output(model) && fused_softmax(model),
                         batch, replicas};
  return layer->cls->flops(layer, &step);
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
  unsigned char *has_grad = calloc((size_t)model->layer_count, 1);
  if (!has_grad) return 0.0;
  mxu_tensors_with_grad(model, has_grad);
  for (int i = 0; i < model->layer_count; i++)
    total += layer_flops(model, i, has_grad, batch, replicas);
  free(has_grad);
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
    /* The devices run every layer of their own (mxu_profile_device). */
    const mxu_layer *head =
        layer && !model->device && layer->compiled && layer->compiled->absorbed
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
