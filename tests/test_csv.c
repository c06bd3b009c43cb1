/* test_csv.c — CSV tables: a 3-class table (tests/csv/blobs.csv, written
 * by make_csv.py with Python's csv module) read with its label column in
 * the middle and a quoted cell; the refusals, each naming its row and
 * column; and the mxu command training an MLP on the table alone. */
#include "check.h"
#include "data/data.h"

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  CHECK(f && fputs(text, f) >= 0);
  if (f) fclose(f);
}

static void reads_table(void) {
  mxu_dataset *data = NULL;
  CHECK_OK(mxu_load_csv("tests/csv/blobs.csv", "species", &data));
  if (!data) return;
  mxu_shape shape = mxu_dataset_shape(data);
  CHECK(mxu_dataset_count(data) == 600 && shape.rank == 1 &&
        shape.dims[0] == 4 && mxu_dataset_num_classes(data) == 3);
  const float *x = mxu_dataset_x(data);
  /* Rows 1 and 6 of the file (the quoted one): features around the
   * label column, in order. */
  CHECK(x[0] == 0.1724f && x[1] == 2.7984f && x[2] == 2.8371f &&
        x[3] == -0.9566f && mxu_dataset_labels(data)[0] == 2);
  CHECK(x[5 * 4] == -1.2744f && mxu_dataset_labels(data)[5] == 2);
  CHECK(mxu_dataset_labels(data)[1] == 1);
  mxu_dataset_free(data);
}

static void refusals(void) {
  mxu_dataset *data = NULL;
  const char *path = temp_path("t.csv");
  write_text(path, "a,label\n1,0\n2,x\n");
  EXPECT_FAIL(mxu_load_csv(path, "label", &data), MXU_ERR_FORMAT,
              "row 3, column 'label' (2): 'x' is not a finite number");
  /* A label that is no class index makes the column float targets. */
  write_text(path, "a,label\n1,0\n2,0.5\n");
  CHECK_OK(mxu_load_csv(path, "label", &data));
  CHECK(data && mxu_dataset_num_classes(data) == 0 && data->targets[1] == 0.5f);
  mxu_dataset_free(data);
  data = NULL;
  /* Without a label column every column is a feature. */
  CHECK_OK(mxu_load_csv(path, NULL, &data));
  CHECK(data && mxu_dataset_shape(data).dims[0] == 2 && !data->targets);
  mxu_dataset_free(data);
  data = NULL;
  write_text(path, "a,label\n1,0\n2\n");
  EXPECT_FAIL(mxu_load_csv(path, "label", &data), MXU_ERR_FORMAT,
              "row 3 has 1 cells, the header 2");
  write_text(path, "a,label\n1,0\n");
  EXPECT_FAIL(mxu_load_csv(path, "class", &data), MXU_ERR_FORMAT,
              "no column 'class'");
  write_text(path, "a,label\n\"1,0\n");
  EXPECT_FAIL(mxu_load_csv(path, "label", &data), MXU_ERR_FORMAT, "row 2");
  write_text(path, "a,label\nnan,0\n");
  EXPECT_FAIL(mxu_load_csv(path, "label", &data), MXU_ERR_FORMAT,
              "'nan' is not a finite number");
  write_text(path, "");
  EXPECT_FAIL(mxu_load_csv(path, "label", &data), MXU_ERR_FORMAT, "empty");
  CHECK(data == NULL);
}

/* The value after `label ` in text, or NAN. */
static double value_after(const char *text, const char *label) {
  const char *at = text ? strstr(text, label) : NULL;
  double v = NAN;
  if (at) sscanf(at + strlen(label), "%lf", &v);
  return v;
}

/* `mxu train` of table.json on blobs.csv's species, a held-out fifth, 20
 * epochs, then the flags of `more` (NULL after the last). */
static int train_table(char *const *more, char **text, char **err) {
  char *args[32] = {MXU_BIN,
                    "train",
                    (char *)temp_path("table.json"),
                    "--data",
                    "tests/csv/blobs.csv",
                    "--label-column",
                    "species",
                    "--validation-split",
                    "0.2",
                    "--epochs",
                    "20",
                    "--batch-size",
                    "16",
                    "--learning-rate",
                    "0.01"};
  int n = 15;
  while (*more && n < 31) args[n++] = *more++;
  args[n] = NULL;
  return check_run(args, text, err);
}

/* An MLP of the table's 4 features to 3 classes, trained from the command
 * line with a held-out fifth. */
