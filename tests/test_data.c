/* test_data.c — the data module: the real MNIST, Fashion-MNIST and CIFAR-10
 * files, small IDX and CIFAR files written plain and gzip to a temp dir,
 * the errors broken files must raise, and the data set calls. */
#include "check.h"
#include "core/core.h"
#include "data/data.h"
#include "mxu.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#define FASHION_DIR "/usr/share/datasets/fashion-mnist"
#define MAX_FILES 64

static char tmp_dir[64];
static char created[MAX_FILES][512];
static int created_count;

/* ---- helpers ----------------------------------------------------------- */

static void tmp_path(char *out, const char *name) {
  snprintf(out, 512, "%s/%s", tmp_dir, name);
}

static void remember(const char *path) {
  for (int i = 0; i < created_count; i++)
    if (strcmp(created[i], path) == 0) return;
  if (created_count < MAX_FILES) strcpy(created[created_count++], path);
}

/* Writes data to tmp_dir/name, gzip-compressed when gz is set. */
static void write_file(const char *name, const void *data, size_t size,
                       int gz) {
  char path[512];
  tmp_path(path, name);
  remember(path);
  if (gz) {
    gzFile file = gzopen(path, "wb");
    CHECK(file != NULL);
    if (!file) return;
    CHECK(size == 0 || gzwrite(file, data, (unsigned)size) == (int)size);
    CHECK(gzclose(file) == Z_OK);
    return;
  }
  FILE *file = fopen(path, "wb");
  CHECK(file != NULL);
  if (!file) return;
  CHECK(fwrite(data, 1, size, file) == size);
  CHECK(fclose(file) == 0);
}

static void put_be32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)(v >> 24);
  p[1] = (unsigned char)(v >> 16);
  p[2] = (unsigned char)(v >> 8);
  p[3] = (unsigned char)v;
}

static unsigned char idx_pixel(size_t i) {
  return (unsigned char)((i * 37 + 11) & 255);
}
static int idx_label(size_t i) { return (int)(i * 3 % 10); }

/* An IDX images file of count rows x cols images; returns its size. */
static size_t make_idx_images(unsigned char *buf, uint32_t count, uint32_t rows,
                              uint32_t cols) {
  put_be32(buf, 0x803);
  put_be32(buf + 4, count);
  put_be32(buf + 8, rows);
  put_be32(buf + 12, cols);
  size_t n = (size_t)count * rows * cols;
  for (size_t i = 0; i < n; i++) buf[16 + i] = idx_pixel(i);
  return 16 + n;
}

static size_t make_idx_labels(unsigned char *buf, uint32_t count) {
  put_be32(buf, 0x801);
  put_be32(buf + 4, count);
  for (size_t i = 0; i < count; i++) buf[8 + i] = (unsigned char)idx_label(i);
  return 8 + count;
}

/* The byte a synthetic CIFAR file holds for record r, channel c, pixel p. */
static unsigned char cifar_byte(int seed, int r, int c, int p) {
  return (unsigned char)((seed * 13 + r * 31 + c * 101 + p * 7) & 255);
}
static int cifar_label(int seed, int r, int classes) {
  return (seed * 7 + r * 3) % classes;
}

/* records CIFAR records; with label_bytes 2 the coarse label is fine / 5. */
static size_t make_cifar(unsigned char *buf, int records, int label_bytes,
                         int seed) {
  size_t record = (size_t)label_bytes + 3072, at = 0;
  int classes = label_bytes == 1 ? 10 : 100;
  for (int r = 0; r < records; r++, at += record) {
    int label = cifar_label(seed, r, classes);
    if (label_bytes == 2) buf[at] = (unsigned char)(label / 5);
    buf[at + (size_t)label_bytes - 1] = (unsigned char)label;
    for (int c = 0; c < 3; c++)
      for (int p = 0; p < 1024; p++)
        buf[at + (size_t)label_bytes + (size_t)c * 1024 + (size_t)p] =
            cifar_byte(seed, r, c, p);
  }
  return at;
}

/* A failure must give the status, leave *out NULL and say where: the file
 * name and `where` ("offset", "record 3", ...). */
static void expect_error(mxu_status got, mxu_status want,
                         const mxu_dataset *out, const char *name,
                         const char *where) {
  const char *message = mxu_errmsg();
  CHECK_MSG(got == want, "status %s, expected %s (%s)", mxu_status_name(got),
            mxu_status_name(want), message);
  CHECK(out == NULL);
  CHECK_MSG(strstr(message, name) != NULL, "'%s' not in '%s'", name, message);
  CHECK_MSG(strstr(message, where) != NULL, "'%s' not in '%s'", where, message);
}

