/* train.c — `mxu train MODEL.json --data DATA`: Keras' compile and fit from
 * a model file and a command line, validation on the test split, a final
 * evaluation, and optionally the weights and a JSON report. */
#include "cli.h"
#include "fit_extras.h"
#include "options.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *const optimizer_names[] = {
    "adam",  "sgd",      "rmsprop", "adagrad", "adamax",
    "nadam", "adadelta", "lion",    "adamw",   NULL};
static const char *const loss_names[] = {"sparse_categorical_crossentropy",
                                         "categorical_crossentropy",
                                         "binary_crossentropy",
                                         "mean_squared_error",
                                         "mse",
                                         "mean_absolute_error",
                                         "mae",
                                         "huber",
                                         "kl_divergence",
                                         "kld",
                                         "mean_absolute_percentage_error",
                                         "mape",
                                         "mean_squared_logarithmic_error",
                                         "msle",
                                         "log_cosh",
                                         "poisson",
                                         "hinge",
                                         "squared_hinge",
                                         "categorical_hinge",
                                         "cosine_similarity",
                                         "binary_focal_crossentropy",
                                         "categorical_focal_crossentropy",
                                         NULL};
static const char *const verbose_names[] = {"0", "1", "2", NULL};
static const char *const precision_names[] = {"float32", "mixed_bfloat16",
                                              NULL};

/* A list of metrics a flag gives (NAME,NAME,...), cut apart in text. */
typedef struct metric_list {
  const char *given, *flag;
  char text[256];
  const char *names[MXU_MAX_METRICS];
} metric_list;

typedef struct train_args {
  const char *model, *data, *save_weights, *report;
  const char *checkpoint_dir, *resume, *save_model, *initial_weights;
  const char *labels, *label_column;
  float validation_split;
  int checkpoint_every;
  int replicas, threads, steps_per_execution;
  int epochs, batch_size, steps_per_epoch, validation_freq;
  int optimizer, loss, verbose, precision, backend;
  const char *pjrt_plugin;
  float learning_rate, rescale;
  uint64_t seed;
  cli_weights class_weight;
  cli_fit_extras extras; /* callbacks and augmentation */
  int compile_flags;     /* --optimizer, --loss or a metrics flag given */
  metric_list metrics, weighted; /* --metric, --weighted-metric */
} train_args;

#define TRAIN_BASE_OPTIONS 30
#define TRAIN_OPTION_COUNT (TRAIN_BASE_OPTIONS + CLI_FIT_EXTRA_OPTIONS)

