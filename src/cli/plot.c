/* plot.c — `mxu plot REPORT.json -o curves.png [--confusion FILE.png]`:
 * the loss and the metric per epoch of a --report (train and validation),
 * and its test confusion matrix as a heat map, drawn with cairo into PNG
 * files. Everything is read and checked before anything is drawn. */
#include "cli.h"
#include "options.h"

#include <cairo.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Fixed sizes, so a plot looks the same from run to run (and tests can
 * check them). */
#define CURVES_WIDTH 1200
#define CURVES_HEIGHT 540
#define CONFUSION_WIDTH 900
#define CONFUSION_HEIGHT 900

#define FONT "sans-serif"

/* math.h's PI is not C11; only XSI has it. */
#define PI 3.14159265358979323846
#define SQRT_HALF 0.70710678118654752440

typedef struct rgb {
  double r, g, b;
} rgb;

/* matplotlib's first two colours, which Keras users know from their own
 * history plots: train blue, validation orange. */
static const rgb train_colour = {31 / 255.0, 119 / 255.0, 180 / 255.0};
static const rgb val_colour = {255 / 255.0, 127 / 255.0, 14 / 255.0};
static const rgb ink = {0.1, 0.1, 0.1};
static const rgb grey = {0.4, 0.4, 0.4};
static const rgb grid = {0.88, 0.88, 0.88};

/* ---- options ----------------------------------------------------------- */

typedef struct plot_args {
  const char *report, *curves, *confusion;
} plot_args;

#define PLOT_OPTION_COUNT 2

static void plot_options(plot_args *a, cli_option *o) {
  cli_option table[PLOT_OPTION_COUNT] = {
      {"-o", "FILE.png",
       "draw loss and metric per epoch, train and validation (a report of "
       "mxu train --report)",
       CLI_STRING, &a->curves, NULL, 0, 0},
      {"--confusion", "FILE.png",
       "draw the test confusion matrix (a report of mxu evaluate --report)",
       CLI_STRING, &a->confusion, NULL, 0, 0},
  };
  memcpy(o, table, sizeof table);
}

static const char plot_summary[] =
    "Draws the JSON report that mxu train --report or mxu evaluate --report "
    "wrote\nas PNG images: the loss and the metric per epoch (-o), and the "
    "test confusion\nmatrix with class names (--confusion).";

/* ---- reading the report ------------------------------------------------ */

