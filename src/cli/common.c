/* common.c — what the subcommands share once their options are parsed:
 * the model file with its compile settings, a rescaled data split and the
 * test confusion matrix. */
#include "cli.h"
#include "options.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int cli_ends_with(const char *text, const char *end) {
  size_t n = text ? strlen(text) : 0, k = strlen(end);
  return n >= k && strcmp(text + n - k, end) == 0;
}

int cli_check_weights_path(const char *command, const char *flag,
                           const char *path, int reading) {
  if (reading && cli_ends_with(path, ".keras")) return CLI_OK;
  if (!path || mxu_weights_path_check(path) == MXU_OK) return CLI_OK;
  /* The library says "weights: "; the flag says it better here. */
  const char *why = mxu_errmsg();
  if (strncmp(why, "weights: ", 9) == 0) why += 9;
  return cli_usage_error(command, "%s: %s", flag, why);
}

int cli_whole_model(const char *path) {
  return cli_ends_with(path, ".keras") || cli_ends_with(path, ".h5") ||
         cli_ends_with(path, ".hdf5");
}

int cli_model_weights(const char *command, const char *model,
                      const char **weights) {
  if (!*weights && cli_whole_model(model)) *weights = model;
  if (!*weights)
    return cli_usage_error(command,
                           "--weights FILE is required: %s is a model "
                           "without weights",
                           model);
  return cli_check_weights_path(command, "--weights", *weights, 1);
}

/* The samples of each input the model may name, for its null dimensions:
 * sample for its one input, or an .npz's arrays by name. */
typedef struct cli_samples {
  const mxu_shape *sample;
  const char *const *names;
  const mxu_shape *shapes;
  int count;
} cli_samples;

static mxu_status load_model_with(const char *path, const cli_samples *given,
                                  mxu_model **model,
                                  mxu_compile_config *compile) {
  *compile = mxu_compile_defaults();
  int has_compile = 0;
  if (given && given->sample)
    return mxu_model_load_json_for(path, *given->sample, model, compile,
                                   &has_compile);
  if (given)
    return mxu_model_load_json_for_inputs(path, given->names, given->shapes,
                                          given->count, model, compile,
                                          &has_compile);
  return mxu_model_load_json(path, model, compile, &has_compile);
}

mxu_status cli_load_model(const char *path, mxu_model **model,
                          mxu_compile_config *compile) {
  return load_model_with(path, NULL, model, compile);
}

mxu_status cli_load_model_shaped(const char *path, const mxu_shape *sample,
                                 mxu_model **model,
                                 mxu_compile_config *compile) {
  cli_samples given = {sample, NULL, NULL, 0};
  return load_model_with(path, sample ? &given : NULL, model, compile);
}

/* An .npz's arrays by key, or x_test (y_test) and then x (y): the second
 * only when the archive lacks the first. */
mxu_status cli_load_arrays(const char *path, const char *key, int labels,
                           mxu_dataset **out) {
  if (!cli_ends_with(path, ".npz")) return mxu_load_npy(path, NULL, out);
  if (key) {
    char y[256];
    snprintf(y, sizeof y, "y%s", key[0] == 'x' ? key + 1 : key);
    return mxu_load_npz_arrays(path, key, labels ? y : NULL, out);
  }
  mxu_status s =
      mxu_load_npz_arrays(path, "x_test", labels ? "y_test" : NULL, out);
  if (s != MXU_ERR_FORMAT || !strstr(mxu_errmsg(), "no array 'x_test'"))
    return s;
  return mxu_load_npz_arrays(path, "x", labels ? "y" : NULL, out);
}

/* Whether an .npz's entries hold one named `name`. */
static int has_entry(const mxu_npz_entry *entries, int count,
                     const char *name) {
  for (int i = 0; i < count; i++)
    if (strcmp(entries[i].name, name) == 0) return 1;
  return 0;
}

#define MAX_NPZ_ENTRIES 64

/* A model of several inputs or outputs reads an .npz of an array per
 * input, by the inputs' names, and of several outputs an array of targets
 * per output, by the outputs' names. */
