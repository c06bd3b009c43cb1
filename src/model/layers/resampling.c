/* resampling.c — UpSampling2D: nearest (each pixel repeated) or bilinear
 * as TensorFlow's resize computes it (half-pixel centres: output pixel o
 * reads input (o + 0.5) / scale - 0.5, its two neighbours clamped to the
 * image), which both Keras versions call. Backward spreads each output
 * gradient over the pixels it read, with the same weights. */
#include "model/layers/layers.h"

#include <limits.h>
#include <math.h>
#include <string.h>

/* An output row's or column's two input taps and the second's weight. */
typedef struct tap {
  int lo, hi;
  float frac;
} tap;

static tap tap_at(int o, int scale, int in, int bilinear) {
  if (!bilinear) return (tap){o / scale, o / scale, 0.0f};
  float at = ((float)o + 0.5f) / (float)scale - 0.5f;
  float below = floorf(at);
  int lo = below < 0.0f ? 0 : (int)below;
  int hi = (int)ceilf(at);
  if (hi > in - 1) hi = in - 1;
  if (hi < 0) hi = 0;
  return (tap){lo, hi, at - below};
}

static mxu_status upsampling_infer(mxu_layer *layer) {
  const mxu_upsampling2d_config *c = &layer->config.upsampling;
  if (layer->in_shape.rank != 3)
    return mxu_fail(MXU_ERR_SHAPE,
                    "%s: UpSampling2D takes (height, width, channels) images",
                    layer->name);
  if (c->size[0] < 1 || c->size[1] < 1 || c->size[0] > 1 << 16 ||
      c->size[1] > 1 << 16)
    return mxu_fail(MXU_ERR_ARG, "%s: size %dx%d must be in 1..65536",
                    layer->name, c->size[0], c->size[1]);
  int64_t dims[3] = {layer->in_shape.dims[0] * c->size[0],
                     layer->in_shape.dims[1] * c->size[1],
                     layer->in_shape.dims[2]};
  if (dims[0] > INT_MAX || dims[1] > INT_MAX)
    return mxu_fail(MXU_ERR_SHAPE, "%s: the output is too large", layer->name);
  layer->out_shape = mxu_shape_make(3, dims);
  return MXU_OK;
}

typedef struct geometry {
  int h, w, ch, out_h, out_w;
} geometry;

static geometry geometry_of(const mxu_layer *layer) {
  const mxu_shape *in = &layer->in_shape, *out = &layer->out_shape;
  return (geometry){(int)in->dims[0], (int)in->dims[1], (int)in->dims[2],
                    (int)out->dims[0], (int)out->dims[1]};
}

/* TensorFlow's order: top and bottom lerps across, then down. */
static void upsampling_forward(mxu_layer *layer, const mxu_layer_run *run) {
  const mxu_upsampling2d_config *c = &layer->config.upsampling;
  geometry g = geometry_of(layer);
  for (int64_t n = 0; n < layer->compiled->batch; n++) {
    const float *x = run->x + n * g.h * g.w * g.ch;
    float *y = run->y + n * g.out_h * g.out_w * g.ch;
    for (int r = 0; r < g.out_h; r++) {
      tap ty = tap_at(r, c->size[0], g.h, c->bilinear);
      for (int col = 0; col < g.out_w; col++) {
        tap tx = tap_at(col, c->size[1], g.w, c->bilinear);
        const float *tl = x + ((size_t)ty.lo * g.w + tx.lo) * g.ch;
        const float *tr = x + ((size_t)ty.lo * g.w + tx.hi) * g.ch;
        const float *bl = x + ((size_t)ty.hi * g.w + tx.lo) * g.ch;
        const float *br = x + ((size_t)ty.hi * g.w + tx.hi) * g.ch;
        float *out = y + ((size_t)r * g.out_w + col) * g.ch;
        for (int k = 0; k < g.ch; k++) {
          float top = tl[k] + (tr[k] - tl[k]) * tx.frac;
          float bottom = bl[k] + (br[k] - bl[k]) * tx.frac;
          out[k] = top + (bottom - top) * ty.frac;
        }
      }
    }
  }
}

