/* progress.c — the progress bar of tf.keras 2.x's Progbar: width 30, ETA
 * while running, elapsed time and time per step at the end, metrics as
 * %.4f (%.4e when tiny). */
#include "train/progress.h"

#include "core/core.h"

#include <math.h>
#include <string.h>
#include <unistd.h>

void mxu_progress_epoch(mxu_progress *p, FILE *out, int verbose, int epoch,
                        int epochs, int target) {
  memset(p, 0, sizeof *p);
  p->out = out;
  p->verbose = verbose;
  p->dynamic = isatty(fileno(out));
  p->target = target;
  p->start = mxu_now_seconds();
  p->last_update = -1.0;
  if (verbose && epochs > 1) fprintf(out, "Epoch %d/%d\n", epoch, epochs);
}

static int append(char *line, int used, int size, const char *fmt, double a) {
  if (used >= size) return used;
  return used + snprintf(line + used, (size_t)(size - used), fmt, a);
}

static int per_step(char *line, int used, int size, double seconds) {
  if (seconds >= 1.0) return append(line, used, size, " %.0fs/step", seconds);
  if (seconds >= 1e-3)
    return append(line, used, size, " %.0fms/step", seconds * 1e3);
  return append(line, used, size, " %.0fus/step", seconds * 1e6);
}

static int metrics_text(char *line, int used, int size,
                        const mxu_metric_value *metrics, int count) {
  for (int i = 0; i < count && used < size; i++) {
    used +=
        snprintf(line + used, (size_t)(size - used), " - %s:", metrics[i].name);
    double v = metrics[i].value;
    used = append(line, used, size, fabs(v) > 1e-3 ? " %.4f" : " %.4e", v);
  }
  return used;
}

static int bar_text(char *line, int current, int target) {
  int digits = snprintf(NULL, 0, "%d", target);
  /* Room for the 30 marks and the closing bracket is ensured by size. */
  int used = snprintf(line, 64, "%*d/%d [", digits, current, target);
  int width = (int)(30.0 * current / target);
  for (int i = 0; i < 30; i++) {
    char c = i < width - 1    ? '='
             : i == width - 1 ? (current < target ? '>' : '=')
                              : '.';
    line[used++] = c;
  }
  line[used++] = ']';
  line[used] = 0;
  return used;
}

static int eta_text(char *line, int used, int size, double eta) {
  long s = (long)eta;
  if (s > 3600)
    return used + snprintf(line + used, (size_t)(size - used),
                           " - ETA: %ld:%02ld:%02ld", s / 3600, s % 3600 / 60,
                           s % 60);
  if (s > 60)
    return used + snprintf(line + used, (size_t)(size - used),
                           " - ETA: %ld:%02ld", s / 60, s % 60);
  return used + snprintf(line + used, (size_t)(size - used), " - ETA: %lds", s);
}

void mxu_progress_update(mxu_progress *p, int current,
                         const mxu_metric_value *metrics, int count,
                         int final) {
  if (!p->verbose || (p->verbose == 2 && !final)) return;
  double now = mxu_now_seconds(), elapsed = now - p->start;
  /* Keras redraws at most every 50 ms. */
  if (!final && p->last_update >= 0 && now - p->last_update < 0.05) return;
  p->last_update = now;
  char line[1024];
  int size = (int)sizeof line, used;
  double step_time = current ? elapsed / current : 0.0;
  if (p->verbose == 2) {
    used = snprintf(line, sizeof line, "%d/%d - %.0fs", current, p->target,
                    elapsed);
    used = metrics_text(line, used, size, metrics, count);
    used = append(line, used, size, " - %.0fs/epoch -", elapsed);
    used = per_step(line, used, size, step_time);
    fprintf(p->out, "%s\n", line);
    fflush(p->out);
    return;
  }
  used = bar_text(line, current, p->target);
  if (final) {
    used = append(line, used, size, " - %.0fs", elapsed);
    used = per_step(line, used, size, step_time);
  } else {
    used = eta_text(line, used, size, step_time * (p->target - current));
  }
  used = metrics_text(line, used, size, metrics, count);
  if (p->dynamic) {
    int pad = p->last_width > used ? p->last_width - used : 0;
    fprintf(p->out, "\r%s%*s", line, pad, "");
    if (final) fputc('\n', p->out);
  } else {
    fprintf(p->out, "%s\n", line);
  }
  p->last_width = used;
  fflush(p->out);
}
