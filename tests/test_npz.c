/* test_npz.c — NumPy data: arrays NumPy itself wrote (tests/npz, made by
 * make_npz.py) in every dtype mxu reads, one-hot labels, header versions
 * 2 and 3, .npz archives plain and compressed; the refusals (Fortran
 * order, big-endian, strings, float labels, damaged archives); and the
 * mxu command training, evaluating and predicting from an .npz alone. */
#include "check.h"
#include "data/data.h"

#include <math.h>
#include <zip.h>

/* ---- members of dtypes.npz as .npy files ------------------------------- */

/* Copies member name of the archive to a file of its own. */
static const char *extract(const char *archive, const char *name) {
  static char path[600];
  snprintf(path, sizeof path, "%s/%s", check_temp_dir, name);
  int error = 0;
  zip_t *zip = zip_open(archive, ZIP_RDONLY, &error);
  zip_file_t *member = zip ? zip_fopen(zip, name, 0) : NULL;
  FILE *out = fopen(path, "wb");
  char buffer[4096];
  zip_int64_t n = 0;
  while (member && out && (n = zip_fread(member, buffer, sizeof buffer)) > 0)
    fwrite(buffer, 1, (size_t)n, out);
  CHECK_MSG(member && out && n == 0, "cannot extract %s from %s", name,
            archive);
  if (out) fclose(out);
  if (member) zip_fclose(member);
  if (zip) zip_discard(zip);
  return path;
}

/* make_npz.py's values: arange(-3, 33) / 2, rounded half to even for the
 * integer dtypes, their magnitude for the unsigned ones, != 0 for bool. */
static float expected(const char *dtype, int i) {
  double v = (i - 3) / 2.0;
  if (dtype[0] == 'f') return (float)v;
  double r = nearbyint(v);
  if (dtype[0] == 'i') return (float)r;
  return dtype[0] == 'b' ? (float)(fabs(r) != 0) : (float)fabs(r);
}

static void every_dtype(void) {
  static const char *const dtypes[] = {"u1", "i1", "u2", "i2", "i4", "u4",
                                       "i8", "u8", "f2", "f4", "f8", "b1"};
  static const int32_t labels[6] = {0, 2, 1, 2, 0, 1};
  for (size_t k = 0; k < sizeof dtypes / sizeof *dtypes; k++) {
    char member[32];
    snprintf(member, sizeof member, "x_%s.npy", dtypes[k]);
    mxu_dataset *data = NULL;
    CHECK_OK(mxu_load_npy(extract("tests/npz/dtypes.npz", member),
                          "tests/npz/labels6.npy", &data));
    if (!data) continue;
    mxu_shape shape = mxu_dataset_shape(data);
    CHECK(shape.rank == 2 && shape.dims[0] == 2 && shape.dims[1] == 3);
    CHECK(mxu_dataset_count(data) == 6 && mxu_dataset_num_classes(data) == 3);
    int wrong = 0;
    for (int i = 0; i < 36; i++)
      wrong += mxu_dataset_x(data)[i] != expected(dtypes[k], i);
    for (int i = 0; i < 6; i++)
      wrong += mxu_dataset_labels(data)[i] != labels[i];
    CHECK_MSG(wrong == 0, "%s: %d values differ", dtypes[k], wrong);
    mxu_dataset_free(data);
  }
  /* One-hot rows are the same labels. */
  mxu_dataset *data = NULL;
  char samples[600];
  snprintf(samples, sizeof samples, "%s",
           extract("tests/npz/dtypes.npz", "x_f4.npy"));
  CHECK_OK(mxu_load_npy(
      samples, extract("tests/npz/dtypes.npz", "y_onehot.npy"), &data));
  for (int i = 0; data && i < 6; i++)
    CHECK(mxu_dataset_labels(data)[i] == labels[i]);
  mxu_dataset_free(data);
}

/* ---- archives and headers ---------------------------------------------- */

