/* test_golden.c — one training step of a small residual net checked
 * against numbers saved from tf.keras itself (tests/golden/, made by
 * tests/keras/make_golden.py in a throwaway venv), the way llm.c checks one
 * step against PyTorch: the same initial weights and batch must give
 * Keras' predictions, Keras' loss, and after one SGD step Keras' weights
 * (BatchNormalization's moving statistics included) and predictions. The
 * graph holds ZeroPadding2D, ReLU, Add, Concatenate, MaxPooling2D,
 * GlobalAveragePooling2D, Multiply, Subtract, Reshape and a fan-out of
 * several tensors; a second net (tests/golden/shared/, make_shared.py)
 * calls a Conv2D and a Dense twice each (Keras' shared layers). Both JSON
 * dialects and both backends are checked; the losses over positions
 * (seq2seq, tagging) on pjrt too. */
#include "check.h"
#include "check_h5.h"
#include "model/model.h"

#define MAX_ROWS 8
#define MAX_CLASSES 28

/* A golden directory: its files, batch and shapes. */
typedef struct golden_case {
  const char *dir; /* initial.h5, after_step.h5, batch.h5 in it */
  const char *json[2];
  int rows, classes;
  int64_t input[4];  /* the sample's shape; a shorter one ends in zeros */
  const char *fused; /* a node its producer runs fused, or NULL */
} golden_case;

#define MAX_MORE 2

typedef struct golden {
  float x[MAX_ROWS * 8 * 8 * 3];
  /* A model of several inputs: batch.h5's x_1, x_2, ... (its shape each
   * without the batch). */
  int more_count;
  float more[MAX_MORE][MAX_ROWS * 64];
  mxu_shape more_shape[MAX_MORE];
  int32_t y[MAX_ROWS];
  /* A batch.h5 whose y has several values a sample (classes of them):
   * one-hot targets under categorical_crossentropy (floats), or a label
   * per position under the sparse loss (integers). */
  int targets, per_sample;
  float t[MAX_ROWS * MAX_CLASSES];
  double loss;
  /* Keras' accuracy and MeanIoU of the step, where batch.h5 has them
   * (NaN if not). */
  double accuracy, iou;
  float before[MAX_ROWS * MAX_CLASSES], after[MAX_ROWS * MAX_CLASSES];
} golden;

static const golden_case *current;
/* The current batch's loss: batch.h5's loss_name, else the sparse
 * cross-entropy, or with float y the categorical one. */
static mxu_loss loss_of_batch;
/* batch.h5's ignore_class of the sparse loss, where it has one, and its
 * MeanIoU's spec in mxu's words (empty for none). */
static int has_ignore_class, ignore_class;
static char iou_spec[128];

static const char *in_dir(const char *name) {
  static char path[256];
  snprintf(path, sizeof path, "%s/%s", current->dir, name);
  return path;
}

/* batch.h5's string `name` into out; 0 where it has none. */
static int read_string(hid_t file, const char *name, char *out, size_t size) {
  if (H5Lexists(file, name, H5P_DEFAULT) <= 0) return 0;
  hid_t set = H5Dopen2(file, name, H5P_DEFAULT);
  char *text = NULL;
  hid_t memory = H5Tcopy(H5T_C_S1);
  H5Tset_size(memory, H5T_VARIABLE);
  int read = H5Dread(set, memory, H5S_ALL, H5S_ALL, H5P_DEFAULT, &text) >= 0;
  CHECK(read);
  snprintf(out, size, "%s", read && text ? text : "");
  H5free_memory(text);
  H5Tclose(memory), H5Dclose(set);
  return read;
}

