/* check.h — the tiny harness every test uses: CHECK records a failure with
 * its place and goes on, so one run shows every broken assertion; the test
 * exits non-zero if any failed. */
#ifndef MXU_TEST_CHECK_H
#define MXU_TEST_CHECK_H

#include "mxu.h"

#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int check_failures;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      check_failures++;                                                        \
    }                                                                          \
  } while (0)

#define CHECK_MSG(cond, ...)                                                   \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                            \
      fputc('\n', stderr);                                                     \
      check_failures++;                                                        \
    }                                                                          \
  } while (0)

#define CHECK_OK(expr)                                                         \
  do {                                                                         \
    mxu_status check_status_ = (expr);                                         \
    CHECK_MSG(check_status_ == MXU_OK, "%s -> %s: %s", #expr,                  \
              mxu_status_name(check_status_), mxu_errmsg());                   \
  } while (0)

#define CHECK_NEAR(a, b, tol)                                                  \
  do {                                                                         \
    double check_a_ = (a), check_b_ = (b);                                     \
    CHECK_MSG(fabs(check_a_ - check_b_) <= (tol), "%s = %.9g, %s = %.9g", #a,  \
              check_a_, #b, check_b_);                                         \
  } while (0)

static inline int check_report(const char *name) {
  if (check_failures) {
    fprintf(stderr, "%s: %d check(s) failed\n", name, check_failures);
    return 1;
  }
  printf("%s: all checks passed\n", name);
  return 0;
}

/* Whether haystack contains needle; NULLs never match. */
static inline int has(const char *haystack, const char *needle) {
  return haystack && needle && strstr(haystack, needle) != NULL;
}

/* A call must fail with status want and a message containing needle
 * (any message when needle is NULL). */
static inline void check_message(const char *expr, const char *needle) {
  if (needle && !has(mxu_errmsg(), needle)) {
    fprintf(stderr, "CHECK failed: %s: message '%s' lacks '%s'\n", expr,
            mxu_errmsg(), needle);
    check_failures++;
  }
}

#define EXPECT_FAIL(expr, want, needle)                                        \
  do {                                                                         \
    mxu_status got_ = (expr);                                                  \
    CHECK_MSG(got_ == (want), "%s -> %s, want %s (%s)", #expr,                 \
              mxu_status_name(got_), mxu_status_name(want), mxu_errmsg());     \
    check_message(#expr, needle);                                              \
  } while (0)

/* A fresh directory per test run (check_temp_make), and paths in it; the
 * last 16 paths stay valid. */
static char check_temp_dir[128];

static inline int check_temp_make(const char *test) {
  snprintf(check_temp_dir, sizeof check_temp_dir, "/tmp/mxu_%s_XXXXXX", test);
  return mkdtemp(check_temp_dir) != NULL;
}

static inline const char *temp_path(const char *name) {
  static char paths[16][512];
  static int next;
  char *path = paths[next++ % 16];
  snprintf(path, 512, "%s/%s", check_temp_dir, name);
  return path;
}

/* Removes what check_temp_make made, subfolders included. */
static inline void check_remove_tree(const char *path) {
  DIR *dir = opendir(path);
  if (!dir) {
    unlink(path);
    return;
  }
  for (struct dirent *e; (e = readdir(dir));) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    char child[4096];
    if (snprintf(child, sizeof child, "%s/%s", path, e->d_name) >=
        (int)sizeof child)
      continue;
    check_remove_tree(child);
  }
  closedir(dir);
  rmdir(path);
}

/* Path of a file under ../shared/data (MXU_SHARED_DATA overrides). */
/* The whole of a file, NUL-terminated, or NULL; *size (when asked) gets
 * its length; free() it. */
static inline char *check_slurp_size(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (size) *size = 0;
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  rewind(f);
  char *text = malloc((size_t)(n > 0 ? n : 0) + 1);
  size_t got = text ? fread(text, 1, (size_t)(n > 0 ? n : 0), f) : 0;
  if (text) text[got] = 0;
  if (size) *size = got;
  fclose(f);
  return text;
}

static inline char *check_slurp(const char *path) {
  return check_slurp_size(path, NULL);
}

/* Writes size bytes to path, a failed CHECK if it cannot. */
static inline void check_write_bytes(const char *path, const void *bytes,
                                     size_t size) {
  FILE *f = fopen(path, "wb");
  CHECK_MSG(f && fwrite(bytes, 1, size, f) == size, "cannot write %s", path);
  if (f) fclose(f);
}

/* How many weight tensors of two models of one architecture differ in any
 * bit. */
static inline int check_weights_differing(const mxu_model *a,
                                          const mxu_model *b) {
  int differing = 0;
  for (int layer = 0; layer < mxu_model_layer_count(a); layer++)
    for (int k = 0; k < mxu_layer_weight_count(a, layer); k++) {
      mxu_tensor ta, tb;
      CHECK_OK(mxu_layer_weight(a, layer, k, &ta, NULL));
      CHECK_OK(mxu_layer_weight(b, layer, k, &tb, NULL));
      size_t bytes = (size_t)mxu_shape_count(&ta.shape) * sizeof(float);
      differing += memcmp(ta.data, tb.data, bytes) != 0;
    }
  return differing;
}

/* Runs args (args[0] a path) with stdout and stderr captured in *out and
 * *err (free() them); returns the exit code, -1 when it did not exit. */
static inline int check_run(char **args, char **out, char **err) {
  char out_path[600], err_path[600];
  snprintf(out_path, sizeof out_path, "%s/run.stdout", check_temp_dir);
  snprintf(err_path, sizeof err_path, "%s/run.stderr", check_temp_dir);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out_path,
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, err_path,
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  extern char **environ;
  pid_t pid;
  int spawned = posix_spawn(&pid, args[0], &actions, NULL, args, environ);
  posix_spawn_file_actions_destroy(&actions);
  CHECK_MSG(spawned == 0, "cannot run %s: %s", args[0], strerror(spawned));
  int status = 0, code = -1;
  if (spawned == 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status))
    code = WEXITSTATUS(status);
  *out = check_slurp(out_path);
  *err = check_slurp(err_path);
  /* Under the sanitizers a finding exits 1, which an error case may
   * expect: look for the report itself. */
  CHECK_MSG(!has(*err, "Sanitizer") && !has(*err, "runtime error"), "%s", *err);
  return code;
}

/* A finished run: exit code (-1 when it did not exit) and its output. */
typedef struct result {
  int code;
  char *out, *err;
} result;

static inline void result_free(result *r) {
  free(r->out);
  free(r->err);
}

/* Runs the NULL-terminated arguments (args[0] the binary). */
static inline result run_argv(char **args) {
  result r = {-1, NULL, NULL};
  r.code = check_run(args, &r.out, &r.err);
  return r;
}

/* check_run_bin(bin, "train", "m.json", "--epochs", "3", NULL) */
static inline result check_run_bin(const char *bin, const char *first, ...) {
  char *args[64] = {(char *)bin, (char *)first};
  int n = 2;
  va_list list;
  va_start(list, first);
  for (const char *a; n < 63 && (a = va_arg(list, const char *));)
    args[n++] = (char *)a;
  va_end(list);
  args[n] = NULL;
  return run_argv(args);
}

static inline const char *check_shared_data(void) {
  const char *dir = getenv("MXU_SHARED_DATA");
  return dir ? dir : "../shared/data";
}

#endif
