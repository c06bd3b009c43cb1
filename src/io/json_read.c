/* json_read.c — mxu_model_from_json and mxu_model_load_json: the text of a
 * Sequential model's to_json() (tf.keras 2.x or Keras 3) becomes mxu_add_*
 * calls, with every refusal naming the source, the layer and the key. */
#include "io/h5.h"
#include "io/json.h"
#include "io/keras_file.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Keys every layer may carry, read here rather than by the class. */
static const char *const common_keys[] = {
    "name",        "trainable",   "dtype", "batch_input_shape",
    "batch_shape", "input_shape", NULL};

static const char *const input_keys[] = {"batch_input_shape",
                                         "batch_shape",
                                         "input_shape",
                                         "shape",
                                         "dtype",
                                         "sparse",
                                         "ragged",
                                         "name",
                                         "optional",
                                         NULL};

/* ---- malformed text ------------------------------------------------------
 */

/* Where cJSON stopped, as line, column and byte offset, and what is
 * there, so the fix is easy to find. */
static mxu_status malformed(const char *json, size_t length, const char *end,
                            const char *source, const char *what) {
  size_t offset = length;
  if (end && end >= json && end <= json + length) offset = (size_t)(end - json);
  int line = 1, column = 1;
  for (size_t i = 0; i < offset; i++) {
    column = json[i] == '\n' ? 1 : column + 1;
    line += json[i] == '\n';
  }
  char near[24];
  size_t n = 0;
  for (size_t i = offset; i < length && n + 1 < sizeof near; i++)
    near[n++] = (json[i] >= ' ' && json[i] < 127) ? json[i] : ' ';
  near[n] = 0;
  return mxu_fail(MXU_ERR_FORMAT,
                  "%s: malformed JSON at line %d, column %d (byte %zu), near "
                  "'%s': %s",
                  source, line, column, offset, near,
                  length == 0 ? "the text is empty" : what);
}

/* Whether the text was cut short (a partial download or copy) rather
 * than wrong where cJSON stopped: nothing but blanks follows that place,
 * or an unfinished string (cJSON stops at its start) or an unfinished
 * word or number does. A mistake mid-file leaves structure after it. */
static int cut_short(const char *json, size_t length, size_t offset) {
  while (offset < length && json[offset] && strchr(" \t\r\n", json[offset]))
    offset++;
  if (offset >= length) return 1;
  if (json[offset] == '"') {
    for (size_t i = offset + 1; i < length; i++)
      if (json[i] == '\\')
        i++;
      else if (json[i] == '"')
        return 0;
    return 1;
  }
  for (size_t i = offset; i < length; i++)
    if (json[i] && strchr("{}[],:\"", json[i])) return 0;
  return 1;
}

/* cJSON's parse, with text after the value refused too. */
static mxu_status parse(const char *json, size_t length, const char *source,
                        cJSON **root) {
  const char *end = NULL;
  *root = cJSON_ParseWithLengthOpts(json, length, &end, 0);
  size_t stop = end && end >= json && end <= json + length
                    ? (size_t)(end - json)
                    : length;
  if (!*root)
    return malformed(json, length, json + stop, source,
                     cut_short(json, length, stop) ? "the text ends before "
                                                     "the value is complete"
                                                   : "not valid JSON here");
  size_t offset = stop;
  while (offset < length && json[offset] && strchr(" \t\r\n", json[offset]))
    offset++;
  if (offset >= length) return MXU_OK;
  cJSON_Delete(*root);
  *root = NULL;
  return malformed(json, length, json + offset, source,
                   "text after the end of the JSON value");
}

/* ---- shapes --------------------------------------------------------------
 */

/* The samples a call reads the model for (mxu_model_load_json_for): a
 * null dimension of a shape takes theirs. NULL in any other call. */
static _Thread_local const mxu_shape *data_shape;

/* For a model of several inputs (mxu_model_load_json_for_inputs): the
 * samples of each input by name, which its InputLayer reads as
 * data_shape. */
typedef struct named_shapes {
  const char *const *names;
  const mxu_shape *shapes;
  int count;
} named_shapes;
static _Thread_local const named_shapes *data_inputs;

/* Dimension i of the data's samples for a shape of `rank`, their
 * trailing axes of 1 aside ((28, 28, 1) images for (None, 28)); 0 for
 * none. */
static int64_t data_dim(int rank, int i) {
  if (!data_shape) return 0;
  int r = data_shape->rank;
  while (r > rank && data_shape->dims[r - 1] == 1) r--;
  return r == rank ? data_shape->dims[i] : 0;
}

/* A list like [null, 28, 28, 1] (with_batch) or [28, 28, 1]. A fixed batch
 * size is allowed and ignored: mxu fixes the batch at compile. */
static mxu_status read_shape(const mxu_json_where *where, const cJSON *value,
                             const char *key, int with_batch, mxu_shape *out) {
  char text[160];
  mxu_json_text(value, text, sizeof text);
  int count = cJSON_IsArray(value) ? cJSON_GetArraySize(value) : -1;
  int rank = count - (with_batch ? 1 : 0);
  if (count < 0 || rank < 1)
    return mxu_json_fail(
        where, MXU_ERR_FORMAT, "%s must be a list like %s, got %s", key,
        with_batch ? "[null, 28, 28, 1]" : "[28, 28, 1]", text);
  if (rank > MXU_MAX_RANK)
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                         "%s %s has rank %d; mxu takes at most %d", key, text,
                         rank, MXU_MAX_RANK);
  out->rank = rank;
  int i = with_batch ? -1 : 0;
  for (const cJSON *d = value->child; d; d = d->next, i++) {
    double v = cJSON_IsNumber(d) ? d->valuedouble : -1;
    int is_dim = v >= 1 && v <= (double)INT_MAX && v == (double)(int64_t)v;
    if (i < 0 && (cJSON_IsNull(d) || is_dim)) continue;
    if (is_dim) {
      out->dims[i] = (int64_t)v;
    } else if (cJSON_IsNull(d) && data_dim(rank, i)) {
      out->dims[i] = data_dim(rank, i);
    } else if (cJSON_IsNull(d)) {
      return mxu_json_fail(where, MXU_ERR_SHAPE,
                           "%s %s: dimension %d is null (any length): mxu "
                           "fixes every dimension but the batch's, and takes "
                           "a null one from the data (mxu train, evaluate "
                           "and predict do; mxu_model_load_json_for)",
                           key, text, i + (with_batch ? 1 : 0));
    } else {
      return mxu_json_fail(where, MXU_ERR_FORMAT,
                           "%s %s: dimensions must be positive integers", key,
                           text);
    }
  }
  return MXU_OK;
}

/* The input shape a layer config may carry: batch_input_shape (tf.keras
 * 2.x), batch_shape (Keras 3) or input_shape / shape (no batch). Returns
 * MXU_OK with *found 0 when there is none. */
static mxu_status read_config_shape(const mxu_json_where *where,
                                    const cJSON *config, mxu_shape *shape,
                                    int *found) {
  static const struct {
    const char *key;
    int with_batch;
  } keys[] = {{"batch_input_shape", 1},
              {"batch_shape", 1},
              {"input_shape", 0},
              {"shape", 0}};
  *found = 0;
  for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
    const cJSON *v = mxu_json_get(config, keys[i].key);
    if (!v || cJSON_IsNull(v)) continue;
    *found = 1;
    return read_shape(where, v, keys[i].key, keys[i].with_batch, shape);
  }
  return MXU_OK;
}

static int same_shape(const mxu_shape *a, const mxu_shape *b) {
  if (a->rank != b->rank) return 0;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return 0;
  return 1;
}

/* ---- layers --------------------------------------------------------------
 */

static mxu_status read_name(const mxu_json_where *where, const cJSON *config,
                            const char **name) {
  MXU_TRY(mxu_json_string(where, config, "name", MXU_JSON_OPTIONAL, name));
  if (*name && strlen(*name) >= MXU_NAME_SIZE)
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                         "name is %zu characters long; mxu takes at most %d",
                         strlen(*name), MXU_NAME_SIZE - 1);
  return MXU_OK;
}

/* One of mxu_input_dtypes (a string in both dialects), or a float
 * policy as any layer's dtype. */
static mxu_status read_input_dtype(const mxu_json_where *where,
                                   const cJSON *config, int *dtype) {
  const cJSON *v = mxu_json_get(config, "dtype");
  for (int i = 1; cJSON_IsString(v) && mxu_input_dtypes[i]; i++)
    if (strcmp(v->valuestring, mxu_input_dtypes[i]) == 0) {
      *dtype = i;
      return MXU_OK;
    }
  mxu_status status = mxu_json_dtype(where, config, "dtype");
  if (status == MXU_ERR_UNSUPPORTED)
    mxu_json_fail(where, status,
                  "dtype %s is not supported: an input is float32, or int32 "
                  "or int64 token ids",
                  cJSON_IsString(v) ? v->valuestring : "(a policy)");
  return status;
}

