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

/* The first layer at or after `from` that has weights; layer_count when
 * none is left. */
int mxu_weights_next_layer(const mxu_model *model, int from);
/* How many layers have weights. */
int mxu_weights_layer_total(const mxu_model *model);

/* Checks that `dataset` has the shape of weight k of `layer` (the
 * position-th layer with weights, from 1) and reads it into scratch. */
mxu_status mxu_weights_take(mxu_weights_load *load, int layer, int position,
                            int k, hid_t dataset);
/* "the file has 1 weights for it (from 'dense_3') but the model has 2" */
mxu_status mxu_weights_count_mismatch(const mxu_weights_load *load, int layer,
                                      int position, int file_count,
                                      const char *file_layer);
/* "the file holds weights for 3 layers but the model has 2 ..." */
mxu_status mxu_weights_layers_mismatch(const mxu_weights_load *load,
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
