/* hlo_print.c — the graph as MLIR text in StableHLO's generic op form
 * ("stablehlo.add"(%3, %4) : (tensor<..>, tensor<..>) -> tensor<..>),
 * which every PJRT plugin's parser takes, whatever its pretty syntax of
 * the day. Values are %vN after their node; a region's arguments %rNa,
 * %rNb. Only nodes the results need are printed. */
#include "backend/pjrt/hlo.h"

#include "core/core.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct text {
  char *data;
  size_t length, capacity;
  int failed;
} text;

static void put(text *t, const char *format, ...)
    __attribute__((format(printf, 2, 3)));
static void put(text *t, const char *format, ...) {
  if (t->failed) return;
  for (;;) {
    va_list args;
    va_start(args, format);
    size_t room = t->capacity - t->length;
    int n = vsnprintf(t->data ? t->data + t->length : NULL, room, format, args);
    va_end(args);
    if (n < 0) {
      t->failed = 1;
      return;
    }
    if ((size_t)n < room) {
      t->length += (size_t)n;
      return;
    }
    size_t capacity = t->capacity ? 2 * t->capacity : 1 << 16;
    while (capacity - t->length <= (size_t)n) capacity *= 2;
    char *data = realloc(t->data, capacity);
    if (!data) {
      t->failed = 1;
      return;
    }
    t->data = data;
    t->capacity = capacity;
  }
}

static const char *element(mxu_hlo_dtype dtype) {
  switch (dtype) {
  case MXU_HLO_F32: return "f32";
  case MXU_HLO_F64: return "f64";
  case MXU_HLO_BF16: return "bf16";
  case MXU_HLO_S32: return "i32";
  case MXU_HLO_U32: return "ui32";
  case MXU_HLO_PRED: return "i1";
  }
  return "f32";
}

static void put_type(text *t, const mxu_hlo_shape *s) {
  put(t, "tensor<");
  for (int i = 0; i < s->rank; i++) put(t, "%" PRId64 "x", s->dims[i]);
  put(t, "%s>", element(s->dtype));
}

static void put_i64_array(text *t, const char *name, int count,
                          const int64_t *values) {
  put(t, "%s = array<i64", name);
  for (int i = 0; i < count; i++)
    put(t, "%s %" PRId64, i ? "," : ":", values[i]);
  put(t, ">");
}

/* A number of the type: floats in hex where they are not finite. */
static void put_number(text *t, mxu_hlo_dtype dtype, double value) {
  if (dtype == MXU_HLO_PRED) {
    put(t, "%s", value != 0 ? "true" : "false");
  } else if (dtype == MXU_HLO_S32 || dtype == MXU_HLO_U32) {
    put(t, "%lld", (long long)value);
  } else if (isnan(value)) {
    put(t, "%s",
        dtype == MXU_HLO_BF16  ? "0x7FC0"
        : dtype == MXU_HLO_F64 ? "0x7FF8000000000000"
                               : "0x7FC00000");
  } else if (isinf(value)) {
    put(t, "%s",
        dtype == MXU_HLO_BF16 ? (value > 0 ? "0x7F80" : "0xFF80")
        : dtype == MXU_HLO_F64
            ? (value > 0 ? "0x7FF0000000000000" : "0xFFF0000000000000")
            : (value > 0 ? "0x7F800000" : "0xFF800000"));
  } else {
    put(t, "%.17e", value);
  }
}

/* A constant's values as MLIR's raw form: "0x" and the little-endian
 * bytes of each element. */
static void put_raw(text *t, const mxu_hlo_node *n) {
  int64_t count = mxu_hlo_count(&n->shape);
  put(t, "\"0x");
  for (int64_t i = 0; i < count; i++) {
    unsigned char bytes[8];
    size_t size = n->shape.dtype == MXU_HLO_F64 ? 8 : 4;
    if (size == 8) {
      memcpy(bytes, &n->values[i], 8);
    } else {
      float f = (float)n->values[i];
      memcpy(bytes, &f, 4);
    }
    for (size_t b = 0; b < size; b++) put(t, "%02X", bytes[b]);
  }
  put(t, "\"");
}