static mxu_status read_input_layer(const mxu_json_where *where,
                                   const cJSON *config, mxu_json_node *node,
                                   const char *name) {
  mxu_shape shape = {0};
  int found = 0;
  const mxu_shape *saved = data_shape;
  for (int k = 0; data_inputs && name && k < data_inputs->count; k++)
    if (strcmp(data_inputs->names[k], name) == 0)
      data_shape = &data_inputs->shapes[k];
  mxu_status status = read_config_shape(where, config, &shape, &found);
  data_shape = saved;
  MXU_TRY(status);
  if (!found)
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "batch_input_shape (or batch_shape) is missing");
  int dtype = 0;
  MXU_TRY(read_input_dtype(where, config, &dtype));
  MXU_TRY(mxu_json_require_false(where, config, "sparse"));
  MXU_TRY(mxu_json_require_false(where, config, "ragged"));
  MXU_TRY(mxu_json_check_keys(where, config, input_keys, NULL));
  mxu_tensor_id x = mxu_input(node->model, name, shape);
  if (x >= 0) node->model->layers[x].config.input_dtype = dtype;
  return mxu_json_applied(where, node, x);
}

/* A model without an InputLayer takes its input from the first layer's
 * batch_input_shape, as tf.keras 2.x writes it, or from the model's build
 * shape; tf.keras names that input "<first layer>_input". */
/* tf.keras names a Sequential's unwritten input "<first layer>_input". */
static void implicit_input_name(const char *first, char out[MXU_NAME_SIZE]) {
  snprintf(out, MXU_NAME_SIZE, "%.*s_input", MXU_NAME_SIZE - 8,
           first ? first : "input");
}

static mxu_status add_implicit_input(const mxu_json_where *where,
                                     const cJSON *config, mxu_json_node *node,
                                     const char *name,
                                     const cJSON *build_shape) {
  mxu_shape shape = {0};
  int found = 0;
  MXU_TRY(read_config_shape(where, config, &shape, &found));
  if (!found && build_shape)
    MXU_TRY(read_shape(where, build_shape, "build_input_shape", 1, &shape));
  if (!found && !build_shape)
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "the model has no InputLayer and its first layer no "
                         "batch_input_shape, so the input shape is unknown");
  char input_name[MXU_NAME_SIZE];
  implicit_input_name(name, input_name);
  return mxu_json_applied(where, node,
                          mxu_input(node->model, input_name, shape));
}

/* An op on tensors that Keras records as a layer (see "ops" below). */
static int is_op(const cJSON *entry) {
  const cJSON *module = mxu_json_get(entry, "module");
  const cJSON *class_name = mxu_json_get(entry, "class_name");
  return (cJSON_IsString(module) && mxu_json_op_module(module->valuestring)) ||
         (cJSON_IsString(class_name) &&
          strcmp(class_name->valuestring, "TFOpLambda") == 0);
}

/* The ops by which Keras 3 computes and combines masks (an Embedding's
 * ids != 0, Masking's any(x != mask_value), a merge's masks or'ed),
 * recorded as layers whose tensors only masks read (keras_mask): mxu
 * makes no node of them. */
static int is_mask_op(const cJSON *entry) {
  static const char *const ops[] = {"NotEqual", "Any", "LogicalOr",
                                    "LogicalAnd"};
  const cJSON *class_name = mxu_json_get(entry, "class_name");
  for (size_t i = 0; is_op(entry) && cJSON_IsString(class_name) &&
                     i < sizeof ops / sizeof *ops;
       i++)
    if (strcmp(class_name->valuestring, ops[i]) == 0) return 1;
  return 0;
}

/* Whether the entry names the module and registered name Keras gives a
 * class of mxu's from outside keras.layers (either dialect's). */
static int known_origin(const cJSON *entry, const cJSON *module,
                        const cJSON *registered) {
  const cJSON *class_name = mxu_json_get(entry, "class_name");
  const mxu_layer_class *cls =
      cJSON_IsString(class_name) ? mxu_layer_class_find(class_name->valuestring)
                                 : NULL;
  const mxu_keras_origin *o = cls ? cls->origin : NULL;
  if (!o || !cJSON_IsString(registered)) return 0;
  const char *m = cJSON_IsString(module) ? module->valuestring : NULL;
  const char *r = registered->valuestring;
  return (!strcmp(r, o->registered_k3) && (!m || !strcmp(m, o->module_k3))) ||
         (!strcmp(r, o->registered_tf2) && (!m || !strcmp(m, o->module_tf2)));
}

/* A Keras 3 entry may say where its class comes from; only Keras' own
 * classes are mxu's. */
static mxu_status check_builtin(const mxu_json_where *where,
                                const cJSON *entry) {
  const cJSON *module = mxu_json_get(entry, "module");
  const cJSON *registered = mxu_json_get(entry, "registered_name");
  if (known_origin(entry, module, registered) || is_op(entry)) return MXU_OK;
  /* tf_keras names its own models' module tf_keras.src.engine... */
  if (cJSON_IsString(module) && module->valuestring &&
      strncmp(module->valuestring, "keras", 5) != 0 &&
      strncmp(module->valuestring, "tf_keras", 8) != 0)
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                         "custom layers are not supported (module '%s')",
                         module->valuestring);
  /* Keras 3 registers its Functional class under its own name. */
  const cJSON *class_name = mxu_json_get(entry, "class_name");
  if (cJSON_IsString(registered) && registered->valuestring &&
      !(cJSON_IsString(class_name) &&
        strcmp(class_name->valuestring, "Functional") == 0 &&
        strcmp(registered->valuestring, "Functional") == 0))
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                         "custom layers are not supported (registered_name "
                         "'%s')",
                         registered->valuestring);
  return MXU_OK;
}

/* name, trainable and dtype, which every class shares. */
static mxu_status read_common(const mxu_json_where *where,
                              const cJSON *config) {
  int trainable = 1;
  MXU_TRY(mxu_json_bool(where, config, "trainable", &trainable));
  if (!trainable)
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                         "trainable false is not supported (mxu trains every "
                         "layer)");
  return mxu_json_dtype(where, config, "dtype");
}

/* tf.keras writes the first layer's batch_input_shape next to the
 * InputLayer built from it; the two must agree. */
static mxu_status check_first_shape(const mxu_json_where *where,
                                    const cJSON *config,
                                    const mxu_model *model) {
  mxu_shape shape = {0};
  int found = 0;
  /* Its null dimensions are the InputLayer's (tf.keras 2 writes an
   * Embedding's [null, null] after an InputLayer of [null, 7]). */
  const mxu_shape *saved = data_shape;
  data_shape = &mxu_model_input(model)->out_shape;
  mxu_status status = read_config_shape(where, config, &shape, &found);
  data_shape = saved;
  MXU_TRY(status);
  if (found && !same_shape(&shape, &mxu_model_input(model)->out_shape))
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "its input shape does not match the InputLayer's");
  return MXU_OK;
}

typedef struct layer_entry {
  const char *class_name;
  const cJSON *config;
  const char *name;
} layer_entry;

static mxu_status read_entry(const char *source, const cJSON *entry, int index,
                             mxu_json_where *where, layer_entry *out) {
  mxu_json_where_set(where, "%s: layer %d", source, index);
  if (!cJSON_IsObject(entry))
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "must be an object with class_name and config");
  MXU_TRY(mxu_json_string(where, entry, "class_name", MXU_JSON_REQUIRED,
                          &out->class_name));
  mxu_json_where_set(where, "%s: layer %d (%s)", source, index,
                     out->class_name);
  out->config = mxu_json_get(entry, "config");
  if (!cJSON_IsObject(out->config))
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         out->config ? "config must be an object"
                                     : "config is missing");
  out->name = NULL;
  MXU_TRY(read_name(where, out->config, &out->name));
  if (out->name)
    mxu_json_where_set(where, "%s: layer '%s' (%s)", source, out->name,
                       out->class_name);
  return check_builtin(where, entry);
}

static mxu_status read_nested(const char *source, const mxu_json_where *where,
                              const layer_entry *e, mxu_json_node *node);

/* Reading goes on past a layer mxu cannot honour, an identity standing in
 * for it, so that one message lists all of them: a user fixes the file
 * once, not once per layer. */
typedef struct unsupported_list {
  int count, classes; /* items; of them, unknown layer classes */
  size_t used;
  char text[3000];
  char first[4096]; /* the first item's whole message, every class named */
} unsupported_list;

static _Thread_local unsupported_list *collecting;

/* The message without the long list of classes mxu has, which the
 * combined message gives once. */
static void note_unsupported(unsupported_list *list, const char *message) {
  const char *cut = strstr(message, " (mxu has ");
  int length = cut ? (int)(cut - message) : (int)strlen(message);
  if (list->count++ == 0)
    snprintf(list->first, sizeof list->first, "%s", message);
  list->classes += cut != NULL;
  if (list->used >= sizeof list->text) return;
  int n = snprintf(list->text + list->used, sizeof list->text - list->used,
                   "\n  %d. %.*s", list->count, length, message);
  if (n > 0) list->used += (size_t)n;
}

