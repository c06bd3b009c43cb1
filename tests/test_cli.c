/* test_cli.c — the mxu command as a user runs it: exit codes and messages
 * for bad command lines and bad files, --help, and a short real training
 * run on Fashion-MNIST whose report, weights, evaluation, predictions and
 * summary are checked. MXU_BIN is the built binary's path (CMake). */
#include "check.h"
#include "mxu.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdarg.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define temp_dir check_temp_dir

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  if (!f) return;
  fputs(text, f);
  fclose(f);
}

/* ---- running the binary ------------------------------------------------ */

/* run("train", "m.json", "--epochs", "3", NULL) */
#define run(...) check_run_bin(MXU_BIN, __VA_ARGS__)

/* The exit code and a piece of the text on stderr. */
#define EXPECT_RUN(r, want_code, needle)                                       \
  do {                                                                         \
    CHECK_MSG((r).code == (want_code), "exit %d, want %d; stderr: %s",         \
              (r).code, (want_code), (r).err);                                 \
    CHECK_MSG(has((r).err, needle), "stderr '%s' lacks '%s'", (r).err,         \
              (const char *)(needle));                                         \
  } while (0)

/* ---- model files ------------------------------------------------------- */

static const char *const fashion_json = "models/fashion_mnist.json";

/* The fashion model with 32 filters instead of 64, written by hand in
 * tf.keras 2.x form: the same layers, so only the shapes differ. */
static const char narrow_json[] =
    "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"sequential\", "
    "\"layers\": ["
    "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": "
    "[null, 28, 28, 1], \"dtype\": \"float32\", \"name\": \"input_1\"}},"
    "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"conv2d\", "
    "\"filters\": 32, \"kernel_size\": [3, 3], \"strides\": [1, 1], "
    "\"padding\": \"valid\", \"activation\": \"linear\", \"use_bias\": true}},"
    "{\"class_name\": \"MaxPooling2D\", \"config\": {\"name\": "
    "\"max_pooling2d\", \"pool_size\": [2, 2], \"strides\": [2, 2], "
    "\"padding\": \"valid\"}},"
    "{\"class_name\": \"Activation\", \"config\": {\"name\": \"activation\", "
    "\"activation\": \"relu\"}},"
    "{\"class_name\": \"Flatten\", \"config\": {\"name\": \"flatten\"}},"
    "{\"class_name\": \"Dense\", \"config\": {\"name\": \"dense\", \"units\": "
    "10, \"activation\": \"softmax\", \"use_bias\": true}}]}, "
    "\"keras_version\": \"2.6.0\", \"backend\": \"tensorflow\"}";

/* A layer class mxu does not have. */
static const char unknown_json[] =
    "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"sequential\", "
    "\"layers\": ["
    "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": "
    "[null, 28, 28, 28, 1], \"dtype\": \"float32\", \"name\": \"input_1\"}},"
    "{\"class_name\": \"LocallyConnected2D\", \"config\": {\"name\": "
    "\"local\", "
    "\"filters\": 8}}]}}";

/* ---- usage errors: exit 2 ---------------------------------------------- */

/* Weights files are Keras' .h5 or .weights.h5: another name is refused
 * before any data is read or any epoch is trained. */
static void weights_names(void) {
  result r = run("train", fashion_json, "--data", "fashion-mnist",
                 "--save-weights", "fashion.weights", NULL);
  EXPECT_RUN(r, 2,
             "mxu train: --save-weights: fashion.weights: unknown weights "
             "format; use a .h5 (tf.keras 2.x) or .weights.h5 (Keras 3) "
             "file name");
  CHECK(!has(r.out, "Epoch"));
  result_free(&r);
  r = run("evaluate", fashion_json, "--data", "fashion-mnist", "--weights",
          "w.bin", NULL);
  EXPECT_RUN(r, 2, "mxu evaluate: --weights: w.bin: unknown weights format");
  result_free(&r);
  /* A .keras file is read for its weights; this one is not there. */
  r = run("predict", fashion_json, "--data", "fashion-mnist", "--weights",
          "m.keras", "--index", "0", NULL);
  EXPECT_RUN(r, 1, "mxu predict: weights: m.keras: cannot open");
  result_free(&r);
}

