/* weights_keras3.c — Keras 3's save_weights("w.weights.h5") layout, as its
 * saving_lib writes it through H5IOStore, and its loading:
 *
 *   /vars                      attr name = the model's name (no values)
 *   /layers/conv2d/vars        attr name = "conv2d" (the layer's own name)
 *   /layers/conv2d/vars/0      kernel, float32, Keras shape
 *   /layers/conv2d/vars/1      bias
 *   /layers/max_pooling2d/vars attr name, no values
 *
 * A layer's group is named by its class, not by its name: the class in
 * snake_case, then _1, _2, ... for later layers of the same class in model
 * order (the layer named "dense_7" may well live at layers/dense). Values
 * are numbered trainable first, then non-trainable. Keras 3 adds
 * optimizer/vars for a compiled model; mxu's weights files carry no
 * optimizer state, and Keras loads the layers of a file without it.
 *
 * Loading goes by those names; when they do not fit the model (a file of
 * another architecture), by position over the file's layers that hold
 * values, in the order the file lists them, so that the message names the
 * first layer that differs. */
#include "io/weights.h"

#include <stdlib.h>
#include <string.h>

#define KERAS3_GROUP_SIZE (MXU_NAME_SIZE + 32)

/* "layers/dense_1": the group Keras 3 keeps `layer` in. */
static void group_of(const mxu_model *model, int layer, char *out,
                     size_t size) {
  const mxu_layer_class *cls = model->layers[layer].cls;
  char base[MXU_NAME_SIZE];
  mxu_snake_case(cls->class_name, base, sizeof base);
  int before = 0;
  for (int i = 0; i < layer; i++)
    before += model->layers[i].cls == cls && !model->layers[i].hidden;
  if (before)
    snprintf(out, size, "layers/%s_%d", base, before);
  else
    snprintf(out, size, "layers/%s", base);
}

/* ---- writing ----------------------------------------------------------- */

/* A vars group with the name attribute Keras 3 puts on each. */
static mxu_status create_vars(const char *path, hid_t root, const char *where,
                              const char *name, hid_t *vars) {
  MXU_TRY(mxu_h5_create_group(path, root, where, vars));
  mxu_status s = mxu_h5_write_string(path, *vars, "name", name, H5T_CSET_UTF8);
  if (s != MXU_OK) H5Gclose(*vars);
  return s;
}

static mxu_status write_layer(const mxu_model *model, int layer, hid_t root,
                              const char *path) {
  char where[KERAS3_GROUP_SIZE + 8];
  group_of(model, layer, where, KERAS3_GROUP_SIZE);
  strcat(where, "/vars");
  hid_t vars;
  MXU_TRY(create_vars(path, root, where, model->layers[layer].name, &vars));
  mxu_status s = MXU_OK;
  for (int k = 0; s == MXU_OK && k < model->layers[layer].param_count; k++) {
    const mxu_param *p = &model->params[model->layers[layer].param_first + k];
    char index[16];
    snprintf(index, sizeof index, "%d", k);
    s = mxu_h5_write_floats(path, vars, index, &p->shape,
                            mxu_param_values(model, p));
  }
  H5Gclose(vars);
  return s;
}

/* Keras saves the model's own (here: no) variables first, then walks its
 * layers. */
mxu_status mxu_keras3_write(const mxu_model *model, hid_t root,
                            const char *path) {
  hid_t vars;
  MXU_TRY(create_vars(path, root, "vars", model->name, &vars));
  H5Gclose(vars);
  for (int i = 0; i < model->layer_count; i++)
    if (!model->layers[i].hidden) MXU_TRY(write_layer(model, i, root, path));
  return MXU_OK;
}

/* ---- reading ----------------------------------------------------------- */

int mxu_keras3_detect(hid_t root) {
  return mxu_h5_has_group(root, "layers") || mxu_h5_has_group(root, "vars");
}

/* How many values the group at `where` + "/vars" holds; 0 without one. */
static mxu_status vars_count(const char *path, hid_t loc, const char *where,
                             int *count) {
  char vars_path[4096];
  snprintf(vars_path, sizeof vars_path, "%s/vars", where);
  *count = 0;
  if (!mxu_h5_has_group(loc, vars_path)) return MXU_OK;
  H5G_info_t info;
  if (H5Gget_info_by_name(loc, vars_path, &info, H5P_DEFAULT) < 0)
    return mxu_h5_fail(MXU_ERR_FORMAT, "%s: cannot list %s", path, vars_path);
  *count = (int)info.nlinks;
  return MXU_OK;
}

/* Creation order where the file kept it (h5py's track_order), else the
 * order of names, which is all a file written by h5py's default keeps. */
static H5_index_t listing_order(hid_t group) {
  hid_t gcpl = H5Gget_create_plist(group);
  unsigned flags = 0;
  if (gcpl >= 0) H5Pget_link_creation_order(gcpl, &flags);
  if (gcpl >= 0) H5Pclose(gcpl);
  return flags & H5P_CRT_ORDER_TRACKED ? H5_INDEX_CRT_ORDER : H5_INDEX_NAME;
}

