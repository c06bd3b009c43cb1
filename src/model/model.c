/* model.c — building a model's graph: Sequential (mxu_add_*, each layer
 * reading the one before) or functional (mxu_apply_*, any tensors),
 * Keras' defaults, automatic layer names, shape inference as each layer is
 * added, and the registry. */
#include "model/model.h"

#include "model/layers/layers.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const mxu_layer_class *const registry[] = {
    &mxu_input_layer_class,
    &mxu_conv2d_class,
    &mxu_depthwise_conv2d_class,
    &mxu_separable_conv2d_class,
    &mxu_conv2d_transpose_class,
    &mxu_max_pooling2d_class,
    &mxu_average_pooling2d_class,
    &mxu_conv3d_class,
    &mxu_conv_lstm2d_class,
    &mxu_conv_lstm1d_class,
    &mxu_conv3d_transpose_class,
    &mxu_max_pooling3d_class,
    &mxu_average_pooling3d_class,
    &mxu_global_average_pooling3d_class,
    &mxu_global_max_pooling3d_class,
    &mxu_zero_padding3d_class,
    &mxu_cropping3d_class,
    &mxu_upsampling3d_class,
    &mxu_adaptive_pooling_classes[0][0],
    &mxu_adaptive_pooling_classes[0][1],
    &mxu_adaptive_pooling_classes[0][2],
    &mxu_adaptive_pooling_classes[1][0],
    &mxu_adaptive_pooling_classes[1][1],
    &mxu_adaptive_pooling_classes[1][2],
    &mxu_activation_class,
    &mxu_flatten_class,
    &mxu_dense_class,
    &mxu_einsum_dense_class,
    &mxu_dropout_class,
    &mxu_spatial_dropout2d_class,
    &mxu_spatial_dropout1d_class,
    &mxu_spatial_dropout3d_class,
    &mxu_alpha_dropout_class,
    &mxu_gaussian_noise_class,
    &mxu_activity_regularization_class,
    &mxu_identity_class,
    &mxu_gaussian_dropout_class,
    &mxu_batch_normalization_class,
    &mxu_unit_normalization_class,
    &mxu_layer_normalization_class,
    &mxu_rms_normalization_class,
    &mxu_group_normalization_class,
    &mxu_add_class,
    &mxu_subtract_class,
    &mxu_multiply_class,
    &mxu_average_class,
    &mxu_maximum_class,
    &mxu_minimum_class,
    &mxu_concatenate_class,
    &mxu_global_average_pooling2d_class,
    &mxu_global_max_pooling2d_class,
    &mxu_zero_padding2d_class,
    &mxu_cropping2d_class,
    &mxu_upsampling2d_class,
    &mxu_resizing_class,
    &mxu_center_crop_class,
    &mxu_relu_class,
    &mxu_reshape_class,
    &mxu_permute_class,
    &mxu_rescaling_class,
    &mxu_leaky_relu_class,
    &mxu_elu_class,
    &mxu_softmax_class,
    &mxu_prelu_class,
    &mxu_random_flip_class,
    &mxu_random_translation_class,
    &mxu_random_rotation_class,
    &mxu_random_zoom_class,
    &mxu_random_contrast_class,
    &mxu_random_brightness_class,
    &mxu_random_grayscale_class,
    &mxu_random_invert_class,
    &mxu_solarization_class,
    &mxu_random_posterization_class,
    &mxu_random_shear_class,
    &mxu_random_color_degeneration_class,
    &mxu_random_sharpness_class,
    &mxu_random_crop_class,
    &mxu_normalization_class,
    &mxu_layer_scale_class,
    &mxu_custom_scale_layer_class,
    &mxu_conv1d_class,
    &mxu_max_pooling1d_class,
    &mxu_average_pooling1d_class,
    &mxu_global_average_pooling1d_class,
    &mxu_global_max_pooling1d_class,
    &mxu_embedding_class,
    &mxu_masking_class,
    &mxu_repeat_vector_class,
    &mxu_upsampling1d_class,
    &mxu_zero_padding1d_class,
    &mxu_cropping1d_class,
    &mxu_conv1d_transpose_class,
    &mxu_depthwise_conv1d_class,
    &mxu_separable_conv1d_class,
    &mxu_dot_class,
    &mxu_simple_rnn_class,
    &mxu_lstm_class,
    &mxu_gru_class,
    &mxu_rnn_class,
    &mxu_bidirectional_class,
    &mxu_multi_head_attention_class,
    &mxu_group_query_attention_class,
    &mxu_attention_class,
    &mxu_additive_attention_class,
};

const mxu_layer_class *mxu_layer_class_find(const char *class_name) {
  for (size_t i = 0; i < sizeof registry / sizeof *registry; i++) {
    if (strcmp(registry[i]->class_name, class_name) == 0) return registry[i];
    for (const char *const *a = registry[i]->aliases; a && *a; a++)
      if (strcmp(*a, class_name) == 0) return registry[i];
  }
  return NULL;
}

const char *mxu_layer_class_names(void) {
  static char names[4096]; /* every class, some 90 */
  if (names[0]) return names;
  size_t used = 0;
  for (size_t i = 0; i < sizeof registry / sizeof *registry; i++)
    if (registry[i]->read_config && used < sizeof names)
      used += (size_t)snprintf(names + used, sizeof names - used, "%s%s",
                               used ? ", " : "", registry[i]->class_name);
  return names;
}

mxu_conv2d_config mxu_conv2d_defaults(int filters, int kernel_h, int kernel_w) {
  return (mxu_conv2d_config){.filters = filters,
                             .kernel_size = {kernel_h, kernel_w},
                             .strides = {1, 1},
                             .padding = MXU_VALID,
                             .activation = MXU_LINEAR,
                             .use_bias = 1,
                             .dilation_rate = {1, 1},
                             .groups = 1};
}

mxu_separable_conv2d_config
mxu_separable_conv2d_defaults(int filters, int kernel_h, int kernel_w) {
  return (mxu_separable_conv2d_config){.filters = filters,
                                       .kernel_size = {kernel_h, kernel_w},
                                       .strides = {1, 1},
                                       .padding = MXU_VALID,
                                       .depth_multiplier = 1,
                                       .dilation_rate = {1, 1},
                                       .activation = MXU_LINEAR,
                                       .use_bias = 1};
}

mxu_depthwise_conv2d_config mxu_depthwise_conv2d_defaults(int kernel_h,
                                                          int kernel_w) {
  return (mxu_depthwise_conv2d_config){.kernel_size = {kernel_h, kernel_w},
                                       .strides = {1, 1},
                                       .padding = MXU_VALID,
                                       .depth_multiplier = 1,
                                       .dilation_rate = {1, 1},
                                       .activation = MXU_LINEAR,
                                       .use_bias = 1};
}

mxu_pool2d_config mxu_pool2d_defaults(int pool_h, int pool_w) {
  return (mxu_pool2d_config){
      NULL, {pool_h, pool_w}, {pool_h, pool_w}, MXU_VALID};
}

mxu_conv3d_config mxu_conv3d_defaults(int filters, int kernel_d, int kernel_h,
                                      int kernel_w) {
  return (mxu_conv3d_config){.filters = filters,
                             .kernel_size = {kernel_d, kernel_h, kernel_w},
                             .strides = {1, 1, 1},
                             .padding = MXU_VALID,
                             .activation = MXU_LINEAR,
                             .use_bias = 1,
                             .dilation_rate = {1, 1, 1},
                             .groups = 1};
}

mxu_conv_lstm2d_config mxu_conv_lstm2d_defaults(int filters, int kernel_h,
                                                int kernel_w) {
  return (mxu_conv_lstm2d_config){.filters = filters,
                                  .kernel_size = {kernel_h, kernel_w},
                                  .strides = {1, 1},
                                  .padding = MXU_VALID,
                                  .dilation_rate = {1, 1},
                                  .activation = MXU_TANH,
                                  .recurrent_activation = MXU_SIGMOID,
                                  .use_bias = 1,
                                  .unit_forget_bias = 1};
}

mxu_pool3d_config mxu_pool3d_defaults(int pool_size) {
  int p = pool_size;
  return (mxu_pool3d_config){NULL, {p, p, p}, {p, p, p}, MXU_VALID};
}

mxu_conv1d_config mxu_conv1d_defaults(int filters, int kernel_size) {
  return (mxu_conv1d_config){.filters = filters,
                             .kernel_size = kernel_size,
                             .strides = 1,
                             .dilation_rate = 1,
                             .groups = 1,
                             .padding = MXU_VALID,
                             .activation = MXU_LINEAR,
                             .use_bias = 1};
}

mxu_pool1d_config mxu_pool1d_defaults(int pool_size) {
  return (mxu_pool1d_config){NULL, pool_size, pool_size, MXU_VALID};
}

mxu_rnn_config mxu_rnn_defaults(mxu_rnn_kind kind, int units) {
  return (mxu_rnn_config){.kind = kind,
                          .units = units,
                          .activation = MXU_TANH,
                          .recurrent_activation = MXU_SIGMOID,
                          .use_bias = 1,
                          .unit_forget_bias = 1};
}

mxu_attention_config mxu_attention_defaults(int num_heads, int key_dim) {
  return (mxu_attention_config){
      .num_heads = num_heads, .key_dim = key_dim, .use_bias = 1};
}

mxu_dense_config mxu_dense_defaults(int units) {
  return (mxu_dense_config){
      .units = units, .activation = MXU_LINEAR, .use_bias = 1};
}

mxu_batchnorm_config mxu_batchnorm_defaults(void) {
  return (mxu_batchnorm_config){
      .momentum = 0.99f, .epsilon = 1e-3f, .center = 1, .scale = 1};
}

mxu_relu_config mxu_relu_defaults(void) {
  return (mxu_relu_config){NULL, -1.0f, 0.0f, 0.0f};
}

static mxu_model *model_new(const char *name, const char *fallback,
                            int sequential) {
  mxu_model *model = calloc(1, sizeof *model);
  if (!model) return NULL;
  snprintf(model->name, sizeof model->name, "%s", name ? name : fallback);
  model->sequential = sequential;
  for (int h = 0; h < MXU_MAX_OUTPUTS; h++) model->plan.head[h].loss_mask = -1;
  return model;
}

mxu_model *mxu_sequential(const char *name) {
  return model_new(name, "sequential", 1);
}

mxu_model *mxu_functional(const char *name) {
  return model_new(name, "model", 0);
}