static void read_golden(golden *g) {
  hid_t file = H5Fopen(in_dir("batch.h5"), H5F_ACC_RDONLY, H5P_DEFAULT);
  CHECK(file >= 0);
  if (file < 0) return;
  check_h5_read(file, "x", H5T_NATIVE_FLOAT, g->x);
  for (g->more_count = 0; g->more_count < MAX_MORE; g->more_count++) {
    char name[16];
    snprintf(name, sizeof name, "x_%d", g->more_count + 1);
    if (H5Lexists(file, name, H5P_DEFAULT) <= 0) break;
    hid_t set = H5Dopen2(file, name, H5P_DEFAULT);
    hid_t space = H5Dget_space(set);
    hsize_t dims[4] = {0};
    int rank = H5Sget_simple_extent_dims(space, dims, NULL);
    mxu_shape *shape = &g->more_shape[g->more_count];
    shape->rank = rank - 1;
    for (int d = 1; d < rank; d++) shape->dims[d - 1] = (int64_t)dims[d];
    CHECK(rank >= 2 &&
          (int64_t)dims[0] * mxu_shape_count(shape) <= MAX_ROWS * 64);
    H5Sclose(space);
    H5Dclose(set);
    check_h5_read(file, name, H5T_NATIVE_FLOAT, g->more[g->more_count]);
  }
  hid_t y = H5Dopen2(file, "y", H5P_DEFAULT);
  hid_t type = y >= 0 ? H5Dget_type(y) : -1;
  hid_t space = y >= 0 ? H5Dget_space(y) : -1;
  int floats = type >= 0 && H5Tget_class(type) == H5T_FLOAT;
  loss_of_batch = floats ? MXU_CATEGORICAL_CROSSENTROPY
                         : MXU_SPARSE_CATEGORICAL_CROSSENTROPY;
  char text[128];
  if (read_string(file, "loss_name", text, sizeof text))
    CHECK_OK(mxu_loss_from_name(text, &loss_of_batch));
  iou_spec[0] = 0;
  g->iou = NAN;
  if (read_string(file, "iou_spec", iou_spec, sizeof iou_spec))
    check_h5_read(file, "iou", H5T_NATIVE_DOUBLE, &g->iou);
  has_ignore_class = H5Lexists(file, "ignore_class", H5P_DEFAULT) > 0;
  if (has_ignore_class)
    check_h5_read(file, "ignore_class", H5T_NATIVE_INT, &ignore_class);
  hsize_t dims[4] = {0};
  int rank = space >= 0 ? H5Sget_simple_extent_dims(space, dims, NULL) : 0;
  g->targets = rank > 1;
  g->per_sample = 1;
  for (int d = 1; d < rank && d < 4; d++) g->per_sample *= (int)dims[d];
  if (space >= 0) H5Sclose(space);
  if (type >= 0) H5Tclose(type);
  if (y >= 0) H5Dclose(y);
  if (g->targets)
    check_h5_read(file, "y", H5T_NATIVE_FLOAT, g->t);
  else
    check_h5_read(file, "y", H5T_NATIVE_INT32, g->y);
  check_h5_read(file, "loss", H5T_NATIVE_DOUBLE, &g->loss);
  g->accuracy = NAN;
  if (H5Lexists(file, "accuracy", H5P_DEFAULT) > 0)
    check_h5_read(file, "accuracy", H5T_NATIVE_DOUBLE, &g->accuracy);
  check_h5_read(file, "predict_before", H5T_NATIVE_FLOAT, g->before);
  check_h5_read(file, "predict_after", H5T_NATIVE_FLOAT, g->after);
  H5Fclose(file);
}

/* The model compiled as Keras compiled it: SGD(0.1), one batch. */
static mxu_model *load(const char *json, mxu_backend_kind backend,
                       const char *weights) {
  mxu_model *model = NULL;
  CHECK_OK(mxu_model_load_json(json, &model, NULL, NULL));
  if (!model) return NULL;
  mxu_compile_config cc = mxu_compile_defaults();
  cc.optimizer = mxu_sgd(0.1f, 0.0f, 0);
  cc.loss = loss_of_batch;
  cc.has_ignore_class = has_ignore_class;
  cc.ignore_class = ignore_class;
  if (!mxu_loss_is_softmax(cc.loss)) cc.metrics[0] = "mae";
  /* Keras' compile of the goldens with an IoU: "accuracy" and it. */
  if (iou_spec[0]) cc.metrics[0] = "accuracy", cc.metrics[1] = iou_spec;
  cc.batch_size = current->rows;
  cc.backend = backend;
  CHECK_OK(mxu_compile(model, &cc));
  CHECK_OK(mxu_load_weights(model, weights));
  return model;
}