static void usage_errors(void) {
  result r = run("train", fashion_json, "--data", "fashion-mnist", "--epoch",
                 "3", NULL);
  EXPECT_RUN(r, 2, "mxu train: unknown option '--epoch'");
  CHECK(has(r.err, "see mxu train --help"));
  result_free(&r);
  r = run("train", fashion_json, "--data", NULL);
  EXPECT_RUN(r, 2, "mxu train: --data needs a value");
  result_free(&r);
  r = run("train", fashion_json, "--data", "fashion-mnist", "--epochs", "abc",
          NULL);
  EXPECT_RUN(r, 2, "mxu train: --epochs: 'abc' is not a positive integer");
  CHECK(has(r.err, "see mxu train --help"));
  result_free(&r);
  r = run("train", fashion_json, "--data=fashion-mnist", "--epochs=0", NULL);
  EXPECT_RUN(r, 2, "--epochs: '0' is not a positive integer");
  result_free(&r);
  r = run("train", fashion_json, "--data", "x", "--learning-rate=-1", NULL);
  EXPECT_RUN(r, 2, "--learning-rate: '-1' is not a positive number");
  result_free(&r);
  r = run("train", fashion_json, "--data", "x", "--optimizer", "ftrl", NULL);
  EXPECT_RUN(r, 2, "--optimizer: 'ftrl' is not one of adam, sgd, rmsprop");
  result_free(&r);
  r = run("train", fashion_json, "--epochs", "2", NULL);
  EXPECT_RUN(r, 2, "mxu train: --data is required");
  result_free(&r);
  r = run("train", "--data", "fashion-mnist", NULL);
  EXPECT_RUN(r, 2, "mxu train: missing MODEL.json");
  result_free(&r);
  r = run("predict", fashion_json, "--data", "fashion-mnist", "--weights", "w",
          "--index", "1,,2", NULL);
  EXPECT_RUN(r, 2, "mxu predict: --index: '1,,2' is not a comma-separated");
  result_free(&r);
  r = run("fit", NULL);
  EXPECT_RUN(r, 2, "mxu: unknown command 'fit'");
  result_free(&r);
  /* Schedules read whole: trailing junk and overflowing numbers were
   * accepted (issue 21). */
  static const char *const bad_schedules[] = {
      "cosine:5:1e-5junk", "step:0.5:99999999999", "step:1e999:3",
      "exponential:0.9:1"};
  for (size_t i = 0; i < sizeof bad_schedules / sizeof *bad_schedules; i++) {
    r = run("train", fashion_json, "--data", "fashion-mnist", "--epochs", "1",
            "--steps-per-epoch", "1", "--lr-schedule", bad_schedules[i], NULL);
    EXPECT_RUN(r, 2, "--lr-schedule: '");
    result_free(&r);
  }
  weights_names();
}

/* ---- help -------------------------------------------------------------- */

static void expect_help(const char *command, const char *const *flags) {
  result r = run(command, "--help", NULL);
  CHECK_MSG(r.code == 0, "mxu %s --help: exit %d", command, r.code);
  for (int i = 0; flags[i]; i++)
    CHECK_MSG(has(r.out, flags[i]), "mxu %s --help lacks %s", command,
              flags[i]);
  result_free(&r);
}

static void help(void) {
  /* The longest help whole, to its last words. */
  const char *const train[] = {"usage: mxu train MODEL.json",
                               "the model file's, else accuracy)",
                               "--weighted-metric",
                               "--data",
                               "--epochs",
                               "--batch-size",
                               "--steps-per-epoch",
                               "--validation-freq",
                               "--optimizer",
                               "--learning-rate",
                               "--loss",
                               "--rescale",
                               "--seed",
                               "--verbose",
                               "--save-weights",
                               "--report",
                               NULL};
  const char *const evaluate[] = {"--weights", "--data",   "--batch-size",
                                  "--rescale", "--report", NULL};
  const char *const predict[] = {"--weights", "--data",    "--index",
                                 "--top",     "--rescale", NULL};
  const char *const summary[] = {"usage: mxu summary MODEL.json", NULL};
  expect_help("train", train);
  expect_help("evaluate", evaluate);
  expect_help("predict", predict);
  expect_help("summary", summary);
  const char *const top[] = {"train", "evaluate", "predict", "summary", NULL};
  expect_help("--help", top);
  result r = run("--version", NULL);
  CHECK(r.code == 0 && has(r.out, "mxu 0."));
  result_free(&r);
}

