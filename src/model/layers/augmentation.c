/* augmentation.c — Keras' augmentation layers: RandomFlip,
 * RandomTranslation, RandomRotation, RandomZoom, RandomContrast,
 * RandomBrightness, RandomCrop, and Keras 3's colour layers
 * RandomGrayscale, RandomInvert, Solarization and RandomPosterization. In
 * training each image gets its own transform, drawn from this run's
 * counter-based stream at its row of the replica (so slices draw what the whole
 * would) and applied by core's image transform; backward is that transform's
 * adjoint. Inference passes the images through, as Keras does. */
#include "model/layers/layers.h"

#include <math.h>
#include <string.h>

mxu_random_config mxu_random_defaults(mxu_random_kind kind) {
  return (mxu_random_config){.kind = kind,
                             .horizontal = 1,
                             .vertical = 1,
                             .fill_mode = MXU_FILL_REFLECT,
                             .value_range = {0.0f, 255.0f}};
}

/* Where each draw of a sample lives in the stream. */
enum { DRAW_A, DRAW_B, DRAW_C, DRAWS_PER_SAMPLE = 4 };

static double draw(const mxu_rng *rng, int64_t sample, int which,
                   const float range[2]) {
  float u;
  mxu_rng_uniform(rng, (uint64_t)sample * DRAWS_PER_SAMPLE + (uint64_t)which,
                  &u, 1);
  return range[0] + ((double)range[1] - range[0]) * u;
}

/* Keras' semantics in ImageDataGenerator's terms: its tx, ty sample from
 * the other side (a shift down is ty < 0), its theta is in degrees and its
 * zoom factors are 1 + the zoom. */
static mxu_augment_params draw_params(const mxu_random_config *c,
                                      const mxu_rng *rng, int64_t sample, int h,
                                      int w) {
  static const float half[2] = {0.0f, 1.0f};
  mxu_augment_params p = {.zx = 1, .zy = 1};
  switch (c->kind) {
  case MXU_RANDOM_FLIP:
    p.flip_horizontal = c->horizontal && draw(rng, sample, DRAW_A, half) < 0.5;
    p.flip_vertical = c->vertical && draw(rng, sample, DRAW_B, half) < 0.5;
    break;
  case MXU_RANDOM_TRANSLATION:
    p.ty = -draw(rng, sample, DRAW_A, c->height) * h;
    p.tx = -draw(rng, sample, DRAW_B, c->width) * w;
    break;
  case MXU_RANDOM_ROTATION:
    p.theta = draw(rng, sample, DRAW_A, c->factor) * 360.0;
    break;
  case MXU_RANDOM_ZOOM:
    p.zy = 1.0 + draw(rng, sample, DRAW_A, c->height);
    p.zx = c->has_width ? 1.0 + draw(rng, sample, DRAW_B, c->width) : p.zy;
    break;
  case MXU_RANDOM_SHEAR: { /* Keras 3 negates both with probability 1/2 */
    double sign = draw(rng, sample, DRAW_C, half) > 0.5 ? -1.0 : 1.0;
    p.shear_y = sign * draw(rng, sample, DRAW_A, c->height);
    p.shear_x = sign * draw(rng, sample, DRAW_B, c->width);
    break;
  }
  default:
    break; /* not an affine map: contrast_run, brightness_run,
              color_run, crop_run */
  }
  return p;
}

static int is_color(mxu_random_kind kind) {
  return (kind >= MXU_RANDOM_GRAYSCALE && kind <= MXU_RANDOM_POSTERIZATION) ||
         kind >= MXU_RANDOM_COLOR_DEGENERATION;
}

/* The colour layers' own checks: RGB images for RandomGrayscale, a range
 * to map from for the others, factors in Keras' bounds. */
static mxu_status color_infer(const mxu_layer *layer) {
  const mxu_random_config *c = &layer->config.random;
  float low = c->kind == MXU_RANDOM_POSTERIZATION        ? 1.0f
              : c->kind == MXU_RANDOM_COLOR_DEGENERATION ? -1.0f
                                                         : 0.0f,
        high = c->kind == MXU_RANDOM_POSTERIZATION ? 8.0f : 1.0f;
  const float *ranges[2] = {c->factor, c->threshold};
  for (int i = 0; i < (c->kind == MXU_SOLARIZATION ? 2 : 1); i++)
    if (!(ranges[i][0] >= low && ranges[i][0] <= ranges[i][1] &&
          ranges[i][1] <= high))
      return mxu_fail(MXU_ERR_ARG, "%s: factor [%g, %g] must be in [%g, %g]",
                      layer->name, (double)ranges[i][0], (double)ranges[i][1],
                      (double)low, (double)high);
  if (!(c->value_range[0] < c->value_range[1]))
    return mxu_fail(MXU_ERR_ARG, "%s: value_range [%g, %g] must be increasing",
                    layer->name, (double)c->value_range[0],
                    (double)c->value_range[1]);
  if ((c->kind == MXU_RANDOM_GRAYSCALE ||
       c->kind == MXU_RANDOM_COLOR_DEGENERATION) &&
      layer->in_shape.dims[2] != 3)
    return mxu_fail(MXU_ERR_SHAPE,
                    "%s: %s takes RGB images (3 channels), got %lld",
                    layer->name, layer->cls->class_name,
                    (long long)layer->in_shape.dims[2]);
  return MXU_OK;
}

static mxu_status random_infer(mxu_layer *layer) {
  const mxu_random_config *c = &layer->config.random;
  int clips =
      c->kind == MXU_RANDOM_CONTRAST || c->kind == MXU_RANDOM_BRIGHTNESS;
  const float *ranges[3] = {c->height, c->width,
                            clips ? c->value_range : c->factor};
  for (int i = 0; i < 3; i++)
    if (!isfinite(ranges[i][0]) || !isfinite(ranges[i][1]) ||
        ranges[i][0] > ranges[i][1])
      return mxu_fail(MXU_ERR_ARG,
                      "%s: a range [%g, %g] must be finite and in order",
                      layer->name, (double)ranges[i][0], (double)ranges[i][1]);
  if (c->kind == MXU_RANDOM_ZOOM &&
      (c->height[0] <= -1.0f || (c->has_width && c->width[0] <= -1.0f)))
    return mxu_fail(MXU_ERR_ARG,
                    "%s: a zoom range must stay above -1 (a zoom factor of "
                    "0)",
                    layer->name);
  if (layer->in_shape.rank != 3)
    return mxu_fail(MXU_ERR_SHAPE,
                    "%s: %s takes (height, width, channels) images",
                    layer->name, layer->cls->class_name);
  if (is_color(c->kind)) MXU_TRY(color_infer(layer));
  return mxu_same_shape_infer(layer);
}

