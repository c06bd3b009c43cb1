/* tensorboard.h — TensorBoard event files: one writer per run directory
 * (Keras' <log_dir>/train, <log_dir>/validation) appending scalar events
 * as TFRecords, so `tensorboard --logdir` plots mxu's training like
 * Keras'. Internal to libmxu.
 *
 * Messages start with "tensorboard: " and the path concerned. */
#ifndef MXU_IO_TENSORBOARD_H
#define MXU_IO_TENSORBOARD_H

#include "core/core.h"

#include <stddef.h>
#include <stdint.h>

typedef struct mxu_tb_writer mxu_tb_writer;

/* Creates dir and its parents (as mkdir -p does) and a new event file in
 * it, named as TensorFlow 2 names them,
 * events.out.tfevents.<unix seconds>.<hostname>.<pid>.<counter>.v2, whose
 * first record is the file_version event. Never overwrites a file. */
mxu_status mxu_tb_open(const char *dir, mxu_tb_writer **out);

/* Appends one Event with wall_time = now, step, and a Summary holding one
 * Value as Keras' callback (tf.summary.scalar) writes it: tag, metadata
 * for the scalars plugin, and value rounded to a float32 tensor of shape
 * (). The record reaches the system before this returns, so a
 * write error (a full disk) is this call's; after one, every later call
 * reports it again rather than append after a partial record. */
mxu_status mxu_tb_scalar(mxu_tb_writer *w, const char *tag, int64_t step,
                         double value);

/* The model's Keras JSON as Keras' callback writes it with write_graph
 * (a string tensor tagged "keras" for TensorBoard's graph plugin, which
 * draws the model's layers from it), at step 0. */
mxu_status mxu_tb_keras_model(mxu_tb_writer *w, const char *json);

/* Reports the first write error, if any. Records are not buffered, so
 * there is nothing to hand over; callers still flush at the points a
 * buffered writer would need it (epoch ends), which keeps that freedom. */
mxu_status mxu_tb_flush(mxu_tb_writer *w);

/* Closes the file and frees the writer; NULL is allowed. */
void mxu_tb_close(mxu_tb_writer *w);

/* The event file's path, for messages and tests. */
const char *mxu_tb_path(const mxu_tb_writer *w);

/* CRC-32C (Castagnoli), as TFRecord frames use it, and TensorFlow's masked
 * form of it, ((crc >> 15) | (crc << 17)) + 0xa282ead8, which is what the
 * file stores (a CRC of data that holds CRCs is then less degenerate). */
uint32_t mxu_crc32c(const void *data, size_t n);
uint32_t mxu_crc32c_masked(const void *data, size_t n);

#endif
