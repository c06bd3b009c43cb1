/* test_weights.c — mxu_save_weights / mxu_load_weights in both Keras
 * layouts (tf.keras 2.x .h5, Keras 3 .weights.h5): a bit-exact round trip
 * (BatchNormalization's moving statistics included) on both backends, and
 * every way a file can be wrong refused before the model changes. */
#include "check.h"
#include "mxu.h"

#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define temp_dir check_temp_dir

/* The file's name in the layout under test: stem + ".h5" (tf.keras 2.x)
 * or stem + ".weights.h5" (Keras 3). */
static const char *layout_ext;

static const char *weights_path(const char *stem) {
  char name[256];
  snprintf(name, sizeof name, "%s%s", stem, layout_ext);
  return temp_path(name);
}

/* ---- models and data --------------------------------------------------- */

/* Input (8, 8, 2) -> BN -> Conv2D(4, 3x3, relu) -> MaxPool -> Flatten ->
 * Dense(hidden, relu) -> BN -> Dense(3, softmax): every kind of weight,
 * trainable and not. */
static mxu_model *small_model(int hidden) {
  mxu_model *model = mxu_sequential("small");
  int64_t dims[3] = {8, 8, 2};
  mxu_batchnorm_config bn = mxu_batchnorm_defaults();
  mxu_conv2d_config conv = mxu_conv2d_defaults(4, 3, 3);
  conv.activation = MXU_RELU;
  mxu_pool2d_config pool = mxu_pool2d_defaults(2, 2);
  mxu_dense_config dense = mxu_dense_defaults(hidden);
  dense.activation = MXU_RELU;
  mxu_dense_config out = mxu_dense_defaults(3);
  out.activation = MXU_SOFTMAX;
  CHECK_OK(mxu_add_input(model, NULL, mxu_shape_make(3, dims)));
  CHECK_OK(mxu_add_batch_normalization(model, &bn));
  CHECK_OK(mxu_add_conv2d(model, &conv));
  CHECK_OK(mxu_add_max_pooling2d(model, &pool));
  CHECK_OK(mxu_add_flatten(model, NULL));
  CHECK_OK(mxu_add_dense(model, &dense));
  CHECK_OK(mxu_add_batch_normalization(model, &bn));
  CHECK_OK(mxu_add_dense(model, &out));
  return model;
}

static mxu_model *compiled(int hidden, mxu_backend_kind backend,
                           uint64_t seed) {
  mxu_model *model = small_model(hidden);
  mxu_compile_config c = mxu_compile_defaults();
  c.batch_size = 8;
  c.backend = backend;
  c.seed = seed;
  CHECK_OK(mxu_compile(model, &c));
  return model;
}

static mxu_dataset *make_data(int64_t count) {
  int64_t dims[3] = {8, 8, 2};
  int64_t values = count * 8 * 8 * 2;
  float *x = malloc((size_t)values * sizeof *x);
  int32_t *y = malloc((size_t)count * sizeof *y);
  for (int64_t i = 0; i < values; i++) x[i] = (float)((i * 37) % 101) / 50.0f;
  for (int64_t i = 0; i < count; i++) y[i] = (int32_t)(i % 3);
  mxu_dataset *data = NULL;
  CHECK_OK(
      mxu_dataset_from_arrays(x, y, count, mxu_shape_make(3, dims), 3, &data));
  free(x);
  free(y);
  return data;
}

/* A few steps, so the weights and the moving statistics leave their
 * initial values. */
static void train(mxu_model *model, const mxu_dataset *data) {
  mxu_fit_config fit = mxu_fit_defaults();
  fit.epochs = 2;
  fit.batch_size = 8;
  fit.verbose = 0;
  CHECK_OK(mxu_fit(model, data, &fit, NULL));
}

/* 1 when every weight of a and b has the same bits. */
static int weights_equal(const mxu_model *a, const mxu_model *b) {
  for (int i = 0; i < mxu_model_layer_count(a); i++)
    for (int k = 0; k < mxu_layer_weight_count(a, i); k++) {
      mxu_tensor ta, tb;
      if (mxu_layer_weight(a, i, k, &ta, NULL) ||
          mxu_layer_weight(b, i, k, &tb, NULL))
        return 0;
      size_t bytes = (size_t)mxu_shape_count(&ta.shape) * sizeof(float);
      if (memcmp(ta.data, tb.data, bytes) != 0) return 0;
    }
  return 1;
}

static float *predictions(mxu_model *model, const mxu_dataset *data) {
  int64_t n = mxu_dataset_count(data);
  float *out = malloc((size_t)n * 3 * sizeof *out);
  CHECK_OK(mxu_predict(model, mxu_dataset_x(data), n, out));
  return out;
}

/* ---- files ------------------------------------------------------------- */

