/* compile.c — turns a model into a static plan: the parameter table and its
 * buffers with Keras' initialisers, backend ops for a fixed batch, and one
 * arena holding every activation and gradient of a replica. */
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

mxu_optimizer_config mxu_adam(float learning_rate) {
  return (mxu_optimizer_config){MXU_ADAM, learning_rate, 0.9f, 0.999f,
                                1e-7f,    0.0f,          0};
}

mxu_optimizer_config mxu_sgd(float learning_rate, float momentum,
                             int nesterov) {
  return (mxu_optimizer_config){MXU_SGD, learning_rate, 0.0f,    0.0f,
                                0.0f,    momentum,      nesterov};
}

mxu_compile_config mxu_compile_defaults(void) {
  mxu_compile_config config = {0};
  config.optimizer = mxu_adam(1e-3f);
  config.loss = MXU_SPARSE_CATEGORICAL_CROSSENTROPY;
  config.batch_size = 32;
  config.backend = MXU_BACKEND_CPU;
  config.seed = 0;
  return config;
}

static mxu_status check_compile(const mxu_model *model,
                                const mxu_compile_config *c) {
  if (!model->has_input || model->layer_count == 0)
    return mxu_fail(MXU_ERR_ARG,
                    "compile: the model needs an input and at least one "
                    "layer");
  if (c->batch_size <= 0)
    return mxu_fail(MXU_ERR_ARG,
                    "compile: batch size %d must be a positive number of "
                    "samples",
                    c->batch_size);
  const mxu_optimizer_config *o = &c->optimizer;
  if (!(o->learning_rate > 0.0f) || !isfinite(o->learning_rate))
    return mxu_fail(MXU_ERR_ARG, "compile: learning rate %g must be positive",
                    (double)o->learning_rate);
  if (o->kind == MXU_ADAM &&
      !(o->beta_1 >= 0 && o->beta_1 < 1 && o->beta_2 >= 0 && o->beta_2 < 1 &&
        o->epsilon >= 0))
    return mxu_fail(MXU_ERR_ARG,
                    "compile: Adam needs 0 <= beta_1, beta_2 < 1 and "
                    "epsilon >= 0");
  if (o->kind == MXU_SGD && !(o->momentum >= 0 && o->momentum <= 1))
    return mxu_fail(MXU_ERR_ARG, "compile: SGD momentum must be in [0, 1]");
  const mxu_layer *last = &model->layers[model->layer_count - 1];
  if (last->out_shape.rank != 1 || last->out_shape.dims[0] < 2)
    return mxu_fail(MXU_ERR_SHAPE,
                    "compile: the last layer '%s' must output one score per "
                    "class (rank 1, at least 2 classes) for a "
                    "cross-entropy loss",
                    last->name);
  return MXU_OK;
}

/* glorot_uniform: U(-limit, limit), limit = sqrt(6 / (fan_in + fan_out)),
 * drawn from the stream (seed, INIT, layer, weight). */
static void initialise(float *values, const mxu_param_decl *d, uint64_t seed,
                       int layer, int index) {
  int64_t count = mxu_shape_count(&d->shape);
  if (d->init != MXU_INIT_GLOROT_UNIFORM) {
    float value = d->init == MXU_INIT_ONES ? 1.0f : 0.0f;
    for (int64_t i = 0; i < count; i++) values[i] = value;
    return;
  }
  float limit = sqrtf(6.0f / (float)(d->fan_in + d->fan_out));
  mxu_rng rng =
      mxu_rng_make(seed, MXU_STREAM_INIT, (uint32_t)layer, (uint32_t)index, 0);
  mxu_rng_uniform(&rng, 0, values, (size_t)count);
  for (int64_t i = 0; i < count; i++)
    values[i] = limit * (2.0f * values[i] - 1.0f);
}

static mxu_status build_params(mxu_model *model) {
  int total = 0;
  mxu_param_decl decls[MXU_MAX_LAYER_PARAMS];
  for (int i = 0; i < model->layer_count; i++)
    total += model->layers[i].cls->declare(&model->layers[i], decls);
  free(model->params);
  model->params = calloc((size_t)total + 1, sizeof *model->params);
  if (!model->params) return mxu_fail(MXU_ERR_NOMEM, "compile: out of memory");
  model->param_count = 0;
  model->trainable_count = model->state_count = 0;
  for (int i = 0; i < model->layer_count; i++) {
    mxu_layer *layer = &model->layers[i];
    int n = layer->cls->declare(layer, decls);
    layer->param_first = model->param_count;
    layer->param_count = n;
    for (int k = 0; k < n; k++) {
      mxu_param *p = &model->params[model->param_count++];
      int64_t *counter =
          decls[k].trainable ? &model->trainable_count : &model->state_count;
      *p = (mxu_param){i,
                       decls[k].name,
                       decls[k].shape,
                       decls[k].trainable,
                       *counter,
                       mxu_shape_count(&decls[k].shape)};
      /* Each weight starts on a 64-byte boundary. */
      *counter += (p->count + 15) / 16 * 16;
    }
  }
  return MXU_OK;
}

