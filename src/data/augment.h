/* augment.h — random image augmentation with the semantics of Keras'
 * ImageDataGenerator (rotation, shifts, zoom, flips, fill modes), drawn
 * from the counter-based RNG so a sample's augmentation depends only on
 * (seed, epoch, sample index). Internal to libmxu. */
#ifndef MXU_DATA_AUGMENT_H
#define MXU_DATA_AUGMENT_H

#include "core/core.h"
#include "mxu.h"

#include <stdint.h>

/* The config (mxu_augment_config) and its checks are public: mxu.h. */

/* The parameters sample `sample` of epoch `epoch` gets: each parameter has
 * its own draw index, so turning one option on never changes another's
 * draws. */
void mxu_augment_draw(const mxu_augment_config *config, int h, int w,
                      uint64_t seed, uint32_t epoch, int64_t sample,
                      mxu_augment_params *params);

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