void mxu_model_free(mxu_model *model) {
  if (!model) return;
  mxu_plan_release(model);
  free(model->layers);
  free(model->scopes);
  free(model->params);
  mxu_aligned_free(model->weights);
  mxu_aligned_free(model->grads);
  mxu_aligned_free(model->slot_m);
  mxu_aligned_free(model->slot_v);
  mxu_aligned_free(model->slot_u);
  mxu_aligned_free(model->average);
  mxu_device_free(model);
  mxu_aligned_free(model->state);
  free(model->norms);
  free(model->history.epochs);
  free(model->profile);
  for (int i = 0; i < model->kept_count; i++) free(model->kept[i]);
  free(model->kept);
  free(model);
}

const char *mxu_model_keep(mxu_model *model, const char *text) {
  char **grown = realloc(model->kept, (model->kept_count + 1) * sizeof *grown);
  if (!grown) return NULL;
  model->kept = grown;
  size_t n = strlen(text) + 1;
  char *copy = malloc(n);
  if (copy) grown[model->kept_count++] = memcpy(copy, text, n);
  return copy;
}

/* ---- nodes ---------------------------------------------------------------
 */

/* Names are unique within a scope (a model used as a layer may reuse a
 * name of the model around it, as in Keras). */
static int name_taken(const mxu_model *model, const char *name) {
  for (int i = 0; i < model->layer_count; i++)
    if (model->layers[i].scope == model->building_scope &&
        strcmp(model->layers[i].name, name) == 0)
      return 1;
  return 0;
}

/* Keras' automatic name: the class in snake_case, then _1, _2, ... for
 * later layers of the same class, skipping names already taken. */
static void auto_name(const mxu_model *model, const mxu_layer_class *cls,
                      char *out, size_t size) {
  char base[MXU_NAME_SIZE / 2];
  mxu_snake_case(cls->python_class ? cls->python_class : cls->class_name, base,
                 sizeof base);
  int suffix = 0;
  for (int i = 0; i < model->layer_count; i++)
    if (model->layers[i].cls == cls && !mxu_layer_is_call(&model->layers[i]))
      suffix++;
  snprintf(out, size, "%s", base);
  while (suffix || name_taken(model, out)) {
    snprintf(out, size, "%s_%d", base, suffix++);
    if (!name_taken(model, out)) break;
  }
}

static mxu_status check_open(const mxu_model *model, const char *what) {
  if (!model) return mxu_fail(MXU_ERR_ARG, "%s: model is NULL", what);
  if (model->compiled)
    return mxu_fail(MXU_ERR_ARG,
                    "%s: the model is already compiled; add layers first",
                    what);
  return MXU_OK;
}

static mxu_status grow(mxu_model *model) {
  if (model->layer_count < model->layer_capacity) return MXU_OK;
  int capacity = model->layer_capacity ? 2 * model->layer_capacity : 8;
  mxu_layer *grown = realloc(model->layers, (size_t)capacity * sizeof *grown);
  if (!grown) return mxu_fail(MXU_ERR_NOMEM, "add: out of memory");
  model->layers = grown;
  model->layer_capacity = capacity;
  return MXU_OK;
}

/* A layer's output and weights within core.h's limits, so that every size
 * computed from them later fits (a Conv2D of a huge kernel, a Dense of
 * huge units). */
static mxu_status check_sizes(const mxu_layer *layer) {
  const mxu_shape *s = &layer->out_shape;
  int64_t count = 1;
  for (int d = 0; d < s->rank; d++) {
    if (s->dims[d] < 1 || s->dims[d] > MXU_MAX_DIM)
      return mxu_fail(MXU_ERR_SHAPE,
                      "%s: output dimension %d is %lld; each must be in "
                      "1..%d (MXU_MAX_DIM)",
                      layer->name, d, (long long)s->dims[d], MXU_MAX_DIM);
    count *= s->dims[d];
    if (count > MXU_MAX_ELEMENTS) break;
  }
  mxu_param_decl decls[MXU_MAX_LAYER_PARAMS];
  int n = count > MXU_MAX_ELEMENTS ? 0 : mxu_layer_declare(layer, decls);
  for (int k = 0; k < n && count <= MXU_MAX_ELEMENTS; k++) {
    count = 1;
    for (int d = 0; d < decls[k].shape.rank && count <= MXU_MAX_ELEMENTS; d++)
      count *= decls[k].shape.dims[d];
  }
  if (count > MXU_MAX_ELEMENTS)
    return mxu_fail(MXU_ERR_SHAPE,
                    "%s: more than %lld values in its output or a weight "
                    "(MXU_MAX_ELEMENTS)",
                    layer->name, (long long)MXU_MAX_ELEMENTS);
  return MXU_OK;
}

/* The mask on the layer's inputs (an Embedding's mask_zero): the one
 * mask among them, masks of two Embeddings meeting not supported; a class
 * with mask_all_or_none refuses masked and unmasked inputs together. A
 * layer that neither keeps nor uses it drops it, as Keras' do. */
static mxu_status input_mask(const mxu_model *model, mxu_layer *layer) {
  int unmasked = 0;
  layer->mask_in = -1;
  for (int k = 0; k < layer->input_count; k++) {
    int m = model->layers[layer->inputs[k]].mask_out;
    if (m >= 0 && layer->mask_in >= 0 && m != layer->mask_in)
      return mxu_fail(MXU_ERR_UNSUPPORTED,
                      "%s: the masks of two Embeddings (mask_zero) meet here; "
                      "mxu carries one",
                      layer->name);
    if (m >= 0) layer->mask_in = m;
    unmasked += m < 0;
  }
  if (layer->mask_in >= 0 && unmasked && layer->cls->mask_all_or_none)
    return mxu_fail(MXU_ERR_UNSUPPORTED,
                    "%s: masked (an Embedding's mask_zero) and unmasked "
                    "inputs together are not supported",
                    layer->name);
  return MXU_OK;
}

/* Under mxu_time_distributed: a positionwise layer as it is, an image
 * layer's steps in the batch (named after itself in the writers'
 * TimeDistributed wrapper, which a file's reader renames); others
 * refused. */
static mxu_status time_distribute(const mxu_model *model, mxu_layer *layer) {
  /* A TimeDistributed layer called again (a copy of it): this input's
   * steps. */
  if (!model->time_distributed && !layer->time_steps) return MXU_OK;
  const char *what = layer->cls->class_name;
  if (layer->input_count != 1 || layer->in_shape.rank < 2)
    return mxu_fail(MXU_ERR_SHAPE,
                    "TimeDistributed(%s) '%s' takes one input of (steps, "
                    "...) values a sample",
                    what, layer->name);
  if (!layer->cls->positionwise && !layer->cls->steps_in_batch)
    return mxu_fail(MXU_ERR_UNSUPPORTED,
                    "TimeDistributed(%s) '%s' is not supported: mxu wraps "
                    "the layers that compute every step alike (Dense, the "
                    "activations, Dropout, BatchNormalization, ...) and "
                    "the image layers (Conv2D, DepthwiseConv2D, "
                    "SeparableConv2D, the poolings, Flatten and their 1-D "
                    "kinds)",
                    what, layer->name);
  if (layer->mask_in >= 0 && layer->cls->steps_in_batch)
    return mxu_fail(MXU_ERR_UNSUPPORTED,
                    "TimeDistributed(%s) '%s' of a masked sequence is not "
                    "supported",
                    what, layer->name);
  if (layer->cls->steps_in_batch)
    layer->time_steps = (int)layer->in_shape.dims[0];
  if (!layer->wrapped[0])
    snprintf(layer->wrapped, sizeof layer->wrapped, "%s", layer->name);
  return MXU_OK;
}

mxu_status mxu_time_distributed(mxu_model *model, int on) {
  if (!model) return mxu_fail(MXU_ERR_ARG, "time_distributed: no model");
  model->time_distributed = on != 0;
  return MXU_OK;
}

/* Appends a node of class cls reading `inputs` (node indices), its shape
 * inferred; *out is its index. */
static mxu_status add_node(mxu_model *model, const mxu_layer_class *cls,
                           const char *name, const mxu_layer *proto,
                           const int *inputs, int input_count, int *out) {
  const char *what = cls->class_name;
  MXU_TRY(check_open(model, what));
  if (input_count < cls->min_inputs || input_count > cls->max_inputs)
    return mxu_fail(MXU_ERR_ARG, "%s '%s': takes %d to %d inputs, got %d", what,
                    name ? name : "", cls->min_inputs, cls->max_inputs,
                    input_count);
  for (int k = 0; k < input_count; k++)
    if (inputs[k] < 0 || inputs[k] >= model->layer_count)
      return mxu_fail(MXU_ERR_ARG,
                      "%s '%s': input %d is not a tensor of this model", what,
                      name ? name : "", k);
  if (name && name_taken(model, name))
    return mxu_fail(MXU_ERR_ARG,
                    "add %s: the name '%s' is already used; layer names must "
                    "be unique",
                    what, name);
  if (name && strlen(name) >= MXU_NAME_SIZE)
    return mxu_fail(MXU_ERR_ARG, "add %s: the name is longer than %d bytes",
                    what, MXU_NAME_SIZE - 1);
  MXU_TRY(grow(model));
  mxu_layer *layer = &model->layers[model->layer_count];
  *layer = *proto;
  layer->cls = cls;
  if (name)
    snprintf(layer->name, sizeof layer->name, "%s", name);
  else
    auto_name(model, cls, layer->name, sizeof layer->name);
  layer->index = model->layer_count;
  layer->scope = model->building_scope;
  layer->owner = layer->index;
  layer->call = 0;
  layer->key = model->layer_count - model->input_count;
  layer->input_count = input_count;
  for (int k = 0; k < input_count; k++) {
    layer->inputs[k] = inputs[k];
    layer->in_shapes[k] = model->layers[inputs[k]].out_shape;
  }
  if (input_count) layer->in_shape = layer->in_shapes[0];
  MXU_TRY(input_mask(model, layer));
  MXU_TRY(time_distribute(model, layer));
  MXU_TRY(cls->infer(layer));
  MXU_TRY(check_sizes(layer));
  layer->mask_out = cls->output_mask ? cls->output_mask(layer) : -1;
  *out = model->layer_count++;
  return MXU_OK;
}

static mxu_status check_input_shape(const char *what, mxu_shape shape) {
  if (shape.rank < 1 || shape.rank > MXU_MAX_RANK)
    return mxu_fail(MXU_ERR_SHAPE, "%s: rank %d is not in 1..%d", what,
                    shape.rank, MXU_MAX_RANK);
  for (int i = 0; i < shape.rank; i++)
    if (shape.dims[i] <= 0 || shape.dims[i] > MXU_MAX_DIM)
      return mxu_fail(MXU_ERR_SHAPE,
                      "%s: dimension %d is %lld; every dimension must be in "
                      "1..%d (MXU_MAX_DIM)",
                      what, i, (long long)shape.dims[i], MXU_MAX_DIM);
  return MXU_OK;
}

