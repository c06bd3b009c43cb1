/* test_keras_file.c — Keras 3 .keras files: the nested golden
 * model as an archive (tests/golden/nested/model.keras, assembled by
 * tests/keras/make_keras_file.py from the config and weights Keras wrote)
 * gives the model its config.json describes and the weights its
 * model.weights.h5 holds; a damaged or incomplete archive is refused
 * naming the archive; mxu summary and evaluate take it as a model file;
 * mxu_save_model writes archives Keras 3's layout, which load back. */
#include "check.h"
#include "model/model.h"

static const char *const archive = "tests/golden/nested/model.keras";

static mxu_model *compiled(const char *path) {
  mxu_model *m = NULL;
  mxu_compile_config c = mxu_compile_defaults();
  CHECK_OK(mxu_model_load_json(path, &m, &c, NULL));
  c.batch_size = 2;
  if (m) CHECK_OK(mxu_compile(m, &c));
  return m;
}

static void reads_model_and_weights(void) {
  mxu_model *a = compiled(archive),
            *b = compiled("tests/golden/nested/model.k3.json");
  if (!a || !b) return;
  CHECK(mxu_model_layer_count(a) == mxu_model_layer_count(b));
  CHECK(mxu_model_param_count(a, 1) == 106 &&
        mxu_model_param_count(a, 0) == 6); /* trainable, then not */
  CHECK_OK(mxu_load_weights(a, archive));
  CHECK_OK(mxu_load_weights(b, "tests/golden/nested/initial.weights.h5"));
  int differing = check_weights_differing(a, b);
  CHECK_MSG(differing == 0, "%d weights differ", differing);
  mxu_model_free(a);
  mxu_model_free(b);
}

static void refusals(void) {
  size_t size = 0;
  char *bytes = check_slurp_size(archive, &size);
  mxu_model *m = NULL;
  /* One byte of config.json changed: its CRC says so. */
  const char *changed = temp_path("changed.keras");
  size_t at = 0;
  for (size_t i = 0; i + 11 < size && !at; i++)
    if (memcmp(bytes + i, "config.json", 11) == 0) at = i;
  CHECK(at > 0);
  bytes[at + 11 + 40] ^= 0x20;
  check_write_bytes(changed, bytes, size);
  EXPECT_FAIL(mxu_model_load_json(changed, &m, NULL, NULL), MXU_ERR_FORMAT,
              "CRC");
  CHECK(m == NULL);
  /* Cut short: no central directory. */
  const char *cut = temp_path("cut.keras");
  check_write_bytes(cut, bytes, size / 2);
  EXPECT_FAIL(mxu_model_load_json(cut, &m, NULL, NULL), MXU_ERR_FORMAT,
              "cut.keras");
  free(bytes);
  /* Weights asked of a model file without them. */
  mxu_model *a = compiled(archive);
  const char *model_only = temp_path("model_only.keras");
  char script[1024];
  snprintf(script, sizeof script,
           "import zipfile\n"
           "with zipfile.ZipFile('%s') as z, zipfile.ZipFile('%s', 'w') as o:\n"
           "    o.writestr('config.json', z.read('config.json'))\n",
           archive, model_only);
  char *args[] = {"/usr/bin/python3", "-I", "-c", script, NULL};
  char *out, *err;
  CHECK_MSG(check_run(args, &out, &err) == 0, "%s", err);
  free(out);
  free(err);
  if (a)
    EXPECT_FAIL(mxu_load_weights(a, model_only), MXU_ERR_FORMAT,
                "model.weights.h5");
  mxu_model_free(a);
}

/* A small trained model with optimizer state, on random data. */
static mxu_model *trained(mxu_optimizer_config optimizer, int epochs) {
  enum { N = 32, IN = 6 };
  float x[N * IN];
  int32_t y[N];
  mxu_rng rng = mxu_rng_make(3, 1, 0, 0, 0);
  mxu_rng_uniform(&rng, 0, x, N * IN);
  for (int i = 0; i < N; i++) y[i] = i % 3;
  int64_t dims[1] = {IN};
  mxu_dataset *data = NULL;
  CHECK_OK(mxu_dataset_from_arrays(x, y, N, mxu_shape_make(1, dims), 3, &data));
  mxu_model *m = mxu_sequential("small");
  CHECK_OK(mxu_add_input(m, NULL, mxu_shape_make(1, dims)));
  mxu_dense_config h = mxu_dense_defaults(5), o = mxu_dense_defaults(3);
  h.activation = MXU_RELU;
  o.activation = MXU_SOFTMAX;
  CHECK_OK(mxu_add_dense(m, &h));
  mxu_batchnorm_config bn = mxu_batchnorm_defaults();
  CHECK_OK(mxu_add_batch_normalization(m, &bn));
  CHECK_OK(mxu_add_dense(m, &o));
  mxu_compile_config c = mxu_compile_defaults();
  c.optimizer = optimizer;
  c.batch_size = 8;
  c.threads = 1;
  CHECK_OK(mxu_compile(m, &c));
  mxu_fit_config f = mxu_fit_defaults();
  f.epochs = epochs;
  f.verbose = 0;
  if (epochs) CHECK_OK(mxu_fit(m, data, &f, NULL));
  mxu_dataset_free(data);
  return m;
}

