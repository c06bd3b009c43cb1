/* weights.c — mxu's interim weights file: every layer's weights in Keras
 * order with names and shapes, checked by CRC-32, written atomically and
 * validated in full before a single model value changes.
 *
 * Format, all integers unsigned little-endian, floats IEEE-754 binary32
 * little-endian:
 *
 *   offset 0   "MXUW"                   magic, 4 bytes
 *   offset 4   u32 version              1
 *   offset 8   u32 layer_count          model.layers, InputLayer excluded
 *   then layer_count times:
 *     u32 name_length, name bytes       the layer's name, no terminator
 *     u32 weight_count                  0 for weightless layers
 *     then weight_count times:
 *       u32 name_length, name bytes     kernel, bias, gamma, moving_mean, ...
 *       u32 rank                        1 .. MXU_MAX_RANK
 *       u64 dims[rank]                  Keras layout (kh, kw, in, out), ...
 *       f32 values[product of dims]     row-major
 *   last 4 bytes: u32 CRC-32 (zlib's crc32) of every byte before it
 *
 * Loading matches weights by position over the layers that have weights,
 * as Keras' load_weights does; names are informative only. The HDF5 issue
 * replaces this format. */
#include "model/layers/layers.h"
#include "model/model.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define WEIGHTS_MAGIC "MXUW"
#define WEIGHTS_VERSION 1u
#define HEADER_BYTES 12u
#define CRC_BYTES 4u

/* ---- writing ----------------------------------------------------------- */

/* A stream that folds every byte into the CRC; the first failing write's
 * errno is kept, so one check at the end reports the real cause. */
typedef struct writer {
  FILE *file;
  uLong crc;
  int error;
} writer;

static void write_raw(writer *w, const void *bytes, size_t size) {
  if (w->error || size == 0) return;
  errno = 0;
  if (fwrite(bytes, 1, size, w->file) != size) w->error = errno ? errno : EIO;
}

static void put_bytes(writer *w, const void *bytes, size_t size) {
  if (w->error || size == 0) return;
  w->crc = crc32(w->crc, bytes, (uInt)size);
  write_raw(w, bytes, size);
}

static void put_u32(writer *w, uint32_t v) {
  unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8),
                        (unsigned char)(v >> 16), (unsigned char)(v >> 24)};
  put_bytes(w, b, sizeof b);
}

static void put_u64(writer *w, uint64_t v) {
  put_u32(w, (uint32_t)v);
  put_u32(w, (uint32_t)(v >> 32));
}

static void put_name(writer *w, const char *name) {
  size_t length = strlen(name);
  put_u32(w, (uint32_t)length);
  put_bytes(w, name, length);
}

/* Converted in chunks so the bytes are little-endian on any host. */
static void put_floats(writer *w, const float *values, int64_t count) {
  unsigned char chunk[4096];
  size_t used = 0;
  for (int64_t i = 0; i < count; i++) {
    uint32_t bits;
    memcpy(&bits, &values[i], 4);
    for (int k = 0; k < 4; k++) chunk[used++] = (unsigned char)(bits >> 8 * k);
    if (used == sizeof chunk) {
      put_bytes(w, chunk, used);
      used = 0;
    }
  }
  put_bytes(w, chunk, used);
}

static void put_layer(writer *w, const mxu_model *model, int layer) {
  int count = mxu_layer_weight_count(model, layer);
  put_name(w, mxu_model_layer_name(model, layer));
  put_u32(w, (uint32_t)count);
  for (int k = 0; k < count; k++) {
    mxu_tensor t;
    const char *name = "";
    mxu_layer_weight(model, layer, k, &t, &name);
    put_name(w, name);
    put_u32(w, (uint32_t)t.shape.rank);
    for (int d = 0; d < t.shape.rank; d++)
      put_u64(w, (uint64_t)t.shape.dims[d]);
    put_floats(w, t.data, mxu_shape_count(&t.shape));
  }
}