/* ---- runtime errors: exit 1 -------------------------------------------- */

static void runtime_errors(void) {
  const char *missing = temp_path("no-such-model.json");
  result r = run("train", missing, "--data", "fashion-mnist", NULL);
  EXPECT_RUN(r, 1, missing);
  CHECK(has(r.err, "mxu train: "));
  result_free(&r);

  const char *malformed = temp_path("malformed.json");
  write_text(malformed, "{\"class_name\": \"Sequential\", \"config\": {");
  r = run("train", malformed, "--data", "fashion-mnist", NULL);
  EXPECT_RUN(r, 1, "mxu train: ");
  CHECK(has(r.err, "malformed.json"));
  result_free(&r);

  const char *unknown = temp_path("local.json");
  write_text(unknown, unknown_json);
  r = run("summary", unknown, NULL);
  EXPECT_RUN(r, 1, "layer class LocallyConnected2D is not supported");
  result_free(&r);

  r = run("train", fashion_json, "--data", temp_dir, NULL);
  EXPECT_RUN(r, 1, "holds none of the expected files");
  result_free(&r);
}

/* A compile_config mxu cannot follow: refused, unless --optimizer (or
 * --loss, --metric) stands for it. */
static void compile_overridden(void) {
  mxu_model *m = NULL;
  mxu_compile_config c = mxu_compile_defaults();
  CHECK_OK(mxu_model_load_json(fashion_json, &m, &c, NULL));
  c.batch_size = 10;
  if (m) CHECK_OK(mxu_compile(m, &c));
  char *text = NULL;
  if (m) CHECK_OK(mxu_model_to_json(m, 1, &text));
  char *adam = text ? strstr(text, "\"Adam\"") : NULL;
  CHECK(adam != NULL);
  if (adam) memcpy(adam, "\"Ftrl\"", 6);
  const char *path = temp_path("ftrl.json");
  if (text) write_text(path, text);
  free(text);
  mxu_model_free(m);
  result r = run("train", path, "--data", "fashion-mnist", "--epochs", "1",
                 "--steps-per-epoch", "2", "--batch-size", "10", NULL);
  EXPECT_RUN(r, 1, "optimizer 'Ftrl' is not supported");
  result_free(&r);
  r = run("train", path, "--data", "fashion-mnist", "--epochs", "1",
          "--steps-per-epoch", "2", "--batch-size", "10", "--optimizer", "sgd",
          "--verbose", "0", NULL);
  EXPECT_RUN(r, 0, "stand for the model file's compile settings");
  CHECK(has(r.out, "test loss"));
  result_free(&r);
}

/* --class-weight: every class weighing 1 is no weight at all (the same
 * figures, bit for bit); a weight on one class changes the run; too few
 * weights and a negative one are refused. */