static mxu_status add_input_node(mxu_model *model, const char *name,
                                 mxu_shape shape, int *out) {
  MXU_TRY(check_input_shape("add_input", shape));
  if (model->input_count == MXU_MAX_INPUTS)
    return mxu_fail(MXU_ERR_UNSUPPORTED, "add_input: more than %d inputs",
                    MXU_MAX_INPUTS);
  char fallback[32];
  snprintf(fallback, sizeof fallback, "input_%d", model->input_count + 1);
  mxu_layer proto = {0};
  proto.out_shape = shape;
  MXU_TRY(add_node(model, &mxu_input_layer_class,
                   name                          ? name
                   : name_taken(model, fallback) ? NULL
                                                 : fallback,
                   &proto, NULL, 0, out));
  model->inputs[model->input_count++] = *out;
  return MXU_OK;
}

mxu_status mxu_add_input(mxu_model *model, const char *name, mxu_shape shape) {
  MXU_TRY(check_open(model, "add_input"));
  if (!model->sequential)
    return mxu_fail(MXU_ERR_ARG,
                    "add_input: a functional model takes inputs with "
                    "mxu_input");
  if (model->layer_count)
    return mxu_fail(MXU_ERR_ARG,
                    "add_input: the input must be the first and only one");
  int node;
  return add_input_node(model, name, shape, &node);
}

mxu_tensor_id mxu_input(mxu_model *model, const char *name, mxu_shape shape) {
  int node = -1;
  if (model && model->sequential) {
    mxu_fail(MXU_ERR_ARG, "input: a Sequential model takes its input with "
                          "mxu_add_input");
    return -1;
  }
  if (check_open(model, "input") != MXU_OK) return -1;
  return add_input_node(model, name, shape, &node) == MXU_OK ? node : -1;
}

/* A Sequential layer reads the node before it. */
static mxu_status append(mxu_model *model, const mxu_layer_class *cls,
                         const char *name, const mxu_layer *proto) {
  MXU_TRY(check_open(model, cls->class_name));
  if (!model->layer_count)
    return mxu_fail(MXU_ERR_ARG,
                    "add %s: add the input first (mxu_add_input), so every "
                    "shape is known",
                    cls->class_name);
  if (!model->sequential)
    return mxu_fail(MXU_ERR_ARG,
                    "add %s: a functional model is built with mxu_apply_*",
                    cls->class_name);
  int input = model->layer_count - 1, node;
  return add_node(model, cls, name, proto, &input, 1, &node);
}

/* mxu_apply_*: -1 in gives -1 out, the first failure's message kept. */
static mxu_tensor_id apply(mxu_model *model, const mxu_layer_class *cls,
                           const char *name, const mxu_layer *proto,
                           const mxu_tensor_id *inputs, int count) {
  for (int k = 0; k < count; k++)
    if (inputs[k] < 0) return -1;
  if (model && model->sequential) {
    mxu_fail(MXU_ERR_ARG,
             "apply %s: a Sequential model is built with mxu_add_*; use "
             "mxu_functional for a graph",
             cls->class_name);
    return -1;
  }
  int node = -1;
  return add_node(model, cls, name, proto, inputs, count, &node) == MXU_OK
             ? node
             : -1;
}

/* ---- the layer classes' configs ------------------------------------------
 * Each class has an mxu_add_* (Sequential) and an mxu_apply_* (functional)
 * over one prototype. */

static mxu_status check_activation(const char *class_name,
                                   mxu_activation activation) {
  if ((unsigned)activation > MXU_LAST_ACTIVATION)
    return mxu_fail(MXU_ERR_ARG, "add %s: unknown activation %d", class_name,
                    (int)activation);
  return MXU_OK;
}

static mxu_status conv2d_proto(const mxu_conv2d_config *config,
                               mxu_layer *proto) {
  if (!config) return mxu_fail(MXU_ERR_ARG, "add Conv2D: config is NULL");
  MXU_TRY(check_activation("Conv2D", config->activation));
  memset(proto, 0, sizeof *proto);
  proto->config.conv = *config;
  proto->config.conv.name = NULL; /* the layer keeps its own copy */
  return MXU_OK;
}

static mxu_status pool_proto(const mxu_pool2d_config *config, int is_max,
                             mxu_layer *proto) {
  if (!config) return mxu_fail(MXU_ERR_ARG, "add pooling: config is NULL");
  memset(proto, 0, sizeof *proto);
  proto->config.pool = *config;
  proto->config.pool.name = NULL;
  proto->is_max_pool = is_max;
  return MXU_OK;
}

static mxu_status activation_proto(mxu_activation activation,
                                   mxu_layer *proto) {
  MXU_TRY(check_activation("Activation", activation));
  memset(proto, 0, sizeof *proto);
  proto->config.activation = activation;
  return MXU_OK;
}

static mxu_status dense_proto(const mxu_dense_config *config,
                              mxu_layer *proto) {
  if (!config) return mxu_fail(MXU_ERR_ARG, "add Dense: config is NULL");
  MXU_TRY(check_activation("Dense", config->activation));
  memset(proto, 0, sizeof *proto);
  proto->config.dense = *config;
  proto->config.dense.name = NULL;
  return MXU_OK;
}

static mxu_status batchnorm_proto(const mxu_batchnorm_config *config,
                                  mxu_layer *proto) {
  if (!config)
    return mxu_fail(MXU_ERR_ARG, "add BatchNormalization: config is NULL");
  memset(proto, 0, sizeof *proto);
  proto->config.batchnorm = *config;
  proto->config.batchnorm.name = NULL;
  return MXU_OK;
}

static mxu_layer dropout_proto(float rate) {
  mxu_layer proto = {0};
  proto.config.dropout.rate = rate;
  return proto;
}

mxu_status mxu_add_conv2d(mxu_model *model, const mxu_conv2d_config *config) {
  mxu_layer proto;
  MXU_TRY(conv2d_proto(config, &proto));
  return append(model, &mxu_conv2d_class, config->name, &proto);
}

mxu_status mxu_add_max_pooling2d(mxu_model *model,
                                 const mxu_pool2d_config *config) {
  mxu_layer proto;
  MXU_TRY(pool_proto(config, 1, &proto));
  return append(model, &mxu_max_pooling2d_class, config->name, &proto);
}

mxu_status mxu_add_average_pooling2d(mxu_model *model,
                                     const mxu_pool2d_config *config) {
  mxu_layer proto;
  MXU_TRY(pool_proto(config, 0, &proto));
  return append(model, &mxu_average_pooling2d_class, config->name, &proto);
}

mxu_status mxu_add_activation(mxu_model *model, const char *name,
                              mxu_activation activation) {
  mxu_layer proto;
  MXU_TRY(activation_proto(activation, &proto));
  return append(model, &mxu_activation_class, name, &proto);
}

mxu_status mxu_add_flatten(mxu_model *model, const char *name) {
  mxu_layer proto = {0};
  return append(model, &mxu_flatten_class, name, &proto);
}

mxu_status mxu_add_dense(mxu_model *model, const mxu_dense_config *config) {
  mxu_layer proto;
  MXU_TRY(dense_proto(config, &proto));
  return append(model, &mxu_dense_class, config->name, &proto);
}

mxu_status mxu_add_dropout(mxu_model *model, const char *name, float rate) {
  mxu_layer proto = dropout_proto(rate);
  return append(model, &mxu_dropout_class, name, &proto);
}

mxu_status mxu_add_batch_normalization(mxu_model *model,
                                       const mxu_batchnorm_config *config) {
  mxu_layer proto;
  MXU_TRY(batchnorm_proto(config, &proto));
  return append(model, &mxu_batch_normalization_class, config->name, &proto);
}

mxu_tensor_id mxu_apply_conv2d(mxu_model *model,
                               const mxu_conv2d_config *config,
                               mxu_tensor_id x) {
  mxu_layer proto;
  if (x < 0 || conv2d_proto(config, &proto) != MXU_OK) return -1;
  return apply(model, &mxu_conv2d_class, config->name, &proto, &x, 1);
}

mxu_tensor_id mxu_apply_max_pooling2d(mxu_model *model,
                                      const mxu_pool2d_config *config,
                                      mxu_tensor_id x) {
  mxu_layer proto;
  if (x < 0 || pool_proto(config, 1, &proto) != MXU_OK) return -1;
  return apply(model, &mxu_max_pooling2d_class, config->name, &proto, &x, 1);
}

mxu_tensor_id mxu_apply_average_pooling2d(mxu_model *model,
                                          const mxu_pool2d_config *config,
                                          mxu_tensor_id x) {
  mxu_layer proto;
  if (x < 0 || pool_proto(config, 0, &proto) != MXU_OK) return -1;
  return apply(model, &mxu_average_pooling2d_class, config->name, &proto, &x,
               1);
}

mxu_tensor_id mxu_apply_activation(mxu_model *model, const char *name,
                                   mxu_activation activation, mxu_tensor_id x) {
  mxu_layer proto;
  if (x < 0 || activation_proto(activation, &proto) != MXU_OK) return -1;
  return apply(model, &mxu_activation_class, name, &proto, &x, 1);
}

mxu_tensor_id mxu_apply_flatten(mxu_model *model, const char *name,
                                mxu_tensor_id x) {
  mxu_layer proto = {0};
  return apply(model, &mxu_flatten_class, name, &proto, &x, 1);
}

mxu_tensor_id mxu_apply_dense(mxu_model *model, const mxu_dense_config *config,
                              mxu_tensor_id x) {
  mxu_layer proto;
  if (x < 0 || dense_proto(config, &proto) != MXU_OK) return -1;
  return apply(model, &mxu_dense_class, config->name, &proto, &x, 1);
}

mxu_tensor_id mxu_apply_einsum_dense(mxu_model *model,
                                     const mxu_dense_config *config,
                                     mxu_tensor_id x) {
  mxu_layer proto;
  if (x < 0 || dense_proto(config, &proto) != MXU_OK) return -1;
  if (config->contracted < 1 || config->new_axes.rank < 1 ||
      config->new_axes.rank > MXU_MAX_RANK) {
    mxu_fail(MXU_ERR_ARG, "add EinsumDense: %d contracted axes, %d new",
             config->contracted, config->new_axes.rank);
    return -1;
  }
  return apply(model, &mxu_einsum_dense_class, config->name, &proto, &x, 1);
}

mxu_tensor_id mxu_apply_dropout(mxu_model *model, const char *name, float rate,
                                mxu_tensor_id x) {
  mxu_layer proto = dropout_proto(rate);
  return apply(model, &mxu_dropout_class, name, &proto, &x, 1);
}

