/* progress.h — Keras' fit progress output (verbose 1: the bar; verbose 2:
 * one line per epoch). Internal to libmxu. */
#ifndef MXU_PROGRESS_H
#define MXU_PROGRESS_H

#include <stdio.h>

#define MXU_PROGRESS_MAX_METRICS 4

typedef struct mxu_progress {
  FILE *out;
  int verbose, dynamic; /* dynamic: a terminal, redrawn with \r */
  int target;
  double start, last_update;
  int last_width;
} mxu_progress;

typedef struct mxu_metric_value {
  const char *name;
  double value;
} mxu_metric_value;

void mxu_progress_epoch(mxu_progress *p, FILE *out, int verbose, int epoch,
                        int epochs, int target);
/* current steps done; final is 1 on the epoch's last line. */
void mxu_progress_update(mxu_progress *p, int current,
                         const mxu_metric_value *metrics, int count, int final);

#endif
