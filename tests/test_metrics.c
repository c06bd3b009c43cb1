/* test_metrics.c — several metrics an output, against Keras itself
 * (tests/golden/metrics, make_metrics.py): the compile settings read from
 * the files tf.keras 2 and Keras 3 saved (Precision, Recall and
 * RootMeanSquaredError objects among the names), every value evaluate and
 * one epoch of fit log, under Keras' keys in tf.keras' order, on every
 * backend; counts over batches of which the last is short; the written
 * settings read back; refusals. */
#include "check.h"
#include "check_h5.h"
#include "model/model.h"
#include "train/callbacks.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DIR "tests/golden/metrics/"
enum { ROWS = 20, FEATURES = 5, BATCH = 8, MAX_KEYS = 40 };

typedef struct golden {
  float x[ROWS * FEATURES], cls[ROWS * 3], reg[ROWS * 2], flag[ROWS];
  float w[ROWS]; /* the weighted model's sample weights */
} golden;

static void read_golden(golden *g) {
  hid_t file = H5Fopen(DIR "data.h5", H5F_ACC_RDONLY, H5P_DEFAULT);
  CHECK(file >= 0);
  if (file < 0) return;
  check_h5_read(file, "x", H5T_NATIVE_FLOAT, g->x);
  check_h5_read(file, "y_cls", H5T_NATIVE_FLOAT, g->cls);
  check_h5_read(file, "y_reg", H5T_NATIVE_FLOAT, g->reg);
  check_h5_read(file, "y_flag", H5T_NATIVE_FLOAT, g->flag);
  check_h5_read(file, "w", H5T_NATIVE_FLOAT, g->w);
  H5Fclose(file);
}

/* Keras' value of `key` in group NAME/WHAT ("evaluate" or "fit"). */
static double keras_value(const char *name, const char *what, const char *key) {
  double v = NAN;
  char path[256];
  snprintf(path, sizeof path, "%s/%s/%s", name, what, key);
  hid_t file = H5Fopen(DIR "data.h5", H5F_ACC_RDONLY, H5P_DEFAULT);
  if (file >= 0 && H5Lexists(file, path, H5P_DEFAULT) > 0)
    check_h5_read(file, path, H5T_NATIVE_DOUBLE, &v);
  if (file >= 0) H5Fclose(file);
  return v;
}

/* keys.txt's line "NAME tf2 WHAT: k1,k2,...": tf.keras' keys in order
 * (one may hold a space: the tutorial's "cross entropy"). */
static int keras_keys(const char *name, const char *what,
                      char keys[MAX_KEYS][MXU_LOG_KEY_SIZE]) {
  FILE *f = fopen(DIR "keys.txt", "r");
  CHECK(f != NULL);
  if (!f) return 0;
  char line[4096], head[128];
  snprintf(head, sizeof head, "%s tf2 %s: ", name, what);
  int n = 0;
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, head, strlen(head)) != 0) continue;
    for (char *k = strtok(line + strlen(head), ",\n"); k && n < MAX_KEYS;
         k = strtok(NULL, ",\n"))
      snprintf(keys[n++], MXU_LOG_KEY_SIZE, "%s", k);
  }
  fclose(f);
  return n;
}

/* The data of model `name`: the weighted one's with its sample weights. */
static mxu_dataset *golden_data(const golden *g, const char *name) {
  mxu_dataset *d = NULL;
  mxu_shape shape = mxu_shape_make(1, (int64_t[]){FEATURES});
  if (strcmp(name, "regress") == 0 || strcmp(name, "cosine") == 0) {
    CHECK_OK(mxu_dataset_from_targets(g->x, g->reg, ROWS, shape, 2, &d));
    return d;
  }
  if (strcmp(name, "hinge") == 0 || strcmp(name, "cfocal") == 0 ||
      strcmp(name, "classes") == 0) {
    CHECK_OK(mxu_dataset_from_targets(g->x, g->cls, ROWS, shape, 3, &d));
    return d;
  }
  if (strcmp(name, "metrics") != 0) {
    CHECK_OK(mxu_dataset_from_targets(g->x, g->flag, ROWS, shape, 1, &d));
    if (d && strcmp(name, "weighted") == 0)
      CHECK_OK(mxu_dataset_set_sample_weights(d, g->w));
    return d;
  }
  CHECK_OK(mxu_dataset_from_targets(g->x, g->cls, ROWS, shape, 3, &d));
  if (!d) return NULL;
  CHECK_OK(mxu_dataset_add_output_targets(d, g->reg, 2));
  CHECK_OK(mxu_dataset_add_output_targets(d, g->flag, 1));
  return d;
}

