/* idx.c — reads IDX files (MNIST, Fashion-MNIST), plain or gzip: a
 * big-endian header, then unsigned bytes. Images become float32 HWC
 * (rows, cols, 1) samples with their raw 0..255 values; rescaling is the
 * caller's choice (mxu_dataset_rescale). */
#include "core/core.h"
#include "data/data.h"
#include "data/loader.h"

#include <stdio.h>
#include <stdlib.h>

/* 0x00 0x00, type 0x08 (unsigned byte), then the number of dimensions. */
#define IDX_IMAGES_MAGIC 0x00000803u
#define IDX_LABELS_MAGIC 0x00000801u
#define IDX_UBYTE 0x08u
#define IDX_CLASSES 10

typedef struct idx_file {
  const char *path;
  unsigned char *data;
  size_t size;
  size_t header; /* 16 for images, 8 for labels */
  uint32_t count, rows, cols;
} idx_file;

static uint32_t be32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
         (uint32_t)p[3];
}

static const char *kind_name(uint32_t magic) {
  return magic == IDX_IMAGES_MAGIC ? "images" : "labels";
}

/* Why a wrong magic is wrong, when a likely reason can be told. */
static void magic_hint(uint32_t got, uint32_t wanted, char *hint, size_t size) {
  uint32_t other =
      wanted == IDX_IMAGES_MAGIC ? IDX_LABELS_MAGIC : IDX_IMAGES_MAGIC;
  hint[0] = 0;
  if (got == other)
    snprintf(hint, size,
             "; it is an IDX %s file (images and labels "
             "swapped?)",
             kind_name(other));
  else if (got >> 16 == 0 && (got >> 8 & 0xffu) != IDX_UBYTE)
    snprintf(hint, size, "; data type 0x%02X is not unsigned byte (0x08)",
             (unsigned)(got >> 8 & 0xffu));
}

static mxu_status check_header(idx_file *file, uint32_t magic) {
  file->header = magic == IDX_IMAGES_MAGIC ? 16 : 8;
  /* The magic first: a wrong kind of file says more than a short one. */
  uint32_t got = file->size >= 4 ? be32(file->data) : magic;
  if (got != magic) {
    char hint[96];
    magic_hint(got, magic, hint, sizeof hint);
    return mxu_fail(MXU_ERR_FORMAT,
                    "idx: %s: offset 0: magic 0x%08X is not an IDX %s file "
                    "(expected 0x%08X)%s",
                    file->path, (unsigned)got, kind_name(magic),
                    (unsigned)magic, hint);
  }
  if (file->size < file->header)
    return mxu_fail(MXU_ERR_FORMAT,
                    "idx: %s: offset 0: file ends after %zu of %zu header "
                    "bytes (truncated download?)",
                    file->path, file->size, file->header);
  file->count = be32(file->data + 4);
  file->rows = file->cols = 1;
  if (magic == IDX_IMAGES_MAGIC) {
    file->rows = be32(file->data + 8);
    file->cols = be32(file->data + 12);
  }
  if (file->rows == 0 || file->cols == 0)
    return mxu_fail(MXU_ERR_FORMAT,
                    "idx: %s: offset 8: images of %u x %u pixels (expected "
                    "rows and columns >= 1)",
                    file->path, (unsigned)file->rows, (unsigned)file->cols);
  return MXU_OK;
}

/* The bytes after the header must be exactly count * rows * cols. */
static mxu_status check_payload(const idx_file *file, const char *what) {
  uint64_t per_item = (uint64_t)file->rows * file->cols;
  uint64_t wanted = 0;
  if (file->count && per_item > UINT64_MAX / file->count)
    return mxu_fail(MXU_ERR_FORMAT,
                    "idx: %s: offset 4: %u items of %llu "
                    "bytes overflow 64 bits (corrupt header?)",
                    file->path, (unsigned)file->count,
                    (unsigned long long)per_item);
  wanted = per_item * file->count;
  size_t have = file->size - file->header;
  if ((uint64_t)have < wanted)
    return mxu_fail(MXU_ERR_FORMAT,
                    "idx: %s: offset %zu: file ends after %zu of %llu %s "
                    "bytes (truncated download?)",
                    file->path, file->header, have, (unsigned long long)wanted,
                    what);
  if ((uint64_t)have > wanted)
    return mxu_fail(MXU_ERR_FORMAT,
                    "idx: %s: offset %llu: %llu bytes after the last of %u "
                    "items (expected the file to end there)",
                    file->path, (unsigned long long)(file->header + wanted),
                    (unsigned long long)(have - wanted), (unsigned)file->count);
  return MXU_OK;
}

