/* strategy.h — replicas, TPUStrategy style: every replica of the plan runs
 * forward and backward on its slice of the global batch, on worker
 * threads; the gradients are summed over replicas in a fixed tree order
 * and the optimizer update is sharded over workers (and over processes
 * with MPI). Because the logical replica count, not the thread or process
 * count, fixes every reduction order and random stream, the weights are
 * the same bit for bit however the replicas are spread. Internal to
 * libmxu. */
#ifndef MXU_STRATEGY_H
#define MXU_STRATEGY_H

#include "model/model.h"

/* One step over every replica whose inputs and targets are loaded; rows
 * per replica are set with mxu_replica_set_rows. Returns the loss sum and
 * metric sum over all replicas of all processes. In training it also
 * leaves the summed gradient in model->grads (this process's shard of it
 * under MPI) and updates state such as BatchNormalization's moving
 * statistics; scale is 1 / global batch. */
mxu_step_result mxu_strategy_step(mxu_model *model, const mxu_step_key *key,
                                  float scale);

/* Applies the optimizer to the summed gradient: one more iteration,
 * sharded over workers and processes; every process ends with the same
 * weights. On pjrt the devices made the update: it becomes their state,
 * and the host reads it back when it needs it (mxu_device_sync). */
mxu_status mxu_strategy_apply(mxu_model *model);

/* Under MPI each process keeps the optimizer slots of its shard only;
 * this gathers them everywhere (before a checkpoint or at the end of fit,
 * so a saved model holds all of them). */
void mxu_strategy_sync_slots(mxu_model *model);

/* Copies node n's outputs (a model output) for the first `rows` samples
 * of the global batch into out, from every process. */
void mxu_strategy_outputs(mxu_model *model, int n, int64_t rows, float *out);

/* g[0][begin, end) = the sum over r < count of g[r][begin, end), in the
 * fixed tree: replicas r and r + s paired for s = 1, 2, 4, ..., each sum
 * into the first of the pair (the other buffers hold partial sums
 * after). */
void mxu_strategy_tree_sum(float *const *g, int count, int64_t begin,
                           int64_t end);

/* ---- between processes (MPI, or a world of one) ---------------------- */

/* recv gets every rank's `bytes` bytes, in rank order. */
void mxu_dist_allgather(const void *send, void *recv, size_t bytes);
/* send holds size blocks of `count` floats, block q for rank q; recv gets
 * rank s's block for this rank at block s. */
void mxu_dist_alltoall(const float *send, float *recv, int64_t count);
/* In place: rank p's floats are buf[displs[p] .. + counts[p]). */
void mxu_dist_allgatherv(float *buf, const int *counts, const int *displs);

#endif
