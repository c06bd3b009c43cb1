/* test_pjrt_layers.c — every layer's emitter on XLA's CPU plugin against
 * mxu's cpu_ref kernels (themselves checked against finite differences in
 * test_layers): each layer sits in a small functional model between a
 * trainable 1x1 convolution (whose weight gradient carries the layer's
 * input gradient) and a Dense softmax head (whose weight gradient carries
 * the layer's output). One SGD step of rate 1 on each backend from the
 * same weights: the loss (forward), every weight's change (backward) and
 * the state (moving statistics) must agree. */
#include "check.h"
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ROWS = 4, CLASSES = 3 };

/* A second branch from the input, for merges. */
#define LEAD2                                                                  \
  LAYER("Conv2D", "lead2", ", \"filters\": 3, \"kernel_size\": [1, 1]", IN("x"))

/* A layer object of the functional JSON: class, name, the config's keys
 * after its name, and the inbound layers' names. */
#define LAYER(cls, name, config, inbound)                                      \
  "{\"class_name\": \"" cls "\", \"name\": \"" name                            \
  "\", \"config\": {\"name\": \"" name "\"" config                             \
  "}, \"inbound_nodes\": [[" inbound "]]}, "
#define IN(name) "[\"" name "\", 0, 0, {}]"
#define IN2(a, b) IN(a) ", " IN(b)

typedef struct layer_case {
  const char *name;
  const char *shape;  /* the input's, "6, 6, 2" */
  const char *layers; /* LAYERs after "lead" (the 1x1 convolution) */
  const char *last;   /* the layer the head reads */
  double tolerance;
} layer_case;

static char *model_json(const layer_case *c) {
  static const char format[] =
      "{\"class_name\": \"Functional\", \"config\": {\"name\": \"t\", "
      "\"layers\": ["
      "{\"class_name\": \"InputLayer\", \"name\": \"x\", \"config\": "
      "{\"name\": \"x\", \"batch_input_shape\": [null, %s]}, "
      "\"inbound_nodes\": []}, " LAYER(
          "Conv2D", "lead",
          ", \"filters\": 3, \"kernel_size\": [1, 1], \"activation\": "
          "\"tanh\"",
          IN("x")) "%s" LAYER("Flatten", "flat", "",
                              IN("%s")) "{\"class_name\": \"Dense\", \"name\": "
                                        "\"head\", \"config\": {\"name\": "
                                        "\"head\", \"units\": %d, "
                                        "\"activation\": \"softmax\"}, "
                                        "\"inbound_nodes\": [[[\"flat\", 0, 0, "
                                        "{}]]]}], "
                                        "\"input_layers\": [[\"x\", 0, 0]], "
                                        "\"output_layers\": [[\"head\", 0, "
                                        "0]]}}";
  size_t size = strlen(format) + strlen(c->shape) + strlen(c->layers) + 64;
  char *json = malloc(size);
  if (json) snprintf(json, size, format, c->shape, c->layers, c->last, CLASSES);
  return json;
}

static mxu_model *build(const layer_case *c, mxu_backend_kind backend) {
  char *json = model_json(c);
  mxu_model *m = NULL;
  CHECK_MSG(mxu_model_from_json(json, c->name, &m, NULL, NULL) == MXU_OK,
            "%s: %s", c->name, mxu_errmsg());
  free(json);
  if (!m) return NULL;
  mxu_compile_config cc = mxu_compile_defaults();
  cc.optimizer = mxu_sgd(1.0f, 0.0f, 0);
  cc.batch_size = ROWS;
  cc.threads = 1;
  cc.seed = 3;
  cc.backend = backend;
  mxu_status s = mxu_compile(m, &cc);
  CHECK_MSG(s == MXU_OK, "%s on %s: %s", c->name,
            backend == MXU_BACKEND_PJRT ? "pjrt" : "cpu_ref", mxu_errmsg());
  if (s == MXU_OK) return m;
  mxu_model_free(m);
  return NULL;
}

static mxu_dataset *data(const mxu_model *m) {
  mxu_shape shape = mxu_model_input_shape(m);
  int64_t n = mxu_shape_count(&shape);
  float *x = malloc((size_t)(ROWS * n) * sizeof *x);
  int32_t labels[ROWS];
  unsigned s = 7;
  for (int64_t i = 0; x && i < ROWS * n; i++) {
    s = s * 1103515245u + 12345u;
    x[i] = (float)((s >> 9) & 0xff) / 64.0f - 2.0f;
  }
  for (int r = 0; r < ROWS; r++) labels[r] = (r * 2 + 1) % CLASSES;
  mxu_dataset *set = NULL;
  if (x)
    CHECK_OK(mxu_dataset_from_arrays(x, labels, ROWS, shape, CLASSES, &set));
  free(x);
  return set;
}

