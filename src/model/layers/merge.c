/* merge.c — Keras' merge layers: Add, Subtract, Multiply, Average,
 * Maximum, Minimum over inputs of one shape (or broadcast to one),
 * Concatenate along any axis, and Dot. Data movement and one operation per
 * value: Add, squeeze-and-excitation's Multiply and Concatenate on the backend
 * (threaded: the models' hot ones), the others plain loops. */
#include "model/layers/layers.h"

#include <math.h>
#include <string.h>

static int64_t values(const mxu_layer *layer) {
  return (int64_t)layer->compiled->batch * mxu_shape_count(&layer->out_shape);
}

/* Keras' elementwise merges broadcast: inputs of one rank whose dims are
 * equal or 1 (a squeeze-and-excitation block multiplies (h, w, c) by
 * (1, 1, c)). */
static mxu_status broadcast_infer(mxu_layer *layer) {
  if (layer->config.merge.kind == MXU_MERGE_SUBTRACT && layer->input_count != 2)
    return mxu_fail(MXU_ERR_ARG, "%s: Subtract takes exactly 2 inputs, got %d",
                    layer->name, layer->input_count);
  mxu_shape out = layer->in_shapes[0];
  for (int k = 1; k < layer->input_count; k++) {
    const mxu_shape *s = &layer->in_shapes[k];
    int fits = s->rank == out.rank;
    for (int d = 0; fits && d < s->rank; d++) {
      fits = s->dims[d] == out.dims[d] || s->dims[d] == 1 || out.dims[d] == 1;
      if (s->dims[d] > out.dims[d]) out.dims[d] = s->dims[d];
    }
    if (fits) continue;
    char a[64], b[64];
    mxu_shape_format(&layer->in_shapes[0], a, sizeof a);
    mxu_shape_format(s, b, sizeof b);
    return mxu_fail(MXU_ERR_SHAPE,
                    "%s: input %d has shape %s and input 0 %s; %s takes inputs "
                    "of one shape, or of one rank with dims equal or 1",
                    layer->name, k, b, a, layer->cls->class_name);
  }
  layer->out_shape = out;
  return MXU_OK;
}

static int broadcasts(const mxu_layer *layer, int k) {
  return mxu_shape_count(&layer->in_shapes[k]) !=
         mxu_shape_count(&layer->out_shape);
}

/* A squeeze-and-excitation Multiply, (h, w, c) by (1, 1, c) in either
 * order: which input is the (1, 1, c) one, or -1. The backend scales the
 * channels in one pass, no spread copy. */
static int channel_scale(const mxu_layer *layer) {
  const mxu_shape *out = &layer->out_shape;
  if (layer->config.merge.kind != MXU_MERGE_MULTIPLY ||
      layer->input_count != 2 || out->rank != 3)
    return -1;
  for (int k = 0; k < 2; k++) {
    const mxu_shape *s = &layer->in_shapes[k];
    if (s->dims[0] == 1 && s->dims[1] == 1 && s->dims[2] == out->dims[2] &&
        !broadcasts(layer, 1 - k))
      return k;
  }
  return -1;
}

/* Input k's values spread to the output's shape (a copy each, in
 * scratch[0]), and one output-sized buffer for a gradient before it is
 * summed back to a broadcast input's shape (scratch[1]). */
static mxu_status merge_plan(mxu_layer *layer, const mxu_backend *backend,
                             int batch, mxu_arena *layout) {
  /* An Add with the relu that alone reads it fused (compile): relu's
   * backward op masks the inputs' gradients by the output. */
  if (layer->compiled->fused_layers) {
    mxu_activation_desc relu = {MXU_RELU, batch,
                                (int)mxu_shape_count(&layer->out_shape), 0};
    MXU_TRY(backend->activation_create(&relu, &layer->compiled->ops[0]));
  }
  int spread = 0;
  for (int k = 0; k < layer->input_count; k++) spread += broadcasts(layer, k);
  if (!spread || channel_scale(layer) >= 0) return MXU_OK;
  size_t bytes = (size_t)batch * (size_t)mxu_shape_count(&layer->out_shape) *
                 sizeof(float);
  layer->compiled->scratch[0] = mxu_arena_reserve(layout, bytes * spread);
  layer->compiled->scratch[1] = mxu_arena_reserve(layout, bytes);
  return MXU_OK;
}