mxu_tensor_id mxu_apply_dropout_noise(mxu_model *model, const char *name,
                                      float rate, mxu_shape noise_shape,
                                      int kind, mxu_tensor_id x) {
  static const mxu_layer_class *const classes[] = {
      &mxu_dropout_class, &mxu_spatial_dropout2d_class,
      &mxu_spatial_dropout1d_class, &mxu_spatial_dropout3d_class,
      &mxu_alpha_dropout_class};
  if (noise_shape.rank < 0 || noise_shape.rank > MXU_MAX_RANK) {
    mxu_fail(MXU_ERR_ARG, "add Dropout: noise_shape of rank %d",
             noise_shape.rank);
    return -1;
  }
  if (kind < 0 || kind > MXU_ALPHA_DROPOUT) {
    mxu_fail(MXU_ERR_ARG, "add Dropout: kind %d is none of mxu's", kind);
    return -1;
  }
  mxu_layer proto = dropout_proto(rate);
  proto.config.dropout.noise = noise_shape;
  return apply(model, classes[kind], name, &proto, &x, 1);
}

mxu_tensor_id mxu_apply_batch_normalization(mxu_model *model,
                                            const mxu_batchnorm_config *config,
                                            mxu_tensor_id x) {
  mxu_layer proto;
  if (x < 0 || batchnorm_proto(config, &proto) != MXU_OK) return -1;
  return apply(model, &mxu_batch_normalization_class, config->name, &proto, &x,
               1);
}

/* A config was passed (else the call fails saying so). */
static int given(const void *config, const char *what) {
  if (!config) mxu_fail(MXU_ERR_ARG, "apply %s: config is NULL", what);
  return config != NULL;
}

/* The mxu_apply_* of a layer whose prototype is its config alone (the
 * layer keeps its own copy of the name). */
#define APPLY_CONFIG(member, cls, what)                                        \
  do {                                                                         \
    if (x < 0 || !given(config, what)) return -1;                              \
    mxu_layer proto = {0};                                                     \
    proto.config.member = *config;                                             \
    proto.config.member.name = NULL;                                           \
    return apply(model, cls, config->name, &proto, &x, 1);                     \
  } while (0)

/* GlobalAveragePooling2D or GlobalMaxPooling2D (the 1-D ones: sequence). */
static mxu_tensor_id global_pool(mxu_model *model,
                                 const mxu_global_pool2d_config *config,
                                 int sequence, mxu_tensor_id x) {
  static const mxu_layer_class *const classes[2][2] = {
      {&mxu_global_average_pooling2d_class, &mxu_global_max_pooling2d_class},
      {&mxu_global_average_pooling1d_class, &mxu_global_max_pooling1d_class}};
  if (x < 0 || !given(config, "global pooling")) return -1;
  mxu_layer proto = {0};
  proto.config.global_pool = *config;
  proto.config.global_pool.name = NULL;
  return apply(model, classes[sequence][config->is_max != 0], config->name,
               &proto, &x, 1);
}

mxu_tensor_id mxu_apply_global_pooling2d(mxu_model *model,
                                         const mxu_global_pool2d_config *config,
                                         mxu_tensor_id x) {
  return global_pool(model, config, 0, x);
}

mxu_tensor_id mxu_apply_conv3d(mxu_model *model,
                               const mxu_conv3d_config *config,
                               mxu_tensor_id x) {
  if (config && check_activation("Conv3D", config->activation) != MXU_OK)
    return -1;
  APPLY_CONFIG(conv3d, &mxu_conv3d_class, "Conv3D");
}

mxu_tensor_id mxu_apply_conv3d_transpose(mxu_model *model,
                                         const mxu_conv3d_config *config,
                                         mxu_tensor_id x) {
  if (config &&
      check_activation("Conv3DTranspose", config->activation) != MXU_OK)
    return -1;
  APPLY_CONFIG(conv3d, &mxu_conv3d_transpose_class, "Conv3DTranspose");
}

mxu_tensor_id mxu_apply_conv_lstm2d(mxu_model *model,
                                    const mxu_conv_lstm2d_config *config,
                                    mxu_tensor_id x) {
  APPLY_CONFIG(conv_lstm, &mxu_conv_lstm2d_class, "ConvLSTM2D");
}

mxu_tensor_id mxu_apply_conv_lstm1d(mxu_model *model,
                                    const mxu_conv_lstm2d_config *config,
                                    mxu_tensor_id x) {
  APPLY_CONFIG(conv_lstm, &mxu_conv_lstm1d_class, "ConvLSTM1D");
}

mxu_tensor_id mxu_apply_max_pooling3d(mxu_model *model,
                                      const mxu_pool3d_config *config,
                                      mxu_tensor_id x) {
  APPLY_CONFIG(pool3d, &mxu_max_pooling3d_class, "MaxPooling3D");
}

mxu_tensor_id mxu_apply_average_pooling3d(mxu_model *model,
                                          const mxu_pool3d_config *config,
                                          mxu_tensor_id x) {
  APPLY_CONFIG(pool3d, &mxu_average_pooling3d_class, "AveragePooling3D");
}

mxu_tensor_id mxu_apply_global_pooling3d(mxu_model *model,
                                         const mxu_global_pool2d_config *config,
                                         mxu_tensor_id x) {
  APPLY_CONFIG(global_pool,
               config && config->is_max ? &mxu_global_max_pooling3d_class
                                        : &mxu_global_average_pooling3d_class,
               "GlobalPooling3D");
}

mxu_tensor_id mxu_apply_zero_padding3d(mxu_model *model,
                                       const mxu_margins3d_config *config,
                                       mxu_tensor_id x) {
  APPLY_CONFIG(margins3d, &mxu_zero_padding3d_class, "ZeroPadding3D");
}

mxu_tensor_id mxu_apply_cropping3d(mxu_model *model,
                                   const mxu_margins3d_config *config,
                                   mxu_tensor_id x) {
  APPLY_CONFIG(margins3d, &mxu_cropping3d_class, "Cropping3D");
}

mxu_tensor_id mxu_apply_upsampling3d(mxu_model *model,
                                     const mxu_upsampling3d_config *config,
                                     mxu_tensor_id x) {
  APPLY_CONFIG(upsampling3d, &mxu_upsampling3d_class, "UpSampling3D");
}

/* The class by the output's spatial axes, its leading sizes given. */
static mxu_tensor_id adaptive_pooling(mxu_model *model,
                                      const mxu_adaptive_pool_config *config,
                                      int is_max, mxu_tensor_id x) {
  int rank = 0;
  while (config && rank < 3 && config->output_size[rank] > 0) rank++;
  if (config && rank == 0) {
    mxu_fail(MXU_ERR_ARG, "apply adaptive pooling: output_size is empty");
    return -1;
  }
  APPLY_CONFIG(adaptive, &mxu_adaptive_pooling_classes[is_max][rank - 1],
               "adaptive pooling");
}

mxu_tensor_id mxu_apply_adaptive_average_pooling(
    mxu_model *model, const mxu_adaptive_pool_config *config, mxu_tensor_id x) {
  return adaptive_pooling(model, config, 0, x);
}

mxu_tensor_id mxu_apply_adaptive_max_pooling(
    mxu_model *model, const mxu_adaptive_pool_config *config, mxu_tensor_id x) {
  return adaptive_pooling(model, config, 1, x);
}

/* The 1-D layers keep their sizes as the 1 x n window of the image
 * (1, steps, channels) they run on. */
/* Conv1D and Conv1DTranspose: a Conv2D's (Conv2DTranspose's) 1 x n window
 * over the image (1, steps, channels). */
static mxu_tensor_id conv1d(mxu_model *model, const mxu_layer_class *cls,
                            const mxu_conv1d_config *config, mxu_tensor_id x) {
  if (x < 0 || !given(config, cls->class_name)) return -1;
  mxu_conv2d_config conv =
      mxu_conv2d_defaults(config->filters, 1, config->kernel_size);
  conv.strides[1] = config->strides;
  conv.dilation_rate[1] = config->dilation_rate;
  conv.groups = config->groups;
  conv.padding = config->padding;
  conv.activation = config->activation;
  conv.use_bias = config->use_bias;
  conv.kernel = config->kernel;
  conv.bias = config->bias;
  mxu_layer proto;
  if (conv2d_proto(&conv, &proto) != MXU_OK) return -1;
  return apply(model, cls, config->name, &proto, &x, 1);
}

mxu_tensor_id mxu_apply_conv1d(mxu_model *model,
                               const mxu_conv1d_config *config,
                               mxu_tensor_id x) {
  return conv1d(model, &mxu_conv1d_class, config, x);
}

mxu_tensor_id mxu_apply_conv1d_transpose(mxu_model *model,
                                         const mxu_conv1d_config *config,
                                         mxu_tensor_id x) {
  return conv1d(model, &mxu_conv1d_transpose_class, config, x);
}

static mxu_tensor_id pool1d(mxu_model *model, const mxu_pool1d_config *config,
                            int is_max, mxu_tensor_id x) {
  if (x < 0 || !given(config, "pooling")) return -1;
  mxu_pool2d_config pool = mxu_pool2d_defaults(1, config->pool_size);
  pool.strides[1] = config->strides;
  pool.padding = config->padding;
  mxu_layer proto;
  if (pool_proto(&pool, is_max, &proto) != MXU_OK) return -1;
  return apply(model,
               is_max ? &mxu_max_pooling1d_class : &mxu_average_pooling1d_class,
               config->name, &proto, &x, 1);
}

mxu_tensor_id mxu_apply_max_pooling1d(mxu_model *model,
                                      const mxu_pool1d_config *config,
                                      mxu_tensor_id x) {
  return pool1d(model, config, 1, x);
}

mxu_tensor_id mxu_apply_average_pooling1d(mxu_model *model,
                                          const mxu_pool1d_config *config,
                                          mxu_tensor_id x) {
  return pool1d(model, config, 0, x);
}

mxu_tensor_id mxu_apply_global_pooling1d(mxu_model *model,
                                         const mxu_global_pool2d_config *config,
                                         mxu_tensor_id x) {
  return global_pool(model, config, 1, x);
}

mxu_tensor_id mxu_apply_embedding(mxu_model *model,
                                  const mxu_embedding_config *config,
                                  mxu_tensor_id x) {
  APPLY_CONFIG(embedding, &mxu_embedding_class, "Embedding");
}

/* A recurrent layer's config of a known kind (the classes and names are
 * indexed by it). */
static int rnn_given(const mxu_rnn_config *config, const char *what) {
  if (!given(config, what)) return 0;
  if ((unsigned)config->kind <= MXU_GRU) return 1;
  mxu_fail(MXU_ERR_ARG, "add %s: unknown recurrent kind %d", what,
           (int)config->kind);
  return 0;
}

mxu_tensor_id mxu_apply_rnn(mxu_model *model, const mxu_rnn_config *config,
                            mxu_tensor_id x) {
  return mxu_apply_rnn_from(model, config, x, NULL, 0);
}