typedef struct image_dims {
  int h, w, c;
  int64_t per;
} image_dims;

static image_dims dims_of(const mxu_layer *layer) {
  const mxu_shape *s = &layer->in_shape;
  return (image_dims){(int)s->dims[0], (int)s->dims[1], (int)s->dims[2],
                      mxu_shape_count(s)};
}

/* RandomContrast: an image's factor, as Keras 3 draws it (one per
 * image), from [1 - a, 1 + b]. */
static double contrast_of(const mxu_random_config *c, const mxu_rng *rng,
                          int64_t sample) {
  static const float unit[2] = {0.0f, 1.0f};
  double u = draw(rng, sample, DRAW_A, unit);
  return 1.0 - c->factor[0] + u * ((double)c->factor[0] + c->factor[1]);
}

/* Each channel's mean over the image, into mean[channels]. */
static void channel_means(const float *x, image_dims d, double *mean) {
  for (int k = 0; k < d.c; k++) mean[k] = 0.0;
  for (int64_t i = 0; i < d.per; i++) mean[i % d.c] += x[i];
  for (int k = 0; k < d.c; k++) mean[k] /= (double)(d.per / d.c);
}

/* y = clip((x - mean) * c + mean); backward, where the clip let the value
 * through (as clip_by_value, ends included), dx = c g + (1 - c) mean(g)
 * per channel. mean is a scratch of channels doubles, twice. */
static void contrast_image(const mxu_random_config *c, double factor,
                           image_dims d, const float *x, const float *dy,
                           float *out, double *mean) {
  channel_means(x, d, mean);
  double *g_mean = mean + d.c;
  for (int k = 0; dy && k < d.c; k++) g_mean[k] = 0.0;
  for (int64_t i = 0; i < d.per; i++) {
    int k = (int)(i % d.c);
    double v = (x[i] - mean[k]) * factor + mean[k];
    int passes = v >= c->value_range[0] && v <= c->value_range[1];
    if (!dy)
      out[i] = (float)(v < c->value_range[0]   ? c->value_range[0]
                       : v > c->value_range[1] ? c->value_range[1]
                                               : v);
    else
      g_mean[k] += passes ? dy[i] : 0.0;
  }
  for (int k = 0; dy && k < d.c; k++) g_mean[k] /= (double)(d.per / d.c);
  for (int64_t i = 0; dy && i < d.per; i++) {
    int k = (int)(i % d.c);
    double v = (x[i] - mean[k]) * factor + mean[k];
    double g = v >= c->value_range[0] && v <= c->value_range[1] ? dy[i] : 0.0;
    out[i] = (float)(factor * g + (1.0 - factor) * g_mean[k]);
  }
}

static void contrast_run(const mxu_layer *layer, const mxu_layer_run *run,
                         int backward) {
  image_dims d = dims_of(layer);
  const mxu_random_config *c = &layer->config.random;
  double *mean = (double *)(void *)(run->arena + layer->compiled->scratch[0]);
  for (int64_t b = 0; b < layer->compiled->batch; b++) {
    double factor = contrast_of(c, &run->rng, run->row_offset + b);
    contrast_image(c, factor, d, run->x + b * d.per,
                   backward ? run->dy + b * d.per : NULL,
                   (backward ? run->dx : run->y) + b * d.per, mean);
  }
}

/* RandomBrightness: y = clip(x + delta), delta an image's draw from the
 * factor's range times value_range's width; backward, dy where the clip
 * let the value through (ends included, as clip_by_value's). */
static void brightness_run(const mxu_layer *layer, const mxu_layer_run *run,
                           int backward) {
  image_dims d = dims_of(layer);
  const mxu_random_config *c = &layer->config.random;
  float low = c->value_range[0], high = c->value_range[1];
  for (int64_t b = 0; b < layer->compiled->batch; b++) {
    float delta =
        (float)(draw(&run->rng, run->row_offset + b, DRAW_A, c->factor) *
                ((double)high - low));
    const float *x = run->x + b * d.per, *dy = run->dy + b * d.per;
    float *out = (backward ? run->dx : run->y) + b * d.per;
    for (int64_t i = 0; i < d.per; i++) {
      float v = x[i] + delta;
      if (backward)
        out[i] = v >= low && v <= high ? dy[i] : 0.0f;
      else
        out[i] = v < low ? low : v > high ? high : v;
    }
  }
}

/* ---- the colour layers ----------------------------------------------------
 * Each image's draw, then a map of its values (RandomGrayscale: of each
 * pixel's channels); backward, that map's derivative. */

typedef struct color_draw {
  int apply;            /* RandomGrayscale, RandomInvert */
  float add, threshold; /* Solarization, on [0, 255] */
  int shift;            /* RandomPosterization: 8 - the bits kept */
  float blend; /* RandomColorDegeneration: f; RandomSharpness: s = 2 f */
} color_draw;

