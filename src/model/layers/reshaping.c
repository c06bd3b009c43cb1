/* reshaping.c — layers that move values rather than compute them:
 * GlobalAveragePooling2D and GlobalMaxPooling2D (keepdims too) and their
 * 1-D kinds,
 * ZeroPadding2D and Cropping2D, Reshape and Permute. Plain loops (each
 * touches every value once) but GlobalAveragePooling2D's, on the backend,
 * and a ZeroPadding2D folded into the conv that reads it (a view). */
#include "model/layers/layers.h"

#include <string.h>

static int is_volume(const mxu_layer *layer) {
  return layer->cls == &mxu_global_average_pooling3d_class ||
         layer->cls == &mxu_global_max_pooling3d_class;
}

static mxu_status need_image(const mxu_layer *layer) {
  int sequence = layer->cls->sequence, volume = is_volume(layer);
  int rank = sequence ? 2 : volume ? 4 : 3;
  if (layer->in_shape.rank == rank + (layer->time_steps > 0)) return MXU_OK;
  char text[64];
  mxu_shape_format(&layer->in_shape, text, sizeof text);
  return mxu_fail(MXU_ERR_SHAPE, "%s: expects %s input, got %s", layer->name,
                  sequence ? "(steps, channels)"
                  : volume ? "(depth, height, width, channels)"
                           : "(height, width, channels)",
                  text);
}

/* ---- GlobalAveragePooling2D, GlobalMaxPooling2D and their 1-D kinds ------
 * Over each image's height x width (a sequence's steps), per channel. */

/* A sample's image (a TimeDistributed layer's: a step's). */
static mxu_shape image_of(const mxu_layer *layer) {
  mxu_shape s = layer->in_shape;
  if (!layer->time_steps) return s;
  return mxu_shape_make(s.rank - 1, s.dims + 1);
}

static mxu_status global_pool_infer(mxu_layer *layer) {
  MXU_TRY(need_image(layer));
  int rank = image_of(layer).rank;
  int64_t dims[4] = {1, 1, 1, layer->in_shape.dims[layer->in_shape.rank - 1]};
  layer->out_shape =
      mxu_steps_shape(layer, layer->config.global_pool.keepdims
                                 ? mxu_shape_make(rank, dims + 4 - rank)
                                 : mxu_shape_make(1, &dims[3]));
  return MXU_OK;
}

/* Values per channel of one image: its pixels (steps). */
static int64_t pixels_of(const mxu_layer *layer) {
  mxu_shape image = image_of(layer);
  return mxu_shape_count(&image) / image.dims[image.rank - 1];
}

static int channels_of(const mxu_layer *layer) {
  return (int)layer->in_shape.dims[layer->in_shape.rank - 1];
}

static double global_pool_flops(const mxu_layer *layer,
                                const mxu_flops_step *step) {
  double n = (double)mxu_shape_count(&layer->in_shape);
  return n * (step->need_dx ? 2.0 : 1.0);
}

/* With an Embedding's mask (GlobalAveragePooling1D): a sample's unmasked
 * steps' mean, as Keras' sum of them over their count (a sample of
 * padding only is 0 / 0, NaN, as in Keras). dy NULL: forward (x into y),
 * else backward (dy into dx). */
static void masked_mean(const mxu_layer *layer, const mxu_layer_run *run,
                        const float *dy) {
  int64_t steps = pixels_of(layer), c = channels_of(layer);
  for (int64_t n = 0; n < layer->compiled->batch; n++) {
    const float *ids = run->mask_ids + n * steps;
    float count = 0.0f;
    for (int64_t t = 0; t < steps; t++) count += ids[t] != 0.0f;
    float *y = run->y + n * c;
    if (!dy) memset(y, 0, (size_t)c * sizeof(float));
    for (int64_t t = 0; t < steps; t++) {
      int kept = ids[t] != 0.0f;
      if (dy) {
        float *dx = run->dx + (n * steps + t) * c;
        for (int64_t k = 0; k < c; k++)
          dx[k] = kept ? dy[n * c + k] / count : 0;
      } else if (kept) {
        for (int64_t k = 0; k < c; k++) y[k] += run->x[(n * steps + t) * c + k];
      }
    }
    for (int64_t k = 0; !dy && k < c; k++) y[k] /= count;
  }
}

/* On the backend: threaded over the images. */
static void global_average_forward(mxu_layer *layer, const mxu_layer_run *run) {
  if (run->mask_ids) {
    masked_mean(layer, run, NULL);
    return;
  }
  run->backend->channel_mean(layer->compiled->batch, pixels_of(layer),
                             channels_of(layer), run->x, run->y);
}

static void global_average_backward(mxu_layer *layer,
                                    const mxu_layer_run *run) {
  if (!run->need_dx) return;
  if (run->mask_ids) {
    masked_mean(layer, run, run->dy);
    return;
  }
  run->backend->channel_mean_backward(layer->compiled->batch, pixels_of(layer),
                                      channels_of(layer), run->dy, run->dx);
}

