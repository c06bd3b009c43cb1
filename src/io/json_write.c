/* json_write.c — mxu_model_to_json and mxu_model_save_json: any mxu model
 * as the JSON tf.keras 2.x's model.to_json() writes (or Keras 3's), so
 * Keras' model_from_json rebuilds it; files are replaced atomically. */
#include "io/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KERAS2_VERSION MXU_KERAS2_VERSION
#define KERAS3_VERSION MXU_KERAS3_VERSION

/* The common keys in Keras' order (name, trainable, dtype), then the
 * class's own. */
static cJSON *layer_config(mxu_json_out *out, const char *name) {
  cJSON *config = cJSON_CreateObject();
  mxu_json_put_string(out, config, "name", name);
  mxu_json_put_bool(out, config, "trainable", 1);
  mxu_json_put_dtype(out, config);
  return config;
}

/* A layer list entry; Keras 3 adds the input shape it was built on (a
 * merge: the list of its inputs' shapes). */
static cJSON *layer_entry(mxu_json_out *out, const char *class_name,
                          cJSON *config, const mxu_layer *built) {
  const mxu_keras_origin *o = built ? built->cls->origin : NULL;
  const char *module = !o            ? "keras.layers"
                       : out->keras3 ? o->module_k3
                                     : o->module_tf2;
  cJSON *entry = mxu_json_object(out, module, class_name, config);
  if (!entry) {
    out->failed = 1;
    return NULL;
  }
  /* Keras finds such a class by its registered name (tf.keras 2 too). */
  if (o) {
    cJSON_DeleteItemFromObjectCaseSensitive(entry, "registered_name");
    if (!out->keras3) mxu_json_put_string(out, entry, "module", module);
    mxu_json_put_string(out, entry, "registered_name",
                        out->keras3 ? o->registered_k3 : o->registered_tf2);
  }
  if (out->keras3 && built && built->cls->call_tensors) {
    /* build(query_shape, value_shape, key_shape): its shapes_dict */
    cJSON *shapes = cJSON_CreateObject(), *build = cJSON_CreateObject();
    for (int k = 0; k < built->input_count; k++) {
      char key[64];
      snprintf(key, sizeof key, "%s_shape", built->cls->call_tensors[k]);
      mxu_json_put(out, shapes, key,
                   mxu_json_batch_shape(&built->in_shapes[k]));
    }
    mxu_json_put(out, build, "shapes_dict", shapes);
    mxu_json_put(out, entry, "build_config", build);
  } else if (out->keras3 && built && built->cls->list_argument &&
             built->input_count > 1) {
    /* An RNN's build(sequences_shape, initial_state_shape). */
    cJSON *shapes = cJSON_CreateObject(), *build = cJSON_CreateObject();
    cJSON *list = cJSON_CreateArray();
    char key[64];
    mxu_json_put(out, shapes, "sequences_shape",
                 mxu_json_batch_shape(&built->in_shapes[0]));
    for (int k = 1; k < built->input_count; k++)
      if (!cJSON_AddItemToArray(list,
                                mxu_json_batch_shape(&built->in_shapes[k])))
        out->failed = 1;
    snprintf(key, sizeof key, "%s_shape", built->cls->list_argument);
    mxu_json_put(out, shapes, key, list);
    mxu_json_put(out, build, "shapes_dict", shapes);
    mxu_json_put(out, entry, "build_config", build);
  } else if (out->keras3 && built && built->input_count) {
    cJSON *shape = NULL;
    if (built->cls->max_inputs == 1 || built->cls->list_argument) {
      shape = mxu_json_batch_shape(&built->in_shape);
    } else if ((shape = cJSON_CreateArray())) {
      for (int k = 0; k < built->input_count; k++)
        if (!cJSON_AddItemToArray(shape,
                                  mxu_json_batch_shape(&built->in_shapes[k])))
          out->failed = 1;
    }
    cJSON *build = cJSON_CreateObject();
    mxu_json_put(out, build, "input_shape", shape);
    mxu_json_put(out, entry, "build_config", build);
  }
  return entry;
}