static void check_histogram(const mxu_dataset *data, const int *want,
                            int classes) {
  int64_t counts[100] = {0};
  const int32_t *labels = mxu_dataset_labels(data);
  for (int64_t i = 0; i < mxu_dataset_count(data); i++) {
    CHECK(labels[i] >= 0 && labels[i] < classes);
    if (labels[i] >= 0 && labels[i] < classes) counts[labels[i]]++;
  }
  for (int c = 0; c < classes; c++)
    CHECK_MSG(counts[c] == want[c], "class %d: %lld samples, expected %d", c,
              (long long)counts[c], want[c]);
}

/* Raw pixels: whole numbers spanning exactly 0..255. */
static void check_pixel_range(const mxu_dataset *data) {
  int64_t n = mxu_dataset_count(data);
  mxu_shape shape = mxu_dataset_shape(data);
  n *= mxu_shape_count(&shape);
  const float *x = mxu_dataset_x(data);
  float lo = 1e9f, hi = -1e9f;
  int64_t fractional = 0;
  for (int64_t i = 0; i < n; i++) {
    if (x[i] < lo) lo = x[i];
    if (x[i] > hi) hi = x[i];
    if (x[i] != (float)(int)x[i]) fractional++;
  }
  CHECK(lo == 0.0f);
  CHECK(hi == 255.0f);
  CHECK(fractional == 0);
}

static void check_shape3(const mxu_dataset *data, int64_t h, int64_t w,
                         int64_t c) {
  mxu_shape shape = mxu_dataset_shape(data);
  CHECK(shape.rank == 3);
  CHECK(shape.dims[0] == h && shape.dims[1] == w && shape.dims[2] == c);
}

static double sample_sum(const mxu_dataset *data, int64_t index) {
  mxu_shape shape = mxu_dataset_shape(data);
  int64_t n = mxu_shape_count(&shape);
  const float *x = mxu_dataset_x(data) + index * n;
  double sum = 0;
  for (int64_t i = 0; i < n; i++) sum += x[i];
  return sum;
}

static int have_dir(const char *dir) {
  if (access(dir, R_OK) == 0) return 1;
  printf("  skipped: %s is not there\n", dir);
  return 0;
}

/* ---- the real data sets ------------------------------------------------ */

static mxu_dataset *timed_load(const char *what,
                               mxu_status (*load)(const char *, mxu_split,
                                                  mxu_dataset **),
                               const char *dir, mxu_split split) {
  mxu_dataset *data = NULL;
  double start = mxu_now_seconds();
  CHECK_OK(load(dir, split, &data));
  printf("  %s %s: %lld samples in %.2f s\n", what,
         split == MXU_TRAIN ? "train" : "test",
         (long long)mxu_dataset_count(data), mxu_now_seconds() - start);
  return data;
}

static void test_fashion_mnist(void) {
  if (!have_dir(FASHION_DIR)) return;
  int train_hist[10], test_hist[10];
  for (int c = 0; c < 10; c++) train_hist[c] = 6000, test_hist[c] = 1000;
  mxu_dataset *train =
      timed_load("fashion-mnist", mxu_load_mnist_dir, FASHION_DIR, MXU_TRAIN);
  mxu_dataset *test =
      timed_load("fashion-mnist", mxu_load_mnist_dir, FASHION_DIR, MXU_TEST);
  if (!train || !test) goto done;
  CHECK(mxu_dataset_count(train) == 60000);
  CHECK(mxu_dataset_count(test) == 10000);
  CHECK(mxu_dataset_num_classes(train) == 10);
  check_shape3(train, 28, 28, 1);
  check_histogram(train, train_hist, 10);
  check_histogram(test, test_hist, 10);
  check_pixel_range(train);
  check_pixel_range(test);
  CHECK(mxu_dataset_labels(train)[0] == 9);
  CHECK_NEAR(sample_sum(test, 9999), 24390, 0);
done:
  mxu_dataset_free(train);
  mxu_dataset_free(test);
}

static void test_mnist(void) {
  static const int train_hist[10] = {5923, 6742, 5958, 6131, 5842,
                                     5421, 5918, 6265, 5851, 5949};
  static const int test_hist[10] = {980, 1135, 1032, 1010, 982,
                                    892, 958,  1028, 974,  1009};
  char dir[512];
  snprintf(dir, sizeof dir, "%s/mnist", check_shared_data());
  if (!have_dir(dir)) return;
  mxu_dataset *train = timed_load("mnist", mxu_load_mnist_dir, dir, MXU_TRAIN);
  mxu_dataset *test = timed_load("mnist", mxu_load_mnist_dir, dir, MXU_TEST);
  if (!train || !test) goto done;
  CHECK(mxu_dataset_count(train) == 60000);
  CHECK(mxu_dataset_count(test) == 10000);
  check_shape3(test, 28, 28, 1);
  check_histogram(train, train_hist, 10);
  check_histogram(test, test_hist, 10);
  check_pixel_range(train);
  CHECK(mxu_dataset_labels(train)[0] == 5);
  CHECK(mxu_dataset_labels(test)[0] == 7);
  CHECK_NEAR(sample_sum(train, 0), 27525, 0);
  CHECK(mxu_dataset_x(train)[14 * 28 + 14] == 240.0f);
done:
  mxu_dataset_free(train);
  mxu_dataset_free(test);
}

