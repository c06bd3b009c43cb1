/* model_file.c — mxu_save_model, mxu_load_model and mxu_restore_model: the
 * whole model as tf.keras 2.x's model.save("m.h5") lays it out, optimizer
 * state included, plus mxu's training position, so a run resumes bit for
 * bit. Files are written atomically and read in full before the model
 * changes.
 *
 *   /                  attrs model_config, training_config (JSON text),
 *                      backend, keras_version; mxu_format_version,
 *                      mxu_batch_size and, for a checkpoint, mxu_epoch,
 *                      mxu_step, mxu_seed; mxu_checksum over every value
 *   /model_weights     the save_weights("w.h5") tree (weights_keras2.c)
 *   /optimizer_weights attr weight_names ["Adam/iter:0",
 *                      "Adam/conv2d/kernel/m:0", ..., ".../v:0"];
 *                      /optimizer_weights/Adam/iter:0 int64,
 *                      /optimizer_weights/Adam/conv2d/kernel/m:0 float32 */
#include "io/json.h"
#include "io/keras_file.h"
#include "io/weights.h"
#include "model/layers/layers.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MODEL_FORMAT_VERSION 1
#define KERAS2_BACKEND "tensorflow"
#define KERAS2_VERSION "2.15.0"

/* Inner messages start with the path; the entry points say who speaks. */
static mxu_status finish(mxu_status status) {
  return status == MXU_OK ? MXU_OK : mxu_fail_prefix(status, "model file: ");
}

/* ---- the optimizer's variables ----------------------------------------- */

/* An optimizer's variables in the order a file keeps them: tf.keras'
 * legacy optimizers (iter, then one slot per trainable weight for each
 * slot kind, Adam's all m then all v); tf.keras 2.11+'s (mxu's .h5:
 * iteration, then each weight's m and v in turn); Keras 3's (iteration,
 * learning_rate, then the same). SGD keeps one slot (momentum), or none
 * without momentum (but tf.keras 2.11+ keeps it). */
typedef enum slot_layout {
  SLOTS_LEGACY = 0,
  SLOTS_KERAS2,
  SLOTS_KERAS3
} slot_layout;

typedef char slot_name[2 * MXU_NAME_SIZE + 32];

typedef struct slot_list {
  const char *optimizer; /* "Adam" or "SGD" */
  slot_layout layout;
  int count;      /* entries, iteration (and learning_rate) included */
  int first_slot; /* the first entry that is a slot */
  int slot_end;   /* past the last; a Nadam u_product may follow */
  slot_name *names;
  const char **items; /* names, as the string-list writer takes them */
  int *param;         /* entry -> model->params index (-1 before first_slot) */
  float **buffer;     /* entry -> slot_m or slot_v (NULL before first_slot) */
} slot_list;

static void slot_list_free(slot_list *list) {
  free(list->names);
  free(list->items);
  free(list->param);
  free(list->buffer);
  memset(list, 0, sizeof *list);
}

/* The optimizer's slot kinds as the layout names them, and their
 * buffers; returns how many. */
static int slot_kinds(const mxu_model *model, slot_layout layout,
                      const char *kinds[MXU_SLOTS], float *buffers[MXU_SLOTS]) {
  mxu_slot_spec spec = mxu_optimizer_slots(&model->compile.optimizer);
  int n = 0;
  for (int k = 0; k < MXU_SLOTS; k++) {
    const char *kind = layout == SLOTS_KERAS3   ? spec.keras3[k]
                       : layout == SLOTS_KERAS2 ? spec.keras2[k]
                                                : spec.legacy[k];
    if (!kind) continue;
    kinds[n] = kind;
    buffers[n++] = mxu_slot_buffer(model, k);
  }
  return n;
}

static void name_slot(const mxu_model *model, slot_list *list, int e,
                      const mxu_param *p, const char *kind) {
  const char *layer = model->layers[p->layer].name, *o = list->optimizer;
  if (list->layout == SLOTS_LEGACY)
    snprintf(list->names[e], sizeof list->names[e], "%s/%s/%s/%s:0", o, layer,
             p->name, kind);
  else if (list->layout == SLOTS_KERAS2)
    snprintf(list->names[e], sizeof list->names[e], "%s/%s/%s/%s:0", o, kind,
             layer, p->name);
  else
    snprintf(list->names[e], sizeof list->names[e], "%s/%s_%s_%s",
             mxu_optimizer_name(model->compile.optimizer.kind), layer, p->name,
             kind);
}

/* Kinds first .. end - 1 weight by weight (each weight's together), or
 * kind by kind, from entry *e on. */
static void fill_kinds(const mxu_model *model, slot_list *list, int by_weight,
                       const char *const *kinds, float *const *buffers,
                       int first, int end, int *e) {
  int n = end - first;
  for (int outer = 0; outer < (by_weight ? model->param_count : n); outer++)
    for (int inner = 0; inner < (by_weight ? n : model->param_count); inner++) {
      int k = first + (by_weight ? inner : outer);
      int i = by_weight ? outer : inner;
      const mxu_param *p = &model->params[i];
      if (!p->trainable) continue;
      name_slot(model, list, *e, p, kinds[k]);
      list->param[*e] = i;
      list->buffer[(*e)++] = buffers[k];
    }
}

/* The weights' moving average first (Keras' base class builds it before
 * the optimizer's own); then the first two kinds weight by weight or
 * kind by kind; a third (AMSGrad's, centered RMSprop's), which Keras
 * builds on its own, after them. */
static void fill_slot_entries(const mxu_model *model, slot_list *list,
                              int by_weight) {
  const char *kinds[MXU_SLOTS];
  float *buffers[MXU_SLOTS];
  int n = slot_kinds(model, list->layout, kinds, buffers);
  int paired = n < 2 ? n : 2, e = list->first_slot;
  if (mxu_optimizer_slots(&model->compile.optimizer).average) {
    const char *average[] = {"average"};
    float *const buffer[] = {model->average};
    fill_kinds(model, list, 0, average, buffer, 0, 1, &e);
  }
  fill_kinds(model, list, by_weight, kinds, buffers, 0, paired, &e);
  fill_kinds(model, list, by_weight, kinds, buffers, paired, n, &e);
}

