/* summary.c — `mxu summary MODEL.json`: Keras' model.summary() table of a
 * model file, without data or weights. */
#include "cli.h"
#include "options.h"

#include <stdio.h>

static const char summary_text[] =
    "Prints the layers, output shapes and parameter counts of the Keras "
    "model in\nMODEL.json, as Keras' model.summary() does.";

int cli_summary(int argc, char **argv) {
  cli_command cmd = {"summary", "MODEL.json", summary_text, NULL, 0};
  const char *path = NULL;
  int parsed = cli_parse(&cmd, argc, argv, &path);
  if (parsed != CLI_OK) return parsed < 0 ? CLI_OK : parsed;
  mxu_model *model = NULL;
  mxu_compile_config compile;
  char metric[64];
  if (cli_load_model(path, &model, &compile, metric, sizeof metric) != MXU_OK)
    return cli_runtime_error("summary");
  mxu_summary(model, stdout);
  mxu_model_free(model);
  return CLI_OK;
}
