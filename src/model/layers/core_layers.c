/* core_layers.c — Keras' core family: Dense, Flatten, the Dropouts
 * (Dropout, SpatialDropout1D/2D/3D, AlphaDropout: one mask computation),
 * and InputLayer (a model input as a node). */
#include "model/layers/layers.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static size_t batch_bytes(const mxu_layer *layer, const mxu_shape *shape) {
  return (size_t)layer->compiled->batch * (size_t)mxu_shape_count(shape) *
         sizeof(float);
}

/* ---- Dense --------------------------------------------------------------
 */

/* On an input of higher rank Dense acts on the last axis, each position
 * of the others a row of its own, as Keras' does; EinsumDense on its last
 * `contracted` axes, as one. */
static int64_t dense_in(const mxu_layer *layer) {
  const mxu_shape *in = &layer->in_shape;
  int contracted = layer->config.dense.contracted;
  int64_t n = 1;
  for (int d = in->rank - (contracted ? contracted : 1); d < in->rank; d++)
    n *= in->dims[d];
  return n;
}

static int64_t dense_rows(const mxu_layer *layer) {
  return mxu_shape_count(&layer->in_shape) / dense_in(layer);
}

/* EinsumDense: the kept axes, then the new ones; the units their product,
 * a softmax over the last axis only where it is the only new one. */
static mxu_status einsum_infer(mxu_layer *layer) {
  mxu_dense_config *c = &layer->config.dense;
  const mxu_shape *in = &layer->in_shape;
  int kept = in->rank - c->contracted;
  if (kept < 0 || kept + c->new_axes.rank > MXU_MAX_RANK)
    return mxu_fail(MXU_ERR_SHAPE,
                    "%s: input of %d axes for an equation contracting %d and "
                    "adding %d",
                    layer->name, in->rank, c->contracted, c->new_axes.rank);
  if (mxu_activation_rowwise(c->activation) && c->new_axes.rank > 1)
    return mxu_fail(MXU_ERR_UNSUPPORTED,
                    "%s: a %s over the last of several new axes is not "
                    "supported",
                    layer->name, mxu_json_activation_name(c->activation));
  layer->out_shape.rank = kept + c->new_axes.rank;
  int64_t units = 1;
  for (int d = 0; d < layer->out_shape.rank; d++) {
    int64_t v = d < kept ? in->dims[d] : c->new_axes.dims[d - kept];
    layer->out_shape.dims[d] = v;
    if (d >= kept) units *= v;
  }
  if (units < 1 || units > INT_MAX)
    return mxu_fail(MXU_ERR_SHAPE, "%s: %lld output values a row", layer->name,
                    (long long)units);
  c->units = (int)units;
  return MXU_OK;
}

static mxu_status dense_infer(mxu_layer *layer) {
  if (layer->in_shape.rank < 1)
    return mxu_fail(MXU_ERR_SHAPE, "%s: input has no dimensions", layer->name);
  if (layer->config.dense.contracted) return einsum_infer(layer);
  if (layer->config.dense.units <= 0)
    return mxu_fail(MXU_ERR_ARG, "%s: units must be positive, got %d",
                    layer->name, layer->config.dense.units);
  layer->out_shape = layer->in_shape;
  layer->out_shape.dims[layer->out_shape.rank - 1] = layer->config.dense.units;
  return MXU_OK;
}

/* EinsumDense's kernel: (contracted dims..., new dims...), bias the new
 * dims; Keras' glorot fans those of the (in, units) product. */
static int dense_declare(const mxu_layer *layer, mxu_param_decl *decls) {
  int64_t in = dense_in(layer), out = layer->config.dense.units;
  int64_t kernel[2] = {in, out};
  const mxu_dense_config *c = &layer->config.dense;
  mxu_shape kernel_shape = mxu_shape_make(2, kernel),
            bias_shape = mxu_shape_make(1, &out);
  if (c->contracted) {
    const mxu_shape *x = &layer->in_shape;
    kernel_shape =
        mxu_shape_make(c->contracted, x->dims + x->rank - c->contracted);
    for (int d = 0; d < c->new_axes.rank; d++)
      kernel_shape.dims[kernel_shape.rank++] = c->new_axes.dims[d];
    bias_shape = c->new_axes;
  }
  decls[0] = mxu_weight_decl("kernel", kernel_shape, &c->kernel,
                             mxu_init_glorot_uniform());
  if (c->contracted) decls[0].fans = mxu_shape_make(2, kernel); /* Keras 3's */
  if (!c->use_bias) return 1;
  decls[1] = mxu_weight_decl("bias", bias_shape, &c->bias, mxu_init_zeros());
  return 2;
}

static mxu_status dense_plan(mxu_layer *layer, const mxu_backend *backend,
                             int batch, mxu_arena *layout) {
  const mxu_dense_config *c = &layer->config.dense;
  /* Under mixed_bfloat16 the last Dense multiplies in bf16 too, as in
   * Keras, but its logits come out f32 and the softmax and the loss read
   * them in f32: Keras' advice of a float32 output layer, for free. */
  int64_t rows = (int64_t)batch * dense_rows(layer);
  if (rows > INT_MAX)
    return mxu_fail(MXU_ERR_SHAPE, "%s: %lld rows for Dense (at most %d)",
                    layer->name, (long long)rows, INT_MAX);
  mxu_dense_desc d = {(int)rows,   (int)dense_in(layer), c->units,
                      c->use_bias, MXU_LINEAR,           layer->compiled->bf16};
  MXU_TRY(mxu_epilogue_plan(layer, c->activation, backend, rows, c->units,
                            layout, &d.activation));
  return backend->dense_create(&d, &layer->compiled->ops[0]);
}