static cJSON *input_entry(mxu_json_out *out, const mxu_layer *input) {
  cJSON *config = cJSON_CreateObject();
  mxu_json_put(out, config, out->keras3 ? "batch_shape" : "batch_input_shape",
               mxu_json_batch_shape(&input->out_shape));
  mxu_json_put_string(out, config, "dtype",
                      mxu_input_dtypes[input->config.input_dtype]);
  mxu_json_put_bool(out, config, "sparse", 0);
  mxu_json_put_bool(out, config, "ragged", 0);
  mxu_json_put_string(out, config, "name", input->name);
  return layer_entry(out, "InputLayer", config, NULL);
}

static mxu_status layer_json(mxu_json_out *out, const mxu_layer *layer,
                             cJSON **entry) {
  if (layer->cls == &mxu_input_layer_class) {
    *entry = input_entry(out, layer);
    return MXU_OK;
  }
  if (!layer->cls->write_config)
    return mxu_fail(MXU_ERR_UNSUPPORTED,
                    "model_to_json: layer '%s': no JSON writer for class %s",
                    layer->name, layer->cls->class_name);
  cJSON *config =
      layer_config(out, layer->wrapped[0] ? layer->wrapped : layer->name);
  layer->cls->write_config(out, layer, config);
  if (mxu_has_activity(layer) &&
      layer->cls != &mxu_activity_regularization_class) {
    cJSON_DeleteItemFromObjectCaseSensitive(config, "activity_regularizer");
    mxu_json_put_regularizer(out, config, "activity_regularizer",
                             &layer->activity);
  }
  if (!layer->wrapped[0]) {
    *entry = layer_entry(out, layer->cls->class_name, config, layer);
    return MXU_OK;
  }
  /* TimeDistributed(layer): the wrapper builds the layer itself. */
  cJSON *wrapper = layer_config(out, layer->name);
  mxu_json_put(out, wrapper, "layer",
               layer_entry(out, layer->cls->class_name, config, NULL));
  *entry = layer_entry(out, "TimeDistributed", wrapper, layer);
  return MXU_OK;
}

/* [layer, index, tensor]: tensor t as the model `scope` names it: a
 * layer's call (its output of several), or a model used as a layer there
 * (mxu_scope_tensor). */
static cJSON *history(mxu_json_out *out, const mxu_model *model, int scope,
                      int t) {
  int index = 0, tensor = 0;
  const char *name =
      mxu_scope_tensor(model, scope, t, out->keras3, &index, &tensor);
  cJSON *triple = cJSON_CreateArray();
  if (!triple || !cJSON_AddItemToArray(triple, cJSON_CreateString(name)) ||
      !cJSON_AddItemToArray(triple, cJSON_CreateNumber(index)) ||
      !cJSON_AddItemToArray(triple, cJSON_CreateNumber(tensor)))
    out->failed = 1;
  return triple;
}

static void append(mxu_json_out *out, cJSON *list, cJSON *item) {
  if (!list || !item || !cJSON_AddItemToArray(list, item)) {
    out->failed = 1;
    cJSON_Delete(item);
  }
}

/* tf.keras 2: [layer, 0, 0, {}]; Keras 3: a __keras_tensor__. */
static cJSON *tensor_ref(mxu_json_out *out, const mxu_model *model, int scope,
                         int t) {
  cJSON *triple = history(out, model, scope, t);
  if (!out->keras3) {
    append(out, triple, cJSON_CreateObject());
    return triple;
  }
  cJSON *config = cJSON_CreateObject();
  mxu_json_put(out, config, "shape",
               mxu_json_batch_shape(&model->layers[t].out_shape));
  mxu_json_put_string(out, config, "dtype", "float32");
  mxu_json_put(out, config, "keras_history", triple);
  cJSON *tensor = cJSON_CreateObject();
  mxu_json_put_string(out, tensor, "class_name", "__keras_tensor__");
  mxu_json_put(out, tensor, "config", config);
  return tensor;
}

/* One call reading `inputs`: [refs] (tf.keras 2), or {"args": [ref] or
 * [[refs]], "kwargs": {}} (Keras 3, a merge's inputs as one list
 * argument; the inputs after the first as the list argument `named`, an
 * RNN's initial_state, in the kwargs). node: the call's layer, whose
 * write_call adds its call arguments (tf.keras 2: to every reference's
 * kwargs), or NULL. */