static int fail(const char *path, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int fail(const char *path, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  fprintf(stderr, "mxu plot: %s: ", path);
  vfprintf(stderr, fmt, args);
  va_end(args);
  fputc('\n', stderr);
  return CLI_RUNTIME;
}

/* Reports are small: a bigger file is not one (EFBIG). */
#define REPORT_MAX_BYTES (64 << 20)

/* The whole file as a string; NULL with errno set when it cannot be
 * read. */
static char *read_file(const char *path) {
  FILE *file = fopen(path, "rb");
  if (!file) return NULL;
  char *text = NULL;
  size_t size = 0, used = 0;
  int error = 0;
  for (size_t got = 1; got && !error; used += got) {
    if (size - used < 4096 + 1) {
      char *bigger = realloc(text, size = 2 * size + 4096 + 1);
      if (!bigger) {
        error = ENOMEM;
        break;
      }
      text = bigger;
    }
    got = fread(text + used, 1, size - used - 1, file);
    if (!got && ferror(file)) error = errno ? errno : EIO;
    if (used + got > REPORT_MAX_BYTES) error = EFBIG;
  }
  fclose(file);
  if (error) {
    free(text);
    errno = error;
    return NULL;
  }
  text[used] = 0;
  return text;
}

/* Line and column of where cJSON stopped, for the message. */
static void error_place(const char *text, const char *stop, int *line,
                        int *column) {
  *line = *column = 1;
  for (const char *p = text; p < stop && *p; p++) {
    *column = *p == '\n' ? 1 : *column + 1;
    *line += *p == '\n';
  }
}

static int read_report(const char *path, cJSON **root) {
  errno = 0;
  char *text = read_file(path);
  if (!text && errno == EFBIG)
    return fail(path,
                "larger than %d MiB (REPORT_MAX_BYTES in src/cli/plot.c): "
                "not a report of mxu train or mxu evaluate",
                REPORT_MAX_BYTES >> 20);
  if (!text) return fail(path, "cannot read the report: %s", strerror(errno));
  /* Null-terminated: text after the report is an error too. */
  const char *stop = NULL;
  *root = cJSON_ParseWithOpts(text, &stop, 1);
  int line, column;
  if (!*root) error_place(text, stop ? stop : text, &line, &column);
  free(text);
  if (!*root)
    return fail(path,
                "malformed JSON at line %d, column %d (expected a report of "
                "mxu train --report or mxu evaluate --report)",
                line, column);
  if (!cJSON_IsObject(*root))
    return fail(path, "not a report: expected a JSON object");
  return CLI_OK;
}

/* ---- the curves -------------------------------------------------------- */

/* One value per epoch; NaN where an epoch did not validate. */
typedef struct curves {
  int count;
  double *epoch, *loss, *metric, *val_loss, *val_metric;
  char metric_name[96];
} curves;

static void curves_free(curves *c) {
  free(c->epoch);
  c->epoch = NULL;
}

/* The metric is the key that is none of Keras' other log names, e.g.
 * "accuracy" or "sparse_categorical_accuracy". */
static int find_metric(const cJSON *epoch, char *name, size_t size) {
  const cJSON *item;
  /* Only an object's members have names (a list's items do not). */
  if (!cJSON_IsObject(epoch)) return 0;
  cJSON_ArrayForEach(item, epoch) {
    const char *key = item->string;
    if (strcmp(key, "epoch") && strcmp(key, "loss") && strcmp(key, "seconds") &&
        strncmp(key, "val_", 4)) {
      snprintf(name, size, "%s", key);
      return 1;
    }
  }
  return 0;
}

/* A number, or NaN when absent or null; -1 for any other value. */
static int optional_number(const cJSON *object, const char *key, double *out) {
  const cJSON *item = cJSON_GetObjectItemCaseSensitive(object, key);
  *out = NAN;
  if (!item || cJSON_IsNull(item)) return 0;
  if (!cJSON_IsNumber(item)) return -1;
  *out = item->valuedouble;
  return 1;
}

static int parse_epoch(const char *path, const cJSON *e, int i, curves *c) {
  char val_metric[128];
  snprintf(val_metric, sizeof val_metric, "val_%s", c->metric_name);
  const char *keys[4] = {"loss", c->metric_name, "val_loss", val_metric};
  double *values[4] = {c->loss, c->metric, c->val_loss, c->val_metric};
  if (!cJSON_IsObject(e)) return fail(path, "epochs[%d] is not an object", i);
  for (int k = 0; k < 4; k++) {
    int got = optional_number(e, keys[k], &values[k][i]);
    if (got < 0 || (k < 2 && got == 0))
      return fail(path, "epochs[%d]: \"%s\" %s", i, keys[k],
                  got < 0 ? "is not a number" : "is missing");
  }
  /* Reports number epochs from 1; without the key, the position does. */
  if (optional_number(e, "epoch", &c->epoch[i]) <= 0) c->epoch[i] = i + 1;
  return CLI_OK;
}

static int parse_curves(const char *path, const cJSON *root, curves *c) {
  const cJSON *epochs = cJSON_GetObjectItemCaseSensitive(root, "epochs");
  if (!cJSON_IsArray(epochs) || cJSON_GetArraySize(epochs) == 0)
    return fail(path,
                "no epochs to draw (-o): the report of mxu train --report "
                "has them; mxu evaluate's has only --confusion");
  const cJSON *first = cJSON_GetArrayItem(epochs, 0);
  if (!cJSON_IsObject(first)) return fail(path, "epochs[0] is not an object");
  if (!find_metric(first, c->metric_name, sizeof c->metric_name))
    return fail(path, "epochs[0] has no metric (e.g. \"accuracy\")");
  c->count = cJSON_GetArraySize(epochs);
  c->epoch = malloc(5 * (size_t)c->count * sizeof *c->epoch);
  if (!c->epoch) return fail(path, "out of memory");
  c->loss = c->epoch + c->count;
  c->metric = c->loss + c->count;
  c->val_loss = c->metric + c->count;
  c->val_metric = c->val_loss + c->count;
  int i = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, epochs) {
    if (parse_epoch(path, e, i++, c) != CLI_OK) return CLI_RUNTIME;
  }
  return CLI_OK;
}

/* ---- the confusion matrix ---------------------------------------------- */

typedef struct confusion {
  int classes;
  const char **names; /* into the report's JSON */
  double *counts;     /* [true][predicted] */
} confusion;

static void confusion_free(confusion *m) {
  free(m->names);
  free(m->counts);
}

