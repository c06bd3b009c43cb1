/* catalog.c — data sets by name: `fashion-mnist`, `mnist`, `cifar10`,
 * `cifar100` looked up in $MXU_DATA_DIR, ./data and /usr/share/datasets,
 * or a directory given by path; the format is recognised from the files,
 * and class names come with the data. */
#include "core/core.h"
#include "data/data.h"
#include "data/image_folder.h"
#include "data/loader.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *const fashion_names[10] = {
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
static const char *const digit_names[10] = {"0", "1", "2", "3", "4",
                                            "5", "6", "7", "8", "9"};

/* Folder names a data set may have, first the one the name gives. */
static const char *const known[][3] = {
    {"fashion-mnist", "fashion_mnist", "fashion"},
    {"mnist", "mnist", "digits"},
    {"cifar10", "cifar-10", "cifar-10-batches-bin"},
    {"cifar100", "cifar-100", "cifar-100-binary"},
};

static int is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int has_file(const char *dir, const char *name) {
  char path[4096];
  struct stat st;
  snprintf(path, sizeof path, "%s/%s", dir, name);
  if (stat(path, &st) == 0) return 1;
  snprintf(path, sizeof path, "%s/%s.gz", dir, name);
  return stat(path, &st) == 0;
}

/* Resolves a name to a directory: a path that is a directory, else the
 * known folder names under each search root. */
static mxu_status resolve(const char *name, char *dir, size_t size) {
  if (is_dir(name)) {
    snprintf(dir, size, "%s", name);
    return MXU_OK;
  }
  const char *env = getenv("MXU_DATA_DIR");
  const char *roots[3] = {env && *env ? env : NULL, "./data",
                          "/usr/share/datasets"};
  for (size_t k = 0; k < sizeof known / sizeof *known; k++) {
    if (strcmp(name, known[k][0]) != 0) continue;
    for (int r = 0; r < 3; r++)
      for (int f = 0; f < 3 && roots[r]; f++) {
        snprintf(dir, size, "%s/%s", roots[r], known[k][f]);
        if (is_dir(dir)) return MXU_OK;
      }
    return mxu_fail(MXU_ERR_IO,
                    "data: '%s' was not found in $MXU_DATA_DIR (%s), ./data "
                    "or /usr/share/datasets (looked for folders %s, %s, %s); "
                    "set MXU_DATA_DIR or pass the directory",
                    name, env && *env ? env : "unset", known[k][0], known[k][1],
                    known[k][2]);
  }
  return mxu_fail(MXU_ERR_ARG,
                  "data: '%s' is neither a directory nor a known data set "
                  "(fashion-mnist, mnist, cifar10, cifar100)",
                  name);
}

/* CIFAR's batches.meta.txt / fine_label_names.txt: one name a line. */
static mxu_status read_names(mxu_dataset *data, const char *dir,
                             const char *file) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  FILE *f = fopen(path, "r");
  if (!f) return MXU_OK; /* names are optional */
  char *names[100] = {0}, line[256];
  int count = 0;
  while (count < data->num_classes && fgets(line, sizeof line, f)) {
    line[strcspn(line, "\r\n")] = 0;
    if (line[0]) names[count++] = strdup(line);
  }
  fclose(f);
  mxu_status status = MXU_OK;
  if (count == data->num_classes)
    status =
        mxu_dataset_set_class_names(data, (const char *const *)names, count);
  for (int i = 0; i < count; i++) free(names[i]);
  return status;
}

static int is_fashion(const char *name, const char *dir) {
  return strstr(name, "fashion") || strstr(dir, "fashion");
}

/* dir/name into path; 0 when it does not fit. */
static int join(char *path, size_t size, const char *dir, const char *name) {
  int n = snprintf(path, size, "%s/%s", dir, name);
  return n >= 0 && (size_t)n < size;
}

static void dir_copy(char *path, size_t size, const char *dir) {
  size_t n = strlen(dir);
  if (n >= size) n = size - 1;
  memcpy(path, dir, n);
  path[n] = 0;
}

/* Image folders: DIR/train and DIR/test (or validation, val) when they
 * exist, else DIR itself as the train split. */
