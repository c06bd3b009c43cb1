/* keras_file.h — Keras 3's .keras archives, read and built (keras_file.c).
 * Internal to libmxu. */
#ifndef MXU_IO_KERAS_FILE_H
#define MXU_IO_KERAS_FILE_H

#include "core/core.h"

#include <stddef.h>

/* 1 when the file starts as a zip does (a .keras file, whatever its
 * name). */
int mxu_keras_is_archive(const char *path);

/* Member `name` of the archive, whole, NUL-terminated (malloc'd), at most
 * limit bytes; its CRC checked. Messages name the archive. */
mxu_status mxu_keras_read_member(const char *path, const char *name,
                                 size_t limit, char **bytes, size_t *size);

/* Writes the archive's model.weights.h5 to a fresh temporary folder;
 * *out (out_size bytes) gets its path, for the weights reader. */
mxu_status mxu_keras_extract_weights(const char *path, size_t limit, char *out,
                                     size_t out_size);
/* Removes what mxu_keras_extract_weights made. */
void mxu_keras_remove_extracted(const char *extracted);
/* A failure's message with the temporary path replaced by the archive's
 * ("m.keras (model.weights.h5)"); MXU_OK passes through. */
mxu_status mxu_keras_name_extracted(mxu_status status, const char *extracted,
                                    const char *path);

/* A .keras archive's bytes (malloc'd) as Keras 3's saving_lib writes one:
 * metadata.json, config.json and model.weights.h5, stored uncompressed,
 * built in memory with libzip; path names it in messages. */
mxu_status mxu_keras_archive(const char *path, const char *config,
                             const unsigned char *weights, size_t weights_size,
                             unsigned char **bytes, size_t *size);

#endif
