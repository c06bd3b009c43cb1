/* checkpoint.c — mxu_checkpoint_save and mxu_checkpoint_restore: a
 * directory of full-model files DIR/ckpt-EEEEE-SSSSS.h5 named by the
 * training position they resume at; saving keeps the newest few, restoring
 * takes the newest that loads, skipping truncated or corrupt ones. */
#include "core/core.h"
#include "model/model.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Saving never keeps fewer: the newest may be the one a crash cut short,
 * and then the one before it is the run's way back. */
#define MIN_KEEP 2

typedef struct checkpoint {
  int epoch, step;
  char name[256];
} checkpoint;

typedef struct checkpoint_list {
  int count, capacity;
  checkpoint *items;
} checkpoint_list;

/* ---- names ------------------------------------------------------------- */

/* Digits only, no sign, no overflow: the number or -1. */
static long parse_number(const char *text, size_t length) {
  if (length == 0 || length > 9) return -1;
  long value = 0;
  for (size_t i = 0; i < length; i++) {
    if (text[i] < '0' || text[i] > '9') return -1;
    value = value * 10 + (text[i] - '0');
  }
  return value;
}

/* "ckpt-<epoch>-<step>.h5", or with temp set "<that>.tmp-XXXXXX" (the
 * temporary mxu_h5_create makes beside it); 1 when name is one. */
static int parse_name(const char *name, int temp, int *epoch, int *step) {
  if (strncmp(name, "ckpt-", 5) != 0) return 0;
  const char *e = name + 5, *dash = strchr(e, '-');
  const char *ext = dash ? strstr(dash, ".h5") : NULL;
  if (!dash || !ext) return 0;
  const char *rest = ext + 3;
  if (temp ? !(strncmp(rest, ".tmp-", 5) == 0 && strlen(rest + 5) == 6)
           : *rest != 0)
    return 0;
  long a = parse_number(e, (size_t)(dash - e));
  long b = parse_number(dash + 1, (size_t)(ext - dash - 1));
  if (a < 0 || b < 0) return 0;
  *epoch = (int)a;
  *step = (int)b;
  return 1;
}

static int join(char *out, size_t size, const char *dir, const char *name) {
  return snprintf(out, size, "%s/%s", dir, name) < (int)size;
}

/* ---- listing ----------------------------------------------------------- */

static mxu_status push(checkpoint_list *list, const char *name, int epoch,
                       int step) {
  if (strlen(name) >= sizeof list->items[0].name) return MXU_OK;
  if (list->count == list->capacity) {
    int capacity = list->capacity ? 2 * list->capacity : 16;
    checkpoint *items =
        realloc(list->items, (size_t)capacity * sizeof *list->items);
    if (!items) return mxu_fail(MXU_ERR_NOMEM, "checkpoint: out of memory");
    list->items = items;
    list->capacity = capacity;
  }
  checkpoint *c = &list->items[list->count++];
  c->epoch = epoch;
  c->step = step;
  snprintf(c->name, sizeof c->name, "%s", name);
  return MXU_OK;
}

static int newest_first(const void *a, const void *b) {
  const checkpoint *x = a, *y = b;
  if (x->epoch != y->epoch) return x->epoch > y->epoch ? -1 : 1;
  if (x->step != y->step) return x->step > y->step ? -1 : 1;
  return strcmp(x->name, y->name);
}

/* The checkpoints in dir (temp: the temporaries), newest first by
 * position, not by time: a clock is no guide to training order. *exists
 * is 0 for a directory that is not there. */
static mxu_status list_dir(const char *dir, int temp, checkpoint_list *list,
                           int *exists) {
  memset(list, 0, sizeof *list);
  *exists = 0;
  DIR *d = opendir(dir);
  if (!d && errno == ENOENT) return MXU_OK;
  if (!d)
    return mxu_fail(MXU_ERR_IO, "checkpoint: %s: cannot list: %s", dir,
                    strerror(errno));
  *exists = 1;
  mxu_status s = MXU_OK;
  int epoch, step;
  for (struct dirent *e; s == MXU_OK && (e = readdir(d));)
    if (parse_name(e->d_name, temp, &epoch, &step))
      s = push(list, e->d_name, epoch, step);
  closedir(d);
  if (s == MXU_OK && list->count)
    qsort(list->items, (size_t)list->count, sizeof *list->items, newest_first);
  if (s != MXU_OK) free(list->items);
  return s;
}