static color_draw color_of(const mxu_random_config *c, const mxu_rng *rng,
                           int64_t sample) {
  static const float unit[2] = {0.0f, 1.0f};
  color_draw d = {1, 0.0f, 0.0f, 0, 0.0f};
  if (c->kind == MXU_RANDOM_COLOR_DEGENERATION) {
    d.blend = (float)draw(rng, sample, DRAW_A, c->factor);
  } else if (c->kind == MXU_RANDOM_SHARPNESS) {
    d.blend = 2.0f * (float)draw(rng, sample, DRAW_A, c->factor);
  } else if (c->kind == MXU_RANDOM_GRAYSCALE) {
    d.apply = draw(rng, sample, DRAW_A, unit) < c->factor[1];
  } else if (c->kind == MXU_RANDOM_INVERT) {
    double p = draw(rng, sample, DRAW_A, c->factor);
    d.apply = draw(rng, sample, DRAW_B, unit) < p;
  } else if (c->kind == MXU_SOLARIZATION) {
    /* Keras' ranges: the lower end as given, the upper times 255. */
    float add[2] = {c->factor[0], c->factor[1] * 255.0f},
          threshold[2] = {c->threshold[0], c->threshold[1] * 255.0f};
    d.add = (float)draw(rng, sample, DRAW_A, add);
    d.threshold = (float)draw(rng, sample, DRAW_B, threshold);
  } else {
    int low = (int)c->factor[0], high = (int)c->factor[1];
    int bits =
        low == high
            ? low
            : low + (int)mxu_rng_below(
                        rng, (uint64_t)sample * DRAWS_PER_SAMPLE + DRAW_A,
                        (uint32_t)(high - low));
    d.shift = 8 - bits;
  }
  return d;
}

/* x from value_range to [0, 255] and back, as Keras' _transform_value_range
 * (nothing where value_range is [0, 255]). */
static float to_byte_range(const mxu_random_config *c, float x) {
  float low = c->value_range[0], high = c->value_range[1];
  if (low == 0.0f && high == 255.0f) return x;
  return (x - low) / (high - low) * 255.0f;
}

static float from_byte_range(const mxu_random_config *c, float x) {
  float low = c->value_range[0], high = c->value_range[1];
  if (low == 0.0f && high == 255.0f) return x;
  return x / 255.0f * (high - low) + low;
}

/* An image's value x mapped by its draw d; its derivative in *slope (the
 * two range maps' scales cancel). */
static float color_value(const mxu_random_config *c, const color_draw *d,
                         float x, float *slope) {
  if (c->kind == MXU_RANDOM_INVERT) {
    *slope = -1.0f;
    return c->value_range[1] - x;
  }
  float v = to_byte_range(c, x);
  if (c->kind == MXU_RANDOM_POSTERIZATION) {
    *slope = 0.0f;
    v = v > 0.0f ? (v < 255.0f ? v : 255.0f) : 0.0f; /* NaN too: an int */
    return from_byte_range(c, (float)(((int)v >> d->shift) << d->shift));
  }
  /* Solarization: the clip passes the gradient at its ends too, as
   * clip_by_value. */
  v += d->add;
  *slope = v < 0.0f || v > 255.0f ? 0.0f : 1.0f;
  v = v < 0.0f ? 0.0f : v > 255.0f ? 255.0f : v;
  if (!(v < d->threshold)) {
    v = 255.0f - v;
    *slope = -*slope;
  }
  return from_byte_range(c, v);
}

/* Keras' rgb_to_grayscale weights. */
static const float luma[3] = {0.2989f, 0.5870f, 0.1140f};

/* The luma is each channel's value. */
static void grayscale_image(int64_t per, const float *x, const float *dy,
                            float *out) {
  for (int64_t p = 0; p < per; p += 3) {
    if (dy) {
      float sum = dy[p] + dy[p + 1] + dy[p + 2];
      for (int k = 0; k < 3; k++) out[p + k] = luma[k] * sum;
    } else {
      float g = luma[0] * x[p] + luma[1] * x[p + 1] + luma[2] * x[p + 2];
      out[p] = out[p + 1] = out[p + 2] = g;
    }
  }
}

/* RandomColorDegeneration: x + f (luma - x), clipped to value_range (the
 * clip passing the gradient at its ends, as clip_by_value). */
static void degenerate_image(const mxu_random_config *c, float f, int64_t per,
                             const float *x, const float *dy, float *out) {
  float low = c->value_range[0], high = c->value_range[1];
  for (int64_t p = 0; p < per; p += 3) {
    float g = luma[0] * x[p] + luma[1] * x[p + 1] + luma[2] * x[p + 2];
    float v[3], pass[3], through = 0.0f;
    for (int k = 0; k < 3; k++) {
      v[k] = x[p + k] + f * (g - x[p + k]);
      pass[k] = v[k] >= low && v[k] <= high ? 1.0f : 0.0f;
      if (dy) through += f * pass[k] * dy[p + k];
    }
    for (int k = 0; k < 3; k++)
      out[p + k] = dy ? (1.0f - f) * pass[k] * dy[p + k] + luma[k] * through
                      : fminf(fmaxf(v[k], low), high);
  }
}

/* Keras' smoothing filter at (r, col) of channel k: 5/13 of the pixel and
 * 1/13 of each neighbour, none past the edges (a same convolution). It is
 * symmetric, so also its own transpose. */
static float smooth_at(image_dims d, const float *x, int r, int col, int k) {
  float sum = 0.0f;
  for (int dr = -1; dr <= 1; dr++)
    for (int dc = -1; dc <= 1; dc++) {
      int rr = r + dr, cc = col + dc;
      if (rr < 0 || rr >= d.h || cc < 0 || cc >= d.w) continue;
      float weight = dr || dc ? 1.0f / 13.0f : 5.0f / 13.0f;
      sum += weight * x[((int64_t)rr * d.w + cc) * d.c + k];
    }
  return sum;
}

/* RandomSharpness: s x + (1 - s) smooth(x), clipped; backward, with u the
 * gradient the clip passes (kept in `passed`), s u + (1 - s) smooth(u). */
static void sharpen_image(const mxu_random_config *c, image_dims d, float s,
                          const float *x, const float *dy, float *passed,
                          float *out) {
  float low = c->value_range[0], high = c->value_range[1];
  for (int r = 0; r < d.h; r++)
    for (int col = 0; col < d.w; col++)
      for (int k = 0; k < d.c; k++) {
        int64_t i = ((int64_t)r * d.w + col) * d.c + k;
        float v = x[i] + (1.0f - s) * (smooth_at(d, x, r, col, k) - x[i]);
        if (dy)
          passed[i] = v >= low && v <= high ? dy[i] : 0.0f;
        else
          out[i] = fminf(fmaxf(v, low), high);
      }
  for (int r = 0; dy && r < d.h; r++)
    for (int col = 0; col < d.w; col++)
      for (int k = 0; k < d.c; k++) {
        int64_t i = ((int64_t)r * d.w + col) * d.c + k;
        out[i] = s * passed[i] + (1.0f - s) * smooth_at(d, passed, r, col, k);
      }
}