/* The logs of a loss and outputs, as fit hands them to callbacks. */
static mxu_logs logs_of(double loss, const mxu_output_log *outputs, int count) {
  mxu_logs logs = {.loss = loss,
                   .accuracy = count == 1 ? outputs[0].values[0] : NAN,
                   .val_loss = NAN,
                   .val_accuracy = NAN,
                   .learning_rate = 0.1,
                   .metric = count == 1 ? outputs[0].metrics[0] : NULL,
                   .output_count = count,
                   .outputs = outputs};
  return logs;
}

/* Every key Keras logged, in its order, with its value (1e-5: float32
 * sums in another order). */
static void expect_logs(const mxu_logs *logs, const char *name,
                        const char *what, const char *label) {
  char want[MAX_KEYS][MXU_LOG_KEY_SIZE],
      got[MXU_MAX_LOG_KEYS][MXU_LOG_KEY_SIZE];
  int n = keras_keys(name, what, want), m = mxu_logs_keys(logs, got);
  CHECK_MSG(n > 2 && n == m, "%s: %d keys, Keras %d", label, m, n);
  for (int i = 0; i < n && i < m; i++) {
    CHECK_MSG(strcmp(want[i], got[i]) == 0, "%s: key %d is %s, Keras' %s",
              label, i, got[i], want[i]);
    double keras = keras_value(name, what, want[i]);
    double mine = mxu_logs_value(logs, want[i]);
    CHECK_MSG(fabs(mine - keras) <= 1e-5 * (1 + fabs(keras)),
              "%s: %s %.8f, Keras %.8f", label, want[i], mine, keras);
  }
}

static mxu_model *load(const char *path, mxu_backend_kind backend, int replicas,
                       const char *name) {
  mxu_model *m = NULL;
  mxu_compile_config c = mxu_compile_defaults();
  int has_compile = 0;
  CHECK_OK(mxu_model_load_json(path, &m, &c, &has_compile));
  CHECK(has_compile == 1);
  if (!m) return NULL;
  c.batch_size = BATCH;
  c.backend = backend;
  c.replicas = replicas;
  c.threads = replicas > 1 ? 2 : 1;
  CHECK_OK(mxu_compile(m, &c));
  char weights[256];
  snprintf(weights, sizeof weights, DIR "%s.initial.h5", name);
  CHECK_OK(mxu_load_weights(m, weights));
  return m;
}

/* The metrics the file compiled each output with, in its order (the
 * weighted ones after the others). */
static void expect_compiled(const mxu_model *m, const char *path) {
  static const char *const weighted[] = {
      "accuracy", "auc", "weighted_accuracy", "precision", "wauc", "mae",
      "f1",       NULL};
  static const char *const regress[] = {"msle", "logcosh", "poisson", "mape",
                                        NULL};
  static const char *const logits[] = {"accuracy",  "acc_low", "auc", "prc",
                                       "precision", "mae",     NULL};
  static const struct {
    const char *model, *metrics[7];
  } others[] = {
      {"hinge", {"hinge", "squared_hinge", "ch", "cosine_similarity"}},
      {"cosine", {"cos", "squared_hinge"}},
      {"focal", {"accuracy", "hinge"}}, /* before "cfocal", its tail */
      {"cfocal", {"accuracy", "categorical_hinge"}},
      {"classes", {"p1", "r2", "p03", "r1", "tp", "fn"}}};
  static const char *const want[3][8] = {
      {"accuracy", "top_k_categorical_accuracy", "precision", "recall", "auc",
       "f1", "f2"},
      {"mae", "mse", "rmse"},
      {"accuracy", "p", "recall", "roc", "f1"}};
  static const char *const binary[] = {"cross entropy",
                                       "Brier score",
                                       "tp",
                                       "fp",
                                       "tn",
                                       "fn",
                                       "accuracy",
                                       "precision",
                                       "recall",
                                       "auc",
                                       "prc",
                                       "root_mean_squared_error",
                                       NULL};
  for (int h = 0; h < m->head_count; h++) {
    const char *const *names = m->head_count > 1          ? want[h]
                               : strstr(path, "weighted") ? weighted
                               : strstr(path, "regress")  ? regress
                               : strstr(path, "logits")   ? logits
                                                          : binary;
    for (size_t i = 0; i < sizeof others / sizeof *others; i++)
      if (strstr(path, others[i].model)) names = others[i].metrics;
    int count = 0;
    while (names[count]) count++;
    CHECK_MSG(m->heads[h].metric_count == count, "%s: output %d: %d metrics",
              path, h, m->heads[h].metric_count);
    for (int k = 0; k < count && k < m->heads[h].metric_count; k++)
      CHECK_MSG(strcmp(m->heads[h].metric[k], names[k]) == 0,
                "%s: output %d metric %d is %s", path, h, k,
                m->heads[h].metric[k]);
  }
}

