/* h5.c — the HDF5 helpers behind mxu's Keras files (see h5.h): error
 * messages that carry HDF5's own cause, atomic files, groups, string
 * attributes in h5py's forms and float32 datasets. */
#include "io/h5.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- errors ------------------------------------------------------------ */

void mxu_h5_quiet_begin(mxu_h5_quiet *saved) {
  saved->func = NULL;
  saved->data = NULL;
  H5Eget_auto2(H5E_DEFAULT, &saved->func, &saved->data);
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

void mxu_h5_quiet_end(const mxu_h5_quiet *saved) {
  H5Eset_auto2(H5E_DEFAULT, saved->func, saved->data);
}

static _Thread_local char kept_cause[256];

/* A failed system call's description ends in "error message = '...'":
 * that part is the cause a person needs. */
static herr_t take_innermost(unsigned n, const H5E_error2_t *e, void *data) {
  (void)n;
  const char *desc = e->desc ? e->desc : "";
  const char *os = strstr(desc, "error message = '");
  if (os) {
    os += strlen("error message = '");
    const char *end = strchr(os, '\'');
    int length = end ? (int)(end - os) : (int)strlen(os);
    snprintf(data, sizeof kept_cause, "%.*s", length, os);
  } else {
    snprintf(data, sizeof kept_cause, "%s", desc);
  }
  return 1; /* the walk starts at the most specific entry: stop there */
}

void mxu_h5_keep_cause(void) {
  kept_cause[0] = 0;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, take_innermost, kept_cause);
}

mxu_status mxu_h5_fail_kept(mxu_status status, const char *fmt, ...) {
  char message[768];
  va_list args;
  va_start(args, fmt);
  vsnprintf(message, sizeof message, fmt, args);
  va_end(args);
  if (!kept_cause[0]) return mxu_fail(status, "%s", message);
  mxu_status s = mxu_fail(status, "%s: %s", message, kept_cause);
  kept_cause[0] = 0;
  return s;
}

const char *mxu_h5_where(hid_t object) {
  static _Thread_local char texts[4][256];
  static _Thread_local int next;
  char *text = texts[next++ % 4];
  if (H5Iget_name(object, text, sizeof texts[0]) <= 0)
    snprintf(text, sizeof texts[0], "(unnamed object)");
  return text;
}

/* ---- files ------------------------------------------------------------- */

/* Closing the file then closes whatever an error path left open. */
static hid_t access_plist(void) {
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  if (fapl >= 0) H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG);
  return fapl;
}

/* The system's reason comes first: HDF5 would only say it cannot open.
 * Then whether HDF5 may parse it: sealed and intact, or probed. */
static mxu_status check_readable(const char *path, int intact, int *foreign) {
  int fd = open(path, O_RDONLY);
  if (fd < 0)
    return mxu_fail(MXU_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  struct stat st;
  int regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode), sealed = 0;
  mxu_status s = regular ? mxu_h5_check_seal(path, fd, &sealed)
                         : mxu_fail(MXU_ERR_IO, "%s: not a regular file", path);
  close(fd);
  if (s == MXU_ERR_FORMAT && sealed && !intact) {
    s = MXU_OK;
    sealed = 0;
  }
  if (s == MXU_OK && !sealed) s = mxu_h5_probe(path);
  *foreign = !sealed;
  return s;
}

mxu_status mxu_h5_open_foreign(const char *path, int intact, hid_t *file,
                               int *foreign) {
  *file = H5I_INVALID_HID;
  MXU_TRY(check_readable(path, intact, foreign));
  return mxu_h5_open_unchecked(path, file);
}

mxu_status mxu_h5_open(const char *path, int intact, hid_t *file) {
  int foreign;
  return mxu_h5_open_foreign(path, intact, file, &foreign);
}

mxu_status mxu_h5_open_unchecked(const char *path, hid_t *file) {
  *file = H5I_INVALID_HID;
  htri_t is_hdf5 = H5Fis_hdf5(path);
  if (is_hdf5 <= 0)
    return mxu_h5_fail(MXU_ERR_FORMAT,
                       "%s: not an HDF5 file (no HDF5 signature)", path);
  hid_t fapl = access_plist();
  *file = H5Fopen(path, H5F_ACC_RDONLY, fapl);
  mxu_status s = MXU_OK;
  if (*file < 0)
    s = mxu_h5_fail(MXU_ERR_FORMAT,
                    "%s: an HDF5 file that cannot be opened, truncated or "
                    "corrupt",
                    path);
  H5Pclose(fapl);
  return s;
}