static void color_run(const mxu_layer *layer, const mxu_layer_run *run,
                      int backward) {
  image_dims d = dims_of(layer);
  const mxu_random_config *c = &layer->config.random;
  for (int64_t b = 0; b < layer->compiled->batch; b++) {
    color_draw k = color_of(c, &run->rng, run->row_offset + b);
    const float *x = run->x + b * d.per;
    const float *dy = backward ? run->dy + b * d.per : NULL;
    float *out = (backward ? run->dx : run->y) + b * d.per;
    if (!k.apply) {
      memcpy(out, backward ? dy : x, (size_t)d.per * sizeof(float));
    } else if (c->kind == MXU_RANDOM_GRAYSCALE) {
      grayscale_image(d.per, x, dy, out);
    } else if (c->kind == MXU_RANDOM_COLOR_DEGENERATION) {
      degenerate_image(c, k.blend, d.per, x, dy, out);
    } else if (c->kind == MXU_RANDOM_SHARPNESS) {
      float *passed =
          (float *)(void *)(run->arena + layer->compiled->scratch[0]);
      sharpen_image(c, d, k.blend, x, dy, passed, out);
    } else {
      for (int64_t i = 0; i < d.per; i++) {
        float slope, v = color_value(c, &k, x[i], &slope);
        out[i] = backward ? slope * dy[i] : v;
      }
    }
  }
}

/* RandomContrast's per-channel means (scratch[0]: twice channels
 * doubles). */
static mxu_status random_plan(mxu_layer *layer, const mxu_backend *backend,
                              int batch, mxu_arena *layout) {
  (void)backend;
  (void)batch;
  if (layer->config.random.kind == MXU_RANDOM_CONTRAST)
    layer->compiled->scratch[0] = mxu_arena_reserve(
        layout, 2 * (size_t)layer->in_shape.dims[2] * sizeof(double));
  if (layer->config.random.kind == MXU_RANDOM_SHARPNESS) /* an image */
    layer->compiled->scratch[0] = mxu_arena_reserve(
        layout, (size_t)mxu_shape_count(&layer->in_shape) * sizeof(float));
  return MXU_OK;
}

static void random_forward(mxu_layer *layer, const mxu_layer_run *run) {
  image_dims d = dims_of(layer);
  const mxu_random_config *c = &layer->config.random;
  int64_t batch = layer->compiled->batch;
  if (!run->training) {
    if (run->y != run->x)
      memcpy(run->y, run->x, (size_t)(batch * d.per) * sizeof(float));
    return;
  }
  if (c->kind == MXU_RANDOM_CONTRAST || c->kind == MXU_RANDOM_BRIGHTNESS) {
    (c->kind == MXU_RANDOM_CONTRAST ? contrast_run : brightness_run)(layer, run,
                                                                     0);
    return;
  }
  if (is_color(c->kind)) {
    color_run(layer, run, 0);
    return;
  }
  for (int64_t b = 0; b < batch; b++) {
    mxu_augment_params p =
        draw_params(c, &run->rng, run->row_offset + b, d.h, d.w);
    mxu_augment_apply(&p, c->fill_mode, c->fill_value, run->x + b * d.per,
                      run->y + b * d.per, d.h, d.w, d.c);
  }
}

static void random_backward(mxu_layer *layer, const mxu_layer_run *run) {
  if (!run->need_dx) return;
  image_dims d = dims_of(layer);
  const mxu_random_config *c = &layer->config.random;
  if (c->kind == MXU_RANDOM_CONTRAST || c->kind == MXU_RANDOM_BRIGHTNESS) {
    (c->kind == MXU_RANDOM_CONTRAST ? contrast_run : brightness_run)(layer, run,
                                                                     1);
    return;
  }
  if (is_color(c->kind)) {
    color_run(layer, run, 1);
    return;
  }
  for (int64_t b = 0; b < layer->compiled->batch; b++) {
    mxu_augment_params p =
        draw_params(c, &run->rng, run->row_offset + b, d.h, d.w);
    mxu_augment_adjoint(&p, c->fill_mode, run->dy + b * d.per,
                        run->dx + b * d.per, d.h, d.w, d.c);
  }
}

/* Four taps of two multiplies and adds per value, each way. */
static double random_flops(const mxu_layer *layer, const mxu_flops_step *step) {
  return (double)mxu_shape_count(&layer->in_shape) *
         (step->need_dx ? 16.0 : 8.0);
}

/* ---- JSON -----------------------------------------------------------------
 * A factor is a number f (the range [-f, f]) or a pair [lower, upper];
 * tf.keras 2 writes rng_type, Keras 3 data_format; seeds are ignored
 * (mxu's draws are its own). */

static mxu_status read_range(const mxu_json_where *where, const cJSON *config,
                             const char *key, float range[2], int *given) {
  const cJSON *v = mxu_json_get(config, key);
  if (given) *given = v && !cJSON_IsNull(v);
  if (!v || cJSON_IsNull(v)) return MXU_OK;
  if (cJSON_IsNumber(v)) {
    range[0] = -(float)fabs(v->valuedouble);
    range[1] = (float)fabs(v->valuedouble);
    return MXU_OK;
  }
  if (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 2 &&
      cJSON_IsNumber(cJSON_GetArrayItem(v, 0)) &&
      cJSON_IsNumber(cJSON_GetArrayItem(v, 1))) {
    range[0] = (float)cJSON_GetArrayItem(v, 0)->valuedouble;
    range[1] = (float)cJSON_GetArrayItem(v, 1)->valuedouble;
    return MXU_OK;
  }
  char text[96];
  mxu_json_text(v, text, sizeof text);
  return mxu_json_fail(where, MXU_ERR_FORMAT,
                       "%s %s must be a number or a pair [lower, upper]", key,
                       text);
}

