/* common.c — what the subcommands share once their options are parsed:
 * the model file with its compile settings and a rescaled data split. */
#include "cli.h"
#include "options.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

int cli_check_weights_path(const char *command, const char *flag,
                           const char *path) {
  if (!path || mxu_weights_path_check(path) == MXU_OK) return CLI_OK;
  /* The library says "weights: "; the flag says it better here. */
  const char *why = mxu_errmsg();
  if (strncmp(why, "weights: ", 9) == 0) why += 9;
  return cli_usage_error(command, "%s: %s", flag, why);
}

mxu_status cli_load_model(const char *path, mxu_model **model,
                          mxu_compile_config *compile, char *metric,
                          size_t metric_size) {
  *compile = mxu_compile_defaults();
  int has_compile = 0;
  mxu_status status = mxu_model_load_json(path, model, compile, &has_compile);
  if (status != MXU_OK) return status;
  /* The config's metric may point into memory the loader owns; the
   * commands keep it past that. */
  snprintf(metric, metric_size, "%s",
           compile->metric ? compile->metric : "accuracy");
  compile->metric = metric;
  return MXU_OK;
}

mxu_status cli_load_split(const char *data, mxu_split split, float rescale,
                          mxu_dataset **out) {
  mxu_status status = mxu_load_dataset(data, split, out);
  if (status == MXU_OK && rescale != 1.0f) mxu_dataset_rescale(*out, rescale);
  return status;
}

double cli_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