static mxu_status read_class_once(const char *source,
                                  const mxu_json_where *where,
                                  const layer_entry *e, mxu_json_node *node);

/* s, what reading a layer gave; with unsupported items being collected,
 * an unsupported one is noted and an identity of its first input stands
 * in for it. */
static mxu_status or_stand_in(mxu_status s, const mxu_json_where *where,
                              const layer_entry *e, mxu_json_node *node) {
  if (s != MXU_ERR_UNSUPPORTED || !collecting || node->input_count < 1)
    return s;
  note_unsupported(collecting, mxu_errmsg());
  return mxu_json_applied(
      where, node,
      mxu_apply_activation(node->model, e->name, MXU_LINEAR, node->inputs[0]));
}

/* A layer of either kind of model, applied to node->inputs. */
static mxu_status read_class(const char *source, const mxu_json_where *where,
                             const layer_entry *e, mxu_json_node *node) {
  return or_stand_in(read_class_once(source, where, e, node), where, e, node);
}

/* Keras' TimeDistributed(layer): a node of the wrapped class, named as
 * the wrapper, applied under mxu_time_distributed (a positionwise class
 * over the sequence as it is, an image layer on each step), that keeps
 * the wrapped layer's name for the writers (mxu_layer.wrapped). */
static mxu_status read_time_distributed(const char *source,
                                        const mxu_json_where *where,
                                        const layer_entry *e,
                                        mxu_json_node *node) {
  static const char *const keys[] = {"layer", NULL};
  MXU_TRY(read_common(where, e->config));
  MXU_TRY(mxu_json_check_keys(where, e->config, keys, common_keys));
  const cJSON *entry = mxu_json_get(e->config, "layer");
  layer_entry inner = {cJSON_GetStringValue(mxu_json_get(entry, "class_name")),
                       mxu_json_get(entry, "config"), e->name};
  const mxu_layer_class *cls =
      inner.class_name ? mxu_layer_class_find(inner.class_name) : NULL;
  if (!cJSON_IsObject(inner.config))
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "layer must be a layer object with class_name and "
                         "config");
  if (!cls || (!cls->positionwise && !cls->steps_in_batch))
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                         "TimeDistributed(%s) is not supported: mxu wraps "
                         "the layers that compute every step alike (Dense, "
                         "Activation and the activation layers, Dropout, "
                         "BatchNormalization, GaussianNoise, "
                         "GaussianDropout, Rescaling) and the image layers "
                         "(Conv2D, DepthwiseConv2D, SeparableConv2D, the "
                         "poolings, Flatten and their 1-D kinds)",
                         inner.class_name ? inner.class_name : "?");
  const mxu_shape *in = &node->model->layers[node->inputs[0]].out_shape;
  if (node->input_count != 1 || in->rank < 2)
    return mxu_json_fail(where, MXU_ERR_SHAPE,
                         "TimeDistributed takes one input of (steps, ...) "
                         "values a sample");
  /* A shape the wrapped layer gives is one of a step's. */
  const cJSON *noise = mxu_json_get(inner.config, "noise_shape");
  if (noise && !cJSON_IsNull(noise))
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                         "TimeDistributed(%s) with a noise_shape is not "
                         "supported",
                         inner.class_name);
  const char *name = NULL;
  MXU_TRY(
      mxu_json_string(where, inner.config, "name", MXU_JSON_OPTIONAL, &name));
  node->model->time_distributed = 1;
  mxu_status s = read_class_once(source, where, &inner, node);
  node->model->time_distributed = 0;
  MXU_TRY(s);
  mxu_layer *l = &node->model->layers[node->output];
  snprintf(l->wrapped, sizeof l->wrapped, "%s", name ? name : e->name);
  return MXU_OK;
}

static mxu_status read_class_once(const char *source,
                                  const mxu_json_where *where,
                                  const layer_entry *e, mxu_json_node *node) {
  if (strcmp(e->class_name, "TimeDistributed") == 0)
    return read_time_distributed(source, where, e, node);
  const mxu_layer_class *cls = mxu_layer_class_find(e->class_name);
  if (!cls && (strcmp(e->class_name, "Sequential") == 0 ||
               strcmp(e->class_name, "Functional") == 0 ||
               strcmp(e->class_name, "Model") == 0))
    return read_nested(source, where, e, node);
  if (!cls || !cls->read_config)
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                         "layer class %s is not supported (mxu has %s)",
                         e->class_name, mxu_layer_class_names());
  MXU_TRY(read_common(where, e->config));
  MXU_TRY(mxu_json_check_keys(where, e->config, cls->config_keys, common_keys));
  /* activity_regularizer, for the classes whose keys list it: the node's. */
  mxu_regularizer activity = {0, 0};
  MXU_TRY(mxu_json_regularizer(where, e->config, "activity_regularizer",
                               &activity));
  MXU_TRY(cls->read_config(where, e->config, node, e->name));
  if (activity.l1 != 0 || activity.l2 != 0)
    node->model->layers[node->output].activity = activity;
  return MXU_OK;
}

/* A Sequential model's layer: it reads the one before. */
static mxu_status read_layer(const char *source, const cJSON *entry, int index,
                             mxu_model *model, const cJSON *build_shape) {
  mxu_json_where where;
  layer_entry e;
  MXU_TRY(read_entry(source, entry, index, &where, &e));
  mxu_json_node node = {model, {model->layer_count - 1}, 1, -1, NULL};
  if (strcmp(e.class_name, "InputLayer") == 0) {
    if (model->input_count)
      return mxu_json_fail(&where, MXU_ERR_FORMAT,
                           "an InputLayer must be the first layer");
    return read_input_layer(&where, e.config, &node, e.name);
  }
  if (!model->input_count) {
    MXU_TRY(add_implicit_input(&where, e.config, &node, e.name, build_shape));
    node.inputs[0] = node.output;
  } else if (model->layer_count == 1) {
    MXU_TRY(check_first_shape(&where, e.config, model));
  }
  return read_class(source, &where, &e, &node);
}

/* ---- the model -----------------------------------------------------------
 */

/* Keras 3 writes the input shape at the model level too, which is what a
 * Sequential without an InputLayer is built from. */
static const cJSON *build_input_shape(const cJSON *root, const cJSON *config) {
  const cJSON *shape = mxu_json_get(config, "build_input_shape");
  if (cJSON_IsArray(shape)) return shape;
  shape = mxu_json_get(mxu_json_get(root, "build_config"), "input_shape");
  return cJSON_IsArray(shape) ? shape : NULL;
}

/* Sequential, or a graph: Functional (tf.keras >= 2.4, Keras 3) or
 * Model (older tf.keras). */
static mxu_status model_class(const mxu_json_where *where, const cJSON *root,
                              int *functional) {
  if (!cJSON_IsObject(root))
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "the JSON must be an object with class_name and "
                         "config, as model.to_json() writes");
  const char *class_name = NULL;
  MXU_TRY(mxu_json_string(where, root, "class_name", MXU_JSON_REQUIRED,
                          &class_name));
  *functional =
      strcmp(class_name, "Functional") == 0 || strcmp(class_name, "Model") == 0;
  if (!*functional && strcmp(class_name, "Sequential") != 0)
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                         "model class '%s' is not supported (Sequential, "
                         "Functional and Model are)",
                         class_name);
  return MXU_OK;
}

/* config is {name, layers, ...}, or in the oldest form the list itself. */
static mxu_status model_layers(const mxu_json_where *where, const cJSON *config,
                               const cJSON **layers, const char **name) {
  *name = NULL;
  *layers = config;
  if (cJSON_IsArray(config)) return MXU_OK;
  if (!cJSON_IsObject(config))
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         config ? "config must be an object"
                                : "config is missing");
  MXU_TRY(read_name(where, config, name));
  MXU_TRY(read_common(where, config));
  *layers = mxu_json_get(config, "layers");
  if (!cJSON_IsArray(*layers))
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         *layers ? "config.layers must be a list"
                                 : "config.layers is missing");
  return MXU_OK;
}

static mxu_status build_sequential(const char *source, const cJSON *root,
                                   const cJSON *config, const cJSON *layers,
                                   mxu_model *model) {
  mxu_json_where where;
  mxu_json_where_set(&where, "%s", source);
  const cJSON *build_shape = build_input_shape(root, config);
  int index = 0;
  for (const cJSON *entry = layers->child; entry; entry = entry->next)
    MXU_TRY(read_layer(source, entry, index++, model, build_shape));
  if (!model->input_count)
    return mxu_json_fail(&where, MXU_ERR_FORMAT, "the model has no layers");
  mxu_status status = mxu_model_mark_sequential(model);
  if (status != MXU_OK) mxu_fail_prefix(status, "%s: ", source);
  return status;
}

/* ---- functional models -------------------------------------------------
 * Each layer names the tensors it reads in inbound_nodes: tf.keras 2
 * writes [[[layer, node, tensor, kwargs], ...]], Keras 3
 * [{"args": [tensor or [tensors]], "kwargs": {}}] with each tensor a
 * __keras_tensor__ whose keras_history is [layer, node, tensor]. */

