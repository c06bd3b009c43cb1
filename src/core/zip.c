/* zip.c — zip archives built in memory (libzip): Keras 3's .keras files
 * and NumPy's .npz both are one, their members stored as they are. */
#include "core/core.h"

#include <stdlib.h>
#include <time.h>
#include <zip.h>

static mxu_status zip_failure(const char *path, const char *what,
                              zip_error_t *error) {
  return mxu_fail(MXU_ERR_FORMAT, "%s: %s: %s", path, what,
                  zip_error_strerror(error));
}

static mxu_status add_member(zip_t *zip, const char *path,
                             const mxu_zip_member *m, time_t when) {
  zip_source_t *source = zip_source_buffer(zip, m->bytes, m->size, 0);
  zip_int64_t index =
      source ? zip_file_add(zip, m->name, source, ZIP_FL_ENC_UTF_8) : -1;
  if (index < 0) {
    zip_source_free(source);
    return zip_failure(path, m->name, zip_get_error(zip));
  }
  if (zip_set_file_compression(zip, (zip_uint64_t)index, ZIP_CM_STORE, 0) ||
      zip_file_set_mtime(zip, (zip_uint64_t)index, when, 0))
    return zip_failure(path, m->name, zip_get_error(zip));
  return MXU_OK;
}

/* The archive libzip wrote into source, copied out. */
static mxu_status take_bytes(const char *path, zip_source_t *source,
                             unsigned char **bytes, size_t *size) {
  zip_stat_t st;
  if (zip_source_stat(source, &st) != 0 || !(st.valid & ZIP_STAT_SIZE) ||
      zip_source_open(source) != 0)
    return zip_failure(path, "archive", zip_source_error(source));
  *bytes = malloc(st.size ? st.size : 1);
  zip_int64_t got = *bytes ? zip_source_read(source, *bytes, st.size) : -1;
  mxu_status s = MXU_OK;
  if (!*bytes)
    s = mxu_fail(MXU_ERR_NOMEM, "%s: out of memory", path);
  else if (got < 0 || (zip_uint64_t)got != st.size)
    s = zip_failure(path, "archive", zip_source_error(source));
  zip_source_close(source);
  if (s != MXU_OK) {
    free(*bytes);
    *bytes = NULL;
    return s;
  }
  *size = st.size;
  return MXU_OK;
}

mxu_status mxu_zip_build(const char *path, const mxu_zip_member *members,
                         int count, unsigned char **bytes, size_t *size) {
  *bytes = NULL;
  *size = 0;
  time_t now = time(NULL);
  zip_error_t error;
  zip_error_init(&error);
  zip_source_t *source = zip_source_buffer_create(NULL, 0, 0, &error);
  zip_t *zip =
      source ? zip_open_from_source(source, ZIP_TRUNCATE, &error) : NULL;
  if (!zip) {
    mxu_status s = zip_failure(path, "archive", &error);
    zip_source_free(source);
    zip_error_fini(&error);
    return s;
  }
  zip_error_fini(&error);
  zip_source_keep(source); /* zip_close would free it */
  mxu_status s = MXU_OK;
  for (int i = 0; i < count && s == MXU_OK; i++)
    s = add_member(zip, path, &members[i], now);
  if (s == MXU_OK && zip_close(zip) != 0)
    s = zip_failure(path, "archive", zip_get_error(zip));
  if (s != MXU_OK) zip_discard(zip);
  if (s == MXU_OK) s = take_bytes(path, source, bytes, size);
  zip_source_free(source);
  return s;
}
