/* bench.c — `mxu bench MODEL.json`: times full training steps (forward,
 * backward, all-reduce, optimizer) on synthetic data after a warm-up, over
 * several repeats, and prints images/s, GFLOP/s from the model's exact
 * FLOP count and the fraction of this machine's peak, which it measures
 * itself; --profile adds the time of every layer, --report a JSON file. */
#include "cli.h"
#include "options.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* bench_peak.c: the best GFLOP/s of an FMA loop on `threads` threads;
 * *kind names the instructions ("AVX-512 FMA"). */
double cli_bench_peak_gflops(int threads, const char **kind);

static const char *const precision_names[] = {"float32", "mixed_bfloat16",
                                              NULL};

/* Enough steps to reach steady speed (oneDNN's first calls, page faults
 * in the arenas) before anything is timed. */
#define WARMUP_STEPS 2
/* Runs of each layer's program when profiling pjrt (the median is kept). */
#define PROFILE_REPEATS 5

typedef struct bench_args {
  const char *model, *report;
  int batch_size, replicas, threads, steps, repeats, precision, backend;
  const char *pjrt_plugin;
  int slice_rows, steps_per_execution;
  int profile;
  int augment;
} bench_args;

#define BENCH_OPTION_COUNT 13

static void bench_options(bench_args *a, cli_option *o) {
  cli_option table[BENCH_OPTION_COUNT] = {
      {"--batch-size", "B", "global batch per step (default 32)",
       CLI_POSITIVE_INT, &a->batch_size, NULL, 0, 0},
      {"--replicas", "N",
       "split each batch over N replicas, as mxu train --replicas "
       "(default 1)",
       CLI_POSITIVE_INT, &a->replicas, NULL, 0, 0},
      {"--threads", "T",
       "worker threads, and the threads the peak is measured on (default: "
       "every core)",
       CLI_POSITIVE_INT, &a->threads, NULL, 0, 0},
      {"--slice-rows", "R",
       "rows a replica runs through the network at a time, where no layer "
       "computes batch statistics (default: from the L2 cache size)",
       CLI_POSITIVE_INT, &a->slice_rows, NULL, 0, 0},
      {"--steps", "S", "timed training steps per repeat (default 10)",
       CLI_POSITIVE_INT, &a->steps, NULL, 0, 0},
      {"--repeats", "R", "timed repeats; the median is reported (default 3)",
       CLI_POSITIVE_INT, &a->repeats, NULL, 0, 0},
      {"--precision", "P",
       "float32 or mixed_bfloat16: Keras' mixed precision, bfloat16 "
       "Conv2D and Dense where they pay, on CPUs with AVX512_BF16 "
       "(default float32)",
       CLI_CHOICE, &a->precision, precision_names, 0, 0},
      {"--backend", "B", CLI_BACKEND_HELP, CLI_CHOICE, &a->backend,
       cli_backend_names, 0, 0},
      {"--pjrt-plugin", "PATH", CLI_PJRT_PLUGIN_HELP, CLI_STRING,
       &a->pjrt_plugin, NULL, 0, 0},
      {"--steps-per-execution", "K", CLI_STEPS_PER_EXECUTION_HELP,
       CLI_POSITIVE_INT, &a->steps_per_execution, NULL, 0, 0},
      {"--profile", "",
       "print the time of every layer, forward and backward, on the first "
       "replica",
       CLI_FLAG, &a->profile, NULL, 0, 0},
      {"--augment", "",
       "augment every batch on the prefetch thread as the cifar-augmented "
       "recipe does (rotation 20, shifts 0.2, horizontal flips)",
       CLI_FLAG, &a->augment, NULL, 0, 0},
      {"--report", "FILE",
       "write the results as JSON (images_per_second, gflops, peak_gflops, "
       "peak_fraction, the CPU and the commit) to FILE",
       CLI_STRING, &a->report, NULL, 0, 0},
  };
  memcpy(o, table, sizeof table);
}

static const char bench_summary[] =
    "Times full training steps (forward, backward, all-reduce, optimizer) "
    "of the\nKeras model in MODEL.json on synthetic data after a warm-up, "
    "and prints\nimages/s, GFLOP/s (from the model's exact FLOP count) and "
    "the fraction of\nthis machine's float32 peak, measured with an FMA loop.";

/* ---- the run ------------------------------------------------------------ */