/* The table lives in the caller's frame; targets point into args. */
static void train_options(train_args *a, cli_option *o) {
  cli_option table[TRAIN_BASE_OPTIONS] = {
      CLI_OPTION_DATA(&a->data),
      CLI_OPTION_LABELS(&a->labels),
      CLI_OPTION_LABEL_COLUMN(&a->label_column),
      {"--validation-split", "F",
       "hold out the last fraction F (0 < F < 1) of the train samples to "
       "validate and test on, as Keras' fit(validation_split=F), instead of "
       "the data's test split",
       CLI_POSITIVE_FLOAT, &a->validation_split, NULL, 0, 0},
      {"--epochs", "N", "epochs to train (default 1)", CLI_POSITIVE_INT,
       &a->epochs, NULL, 0, 0},
      {"--batch-size", "B",
       "samples per step (default 32, or ceil(samples / S) with "
       "--steps-per-epoch, as Keras infers it)",
       CLI_POSITIVE_INT, &a->batch_size, NULL, 0, 0},
      {"--steps-per-epoch", "S",
       "steps per epoch (default: every full batch of the train split)",
       CLI_POSITIVE_INT, &a->steps_per_epoch, NULL, 0, 0},
      {"--validation-freq", "F",
       "validate on the test split after every F-th epoch (default 1)",
       CLI_POSITIVE_INT, &a->validation_freq, NULL, 0, 0},
      {"--class-weight", "W0,W1,...",
       "weigh each training sample's loss by its class's weight, class 0 "
       "first (Keras' fit(class_weight=...), for imbalanced classes)",
       CLI_WEIGHTS, &a->class_weight, NULL, 0, 0},
      {"--replicas", "N",
       "split each batch over N replicas, as TPUStrategy over N cores: the "
       "batch size must divide by N; weights depend on N, not on --threads "
       "or the MPI process count (default 1)",
       CLI_POSITIVE_INT, &a->replicas, NULL, 0, 0},
      {"--threads", "T",
       "worker threads running the replicas (default: every core)",
       CLI_POSITIVE_INT, &a->threads, NULL, 0, 0},
      {"--steps-per-execution", "K", CLI_STEPS_PER_EXECUTION_HELP,
       CLI_POSITIVE_INT, &a->steps_per_execution, NULL, 0, 0},
      {"--optimizer", "NAME",
       "adam, sgd, rmsprop, adagrad, adamax, nadam, adadelta, lion or "
       "adamw, with Keras' defaults (default: the model file's "
       "compile_config, else adam)",
       CLI_CHOICE, &a->optimizer, optimizer_names, 0, 0},
      {"--learning-rate", "LR",
       "the optimizer's learning rate (default: the model file's, else "
       "0.01 for sgd, else 0.001)",
       CLI_POSITIVE_FLOAT, &a->learning_rate, NULL, 0, 0},
      {"--loss", "NAME",
       "a Keras loss: sparse_categorical_crossentropy, "
       "categorical_crossentropy, binary_crossentropy, mean_squared_error "
       "(mse), mean_absolute_error (mae), huber, kl_divergence (kld), "
       "mean_absolute_percentage_error (mape), "
       "mean_squared_logarithmic_error (msle), log_cosh, poisson, hinge, "
       "squared_hinge, categorical_hinge, cosine_similarity, "
       "binary_focal_crossentropy, categorical_focal_crossentropy (Keras' "
       "gamma 2, alpha 0.25) "
       "(default: the model file's, else sparse_categorical_crossentropy)",
       CLI_CHOICE, &a->loss, loss_names, 0, 0},
      {"--metric", "NAME[,NAME...]",
       "the metrics, separated by commas: accuracy, binary_accuracy, "
       "categorical_accuracy, "
       "sparse_categorical_accuracy, top_k_categorical_accuracy, "
       "sparse_top_k_categorical_accuracy, mae, mse, "
       "root_mean_squared_error, precision, recall, auc, prc (the PR "
       "curve's), true_positives, false_positives, true_negatives, "
       "false_negatives, binary_crossentropy, mape, msle, logcosh, "
       "poisson, hinge, squared_hinge, categorical_hinge, cosine_similarity, "
       "f1_score(average=micro|macro|weighted[,threshold=T]), "
       "binary_accuracy(threshold=T), auc(from_logits=1), "
       "precision and recall(threshold=T,top_k=K,class_id=C), "
       "true_positives and the other counts(threshold=T), "
       "fbeta_score(average=A,beta=B[,threshold=T]), "
       "mean_iou(num_classes=N[,ignore_class=C]) of class labels and "
       "one_hot_mean_iou(...) of one-hot targets (the same options), "
       "binary_iou(threshold=T,class_id=0 or 1) too; NAME=METRIC logs "
       "METRIC as NAME (roc=auc) (default: the model file's, else "
       "accuracy)",
       CLI_STRING, &a->metrics.given, NULL, 0, 0},
      {"--weighted-metric", "NAME[,NAME...]",
       "Keras' weighted_metrics: metrics as --metric's that the samples' "
       "weights (--class-weight) weigh, logged as "
       "weighted_NAME beside a metric NAME (default: the model file's)",
       CLI_STRING, &a->weighted.given, NULL, 0, 0},
      {"--precision", "P",
       "float32 or mixed_bfloat16 (Keras' mixed precision: float32 weights, "
       "bfloat16 Conv2D and Dense where they pay, on CPUs with "
       "AVX512_BF16; default float32)",
       CLI_CHOICE, &a->precision, precision_names, 0, 0},
      {"--backend", "B", CLI_BACKEND_HELP, CLI_CHOICE, &a->backend,
       cli_backend_names, 0, 0},
      {"--pjrt-plugin", "PATH", CLI_PJRT_PLUGIN_HELP, CLI_STRING,
       &a->pjrt_plugin, NULL, 0, 0},
      {"--rescale", "X",
       "multiply every sample value of both splits by X, e.g. 1/255 "
       "(default 1)",
       CLI_POSITIVE_FLOAT, &a->rescale, NULL, 0, 0},
      {"--seed", "S",
       "seed of the initialisers, shuffling and dropout "
       "(default 0)",
       CLI_COUNT, &a->seed, NULL, 0, 0},
      {"--verbose", "V",
       "0 silent, 1 progress bar, 2 one line per epoch (default 1)", CLI_CHOICE,
       &a->verbose, verbose_names, 0, 0},
      {"--save-weights", "FILE",
       "write the trained weights to FILE as Keras' save_weights does: "
       "FILE.h5 in tf.keras 2.x's layout, FILE.weights.h5 in Keras 3's",
       CLI_STRING, &a->save_weights, NULL, 0, 0},
      {"--save-model", "FILE.h5",
       "write the whole model as Keras' model.save does (config, weights, "
       "optimizer state), which --resume FILE continues from",
       CLI_STRING, &a->save_model, NULL, 0, 0},
      {"--report", "FILE",
       "write a JSON report (epoch logs, test result, images/s) to FILE",
       CLI_STRING, &a->report, NULL, 0, 0},
      {"--checkpoint-dir", "DIR",
       "write crash-safe full-model checkpoints (Keras .h5 with optimizer "
       "state and training position) to DIR, keeping the newest two",
       CLI_STRING, &a->checkpoint_dir, NULL, 0, 0},
      {"--checkpoint-every", "N",
       "checkpoint every N steps (default: at the end of every epoch)",
       CLI_POSITIVE_INT, &a->checkpoint_every, NULL, 0, 0},
      {"--resume", "DIR|FILE",
       "continue from the newest complete checkpoint in DIR (skipping "
       "corrupt ones) or from a full-model FILE, bit for bit; DIR also "
       "receives new checkpoints unless --checkpoint-dir says otherwise",
       CLI_STRING, &a->resume, NULL, 0, 0},
      {"--initial-weights", "FILE",
       "start from the weights in FILE, as Keras' load_weights before fit "
       "(fine-tuning): a .h5 or .weights.h5 file of this model, checked "
       "against it layer by layer",
       CLI_STRING, &a->initial_weights, NULL, 0, 0},
  };
  memcpy(o, table, sizeof table);
  cli_fit_extra_options(&a->extras, o + TRAIN_BASE_OPTIONS);
}