/* A reference not (yet) resolved: the layer it names has not made that
 * call yet. Not an error until no layer can make progress. */
#define UNRESOLVED (-2)

/* Tensor k of a layer that returns several (an RNN's return_state) is
 * its part k (mxu_output_part); of any other, only 0 is. */
static mxu_status read_part(const mxu_json_where *where, const char *text,
                            mxu_model *model, int k, int *out) {
  if (*out == UNRESOLVED) return MXU_OK;
  const mxu_layer *layer = &model->layers[*out];
  int parts =
      layer->cls->output_parts ? layer->cls->output_parts(layer, NULL) : 1;
  if (parts == 1 && k == 0) return MXU_OK;
  if (k >= parts)
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "reads %s: layer '%s' has %d output%s", text,
                         layer->name, parts, parts == 1 ? "" : "s");
  *out = mxu_output_part(model, *out, k);
  return *out >= 0 ? MXU_OK
                   : mxu_json_fail(where, MXU_ERR_ARG, "%s", mxu_errmsg());
}

/* [layer, node index, tensor index, ...]: the node of that call of that
 * layer (tensor k of a layer of several); UNRESOLVED in *out when there is
 * none yet. */
static mxu_status read_history(const mxu_json_where *where, const cJSON *ref,
                               mxu_model *model, int *out) {
  char text[160];
  mxu_json_text(ref, text, sizeof text);
  const cJSON *name = cJSON_IsArray(ref) ? ref->child : NULL;
  const cJSON *node = name ? name->next : NULL;
  const cJSON *tensor = node ? node->next : NULL;
  if (!cJSON_IsString(name) || !cJSON_IsNumber(node) ||
      !cJSON_IsNumber(tensor) || node->valuedouble < 0 ||
      node->valuedouble > 1e6)
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "an input reference must be [layer name, node index, "
                         "tensor index], got %s",
                         text);
  if (tensor->valuedouble < 0 || tensor->valuedouble > MXU_MAX_INPUTS)
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "reads %s: no such output of the layer", text);
  /* Names are looked up in the model being read (a model used as a layer
   * has names of its own), where a model used as a layer names its
   * output, whatever its node index (tf.keras counts its inner call). */
  *out = UNRESOLVED;
  int scope = model->building_scope;
  for (int i = 0; i < model->layer_count; i++)
    if (model->layers[i].scope == scope &&
        strcmp(model->layers[i].name, name->valuestring) == 0 &&
        model->layers[i].call == (int)node->valuedouble)
      *out = i;
  for (int k = 1; k < model->scope_count; k++)
    if (model->scopes[k].parent == scope && model->scopes[k].output >= 0 &&
        strcmp(model->scopes[k].name, name->valuestring) == 0)
      *out = model->scopes[k].output;
  return read_part(where, text, model, (int)tensor->valuedouble, out);
}

/* Call arguments mxu has no use for must be absent or null ("mask": null,
 * which Keras 3 writes for BatchNormalization). A recorded "training"
 * flag is ignored: Keras 3's Functional replaces it with fit's and
 * predict's own (EfficientNet's Dropout records false). A class's named
 * tensors and options (MultiHeadAttention's value, use_causal_mask) are
 * its own to read. */
static int listed(const char *const *names, const char *key) {
  for (int i = 0; names && names[i]; i++)
    if (strcmp(names[i], key) == 0) return 1;
  return 0;
}

/* Keras 3 records the mask it passes a layer (an Embedding's mask_zero,
 * computed by ops it records as layers: is_mask_op) as a bool tensor in
 * the call's kwargs (MultiHeadAttention's per input); mxu derives the
 * same masks itself (mxu.h). */
static const char *const mask_keys[] = {"mask", "query_mask", "value_mask",
                                        "key_mask", NULL};

static int keras_mask(const cJSON *value) {
  const cJSON *dtype = mxu_json_get(mxu_json_get(value, "config"), "dtype");
  return cJSON_IsString(dtype) && strcmp(dtype->valuestring, "bool") == 0;
}

static mxu_status check_kwargs(const mxu_json_where *where, const cJSON *kwargs,
                               const mxu_layer_class *cls) {
  if (!kwargs || cJSON_IsNull(kwargs)) return MXU_OK;
  if (!cJSON_IsObject(kwargs))
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "call kwargs must be an object");
  for (const cJSON *k = kwargs->child; k; k = k->next)
    if (!cJSON_IsNull(k) &&
        !(strcmp(k->string, "training") == 0 && cJSON_IsBool(k)) &&
        !(listed(mask_keys, k->string) && keras_mask(k)) &&
        !(cls &&
          (listed(cls->call_tensors, k->string) ||
           listed(cls->call_options, k->string) ||
           (cls->list_argument && strcmp(cls->list_argument, k->string) == 0))))
      return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                           "call argument '%s' is not supported", k->string);
  return MXU_OK;
}

/* cls: the class whose call kwargs a tf.keras 2 reference carries (its
 * named tensors and options); NULL: none but null ones. */
static mxu_status add_input_ref(const mxu_json_where *where, const cJSON *ref,
                                const mxu_layer_class *cls,
                                mxu_json_node *node) {
  if (node->input_count == MXU_MAX_INPUTS)
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                         "reads more than %d tensors", MXU_MAX_INPUTS);
  const cJSON *history = ref;
  if (cJSON_IsObject(ref)) {
    history = mxu_json_get(mxu_json_get(ref, "config"), "keras_history");
  } else if (cJSON_IsArray(ref) && cJSON_GetArraySize(ref) >= 4) {
    MXU_TRY(check_kwargs(where, cJSON_GetArrayItem(ref, 3), cls));
  }
  return read_history(where, history, node->model,
                      &node->inputs[node->input_count++]);
}

/* How many times the layer is called: the length of inbound_nodes (an
 * InputLayer's is empty: it is its own one call). */
static mxu_status count_calls(const mxu_json_where *where, const cJSON *entry,
                              int input_layer, int *calls) {
  const cJSON *nodes = mxu_json_get(entry, "inbound_nodes");
  if (input_layer && (!nodes || cJSON_GetArraySize(nodes) == 0)) {
    *calls = 1;
    return MXU_OK;
  }
  *calls = cJSON_IsArray(nodes) ? cJSON_GetArraySize(nodes) : -1;
  if (*calls < 0)
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "inbound_nodes must be a list of the tensors the "
                         "layer reads");
  if (*calls == 0)
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "inbound_nodes is empty: the layer reads nothing");
  return MXU_OK;
}

/* A call of a class that names its tensors (call_tensors): the
 * arguments fill the names in order, then the kwargs by name (tf.keras 2
 * passes all but the first so); the tensors given must be the first
 * names'. The kwargs stay in node->kwargs for the class's reader. */
static mxu_status read_named_call(const mxu_json_where *where,
                                  const cJSON *args, const cJSON *kwargs,
                                  const mxu_layer_class *cls,
                                  mxu_json_node *node) {
  const char *const *names = cls->call_tensors;
  const cJSON *given[MXU_MAX_INPUTS] = {0};
  int count = 0, k = 0;
  while (names[count]) count++;
  for (const cJSON *arg = args->child; arg; arg = arg->next, k++)
    if (k < count) given[k] = arg;
  if (k > count)
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "a call of %s passes %d tensors (at most %d)",
                         cls->class_name, k, count);
  for (k = 0; k < count; k++) {
    const cJSON *named = mxu_json_get(kwargs, names[k]);
    if (named && !cJSON_IsNull(named) && given[k])
      return mxu_json_fail(where, MXU_ERR_FORMAT,
                           "a call of %s passes %s twice", cls->class_name,
                           names[k]);
    if (named && !cJSON_IsNull(named)) given[k] = named;
  }
  for (k = 0; k < count && given[k] && !cJSON_IsNull(given[k]); k++)
    MXU_TRY(add_input_ref(where, given[k], cls, node));
  for (int j = k; j < count; j++)
    if (given[j] && !cJSON_IsNull(given[j]))
      return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                           "a call of %s passing %s without %s is not "
                           "supported",
                           cls->class_name, names[j], names[k]);
  node->kwargs = kwargs;
  return check_kwargs(where, kwargs, cls);
}

/* The tensors call `index` of the layer reads, into node->inputs; some
 * may be UNRESOLVED. */
