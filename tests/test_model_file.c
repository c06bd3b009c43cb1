/* test_model_file.c — whole-model .h5 files and checkpoints: save/load and
 * restore round trips bit for bit (weights, moving statistics, Adam's m
 * and v, SGD's momentum, iterations, position) after which training goes
 * on identically; the file walked with the HDF5 C API and read by h5py;
 * checkpoint rotation, fallback past truncated or corrupt files, a full
 * disk, and files refused for another model or optimizer. */
#include "check.h"
#include "model/model.h"
#include "mxu.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <fcntl.h>
#include <hdf5.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define temp_dir check_temp_dir

/* ---- models and data --------------------------------------------------- */

static mxu_model *cifar(mxu_optimizer_config optimizer, uint64_t seed) {
  mxu_model *model = NULL;
  CHECK_OK(mxu_model_load_json("models/cifar10.json", &model, NULL, NULL));
  if (!model) exit(1);
  mxu_compile_config c = mxu_compile_defaults();
  c.batch_size = 8;
  c.seed = seed;
  c.optimizer = optimizer;
  c.backend = MXU_BACKEND_CPU;
  CHECK_OK(mxu_compile(model, &c));
  return model;
}

static mxu_dataset *data;

static void make_data(void) {
  enum { COUNT = 32, SIZE = 32 * 32 * 3 };
  static float x[COUNT * SIZE];
  int32_t y[COUNT];
  uint32_t state = 12345;
  for (int i = 0; i < COUNT * SIZE; i++) {
    state = state * 1664525u + 1013904223u;
    x[i] = (float)(state >> 8) / (float)(1u << 24);
  }
  for (int i = 0; i < COUNT; i++) y[i] = (i * 7) % 10;
  int64_t dims[3] = {32, 32, 3};
  CHECK_OK(
      mxu_dataset_from_arrays(x, y, COUNT, mxu_shape_make(3, dims), 10, &data));
  if (!data) exit(1);
}

static void train(mxu_model *model, int steps, uint64_t seed) {
  mxu_fit_config fit = mxu_fit_defaults();
  fit.epochs = 1;
  fit.batch_size = 8;
  fit.steps_per_epoch = steps;
  fit.seed = seed;
  fit.verbose = 0;
  CHECK_OK(mxu_fit(model, data, &fit, NULL));
}

static int same_floats(const float *a, const float *b, int64_t n) {
  return memcmp(a, b, (size_t)n * sizeof *a) == 0;
}

/* Every value a restore sets, compared bit for bit. */
static int same_model(const mxu_model *a, const mxu_model *b) {
  int64_t t = a->trainable_count;
  return t == b->trainable_count && a->state_count == b->state_count &&
         same_floats(a->weights, b->weights, t) &&
         same_floats(a->slot_m, b->slot_m, t) &&
         same_floats(a->slot_v, b->slot_v, t) &&
         same_floats(a->state, b->state, a->state_count) &&
         a->iterations == b->iterations;
}

static int nonzero(const float *values, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    if (values[i] != 0) return 1;
  return 0;
}

/* ---- round trips ------------------------------------------------------- */

static void round_trip(mxu_optimizer_config optimizer, const char *name) {
  mxu_model *a = cifar(optimizer, 1);
  train(a, 2, 3);
  CHECK(a->iterations == 2 && nonzero(a->slot_m, a->trainable_count));
  mxu_train_position pos = {.epoch = 1,
                            .step = 3,
                            .seed = 0x8000000000000077ull},
                     got = {.epoch = 0, .step = 0, .seed = 0};
  CHECK_OK(mxu_save_model(a, temp_path(name), &pos));
  mxu_model *b = NULL;
  CHECK_OK(mxu_load_model(temp_path(name), MXU_BACKEND_CPU, &b, &got));
  if (!b) exit(1);
  CHECK_MSG(same_model(a, b), "%s: the loaded model differs", name);
  CHECK(got.epoch == 1 && got.step == 3 && got.seed == pos.seed);
  CHECK(b->compile.batch_size == 8 &&
        b->compile.optimizer.kind == optimizer.kind);
  CHECK(memcmp(&b->compile.optimizer, &a->compile.optimizer,
               sizeof optimizer) == 0);
  CHECK(strcmp(b->compile.metrics[0], a->compile.metrics[0]) == 0);
  /* a fresh model restored in place gets the same values */
  mxu_model *c = cifar(optimizer, 9);
  CHECK_OK(mxu_restore_model(c, temp_path(name), NULL));
  CHECK(same_model(a, c));
  train(a, 2, 4);
  train(b, 2, 4);
  train(c, 2, 4);
  CHECK_MSG(same_model(a, b) && same_model(a, c),
            "%s: training after the load diverges", name);
  CHECK(a->iterations == 4);
  mxu_model_free(a);
  mxu_model_free(b);
  mxu_model_free(c);
}