static void global_max_forward(mxu_layer *layer, const mxu_layer_run *run) {
  int64_t pixels = pixels_of(layer), c = channels_of(layer);
  for (int64_t n = 0; n < layer->compiled->batch; n++) {
    const float *x = run->x + n * pixels * c;
    float *y = run->y + n * c;
    memcpy(y, x, (size_t)c * sizeof(float));
    for (int64_t p = 1; p < pixels; p++)
      for (int64_t k = 0; k < c; k++)
        if (x[p * c + k] > y[k]) y[k] = x[p * c + k];
  }
}

/* TensorFlow's reduce_max shares the gradient equally among the pixels
 * that hold the maximum (a channel that relu zeroed everywhere ties). */
static void global_max_backward(mxu_layer *layer, const mxu_layer_run *run) {
  if (!run->need_dx) return;
  int64_t pixels = pixels_of(layer), c = channels_of(layer);
  for (int64_t n = 0; n < layer->compiled->batch; n++) {
    const float *x = run->x + n * pixels * c, *y = run->y + n * c;
    const float *dy = run->dy + n * c;
    float *dx = run->dx + n * pixels * c;
    for (int64_t k = 0; k < c; k++) {
      int64_t ties = 0;
      for (int64_t p = 0; p < pixels; p++) ties += x[p * c + k] == y[k];
      float share = dy[k] / (float)(ties ? ties : 1);
      for (int64_t p = 0; p < pixels; p++)
        dx[p * c + k] = x[p * c + k] == y[k] ? share : 0.0f;
    }
  }
}

/* Over height and width (steps), then the output's shape (keepdims). */
static mxu_hlo_value global_pool_emit(const mxu_layer *layer, mxu_emit *e) {
  mxu_hlo *h = e->h;
  const int64_t axes[3] = {1, 2, 3}, rows[1] = {0};
  int is_max = layer->config.global_pool.is_max;
  mxu_shape image = image_of(layer);
  mxu_hlo_value x = layer->time_steps
                        ? mxu_hlo_reshape(
                              h, e->in[0],
                              mxu_batch_shape(mxu_layer_rows(layer, e->batch),
                                              &image))
                        : e->in[0],
                count = 0;
  if (!is_max && e->mask) {
    /* The unmasked steps' sum over their count (masked_mean). */
    mxu_hlo_value kept =
        mxu_hlo_convert(h,
                        mxu_hlo_compare_op(h, MXU_HLO_NE, e->mask,
                                           mxu_hlo_full_like(h, e->mask, 0.0)),
                        MXU_HLO_F32);
    const int64_t rows_steps[2] = {0, 1};
    x = mxu_hlo_mul(
        h, x, mxu_hlo_broadcast(h, kept, *mxu_hlo_shape_of(h, x), rows_steps));
    count = mxu_hlo_reduce(h, kept, MXU_HLO_SUM, 1, &axes[0]);
  }
  mxu_hlo_value y = mxu_hlo_reduce(h, x, is_max ? MXU_HLO_MAX : MXU_HLO_SUM,
                                   image.rank - 1, axes);
  if (count)
    y = mxu_hlo_binary(
        h, MXU_HLO_DIVIDE, y,
        mxu_hlo_broadcast(h, count, *mxu_hlo_shape_of(h, y), rows));
  else if (!is_max)
    y = mxu_hlo_binary(h, MXU_HLO_DIVIDE, y,
                       mxu_hlo_full_like(h, y, (double)pixels_of(layer)));
  return mxu_hlo_reshape(h, y, mxu_batch_shape(e->batch, &layer->out_shape));
}

/* ---- GlobalAveragePooling2D, GlobalMaxPooling2D ------------------------- */

static const char *const global_pool_keys[] = {"data_format", "keepdims", NULL};

/* The 1-D (sequence 1), 2-D (0) or 3-D (sequence -1) kind's config. */
static mxu_status read_global_pool(const mxu_json_where *where,
                                   const cJSON *config, mxu_json_node *node,
                                   const char *name, int is_max, int sequence) {
  mxu_global_pool2d_config pool = {name, is_max, 0};
  MXU_TRY(mxu_json_data_format(where, config));
  MXU_TRY(mxu_json_bool(where, config, "keepdims", &pool.keepdims));
  mxu_tensor_id x = node->inputs[0];
  return mxu_json_applied(
      where, node,
      (sequence > 0   ? mxu_apply_global_pooling1d
       : sequence < 0 ? mxu_apply_global_pooling3d
                      : mxu_apply_global_pooling2d)(node->model, &pool, x));
}

static mxu_status read_global_average(const mxu_json_where *where,
                                      const cJSON *config, mxu_json_node *node,
                                      const char *name) {
  return read_global_pool(where, config, node, name, 0, 0);
}

static mxu_status read_global_max(const mxu_json_where *where,
                                  const cJSON *config, mxu_json_node *node,
                                  const char *name) {
  return read_global_pool(where, config, node, name, 1, 0);
}