static void fill_slots(const mxu_model *model, slot_list *list) {
  const char *lower = mxu_optimizer_name(model->compile.optimizer.kind);
  if (list->layout == SLOTS_LEGACY)
    snprintf(list->names[0], sizeof list->names[0], "%s/iter:0",
             list->optimizer);
  else if (list->layout == SLOTS_KERAS2)
    snprintf(list->names[0], sizeof list->names[0], "iteration:0");
  else
    snprintf(list->names[0], sizeof list->names[0], "%s/iteration", lower);
  if (list->first_slot == 2)
    snprintf(list->names[1], sizeof list->names[1], "%s/learning_rate", lower);
  for (int e = 0; e < list->count; e++) list->param[e] = -1;
  mxu_slot_spec spec = mxu_optimizer_slots(&model->compile.optimizer);
  /* Legacy optimizers go kind by kind; Keras 3 and tf.keras 2.11+ as the
   * spec says. */
  fill_slot_entries(model, list,
                    list->layout != SLOTS_LEGACY && spec.interleaved);
  if (list->slot_end < list->count)
    snprintf(list->names[list->slot_end], sizeof list->names[0], "%s/u_product",
             lower);
  for (int i = 0; i < list->count; i++) list->items[i] = list->names[i];
}

static mxu_status slot_list_make(const mxu_model *model, slot_layout layout,
                                 slot_list *list) {
  const char *kinds[MXU_SLOTS];
  float *buffers[MXU_SLOTS];
  int trainable = 0;
  for (int i = 0; i < model->param_count; i++)
    trainable += model->params[i].trainable;
  memset(list, 0, sizeof *list);
  list->optimizer = mxu_optimizer_class_name(model->compile.optimizer.kind);
  list->layout = layout;
  /* Keras 3 keeps the rate as a variable, unless a schedule gives it. */
  list->first_slot =
      layout == SLOTS_KERAS3 &&
              model->compile.optimizer.schedule.kind == MXU_DECAY_NONE
          ? 2
          : 1;
  mxu_slot_spec spec = mxu_optimizer_slots(&model->compile.optimizer);
  int per_weight = slot_kinds(model, layout, kinds, buffers) + spec.average;
  list->slot_end = list->first_slot + per_weight * trainable;
  /* Keras 3's Nadam keeps its schedule product after the slots. */
  list->count = list->slot_end + (layout == SLOTS_KERAS3 && spec.u_product);
  size_t n = (size_t)list->count;
  list->names = calloc(n, sizeof *list->names);
  list->items = calloc(n, sizeof *list->items);
  list->param = calloc(n, sizeof *list->param);
  list->buffer = calloc(n, sizeof *list->buffer);
  if (!list->names || !list->items || !list->param || !list->buffer) {
    slot_list_free(list);
    return mxu_fail(MXU_ERR_NOMEM, "out of memory");
  }
  fill_slots(model, list);
  return MXU_OK;
}

/* ---- checksum ---------------------------------------------------------- */

/* HDF5 keeps no checksum over contiguous raw data (and Keras rejects the
 * chunked layout that could carry one), so a flipped byte in a weight
 * would load silently; mxu_checksum, over every value restored, catches
 * it. A word-wise FNV-1a: cheap next to writing the bytes. */
#define CHECKSUM_START 0xcbf29ce484222325ull
#define CHECKSUM_PRIME 0x100000001b3ull

static uint64_t checksum_floats(uint64_t h, const float *values, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    uint32_t word;
    memcpy(&word, &values[i], sizeof word);
    h = (h ^ word) * CHECKSUM_PRIME;
  }
  return h;
}

/* weights[i] / slots[e]: the values of param i / slot entry e, in the
 * order the model's tables give, then the iteration count. */
static uint64_t checksum(const mxu_model *model, const slot_list *list,
                         const float *const *weights, const float *const *slots,
                         int64_t iterations) {
  uint64_t h = CHECKSUM_START;
  for (int i = 0; i < model->param_count; i++)
    h = checksum_floats(h, weights[i], model->params[i].count);
  for (int e = list->first_slot; e < list->slot_end; e++)
    if (slots[e])
      h = checksum_floats(h, slots[e], model->params[list->param[e]].count);
  return (h ^ (uint64_t)iterations) * CHECKSUM_PRIME;
}

/* The same sum over the model's own buffers. */
static mxu_status model_checksum(const mxu_model *model, const slot_list *list,
                                 uint64_t *out) {
  size_t n = (size_t)model->param_count + (size_t)list->count + 1;
  const float **views = calloc(n, sizeof *views);
  if (!views) return mxu_fail(MXU_ERR_NOMEM, "out of memory");
  const float **slots = views + model->param_count;
  for (int i = 0; i < model->param_count; i++) {
    const mxu_param *p = &model->params[i];
    views[i] = (p->trainable ? model->weights : model->state) + p->offset;
  }
  for (int e = list->first_slot; e < list->slot_end; e++)
    slots[e] = list->buffer[e] + model->params[list->param[e]].offset;
  *out = checksum(model, list, views, slots, model->iterations);
  free(views);
  return MXU_OK;
}

/* ---- saving ------------------------------------------------------------ */

/* tf.keras 2.x's MeanMetricWrapper of a metric under its name. */
static cJSON *metric_wrapper(mxu_json_out *out, const char *name,
                             const char *fn) {
  cJSON *config = cJSON_CreateObject();
  mxu_json_put_string(out, config, "name", name);
  mxu_json_put_string(out, config, "dtype", "float32");
  mxu_json_put_string(out, config, "fn", fn);
  return mxu_json_object(out, "", "MeanMetricWrapper", config);
}

/* Head k's metrics as tf.keras 2.x saves them: the functions wrapped
 * (tf.keras 2.x compiles "accuracy" into the function matching the loss:
 * binary_accuracy for the binary cross-entropy or a one-value output), the
 * classes by their configs; with `prefix`, each named after its output
 * ("cls_accuracy"); [null] for none. */