/* Each input as output-shaped values: its own buffer, or its spread copy. */
static void merge_inputs(const mxu_layer *layer, const mxu_layer_run *run,
                         int spread_now, const float **xs) {
  float *copies = (float *)(void *)(run->arena + layer->compiled->scratch[0]);
  int64_t n = values(layer);
  for (int k = 0; k < run->input_count; k++) {
    xs[k] = run->xs[k];
    if (!broadcasts(layer, k)) continue;
    if (spread_now) {
      mxu_spread p = mxu_spread_of(&layer->in_shapes[k], &layer->out_shape);
      mxu_spread_move(&p, layer->compiled->batch, run->xs[k], copies, 1);
    }
    xs[k] = copies;
    copies += n;
  }
}

static double merge_flops(const mxu_layer *layer, const mxu_flops_step *step) {
  double n = (double)mxu_shape_count(&layer->out_shape);
  double inputs = layer->input_count;
  double backward = layer->config.merge.kind == MXU_MERGE_MULTIPLY
                        ? inputs * (inputs - 1)
                        : inputs;
  return n * (inputs - 1) + (step->need_dx ? n * backward : 0.0);
}

/* ---- elementwise ---------------------------------------------------------
 */

/* Add on the backend (threaded), the fused relu with the last input;
 * with bf16 tensors (two inputs, compile's plan_bf16_tensors) in one
 * call whose bits say which. */
static void add_forward(const mxu_layer *layer, const mxu_layer_run *run,
                        const float *const *xs) {
  int64_t n = values(layer);
  int last = run->input_count - 1, relu = layer->compiled->fused_layers > 0;
  const mxu_node_plan *p = layer->compiled;
  if (p->x_bf16 || p->y_bf16) {
    run->backend->add_bf16(n, xs[0], xs[1], p->x_bf16 | (p->y_bf16 ? 4u : 0u),
                           relu, run->y);
    return;
  }
  if (last == 0 && xs[0] != run->y)
    memcpy(run->y, xs[0], (size_t)n * sizeof(float));
  for (int k = 1; k <= last; k++)
    run->backend->add(n, k == 1 ? xs[0] : run->y, xs[k], relu && k == last,
                      run->y);
}

static int64_t pixels_of(const mxu_layer *layer) {
  return layer->out_shape.dims[0] * layer->out_shape.dims[1];
}

static void elementwise_forward(mxu_layer *layer, const mxu_layer_run *run) {
  mxu_merge_kind kind = layer->config.merge.kind;
  int64_t n = values(layer);
  int inputs = run->input_count;
  int s = channel_scale(layer);
  if (s >= 0) {
    run->backend->scale_channels(layer->compiled->batch, pixels_of(layer),
                                 (int)layer->out_shape.dims[2], run->xs[1 - s],
                                 run->xs[s], run->y);
    return;
  }
  const float *xs[MXU_MAX_INPUTS];
  merge_inputs(layer, run, 1, xs);
  if (kind == MXU_MERGE_ADD) {
    add_forward(layer, run, xs);
    return;
  }
  float *y = run->y;
  if (kind == MXU_MERGE_MULTIPLY && inputs == 2) { /* threaded, same bits */
    run->backend->multiply(n, xs[0], xs[1], y);
    return;
  }
  memcpy(y, xs[0], (size_t)n * sizeof(float));
  for (int k = 1; k < inputs; k++) {
    const float *x = xs[k];
    switch (kind) {
    case MXU_MERGE_SUBTRACT:
      for (int64_t i = 0; i < n; i++) y[i] -= x[i];
      break;
    case MXU_MERGE_MULTIPLY:
      for (int64_t i = 0; i < n; i++) y[i] *= x[i];
      break;
    case MXU_MERGE_MAXIMUM:
      for (int64_t i = 0; i < n; i++) y[i] = x[i] > y[i] ? x[i] : y[i];
      break;
    case MXU_MERGE_MINIMUM:
      for (int64_t i = 0; i < n; i++) y[i] = x[i] < y[i] ? x[i] : y[i];
      break;
    default: /* Add, Average */
      for (int64_t i = 0; i < n; i++) y[i] += x[i];
    }
  }
  if (kind == MXU_MERGE_AVERAGE)
    for (int64_t i = 0; i < n; i++) y[i] /= (float)inputs;
}

/* dst = src, n floats, on the backend's threads. */
static void copy_gradient(const mxu_backend *backend, const float *src,
                          float *dst, int64_t n) {
  if (dst != src) backend->copy_rows(1, n, src, n, dst, n);
}

/* The gradient of output-shaped input k, into dx. Maximum and Minimum:
 * the gradient goes to the first input holding the result, as
 * TensorFlow's chain of pairwise maximum(a, b) gives it (ties to a). */