/* Replicas: the batch split over them, their sums (and AUC curves)
 * gathered in logical order. */
static void golden_run(const char *name, const char *file,
                       mxu_backend_kind backend, int replicas) {
  static golden g;
  read_golden(&g);
  char path[256], label[320];
  snprintf(path, sizeof path, DIR "%s%s", name, file);
  static const char *const backend_names[] = {"cpu", "cpu_ref", "pjrt"};
  snprintf(label, sizeof label, "%s on %s, %d replicas", path,
           backend_names[backend], replicas);
  mxu_model *m = load(path, backend, replicas, name);
  if (!m) return;

  expect_compiled(m, path);
  mxu_dataset *d = golden_data(&g, name);
  int count = mxu_model_output_count(m);
  mxu_output_log outputs[MXU_MAX_OUTPUTS];
  double loss = NAN;
  CHECK_OK(mxu_evaluate_outputs(m, d, BATCH, &loss, outputs));
  mxu_logs logs = logs_of(loss, outputs, count);
  char what[360];
  snprintf(what, sizeof what, "%s evaluate", label);
  expect_logs(&logs, name, "evaluate", what);
  double accuracy = NAN;
  CHECK_OK(mxu_evaluate(m, d, BATCH, &loss, &accuracy));
  CHECK(count > 1 ? isnan(accuracy) : accuracy == outputs[0].values[0]);

  mxu_fit_config f = mxu_fit_defaults();
  f.epochs = 1;
  f.batch_size = 4; /* whole batches: fit drops a short one */
  f.shuffle = 0;
  f.verbose = 0;
  const mxu_history *h = NULL;
  CHECK_OK(mxu_fit(m, d, &f, &h));
  if (h && h->count == 1) {
    const mxu_epoch_log *e = &h->epochs[0];
    CHECK(e->output_count == count);
    logs = logs_of(e->loss, e->outputs, count);
    snprintf(what, sizeof what, "%s fit", label);
    expect_logs(&logs, name, "fit", what);
    CHECK(count > 1 ? isnan(e->accuracy)
                    : e->accuracy == e->outputs[0].values[0]);
  }
  mxu_dataset_free(d);
  mxu_model_free(m);
}

/* Precision and recall count over the epoch: not the mean of each
 * batch's ratio. Three batches whose ratios' mean is not the whole's. */
/* binary.h5's model and compile settings on cpu_ref with two metrics of
 * its own (compiled into *status). */
static mxu_model *binary_with(int batch, const char *first, const char *second,
                              mxu_status *status) {
  mxu_model *m = NULL;
  mxu_compile_config c = mxu_compile_defaults();
  CHECK_OK(mxu_model_load_json(DIR "binary.h5", &m, &c, NULL));
  if (!m) return NULL;
  c.batch_size = batch;
  c.backend = MXU_BACKEND_CPU_REF;
  memset(c.metrics, 0, sizeof c.metrics);
  c.metrics[0] = first;
  c.metrics[1] = second;
  *status = mxu_compile(m, &c);
  return m;
}

static void counts_over_batches(void) {
  mxu_status compiled;
  mxu_model *m = binary_with(2, "precision", "recall", &compiled);
  if (!m) return;
  CHECK_OK(compiled);
  /* The output's kernel 0 and bias: y = sigmoid(b) for every sample,
   * then its inputs choose: a last Dense whose kernel is 0 and bias b. */
  int last = mxu_model_output_node(m, 0);
  mxu_tensor kernel, bias;
  CHECK_OK(mxu_layer_weight(m, last, 0, &kernel, NULL));
  CHECK_OK(mxu_layer_weight(m, last, 1, &bias, NULL));
  memset(kernel.data, 0, (size_t)mxu_shape_count(&kernel.shape) * 4);
  /* All predicted positive: precision = positives / samples. */
  ((float *)bias.data)[0] = 5.0f;
  float x[6 * FEATURES] = {0}, t[6] = {1, 0, 0, 0, 1, 1};
  mxu_dataset *d = NULL;
  CHECK_OK(mxu_dataset_from_targets(
      x, t, 6, mxu_shape_make(1, (int64_t[]){FEATURES}), 1, &d));
  mxu_output_log o[1];
  double loss;
  CHECK_OK(mxu_evaluate_outputs(m, d, 2, &loss, o));
  /* Batches: {1,0}: 1/2, {0,0}: 0/2, {1,1}: 2/2; mean 0.5, whole 3/6. */
  CHECK_NEAR(o[0].values[0], 0.5, 1e-12);
  CHECK_NEAR(o[0].values[1], 1.0, 1e-12);
  /* Batches of 4 and a short one of 2: 1/4 and 2/2, whole 3/6 still. */
  CHECK_OK(mxu_evaluate_outputs(m, d, 4, &loss, o));
  CHECK_NEAR(o[0].values[0], 0.5, 1e-12);
  /* None predicted positive: precision 0 (Keras' divide_no_nan), recall
   * 0. */
  ((float *)bias.data)[0] = -5.0f;
  CHECK_OK(mxu_evaluate_outputs(m, d, 2, &loss, o));
  CHECK(o[0].values[0] == 0.0 && o[0].values[1] == 0.0);
  mxu_dataset_free(d);
  mxu_model_free(m);
}