static cJSON *head_metrics(mxu_json_out *out, const mxu_model *model, int k,
                           int prefix, int weighted) {
  const mxu_head *h = &model->heads[k];
  cJSON *list = cJSON_CreateArray();
  int count = 0;
  for (int m = 0; m < h->metric_count; m++) {
    if (h->metric_weighted[m] != weighted) continue;
    count++;
    char name[2 * MXU_NAME_SIZE + 64];
    snprintf(name, sizeof name, "%s%s%s",
             prefix ? mxu_json_output_name(model, k) : "", prefix ? "_" : "",
             h->metric[m]);
    /* A metric with options (a threshold) is only a class's. */
    const char *spec = h->metric_spec[m];
    int options = *spec && spec[strlen(spec) - 1] == ')';
    cJSON *object = mxu_json_metric_class(out, name, h->metric_kind[m],
                                          &h->metric_options[m], options);
    mxu_json_append(
        out, list,
        object ? object
               : metric_wrapper(out, name,
                                mxu_metric_function(h->metric_kind[m])));
  }
  if (!count) mxu_json_append(out, list, cJSON_CreateNull());
  return list;
}

/* The metrics (or weighted metrics: null for none), a list per output in
 * the model's order (one for a model of one output), as tf.keras 2.x
 * saves them; a weighted one under its logged name ("weighted_accuracy"
 * beside "accuracy"), as tf.keras 2.x does. */
static cJSON *metrics_value(mxu_json_out *out, const mxu_model *model,
                            int weighted) {
  int any = 0;
  for (int k = 0; k < model->head_count; k++)
    any |= mxu_head_weighs_metrics(&model->heads[k]);
  if (weighted && !any) return cJSON_CreateNull();
  cJSON *outer = cJSON_CreateArray();
  int per_output = mxu_json_per_output(model);
  for (int k = 0; k < mxu_model_output_count(model); k++)
    mxu_json_append(out, outer,
                    head_metrics(out, model, k, per_output, weighted));
  return outer;
}

/* The compile settings in training_config's shape: compile_config's loss
 * and optimizer, the optimizer under optimizer_config, metrics nested one
 * level deeper as MeanMetricWrapper objects (per output in the model's
 * order for several outputs, as tf.keras 2.x writes them). */
static char *training_config_text(const mxu_model *model) {
  mxu_json_out out = {0, 0};
  cJSON *config = mxu_json_compile_config(&out, model);
  if (!config) return NULL;
  cJSON *optimizer = cJSON_DetachItemFromObject(config, "optimizer");
  static const char *const drop[] = {"metrics", "weighted_metrics",
                                     "run_eagerly", "steps_per_execution",
                                     "jit_compile"};
  for (size_t i = 0; i < sizeof drop / sizeof *drop; i++)
    cJSON_DeleteItemFromObject(config, drop[i]);
  mxu_json_put(&out, config, "metrics", metrics_value(&out, model, 0));
  mxu_json_put(&out, config, "weighted_metrics", metrics_value(&out, model, 1));
  mxu_json_put(&out, config, "optimizer_config", optimizer);
  char *text = out.failed ? NULL : cJSON_PrintUnformatted(config);
  cJSON_Delete(config);
  return text;
}

static mxu_status write_configs(const mxu_model *model, hid_t root,
                                const char *path) {
  char *model_config = NULL;
  MXU_TRY(mxu_model_to_json(model, 0, &model_config));
  char *training_config = training_config_text(model);
  mxu_status s = MXU_OK;
  if (!training_config) s = mxu_fail(MXU_ERR_NOMEM, "%s: out of memory", path);
  /* h5py writes a Python str attribute as variable-length UTF-8. */
  if (s == MXU_OK)
    s = mxu_h5_write_string(path, root, "model_config", model_config,
                            H5T_CSET_UTF8);
  if (s == MXU_OK)
    s = mxu_h5_write_string(path, root, "training_config", training_config,
                            H5T_CSET_UTF8);
  free(model_config);
  cJSON_free(training_config);
  return s;
}

static mxu_status write_int(const char *path, hid_t root, const char *name,
                            int64_t value) {
  return mxu_h5_write_int_attribute(path, root, name, H5T_STD_I64LE,
                                    H5T_NATIVE_INT64, &value);
}

static mxu_status write_mxu_attributes(const mxu_model *model, hid_t root,
                                       const char *path,
                                       const mxu_train_position *position) {
  MXU_TRY(write_int(path, root, "mxu_format_version", MODEL_FORMAT_VERSION));
  MXU_TRY(write_int(path, root, "mxu_batch_size", model->compile.batch_size));
  int replicas = model->compile.replicas;
  MXU_TRY(write_int(path, root, "mxu_replicas", replicas > 0 ? replicas : 1));
  if (!position) return MXU_OK;
  MXU_TRY(write_int(path, root, "mxu_epoch", position->epoch));
  MXU_TRY(write_int(path, root, "mxu_step", position->step));
  return mxu_h5_write_int_attribute(path, root, "mxu_seed", H5T_STD_U64LE,
                                    H5T_NATIVE_UINT64, &position->seed);
}

/* Entry e's dataset: by name (legacy, listed in weight_names), or by
 * index in Keras 3's optimizer/vars. */
static void entry_name(const slot_list *list, int e, char *out, size_t size) {
  if (list->layout == SLOTS_KERAS3)
    snprintf(out, size, "%d", e);
  else
    snprintf(out, size, "%s", list->names[e]);
}

static mxu_status write_slots(const mxu_model *model, const slot_list *list,
                              hid_t group, const char *path) {
  char name[sizeof(slot_name)];
  if (list->layout != SLOTS_KERAS3)
    MXU_TRY(mxu_h5_write_strings(path, group, "weight_names", list->items,
                                 list->count));
  entry_name(list, 0, name, sizeof name);
  MXU_TRY(mxu_h5_write_int64(path, group, name, model->iterations));
  if (list->first_slot == 2) {
    mxu_shape scalar = {0};
    float rate = model->compile.optimizer.learning_rate;
    entry_name(list, 1, name, sizeof name);
    MXU_TRY(mxu_h5_write_floats(path, group, name, &scalar, &rate));
  }
  for (int e = list->first_slot; e < list->slot_end; e++) {
    const mxu_param *p = &model->params[list->param[e]];
    entry_name(list, e, name, sizeof name);
    MXU_TRY(mxu_h5_write_floats(path, group, name, &p->shape,
                                list->buffer[e] + p->offset));
  }
  if (list->slot_end == list->count) return MXU_OK;
  mxu_shape scalar = {0};
  float product = mxu_nadam_product(model);
  entry_name(list, list->slot_end, name, sizeof name);
  return mxu_h5_write_floats(path, group, name, &scalar, &product);
}