static void archives(void) {
  /* x and y: a train split only. */
  mxu_dataset *data = NULL;
  CHECK_OK(mxu_load_npz("tests/npz/dtypes.npz", MXU_TRAIN, &data));
  CHECK(data && mxu_dataset_count(data) == 6 &&
        mxu_dataset_x(data)[35] == 16.0f && mxu_dataset_labels(data)[1] == 2);
  mxu_dataset_free(data);
  EXPECT_FAIL(mxu_load_npz("tests/npz/dtypes.npz", MXU_TEST, &data),
              MXU_ERR_FORMAT, "no test split");
  /* keras.datasets' four arrays, compressed. */
  CHECK_OK(mxu_load_npz("tests/npz/mnist_small.npz", MXU_TEST, &data));
  if (data) {
    CHECK(mxu_dataset_count(data) == 500 &&
          mxu_dataset_num_classes(data) == 10);
    CHECK(mxu_dataset_shape(data).rank == 2 &&
          mxu_dataset_shape(data).dims[0] == 28);
    CHECK(mxu_dataset_labels(data)[0] == 7 && mxu_dataset_labels(data)[1] == 2);
  }
  mxu_dataset_free(data);
  for (int major = 2; major <= 3; major++) {
    char path[64];
    snprintf(path, sizeof path, "tests/npz/v%d.npy", major);
    CHECK_OK(mxu_load_npy(path, "tests/npz/labels2.npy", &data));
    CHECK(data && mxu_dataset_count(data) == 2 &&
          mxu_dataset_x(data)[11] == 11.0f && mxu_dataset_labels(data)[0] == 1);
    mxu_dataset_free(data);
  }
}

static void refusals(void) {
  mxu_dataset *data = NULL;
  const char *labels = "tests/npz/labels2.npy";
  EXPECT_FAIL(mxu_load_npy("tests/npz/fortran.npy", labels, &data),
              MXU_ERR_FORMAT, "Fortran order");
  EXPECT_FAIL(mxu_load_npy("tests/npz/big.npy", labels, &data), MXU_ERR_FORMAT,
              "big-endian");
  EXPECT_FAIL(mxu_load_npy("tests/npz/text.npy", labels, &data), MXU_ERR_FORMAT,
              "dtype '<U1'");
  /* Labels that are not class indices are float targets (regression);
   * non-finite ones are refused. */
  CHECK_OK(mxu_load_npy("tests/npz/v2.npy", "tests/npz/floaty.npy", &data));
  CHECK(data && mxu_dataset_num_classes(data) == 0 && data->target_size == 1 &&
        data->targets[0] == 0.5f && data->targets[1] == 1.0f);
  mxu_dataset_free(data);
  data = NULL;
  int64_t two = 2;
  const float nan_labels[2] = {1.0f, NAN};
  CHECK_OK(mxu_save_npy(temp_path("nan.npy"), &two, 1, nan_labels));
  EXPECT_FAIL(mxu_load_npy("tests/npz/v2.npy", temp_path("nan.npy"), &data),
              MXU_ERR_FORMAT, "label value 1 is nan");
  EXPECT_FAIL(mxu_load_npy("tests/npz/v2.npy", "tests/npz/labels6.npy", &data),
              MXU_ERR_FORMAT, "for 2 samples");
  /* Found by fuzzing: a version 2 header cut inside its length field. */
  check_write_bytes(temp_path("cut2.npy"), "\x93NUMPY\x02\x00\x27\x00\x63", 11);
  EXPECT_FAIL(mxu_load_npy(temp_path("cut2.npy"), labels, &data),
              MXU_ERR_FORMAT, "cut short");
  EXPECT_FAIL(mxu_load_npz(temp_path("missing.npz"), MXU_TRAIN, &data),
              MXU_ERR_IO, "missing.npz");
  EXPECT_FAIL(mxu_load_npz("tests/npz/v2.npy", MXU_TRAIN, &data),
              MXU_ERR_FORMAT, "not a readable .npz");
  CHECK(data == NULL);
  /* The archive cut short, and one byte of a member's data changed. */
  size_t size = 0;
  char *bytes = check_slurp_size("tests/npz/dtypes.npz", &size);
  const char *cut = temp_path("cut.npz"), *changed = temp_path("changed.npz");
  check_write_bytes(cut, bytes, size / 2);
  EXPECT_FAIL(mxu_load_npz(cut, MXU_TRAIN, &data), MXU_ERR_FORMAT, "cut.npz");
  /* A value of member x.npy: past its local header (30 bytes, the name
   * and the extra field, whose lengths it gives at 26 and 28) and its
   * 128-byte .npy header. */
  size_t member = 0;
  for (size_t i = 0; i + 35 < size && !member; i++)
    if (memcmp(bytes + i, "PK\3\4", 4) == 0 &&
        memcmp(bytes + i + 30, "x.npy", 5) == 0)
      member = i;
  CHECK(member > 0);
  size_t extra = (unsigned char)bytes[member + 28] |
                 (size_t)(unsigned char)bytes[member + 29] << 8;
  bytes[member + 30 + 5 + extra + 130] ^= 0x01;
  check_write_bytes(changed, bytes, size);
  EXPECT_FAIL(mxu_load_npz(changed, MXU_TRAIN, &data), MXU_ERR_FORMAT, "CRC");
  free(bytes);
}

/* ---- the command ------------------------------------------------------- */