void mxu_h5_close(hid_t file) {
  if (file >= 0) H5Fclose(file);
}

int mxu_h5_is_hdf5(const char *path) {
  static const unsigned char signature[8] = {0x89, 'H',  'D',  'F',
                                             '\r', '\n', 0x1a, '\n'};
  unsigned char head[MXU_H5_USER_BLOCK + 8];
  FILE *f = fopen(path, "rb");
  size_t n = f ? fread(head, 1, sizeof head, f) : 0;
  if (f) fclose(f);
  return (n >= 8 && memcmp(head, signature, 8) == 0) ||
         (n == sizeof head &&
          memcmp(head + MXU_H5_USER_BLOCK, signature, 8) == 0);
}

/* HDF5 builds the file in memory (its core driver): a write that fails
 * on disk then fails in mxu's own write(), never inside HDF5, which may
 * keep a file it could not close and crash at exit over it. */
static hid_t memory_plist(void) {
  hid_t fapl = access_plist();
  if (fapl >= 0) H5Pset_fapl_core(fapl, (size_t)1 << 20, 0);
  return fapl;
}

static mxu_status create_file(mxu_h5_output *out, const char *path) {
  out->path = path;
  out->file = H5I_INVALID_HID;
  hid_t fapl = memory_plist(), fcpl = H5Pcreate(H5P_FILE_CREATE);
  if (fcpl >= 0) H5Pset_userblock(fcpl, MXU_H5_USER_BLOCK);
  /* In memory only (no backing store): the name is just a name. */
  out->file = H5Fcreate(path, H5F_ACC_TRUNC, fcpl, fapl);
  mxu_status s = MXU_OK;
  if (out->file < 0) {
    s = mxu_h5_fail(MXU_ERR_IO, "%s: cannot create an HDF5 file", path);
    mxu_h5_abandon(out);
  }
  H5Pclose(fapl);
  H5Pclose(fcpl);
  return s;
}

mxu_status mxu_h5_create(mxu_h5_output *out, const char *path) {
  out->file = H5I_INVALID_HID;
  /* The target first, so an unwritable place fails before any work. */
  MXU_TRY(mxu_file_begin(&out->target, path));
  return create_file(out, path);
}

mxu_status mxu_h5_create_image(mxu_h5_output *out, const char *path) {
  memset(&out->target, 0, sizeof out->target);
  out->target.fd = -1; /* none: abandoning removes nothing */
  return create_file(out, path);
}

/* The finished file's bytes, malloc'd; HDF5 is done with the file. Its
 * image starts at the superblock: the user block goes in front. */
static mxu_status take_image(mxu_h5_output *out, unsigned char **image,
                             size_t *size) {
  ssize_t n = -1;
  if (H5Fflush(out->file, H5F_SCOPE_GLOBAL) >= 0)
    n = H5Fget_file_image(out->file, NULL, 0);
  if (n < 0)
    return mxu_h5_fail(MXU_ERR_IO, "%s: cannot finish the HDF5 file",
                       out->path);
  *size = MXU_H5_USER_BLOCK + (size_t)n;
  *image = calloc(*size, 1);
  if (!*image)
    return mxu_fail(MXU_ERR_NOMEM, "%s: out of memory for %zu bytes", out->path,
                    *size);
  if (H5Fget_file_image(out->file, *image + MXU_H5_USER_BLOCK, (size_t)n) !=
      n) {
    free(*image);
    return mxu_h5_fail(MXU_ERR_IO, "%s: cannot finish the HDF5 file",
                       out->path);
  }
  return MXU_OK;
}

mxu_status mxu_h5_finish_image(mxu_h5_output *out, unsigned char **image,
                               size_t *size) {
  mxu_status s = take_image(out, image, size);
  if (out->file >= 0) H5Fclose(out->file); /* in memory: nothing to fail */
  out->file = H5I_INVALID_HID;
  if (s == MXU_OK) mxu_h5_seal(*image, *size);
  return s;
}

