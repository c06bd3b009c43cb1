/* test_plot.c — `mxu plot` as a user runs it: reports written by hand
 * drawn into PNGs that are decoded with cairo and checked for size, ink
 * and the series' colours; the documented errors and exit codes; and a
 * tiny real train and evaluate whose confusion matrix must agree with the
 * reported accuracy. MXU_BIN is the built binary's path (CMake). */
#include "check.h"

#include <cairo.h>
#include <cjson/cJSON.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>

extern char **environ;

#define temp_dir check_temp_dir

/* What src/cli/plot.c promises. */
#define CURVES_WIDTH 1200
#define CURVES_HEIGHT 540
#define CONFUSION_WIDTH 900
#define CONFUSION_HEIGHT 900

/* The series' colours: matplotlib's blue (train) and orange
 * (validation). */
#define TRAIN_RGB 0x1f77b4u
#define VAL_RGB 0xff7f0eu

static void write_bytes(const char *path, const void *data, size_t size) {
  FILE *f = fopen(path, "wb");
  CHECK(f != NULL);
  if (!f) return;
  CHECK(fwrite(data, 1, size, f) == size);
  fclose(f);
}

static void write_text(const char *path, const char *text) {
  write_bytes(path, text, strlen(text));
}

/* ---- running the binary ------------------------------------------------ */

/* run("train", "m.json", "--epochs", "3", NULL) */
#define run(...) check_run_bin(MXU_BIN, __VA_ARGS__)

/* The exit code and a piece of the text on stderr; consumes r. */
static void expect_run(result r, int want, const char *needle,
                       const char *what) {
  CHECK_MSG(r.code == want, "%s: exit %d, want %d; stderr: %s", what, r.code,
            want, r.err);
  CHECK_MSG(has(r.err, needle), "%s: stderr '%s' lacks '%s'", what, r.err,
            needle);
  result_free(&r);
}

/* ---- reports written by hand ------------------------------------------- */

static const char confusion_json[] =
    "\"confusion\": {\"class_names\": [\"cat\", \"dog\", \"bird\"], "
    "\"matrix\": [[50, 3, 2], [4, 40, 6], [1, 5, 39]]}";

/* Three epochs; validation in every one, only in some (null or absent
 * elsewhere), or never; with or without the confusion matrix. */
typedef enum validation { EVERY, SOME, NEVER } validation;

static const char *write_report(const char *name, validation v,
                                int with_confusion) {
  static const char *const val[3][3] = {
      {", \"val_loss\": 0.70, \"val_accuracy\": 0.74",
       ", \"val_loss\": 0.55, \"val_accuracy\": 0.80",
       ", \"val_loss\": 0.50, \"val_accuracy\": 0.83"},
      {", \"val_loss\": 0.70, \"val_accuracy\": 0.74",
       ", \"val_loss\": null, \"val_accuracy\": null",
       ", \"val_loss\": 0.50, \"val_accuracy\": 0.83"},
      {"", "", ""}};
  char text[4096];
  int used = snprintf(text, sizeof text,
                      "{\"model\": \"models/tiny.json\", \"data\": \"tiny\", "
                      "\"batch_size\": 32, \"epochs\": [");
  static const double loss[3] = {0.90, 0.60, 0.45},
                      accuracy[3] = {0.68, 0.79, 0.85};
  for (int e = 0; e < 3; e++)
    used += snprintf(text + used, sizeof text - (size_t)used,
                     "%s{\"epoch\": %d, \"loss\": %.2f, \"accuracy\": "
                     "%.2f%s, \"seconds\": 1.5}",
                     e ? ", " : "", e + 1, loss[e], accuracy[e], val[v][e]);
  snprintf(text + used, sizeof text - (size_t)used,
           "], \"test\": {\"loss\": 0.50, \"accuracy\": 0.83}%s%s, "
           "\"wall_seconds\": 5}",
           with_confusion ? ", " : "", with_confusion ? confusion_json : "");
  const char *path = temp_path(name);
  write_text(path, text);
  return path;
}

/* ---- reading the PNG back ---------------------------------------------- */

static uint32_t be32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
         p[3];
}