/* ---- saving ------------------------------------------------------------ */

/* One level: the parent must exist, as with mkdir(1) without -p. */
static mxu_status make_dir(const char *dir) {
  if (mkdir(dir, 0755) == 0) return MXU_OK;
  int error = errno;
  struct stat st;
  if (error == EEXIST && stat(dir, &st) == 0 && S_ISDIR(st.st_mode))
    return MXU_OK;
  return mxu_fail(MXU_ERR_IO, "checkpoint: %s: cannot create the directory: %s",
                  dir,
                  error == EEXIST ? "a file is in the way" : strerror(error));
}

static void remove_file(const char *dir, const char *name) {
  char path[4096];
  if (join(path, sizeof path, dir, name)) unlink(path);
}

/* Older checkpoints beyond the newest `keep`; never the one just
 * written (when there is one), even if a stray newer-named file sorts
 * ahead of it. */
static mxu_status prune(const char *dir, const char *written, int keep) {
  checkpoint_list list;
  int exists;
  MXU_TRY(list_dir(dir, 0, &list, &exists));
  for (int i = keep; i < list.count; i++)
    if (!written || strcmp(list.items[i].name, written) != 0)
      remove_file(dir, list.items[i].name);
  free(list.items);
  return MXU_OK;
}

/* Temporaries left by a save that crashed before its rename. Only one
 * run writes a checkpoint directory, so none of them is in progress. */
static mxu_status remove_stale_temps(const char *dir) {
  checkpoint_list list;
  int exists;
  MXU_TRY(list_dir(dir, 1, &list, &exists));
  for (int i = 0; i < list.count; i++) remove_file(dir, list.items[i].name);
  free(list.items);
  return MXU_OK;
}

/* A step whose loss was finite can still have made weights infinite; a
 * checkpoint of them would be the "last good" one a resume trusts. */
static mxu_status check_finite(const mxu_model *model,
                               const mxu_train_position *position) {
  const float *buffers[2] = {model->weights, model->state};
  int64_t counts[2] = {model->trainable_count, model->state_count};
  for (int b = 0; b < 2; b++)
    for (int64_t i = 0; buffers[b] && i < counts[b]; i++)
      if (!isfinite(buffers[b][i]))
        return mxu_fail(MXU_ERR_NUMERIC,
                        "checkpoint: epoch %d, step %d: a weight is %s, so "
                        "training diverged; no checkpoint is written and the "
                        "last one stays (lower the learning rate)",
                        position->epoch + 1, position->step,
                        isnan(buffers[b][i]) ? "NaN" : "infinite");
  return MXU_OK;
}

mxu_status mxu_checkpoint_save(const mxu_model *model, const char *dir,
                               const mxu_train_position *position, int keep) {
  if (!model || !dir || !position)
    return mxu_fail(MXU_ERR_ARG,
                    "checkpoint: a model, a directory and a position are "
                    "required");
  if (position->epoch < 0 || position->step < 0)
    return mxu_fail(MXU_ERR_ARG, "checkpoint: position %d/%d is negative",
                    position->epoch, position->step);
  MXU_TRY(check_finite(model, position));
  MXU_TRY(make_dir(dir));
  char name[64], path[4096];
  snprintf(name, sizeof name, "ckpt-%05d-%05d.h5", position->epoch,
           position->step);
  if (!join(path, sizeof path, dir, name))
    return mxu_fail(MXU_ERR_ARG, "checkpoint: %s: path too long", dir);
  keep = keep > MIN_KEEP ? keep : MIN_KEEP;
  /* Pruned before writing too: a run killed between its rename and its
   * prune left one too many, and each such kill would add one more. So
   * the directory never holds more than keep + 1. */
  MXU_TRY(remove_stale_temps(dir));
  MXU_TRY(prune(dir, NULL, keep));
  MXU_TRY(mxu_save_model(model, path, position));
  return prune(dir, name, keep);
}