/* mxu_save_model to NAME.keras writes Keras 3's archive: the layers and
 * the optimizer's variables as Keras 3 keeps them (read back here through
 * h5py), which mxu loads and resumes bit for bit. */
static void writes_archives(void) {
  static const struct {
    const char *name;
    int adam;
    float momentum;
    int slots; /* optimizer variables a trainable weight */
  } cases[] = {{"adam", 1, 0, 2}, {"sgd", 0, 0.9f, 1}, {"plain_sgd", 0, 0, 0}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    mxu_optimizer_config o =
        cases[i].adam ? mxu_adam(2e-3f) : mxu_sgd(0.05f, cases[i].momentum, 0);
    mxu_model *a = trained(o, 2);
    char name[64];
    snprintf(name, sizeof name, "%s.keras", cases[i].name);
    const char *path = temp_path(name);
    mxu_train_position at = {.epoch = 2, .step = 0, .seed = 9};
    CHECK_OK(mxu_save_model(a, path, &at));
    /* The archive as Keras 3 reads it. */
    char script[1024];
    snprintf(script, sizeof script,
             "import zipfile, io, json, h5py\n"
             "z = zipfile.ZipFile('%s')\n"
             "assert z.namelist() == ['metadata.json', 'config.json', "
             "'model.weights.h5'], z.namelist()\n"
             "assert all(i.compress_type == 0 for i in z.infolist())\n"
             "json.loads(z.read('metadata.json'))['keras_version']\n"
             "c = json.loads(z.read('config.json'))\n"
             "assert c['compile_config']['optimizer']['class_name'] in "
             "('Adam', 'SGD')\n"
             "f = h5py.File(io.BytesIO(z.read('model.weights.h5')))\n"
             "v = f['optimizer/vars']\n"
             "print(len(v), int(v['0'][()]), '%%g' %% float(v['1'][()]), "
             "v.attrs['name'], sorted(f['layers']))\n",
             path);
    char *args[] = {"/usr/bin/python3", "-I", "-c", script, NULL};
    char *out, *err;
    int code = check_run(args, &out, &err);
    /* 3 trainable weights of each dense, gamma and beta: 6 in all. */
    char want[160];
    snprintf(want, sizeof want, "%d %lld %g %s", 2 + 6 * cases[i].slots,
             (long long)a->iterations, (double)o.learning_rate,
             cases[i].adam ? "adam" : "sgd");
    CHECK_MSG(code == 0 && out && has(out, want) &&
                  has(out, "['batch_normalization', 'dense', 'dense_1']"),
              "%s: exit %d: %s %s (want %s)", name, code, out, err, want);
    free(out);
    free(err);
    /* Loaded whole, and restored into a fresh model: the same state, and
     * training on from it gives the same weights. */
    mxu_model *b = NULL;
    mxu_train_position back = {0};
    CHECK_OK(mxu_load_model(path, MXU_BACKEND_CPU, &b, &back));
    CHECK(back.epoch == 2 && back.step == 0 && back.seed == 9);
    if (b) {
      CHECK(check_weights_differing(a, b) == 0 &&
            b->iterations == a->iterations);
      CHECK(memcmp(a->slot_m, b->slot_m,
                   (size_t)a->trainable_count * sizeof(float)) == 0);
    }
    mxu_model *c = trained(o, 0);
    CHECK_OK(mxu_restore_model(c, path, &back));
    CHECK(check_weights_differing(a, c) == 0 && c->iterations == a->iterations);
    mxu_model_free(b);
    mxu_model_free(c);
    mxu_model_free(a);
  }
  /* An archive cut short is refused naming it; the optimizer of another
   * kind does not fit. */
  mxu_model *a = trained(mxu_adam(1e-3f), 1);
  const char *path = temp_path("adam.keras"), *cut = temp_path("cut2.keras");
  size_t size = 0;
  char *bytes = check_slurp_size(path, &size);
  check_write_bytes(cut, bytes, size - 100);
  free(bytes);
  EXPECT_FAIL(mxu_restore_model(a, cut, NULL), MXU_ERR_FORMAT, "cut2.keras");
  mxu_model *sgd = trained(mxu_sgd(0.01f, 0.9f, 0), 0);
  EXPECT_FAIL(mxu_restore_model(sgd, path, NULL), MXU_ERR_ARG,
              "adam.keras: the file's optimizer state (14 variables");
  mxu_model_free(sgd);
  mxu_model_free(a);
}

