/* npy.c — NumPy's .npy arrays and .npz archives of them (np.save,
 * np.savez, np.savez_compressed), as a Keras user keeps a data set:
 * x_train, y_train, x_test, y_test as keras.datasets' load_data() returns
 * them, or x and y. The .npy header (versions 1, 2 and 3) is read
 * strictly; an .npz is a zip, read with libzip. Samples of any numeric
 * dtype become float32. Labels are kept as float targets, and where every
 * one is a class index (an integer >= 0, or a one-hot row) also as
 * classes, whose count is the highest label of the file plus one. */
#include "core/core.h"
#include "data/data.h"
#include "data/loader.h"

#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>

/* ---- one array --------------------------------------------------------- */

/* An array's header and where its values lie (little-endian, C order). */
typedef struct npy_array {
  char kind; /* 'f' float, 'i' signed, 'u' unsigned, 'b' bool */
  int item;  /* bytes a value */
  int rank;
  int64_t shape[MXU_MAX_RANK + 1];
  int64_t count; /* values */
  const unsigned char *values;
} npy_array;

/* Where an array came from, for messages: "data.npz: x_train" or
 * "x.npy". */
typedef struct npy_source {
  const char *path, *key;
} npy_source;

static mxu_status npy_fail(const npy_source *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static mxu_status npy_fail(const npy_source *s, const char *fmt, ...) {
  char why[512];
  va_list args;
  va_start(args, fmt);
  vsnprintf(why, sizeof why, fmt, args);
  va_end(args);
  return mxu_fail(MXU_ERR_FORMAT, "npy: %s%s%s: %s", s->path,
                  s->key ? ": " : "", s->key ? s->key : "", why);
}

/* The header is a Python dict literal: {'descr': '<f4', 'fortran_order':
 * False, 'shape': (60000, 28, 28), } padded with spaces and a newline. */
typedef struct cursor {
  const char *at, *end;
} cursor;

static void skip_blanks(cursor *c) {
  while (c->at < c->end && (*c->at == ' ' || *c->at == '\n')) c->at++;
}

static int take(cursor *c, char ch) {
  skip_blanks(c);
  if (c->at < c->end && *c->at == ch) {
    c->at++;
    return 1;
  }
  return 0;
}

/* A quoted Python string without escapes, into out. */
static int quoted(cursor *c, char *out, size_t size) {
  skip_blanks(c);
  if (c->at >= c->end || (*c->at != '\'' && *c->at != '"')) return 0;
  char quote = *c->at++;
  size_t n = 0;
  while (c->at < c->end && *c->at != quote && *c->at != '\\' && n + 1 < size)
    out[n++] = *c->at++;
  out[n] = 0;
  return c->at < c->end && *c->at++ == quote;
}

static int word(cursor *c, const char *w) {
  skip_blanks(c);
  size_t n = strlen(w);
  if ((size_t)(c->end - c->at) < n || memcmp(c->at, w, n) != 0) return 0;
  c->at += n;
  return 1;
}

/* (a, b, c) or (a,) or (): non-negative integers. */
static int shape_tuple(cursor *c, npy_array *a) {
  if (!take(c, '(')) return 0;
  a->rank = 0;
  for (;;) {
    if (take(c, ')')) return 1;
    if (a->rank > MXU_MAX_RANK) return 0;
    skip_blanks(c);
    int64_t v = 0;
    int digits = 0;
    while (c->at < c->end && *c->at >= '0' && *c->at <= '9' && digits < 18) {
      v = v * 10 + (*c->at++ - '0');
      digits++;
    }
    if (!digits) return 0;
    a->shape[a->rank++] = v;
    if (!take(c, ',')) return take(c, ')');
  }
}

/* '<f4', '|u1', ...: little-endian or byte-sized numbers only. */
static mxu_status dtype(const npy_source *s, const char *descr, npy_array *a) {
  char order = descr[0], kind = descr[0] ? descr[1] : 0;
  int item = descr[0] && descr[1] ? atoi(descr + 2) : 0;
  int known = (kind == 'f' && (item == 2 || item == 4 || item == 8)) ||
              ((kind == 'i' || kind == 'u') &&
               (item == 1 || item == 2 || item == 4 || item == 8)) ||
              (kind == 'b' && item == 1);
  if (!known || strlen(descr) > 4)
    return npy_fail(s,
                    "dtype '%s' is not a number mxu reads (bool, int8..int64, "
                    "uint8..uint64, float16, float32, float64)",
                    descr);
  if (order == '>' && item > 1)
    return npy_fail(s,
                    "dtype '%s' is big-endian; save it little-endian "
                    "(arr.astype(arr.dtype.newbyteorder('<')))",
                    descr);
  if (order != '<' && order != '|' && order != '=' && order != '>')
    return npy_fail(s, "dtype '%s' has no byte order mxu knows", descr);
  a->kind = kind;
  a->item = item;
  return MXU_OK;
}

static mxu_status parse_header(const npy_source *s, const char *text,
                               size_t length, npy_array *a) {
  cursor c = {text, text + length};
  char key[32], descr[16] = "";
  int has_descr = 0, has_order = 0, has_shape = 0, fortran = 0;
  if (!take(&c, '{')) return npy_fail(s, "the header is not a Python dict");
  while (!take(&c, '}')) {
    if (!quoted(&c, key, sizeof key) || !take(&c, ':'))
      return npy_fail(s, "the header is not a Python dict of 'key': value");
    if (strcmp(key, "descr") == 0 && quoted(&c, descr, sizeof descr))
      has_descr = 1;
    else if (strcmp(key, "fortran_order") == 0 &&
             ((fortran = word(&c, "True")) || word(&c, "False")))
      has_order = 1;
    else if (strcmp(key, "shape") == 0 && shape_tuple(&c, a))
      has_shape = 1;
    else
      return npy_fail(s, "the header's '%s' is not what NumPy writes", key);
    take(&c, ',');
  }
  if (!has_descr || !has_order || !has_shape)
    return npy_fail(s, "the header lacks %s",
                    !has_descr   ? "'descr'"
                    : !has_order ? "'fortran_order'"
                                 : "'shape'");
  if (fortran)
    return npy_fail(s, "the array is in Fortran order; save it in C order "
                       "(np.ascontiguousarray)");
  if (a->rank > MXU_MAX_RANK)
    return npy_fail(s, "rank %d; mxu takes at most %d", a->rank,
                    MXU_MAX_RANK + 1);
  return dtype(s, descr, a);
}

/* An .npy image in memory: magic, version, header length, header, data. */
static mxu_status parse_npy(const npy_source *s, const unsigned char *bytes,
                            size_t size, npy_array *a) {
  memset(a, 0, sizeof *a);
  if (size < 10 || memcmp(bytes, "\x93NUMPY", 6) != 0)
    return npy_fail(s, "not an .npy array (no \\x93NUMPY magic)");
  int major = bytes[6];
  if (major < 1 || major > 3)
    return npy_fail(s, ".npy format version %d.%d; mxu reads 1, 2 and 3", major,
                    bytes[7]);
  /* Versions 2 and 3 give the header's length in four bytes, not two. */
  size_t start = major == 1 ? 10 : 12;
  size_t header = size < start ? 0
                  : major == 1
                      ? (size_t)bytes[8] | (size_t)bytes[9] << 8
                      : (size_t)bytes[8] | (size_t)bytes[9] << 8 |
                            (size_t)bytes[10] << 16 | (size_t)bytes[11] << 24;
  if (size < start || header > size - start)
    return npy_fail(s,
                    "the header runs past the end (%zu bytes); the file "
                    "is cut short",
                    size);
  MXU_TRY(parse_header(s, (const char *)bytes + start, header, a));
  int64_t count = 1;
  for (int d = 0; d < a->rank; d++) {
    if (a->shape[d] > MXU_MAX_ELEMENTS ||
        (a->shape[d] && count > MXU_MAX_ELEMENTS * 64 / a->shape[d]))
      return npy_fail(s, "shape too large");
    count *= a->shape[d];
  }
  size_t have = size - start - header;
  if ((uint64_t)count * (uint64_t)a->item != have)
    return npy_fail(s,
                    "%lld values of %d bytes need %llu bytes after the "
                    "header, the file has %zu (cut short or not .npy)",
                    (long long)count, a->item,
                    (unsigned long long)count * (unsigned long long)a->item,
                    have);
  a->count = count;
  a->values = bytes + start + header;
  return MXU_OK;
}

/* float16 to float32, exactly. */
static float half(uint16_t h) {
  int exponent = h >> 10 & 0x1f, mantissa = h & 0x3ff;
  float v = exponent == 0    ? ldexpf((float)mantissa, -24)
            : exponent == 31 ? (mantissa ? NAN : INFINITY)
                             : ldexpf((float)(mantissa | 0x400), exponent - 25);
  return h & 0x8000 ? -v : v;
}

static double value_at(const npy_array *a, int64_t i) {
  const unsigned char *p = a->values + i * a->item;
  uint64_t bits = 0;
  for (int b = a->item - 1; b >= 0; b--) bits = bits << 8 | p[b];
  switch (a->kind) {
  case 'b':
  case 'u': return (double)bits;
  case 'i': {
    int shift = 64 - 8 * a->item; /* sign-extend */
    return (double)((int64_t)(bits << shift) >> shift);
  }
  default:
    if (a->item == 2) return half((uint16_t)bits);
    if (a->item == 4) {
      float f;
      uint32_t b32 = (uint32_t)bits;
      memcpy(&f, &b32, 4);
      return f;
    }
    double d;
    memcpy(&d, &bits, 8);
    return d;
  }
}

/* ---- arrays into a data set -------------------------------------------- */

/* Values a sample's label has: 1 for (count,) labels, else the product
 * of the dimensions after the first. */
static int64_t label_width(const npy_array *y) {
  int64_t width = 1;
  for (int d = 1; d < y->rank; d++) width *= y->shape[d];
  return width;
}

/* Label i as a class: an integer >= 0, or the hot column of a one-hot
 * row; -1 when it is neither (a regression target). */
static int64_t class_at(const npy_array *y, int64_t width, int64_t i) {
  if (width == 1) {
    double v = value_at(y, i);
    return v >= 0 && v < (1 << 24) && v == floor(v) ? (int64_t)v : -1;
  }
  int64_t hot = -1;
  for (int64_t k = 0; k < width; k++) {
    double v = value_at(y, i * width + k);
    if (v == 1 && hot < 0)
      hot = k;
    else if (v != 0)
      return -1;
  }
  return hot;
}

/* The highest class plus one, the count both splits share; 0 once any
 * label is not a class (float targets: the data set is a regression's).
 * x is the labels' samples. */
static mxu_status count_classes(const npy_source *s, const npy_array *y,
                                const npy_array *x, int *classes) {
  if (x->rank < 1)
    return npy_fail(s, "its samples are a scalar, not (count, ...)");
  if (y->rank < 1 || y->shape[0] != x->shape[0])
    return npy_fail(s,
                    "%lld labels for %lld samples; expected (%lld,) class "
                    "indices or targets, or (%lld, ...) one-hot rows or "
                    "targets",
                    (long long)(y->rank ? y->shape[0] : 1),
                    (long long)x->shape[0], (long long)x->shape[0],
                    (long long)x->shape[0]);
  int64_t width = label_width(y);
  if (width > (1 << 24))
    return npy_fail(s, "labels of %lld values a sample", (long long)width);
  for (int64_t i = 0; i < y->count; i++)
    if (!isfinite(value_at(y, i)))
      return npy_fail(s, "label value %lld is %g; labels must be finite",
                      (long long)i, value_at(y, i));
  for (int64_t i = 0; i < y->shape[0] && *classes > 0; i++) {
    int64_t label = class_at(y, width, i);
    *classes = label < 0              ? 0
               : label + 1 > *classes ? (int)(label + 1)
                                      : *classes;
  }
  return MXU_OK;
}

/* A file mapping of samples x lies in; the data set takes it over. */
typedef struct npy_mapping {
  void *base;
  size_t size;
} npy_mapping;

static mxu_status to_dataset(const npy_source *xs, const npy_array *x,
                             const npy_array *y, int classes,
                             npy_mapping *mapped, mxu_dataset **out) {
  if (x->rank < 2)
    return npy_fail(xs, "shape of rank %d; samples need (count, ...)", x->rank);
  mxu_shape sample = {0};
  sample.rank = x->rank - 1;
  for (int d = 1; d < x->rank; d++) sample.dims[d - 1] = x->shape[d];
  if (mapped->base) {
    MXU_TRY(mxu_dataset_alloc_mapped(sample, x->shape[0], classes, mapped->base,
                                     mapped->size, (float *)x->values, out));
    mapped->base = NULL; /* the data set's now */
  } else {
    MXU_TRY(mxu_dataset_alloc(sample, x->shape[0], classes, out));
  }
  mxu_dataset *data = *out;
  for (int64_t i = 0; !data->mapping && i < x->count; i++)
    data->x[i] = (float)value_at(x, i);
  /* The labels as given stand beside the classes, for the losses that
   * compare the output with targets. */
  int64_t width = label_width(y);
  mxu_status status = mxu_dataset_add_targets(data, (int)width);
  if (status != MXU_OK) {
    mxu_dataset_free(data);
    *out = NULL;
    return status;
  }
  for (int64_t i = 0; i < x->shape[0] * width; i++)
    data->targets[i] = (float)value_at(y, i);
  for (int64_t i = 0; classes > 0 && i < x->shape[0]; i++)
    data->labels[i] = (int32_t)class_at(y, width, i);
  return MXU_OK;
}

/* ---- .npz -------------------------------------------------------------- */

typedef struct npz_member {
  npy_source source;
  unsigned char *bytes;
  size_t size;
  npy_array array;
} npz_member;

static mxu_status zip_failure(const char *path, const char *what,
                              zip_error_t *error) {
  return mxu_fail(MXU_ERR_FORMAT, "npz: %s: %s: %s", path, what,
                  zip_error_strerror(error));
}

/* Reads member key.npy whole; *found 0 when the archive has none. */
static mxu_status read_member(zip_t *zip, const char *path, const char *key,
                              npz_member *m, int *found) {
  char name[MXU_NPZ_NAME_SIZE + 8];
  snprintf(name, sizeof name, "%s.npy", key);
  m->source = (npy_source){path, key};
  zip_int64_t index = zip_name_locate(zip, name, 0);
  *found = index >= 0;
  if (index < 0) return MXU_OK;
  zip_stat_t st;
  if (zip_stat_index(zip, (zip_uint64_t)index, 0, &st) != 0 ||
      !(st.valid & ZIP_STAT_SIZE))
    return zip_failure(path, name, zip_get_error(zip));
  if (st.size > mxu_data_limit())
    return npy_fail(&m->source,
                    "%llu bytes unpacked, over the limit of %zu for a data "
                    "file read into memory (half the machine's memory; set "
                    "MXU_MAX_DATA_BYTES to change it)",
                    (unsigned long long)st.size, mxu_data_limit());
  m->bytes = malloc(st.size ? st.size : 1);
  if (!m->bytes)
    return mxu_fail(MXU_ERR_NOMEM, "npz: %s: %s: out of memory", path, name);
  zip_file_t *file = zip_fopen_index(zip, (zip_uint64_t)index, 0);
  if (!file) return zip_failure(path, name, zip_get_error(zip));
  zip_int64_t got = zip_fread(file, m->bytes, st.size);
  /* libzip checks the member's CRC on the read that finds its end. */
  unsigned char past;
  if (got >= 0 && (zip_uint64_t)got == st.size &&
      zip_fread(file, &past, 1) != 0)
    got = -1;
  mxu_status status = MXU_OK;
  if (got < 0 || (zip_uint64_t)got != st.size)
    status = zip_failure(path, name, zip_file_get_error(file));
  zip_fclose(file);
  m->size = st.size;
  if (status == MXU_OK)
    status = parse_npy(&m->source, m->bytes, m->size, &m->array);
  return status;
}

static zip_t *open_zip(const char *path, mxu_status *status) {
  int code = 0;
  zip_t *zip = zip_open(path, ZIP_RDONLY | ZIP_CHECKCONS, &code);
  if (!zip) {
    zip_error_t error;
    zip_error_init_with_code(&error, code);
    *status = code == ZIP_ER_NOENT || code == ZIP_ER_OPEN || code == ZIP_ER_READ
                  ? mxu_fail(MXU_ERR_IO, "npz: %s: cannot open: %s", path,
                             zip_error_strerror(&error))
                  : mxu_fail(MXU_ERR_FORMAT,
                             "npz: %s: not a readable .npz (a zip of .npy "
                             "arrays): %s",
                             path, zip_error_strerror(&error));
    zip_error_fini(&error);
  }
  return zip;
}

mxu_status mxu_load_npz(const char *path, mxu_split split, mxu_dataset **out) {
  if (!out) return mxu_fail(MXU_ERR_ARG, "npz: out is NULL");
  *out = NULL;
  if (!path) return mxu_fail(MXU_ERR_ARG, "npz: no path given");
  mxu_status status = MXU_OK;
  zip_t *zip = open_zip(path, &status);
  if (!zip) return status;
  /* x_train, y_train, x_test, y_test; or x, y (the train split). */
  static const char *const keys[2][4] = {
      {"x_train", "y_train", "x_test", "y_test"}, {"x", "y", NULL, NULL}};
  npz_member m[4];
  memset(m, 0, sizeof m);
  int found[4] = {0}, form = 0;
  for (int k = 0; k < 4 && status == MXU_OK; k++)
    status = read_member(zip, path, keys[0][k], &m[k], &found[k]);
  if (status == MXU_OK && !found[0] && !found[1]) {
    form = 1;
    for (int k = 0; k < 2 && status == MXU_OK; k++)
      status = read_member(zip, path, keys[1][k], &m[k], &found[k]);
  }
  if (status == MXU_OK && (!found[0] || !found[1]))
    status = mxu_fail(MXU_ERR_FORMAT,
                      "npz: %s: no %s array; expected x_train, y_train, "
                      "x_test, y_test (as np.savez of keras.datasets' "
                      "load_data()) or x and y",
                      path, !found[0] ? keys[form][0] : keys[form][1]);
  if (status == MXU_OK && (found[2] != found[3]))
    status = mxu_fail(MXU_ERR_FORMAT, "npz: %s: %s without %s", path,
                      found[2] ? "x_test" : "y_test",
                      found[2] ? "y_test" : "x_test");
  if (status == MXU_OK && split == MXU_TEST && !found[2])
    status = mxu_fail(MXU_ERR_FORMAT,
                      "npz: %s: no test split (x_test and y_test): hold out "
                      "part of x and y with --validation-split F (Keras' "
                      "fit(validation_split=F)), or add them to the archive",
                      path);
  int classes = 1;
  for (int k = 1; k < 4 && status == MXU_OK; k += 2)
    if (found[k] && found[k - 1])
      status =
          count_classes(&m[k].source, &m[k].array, &m[k - 1].array, &classes);
  int first = split == MXU_TEST ? 2 : 0;
  npy_mapping none = {NULL, 0};
  if (status == MXU_OK)
    status = to_dataset(&m[first].source, &m[first].array, &m[first + 1].array,
                        classes, &none, out);
  for (int k = 0; k < 4; k++) free(m[k].bytes);
  zip_discard(zip);
  return status;
}

/* Labels for samples that have none: count zeros of one byte (class 0);
 * *bytes holds them. */
static mxu_status no_labels(const npy_array *x, npy_array *y,
                            unsigned char **bytes) {
  memset(y, 0, sizeof *y);
  y->kind = 'u';
  y->item = y->rank = 1;
  y->shape[0] = y->count = x->rank ? x->shape[0] : 0;
  *bytes = calloc((size_t)y->count + 1, 1);
  y->values = *bytes;
  return *bytes ? MXU_OK : mxu_fail(MXU_ERR_NOMEM, "npy: out of memory");
}

mxu_status mxu_load_npz_arrays(const char *path, const char *x_key,
                               const char *y_key, mxu_dataset **out) {
  if (!out) return mxu_fail(MXU_ERR_ARG, "npz: out is NULL");
  *out = NULL;
  if (!path || !x_key) return mxu_fail(MXU_ERR_ARG, "npz: no path or key");
  mxu_status status = MXU_OK;
  zip_t *zip = open_zip(path, &status);
  if (!zip) return status;
  npz_member m[2];
  memset(m, 0, sizeof m);
  const char *keys[2] = {x_key, y_key};
  for (int k = 0; k < 1 + (y_key != NULL) && status == MXU_OK; k++) {
    int found = 0;
    status = read_member(zip, path, keys[k], &m[k], &found);
    if (status == MXU_OK && !found)
      status =
          mxu_fail(MXU_ERR_FORMAT, "npz: %s: no array '%s'", path, keys[k]);
  }
  int classes = 1;
  if (status == MXU_OK && !y_key)
    status = no_labels(&m[0].array, &m[1].array, &m[1].bytes);
  else if (status == MXU_OK)
    status = count_classes(&m[1].source, &m[1].array, &m[0].array, &classes);
  npy_mapping none = {NULL, 0};
  if (status == MXU_OK)
    status =
        to_dataset(&m[0].source, &m[0].array, &m[1].array, classes, &none, out);
  free(m[0].bytes);
  free(m[1].bytes);
  zip_discard(zip);
  return status;
}

mxu_status mxu_load_npz_inputs(const char *path, const char *const *x_keys,
                               int count, const char *y_key,
                               mxu_dataset **out) {
  if (!out) return mxu_fail(MXU_ERR_ARG, "npz: out is NULL");
  *out = NULL;
  if (!x_keys || count < 1)
    return mxu_fail(MXU_ERR_ARG, "npz: no input arrays named");
  MXU_TRY(mxu_load_npz_arrays(path, x_keys[0], y_key, out));
  mxu_status status = MXU_OK;
  for (int k = 1; k < count && status == MXU_OK; k++) {
    mxu_dataset *more = NULL;
    status = mxu_load_npz_arrays(path, x_keys[k], NULL, &more);
    if (status == MXU_OK && more->count != (*out)->count)
      status = mxu_fail(MXU_ERR_SHAPE,
                        "npz: %s: '%s' holds %lld samples but '%s' %lld; "
                        "every input needs one per sample",
                        path, x_keys[k], (long long)more->count, x_keys[0],
                        (long long)(*out)->count);
    if (status == MXU_OK)
      status = mxu_dataset_add_input(*out, more->x, more->shape);
    mxu_dataset_free(more);
  }
  if (status != MXU_OK) {
    mxu_dataset_free(*out);
    *out = NULL;
  }
  return status;
}

/* Output j >= 1's targets, read beside input 0's samples and added. */
static mxu_status add_output_array(const char *path, const char *x_key,
                                   const char *y_key, mxu_dataset *data) {
  mxu_dataset *y = NULL;
  mxu_status status = mxu_load_npz_arrays(path, x_key, y_key, &y);
  if (status == MXU_OK) status = mxu_dataset_add_output_of(data, y);
  mxu_dataset_free(y);
  return status;
}

mxu_status mxu_load_npz_model(const char *path, mxu_split split,
                              const char *const *names, int count,
                              const char *const *outputs, int output_count,
                              int whole, int labels, mxu_dataset **out) {
  if (!out) return mxu_fail(MXU_ERR_ARG, "npz: out is NULL");
  *out = NULL;
  if (!names || count < 1 || count > MXU_MAX_INPUTS)
    return mxu_fail(MXU_ERR_ARG, "npz: %d inputs", count);
  if (output_count < 0 || output_count > MXU_MAX_OUTPUTS ||
      (output_count && !outputs))
    return mxu_fail(MXU_ERR_ARG, "npz: %d outputs", output_count);
  if (!path || !mxu_ends_with(path, ".npz"))
    return mxu_fail(MXU_ERR_ARG,
                    "%s: the model has %d inputs ('%s', ...) and %d outputs: "
                    "give one .npz holding an array for each, named after "
                    "the input (NAME_train and NAME_test beside y_train and "
                    "y_test, or NAME beside y; a model of several outputs: "
                    "an array named after each output in y's place), as "
                    "Keras' fit takes dicts of arrays",
                    path ? path : "--labels", count, names[0],
                    output_count ? output_count : 1);
  mxu_status status = MXU_OK;
  zip_t *zip = open_zip(path, &status);
  if (!zip) return status;
  /* The split's form: y_train or y_test (OUT_train, OUT_test); samples
   * alone, NAME_test. */
  const char *y = output_count ? outputs[0] : "y";
  char y_split[MXU_NPZ_NAME_SIZE + 16], first[MXU_NPZ_NAME_SIZE + 16];
  snprintf(y_split, sizeof y_split, "%s%s.npy", y,
           split == MXU_TRAIN ? "_train" : "_test");
  snprintf(first, sizeof first, "%s_test.npy", names[0]);
  int split_form =
      zip_name_locate(zip, y_split, 0) >= 0 ||
      (!labels && split == MXU_TEST && zip_name_locate(zip, first, 0) >= 0);
  if (!split_form && split == MXU_TEST && !whole) {
    zip_discard(zip);
    return mxu_fail(MXU_ERR_FORMAT,
                    "npz: %s: no test split (%s_test): hold out part of the "
                    "data with --validation-split F, or add each input's "
                    "NAME_test and %s_test to the archive",
                    path, y, y);
  }
  const char *suffix = !split_form          ? ""
                       : split == MXU_TRAIN ? "_train"
                                            : "_test";
  /* A model of several outputs: each output's targets must be there. */
  for (int j = 0; labels && j < output_count; j++) {
    char name[MXU_NPZ_NAME_SIZE + 16];
    snprintf(name, sizeof name, "%s%s.npy", outputs[j], suffix);
    if (zip_name_locate(zip, name, 0) >= 0) continue;
    zip_discard(zip);
    char wanted[2 * MXU_NPZ_NAME_SIZE + 32];
    if (suffix[0])
      snprintf(wanted, sizeof wanted, "'%s%s'", outputs[j], suffix);
    else
      snprintf(wanted, sizeof wanted, "'%s_train' or '%s'", outputs[j],
               outputs[j]);
    return mxu_fail(MXU_ERR_FORMAT,
                    "npz: %s: no array %s: the model's outputs ('%s', ...) "
                    "take their targets from arrays named after them "
                    "(NAME_train and NAME_test, or NAME), as Keras' fit "
                    "takes a dict of y",
                    path, wanted, outputs[0]);
  }
  zip_discard(zip);
  char keys[MXU_MAX_INPUTS][MXU_NPZ_NAME_SIZE + 8];
  const char *x_keys[MXU_MAX_INPUTS];
  for (int k = 0; k < count; k++) {
    snprintf(keys[k], sizeof keys[k], "%s%s", names[k], suffix);
    x_keys[k] = keys[k];
  }
  char y_keys[MXU_MAX_OUTPUTS][MXU_NPZ_NAME_SIZE + 8];
  for (int j = 0; j < (output_count ? output_count : 1); j++)
    snprintf(y_keys[j], sizeof y_keys[j], "%s%s",
             output_count ? outputs[j] : "y", suffix);
  MXU_TRY(
      mxu_load_npz_inputs(path, x_keys, count, labels ? y_keys[0] : NULL, out));
  for (int j = 1; labels && j < output_count && status == MXU_OK; j++)
    status = add_output_array(path, x_keys[0], y_keys[j], *out);
  if (status != MXU_OK) {
    mxu_dataset_free(*out);
    *out = NULL;
  }
  return status;
}

mxu_status mxu_load_npz_named(const char *path, mxu_split split,
                              const char *const *names, int count, int whole,
                              int labels, mxu_dataset **out) {
  return mxu_load_npz_model(path, split, names, count, NULL, 0, whole, labels,
                            out);
}

mxu_status mxu_npz_entries(const char *path, mxu_npz_entry *entries, int max,
                           int *count) {
  if (!path || !count || (max > 0 && !entries))
    return mxu_fail(MXU_ERR_ARG, "npz: entries needs a path and room");
  *count = 0;
  mxu_status status = MXU_OK;
  zip_t *zip = open_zip(path, &status);
  if (!zip) return status;
  zip_int64_t n = zip_get_num_entries(zip, 0);
  for (zip_int64_t i = 0; i < n && *count < max && status == MXU_OK; i++) {
    const char *name = zip_get_name(zip, (zip_uint64_t)i, 0);
    size_t length = name ? strlen(name) : 0;
    if (length < 5 || length - 4 >= MXU_NPZ_NAME_SIZE ||
        strcmp(name + length - 4, ".npy") != 0)
      continue;
    mxu_npz_entry *e = &entries[*count];
    memset(e, 0, sizeof *e);
    memcpy(e->name, name, length - 4);
    npz_member m;
    memset(&m, 0, sizeof m);
    int found = 0;
    status = read_member(zip, path, e->name, &m, &found);
    if (status == MXU_OK && found) {
      e->sample.rank = m.array.rank > 1 ? m.array.rank - 1 : 1;
      e->sample.dims[0] = 1;
      for (int d = 1; d < m.array.rank; d++)
        e->sample.dims[d - 1] = m.array.shape[d];
      ++*count;
    }
    free(m.bytes);
  }
  zip_discard(zip);
  return status;
}

/* ---- .npy pairs -------------------------------------------------------- */

/* Samples that are float32 already are mapped copy-on-write, not read:
 * a file larger than memory still trains, and rescaling copies only what
 * it writes. Anything else (other dtypes, gzip, a header mxu refuses) is
 * left to the reading path, which says what is wrong. */
static void map_samples(const npy_source *s, npy_array *a,
                        npy_mapping *mapped) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  int fd = open(s->path, O_RDONLY);
  struct stat st;
  unsigned char head[4096];
  ssize_t n = fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode)
                  ? pread(fd, head, sizeof head, 0)
                  : -1;
  /* The header must lie in what was read: parse_npy reads no further,
   * and checks the data's length against the file's size. */
  size_t start = n >= 12 && head[6] == 1 ? 10 : 12;
  size_t header = n >= 12 ? (size_t)head[8] | (size_t)head[9] << 8 : 0;
  if (n >= 12 && head[6] != 1)
    header |= (size_t)head[10] << 16 | (size_t)head[11] << 24;
  int fits = n >= 12 && memcmp(head, "\x93NUMPY", 6) == 0 &&
             start + header <= (size_t)n &&
             parse_npy(s, head, (size_t)st.st_size, a) == MXU_OK &&
             a->kind == 'f' && a->item == 4 && a->count > 0;
  void *base = fits ? mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE, fd, 0)
                    : MAP_FAILED;
  if (base != MAP_FAILED) {
    mapped->base = base;
    mapped->size = (size_t)st.st_size;
    a->values = (const unsigned char *)base + (a->values - head);
  }
  if (fd >= 0) close(fd);