/* The signature and IHDR's width and height, read from the bytes. */
static void check_png_header(const char *path, int width, int height) {
  static const unsigned char signature[8] = {0x89, 'P',  'N',  'G',
                                             '\r', '\n', 0x1a, '\n'};
  unsigned char head[24] = {0};
  FILE *f = fopen(path, "rb");
  CHECK_MSG(f != NULL, "%s was not written", path);
  if (!f) return;
  size_t got = fread(head, 1, sizeof head, f);
  fclose(f);
  CHECK(got == sizeof head);
  CHECK_MSG(memcmp(head, signature, 8) == 0, "%s: no PNG signature", path);
  CHECK(memcmp(head + 12, "IHDR", 4) == 0);
  CHECK_MSG(be32(head + 16) == (uint32_t)width &&
                be32(head + 20) == (uint32_t)height,
            "%s: %ux%u, want %dx%d", path, be32(head + 16), be32(head + 20),
            width, height);
}

typedef struct image {
  cairo_surface_t *surface;
  int width, height, stride;
  const unsigned char *data;
} image;

static image decode(const char *path) {
  image im = {cairo_image_surface_create_from_png(path), 0, 0, 0, NULL};
  CHECK_MSG(cairo_surface_status(im.surface) == CAIRO_STATUS_SUCCESS, "%s: %s",
            path, cairo_status_to_string(cairo_surface_status(im.surface)));
  cairo_surface_flush(im.surface);
  im.width = cairo_image_surface_get_width(im.surface);
  im.height = cairo_image_surface_get_height(im.surface);
  im.stride = cairo_image_surface_get_stride(im.surface);
  im.data = cairo_image_surface_get_data(im.surface);
  return im;
}

static uint32_t pixel(const image *im, int x, int y) {
  uint32_t p;
  memcpy(&p, im->data + (size_t)y * (size_t)im->stride + (size_t)x * 4, 4);
  return p & 0xffffffu; /* cairo's native 0x(AA)RRGGBB */
}

static int near(uint32_t a, uint32_t b, int tolerance) {
  for (int shift = 0; shift < 24; shift += 8) {
    int d = (int)(a >> shift & 0xff) - (int)(b >> shift & 0xff);
    if (d > tolerance || d < -tolerance) return 0;
  }
  return 1;
}

/* Pixels of colour rgb (within a rounding step) in [x0, x1) x [y0, y1). */
static int count_colour(const image *im, uint32_t rgb, int x0, int y0, int x1,
                        int y1) {
  int count = 0;
  for (int y = y0; y < y1 && y < im->height; y++)
    for (int x = x0; x < x1 && x < im->width; x++)
      count += near(pixel(im, x, y), rgb, 2);
  return count;
}

/* Not blank: a fair share of the image is not the white background. */
static void check_ink(const image *im, const char *path) {
  int white = count_colour(im, 0xffffffu, 0, 0, im->width, im->height);
  double ink = 1.0 - (double)white / ((double)im->width * im->height);
  CHECK_MSG(ink > 0.02, "%s: only %.2f%% of the pixels are not white", path,
            100 * ink);
}

/* The two panels are the image's halves; their plot areas lie below the
 * title and legend and above the x axis' labels. */
static void check_curves_png(const char *path, int want_validation) {
  check_png_header(path, CURVES_WIDTH, CURVES_HEIGHT);
  image im = decode(path);
  if (im.width == CURVES_WIDTH && im.height == CURVES_HEIGHT) {
    check_ink(&im, path);
    int top = 110, bottom = CURVES_HEIGHT - 70, half = CURVES_WIDTH / 2;
    for (int panel = 0; panel < 2; panel++) {
      int x0 = panel * half, x1 = x0 + half;
      int train = count_colour(&im, TRAIN_RGB, x0, top, x1, bottom);
      int val = count_colour(&im, VAL_RGB, x0, top, x1, bottom);
      CHECK_MSG(train > 100, "%s: panel %d: %d train-blue pixels", path, panel,
                train);
      if (want_validation)
        CHECK_MSG(val > 100, "%s: panel %d: %d validation-orange pixels", path,
                  panel, val);
      else
        CHECK_MSG(val == 0,
                  "%s: panel %d: %d validation-orange pixels but "
                  "the report has no validation",
                  path, panel, val);
    }
    /* The legend sits above the panels. */
    CHECK(count_colour(&im, TRAIN_RGB, 0, 60, CURVES_WIDTH, 105) > 20);
  }
  cairo_surface_destroy(im.surface);
}