static mxu_status read_call(const mxu_json_where *where, const cJSON *entry,
                            int index, mxu_json_node *node) {
  const cJSON *call = cJSON_GetArrayItem(mxu_json_get(entry, "inbound_nodes"),
                                         index),
              *args = call, *kwargs = NULL;
  const mxu_layer_class *cls = mxu_layer_class_find(
      cJSON_GetStringValue(mxu_json_get(entry, "class_name")));
  node->input_count = 0;
  node->kwargs = NULL;
  if (cJSON_IsObject(call)) {
    kwargs = mxu_json_get(call, "kwargs");
    args = mxu_json_get(call, "args");
  }
  if (!cJSON_IsArray(args))
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "inbound_nodes[%d] must list the tensors read", index);
  /* tf.keras 2 passes the named tensors in the first reference's kwargs:
   * [[query, 0, 0, {"value": [...], ...}]]. */
  if (cls && cls->call_tensors && !cJSON_IsObject(call))
    kwargs = cJSON_GetArrayItem(args->child, 3);
  if (cls && cls->call_tensors)
    return read_named_call(where, args, kwargs, cls, node);
  /* A class's own call arguments (Attention's use_causal_mask, an RNN's
   * initial_state): Keras 3's kwargs, tf.keras 2's in each reference. */
  const mxu_layer_class *own =
      cls && (cls->call_options || cls->list_argument) ? cls : NULL;
  if (own && !cJSON_IsObject(call) && cJSON_IsArray(args->child))
    kwargs = cJSON_GetArrayItem(args->child, 3);
  node->kwargs = own ? kwargs : NULL;
  MXU_TRY(check_kwargs(where, kwargs, own));
  for (const cJSON *arg = args->child; arg; arg = arg->next) {
    /* Keras 3 passes a merge's inputs as one list argument. */
    int list = cJSON_IsArray(arg) && arg->child && cJSON_IsObject(arg->child);
    if (!list) {
      MXU_TRY(add_input_ref(where, arg, own, node));
      continue;
    }
    for (const cJSON *ref = arg->child; ref; ref = ref->next)
      MXU_TRY(add_input_ref(where, ref, own, node));
  }
  /* Keras 3's list argument (initial_state: [h, c]) after the args; a
   * single tensor (a GRU's initial_state=h) is written as itself. */
  const cJSON *list = cls && cls->list_argument
                          ? mxu_json_get(kwargs, cls->list_argument)
                          : NULL;
  if (cJSON_IsObject(list)) return add_input_ref(where, list, NULL, node);
  if (list && !cJSON_IsNull(list) && !cJSON_IsArray(list))
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "inbound_nodes[%d]: %s must be a tensor or a list "
                         "of them",
                         index, cls->list_argument);
  for (const cJSON *ref = list ? list->child : NULL; ref; ref = ref->next)
    MXU_TRY(add_input_ref(where, ref, NULL, node));
  if (node->input_count == 0)
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "inbound_nodes[%d] lists no tensor", index);
  return MXU_OK;
}

/* ---- ops Keras records as layers ---------------------------------------
 * An op on a Functional model's tensors is a layer of its own: for
 * x + 3.0 Keras 3 records keras.src.ops.numpy's Add called on (x, 3.0),
 * tf.keras 2 a TFOpLambda of "__operators__.add" called on x with y 3.0
 * (MobileNetV3's hard sigmoid; ConvNeXt's residual adds are of two
 * tensors). On two tensors the op is the merge layer of its name; on a
 * tensor and a number, a Rescaling, which gives the same bits: x * 1 + c
 * is x + c, x * c + 0 is x * c, x - c is x + (-c) and c - x is
 * x * -1 + c; x / c is a layer of its own (mxu_divide_class), and an
 * activation of one tensor (tf.nn.relu(x)) the Activation layer. The node
 * remembers the op (mxu_layer.op), and the writer gives it back as one
 * (json_ops.c names them). */

typedef struct op_number {
  int given, first; /* a number is an operand; it is the first one */
  float value;      /* as Keras converts it: to the tensor's float32 */
  /* tf.keras 2's call arguments beside y (concat's axis, reshape's
   * shape), which Keras 3 keeps in the config instead. */
  const cJSON *kwargs;
} op_number;

/* The op: Keras 3 names it by its class, tf.keras 2 by config.function;
 * NULL where mxu has none of that name. */
static const mxu_json_op *op_of(const cJSON *entry) {
  const cJSON *class_name = mxu_json_get(entry, "class_name");
  const char *name = cJSON_IsString(class_name) ? class_name->valuestring : "";
  int tf2 = strcmp(name, "TFOpLambda") == 0;
  if (tf2) {
    const cJSON *f = mxu_json_get(mxu_json_get(entry, "config"), "function");
    name = cJSON_IsString(f) ? f->valuestring : NULL;
  }
  return mxu_json_op_named(tf2, name);
}

static mxu_status op_kind(const mxu_json_where *where, const layer_entry *e,
                          const mxu_json_op **op) {
  int tf2 = strcmp(e->class_name, "TFOpLambda") == 0;
  const char *name = e->class_name;
  if (tf2)
    MXU_TRY(mxu_json_string(where, e->config, "function", MXU_JSON_REQUIRED,
                            &name));
  if ((*op = mxu_json_op_named(tf2, name))) return MXU_OK;
  return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                       "the op %s%s%s is not supported (mxu reads the ops +, "
                       "- and * on two tensors or on a tensor and a number, "
                       "a tensor / a number, relu, relu6, sigmoid, silu, "
                       "tanh and softplus of a tensor, and concat and "
                       "reshape keeping the batch)",
                       tf2 ? "'" : "", name, tf2 ? "'" : "");
}

/* One operand of an op: a number, or a tensor (a reference either
 * dialect writes). */
static mxu_status op_operand(const mxu_json_where *where, const cJSON *arg,
                             mxu_json_node *node, op_number *number) {
  if (!cJSON_IsNumber(arg)) {
    if (node->input_count == MXU_MAX_INPUTS)
      return mxu_json_fail(where, MXU_ERR_FORMAT, "an op of too many operands");
    const cJSON *history =
        cJSON_IsObject(arg)
            ? mxu_json_get(mxu_json_get(arg, "config"), "keras_history")
            : arg;
    return read_history(where, history, node->model,
                        &node->inputs[node->input_count++]);
  }
  if (number->given)
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                         "an op on two numbers is not supported");
  *number = (op_number){1, node->input_count == 0, (float)arg->valuedouble,
                        number->kwargs};
  return MXU_OK;
}

/* How many operands the op takes: 1, 2, or -1 for a list (concat); 0
 * for an op mxu does not know, which may have either (apply_op names
 * it). */
static int operands_of(const mxu_json_op *op) {
  if (!op) return 0;
  if (op->kind == MXU_OP_CONCATENATE) return -1;
  return op->kind == MXU_OP_ACTIVATION || op->kind == MXU_OP_RESHAPE ? 1 : 2;
}

/* Keras 3's {"args": [a, b], "kwargs": {}}, or [[a, b, ...]] for a list. */
static mxu_status read_op_call_k3(const mxu_json_where *where,
                                  const cJSON *call, int index, int operands,
                                  mxu_json_node *node, op_number *number) {
  MXU_TRY(check_kwargs(where, mxu_json_get(call, "kwargs"), NULL));
  const cJSON *args = mxu_json_get(call, "args");
  int given = cJSON_GetArraySize(args);
  if (operands < 0 && given == 1 && cJSON_IsArray(args->child)) {
    args = args->child, operands = given = cJSON_GetArraySize(args);
  }
  if (!operands && (given == 1 || given == 2)) operands = given;
  if (!cJSON_IsArray(args) || given != operands || given < 1)
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "inbound_nodes[%d] must give the op's %s in args",
                         index,
                         operands < 0    ? "tensors as one list"
                         : operands == 1 ? "1 operand"
                                         : "2 operands");
  for (const cJSON *arg = args->child; arg; arg = arg->next)
    MXU_TRY(op_operand(where, arg, node, number));
  return MXU_OK;
}

/* The call's keyword arguments: y, which reads a second operand, and the
 * op's own (kept for apply_op); a null name. */
static mxu_status op_kwargs(const mxu_json_where *where, const cJSON *kwargs,
                            const mxu_json_op *op) {
  const char *own = op && op->tf2_key ? op->tf2_key : "";
  for (const cJSON *k = kwargs->child; k; k = k->next)
    if (strcmp(k->string, "y") != 0 && strcmp(k->string, own) != 0 &&
        !cJSON_IsNull(k))
      return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                           "op argument '%s' is not supported", k->string);
  return MXU_OK;
}

/* tf.keras 2's [layer, node, tensor, {"y": b, "name": null}], the
 * reference alone rather than in a list as a layer's are; concat's list
 * [[layer, node, tensor, {"axis": a}], ...] as a layer's. */
