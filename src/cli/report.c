/* report.c — the JSON report of `mxu train` and `mxu evaluate`: per-epoch
 * logs under Keras' names, the test result and confusion matrix,
 * throughput and wall time, written atomically so a reader never sees half
 * a file. */
#include "cli.h"
#include "options.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Each output's loss and metrics under Keras' names ("accuracy",
 * "precision"; of several outputs "cls_loss", "val_cls_accuracy"): of an
 * epoch (val: its validation) or of the test. */
static void add_outputs(cJSON *e, const mxu_output_log *outputs, int count,
                        int val) {
  const char *p = val ? "val_" : "";
  for (int j = 0; j < count; j++) {
    const mxu_output_log *o = &outputs[j];
    const char *name = count > 1 ? o->name : "", *cut = count > 1 ? "_" : "";
    char key[256];
    snprintf(key, sizeof key, "%s%s_loss", p, o->name);
    if (count > 1) cJSON_AddNumberToObject(e, key, val ? o->val_loss : o->loss);
    for (int m = 0; m < o->metric_count; m++) {
      snprintf(key, sizeof key, "%s%s%s%s", p, name, cut, o->metrics[m]);
      cJSON_AddNumberToObject(e, key, val ? o->val_values[m] : o->values[m]);
    }
  }
}

/* Keras' log names, and the same with "val_" for validation. Epochs that
 * did not validate get no val_ entries rather than NaN, which JSON cannot
 * hold. */
static cJSON *epoch_json(const mxu_epoch_log *log) {
  cJSON *e = cJSON_CreateObject();
  cJSON_AddNumberToObject(e, "epoch", log->epoch);
  cJSON_AddNumberToObject(e, "loss", log->loss);
  add_outputs(e, log->outputs, log->output_count, 0);
  if (!isnan(log->val_loss)) {
    cJSON_AddNumberToObject(e, "val_loss", log->val_loss);
    add_outputs(e, log->outputs, log->output_count, 1);
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
    cJSON_AddItemToArray(epochs, epoch_json(&r->history->epochs[i]));
}

/* "confusion": {"class_names": [...], "matrix": [[...]]}, rows the true
 * class, columns the predicted one, as sklearn's confusion_matrix. */
static void add_confusion(cJSON *root, const cli_report *r) {
  cJSON *confusion = cJSON_AddObjectToObject(root, "confusion");
  cJSON *names = cJSON_AddArrayToObject(confusion, "class_names");
  cJSON *matrix = cJSON_AddArrayToObject(confusion, "matrix");
  for (int i = 0; i < r->classes; i++) {
    const char *name = r->class_names ? r->class_names[i] : NULL;
    char index[16];
    snprintf(index, sizeof index, "%d", i);
    cJSON_AddItemToArray(names, cJSON_CreateString(name ? name : index));
    cJSON *row = cJSON_CreateArray();
    for (int j = 0; j < r->classes; j++)
      cJSON_AddItemToArray(
          row, cJSON_CreateNumber(
                   (double)r->confusion[(int64_t)i * r->classes + j]));
    cJSON_AddItemToArray(matrix, row);
  }
}

static cJSON *report_json(const cli_report *r) {
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "model", r->model);
  cJSON_AddStringToObject(root, "data", r->data);
  if (r->weights) cJSON_AddStringToObject(root, "weights", r->weights);
  if (r->history) add_training(root, r);
  cJSON *test = cJSON_AddObjectToObject(root, "test");
  cJSON_AddNumberToObject(test, "loss", r->test_loss);
  add_outputs(test, r->test_outputs, r->output_count, 0);
  if (r->confusion) add_confusion(root, r);
  if (r->history)
    cJSON_AddNumberToObject(root, "train_images_per_second",
                            images_per_second(r->history));
  cJSON_AddNumberToObject(root, "wall_seconds", r->wall_seconds);
  return root;
}

/* Rendered in memory, then written the way mxu writes every file
 * (mxu_file_write: atomically, a FIFO or /dev/stdout in place). */
int cli_write_atomically(const char *path, int (*write)(FILE *, void *),
                         void *context) {
  char *bytes = NULL;
  size_t size = 0;
  FILE *memory = open_memstream(&bytes, &size);
  if (!memory) return errno ? errno : ENOMEM;
  errno = 0;
  int error = write(memory, context);
  if (fclose(memory) != 0 && !error) error = errno ? errno : EIO;
  if (!error && mxu_file_write(path, bytes, size) != MXU_OK)
    error = errno ? errno : EIO;
  free(bytes);
  return error;
}

static int write_text(FILE *file, void *text) {
  size_t length = strlen(text);
  if (fwrite(text, 1, length, file) != length || fputc('\n', file) == EOF)
    return errno ? errno : EIO;
  return 0;
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
  int error = cli_write_atomically(path, write_text, text);
  cJSON_free(text);
  if (!error) return CLI_OK;
  fprintf(stderr, "mxu %s: report: %s: cannot write: %s\n", command, path,
          strerror(error));
  return CLI_RUNTIME;
}

int cli_report_confusion(const char *command, mxu_model *model,
                         const mxu_dataset *test, cli_report *report) {
  int64_t *matrix;
  int classes;
  /* Regression targets and one-value outputs have no classes to confuse;
   * a model of several outputs no one set of classes. */
  mxu_shape out =
      mxu_model_layer_shape(model, mxu_model_layer_count(model) - 1);
  if (mxu_dataset_num_classes(test) == 0 || mxu_shape_count(&out) < 2 ||
      mxu_model_output_count(model) > 1)
    return CLI_OK;
  int code = cli_confusion(command, model, test, &matrix, &classes);
  if (code != CLI_OK) return code;
  const char **names = malloc((size_t)classes * sizeof *names);
  if (!names) {
    free(matrix);
    fprintf(stderr, "mxu %s: confusion: out of memory\n", command);
    return CLI_RUNTIME;
  }
  /* The data set owns the names; it outlives the report. */
  for (int i = 0; i < classes; i++) names[i] = mxu_dataset_class_name(test, i);
  report->confusion = matrix;
  report->classes = classes;
  report->class_names = names;
  return CLI_OK;
}

void cli_report_release(cli_report *report) {
  /* The fields are const for the writer; cli_report_confusion owns them. */
  free((void *)report->confusion);
  free((void *)report->class_names);
  report->confusion = NULL;
  report->class_names = NULL;
  report->classes = 0;
}
