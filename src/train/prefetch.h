/* prefetch.h — the batches of an epoch gathered and augmented on their
 * own thread, one step ahead of training, so the step never waits for the
 * data pipeline. Internal to libmxu. */
#ifndef MXU_TRAIN_PREFETCH_H
#define MXU_TRAIN_PREFETCH_H

#include "data/data.h"

typedef struct mxu_prefetch mxu_prefetch;

/* Starts producing steps first .. steps-1 of an epoch: samples
 * order[step * batch ...] (order NULL: in data order), augmented with
 * (seed, epoch, sample index) when augment is set. */
mxu_status mxu_prefetch_start(const mxu_dataset *data, const int64_t *order,
                              int64_t batch, int first, int steps,
                              const mxu_augment_config *augment, uint64_t seed,
                              uint32_t epoch, mxu_prefetch **out);
/* Waits for step's batch and describes it as a data set of `batch`
 * samples, valid until mxu_prefetch_release(step). */
void mxu_prefetch_get(mxu_prefetch *prefetch, int step, mxu_dataset *view);
void mxu_prefetch_release(mxu_prefetch *prefetch, int step);
/* Stops the thread (early when training stops) and frees everything. */
void mxu_prefetch_stop(mxu_prefetch *prefetch);

#endif
