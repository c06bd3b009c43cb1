/* main.c — the mxu command: picks the subcommand, answers --help and
 * --version, and turns everything else into a usage error (exit 2). */
#include "cli.h"
#include "options.h"

#include <stdio.h>
#include <string.h>

typedef struct subcommand {
  const char *name;
  int (*run)(int argc, char **argv);
  const char *help;
} subcommand;

static const subcommand subcommands[] = {
    {"train", cli_train, "train a Keras model file on a data set"},
    {"evaluate", cli_evaluate, "loss and accuracy of saved weights"},
    {"predict", cli_predict, "top classes of chosen test images"},
    {"summary", cli_summary, "the model's layers and parameter counts"},
    {"plot", cli_plot, "draw a --report's curves and confusion matrix as PNG"},
    {"bench", cli_bench, "time training steps: images/s, GFLOP/s, % of peak"},
};
#define SUBCOMMAND_COUNT (int)(sizeof subcommands / sizeof *subcommands)

static void print_help(FILE *out) {
  fprintf(out, "usage: mxu COMMAND MODEL.json [options]\n\n"
               "mxu trains Keras models (model.to_json() files) in C.\n\n"
               "commands:\n");
  for (int i = 0; i < SUBCOMMAND_COUNT; i++)
    fprintf(out, "  %-10s %s\n", subcommands[i].name, subcommands[i].help);
  fprintf(out, "\n  mxu COMMAND --help   the options of a command\n"
               "  mxu --version        the version\n\n"
               "example:\n"
               "  mxu train models/fashion_mnist.json --data fashion-mnist "
               "--epochs 5\n");
}

static int usage(const char *problem, const char *arg) {
  fprintf(stderr, "mxu: %s", problem);
  if (arg) fprintf(stderr, " '%s'", arg);
  fprintf(stderr, " (train, evaluate, predict, summary, plot, bench)\n");
  fprintf(stderr, "see mxu --help\n");
  return CLI_USAGE;
}

static int run(int argc, char **argv) {
  if (argc < 2) return usage("missing COMMAND", NULL);
  const char *name = argv[1];
  if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0 ||
      strcmp(name, "help") == 0) {
    print_help(stdout);
    return CLI_OK;
  }
  if (strcmp(name, "--version") == 0) {
    printf("mxu %s\n", MXU_CLI_VERSION);
    return CLI_OK;
  }
  for (int i = 0; i < SUBCOMMAND_COUNT; i++)
    if (strcmp(name, subcommands[i].name) == 0)
      return subcommands[i].run(argc - 1, argv + 1);
  return usage("unknown command", name);
}

/* Under mpirun every process runs the same command; one that fails ends
 * the others, which would otherwise wait for it in the next exchange. */
int main(int argc, char **argv) {
  if (mxu_distributed_init(&argc, &argv) != MXU_OK) {
    fprintf(stderr, "mxu: %s\n", mxu_errmsg());
    return CLI_RUNTIME;
  }
  int code = run(argc, argv);
  if (code != CLI_OK && mxu_distributed_size() > 1) {
    fflush(NULL);
    mxu_distributed_abort(code);
  }
  mxu_distributed_finalize();
  return code;
}