static mxu_status read_op_call_tf2(const mxu_json_where *where,
                                   const cJSON *call, int index,
                                   const mxu_json_op *op, mxu_json_node *node,
                                   op_number *number) {
  int operands = operands_of(op);
  if (cJSON_IsArray(call) && cJSON_IsArray(call->child) && operands <= 0) {
    for (const cJSON *ref = call->child; ref; ref = ref->next) {
      number->kwargs = cJSON_GetArrayItem(ref, 3);
      if (!cJSON_IsObject(number->kwargs))
        return mxu_json_fail(where, MXU_ERR_FORMAT,
                             "inbound_nodes[%d] must list [layer, node, "
                             "tensor, {\"axis\": a}]",
                             index);
      MXU_TRY(op_kwargs(where, number->kwargs, op));
      MXU_TRY(op_operand(where, ref, node, number));
    }
    return MXU_OK;
  }
  const cJSON *ref =
      cJSON_IsArray(call) && cJSON_IsString(call->child) ? call : NULL;
  const cJSON *kwargs = cJSON_GetArrayItem(ref, 3);
  if (!cJSON_IsObject(kwargs) || cJSON_GetArraySize(ref) != 4)
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "inbound_nodes[%d] must be [layer, node, tensor, "
                         "{\"y\": operand}]",
                         index);
  number->kwargs = kwargs;
  /* A number first (3.0 - x) is ["_CONSTANT_VALUE", -1, 3.0, {y: x}]. */
  const cJSON *constant = cJSON_GetArrayItem(ref, 2);
  if (strcmp(ref->child->valuestring, "_CONSTANT_VALUE") == 0)
    MXU_TRY(op_operand(where, constant, node, number));
  else
    MXU_TRY(op_operand(where, ref, node, number));
  const cJSON *y = mxu_json_get(kwargs, "y");
  if (operands <= 0) operands = y ? 2 : 1;
  if (!y && operands == 2)
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "inbound_nodes[%d] gives the op no operand y", index);
  if (y && operands == 1)
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "inbound_nodes[%d] gives an op of one operand a "
                         "second, y",
                         index);
  if (y) MXU_TRY(op_operand(where, y, node, number));
  return op_kwargs(where, kwargs, op);
}

/* Call `index` of an op, in either dialect. */
static mxu_status read_op_call(const mxu_json_where *where, const cJSON *entry,
                               int index, mxu_json_node *node,
                               op_number *number) {
  const cJSON *call =
      cJSON_GetArrayItem(mxu_json_get(entry, "inbound_nodes"), index);
  node->input_count = 0;
  *number = (op_number){0, 0, 0.0f, NULL};
  const mxu_json_op *op = op_of(entry);
  if (cJSON_IsObject(call))
    return read_op_call_k3(where, call, index, operands_of(op), node, number);
  return read_op_call_tf2(where, call, index, op, node, number);
}

/* The call's inputs, and an op's number. */
static mxu_status read_any_call(const mxu_json_where *where, const cJSON *entry,
                                int index, mxu_json_node *node,
                                op_number *number) {
  if (is_op(entry)) return read_op_call(where, entry, index, node, number);
  return read_call(where, entry, index, node);
}

/* The layer computing the op (see above). */
static mxu_tensor_id op_layer(mxu_model *m, const char *name,
                              const mxu_json_op *op, const op_number *number,
                              int axis, const mxu_shape *shape,
                              const int *inputs, int count) {
  static const mxu_merge_kind merges[] = {
      [MXU_OP_ADD] = MXU_MERGE_ADD,
      [MXU_OP_SUBTRACT] = MXU_MERGE_SUBTRACT,
      [MXU_OP_MULTIPLY] = MXU_MERGE_MULTIPLY};
  if (op->kind == MXU_OP_ACTIVATION)
    return mxu_apply_activation(m, name, op->activation, inputs[0]);
  if (op->kind == MXU_OP_CONCATENATE)
    return mxu_merge(m, MXU_MERGE_CONCATENATE, name, inputs, count, axis);
  if (op->kind == MXU_OP_RESHAPE) {
    mxu_reshape_config reshape = {name, *shape};
    return mxu_apply_reshape(m, &reshape, inputs[0]);
  }
  if (!number->given)
    return mxu_merge(m, merges[op->kind], name, inputs, count, -1);
  if (op->kind == MXU_OP_DIVIDE)
    return mxu_apply_divide(m, name, number->value, inputs[0]);
  mxu_rescaling_config r = {name, 1.0f, number->value};
  if (op->kind == MXU_OP_MULTIPLY)
    r = (mxu_rescaling_config){name, number->value, 0.0f};
  else if (op->kind == MXU_OP_SUBTRACT && number->first)
    r.scale = -1.0f;
  else if (op->kind == MXU_OP_SUBTRACT)
    r.offset = -number->value;
  return mxu_apply_rescaling(m, &r, inputs[0]);
}

/* Reshape's new shape, [-1, d1, ...] with the batch first: the layer's
 * target (one -1 among the dims Keras infers). */
static mxu_status op_shape(const mxu_json_where *where, const cJSON *list,
                           const char *key, mxu_shape *target) {
  int n = cJSON_IsArray(list) ? cJSON_GetArraySize(list) : 0;
  int batch =
      n > 0 && cJSON_IsNumber(list->child) && list->child->valuedouble == -1;
  if (!batch || n - 1 > MXU_MAX_RANK || n < 2)
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                         "%s must be a list [-1, ...] keeping the batch, of "
                         "at most %d more dims",
                         key, MXU_MAX_RANK);
  target->rank = 0;
  for (const cJSON *d = list->child->next; d; d = d->next) {
    if (!cJSON_IsNumber(d) || d->valuedouble < -1 || d->valuedouble > 1e9 ||
        d->valuedouble != (double)(int64_t)d->valuedouble)
      return mxu_json_fail(where, MXU_ERR_FORMAT,
                           "%s must hold whole numbers, -1 for one", key);
    target->dims[target->rank++] = (int64_t)d->valuedouble;
  }
  return MXU_OK;
}

/* Concat's axis and reshape's shape: in tf.keras 2's call arguments, in
 * Keras 3's config. */
static mxu_status op_extra(const mxu_json_where *where, const layer_entry *e,
                           const mxu_json_op *op, const op_number *number,
                           int *axis, mxu_shape *shape) {
  int tf2 = strcmp(e->class_name, "TFOpLambda") == 0;
  const cJSON *from = tf2 ? number->kwargs : e->config;
  if (op->kind == MXU_OP_CONCATENATE) {
    MXU_TRY(mxu_json_int(where, from, op->tf2_key, MXU_JSON_REQUIRED,
                         -MXU_MAX_RANK - 1, MXU_MAX_RANK, axis));
    return *axis ? MXU_OK
                 : mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                                 "a concatenation along the batch (axis 0) "
                                 "is not supported");
  }
  if (op->kind != MXU_OP_RESHAPE) return MXU_OK;
  const char *key = tf2 ? op->tf2_key : op->k3_key;
  return op_shape(where, mxu_json_get(from, key), key, shape);
}

static mxu_status apply_op(const mxu_json_where *where, const layer_entry *e,
                           const op_number *number, mxu_json_node *node) {
  const mxu_json_op *op = NULL;
  MXU_TRY(read_common(where, e->config));
  MXU_TRY(op_kind(where, e, &op));
  const char *const keys[] = {"function", op->k3_key, NULL};
  MXU_TRY(mxu_json_check_keys(where, e->config, keys, common_keys));
  if (op->kind == MXU_OP_DIVIDE && (!number->given || number->first))
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                         "a division is supported only of a tensor by a "
                         "number (x / 255.0)");
  int axis = -1;
  mxu_shape shape = {0};
  MXU_TRY(op_extra(where, e, op, number, &axis, &shape));
  mxu_model *m = node->model;
  mxu_tensor_id y = op_layer(m, e->name, op, number, axis, &shape, node->inputs,
                             node->input_count);
  MXU_TRY(mxu_json_applied(where, node, y));
  m->layers[node->output].op = op->kind;
  return MXU_OK;
}

/* An op, or a layer of a class (read_class). */
static mxu_status read_op_or_class(const char *source,
                                   const mxu_json_where *where,
                                   const layer_entry *e, const cJSON *entry,
                                   const op_number *number,
                                   mxu_json_node *node) {
  if (!is_op(entry)) return read_class(source, where, e, node);
  return or_stand_in(apply_op(where, e, number, node), where, e, node);
}

/* One entry of config.layers and how far its calls have got: a call
 * whose inputs some later-listed layer makes (a shared layer called
 * again deeper in the graph) waits for a later pass. */
typedef struct functional_entry {
  const cJSON *entry;
  int index, calls, done;
  mxu_tensor_id first; /* the node of call 0 */
} functional_entry;

static int resolved(const mxu_json_node *node) {
  for (int k = 0; k < node->input_count; k++)
    if (node->inputs[k] == UNRESOLVED) return 0;
  return 1;
}

/* Makes the entry's next calls that can be made; *progress is set when
 * one was. */
/* A model used as a layer being read: the call of it in the model
 * around it (whose inputs its InputLayers view) and its input_layers. */
typedef struct nested_call {
  const mxu_json_node *call;
  const cJSON *input_layers;
} nested_call;

/* The InputLayer of a model used as a layer: a view of the tensor it is
 * called on in the place input_layers gives it. */