static mxu_status read_fill(const mxu_json_where *where, const cJSON *config,
                            mxu_random_config *c) {
  static const char *const modes[] = {"nearest", "constant", "reflect", "wrap"};
  const char *mode = NULL, *interpolation = NULL;
  MXU_TRY(
      mxu_json_string(where, config, "fill_mode", MXU_JSON_OPTIONAL, &mode));
  MXU_TRY(mxu_json_string(where, config, "interpolation", MXU_JSON_OPTIONAL,
                          &interpolation));
  MXU_TRY(mxu_json_float(where, config, "fill_value", MXU_JSON_OPTIONAL,
                         &c->fill_value));
  if (interpolation && strcmp(interpolation, "bilinear") != 0)
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                         "interpolation '%s' is not supported (only "
                         "'bilinear')",
                         interpolation);
  for (int m = 0; mode && m < 4; m++)
    if (strcmp(mode, modes[m]) == 0) {
      c->fill_mode = (mxu_fill_mode)m;
      return MXU_OK;
    }
  if (!mode) return MXU_OK;
  return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                       "fill_mode '%s' is not supported (nearest, constant, "
                       "reflect or wrap)",
                       mode);
}

/* value_range: a pair [low, high]; (0, 255) when none. */
static mxu_status read_value_range(const mxu_json_where *where,
                                   const cJSON *config, mxu_random_config *c) {
  const cJSON *v = mxu_json_get(config, "value_range");
  if (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 2 &&
      cJSON_IsNumber(v->child) && cJSON_IsNumber(v->child->next)) {
    c->value_range[0] = (float)v->child->valuedouble;
    c->value_range[1] = (float)v->child->next->valuedouble;
  } else if (v && !cJSON_IsNull(v)) {
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "value_range must be a pair [low, high]");
  }
  return MXU_OK;
}

/* Keras 3's _set_factor for the colour layers: a number f is [max(-|f|,
 * low), |f|], a pair is sorted; either within [low, high]. */
/* A pair as Keras sorts one it is given (lower, upper). */
static void in_order(float range[2]) {
  if (range[0] <= range[1]) return;
  float low = range[1];
  range[1] = range[0], range[0] = low;
}

static mxu_status read_bounded(const mxu_json_where *where, const cJSON *config,
                               const char *key, float low, float high,
                               float range[2]) {
  const cJSON *v = mxu_json_get(config, key);
  if (!v) return MXU_OK; /* the default, already in range */
  MXU_TRY(read_range(where, config, key, range, NULL));
  if (cJSON_IsNumber(v) && range[0] < low) range[0] = low;
  in_order(range);
  if (range[0] >= low && range[1] <= high) return MXU_OK;
  char text[96];
  mxu_json_text(v, text, sizeof text);
  return mxu_json_fail(where, MXU_ERR_FORMAT, "%s %s must be in [%g, %g]", key,
                       text, (double)low, (double)high);
}

/* The colour layers' options, with Keras 3's defaults: RandomGrayscale's
 * probability 0.5 (a number), RandomInvert's factor 1, Solarization's
 * factors 0, RandomPosterization's bits (1, 8)... as given. */
static mxu_status read_color(const mxu_json_where *where, const cJSON *config,
                             mxu_random_config *c) {
  MXU_TRY(read_value_range(where, config, c));
  switch (c->kind) {
  case MXU_RANDOM_GRAYSCALE:
    c->factor[0] = 0.0f, c->factor[1] = 0.5f;
    MXU_TRY(mxu_json_float(where, config, "factor", MXU_JSON_OPTIONAL,
                           &c->factor[1]));
    if (c->factor[1] >= 0.0f && c->factor[1] <= 1.0f) return MXU_OK;
    return mxu_json_fail(where, MXU_ERR_FORMAT, "factor %g must be in [0, 1]",
                         (double)c->factor[1]);
  case MXU_RANDOM_INVERT:
    c->factor[0] = 0.0f, c->factor[1] = 1.0f;
    return read_bounded(where, config, "factor", 0.0f, 1.0f, c->factor);
  case MXU_RANDOM_COLOR_DEGENERATION:
  case MXU_RANDOM_SHARPNESS: {
    float low = c->kind == MXU_RANDOM_SHARPNESS ? 0.0f : -1.0f;
    if (!mxu_json_get(config, "factor"))
      return mxu_json_fail(where, MXU_ERR_FORMAT, "factor is missing");
    return read_bounded(where, config, "factor", low, 1.0f, c->factor);
  }
  case MXU_SOLARIZATION:
    MXU_TRY(
        read_bounded(where, config, "addition_factor", 0.0f, 1.0f, c->factor));
    return read_bounded(where, config, "threshold_factor", 0.0f, 1.0f,
                        c->threshold);
  default:
    c->factor[0] = 1.0f, c->factor[1] = 8.0f;
    MXU_TRY(read_bounded(where, config, "factor", 1.0f, 8.0f, c->factor));
    if (c->factor[0] == (int)c->factor[0] && c->factor[1] == (int)c->factor[1])
      return MXU_OK;
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "factor [%g, %g] must be whole numbers of bits",
                         (double)c->factor[0], (double)c->factor[1]);
  }
}

/* factor: f (tf.keras 2: contrast in [1 - f, 1 + f]; brightness in [-f,
 * f]) or (a, b) (Keras 3 writes its own (0, f) for a contrast's f: [1, 1
 * + f]); value_range: Keras 3's clip, (0, 255) in both. */
