/* test_bench.c — mxu bench as a user runs it on a tiny model (exit codes,
 * the report's keys and how its numbers relate, the profile rows), the
 * FLOP count against hand-computed ones, and the profiler through the
 * library. Speed is never asserted. MXU_BIN is the built binary (CMake). */
#include "check.h"
#include "mxu.h"

#include <cjson/cJSON.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

extern char **environ;

/* Runs the NULL-terminated arguments with args[0] replaced by MXU_BIN. */
static result run_mxu(char **args) {
  args[0] = (char *)MXU_BIN;
  return run_argv(args);
}

/* ---- models ------------------------------------------------------------- */

/* (8) -> Dense(5, relu) -> Dense(3, softmax). */
static mxu_model *dense_model(void) {
  mxu_model *m = mxu_sequential("dense_only");
  int64_t dims[1] = {8};
  CHECK_OK(mxu_add_input(m, NULL, mxu_shape_make(1, dims)));
  mxu_dense_config d = mxu_dense_defaults(5);
  d.activation = MXU_RELU;
  CHECK_OK(mxu_add_dense(m, &d));
  d = mxu_dense_defaults(3);
  d.activation = MXU_SOFTMAX;
  CHECK_OK(mxu_add_dense(m, &d));
  return m;
}

/* (h, w, c) -> Conv2D(filters, 3x3, valid, relu) -> MaxPooling2D(2) ->
 * Flatten -> Dense(classes, softmax). */
static mxu_model *conv_model(int64_t h, int64_t w, int64_t c, int filters,
                             int classes) {
  mxu_model *m = mxu_sequential("small_conv");
  int64_t dims[3] = {h, w, c};
  CHECK_OK(mxu_add_input(m, NULL, mxu_shape_make(3, dims)));
  mxu_conv2d_config conv = mxu_conv2d_defaults(filters, 3, 3);
  conv.activation = MXU_RELU;
  CHECK_OK(mxu_add_conv2d(m, &conv));
  mxu_pool2d_config pool = mxu_pool2d_defaults(2, 2);
  CHECK_OK(mxu_add_max_pooling2d(m, &pool));
  CHECK_OK(mxu_add_flatten(m, NULL));
  mxu_dense_config d = mxu_dense_defaults(classes);
  d.activation = MXU_SOFTMAX;
  CHECK_OK(mxu_add_dense(m, &d));
  return m;
}

/* (6, 6, 2) -> BatchNormalization -> Conv2D(3, 3x3, relu) ->
 * AveragePooling2D(2) -> Dropout(0.5) -> Flatten -> Dense(2) ->
 * Activation(softmax): every other layer class. */
static mxu_model *mixed_model(int synchronized) {
  mxu_model *m = mxu_sequential("mixed");
  int64_t dims[3] = {6, 6, 2};
  CHECK_OK(mxu_add_input(m, NULL, mxu_shape_make(3, dims)));
  mxu_batchnorm_config bn = mxu_batchnorm_defaults();
  bn.synchronized = synchronized;
  CHECK_OK(mxu_add_batch_normalization(m, &bn));
  mxu_conv2d_config conv = mxu_conv2d_defaults(3, 3, 3);
  conv.activation = MXU_RELU;
  CHECK_OK(mxu_add_conv2d(m, &conv));
  mxu_pool2d_config pool = mxu_pool2d_defaults(2, 2);
  CHECK_OK(mxu_add_average_pooling2d(m, &pool));
  CHECK_OK(mxu_add_dropout(m, NULL, 0.5f));
  CHECK_OK(mxu_add_flatten(m, NULL));
  mxu_dense_config d = mxu_dense_defaults(2);
  CHECK_OK(mxu_add_dense(m, &d));
  CHECK_OK(mxu_add_activation(m, NULL, MXU_SOFTMAX));
  return m;
}

static void compile(mxu_model *m, int batch, int replicas,
                    mxu_optimizer_config optimizer) {
  mxu_compile_config c = mxu_compile_defaults();
  c.batch_size = batch;
  c.replicas = replicas;
  c.threads = 1;
  c.optimizer = optimizer;
  CHECK_OK(mxu_compile(m, &c));
}

/* ---- FLOPs -------------------------------------------------------------
 * By hand, per sample, with flops.c's costs: a multiply-add 2, relu 1
 * each way, softmax 5 forward, bias an add forward and one backward, the
 * fused softmax-CE loss 7 per class + 1, Adam 12 per weight per step and
 * the all-reduce replicas - 1 adds per weight per step, both over the
 * global batch. The first layer computes no data gradient. */

