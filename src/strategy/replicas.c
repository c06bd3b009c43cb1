/* replicas.c — runs a step over the replicas on worker threads (OpenMP,
 * which is also oneDNN's runtime in Debian's build, so they share one
 * pool), sums the gradients in a fixed tree order and shards the optimizer
 * update. */
#include "strategy/strategy.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

/* Elements per unit of sharded work: a multiple of 16 floats, so every
 * shard starts on a cache line. */
#define CHUNK 16384

/* What a step does for one replica (or chunk) k, with its arguments. */
typedef struct each_job {
  mxu_model *model;
  const mxu_step_key *key;
  float scale;
  int layer, what;
  const float *const *all;
  mxu_step_result *results;
  float **grads;
} each_job;

/* fn(job, k) for k in [0, count) on the plan's workers, handed out
 * dynamically: each replica and chunk writes only its own buffers, so
 * which thread ran it changes no bit, and a worker the machine slows
 * (another process on its core) takes fewer. Fashion-MNIST's 25 slices
 * beside a busy loop at nice 0 on 2 cores: static 11,561-13,317 images/s,
 * dynamic 17,623-17,714 (the fair share is 2/3 of 26,500-29,600 alone,
 * also up from static's 21,600-25,900: slices do not all take the same
 * time). Passive waits (OMP_WAIT_POLICY) changed nothing. One worker runs
 * them in a plain loop, outside any parallel region: inside one, even of
 * a single thread, every team the kernels open (oneDNN's, the own
 * loops') is a nested team, whose threads libgomp creates and ends each
 * time. MobileNetV2 at batch 128 (one worker lending the kernels 2
 * threads) spent a quarter of its step creating threads and in the
 * kernel's futexes: 277-439 -> 1,014-1,120 images/s. */
static void on_workers(const mxu_plan *plan, int64_t count,
                       void (*fn)(const each_job *, int64_t),
                       const each_job *job) {
  if (plan->workers == 1) {
    for (int64_t k = 0; k < count; k++) fn(job, k);
    return;
  }
#pragma omp parallel for schedule(dynamic) num_threads(plan->workers)
  for (int64_t k = 0; k < count; k++) fn(job, k);
}

/* ---- denormals ------------------------------------------------------------
 * A saturated softmax (raw 0..255 pixels, late training) gives
 * probabilities below FLT_MIN, and their gradients, products and squares
 * spread subnormal floats through the backward pass and the optimizer.
 * Every arithmetic instruction on one then takes a microcode assist of
 * ~100 cycles: Fashion-MNIST's Dense(10) backward took 125 ms a step,
 * against 20 ms without them. So the kernels of a step run with flush-to-zero
 * and denormals-are-zero, as TensorFlow's CPU threads do: values below 1.2e-38
 * become 0, far under float32 rounding of anything the model computes.
 * Every thread that runs a kernel gets the same mode (each worker sets it
 * around its own work), so the results still do not depend on the thread
 * count; each thread's previous mode is restored after, since the
 * caller's may differ. */

#if defined(__SSE__)
/* MXCSR's flush-to-zero (bit 15) and denormals-are-zero (bit 6). */
#define CSR_NO_DENORMALS 0x8040u

/* Returns the mode to restore. */
static unsigned denormals_off(void) {
  unsigned previous = _mm_getcsr();
  _mm_setcsr(previous | CSR_NO_DENORMALS);
  return previous;
}

static void denormals_restore(unsigned previous) { _mm_setcsr(previous); }
#else
static unsigned denormals_off(void) { return 0; }
static void denormals_restore(unsigned previous) { (void)previous; }
#endif

/* One worker hands oneDNN all `threads` threads for its parallel kernels:
 * those run on OpenMP's pool threads, which a team of that size started
 * from this thread reaches (OpenMP reuses them in order, and a thread it
 * creates later copies its creator's mode). */
static _Thread_local unsigned pool_previous;

static void pool_denormals_off(int threads) {
  if (threads < 2) return;
#pragma omp parallel num_threads(threads)
  pool_previous = denormals_off();
}

static void pool_denormals_restore(int threads) {
  if (threads < 2) return;
#pragma omp parallel num_threads(threads)
  denormals_restore(pool_previous);
}