static cJSON *call_json(mxu_json_out *out, const mxu_model *model, int scope,
                        const int *inputs, int count, int list,
                        const char *named, const mxu_layer *node) {
  int options = node && node->cls->write_call;
  cJSON *refs = cJSON_CreateArray();
  for (int k = 0; k < count; k++) {
    cJSON *ref = tensor_ref(out, model, scope, inputs[k]);
    if (!out->keras3 && options)
      node->cls->write_call(out, node, cJSON_GetArrayItem(ref, 3));
    append(out, refs, ref);
  }
  if (!out->keras3) return refs;
  cJSON *args = cJSON_CreateArray(), *kwargs = cJSON_CreateObject();
  if (options) node->cls->write_call(out, node, kwargs);
  if (!list) {
    append(out, args, cJSON_DetachItemFromArray(refs, 0));
    if (named && count > 1)
      mxu_json_put(out, kwargs, named, refs);
    else
      cJSON_Delete(refs);
  } else {
    append(out, args, refs);
  }
  cJSON *call = cJSON_CreateObject();
  mxu_json_put(out, call, "args", args);
  mxu_json_put(out, call, "kwargs", kwargs);
  return call;
}

/* A call of a class that names its tensors (MultiHeadAttention): Keras 3
 * passes them by position, tf.keras 2 the first so and the others by name
 * in its kwargs; the class's options join the kwargs. */
static cJSON *named_call_json(mxu_json_out *out, const mxu_model *model,
                              const mxu_layer *node) {
  cJSON *kwargs = cJSON_CreateObject();
  const int *inputs = node->inputs;
  if (!out->keras3)
    for (int k = 1; k < node->input_count; k++)
      mxu_json_put(out, kwargs, node->cls->call_tensors[k],
                   history(out, model, node->scope, inputs[k]));
  if (node->cls->write_call) node->cls->write_call(out, node, kwargs);
  if (!out->keras3) {
    cJSON *first = history(out, model, node->scope, inputs[0]);
    append(out, first, kwargs);
    cJSON *refs = cJSON_CreateArray();
    append(out, refs, first);
    return refs;
  }
  cJSON *args = cJSON_CreateArray(), *call = cJSON_CreateObject();
  for (int k = 0; k < node->input_count; k++)
    append(out, args, tensor_ref(out, model, node->scope, inputs[k]));
  mxu_json_put(out, call, "args", args);
  mxu_json_put(out, call, "kwargs", kwargs);
  return call;
}

/* Every call of the layer in call order: a shared layer's other calls are
 * nodes of their own. */
static cJSON *inbound_nodes(mxu_json_out *out, const mxu_model *model,
                            const mxu_layer *layer) {
  cJSON *nodes = cJSON_CreateArray();
  /* An InputLayer reads nothing in its model (inside a model used as a
   * layer, the call of that model says what it views). */
  if (layer->cls == &mxu_input_layer_class) return nodes;
  for (int call = 0, found = 1; found; call++) {
    found = 0;
    for (int i = 0; i < model->layer_count && !found; i++) {
      const mxu_layer *node = &model->layers[i];
      if (node->owner == layer->index && node->call == call) {
        append(out, nodes,
               layer->cls->call_tensors
                   ? named_call_json(out, model, node)
                   : call_json(out, model, layer->scope, node->inputs,
                               node->input_count,
                               layer->cls->max_inputs > 1 &&
                                   !layer->cls->list_argument,
                               layer->cls->list_argument, node));
        found = 1;
      }
    }
  }
  return nodes;
}

/* ---- ops Keras records as layers (json_read.c) ---------------------------
 * Written back as Keras wrote them. An op with a number was read as a
 * Rescaling: x + c has scale 1, x * c offset 0, c - x scale -1 and x - c
 * offset -c; x / c as mxu_divide_class, c its scale. */

/* The op's number, and whether it is the first operand (c - x); 0 where
 * the op is on two tensors. */