static void put_operands(text *t, const mxu_hlo_node *n) {
  put(t, "(");
  for (int i = 0; i < n->count; i++) put(t, "%s%%v%d", i ? ", " : "", n->in[i]);
  put(t, ")");
}

static void put_signature(text *t, const mxu_hlo *h, const mxu_hlo_node *n) {
  put(t, " : (");
  for (int i = 0; i < n->count; i++) {
    if (i) put(t, ", ");
    put_type(t, &h->nodes[n->in[i]].shape);
  }
  put(t, ") -> ");
  put_type(t, &n->shape);
  put(t, "\n");
}

/* A region of two scalar arguments returning op(a, b): "add", "maximum",
 * or a GE comparison (select_and_scatter's select). */
static void put_region(text *t, int id, char tag, mxu_hlo_dtype dtype,
                       const char *op) {
  const char *e = element(dtype);
  put(t, "{\n    ^bb0(%%r%d%ca: tensor<%s>, %%r%d%cb: tensor<%s>):\n", id, tag,
      e, id, tag, e);
  if (strcmp(op, "ge") == 0)
    put(t,
        "      %%r%d%cc = \"stablehlo.compare\"(%%r%d%ca, %%r%d%cb) "
        "{comparison_direction = #stablehlo<comparison_direction GE>} : "
        "(tensor<%s>, tensor<%s>) -> tensor<i1>\n"
        "      \"stablehlo.return\"(%%r%d%cc) : (tensor<i1>) -> ()\n    }",
        id, tag, id, tag, id, tag, e, e, id, tag);
  else
    put(t,
        "      %%r%d%cc = \"stablehlo.%s\"(%%r%d%ca, %%r%d%cb) : "
        "(tensor<%s>, tensor<%s>) -> tensor<%s>\n"
        "      \"stablehlo.return\"(%%r%d%cc) : (tensor<%s>) -> ()\n    }",
        id, tag, op, id, tag, id, tag, e, e, e, id, tag, e);
}

static const char *reducer_op(mxu_hlo_reducer r) {
  return r == MXU_HLO_SUM ? "add" : "maximum";
}

/* NHWC windows: 1 over N and C. */
static void put_window(text *t, const mxu_hlo_window *w) {
  int64_t size[4] = {1, w->size[0], w->size[1], 1};
  int64_t stride[4] = {1, w->stride[0], w->stride[1], 1};
  put_i64_array(t, "window_dimensions", 4, size);
  put(t, ", ");
  put_i64_array(t, "window_strides", 4, stride);
  put(t,
      ", padding = dense<[[0, 0], [%" PRId64 ", %" PRId64 "], [%" PRId64
      ", %" PRId64 "], [0, 0]]> : tensor<4x2xi64>",
      w->pad_low[0], w->pad_high[0], w->pad_low[1], w->pad_high[1]);
}

static void put_spec(text *t, const char *spec) {
  put(t, "[");
  for (int i = 0; spec[i]; i++) put(t, "%s%c", i ? ", " : "", spec[i]);
  put(t, "]");
}

static void put_convolution(text *t, const mxu_hlo_node *n) {
  const mxu_hlo_window *w = &n->window;
  put(t,
      " {batch_group_count = %" PRId64 " : i64, dimension_numbers = "
      "#stablehlo.conv<",
      n->batch_groups);
  put_spec(t, n->spec[0]);
  put(t, "x");
  put_spec(t, n->spec[1]);
  put(t, "->");
  put_spec(t, n->spec[2]);
  put(t, ">, feature_group_count = %" PRId64 " : i64, ", w->feature_groups);
  put_i64_array(t, "lhs_dilation", 2, w->lhs_dilation);
  put(t,
      ", padding = dense<[[%" PRId64 ", %" PRId64 "], [%" PRId64 ", %" PRId64
      "]]> : tensor<2x2xi64>, ",
      w->pad_low[0], w->pad_high[0], w->pad_low[1], w->pad_high[1]);
  put_i64_array(t, "rhs_dilation", 2, w->rhs_dilation);
  put(t, ", ");
  put_i64_array(t, "window_strides", 2, w->stride);
  put(t, "}");
}

