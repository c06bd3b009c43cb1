/* hdf5_weights.c — mxu_save_weights / mxu_load_weights: Keras' HDF5
 * weights files. The file name picks the layout on saving (.h5 / .hdf5:
 * tf.keras 2.x, .weights.h5: Keras 3); loading recognises it from the
 * content. Files are written atomically, and read in full and checked
 * before a single model value changes. */
#include "io/keras_file.h"
#include "io/weights.h"
#include "model/layers/layers.h"

#include <stdlib.h>
#include <string.h>

/* ---- which layout ------------------------------------------------------ */

typedef enum weights_layout { LAYOUT_KERAS2, LAYOUT_KERAS3 } weights_layout;

/* Keras' own rule: ".weights.h5" is Keras 3's; ".h5" and ".hdf5" are the
 * legacy (tf.keras 2.x) layout. */
static mxu_status layout_of(const char *path, weights_layout *layout) {
  *layout = mxu_ends_with(path, ".weights.h5") ? LAYOUT_KERAS3 : LAYOUT_KERAS2;
  if (mxu_ends_with(path, ".h5") || mxu_ends_with(path, ".hdf5")) return MXU_OK;
  if (mxu_ends_with(path, ".keras"))
    return mxu_fail(MXU_ERR_UNSUPPORTED,
                    "%s: a .keras file is a whole Keras 3 model (a zip "
                    "archive), not a weights file; use a .h5 (tf.keras 2.x) "
                    "or .weights.h5 (Keras 3) file name",
                    path);
  return mxu_fail(MXU_ERR_ARG,
                  "%s: unknown weights format; use a .h5 (tf.keras 2.x) or "
                  ".weights.h5 (Keras 3) file name",
                  path);
}

/* Inner messages start with the path; the entry points say who speaks. */
static mxu_status finish(mxu_status status) {
  return status == MXU_OK ? MXU_OK : mxu_fail_prefix(status, "weights: ");
}

mxu_status mxu_weights_path_check(const char *path) {
  if (!path) return mxu_fail(MXU_ERR_ARG, "weights: a path is required");
  weights_layout layout;
  return finish(layout_of(path, &layout));
}

static mxu_status check_call(const mxu_model *model, const char *path,
                             weights_layout *layout) {
  if (!model || !path)
    return mxu_fail(MXU_ERR_ARG, "a model and a path are required");
  MXU_TRY(layout_of(path, layout));
  if (!model->compiled)
    return mxu_fail(MXU_ERR_ARG,
                    "%s: compile the model first (its weights are created "
                    "at compile)",
                    path);
  return MXU_OK;
}

/* ---- what both layouts share ------------------------------------------- */

/* Keras 3 keeps a layer's weights in one group, or in its sublayers'
 * (a Bidirectional's forward and backward cells): an item each. */
static int keras3_items(const mxu_model *model, mxu_weights_layers *out) {
  int items = 0, used = 0;
  for (int i = 0; i < model->layer_count; i++) {
    const mxu_layer *layer = &model->layers[i];
    if (!layer->param_count || mxu_layer_is_call(layer)) continue;
    for (int k = 0; k < layer->param_count; k++) {
      if (k == 0 ||
          mxu_keras3_group(layer, k) != mxu_keras3_group(layer, k - 1)) {
        out->nodes[items] = i;
        out->names[items] = mxu_model_item_name(model, i);
        out->first[items++] = used;
      }
      out->size[items - 1]++;
      out->params[used++] = layer->param_first + k;
    }
  }
  return items;
}

mxu_status mxu_weights_layers_make(const mxu_model *model, int keras3,
                                   mxu_weights_layers *out) {
  int n = model->layer_count, most = keras3 ? model->param_count + 1 : n + 1;
  memset(out, 0, sizeof *out);
  out->names = calloc((size_t)most, sizeof *out->names);
  out->nodes = calloc((size_t)most, sizeof *out->nodes);
  out->first = calloc((size_t)most, sizeof *out->first);
  out->size = calloc((size_t)most, sizeof *out->size);
  out->params = calloc((size_t)model->param_count + 1, sizeof *out->params);
  if (!out->names || !out->nodes || !out->first || !out->size || !out->params) {
    mxu_weights_layers_free(out);
    return mxu_fail(MXU_ERR_NOMEM, "weights: out of memory");
  }
  if (keras3) {
    out->count = keras3_items(model, out);
    return MXU_OK;
  }
  int items = mxu_scope_layers(model, 0, out->nodes), used = 0;
  for (int l = 0; l < items; l++) {
    int item = out->nodes[l];
    out->names[l] = mxu_model_item_name(model, item);
    out->first[l] = used;
    out->size[l] = mxu_model_layer_params(model, item, out->params + used);
    used += out->size[l];
  }
  out->count = items;
  return MXU_OK;
}