/* The area under the ROC curve at its ends: a perfect ranking 1, the
 * reverse 0, one score for all 0.5 (a single trapezoid), and no
 * positives 0 (Keras' divide_no_nan). */
static void auc_values(void) {
  static const struct {
    float y[4], t[4];
    double auc;
  } cases[] = {
      {{0.9f, 0.8f, 0.2f, 0.1f}, {1, 1, 0, 0}, 1.0},
      {{0.1f, 0.2f, 0.8f, 0.9f}, {1, 1, 0, 0}, 0.0},
      {{0.5f, 0.5f, 0.5f, 0.5f}, {1, 0, 1, 0}, 0.5},
      {{0.3f, 0.6f, 0.5f, 0.9f}, {0, 0, 0, 0}, 0.0},
      /* 3 of the 4 pairs ranked right */
      {{0.9f, 0.4f, 0.6f, 0.1f}, {1, 1, 0, 0}, 0.75},
  };
  const float mask[4] = {1, 1, 1, 1};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    float curve[MXU_AUC_VALUES] = {0};
    double wide[MXU_AUC_VALUES];
    mxu_auc_counts(4, 1, cases[i].y, cases[i].t, mask, 0, curve);
    for (int v = 0; v < MXU_AUC_VALUES; v++) wide[v] = curve[v];
    double auc = mxu_auc_result(MXU_METRIC_AUC, wide);
    CHECK_MSG(fabs(auc - cases[i].auc) < 1e-12, "case %zu: auc %.6f, want %.2f",
              i, auc, cases[i].auc);
  }
}

/* One MeanIoU over rows of k scores, from its tally (per class the true
 * and false positives, false negatives and true rows). */
static double iou_of(const char *spec, mxu_loss loss, int k, const float *y,
                     const int32_t *labels, const float *targets,
                     const float *weights) {
  char log[MXU_METRIC_LOG_SIZE];
  mxu_metric_kind kind;
  mxu_metric_options o;
  CHECK_OK(mxu_metric_parse(spec, loss, k, log, &kind, &o));
  int64_t size = mxu_metric_tally_size(kind, k);
  CHECK(size == (kind == MXU_METRIC_BINARY_IOU ? 8 : 4 * k));
  float tally[20] = {0}, ones[40];
  double wide[20];
  for (int r = 0; r < 40; r++) ones[r] = 1.0f;
  /* Two batches, as an epoch's steps add theirs. */
  const float *mask = weights ? weights : ones;
  mxu_metric_tally(kind, &o, 25, k, y, labels, targets, mask, tally);
  mxu_metric_tally(kind, &o, 15, k, y + 25 * k, labels ? labels + 25 : NULL,
                   targets ? targets + 25 * k : NULL, mask + 25, tally);
  for (int v = 0; v < size; v++) wide[v] = tally[v];
  return mxu_tally_result(kind, &o, wide, k);
}

/* Keras 3's MeanIoU and OneHotMeanIoU (sparse_y_pred=False) of one batch
 * (make_iou.py): rows whose label is no class or the ignore_class left
 * out, sample weights counted, a class never seen out of the mean; and
 * BinaryIoU's of every value, targets truncated, of both classes or one. */
