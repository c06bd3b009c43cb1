/* gzfile.c — reads a whole data file into memory through zlib, which
 * passes plain files through and gunzips gzip ones, so every loader takes
 * both; and finds name or name.gz in a data directory. */
#include "core/core.h"
#include "data/loader.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

/* gzread returns -1 for a whole call that meets corrupt data, dropping
 * what it unpacked before it: small calls keep the failure's offset
 * close (and the int result in range). */
#define READ_CHUNK ((size_t)1 << 16)
#define FIRST_CAPACITY ((size_t)1 << 20)

static mxu_status grow(unsigned char **buffer, size_t *capacity) {
  size_t wanted = *capacity ? *capacity * 2 : FIRST_CAPACITY;
  if (wanted < *capacity) return MXU_ERR_NOMEM;
  unsigned char *bigger = realloc(*buffer, wanted);
  if (!bigger) return MXU_ERR_NOMEM;
  *buffer = bigger;
  *capacity = wanted;
  return MXU_OK;
}

/* Turns zlib's error state into a status and a message; the offset is in
 * the uncompressed data, where a reader of the format would look (to
 * within one READ_CHUNK), and for corrupt data also in the file. */
static mxu_status gz_failure(gzFile gz, const char *who, const char *path,
                             size_t offset) {
  int errnum = Z_OK;
  const char *text = gzerror(gz, &errnum);
  switch (errnum) {
  case Z_OK: return MXU_OK;
  case Z_ERRNO:
    return mxu_fail(MXU_ERR_IO, "%s: %s: offset %zu: read failed: %s", who,
                    path, offset, strerror(errno));
  case Z_MEM_ERROR:
    return mxu_fail(MXU_ERR_NOMEM, "%s: %s: out of memory while reading", who,
                    path);
  case Z_BUF_ERROR:
    /* zlib's soft error: the input ended inside a gzip stream. */
    return mxu_fail(
        MXU_ERR_FORMAT,
        "%s: %s: offset %zu (unpacked): gzip data ends early (truncated "
        "download?)",
        who, path, offset);
  default:
    return mxu_fail(MXU_ERR_FORMAT,
                    "%s: %s: offset %zu (unpacked), about byte %lld of the "
                    "file: corrupt gzip data (%s); expected a plain file or a "
                    "complete gzip stream (download it again)",
                    who, path, offset, (long long)gzoffset(gz), text);
  }
}

/* See core.h: half the machine's memory, or MXU_MAX_DATA_BYTES. */
size_t mxu_data_limit(void) {
  const char *given = getenv("MXU_MAX_DATA_BYTES");
  long long bytes = given ? atoll(given) : 0;
  if (bytes > 0) return (size_t)bytes;
  int64_t memory = mxu_machine_memory_bytes();
  return memory > 0 ? (size_t)(memory / 2) : SIZE_MAX;
}

static mxu_status read_all(gzFile gz, const char *who, const char *path,
                           unsigned char **buffer, size_t *length) {
  size_t capacity = 0, limit = mxu_data_limit();
  for (;;) {
    if (*length == capacity && grow(buffer, &capacity) != MXU_OK)
      return mxu_fail(MXU_ERR_NOMEM, "%s: %s: out of memory after %zu bytes",
                      who, path, *length);
    size_t want = capacity - *length;
    if (want > READ_CHUNK) want = READ_CHUNK;
    int got = gzread(gz, *buffer + *length, (unsigned)want);
    if (got <= 0) break;
    *length += (size_t)got;
    if (*length > limit)
      return mxu_fail(MXU_ERR_FORMAT,
                      "%s: %s: more than %zu bytes unpacked, the limit for a "
                      "data file read into memory (half the machine's memory; "
                      "set MXU_MAX_DATA_BYTES to change it)",
                      who, path, limit);
  }
  return gz_failure(gz, who, path, *length);
}

mxu_status mxu_read_file(const char *who, const char *path,
                         unsigned char **data, size_t *size) {
  *data = NULL;
  *size = 0;
  errno = 0;
  gzFile gz = gzopen(path, "rb");
  if (!gz)
    return mxu_fail(MXU_ERR_IO, "%s: %s: cannot open: %s", who, path,
                    errno ? strerror(errno) : "out of memory");
  gzbuffer(gz, 1u << 17); /* fewer system calls than the 8 KiB default */
  unsigned char *buffer = NULL;
  size_t length = 0;
  mxu_status status = read_all(gz, who, path, &buffer, &length);
  gzclose_r(gz);
  if (status != MXU_OK) {
    free(buffer);
    return status;
  }
  *data = buffer;
  *size = length;
  return MXU_OK;
}

static char *join(const char *dir, const char *name, const char *suffix) {
  size_t a = strlen(dir), b = strlen(name), c = strlen(suffix);
  char *path = malloc(a + b + c + 2);
  if (!path) return NULL;
  memcpy(path, dir, a);
  path[a] = '/';
  memcpy(path + a + 1, name, b);
  memcpy(path + a + 1 + b, suffix, c + 1);
  return path;
}

mxu_status mxu_find_data_file(const char *who, const char *dir,
                              const char *name, char **path) {
  *path = NULL;
  if (!dir || !*dir)
    return mxu_fail(MXU_ERR_ARG, "%s: no data directory given", who);
  /* The plain file wins: it is what an unpacked download leaves. */
  static const char *const suffixes[2] = {"", ".gz"};
  for (int i = 0; i < 2; i++) {
    char *candidate = join(dir, name, suffixes[i]);
    if (!candidate)
      return mxu_fail(MXU_ERR_NOMEM, "%s: out of memory for a path", who);
    if (access(candidate, F_OK) == 0) {
      *path = candidate;
      return MXU_OK;
    }
    free(candidate);
  }
  return mxu_fail(MXU_ERR_IO, "%s: found neither %s/%s nor %s/%s.gz", who, dir,
                  name, dir, name);
}
