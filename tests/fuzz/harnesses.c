/* harnesses.c — one function per reader of outside input, each taking
 * arbitrary bytes: as libFuzzer targets (fuzz_main.c, `make fuzz`) and in
 * test_fuzz's fixed-seed mutation pass (`make test`). A harness may see
 * any result but a crash, a hang, a sanitizer report or a failure without
 * a message. The readers take paths, so the bytes go to a file first. */
#include "harnesses.h"

#include "cli/cli.h"
#include "cli/options.h"

#include <hdf5.h>
#include <mxu.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* fontconfig, below cairo's text in mxu plot, keeps a few hundred bytes
 * nothing frees (a bare cairo_show_text program does too): not mxu's leak
 * for LeakSanitizer (and libFuzzer's leak check) to report. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) {
  return "leak:libfontconfig.so\n";
}

/* ---- files ------------------------------------------------------------- */

static char fuzz_dir[64];

/* path of `name` in this process's scratch folder, holding the bytes. */
static const char *as_file(const char *name, const uint8_t *data, size_t size) {
  static char path[128];
  if (!fuzz_dir[0]) {
    snprintf(fuzz_dir, sizeof fuzz_dir, "/tmp/mxu_fuzz_XXXXXX");
    if (!mkdtemp(fuzz_dir)) abort();
  }
  snprintf(path, sizeof path, "%s/%s", fuzz_dir, name);
  FILE *f = fopen(path, "wb");
  if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0)
    abort(); /* the harness, not mxu: nothing to test without the file */
  return path;
}

void fuzz_cleanup(void) {
  if (!fuzz_dir[0]) return;
  static const char *const names[] = {
      "model.json", "weights.h5", "images.idx",  "labels.idx", "batch.bin",
      "image.png",  "image.jpg",  "report.json", "curves.png", "matrix.png",
      "data.npz",   "data.npy",   "table.csv",   "model.keras"};
  char path[128];
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    snprintf(path, sizeof path, "%s/%s", fuzz_dir, names[i]);
    unlink(path);
  }
  rmdir(fuzz_dir);
  fuzz_dir[0] = 0;
}

/* Every failure must say why. */
static void expect_message(mxu_status s) {
  if (s != MXU_OK && mxu_errmsg()[0] == 0) abort();
}

/* ---- model JSON -------------------------------------------------------- */

int fuzz_model_json(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = 0;
  mxu_model *model = NULL;
  mxu_compile_config compile = mxu_compile_defaults();
  int has_compile = 0;
  mxu_status s =
      mxu_model_from_json(text, "fuzz.json", &model, &compile, &has_compile);
  expect_message(s);
  if (s == MXU_OK) {
    /* What a read model goes on to: counted, written back, read again. */
    (void)mxu_model_param_count(model, 0);
    char *json = NULL;
    if (mxu_model_to_json(model, 1, &json) == MXU_OK) {
      mxu_model *again = NULL;
      if (mxu_model_from_json(json, "fuzz.json", &again, NULL, NULL) != MXU_OK)
        abort(); /* mxu must read what it writes */
      mxu_model_free(again);
    }
    free(json);
  }
  mxu_model_free(model);
  free(text);
  return 0;
}

/* ---- HDF5: weights, checkpoints, full models ---------------------------- */

/* The model a weights file is loaded into: the golden tiny ResNet, whose
 * Keras-written files seed the corpus. */
static mxu_model *weights_model(void) {
  static mxu_model *model;
  if (model) return model;
  mxu_compile_config compile = mxu_compile_defaults();
  if (mxu_model_load_json("tests/golden/tiny_resnet.tf2.json", &model, &compile,
                          NULL) != MXU_OK)
    abort(); /* run from the repository's root */
  compile.batch_size = 2;
  compile.threads = 1;
  if (mxu_compile(model, &compile) != MXU_OK) abort();
  return model;
}

/* Files, groups, datasets, datatypes and attributes still open in any
 * file: a reader must leave none. */
static long open_h5_ids(void) {
  return (long)H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL);
}

int fuzz_h5(const uint8_t *data, size_t size) {
  const char *path = as_file("weights.h5", data, size);
  mxu_model *model = weights_model();
  /* The seeds read in milliseconds; a file libhdf5 loops on need not
   * take the probe's 10 s to be told apart. */
  setenv("MXU_H5_PROBE_SECONDS", "1", 0);
  long before = open_h5_ids();
  expect_message(mxu_load_weights(model, path));
  mxu_train_position at = {0};
  expect_message(mxu_restore_model(model, path, &at));
  mxu_model *loaded = NULL;
  expect_message(mxu_load_model(path, MXU_BACKEND_CPU, &loaded, &at));
  mxu_model_free(loaded);
  if (open_h5_ids() != before) abort(); /* an HDF5 object left open */
  return 0;
}

/* The bytes as a Keras 3 .keras archive: its model, then its weights into
 * the model it describes; then the whole model with its optimizer state. */
int fuzz_keras(const uint8_t *data, size_t size) {
  const char *path = as_file("model.keras", data, size);
  mxu_model *model = NULL;
  mxu_compile_config compile = mxu_compile_defaults();
  mxu_status s = mxu_model_load_json(path, &model, &compile, NULL);
  expect_message(s);
  compile.batch_size = 1;
  compile.threads = 1;
  /* A model the fuzzer grew huge is not this harness's subject. */
  int small = s == MXU_OK && mxu_model_param_count(model, 1) < (1 << 22);
  if (small && mxu_compile(model, &compile) == MXU_OK)
    expect_message(mxu_load_weights(model, path));
  mxu_model_free(model);
  model = NULL;
  mxu_train_position at = {0};
  if (small) expect_message(mxu_load_model(path, MXU_BACKEND_CPU, &model, &at));
  mxu_model_free(model);
  return 0;
}