static mxu_status read_nested_input(const mxu_json_where *where,
                                    const layer_entry *e,
                                    const nested_call *nested,
                                    mxu_json_node *node) {
  const cJSON *list = nested->input_layers;
  int place = -1, k = 0;
  int bare = cJSON_IsArray(list) && cJSON_IsString(list->child);
  for (const cJSON *ref = bare   ? list
                          : list ? list->child
                                 : NULL;
       ref; ref = bare ? NULL : ref->next, k++) {
    const cJSON *name = cJSON_IsArray(ref) ? ref->child : NULL;
    if (cJSON_IsString(name) && e->name && !strcmp(name->valuestring, e->name))
      place = k;
  }
  if (place < 0 || place >= nested->call->input_count)
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "the model's input_layers do not list this "
                         "InputLayer among the %d tensors it is called on",
                         nested->call->input_count);
  mxu_shape shape = {0};
  int found = 0;
  MXU_TRY(read_config_shape(where, e->config, &shape, &found));
  if (!found)
    shape = node->model->layers[nested->call->inputs[place]].out_shape;
  return mxu_json_applied(where, node,
                          mxu_scope_input(node->model, e->name, shape,
                                          nested->call->inputs[place]));
}

static mxu_status advance(const char *source, mxu_model *model,
                          const nested_call *nested, functional_entry *f,
                          int *progress) {
  mxu_json_where where;
  layer_entry e;
  MXU_TRY(read_entry(source, f->entry, f->index, &where, &e));
  int input_layer = strcmp(e.class_name, "InputLayer") == 0;
  if (f->calls == 0)
    MXU_TRY(count_calls(&where, f->entry, input_layer, &f->calls));
  if (is_mask_op(f->entry) && f->done < f->calls) {
    f->done = f->calls;
    *progress = 1;
    return MXU_OK;
  }
  while (f->done < f->calls) {
    mxu_json_node node = {model, {0}, 0, -1, NULL};
    if (input_layer && nested) {
      MXU_TRY(read_nested_input(&where, &e, nested, &node));
    } else if (input_layer) {
      MXU_TRY(read_input_layer(&where, e.config, &node, e.name));
    } else {
      op_number number;
      MXU_TRY(read_any_call(&where, f->entry, f->done, &node, &number));
      if (!resolved(&node)) return MXU_OK;
      if (f->done == 0)
        MXU_TRY(read_op_or_class(source, &where, &e, f->entry, &number, &node));
      else if (mxu_layer_class_find(e.class_name) && !is_op(f->entry))
        MXU_TRY(mxu_json_applied(
            &where, &node,
            mxu_apply_again(model, f->first, node.inputs, node.input_count)));
      else
        return mxu_json_fail(
            &where, MXU_ERR_UNSUPPORTED, "%s more than once is not supported",
            is_op(f->entry) ? "an op layer called" : "a model used as a layer");
    }
    if (f->done == 0) f->first = node.output;
    f->done++;
    *progress = 1;
  }
  return MXU_OK;
}

/* The first reference nothing makes, for the message when no entry can
 * go on. */
static mxu_status stuck(const char *source, mxu_model *model,
                        const functional_entry *f) {
  mxu_json_where where;
  layer_entry e;
  MXU_TRY(read_entry(source, f->entry, f->index, &where, &e));
  mxu_json_node node = {model, {0}, 0, -1, NULL};
  op_number number;
  MXU_TRY(read_any_call(&where, f->entry, f->done, &node, &number));
  const cJSON *call =
      cJSON_GetArrayItem(mxu_json_get(f->entry, "inbound_nodes"), f->done);
  char text[200];
  mxu_json_text(call, text, sizeof text);
  return mxu_json_fail(&where, MXU_ERR_FORMAT,
                       "call %d reads a layer (or a call of one) that no "
                       "layer of the model makes: %s",
                       f->done, text);
}

static mxu_status read_functional_layers(const char *source,
                                         const cJSON *layers, mxu_model *model,
                                         const nested_call *nested) {
  int count = cJSON_GetArraySize(layers);
  functional_entry *entries = calloc((size_t)count + 1, sizeof *entries);
  if (!entries) return mxu_fail(MXU_ERR_NOMEM, "%s: out of memory", source);
  int index = 0;
  for (const cJSON *entry = layers->child; entry; entry = entry->next, index++)
    entries[index] = (functional_entry){entry, index, 0, 0, -1};
  mxu_status status = MXU_OK;
  for (int progress = 1, left = count; status == MXU_OK && left && progress;) {
    progress = 0;
    left = 0;
    for (int i = 0; i < count && status == MXU_OK; i++) {
      if (entries[i].calls && entries[i].done == entries[i].calls) continue;
      status = advance(source, model, nested, &entries[i], &progress);
      left += entries[i].done < entries[i].calls;
    }
    if (status == MXU_OK && left && !progress)
      for (int i = 0; i < count; i++)
        if (entries[i].done < entries[i].calls) {
          status = stuck(source, model, &entries[i]);
          break;
        }
  }
  free(entries);
  return status;
}

/* input_layers / output_layers: a list of [layer, node, tensor] (tf.keras
 * 2), or one bare triple (Keras 3, a single tensor). */
static mxu_status read_endpoints(const mxu_json_where *where,
                                 const cJSON *config, const char *key,
                                 mxu_model *model, int *ids, int *count) {
  const cJSON *list = mxu_json_get(config, key);
  if (!cJSON_IsArray(list) || !list->child)
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "config.%s must list the model's %s", key,
                         strcmp(key, "input_layers") ? "outputs" : "inputs");
  *count = 0;
  int bare = cJSON_IsString(list->child);
  for (const cJSON *ref = bare ? list : list->child; ref;
       ref = bare ? NULL : ref->next) {
    if (*count == MXU_MAX_INPUTS)
      return mxu_json_fail(where, MXU_ERR_UNSUPPORTED, "more than %d %s",
                           MXU_MAX_INPUTS, key);
    int *id = &ids[(*count)++];
    MXU_TRY(read_history(where, ref, model, id));
    if (*id == UNRESOLVED) {
      char text[160];
      mxu_json_text(ref, text, sizeof text);
      return mxu_json_fail(where, MXU_ERR_FORMAT,
                           "config.%s names %s, which no layer of the model "
                           "makes",
                           key, text);
    }
  }
  return MXU_OK;
}

/* The model's inputs in input_layers' order (Keras feeds them so), and its
 * outputs. */
static mxu_status read_endpoints_all(const char *source, const cJSON *config,
                                     mxu_model *model) {
  mxu_json_where where;
  mxu_json_where_set(&where, "%s", source);
  int ids[MXU_MAX_INPUTS], count = 0;
  MXU_TRY(read_endpoints(&where, config, "input_layers", model, ids, &count));
  for (int k = 0; k < count; k++)
    if (model->layers[ids[k]].cls != &mxu_input_layer_class)
      return mxu_json_fail(&where, MXU_ERR_FORMAT,
                           "config.input_layers names '%s', which is not an "
                           "InputLayer",
                           model->layers[ids[k]].name);
  if (count != model->input_count)
    return mxu_json_fail(&where, MXU_ERR_FORMAT,
                         "config.input_layers lists %d inputs but the model "
                         "has %d InputLayers",
                         count, model->input_count);
  memcpy(model->inputs, ids, (size_t)count * sizeof *ids);
  MXU_TRY(read_endpoints(&where, config, "output_layers", model, ids, &count));
  return mxu_json_added(&where, mxu_model_outputs(model, ids, count));
}

static mxu_status build_functional(const char *source, const cJSON *config,
                                   const cJSON *layers, mxu_model *model) {
  static const char *const keys[] = {"name",         "trainable",     "layers",
                                     "input_layers", "output_layers", NULL};
  mxu_json_where where;
  mxu_json_where_set(&where, "%s: config", source);
  MXU_TRY(mxu_json_check_keys(&where, config, keys, NULL));
  MXU_TRY(read_functional_layers(source, layers, model, NULL));
  return read_endpoints_all(source, config, model);
}

/* ---- models used as layers -------------------------------------------
 * A Sequential or Functional called like a layer (transfer learning's
 * base model): its layers are read into a scope of their own, inlined
 * into the graph, their InputLayers viewing the tensors it is called on.
 * Keras lists it as one layer; its weights, summary row and JSON stay
 * one layer's (scopes in model.h). */

static mxu_status read_nested_sequential(const char *source,
                                         const mxu_json_where *at,
                                         const cJSON *layers,
                                         const mxu_json_node *call,
                                         int *output) {
  mxu_model *model = call->model;
  int previous = -1, index = 0;
  for (const cJSON *entry = layers->child; entry; entry = entry->next) {
    mxu_json_where where;
    layer_entry e;
    MXU_TRY(read_entry(source, entry, index++, &where, &e));
    mxu_json_node node = {model, {previous}, 1, -1, NULL};
    int input_layer = strcmp(e.class_name, "InputLayer") == 0;
    if (input_layer && previous >= 0)
      return mxu_json_fail(&where, MXU_ERR_FORMAT,
                           "an InputLayer must be the first layer");
    if (previous < 0) {
      /* Without an InputLayer the model takes the shape it is called on. */
      const mxu_shape *given = &model->layers[call->inputs[0]].out_shape;
      mxu_shape shape = *given;
      int found = 0;
      if (input_layer)
        MXU_TRY(read_config_shape(&where, e.config, &shape, &found));
      char name[MXU_NAME_SIZE];
      implicit_input_name(e.name, name);
      MXU_TRY(mxu_json_applied(
          &where, &node,
          mxu_scope_input(model, input_layer && e.name ? e.name : name, shape,
                          call->inputs[0])));
      node.inputs[0] = previous = node.output;
      if (input_layer) continue;
    }
    MXU_TRY(read_class(source, &where, &e, &node));
    previous = node.output;
  }
  if (previous < 0)
    return mxu_json_fail(at, MXU_ERR_FORMAT,
                         "a Sequential used as a layer has no layers");
  *output = previous;
  return MXU_OK;
}