/* The heat map runs from white to matplotlib's darkest "Blues". */
static void check_confusion_png(const char *path) {
  check_png_header(path, CONFUSION_WIDTH, CONFUSION_HEIGHT);
  image im = decode(path);
  if (im.width == CONFUSION_WIDTH && im.height == CONFUSION_HEIGHT) {
    check_ink(&im, path);
    int darkest = count_colour(&im, 0x08306bu, 0, 0, im.width, im.height);
    CHECK_MSG(darkest > 1000, "%s: %d pixels of the largest count's blue", path,
              darkest);
  }
  cairo_surface_destroy(im.surface);
}

/* ---- hand-written reports ---------------------------------------------- */

static void draws_reports(void) {
  const char *every = write_report("every.json", EVERY, 1);
  const char *curves = temp_path("every.png");
  const char *matrix = temp_path("every_confusion.png");
  result r = run("plot", every, "-o", curves, "--confusion", matrix, NULL);
  CHECK_MSG(r.code == 0, "exit %d: %s", r.code, r.err);
  CHECK(has(r.out, curves) && has(r.out, matrix));
  result_free(&r);
  check_curves_png(curves, 1);
  check_confusion_png(matrix);

  const char *some = write_report("some.json", SOME, 0);
  curves = temp_path("some.png");
  r = run("plot", some, "-o", curves, NULL);
  CHECK_MSG(r.code == 0, "exit %d: %s", r.code, r.err);
  result_free(&r);
  check_curves_png(curves, 1);

  const char *never = write_report("never.json", NEVER, 0);
  curves = temp_path("never.png");
  r = run("plot", never, "-o", curves, NULL);
  CHECK_MSG(r.code == 0, "exit %d: %s", r.code, r.err);
  result_free(&r);
  check_curves_png(curves, 0);
}

/* ---- errors ------------------------------------------------------------ */

static void errors(void) {
  const char *out = temp_path("out.png");
  const char *missing = temp_path("missing.json");
  expect_run(run("plot", missing, "-o", out, NULL), 1, missing, "missing");
  const char *bad = temp_path("bad.json");
  write_text(bad, "{\"model\": \"m\", \"epochs\": [\n{\"loss\": }]}");
  result r = run("plot", bad, "-o", out, NULL);
  CHECK(has(r.err, bad) && has(r.err, "line 2"));
  expect_run(r, 1, "malformed JSON", "malformed");

  const char *plain = write_report("plain.json", EVERY, 0);
  r = run("plot", plain, "-o", out, "--confusion", out, NULL);
  CHECK(has(r.err, plain));
  expect_run(r, 1, "run mxu evaluate --report", "no confusion");
  struct stat st;
  CHECK_MSG(stat(out, &st) != 0, "nothing is drawn when an input is missing");

  const char *no_epochs = temp_path("evaluate.json");
  write_text(no_epochs, "{\"model\": \"m\", \"test\": {\"loss\": 1}}");
  expect_run(run("plot", no_epochs, "-o", out, NULL), 1, "no epochs",
             "no epochs");
  const char *no_loss = temp_path("no_loss.json");
  write_text(no_loss, "{\"epochs\": [{\"epoch\": 1, \"accuracy\": 0.5}]}");
  expect_run(run("plot", no_loss, "-o", out, NULL), 1, "\"loss\" is missing",
             "no loss");

  /* Epochs that are not objects: a list's items have no names (this
   * crashed mxu plot). */
  const char *lists = temp_path("lists.json");
  write_text(lists, "{\"epochs\": [[1, 2], [3, 4]]}");
  expect_run(run("plot", lists, "-o", out, NULL), 1,
             "epochs[0] is not an object", "epochs of lists");
  write_text(lists, "{\"epochs\": [{\"loss\": 1, \"accuracy\": 0.5}, 7]}");
  expect_run(run("plot", lists, "-o", out, NULL), 1,
             "epochs[1] is not an object", "a later epoch a number");

  /* A file far larger than any report (sparse: no disk) is refused by
   * size, naming the limit, before it is read whole. */
  const char *huge = temp_path("huge.json");
  write_text(huge, "{\"epochs\": [");
  CHECK(truncate(huge, (off_t)65 << 20) == 0);
  expect_run(run("plot", huge, "-o", out, NULL), 1, "REPORT_MAX_BYTES",
             "a 65 MiB report");
  unlink(huge);

  /* A class name far wider than the image (the fuzzer's: it left no
   * room for cells, and the labels were read from before the names). */
  const char *wide = temp_path("wide.json");
  char text[4096];
  int n = snprintf(text, sizeof text, "{\"confusion\": {\"class_names\": [\"");
  for (int i = 0; i < 2000; i++) text[n++] = 'w';
  snprintf(text + n, sizeof text - (size_t)n,
           "\", \"b\"], \"matrix\": [[1, 2], [3, 4]]}}");
  write_text(wide, text);
  r = run("plot", wide, "--confusion", out, NULL);
  CHECK_MSG(r.code == 0, "exit %d: %s", r.code, r.err);
  result_free(&r);
  unlink(out);

  const char *nowhere = temp_path("no/such/dir/curves.png");
  r = run("plot", plain, "-o", nowhere, NULL);
  CHECK(has(r.err, "cannot write"));
  expect_run(r, 1, nowhere, "unwritable");

  expect_run(run("plot", plain, NULL), 2, "nothing to draw", "no output");
  expect_run(run("plot", plain, "-o", out, "--colour", "red", NULL), 2,
             "unknown option '--colour'", "bad option");
  expect_run(run("plot", "-o", out, NULL), 2, "missing REPORT.json",
             "no report");
  r = run("plot", "--help", NULL);
  CHECK(r.code == 0 && has(r.out, "-o FILE.png") &&
        has(r.out, "--confusion FILE.png"));
  result_free(&r);
  r = run("--help", NULL);
  CHECK(r.code == 0 && has(r.out, "  plot "));
  result_free(&r);
}