static void iou_values(void) {
  hid_t file = H5Fopen("tests/golden/iou.h5", H5F_ACC_RDONLY, H5P_DEFAULT);
  CHECK(file >= 0);
  if (file < 0) return;
  static float y[40 * 4], y5[40 * 5], onehot[40 * 4], weights[40];
  static float b[40 * 3], bt[40 * 3], b0[40], bt0[40];
  static int32_t labels[40];
  check_h5_read(file, "y", H5T_NATIVE_FLOAT, y);
  check_h5_read(file, "y5", H5T_NATIVE_FLOAT, y5);
  check_h5_read(file, "onehot", H5T_NATIVE_FLOAT, onehot);
  check_h5_read(file, "weights", H5T_NATIVE_FLOAT, weights);
  check_h5_read(file, "labels", H5T_NATIVE_INT32, labels);
  check_h5_read(file, "b", H5T_NATIVE_FLOAT, b);
  check_h5_read(file, "bt", H5T_NATIVE_FLOAT, bt);
  for (int r = 0; r < 40; r++) b0[r] = b[3 * r], bt0[r] = bt[3 * r];
  const mxu_loss binary = MXU_BINARY_CROSSENTROPY;
  const mxu_loss sparse = MXU_SPARSE_CATEGORICAL_CROSSENTROPY;
  const struct {
    const char *key;
    double mxu;
  } cases[] = {
      {"plain",
       iou_of("mean_iou(num_classes=4)", sparse, 4, y, labels, NULL, NULL)},
      {"ignore2", iou_of("mean_iou(num_classes=4,ignore_class=2)", sparse, 4, y,
                         labels, NULL, NULL)},
      {"ignore255", iou_of("mean_iou(num_classes=4,ignore_class=255)", sparse,
                           4, y, labels, NULL, NULL)},
      {"weighted",
       iou_of("mean_iou(num_classes=4)", sparse, 4, y, labels, NULL, weights)},
      {"absent",
       iou_of("mean_iou(num_classes=5)", sparse, 5, y5, labels, NULL, NULL)},
      {"onehot_iou",
       iou_of("one_hot_mean_iou(num_classes=4,ignore_class=1)",
              MXU_CATEGORICAL_CROSSENTROPY, 4, y, labels, onehot, NULL)},
      {"binary", iou_of("binary_iou", binary, 3, b, NULL, bt, NULL)},
      {"binary1", iou_of("binary_iou(threshold=0.3,class_id=1)", binary, 3, b,
                         NULL, bt, NULL)},
      {"binary0w",
       iou_of("binary_iou(class_id=0)", binary, 1, b0, NULL, bt0, weights)},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    double keras = NAN;
    check_h5_read(file, cases[i].key, H5T_NATIVE_DOUBLE, &keras);
    CHECK_MSG(fabs(cases[i].mxu - keras) <= 1e-6, "%s: mxu %.9g, Keras %.9g",
              cases[i].key, cases[i].mxu, keras);
  }
  H5Fclose(file);
}

/* EarlyStopping and the others in mode "auto": these metrics improve
 * upwards (Keras 3's directions), the errors downwards. */
static void monitor_directions(void) {
  static const char *const up[] = {"val_auc",       "flag_auc",
                                   "val_precision", "cls_recall",
                                   "val_accuracy",  "acc"};
  static const char *const down[] = {"val_loss", "val_root_mean_squared_error",
                                     "reg_mae", "val_mse", "auc_loss"};
  for (int i = 0; i < 6; i++)
    CHECK_MSG(mxu_monitor_is_max(up[i], MXU_MODE_AUTO), "%s", up[i]);
  for (int i = 0; i < 5; i++)
    CHECK_MSG(!mxu_monitor_is_max(down[i], MXU_MODE_AUTO), "%s", down[i]);
  CHECK(!mxu_monitor_is_max("val_auc", MXU_MODE_MIN));
}

/* A metric named "accuracy" after others: the logs' "accuracy" is it,
 * not the first metric (what logs say accuracy of otherwise). */
static void accuracy_by_name(void) {
  mxu_output_log o = {.name = "out",
                      .loss = 0.5,
                      .val_loss = 0.25,
                      .metric_count = 2,
                      .metrics = {"binary_crossentropy", "accuracy"},
                      .values = {0.5, 0.75},
                      .val_values = {0.25, 0.875}};
  mxu_logs logs = logs_of(0.5, &o, 1);
  logs.val_loss = 0.25;
  logs.val_accuracy = o.val_values[0];
  CHECK(mxu_logs_value(&logs, "accuracy") == 0.75);
  CHECK(mxu_logs_value(&logs, "val_accuracy") == 0.875);
  CHECK(mxu_logs_value(&logs, "binary_crossentropy") == 0.5);
  CHECK(mxu_logs_value(&logs, "val_binary_crossentropy") == 0.25);
  CHECK(isnan(mxu_logs_value(&logs, "out_accuracy")));
}