mxu_tensor_id mxu_apply_rnn_from(mxu_model *model, const mxu_rnn_config *config,
                                 mxu_tensor_id x, const mxu_tensor_id *states,
                                 int count) {
  static const mxu_layer_class *const classes[] = {
      &mxu_simple_rnn_class, &mxu_lstm_class, &mxu_gru_class};
  if (x < 0 || !rnn_given(config, "recurrent layer")) return -1;
  if (count < 0 || count >= MXU_MAX_INPUTS || (count && !states)) {
    mxu_fail(MXU_ERR_ARG, "add recurrent layer: %d initial states", count);
    return -1;
  }
  mxu_layer proto = {0};
  proto.config.rnn = *config;
  proto.config.rnn.name = NULL;
  mxu_tensor_id inputs[MXU_MAX_INPUTS] = {x};
  for (int k = 0; k < count; k++) inputs[k + 1] = states[k];
  return apply(model, config->of_cell ? &mxu_rnn_class : classes[config->kind],
               config->name, &proto, inputs, count + 1);
}

mxu_tensor_id mxu_output_part(mxu_model *model, mxu_tensor_id layer, int k) {
  if (!model || layer < 0 || layer >= model->layer_count) {
    mxu_fail(MXU_ERR_ARG, "output_part: no such layer");
    return -1;
  }
  const mxu_layer *source = &model->layers[layer];
  mxu_shape shapes[MXU_MAX_INPUTS];
  int count =
      source->cls->output_parts ? source->cls->output_parts(source, shapes) : 1;
  if (count < 2 || k < 0 || k >= count) {
    mxu_fail(MXU_ERR_ARG, "output_part: layer '%s' has %d output%s, not %d",
             source->name, count, count == 1 ? "" : "s", k + 1);
    return -1;
  }
  for (int i = 0; i < model->layer_count; i++)
    if (model->layers[i].cls == &mxu_output_part_class &&
        model->layers[i].inputs[0] == layer &&
        model->layers[i].config.part.index == k)
      return i;
  mxu_layer proto = {0};
  proto.config.part.index = k;
  proto.config.part.shape = shapes[k];
  for (int i = 0; i < k; i++)
    proto.config.part.offset += mxu_shape_count(&shapes[i]);
  char name[MXU_NAME_SIZE];
  snprintf(name, sizeof name, "%.*s:%d", MXU_NAME_SIZE - 12, source->name, k);
  int node = -1;
  int scope = model->building_scope;
  /* The part belongs where its layer is, whoever asks. */
  model->building_scope = source->scope;
  mxu_status status =
      add_node(model, &mxu_output_part_class, name, &proto, &layer, 1, &node);
  model->building_scope = scope;
  return status == MXU_OK ? node : -1;
}

mxu_tensor_id mxu_apply_bidirectional(mxu_model *model, const char *name,
                                      const mxu_rnn_config *layer,
                                      mxu_merge_kind merge_mode,
                                      mxu_tensor_id x) {
  return mxu_apply_bidirectional_from(model, name, layer, merge_mode, x, NULL,
                                      0);
}

mxu_tensor_id mxu_apply_bidirectional_from(mxu_model *model, const char *name,
                                           const mxu_rnn_config *layer,
                                           mxu_merge_kind merge_mode,
                                           mxu_tensor_id x,
                                           const mxu_tensor_id *states,
                                           int count) {
  static const char *const automatic[] = {"simple_rnn", "lstm", "gru"};
  if (x < 0 || !rnn_given(layer, "Bidirectional")) return -1;
  if (count < 0 || count >= MXU_MAX_INPUTS || (count && !states)) {
    mxu_fail(MXU_ERR_ARG, "add Bidirectional: %d initial states", count);
    return -1;
  }
  mxu_tensor_id inputs[MXU_MAX_INPUTS] = {x};
  for (int k = 0; k < count; k++) inputs[k + 1] = states[k];
  mxu_layer proto = {0};
  mxu_bidirectional_config *b = &proto.config.bidirectional;
  b->rnn = *layer;
  b->rnn.name = NULL;
  /* Keras' Bidirectional zeroes a skipped step's outputs in sequences. */
  b->rnn.zero_output_for_mask = layer->return_sequences;
  b->merge = merge_mode;
  snprintf(b->inner, sizeof b->inner, "%s",
           layer->name ? layer->name : automatic[layer->kind]);
  mxu_bidirectional_names(b);
  return apply(model, &mxu_bidirectional_class, name, &proto, inputs,
               count + 1);
}

mxu_tensor_id mxu_apply_multi_head_attention(mxu_model *model,
                                             const mxu_attention_config *config,
                                             mxu_tensor_id query,
                                             mxu_tensor_id value,
                                             mxu_tensor_id key) {
  if (!given(config, "MultiHeadAttention")) return -1;
  mxu_layer proto = {0};
  proto.config.attention = *config;
  proto.config.attention.name = NULL;
  mxu_tensor_id inputs[3] = {query, value, key};
  return apply(model,
               config->kv_heads ? &mxu_group_query_attention_class
                                : &mxu_multi_head_attention_class,
               config->name, &proto, inputs, key == -1 ? 2 : 3);
}

mxu_tensor_id mxu_apply_dense_attention(
    mxu_model *model, const mxu_dense_attention_config *config,
    mxu_tensor_id query, mxu_tensor_id value, mxu_tensor_id key) {
  if (!given(config, "Attention")) return -1;
  mxu_layer proto = {0};
  proto.config.dense_attention = *config;
  proto.config.dense_attention.name = NULL;
  mxu_tensor_id inputs[3] = {query, value, key};
  return apply(model,
               config->additive ? &mxu_additive_attention_class
                                : &mxu_attention_class,
               config->name, &proto, inputs, key == -1 ? 2 : 3);
}

mxu_tensor_id mxu_apply_zero_padding2d(mxu_model *model,
                                       const mxu_zero_padding2d_config *config,
                                       mxu_tensor_id x) {
  APPLY_CONFIG(padding, &mxu_zero_padding2d_class, "ZeroPadding2D");
}

static mxu_status depthwise_proto(const mxu_depthwise_conv2d_config *config,
                                  mxu_layer *proto) {
  if (!config)
    return mxu_fail(MXU_ERR_ARG, "add DepthwiseConv2D: config is NULL");
  MXU_TRY(check_activation("DepthwiseConv2D", config->activation));
  memset(proto, 0, sizeof *proto);
  proto->config.depthwise = *config;
  proto->config.depthwise.name = NULL;
  return MXU_OK;
}

mxu_status mxu_add_depthwise_conv2d(mxu_model *model,
                                    const mxu_depthwise_conv2d_config *config) {
  mxu_layer proto;
  MXU_TRY(depthwise_proto(config, &proto));
  return append(model, &mxu_depthwise_conv2d_class, config->name, &proto);
}

mxu_tensor_id
mxu_apply_depthwise_conv2d(mxu_model *model,
                           const mxu_depthwise_conv2d_config *config,
                           mxu_tensor_id x) {
  mxu_layer proto;
  if (x < 0 || depthwise_proto(config, &proto) != MXU_OK) return -1;
  return apply(model, &mxu_depthwise_conv2d_class, config->name, &proto, &x, 1);
}

mxu_tensor_id
mxu_apply_depthwise_conv1d(mxu_model *model,
                           const mxu_depthwise_conv2d_config *config,
                           mxu_tensor_id x) {
  mxu_layer proto;
  if (x < 0 || depthwise_proto(config, &proto) != MXU_OK) return -1;
  return apply(model, &mxu_depthwise_conv1d_class, config->name, &proto, &x, 1);
}

static mxu_tensor_id apply_activation_layer(mxu_model *model,
                                            const mxu_layer_class *cls,
                                            const char *name,
                                            mxu_activation kind, float alpha,
                                            mxu_tensor_id x) {
  if (x < 0) return -1;
  mxu_layer proto = {0};
  proto.config.act.kind = kind;
  proto.config.act.alpha = alpha;
  return apply(model, cls, name, &proto, &x, 1);
}

mxu_tensor_id mxu_apply_leaky_relu(mxu_model *model, const char *name,
                                   float negative_slope, mxu_tensor_id x) {
  return apply_activation_layer(model, &mxu_leaky_relu_class, name,
                                MXU_LEAKY_RELU, negative_slope, x);
}

mxu_tensor_id mxu_apply_elu(mxu_model *model, const char *name, float alpha,
                            mxu_tensor_id x) {
  return apply_activation_layer(model, &mxu_elu_class, name, MXU_ELU, alpha, x);
}

mxu_tensor_id mxu_apply_softmax(mxu_model *model, const char *name,
                                mxu_tensor_id x) {
  return apply_activation_layer(model, &mxu_softmax_class, name, MXU_SOFTMAX,
                                0.0f, x);
}

mxu_tensor_id mxu_apply_prelu(mxu_model *model, const mxu_prelu_config *config,
                              mxu_tensor_id x) {
  APPLY_CONFIG(prelu, &mxu_prelu_class, "PReLU");
}

mxu_tensor_id mxu_apply_random(mxu_model *model,
                               const mxu_random_config *config,
                               mxu_tensor_id x) {
  static const mxu_layer_class *const classes[] = {
      &mxu_random_flip_class,
      &mxu_random_translation_class,
      &mxu_random_rotation_class,
      &mxu_random_zoom_class,
      &mxu_random_contrast_class,
      &mxu_random_crop_class,
      &mxu_random_brightness_class,
      &mxu_random_grayscale_class,
      &mxu_random_invert_class,
      &mxu_solarization_class,
      &mxu_random_posterization_class,
      &mxu_random_shear_class,
      &mxu_random_color_degeneration_class,
      &mxu_random_sharpness_class};
  if (x < 0 || !given(config, "augmentation layer")) return -1;
  if ((unsigned)config->kind > MXU_RANDOM_SHARPNESS ||
      (unsigned)config->fill_mode > MXU_FILL_WRAP) {
    mxu_fail(MXU_ERR_ARG, "add augmentation layer: kind %d, fill mode %d",
             (int)config->kind, (int)config->fill_mode);
    return -1;
  }
  mxu_layer proto = {0};
  proto.config.random = *config;
  proto.config.random.name = NULL;
  return apply(model, classes[config->kind], config->name, &proto, &x, 1);
}

mxu_tensor_id mxu_apply_activity_regularization(mxu_model *model,
                                                const char *name, float l1,
                                                float l2, mxu_tensor_id x) {
  if (!(l1 >= 0 && l2 >= 0 && isfinite(l1) && isfinite(l2))) {
    mxu_fail(MXU_ERR_ARG,
             "add ActivityRegularization: l1 %g and l2 %g must "
             "be finite and >= 0",
             (double)l1, (double)l2);
    return -1;
  }
  mxu_layer proto = {0};
  proto.activity = (mxu_regularizer){l1, l2};
  return x < 0 ? -1
               : apply(model, &mxu_activity_regularization_class, name, &proto,
                       &x, 1);
}