static void dense_forward(mxu_layer *layer, const mxu_layer_run *run) {
  mxu_activation act = layer->config.dense.activation;
  run->backend->dense_forward(run->ops[0], run->x, run->w[0],
                              layer->config.dense.use_bias ? run->w[1] : NULL,
                              mxu_epilogue_target(layer, act, run));
  mxu_epilogue_forward(layer, act, run);
}

static void dense_backward(mxu_layer *layer, const mxu_layer_run *run) {
  const float *dz =
      mxu_epilogue_backward(layer, layer->config.dense.activation, run);
  run->backend->dense_backward_weights(run->ops[0], run->x, dz, run->dw[0],
                                       layer->config.dense.use_bias ? run->dw[1]
                                                                    : NULL);
  if (run->need_dx)
    run->backend->dense_backward_data(run->ops[0], dz, run->w[0], run->dx);
}

static const float *dense_logits(const mxu_layer *layer,
                                 const mxu_layer_run *run) {
  return mxu_epilogue_logits(layer, layer->config.dense.activation, run);
}

/* ---- Flatten -------------------------------------------------------------
 */

static const char *const flatten_keys[] = {"data_format", NULL};

static mxu_status read_flatten(const mxu_json_where *where, const cJSON *config,
                               mxu_json_node *node, const char *name) {
  /* channels_first would flatten in (c, h, w) order. */
  MXU_TRY(mxu_json_data_format(where, config));
  return mxu_json_applied(
      where, node, mxu_apply_flatten(node->model, name, node->inputs[0]));
}

static void write_flatten(mxu_json_out *out, const mxu_layer *layer,
                          cJSON *config) {
  (void)layer;
  mxu_json_put_string(out, config, "data_format", "channels_last");
}

/* ---- Dense ---------------------------------------------------------------
 */

static const char *const dense_keys[] = {"units", "activation", "use_bias",
                                         MXU_WEIGHT_OPTION_KEYS};

static mxu_status read_dense(const mxu_json_where *where, const cJSON *config,
                             mxu_json_node *node, const char *name) {
  mxu_dense_config dense = mxu_dense_defaults(0);
  dense.name = name;
  MXU_TRY(mxu_json_int(where, config, "units", MXU_JSON_REQUIRED, 1, INT_MAX,
                       &dense.units));
  MXU_TRY(mxu_json_activation(where, config, "activation",
                              node->model->keras2_names, &dense.activation));
  MXU_TRY(mxu_json_bool(where, config, "use_bias", &dense.use_bias));
  MXU_TRY(mxu_config_weight_options(where, config, "kernel", &dense.kernel));
  MXU_TRY(mxu_config_weight_options(where, config, "bias", &dense.bias));
  return mxu_json_applied(
      where, node, mxu_apply_dense(node->model, &dense, node->inputs[0]));
}

static void write_dense(mxu_json_out *out, const mxu_layer *layer,
                        cJSON *config) {
  const mxu_dense_config *dense = &layer->config.dense;
  mxu_json_put_number(out, config, "units", dense->units);
  mxu_json_put_string(out, config, "activation",
                      mxu_json_activation_name(dense->activation));
  mxu_json_put_bool(out, config, "use_bias", dense->use_bias);
  mxu_config_put_initializers(out, config, "kernel", &dense->kernel.initializer,
                              mxu_init_glorot_uniform(), "bias",
                              &dense->bias.initializer, mxu_init_zeros());
  /* Keras 3 writes activity_regularizer only when one is set. */
  mxu_config_put_penalties(out, config, "kernel", &dense->kernel, "bias",
                           &dense->bias, !out->keras3);
}

/* ---- Dropout -------------------------------------------------------------
 */

static const char *const dropout_keys[] = {"rate", "noise_shape", "seed", NULL};
static const char *const spatial_dropout_keys[] = {"rate", "noise_shape",
                                                   "seed", "data_format", NULL};

/* noise_shape: null, or [null, d1, ...] with each d null or a size. */
static mxu_status read_noise_shape(const mxu_json_where *where,
                                   const cJSON *config, mxu_shape *noise) {
  const cJSON *v = mxu_json_get(config, "noise_shape");
  *noise = (mxu_shape){0};
  if (!v || cJSON_IsNull(v)) return MXU_OK;
  int rank = cJSON_IsArray(v) ? cJSON_GetArraySize(v) - 1 : -1;
  char text[128];
  mxu_json_text(v, text, sizeof text);
  if (rank < 1 || rank > MXU_MAX_RANK ||
      !cJSON_IsNull(cJSON_GetArrayItem(v, 0)))
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                         "noise_shape %s is not supported (a list starting "
                         "with null, the batch, and at most %d more)",
                         text, MXU_MAX_RANK);
  noise->rank = rank;
  for (int d = 0; d < rank; d++) {
    const cJSON *e = cJSON_GetArrayItem(v, d + 1);
    if (cJSON_IsNull(e)) continue;
    if (!cJSON_IsNumber(e) || !(e->valuedouble >= 1) ||
        e->valuedouble > INT_MAX ||
        e->valuedouble != (double)(int)e->valuedouble)
      return mxu_json_fail(where, MXU_ERR_FORMAT,
                           "noise_shape %s must hold null or positive sizes",
                           text);
    noise->dims[d] = (int64_t)e->valuedouble;
  }
  return MXU_OK;
}

