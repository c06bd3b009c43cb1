/* recipes.h — the reference models of RECIPES.md built through the public
 * API, shared by the examples, the benchmark and the recipe tests so that
 * all three train exactly the same networks. */
#ifndef MXU_EXAMPLES_RECIPES_H
#define MXU_EXAMPLES_RECIPES_H

#include <mxu.h>

/* fashion: Conv2D(64, 3x3) -> MaxPooling2D(2x2) -> relu -> Flatten ->
 * Dense(10) -> softmax, on (28, 28, 1). */
static inline mxu_model *recipe_fashion_model(void) {
  mxu_model *model = mxu_sequential("sequential");
  int64_t input[3] = {28, 28, 1};
  mxu_conv2d_config conv = mxu_conv2d_defaults(64, 3, 3);
  mxu_pool2d_config pool = mxu_pool2d_defaults(2, 2);
  mxu_dense_config dense = mxu_dense_defaults(10);
  if (!model || mxu_add_input(model, NULL, mxu_shape_make(3, input)) ||
      mxu_add_conv2d(model, &conv) || mxu_add_max_pooling2d(model, &pool) ||
      mxu_add_activation(model, NULL, MXU_RELU) ||
      mxu_add_flatten(model, NULL) || mxu_add_dense(model, &dense) ||
      mxu_add_activation(model, NULL, MXU_SOFTMAX)) {
    mxu_model_free(model);
    return NULL;
  }
  return model;
}

static inline mxu_status recipe_conv(mxu_model *model, int filters,
                                     mxu_padding padding) {
  mxu_conv2d_config c = mxu_conv2d_defaults(filters, 3, 3);
  c.padding = padding;
  c.activation = MXU_RELU;
  return mxu_add_conv2d(model, &c);
}

static inline mxu_status recipe_pool_dropout(mxu_model *model) {
  mxu_pool2d_config pool = mxu_pool2d_defaults(2, 2);
  mxu_status s = mxu_add_max_pooling2d(model, &pool);
  return s ? s : mxu_add_dropout(model, NULL, 0.25f);
}

/* cifar: BN -> Conv(32, same) x2 -> pool -> dropout -> BN -> Conv(64,
 * same) -> Conv(64, valid) -> pool -> dropout -> Flatten -> Dense(512,
 * relu) -> Dropout(0.5) -> Dense(10, softmax), on (32, 32, 3). */
static inline mxu_model *recipe_cifar_model(void) {
  mxu_model *model = mxu_sequential("sequential");
  int64_t input[3] = {32, 32, 3};
  mxu_batchnorm_config bn = mxu_batchnorm_defaults();
  mxu_dense_config hidden = mxu_dense_defaults(512);
  mxu_dense_config out = mxu_dense_defaults(10);
  hidden.activation = MXU_RELU;
  out.activation = MXU_SOFTMAX;
  if (!model || mxu_add_input(model, NULL, mxu_shape_make(3, input)) ||
      mxu_add_batch_normalization(model, &bn) ||
      recipe_conv(model, 32, MXU_SAME) || recipe_conv(model, 32, MXU_SAME) ||
      recipe_pool_dropout(model) || mxu_add_batch_normalization(model, &bn) ||
      recipe_conv(model, 64, MXU_SAME) || recipe_conv(model, 64, MXU_VALID) ||
      recipe_pool_dropout(model) || mxu_add_flatten(model, NULL) ||
      mxu_add_dense(model, &hidden) || mxu_add_dropout(model, NULL, 0.5f) ||
      mxu_add_dense(model, &out)) {
    mxu_model_free(model);
    return NULL;
  }
  return model;
}

#endif