mxu_tensor_id mxu_apply_identity(mxu_model *model, const char *name,
                                 mxu_tensor_id x) {
  mxu_layer proto = {0};
  return x < 0 ? -1 : apply(model, &mxu_identity_class, name, &proto, &x, 1);
}

mxu_tensor_id mxu_apply_gaussian_noise(mxu_model *model, const char *name,
                                       float stddev, mxu_tensor_id x) {
  mxu_layer proto = dropout_proto(stddev);
  return x < 0 ? -1
               : apply(model, &mxu_gaussian_noise_class, name, &proto, &x, 1);
}

mxu_tensor_id mxu_apply_gaussian_dropout(mxu_model *model, const char *name,
                                         float rate, mxu_tensor_id x) {
  mxu_layer proto = dropout_proto(rate);
  return x < 0 ? -1
               : apply(model, &mxu_gaussian_dropout_class, name, &proto, &x, 1);
}

mxu_tensor_id mxu_apply_masking(mxu_model *model, const char *name,
                                float mask_value, mxu_tensor_id x) {
  mxu_layer proto = {0};
  proto.config.mask_value = mask_value;
  return x < 0 ? -1 : apply(model, &mxu_masking_class, name, &proto, &x, 1);
}

mxu_tensor_id mxu_apply_repeat_vector(mxu_model *model, const char *name, int n,
                                      mxu_tensor_id x) {
  mxu_layer proto = {0};
  proto.config.repeats = n;
  return x < 0 ? -1
               : apply(model, &mxu_repeat_vector_class, name, &proto, &x, 1);
}

mxu_tensor_id mxu_apply_upsampling1d(mxu_model *model, const char *name,
                                     int size, mxu_tensor_id x) {
  mxu_layer proto = {0};
  proto.config.repeats = size;
  return x < 0 ? -1
               : apply(model, &mxu_upsampling1d_class, name, &proto, &x, 1);
}

static mxu_tensor_id ends(mxu_model *model, const mxu_layer_class *cls,
                          const char *name, int before, int after,
                          mxu_tensor_id x) {
  mxu_layer proto = {0};
  proto.config.padding.top = before;
  proto.config.padding.bottom = after;
  return x < 0 ? -1 : apply(model, cls, name, &proto, &x, 1);
}

mxu_tensor_id mxu_apply_zero_padding1d(mxu_model *model, const char *name,
                                       int before, int after, mxu_tensor_id x) {
  return ends(model, &mxu_zero_padding1d_class, name, before, after, x);
}

mxu_tensor_id mxu_apply_cropping1d(mxu_model *model, const char *name,
                                   int before, int after, mxu_tensor_id x) {
  return ends(model, &mxu_cropping1d_class, name, before, after, x);
}

mxu_tensor_id mxu_apply_unit_normalization(mxu_model *model, const char *name,
                                           mxu_tensor_id x) {
  mxu_layer proto = {0};
  return x < 0
             ? -1
             : apply(model, &mxu_unit_normalization_class, name, &proto, &x, 1);
}

mxu_tensor_id mxu_apply_layer_normalization(mxu_model *model,
                                            const mxu_layer_norm_config *config,
                                            mxu_tensor_id x) {
  if (x < 0 || !given(config, "LayerNormalization")) return -1;
  mxu_layer proto = {0};
  proto.config.layer_norm = *config;
  proto.config.layer_norm.name = NULL;
  return apply(model,
               config->groups > 0 ? &mxu_group_normalization_class
                                  : &mxu_layer_normalization_class,
               config->name, &proto, &x, 1);
}

mxu_tensor_id mxu_apply_rms_normalization(mxu_model *model, const char *name,
                                          float epsilon, mxu_tensor_id x) {
  mxu_layer proto = {0};
  proto.config.layer_norm = mxu_layer_norm_defaults(0);
  proto.config.layer_norm.epsilon = epsilon;
  proto.config.layer_norm.center = 0;
  return x < 0
             ? -1
             : apply(model, &mxu_rms_normalization_class, name, &proto, &x, 1);
}

mxu_tensor_id mxu_apply_upsampling2d(mxu_model *model,
                                     const mxu_upsampling2d_config *config,
                                     mxu_tensor_id x) {
  APPLY_CONFIG(upsampling, &mxu_upsampling2d_class, "UpSampling2D");
}

static mxu_tensor_id apply_resize(mxu_model *model, const mxu_layer_class *cls,
                                  const mxu_resize_config *config,
                                  mxu_tensor_id x) {
  APPLY_CONFIG(resize, cls, cls->class_name);
}

mxu_tensor_id mxu_apply_resizing(mxu_model *model,
                                 const mxu_resize_config *config,
                                 mxu_tensor_id x) {
  return apply_resize(model, &mxu_resizing_class, config, x);
}

mxu_tensor_id mxu_apply_center_crop(mxu_model *model,
                                    const mxu_resize_config *config,
                                    mxu_tensor_id x) {
  return apply_resize(model, &mxu_center_crop_class, config, x);
}

mxu_tensor_id mxu_apply_cropping2d(mxu_model *model,
                                   const mxu_cropping2d_config *config,
                                   mxu_tensor_id x) {
  APPLY_CONFIG(padding, &mxu_cropping2d_class, "Cropping2D");
}

mxu_tensor_id mxu_apply_permute(mxu_model *model,
                                const mxu_permute_config *config,
                                mxu_tensor_id x) {
  APPLY_CONFIG(permute, &mxu_permute_class, "Permute");
}

mxu_tensor_id mxu_apply_rescaling(mxu_model *model,
                                  const mxu_rescaling_config *config,
                                  mxu_tensor_id x) {
  APPLY_CONFIG(rescaling, &mxu_rescaling_class, "Rescaling");
}

mxu_tensor_id mxu_apply_divide(mxu_model *model, const char *name,
                               float divisor, mxu_tensor_id x) {
  mxu_rescaling_config c = {name, divisor, 0.0f};
  const mxu_rescaling_config *config = &c;
  APPLY_CONFIG(rescaling, &mxu_divide_class, "TrueDivide");
}

mxu_tensor_id mxu_apply_normalization(mxu_model *model,
                                      const mxu_normalization_config *config,
                                      mxu_tensor_id x) {
  APPLY_CONFIG(normalization, &mxu_normalization_class, "Normalization");
}

mxu_tensor_id mxu_apply_layer_scale(mxu_model *model,
                                    const mxu_layer_scale_config *config,
                                    mxu_tensor_id x) {
  APPLY_CONFIG(layer_scale, &mxu_layer_scale_class, "LayerScale");
}

mxu_tensor_id mxu_apply_custom_scale(mxu_model *model, const char *name,
                                     float scale, mxu_tensor_id a,
                                     mxu_tensor_id b) {
  mxu_layer proto = {0};
  proto.config.custom_scale = scale;
  mxu_tensor_id both[2] = {a, b};
  return apply(model, &mxu_custom_scale_layer_class, name, &proto, both, 2);
}

mxu_tensor_id
mxu_apply_separable_conv2d(mxu_model *model,
                           const mxu_separable_conv2d_config *config,
                           mxu_tensor_id x) {
  if (x < 0 || !given(config, "SeparableConv2D") ||
      check_activation("SeparableConv2D", config->activation) != MXU_OK)
    return -1;
  mxu_layer proto = {0};
  proto.config.separable = *config;
  proto.config.separable.name = NULL;
  return apply(model, &mxu_separable_conv2d_class, config->name, &proto, &x, 1);
}

mxu_tensor_id
mxu_apply_separable_conv1d(mxu_model *model,
                           const mxu_separable_conv2d_config *config,
                           mxu_tensor_id x) {
  if (x < 0 || !given(config, "SeparableConv1D") ||
      check_activation("SeparableConv1D", config->activation) != MXU_OK)
    return -1;
  mxu_layer proto = {0};
  proto.config.separable = *config;
  proto.config.separable.name = NULL;
  return apply(model, &mxu_separable_conv1d_class, config->name, &proto, &x, 1);
}

mxu_tensor_id
mxu_apply_conv2d_transpose(mxu_model *model,
                           const mxu_conv2d_transpose_config *config,
                           mxu_tensor_id x) {
  mxu_layer proto;
  if (x < 0 || conv2d_proto(config, &proto) != MXU_OK) return -1;
  return apply(model, &mxu_conv2d_transpose_class, config->name, &proto, &x, 1);
}

mxu_tensor_id mxu_apply_relu(mxu_model *model, const mxu_relu_config *config,
                             mxu_tensor_id x) {
  APPLY_CONFIG(relu, &mxu_relu_class, "ReLU");
}

mxu_tensor_id mxu_apply_reshape(mxu_model *model,
                                const mxu_reshape_config *config,
                                mxu_tensor_id x) {
  APPLY_CONFIG(reshape, &mxu_reshape_class, "Reshape");
}

mxu_tensor_id mxu_apply_again(mxu_model *model, mxu_tensor_id made_by,
                              const mxu_tensor_id *inputs, int count) {
  for (int k = 0; k < count; k++)
    if (inputs && inputs[k] < 0) return -1;
  if (made_by < 0) return -1;
  if (!model || !inputs || made_by >= model->layer_count) {
    mxu_fail(MXU_ERR_ARG, "apply_again: no such tensor %d", made_by);
    return -1;
  }
  const mxu_layer *owner = &model->layers[model->layers[made_by].owner];
  if (owner->cls == &mxu_input_layer_class || owner->cls->update_state ||
      owner->cls->sync_floats) {
    mxu_fail(MXU_ERR_UNSUPPORTED,
             "apply_again: layer '%s' (%s) cannot be shared: %s", owner->name,
             owner->cls->class_name,
             owner->cls == &mxu_input_layer_class
                 ? "it is an input"
                 : "its statistics would be updated once per call");
    return -1;
  }
  mxu_layer proto = *owner;
  proto.compiled = NULL;
  int calls = 0;
  for (int i = 0; i < model->layer_count; i++)
    calls += model->layers[i].owner == owner->index;
  /* The name is the owner's: add_node must not refuse it as taken. */
  proto.name[0] = 0;
  int node = -1;
  /* add_node may move the layers: keep what is needed of the owner. */
  int owner_index = owner->index;
  if (add_node(model, proto.cls, NULL, &proto, inputs, count, &node) != MXU_OK)
    return -1;
  mxu_layer *added = &model->layers[node];
  memcpy(added->name, model->layers[owner_index].name, sizeof added->name);
  added->owner = owner_index;
  added->call = calls;
  return node;
}