static void put_dot(text *t, const mxu_hlo_node *n) {
  put(t, " {dot_dimension_numbers = #stablehlo.dot<");
  const char *sep = "";
  const struct {
    const char *name;
    int count;
    const int64_t *dims;
  } lists[] = {
      {"lhs_batching_dimensions", n->batch_count, n->lhs_batch},
      {"rhs_batching_dimensions", n->batch_count, n->rhs_batch},
      {"lhs_contracting_dimensions", n->contract_count, n->lhs_contract},
      {"rhs_contracting_dimensions", n->contract_count, n->rhs_contract}};
  for (int l = 0; l < 4; l++) {
    if (!lists[l].count) continue;
    put(t, "%s%s = [", sep, lists[l].name);
    for (int i = 0; i < lists[l].count; i++)
      put(t, "%s%" PRId64, i ? ", " : "", lists[l].dims[i]);
    put(t, "]");
    sep = ", ";
  }
  put(t, ">}");
}

static const char *compare_name(mxu_hlo_compare c) {
  static const char *const names[] = {"EQ", "NE", "LT", "LE", "GT", "GE"};
  return names[c];
}

static const char *op_name(mxu_hlo_op op) {
  switch (op) {
  case MXU_HLO_CONSTANT: return "constant";
  case MXU_HLO_ADD: return "add";
  case MXU_HLO_SUBTRACT: return "subtract";
  case MXU_HLO_MULTIPLY: return "multiply";
  case MXU_HLO_DIVIDE: return "divide";
  case MXU_HLO_MAXIMUM: return "maximum";
  case MXU_HLO_MINIMUM: return "minimum";
  case MXU_HLO_POWER: return "power";
  case MXU_HLO_XOR: return "xor";
  case MXU_HLO_AND: return "and";
  case MXU_HLO_SHIFT_RIGHT_LOGICAL: return "shift_right_logical";
  case MXU_HLO_NEGATE: return "negate";
  case MXU_HLO_EXP: return "exponential";
  case MXU_HLO_LOG: return "log";
  case MXU_HLO_SQRT: return "sqrt";
  case MXU_HLO_RSQRT: return "rsqrt";
  case MXU_HLO_TANH: return "tanh";
  case MXU_HLO_LOGISTIC: return "logistic";
  case MXU_HLO_ABS: return "abs";
  case MXU_HLO_SIGN: return "sign";
  case MXU_HLO_ERF: return "erf";
  case MXU_HLO_CONVERT: return "convert";
  case MXU_HLO_COMPARE: return "compare";
  case MXU_HLO_SELECT: return "select";
  case MXU_HLO_BROADCAST: return "broadcast_in_dim";
  case MXU_HLO_RESHAPE: return "reshape";
  case MXU_HLO_TRANSPOSE: return "transpose";
  case MXU_HLO_REVERSE: return "reverse";
  case MXU_HLO_SLICE: return "slice";
  case MXU_HLO_PAD: return "pad";
  case MXU_HLO_CONCATENATE: return "concatenate";
  case MXU_HLO_REDUCE: return "reduce";
  case MXU_HLO_DOT: return "dot_general";
  case MXU_HLO_CONVOLUTION: return "convolution";
  case MXU_HLO_REDUCE_WINDOW: return "reduce_window";
  case MXU_HLO_SELECT_AND_SCATTER: return "select_and_scatter";
  case MXU_HLO_ALL_REDUCE: return "all_reduce";
  case MXU_HLO_IOTA: return "iota";
  case MXU_HLO_REPLICA_ID: return "replica_id";
  default: return "unknown";
  }
}

/* Regions come between the operands and the attributes. */
static void put_regions(text *t, const mxu_hlo *h, int id,
                        const mxu_hlo_node *n) {
  mxu_hlo_dtype dtype = h->nodes[n->in[0]].shape.dtype;
  switch (n->op) {
  case MXU_HLO_REDUCE:
  case MXU_HLO_REDUCE_WINDOW:
    put(t, " (");
    put_region(t, id, 'a', dtype, reducer_op(n->reducer));
    put(t, ")");
    return;
  case MXU_HLO_ALL_REDUCE:
    put(t, " (");
    put_region(t, id, 'a', dtype, "add");
    put(t, ")");
    return;
  case MXU_HLO_SELECT_AND_SCATTER:
    put(t, " (");
    put_region(t, id, 'a', dtype, "ge");
    put(t, ", ");
    put_region(t, id, 'b', dtype, "add");
    put(t, ")");
    return;
  default: return;
  }
}