static int op_number(const mxu_layer *layer, double *number) {
  if (layer->cls != &mxu_rescaling_class && layer->cls != &mxu_divide_class)
    return 0;
  const mxu_rescaling_config *r = &layer->config.rescaling;
  int first = layer->op == MXU_OP_SUBTRACT && r->scale != 1.0f;
  *number = layer->op == MXU_OP_MULTIPLY || layer->op == MXU_OP_DIVIDE
                ? r->scale
            : layer->op == MXU_OP_SUBTRACT && !first ? -r->offset
                                                     : r->offset;
  return first ? -1 : 1;
}

/* Reshape's new shape with the batch first: [-1, d1, ...]. */
static cJSON *op_shape(const mxu_layer *layer) {
  cJSON *list = cJSON_CreateArray();
  const mxu_shape *t = &layer->config.reshape.target;
  cJSON_AddItemToArray(list, cJSON_CreateNumber(-1));
  for (int d = 0; d < t->rank; d++)
    cJSON_AddItemToArray(list, cJSON_CreateNumber((double)t->dims[d]));
  return list;
}

/* Concat's tensors: Keras 3 one list argument, tf.keras 2 a reference
 * each with the axis. */
static cJSON *op_list(mxu_json_out *out, const mxu_model *model,
                      const mxu_layer *layer) {
  cJSON *list = cJSON_CreateArray();
  for (int k = 0; k < layer->input_count; k++) {
    cJSON *ref = out->keras3
                     ? tensor_ref(out, model, layer->scope, layer->inputs[k])
                     : history(out, model, layer->scope, layer->inputs[k]);
    if (!out->keras3) {
      cJSON *kwargs = cJSON_CreateObject();
      mxu_json_put_number(out, kwargs, mxu_json_op_of(layer)->tf2_key,
                          layer->config.merge.axis);
      append(out, ref, kwargs);
    }
    append(out, list, ref);
  }
  return list;
}

/* Keras 3: {"args": [a, b], "kwargs": {}} (an activation, a reshape:
 * [a]; a concat: [[a, b, ...]]). */
static cJSON *op_call_k3(mxu_json_out *out, const mxu_model *model,
                         const mxu_layer *layer) {
  if (layer->op == MXU_OP_CONCATENATE) {
    cJSON *args = cJSON_CreateArray(), *call = cJSON_CreateObject();
    append(out, args, op_list(out, model, layer));
    mxu_json_put(out, call, "args", args);
    mxu_json_put(out, call, "kwargs", cJSON_CreateObject());
    return call;
  }
  double number = 0.0;
  int has = op_number(layer, &number);
  cJSON *args = cJSON_CreateArray(), *call = cJSON_CreateObject();
  cJSON *a = tensor_ref(out, model, layer->scope, layer->inputs[0]);
  cJSON *b = has ? cJSON_CreateNumber(number)
             : layer->input_count > 1
                 ? tensor_ref(out, model, layer->scope, layer->inputs[1])
                 : NULL;
  append(out, args, has < 0 ? b : a);
  if (b) append(out, args, has < 0 ? a : b);
  mxu_json_put(out, call, "args", args);
  mxu_json_put(out, call, "kwargs", cJSON_CreateObject());
  return call;
}

/* tf.keras 2: [layer, node, tensor, {"y": b, "name": null}], a tensor y
 * a bare [layer, node, tensor]; a number first goes in the reference's
 * place as ["_CONSTANT_VALUE", -1, c, ...]. */
static cJSON *op_call_tf2(mxu_json_out *out, const mxu_model *model,
                          const mxu_layer *layer) {
  if (layer->op == MXU_OP_CONCATENATE) return op_list(out, model, layer);
  double number = 0.0;
  int has = op_number(layer, &number);
  cJSON *call = history(out, model, layer->scope, layer->inputs[0]), *y;
  if (layer->input_count == 1 && !has) {
    y = NULL; /* an activation */
  } else if (!has) {
    y = history(out, model, layer->scope, layer->inputs[1]);
  } else if (has > 0) {
    y = cJSON_CreateNumber(number);
  } else {
    y = call;
    call = cJSON_CreateArray();
    append(out, call, cJSON_CreateString("_CONSTANT_VALUE"));
    append(out, call, cJSON_CreateNumber(-1));
    append(out, call, cJSON_CreateNumber(number));
  }
  cJSON *kwargs = cJSON_CreateObject();
  if (y) mxu_json_put(out, kwargs, "y", y);
  if (layer->op == MXU_OP_RESHAPE)
    mxu_json_put(out, kwargs, mxu_json_op_of(layer)->tf2_key, op_shape(layer));
  mxu_json_put_null(out, kwargs, "name");
  append(out, call, kwargs);
  return call;
}

