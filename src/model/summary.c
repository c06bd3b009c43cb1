/* summary.c — model.summary() in tf.keras 2.x's table layout: 65 columns
 * (98 with "Connected to" for a graph), cells wrapped onto extra lines when
 * too long, a blank line between layers, thousands separators in the
 * totals. */
#include "model/layers/layers.h"

#include <stdlib.h>
#include <string.h>

/* Sequential: 65 columns in three cells; a graph: 98 in four, the last
 * naming the tensors each layer reads (tf.keras' "Connected to"). */
typedef struct table {
  int length, columns;
  int end[4];
} table;

static const table sequential_table = {65, 3, {29, 55, 65, 0}};
static const table graph_table = {98, 4, {29, 58, 68, 98}};

static void rule(FILE *out, const table *t, char c) {
  for (int i = 0; i < t->length; i++) fputc(c, out);
  fputc('\n', out);
}

/* Where a cell's line ends: at its width, or sooner just after "),",
 * "}," "]," or "'," within it, where Keras breaks a list. */
static size_t cut(const char *text, size_t width) {
  static const char *const breaks[] = {"),", "},", "],", "',"};
  size_t take = strlen(text) < width ? strlen(text) : width, best = take;
  for (size_t b = 0; b < 4; b++)
    for (size_t i = 0; i + 2 <= take; i++)
      if (text[i] == breaks[b][0] && text[i + 1] == breaks[b][1]) {
        if (i + 2 < best) best = i + 2;
        break;
      }
  return best;
}

/* Keras' print_row: each cell is cut to its column less two spaces (the
 * last column to its full width; columns after the first less one more
 * in the four-column table, as Keras aligns them), the first cell gets a
 * leading space, and what is left of any cell goes on the next line. */