/* The node's dims as its one attribute. */
static void put_dims(text *t, const char *name, const mxu_hlo_node *n) {
  put(t, " {");
  put_i64_array(t, name, n->dim_count, n->dims);
  put(t, "}");
}

static void put_attributes(text *t, const mxu_hlo_node *n, int replicas) {
  switch (n->op) {
  case MXU_HLO_CONSTANT:
    put(t, " {value = dense<");
    if (n->values)
      put_raw(t, n);
    else
      put_number(t, n->shape.dtype, n->number);
    put(t, "> : ");
    put_type(t, &n->shape);
    put(t, "}");
    return;
  case MXU_HLO_COMPARE:
    put(t, " {comparison_direction = #stablehlo<comparison_direction %s>}",
        compare_name(n->direction));
    return;
  case MXU_HLO_BROADCAST: put_dims(t, "broadcast_dimensions", n); return;
  case MXU_HLO_TRANSPOSE: put_dims(t, "permutation", n); return;
  case MXU_HLO_REVERSE:
  case MXU_HLO_REDUCE: put_dims(t, "dimensions", n); return;
  case MXU_HLO_SLICE:
  case MXU_HLO_PAD: {
    int rank = n->shape.rank, slice = n->op == MXU_HLO_SLICE;
    put(t, " {");
    put_i64_array(t, slice ? "start_indices" : "edge_padding_low", rank, n->a);
    put(t, ", ");
    put_i64_array(t, slice ? "limit_indices" : "edge_padding_high", rank, n->b);
    put(t, ", ");
    put_i64_array(t, slice ? "strides" : "interior_padding", rank, n->c);
    put(t, "}");
    return;
  }
  case MXU_HLO_DOT: put_dot(t, n); return;
  case MXU_HLO_CONVOLUTION: put_convolution(t, n); return;
  case MXU_HLO_REDUCE_WINDOW:
  case MXU_HLO_SELECT_AND_SCATTER:
    put(t, " {");
    put_window(t, &n->window);
    put(t, "}");
    return;
  case MXU_HLO_ALL_REDUCE:
    put(t, " {replica_groups = dense<[[");
    for (int r = 0; r < replicas; r++) put(t, "%s%d", r ? ", " : "", r);
    put(t, "]]> : tensor<1x%dxi64>}", replicas);
    return;
  case MXU_HLO_IOTA:
    put(t, " {iota_dimension = %" PRId64 " : i64}", n->dims[0]);
    return;
  case MXU_HLO_CONCATENATE:
    put(t, " {dimension = %" PRId64 " : i64}", n->dims[0]);
    return;
  default: return;
  }
}

static void put_node(text *t, const mxu_hlo *h, int id, int replicas) {
  const mxu_hlo_node *n = &h->nodes[id];
  put(t, "    %%v%d = \"%s.%s\"", id,
      n->op == MXU_HLO_ERF ? "chlo" : "stablehlo", op_name(n->op));
  put_operands(t, n);
  put_regions(t, h, id, n);
  put_attributes(t, n, replicas);
  put_signature(t, h, n);
}

/* Marks what the results need. */
static unsigned char *needed(const mxu_hlo *h, int count,
                             const mxu_hlo_value *results) {
  unsigned char *need = calloc((size_t)h->count, 1);
  if (!need) return NULL;
  for (int i = 0; i < count; i++) need[results[i]] = 1;
  for (int v = h->count - 1; v > 0; v--)
    for (int i = 0; need[v] && i < h->nodes[v].count; i++)
      need[h->nodes[v].in[i]] = 1;
  return need;
}

static void put_types(text *t, int count, const mxu_hlo_shape *shapes) {
  put(t, "(");
  for (int i = 0; i < count; i++) {
    if (i) put(t, ", ");
    put_type(t, &shapes[i]);
  }
  put(t, ")");
}

