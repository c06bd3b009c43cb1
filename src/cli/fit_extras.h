/* fit_extras.h — what `mxu train` adds to fit beyond the basics: Keras'
 * callbacks (EarlyStopping, ModelCheckpoint, LearningRateScheduler,
 * ReduceLROnPlateau, CSVLogger, TensorBoard) and ImageDataGenerator's
 * augmentation, as command-line options. */
#ifndef MXU_CLI_FIT_EXTRAS_H
#define MXU_CLI_FIT_EXTRAS_H

#include "cli.h"
#include "options.h"

#define CLI_FIT_EXTRA_OPTIONS 19
#define CLI_MAX_CALLBACKS 8

typedef struct cli_fit_extras {
  /* options */
  int early_stopping; /* patience; 0: off */
  const char *monitor;
  int restore_best_weights;
  const char *model_checkpoint;
  int save_best_only, save_weights_only;
  const char *lr_schedule;
  int reduce_lr_patience;
  float reduce_lr_factor;
  const char *csv_log, *tensorboard;
  int tensorboard_update_freq;
  float rotation_range, width_shift_range, height_shift_range, zoom_range;
  int horizontal_flip, vertical_flip, fill_mode;
  /* built from them */
  mxu_callback callbacks[CLI_MAX_CALLBACKS];
  int callback_count;
  mxu_augment_config augment;
  int augmenting;
} cli_fit_extras;

/* The options' rows, pointing into e. */
void cli_fit_extra_options(cli_fit_extras *e, cli_option *o);
/* Builds the callbacks and the augmentation from the parsed options (the
 * schedule's length is `epochs`); returns an exit code after saying what
 * is wrong. */
int cli_fit_extras_build(cli_fit_extras *e, int epochs);
/* Points fit at them. */
void cli_fit_extras_apply(cli_fit_extras *e, mxu_fit_config *fit);
void cli_fit_extras_free(cli_fit_extras *e);

#endif