static int parse_names(const char *path, const cJSON *names, confusion *m) {
  m->classes = cJSON_GetArraySize(names);
  m->names = malloc((size_t)m->classes * sizeof *m->names);
  m->counts =
      malloc((size_t)m->classes * (size_t)m->classes * sizeof *m->counts);
  if (!m->names || !m->counts) return fail(path, "out of memory");
  int i = 0;
  const cJSON *name;
  cJSON_ArrayForEach(name, names) {
    if (!cJSON_IsString(name))
      return fail(path, "confusion.class_names[%d] is not a string", i);
    m->names[i++] = name->valuestring;
  }
  return CLI_OK;
}

static int parse_row(const char *path, const cJSON *row, int i, confusion *m) {
  if (!cJSON_IsArray(row) || cJSON_GetArraySize(row) != m->classes)
    return fail(path, "confusion.matrix[%d] is not an array of %d counts", i,
                m->classes);
  int j = 0;
  const cJSON *count;
  cJSON_ArrayForEach(count, row) {
    if (!cJSON_IsNumber(count) || !(count->valuedouble >= 0))
      return fail(path, "confusion.matrix[%d][%d] is not a count", i, j);
    m->counts[i * m->classes + j++] = count->valuedouble;
  }
  return CLI_OK;
}

static int parse_confusion(const char *path, const cJSON *root, confusion *m) {
  const cJSON *c = cJSON_GetObjectItemCaseSensitive(root, "confusion");
  if (!c)
    return fail(path, "the report has no confusion matrix; run mxu evaluate "
                      "--report to write one");
  const cJSON *names = cJSON_GetObjectItemCaseSensitive(c, "class_names");
  const cJSON *matrix = cJSON_GetObjectItemCaseSensitive(c, "matrix");
  if (!cJSON_IsArray(names) || cJSON_GetArraySize(names) == 0 ||
      !cJSON_IsArray(matrix))
    return fail(path, "\"confusion\" needs \"class_names\" (strings) and "
                      "\"matrix\" (rows of counts)");
  if (parse_names(path, names, m) != CLI_OK) return CLI_RUNTIME;
  if (cJSON_GetArraySize(matrix) != m->classes)
    return fail(path, "confusion.matrix has %d rows for %d class names",
                cJSON_GetArraySize(matrix), m->classes);
  int i = 0;
  const cJSON *row;
  cJSON_ArrayForEach(row, matrix) {
    if (parse_row(path, row, i++, m) != CLI_OK) return CLI_RUNTIME;
  }
  return CLI_OK;
}

/* ---- drawing helpers --------------------------------------------------- */

static void set_colour(cairo_t *cr, rgb c) {
  cairo_set_source_rgb(cr, c.r, c.g, c.b);
}

static void set_font(cairo_t *cr, double size, int bold) {
  cairo_select_font_face(cr, FONT, CAIRO_FONT_SLANT_NORMAL,
                         bold ? CAIRO_FONT_WEIGHT_BOLD
                              : CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr, size);
}

static double text_width(cairo_t *cr, const char *text) {
  cairo_text_extents_t e;
  cairo_text_extents(cr, text, &e);
  return e.x_advance;
}

/* Text anchored at (x, y): ax 0 left, 0.5 centre, 1 right; ay likewise
 * from the top of the font's ascent to the bottom of its descent, so
 * labels in a row share a baseline whatever their letters. angle turns
 * the text about the anchor (radians, clockwise on screen). */
static void draw_text(cairo_t *cr, const char *text, double x, double y,
                      double ax, double ay, double angle) {
  cairo_font_extents_t f;
  cairo_font_extents(cr, &f);
  cairo_save(cr);
  cairo_translate(cr, x, y);
  cairo_rotate(cr, angle);
  cairo_move_to(cr, -ax * text_width(cr, text),
                f.ascent - ay * (f.ascent + f.descent));
  cairo_show_text(cr, text);
  cairo_restore(cr);
}

/* ---- axes -------------------------------------------------------------- */

typedef struct axis {
  double lo, hi, step;
  int decimals;
} axis;

/* 1, 2 or 5 times a power of ten, the first at least raw. */
static double nice_step(double raw) {
  double power = pow(10, floor(log10(raw)));
  double fraction = raw / power;
  return (fraction <= 1   ? 1
          : fraction <= 2 ? 2
          : fraction <= 5 ? 5
                          : 10) *
         power;
}

/* An axis over [min, max] with about `ticks` ticks on round numbers at
 * both ends; a flat series gets a little room around it. */