static mxu_status read_global_average1d(const mxu_json_where *where,
                                        const cJSON *config,
                                        mxu_json_node *node, const char *name) {
  return read_global_pool(where, config, node, name, 0, 1);
}

static mxu_status read_global_max1d(const mxu_json_where *where,
                                    const cJSON *config, mxu_json_node *node,
                                    const char *name) {
  return read_global_pool(where, config, node, name, 1, 1);
}

static void write_global_pool(mxu_json_out *out, const mxu_layer *layer,
                              cJSON *config) {
  mxu_json_put_string(out, config, "data_format", "channels_last");
  mxu_json_put_bool(out, config, "keepdims",
                    layer->config.global_pool.keepdims);
}

static const char *const global_average1d_aliases[] = {"GlobalAvgPool1D", NULL};
static const char *const global_max1d_aliases[] = {"GlobalMaxPool1D", NULL};

const mxu_layer_class mxu_global_average_pooling1d_class = {
    .class_name = "GlobalAveragePooling1D",
    .steps_in_batch = 1,
    .sequence = 1,
    .config_keys = global_pool_keys,
    .read_config = read_global_average1d,
    .write_config = write_global_pool,
    .aliases = global_average1d_aliases,
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = global_pool_infer,
    .flops = global_pool_flops,
    .plan = mxu_no_plan,
    .forward = global_average_forward,
    .backward = global_average_backward,
    .emit = global_pool_emit,
    .uses_mask = 1,
};

const mxu_layer_class mxu_global_max_pooling1d_class = {
    .class_name = "GlobalMaxPooling1D",
    .steps_in_batch = 1,
    .sequence = 1,
    .config_keys = global_pool_keys,
    .read_config = read_global_max1d,
    .write_config = write_global_pool,
    .aliases = global_max1d_aliases,
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = global_pool_infer,
    .flops = global_pool_flops,
    .plan = mxu_no_plan,
    .forward = global_max_forward,
    .backward = global_max_backward,
    .emit = global_pool_emit,
};

static mxu_status read_global_average3d(const mxu_json_where *where,
                                        const cJSON *config,
                                        mxu_json_node *node, const char *name) {
  return read_global_pool(where, config, node, name, 0, -1);
}

static mxu_status read_global_max3d(const mxu_json_where *where,
                                    const cJSON *config, mxu_json_node *node,
                                    const char *name) {
  return read_global_pool(where, config, node, name, 1, -1);
}

static const char *const global_average3d_aliases[] = {"GlobalAvgPool3D", NULL};
static const char *const global_max3d_aliases[] = {"GlobalMaxPool3D", NULL};

const mxu_layer_class mxu_global_average_pooling3d_class = {
    .class_name = "GlobalAveragePooling3D",
    .config_keys = global_pool_keys,
    .read_config = read_global_average3d,
    .write_config = write_global_pool,
    .aliases = global_average3d_aliases,
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = global_pool_infer,
    .flops = global_pool_flops,
    .plan = mxu_no_plan,
    .forward = global_average_forward,
    .backward = global_average_backward,
    .emit = global_pool_emit,
};

const mxu_layer_class mxu_global_max_pooling3d_class = {
    .class_name = "GlobalMaxPooling3D",
    .config_keys = global_pool_keys,
    .read_config = read_global_max3d,
    .write_config = write_global_pool,
    .aliases = global_max3d_aliases,
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = global_pool_infer,
    .flops = global_pool_flops,
    .plan = mxu_no_plan,
    .forward = global_max_forward,
    .backward = global_max_backward,
    .emit = global_pool_emit,
};

/* ---- ZeroPadding2D ---------------------------------------------------------
 * padding: n (all sides), [rows, columns] (symmetric), or [[top, bottom],
 * [left, right]]. */

static const char *const zero_padding_keys[] = {"padding", "data_format", NULL};

static int padding_amount(const cJSON *v, int *out) {
  if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 1 << 20 ||
      v->valuedouble != (double)(int)v->valuedouble)
    return 0;
  *out = (int)v->valuedouble;
  return 1;
}

/* A pair [a, b], or a lone number meaning (n, n). */
static int padding_pair(const cJSON *v, int out[2]) {
  if (padding_amount(v, &out[0])) {
    out[1] = out[0];
    return 1;
  }
  return cJSON_IsArray(v) && cJSON_GetArraySize(v) == 2 &&
         padding_amount(v->child, &out[0]) &&
         padding_amount(v->child->next, &out[1]);
}

/* ZeroPadding2D's padding and Cropping2D's cropping: n, [rows, columns]
 * or [[top, bottom], [left, right]]. */