static const char train_summary[] =
    "Trains the Keras model in MODEL.json (model.to_json(); its "
    "compile_config,\nif any, gives the optimizer, loss and metrics) on "
    "DATA's train split,\nvalidating on its test split, then evaluates on "
    "the test split.";

/* Keras' names for the accuracy that goes with each loss. */
static void match_metrics(const char **metrics, mxu_loss loss) {
  const char *sparse = "sparse_categorical_accuracy";
  const char *dense = "categorical_accuracy";
  for (int m = 0; m < MXU_MAX_METRICS && metrics[m]; m++) {
    if (loss == MXU_CATEGORICAL_CROSSENTROPY && strcmp(metrics[m], sparse) == 0)
      metrics[m] = dense;
    if (loss == MXU_SPARSE_CATEGORICAL_CROSSENTROPY &&
        strcmp(metrics[m], dense) == 0)
      metrics[m] = sparse;
  }
}

/* A flag's NAME,NAME,...: the names into list->names. */
static int split_metrics(metric_list *list) {
  if (!list->given) return CLI_OK;
  snprintf(list->text, sizeof list->text, "%s", list->given);
  int n = 0;
  for (char *name = list->text; name;) {
    /* The next comma outside a metric's options, "f1_score(a=1,b=2)". */
    char *comma = name;
    for (int depth = 0; *comma && (*comma != ',' || depth); comma++)
      depth += (*comma == '(') - (*comma == ')');
    comma = *comma ? comma : NULL;
    if (comma) *comma = 0;
    if (!*name || n == MXU_MAX_METRICS)
      return cli_usage_error("train",
                             "%s: '%s' is not a list of 1 to %d metric "
                             "names separated by commas",
                             list->flag, list->given, MXU_MAX_METRICS);
    list->names[n++] = name;
    name = comma ? comma + 1 : NULL;
  }
  return CLI_OK;
}

