/* test_resume.c — crash safety end to end: `mxu train` with a checkpoint
 * every 10 steps is killed with SIGKILL at random moments and resumed each
 * time; its final weights must be bit-identical to an uninterrupted run
 * with the same seed. Also: a corrupt newest checkpoint is skipped, and a
 * full disk stops training with a clear error and the last checkpoint
 * intact. */
#include "check.h"

#include <mxu.h>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* The backend the kill test trains on: cpu (NULL), or pjrt with 5 steps
 * an execution (the checkpoints end executions). */
static const char *backend;

/* Starts `mxu train` on the fashion model: 2 epochs of 30 steps of 1000,
 * checkpoints every 10 steps into ckpt_dir (resuming from it), output to
 * log. */
static pid_t start_train(const char *ckpt_dir, const char *weights,
                         const char *log) {
  char *args[] = {(char *)MXU_BIN,
                  "train",
                  "models/fashion_mnist.json",
                  "--data",
                  "fashion-mnist",
                  "--epochs",
                  "2",
                  "--steps-per-epoch",
                  "30",
                  "--batch-size",
                  "1000",
                  "--seed",
                  "5",
                  "--verbose",
                  "2",
                  "--checkpoint-every",
                  "10",
                  "--resume",
                  (char *)ckpt_dir,
                  "--save-weights",
                  (char *)weights,
                  backend ? "--backend" : NULL,
                  (char *)backend,
                  "--steps-per-execution",
                  "5",
                  NULL};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log,
                                   O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, log,
                                   O_WRONLY | O_CREAT | O_APPEND, 0644);
  pid_t pid = -1;
  int spawned = posix_spawn(&pid, MXU_BIN, &actions, NULL, args, environ);
  posix_spawn_file_actions_destroy(&actions);
  CHECK_MSG(spawned == 0, "cannot run %s: %s", MXU_BIN, strerror(spawned));
  return spawned == 0 ? pid : -1;
}

static int wait_exit(pid_t pid) {
  int status;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static int count_checkpoints(const char *dir) {
  DIR *d = opendir(dir);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));)
    n += strncmp(e->d_name, "ckpt-", 5) == 0 &&
         strstr(e->d_name, ".h5") != NULL &&
         strlen(strstr(e->d_name, ".h5")) == 3;
  if (d) closedir(d);
  return n;
}

/* The newest ckpt-EEEEE-SSSSS.h5 in dir (the names sort by position), or
 * "" where there is none. */
static void newest_checkpoint(const char *dir, char *out, size_t size) {
  DIR *d = opendir(dir);
  out[0] = 0;
  for (struct dirent *e; d && (e = readdir(d));) {
    const char *h5 = strstr(e->d_name, ".h5");
    if (strncmp(e->d_name, "ckpt-", 5) == 0 && h5 && strlen(h5) == 3 &&
        strcmp(e->d_name, out) > 0)
      snprintf(out, size, "%s", e->d_name);
  }
  if (d) closedir(d);
}

static mxu_model *load_weights(const char *weights) {
  mxu_model *model = NULL;
  mxu_compile_config compile = mxu_compile_defaults();
  CHECK_OK(
      mxu_model_load_json("models/fashion_mnist.json", &model, &compile, NULL));
  compile.batch_size = 8;
  if (model) CHECK_OK(mxu_compile(model, &compile));
  if (model && weights) CHECK_OK(mxu_load_weights(model, weights));
  return model;
}

/* Every weight of both files, bit for bit. */
static void check_identical(const char *a_path, const char *b_path) {
  mxu_model *a = load_weights(a_path), *b = load_weights(b_path);
  if (!a || !b) return;
  int differing = check_weights_differing(a, b);
  CHECK_MSG(differing == 0, "%d weights differ after the interrupted run",
            differing);
  mxu_model_free(a);
  mxu_model_free(b);
}

