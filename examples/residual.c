/* residual.c — a small residual network for CIFAR-10 built with the
 * Functional API, as Keras' mxu_functional / mxu_input / mxu_apply_* /
 * mxu_add would write it: a stem conv, two residual blocks (the second
 * downsampling, with a 1x1 projection shortcut), global average pooling
 * and a softmax. Trains a few epochs, evaluates, saves the weights in
 * Keras' layout and the model as Keras JSON.
 *
 * usage: residual [CIFAR10_DIR] [EPOCHS] [STEPS_PER_EPOCH] */
#include "mxu.h"

#include <stdio.h>
#include <stdlib.h>

static int fail(const char *what) {
  fprintf(stderr, "residual: %s: %s\n", what, mxu_errmsg());
  return 1;
}

/* conv 3x3 -> BatchNormalization, relu if asked: Keras' resnet_layer. */
static mxu_tensor_id conv_bn(mxu_model *m, mxu_tensor_id x, int filters,
                             int stride, int relu) {
  mxu_conv2d_config conv = mxu_conv2d_defaults(filters, 3, 3);
  conv.strides[0] = conv.strides[1] = stride;
  conv.padding = MXU_SAME;
  mxu_batchnorm_config bn = mxu_batchnorm_defaults();
  x = mxu_apply_batch_normalization(m, &bn, mxu_apply_conv2d(m, &conv, x));
  return relu ? mxu_apply_activation(m, NULL, MXU_RELU, x) : x;
}

/* x + F(x), then relu; a stride-2 block projects x with a 1x1 conv so the
 * shapes meet. */
static mxu_tensor_id residual_block(mxu_model *m, mxu_tensor_id x, int filters,
                                    int stride) {
  mxu_tensor_id y =
      conv_bn(m, conv_bn(m, x, filters, stride, 1), filters, 1, 0);
  if (stride != 1) {
    mxu_conv2d_config project = mxu_conv2d_defaults(filters, 1, 1);
    project.strides[0] = project.strides[1] = stride;
    x = mxu_apply_conv2d(m, &project, x);
  }
  return mxu_apply_activation(m, NULL, MXU_RELU, mxu_add(m, NULL, x, y));
}

static mxu_model *build(void) {
  mxu_model *m = mxu_functional("small_resnet");
  if (!m) return NULL;
  int64_t dims[3] = {32, 32, 3};
  mxu_tensor_id x = mxu_input(m, "image", mxu_shape_make(3, dims));
  x = conv_bn(m, x, 16, 1, 1);
  x = residual_block(m, x, 16, 1);
  x = residual_block(m, x, 32, 2);
  mxu_global_pool2d_config gap = {NULL, 0, 0};
  x = mxu_apply_global_pooling2d(m, &gap, x);
  mxu_dense_config head = mxu_dense_defaults(10);
  head.activation = MXU_SOFTMAX;
  x = mxu_apply_dense(m, &head, x);
  /* Any failure above passed -1 along; its message is the first one. */
  if (mxu_model_outputs(m, &x, 1) != MXU_OK) {
    mxu_model_free(m);
    return NULL;
  }
  return m;
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : "../shared/data/cifar-10";
  int epochs = argc > 2 ? atoi(argv[2]) : 2;
  int steps = argc > 3 ? atoi(argv[3]) : 0;
  mxu_dataset *train = NULL, *test = NULL;
  if (mxu_load_cifar10_dir(dir, MXU_TRAIN, &train)) return fail("train data");
  if (mxu_load_cifar10_dir(dir, MXU_TEST, &test)) return fail("test data");
  mxu_dataset_rescale(train, 1.0f / 255.0f);
  mxu_dataset_rescale(test, 1.0f / 255.0f);

  mxu_model *model = build();
  if (!model) return fail("model");
  mxu_compile_config compile = mxu_compile_defaults();
  compile.batch_size = 128;
  if (mxu_compile(model, &compile)) return fail("compile");
  mxu_summary(model, stdout);

  mxu_fit_config fit = mxu_fit_defaults();
  fit.epochs = epochs;
  fit.batch_size = 128; /* else Keras infers it from steps_per_epoch */
  fit.steps_per_epoch = steps;
  fit.validation = test;
  fit.verbose = 2;
  if (mxu_fit(model, train, &fit, NULL)) return fail("fit");
  double loss, accuracy;
  if (mxu_evaluate(model, test, 0, &loss, &accuracy)) return fail("evaluate");
  printf("test loss %.4f, test accuracy %.4f\n", loss, accuracy);
  if (mxu_save_weights(model, "small_resnet.weights.h5") ||
      mxu_model_save_json(model, "small_resnet.json", 0))
    return fail("save");
  printf("saved small_resnet.json and small_resnet.weights.h5\n");
  mxu_model_free(model);
  mxu_dataset_free(train);
  mxu_dataset_free(test);
  return 0;
}