/* ---- a real confusion matrix ------------------------------------------- */

/* 4x4 images whose class is where the one bright pixel is, in a folder
 * whose name makes mxu give them Fashion-MNIST's class names. */
static void write_idx(const char *dir, const char *prefix, int count,
                      int offset) {
  char path[512];
  unsigned char *images = calloc(16 + (size_t)count * 16, 1);
  unsigned char *labels = calloc(8 + (size_t)count, 1);
  const unsigned char image_head[16] = {
      0, 0, 8, 3, 0, 0, 0, (unsigned char)count, 0, 0, 0, 4, 0, 0, 0, 4};
  const unsigned char label_head[8] = {0, 0, 8, 1,
                                       0, 0, 0, (unsigned char)count};
  memcpy(images, image_head, 16);
  memcpy(labels, label_head, 8);
  for (int i = 0; i < count; i++) {
    int label = (i * 7 + offset) % 10;
    labels[8 + i] = (unsigned char)label;
    for (int p = 0; p < 16; p++)
      images[16 + i * 16 + p] = (unsigned char)((i * 31 + p * 17) % 40);
    images[16 + i * 16 + label] = 255;
  }
  snprintf(path, sizeof path, "%s/%s-images-idx3-ubyte", dir, prefix);
  write_bytes(path, images, 16 + (size_t)count * 16);
  snprintf(path, sizeof path, "%s/%s-labels-idx1-ubyte", dir, prefix);
  write_bytes(path, labels, 8 + (size_t)count);
  free(images);
  free(labels);
}

static const char tiny_model[] =
    "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"tiny\", "
    "\"layers\": ["
    "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": "
    "[null, 4, 4, 1], \"dtype\": \"float32\", \"name\": \"input_1\"}},"
    "{\"class_name\": \"Flatten\", \"config\": {\"name\": \"flatten\"}},"
    "{\"class_name\": \"Dense\", \"config\": {\"name\": \"dense\", \"units\": "
    "10, \"activation\": \"softmax\", \"use_bias\": true}}]}, "
    "\"keras_version\": \"2.6.0\", \"backend\": \"tensorflow\"}";

static double number(const cJSON *object, const char *key) {
  const cJSON *item = cJSON_GetObjectItemCaseSensitive(object, key);
  return cJSON_IsNumber(item) ? item->valuedouble : NAN;
}

/* Rows sum to each class' count, the diagonal to the reported accuracy
 * (both count the first highest output), and the names are the data
 * set's. */
