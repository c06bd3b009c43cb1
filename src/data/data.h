/* data.h — the in-memory data set behind mxu_dataset and the two things the
 * training loop asks of it: a seeded order per epoch and a gather of a
 * batch. Internal to libmxu. */
#ifndef MXU_DATA_H
#define MXU_DATA_H

#include "core/core.h"
#include "mxu.h"

struct mxu_dataset {
  mxu_shape shape; /* one sample, channels_last */
  int64_t count;
  /* 0 when the data has float targets only (regression): labels are then
   * all 0 and mean nothing. */
  int num_classes;
  float *x;        /* count * shape floats */
  int32_t *labels; /* count labels in [0, num_classes) */
  /* The labels as the file gave them, target_size floats a sample (the
   * class index as a number, a one-hot row, regression targets), owned
   * like labels; NULL where the labels are all there is. */
  float *targets;
  int target_size;
  int owns; /* 0 for a slice: memory belongs to the parent */
  /* Class names (num_classes strings) when the data set has them; owned
   * like x. */
  char **class_names;
  /* When x lies in a file mapping (an .npy of float32, mapped copy-on-
   * write rather than read): the mapping, unmapped instead of freed. */
  void *mapping;
  size_t mapping_size;
  /* The samples of a model's other inputs (Keras' fit on a list of
   * arrays): input k >= 1 is more[k - 1], count * more_shape[k - 1]
   * floats, owned like x. */
  int more_count;
  mxu_shape more_shape[MXU_MAX_INPUTS - 1];
  float *more[MXU_MAX_INPUTS - 1];
  /* The targets of a model's other outputs (Keras' fit with a list of y):
   * output j >= 1's are outs[j - 1], class labels (num_classes > 0) or
   * target_size floats a sample, owned like x. */
  /* Keras' sample_weight, count values, owned like x; NULL: each 1. */
  float *weights;
  int out_count;
  struct mxu_output_data {
    int num_classes;
    int32_t *labels;
    float *targets;
    int target_size;
  } outs[MXU_MAX_OUTPUTS - 1];
};

/* A view of the data set whose labels and targets are output j's (0: its
 * own), for the code that reads one output's. */
void mxu_dataset_output_view(const mxu_dataset *dataset, int j,
                             mxu_dataset *view);
/* Adds an output's targets: copies of another data set's labels and
 * targets (a file's y, read beside the same samples). */
mxu_status mxu_dataset_add_output_of(mxu_dataset *dataset,
                                     const mxu_dataset *from);

/* Gives the data set names (copies); count must equal num_classes. */
mxu_status mxu_dataset_set_class_names(mxu_dataset *dataset,
                                       const char *const *names, int count);

/* A permutation of [0, count) that depends only on (seed, epoch):
 * Fisher-Yates driven by the counter-based RNG's MXU_STREAM_SHUFFLE. */
void mxu_dataset_permutation(int64_t count, uint64_t seed, uint32_t epoch,
                             int64_t *perm);

/* Gives the data set room for target_size float targets a sample. */
mxu_status mxu_dataset_add_targets(mxu_dataset *dataset, int target_size);

/* Copies samples order[first .. first+n) into x (n * sample floats),
 * labels and targets (each may be NULL). order NULL means samples
 * first .. first+n-1. */
void mxu_dataset_gather(const mxu_dataset *dataset, const int64_t *order,
                        int64_t first, int64_t n, float *x, int32_t *labels,
                        float *targets);
/* The same for the samples of input k >= 1 (mxu_dataset_add_input). */
void mxu_dataset_gather_input(const mxu_dataset *dataset, int k,
                              const int64_t *order, int64_t first, int64_t n,
                              float *x);

#endif
