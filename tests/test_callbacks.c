/* test_callbacks.c — the built-in callbacks against Keras' semantics: hooks
 * fed hand-made logs for exact sequences (when EarlyStopping stops, the
 * rates ReduceLROnPlateau and the schedules set, the CSV text, checkpoint
 * file names), and real fits for what the callbacks leave behind (history,
 * weights, files read back, TensorBoard events read by tests/tb_read.py). */
#include "check.h"
#include "model/model.h"
#include "train/callbacks.h"

#include <fcntl.h>
#include <sys/stat.h>

#define SIDE 4
#define CLASSES 3
#define SAMPLES 48
#define BATCH 8
#define READER "/usr/bin/python3 -I tests/tb_read.py"

/* ---- fixtures ---------------------------------------------------------- */

/* Values from a hash, labels cycling: a data set any model can fit a bit. */
static mxu_dataset *toy_data(uint32_t seed) {
  float x[SAMPLES * SIDE * SIDE];
  int32_t labels[SAMPLES];
  uint32_t h = seed;
  for (size_t i = 0; i < sizeof x / sizeof *x; i++) {
    h = h * 1664525u + 1013904223u;
    x[i] = (float)(h >> 8) / (float)(1u << 24) * 2.0f - 1.0f;
  }
  for (int i = 0; i < SAMPLES; i++) labels[i] = i % CLASSES;
  int64_t dims[3] = {SIDE, SIDE, 1};
  mxu_dataset *data = NULL;
  CHECK_OK(mxu_dataset_from_arrays(x, labels, SAMPLES, mxu_shape_make(3, dims),
                                   CLASSES, &data));
  return data;
}

/* Flatten, Dense softmax; Adam(0.01). */
static mxu_model *toy_model(const char *metric) {
  mxu_model *model = mxu_sequential("toy");
  int64_t dims[3] = {SIDE, SIDE, 1};
  CHECK_OK(mxu_add_input(model, "input", mxu_shape_make(3, dims)));
  CHECK_OK(mxu_add_flatten(model, NULL));
  mxu_dense_config dense = mxu_dense_defaults(CLASSES);
  dense.activation = MXU_SOFTMAX;
  CHECK_OK(mxu_add_dense(model, &dense));
  mxu_compile_config c = mxu_compile_defaults();
  c.optimizer = mxu_adam(0.01f);
  c.batch_size = BATCH;
  c.seed = 7;
  c.metrics[0] = metric;
  CHECK_OK(mxu_compile(model, &c));
  return model;
}

static mxu_fit_config fit_config(int epochs, const mxu_dataset *validation,
                                 const mxu_callback *callbacks, int count) {
  mxu_fit_config f = mxu_fit_defaults();
  f.epochs = epochs;
  f.batch_size = BATCH;
  f.seed = 3;
  f.verbose = 0;
  f.validation = validation;
  f.callbacks = callbacks;
  f.callback_count = count;
  return f;
}

/* Epoch logs as fit passes them; a NaN val_loss means "not validated". */
static mxu_logs logs_at(int epoch, double loss, double accuracy,
                        double val_loss, double val_accuracy) {
  mxu_logs logs = {.epoch = epoch,
                   .loss = loss,
                   .accuracy = accuracy,
                   .val_loss = val_loss,
                   .val_accuracy = val_accuracy,
                   .learning_rate = 0.001,
                   .metric = "accuracy",
                   .out = stderr};
  return logs;
}

/* Makes every weight recognisably `base`, so snapshots differ. (Through
 * the layers: the buffers hold alignment padding no file keeps.) */
static void fill_weights(mxu_model *model, float base) {
  for (int layer = 0; layer < mxu_model_layer_count(model); layer++)
    for (int k = 0; k < mxu_layer_weight_count(model, layer); k++) {
      mxu_tensor t;
      CHECK_OK(mxu_layer_weight(model, layer, k, &t, NULL));
      float *values = t.data;
      for (int64_t i = 0; i < mxu_shape_count(&t.shape); i++)
        values[i] = base + (float)i * 1e-3f;
    }
}

static int same_weights(const mxu_model *a, const mxu_model *b) {
  return a->trainable_count == b->trainable_count &&
         memcmp(a->weights, b->weights,
                (size_t)a->trainable_count * sizeof(float)) == 0 &&
         memcmp(a->state, b->state, (size_t)a->state_count * sizeof(float)) ==
             0;
}

static int matches_snapshot(const mxu_model *model, const float *snapshot) {
  float *now = NULL;
  CHECK_OK(mxu_model_snapshot(model, &now));
  size_t n = (size_t)(model->trainable_count + model->state_count);
  int same = now && memcmp(now, snapshot, n * sizeof(float)) == 0;
  free(now);
  return same;
}

static char *read_text(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *text = calloc(1, 1 << 16);
  size_t n = text ? fread(text, 1, (1 << 16) - 1, f) : 0;
  if (text) text[n] = 0;
  fclose(f);
  return text;
}

static int exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

/* What a hook prints, caught from a file descriptor (1 or 2). */
typedef struct capture {
  int fd, saved;
  const char *path;
} capture;