static void expect_close(const float *got, const float *want, int64_t count,
                         double tolerance, const char *what,
                         const char *label) {
  double worst = 0;
  int64_t at = 0;
  for (int64_t i = 0; i < count; i++) {
    double error = fabs((double)got[i] - want[i]) / (1.0 + fabs(want[i]));
    if (error > worst) worst = error, at = i;
  }
  CHECK_MSG(worst <= tolerance,
            "%s: %s[%lld] is %.8g, Keras %.8g (relative error %.3g)", label,
            what, (long long)at, (double)got[at], (double)want[at], worst);
}

/* Every weight of a, in Keras order, against b's; then every value of
 * both models' buffers (the weights of models used as layers too, which
 * are not layers of their own). */
static void expect_weights(const mxu_model *a, const mxu_model *b,
                           double tolerance, const char *label) {
  CHECK(a->trainable_count == b->trainable_count &&
        a->state_count == b->state_count);
  if (a->trainable_count == b->trainable_count)
    expect_close(a->weights, b->weights, a->trainable_count, tolerance,
                 "trainable values", label);
  if (a->state_count == b->state_count)
    expect_close(a->state, b->state, a->state_count, tolerance,
                 "non-trainable values", label);
  int layers = mxu_model_layer_count(a);
  CHECK(layers == mxu_model_layer_count(b));
  for (int l = 0; l < layers; l++)
    for (int k = 0; k < mxu_layer_weight_count(a, l); k++) {
      mxu_tensor ta, tb;
      const char *name = NULL;
      CHECK_OK(mxu_layer_weight(a, l, k, &ta, &name));
      CHECK_OK(mxu_layer_weight(b, l, k, &tb, NULL));
      char what[160];
      snprintf(what, sizeof what, "%s/%s", mxu_model_layer_name(a, l), name);
      expect_close(ta.data, tb.data, mxu_shape_count(&ta.shape), tolerance,
                   what, label);
    }
}

/* The batch's predictions: of its one input, or of each. */
static void predict(mxu_model *model, const golden *g, float *out) {
  const float *inputs[1 + MAX_MORE] = {g->x};
  for (int k = 0; k < g->more_count; k++) inputs[k + 1] = g->more[k];
  CHECK_OK(mxu_predict_outputs(model, inputs, current->rows, &out));
}

static void one_step(const char *json, mxu_backend_kind backend,
                     const golden *g, const char *label) {
  char initial[256], after[256];
  snprintf(initial, sizeof initial, "%s", in_dir("initial.h5"));
  snprintf(after, sizeof after, "%s", in_dir("after_step.h5"));
  mxu_model *model = load(json, backend, initial);
  mxu_model *keras = load(json, MXU_BACKEND_CPU_REF, after);
  int rows = current->rows, outputs = current->rows * current->classes;
  if (!model || !keras) goto done;
  /* The step below then checks the fused path against Keras. */
  for (int i = 0; current->fused && i < model->layer_count; i++)
    if (strcmp(model->layers[i].name, current->fused) == 0)
      CHECK_MSG(model->layers[i].compiled->absorbed, "%s: %s not fused", label,
                current->fused);
  /* Seen: at most 4e-8 relative on either backend; oneDNN's kernels sum
   * in other orders than TensorFlow's, so they get more room. */
  double tolerance = backend == MXU_BACKEND_CPU_REF ? 1e-6 : 1e-5;
  float probs[MAX_ROWS * MAX_CLASSES];
  predict(model, g, probs);
  expect_close(probs, g->before, outputs, tolerance,
               "prediction before the step", label);

  mxu_dataset *data = NULL;
  int rank = 0;
  while (rank < 4 && current->input[rank]) rank++;
  if (g->targets)
    CHECK_OK(mxu_dataset_from_targets(g->x, g->t, rows,
                                      mxu_shape_make(rank, current->input),
                                      g->per_sample, &data));
  else
    CHECK_OK(mxu_dataset_from_arrays(g->x, g->y, rows,
                                     mxu_shape_make(rank, current->input),
                                     current->classes, &data));
  for (int k = 0; data && k < g->more_count; k++)
    CHECK_OK(mxu_dataset_add_input(data, g->more[k], g->more_shape[k]));
  mxu_fit_config fit = mxu_fit_defaults();
  fit.batch_size = rows;
  fit.shuffle = 0;
  fit.verbose = 0;
  const mxu_history *history = NULL;
  CHECK_OK(mxu_fit(model, data, &fit, &history));
  CHECK(history && history->count == 1);
  if (history && history->count == 1)
    CHECK_MSG(fabs(history->epochs[0].loss - g->loss) <= tolerance * g->loss,
              "%s: loss %.9g, Keras %.9g", label, history->epochs[0].loss,
              g->loss);
  if (history && history->count == 1 && !isnan(g->accuracy))
    CHECK_MSG(fabs(history->epochs[0].accuracy - g->accuracy) <= 1e-6,
              "%s: accuracy %.9g, Keras %.9g", label,
              history->epochs[0].accuracy, g->accuracy);
  if (history && history->count == 1 && !isnan(g->iou)) {
    CHECK_MSG(fabs(history->epochs[0].outputs[0].values[1] - g->iou) <= 1e-6,
              "%s: IoU %.9g, Keras %.9g", label,
              history->epochs[0].outputs[0].values[1], g->iou);
  }
  expect_weights(model, keras, tolerance, label);
  predict(model, g, probs);
  expect_close(probs, g->after, outputs, tolerance, "prediction after the step",
               label);
  mxu_dataset_free(data);
done:
  mxu_model_free(model);
  mxu_model_free(keras);
}