/* /optimizer_weights (legacy), or Keras 3's /optimizer/vars named after
 * the optimizer; then mxu_checksum over the lot. */
static mxu_status write_optimizer(const mxu_model *model, hid_t root,
                                  const char *path, slot_layout layout) {
  slot_list list;
  MXU_TRY(slot_list_make(model, layout, &list));
  hid_t group = H5I_INVALID_HID;
  mxu_status s =
      layout == SLOTS_KERAS3
          ? mxu_h5_create_group(path, root, "optimizer/vars", &group)
          : mxu_h5_create_group(path, root, "optimizer_weights", &group);
  if (s == MXU_OK && layout == SLOTS_KERAS3)
    s = mxu_h5_write_string(path, group, "name",
                            mxu_optimizer_name(model->compile.optimizer.kind),
                            H5T_CSET_UTF8);
  if (s == MXU_OK) s = write_slots(model, &list, group, path);
  if (group >= 0) H5Gclose(group);
  uint64_t sum = 0;
  if (s == MXU_OK) s = model_checksum(model, &list, &sum);
  if (s == MXU_OK)
    s = mxu_h5_write_int_attribute(path, root, "mxu_checksum", H5T_STD_U64LE,
                                   H5T_NATIVE_UINT64, &sum);
  slot_list_free(&list);
  return s;
}

static mxu_status write_model(const mxu_model *model, hid_t root,
                              const char *path,
                              const mxu_train_position *position) {
  MXU_TRY(mxu_h5_write_string(path, root, "backend", KERAS2_BACKEND,
                              H5T_CSET_ASCII));
  MXU_TRY(mxu_h5_write_string(path, root, "keras_version", KERAS2_VERSION,
                              H5T_CSET_ASCII));
  MXU_TRY(write_configs(model, root, path));
  MXU_TRY(write_mxu_attributes(model, root, path, position));
  hid_t group;
  MXU_TRY(mxu_h5_create_group(path, root, "model_weights", &group));
  mxu_status s = mxu_keras2_write(model, group, path);
  H5Gclose(group);
  MXU_TRY(s);
  return write_optimizer(model, root, path, SLOTS_KERAS2);
}

/* A .keras archive's model.weights.h5: Keras 3's layers and optimizer
 * trees, with mxu's attributes on the root (Keras reads past them). */
static mxu_status write_keras3_weights(const mxu_model *model, hid_t root,
                                       const char *path,
                                       const mxu_train_position *position) {
  MXU_TRY(write_mxu_attributes(model, root, path, position));
  MXU_TRY(mxu_keras3_write(model, root, path));
  return write_optimizer(model, root, path, SLOTS_KERAS3);
}

/* The weights image built in memory, then the archive around it with the
 * model's Keras 3 JSON, written atomically like any file. */
static mxu_status save_keras(const mxu_model *model, const char *path,
                             const mxu_train_position *position) {
  mxu_file_out target;
  MXU_TRY(mxu_file_begin(&target, path));
  mxu_h5_output h5;
  unsigned char *image = NULL, *archive = NULL;
  size_t image_size = 0, archive_size = 0;
  char *config = NULL;
  mxu_status s = mxu_h5_create_image(&h5, path);
  if (s == MXU_OK) {
    s = write_keras3_weights(model, h5.file, path, position);
    if (s == MXU_OK)
      s = mxu_h5_finish_image(&h5, &image, &image_size);
    else
      mxu_h5_abandon(&h5);
  }
  if (s == MXU_OK) s = mxu_model_to_json(model, 1, &config);
  if (s == MXU_OK)
    s = mxu_keras_archive(path, config, image, image_size, &archive,
                          &archive_size);
  if (s == MXU_OK)
    s = mxu_file_finish(&target, archive, archive_size);
  else
    mxu_file_abandon(&target);
  free(image);
  free(archive);
  free(config);
  return s;
}

static mxu_status save(const mxu_model *model, const char *path,
                       const mxu_train_position *position) {
  if (mxu_ends_with(path, ".keras")) return save_keras(model, path, position);
  mxu_h5_output out;
  MXU_TRY(mxu_h5_create(&out, path));
  mxu_status s = write_model(model, out.file, path, position);
  if (s != MXU_OK) {
    mxu_h5_abandon(&out);
    return s;
  }
  return mxu_h5_commit(&out);
}

static mxu_status check_model(const mxu_model *model, const char *path) {
  if (!model || !path)
    return mxu_fail(MXU_ERR_ARG, "a model and a path are required");
  if (!model->compiled)
    return mxu_fail(MXU_ERR_ARG,
                    "%s: compile the model first (its weights and optimizer "
                    "state are created at compile)",
                    path);
  return MXU_OK;
}

mxu_status mxu_model_path_check(const char *path) {
  if (!path) return finish(mxu_fail(MXU_ERR_ARG, "a path is required"));
  return MXU_OK;
}

mxu_status mxu_save_model(const mxu_model *model, const char *path,
                          const mxu_train_position *position) {
  mxu_status s = check_model(model, path);
  if (s == MXU_OK) {
    mxu_h5_quiet quiet;
    mxu_h5_quiet_begin(&quiet);
    s = save(model, path, position);
    mxu_h5_quiet_end(&quiet);
  }
  return finish(s);
}

/* ---- restoring: reading everything into scratch ------------------------ */

/* Everything a restore will write, read and checked first; slots[e] holds
 * the values of slot entry e (NULL for iter, or when the file has no
 * optimizer state and the slots start from zero). */
typedef struct restore {
  mxu_weights_load load;
  slot_list list;
  float **slots;
  int64_t iterations;
  float learning_rate; /* Keras 3 files keep it; NaN when absent */
  mxu_train_position position;
} restore;