static const mxu_layer_class *merge_class(mxu_merge_kind kind) {
  switch (kind) {
  case MXU_MERGE_ADD: return &mxu_add_class;
  case MXU_MERGE_SUBTRACT: return &mxu_subtract_class;
  case MXU_MERGE_MULTIPLY: return &mxu_multiply_class;
  case MXU_MERGE_AVERAGE: return &mxu_average_class;
  case MXU_MERGE_MAXIMUM: return &mxu_maximum_class;
  case MXU_MERGE_MINIMUM: return &mxu_minimum_class;
  case MXU_MERGE_CONCATENATE: return &mxu_concatenate_class;
  }
  return NULL;
}

mxu_tensor_id mxu_merge(mxu_model *model, mxu_merge_kind kind, const char *name,
                        const mxu_tensor_id *inputs, int count, int axis) {
  const mxu_layer_class *cls = merge_class(kind);
  if (!cls || !inputs || count < 1) {
    mxu_fail(MXU_ERR_ARG, "merge: unknown kind %d or no inputs", (int)kind);
    return -1;
  }
  mxu_layer proto = {0};
  proto.config.merge.kind = kind;
  proto.config.merge.axis = axis;
  return apply(model, cls, name, &proto, inputs, count);
}

mxu_tensor_id mxu_apply_dot(mxu_model *model, const mxu_dot_config *config,
                            mxu_tensor_id a, mxu_tensor_id b) {
  if (a < 0 || b < 0 || !given(config, "Dot")) return -1;
  mxu_layer proto = {0};
  proto.config.dot = *config;
  proto.config.dot.name = NULL;
  mxu_tensor_id both[2] = {a, b};
  return apply(model, &mxu_dot_class, config->name, &proto, both, 2);
}

mxu_tensor_id mxu_add(mxu_model *model, const char *name, mxu_tensor_id a,
                      mxu_tensor_id b) {
  mxu_tensor_id both[2] = {a, b};
  return mxu_merge(model, MXU_MERGE_ADD, name, both, 2, -1);
}

/* ---- Keras' layer order -------------------------------------------------
 * Keras lists a functional model's layers (model.layers, its JSON, its
 * weights files, which tf.keras matches by position) by decreasing depth,
 * the longest path to an output, ties broken by the order a depth-first
 * walk from the outputs first meets them. Nodes are kept in that order, so
 * files mxu writes line up with what Keras rebuilds from them; a model
 * read from Keras' JSON is in it already. */

typedef struct walk {
  const mxu_model *model;
  int *seen_at; /* first visit, in walk order; -1 unseen */
  int *finished, *post, seen, posted;
} walk;

/* Pre-order numbering and post-order listing, as Keras' _build_map. */
static void visit(walk *w, int node) {
  if (w->finished[node]) return;
  if (w->seen_at[node] < 0) w->seen_at[node] = w->seen++;
  const mxu_layer *layer = &w->model->layers[node];
  for (int k = 0; k < layer->input_count; k++) visit(w, layer->inputs[k]);
  w->finished[node] = 1;
  w->post[w->posted++] = node;
}

static int *by_depth_key; /* qsort's context: depth, then walk order */

static int keras_before(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b, n = by_depth_key[0];
  const int *depth = by_depth_key + 1, *seen_at = depth + n;
  if (depth[x] != depth[y]) return depth[y] - depth[x];
  return seen_at[x] - seen_at[y];
}

/* order[i]: the node that goes to place i. Returns 0 when some node is not
 * reached from the outputs (compile refuses such a model anyway). */
static int keras_order(const mxu_model *model, int *order, int *scratch) {
  int n = model->layer_count;
  int *depth = scratch + 1, *seen_at = depth + n, *finished = seen_at + n;
  int *post = finished + n;
  scratch[0] = n;
  for (int i = 0; i < n; i++) depth[i] = 0, seen_at[i] = -1, finished[i] = 0;
  walk w = {model, seen_at, finished, post, 0, 0};
  for (int k = 0; k < model->output_count; k++) visit(&w, model->outputs[k]);
  if (w.posted != n) return 0;
  /* Reverse post-order reaches every reader before what it reads. */
  for (int p = n - 1; p >= 0; p--) {
    const mxu_layer *layer = &model->layers[post[p]];
    for (int k = 0; k < layer->input_count; k++)
      if (depth[layer->inputs[k]] < depth[post[p]] + 1)
        depth[layer->inputs[k]] = depth[post[p]] + 1;
  }
  /* Keras sorts layers, not calls: a shared layer's calls all take the
   * place its first-met call was met at. */
  for (int i = 0; i < n; i++) {
    int owner = model->layers[i].owner;
    if (seen_at[i] < seen_at[owner]) seen_at[owner] = seen_at[i];
  }
  for (int i = 0; i < n; i++) seen_at[i] = seen_at[model->layers[i].owner];
  for (int i = 0; i < n; i++) order[i] = i;
  by_depth_key = scratch;
  qsort(order, (size_t)n, sizeof *order, keras_before);
  by_depth_key = NULL;
  return 1;
}

/* Puts the nodes in Keras' order, renumbering every reference. */
static mxu_status sort_nodes(mxu_model *model) {
  int n = model->layer_count;
  /* A model with models used as layers comes from Keras' JSON, in Keras'
   * order already; sorting would scatter a scope's run of nodes. */
  if (model->scope_count > 1) return MXU_OK;
  int *order = malloc((size_t)(6 * n + 1) * sizeof *order);
  mxu_layer *sorted = malloc((size_t)n * sizeof *sorted);
  mxu_status status = MXU_OK;
  if (!order || !sorted) {
    status = mxu_fail(MXU_ERR_NOMEM, "model_outputs: out of memory");
  } else if (keras_order(model, order, order + n)) {
    int *place = order + n; /* old index -> new */
    for (int i = 0; i < n; i++) place[order[i]] = i;
    for (int i = 0; i < n; i++) {
      sorted[i] = model->layers[order[i]];
      sorted[i].index = i;
      sorted[i].owner = place[sorted[i].owner];
      for (int k = 0; k < sorted[i].input_count; k++)
        sorted[i].inputs[k] = place[sorted[i].inputs[k]];
      if (sorted[i].mask_in >= 0) sorted[i].mask_in = place[sorted[i].mask_in];
      if (sorted[i].mask_out >= 0)
        sorted[i].mask_out = place[sorted[i].mask_out];
    }
    /* A shared layer is listed (and holds the weights) at its first call
     * in this order, the deepest, where Keras lists it. */
    int *first = order; /* owner -> first call in the new order */
    for (int i = 0; i < n; i++) first[i] = -1;
    for (int i = 0; i < n; i++)
      if (first[sorted[i].owner] < 0) first[sorted[i].owner] = i;
    for (int i = 0; i < n; i++) sorted[i].owner = first[sorted[i].owner];
    memcpy(model->layers, sorted, (size_t)n * sizeof *sorted);
    for (int k = 0; k < model->input_count; k++)
      model->inputs[k] = place[model->inputs[k]];
    for (int k = 0; k < model->output_count; k++)
      model->outputs[k] = place[model->outputs[k]];
  }
  free(order);
  free(sorted);
  return status;
}

mxu_status mxu_model_outputs(mxu_model *model, const mxu_tensor_id *outputs,
                             int count) {
  MXU_TRY(check_open(model, "model_outputs"));
  if (!outputs || count < 1 || count > MXU_MAX_INPUTS)
    return mxu_fail(MXU_ERR_ARG, "model_outputs: 1 to %d outputs, got %d",
                    MXU_MAX_INPUTS, count);
  for (int k = 0; k < count; k++) {
    if (outputs[k] < 0) return MXU_ERR_ARG; /* its message is the cause */
    if (outputs[k] >= model->layer_count)
      return mxu_fail(MXU_ERR_ARG,
                      "model_outputs: output %d is not a tensor of this "
                      "model",
                      k);
  }
  memcpy(model->outputs, outputs, (size_t)count * sizeof *outputs);
  model->output_count = count;
  return sort_nodes(model);
}

mxu_status mxu_scope_begin(mxu_model *model, const char *name, int sequential) {
  MXU_TRY(check_open(model, "scope"));
  if (name_taken(model, name))
    return mxu_fail(MXU_ERR_ARG, "the name '%s' is already used", name);
  if (!model->scope_count) model->scope_count = 1; /* scopes[0]: the model */
  mxu_scope *grown =
      realloc(model->scopes, (size_t)(model->scope_count + 1) * sizeof *grown);
  if (!grown) return mxu_fail(MXU_ERR_NOMEM, "scope: out of memory");
  model->scopes = grown;
  memset(&grown[0], 0, sizeof grown[0]);
  mxu_scope *scope = &grown[model->scope_count];
  memset(scope, 0, sizeof *scope);
  snprintf(scope->name, sizeof scope->name, "%s", name);
  scope->sequential = sequential;
  scope->parent = model->building_scope;
  scope->first = model->layer_count;
  scope->output = -1;
  model->building_scope = model->scope_count++;
  return MXU_OK;
}

mxu_status mxu_scope_end(mxu_model *model, int output) {
  mxu_scope *scope = &model->scopes[model->building_scope];
  if (output < scope->first || output >= model->layer_count)
    return mxu_fail(MXU_ERR_ARG, "model '%s' used as a layer has no output",
                    scope->name);
  scope->last = model->layer_count - 1;
  scope->output = output;
  model->building_scope = scope->parent;
  return MXU_OK;
}

mxu_tensor_id mxu_scope_input(mxu_model *model, const char *name,
                              mxu_shape shape, mxu_tensor_id outer) {
  if (outer < 0) return -1;
  const mxu_shape *given = &model->layers[outer].out_shape;
  int same = given->rank == shape.rank;
  for (int d = 0; same && d < shape.rank; d++)
    same = given->dims[d] == shape.dims[d];
  if (!same) {
    char a[64], b[64];
    mxu_shape_format(given, a, sizeof a);
    mxu_shape_format(&shape, b, sizeof b);
    mxu_fail(MXU_ERR_SHAPE,
             "model '%s' used as a layer is called on a tensor of shape %s "
             "but its input '%s' takes %s",
             model->scopes[model->building_scope].name, a, name, b);
    return -1;
  }
  mxu_layer proto = {0};
  proto.out_shape = shape;
  int node = -1;
  return add_node(model, &mxu_input_layer_class, name, &proto, &outer, 1,
                  &node) == MXU_OK
             ? node
             : -1;
}

int mxu_scope_child(const mxu_model *model, int scope, int i) {
  int s = model->layers[i].scope;
  while (s && model->scopes[s].parent != scope) s = model->scopes[s].parent;
  return s;
}

