/* prefetch.c — a producer thread filling two batch slots in turn: step s
 * goes to slot s % 2, so while the replicas train on one, the next is
 * gathered and augmented into the other. */
#include "train/prefetch.h"

#include "core/core.h"
#include "data/augment.h"

#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { SLOTS = 2 };

struct mxu_prefetch {
  const mxu_dataset *data;
  const int64_t *order;
  int64_t batch, sample;
  int first, steps;
  const mxu_augment_config *augment;
  uint64_t seed;
  uint32_t epoch;
  float *raw;             /* gathered before augmenting */
  float *x[SLOTS];        /* batch * sample floats each */
  int32_t *labels[SLOTS]; /* batch labels each */
  float *targets[SLOTS];  /* batch * target_size each, if the data has them */
  int64_t *ids;           /* the batch's sample indices, for the RNG */
  int ready[SLOTS];       /* the step a slot holds, or -1 */
  int stop;
  pthread_mutex_t lock;
  pthread_cond_t changed;
  pthread_t thread;
};

static void fill(mxu_prefetch *p, int step, int slot) {
  int64_t first = (int64_t)step * p->batch;
  float *target = p->augment ? p->raw : p->x[slot];
  mxu_dataset_gather(p->data, p->order, first, p->batch, target,
                     p->labels[slot], p->targets[slot]);
  if (!p->augment) return;
  for (int64_t k = 0; k < p->batch; k++)
    p->ids[k] = p->order ? p->order[first + k] : first + k;
  const mxu_shape *s = &p->data->shape;
  mxu_augment_batch(p->augment, p->raw, p->x[slot], p->batch, (int)s->dims[0],
                    (int)s->dims[1], (int)s->dims[2], p->seed, p->epoch,
                    p->ids);
}

static void *produce(void *arg) {
  mxu_prefetch *p = arg;
  /* One core's worth: the replicas have the others. */
  omp_set_num_threads(1);
  for (int step = p->first; step < p->steps; step++) {
    int slot = step % SLOTS;
    pthread_mutex_lock(&p->lock);
    while (p->ready[slot] >= 0 && !p->stop)
      pthread_cond_wait(&p->changed, &p->lock);
    int stop = p->stop;
    pthread_mutex_unlock(&p->lock);
    if (stop) break;
    fill(p, step, slot);
    pthread_mutex_lock(&p->lock);
    p->ready[slot] = step;
    pthread_cond_broadcast(&p->changed);
    pthread_mutex_unlock(&p->lock);
  }
  return NULL;
}

static mxu_status allocate(mxu_prefetch *p) {
  size_t x_bytes = (size_t)(p->batch * p->sample) * sizeof(float);
  for (int i = 0; i < SLOTS; i++) {
    p->x[i] = mxu_aligned_alloc(x_bytes);
    p->labels[i] = mxu_aligned_alloc((size_t)p->batch * sizeof(int32_t));
    p->ready[i] = -1;
    if (p->data->targets)
      p->targets[i] = mxu_aligned_alloc(
          (size_t)p->batch * (size_t)p->data->target_size * sizeof(float));
    if (!p->x[i] || !p->labels[i] || (p->data->targets && !p->targets[i]))
      return mxu_fail(MXU_ERR_NOMEM, "fit: no memory to prefetch batches");
  }
  if (!p->augment) return MXU_OK;
  p->raw = mxu_aligned_alloc(x_bytes);
  p->ids = malloc((size_t)p->batch * sizeof *p->ids);
  if (!p->raw || !p->ids)
    return mxu_fail(MXU_ERR_NOMEM, "fit: no memory to prefetch batches");
  return MXU_OK;
}

static void release(mxu_prefetch *p) {
  for (int i = 0; i < SLOTS; i++) {
    mxu_aligned_free(p->x[i]);
    mxu_aligned_free(p->labels[i]);
    mxu_aligned_free(p->targets[i]);
  }
  mxu_aligned_free(p->raw);
  free(p->ids);
  free(p);
}

mxu_status mxu_prefetch_start(const mxu_dataset *data, const int64_t *order,
                              int64_t batch, int first, int steps,
                              const mxu_augment_config *augment, uint64_t seed,
                              uint32_t epoch, mxu_prefetch **out) {
  mxu_prefetch *p = calloc(1, sizeof *p);
  if (!p) return mxu_fail(MXU_ERR_NOMEM, "fit: out of memory");
  p->data = data;
  p->order = order;
  p->batch = batch;
  p->sample = mxu_shape_count(&data->shape);
  p->first = first;
  p->steps = steps;
  p->augment = augment;
  p->seed = seed;
  p->epoch = epoch;
  mxu_status status = allocate(p);
  if (status != MXU_OK) {
    release(p);
    return status;
  }
  pthread_mutex_init(&p->lock, NULL);
  pthread_cond_init(&p->changed, NULL);
  int error = pthread_create(&p->thread, NULL, produce, p);
  if (error) {
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->changed);
    release(p);
    return mxu_fail(MXU_ERR_IO, "fit: cannot start the prefetch thread");
  }
  *out = p;
  return MXU_OK;
}

void mxu_prefetch_get(mxu_prefetch *p, int step, mxu_dataset *view) {
  int slot = step % SLOTS;
  pthread_mutex_lock(&p->lock);
  while (p->ready[slot] != step) pthread_cond_wait(&p->changed, &p->lock);
  pthread_mutex_unlock(&p->lock);
  memset(view, 0, sizeof *view);
  view->shape = p->data->shape;
  view->count = p->batch;
  view->num_classes = p->data->num_classes;
  view->x = p->x[slot];
  view->labels = p->labels[slot];
  view->targets = p->targets[slot];
  view->target_size = p->data->target_size;
}

void mxu_prefetch_release(mxu_prefetch *p, int step) {
  pthread_mutex_lock(&p->lock);
  p->ready[step % SLOTS] = -1;
  pthread_cond_broadcast(&p->changed);
  pthread_mutex_unlock(&p->lock);
}

void mxu_prefetch_stop(mxu_prefetch *p) {
  if (!p) return;
  pthread_mutex_lock(&p->lock);
  p->stop = 1;
  pthread_cond_broadcast(&p->changed);
  pthread_mutex_unlock(&p->lock);
  pthread_join(p->thread, NULL);
  pthread_mutex_destroy(&p->lock);
  pthread_cond_destroy(&p->changed);
  release(p);
}