static mxu_status optimizer_mismatch(const restore *r, const char *file_first,
                                     int file_count) {
  return mxu_fail(MXU_ERR_ARG,
                  "%s: the file's optimizer state (%d variables, the first "
                  "'%s') does not fit the model's %s optimizer (%d variables, "
                  "the first '%s')",
                  r->load.path, file_count, file_first, r->list.optimizer,
                  r->list.count, r->list.names[0]);
}

/* Keras loads optimizer variables by position; the optimizer's name,
 * the part before the first '/', says which optimizer wrote them. */
static mxu_status check_slot_names(const restore *r,
                                   const mxu_h5_strings *names) {
  const char *first = names->count ? names->items[0] : "(none)";
  size_t n = strlen(r->list.optimizer);
  int same_kind = strncmp(first, r->list.optimizer, n) == 0 && first[n] == '/';
  if (!same_kind || names->count != r->list.count)
    return optimizer_mismatch(r, first, names->count);
  return MXU_OK;
}

static mxu_status slot_shape_mismatch(const restore *r, int e, const char *name,
                                      const mxu_shape *file) {
  const mxu_model *model = r->load.model;
  const mxu_param *p = &model->params[r->list.param[e]];
  char a[160], b[160];
  mxu_shape_format(file, a, sizeof a);
  mxu_shape_format(&p->shape, b, sizeof b);
  return mxu_fail(MXU_ERR_SHAPE,
                  "%s: optimizer weight '%s' has shape %s in the file but %s "
                  "of layer '%s' has shape %s",
                  r->load.path, name, a, p->name, model->layers[p->layer].name,
                  b);
}

static int same_shape(const mxu_shape *a, const mxu_shape *b) {
  if (a->rank != b->rank) return 0;
  for (int d = 0; d < a->rank; d++)
    if (a->dims[d] != b->dims[d]) return 0;
  return 1;
}

static mxu_status read_slot(restore *r, hid_t dataset, int e,
                            const char *name) {
  const mxu_param *p = &r->load.model->params[r->list.param[e]];
  mxu_shape shape;
  MXU_TRY(mxu_h5_float_shape(r->load.path, dataset, &shape));
  if (!same_shape(&shape, &p->shape))
    return slot_shape_mismatch(r, e, name, &shape);
  r->slots[e] = malloc((size_t)(p->count ? p->count : 1) * sizeof(float));
  if (!r->slots[e])
    return mxu_fail(MXU_ERR_NOMEM, "%s: out of memory", r->load.path);
  return mxu_h5_read_floats(r->load.path, dataset, r->slots[e]);
}

static mxu_status read_iterations(restore *r, hid_t dataset) {
  MXU_TRY(mxu_h5_read_int64(r->load.path, dataset, &r->iterations));
  if (r->iterations < 0)
    return mxu_fail(MXU_ERR_FORMAT, "%s: %s: %lld iterations is negative",
                    r->load.path, mxu_h5_where(dataset),
                    (long long)r->iterations);
  return MXU_OK;
}

/* Keras 3's learning_rate variable: a float scalar, positive. */
static mxu_status read_rate(restore *r, hid_t dataset) {
  mxu_shape shape;
  MXU_TRY(mxu_h5_float_shape(r->load.path, dataset, &shape));
  if (mxu_shape_count(&shape) != 1)
    return mxu_fail(MXU_ERR_FORMAT,
                    "%s: %s: the learning rate is not one value", r->load.path,
                    mxu_h5_where(dataset));
  MXU_TRY(mxu_h5_read_floats(r->load.path, dataset, &r->learning_rate));
  if (!(r->learning_rate > 0) || !isfinite(r->learning_rate))
    return mxu_fail(MXU_ERR_FORMAT, "%s: %s: learning rate %g", r->load.path,
                    mxu_h5_where(dataset), (double)r->learning_rate);
  return MXU_OK;
}

static mxu_status read_entry(restore *r, hid_t group, int e, const char *name) {
  hid_t dataset = H5Dopen2(group, name, H5P_DEFAULT);
  if (dataset < 0)
    return mxu_h5_fail(MXU_ERR_FORMAT, "%s: %s has no dataset '%s'",
                       r->load.path, mxu_h5_where(group), name);
  /* Nadam's u_product follows from the iterations: mxu recomputes it. */
  mxu_status s = e == 0                   ? read_iterations(r, dataset)
                 : e < r->list.first_slot ? read_rate(r, dataset)
                 : e >= r->list.slot_end  ? MXU_OK
                                          : read_slot(r, dataset, e, name);
  H5Dclose(dataset);
  return s;
}

/* The layout the names say: tf.keras' legacy "Adam/iter:0" first; Keras
 * 3's learning_rate second; else tf.keras 2.11+'s "iteration:0". */
static slot_layout layout_of(const mxu_h5_strings *names) {
  if (names->count && mxu_ends_with(names->items[0], "/iter:0"))
    return SLOTS_LEGACY;
  if (names->count > 1 && mxu_ends_with(names->items[1], "learning_rate"))
    return SLOTS_KERAS3;
  return SLOTS_KERAS2;
}

static mxu_status use_layout(restore *r, slot_layout layout) {
  if (r->list.layout == layout) return MXU_OK;
  slot_list_free(&r->list);
  return slot_list_make(r->load.model, layout, &r->list);
}

/* /optimizer_weights: the datasets weight_names lists, in order. */
static mxu_status read_named_slots(restore *r, hid_t group) {
  mxu_h5_strings names;
  int found = 0;
  MXU_TRY(
      mxu_h5_read_strings(r->load.path, group, "weight_names", &names, &found));
  mxu_status s = use_layout(r, layout_of(&names));
  if (s == MXU_OK && r->list.layout == SLOTS_LEGACY)
    s = check_slot_names(r, &names);
  else if (s == MXU_OK && names.count != r->list.count &&
           names.count != r->list.first_slot) /* an unbuilt optimizer */
    s = optimizer_mismatch(r, names.count ? names.items[0] : "(none)",
                           names.count);
  for (int e = 0; s == MXU_OK && e < names.count; e++)
    s = read_entry(r, group, e, names.items[e]);
  mxu_h5_strings_free(&names);
  return s;
}

