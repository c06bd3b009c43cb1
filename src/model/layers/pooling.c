/* pooling.c — MaxPooling2D and AveragePooling2D (pool size, strides,
 * valid/same; average over in-bounds pixels as Keras does), and their 1-D
 * kinds over (steps, channels), run as 1 x n pools of (1, steps,
 * channels). */
#include "model/layers/layers.h"

static mxu_status pool2d_infer(mxu_layer *layer) {
  const mxu_pool2d_config *c = &layer->config.pool;
  mxu_shape image = mxu_image_shape(layer, &layer->in_shape);
  int channels = image.rank == 3 ? (int)image.dims[2] : 0;
  return mxu_window_infer(layer, "pool", c->pool_size, c->strides, c->padding,
                          0, channels);
}

mxu_pool2d_desc mxu_pool2d_describe(const mxu_layer *layer, int batch) {
  const mxu_pool2d_config *c = &layer->config.pool;
  mxu_shape in = mxu_image_shape(layer, &layer->in_shape);
  mxu_shape out = mxu_image_shape(layer, &layer->out_shape);
  mxu_pool2d_desc d = {0};
  d.n = batch;
  d.in_h = (int)in.dims[0];
  d.in_w = (int)in.dims[1];
  d.c = (int)in.dims[2];
  d.out_h = (int)out.dims[0];
  d.out_w = (int)out.dims[1];
  d.pool_h = c->pool_size[0];
  d.pool_w = c->pool_size[1];
  d.stride_h = c->strides[0];
  d.stride_w = c->strides[1];
  mxu_conv_output_size(d.in_h, d.pool_h, d.stride_h, c->padding, &d.pad_top,
                       &d.pad_bottom);
  mxu_conv_output_size(d.in_w, d.pool_w, d.stride_w, c->padding, &d.pad_left,
                       &d.pad_right);
  d.is_max = layer->is_max_pool;
  return d;
}

static mxu_status pool2d_plan(mxu_layer *layer, const mxu_backend *backend,
                              int batch, mxu_arena *layout) {
  mxu_pool2d_desc d = mxu_pool2d_describe(layer, batch);
  MXU_TRY(backend->pool2d_create(&d, &layer->compiled->ops[0]));
  size_t bytes = backend->pool2d_workspace_bytes(layer->compiled->ops[0]);
  layer->compiled->scratch[0] = bytes ? mxu_arena_reserve(layout, bytes) : 0;
  layer->compiled->scratch[1] = bytes; /* remembered: 0 means no workspace */
  return MXU_OK;
}

static void *workspace(const mxu_layer *layer, const mxu_layer_run *run) {
  return layer->compiled->scratch[1] ? run->arena + layer->compiled->scratch[0]
                                     : NULL;
}

static void pool2d_forward(mxu_layer *layer, const mxu_layer_run *run) {
  run->backend->pool2d_forward(run->ops[0], run->training, run->x, run->y,
                               run->training ? workspace(layer, run) : NULL);
}

static void pool2d_backward(mxu_layer *layer, const mxu_layer_run *run) {
  if (run->need_dx)
    run->backend->pool2d_backward(run->ops[0], run->x, run->y, run->dy,
                                  workspace(layer, run), run->dx);
}

/* ---- MaxPooling2D, AveragePooling2D --------------------------------------
 */

static const char *const pool2d_keys[] = {"pool_size", "padding", "strides",
                                          "data_format", NULL};

static mxu_status read_pool(const mxu_json_where *where, const cJSON *config,
                            int sequence, mxu_pool2d_config *pool,
                            const char *name) {
  *pool = mxu_pool2d_defaults(sequence ? 1 : 2, 2);
  pool->name = name;
  MXU_TRY(mxu_config_window_size(where, config, "pool_size", MXU_JSON_OPTIONAL,
                                 sequence, pool->pool_size));
  /* Keras: strides=None means the pool size. */
  pool->strides[0] = pool->pool_size[0];
  pool->strides[1] = pool->pool_size[1];
  const cJSON *strides = mxu_json_get(config, "strides");
  if (strides && !cJSON_IsNull(strides))
    MXU_TRY(mxu_config_window_size(where, config, "strides", MXU_JSON_OPTIONAL,
                                   sequence, pool->strides));
  MXU_TRY(mxu_json_padding(where, config, &pool->padding));
  return mxu_json_data_format(where, config);
}

static mxu_status read_pooling(const mxu_json_where *where, const cJSON *config,
                               mxu_json_node *node, const char *name,
                               int sequence, int is_max) {
  mxu_pool2d_config pool;
  MXU_TRY(read_pool(where, config, sequence, &pool, name));
  mxu_pool1d_config pool1 = {name, pool.pool_size[1], pool.strides[1],
                             pool.padding};
  mxu_tensor_id x = node->inputs[0], y;
  if (sequence)
    y = is_max ? mxu_apply_max_pooling1d(node->model, &pool1, x)
               : mxu_apply_average_pooling1d(node->model, &pool1, x);
  else
    y = is_max ? mxu_apply_max_pooling2d(node->model, &pool, x)
               : mxu_apply_average_pooling2d(node->model, &pool, x);
  return mxu_json_applied(where, node, y);
}

static mxu_status read_max_pooling2d(const mxu_json_where *where,
                                     const cJSON *config, mxu_json_node *node,
                                     const char *name) {
  return read_pooling(where, config, node, name, 0, 1);
}