static int nonzero(const float *v, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    if (v[i] != 0.0f) return 1;
  return 0;
}

/* Whole models Keras wrote after 5 Adam steps (make_resume_files.py), in
 * each optimizer layout: Keras 3's .keras and .h5 of one model restore
 * the same state; tf.keras 2's .h5 its own. */
static void restores_keras_state(void) {
  static const char *const files[] = {"tests/golden/resume/k3.keras",
                                      "tests/golden/resume/k3.h5",
                                      "tests/golden/resume/tf2.h5"};
  mxu_model *m[3] = {NULL, NULL, NULL};
  for (int i = 0; i < 3; i++) {
    mxu_train_position at = {.seed = 4};
    CHECK_OK(mxu_load_model(files[i], MXU_BACKEND_CPU, &m[i], &at));
    if (!m[i]) return;
    CHECK_MSG(m[i]->iterations == 5 && at.epoch == 0 && at.step == 0 &&
                  at.seed == 4,
              "%s: %lld iterations", files[i], (long long)m[i]->iterations);
    CHECK(m[i]->compile.optimizer.kind == MXU_ADAM &&
          m[i]->compile.optimizer.learning_rate == 0.01f);
    CHECK(nonzero(m[i]->slot_m, m[i]->trainable_count) &&
          nonzero(m[i]->slot_v, m[i]->trainable_count));
  }
  size_t bytes = (size_t)m[0]->trainable_count * sizeof(float);
  CHECK(check_weights_differing(m[0], m[1]) == 0);
  CHECK(memcmp(m[0]->slot_m, m[1]->slot_m, bytes) == 0 &&
        memcmp(m[0]->slot_v, m[1]->slot_v, bytes) == 0);
  for (int i = 0; i < 3; i++) mxu_model_free(m[i]);
}

/* A whole model's file stands for the model JSON and its weights: train
 * saves one, evaluate takes it alone and scores what train reported, and
 * train goes on from it (its weights and optimizer state). */
static const char *shown(const char *text) { return text ? text : ""; }

static void whole_model_commands(void) {
  for (int keras = 0; keras < 2; keras++) {
    const char *saved = temp_path(keras ? "fashion.keras" : "fashion.h5");
#define SHORT_RUN                                                              \
  "--data", "fashion-mnist", "--epochs", "1", "--steps-per-epoch", "5",        \
      "--batch-size", "100", "--rescale", "1/255"
    result r =
        check_run_bin(MXU_BIN, "train", "models/fashion_mnist.json", SHORT_RUN,
                      "--verbose", "0", "--save-model", saved, NULL);
    CHECK_MSG(r.code == 0 && r.out && has(r.out, "test loss"), "exit %d: %s %s",
              r.code, shown(r.out), shown(r.err));
    const char *line = r.out ? strstr(r.out, "test loss") : NULL;
    char evaluate_line[64] = "";
    if (line) snprintf(evaluate_line, sizeof evaluate_line, "%.40s", line);
    result_free(&r);
    r = check_run_bin(MXU_BIN, "evaluate", saved, "--data", "fashion-mnist",
                      "--rescale", "1/255", NULL);
    CHECK_MSG(r.code == 0 && r.out && evaluate_line[0] &&
                  has(r.out, evaluate_line),
              "exit %d: %s %s (want %s)", r.code, shown(r.out), shown(r.err),
              evaluate_line);
    result_free(&r);
    r = check_run_bin(MXU_BIN, "train", saved, SHORT_RUN, "--verbose", "1",
                      NULL);
#undef SHORT_RUN
    CHECK_MSG(r.code == 0 && r.out &&
                  has(r.out, "weights and optimizer state from"),
              "exit %d: %s %s", r.code, shown(r.out), shown(r.err));
    result_free(&r);
  }
}

static void commands(void) {
  char *summary[] = {MXU_BIN, "summary", (char *)archive, NULL};
  char *out, *err;
  int code = check_run(summary, &out, &err);
  CHECK_MSG(code == 0 && out && has(out, "Total params: 112"), "%s %s", out,
            err);
  free(out);
  free(err);
}

int main(void) {
  CHECK(check_temp_make("keras_file"));
  reads_model_and_weights();
  refusals();
  commands();
  writes_archives();
  restores_keras_state();
  whole_model_commands();
  check_remove_tree(check_temp_dir);
  return check_report("test_keras_file");
}