/* Flags given on the command line win over the model file. */
static void apply_overrides(const cli_command *cmd, const train_args *a,
                            mxu_compile_config *c) {
  if (cli_find(cmd, "--optimizer")->given) {
    mxu_optimizer_config named;
    mxu_optimizer_from_name(optimizer_names[a->optimizer], &named);
    /* The same optimizer keeps the file's settings (betas, momentum). */
    if (named.kind != c->optimizer.kind) c->optimizer = named;
  }
  if (cli_find(cmd, "--learning-rate")->given)
    c->optimizer.learning_rate = a->learning_rate;
  if (cli_find(cmd, "--loss")->given) {
    mxu_loss_from_name(loss_names[a->loss], &c->loss);
    c->from_logits = 0;
    c->label_smoothing = 0.0f;
    c->huber_delta = 1.0f;
    c->gamma = 2.0f;
    c->alpha = 0.25f;
    c->apply_class_balancing = 0;
    c->has_ignore_class = 0;
    match_metrics(c->metrics, c->loss);
    match_metrics(c->weighted_metrics, c->loss);
  }
  if (a->metrics.given) memcpy(c->metrics, a->metrics.names, sizeof c->metrics);
  if (a->weighted.given)
    memcpy(c->weighted_metrics, a->weighted.names, sizeof c->weighted_metrics);
  /* A model of several outputs: the flags give every output the loss or
   * metrics, each keeping its loss weight. */
  for (int j = 0; j < c->output_count; j++) {
    mxu_output_loss *o = &c->outputs[j];
    if (cli_find(cmd, "--loss")->given) {
      mxu_output_loss own = *o;
      *o = mxu_output_loss_defaults();
      o->loss = c->loss;
      o->weight = own.weight;
      memcpy(o->metrics, own.metrics, sizeof o->metrics);
      memcpy(o->weighted_metrics, own.weighted_metrics,
             sizeof o->weighted_metrics);
      match_metrics(o->metrics, c->loss);
      match_metrics(o->weighted_metrics, c->loss);
    }
    if (a->metrics.given)
      memcpy(o->metrics, a->metrics.names, sizeof o->metrics);
    if (a->weighted.given)
      memcpy(o->weighted_metrics, a->weighted.names,
             sizeof o->weighted_metrics);
  }
  if (cli_find(cmd, "--precision")->given)
    c->precision = a->precision ? MXU_MIXED_BFLOAT16 : MXU_PRECISION_FLOAT32;
  c->seed = a->seed;
  c->replicas = a->replicas;
  c->threads = a->threads;
  if (cli_find(cmd, "--backend")->given)
    c->backend = (mxu_backend_kind)a->backend;
  if (a->pjrt_plugin) c->pjrt_plugin = a->pjrt_plugin;
  if (a->steps_per_execution) c->steps_per_execution = a->steps_per_execution;
}

/* The batch fit will use, so compile plans for it once. */
static int fit_batch(const train_args *a, int64_t samples) {
  return (int)mxu_fit_batch_size(a->batch_size, a->steps_per_epoch, samples);
}