/* ---- the file, walked with HDF5 ---------------------------------------- */

/* A scalar variable-length string attribute, malloc'd. */
static char *attribute_text(hid_t object, const char *name) {
  hid_t attr = H5Aopen(object, name, H5P_DEFAULT);
  if (attr < 0) return NULL;
  hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, H5T_VARIABLE);
  char *text = NULL, *copy = NULL;
  if (H5Aread(attr, type, &text) >= 0 && text) {
    copy = strdup(text);
    H5free_memory(text);
  }
  H5Tclose(type);
  H5Aclose(attr);
  return copy;
}

/* weight_names, one malloc'd array of malloc'd strings; *count items. */
static char **attribute_list(hid_t object, const char *name, int *count) {
  *count = 0;
  hid_t attr = H5Aopen(object, name, H5P_DEFAULT);
  if (attr < 0) return NULL;
  hid_t space = H5Aget_space(attr);
  int n = (int)H5Sget_simple_extent_npoints(space);
  hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, H5T_VARIABLE);
  char **texts = calloc((size_t)n + 1, sizeof *texts);
  if (H5Aread(attr, type, texts) >= 0) *count = n;
  for (int i = 0; i < *count; i++) {
    char *copy = strdup(texts[i]);
    H5free_memory(texts[i]);
    texts[i] = copy;
  }
  H5Tclose(type);
  H5Sclose(space);
  H5Aclose(attr);
  return texts;
}

static void free_list(char **items, int count) {
  for (int i = 0; i < count; i++) free(items[i]);
  free(items);
}

static void expect_shape(hid_t file, const char *path, const mxu_shape *want) {
  hid_t dataset = H5Dopen2(file, path, H5P_DEFAULT);
  CHECK_MSG(dataset >= 0, "no dataset %s", path);
  if (dataset < 0) return;
  hid_t space = H5Dget_space(dataset), type = H5Dget_type(dataset);
  hsize_t dims[8] = {0};
  int rank = H5Sget_simple_extent_dims(space, dims, NULL);
  int ok = rank == want->rank && H5Tequal(type, H5T_IEEE_F32LE) > 0;
  for (int d = 0; ok && d < rank; d++) ok = (int64_t)dims[d] == want->dims[d];
  CHECK_MSG(ok, "%s: wrong shape or type (rank %d)", path, rank);
  H5Tclose(type);
  H5Sclose(space);
  H5Dclose(dataset);
}

static void expect_configs(hid_t file) {
  char *model_config = attribute_text(file, "model_config");
  cJSON *json = model_config ? cJSON_Parse(model_config) : NULL;
  const cJSON *cls = cJSON_GetObjectItemCaseSensitive(json, "class_name");
  CHECK(cJSON_IsString(cls) && strcmp(cls->valuestring, "Sequential") == 0);
  cJSON_Delete(json);
  free(model_config);
  char *training_config = attribute_text(file, "training_config");
  json = training_config ? cJSON_Parse(training_config) : NULL;
  const cJSON *opt = cJSON_GetObjectItemCaseSensitive(json, "optimizer_config");
  cls = cJSON_GetObjectItemCaseSensitive(opt, "class_name");
  CHECK(cJSON_IsString(cls) && strcmp(cls->valuestring, "Custom>Adam") == 0);
  const cJSON *loss = cJSON_GetObjectItemCaseSensitive(json, "loss");
  CHECK(cJSON_IsString(loss) &&
        strcmp(loss->valuestring, "sparse_categorical_crossentropy") == 0);
  CHECK(has(training_config, "MeanMetricWrapper"));
  cJSON_Delete(json);
  free(training_config);
  CHECK(H5Aexists(file, "mxu_batch_size") > 0 &&
        H5Aexists(file, "mxu_epoch") > 0 && H5Aexists(file, "mxu_seed") > 0);
}