/* Keras 3's save_weights of the nested net's initial weights (its models
 * used as layers nested as groups) gives Keras' initial predictions. */
static void keras3_weights(void) {
  static golden g;
  current = &(golden_case){
      "tests/golden/nested", {NULL, NULL}, 4, 3, {6, 6, 2}, NULL};
  read_golden(&g);
  mxu_model *model =
      load("tests/golden/nested/model.tf2.json", MXU_BACKEND_CPU_REF,
           "tests/golden/nested/initial.weights.h5");
  float probs[MAX_ROWS * MAX_CLASSES];
  if (model) {
    CHECK_OK(mxu_predict(model, g.x, 4, probs));
    expect_close(probs, g.before, 12, 1e-6, "prediction",
                 "nested, Keras 3 weights");
    /* And mxu writes that layout back as Keras 3 does. */
    CHECK_OK(mxu_save_weights(model, "/tmp/mxu_nested.weights.h5"));
    mxu_model *again = load("tests/golden/nested/model.k3.json",
                            MXU_BACKEND_CPU_REF, "/tmp/mxu_nested.weights.h5");
    if (again) expect_weights(again, model, 0, "nested, Keras 3 round trip");
    mxu_model_free(again);
    remove("/tmp/mxu_nested.weights.h5");
  }
  mxu_model_free(model);
}

/* The loss's ignore_class and the IoU metric as batch.h5 gives them (the
 * archives' compile config carries them). */
static void expect_ignore_class(const mxu_model *model, const char *path) {
  const mxu_head *head = &model->heads[0];
  const mxu_output_loss *spec = &head->spec;
  CHECK_MSG(spec->has_ignore_class == has_ignore_class &&
                (!has_ignore_class || spec->ignore_class == ignore_class),
            "%s: ignore_class %s %d, Keras' %s %d", path,
            spec->has_ignore_class ? "set" : "unset", spec->ignore_class,
            has_ignore_class ? "set" : "unset", ignore_class);
  if (!iou_spec[0]) return;
  CHECK_MSG(head->metric_count == 2 && !strcmp(head->metric_spec[1], iou_spec),
            "%s: %d metrics, the second %s, Keras' %s", path,
            head->metric_count,
            head->metric_count > 1 ? head->metric_spec[1] : "none", iou_spec);
}

/* Keras 3's archive of a net with its initial weights (make_sequence.py,
 * make_recurrent.py: the RNNs' in their cells' groups): mxu_load_model
 * gives Keras' initial predictions and loss settings; mxu's own .keras and
 * .h5 of it load back predicting the same values, keeping the input's
 * dtype and the loss's ignore_class. */