static void test_cifar10(void) {
  char dir[512];
  snprintf(dir, sizeof dir, "%s/cifar-10", check_shared_data());
  if (!have_dir(dir)) return;
  int train_hist[10], test_hist[10];
  for (int c = 0; c < 10; c++) train_hist[c] = 5000, test_hist[c] = 1000;
  mxu_dataset *train =
      timed_load("cifar-10", mxu_load_cifar10_dir, dir, MXU_TRAIN);
  mxu_dataset *test =
      timed_load("cifar-10", mxu_load_cifar10_dir, dir, MXU_TEST);
  if (!train || !test) goto done;
  CHECK(mxu_dataset_count(train) == 50000);
  CHECK(mxu_dataset_count(test) == 10000);
  CHECK(mxu_dataset_num_classes(test) == 10);
  check_shape3(train, 32, 32, 3);
  check_histogram(train, train_hist, 10);
  check_histogram(test, test_hist, 10);
  check_pixel_range(test);
  CHECK(mxu_dataset_labels(train)[0] == 6); /* frog */
  CHECK(mxu_dataset_labels(test)[0] == 3);  /* cat */
  /* The last record of data_batch_5: HWC pixel (5, 7) and the sum. */
  const float *last = mxu_dataset_x(train) + (int64_t)49999 * 3072;
  CHECK(mxu_dataset_labels(train)[49999] == 1);
  CHECK(last[(5 * 32 + 7) * 3 + 0] == 186.0f);
  CHECK(last[(5 * 32 + 7) * 3 + 1] == 149.0f);
  CHECK(last[(5 * 32 + 7) * 3 + 2] == 151.0f);
  CHECK_NEAR(sample_sum(train, 49999), 291722, 0);
done:
  mxu_dataset_free(train);
  mxu_dataset_free(test);
}

/* ---- synthetic files that load ----------------------------------------- */

static void check_idx_values(const mxu_dataset *data, uint32_t count,
                             uint32_t rows, uint32_t cols) {
  CHECK(mxu_dataset_count(data) == count);
  CHECK(mxu_dataset_num_classes(data) == 10);
  check_shape3(data, rows, cols, 1);
  const float *x = mxu_dataset_x(data);
  size_t n = (size_t)count * rows * cols, wrong = 0;
  for (size_t i = 0; i < n; i++) wrong += x[i] != (float)idx_pixel(i);
  CHECK(wrong == 0);
  for (uint32_t i = 0; i < count; i++)
    CHECK(mxu_dataset_labels(data)[i] == idx_label(i));
}

static void test_idx_roundtrip(void) {
  static unsigned char images[16 + 7 * 4 * 5], labels[8 + 7];
  size_t image_size = make_idx_images(images, 7, 4, 5);
  size_t label_size = make_idx_labels(labels, 7);
  char image_path[512], label_path[512];
  for (int gz = 0; gz < 2; gz++) {
    write_file(gz ? "a-images.gz" : "a-images", images, image_size, gz);
    write_file(gz ? "a-labels.gz" : "a-labels", labels, label_size, gz);
    tmp_path(image_path, gz ? "a-images.gz" : "a-images");
    tmp_path(label_path, gz ? "a-labels.gz" : "a-labels");
    mxu_dataset *data = NULL;
    CHECK_OK(mxu_load_idx(image_path, label_path, &data));
    if (data) check_idx_values(data, 7, 4, 5);
    mxu_dataset_free(data);
  }
  /* The standard names: plain for train, gzip for test. */
  write_file("train-images-idx3-ubyte", images, image_size, 0);
  write_file("train-labels-idx1-ubyte", labels, label_size, 0);
  write_file("t10k-images-idx3-ubyte.gz", images, image_size, 1);
  write_file("t10k-labels-idx1-ubyte.gz", labels, label_size, 1);
  for (int split = MXU_TRAIN; split <= MXU_TEST; split++) {
    mxu_dataset *data = NULL;
    CHECK_OK(mxu_load_mnist_dir(tmp_dir, (mxu_split)split, &data));
    if (data) check_idx_values(data, 7, 4, 5);
    mxu_dataset_free(data);
  }
}

/* Records [0, records) of data came from make_cifar(seed) in order. */
static void check_cifar_values(const mxu_dataset *data, int64_t first,
                               int records, int seed, int classes) {
  const float *x = mxu_dataset_x(data) + first * 3072;
  size_t wrong = 0;
  for (int r = 0; r < records; r++) {
    CHECK(mxu_dataset_labels(data)[first + r] == cifar_label(seed, r, classes));
    for (int p = 0; p < 1024; p++)
      for (int c = 0; c < 3; c++)
        wrong += x[(size_t)r * 3072 + (size_t)p * 3 + (size_t)c] !=
                 (float)cifar_byte(seed, r, c, p);
  }
  CHECK_MSG(wrong == 0, "%zu values differ", wrong);
}