static void expect_optimizer(hid_t file, const mxu_model *model) {
  hid_t group = H5Gopen2(file, "optimizer_weights", H5P_DEFAULT);
  CHECK(group >= 0);
  int count = 0;
  char **names = attribute_list(group, "weight_names", &count);
  int trainable = 0, order[64];
  for (int i = 0; i < model->param_count && trainable < 64; i++)
    if (model->params[i].trainable) order[trainable++] = i;
  /* tf.keras 2.11+'s layout: each weight's m and v in turn. */
  CHECK(count == 1 + 2 * trainable);
  CHECK(count > 0 && strcmp(names[0], "iteration:0") == 0);
  CHECK(count > 1 &&
        strcmp(names[1], "Adam/m/batch_normalization/gamma:0") == 0);
  CHECK(count > 2 &&
        strcmp(names[2], "Adam/v/batch_normalization/gamma:0") == 0);
  int64_t iter = -1;
  hid_t dataset = H5Dopen2(group, "iteration:0", H5P_DEFAULT);
  CHECK(dataset >= 0 && H5Dread(dataset, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL,
                                H5P_DEFAULT, &iter) >= 0);
  CHECK(iter == model->iterations);
  if (dataset >= 0) H5Dclose(dataset);
  for (int e = 1; e < count; e++)
    expect_shape(group, names[e], &model->params[order[(e - 1) / 2]].shape);
  free_list(names, count);
  if (group >= 0) H5Gclose(group);
}

static void file_tree(void) {
  mxu_model *a = cifar(mxu_adam(1e-3f), 1);
  train(a, 2, 3);
  mxu_train_position pos = {.epoch = 0, .step = 2, .seed = 5};
  CHECK_OK(mxu_save_model(a, temp_path("tree.h5"), &pos));
  hid_t file = H5Fopen(temp_path("tree.h5"), H5F_ACC_RDONLY, H5P_DEFAULT);
  CHECK(file >= 0);
  expect_configs(file);
  hid_t weights = H5Gopen2(file, "model_weights", H5P_DEFAULT);
  CHECK(weights >= 0 && H5Aexists(weights, "layer_names") > 0);
  mxu_shape kernel =
      a->params[a->layers[mxu_model_node(a, 1)].param_first].shape;
  expect_shape(weights, "conv2d/conv2d/kernel:0", &kernel);
  H5Gclose(weights);
  expect_optimizer(file, a);
  H5Fclose(file);
  mxu_model_free(a);
}

/* ---- h5py -------------------------------------------------------------- */

static const char h5py_script[] =
    "import h5py, json, sys\n"
    "f = h5py.File(sys.argv[1], 'r')\n"
    "print(json.loads(f.attrs['model_config'])['class_name'])\n"
    "names = [n.decode() if isinstance(n, bytes) else n\n"
    "         for n in f['optimizer_weights'].attrs['weight_names']]\n"
    "print(int(f['optimizer_weights'][names[0]][()]))\n"
    "for n in names: print(n, f['optimizer_weights'][n].shape)\n";

/* What the script prints for the model, from mxu's own tables. */
static void expected_h5py(const mxu_model *model, char *out, size_t size) {
  int n = snprintf(out, size, "Sequential\n%lld\niteration:0 ()\n",
                   (long long)model->iterations);
  for (int i = 0; i < model->param_count; i++) {
    const mxu_param *p = &model->params[i];
    if (!p->trainable) continue;
    n += snprintf(out + n, size - (size_t)n, "SGD/m/%s/%s:0 (",
                  model->layers[p->layer].name, p->name);
    for (int d = 0; d < p->shape.rank; d++)
      n += snprintf(out + n, size - (size_t)n, "%s%lld", d ? ", " : "",
                    (long long)p->shape.dims[d]);
    n += snprintf(out + n, size - (size_t)n, "%s)\n",
                  p->shape.rank == 1 ? "," : "");
  }
}