static void keras_archive(const golden_case *c, int input_dtype) {
  static golden g;
  current = c;
  read_golden(&g);
  char path[256];
  snprintf(path, sizeof path, "%s/model.keras", c->dir);
  mxu_model *model = NULL;
  CHECK_OK(mxu_load_model(path, MXU_BACKEND_CPU_REF, &model, NULL));
  if (!model) return;
  int outputs = c->rows * c->classes;
  float probs[MAX_ROWS * MAX_CLASSES], again[MAX_ROWS * MAX_CLASSES];
  predict(model, &g, probs);
  expect_close(probs, g.before, outputs, 1e-6, "prediction", path);
  expect_ignore_class(model, path);
  static const char *const saved[] = {"/tmp/mxu_archive.keras",
                                      "/tmp/mxu_archive.h5"};
  for (int i = 0; i < 2; i++) {
    mxu_model *back = NULL;
    CHECK_OK(mxu_save_model(model, saved[i], NULL));
    CHECK_OK(mxu_load_model(saved[i], MXU_BACKEND_CPU_REF, &back, NULL));
    if (back) predict(back, &g, again);
    if (back) expect_close(again, probs, outputs, 0, "prediction", saved[i]);
    if (back) expect_ignore_class(back, saved[i]);
    CHECK(back && mxu_model_input(back)->config.input_dtype == input_dtype);
    mxu_model_free(back);
    remove(saved[i]);
  }
  mxu_model_free(model);
}