static void test_dense_flops(void) {
  /* dense   (first): 2*8*5 forward + the same for dW, bias 2*5, relu 2*5
   *                  = 80 + 80 + 10 + 10 = 180
   * dense_1:         2*5*3 x 3 (forward, dW, dx) + bias 2*3 + softmax
   *                  forward 5*3 = 90 + 6 + 15 = 111
   * loss:            7*3 + 1 = 22
   * weights:         8*5 + 5 + 5*3 + 3 = 63 */
  double layers = 180 + 111 + 22;
  mxu_model *m = dense_model();
  /* Before compile: Keras' default batch 32 and Adam. */
  CHECK_NEAR(mxu_model_train_flops(m), layers + 63 * 12 / 32.0, 1e-9);
  compile(m, 4, 1, mxu_adam(1e-3f));
  CHECK_NEAR(mxu_model_train_flops(m), layers + 63 * 12 / 4.0, 1e-9);
  mxu_model_free(m);

  m = dense_model();
  compile(m, 4, 2, mxu_adam(1e-3f));
  CHECK_NEAR(mxu_model_train_flops(m), layers + 63 * (1 + 12) / 4.0, 1e-9);
  mxu_model_free(m);

  m = dense_model();
  compile(m, 4, 1, mxu_sgd(0.01f, 0.0f, 0));
  CHECK_NEAR(mxu_model_train_flops(m), layers + 63 * 2 / 4.0, 1e-9);
  mxu_model_free(m);
  CHECK(mxu_model_train_flops(NULL) == 0.0);
}

static void test_conv_flops(void) {
  /* conv2d (first): 4x4x3 outputs of 3x3x2 taps: 2*48*18 = 1728 forward,
   *                 the same for dW; bias 2*48; relu 2*48 = 3648
   * max_pooling2d:  2x2x3 outputs: 3 comparisons each, 1 add back = 48
   * flatten:        0
   * dense:          2*12*2 x 3 + bias 2*2 + softmax 5*2 = 158
   * loss:           7*2 + 1 = 15
   * weights:        3*3*2*3 + 3 + 12*2 + 2 = 83, Adam over batch 4 */
  mxu_model *m = conv_model(6, 6, 2, 3, 2);
  compile(m, 4, 1, mxu_adam(1e-3f));
  CHECK_NEAR(mxu_model_train_flops(m), 3648 + 48 + 158 + 15 + 83 * 12 / 4.0,
             1e-9);
  mxu_model_free(m);

  /* batch_normalization (first): 72 elements x (8 + 9), moving statistics
   *   2 channels x (2 x 1 replica + 8) per step over batch 4 = 1229
   * conv2d: now with dx, 1728 x 3 + 96 + 96 = 5376
   * average_pooling2d: 12 outputs x (4 forward + 5 backward) = 108
   * dropout: 12 x (2 + 1) = 36
   * dense (linear): 48 x 3 + 4 = 148
   * activation (softmax, fused with the loss): 5 x 2 = 10
   * loss 15; weights 4 + 57 + 26 = 87 */
  m = mixed_model(0);
  compile(m, 4, 1, mxu_adam(1e-3f));
  CHECK_NEAR(mxu_model_train_flops(m),
             1229 + 5376 + 108 + 36 + 148 + 10 + 15 + 87 * 12 / 4.0, 1e-9);
  mxu_model_free(m);
}

/* ---- the profiler through the library ----------------------------------- */

static mxu_dataset *random_data(int64_t h, int64_t w, int64_t c, int classes,
                                int64_t count) {
  int64_t dims[3] = {h, w, c}, values = count * h * w * c;
  float *x = malloc((size_t)values * sizeof *x);
  int32_t *labels = malloc((size_t)count * sizeof *labels);
  for (int64_t i = 0; i < values; i++) x[i] = (float)(i * 37 % 256) / 255.0f;
  for (int64_t i = 0; i < count; i++) labels[i] = (int32_t)(i % classes);
  mxu_dataset *data = NULL;
  CHECK_OK(mxu_dataset_from_arrays(x, labels, count, mxu_shape_make(3, dims),
                                   classes, &data));
  free(x);
  free(labels);
  return data;
}

static void fit_steps(mxu_model *m, const mxu_dataset *data, int batch,
                      int steps) {
  mxu_fit_config fit = mxu_fit_defaults();
  fit.batch_size = batch;
  fit.steps_per_epoch = steps;
  fit.verbose = 0;
  CHECK_OK(mxu_fit(m, data, &fit, NULL));
}