static void h5py_reads(void) {
  if (system("/usr/bin/python3 -c 'import h5py' 2>/dev/null") != 0) {
    fprintf(stderr, "test_model_file: h5py missing, its check skipped\n");
    return;
  }
  mxu_model *a = cifar(mxu_sgd(0.01f, 0.9f, 0), 1);
  train(a, 2, 3);
  CHECK_OK(mxu_save_model(a, temp_path("sgd.h5"), NULL));
  FILE *script = fopen(temp_path("read.py"), "w");
  CHECK(script && fputs(h5py_script, script) >= 0);
  if (script) fclose(script);
  char command[1200], got[8192] = "", want[8192];
  snprintf(command, sizeof command, "/usr/bin/python3 -I %s %s",
           temp_path("read.py"), temp_path("sgd.h5"));
  FILE *p = popen(command, "r");
  size_t n = p ? fread(got, 1, sizeof got - 1, p) : 0;
  got[n] = 0;
  CHECK(p && pclose(p) == 0);
  expected_h5py(a, want, sizeof want);
  CHECK_MSG(strcmp(got, want) == 0, "h5py read:\n%s\nwant:\n%s", got, want);
  mxu_model_free(a);
}

/* ---- refusals ---------------------------------------------------------- */

static float *copy_weights(const mxu_model *model) {
  float *copy = malloc((size_t)model->trainable_count * sizeof *copy);
  memcpy(copy, model->weights, (size_t)model->trainable_count * sizeof *copy);
  return copy;
}

/* cifar10.json with a narrower Dense layer. */
static mxu_model *other_architecture(void) {
  FILE *f = fopen("models/cifar10.json", "rb");
  static char text[1 << 16];
  size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
  if (f) fclose(f);
  text[n] = 0;
  char *units = strstr(text, "\"units\": 512");
  CHECK(units != NULL);
  if (units) memcpy(units, "\"units\": 256", 12);
  mxu_model *model = NULL;
  CHECK_OK(mxu_model_from_json(text, "other", &model, NULL, NULL));
  if (!model) exit(1);
  mxu_compile_config c = mxu_compile_defaults();
  c.batch_size = 8;
  CHECK_OK(mxu_compile(model, &c));
  return model;
}

static void refusals(void) {
  mxu_model *a = cifar(mxu_adam(1e-3f), 1);
  train(a, 1, 3);
  CHECK_OK(mxu_save_model(a, temp_path("nopos.h5"), NULL));
  mxu_train_position pos;
  mxu_model *b = cifar(mxu_adam(1e-3f), 2);
  float *before = copy_weights(b);
  /* A file without a position resumes at the start with its optimizer
   * state (Keras' fit after load_model); the seed stays the caller's. */
  pos.seed = 77;
  CHECK_OK(mxu_restore_model(b, temp_path("nopos.h5"), &pos));
  CHECK(pos.epoch == 0 && pos.step == 0 && pos.seed == 77);
  CHECK(same_floats(a->weights, b->weights, b->trainable_count));
  CHECK(same_floats(a->slot_v, b->slot_v, b->trainable_count));
  CHECK(b->iterations == a->iterations && b->iterations > 0);
  memcpy(b->weights, before, (size_t)b->trainable_count * sizeof(float));
  mxu_model *other = other_architecture();
  float *other_before = copy_weights(other);
  EXPECT_FAIL(mxu_restore_model(other, temp_path("nopos.h5"), NULL),
              MXU_ERR_SHAPE, "layer 'dense'");
  CHECK(same_floats(other_before, other->weights, other->trainable_count));
  mxu_model *sgd = cifar(mxu_sgd(0.01f, 0.9f, 0), 1);
  EXPECT_FAIL(mxu_restore_model(sgd, temp_path("nopos.h5"), NULL), MXU_ERR_ARG,
              "optimizer");
  CHECK_OK(mxu_save_weights(a, temp_path("weights_only.h5")));
  EXPECT_FAIL(mxu_restore_model(b, temp_path("weights_only.h5"), NULL),
              MXU_ERR_FORMAT, "model_weights");
  EXPECT_FAIL(mxu_restore_model(b, temp_path("missing.h5"), NULL), MXU_ERR_IO,
              "missing.h5");
  CHECK(same_floats(before, b->weights, b->trainable_count));
  free(before);
  free(other_before);
  mxu_model_free(a);
  mxu_model_free(b);
  mxu_model_free(other);
  mxu_model_free(sgd);
}