/* ---- data files -------------------------------------------------------- */

/* The bytes as an IDX images file (labels: a valid file of the count its
 * header claims, up to 64), then as a labels file. */
int fuzz_idx(const uint8_t *data, size_t size) {
  uint8_t labels[8 + 64] = {0, 0, 8, 1};
  uint32_t count = size >= 8 ? (uint32_t)data[4] << 24 | data[5] << 16 |
                                   data[6] << 8 | data[7]
                             : 0;
  if (count > 64) count = 64;
  labels[7] = (uint8_t)count;
  char images_path[128];
  snprintf(images_path, sizeof images_path, "%s",
           as_file("images.idx", data, size));
  const char *labels_path = as_file("labels.idx", labels, 8 + count);
  mxu_dataset *set = NULL;
  expect_message(mxu_load_idx(images_path, labels_path, &set));
  mxu_dataset_free(set);
  set = NULL;
  expect_message(mxu_load_idx(images_path, images_path, &set));
  mxu_dataset_free(set);
  return 0;
}

/* The bytes as a CIFAR-10 batch, then as a CIFAR-100 one. */
int fuzz_cifar(const uint8_t *data, size_t size) {
  const char *path = as_file("batch.bin", data, size);
  for (int label_bytes = 1; label_bytes <= 2; label_bytes++) {
    mxu_dataset *set = NULL;
    expect_message(mxu_load_cifar(&path, 1, label_bytes, &set));
    mxu_dataset_free(set);
  }
  return 0;
}

/* The bytes as an .npz (both splits), then as .npy samples (with six
 * labels) and as .npy labels (of six samples). */
int fuzz_npz(const uint8_t *data, size_t size) {
  const char *npz = as_file("data.npz", data, size);
  for (int split = MXU_TRAIN; split <= MXU_TEST; split++) {
    mxu_dataset *set = NULL;
    expect_message(mxu_load_npz(npz, (mxu_split)split, &set));
    mxu_dataset_free(set);
  }
  char npy[128];
  snprintf(npy, sizeof npy, "%s", as_file("data.npy", data, size));
  mxu_dataset *set = NULL;
  expect_message(mxu_load_npz_arrays(npz, "x", "y_onehot", &set));
  mxu_dataset_free(set);
  set = NULL;
  expect_message(mxu_load_npy(npy, "tests/npz/labels6.npy", &set));
  mxu_dataset_free(set);
  set = NULL;
  expect_message(mxu_load_npy("tests/npz/v2.npy", npy, &set));
  mxu_dataset_free(set);
  return 0;
}

/* The bytes as a CSV table, labelled by its column 'species'. */
int fuzz_csv(const uint8_t *data, size_t size) {
  mxu_dataset *set = NULL;
  expect_message(
      mxu_load_csv(as_file("table.csv", data, size), "species", &set));
  mxu_dataset_free(set);
  return 0;
}

/* The bytes as a PNG and as a JPEG, decoded and resized to 8x8 RGB. */
int fuzz_image(const uint8_t *data, size_t size) {
  static const char *const names[2] = {"image.png", "image.jpg"};
  float pixels[8 * 8 * 3];
  for (int i = 0; i < 2; i++)
    expect_message(
        mxu_load_image_file(as_file(names[i], data, size), 8, 8, 3, pixels));
  return 0;
}

/* ---- reports ----------------------------------------------------------- */

/* The bytes as a report for `mxu plot`, both drawings. */
int fuzz_report(const uint8_t *data, size_t size) {
  char report[128], curves[128], matrix[128];
  snprintf(report, sizeof report, "%s", as_file("report.json", data, size));
  snprintf(curves, sizeof curves, "%s/curves.png", fuzz_dir);
  snprintf(matrix, sizeof matrix, "%s/matrix.png", fuzz_dir);
  char *argv[] = {"plot", report, "-o", curves, "--confusion", matrix, NULL};
  /* The command talks on stdout and stderr: quiet both streams, keep the
   * code. The descriptors stay, so a sanitizer's report still shows. */
  FILE *out = stdout, *err = stderr, *null = fopen("/dev/null", "w");
  if (null) stdout = stderr = null;
  int code = cli_plot(6, argv);
  stdout = out;
  stderr = err;
  if (null) fclose(null);
  if (code != CLI_OK && code != CLI_RUNTIME && code != CLI_USAGE) abort();
  return 0;
}

const fuzz_target fuzz_targets[] = {
    {"model_json", fuzz_model_json,
     "models/*.json tests/golden/*.json tests/keras_apps/*.json"},
    /* Each golden directory's initial.h5 and the files of other layouts,
     * not its after_step.h5 and batch.h5 (the same layouts as the tiny
     * ResNet's at the top): with them the pass outgrew the sanitizers'
     * time limit as goldens were added, for no new structure. */
    {"h5", fuzz_h5,
     "tests/golden/*.h5 tests/golden/*/[!ab]*.h5 tests/golden/*/b[!a]*.h5"},
    {"keras", fuzz_keras, "tests/golden/*/*.keras"},
    {"idx", fuzz_idx, "tests/fuzz/seeds/idx/*"},
    {"cifar", fuzz_cifar, "tests/fuzz/seeds/cifar/*"},
    {"image", fuzz_image, "tests/fuzz/seeds/image/*"},
    {"npz", fuzz_npz, "tests/npz/*.npz tests/npz/*.npy"},
    {"csv", fuzz_csv, "tests/csv/*.csv"},
    {"report", fuzz_report, "docs/*.json bench/results/*.json"},
    {NULL, NULL, NULL},
};