static void class_weight(void) {
  const char *base[] = {"train",
                        fashion_json,
                        "--data",
                        "fashion-mnist",
                        "--epochs",
                        "1",
                        "--steps-per-epoch",
                        "3",
                        "--batch-size",
                        "100",
                        "--verbose",
                        "0"};
  char *printed[3] = {NULL};
  const char *weights[3] = {NULL, "1,1,1,1,1,1,1,1,1,1", "1,1,1,1,1,1,4,1,1,1"};
  for (int i = 0; i < 3; i++) {
    result r =
        weights[i]
            ? run(base[0], base[1], base[2], base[3], base[4], base[5], base[6],
                  base[7], base[8], base[9], base[10], base[11],
                  "--class-weight", weights[i], NULL)
            : run(base[0], base[1], base[2], base[3], base[4], base[5], base[6],
                  base[7], base[8], base[9], base[10], base[11], NULL);
    CHECK_MSG(r.code == 0, "--class-weight %s: exit %d",
              weights[i] ? weights[i] : "(none)", r.code);
    const char *at = r.out ? strstr(r.out, "test loss") : NULL;
    printed[i] = at ? strdup(at) : NULL;
    result_free(&r);
  }
  CHECK(printed[0] && printed[1] && printed[2]);
  if (printed[0] && printed[1] && printed[2]) {
    CHECK_MSG(strcmp(printed[0], printed[1]) == 0, "%s vs %s", printed[0],
              printed[1]);
    CHECK_MSG(strcmp(printed[0], printed[2]) != 0, "%s", printed[2]);
  }
  for (int i = 0; i < 3; i++) free(printed[i]);
  result r = run("train", fashion_json, "--data", "fashion-mnist", "--epochs",
                 "1", "--class-weight", "1,2", NULL);
  EXPECT_RUN(r, 1, "class_weight has 2 weights but the data has 10 classes");
  result_free(&r);
  r = run("train", fashion_json, "--data", "fashion-mnist", "--class-weight",
          "1,-2", NULL);
  EXPECT_RUN(r, 2, "numbers >= 0");
  result_free(&r);
}

/* The file of the real run for a model with 32 filters instead of 64. */
static void weights_for_another_model(const char *weights) {
  const char *narrow = temp_path("narrow.json");
  write_text(narrow, narrow_json);
  result r = run("evaluate", narrow, "--weights", weights, "--data",
                 "fashion-mnist", NULL);
  EXPECT_RUN(r, 1,
             "layer 'conv2d' (position 1): kernel has shape (3, 3, 1, 64) "
             "in the file but (3, 3, 1, 32) in the model");
  result_free(&r);
}

/* ---- a real run -------------------------------------------------------- */

static void check_evaluate(const char *weights, double want);

/* The run's weights in tf.keras 2.x's layout: the library converts, the
 * command evaluates them to the same accuracy. */
static void legacy_layout(const char *keras3, double accuracy) {
  mxu_model *model = NULL;
  mxu_compile_config c = mxu_compile_defaults();
  CHECK_OK(mxu_model_load_json(fashion_json, &model, NULL, NULL));
  c.batch_size = 8;
  CHECK_OK(mxu_compile(model, &c));
  const char *legacy = temp_path("fashion.h5");
  CHECK_OK(mxu_load_weights(model, keras3));
  CHECK_OK(mxu_save_weights(model, legacy));
  mxu_model_free(model);
  check_evaluate(legacy, accuracy);
}

static double number(const cJSON *object, const char *key) {
  const cJSON *item = cJSON_GetObjectItemCaseSensitive(object, key);
  CHECK_MSG(cJSON_IsNumber(item), "report lacks the number '%s'", key);
  return cJSON_IsNumber(item) ? item->valuedouble : NAN;
}

/* The accuracy's key in an epoch: "accuracy" or another Keras name. */
static const char *metric_key(const cJSON *epoch) {
  for (const cJSON *item = epoch ? epoch->child : NULL; item; item = item->next)
    if (has(item->string, "accuracy") && strncmp(item->string, "val_", 4))
      return item->string;
  return "accuracy";
}

static cJSON *load_report(const char *path) {
  char *text = check_slurp(path);
  CHECK_MSG(text != NULL, "no report at %s", path);
  cJSON *root = text ? cJSON_Parse(text) : NULL;
  CHECK_MSG(root != NULL, "the report is not JSON: %s", text);
  free(text);
  return root;
}

