/* json_values.c — typed access to Keras config values for the JSON reader:
 * every getter checks the cJSON type before use and fails with a message
 * naming the file, the layer and the key. */
#include "core/json.h"

#include <float.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

void mxu_json_where_set(mxu_json_where *where, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  vsnprintf(where->text, sizeof where->text, fmt, args);
  va_end(args);
}

mxu_status mxu_json_fail(const mxu_json_where *where, mxu_status status,
                         const char *fmt, ...) {
  /* As long as mxu's error buffer: a message may list every layer class. */
  char message[4096];
  va_list args;
  va_start(args, fmt);
  vsnprintf(message, sizeof message, fmt, args);
  va_end(args);
  return mxu_fail(status, "%s: %s", where->text, message);
}

mxu_status mxu_json_added(const mxu_json_where *where, mxu_status status) {
  if (status == MXU_OK) return MXU_OK;
  return mxu_fail_prefix(status, "%s: ", where->text);
}

mxu_status mxu_json_applied(const mxu_json_where *where, mxu_json_node *node,
                            mxu_tensor_id output) {
  node->output = output;
  if (output >= 0) return MXU_OK;
  return mxu_fail_prefix(mxu_last_status(), "%s: ", where->text);
}

/* ---- values as text ------------------------------------------------------
 */

typedef struct text_buffer {
  char *data;
  size_t size, used;
} text_buffer;

static void append(text_buffer *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void append(text_buffer *t, const char *fmt, ...) {
  if (t->used + 1 >= t->size) return;
  va_list args;
  va_start(args, fmt);
  int n = vsnprintf(t->data + t->used, t->size - t->used, fmt, args);
  va_end(args);
  if (n < 0) return;
  t->used += (size_t)n;
  if (t->used >= t->size) t->used = t->size - 1;
}

/* Python's repr of the parsed value, which is how Keras users know it. */
static void value_text(text_buffer *t, const cJSON *v) {
  if (!v) {
    append(t, "(missing)");
  } else if (cJSON_IsNull(v)) {
    append(t, "null");
  } else if (cJSON_IsBool(v)) {
    append(t, "%s", cJSON_IsTrue(v) ? "true" : "false");
  } else if (cJSON_IsNumber(v)) {
    append(t, "%.10g", v->valuedouble);
  } else if (cJSON_IsString(v) && v->valuestring) {
    append(t, "'%s'", v->valuestring);
  } else if (cJSON_IsArray(v) || cJSON_IsObject(v)) {
    int is_object = cJSON_IsObject(v);
    append(t, "%c", is_object ? '{' : '[');
    for (const cJSON *c = v->child; c && t->used + 1 < t->size; c = c->next) {
      if (c != v->child) append(t, ", ");
      if (is_object) append(t, "'%s': ", c->string ? c->string : "");
      value_text(t, c);
    }
    append(t, "%c", is_object ? '}' : ']');
  } else {
    append(t, "(invalid)");
  }
}

void mxu_json_text(const cJSON *value, char *out, size_t size) {
  if (!size) return;
  text_buffer t = {out, size, 0};
  out[0] = 0;
  value_text(&t, value);
  /* A cut value says so rather than looking complete. */
  if (t.used + 1 >= size && size > 4) memcpy(out + size - 4, "...", 4);
}

const cJSON *mxu_json_get(const cJSON *object, const char *key) {
  return cJSON_IsObject(object) ? cJSON_GetObjectItemCaseSensitive(object, key)
                                : NULL;
}

static mxu_status missing(const mxu_json_where *where, const char *key) {
  return mxu_json_fail(where, MXU_ERR_FORMAT, "%s is missing", key);
}

static mxu_status wrong(const mxu_json_where *where, const char *key,
                        const cJSON *value, const char *expected) {
  char text[160];
  mxu_json_text(value, text, sizeof text);
  return mxu_json_fail(where, MXU_ERR_FORMAT, "%s must be %s, got %s", key,
                       expected, text);
}

static mxu_status unsupported(const mxu_json_where *where, const char *key,
                              const cJSON *value, const char *only) {
  char text[160];
  mxu_json_text(value, text, sizeof text);
  return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                       "%s %s is not supported (only %s)", key, text, only);
}

/* ---- numbers, booleans, strings ------------------------------------------
 */

/* Range first, so the cast to int is always defined. */
static int integral(const cJSON *v, int min, int max, int *out) {
  if (!cJSON_IsNumber(v)) return 0;
  double d = v->valuedouble;
  if (!(d >= (double)min && d <= (double)max) || d != (double)(int)d) return 0;
  *out = (int)d;
  return 1;
}