#else
  (void)s;
  (void)a;
  (void)mapped;
#endif
}

mxu_status mxu_load_npy(const char *x_path, const char *y_path,
                        mxu_dataset **out) {
  if (!out) return mxu_fail(MXU_ERR_ARG, "npy: out is NULL");
  *out = NULL;
  if (!x_path) return mxu_fail(MXU_ERR_ARG, "npy: no samples file given");
  unsigned char *bytes[2] = {NULL, NULL};
  size_t size[2] = {0, 0};
  npy_source source[2] = {{x_path, NULL}, {y_path, NULL}};
  npy_array array[2];
  mxu_status status = MXU_OK;
  npy_mapping mapped = {NULL, 0};
  map_samples(&source[0], &array[0], &mapped);
  for (int k = mapped.base != NULL;
       k < 1 + (y_path != NULL) && status == MXU_OK; k++) {
    status = mxu_read_file("npy", source[k].path, &bytes[k], &size[k]);
    if (status == MXU_OK)
      status = parse_npy(&source[k], bytes[k], size[k], &array[k]);
  }
  int classes = 1;
  if (status == MXU_OK && !y_path) {
    status = no_labels(&array[0], &array[1], &bytes[1]);
  } else if (status == MXU_OK) {
    status = count_classes(&source[1], &array[1], &array[0], &classes);
  }
  if (status == MXU_OK)
    status =
        to_dataset(&source[0], &array[0], &array[1], classes, &mapped, out);
  if (mapped.base) munmap(mapped.base, mapped.size);
  free(bytes[0]);
  free(bytes[1]);
  return status;
}

