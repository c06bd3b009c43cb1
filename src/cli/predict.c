/* predict.c — `mxu predict MODEL.json --weights FILE --data DATA --index
 * I,J`: the top classes, with names and probabilities, that saved weights
 * give chosen test images, beside each image's true class. */
#include "cli.h"
#include "options.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct predict_args {
  const char *model, *weights, *data;
  cli_indices indices;
  int top;
  float rescale;
} predict_args;

#define PREDICT_OPTION_COUNT 5

static void predict_options(predict_args *a, cli_option *o) {
  cli_option table[PREDICT_OPTION_COUNT] = {
      CLI_OPTION_WEIGHTS(&a->weights),
      CLI_OPTION_DATA(&a->data),
      {"--index", "I[,J...]", "positions of the images in the test split",
       CLI_INDICES, &a->indices, NULL, 1, 0},
      {"--top", "K", "classes to show per image, most likely first (default 3)",
       CLI_POSITIVE_INT, &a->top, NULL, 0, 0},
      CLI_OPTION_RESCALE(&a->rescale),
  };
  memcpy(o, table, sizeof table);
}

static const char predict_summary[] =
    "Classifies test images of DATA with the Keras model in MODEL.json and "
    "saved\nweights, printing each image's true class and the top K "
    "predicted classes.";

typedef struct predict_run {
  mxu_model *model;
  mxu_dataset *test;
  mxu_compile_config compile;
  char metric[64];
  float *x, *out;
  int classes;
} predict_run;

static int check_indices(const predict_args *a, const mxu_dataset *test) {
  int64_t count = mxu_dataset_count(test);
  for (int i = 0; i < a->indices.count; i++)
    if (a->indices.items[i] >= count)
      return cli_usage_error("predict",
                             "--index: %lld is out of range: the test split "
                             "of %s has %lld images (0..%lld)",
                             (long long)a->indices.items[i], a->data,
                             (long long)count, (long long)count - 1);
  return CLI_OK;
}

/* mxu_predict trusts its caller about shapes; mxu_evaluate checks them,
 * so one image through it turns a mismatch into a clear error. */
static mxu_status check_shapes(predict_run *run, int64_t index) {
  mxu_dataset *one = NULL;
  mxu_status s = mxu_dataset_slice(run->test, index, 1, &one);
  if (s == MXU_OK) s = mxu_evaluate(run->model, one, 0, NULL, NULL);
  mxu_dataset_free(one);
  return s;
}

static mxu_status prepare(const predict_args *a, predict_run *run) {
  run->compile.batch_size = a->indices.count; /* one static batch */
  mxu_status s = mxu_compile(run->model, &run->compile);
  if (s == MXU_OK) s = mxu_load_weights(run->model, a->weights);
  if (s == MXU_OK) s = check_shapes(run, a->indices.items[0]);
  mxu_shape last =
      mxu_model_layer_shape(run->model, mxu_model_layer_count(run->model) - 1);
  run->classes = (int)last.dims[0];
  return s;
}

/* Returns an exit code: the library's error, or out of memory. */
static int run_predict(const predict_args *a, predict_run *run) {
  if (prepare(a, run) != MXU_OK) return cli_runtime_error("predict");
  int n = a->indices.count;
  mxu_shape shape = mxu_dataset_shape(run->test);
  int64_t sample = mxu_shape_count(&shape);
  run->x = malloc((size_t)(n * sample) * sizeof *run->x);
  run->out = malloc((size_t)n * (size_t)run->classes * sizeof *run->out);
  if (!run->x || !run->out) {
    fprintf(stderr, "mxu predict: out of memory\n");
    return CLI_RUNTIME;
  }
  const float *x = mxu_dataset_x(run->test);
  for (int i = 0; i < n; i++)
    memcpy(run->x + i * sample, x + a->indices.items[i] * sample,
           (size_t)sample * sizeof *x);
  if (mxu_predict(run->model, run->x, n, run->out) != MXU_OK)
    return cli_runtime_error("predict");
  return CLI_OK;
}

/* A model compiled from_logits outputs scores; show probabilities. */
static void softmax(float *row, int classes) {
  float top = row[0];
  for (int c = 1; c < classes; c++) top = row[c] > top ? row[c] : top;
  double sum = 0;
  for (int c = 0; c < classes; c++) sum += exp((double)(row[c] - top));
  for (int c = 0; c < classes; c++)
    row[c] = (float)(exp((double)(row[c] - top)) / sum);
}

static void class_text(const mxu_dataset *data, int label, char *out,
                       size_t size) {
  const char *name = mxu_dataset_class_name(data, label);
  if (name)
    snprintf(out, size, "%s (%d)", name, label);
  else
    snprintf(out, size, "%d", label);
}

/* The k most likely classes by selection: k and the class count are
 * small. */
static void print_top(const predict_run *run, const float *row, int top) {
  float last = INFINITY;
  int last_class = -1;
  for (int rank = 1; rank <= top; rank++) {
    /* The next class in (probability descending, class ascending). */
    int best = -1;
    for (int c = 0; c < run->classes; c++) {
      int after = row[c] < last || (row[c] == last && c > last_class);
      if (after && (best < 0 || row[c] > row[best])) best = c;
    }
    if (best < 0) return; /* NaN scores: nothing more to rank */
    last = row[best];
    last_class = best;
    char name[160];
    class_text(run->test, best, name, sizeof name);
    /* Tiny probabilities in exponent form rather than as 0.0000. */
    double p = (double)row[best];
    int width = top >= 10 ? 2 : 1;
    printf(p >= 1e-3 ? "  %*d. %-28s %.4f\n" : "  %*d. %-28s %.2e\n", width,
           rank, name, p);
  }
}

static void print_predictions(const predict_args *a, predict_run *run) {
  int top = a->top < run->classes ? a->top : run->classes;
  const int32_t *labels = mxu_dataset_labels(run->test);
  for (int i = 0; i < a->indices.count; i++) {
    float *row = run->out + (size_t)i * (size_t)run->classes;
    if (run->compile.from_logits) softmax(row, run->classes);
    char truth[160];
    int64_t index = a->indices.items[i];
    class_text(run->test, labels[index], truth, sizeof truth);
    printf("test image %lld: true class %s\n", (long long)index, truth);
    print_top(run, row, top);
  }
}

int cli_predict(int argc, char **argv) {
  predict_args a = {0};
  a.top = 3;
  a.rescale = 1.0f;
  cli_option options[PREDICT_OPTION_COUNT];
  predict_options(&a, options);
  cli_command cmd = {"predict", "MODEL.json", predict_summary, options,
                     PREDICT_OPTION_COUNT};
  int parsed = cli_parse(&cmd, argc, argv, &a.model);
  if (parsed != CLI_OK) return parsed < 0 ? CLI_OK : parsed;
  parsed = cli_check_weights_path("predict", "--weights", a.weights);
  if (parsed != CLI_OK) return parsed;

  predict_run run = {0};
  int code = CLI_OK;
  if (cli_load_model(a.model, &run.model, &run.compile, run.metric,
                     sizeof run.metric) != MXU_OK ||
      cli_load_split(a.data, MXU_TEST, a.rescale, &run.test) != MXU_OK)
    code = cli_runtime_error("predict");
  else if ((code = check_indices(&a, run.test)) == CLI_OK &&
           (code = run_predict(&a, &run)) == CLI_OK)
    print_predictions(&a, &run);
  free(run.x);
  free(run.out);
  mxu_model_free(run.model);
  mxu_dataset_free(run.test);
  return code;
}