static mxu_status load_images(const char *dir, mxu_split split,
                              const mxu_shape *input, mxu_dataset **out) {
  if (!input || input->rank != 3 ||
      (input->dims[2] != 1 && input->dims[2] != 3))
    return mxu_fail(MXU_ERR_ARG,
                    "data: %s is an image folder: it needs a model whose "
                    "input is (height, width, 1 or 3)",
                    dir);
  static const char *const test_names[] = {"test", "validation", "val"};
  char path[4096];
  int split_dirs = join(path, sizeof path, dir, "train") && is_dir(path);
  if (split == MXU_TEST) {
    for (size_t k = 0; split_dirs && k < 3; k++) {
      if (join(path, sizeof path, dir, test_names[k]) && is_dir(path)) break;
      path[0] = 0;
    }
    if (!split_dirs || !path[0])
      return mxu_fail(MXU_ERR_IO,
                      "data: %s has no test split: put the class folders in "
                      "%s/train and %s/test",
                      dir, dir, dir);
  }
  if (!split_dirs) dir_copy(path, sizeof path, dir);
  char train[4096];
  int labelled_as_train =
      split == MXU_TEST && join(train, sizeof train, dir, "train");
  return mxu_load_image_folder_as(path, labelled_as_train ? train : NULL,
                                  (int)input->dims[0], (int)input->dims[1],
                                  (int)input->dims[2], out);
}

/* Any subfolder at all: the shape of an image folder. */
static int has_subfolder(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  struct dirent *e;
  char path[4096];
  int found = 0;
  while (!found && (e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    found = join(path, sizeof path, dir, e->d_name) && is_dir(path);
  }
  closedir(d);
  return found;
}

mxu_status mxu_load_dataset(const char *name, mxu_split split,
                            mxu_dataset **out) {
  return mxu_load_dataset_for(name, split, (mxu_shape){0}, out);
}

mxu_status mxu_load_dataset_for(const char *name, mxu_split split,
                                mxu_shape input, mxu_dataset **out) {
  if (!out || !name) return mxu_fail(MXU_ERR_ARG, "data: no name given");
  *out = NULL;
  if (mxu_ends_with(name, ".npz")) {
    MXU_TRY(mxu_load_npz(name, split, out));
    /* (count, 28, 28) arrays for a model that takes (28, 28, 1). */
    mxu_status status = input.rank ? mxu_dataset_reshape(*out, input) : MXU_OK;
    if (status != MXU_OK) {
      mxu_fail_prefix(status, "data: %s: for the model's input: ", name);
      mxu_dataset_free(*out);
      *out = NULL;
    }
    return status;
  }
  char dir[4096];
  MXU_TRY(resolve(name, dir, sizeof dir));
  mxu_status status;
  if (has_file(dir, "train-images-idx3-ubyte")) {
    MXU_TRY(mxu_load_mnist_dir(dir, split, out));
    status = mxu_dataset_set_class_names(
        *out, is_fashion(name, dir) ? fashion_names : digit_names, 10);
  } else if (has_file(dir, "data_batch_1.bin") ||
             has_file(dir, "test_batch.bin")) {
    MXU_TRY(mxu_load_cifar10_dir(dir, split, out));
    status = read_names(*out, dir, "batches.meta.txt");
  } else if (has_file(dir, "train.bin") || has_file(dir, "test.bin")) {
    MXU_TRY(mxu_load_cifar100_dir(dir, split, out));
    status = read_names(*out, dir, "fine_label_names.txt");
  } else if (has_subfolder(dir)) {
    return load_images(dir, split, input.rank ? &input : NULL, out);
  } else {
    return mxu_fail(MXU_ERR_IO,
                    "data: %s holds none of the expected files: "
                    "train-images-idx3-ubyte[.gz] (MNIST, Fashion-MNIST), "
                    "data_batch_1.bin[.gz] (CIFAR-10), train.bin[.gz] "
                    "(CIFAR-100) or class folders of PNG/JPEG images",
                    dir);
  }
  if (status != MXU_OK) {
    mxu_dataset_free(*out);
    *out = NULL;
  }
  return status;
}