static void put_model(writer *w, const mxu_model *model) {
  put_bytes(w, WEIGHTS_MAGIC, 4);
  put_u32(w, WEIGHTS_VERSION);
  put_u32(w, (uint32_t)model->layer_count);
  for (int i = 0; i < model->layer_count; i++) put_layer(w, model, i);
  unsigned char crc[4];
  uint32_t v = (uint32_t)w->crc;
  for (int k = 0; k < 4; k++) crc[k] = (unsigned char)(v >> 8 * k);
  write_raw(w, crc, sizeof crc); /* the CRC does not cover itself */
}

/* A rename is durable only once the directory entry is on disk; failing
 * here is not an error, the data itself is already synced. */
static void sync_directory(const char *path) {
  char dir[4096];
  const char *slash = strrchr(path, '/');
  if (!slash)
    snprintf(dir, sizeof dir, ".");
  else if (slash == path)
    snprintf(dir, sizeof dir, "/");
  else
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
  int fd = open(dir, O_RDONLY);
  if (fd < 0) return;
  fsync(fd);
  close(fd);
}

/* Writes, flushes and syncs the temporary file; closes it either way. */
static int write_temp(FILE *file, const mxu_model *model) {
  writer w = {file, crc32(0L, Z_NULL, 0), 0};
  put_model(&w, model);
  if (!w.error && fflush(file) != 0) w.error = errno;
  if (!w.error && fsync(fileno(file)) != 0) w.error = errno;
  if (fclose(file) != 0 && !w.error) w.error = errno;
  return w.error;
}

mxu_status mxu_save_weights(const mxu_model *model, const char *path) {
  if (!model || !path)
    return mxu_fail(MXU_ERR_ARG, "weights: a model and a path are required");
  if (!model->compiled)
    return mxu_fail(MXU_ERR_ARG,
                    "weights: %s: compile the model first (its weights are "
                    "created at compile)",
                    path);
  char temp[4096];
  if (snprintf(temp, sizeof temp, "%s.tmp-XXXXXX", path) >= (int)sizeof temp)
    return mxu_fail(MXU_ERR_IO, "weights: %s: path too long", path);
  /* Same directory as the target, so the rename cannot cross devices. */
  int fd = mkstemp(temp);
  if (fd < 0)
    return mxu_fail(MXU_ERR_IO, "weights: %s: cannot create a file there: %s",
                    path, strerror(errno));
  fchmod(fd, 0644); /* mkstemp's 0600 would surprise a reader */
  FILE *file = fdopen(fd, "wb");
  if (!file) {
    int error = errno;
    close(fd);
    unlink(temp);
    return mxu_fail(MXU_ERR_IO, "weights: %s: %s", path, strerror(error));
  }
  int error = write_temp(file, model);
  if (!error && rename(temp, path) != 0) error = errno;
  if (error) {
    unlink(temp);
    return mxu_fail(MXU_ERR_IO, "weights: %s: cannot write: %s", path,
                    strerror(error));
  }
  sync_directory(path);
  return MXU_OK;
}

/* ---- reading ----------------------------------------------------------- */

/* A cursor over the file's bytes in memory; every read is bounds-checked
 * against the end of the data (the CRC excluded). */
typedef struct reader {
  const unsigned char *data;
  size_t size, pos;
  const char *path;
} reader;

static mxu_status truncated(const reader *r, size_t need, const char *what) {
  return mxu_fail(MXU_ERR_FORMAT,
                  "weights: %s: offset %zu: the file ends %zu bytes into %s "
                  "(needs %zu): truncated or corrupt",
                  r->path, r->pos, r->size - r->pos, what, need);
}

static uint32_t le32(const unsigned char *b) {
  return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
         (uint32_t)b[3] << 24;
}

static mxu_status get_u32(reader *r, uint32_t *v, const char *what) {
  if (r->size - r->pos < 4) return truncated(r, 4, what);
  *v = le32(r->data + r->pos);
  r->pos += 4;
  return MXU_OK;
}

static mxu_status get_u64(reader *r, uint64_t *v, const char *what) {
  if (r->size - r->pos < 8) return truncated(r, 8, what);
  *v = (uint64_t)le32(r->data + r->pos) | (uint64_t)le32(r->data + r->pos + 4)
                                              << 32;
  r->pos += 8;
  return MXU_OK;
}

