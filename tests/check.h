/* check.h — the tiny harness every test uses: CHECK records a failure with
 * its place and goes on, so one run shows every broken assertion; the test
 * exits non-zero if any failed. */
#ifndef MXU_TEST_CHECK_H
#define MXU_TEST_CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int check_failures;

#define CHECK(cond)                                                           \
  do {                                                                        \
    if (!(cond)) {                                                            \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      check_failures++;                                                       \
    }                                                                         \
  } while (0)

#define CHECK_MSG(cond, ...)                                                  \
  do {                                                                        \
    if (!(cond)) {                                                            \
      fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                           \
      fputc('\n', stderr);                                                    \
      check_failures++;                                                       \
    }                                                                         \
  } while (0)

#define CHECK_OK(expr)                                                        \
  do {                                                                        \
    mxu_status check_status_ = (expr);                                        \
    CHECK_MSG(check_status_ == MXU_OK, "%s -> %s: %s", #expr,                 \
              mxu_status_name(check_status_), mxu_errmsg());                  \
  } while (0)

#define CHECK_NEAR(a, b, tol)                                                 \
  do {                                                                        \
    double check_a_ = (a), check_b_ = (b);                                    \
    CHECK_MSG(fabs(check_a_ - check_b_) <= (tol), "%s = %.9g, %s = %.9g",     \
              #a, check_a_, #b, check_b_);                                    \
  } while (0)

static inline int check_report(const char *name) {
  if (check_failures) {
    fprintf(stderr, "%s: %d check(s) failed\n", name, check_failures);
    return 1;
  }
  printf("%s: all checks passed\n", name);
  return 0;
}

/* Path of a file under ../shared/data (MXU_SHARED_DATA overrides). */
static inline const char *check_shared_data(void) {
  const char *dir = getenv("MXU_SHARED_DATA");
  return dir ? dir : "../shared/data";
}

#endif