static axis value_axis(double min, double max, int ticks) {
  if (!(max > min)) {
    double room = fabs(min) > 1e-12 ? fabs(min) * 0.05 : 0.5;
    min -= room;
    max += room;
  }
  double pad = (max - min) * 0.04;
  axis a;
  a.step = nice_step((max - min + 2 * pad) / ticks);
  a.lo = floor((min - pad) / a.step) * a.step;
  a.hi = ceil((max + pad) / a.step) * a.step;
  a.decimals = a.step >= 1 ? 0 : (int)ceil(-log10(a.step) - 1e-9);
  return a;
}

/* Epochs are whole numbers: integer ticks, and some room at both ends so
 * the first and last points sit inside the frame. */
static axis epoch_axis(double first, double last) {
  axis a;
  a.step = last > first ? nice_step((last - first) / 8) : 1;
  if (a.step < 1) a.step = 1;
  double room = a.step < 2 ? 0.5 : a.step / 4;
  a.lo = first - room;
  a.hi = last + room;
  a.decimals = 0;
  return a;
}

typedef struct frame {
  double left, top, right, bottom; /* the plot area in pixels */
  axis x, y;
} frame;

static double to_x(const frame *f, double v) {
  return f->left + (v - f->x.lo) / (f->x.hi - f->x.lo) * (f->right - f->left);
}

static double to_y(const frame *f, double v) {
  return f->bottom - (v - f->y.lo) / (f->y.hi - f->y.lo) * (f->bottom - f->top);
}

static void tick_label(const axis *a, double v, char *out, size_t size) {
  /* Round away the -0 that floating steps leave near zero. */
  if (fabs(v) < a->step * 1e-6) v = 0;
  /* A diverged loss or a vanishing one in exponent form, not 20 digits. */
  if (fabs(v) >= 1e6 || (v != 0 && a->step < 1e-4))
    snprintf(out, size, "%.4g", v);
  else
    snprintf(out, size, "%.*f", a->decimals, v);
}

/* Ticks are counted, not stepped through, so a step lost in the
 * rounding of huge values cannot loop for ever; 0 when the axis is not a
 * finite range. */
static int tick_count(const axis *a) {
  double first = ceil(a->lo / a->step - 1e-9);
  double count = floor(a->hi / a->step + 1e-6) - first + 1;
  return isfinite(count) && count > 0 ? (int)fmin(count, 40) : 0;
}

/* Tick i, counting from the first at or above the axis' low end. */
static double tick(const axis *a, int i) {
  return (ceil(a->lo / a->step - 1e-9) + i) * a->step;
}

static void draw_x_ticks(cairo_t *cr, const frame *f) {
  char label[32];
  for (int i = 0; i < tick_count(&f->x); i++) {
    double v = tick(&f->x, i), x = to_x(f, v);
    set_colour(cr, grid);
    cairo_move_to(cr, x, f->top);
    cairo_line_to(cr, x, f->bottom);
    cairo_stroke(cr);
    set_colour(cr, ink);
    cairo_move_to(cr, x, f->bottom);
    cairo_line_to(cr, x, f->bottom + 5);
    cairo_stroke(cr);
    tick_label(&f->x, v, label, sizeof label);
    draw_text(cr, label, x, f->bottom + 8, 0.5, 0, 0);
  }
}

static void draw_y_ticks(cairo_t *cr, const frame *f) {
  char label[32];
  for (int i = 0; i < tick_count(&f->y); i++) {
    double v = tick(&f->y, i), y = to_y(f, v);
    set_colour(cr, grid);
    cairo_move_to(cr, f->left, y);
    cairo_line_to(cr, f->right, y);
    cairo_stroke(cr);
    set_colour(cr, ink);
    cairo_move_to(cr, f->left - 5, y);
    cairo_line_to(cr, f->left, y);
    cairo_stroke(cr);
    tick_label(&f->y, v, label, sizeof label);
    draw_text(cr, label, f->left - 8, y, 1, 0.5, 0);
  }
}

/* The widest y tick label, so the panel leaves room for it. */
static double y_labels_width(cairo_t *cr, const axis *a) {
  char label[32];
  double widest = 0;
  for (int i = 0; i < tick_count(a); i++) {
    tick_label(a, tick(a, i), label, sizeof label);
    double w = text_width(cr, label);
    widest = w > widest ? w : widest;
  }
  return widest;
}