/* ---- writing ----------------------------------------------------------- */

/* np.save's bytes of float32 values of the given shape: *bytes
 * (malloc'd), *size. */
static mxu_status npy_bytes(const char *path, const int64_t *shape, int rank,
                            const float *values, unsigned char **out,
                            size_t *out_size) {
  if (!path || !shape || rank < 1 || rank > MXU_MAX_RANK + 1 || !values)
    return mxu_fail(MXU_ERR_ARG,
                    "npy: a path, a shape of rank 1..%d and values are needed",
                    MXU_MAX_RANK + 1);
  char header[256];
  int n = snprintf(header, sizeof header,
                   "{'descr': '<f4', 'fortran_order': False, 'shape': (");
  int64_t count = 1;
  for (int d = 0; d < rank; d++) {
    if (shape[d] < 0 || shape[d] > MXU_MAX_ELEMENTS)
      return mxu_fail(MXU_ERR_ARG, "npy: %s: dimension %d is %lld", path, d,
                      (long long)shape[d]);
    count *= shape[d];
    n += snprintf(header + n, sizeof header - (size_t)n, "%lld%s",
                  (long long)shape[d], rank == 1 || d + 1 < rank ? ", " : "");
  }
  n += snprintf(header + n, sizeof header - (size_t)n, "), }");
  /* NumPy pads with spaces to a multiple of 64 bytes, magic included,
   * and ends the header with a newline. */
  size_t padded = ((size_t)(10 + n + 1) + 63) / 64 * 64 - 10;
  size_t size = 10 + padded + (size_t)count * 4;
  unsigned char *bytes = malloc(size);
  if (!bytes) return mxu_fail(MXU_ERR_NOMEM, "npy: %s: out of memory", path);
  memcpy(bytes, "\x93NUMPY\x01\x00", 8);
  bytes[8] = (unsigned char)(padded & 0xff);
  bytes[9] = (unsigned char)(padded >> 8);
  memcpy(bytes + 10, header, (size_t)n);
  memset(bytes + 10 + n, ' ', padded - (size_t)n - 1);
  bytes[10 + padded - 1] = '\n';
  unsigned char *data = bytes + 10 + padded;
  for (int64_t i = 0; i < count; i++) { /* little-endian on any host */
    uint32_t bits;
    memcpy(&bits, &values[i], 4);
    for (int b = 0; b < 4; b++)
      data[i * 4 + b] = (unsigned char)(bits >> 8 * b);
  }
  *out = bytes;
  *out_size = size;
  return MXU_OK;
}