static void check_case(const layer_case *c) {
  mxu_model *ref = build(c, MXU_BACKEND_CPU_REF);
  mxu_model *dev = build(c, MXU_BACKEND_PJRT);
  mxu_dataset *set = ref ? data(ref) : NULL;
  if (!ref || !dev || !set) {
    mxu_model_free(ref), mxu_model_free(dev), mxu_dataset_free(set);
    return;
  }
  int64_t n = ref->trainable_count;
  size_t bytes = (size_t)n * sizeof(float);
  /* State (moving statistics, Normalization's mean and variance) away
   * from its initial zeros and ones. */
  for (int64_t i = 0; i < ref->state_count; i++)
    ref->state[i] = 0.5f + (float)(i % 7) / 7.0f;
  memcpy(dev->weights, ref->weights, bytes);
  memcpy(dev->state, ref->state, (size_t)ref->state_count * sizeof(float));
  float *before = malloc(bytes);
  if (before) memcpy(before, ref->weights, bytes);
  mxu_fit_config fc = mxu_fit_defaults();
  fc.epochs = 1;
  fc.batch_size = ROWS;
  fc.shuffle = 0;
  fc.verbose = 0;
  const mxu_history *a = NULL, *b = NULL;
  CHECK_OK(mxu_fit(ref, set, &fc, &a));
  CHECK_OK(mxu_fit(dev, set, &fc, &b));
  if (a && b)
    CHECK_MSG(fabs(a->epochs[0].loss - b->epochs[0].loss) <=
                  c->tolerance * fabs(a->epochs[0].loss),
              "%s: loss %.8g on pjrt, %.8g on cpu_ref", c->name,
              b->epochs[0].loss, a->epochs[0].loss);
  /* Each weight's change is its gradient (rate 1), relative to the
   * largest of its parameter's, or to a thousandth of the model's
   * largest: some gradients are 0 but for rounding (an attention key's
   * bias shifts every score of a softmax alike). */
  double model_largest = 0;
  for (int64_t i = 0; before && i < n; i++)
    model_largest = fmax(model_largest, fabs(ref->weights[i] - before[i]));
  for (int p = 0; before && p < ref->param_count; p++) {
    const mxu_param *q = &ref->params[p];
    if (!q->trainable) continue;
    double worst = 0, largest = fmax(1e-6, 1e-3 * model_largest);
    for (int64_t i = q->offset; i < q->offset + q->count; i++)
      largest = fmax(largest, fabs(ref->weights[i] - before[i]));
    for (int64_t i = q->offset; i < q->offset + q->count; i++)
      worst = fmax(worst, fabs(ref->weights[i] - dev->weights[i]) / largest);
    CHECK_MSG(worst <= c->tolerance, "%s: %s's gradient off by %.3g", c->name,
              q->name, worst);
  }
  for (int64_t i = 0; i < ref->state_count; i++)
    CHECK_MSG(fabs(ref->state[i] - dev->state[i]) <=
                  c->tolerance * fmax(1.0, fabs(ref->state[i])),
              "%s: state %lld: %.8g on pjrt, %.8g on cpu_ref", c->name,
              (long long)i, dev->state[i], ref->state[i]);
  free(before);
  mxu_dataset_free(set);
  mxu_model_free(ref);
  mxu_model_free(dev);
}