static void check_confusion_report(const char *path, int test_count) {
  char *text = check_slurp(path);
  cJSON *root = cJSON_Parse(text ? text : "");
  free(text);
  CHECK_MSG(root != NULL, "%s is not JSON", path);
  const cJSON *c = cJSON_GetObjectItemCaseSensitive(root, "confusion");
  const cJSON *names = cJSON_GetObjectItemCaseSensitive(c, "class_names");
  const cJSON *matrix = cJSON_GetObjectItemCaseSensitive(c, "matrix");
  CHECK(cJSON_GetArraySize(names) == 10 && cJSON_GetArraySize(matrix) == 10);
  CHECK(cJSON_IsString(cJSON_GetArrayItem(names, 9)) &&
        !strcmp(cJSON_GetArrayItem(names, 9)->valuestring, "Ankle boot"));
  double total = 0, diagonal = 0;
  for (int i = 0; i < cJSON_GetArraySize(matrix); i++) {
    const cJSON *row = cJSON_GetArrayItem(matrix, i);
    double sum = 0;
    for (int j = 0; j < cJSON_GetArraySize(row); j++) {
      double v = cJSON_GetArrayItem(row, j)->valuedouble;
      sum += v;
      diagonal += i == j ? v : 0;
    }
    int want = 0; /* labels are (k * 7 + 3) % 10 */
    for (int k = 0; k < test_count; k++) want += (k * 7 + 3) % 10 == i;
    CHECK_MSG(sum == want, "row %d sums to %.0f, want %d", i, sum, want);
    total += sum;
  }
  const cJSON *test = cJSON_GetObjectItemCaseSensitive(root, "test");
  CHECK_MSG(total == test_count, "%.0f samples, want %d", total, test_count);
  CHECK_MSG(diagonal / test_count == number(test, "accuracy"),
            "diagonal %.0f / %d, accuracy %.6f", diagonal, test_count,
            number(test, "accuracy"));
  cJSON_Delete(root);
}

static void real_confusion(void) {
  const char *data = temp_path("fashion");
  CHECK(mkdir(data, 0755) == 0);
  int test_count = 45; /* not a multiple of the batch */
  write_idx(data, "train", 200, 0);
  write_idx(data, "t10k", test_count, 3);
  const char *model = temp_path("tiny.json");
  write_text(model, tiny_model);
  const char *weights = temp_path("tiny.weights.h5");
  const char *train_report = temp_path("train.json");
  result r =
      run("train", model, "--data", data, "--epochs", "4", "--batch-size", "20",
          "--rescale", "1/255", "--learning-rate", "0.05", "--verbose", "0",
          "--save-weights", weights, "--report", train_report, NULL);
  CHECK_MSG(r.code == 0, "mxu train: exit %d: %s", r.code, r.err);
  result_free(&r);
  const char *report = temp_path("evaluate.json");
  r = run("evaluate", model, "--weights", weights, "--data", data, "--rescale",
          "1/255", "--batch-size", "8", "--report", report, NULL);
  CHECK_MSG(r.code == 0, "mxu evaluate: exit %d: %s", r.code, r.err);
  result_free(&r);
  check_confusion_report(report, test_count);

  const char *matrix = temp_path("real_confusion.png");
  r = run("plot", report, "--confusion", matrix, NULL);
  CHECK_MSG(r.code == 0, "exit %d: %s", r.code, r.err);
  result_free(&r);
  check_png_header(matrix, CONFUSION_WIDTH, CONFUSION_HEIGHT);
  const char *curves = temp_path("real_curves.png");
  r = run("plot", train_report, "-o", curves, NULL);
  CHECK_MSG(r.code == 0, "exit %d: %s", r.code, r.err);
  result_free(&r);
  check_curves_png(curves, 1);
  /* An evaluate report has no epochs to draw. */
  expect_run(run("plot", report, "-o", curves, NULL), 1, "no epochs",
             "evaluate report");
}

/* Under the sanitizers: fontconfig, below cairo's text, keeps a few
 * hundred bytes nothing frees (a bare cairo_show_text program does too),
 * which is not mxu's leak to report. */
static void suppress_fontconfig_leak(void) {
  const char *path = temp_path("lsan.supp");
  write_text(path, "leak:libfontconfig.so\n");
  const char *old = getenv("LSAN_OPTIONS");
  char options[1024];
  snprintf(options, sizeof options, "%s%ssuppressions=%s", old ? old : "",
           old && *old ? ":" : "", path);
  setenv("LSAN_OPTIONS", options, 1);
}

int main(void) {
  if (!check_temp_make("test_plot")) {
    perror("mkdtemp");
    return 1;
  }
  suppress_fontconfig_leak();
  draws_reports();
  errors();
  real_confusion();
  if (!check_failures) check_remove_tree(temp_dir);
  return check_report("test_plot");
}
