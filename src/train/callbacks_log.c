/* callbacks_log.c — the callbacks that record training as it goes:
 * Keras' CSVLogger and TensorBoard, and TerminateOnNaN, which watches the
 * batch loss. Under MPI one process (rank 0) writes; every process keeps
 * the same state so all of them stop together. */
#include "io/tensorboard.h"
#include "train/callbacks.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char *copy_text(const char *text) {
  char *copy = malloc(strlen(text) + 1);
  if (copy) strcpy(copy, text);
  return copy;
}

/* ---- CSVLogger --------------------------------------------------------- */

/* The logs' keys and lr. */
#define CSV_MAX_KEYS (MXU_MAX_LOG_KEYS + 1)
#define CSV_KEY_SIZE MXU_LOG_KEY_SIZE

typedef struct csv_logger {
  char *path;
  int append;
  FILE *file;
  int header_due;
  int key_count; /* 0 until the first epoch's keys are known */
  char keys[CSV_MAX_KEYS][CSV_KEY_SIZE];
} csv_logger;

static mxu_status csv_io_error(const csv_logger *csv, const char *doing) {
  return mxu_fail(MXU_ERR_IO, "csv_logger: %s: %s: %s", csv->path, doing,
                  strerror(errno));
}

static mxu_status csv_close(csv_logger *csv) {
  if (!csv->file) return MXU_OK;
  int failed = fclose(csv->file) != 0;
  csv->file = NULL;
  return failed ? csv_io_error(csv, "closing") : MXU_OK;
}

/* Keras: append keeps the rows and writes a header only into an empty (or
 * new) file; otherwise the file starts over. */
static mxu_status csv_train_begin(void *self, mxu_model *model) {
  (void)model;
  csv_logger *csv = self;
  MXU_TRY(csv_close(csv));
  csv->key_count = 0;
  if (mxu_distributed_rank() != 0) return MXU_OK;
  struct stat st;
  csv->header_due =
      !csv->append || stat(csv->path, &st) != 0 || st.st_size == 0;
  csv->file = fopen(csv->path, csv->append ? "a" : "w");
  if (!csv->file) return csv_io_error(csv, "opening");
  return MXU_OK;
}

static int compare_keys(const void *a, const void *b) { return strcmp(a, b); }

/* The columns come from the first epoch's logs, sorted as Python sorts
 * them: loss, the metric, and "lr" (tf.keras 2.x's name for the rate);
 * val_loss and val_<metric> when that epoch validated. A later epoch
 * without validation writes NA in them, as Keras does. */
static void csv_pick_keys(csv_logger *csv, const mxu_logs *logs) {
  char keys[MXU_MAX_LOG_KEYS][MXU_LOG_KEY_SIZE];
  int n = mxu_logs_keys(logs, keys);
  memcpy(csv->keys, keys, (size_t)n * CSV_KEY_SIZE);
  snprintf(csv->keys[n++], CSV_KEY_SIZE, "lr");
  qsort(csv->keys, (size_t)n, CSV_KEY_SIZE, compare_keys);
  csv->key_count = n;
}

/* A value as Python's csv module writes it: repr() of the float, the rate
 * as numpy prints a float32 (Keras logs it as one), NA when absent. */
static void csv_value(const mxu_logs *logs, const char *key, char *out,
                      size_t size) {
  if (strncmp(key, "val_", 4) == 0 && isnan(logs->val_loss))
    snprintf(out, size, "NA");
  else if (strcmp(key, "lr") == 0)
    mxu_python_float(logs->learning_rate, 0, 1, out, size);
  else
    mxu_python_float(mxu_logs_value(logs, key), 0, 0, out, size);
}

/* A key as Python's csv module writes it: in quotes, its quotes doubled,
 * when it holds a comma, a quote or a line break (a metric's own name). */
static void csv_write_key(FILE *file, const char *key) {
  if (!strpbrk(key, ",\"\r\n")) {
    fprintf(file, ",%s", key);
    return;
  }
  fputs(",\"", file);
  for (const char *c = key; *c; c++) {
    if (*c == '"') fputc('"', file);
    fputc(*c, file);
  }
  fputc('"', file);
}

/* Python's csv module ends every line with \r\n (the excel dialect), so
 * Keras' files do too. */
static void csv_write_header(csv_logger *csv) {
  fputs("epoch", csv->file);
  for (int i = 0; i < csv->key_count; i++)
    csv_write_key(csv->file, csv->keys[i]);
  fputs("\r\n", csv->file);
  csv->header_due = 0;
}