static mxu_status read_dropouts(const mxu_json_where *where,
                                const cJSON *config, mxu_json_node *node,
                                const char *name, int spatial) {
  float rate = 0;
  mxu_shape noise;
  MXU_TRY(mxu_json_float(where, config, "rate", MXU_JSON_REQUIRED, &rate));
  MXU_TRY(read_noise_shape(where, config, &noise));
  MXU_TRY(mxu_json_data_format(where, config));
  /* The seed is ignored: mxu's masks come from its own counter-based
   * streams, keyed by the fit seed. */
  return mxu_json_applied(where, node,
                          mxu_apply_dropout_noise(node->model, name, rate,
                                                  noise, spatial,
                                                  node->inputs[0]));
}

static mxu_status read_dropout(const mxu_json_where *where, const cJSON *config,
                               mxu_json_node *node, const char *name) {
  return read_dropouts(where, config, node, name, 0);
}

static mxu_status read_spatial_dropout(const mxu_json_where *where,
                                       const cJSON *config, mxu_json_node *node,
                                       const char *name) {
  return read_dropouts(where, config, node, name, MXU_SPATIAL_2D);
}

static mxu_status read_spatial_dropout1d(const mxu_json_where *where,
                                         const cJSON *config,
                                         mxu_json_node *node,
                                         const char *name) {
  return read_dropouts(where, config, node, name, MXU_SPATIAL_1D);
}

static mxu_status read_spatial_dropout3d(const mxu_json_where *where,
                                         const cJSON *config,
                                         mxu_json_node *node,
                                         const char *name) {
  return read_dropouts(where, config, node, name, MXU_SPATIAL_3D);
}

static mxu_status read_alpha_dropout(const mxu_json_where *where,
                                     const cJSON *config, mxu_json_node *node,
                                     const char *name) {
  return read_dropouts(where, config, node, name, MXU_ALPHA_DROPOUT);
}

/* The rank the SpatialDropouts take (one draw per channel); 0 for the
 * others. */
static int spatial_rank(const mxu_layer *layer) {
  return layer->cls == &mxu_spatial_dropout1d_class   ? 2
         : layer->cls == &mxu_spatial_dropout2d_class ? 3
         : layer->cls == &mxu_spatial_dropout3d_class ? 4
                                                      : 0;
}

static int is_spatial(const mxu_layer *layer) {
  return spatial_rank(layer) > 0;
}

static int is_alpha(const mxu_layer *layer) {
  return layer->cls == &mxu_alpha_dropout_class;
}

/* Keras writes the noise_shape it was given: SpatialDropout2D none. Keras
 * 3's SpatialDropouts take only rate, seed, name, dtype and (2D, 3D)
 * data_format: their constructors refuse trainable and noise_shape. They
 * write their dtype as its name. */
static void write_dropout(mxu_json_out *out, const mxu_layer *layer,
                          cJSON *config) {
  const mxu_dropout_config *c = &layer->config.dropout;
  mxu_json_put_float(out, config, "rate", c->rate);
  if (out->keras3 && is_spatial(layer)) {
    cJSON_DeleteItemFromObjectCaseSensitive(config, "trainable");
    cJSON_DeleteItemFromObjectCaseSensitive(config, "dtype");
    mxu_json_put_string(out, config, "dtype", "float32");
    mxu_json_put_null(out, config, "seed");
    if (spatial_rank(layer) > 2) /* SpatialDropout1D has none */
      mxu_json_put_string(out, config, "data_format", "channels_last");
    return;
  }
  if (c->noise.rank == 0 || is_spatial(layer)) {
    mxu_json_put_null(out, config, "noise_shape");
  } else {
    cJSON *list = cJSON_CreateArray();
    if (list) cJSON_AddItemToArray(list, cJSON_CreateNull());
    for (int d = 0; list && d < c->noise.rank; d++)
      cJSON_AddItemToArray(
          list, c->noise.dims[d] ? cJSON_CreateNumber((double)c->noise.dims[d])
                                 : cJSON_CreateNull());
    mxu_json_put(out, config, "noise_shape", list);
  }
  mxu_json_put_null(out, config, "seed");
}

/* ---- EinsumDense ---------------------------------------------------------
 * The equations Dense computes: in = [batch letter or ...][kept][contracted],
 * kernel = [contracted][new], out = [the same batch][kept][new], each group
 * in order; bias_axes none or the new letters. Others (a transposed
 * output, a kernel axis shared with the batch) are refused. */

static const char *const einsum_keys[] = {
    "equation",  "output_shape", "activation",          "bias_axes",
    "lora_rank", "lora_alpha",   "quantization_config", MXU_WEIGHT_OPTION_KEYS};

typedef struct einsum_spec {
  char in[16], kernel[16], out[16]; /* the letters, batch and ... taken off */
  int ellipsis;
} einsum_spec;

/* Splits "abc,cde->abde" (or "...b,bc->...c") into its letters without
 * the batch's. 0 when it is not of that form. */
