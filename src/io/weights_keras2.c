/* weights_keras2.c — tf.keras 2.x's save_weights("w.h5") layout, as its
 * hdf5_format.save_weights_to_hdf5_group writes it with h5py 3, and its
 * load_weights: layers that have weights are matched by position, the
 * file's names being informative only.
 *
 *   /                      attrs layer_names (model.layers, InputLayer
 *                          excluded, weightless layers included),
 *                          backend "tensorflow", keras_version "2.15.0"
 *   /conv2d                attr weight_names ["conv2d/kernel:0",
 *                          "conv2d/bias:0"] (an empty float64 array for a
 *                          weightless layer)
 *   /conv2d/conv2d/kernel:0  float32 (3, 3, 1, 64), contiguous
 *   /top_level_model_weights  attr weight_names [] (tf.keras >= 2.13)
 *
 * A whole-model file (model.save("m.h5")) keeps the same tree under
 * /model_weights; loading reads weights from there too. */
#include "io/weights.h"

#include <stdlib.h>
#include <string.h>

#define KERAS2_BACKEND "tensorflow"
#define KERAS2_VERSION "2.15.0"

/* ---- writing ----------------------------------------------------------- */

static mxu_status write_layer_names(const mxu_weights_layers *layers,
                                    hid_t root, const char *path) {
  return mxu_h5_write_strings(path, root, "layer_names", layers->names,
                              layers->count);
}

/* TF 2 names a variable inside its layer's name scope: "dense/kernel:0"
 * (inside a model used as a layer, the name of its own layer). */
typedef char weight_name[2 * MXU_NAME_SIZE + 8];

static mxu_status write_layer(const mxu_model *model,
                              const mxu_weights_layers *layers, int l,
                              hid_t root, const char *path) {
  int count = layers->size[l];
  const int *params = layers->params + layers->first[l];
  weight_name *names = calloc((size_t)count + 1, sizeof *names);
  const char **items = calloc((size_t)count + 1, sizeof *items);
  mxu_status s = names && items
                     ? MXU_OK
                     : mxu_fail(MXU_ERR_NOMEM, "%s: out of memory", path);
  for (int k = 0; s == MXU_OK && k < count; k++) {
    const mxu_param *p = &model->params[params[k]];
    snprintf(names[k], sizeof names[k], "%s/%s:0", model->layers[p->layer].name,
             p->name);
    items[k] = names[k];
  }
  hid_t group = H5I_INVALID_HID;
  if (s == MXU_OK)
    s = mxu_h5_create_group(path, root, layers->names[l], &group);
  if (s == MXU_OK)
    s = mxu_h5_write_strings(path, group, "weight_names", items, count);
  for (int k = 0; s == MXU_OK && k < count; k++) {
    const mxu_param *p = &model->params[params[k]];
    s = mxu_h5_write_floats(path, group, names[k], &p->shape,
                            mxu_param_values(model, p));
  }
  if (group >= 0) H5Gclose(group);
  free(names);
  free(items);
  return s;
}

static const mxu_weights_layers *sorting; /* qsort's context */

static int by_name(const void *a, const void *b) {
  return strcmp(sorting->names[*(const int *)a],
                sorting->names[*(const int *)b]);
}

/* Keras creates the groups sorted by layer name ("so that group names are
 * strictly growing"); the order of layer_names is what loading uses. */
static mxu_status write_layers(const mxu_model *model,
                               const mxu_weights_layers *layers, hid_t root,
                               const char *path) {
  int n = layers->count;
  int *order = malloc((size_t)(n + 1) * sizeof *order);
  if (!order) return mxu_fail(MXU_ERR_NOMEM, "%s: out of memory", path);
  for (int i = 0; i < n; i++) order[i] = i;
  sorting = layers;
  qsort(order, (size_t)n, sizeof *order, by_name);
  sorting = NULL;
  mxu_status s = MXU_OK;
  for (int i = 0; s == MXU_OK && i < n; i++)
    s = write_layer(model, layers, order[i], root, path);
  free(order);
  return s;
}

/* A Sequential model owns no weights outside its layers. */
static mxu_status write_top_level(hid_t root, const char *path) {
  hid_t group;
  MXU_TRY(mxu_h5_create_group(path, root, "top_level_model_weights", &group));
  mxu_status s = mxu_h5_write_strings(path, group, "weight_names", NULL, 0);
  H5Gclose(group);
  return s;
}

mxu_status mxu_keras2_write(const mxu_model *model, hid_t root,
                            const char *path) {
  mxu_weights_layers layers;
  MXU_TRY(mxu_weights_layers_make(model, 0, &layers));
  mxu_status s = write_layer_names(&layers, root, path);
  if (s == MXU_OK)
    s = mxu_h5_write_string(path, root, "backend", KERAS2_BACKEND,
                            H5T_CSET_ASCII);
  if (s == MXU_OK)
    s = mxu_h5_write_string(path, root, "keras_version", KERAS2_VERSION,
                            H5T_CSET_ASCII);
  if (s == MXU_OK) s = write_layers(model, &layers, root, path);
  mxu_weights_layers_free(&layers);
  return s == MXU_OK ? write_top_level(root, path) : s;
}

/* ---- reading ----------------------------------------------------------- */