static mxu_status read_margins(const mxu_json_where *where, const cJSON *config,
                               const char *key, int fallback,
                               mxu_zero_padding2d_config *out) {
  const cJSON *v = mxu_json_get(config, key);
  int rows[2] = {fallback, fallback}, cols[2] = {fallback, fallback};
  int ok = 1;
  if (v && padding_amount(v, &rows[0])) {
    rows[1] = cols[0] = cols[1] = rows[0];
  } else if (v) {
    ok = cJSON_IsArray(v) && cJSON_GetArraySize(v) == 2;
    int nested = ok && cJSON_IsArray(v->child);
    if (ok && nested) {
      ok = padding_pair(v->child, rows) && padding_pair(v->child->next, cols);
    } else if (ok) {
      ok = padding_amount(v->child, &rows[0]) &&
           padding_amount(v->child->next, &cols[0]);
      rows[1] = rows[0];
      cols[1] = cols[0];
    }
  }
  if (!ok) {
    char text[160];
    mxu_json_text(v, text, sizeof text);
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "%s must be n, [rows, columns] or [[top, bottom], "
                         "[left, right]] of integers >= 0, got %s",
                         key, text);
  }
  MXU_TRY(mxu_json_data_format(where, config));
  out->top = rows[0], out->bottom = rows[1];
  out->left = cols[0], out->right = cols[1];
  return MXU_OK;
}

static mxu_status read_zero_padding(const mxu_json_where *where,
                                    const cJSON *config, mxu_json_node *node,
                                    const char *name) {
  mxu_zero_padding2d_config pad = {name, 1, 1, 1, 1}; /* Keras' default */
  MXU_TRY(read_margins(where, config, "padding", 1, &pad));
  return mxu_json_applied(
      where, node,
      mxu_apply_zero_padding2d(node->model, &pad, node->inputs[0]));
}

static mxu_status read_cropping(const mxu_json_where *where,
                                const cJSON *config, mxu_json_node *node,
                                const char *name) {
  mxu_zero_padding2d_config crop = {name, 0, 0, 0, 0};
  MXU_TRY(read_margins(where, config, "cropping", 0, &crop));
  return mxu_json_applied(
      where, node, mxu_apply_cropping2d(node->model, &crop, node->inputs[0]));
}

static int is_cropping(const mxu_layer *layer) {
  return layer->cls == &mxu_cropping2d_class;
}

static void write_margins(mxu_json_out *out, const mxu_layer *layer,
                          cJSON *config) {
  const mxu_zero_padding2d_config *c = &layer->config.padding;
  int rows[2] = {c->top, c->bottom}, cols[2] = {c->left, c->right};
  cJSON *both = cJSON_CreateArray();
  if (!both || !cJSON_AddItemToArray(both, cJSON_CreateIntArray(rows, 2)) ||
      !cJSON_AddItemToArray(both, cJSON_CreateIntArray(cols, 2)))
    out->failed = 1;
  mxu_json_put(out, config, is_cropping(layer) ? "cropping" : "padding", both);
  mxu_json_put_string(out, config, "data_format", "channels_last");
}

/* ---- Reshape ---------------------------------------------------------------
 */

static const char *const reshape_keys[] = {"target_shape", NULL};

static mxu_status read_reshape(const mxu_json_where *where, const cJSON *config,
                               mxu_json_node *node, const char *name) {
  const cJSON *v = mxu_json_get(config, "target_shape");
  int count = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : 0;
  char text[160];
  mxu_json_text(v, text, sizeof text);
  if (count < 1 || count > MXU_MAX_RANK)
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "target_shape must be a list of 1 to %d dimensions, "
                         "got %s",
                         MXU_MAX_RANK, text);
  mxu_reshape_config reshape = {name, {count, {0}}};
  int d = 0;
  for (const cJSON *dim = v->child; dim; dim = dim->next, d++) {
    if (!cJSON_IsNumber(dim) || dim->valuedouble < -1 ||
        dim->valuedouble > (double)(1 << 30) ||
        dim->valuedouble != (double)(int64_t)dim->valuedouble)
      return mxu_json_fail(where, MXU_ERR_FORMAT,
                           "target_shape %s: dimensions must be integers, "
                           "-1 for one inferred",
                           text);
    reshape.target.dims[d] = (int64_t)dim->valuedouble;
  }
  return mxu_json_applied(
      where, node, mxu_apply_reshape(node->model, &reshape, node->inputs[0]));
}

static void write_reshape(mxu_json_out *out, const mxu_layer *layer,
                          cJSON *config) {
  const mxu_shape *t = &layer->config.reshape.target;
  cJSON *dims = cJSON_CreateArray();
  for (int d = 0; d < t->rank; d++)
    if (!dims ||
        !cJSON_AddItemToArray(dims, cJSON_CreateNumber((double)t->dims[d])))
      out->failed = 1;
  mxu_json_put(out, config, "target_shape", dims);
}

static const char *const global_average_aliases[] = {"GlobalAvgPool2D", NULL};
static const char *const global_max_aliases[] = {"GlobalMaxPool2D", NULL};