mxu_status mxu_h5_commit(mxu_h5_output *out) {
  unsigned char *image = NULL;
  size_t size = 0;
  mxu_status s = mxu_h5_finish_image(out, &image, &size);
  if (s != MXU_OK) {
    mxu_file_abandon(&out->target);
    return s;
  }
  s = mxu_file_finish(&out->target, image, size);
  free(image);
  return s;
}

void mxu_h5_abandon(mxu_h5_output *out) {
  if (out->file >= 0) H5Fclose(out->file);
  out->file = H5I_INVALID_HID;
  mxu_file_abandon(&out->target);
}

/* ---- groups ------------------------------------------------------------ */

/* h5py creates missing parents of "a/b/c"; so do these links. */
static hid_t link_plist(void) {
  hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
  if (lcpl >= 0) H5Pset_create_intermediate_group(lcpl, 1);
  return lcpl;
}

/* No timestamps in object headers: the same weights give the same bytes,
 * and h5py leaves them out of datasets too. */
static hid_t object_plist(hid_t class_id) {
  hid_t plist = H5Pcreate(class_id);
  if (plist >= 0) H5Pset_obj_track_times(plist, 0);
  return plist;
}

mxu_status mxu_h5_create_group(const char *path, hid_t loc, const char *name,
                               hid_t *group) {
  hid_t lcpl = link_plist(), gcpl = object_plist(H5P_GROUP_CREATE);
  *group = H5Gcreate2(loc, name, lcpl, gcpl, H5P_DEFAULT);
  mxu_status s = MXU_OK;
  if (*group < 0)
    s = mxu_h5_fail(MXU_ERR_IO, "%s: cannot create group '%s' in %s", path,
                    name, mxu_h5_where(loc));
  H5Pclose(lcpl);
  H5Pclose(gcpl);
  return s;
}

int mxu_h5_has_group(hid_t loc, const char *name) {
  hid_t object = H5Oopen(loc, name, H5P_DEFAULT);
  if (object < 0) return 0; /* also when a parent on the way is missing */
  int is_group = H5Iget_type(object) == H5I_GROUP;
  H5Oclose(object);
  return is_group;
}

mxu_status mxu_h5_open_group(const char *path, hid_t loc, const char *name,
                             hid_t *group) {
  *group = H5Gopen2(loc, name, H5P_DEFAULT);
  if (*group >= 0) return MXU_OK;
  return mxu_h5_fail(MXU_ERR_FORMAT, "%s: %s has no group '%s'", path,
                     mxu_h5_where(loc), name);
}

/* ---- string attributes: writing ---------------------------------------- */

void mxu_h5_strings_free(mxu_h5_strings *strings) {
  for (int i = 0; i < strings->count; i++) free(strings->items[i]);
  free(strings->items);
  strings->items = NULL;
  strings->count = 0;
}

static hid_t string_type(size_t size, H5T_cset_t charset) {
  hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, size);
  H5Tset_cset(type, charset);
  /* numpy's 'S<n>' pads with NULs and needs no terminator */
  if (size != H5T_VARIABLE) H5Tset_strpad(type, H5T_STR_NULLPAD);
  return type;
}

static mxu_status put_attribute(const char *path, hid_t object,
                                const char *name, hid_t file_type,
                                hid_t memory_type, hid_t space,
                                const void *data) {
  hid_t attr =
      H5Acreate2(object, name, file_type, space, H5P_DEFAULT, H5P_DEFAULT);
  herr_t ok = attr < 0 ? -1 : H5Awrite(attr, memory_type, data);
  mxu_status s = MXU_OK;
  if (ok < 0)
    s = mxu_h5_fail(MXU_ERR_IO, "%s: %s: cannot write attribute '%s'", path,
                    mxu_h5_where(object), name);
  if (attr >= 0) H5Aclose(attr);
  return s;
}

/* What h5py makes of an empty Python list: float64, shape (0,). */
static mxu_status put_empty_list(const char *path, hid_t object,
                                 const char *name) {
  hsize_t zero = 0;
  double unused = 0;
  hid_t space = H5Screate_simple(1, &zero, NULL);
  mxu_status s = put_attribute(path, object, name, H5T_IEEE_F64LE,
                               H5T_NATIVE_DOUBLE, space, &unused);
  H5Sclose(space);
  return s;
}