/* Keras 3's /optimizer/vars: datasets 0, 1, ... */
static mxu_status read_numbered_slots(restore *r, hid_t group) {
  MXU_TRY(use_layout(r, SLOTS_KERAS3));
  H5G_info_t info;
  if (H5Gget_info(group, &info) < 0)
    return mxu_h5_fail(MXU_ERR_FORMAT, "%s: /optimizer/vars: cannot list it",
                       r->load.path);
  /* An optimizer Keras never built (saved before training) keeps only
   * its iteration and learning rate: the slots start fresh. */
  int count = info.nlinks == (hsize_t)r->list.first_slot ? r->list.first_slot
                                                         : r->list.count;
  if (info.nlinks != (hsize_t)count)
    return optimizer_mismatch(r, "optimizer/vars/0", (int)info.nlinks);
  mxu_status s = MXU_OK;
  for (int e = 0; s == MXU_OK && e < count; e++) {
    char name[16];
    snprintf(name, sizeof name, "%d", e);
    s = read_entry(r, group, e, name);
  }
  return s;
}

/* A model saved before it was trained has no optimizer variables in
 * Keras; its optimizer then starts afresh. */
static mxu_status read_optimizer(restore *r, hid_t file) {
  r->iterations = 0;
  int numbered = mxu_h5_has_group(file, "optimizer/vars");
  const char *where = numbered ? "optimizer/vars" : "optimizer_weights";
  if (!numbered && !mxu_h5_has_group(file, where)) return MXU_OK;
  hid_t group;
  MXU_TRY(mxu_h5_open_group(r->load.path, file, where, &group));
  mxu_status s =
      numbered ? read_numbered_slots(r, group) : read_named_slots(r, group);
  H5Gclose(group);
  return s;
}

static mxu_status read_count(const char *path, hid_t file, const char *name,
                             int64_t *value, int *found) {
  MXU_TRY(mxu_h5_read_int_attribute(path, file, name, H5T_NATIVE_INT64, value,
                                    found));
  /* Well below INT_MAX: fit counts on from the position (epoch + 1). */
  if (*found && (*value < 0 || *value > (1 << 30)))
    return mxu_fail(MXU_ERR_FORMAT,
                    "%s: attribute '%s' = %lld is out of range 0..%d", path,
                    name, (long long)*value, 1 << 30);
  return MXU_OK;
}

static mxu_status read_position(restore *r, hid_t file) {
  const char *path = r->load.path;
  int64_t epoch = 0, step = 0;
  int has_epoch = 0, has_step = 0, has_seed = 0;
  MXU_TRY(read_count(path, file, "mxu_epoch", &epoch, &has_epoch));
  MXU_TRY(read_count(path, file, "mxu_step", &step, &has_step));
  MXU_TRY(mxu_h5_read_int_attribute(path, file, "mxu_seed", H5T_NATIVE_UINT64,
                                    &r->position.seed, &has_seed));
  /* Keras' files (and mxu's saved without a position) start fit afresh
   * from their optimizer state, as Keras does after load_model. */
  if (!has_epoch && !has_step && !has_seed) return MXU_OK;
  if (!has_epoch || !has_step || !has_seed)
    return mxu_fail(MXU_ERR_FORMAT,
                    "%s: part of a training position (mxu_epoch, mxu_step, "
                    "mxu_seed): a damaged checkpoint",
                    path);
  r->position.epoch = (int)epoch;
  r->position.step = (int)step;
  int64_t batch = 0, replicas = 0;
  int found;
  MXU_TRY(read_count(path, file, "mxu_batch_size", &batch, &found));
  MXU_TRY(read_count(path, file, "mxu_replicas", &replicas, &found));
  r->position.batch_size = (int)batch;
  r->position.replicas = (int)replicas;
  return MXU_OK;
}

/* Every weight was read or the read failed; the check guards a layout
 * that skips one. */
static mxu_status check_complete(const restore *r) {
  const mxu_model *model = r->load.model;
  for (int i = 0; i < model->param_count; i++)
    if (!r->load.scratch[i])
      return mxu_fail(MXU_ERR_FORMAT, "%s: no values for %s of layer '%s'",
                      r->load.path, model->params[i].name,
                      model->layers[model->params[i].layer].name);
  return MXU_OK;
}

/* Files from Keras carry no mxu_checksum: nothing to compare then. */
static mxu_status verify(const restore *r, hid_t file) {
  uint64_t want = 0;
  int found = 0;
  MXU_TRY(mxu_h5_read_int_attribute(r->load.path, file, "mxu_checksum",
                                    H5T_NATIVE_UINT64, &want, &found));
  if (!found) return MXU_OK;
  const mxu_model *model = r->load.model;
  uint64_t got =
      checksum(model, &r->list, (const float *const *)r->load.scratch,
               (const float *const *)r->slots, r->iterations);
  if (got == want) return MXU_OK;
  return mxu_fail(MXU_ERR_FORMAT,
                  "%s: corrupt: the values read do not match the file's "
                  "mxu_checksum",
                  r->load.path);
}

static mxu_status read_all(restore *r, hid_t file, int want_position) {
  int keras3 = !mxu_h5_has_group(file, "model_weights") &&
               mxu_h5_has_group(file, "optimizer/vars");
  if (!keras3 && !mxu_h5_has_group(file, "model_weights"))
    return mxu_fail(MXU_ERR_FORMAT,
                    "%s: not a whole-model file (no model_weights group; a "
                    "weights file loads with mxu_load_weights)",
                    r->load.path);
  MXU_TRY(keras3 ? mxu_keras3_read(&r->load, file)
                 : mxu_keras2_read(&r->load, file));
  MXU_TRY(read_optimizer(r, file));
  MXU_TRY(check_complete(r));
  MXU_TRY(verify(r, file));
  return want_position ? read_position(r, file) : MXU_OK;
}

/* ---- restoring: committing --------------------------------------------- */

/* Only once everything is read and checked does the model change. */
static mxu_status commit(restore *r) {
  mxu_model *model = r->load.model;
  for (int i = 0; i < model->param_count; i++) {
    const mxu_param *p = &model->params[i];
    float *to = (p->trainable ? model->weights : model->state) + p->offset;
    memcpy(to, r->load.scratch[i], (size_t)p->count * sizeof *to);
  }
  mxu_optimizer_reset(model); /* also what no optimizer state means */
  if (!isnan(r->learning_rate))
    model->compile.optimizer.learning_rate = r->learning_rate;
  for (int e = r->list.first_slot; e < r->list.slot_end; e++) {
    const mxu_param *p = &model->params[r->list.param[e]];
    if (r->slots[e])
      memcpy(r->list.buffer[e] + p->offset, r->slots[e],
             (size_t)p->count * sizeof(float));
  }
  model->iterations = r->iterations;
  return MXU_OK;
}

