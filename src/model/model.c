/* model.c — building a Sequential model: Keras' defaults, automatic layer
 * names, shape inference as each layer is added, and the registry. */
#include "model/model.h"

#include "model/layers/layers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const mxu_layer_class *const registry[] = {
    &mxu_conv2d_class,
    &mxu_max_pooling2d_class,
    &mxu_average_pooling2d_class,
    &mxu_activation_class,
    &mxu_flatten_class,
    &mxu_dense_class,
    &mxu_dropout_class,
    &mxu_batch_normalization_class,
};

const mxu_layer_class *mxu_layer_class_find(const char *class_name) {
  for (size_t i = 0; i < sizeof registry / sizeof *registry; i++)
    if (strcmp(registry[i]->class_name, class_name) == 0) return registry[i];
  return NULL;
}

mxu_conv2d_config mxu_conv2d_defaults(int filters, int kernel_h, int kernel_w) {
  return (mxu_conv2d_config){
      NULL, filters, {kernel_h, kernel_w}, {1, 1}, MXU_VALID, MXU_LINEAR, 1};
}

mxu_pool2d_config mxu_pool2d_defaults(int pool_h, int pool_w) {
  return (mxu_pool2d_config){
      NULL, {pool_h, pool_w}, {pool_h, pool_w}, MXU_VALID};
}

mxu_dense_config mxu_dense_defaults(int units) {
  return (mxu_dense_config){NULL, units, MXU_LINEAR, 1};
}

mxu_batchnorm_config mxu_batchnorm_defaults(void) {
  return (mxu_batchnorm_config){NULL, 0.99f, 1e-3f, 1, 1, 0};
}

mxu_model *mxu_sequential(const char *name) {
  mxu_model *model = calloc(1, sizeof *model);
  if (!model) return NULL;
  snprintf(model->name, sizeof model->name, "%s", name ? name : "sequential");
  return model;
}

void mxu_model_free(mxu_model *model) {
  if (!model) return;
  mxu_plan_release(model);
  free(model->layers);
  free(model->params);
  mxu_aligned_free(model->weights);
  mxu_aligned_free(model->grads);
  mxu_aligned_free(model->slot_m);
  mxu_aligned_free(model->slot_v);
  mxu_aligned_free(model->state);
  free(model->history.epochs);
  free(model->profile);
  free(model);
}

mxu_status mxu_add_input(mxu_model *model, const char *name, mxu_shape shape) {
  if (!model) return mxu_fail(MXU_ERR_ARG, "add_input: model is NULL");
  if (model->has_input || model->layer_count)
    return mxu_fail(MXU_ERR_ARG,
                    "add_input: the input must be the first and only one");
  if (shape.rank < 1 || shape.rank > MXU_MAX_RANK)
    return mxu_fail(MXU_ERR_SHAPE, "add_input: rank %d is not in 1..%d",
                    shape.rank, MXU_MAX_RANK);
  for (int i = 0; i < shape.rank; i++)
    if (shape.dims[i] <= 0 || shape.dims[i] > (1 << 24))
      return mxu_fail(MXU_ERR_SHAPE,
                      "add_input: dimension %d is %lld; every dimension must "
                      "be in 1..16777216",
                      i, (long long)shape.dims[i]);
  snprintf(model->input_name, sizeof model->input_name, "%s",
           name ? name : "input_1");
  model->input_shape = shape;
  model->has_input = 1;
  return MXU_OK;
}

/* Keras' automatic name: the class in snake_case, then _1, _2, ... for
 * later layers of the same class. */
static int name_taken(const mxu_model *model, const char *name) {
  for (int i = 0; i < model->layer_count; i++)
    if (strcmp(model->layers[i].name, name) == 0) return 1;
  return 0;
}

/* Keras' automatic name: the class in snake_case, then _1, _2, ... for
 * later layers of the same class, skipping names already taken. */
static void auto_name(const mxu_model *model, const mxu_layer_class *cls,
                      char *out, size_t size) {
  char base[MXU_NAME_SIZE / 2];
  mxu_snake_case(cls->class_name, base, sizeof base);
  int suffix = 0;
  for (int i = 0; i < model->layer_count; i++)
    if (model->layers[i].cls == cls) suffix++;
  snprintf(out, size, "%s", base);
  while (suffix || name_taken(model, out)) {
    snprintf(out, size, "%s_%d", base, suffix++);
    if (!name_taken(model, out)) break;
  }
}

static mxu_status add_layer(mxu_model *model, const mxu_layer_class *cls,
                            const char *name, const mxu_layer *proto) {
  if (!model) return mxu_fail(MXU_ERR_ARG, "add: model is NULL");
  if (model->compiled)
    return mxu_fail(MXU_ERR_ARG,
                    "add %s: the model is already compiled; add layers first",
                    cls->class_name);
  if (!model->has_input)
    return mxu_fail(MXU_ERR_ARG,
                    "add %s: add the input first (mxu_add_input), so every "
                    "shape is known",
                    cls->class_name);
  if (name && name_taken(model, name))
    return mxu_fail(MXU_ERR_ARG,
                    "add %s: the name '%s' is already used; layer names must "
                    "be unique",
                    cls->class_name, name);
  if (model->layer_count == model->layer_capacity) {
    int capacity = model->layer_capacity ? 2 * model->layer_capacity : 8;
    mxu_layer *grown = realloc(model->layers, (size_t)capacity * sizeof *grown);
    if (!grown) return mxu_fail(MXU_ERR_NOMEM, "add: out of memory");
    model->layers = grown;
    model->layer_capacity = capacity;
  }
  mxu_layer *layer = &model->layers[model->layer_count];
  *layer = *proto;
  layer->cls = cls;
  if (name)
    snprintf(layer->name, sizeof layer->name, "%s", name);
  else
    auto_name(model, cls, layer->name, sizeof layer->name);
  layer->index = model->layer_count;
  layer->in_shape = model->layer_count
                        ? model->layers[model->layer_count - 1].out_shape
                        : model->input_shape;
  MXU_TRY(cls->infer(layer));
  model->layer_count++;
  return MXU_OK;
}

