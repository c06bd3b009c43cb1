/* fashion_mnist.c — the "fashion" reference recipe through the C API:
 * Conv2D(64, 3x3) -> MaxPooling2D -> relu -> Flatten -> Dense(10) ->
 * softmax, Adam(1e-3), raw 0..255 pixels, 5 epochs of 60 steps (batch
 * 1000), validated on the test set after epoch 5.
 *
 * usage: fashion_mnist [DATA_DIR] [EPOCHS] */
#include "recipes.h"

#include <stdio.h>
#include <stdlib.h>

static int fail(const char *what) {
  fprintf(stderr, "fashion_mnist: %s: %s\n", what, mxu_errmsg());
  return 1;
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : "/usr/share/datasets/fashion-mnist";
  int epochs = argc > 2 ? atoi(argv[2]) : 5;
  mxu_dataset *train = NULL, *test = NULL;
  if (mxu_load_mnist_dir(dir, MXU_TRAIN, &train)) return fail("train data");
  if (mxu_load_mnist_dir(dir, MXU_TEST, &test)) return fail("test data");

  mxu_model *model = recipe_fashion_model();
  if (!model) return fail("model");
  mxu_compile_config compile = mxu_compile_defaults();
  compile.optimizer = mxu_adam(1e-3f);
  compile.loss = MXU_SPARSE_CATEGORICAL_CROSSENTROPY;
  compile.batch_size = 1000;
  compile.metrics[0] = "sparse_categorical_accuracy";
  if (mxu_compile(model, &compile)) return fail("compile");
  mxu_summary(model, stdout);

  mxu_fit_config fit = mxu_fit_defaults();
  fit.epochs = epochs;
  fit.steps_per_epoch = 60; /* Keras infers batch = 60000 / 60 = 1000 */
  fit.validation = test;
  fit.validation_freq = 5;
  const mxu_history *history = NULL;
  if (mxu_fit(model, train, &fit, &history)) return fail("fit");

  double loss, accuracy, seconds = 0;
  if (mxu_evaluate(model, test, 0, &loss, &accuracy)) return fail("evaluate");
  const double published[5] = {0.7156, 0.8598, 0.8830, 0.8972, 0.9072};
  printf("\nepoch  train accuracy  published (TPU)\n");
  for (int i = 0; i < history->count; i++) {
    seconds += history->epochs[i].seconds;
    printf("%5d  %14.4f  %15.4f\n", i + 1, history->epochs[i].accuracy,
           i < 5 ? published[i] : 0.0);
  }
  printf("training: %.1f s, %.0f images/s\n", seconds,
         (double)history->count * 60000.0 / seconds);
  printf("test loss %.4f, test accuracy %.4f (published 0.8848)\n", loss,
         accuracy);
  mxu_model_free(model);
  mxu_dataset_free(train);
  mxu_dataset_free(test);
  return accuracy >= 0.86 ? 0 : 1;
}