/* Where a layer's time goes while profiling a training step: the totals
 * of local replica 0 only (replicas do the same work, and one writer needs
 * no lock); NULL otherwise. Profiling off costs this test per step and
 * a null check around each layer. */
static double *profile_of(const mxu_model *model, const mxu_replica *replica,
                          const mxu_step_key *key) {
  if (!model->profiling) return NULL;
  return key->training && replica == &model->plan.replica[0] ? model->profile
                                                             : NULL;
}

static double profile_start(const double *profile) {
  return profile ? mxu_now_seconds() : 0.0;
}

/* slot: 2 * layer for forward, 2 * layer + 1 for backward. */
static void profile_stop(double *profile, int slot, double start) {
  if (profile) profile[slot] += mxu_now_seconds() - start;
}

static void run_replica(mxu_model *model, mxu_replica *replica,
                        const mxu_step_key *key, float scale,
                        mxu_step_result *result) {
  int n = model->layer_count;
  double *profile = profile_of(model, replica, key);
  unsigned mode = denormals_off();
  for (int i = 0; i < n; i++) {
    double start = profile_start(profile);
    mxu_replica_forward(model, replica, i, key);
    profile_stop(profile, 2 * i, start);
  }
  *result = mxu_replica_loss(model, replica, key, scale);
  for (int i = n - 1; i >= 0 && key->training; i--) {
    double start = profile_start(profile);
    mxu_replica_backward(model, replica, i, key);
    profile_stop(profile, 2 * i + 1, start);
  }
  if (key->training) mxu_replica_sum_shared(model, replica);
  denormals_restore(mode);
}

/* The order depends on the replica count only. (Block by block, each
 * g[r] read once into a stack of subtrees and only g[0] written, the sum
 * ran no faster: Fashion-MNIST's 20 slices, 0.99x.) */
void mxu_strategy_tree_sum(float *const *g, int count, int64_t begin,
                           int64_t end) {
  unsigned mode = denormals_off();
  for (int s = 1; s < count; s *= 2)
    for (int r = 0; r + s < count; r += 2 * s) {
      float *restrict a = g[r];
      const float *restrict b = g[r + s];
      for (int64_t e = begin; e < end; e++) a[e] += b[e];
    }
  denormals_restore(mode);
}