static void test_cifar_roundtrip(void) {
  static unsigned char buf[4 * 3074];
  char first[512], second[512];
  write_file("c1.bin", buf, make_cifar(buf, 3, 1, 1), 0);
  write_file("c2.bin.gz", buf, make_cifar(buf, 4, 1, 2), 1);
  tmp_path(first, "c1.bin");
  tmp_path(second, "c2.bin.gz");
  const char *paths[2] = {first, second};
  mxu_dataset *data = NULL;
  CHECK_OK(mxu_load_cifar(paths, 2, 1, &data));
  if (data) {
    CHECK(mxu_dataset_count(data) == 7);
    CHECK(mxu_dataset_num_classes(data) == 10);
    check_shape3(data, 32, 32, 3);
    check_cifar_values(data, 0, 3, 1, 10);
    check_cifar_values(data, 3, 4, 2, 10);
  }
  mxu_dataset_free(data);
}

static void test_cifar_dirs(void) {
  static unsigned char buf[3 * 3074];
  char name[64];
  for (int i = 1; i <= 5; i++) { /* odd batches gzip, even ones plain */
    snprintf(name, sizeof name, "data_batch_%d.bin%s", i, i % 2 ? ".gz" : "");
    write_file(name, buf, make_cifar(buf, 2, 1, 10 + i), i % 2);
  }
  write_file("test_batch.bin", buf, make_cifar(buf, 3, 1, 20), 0);
  write_file("train.bin.gz", buf, make_cifar(buf, 3, 2, 30), 1);
  write_file("test.bin", buf, make_cifar(buf, 2, 2, 31), 0);
  mxu_dataset *data = NULL;
  CHECK_OK(mxu_load_cifar10_dir(tmp_dir, MXU_TRAIN, &data));
  if (data) {
    CHECK(mxu_dataset_count(data) == 10);
    for (int i = 1; i <= 5; i++)
      check_cifar_values(data, 2 * (i - 1), 2, 10 + i, 10);
  }
  mxu_dataset_free(data);
  CHECK_OK(mxu_load_cifar10_dir(tmp_dir, MXU_TEST, &data));
  if (data) check_cifar_values(data, 0, 3, 20, 10);
  mxu_dataset_free(data);
  CHECK_OK(mxu_load_cifar100_dir(tmp_dir, MXU_TRAIN, &data));
  if (data) {
    CHECK(mxu_dataset_num_classes(data) == 100);
    check_cifar_values(data, 0, 3, 30, 100); /* the fine label is used */
  }
  mxu_dataset_free(data);
  CHECK_OK(mxu_load_cifar100_dir(tmp_dir, MXU_TEST, &data));
  if (data) check_cifar_values(data, 0, 2, 31, 100);
  mxu_dataset_free(data);
}

/* ---- broken files ------------------------------------------------------ */

static mxu_status load_idx_files(const char *images, const char *labels,
                                 mxu_dataset **out) {
  char image_path[512], label_path[512];
  tmp_path(image_path, images);
  tmp_path(label_path, labels);
  return mxu_load_idx(image_path, label_path, out);
}

/* Corrupt compressed data in the middle of a file: the message places it
 * there, to within zlib's read-ahead (it said "offset 0" whenever the
 * first 1 MiB read failed). */
static void test_gzip_corrupt_middle(void) {
  enum { COUNT = 3000, SIDE = 28 };
  static unsigned char images[16 + COUNT * SIDE * SIDE];
  size_t size = make_idx_images(images, COUNT, SIDE, SIDE);
  uint32_t state = 12345; /* 16 levels of noise: Huffman codes, no runs */
  for (size_t i = 16; i < size; i++)
    images[i] = (unsigned char)((state = state * 1103515245u + 12345u) >> 28);
  write_file("middle.gz", images, size, 1);
  char path[512];
  tmp_path(path, "middle.gz");
  FILE *f = fopen(path, "r+b");
  long length = -1;
  if (f && fseek(f, 0, SEEK_END) == 0) length = ftell(f);
  CHECK(length > 500000);
  if (f && length > 0 && fseek(f, length / 2, SEEK_SET) == 0) {
    int c = fgetc(f);
    fseek(f, length / 2, SEEK_SET);
    fputc(c ^ 0xff, f);
  }
  if (f) fclose(f);
  unsigned char labels[8 + COUNT] = {0};
  write_file("middle-labels", labels, make_idx_labels(labels, COUNT), 0);
  mxu_dataset *data = NULL;
  mxu_status s = load_idx_files("middle.gz", "middle-labels", &data);
  CHECK(s == MXU_ERR_FORMAT && data == NULL);
  unsigned long long unpacked = 0, at = 0;
  const char *m = mxu_errmsg(), *offset = strstr(m, "offset ");
  const char *byte = strstr(m, "byte ");
  CHECK_MSG(strstr(m, "corrupt gzip") && offset && byte &&
                sscanf(offset, "offset %llu", &unpacked) == 1 &&
                sscanf(byte, "byte %llu", &at) == 1,
            "%s", m);
  CHECK_MSG(unpacked >= 500000 && at >= (unsigned long long)length / 4, "%s",
            m);
}