/* A 1-D string attribute: width H5T_VARIABLE takes the char pointers as
 * they are (h5py's form for a Python list), a fixed width takes them
 * NUL-padded into one block (numpy's 'S<n>'). */
static mxu_status put_string_list(const char *path, hid_t object,
                                  const char *name, const char *const *items,
                                  int count, size_t width) {
  char *packed = NULL;
  if (width != H5T_VARIABLE) {
    packed = calloc((size_t)count, width);
    if (!packed)
      return mxu_fail(MXU_ERR_NOMEM, "%s: out of memory for attribute '%s'",
                      path, name);
    for (int i = 0; i < count; i++)
      memcpy(packed + (size_t)i * width, items[i], strlen(items[i]));
  }
  hsize_t n = (hsize_t)count;
  hid_t space = H5Screate_simple(1, &n, NULL);
  hid_t type = string_type(width, H5T_CSET_ASCII);
  mxu_status s = put_attribute(path, object, name, type, type, space,
                               packed ? (const void *)packed : items);
  H5Tclose(type);
  H5Sclose(space);
  free(packed);
  return s;
}

/* numpy's array_split: the first count % chunks pieces get one more. */
static mxu_status put_split_list(const char *path, hid_t object,
                                 const char *name, const char *const *items,
                                 int count, size_t width) {
  int chunks = 1;
  while ((size_t)((count + chunks - 1) / chunks) * width >
         MXU_H5_ATTRIBUTE_LIMIT)
    chunks++;
  for (int c = 0, first = 0; c < chunks; c++) {
    int size = count / chunks + (c < count % chunks);
    char part[256];
    snprintf(part, sizeof part, "%s%d", name, c);
    MXU_TRY(put_string_list(path, object, part, items + first, size, width));
    first += size;
  }
  return MXU_OK;
}

mxu_status mxu_h5_write_strings(const char *path, hid_t object,
                                const char *name, const char *const *items,
                                int count) {
  if (count == 0) return put_empty_list(path, object, name);
  size_t width = 1; /* numpy's itemsize: the longest item, at least 1 */
  for (int i = 0; i < count; i++)
    if (strlen(items[i]) > width) width = strlen(items[i]);
  if (width > MXU_H5_ATTRIBUTE_LIMIT)
    return mxu_fail(MXU_ERR_ARG,
                    "%s: attribute '%s': an item of %zu bytes is longer than "
                    "HDF5 allows in an attribute (%d)",
                    path, name, width, MXU_H5_ATTRIBUTE_LIMIT);
  /* Keras measures the fixed-width array even when h5py then writes the
   * unsplit list with variable-length strings. */
  if ((size_t)count * width <= MXU_H5_ATTRIBUTE_LIMIT)
    return put_string_list(path, object, name, items, count, H5T_VARIABLE);
  return put_split_list(path, object, name, items, count, width);
}

mxu_status mxu_h5_write_string(const char *path, hid_t object, const char *name,
                               const char *value, H5T_cset_t charset) {
  hid_t space = H5Screate(H5S_SCALAR);
  hid_t type = string_type(H5T_VARIABLE, charset);
  mxu_status s = put_attribute(path, object, name, type, type, space, &value);
  H5Tclose(type);
  H5Sclose(space);
  return s;
}

/* ---- string attributes: reading ---------------------------------------- */

static mxu_status push_string(const char *path, mxu_h5_strings *out,
                              const char *text, size_t length) {
  char **items = realloc(out->items, (size_t)(out->count + 1) * sizeof *items);
  char *copy = malloc(length + 1);
  if (items) out->items = items;
  if (!items || !copy) {
    free(copy);
    return mxu_fail(MXU_ERR_NOMEM, "%s: out of memory", path);
  }
  memcpy(copy, text, length);
  copy[length] = 0;
  out->items[out->count++] = copy;
  return MXU_OK;
}