static void refusals(void) {
  mxu_status s;
  mxu_model *m = binary_with(4, "mae", "auroc", &s);
  CHECK(s == MXU_ERR_UNSUPPORTED &&
        strstr(mxu_errmsg(), "metric 'auroc' is not supported"));
  mxu_model_free(m);
  m = binary_with(4, "mae", "mae", &s);
  CHECK(s == MXU_ERR_ARG &&
        strstr(mxu_errmsg(), "'mae' of output 'out' is named twice"));
  mxu_model_free(m);
  /* Precision compares each value with a target: no class labels. */
  m = NULL;
  mxu_compile_config c = mxu_compile_defaults();
  CHECK_OK(mxu_model_load_json(DIR "metrics.h5", &m, &c, NULL));
  if (!m) return;
  c.batch_size = 4;
  c.backend = MXU_BACKEND_CPU_REF;
  c.outputs[0].loss = MXU_SPARSE_CATEGORICAL_CROSSENTROPY;
  CHECK(mxu_compile(m, &c) == MXU_ERR_UNSUPPORTED &&
        strstr(mxu_errmsg(), "metric 'precision' of output 'cls' compares "
                             "each output value with a target"));
  mxu_model_free(m);
}

/* A MeanIoU compiled on `json`'s model (its loss `loss`): the status. */
static mxu_status iou_compiled(const char *json, mxu_loss loss,
                               const char *spec, mxu_model **out) {
  mxu_model *m = NULL;
  CHECK_OK(mxu_model_load_json(json, &m, NULL, NULL));
  mxu_compile_config c = mxu_compile_defaults();
  c.loss = loss;
  c.batch_size = 4;
  c.backend = MXU_BACKEND_CPU_REF;
  c.metrics[0] = spec;
  mxu_status s = m ? mxu_compile(m, &c) : MXU_ERR_ARG;
  if (out)
    *out = m;
  else
    mxu_model_free(m);
  return s;
}

/* MeanIoU's settings: refused where its rows or true classes are not the
 * output's; both kinds and BinaryIoU written as Keras' classes and read
 * back (Keras' MeanIoU(sparse_y_true=False) read as OneHotMeanIoU, and its
 * sparse_y_pred True refused: test_json). */
static void iou_settings(void) {
#define DENSE "tests/golden/ignore_class/model.tf2.json"
#define TAGGER "tests/golden/tagging_ignore/model.tf2.json"
#define SPARSE MXU_SPARSE_CATEGORICAL_CROSSENTROPY
#define ONEHOT MXU_CATEGORICAL_CROSSENTROPY
  static const struct {
    const char *json, *spec;
    mxu_loss loss;
    mxu_status status;
    const char *says;
  } refused[] = {
      {DENSE, "mean_iou", SPARSE, MXU_ERR_ARG, "give num_classes=N"},
      {DENSE, "mean_iou(num_classes=3,ignore_class=x)", SPARSE, MXU_ERR_ARG,
       "option 'ignore_class=x' is not one of num_classes=N"},
      {DENSE, "mean_iou(num_classes=4)", SPARSE, MXU_ERR_UNSUPPORTED,
       "num_classes must be the output's last axis"},
      {DENSE, "one_hot_mean_iou(num_classes=3)", SPARSE, MXU_ERR_UNSUPPORTED,
       "it reads one-hot targets, but the sparse loss's are class labels"},
      {TAGGER, "mean_iou(num_classes=4)", ONEHOT, MXU_ERR_UNSUPPORTED,
       "over positions it reads the sparse loss's class labels"},
      {TAGGER, "one_hot_mean_iou(num_classes=4)", MXU_MEAN_SQUARED_ERROR,
       MXU_ERR_UNSUPPORTED, "it takes the categorical cross-entropies' rows"},
  };
  for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
    mxu_status s =
        iou_compiled(refused[i].json, refused[i].loss, refused[i].spec, NULL);
    CHECK_MSG(s == refused[i].status && strstr(mxu_errmsg(), refused[i].says),
              "%s: %s: %s", refused[i].spec, mxu_status_name(s), mxu_errmsg());
  }
  static const struct {
    const char *json, *spec, *cls;
    mxu_loss loss;
  } written[] = {
      {DENSE, "iou=mean_iou(num_classes=3,ignore_class=255)", "\"MeanIoU\"",
       SPARSE},
      {TAGGER, "one_hot_mean_iou(num_classes=4,ignore_class=0)",
       "\"OneHotMeanIoU\"", ONEHOT},
      {"tests/golden/binary_seg/model.tf2.json",
       "iou=binary_iou(threshold=0.25,class_id=1)", "\"BinaryIoU\"",
       MXU_BINARY_CROSSENTROPY},
  };
  for (size_t i = 0; i < sizeof written / sizeof *written; i++)
    for (int keras3 = 0; keras3 < 2; keras3++) {
      mxu_model *m = NULL, *back = NULL;
      CHECK_OK(
          iou_compiled(written[i].json, written[i].loss, written[i].spec, &m));
      char *text = NULL;
      if (m) CHECK_OK(mxu_model_to_json(m, keras3, &text));
      mxu_compile_config c = mxu_compile_defaults();
      c.batch_size = 4;
      if (text) CHECK_OK(mxu_model_from_json(text, "iou", &back, &c, NULL));
      if (back) CHECK_OK(mxu_compile(back, &c));
      CHECK_MSG(text && strstr(text, written[i].cls) && back &&
                    !strcmp(back->heads[0].metric[0], m->heads[0].metric[0]) &&
                    back->heads[0].metric_kind[0] ==
                        m->heads[0].metric_kind[0] &&
                    back->heads[0].metric_options[0].ignore_class ==
                        m->heads[0].metric_options[0].ignore_class &&
                    back->heads[0].metric_options[0].class_id ==
                        m->heads[0].metric_options[0].class_id &&
                    back->heads[0].metric_options[0].threshold ==
                        m->heads[0].metric_options[0].threshold,
                "%s, keras3 %d", written[i].spec, keras3);
      free(text);
      mxu_model_free(back);
      mxu_model_free(m);
    }