static void input_gradient(mxu_merge_kind kind, const mxu_layer_run *run,
                           const float *const *xs, int k, int64_t n,
                           unsigned bf16, float *dx) {
  const float *dy = run->dy;
  switch (kind) {
  case MXU_MERGE_MAXIMUM:
  case MXU_MERGE_MINIMUM:
    for (int64_t i = 0; i < n; i++) {
      int first = 0;
      while (first + 1 < run->input_count && xs[first][i] != run->y[i]) first++;
      dx[i] = first == k ? dy[i] : 0.0f;
    }
    break;
  case MXU_MERGE_SUBTRACT:
    for (int64_t i = 0; i < n; i++) dx[i] = k ? -dy[i] : dy[i];
    break;
  case MXU_MERGE_AVERAGE:
    for (int64_t i = 0; i < n; i++) dx[i] = dy[i] / (float)run->input_count;
    break;
  case MXU_MERGE_MULTIPLY:
    if (run->input_count == 2) {
      run->backend->multiply(n, dy, xs[1 - k], dx);
      break;
    }
    memcpy(dx, dy, (size_t)n * sizeof(float));
    for (int j = 0; j < run->input_count; j++)
      if (j != k)
        for (int64_t i = 0; i < n; i++) dx[i] *= xs[j][i];
    break;
  default: /* Add; with the relu fused, dy where y > 0 */
    if (bf16)
      run->backend->add_backward_bf16(n, run->y, dy, bf16, run->ops[0] != NULL,
                                      dx);
    else if (run->ops[0])
      run->backend->activation_backward(run->ops[0], NULL, run->y, dy, dx);
    else
      copy_gradient(run->backend, dy, dx, n);
  }
}

/* A broadcast input's gradient is summed over where it was spread. */
static void elementwise_backward(mxu_layer *layer, const mxu_layer_run *run) {
  int64_t n = values(layer);
  int s = channel_scale(layer);
  if (s >= 0) {
    run->backend->scale_channels_backward(
        layer->compiled->batch, pixels_of(layer), (int)layer->out_shape.dims[2],
        run->xs[1 - s], run->xs[s], run->dy,
        run->need_dxs[1 - s] ? run->dxs[1 - s] : NULL,
        run->need_dxs[s] ? run->dxs[s] : NULL);
    return;
  }
  const float *xs[MXU_MAX_INPUTS];
  merge_inputs(layer, run, 0, xs);
  float *whole = (float *)(void *)(run->arena + layer->compiled->scratch[1]);
  /* An Add gives every output-shaped input the same gradient: the first
   * one's is copied (threaded) to the others, rather than computed (a
   * relu's mask reads y and dy) for each: ResNets' every block. */
  const float *same = NULL;
  /* bf16 tensors (an Add of two; compile's plan_bf16_tensors): each
   * input's dx computed from y's, dy's and its own types, no copy */
  const mxu_node_plan *p = layer->compiled;
  int typed = p->y_bf16 || p->dy_bf16 || p->dx_bf16;
  for (int k = 0; k < run->input_count; k++) {
    if (!run->need_dxs[k]) continue;
    int spread_k = broadcasts(layer, k);
    unsigned bf16 = (p->y_bf16 ? 1u : 0u) | (p->dy_bf16 ? 2u : 0u) |
                    (p->dx_bf16 >> k & 1 ? 4u : 0u);
    if (same && !spread_k && !typed) {
      copy_gradient(run->backend, same, run->dxs[k], n);
      continue;
    }
    input_gradient(layer->config.merge.kind, run, xs, k, n, bf16,
                   spread_k ? whole : run->dxs[k]);
    if (layer->config.merge.kind == MXU_MERGE_ADD && !spread_k)
      same = run->dxs[k];
    if (!spread_k) continue;
    mxu_spread p = mxu_spread_of(&layer->in_shapes[k], &layer->out_shape);
    mxu_spread_move(&p, layer->compiled->batch, whole, run->dxs[k], 0);
  }
}

/* ---- merges ----------------------------------------------------------------
 * Add, Subtract, Multiply, Average, Maximum, Minimum: no keys of their own;
 * Concatenate: its axis, counting the batch as Keras does. */

static const char *const merge_keys[] = {NULL};
static const char *const concatenate_keys[] = {"axis", NULL};

static mxu_status read_merge(const mxu_json_where *where, mxu_json_node *node,
                             mxu_merge_kind kind, const char *name, int axis) {
  return mxu_json_applied(where, node,
                          mxu_merge(node->model, kind, name, node->inputs,
                                    node->input_count, axis));
}