const mxu_layer_class mxu_global_average_pooling2d_class = {
    .class_name = "GlobalAveragePooling2D",
    .steps_in_batch = 1,
    .config_keys = global_pool_keys,
    .read_config = read_global_average,
    .write_config = write_global_pool,
    .aliases = global_average_aliases,
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = global_pool_infer,
    .flops = global_pool_flops,
    .plan = mxu_no_plan,
    .forward = global_average_forward,
    .backward = global_average_backward,
    .emit = global_pool_emit,
};

const mxu_layer_class mxu_global_max_pooling2d_class = {
    .class_name = "GlobalMaxPooling2D",
    .steps_in_batch = 1,
    .config_keys = global_pool_keys,
    .read_config = read_global_max,
    .write_config = write_global_pool,
    .aliases = global_max_aliases,
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = global_pool_infer,
    .flops = global_pool_flops,
    .plan = mxu_no_plan,
    .forward = global_max_forward,
    .backward = global_max_backward,
    .emit = global_pool_emit,
};

/* ---- ZeroPadding2D ---------------------------------------------------------
 */

/* ZeroPadding2D adds the margins, Cropping2D takes them off. */
static mxu_status margins_infer(mxu_layer *layer) {
  const mxu_zero_padding2d_config *c = &layer->config.padding;
  const char *what = is_cropping(layer) ? "cropping" : "padding";
  MXU_TRY(need_image(layer));
  if (c->top < 0 || c->bottom < 0 || c->left < 0 || c->right < 0 ||
      c->top > (1 << 20) || c->bottom > (1 << 20) || c->left > (1 << 20) ||
      c->right > (1 << 20))
    return mxu_fail(MXU_ERR_ARG,
                    "%s: %s ((%d, %d), (%d, %d)) must be in 0..1048576",
                    layer->name, what, c->top, c->bottom, c->left, c->right);
  int sign = is_cropping(layer) ? -1 : 1;
  int64_t dims[3] = {layer->in_shape.dims[0] + sign * (c->top + c->bottom),
                     layer->in_shape.dims[1] + sign * (c->left + c->right),
                     layer->in_shape.dims[2]};
  if (dims[0] < 1 || dims[1] < 1)
    return mxu_fail(MXU_ERR_SHAPE,
                    "%s: cropping ((%d, %d), (%d, %d)) leaves nothing of a "
                    "%lldx%lld image",
                    layer->name, c->top, c->bottom, c->left, c->right,
                    (long long)layer->in_shape.dims[0],
                    (long long)layer->in_shape.dims[1]);
  layer->out_shape = mxu_shape_make(3, dims);
  return MXU_OK;
}

/* The small tensor's rows as runs inside the large one's at (top, left):
 * into the large one (to_large, after zeroing it) or out of it. The small
 * one is the output when cropping. */
static void inner_rows(const mxu_layer *layer, int64_t top, int64_t left,
                       int crop, const float *from, float *to, int to_large) {
  const mxu_shape *small = crop ? &layer->out_shape : &layer->in_shape;
  const mxu_shape *large = crop ? &layer->in_shape : &layer->out_shape;
  int64_t h = small->dims[0], w = small->dims[1], ch = small->dims[2];
  int64_t big_h = large->dims[0], big_w = large->dims[1];
  int64_t batch = layer->compiled->batch;
  size_t row = (size_t)(w * ch) * sizeof(float);
  if (to_large)
    memset(to, 0, (size_t)(batch * mxu_shape_count(large)) * sizeof(float));
  for (int64_t n = 0; n < batch; n++)
    for (int64_t r = 0; r < h; r++) {
      int64_t at_small = (n * h + r) * w * ch;
      int64_t at_large = ((n * big_h + r + top) * big_w + left) * ch;
      if (to_large)
        memcpy(to + at_large, from + at_small, row);
      else
        memcpy(to + at_small, from + at_large, row);
    }
}

/* Folded into the conv that reads it (compile), a ZeroPadding2D is a
 * view. */
static void margins_forward(mxu_layer *layer, const mxu_layer_run *run) {
  const mxu_zero_padding2d_config *c = &layer->config.padding;
  int crop = is_cropping(layer);
  if (layer->compiled->folded)
    mxu_view_forward(layer, run);
  else
    inner_rows(layer, c->top, c->left, crop, run->x, run->y, !crop);
}

static void margins_backward(mxu_layer *layer, const mxu_layer_run *run) {
  const mxu_zero_padding2d_config *c = &layer->config.padding;
  int crop = is_cropping(layer);
  if (layer->compiled->folded)
    mxu_view_backward(layer, run);
  else if (run->need_dx)
    inner_rows(layer, c->top, c->left, crop, run->dy, run->dx, crop);
}

/* The image placed at (top, left) in the large one (zeros around), or
 * cut out of it. */
