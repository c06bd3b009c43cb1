/* step.c — the pieces of one step on one replica: a layer's forward or
 * backward, the loss (fused with a final softmax, as Keras does), and the
 * optimizer update over a range of the one trainable buffer. strategy/
 * runs them over every replica. */
#include "model/model.h"

#include <math.h>
#include <string.h>

/* The mask node `holder` holds in this replica: an Embedding's ids (its
 * output), or what a Masking computed (computes_mask); 0 is masked. */
static const float *mask_values(const mxu_model *model,
                                const mxu_replica *replica, int holder) {
  const mxu_layer *h = &model->layers[holder];
  return mxu_replica_floats(replica, h->cls->computes_mask
                                         ? h->compiled->scratch[0]
                                         : model->plan.act[holder]);
}

mxu_layer_run mxu_replica_run(mxu_model *model, mxu_replica *replica, int i,
                              const mxu_step_key *key) {
  mxu_plan *plan = &model->plan;
  mxu_layer *layer = &model->layers[i];
  mxu_layer_run run = {0};
  run.backend = model->backend;
  run.training = key->training;
  run.input_count = layer->input_count;
  const mxu_edge *edges = &plan->edges[i * MXU_MAX_INPUTS];
  for (int k = 0; k < layer->input_count; k++) {
    run.xs[k] = mxu_replica_floats(replica, plan->act[layer->inputs[k]]);
    run.dxs[k] = mxu_replica_floats(replica, edges[k].dx);
    run.need_dxs[k] = edges[k].need_dx;
  }
  if (layer->cls->uses_mask && layer->mask_in >= 0)
    run.mask_ids = mask_values(model, replica, layer->mask_in);
  run.x = run.xs[0];
  run.dx = run.dxs[0];
  run.need_dx = run.need_dxs[0];
  int last = mxu_layer_writes(layer);
  run.y = mxu_replica_floats(replica, plan->act[last]);
  run.dy = mxu_replica_floats(replica, plan->grad[last]);
  run.arena = replica->arena.base;
  run.ops = &replica->ops[i * MXU_MAX_LAYER_OPS];
  int64_t shadow = layer->shadow_first;
  for (int k = 0; k < layer->param_count; k++) {
    const mxu_param *p = &model->params[layer->param_first + k];
    run.w[k] = mxu_param_values(model, p);
    run.dw[k] = !p->trainable              ? NULL
                : mxu_layer_is_call(layer) ? replica->grads + shadow
                                           : replica->grads + p->offset;
    if (p->trainable && mxu_layer_is_call(layer))
      shadow += (p->count + 15) / 16 * 16;
  }
  /* An absorbed layer's weights after (compile fuses none that is a
   * shared layer's call). */
  int k = layer->param_count;
  for (int f = 0; f < layer->compiled->fused_layers; f++) {
    const mxu_layer *absorbed = layer->compiled->fused[f];
    for (int a = 0; a < absorbed->param_count; a++, k++) {
      const mxu_param *p = &model->params[absorbed->param_first + a];
      run.w[k] = mxu_param_values(model, p);
      run.dw[k] = p->trainable ? replica->grads + p->offset : NULL;
    }
  }
  /* Replica 0's streams are those of a model without replicas; a
   * logical replica's slices share its stream at their row offsets. */
  uint32_t logical = (uint32_t)(replica->index / plan->split);
  uint32_t id = (uint32_t)layer->key | logical << 16;
  run.row_offset = (int64_t)(replica->index % plan->split) * plan->batch;
  run.rng =
      mxu_rng_make(key->seed, MXU_STREAM_DROPOUT, key->epoch, key->step, id);
  for (int h = 0; h < model->head_count; h++)
    if (plan->head[h].fused_softmax && model->heads[h].node == last)
      run.fused_softmax = 1;
  return run;
}

void mxu_replica_forward(mxu_model *model, mxu_replica *replica, int layer,
                         const mxu_step_key *key) {
  if (model->layers[layer].compiled->absorbed) return;
  mxu_layer_run run = mxu_replica_run(model, replica, layer, key);
  model->layers[layer].cls->forward(&model->layers[layer], &run);
}