/* A gzip bomb: 8 MiB of zeros in a few KiB, under a 4 MiB limit set by
 * MXU_MAX_DATA_BYTES; the message names the limit and the variable. */
static void test_data_limit(void) {
  static unsigned char zeros[8 << 20];
  make_idx_images(zeros, 1, 1, 1);
  write_file("bomb.gz", zeros, sizeof zeros, 1);
  write_file("bomb-labels", zeros, 0, 0);
  setenv("MXU_MAX_DATA_BYTES", "4194304", 1);
  mxu_dataset *data = NULL;
  expect_error(load_idx_files("bomb.gz", "bomb-labels", &data), MXU_ERR_FORMAT,
               data, "bomb.gz", "4194304 bytes");
  CHECK(strstr(mxu_errmsg(), "MXU_MAX_DATA_BYTES") != NULL);
  unsetenv("MXU_MAX_DATA_BYTES");
}

static void test_idx_errors(void) {
  static unsigned char images[16 + 6 * 3 * 3], labels[8 + 6];
  size_t image_size = make_idx_images(images, 6, 3, 3);
  size_t label_size = make_idx_labels(labels, 6);
  mxu_dataset *data = NULL;
  write_file("good-labels", labels, label_size, 0);

  write_file("cut-images", images, image_size - 10, 0);
  expect_error(load_idx_files("cut-images", "good-labels", &data),
               MXU_ERR_FORMAT, data, "cut-images", "offset 16");
  CHECK(strstr(mxu_errmsg(), "44 of 54 pixel bytes") != NULL);

  write_file("cut-header.gz", images, 10, 1);
  expect_error(load_idx_files("cut-header.gz", "good-labels", &data),
               MXU_ERR_FORMAT, data, "cut-header.gz", "offset 0");
  CHECK(strstr(mxu_errmsg(), "header") != NULL);

  write_file("labels-as-images", labels, label_size, 0);
  expect_error(load_idx_files("labels-as-images", "good-labels", &data),
               MXU_ERR_FORMAT, data, "labels-as-images", "offset 0");
  CHECK(strstr(mxu_errmsg(), "0x00000801") != NULL);
  CHECK(strstr(mxu_errmsg(), "0x00000803") != NULL);

  put_be32(labels + 4, 5); /* one label short */
  write_file("short-labels.gz", labels, label_size - 1, 1);
  put_be32(labels + 4, 6);
  write_file("good-images", images, image_size, 0);
  expect_error(load_idx_files("good-images", "short-labels.gz", &data),
               MXU_ERR_FORMAT, data, "short-labels.gz", "offset 4");
  CHECK(strstr(mxu_errmsg(), "good-images") != NULL);

  labels[8 + 4] = 10;
  write_file("bad-label", labels, label_size, 0);
  labels[8 + 4] = (unsigned char)idx_label(4);
  expect_error(load_idx_files("good-images", "bad-label", &data),
               MXU_ERR_FORMAT, data, "bad-label", "offset 12");

  images[5] = 1; /* count 6 -> 0x10006: far more images than there are */
  write_file("big-count", images, image_size, 0);
  put_be32(images + 4, 6);
  expect_error(load_idx_files("big-count", "good-labels", &data),
               MXU_ERR_FORMAT, data, "big-count", "offset 16");

  put_be32(images + 8, 0); /* images of 0 rows */
  write_file("zero-rows", images, image_size, 0);
  put_be32(images + 8, 3);
  expect_error(load_idx_files("zero-rows", "good-labels", &data),
               MXU_ERR_FORMAT, data, "zero-rows", "offset 8");

  char long_path[512];
  write_file("long-images", images, image_size, 0);
  tmp_path(long_path, "long-images");
  FILE *append = fopen(long_path, "ab");
  if (append) fputc(0, append), fclose(append);
  expect_error(load_idx_files("long-images", "good-labels", &data),
               MXU_ERR_FORMAT, data, "long-images", "offset 70");
}

/* Every cut of a valid file is an error, never a crash or a success. */
static void test_idx_every_cut(void) {
  static unsigned char images[16 + 2 * 2 * 3], labels[8 + 2];
  size_t image_size = make_idx_images(images, 2, 2, 3);
  size_t label_size = make_idx_labels(labels, 2);
  write_file("cut-labels", labels, label_size, 0);
  write_file("full-images", images, image_size, 0);
  mxu_dataset *data = NULL;
  for (size_t cut = 0; cut < image_size; cut++) {
    write_file("cut-images", images, cut, 0);
    expect_error(load_idx_files("cut-images", "cut-labels", &data),
                 MXU_ERR_FORMAT, data, "cut-images", "offset");
  }
  for (size_t cut = 0; cut < label_size; cut++) {
    write_file("cut-labels", labels, cut, 0);
    expect_error(load_idx_files("full-images", "cut-labels", &data),
                 MXU_ERR_FORMAT, data, "cut-labels", "offset");
  }
}

