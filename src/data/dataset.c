/* dataset.c — the in-memory data set: samples and labels in two flat
 * arrays, views that share them, and what the training loop asks of it:
 * a seeded order per epoch and a gather of one batch. */
#include "core/core.h"
#include "data/data.h"
#include "data/loader.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* Floats in one sample; MXU_ERR_ARG for a shape no sample can have. */
static mxu_status sample_floats(mxu_shape shape, int64_t *floats) {
  if (shape.rank < 1 || shape.rank > MXU_MAX_RANK)
    return mxu_fail(MXU_ERR_ARG, "dataset: sample rank %d outside 1..%d",
                    shape.rank, MXU_MAX_RANK);
  int64_t product = 1;
  for (int i = 0; i < shape.rank; i++) {
    int64_t dim = shape.dims[i];
    if (dim < 1 || product > INT64_MAX / dim)
      return mxu_fail(MXU_ERR_ARG, "dataset: sample dimension %d is %lld", i,
                      (long long)dim);
    product *= dim;
  }
  *floats = product;
  return MXU_OK;
}

static mxu_status array_bytes(int64_t count, int64_t per_sample, size_t bytes,
                              size_t *total) {
  /* count * per_sample * bytes must fit both size_t and int64_t indexing. */
  uint64_t limit = (uint64_t)(SIZE_MAX < INT64_MAX ? SIZE_MAX : INT64_MAX);
  if (count < 0 || (count && (uint64_t)per_sample > limit / bytes / count))
    return mxu_fail(MXU_ERR_NOMEM,
                    "dataset: %lld samples of %lld values do "
                    "not fit in memory",
                    (long long)count, (long long)per_sample);
  *total = (size_t)count * (size_t)per_sample * bytes;
  return MXU_OK;
}

static mxu_status make(mxu_shape shape, int64_t count, int num_classes,
                       float *mapped_x, mxu_dataset **out) {
  *out = NULL;
  int64_t per_sample = 0;
  size_t x_bytes = 0, label_bytes = 0;
  MXU_TRY(sample_floats(shape, &per_sample));
  if (num_classes < 0)
    return mxu_fail(MXU_ERR_ARG, "dataset: num_classes %d (expected >= 0)",
                    num_classes);
  MXU_TRY(array_bytes(count, per_sample, sizeof(float), &x_bytes));
  MXU_TRY(array_bytes(count, 1, sizeof(int32_t), &label_bytes));
  mxu_dataset *dataset = calloc(1, sizeof *dataset);
  /* malloc(0) may return NULL; an empty set still gets valid pointers. */
  if (dataset) dataset->x = mapped_x ? mapped_x : malloc(x_bytes ? x_bytes : 1);
  if (dataset) dataset->labels = calloc(1, label_bytes ? label_bytes : 1);
  if (!dataset || !dataset->x || !dataset->labels) {
    if (dataset) dataset->owns = 1;
    if (dataset && mapped_x) dataset->x = NULL; /* the caller's to unmap */
    mxu_dataset_free(dataset);
    return mxu_fail(MXU_ERR_NOMEM, "dataset: out of memory for %lld samples",
                    (long long)count);
  }
  dataset->shape = shape;
  dataset->count = count;
  dataset->num_classes = num_classes;
  dataset->owns = 1;
  *out = dataset;
  return MXU_OK;
}

mxu_status mxu_dataset_alloc(mxu_shape shape, int64_t count, int num_classes,
                             mxu_dataset **out) {
  return make(shape, count, num_classes, NULL, out);
}

mxu_status mxu_dataset_add_targets(mxu_dataset *dataset, int target_size) {
  size_t bytes = 0;
  if (target_size < 1)
    return mxu_fail(MXU_ERR_ARG, "dataset: %d targets a sample", target_size);
  MXU_TRY(array_bytes(dataset->count, target_size, sizeof(float), &bytes));
  free(dataset->targets);
  dataset->targets = malloc(bytes ? bytes : 1);
  if (!dataset->targets)
    return mxu_fail(MXU_ERR_NOMEM, "dataset: out of memory for %lld targets",
                    (long long)dataset->count);
  dataset->target_size = target_size;
  return MXU_OK;
}

mxu_status mxu_dataset_alloc_mapped(mxu_shape shape, int64_t count,
                                    int num_classes, void *mapping,
                                    size_t mapping_size, float *x,
                                    mxu_dataset **out) {
  MXU_TRY(make(shape, count, num_classes, x, out));
  (*out)->mapping = mapping;
  (*out)->mapping_size = mapping_size;
  return MXU_OK;
}