/* A name as a pointer into the data and a length (no terminator). */
typedef struct name_ref {
  const char *text;
  int length;
} name_ref;

static mxu_status get_name(reader *r, name_ref *name, const char *what) {
  uint32_t length = 0;
  MXU_TRY(get_u32(r, &length, what));
  if (length > r->size - r->pos || length >= MXU_NAME_SIZE)
    return mxu_fail(MXU_ERR_FORMAT,
                    "weights: %s: offset %zu: %s of %u bytes does not fit "
                    "(at most %d, %zu left): truncated or corrupt",
                    r->path, r->pos - 4, what, length, MXU_NAME_SIZE - 1,
                    r->size - r->pos);
  name->text = (const char *)(r->data + r->pos);
  name->length = (int)length;
  r->pos += length;
  return MXU_OK;
}

/* One weight's header; its values are left at `values` and skipped. */
typedef struct weight_ref {
  name_ref name;
  mxu_shape shape;
  const unsigned char *values;
} weight_ref;

static mxu_status get_dims(reader *r, weight_ref *w) {
  uint32_t rank = 0;
  MXU_TRY(get_u32(r, &rank, "a weight's rank"));
  if (rank < 1 || rank > MXU_MAX_RANK)
    return mxu_fail(MXU_ERR_FORMAT,
                    "weights: %s: offset %zu: weight '%.*s' has rank %u, "
                    "not 1..%d: corrupt",
                    r->path, r->pos - 4, w->name.length, w->name.text, rank,
                    MXU_MAX_RANK);
  w->shape.rank = (int)rank;
  for (uint32_t d = 0; d < rank; d++) {
    uint64_t dim = 0;
    MXU_TRY(get_u64(r, &dim, "a weight's dimensions"));
    if (dim == 0 || dim > (uint64_t)1 << 40)
      return mxu_fail(MXU_ERR_FORMAT,
                      "weights: %s: offset %zu: weight '%.*s' has dimension "
                      "%llu: corrupt",
                      r->path, r->pos - 8, w->name.length, w->name.text,
                      (unsigned long long)dim);
    w->shape.dims[d] = (int64_t)dim;
  }
  return MXU_OK;
}

static mxu_status get_weight(reader *r, weight_ref *w) {
  MXU_TRY(get_name(r, &w->name, "a weight's name"));
  MXU_TRY(get_dims(r, w));
  uint64_t count = 1;
  for (int d = 0; d < w->shape.rank; d++) {
    count *= (uint64_t)w->shape.dims[d];
    if (count > (r->size - r->pos) / 4)
      return truncated(r, (size_t)count * 4, "a weight's values");
  }
  w->values = r->data + r->pos;
  r->pos += (size_t)count * 4;
  return MXU_OK;
}

/* A layer's header: name and weight count; the weights follow. */
static mxu_status get_layer(reader *r, name_ref *name, uint32_t *count) {
  MXU_TRY(get_name(r, name, "a layer name"));
  MXU_TRY(get_u32(r, count, "a layer's weight count"));
  /* Each weight takes at least 4 + 4 + 8 + 4 bytes. */
  if (*count > (r->size - r->pos) / 20)
    return mxu_fail(MXU_ERR_FORMAT,
                    "weights: %s: offset %zu: layer '%.*s' claims %u weights, "
                    "more than the rest of the file holds: corrupt",
                    r->path, r->pos - 4, name->length, name->text, *count);
  return MXU_OK;
}

/* zlib takes at most 4 GiB a call. */
static uint32_t crc_of(const unsigned char *data, size_t size) {
  uLong crc = crc32(0L, Z_NULL, 0);
  for (size_t done = 0; done < size;) {
    size_t part = size - done < (1u << 30) ? size - done : (1u << 30);
    crc = crc32(crc, data + done, (uInt)part);
    done += part;
  }
  return (uint32_t)crc;
}