void mxu_replica_add_partials(mxu_model *model, mxu_replica *replica,
                              const mxu_layer *layer,
                              const mxu_layer_run *run) {
  const mxu_edge *edges = &model->plan.edges[layer->index * MXU_MAX_INPUTS];
  for (int k = 0; k < layer->input_count; k++) {
    if (!edges[k].partial || !run->need_dxs[k]) continue;
    int t = layer->inputs[k];
    int64_t count = (int64_t)model->plan.batch *
                    mxu_shape_count(&model->layers[t].out_shape);
    float *grad = mxu_replica_floats(replica, model->plan.grad[t]);
    if (layer->compiled->dx_bf16 >> k & 1) /* bf16 both (plan_bf16_tensors) */
      model->backend->add_bf16(count, grad, run->dxs[k], 7, 0, grad);
    else
      model->backend->add(count, grad, run->dxs[k], 0, grad);
  }
}

void mxu_replica_sum_shared(mxu_model *model, mxu_replica *replica) {
  if (!model->shadow_count) return;
  for (int i = 0; i < model->layer_count; i++) {
    const mxu_layer *layer = &model->layers[i];
    if (!mxu_layer_is_call(layer)) continue;
    const float *shadow = replica->grads + layer->shadow_first;
    for (int k = 0; k < layer->param_count; k++) {
      const mxu_param *p = &model->params[layer->param_first + k];
      if (!p->trainable) continue;
      float *restrict grad = replica->grads + p->offset;
#pragma omp simd
      for (int64_t e = 0; e < p->count; e++) grad[e] += shadow[e];
      shadow += (p->count + 15) / 16 * 16;
    }
  }
}

/* A node's activity penalty over this replica's valid rows (grad NULL),
 * or its gradient, scale (l1 sign(y) + 2 l2 y), added to grad. */
static double activity(const mxu_model *model, const mxu_replica *replica,
                       const mxu_layer *node, float scale, float *grad) {
  const mxu_plan *plan = &model->plan;
  int64_t per = mxu_shape_count(&node->out_shape);
  const float *y = mxu_replica_floats(replica, plan->act[node->index]);
  const float *mask = mxu_replica_floats(replica, plan->mask);
  float l1 = node->activity.l1, l2 = node->activity.l2;
  double sum = 0.0;
  for (int64_t r = 0; r < plan->batch; r++) {
    if (mask[r] == 0.0f) continue;
    for (int64_t i = r * per; i < (r + 1) * per; i++) {
      if (grad)
        grad[i] +=
            scale * (l1 * (float)((y[i] > 0) - (y[i] < 0)) + 2.0f * l2 * y[i]);
      else
        sum += l1 * fabs((double)y[i]) + l2 * (double)y[i] * y[i];
    }
  }
  return sum;
}

void mxu_replica_backward(mxu_model *model, mxu_replica *replica, int layer,
                          const mxu_step_key *key) {
  mxu_layer *node = &model->layers[layer];
  if (node->compiled->absorbed) return;
  if (mxu_has_activity(node))
    activity(model, replica, node, model->plan.scale,
             mxu_replica_floats(replica, model->plan.grad[layer]));
  mxu_layer_run run = mxu_replica_run(model, replica, layer, key);
  node->cls->backward(node, &run);
  mxu_replica_add_partials(model, replica, node, &run);
}

void mxu_replica_set_rows(mxu_model *model, mxu_replica *replica,
                          int64_t rows) {
  float *mask = mxu_replica_floats(replica, model->plan.mask);
  for (int64_t r = 0; r < model->plan.batch; r++)
    mask[r] = r < rows ? 1.0f : 0.0f;
}

/* The mask of each row head h scores: each sample's, repeated over its
 * positions, and 0 at a position a padding mask masks (the head's
 * loss_mask: an Embedding's ids, or a Masking's 1 and 0). */
static const float *row_mask(const mxu_model *model, mxu_replica *replica,
                             int h) {
  const mxu_plan *plan = &model->plan;
  const mxu_head_plan *hp = &plan->head[h];
  int64_t positions = mxu_loss_positions(model, h);
  const float *mask = mxu_replica_floats(replica, plan->mask);
  if (positions == 1) return mask;
  const float *padding =
      hp->loss_mask >= 0 ? mask_values(model, replica, hp->loss_mask) : NULL;
  float *rows = mxu_replica_floats(replica, hp->row_mask);
  for (int64_t r = 0; r < plan->batch * positions; r++)
    rows[r] = mask[r / positions] * (padding && padding[r] == 0.0f ? 0 : 1);
  return rows;
}

/* The rows head h's loss scores: the scored rows but, under
 * ignore_class, those whose label is that class. */