static void check_train_report(const cJSON *root, double *accuracy) {
  const cJSON *epochs = cJSON_GetObjectItemCaseSensitive(root, "epochs");
  CHECK(cJSON_IsArray(epochs) && cJSON_GetArraySize(epochs) == 1);
  const cJSON *first = cJSON_GetArrayItem(epochs, 0);
  const char *metric = metric_key(first);
  char val_metric[96];
  snprintf(val_metric, sizeof val_metric, "val_%s", metric);
  CHECK(number(first, "epoch") == 1);
  CHECK(number(first, "loss") > 0);
  CHECK(number(first, metric) > 0.5);
  CHECK(number(first, "val_loss") > 0);
  CHECK(number(first, val_metric) > 0.7);
  CHECK(number(first, "seconds") > 0);
  const cJSON *test = cJSON_GetObjectItemCaseSensitive(root, "test");
  *accuracy = number(test, metric);
  CHECK(number(test, "loss") > 0);
  CHECK_MSG(*accuracy > 0.7, "test accuracy %.4f", *accuracy);
  CHECK(number(root, "train_images_per_second") > 0);
  CHECK(number(root, "wall_seconds") > 0);
  const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
  const cJSON *data = cJSON_GetObjectItemCaseSensitive(root, "data");
  CHECK(cJSON_IsString(model) && !strcmp(model->valuestring, fashion_json));
  CHECK(cJSON_IsString(data) && !strcmp(data->valuestring, "fashion-mnist"));
  printf("mxu train: test accuracy %.4f, %.0f images/s, %.1f s\n", *accuracy,
         number(root, "train_images_per_second"), number(root, "wall_seconds"));
}

static void check_evaluate(const char *weights, double want) {
  const char *path = temp_path("evaluate.json");
  result r =
      run("evaluate", fashion_json, "--weights", weights, "--data",
          "fashion-mnist", "--batch-size", "1000", "--report", path, NULL);
  CHECK_MSG(r.code == 0, "mxu evaluate: exit %d: %s", r.code, r.err);
  CHECK(has(r.out, "test loss ") && has(r.out, " - test accuracy "));
  result_free(&r);
  cJSON *root = load_report(path);
  const cJSON *test = cJSON_GetObjectItemCaseSensitive(root, "test");
  const char *metric = metric_key(test);
  CHECK_MSG(number(test, metric) == want, "evaluate %.6f, train %.6f",
            number(test, metric), want);
  cJSON_Delete(root);
  /* A report to /dev/stdout (a link to the output pipe) is written into
   * it, in place, not renamed over it. */
  r = run("evaluate", fashion_json, "--weights", weights, "--data",
          "fashion-mnist", "--batch-size", "1000", "--report", "/dev/stdout",
          NULL);
  CHECK_MSG(r.code == 0 && has(r.out, "\"test\":"),
            "evaluate --report /dev/stdout: exit %d: %s", r.code, r.err);
  result_free(&r);
}

static void check_predict(const char *weights) {
  result r = run("predict", fashion_json, "--weights", weights, "--data",
                 "fashion-mnist", "--index", "0,1", "--top", "3", NULL);
  CHECK_MSG(r.code == 0, "mxu predict: exit %d: %s", r.code, r.err);
  CHECK(has(r.out, "test image 0: true class Ankle boot"));
  CHECK(has(r.out, "test image 1: true class Pullover"));
  CHECK(has(r.out, "  1. ") && has(r.out, "  3. ") && !has(r.out, "  4. "));
  printf("%s", r.out ? r.out : "");
  result_free(&r);
}

static void real_run(void) {
  const char *report = temp_path("report.json");
  const char *weights = temp_path("fashion.weights.h5");
  result r = run("train", fashion_json, "--data", "fashion-mnist", "--epochs",
                 "1", "--steps-per-epoch", "60", "--verbose", "2", "--report",
                 report, "--save-weights", weights, NULL);
  CHECK_MSG(r.code == 0, "mxu train: exit %d: %s", r.code, r.err);
  CHECK(has(r.out, "60/60") && has(r.out, "test accuracy"));
  result_free(&r);
  cJSON *root = load_report(report);
  double accuracy = NAN;
  if (root) check_train_report(root, &accuracy);
  cJSON_Delete(root);
  check_evaluate(weights, accuracy);
  check_predict(weights);
  weights_for_another_model(weights);
  legacy_layout(weights, accuracy);

  r = run("summary", fashion_json, NULL);
  CHECK(r.code == 0 && has(r.out, "Total params: 108,810"));
  result_free(&r);
}