static void command(void) {
  const char *weights = temp_path("npz.weights.h5");
  char *train[] = {MXU_BIN,
                   "train",
                   "models/fashion_mnist.json",
                   "--data",
                   "tests/npz/mnist_small.npz",
                   "--epochs",
                   "3",
                   "--batch-size",
                   "100",
                   "--rescale",
                   "1/255",
                   "--save-weights",
                   (char *)weights,
                   "--verbose",
                   "0",
                   NULL};
  char *out, *err;
  int code = check_run(train, &out, &err);
  double accuracy = 0;
  const char *at = out ? strstr(out, "test accuracy ") : NULL;
  CHECK_MSG(code == 0 && at && sscanf(at, "test accuracy %lf", &accuracy) == 1,
            "exit %d: %s %s", code, out, err);
  printf("mnist_small.npz, 3 epochs: test accuracy %.4f\n", accuracy);
  CHECK(accuracy >= 0.8);
  free(out);
  free(err);
  char *evaluate[] = {MXU_BIN,
                      "evaluate",
                      "models/fashion_mnist.json",
                      "--data",
                      "tests/npz/mnist_small.npz",
                      "--weights",
                      (char *)weights,
                      "--rescale",
                      "1/255",
                      NULL};
  code = check_run(evaluate, &out, &err);
  CHECK_MSG(code == 0 && out && strstr(out, "test accuracy"), "%s %s", out,
            err);
  free(out);
  free(err);
  char *predict[] = {MXU_BIN,
                     "predict",
                     "models/fashion_mnist.json",
                     "--data",
                     "tests/npz/mnist_small.npz",
                     "--weights",
                     (char *)weights,
                     "--rescale",
                     "1/255",
                     "--index",
                     "0",
                     "--top",
                     "1",
                     NULL};
  code = check_run(predict, &out, &err);
  CHECK_MSG(code == 0 && out && strstr(out, "true class 7") &&
                strstr(out, "1. 7 "),
            "%s %s", out, err);
  free(out);
  free(err);
}

/* predict --input of an .npz: x_test by default, another array by --key;
 * evaluate of an archive of x and y alone scores all of it. */
static void arrays_command(void) {
  const char *weights = temp_path("npz.weights.h5"),
             *out_npy = temp_path("p.npy");
  char *predict[] = {MXU_BIN,
                     "predict",
                     "models/fashion_mnist.json",
                     "--weights",
                     (char *)weights,
                     "--rescale",
                     "1/255",
                     "--input",
                     "tests/npz/mnist_small.npz",
                     "--output",
                     (char *)out_npy,
                     NULL,
                     NULL,
                     NULL};
  for (int keyed = 0; keyed < 2; keyed++) {
    if (keyed) {
      predict[11] = "--key";
      predict[12] = "x_train";
    }
    char *out, *err;
    int code = check_run(predict, &out, &err);
    CHECK_MSG(code == 0, "exit %d: %s %s", code, out, err);
    free(out);
    free(err);
    mxu_dataset *p = NULL, *want = NULL;
    CHECK_OK(mxu_load_npy(out_npy, NULL, &p));
    CHECK_OK(mxu_load_npz("tests/npz/mnist_small.npz",
                          keyed ? MXU_TRAIN : MXU_TEST, &want));
    int64_t n = mxu_dataset_count(want), right = 0;
    CHECK(p && mxu_dataset_count(p) == n && mxu_dataset_shape(p).dims[0] == 10);
    for (int64_t i = 0; p && mxu_dataset_count(p) == n && i < n; i++) {
      const float *row = mxu_dataset_x(p) + i * 10;
      int best = 0;
      for (int k = 1; k < 10; k++) best = row[k] > row[best] ? k : best;
      right += best == mxu_dataset_labels(want)[i];
    }
    CHECK_MSG(right >= 0.8 * (double)n, "%lld of %lld right", (long long)right,
              (long long)n);
    mxu_dataset_free(p);
    mxu_dataset_free(want);
  }
  /* dtypes.npz holds x and y only: 6 samples of (2, 3), 3 classes. */
  mxu_model *model = mxu_sequential("small");
  int64_t dims[2] = {2, 3};
  CHECK_OK(mxu_add_input(model, NULL, mxu_shape_make(2, dims)));
  CHECK_OK(mxu_add_flatten(model, NULL));
  mxu_dense_config d = mxu_dense_defaults(3);
  d.activation = MXU_SOFTMAX;
  CHECK_OK(mxu_add_dense(model, &d));
  mxu_compile_config c = mxu_compile_defaults();
  c.batch_size = 6;
  CHECK_OK(mxu_compile(model, &c));
  const char *json = temp_path("small.json"), *w = temp_path("small.h5");
  CHECK_OK(mxu_model_save_json(model, json, 0));
  CHECK_OK(mxu_save_weights(model, w));
  mxu_dataset *xy = NULL;
  CHECK_OK(mxu_load_npz("tests/npz/dtypes.npz", MXU_TRAIN, &xy));
  double loss = NAN, accuracy = NAN;
  CHECK_OK(mxu_evaluate(model, xy, 0, &loss, &accuracy));
  mxu_dataset_free(xy);
  mxu_model_free(model);
  char *evaluate[] = {
      MXU_BIN,   "evaluate", (char *)json,           "--weights",
      (char *)w, "--data",   "tests/npz/dtypes.npz", NULL};
  char *out, *err;
  int code = check_run(evaluate, &out, &err);
  char want[96];
  snprintf(want, sizeof want, "test loss %.4f - test accuracy %.4f", loss,
           accuracy);
  CHECK_MSG(code == 0 && out && strstr(out, want), "exit %d: %s %s (want %s)",
            code, out, err, want);
  free(out);
  free(err);
}