/* A .gz cut mid-stream (the usual broken download). */
static void test_gzip_cut(void) {
  static unsigned char images[16 + 50 * 28 * 28], labels[8 + 50];
  size_t image_size = make_idx_images(images, 50, 28, 28);
  write_file("gz-labels", labels, make_idx_labels(labels, 50), 0);
  write_file("gz-images.gz", images, image_size, 1);
  char path[512];
  tmp_path(path, "gz-images.gz");
  FILE *file = fopen(path, "rb");
  long size = 0;
  if (file) fseek(file, 0, SEEK_END), size = ftell(file), fclose(file);
  CHECK(size > 100);
  CHECK(truncate(path, size / 2) == 0);
  mxu_dataset *data = NULL;
  expect_error(load_idx_files("gz-images.gz", "gz-labels", &data),
               MXU_ERR_FORMAT, data, "gz-images.gz", "offset");
  /* Not gzip at all past a gzip magic: corrupt, not a crash. */
  unsigned char junk[64] = {0x1f, 0x8b, 8, 0};
  for (int i = 4; i < 64; i++) junk[i] = (unsigned char)(i * 77);
  write_file("junk.gz", junk, sizeof junk, 0);
  expect_error(load_idx_files("junk.gz", "gz-labels", &data), MXU_ERR_FORMAT,
               data, "junk.gz", "offset");
}

static mxu_status load_cifar_file(const char *name, int label_bytes,
                                  mxu_dataset **out) {
  char path[512];
  tmp_path(path, name);
  const char *paths[1] = {path};
  return mxu_load_cifar(paths, 1, label_bytes, out);
}

static void test_cifar_errors(void) {
  static unsigned char buf[3 * 3074];
  mxu_dataset *data = NULL;
  size_t size = make_cifar(buf, 3, 1, 0);
  buf[3073] = 11;
  write_file("label11.bin", buf, size, 0);
  expect_error(load_cifar_file("label11.bin", 1, &data), MXU_ERR_FORMAT, data,
               "label11.bin", "record 1 (offset 3073)");
  CHECK(strstr(mxu_errmsg(), "label 11 out of range 0..9") != NULL);

  make_cifar(buf, 3, 1, 0);
  write_file("cut.bin.gz", buf, size - 100, 1);
  expect_error(load_cifar_file("cut.bin.gz", 1, &data), MXU_ERR_FORMAT, data,
               "cut.bin.gz", "record 2 (offset 6146)");
  write_file("empty.bin", buf, 0, 0);
  expect_error(load_cifar_file("empty.bin", 1, &data), MXU_ERR_FORMAT, data,
               "empty.bin", "offset 0");

  size = make_cifar(buf, 3, 2, 0);
  buf[2 * 3074] = 20; /* coarse labels are 0..19 */
  write_file("coarse.bin", buf, size, 0);
  expect_error(load_cifar_file("coarse.bin", 2, &data), MXU_ERR_FORMAT, data,
               "coarse.bin", "record 2 (offset 6148)");
  make_cifar(buf, 3, 2, 0);
  buf[3074 + 1] = 100;
  write_file("fine.bin", buf, size, 0);
  expect_error(load_cifar_file("fine.bin", 2, &data), MXU_ERR_FORMAT, data,
               "fine.bin", "record 1 (offset 3075)");
  /* A CIFAR-100 file read as CIFAR-10 cannot divide into records. */
  make_cifar(buf, 3, 2, 0);
  write_file("c100.bin", buf, size, 0);
  expect_error(load_cifar_file("c100.bin", 1, &data), MXU_ERR_FORMAT, data,
               "c100.bin", "record 3");
  CHECK(strstr(mxu_errmsg(), "CIFAR-100 file read as CIFAR-10") != NULL);

  CHECK(load_cifar_file("c100.bin", 3, &data) == MXU_ERR_ARG);
  CHECK(data == NULL);
  CHECK(mxu_load_cifar(NULL, 1, 1, &data) == MXU_ERR_ARG);
}

