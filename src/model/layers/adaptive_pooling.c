/* adaptive_pooling.c — Keras 3's AdaptiveAveragePooling1D..3D and
 * AdaptiveMaxPooling1D..3D: out cells along each spatial axis, cell i
 * pooling inputs [floor(i L / out), ceil((i + 1) L / out)) of the axis's
 * L (so neighbours may share one, and a backward pass adds).
 *
 * Axis by axis, as Keras' TensorFlow backend pools them: a rectangle's max
 * is the max of its rows' maxima, its mean the mean of their means, and a
 * gradient takes the same route as Keras'. Stage k pools axis k of the
 * tensor viewed as (outer, L, inner): the batch and the axes already
 * pooled outside, the later axes and channels inside. Plain loops: the
 * windows differ in size, which the backends' pooling ops do not take. */
#include "model/layers/layers.h"

#include <string.h>

/* Stages: one per spatial axis. */
typedef struct stage {
  int64_t outer, length, out, inner;
} stage;

static int rank_of(const mxu_layer *layer) { return layer->in_shape.rank - 1; }

static int is_max(const mxu_layer *layer) {
  return layer->cls >= mxu_adaptive_pooling_classes[1];
}

static stage stage_of(const mxu_layer *layer, int64_t batch, int k) {
  const mxu_shape *in = &layer->in_shape;
  stage s = {batch, in->dims[k], layer->config.adaptive.output_size[k], 1};
  for (int a = 0; a < k; a++) s.outer *= layer->config.adaptive.output_size[a];
  for (int a = k + 1; a < in->rank; a++) s.inner *= in->dims[a];
  return s;
}

static int64_t window_start(const stage *s, int64_t i) {
  return i * s->length / s->out;
}

static int64_t window_end(const stage *s, int64_t i) {
  return ((i + 1) * s->length + s->out - 1) / s->out;
}

static mxu_status adaptive_infer(mxu_layer *layer) {
  const mxu_adaptive_pool_config *c = &layer->config.adaptive;
  int rank =
      (int)(layer->cls - mxu_adaptive_pooling_classes[is_max(layer)]) + 1;
  char text[64];
  mxu_shape_format(&layer->in_shape, text, sizeof text);
  if (layer->in_shape.rank != rank + 1)
    return mxu_fail(MXU_ERR_SHAPE,
                    "%s: %s expects %d spatial axes and channels, got %s",
                    layer->name, layer->cls->class_name, rank, text);
  mxu_shape out = layer->in_shape;
  for (int a = 0; a < 3; a++) {
    int size = c->output_size[a];
    if (a < rank && (size < 1 || size > MXU_MAX_DIM))
      return mxu_fail(MXU_ERR_ARG, "%s: output_size %d must be in 1..%d",
                      layer->name, size, MXU_MAX_DIM);
    if (a >= rank && size != 0)
      return mxu_fail(MXU_ERR_ARG,
                      "%s: output_size has %d entries for %d spatial axes",
                      layer->name, a + 1, rank);
    if (a < rank) out.dims[a] = size;
  }
  layer->out_shape = out;
  return MXU_OK;
}

/* What stage k keeps in the layer's scratch: its output and that
 * output's gradient (but the last stage's, which are y and dy), and for
 * max the index along the axis each output came from. */
typedef struct stage_buffers {
  float *y, *dy;
  int32_t *from;
} stage_buffers;

/* The bytes of stages 0..k; with base, stage k's buffers from base on. */
static size_t buffers_of(const mxu_layer *layer, int64_t batch, int k,
                         unsigned char *base, stage_buffers *b) {
  size_t at = 0;
  for (int j = 0; j <= k; j++) {
    stage s = stage_of(layer, batch, j);
    size_t values = (size_t)(s.outer * s.out * s.inner);
    size_t kept = j < rank_of(layer) - 1 ? values * sizeof(float) : 0;
    size_t from = is_max(layer) ? values * sizeof(int32_t) : 0;
    if (base && j == k)
      *b = (stage_buffers){kept ? (float *)(void *)(base + at) : NULL,
                           kept ? (float *)(void *)(base + at + kept) : NULL,
                           from ? (int32_t *)(void *)(base + at + 2 * kept)
                                : NULL};
    at += 2 * kept + from;
  }
  return at;
}

static stage_buffers buffers_at(const mxu_layer *layer,
                                const mxu_layer_run *run, int k) {
  stage_buffers b;
  buffers_of(layer, layer->compiled->batch, k,
             run->arena + layer->compiled->scratch[0], &b);
  return b;
}

