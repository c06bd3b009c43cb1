/* weights.h — what the two Keras weights layouts (weights_keras2.c: tf.keras
 * 2.x save_weights("w.h5"); weights_keras3.c: Keras 3
 * save_weights("w.weights.h5")) share with the entry points in
 * hdf5_weights.c: walking the model's layers that have weights, reading
 * into scratch buffers, and the messages for a file of another model.
 * Internal to libmxu. */
#ifndef MXU_IO_WEIGHTS_H
#define MXU_IO_WEIGHTS_H

#include "io/h5.h"
#include "model/model.h"

/* A load in progress: every value read lands in scratch (one buffer per
 * entry of model->params), and the model changes only once the whole file
 * has been read and checked. */
typedef struct mxu_weights_load {
  const char *path;
  mxu_model *model;
  float **scratch;
} mxu_weights_load;

/* The model's layers as a weights file holds them, in Keras' order: for
 * tf.keras 2 (keras3 0) Keras' model.layers, where a model used as a
 * layer is one layer holding the trainable weights of its layers, then
 * the others; for Keras 3 every layer of every model (which it nests in
 * groups). Each layer's weights are a run of `params` (indices into
 * model->params); layers without weights are kept. */
typedef struct mxu_weights_layers {
  int count;
  const char **names;
  int *nodes; /* a node, or -1 - scope for a model used as a layer */
  int *first, *size;
  int *params;
} mxu_weights_layers;

mxu_status mxu_weights_layers_make(const mxu_model *model, int keras3,
                                   mxu_weights_layers *out);
void mxu_weights_layers_free(mxu_weights_layers *layers);
/* How many of them have weights. */
int mxu_weights_layers_with_weights(const mxu_weights_layers *layers);

/* Checks that `dataset` has the shape of weight k of layer l (the
 * position-th with weights, from 1) and reads it into scratch. */
mxu_status mxu_weights_take(mxu_weights_load *load,
                            const mxu_weights_layers *layers, int l,
                            int position, int k, hid_t dataset);
/* "the file has 1 weights for it (from 'dense_3') but the model has 2" */
mxu_status mxu_weights_count_mismatch(const mxu_weights_load *load,
                                      const mxu_weights_layers *layers, int l,
                                      int position, int file_count,
                                      const char *file_layer);
/* "the file holds weights for 3 layers but the model has 2 ..." */
mxu_status mxu_weights_layers_mismatch(const mxu_weights_load *load,
                                       const mxu_weights_layers *layers,
                                       int file_layers);

/* tf.keras 2.x: root attributes layer_names, backend, keras_version; a
 * group per layer with weight_names and <layer>/<layer>/<weight>:0. */
mxu_status mxu_keras2_write(const mxu_model *model, hid_t root,
                            const char *path);
/* 1 when root (or its model_weights group) has layer_names. */
int mxu_keras2_detect(hid_t root);
mxu_status mxu_keras2_read(mxu_weights_load *load, hid_t root);

/* Keras 3: layers/<snake_case class>[_n]/vars/<i>. */
mxu_status mxu_keras3_write(const mxu_model *model, hid_t root,
                            const char *path);
int mxu_keras3_detect(hid_t root);
mxu_status mxu_keras3_read(mxu_weights_load *load, hid_t root);

#endif
