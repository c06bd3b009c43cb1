/* csv.c — a numeric table as a data set: a header row of column names,
 * one sample a row, one column the label (a class index, or a float
 * target for a regression), every other column a float32 feature. libcsv
 * (strict mode) splits the text, quoting included; every cell must be a finite
 * number, and one that is not is an error naming its row and column. */
#include "core/core.h"
#include "data/data.h"
#include "data/loader.h"

#include <csv.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct table {
  const char *path, *label_name;
  char **names; /* the header's column names */
  int columns, label_column;
  int features;  /* columns less the label column */
  int column;    /* the cell being read, in its row */
  int64_t row;   /* rows read so far, the header included */
  float *values; /* features, row after row */
  float *labels; /* the label column's values */
  int64_t samples, capacity;
  mxu_status status;
} table;

static void table_free(table *t) {
  for (int i = 0; i < t->columns; i++) free(t->names[i]);
  free(t->names);
  free(t->values);
  free(t->labels);
}

static void fail_cell(table *t, const char *cell, const char *why) {
  if (t->status != MXU_OK) return;
  t->status = mxu_fail(MXU_ERR_FORMAT,
                       "csv: %s: row %lld, column '%s' (%d): '%.40s' %s",
                       t->path, (long long)t->row + 1,
                       t->column < t->columns ? t->names[t->column] : "?",
                       t->column + 1, cell, why);
}

static int grow(table *t) {
  if (t->samples < t->capacity) return 1;
  int64_t capacity = t->capacity ? 2 * t->capacity : 1024;
  int features = t->features;
  if (capacity > MXU_MAX_ELEMENTS / (features ? features : 1)) return 0;
  float *values =
      realloc(t->values, (size_t)capacity * (size_t)features * sizeof *values);
  if (values) t->values = values;
  float *labels = realloc(t->labels, (size_t)capacity * sizeof *labels);
  if (labels) t->labels = labels;
  if (!values || !labels) return 0;
  t->capacity = capacity;
  return 1;
}

static void header_cell(table *t, const char *text) {
  char **names = realloc(t->names, (size_t)(t->columns + 1) * sizeof *names);
  char *name = strdup(text);
  if (names) t->names = names;
  if (!names || !name) {
    free(name);
    t->status = mxu_fail(MXU_ERR_NOMEM, "csv: %s: out of memory", t->path);
    return;
  }
  t->names[t->columns++] = name;
}

/* A finite number, the whole cell (blanks around it allowed). */
static int number(const char *text, double *value) {
  char *end;
  *value = strtod(text, &end);
  if (end == text) return 0;
  while (*end == ' ' || *end == '\t') end++;
  return *end == 0 && isfinite(*value);
}

static void data_cell(table *t, const char *text) {
  if (t->column >= t->columns) {
    fail_cell(t, text, "is past the header's columns");
    return;
  }
  double v;
  if (!number(text, &v)) {
    fail_cell(t, text, "is not a finite number");
    return;
  }
  if (t->column == 0 && !grow(t)) {
    t->status = mxu_fail(MXU_ERR_NOMEM, "csv: %s: out of memory at row %lld",
                         t->path, (long long)t->row + 1);
    return;
  }
  if (t->column == t->label_column) {
    t->labels[t->samples] = (float)v;
    return;
  }
  int feature = t->column - (t->column > t->label_column);
  t->values[t->samples * t->features + feature] = (float)v;
}

static void on_cell(void *cell, size_t length, void *data) {
  table *t = data;
  (void)length; /* CSV_APPEND_NULL ends every cell */
  const char *text = cell ? cell : "";
  if (t->status == MXU_OK) {
    if (t->row == 0)
      header_cell(t, text);
    else
      data_cell(t, text);
  }
  t->column++;
}