static void kill_and_resume(const char *on) {
  backend = on;
  /* The later tests reuse the cpu run's files. */
  char name[64];
  const char *suffix = on ? on : "";
  snprintf(name, sizeof name, "reference%s.h5", suffix);
  const char *reference = temp_path(name);
  snprintf(name, sizeof name, "resumed%s.h5", suffix);
  const char *resumed = temp_path(name);
  const char *log = temp_path("log.txt");
  snprintf(name, sizeof name, "ckpt_ref%s", suffix);
  CHECK(wait_exit(start_train(temp_path(name), reference, log)) == 0);

  snprintf(name, sizeof name, "ckpt%s", suffix);
  const char *dir = temp_path(name);
  unsigned seed = (unsigned)time(NULL) ^ (unsigned)getpid();
  printf("kill test: rand seed %u\n", seed);
  srand(seed);
  int kills = 0;
  for (int attempt = 0; attempt < 6; attempt++) {
    char before[256], now[256];
    newest_checkpoint(dir, before, sizeof before);
    pid_t pid = start_train(dir, resumed, log);
    /* Killed 0-100 ms after the run wrote a checkpoint of its own: past
     * loading, anywhere in the next ten steps (or in the middle of writing
     * a checkpoint), short of the end, whatever the machine's speed or
     * load. A clock-based moment was not: a run slowed by other tests set
     * it past a later run's end. */
    int done = 0, progressed = 0;
    while (!done && !progressed) {
      sleep_ms(2);
      int status;
      done = waitpid(pid, &status, WNOHANG) == pid;
      if (done) CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
      newest_checkpoint(dir, now, sizeof now);
      progressed = strcmp(now, before) != 0;
    }
    if (done) break;
    sleep_ms(rand() % 101);
    kill(pid, SIGKILL);
    int code = wait_exit(pid);
    if (code == 0) break; /* it finished first */
    CHECK(code == 128 + SIGKILL);
    kills++;
    CHECK_MSG(count_checkpoints(dir) <= 3, "%d checkpoints kept",
              count_checkpoints(dir));
  }
  printf("kill test (%s): %d kills before the run completed\n", on ? on : "cpu",
         kills);
  CHECK(kills >= 1);
  if (access(resumed, R_OK) != 0)
    CHECK(wait_exit(start_train(dir, resumed, log)) == 0);
  check_identical(reference, resumed);
  backend = NULL;
}

/* Damage done to a checkpoint file. */
typedef enum { CUT_IN_HALF, FLIP_HEAP_BYTE } damage;

/* One byte of the size of the first object in the file's first global
 * heap (the "GCOL" collection holding the variable-length layer and
 * weight names): libhdf5 1.10 crashed in H5HG_read on it. */
static int flip_heap_byte(const char *path) {
  FILE *f = fopen(path, "r+b");
  if (!f) return 0;
  static unsigned char bytes[1 << 16];
  size_t n = fread(bytes, 1, sizeof bytes, f);
  long at = -1;
  for (size_t i = 0; at < 0 && i + 4 <= n; i++)
    if (memcmp(bytes + i, "GCOL", 4) == 0) at = (long)i + 16 + 8 + 6;
  int ok = at >= 0 && fseek(f, at, SEEK_SET) == 0 &&
           fputc(bytes[at] ^ 0x40, f) != EOF;
  return fclose(f) == 0 && ok;
}

/* The newest checkpoint damaged: resume skips it, says so, and still
 * finishes with the same weights. */
static void corrupt_newest(damage how) {
  const char *dir = temp_path("ckpt_ref"); /* holds the last two */
  char newest[256], path[1024];
  newest_checkpoint(dir, newest, sizeof newest);
  CHECK(newest[0] != 0);
  snprintf(path, sizeof path, "%s/%s", dir, newest);
  struct stat st;
  if (how == CUT_IN_HALF)
    CHECK(stat(path, &st) == 0 && truncate(path, st.st_size / 2) == 0);
  else
    CHECK(flip_heap_byte(path));
  const char *log = temp_path("corrupt.txt");
  const char *weights = temp_path("after_corrupt.h5");
  unlink(log);
  CHECK(wait_exit(start_train(dir, weights, log)) == 0);
  FILE *f = fopen(log, "r");
  char text[8192] = "";
  if (f) {
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = 0;
    fclose(f);
  }
  CHECK_MSG(strstr(text, "skipped") && strstr(text, newest) &&
                strstr(text, "corrupt"),
            "log: %s", text);
  check_identical(temp_path("reference.h5"), weights);
}

/* Runs mxu with the NULL-terminated arguments after "train
 * models/fashion_mnist.json --data fashion-mnist --batch-size 1000
 * --steps-per-epoch 20 --seed 9 --verbose 0"; returns the exit code. */
static int train_with(const char *first, ...) {
  char *args[32] = {(char *)MXU_BIN,
                    "train",
                    "models/fashion_mnist.json",
                    "--data",
                    "fashion-mnist",
                    "--batch-size",
                    "1000",
                    "--steps-per-epoch",
                    "20",
                    "--seed",
                    "9",
                    "--verbose",
                    "0",
                    (char *)first};
  int n = 14;
  va_list list;
  va_start(list, first);
  for (const char *a; n < 31 && (a = va_arg(list, const char *));)
    args[n++] = (char *)a;
  va_end(list);
  args[n] = NULL;
  pid_t pid = -1;
  int spawned = posix_spawn(&pid, MXU_BIN, NULL, NULL, args, environ);
  CHECK_MSG(spawned == 0, "cannot run %s", MXU_BIN);
  return spawned == 0 ? wait_exit(pid) : -1;
}