static mxu_status read_nested(const char *source, const mxu_json_where *where,
                              const layer_entry *e, mxu_json_node *node) {
  static const char *const keys[] = {
      "name",          "trainable",         "dtype", "layers", "input_layers",
      "output_layers", "build_input_shape", NULL};
  int sequential = strcmp(e->class_name, "Sequential") == 0;
  const cJSON *layers = NULL;
  const char *name = NULL;
  MXU_TRY(model_layers(where, e->config, &layers, &name));
  if (cJSON_IsObject(e->config))
    MXU_TRY(mxu_json_check_keys(where, e->config, keys, NULL));
  if (!sequential && node->input_count > MXU_MAX_INPUTS)
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED, "too many inputs");
  mxu_model *model = node->model;
  MXU_TRY(mxu_json_added(
      where, mxu_scope_begin(model, name ? name : e->class_name, sequential)));
  int output = -1;
  if (sequential) {
    MXU_TRY(read_nested_sequential(source, where, layers, node, &output));
  } else {
    nested_call nested = {node, mxu_json_get(e->config, "input_layers")};
    MXU_TRY(read_functional_layers(source, layers, model, &nested));
    int ids[MXU_MAX_INPUTS], count = 0;
    MXU_TRY(
        read_endpoints(where, e->config, "output_layers", model, ids, &count));
    if (count != 1)
      return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                           "a model used as a layer must have one output, "
                           "this one has %d",
                           count);
    output = ids[0];
  }
  MXU_TRY(mxu_json_added(where, mxu_scope_end(model, output)));
  node->output = output;
  return MXU_OK;
}

/* One unsupported item keeps its own message; several are listed, with
 * what stopped the reading after them (possibly the stand-ins' doing). */
static mxu_status report_unsupported(const char *source,
                                     const unsupported_list *list,
                                     mxu_status status) {
  if (list->count == 0) return status;
  char after[1024] = "";
  if (status != MXU_OK)
    snprintf(after, sizeof after,
             "\nreading stopped after them at: %s (it may follow from the "
             "items above)",
             mxu_errmsg());
  if (list->count == 1)
    return mxu_fail(MXU_ERR_UNSUPPORTED, "%s%s", list->first, after);
  return mxu_fail(MXU_ERR_UNSUPPORTED,
                  "%s: %d layers are not supported (all of them below; "
                  "fix or remove each):%s%s%s%s",
                  source, list->count, list->text,
                  list->classes ? "\nmxu has the layer classes " : "",
                  list->classes ? mxu_layer_class_names() : "", after);
}

static mxu_status build_model(const char *source, const cJSON *root,
                              mxu_model **out) {
  mxu_json_where where;
  mxu_json_where_set(&where, "%s", source);
  int functional = 0;
  MXU_TRY(model_class(&where, root, &functional));
  const cJSON *config = mxu_json_get(root, "config"), *layers = NULL;
  const char *name = NULL;
  MXU_TRY(model_layers(&where, config, &layers, &name));
  if (functional && !cJSON_IsObject(config))
    return mxu_json_fail(&where, MXU_ERR_FORMAT,
                         "a Functional model's config must be an object");
  /* Built as a graph either way; a Sequential one is marked so after. */
  mxu_model *model = mxu_functional(name         ? name
                                    : functional ? "model"
                                                 : "sequential");
  if (!model) return mxu_fail(MXU_ERR_NOMEM, "%s: out of memory", source);
  const cJSON *version = mxu_json_get(root, "keras_version");
  model->keras2_names = cJSON_IsString(version) && version->valuestring &&
                        version->valuestring[0] < '3';
  unsupported_list list = {0};
  unsupported_list *outer = collecting;
  collecting = &list;
  mxu_status status =
      functional ? build_functional(source, config, layers, model)
                 : build_sequential(source, root, config, layers, model);
  collecting = outer;
  status = report_unsupported(source, &list, status);
  if (status != MXU_OK) {
    mxu_model_free(model);
    return status;
  }
  *out = model;
  return MXU_OK;
}

static mxu_status from_text(const char *json, size_t length, const char *source,
                            mxu_model **out, mxu_compile_config *compile,
                            int *has_compile) {
  cJSON *root = NULL;
  MXU_TRY(parse(json, length, source, &root));
  mxu_model *model = NULL;
  mxu_status status = build_model(source, root, &model);
  /* The caller's settings change only when everything read cleanly. */
  mxu_compile_config read = compile ? *compile : mxu_compile_defaults();
  int found = 0;
  if (status == MXU_OK && compile)
    status = mxu_json_read_compile(source, root, model, &read, &found);
  cJSON_Delete(root);
  if (status != MXU_OK) {
    mxu_model_free(model);
    return status;
  }
  if (compile) *compile = read;
  if (has_compile) *has_compile = found;
  *out = model;
  return MXU_OK;
}

mxu_status mxu_model_from_json(const char *json, const char *source,
                               mxu_model **out, mxu_compile_config *compile,
                               int *has_compile) {
  if (out) *out = NULL;
  if (has_compile) *has_compile = 0;
  if (!json || !out)
    return mxu_fail(MXU_ERR_ARG, "model_from_json: json and out are required");
  return from_text(json, strlen(json), source ? source : "json", out, compile,
                   has_compile);
}

/* ---- files ---------------------------------------------------------------
 */

/* The whole file; model files are small, so a size cap catches a wrong
 * path (a data set) early. */
static mxu_status read_file(const char *path, char **text, size_t *length) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return mxu_fail(MXU_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  size_t size = 0, capacity = 0;
  char *buffer = NULL;
  mxu_status status = MXU_OK;
  for (;;) {
    if (size + 4096 + 1 > capacity) {
      capacity = capacity ? 2 * capacity : 65536;
      char *grown = realloc(buffer, capacity);
      if (!grown) {
        status = mxu_fail(MXU_ERR_NOMEM, "%s: out of memory", path);
        break;
      }
      buffer = grown;
    }
    size_t got = fread(buffer + size, 1, capacity - size - 1, f);
    size += got;
    if (got == 0) break;
    if (size > MXU_MAX_TEXT_BYTES) {
      status = mxu_fail(MXU_ERR_FORMAT,
                        "%s: larger than %d MiB (MXU_MAX_TEXT_BYTES); not a "
                        "model JSON file",
                        path, MXU_MAX_TEXT_BYTES >> 20);
      break;
    }
  }
  if (status == MXU_OK && ferror(f))
    status = mxu_fail(MXU_ERR_IO, "%s: read error: %s", path, strerror(errno));
  fclose(f);
  if (status != MXU_OK) {
    free(buffer);
    return status;
  }
  buffer[size] = 0;
  *text = buffer;
  *length = size;
  return MXU_OK;
}

mxu_status mxu_model_load_json_for(const char *path, mxu_shape sample,
                                   mxu_model **out, mxu_compile_config *compile,
                                   int *has_compile) {
  const mxu_shape *saved = data_shape;
  data_shape = &sample;
  mxu_status status = mxu_model_load_json(path, out, compile, has_compile);
  data_shape = saved;
  return status;
}

mxu_status mxu_model_load_json_for_inputs(
    const char *path, const char *const *names, const mxu_shape *shapes,
    int count, mxu_model **out, mxu_compile_config *compile, int *has_compile) {
  named_shapes given = {names, shapes, count};
  const named_shapes *saved = data_inputs;
  data_inputs = &given;
  mxu_status status = mxu_model_load_json(path, out, compile, has_compile);
  data_inputs = saved;
  return status;
}

mxu_status mxu_model_load_json(const char *path, mxu_model **out,
                               mxu_compile_config *compile, int *has_compile) {
  if (out) *out = NULL;
  if (has_compile) *has_compile = 0;
  if (!path || !out)
    return mxu_fail(MXU_ERR_ARG, "model_load_json: path and out are required");
  if (mxu_h5_is_hdf5(path))
    return mxu_model_file_read_json(path, out, compile, has_compile);
  char *text = NULL;
  size_t length = 0;
  /* A .keras file's model is its config.json, in model.to_json()'s form. */
  MXU_TRY(mxu_keras_is_archive(path)
              ? mxu_keras_read_member(path, "config.json", MXU_MAX_TEXT_BYTES,
                                      &text, &length)
              : read_file(path, &text, &length));
  mxu_status status = from_text(text, length, path, out, compile, has_compile);
  free(text);
  return status;
}
