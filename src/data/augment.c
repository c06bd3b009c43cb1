/* augment.c — Keras ImageDataGenerator's geometric augmentation: the
 * random parameters of get_random_transform, drawn from the counter-based
 * RNG keyed by (seed, epoch, sample), applied by core's image transform
 * (core/image_transform.c). */
#include "data/augment.h"
#include "core/core.h"

#include <math.h>
#include <string.h>

/* Where each parameter's draw lives in the sample's stream: fixed, so one
 * option's draw never moves when another is switched on. */
enum {
  DRAW_THETA = 0,
  DRAW_TX,
  DRAW_TY,
  DRAW_ZX,
  DRAW_ZY,
  DRAW_FLIP_H,
  DRAW_FLIP_V
};

mxu_augment_config mxu_augment_defaults(void) {
  mxu_augment_config config;
  memset(&config, 0, sizeof config);
  config.fill_mode = MXU_FILL_NEAREST;
  return config;
}

int mxu_augment_active(const mxu_augment_config *config) {
  return config &&
         (config->rotation_range != 0 || config->width_shift_range != 0 ||
          config->height_shift_range != 0 || config->zoom_range != 0 ||
          config->horizontal_flip || config->vertical_flip);
}

static mxu_status check_range(const char *name, float value) {
  if (isfinite(value) && value >= 0) return MXU_OK;
  return mxu_fail(MXU_ERR_ARG,
                  "augment: %s is %g (expected a finite value >= 0)", name,
                  (double)value);
}

mxu_status mxu_augment_check(const mxu_augment_config *config) {
  if (!config) return mxu_fail(MXU_ERR_ARG, "augment: config is NULL");
  MXU_TRY(check_range("rotation_range", config->rotation_range));
  MXU_TRY(check_range("width_shift_range", config->width_shift_range));
  MXU_TRY(check_range("height_shift_range", config->height_shift_range));
  MXU_TRY(check_range("zoom_range", config->zoom_range));
  if (!isfinite(config->cval))
    return mxu_fail(MXU_ERR_ARG, "augment: cval is %g (expected finite)",
                    (double)config->cval);
  if ((unsigned)config->fill_mode > MXU_FILL_WRAP)
    return mxu_fail(MXU_ERR_ARG,
                    "augment: fill_mode %d (expected nearest, constant, "
                    "reflect or wrap)",
                    (int)config->fill_mode);
  return MXU_OK;
}

/* ---- drawing the parameters ------------------------------------------- */

static double draw_uniform(const mxu_rng *rng, uint64_t index, double low,
                           double high) {
  float u;
  mxu_rng_uniform(rng, index, &u, 1);
  return low + (high - low) * (double)u;
}

/* Keras: a range below 1 is a fraction of the side, else pixels. Keras
 * itself scales its tx by the height and moves columns with it
 * (keras-team/keras#17398); here the width shift moves columns, as its
 * documentation says. */
static double draw_shift(const mxu_rng *rng, uint64_t index, float range,
                         int side) {
  if (range == 0) return 0;
  double shift = draw_uniform(rng, index, -(double)range, (double)range);
  return range < 1 ? shift * side : shift;
}

static int draw_flip(const mxu_rng *rng, uint64_t index, int enabled) {
  return enabled && draw_uniform(rng, index, 0, 1) < 0.5;
}

void mxu_augment_draw(const mxu_augment_config *config, int h, int w,
                      uint64_t seed, uint32_t epoch, int64_t sample,
                      mxu_augment_params *params) {
  uint64_t id = (uint64_t)sample;
  mxu_rng rng = mxu_rng_make(seed, MXU_STREAM_AUGMENT, epoch, (uint32_t)id,
                             (uint32_t)(id >> 32));
  double rotation = config->rotation_range;
  params->theta =
      rotation == 0 ? 0 : draw_uniform(&rng, DRAW_THETA, -rotation, rotation);
  params->tx = draw_shift(&rng, DRAW_TX, config->width_shift_range, w);
  params->ty = draw_shift(&rng, DRAW_TY, config->height_shift_range, h);
  params->zx = params->zy = 1;
  if (config->zoom_range != 0) {
    double low = 1 - (double)config->zoom_range;
    double high = 1 + (double)config->zoom_range;
    params->zx = draw_uniform(&rng, DRAW_ZX, low, high);
    params->zy = draw_uniform(&rng, DRAW_ZY, low, high);
  }
  params->flip_horizontal =
      draw_flip(&rng, DRAW_FLIP_H, config->horizontal_flip);
  params->flip_vertical = draw_flip(&rng, DRAW_FLIP_V, config->vertical_flip);
  params->shear_x = params->shear_y = 0; /* the layer RandomShear only */
}

/* ---- the matrix --------------------------------------------------------- */

void mxu_augment_sample(const mxu_augment_config *config, const float *in,
                        float *out, int h, int w, int channels, uint64_t seed,
                        uint32_t epoch, int64_t sample) {
  if (h < 1 || w < 1 || channels < 1) return;
  if (!mxu_augment_active(config)) {
    memcpy(out, in, (size_t)h * w * channels * sizeof(float));
    return;
  }
  mxu_augment_params params;
  mxu_augment_draw(config, h, w, seed, epoch, sample, &params);
  mxu_augment_apply(&params, config->fill_mode, config->cval, in, out, h, w,
                    channels);
}

void mxu_augment_batch(const mxu_augment_config *config, const float *in,
                       float *out, int64_t n, int h, int w, int channels,
                       uint64_t seed, uint32_t epoch,
                       const int64_t *sample_ids) {
  if (h < 1 || w < 1 || channels < 1) return;
  size_t floats = (size_t)h * w * channels;
  /* Each image depends only on its own sample id, so any split of the
   * loop over threads gives the same bytes. */
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < n; k++)
    mxu_augment_sample(config, in + (size_t)k * floats,
                       out + (size_t)k * floats, h, w, channels, seed, epoch,
                       sample_ids ? sample_ids[k] : k);
}
