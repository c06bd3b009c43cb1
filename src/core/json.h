/* json.h — Keras config values in both directions, which the layer
 * classes (their configs) and io's model JSON share: messages that name
 * the file, the layer and the key; typed access to config values; and
 * helpers that build output. Internal to libmxu. */
#ifndef MXU_CORE_JSON_H
#define MXU_CORE_JSON_H

#include "core/core.h"

#include <cjson/cJSON.h>

/* ---- reading ------------------------------------------------------------ */

/* Where a message points: "model.json: layer 'conv2d_1' (Conv2D)". */
typedef struct mxu_json_where {
  char text[512];
} mxu_json_where;

void mxu_json_where_set(mxu_json_where *where, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Records "<where>: <message>" and returns status. */
mxu_status mxu_json_fail(const mxu_json_where *where, mxu_status status,
                         const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Passes on a status, putting where in front of its message on failure. */
mxu_status mxu_json_added(const mxu_json_where *where, mxu_status status);

/* A layer being read: the model, the tensors it is applied to (the layer
 * before, in a Sequential model) and the tensor it gives. */
typedef struct mxu_json_node {
  mxu_model *model;
  mxu_tensor_id inputs[MXU_MAX_INPUTS];
  int input_count;
  mxu_tensor_id output;
  /* The call's kwargs, for a class with call options (use_causal_mask);
   * NULL for others. */
  const cJSON *kwargs;
} mxu_json_node;

/* Takes the result of an mxu_apply_* call as node's output, putting where
 * in front of its message on failure. */
mxu_status mxu_json_applied(const mxu_json_where *where, mxu_json_node *node,
                            mxu_tensor_id output);

/* A value as a short, Python-like text for messages: 'same', [2, 2], null,
 * {'class_name': 'L2', ...}. A NULL value reads "(missing)". */
void mxu_json_text(const cJSON *value, char *out, size_t size);

const cJSON *mxu_json_get(const cJSON *object, const char *key);

/* Typed getters. An absent key leaves *out as it is, unless required, which
 * makes it an MXU_ERR_FORMAT; so does a value of the wrong type. */
enum { MXU_JSON_OPTIONAL = 0, MXU_JSON_REQUIRED = 1 };
mxu_status mxu_json_int(const mxu_json_where *where, const cJSON *object,
                        const char *key, int required, int min, int max,
                        int *out);
/* An int n (meaning n, n) or a list of two ints, each >= 1. */
mxu_status mxu_json_int_pair(const mxu_json_where *where, const cJSON *object,
                             const char *key, int required, int out[2]);
/* A 3-D layer's size: an int n (n, n, n) or a list of three, each >= 1. */
mxu_status mxu_json_int_triple(const mxu_json_where *where, const cJSON *object,
                               const char *key, int required, int out[3]);
/* A 1-D layer's size: an int n or a list of one, >= 1. */
mxu_status mxu_json_int_one(const mxu_json_where *where, const cJSON *object,
                            const char *key, int required, int *out);
mxu_status mxu_json_float(const mxu_json_where *where, const cJSON *object,
                          const char *key, int required, float *out);
mxu_status mxu_json_bool(const mxu_json_where *where, const cJSON *object,
                         const char *key, int *out);
mxu_status mxu_json_string(const mxu_json_where *where, const cJSON *object,
                           const char *key, int required, const char **out);

/* Options mxu cannot honour, each UNSUPPORTED naming the key and value:
 * the key must be absent or null (regularizers, constraints), absent, null
 * or false (renorm, sparse), or absent, 1 or [1, 1] (dilation_rate). */
mxu_status mxu_json_require_null(const mxu_json_where *where,
                                 const cJSON *object, const char *key);
mxu_status mxu_json_require_false(const mxu_json_where *where,
                                  const cJSON *object, const char *key);
mxu_status mxu_json_require_ones(const mxu_json_where *where,
                                 const cJSON *object, const char *key);

/* Keras values mxu reads: activation (a name or null, which is linear;
 * keras2: as tf.keras 2 meant it), padding, data_format (channels_last
 * only), a dtype or dtype policy (float32 only); initializers are
 * model/'s (initializers.c). */
mxu_status mxu_json_activation(const mxu_json_where *where, const cJSON *object,
                               const char *key, int keras2,
                               mxu_activation *out);
mxu_status mxu_json_padding(const mxu_json_where *where, const cJSON *object,
                            mxu_padding *out);
/* Conv1D's: 'causal' too. */
mxu_status mxu_json_padding_causal(const mxu_json_where *where,
                                   const cJSON *object, mxu_padding *out);
mxu_status mxu_json_data_format(const mxu_json_where *where,
                                const cJSON *object);
mxu_status mxu_json_dtype(const mxu_json_where *where, const cJSON *object,
                          const char *key);

/* Every key of object must be in one of the NULL-terminated lists, or be
 * null or false (a newer Keras' option left at its off default). */
mxu_status mxu_json_check_keys(const mxu_json_where *where, const cJSON *object,
                               const char *const *known,
                               const char *const *also_known);

/* ---- writing ------------------------------------------------------------ */

/* Output under construction: cJSON returns NULL when out of memory, so
 * every put goes through one place that remembers the failure. */
typedef struct mxu_json_out {
  int keras3;
  int failed;
} mxu_json_out;

/* Adds item under key (taking it, or freeing it on failure); returns it. */
cJSON *mxu_json_put(mxu_json_out *out, cJSON *object, const char *key,
                    cJSON *item);
/* Appends item to list, as mxu_json_put adds under a key. */
void mxu_json_append(mxu_json_out *out, cJSON *list, cJSON *item);
void mxu_json_put_number(mxu_json_out *out, cJSON *object, const char *key,
                         double value);
/* A float32 with the fewest digits that read back to it: 0.99, not
 * 0.99000000953674316. */
void mxu_json_put_float(mxu_json_out *out, cJSON *object, const char *key,
                        float value);
void mxu_json_put_string(mxu_json_out *out, cJSON *object, const char *key,
                         const char *value);
void mxu_json_put_bool(mxu_json_out *out, cJSON *object, const char *key,
                       int value);
void mxu_json_put_null(mxu_json_out *out, cJSON *object, const char *key);
void mxu_json_put_pair(mxu_json_out *out, cJSON *object, const char *key,
                       const int pair[2]);
void mxu_json_put_triple(mxu_json_out *out, cJSON *object, const char *key,
                         const int triple[3]);
/* [value]: a 1-D layer's size, as Keras writes its tuple (n,). */
void mxu_json_put_one(mxu_json_out *out, cJSON *object, const char *key,
                      int value);
/* Keras' serialisation of a built-in object: {"class_name", "config"}, and
 * in the Keras 3 form also "module" and "registered_name". Takes config. */
cJSON *mxu_json_object(const mxu_json_out *out, const char *module,
                       const char *class_name, cJSON *config);
/* The float32 policy: "float32" in tf.keras 2.x, a DTypePolicy object in
 * Keras 3. */
void mxu_json_put_dtype(mxu_json_out *out, cJSON *object);
/* [null, d0, d1, ...]: a shape with Keras' unknown batch dimension. */
cJSON *mxu_json_batch_shape(const mxu_shape *shape);

double mxu_json_short_float(float value);
const char *mxu_json_activation_name(mxu_activation activation);

#endif
