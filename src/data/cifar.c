/* cifar.c — reads CIFAR-10/100 binary batches, plain or gzip: fixed-size
 * records of label byte(s), then 1024 red, 1024 green and 1024 blue bytes
 * (row-major 32x32 planes), turned into float32 HWC (32, 32, 3) samples
 * with their raw 0..255 values. */
#include "core/core.h"
#include "data/data.h"
#include "data/loader.h"

#include <stdlib.h>

#define CIFAR_SIDE 32
#define CIFAR_PLANE (CIFAR_SIDE * CIFAR_SIDE)
#define CIFAR_CHANNELS 3
#define CIFAR_COARSE_CLASSES 20

typedef struct cifar_file {
  const char *path;
  unsigned char *data;
  size_t size;
  size_t records;
} cifar_file;

static size_t record_size(int label_bytes) {
  return (size_t)label_bytes + CIFAR_CHANNELS * CIFAR_PLANE;
}

static int class_count(int label_bytes) { return label_bytes == 1 ? 10 : 100; }

/* Records have no header to tell their number, so a size that is not a
 * whole number of records means the file was cut. */
static mxu_status count_records(cifar_file *file, size_t record) {
  if (file->size == 0)
    return mxu_fail(MXU_ERR_FORMAT,
                    "cifar: %s: offset 0: empty file (expected records of "
                    "%zu bytes)",
                    file->path, record);
  file->records = file->size / record;
  size_t rest = file->size % record;
  if (!rest) return MXU_OK;
  /* A whole number of the other kind's records: the wrong label_bytes. */
  size_t other = record == record_size(1) ? record_size(2) : record_size(1);
  const char *hint = file->size % other ? "truncated download?"
                     : other == record_size(2)
                         ? "truncated, or a CIFAR-100 file read as CIFAR-10?"
                         : "truncated, or a CIFAR-10 file read as CIFAR-100?";
  return mxu_fail(MXU_ERR_FORMAT,
                  "cifar: %s: record %zu (offset %zu): file ends after %zu "
                  "of %zu record bytes (%s)",
                  file->path, file->records, file->records * record, rest,
                  record, hint);
}

static mxu_status check_label(const cifar_file *file, size_t index,
                              size_t offset, unsigned label, unsigned limit,
                              const char *what) {
  if (label < limit) return MXU_OK;
  return mxu_fail(MXU_ERR_FORMAT,
                  "cifar: %s: record %zu (offset %zu): %slabel %u out of "
                  "range 0..%u",
                  file->path, index, offset, what, label, limit - 1);
}

/* CIFAR-100 records start with the coarse label, then the fine one. */
static mxu_status check_labels(const cifar_file *file, int label_bytes) {
  size_t record = record_size(label_bytes);
  for (size_t r = 0; r < file->records; r++) {
    size_t offset = r * record;
    if (label_bytes == 2)
      MXU_TRY(check_label(file, r, offset, file->data[offset],
                          CIFAR_COARSE_CLASSES, "coarse "));
    offset += (size_t)label_bytes - 1;
    MXU_TRY(check_label(file, r, offset, file->data[offset],
                        (unsigned)class_count(label_bytes), ""));
  }
  return MXU_OK;
}

static mxu_status read_cifar(cifar_file *file, int label_bytes) {
  MXU_TRY(mxu_read_file("cifar", file->path, &file->data, &file->size));
  MXU_TRY(count_records(file, record_size(label_bytes)));
  return check_labels(file, label_bytes);
}

/* Planar CHW bytes to interleaved HWC floats. */
static void convert_record(const unsigned char *planes, float *x) {
  for (int p = 0; p < CIFAR_PLANE; p++)
    for (int c = 0; c < CIFAR_CHANNELS; c++)
      x[p * CIFAR_CHANNELS + c] = (float)planes[c * CIFAR_PLANE + p];
}

static void convert_file(const cifar_file *file, int label_bytes,
                         mxu_dataset *dataset, size_t first) {
  size_t record = record_size(label_bytes);
  size_t floats = CIFAR_CHANNELS * CIFAR_PLANE;
  for (size_t r = 0; r < file->records; r++) {
    const unsigned char *bytes = file->data + r * record;
    dataset->labels[first + r] = bytes[label_bytes - 1];
    convert_record(bytes + label_bytes, dataset->x + (first + r) * floats);
  }
}

