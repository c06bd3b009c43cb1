/* options.h — the command line grammar every mxu subcommand shares: one
 * positional argument, `--flag value` or `--flag=value`, typed values
 * checked on the spot, usage errors that name the flag and what would be
 * right, and --help generated from the same table. */
#ifndef MXU_CLI_OPTIONS_H
#define MXU_CLI_OPTIONS_H

#include <stdint.h>

/* Exit codes: usage errors are the caller's to fix before anything runs. */
enum { CLI_OK = 0, CLI_RUNTIME = 1, CLI_USAGE = 2 };

#define CLI_MAX_INDICES 1024

typedef enum cli_kind {
  CLI_STRING,         /* const char ** */
  CLI_POSITIVE_INT,   /* int *, 1 .. INT_MAX */
  CLI_COUNT,          /* uint64_t *, 0 .. UINT64_MAX */
  CLI_POSITIVE_FLOAT, /* float *, finite and > 0; "1/255" allowed */
  CLI_CHOICE,         /* int *: index into choices */
  CLI_INDICES,        /* cli_indices * */
  CLI_WEIGHTS,        /* cli_weights *: numbers >= 0 */
  CLI_FLAG            /* int *, set to 1; takes no value */
} cli_kind;

typedef struct cli_indices {
  int count;
  int64_t items[CLI_MAX_INDICES];
} cli_indices;

typedef struct cli_weights {
  int count;
  float items[CLI_MAX_INDICES];
} cli_weights;

typedef struct cli_option {
  const char *flag;    /* "--epochs" */
  const char *metavar; /* "N", shown in help and errors */
  const char *help;
  cli_kind kind;
  void *target;
  const char *const *choices; /* CLI_CHOICE: NULL-terminated */
  int required;
  int given; /* set by cli_parse */
} cli_option;

typedef struct cli_command {
  const char *name;       /* "train" */
  const char *positional; /* "MODEL.json" */
  const char *summary;    /* one paragraph for --help */
  cli_option *options;
  int option_count;
} cli_command;

/* Options several subcommands share, so their help reads the same. */
#define CLI_OPTION_DATA(target)                                                \
  {                                                                            \
    "--data", "DATA",                                                          \
        "a data set name (fashion-mnist, mnist, cifar10, cifar100), a "        \
        "directory (IDX, CIFAR binary, or class folders of PNG/JPEG images), " \
        "an .npz of NumPy arrays, an .npy of samples (with --labels) or a "    \
        "CSV table (with --label-column)",                                     \
        CLI_STRING, (target), NULL, 1, 0                                       \
  }
#define CLI_OPTION_LABELS(target)                                              \
  {                                                                            \
    "--labels", "FILE.npy",                                                    \
        "the labels of --data FILE.npy samples: class indices, one-hot rows "  \
        "or float targets",                                                    \
        CLI_STRING, (target), NULL, 0, 0                                       \
  }
#define CLI_OPTION_LABEL_COLUMN(target)                                        \
  {                                                                            \
    "--label-column", "NAME",                                                  \
        "with --data FILE.csv: the label column (class indices or float "      \
        "targets); every other column is a feature",                           \
        CLI_STRING, (target), NULL, 0, 0                                       \
  }
#define CLI_OPTION_WEIGHTS(target)                                             \
  {                                                                            \
    "--weights", "FILE",                                                       \
        "weights saved by mxu train --save-weights or Keras' save_weights: "   \
        "a .h5 (tf.keras 2.x) or .weights.h5 (Keras 3) file, or a whole "      \
        "model's .h5 or .keras (default: MODEL itself when it is one)",        \
        CLI_STRING, (target), NULL, 0, 0                                       \
  }
#define CLI_OPTION_RESCALE(target)                                             \
  {                                                                            \
    "--rescale", "X",                                                          \
        "multiply every sample value by X, e.g. 1/255, as in training "        \
        "(default 1)",                                                         \
        CLI_POSITIVE_FLOAT, (target), NULL, 0, 0                               \
  }

/* Parses argv (argv[0] is the subcommand's name) into the option targets
 * and *positional. Returns CLI_OK to go on, CLI_USAGE after printing a
 * usage error to stderr, or -1 after printing --help to stdout (the caller
 * exits 0). */
int cli_parse(cli_command *command, int argc, char **argv,
              const char **positional);

void cli_print_help(const cli_command *command);

/* "mxu CMD: message" and "see mxu CMD --help" on stderr; returns
 * CLI_USAGE. */
int cli_usage_error(const char *command, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* "mxu CMD: " + mxu_errmsg() on stderr; returns CLI_RUNTIME. */
int cli_runtime_error(const char *command);

/* The option with this flag, for a caller that asks whether it was
 * given. */
const cli_option *cli_find(const cli_command *command, const char *flag);

#endif
