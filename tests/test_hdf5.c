/* test_hdf5.c — Keras' HDF5 weights files seen from outside mxu: the
 * tf.keras 2.x and Keras 3 trees mxu writes, walked name by name with the
 * HDF5 C API; round trips of the reference models and of every layer
 * type; files written by h5py following Keras' own saving code
 * (tests/h5py_keras.py, run by Debian's /usr/bin/python3) loaded into mxu,
 * and mxu's files read back by h5py; Keras files with a piece missing or
 * wrong refused with the cause, silently (HDF5 prints nothing). */
#include "check.h"
#include "mxu.h"

#include <dirent.h>
#include <fcntl.h>
#include <hdf5.h>
#include <spawn.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define temp_dir check_temp_dir

/* ---- models ------------------------------------------------------------ */

static mxu_model *from_json(const char *path, uint64_t seed) {
  mxu_model *model = NULL;
  CHECK_OK(mxu_model_load_json(path, &model, NULL, NULL));
  if (!model) exit(1);
  mxu_compile_config c = mxu_compile_defaults();
  c.batch_size = 8;
  c.seed = seed;
  CHECK_OK(mxu_compile(model, &c));
  return model;
}

static mxu_model *fashion(uint64_t seed) {
  return from_json("models/fashion_mnist.json", seed);
}

