/* json.h — what the Keras model JSON reader and writer share inside src/io
 * beyond core/json.h's config values (each layer class reads and writes
 * its own config): the compile config. Internal to libmxu. */
#ifndef MXU_IO_JSON_H
#define MXU_IO_JSON_H

#include "core/json.h"
#include "model/model.h"

/* The Keras versions whose files mxu writes. */
#define MXU_KERAS2_VERSION "2.15.0"
#define MXU_KERAS3_VERSION "3.6.0"

/* ---- compile_config ------------------------------------------------------
 */

/* Reads root's compile_config (Keras 3) or training_config (tf.keras 2.x)
 * over *compile, its losses, loss weights and metrics matched to model's
 * outputs by name or order; *found says whether either was there. A
 * metric Keras logs under a name of its own is read as "NAME=METRIC",
 * text the model keeps. */
mxu_status mxu_json_read_compile(const char *source, const cJSON *root,
                                 mxu_model *model, mxu_compile_config *compile,
                                 int *found);
/* Model output k's name, which Keras keys losses and metrics by: its
 * layer's ("" past the outputs). */
const char *mxu_json_output_name(const mxu_model *model, int k);
/* Whether the model's compile settings are written per output, in
 * Keras' dicts by output name (several outputs, or a weighted one). */
int mxu_json_per_output(const mxu_model *model);
/* A full-model .h5's model_config as a model, its training_config over
 * *compile (model_file.c): what mxu_model_load_json gives for one. */
mxu_status mxu_model_file_read_json(const char *path, mxu_model **out,
                                    mxu_compile_config *compile,
                                    int *has_compile);

/* The compiled model's compile settings, Keras 3 compile_config style. */
cJSON *mxu_json_compile_config(mxu_json_out *out, const mxu_model *model);
/* The class object Keras writes for a metric under `name`: always for
 * those that are no function (Precision, AUC, RootMeanSquaredError...),
 * for the others (accuracies, mae, ...) only when `named` (logged under a
 * name of their own); NULL where Keras writes the function by name (or
 * tf.keras 2 wraps it). */
cJSON *mxu_json_metric_class(mxu_json_out *out, const char *name,
                             mxu_metric_kind kind,
                             const mxu_metric_options *options, int named);

/* ---- ops recorded as layers (json_ops.c) -------------------------------
 */

typedef struct mxu_json_op {
  const char *k3_module, *k3; /* Keras 3: module and class */
  const char *tf2;            /* tf.keras 2: TFOpLambda's function */
  mxu_op_kind kind;
  mxu_activation activation; /* MXU_OP_ACTIVATION's */
  /* The op's own argument (concat's axis, reshape's shape): its key in
   * Keras 3's config and in tf.keras 2's call, or NULL. */
  const char *k3_key, *tf2_key;
} mxu_json_op;

/* The op of that Keras 3 class (tf2 0) or TFOpLambda function, or NULL. */
const mxu_json_op *mxu_json_op_named(int tf2, const char *name);
/* The op a layer read from one computes (its first name), or NULL. */
const mxu_json_op *mxu_json_op_of(const mxu_layer *layer);
/* Whether a Keras 3 entry's module is one of the ops'. */
int mxu_json_op_module(const char *module);

#endif