static void capture_begin(capture *c, int fd, const char *name) {
  fflush(stdout);
  c->fd = fd;
  c->path = temp_path(name);
  c->saved = dup(fd);
  int sink = open(c->path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  dup2(sink, fd);
  close(sink);
}

static char *capture_end(capture *c) {
  fflush(stdout);
  dup2(c->saved, c->fd);
  close(c->saved);
  return read_text(c->path);
}

/* ---- Python's float text ----------------------------------------------- */

static void test_python_float(void) {
  static const struct {
    double value;
    int precision, float32;
    const char *want;
  } cases[] = {
      {0.1, 0, 0, "0.1"},
      {1.0 / 3, 0, 0, "0.3333333333333333"},
      {1e16, 0, 0, "1e+16"},
      {1e15, 0, 0, "1000000000000000.0"},
      {1e-5, 0, 0, "1e-05"},
      {0.0001, 0, 0, "0.0001"},
      {-0.0, 0, 0, "-0.0"},
      {0.0, 0, 0, "0.0"},
      {123456.789, 0, 0, "123456.789"},
      {1e22, 0, 0, "1e+22"},
      {5e-324, 0, 0, "5e-324"},
      {1.7976931348623157e308, 0, 0, "1.7976931348623157e+308"},
      {0.30000000000000004, 0, 0, "0.30000000000000004"},
      {100.0, 0, 0, "100.0"},
      {NAN, 0, 0, "nan"},
      {-INFINITY, 0, 0, "-inf"},
      {(float)0.001, 0, 1, "0.001"},
      {(float)0.001, 0, 0, "0.0010000000474974513"},
      {(float)1e-5, 0, 1, "1e-05"},
      {10.0, 2, 0, "1e+01"},
      {3.0, 2, 0, "3.0"},
      {123.0, 3, 0, "1.23e+02"},
      {99.99, 3, 0, "1e+02"},
      {1.0, 1, 0, "1e+00"},
      {1.234e-5, 2, 0, "1.2e-05"},
      {123456789.0, 12, 0, "123456789.0"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char text[128];
    mxu_python_float(cases[i].value, cases[i].precision, cases[i].float32, text,
                     sizeof text);
    CHECK_MSG(strcmp(text, cases[i].want) == 0, "case %zu: got %s, want %s", i,
              text, cases[i].want);
  }
}

/* ---- EarlyStopping ----------------------------------------------------- */

/* Feeds values[e] as every monitored quantity of epoch e (val_* too unless
 * `validated` is 0); returns the epoch that stopped training, or -1. */
static int stop_epoch(const mxu_early_stopping_config *config,
                      const double *values, int count, int validated) {
  mxu_model *model = toy_model(NULL);
  mxu_callback cb;
  CHECK_OK(mxu_early_stopping(config, &cb));
  CHECK_OK(cb.train_begin(cb.self, model));
  int stopped = -1;
  for (int e = 0; e < count && stopped < 0; e++) {
    double v = values[e];
    mxu_logs logs = logs_at(e, v, v, validated ? v : NAN, validated ? v : NAN);
    CHECK_OK(cb.epoch_end(cb.self, model, &logs));
    if (model->stop_training) stopped = e;
  }
  mxu_callback_free(&cb);
  mxu_model_free(model);
  return stopped;
}

static void test_early_stopping_sequences(void) {
  mxu_early_stopping_config c = mxu_early_stopping_defaults();
  CHECK(strcmp(c.monitor, "val_loss") == 0 && c.patience == 0 &&
        c.min_delta == 0 && c.mode == MXU_MODE_AUTO);
  c.patience = 2;
  const double plateau[] = {1.0, 0.9, 0.95, 0.92, 0.5};
  CHECK(stop_epoch(&c, plateau, 5, 1) == 3);
  /* patience 0: the first epoch that does not improve, never epoch 0. */
  c.patience = 0;
  CHECK(stop_epoch(&c, plateau, 5, 1) == 2);
  /* A NaN never improves (a NaN val_loss reads as "not validated"). */
  c.monitor = "loss";
  const double nans[] = {NAN, NAN, NAN};
  CHECK(stop_epoch(&c, nans, 3, 0) == 1);
  c.monitor = "val_loss";
  /* min_delta: 0.96 is not 0.05 better than 1.0; 0.94 is. */
  c.patience = 1;
  c.min_delta = 0.05;
  const double small[] = {1.0, 0.96, 0.94};
  CHECK(stop_epoch(&c, small, 3, 1) == 1);
  c.patience = 2;
  CHECK(stop_epoch(&c, small, 3, 1) == -1);
  /* auto mode maximises a name holding "acc"; min overrides it. */
  c = mxu_early_stopping_defaults();
  c.monitor = "val_accuracy";
  c.patience = 2;
  const double accuracy[] = {0.5, 0.6, 0.6, 0.55, 0.9};
  CHECK(stop_epoch(&c, accuracy, 5, 1) == 3);
  c.mode = MXU_MODE_MIN;
  c.patience = 1;
  CHECK(stop_epoch(&c, accuracy, 5, 1) == 1);
  /* start_from_epoch: epochs before it are not monitored at all. */
  c = mxu_early_stopping_defaults();
  c.monitor = "loss";
  c.patience = 1;
  const double rising[] = {1.0, 2.0, 3.0, 2.5, 2.6};
  CHECK(stop_epoch(&c, rising, 5, 0) == 1);
  c.start_from_epoch = 2;
  CHECK(stop_epoch(&c, rising, 5, 0) == 4);
}

/* A monitor the logs lack: Keras warns, naming the keys, and skips. */
static void test_early_stopping_missing(void) {
  mxu_early_stopping_config c = mxu_early_stopping_defaults();
  const double values[] = {1.0, 2.0, 3.0};
  capture cap;
  capture_begin(&cap, 2, "warn_es.txt");
  int stopped = stop_epoch(&c, values, 3, 0);
  char *text = capture_end(&cap);
  CHECK(stopped == -1);
  CHECK_MSG(has(text, "`val_loss` which is not available. Available "
                      "metrics are: loss,accuracy,lr"),
            "%s", text ? text : "(none)");
  free(text);
  c.monitor = "val_los";
  capture_begin(&cap, 2, "warn_es2.txt");
  stopped = stop_epoch(&c, values, 3, 1);
  text = capture_end(&cap);
  CHECK(stopped == -1);
  CHECK(has(text, "`val_los`") &&
        has(text, "loss,accuracy,val_loss,val_accuracy,lr"));
  free(text);
}

/* The best epoch's weights come back bit for bit when it stops early
 * (tf.keras 2.x), and only then. */
static void test_early_stopping_restore(void) {
  mxu_model *model = toy_model(NULL);
  mxu_early_stopping_config c = mxu_early_stopping_defaults();
  c.monitor = "loss";
  c.patience = 2;
  c.restore_best_weights = 1;
  mxu_callback cb;
  CHECK_OK(mxu_early_stopping(&c, &cb));
  CHECK_OK(cb.train_begin(cb.self, model));
  const double loss[] = {1.0, 0.5, 0.7, 0.8};
  float *best = NULL;
  for (int e = 0; e < 4; e++) {
    fill_weights(model, (float)e + 1);
    if (e == 1) CHECK_OK(mxu_model_snapshot(model, &best));
    mxu_logs logs = logs_at(e, loss[e], 0.5, NAN, NAN);
    CHECK_OK(cb.epoch_end(cb.self, model, &logs));
  }
  CHECK(model->stop_training);
  CHECK(best && matches_snapshot(model, best));
  /* No early stop: the last weights stay. */
  model->stop_training = 0;
  CHECK_OK(cb.train_begin(cb.self, model));
  float *last = NULL;
  for (int e = 0; e < 3; e++) {
    fill_weights(model, (float)e + 10);
    mxu_logs logs = logs_at(e, loss[e], 0.5, NAN, NAN);
    CHECK_OK(cb.epoch_end(cb.self, model, &logs));
  }
  CHECK_OK(mxu_model_snapshot(model, &last));
  mxu_logs end = logs_at(2, loss[2], 0.5, NAN, NAN);
  if (cb.train_end) CHECK_OK(cb.train_end(cb.self, model, &end));
  CHECK(!model->stop_training && matches_snapshot(model, last));
  free(best);
  free(last);
  mxu_callback_free(&cb);
  CHECK(cb.self == NULL && cb.free == NULL);
  mxu_model_free(model);
}

/* A real fit: nothing beats the first epoch by 100, so with patience 1 it
 * stops after epoch 2 and restores epoch 1's weights, which are those of
 * a one-epoch fit with the same seeds. */
static void test_early_stopping_fit(void) {
  mxu_dataset *data = toy_data(11);
  mxu_model *model = toy_model(NULL);
  mxu_early_stopping_config c = mxu_early_stopping_defaults();
  c.monitor = "loss";
  c.min_delta = 100;
  c.patience = 1;
  c.restore_best_weights = 1;
  mxu_callback cb;
  CHECK_OK(mxu_early_stopping(&c, &cb));
  mxu_fit_config f = fit_config(10, NULL, &cb, 1);
  const mxu_history *history = NULL;
  CHECK_OK(mxu_fit(model, data, &f, &history));
  CHECK_MSG(history && history->count == 2, "history count %d",
            history ? history->count : -1);
  mxu_model *one = toy_model(NULL);
  mxu_fit_config f1 = fit_config(1, NULL, NULL, 0);
  CHECK_OK(mxu_fit(one, data, &f1, NULL));
  CHECK(same_weights(model, one));
  mxu_callback_free(&cb);
  mxu_model_free(one);
  mxu_model_free(model);
  mxu_dataset_free(data);
}

/* ---- ModelCheckpoint --------------------------------------------------- */

static const char *in_dir(const char *dir, const char *name) {
  static char paths[8][1024];
  static int next;
  char *path = paths[next++ % 8];
  snprintf(path, 1024, "%s/%s", dir, name);
  return path;
}

/* train_begin, then one epoch_end with these logs, through a fresh
 * checkpoint callback. */
static mxu_status checkpoint_once(const char *filepath, mxu_model *model,
                                  const mxu_logs *logs) {
  mxu_model_checkpoint_config c = mxu_model_checkpoint_defaults(filepath);
  c.save_weights_only = 1;
  mxu_callback cb;
  mxu_status s = mxu_model_checkpoint(&c, &cb);
  if (s != MXU_OK) return s;
  s = cb.train_begin(cb.self, model);
  if (s == MXU_OK) s = cb.epoch_end(cb.self, model, logs);
  mxu_callback_free(&cb);
  return s;
}

static void test_checkpoint_names(void) {
  const char *dir = temp_path("names");
  CHECK(mkdir(dir, 0755) == 0);
  mxu_model *model = toy_model(NULL);
  mxu_logs logs = logs_at(2, 0.5, 0.5, 0.41234, 0.75);
  CHECK_OK(checkpoint_once(in_dir(dir, "model.{epoch:02d}-{val_loss:.2f}.h5"),
                           model, &logs));
  CHECK(exists(in_dir(dir, "model.03-0.41.h5")));
  /* Python's format specs, checked against CPython's str.format. */
  logs = logs_at(0, 0.125, 0.5, -0.0123, 0.75);
  CHECK_OK(checkpoint_once(
      in_dir(dir, "f_{epoch}_{epoch:d}_{epoch:03d}_{loss:.4f}_{loss:e}_"
                  "{accuracy:.1%}_{loss}_{lr}_{val_accuracy:>8.3f}_{{x}}_"
                  "{loss:+.2}_{epoch:*^5}_{val_loss:08.3e}_{epoch:<3}|_"
                  "{loss:.0}_{accuracy:g}_{epoch:.1f}.h5"),
      model, &logs));
  CHECK(exists(in_dir(dir, "f_1_1_001_0.1250_1.250000e-01_50.0%_0.125_0.001_"
                           "   0.750_{x}_+0.12_**1**_-1.230e-02_1  |_0.1_0.5_"
                           "1.0.h5")));
  /* The metric's own name and val_ + it. */
  mxu_model *sparse = toy_model("sparse_categorical_accuracy");
  logs.metric = "sparse_categorical_accuracy";
  CHECK_OK(checkpoint_once(in_dir(dir, "s{sparse_categorical_accuracy:.2f}-"
                                       "{val_sparse_categorical_accuracy:.2f}"
                                       ".h5"),
                           sparse, &logs));
  CHECK(exists(in_dir(dir, "s0.50-0.75.h5")));
  /* A field the epoch has no value for fails then, naming it. */
  logs = logs_at(1, 0.5, 0.5, NAN, NAN);
  EXPECT_FAIL(checkpoint_once(in_dir(dir, "v{val_loss:.2f}.h5"), model, &logs),
              MXU_ERR_ARG, "{val_loss}: epoch 2 has no value for it");
  /* A key the model never logs fails when training begins. */
  EXPECT_FAIL(
      checkpoint_once(in_dir(dir, "v{categorical_accuracy}.h5"), model, &logs),
      MXU_ERR_ARG,
      "{categorical_accuracy}: unknown field; the fields are epoch and what "
      "the logs hold: loss,accuracy,val_loss,val_accuracy,lr");
  mxu_model_free(sparse);
  mxu_model_free(model);
}

/* save_best_only saves strict improvements of the monitor (the first
 * epoch always, a NaN never); the files load back. */
static void test_checkpoint_best(void) {
  const char *dir = temp_path("best");
  CHECK(mkdir(dir, 0755) == 0);
  mxu_model *model = toy_model(NULL);
  mxu_model_checkpoint_config c =
      mxu_model_checkpoint_defaults(in_dir(dir, "best.{epoch}.h5"));
  c.monitor = "loss";
  c.save_best_only = 1;
  c.save_weights_only = 1;
  mxu_callback cb;
  CHECK_OK(mxu_model_checkpoint(&c, &cb));
  const double loss[] = {0.5, 0.6, 0.4, NAN, 0.45};
  float *third = NULL;
  for (int e = 0; e < 5; e++) {
    fill_weights(model, (float)e + 1);
    if (e == 2) CHECK_OK(mxu_model_snapshot(model, &third));
    mxu_logs logs = logs_at(e, loss[e], 0.5, NAN, NAN);
    CHECK_OK(cb.epoch_end(cb.self, model, &logs));
  }
  CHECK(exists(in_dir(dir, "best.1.h5")) && exists(in_dir(dir, "best.3.h5")));
  CHECK(!exists(in_dir(dir, "best.2.h5")) &&
        !exists(in_dir(dir, "best.4.h5")) && !exists(in_dir(dir, "best.5.h5")));
  mxu_model *loaded = toy_model(NULL);
  CHECK_OK(mxu_load_weights(loaded, in_dir(dir, "best.3.h5")));
  CHECK(third && matches_snapshot(loaded, third));
  mxu_callback_free(&cb);
  /* Maximising accuracy: a missing val_accuracy warns and skips. */
  c = mxu_model_checkpoint_defaults(in_dir(dir, "acc.{epoch}.weights.h5"));
  c.monitor = "val_accuracy";
  c.save_best_only = 1;
  c.save_weights_only = 1;
  CHECK_OK(mxu_model_checkpoint(&c, &cb));
  const double accuracy[] = {0.5, 0.4, 0.7};
  for (int e = 0; e < 3; e++) {
    mxu_logs logs = logs_at(e, 1.0, 0.5, 1.0, accuracy[e]);
    CHECK_OK(cb.epoch_end(cb.self, model, &logs));
  }
  mxu_logs unvalidated = logs_at(3, 1.0, 0.9, NAN, NAN);
  capture cap;
  capture_begin(&cap, 2, "warn_ckpt.txt");
  CHECK_OK(cb.epoch_end(cb.self, model, &unvalidated));
  char *text = capture_end(&cap);
  CHECK(has(text, "`val_accuracy` which is not available"));
  free(text);
  CHECK(exists(in_dir(dir, "acc.1.weights.h5")) &&
        !exists(in_dir(dir, "acc.2.weights.h5")) &&
        exists(in_dir(dir, "acc.3.weights.h5")) &&
        !exists(in_dir(dir, "acc.4.weights.h5")));
  mxu_callback_free(&cb);
  free(third);
  mxu_model_free(loaded);
  mxu_model_free(model);
}

/* A whole model, by a real fit: the file restores with its position. */
static void test_checkpoint_full_model(void) {
  const char *dir = temp_path("full");
  CHECK(mkdir(dir, 0755) == 0);
  mxu_dataset *data = toy_data(5);
  mxu_model *model = toy_model(NULL);
  mxu_model_checkpoint_config c =
      mxu_model_checkpoint_defaults(in_dir(dir, "m{epoch:02d}.h5"));
  mxu_callback cb;
  CHECK_OK(mxu_model_checkpoint(&c, &cb));
  mxu_fit_config f = fit_config(2, NULL, &cb, 1);
  CHECK_OK(mxu_fit(model, data, &f, NULL));
  CHECK(exists(in_dir(dir, "m01.h5")) && exists(in_dir(dir, "m02.h5")));
  mxu_model *loaded = NULL;
  mxu_train_position position = {.epoch = -1, .step = -1, .seed = 1};
  CHECK_OK(mxu_load_model(in_dir(dir, "m02.h5"), MXU_BACKEND_CPU, &loaded,
                          &position));
  CHECK(position.epoch == 2 && position.step == 0 && position.seed == 0);
  CHECK(loaded && same_weights(model, loaded));
  mxu_callback_free(&cb);
  mxu_model_free(loaded);
  mxu_model_free(model);
  mxu_dataset_free(data);
}

static void test_checkpoint_errors(void) {
  static const struct {
    const char *template, *needle;
  } bad[] = {
      {"{epoch.h5", "expected '}' before end of string"},
      {"a}.h5", "single '}'"},
      {"{loss:d}.h5", "format code 'd'"},
      {"{epoch:.2d}.h5", "precision not allowed"},
      {"{}.h5", "not a key name"},
      {"{0}.h5", "not a key name"},
      {"{loss.real}.h5", "not a key name"},
      {"{loss!r}.h5", "conversions"},
      {"{loss:.}.h5", "missing precision"},
      {"{loss:x}.h5", "format code 'x'"},
      {"{loss:,}.h5", "not supported"},
      {"{loss:{w}}.h5", "nested"},
      {"{loss:.2fx}.h5", "invalid format specifier"},
      {"m{epoch}.txt", "unknown weights format"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    mxu_model_checkpoint_config c =
        mxu_model_checkpoint_defaults(bad[i].template);
    c.save_weights_only = 1;
    mxu_callback cb;
    EXPECT_FAIL(mxu_model_checkpoint(&c, &cb), MXU_ERR_ARG, bad[i].needle);
    CHECK(cb.self == NULL);
  }
  mxu_model_checkpoint_config c = mxu_model_checkpoint_defaults(NULL);
  mxu_callback cb;
  EXPECT_FAIL(mxu_model_checkpoint(&c, &cb), MXU_ERR_ARG, "filepath");
  EXPECT_FAIL(mxu_model_checkpoint(NULL, &cb), MXU_ERR_ARG, NULL);
  c = mxu_model_checkpoint_defaults("m.h5");
  c.mode = (mxu_monitor_mode)9;
  EXPECT_FAIL(mxu_model_checkpoint(&c, &cb), MXU_ERR_ARG, "mode 9");
  /* A directory that is not there: the save's error stops fit. */
  const char *missing = temp_path("no/such/dir/m{epoch}.h5");
  mxu_model *model = toy_model(NULL);
  mxu_logs logs = logs_at(0, 0.5, 0.5, 0.5, 0.5);
  mxu_status s = checkpoint_once(missing, model, &logs);
  CHECK_MSG(s != MXU_OK && has(mxu_errmsg(), "model_checkpoint: epoch 1") &&
                has(mxu_errmsg(), "no/such/dir/m1.h5"),
            "%s: %s", mxu_status_name(s), mxu_errmsg());
  mxu_dataset *data = toy_data(5);
  c = mxu_model_checkpoint_defaults(missing);
  CHECK_OK(mxu_model_checkpoint(&c, &cb));
  mxu_fit_config f = fit_config(3, NULL, &cb, 1);
  const mxu_history *history = NULL;
  mxu_status fit = mxu_fit(model, data, &f, &history);
  CHECK(fit == s && has(mxu_errmsg(), "no/such/dir/m1.h5"));
  CHECK(history && history->count == 1);
  mxu_callback_free(&cb);
  /* A misspelt key stops fit before its first step. */
  c = mxu_model_checkpoint_defaults(temp_path("{val_los}.h5"));
  CHECK_OK(mxu_model_checkpoint(&c, &cb));
  int64_t iterations = model->iterations;
  EXPECT_FAIL(mxu_fit(model, data, &f, NULL), MXU_ERR_ARG,
              "{val_los}: unknown field");
  CHECK(model->iterations == iterations);
  mxu_callback_free(&cb);
  mxu_dataset_free(data);
  mxu_model_free(model);
}

/* ---- LearningRateScheduler --------------------------------------------- */

static double halve(int epoch, double lr, void *ctx) {
  int *calls = ctx;
  calls[epoch]++;
  return lr * 0.5;
}

/* Runs epoch_begin for epochs 0..count-1 and checks each epoch's rate. */
static void check_schedule(const mxu_lr_schedule_config *config,
                           const double *want, int count) {
  mxu_model *model = toy_model(NULL);
  mxu_callback cb;
  CHECK_OK(mxu_lr_scheduler(config, &cb));
  CHECK_OK(cb.train_begin(cb.self, model));
  for (int e = 0; e < count; e++) {
    CHECK_OK(cb.epoch_begin(cb.self, model, e));
    CHECK_MSG(fabs(mxu_model_learning_rate(model) - want[e]) <= 1e-7 * want[e],
              "kind %d epoch %d: lr %.9g, want %.9g", (int)config->kind, e,
              mxu_model_learning_rate(model), want[e]);
  }
  mxu_callback_free(&cb);
  mxu_model_free(model);
}

static void test_schedules(void) {
  mxu_lr_schedule_config c = {0};
  c.kind = MXU_SCHEDULE_STEP;
  c.factor = 0.5;
  c.every = 2;
  const double step[] = {0.01, 0.01, 0.005, 0.005, 0.0025, 0.0025};
  check_schedule(&c, step, 6);
  c.kind = MXU_SCHEDULE_EXPONENTIAL;
  c.factor = 0.9;
  const double exponential[] = {0.01, 0.009, 0.0081, 0.00729};
  check_schedule(&c, exponential, 4);
  c.kind = MXU_SCHEDULE_COSINE;
  c.initial = 0.02;
  c.warmup_epochs = 2;
  c.total_epochs = 6;
  c.min_lr = 0.001;
  const double pi = 3.14159265358979323846;
  double cosine[8] = {0.01, 0.02, 0.02};
  for (int e = 3; e < 6; e++)
    cosine[e] = 0.001 + 0.5 * 0.019 * (1 + cos(pi * (e - 2) / 4.0));
  cosine[6] = cosine[7] = 0.001;
  check_schedule(&c, cosine, 8);
  /* fn gets the epoch and the current rate. */
  int calls[4] = {0};
  mxu_lr_schedule_config f = {0};
  f.fn = halve;
  f.ctx = calls;
  const double halved[] = {0.005, 0.0025, 0.00125, 0.000625};
  check_schedule(&f, halved, 4);
  CHECK(calls[0] == 1 && calls[1] == 1 && calls[2] == 1 && calls[3] == 1);
}

static double zero_rate(int epoch, double lr, void *ctx) {
  (void)epoch;
  (void)lr;
  (void)ctx;
  return 0;
}

static void test_schedule_errors(void) {
  mxu_callback cb;
  mxu_lr_schedule_config c = {0};
  c.kind = MXU_SCHEDULE_STEP;
  c.factor = 0.5;
  EXPECT_FAIL(mxu_lr_scheduler(&c, &cb), MXU_ERR_ARG, "every >= 1");
  c.every = 1;
  c.factor = 0;
  EXPECT_FAIL(mxu_lr_scheduler(&c, &cb), MXU_ERR_ARG, "factor 0");
  c.kind = MXU_SCHEDULE_EXPONENTIAL;
  c.factor = -0.5;
  EXPECT_FAIL(mxu_lr_scheduler(&c, &cb), MXU_ERR_ARG, "factor -0.5");
  c.kind = MXU_SCHEDULE_COSINE;
  c.warmup_epochs = 5;
  c.total_epochs = 5;
  EXPECT_FAIL(mxu_lr_scheduler(&c, &cb), MXU_ERR_ARG, "warmup 5, total 5");
  c.kind = (mxu_schedule_kind)7;
  EXPECT_FAIL(mxu_lr_scheduler(&c, &cb), MXU_ERR_ARG, "unknown schedule");
  c.kind = MXU_SCHEDULE_STEP;
  c.initial = -1;
  EXPECT_FAIL(mxu_lr_scheduler(&c, &cb), MXU_ERR_ARG, "initial -1");
  EXPECT_FAIL(mxu_lr_scheduler(NULL, &cb), MXU_ERR_ARG, NULL);
  /* A function giving 0 fails the epoch, naming it. */
  mxu_lr_schedule_config f = {0};
  f.fn = zero_rate;
  CHECK_OK(mxu_lr_scheduler(&f, &cb));
  mxu_model *model = toy_model(NULL);
  EXPECT_FAIL(cb.epoch_begin(cb.self, model, 4), MXU_ERR_ARG, "epoch 5");
  mxu_callback_free(&cb);
  mxu_model_free(model);
}

/* ---- ReduceLROnPlateau ------------------------------------------------- */

static void test_reduce_lr(void) {
  mxu_reduce_lr_config c = mxu_reduce_lr_defaults();
  CHECK(strcmp(c.monitor, "val_loss") == 0 && c.factor == 0.1 &&
        c.patience == 10 && c.min_delta == 1e-4 && c.cooldown == 0 &&
        c.min_lr == 0);
  c.factor = 0.5;
  c.patience = 2;
  c.cooldown = 1;
  c.min_lr = 0.0002;
  mxu_model *model = toy_model(NULL);
  CHECK_OK(mxu_model_set_learning_rate(model, 0.001));
  mxu_callback cb;
  CHECK_OK(mxu_reduce_lr_on_plateau(&c, &cb));
  CHECK_OK(cb.train_begin(cb.self, model));
  /* Hand-run Keras: reductions at epochs 2, 4 (after a cooldown epoch) and
   * 6 (clamped to min_lr); then 0.5 improves, and at epoch 10 the rate is
   * at min_lr already, so nothing changes. */
  const double val_loss[] = {1, 1, 1, 1, 1, 1, 1, 1, 0.5, 0.5, 0.5};
  const double want[] = {0.001,  0.001,  0.0005, 0.0005, 0.00025, 0.00025,
                         0.0002, 0.0002, 0.0002, 0.0002, 0.0002};
  for (int e = 0; e < 11; e++) {
    mxu_logs logs = logs_at(e, 1, 0.5, val_loss[e], 0.5);
    CHECK_OK(cb.epoch_end(cb.self, model, &logs));
    CHECK_MSG((float)mxu_model_learning_rate(model) == (float)want[e],
              "epoch %d: lr %.9g, want %.9g", e, mxu_model_learning_rate(model),
              want[e]);
  }
  mxu_callback_free(&cb);
  /* Accuracy is maximised; min_delta counts against it. */
  c = mxu_reduce_lr_defaults();
  c.monitor = "val_accuracy";
  c.patience = 1;
  CHECK_OK(mxu_model_set_learning_rate(model, 0.01));
  CHECK_OK(mxu_reduce_lr_on_plateau(&c, &cb));
  CHECK_OK(cb.train_begin(cb.self, model));
  const double accuracy[] = {0.5, 0.50005, 0.9};
  /* Keras multiplies the float32 rate in double and stores a float32. */
  const double reduced = (float)((double)0.01f * 0.1);
  const double accuracy_want[] = {0.01, reduced, reduced};
  for (int e = 0; e < 3; e++) {
    mxu_logs logs = logs_at(e, 1, 0.5, 1, accuracy[e]);
    CHECK_OK(cb.epoch_end(cb.self, model, &logs));
    CHECK_MSG((float)mxu_model_learning_rate(model) == (float)accuracy_want[e],
              "epoch %d: lr %.9g", e, mxu_model_learning_rate(model));
  }
  /* A missing monitor warns and changes nothing. */
  capture cap;
  capture_begin(&cap, 2, "warn_lr.txt");
  for (int e = 3; e < 6; e++) {
    mxu_logs logs = logs_at(e, 1, 0.5, NAN, NAN);
    CHECK_OK(cb.epoch_end(cb.self, model, &logs));
  }
  char *text = capture_end(&cap);
  CHECK(has(text, "Learning rate reduction is conditioned on metric "
                  "`val_accuracy`"));
  CHECK((float)mxu_model_learning_rate(model) == (float)reduced);
  free(text);
  mxu_callback_free(&cb);
  mxu_model_free(model);
  c = mxu_reduce_lr_defaults();
  c.factor = 1.0;
  EXPECT_FAIL(mxu_reduce_lr_on_plateau(&c, &cb), MXU_ERR_ARG, "factor 1");
  c.factor = 0;
  EXPECT_FAIL(mxu_reduce_lr_on_plateau(&c, &cb), MXU_ERR_ARG, "factor 0");
  c.factor = 0.5;
  c.cooldown = -1;
  EXPECT_FAIL(mxu_reduce_lr_on_plateau(&c, &cb), MXU_ERR_ARG, "cooldown -1");
  EXPECT_FAIL(mxu_reduce_lr_on_plateau(NULL, &cb), MXU_ERR_ARG, NULL);
}

/* ---- CSVLogger --------------------------------------------------------- */

static void csv_run(const char *path, int append, const mxu_logs *logs,
                    int count) {
  mxu_model *model = toy_model(NULL);
  mxu_callback cb;
  CHECK_OK(mxu_csv_logger(path, append, &cb));
  CHECK_OK(cb.train_begin(cb.self, model));
  for (int i = 0; i < count; i++)
    CHECK_OK(cb.epoch_end(cb.self, model, &logs[i]));
  CHECK_OK(cb.train_end(cb.self, model, &logs[count - 1]));
  mxu_callback_free(&cb);
  mxu_model_free(model);
}

static void check_text(const char *path, const char *want) {
  char *text = read_text(path);
  CHECK_MSG(text && strcmp(text, want) == 0, "%s:\n%s\nwant:\n%s", path,
            text ? text : "(missing)", want);
  free(text);
}

static void test_csv_text(void) {
  const char *path = temp_path("log.csv");
  mxu_logs logs[3] = {logs_at(0, 0.25, 0.5, 0.125, 0.75),
                      logs_at(1, 1.0 / 3, 0.1, NAN, NAN),
                      logs_at(2, 1e-5, 1.0, 2.5, 0.0)};
  logs[1].learning_rate = (float)0.0005;
  const char *two = "epoch,accuracy,loss,lr,val_accuracy,val_loss\r\n"
                    "0,0.5,0.25,0.001,0.75,0.125\r\n"
                    "1,0.1,0.3333333333333333,0.0005,NA,NA\r\n";
  csv_run(path, 0, logs, 2);
  check_text(path, two);
  /* append keeps the rows and writes no second header. */
  csv_run(path, 1, logs + 2, 1);
  char want[512];
  snprintf(want, sizeof want, "%s2,1.0,1e-05,0.001,0.0,2.5\r\n", two);
  check_text(path, want);
  /* Without append the file starts over. */
  csv_run(path, 0, logs + 2, 1);
  check_text(path, "epoch,accuracy,loss,lr,val_accuracy,val_loss\r\n"
                   "2,1.0,1e-05,0.001,0.0,2.5\r\n");
  /* append to a new (or empty) file writes the header; the columns are
   * the first epoch's keys, sorted, the metric under its own name. */
  const char *fresh = temp_path("fresh.csv");
  mxu_logs sparse[2] = {logs_at(0, 0.5, 0.25, NAN, NAN),
                        logs_at(1, 0.5, 0.25, 0.5, 0.5)};
  sparse[0].metric = sparse[1].metric = "sparse_categorical_accuracy";
  csv_run(fresh, 1, sparse, 2);
  check_text(fresh, "epoch,loss,lr,sparse_categorical_accuracy\r\n"
                    "0,0.5,0.001,0.25\r\n"
                    "1,0.5,0.001,0.25\r\n");
  /* A metric's own name quoted as Python's csv module quotes it. */
  const char *quoted = temp_path("quoted.csv");
  sparse[0].metric = sparse[1].metric = "say \"hi\", then";
  csv_run(quoted, 0, sparse, 1);
  check_text(quoted, "epoch,loss,lr,\"say \"\"hi\"\", then\"\r\n"
                     "0,0.5,0.001,0.25\r\n");
  /* An I/O error names the file. */
  mxu_callback cb;
  mxu_model *model = toy_model(NULL);
  const char *missing = temp_path("no/such/log.csv");
  CHECK_OK(mxu_csv_logger(missing, 0, &cb));
  EXPECT_FAIL(cb.train_begin(cb.self, model), MXU_ERR_IO, missing);
  mxu_callback_free(&cb);
  EXPECT_FAIL(mxu_csv_logger(NULL, 0, &cb), MXU_ERR_ARG, NULL);
  mxu_model_free(model);
}

/* A real fit with a step schedule: one row per epoch whose values read
 * back as the history's doubles, and the scheduled rates. */
static void test_csv_fit(void) {
  const char *path = temp_path("fit.csv");
  mxu_dataset *data = toy_data(9), *validation = toy_data(21);
  mxu_model *model = toy_model(NULL);
  mxu_callback cbs[2];
  mxu_lr_schedule_config s = {0};
  s.kind = MXU_SCHEDULE_STEP;
  s.factor = 0.5;
  s.every = 2;
  CHECK_OK(mxu_lr_scheduler(&s, &cbs[0]));
  CHECK_OK(mxu_csv_logger(path, 0, &cbs[1]));
  mxu_fit_config f = fit_config(3, validation, cbs, 2);
  f.validation_freq = 2;
  const mxu_history *h = NULL;
  CHECK_OK(mxu_fit(model, data, &f, &h));
  char *text = read_text(path);
  CHECK(text && strncmp(text, "epoch,accuracy,loss,lr\r\n", 24) == 0);
  const char *rates[] = {"0.01", "0.01", "0.005"};
  char *line = text ? strstr(text, "\r\n") : NULL;
  for (int e = 0; e < 3 && line && h && h->count == 3; e++) {
    line += 2;
    int epoch = -1;
    char *end = NULL;
    epoch = (int)strtol(line, &end, 10);
    double accuracy = strtod(end + 1, &end);
    double loss = strtod(end + 1, &end);
    char rate[32] = {0};
    sscanf(end + 1, "%31[^\r]", rate);
    CHECK(epoch == e && accuracy == h->epochs[e].accuracy &&
          loss == h->epochs[e].loss);
    CHECK_MSG(strcmp(rate, rates[e]) == 0, "epoch %d rate %s", e, rate);
    line = strstr(line, "\r\n");
  }
  CHECK(line && strcmp(line, "\r\n") == 0);
  free(text);
  mxu_callback_free(&cbs[0]);
  mxu_callback_free(&cbs[1]);
  /* fit stops at once on a file it cannot open. */
  CHECK_OK(mxu_csv_logger(temp_path("no/such/fit.csv"), 0, &cbs[0]));
  f = fit_config(3, NULL, cbs, 1);
  EXPECT_FAIL(mxu_fit(model, data, &f, &h), MXU_ERR_IO, "no/such/fit.csv");
  mxu_callback_free(&cbs[0]);
  mxu_model_free(model);
  mxu_dataset_free(validation);
  mxu_dataset_free(data);
}

/* ---- TensorBoard ------------------------------------------------------- */

/* The one event file in dir, or NULL. */
static const char *event_file(const char *dir) {
  static char path[1024];
  DIR *d = opendir(dir);
  if (!d) return NULL;
  int found = 0;
  for (struct dirent *e; (e = readdir(d));)
    if (strstr(e->d_name, "tfevents")) {
      snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
      found++;
    }
  closedir(d);
  return found == 1 ? path : NULL;
}

typedef struct scalar {
  char tag[64];
  long step;
  double value;
} scalar;

/* tb_read's "tag step value" lines; returns how many, -1 if it failed. */
static int read_events(const char *file, scalar *out, int capacity) {
  char command[1200];
  snprintf(command, sizeof command, READER " '%s'", file);
  FILE *pipe = popen(command, "r");
  if (!pipe) return -1;
  int n = 0;
  char line[256];
  while (fgets(line, sizeof line, pipe) && n < capacity)
    if (sscanf(line, "%63s %ld %lf", out[n].tag, &out[n].step, &out[n].value) ==
        3)
      n++;
  return pclose(pipe) == 0 ? n : -1;
}

/* The value logged under tag at step, NaN when there is none. */
static double event_value(const scalar *events, int n, const char *tag,
                          long step) {
  for (int i = 0; i < n; i++)
    if (!strcmp(events[i].tag, tag) && events[i].step == step)
      return events[i].value;
  return NAN;
}

static int event_count(const scalar *events, int n, const char *tag) {
  int count = 0;
  for (int i = 0; i < n; i++) count += !strcmp(events[i].tag, tag);
  return count;
}

static void test_tensorboard_fit(void) {
  const char *dir = temp_path("tb");
  mxu_dataset *data = toy_data(3), *validation = toy_data(17);
  mxu_model *model = toy_model(NULL);
  mxu_callback cb;
  CHECK_OK(mxu_tensorboard(dir, 4, &cb));
  mxu_fit_config f = fit_config(3, validation, &cb, 1);
  const mxu_history *h = NULL;
  CHECK_OK(mxu_fit(model, data, &f, &h));
  const char *train = event_file(in_dir(dir, "train"));
  CHECK(train != NULL);
  scalar events[64];
  int n = train ? read_events(train, events, 64) : -1;
  /* The model for the graph dashboard (its JSON lists InputLayer,
   * Flatten, Dense), 3 epochs of 3 scalars, and batch_loss at steps 4, 8,
   * 12, 16. */
  CHECK_MSG(n == 14, "%d train records", n);
  CHECK(event_value(events, n, "keras", 0) == 3.0);
  for (int e = 0; h && h->count == 3 && e < 3; e++) {
    CHECK(event_value(events, n, "epoch_loss", e) == (float)h->epochs[e].loss);
    CHECK(event_value(events, n, "epoch_accuracy", e) ==
          (float)h->epochs[e].accuracy);
    CHECK(event_value(events, n, "epoch_learning_rate", e) == 0.01f);
  }
  CHECK(event_count(events, n, "batch_loss") == 4);
  for (long step = 4; step <= 16; step += 4)
    CHECK(!isnan(event_value(events, n, "batch_loss", step)));
  const char *val = event_file(in_dir(dir, "validation"));
  CHECK(val != NULL);
  n = val ? read_events(val, events, 64) : -1;
  CHECK_MSG(n == 6, "%d validation scalars", n);
  for (int e = 0; h && h->count == 3 && e < 3; e++) {
    CHECK(event_value(events, n, "epoch_loss", e) ==
          (float)h->epochs[e].val_loss);
    CHECK(event_value(events, n, "epoch_accuracy", e) ==
          (float)h->epochs[e].val_accuracy);
  }
  mxu_callback_free(&cb);
  mxu_model_free(model);
  mxu_dataset_free(validation);
  mxu_dataset_free(data);
}

/* No validation: no validation/ folder; the metric's own tag. */
static void test_tensorboard_plain(void) {
  const char *dir = temp_path("tb_plain");
  mxu_dataset *data = toy_data(3);
  mxu_model *model = toy_model("sparse_categorical_accuracy");
  mxu_callback cb;
  CHECK_OK(mxu_tensorboard(dir, 0, &cb));
  mxu_fit_config f = fit_config(2, NULL, &cb, 1);
  const mxu_history *h = NULL;
  CHECK_OK(mxu_fit(model, data, &f, &h));
  CHECK(!exists(in_dir(dir, "validation")));
  const char *train = event_file(in_dir(dir, "train"));
  scalar events[64];
  int n = train ? read_events(train, events, 64) : -1;
  CHECK_MSG(n == 7, "%d records", n);
  CHECK(event_count(events, n, "keras") == 1);
  CHECK(event_count(events, n, "epoch_sparse_categorical_accuracy") == 2 &&
        event_count(events, n, "epoch_accuracy") == 0 &&
        event_count(events, n, "batch_loss") == 0);
  CHECK(h && h->count == 2 &&
        event_value(events, n, "epoch_sparse_categorical_accuracy", 1) ==
            (float)h->epochs[1].accuracy);
  mxu_callback_free(&cb);
  /* A file where the log folder should be. */
  const char *blocked = temp_path("tb_blocked");
  FILE *file = fopen(blocked, "w");
  if (file) fclose(file);
  CHECK_OK(mxu_tensorboard(blocked, 0, &cb));
  EXPECT_FAIL(mxu_fit(model, data, &f, &h), MXU_ERR_IO, "tb_blocked");
  mxu_callback_free(&cb);
  EXPECT_FAIL(mxu_tensorboard(NULL, 0, &cb), MXU_ERR_ARG, NULL);
  EXPECT_FAIL(mxu_tensorboard(dir, -1, &cb), MXU_ERR_ARG, "update_freq -1");
  mxu_model_free(model);
  mxu_dataset_free(data);
}

/* ---- TerminateOnNaN ---------------------------------------------------- */

static void test_terminate_on_nan(void) {
  mxu_model *model = toy_model(NULL);
  mxu_callback cb;
  CHECK_OK(mxu_terminate_on_nan(&cb));
  mxu_logs logs = logs_at(0, 0.7, 0.5, NAN, NAN);
  logs.step = 3;
  capture cap;
  capture_begin(&cap, 1, "nan_out.txt");
  CHECK_OK(cb.batch_end(cb.self, model, &logs));
  CHECK(!model->stop_training);
  logs.step = 4;
  logs.loss = INFINITY;
  CHECK_OK(cb.batch_end(cb.self, model, &logs));
  char *text = capture_end(&cap);
  CHECK(model->stop_training);
  CHECK_MSG(text && strcmp(text, "Batch 3: Invalid loss, terminating "
                                 "training\n") == 0,
            "%s", text ? text : "(none)");
  free(text);
  model->stop_training = 0;
  logs.loss = NAN;
  capture_begin(&cap, 1, "nan_out2.txt");
  CHECK_OK(cb.batch_end(cb.self, model, &logs));
  free(capture_end(&cap));
  CHECK(model->stop_training);
  /* A healthy fit runs every epoch. */
  mxu_dataset *data = toy_data(3);
  mxu_fit_config f = fit_config(2, NULL, &cb, 1);
  const mxu_history *h = NULL;
  CHECK_OK(mxu_fit(model, data, &f, &h));
  CHECK(h && h->count == 2);
  mxu_callback_free(&cb);
  EXPECT_FAIL(mxu_terminate_on_nan(NULL), MXU_ERR_ARG, NULL);
  mxu_dataset_free(data);
  mxu_model_free(model);
}

static void test_null_arguments(void) {
  mxu_early_stopping_config es = mxu_early_stopping_defaults();
  mxu_callback cb;
  EXPECT_FAIL(mxu_early_stopping(&es, NULL), MXU_ERR_ARG, NULL);
  EXPECT_FAIL(mxu_early_stopping(NULL, &cb), MXU_ERR_ARG, NULL);
  es.patience = -1;
  EXPECT_FAIL(mxu_early_stopping(&es, &cb), MXU_ERR_ARG, "patience -1");
  es = mxu_early_stopping_defaults();
  es.monitor = "";
  EXPECT_FAIL(mxu_early_stopping(&es, &cb), MXU_ERR_ARG, "monitor is empty");
  mxu_reduce_lr_config r = mxu_reduce_lr_defaults();
  EXPECT_FAIL(mxu_reduce_lr_on_plateau(&r, NULL), MXU_ERR_ARG, NULL);
  mxu_lr_schedule_config s = {0};
  EXPECT_FAIL(mxu_lr_scheduler(&s, NULL), MXU_ERR_ARG, NULL);
  EXPECT_FAIL(mxu_csv_logger("x.csv", 0, NULL), MXU_ERR_ARG, NULL);
  EXPECT_FAIL(mxu_tensorboard("logs", 0, NULL), MXU_ERR_ARG, NULL);
  mxu_model_checkpoint_config m = mxu_model_checkpoint_defaults("m.h5");
  EXPECT_FAIL(mxu_model_checkpoint(&m, NULL), MXU_ERR_ARG, NULL);
  mxu_callback_free(NULL);
}

int main(void) {
  if (!check_temp_make("callbacks")) {
    fprintf(stderr, "test_callbacks: cannot make a temporary directory\n");
    return 1;
  }
  test_python_float();
  test_early_stopping_sequences();
  test_early_stopping_missing();
  test_early_stopping_restore();
  test_early_stopping_fit();
  test_checkpoint_names();
  test_checkpoint_best();
  test_checkpoint_full_model();
  test_checkpoint_errors();
  test_schedules();
  test_schedule_errors();
  test_reduce_lr();
  test_csv_text();
  test_csv_fit();
  test_tensorboard_fit();
  test_tensorboard_plain();
  test_terminate_on_nan();
  test_null_arguments();
  check_remove_tree(check_temp_dir);
  return check_report("test_callbacks");
}