/* model.save after epoch 1, then --resume FILE for epoch 2: the same
 * weights as two epochs in one go. */
static void resume_from_model_file(void) {
  const char *whole = temp_path("two_epochs.h5");
  const char *model = temp_path("model_after_1.h5");
  const char *resumed = temp_path("resumed_from_file.h5");
  CHECK(train_with("--epochs", "2", "--save-weights", whole, NULL) == 0);
  CHECK(train_with("--epochs", "1", "--save-model", model, NULL) == 0);
  CHECK(train_with("--epochs", "2", "--resume", model, "--save-weights",
                   resumed, NULL) == 0);
  check_identical(whole, resumed);
  /* Other settings than the checkpoint's: it goes on, and says how. */
  char *args[] = {(char *)MXU_BIN,
                  "train",
                  "models/fashion_mnist.json",
                  "--data",
                  "fashion-mnist",
                  "--batch-size",
                  "500",
                  "--steps-per-epoch",
                  "2",
                  "--seed",
                  "3",
                  "--verbose",
                  "0",
                  "--epochs",
                  "2",
                  "--resume",
                  (char *)model,
                  NULL};
  char *out = NULL, *err = NULL;
  CHECK(check_run(args, &out, &err) == 0);
  CHECK_MSG(err && has(err, "the checkpoint's seed 9") &&
                has(err, "--seed 3") && has(err, "batch size 1000") &&
                has(err, "this run's is 500"),
            "stderr: %s", err ? err : "");
  free(out);
  free(err);
}

/* A full disk: a 2 MB tmpfs holds one fashion checkpoint (about 1.3 MB:
 * weights and Adam's two slots) but not the second. Where mounting is not
 * allowed, a file-size limit on the child gives the same failure. */
static void disk_full(void) {
  const char *dir = temp_path("full");
  mkdir(dir, 0755);
  int mounted = mount("tmpfs", dir, "tmpfs", 0, "size=2m") == 0;
  printf("disk full: %s\n", mounted ? "2 MB tmpfs" : "RLIMIT_FSIZE 1.5 MB");
  const char *log = temp_path("full.txt");
  char *args[] = {(char *)MXU_BIN,
                  "train",
                  "models/fashion_mnist.json",
                  "--data",
                  "fashion-mnist",
                  "--epochs",
                  "1",
                  "--steps-per-epoch",
                  "30",
                  "--batch-size",
                  "1000",
                  "--verbose",
                  "0",
                  "--checkpoint-every",
                  "10",
                  "--checkpoint-dir",
                  (char *)dir,
                  NULL};
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    if (!mounted) {
      struct rlimit limit = {1500000, 1500000};
      setrlimit(RLIMIT_FSIZE, &limit);
      signal(SIGXFSZ, SIG_IGN); /* a write fails with EFBIG instead */
    }
    execve(MXU_BIN, args, environ);
    _exit(127);
  }
  CHECK(wait_exit(pid) == 1);
  FILE *f = fopen(log, "r");
  char text[4096] = "";
  if (f) {
    text[fread(text, 1, sizeof text - 1, f)] = 0;
    fclose(f);
  }
  CHECK_MSG(strstr(text, "mxu train:") && strstr(text, "ckpt-") &&
                (strstr(text, "No space left") || strstr(text, "too large")),
            "log: %s", text);
  /* The first checkpoint is whole and restores at step 10. */
  CHECK(count_checkpoints(dir) == 1);
  mxu_model *model = load_weights(NULL);
  mxu_train_position at = {0};
  int found = 0;
  char skipped[512] = "";
  if (model)
    CHECK_OK(mxu_checkpoint_restore(model, dir, &at, &found, skipped,
                                    sizeof skipped));
  CHECK(found == 1 && at.epoch == 0 && at.step == 10 && skipped[0] == 0);
  mxu_model_free(model);
  if (mounted) CHECK(umount(dir) == 0);
}

int main(void) {
  if (!check_temp_make("test_resume")) {
    perror("mkdtemp");
    return 1;
  }
  kill_and_resume(NULL);
  /* The same on XLA's CPU plugin: the devices' state comes back from the
   * host's checkpoint. */
  kill_and_resume("pjrt");
  corrupt_newest(FLIP_HEAP_BYTE);
  corrupt_newest(CUT_IN_HALF);
  resume_from_model_file();
  disk_full();
  check_remove_tree(check_temp_dir);
  return check_report("test_resume");
}