void mxu_weights_layers_free(mxu_weights_layers *layers) {
  free(layers->names);
  free(layers->nodes);
  free(layers->first);
  free(layers->size);
  free(layers->params);
  memset(layers, 0, sizeof *layers);
}

int mxu_weights_layers_with_weights(const mxu_weights_layers *layers) {
  int total = 0;
  for (int l = 0; l < layers->count; l++) total += layers->size[l] > 0;
  return total;
}

static int same_shape(const mxu_shape *a, const mxu_shape *b) {
  if (a->rank != b->rank) return 0;
  for (int d = 0; d < a->rank; d++)
    if (a->dims[d] != b->dims[d]) return 0;
  return 1;
}

static mxu_status shape_mismatch(const mxu_weights_load *load,
                                 const char *layer, int position,
                                 const mxu_param *param,
                                 const mxu_shape *file) {
  char a[160], b[160];
  mxu_shape_format(file, a, sizeof a);
  mxu_shape_format(&param->shape, b, sizeof b);
  return mxu_fail(MXU_ERR_SHAPE,
                  "%s: layer '%s' (position %d): %s has shape %s in the file "
                  "but %s in the model",
                  load->path, layer, position, param->name, a, b);
}

mxu_status mxu_weights_take(mxu_weights_load *load,
                            const mxu_weights_layers *layers, int l,
                            int position, int k, hid_t dataset) {
  const mxu_model *model = load->model;
  int index = layers->params[layers->first[l] + k];
  const mxu_param *param = &model->params[index];
  mxu_shape file;
  MXU_TRY(mxu_h5_float_shape(load->path, dataset, &file));
  if (!same_shape(&file, &param->shape))
    return shape_mismatch(load, layers->names[l], position, param, &file);
  float *values =
      malloc((size_t)(param->count ? param->count : 1) * sizeof *values);
  if (!values)
    return mxu_fail(MXU_ERR_NOMEM, "%s: out of memory for %lld values",
                    load->path, (long long)param->count);
  mxu_status s = mxu_h5_read_floats(load->path, dataset, values);
  if (s != MXU_OK) {
    free(values);
    return s;
  }
  free(load->scratch[index]);
  load->scratch[index] = values;
  return MXU_OK;
}

mxu_status mxu_weights_count_mismatch(const mxu_weights_load *load,
                                      const mxu_weights_layers *layers, int l,
                                      int position, int file_count,
                                      const char *file_layer) {
  return mxu_fail(MXU_ERR_SHAPE,
                  "%s: layer '%s' (position %d): the file has %d weights for "
                  "it (from '%s') but the model has %d",
                  load->path, layers->names[l], position, file_count,
                  file_layer, layers->size[l]);
}

mxu_status mxu_weights_layers_mismatch(const mxu_weights_load *load,
                                       const mxu_weights_layers *layers,
                                       int file_layers) {
  return mxu_fail(MXU_ERR_SHAPE,
                  "%s: the file holds weights for %d layers but the model "
                  "has %d layers with weights",
                  load->path, file_layers,
                  mxu_weights_layers_with_weights(layers));
}

/* ---- saving ------------------------------------------------------------ */

static mxu_status save(const mxu_model *model, const char *path,
                       weights_layout layout) {
  mxu_h5_output out;
  MXU_TRY(mxu_h5_create(&out, path));
  mxu_status s = layout == LAYOUT_KERAS3
                     ? mxu_keras3_write(model, out.file, path)
                     : mxu_keras2_write(model, out.file, path);
  if (s != MXU_OK) {
    mxu_h5_abandon(&out);
    return s;
  }
  return mxu_h5_commit(&out);
}

