/* report.c — the JSON report of `mxu train` and `mxu evaluate`: per-epoch
 * logs under Keras' names, the test result, throughput and wall time,
 * written atomically so a reader never sees half a file. */
#include "cli.h"
#include "options.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Keras' log names: "accuracy" or "sparse_categorical_accuracy", and the
 * same with "val_" for validation. Epochs that did not validate get no
 * val_ entries rather than NaN, which JSON cannot hold. */
static cJSON *epoch_json(const mxu_epoch_log *log, const char *metric) {
  cJSON *e = cJSON_CreateObject();
  char val_metric[96];
  snprintf(val_metric, sizeof val_metric, "val_%s", metric);
  cJSON_AddNumberToObject(e, "epoch", log->epoch);
  cJSON_AddNumberToObject(e, "loss", log->loss);
  cJSON_AddNumberToObject(e, metric, log->accuracy);
  if (!isnan(log->val_loss)) {
    cJSON_AddNumberToObject(e, "val_loss", log->val_loss);
    cJSON_AddNumberToObject(e, val_metric, log->val_accuracy);
  }
  cJSON_AddNumberToObject(e, "seconds", log->seconds);
  return e;
}

/* Samples over the epochs' seconds. An epoch's seconds include its
 * validation pass, as Keras' epoch time does, so this slightly
 * understates pure training speed on validated epochs. */
static double images_per_second(const mxu_history *history) {
  double seconds = 0, samples = 0;
  for (int i = 0; i < history->count; i++) {
    seconds += history->epochs[i].seconds;
    samples += (double)history->epochs[i].samples;
  }
  return seconds > 0 ? samples / seconds : 0.0;
}

static void add_training(cJSON *root, const cli_report *r) {
  cJSON_AddNumberToObject(root, "batch_size", r->batch_size);
  cJSON *epochs = cJSON_AddArrayToObject(root, "epochs");
  for (int i = 0; i < r->history->count; i++)
    cJSON_AddItemToArray(epochs, epoch_json(&r->history->epochs[i], r->metric));
}

static cJSON *report_json(const cli_report *r) {
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "model", r->model);
  cJSON_AddStringToObject(root, "data", r->data);
  if (r->weights) cJSON_AddStringToObject(root, "weights", r->weights);
  if (r->history) add_training(root, r);
  cJSON *test = cJSON_AddObjectToObject(root, "test");
  cJSON_AddNumberToObject(test, "loss", r->test_loss);
  cJSON_AddNumberToObject(test, r->metric, r->test_accuracy);
  if (r->history)
    cJSON_AddNumberToObject(root, "train_images_per_second",
                            images_per_second(r->history));
  cJSON_AddNumberToObject(root, "wall_seconds", r->wall_seconds);
  return root;
}

/* Temporary file beside the target, synced, then renamed over it. */
static int write_atomically(const char *path, const char *text) {
  char temp[4096];
  if (snprintf(temp, sizeof temp, "%s.tmp-XXXXXX", path) >= (int)sizeof temp)
    return ENAMETOOLONG;
  int fd = mkstemp(temp);
  if (fd < 0) return errno;
  fchmod(fd, 0644);
  FILE *file = fdopen(fd, "w");
  if (!file) {
    int error = errno;
    close(fd);
    unlink(temp);
    return error;
  }
  int error = 0;
  size_t length = strlen(text);
  if (fwrite(text, 1, length, file) != length || fputc('\n', file) == EOF ||
      fflush(file) != 0 || fsync(fd) != 0)
    error = errno ? errno : EIO;
  if (fclose(file) != 0 && !error) error = errno;
  if (!error && rename(temp, path) != 0) error = errno;
  if (error) unlink(temp);
  return error;
}

int cli_write_report(const char *command, const char *path,
                     const cli_report *report) {
  cJSON *root = report_json(report);
  char *text = root ? cJSON_Print(root) : NULL;
  cJSON_Delete(root);
  if (!text) {
    fprintf(stderr, "mxu %s: report: %s: out of memory\n", command, path);
    return CLI_RUNTIME;
  }
  errno = 0;
  int error = write_atomically(path, text);
  cJSON_free(text);
  if (!error) return CLI_OK;
  fprintf(stderr, "mxu %s: report: %s: cannot write: %s\n", command, path,
          strerror(error));
  return CLI_RUNTIME;
}