static cJSON *op_json(mxu_json_out *out, const mxu_model *model,
                      const mxu_layer *layer) {
  const mxu_json_op *op = mxu_json_op_of(layer);
  if (!op) return NULL;
  cJSON *entry = cJSON_CreateObject(), *config = NULL;
  cJSON *nodes = cJSON_CreateArray();
  if (out->keras3) {
    config = cJSON_CreateObject();
    mxu_json_put_string(out, config, "name", layer->name);
    if (layer->op == MXU_OP_CONCATENATE)
      mxu_json_put_number(out, config, op->k3_key, layer->config.merge.axis);
    if (layer->op == MXU_OP_RESHAPE)
      mxu_json_put(out, config, op->k3_key, op_shape(layer));
    mxu_json_put_string(out, entry, "module", op->k3_module);
    mxu_json_put_string(out, entry, "class_name", op->k3);
    append(out, nodes, op_call_k3(out, model, layer));
  } else {
    config = layer_config(out, layer->name);
    mxu_json_put_string(out, config, "function", op->tf2);
    mxu_json_put_string(out, entry, "module",
                        "tf_keras.src.layers.core.tf_op_layer");
    mxu_json_put_string(out, entry, "class_name", "TFOpLambda");
    append(out, nodes, op_call_tf2(out, model, layer));
  }
  mxu_json_put(out, entry, "config", config);
  mxu_json_put_string(out, entry, "registered_name",
                      out->keras3 ? op->k3 : "TFOpLambda");
  mxu_json_put_string(out, entry, "name", layer->name);
  mxu_json_put(out, entry, "inbound_nodes", nodes);
  return entry;
}

/* The InputLayers of `scope` (a model used as a layer: those that view
 * the tensors it is called on), in node order. */
static int scope_inputs(const mxu_model *model, int scope, int *out) {
  int count = 0;
  if (!scope) {
    memcpy(out, model->inputs, (size_t)model->input_count * sizeof *out);
    return model->input_count;
  }
  for (int i = model->scopes[scope].first;
       i <= model->scopes[scope].last && count < MXU_MAX_INPUTS; i++)
    if (model->layers[i].scope == scope &&
        model->layers[i].cls == &mxu_input_layer_class)
      out[count++] = i;
  return count;
}

/* input_layers / output_layers: a list of triples; Keras 3 writes a lone
 * tensor as the bare triple. */
static cJSON *endpoints(mxu_json_out *out, const mxu_model *model, int scope,
                        const int *nodes, int count) {
  if (out->keras3 && count == 1) return history(out, model, scope, nodes[0]);
  cJSON *list = cJSON_CreateArray();
  for (int k = 0; k < count; k++)
    append(out, list, history(out, model, scope, nodes[k]));
  return list;
}

static int scope_sequential(const mxu_model *model, int scope) {
  return scope ? model->scopes[scope].sequential : model->sequential;
}

static mxu_status scope_layers(mxu_json_out *out, const mxu_model *model,
                               int scope, cJSON *layers);

/* A model used as a layer: its own config (name, layers; a Functional's
 * inputs and outputs), and how the model around it calls it. */