static int einsum_split(const char *equation, einsum_spec *s) {
  memset(s, 0, sizeof *s);
  const char *comma = strchr(equation, ','), *arrow = strstr(equation, "->");
  if (!comma || !arrow || arrow < comma) return 0;
  size_t n_in = (size_t)(comma - equation),
         n_kernel = (size_t)(arrow - comma - 1), n_out = strlen(arrow + 2);
  const char *in = equation, *out = arrow + 2;
  if (n_in >= sizeof s->in || n_kernel >= sizeof s->kernel ||
      n_out >= sizeof s->out)
    return 0;
  s->ellipsis = strncmp(in, "...", 3) == 0;
  size_t skip = s->ellipsis ? 3 : 1;
  if (n_in < skip || n_out < skip || strncmp(in, out, skip) != 0) return 0;
  memcpy(s->in, in + skip, n_in - skip);
  memcpy(s->kernel, comma + 1, n_kernel);
  memcpy(s->out, out + skip, n_out - skip);
  if (!s->ellipsis && strchr(s->kernel, in[0])) return 0;
  return 1;
}

/* The contracted letters (the longest tail of the input the kernel starts
 * with, none of them in the output) and the new ones (the kernel's rest),
 * where out is the input's others, then the new: 0 when it is not. */
static int einsum_groups(const einsum_spec *s, int *contracted, int *added) {
  size_t n_in = strlen(s->in), n_kernel = strlen(s->kernel);
  size_t c = n_kernel < n_in ? n_kernel : n_in;
  while (c > 0 && strncmp(s->in + n_in - c, s->kernel, c) != 0) c--;
  for (size_t i = 0; i < c; i++)
    if (strchr(s->out, s->kernel[i])) return 0;
  char want[40];
  snprintf(want, sizeof want, "%.*s%s", (int)(n_in - c), s->in, s->kernel + c);
  if (c == 0 || strcmp(want, s->out) != 0) return 0;
  *contracted = (int)c;
  *added = (int)(n_kernel - c);
  return *added > 0;
}

/* output_shape: a size, or a list of sizes and nulls, one per output letter
 * after the batch (or ...). */
static mxu_status read_output_shape(const mxu_json_where *where,
                                    const cJSON *config, size_t letters,
                                    mxu_shape *shape) {
  const cJSON *v = mxu_json_get(config, "output_shape");
  *shape = (mxu_shape){0};
  int n = cJSON_IsNumber(v) ? 1 : cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
  int fits = n == (int)letters && n <= MXU_MAX_RANK;
  for (int d = 0; fits && d < n; d++) {
    const cJSON *e = cJSON_IsNumber(v) ? v : cJSON_GetArrayItem(v, d);
    fits = cJSON_IsNull(e) ||
           (cJSON_IsNumber(e) && e->valuedouble >= 1 &&
            e->valuedouble <= INT_MAX && e->valuedouble == (int)e->valuedouble);
    shape->dims[d] = fits && !cJSON_IsNull(e) ? (int64_t)e->valuedouble : 0;
  }
  shape->rank = n;
  if (fits) return MXU_OK;
  char text[96];
  mxu_json_text(v, text, sizeof text);
  return mxu_json_fail(where, MXU_ERR_FORMAT,
                       "output_shape %s must give a size or null for each of "
                       "the %zu output axes after the batch",
                       text, letters);
}

static mxu_status read_einsum_dense(const mxu_json_where *where,
                                    const cJSON *config, mxu_json_node *node,
                                    const char *name) {
  mxu_dense_config c = mxu_dense_defaults(1);
  c.name = name;
  const char *equation = NULL, *bias_axes = NULL;
  MXU_TRY(
      mxu_json_string(where, config, "equation", MXU_JSON_REQUIRED, &equation));
  einsum_spec s;
  int added = 0;
  if (strlen(equation) >= sizeof c.equation || !einsum_split(equation, &s) ||
      !einsum_groups(&s, &c.contracted, &added))
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                         "equation '%s' is not supported: mxu computes those "
                         "of a Dense over the input's last axes, "
                         "input [batch][kept][contracted], kernel "
                         "[contracted][new], output [batch][kept][new] "
                         "('abc,cde->abde', '...b,bc->...c')",
                         equation);
  snprintf(c.equation, sizeof c.equation, "%s", equation);
  MXU_TRY(read_output_shape(where, config, strlen(s.out), &c.output_shape));
  c.new_axes.rank = added;
  for (int d = 0; d < added; d++) {
    int64_t v = c.output_shape.dims[c.output_shape.rank - added + d];
    if (v == 0)
      return mxu_json_fail(where, MXU_ERR_FORMAT,
                           "output_shape must give the size of output axis "
                           "'%c', which the kernel adds",
                           s.out[strlen(s.out) - (size_t)added + (size_t)d]);
    c.new_axes.dims[d] = v;
  }
  if (!cJSON_IsNull(mxu_json_get(config, "bias_axes")))
    MXU_TRY(mxu_json_string(where, config, "bias_axes", MXU_JSON_OPTIONAL,
                            &bias_axes));
  const char *new_letters = s.kernel + c.contracted;
  c.use_bias = bias_axes && bias_axes[0];
  if (c.use_bias && strcmp(bias_axes, new_letters) != 0)
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                         "bias_axes '%s' is not supported: none, or the "
                         "kernel's output axes '%s'",
                         bias_axes, new_letters);
  if (c.use_bias) snprintf(c.bias_axes, sizeof c.bias_axes, "%s", bias_axes);
  MXU_TRY(mxu_json_activation(where, config, "activation",
                              node->model->keras2_names, &c.activation));
  MXU_TRY(mxu_config_weight_options(where, config, "kernel", &c.kernel));
  MXU_TRY(mxu_config_weight_options(where, config, "bias", &c.bias));
  int lora = 0;
  MXU_TRY(
      mxu_json_int(where, config, "lora_rank", MXU_JSON_OPTIONAL, 0, 0, &lora));
  MXU_TRY(mxu_json_require_null(where, config, "quantization_config"));
  return mxu_json_applied(
      where, node, mxu_apply_einsum_dense(node->model, &c, node->inputs[0]));
}