#define MERGE_READER(function, kind)                                           \
  static mxu_status function(const mxu_json_where *where, const cJSON *config, \
                             mxu_json_node *node, const char *name) {          \
    (void)config;                                                              \
    return read_merge(where, node, kind, name, -1);                            \
  }
MERGE_READER(read_add, MXU_MERGE_ADD)
MERGE_READER(read_subtract, MXU_MERGE_SUBTRACT)
MERGE_READER(read_multiply, MXU_MERGE_MULTIPLY)
MERGE_READER(read_average, MXU_MERGE_AVERAGE)
MERGE_READER(read_maximum, MXU_MERGE_MAXIMUM)
MERGE_READER(read_minimum, MXU_MERGE_MINIMUM)

static mxu_status read_concatenate(const mxu_json_where *where,
                                   const cJSON *config, mxu_json_node *node,
                                   const char *name) {
  int axis = -1;
  MXU_TRY(mxu_json_int(where, config, "axis", MXU_JSON_OPTIONAL, -MXU_MAX_RANK,
                       MXU_MAX_RANK, &axis));
  if (axis == 0)
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                         "axis 0 (the batch) is not supported");
  return read_merge(where, node, MXU_MERGE_CONCATENATE, name, axis);
}

static void write_concatenate(mxu_json_out *out, const mxu_layer *layer,
                              cJSON *config) {
  mxu_json_put_number(out, config, "axis", layer->config.merge.axis);
}

/* The inputs spread to the output's shape and folded left to right, as
 * elementwise_forward does. */
static mxu_hlo_value merge_emit(const mxu_layer *layer, mxu_emit *e) {
  static const mxu_hlo_op ops[] = {[MXU_MERGE_ADD] = MXU_HLO_ADD,
                                   [MXU_MERGE_SUBTRACT] = MXU_HLO_SUBTRACT,
                                   [MXU_MERGE_MULTIPLY] = MXU_HLO_MULTIPLY,
                                   [MXU_MERGE_AVERAGE] = MXU_HLO_ADD,
                                   [MXU_MERGE_MAXIMUM] = MXU_HLO_MAXIMUM,
                                   [MXU_MERGE_MINIMUM] = MXU_HLO_MINIMUM};
  mxu_hlo *h = e->h;
  mxu_merge_kind kind = layer->config.merge.kind;
  mxu_hlo_shape out = mxu_batch_shape(e->batch, &layer->out_shape);
  int64_t same[MXU_HLO_MAX_RANK];
  for (int d = 0; d < out.rank; d++) same[d] = d;
  mxu_hlo_value y = 0;
  for (int k = 0; k < layer->input_count; k++) {
    mxu_hlo_value x = broadcasts(layer, k)
                          ? mxu_hlo_broadcast(h, e->in[k], out, same)
                          : e->in[k];
    y = k ? mxu_hlo_binary(h, ops[kind], y, x) : x;
  }
  if (kind == MXU_MERGE_AVERAGE && layer->input_count > 1)
    y = mxu_hlo_binary(h, MXU_HLO_DIVIDE, y,
                       mxu_hlo_full_like(h, y, layer->input_count));
  return y;
}

#define MERGE_CLASS(symbol, keras_name, least, reader)                         \
  const mxu_layer_class symbol = {                                             \
      .output_mask = mxu_input_mask,                                           \
      .mask_all_or_none = 1,                                                   \
      .class_name = keras_name,                                                \
      .config_keys = merge_keys,                                               \
      .read_config = reader,                                                   \
      .write_config = mxu_write_nothing,                                       \
      .min_inputs = least,                                                     \
      .max_inputs = MXU_MAX_INPUTS,                                            \
      .infer = broadcast_infer,                                                \
      .flops = merge_flops,                                                    \
      .plan = merge_plan,                                                      \
      .forward = elementwise_forward,                                          \
      .backward = elementwise_backward,                                        \
      .emit = merge_emit,                                                      \
  }

/* Keras takes one input for these too (a merge of one is the identity),
 * except Subtract, which the shape check holds to two. */
MERGE_CLASS(mxu_add_class, "Add", 1, read_add);
MERGE_CLASS(mxu_subtract_class, "Subtract", 2, read_subtract);
MERGE_CLASS(mxu_multiply_class, "Multiply", 1, read_multiply);
MERGE_CLASS(mxu_average_class, "Average", 1, read_average);
MERGE_CLASS(mxu_maximum_class, "Maximum", 1, read_maximum);
MERGE_CLASS(mxu_minimum_class, "Minimum", 1, read_minimum);