static mxu_status check_labels(const int32_t *labels, int64_t count,
                               int num_classes) {
  for (int64_t i = 0; i < count; i++)
    if (labels[i] < 0 || labels[i] >= num_classes)
      return mxu_fail(MXU_ERR_ARG,
                      "dataset: label %d of sample %lld out of range 0..%d",
                      (int)labels[i], (long long)i, num_classes - 1);
  return MXU_OK;
}

mxu_status mxu_dataset_from_arrays(const float *x, const int32_t *labels,
                                   int64_t count, mxu_shape shape,
                                   int num_classes, mxu_dataset **out) {
  if (!out) return mxu_fail(MXU_ERR_ARG, "dataset: out is NULL");
  *out = NULL;
  if (count < 0 || (count > 0 && (!x || !labels)))
    return mxu_fail(MXU_ERR_ARG, "dataset: %lld samples need x and labels",
                    (long long)count);
  if (num_classes < 1)
    return mxu_fail(MXU_ERR_ARG, "dataset: num_classes %d (expected >= 1)",
                    num_classes);
  MXU_TRY(check_labels(labels, count, num_classes));
  mxu_dataset *dataset = NULL;
  MXU_TRY(mxu_dataset_alloc(shape, count, num_classes, &dataset));
  size_t floats = (size_t)count * (size_t)mxu_shape_count(&shape);
  if (count > 0) {
    memcpy(dataset->x, x, floats * sizeof(float));
    memcpy(dataset->labels, labels, (size_t)count * sizeof(int32_t));
  }
  *out = dataset;
  return MXU_OK;
}

mxu_status mxu_dataset_from_targets(const float *x, const float *targets,
                                    int64_t count, mxu_shape shape,
                                    int target_size, mxu_dataset **out) {
  if (!out) return mxu_fail(MXU_ERR_ARG, "dataset: out is NULL");
  *out = NULL;
  if (count < 0 || (count > 0 && (!x || !targets)))
    return mxu_fail(MXU_ERR_ARG, "dataset: %lld samples need x and targets",
                    (long long)count);
  mxu_dataset *dataset = NULL;
  MXU_TRY(mxu_dataset_alloc(shape, count, 0, &dataset));
  mxu_status status = mxu_dataset_add_targets(dataset, target_size);
  if (status != MXU_OK) {
    mxu_dataset_free(dataset);
    return status;
  }
  if (count > 0) {
    memcpy(dataset->x, x,
           (size_t)count * (size_t)mxu_shape_count(&shape) * sizeof(float));
    memcpy(dataset->targets, targets,
           (size_t)count * (size_t)target_size * sizeof(float));
  }
  *out = dataset;
  return MXU_OK;
}

void mxu_dataset_free(mxu_dataset *dataset) {
  if (!dataset) return;
  if (dataset->owns) {
    if (dataset->mapping)
      munmap(dataset->mapping, dataset->mapping_size);
    else
      free(dataset->x);
    free(dataset->labels);
    free(dataset->targets);
    for (int k = 0; k < dataset->more_count; k++) free(dataset->more[k]);
    for (int j = 0; j < dataset->out_count; j++) {
      free(dataset->outs[j].labels);
      free(dataset->outs[j].targets);
    }
    free(dataset->weights);
    for (int i = 0; dataset->class_names && i < dataset->num_classes; i++)
      free(dataset->class_names[i]);
    free(dataset->class_names);
  }
  free(dataset);
}

int64_t mxu_dataset_count(const mxu_dataset *dataset) {
  return dataset ? dataset->count : 0;
}

mxu_shape mxu_dataset_shape(const mxu_dataset *dataset) {
  mxu_shape none = {0};
  return dataset ? dataset->shape : none;
}

int mxu_dataset_num_classes(const mxu_dataset *dataset) {
  return dataset ? dataset->num_classes : 0;
}

const float *mxu_dataset_x(const mxu_dataset *dataset) {
  return dataset ? dataset->x : NULL;
}

const int32_t *mxu_dataset_labels(const mxu_dataset *dataset) {
  return dataset ? dataset->labels : NULL;
}

const char *mxu_dataset_class_name(const mxu_dataset *dataset, int label) {
  if (!dataset || !dataset->class_names || label < 0 ||
      label >= dataset->num_classes)
    return NULL;
  return dataset->class_names[label];
}