static void write_einsum_dense(mxu_json_out *out, const mxu_layer *layer,
                               cJSON *config) {
  const mxu_dense_config *c = &layer->config.dense;
  cJSON *shape = cJSON_CreateArray();
  for (int d = 0; shape && d < c->output_shape.rank; d++)
    cJSON_AddItemToArray(
        shape, c->output_shape.dims[d]
                   ? cJSON_CreateNumber((double)c->output_shape.dims[d])
                   : cJSON_CreateNull());
  mxu_json_put(out, config, "output_shape", shape);
  mxu_json_put_string(out, config, "equation", c->equation);
  mxu_json_put_string(out, config, "activation",
                      mxu_json_activation_name(c->activation));
  if (c->use_bias)
    mxu_json_put_string(out, config, "bias_axes", c->bias_axes);
  else
    mxu_json_put_null(out, config, "bias_axes");
  mxu_config_put_initializers(out, config, "kernel", &c->kernel.initializer,
                              mxu_init_glorot_uniform(), "bias",
                              &c->bias.initializer, mxu_init_zeros());
  mxu_config_put_penalties(out, config, "kernel", &c->kernel, "bias", &c->bias,
                           1);
}

static double dense_flops(const mxu_layer *layer, const mxu_flops_step *step) {
  const mxu_dense_config *c = &layer->config.dense;
  return mxu_weighted_flops((double)mxu_shape_count(&layer->out_shape),
                            (double)dense_in(layer), c->use_bias, c->activation,
                            step);
}

/* The loss reads one row of classes per sample. */
static int dense_ends_in_softmax(const mxu_layer *layer) {
  return layer->config.dense.activation == MXU_SOFTMAX &&
         layer->out_shape.rank == 1;
}

/* x (batch, ..., in) . kernel (in, units) on the last axis; EinsumDense's
 * as rows of its contracted values, then its output's shape. */
static mxu_hlo_value dense_emit(const mxu_layer *layer, mxu_emit *e) {
  const mxu_dense_config *c = &layer->config.dense;
  mxu_hlo *h = e->h;
  mxu_hlo_value x = e->in[0], w = e->w[0], b = c->use_bias ? e->w[1] : 0;
  int64_t last = layer->in_shape.rank, first = 0;
  if (c->contracted) {
    int64_t rows[2] = {(int64_t)e->batch * mxu_shape_count(&layer->in_shape) /
                           dense_in(layer),
                       dense_in(layer)},
            kernel[2] = {dense_in(layer), c->units}, units = c->units;
    x = mxu_hlo_reshape(h, x, mxu_hlo_shape_make(MXU_HLO_F32, 2, rows));
    w = mxu_hlo_reshape(h, w, mxu_hlo_shape_make(MXU_HLO_F32, 2, kernel));
    if (b)
      b = mxu_hlo_reshape(h, b, mxu_hlo_shape_make(MXU_HLO_F32, 1, &units));
    last = 1;
  }
  mxu_hlo_value y = mxu_emit_result(
      e, mxu_hlo_dot(h, mxu_emit_compute(e, x), mxu_emit_compute(e, w), 0, NULL,
                     NULL, 1, &last, &first));
  if (b) y = mxu_emit_bias(e, y, b);
  y = mxu_emit_activation(e, c->activation, mxu_activation_alpha(c->activation),
                          y);
  if (!c->contracted) return y;
  return mxu_hlo_reshape(h, y, mxu_batch_shape(e->batch, &layer->out_shape));
}

/* Dense and EinsumDense: one computation, their own configs. */
#define DENSE_CLASS(symbol, keras_name, by_position, mask, keys, reader,       \
                    writer)                                                    \
  const mxu_layer_class symbol = {.output_mask = mask,                         \
                                  .positionwise = by_position,                 \
                                  .class_name = keras_name,                    \
                                  .emit = dense_emit,                          \
                                  .flops = dense_flops,                        \
                                  .ends_in_softmax = dense_ends_in_softmax,    \
                                  .config_keys = keys,                         \
                                  .read_config = reader,                       \
                                  .write_config = writer,                      \
                                  .min_inputs = 1,                             \
                                  .max_inputs = 1,                             \
                                  .infer = dense_infer,                        \
                                  .declare = dense_declare,                    \
                                  .plan = dense_plan,                          \
                                  .forward = dense_forward,                    \
                                  .backward = dense_backward,                  \
                                  .logits = dense_logits}

DENSE_CLASS(mxu_dense_class, "Dense", 1, mxu_input_mask, dense_keys, read_dense,
            write_dense);
/* Keras' EinsumDense drops a mask (it may contract the masked axis). */
DENSE_CLASS(mxu_einsum_dense_class, "EinsumDense", 0, NULL, einsum_keys,
            read_einsum_dense, write_einsum_dense);

/* ---- Flatten ------------------------------------------------------------
 */

static mxu_status flatten_infer(mxu_layer *layer) {
  int64_t dims[2] = {layer->time_steps, mxu_shape_count(&layer->in_shape)};
  if (layer->time_steps) dims[1] /= layer->time_steps;
  layer->out_shape =
      layer->time_steps ? mxu_shape_make(2, dims) : mxu_shape_make(1, &dims[1]);
  return MXU_OK;
}