static int64_t chunk_count(int64_t values) {
  return (values + CHUNK - 1) / CHUNK;
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Process `rank`'s shard of the trainable buffer, [*begin, *end) of
 * *per values at most: equal shards on 16-float boundaries. */
static void shard(const mxu_model *model, int rank, int64_t *begin,
                  int64_t *end, int64_t *per) {
  int size = mxu_distributed_size();
  int64_t share = (model->trainable_count + size - 1) / size;
  *per = (share + 15) / 16 * 16;
  *begin = min64((int64_t)rank * *per, model->trainable_count);
  *end = min64(*begin + *per, model->trainable_count);
}

/* Every process's shard of buf, gathered into every process. */
static void gather_shards(const mxu_model *model, float *buf) {
  int size = mxu_distributed_size();
  if (size == 1) return;
  int counts[size], displs[size];
  for (int p = 0; p < size; p++) {
    int64_t begin, end, per;
    shard(model, p, &begin, &end, &per);
    counts[p] = (int)(end - begin);
    displs[p] = (int)begin;
  }
  mxu_dist_allgatherv(buf, counts, displs);
}

/* The plan's staging buffer for exchanges between processes, at least
 * `floats` long. Compile sizes it for every exchange a step makes
 * (reserve_exchange), so this never grows it; the growth is a guard. */
static float *exchange(mxu_plan *plan, size_t floats) {
  if (floats > plan->exchange_floats) {
    float *grown = realloc(plan->exchange, floats * sizeof(float));
    if (!grown) {
      mxu_fail(MXU_ERR_NOMEM, "strategy: out of memory for an exchange");
      mxu_distributed_abort(1);
    }
    plan->exchange = grown;
    plan->exchange_floats = floats;
  }
  return plan->exchange;
}

/* Under MPI: every process sends each other process its replicas' values
 * of that process's shard, then sums all replicas of its own shard in the
 * same tree as one process would. */
static void reduce_across_processes(mxu_model *model) {
  mxu_plan *plan = &model->plan;
  int size = mxu_distributed_size(), local = plan->local_count;
  int64_t begin, end, per;
  shard(model, mxu_distributed_rank(), &begin, &end, &per);
  int64_t block = (int64_t)local * per;
  float *send = exchange(plan, 2 * (size_t)(size * block));
  float *recv = send + size * block;
  for (int q = 0; q < size; q++) {
    int64_t first, last, unused;
    shard(model, q, &first, &last, &unused);
    for (int l = 0; l < local; l++) {
      float *to = send + q * block + l * per;
      memcpy(to, plan->replica[l].grads + first,
             (size_t)(last - first) * sizeof(float));
      /* The last shard may be short: its tail sums zeros, unused. */
      memset(to + (last - first), 0, (size_t)(per - (last - first)) * 4);
    }
  }
  mxu_dist_alltoall(send, recv, block);
  float *g[plan->replicas];
  for (int r = 0; r < plan->replicas; r++) g[r] = recv + (int64_t)r * per;
  mxu_strategy_tree_sum(g, plan->replicas, 0, end - begin);
  memcpy(model->grads + begin, g[0], (size_t)(end - begin) * sizeof(float));
}

/* Pointers to every replica's `floats` values at arena offset `offset`, in
 * logical order: into the local arenas, or under MPI into the exchange
 * buffer (valid until the next exchange). */
static void gather_values(mxu_model *model, size_t offset, int64_t floats,
                          const float **all) {
  mxu_plan *plan = &model->plan;
  if (mxu_distributed_size() == 1) {
    for (int r = 0; r < plan->replicas; r++)
      all[r] = mxu_replica_floats(&plan->replica[r], offset);
    return;
  }
  size_t bytes = (size_t)floats * sizeof(float);
  float *local = exchange(
      plan, (size_t)floats * (size_t)(plan->local_count + plan->replicas));
  float *gathered = local + floats * plan->local_count;
  for (int r = 0; r < plan->local_count; r++)
    memcpy(local + r * floats, mxu_replica_floats(&plan->replica[r], offset),
           bytes);
  mxu_dist_allgather(local, gathered, bytes * (size_t)plan->local_count);
  for (int r = 0; r < plan->replicas; r++) all[r] = gathered + r * floats;
}

/* BatchNormalization and the like: every replica's statistics, in logical
 * order, folded into the layer's state. */
static void update_state(mxu_model *model) {
  mxu_plan *plan = &model->plan;
  const float *stats[plan->replicas];
  for (int i = 0; i < model->layer_count; i++) {
    mxu_layer *layer = &model->layers[i];
    if (!layer->cls->update_state) continue;
    gather_values(model, layer->compiled->stats_offset,
                  layer->cls->stats_floats(layer), stats);
    float *w[MXU_MAX_LAYER_PARAMS];
    for (int k = 0; k < layer->param_count; k++) {
      const mxu_param *p = &model->params[layer->param_first + k];
      w[k] = (p->trainable ? model->weights : model->state) + p->offset;
    }
    layer->cls->update_state(layer, stats, plan->replicas, w);
  }
}

/* ---- layer by layer, for synchronized layers ---------------------------
 * Every replica finishes a layer before any starts the next, so a layer
 * can exchange values with the other replicas between its two halves. */

typedef enum phase {
  FORWARD,
  FORWARD_LOCAL,
  FORWARD_GLOBAL,
  BACKWARD,
  BACKWARD_LOCAL,
  BACKWARD_GLOBAL
} phase;

static void run_layer(mxu_layer *layer, const mxu_layer_run *run, phase what,
                      const float *const *all, int replicas) {
  switch (what) {
  case FORWARD: layer->cls->forward(layer, run); break;
  case FORWARD_LOCAL: layer->cls->forward_local(layer, run); break;
  case FORWARD_GLOBAL:
    layer->cls->forward_global(layer, run, all, replicas);
    break;
  case BACKWARD: layer->cls->backward(layer, run); break;
  case BACKWARD_LOCAL: layer->cls->backward_local(layer, run); break;
  case BACKWARD_GLOBAL:
    layer->cls->backward_global(layer, run, all, replicas);
    break;
  }
}

static void phase_replica(const each_job *job, int64_t r) {
  mxu_model *model = job->model;
  mxu_layer *layer = &model->layers[job->layer];
  mxu_replica *replica = &model->plan.replica[r];
  double *profile = profile_of(model, replica, job->key);
  double start = profile_start(profile);
  unsigned mode = denormals_off();
  mxu_layer_run run = mxu_replica_run(model, replica, job->layer, job->key);
  run_layer(layer, &run, (phase)job->what, job->all, model->plan.replicas);
  if (job->what == BACKWARD || job->what == BACKWARD_GLOBAL)
    mxu_replica_add_partials(model, replica, layer, &run);
  denormals_restore(mode);
  profile_stop(profile, 2 * job->layer + (job->what >= BACKWARD), start);
}

/* One part of layer i on every replica; the *_GLOBAL parts get every
 * replica's shared values in all. */
static void run_phase(mxu_model *model, int i, phase what,
                      const mxu_step_key *key, const float *const *all) {
  if (model->layers[i].compiled->absorbed) return;
  each_job job = {
      .model = model, .key = key, .layer = i, .what = what, .all = all};
  on_workers(&model->plan, model->plan.local_count, phase_replica, &job);
}

/* A synchronized layer: its local half, the exchange, its global half. */
static void run_split(mxu_model *model, int i, int backward,
                      const mxu_step_key *key) {
  mxu_layer *layer = &model->layers[i];
  run_phase(model, i, backward ? BACKWARD_LOCAL : FORWARD_LOCAL, key, NULL);
  const float *all[model->plan.replicas];
  gather_values(model, layer->compiled->sync_offset,
                layer->cls->sync_floats(layer), all);
  run_phase(model, i, backward ? BACKWARD_GLOBAL : FORWARD_GLOBAL, key, all);
}

static int synchronized(const mxu_layer *layer) {
  return layer->cls->sync_floats && layer->cls->sync_floats(layer) > 0;
}

static int any_synchronized(const mxu_model *model) {
  for (int i = 0; i < model->layer_count; i++)
    if (synchronized(&model->layers[i])) return 1;
  return 0;
}

static void loss_replica(const each_job *job, int64_t r) {
  unsigned mode = denormals_off();
  job->results[r] = mxu_replica_loss(job->model, &job->model->plan.replica[r],
                                     job->key, job->scale);
  denormals_restore(mode);
}

static void step_replica(const each_job *job, int64_t r) {
  run_replica(job->model, &job->model->plan.replica[r], job->key, job->scale,
              &job->results[r]);
}

/* Chunk c of the gradients, summed over the local replicas into the
 * first's. */
static void sum_chunk(const each_job *job, int64_t c) {
  int64_t count = job->model->trainable_count;
  mxu_strategy_tree_sum(job->grads, job->model->plan.local_count, c * CHUNK,
                        min64((c + 1) * CHUNK, count));
}

static void run_synchronized(mxu_model *model, const mxu_step_key *key,
                             float scale, mxu_step_result *results) {
  mxu_plan *plan = &model->plan;
  int n = model->layer_count;
  for (int i = 0; i < n; i++) {
    if (synchronized(&model->layers[i]))
      run_split(model, i, 0, key);
    else
      run_phase(model, i, FORWARD, key, NULL);
  }
  each_job job = {
      .model = model, .key = key, .scale = scale, .results = results};
  on_workers(plan, plan->local_count, loss_replica, &job);
  for (int i = n - 1; i >= 0; i--) {
    if (synchronized(&model->layers[i]))
      run_split(model, i, 1, key);
    else
      run_phase(model, i, BACKWARD, key, NULL);
  }
  for (int r = 0; r < plan->local_count; r++)
    mxu_replica_sum_shared(model, &plan->replica[r]);
}

/* Loss and metric sums of every replica, added in logical order so
 * the printed loss does not depend on the process count either. */
static mxu_step_result combine(const mxu_plan *plan,
                               const mxu_step_result *local) {
  mxu_step_result *all = plan->results, total = {0};
  mxu_dist_allgather(local, all, (size_t)plan->local_count * sizeof *local);
  for (int r = 0; r < plan->replicas; r++) mxu_step_result_add(&total, &all[r]);
  return total;
}

/* The metrics' tallies of every replica's batch: each local replica's
 * (from its heads' buffers), gathered from every process, summed into
 * plan->tallies in logical order. */
static void sum_tallies(mxu_model *model) {
  mxu_plan *plan = &model->plan;
  if (!plan->tally_values) return;
  size_t values = (size_t)plan->tally_values;
  float *all = plan->tally_stage,
        *local = all + (size_t)plan->replicas * values;
  for (int r = 0; r < plan->local_count; r++)
    for (int h = 0; h < model->head_count; h++) {
      const mxu_head_plan *hp = &plan->head[h];
      if (hp->tally_values)
        memcpy(local + r * values + (size_t)hp->tally_first,
               mxu_replica_floats(&plan->replica[r], hp->tallies),
               (size_t)hp->tally_values * sizeof(float));
    }
  mxu_dist_allgather(local, all,
                     (size_t)plan->local_count * values * sizeof(float));
  memset(plan->tallies, 0, values * sizeof *plan->tallies);
  for (int r = 0; r < plan->replicas; r++)
    for (size_t v = 0; v < values; v++) plan->tallies[v] += all[r * values + v];
}

mxu_step_result mxu_strategy_step(mxu_model *model, const mxu_step_key *key,
                                  float scale) {
  mxu_plan *plan = &model->plan;
  int local = plan->local_count;
  int single = mxu_distributed_size() == 1;
  plan->scale = scale; /* the activity gradients' (step.c) */
  mxu_step_result *results = plan->results + plan->replicas;
  float *grads[local];
  for (int r = 0; r < local; r++) grads[r] = plan->replica[r].grads;
  int64_t chunks = chunk_count(model->trainable_count);
  omp_set_num_threads(plan->intra_threads);
  /* The master's own work between the parallel regions (BatchNorm's
   * moving statistics) runs in the same mode as the workers'. */
  unsigned mode = denormals_off();
  pool_denormals_off(plan->intra_threads);
  each_job job = {.model = model,
                  .key = key,
                  .scale = scale,
                  .results = results,
                  .grads = grads};
  if (key->training && any_synchronized(model))
    run_synchronized(model, key, scale, results);
  else
    on_workers(plan, local, step_replica, &job);
  if (key->training) {
    if (!single)
      reduce_across_processes(model);
    else if (local > 1)
      on_workers(plan, chunks, sum_chunk, &job);
    update_state(model);
    if (model->profiling) model->profile_steps++;
  }
  pool_denormals_restore(plan->intra_threads);
  denormals_restore(mode);
  sum_tallies(model);
  return combine(plan, results);
}

/* Threads for elementwise work over the weights: any split gives the same
 * values. */
static int all_threads(const mxu_plan *plan) {
  return plan->workers * plan->intra_threads;
}

mxu_status mxu_strategy_apply(mxu_model *model) {
  if (model->device) return mxu_device_apply(model);
  int64_t begin, end, per;
  shard(model, mxu_distributed_rank(), &begin, &end, &per);
  int64_t chunks = chunk_count(end - begin);
  int threads = all_threads(&model->plan);
  mxu_optimizer_begin_step(model);
#pragma omp parallel for schedule(dynamic) num_threads(threads) if (threads > 1)
  for (int64_t c = 0; c < chunks; c++) {
    unsigned mode = denormals_off();
    mxu_optimizer_apply_range(model, begin + c * CHUNK,
                              min64(begin + (c + 1) * CHUNK, end));
    denormals_restore(mode);
  }
  gather_shards(model, model->weights);
  /* Whole weights, the same in every process. */
  mxu_apply_constraints(model);
  return MXU_OK;
}

void mxu_strategy_sync_slots(mxu_model *model) {
  mxu_slot_spec spec = mxu_optimizer_slots(&model->compile.optimizer);
  for (int k = 0; k < MXU_SLOTS; k++)
    if (spec.keras3[k] || spec.keras2[k])
      gather_shards(model, mxu_slot_buffer(model, k));
  if (spec.average) gather_shards(model, model->average);
}

void mxu_strategy_outputs(mxu_model *model, int n, int64_t rows, float *out) {
  mxu_plan *plan = &model->plan;
  int64_t classes = mxu_shape_count(&model->layers[n].out_shape);
  const float *all[plan->replicas];
  gather_values(model, plan->act[n], plan->batch * classes, all);
  /* Replica r holds rows r * batch .. of the global batch. */
  for (int r = 0; r < plan->replicas && rows > 0; r++) {
    int64_t own = min64(rows, plan->batch);
    memcpy(out, all[r], (size_t)(own * classes) * sizeof(float));
    out += own * classes;
    rows -= own;
  }
}