static void describe_range(int min, int max, char *out, size_t size) {
  if (min == 1 && max == INT_MAX)
    snprintf(out, size, "a positive integer");
  else if (min == 0 && max == INT_MAX)
    snprintf(out, size, "a non-negative integer");
  else
    snprintf(out, size, "an integer in [%d, %d]", min, max);
}

mxu_status mxu_json_int(const mxu_json_where *where, const cJSON *object,
                        const char *key, int required, int min, int max,
                        int *out) {
  const cJSON *v = mxu_json_get(object, key);
  if (!v) return required ? missing(where, key) : MXU_OK;
  if (integral(v, min, max, out)) return MXU_OK;
  char expected[64];
  describe_range(min, max, expected, sizeof expected);
  return wrong(where, key, v, expected);
}

mxu_status mxu_json_int_pair(const mxu_json_where *where, const cJSON *object,
                             const char *key, int required, int out[2]) {
  const cJSON *v = mxu_json_get(object, key);
  if (!v) return required ? missing(where, key) : MXU_OK;
  int a, b;
  if (integral(v, 1, INT_MAX, &a)) {
    out[0] = out[1] = a;
    return MXU_OK;
  }
  if (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 2 &&
      integral(v->child, 1, INT_MAX, &a) &&
      integral(v->child->next, 1, INT_MAX, &b)) {
    out[0] = a;
    out[1] = b;
    return MXU_OK;
  }
  return wrong(where, key, v, "a positive integer or a list of two");
}

mxu_status mxu_json_int_triple(const mxu_json_where *where, const cJSON *object,
                               const char *key, int required, int out[3]) {
  const cJSON *v = mxu_json_get(object, key);
  if (!v) return required ? missing(where, key) : MXU_OK;
  int values[3];
  if (integral(v, 1, INT_MAX, &values[0])) {
    out[0] = out[1] = out[2] = values[0];
    return MXU_OK;
  }
  const cJSON *e =
      cJSON_IsArray(v) && cJSON_GetArraySize(v) == 3 ? v->child : NULL;
  for (int i = 0; e && i < 3; i++, e = e->next)
    if (!integral(e, 1, INT_MAX, &values[i]))
      return wrong(where, key, v, "a positive integer or a list of three");
  if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 3)
    return wrong(where, key, v, "a positive integer or a list of three");
  memcpy(out, values, sizeof values);
  return MXU_OK;
}

/* A 1-D layer's size: n or [n] (Keras writes the tuple (n,)). */
mxu_status mxu_json_int_one(const mxu_json_where *where, const cJSON *object,
                            const char *key, int required, int *out) {
  const cJSON *v = mxu_json_get(object, key);
  if (!v) return required ? missing(where, key) : MXU_OK;
  if (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 1) v = v->child;
  if (integral(v, 1, INT_MAX, out)) return MXU_OK;
  return wrong(where, key, mxu_json_get(object, key),
               "a positive integer or a list of one");
}

mxu_status mxu_json_float(const mxu_json_where *where, const cJSON *object,
                          const char *key, int required, float *out) {
  const cJSON *v = mxu_json_get(object, key);
  if (!v) return required ? missing(where, key) : MXU_OK;
  if (!cJSON_IsNumber(v) || !(v->valuedouble >= -FLT_MAX) ||
      !(v->valuedouble <= FLT_MAX))
    return wrong(where, key, v, "a number");
  *out = (float)v->valuedouble;
  return MXU_OK;
}

mxu_status mxu_json_bool(const mxu_json_where *where, const cJSON *object,
                         const char *key, int *out) {
  const cJSON *v = mxu_json_get(object, key);
  if (!v) return MXU_OK;
  if (!cJSON_IsBool(v)) return wrong(where, key, v, "true or false");
  *out = cJSON_IsTrue(v) ? 1 : 0;
  return MXU_OK;
}

mxu_status mxu_json_string(const mxu_json_where *where, const cJSON *object,
                           const char *key, int required, const char **out) {
  const cJSON *v = mxu_json_get(object, key);
  if (!v) return required ? missing(where, key) : MXU_OK;
  if (!cJSON_IsString(v) || !v->valuestring)
    return wrong(where, key, v, "a string");
  *out = v->valuestring;
  return MXU_OK;
}

/* ---- options mxu cannot honour -------------------------------------------
 */

mxu_status mxu_json_require_null(const mxu_json_where *where,
                                 const cJSON *object, const char *key) {
  const cJSON *v = mxu_json_get(object, key);
  if (!v || cJSON_IsNull(v)) return MXU_OK;
  return unsupported(where, key, v, "null");
}