static long file_size(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fclose(f);
  return n;
}

static unsigned char *read_bytes(const char *path, long *size) {
  *size = file_size(path);
  FILE *f = fopen(path, "rb");
  unsigned char *data = malloc((size_t)(*size > 0 ? *size : 1));
  if (f && fread(data, 1, (size_t)*size, f) != (size_t)*size) *size = -1;
  if (f) fclose(f);
  return data;
}

static void write_bytes(const char *path, const unsigned char *data,
                        long size) {
  FILE *f = fopen(path, "wb");
  CHECK(f != NULL);
  if (!f) return;
  CHECK(fwrite(data, 1, (size_t)size, f) == (size_t)size);
  fclose(f);
}

/* Entries of temp_dir whose names start with prefix. */
static int count_entries(const char *prefix) {
  DIR *dir = opendir(temp_dir);
  int n = 0;
  for (struct dirent *e; dir && (e = readdir(dir));)
    n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
  if (dir) closedir(dir);
  return n;
}

/* ---- cases ------------------------------------------------------------- */

static void round_trip(mxu_backend_kind backend) {
  mxu_dataset *data = make_data(32);
  mxu_model *a = compiled(16, backend, 1);
  train(a, data);
  const char *path = weights_path("round");
  CHECK_OK(mxu_save_weights(a, path));
  mxu_model *b = compiled(16, backend, 2);
  CHECK(!weights_equal(a, b));
  CHECK_OK(mxu_load_weights(b, path));
  CHECK(weights_equal(a, b));
  float *pa = predictions(a, data), *pb = predictions(b, data);
  CHECK(memcmp(pa, pb, 32 * 3 * sizeof *pa) == 0);
  /* Saving what was loaded gives the same bytes: no timestamps. */
  const char *again = weights_path("again");
  CHECK_OK(mxu_save_weights(b, again));
  long na, nb;
  unsigned char *fa = read_bytes(path, &na), *fb = read_bytes(again, &nb);
  CHECK(na > 0 && na == nb && memcmp(fa, fb, (size_t)na) == 0);
  free(fa);
  free(fb);
  free(pa);
  free(pb);
  mxu_model_free(a);
  mxu_model_free(b);
  mxu_dataset_free(data);
}

/* The file holds Keras layouts, so either backend reads the other's. */
static void across_backends(void) {
  mxu_dataset *data = make_data(16);
  mxu_model *a = compiled(16, MXU_BACKEND_CPU, 3);
  train(a, data);
  const char *path = weights_path("cross");
  CHECK_OK(mxu_save_weights(a, path));
  mxu_model *b = compiled(16, MXU_BACKEND_CPU_REF, 4);
  CHECK_OK(mxu_load_weights(b, path));
  CHECK(weights_equal(a, b));
  mxu_model_free(a);
  mxu_model_free(b);
  mxu_dataset_free(data);
}

/* The same layers, one Dense wider: the message names it and both shapes,
 * and nothing is loaded, not even the layers before it. */
static void another_model(void) {
  mxu_model *a = compiled(16, MXU_BACKEND_CPU, 1);
  const char *path = weights_path("other");
  CHECK_OK(mxu_save_weights(a, path));
  mxu_model *b = compiled(24, MXU_BACKEND_CPU, 5);
  mxu_model *before = compiled(24, MXU_BACKEND_CPU, 5);
  EXPECT_FAIL(mxu_load_weights(b, path), MXU_ERR_SHAPE,
              "layer 'dense' (position 3): kernel has shape (36, 16) in the "
              "file but (36, 24) in the model");
  CHECK(has(mxu_errmsg(), path));
  CHECK(has(mxu_errmsg(), "weights: "));
  CHECK(weights_equal(b, before));
  mxu_model_free(a);
  mxu_model_free(b);
  mxu_model_free(before);
}

/* Input (4,) -> Dense(3[, no bias]) [-> Dense(2)]. */
static mxu_model *tiny(int use_bias, int second) {
  mxu_model *model = mxu_sequential("tiny");
  int64_t dims[1] = {4};
  CHECK_OK(mxu_add_input(model, NULL, mxu_shape_make(1, dims)));
  mxu_dense_config dense = mxu_dense_defaults(3);
  dense.use_bias = use_bias;
  CHECK_OK(mxu_add_dense(model, &dense));
  if (second) {
    mxu_dense_config out = mxu_dense_defaults(2);
    CHECK_OK(mxu_add_dense(model, &out));
  }
  mxu_compile_config c = mxu_compile_defaults();
  c.batch_size = 2;
  c.backend = MXU_BACKEND_CPU_REF;
  CHECK_OK(mxu_compile(model, &c));
  return model;
}

