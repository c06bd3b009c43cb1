/* test_tensorboard.c — the TensorBoard event writer read back by an
 * independent reader (tests/tb_read.py: standard-library Python with its
 * own CRC-32C and protobuf decoding), corrupted files that reader must
 * refuse, and the writer's refusals: a file in the way, a full disk. */
#include "check.h"
#include "io/tensorboard.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#define READER "/usr/bin/python3 -I tests/tb_read.py"

typedef struct scalar {
  const char *tag;
  int64_t step;
  double value;
} scalar;

/* Two tags, steps past 2^32 and up to INT64_MAX (and one negative, a
 * ten-byte varint), values negative, tiny (subnormal in float32), large
 * and zero. */
static const scalar scalars[] = {
    {"epoch_loss", 0, 2.302585092994046},
    {"epoch_accuracy", 0, 0.1},
    {"epoch_loss", 1, -1.5},
    {"epoch_accuracy", 1, 1e-30},
    {"epoch_loss", INT64_C(4294967296) + 7, 3.0e38},
    {"epoch_accuracy", INT64_C(1) << 40, -7.25e20},
    {"epoch_loss", INT64_MAX, 0.0},
    {"epoch_accuracy", -3, 3e-40},
};
#define SCALAR_COUNT (int)(sizeof scalars / sizeof scalars[0])

/* A tag past 127 bytes takes a two-byte length. */
static char long_tag[301];

/* ---- CRC-32C ----------------------------------------------------------- */

static void crc_known_values(void) {
  CHECK(mxu_crc32c("123456789", 9) == 0xE3069283u);
  CHECK(mxu_crc32c("", 0) == 0);
  CHECK(mxu_crc32c(NULL, 0) == 0);
  /* The rest of RFC 3720's (iSCSI) test vectors. */
  unsigned char zeros[32] = {0}, ones[32], up[32], down[32];
  for (int i = 0; i < 32; i++) {
    ones[i] = 0xFF;
    up[i] = (unsigned char)i;
    down[i] = (unsigned char)(31 - i);
  }
  CHECK(mxu_crc32c(zeros, 32) == 0x8A9136AAu);
  CHECK(mxu_crc32c(ones, 32) == 0x62A8AB43u);
  CHECK(mxu_crc32c(up, 32) == 0x46DD794Eu);
  CHECK(mxu_crc32c(down, 32) == 0x113FDB5Cu);
  /* The mask of a zero CRC is its constant alone. */
  CHECK(mxu_crc32c_masked("", 0) == 0xA282EAD8u);
  CHECK(mxu_crc32c_masked("123456789", 9) == 0xC78AB0E5u);
}

/* ---- the reader -------------------------------------------------------- */

/* Runs tb_read.py on path (no single quotes in it); its exit status (-1
 * when it did not run) and its output, stdout and stderr together. */