/* Runs mxu train on the fashion model for one epoch with the extra
 * arguments; the stdout, or NULL when it did not exit with `want`. */
static char *train_with(int want, const char *const *extra, int n) {
  char *args[32] = {MXU_BIN,     "train",     "models/fashion_mnist.json",
                    "--epochs",  "1",         "--batch-size",
                    "100",       "--rescale", "1/255",
                    "--verbose", "2"};
  int count = 11;
  for (int i = 0; i < n && count < 31; i++) args[count++] = (char *)extra[i];
  args[count] = NULL;
  char *out, *err;
  int code = check_run(args, &out, &err);
  CHECK_MSG(code == want, "exit %d, not %d: %s %s", code, want, out, err);
  if (code != want) {
    free(out);
    out = NULL;
  }
  if (want != 0 && out) {
    free(out);
    out = err;
  } else {
    free(err);
  }
  return out;
}

/* --validation-split holds out the last fraction, as Keras does: the
 * same numbers from an .npz and from its arrays as .npy files. */
static void validation_split(void) {
  const char *npz[] = {"--data", "tests/npz/mnist_small.npz",
                       "--validation-split", "0.25"};
  char *a = train_with(0, npz, 4);
  CHECK_MSG(a && has(a, "Train on 1500 samples, validate on 500 samples"), "%s",
            a ? a : "");
  /* 0.2 as Keras' double: 1600 (the float 0.2f would leave 1599). */
  const char *fifth[] = {"--data", "tests/npz/mnist_small.npz",
                         "--validation-split", "0.2"};
  char *f = train_with(0, fifth, 4);
  CHECK_MSG(f && has(f, "Train on 1600 samples, validate on 400 samples"), "%s",
            f ? f : "");
  free(f);
  char x[600], y[600];
  snprintf(x, sizeof x, "%s",
           extract("tests/npz/mnist_small.npz", "x_train.npy"));
  snprintf(y, sizeof y, "%s",
           extract("tests/npz/mnist_small.npz", "y_train.npy"));
  const char *npy[] = {"--data", x, "--labels", y, "--validation-split",
                       "0.25"};
  char *b = train_with(0, npy, 6);
  const char *ta = a ? strstr(a, "test loss") : NULL;
  const char *tb = b ? strstr(b, "test loss") : NULL;
  CHECK_MSG(ta && tb && strcmp(ta, tb) == 0, "npz: %s\nnpy: %s", ta, tb);
  free(a);
  free(b);
  char *e = train_with(2, npy, 4); /* --labels without a split */
  CHECK_MSG(e && has(e, "--validation-split F"), "%s", e ? e : "");
  free(e);
  const char *whole[] = {"--data", "tests/npz/mnist_small.npz",
                         "--validation-split", "0.9999"};
  e = train_with(2, whole, 4);
  CHECK_MSG(e && has(e, "leaves none to train"), "%s", e ? e : "");
  free(e);
}

/* mxu_save_npy's file, read back by mxu and by NumPy itself. */
static void writes_npy(void) {
  float values[12];
  for (int i = 0; i < 12; i++) values[i] = i - 0.5f;
  const char *path = temp_path("written.npy");
  int64_t shape[2] = {3, 4};
  CHECK_OK(mxu_save_npy(path, shape, 2, values));
  mxu_dataset *data = NULL;
  CHECK_OK(mxu_load_npy(path, NULL, &data));
  CHECK(data && mxu_dataset_count(data) == 3 &&
        mxu_dataset_shape(data).dims[0] == 4 &&
        memcmp(mxu_dataset_x(data), values, sizeof values) == 0);
  mxu_dataset_free(data);
  char script[800];
  snprintf(script, sizeof script,
           "import numpy; a = numpy.load('%s'); "
           "assert a.shape == (3, 4) and a.dtype.str == '<f4', a; "
           "assert (a == numpy.arange(12).reshape(3, 4) - 0.5).all(), a",
           path);
  char *args[] = {"/usr/bin/python3", "-I", "-c", script, NULL};
  char *out, *err;
  CHECK_MSG(check_run(args, &out, &err) == 0, "numpy: %s", err);
  free(out);
  free(err);
}

