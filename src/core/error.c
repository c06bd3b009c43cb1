/* error.c — mxu_status codes and the per-thread message behind
 * mxu_errmsg(): the library never prints, it explains. */
#include "core/core.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char error_message[4096];
static _Thread_local mxu_status error_status;

const char *mxu_errmsg(void) { return error_message; }

mxu_status mxu_last_status(void) { return error_status; }

const char *mxu_status_name(mxu_status status) {
  switch (status) {
  case MXU_OK: return "ok";
  case MXU_ERR_ARG: return "invalid argument";
  case MXU_ERR_IO: return "I/O error";
  case MXU_ERR_FORMAT: return "bad file format";
  case MXU_ERR_SHAPE: return "shape mismatch";
  case MXU_ERR_NOMEM: return "out of memory";
  case MXU_ERR_UNSUPPORTED: return "unsupported";
  case MXU_ERR_NUMERIC: return "numeric error";
  case MXU_ERR_BACKEND: return "backend error";
  }
  return "unknown status";
}

mxu_status mxu_fail(mxu_status status, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  vsnprintf(error_message, sizeof error_message, fmt, args);
  va_end(args);
  error_status = status;
  return status;
}

mxu_status mxu_fail_prefix(mxu_status status, const char *fmt, ...) {
  char prefix[256], previous[sizeof error_message];
  va_list args;
  va_start(args, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, args);
  va_end(args);
  memcpy(previous, error_message, sizeof previous);
  /* Truncation keeps the front of the message, which names the place. */
  size_t used = strlen(prefix);
  if (used >= sizeof error_message) used = sizeof error_message - 1;
  memcpy(error_message, prefix, used);
  size_t room = sizeof error_message - 1 - used;
  size_t rest = strlen(previous) < room ? strlen(previous) : room;
  memcpy(error_message + used, previous, rest);
  error_message[used + rest] = 0;
  error_status = status;
  return status;
}