/* y_title_right: where the rotated y title ends, left of the tick labels. */
static void draw_axes(cairo_t *cr, const frame *f, const char *x_title,
                      const char *y_title, double y_title_right) {
  cairo_set_line_width(cr, 1);
  set_font(cr, 13, 0);
  draw_x_ticks(cr, f);
  draw_y_ticks(cr, f);
  set_colour(cr, ink);
  cairo_rectangle(cr, f->left, f->top, f->right - f->left, f->bottom - f->top);
  cairo_stroke(cr);
  set_font(cr, 15, 0);
  draw_text(cr, x_title, (f->left + f->right) / 2, f->bottom + 30, 0.5, 0, 0);
  draw_text(cr, y_title, y_title_right, (f->top + f->bottom) / 2, 0.5, 1,
            -PI / 2);
}

/* ---- the curves image -------------------------------------------------- */

/* A line through the values that exist, with a dot on each, so a single
 * epoch or a sparse validation series still shows; dots shrink and then
 * go as the points crowd together. */
static void draw_series(cairo_t *cr, const frame *f, const double *x,
                        const double *y, int count, rgb colour) {
  set_colour(cr, colour);
  cairo_set_line_width(cr, 2.5);
  cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
  cairo_new_path(cr);
  int points = 0;
  for (int i = 0; i < count; i++)
    if (!isnan(y[i])) {
      cairo_line_to(cr, to_x(f, x[i]), to_y(f, y[i]));
      points++;
    }
  cairo_stroke(cr);
  double radius = points <= 25 ? 4.5 : points <= 60 ? 2.5 : 0;
  for (int i = 0; radius > 0 && i < count; i++) {
    if (isnan(y[i])) continue;
    cairo_arc(cr, to_x(f, x[i]), to_y(f, y[i]), radius, 0, 2 * PI);
    cairo_fill(cr);
  }
}

static void range_of(const double *v, int count, double *min, double *max) {
  for (int i = 0; i < count; i++) {
    if (isnan(v[i])) continue;
    *min = v[i] < *min ? v[i] : *min;
    *max = v[i] > *max ? v[i] : *max;
  }
}

static int any_value(const double *v, int count) {
  for (int i = 0; i < count; i++)
    if (!isnan(v[i])) return 1;
  return 0;
}

/* One panel: train and validation of one quantity over the epochs, in
 * the horizontal band [x0, x1) below y0. */
static void draw_panel(cairo_t *cr, const curves *c, const double *train,
                       const double *val, const char *name, double x0,
                       double x1, double y0) {
  double min = INFINITY, max = -INFINITY;
  range_of(train, c->count, &min, &max);
  range_of(val, c->count, &min, &max);
  frame f;
  f.x = epoch_axis(c->epoch[0], c->epoch[c->count - 1]);
  f.y = value_axis(min, max, 6);
  set_font(cr, 13, 0);
  double labels = y_labels_width(cr, &f.y);
  f.left = x0 + 54 + labels + 8;
  f.right = x1 - 30;
  f.top = y0;
  f.bottom = CURVES_HEIGHT - 70;
  draw_axes(cr, &f, "epoch", name, f.left - 8 - labels - 10);
  draw_series(cr, &f, c->epoch, train, c->count, train_colour);
  draw_series(cr, &f, c->epoch, val, c->count, val_colour);
}

/* One legend entry: a line with a dot, then its name; returns the x after
 * it. */
static double legend_entry(cairo_t *cr, double x, double y, rgb colour,
                           const char *label) {
  set_colour(cr, colour);
  cairo_set_line_width(cr, 2.5);
  cairo_move_to(cr, x, y);
  cairo_line_to(cr, x + 28, y);
  cairo_stroke(cr);
  cairo_arc(cr, x + 14, y, 4.5, 0, 2 * PI);
  cairo_fill(cr);
  set_colour(cr, ink);
  draw_text(cr, label, x + 36, y, 0, 0.5, 0);
  return x + 36 + text_width(cr, label) + 28;
}

/* Above both panels, centred: the two panels share their colours. */
static void draw_legend(cairo_t *cr, int validation, double y) {
  set_font(cr, 14, 0);
  double width = 36 + text_width(cr, "train");
  if (validation) width += 28 + 36 + text_width(cr, "validation");
  double x = (CURVES_WIDTH - width) / 2;
  x = legend_entry(cr, x, y, train_colour, "train");
  if (validation) legend_entry(cr, x, y, val_colour, "validation");
}

static const char *report_string(const cJSON *root, const char *key) {
  const cJSON *item = cJSON_GetObjectItemCaseSensitive(root, key);
  return cJSON_IsString(item) ? item->valuestring : NULL;
}

