/* keras_file.c — Keras 3's .keras files: a zip (libzip) holding
 * config.json (the model, as model.to_json() writes it, with its
 * compile_config), metadata.json and model.weights.h5 (Keras 3's weights
 * layout). The model JSON and weights readers take them from here; the
 * model file writer (model_file.c) builds them here. */
#include "io/keras_file.h"
#include "io/json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zip.h>

int mxu_keras_is_archive(const char *path) {
  unsigned char head[4] = {0};
  FILE *f = fopen(path, "rb");
  size_t n = f ? fread(head, 1, sizeof head, f) : 0;
  if (f) fclose(f);
  return n == 4 && memcmp(head, "PK\3\4", 4) == 0;
}

static mxu_status zip_failure(const char *path, const char *what,
                              zip_error_t *error) {
  return mxu_fail(MXU_ERR_FORMAT, "%s: %s: %s", path, what,
                  zip_error_strerror(error));
}

mxu_status mxu_keras_read_member(const char *path, const char *name,
                                 size_t limit, char **bytes, size_t *size) {
  *bytes = NULL;
  *size = 0;
  int code = 0;
  zip_t *zip = zip_open(path, ZIP_RDONLY | ZIP_CHECKCONS, &code);
  if (!zip) {
    zip_error_t error;
    zip_error_init_with_code(&error, code);
    mxu_status s =
        code == ZIP_ER_NOENT || code == ZIP_ER_OPEN || code == ZIP_ER_READ
            ? mxu_fail(MXU_ERR_IO, "%s: cannot open: %s", path,
                       zip_error_strerror(&error))
            : mxu_fail(MXU_ERR_FORMAT,
                       "%s: not a readable .keras file (a zip): %s", path,
                       zip_error_strerror(&error));
    zip_error_fini(&error);
    return s;
  }
  zip_stat_t st;
  zip_int64_t index = zip_name_locate(zip, name, 0);
  mxu_status s = MXU_OK;
  if (index < 0)
    s = mxu_fail(MXU_ERR_FORMAT,
                 "%s: a .keras file holds %s, this one has none", path, name);
  else if (zip_stat_index(zip, (zip_uint64_t)index, 0, &st) != 0 ||
           !(st.valid & ZIP_STAT_SIZE))
    s = zip_failure(path, name, zip_get_error(zip));
  else if (st.size > limit)
    s = mxu_fail(MXU_ERR_FORMAT, "%s: %s: %llu bytes, over the limit of %zu",
                 path, name, (unsigned long long)st.size, limit);
  else if (!(*bytes = malloc(st.size + 1)))
    s = mxu_fail(MXU_ERR_NOMEM, "%s: %s: out of memory", path, name);
  zip_file_t *file =
      s == MXU_OK ? zip_fopen_index(zip, (zip_uint64_t)index, 0) : NULL;
  if (s == MXU_OK && !file) s = zip_failure(path, name, zip_get_error(zip));
  if (file) {
    zip_int64_t got = zip_fread(file, *bytes, st.size);
    char past; /* libzip checks the CRC on the read that finds the end */
    if (got < 0 || (zip_uint64_t)got != st.size ||
        zip_fread(file, &past, 1) != 0)
      s = zip_failure(path, name, zip_file_get_error(file));
    zip_fclose(file);
  }
  zip_discard(zip);
  if (s != MXU_OK) {
    free(*bytes);
    *bytes = NULL;
    return s;
  }
  (*bytes)[st.size] = 0;
  *size = st.size;
  return MXU_OK;
}

mxu_status mxu_keras_extract_weights(const char *path, size_t limit, char *out,
                                     size_t out_size) {
  char *bytes = NULL;
  size_t size = 0;
  MXU_TRY(
      mxu_keras_read_member(path, "model.weights.h5", limit, &bytes, &size));
  const char *tmp = getenv("TMPDIR");
  char dir[512];
  snprintf(dir, sizeof dir, "%s/mxu-keras-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  mxu_status s = MXU_OK;
  if (!mkdtemp(dir))
    s = mxu_fail(MXU_ERR_IO, "%s: cannot make a temporary folder %s: %s", path,
                 dir, strerror(errno));
  if (s == MXU_OK &&
      snprintf(out, out_size, "%s/model.weights.h5", dir) >= (int)out_size)
    s = mxu_fail(MXU_ERR_ARG, "%s: temporary path too long", path);
  if (s == MXU_OK) s = mxu_file_write(out, bytes, size);
  free(bytes);
  if (s != MXU_OK) mxu_keras_remove_extracted(out);
  return s;
}

void mxu_keras_remove_extracted(const char *extracted) {
  unlink(extracted);
  char dir[512];
  snprintf(dir, sizeof dir, "%s", extracted);
  char *slash = strrchr(dir, '/');
  if (slash) {
    *slash = 0;
    rmdir(dir);
  }
}

mxu_status mxu_keras_name_extracted(mxu_status status, const char *extracted,
                                    const char *path) {
  const char *msg = mxu_errmsg(), *at = strstr(msg, extracted);
  if (status == MXU_OK || !at) return status;
  char why[2048];
  snprintf(why, sizeof why, "%.*s%s (model.weights.h5)%s", (int)(at - msg), msg,
           path, at + strlen(extracted));
  return mxu_fail(status, "%s", why);
}

/* ---- writing ----------------------------------------------------------- */

mxu_status mxu_keras_archive(const char *path, const char *config,
                             const unsigned char *weights, size_t weights_size,
                             unsigned char **bytes, size_t *size) {
  *bytes = NULL;
  *size = 0;
  time_t now = time(NULL);
  struct tm tm;
  char metadata[128];
  gmtime_r(&now, &tm);
  snprintf(metadata, sizeof metadata,
           "{\"keras_version\": \"%s\", \"date_saved\": "
           "\"%04d-%02d-%02d@%02d:%02d:%02d\"}",
           MXU_KERAS3_VERSION, tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
           tm.tm_hour, tm.tm_min, tm.tm_sec);
  const mxu_zip_member members[3] = {
      {"metadata.json", metadata, strlen(metadata)},
      {"config.json", config, strlen(config)},
      {"model.weights.h5", weights, weights_size}};
  return mxu_zip_build(path, members, 3, bytes, size);
}