/* The epoch column is Keras' 0-based epoch. Each row is flushed, so the
 * file is current while training runs. */
static mxu_status csv_epoch_end(void *self, mxu_model *model,
                                const mxu_logs *logs) {
  (void)model;
  csv_logger *csv = self;
  if (!csv->file) return MXU_OK; /* not rank 0, or train_begin failed */
  if (!csv->key_count) csv_pick_keys(csv, logs);
  if (csv->header_due) csv_write_header(csv);
  fprintf(csv->file, "%d", logs->epoch);
  for (int i = 0; i < csv->key_count; i++) {
    char value[64];
    csv_value(logs, csv->keys[i], value, sizeof value);
    fprintf(csv->file, ",%s", value);
  }
  fputs("\r\n", csv->file);
  if (fflush(csv->file) != 0 || ferror(csv->file))
    return csv_io_error(csv, "writing");
  return MXU_OK;
}

static mxu_status csv_train_end(void *self, mxu_model *model,
                                const mxu_logs *logs) {
  (void)model;
  (void)logs;
  return csv_close(self);
}

static void csv_free(void *self) {
  csv_logger *csv = self;
  if (!csv) return;
  csv_close(csv);
  free(csv->path);
  free(csv);
}

mxu_status mxu_csv_logger(const char *path, int append, mxu_callback *out) {
  if (!path || !*path || !out)
    return mxu_fail(MXU_ERR_ARG, "csv_logger: a path and out are required");
  memset(out, 0, sizeof *out);
  csv_logger *csv = calloc(1, sizeof *csv);
  if (!csv || !(csv->path = copy_text(path))) {
    free(csv);
    return mxu_fail(MXU_ERR_NOMEM, "csv_logger: out of memory");
  }
  csv->append = append;
  out->self = csv;
  out->train_begin = csv_train_begin;
  out->epoch_end = csv_epoch_end;
  out->train_end = csv_train_end;
  out->free = csv_free;
  return MXU_OK;
}

/* ---- TerminateOnNaN ---------------------------------------------------- */

typedef struct terminate_on_nan {
  FILE *out; /* where Keras prints: stdout */
} terminate_on_nan;

/* Keras' check on the batch logs' loss. fit itself refuses to apply a
 * step whose loss is not finite (MXU_ERR_NUMERIC), so inside fit this can
 * fire only if the running mean overflows to inf; it is here for Keras
 * parity and for code that feeds logs itself. Keras numbers batches from
 * 0; logs->step counts the steps done. */
static mxu_status terminate_batch_end(void *self, mxu_model *model,
                                      const mxu_logs *logs) {
  terminate_on_nan *t = self;
  if (isfinite(logs->loss)) return MXU_OK;
  if (mxu_distributed_rank() == 0) {
    fprintf(t->out, "Batch %d: Invalid loss, terminating training\n",
            logs->step - 1);
    fflush(t->out);
  }
  mxu_model_stop_training(model);
  return MXU_OK;
}

mxu_status mxu_terminate_on_nan(mxu_callback *out) {
  if (!out) return mxu_fail(MXU_ERR_ARG, "terminate_on_nan: out is required");
  memset(out, 0, sizeof *out);
  terminate_on_nan *t = calloc(1, sizeof *t);
  if (!t) return mxu_fail(MXU_ERR_NOMEM, "terminate_on_nan: out of memory");
  t->out = stdout;
  out->self = t;
  out->batch_end = terminate_batch_end;
  out->free = free;
  return MXU_OK;
}

/* ---- TensorBoard ------------------------------------------------------- */

typedef struct tensorboard {
  char *train_dir, *validation_dir;
  int update_freq;
  mxu_tb_writer *train, *validation;
  int64_t last_step; /* the optimizer step of the last batch_end seen */
} tensorboard;

static void tb_close(tensorboard *tb) {
  mxu_tb_close(tb->train);
  mxu_tb_close(tb->validation);
  tb->train = tb->validation = NULL;
}

/* The train writer opens with training, the validation one at the first
 * validated epoch, as Keras creates its writers lazily: a run without
 * validation leaves no validation/ folder. */
static mxu_status tb_train_begin(void *self, mxu_model *model) {
  tensorboard *tb = self;
  tb_close(tb);
  tb->last_step = model->iterations;
  if (mxu_distributed_rank() != 0) return MXU_OK;
  MXU_TRY(mxu_tb_open(tb->train_dir, &tb->train));
  /* Keras' write_graph: the model for the graph dashboard. */
  char *json = NULL;
  MXU_TRY(mxu_model_to_json(model, 0, &json));
  mxu_status s = mxu_tb_keras_model(tb->train, json);
  free(json);
  return s;
}