/* ---- checkpoints ------------------------------------------------------- */

static int count_entries(const char *dir, const char *needle) {
  DIR *d = opendir(dir);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));) n += has(e->d_name, needle);
  if (d) closedir(d);
  return n;
}

static int exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

static char ckpt_dir[600];

static const char *ckpt(const char *name) {
  static char path[1200];
  snprintf(path, sizeof path, "%s/%s", ckpt_dir, name);
  return path;
}

/* The weights of the i-th checkpoint write_checkpoints makes. */
static float *snap[3];

/* Three checkpoints, a training step apart. */
static mxu_model *write_checkpoints(void) {
  mxu_model *a = cifar(mxu_adam(1e-3f), 1);
  for (int i = 0; i < 3; i++) {
    train(a, 1, 10 + (uint64_t)i);
    mxu_train_position pos = {.epoch = i / 2, .step = 1 + i % 2, .seed = 42};
    CHECK_OK(mxu_checkpoint_save(a, ckpt_dir, &pos, 3));
    snap[i] = copy_weights(a);
  }
  return a;
}

static void rotation(void) {
  snprintf(ckpt_dir, sizeof ckpt_dir, "%s/ckpts", temp_dir);
  mxu_model *a = write_checkpoints();
  CHECK(count_entries(ckpt_dir, "ckpt-") == 3);
  /* a stale temporary and a foreign file; keep 1 still keeps 2 */
  FILE *f = fopen(ckpt("ckpt-00000-00001.h5.tmp-AbC123"), "w");
  if (f) fclose(f);
  f = fopen(ckpt("notes.txt"), "w");
  if (f) fclose(f);
  mxu_train_position pos = {.epoch = 1, .step = 5, .seed = 42};
  CHECK_OK(mxu_checkpoint_save(a, ckpt_dir, &pos, 1));
  CHECK(count_entries(ckpt_dir, "ckpt-") == 2);
  CHECK(exists(ckpt("ckpt-00001-00005.h5")) &&
        exists(ckpt("ckpt-00001-00001.h5")) && exists(ckpt("notes.txt")));
  CHECK(count_entries(ckpt_dir, ".tmp-") == 0);
  unlink(ckpt("ckpt-00001-00005.h5"));
  /* Weights an update made infinite (its loss was finite) are not
   * checkpointed: the last good checkpoint stays the newest. */
  float saved = a->weights[7];
  a->weights[7] = INFINITY;
  pos = (mxu_train_position){.epoch = 1, .step = 6, .seed = 42};
  CHECK(mxu_checkpoint_save(a, ckpt_dir, &pos, 3) == MXU_ERR_NUMERIC &&
        has(mxu_errmsg(), "infinite") && has(mxu_errmsg(), "last one stays"));
  CHECK(!exists(ckpt("ckpt-00001-00006.h5")) &&
        count_entries(ckpt_dir, "ckpt-") == 1);
  a->weights[7] = saved;
  mxu_model_free(a);
}

/* Runs killed between a checkpoint's rename and their prune leave one
 * more each; the next save prunes them before it writes, so even a save
 * that then fails (here: a file size limit, as a full disk) leaves no
 * more than it keeps. */