typedef struct bench_run {
  mxu_model *model;
  mxu_dataset *data;
  mxu_compile_config compile;
  double flops; /* per training image */
  double peak;  /* GFLOP/s */
  const char *peak_kind;
  double *images_per_second; /* one per repeat */
  double median;             /* of images_per_second */
  double timed_seconds;      /* all repeats together */
  mxu_layer_profile *layers; /* --profile: one per layer */
  int layer_count;
} bench_run;

/* count samples of pixel-like values 0..255 (a pattern, so no kernel sees
 * a constant) with labels cycling over the classes: one a sample, or under
 * the sparse loss over an output of several positions (a segmentation's
 * pixels, a tagger's steps) one a position, as numbers. */
static int synthetic_data(const mxu_shape *shape, int classes,
                          int64_t positions, int64_t count, mxu_dataset **out) {
  int64_t values = count * mxu_shape_count(shape);
  float *x = malloc((size_t)values * sizeof *x);
  int32_t *labels = malloc((size_t)count * sizeof *labels);
  float *each =
      positions > 1 ? malloc((size_t)(count * positions) * sizeof *each) : NULL;
  int code = CLI_OK;
  if (!x || !labels || (positions > 1 && !each)) {
    fprintf(stderr, "mxu bench: out of memory for %lld synthetic samples\n",
            (long long)count);
    code = CLI_RUNTIME;
  } else {
    for (int64_t i = 0; i < values; i++) x[i] = (float)(i * 37 % 256);
    for (int64_t i = 0; i < count; i++) labels[i] = (int32_t)(i % classes);
    for (int64_t i = 0; each && i < count * positions; i++)
      each[i] = (float)(i * 7 % classes);
    mxu_status made =
        each ? mxu_dataset_from_targets(x, each, count, *shape, (int)positions,
                                        out)
             : mxu_dataset_from_arrays(x, labels, count, *shape, classes, out);
    if (made != MXU_OK) code = cli_runtime_error("bench");
  }
  free(x);
  free(labels);
  free(each);
  return code;
}

/* The model, data for every step, and the compiled plan. */
static int prepare(const bench_args *a, bench_run *run) {
  if (cli_load_model(a->model, &run->model, &run->compile) != MXU_OK)
    return cli_runtime_error("bench");
  mxu_shape shape = mxu_model_input_shape(run->model);
  int layers = mxu_model_layer_count(run->model);
  mxu_shape last = mxu_model_layer_shape(run->model, layers - 1);
  int steps = a->steps > WARMUP_STEPS ? a->steps : WARMUP_STEPS;
  int64_t classes = mxu_shape_count(&last), positions = 1;
  if (run->compile.loss == MXU_SPARSE_CATEGORICAL_CROSSENTROPY &&
      last.rank > 1) {
    classes = last.dims[last.rank - 1];
    positions = mxu_shape_count(&last) / classes;
  }
  int code = synthetic_data(&shape, (int)classes, positions,
                            (int64_t)a->batch_size * steps, &run->data);
  if (code != CLI_OK) return code;
  run->compile.batch_size = a->batch_size;
  run->compile.replicas = a->replicas;
  run->compile.threads = a->threads;
  run->compile.slice_rows = a->slice_rows;
  if (a->steps_per_execution)
    run->compile.steps_per_execution = a->steps_per_execution;
  if (a->backend) run->compile.backend = (mxu_backend_kind)a->backend;
  if (a->pjrt_plugin) run->compile.pjrt_plugin = a->pjrt_plugin;
  run->compile.precision =
      a->precision ? MXU_MIXED_BFLOAT16 : MXU_PRECISION_FLOAT32;
  mxu_status compiled = mxu_compile(run->model, &run->compile);
  if (compiled == MXU_OK)
    cli_note_precision("bench", run->model, &run->compile);
  if (compiled != MXU_OK) return cli_runtime_error("bench");
  run->flops = mxu_model_train_flops(run->model);
  return CLI_OK;
}

/* One epoch of `steps` steps, silent and without validation. */
static mxu_status fit_steps(const bench_args *a, bench_run *run, int steps) {
  mxu_fit_config fit = mxu_fit_defaults();
  fit.epochs = 1;
  fit.batch_size = a->batch_size;
  fit.steps_per_epoch = steps;
  fit.verbose = 0;
  mxu_augment_config augment = mxu_augment_defaults();
  augment.rotation_range = 20;
  augment.width_shift_range = augment.height_shift_range = 0.2f;
  augment.horizontal_flip = 1;
  if (a->augment) fit.augment = &augment;
  return mxu_fit(run->model, run->data, &fit, NULL);
}