/* ---- Concatenate ---------------------------------------------------------
 * The axis as Keras counts it (the batch is 0; negative from the end). A
 * sample's values split into `outer` runs before the axis and `inner`
 * values after it; each input contributes its slab of the axis per run. */

static int concat_axis(const mxu_layer *layer) {
  int rank = layer->in_shapes[0].rank, axis = layer->config.merge.axis;
  return axis < 0 ? rank + axis : axis - 1;
}

static mxu_status concatenate_infer(mxu_layer *layer) {
  const mxu_shape *first = &layer->in_shapes[0];
  int axis = concat_axis(layer);
  if (axis < 0 || axis >= first->rank)
    return mxu_fail(MXU_ERR_ARG,
                    "%s: axis %d is outside inputs of rank %d (with the batch "
                    "axis, %d)",
                    layer->name, layer->config.merge.axis, first->rank,
                    first->rank + 1);
  if (layer->mask_in >= 0 && axis != first->rank - 1)
    return mxu_fail(MXU_ERR_UNSUPPORTED,
                    "%s: concatenating masked steps (an Embedding's "
                    "mask_zero) along axis %d is not supported: only along "
                    "the features",
                    layer->name, layer->config.merge.axis);
  mxu_shape out = *first;
  for (int k = 1; k < layer->input_count; k++) {
    const mxu_shape *s = &layer->in_shapes[k];
    int fits = s->rank == first->rank;
    for (int d = 0; fits && d < s->rank; d++)
      fits = d == axis || s->dims[d] == first->dims[d];
    if (!fits) {
      char a[64], b[64];
      mxu_shape_format(first, a, sizeof a);
      mxu_shape_format(s, b, sizeof b);
      return mxu_fail(MXU_ERR_SHAPE,
                      "%s: input %d has shape %s, which does not match input "
                      "0's %s but along axis %d",
                      layer->name, k, b, a, layer->config.merge.axis);
    }
    out.dims[axis] += s->dims[axis];
  }
  layer->out_shape = out;
  return MXU_OK;
}

typedef struct concat_geometry {
  int64_t outer, inner;
} concat_geometry;

static concat_geometry geometry(const mxu_layer *layer) {
  const mxu_shape *s = &layer->out_shape;
  int axis = concat_axis(layer);
  concat_geometry g = {layer->compiled->batch, 1};
  for (int d = 0; d < axis; d++) g.outer *= s->dims[d];
  for (int d = axis + 1; d < s->rank; d++) g.inner *= s->dims[d];
  return g;
}

/* Copies between y's runs and input k's, on the backend (threaded): to_y
 * 1 for forward. */
static void concat_move(const mxu_layer *layer, const mxu_layer_run *run,
                        int to_y) {
  concat_geometry g = geometry(layer);
  int axis = concat_axis(layer);
  int64_t total = layer->out_shape.dims[axis] * g.inner, at = 0;
  for (int k = 0; k < layer->input_count; k++) {
    int64_t slab = layer->in_shapes[k].dims[axis] * g.inner;
    if (to_y)
      run->backend->copy_rows(g.outer, slab, run->xs[k], slab, run->y + at,
                              total);
    else if (run->need_dxs[k])
      run->backend->copy_rows(g.outer, slab, run->dy + at, total, run->dxs[k],
                              slab);
    at += slab;
  }
}

static void concatenate_forward(mxu_layer *layer, const mxu_layer_run *run) {
  concat_move(layer, run, 1);
}

static void concatenate_backward(mxu_layer *layer, const mxu_layer_run *run) {
  concat_move(layer, run, 0);
}

static mxu_hlo_value concatenate_emit(const mxu_layer *layer, mxu_emit *e) {
  mxu_hlo_value y = e->in[0];
  for (int k = 1; k < layer->input_count; k++)
    y = mxu_hlo_concatenate(e->h, y, e->in[k], concat_axis(layer) + 1);
  return y;
}

const mxu_layer_class mxu_concatenate_class = {
    .output_mask = mxu_input_mask,
    .class_name = "Concatenate",
    .config_keys = concatenate_keys,
    .read_config = read_concatenate,
    .write_config = write_concatenate,
    .min_inputs = 1,
    .max_inputs = MXU_MAX_INPUTS,
    .infer = concatenate_infer,
    .flops = mxu_no_flops, /* copies */
    .plan = mxu_no_plan,
    .forward = concatenate_forward,
    .backward = concatenate_backward,
    .emit = concatenate_emit,
};