/* Whether this process maps the file at path. */
static int mapped(const char *path) {
  FILE *maps = fopen("/proc/self/maps", "r"); /* no size to seek to */
  char line[1024];
  int found = 0;
  while (maps && !found && fgets(line, sizeof line, maps))
    found = strstr(line, path) != NULL;
  if (maps) fclose(maps);
  return found;
}

/* float32 samples are mapped, not read; rescaling writes a private copy
 * of what it changes, never the file. */
static void maps_float32(void) {
  char path[600];
  snprintf(path, sizeof path, "%s",
           extract("tests/npz/dtypes.npz", "x_f4.npy"));
  mxu_dataset *data = NULL, *again = NULL;
  CHECK_OK(mxu_load_npy(path, "tests/npz/labels6.npy", &data));
  CHECK_MSG(data && mapped(path), "%s is not mapped", path);
  if (data) mxu_dataset_rescale(data, 2.0f);
  CHECK(data && mxu_dataset_x(data)[35] == 32.0f);
  CHECK_OK(mxu_load_npy(path, "tests/npz/labels6.npy", &again));
  CHECK(again && mxu_dataset_x(again)[35] == 16.0f);
  mxu_dataset_free(data);
  mxu_dataset_free(again);
  CHECK_MSG(!mapped(path), "%s is still mapped after the free", path);
  /* Other dtypes are converted into memory of their own. */
  CHECK_OK(mxu_load_npy(extract("tests/npz/dtypes.npz", "x_f8.npy"),
                        "tests/npz/labels6.npy", &data));
  CHECK(data && !mapped("x_f8.npy"));
  mxu_dataset_free(data);
}

/* predict --input x.npy --output probs.npy: Keras' predict, as an array. */
static void predict_arrays(void) {
  const char *weights = temp_path("npz.weights.h5"); /* from command() */
  char x[600];
  snprintf(x, sizeof x, "%s",
           extract("tests/npz/mnist_small.npz", "x_test.npy"));
  const char *probs = temp_path("probs.npy");
  char *predict[] = {MXU_BIN,     "predict",       "models/fashion_mnist.json",
                     "--weights", (char *)weights, "--input",
                     x,           "--rescale",     "1/255",
                     "--output",  (char *)probs,   NULL};
  char *out, *err;
  CHECK_MSG(check_run(predict, &out, &err) == 0, "%s %s", out, err);
  free(out);
  free(err);
  mxu_dataset *p = NULL, *truth = NULL;
  CHECK_OK(mxu_load_npy(probs, NULL, &p));
  CHECK_OK(mxu_load_npz("tests/npz/mnist_small.npz", MXU_TEST, &truth));
  if (!p || !truth) return;
  CHECK(mxu_dataset_count(p) == 500 && mxu_dataset_shape(p).dims[0] == 10);
  int right = 0, sums = 0;
  for (int i = 0; i < 500; i++) {
    const float *row = mxu_dataset_x(p) + i * 10;
    int best = 0;
    double sum = 0;
    for (int c = 0; c < 10; c++) {
      sum += row[c];
      if (row[c] > row[best]) best = c;
    }
    right += best == mxu_dataset_labels(truth)[i];
    sums += fabs(sum - 1) < 1e-4;
  }
  CHECK_MSG(sums == 500 && right >= 400, "%d rows sum to 1, %d right", sums,
            right);
  mxu_dataset_free(p);
  mxu_dataset_free(truth);
}

/* A tag per token from the command line: the masked tagging net of
 * test_golden (Embedding(mask_zero), Bidirectional(GRU), Dense softmax
 * per step) on ids padded with 0 after 2..7 tokens, each tag (id + the
 * id before) % 4, labels of (count, 7). It learns (chance is 0.25), and
 * the labels at padded steps change nothing: the loss masks them. */