/* channels_last memory is already (h, w, c) row-major, so compile gives
 * Flatten its input's buffer (a view) and there is nothing to copy. */
const mxu_layer_class mxu_flatten_class = {
    .class_name = "Flatten",
    .steps_in_batch = 1,
    .emit = mxu_emit_view,
    .config_keys = flatten_keys,
    .read_config = read_flatten,
    .write_config = write_flatten,
    .min_inputs = 1,
    .max_inputs = 1,
    .view = 1,
    .infer = flatten_infer,
    .plan = mxu_no_plan,
    .forward = mxu_view_forward,
    .backward = mxu_view_backward,
};

/* ---- Dropout ------------------------------------------------------------
 */

/* The noise's own shape: each dim 1 (one draw along it) or the input's. */
static mxu_shape noise_of(const mxu_layer *layer) {
  const mxu_shape *in = &layer->in_shape;
  mxu_shape noise = layer->config.dropout.noise;
  if (is_spatial(layer)) { /* (1, ..., 1, channels) */
    noise = (mxu_shape){in->rank, {1, 1, 1, 1, 1, 1}};
    noise.dims[in->rank - 1] = in->dims[in->rank - 1];
  }
  if (noise.rank == 0) return *in;
  for (int d = 0; d < noise.rank; d++)
    if (noise.dims[d] != 1) noise.dims[d] = in->dims[d];
  return noise;
}

static int shares_draws(const mxu_layer *layer) {
  return layer->config.dropout.noise.rank > 0 || is_spatial(layer);
}

static mxu_status dropout_infer(mxu_layer *layer) {
  const mxu_dropout_config *c = &layer->config.dropout;
  const mxu_shape *in = &layer->in_shape;
  if (!(c->rate >= 0.0f && c->rate < 1.0f))
    return mxu_fail(MXU_ERR_ARG, "%s: rate must be in [0, 1), got %g",
                    layer->name, (double)c->rate);
  static const char *const takes[] = {"(steps, channels)",
                                      "(height, width, channels)",
                                      "(depth, height, width, channels)"};
  int rank = spatial_rank(layer);
  if (rank && in->rank != rank)
    return mxu_fail(MXU_ERR_SHAPE, "%s: %s takes %s", layer->name,
                    layer->cls->class_name, takes[rank - 2]);
  int fits = c->noise.rank == 0 || c->noise.rank == in->rank;
  for (int d = 0; fits && d < c->noise.rank; d++)
    fits = c->noise.dims[d] == 0 || c->noise.dims[d] == 1 ||
           c->noise.dims[d] == in->dims[d];
  if (!fits) {
    char a[64], b[64];
    mxu_shape_format(&c->noise, a, sizeof a);
    mxu_shape_format(in, b, sizeof b);
    return mxu_fail(MXU_ERR_SHAPE,
                    "%s: noise_shape %s (without the batch) must have the "
                    "input's rank and dims of 1, null or the input's %s",
                    layer->name, a, b);
  }
  return mxu_same_shape_infer(layer);
}

/* Where the noise varies along the last axis at most (EfficientNet's
 * drop-connect, noise_shape (None, 1, 1, 1); SpatialDropout2D), its draws
 * scale the input's channels as they are (the backend's scale_channels,
 * both ways): no mask as large as the input is spread, written and read.
 * The channels the draws cover (1 or the last axis'), else 0. */
static int64_t noise_channels(const mxu_layer *layer) {
  if (!shares_draws(layer) || is_alpha(layer)) return 0;
  mxu_shape noise = noise_of(layer);
  for (int d = 0; d + 1 < noise.rank; d++)
    if (noise.dims[d] != 1) return 0;
  return noise.dims[noise.rank - 1];
}

/* The mask (scratch[0]), where the draws are not scaled by as they are;
 * with a noise_shape, the draws (scratch[1]). */
static mxu_status dropout_plan(mxu_layer *layer, const mxu_backend *backend,
                               int batch, mxu_arena *layout) {
  (void)backend;
  if (!noise_channels(layer))
    layer->compiled->scratch[0] =
        mxu_arena_reserve(layout, batch_bytes(layer, &layer->in_shape));
  mxu_shape noise = noise_of(layer);
  if (shares_draws(layer))
    layer->compiled->scratch[1] = mxu_arena_reserve(
        layout,
        (size_t)batch * (size_t)mxu_shape_count(&noise) * sizeof(float));
  return MXU_OK;
}

/* AlphaDropout's y = a (x k + alpha' (1 - k)) + b, k 1 where kept, with
 * SELU's saturation alpha' = -alpha scale (Keras' constants, as it writes
 * them): a and b keep a SELU-normalized input's mean and variance. */
typedef struct alpha_affine {
  float a, b, dropped; /* dropped: y where k is 0, a alpha' + b */
} alpha_affine;

static alpha_affine alpha_of(float rate) {
  double alpha_p =
      -1.6732632423543772848170429916717 * 1.0507009873554804934193349852946;
  double a = pow((1.0 - rate) * (1.0 + rate * alpha_p * alpha_p), -0.5);
  double b = -a * alpha_p * rate;
  return (alpha_affine){(float)a, (float)b, (float)(a * alpha_p + b)};
}

/* What a kept draw scales by: 1 / (1 - rate), AlphaDropout's a. */
static float kept_scale(const mxu_layer *layer) {
  float rate = layer->config.dropout.rate;
  return is_alpha(layer) ? alpha_of(rate).a : 1.0f / (1.0f - rate);
}