/* The model's name as the title; the data set and test result, when the
 * report has them, below it in grey. */
static void draw_title(cairo_t *cr, const cJSON *root, const char *metric,
                       const char *fallback, double width) {
  const char *model = report_string(root, "model");
  set_colour(cr, ink);
  set_font(cr, 19, 1);
  draw_text(cr, model ? model : fallback, width / 2, 14, 0.5, 0, 0);
  char line[512];
  int used = 0;
  const char *data = report_string(root, "data");
  if (data) used += snprintf(line + used, sizeof line, "data %s", data);
  const cJSON *test = cJSON_GetObjectItemCaseSensitive(root, "test");
  double loss, value;
  if (optional_number(test, "loss", &loss) > 0 &&
      optional_number(test, metric, &value) > 0)
    snprintf(line + used, sizeof line - (size_t)used,
             "%stest loss %.4f, test %s %.4f", used ? "  \xc2\xb7  " : "", loss,
             metric, value);
  set_colour(cr, grey);
  set_font(cr, 14, 0);
  draw_text(cr, line, width / 2, 42, 0.5, 0, 0);
}

static void paint_white(cairo_t *cr) {
  cairo_set_source_rgb(cr, 1, 1, 1);
  cairo_paint(cr);
}

static void draw_curves(cairo_t *cr, const cJSON *root, const curves *c,
                        const char *path) {
  paint_white(cr);
  draw_title(cr, root, c->metric_name, path, CURVES_WIDTH);
  int validation =
      any_value(c->val_loss, c->count) || any_value(c->val_metric, c->count);
  draw_legend(cr, validation, 84);
  double half = CURVES_WIDTH / 2.0, top = 108;
  draw_panel(cr, c, c->loss, c->val_loss, "loss", 0, half, top);
  draw_panel(cr, c, c->metric, c->val_metric, c->metric_name, half,
             CURVES_WIDTH, top);
}

/* ---- the confusion image ----------------------------------------------- */

/* White to dark blue through matplotlib's "Blues", t in [0, 1]. */
static rgb blues(double t) {
  static const rgb stops[] = {{0.969, 0.984, 1.000},
                              {0.776, 0.859, 0.937},
                              {0.420, 0.682, 0.839},
                              {0.129, 0.443, 0.710},
                              {0.031, 0.188, 0.420}};
  double at = t * 4;
  int i = at >= 4 ? 3 : (int)at;
  double u = at - i;
  rgb a = stops[i], b = stops[i + 1];
  return (rgb){a.r + (b.r - a.r) * u, a.g + (b.g - a.g) * u,
               a.b + (b.b - a.b) * u};
}

typedef struct grid_layout {
  double left, top, cell;
  double label_size, names, below; /* names: the widest name's width */
  int every;  /* label every k-th class when the cells are too small */
  int rotate; /* x labels at 45 degrees when they do not fit a cell */
} grid_layout;

static double widest_name(cairo_t *cr, const confusion *m) {
  double widest = 0;
  for (int i = 0; i < m->classes; i++) {
    double w = text_width(cr, m->names[i]);
    widest = w > widest ? w : widest;
  }
  return widest;
}

/* The names' size follows the cells' down to a readable 8 px; below that
 * only every k-th class is named, so a hundred classes do not smear. A
 * name wider than a third of the image runs off its edge rather than
 * squeezing the grid to nothing (the fuzzer's 2,000-character name left
 * no cells, and labelling every -3rd class read before the names). */
static void size_labels(cairo_t *cr, const confusion *m, grid_layout *g) {
  g->label_size = fmin(13, fmax(8, g->cell * 0.7));
  g->every = (int)fmax(1, ceil(g->label_size * 1.25 / g->cell));
  set_font(cr, g->label_size, 0);
  g->names = fmin(widest_name(cr, m), CONFUSION_WIDTH / 3.0);
  g->rotate = g->names > g->cell * g->every * 0.9;
  g->below = g->rotate ? (g->names + g->label_size) * SQRT_HALF + 10
                       : g->label_size * 1.5 + 10;
}

/* Room for the names on both axes and the axis titles, then the largest
 * square of cells that fits what is left; twice, as the names' size
 * depends on the cells'. */
