/* json_output.c — building Keras JSON with cJSON: every add goes through
 * mxu_json_put, which remembers an allocation failure so the writer checks
 * once at the end; floats are written with the digits a float32 needs. */
#include "core/json.h"

#include <math.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

cJSON *mxu_json_put(mxu_json_out *out, cJSON *object, const char *key,
                    cJSON *item) {
  if (!item || !object || !cJSON_AddItemToObject(object, key, item)) {
    cJSON_Delete(item);
    out->failed = 1;
    return NULL;
  }
  return item;
}

void mxu_json_append(mxu_json_out *out, cJSON *list, cJSON *item) {
  if (!item || !list || !cJSON_AddItemToArray(list, item)) {
    cJSON_Delete(item);
    out->failed = 1;
  }
}

void mxu_json_put_number(mxu_json_out *out, cJSON *object, const char *key,
                         double value) {
  mxu_json_put(out, object, key, cJSON_CreateNumber(value));
}

/* The shortest %g text that reads back as the same float, as a double:
 * cJSON prints that double with its 15 digits, i.e. the short text. */
double mxu_json_short_float(float value) {
  char text[32];
  for (int digits = 6; digits <= 9; digits++) {
    snprintf(text, sizeof text, "%.*g", digits, (double)value);
    if (strtof(text, NULL) == value) break;
  }
  return strtod(text, NULL);
}

/* Python writes a float with a point or an exponent (0.0, 2.0, 1e-07),
 * and Keras checks some settings' types (SGD's momentum must be a
 * float): the shortest digits that read back, then ".0" if integral. */
void mxu_json_put_float(mxu_json_out *out, cJSON *object, const char *key,
                        float value) {
  double d = mxu_json_short_float(value);
  if (!isfinite(d)) {
    mxu_json_put_number(out, object, key, d);
    return;
  }
  char text[40];
  for (int digits = 1; digits <= 17; digits++) {
    snprintf(text, sizeof text, "%.*g", digits, d);
    if (strtod(text, NULL) == d) break;
  }
  if (!strpbrk(text, ".e")) strcat(text, ".0");
  mxu_json_put(out, object, key, cJSON_CreateRaw(text));
}

void mxu_json_put_string(mxu_json_out *out, cJSON *object, const char *key,
                         const char *value) {
  mxu_json_put(out, object, key, cJSON_CreateString(value));
}

void mxu_json_put_bool(mxu_json_out *out, cJSON *object, const char *key,
                       int value) {
  mxu_json_put(out, object, key, cJSON_CreateBool(value != 0));
}

void mxu_json_put_null(mxu_json_out *out, cJSON *object, const char *key) {
  mxu_json_put(out, object, key, cJSON_CreateNull());
}

void mxu_json_put_pair(mxu_json_out *out, cJSON *object, const char *key,
                       const int pair[2]) {
  mxu_json_put(out, object, key, cJSON_CreateIntArray(pair, 2));
}

void mxu_json_put_triple(mxu_json_out *out, cJSON *object, const char *key,
                         const int triple[3]) {
  mxu_json_put(out, object, key, cJSON_CreateIntArray(triple, 3));
}

void mxu_json_put_one(mxu_json_out *out, cJSON *object, const char *key,
                      int value) {
  mxu_json_put(out, object, key, cJSON_CreateIntArray(&value, 1));
}

cJSON *mxu_json_object(const mxu_json_out *out, const char *module,
                       const char *class_name, cJSON *config) {
  cJSON *object = cJSON_CreateObject();
  mxu_json_out local = *out;
  if (out->keras3) mxu_json_put_string(&local, object, "module", module);
  mxu_json_put_string(&local, object, "class_name", class_name);
  mxu_json_put(&local, object, "config", config);
  if (out->keras3) mxu_json_put_null(&local, object, "registered_name");
  if (local.failed) {
    cJSON_Delete(object);
    return NULL; /* the caller's put records the failure */
  }
  return object;
}

void mxu_json_put_dtype(mxu_json_out *out, cJSON *object) {
  if (!out->keras3) {
    mxu_json_put_string(out, object, "dtype", "float32");
    return;
  }
  cJSON *config = cJSON_CreateObject();
  mxu_json_put_string(out, config, "name", "float32");
  mxu_json_put(out, object, "dtype",
               mxu_json_object(out, "keras", "DTypePolicy", config));
}

cJSON *mxu_json_batch_shape(const mxu_shape *shape) {
  cJSON *array = cJSON_CreateArray();
  if (!array) return NULL;
  int ok = cJSON_AddItemToArray(array, cJSON_CreateNull());
  for (int i = 0; ok && i < shape->rank; i++)
    ok =
        cJSON_AddItemToArray(array, cJSON_CreateNumber((double)shape->dims[i]));
  if (!ok) {
    cJSON_Delete(array);
    return NULL;
  }
  return array;
}