static mxu_status allocate_params(mxu_model *model) {
  size_t trainable = (size_t)model->trainable_count * sizeof(float);
  size_t state = (size_t)model->state_count * sizeof(float);
  float **buffers[] = {&model->weights, &model->grads, &model->slot_m,
                       &model->slot_v, &model->state};
  for (size_t i = 0; i < sizeof buffers / sizeof *buffers; i++) {
    mxu_aligned_free(*buffers[i]);
    *buffers[i] = mxu_aligned_alloc(i == 4 ? state : trainable);
    if (!*buffers[i])
      return mxu_fail(MXU_ERR_NOMEM, "compile: cannot allocate parameters");
  }
  mxu_param_decl decls[MXU_MAX_LAYER_PARAMS];
  for (int i = 0; i < model->layer_count; i++) {
    const mxu_layer *layer = &model->layers[i];
    layer->cls->declare(layer, decls);
    for (int k = 0; k < layer->param_count; k++) {
      const mxu_param *p = &model->params[layer->param_first + k];
      float *values =
          (p->trainable ? model->weights : model->state) + p->offset;
      initialise(values, &decls[k], model->compile.seed, i, k);
    }
  }
  model->iterations = 0;
  return MXU_OK;
}

mxu_status mxu_compile(mxu_model *model, const mxu_compile_config *config) {
  if (!model || !config)
    return mxu_fail(MXU_ERR_ARG, "compile: model and config are required");
  MXU_TRY(check_compile(model, config));
  mxu_plan_release(model);
  model->compile = *config;
  snprintf(model->metric, sizeof model->metric, "%s",
           config->metric ? config->metric : "accuracy");
  model->compile.metric = model->metric;
  model->backend = mxu_backend_get(config->backend);
  MXU_TRY(build_params(model));
  MXU_TRY(allocate_params(model));
  model->compiled = 1;
  mxu_status status = mxu_plan_build(model, config->batch_size);
  if (status != MXU_OK) model->compiled = 0;
  return status;
}

void mxu_plan_release(mxu_model *model) {
  mxu_plan *plan = &model->plan;
  for (int i = 0; i < model->layer_count; i++)
    if (model->backend)
      mxu_layer_release_ops(&model->layers[i], model->backend);
  free(plan->act);
  free(plan->grad);
  mxu_arena_release(&plan->replica.arena);
  memset(plan, 0, sizeof *plan);
}

void mxu_layer_release_ops(mxu_layer *layer, const mxu_backend *backend) {
  for (int k = 0; k < MXU_MAX_LAYER_OPS; k++) {
    if (layer->ops[k]) backend->op_free(layer->ops[k]);
    layer->ops[k] = NULL;
  }
}

/* Keras fuses a final softmax into a cross-entropy loss: the loss then
 * reads the logits, with no clipping. */
static int final_softmax(const mxu_model *model) {
  const mxu_layer *last = &model->layers[model->layer_count - 1];
  if (last->cls == &mxu_activation_class)
    return last->config.activation == MXU_SOFTMAX;
  if (last->cls == &mxu_dense_class)
    return last->config.dense.activation == MXU_SOFTMAX;
  return 0;
}

static size_t batch_bytes(int batch, const mxu_shape *shape) {
  return (size_t)batch * (size_t)mxu_shape_count(shape) * sizeof(float);
}

mxu_status mxu_plan_build(mxu_model *model, int batch) {
  if (batch <= 0)
    return mxu_fail(MXU_ERR_ARG, "plan: batch size %d must be positive", batch);
  mxu_plan_release(model);
  mxu_plan *plan = &model->plan;
  int n = model->layer_count;
  plan->batch = batch;
  plan->backend = model->backend;
  plan->act = calloc((size_t)n + 1, sizeof *plan->act);
  plan->grad = calloc((size_t)n + 1, sizeof *plan->grad);
  if (!plan->act || !plan->grad)
    return mxu_fail(MXU_ERR_NOMEM, "plan: out of memory");
  mxu_arena *layout = &plan->layout;
  for (int i = 0; i <= n; i++) {
    const mxu_shape *shape =
        i == 0 ? &model->input_shape : &model->layers[i - 1].out_shape;
    plan->act[i] = mxu_arena_reserve(layout, batch_bytes(batch, shape));
    plan->grad[i] = mxu_arena_reserve(layout, batch_bytes(batch, shape));
  }
  int classes = (int)model->layers[n - 1].out_shape.dims[0];
  plan->labels = mxu_arena_reserve(layout, (size_t)batch * sizeof(int32_t));
  plan->onehot =
      mxu_arena_reserve(layout, (size_t)batch * classes * sizeof(float));
  plan->mask = mxu_arena_reserve(layout, (size_t)batch * sizeof(float));
  plan->probs =
      mxu_arena_reserve(layout, (size_t)batch * classes * sizeof(float));
  plan->loss = mxu_arena_reserve(layout, (size_t)batch * sizeof(float));
  plan->fused_softmax = !model->compile.from_logits && final_softmax(model);
  for (int i = 0; i < n; i++) {
    mxu_layer *layer = &model->layers[i];
    layer->batch = batch;
    memset(layer->scratch, 0, sizeof layer->scratch);
    mxu_status status = layer->cls->plan(layer, model->backend, batch, layout);
    if (status != MXU_OK) {
      mxu_plan_release(model);
      return mxu_fail_prefix(status, "compile: layer '%s': ", layer->name);
    }
  }
  plan->replica.arena.size = layout->size;
  return mxu_arena_commit(&plan->replica.arena);
}