static mxu_status read_contrast(const mxu_json_where *where,
                                const cJSON *config, mxu_random_config *c) {
  const cJSON *f = mxu_json_get(config, "factor");
  int brightness = c->kind == MXU_RANDOM_BRIGHTNESS;
  if (cJSON_IsNumber(f)) {
    c->factor[0] = c->factor[1] = (float)fabs(f->valuedouble);
    if (brightness) c->factor[0] = -c->factor[0];
  } else {
    MXU_TRY(read_range(where, config, "factor", c->factor, NULL));
  }
  MXU_TRY(read_value_range(where, config, c));
  if (brightness) { /* Keras sorts both */
    if (c->factor[0] > c->factor[1]) {
      float low = c->factor[1];
      c->factor[1] = c->factor[0], c->factor[0] = low;
    }
    if (c->value_range[0] > c->value_range[1]) {
      float low = c->value_range[1];
      c->value_range[1] = c->value_range[0], c->value_range[0] = low;
    }
    if (c->factor[0] >= -1.0f && c->factor[1] <= 1.0f) return MXU_OK;
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "factor (%g, %g) must be in [-1, 1]",
                         (double)c->factor[0], (double)c->factor[1]);
  }
  if (!(c->factor[0] >= 0.0f && c->factor[0] <= 1.0f && c->factor[1] >= 0.0f))
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "factor (%g, %g) must be in [0, 1] and >= 0",
                         (double)c->factor[0], (double)c->factor[1]);
  return MXU_OK;
}

static mxu_status read_random(const mxu_json_where *where, const cJSON *config,
                              mxu_json_node *node, const char *name,
                              mxu_random_kind kind) {
  mxu_random_config c = mxu_random_defaults(kind);
  c.name = name;
  MXU_TRY(mxu_json_data_format(where, config));
  if (kind == MXU_RANDOM_FLIP) {
    const char *mode = "horizontal_and_vertical";
    MXU_TRY(mxu_json_string(where, config, "mode", MXU_JSON_OPTIONAL, &mode));
    c.horizontal = strstr(mode, "horizontal") != NULL;
    c.vertical = strstr(mode, "vertical") != NULL;
    if (strcmp(mode, "horizontal") != 0 && strcmp(mode, "vertical") != 0 &&
        strcmp(mode, "horizontal_and_vertical") != 0)
      return mxu_json_fail(where, MXU_ERR_FORMAT,
                           "mode '%s' must be horizontal, vertical or "
                           "horizontal_and_vertical",
                           mode);
  } else if (kind == MXU_RANDOM_CONTRAST || kind == MXU_RANDOM_BRIGHTNESS) {
    MXU_TRY(read_contrast(where, config, &c));
  } else if (is_color(kind)) {
    MXU_TRY(read_color(where, config, &c));
  } else {
    MXU_TRY(read_fill(where, config, &c));
  }
  if (kind == MXU_RANDOM_ROTATION)
    MXU_TRY(read_range(where, config, "factor", c.factor, NULL));
  if (kind == MXU_RANDOM_TRANSLATION || kind == MXU_RANDOM_ZOOM) {
    MXU_TRY(read_range(where, config, "height_factor", c.height, NULL));
    MXU_TRY(read_range(where, config, "width_factor", c.width, &c.has_width));
  }
  if (kind == MXU_RANDOM_SHEAR) {
    MXU_TRY(read_range(where, config, "y_factor", c.height, NULL));
    MXU_TRY(read_range(where, config, "x_factor", c.width, NULL));
    in_order(c.height);
    in_order(c.width);
  }
  return mxu_json_applied(where, node,
                          mxu_apply_random(node->model, &c, node->inputs[0]));
}

static void put_range(mxu_json_out *out, cJSON *config, const char *key,
                      const float range[2]) {
  cJSON *pair = cJSON_CreateArray();
  for (int i = 0; pair && i < 2; i++)
    cJSON_AddItemToArray(pair,
                         cJSON_CreateNumber(mxu_json_short_float(range[i])));
  mxu_json_put(out, config, key, pair);
}

/* Keras 3.15's RandomShear refuses a pair with a negative end, the very
 * [-f, f] its get_config writes (so it cannot load its own file): a
 * symmetric range goes as the number f, which it reads as [-f, f]. */
static void put_shear(mxu_json_out *out, cJSON *config, const char *key,
                      const float range[2]) {
  if (range[0] == -range[1])
    mxu_json_put_float(out, config, key, range[1]);
  else
    put_range(out, config, key, range);
}

static void write_random(mxu_json_out *out, const mxu_layer *layer,
                         cJSON *config) {
  static const char *const modes[] = {"nearest", "constant", "reflect", "wrap"};
  const mxu_random_config *c = &layer->config.random;
  if (c->kind == MXU_RANDOM_GRAYSCALE) {
    mxu_json_put_float(out, config, "factor", c->factor[1]);
  } else if (c->kind == MXU_SOLARIZATION) {
    put_range(out, config, "value_range", c->value_range);
    put_range(out, config, "addition_factor", c->factor);
    put_range(out, config, "threshold_factor", c->threshold);
  } else if (is_color(c->kind)) {
    put_range(out, config, "factor", c->factor);
    put_range(out, config, "value_range", c->value_range);
  } else if (c->kind == MXU_RANDOM_FLIP) {
    mxu_json_put_string(out, config, "mode",
                        c->horizontal && c->vertical ? "horizontal_and_vertical"
                        : c->horizontal              ? "horizontal"
                                                     : "vertical");
  } else if (c->kind == MXU_RANDOM_SHEAR) {
    put_shear(out, config, "x_factor", c->width);
    put_shear(out, config, "y_factor", c->height);
  } else if (c->kind == MXU_RANDOM_ROTATION || c->kind == MXU_RANDOM_CONTRAST ||
             c->kind == MXU_RANDOM_BRIGHTNESS) {
    put_range(out, config, "factor", c->factor);
    if (c->kind != MXU_RANDOM_ROTATION)
      put_range(out, config, "value_range", c->value_range);
  } else {
    put_range(out, config, "height_factor", c->height);
    if (c->has_width || c->kind == MXU_RANDOM_TRANSLATION)
      put_range(out, config, "width_factor", c->width);
    else
      mxu_json_put_null(out, config, "width_factor");
  }
  if (c->kind != MXU_RANDOM_FLIP && c->kind != MXU_RANDOM_CONTRAST &&
      c->kind != MXU_RANDOM_BRIGHTNESS && !is_color(c->kind)) {
    mxu_json_put_string(out, config, "fill_mode", modes[c->fill_mode]);
    mxu_json_put_string(out, config, "interpolation", "bilinear");
    mxu_json_put_float(out, config, "fill_value", c->fill_value);
  }
  mxu_json_put_null(out, config, "seed");
}