/* "head(params) -> (results) { body }" of the graph's nodes the results
 * need. */
static mxu_status put_function(text *t, const mxu_hlo *h, const char *head,
                               int count, const mxu_hlo_value *results,
                               int replicas) {
  for (int i = 0; i < count; i++)
    if (results[i] <= 0 || results[i] >= h->count)
      return mxu_fail(MXU_ERR_ARG, "hlo: result %d is no value", i);
  unsigned char *need = needed(h, count, results);
  if (!need) return mxu_fail(MXU_ERR_NOMEM, "hlo: out of memory");
  put(t, "  %s(", head);
  for (int v = 1, first = 1; v < h->count; v++) {
    if (h->nodes[v].op != MXU_HLO_PARAMETER) continue;
    put(t, "%s%%v%d: ", first ? "" : ", ", v);
    put_type(t, &h->nodes[v].shape);
    first = 0;
  }
  put(t, ") -> (");
  for (int i = 0; i < count; i++) {
    if (i) put(t, ", ");
    put_type(t, &h->nodes[results[i]].shape);
  }
  put(t, ") {\n");
  for (int v = 1; v < h->count; v++)
    if (need[v] && h->nodes[v].op != MXU_HLO_PARAMETER)
      put_node(t, h, v, replicas);
  put(t, "    \"func.return\"(");
  for (int i = 0; i < count; i++) put(t, "%s%%v%d", i ? ", " : "", results[i]);
  put(t, ") : (");
  for (int i = 0; i < count; i++) {
    if (i) put(t, ", ");
    put_type(t, &h->nodes[results[i]].shape);
  }
  put(t, ") -> ()\n  }\n");
  free(need);
  return MXU_OK;
}

static void put_module_head(text *t, int replicas) {
  put(t,
      "module @mxu attributes {mhlo.num_replicas = %d : i32, "
      "mhlo.num_partitions = 1 : i32} {\n",
      replicas);
}

static mxu_status finish(text *t, mxu_status s, char **out) {
  put(t, "}\n");
  if (s == MXU_OK && t->failed)
    s = mxu_fail(MXU_ERR_NOMEM, "hlo: out of memory printing the program");
  if (s != MXU_OK) {
    free(t->data);
    return s;
  }
  *out = t->data;
  return MXU_OK;
}

mxu_status mxu_hlo_print(const mxu_hlo *h, int count,
                         const mxu_hlo_value *results, int replicas,
                         char **out) {
  *out = NULL;
  if (h->status != MXU_OK) return h->status;
  text t = {0};
  put_module_head(&t, replicas);
  return finish(
      &t,
      put_function(&t, h, "func.func public @main", count, results, replicas),
      out);
}

/* ---- the step in an on-device loop --------------------------------------- */

static int same_shape(const mxu_hlo_shape *a, const mxu_hlo_shape *b) {
  if (a->dtype != b->dtype || a->rank != b->rank) return 0;
  for (int d = 0; d < a->rank; d++)
    if (a->dims[d] != b->dims[d]) return 0;
  return 1;
}

static mxu_hlo_shape unstacked(mxu_hlo_shape s) {
  memmove(s.dims, s.dims + 1, (size_t)(--s.rank) * sizeof *s.dims);
  return s;
}

static mxu_hlo_shape stacked(mxu_hlo_shape s, int64_t steps) {
  memmove(s.dims + 1, s.dims, (size_t)s.rank * sizeof *s.dims);
  s.dims[0] = steps;
  s.rank++;
  return s;
}

static void put_i32(text *t, const char *name, int value) {
  put(t,
      "      %s = \"stablehlo.constant\"() {value = dense<%d> : tensor<i32>} "
      ": () -> tensor<i32>\n",
      name, value);
}

/* "%b0, %zero, ...": the step index, then 0 for the other dims. */
static void put_indices(text *t, int rank) {
  put(t, "%%b0");
  for (int d = 1; d < rank; d++) put(t, ", %%zero");
}

