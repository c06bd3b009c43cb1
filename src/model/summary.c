/* summary.c — model.summary() in tf.keras 2.x's table layout: 65 columns,
 * cells wrapped onto extra lines when too long, a blank line between
 * layers, thousands separators in the totals. */
#include "model/layers/layers.h"

#include <string.h>

#define LINE_LENGTH 65

static const int column_end[3] = {29, 55, 65};

static void rule(FILE *out, char c) {
  for (int i = 0; i < LINE_LENGTH; i++) fputc(c, out);
  fputc('\n', out);
}

/* Keras' print_row: each cell is cut to its column less two spaces (the
 * last column to its full width), the first cell gets a leading space, and
 * what is left of any cell goes on the next line. */
static void row(FILE *out, const char *cells[3]) {
  size_t done[3] = {0, 0, 0};
  int more = 1;
  while (more) {
    char line[2 * LINE_LENGTH];
    int used = 0, start = 0;
    more = 0;
    for (int c = 0; c < 3; c++) {
      int space = c < 2 ? 2 : 0;
      size_t cutoff = (size_t)(column_end[c] - start - space);
      size_t left = strlen(cells[c]) - done[c];
      size_t take = left < cutoff ? left : cutoff;
      used +=
          snprintf(line + used, sizeof line - (size_t)used, "%s%.*s%*s",
                   c == 0 ? " " : "", (int)take, cells[c] + done[c], space, "");
      done[c] += take;
      more |= done[c] < strlen(cells[c]);
      while (used < column_end[c]) line[used++] = ' ';
      start = column_end[c];
    }
    line[used] = 0;
    fprintf(out, "%s\n", line);
  }
}

static void with_commas(int64_t value, char *out, size_t size) {
  char digits[32];
  int n = snprintf(digits, sizeof digits, "%lld", (long long)value), j = 0;
  for (int i = 0; i < n && (size_t)j + 2 < size; i++) {
    if (i && (n - i) % 3 == 0) out[j++] = ',';
    out[j++] = digits[i];
  }
  out[j] = 0;
}

static int64_t layer_params(const mxu_layer *layer) {
  mxu_param_decl decls[MXU_MAX_LAYER_PARAMS];
  int n = mxu_layer_declare(layer, decls);
  int64_t total = 0;
  for (int k = 0; k < n; k++) total += mxu_shape_count(&decls[k].shape);
  return total;
}

void mxu_summary(const mxu_model *model, FILE *out) {
  if (!out) out = stdout;
  if (!model) return;
  fprintf(out, "Model: \"%s\"\n", model->name);
  rule(out, '_');
  const char *header[3] = {"Layer (type)", "Output Shape", "Param #"};
  row(out, header);
  rule(out, '=');
  for (int i = 0; i < model->layer_count; i++) {
    const mxu_layer *layer = &model->layers[i];
    char name[2 * MXU_NAME_SIZE], shape[96], params[32], dims[80];
    snprintf(name, sizeof name, "%s (%s)", layer->name, layer->cls->class_name);
    mxu_shape_format(&layer->out_shape, dims, sizeof dims);
    snprintf(shape, sizeof shape, "(None, %s", dims + 1);
    snprintf(params, sizeof params, "%lld", (long long)layer_params(layer));
    const char *cells[3] = {name, shape, params};
    row(out, cells);
    const char *blank[3] = {"", "", ""};
    row(out, blank); /* tf.keras >= 2.9 separates layers with a blank line */
  }
  rule(out, '=');
  char text[32];
  int64_t trainable = mxu_model_param_count(model, 1);
  int64_t fixed = mxu_model_param_count(model, 0);
  with_commas(trainable + fixed, text, sizeof text);
  fprintf(out, "Total params: %s\n", text);
  with_commas(trainable, text, sizeof text);
  fprintf(out, "Trainable params: %s\n", text);
  with_commas(fixed, text, sizeof text);
  fprintf(out, "Non-trainable params: %s\n", text);
  rule(out, '_');
}