static void command(void) {
  mxu_model *model = mxu_sequential("table");
  int64_t dims[1] = {4};
  CHECK_OK(mxu_add_input(model, "features", mxu_shape_make(1, dims)));
  mxu_dense_config hidden = mxu_dense_defaults(16);
  hidden.activation = MXU_RELU;
  CHECK_OK(mxu_add_dense(model, &hidden));
  mxu_dense_config out = mxu_dense_defaults(3);
  out.activation = MXU_SOFTMAX;
  CHECK_OK(mxu_add_dense(model, &out));
  const char *json = temp_path("table.json");
  CHECK_OK(mxu_model_save_json(model, json, 0));
  mxu_model_free(model);
  char *saving[] = {"--verbose", "0", "--save-weights",
                    (char *)temp_path("table.h5"), NULL};
  char *text, *err;
  int code = train_table(saving, &text, &err);
  double accuracy = 0;
  const char *at = text ? strstr(text, "test accuracy ") : NULL;
  CHECK_MSG(code == 0 && at && sscanf(at, "test accuracy %lf", &accuracy) == 1,
            "exit %d: %s %s", code, text, err);
  printf("blobs.csv, 20 epochs: held-out accuracy %.4f\n", accuracy);
  CHECK(accuracy >= 0.9);
  free(text);
  free(err);
  /* Evaluated on the whole table, and its rows' classes predicted. */
  char *evaluate[] = {MXU_BIN,
                      "evaluate",
                      (char *)json,
                      "--weights",
                      (char *)temp_path("table.h5"),
                      "--data",
                      "tests/csv/blobs.csv",
                      "--label-column",
                      "species",
                      NULL};
  code = check_run(evaluate, &text, &err);
  double all = value_after(text, "test accuracy ");
  CHECK_MSG(code == 0 && all >= 0.9, "exit %d: %s %s", code, text, err);
  free(text);
  free(err);
  const char *npy = temp_path("classes.npy");
  char *predict[] = {MXU_BIN,
                     "predict",
                     (char *)json,
                     "--weights",
                     (char *)temp_path("table.h5"),
                     "--input",
                     "tests/csv/blobs.csv",
                     "--label-column",
                     "species",
                     "--output",
                     (char *)npy,
                     NULL};
  code = check_run(predict, &text, &err);
  CHECK_MSG(code == 0, "exit %d: %s %s", code, text, err);
  free(text);
  free(err);
  mxu_dataset *pred = NULL, *data = NULL;
  CHECK_OK(mxu_load_npy(npy, NULL, &pred));
  CHECK_OK(mxu_load_csv("tests/csv/blobs.csv", "species", &data));
  int64_t n = mxu_dataset_count(data), right = 0;
  CHECK(pred && mxu_dataset_count(pred) == n &&
        mxu_dataset_shape(pred).dims[0] == 3);
  for (int64_t i = 0; pred && mxu_dataset_count(pred) == n && i < n; i++) {
    const float *row = mxu_dataset_x(pred) + 3 * i;
    int best = row[1] > row[0] ? 1 : 0;
    best = row[2] > row[best] ? 2 : best;
    right += best == mxu_dataset_labels(data)[i];
  }
  CHECK_MSG(fabs((double)right / (double)n - all) < 1e-9,
            "predict: %lld of %lld right, evaluate %g", (long long)right,
            (long long)n, all);
  mxu_dataset_free(pred);
  mxu_dataset_free(data);
}

/* A regression from the command line alone: a model file compiled with
 * mean_squared_error and the mae and root_mean_squared_error metrics,
 * trained on a table with a float target, evaluated, and its predictions
 * written as an array; --metric's list in the report. */
