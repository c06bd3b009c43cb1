/* file.c — the one way mxu writes a file: a regular file (or a new one) is
 * replaced atomically, so a reader sees the old file or the new one and a
 * crash or a full disk leaves the old one; what is not a regular file is
 * never replaced. */
/* realpath is X/Open, beside the POSIX the build asks for. */
#define _XOPEN_SOURCE 700

#include "core/core.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A rename is durable only once the directory entry is on disk; failing
 * here is not an error, the data itself is already synced. */
static void sync_directory(const char *path) {
  char dir[4096];
  const char *slash = strrchr(path, '/');
  if (!slash)
    snprintf(dir, sizeof dir, ".");
  else if (slash == path)
    snprintf(dir, sizeof dir, "/");
  else
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
  int fd = open(dir, O_RDONLY);
  if (fd < 0) return;
  (void)fsync(fd);
  close(fd);
}

/* Every byte: 0 or the errno of the first failure. */
static int write_all(int fd, const unsigned char *bytes, size_t size) {
  for (size_t done = 0; done < size;) {
    ssize_t n = write(fd, bytes + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? errno : EIO;
    done += (size_t)n;
  }
  return 0;
}

mxu_status mxu_file_begin(mxu_file_out *out, const char *path) {
  memset(out, 0, sizeof *out);
  out->fd = -1;
  if (snprintf(out->path, sizeof out->path, "%s", path) >=
      (int)sizeof out->path)
    return mxu_fail(MXU_ERR_IO, "%s: path too long", path);
  /* A symlink stands for its target: a regular file is replaced there
   * (the link kept); anything else (/dev/stdout's pipe) is written through
   * the link, in place. */
  struct stat st;
  if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) {
    if (stat(path, &st) != 0)
      return mxu_fail(MXU_ERR_IO, "%s: a symlink to nothing (%s)", path,
                      strerror(errno));
    char *target = S_ISREG(st.st_mode) ? realpath(path, NULL) : NULL;
    if (target) snprintf(out->path, sizeof out->path, "%s", target);
    free(target);
  }
  if (stat(out->path, &st) == 0 && S_ISDIR(st.st_mode))
    return mxu_fail(MXU_ERR_IO, "%s: is a directory", path);
  if (stat(out->path, &st) == 0 && !S_ISREG(st.st_mode)) {
    /* A FIFO, /dev/stdout, a terminal: written in place, as a shell
     * redirection would, never renamed over. */
    out->in_place = 1;
    out->fd = open(out->path, O_WRONLY | O_TRUNC);
    if (out->fd < 0)
      return mxu_fail(MXU_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    return MXU_OK;
  }
  if (snprintf(out->temp, sizeof out->temp, "%s.tmp-XXXXXX", out->path) >=
      (int)sizeof out->temp)
    return mxu_fail(MXU_ERR_IO, "%s: path too long", path);
  /* Same directory as the target, so the rename cannot cross devices;
   * made first, so a missing directory fails before any work. */
  out->fd = mkstemp(out->temp);
  if (out->fd < 0)
    return mxu_fail(MXU_ERR_IO, "%s: cannot create a file there: %s", path,
                    strerror(errno));
  (void)fchmod(out->fd, 0644); /* mkstemp's 0600 would surprise a reader */
  return MXU_OK;
}

mxu_status mxu_file_finish(mxu_file_out *out, const void *bytes, size_t size) {
  int error = write_all(out->fd, bytes, size);
  if (!error && !out->in_place && fsync(out->fd) != 0) error = errno;
  if (close(out->fd) != 0 && !error) error = errno;
  out->fd = -1;
  if (!error && !out->in_place && rename(out->temp, out->path) != 0)
    error = errno;
  if (error) {
    if (!out->in_place) unlink(out->temp);
    return mxu_fail(MXU_ERR_IO, "%s: cannot write: %s", out->path,
                    strerror(error));
  }
  if (!out->in_place) sync_directory(out->path);
  return MXU_OK;
}

void mxu_file_abandon(mxu_file_out *out) {
  if (out->fd >= 0) close(out->fd);
  out->fd = -1;
  if (!out->in_place && out->temp[0]) unlink(out->temp);
}

mxu_status mxu_file_write(const char *path, const void *bytes, size_t size) {
  if (!path || (!bytes && size))
    return mxu_fail(MXU_ERR_ARG, "file_write: a path and bytes are required");
  mxu_file_out out;
  MXU_TRY(mxu_file_begin(&out, path));
  return mxu_file_finish(&out, bytes, size);
}