static void restore_free(restore *r) {
  int n = r->load.model->param_count;
  for (int i = 0; r->load.scratch && i < n; i++) free(r->load.scratch[i]);
  free(r->load.scratch);
  for (int e = 0; r->slots && e < r->list.count; e++) free(r->slots[e]);
  free(r->slots);
  slot_list_free(&r->list);
}

/* Training resumes only from what mxu wrote, unchanged: with a position
 * wanted, the file's seal must hold. */
static mxu_status open_model_file(const char *path,
                                  const mxu_train_position *position,
                                  hid_t *file, int *foreign) {
  return mxu_h5_open_foreign(path, position != NULL, file, foreign);
}

typedef struct restore_read {
  restore *r;
  hid_t file;
  int position;
} restore_read;

static mxu_status read_all_of(void *ctx) {
  restore_read *x = ctx;
  return read_all(x->r, x->file, x->position);
}

/* foreign: the file was probed, not sealed (see mxu_h5_rehearsed). */
static mxu_status restore_file(mxu_model *model, const char *path, hid_t file,
                               int foreign, mxu_train_position *position) {
  restore r = {{path, model, NULL}, {0}, NULL, 0, NAN, {0}};
  if (position) r.position.seed = position->seed; /* kept without one */
  MXU_TRY(slot_list_make(model, SLOTS_LEGACY, &r.list));
  r.load.scratch = calloc((size_t)model->param_count + 1, sizeof(float *));
  /* Room for any layout's entries: iteration, learning_rate, the
   * average and every kind for each weight, Nadam's u_product. */
  int trainable = 0;
  for (int i = 0; i < model->param_count; i++)
    trainable += model->params[i].trainable;
  r.slots = calloc(3 + (size_t)(MXU_SLOTS + 1) * trainable, sizeof(float *));
  mxu_status s = MXU_OK;
  if (!r.load.scratch || !r.slots)
    s = mxu_fail(MXU_ERR_NOMEM, "%s: out of memory", path);
  restore_read rr = {&r, file, position != NULL};
  if (s == MXU_OK) s = mxu_h5_rehearsed(path, foreign, read_all_of, &rr);
  if (s == MXU_OK) s = commit(&r);
  if (s == MXU_OK && position) *position = r.position;
  restore_free(&r);
  return s;
}

/* A .keras archive's values: its model.weights.h5, taken out to a
 * temporary file for HDF5 (messages name the archive). */
typedef struct model_source {
  const char *path; /* what the caller named */
  char extracted[600];
  hid_t file;
  int foreign; /* probed, not sealed */
} model_source;

static mxu_status source_open(model_source *m, const char *path,
                              const mxu_train_position *position) {
  m->path = path;
  m->extracted[0] = 0;
  m->file = H5I_INVALID_HID;
  if (!mxu_keras_is_archive(path))
    return open_model_file(path, position, &m->file, &m->foreign);
  MXU_TRY(mxu_keras_extract_weights(path, (size_t)MXU_MAX_ELEMENTS * 8,
                                    m->extracted, sizeof m->extracted));
  return open_model_file(m->extracted, position, &m->file, &m->foreign);
}

/* Closes, removes a temporary, and names the archive in a failure. */
static mxu_status source_close(model_source *m, mxu_status s) {
  mxu_h5_close(m->file);
  m->file = H5I_INVALID_HID;
  if (!m->extracted[0]) return s;
  mxu_keras_remove_extracted(m->extracted);
  return mxu_keras_name_extracted(s, m->extracted, m->path);
}

mxu_status mxu_restore_model(mxu_model *model, const char *path,
                             mxu_train_position *position) {
  mxu_status s = check_model(model, path);
  if (s == MXU_OK) {
    mxu_h5_quiet quiet;
    mxu_h5_quiet_begin(&quiet);
    model_source m;
    s = source_open(&m, path, position);
    if (s == MXU_OK) s = restore_file(model, path, m.file, m.foreign, position);
    s = source_close(&m, s);
    mxu_h5_quiet_end(&quiet);
  }
  return finish(s);
}

/* ---- loading ----------------------------------------------------------- */

/* A scalar string attribute; *text is malloc'd, NULL when absent. */
static mxu_status read_text(const char *path, hid_t file, const char *name,
                            char **text) {
  mxu_h5_strings strings;
  int found = 0;
  *text = NULL;
  MXU_TRY(mxu_h5_read_strings(path, file, name, &strings, &found));
  if (found && strings.count == 1) {
    *text = strings.items[0];
    strings.items[0] = NULL;
  }
  mxu_h5_strings_free(&strings);
  if (found && !*text)
    return mxu_fail(MXU_ERR_FORMAT, "%s: attribute '%s' is not one string",
                    path, name);
  return MXU_OK;
}

/* What mxu_model_from_json needs and the compile settings around it. */
typedef struct model_header {
  char *model_config, *training_config;
  int64_t batch_size;
} model_header;

/* The header of a .keras archive: config.json (the model with its
 * compile_config), and mxu_batch_size on model.weights.h5's root. */
static mxu_status read_keras_header(const char *path, hid_t file,
                                    model_header *h) {
  size_t size = 0;
  int found = 0;
  MXU_TRY(mxu_keras_read_member(path, "config.json", MXU_MAX_TEXT_BYTES,
                                &h->model_config, &size));
  MXU_TRY(read_count(path, file, "mxu_batch_size", &h->batch_size, &found));
  if (found && h->batch_size == 0)
    return mxu_fail(MXU_ERR_FORMAT, "%s: mxu_batch_size is 0", path);
  return MXU_OK;
}

/* tf.keras 2 keeps keras_version on the file's root, not in model_config,
 * where json_read tells the Kerases apart by it: it is copied there
 * (JSON that does not parse is left for json_read to report). */