/* Steps counted, every layer timed forward and backward (>= 0: a clock
 * may read the same twice), nothing added while off. */
static void check_profile(mxu_model *m, const mxu_dataset *data, int batch) {
  EXPECT_FAIL(mxu_profile_enable(NULL, 1), MXU_ERR_ARG, NULL);
  int n = mxu_model_layer_count(m);
  mxu_layer_profile p[16];
  CHECK(mxu_profile_read(m, p, 16) == n);
  CHECK(p[0].steps == 0 && p[0].forward_seconds == 0.0);
  CHECK_OK(mxu_profile_enable(m, 1));
  fit_steps(m, data, batch, 3);
  CHECK_OK(mxu_profile_enable(m, 0));
  CHECK(mxu_profile_read(m, p, 16) == n);
  double total = 0;
  for (int i = 0; i < n; i++) {
    CHECK_MSG(p[i].steps == 3, "layer %d: %lld steps", i,
              (long long)p[i].steps);
    CHECK(p[i].forward_seconds >= 0 && p[i].backward_seconds >= 0);
    CHECK(strcmp(p[i].name, mxu_model_layer_name(m, i)) == 0);
    total += p[i].forward_seconds + p[i].backward_seconds;
  }
  CHECK(total > 0);
  fit_steps(m, data, batch, 2);
  mxu_layer_profile after[16];
  mxu_profile_read(m, after, 16);
  CHECK(after[0].steps == 3 &&
        after[0].forward_seconds == p[0].forward_seconds);
  /* Enabling again starts from zero. */
  CHECK_OK(mxu_profile_enable(m, 1));
  mxu_profile_read(m, after, 16);
  CHECK(after[0].steps == 0 && after[0].backward_seconds == 0.0);
}

static void test_profile(void) {
  mxu_model *m = mixed_model(0);
  EXPECT_FAIL(mxu_profile_enable(m, 1), MXU_ERR_ARG, "compile");
  compile(m, 4, 2, mxu_adam(1e-3f));
  mxu_dataset *data = random_data(6, 6, 2, 2, 16);
  check_profile(m, data, 4);
  mxu_model_free(m);
  /* Synchronized batch norm runs the layer-by-layer path. */
  m = mixed_model(1);
  compile(m, 4, 2, mxu_adam(1e-3f));
  check_profile(m, data, 4);
  mxu_model_free(m);
  mxu_dataset_free(data);
}

/* ---- mxu bench ---------------------------------------------------------- */

static double number(const cJSON *root, const char *key) {
  const cJSON *item = cJSON_GetObjectItemCaseSensitive(root, key);
  CHECK_MSG(cJSON_IsNumber(item), "report key %s", key);
  return cJSON_IsNumber(item) ? item->valuedouble : NAN;
}

static const char *string(const cJSON *root, const char *key) {
  const char *s =
      cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(root, key));
  CHECK_MSG(s && *s, "report key %s", key);
  return s ? s : "";
}

static void check_rows(const cJSON *rows, const mxu_model *m) {
  int n = mxu_model_layer_count(m);
  CHECK(cJSON_GetArraySize(rows) == n);
  double shares = 0;
  for (int i = 0; i < n && i < cJSON_GetArraySize(rows); i++) {
    const cJSON *row = cJSON_GetArrayItem(rows, i);
    CHECK(strcmp(string(row, "name"), mxu_model_layer_name(m, i)) == 0);
    string(row, "class");
    CHECK(number(row, "forward_ms") >= 0 && number(row, "backward_ms") >= 0);
    shares += number(row, "share");
  }
  CHECK_NEAR(shares, 1.0, 1e-9);
}

/* The numbers agree with each other and with the library's FLOP count. */
static void check_bench_report(const cJSON *r, const mxu_model *m) {
  double ips = number(r, "images_per_second"), ms = number(r, "ms_per_step");
  double g = number(r, "gflops"), peak = number(r, "peak_gflops");
  double flops = number(r, "train_flops_per_image");
  CHECK(ips > 0 && ms > 0 && g > 0 && peak > 0 && flops > 0);
  CHECK(number(r, "batch_size") == 8 && number(r, "replicas") == 2);
  CHECK(number(r, "threads") == 1);
  CHECK(strcmp(string(r, "precision"), "float32") == 0);
  CHECK_NEAR(ips * ms / 1000.0, 8.0, 1e-9);
  CHECK_NEAR(number(r, "peak_fraction"), g / peak, 1e-12);
  CHECK_NEAR(g, flops * ips / 1e9, 1e-9 * g);
  CHECK_NEAR(flops, mxu_model_train_flops(m), 1e-9 * flops);
  const cJSON *repeats = cJSON_GetObjectItemCaseSensitive(r, "repeats");
  CHECK(cJSON_GetArraySize(repeats) == 2);
  for (int i = 0; i < cJSON_GetArraySize(repeats); i++)
    CHECK(cJSON_GetArrayItem(repeats, i)->valuedouble > 0);
  string(r, "model");
  string(r, "cpu");
  string(r, "commit");
  check_rows(cJSON_GetObjectItemCaseSensitive(r, "profile"), m);
}