static mxu_status check_config(const void *config, const char *what) {
  if (!config) return mxu_fail(MXU_ERR_ARG, "add %s: config is NULL", what);
  return MXU_OK;
}

mxu_status mxu_add_conv2d(mxu_model *model, const mxu_conv2d_config *config) {
  MXU_TRY(check_config(config, "Conv2D"));
  if (config->activation == MXU_SOFTMAX)
    return mxu_fail(MXU_ERR_UNSUPPORTED,
                    "add Conv2D: a softmax activation inside Conv2D is not "
                    "supported; add an Activation layer");
  mxu_layer proto = {0};
  proto.config.conv = *config;
  proto.config.conv.name = NULL; /* the layer keeps its own copy */
  return add_layer(model, &mxu_conv2d_class, config->name, &proto);
}

static mxu_status add_pool(mxu_model *model, const mxu_pool2d_config *config,
                           const mxu_layer_class *cls, int is_max) {
  MXU_TRY(check_config(config, cls->class_name));
  mxu_layer proto = {0};
  proto.config.pool = *config;
  proto.config.pool.name = NULL; /* the layer keeps its own copy */
  proto.is_max_pool = is_max;
  return add_layer(model, cls, config->name, &proto);
}

mxu_status mxu_add_max_pooling2d(mxu_model *model,
                                 const mxu_pool2d_config *config) {
  return add_pool(model, config, &mxu_max_pooling2d_class, 1);
}

mxu_status mxu_add_average_pooling2d(mxu_model *model,
                                     const mxu_pool2d_config *config) {
  return add_pool(model, config, &mxu_average_pooling2d_class, 0);
}

mxu_status mxu_add_activation(mxu_model *model, const char *name,
                              mxu_activation activation) {
  if ((unsigned)activation > MXU_SOFTMAX)
    return mxu_fail(MXU_ERR_ARG, "add Activation: unknown activation %d",
                    (int)activation);
  mxu_layer proto = {0};
  proto.config.activation = activation;
  return add_layer(model, &mxu_activation_class, name, &proto);
}

mxu_status mxu_add_flatten(mxu_model *model, const char *name) {
  mxu_layer proto = {0};
  return add_layer(model, &mxu_flatten_class, name, &proto);
}

mxu_status mxu_add_dense(mxu_model *model, const mxu_dense_config *config) {
  MXU_TRY(check_config(config, "Dense"));
  mxu_layer proto = {0};
  proto.config.dense = *config;
  proto.config.dense.name = NULL; /* the layer keeps its own copy */
  return add_layer(model, &mxu_dense_class, config->name, &proto);
}

mxu_status mxu_add_dropout(mxu_model *model, const char *name, float rate) {
  mxu_layer proto = {0};
  proto.config.dropout.rate = rate;
  return add_layer(model, &mxu_dropout_class, name, &proto);
}

mxu_status mxu_add_batch_normalization(mxu_model *model,
                                       const mxu_batchnorm_config *config) {
  MXU_TRY(check_config(config, "BatchNormalization"));
  mxu_layer proto = {0};
  proto.config.batchnorm = *config;
  proto.config.batchnorm.name = NULL; /* the layer keeps its own copy */
  return add_layer(model, &mxu_batch_normalization_class, config->name, &proto);
}

int mxu_model_layer_count(const mxu_model *model) {
  return model ? model->layer_count : 0;
}

mxu_shape mxu_model_layer_shape(const mxu_model *model, int layer) {
  mxu_shape none = {0};
  if (!model || layer < 0 || layer >= model->layer_count) return none;
  return model->layers[layer].out_shape;
}

mxu_shape mxu_model_input_shape(const mxu_model *model) {
  mxu_shape none = {0};
  return model && model->has_input ? model->input_shape : none;
}

const char *mxu_model_layer_name(const mxu_model *model, int layer) {
  if (!model || layer < 0 || layer >= model->layer_count) return NULL;
  return model->layers[layer].name;
}

/* Counts from the declarations, so it works before compile too. */
int64_t mxu_model_param_count(const mxu_model *model, int trainable) {
  int64_t total = 0;
  for (int i = 0; model && i < model->layer_count; i++) {
    mxu_param_decl decls[MXU_MAX_LAYER_PARAMS];
    int n = model->layers[i].cls->declare(&model->layers[i], decls);
    for (int k = 0; k < n; k++)
      if (decls[k].trainable == (trainable != 0))
        total += mxu_shape_count(&decls[k].shape);
  }
  return total;
}

int mxu_layer_weight_count(const mxu_model *model, int layer) {
  if (!model || !model->compiled || layer < 0 || layer >= model->layer_count)
    return 0;
  return model->layers[layer].param_count;
}

mxu_status mxu_layer_weight(const mxu_model *model, int layer, int index,
                            mxu_tensor *out, const char **name) {
  if (index < 0 || index >= mxu_layer_weight_count(model, layer))
    return mxu_fail(MXU_ERR_ARG,
                    "layer_weight: layer %d has no weight %d (compile first)",
                    layer, index);
  const mxu_param *p = &model->params[model->layers[layer].param_first + index];
  out->dtype = MXU_FLOAT32;
  out->shape = p->shape;
  out->data = (p->trainable ? model->weights : model->state) + p->offset;
  if (name) *name = p->name;
  return MXU_OK;
}
