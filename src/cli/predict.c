/* predict.c — `mxu predict MODEL.json --weights FILE --data DATA --index
 * I,J` or `--image A.png,B.jpg`: the top classes, with names and
 * probabilities, that saved weights give chosen test images (beside each
 * one's true class) or image files (resized to the model's input). */
#include "cli.h"
#include "options.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct predict_args {
  const char *model, *weights, *data, *images, *input, *output, *key;
  const char *label_column;
  cli_indices indices;
  int top;
  float rescale;
} predict_args;

#define PREDICT_OPTION_COUNT 10

static void predict_options(predict_args *a, cli_option *o) {
  cli_option table[PREDICT_OPTION_COUNT] = {
      CLI_OPTION_WEIGHTS(&a->weights),
      {"--data", "DATA",
       "the data set whose test images --index picks, or whose class names "
       "--image uses: a name (fashion-mnist, mnist, cifar10, cifar100) or a "
       "directory",
       CLI_STRING, &a->data, NULL, 0, 0},
      {"--index", "I[,J...]", "positions of the images in the test split",
       CLI_INDICES, &a->indices, NULL, 0, 0},
      {"--image", "FILE[,FILE...]",
       "PNG or JPEG files to classify instead, resized to the model's input",
       CLI_STRING, &a->images, NULL, 0, 0},
      {"--input", "FILE.npy|FILE.npz|FILE.csv",
       "predict every sample of a NumPy array instead (any numeric dtype; "
       "rescaled by --rescale)",
       CLI_STRING, &a->input, NULL, 0, 0},
      {"--key", "NAME",
       "with --input FILE.npz: the array to predict (default x_test, else x)",
       CLI_STRING, &a->key, NULL, 0, 0},
      {"--label-column", "NAME",
       "with --input FILE.csv: a column to leave out (the labels); every "
       "other column is a feature",
       CLI_STRING, &a->label_column, NULL, 0, 0},
      {"--output", "FILE.npy|FILE.npz",
       "with --input: write the model's outputs, (samples, classes) "
       "float32, as Keras' predict returns them, instead of printing them "
       "(a model of several outputs: an .npz of an array per output, named "
       "after it)",
       CLI_STRING, &a->output, NULL, 0, 0},
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
  mxu_dataset *test; /* NULL for --image without --data */
  int count;         /* images to classify */
  char files[CLI_MAX_INDICES][1024];
  mxu_compile_config compile;
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
  run->compile.batch_size = run->count; /* one static batch */
  mxu_status s = mxu_compile(run->model, &run->compile);
  if (s == MXU_OK) s = mxu_load_weights(run->model, a->weights);
  if (s == MXU_OK && !a->images) s = check_shapes(run, a->indices.items[0]);
  mxu_shape last =
      mxu_model_layer_shape(run->model, mxu_model_layer_count(run->model) - 1);
  run->classes = (int)last.dims[0];
  return s;
}

/* --index: the chosen test images. */
static void copy_indexed(const predict_args *a, predict_run *run,
                         int64_t sample) {
  const float *x = mxu_dataset_x(run->test);
  for (int i = 0; i < run->count; i++)
    memcpy(run->x + i * sample, x + a->indices.items[i] * sample,
           (size_t)sample * sizeof *x);
}

/* --image: each file decoded and resized to the model's input, then
 * rescaled as the training data was. Returns an exit code. */
static int load_images(const predict_args *a, predict_run *run,
                       int64_t sample) {
  mxu_shape in = mxu_model_input_shape(run->model);
  if (in.rank != 3 || (in.dims[2] != 1 && in.dims[2] != 3))
    return cli_usage_error("predict",
                           "--image: the model's input is not an image "
                           "(height, width, 1 or 3 channels)");
  for (int i = 0; i < run->count; i++) {
    float *x = run->x + i * sample;
    if (mxu_load_image_file(run->files[i], (int)in.dims[0], (int)in.dims[1],
                            (int)in.dims[2], x) != MXU_OK)
      return cli_runtime_error("predict");
    for (int64_t k = 0; a->rescale != 1.0f && k < sample; k++)
      x[k] *= a->rescale;
  }
  return CLI_OK;
}

/* Returns an exit code: the library's error, or out of memory. */
static int run_predict(const predict_args *a, predict_run *run) {
  if (prepare(a, run) != MXU_OK) return cli_runtime_error("predict");
  int n = run->count;
  mxu_shape shape = mxu_model_input_shape(run->model);
  int64_t sample = mxu_shape_count(&shape);
  run->x = malloc((size_t)(n * sample) * sizeof *run->x);
  run->out = malloc((size_t)n * (size_t)run->classes * sizeof *run->out);
  if (!run->x || !run->out) {
    fprintf(stderr, "mxu predict: out of memory\n");
    return CLI_RUNTIME;
  }
  if (a->images) {
    int code = load_images(a, run, sample);
    if (code != CLI_OK) return code;
  } else {
    copy_indexed(a, run, sample);
  }
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
  const char *name = data ? mxu_dataset_class_name(data, label) : NULL;
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
  for (int i = 0; i < run->count; i++) {
    float *row = run->out + (size_t)i * (size_t)run->classes;
    if (run->compile.from_logits) softmax(row, run->classes);
    if (a->images) {
      printf("image %s:\n", run->files[i]);
    } else {
      char truth[160];
      int64_t index = a->indices.items[i];
      int label = mxu_dataset_labels(run->test)[index];
      class_text(run->test, label, truth, sizeof truth);
      printf("test image %lld: true class %s\n", (long long)index, truth);
    }
    print_top(run, row, top);
  }
}

/* --input's outputs printed: a value a sample, its values, or the top
 * classes of each of its positions (the last axis: a sequence's steps'
 * classes). */
static void print_outputs(const predict_args *a, predict_run *run, int64_t n,
                          mxu_shape last) {
  int values = run->classes, classes = (int)last.dims[last.rank - 1];
  int positions = values / classes;
  for (int64_t i = 0; classes == 1 && i < n; i++) {
    printf("sample %lld:", (long long)i);
    for (int v = 0; v < values; v++)
      printf(" %g", (double)run->out[i * values + v]);
    printf("\n");
  }
  run->classes = classes; /* what print_top ranks */
  int top = a->top < classes ? a->top : classes;
  for (int64_t i = 0; classes > 1 && i < n; i++)
    for (int p = 0; p < positions; p++) {
      float *row = run->out + i * values + (int64_t)p * classes;
      if (run->compile.from_logits) softmax(row, classes);
      if (positions > 1)
        printf("sample %lld, position %d:\n", (long long)i, p);
      else
        printf("sample %lld:\n", (long long)i);
      print_top(run, row, top);
    }
}

/* Exactly one of --index (which needs --data), --image and --input;
 * splits the --image list into run->files. */
static int choose_inputs(const predict_args *a, predict_run *run) {
  if ((a->images != NULL) + (a->indices.count > 0) + (a->input != NULL) != 1)
    return cli_usage_error("predict",
                           "give one of --index I[,J...] (test images of "
                           "--data), --image FILE[,FILE...] and --input "
                           "FILE.npy");
  if (a->output && !a->input)
    return cli_usage_error("predict", "--output needs --input FILE.npy");
  if (a->input) return CLI_OK;
  if (!a->images) {
    if (!a->data)
      return cli_usage_error("predict", "--index needs --data DATA");
    run->count = a->indices.count;
    return CLI_OK;
  }
  for (const char *p = a->images; *p;) {
    size_t n = strcspn(p, ",");
    if (run->count == CLI_MAX_INDICES || n == 0 || n >= sizeof run->files[0])
      return cli_usage_error("predict",
                             "--image: '%s' must be up to %d file names "
                             "separated by commas",
                             a->images, CLI_MAX_INDICES);
    memcpy(run->files[run->count], p, n);
    run->files[run->count++][n] = 0;
    p += n + (p[n] == ',');
  }
  return CLI_OK;
}

/* Samples per compiled batch of --input: Keras' predict batch. */
#define ARRAY_BATCH 32

/* --input: every sample of an array through the model; the outputs to
 * --output, or printed. Returns an exit code. */
static mxu_status load_input(const predict_args *a, mxu_dataset **samples) {
  return cli_ends_with(a->input, ".csv")
             ? mxu_load_csv(a->input, a->label_column, samples)
             : cli_load_arrays(a->input, a->key, 0, samples);
}

/* The model; one whose input has a null dimension (any length) takes it
 * from --input's samples, or --data's. */
static mxu_status load_model(const predict_args *a, predict_run *run) {
  if (!a->input)
    return cli_load_model_for(a->model,
                              &(cli_data){a->data, NULL, NULL, 1.0f, 0},
                              MXU_TEST, &run->model, &run->compile);
  mxu_status s = cli_load_model(a->model, &run->model, &run->compile);
  mxu_dataset *samples = NULL;
  if (s != MXU_ERR_SHAPE) return s;
  /* Several inputs: an .npz of an array per input names their lengths. */
  if (load_input(a, &samples) != MXU_OK)
    return cli_ends_with(a->input, ".npz")
               ? cli_load_model_for(a->model,
                                    &(cli_data){a->input, NULL, NULL, 1.0f, 1},
                                    MXU_TEST, &run->model, &run->compile)
               : s;
  mxu_shape sample = mxu_dataset_shape(samples);
  mxu_dataset_free(samples);
  return cli_load_model_shaped(a->model, &sample, &run->model, &run->compile);
}

/* --input's samples for each of the model's inputs: a model of several
 * reads an .npz of an array per input, named after it (NAME_test or
 * NAME). */
static mxu_status load_inputs(const predict_args *a, const mxu_model *model,
                              mxu_dataset **samples) {
  int n = mxu_model_input_count(model);
  if (n == 1) {
    mxu_status s = load_input(a, samples);
    return s == MXU_OK
               ? mxu_dataset_reshape(*samples, mxu_model_input_shape(model))
               : s;
  }
  const char *names[CLI_MAX_INPUTS];
  for (int k = 0; k < n && k < CLI_MAX_INPUTS; k++)
    names[k] = mxu_model_input_name(model, k);
  const char *path = cli_ends_with(a->input, ".npz") ? a->input : NULL;
  mxu_status s = mxu_load_npz_named(path, MXU_TEST, names, n, 1, 0, samples);
  for (int k = 0; k < n && s == MXU_OK; k++)
    s = mxu_dataset_reshape_input(*samples, k,
                                  mxu_model_input_shape_of(model, k));
  return s;
}

/* The model's outputs for n samples of every input into outs[j], room
 * for output j's (the caller's). */
static mxu_status predict_all(predict_run *run, const mxu_dataset *samples,
                              int64_t n, float **outs) {
  const float *inputs[CLI_MAX_INPUTS];
  for (int k = 0; k < mxu_dataset_input_count(samples) && k < CLI_MAX_INPUTS;
       k++)
    inputs[k] = mxu_dataset_input(samples, k);
  return mxu_predict_outputs(run->model, inputs, n, outs);
}

/* --output: an .npy of the one output, (samples, the output's dims) as
 * Keras' predict returns it; an .npz of an array per output, named after
 * it, as np.savez of Keras' list. */
static mxu_status save_outputs(const predict_args *a, const mxu_model *model,
                               int64_t n, float *const *outs) {
  int outputs = mxu_model_output_count(model);
  int64_t dims[MXU_MAX_OUTPUTS][MXU_MAX_RANK + 1];
  const int64_t *shapes[MXU_MAX_OUTPUTS];
  const char *names[MXU_MAX_OUTPUTS];
  int ranks[MXU_MAX_OUTPUTS];
  for (int j = 0; j < outputs; j++) {
    mxu_shape shape = mxu_model_output_shape_of(model, j);
    dims[j][0] = n;
    for (int d = 0; d < shape.rank; d++) dims[j][d + 1] = shape.dims[d];
    shapes[j] = dims[j];
    ranks[j] = shape.rank + 1;
    names[j] = mxu_model_output_name(model, j);
  }
  if (!cli_ends_with(a->output, ".npz"))
    return mxu_save_npy(a->output, dims[0], ranks[0], outs[0]);
  return mxu_save_npz(a->output, outputs, names, shapes, ranks,
                      (const float *const *)outs);
}

static int predict_arrays(const predict_args *a, predict_run *run) {
  mxu_dataset *samples = NULL;
  mxu_status s = load_inputs(a, run->model, &samples);
  int outputs = mxu_model_output_count(run->model);
  if (s == MXU_OK && outputs > 1 && a->output &&
      !cli_ends_with(a->output, ".npz")) {
    mxu_dataset_free(samples);
    return cli_usage_error("predict",
                           "--output %s: the model has %d outputs; give an "
                           ".npz, which holds an array for each, named after "
                           "it ('%s', ...)",
                           a->output, outputs,
                           mxu_model_output_name(run->model, 0));
  }
  if (s == MXU_OK && a->rescale != 1.0f)
    mxu_dataset_rescale(samples, a->rescale);
  int64_t n = s == MXU_OK ? mxu_dataset_count(samples) : 0;
  if (s == MXU_OK) {
    run->compile.batch_size = n < ARRAY_BATCH ? (int)(n ? n : 1) : ARRAY_BATCH;
    s = mxu_compile(run->model, &run->compile);
  }
  if (s == MXU_OK) s = mxu_load_weights(run->model, a->weights);
  float *outs[MXU_MAX_OUTPUTS] = {0};
  for (int j = 0; s == MXU_OK && j < outputs; j++) {
    mxu_shape shape = mxu_model_output_shape_of(run->model, j);
    outs[j] = malloc((size_t)(n ? n : 1) * (size_t)mxu_shape_count(&shape) *
                     sizeof(float));
    if (outs[j]) continue;
    for (int k = 0; k < j; k++) free(outs[k]);
    mxu_dataset_free(samples);
    fprintf(stderr, "mxu predict: out of memory\n");
    return CLI_RUNTIME;
  }
  if (s == MXU_OK) s = predict_all(run, samples, n, outs);
  if (s == MXU_OK && a->output) s = save_outputs(a, run->model, n, outs);
  mxu_dataset_free(samples);
  for (int j = 0; s == MXU_OK && !a->output && j < outputs; j++) {
    mxu_shape shape = mxu_model_output_shape_of(run->model, j);
    if (outputs > 1)
      printf("output '%s':\n", mxu_model_output_name(run->model, j));
    run->out = outs[j];
    run->classes = (int)mxu_shape_count(&shape);
    print_outputs(a, run, n, shape);
  }
  run->out = NULL;
  if (s == MXU_OK && a->output) {
    printf("%lld predictions of ", (long long)n);
    for (int j = 0; j < outputs; j++) {
      mxu_shape shape = mxu_model_output_shape_of(run->model, j);
      printf(j ? ", (" : "(");
      for (int d = 0; d < shape.rank; d++)
        printf(d ? ", %lld" : "%lld", (long long)shape.dims[d]);
      printf(")");
    }
    printf(" written to %s\n", a->output);
  }
  for (int j = 0; j < outputs; j++) free(outs[j]);
  return s == MXU_OK ? CLI_OK : cli_runtime_error("predict");
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
  parsed = cli_model_weights("predict", a.model, &a.weights);
  if (parsed != CLI_OK) return parsed;

  predict_run run = {0};
  int code = choose_inputs(&a, &run);
  if (code != CLI_OK) return code;
  /* --image and --input need --data only for class names. */
  if (load_model(&a, &run) != MXU_OK ||
      (a.data && cli_load_split(&(cli_data){a.data, NULL, NULL, a.rescale, 0},
                                MXU_TEST, run.model, &run.test) != MXU_OK))
    code = cli_runtime_error("predict");
  else if (a.input)
    code = predict_arrays(&a, &run);
  else if ((a.images || (code = check_indices(&a, run.test)) == CLI_OK) &&
           (code = run_predict(&a, &run)) == CLI_OK)
    print_predictions(&a, &run);
  free(run.x);
  free(run.out);
  mxu_model_free(run.model);
  mxu_dataset_free(run.test);
  return code;
}