mxu_status mxu_json_require_false(const mxu_json_where *where,
                                  const cJSON *object, const char *key) {
  const cJSON *v = mxu_json_get(object, key);
  if (!v || cJSON_IsNull(v) || cJSON_IsFalse(v)) return MXU_OK;
  if (!cJSON_IsTrue(v)) return wrong(where, key, v, "true or false");
  return unsupported(where, key, v, "false");
}

mxu_status mxu_json_require_ones(const mxu_json_where *where,
                                 const cJSON *object, const char *key) {
  int pair[2] = {1, 1};
  MXU_TRY(mxu_json_int_pair(where, object, key, MXU_JSON_OPTIONAL, pair));
  if (pair[0] == 1 && pair[1] == 1) return MXU_OK;
  return unsupported(where, key, mxu_json_get(object, key), "[1, 1]");
}

/* ---- Keras vocabulary ----------------------------------------------------
 */

static const char *const activation_names[] = {
    [MXU_LINEAR] = "linear",
    [MXU_RELU] = "relu",
    [MXU_SIGMOID] = "sigmoid",
    [MXU_TANH] = "tanh",
    [MXU_SOFTMAX] = "softmax",
    [MXU_RELU6] = "relu6",
    [MXU_LEAKY_RELU] = "leaky_relu",
    [MXU_ELU] = "elu",
    [MXU_SELU] = "selu",
    [MXU_GELU] = "gelu",
    /* Keras has no name for it (gelu's approximate argument is not in the
     * config); this one is mxu's, for its own files. */
    [MXU_GELU_TANH] = "gelu_approximate",
    [MXU_SILU] = "silu",
    [MXU_SOFTPLUS] = "softplus",
    [MXU_SOFTSIGN] = "softsign",
    [MXU_HARD_SIGMOID] = "hard_sigmoid",
    [MXU_HARD_SIGMOID_TF2] = "hard_sigmoid",
    [MXU_HARD_SILU] = "hard_silu",
    [MXU_EXPONENTIAL] = "exponential",
    [MXU_MISH] = "mish",
    [MXU_CELU] = "celu",
    [MXU_HARD_TANH] = "hard_tanh",
    [MXU_LOG_SIGMOID] = "log_sigmoid",
    [MXU_TANH_SHRINK] = "tanh_shrink",
    [MXU_SQUAREPLUS] = "squareplus",
    [MXU_SPARSE_PLUS] = "sparse_plus",
    [MXU_SPARSE_SIGMOID] = "sparse_sigmoid",
    [MXU_SOFT_SHRINK] = "soft_shrink",
    [MXU_HARD_SHRINK] = "hard_shrink",
    [MXU_LOG_SOFTMAX] = "log_softmax",
};

const char *mxu_json_activation_name(mxu_activation activation) {
  unsigned i = (unsigned)activation;
  return i < sizeof activation_names / sizeof *activation_names
             ? activation_names[i]
             : "linear";
}

/* The first of two entries with one name is Keras 3's meaning; tf.keras 2
 * gave hard_sigmoid another slope. Keras reads swish for silu and
 * hard_swish for hard_silu too. */
static int activation_of(const char *name, int keras2, mxu_activation *out) {
  static const struct {
    const char *name;
    mxu_activation activation;
  } aliases[] = {{"swish", MXU_SILU}, {"hard_swish", MXU_HARD_SILU}};
  for (unsigned i = 0; i < sizeof aliases / sizeof *aliases; i++)
    if (strcmp(name, aliases[i].name) == 0) {
      *out = aliases[i].activation;
      return 1;
    }
  for (unsigned i = 0; i < sizeof activation_names / sizeof *activation_names;
       i++)
    if (strcmp(name, activation_names[i]) == 0) {
      *out = (mxu_activation)i;
      if (*out == MXU_HARD_SIGMOID && keras2) *out = MXU_HARD_SIGMOID_TF2;
      return 1;
    }
  return 0;
}