static void leftovers_pruned_first(void) {
  char rotated[sizeof ckpt_dir]; /* the later tests read rotation()'s */
  memcpy(rotated, ckpt_dir, sizeof ckpt_dir);
  snprintf(ckpt_dir, sizeof ckpt_dir, "%s/leftovers", temp_dir);
  mxu_model *a = cifar(mxu_adam(1e-3f), 1);
  for (int i = 0; i < 4; i++) {
    mxu_train_position pos = {.epoch = 0, .step = 1 + i, .seed = 42};
    CHECK_OK(mxu_checkpoint_save(a, ckpt_dir, &pos, 4));
  }
  CHECK(count_entries(ckpt_dir, "ckpt-") == 4);
  pid_t child = fork();
  if (child == 0) {
    struct rlimit limit = {4096, 4096};
    setrlimit(RLIMIT_FSIZE, &limit);
    signal(SIGXFSZ, SIG_IGN); /* the write fails with EFBIG instead */
    mxu_train_position pos = {.epoch = 0, .step = 5, .seed = 42};
    _exit(mxu_checkpoint_save(a, ckpt_dir, &pos, 2) == MXU_OK);
  }
  int status = -1;
  waitpid(child, &status, 0);
  CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0,
            "the save under a 4 KB file limit did not fail cleanly");
  CHECK_MSG(count_entries(ckpt_dir, "ckpt-") == 2, "%d checkpoints kept",
            count_entries(ckpt_dir, "ckpt-"));
  CHECK(exists(ckpt("ckpt-00000-00004.h5")) &&
        exists(ckpt("ckpt-00000-00003.h5")));
  mxu_model_free(a);
  memcpy(ckpt_dir, rotated, sizeof ckpt_dir);
}

/* A second run on one checkpoint directory is refused, naming the first;
 * the lock is a process's, so the second run is a child process. */
