/* cifar10.c — the "cifar" reference recipe through the C API: the
 * BatchNormalization-first CNN of RECIPES.md on raw 0..255 pixels,
 * Adam(1e-3), global batch 1024 over 8 replicas; prints per-epoch and
 * test accuracy for each of SEEDS seeds (1, 2, ...) and their median, and
 * exits 1 below the bar for its length (below_bar). `make recipes` runs
 * the published 50 epochs; two epochs are a short, chaotic stretch of
 * this recipe, so one seed says little there.
 *
 * With WEIGHTS.h5, seed 1's weights are saved there as Keras'
 * save_weights does, loaded into a fresh single-replica model, as the
 * recipe's CPU model, and used to classify test image 111 (an airplane).
 *
 * usage: cifar10 [DATA_DIR] [EPOCHS] [SEEDS] [TRAIN_SAMPLES] [WEIGHTS.h5] */
#include "recipes.h"

#include <stdio.h>
#include <stdlib.h>

#define MAX_SEEDS 9

static int fail(const char *what) {
  fprintf(stderr, "cifar10: %s: %s\n", what, mxu_errmsg());
  return 1;
}

/* Trains one model from seed; writes its test accuracy. */
static int train_once(const mxu_dataset *train, const mxu_dataset *test,
                      int epochs, uint64_t seed, const char *weights,
                      double *accuracy) {
  mxu_model *model = recipe_cifar_model();
  if (!model) return fail("model");
  mxu_compile_config compile = mxu_compile_defaults();
  compile.batch_size = 1024;
  compile.replicas = 8; /* 128 per core x 8, so each BatchNormalization
                           takes its statistics over 128 images */
  compile.seed = seed;
  compile.metrics[0] = "sparse_categorical_accuracy";
  if (mxu_compile(model, &compile)) return fail("compile");
  if (seed == 1) mxu_summary(model, stdout);

  mxu_fit_config fit = mxu_fit_defaults();
  fit.epochs = epochs;
  fit.batch_size = 1024;
  fit.seed = seed;
  fit.verbose = 2;
  const mxu_history *history = NULL;
  printf("seed %llu\n", (unsigned long long)seed);
  if (mxu_fit(model, train, &fit, &history)) return fail("fit");
  double loss, seconds = 0, images = 0;
  for (int i = 0; i < history->count; i++) {
    seconds += history->epochs[i].seconds;
    images += (double)history->epochs[i].samples;
  }
  if (mxu_evaluate(model, test, 0, &loss, accuracy)) return fail("evaluate");
  printf("seed %llu: training %.1f s, %.0f images/s; test loss %.4f, test "
         "accuracy %.4f\n",
         (unsigned long long)seed, seconds, images / seconds, loss, *accuracy);
  if (weights && seed == 1 && mxu_save_weights(model, weights))
    return fail("save weights");
  mxu_model_free(model);
  return 0;
}

/* The recipe's last step: the saved weights in a model built for one CPU
 * and one image at a time, classifying test image 111. */
static int classify(const char *weights, const mxu_dataset *test) {
  enum { INDEX = 111, CLASSES = 10 };
  mxu_shape image = mxu_dataset_shape(test);
  const float *x = mxu_dataset_x(test) + INDEX * mxu_shape_count(&image);
  mxu_model *model = recipe_cifar_model();
  if (!model) return fail("model");
  mxu_compile_config compile = mxu_compile_defaults();
  compile.batch_size = 1;
  float p[CLASSES];
  if (mxu_compile(model, &compile) || mxu_load_weights(model, weights) ||
      mxu_predict(model, x, 1, p)) {
    mxu_model_free(model);
    return fail(weights);
  }
  int best = 0;
  for (int k = 1; k < CLASSES; k++)
    if (p[k] > p[best]) best = k;
  int label = mxu_dataset_labels(test)[INDEX];
  printf("%s: test image %d (%s) classified as %s, probability %.4f\n", weights,
         INDEX, mxu_dataset_class_name(test, label),
         mxu_dataset_class_name(test, best), p[best]);
  mxu_model_free(model);
  return 0;
}

/* 1 when a run on all the data falls below its bar. The published
 * 50-epoch result is test accuracy 0.8079 from one TPU run; the bar leaves
 * 1.5 points for the seed. The 2-epoch bar (0.40, on the median) is the
 * issues' claim. Two epochs end with BatchNormalization's moving
 * statistics still 38% their initial 0 and 1 (momentum 0.99, 96 steps), so
 * test accuracy there swings with the seed, as in Keras: tf.keras 2.21 on
 * this recipe (8 replicas, MirroredStrategy on CPU) gave 0.3885, 0.4170,
 * 0.3732 for seeds 1-3 and 0.2671-0.4170 over seeds 1-7. */
static int below_bar(int epochs, long limit, double median) {
  if (limit != 0) return 0;
  if (epochs >= 50) return median < 0.8079 - 0.015;
  return epochs >= 2 && median <= 0.40;
}

static int compare(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : "../shared/data/cifar-10";
  int epochs = argc > 2 ? atoi(argv[2]) : 2;
  int seeds = argc > 3 ? atoi(argv[3]) : 1;
  long limit = argc > 4 ? atol(argv[4]) : 0;
  const char *weights = argc > 5 ? argv[5] : NULL;
  if (epochs < 1 || seeds < 1 || seeds > MAX_SEEDS) {
    fprintf(stderr,
            "usage: cifar10 [DATA_DIR] [EPOCHS>=1] [SEEDS 1..%d] "
            "[TRAIN_SAMPLES] [WEIGHTS.h5]\n",
            MAX_SEEDS);
    return 2;
  }
  mxu_dataset *all = NULL, *train = NULL, *test = NULL;
  /* The catalog loader also reads batches.meta.txt's class names. */
  if (mxu_load_dataset(dir, MXU_TRAIN, &all)) return fail("train data");
  if (mxu_load_dataset(dir, MXU_TEST, &test)) return fail("test data");
  int64_t count = limit > 0 && limit < mxu_dataset_count(all)
                      ? limit
                      : mxu_dataset_count(all);
  if (mxu_dataset_slice(all, 0, count, &train)) return fail("slice");

  double accuracy[MAX_SEEDS];
  for (int s = 0; s < seeds; s++)
    if (train_once(train, test, epochs, (uint64_t)s + 1, weights, &accuracy[s]))
      return 1;
  if (weights && classify(weights, test)) return 1;
  qsort(accuracy, (size_t)seeds, sizeof *accuracy, compare);
  double median = accuracy[seeds / 2];
  printf("median test accuracy over %d seed(s): %.4f\n", seeds, median);
  mxu_dataset_free(train);
  mxu_dataset_free(all);
  mxu_dataset_free(test);
  return below_bar(epochs, limit, median);
}