/* Layer and weight counts that differ, as Keras' load_weights checks. */
static void other_counts(void) {
  mxu_model *two = tiny(1, 1), *one = tiny(1, 0), *nobias = tiny(0, 1);
  const char *path = weights_path("counts");
  CHECK_OK(mxu_save_weights(two, path));
  EXPECT_FAIL(mxu_load_weights(one, path), MXU_ERR_SHAPE,
              "the file holds weights for 2 layers but the model has 1 "
              "layers with weights");
  EXPECT_FAIL(mxu_load_weights(nobias, path), MXU_ERR_SHAPE,
              "layer 'dense' (position 1): the file has 2 weights for it");
  CHECK(has(mxu_errmsg(), "but the model has 1"));
  mxu_model_free(two);
  mxu_model_free(one);
  mxu_model_free(nobias);
}

/* Every proper prefix of the file is refused as a format error naming
 * the file: HDF5 finds its end-of-file address beyond the end. */
static void truncated(void) {
  mxu_model *a = compiled(16, MXU_BACKEND_CPU, 1);
  const char *path = weights_path("full"), *cut = weights_path("cut");
  CHECK_OK(mxu_save_weights(a, path));
  long size;
  unsigned char *bytes = read_bytes(path, &size);
  mxu_model *b = compiled(16, MXU_BACKEND_CPU, 2);
  mxu_model *before = compiled(16, MXU_BACKEND_CPU, 2);
  long lengths[] = {0, 3, 8, 40, 200, size / 2, size - 5, size - 1};
  for (size_t i = 0; i < sizeof lengths / sizeof *lengths; i++) {
    write_bytes(cut, bytes, lengths[i]);
    EXPECT_FAIL(mxu_load_weights(b, cut), MXU_ERR_FORMAT, cut);
    CHECK_MSG(has(mxu_errmsg(), "truncated") ||
                  has(mxu_errmsg(), "not an HDF5 file"),
              "length %ld: %s", lengths[i], mxu_errmsg());
  }
  CHECK(weights_equal(b, before));
  free(bytes);
  mxu_model_free(a);
  mxu_model_free(b);
  mxu_model_free(before);
}

/* A damaged signature, and a file that never was HDF5. */
static void not_hdf5(void) {
  mxu_model *a = compiled(16, MXU_BACKEND_CPU, 1);
  const char *path = weights_path("flip");
  CHECK_OK(mxu_save_weights(a, path));
  long size;
  unsigned char *bytes = read_bytes(path, &size);
  mxu_model *b = compiled(16, MXU_BACKEND_CPU, 2);
  mxu_model *before = compiled(16, MXU_BACKEND_CPU, 2);
  /* "\x89HDF" -> "\x89hDF", after the 512-byte user block mxu keeps */
  bytes[512 + 1] ^= 0x20;
  write_bytes(path, bytes, size);
  EXPECT_FAIL(mxu_load_weights(b, path), MXU_ERR_FORMAT, "not an HDF5 file");
  CHECK(has(mxu_errmsg(), path));
  const char *text = weights_path("text");
  write_bytes(text, (const unsigned char *)"MXUW not hdf5\n", 14);
  EXPECT_FAIL(mxu_load_weights(b, text), MXU_ERR_FORMAT, text);
  CHECK(has(mxu_errmsg(), "not an HDF5 file"));
  CHECK(weights_equal(b, before));
  free(bytes);
  mxu_model_free(a);
  mxu_model_free(b);
  mxu_model_free(before);
}

static void missing_and_unwritable(void) {
  mxu_model *a = compiled(16, MXU_BACKEND_CPU, 1);
  const char *missing = weights_path("missing");
  EXPECT_FAIL(mxu_load_weights(a, missing), MXU_ERR_IO, missing);
  CHECK(has(mxu_errmsg(), "No such file"));
  const char *nodir = weights_path("no/such/dir/w");
  EXPECT_FAIL(mxu_save_weights(a, nodir), MXU_ERR_IO, nodir);
  CHECK(has(mxu_errmsg(), "No such file"));
  mxu_model *uncompiled = small_model(16);
  EXPECT_FAIL(mxu_save_weights(uncompiled, weights_path("u")), MXU_ERR_ARG,
              "compile");
  EXPECT_FAIL(mxu_load_weights(uncompiled, missing), MXU_ERR_ARG, "compile");
  mxu_model_free(uncompiled);
  mxu_model_free(a);
}

/* The child saves under a file size limit; 0 when it failed as it should. */
static int save_too_large(const mxu_model *model, const char *path) {
  struct rlimit limit;
  signal(SIGXFSZ, SIG_IGN); /* write() then fails with EFBIG */
  if (getrlimit(RLIMIT_FSIZE, &limit) != 0) return 2;
  limit.rlim_cur = 1000;
  if (setrlimit(RLIMIT_FSIZE, &limit) != 0) return 2;
  mxu_status s = mxu_save_weights(model, path);
  int ok = s == MXU_ERR_IO && has(mxu_errmsg(), path) &&
           has(mxu_errmsg(), "too large");
  if (!ok)
    fprintf(stderr, "disk full: %s: %s\n", mxu_status_name(s), mxu_errmsg());
  return ok ? 0 : 1;
}