static void test_bench_command(void) {
  mxu_model *m = conv_model(8, 8, 1, 4, 10);
  const char *json = temp_path("tiny.json"), *report = temp_path("r.json");
  CHECK_OK(mxu_model_save_json(m, json, 0));
  char *args[] = {
      "mxu", "bench",     (char *)json, "--batch-size", "8", "--replicas",
      "2",   "--threads", "1",          "--steps",      "2", "--repeats",
      "2",   "--profile", "--report",   (char *)report, NULL};
  result r = run_mxu(args);
  CHECK_MSG(r.code == 0, "exit %d: %s", r.code, r.err);
  CHECK(has(r.out, "median") && has(r.out, "GFLOP/s") && has(r.out, "peak"));
  CHECK(has(r.out, "conv2d") && has(r.out, "max_pooling2d"));
  result_free(&r);
  char *text = check_slurp(report);
  cJSON *root = cJSON_Parse(text);
  CHECK_MSG(root != NULL, "report %s: %s", report, text ? text : "missing");
  compile(m, 8, 2, mxu_adam(1e-3f)); /* as bench compiled it */
  if (root) check_bench_report(root, m);
  cJSON_Delete(root);
  free(text);

  /* mixed_bfloat16 runs (float32 with a notice where the CPU lacks
   * AVX512_BF16) and the report says what was asked. */
  char *bf16[] = {"mxu",
                  "bench",
                  (char *)json,
                  "--batch-size",
                  "8",
                  "--steps",
                  "1",
                  "--repeats",
                  "1",
                  "--precision",
                  "mixed_bfloat16",
                  "--report",
                  (char *)report,
                  NULL};
  r = run_mxu(bf16);
  CHECK_MSG(r.code == 0, "exit %d: %s", r.code, r.err);
  result_free(&r);
  text = check_slurp(report);
  CHECK_MSG(has(text, "\"precision\":\t\"mixed_bfloat16\"") ||
                has(text, "\"precision\": \"mixed_bfloat16\"") ||
                has(text, "\"precision\":\"mixed_bfloat16\""),
            "%s", text ? text : "no report");
  free(text);

  /* A class a pixel (the sparse loss over the output's positions): the
   * synthetic data gives a label to each. */
  mxu_model *seg = mxu_sequential("segment");
  int64_t dims[3] = {8, 8, 1};
  CHECK_OK(mxu_add_input(seg, NULL, mxu_shape_make(3, dims)));
  mxu_conv2d_config conv = mxu_conv2d_defaults(3, 3, 3);
  conv.padding = MXU_SAME;
  conv.activation = MXU_SOFTMAX;
  CHECK_OK(mxu_add_conv2d(seg, &conv));
  const char *seg_json = temp_path("segment.json");
  CHECK_OK(mxu_model_save_json(seg, seg_json, 0));
  char *pixels[] = {"mxu",
                    "bench",
                    (char *)seg_json,
                    "--batch-size",
                    "4",
                    "--steps",
                    "1",
                    "--repeats",
                    "1",
                    NULL};
  r = run_mxu(pixels);
  CHECK_MSG(r.code == 0 && has(r.out, "median"), "exit %d: %s", r.code, r.err);
  result_free(&r);
  mxu_model_free(seg);

  char *bad[] = {"mxu", "bench",      (char *)json, "--batch-size",
                 "9",   "--replicas", "2",          NULL};
  r = run_mxu(bad);
  CHECK(r.code == 2 && has(r.err, "--replicas"));
  result_free(&r);
  mxu_model_free(m);
}

int main(void) {
  if (!check_temp_make("bench")) return 1;
  test_dense_flops();
  test_conv_flops();
  test_profile();
  test_bench_command();
  int failed = check_report("test_bench");
  if (!failed) check_remove_tree(check_temp_dir);
  return failed;
}