mxu_status mxu_dataset_set_class_names(mxu_dataset *dataset,
                                       const char *const *names, int count) {
  if (!dataset || !dataset->owns || count != dataset->num_classes)
    return mxu_fail(MXU_ERR_ARG,
                    "dataset: %d class names for %d classes (or a slice)",
                    count, dataset ? dataset->num_classes : 0);
  char **copy = calloc((size_t)count, sizeof *copy);
  if (!copy) return mxu_fail(MXU_ERR_NOMEM, "dataset: out of memory");
  for (int i = 0; i < count; i++) {
    copy[i] = strdup(names[i]);
    if (!copy[i]) {
      while (i--) free(copy[i]);
      free(copy);
      return mxu_fail(MXU_ERR_NOMEM, "dataset: out of memory");
    }
  }
  dataset->class_names = copy;
  return MXU_OK;
}

mxu_status mxu_dataset_reshape(mxu_dataset *dataset, mxu_shape shape) {
  return mxu_dataset_reshape_input(dataset, 0, shape);
}

mxu_status mxu_dataset_reshape_input(mxu_dataset *dataset, int k,
                                     mxu_shape shape) {
  if (!dataset || k < 0 || k > dataset->more_count)
    return mxu_fail(MXU_ERR_ARG, "dataset: reshape of no input %d", k);
  mxu_shape *now = k ? &dataset->more_shape[k - 1] : &dataset->shape;
  if (shape.rank < 1 || shape.rank > MXU_MAX_RANK ||
      mxu_shape_count(&shape) != mxu_shape_count(now))
    return mxu_fail(MXU_ERR_ARG,
                    "dataset: samples of %lld values cannot take a shape of "
                    "%lld",
                    (long long)mxu_shape_count(now),
                    (long long)mxu_shape_count(&shape));
  *now = shape;
  return MXU_OK;
}

mxu_status mxu_dataset_add_input(mxu_dataset *dataset, const float *x,
                                 mxu_shape shape) {
  if (!dataset || !dataset->owns || (!x && dataset->count))
    return mxu_fail(MXU_ERR_ARG,
                    "dataset: add_input needs a data set of its own (not a "
                    "slice) and samples");
  if (dataset->more_count == MXU_MAX_INPUTS - 1)
    return mxu_fail(MXU_ERR_UNSUPPORTED, "dataset: more than %d inputs",
                    MXU_MAX_INPUTS);
  int64_t per_sample = 0;
  size_t bytes = 0;
  MXU_TRY(sample_floats(shape, &per_sample));
  MXU_TRY(array_bytes(dataset->count, per_sample, sizeof(float), &bytes));
  float *copy = malloc(bytes ? bytes : 1);
  if (!copy)
    return mxu_fail(MXU_ERR_NOMEM, "dataset: out of memory for %lld samples",
                    (long long)dataset->count);
  if (bytes) memcpy(copy, x, bytes);
  dataset->more_shape[dataset->more_count] = shape;
  dataset->more[dataset->more_count++] = copy;
  return MXU_OK;
}

int mxu_dataset_input_count(const mxu_dataset *dataset) {
  return dataset ? 1 + dataset->more_count : 0;
}

mxu_shape mxu_dataset_input_shape(const mxu_dataset *dataset, int k) {
  mxu_shape none = {0};
  if (!dataset || k < 0 || k > dataset->more_count) return none;
  return k ? dataset->more_shape[k - 1] : dataset->shape;
}

const float *mxu_dataset_input(const mxu_dataset *dataset, int k) {
  if (!dataset || k < 0 || k > dataset->more_count) return NULL;
  return k ? dataset->more[k - 1] : dataset->x;
}

/* Room for output j's targets, or a refusal naming why not. */
static mxu_status add_output(mxu_dataset *dataset, const void *values,
                             size_t bytes_per_sample) {
  if (!dataset || !dataset->owns || (!values && dataset->count))
    return mxu_fail(MXU_ERR_ARG,
                    "dataset: adding an output's targets needs a data set of "
                    "its own (not a slice) and the targets");
  if (dataset->out_count == MXU_MAX_OUTPUTS - 1)
    return mxu_fail(MXU_ERR_UNSUPPORTED, "dataset: more than %d outputs",
                    MXU_MAX_OUTPUTS);
  size_t bytes = 0;
  MXU_TRY(array_bytes(dataset->count, 1, bytes_per_sample, &bytes));
  void *copy = malloc(bytes ? bytes : 1);
  if (!copy)
    return mxu_fail(MXU_ERR_NOMEM, "dataset: out of memory for %lld targets",
                    (long long)dataset->count);
  if (bytes) memcpy(copy, values, bytes);
  struct mxu_output_data *o = &dataset->outs[dataset->out_count++];
  memset(o, 0, sizeof *o);
  o->targets = copy; /* the caller moves it to labels for labels */
  return MXU_OK;
}