typedef struct train_run {
  mxu_model *model;
  mxu_dataset *train, *test;
  mxu_dataset *whole; /* with --validation-split: what train and test view */
  mxu_compile_config compile;
  const mxu_history *history;
  double test_loss;
  mxu_output_log test_outputs[MXU_MAX_OUTPUTS];
  uint64_t seed; /* the fit seed, the checkpoint's when resumed */
} train_run;

/* A compile_config mxu cannot follow gives way to the command line's
 * --optimizer, --loss or --metric (Keras' defaults for the rest), as a
 * user recompiling a Keras model would: the model is read without it. */
static mxu_status load_overridden(const train_args *a, train_run *run,
                                  mxu_status s) {
  if (s != MXU_ERR_UNSUPPORTED || !a->compile_flags) return s;
  char why[1024];
  snprintf(why, sizeof why, "%s", mxu_errmsg());
  /* Without it, the layers' own error (if any) is the one to tell. */
  mxu_status without = mxu_model_load_json(a->model, &run->model, NULL, NULL);
  if (without != MXU_OK) return without;
  if (mxu_distributed_rank() == 0)
    fprintf(stderr,
            "mxu train: %s\nmxu train: the command line's --optimizer, "
            "--loss and --metric stand for the model file's compile "
            "settings (Keras' defaults for what they leave out)\n",
            why);
  run->compile = mxu_compile_defaults();
  return MXU_OK;
}

static mxu_status load(const train_args *a, train_run *run) {
  cli_data data = {a->data, a->labels, a->label_column, a->rescale, 0};
  mxu_status s = cli_load_model_for(a->model, &data, MXU_TRAIN, &run->model,
                                    &run->compile);
  s = load_overridden(a, run, s);
  const mxu_model *input = s == MXU_OK ? run->model : NULL;
  if (s != MXU_OK || !a->validation_split) {
    if (s == MXU_OK) s = cli_load_split(&data, MXU_TRAIN, input, &run->train);
    if (s == MXU_OK) s = cli_load_split(&data, MXU_TEST, input, &run->test);
    return s;
  }
  /* Keras' split: the last samples, before any shuffling, at
   * floor(count * (1 - F)), F the double of the decimal given: the float
   * 0.2f would split 4000 samples at 3199, Keras' 0.2 at 3200. */
  s = cli_load_split(&data, MXU_TRAIN, input, &run->whole);
  int64_t count = s == MXU_OK ? mxu_dataset_count(run->whole) : 0;
  char decimal[32];
  snprintf(decimal, sizeof decimal, "%.7g", (double)a->validation_split);
  int64_t at = (int64_t)floor((double)count * (1.0 - strtod(decimal, NULL)));
  /* Too few samples for the split leave both NULL: run_train says so. */
  if (s == MXU_OK && at >= 1 && at < count)
    s = mxu_dataset_slice(run->whole, 0, at, &run->train);
  if (s == MXU_OK && run->train)
    s = mxu_dataset_slice(run->whole, at, count - at, &run->test);
  return s;
}

/* Flags that ask for more samples than the train split has are usage
 * errors; caught before compile lays out a batch that large. */
static int check_batch(const train_args *a, const train_run *run) {
  long long count = (long long)mxu_dataset_count(run->train);
  if (a->batch_size > count)
    return cli_usage_error("train",
                           "--batch-size: %d is larger than the %lld samples "
                           "of the train split of %s",
                           a->batch_size, count, a->data);
  if (a->batch_size && (long long)a->steps_per_epoch * a->batch_size > count)
    return cli_usage_error("train",
                           "--steps-per-epoch: %d steps of %d samples need "
                           "%lld samples but the train split of %s has %lld",
                           a->steps_per_epoch, a->batch_size,
                           (long long)a->steps_per_epoch * a->batch_size,
                           a->data, count);
  return CLI_OK;
}