static mxu_hlo_value inner_emit(const mxu_layer *layer, mxu_emit *e,
                                int64_t top, int64_t left, int crop) {
  const mxu_shape *in = &layer->in_shape, *out = &layer->out_shape;
  int64_t low[4] = {0, top, left, 0}, none[4] = {0};
  if (!crop) {
    int64_t high[4] = {0, out->dims[0] - in->dims[0] - top,
                       out->dims[1] - in->dims[1] - left, 0};
    return mxu_hlo_pad(e->h, e->in[0], 0.0, low, high, none);
  }
  int64_t limit[4] = {e->batch, top + out->dims[0], left + out->dims[1],
                      out->dims[2]},
          stride[4] = {1, 1, 1, 1};
  return mxu_hlo_slice(e->h, e->in[0], low, limit, stride);
}

static mxu_hlo_value margins_emit(const mxu_layer *layer, mxu_emit *e) {
  const mxu_zero_padding2d_config *c = &layer->config.padding;
  return inner_emit(layer, e, c->top, c->left, is_cropping(layer));
}

const mxu_layer_class mxu_zero_padding2d_class = {
    .class_name = "ZeroPadding2D",
    .config_keys = zero_padding_keys,
    .read_config = read_zero_padding,
    .write_config = write_margins,
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = margins_infer,
    .flops = mxu_no_flops,
    .plan = mxu_no_plan,
    .forward = margins_forward,
    .backward = margins_backward,
    .emit = margins_emit,
};

static const char *const cropping_keys[] = {"cropping", "data_format", NULL};

const mxu_layer_class mxu_cropping2d_class = {
    .class_name = "Cropping2D",
    .config_keys = cropping_keys,
    .read_config = read_cropping,
    .write_config = write_margins,
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = margins_infer,
    .flops = mxu_no_flops,
    .plan = mxu_no_plan,
    .forward = margins_forward,
    .backward = margins_backward,
    .emit = margins_emit,
};

/* ---- Permute ------------------------------------------------------------
 * dims: a permutation of the axes without the batch, 1-based as Keras
 * counts them: output axis i is input axis dims[i]. */

static const char *const permute_keys[] = {"dims", NULL};

static mxu_status read_permute(const mxu_json_where *where, const cJSON *config,
                               mxu_json_node *node, const char *name) {
  const cJSON *v = mxu_json_get(config, "dims");
  mxu_permute_config p = {name, {0}, 0};
  int count = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : 0;
  for (const cJSON *d = count <= MXU_MAX_RANK && v ? v->child : NULL; d;
       d = d->next)
    p.dims[p.rank++] = cJSON_IsNumber(d) ? (int)d->valuedouble : 0;
  if (count < 1 || count > MXU_MAX_RANK) {
    char text[96];
    mxu_json_text(v, text, sizeof text);
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "dims must be a list of 1 to %d axes, got %s",
                         MXU_MAX_RANK, text);
  }
  return mxu_json_applied(where, node,
                          mxu_apply_permute(node->model, &p, node->inputs[0]));
}

static void write_permute(mxu_json_out *out, const mxu_layer *layer,
                          cJSON *config) {
  const mxu_permute_config *p = &layer->config.permute;
  mxu_json_put(out, config, "dims", cJSON_CreateIntArray(p->dims, p->rank));
}

static mxu_status permute_infer(mxu_layer *layer) {
  const mxu_permute_config *p = &layer->config.permute;
  int seen[MXU_MAX_RANK] = {0}, ok = p->rank == layer->in_shape.rank;
  for (int i = 0; ok && i < p->rank; i++) {
    ok = p->dims[i] >= 1 && p->dims[i] <= p->rank && !seen[p->dims[i] - 1];
    if (ok) seen[p->dims[i] - 1] = 1;
  }
  if (!ok)
    return mxu_fail(MXU_ERR_ARG,
                    "%s: dims must order the input's %d axes 1..%d, each "
                    "once",
                    layer->name, layer->in_shape.rank, layer->in_shape.rank);
  layer->out_shape = layer->in_shape;
  for (int i = 0; i < p->rank; i++)
    layer->out_shape.dims[i] = layer->in_shape.dims[p->dims[i] - 1];
  return MXU_OK;
}

/* Walks the output in order, the input at the permuted strides; backward
 * the other way round. */
static void permute_move(const mxu_layer *layer, const float *from, float *to,
                         int forward) {
  const mxu_permute_config *p = &layer->config.permute;
  const mxu_shape *in = &layer->in_shape, *out = &layer->out_shape;
  int64_t in_stride[MXU_MAX_RANK], stride[MXU_MAX_RANK];
  int64_t per = mxu_shape_count(in), step = 1;
  for (int d = in->rank - 1; d >= 0; d--) {
    in_stride[d] = step;
    step *= in->dims[d];
  }
  for (int i = 0; i < p->rank; i++) stride[i] = in_stride[p->dims[i] - 1];
  for (int64_t n = 0; n < layer->compiled->batch; n++)
    for (int64_t o = 0; o < per; o++) {
      int64_t rest = o, at = 0;
      for (int i = out->rank - 1; i >= 0; i--) {
        at += rest % out->dims[i] * stride[i];
        rest /= out->dims[i];
      }
      if (forward)
        to[n * per + o] = from[n * per + at];
      else
        to[n * per + at] = from[n * per + o];
    }
}