static grid_layout layout_grid(cairo_t *cr, const confusion *m) {
  grid_layout g;
  double side = CONFUSION_WIDTH - 80, right = 30, under = 50;
  g.top = 86;
  for (int pass = 0; pass < 2; pass++) {
    g.cell = side / m->classes;
    size_labels(cr, m, &g);
    double left = 46 + g.names + 12;
    side = fmin(CONFUSION_WIDTH - left - right,
                CONFUSION_HEIGHT - g.top - g.below - under);
    side = fmax(side, m->classes); /* a pixel a class at least */
    g.left = left + (CONFUSION_WIDTH - left - right - side) / 2;
  }
  g.cell = side / m->classes;
  return g;
}

static double max_count(const confusion *m) {
  double most = 0;
  for (int i = 0; i < m->classes * m->classes; i++)
    most = m->counts[i] > most ? m->counts[i] : most;
  return most;
}

/* The count in a cell, white on dark cells, when the cell is big enough
 * to hold it. */
static void draw_count(cairo_t *cr, const grid_layout *g, double count,
                       double x, double y, double shade) {
  char text[32];
  snprintf(text, sizeof text, "%.0f", count);
  double size = fmin(15, g->cell * 0.4);
  set_font(cr, size, 0);
  double w = text_width(cr, text);
  if (w > g->cell * 0.9) size *= g->cell * 0.9 / w;
  if (size < 6) return;
  set_font(cr, size, 0);
  if (shade > 0.55)
    cairo_set_source_rgb(cr, 1, 1, 1);
  else
    set_colour(cr, ink);
  draw_text(cr, text, x + g->cell / 2, y + g->cell / 2, 0.5, 0.5, 0);
}

static void draw_cells(cairo_t *cr, const confusion *m, const grid_layout *g) {
  double most = max_count(m);
  for (int i = 0; i < m->classes; i++)
    for (int j = 0; j < m->classes; j++) {
      double count = m->counts[i * m->classes + j];
      double shade = most > 0 ? count / most : 0;
      double x = g->left + j * g->cell, y = g->top + i * g->cell;
      set_colour(cr, blues(shade));
      cairo_rectangle(cr, x, y, g->cell, g->cell);
      cairo_fill(cr);
      draw_count(cr, g, count, x, y, shade);
    }
  set_colour(cr, ink);
  cairo_set_line_width(cr, 1);
  double side = g->cell * m->classes;
  cairo_rectangle(cr, g->left, g->top, side, side);
  cairo_stroke(cr);
}

/* True classes down the left, predicted ones along the bottom, then the
 * axis titles outside them. */
static void draw_class_labels(cairo_t *cr, const confusion *m,
                              const grid_layout *g) {
  double side = g->cell * m->classes, bottom = g->top + side;
  set_colour(cr, ink);
  set_font(cr, g->label_size, 0);
  for (int i = 0; i < m->classes; i += g->every) {
    double centre = g->top + (i + 0.5) * g->cell;
    draw_text(cr, m->names[i], g->left - 8, centre, 1, 0.5, 0);
    double x = g->left + (i + 0.5) * g->cell;
    if (g->rotate) /* the name ends under its column */
      draw_text(cr, m->names[i], x + g->label_size * 0.35, bottom + 6, 1, 0.5,
                -PI / 4);
    else
      draw_text(cr, m->names[i], x, bottom + 6, 0.5, 0, 0);
  }
  set_font(cr, 16, 0);
  draw_text(cr, "predicted", g->left + side / 2, bottom + g->below, 0.5, 0, 0);
  draw_text(cr, "true", g->left - 8 - g->names - 12, g->top + side / 2, 0.5, 1,
            -PI / 2);
}

static void draw_confusion_title(cairo_t *cr, const cJSON *root,
                                 const confusion *m, const char *path) {
  double total = 0, right = 0;
  for (int i = 0; i < m->classes; i++)
    for (int j = 0; j < m->classes; j++) {
      total += m->counts[i * m->classes + j];
      right += i == j ? m->counts[i * m->classes + j] : 0;
    }
  const char *model = report_string(root, "model");
  const char *data = report_string(root, "data");
  char line[512];
  snprintf(line, sizeof line, "test confusion matrix%s%s", data ? " of " : "",
           data ? data : "");
  set_colour(cr, ink);
  set_font(cr, 19, 1);
  draw_text(cr, line, CONFUSION_WIDTH / 2.0, 14, 0.5, 0, 0);
  snprintf(line, sizeof line,
           "%s  \xc2\xb7  %.0f samples, %.2f%% on the "
           "diagonal",
           model ? model : path, total, total > 0 ? 100 * right / total : 0.0);
  set_colour(cr, grey);
  set_font(cr, 14, 0);
  draw_text(cr, line, CONFUSION_WIDTH / 2.0, 42, 0.5, 0, 0);
}