mxu_status mxu_dataset_add_output_labels(mxu_dataset *dataset,
                                         const int32_t *labels,
                                         int num_classes) {
  if (num_classes < 1)
    return mxu_fail(MXU_ERR_ARG, "dataset: num_classes %d (expected >= 1)",
                    num_classes);
  if (dataset && labels)
    MXU_TRY(check_labels(labels, dataset->count, num_classes));
  MXU_TRY(add_output(dataset, labels, sizeof(int32_t)));
  struct mxu_output_data *o = &dataset->outs[dataset->out_count - 1];
  o->labels = (int32_t *)(void *)o->targets;
  o->targets = NULL;
  o->num_classes = num_classes;
  return MXU_OK;
}

mxu_status mxu_dataset_add_output_targets(mxu_dataset *dataset,
                                          const float *targets,
                                          int target_size) {
  if (target_size < 1)
    return mxu_fail(MXU_ERR_ARG, "dataset: %d targets a sample", target_size);
  MXU_TRY(add_output(dataset, targets, (size_t)target_size * sizeof(float)));
  dataset->outs[dataset->out_count - 1].target_size = target_size;
  return MXU_OK;
}

mxu_status mxu_dataset_add_output_of(mxu_dataset *dataset,
                                     const mxu_dataset *from) {
  if (from->count != dataset->count)
    return mxu_fail(MXU_ERR_SHAPE,
                    "dataset: an output's targets hold %lld samples but the "
                    "inputs %lld",
                    (long long)from->count, (long long)dataset->count);
  if (from->targets)
    MXU_TRY(mxu_dataset_add_output_targets(dataset, from->targets,
                                           from->target_size));
  else
    MXU_TRY(mxu_dataset_add_output_labels(dataset, from->labels,
                                          from->num_classes));
  if (!from->targets || !from->num_classes) return MXU_OK;
  /* Both, as a file's labels are: the classes beside the values. */
  struct mxu_output_data *o = &dataset->outs[dataset->out_count - 1];
  size_t bytes = (size_t)dataset->count * sizeof(int32_t);
  o->labels = malloc(bytes ? bytes : 1);
  if (!o->labels)
    return mxu_fail(MXU_ERR_NOMEM, "dataset: out of memory for %lld labels",
                    (long long)dataset->count);
  if (bytes) memcpy(o->labels, from->labels, bytes);
  o->num_classes = from->num_classes;
  return MXU_OK;
}

mxu_status mxu_dataset_set_sample_weights(mxu_dataset *dataset,
                                          const float *weights) {
  if (!dataset || !dataset->owns || (!weights && dataset->count))
    return mxu_fail(MXU_ERR_ARG,
                    "dataset: sample weights need a data set of its own (not "
                    "a slice) and a weight for each sample");
  for (int64_t i = 0; i < dataset->count; i++)
    if (!(weights[i] >= 0.0f) || !isfinite(weights[i]))
      return mxu_fail(MXU_ERR_ARG,
                      "dataset: sample %lld's weight is %g; a sample weight "
                      "is a finite number >= 0",
                      (long long)i, (double)weights[i]);
  size_t bytes = (size_t)dataset->count * sizeof(float);
  float *copy = malloc(bytes ? bytes : 1);
  if (!copy)
    return mxu_fail(MXU_ERR_NOMEM, "dataset: out of memory for %lld weights",
                    (long long)dataset->count);
  if (bytes) memcpy(copy, weights, bytes);
  free(dataset->weights);
  dataset->weights = copy;
  return MXU_OK;
}

int mxu_dataset_output_count(const mxu_dataset *dataset) {
  return dataset ? 1 + dataset->out_count : 0;
}

void mxu_dataset_output_view(const mxu_dataset *dataset, int j,
                             mxu_dataset *view) {
  *view = *dataset;
  view->owns = 0;
  if (j == 0) return;
  const struct mxu_output_data *o = &dataset->outs[j - 1];
  view->num_classes = o->num_classes;
  view->labels = o->labels;
  view->targets = o->targets;
  view->target_size = o->target_size;
  view->class_names = NULL;
}