#define RANDOM_READER(function, kind)                                          \
  static mxu_status function(const mxu_json_where *where, const cJSON *config, \
                             mxu_json_node *node, const char *name) {          \
    return read_random(where, config, node, name, kind);                       \
  }
RANDOM_READER(read_flip, MXU_RANDOM_FLIP)
RANDOM_READER(read_translation, MXU_RANDOM_TRANSLATION)
RANDOM_READER(read_rotation, MXU_RANDOM_ROTATION)
RANDOM_READER(read_zoom, MXU_RANDOM_ZOOM)
RANDOM_READER(read_contrast_layer, MXU_RANDOM_CONTRAST)
RANDOM_READER(read_brightness, MXU_RANDOM_BRIGHTNESS)
RANDOM_READER(read_grayscale, MXU_RANDOM_GRAYSCALE)
RANDOM_READER(read_invert, MXU_RANDOM_INVERT)
RANDOM_READER(read_solarization, MXU_SOLARIZATION)
RANDOM_READER(read_posterization, MXU_RANDOM_POSTERIZATION)
RANDOM_READER(read_shear, MXU_RANDOM_SHEAR)
RANDOM_READER(read_color_degeneration, MXU_RANDOM_COLOR_DEGENERATION)
RANDOM_READER(read_sharpness, MXU_RANDOM_SHARPNESS)

static const char *const flip_keys[] = {"mode", "seed", "rng_type",
                                        "data_format", NULL};
static const char *const contrast_keys[] = {"factor",   "value_range", "seed",
                                            "rng_type", "data_format", NULL};
static const char *const grayscale_keys[] = {"factor", "seed", "data_format",
                                             NULL};
static const char *const solarization_keys[] = {
    "addition_factor", "threshold_factor",
    "value_range",     "seed",
    "data_format",     NULL};
static const char *const shear_keys[] = {
    "x_factor",      "y_factor", "fill_mode",   "fill_value",
    "interpolation", "seed",     "data_format", NULL};
static const char *const transform_keys[] = {
    "height_factor", "width_factor", "factor",   "fill_mode",   "fill_value",
    "interpolation", "seed",         "rng_type", "data_format", NULL};

#define RANDOM_CLASS(symbol, keras_name, reader, keys)                         \
  const mxu_layer_class symbol = {                                             \
      .class_name = keras_name,                                                \
      .flops = random_flops,                                                   \
      .config_keys = keys,                                                     \
      .read_config = reader,                                                   \
      .write_config = write_random,                                            \
      .min_inputs = 1,                                                         \
      .max_inputs = 1,                                                         \
      .infer = random_infer,                                                   \
      .plan = random_plan,                                                     \
      .forward = random_forward,                                               \
      .backward = random_backward,                                             \
      .emit = mxu_emit_host_output,                                            \
      .emit_noise = mxu_host_output,                                           \
      .host_output = 1,                                                        \
  }

RANDOM_CLASS(mxu_random_flip_class, "RandomFlip", read_flip, flip_keys);
RANDOM_CLASS(mxu_random_translation_class, "RandomTranslation",
             read_translation, transform_keys);
RANDOM_CLASS(mxu_random_rotation_class, "RandomRotation", read_rotation,
             transform_keys);
RANDOM_CLASS(mxu_random_zoom_class, "RandomZoom", read_zoom, transform_keys);
RANDOM_CLASS(mxu_random_contrast_class, "RandomContrast", read_contrast_layer,
             contrast_keys);
RANDOM_CLASS(mxu_random_brightness_class, "RandomBrightness", read_brightness,
             contrast_keys);
RANDOM_CLASS(mxu_random_grayscale_class, "RandomGrayscale", read_grayscale,
             grayscale_keys);
RANDOM_CLASS(mxu_random_invert_class, "RandomInvert", read_invert,
             contrast_keys);
RANDOM_CLASS(mxu_solarization_class, "Solarization", read_solarization,
             solarization_keys);
RANDOM_CLASS(mxu_random_posterization_class, "RandomPosterization",
             read_posterization, contrast_keys);
RANDOM_CLASS(mxu_random_shear_class, "RandomShear", read_shear, shear_keys);
RANDOM_CLASS(mxu_random_color_degeneration_class, "RandomColorDegeneration",
             read_color_degeneration, contrast_keys);
RANDOM_CLASS(mxu_random_sharpness_class, "RandomSharpness", read_sharpness,
             contrast_keys);

/* ---- RandomCrop
 * -------------------------------------------------------------- Training: a
 * window at a random offset (uniform over the places it fits, as Keras 3 draws
 * it), one per image; backward puts the gradient back in place. Inference:
 * Keras' smart_resize, no gradient needed. An image smaller than the window,
 * which Keras would resize in training too, is refused. */

static mxu_status crop_infer(mxu_layer *layer) {
  const mxu_random_config *c = &layer->config.random;
  if (layer->in_shape.rank != 3)
    return mxu_fail(MXU_ERR_SHAPE,
                    "%s: RandomCrop takes (height, width, "
                    "channels) images",
                    layer->name);
  if (c->height_px < 1 || c->width_px < 1 ||
      c->height_px > layer->in_shape.dims[0] ||
      c->width_px > layer->in_shape.dims[1])
    return mxu_fail(MXU_ERR_UNSUPPORTED,
                    "%s: RandomCrop to %dx%d of a %lldx%lld image: only a "
                    "window inside the image is supported (Keras resizes a "
                    "smaller one)",
                    layer->name, c->height_px, c->width_px,
                    (long long)layer->in_shape.dims[0],
                    (long long)layer->in_shape.dims[1]);
  int64_t dims[3] = {c->height_px, c->width_px, layer->in_shape.dims[2]};
  layer->out_shape = mxu_shape_make(3, dims);
  return MXU_OK;
}