static void tags_per_token(void) {
  enum { N = 600, T = 7 };
  static float ids[N * T], tags[N * T];
  unsigned s = 3;
  for (int n = 0; n < N; n++) {
    s = s * 1103515245u + 12345u;
    int length = 2 + (int)((s >> 16) % (T - 1));
    for (int t = 0; t < T; t++) {
      s = s * 1103515245u + 12345u;
      ids[n * T + t] = t < length ? (float)(1 + (s >> 16) % 11) : 0.0f;
      float before = t ? ids[n * T + t - 1] : 0.0f;
      tags[n * T + t] = (float)((int)(ids[n * T + t] + before) % 4);
    }
  }
  int64_t shape[2] = {N, T};
  char x[600], y[600], scrambled[600];
  snprintf(x, sizeof x, "%s", temp_path("tag_ids.npy"));
  snprintf(y, sizeof y, "%s", temp_path("tags.npy"));
  snprintf(scrambled, sizeof scrambled, "%s", temp_path("tags_padded.npy"));
  CHECK_OK(mxu_save_npy(x, shape, 2, ids));
  CHECK_OK(mxu_save_npy(y, shape, 2, tags));
  for (int i = 0; i < N * T; i++)
    if (ids[i] == 0.0f) tags[i] = (float)(i % 4);
  CHECK_OK(mxu_save_npy(scrambled, shape, 2, tags));
  char *out[2] = {NULL, NULL};
  const char *final[2] = {NULL, NULL};
  for (int k = 0; k < 2; k++) {
    result r = check_run_bin(
        MXU_BIN, "train", "tests/golden/tagging_masked/model.k3.json", "--data",
        x, "--labels", k ? scrambled : y, "--validation-split", "0.2",
        "--epochs", "10", "--batch-size", "16", "--optimizer", "adam",
        "--learning-rate", "0.02", "--verbose", "2", "--save-weights",
        temp_path("tags.weights.h5"), NULL);
    CHECK_MSG(r.code == 0, "exit %d: %s", r.code, r.err);
    const char *test = r.out ? strstr(r.out, "test accuracy") : NULL;
    double accuracy = test ? atof(test + strlen("test accuracy")) : 0;
    CHECK_MSG(accuracy > 0.7, "tags per token: test accuracy %g", accuracy);
    out[k] = r.out;
    final[k] = r.out ? strstr(r.out, "test loss") : NULL;
    free(r.err);
  }
  CHECK_MSG(final[0] && final[1] && strcmp(final[0], final[1]) == 0,
            "labels at padded steps changed the result: %s, %s", final[0],
            final[1]);
  free(out[0]);
  free(out[1]);
  /* predict gives Keras' (samples, 7, 4), each step's a softmax. */
  const char *probs = temp_path("tag_probs.npy");
  result r = check_run_bin(MXU_BIN, "predict",
                           "tests/golden/tagging_masked/model.k3.json",
                           "--weights", temp_path("tags.weights.h5"), "--input",
                           x, "--output", probs, NULL);
  CHECK_MSG(r.code == 0 && r.out && has(r.out, "600 predictions of (7, 4)"),
            "%s %s", r.out, r.err);
  result_free(&r);
  mxu_dataset *p = NULL;
  CHECK_OK(mxu_load_npy(probs, NULL, &p));
  if (!p) return;
  mxu_shape each = mxu_dataset_shape(p);
  CHECK(mxu_dataset_count(p) == N && each.rank == 2 && each.dims[0] == T &&
        each.dims[1] == 4);
  const float *v = mxu_dataset_x(p);
  CHECK(fabs(v[0] + v[1] + v[2] + v[3] - 1) < 1e-5 &&
        fabs(v[4] + v[5] + v[6] + v[7] - 1) < 1e-5);
  mxu_dataset_free(p);
}

/* ---- a model of two inputs ----------------------------------------------
 * tests/npz/two_inputs.*.json (make_two_inputs.py: an LSTM over a series
 * of any length and a Dense of two numbers, the class telling on both)
 * trained from an .npz of arrays named after the inputs, both forms: the
 * test accuracy shows each input's rows reached it with their labels. */
static double test_accuracy(const char *out) {
  const char *at = out ? strstr(out, "test accuracy") : NULL;
  return at ? atof(at + strlen("test accuracy")) : 0.0;
}

