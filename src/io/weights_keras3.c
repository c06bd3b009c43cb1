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

/* Keras 3 keeps each layer in a group named from its class in snake case,
 * numbered among the layers of its model with the same name (a model used
 * as a layer is "functional" or "sequential", with its own layers inside):
 * "layers/dense_1", "layers/functional/layers/conv2d". */
static const char *item_base(const mxu_model *model, int item, char *out,
                             size_t size) {
  if (item < 0)
    return model->scopes[-1 - item].sequential ? "sequential" : "functional";
  const mxu_layer *l = &model->layers[item];
  mxu_snake_case(l->wrapped[0]          ? "TimeDistributed"
                 : l->cls->python_class ? l->cls->python_class
                                        : l->cls->class_name,
                 out, size);
  return out;
}

/* An op Keras recorded as a layer (mxu_layer.op): Keras 3 lists it among
 * no model's layers, so it has no group and numbers none. */
static int is_op(const mxu_model *model, int item) {
  return item >= 0 && model->layers[item].op;
}

/* The group of item (a node, or -1 - scope) within `scope`, after its
 * scope's own path. */
static void item_group(const mxu_model *model, int scope, int item, char *out,
                       size_t size) {
  char prefix[KERAS3_GROUP_SIZE * 4] = "";
  if (scope) {
    item_group(model, model->scopes[scope].parent, -1 - scope, prefix,
               sizeof prefix);
    strncat(prefix, "/", sizeof prefix - strlen(prefix) - 1);
  }
  int *items = malloc((size_t)(model->layer_count + 1) * sizeof *items);
  int count = items ? mxu_scope_layers(model, scope, items) : 0;
  char base[MXU_NAME_SIZE], other[MXU_NAME_SIZE];
  const char *name = item_base(model, item, base, sizeof base);
  int before = 0;
  for (int j = 0; j < count && items[j] != item; j++)
    before +=
        !is_op(model, items[j]) &&
        strcmp(item_base(model, items[j], other, sizeof other), name) == 0;
  free(items);
  if (before)
    snprintf(out, size, "%slayers/%s_%d", prefix, name, before);
  else
    snprintf(out, size, "%slayers/%s", prefix, name);
}