static void put_index_types(text *t, int rank) {
  for (int d = 0; d < rank; d++) put(t, ", tensor<i32>");
}

/* The loop's body: step i's inputs sliced from the stacked ones, the step
 * called, its per-step results written at row i. Carried values %bK:
 * 0 the counter, 1 the step count, 2.. the state, the stacked inputs, the
 * stacked results. */
static void put_loop_body(text *t, const mxu_hlo_shape *carry, int carried,
                          int inputs, int outputs, const mxu_hlo_shape *outs) {
  int first_input = 2 + carried, first_output = first_input + inputs;
  put_i32(t, "%zero", 0);
  put_i32(t, "%one", 1);
  for (int j = 0; j < inputs; j++) {
    const mxu_hlo_shape *s = &carry[first_input + j];
    mxu_hlo_shape row = *s;
    row.dims[0] = 1;
    put(t, "      %%s%d = \"stablehlo.dynamic_slice\"(%%b%d, ", j,
        first_input + j);
    put_indices(t, s->rank);
    put(t, ") {");
    put_i64_array(t, "slice_sizes", row.rank, row.dims);
    put(t, "} : (");
    put_type(t, s);
    put_index_types(t, s->rank);
    put(t, ") -> ");
    put_type(t, &row);
    put(t, "\n      %%x%d = \"stablehlo.reshape\"(%%s%d) : (", j, j);
    put_type(t, &row);
    put(t, ") -> ");
    mxu_hlo_shape one = unstacked(row);
    put_type(t, &one);
    put(t, "\n");
  }
  put(t, "      %%o:%d = \"func.call\"(", carried + outputs);
  for (int i = 0; i < carried; i++) put(t, "%s%%b%d", i ? ", " : "", 2 + i);
  for (int j = 0; j < inputs; j++)
    put(t, "%s%%x%d", carried + j ? ", " : "", j);
  put(t, ") {callee = @step} : (");
  for (int i = 0; i < carried + inputs; i++) {
    if (i) put(t, ", ");
    mxu_hlo_shape s = i >= carried ? unstacked(carry[2 + i]) : carry[2 + i];
    put_type(t, &s);
  }
  put(t, ") -> (");
  for (int i = 0; i < carried + outputs; i++) {
    if (i) put(t, ", ");
    put_type(t, i < carried ? &carry[2 + i] : &outs[i - carried]);
  }
  put(t, ")\n");
  for (int j = 0; j < outputs; j++) {
    const mxu_hlo_shape *s = &carry[first_output + j];
    mxu_hlo_shape row = *s;
    row.dims[0] = 1;
    put(t, "      %%u%d = \"stablehlo.reshape\"(%%o#%d) : (", j, carried + j);
    put_type(t, &outs[j]);
    put(t, ") -> ");
    put_type(t, &row);
    put(t, "\n      %%d%d = \"stablehlo.dynamic_update_slice\"(%%b%d, %%u%d, ",
        j, first_output + j, j);
    put_indices(t, s->rank);
    put(t, ") : (");
    put_type(t, s);
    put(t, ", ");
    put_type(t, &row);
    put_index_types(t, s->rank);
    put(t, ") -> ");
    put_type(t, s);
    put(t, "\n");
  }
  put(t, "      %%next = \"stablehlo.add\"(%%b0, %%one) : (tensor<i32>, "
         "tensor<i32>) -> tensor<i32>\n"
         "      \"stablehlo.return\"(%%next, %%b1");
  for (int i = 0; i < carried; i++) put(t, ", %%o#%d", i);
  for (int j = 0; j < inputs; j++) put(t, ", %%b%d", first_input + j);
  for (int j = 0; j < outputs; j++) put(t, ", %%d%d", j);
  put(t, ") : ");
  put_types(t, first_output + outputs, carry);
  put(t, " -> ()\n");
}

static void put_block_args(text *t, char tag, int count,
                           const mxu_hlo_shape *carry) {
  put(t, "    ^bb0(");
  for (int i = 0; i < count; i++) {
    put(t, "%s%%%c%d: ", i ? ", " : "", tag, i);
    put_type(t, &carry[i]);
  }
  put(t, "):\n");
}

