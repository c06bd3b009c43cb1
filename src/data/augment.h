/* augment.h — random image augmentation with the semantics of Keras'
 * ImageDataGenerator (rotation, shifts, zoom, flips, fill modes), drawn
 * from the counter-based RNG so a sample's augmentation depends only on
 * (seed, epoch, sample index). Internal to libmxu. */
#ifndef MXU_DATA_AUGMENT_H
#define MXU_DATA_AUGMENT_H

#include "mxu.h"

#include <stdint.h>

/* The config (mxu_augment_config) and its checks are public: mxu.h. */

/* One sample's transform, in Keras' apply_affine_transform terms with x
 * the column axis and y the row axis. Output pixel (x, y) reads the input
 * at  c + R(theta) * (Z * ((x, y) - c) + (tx, ty)),  c the image centre,
 * Z = diag(zx, zy); then the result is flipped. theta > 0 turns the
 * picture counter-clockwise as displayed (theta = 90 is numpy's rot90);
 * tx > 0 moves the content left, zx > 1 shows more of it (zooms out). */
typedef struct mxu_augment_params {
  double theta; /* degrees */
  double tx, ty;
  double zx, zy;
  int flip_horizontal, flip_vertical;
} mxu_augment_params;

/* The parameters sample `sample` of epoch `epoch` gets: each parameter has
 * its own draw index, so turning one option on never changes another's
 * draws. */
void mxu_augment_draw(const mxu_augment_config *config, int h, int w,
                      uint64_t seed, uint32_t epoch, int64_t sample,
                      mxu_augment_params *params);

/* The 2x3 matrix scipy.ndimage.affine_transform gets for params on an
 * h x w image: input (row, col) = m[.][0..1] * (row, col) + m[.][2]. */
void mxu_augment_matrix(const mxu_augment_params *params, int h, int w,
                        double m[2][3]);

/* Applies params to one h x w x channels image (in != out). */
void mxu_augment_apply(const mxu_augment_params *params, mxu_fill_mode mode,
                       float cval, const float *in, float *out, int h, int w,
                       int channels);

/* Draws and applies one sample's augmentation; a copy when the config is
 * inactive. in is one NHWC image, out the same size, in != out. */
void mxu_augment_sample(const mxu_augment_config *config, const float *in,
                        float *out, int h, int w, int channels, uint64_t seed,
                        uint32_t epoch, int64_t sample);

/* mxu_augment_sample for n images; image k is sample sample_ids[k] of the
 * data set (sample k when sample_ids is NULL). Runs on OpenMP threads; the
 * result does not depend on how many. */
void mxu_augment_batch(const mxu_augment_config *config, const float *in,
                       float *out, int64_t n, int h, int w, int channels,
                       uint64_t seed, uint32_t epoch,
                       const int64_t *sample_ids);

#endif