static int run_reader(const char *path, char *out, size_t size) {
  char command[1024];
  snprintf(command, sizeof command, READER " '%s' 2>&1", path);
  FILE *pipe = popen(command, "r");
  if (!pipe) return -1;
  size_t n = fread(out, 1, size - 1, pipe);
  out[n] = 0;
  int status = pclose(pipe);
  return status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* One "tag step value" line; 0 when it is not one. */
static int parse_line(char *line, char **tag, int64_t *step, double *value) {
  char *space = strchr(line, ' '), *end;
  if (!space) return 0;
  *space = 0;
  *tag = line;
  *step = strtoll(space + 1, &end, 10);
  if (*end != ' ') return 0;
  *value = strtod(end + 1, &end);
  return *end == 0;
}

/* Line i of the reader's output against what was written: float32 is all
 * the file keeps of a value. */
static void check_line(int i, char *line, const scalar *want) {
  char *tag;
  int64_t step;
  double value;
  if (!parse_line(line, &tag, &step, &value)) {
    CHECK_MSG(0, "line %d: cannot parse '%s'", i, line);
    return;
  }
  CHECK_MSG(strcmp(tag, want->tag) == 0, "line %d: tag %s, want %s", i, tag,
            want->tag);
  CHECK_MSG(step == want->step, "line %d: step %lld, want %lld", i,
            (long long)step, (long long)want->step);
  CHECK_MSG((float)value == (float)want->value,
            "line %d: value %.9g, want %.9g", i, value,
            (double)(float)want->value);
}

static void check_output(char *out, const scalar *want, int count) {
  int i = 0;
  char *save = NULL;
  for (char *line = strtok_r(out, "\n", &save); line;
       line = strtok_r(NULL, "\n", &save), i++)
    if (i < count) check_line(i, line, &want[i]);
  CHECK_MSG(i == count, "the reader gave %d scalars, want %d", i, count);
}

/* ---- writing ----------------------------------------------------------- */

/* events.out.tfevents.<10-digit seconds>.<host>.<pid>.<counter>.v2 */
static void check_name(const char *path, const char *dir) {
  const char *base = strrchr(path, '/');
  CHECK(strncmp(path, dir, strlen(dir)) == 0 && base);
  if (!base) return;
  base++;
  const char *prefix = "events.out.tfevents.";
  CHECK_MSG(strncmp(base, prefix, strlen(prefix)) == 0, "name %s", base);
  char *end;
  long long seconds = strtoll(base + strlen(prefix), &end, 10);
  long long now = (long long)time(NULL);
  CHECK_MSG(end == base + strlen(prefix) + 10 && seconds <= now &&
                seconds > now - 60,
            "name %s: seconds", base);
  char host[256] = "", middle[512];
  gethostname(host, sizeof host - 1);
  snprintf(middle, sizeof middle, ".%s.%ld.", host, (long)getpid());
  CHECK_MSG(strncmp(end, middle, strlen(middle)) == 0, "name %s: want %s", base,
            middle);
  (void)strtoul(end + strlen(middle), &end, 10);
  CHECK_MSG(strcmp(end, ".v2") == 0, "name %s: suffix", base);
}

/* Written into directories that are not there yet (one with a space),
 * closed, and read back line for line; the file's path goes to path for
 * the corruption cases. */
static void write_and_read(char *path, size_t path_size) {
  const char *dir = temp_path("logs/run 1/train");
  mxu_tb_writer *w = NULL;
  CHECK_OK(mxu_tb_open(dir, &w));
  if (!w) return;
  check_name(mxu_tb_path(w), dir);
  scalar want[SCALAR_COUNT + 1];
  memcpy(want, scalars, sizeof scalars);
  want[SCALAR_COUNT] = (scalar){long_tag, 12, 42.0};
  for (int i = 0; i <= SCALAR_COUNT; i++)
    CHECK_OK(mxu_tb_scalar(w, want[i].tag, want[i].step, want[i].value));
  CHECK_OK(mxu_tb_flush(w));
  snprintf(path, path_size, "%s", mxu_tb_path(w));
  mxu_tb_close(w);
  char out[16384];
  int status = run_reader(path, out, sizeof out);
  CHECK_MSG(status == 0, "reader exit %d:\n%s", status, out);
  if (status == 0) check_output(out, want, SCALAR_COUNT + 1);
}

/* Two writers in one directory in the same second: two files. */
static void two_writers(void) {
  mxu_tb_writer *a = NULL, *b = NULL;
  CHECK_OK(mxu_tb_open(temp_path("twice/"), &a));
  CHECK_OK(mxu_tb_open(temp_path("twice"), &b));
  if (a && b) CHECK(strcmp(mxu_tb_path(a), mxu_tb_path(b)) != 0);
  if (a) CHECK(!strstr(mxu_tb_path(a), "//"));
  char path[512] = "", out[4096];
  if (b) snprintf(path, sizeof path, "%s", mxu_tb_path(b));
  mxu_tb_close(a);
  mxu_tb_close(b);
  /* The version record alone is a valid file with no scalars. */
  if (*path) CHECK(run_reader(path, out, sizeof out) == 0 && !*out);
}

/* ---- corruption -------------------------------------------------------- */

static unsigned char *read_whole(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  unsigned char *data = malloc(1 << 16);
  *size = f && data ? fread(data, 1, 1 << 16, f) : 0;
  if (f) fclose(f);
  return data;
}

/* A copy of the file with byte at flipped (or cut to length at when
 * truncate), which the reader must refuse saying needle. */
static void refused(const unsigned char *data, size_t size, size_t at,
                    int truncate, const char *needle) {
  const char *path = temp_path("corrupt");
  FILE *f = fopen(path, "wb");
  CHECK(f &&
        fwrite(data, 1, truncate ? at : size, f) == (truncate ? at : size));
  if (!f) return;
  if (!truncate) {
    fseek(f, (long)at, SEEK_SET);
    fputc(data[at] ^ 0xFF, f);
  }
  fclose(f);
  char out[4096];
  int status = run_reader(path, out, sizeof out);
  CHECK_MSG(status > 0 && has(out, needle),
            "byte %zu: reader exit %d, want non-zero and '%s': %s", at, status,
            needle, out);
}

static void corrupted(const char *path) {
  size_t size;
  unsigned char *data = read_whole(path, &size);
  CHECK(data && size > 100);
  if (!data || size <= 100) {
    free(data);
    return;
  }
  /* The first record's length, to find the second record. */
  uint64_t first = 0;
  for (int i = 7; i >= 0; i--) first = first << 8 | data[i];
  size_t second = 12 + (size_t)first + 4;
  refused(data, size, 3, 0, "length CRC mismatch");
  refused(data, size, second + 8, 0, "length CRC mismatch");
  refused(data, size, second + 12 + 5, 0, "data CRC mismatch");
  refused(data, size, size - 1, 0, "data CRC mismatch");
  refused(data, size, size - 2, 1, "truncated");
  free(data);
}

/* ---- refusals ---------------------------------------------------------- */

static void file_in_the_way(void) {
  const char *plain = temp_path("plain");
  FILE *f = fopen(plain, "w");
  CHECK(f != NULL);
  if (f) fclose(f);
  char dir[600];
  snprintf(dir, sizeof dir, "%s/logs/train", plain);
  mxu_tb_writer *w = (mxu_tb_writer *)1;
  EXPECT_FAIL(mxu_tb_open(dir, &w), MXU_ERR_IO, plain);
  CHECK(has(mxu_errmsg(), "tensorboard: ") && has(mxu_errmsg(), dir));
  CHECK(w == NULL);
  /* The directory itself a file. */
  EXPECT_FAIL(mxu_tb_open(plain, &w), MXU_ERR_IO, "not a directory");
}

static void bad_arguments(void) {
  mxu_tb_writer *w = NULL;
  EXPECT_FAIL(mxu_tb_open(NULL, &w), MXU_ERR_ARG, "tensorboard");
  EXPECT_FAIL(mxu_tb_open("", &w), MXU_ERR_ARG, "tensorboard");
  EXPECT_FAIL(mxu_tb_open(temp_path("x"), NULL), MXU_ERR_ARG, "tensorboard");
  EXPECT_FAIL(mxu_tb_scalar(NULL, "loss", 0, 1.0), MXU_ERR_ARG, NULL);
  EXPECT_FAIL(mxu_tb_flush(NULL), MXU_ERR_ARG, NULL);
  CHECK_OK(mxu_tb_open(temp_path("args"), &w));
  EXPECT_FAIL(mxu_tb_scalar(w, NULL, 0, 1.0), MXU_ERR_ARG, "tag");
  EXPECT_FAIL(mxu_tb_scalar(w, "", 0, 1.0), MXU_ERR_ARG, "tag");
  mxu_tb_close(w);
  mxu_tb_close(NULL);
}

/* A full disk, made by a file size limit: the kernel then fails writes
 * past it with EFBIG (SIGXFSZ ignored), as it would with ENOSPC. */
static void write_error(void) {
  mxu_tb_writer *w = NULL;
  CHECK_OK(mxu_tb_open(temp_path("full"), &w));
  if (!w) return;
  struct rlimit saved, small;
  CHECK(getrlimit(RLIMIT_FSIZE, &saved) == 0);
  small = saved;
  small.rlim_cur = 4096;
  void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
  CHECK(setrlimit(RLIMIT_FSIZE, &small) == 0);
  mxu_status s = MXU_OK;
  int written = 0;
  for (; written < 10000 && s == MXU_OK; written++)
    s = mxu_tb_scalar(w, "epoch_loss", written, 0.5);
  setrlimit(RLIMIT_FSIZE, &saved);
  signal(SIGXFSZ, old_handler);
  CHECK_MSG(s == MXU_ERR_IO, "status %s after %d scalars", mxu_status_name(s),
            written);
  CHECK_MSG(has(mxu_errmsg(), strerror(EFBIG)) &&
                has(mxu_errmsg(), mxu_tb_path(w)),
            "message: %s", mxu_errmsg());
  /* The limit is gone, but the file ends in a partial record: no more. */
  EXPECT_FAIL(mxu_tb_scalar(w, "epoch_loss", 1, 0.5), MXU_ERR_IO,
              strerror(EFBIG));
  EXPECT_FAIL(mxu_tb_flush(w), MXU_ERR_IO, strerror(EFBIG));
  struct stat st;
  CHECK(stat(mxu_tb_path(w), &st) == 0 && st.st_size == 4096);
  mxu_tb_close(w);
}

int main(void) {
  if (!check_temp_make("tensorboard")) {
    fprintf(stderr, "test_tensorboard: cannot make a temporary directory\n");
    return 1;
  }
  memset(long_tag, 'x', sizeof long_tag - 1);
  memcpy(long_tag, "validation/", 11);
  crc_known_values();
  char path[512] = "";
  write_and_read(path, sizeof path);
  if (*path) corrupted(path);
  two_writers();
  file_in_the_way();
  bad_arguments();
  write_error();
  check_remove_tree(check_temp_dir);
  return check_report("test_tensorboard");
}