static mxu_status carry_version(const char *path, hid_t file, model_header *h) {
  char *version = NULL, *text = NULL;
  MXU_TRY(read_text(path, file, "keras_version", &version));
  cJSON *root = version ? cJSON_Parse(h->model_config) : NULL;
  int add = cJSON_IsObject(root) &&
            !cJSON_GetObjectItemCaseSensitive(root, "keras_version");
  if (add && cJSON_AddStringToObject(root, "keras_version", version))
    text = cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  free(version);
  if (add && !text) return mxu_fail(MXU_ERR_NOMEM, "%s: out of memory", path);
  if (text) {
    free(h->model_config);
    h->model_config = text;
  }
  return MXU_OK;
}

static mxu_status read_header(const char *path, hid_t file, model_header *h) {
  int found = 0;
  mxu_status s = read_text(path, file, "model_config", &h->model_config);
  if (s == MXU_OK && !h->model_config)
    s = mxu_fail(MXU_ERR_FORMAT,
                 "%s: not a whole-model file (no model_config attribute)",
                 path);
  if (s == MXU_OK) s = carry_version(path, file, h);
  if (s == MXU_OK)
    s = read_text(path, file, "training_config", &h->training_config);
  if (s == MXU_OK)
    s = read_count(path, file, "mxu_batch_size", &h->batch_size, &found);
  if (s == MXU_OK && found && h->batch_size == 0)
    s = mxu_fail(MXU_ERR_FORMAT, "%s: mxu_batch_size is 0", path);
  return s;
}

/* training_config is the tf.keras 2.x form json_compile.c already reads
 * inside a model JSON; it gets the same treatment here. */
static mxu_status read_training_config(const char *path, const char *text,
                                       mxu_model *model,
                                       mxu_compile_config *compile) {
  cJSON *config = cJSON_Parse(text);
  cJSON *root = cJSON_CreateObject();
  mxu_status s = MXU_OK;
  if (!config)
    s = mxu_fail(MXU_ERR_FORMAT, "%s: training_config is not valid JSON", path);
  else if (!root || !cJSON_AddItemToObject(root, "training_config", config))
    s = mxu_fail(MXU_ERR_NOMEM, "%s: out of memory", path);
  else
    config = NULL; /* root owns it now */
  int found = 0;
  if (s == MXU_OK)
    s = mxu_json_read_compile(path, root, model, compile, &found);
  cJSON_Delete(config);
  cJSON_Delete(root);
  return s;
}

static mxu_status build(const char *path, const model_header *h,
                        mxu_backend_kind backend, mxu_model **out) {
  mxu_compile_config compile = mxu_compile_defaults();
  MXU_TRY(mxu_model_from_json(h->model_config, path, out, &compile, NULL));
  mxu_status s = MXU_OK;
  if (h->training_config)
    s = read_training_config(path, h->training_config, *out, &compile);
  compile.batch_size = (int)h->batch_size;
  compile.backend = backend;
  if (s == MXU_OK) s = mxu_compile(*out, &compile);
  return s;
}

/* A full model file's header: the .h5's attributes, or a .keras
 * archive's (keras), read through mxu_h5_rehearsed. */
typedef struct header_read {
  const char *path;
  hid_t file;
  model_header *h;
  int keras;
} header_read;

static mxu_status read_header_of(void *ctx) {
  header_read *r = ctx;
  return r->keras ? read_keras_header(r->path, r->file, r->h)
                  : read_header(r->path, r->file, r->h);
}

mxu_status mxu_model_file_read_json(const char *path, mxu_model **out,
                                    mxu_compile_config *compile,
                                    int *has_compile) {
  model_header h = {NULL, NULL, 0};
  mxu_h5_quiet quiet;
  mxu_h5_quiet_begin(&quiet);
  header_read r = {path, H5I_INVALID_HID, &h, 0};
  int foreign = 0;
  mxu_status s = open_model_file(path, NULL, &r.file, &foreign);
  if (s == MXU_OK) s = mxu_h5_rehearsed(path, foreign, read_header_of, &r);
  hid_t file = r.file;
  mxu_h5_close(file);
  mxu_h5_quiet_end(&quiet);
  mxu_compile_config read = compile ? *compile : mxu_compile_defaults();
  if (s == MXU_OK)
    s = mxu_model_from_json(h.model_config, path, out, NULL, NULL);
  if (s == MXU_OK && h.training_config)
    s = read_training_config(path, h.training_config, *out, &read);
  if (s == MXU_OK && h.batch_size > 0) read.batch_size = (int)h.batch_size;
  if (s == MXU_OK && compile) *compile = read;
  if (s == MXU_OK && has_compile) *has_compile = h.training_config != NULL;
  if (s != MXU_OK) {
    mxu_model_free(*out);
    *out = NULL;
  }
  free(h.model_config);
  free(h.training_config);
  return finish(s);
}

static mxu_status load(const char *path, mxu_backend_kind backend,
                       mxu_model **out, mxu_train_position *position) {
  model_header h = {NULL, NULL, 32};
  /* Opened once: checking a file (its seal, or a child reading a foreign
   * one through) costs a pass over all of it. */
  model_source m;
  mxu_status s = source_open(&m, path, position);
  header_read r = {path, m.file, &h, m.extracted[0] != 0};
  if (s == MXU_OK) s = mxu_h5_rehearsed(path, m.foreign, read_header_of, &r);
  if (s == MXU_OK) s = build(path, &h, backend, out);
  if (s == MXU_OK) s = restore_file(*out, path, m.file, m.foreign, position);
  s = source_close(&m, s);
  free(h.model_config);
  free(h.training_config);
  if (s != MXU_OK) {
    mxu_model_free(*out);
    *out = NULL;
  }
  return s;
}

mxu_status mxu_load_model(const char *path, mxu_backend_kind backend,
                          mxu_model **out, mxu_train_position *position) {
  if (out) *out = NULL;
  if (!path || !out)
    return mxu_fail(MXU_ERR_ARG, "model file: a path and out are required");
  mxu_h5_quiet quiet;
  mxu_h5_quiet_begin(&quiet);
  mxu_status s = load(path, backend, out, position);
  mxu_h5_quiet_end(&quiet);
  return finish(s);
}