/* summary --save-json writes a model that reads back to the same summary,
 * in either JSON form; a bad --format is a usage error. */
static void summary_save_json(void) {
  const char *keras3 = temp_path("cifar10.keras3.json");
  const char *keras2 = temp_path("cifar10.tf_keras.json");
  result original = run("summary", "models/cifar10.json", NULL);
  result a = run("summary", "models/cifar10.json", "--save-json", keras3,
                 "--format", "keras3", NULL);
  result b = run("summary", keras3, "--save-json", keras2, NULL);
  result c = run("summary", keras2, NULL);
  CHECK(original.code == 0 && a.code == 0 && b.code == 0 && c.code == 0);
  CHECK(has(original.out, "Total params: 1,676,982"));
  CHECK(original.out && b.out && c.out && strcmp(original.out, b.out) == 0 &&
        strcmp(original.out, c.out) == 0);
  char *text3 = check_slurp(keras3), *text2 = check_slurp(keras2);
  CHECK(text3 && has(text3, "\"batch_shape\"") && has(text3, "keras.layers"));
  CHECK(text2 && has(text2, "\"batch_input_shape\"") &&
        !has(text2, "keras.layers"));
  free(text3);
  free(text2);
  result bad = run("summary", "models/cifar10.json", "--format", "onnx", NULL);
  CHECK(bad.code == 2 && has(bad.err, "--format"));
  result_free(&original);
  result_free(&a);
  result_free(&b);
  result_free(&c);
  result_free(&bad);
}

/* A sequence model of any length (Keras' Input(shape=(None, 28))): summary
 * refuses it for want of a length; train, evaluate and predict take the
 * data's (mnist_small.npz's 28 rows of 28 pixels). */
static void any_length(void) {
  const char *model = temp_path("any_length.json");
  write_text(model, "{\"class_name\": \"Sequential\", \"config\": {\"name\": "
                    "\"s\", \"layers\": [{\"class_name\": \"InputLayer\", "
                    "\"config\": {\"batch_input_shape\": [null, null, 28], "
                    "\"name\": \"rows\"}}, {\"class_name\": \"Rescaling\", "
                    "\"config\": {\"name\": \"r\", \"scale\": 0.00392156862}}, "
                    "{\"class_name\": \"GRU\", \"config\": {\"name\": \"g\", "
                    "\"units\": 16}}, {\"class_name\": \"Dense\", \"config\": "
                    "{\"name\": \"d\", \"units\": 10, \"activation\": "
                    "\"softmax\"}}]}}");
  const char *data = "tests/npz/mnist_small.npz";
  const char *weights = temp_path("any_length.weights.h5");
  result r = run("summary", model, NULL);
  EXPECT_RUN(r, 1, "dimension 1 is null (any length)");
  result_free(&r);
  r = run("train", model, "--data", data, "--epochs", "2", "--batch-size", "50",
          "--save-weights", weights, NULL);
  EXPECT_RUN(r, 0, "");
  CHECK_MSG(has(r.out, "test accuracy"), "%s", r.out);
  result_free(&r);
  r = run("evaluate", model, "--data", data, "--weights", weights, NULL);
  EXPECT_RUN(r, 0, "");
  CHECK_MSG(has(r.out, "test accuracy"), "%s", r.out);
  result_free(&r);
  r = run("predict", model, "--weights", weights, "--input", data, NULL);
  EXPECT_RUN(r, 0, "");
  CHECK_MSG(has(r.out, "sample 499:"), "%s", r.out);
  result_free(&r);
}

int main(void) {
  if (!check_temp_make("test_cli")) {
    perror("mkdtemp");
    return 1;
  }
  usage_errors();
  help();
  runtime_errors();
  compile_overridden();
  class_weight();
  real_run();
  summary_save_json();
  any_length();
  check_remove_tree(temp_dir);
  return check_report("test_cli");
}