/* ---- one run a directory ----------------------------------------------- */

/* A POSIX record lock on DIR/.mxu-lock, holding the owner's pid: two runs
 * on one directory would prune each other's checkpoints. The lock goes
 * with the process, so a killed run never leaves it held. */
mxu_status mxu_checkpoint_lock(const char *dir, int *handle) {
  *handle = -1;
  MXU_TRY(make_dir(dir));
  char path[4096];
  if (!join(path, sizeof path, dir, ".mxu-lock"))
    return mxu_fail(MXU_ERR_ARG, "checkpoint: %s: path too long", dir);
  int fd = open(path, O_RDWR | O_CREAT, 0644);
  if (fd < 0)
    return mxu_fail(MXU_ERR_IO, "checkpoint: %s: cannot open: %s", path,
                    strerror(errno));
  struct flock lock = {0};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  if (fcntl(fd, F_SETLK, &lock) != 0) {
    char owner[32] = "";
    ssize_t n = pread(fd, owner, sizeof owner - 1, 0);
    owner[n > 0 ? n : 0] = 0;
    owner[strcspn(owner, "\n")] = 0;
    close(fd);
    return mxu_fail(MXU_ERR_IO,
                    "checkpoint: %s is in use by another run (process %s); "
                    "give each run its own checkpoint directory",
                    dir, owner[0] ? owner : "unknown");
  }
  char pid[32];
  int length = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
  if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)length, 0) != length) {
    /* The lock holds without the note of who holds it. */
  }
  *handle = fd;
  return MXU_OK;
}

void mxu_checkpoint_unlock(int handle) {
  if (handle >= 0) close(handle); /* closing drops the lock */
}

/* ---- restoring --------------------------------------------------------- */

static void append(char *out, size_t size, const char *name, const char *why) {
  size_t used = strlen(out);
  if (used + 1 < size) snprintf(out + used, size - used, "%s: %s; ", name, why);
}

/* Newest first; each failure is noted in skipped (a buffer of `size`
 * bytes, "" to start) and the next one tried. */
static mxu_status try_each(mxu_model *model, const char *dir,
                           const checkpoint_list *list,
                           mxu_train_position *position, int *found,
                           char *skipped, size_t size) {
  for (int i = 0; i < list->count; i++) {
    char path[4096];
    if (!join(path, sizeof path, dir, list->items[i].name)) continue;
    if (mxu_restore_model(model, path, position) == MXU_OK) {
      *found = 1;
      return MXU_OK;
    }
    append(skipped, size, list->items[i].name, mxu_errmsg());
  }
  int length = (int)strlen(skipped); /* without the last "; " */
  return mxu_fail(MXU_ERR_FORMAT,
                  "checkpoint: %s: none of the %d checkpoints loads: %.*s", dir,
                  list->count, length > 2 ? length - 2 : length, skipped);
}

mxu_status mxu_checkpoint_restore(mxu_model *model, const char *dir,
                                  mxu_train_position *position, int *found,
                                  char *skipped, size_t skipped_size) {
  int none = 0;
  if (!found) found = &none;
  *found = 0;
  if (skipped && skipped_size) skipped[0] = 0;
  if (!model || !dir)
    return mxu_fail(MXU_ERR_ARG,
                    "checkpoint: a model and a directory are required");
  checkpoint_list list;
  int exists;
  MXU_TRY(list_dir(dir, 0, &list, &exists));
  /* The message lists what was skipped even when the caller has no
   * buffer for it. */
  char why[8192] = "";
  mxu_status s = MXU_OK;
  if (list.count)
    s = try_each(model, dir, &list, position, found, why, sizeof why);
  free(list.items);
  if (skipped && skipped_size) snprintf(skipped, skipped_size, "%s", why);
  return s;
}
