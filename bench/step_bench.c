/* step_bench.c — `make bench`: times full training steps (forward,
 * backward, optimizer, batch gathering) of the reference models on
 * synthetic data after a warm-up, repeats, and prints the median
 * images/s. Speed belongs here, never in the tests.
 *
 * usage: step_bench [fashion|cifar|all] [REPEATS] */
#include "recipes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct bench_case {
  const char *name;
  mxu_model *(*build)(void);
  int64_t dims[3];
  int batch, steps;
} bench_case;

static int compare(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static mxu_dataset *synthetic(const bench_case *c) {
  int64_t count = (int64_t)c->batch * c->steps;
  int64_t sample = c->dims[0] * c->dims[1] * c->dims[2];
  float *x = malloc((size_t)(count * sample) * sizeof *x);
  int32_t *labels = malloc((size_t)count * sizeof *labels);
  mxu_dataset *data = NULL;
  if (x && labels) {
    for (int64_t i = 0; i < count * sample; i++) x[i] = (float)(i * 37 % 256);
    for (int64_t i = 0; i < count; i++) labels[i] = (int32_t)(i % 10);
    mxu_dataset_from_arrays(x, labels, count, mxu_shape_make(3, c->dims), 10,
                            &data);
  }
  free(x);
  free(labels);
  return data;
}

static int run(const bench_case *c, int repeats) {
  mxu_model *model = c->build();
  mxu_dataset *data = synthetic(c);
  mxu_compile_config compile = mxu_compile_defaults();
  compile.batch_size = c->batch;
  if (!model || !data || mxu_compile(model, &compile)) {
    fprintf(stderr, "bench %s: %s\n", c->name, mxu_errmsg());
    return 1;
  }
  mxu_fit_config fit = mxu_fit_defaults();
  fit.batch_size = c->batch;
  fit.verbose = 0;
  fit.epochs = 1;
  fit.steps_per_epoch = 1;
  const mxu_history *history = NULL;
  if (mxu_fit(model, data, &fit, &history)) { /* warm-up */
    fprintf(stderr, "bench %s: %s\n", c->name, mxu_errmsg());
    return 1;
  }
  fit.steps_per_epoch = c->steps;
  double rates[32];
  for (int r = 0; r < repeats; r++) {
    mxu_fit(model, data, &fit, &history);
    rates[r] = (double)c->batch * c->steps / history->epochs[0].seconds;
  }
  qsort(rates, (size_t)repeats, sizeof *rates, compare);
  printf("%-8s batch %5d  %6.0f images/s (median of %d; min %.0f, max %.0f)"
         "  %.1f ms/step\n",
         c->name, c->batch, rates[repeats / 2], repeats, rates[0],
         rates[repeats - 1], 1e3 * c->batch / rates[repeats / 2]);
  mxu_model_free(model);
  mxu_dataset_free(data);
  return 0;
}

int main(int argc, char **argv) {
  const char *which = argc > 1 ? argv[1] : "all";
  int repeats = argc > 2 ? atoi(argv[2]) : 5;
  if (repeats < 1 || repeats > 32) repeats = 5;
  const bench_case cases[] = {
      {"fashion", recipe_fashion_model, {28, 28, 1}, 1000, 10},
      {"cifar", recipe_cifar_model, {32, 32, 3}, 1024, 3},
  };
  int failed = 0;
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
    if (!strcmp(which, "all") || !strcmp(which, cases[i].name))
      failed |= run(&cases[i], repeats);
  return failed;
}