/* The window's corner for image `sample`. */
static void crop_corner(const mxu_layer *layer, const mxu_rng *rng,
                        int64_t sample, int *top, int *left) {
  const mxu_random_config *c = &layer->config.random;
  int rows = (int)layer->in_shape.dims[0] - c->height_px + 1;
  int cols = (int)layer->in_shape.dims[1] - c->width_px + 1;
  uint64_t at = (uint64_t)sample * DRAWS_PER_SAMPLE;
  *top = (int)mxu_rng_below(rng, at + DRAW_A, (uint32_t)rows);
  *left = (int)mxu_rng_below(rng, at + DRAW_B, (uint32_t)cols);
}

static void crop_run(const mxu_layer *layer, const mxu_layer_run *run,
                     int backward) {
  const mxu_random_config *c = &layer->config.random;
  int h = (int)layer->in_shape.dims[0], w = (int)layer->in_shape.dims[1];
  int ch = (int)layer->in_shape.dims[2];
  size_t row = (size_t)c->width_px * ch * sizeof(float);
  int64_t in_per = (int64_t)h * w * ch,
          out_per = (int64_t)c->height_px * c->width_px * ch;
  if (backward)
    memset(run->dx, 0,
           (size_t)(layer->compiled->batch * in_per) * sizeof(float));
  for (int64_t b = 0; b < layer->compiled->batch; b++) {
    int top, left;
    crop_corner(layer, &run->rng, run->row_offset + b, &top, &left);
    for (int r = 0; r < c->height_px; r++) {
      int64_t in = b * in_per + ((int64_t)(top + r) * w + left) * ch;
      int64_t out = b * out_per + (int64_t)r * c->width_px * ch;
      if (backward)
        memcpy(run->dx + in, run->dy + out, row);
      else
        memcpy(run->y + out, run->x + in, row);
    }
  }
}

/* Keras' smart_resize: the centred window of the target's aspect ratio
 * (sides rounded down), resized bilinearly. */
static void smart_resize(const mxu_layer *layer, const mxu_layer_run *run) {
  const mxu_random_config *c = &layer->config.random;
  int h = (int)layer->in_shape.dims[0], w = (int)layer->in_shape.dims[1];
  int ch = (int)layer->in_shape.dims[2];
  int crop_h = (int)((double)w * c->height_px / c->width_px);
  int crop_w = (int)((double)h * c->width_px / c->height_px);
  crop_h = crop_h < h ? crop_h : h;
  crop_w = crop_w < w ? crop_w : w;
  int top = (h - crop_h) / 2, left = (w - crop_w) / 2;
  int64_t in_per = (int64_t)h * w * ch,
          out_per = (int64_t)c->height_px * c->width_px * ch;
  for (int64_t b = 0; b < layer->compiled->batch; b++)
    mxu_resize_image(run->x + b * in_per + ((int64_t)top * w + left) * ch,
                     crop_h, crop_w, w, ch, run->y + b * out_per, c->height_px,
                     c->width_px, 1);
}

/* Inference: smart_resize's window, resized. */
static mxu_hlo_value crop_emit(const mxu_layer *layer, mxu_emit *e) {
  if (e->training) return mxu_emit_host_output(layer, e);
  const mxu_random_config *c = &layer->config.random;
  int h = (int)layer->in_shape.dims[0], w = (int)layer->in_shape.dims[1];
  int crop_h = (int)((double)w * c->height_px / c->width_px);
  int crop_w = (int)((double)h * c->width_px / c->height_px);
  crop_h = crop_h < h ? crop_h : h;
  crop_w = crop_w < w ? crop_w : w;
  int top = (h - crop_h) / 2, left = (w - crop_w) / 2;
  int64_t start[4] = {0, top, left, 0},
          limit[4] = {e->batch, top + crop_h, left + crop_w,
                      layer->in_shape.dims[2]},
          stride[4] = {1, 1, 1, 1};
  mxu_hlo_value window = mxu_hlo_slice(e->h, e->in[0], start, limit, stride);
  return mxu_emit_resize(e, window, crop_h, crop_w, c->height_px, c->width_px,
                         1);
}

static void crop_forward(mxu_layer *layer, const mxu_layer_run *run) {
  if (run->training)
    crop_run(layer, run, 0);
  else
    smart_resize(layer, run);
}

static void crop_backward(mxu_layer *layer, const mxu_layer_run *run) {
  if (run->need_dx) crop_run(layer, run, 1);
}

static const char *const crop_keys[] = {"height",   "width",       "seed",
                                        "rng_type", "data_format", NULL};

static mxu_status read_crop(const mxu_json_where *where, const cJSON *config,
                            mxu_json_node *node, const char *name) {
  mxu_random_config c = mxu_random_defaults(MXU_RANDOM_CROP);
  c.name = name;
  MXU_TRY(mxu_json_int(where, config, "height", MXU_JSON_REQUIRED, 1, 1 << 20,
                       &c.height_px));
  MXU_TRY(mxu_json_int(where, config, "width", MXU_JSON_REQUIRED, 1, 1 << 20,
                       &c.width_px));
  MXU_TRY(mxu_json_data_format(where, config));
  return mxu_json_applied(where, node,
                          mxu_apply_random(node->model, &c, node->inputs[0]));
}

static void write_crop(mxu_json_out *out, const mxu_layer *layer,
                       cJSON *config) {
  mxu_json_put_number(out, config, "height", layer->config.random.height_px);
  mxu_json_put_number(out, config, "width", layer->config.random.width_px);
  mxu_json_put_null(out, config, "seed");
}

const mxu_layer_class mxu_random_crop_class = {
    .class_name = "RandomCrop",
    .flops = mxu_no_flops, /* copies in training */
    .config_keys = crop_keys,
    .read_config = read_crop,
    .write_config = write_crop,
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = crop_infer,
    .plan = mxu_no_plan,
    .forward = crop_forward,
    .backward = crop_backward,
    .emit = crop_emit,
    .emit_noise = mxu_host_output,
    .host_output = 1,
};