/* Header checks, then the CRC; on success r covers the layer records. */
static mxu_status check_envelope(reader *r, uint32_t *layers) {
  if (r->size < HEADER_BYTES + CRC_BYTES)
    return mxu_fail(MXU_ERR_FORMAT,
                    "weights: %s: offset 0: the file has %zu bytes, too few "
                    "for a weights file (at least %u): truncated",
                    r->path, r->size, HEADER_BYTES + CRC_BYTES);
  if (memcmp(r->data, WEIGHTS_MAGIC, 4) != 0)
    return mxu_fail(MXU_ERR_FORMAT,
                    "weights: %s: offset 0: not an mxu weights file (it "
                    "does not start with \"MXUW\")",
                    r->path);
  uint32_t version = le32(r->data + 4);
  if (version != WEIGHTS_VERSION)
    return mxu_fail(MXU_ERR_FORMAT,
                    "weights: %s: offset 4: format version %u, this mxu "
                    "reads version %u",
                    r->path, version, WEIGHTS_VERSION);
  size_t body = r->size - CRC_BYTES;
  uint32_t stored = le32(r->data + body);
  uint32_t actual = crc_of(r->data, body);
  if (stored != actual)
    return mxu_fail(MXU_ERR_FORMAT,
                    "weights: %s: offset %zu: CRC-32 mismatch (the file says "
                    "%08x, its contents give %08x): truncated or corrupt",
                    r->path, body, stored, actual);
  *layers = le32(r->data + 8);
  r->size = body;
  r->pos = HEADER_BYTES;
  return MXU_OK;
}

/* Walks every record once, so that nothing later can run off the end. */
static mxu_status check_structure(reader *r, uint32_t layers) {
  for (uint32_t i = 0; i < layers; i++) {
    name_ref name;
    uint32_t count = 0;
    MXU_TRY(get_layer(r, &name, &count));
    for (uint32_t k = 0; k < count; k++) {
      weight_ref w;
      MXU_TRY(get_weight(r, &w));
    }
  }
  if (r->pos != r->size)
    return mxu_fail(MXU_ERR_FORMAT,
                    "weights: %s: offset %zu: %zu unexpected bytes after the "
                    "last layer: corrupt",
                    r->path, r->pos, r->size - r->pos);
  r->pos = HEADER_BYTES;
  return MXU_OK;
}

/* ---- matching the model ------------------------------------------------ */

static int model_layers_with_weights(const mxu_model *model) {
  int n = 0;
  for (int i = 0; i < model->layer_count; i++)
    n += mxu_layer_weight_count(model, i) > 0;
  return n;
}

/* Advances to the next file layer that has weights; 0 at the end. */
static int next_file_layer(reader *r, uint32_t *left, name_ref *name,
                           uint32_t *count) {
  while (*left > 0) {
    (*left)--;
    get_layer(r, name, count); /* cannot fail: check_structure passed */
    if (*count > 0) return 1;
  }
  return 0;
}

static int next_model_layer(const mxu_model *model, int from) {
  while (from < model->layer_count && mxu_layer_weight_count(model, from) == 0)
    from++;
  return from;
}

static mxu_status shape_mismatch(const reader *r, const mxu_model *model,
                                 int layer, const char *weight,
                                 const mxu_shape *file, const mxu_shape *want) {
  char a[160], b[160];
  mxu_shape_format(file, a, sizeof a);
  mxu_shape_format(want, b, sizeof b);
  return mxu_fail(MXU_ERR_SHAPE,
                  "weights: %s: layer %d '%s': %s has shape %s in the file "
                  "but %s in the model",
                  r->path, layer + 1, model->layers[layer].name, weight, a, b);
}

static int same_shape(const mxu_shape *a, const mxu_shape *b) {
  if (a->rank != b->rank) return 0;
  for (int d = 0; d < a->rank; d++)
    if (a->dims[d] != b->dims[d]) return 0;
  return 1;
}

static void copy_values(const weight_ref *w, float *out) {
  int64_t count = mxu_shape_count(&w->shape);
  for (int64_t i = 0; i < count; i++) {
    uint32_t bits = le32(w->values + 4 * i);
    memcpy(&out[i], &bits, 4);
  }
}

