/* cli.h — the mxu command's subcommands and what they share: loading the
 * model file with its compile settings, a data split with its rescaling,
 * and the JSON report. Written only against the public mxu.h. */
#ifndef MXU_CLI_H
#define MXU_CLI_H

#include <mxu.h>

/* Keep in step with project(VERSION) in CMakeLists.txt. */
#define MXU_CLI_VERSION "0.1.0"

/* Each takes argv with argv[0] the subcommand's name and returns the
 * process exit code (options.h). */
int cli_train(int argc, char **argv);
int cli_evaluate(int argc, char **argv);
int cli_predict(int argc, char **argv);
int cli_summary(int argc, char **argv);
int cli_bench(int argc, char **argv);
int cli_plot(int argc, char **argv);

/* The most inputs a model has (the library's MXU_MAX_INPUTS). */
#define CLI_MAX_INPUTS 16

/* The model file and its compile_config over mxu_compile_defaults(). */
mxu_status cli_load_model(const char *path, mxu_model **model,
                          mxu_compile_config *compile);
/* As cli_load_model, a null dimension of the input from sample. */
mxu_status cli_load_model_shaped(const char *path, const mxu_shape *sample,
                                 mxu_model **model,
                                 mxu_compile_config *compile);

/* Where a command's samples come from: --data, and for arrays and tables
 * --labels (FILE.npy) or --label-column (a CSV's), and --rescale. */
typedef struct cli_data {
  const char *data, *labels, *label_column;
  float rescale;
  /* evaluate: an .npz of x and y only is its own test split. */
  int whole;
} cli_data;

/* Samples (and, if labels, labels) from an .npy, or from an .npz: the
 * arrays named key and y<key without its x>, else x_test/y_test, else
 * x/y. */
mxu_status cli_load_arrays(const char *path, const char *key, int labels,
                           mxu_dataset **out);

/* One split of a data set for `model` (an image folder resized to its
 * input shape; arrays and tables reshaped to it; NULL: as they come),
 * multiplied by rescale unless it is 1. An .npy with --labels or a CSV
 * table is all of it either split. A model of several inputs reads an
 * .npz of an array per input, named after it (NAME_train and NAME_test
 * beside y_train and y_test, or NAME beside y). */
mxu_status cli_load_split(const cli_data *d, mxu_split split,
                          const mxu_model *model, mxu_dataset **out);

/* cli_load_model; a model whose input has a null dimension (Keras'
 * shape=(None,): a sequence of any length) takes it from the samples of
 * `split` of d (read first as they come, for their shape). */
mxu_status cli_load_model_for(const char *path, const cli_data *d,
                              mxu_split split, mxu_model **model,
                              mxu_compile_config *compile);

/* A weights file name mxu cannot read or write (not .h5, .hdf5 or
 * .weights.h5; reading, also a .keras model file) is a usage error, caught
 * before anything runs. Returns CLI_OK, or CLI_USAGE after saying why
 * (options.h). NULL path: CLI_OK. */
/* 1 when text (which may be NULL) ends with end. */
int cli_ends_with(const char *text, const char *end);

/* A whole model's file (Keras' model.save: .keras, .h5, .hdf5) rather
 * than a model JSON. */
int cli_whole_model(const char *path);

/* --weights, or the model file itself when it is a whole model (.keras,
 * .h5, .hdf5), as Keras' load_model gives weights with the model; checked
 * as cli_check_weights_path does. Returns an exit code. */
int cli_model_weights(const char *command, const char *model,
                      const char **weights);
int cli_check_weights_path(const char *command, const char *flag,
                           const char *path, int reading);

/* After compile: says on stderr (rank 0) when mixed_bfloat16 was asked
 * but the CPU computes in float32. */
/* --backend's choices, in mxu_backend_kind order, and its help. */
extern const char *const cli_backend_names[];
#define CLI_STEPS_PER_EXECUTION_HELP                                           \
  "run K steps between progress updates (Keras' steps_per_execution); on "     \
  "--backend pjrt, K steps on the devices per host round trip (default: "      \
  "the model file's, else 1)"
#define CLI_BACKEND_HELP                                                       \
  "cpu (oneDNN and mxu's kernels), cpu_ref (plain C, slow) or pjrt (the "      \
  "whole step as one XLA program on a PJRT plugin's devices, one per "         \
  "replica) (default cpu)"
#define CLI_PJRT_PLUGIN_HELP                                                   \
  "the PJRT plugin for --backend pjrt (default: $MXU_PJRT_PLUGIN, else "       \
  "XLA's CPU plugin the build fetched); TPUs: libtpu.so"

void cli_note_precision(const char *command, const mxu_model *model,
                        const mxu_compile_config *asked);

/* Seconds on a monotonic clock. */
double cli_now(void);

/* How "test loss L - test METRIC M" names the metric: "accuracy" for every
 * accuracy, else the metric's name (mae, mse, ...). */
const char *cli_metric_label(const char *metric);
/* "test loss L - test accuracy A - test precision P"; of a model of
 * several outputs (output_count > 1), the total loss and each output's
 * loss and metrics. */
void cli_print_test(double loss, const mxu_output_log *outputs,
                    int output_count);

/* The test confusion matrix of a compiled model: *matrix_out is a malloc'd
 * classes x classes array of counts, [true][predicted] row-major, the
 * prediction being the model's highest output. Samples go through
 * mxu_predict a chunk at a time, so memory stays bounded. Returns CLI_OK,
 * or CLI_RUNTIME after saying why as "mxu COMMAND: ...". */
int cli_confusion(const char *command, mxu_model *model,
                  const mxu_dataset *test, int64_t **matrix_out,
                  int *classes_out);

/* ---- report.c ---------------------------------------------------------- */

typedef struct cli_report {
  const char *model, *data, *weights; /* weights: NULL for train */
  const mxu_history *history;         /* NULL for evaluate */
  int batch_size;
  double test_loss;
  /* Each output's test loss and metrics. */
  int output_count;
  const mxu_output_log *test_outputs;
  double wall_seconds;
  /* Optional test confusion matrix (cli_confusion); NULL: none. A NULL
   * class_names, or a NULL name in it, is written as the class index. */
  const int64_t *confusion;
  int classes;
  const char *const *class_names;
} cli_report;

/* Fills report's confusion fields from the model on test (cli_confusion
 * and the data set's class names); cli_report_release frees them. Returns
 * CLI_OK or CLI_RUNTIME, as cli_confusion. */
int cli_report_confusion(const char *command, mxu_model *model,
                         const mxu_dataset *test, cli_report *report);
void cli_report_release(cli_report *report);

/* Writes the report as JSON to path, atomically. Returns CLI_OK, or
 * CLI_RUNTIME after saying why on stderr as "mxu COMMAND: ...". */
int cli_write_report(const char *command, const char *path,
                     const cli_report *report);

/* Writes path as mxu_file_write does (atomically; a FIFO or /dev/stdout
 * in place): write(file, context) renders the bytes (returning 0, or an
 * errno value). Returns 0 or an errno value. */
int cli_write_atomically(const char *path, int (*write)(FILE *, void *),
                         void *context);

#endif