static void permute_forward(mxu_layer *layer, const mxu_layer_run *run) {
  permute_move(layer, run->x, run->y, 1);
}

static void permute_backward(mxu_layer *layer, const mxu_layer_run *run) {
  if (run->need_dx) permute_move(layer, run->dy, run->dx, 0);
}

static mxu_hlo_value permute_emit(const mxu_layer *layer, mxu_emit *e) {
  const mxu_permute_config *p = &layer->config.permute;
  int64_t perm[MXU_HLO_MAX_RANK] = {0};
  for (int i = 0; i < p->rank; i++) perm[1 + i] = p->dims[i];
  return mxu_hlo_transpose(e->h, e->in[0], perm);
}

const mxu_layer_class mxu_permute_class = {
    .class_name = "Permute",
    .config_keys = permute_keys,
    .read_config = read_permute,
    .write_config = write_permute,
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = permute_infer,
    .flops = mxu_no_flops,
    .plan = mxu_no_plan,
    .forward = permute_forward,
    .backward = permute_backward,
    .emit = permute_emit,
};

/* ---- Reshape --------------------------------------------------------------
 * channels_last memory is row-major, so a reshape is a view: compile gives
 * it its input's buffer and nothing moves. */

static mxu_status reshape_infer(mxu_layer *layer) {
  mxu_shape target = layer->config.reshape.target;
  int64_t known = 1, count = mxu_shape_count(&layer->in_shape);
  int unknown = -1;
  char text[64];
  mxu_shape_format(&layer->in_shape, text, sizeof text);
  if (target.rank < 1 || target.rank > MXU_MAX_RANK)
    return mxu_fail(MXU_ERR_ARG, "%s: target rank %d is not in 1..%d",
                    layer->name, target.rank, MXU_MAX_RANK);
  for (int d = 0; d < target.rank; d++) {
    if (target.dims[d] == -1 && unknown < 0) {
      unknown = d;
    } else if (target.dims[d] >= 1 && target.dims[d] <= count) {
      known *= target.dims[d];
    } else {
      return mxu_fail(MXU_ERR_ARG,
                      "%s: target dimension %d is %lld; each must be "
                      "positive, and one may be -1",
                      layer->name, d, (long long)target.dims[d]);
    }
  }
  if (unknown >= 0 && count % known == 0) target.dims[unknown] = count / known;
  if (mxu_shape_count(&target) != count || (unknown >= 0 && count % known)) {
    return mxu_fail(MXU_ERR_SHAPE,
                    "%s: input %s holds %lld values per sample, which the "
                    "target shape cannot",
                    layer->name, text, (long long)count);
  }
  layer->out_shape = target;
  return MXU_OK;
}

const mxu_layer_class mxu_reshape_class = {
    .class_name = "Reshape",
    .config_keys = reshape_keys,
    .read_config = read_reshape,
    .write_config = write_reshape,
    .view = 1,
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = reshape_infer,
    .flops = mxu_no_flops,
    .plan = mxu_no_plan,
    .forward = mxu_view_forward,
    .backward = mxu_view_backward,
    .emit = mxu_emit_view,
};

/* ---- CenterCrop ----------------------------------------------------------
 * The target window from the image's centre (offset (in - target) / 2,
 * rounded down, as Keras'). Keras resizes an image smaller than the target
 * first; mxu refuses it. */

static const char *const center_crop_keys[] = {"height", "width", "data_format",
                                               NULL};

static mxu_status read_center_crop(const mxu_json_where *where,
                                   const cJSON *config, mxu_json_node *node,
                                   const char *name) {
  mxu_resize_config c = {name, 0, 0, 0};
  MXU_TRY(mxu_json_int(where, config, "height", MXU_JSON_REQUIRED, 1, 1 << 20,
                       &c.height));
  MXU_TRY(mxu_json_int(where, config, "width", MXU_JSON_REQUIRED, 1, 1 << 20,
                       &c.width));
  MXU_TRY(mxu_json_data_format(where, config));
  return mxu_json_applied(
      where, node, mxu_apply_center_crop(node->model, &c, node->inputs[0]));
}

static void write_center_crop(mxu_json_out *out, const mxu_layer *layer,
                              cJSON *config) {
  mxu_json_put_number(out, config, "height", layer->config.resize.height);
  mxu_json_put_number(out, config, "width", layer->config.resize.width);
  mxu_json_put_string(out, config, "data_format", "channels_last");
}

static mxu_status center_crop_infer(mxu_layer *layer) {
  const mxu_resize_config *c = &layer->config.resize;
  MXU_TRY(need_image(layer));
  if (c->height < 1 || c->width < 1 || c->height > layer->in_shape.dims[0] ||
      c->width > layer->in_shape.dims[1])
    return mxu_fail(MXU_ERR_UNSUPPORTED,
                    "%s: CenterCrop to %dx%d of a %lldx%lld image: only a "
                    "window inside the image is supported (Keras resizes a "
                    "smaller one first)",
                    layer->name, c->height, c->width,
                    (long long)layer->in_shape.dims[0],
                    (long long)layer->in_shape.dims[1]);
  int64_t dims[3] = {c->height, c->width, layer->in_shape.dims[2]};
  layer->out_shape = mxu_shape_make(3, dims);
  return MXU_OK;
}