static mxu_status read_vlen(const char *path, hid_t attr, hid_t file_type,
                            hssize_t n, mxu_h5_strings *out) {
  char **texts = calloc((size_t)n + 1, sizeof *texts);
  if (!texts) return mxu_fail(MXU_ERR_NOMEM, "%s: out of memory", path);
  hid_t type = string_type(H5T_VARIABLE, H5Tget_cset(file_type));
  mxu_status s = MXU_OK;
  if (H5Aread(attr, type, texts) < 0)
    s = mxu_h5_fail(MXU_ERR_FORMAT, "%s: %s: cannot read", path,
                    mxu_h5_where(attr));
  for (hssize_t i = 0; i < n; i++) {
    const char *text = texts[i] ? texts[i] : "";
    if (s == MXU_OK) s = push_string(path, out, text, strlen(text));
    if (texts[i]) H5free_memory(texts[i]);
  }
  H5Tclose(type);
  free(texts);
  return s;
}

static mxu_status read_fixed(const char *path, hid_t attr, hid_t file_type,
                             hssize_t n, mxu_h5_strings *out) {
  size_t width = H5Tget_size(file_type);
  char *packed = calloc((size_t)n * width + 1, 1);
  if (!packed || width == 0) {
    free(packed);
    return mxu_fail(MXU_ERR_NOMEM, "%s: out of memory", path);
  }
  /* Reading as NUL-padded converts space-padded or NUL-terminated text. */
  hid_t type = string_type(width, H5Tget_cset(file_type));
  mxu_status s = MXU_OK;
  if (H5Aread(attr, type, packed) < 0)
    s = mxu_h5_fail(MXU_ERR_FORMAT, "%s: %s: cannot read", path,
                    mxu_h5_where(attr));
  for (hssize_t i = 0; s == MXU_OK && i < n; i++) {
    const char *text = packed + (size_t)i * width;
    s = push_string(path, out, text, strnlen(text, width));
  }
  H5Tclose(type);
  free(packed);
  return s;
}

static mxu_status read_attribute(const char *path, hid_t object,
                                 const char *name, mxu_h5_strings *out) {
  hid_t attr = H5Aopen(object, name, H5P_DEFAULT);
  if (attr < 0)
    return mxu_h5_fail(MXU_ERR_FORMAT, "%s: %s: cannot open attribute '%s'",
                       path, mxu_h5_where(object), name);
  hid_t type = H5Aget_type(attr), space = H5Aget_space(attr);
  hssize_t n = H5Sget_simple_extent_npoints(space);
  int rank = H5Sget_simple_extent_ndims(space);
  mxu_status s = MXU_OK;
  if (type < 0 || n < 0 || rank < 0 || rank > 1)
    s = mxu_fail(MXU_ERR_FORMAT,
                 "%s: %s: attribute '%s' is not a list (rank %d)", path,
                 mxu_h5_where(object), name, rank);
  else if (H5Tget_class(type) != H5T_STRING && n > 0)
    s = mxu_fail(MXU_ERR_FORMAT,
                 "%s: %s: attribute '%s' holds %lld values that are not "
                 "strings",
                 path, mxu_h5_where(object), name, (long long)n);
  else if (H5Tget_class(type) == H5T_STRING && H5Tis_variable_str(type) > 0)
    s = read_vlen(path, attr, type, n, out);
  else if (H5Tget_class(type) == H5T_STRING)
    s = read_fixed(path, attr, type, n, out);
  H5Tclose(type);
  H5Sclose(space);
  H5Aclose(attr);
  return s;
}

static mxu_status attribute_exists(const char *path, hid_t object,
                                   const char *name, int *exists) {
  htri_t has = H5Aexists(object, name);
  if (has < 0)
    return mxu_h5_fail(MXU_ERR_FORMAT, "%s: %s: cannot look for '%s'", path,
                       mxu_h5_where(object), name);
  *exists = has > 0;
  return MXU_OK;
}

static mxu_status read_all(const char *path, hid_t object, const char *name,
                           mxu_h5_strings *out, int *found) {
  int exists = 0;
  MXU_TRY(attribute_exists(path, object, name, &exists));
  if (exists) {
    *found = 1;
    return read_attribute(path, object, name, out);
  }
  for (int chunk = 0;; chunk++) {
    char part[256];
    snprintf(part, sizeof part, "%s%d", name, chunk);
    MXU_TRY(attribute_exists(path, object, part, &exists));
    if (!exists) return MXU_OK;
    *found = 1;
    MXU_TRY(read_attribute(path, object, part, out));
  }
}