static const float *loss_rows(const mxu_model *model, mxu_replica *replica,
                              int h, const float *scored) {
  const mxu_output_loss *spec = &model->heads[h].spec;
  const mxu_head_plan *hp = &model->plan.head[h];
  if (!spec->has_ignore_class) return scored;
  const int32_t *labels =
      (const int32_t *)(const void *)mxu_replica_floats(replica, hp->labels);
  float *rows = mxu_replica_floats(replica, hp->loss_rows);
  int64_t count = model->plan.batch * mxu_loss_positions(model, h);
  for (int64_t r = 0; r < count; r++)
    rows[r] = labels[r] == spec->ignore_class ? 0.0f : scored[r];
  return rows;
}

/* Each kept row's weight in its sample's loss: 1 / positions, or where
 * the loss keeps rows (a padding mask, ignore_class) the logical replica's
 * samples over its kept rows. */
static double row_weight(const mxu_model *model, const mxu_replica *replica,
                         int h) {
  if (!mxu_loss_keeps_rows(model, h))
    return 1.0 / (double)mxu_loss_positions(model, h);
  return model->plan.head[h].mask_factor[replica - model->plan.replica];
}

/* The softmax cross-entropies, on the backend: fused with a final softmax
 * (reading its logits), from logits, or on probabilities; over a
 * sequence's rows (positions), each 1 / positions of its sample's. */
static void softmax_loss(mxu_model *model, mxu_replica *replica,
                         const mxu_step_key *key, float scale, int h,
                         const float *mask) {
  const mxu_head *head = &model->heads[h];
  const mxu_head_plan *hp = &model->plan.head[h];
  int n = head->node;
  const mxu_layer *last = &model->layers[n];
  int classes = (int)last->out_shape.dims[last->out_shape.rank - 1];
  int64_t rows = model->plan.batch * mxu_loss_positions(model, h);
  const int32_t *labels =
      (const int32_t *)(const void *)mxu_replica_floats(replica, hp->labels);
  const float *onehot = NULL;
  if (head->spec.loss == MXU_CATEGORICAL_CROSSENTROPY) {
    onehot = mxu_replica_floats(replica, hp->targets);
    if (head->spec.label_smoothing > 0.0f) {
      float *smoothed = mxu_replica_floats(replica, hp->smoothed);
      mxu_smooth_targets(rows, classes, head->spec.label_smoothing, onehot,
                         smoothed);
      onehot = smoothed;
    }
  }
  float *loss = mxu_replica_floats(replica, hp->loss);
  float *grad = mxu_replica_floats(replica, model->plan.grad[n]);
  const float *out = mxu_replica_floats(replica, model->plan.act[n]);
  if (hp->fused_softmax || head->spec.from_logits) {
    mxu_layer_run last_run = mxu_replica_run(model, replica, n, key);
    const float *logits =
        hp->fused_softmax ? last->cls->logits(last, &last_run) : out;
    model->backend->softmax_cross_entropy(
        rows, classes, logits, onehot ? NULL : labels, onehot, mask, scale,
        mxu_replica_floats(replica, hp->probs), loss, grad);
  } else {
    model->backend->cross_entropy(rows, classes, out, onehot ? NULL : labels,
                                  onehot, mask, scale, loss, grad);
  }
}

/* Each sample's rows of head h's loss and of its output's gradient (its
 * logits' where the softmax is fused: the same layout) times the sample's
 * weight (plan.weight). */
static void weigh_rows(mxu_model *model, mxu_replica *replica, int h,
                       int64_t positions, float *loss) {
  const mxu_plan *plan = &model->plan;
  int node = model->heads[h].node;
  const float *w = mxu_replica_floats(replica, plan->weight);
  float *grad = mxu_replica_floats(replica, plan->grad[node]);
  int64_t rows = plan->batch * positions;
  int64_t k = mxu_shape_count(&model->layers[node].out_shape) / positions;
  for (int64_t r = 0; r < rows; r++) {
    float weight = w[r / positions];
    loss[r] *= weight;
    for (int64_t i = r * k; i < (r + 1) * k; i++) grad[i] *= weight;
  }
}

/* The mask a weighted metric of head h counts rows by: each scored row's
 * mask times its sample's weight (plan.weight); the mask itself where no
 * weights were given. */
static const float *weighted_mask(const mxu_model *model, mxu_replica *replica,
                                  int h, const float *scored,
                                  int64_t positions) {
  const mxu_plan *plan = &model->plan;
  if (!plan->weighted || !mxu_head_weighs_metrics(&model->heads[h]))
    return scored;
  const float *w = mxu_replica_floats(replica, plan->weight);
  float *out = mxu_replica_floats(replica, plan->head[h].weighted_mask);
  for (int64_t r = 0; r < plan->batch * positions; r++)
    out[r] = scored[r] * w[r / positions];
  return out;
}