static mxu_status check_labels(const idx_file *file) {
  for (size_t i = 0; i < file->count; i++) {
    unsigned label = file->data[file->header + i];
    if (label >= IDX_CLASSES)
      return mxu_fail(MXU_ERR_FORMAT,
                      "idx: %s: offset %zu: label %u of item %zu out of "
                      "range 0..%d",
                      file->path, file->header + i, label, i, IDX_CLASSES - 1);
  }
  return MXU_OK;
}

static mxu_status read_idx(idx_file *file, uint32_t magic) {
  MXU_TRY(mxu_read_file("idx", file->path, &file->data, &file->size));
  MXU_TRY(check_header(file, magic));
  int images = magic == IDX_IMAGES_MAGIC;
  MXU_TRY(check_payload(file, images ? "pixel" : "label"));
  return images ? MXU_OK : check_labels(file);
}

static mxu_status match_counts(const idx_file *images, const idx_file *labels) {
  if (images->count == labels->count) return MXU_OK;
  return mxu_fail(MXU_ERR_FORMAT,
                  "idx: %s: offset 4: %u labels, but %s has %u images at "
                  "offset 4 (expected one label per image)",
                  labels->path, (unsigned)labels->count, images->path,
                  (unsigned)images->count);
}

static mxu_status build(const idx_file *images, const idx_file *labels,
                        mxu_dataset **out) {
  int64_t dims[3] = {images->rows, images->cols, 1};
  mxu_dataset *dataset = NULL;
  MXU_TRY(mxu_dataset_alloc(mxu_shape_make(3, dims), images->count, IDX_CLASSES,
                            &dataset));
  const unsigned char *pixels = images->data + images->header;
  size_t n = (size_t)images->count * images->rows * images->cols;
  for (size_t i = 0; i < n; i++) dataset->x[i] = (float)pixels[i];
  for (size_t i = 0; i < images->count; i++)
    dataset->labels[i] = labels->data[labels->header + i];
  *out = dataset;
  return MXU_OK;
}

mxu_status mxu_load_idx(const char *images_path, const char *labels_path,
                        mxu_dataset **out) {
  if (!out) return mxu_fail(MXU_ERR_ARG, "idx: out is NULL");
  *out = NULL;
  if (!images_path || !labels_path)
    return mxu_fail(MXU_ERR_ARG, "idx: an images and a labels path are "
                                 "needed");
  idx_file images = {.path = images_path}, labels = {.path = labels_path};
  mxu_status status = read_idx(&images, IDX_IMAGES_MAGIC);
  if (status == MXU_OK) status = read_idx(&labels, IDX_LABELS_MAGIC);
  if (status == MXU_OK) status = match_counts(&images, &labels);
  if (status == MXU_OK) status = build(&images, &labels, out);
  free(images.data);
  free(labels.data);
  return status;
}

mxu_status mxu_load_mnist_dir(const char *dir, mxu_split split,
                              mxu_dataset **out) {
  if (!out) return mxu_fail(MXU_ERR_ARG, "mnist: out is NULL");
  *out = NULL;
  if (split != MXU_TRAIN && split != MXU_TEST)
    return mxu_fail(MXU_ERR_ARG, "mnist: unknown split %d", (int)split);
  int train = split == MXU_TRAIN;
  char *images = NULL, *labels = NULL;
  mxu_status status = mxu_find_data_file(
      "mnist", dir,
      train ? "train-images-idx3-ubyte" : "t10k-images-idx3-ubyte", &images);
  if (status == MXU_OK)
    status = mxu_find_data_file(
        "mnist", dir,
        train ? "train-labels-idx1-ubyte" : "t10k-labels-idx1-ubyte", &labels);
  if (status == MXU_OK) status = mxu_load_idx(images, labels, out);
  free(images);
  free(labels);
  return status;
}