mxu_status mxu_save_npy(const char *path, const int64_t *shape, int rank,
                        const float *values) {
  unsigned char *bytes = NULL;
  size_t size = 0;
  MXU_TRY(npy_bytes(path, shape, rank, values, &bytes, &size));
  mxu_status status = mxu_file_write(path, bytes, size);
  free(bytes);
  return status;
}

mxu_status mxu_save_npz(const char *path, int count, const char *const *names,
                        const int64_t *const *shapes, const int *ranks,
                        const float *const *values) {
  if (!path || count < 1 || count > MXU_MAX_OUTPUTS || !names || !shapes ||
      !ranks || !values)
    return mxu_fail(MXU_ERR_ARG, "npz: a path and 1..%d named arrays needed",
                    MXU_MAX_OUTPUTS);
  unsigned char *npy[MXU_MAX_OUTPUTS] = {0}, *zip = NULL;
  char member[MXU_MAX_OUTPUTS][MXU_NPZ_NAME_SIZE + 8];
  mxu_zip_member members[MXU_MAX_OUTPUTS];
  mxu_status status = MXU_OK;
  for (int k = 0; k < count && status == MXU_OK; k++) {
    snprintf(member[k], sizeof member[k], "%s.npy", names[k]);
    members[k].name = member[k];
    members[k].bytes = NULL;
    status = npy_bytes(path, shapes[k], ranks[k], values[k], &npy[k],
                       &members[k].size);
    members[k].bytes = npy[k];
  }
  size_t size = 0;
  if (status == MXU_OK)
    status = mxu_zip_build(path, members, count, &zip, &size);
  if (status == MXU_OK) status = mxu_file_write(path, zip, size);
  free(zip);
  for (int k = 0; k < count; k++) free(npy[k]);
  return status;
}