static mxu_status load_named(const cli_data *d, mxu_split split,
                             const mxu_model *model, mxu_dataset **out) {
  int n = mxu_model_input_count(model), m = mxu_model_output_count(model);
  const char *names[CLI_MAX_INPUTS], *outputs[MXU_MAX_OUTPUTS];
  for (int k = 0; k < n && k < CLI_MAX_INPUTS; k++)
    names[k] = mxu_model_input_name(model, k);
  for (int j = 0; j < m && j < MXU_MAX_OUTPUTS; j++)
    outputs[j] = mxu_model_output_name(model, j);
  /* --labels and CSV tables hold one input: the library says so. */
  const char *path = d->labels || d->label_column ? NULL : d->data;
  mxu_status status = mxu_load_npz_model(path, split, names, n, outputs,
                                         m > 1 ? m : 0, d->whole, 1, out);
  for (int k = 0; k < n && status == MXU_OK; k++)
    status =
        mxu_dataset_reshape_input(*out, k, mxu_model_input_shape_of(model, k));
  return status;
}

mxu_status cli_load_split(const cli_data *d, mxu_split split,
                          const mxu_model *model, mxu_dataset **out) {
  mxu_status status;
  mxu_shape input = mxu_model_input_shape(model);
  int arrays =
      d->labels || d->label_column ||
      (d->whole && split == MXU_TEST && cli_ends_with(d->data, ".npz"));
  if (mxu_model_input_count(model) > 1 || mxu_model_output_count(model) > 1)
    status = load_named(d, split, model, out);
  else if (!arrays)
    status = mxu_load_dataset_for(d->data, split, input, out);
  else if (d->labels || d->label_column)
    status = d->labels ? mxu_load_npy(d->data, d->labels, out)
                       : mxu_load_csv(d->data, d->label_column, out);
  else
    status = cli_load_arrays(d->data, NULL, 1, out);
  /* Arrays and tables are flat: they take the model's input shape. */
  if (arrays && status == MXU_OK && input.rank &&
      mxu_model_input_count(model) == 1)
    status = mxu_dataset_reshape(*out, input);
  if (status != MXU_OK) {
    mxu_dataset_free(*out);
    *out = NULL;
  }
  if (status == MXU_OK && d->rescale != 1.0f)
    mxu_dataset_rescale(*out, d->rescale);
  return status;
}

double cli_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Samples per mxu_predict call: enough to keep the compiled batch busy,
 * few enough that the outputs stay small whatever the test split's size. */
#define CONFUSION_CHUNK 1024

/* The first highest output, as the accuracy metric counts it. */
static int argmax(const float *row, int classes) {
  int best = 0;
  for (int c = 1; c < classes; c++)
    if (row[c] > row[best]) best = c;
  return best;
}

/* Counts one chunk's predictions into matrix; a label the model has no
 * output for is an error rather than a write out of bounds. */
static int count_chunk(const char *command, const float *out,
                       const int32_t *labels, int64_t first, int64_t rows,
                       int classes, int64_t *matrix) {
  for (int64_t r = 0; r < rows; r++) {
    int32_t label = labels[first + r];
    if (label < 0 || label >= classes) {
      fprintf(stderr,
              "mxu %s: confusion: test sample %lld has label %d but the "
              "model has %d outputs\n",
              command, (long long)(first + r), (int)label, classes);
      return CLI_RUNTIME;
    }
    matrix[(int64_t)label * classes + argmax(out + r * classes, classes)]++;
  }
  return CLI_OK;
}

static int predict_counts(const char *command, mxu_model *model,
                          const mxu_dataset *test, int classes, float *out,
                          int64_t *matrix) {
  mxu_shape shape = mxu_dataset_shape(test);
  int64_t sample = mxu_shape_count(&shape), count = mxu_dataset_count(test);
  const float *x = mxu_dataset_x(test);
  const int32_t *labels = mxu_dataset_labels(test);
  for (int64_t first = 0; first < count; first += CONFUSION_CHUNK) {
    int64_t rows =
        count - first < CONFUSION_CHUNK ? count - first : CONFUSION_CHUNK;
    if (mxu_predict(model, x + first * sample, rows, out) != MXU_OK)
      return cli_runtime_error(command);
    int code = count_chunk(command, out, labels, first, rows, classes, matrix);
    if (code != CLI_OK) return code;
  }
  return CLI_OK;
}