#undef DENSE
#undef TAGGER
#undef SPARSE
#undef ONEHOT
}

/* Each output's metrics, as logged and as computed, alike in both. */
static void expect_same_metrics(const mxu_model *a, const mxu_model *b,
                                const char *label) {
  CHECK_MSG(a->head_count == b->head_count, "%s: outputs", label);
  for (int h = 0; h < a->head_count && h < b->head_count; h++) {
    const mxu_head *x = &a->heads[h], *y = &b->heads[h];
    CHECK_MSG(x->metric_count == y->metric_count, "%s: output %d", label, h);
    for (int k = 0; k < x->metric_count && k < y->metric_count; k++)
      CHECK_MSG(strcmp(x->metric[k], y->metric[k]) == 0 &&
                    x->metric_kind[k] == y->metric_kind[k] &&
                    x->metric_weighted[k] == y->metric_weighted[k] &&
                    !memcmp(&x->metric_options[k], &y->metric_options[k],
                            sizeof x->metric_options[k]),
                "%s: output %d metric %d: %s, read back %s", label, h, k,
                x->metric[k], y->metric[k]);
  }
}

/* Metrics under names of their own (Keras' name=): the direction mode
 * "auto" takes from what they compute, the names through both files mxu
 * writes, and names compile refuses. */