static mxu_status push(const char *path, mxu_h5_strings *list,
                       const char *text) {
  char **items =
      realloc(list->items, (size_t)(list->count + 1) * sizeof *items);
  char *copy = malloc(strlen(text) + 1);
  if (items) list->items = items;
  if (!items || !copy) {
    free(copy);
    return mxu_fail(MXU_ERR_NOMEM, "%s: out of memory", path);
  }
  strcpy(copy, text);
  list->items[list->count++] = copy;
  return MXU_OK;
}

/* Entry i of /layers, kept as "layers/<name>" when its vars hold values. */
static mxu_status list_entry(const char *path, hid_t root, hid_t layers,
                             hsize_t i, mxu_h5_strings *found) {
  char name[KERAS3_GROUP_SIZE], where[KERAS3_GROUP_SIZE + 8];
  ssize_t length =
      H5Lget_name_by_idx(layers, ".", listing_order(layers), H5_ITER_INC, i,
                         name, sizeof name, H5P_DEFAULT);
  if (length < 0 || length >= (ssize_t)sizeof name)
    return mxu_h5_fail(MXU_ERR_FORMAT, "%s: /layers: cannot read entry %llu",
                       path, (unsigned long long)i);
  snprintf(where, sizeof where, "layers/%s", name);
  int count = 0;
  MXU_TRY(vars_count(path, root, where, &count));
  return count > 0 ? push(path, found, where) : MXU_OK;
}

static mxu_status list_layers(const char *path, hid_t root,
                              mxu_h5_strings *found) {
  if (!mxu_h5_has_group(root, "layers")) return MXU_OK;
  hid_t layers;
  MXU_TRY(mxu_h5_open_group(path, root, "layers", &layers));
  H5G_info_t info;
  mxu_status s = MXU_OK;
  if (H5Gget_info(layers, &info) < 0)
    s = mxu_h5_fail(MXU_ERR_FORMAT, "%s: cannot list /layers", path);
  for (hsize_t i = 0; s == MXU_OK && i < info.nlinks; i++)
    s = list_entry(path, root, layers, i, found);
  H5Gclose(layers);
  return s;
}

static int listed(const mxu_h5_strings *list, const char *where) {
  for (int i = 0; i < list->count; i++)
    if (strcmp(list->items[i], where) == 0) return 1;
  return 0;
}

/* Keras 3's names for the model's layers with weights, when the file has
 * every one of them; else the file's own list, to pair by position. */
static mxu_status pick_groups(const mxu_weights_load *load,
                              const mxu_h5_strings *file,
                              mxu_h5_strings *groups) {
  const mxu_model *model = load->model;
  for (int l = mxu_weights_next_layer(model, 0); l < model->layer_count;
       l = mxu_weights_next_layer(model, l + 1)) {
    char where[KERAS3_GROUP_SIZE];
    group_of(model, l, where, sizeof where);
    if (!listed(file, where)) {
      mxu_h5_strings_free(groups);
      for (int i = 0; i < file->count; i++)
        MXU_TRY(push(load->path, groups, file->items[i]));
      return MXU_OK;
    }
    MXU_TRY(push(load->path, groups, where));
  }
  return MXU_OK;
}

static mxu_status take_layer(mxu_weights_load *load, hid_t root,
                             const char *where, int layer, int position) {
  int count = 0;
  MXU_TRY(vars_count(load->path, root, where, &count));
  if (count != load->model->layers[layer].param_count)
    return mxu_weights_count_mismatch(load, layer, position, count, where);
  char vars_path[KERAS3_GROUP_SIZE + 8];
  snprintf(vars_path, sizeof vars_path, "%s/vars", where);
  hid_t vars;
  MXU_TRY(mxu_h5_open_group(load->path, root, vars_path, &vars));
  mxu_status s = MXU_OK;
  for (int k = 0; s == MXU_OK && k < count; k++) {
    char index[16];
    snprintf(index, sizeof index, "%d", k);
    hid_t dataset = H5Dopen2(vars, index, H5P_DEFAULT);
    if (dataset < 0) {
      s = mxu_h5_fail(MXU_ERR_FORMAT, "%s: %s has no dataset '%s'", load->path,
                      vars_path, index);
      break;
    }
    s = mxu_weights_take(load, layer, position, k, dataset);
    H5Dclose(dataset);
  }
  H5Gclose(vars);
  return s;
}

static mxu_status take_all(mxu_weights_load *load, hid_t root,
                           const mxu_h5_strings *groups) {
  const mxu_model *model = load->model;
  if (groups->count != mxu_weights_layer_total(model))
    return mxu_weights_layers_mismatch(load, groups->count);
  int layer = mxu_weights_next_layer(model, 0);
  for (int p = 0; p < groups->count; p++) {
    MXU_TRY(take_layer(load, root, groups->items[p], layer, p + 1));
    layer = mxu_weights_next_layer(model, layer + 1);
  }
  return MXU_OK;
}

mxu_status mxu_keras3_read(mxu_weights_load *load, hid_t root) {
  mxu_h5_strings file = {0, NULL}, groups = {0, NULL};
  mxu_status s = list_layers(load->path, root, &file);
  if (s == MXU_OK && file.count != mxu_weights_layer_total(load->model))
    s = mxu_weights_layers_mismatch(load, file.count);
  if (s == MXU_OK) s = pick_groups(load, &file, &groups);
  if (s == MXU_OK) s = take_all(load, root, &groups);
  mxu_h5_strings_free(&file);
  mxu_h5_strings_free(&groups);
  return s;
}