static mxu_status read_average_pooling2d(const mxu_json_where *where,
                                         const cJSON *config,
                                         mxu_json_node *node,
                                         const char *name) {
  return read_pooling(where, config, node, name, 0, 0);
}

static mxu_status read_max_pooling1d(const mxu_json_where *where,
                                     const cJSON *config, mxu_json_node *node,
                                     const char *name) {
  return read_pooling(where, config, node, name, 1, 1);
}

static mxu_status read_average_pooling1d(const mxu_json_where *where,
                                         const cJSON *config,
                                         mxu_json_node *node,
                                         const char *name) {
  return read_pooling(where, config, node, name, 1, 0);
}

static void write_pool2d(mxu_json_out *out, const mxu_layer *layer,
                         cJSON *config) {
  const mxu_pool2d_config *pool = &layer->config.pool;
  int sequence = layer->cls->sequence;
  mxu_config_put_window_size(out, config, "pool_size", pool->pool_size,
                             sequence);
  mxu_json_put_string(out, config, "padding", mxu_padding_name(pool->padding));
  mxu_config_put_window_size(out, config, "strides", pool->strides, sequence);
  mxu_json_put_string(out, config, "data_format", "channels_last");
}

static const char *const max_pool_aliases[] = {"MaxPool2D", NULL};
static const char *const average_pool_aliases[] = {"AvgPool2D", NULL};

/* Max: window - 1 comparisons per output, and backward one add routing dy
 * into dx. Average: window - 1 adds and a division, and backward the
 * division and window adds. */
static double pool2d_flops(const mxu_layer *layer, const mxu_flops_step *step) {
  const mxu_pool2d_config *c = &layer->config.pool;
  double window = (double)c->pool_size[0] * c->pool_size[1];
  double outputs = (double)mxu_shape_count(&layer->out_shape);
  if (layer->is_max_pool)
    return outputs * (window - 1 + (step->need_dx ? 1 : 0));
  return outputs * (window + (step->need_dx ? window + 1 : 0));
}

/* Max over each window (padding never wins), or the window's sum over the
 * number of its in-bounds pixels. */
static mxu_hlo_value pool2d_emit(const mxu_layer *layer, mxu_emit *e) {
  mxu_pool2d_desc d = mxu_pool2d_describe(layer, e->batch);
  mxu_hlo_window w = {.size = {d.pool_h, d.pool_w},
                      .stride = {d.stride_h, d.stride_w},
                      .pad_low = {d.pad_top, d.pad_left},
                      .pad_high = {d.pad_bottom, d.pad_right},
                      .lhs_dilation = {1, 1},
                      .rhs_dilation = {1, 1}};
  mxu_hlo_value x = mxu_emit_image_input(layer, e), y;
  if (d.is_max) {
    y = mxu_hlo_reduce_window(e->h, x, MXU_HLO_MAX, &w);
  } else {
    mxu_hlo_value sum = mxu_hlo_reduce_window(e->h, x, MXU_HLO_SUM, &w);
    mxu_hlo_value count = mxu_hlo_reduce_window(
        e->h, mxu_hlo_full_like(e->h, x, 1.0), MXU_HLO_SUM, &w);
    y = mxu_hlo_binary(e->h, MXU_HLO_DIVIDE, sum, count);
  }
  return mxu_emit_sequence_output(layer, e, y);
}

const mxu_layer_class mxu_max_pooling2d_class = {
    .class_name = "MaxPooling2D",
    .steps_in_batch = 1,
    .flops = pool2d_flops,
    .config_keys = pool2d_keys,
    .read_config = read_max_pooling2d,
    .write_config = write_pool2d,
    .aliases = max_pool_aliases,
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = pool2d_infer,
    .plan = pool2d_plan,
    .forward = pool2d_forward,
    .emit = pool2d_emit,
    .backward = pool2d_backward,
};

const mxu_layer_class mxu_average_pooling2d_class = {
    .class_name = "AveragePooling2D",
    .steps_in_batch = 1,
    .flops = pool2d_flops,
    .config_keys = pool2d_keys,
    .read_config = read_average_pooling2d,
    .write_config = write_pool2d,
    .aliases = average_pool_aliases,
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = pool2d_infer,
    .plan = pool2d_plan,
    .forward = pool2d_forward,
    .emit = pool2d_emit,
    .backward = pool2d_backward,
};

static const char *const max_pool1d_aliases[] = {"MaxPool1D", NULL};
static const char *const average_pool1d_aliases[] = {"AvgPool1D", NULL};

const mxu_layer_class mxu_max_pooling1d_class = {
    .class_name = "MaxPooling1D",
    .steps_in_batch = 1,
    .sequence = 1,
    .flops = pool2d_flops,
    .config_keys = pool2d_keys,
    .read_config = read_max_pooling1d,
    .write_config = write_pool2d,
    .aliases = max_pool1d_aliases,
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = pool2d_infer,
    .plan = pool2d_plan,
    .forward = pool2d_forward,
    .emit = pool2d_emit,
    .backward = pool2d_backward,
};

const mxu_layer_class mxu_average_pooling1d_class = {
    .class_name = "AveragePooling1D",
    .steps_in_batch = 1,
    .sequence = 1,
    .flops = pool2d_flops,
    .config_keys = pool2d_keys,
    .read_config = read_average_pooling1d,
    .write_config = write_pool2d,
    .aliases = average_pool1d_aliases,
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = pool2d_infer,
    .plan = pool2d_plan,
    .forward = pool2d_forward,
    .emit = pool2d_emit,
    .backward = pool2d_backward,
};