static void named_metrics(void) {
  mxu_model *m = load(DIR "metrics.h5", MXU_BACKEND_CPU_REF, 1, "metrics");
  mxu_model *b = load(DIR "binary.keras", MXU_BACKEND_CPU_REF, 1, "binary");
  mxu_model *w = load(DIR "weighted.h5", MXU_BACKEND_CPU_REF, 1, "weighted");
  mxu_model *l = load(DIR "logits.keras", MXU_BACKEND_CPU_REF, 1, "logits");
  if (!m || !b || !w || !l) goto done;
  static const struct {
    int binary;
    const char *monitor;
    mxu_monitor_mode want;
  } modes[] = {
      {0, "val_flag_roc", MXU_MODE_MAX},
      {0, "flag_p", MXU_MODE_MAX},
      {0, "val_reg_rmse", MXU_MODE_MIN},
      {0, "val_flag_loss", MXU_MODE_AUTO},
      {0, "val_roc", MXU_MODE_AUTO},
      {1, "val_prc", MXU_MODE_MAX},
      {1, "val_Brier score", MXU_MODE_MIN},
      {1, "cross entropy", MXU_MODE_MIN},
      {1, "tp", MXU_MODE_AUTO}, /* a count: Keras 3 gives none */
  };
  for (size_t i = 0; i < sizeof modes / sizeof *modes; i++)
    CHECK_MSG(mxu_monitor_mode_for(modes[i].binary ? b : m, modes[i].monitor,
                                   MXU_MODE_AUTO) == modes[i].want,
              "%s", modes[i].monitor);
  CHECK(mxu_monitor_mode_for(b, "val_prc", MXU_MODE_MIN) == MXU_MODE_MIN);
  CHECK(!mxu_monitor_is_max("val_Brier score", MXU_MODE_AUTO)); /* by name */
  static const char *const files[] = {"named.keras", "named.h5"};
  for (int f = 0; f < 8; f++) {
    mxu_model *from = f < 2 ? m : f < 4 ? b : f < 6 ? w : l, *back = NULL;
    const char *path = temp_path(files[f % 2]);
    CHECK_OK(mxu_save_model(from, path, NULL));
    CHECK_OK(mxu_load_model(path, MXU_BACKEND_CPU_REF, &back, NULL));
    if (back) expect_same_metrics(from, back, path);
    mxu_model_free(back);
  }
done:
  mxu_model_free(m);
  mxu_model_free(b);
  mxu_model_free(w);
  mxu_model_free(l);
  static const struct {
    const char *first, *second, *needle;
  } bad[] = {
      {"mae", "=auc", "'=auc': the name it is logged under must be 1 to 63"},
      {"mae", "x=auroc", "metric 'auroc' is not supported"},
      /* the same name twice, whatever each computes */
      {"roc=auc", "roc=prc", "'roc' of output 'out' is named twice"},
      {"auc", "auc=mae", "'auc' of output 'out' is named twice"},
      /* F-scores: an average (one number), options each knows */
      {"mae", "f1_score", "'f1_score': without an average Keras logs"},
      {"mae", "f1_score(average=mean)",
       "option 'average=mean' is not one of average=micro|macro|weighted"},
      {"mae", "f1_score(average=macro,beta=2)", "option 'beta=2'"},
      {"mae", "f=fbeta_score(average=macro,beta=0)", "option 'beta=0'"},
      {"mae", "f1_score(average=macro,threshold=1.5)", "'threshold=1.5'"},
      {"mae", "mse(k=1)", "'mse(k=1)': mse takes no options"},
      {"mae", "auc(curve=PR)", "option 'curve=PR' is not one of from_logits"},
      {"mae", "accuracy(threshold=0)", "accuracy takes no options"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    mxu_status s;
    mxu_model_free(binary_with(4, bad[i].first, bad[i].second, &s));
    CHECK_MSG(s != MXU_OK && strstr(mxu_errmsg(), bad[i].needle), "%s: %s",
              bad[i].second, mxu_errmsg());
  }
  char longer[80];
  memset(longer, 'n', 64);
  strcpy(longer + 64, "=auc");
  mxu_status s;
  mxu_model_free(binary_with(4, "mae", longer, &s));
  CHECK(s == MXU_ERR_ARG && strstr(mxu_errmsg(), "1 to 63 characters"));
}

int main(void) {
  CHECK(check_temp_make("metrics"));
  static const mxu_backend_kind backends[] = {
      MXU_BACKEND_CPU_REF, MXU_BACKEND_CPU, MXU_BACKEND_PJRT};
  for (int b = 0; b < 3; b++) {
    golden_run("metrics", b == 1 ? ".keras" : ".h5", backends[b], 1);
    golden_run("binary", b == 1 ? ".h5" : ".keras", backends[b], 1);
    golden_run("weighted", b == 0 ? ".keras" : ".h5", backends[b], 1);
    golden_run("regress", b == 1 ? ".keras" : ".h5", backends[b], 1);
    golden_run("logits", b == 2 ? ".keras" : ".h5", backends[b], 1);
    golden_run("hinge", b == 0 ? ".keras" : ".h5", backends[b], 1);
    golden_run("cosine", b == 1 ? ".keras" : ".h5", backends[b], 1);
    golden_run("focal", b == 2 ? ".keras" : ".h5", backends[b], 1);
    golden_run("cfocal", b == 0 ? ".h5" : ".keras", backends[b], 1);
    golden_run("classes", b == 1 ? ".h5" : ".keras", backends[b], 1);
  }
  golden_run("classes", ".h5", MXU_BACKEND_CPU, 4);
  golden_run("metrics", ".h5", MXU_BACKEND_CPU, 4);
  golden_run("binary", ".keras", MXU_BACKEND_PJRT, 2);
  golden_run("weighted", ".keras", MXU_BACKEND_CPU, 4);
  counts_over_batches();
  auc_values();
  iou_values();
  iou_settings();
  monitor_directions();
  accuracy_by_name();
  refusals();
  named_metrics();
  check_remove_tree(check_temp_dir);
  return check_report("test_metrics");
}