/* Head h's loss and metric sums, and in training its output's gradient
 * (of its loss * weight * scale). */
static mxu_head_sums head_loss(mxu_model *model, mxu_replica *replica,
                               const mxu_step_key *key, float scale, int h) {
  const mxu_plan *plan = &model->plan;
  const mxu_head *head = &model->heads[h];
  const mxu_head_plan *hp = &plan->head[h];
  const mxu_shape *shape = &model->layers[head->node].out_shape;
  int64_t rows = plan->batch, values = mxu_shape_count(shape);
  /* A sequence's positions' losses and metrics, meaned per sample (over
   * the unmasked ones under a padding mask); under a padding mask each
   * position is a row of its own. */
  int64_t positions = mxu_loss_positions(model, h);
  const float *scored = row_mask(model, replica, h);
  const float *kept = loss_rows(model, replica, h, scored);
  double weight = row_weight(model, replica, h);
  float row_scale = scale * head->spec.weight * (float)weight;
  const float *targets = mxu_replica_floats(replica, hp->targets);
  const float *out = mxu_replica_floats(replica, plan->act[head->node]);
  const float *loss = mxu_replica_floats(replica, hp->loss);
  if (mxu_loss_is_softmax(head->spec.loss)) {
    softmax_loss(model, replica, key, row_scale, h, kept);
  } else {
    mxu_loss_spec spec = {head->spec, values / positions,
                          shape->dims[shape->rank - 1]};
    mxu_target_loss(&spec, rows * positions, out, targets, kept, row_scale,
                    mxu_replica_floats(replica, hp->loss),
                    mxu_replica_floats(replica, plan->grad[head->node]));
  }
  if (plan->weighted)
    weigh_rows(model, replica, h, positions,
               mxu_replica_floats(replica, hp->loss));
  mxu_head_sums sums = {0};
  for (int64_t r = 0; r < rows * positions; r++) {
    sums.loss += loss[r];
    sums.count += scored[r];
  }
  sums.loss *= weight;
  sums.count /= (double)positions;
  const int32_t *labels =
      (const int32_t *)(const void *)mxu_replica_floats(replica, hp->labels);
  float *tallies = mxu_replica_floats(replica, hp->tallies);
  if (hp->tally_values)
    memset(tallies, 0, (size_t)hp->tally_values * sizeof *tallies);
  const float *weighted = weighted_mask(model, replica, h, scored, positions);
  for (int m = 0; m < head->metric_count; m++) {
    const float *mask = head->metric_weighted[m] ? weighted : scored;
    if (head->tally[m] >= 0) {
      mxu_metric_tally(head->metric_kind[m], &head->metric_options[m],
                       rows * positions, values / positions, out, labels,
                       targets, mask,
                       tallies + head->tally[m] - hp->tally_first);
      continue;
    }
    mxu_metric_kind kind = head->metric_kind[m];
    sums.metric[m] = mxu_metric_sum(kind, &head->metric_options[m],
                                    rows * positions, values / positions, out,
                                    labels, targets, mask, &sums.divisor[m]);
    /* The mean metrics mean a sample's positions first, as its loss. */
    if (mxu_metric_is_mean(kind)) {
      sums.metric[m] /= (double)positions;
      sums.divisor[m] =
          mask == scored ? sums.count : sums.divisor[m] / (double)positions;
    }
  }
  return sums;
}

void mxu_step_result_add(mxu_step_result *total, const mxu_step_result *r) {
  total->loss_sum += r->loss_sum;
  for (int h = 0; h < MXU_MAX_OUTPUTS; h++) {
    mxu_head_sums *t = &total->heads[h];
    const mxu_head_sums *s = &r->heads[h];
    t->loss += s->loss;
    t->count += s->count;
    for (int m = 0; m < MXU_MAX_METRICS; m++) {
      t->metric[m] += s->metric[m];
      t->divisor[m] += s->divisor[m];
    }
  }
}

mxu_step_result mxu_replica_loss(mxu_model *model, mxu_replica *replica,
                                 const mxu_step_key *key, float scale) {
  mxu_step_result result = {0};
  for (int h = 0; h < model->head_count; h++) {
    result.heads[h] = head_loss(model, replica, key, scale, h);
    result.loss_sum += model->heads[h].spec.weight * result.heads[h].loss;
  }
  for (int i = 0; i < model->layer_count; i++)
    if (mxu_has_activity(&model->layers[i]))
      result.loss_sum += activity(model, replica, &model->layers[i], 0, NULL);
  return result;
}
