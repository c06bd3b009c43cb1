/* catalog.c — data sets by name: `fashion-mnist`, `mnist`, `cifar10`,
 * `cifar100` looked up in $MXU_DATA_DIR, ./data and /usr/share/datasets,
 * or a directory given by path; the format is recognised from the files,
 * and class names come with the data. */
#include "core/core.h"
#include "data/data.h"
#include "data/loader.h"

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

mxu_status mxu_load_dataset(const char *name, mxu_split split,
                            mxu_dataset **out) {
  if (!out || !name) return mxu_fail(MXU_ERR_ARG, "data: no name given");
  *out = NULL;
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
  } else {
    return mxu_fail(MXU_ERR_IO,
                    "data: %s holds none of the expected files: "
                    "train-images-idx3-ubyte[.gz] (MNIST, Fashion-MNIST), "
                    "data_batch_1.bin[.gz] (CIFAR-10) or train.bin[.gz] "
                    "(CIFAR-100)",
                    dir);
  }
  if (status != MXU_OK) {
    mxu_dataset_free(*out);
    *out = NULL;
  }
  return status;
}