/* "layers/dense_1": the group Keras 3 keeps node `layer` in. */
static void group_of(const mxu_model *model, int layer, char *out,
                     size_t size) {
  item_group(model, model->layers[layer].scope, layer, out, size);
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

/* Empty vars groups at `where` and at each subgroup of `sub` on the way
 * to the last ("forward_layer/cell": <where>/vars,
 * <where>/forward_layer/vars), as Keras writes its layers' sublayers;
 * leaves `where` extended by `sub`. */
static mxu_status create_path(const char *path, hid_t root, char *where,
                              size_t size, const char *name, const char *sub) {
  for (const char *part = sub, *end; part; part = end ? end + 1 : NULL) {
    size_t at = strlen(where);
    snprintf(where + at, size - at, "/vars");
    hid_t vars;
    if (!mxu_h5_has_group(root, where)) { /* a run before made it */
      MXU_TRY(create_vars(path, root, where, name, &vars));
      H5Gclose(vars);
    }
    end = strchr(part, '/');
    int length = end ? (int)(end - part) : (int)strlen(part);
    snprintf(where + at, size - at, "/%.*s", length, part);
    name = where + at + 1;
  }
  return MXU_OK;
}

/* A layer's weights in its vars, or run by run in the subgroups its class
 * names (an RNN's cell, a Bidirectional's two), each numbered from 0. */
static mxu_status write_layer(const mxu_model *model, int layer, hid_t root,
                              const char *path) {
  const mxu_layer *l = &model->layers[layer];
  mxu_status s = MXU_OK;
  int k = 0;
  do {
    char where[KERAS3_GROUP_SIZE * 5 + 8];
    group_of(model, layer, where, KERAS3_GROUP_SIZE * 4);
    const char *sub = mxu_keras3_group(l, k);
    MXU_TRY(create_path(path, root, where, sizeof where - 8, l->name, sub));
    const char *name = strrchr(where, '/') + 1;
    strcat(where, "/vars");
    hid_t vars;
    MXU_TRY(create_vars(path, root, where, sub ? name : l->name, &vars));
    for (int index = 0; s == MXU_OK && k < l->param_count &&
                        (index == 0 || mxu_keras3_group(l, k) == sub);
         k++, index++) {
      const mxu_param *p = &model->params[l->param_first + k];
      char text[16];
      snprintf(text, sizeof text, "%d", index);
      s = mxu_h5_write_floats(path, vars, text, &p->shape,
                              mxu_param_values(model, p));
    }
    H5Gclose(vars);
  } while (s == MXU_OK && k < l->param_count);
  return s;
}

/* Keras saves a model's own (here: no) variables first, then walks its
 * layers, a model used as a layer in turn. */
static mxu_status write_scope(const mxu_model *model, int scope, hid_t root,
                              const char *path) {
  char where[KERAS3_GROUP_SIZE * 4 + 8] = "vars";
  if (scope) {
    item_group(model, model->scopes[scope].parent, -1 - scope, where,
               sizeof where - 8);
    strcat(where, "/vars");
  }
  hid_t vars;
  MXU_TRY(create_vars(path, root, where,
                      scope ? model->scopes[scope].name : model->name, &vars));
  H5Gclose(vars);
  int *items = malloc((size_t)(model->layer_count + 1) * sizeof *items);
  if (!items) return mxu_fail(MXU_ERR_NOMEM, "%s: out of memory", path);
  int count = mxu_scope_layers(model, scope, items);
  mxu_status s = MXU_OK;
  for (int j = 0; s == MXU_OK && j < count; j++)
    if (!is_op(model, items[j]))
      s = items[j] < 0 ? write_scope(model, -1 - items[j], root, path)
                       : write_layer(model, items[j], root, path);
  free(items);
  return s;
}

mxu_status mxu_keras3_write(const mxu_model *model, hid_t root,
                            const char *path) {
  return write_scope(model, 0, root, path);
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

/* Entry i of the group at `at` (its "layers" subgroup), kept as
 * "<at>/layers/<name>" when its vars hold values; a model used as a layer
 * is listed layer by layer. */
static mxu_status list_group(const char *path, hid_t root, const char *at,
                             mxu_h5_strings *found);

/* The name of entry i of `group` (at `where`, for the message), in the
 * order listing_order gives. */
static mxu_status link_name(const char *path, hid_t group, const char *where,
                            hsize_t i, char name[KERAS3_GROUP_SIZE]) {
  ssize_t length =
      H5Lget_name_by_idx(group, ".", listing_order(group), H5_ITER_INC, i, name,
                         KERAS3_GROUP_SIZE, H5P_DEFAULT);
  if (length >= 0 && length < KERAS3_GROUP_SIZE) return MXU_OK;
  return mxu_h5_fail(MXU_ERR_FORMAT, "%s: /%s: cannot read entry %llu", path,
                     where, (unsigned long long)i);
}

/* The groups below a layer's that hold values, depth first: where Keras 3
 * keeps the weights of a layer's sublayers (an RNN's "cell", a
 * Bidirectional's "forward_layer/cell", MultiHeadAttention's
 * "query_dense"); a model used as a layer's "layers" are list_group's. */
static mxu_status list_sublayers(const char *path, hid_t root,
                                 const char *where, int depth,
                                 mxu_h5_strings *found) {
  if (depth > 3 || strlen(where) > KERAS3_GROUP_SIZE * 3) return MXU_OK;
  hid_t group;
  MXU_TRY(mxu_h5_open_group(path, root, where, &group));
  H5G_info_t info;
  mxu_status s = MXU_OK;
  if (H5Gget_info(group, &info) < 0)
    s = mxu_h5_fail(MXU_ERR_FORMAT, "%s: cannot list /%s", path, where);
  for (hsize_t i = 0; s == MXU_OK && i < info.nlinks; i++) {
    char name[KERAS3_GROUP_SIZE], sub[KERAS3_GROUP_SIZE * 4];
    s = link_name(path, group, where, i, name);
    if (s != MXU_OK) break;
    if (strcmp(name, "vars") == 0 || strcmp(name, "layers") == 0) continue;
    snprintf(sub, sizeof sub, "%s/%s", where, name);
    if (!mxu_h5_has_group(root, sub)) continue;
    int count = 0;
    s = vars_count(path, root, sub, &count);
    if (s == MXU_OK)
      s = count > 0 ? push(path, found, sub)
                    : list_sublayers(path, root, sub, depth + 1, found);
  }
  H5Gclose(group);
  return s;
}

static mxu_status list_entry(const char *path, hid_t root, hid_t layers,
                             const char *at, hsize_t i, mxu_h5_strings *found) {
  char name[KERAS3_GROUP_SIZE], where[KERAS3_GROUP_SIZE * 4];
  snprintf(where, sizeof where, "%slayers", at);
  MXU_TRY(link_name(path, layers, where, i, name));
  snprintf(where, sizeof where, "%slayers/%s", at, name);
  int count = 0;
  MXU_TRY(vars_count(path, root, where, &count));
  if (count > 0) return push(path, found, where);
  int pushed = found->count;
  MXU_TRY(list_sublayers(path, root, where, 0, found));
  if (found->count > pushed) return MXU_OK;
  char inner[KERAS3_GROUP_SIZE * 4 + 8];
  snprintf(inner, sizeof inner, "%s/", where);
  return list_group(path, root, inner, found);
}

static mxu_status list_group(const char *path, hid_t root, const char *at,
                             mxu_h5_strings *found) {
  char where[KERAS3_GROUP_SIZE * 4 + 8];
  snprintf(where, sizeof where, "%slayers", at);
  if (strlen(at) > KERAS3_GROUP_SIZE * 3 || !mxu_h5_has_group(root, where))
    return MXU_OK;
  hid_t layers;
  MXU_TRY(mxu_h5_open_group(path, root, where, &layers));
  H5G_info_t info;
  mxu_status s = MXU_OK;
  if (H5Gget_info(layers, &info) < 0)
    s = mxu_h5_fail(MXU_ERR_FORMAT, "%s: cannot list /%s", path, where);
  for (hsize_t i = 0; s == MXU_OK && i < info.nlinks; i++)
    s = list_entry(path, root, layers, at, i, found);
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
                              const mxu_weights_layers *layers,
                              const mxu_h5_strings *file,
                              mxu_h5_strings *groups) {
  for (int l = 0; l < layers->count; l++) {
    char where[KERAS3_GROUP_SIZE * 5];
    group_of(load->model, layers->nodes[l], where, KERAS3_GROUP_SIZE * 4);
    const mxu_layer *layer = &load->model->layers[layers->nodes[l]];
    const char *sub = mxu_keras3_group(layer, layers->params[layers->first[l]] -
                                                  layer->param_first);
    if (sub) snprintf(where + strlen(where), KERAS3_GROUP_SIZE, "/%s", sub);
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
                             const char *where,
                             const mxu_weights_layers *layers, int l,
                             int position) {
  int count = 0;
  MXU_TRY(vars_count(load->path, root, where, &count));
  if (count != layers->size[l])
    return mxu_weights_count_mismatch(load, layers, l, position, count, where);
  char vars_path[KERAS3_GROUP_SIZE * 4 + 8];
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
    s = mxu_weights_take(load, layers, l, position, k, dataset);
    H5Dclose(dataset);
  }
  H5Gclose(vars);
  return s;
}

/* Every layer of every model here has weights (the list keeps only
 * those), so file groups and layers pair one to one. */
mxu_status mxu_keras3_read(mxu_weights_load *load, hid_t root) {
  mxu_weights_layers layers;
  MXU_TRY(mxu_weights_layers_make(load->model, 1, &layers));
  mxu_h5_strings file = {0, NULL}, groups = {0, NULL};
  mxu_status s = list_group(load->path, root, "", &file);
  if (s == MXU_OK && file.count != layers.count)
    s = mxu_weights_layers_mismatch(load, &layers, file.count);
  if (s == MXU_OK) s = pick_groups(load, &layers, &file, &groups);
  for (int l = 0; s == MXU_OK && l < layers.count; l++)
    s = take_layer(load, root, groups.items[l], &layers, l, l + 1);
  mxu_h5_strings_free(&file);
  mxu_h5_strings_free(&groups);
  mxu_weights_layers_free(&layers);
  return s;
}