static void on_row(int end, void *data) {
  (void)end;
  table *t = data;
  if (t->status == MXU_OK && t->row == 0) {
    /* Without a label column (predict's input) every column is a
     * feature; the label index then lies past the last. */
    t->label_column = t->label_name ? -1 : t->columns;
    t->features = t->columns - (t->label_name != NULL);
    for (int i = 0; t->label_name && i < t->columns; i++)
      if (strcmp(t->names[i], t->label_name) == 0) t->label_column = i;
    if (t->label_column < 0)
      t->status =
          mxu_fail(MXU_ERR_FORMAT,
                   "csv: %s: the header has no column '%s' (the "
                   "label column); its first is '%s'",
                   t->path, t->label_name, t->columns ? t->names[0] : "");
    else if (t->columns < 1 + (t->label_name != NULL))
      t->status = mxu_fail(MXU_ERR_FORMAT,
                           "csv: %s: only the label column; features need "
                           "another",
                           t->path);
  } else if (t->status == MXU_OK && t->column != t->columns) {
    t->status = mxu_fail(MXU_ERR_FORMAT,
                         "csv: %s: row %lld has %d cells, the header %d",
                         t->path, (long long)t->row + 1, t->column, t->columns);
  } else if (t->status == MXU_OK) {
    t->samples++;
  }
  t->row++;
  t->column = 0;
}

static mxu_status parse(table *t, const unsigned char *text, size_t size) {
  struct csv_parser parser;
  if (csv_init(&parser, CSV_STRICT | CSV_STRICT_FINI | CSV_APPEND_NULL) != 0)
    return mxu_fail(MXU_ERR_NOMEM, "csv: %s: out of memory", t->path);
  if (csv_parse(&parser, text, size, on_cell, on_row, t) != size ||
      csv_fini(&parser, on_cell, on_row, t) != 0) {
    if (t->status == MXU_OK)
      t->status =
          mxu_fail(MXU_ERR_FORMAT, "csv: %s: row %lld: %s", t->path,
                   (long long)t->row + 1, csv_strerror(csv_error(&parser)));
  }
  csv_free(&parser);
  if (t->status == MXU_OK && t->row == 0)
    t->status = mxu_fail(MXU_ERR_FORMAT,
                         "csv: %s: empty; expected a header row of column "
                         "names, then one row a sample",
                         t->path);
  return t->status;
}

mxu_status mxu_load_csv(const char *path, const char *label_column,
                        mxu_dataset **out) {
  if (!out) return mxu_fail(MXU_ERR_ARG, "csv: out is NULL");
  *out = NULL;
  if (!path) return mxu_fail(MXU_ERR_ARG, "csv: no path given");
  unsigned char *text = NULL;
  size_t size = 0;
  MXU_TRY(mxu_read_file("csv", path, &text, &size));
  table t = {0};
  t.path = path;
  t.label_name = label_column;
  mxu_status s = parse(&t, text, size);
  free(text);
  /* Class indices make a classification table; any other value a
   * regression's (no classes, the column as float targets). */
  int classes = 1, labelled = label_column != NULL;
  for (int64_t i = 0; s == MXU_OK && labelled && classes && i < t.samples;
       i++) {
    float v = t.labels[i];
    classes = v < 0 || v != floorf(v) || v >= (1 << 24) ? 0
              : (int)v + 1 > classes                    ? (int)v + 1
                                                        : classes;
  }
  if (s == MXU_OK) {
    int64_t features = t.features;
    s = mxu_dataset_alloc(mxu_shape_make(1, &features), t.samples, classes,
                          out);
    if (s == MXU_OK && labelled) s = mxu_dataset_add_targets(*out, 1);
  }
  if (s == MXU_OK && t.samples) {
    memcpy((*out)->x, t.values,
           (size_t)t.samples * (size_t)t.features * sizeof(float));
    if (labelled)
      memcpy((*out)->targets, t.labels, (size_t)t.samples * sizeof(float));
    for (int64_t i = 0; labelled && classes && i < t.samples; i++)
      (*out)->labels[i] = (int32_t)t.labels[i];
  }
  if (s != MXU_OK) {
    mxu_dataset_free(*out);
    *out = NULL;
  }
  table_free(&t);
  return s;
}