static void upsampling_backward(mxu_layer *layer, const mxu_layer_run *run) {
  if (!run->need_dx) return;
  const mxu_upsampling2d_config *c = &layer->config.upsampling;
  geometry g = geometry_of(layer);
  size_t per = (size_t)g.h * g.w * g.ch;
  memset(run->dx, 0, (size_t)layer->compiled->batch * per * sizeof(float));
  for (int64_t n = 0; n < layer->compiled->batch; n++) {
    float *dx = run->dx + n * per;
    const float *dy = run->dy + n * g.out_h * g.out_w * g.ch;
    for (int r = 0; r < g.out_h; r++) {
      tap ty = tap_at(r, c->size[0], g.h, c->bilinear);
      for (int col = 0; col < g.out_w; col++) {
        tap tx = tap_at(col, c->size[1], g.w, c->bilinear);
        const float *d = dy + ((size_t)r * g.out_w + col) * g.ch;
        float *tl = dx + ((size_t)ty.lo * g.w + tx.lo) * g.ch;
        float *tr = dx + ((size_t)ty.lo * g.w + tx.hi) * g.ch;
        float *bl = dx + ((size_t)ty.hi * g.w + tx.lo) * g.ch;
        float *br = dx + ((size_t)ty.hi * g.w + tx.hi) * g.ch;
        for (int k = 0; k < g.ch; k++) {
          float top = d[k] * (1.0f - ty.frac), bottom = d[k] * ty.frac;
          tl[k] += top * (1.0f - tx.frac);
          tr[k] += top * tx.frac;
          bl[k] += bottom * (1.0f - tx.frac);
          br[k] += bottom * tx.frac;
        }
      }
    }
  }
}

/* Bilinear: three lerps of two flops per value. */
static double upsampling_flops(const mxu_layer *layer,
                               const mxu_flops_step *step) {
  if (!layer->config.upsampling.bilinear) return 0.0;
  return (double)mxu_shape_count(&layer->out_shape) *
         (step->need_dx ? 12.0 : 6.0);
}

static const char *const upsampling_keys[] = {"size", "interpolation",
                                              "data_format", NULL};

static mxu_status read_upsampling(const mxu_json_where *where,
                                  const cJSON *config, mxu_json_node *node,
                                  const char *name) {
  mxu_upsampling2d_config c = {name, {2, 2}, 0};
  const char *interpolation = "nearest";
  MXU_TRY(mxu_json_int_pair(where, config, "size", MXU_JSON_OPTIONAL, c.size));
  MXU_TRY(mxu_json_string(where, config, "interpolation", MXU_JSON_OPTIONAL,
                          &interpolation));
  MXU_TRY(mxu_json_data_format(where, config));
  c.bilinear = strcmp(interpolation, "bilinear") == 0;
  if (!c.bilinear && strcmp(interpolation, "nearest") != 0)
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                         "interpolation '%s' is not supported (nearest or "
                         "bilinear)",
                         interpolation);
  return mxu_json_applied(
      where, node, mxu_apply_upsampling2d(node->model, &c, node->inputs[0]));
}

static void write_upsampling(mxu_json_out *out, const mxu_layer *layer,
                             cJSON *config) {
  const mxu_upsampling2d_config *c = &layer->config.upsampling;
  mxu_json_put_pair(out, config, "size", c->size);
  mxu_json_put_string(out, config, "interpolation",
                      c->bilinear ? "bilinear" : "nearest");
  mxu_json_put_string(out, config, "data_format", "channels_last");
}

const mxu_layer_class mxu_upsampling2d_class = {
    .class_name = "UpSampling2D",
    .config_keys = upsampling_keys,
    .read_config = read_upsampling,
    .write_config = write_upsampling,
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = upsampling_infer,
    .flops = upsampling_flops,
    .plan = mxu_no_plan,
    .forward = upsampling_forward,
    .backward = upsampling_backward,
};