mxu_status mxu_h5_read_strings(const char *path, hid_t object, const char *name,
                               mxu_h5_strings *out, int *found) {
  out->count = 0;
  out->items = NULL;
  *found = 0;
  mxu_status s = read_all(path, object, name, out, found);
  if (s != MXU_OK) mxu_h5_strings_free(out);
  return s;
}

/* ---- float datasets ---------------------------------------------------- */

static hid_t shape_space(const mxu_shape *shape) {
  if (shape->rank == 0) return H5Screate(H5S_SCALAR);
  hsize_t dims[MXU_MAX_RANK];
  for (int d = 0; d < shape->rank; d++) dims[d] = (hsize_t)shape->dims[d];
  return H5Screate_simple(shape->rank, dims, NULL);
}

mxu_status mxu_h5_write_floats(const char *path, hid_t loc, const char *name,
                               const mxu_shape *shape, const float *values) {
  hid_t space = shape_space(shape);
  hid_t lcpl = link_plist(), dcpl = object_plist(H5P_DATASET_CREATE);
  hid_t dataset =
      H5Dcreate2(loc, name, H5T_IEEE_F32LE, space, lcpl, dcpl, H5P_DEFAULT);
  herr_t ok = dataset < 0 ? -1
                          : H5Dwrite(dataset, H5T_NATIVE_FLOAT, H5S_ALL,
                                     H5S_ALL, H5P_DEFAULT, values);
  mxu_status s = MXU_OK;
  if (ok < 0)
    s = mxu_h5_fail(MXU_ERR_IO, "%s: cannot write dataset '%s' in %s", path,
                    name, mxu_h5_where(loc));
  /* Closing writes what HDF5 still buffers, so it can fail too. */
  if (dataset >= 0 && H5Dclose(dataset) < 0 && s == MXU_OK)
    s = mxu_h5_fail(MXU_ERR_IO, "%s: cannot write dataset '%s'", path, name);
  H5Pclose(lcpl);
  H5Pclose(dcpl);
  H5Sclose(space);
  return s;
}

static mxu_status dataset_dims(const char *path, hid_t dataset,
                               mxu_shape *shape) {
  hid_t space = H5Dget_space(dataset);
  int rank = space < 0 ? -1 : H5Sget_simple_extent_ndims(space);
  hsize_t dims[MXU_MAX_RANK];
  mxu_status s = MXU_OK;
  if (rank < 0 || rank > MXU_MAX_RANK)
    s = mxu_fail(MXU_ERR_FORMAT, "%s: %s has rank %d, not 0..%d", path,
                 mxu_h5_where(dataset), rank, MXU_MAX_RANK);
  else if (H5Sget_simple_extent_dims(space, dims, NULL) < 0)
    s = mxu_h5_fail(MXU_ERR_FORMAT, "%s: %s: cannot read its shape", path,
                    mxu_h5_where(dataset));
  if (s == MXU_OK) {
    shape->rank = rank;
    for (int d = 0; d < rank; d++) shape->dims[d] = (int64_t)dims[d];
  }
  if (space >= 0) H5Sclose(space);
  return s;
}

mxu_status mxu_h5_float_shape(const char *path, hid_t dataset,
                              mxu_shape *shape) {
  hid_t type = H5Dget_type(dataset);
  H5T_class_t type_class = type < 0 ? H5T_NO_CLASS : H5Tget_class(type);
  if (type >= 0) H5Tclose(type);
  /* Integers too: Keras keeps Normalization's count as an int64, which
   * HDF5 converts on reading. */
  if (type_class != H5T_FLOAT && type_class != H5T_INTEGER)
    return mxu_fail(MXU_ERR_FORMAT,
                    "%s: %s does not hold numbers (HDF5 type class %d)", path,
                    mxu_h5_where(dataset), (int)type_class);
  return dataset_dims(path, dataset, shape);
}

mxu_status mxu_h5_read_floats(const char *path, hid_t dataset, float *out) {
  if (H5Dread(dataset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) >=
      0)
    return MXU_OK;
  return mxu_h5_fail(MXU_ERR_FORMAT,
                     "%s: %s: cannot read: truncated or corrupt", path,
                     mxu_h5_where(dataset));
}

