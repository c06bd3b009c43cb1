/* test_mpi.c — replicas across processes: `mpirun -np 2 mxu train
 * --replicas 4` gives the same weights, bit for bit, as one process with 4
 * replicas, on a model with BatchNormalization and Dropout; only rank 0
 * prints and writes; a replica count the processes cannot share is a
 * clear error. MXU_BIN and MXU_MPIEXEC come from CMake, which builds this
 * test only when it finds MPI. */
#include "check.h"

/* Conv2D, BatchNormalization, MaxPooling2D, Dropout, Dense softmax. */
static void write_model(const char *path) {
  mxu_model *model = mxu_sequential("mpi");
  int64_t dims[3] = {28, 28, 1};
  CHECK_OK(mxu_add_input(model, "input", mxu_shape_make(3, dims)));
  mxu_conv2d_config conv = mxu_conv2d_defaults(8, 3, 3);
  conv.activation = MXU_RELU;
  CHECK_OK(mxu_add_conv2d(model, &conv));
  mxu_batchnorm_config bn = mxu_batchnorm_defaults();
  CHECK_OK(mxu_add_batch_normalization(model, &bn));
  mxu_pool2d_config pool = mxu_pool2d_defaults(2, 2);
  CHECK_OK(mxu_add_max_pooling2d(model, &pool));
  CHECK_OK(mxu_add_flatten(model, NULL));
  CHECK_OK(mxu_add_dropout(model, NULL, 0.25f));
  mxu_dense_config dense = mxu_dense_defaults(10);
  dense.activation = MXU_SOFTMAX;
  CHECK_OK(mxu_add_dense(model, &dense));
  CHECK_OK(mxu_model_save_json(model, path, 0));
  mxu_model_free(model);
}

/* mxu train ... with the launcher's arguments first (none for one
 * process); returns the exit code. */
static int train(const char *np, const char *replicas, const char *weights,
                 char **out, char **err) {
  static char data[512];
  snprintf(data, sizeof data, "%s/mnist", check_shared_data());
  char *args[40];
  int n = 0;
  if (np) {
    args[n++] = (char *)MXU_MPIEXEC;
    args[n++] = "--oversubscribe";
    args[n++] = "--allow-run-as-root";
    args[n++] = "-np";
    args[n++] = (char *)np;
  }
  char *rest[] = {(char *)MXU_BIN,
                  "train",
                  (char *)temp_path("model.json"),
                  "--data",
                  data,
                  "--epochs",
                  "2",
                  "--batch-size",
                  "32",
                  "--steps-per-epoch",
                  "4",
                  "--replicas",
                  (char *)replicas,
                  "--threads",
                  "1",
                  "--rescale",
                  "0.00392156862745098",
                  "--seed",
                  "5",
                  "--save-weights",
                  (char *)weights,
                  NULL};
  for (int i = 0; rest[i]; i++) args[n++] = rest[i];
  args[n] = NULL;
  return check_run(args, out, err);
}

static int count(const char *text, const char *needle) {
  int k = 0;
  for (const char *p = text; p && (p = strstr(p, needle)); p++) k++;
  return k;
}

static void compare(const char *a_path, const char *b_path) {
  mxu_model *a = NULL, *b = NULL;
  CHECK_OK(mxu_model_load_json(temp_path("model.json"), &a, NULL, NULL));
  CHECK_OK(mxu_model_load_json(temp_path("model.json"), &b, NULL, NULL));
  if (!a || !b) return;
  mxu_compile_config c = mxu_compile_defaults();
  CHECK_OK(mxu_compile(a, &c));
  CHECK_OK(mxu_compile(b, &c));
  CHECK_OK(mxu_load_weights(a, a_path));
  CHECK_OK(mxu_load_weights(b, b_path));
  int weights = 0;
  for (int layer = 0; layer < mxu_model_layer_count(a); layer++)
    for (int k = 0; k < mxu_layer_weight_count(a, layer); k++) {
      mxu_tensor ta, tb;
      CHECK_OK(mxu_layer_weight(a, layer, k, &ta, NULL));
      CHECK_OK(mxu_layer_weight(b, layer, k, &tb, NULL));
      size_t bytes = (size_t)mxu_shape_count(&ta.shape) * sizeof(float);
      CHECK_MSG(memcmp(ta.data, tb.data, bytes) == 0,
                "layer %d weight %d differs between 1 and 2 processes", layer,
                k);
      weights++;
    }
  CHECK(weights == 8); /* conv 2, batch norm 4 (moving stats too), dense 2 */
  mxu_model_free(a);
  mxu_model_free(b);
}

int main(void) {
  CHECK(check_temp_make("mpi"));
  /* Under the sanitizers: OpenMPI's own start-up allocations (in plugins
   * it unloads, so no suppression can name them) are never freed. Leak
   * checks stay on for the one-process run below, which does not start
   * MPI; the MPI runs keep every other check. */
  const char *asan = getenv("ASAN_OPTIONS");
  char options[512];
  snprintf(options, sizeof options, "%s%sdetect_leaks=0", asan ? asan : "",
           asan && *asan ? ":" : "");
  write_model(temp_path("model.json"));
  char *out, *err;
  int code = train(NULL, "4", temp_path("one.h5"), &out, &err);
  CHECK_MSG(code == 0, "one process: exit %d: %s", code, err);
  free(out);
  free(err);
  setenv("ASAN_OPTIONS", options, 1);
  code = train("2", "4", temp_path("two.h5"), &out, &err);
  CHECK_MSG(code == 0, "two processes: exit %d: %s", code, err);
  /* Rank 0 alone prints: one final line, one epoch summary each. */
  CHECK_MSG(count(out, "test loss") == 1, "%s", out);
  CHECK_MSG(count(out, "Epoch 2/2") == 1, "%s", out);
  free(out);
  free(err);
  compare(temp_path("one.h5"), temp_path("two.h5"));
  code = train("3", "8", temp_path("three.h5"), &out, &err);
  CHECK_MSG(code == 1, "8 replicas on 3 processes: exit %d", code);
  CHECK_MSG(has(err, "8 replicas cannot be spread over 3 processes"), "%s",
            err);
  free(out);
  free(err);
  check_remove_tree(check_temp_dir);
  return check_report("test_mpi");
}
