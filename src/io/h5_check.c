/* h5_check.c — what stands between libhdf5 and a damaged file. libhdf5
 * 1.10 trusts a file's internal pointers: one changed byte in a global
 * heap takes the process down inside H5HG_read. So a file mxu wrote
 * carries a seal in its HDF5 user block (the bytes HDF5 reserves for the
 * application before its superblock), checked before HDF5 sees the file;
 * any other file is first read through in a child process, so a crash
 * there costs the child, not the run. */
#include "io/h5.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

/* The seal: magic, the file's size and the CRC-32 of every byte after
 * the user block, little-endian. HDF5 leaves the user block to us and
 * h5py and Keras read past it. */
static const char seal_magic[8] = {'M', 'X', 'U', '-', 'S', 'U', 'M', '1'};
enum { SEAL_SIZE = 20 };

static void put_le(unsigned char *p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le(const unsigned char *p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

/* zlib's crc32 takes a uInt length: fed in pieces. */
static uint32_t crc_update(uint32_t crc, const unsigned char *data, size_t n) {
  while (n) {
    uInt piece = n > (1u << 30) ? (1u << 30) : (uInt)n;
    crc = (uint32_t)crc32(crc, data, piece);
    data += piece;
    n -= piece;
  }
  return crc;
}

void mxu_h5_seal(unsigned char *image, size_t size) {
  if (size < MXU_H5_USER_BLOCK) return;
  memcpy(image, seal_magic, sizeof seal_magic);
  put_le(image + 8, size, 8);
  put_le(image + 16,
         crc_update((uint32_t)crc32(0, NULL, 0), image + MXU_H5_USER_BLOCK,
                    size - MXU_H5_USER_BLOCK),
         4);
}

/* CRC-32 of fd from offset MXU_H5_USER_BLOCK to its end; -1 on a read
 * error (errno set). */
static int crc_of_rest(int fd, uint64_t *bytes, uint32_t *crc) {
  enum { CHUNK = 1 << 20 };
  unsigned char *buffer = malloc(CHUNK);
  if (!buffer) return -1; /* errno is ENOMEM */
  *crc = (uint32_t)crc32(0, NULL, 0);
  *bytes = MXU_H5_USER_BLOCK;
  ssize_t n;
  for (off_t at = MXU_H5_USER_BLOCK;; at += n) {
    n = pread(fd, buffer, CHUNK, at);
    if (n < 0 && errno == EINTR)
      n = 0;
    else if (n <= 0)
      break;
    *crc = crc_update(*crc, buffer, (size_t)n);
    *bytes += (uint64_t)n;
  }
  free(buffer);
  return n < 0 ? -1 : 0;
}

mxu_status mxu_h5_check_seal(const char *path, int fd, int *sealed) {
  unsigned char head[SEAL_SIZE];
  *sealed = 0;
  if (pread(fd, head, sizeof head, 0) != (ssize_t)sizeof head ||
      memcmp(head, seal_magic, sizeof seal_magic) != 0)
    return MXU_OK; /* not written by mxu: nothing to compare */
  *sealed = 1;
  uint64_t bytes;
  uint32_t crc;
  if (crc_of_rest(fd, &bytes, &crc) != 0)
    return mxu_fail(MXU_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
  uint64_t want_bytes = get_le(head + 8, 8);
  uint32_t want_crc = (uint32_t)get_le(head + 16, 4);
  if (bytes != want_bytes)
    return mxu_fail(MXU_ERR_FORMAT,
                    "%s: corrupt: %llu bytes where mxu wrote %llu (cut short "
                    "or extended since); use an intact copy",
                    path, (unsigned long long)bytes,
                    (unsigned long long)want_bytes);
  if (crc != want_crc)
    return mxu_fail(MXU_ERR_FORMAT,
                    "%s: corrupt: its contents changed since mxu wrote it "
                    "(CRC-32 %08x, sealed %08x); use an intact copy, or if "
                    "another program edited it on purpose, clear the mxu "
                    "seal (its first 8 bytes: dd if=/dev/zero of=FILE bs=8 "
                    "count=1 conv=notrunc) to load it as a foreign file",
                    path, crc, want_crc);
  return MXU_OK;
}

/* ---- reading a foreign file through, in a child ------------------------ */

/* Reads no value larger than this in the child: the readers never take
 * one either (a weight is at most MXU_MAX_ELEMENTS floats). */
#define PROBE_MAX_BYTES ((size_t)MXU_MAX_ELEMENTS * 8)
/* Reading a sound file through takes well under a second per 50 MB;
 * a damaged one that makes libhdf5 loop is stopped after this much of the
 * child's own CPU time, so that a busy machine cannot make a sound file
 * look damaged; a child that waits instead (see in_child) is stopped
 * after WALL_FACTOR times as long on the clock.
 * (MXU_H5_PROBE_SECONDS overrides it: the fuzzer meets such files by the
 * hundred). */
#define WALL_FACTOR 3
static unsigned probe_seconds(const char *path) {
  const char *given = getenv("MXU_H5_PROBE_SECONDS");
  if (given && atoi(given) > 0) return (unsigned)atoi(given);
  struct stat st;
  off_t size = stat(path, &st) == 0 ? st.st_size : 0;
  return 10 + (unsigned)(size / (50 << 20));
}

/* Reads n values of the object's type into memory and frees them again,
 * variable-length parts included: what a reader's H5Aread or H5Dread
 * would parse. 0 or -1. */
static int probe_values(hid_t object, hid_t type, hid_t space, int dataset) {
  hid_t memory = H5Tget_native_type(type, H5T_DIR_DEFAULT);
  hssize_t n = H5Sget_simple_extent_npoints(space);
  size_t size = memory >= 0 ? H5Tget_size(memory) : 0;
  int ok = memory >= 0 && n >= 0 && size > 0;
  if (ok && n > 0 && (size_t)n <= PROBE_MAX_BYTES / size) {
    void *values = calloc((size_t)n, size);
    herr_t read = -1;
    if (values)
      read = dataset ? H5Dread(object, memory, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                               values)
                     : H5Aread(object, memory, values);
    if (read >= 0 && H5Tdetect_class(memory, H5T_VLEN) > 0)
      H5Dvlen_reclaim(memory, space, H5P_DEFAULT, values);
    ok = read >= 0 || !values;
    free(values);
  }
  if (memory >= 0) H5Tclose(memory);
  return ok ? 0 : -1;
}

/* The first thing that did not read, as the message the parent gives. */
typedef struct probe {
  const char *path;
  int failed;
} probe;

static int probe_failed(probe *p, const char *what, hid_t object,
                        const char *name) {
  if (!p->failed) {
    mxu_h5_keep_cause();
    const char *where = mxu_h5_where(object);
    int slash = name && (!where[0] || where[strlen(where) - 1] != '/');
    mxu_h5_fail_kept(MXU_ERR_FORMAT,
                     "%s: corrupt (use an intact copy): HDF5 cannot read %s "
                     "%s%s%s",
                     p->path, what, where, slash ? "/" : "", name ? name : "");
  }
  p->failed = 1;
  return -1;
}

static herr_t probe_attribute(hid_t object, const char *name,
                              const H5A_info_t *info, void *data) {
  (void)info;
  hid_t attribute = H5Aopen(object, name, H5P_DEFAULT);
  if (attribute < 0) return probe_failed(data, "the attribute", object, name);
  hid_t type = H5Aget_type(attribute), space = H5Aget_space(attribute);
  int ok =
      type >= 0 && space >= 0 && probe_values(attribute, type, space, 0) == 0;
  if (type >= 0) H5Tclose(type);
  if (space >= 0) H5Sclose(space);
  H5Aclose(attribute);
  return ok ? 0 : probe_failed(data, "the attribute", object, name);
}

static int probe_object(hid_t object, probe *p) {
  if (H5Aiterate2(object, H5_INDEX_NAME, H5_ITER_NATIVE, NULL, probe_attribute,
                  p) < 0)
    return probe_failed(p, "the attributes of", object, NULL);
  if (H5Iget_type(object) != H5I_DATASET) return 0;
  hid_t type = H5Dget_type(object), space = H5Dget_space(object);
  int ok = type >= 0 && space >= 0 && probe_values(object, type, space, 1) == 0;
  if (type >= 0) H5Tclose(type);
  if (space >= 0) H5Sclose(space);
  return ok ? 0 : probe_failed(p, "the dataset", object, NULL);
}

static herr_t probe_link(hid_t group, const char *name, const H5L_info_t *info,
                         void *data) {
  if (info->type != H5L_TYPE_HARD) return 0; /* readers follow no others */
  hid_t object = H5Oopen(group, name, H5P_DEFAULT);
  if (object < 0) return probe_failed(data, "the object", group, name);
  int ok = probe_object(object, data) == 0;
  H5Oclose(object);
  return ok ? 0 : -1;
}

/* The child: 0 when the file opens and every group, attribute and
 * dataset in it reads; else 1, with the message down `report`. */
static int probe_child(const char *path, int report) {
  hid_t file;
  probe p = {path, 0};
  if (mxu_h5_open_unchecked(path, &file) == MXU_OK) {
    if (probe_object(file, &p) == 0 &&
        H5Lvisit(file, H5_INDEX_NAME, H5_ITER_NATIVE, probe_link, &p) < 0)
      probe_failed(&p, "the links of", file, NULL);
    H5Fclose(file);
    if (!p.failed) return 0;
  }
  const char *message = mxu_errmsg();
  size_t length = strlen(message);
  return write(report, message, length) == (ssize_t)length ? 1 : 2;
}

/* What the child wrote down the pipe, until it closes it. */
static void read_report(int fd, char *out, size_t size) {
  size_t used = 0;
  for (ssize_t n; used + 1 < size;) {
    n = read(fd, out + used, size - 1 - used);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    used += (size_t)n;
  }
  out[used] = 0;
}

/* Present only under a sanitizer (make test-sanitize, make fuzz): the
 * child's report of libhdf5's absurd allocation on a damaged file is the
 * parent's refusal, not a finding of the run (libFuzzer's death callback
 * would save the input as a crash) nor output to show. */
void __sanitizer_set_death_callback(void (*callback)(void))
    __attribute__((weak));
void __sanitizer_set_report_fd(void *fd) __attribute__((weak));

static void quiet_sanitizers(void) {
  if (__sanitizer_set_death_callback) __sanitizer_set_death_callback(NULL);
  int null_fd = __sanitizer_set_report_fd ? open("/dev/null", O_WRONLY) : -1;
  if (null_fd >= 0) __sanitizer_set_report_fd((void *)(intptr_t)null_fd);
}

/* Runs child(path, ctx, report fd) in a child process, which exits with
 * what it returns (0: fine; 1: a message down the pipe); a crash or the
 * limit on its CPU time is the file's fault. */
typedef int child_fn(const char *path, void *ctx, int report);

static mxu_status in_child_once(const char *path, child_fn *child, void *ctx,
                                unsigned seconds, int *stuck) {
  *stuck = 0;
  int report[2];
  if (pipe(report) != 0)
    return mxu_fail(MXU_ERR_IO, "%s: cannot check the file: pipe: %s", path,
                    strerror(errno));
  fflush(NULL); /* the child must not write the parent's buffers twice */
  pid_t pid = fork();
  if (pid < 0) {
    close(report[0]);
    close(report[1]);
    return mxu_fail(MXU_ERR_IO, "%s: cannot check the file: fork: %s", path,
                    strerror(errno));
  }
  if (pid == 0) {
    /* A crash must end the child by its signal, not in a handler the
     * parent installed (a sanitizer's or a fuzzer's); a file that makes
     * libhdf5 loop ends by its CPU time limit. */
    int fatal[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
    for (size_t i = 0; i < sizeof fatal / sizeof *fatal; i++)
      signal(fatal[i], SIG_DFL);
    signal(SIGALRM, SIG_DFL);
    signal(SIGXCPU, SIG_DFL);
    quiet_sanitizers();
    struct rlimit cpu = {seconds, seconds + 1};
    setrlimit(RLIMIT_CPU, &cpu);
    alarm(seconds * WALL_FACTOR);
    close(report[0]);
    int code = child(path, ctx, report[1]);
    /* Shutting the library down here brings out what a damaged file did
     * to its heap unseen (its free lists, freed at exit: a double free a
     * fuzzed file caused showed only then), so that the file is refused
     * rather than read in the parent. Not with a file of the parent's
     * open: closing it here could write to it. */
    if (H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_FILE) == 0) H5close();
    _exit(code);
  }
  close(report[1]);
  char message[2048];
  read_report(report[0], message, sizeof message);
  close(report[0]);
  int status = 0;
  pid_t waited;
  while ((waited = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
  }
  if (waited != pid)
    return mxu_fail(MXU_ERR_IO, "%s: cannot check the file: waitpid: %s", path,
                    strerror(errno));
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return MXU_OK;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 1 && message[0])
    return mxu_fail(MXU_ERR_FORMAT, "%s", message);
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGXCPU)
    return mxu_fail(MXU_ERR_FORMAT,
                    "%s: corrupt: the HDF5 library was still reading it after "
                    "%u s of CPU time (a damaged file can make it loop); use "
                    "an intact copy",
                    path, seconds);
  *stuck = WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM;
  if (*stuck)
    return mxu_fail(MXU_ERR_IO,
                    "%s: reading it through (in a child process mxu started "
                    "to check it) did not finish in %u s; if the machine is "
                    "overloaded, try again, else use an intact copy",
                    path, seconds * WALL_FACTOR);
  return mxu_fail(MXU_ERR_FORMAT,
                  "%s: corrupt: the HDF5 library crashes reading it (%s %d, "
                  "in a child process mxu started to check it); use an "
                  "intact copy",
                  path, WIFSIGNALED(status) ? "signal" : "exit code",
                  WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
}

/* A child stopped by the clock, not by its CPU time, was waiting, not
 * reading: on a lock another thread of this process held as it forked
 * (GCC 12's AddressSanitizer allocator is not released in the child;
 * test_metrics under the sanitizers, beside the PJRT plugin's threads,
 * hung there once a run). A new child will not meet the same moment. */
enum { CHILD_TRIES = 3 };

static mxu_status in_child(const char *path, child_fn *child, void *ctx) {
  unsigned seconds = probe_seconds(path);
  mxu_status status = MXU_OK;
  int stuck = 1;
  for (int k = 0; k < CHILD_TRIES && stuck; k++)
    status = in_child_once(path, child, ctx, seconds, &stuck);
  return status;
}

static int walk_child(const char *path, void *ctx, int report) {
  (void)ctx;
  return probe_child(path, report);
}

mxu_status mxu_h5_probe(const char *path) {
  return in_child(path, walk_child, NULL);
}

typedef struct rehearsal {
  mxu_status (*read)(void *ctx);
  void *ctx;
} rehearsal;

/* Whatever read returns, the parent will get it too: only a crash or a
 * hang is the child's to report. */
static int rehearse_child(const char *path, void *ctx, int report) {
  (void)path;
  (void)report;
  rehearsal *r = ctx;
  r->read(r->ctx);
  return 0;
}

mxu_status mxu_h5_rehearsed(const char *path, int foreign,
                            mxu_status (*read)(void *ctx), void *ctx) {
  rehearsal r = {read, ctx};
  if (foreign) MXU_TRY(in_child(path, rehearse_child, &r));
  return read(ctx);
}