/* keep or 0 for `count` draws from the stream's place `first` on. */
static void draw_mask(const mxu_layer_run *run, float rate, float keep,
                      uint64_t first, float *m, int64_t count) {
  mxu_rng_uniform4(&run->rng, first, m, (size_t)count);
#pragma omp simd
  for (int64_t i = 0; i < count; i++) m[i] = m[i] >= rate ? keep : 0.0f;
}

/* AlphaDropout's shift after the multiply by the mask (a or 0). */
static void alpha_shift(const mxu_layer *layer, int64_t count,
                        const float *mask, float *y) {
  if (!is_alpha(layer)) return;
  alpha_affine f = alpha_of(layer->config.dropout.rate);
  for (int64_t i = 0; i < count; i++) y[i] += mask[i] != 0.0f ? f.b : f.dropped;
}

/* Inverted dropout: kept values are scaled by 1/(1-rate) in training, so
 * inference is the identity. The mask is a pure function of this run's RNG
 * stream, hence of (seed, epoch, step, replica, layer), drawn from the
 * slice's first row on: slices of a replica draw what it would whole. With
 * a noise_shape the draws are the noise's, spread over the input (or
 * scaling its channels, noise_channels). */
static void dropout_forward(mxu_layer *layer, const mxu_layer_run *run) {
  int64_t per_row = mxu_shape_count(&layer->in_shape);
  int64_t count = layer->compiled->batch * per_row;
  float rate = layer->config.dropout.rate;
  /* bf16 x and y alike (compile's plan_bf16_tensors: no noise_shape) */
  int bf16 = layer->compiled->y_bf16;
  if (!run->training || rate == 0.0f) {
    if (run->y != run->x)
      memcpy(run->y, run->x, (size_t)count * (bf16 ? 2 : 4));
    return;
  }
  float *mask = (float *)(void *)(run->arena + layer->compiled->scratch[0]);
  if (shares_draws(layer)) {
    mxu_shape noise = noise_of(layer);
    int64_t per_noise = mxu_shape_count(&noise);
    float *draws = (float *)(void *)(run->arena + layer->compiled->scratch[1]);
    draw_mask(run, rate, kept_scale(layer),
              (uint64_t)(run->row_offset * per_noise), draws,
              layer->compiled->batch * per_noise);
    int64_t c = noise_channels(layer);
    if (c) {
      run->backend->scale_channels(layer->compiled->batch, per_row / c, (int)c,
                                   run->x, draws, run->y);
      return;
    }
    mxu_spread p = mxu_spread_of(&noise, &layer->in_shape);
    mxu_spread_move(&p, layer->compiled->batch, draws, mask, 1);
    run->backend->multiply(count, run->x, mask, run->y);
    alpha_shift(layer, count, mask, run->y);
    return;
  }
  /* One pass in L1-sized chunks (draw, threshold, multiply) rather than
   * three over the whole tensor. Draws are counter based, so a chunk's
   * values do not depend on where it starts: the mask is unchanged. A
   * multiple of 16 keeps every chunk but the last on the 16-lane path. */
  enum { CHUNK = 1024 };
  uint64_t first = (uint64_t)(run->row_offset * per_row);
  for (int64_t at = 0; at < count; at += CHUNK) {
    int64_t n = count - at < CHUNK ? count - at : CHUNK;
    draw_mask(run, rate, kept_scale(layer), first + (uint64_t)at, mask + at, n);
    if (bf16) {
      run->backend->multiply_bf16(
          n, (const uint16_t *)(const void *)run->x + at, mask + at, 1u | 4u,
          (uint16_t *)(void *)run->y + at);
      continue;
    }
    run->backend->multiply(n, run->x + at, mask + at, run->y + at);
    alpha_shift(layer, n, mask + at, run->y + at);
  }
}

static void dropout_backward(mxu_layer *layer, const mxu_layer_run *run) {
  if (!run->need_dx) return;
  int64_t count = mxu_batch_values(layer);
  /* bf16 dy, dx where the plan says: dx may be float32 where another
   * reader of x writes its share so */
  const mxu_node_plan *p = layer->compiled;
  unsigned bf16 = (p->dy_bf16 ? 1u : 0u) | (p->dx_bf16 & 1 ? 4u : 0u);
  if (layer->config.dropout.rate == 0.0f) {
    if (bf16)
      run->backend->add_backward_bf16(
          count, NULL, run->dy, (bf16 & 1 ? 2u : 0u) | (bf16 & 4u), 0, run->dx);
    else
      memcpy(run->dx, run->dy, (size_t)count * 4);
    return;
  }
  int64_t c = noise_channels(layer);
  if (c) {
    const float *draws =
        (const float *)(void *)(run->arena + layer->compiled->scratch[1]);
    run->backend->scale_channels(layer->compiled->batch,
                                 mxu_shape_count(&layer->in_shape) / c, (int)c,
                                 run->dy, draws, run->dx);
    return;
  }
  const float *mask =
      (const float *)(void *)(run->arena + layer->compiled->scratch[0]);
  if (bf16)
    run->backend->multiply_bf16(count, run->dy, mask, bf16, run->dx);
  else
    run->backend->multiply(count, run->dy, mask, run->dx);
}

/* The keep test and the multiply per element; backward one multiply. A
 * rate of 0 copies. */
static double dropout_flops(const mxu_layer *layer,
                            const mxu_flops_step *step) {
  if (layer->config.dropout.rate == 0.0f) return 0.0;
  return (double)mxu_shape_count(&layer->in_shape) *
         (2.0 + is_alpha(layer) + (step->need_dx ? 1.0 : 0.0));
}