static mxu_status check_args(const char *const *paths, int path_count,
                             int label_bytes) {
  if (label_bytes != 1 && label_bytes != 2)
    return mxu_fail(MXU_ERR_ARG,
                    "cifar: label_bytes %d (expected 1 for "
                    "CIFAR-10, 2 for CIFAR-100)",
                    label_bytes);
  if (!paths || path_count < 1)
    return mxu_fail(MXU_ERR_ARG, "cifar: no files given");
  for (int i = 0; i < path_count; i++)
    if (!paths[i]) return mxu_fail(MXU_ERR_ARG, "cifar: path %d is NULL", i);
  return MXU_OK;
}

/* Every file is read and checked before the floats are allocated, so the
 * data set is sized once and a bad last file costs no conversion. */
static mxu_status load_files(cifar_file *files, int count, int label_bytes,
                             mxu_dataset **out) {
  size_t total = 0;
  for (int i = 0; i < count; i++) {
    MXU_TRY(read_cifar(&files[i], label_bytes));
    total += files[i].records; /* cannot wrap: each record is in memory */
  }
  int64_t dims[3] = {CIFAR_SIDE, CIFAR_SIDE, CIFAR_CHANNELS};
  mxu_dataset *dataset = NULL;
  MXU_TRY(mxu_dataset_alloc(mxu_shape_make(3, dims), (int64_t)total,
                            class_count(label_bytes), &dataset));
  size_t first = 0;
  for (int i = 0; i < count; i++) {
    convert_file(&files[i], label_bytes, dataset, first);
    first += files[i].records;
    free(files[i].data);
    files[i].data = NULL;
  }
  *out = dataset;
  return MXU_OK;
}

mxu_status mxu_load_cifar(const char *const *paths, int path_count,
                          int label_bytes, mxu_dataset **out) {
  if (!out) return mxu_fail(MXU_ERR_ARG, "cifar: out is NULL");
  *out = NULL;
  MXU_TRY(check_args(paths, path_count, label_bytes));
  cifar_file *files = calloc((size_t)path_count, sizeof *files);
  if (!files) return mxu_fail(MXU_ERR_NOMEM, "cifar: out of memory");
  for (int i = 0; i < path_count; i++) files[i].path = paths[i];
  mxu_status status = load_files(files, path_count, label_bytes, out);
  for (int i = 0; i < path_count; i++) free(files[i].data);
  free(files);
  return status;
}

/* Finds each named file (plain or .gz) in dir, then loads them in order. */
static mxu_status load_dir(const char *who, const char *dir,
                           const char *const *names, int count, int label_bytes,
                           mxu_dataset **out) {
  char *paths[5] = {0};
  mxu_status status = MXU_OK;
  for (int i = 0; i < count && status == MXU_OK; i++)
    status = mxu_find_data_file(who, dir, names[i], &paths[i]);
  if (status == MXU_OK)
    status =
        mxu_load_cifar((const char *const *)paths, count, label_bytes, out);
  for (int i = 0; i < count; i++) free(paths[i]);
  return status;
}

mxu_status mxu_load_cifar10_dir(const char *dir, mxu_split split,
                                mxu_dataset **out) {
  static const char *const train[5] = {"data_batch_1.bin", "data_batch_2.bin",
                                       "data_batch_3.bin", "data_batch_4.bin",
                                       "data_batch_5.bin"};
  static const char *const test[1] = {"test_batch.bin"};
  if (!out) return mxu_fail(MXU_ERR_ARG, "cifar10: out is NULL");
  *out = NULL;
  if (split != MXU_TRAIN && split != MXU_TEST)
    return mxu_fail(MXU_ERR_ARG, "cifar10: unknown split %d", (int)split);
  return split == MXU_TRAIN ? load_dir("cifar10", dir, train, 5, 1, out)
                            : load_dir("cifar10", dir, test, 1, 1, out);
}

mxu_status mxu_load_cifar100_dir(const char *dir, mxu_split split,
                                 mxu_dataset **out) {
  static const char *const train[1] = {"train.bin"};
  static const char *const test[1] = {"test.bin"};
  if (!out) return mxu_fail(MXU_ERR_ARG, "cifar100: out is NULL");
  *out = NULL;
  if (split != MXU_TRAIN && split != MXU_TEST)
    return mxu_fail(MXU_ERR_ARG, "cifar100: unknown split %d", (int)split);
  return load_dir("cifar100", dir, split == MXU_TRAIN ? train : test, 1, 2,
                  out);
}