static mxu_status nested_json(mxu_json_out *out, const mxu_model *model,
                              int scope, cJSON **entry) {
  const mxu_scope *sc = &model->scopes[scope];
  cJSON *config = cJSON_CreateObject(), *layers = cJSON_CreateArray();
  mxu_json_put_string(out, config, "name", sc->name);
  if (out->keras3 || !sc->sequential)
    mxu_json_put_bool(out, config, "trainable", 1);
  if (out->keras3 && sc->sequential) mxu_json_put_dtype(out, config);
  MXU_TRY(scope_layers(out, model, scope, layers));
  mxu_json_put(out, config, "layers", layers);
  int inputs[MXU_MAX_INPUTS], count = scope_inputs(model, scope, inputs);
  if (!sc->sequential) {
    mxu_json_put(out, config, "input_layers",
                 endpoints(out, model, scope, inputs, count));
    mxu_json_put(out, config, "output_layers",
                 endpoints(out, model, scope, &sc->output, 1));
  }
  *entry = cJSON_CreateObject();
  if (out->keras3)
    mxu_json_put_string(out, *entry, "module",
                        sc->sequential ? "keras"
                                       : "keras.src.models.functional");
  mxu_json_put_string(out, *entry, "class_name",
                      sc->sequential ? "Sequential" : "Functional");
  mxu_json_put(out, *entry, "config", config);
  if (out->keras3 && sc->sequential)
    mxu_json_put_null(out, *entry, "registered_name");
  else if (out->keras3)
    mxu_json_put_string(out, *entry, "registered_name", "Functional");
  mxu_json_put_string(out, *entry, "name", sc->name);
  int outer[MXU_MAX_INPUTS];
  for (int k = 0; k < count; k++) outer[k] = model->layers[inputs[k]].inputs[0];
  cJSON *nodes = cJSON_CreateArray();
  append(
      out, nodes,
      call_json(out, model, sc->parent, outer, count, count > 1, NULL, NULL));
  mxu_json_put(out, *entry, "inbound_nodes", nodes);
  return MXU_OK;
}

/* The layers list of `scope`: a Sequential's starts with its InputLayer,
 * which is not one of its layers; a graph's entries name what they read. */
static mxu_status scope_layers(mxu_json_out *out, const mxu_model *model,
                               int scope, cJSON *layers) {
  int *items = malloc((size_t)(model->layer_count + 1) * sizeof *items);
  if (!items) return mxu_fail(MXU_ERR_NOMEM, "model_to_json: out of memory");
  int count = mxu_scope_layers(model, scope, items);
  int sequential = scope_sequential(model, scope);
  mxu_status s = MXU_OK;
  if (sequential) {
    int input = scope ? model->scopes[scope].first : 0;
    append(out, layers, input_entry(out, &model->layers[input]));
  }
  for (int j = 0; s == MXU_OK && j < count; j++) {
    cJSON *entry = NULL;
    if (items[j] < 0) {
      s = nested_json(out, model, -1 - items[j], &entry);
    } else {
      const mxu_layer *layer = &model->layers[items[j]];
      if (layer->op && !sequential) {
        entry = op_json(out, model, layer);
        if (!entry) out->failed = 1;
      } else {
        s = layer_json(out, layer, &entry);
      }
      if (s == MXU_OK && !sequential && !layer->op) {
        mxu_json_put_string(out, entry, "name", layer->name);
        mxu_json_put(out, entry, "inbound_nodes",
                     inbound_nodes(out, model, layer));
      }
    }
    if (entry) append(out, layers, entry);
  }
  free(items);
  return s;
}

static mxu_status add_layers(mxu_json_out *out, const mxu_model *model,
                             cJSON *layers) {
  return scope_layers(out, model, 0, layers);
}

/* {"name", "layers"} (tf.keras 2.x); Keras 3 adds trainable, dtype and the
 * build input shape. A functional model adds its inputs and outputs. */
static cJSON *model_config(mxu_json_out *out, const mxu_model *model,
                           cJSON *layers) {
  cJSON *config = cJSON_CreateObject();
  mxu_json_put_string(out, config, "name", model->name);
  if (out->keras3) {
    mxu_json_put_bool(out, config, "trainable", 1);
    if (model->sequential) mxu_json_put_dtype(out, config);
  }
  mxu_json_put(out, config, "layers", layers);
  if (!model->sequential) {
    int output = mxu_model_output(model);
    mxu_json_put(out, config, "input_layers",
                 endpoints(out, model, 0, model->inputs, model->input_count));
    mxu_json_put(out, config, "output_layers",
                 model->output_count ? endpoints(out, model, 0, model->outputs,
                                                 model->output_count)
                                     : endpoints(out, model, 0, &output, 1));
  } else if (out->keras3) {
    mxu_json_put(out, config, "build_input_shape",
                 mxu_json_batch_shape(&mxu_model_input(model)->out_shape));
  }
  return config;
}