mxu_status mxu_save_weights(const mxu_model *model, const char *path) {
  weights_layout layout;
  mxu_status s = check_call(model, path, &layout);
  if (s == MXU_OK) {
    mxu_h5_quiet quiet;
    mxu_h5_quiet_begin(&quiet);
    s = save(model, path, layout);
    mxu_h5_quiet_end(&quiet);
  }
  return finish(s);
}

/* ---- loading ----------------------------------------------------------- */

static mxu_status read_layout(mxu_weights_load *load, hid_t file) {
  if (mxu_keras2_detect(file)) return mxu_keras2_read(load, file);
  if (mxu_keras3_detect(file)) return mxu_keras3_read(load, file);
  return mxu_fail(MXU_ERR_FORMAT,
                  "%s: an HDF5 file without Keras weights: it has neither "
                  "tf.keras 2.x's layer_names attribute nor Keras 3's "
                  "layers group",
                  load->path);
}

/* The counts were checked layer by layer, so every weight has its values;
 * the check stays as a guard against a layout that skips one. */
static mxu_status commit(mxu_weights_load *load) {
  mxu_model *model = load->model;
  for (int i = 0; i < model->param_count; i++)
    if (!load->scratch[i])
      return mxu_fail(MXU_ERR_FORMAT, "%s: no values for %s of layer '%s'",
                      load->path, model->params[i].name,
                      model->layers[model->params[i].layer].name);
  for (int i = 0; i < model->param_count; i++) {
    const mxu_param *p = &model->params[i];
    float *to = (p->trainable ? model->weights : model->state) + p->offset;
    memcpy(to, load->scratch[i], (size_t)p->count * sizeof *to);
  }
  return MXU_OK;
}

typedef struct layout_read {
  mxu_weights_load *load;
  hid_t file;
} layout_read;

static mxu_status read_layout_of(void *ctx) {
  layout_read *r = ctx;
  return read_layout(r->load, r->file);
}

static mxu_status load_file(mxu_model *model, const char *path) {
  hid_t file;
  int foreign;
  MXU_TRY(mxu_h5_open_foreign(path, 0, &file, &foreign));
  int n = model->param_count;
  mxu_weights_load load = {path, model, calloc((size_t)n + 1, sizeof(float *))};
  layout_read r = {&load, file};
  mxu_status s = MXU_OK;
  if (!load.scratch) s = mxu_fail(MXU_ERR_NOMEM, "%s: out of memory", path);
  if (s == MXU_OK) s = mxu_h5_rehearsed(path, foreign, read_layout_of, &r);
  if (s == MXU_OK) s = commit(&load);
  for (int i = 0; load.scratch && i < n; i++) free(load.scratch[i]);
  free(load.scratch);
  mxu_h5_close(file);
  return s;
}

/* A .keras file's weights: its model.weights.h5, read from a temporary
 * copy; messages name the .keras file. */
static mxu_status load_keras_file(mxu_model *model, const char *path) {
  if (!model->compiled)
    return mxu_fail(MXU_ERR_ARG,
                    "%s: compile the model first (its weights are created "
                    "at compile)",
                    path);
  char extracted[600];
  MXU_TRY(mxu_keras_extract_weights(path, (size_t)MXU_MAX_ELEMENTS * 8,
                                    extracted, sizeof extracted));
  mxu_h5_quiet quiet;
  mxu_h5_quiet_begin(&quiet);
  mxu_status s = load_file(model, extracted);
  mxu_h5_quiet_end(&quiet);
  mxu_keras_remove_extracted(extracted);
  return mxu_keras_name_extracted(s, extracted, path);
}

mxu_status mxu_load_weights(mxu_model *model, const char *path) {
  if (model && path && mxu_ends_with(path, ".keras"))
    return finish(load_keras_file(model, path));
  weights_layout layout;
  mxu_status s = check_call(model, path, &layout);
  if (s == MXU_OK) {
    mxu_h5_quiet quiet;
    mxu_h5_quiet_begin(&quiet);
    s = load_file(model, path);
    mxu_h5_quiet_end(&quiet);
  }
  return finish(s);
}
