/* h5.h — the thin layer over the HDF5 C library that mxu's Keras files
 * share: HDF5's own error printing silenced with its most specific message
 * kept for mxu's, string attributes as h5py writes and reads them, float32
 * datasets, and files written atomically. Internal to libmxu.
 *
 * Messages start with the file's path ("w.h5: /conv2d: ..."); the public
 * entry points put their own prefix ("weights: ") in front. */
#ifndef MXU_IO_H5_H
#define MXU_IO_H5_H

#include "core/core.h"

#include <hdf5.h>

/* Keras splits an attribute whose array would pass this many bytes into
 * name0, name1, ... (HDF5's object header limit, minus room). */
#define MXU_H5_ATTRIBUTE_LIMIT 64512

/* ---- errors ------------------------------------------------------------ */

/* HDF5 prints its whole error stack to stderr by default; mxu explains
 * failures itself, so every entry point silences it and restores what the
 * caller had. */
typedef struct mxu_h5_quiet {
  H5E_auto2_t func;
  void *data;
} mxu_h5_quiet;

void mxu_h5_quiet_begin(mxu_h5_quiet *saved);
void mxu_h5_quiet_end(const mxu_h5_quiet *saved);

/* Records the formatted message followed by ": " and HDF5's most specific
 * message for the call that just failed, if it left one ("truncated file:
 * eof = 96, ...", or only the system's "File too large" of a failed
 * write). The cause is kept before the arguments are evaluated, so they
 * may call HDF5 (mxu_h5_where) without losing it. */
#define mxu_h5_fail(status, ...)                                               \
  (mxu_h5_keep_cause(), mxu_h5_fail_kept((status), __VA_ARGS__))