static void test_missing_files(void) {
  mxu_dataset *data = NULL;
  char empty[512], images[512];
  tmp_path(empty, "empty-dir");
  CHECK(mkdtemp(strcat(empty, "-XXXXXX")) != NULL);
  expect_error(mxu_load_mnist_dir(empty, MXU_TRAIN, &data), MXU_ERR_IO, data,
               empty, "train-images-idx3-ubyte.gz");
  expect_error(mxu_load_mnist_dir(empty, MXU_TEST, &data), MXU_ERR_IO, data,
               "t10k-images-idx3-ubyte", "t10k-images-idx3-ubyte.gz");
  expect_error(mxu_load_cifar10_dir(empty, MXU_TRAIN, &data), MXU_ERR_IO, data,
               empty, "data_batch_1.bin.gz");
  expect_error(mxu_load_cifar100_dir(empty, MXU_TEST, &data), MXU_ERR_IO, data,
               empty, "test.bin.gz");
  CHECK(rmdir(empty) == 0);

  tmp_path(images, "good-images");
  expect_error(mxu_load_idx(images, "/nonexistent/labels", &data), MXU_ERR_IO,
               data, "/nonexistent/labels", "cannot open");
  expect_error(load_cifar_file("no-such.bin", 1, &data), MXU_ERR_IO, data,
               "no-such.bin", "No such file");
  /* One of five CIFAR batches gone: the message names the one missing. */
  char gone[512];
  tmp_path(gone, "data_batch_3.bin.gz");
  CHECK(unlink(gone) == 0);
  expect_error(mxu_load_cifar10_dir(tmp_dir, MXU_TRAIN, &data), MXU_ERR_IO,
               data, "data_batch_3.bin", tmp_dir);
  CHECK(mxu_load_mnist_dir(tmp_dir, (mxu_split)7, &data) == MXU_ERR_ARG);
}

/* ---- data sets --------------------------------------------------------- */

static mxu_dataset *small_dataset(int64_t count, int64_t h, int64_t w) {
  int64_t dims[2] = {h, w};
  size_t n = (size_t)(count * h * w);
  float *x = malloc(n * sizeof *x);
  int32_t *labels = malloc((size_t)count * sizeof *labels);
  for (size_t i = 0; i < n; i++) x[i] = (float)i;
  for (int64_t i = 0; i < count; i++) labels[i] = (int32_t)(i % 4);
  mxu_dataset *data = NULL;
  CHECK_OK(mxu_dataset_from_arrays(x, labels, count, mxu_shape_make(2, dims), 4,
                                   &data));
  x[0] = -1.0f; /* the data set holds a copy */
  labels[0] = 3;
  free(x);
  free(labels);
  return data;
}

static void test_from_arrays(void) {
  mxu_dataset *data = small_dataset(6, 2, 3);
  if (!data) return;
  CHECK(mxu_dataset_count(data) == 6);
  CHECK(mxu_dataset_num_classes(data) == 4);
  CHECK(mxu_dataset_x(data)[0] == 0.0f);
  CHECK(mxu_dataset_x(data)[35] == 35.0f);
  CHECK(mxu_dataset_labels(data)[0] == 0);
  CHECK(mxu_dataset_labels(data)[5] == 1);
  mxu_dataset_rescale(data, 0.5f);
  CHECK(mxu_dataset_x(data)[35] == 17.5f);
  mxu_dataset_free(data);

  float x[4] = {0};
  int32_t bad[2] = {1, 4}, negative[2] = {-1, 0};
  int64_t dims[1] = {2};
  mxu_shape shape = mxu_shape_make(1, dims);
  data = NULL;
  CHECK(mxu_dataset_from_arrays(x, bad, 2, shape, 4, &data) == MXU_ERR_ARG);
  CHECK(data == NULL);
  CHECK(strstr(mxu_errmsg(), "sample 1") != NULL);
  CHECK(mxu_dataset_from_arrays(x, negative, 2, shape, 4, &data) ==
        MXU_ERR_ARG);
  CHECK(mxu_dataset_from_arrays(x, bad, 2, shape, 0, &data) == MXU_ERR_ARG);
  CHECK(mxu_dataset_from_arrays(NULL, bad, 2, shape, 5, &data) == MXU_ERR_ARG);
  CHECK(mxu_dataset_from_arrays(x, bad, -1, shape, 5, &data) == MXU_ERR_ARG);
  mxu_shape none = {0};
  CHECK(mxu_dataset_from_arrays(x, bad, 2, none, 5, &data) == MXU_ERR_ARG);
  CHECK(data == NULL);
  CHECK_OK(mxu_dataset_from_arrays(NULL, NULL, 0, shape, 5, &data));
  CHECK(mxu_dataset_count(data) == 0);
  mxu_dataset_free(data);
  mxu_dataset_free(NULL);
}