static cJSON *model_root(mxu_json_out *out, const mxu_model *model,
                         cJSON *config) {
  if (model->sequential)
    return mxu_json_object(out, "keras", "Sequential", config);
  cJSON *root = cJSON_CreateObject();
  if (out->keras3)
    mxu_json_put_string(out, root, "module", "keras.src.models.functional");
  mxu_json_put_string(out, root, "class_name", "Functional");
  mxu_json_put(out, root, "config", config);
  if (out->keras3)
    mxu_json_put_string(out, root, "registered_name", "Functional");
  return root;
}

static cJSON *model_document(mxu_json_out *out, const mxu_model *model,
                             mxu_status *status) {
  cJSON *layers = cJSON_CreateArray();
  *status = layers ? add_layers(out, model, layers) : MXU_OK;
  cJSON *root = model_root(out, model, model_config(out, model, layers));
  if (!root) out->failed = 1;
  if (out->keras3) {
    cJSON *build = cJSON_CreateObject();
    mxu_json_put(out, build, "input_shape",
                 mxu_json_batch_shape(&mxu_model_input(model)->out_shape));
    mxu_json_put(out, root, "build_config", build);
  }
  if (model->compiled)
    mxu_json_put(out, root, "compile_config",
                 mxu_json_compile_config(out, model));
  mxu_json_put_string(out, root, "keras_version",
                      out->keras3 ? KERAS3_VERSION : KERAS2_VERSION);
  mxu_json_put_string(out, root, "backend", "tensorflow");
  return root;
}

/* cJSON opens an empty object on one line and closes it on the next;
 * "{}" reads better. In place: the text only shrinks. */
static void collapse_empty_objects(char *text) {
  size_t j = 0;
  for (size_t i = 0; text[i]; i++) {
    text[j++] = text[i];
    if (text[i] != '{') continue;
    size_t k = i + 1;
    int lines = 0;
    while (text[k] == '\n' || text[k] == ' ') lines += text[k++] == '\n';
    /* A raw newline never occurs inside a string: cJSON escapes it. */
    if (lines && text[k] == '}') {
      text[j++] = '}';
      i = k;
    }
  }
  text[j] = 0;
}

/* cJSON indents with tabs and puts one after each colon; two spaces and
 * one space read better. Raw tabs occur nowhere else: cJSON escapes them
 * inside strings. */
static char *tidy(const char *text) {
  size_t tabs = 0;
  for (const char *p = text; *p; p++) tabs += *p == '\t';
  char *out = malloc(strlen(text) + tabs + 2);
  if (!out) return NULL;
  size_t j = 0;
  for (const char *p = text; *p; p++) {
    if (*p != '\t') {
      out[j++] = *p;
    } else if (p > text && p[-1] == ':') {
      out[j++] = ' ';
    } else {
      out[j++] = ' ';
      out[j++] = ' ';
    }
  }
  out[j++] = '\n';
  out[j] = 0;
  collapse_empty_objects(out);
  return out;
}

mxu_status mxu_model_to_json(const mxu_model *model, int keras3, char **out) {
  if (out) *out = NULL;
  if (!model || !out)
    return mxu_fail(MXU_ERR_ARG, "model_to_json: model and out are required");
  if (!model->input_count)
    return mxu_fail(MXU_ERR_ARG,
                    "model_to_json: the model has no input (mxu_add_input)");
  mxu_json_out writer = {keras3 != 0, 0};
  mxu_status status = MXU_OK;
  cJSON *root = model_document(&writer, model, &status);
  char *text = status == MXU_OK && !writer.failed ? cJSON_Print(root) : NULL;
  cJSON_Delete(root);
  if (status != MXU_OK) {
    cJSON_free(text);
    return status;
  }
  *out = text ? tidy(text) : NULL;
  cJSON_free(text);
  if (!*out) return mxu_fail(MXU_ERR_NOMEM, "model_to_json: out of memory");
  return MXU_OK;
}

/* ---- files ---------------------------------------------------------------
 */

mxu_status mxu_model_save_json(const mxu_model *model, const char *path,
                               int keras3) {
  if (!path) return mxu_fail(MXU_ERR_ARG, "model_save_json: path is required");
  char *text = NULL;
  MXU_TRY(mxu_model_to_json(model, keras3, &text));
  mxu_status status = mxu_file_write(path, text, strlen(text));
  free(text);
  return status;
}
