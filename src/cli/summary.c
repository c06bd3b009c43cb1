/* summary.c — `mxu summary MODEL.json`: Keras' model.summary() table of a
 * model file, without data or weights; optionally the model written back
 * as Keras JSON in either form, which also converts between them. */
#include "cli.h"
#include "options.h"

#include <stdio.h>

static const char summary_text[] =
    "Prints the layers, output shapes and parameter counts of the Keras "
    "model in\nMODEL.json, as Keras' model.summary() does. With "
    "--save-json, also writes the\nmodel as Keras JSON that Keras' "
    "model_from_json reads.";

static const char *const json_forms[] = {"tf.keras", "keras3", NULL};

int cli_summary(int argc, char **argv) {
  const char *save_json = NULL;
  int form = 0;
  cli_option options[] = {
      {"--save-json", "FILE",
       "write the model to FILE as Keras JSON (model.to_json())", CLI_STRING,
       &save_json, NULL, 0, 0},
      {"--format", "FORM",
       "tf.keras (the tf.keras 2.x form) or keras3 (default tf.keras)",
       CLI_CHOICE, &form, json_forms, 0, 0},
  };
  cli_command cmd = {"summary", "MODEL.json", summary_text, options, 2};
  const char *path = NULL;
  int parsed = cli_parse(&cmd, argc, argv, &path);
  if (parsed != CLI_OK) return parsed < 0 ? CLI_OK : parsed;
  mxu_model *model = NULL;
  mxu_compile_config compile;
  if (cli_load_model(path, &model, &compile) != MXU_OK)
    return cli_runtime_error("summary");
  mxu_summary(model, stdout);
  int status = CLI_OK;
  if (save_json && mxu_model_save_json(model, save_json, form == 1) != MXU_OK)
    status = cli_runtime_error("summary");
  mxu_model_free(model);
  return status;
}