static mxu_status adaptive_plan(mxu_layer *layer, const mxu_backend *backend,
                                int batch, mxu_arena *layout) {
  (void)backend;
  size_t bytes = buffers_of(layer, batch, rank_of(layer) - 1, NULL, NULL);
  layer->compiled->scratch[0] = mxu_arena_reserve(layout, bytes);
  return MXU_OK;
}

/* Cell i of every outer row and inner value: the window's max (the first
 * of equals, as TensorFlow's pooling; where it came from into from) or
 * mean, summed in order, row by row of inner values. */
static void stage_forward(const stage *s, int max, const float *x, float *y,
                          int32_t *from) {
  int64_t inner = s->inner;
  for (int64_t o = 0; o < s->outer; o++)
    for (int64_t i = 0; i < s->out; i++) {
      int64_t begin = window_start(s, i), end = window_end(s, i);
      const float *in = x + o * s->length * inner;
      float *out = y + (o * s->out + i) * inner;
      int32_t *at = max ? from + (o * s->out + i) * inner : NULL;
      memcpy(out, in + begin * inner, (size_t)inner * sizeof(float));
      for (int64_t j = 0; max && j < inner; j++) at[j] = (int32_t)begin;
      for (int64_t l = begin + 1; l < end; l++) {
        const float *row = in + l * inner;
        if (!max)
          for (int64_t j = 0; j < inner; j++) out[j] += row[j];
        for (int64_t j = 0; max && j < inner; j++)
          if (row[j] > out[j]) out[j] = row[j], at[j] = (int32_t)l;
      }
      float count = (float)(end - begin);
      for (int64_t j = 0; !max && j < inner; j++) out[j] /= count;
    }
}

static void stage_backward(const stage *s, int max, const float *dy,
                           const int32_t *from, float *dx) {
  memset(dx, 0, (size_t)(s->outer * s->length * s->inner) * sizeof(float));
  for (int64_t o = 0; o < s->outer; o++)
    for (int64_t i = 0; i < s->out; i++) {
      int64_t begin = window_start(s, i), end = window_end(s, i);
      const float *g = dy + (o * s->out + i) * s->inner;
      float *d = dx + o * s->length * s->inner;
      if (max) {
        const int32_t *at = from + (o * s->out + i) * s->inner;
        for (int64_t j = 0; j < s->inner; j++) d[at[j] * s->inner + j] += g[j];
        continue;
      }
      float share = 1.0f / (float)(end - begin);
      for (int64_t l = begin; l < end; l++)
        for (int64_t j = 0; j < s->inner; j++)
          d[l * s->inner + j] += g[j] * share;
    }
}

static void adaptive_forward(mxu_layer *layer, const mxu_layer_run *run) {
  const float *x = run->x;
  for (int k = 0; k < rank_of(layer); k++) {
    stage s = stage_of(layer, layer->compiled->batch, k);
    stage_buffers b = buffers_at(layer, run, k);
    float *y = b.y ? b.y : run->y;
    stage_forward(&s, is_max(layer), x, y, b.from);
    x = y;
  }
}

static void adaptive_backward(mxu_layer *layer, const mxu_layer_run *run) {
  if (!run->need_dx) return;
  const float *dy = run->dy;
  for (int k = rank_of(layer) - 1; k >= 0; k--) {
    stage s = stage_of(layer, layer->compiled->batch, k);
    float *dx = k ? buffers_at(layer, run, k - 1).dy : run->dx;
    stage_backward(&s, is_max(layer), dy, buffers_at(layer, run, k).from, dx);
    dy = dx;
  }
}

/* Per output of each stage: its window's compares or adds, and as many
 * backward. */
static double adaptive_flops(const mxu_layer *layer,
                             const mxu_flops_step *step) {
  double total = 0.0;
  for (int k = 0; k < rank_of(layer); k++) {
    stage s = stage_of(layer, 1, k);
    double window = (double)(s.length + s.out - 1) / (double)s.out + 1.0;
    total += (double)(s.outer * s.out * s.inner) * window;
  }
  return total * (step->need_dx ? 2.0 : 1.0);
}