/* main's result i: state i, or a per-step result stacked. */
static const mxu_hlo_shape *main_result(const mxu_hlo_shape *carry, int i,
                                        int carried, int params) {
  return &carry[i < carried ? 2 + i : 2 + params + (i - carried)];
}

static void put_main_results(text *t, int count, int carried,
                             const mxu_hlo_shape *carry, int params) {
  put(t, "(");
  for (int i = 0; i < count; i++) {
    if (i) put(t, ", ");
    put_type(t, main_result(carry, i, carried, params));
  }
  put(t, ")");
}

/* "func.func public @main(state, stacked inputs, n) -> (results) {" */
static void put_main_head(text *t, int count, int carried,
                          const mxu_hlo_shape *carry, int params) {
  put(t, "  func.func public @main(");
  for (int i = 0; i < params; i++) {
    put(t, "%%a%d: ", i);
    put_type(t, &carry[2 + i]);
    put(t, ", ");
  }
  put(t, "%%n: tensor<i32>) -> ");
  put_main_results(t, count, carried, carry, params);
  put(t, " {\n");
}

/* main: the state, the stacked inputs and the step count n; a while loop
 * runs the step n times, carrying the state; returns the state and the
 * stacked per-step results. */
static void put_loop_main(text *t, const mxu_hlo *h, int count,
                          const mxu_hlo_value *results, int carried,
                          const mxu_hlo_shape *carry, int params) {
  int inputs = params - carried, outputs = count - carried;
  int all = 2 + params + outputs;
  put_main_head(t, count, carried, carry, params);
  put_i32(t, "%start", 0);
  for (int j = 0; j < outputs; j++) {
    put(t, "      %%z%d = \"stablehlo.constant\"() {value = dense<0.0> : ", j);
    put_type(t, &carry[2 + params + j]);
    put(t, "} : () -> ");
    put_type(t, &carry[2 + params + j]);
    put(t, "\n");
  }
  put(t, "    %%w:%d = \"stablehlo.while\"(%%start, %%n", all);
  for (int i = 0; i < params; i++) put(t, ", %%a%d", i);
  for (int j = 0; j < outputs; j++) put(t, ", %%z%d", j);
  put(t, ") ({\n");
  put_block_args(t, 'c', all, carry);
  put(t, "      %%more = \"stablehlo.compare\"(%%c0, %%c1) "
         "{comparison_direction = #stablehlo<comparison_direction LT>} : "
         "(tensor<i32>, tensor<i32>) -> tensor<i1>\n"
         "      \"stablehlo.return\"(%%more) : (tensor<i1>) -> ()\n  }, {\n");
  put_block_args(t, 'b', all, carry);
  mxu_hlo_shape outs[outputs > 0 ? outputs : 1];
  for (int j = 0; j < outputs; j++)
    outs[j] = h->nodes[results[carried + j]].shape;
  put_loop_body(t, carry, carried, inputs, outputs, outs);
  put(t, "  }) : ");
  put_types(t, all, carry);
  put(t, " -> ");
  put_types(t, all, carry);
  put(t, "\n    \"func.return\"(");
  for (int i = 0; i < count; i++)
    put(t, "%s%%w#%d", i ? ", " : "",
        i < carried ? 2 + i : 2 + params + (i - carried));
  put(t, ") : ");
  put_main_results(t, count, carried, carry, params);
  put(t, " -> ()\n  }\n");
}

/* "%name = reshape(%from) : (a) -> b" */
static void put_reshape(text *t, const char *name, const char *from,
                        const mxu_hlo_shape *a, const mxu_hlo_shape *b) {
  put(t, "    %s = \"stablehlo.reshape\"(%s) : (", name, from);
  put_type(t, a);
  put(t, ") -> ");
  put_type(t, b);
  put(t, "\n");
}

/* main for one step: no loop (XLA optimizes the step less inside one); the
 * inputs' and results' stacking by reshapes, n unread. */