static void center_crop_move(const mxu_layer *layer, const float *from,
                             float *to, int forward) {
  int64_t top = (layer->in_shape.dims[0] - layer->out_shape.dims[0]) / 2;
  int64_t left = (layer->in_shape.dims[1] - layer->out_shape.dims[1]) / 2;
  inner_rows(layer, top, left, 1, from, to, !forward);
}

static mxu_hlo_value center_crop_emit(const mxu_layer *layer, mxu_emit *e) {
  int64_t top = (layer->in_shape.dims[0] - layer->out_shape.dims[0]) / 2;
  int64_t left = (layer->in_shape.dims[1] - layer->out_shape.dims[1]) / 2;
  return inner_emit(layer, e, top, left, 1);
}

static void center_crop_forward(mxu_layer *layer, const mxu_layer_run *run) {
  center_crop_move(layer, run->x, run->y, 1);
}

static void center_crop_backward(mxu_layer *layer, const mxu_layer_run *run) {
  if (run->need_dx) center_crop_move(layer, run->dy, run->dx, 0);
}

const mxu_layer_class mxu_center_crop_class = {
    .class_name = "CenterCrop",
    .config_keys = center_crop_keys,
    .read_config = read_center_crop,
    .write_config = write_center_crop,
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = center_crop_infer,
    .flops = mxu_no_flops,
    .plan = mxu_no_plan,
    .forward = center_crop_forward,
    .backward = center_crop_backward,
    .emit = center_crop_emit,
};

/* ---- OutputPart -----------------------------------------------------------
 * One of the tensors a layer returns several of (an RNN's output and its
 * final states): the node not listed among Keras' layers, which the JSON
 * writer names as Keras does, [layer, call, index]. */

static mxu_status part_infer(mxu_layer *layer) {
  const mxu_part_config *p = &layer->config.part;
  if (p->offset < 0 || p->offset + mxu_shape_count(&p->shape) >
                           mxu_shape_count(&layer->in_shape))
    return mxu_fail(MXU_ERR_SHAPE, "%s: output %d lies outside its layer's",
                    layer->name, p->index);
  layer->out_shape = p->shape;
  return MXU_OK;
}

static void part_forward(mxu_layer *layer, const mxu_layer_run *run) {
  int64_t whole = mxu_shape_count(&layer->in_shape);
  int64_t count = mxu_shape_count(&layer->out_shape);
  for (int64_t n = 0; n < layer->compiled->batch; n++)
    memcpy(run->y + n * count, run->x + n * whole + layer->config.part.offset,
           (size_t)count * sizeof(float));
}

static void part_backward(mxu_layer *layer, const mxu_layer_run *run) {
  if (!run->need_dx) return;
  int64_t whole = mxu_shape_count(&layer->in_shape);
  int64_t count = mxu_shape_count(&layer->out_shape);
  memset(run->dx, 0, (size_t)(layer->compiled->batch * whole) * sizeof(float));
  for (int64_t n = 0; n < layer->compiled->batch; n++)
    memcpy(run->dx + n * whole + layer->config.part.offset, run->dy + n * count,
           (size_t)count * sizeof(float));
}

static mxu_hlo_value part_emit(const mxu_layer *layer, mxu_emit *e) {
  int64_t whole = mxu_shape_count(&layer->in_shape);
  int64_t count = mxu_shape_count(&layer->out_shape);
  int64_t flat[2] = {e->batch, whole};
  int64_t start[2] = {0, layer->config.part.offset};
  int64_t limit[2] = {e->batch, layer->config.part.offset + count};
  int64_t stride[2] = {1, 1};
  mxu_hlo_value x =
      mxu_hlo_reshape(e->h, e->in[0], mxu_hlo_shape_make(MXU_HLO_F32, 2, flat));
  return mxu_hlo_reshape(e->h, mxu_hlo_slice(e->h, x, start, limit, stride),
                         mxu_batch_shape(e->batch, &layer->out_shape));
}

/* The first part (an RNN's output) keeps its layer's mask; its states
 * have none. */
static int part_mask(const mxu_layer *layer) {
  return layer->config.part.index == 0 ? layer->mask_in : -1;
}

const mxu_layer_class mxu_output_part_class = {.class_name = "OutputPart",
                                               .min_inputs = 1,
                                               .max_inputs = 1,
                                               .infer = part_infer,
                                               .flops = mxu_no_flops,
                                               .plan = mxu_no_plan,
                                               .forward = part_forward,
                                               .backward = part_backward,
                                               .emit = part_emit,
                                               .output_mask = part_mask};