/* A full disk, simulated by a file size limit in a child process (HDF5
 * may keep a file it failed to close open; the child's exit ends that):
 * the save fails with the cause, the previous file is left as it was and
 * still loads, and no temporary remains. */
static void disk_full(void) {
  mxu_model *a = compiled(16, MXU_BACKEND_CPU, 1);
  mxu_model *b = compiled(16, MXU_BACKEND_CPU, 2);
  const char *path = weights_path("keep");
  CHECK_OK(mxu_save_weights(a, path));
  long size;
  unsigned char *before = read_bytes(path, &size);
  fflush(NULL);
  pid_t child = fork();
  if (child == 0) _exit(save_too_large(b, path));
  int status = -1;
  CHECK(child > 0 && waitpid(child, &status, 0) == child);
  CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0,
            "the child's save did not fail as expected (status %d)", status);
  long after_size;
  unsigned char *after = read_bytes(path, &after_size);
  CHECK(after_size == size && memcmp(before, after, (size_t)size) == 0);
  char prefix[64];
  snprintf(prefix, sizeof prefix, "keep%s.", layout_ext);
  CHECK(count_entries(prefix) == 0);
  CHECK_OK(mxu_load_weights(b, path));
  CHECK(weights_equal(a, b));
  free(before);
  free(after);
  mxu_model_free(a);
  mxu_model_free(b);
}

/* Only Keras' names are weights files; the interim binary format is gone. */
static void file_names(void) {
  mxu_model *a = compiled(16, MXU_BACKEND_CPU_REF, 1);
  const char *bin = temp_path("w.bin");
  EXPECT_FAIL(mxu_save_weights(a, bin), MXU_ERR_ARG,
              "unknown weights format; use a .h5 (tf.keras 2.x) or "
              ".weights.h5 (Keras 3) file name");
  CHECK(has(mxu_errmsg(), "weights: ") && has(mxu_errmsg(), bin));
  EXPECT_FAIL(mxu_load_weights(a, bin), MXU_ERR_ARG, "unknown weights format");
  EXPECT_FAIL(mxu_weights_path_check("fashion.weights"), MXU_ERR_ARG,
              "fashion.weights: unknown weights format");
  EXPECT_FAIL(mxu_save_weights(a, temp_path("m.keras")), MXU_ERR_UNSUPPORTED,
              "zip archive");
  CHECK_OK(mxu_weights_path_check("w.h5"));
  CHECK_OK(mxu_weights_path_check("w.hdf5"));
  CHECK_OK(mxu_weights_path_check("dir/w.weights.h5"));
  CHECK(count_entries("w.bin") == 0 && count_entries("m.keras") == 0);
  mxu_model_free(a);
}

/* A file renamed between the layouts still loads: the content decides. */
static void layout_from_content(void) {
  mxu_model *a = compiled(16, MXU_BACKEND_CPU_REF, 1);
  mxu_model *b = compiled(16, MXU_BACKEND_CPU_REF, 2);
  const char *k2 = temp_path("legacy.h5"), *k3 = temp_path("new.weights.h5");
  const char *k2_as_k3 = temp_path("legacy.weights.h5");
  const char *k3_as_k2 = temp_path("new.h5");
  CHECK_OK(mxu_save_weights(a, k2));
  CHECK_OK(mxu_save_weights(a, k3));
  CHECK(rename(k2, k2_as_k3) == 0 && rename(k3, k3_as_k2) == 0);
  CHECK_OK(mxu_load_weights(b, k2_as_k3));
  CHECK(weights_equal(a, b));
  mxu_model_free(b);
  b = compiled(16, MXU_BACKEND_CPU_REF, 2);
  CHECK_OK(mxu_load_weights(b, k3_as_k2));
  CHECK(weights_equal(a, b));
  mxu_model_free(a);
  mxu_model_free(b);
}

static void each_layout(const char *ext) {
  layout_ext = ext;
  round_trip(MXU_BACKEND_CPU);
  round_trip(MXU_BACKEND_CPU_REF);
  across_backends();
  another_model();
  other_counts();
  truncated();
  not_hdf5();
  missing_and_unwritable();
  disk_full();
}

int main(void) {
  if (!check_temp_make("test_weights")) {
    perror("mkdtemp");
    return 1;
  }
  each_layout(".h5");
  each_layout(".weights.h5");
  file_names();
  layout_from_content();
  check_remove_tree(temp_dir);
  return check_report("test_weights");
}