mxu_status mxu_json_activation(const mxu_json_where *where, const cJSON *object,
                               const char *key, int keras2,
                               mxu_activation *out) {
  const cJSON *v = mxu_json_get(object, key);
  if (!v) return MXU_OK;
  if (cJSON_IsNull(v)) {
    *out = MXU_LINEAR; /* Keras: activation=None is no activation */
    return MXU_OK;
  }
  if (cJSON_IsString(v) && v->valuestring) {
    if (activation_of(v->valuestring, keras2, out)) return MXU_OK;
  } else if (!cJSON_IsObject(v)) {
    return wrong(where, key, v, "a string");
  }
  /* A string Keras knows but mxu does not, or a custom object. */
  return unsupported(where, key, v,
                     "linear, relu, sigmoid, tanh, softmax, relu6, "
                     "leaky_relu, elu, selu, gelu, silu (swish), softplus, "
                     "softsign, hard_sigmoid, hard_silu (hard_swish), "
                     "exponential, mish, celu, hard_tanh, log_sigmoid, "
                     "tanh_shrink, squareplus, sparse_plus, sparse_sigmoid, "
                     "soft_shrink, hard_shrink or log_softmax");
}

static mxu_status padding_of(const mxu_json_where *where, const cJSON *object,
                             int causal, mxu_padding *out) {
  const char *expected =
      causal ? "'valid', 'same' or 'causal'" : "'valid' or 'same'";
  const cJSON *v = mxu_json_get(object, "padding");
  if (!v) return MXU_OK;
  if (!cJSON_IsString(v) || !v->valuestring)
    return wrong(where, "padding", v, expected);
  /* Keras lower-cases the padding before use. */
  if (strcasecmp(v->valuestring, "valid") == 0) {
    *out = MXU_VALID;
  } else if (strcasecmp(v->valuestring, "same") == 0) {
    *out = MXU_SAME;
  } else if (causal && strcasecmp(v->valuestring, "causal") == 0) {
    *out = MXU_CAUSAL;
  } else if (strcasecmp(v->valuestring, "causal") == 0 ||
             strcasecmp(v->valuestring, "full") == 0) {
    return unsupported(where, "padding", v, expected);
  } else {
    return wrong(where, "padding", v, expected);
  }
  return MXU_OK;
}

mxu_status mxu_json_padding(const mxu_json_where *where, const cJSON *object,
                            mxu_padding *out) {
  return padding_of(where, object, 0, out);
}

mxu_status mxu_json_padding_causal(const mxu_json_where *where,
                                   const cJSON *object, mxu_padding *out) {
  return padding_of(where, object, 1, out);
}

mxu_status mxu_json_data_format(const mxu_json_where *where,
                                const cJSON *object) {
  const cJSON *v = mxu_json_get(object, "data_format");
  /* null is Keras' image_data_format(), channels_last unless configured. */
  if (!v || cJSON_IsNull(v)) return MXU_OK;
  if (!cJSON_IsString(v) || !v->valuestring)
    return wrong(where, "data_format", v, "a string");
  if (strcmp(v->valuestring, "channels_last") == 0) return MXU_OK;
  if (strcmp(v->valuestring, "channels_first") == 0)
    return unsupported(where, "data_format", v, "'channels_last'");
  return wrong(where, "data_format", v, "'channels_last' or 'channels_first'");
}

/* "float32", {"class_name": "DTypePolicy", "config": {"name": "float32"}}
 * (Keras 3) or {"class_name": "Policy", ...} (tf.keras 2.x mixed
 * precision). bfloat16 compute comes with the mixed precision issue. */
mxu_status mxu_json_dtype(const mxu_json_where *where, const cJSON *object,
                          const char *key) {
  const cJSON *v = mxu_json_get(object, key);
  if (!v || cJSON_IsNull(v)) return MXU_OK;
  const cJSON *name = v;
  if (cJSON_IsObject(v)) name = mxu_json_get(mxu_json_get(v, "config"), "name");
  if (!cJSON_IsString(name) || !name->valuestring)
    return wrong(where, key, v, "a dtype name or a DTypePolicy");
  if (strcmp(name->valuestring, "float32") == 0) return MXU_OK;
  return unsupported(where, key, name, "'float32'");
}

/* ---- unknown keys --------------------------------------------------------
 */

static int listed(const char *key, const char *const *list) {
  for (; list && *list; list++)
    if (strcmp(key, *list) == 0) return 1;
  return 0;
}

mxu_status mxu_json_check_keys(const mxu_json_where *where, const cJSON *object,
                               const char *const *known,
                               const char *const *also_known) {
  if (!cJSON_IsObject(object)) return MXU_OK;
  for (const cJSON *c = object->child; c; c = c->next) {
    if (!c->string || listed(c->string, known) || listed(c->string, also_known))
      continue;
    if (cJSON_IsNull(c) || cJSON_IsFalse(c)) continue;
    char text[160];
    mxu_json_text(c, text, sizeof text);
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                         "%s %s is not supported (a key mxu does not know)",
                         c->string, text);
  }
  return MXU_OK;
}
