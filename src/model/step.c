/* step.c — one step over the planned batch: forward through every layer,
 * the loss (fused with a final softmax, as Keras does), backward, and the
 * optimizer update over the one trainable buffer. */
#include "model/model.h"

#include <math.h>

static mxu_layer_run layer_run(mxu_model *model, int i, int training,
                               uint64_t seed, uint32_t epoch, uint32_t step) {
  mxu_plan *plan = &model->plan;
  mxu_layer *layer = &model->layers[i];
  mxu_layer_run run = {0};
  run.backend = model->backend;
  run.training = training;
  run.x = mxu_plan_floats(model, plan->act[i]);
  run.y = mxu_plan_floats(model, plan->act[i + 1]);
  run.dx = mxu_plan_floats(model, plan->grad[i]);
  run.dy = mxu_plan_floats(model, plan->grad[i + 1]);
  run.need_dx = i > 0;
  run.arena = plan->replica.arena.base;
  for (int k = 0; k < layer->param_count; k++) {
    const mxu_param *p = &model->params[layer->param_first + k];
    run.w[k] = (p->trainable ? model->weights : model->state) + p->offset;
    run.dw[k] = p->trainable ? model->grads + p->offset : NULL;
  }
  /* Replica 0 until the replicas issue; the stream names it already. */
  run.rng = mxu_rng_make(seed, MXU_STREAM_DROPOUT, epoch, step, (uint32_t)i);
  run.fused_softmax = plan->fused_softmax && i == model->layer_count - 1;
  return run;
}

static int64_t count_correct(const float *out, const int32_t *labels,
                             const float *mask, int64_t rows, int classes) {
  int64_t correct = 0;
  for (int64_t r = 0; r < rows; r++) {
    if (mask[r] == 0.0f) continue;
    const float *row = out + r * classes;
    int best = 0;
    for (int k = 1; k < classes; k++)
      if (row[k] > row[best]) best = k;
    correct += best == labels[r];
  }
  return correct;
}

/* The loss of the batch and, when training, its gradient with respect to
 * the last layer's output (or its logits, when the softmax is fused). */
static double loss_forward(mxu_model *model, const mxu_layer_run *last_run,
                           float scale) {
  mxu_plan *plan = &model->plan;
  const mxu_layer *last = &model->layers[model->layer_count - 1];
  int classes = (int)last->out_shape.dims[0];
  int64_t n = plan->batch;
  const int32_t *labels = NULL;
  const float *onehot = NULL;
  if (model->compile.loss == MXU_CATEGORICAL_CROSSENTROPY)
    onehot = mxu_plan_floats(model, plan->onehot);
  else
    labels =
        (const int32_t *)(const void *)mxu_plan_floats(model, plan->labels);
  const float *mask = mxu_plan_floats(model, plan->mask);
  float *loss = mxu_plan_floats(model, plan->loss);
  float *grad = mxu_plan_floats(model, plan->grad[model->layer_count]);
  const float *out = mxu_plan_floats(model, plan->act[model->layer_count]);
  if (plan->fused_softmax || model->compile.from_logits) {
    const float *logits =
        plan->fused_softmax ? last->cls->logits(last, last_run) : out;
    model->backend->softmax_cross_entropy(
        n, classes, logits, labels, onehot, mask, scale,
        mxu_plan_floats(model, plan->probs), loss, grad);
  } else {
    model->backend->cross_entropy(n, classes, out, labels, onehot, mask, scale,
                                  loss, grad);
  }
  double sum = 0;
  for (int64_t r = 0; r < n; r++) sum += loss[r];
  return sum;
}

mxu_step_result mxu_step_run(mxu_model *model, int training, int64_t rows,
                             float loss_scale, uint64_t seed, uint32_t epoch,
                             uint32_t step) {
  mxu_plan *plan = &model->plan;
  int n = model->layer_count;
  float *mask = mxu_plan_floats(model, plan->mask);
  for (int64_t r = 0; r < plan->batch; r++) mask[r] = r < rows ? 1.0f : 0.0f;
  mxu_layer_run runs[n];
  for (int i = 0; i < n; i++) {
    runs[i] = layer_run(model, i, training, seed, epoch, step);
    model->layers[i].cls->forward(&model->layers[i], &runs[i]);
  }
  mxu_step_result result;
  result.loss_sum = loss_forward(model, &runs[n - 1], loss_scale);
  int classes = (int)model->layers[n - 1].out_shape.dims[0];
  const int32_t *labels =
      (const int32_t *)(const void *)mxu_plan_floats(model, plan->labels);
  result.correct = count_correct(mxu_plan_floats(model, plan->act[n]), labels,
                                 mask, plan->batch, classes);
  if (training)
    for (int i = n - 1; i >= 0; i--)
      model->layers[i].cls->backward(&model->layers[i], &runs[i]);
  return result;
}

void mxu_optimizer_apply(mxu_model *model) {
  const mxu_optimizer_config *o = &model->compile.optimizer;
  model->iterations++;
  if (o->kind == MXU_ADAM) {
    /* Keras folds the bias correction into the step size. */
    double t = (double)model->iterations;
    double lr_t = o->learning_rate * sqrt(1.0 - pow(o->beta_2, t)) /
                  (1.0 - pow(o->beta_1, t));
    model->backend->adam_update(model->trainable_count, model->weights,
                                model->grads, model->slot_m, model->slot_v,
                                (float)lr_t, o->beta_1, o->beta_2, o->epsilon);
  } else {
    model->backend->sgd_update(model->trainable_count, model->weights,
                               model->grads, model->slot_m, o->learning_rate,
                               o->momentum, o->nesterov);
  }
}