/* 1 when every weight of a and b has the same bits. */
static int weights_equal(const mxu_model *a, const mxu_model *b) {
  if (mxu_model_layer_count(a) != mxu_model_layer_count(b)) return 0;
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

/* h5py_keras.py's formula for element i of weight k (model order). */
static float formula(int k, int64_t i) {
  static const double scales[] = {0.05, 0.1, 0.01, 0.1};
  int64_t n = (i * 7919 + (int64_t)k * 104729) % 2001 - 1000;
  return (float)((double)n / 1000.0 * scales[k]);
}

/* Sets (or, with check, compares) every weight to the formula. */
static int formula_weights(mxu_model *model, int check) {
  int k = 0, same = 1;
  for (int l = 0; l < mxu_model_layer_count(model); l++)
    for (int w = 0; w < mxu_layer_weight_count(model, l); w++, k++) {
      mxu_tensor t;
      CHECK_OK(mxu_layer_weight(model, l, w, &t, NULL));
      float *v = t.data;
      for (int64_t i = 0; i < mxu_shape_count(&t.shape); i++) {
        float want = formula(k, i);
        if (check) same &= memcmp(&v[i], &want, sizeof want) == 0;
        if (!check) v[i] = want;
      }
    }
  return same;
}

/* Eight fashion-sized inputs through the model. */
static void predict8(mxu_model *model, float *out) {
  static float x[8 * 28 * 28];
  for (int i = 0; i < 8 * 28 * 28; i++) x[i] = (float)((i * 37) % 256);
  CHECK_OK(mxu_predict(model, x, 8, out));
}

/* ---- reading the file with the HDF5 C API ------------------------------ */

/* A string attribute, list or scalar, as one "a,b,c" text. */
static void attribute_text(hid_t object, const char *name, char *out,
                           size_t size) {
  out[0] = 0;
  hid_t attr = H5Aopen(object, name, H5P_DEFAULT);
  hid_t type = H5Aget_type(attr), space = H5Aget_space(attr);
  hssize_t n = H5Sget_simple_extent_npoints(space);
  CHECK_MSG(H5Tis_variable_str(type) > 0, "%s is not variable-length", name);
  CHECK(H5Tget_cset(type) == H5T_CSET_ASCII || !strcmp(name, "name"));
  char *texts[64] = {0};
  hid_t memory = H5Tcopy(H5T_C_S1);
  H5Tset_size(memory, H5T_VARIABLE);
  if (n >= 0 && n <= 64 && H5Aread(attr, memory, texts) >= 0)
    for (hssize_t i = 0; i < n; i++) {
      size_t used = strlen(out);
      snprintf(out + used, size - used, "%s%s", i ? "," : "", texts[i]);
      H5free_memory(texts[i]);
    }
  H5Tclose(memory);
  H5Tclose(type);
  H5Sclose(space);
  H5Aclose(attr);
}

static void expect_strings(hid_t file, const char *object, const char *name,
                           const char *want) {
  hid_t o = H5Oopen(file, object, H5P_DEFAULT);
  char got[1024];
  attribute_text(o, name, got, sizeof got);
  CHECK_MSG(!strcmp(got, want), "%s %s: '%s', want '%s'", object, name, got,
            want);
  H5Oclose(o);
}

/* What h5py writes for Keras' empty list: float64, shape (0,). */
static void expect_empty_list(hid_t file, const char *object) {
  hid_t o = H5Oopen(file, object, H5P_DEFAULT);
  hid_t attr = H5Aopen(o, "weight_names", H5P_DEFAULT);
  hid_t type = H5Aget_type(attr), space = H5Aget_space(attr);
  hsize_t dims[1] = {99};
  CHECK_MSG(H5Tequal(type, H5T_IEEE_F64LE) > 0, "%s: not float64", object);
  CHECK(H5Sget_simple_extent_ndims(space) == 1);
  H5Sget_simple_extent_dims(space, dims, NULL);
  CHECK_MSG(dims[0] == 0, "%s: weight_names has %llu items", object,
            (unsigned long long)dims[0]);
  H5Tclose(type);
  H5Sclose(space);
  H5Aclose(attr);
  H5Oclose(o);
}

/* float32 little-endian, contiguous, no filters, the given shape. */
static void expect_dataset(hid_t file, const char *path, int rank,
                           const hsize_t *want) {
  hid_t d = H5Dopen2(file, path, H5P_DEFAULT);
  CHECK_MSG(d >= 0, "no dataset %s", path);
  if (d < 0) return;
  hid_t type = H5Dget_type(d), space = H5Dget_space(d);
  hid_t dcpl = H5Dget_create_plist(d);
  hsize_t dims[8] = {0};
  CHECK_MSG(H5Tequal(type, H5T_IEEE_F32LE) > 0, "%s: not float32 LE", path);
  CHECK_MSG(H5Sget_simple_extent_ndims(space) == rank, "%s: rank", path);
  H5Sget_simple_extent_dims(space, dims, NULL);
  for (int i = 0; i < rank; i++)
    CHECK_MSG(dims[i] == want[i], "%s: dim %d is %llu, want %llu", path, i,
              (unsigned long long)dims[i], (unsigned long long)want[i]);
  CHECK_MSG(H5Pget_layout(dcpl) == H5D_CONTIGUOUS, "%s: not contiguous", path);
  CHECK(H5Pget_nfilters(dcpl) == 0);
  H5Pclose(dcpl);
  H5Sclose(space);
  H5Tclose(type);
  H5Dclose(d);
}

typedef struct tree {
  char text[4096];
  int soft;
} tree;

static herr_t visit_link(hid_t group, const char *name, const H5L_info_t *info,
                         void *data) {
  (void)group;
  tree *t = data;
  size_t used = strlen(t->text);
  snprintf(t->text + used, sizeof t->text - used, "%s%s", used ? " " : "",
           name);
  t->soft += info->type != H5L_TYPE_HARD;
  return 0;
}

/* Every link in the file, in name order, all hard. */
static void expect_tree(hid_t file, const char *want) {
  tree t = {"", 0};
  CHECK(H5Lvisit(file, H5_INDEX_NAME, H5_ITER_INC, visit_link, &t) >= 0);
  CHECK_MSG(!strcmp(t.text, want), "tree:\n  %s\nwant:\n  %s", t.text, want);
  CHECK_MSG(t.soft == 0, "%d links are not hard links", t.soft);
}

static herr_t visit_attribute(hid_t object, const char *name,
                              const H5A_info_t *info, void *data) {
  (void)object;
  (void)info;
  char *text = data;
  size_t used = strlen(text);
  snprintf(text + used, 256 - used, "%s%s", used ? " " : "", name);
  return 0;
}

static void expect_attributes(hid_t file, const char *object,
                              const char *want) {
  char text[256] = "";
  hid_t o = H5Oopen(file, object, H5P_DEFAULT);
  H5Aiterate2(o, H5_INDEX_NAME, H5_ITER_INC, NULL, visit_attribute, text);
  CHECK_MSG(!strcmp(text, want), "%s has attributes '%s', want '%s'", object,
            text, want);
  H5Oclose(o);
}

/* ---- the trees mxu writes ---------------------------------------------- */

static const hsize_t conv_kernel[] = {3, 3, 1, 64}, conv_bias[] = {64};
static const hsize_t dense_kernel[] = {10816, 10}, dense_bias[] = {10};

static void keras2_tree(void) {
  mxu_model *model = fashion(1);
  const char *path = temp_path("fashion.h5");
  CHECK_OK(mxu_save_weights(model, path));
  hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  CHECK(file >= 0);
  expect_tree(file, "activation activation_1 conv2d conv2d/conv2d "
                    "conv2d/conv2d/bias:0 conv2d/conv2d/kernel:0 dense "
                    "dense/dense dense/dense/bias:0 dense/dense/kernel:0 "
                    "flatten max_pooling2d top_level_model_weights");
  expect_attributes(file, "/", "backend keras_version layer_names");
  expect_strings(file, "/", "layer_names",
                 "conv2d,max_pooling2d,activation,flatten,dense,activation_1");
  expect_strings(file, "/", "backend", "tensorflow");
  expect_strings(file, "/", "keras_version", "2.15.0");
  expect_strings(file, "/conv2d", "weight_names",
                 "conv2d/kernel:0,conv2d/bias:0");
  expect_strings(file, "/dense", "weight_names", "dense/kernel:0,dense/bias:0");
  const char *weightless[] = {"/max_pooling2d", "/activation", "/flatten",
                              "/activation_1", "/top_level_model_weights"};
  for (int i = 0; i < 5; i++) {
    expect_attributes(file, weightless[i], "weight_names");
    expect_empty_list(file, weightless[i]);
  }
  expect_dataset(file, "/conv2d/conv2d/kernel:0", 4, conv_kernel);
  expect_dataset(file, "/conv2d/conv2d/bias:0", 1, conv_bias);
  expect_dataset(file, "/dense/dense/kernel:0", 2, dense_kernel);
  expect_dataset(file, "/dense/dense/bias:0", 1, dense_bias);
  H5Fclose(file);
  mxu_model_free(model);
}

static void keras3_tree(void) {
  mxu_model *model = fashion(1);
  const char *path = temp_path("fashion.weights.h5");
  CHECK_OK(mxu_save_weights(model, path));
  hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  CHECK(file >= 0);
  expect_tree(file, "layers layers/activation layers/activation/vars "
                    "layers/activation_1 layers/activation_1/vars "
                    "layers/conv2d layers/conv2d/vars layers/conv2d/vars/0 "
                    "layers/conv2d/vars/1 layers/dense layers/dense/vars "
                    "layers/dense/vars/0 layers/dense/vars/1 layers/flatten "
                    "layers/flatten/vars layers/max_pooling2d "
                    "layers/max_pooling2d/vars vars");
  expect_attributes(file, "/", "");
  expect_attributes(file, "/layers/conv2d", "");
  expect_strings(file, "/vars", "name", "sequential");
  expect_strings(file, "/layers/conv2d/vars", "name", "conv2d");
  expect_strings(file, "/layers/activation_1/vars", "name", "activation_1");
  expect_dataset(file, "/layers/conv2d/vars/0", 4, conv_kernel);
  expect_dataset(file, "/layers/conv2d/vars/1", 1, conv_bias);
  expect_dataset(file, "/layers/dense/vars/0", 2, dense_kernel);
  expect_dataset(file, "/layers/dense/vars/1", 1, dense_bias);
  H5Fclose(file);
  mxu_model_free(model);
}

/* ---- round trips ------------------------------------------------------- */

static void reference_models(void) {
  const char *models[] = {"models/fashion_mnist.json", "models/cifar10.json",
                          "models/cifar10_augmented.json"};
  const char *names[] = {"ref.h5", "ref.weights.h5"};
  for (int m = 0; m < 3; m++)
    for (int f = 0; f < 2; f++) {
      mxu_model *a = from_json(models[m], 1), *b = from_json(models[m], 2);
      CHECK(!weights_equal(a, b));
      CHECK_OK(mxu_save_weights(a, temp_path(names[f])));
      CHECK_OK(mxu_load_weights(b, temp_path(names[f])));
      CHECK_MSG(weights_equal(a, b), "%s through %s", models[m], names[f]);
      mxu_model_free(a);
      mxu_model_free(b);
    }
}

/* Input (10, 10, 2) -> BN -> Conv2D -> AveragePooling2D -> MaxPooling2D
 * -> Activation -> Flatten -> Dropout -> Dense -> BN -> Dense "head". */
static mxu_model *every_layer(uint64_t seed) {
  mxu_model *model = mxu_sequential(NULL);
  int64_t dims[3] = {10, 10, 2};
  mxu_batchnorm_config bn = mxu_batchnorm_defaults();
  mxu_conv2d_config conv = mxu_conv2d_defaults(4, 3, 3);
  mxu_pool2d_config pool = mxu_pool2d_defaults(2, 2);
  mxu_dense_config dense = mxu_dense_defaults(8), head = mxu_dense_defaults(3);
  head.name = "head";
  head.activation = MXU_SOFTMAX;
  CHECK_OK(mxu_add_input(model, NULL, mxu_shape_make(3, dims)));
  CHECK_OK(mxu_add_batch_normalization(model, &bn));
  CHECK_OK(mxu_add_conv2d(model, &conv));
  CHECK_OK(mxu_add_average_pooling2d(model, &pool));
  CHECK_OK(mxu_add_max_pooling2d(model, &pool));
  CHECK_OK(mxu_add_activation(model, NULL, MXU_TANH));
  CHECK_OK(mxu_add_flatten(model, NULL));
  CHECK_OK(mxu_add_dropout(model, NULL, 0.25f));
  CHECK_OK(mxu_add_dense(model, &dense));
  CHECK_OK(mxu_add_batch_normalization(model, &bn));
  CHECK_OK(mxu_add_dense(model, &head));
  mxu_compile_config c = mxu_compile_defaults();
  c.batch_size = 8;
  c.seed = seed;
  CHECK_OK(mxu_compile(model, &c));
  return model;
}

/* Two epochs move every weight and moving statistic off its start. */
static void train(mxu_model *model) {
  int64_t dims[3] = {10, 10, 2};
  static float x[16 * 200];
  int32_t y[16];
  for (int i = 0; i < 16 * 200; i++) x[i] = (float)((i * 37) % 101) / 50.0f;
  for (int i = 0; i < 16; i++) y[i] = i % 3;
  mxu_dataset *data = NULL;
  CHECK_OK(
      mxu_dataset_from_arrays(x, y, 16, mxu_shape_make(3, dims), 3, &data));
  mxu_fit_config fit = mxu_fit_defaults();
  fit.epochs = 2;
  fit.batch_size = 8;
  fit.verbose = 0;
  CHECK_OK(mxu_fit(model, data, &fit, NULL));
  mxu_dataset_free(data);
}

static void every_layer_type(void) {
  mxu_model *a = every_layer(1);
  train(a);
  const char *names[] = {"every.h5", "every.weights.h5"};
  for (int f = 0; f < 2; f++) {
    mxu_model *b = every_layer(2);
    CHECK_OK(mxu_save_weights(a, temp_path(names[f])));
    CHECK_OK(mxu_load_weights(b, temp_path(names[f])));
    CHECK_MSG(weights_equal(a, b), "every layer type through %s", names[f]);
    mxu_model_free(b);
  }
  /* Keras 3 files name a layer's group by its class, "head" included. */
  hid_t file = H5Fopen(temp_path(names[1]), H5F_ACC_RDONLY, H5P_DEFAULT);
  expect_strings(file, "/layers/dense_1/vars", "name", "head");
  expect_strings(file, "/layers/batch_normalization_1/vars", "name",
                 "batch_normalization_1");
  expect_strings(file, "/layers/average_pooling2d/vars", "name",
                 "average_pooling2d");
  H5Fclose(file);
  mxu_model_free(a);
}

/* ---- long layer_names: split as Keras splits them ---------------------- */

#define LONG_LAYERS 700

static mxu_model *many_layers(uint64_t seed) {
  mxu_model *model = mxu_sequential(NULL);
  int64_t dims[1] = {4};
  CHECK_OK(mxu_add_input(model, NULL, mxu_shape_make(1, dims)));
  for (int i = 0; i < LONG_LAYERS; i++) {
    char name[128];
    snprintf(name, sizeof name, "%0119d", i); /* 119 characters */
    name[0] = 'a';
    CHECK_OK(mxu_add_activation(model, name, MXU_LINEAR));
  }
  mxu_dense_config dense = mxu_dense_defaults(2);
  CHECK_OK(mxu_add_dense(model, &dense));
  mxu_compile_config c = mxu_compile_defaults();
  c.batch_size = 2;
  c.backend = MXU_BACKEND_CPU_REF;
  c.seed = seed;
  CHECK_OK(mxu_compile(model, &c));
  return model;
}

/* 701 names of up to 119 bytes: 83,419 bytes as numpy's 'S119' array,
 * over 64,512, so layer_names0 and layer_names1 of 351 and 350 names. */
static void split_layer_names(void) {
  mxu_model *a = many_layers(1), *b = many_layers(2);
  const char *path = temp_path("long.h5");
  CHECK_OK(mxu_save_weights(a, path));
  hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  expect_attributes(file, "/",
                    "backend keras_version layer_names0 layer_names1");
  const char *parts[] = {"layer_names0", "layer_names1"};
  hsize_t want[] = {351, 350};
  for (int p = 0; p < 2; p++) {
    hid_t attr = H5Aopen(file, parts[p], H5P_DEFAULT);
    hid_t type = H5Aget_type(attr), space = H5Aget_space(attr);
    CHECK(H5Tis_variable_str(type) == 0 && H5Tget_size(type) == 119);
    CHECK(H5Tget_strpad(type) == H5T_STR_NULLPAD);
    CHECK(H5Sget_simple_extent_npoints(space) == (hssize_t)want[p]);
    H5Tclose(type);
    H5Sclose(space);
    H5Aclose(attr);
  }
  H5Fclose(file);
  CHECK_OK(mxu_load_weights(b, path));
  CHECK(weights_equal(a, b));
  mxu_model_free(a);
  mxu_model_free(b);
}

/* ---- h5py -------------------------------------------------------------- */

/* Runs argv; its exit status, or -1. */
static int run(char *const argv[]) {
  pid_t pid;
  if (posix_spawn(&pid, argv[0], NULL, NULL, argv, environ) != 0) return -1;
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

static int python(const char *a, const char *b, const char *c, const char *d) {
  char *argv[] = {"/usr/bin/python3", "-I",      (char *)a, (char *)b,
                  (char *)c,          (char *)d, NULL};
  return run(argv);
}

/* The formula's weights and outputs, from a file h5py wrote. */
static void load_h5py_file(const char *name, const float *want) {
  mxu_model *model = fashion(7);
  CHECK_OK(mxu_load_weights(model, temp_path(name)));
  CHECK_MSG(formula_weights(model, 1), "%s: weights differ from the formula",
            name);
  float got[80];
  predict8(model, got);
  CHECK_MSG(memcmp(got, want, sizeof got) == 0, "%s: predictions differ", name);
  mxu_model_free(model);
}

static void h5py_files(void) {
  if (python("-c", "import h5py", NULL, NULL) != 0) {
    CHECK_MSG(0, "/usr/bin/python3 cannot import h5py: install Debian's "
                 "python3-h5py (apt-get install python3-h5py; make test "
                 "installs it through scripts/deps.sh)");
    return;
  }
  CHECK(python("tests/h5py_keras.py", "write", temp_dir, NULL) == 0);
  mxu_model *reference = fashion(3);
  formula_weights(reference, 0);
  float want[80];
  predict8(reference, want);
  const char *files[] = {"keras2.h5", "keras2_full.h5", "keras3.weights.h5",
                         "keras3_min.weights.h5"};
  for (int i = 0; i < 4; i++) load_h5py_file(files[i], want);
  /* And the other way: h5py reads mxu's files as Keras' loaders do. */
  const char *k2 = temp_path("mine.h5"), *k3 = temp_path("mine.weights.h5");
  CHECK_OK(mxu_save_weights(reference, k2));
  CHECK_OK(mxu_save_weights(reference, k3));
  CHECK(python("tests/h5py_keras.py", "check", k2, k3) == 0);
  mxu_model_free(reference);
}

/* ---- Keras files with something missing or wrong ----------------------- */

/* A fresh fashion file in the given layout, open for editing. */
static hid_t edit(const char *name) {
  mxu_model *model = fashion(1);
  CHECK_OK(mxu_save_weights(model, temp_path(name)));
  mxu_model_free(model);
  return H5Fopen(temp_path(name), H5F_ACC_RDWR, H5P_DEFAULT);
}

/* Loads name expecting failure; the model must stay as it was, and
 * nothing may reach stderr (HDF5 prints its error stack by default). */
static void expect_refused(const char *name, mxu_status want,
                           const char *needle) {
  mxu_model *model = fashion(2), *before = fashion(2);
  fflush(stderr);
  int saved = dup(2),
      sink = open(temp_path("stderr.txt"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  dup2(sink, 2);
  mxu_status got = mxu_load_weights(model, temp_path(name));
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  off_t printed = lseek(sink, 0, SEEK_END);
  close(sink);
  CHECK_MSG(printed == 0, "%s: %lld bytes on stderr", name, (long long)printed);
  EXPECT_FAIL(got, want, needle);
  CHECK(has(mxu_errmsg(), temp_path(name)));
  CHECK(weights_equal(model, before));
  mxu_model_free(model);
  mxu_model_free(before);
}

static void broken_keras2(void) {
  hid_t f = edit("nobias.h5");
  H5Ldelete(f, "/dense/dense/bias:0", H5P_DEFAULT);
  H5Fclose(f);
  expect_refused("nobias.h5", MXU_ERR_FORMAT,
                 "/dense lists 'dense/bias:0' in weight_names but has no "
                 "such dataset");
  /* Numbers are read whatever their type (Keras' counts are int64);
   * strings are not numbers. */
  f = edit("text.h5");
  H5Ldelete(f, "/conv2d/conv2d/kernel:0", H5P_DEFAULT);
  hid_t space = H5Screate_simple(4, conv_kernel, NULL);
  hid_t text = H5Tcopy(H5T_C_S1);
  H5Tset_size(text, 4);
  H5Dclose(H5Dcreate2(f, "/conv2d/conv2d/kernel:0", text, space, H5P_DEFAULT,
                      H5P_DEFAULT, H5P_DEFAULT));
  H5Tclose(text);
  H5Sclose(space);
  H5Fclose(f);
  expect_refused("text.h5", MXU_ERR_FORMAT,
                 "/conv2d/conv2d/kernel:0 does not hold numbers");
  f = edit("nogroup.h5");
  H5Ldelete(f, "/flatten", H5P_DEFAULT);
  H5Fclose(f);
  expect_refused("nogroup.h5", MXU_ERR_FORMAT, "/ has no group 'flatten'");
  f = H5Fcreate(temp_path("plain.h5"), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  H5Gclose(H5Gcreate2(f, "data", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  H5Fclose(f);
  expect_refused("plain.h5", MXU_ERR_FORMAT, "without Keras weights");
}

static void broken_keras3(void) {
  hid_t f = edit("short.weights.h5");
  H5Ldelete(f, "/layers/dense/vars/1", H5P_DEFAULT);
  H5Fclose(f);
  expect_refused("short.weights.h5", MXU_ERR_SHAPE,
                 "layer 'dense' (position 2): the file has 1 weights for it "
                 "(from 'layers/dense') but the model has 2");
  /* Names that do not fit fall back to position order. */
  mxu_model *a = fashion(1), *b = fashion(2);
  f = edit("moved.weights.h5");
  H5Lmove(f, "/layers/dense", f, "/layers/dense_9", H5P_DEFAULT, H5P_DEFAULT);
  H5Fclose(f);
  CHECK_OK(mxu_load_weights(b, temp_path("moved.weights.h5")));
  CHECK(weights_equal(a, b));
  mxu_model_free(a);
  mxu_model_free(b);
}

/* The caller's HDF5 error handler is back in place after each call. */
static void handler_restored(void) {
  H5E_auto2_t before = NULL, after = NULL;
  void *data_before = NULL, *data_after = NULL;
  H5Eget_auto2(H5E_DEFAULT, &before, &data_before);
  mxu_model *model = fashion(1);
  mxu_load_weights(model, temp_path("plain.h5"));
  mxu_save_weights(model, temp_path("again.h5"));
  H5Eget_auto2(H5E_DEFAULT, &after, &data_after);
  CHECK(before == after && data_before == data_after && before != NULL);
  mxu_model_free(model);
}

int main(void) {
  if (!check_temp_make("test_hdf5")) {
    perror("mkdtemp");
    return 1;
  }
  keras2_tree();
  keras3_tree();
  reference_models();
  every_layer_type();
  split_layer_names();
  h5py_files();
  broken_keras2();
  broken_keras3();
  handler_restored();
  check_remove_tree(temp_dir);
  return check_report("test_hdf5");
}