/* ---- Dot -------------------------------------------------------------------
 * Keras' batch_dot of two inputs along axes[0] of the first and axes[1]
 * of the second (the batch is axis 0; negative from the end), each a
 * vector or a matrix a sample: every vector of the first along its axis
 * (P1 of them) dotted with every one of the second's (P2), the output
 * (P1, P2) without the dims of a vector input, (1) for two vectors.
 * normalize: each vector over the axis first divided by its L2 norm (as
 * UnitNormalization: sqrt(max(sum(x^2), 1e-12))). Plain loops: the
 * two-tower and similarity heads it serves are small. scratch[0] and [1]
 * hold the normalized inputs, [2] and [3] their norms. */

#define DOT_EPSILON 1e-12

typedef struct dot_side {
  int rank, axis;  /* per sample: 1 or 2; the contracted one */
  int64_t vectors; /* P: the vectors along the axis */
  int64_t size;    /* K: each one's length */
} dot_side;

static dot_side dot_side_of(const mxu_layer *layer, int k) {
  const mxu_shape *s = &layer->in_shapes[k];
  int axis = layer->config.dot.axes[k];
  dot_side d = {s->rank, axis < 0 ? s->rank + axis : axis - 1, 1, 0};
  if (d.axis >= 0 && d.axis < s->rank) d.size = s->dims[d.axis];
  if (s->rank == 2 && d.axis >= 0 && d.axis < 2)
    d.vectors = s->dims[1 - d.axis];
  return d;
}

/* Element k of vector p of a sample's values x. */
static int64_t dot_at(const dot_side *d, int64_t p, int64_t k) {
  return d->rank == 1 || d->axis == 1 ? p * d->size + k : k * d->vectors + p;
}

static mxu_status dot_infer(mxu_layer *layer) {
  if (layer->input_count != 2)
    return mxu_fail(MXU_ERR_ARG, "%s: Dot takes 2 inputs, got %d", layer->name,
                    layer->input_count);
  dot_side a = dot_side_of(layer, 0), b = dot_side_of(layer, 1);
  for (int k = 0; k < 2; k++) {
    const dot_side *d = k ? &b : &a;
    if (d->rank < 1 || d->rank > 2 || d->axis < 0 || d->axis >= d->rank) {
      char s[64];
      mxu_shape_format(&layer->in_shapes[k], s, sizeof s);
      return mxu_fail(MXU_ERR_UNSUPPORTED,
                      "%s: Dot's axis %d of input %d %s is not supported "
                      "(mxu takes a vector or a matrix a sample, and an axis "
                      "of it)",
                      layer->name, layer->config.dot.axes[k], k, s);
    }
  }
  if (a.size != b.size)
    return mxu_fail(MXU_ERR_SHAPE,
                    "%s: Dot's axes have %lld and %lld values; they must "
                    "match",
                    layer->name, (long long)a.size, (long long)b.size);
  int64_t dims[2];
  int rank = 0;
  if (a.rank == 2) dims[rank++] = a.vectors;
  if (b.rank == 2) dims[rank++] = b.vectors;
  if (!rank) dims[rank++] = 1;
  layer->out_shape = mxu_shape_make(rank, dims);
  return MXU_OK;
}

static mxu_status dot_plan(mxu_layer *layer, const mxu_backend *backend,
                           int batch, mxu_arena *layout) {
  (void)backend;
  if (!layer->config.dot.normalize) return MXU_OK;
  for (int k = 0; k < 2; k++) {
    dot_side d = dot_side_of(layer, k);
    layer->compiled->scratch[k] = mxu_arena_reserve(
        layout, (size_t)batch * (size_t)(d.vectors * d.size) * sizeof(float));
    layer->compiled->scratch[2 + k] = mxu_arena_reserve(
        layout, (size_t)batch * (size_t)d.vectors * sizeof(float));
  }
  return MXU_OK;
}

static float *dot_scratch(const mxu_layer *layer, const mxu_layer_run *run,
                          int i) {
  return (float *)(void *)(run->arena + layer->compiled->scratch[i]);
}