static int has_layer_names(hid_t group) {
  return H5Aexists(group, "layer_names") > 0 ||
         H5Aexists(group, "layer_names0") > 0;
}

int mxu_keras2_detect(hid_t root) {
  if (has_layer_names(root)) return 1;
  if (!mxu_h5_has_group(root, "model_weights")) return 0;
  hid_t group = H5Gopen2(root, "model_weights", H5P_DEFAULT);
  int found = group >= 0 && has_layer_names(group);
  if (group >= 0) H5Gclose(group);
  return found;
}

/* The file's layers that have weights, in layer_names order. */
typedef struct file_layer {
  char *name;
  mxu_h5_strings weights;
} file_layer;

typedef struct file_layers {
  int count;
  file_layer *items;
} file_layers;

static void free_layers(file_layers *layers) {
  for (int i = 0; i < layers->count; i++) {
    free(layers->items[i].name);
    mxu_h5_strings_free(&layers->items[i].weights);
  }
  free(layers->items);
}

/* As Keras: a group without weight_names counts as weightless. */
static mxu_status add_layer(const char *path, hid_t base, const char *name,
                            file_layers *layers) {
  hid_t group;
  MXU_TRY(mxu_h5_open_group(path, base, name, &group));
  mxu_h5_strings weights;
  int found = 0;
  mxu_status s =
      mxu_h5_read_strings(path, group, "weight_names", &weights, &found);
  H5Gclose(group);
  if (s != MXU_OK || weights.count == 0) return s;
  file_layer *entry = &layers->items[layers->count];
  entry->name = malloc(strlen(name) + 1);
  if (!entry->name) {
    mxu_h5_strings_free(&weights);
    return mxu_fail(MXU_ERR_NOMEM, "%s: out of memory", path);
  }
  strcpy(entry->name, name);
  entry->weights = weights;
  layers->count++;
  return MXU_OK;
}

static mxu_status list_layers(const char *path, hid_t base,
                              file_layers *layers) {
  mxu_h5_strings names;
  int found = 0;
  MXU_TRY(mxu_h5_read_strings(path, base, "layer_names", &names, &found));
  layers->items = calloc((size_t)names.count + 1, sizeof *layers->items);
  mxu_status s = MXU_OK;
  if (!layers->items) s = mxu_fail(MXU_ERR_NOMEM, "%s: out of memory", path);
  for (int i = 0; s == MXU_OK && i < names.count; i++)
    s = add_layer(path, base, names.items[i], layers);
  mxu_h5_strings_free(&names);
  return s;
}

static mxu_status take_dataset(mxu_weights_load *load, hid_t group,
                               const char *name,
                               const mxu_weights_layers *layers, int l,
                               int position, int k) {
  hid_t dataset = H5Dopen2(group, name, H5P_DEFAULT);
  if (dataset < 0)
    return mxu_h5_fail(MXU_ERR_FORMAT,
                       "%s: %s lists '%s' in weight_names but has no such "
                       "dataset",
                       load->path, mxu_h5_where(group), name);
  mxu_status s = mxu_weights_take(load, layers, l, position, k, dataset);
  H5Dclose(dataset);
  return s;
}

static mxu_status take_layer(mxu_weights_load *load, hid_t base,
                             const file_layer *from,
                             const mxu_weights_layers *layers, int l,
                             int position) {
  if (from->weights.count != layers->size[l])
    return mxu_weights_count_mismatch(load, layers, l, position,
                                      from->weights.count, from->name);
  hid_t group;
  MXU_TRY(mxu_h5_open_group(load->path, base, from->name, &group));
  mxu_status s = MXU_OK;
  for (int k = 0; s == MXU_OK && k < from->weights.count; k++)
    s = take_dataset(load, group, from->weights.items[k], layers, l, position,
                     k);
  H5Gclose(group);
  return s;
}

/* Keras' load_weights_from_hdf5_group: by position over the layers that
 * have weights, the counts first. */
static mxu_status take_all(mxu_weights_load *load, hid_t base,
                           const file_layers *file) {
  mxu_weights_layers layers;
  MXU_TRY(mxu_weights_layers_make(load->model, 0, &layers));
  mxu_status s = MXU_OK;
  if (file->count != mxu_weights_layers_with_weights(&layers))
    s = mxu_weights_layers_mismatch(load, &layers, file->count);
  int l = 0;
  for (int p = 0; s == MXU_OK && p < file->count; p++, l++) {
    while (layers.size[l] == 0) l++;
    s = take_layer(load, base, &file->items[p], &layers, l, p + 1);
  }
  mxu_weights_layers_free(&layers);
  return s;
}

mxu_status mxu_keras2_read(mxu_weights_load *load, hid_t root) {
  hid_t base = root, model_weights = H5I_INVALID_HID;
  if (!has_layer_names(root)) {
    MXU_TRY(
        mxu_h5_open_group(load->path, root, "model_weights", &model_weights));
    base = model_weights;
  }
  file_layers layers = {0, NULL};
  mxu_status s = list_layers(load->path, base, &layers);
  if (s == MXU_OK) s = take_all(load, base, &layers);
  free_layers(&layers);
  if (model_weights >= 0) H5Gclose(model_weights);
  return s;
}