void mxu_dataset_rescale(mxu_dataset *dataset, float scale) {
  if (!dataset) return;
  for (int k = 0; k <= dataset->more_count; k++) {
    mxu_shape shape = mxu_dataset_input_shape(dataset, k);
    float *x = k ? dataset->more[k - 1] : dataset->x;
    size_t n = (size_t)dataset->count * (size_t)mxu_shape_count(&shape);
    for (size_t i = 0; i < n; i++) x[i] *= scale;
  }
}

mxu_status mxu_dataset_slice(const mxu_dataset *parent, int64_t first,
                             int64_t count, mxu_dataset **out) {
  if (!out) return mxu_fail(MXU_ERR_ARG, "dataset: out is NULL");
  *out = NULL;
  if (!parent) return mxu_fail(MXU_ERR_ARG, "dataset: slice of NULL");
  /* Written so that first + count never overflows. */
  if (first < 0 || count < 0 || first > parent->count ||
      count > parent->count - first)
    return mxu_fail(MXU_ERR_ARG,
                    "dataset: slice of %lld samples from %lld is outside the "
                    "%lld samples there are",
                    (long long)count, (long long)first,
                    (long long)parent->count);
  mxu_dataset *view = malloc(sizeof *view);
  if (!view) return mxu_fail(MXU_ERR_NOMEM, "dataset: out of memory");
  *view = *parent;
  view->x = parent->x + first * mxu_shape_count(&parent->shape);
  view->labels = parent->labels + first;
  if (parent->targets)
    view->targets = parent->targets + first * parent->target_size;
  for (int k = 0; k < parent->more_count; k++)
    view->more[k] =
        parent->more[k] + first * mxu_shape_count(&view->more_shape[k]);
  if (parent->weights) view->weights = parent->weights + first;
  for (int j = 0; j < parent->out_count; j++) {
    struct mxu_output_data *o = &view->outs[j];
    if (o->labels) o->labels += first;
    if (o->targets) o->targets += first * o->target_size;
  }
  view->count = count;
  view->owns = 0;
  *out = view;
  return MXU_OK;
}

/* A uniform index in [0, i]. mxu_rng_below takes a 32-bit bound; past
 * 2^32 samples the same multiply-shift runs on 64 bits. */
static int64_t draw_at_most(const mxu_rng *rng, int64_t i) {
  if (i < (int64_t)UINT32_MAX)
    return mxu_rng_below(rng, (uint64_t)i, (uint32_t)(i + 1));
  uint32_t block[4];
  mxu_rng_block(rng, (uint64_t)i, block);
  uint64_t r = ((uint64_t)block[0] << 32) | block[1];
  return (int64_t)(((unsigned __int128)r * (uint64_t)(i + 1)) >> 64);
}

void mxu_dataset_permutation(int64_t count, uint64_t seed, uint32_t epoch,
                             int64_t *perm) {
  for (int64_t i = 0; i < count; i++) perm[i] = i;
  /* Draw i is used for position i alone, so the order is a pure function
   * of (seed, epoch), whatever ran before. */
  mxu_rng rng = mxu_rng_make(seed, MXU_STREAM_SHUFFLE, epoch, 0, 0);
  for (int64_t i = count - 1; i > 0; i--) {
    int64_t j = draw_at_most(&rng, i);
    int64_t kept = perm[i];
    perm[i] = perm[j];
    perm[j] = kept;
  }
}

/* Rows order[first .. first + n) (or first .. first + n - 1) of `from`,
 * `floats` a row, into `to`. */
static void gather_rows(const float *from, size_t floats, const int64_t *order,
                        int64_t first, int64_t n, float *to) {
  for (int64_t k = 0; k < n; k++) {
    int64_t sample = order ? order[first + k] : first + k;
    memcpy(to + (size_t)k * floats, from + (size_t)sample * floats,
           floats * sizeof(float));
  }
}

void mxu_dataset_gather(const mxu_dataset *dataset, const int64_t *order,
                        int64_t first, int64_t n, float *x, int32_t *labels,
                        float *targets) {
  if (x)
    gather_rows(dataset->x, (size_t)mxu_shape_count(&dataset->shape), order,
                first, n, x);
  for (int64_t k = 0; labels && k < n; k++)
    labels[k] = dataset->labels[order ? order[first + k] : first + k];
  if (targets)
    gather_rows(dataset->targets, (size_t)dataset->target_size, order, first, n,
                targets);
}

void mxu_dataset_gather_input(const mxu_dataset *dataset, int k,
                              const int64_t *order, int64_t first, int64_t n,
                              float *x) {
  gather_rows(dataset->more[k - 1],
              (size_t)mxu_shape_count(&dataset->more_shape[k - 1]), order,
              first, n, x);
}
