/* evaluate.c — `mxu evaluate MODEL.json --weights FILE --data DATA`: the
 * loss and accuracy of saved weights on DATA's test split, every sample
 * scored once, as Keras' model.evaluate. */
#include "cli.h"
#include "options.h"

#include <stdio.h>
#include <string.h>

typedef struct evaluate_args {
  const char *model, *weights, *data, *labels, *label_column, *report;
  int batch_size;
  float rescale;
} evaluate_args;

#define EVALUATE_OPTION_COUNT 7

static void evaluate_options(evaluate_args *a, cli_option *o) {
  cli_option table[EVALUATE_OPTION_COUNT] = {
      CLI_OPTION_WEIGHTS(&a->weights),
      CLI_OPTION_DATA(&a->data),
      CLI_OPTION_LABELS(&a->labels),
      CLI_OPTION_LABEL_COLUMN(&a->label_column),
      {"--batch-size", "B",
       "samples per step (default 32); the result does not depend on it",
       CLI_POSITIVE_INT, &a->batch_size, NULL, 0, 0},
      CLI_OPTION_RESCALE(&a->rescale),
      {"--report", "FILE",
       "write the result and the test confusion matrix as JSON to FILE",
       CLI_STRING, &a->report, NULL, 0, 0},
  };
  memcpy(o, table, sizeof table);
}

static const char evaluate_summary[] =
    "Evaluates the Keras model in MODEL.json with saved weights on DATA's "
    "test\nsplit and prints its loss and accuracy.";

typedef struct evaluate_run {
  mxu_model *model;
  mxu_dataset *test;
  mxu_compile_config compile;
  double loss;
  mxu_output_log outputs[MXU_MAX_OUTPUTS];
} evaluate_run;

static mxu_status run_evaluate(const evaluate_args *a, evaluate_run *run) {
  cli_data data = {a->data, a->labels, a->label_column, a->rescale, 1};
  mxu_status s =
      cli_load_model_for(a->model, &data, MXU_TEST, &run->model, &run->compile);
  if (s == MXU_OK) s = cli_load_split(&data, MXU_TEST, run->model, &run->test);
  if (s != MXU_OK) return s;
  run->compile.batch_size = a->batch_size;
  s = mxu_compile(run->model, &run->compile);
  if (s == MXU_OK) s = mxu_load_weights(run->model, a->weights);
  if (s == MXU_OK)
    s = mxu_evaluate_outputs(run->model, run->test, 0, &run->loss,
                             run->outputs);
  if (s != MXU_OK) return s;
  cli_print_test(run->loss, run->outputs, mxu_model_output_count(run->model));
  fflush(stdout);
  return MXU_OK;
}

int cli_evaluate(int argc, char **argv) {
  double start = cli_now();
  evaluate_args a = {0};
  a.batch_size = 32;
  a.rescale = 1.0f;
  cli_option options[EVALUATE_OPTION_COUNT];
  evaluate_options(&a, options);
  cli_command cmd = {"evaluate", "MODEL.json", evaluate_summary, options,
                     EVALUATE_OPTION_COUNT};
  int parsed = cli_parse(&cmd, argc, argv, &a.model);
  if (parsed != CLI_OK) return parsed < 0 ? CLI_OK : parsed;
  parsed = cli_model_weights("evaluate", a.model, &a.weights);
  if (parsed != CLI_OK) return parsed;

  evaluate_run run = {0};
  int code = CLI_OK;
  if (run_evaluate(&a, &run) != MXU_OK) {
    code = cli_runtime_error("evaluate");
  } else if (a.report) {
    cli_report report = {.model = a.model,
                         .data = a.data,
                         .weights = a.weights,
                         .batch_size = a.batch_size,
                         .test_loss = run.loss,
                         .output_count = mxu_model_output_count(run.model),
                         .test_outputs = run.outputs};
    /* The confusion matrix only for a report: it costs a second pass. */
    code = cli_report_confusion("evaluate", run.model, run.test, &report);
    report.wall_seconds = cli_now() - start;
    if (code == CLI_OK) code = cli_write_report("evaluate", a.report, &report);
    cli_report_release(&report);
  }
  mxu_model_free(run.model);
  mxu_dataset_free(run.test);
  return code;
}