static void regression(void) {
  mxu_model *model = mxu_sequential("prices");
  int64_t dims[1] = {3};
  CHECK_OK(mxu_add_input(model, "features", mxu_shape_make(1, dims)));
  mxu_dense_config hidden = mxu_dense_defaults(16);
  hidden.activation = MXU_RELU;
  CHECK_OK(mxu_add_dense(model, &hidden));
  mxu_dense_config out = mxu_dense_defaults(1);
  CHECK_OK(mxu_add_dense(model, &out));
  mxu_compile_config c = mxu_compile_defaults();
  c.loss = MXU_MEAN_SQUARED_ERROR;
  c.metrics[0] = "mae";
  c.metrics[1] = "root_mean_squared_error";
  CHECK_OK(mxu_compile(model, &c));
  const char *json = temp_path("prices.json"), *w = temp_path("prices.h5");
  CHECK_OK(mxu_model_save_json(model, json, 0));
  mxu_model_free(model);
  const char *table = "tests/csv/regression.csv";
  char *train[] = {
      MXU_BIN,       "train",           (char *)json, "--data",
      (char *)table, "--label-column",  "price",      "--validation-split",
      "0.2",         "--epochs",        "40",         "--batch-size",
      "16",          "--learning-rate", "0.01",       "--save-weights",
      (char *)w,     "--verbose",       "0",          NULL};
  char *text, *err;
  int code = check_run(train, &text, &err);
  double mae = value_after(text, "test mae ");
  CHECK_MSG(code == 0 && mae < 0.2, "exit %d, held-out mae %g: %s %s", code,
            mae, text, err);
  printf("regression.csv, 40 epochs: held-out mae %.4f (targets 1..9)\n", mae);
  free(text);
  free(err);
  char *evaluate[] = {MXU_BIN,   "evaluate", (char *)json,  "--weights",
                      (char *)w, "--data",   (char *)table, "--label-column",
                      "price",   NULL};
  code = check_run(evaluate, &text, &err);
  double all = value_after(text, "test mae ");
  double rmse = value_after(text, " - test root_mean_squared_error ");
  CHECK_MSG(code == 0 && all < 0.2, "exit %d: %s %s", code, text, err);
  /* The square root of the mean square, never below the mean error. */
  CHECK_MSG(rmse >= all && rmse < 0.5, "rmse %g, mae %g: %s", rmse, all, text);
  free(text);
  free(err);
  const char *report = temp_path("prices.report.json");
  char *listed[] = {MXU_BIN,
                    "train",
                    (char *)json,
                    "--data",
                    (char *)table,
                    "--label-column",
                    "price",
                    "--validation-split",
                    "0.2",
                    "--epochs",
                    "2",
                    "--metric",
                    "mse,root_mean_squared_error",
                    "--verbose",
                    "0",
                    "--report",
                    (char *)report,
                    NULL};
  code = check_run(listed, &text, &err);
  CHECK_MSG(code == 0 && strstr(text, " - test mse ") &&
                strstr(text, " - test root_mean_squared_error ") &&
                !strstr(text, "test mae"),
            "exit %d: %s %s", code, text, err);
  free(text);
  free(err);
  char *json_text = check_slurp(report);
  double mse = value_after(json_text, "\"val_mse\":");
  rmse = value_after(json_text, "\"val_root_mean_squared_error\":");
  CHECK_MSG(fabs(sqrt(mse) - rmse) < 1e-6 * (1 + rmse), "mse %g, rmse %g: %s",
            mse, rmse, json_text);
  free(json_text);
  char *too_many[] = {
      MXU_BIN,          "train", (char *)json, "--data",   (char *)table,
      "--label-column", "price", "--metric",   "mae,,mse", NULL};
  code = check_run(too_many, &text, &err);
  CHECK_MSG(code == 2 && strstr(err, "--metric: 'mae,,mse' is not a list"),
            "exit %d: %s", code, err);
  free(text);
  free(err);
  const char *npy = temp_path("prices.npy");
  char *predict[] = {MXU_BIN,   "predict",  (char *)json,  "--weights",
                     (char *)w, "--input",  (char *)table, "--label-column",
                     "price",   "--output", (char *)npy,   NULL};
  code = check_run(predict, &text, &err);
  CHECK_MSG(code == 0, "exit %d: %s %s", code, text, err);
  free(text);
  free(err);
  /* The predictions against the table's own targets: evaluate's mae. */
  mxu_dataset *pred = NULL, *data = NULL;
  CHECK_OK(mxu_load_npy(npy, NULL, &pred));
  CHECK_OK(mxu_load_csv(table, "price", &data));
  if (pred && data && mxu_dataset_count(pred) == mxu_dataset_count(data)) {
    double sum = 0;
    int64_t n = mxu_dataset_count(data);
    for (int64_t i = 0; i < n; i++)
      sum += fabs(mxu_dataset_x(pred)[i] - data->targets[i]);
    CHECK_MSG(fabs(sum / (double)n - all) < 1e-3, "predict's mae %g, %g",
              sum / (double)n, all);
  } else {
    CHECK(0);
  }
  mxu_dataset_free(pred);
  mxu_dataset_free(data);
}

/* F-scores from the command line: the table's classes one-hot under the
 * categorical cross-entropy, a list whose options hold commas; with each
 * row's largest value its prediction, the micro average is the
 * accuracy. */
static void f_scores(void) {
  char *scores[] = {"--loss",
                    "categorical_crossentropy",
                    "--metric",
                    "accuracy,f1=f1_score(average=macro),micro=f1_score("
                    "average=micro),fbeta_score(average=weighted,beta=0.5,"
                    "threshold=0.5)",
                    "--verbose",
                    "0",
                    NULL};
  char *text, *err;
  int code = train_table(scores, &text, &err);
  double accuracy = value_after(text, "test accuracy ");
  double macro = value_after(text, " - test f1 ");
  double micro = value_after(text, " - test micro ");
  double fbeta = value_after(text, " - test fbeta_score ");
  CHECK_MSG(code == 0 && accuracy >= 0.9 && macro >= 0.85 && fbeta >= 0.85,
            "exit %d: %s %s", code, text, err);
  CHECK_MSG(fabs(micro - accuracy) < 2e-4, "micro F1 %g, accuracy %g: %s",
            micro, accuracy, text);
  free(text);
  free(err);
  scores[3] = "f1_score";
  code = train_table(scores, &text, &err);
  CHECK_MSG(code != 0 && strstr(err, "without an average Keras logs a score "
                                     "per class"),
            "exit %d: %s", code, err);
  free(text);
  free(err);
}

int main(void) {
  CHECK(check_temp_make("csv"));
  reads_table();
  refusals();
  command();
  f_scores();
  regression();
  check_remove_tree(check_temp_dir);
  return check_report("test_csv");
}