static void two_inputs(void) {
  const char *weights = temp_path("two_inputs.h5");
  result r = check_run_bin(MXU_BIN, "train", "tests/npz/two_inputs.k3.json",
                           "--data", "tests/npz/two_inputs.npz",
                           "--validation-split", "0.2", "--epochs", "30",
                           "--learning-rate", "0.01", "--verbose", "0", NULL);
  CHECK_MSG(r.code == 0 && test_accuracy(r.out) > 0.75, "exit %d: %s %s",
            r.code, r.out, r.err);
  result_free(&r);
  r = check_run_bin(MXU_BIN, "train", "tests/npz/two_inputs.tf2.json", "--data",
                    "tests/npz/two_inputs_split.npz", "--epochs", "30",
                    "--learning-rate", "0.01", "--verbose", "0",
                    "--save-weights", weights, NULL);
  double trained = test_accuracy(r.out);
  CHECK_MSG(r.code == 0 && trained > 0.8, "exit %d: %s %s", r.code, r.out,
            r.err);
  result_free(&r);
  /* evaluate reads the test split the same way, to the same figure. */
  r = check_run_bin(MXU_BIN, "evaluate", "tests/npz/two_inputs.tf2.json",
                    "--weights", weights, "--data",
                    "tests/npz/two_inputs_split.npz", NULL);
  CHECK_MSG(r.code == 0 && fabs(test_accuracy(r.out) - trained) < 1e-9,
            "exit %d: %s %s", r.code, r.out, r.err);
  result_free(&r);
  /* predict reads each input's NAME_test and writes Keras' (100, 3),
   * whose argmax scores the test accuracy evaluate printed. */
  const char *probs = temp_path("two_probs.npy");
  r = check_run_bin(MXU_BIN, "predict", "tests/npz/two_inputs.tf2.json",
                    "--weights", weights, "--input",
                    "tests/npz/two_inputs_split.npz", "--output", probs, NULL);
  CHECK_MSG(r.code == 0 && r.out && has(r.out, "100 predictions of (3)"),
            "exit %d: %s %s", r.code, r.out, r.err);
  result_free(&r);
  mxu_dataset *p = NULL, *test = NULL;
  CHECK_OK(mxu_load_npy(probs, NULL, &p));
  CHECK_OK(mxu_load_npz_arrays("tests/npz/two_inputs_split.npz", "series_test",
                               "y_test", &test));
  if (p && test && mxu_dataset_count(p) == 100) {
    int right = 0;
    for (int i = 0; i < 100; i++) {
      const float *row = mxu_dataset_x(p) + 3 * i;
      int best = row[1] > row[0] ? 1 : 0;
      best = row[2] > row[best] ? 2 : best;
      right += best == mxu_dataset_labels(test)[i];
    }
    CHECK_MSG(fabs(right / 100.0 - trained) < 1e-9,
              "predict's argmax scores %d of 100, evaluate %g", right, trained);
  }
  mxu_dataset_free(p);
  mxu_dataset_free(test);
  /* One array and --labels cannot feed two inputs (the series of 6 steps
   * here, else its null length would be the message); an archive of
   * arrays for other inputs names the one missing. */
  char *json = check_slurp("tests/npz/two_inputs.k3.json");
  const char *fixed = temp_path("two_inputs_fixed.json");
  FILE *f = fopen(fixed, "w");
  for (char *at = json; f && at && *at;) {
    char *null = strstr(at, "[null, null, 3]");
    fwrite(at, 1, null ? (size_t)(null - at) : strlen(at), f);
    if (null) fputs("[null, 6, 3]", f);
    at = null ? null + strlen("[null, null, 3]") : NULL;
  }
  if (f) fclose(f);
  free(json);
  r = check_run_bin(MXU_BIN, "train", fixed, "--data", "tests/npz/v2.npy",
                    "--labels", "tests/npz/labels2.npy", "--validation-split",
                    "0.5", NULL);
  CHECK_MSG(r.code == 1 && r.err && has(r.err, "the model has 2 inputs") &&
                has(r.err, "named after the input"),
            "exit %d: %s", r.code, r.err);
  result_free(&r);
  r = check_run_bin(MXU_BIN, "train", "tests/npz/two_inputs.k3.json", "--data",
                    "tests/npz/mnist_small.npz", NULL);
  CHECK_MSG(r.code == 1 && r.err && has(r.err, "series"), "exit %d: %s", r.code,
            r.err);
  result_free(&r);
}

/* ---- a model of three outputs --------------------------------------------
 * tests/npz/multi_outputs.*.json (make_multi_outputs.py: a class, a sum
 * and a sign from one input, losses, weights and metrics per output in the
 * file's compile settings) trained from an .npz of arrays named after the
 * outputs: each output learns its own target, so each got its own rows. */
static double value_after(const char *out, const char *key) {
  const char *at = out ? strstr(out, key) : NULL;
  return at ? atof(at + strlen(key)) : NAN;
}

