/* cifar10.c — the "cifar" reference recipe through the C API: the
 * BatchNormalization-first CNN of RECIPES.md on raw 0..255 pixels,
 * Adam(1e-3), batch 1024; prints per-epoch and test accuracy.
 *
 * usage: cifar10 [DATA_DIR] [EPOCHS] [TRAIN_SAMPLES] [SEED] */
#include "recipes.h"

#include <stdio.h>
#include <stdlib.h>

static int fail(const char *what) {
  fprintf(stderr, "cifar10: %s: %s\n", what, mxu_errmsg());
  return 1;
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : "../shared/data/cifar-10";
  int epochs = argc > 2 ? atoi(argv[2]) : 2;
  long limit = argc > 3 ? atol(argv[3]) : 0;
  uint64_t seed = argc > 4 ? strtoull(argv[4], NULL, 10) : 1;
  mxu_dataset *all = NULL, *train = NULL, *test = NULL;
  if (mxu_load_cifar10_dir(dir, MXU_TRAIN, &all)) return fail("train data");
  if (mxu_load_cifar10_dir(dir, MXU_TEST, &test)) return fail("test data");
  int64_t count = limit > 0 && limit < mxu_dataset_count(all)
                      ? limit
                      : mxu_dataset_count(all);
  if (mxu_dataset_slice(all, 0, count, &train)) return fail("slice");

  mxu_model *model = recipe_cifar_model();
  if (!model) return fail("model");
  mxu_compile_config compile = mxu_compile_defaults();
  compile.batch_size = 1024;
  compile.seed = seed;
  if (mxu_compile(model, &compile)) return fail("compile");
  mxu_summary(model, stdout);

  mxu_fit_config fit = mxu_fit_defaults();
  fit.epochs = epochs;
  fit.batch_size = 1024;
  fit.seed = seed;
  fit.verbose = 2;
  const mxu_history *history = NULL;
  if (mxu_fit(model, train, &fit, &history)) return fail("fit");
  double loss, accuracy, seconds = 0;
  for (int i = 0; i < history->count; i++)
    seconds += history->epochs[i].seconds;
  if (mxu_evaluate(model, test, 0, &loss, &accuracy)) return fail("evaluate");
  printf("training: %.1f s, %.0f images/s\n", seconds,
         (double)history->count * (double)(count / 1024 * 1024) / seconds);
  printf("test loss %.4f, test accuracy %.4f\n", loss, accuracy);
  mxu_model_free(model);
  mxu_dataset_free(train);
  mxu_dataset_free(all);
  mxu_dataset_free(test);
  /* The recipe's claim for 2 epochs: test accuracy above 0.40. */
  return epochs >= 2 && limit == 0 && accuracy <= 0.40 ? 1 : 0;
}