void mxu_h5_keep_cause(void);
mxu_status mxu_h5_fail_kept(mxu_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The object's path inside the file ("/conv2d"), for messages; the text
 * lives until the fourth call after on this thread. */
const char *mxu_h5_where(hid_t object);

/* ---- files ------------------------------------------------------------- */

/* Bytes before the HDF5 superblock in every file mxu writes; the first
 * hold mxu's seal (h5_check.c). */
#define MXU_H5_USER_BLOCK 512

/* Writes the seal into a finished file image's user block: its size and
 * the CRC-32 of everything after the user block. */
void mxu_h5_seal(unsigned char *image, size_t size);
/* *sealed is 1 when the open file fd (path, for messages) carries mxu's
 * seal; MXU_ERR_FORMAT when it does and the rest no longer matches it. */
mxu_status mxu_h5_check_seal(const char *path, int fd, int *sealed);
/* Reads a file mxu did not write through once in a child process, so a
 * file that crashes (or hangs) libhdf5 is MXU_ERR_FORMAT here instead; so
 * is one with anything HDF5 cannot open or read (with HDF5's reason and
 * the object): libhdf5 1.10 keeps part of a failed open for good, and
 * loops over it at exit. */
mxu_status mxu_h5_probe(const char *path);

/* Opens path read-only once HDF5 may parse it: sealed by mxu and intact,
 * or read through by mxu_h5_probe. A seal that no longer matches is
 * corruption when `intact` is set (a checkpoint to resume from must be
 * what mxu wrote), else the file is taken as one another program edited
 * (h5py keeps the user block) and probed like any foreign file. A missing
 * or unreadable file is MXU_ERR_IO, one that is not HDF5 (or is truncated
 * or corrupt) MXU_ERR_FORMAT. Closing the file closes every object still
 * open in it. */
mxu_status mxu_h5_open(const char *path, int intact, hid_t *file);
/* The same, saying whether the file was probed (*foreign) rather than
 * sealed, for mxu_h5_rehearsed. */
mxu_status mxu_h5_open_foreign(const char *path, int intact, hid_t *file,
                               int *foreign);
/* Runs read(ctx), which reads files already open. For a foreign file the
 * probe's walk is not enough: libhdf5 1.10 can read a damaged global heap
 * past its end in one order of reads and not in another. So read first
 * runs in a child process forked from this very state, where the same
 * calls meet the same memory: a crash or hang there is MXU_ERR_FORMAT
 * here, and otherwise the parent makes the calls the child showed return.
 * read must be deterministic and start no threads. A sealed file (not
 * foreign) runs read directly. */
mxu_status mxu_h5_rehearsed(const char *path, int foreign,
                            mxu_status (*read)(void *ctx), void *ctx);
/* The open alone, for h5_check.c's probe (and after it). */
mxu_status mxu_h5_open_unchecked(const char *path, hid_t *file);
void mxu_h5_close(hid_t file);
/* 1 when the file has HDF5's signature at offset 0 or after mxu's user
 * block (a full-model .h5 given where a model JSON is expected). */
int mxu_h5_is_hdf5(const char *path);

/* A file written atomically: HDF5 builds it in memory; commit writes the
 * bytes to a temporary beside the target, syncs them and renames the
 * temporary over the target, so a crash or a full disk leaves the previous
 * file as it was. */
typedef struct mxu_h5_output {
  const char *path;
  mxu_file_out target; /* where the finished bytes go (core's file.c) */
  hid_t file;          /* the in-memory HDF5 file */
} mxu_h5_output;

mxu_status mxu_h5_create(mxu_h5_output *out, const char *path);
/* Writes, syncs and renames; on failure the temporary is removed. */
mxu_status mxu_h5_commit(mxu_h5_output *out);
/* Closes and removes the temporary after a failed write. */
void mxu_h5_abandon(mxu_h5_output *out);
/* The in-memory file alone, for a file that goes inside another (a .keras
 * archive's model.weights.h5): no target is opened (path names it in
 * messages); finish_image closes the file and gives its sealed bytes
 * (malloc'd). After a failed write, mxu_h5_abandon. */
mxu_status mxu_h5_create_image(mxu_h5_output *out, const char *path);
mxu_status mxu_h5_finish_image(mxu_h5_output *out, unsigned char **image,
                               size_t *size);

/* ---- groups ------------------------------------------------------------ */

/* Creates group `name` under loc, with any missing groups on the way (as
 * h5py does for "a/b"). */
mxu_status mxu_h5_create_group(const char *path, hid_t loc, const char *name,
                               hid_t *group);
/* 1 when loc has a group at `name` (a relative path), else 0. */
int mxu_h5_has_group(hid_t loc, const char *name);
/* Opens the group at `name`, or fails with MXU_ERR_FORMAT naming what. */
mxu_status mxu_h5_open_group(const char *path, hid_t loc, const char *name,
                             hid_t *group);

/* ---- string attributes ------------------------------------------------- */

typedef struct mxu_h5_strings {
  int count;
  char **items;
} mxu_h5_strings;

void mxu_h5_strings_free(mxu_h5_strings *strings);

/* A list as Keras' save_attributes_to_hdf5_group writes it with h5py 3:
 * an empty list is a float64 array of shape (0,); a list whose fixed-width
 * array fits in MXU_H5_ATTRIBUTE_LIMIT bytes is one array of
 * variable-length ASCII strings; a longer one is split into name0,
 * name1, ... (numpy's array_split), each a fixed-width 'S<n>' array. */
mxu_status mxu_h5_write_strings(const char *path, hid_t object,
                                const char *name, const char *const *items,
                                int count);
/* A scalar variable-length string, as h5py writes a Python bytes (ASCII)
 * or str (UTF-8) attribute. */
mxu_status mxu_h5_write_string(const char *path, hid_t object, const char *name,
                               const char *value, H5T_cset_t charset);
/* Reads a list written either way (or by h5py 2, fixed-width unsplit), the
 * split form included; an empty numeric array reads as no strings. *found
 * is 0 when neither name nor name0 exists (out is then empty). */
mxu_status mxu_h5_read_strings(const char *path, hid_t object, const char *name,
                               mxu_h5_strings *out, int *found);

/* ---- float datasets ---------------------------------------------------- */

/* A contiguous little-endian float32 dataset of the given shape, as h5py's
 * create_dataset(name, shape, dtype=float32) makes it. */
mxu_status mxu_h5_write_floats(const char *path, hid_t loc, const char *name,
                               const mxu_shape *shape, const float *values);
/* The dataset's shape; MXU_ERR_FORMAT unless it holds floating-point
 * numbers (any width: HDF5 converts on reading) of rank <= MXU_MAX_RANK. */
mxu_status mxu_h5_float_shape(const char *path, hid_t dataset,
                              mxu_shape *shape);
mxu_status mxu_h5_read_floats(const char *path, hid_t dataset, float *out);

/* ---- integer scalars --------------------------------------------------- */

/* A scalar integer attribute (file_type: H5T_STD_I64LE, H5T_STD_U64LE),
 * as h5py writes a Python or numpy int. */
mxu_status mxu_h5_write_int_attribute(const char *path, hid_t object,
                                      const char *name, hid_t file_type,
                                      hid_t memory_type, const void *value);
/* Reads a scalar integer attribute converted to memory_type; *found is 0
 * (and *value untouched) when there is none. */
mxu_status mxu_h5_read_int_attribute(const char *path, hid_t object,
                                     const char *name, hid_t memory_type,
                                     void *value, int *found);
/* A scalar int64 dataset, as Keras stores an optimizer's iterations. */
mxu_status mxu_h5_write_int64(const char *path, hid_t loc, const char *name,
                              int64_t value);
mxu_status mxu_h5_read_int64(const char *path, hid_t dataset, int64_t *value);

#endif