/* Input k as the product reads it: x, or x over its vectors' norms. */
static const float *dot_operand(const mxu_layer *layer,
                                const mxu_layer_run *run, int k) {
  if (!layer->config.dot.normalize) return run->xs[k];
  dot_side d = dot_side_of(layer, k);
  float *unit = dot_scratch(layer, run, k),
        *norm = dot_scratch(layer, run, 2 + k);
  int64_t per = d.vectors * d.size;
  for (int64_t n = 0; n < layer->compiled->batch; n++)
    for (int64_t p = 0; p < d.vectors; p++) {
      const float *x = run->xs[k] + n * per;
      double sum = 0.0;
      for (int64_t i = 0; i < d.size; i++)
        sum += (double)x[dot_at(&d, p, i)] * x[dot_at(&d, p, i)];
      float r = (float)sqrt(fmax(sum, DOT_EPSILON));
      norm[n * d.vectors + p] = r;
      for (int64_t i = 0; i < d.size; i++)
        unit[n * per + dot_at(&d, p, i)] = x[dot_at(&d, p, i)] / r;
    }
  return unit;
}

static void dot_forward(mxu_layer *layer, const mxu_layer_run *run) {
  dot_side a = dot_side_of(layer, 0), b = dot_side_of(layer, 1);
  const float *x = dot_operand(layer, run, 0), *z = dot_operand(layer, run, 1);
  for (int64_t n = 0; n < layer->compiled->batch; n++) {
    const float *xn = x + n * a.vectors * a.size,
                *zn = z + n * b.vectors * b.size;
    float *y = run->y + n * a.vectors * b.vectors;
    for (int64_t p = 0; p < a.vectors; p++)
      for (int64_t q = 0; q < b.vectors; q++) {
        float sum = 0.0f;
        for (int64_t i = 0; i < a.size; i++)
          sum += xn[dot_at(&a, p, i)] * zn[dot_at(&b, q, i)];
        y[p * b.vectors + q] = sum;
      }
  }
}

/* The gradient of input k from its operand's (g, in dx's place): through
 * the normalization, (g - u <u, g>) / norm where the norm is above its
 * floor, g / norm under it. */
static void dot_unnormalize(const mxu_layer *layer, const mxu_layer_run *run,
                            int k) {
  dot_side d = dot_side_of(layer, k);
  const float *unit = dot_scratch(layer, run, k);
  const float *norm = dot_scratch(layer, run, 2 + k);
  const float floor = (float)sqrt(DOT_EPSILON);
  int64_t per = d.vectors * d.size;
  for (int64_t n = 0; n < layer->compiled->batch; n++)
    for (int64_t p = 0; p < d.vectors; p++) {
      float *g = run->dxs[k] + n * per;
      const float *u = unit + n * per;
      float r = norm[n * d.vectors + p], along = 0.0f;
      if (r > floor)
        for (int64_t i = 0; i < d.size; i++)
          along += u[dot_at(&d, p, i)] * g[dot_at(&d, p, i)];
      for (int64_t i = 0; i < d.size; i++) {
        int64_t at = dot_at(&d, p, i);
        g[at] = (g[at] - u[at] * along) / r;
      }
    }
}

/* The operands forward multiplied: the inputs, or their normalized
 * copies. */
static const float *dot_operand_saved(const mxu_layer *layer,
                                      const mxu_layer_run *run, int k) {
  return layer->config.dot.normalize ? dot_scratch(layer, run, k) : run->xs[k];
}

static void dot_backward(mxu_layer *layer, const mxu_layer_run *run) {
  dot_side side[2] = {dot_side_of(layer, 0), dot_side_of(layer, 1)};
  const float *op[2] = {dot_operand_saved(layer, run, 0),
                        dot_operand_saved(layer, run, 1)};
  int64_t out = side[0].vectors * side[1].vectors;
  for (int k = 0; k < 2; k++) {
    if (!run->need_dxs[k]) continue;
    const dot_side *mine = &side[k], *other = &side[1 - k];
    int64_t per = mine->vectors * mine->size;
    for (int64_t n = 0; n < layer->compiled->batch; n++) {
      const float *dy = run->dy + n * out;
      const float *o = op[1 - k] + n * other->vectors * other->size;
      float *g = run->dxs[k] + n * per;
      for (int64_t p = 0; p < mine->vectors; p++)
        for (int64_t i = 0; i < mine->size; i++) {
          float sum = 0.0f;
          for (int64_t q = 0; q < other->vectors; q++)
            sum += (k ? dy[q * side[1].vectors + p]
                      : dy[p * side[1].vectors + q]) *
                   o[dot_at(other, q, i)];
          g[dot_at(mine, p, i)] = sum;
        }
    }
    if (layer->config.dot.normalize) dot_unnormalize(layer, run, k);
  }
}