static const layer_case cases[] = {
    {"Conv2D, strides, same padding", "6, 6, 2",
     LAYER("Conv2D", "c",
           ", \"filters\": 4, \"kernel_size\": [3, 3], \"strides\": [2, 2], "
           "\"padding\": \"same\", \"activation\": \"relu\"",
           IN("lead")),
     "c", 1e-4},
    {"MaxPooling2D, AveragePooling2D", "6, 6, 2",
     LAYER("MaxPooling2D", "m", ", \"pool_size\": [2, 2]", IN("lead"))
         LAYER("AveragePooling2D", "a",
               ", \"pool_size\": [2, 2], \"strides\": [1, 1], \"padding\": "
               "\"same\"",
               IN("m")),
     "a", 1e-4},
    {"BatchNormalization", "5, 5, 2",
     LAYER("BatchNormalization", "b", ", \"momentum\": 0.5", IN("lead")), "b",
     1e-4},
    {"Activation", "4, 4, 2",
     LAYER("Activation", "s", ", \"activation\": \"swish\"", IN("lead"))
         LAYER("Activation", "g", ", \"activation\": \"gelu\"", IN("s")),
     "g", 1e-4},
    {"Add, Subtract, Multiply, Average, Maximum, Minimum, broadcast", "4, 5, 2",
     LEAD2 LAYER("Add", "add", "", IN2("lead", "lead2"))
         LAYER("Subtract", "sub", "", IN2("lead", "lead2"))
             LAYER("Multiply", "mul", "", IN2("add", "sub"))
                 LAYER("Average", "avg", "", IN2("mul", "lead"))
                     LAYER("Maximum", "max", "", IN2("avg", "lead2"))
                         LAYER("Minimum", "min", "", IN2("max", "add"))
                             LAYER("GlobalAveragePooling2D", "gap",
                                   ", \"keepdims\": true", IN("lead2"))
                                 LAYER("Multiply", "se", "", IN2("min", "gap")),
     "se", 1e-4},
    {"Concatenate, channels and rows", "4, 5, 2",
     LEAD2 LAYER("Concatenate", "c1", ", \"axis\": -1", IN2("lead", "lead2"))
         LAYER("Concatenate", "c2", ", \"axis\": 1", IN2("c1", "c1")),
     "c2", 1e-4},
    {"GlobalMaxPooling2D", "4, 5, 2",
     LAYER("GlobalMaxPooling2D", "g", "", IN("lead")), "g", 1e-4},
    {"ZeroPadding2D, Cropping2D, CenterCrop", "4, 5, 2",
     LAYER("ZeroPadding2D", "z", ", \"padding\": [[1, 2], [0, 1]]", IN("lead"))
         LAYER("Cropping2D", "k", ", \"cropping\": [[0, 1], [2, 0]]", IN("z"))
             LAYER("CenterCrop", "cc", ", \"height\": 3, \"width\": 2",
                   IN("k")),
     "cc", 1e-4},
    {"Reshape, Permute", "4, 6, 2",
     LAYER("Reshape", "r", ", \"target_shape\": [6, 4, 3]", IN("lead"))
         LAYER("Permute", "p", ", \"dims\": [2, 3, 1]", IN("r")),
     "p", 1e-4},
    {"ReLU (threshold, max_value, negative_slope), LeakyReLU, ELU, PReLU",
     "4, 4, 2",
     LAYER("ReLU", "r",
           ", \"threshold\": 0.1, \"max_value\": 0.6, \"negative_slope\": "
           "0.2",
           IN("lead")) LAYER("LeakyReLU", "l", ", \"alpha\": 0.25", IN("r"))
         LAYER("ELU", "e", ", \"alpha\": 0.7", IN("l"))
             LAYER("PReLU", "p",
                   ", \"alpha_initializer\": {\"class_name\": "
                   "\"Constant\", \"config\": {\"value\": 0.3}}, "
                   "\"shared_axes\": [1, 2]",
                   IN("e")),
     "p", 1e-4},
    {"Softmax layer", "3, 3, 2", LAYER("Softmax", "s", "", IN("lead")), "s",
     1e-4},
    {"DepthwiseConv2D, multiplier 2, strides", "6, 5, 2",
     LAYER("DepthwiseConv2D", "d",
           ", \"kernel_size\": [3, 3], \"strides\": [2, 2], \"padding\": "
           "\"same\", \"depth_multiplier\": 2, \"activation\": \"relu6\"",
           IN("lead")),
     "d", 1e-4},
    {"SeparableConv2D, dilated", "7, 7, 2",
     LAYER("SeparableConv2D", "s",
           ", \"filters\": 4, \"kernel_size\": [3, 3], \"dilation_rate\": "
           "[2, 2], \"depth_multiplier\": 2, \"activation\": \"tanh\"",
           IN("lead")),
     "s", 1e-4},
    {"Conv2DTranspose, valid and same", "3, 4, 2",
     LAYER("Conv2DTranspose", "t",
           ", \"filters\": 2, \"kernel_size\": [3, 3], \"strides\": [2, 2]",
           IN("lead"))
         LAYER("Conv2DTranspose", "t2",
               ", \"filters\": 3, \"kernel_size\": [2, 3], \"strides\": [1, "
               "2], \"padding\": \"same\", \"activation\": \"elu\"",
               IN("t")),
     "t2", 1e-4},
    {"LayerNormalization, GroupNormalization", "4, 3, 2",
     LAYER("Conv2D", "wide", ", \"filters\": 4, \"kernel_size\": [1, 1]",
           IN("lead"))
         LAYER("LayerNormalization", "ln", ", \"axis\": -1", IN("wide"))
             LAYER("GroupNormalization", "gn", ", \"groups\": 2", IN("ln")),
     "gn", 1e-4},
    {"RMSNormalization, LayerNormalization rms_scaling", "4, 3, 2",
     LAYER("Conv2D", "wide", ", \"filters\": 4, \"kernel_size\": [1, 1]",
           IN("lead")) LAYER("RMSNormalization", "rms",
                             ", \"axis\": [-1], \"epsilon\": 0.01", IN("wide"))
         LAYER("LayerNormalization", "ln",
               ", \"rms_scaling\": true, \"center\": true", IN("rms")),
     "ln", 1e-4},
    {"UpSampling2D nearest and bilinear, Resizing", "3, 4, 2",
     LAYER("UpSampling2D", "u", ", \"size\": [2, 3]", IN("lead"))
         LAYER("UpSampling2D", "b",
               ", \"size\": [2, 1], \"interpolation\": \"bilinear\"", IN("u"))
             LAYER("Resizing", "z", ", \"height\": 5, \"width\": 7", IN("b")),
     "z", 1e-4},
    {"Rescaling, Normalization, UnitNormalization", "3, 3, 2",
     LAYER("Rescaling", "r", ", \"scale\": 0.5, \"offset\": -0.25", IN("lead"))
         LAYER("Normalization", "n", "", IN("r"))
             LAYER("UnitNormalization", "u", "", IN("n")),
     "u", 1e-4},
    {"Normalization given mean and variance: per channel, one for all",
     "3, 3, 2",
     LAYER("Normalization", "n",
           ", \"mean\": [0.5, -0.25, 0.1], \"variance\": [4, 0.25, 0.5]",
           IN("lead"))
         LAYER("Normalization", "i",
               ", \"invert\": true, \"mean\": 0.3, \"variance\": 2.25",
               IN("n")),
     "i", 1e-4},
    /* The sequences: (8, 3) steps from the lead's (8, 1, 3) image. */
    {"Conv1D causal dilated, strided same grouped; MaxPooling1D, "
     "AveragePooling1D, GlobalMaxPooling1D keepdims",
     "8, 1, 2",
     LAYER("Reshape", "r", ", \"target_shape\": [8, 3]", IN("lead"))
         LAYER("Conv1D", "c",
               ", \"filters\": 4, \"kernel_size\": 3, \"padding\": \"causal\", "
               "\"dilation_rate\": 2, \"activation\": \"tanh\"",
               IN("r"))
             LAYER("Conv1D", "s",
                   ", \"filters\": 4, \"kernel_size\": [3], \"strides\": 2, "
                   "\"padding\": \"same\", \"groups\": 2",
                   IN("c"))
                 LAYER("MaxPooling1D", "m",
                       ", \"pool_size\": 2, \"strides\": 1, \"padding\": "
                       "\"same\"",
                       IN("s")) LAYER("AveragePooling1D", "a",
                                      ", \"pool_size\": 2", IN("m"))
                     LAYER("GlobalMaxPooling1D", "g", ", \"keepdims\": true",
                           IN("a")),
     "g", 1e-4},
    /* Volumes (4, 5, 6, 3) from the lead's (20, 6, 3) image. */
    {"Conv3D same strided grouped, valid dilated; MaxPooling3D, "
     "AveragePooling3D, GlobalMaxPooling3D keepdims",
     "20, 6, 2",
     LAYER("Reshape", "r", ", \"target_shape\": [4, 5, 6, 3]", IN("lead"))
         LAYER("Conv3D", "c",
               ", \"filters\": 6, \"kernel_size\": [3, 2, 3], \"strides\": "
               "[2, 1, 1], \"padding\": \"same\", \"groups\": 3, "
               "\"activation\": \"relu\"",
               IN("r"))
             LAYER("MaxPooling3D", "m",
                   ", \"pool_size\": [1, 2, 2], \"strides\": [1, 1, 1], "
                   "\"padding\": \"same\"",
                   IN("c"))
                 LAYER("Conv3D", "d",
                       ", \"filters\": 4, \"kernel_size\": 2, "
                       "\"dilation_rate\": [1, 2, 1], \"activation\": "
                       "\"tanh\"",
                       IN("m"))
                     LAYER("AveragePooling3D", "a",
                           ", \"pool_size\": [1, 2, 2], \"padding\": "
                           "\"same\"",
                           IN("d")) LAYER("GlobalMaxPooling3D", "g",
                                          ", \"keepdims\": true", IN("a")),
     "g", 1e-4},
    {"Conv3DTranspose valid strided, same dilated", "8, 3, 2",
     LAYER("Reshape", "r", ", \"target_shape\": [2, 4, 3, 3]", IN("lead"))
         LAYER("Conv3DTranspose", "t",
               ", \"filters\": 2, \"kernel_size\": [3, 2, 2], \"strides\": "
               "[2, 1, 2], \"activation\": \"relu\"",
               IN("r"))
             LAYER("Conv3DTranspose", "s",
                   ", \"filters\": 3, \"kernel_size\": 2, \"padding\": "
                   "\"same\", \"dilation_rate\": [2, 1, 1]",
                   IN("t")),
     "s", 1e-4},
    {"ConvLSTM2D same sequences, valid strided backwards", "8, 3, 2",
     LAYER("Reshape", "r", ", \"target_shape\": [2, 4, 3, 3]", IN("lead"))
         LAYER("ConvLSTM2D", "a",
               ", \"filters\": 3, \"kernel_size\": [3, 2], \"padding\": "
               "\"same\", \"return_sequences\": true",
               IN("r"))
             LAYER("ConvLSTM2D", "b",
                   ", \"filters\": 2, \"kernel_size\": 2, \"strides\": "
                   "[2, 1], \"go_backwards\": true, \"use_bias\": false, "
                   "\"recurrent_activation\": \"hard_sigmoid\"",
                   IN("a")),
     "b", 1e-4},
    {"ConvLSTM1D same sequences, strided backwards", "8, 3, 2",
     LAYER("Reshape", "r", ", \"target_shape\": [4, 6, 3]", IN("lead")) LAYER(
         "ConvLSTM1D", "a",
         ", \"filters\": 3, \"kernel_size\": 3, \"padding\": "
         "\"same\", \"return_sequences\": true",
         IN("r")) LAYER("ConvLSTM1D", "b",
                        ", \"filters\": 2, \"kernel_size\": [2], \"strides\": "
                        "2, \"go_backwards\": true",
                        IN("a")),
     "b", 1e-4},
    {"UpSampling3D, ZeroPadding3D, Cropping3D", "8, 3, 2",
     LAYER("Reshape", "r", ", \"target_shape\": [2, 4, 3, 3]", IN("lead"))
         LAYER("UpSampling3D", "u", ", \"size\": [2, 1, 2]", IN("r"))
             LAYER("ZeroPadding3D", "p",
                   ", \"padding\": [[1, 0], [0, 2], [1, 1]]", IN("u"))
                 LAYER("Cropping3D", "c", ", \"cropping\": [1, 2, 3]", IN("p")),
     "c", 1e-4},
    {"Conv3D softmax, GlobalAveragePooling3D", "8, 3, 2",
     LAYER("Reshape", "r", ", \"target_shape\": [2, 4, 3, 3]", IN("lead"))
         LAYER("Conv3D", "c",
               ", \"filters\": 2, \"kernel_size\": [2, 1, 2], "
               "\"use_bias\": false, \"activation\": \"softmax\"",
               IN("r")) LAYER("GlobalAveragePooling3D", "g", "", IN("c")),
     "g", 1e-4},
    {"SpatialDropout1D, Conv1D valid, GlobalAveragePooling1D", "6, 1, 2",
     LAYER("Reshape", "r", ", \"target_shape\": [6, 3]", IN("lead"))
         LAYER("SpatialDropout1D", "d", ", \"rate\": 0.4", IN("r"))
             LAYER("Conv1D", "c", ", \"filters\": 2, \"kernel_size\": 2",
                   IN("d")) LAYER("GlobalAveragePooling1D", "g", "", IN("c")),
     "g", 1e-4},
    /* The recurrent layers unrolled over 6 steps. */
    {"LSTM sequences with dropout, GRU backwards sequences, SimpleRNN",
     "6, 1, 2",
     LAYER("Reshape", "r", ", \"target_shape\": [6, 3]", IN("lead"))
         LAYER("LSTM", "l",
               ", \"units\": 4, \"return_sequences\": true, \"dropout\": 0.3",
               IN("r")) LAYER("GRU", "g",
                              ", \"units\": 3, \"return_sequences\": true, "
                              "\"go_backwards\": true",
                              IN("l"))
             LAYER("SimpleRNN", "s", ", \"units\": 2", IN("g")),
     "s", 1e-4},
    {"LSTM backwards without bias, GRU with a relu cell", "5, 1, 2",
     LAYER("Reshape", "r", ", \"target_shape\": [5, 3]", IN("lead"))
         LAYER("LSTM", "l",
               ", \"units\": 3, \"return_sequences\": true, \"go_backwards\": "
               "true, \"use_bias\": false",
               IN("r")) LAYER("GRU", "g",
                              ", \"units\": 2, \"activation\": \"relu\", "
                              "\"bias_initializer\": \"ones\"",
                              IN("l")),
     "g", 1e-4},
    {"Bidirectional LSTM sequences concat, Bidirectional GRU mul, dropout",
     "5, 1, 2",
     LAYER("Reshape", "r", ", \"target_shape\": [5, 3]", IN("lead"))
         LAYER("Bidirectional", "b",
               ", \"layer\": {\"class_name\": \"LSTM\", \"config\": "
               "{\"name\": \"lstm\", \"units\": 2, \"return_sequences\": "
               "true}}",
               IN("r"))
             LAYER("Bidirectional", "g",
                   ", \"merge_mode\": \"mul\", \"layer\": {\"class_name\": "
                   "\"GRU\", \"config\": {\"name\": \"gru\", \"units\": 3, "
                   "\"dropout\": 0.4}}",
                   IN("b")),
     "g", 1e-4},
    /* MultiHeadAttention: the query also the value, causal, dropout;
     * cross-attention with a key of its own; over a (4, 4) grid. */
    {"MultiHeadAttention causal with dropout, value_dim, output_shape",
     "6, 1, 2",
     LAYER("Reshape", "r", ", \"target_shape\": [6, 3]", IN("lead"))
         LAYER("MultiHeadAttention", "a",
               ", \"num_heads\": 2, \"key_dim\": 3, \"value_dim\": 2, "
               "\"output_shape\": 4, \"dropout\": 0.3",
               "[\"r\", 0, 0, {\"value\": [\"r\", 0, 0], "
               "\"use_causal_mask\": true}]"),
     "a", 1e-4},
    {"MultiHeadAttention cross, a key of its own, no bias", "5, 1, 2",
     LAYER("Reshape", "r", ", \"target_shape\": [5, 3]", IN("lead"))
         LAYER("Dense", "v", ", \"units\": 2", IN("r"))
             LAYER("Dense", "k", ", \"units\": 4", IN("r"))
                 LAYER("MultiHeadAttention", "a",
                       ", \"num_heads\": 3, \"key_dim\": 2, "
                       "\"use_bias\": false",
                       "[\"r\", 0, 0, {\"value\": [\"v\", 0, 0], "
                       "\"key\": [\"k\", 0, 0]}]"),
     "a", 1e-4},
    {"MultiHeadAttention over a grid", "4, 4, 2",
     LAYER("MultiHeadAttention", "a", ", \"num_heads\": 2, \"key_dim\": 2",
           "[\"lead\", 0, 0, {\"value\": [\"lead\", 0, 0]}]"),
     "a", 1e-4},
    /* recurrent_dropout: a mask per gate for the inputs and for h. */
    {"LSTM dropout and recurrent_dropout, GRU and SimpleRNN "
     "recurrent_dropout",
     "6, 1, 2",
     LAYER("Reshape", "r", ", \"target_shape\": [6, 3]", IN("lead")) LAYER(
         "LSTM", "l",
         ", \"units\": 4, \"return_sequences\": true, \"dropout\": "
         "0.2, \"recurrent_dropout\": 0.3",
         IN("r")) LAYER("GRU", "g",
                        ", \"units\": 3, \"return_sequences\": true, "
                        "\"go_backwards\": true, \"recurrent_dropout\": "
                        "0.4",
                        IN("l")) LAYER("SimpleRNN", "s",
                                       ", \"units\": 2, \"dropout\": 0.3, "
                                       "\"recurrent_dropout\": 0.3",
                                       IN("g")),
     "s", 1e-4},
    /* GRU reset_after=False: the reset gate before U_h. */
    {"GRU reset_after false: sequences with dropout and recurrent_dropout, "
     "backwards without bias",
     "6, 1, 2",
     LAYER("Reshape", "r", ", \"target_shape\": [6, 3]", IN("lead"))
         LAYER("GRU", "g",
               ", \"units\": 4, \"return_sequences\": true, "
               "\"reset_after\": false, \"dropout\": 0.2, "
               "\"recurrent_dropout\": 0.4",
               IN("r")) LAYER("GRU", "b",
                              ", \"units\": 3, \"go_backwards\": true, "
                              "\"reset_after\": false, \"use_bias\": false",
                              IN("g")),
     "b", 1e-4},
    /* Keras' encoder-decoder: final states (return_state) starting the
     * next layer (initial_state, tf.keras 2's extra tensors of a call). */
    {"LSTM states into an LSTM, its final h into a SimpleRNN", "6, 1, 2",
     LAYER("Reshape", "r", ", \"target_shape\": [6, 3]", IN("lead")) LAYER(
         "LSTM", "enc",
         ", \"units\": 3, \"return_state\": true, \"go_backwards\": "
         "true, \"recurrent_dropout\": 0.3",
         IN("r")) LAYER("LSTM", "dec",
                        ", \"units\": 3, \"return_sequences\": true, "
                        "\"return_state\": true, \"dropout\": 0.2",
                        IN("r") ", [\"enc\", 0, 1, {}], [\"enc\", 0, 2, {}]")
         LAYER("SimpleRNN", "s", ", \"units\": 3",
               IN("dec") ", [\"dec\", 0, 1, {}]"),
     "s", 1e-4},
    {"Bidirectional GRU with dropout and recurrent_dropout", "5, 1, 2",
     LAYER("Reshape", "r", ", \"target_shape\": [5, 3]", IN("lead"))
         LAYER("Bidirectional", "b",
               ", \"layer\": {\"class_name\": \"GRU\", \"config\": "
               "{\"name\": \"gru\", \"units\": 2, \"dropout\": 0.25, "
               "\"recurrent_dropout\": 0.25}}",
               IN("r")),
     "b", 1e-4},
    /* An Embedding's mask (mask_zero): ids relu(x), about half of them 0,
     * through LSTM and Bidirectional sequences to the masked mean, and
     * through self-attention. */
    {"Masked LSTM, Bidirectional GRU, MultiHeadAttention and "
     "GlobalAveragePooling1D",
     "8, 1, 1",
     LAYER("Reshape", "lr", ", \"target_shape\": [8, 3]", IN("lead")) LAYER(
         "Activation", "ids", ", \"activation\": \"relu\"",
         IN("x")) LAYER("Reshape", "ir", ", \"target_shape\": [8]", IN("ids"))
         LAYER("Embedding", "e",
               ", \"input_dim\": 3, \"output_dim\": 2, "
               "\"mask_zero\": true",
               IN("ir")) LAYER("Concatenate", "c", "", IN2("e", "lr"))
             LAYER("LSTM", "l", ", \"units\": 3, \"return_sequences\": true",
                   IN("c")) LAYER("Bidirectional", "b",
                                  ", \"layer\": {\"class_name\": \"GRU\", "
                                  "\"config\": {\"name\": \"gru\", "
                                  "\"units\": 2, \"return_sequences\": true}}",
                                  IN("l"))
                 LAYER("Dense", "d", ", \"units\": 3", IN("b"))
                     LAYER("GlobalAveragePooling1D", "g", "", IN("d"))
                         LAYER("MultiHeadAttention", "m",
                               ", \"num_heads\": 2, \"key_dim\": 2",
                               "[\"c\", 0, 0, {\"value\": [\"c\", 0, 0]}]")
                             LAYER("GlobalAveragePooling1D", "gm", "", IN("m"))
                                 LAYER("Concatenate", "o", "", IN2("g", "gm")),
     "o", 1e-4},
    /* Keras' Attention and AdditiveAttention: concat scores with dropout
     * and tf.keras 2's use_causal_mask in each tensor's kwargs; then over
     * an Embedding's mask, a scaled dot product and the additive score. */
    {"Attention concat causal with dropout, AdditiveAttention with a key",
     "6, 1, 2",
     LAYER("Reshape", "r", ", \"target_shape\": [6, 3]", IN("lead"))
         LAYER("Attention", "a",
               ", \"use_scale\": true, \"score_mode\": \"concat\", "
               "\"dropout\": 0.2",
               "[\"r\", 0, 0, {\"use_causal_mask\": true}], [\"r\", 0, 0, "
               "{\"use_causal_mask\": true}]")
             LAYER("AdditiveAttention", "b", "", IN("a") ", " IN2("r", "r")),
     "b", 1e-4},
    {"Masked Attention and AdditiveAttention", "8, 1, 1",
     LAYER("Reshape", "lr", ", \"target_shape\": [8, 3]", IN("lead"))
         LAYER("Activation", "ids", ", \"activation\": \"relu\"", IN("x"))
             LAYER("Reshape", "ir", ", \"target_shape\": [8]", IN("ids")) LAYER(
                 "Embedding", "e",
                 ", \"input_dim\": 3, \"output_dim\": 2, "
                 "\"mask_zero\": true",
                 IN("ir")) LAYER("Concatenate", "c", "", IN2("e", "lr"))
                 LAYER("Attention", "a", ", \"use_scale\": true", IN2("c", "c"))
                     LAYER("AdditiveAttention", "b", ", \"use_scale\": true",
                           IN2("a", "c")),
     "b", 1e-4},
    /* Masking of relu(lead + x): a step is padding where its 3 features
     * are all <= 0 (about 1 in 8); its mask computed from a tensor with a
     * gradient. RepeatVector after the masked mean. */
    {"Masking, LSTM, masked mean, RepeatVector", "8, 1, 3",
     LAYER("Reshape", "lr", ", \"target_shape\": [8, 3]", IN("lead"))
         LAYER("Reshape", "xr", ", \"target_shape\": [8, 3]",
               IN("x")) LAYER("Add", "sum", "", IN2("lr", "xr"))
             LAYER("Activation", "a", ", \"activation\": \"relu\"", IN("sum"))
                 LAYER("Masking", "k", ", \"mask_value\": 0.0", IN("a")) LAYER(
                     "LSTM", "l", ", \"units\": 3, \"return_sequences\": true",
                     IN("k")) LAYER("GlobalAveragePooling1D", "g", "", IN("l"))
                     LAYER("RepeatVector", "rv", ", \"n\": 2", IN("g"))
                         LAYER("SimpleRNN", "s", ", \"units\": 2", IN("rv")),
     "s", 1e-4},
    /* A convolutional autoencoder's decoder: Conv1DTranspose strided and
     * valid, UpSampling1D, ZeroPadding1D, Cropping1D. */
    {"Conv1DTranspose, UpSampling1D, ZeroPadding1D, Cropping1D", "5, 1, 3",
     LAYER("Reshape", "lr", ", \"target_shape\": [5, 3]", IN("lead"))
         LAYER("Conv1DTranspose", "t",
               ", \"filters\": 4, \"kernel_size\": 3, \"strides\": 2, "
               "\"padding\": \"same\", \"activation\": \"tanh\"",
               IN("lr")) LAYER("UpSampling1D", "u", ", \"size\": 2", IN("t"))
             LAYER("ZeroPadding1D", "p", ", \"padding\": [1, 2]", IN("u"))
                 LAYER("Cropping1D", "c", ", \"cropping\": [2, 1]", IN("p"))
                     LAYER("Conv1DTranspose", "v",
                           ", \"filters\": 2, \"kernel_size\": 2", IN("c")),
     "v", 1e-4},
    /* Dot: cosine similarities of the rows along the features, a dot
     * along the steps, of vectors. */
    {"Dot along the features (normalized), the steps, of vectors", "5, 1, 3",
     LAYER("Reshape", "lr", ", \"target_shape\": [5, 3]", IN("lead"))
         LAYER("Dense", "d", ", \"units\": 3", IN("lr")) LAYER(
             "Dot", "cos", ", \"axes\": 2, \"normalize\": true", IN2("lr", "d"))
             LAYER("Dot", "st", ", \"axes\": [1, 1]", IN2("lr", "d"))
                 LAYER("Flatten", "f1", "", IN("cos")) LAYER("Flatten", "f2",
                                                             "", IN("st"))
                     LAYER("Dense", "v1", ", \"units\": 4", IN("f1"))
                         LAYER("Dense", "v2", ", \"units\": 4", IN("f2")) LAYER(
                             "Dot", "vv", ", \"axes\": -1", IN2("v1", "v2"))
                             LAYER("Concatenate", "o", "",
                                   IN2("f1", "f2") ", " IN("vv")),
     "o", 1e-4},
    /* The input's values in [-2, 2) as ids: -1.x outside the table, -0.x
     * and 0.x row 0, 1.x row 1. Through a linear Activation: fit refuses
     * ids outside the table in an Embedding's own data. */
    {"Embedding of the input, joined to the lead", "4, 1, 3",
     LAYER("Activation", "ids", ", \"activation\": \"linear\"", IN("x")) LAYER(
         "Embedding", "e", ", \"input_dim\": 3, \"output_dim\": 2", IN("ids"))
         LAYER("Reshape", "er", ", \"target_shape\": [4, 1, 6]", IN("e"))
             LAYER("Concatenate", "j", "", IN2("lead", "er")),
     "j", 1e-4},
    {"LayerScale (keras.applications ConvNeXt's)", "4, 4, 2",
     LAYER("LayerScale", "s", ", \"init_values\": 0.3, \"projection_dim\": 3",
           IN("lead")),
     "s", 1e-4},
    {"CustomScaleLayer (keras.applications InceptionResNetV2's)", "4, 4, 2",
     LEAD2 LAYER("CustomScaleLayer", "cs", ", \"scale\": 0.17",
                 IN2("lead", "lead2")),
     "cs", 1e-4},
    {"GaussianNoise, GaussianDropout, Dropout, SpatialDropout2D", "4, 4, 2",
     LAYER("GaussianNoise", "n", ", \"stddev\": 0.3", IN("lead"))
         LAYER("GaussianDropout", "g", ", \"rate\": 0.2", IN("n"))
             LAYER("Dropout", "d", ", \"rate\": 0.3", IN("g"))
                 LAYER("SpatialDropout2D", "s", ", \"rate\": 0.4", IN("d")),
     "s", 1e-4},
    {"AlphaDropout, AlphaDropout noise_shape, SpatialDropout3D, Identity",
     "8, 3, 2",
     LAYER("AlphaDropout", "a", ", \"rate\": 0.3", IN("lead"))
         LAYER("AlphaDropout", "b",
               ", \"rate\": 0.4, \"noise_shape\": [null, 1, 3, 1]", IN("a"))
             LAYER("Reshape", "r", ", \"target_shape\": [2, 4, 3, 3]", IN("b"))
                 LAYER("SpatialDropout3D", "s", ", \"rate\": 0.4", IN("r"))
                     LAYER("Identity", "i", "", IN("s")),
     "i", 1e-4},
    {"ActivityRegularization, activity_regularizer", "4, 4, 2",
     LAYER("ActivityRegularization", "a", ", \"l1\": 0.01, \"l2\": 0.02",
           IN("lead"))
         LAYER("Conv2D", "c",
               ", \"filters\": 2, \"kernel_size\": [2, 2], "
               "\"activity_regularizer\": {\"class_name\": \"L2\", "
               "\"config\": {\"l2\": 0.05}}",
               IN("a")),
     "c", 1e-4},
    {"RandomFlip, -Translation, -Zoom, -Contrast, -Rotation, -Shear, "
     "RandomCrop (the host's, after the input)",
     "6, 6, 2",
     LAYER("RandomFlip", "f", ", \"mode\": \"horizontal\"", IN("x")) LAYER(
         "RandomTranslation", "t",
         ", \"height_factor\": 0.2, \"width_factor\": 0.1",
         IN("f")) LAYER("RandomZoom", "z", ", \"height_factor\": 0.2", IN("t"))
         LAYER("RandomContrast", "q", ", \"factor\": 0.3", IN("z"))
             LAYER("RandomRotation", "r", ", \"factor\": 0.1", IN("q")) LAYER(
                 "RandomShear", "sh", ", \"x_factor\": 0.2, \"y_factor\": 0.1",
                 IN("r")) LAYER("RandomCrop", "k",
                                ", \"height\": 4, \"width\": 5", IN("sh"))
                 LAYER("Conv2D", "c",
                       ", \"filters\": 3, \"kernel_size\": [1, 1]", IN("k"))
                     LAYER("GlobalAveragePooling2D", "g1", "", IN("c"))
                         LAYER("GlobalAveragePooling2D", "g2", "", IN("lead"))
                             LAYER("Add", "s", "", IN2("g1", "g2")),
     "s", 1e-4},
    {"RandomGrayscale, RandomInvert, Solarization, RandomPosterization (the "
     "host's, after the input)",
     "5, 5, 3",
     LAYER("RandomGrayscale", "gray", ", \"factor\": 0.5", IN("x"))
         LAYER("RandomInvert", "inv",
               ", \"factor\": [0, 0.6], \"value_range\": "
               "[-1, 1]",
               IN("gray"))
             LAYER("Solarization", "sol",
                   ", \"addition_factor\": [0, 0.1], \"threshold_factor\": [0, "
                   "0.9], \"value_range\": [-1, 1]",
                   IN("inv")) LAYER("RandomPosterization", "post",
                                    ", \"factor\": 6, \"value_range\": [-1, 1]",
                                    IN("sol"))
                 LAYER("Conv2D", "c",
                       ", \"filters\": 3, \"kernel_size\": [1, 1]", IN("post"))
                     LAYER("GlobalAveragePooling2D", "g1", "", IN("c"))
                         LAYER("GlobalAveragePooling2D", "g2", "", IN("lead"))
                             LAYER("Add", "s", "", IN2("g1", "g2")),
     "s", 1e-4},
};

/* An augmentation after a trainable layer would stop its gradient: refused,
 * saying where it may go. */
static void augmentation_refused(void) {
  const layer_case c = {"RandomFlip after a convolution", "4, 4, 2",
                        LAYER("RandomFlip", "f", "", IN("lead")), "f", 0};
  char *json = model_json(&c);
  mxu_model *m = NULL;
  CHECK_OK(mxu_model_from_json(json, c.name, &m, NULL, NULL));
  free(json);
  mxu_compile_config cc = mxu_compile_defaults();
  cc.batch_size = ROWS;
  cc.backend = MXU_BACKEND_PJRT;
  if (m)
    EXPECT_FAIL(mxu_compile(m, &cc), MXU_ERR_UNSUPPORTED,
                "'f' (RandomFlip) follows 'lead': random augmentations are "
                "emitted only straight after the input");
  mxu_model_free(m);
}

int main(void) {
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
    check_case(&cases[i]);
  augmentation_refused();
  return check_report("test_pjrt_layers");
}