/* Node i as one of scope's layers: itself, -1 - c where a model c used
 * as a layer there starts, else INT_MIN (another call of a shared layer, a
 * Sequential's InputLayer, inside c, or outside scope). */
static int scope_item(const mxu_model *model, int scope, int i) {
  int child = mxu_scope_child(model, scope, i);
  if (child) return i == model->scopes[child].first ? -1 - child : INT_MIN;
  return model->layers[i].scope == scope && mxu_layer_listed(model, i)
             ? i
             : INT_MIN;
}

int mxu_scope_layers(const mxu_model *model, int scope, int *out) {
  int first = scope ? model->scopes[scope].first : 0;
  int last = scope ? model->scopes[scope].last : model->layer_count - 1;
  int count = 0;
  for (int i = first; i <= last; i++) {
    int item = scope_item(model, scope, i);
    if (item != INT_MIN) out[count++] = item;
  }
  return count;
}

const char *mxu_model_item_name(const mxu_model *model, int item) {
  return item >= 0 ? model->layers[item].name : model->scopes[-1 - item].name;
}

const char *mxu_scope_tensor(const mxu_model *model, int scope, int t,
                             int keras3, int *index, int *tensor) {
  *tensor = 0;
  if (model->layers[t].cls == &mxu_output_part_class) {
    *tensor = model->layers[t].config.part.index;
    t = model->layers[t].inputs[0];
  }
  int child = mxu_scope_child(model, scope, t);
  if (child) {
    *index = keras3 ? 0 : 1;
    return model->scopes[child].name;
  }
  *index = model->layers[t].call;
  return model->layers[t].name;
}

int mxu_layer_listed(const mxu_model *model, int i) {
  const mxu_layer *layer = &model->layers[i];
  if (mxu_layer_is_call(layer) || layer->cls == &mxu_output_part_class)
    return 0;
  int sequential =
      layer->scope ? model->scopes[layer->scope].sequential : model->sequential;
  return !(sequential && layer->cls == &mxu_input_layer_class);
}

mxu_status mxu_model_mark_sequential(mxu_model *model) {
  /* Keras' Sequential refuses a layer of several outputs too. */
  for (int i = 0; i < model->layer_count; i++) {
    const mxu_layer *l = &model->layers[i];
    if (l->cls->output_parts && l->cls->output_parts(l, NULL) > 1)
      return mxu_fail(MXU_ERR_UNSUPPORTED,
                      "model: layer '%s' returns several tensors "
                      "(return_state), which a Sequential model cannot "
                      "pass on; build a Functional model",
                      l->name);
  }
  /* A chain of layers; a model used as one is a run of nodes of its own. */
  for (int i = 1; i < model->layer_count && model->scope_count < 2; i++)
    if (model->layers[i].input_count != 1 ||
        model->layers[i].inputs[0] != i - 1)
      return mxu_fail(MXU_ERR_ARG,
                      "model: layer '%s' does not read the layer before it, "
                      "so the model is not Sequential",
                      model->layers[i].name);
  if (model->input_count != 1 || model->inputs[0] != 0 || model->output_count)
    return mxu_fail(MXU_ERR_ARG, "model: not a Sequential model");
  model->sequential = 1; /* its InputLayer is then not a listed layer */
  /* Its output is its last layer's; a model used as that layer gives it
   * from its own output node, not always the last node. */
  int last = model->layer_count - 1, scope = model->layers[last].scope;
  while (scope && model->scopes[scope].parent)
    scope = model->scopes[scope].parent;
  if (scope) {
    model->outputs[0] = model->scopes[scope].output;
    model->output_count = 1;
  }
  return MXU_OK;
}

int mxu_model_input_count(const mxu_model *model) {
  return model ? model->input_count : 0;
}

int mxu_model_output_count(const mxu_model *model) {
  if (!model || !model->layer_count) return 0;
  return model->output_count ? model->output_count : 1;
}

int mxu_model_output(const mxu_model *model) {
  return model->output_count ? model->outputs[0] : model->layer_count - 1;
}

const mxu_layer *mxu_model_input(const mxu_model *model) {
  return model->input_count ? &model->layers[model->inputs[0]] : NULL;
}

static int declares_trainable(const mxu_layer *layer) {
  mxu_param_decl decls[MXU_MAX_LAYER_PARAMS];
  int n = mxu_layer_declare(layer, decls);
  for (int k = 0; k < n; k++)
    if (decls[k].trainable) return 1;
  return 0;
}

/* Nodes come after the nodes they read, so one pass in order. */
void mxu_tensors_with_grad(const mxu_model *model, unsigned char *has_grad) {
  for (int t = 0; t < model->layer_count; t++) {
    const mxu_layer *layer = &model->layers[t];
    if (layer->cls == &mxu_input_layer_class) {
      has_grad[t] = layer->input_count && has_grad[layer->inputs[0]];
      continue;
    }
    int from_inputs = 0;
    for (int k = 0; k < layer->input_count; k++)
      from_inputs |= has_grad[layer->inputs[k]];
    has_grad[t] = model->compile.keep_gradients || from_inputs ||
                  declares_trainable(layer);
  }
}

int mxu_layer_ends_in_softmax(const mxu_layer *layer) {
  return layer->cls->ends_in_softmax && layer->cls->ends_in_softmax(layer);
}

int mxu_layer_declare(const mxu_layer *layer, mxu_param_decl *decls) {
  return layer->cls->declare ? layer->cls->declare(layer, decls) : 0;
}

/* Keras' model.layers[layer] as an item of mxu_scope_layers(0): a node,
 * or -1 - scope for a model used as a layer; INT_MIN when out of range. */
static int nth_layer(const mxu_model *model, int layer) {
  for (int i = 0; model && layer >= 0 && i < model->layer_count; i++) {
    int item = scope_item(model, 0, i);
    if (item != INT_MIN && layer-- == 0) return item;
  }
  return INT_MIN;
}

int mxu_model_node(const mxu_model *model, int layer) {
  int item = nth_layer(model, layer);
  return item >= 0 ? item : -1;
}

int mxu_model_layer_count(const mxu_model *model) {
  int count = 0;
  for (int i = 0; model && i < model->layer_count; i++)
    count += scope_item(model, 0, i) != INT_MIN;
  return count;
}

/* The node giving layer item's output. */
static int item_output(const mxu_model *model, int item) {
  return item >= 0 ? item : model->scopes[-1 - item].output;
}

mxu_shape mxu_model_layer_shape(const mxu_model *model, int layer) {
  mxu_shape none = {0};
  int item = nth_layer(model, layer);
  return item == INT_MIN ? none
                         : model->layers[item_output(model, item)].out_shape;
}

mxu_shape mxu_model_input_shape(const mxu_model *model) {
  mxu_shape none = {0};
  return model && model->input_count ? mxu_model_input(model)->out_shape : none;
}

mxu_shape mxu_model_input_shape_of(const mxu_model *model, int k) {
  mxu_shape none = {0};
  if (!model || k < 0 || k >= model->input_count) return none;
  return model->layers[model->inputs[k]].out_shape;
}

const char *mxu_model_input_name(const mxu_model *model, int k) {
  if (!model || k < 0 || k >= model->input_count) return NULL;
  return model->layers[model->inputs[k]].name;
}

int mxu_model_output_node(const mxu_model *model, int j) {
  if (!model || j < 0 || j >= mxu_model_output_count(model)) return -1;
  return model->output_count ? model->outputs[j] : mxu_model_output(model);
}

const char *mxu_model_output_name(const mxu_model *model, int j) {
  int node = mxu_model_output_node(model, j);
  /* Keras' output_names: the layer (or the model used as a layer) whose
   * call gives the tensor. */
  int index = 0, tensor = 0;
  return node < 0 ? NULL : mxu_scope_tensor(model, 0, node, 0, &index, &tensor);
}

mxu_shape mxu_model_output_shape_of(const mxu_model *model, int j) {
  int node = mxu_model_output_node(model, j);
  mxu_shape none = {0};
  return node < 0 ? none : model->layers[node].out_shape;
}

const char *mxu_model_layer_name(const mxu_model *model, int layer) {
  int item = nth_layer(model, layer);
  return item == INT_MIN ? NULL : mxu_model_item_name(model, item);
}

int mxu_model_layer_params(const mxu_model *model, int item, int *out) {
  int first = item >= 0 ? item : model->scopes[-1 - item].first;
  int last = item >= 0 ? item : model->scopes[-1 - item].last, n = 0;
  /* A model used as a layer: the trainable weights of its layers in
   * order, then the others, as tf.keras lists them. */
  for (int trainable = 1; trainable >= 0; trainable--)
    for (int i = first; i <= last; i++) {
      const mxu_layer *layer = &model->layers[i];
      if (mxu_layer_is_call(layer)) continue;
      for (int k = 0; k < layer->param_count; k++) {
        int p = layer->param_first + k;
        if (item >= 0 || model->params[p].trainable == trainable) out[n++] = p;
      }
      if (item >= 0) return n;
    }
  return n;
}

/* Counts from the declarations, so it works before compile too. */
int64_t mxu_model_param_count(const mxu_model *model, int trainable) {
  int64_t total = 0;
  for (int i = 0; model && i < model->layer_count; i++) {
    mxu_param_decl decls[MXU_MAX_LAYER_PARAMS];
    if (mxu_layer_is_call(&model->layers[i])) continue; /* shared weights */
    int n = mxu_layer_declare(&model->layers[i], decls);
    for (int k = 0; k < n; k++)
      if (decls[k].trainable == (trainable != 0))
        total += mxu_shape_count(&decls[k].shape);
  }
  return total;
}

int mxu_layer_weight_count(const mxu_model *model, int layer) {
  int item = nth_layer(model, layer);
  if (item == INT_MIN || !model->compiled) return 0;
  int *params = malloc((size_t)(model->param_count + 1) * sizeof *params);
  int count = params ? mxu_model_layer_params(model, item, params) : 0;
  free(params);
  return count;
}

mxu_status mxu_layer_weight(const mxu_model *model, int layer, int index,
                            mxu_tensor *out, const char **name) {
  int count = mxu_layer_weight_count(model, layer);
  if (index < 0 || index >= count)
    return mxu_fail(MXU_ERR_ARG,
                    "layer_weight: layer %d has no weight %d (compile first)",
                    layer, index);
  int *params = malloc((size_t)(model->param_count + 1) * sizeof *params);
  if (!params) return mxu_fail(MXU_ERR_NOMEM, "layer_weight: out of memory");
  mxu_model_layer_params(model, nth_layer(model, layer), params);
  const mxu_param *p = &model->params[params[index]];
  free(params);
  out->dtype = MXU_FLOAT32;
  out->shape = p->shape;
  out->data = mxu_param_values(model, p);
  if (name) *name = p->name;
  return MXU_OK;
}