static int child_locks(const char *dir, const char *must_say) {
  pid_t child = fork();
  if (child == 0) {
    int handle = -1;
    mxu_status s = mxu_checkpoint_lock(dir, &handle);
    int refused = s != MXU_OK && strstr(mxu_errmsg(), must_say) != NULL;
    _exit(must_say[0] ? !refused : s != MXU_OK);
  }
  int status = -1;
  waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void one_run_a_directory(void) {
  char dir[4096], holder[64];
  snprintf(dir, sizeof dir, "%s/locked", temp_dir);
  int handle = -1;
  CHECK_OK(mxu_checkpoint_lock(dir, &handle));
  snprintf(holder, sizeof holder, "in use by another run (process %ld)",
           (long)getpid());
  CHECK_MSG(child_locks(dir, holder) == 0, "a second run was not refused");
  mxu_checkpoint_unlock(handle);
  CHECK_MSG(child_locks(dir, "") == 0, "the lock outlived its unlock");
}

/* Rewrites the file's mxu_step attribute in place through HDF5. */
static int set_step(const char *path, int64_t step) {
  hid_t file = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
  hid_t attr = file >= 0 ? H5Aopen(file, "mxu_step", H5P_DEFAULT) : -1;
  int ok = attr >= 0 && H5Awrite(attr, H5T_NATIVE_INT64, &step) >= 0;
  if (attr >= 0) H5Aclose(attr);
  return file >= 0 && H5Fclose(file) >= 0 && ok;
}

/* Writes n bytes into the file at offset (flip: XORs one byte with 0x40
 * instead). */
static int patch(const char *path, long offset, const char *bytes, size_t n,
                 int flip) {
  int fd = open(path, O_RDWR);
  unsigned char old = 0;
  int ok = fd >= 0 && (!flip || pread(fd, &old, 1, offset) == 1);
  old ^= 0x40;
  ok = ok && (flip ? pwrite(fd, &old, 1, offset) == 1
                   : pwrite(fd, bytes, n, offset) == (ssize_t)n);
  if (fd >= 0) close(fd);
  return ok;
}

/* Offset of the first occurrence of text in the file's first 64 KiB. */
static long find_bytes(const char *path, const char *text) {
  static unsigned char bytes[1 << 16];
  FILE *f = fopen(path, "rb");
  size_t n = f ? fread(bytes, 1, sizeof bytes, f) : 0, k = strlen(text);
  if (f) fclose(f);
  for (size_t i = 0; i + k <= n; i++)
    if (memcmp(bytes + i, text, k) == 0) return (long)i;
  return -1;
}

static void fallback(void) {
  mxu_model *b = cifar(mxu_adam(1e-3f), 5);
  mxu_train_position pos = {.epoch = 0, .step = 0, .seed = 0};
  int found = -1;
  char skipped[4096];
  CHECK_OK(mxu_checkpoint_restore(b, ckpt_dir, &pos, &found, skipped,
                                  sizeof skipped));
  CHECK(found == 1 && pos.epoch == 1 && pos.step == 1 && pos.seed == 42);
  CHECK(skipped[0] == 0 &&
        same_floats(snap[2], b->weights, b->trainable_count));
  /* newest truncated to half: the one before it */
  mxu_checkpoint_save(
      b, ckpt_dir, &(mxu_train_position){.epoch = 2, .step = 0, .seed = 42}, 5);
  struct stat st;
  CHECK(stat(ckpt("ckpt-00002-00000.h5"), &st) == 0);
  CHECK(truncate(ckpt("ckpt-00002-00000.h5"), st.st_size / 2) == 0);
  CHECK_OK(mxu_checkpoint_restore(b, ckpt_dir, &pos, &found, skipped,
                                  sizeof skipped));
  CHECK(found == 1 && pos.epoch == 1 && pos.step == 1);
  CHECK_MSG(has(skipped, "ckpt-00002-00000.h5: "), "skipped: %s", skipped);
  /* and corrupt in the middle, where the weights' raw bytes lie */
  unlink(ckpt("ckpt-00002-00000.h5"));
  mxu_checkpoint_save(
      b, ckpt_dir, &(mxu_train_position){.epoch = 2, .step = 0, .seed = 42}, 5);
  CHECK(stat(ckpt("ckpt-00002-00000.h5"), &st) == 0);
  int fd = open(ckpt("ckpt-00002-00000.h5"), O_WRONLY);
  static unsigned char junk[4096];
  memset(junk, 0x5a, sizeof junk);
  CHECK(fd >= 0 &&
        pwrite(fd, junk, sizeof junk, st.st_size / 2) == (ssize_t)sizeof junk);
  if (fd >= 0) close(fd);
  CHECK_OK(mxu_checkpoint_restore(b, ckpt_dir, &pos, &found, skipped,
                                  sizeof skipped));
  CHECK(found == 1 && pos.epoch == 1 && pos.step == 1);
  CHECK_MSG(has(skipped, "ckpt-00002-00000.h5: ") && has(skipped, "corrupt"),
            "skipped: %s", skipped);
  CHECK(same_floats(snap[2], b->weights, b->trainable_count));
  /* and a training position changed in place (as h5py would): the seal
   * covers it as it covers the weights */
  unlink(ckpt("ckpt-00002-00000.h5"));
  mxu_checkpoint_save(
      b, ckpt_dir, &(mxu_train_position){.epoch = 2, .step = 0, .seed = 42}, 5);
  CHECK(set_step(ckpt("ckpt-00002-00000.h5"), 7));
  CHECK_OK(mxu_checkpoint_restore(b, ckpt_dir, &pos, &found, skipped,
                                  sizeof skipped));
  CHECK(found == 1 && pos.epoch == 1 && pos.step == 1);
  CHECK_MSG(has(skipped, "ckpt-00002-00000.h5: ") && has(skipped, "corrupt"),
            "skipped: %s", skipped);
  for (int i = 0; i < 3; i++) free(snap[i]);
  mxu_model_free(b);
}

/* A file mxu did not write (here: one whose seal is cleared) is read
 * through in a child first: intact it loads, and a byte that made
 * libhdf5 1.10 crash in H5HG_read (the high bytes of the first global heap
 * object's size) is a refusal, not a crash. */
static void foreign_damage(int full_model) {
  mxu_model *a = cifar(mxu_adam(1e-3f), 3), *b = cifar(mxu_adam(1e-3f), 4);
  const char *path = temp_path("foreign.h5");
  CHECK_OK(full_model ? mxu_save_model(a, path, NULL)
                      : mxu_save_weights(a, path));
  CHECK(patch(path, 0, "\0\0\0\0\0\0\0\0", 8, 0));
  CHECK_OK(full_model ? mxu_restore_model(b, path, NULL)
                      : mxu_load_weights(b, path));
  CHECK(same_floats(a->weights, b->weights, a->trainable_count));
  long heap = find_bytes(path, "GCOL");
  CHECK(heap > 0);
  CHECK(patch(path, heap + 16 + 8 + 6, NULL, 0, 1));
  EXPECT_FAIL(full_model ? mxu_restore_model(b, path, NULL)
                         : mxu_load_weights(b, path),
              MXU_ERR_FORMAT, "crashes");
  mxu_model_free(a);
  mxu_model_free(b);
}

static void empty_and_broken(void) {
  mxu_model *b = cifar(mxu_adam(1e-3f), 5);
  int found = -1;
  char skipped[4096];
  CHECK_OK(mxu_checkpoint_restore(b, temp_path("nowhere"), NULL, &found,
                                  skipped, sizeof skipped));
  CHECK(found == 0);
  mkdir(temp_path("empty"), 0755);
  found = -1;
  CHECK_OK(
      mxu_checkpoint_restore(b, temp_path("empty"), NULL, &found, NULL, 0));
  CHECK(found == 0);
  FILE *f = fopen(temp_path("empty/ckpt-00000-00001.h5"), "w");
  if (f) fputs("not hdf5", f), fclose(f);
  float *before = copy_weights(b);
  EXPECT_FAIL(mxu_checkpoint_restore(b, temp_path("empty"), NULL, &found,
                                     skipped, sizeof skipped),
              MXU_ERR_FORMAT, "ckpt-00000-00001.h5");
  CHECK(found == 0 && has(skipped, "ckpt-00000-00001.h5"));
  CHECK(same_floats(before, b->weights, b->trainable_count));
  free(before);
  mxu_model_free(b);
}

/* The child saves under a file size limit; 0 when it failed as it should. */
static int save_too_large(const mxu_model *model) {
  struct rlimit limit;
  signal(SIGXFSZ, SIG_IGN); /* write() then fails with EFBIG */
  if (getrlimit(RLIMIT_FSIZE, &limit) != 0) return 2;
  limit.rlim_cur = 100000;
  if (setrlimit(RLIMIT_FSIZE, &limit) != 0) return 2;
  mxu_train_position pos = {.epoch = 9, .step = 0, .seed = 42};
  mxu_status s = mxu_checkpoint_save(model, ckpt_dir, &pos, 2);
  int ok = s == MXU_ERR_IO && has(mxu_errmsg(), "ckpt-00009-00000.h5") &&
           has(mxu_errmsg(), "too large");
  if (!ok)
    fprintf(stderr, "disk full: %s: %s\n", mxu_status_name(s), mxu_errmsg());
  return ok ? 0 : 1;
}

static void disk_full(void) {
  mxu_model *a = cifar(mxu_adam(1e-3f), 3);
  fflush(NULL);
  pid_t child = fork();
  if (child == 0) _exit(save_too_large(a));
  int status = -1;
  CHECK(child > 0 && waitpid(child, &status, 0) == child);
  CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0,
            "the child's save did not fail as expected (status %d)", status);
  CHECK(!exists(ckpt("ckpt-00009-00000.h5")));
  CHECK(count_entries(ckpt_dir, ".tmp-") == 0);
  mxu_train_position pos = {.epoch = 0, .step = 0, .seed = 0};
  int found = 0;
  CHECK_OK(mxu_checkpoint_restore(a, ckpt_dir, &pos, &found, NULL, 0));
  CHECK(found == 1 && pos.epoch == 1 && pos.step == 1);
  mxu_model_free(a);
}

static void remove_tree(const char *dir) {
  DIR *d = opendir(dir);
  for (struct dirent *e; d && (e = readdir(d));) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (unlink(path) != 0) remove_tree(path);
  }
  if (d) closedir(d);
  rmdir(dir);
}

int main(void) {
  if (!check_temp_make("test_model_file")) {
    perror("mkdtemp");
    return 1;
  }
  make_data();
  round_trip(mxu_adam(1e-3f), "adam.h5");
  round_trip(mxu_sgd(0.01f, 0.9f, 1), "sgd.h5");
  file_tree();
  h5py_reads();
  refusals();
  rotation();
  leftovers_pruned_first();
  one_run_a_directory();
  fallback();
  foreign_damage(0);
  foreign_damage(1);
  empty_and_broken();
  disk_full();
  mxu_dataset_free(data);
  remove_tree(temp_dir);
  return check_report("test_model_file");
}