static void multi_outputs(void) {
  const char *weights = temp_path("multi.weights.h5");
  const char *report = temp_path("multi_report.json");
  static const char *models[2] = {"tests/npz/multi_outputs.k3.json",
                                  "tests/npz/multi_outputs.tf2.json"};
  double seen[2][3];
  for (int i = 0; i < 2; i++) {
    result r = check_run_bin(
        MXU_BIN, "train", models[i], "--data", "tests/npz/multi_outputs.npz",
        "--epochs", "30", "--batch-size", "32", "--verbose", "0",
        "--save-weights", weights, "--report", report, NULL);
    seen[i][0] = value_after(r.out, "test kind_accuracy");
    seen[i][1] = value_after(r.out, "test size_mae");
    seen[i][2] = value_after(r.out, "test odd_accuracy");
    /* Keras 3 fit the same (make_multi_outputs.py): 0.955, 0.163, 0.945. */
    CHECK_MSG(r.code == 0 && seen[i][0] > 0.9 && seen[i][1] < 0.25 &&
                  seen[i][2] > 0.85,
              "%s: exit %d: %s %s", models[i], r.code, r.out, r.err);
    result_free(&r);
  }
  /* Both dialects' compile settings are one and the same. */
  for (int k = 0; k < 3; k++) CHECK(seen[0][k] == seen[1][k]);
  char *text = check_slurp(report);
  CHECK_MSG(text && has(text, "\"val_kind_loss\"") &&
                has(text, "\"odd_accuracy\"") && has(text, "\"size_mae\"") &&
                !has(text, "\"confusion\""),
            "report: %s", text ? text : "(none)");
  free(text);
  result r = check_run_bin(MXU_BIN, "evaluate", models[0], "--weights", weights,
                           "--data", "tests/npz/multi_outputs.npz", NULL);
  CHECK_MSG(r.code == 0 &&
                value_after(r.out, "test kind_accuracy") == seen[1][0] &&
                value_after(r.out, "test odd_accuracy") == seen[1][2],
            "exit %d: %s %s", r.code, r.out, r.err);
  result_free(&r);
  /* predict writes an array per output, named after it, into an .npz:
   * the kind's argmax scores what evaluate printed; an .npy cannot hold
   * three. */
  const char *preds = temp_path("multi_preds.npz");
  r = check_run_bin(MXU_BIN, "predict", models[0], "--weights", weights,
                    "--input", "tests/npz/multi_outputs.npz", "--output", preds,
                    NULL);
  CHECK_MSG(r.code == 0 && has(r.out, "200 predictions of (3), (1), (1)"),
            "exit %d: %s %s", r.code, r.out, r.err);
  result_free(&r);
  mxu_dataset *kind = NULL, *odd = NULL, *test = NULL;
  CHECK_OK(mxu_load_npz_arrays(preds, "kind", NULL, &kind));
  CHECK_OK(mxu_load_npz_arrays(preds, "odd", NULL, &odd));
  CHECK_OK(mxu_load_npz_arrays("tests/npz/multi_outputs.npz", "x_test",
                               "kind_test", &test));
  if (kind && odd && test && mxu_dataset_count(kind) == 200) {
    int right = 0;
    for (int i = 0; i < 200; i++) {
      const float *row = mxu_dataset_x(kind) + 3 * i;
      int best = row[1] > row[0] ? 1 : 0;
      best = row[2] > row[best] ? 2 : best;
      right += best == mxu_dataset_labels(test)[i];
    }
    CHECK_MSG(fabs(right / 200.0 - seen[1][0]) < 1e-9,
              "predict's argmax scores %d of 200, evaluate %g", right,
              seen[1][0]);
    mxu_shape one = mxu_dataset_shape(odd);
    CHECK(mxu_dataset_count(odd) == 200 && mxu_shape_count(&one) == 1);
  }
  mxu_dataset_free(kind);
  mxu_dataset_free(odd);
  mxu_dataset_free(test);
  r = check_run_bin(MXU_BIN, "predict", models[0], "--weights", weights,
                    "--input", "tests/npz/multi_outputs.npz", "--output",
                    temp_path("multi.npy"), NULL);
  CHECK_MSG(r.code == 2 && r.err && has(r.err, "give an .npz"), "exit %d: %s",
            r.code, r.err);
  result_free(&r);
  /* An archive without the outputs' arrays names the first missing. */
  r = check_run_bin(MXU_BIN, "train", models[0], "--data",
                    "tests/npz/mnist_small.npz", NULL);
  CHECK_MSG(r.code != 0 && r.err && has(r.err, "kind_train"), "exit %d: %s",
            r.code, r.err);
  result_free(&r);
}

int main(void) {
  CHECK(check_temp_make("npz"));
  every_dtype();
  maps_float32();
  archives();
  refusals();
  command();
  arrays_command();
  predict_arrays();
  writes_npy();
  validation_split();
  tags_per_token();
  two_inputs();
  multi_outputs();
  check_remove_tree(check_temp_dir);
  return check_report("test_npz");
}