int cli_confusion(const char *command, mxu_model *model,
                  const mxu_dataset *test, int64_t **matrix_out,
                  int *classes_out) {
  *matrix_out = NULL;
  *classes_out = 0;
  mxu_shape last =
      mxu_model_layer_shape(model, mxu_model_layer_count(model) - 1);
  int classes = (int)mxu_shape_count(&last);
  int64_t *matrix = calloc((size_t)classes * (size_t)classes, sizeof *matrix);
  float *out = malloc((size_t)CONFUSION_CHUNK * (size_t)classes * sizeof *out);
  int code = CLI_RUNTIME;
  if (!matrix || !out)
    fprintf(stderr, "mxu %s: confusion: out of memory\n", command);
  else
    code = predict_counts(command, model, test, classes, out, matrix);
  free(out);
  if (code != CLI_OK) {
    free(matrix);
    return code;
  }
  *matrix_out = matrix;
  *classes_out = classes;
  return CLI_OK;
}

const char *cli_metric_label(const char *metric) {
  return strstr(metric, "acc") ? "accuracy" : metric;
}

void cli_print_test(double loss, const mxu_output_log *outputs,
                    int output_count) {
  printf("test loss %.4f", loss);
  for (int j = 0; output_count > 1 && j < output_count; j++)
    printf(" - test %s_loss %.4f", outputs[j].name, outputs[j].loss);
  for (int j = 0; j < output_count; j++)
    for (int m = 0; m < outputs[j].metric_count; m++)
      printf(" - test %s%s%s %.4f", output_count > 1 ? outputs[j].name : "",
             output_count > 1 ? "_" : "",
             output_count > 1 || m ? outputs[j].metrics[m]
                                   : cli_metric_label(outputs[j].metrics[m]),
             outputs[j].values[m]);
  printf("\n");
}

const char *const cli_backend_names[] = {"cpu", "cpu_ref", "pjrt", NULL};

void cli_note_precision(const char *command, const mxu_model *model,
                        const mxu_compile_config *asked) {
  if (asked->precision == MXU_MIXED_BFLOAT16 &&
      mxu_model_precision(model) != MXU_MIXED_BFLOAT16 &&
      mxu_distributed_rank() == 0)
    fprintf(stderr,
            "mxu %s: mixed_bfloat16 needs AVX512_BF16, which this CPU "
            "lacks: training in float32\n",
            command);
}

/* A model of several inputs with a null dimension: the samples of each
 * array of the .npz that the split reads (NAME_train or NAME_test, or
 * NAME), by input name. */
static mxu_status load_model_named(const char *path, const cli_data *d,
                                   mxu_split split, mxu_model **model,
                                   mxu_compile_config *compile) {
  mxu_npz_entry entries[MAX_NPZ_ENTRIES];
  int count = 0;
  mxu_status status =
      mxu_npz_entries(d->data, entries, MAX_NPZ_ENTRIES, &count);
  if (status != MXU_OK) return status;
  const char *suffix = split == MXU_TRAIN ? "_train" : "_test";
  if (!has_entry(entries, count, split == MXU_TRAIN ? "y_train" : "y_test"))
    suffix = "";
  const char *names[MAX_NPZ_ENTRIES];
  mxu_shape shapes[MAX_NPZ_ENTRIES];
  int n = 0;
  size_t cut = strlen(suffix);
  for (int i = 0; i < count; i++) {
    size_t length = strlen(entries[i].name);
    if (length <= cut || strcmp(entries[i].name + length - cut, suffix))
      continue;
    entries[i].name[length - cut] = 0;
    names[n] = entries[i].name;
    shapes[n++] = entries[i].sample;
  }
  cli_samples given = {NULL, names, shapes, n};
  return load_model_with(path, &given, model, compile);
}

mxu_status cli_load_model_for(const char *path, const cli_data *d,
                              mxu_split split, mxu_model **model,
                              mxu_compile_config *compile) {
  mxu_status status = cli_load_model(path, model, compile);
  if (status != MXU_ERR_SHAPE || !d || !d->data) return status;
  cli_data plain = *d;
  plain.rescale = 1.0f;
  mxu_dataset *samples = NULL;
  /* The model's message stands if the data cannot tell the length. */
  if (cli_load_split(&plain, split, NULL, &samples) != MXU_OK) {
    if (cli_ends_with(d->data, ".npz") &&
        load_model_named(path, d, split, model, compile) == MXU_OK)
      return MXU_OK;
    return cli_load_model(path, model, compile);
  }
  mxu_shape sample = mxu_dataset_shape(samples);
  mxu_dataset_free(samples);
  return cli_load_model_shaped(path, &sample, model, compile);
}