/* One layer's weights against the model's; copies them when `copy`. */
static mxu_status match_layer(reader *r, mxu_model *model, int layer,
                              const name_ref *file_name, uint32_t count,
                              int copy) {
  int want = mxu_layer_weight_count(model, layer);
  if ((int)count != want)
    return mxu_fail(MXU_ERR_SHAPE,
                    "weights: %s: layer %d '%s': the file has %u weights for "
                    "it (from its layer '%.*s') but the model has %d",
                    r->path, layer + 1, model->layers[layer].name, count,
                    file_name->length, file_name->text, want);
  for (int k = 0; k < want; k++) {
    weight_ref w;
    get_weight(r, &w); /* cannot fail: check_structure passed */
    mxu_tensor t;
    const char *name = "";
    mxu_layer_weight(model, layer, k, &t, &name);
    if (!same_shape(&w.shape, &t.shape))
      return shape_mismatch(r, model, layer, name, &w.shape, &t.shape);
    if (copy) copy_values(&w, t.data);
  }
  return MXU_OK;
}

/* Pairs file and model layers that have weights, by position. */
static mxu_status match_model(reader *r, mxu_model *model, uint32_t layers,
                              int copy) {
  r->pos = HEADER_BYTES;
  uint32_t left = layers;
  int layer = next_model_layer(model, 0), file_layers = 0;
  name_ref name;
  uint32_t count = 0;
  while (next_file_layer(r, &left, &name, &count)) {
    file_layers++;
    if (layer < model->layer_count)
      MXU_TRY(match_layer(r, model, layer, &name, count, copy));
    layer = next_model_layer(model, layer + 1);
  }
  int want = model_layers_with_weights(model);
  if (file_layers != want)
    return mxu_fail(MXU_ERR_SHAPE,
                    "weights: %s: the file holds weights for %d layers but "
                    "the model has %d layers with weights",
                    r->path, file_layers, want);
  return MXU_OK;
}

/* The whole file in memory: the scratch buffer every check runs on. */
static mxu_status read_file(const char *path, unsigned char **data,
                            size_t *size) {
  FILE *file = fopen(path, "rb");
  if (!file)
    return mxu_fail(MXU_ERR_IO, "weights: %s: cannot open: %s", path,
                    strerror(errno));
  struct stat st;
  if (fstat(fileno(file), &st) != 0 || !S_ISREG(st.st_mode)) {
    fclose(file);
    return mxu_fail(MXU_ERR_IO, "weights: %s: not a regular file", path);
  }
  *size = (size_t)st.st_size;
  *data = malloc(*size ? *size : 1);
  if (!*data) {
    fclose(file);
    return mxu_fail(MXU_ERR_NOMEM, "weights: %s: out of memory (%zu bytes)",
                    path, *size);
  }
  size_t got = fread(*data, 1, *size, file);
  int error = ferror(file) ? errno : 0;
  fclose(file);
  if (got == *size) return MXU_OK;
  free(*data);
  *data = NULL;
  return mxu_fail(MXU_ERR_IO, "weights: %s: read %zu of %zu bytes: %s", path,
                  got, *size, error ? strerror(error) : "file shrank");
}

static mxu_status load_from(reader *r, mxu_model *model) {
  uint32_t layers = 0;
  MXU_TRY(check_envelope(r, &layers));
  MXU_TRY(check_structure(r, layers));
  MXU_TRY(match_model(r, model, layers, 0));
  return match_model(r, model, layers, 1);
}

mxu_status mxu_load_weights(mxu_model *model, const char *path) {
  if (!model || !path)
    return mxu_fail(MXU_ERR_ARG, "weights: a model and a path are required");
  if (!model->compiled)
    return mxu_fail(MXU_ERR_ARG,
                    "weights: %s: compile the model before loading weights "
                    "into it",
                    path);
  reader r = {NULL, 0, 0, path};
  unsigned char *data = NULL;
  MXU_TRY(read_file(path, &data, &r.size));
  r.data = data;
  mxu_status status = load_from(&r, model);
  free(data);
  return status;
}