/* Each stage as its cells' slices, reduced and put side by side. */
static mxu_hlo_value adaptive_emit(const mxu_layer *layer, mxu_emit *e) {
  mxu_hlo *h = e->h;
  mxu_hlo_value y = e->in[0];
  const int64_t axis[1] = {1};
  for (int k = 0; k < rank_of(layer); k++) {
    stage s = stage_of(layer, e->batch, k);
    int64_t view[3] = {s.outer, s.length, s.inner};
    int64_t cell[3] = {s.outer, 1, s.inner};
    mxu_hlo_value x =
        mxu_hlo_reshape(h, y, mxu_hlo_shape_make(MXU_HLO_F32, 3, view));
    mxu_hlo_value pooled = 0;
    for (int64_t i = 0; i < s.out; i++) {
      int64_t begin = window_start(&s, i), end = window_end(&s, i);
      int64_t start[3] = {0, begin, 0}, limit[3] = {s.outer, end, s.inner};
      int64_t stride[3] = {1, 1, 1};
      mxu_hlo_value v =
          mxu_hlo_reduce(h, mxu_hlo_slice(h, x, start, limit, stride),
                         is_max(layer) ? MXU_HLO_MAX : MXU_HLO_SUM, 1, axis);
      if (!is_max(layer))
        v = mxu_hlo_binary(h, MXU_HLO_DIVIDE, v,
                           mxu_hlo_full_like(h, v, (double)(end - begin)));
      v = mxu_hlo_reshape(h, v, mxu_hlo_shape_make(MXU_HLO_F32, 3, cell));
      pooled = i ? mxu_hlo_concatenate(h, pooled, v, 1) : v;
    }
    y = pooled;
  }
  return mxu_hlo_reshape(h, y, mxu_batch_shape(e->batch, &layer->out_shape));
}

/* ---- Keras' JSON --------------------------------------------------------- */

static const char *const adaptive_keys[] = {"output_size", "data_format", NULL};

static mxu_status read_adaptive(const mxu_json_where *where,
                                const cJSON *config, mxu_json_node *node,
                                const char *name, int max, int rank) {
  mxu_adaptive_pool_config c = {name, {0, 0, 0}};
  if (rank == 1)
    MXU_TRY(mxu_json_int_one(where, config, "output_size", MXU_JSON_REQUIRED,
                             c.output_size));
  else if (rank == 2)
    MXU_TRY(mxu_json_int_pair(where, config, "output_size", MXU_JSON_REQUIRED,
                              c.output_size));
  else
    MXU_TRY(mxu_json_int_triple(where, config, "output_size", MXU_JSON_REQUIRED,
                                c.output_size));
  MXU_TRY(mxu_json_data_format(where, config));
  mxu_tensor_id x = node->inputs[0];
  return mxu_json_applied(
      where, node,
      max ? mxu_apply_adaptive_max_pooling(node->model, &c, x)
          : mxu_apply_adaptive_average_pooling(node->model, &c, x));
}

static void write_adaptive(mxu_json_out *out, const mxu_layer *layer,
                           cJSON *config) {
  const int *size = layer->config.adaptive.output_size;
  if (rank_of(layer) == 1)
    mxu_json_put_one(out, config, "output_size", size[0]);
  else if (rank_of(layer) == 2)
    mxu_json_put_pair(out, config, "output_size", size);
  else
    mxu_json_put_triple(out, config, "output_size", size);
  mxu_json_put_string(out, config, "data_format", "channels_last");
}

#define ADAPTIVE_READER(fn, max, rank)                                         \
  static mxu_status fn(const mxu_json_where *where, const cJSON *config,       \
                       mxu_json_node *node, const char *name) {                \
    return read_adaptive(where, config, node, name, max, rank);                \
  }
ADAPTIVE_READER(read_average1d, 0, 1)
ADAPTIVE_READER(read_average2d, 0, 2)
ADAPTIVE_READER(read_average3d, 0, 3)
ADAPTIVE_READER(read_max1d, 1, 1)
ADAPTIVE_READER(read_max2d, 1, 2)
ADAPTIVE_READER(read_max3d, 1, 3)

#define ADAPTIVE_CLASS(name, reader)                                           \
  {                                                                            \
    .class_name = name, .config_keys = adaptive_keys, .read_config = reader,   \
    .write_config = write_adaptive, .min_inputs = 1, .max_inputs = 1,          \
    .infer = adaptive_infer, .plan = adaptive_plan,                            \
    .forward = adaptive_forward, .backward = adaptive_backward,                \
    .flops = adaptive_flops, .emit = adaptive_emit,                            \
  }

const mxu_layer_class mxu_adaptive_pooling_classes[2][3] = {
    {ADAPTIVE_CLASS("AdaptiveAveragePooling1D", read_average1d),
     ADAPTIVE_CLASS("AdaptiveAveragePooling2D", read_average2d),
     ADAPTIVE_CLASS("AdaptiveAveragePooling3D", read_average3d)},
    {ADAPTIVE_CLASS("AdaptiveMaxPooling1D", read_max1d),
     ADAPTIVE_CLASS("AdaptiveMaxPooling2D", read_max2d),
     ADAPTIVE_CLASS("AdaptiveMaxPooling3D", read_max3d)}};