int main(void) {
  static const golden_case cases[] = {
      {"tests/golden",
       {"tests/golden/tiny_resnet.tf2.json",
        "tests/golden/tiny_resnet.k3.json"},
       8,
       5,
       {8, 8, 3},
       NULL},
      /* Keras' shared layers: a conv and a dense called twice each. */
      {"tests/golden/shared",
       {"tests/golden/shared/model.tf2.json",
        "tests/golden/shared/model.k3.json"},
       4,
       3,
       {6, 6, 2},
       NULL},
      /* Models used as layers: a Functional "base" and a Sequential "head"
       * inside the model (make_nested.py). */
      {"tests/golden/nested",
       {"tests/golden/nested/model.tf2.json",
        "tests/golden/nested/model.k3.json"},
       4,
       3,
       {6, 6, 2},
       NULL},
      /* The image models' Keras surface: Rescaling, adapted Normalization,
       * gelu/relu6/swish/elu/mish/softplus/softsign/selu/exponential,
       * depthwise, dilated and grouped convs, LeakyReLU, PReLU, ELU,
       * Softmax, a broadcast Multiply, a swish fused into the
       * BatchNormalization before it (make_surface.py). */
      {"tests/golden/surface",
       {"tests/golden/surface/model.tf2.json",
        "tests/golden/surface/model.k3.json"},
       6,
       5,
       {8, 8, 3},
       "bn_swish"},
      /* What keras.applications' newer models add: Normalization with its
       * statistics in the config, ops recorded as layers (x + 3.0,
       * * 1/6, - 0.25, a + b), ConvNeXt's LayerScale, InceptionResNetV2's
       * CustomScaleLayer (make_apps_layers.py). */
      {"tests/golden/apps_layers",
       {"tests/golden/apps_layers/model.tf2.json",
        "tests/golden/apps_layers/model.k3.json"},
       6,
       5,
       {8, 8, 3},
       NULL},
      /* A text model: Embedding of int32 token ids, Conv1D causal and
       * dilated, strided and grouped, the 1-D poolings, global ones too
       * (make_sequence.py). */
      {"tests/golden/sequence",
       {"tests/golden/sequence/model.tf2.json",
        "tests/golden/sequence/model.k3.json"},
       6,
       5,
       {16, 0, 0},
       NULL},
      /* LSTM, GRU and SimpleRNN: sequences and last steps, forwards and
       * backwards, a relu cell (make_recurrent.py). */
      {"tests/golden/recurrent",
       {"tests/golden/recurrent/model.tf2.json",
        "tests/golden/recurrent/model.k3.json"},
       6,
       5,
       {7, 3, 0},
       NULL},
      /* MultiHeadAttention: causal self-attention, cross-attention with a
       * key of its own and no biases, attention over a grid's two axes
       * (make_attention.py). */
      {"tests/golden/attention",
       {"tests/golden/attention/model.tf2.json",
        "tests/golden/attention/model.k3.json"},
       6,
       5,
       {6, 4, 0},
       NULL},
      /* An Embedding's mask (mask_zero) through LSTM, GRU, SimpleRNN, a
       * Bidirectional's sequences, Dense, Add and GlobalAveragePooling1D,
       * over ids padded after, before and inside (make_masking.py). */
      {"tests/golden/masking",
       {"tests/golden/masking/model.tf2.json",
        "tests/golden/masking/model.k3.json"},
       6,
       5,
       {8, 0, 0},
       NULL},
      /* Series of floats padded with zero steps: Masking's mask through
       * LSTM, GRU, SimpleRNN and GlobalAveragePooling1D, a Masking after a
       * Dense, RepeatVector (make_timeseries.py). */
      {"tests/golden/timeseries",
       {"tests/golden/timeseries/model.tf2.json",
        "tests/golden/timeseries/model.k3.json"},
       6,
       5,
       {7, 3, 0},
       NULL},
      /* A softmax over every step under categorical_crossentropy with
       * one-hot targets: LSTM, RepeatVector, LSTM sequences, Dense
       * (make_seq2seq.py). */
      {"tests/golden/seq2seq",
       {"tests/golden/seq2seq/model.tf2.json",
        "tests/golden/seq2seq/model.k3.json"},
       6,
       12,
       {5, 4, 0},
       NULL},
      /* A class per step: sparse labels (6, 7) over a (7, 4) softmax
       * after Embedding, Bidirectional(GRU) and Conv1D (make_tagging.py). */
      {"tests/golden/tagging",
       {"tests/golden/tagging/model.tf2.json",
        "tests/golden/tagging/model.k3.json"},
       6,
       28,
       {7, 0, 0},
       NULL},
      /* A regression over padded series: Masking's mask reaching the
       * mean_squared_error (make_masked_series.py). */
      {"tests/golden/masked_series",
       {"tests/golden/masked_series/model.tf2.json",
        "tests/golden/masked_series/model.k3.json"},
       6,
       14,
       {7, 3, 0},
       NULL},
      /* The same over ids padded with 0 (mask_zero): the loss the
       * unmasked positions' mean (make_tagging.py --masked). */
      {"tests/golden/tagging_masked",
       {"tests/golden/tagging_masked/model.tf2.json",
        "tests/golden/tagging_masked/model.k3.json"},
       6,
       28,
       {7, 0, 0},
       NULL},
      /* SparseCategoricalCrossentropy(ignore_class=-1): the labels -1 at
       * some positions (every one of a sample) score no loss; the loss
       * the others' mean, the accuracy counting them all; alone, and
       * with the padding mask (make_tagging.py --ignore [--masked]). */
      {"tests/golden/tagging_ignore",
       {"tests/golden/tagging_ignore/model.tf2.json",
        "tests/golden/tagging_ignore/model.k3.json"},
       6,
       28,
       {7, 0, 0},
       NULL},
      {"tests/golden/tagging_masked_ignore",
       {"tests/golden/tagging_masked_ignore/model.tf2.json",
        "tests/golden/tagging_masked_ignore/model.k3.json"},
       6,
       28,
       {7, 0, 0},
       NULL},
      /* ignore_class=1 over one label a sample (make_ignore_class.py). */
      {"tests/golden/ignore_class",
       {"tests/golden/ignore_class/model.tf2.json",
        "tests/golden/ignore_class/model.k3.json"},
       8,
       3,
       {6, 0, 0},
       NULL},
      /* A binary segmentation head, a sigmoid a pixel, and Keras' BinaryIoU
       * of its masks (make_binary_seg.py). */
      {"tests/golden/binary_seg",
       {"tests/golden/binary_seg/model.tf2.json",
        "tests/golden/binary_seg/model.k3.json"},
       8,
       25,
       {5, 5, 2},
       NULL},
      /* Keras' encoder-decoder: two inputs, the encoders' final states
       * (return_state) starting the decoders (initial_state), LSTM and
       * GRU (make_encdec.py). */
      {"tests/golden/encdec",
       {"tests/golden/encdec/model.tf2.json",
        "tests/golden/encdec/model.k3.json"},
       6,
       12,
       {4, 5, 0},
       NULL},
      /* TimeDistributed Conv2D, BatchNormalization, MaxPooling2D,
       * DepthwiseConv2D, Flatten, GlobalAveragePooling2D and Dense over
       * a clip's frames (make_time_distributed.py). */
      {"tests/golden/time_distributed",
       {"tests/golden/time_distributed/model.tf2.json",
        "tests/golden/time_distributed/model.k3.json"},
       6,
       3,
       {3, 8, 8, 1},
       NULL},
      /* Volumes: Conv3D, BatchNormalization, MaxPooling3D,
       * AveragePooling3D, the global 3-D poolings (make_volume.py). */
      {"tests/golden/volume",
       {"tests/golden/volume/model.tf2.json",
        "tests/golden/volume/model.k3.json"},
       6,
       3,
       {4, 6, 6, 1},
       NULL},
      /* ConvLSTM2D's sequences read by a Conv3D, and a strided one
       * backwards (make_conv_lstm.py). */
      {"tests/golden/conv_lstm",
       {"tests/golden/conv_lstm/model.tf2.json",
        "tests/golden/conv_lstm/model.k3.json"},
       6,
       3,
       {3, 6, 5, 1},
       NULL},
      /* DepthwiseConv1D and SeparableConv1D (make_separable1d.py). */
      {"tests/golden/separable1d",
       {"tests/golden/separable1d/model.tf2.json",
        "tests/golden/separable1d/model.k3.json"},
       6,
       3,
       {8, 3, 0},
       NULL},
      /* Keras' Attention (dot, scaled, concat, causal) and
       * AdditiveAttention (make_dense_attention.py). */
      {"tests/golden/dense_attention",
       {"tests/golden/dense_attention/model.tf2.json",
        "tests/golden/dense_attention/model.k3.json"},
       6,
       3,
       {5, 4, 0},
       NULL},
      /* Keras' RNN around an LSTMCell (return_state), a GRUCell
       * (go_backwards) and a SimpleRNNCell (make_rnn_cells.py). */
      {"tests/golden/rnn_cells",
       {"tests/golden/rnn_cells/model.tf2.json",
        "tests/golden/rnn_cells/model.k3.json"},
       6,
       3,
       {5, 3, 0},
       NULL},
      /* EinsumDense in Dense's equations: one axis contracted, one split
       * in two, two merged, and an ellipsis (make_einsum_dense.py). */
      {"tests/golden/einsum_dense",
       {"tests/golden/einsum_dense/model.tf2.json",
        "tests/golden/einsum_dense/model.k3.json"},
       6,
       3,
       {5, 6, 0},
       NULL},
      /* Keras 3's GroupQueryAttention: 4 query heads over 2 key and
       * value heads, then 2 over 1 with a key of its own and the causal
       * mask; three inputs (make_group_attention.py). */
      {"tests/golden/group_attention",
       {"tests/golden/group_attention/model.k3.json",
        "tests/golden/group_attention/model.k3.json"},
       6,
       3,
       {6, 8, 0},
       NULL},
      /* Keras 3's RMSNormalization and LayerNormalization(rms_scaling),
       * which tf.keras 2 lacks: Keras 3's files only, its weights files
       * too (make_rms_norm.py). */
      {"tests/golden/rms_norm",
       {"tests/golden/rms_norm/model.k3.json",
        "tests/golden/rms_norm/model.k3.json"},
       6,
       3,
       {6, 5, 0},
       NULL},
      /* GRU with reset_after=False: its reset gate before U_h, masked
       * steps, go_backwards, return_state into another's initial_state,
       * no bias, Bidirectional (make_gru_reset_before.py). */
      {"tests/golden/gru_reset_before",
       {"tests/golden/gru_reset_before/model.tf2.json",
        "tests/golden/gru_reset_before/model.k3.json"},
       6,
       5,
       {7, 3, 0},
       NULL},
      /* Keras 3's adaptive poolings, 1-D to 3-D, max and average, their
       * windows overlapping (make_adaptive_pooling.py). */
      {"tests/golden/adaptive_pooling",
       {"tests/golden/adaptive_pooling/model.k3.json",
        "tests/golden/adaptive_pooling/model.k3.json"},
       6,
       3,
       {10, 9, 2},
       NULL},
      /* Keras 3's newer activations (celu, hard_tanh, log_sigmoid,
       * tanh_shrink, squareplus, sparse_plus, sparse_sigmoid, the shrinks,
       * log_softmax), which tf.keras 2 lacks (make_activations3.py). */
      {"tests/golden/activations3",
       {"tests/golden/activations3/model.k3.json",
        "tests/golden/activations3/model.k3.json"},
       8,
       3,
       {10, 0, 0},
       NULL},
  };
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    static golden g;
    current = &cases[c];
    memset(&g, 0, sizeof g);
    read_golden(&g);
    char label[3][160];
    snprintf(label[0], sizeof label[0], "%s, cpu_ref", current->json[0]);
    snprintf(label[1], sizeof label[1], "%s, cpu_ref", current->json[1]);
    snprintf(label[2], sizeof label[2], "%s, cpu", current->json[0]);
    one_step(current->json[0], MXU_BACKEND_CPU_REF, &g, label[0]);
    one_step(current->json[1], MXU_BACKEND_CPU_REF, &g, label[1]);
    one_step(current->json[0], MXU_BACKEND_CPU, &g, label[2]);
    /* The losses over positions (a padding mask's too) on a device. */
    if (strstr(current->dir, "tagging") || strstr(current->dir, "seq2seq") ||
        strstr(current->dir, "masked_series") ||
        strstr(current->dir, "encdec") ||
        strstr(current->dir, "dense_attention") ||
        strstr(current->dir, "separable1d") ||
        strstr(current->dir, "time_distributed") ||
        strstr(current->dir, "volume") || strstr(current->dir, "conv_lstm") ||
        strstr(current->dir, "rms_norm") || strstr(current->dir, "rnn_cells") ||
        strstr(current->dir, "activations3") ||
        strstr(current->dir, "adaptive_pooling") ||
        strstr(current->dir, "gru_reset_before") ||
        strstr(current->dir, "group_attention") ||
        strstr(current->dir, "einsum_dense") ||
        strstr(current->dir, "ignore_class") ||
        strstr(current->dir, "binary_seg") ||
        strcmp(current->dir, "tests/golden/nested") == 0) {
      snprintf(label[2], sizeof label[2], "%s, pjrt", current->json[1]);
      one_step(current->json[1], MXU_BACKEND_PJRT, &g, label[2]);
    }
  }
  keras3_weights();
  /* The nets Keras 3 also wrote as archives; the sequence net's ids are
   * int32. */
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    int sequence = strcmp(cases[c].dir, "tests/golden/sequence") == 0 ||
                   strcmp(cases[c].dir, "tests/golden/masking") == 0 ||
                   strstr(cases[c].dir, "tests/golden/tagging") != NULL;
    if (sequence || strcmp(cases[c].dir, "tests/golden/recurrent") == 0 ||
        strcmp(cases[c].dir, "tests/golden/attention") == 0 ||
        strcmp(cases[c].dir, "tests/golden/timeseries") == 0 ||
        strcmp(cases[c].dir, "tests/golden/seq2seq") == 0 ||
        strcmp(cases[c].dir, "tests/golden/encdec") == 0 ||
        strcmp(cases[c].dir, "tests/golden/dense_attention") == 0 ||
        strcmp(cases[c].dir, "tests/golden/separable1d") == 0 ||
        strcmp(cases[c].dir, "tests/golden/time_distributed") == 0 ||
        strcmp(cases[c].dir, "tests/golden/volume") == 0 ||
        strcmp(cases[c].dir, "tests/golden/conv_lstm") == 0 ||
        strcmp(cases[c].dir, "tests/golden/rms_norm") == 0 ||
        strcmp(cases[c].dir, "tests/golden/activations3") == 0 ||
        strcmp(cases[c].dir, "tests/golden/adaptive_pooling") == 0 ||
        strcmp(cases[c].dir, "tests/golden/gru_reset_before") == 0 ||
        strcmp(cases[c].dir, "tests/golden/rnn_cells") == 0 ||
        strcmp(cases[c].dir, "tests/golden/group_attention") == 0 ||
        strcmp(cases[c].dir, "tests/golden/einsum_dense") == 0 ||
        strcmp(cases[c].dir, "tests/golden/ignore_class") == 0 ||
        strcmp(cases[c].dir, "tests/golden/binary_seg") == 0 ||
        strcmp(cases[c].dir, "tests/golden/masked_series") == 0)
      keras_archive(&cases[c], sequence);
  }
  return check_report("test_golden");
}