static int compare_doubles(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

/* Of count >= 1 values; 0 when out of memory for the sorted copy. */
static double median(const double *values, int count) {
  double *sorted = malloc((size_t)count * sizeof *sorted);
  if (!sorted) return 0.0;
  memcpy(sorted, values, (size_t)count * sizeof *sorted);
  qsort(sorted, (size_t)count, sizeof *sorted, compare_doubles);
  double m = count % 2 ? sorted[count / 2]
                       : (sorted[count / 2 - 1] + sorted[count / 2]) / 2;
  free(sorted);
  return m;
}

/* The timed repeats, profiled when asked; each is one fit timed on a
 * monotonic clock, so its per-call cost is in the numbers, as in
 * training. */
static int measure(const bench_args *a, bench_run *run) {
  if (a->profile && mxu_profile_enable(run->model, 1) != MXU_OK)
    return cli_runtime_error("bench");
  for (int r = 0; r < a->repeats; r++) {
    double start = cli_now();
    if (fit_steps(a, run, a->steps) != MXU_OK)
      return cli_runtime_error("bench");
    double seconds = cli_now() - start;
    run->images_per_second[r] = (double)a->batch_size * a->steps / seconds;
    run->timed_seconds += seconds;
  }
  run->median = median(run->images_per_second, a->repeats);
  if (!a->profile) return CLI_OK;
  mxu_profile_enable(run->model, 0);
  if (a->backend == MXU_BACKEND_PJRT &&
      mxu_profile_device(run->model, PROFILE_REPEATS) != MXU_OK)
    return cli_runtime_error("bench");
  run->layer_count = mxu_profile_read(run->model, NULL, 0);
  run->layers = calloc((size_t)run->layer_count, sizeof *run->layers);
  if (!run->layers) {
    fprintf(stderr, "mxu bench: profile: out of memory\n");
    return CLI_RUNTIME;
  }
  mxu_profile_read(run->model, run->layers, run->layer_count);
  return CLI_OK;
}

/* ---- output ------------------------------------------------------------- */

static double ms_per_step(const bench_args *a, double images_per_second) {
  return 1000.0 * a->batch_size / images_per_second;
}

static double gflops(const bench_run *run, double images_per_second) {
  return run->flops * images_per_second / 1e9;
}

static const char *plural(int n) { return n == 1 ? "" : "s"; }

static void print_header(const bench_args *a, const bench_run *run) {
  int rows = mxu_model_slice_rows(run->model);
  printf("%s: batch %d over %d replica%s on %d thread%s, %s\n", a->model,
         a->batch_size, a->replicas, plural(a->replicas), a->threads,
         plural(a->threads), precision_names[a->precision]);
  if (rows * a->replicas < a->batch_size)
    printf("  each replica's %d rows in slices of %d\n",
           a->batch_size / a->replicas, rows);
  /* Winograd does fewer multiplications than the count, so GFLOP/s (and
   * the fraction of peak) can exceed what the FMA units do. */
  printf("  %.2f MFLOP per training image (forward, backward, all-reduce, "
         "optimizer; convolutions counted as direct ones)\n",
         run->flops / 1e6);
  printf("  peak %.1f GFLOP/s float32 (%s on %d thread%s)\n", run->peak,
         run->peak_kind, a->threads, plural(a->threads));
}

static void print_line(const bench_args *a, const bench_run *run,
                       const char *label, double images_per_second) {
  double g = gflops(run, images_per_second);
  printf("  %-9s %10.1f images/s %10.2f ms/step %8.1f GFLOP/s %6.1f%% of "
         "peak\n",
         label, images_per_second, ms_per_step(a, images_per_second), g,
         run->peak > 0 ? 100.0 * g / run->peak : 0.0);
}

/* Replica 0's layers per step; a layer's share is of their sum. */
static double layer_ms(const mxu_layer_profile *p, double seconds) {
  return p->steps > 0 ? 1000.0 * seconds / (double)p->steps : 0.0;
}

static double layers_total_ms(const bench_run *run) {
  double total = 0;
  for (int i = 0; i < run->layer_count; i++)
    total += layer_ms(&run->layers[i], run->layers[i].forward_seconds +
                                           run->layers[i].backward_seconds);
  return total;
}

static double layer_share(const bench_run *run, int i, double total) {
  const mxu_layer_profile *p = &run->layers[i];
  double ms = layer_ms(p, p->forward_seconds + p->backward_seconds);
  return total > 0 ? ms / total : 0.0;
}

static void print_profile(const bench_args *a, const bench_run *run) {
  double total = layers_total_ms(run);
  printf("\n  %-24s %-20s %11s %11s %7s\n", "layer", "class", "forward ms",
         "backward ms", "share");
  for (int i = 0; i < run->layer_count; i++) {
    const mxu_layer_profile *p = &run->layers[i];
    if (p->fused_into) {
      printf("  %-24s %-20s   (fused into %s)\n", p->name, p->class_name,
             p->fused_into);
      continue;
    }
    printf("  %-24s %-20s %11.3f %11.3f %6.1f%%\n", p->name, p->class_name,
           layer_ms(p, p->forward_seconds), layer_ms(p, p->backward_seconds),
           100.0 * layer_share(run, i, total));
  }
  /* The profile covers every timed step: compare with their mean. */
  double step_ms =
      1000.0 * run->timed_seconds / ((double)a->repeats * a->steps);
  printf(
      "  replica 0's layers: %.3f ms of the %.3f ms mean step (the rest:\n"
      "  the loss, other replicas, the all-reduce, the optimizer, the data)\n",
      total, step_ms);
}

static void print_results(const bench_args *a, const bench_run *run) {
  print_header(a, run);
  for (int r = 0; r < a->repeats; r++) {
    char label[32];
    snprintf(label, sizeof label, "repeat %d", r + 1);
    print_line(a, run, label, run->images_per_second[r]);
  }
  print_line(a, run, "median", run->median);
  if (a->profile) print_profile(a, run);
  fflush(stdout);
}

/* ---- report ------------------------------------------------------------- */

/* The "model name" line of /proc/cpuinfo. */
static void cpu_model(char *out, size_t size) {
  snprintf(out, size, "unknown");
  FILE *f = fopen("/proc/cpuinfo", "r");
  char line[512];
  while (f && fgets(line, sizeof line, f)) {
    const char *colon = strchr(line, ':');
    if (strncmp(line, "model name", 10) != 0 || !colon) continue;
    colon += strspn(colon + 1, " \t") + 1;
    snprintf(out, size, "%.*s", (int)strcspn(colon, "\n"), colon);
    break;
  }
  if (f) fclose(f);
}

/* The checkout's commit, so a result can be traced to its code; "unknown"
 * outside a git checkout or without git. */
static void commit_id(char *out, size_t size) {
  snprintf(out, size, "unknown");
  FILE *p = popen("git rev-parse --short HEAD 2>/dev/null", "r");
  if (!p) return;
  char line[64] = "";
  int got = fgets(line, sizeof line, p) != NULL;
  if (pclose(p) == 0 && got && line[0] != '\n')
    snprintf(out, size, "%.*s", (int)strcspn(line, "\n"), line);
}

static cJSON *profile_json(const bench_run *run) {
  cJSON *rows = cJSON_CreateArray();
  double total = layers_total_ms(run);
  for (int i = 0; i < run->layer_count; i++) {
    const mxu_layer_profile *p = &run->layers[i];
    cJSON *row = cJSON_CreateObject();
    cJSON_AddStringToObject(row, "name", p->name);
    cJSON_AddStringToObject(row, "class", p->class_name);
    cJSON_AddNumberToObject(row, "forward_ms", layer_ms(p, p->forward_seconds));
    cJSON_AddNumberToObject(row, "backward_ms",
                            layer_ms(p, p->backward_seconds));
    cJSON_AddNumberToObject(row, "share", layer_share(run, i, total));
    cJSON_AddItemToArray(rows, row);
  }
  return rows;
}

static void add_machine(cJSON *root) {
  char text[256];
  cpu_model(text, sizeof text);
  cJSON_AddStringToObject(root, "cpu", text);
  commit_id(text, sizeof text);
  cJSON_AddStringToObject(root, "commit", text);
}

static cJSON *report_json(const bench_args *a, const bench_run *run) {
  cJSON *root = cJSON_CreateObject();
  double g = gflops(run, run->median);
  cJSON_AddStringToObject(root, "model", a->model);
  cJSON_AddNumberToObject(root, "batch_size", a->batch_size);
  cJSON_AddNumberToObject(root, "replicas", a->replicas);
  cJSON_AddNumberToObject(root, "slice_rows", mxu_model_slice_rows(run->model));
  cJSON_AddNumberToObject(root, "threads", a->threads);
  cJSON_AddNumberToObject(root, "steps", a->steps);
  /* As asked: compile says on stderr when the CPU falls back to float32. */
  cJSON_AddStringToObject(root, "precision", precision_names[a->precision]);
  cJSON_AddBoolToObject(root, "augment", a->augment);
  cJSON_AddNumberToObject(root, "train_flops_per_image", run->flops);
  cJSON_AddNumberToObject(root, "images_per_second", run->median);
  cJSON_AddNumberToObject(root, "ms_per_step", ms_per_step(a, run->median));
  cJSON_AddNumberToObject(root, "gflops", g);
  cJSON_AddNumberToObject(root, "peak_gflops", run->peak);
  cJSON_AddNumberToObject(root, "peak_fraction",
                          run->peak > 0 ? g / run->peak : 0.0);
  cJSON_AddItemToObject(
      root, "repeats",
      cJSON_CreateDoubleArray(run->images_per_second, a->repeats));
  add_machine(root);
  if (a->profile) cJSON_AddItemToObject(root, "profile", profile_json(run));
  return root;
}

static int write_text(FILE *file, void *text) {
  size_t length = strlen(text);
  if (fwrite(text, 1, length, file) != length || fputc('\n', file) == EOF)
    return errno ? errno : EIO;
  return 0;
}

static int write_report(const bench_args *a, const bench_run *run) {
  cJSON *root = report_json(a, run);
  char *text = root ? cJSON_Print(root) : NULL;
  cJSON_Delete(root);
  if (!text) {
    fprintf(stderr, "mxu bench: report: %s: out of memory\n", a->report);
    return CLI_RUNTIME;
  }
  int error = cli_write_atomically(a->report, write_text, text);
  cJSON_free(text);
  if (!error) return CLI_OK;
  fprintf(stderr, "mxu bench: report: %s: cannot write: %s\n", a->report,
          strerror(error));
  return CLI_RUNTIME;
}

/* ---- the command -------------------------------------------------------- */

/* The peak first, on an idle machine; then the model. Under MPI every
 * process times its share and rank 0 speaks. */
static int run_bench(const bench_args *a, bench_run *run) {
  run->peak = cli_bench_peak_gflops(a->threads, &run->peak_kind);
  run->images_per_second = calloc((size_t)a->repeats, sizeof(double));
  if (!run->images_per_second) {
    fprintf(stderr, "mxu bench: out of memory\n");
    return CLI_RUNTIME;
  }
  int code = prepare(a, run);
  if (code != CLI_OK) return code;
  if (fit_steps(a, run, WARMUP_STEPS) != MXU_OK)
    return cli_runtime_error("bench");
  code = measure(a, run);
  if (code != CLI_OK || mxu_distributed_rank() != 0) return code;
  print_results(a, run);
  return a->report ? write_report(a, run) : CLI_OK;
}

static int check_args(bench_args *a) {
  if (a->batch_size % a->replicas != 0)
    return cli_usage_error("bench",
                           "--batch-size: %d does not divide by --replicas "
                           "%d; use a multiple of %d",
                           a->batch_size, a->replicas, a->replicas);
  if (!a->threads) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    a->threads = cores > 0 ? (int)cores : 1;
  }
  return CLI_OK;
}

static int parse(bench_args *a, int argc, char **argv) {
  cli_option options[BENCH_OPTION_COUNT];
  bench_options(a, options);
  cli_command cmd = {"bench", "MODEL.json", bench_summary, options,
                     BENCH_OPTION_COUNT};
  int parsed = cli_parse(&cmd, argc, argv, &a->model);
  if (parsed != CLI_OK) return parsed;
  return check_args(a);
}

int cli_bench(int argc, char **argv) {
  bench_args a = {0};
  a.batch_size = 32;
  a.replicas = 1;
  a.steps = 10;
  a.repeats = 3;
  int parsed = parse(&a, argc, argv);
  if (parsed != CLI_OK) return parsed < 0 ? CLI_OK : parsed;
  bench_run run = {0};
  int code = run_bench(&a, &run);
  mxu_model_free(run.model);
  mxu_dataset_free(run.data);
  free(run.images_per_second);
  free(run.layers);
  return code;
}