/* Keras writes batch_loss, the running mean of the epoch, at the global
 * step when it is a multiple of update_freq. mxu's global step is the
 * optimizer's iteration count, which carries on in a resumed run (Keras
 * counts the steps of each fit call). Batch hooks come every
 * steps_per_execution steps; a multiple passed since the last one writes
 * at the current step. */
static mxu_status tb_batch_end(void *self, mxu_model *model,
                               const mxu_logs *logs) {
  tensorboard *tb = self;
  int64_t step = model->iterations, last = tb->last_step;
  tb->last_step = step;
  if (!tb->train || tb->update_freq <= 0) return MXU_OK;
  if (step / tb->update_freq == last / tb->update_freq) return MXU_OK;
  return mxu_tb_scalar(tb->train, "batch_loss", step, logs->loss);
}

/* Keras names each scalar "epoch_" + the logs key (val_ keys in the
 * validation log, without val_): the metric keeps its own name
 * (epoch_accuracy, or epoch_sparse_categorical_accuracy when the model
 * logs that), never a second alias, so TensorBoard shows the same tags
 * Keras would for the same model. */
static mxu_status tb_epoch_end(void *self, mxu_model *model,
                               const mxu_logs *logs) {
  (void)model;
  tensorboard *tb = self;
  if (!tb->train) return MXU_OK;
  if (!isnan(logs->val_loss) && !tb->validation)
    MXU_TRY(mxu_tb_open(tb->validation_dir, &tb->validation));
  char keys[MXU_MAX_LOG_KEYS][MXU_LOG_KEY_SIZE];
  int n = mxu_logs_keys(logs, keys);
  for (int i = 0; i < n; i++) {
    int val = strncmp(keys[i], "val_", 4) == 0;
    char tag[MXU_LOG_KEY_SIZE + 8];
    snprintf(tag, sizeof tag, "epoch_%s", keys[i] + (val ? 4 : 0));
    MXU_TRY(mxu_tb_scalar(val ? tb->validation : tb->train, tag, logs->epoch,
                          mxu_logs_value(logs, keys[i])));
  }
  MXU_TRY(mxu_tb_scalar(tb->train, "epoch_learning_rate", logs->epoch,
                        logs->learning_rate));
  MXU_TRY(mxu_tb_flush(tb->train));
  return tb->validation && !isnan(logs->val_loss) ? mxu_tb_flush(tb->validation)
                                                  : MXU_OK;
}

static mxu_status tb_train_end(void *self, mxu_model *model,
                               const mxu_logs *logs) {
  (void)model;
  (void)logs;
  tensorboard *tb = self;
  mxu_status s = tb->train ? mxu_tb_flush(tb->train) : MXU_OK;
  if (s == MXU_OK && tb->validation) s = mxu_tb_flush(tb->validation);
  tb_close(tb);
  return s;
}

static void tb_free(void *self) {
  tensorboard *tb = self;
  if (!tb) return;
  tb_close(tb);
  free(tb->train_dir);
  free(tb->validation_dir);
  free(tb);
}

static char *join_path(const char *dir, const char *name) {
  size_t size = strlen(dir) + strlen(name) + 2;
  char *path = malloc(size);
  if (path) snprintf(path, size, "%s/%s", dir, name);
  return path;
}

mxu_status mxu_tensorboard(const char *log_dir, int update_freq,
                           mxu_callback *out) {
  if (!log_dir || !*log_dir || !out)
    return mxu_fail(MXU_ERR_ARG, "tensorboard: a log_dir and out are required");
  memset(out, 0, sizeof *out);
  if (update_freq < 0)
    return mxu_fail(MXU_ERR_ARG,
                    "tensorboard: update_freq %d is negative (0: epochs only)",
                    update_freq);
  tensorboard *tb = calloc(1, sizeof *tb);
  if (!tb) return mxu_fail(MXU_ERR_NOMEM, "tensorboard: out of memory");
  tb->update_freq = update_freq;
  tb->train_dir = join_path(log_dir, "train");
  tb->validation_dir = join_path(log_dir, "validation");
  if (!tb->train_dir || !tb->validation_dir) {
    tb_free(tb);
    return mxu_fail(MXU_ERR_NOMEM, "tensorboard: out of memory");
  }
  out->self = tb;
  out->train_begin = tb_train_begin;
  out->batch_end = tb_batch_end;
  out->epoch_end = tb_epoch_end;
  out->train_end = tb_train_end;
  out->free = tb_free;
  return MXU_OK;
}