static void draw_confusion(cairo_t *cr, const cJSON *root, const confusion *m,
                           const char *path) {
  paint_white(cr);
  draw_confusion_title(cr, root, m, path);
  grid_layout g = layout_grid(cr, m);
  draw_cells(cr, m, &g);
  draw_class_labels(cr, m, &g);
}

/* ---- writing ----------------------------------------------------------- */

typedef struct png_sink {
  FILE *file;
  int error;
} png_sink;

static cairo_status_t write_chunk(void *closure, const unsigned char *data,
                                  unsigned int length) {
  png_sink *sink = closure;
  if (fwrite(data, 1, length, sink->file) == length)
    return CAIRO_STATUS_SUCCESS;
  sink->error = errno ? errno : EIO;
  return CAIRO_STATUS_WRITE_ERROR;
}

static int write_png(FILE *file, void *surface) {
  png_sink sink = {file, 0};
  cairo_status_t status =
      cairo_surface_write_to_png_stream(surface, write_chunk, &sink);
  if (status == CAIRO_STATUS_SUCCESS) return 0;
  return sink.error                         ? sink.error
         : status == CAIRO_STATUS_NO_MEMORY ? ENOMEM
                                            : EIO;
}

typedef void (*drawing)(cairo_t *cr, const void *what, const cJSON *root,
                        const char *report);

/* Draws into a fresh image of width x height and writes it to path
 * atomically, as every file mxu writes. */
static int render(const char *path, int width, int height, drawing draw,
                  const void *what, const cJSON *root, const char *report) {
  cairo_surface_t *surface =
      cairo_image_surface_create(CAIRO_FORMAT_RGB24, width, height);
  cairo_t *cr = cairo_create(surface);
  draw(cr, what, root, report);
  cairo_status_t status = cairo_status(cr);
  cairo_destroy(cr);
  int error = status == CAIRO_STATUS_SUCCESS
                  ? cli_write_atomically(path, write_png, surface)
                  : 0;
  cairo_surface_destroy(surface);
  if (status != CAIRO_STATUS_SUCCESS)
    return fail(path, "cannot draw: %s", cairo_status_to_string(status));
  if (error) return fail(path, "cannot write: %s", strerror(error));
  printf("wrote %s (%dx%d)\n", path, width, height);
  return CLI_OK;
}

static void curves_drawing(cairo_t *cr, const void *what, const cJSON *root,
                           const char *report) {
  draw_curves(cr, root, what, report);
}

static void confusion_drawing(cairo_t *cr, const void *what, const cJSON *root,
                              const char *report) {
  draw_confusion(cr, root, what, report);
}

/* ---- the command ------------------------------------------------------- */

/* Reads and checks everything the options ask for, then draws. */
static int plot(const plot_args *a, const cJSON *root) {
  curves c = {0};
  confusion m = {0};
  int code = CLI_OK;
  if (a->curves) code = parse_curves(a->report, root, &c);
  if (code == CLI_OK && a->confusion)
    code = parse_confusion(a->report, root, &m);
  if (code == CLI_OK && a->curves)
    code = render(a->curves, CURVES_WIDTH, CURVES_HEIGHT, curves_drawing, &c,
                  root, a->report);
  if (code == CLI_OK && a->confusion)
    code = render(a->confusion, CONFUSION_WIDTH, CONFUSION_HEIGHT,
                  confusion_drawing, &m, root, a->report);
  curves_free(&c);
  confusion_free(&m);
  return code;
}

int cli_plot(int argc, char **argv) {
  plot_args a = {0};
  cli_option options[PLOT_OPTION_COUNT];
  plot_options(&a, options);
  cli_command cmd = {"plot", "REPORT.json", plot_summary, options,
                     PLOT_OPTION_COUNT};
  int parsed = cli_parse(&cmd, argc, argv, &a.report);
  if (parsed != CLI_OK) return parsed < 0 ? CLI_OK : parsed;
  if (!a.curves && !a.confusion)
    return cli_usage_error("plot", "nothing to draw: give -o FILE.png "
                                   "(curves), --confusion FILE.png or both");
  cJSON *root = NULL;
  int code = read_report(a.report, &root);
  if (code == CLI_OK) code = plot(&a, root);
  cJSON_Delete(root);
  /* cairo keeps its fonts for the next drawing; there is none, and leak
   * checkers (make test-sanitize) would report them. */
  cairo_debug_reset_static_data();
  return code;
}