/* The run's stream (key, then stream words), from which the devices draw
 * dropout_forward's mask (noise_is_stream): a replica's whole batch, from
 * its first row. */
static int dropout_noise(const mxu_layer *layer, const mxu_layer_run *run,
                         float *out) {
  if (layer->config.dropout.rate == 0.0f) return 0;
  return mxu_stream_noise(run, out);
}

/* kept where u >= rate (kept_u), else dropped, in the input's shape: the
 * draws spread over it where they are shared. */
static mxu_hlo_value emit_choice(const mxu_layer *layer, mxu_emit *e,
                                 mxu_hlo_value u, mxu_hlo_value kept_u,
                                 float kept, float dropped) {
  mxu_hlo *h = e->h;
  mxu_shape noise = shares_draws(layer) ? noise_of(layer) : layer->in_shape;
  mxu_hlo_value v =
      mxu_hlo_reshape(h,
                      mxu_hlo_select(h, kept_u, mxu_hlo_full_like(h, u, kept),
                                     mxu_hlo_full_like(h, u, dropped)),
                      mxu_batch_shape(e->batch, &noise));
  if (!shares_draws(layer)) return v;
  mxu_hlo_shape out = *mxu_hlo_shape_of(h, e->in[0]);
  int64_t same[MXU_HLO_MAX_RANK];
  for (int d = 0; d < out.rank; d++) same[d] = d;
  return mxu_hlo_broadcast(h, v, out, same);
}

/* The mask drawn on the device as draw_mask draws it (u >= rate: kept and
 * scaled by kept_scale), and AlphaDropout's shift after it. */
static mxu_hlo_value dropout_emit(const mxu_layer *layer, mxu_emit *e) {
  if (!e->training || !e->noise) return e->in[0];
  mxu_hlo *h = e->h;
  float rate = layer->config.dropout.rate;
  mxu_shape noise = shares_draws(layer) ? noise_of(layer) : layer->in_shape;
  mxu_hlo_value u = mxu_emit_uniform4(
      e, e->noise, (int64_t)e->batch * mxu_shape_count(&noise));
  mxu_hlo_value kept_u =
      mxu_hlo_compare_op(h, MXU_HLO_GE, u, mxu_hlo_full_like(h, u, rate));
  mxu_hlo_value y =
      mxu_hlo_binary(h, MXU_HLO_MULTIPLY, e->in[0],
                     emit_choice(layer, e, u, kept_u, kept_scale(layer), 0.0f));
  if (!is_alpha(layer)) return y;
  alpha_affine f = alpha_of(rate);
  return mxu_hlo_binary(h, MXU_HLO_ADD, y,
                        emit_choice(layer, e, u, kept_u, f.b, f.dropped));
}

/* Dropout and the spatial ones: one class each, the same computation. */
#define DROPOUT_CLASS(symbol, keras_name, reader, keys, by_position)           \
  const mxu_layer_class symbol = {                                             \
      .output_mask = mxu_input_mask,                                           \
      .positionwise = by_position,                                             \
      .class_name = keras_name,                                                \
      .flops = dropout_flops,                                                  \
      .emit = dropout_emit,                                                    \
      .emit_noise = dropout_noise,                                             \
      .noise_is_stream = 1,                                                    \
      .config_keys = keys,                                                     \
      .read_config = reader,                                                   \
      .write_config = write_dropout,                                           \
      .min_inputs = 1,                                                         \
      .max_inputs = 1,                                                         \
      .infer = dropout_infer,                                                  \
      .plan = dropout_plan,                                                    \
      .forward = dropout_forward,                                              \
      .backward = dropout_backward,                                            \
  }

DROPOUT_CLASS(mxu_dropout_class, "Dropout", read_dropout, dropout_keys, 1);
DROPOUT_CLASS(mxu_spatial_dropout2d_class, "SpatialDropout2D",
              read_spatial_dropout, spatial_dropout_keys, 0);
DROPOUT_CLASS(mxu_spatial_dropout1d_class, "SpatialDropout1D",
              read_spatial_dropout1d, spatial_dropout_keys, 0);
DROPOUT_CLASS(mxu_spatial_dropout3d_class, "SpatialDropout3D",
              read_spatial_dropout3d, spatial_dropout_keys, 0);
DROPOUT_CLASS(mxu_alpha_dropout_class, "AlphaDropout", read_alpha_dropout,
              dropout_keys, 1);

/* ---- InputLayer -----------------------------------------------------------
 * A model input: its node's output buffer is where fit loads the samples;
 * the shape was set when the node was made. Inside a model used as a
 * layer it reads the tensor that model is called on, as a view. */

const char *const mxu_input_dtypes[] = {"float32", "int32", "int64", NULL};

static mxu_status input_infer(mxu_layer *layer) {
  (void)layer;
  return MXU_OK;
}

static void input_forward(mxu_layer *layer, const mxu_layer_run *run) {
  if (run->input_count) mxu_view_forward(layer, run);
}

static void input_backward(mxu_layer *layer, const mxu_layer_run *run) {
  if (run->input_count) mxu_view_backward(layer, run);
}

const mxu_layer_class mxu_input_layer_class = {
    .class_name = "InputLayer",
    .view = 1,
    .min_inputs = 0,
    .max_inputs = 1,
    .infer = input_infer,
    .plan = mxu_no_plan,
    .forward = input_forward,
    .backward = input_backward,
};