/* Input k over its vectors' norms along the axis (dims with the batch). */
static mxu_hlo_value dot_normalized(mxu_emit *e, mxu_hlo_value x,
                                    int64_t axis) {
  mxu_hlo *h = e->h;
  const mxu_hlo_shape *s = mxu_hlo_shape_of(h, x);
  int64_t keep[MXU_HLO_MAX_RANK];
  int kept = 0;
  for (int64_t d = 0; d < s->rank; d++)
    if (d != axis) keep[kept++] = d;
  mxu_hlo_value sum =
      mxu_hlo_reduce(h, mxu_hlo_mul(h, x, x), MXU_HLO_SUM, 1, &axis);
  mxu_hlo_value norm =
      mxu_hlo_unary(h, MXU_HLO_SQRT,
                    mxu_hlo_binary(h, MXU_HLO_MAXIMUM, sum,
                                   mxu_hlo_full_like(h, sum, DOT_EPSILON)));
  return mxu_hlo_div(h, x, mxu_hlo_broadcast(h, norm, *s, keep));
}

static mxu_hlo_value dot_emit(const mxu_layer *layer, mxu_emit *e) {
  dot_side a = dot_side_of(layer, 0), b = dot_side_of(layer, 1);
  int64_t axes[2] = {a.axis + 1, b.axis + 1};
  mxu_hlo_value x[2] = {e->in[0], e->in[1]};
  for (int k = 0; k < 2 && layer->config.dot.normalize; k++)
    x[k] = dot_normalized(e, x[k], axes[k]);
  const int64_t batch = 0;
  mxu_hlo_value y =
      mxu_hlo_dot(e->h, x[0], x[1], 1, &batch, &batch, 1, &axes[0], &axes[1]);
  int64_t dims[3] = {e->batch, layer->out_shape.dims[0],
                     layer->out_shape.rank > 1 ? layer->out_shape.dims[1] : 1};
  return mxu_hlo_reshape(
      e->h, y,
      mxu_hlo_shape_make(MXU_HLO_F32, 1 + layer->out_shape.rank, dims));
}

static double dot_flops(const mxu_layer *layer, const mxu_flops_step *step) {
  dot_side a = dot_side_of(layer, 0), b = dot_side_of(layer, 1);
  return 2.0 * (double)(a.vectors * b.vectors * a.size) *
         (step->need_dx ? 3.0 : 1.0);
}

static const char *const dot_keys[] = {"axes", "normalize", NULL};

/* axes: n (both inputs) or [a, b], counting the batch as axis 0. */
static mxu_status read_dot(const mxu_json_where *where, const cJSON *config,
                           mxu_json_node *node, const char *name) {
  mxu_dot_config c = {name, {-1, -1}, 0};
  const cJSON *axes = mxu_json_get(config, "axes");
  int ok = cJSON_IsNumber(axes) ||
           (cJSON_IsArray(axes) && cJSON_GetArraySize(axes) == 2 &&
            cJSON_IsNumber(axes->child) && cJSON_IsNumber(axes->child->next));
  for (int k = 0; ok && k < 2; k++) {
    const cJSON *v = cJSON_IsNumber(axes) ? axes
                     : k                  ? axes->child->next
                                          : axes->child;
    ok = v->valuedouble == (int)v->valuedouble && fabs(v->valuedouble) < 64;
    c.axes[k] = ok ? (int)v->valuedouble : 0;
  }
  if (!ok) {
    char text[128];
    mxu_json_text(axes, text, sizeof text);
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "axes must be an integer or a list of two, got %s",
                         text);
  }
  MXU_TRY(mxu_json_bool(where, config, "normalize", &c.normalize));
  if (node->input_count != 2)
    return mxu_json_fail(where, MXU_ERR_FORMAT, "Dot takes 2 inputs, got %d",
                         node->input_count);
  return mxu_json_applied(
      where, node,
      mxu_apply_dot(node->model, &c, node->inputs[0], node->inputs[1]));
}

static void write_dot(mxu_json_out *out, const mxu_layer *layer,
                      cJSON *config) {
  const mxu_dot_config *c = &layer->config.dot;
  if (c->axes[0] == c->axes[1])
    mxu_json_put_number(out, config, "axes", c->axes[0]);
  else
    mxu_json_put(out, config, "axes", cJSON_CreateIntArray(c->axes, 2));
  mxu_json_put_bool(out, config, "normalize", c->normalize);
}

const mxu_layer_class mxu_dot_class = {
    .class_name = "Dot",
    .config_keys = dot_keys,
    .read_config = read_dot,
    .write_config = write_dot,
    .min_inputs = 2,
    .max_inputs = 2,
    .infer = dot_infer,
    .flops = dot_flops,
    .plan = dot_plan,
    .forward = dot_forward,
    .backward = dot_backward,
    .emit = dot_emit,
};