static mxu_status compile_model(const cli_command *cmd, const train_args *a,
                                train_run *run) {
  apply_overrides(cmd, a, &run->compile);
  run->compile.batch_size = fit_batch(a, mxu_dataset_count(run->train));
  mxu_status s = mxu_compile(run->model, &run->compile);
  if (s == MXU_OK) cli_note_precision("train", run->model, &run->compile);
  if (s == MXU_OK && !a->initial_weights && !a->resume &&
      cli_whole_model(a->model)) {
    /* Keras' load_model then fit: the file's weights and optimizer state,
     * training from the first epoch. */
    s = mxu_restore_model(run->model, a->model, NULL);
    if (s == MXU_OK && a->verbose)
      printf("weights and optimizer state from %s\n", a->model);
  }
  if (s != MXU_OK || !a->initial_weights) return s;
  s = mxu_load_weights(run->model, a->initial_weights);
  if (s == MXU_OK && a->verbose)
    printf("initial weights from %s\n", a->initial_weights);
  return s;
}

/* --resume names a full-model file when one exists there, else a
 * checkpoint directory (perhaps not created yet: a first run). */
static int is_file(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* A resume goes on as the checkpoint says, whatever this run was given;
 * Keras would too, but not without a word. */
static void note_other_settings(const train_run *run,
                                const mxu_train_position *at, uint64_t seed) {
  int batch = run->compile.batch_size;
  int replicas = run->compile.replicas > 0 ? run->compile.replicas : 1;
  if (at->seed != seed)
    fprintf(stderr,
            "mxu train: resume: going on with the checkpoint's seed %llu "
            "(its shuffle order and dropout), not this run's --seed %llu\n",
            (unsigned long long)at->seed, (unsigned long long)seed);
  if (at->batch_size && at->batch_size != batch)
    fprintf(stderr,
            "mxu train: resume: the checkpoint was written at batch size %d, "
            "this run's is %d: epoch %d goes on from step %d of %d samples, "
            "so it will not match an uninterrupted run\n",
            at->batch_size, batch, at->epoch + 1, at->step + 1, batch);
  if (at->replicas && at->replicas != replicas)
    fprintf(stderr,
            "mxu train: resume: the checkpoint was written with %d replicas, "
            "this run has %d: training goes on, but its sums run in another "
            "order, so not bit for bit as an uninterrupted run\n",
            at->replicas, replicas);
}

/* Restores --resume into the compiled model and says where fit goes on.
 * A directory without checkpoints starts from scratch. */
static mxu_status resume(const train_args *a, train_run *run,
                         mxu_fit_config *fit) {
  if (!a->resume) return MXU_OK;
  mxu_train_position at = {.seed = a->seed};
  int found = 1;
  char skipped[2048] = "";
  mxu_status s = is_file(a->resume)
                     ? mxu_restore_model(run->model, a->resume, &at)
                     : mxu_checkpoint_restore(run->model, a->resume, &at,
                                              &found, skipped, sizeof skipped);
  if (skipped[0]) fprintf(stderr, "mxu train: resume: skipped %s\n", skipped);
  if (s != MXU_OK) return s;
  if (!found) {
    if (a->verbose)
      printf("no checkpoint in %s yet: starting from the beginning\n",
             a->resume);
    return MXU_OK;
  }
  note_other_settings(run, &at, a->seed);
  fit->initial_epoch = at.epoch;
  fit->initial_step = at.step;
  fit->seed = at.seed; /* the run's own shuffle and dropout streams */
  if (a->verbose)
    printf("resuming at epoch %d, step %d\n", at.epoch + 1, at.step + 1);
  return MXU_OK;
}

static mxu_status fit_and_evaluate(train_args *a, train_run *run) {
  mxu_fit_config fit = mxu_fit_defaults();
  fit.epochs = a->epochs;
  /* What the user gave, unresolved, so fit infers exactly as Keras does. */
  fit.batch_size = a->batch_size;
  fit.steps_per_epoch = a->steps_per_epoch;
  fit.validation = run->test;
  fit.validation_freq = a->validation_freq;
  fit.seed = a->seed;
  fit.verbose = a->verbose;
  fit.checkpoint_dir = a->checkpoint_dir;
  if (!fit.checkpoint_dir && a->resume && !is_file(a->resume))
    fit.checkpoint_dir = a->resume;
  fit.checkpoint_every = a->checkpoint_every;
  if (a->class_weight.count) {
    fit.class_weight = a->class_weight.items;
    fit.class_weight_count = a->class_weight.count;
  }
  cli_fit_extras_apply(&a->extras, &fit);
  mxu_status s = resume(a, run, &fit);
  if (s != MXU_OK) return s;
  run->seed = fit.seed;
  /* A checkpoint past the last epoch leaves only the evaluation. */
  int train = fit.initial_epoch < fit.epochs;
  if (a->verbose)
    printf("Train on %lld samples, validate on %lld samples\n",
           (long long)mxu_dataset_count(run->train),
           (long long)mxu_dataset_count(run->test));
  run->test_loss = NAN;
  if (train) {
    s = mxu_fit(run->model, run->train, &fit, &run->history);
    if (s != MXU_OK) return s;
    int64_t executions = 0, steps = 0;
    mxu_device_counts(run->model, &executions, &steps);
    if (a->verbose && executions)
      printf("pjrt: %lld training steps in %lld executions (host round "
             "trips)\n",
             (long long)steps, (long long)executions);
    /* A last epoch that validated already scored the final weights on the
     * test split; a second pass would give the same numbers. */
    const mxu_epoch_log *last = &run->history->epochs[run->history->count - 1];
    run->test_loss = last->val_loss;
    for (int j = 0; j < last->output_count; j++) {
      mxu_output_log *o = &run->test_outputs[j];
      *o = last->outputs[j];
      o->loss = o->val_loss;
      memcpy(o->values, o->val_values, sizeof o->values);
    }
  }
  if (isnan(run->test_loss))
    s = mxu_evaluate_outputs(run->model, run->test, 0, &run->test_loss,
                             run->test_outputs);
  if (s != MXU_OK) return s;
  if (mxu_distributed_rank() == 0)
    cli_print_test(run->test_loss, run->test_outputs,
                   mxu_model_output_count(run->model));
  fflush(stdout);
  return MXU_OK;
}

/* The report with the test confusion matrix, whose predict pass every
 * process of an MPI world takes part in; rank 0 writes it. */
static int write_report(const train_args *a, train_run *run, double start) {
  cli_report report = {0};
  report.model = a->model;
  report.data = a->data;
  report.history = run->history;
  report.batch_size = run->compile.batch_size;
  report.test_loss = run->test_loss;
  report.test_outputs = run->test_outputs;
  report.output_count = mxu_model_output_count(run->model);
  int code = cli_report_confusion("train", run->model, run->test, &report);
  report.wall_seconds = cli_now() - start; /* the confusion pass included */
  if (code == CLI_OK && mxu_distributed_rank() == 0)
    code = cli_write_report("train", a->report, &report);
  cli_report_release(&report);
  return code;
}

/* Weights and model first, so a report that cannot be written costs
 * nothing already trained. */
static int finish(const train_args *a, train_run *run, double start) {
  /* Every process holds the same model; one writes the files. */
  int writer = mxu_distributed_rank() == 0;
  if (writer && a->save_weights) {
    if (mxu_save_weights(run->model, a->save_weights) != MXU_OK)
      return cli_runtime_error("train");
    if (a->verbose) printf("weights saved to %s\n", a->save_weights);
  }
  if (writer && a->save_model) {
    /* Training is complete: a resume from this file only evaluates. */
    mxu_train_position end = {.epoch = a->epochs, .seed = run->seed};
    if (mxu_save_model(run->model, a->save_model, &end) != MXU_OK)
      return cli_runtime_error("train");
    if (a->verbose) printf("model saved to %s\n", a->save_model);
  }
  return a->report ? write_report(a, run, start) : CLI_OK;
}

static int run_train(const cli_command *cmd, train_args *a, train_run *run,
                     double start) {
  if (load(a, run) != MXU_OK) return cli_runtime_error("train");
  if (!run->train)
    return cli_usage_error("train",
                           "--validation-split: %g of the %lld samples of %s "
                           "leaves none to train or none to validate",
                           a->validation_split,
                           (long long)mxu_dataset_count(run->whole), a->data);
  int code = check_batch(a, run);
  if (code != CLI_OK) return code;
  code = cli_fit_extras_build(&a->extras, a->epochs);
  if (code != CLI_OK) return code;
  if (compile_model(cmd, a, run) != MXU_OK ||
      fit_and_evaluate(a, run) != MXU_OK)
    return cli_runtime_error("train");
  return finish(a, run, start);
}

int cli_train(int argc, char **argv) {
  double start = cli_now();
  train_args a = {0};
  a.epochs = a.validation_freq = a.verbose = 1;
  a.rescale = 1.0f;
  cli_option options[TRAIN_OPTION_COUNT];
  train_options(&a, options);
  cli_command cmd = {"train", "MODEL.json", train_summary, options,
                     TRAIN_OPTION_COUNT};
  int parsed = cli_parse(&cmd, argc, argv, &a.model);
  if (parsed != CLI_OK) return parsed < 0 ? CLI_OK : parsed;
  a.metrics.flag = "--metric";
  a.weighted.flag = "--weighted-metric";
  parsed = split_metrics(&a.metrics);
  if (parsed == CLI_OK) parsed = split_metrics(&a.weighted);
  if (parsed != CLI_OK) return parsed;
  a.compile_flags = cli_find(&cmd, "--optimizer")->given ||
                    cli_find(&cmd, "--loss")->given ||
                    cli_find(&cmd, "--metric")->given ||
                    cli_find(&cmd, "--weighted-metric")->given;
  if (mxu_distributed_rank() != 0) a.verbose = 0; /* rank 0 speaks */
  /* Before training, not after it: a bad name must not cost the run. */
  parsed = cli_check_weights_path("train", "--save-weights", a.save_weights, 0);
  if (parsed != CLI_OK) return parsed;
  for (int i = 0; i < 2; i++) {
    const char *name = i ? a.save_model : a.extras.model_checkpoint;
    if (!name || mxu_model_path_check(name) == MXU_OK) continue;
    /* The library says "model file: "; the flag says it better here. */
    const char *why = mxu_errmsg();
    if (strncmp(why, "model file: ", 12) == 0) why += 12;
    return cli_usage_error("train", "%s: %s",
                           i ? "--save-model" : "--model-checkpoint", why);
  }
  if (a.validation_split >= 1.0f)
    return cli_usage_error("train",
                           "--validation-split: %g is not a fraction below 1",
                           a.validation_split);
  if ((a.labels || a.label_column) && !a.validation_split)
    return cli_usage_error("train",
                           "%s: .npy arrays and CSV tables have no test "
                           "split; give --validation-split F to hold out "
                           "their last fraction F",
                           a.labels ? "--labels" : "--label-column");
  if (a.labels && a.label_column)
    return cli_usage_error("train", "--labels (an .npy's) and --label-column "
                                    "(a CSV's): give one");
  if (a.initial_weights && a.resume)
    return cli_usage_error("train",
                           "--initial-weights: --resume already gives the "
                           "starting weights; give one of the two");

  train_run run = {0};
  int code = run_train(&cmd, &a, &run, start);
  cli_fit_extras_free(&a.extras);
  mxu_model_free(run.model);
  mxu_dataset_free(run.train);
  mxu_dataset_free(run.test);
  mxu_dataset_free(run.whole);
  return code;
}