static void put_single_main(text *t, int count, int carried,
                            const mxu_hlo_shape *carry, int params) {
  int outputs = count - carried;
  put_main_head(t, count, carried, carry, params);
  char name[32], from[32];
  for (int i = carried; i < params; i++) {
    mxu_hlo_shape one = unstacked(carry[2 + i]);
    snprintf(name, sizeof name, "%%x%d", i);
    snprintf(from, sizeof from, "%%a%d", i);
    put_reshape(t, name, from, &carry[2 + i], &one);
  }
  put(t, "    %%o:%d = \"func.call\"(", count);
  for (int i = 0; i < params; i++)
    put(t, "%s%%%c%d", i ? ", " : "", i < carried ? 'a' : 'x', i);
  put(t, ") {callee = @step} : (");
  for (int i = 0; i < params; i++) {
    mxu_hlo_shape s = i < carried ? carry[2 + i] : unstacked(carry[2 + i]);
    if (i) put(t, ", ");
    put_type(t, &s);
  }
  put(t, ") -> (");
  for (int i = 0; i < count; i++) {
    mxu_hlo_shape s =
        i < carried ? carry[2 + i] : unstacked(carry[2 + params + i - carried]);
    if (i) put(t, ", ");
    put_type(t, &s);
  }
  put(t, ")\n");
  for (int j = 0; j < outputs; j++) {
    const mxu_hlo_shape *s = &carry[2 + params + j];
    mxu_hlo_shape one = unstacked(*s);
    snprintf(name, sizeof name, "%%r%d", j);
    snprintf(from, sizeof from, "%%o#%d", carried + j);
    put_reshape(t, name, from, &one, s);
  }
  put(t, "    \"func.return\"(");
  for (int i = 0; i < count; i++)
    put(t, i < carried ? "%s%%o#%d" : "%s%%r%d", i ? ", " : "",
        i < carried ? i : i - carried);
  put(t, ") : ");
  put_main_results(t, count, carried, carry, params);
  put(t, " -> ()\n  }\n");
}

mxu_status mxu_hlo_print_loop(const mxu_hlo *h, int count,
                              const mxu_hlo_value *results, int carried,
                              int steps, int replicas, char **out) {
  *out = NULL;
  if (h->status != MXU_OK) return h->status;
  int params = 0;
  for (int v = 1; v < h->count; v++)
    params += h->nodes[v].op == MXU_HLO_PARAMETER;
  if (steps < 1 || carried > count || carried > params)
    return mxu_fail(MXU_ERR_ARG,
                    "hlo: a loop of %d steps carrying %d of %d parameters "
                    "and %d results",
                    steps, carried, params, count);
  int outputs = count - carried;
  mxu_hlo_shape *carry = calloc((size_t)(2 + params + outputs), sizeof *carry);
  if (!carry) return mxu_fail(MXU_ERR_NOMEM, "hlo: out of memory");
  carry[0] = carry[1] = mxu_hlo_shape_make(MXU_HLO_S32, 0, NULL);
  mxu_status s = MXU_OK;
  for (int v = 1, i = 0; v < h->count; v++) {
    if (h->nodes[v].op != MXU_HLO_PARAMETER) continue;
    const mxu_hlo_shape *p = &h->nodes[v].shape;
    carry[2 + i] = i < carried ? *p : stacked(*p, steps);
    if (i < carried && (results[i] <= 0 || results[i] >= h->count ||
                        !same_shape(&h->nodes[results[i]].shape, p)))
      s = mxu_fail(MXU_ERR_SHAPE,
                   "hlo: the loop's result %d is not its parameter's shape", i);
    i++;
  }
  for (int j = 0; s == MXU_OK && j < outputs; j++) {
    mxu_hlo_value r = results[carried + j];
    if (r <= 0 || r >= h->count)
      s = mxu_fail(MXU_ERR_ARG, "hlo: result %d is no value", carried + j);
    else
      carry[2 + params + j] = stacked(h->nodes[r].shape, steps);
  }
  text t = {0};
  put_module_head(&t, replicas);
  if (s == MXU_OK) {
    if (steps == 1)
      put_single_main(&t, count, carried, carry, params);
    else
      put_loop_main(&t, h, count, results, carried, carry, params);
    s = put_function(&t, h, "func.func private @step", count, results,
                     replicas);
  }
  free(carry);
  return finish(&t, s, out);
}