static void test_slice(void) {
  mxu_dataset *data = small_dataset(10, 2, 2), *view = NULL, *inner = NULL;
  if (!data) return;
  CHECK_OK(mxu_dataset_slice(data, 3, 5, &view));
  if (view) {
    CHECK(mxu_dataset_count(view) == 5);
    CHECK(mxu_dataset_x(view) == mxu_dataset_x(data) + 12); /* shared */
    CHECK(mxu_dataset_labels(view) == mxu_dataset_labels(data) + 3);
    CHECK(mxu_dataset_x(view)[0] == 12.0f);
    CHECK_OK(mxu_dataset_slice(view, 4, 1, &inner));
    CHECK(mxu_dataset_x(inner) == mxu_dataset_x(data) + 28);
    CHECK(mxu_dataset_labels(inner)[0] == 7 % 4);
    mxu_dataset_free(inner);
    CHECK(mxu_dataset_slice(view, 4, 2, &inner) == MXU_ERR_ARG);
    CHECK(inner == NULL);
  }
  mxu_dataset *empty = NULL;
  CHECK_OK(mxu_dataset_slice(data, 10, 0, &empty));
  CHECK(mxu_dataset_count(empty) == 0);
  mxu_dataset_free(empty);
  CHECK(mxu_dataset_slice(data, -1, 2, &inner) == MXU_ERR_ARG);
  CHECK(mxu_dataset_slice(data, 0, 11, &inner) == MXU_ERR_ARG);
  CHECK(mxu_dataset_slice(data, 5, INT64_MAX, &inner) == MXU_ERR_ARG);
  CHECK(mxu_dataset_slice(data, 11, 0, &inner) == MXU_ERR_ARG);
  mxu_dataset_free(view); /* a view first: it owns nothing */
  mxu_dataset_free(data);
}

static int is_permutation(const int64_t *perm, int64_t count) {
  char *seen = calloc((size_t)count + 1, 1);
  int ok = 1;
  for (int64_t i = 0; i < count; i++) {
    if (perm[i] < 0 || perm[i] >= count || seen[perm[i]])
      ok = 0;
    else
      seen[perm[i]] = 1;
  }
  free(seen);
  return ok;
}

static void test_permutation(void) {
  enum { N = 1000 };
  static int64_t a[N], b[N], c[N], d[N];
  mxu_dataset_permutation(N, 42, 1, a);
  mxu_dataset_permutation(N, 42, 1, b);
  mxu_dataset_permutation(N, 42, 2, c);
  mxu_dataset_permutation(N, 43, 1, d);
  CHECK(is_permutation(a, N));
  CHECK(is_permutation(c, N));
  CHECK(memcmp(a, b, sizeof a) == 0);
  CHECK(memcmp(a, c, sizeof a) != 0);
  CHECK(memcmp(a, d, sizeof a) != 0);
  int fixed = 0;
  for (int i = 0; i < N; i++) fixed += a[i] == i;
  CHECK(fixed < 10); /* about 1 expected for a random permutation */
  int64_t one = -1;
  mxu_dataset_permutation(1, 42, 0, &one);
  CHECK(one == 0);
  mxu_dataset_permutation(0, 42, 0, NULL);

  /* All 6 orders of 3 come up about equally over 6000 epochs. */
  int counts[9] = {0};
  for (uint32_t epoch = 0; epoch < 6000; epoch++) {
    int64_t p[3];
    mxu_dataset_permutation(3, 7, epoch, p);
    counts[p[0] * 3 + p[1]]++;
  }
  for (int i = 0; i < 9; i++)
    if (i / 3 != i % 3)
      CHECK_MSG(counts[i] > 880 && counts[i] < 1120,
                "order %d came up %d times", i, counts[i]);
}

static void test_gather(void) {
  mxu_dataset *data = small_dataset(8, 1, 3);
  if (!data) return;
  float x[3 * 3];
  int32_t labels[3];
  mxu_dataset_gather(data, NULL, 2, 3, x, labels, NULL);
  for (int i = 0; i < 9; i++) CHECK(x[i] == (float)(6 + i));
  CHECK(labels[0] == 2 && labels[1] == 3 && labels[2] == 0);
  int64_t order[6] = {7, 0, 5, 1, 6, 4};
  mxu_dataset_gather(data, order, 2, 3, x, labels, NULL); /* samples 5, 1, 6 */
  for (int k = 0; k < 3; k++) {
    int64_t sample = order[2 + k];
    for (int j = 0; j < 3; j++) CHECK(x[k * 3 + j] == (float)(sample * 3 + j));
    CHECK(labels[k] == sample % 4);
  }
  mxu_dataset_gather(data, order, 0, 1, x, NULL, NULL);
  CHECK(x[0] == 21.0f && x[2] == 23.0f);
  mxu_dataset_free(data);
}

int main(void) {
  snprintf(tmp_dir, sizeof tmp_dir, "/tmp/mxu-test-data-XXXXXX");
  if (!mkdtemp(tmp_dir)) {
    perror("mkdtemp");
    return 1;
  }
  test_fashion_mnist();
  test_mnist();
  test_cifar10();
  test_idx_roundtrip();
  test_cifar_roundtrip();
  test_cifar_dirs();
  test_idx_errors();
  test_gzip_corrupt_middle();
  test_data_limit();
  test_idx_every_cut();
  test_gzip_cut();
  test_cifar_errors();
  test_missing_files();
  test_from_arrays();
  test_slice();
  test_permutation();
  test_gather();
  for (int i = 0; i < created_count; i++) unlink(created[i]);
  rmdir(tmp_dir);
  return check_report("test_data");
}