static void row(FILE *out, const table *t, const char *const *cells) {
  size_t done[4] = {0, 0, 0, 0};
  int more = 1;
  while (more) {
    char line[2 * 98];
    int used = 0, start = 0;
    more = 0;
    for (int c = 0; c < t->columns; c++) {
      int last = c == t->columns - 1, space = last ? 0 : 2;
      int width = t->end[c] - start - space - (t->columns == 4 && !last);
      const char *left = cells[c] + done[c];
      size_t take = cut(left, (size_t)(width > 0 ? width : 0));
      used += snprintf(line + used, sizeof line - (size_t)used, "%s%.*s%*s",
                       c == 0 ? " " : "", (int)take, left, space, "");
      done[c] += take;
      more |= done[c] < strlen(cells[c]);
      while (used < t->end[c]) line[used++] = ' ';
      start = t->end[c];
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
  int n = mxu_layer_is_call(layer) ? 0 : mxu_layer_declare(layer, decls);
  int64_t total = 0;
  for (int k = 0; k < n; k++) total += mxu_shape_count(&decls[k].shape);
  return total;
}

/* One of the model's layers: a node, or a model used as a layer (its
 * nodes' weights, its output, the tensors its InputLayers view). */
typedef struct entry {
  const char *name, *class_name;
  const mxu_layer *output;
  int64_t params;
  int first, last; /* the nodes it spans */
} entry;

static entry entry_of(const mxu_model *model, int item) {
  if (item >= 0) {
    const mxu_layer *layer = &model->layers[item];
    /* An op Keras recorded as a layer, as tf.keras 2's summary names it;
     * a wrapped layer as its wrapper, and a class by its Python name, as
     * Keras'. */
    return (entry){layer->name,
                   layer->op                  ? "TFOpLambda"
                   : layer->wrapped[0]        ? "TimeDistributed"
                   : layer->cls->python_class ? layer->cls->python_class
                                              : layer->cls->class_name,
                   layer,
                   layer_params(layer),
                   item,
                   item};
  }
  const mxu_scope *scope = &model->scopes[-1 - item];
  entry e = {scope->name,
             scope->sequential ? "Sequential" : "Functional",
             &model->layers[scope->output],
             0,
             scope->first,
             scope->last};
  for (int i = scope->first; i <= scope->last; i++)
    e.params += layer_params(&model->layers[i]);
  return e;
}

/* The tensors a layer reads from outside itself, into reads; returns how
 * many (a shared layer's calls included). */
static int outside_reads(const mxu_model *model, const entry *e, int *reads,
                         int room) {
  int count = 0;
  for (int i = 0; i < model->layer_count; i++) {
    const mxu_layer *node = &model->layers[i];
    int inside = i >= e->first && i <= e->last;
    if (!inside && (node->owner < e->first || node->owner > e->last)) continue;
    for (int k = 0; k < node->input_count; k++) {
      int t = node->inputs[k];
      if ((t < e->first || t > e->last) && count < room) reads[count++] = t;
    }
  }
  return count;
}

/* "['a[0][0]', 'b[0][0]']": the tensors a layer reads from outside it,
 * as Python prints Keras' list of them (a shared layer: every call's). */
static void connections(const mxu_model *model, const entry *e, char *out,
                        size_t size) {
  int reads[4 * MXU_MAX_INPUTS];
  int n = outside_reads(model, e, reads, 4 * MXU_MAX_INPUTS);
  size_t used = (size_t)snprintf(out, size, "[");
  for (int k = 0; k < n && used < size; k++) {
    int index = 0, tensor = 0;
    const char *name = mxu_scope_tensor(model, 0, reads[k], 0, &index, &tensor);
    used += (size_t)snprintf(out + used, size - used, "%s'%s[%d][%d]'",
                             k ? ", " : "", name, index, tensor);
  }
  if (used < size) snprintf(out + used, size - used, "]");
}

static void layer_row(FILE *out, const table *t, const mxu_model *model,
                      const entry *e) {
  char name[2 * MXU_NAME_SIZE + 16], shape[96], params[32], dims[80];
  char reads[4 * MXU_MAX_INPUTS * (MXU_NAME_SIZE + 12) + 4];
  snprintf(name, sizeof name, "%s (%s)", e->name, e->class_name);
  /* tf.keras shows an InputLayer's output as a list of one shape, and a
   * layer's of several (an RNN's return_state) as the list. */
  mxu_shape parts[MXU_MAX_INPUTS];
  const mxu_layer_class *cls = e->output->cls;
  int count = cls->output_parts ? cls->output_parts(e->output, parts) : 1;
  int input = cls == &mxu_input_layer_class && e->first == e->last;
  if (count == 1) parts[0] = e->output->out_shape;
  size_t used = (size_t)snprintf(shape, sizeof shape, "%s",
                                 input || count > 1 ? "[" : "");
  for (int k = 0; k < count && used < sizeof shape; k++) {
    mxu_shape_format(&parts[k], dims, sizeof dims);
    used += (size_t)snprintf(shape + used, sizeof shape - used, "%s(None, %s",
                             k ? ", " : "", dims + 1);
  }
  if (used < sizeof shape && (input || count > 1))
    snprintf(shape + used, sizeof shape - used, "]");
  snprintf(params, sizeof params, "%lld", (long long)e->params);
  connections(model, e, reads, sizeof reads);
  const char *cells[4] = {name, shape, params, reads};
  row(out, t, cells);
  const char *blank[4] = {"", "", "", ""};
  row(out, t, blank); /* tf.keras >= 2.9 separates layers with a blank line */
}

/* tf.keras prints a graph that is a chain (each layer reading one tensor,
 * no tensor read twice, no layer called twice) in the Sequential table. */
static int chain(const mxu_model *model, const int *items, int count) {
  int *seen = calloc((size_t)model->layer_count, sizeof *seen);
  int ok = seen != NULL;
  for (int j = 0; ok && j < count; j++) {
    entry e = entry_of(model, items[j]);
    int reads[2 * MXU_MAX_INPUTS];
    int n = outside_reads(model, &e, reads, 2 * MXU_MAX_INPUTS);
    ok = n <= 1 && (n == 0 || !seen[reads[0]]++);
  }
  free(seen);
  return ok;
}

void mxu_summary(const mxu_model *model, FILE *out) {
  if (!out) out = stdout;
  if (!model) return;
  int *items = malloc((size_t)(model->layer_count + 1) * sizeof *items);
  if (!items) return;
  int count = mxu_scope_layers(model, 0, items);
  const table *t = model->sequential || chain(model, items, count)
                       ? &sequential_table
                       : &graph_table;
  fprintf(out, "Model: \"%s\"\n", model->name);
  rule(out, t, '_');
  const char *header[4] = {"Layer (type)", "Output Shape", "Param #",
                           "Connected to"};
  row(out, t, header);
  rule(out, t, '=');
  for (int j = 0; j < count; j++) {
    entry e = entry_of(model, items[j]);
    layer_row(out, t, model, &e);
  }
  free(items);
  rule(out, t, '=');
  char text[32];
  int64_t trainable = mxu_model_param_count(model, 1);
  int64_t fixed = mxu_model_param_count(model, 0);
  with_commas(trainable + fixed, text, sizeof text);
  fprintf(out, "Total params: %s\n", text);
  with_commas(trainable, text, sizeof text);
  fprintf(out, "Trainable params: %s\n", text);
  with_commas(fixed, text, sizeof text);
  fprintf(out, "Non-trainable params: %s\n", text);
  rule(out, t, '_');
}