/* ---- integer scalars --------------------------------------------------- */

mxu_status mxu_h5_write_int_attribute(const char *path, hid_t object,
                                      const char *name, hid_t file_type,
                                      hid_t memory_type, const void *value) {
  hid_t space = H5Screate(H5S_SCALAR);
  mxu_status s =
      put_attribute(path, object, name, file_type, memory_type, space, value);
  H5Sclose(space);
  return s;
}

/* One integer, scalar or a single-element array: anything else is not
 * what mxu wrote. */
static mxu_status check_int_scalar(const char *path, const char *what,
                                   hid_t type, hid_t space) {
  int integer = type >= 0 && H5Tget_class(type) == H5T_INTEGER;
  hssize_t n = space < 0 ? -1 : H5Sget_simple_extent_npoints(space);
  if (integer && n == 1) return MXU_OK;
  return mxu_fail(MXU_ERR_FORMAT, "%s: %s is not one integer", path, what);
}

mxu_status mxu_h5_read_int_attribute(const char *path, hid_t object,
                                     const char *name, hid_t memory_type,
                                     void *value, int *found) {
  int exists = 0;
  *found = 0;
  MXU_TRY(attribute_exists(path, object, name, &exists));
  if (!exists) return MXU_OK;
  hid_t attr = H5Aopen(object, name, H5P_DEFAULT);
  if (attr < 0)
    return mxu_h5_fail(MXU_ERR_FORMAT, "%s: %s: cannot open attribute '%s'",
                       path, mxu_h5_where(object), name);
  hid_t type = H5Aget_type(attr), space = H5Aget_space(attr);
  char what[512];
  snprintf(what, sizeof what, "%s: attribute '%s'", mxu_h5_where(object), name);
  mxu_status s = check_int_scalar(path, what, type, space);
  if (s == MXU_OK && H5Aread(attr, memory_type, value) < 0)
    s = mxu_h5_fail(MXU_ERR_FORMAT, "%s: %s: cannot read attribute '%s'", path,
                    mxu_h5_where(object), name);
  if (type >= 0) H5Tclose(type);
  if (space >= 0) H5Sclose(space);
  H5Aclose(attr);
  *found = s == MXU_OK;
  return s;
}

mxu_status mxu_h5_write_int64(const char *path, hid_t loc, const char *name,
                              int64_t value) {
  hid_t space = H5Screate(H5S_SCALAR);
  hid_t lcpl = link_plist(), dcpl = object_plist(H5P_DATASET_CREATE);
  hid_t dataset =
      H5Dcreate2(loc, name, H5T_STD_I64LE, space, lcpl, dcpl, H5P_DEFAULT);
  herr_t ok = dataset < 0 ? -1
                          : H5Dwrite(dataset, H5T_NATIVE_INT64, H5S_ALL,
                                     H5S_ALL, H5P_DEFAULT, &value);
  mxu_status s = MXU_OK;
  if (ok < 0)
    s = mxu_h5_fail(MXU_ERR_IO, "%s: cannot write dataset '%s' in %s", path,
                    name, mxu_h5_where(loc));
  if (dataset >= 0 && H5Dclose(dataset) < 0 && s == MXU_OK)
    s = mxu_h5_fail(MXU_ERR_IO, "%s: cannot write dataset '%s'", path, name);
  H5Pclose(lcpl);
  H5Pclose(dcpl);
  H5Sclose(space);
  return s;
}

mxu_status mxu_h5_read_int64(const char *path, hid_t dataset, int64_t *value) {
  hid_t type = H5Dget_type(dataset), space = H5Dget_space(dataset);
  mxu_status s = check_int_scalar(path, mxu_h5_where(dataset), type, space);
  if (s == MXU_OK && H5Dread(dataset, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL,
                             H5P_DEFAULT, value) < 0)
    s = mxu_h5_fail(MXU_ERR_FORMAT, "%s: %s: cannot read: truncated or corrupt",
                    path, mxu_h5_where(dataset));
  if (type >= 0) H5Tclose(type);
  if (space >= 0) H5Sclose(space);
  return s;
}
