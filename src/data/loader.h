/* loader.h — what the file readers (idx.c, cifar.c) share: reading a whole
 * file, plain or gzip, finding a data file in a directory, and a data set
 * with room for samples the reader fills in place. Internal to src/data. */
#ifndef MXU_DATA_LOADER_H
#define MXU_DATA_LOADER_H

#include "data/data.h"

#include <stddef.h>

/* Reads all of path into *data (malloc'd, free with free) and *size; zlib
 * reads plain files as they are and gunzips gzip ones. Messages start
 * "who: path: ". A missing or unreadable file is MXU_ERR_IO, a corrupt or
 * cut gzip stream MXU_ERR_FORMAT. */
mxu_status mxu_read_file(const char *who, const char *path,
                         unsigned char **data, size_t *size);

/* The most bytes a data file may unpack to in memory: half the machine's
 * memory, or the environment's MXU_MAX_DATA_BYTES. */
size_t mxu_data_limit(void);

/* Finds dir/name or dir/name.gz and returns the path (malloc'd) in *path.
 * MXU_ERR_IO, naming both candidates, when neither exists. */
mxu_status mxu_find_data_file(const char *who, const char *dir,
                              const char *name, char **path);

/* A data set that owns uninitialised room for count samples of shape; the
 * caller fills x and labels. Sizes are checked for overflow. */
mxu_status mxu_dataset_alloc(mxu_shape shape, int64_t count, int num_classes,
                             mxu_dataset **out);

/* The same around samples x that lie in a file mapping (count * shape
 * floats), which the data set unmaps when freed; labels are allocated. */
mxu_status mxu_dataset_alloc_mapped(mxu_shape shape, int64_t count,
                                    int num_classes, void *mapping,
                                    size_t mapping_size, float *x,
                                    mxu_dataset **out);

#endif
