/* tensorboard.c — TensorBoard event files without TensorFlow: CRC-32C, the
 * few protobuf encodings an Event with scalar summaries needs, and TFRecord
 * framing: uint64 length | masked crc32c(length) | data | masked
 * crc32c(data), every number little-endian. */
#include "io/tensorboard.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define FILE_VERSION "brain.Event:2"

/* A record's length and its CRC come before the data, the data's CRC
 * after it. */
#define RECORD_HEAD 12
#define RECORD_TAIL 4

/* Field numbers of TensorFlow's event.proto and summary.proto. */
enum {
  EVENT_WALL_TIME = 1,    /* double */
  EVENT_STEP = 2,         /* int64 */
  EVENT_FILE_VERSION = 3, /* string, in the oneof `what` */
  EVENT_SUMMARY = 5,      /* Summary, in the oneof `what` */
  SUMMARY_VALUE = 1,      /* repeated Summary.Value */
  VALUE_TAG = 1,          /* string */
  VALUE_TENSOR = 8,       /* TensorProto, in the oneof `value` */
  VALUE_METADATA = 9,     /* SummaryMetadata */
  METADATA_PLUGIN = 1,    /* PluginData */
  METADATA_CLASS = 4,     /* DataClass: 1 is DATA_CLASS_SCALAR */
  PLUGIN_NAME = 1,        /* string */
  PLUGIN_CONTENT = 2,     /* bytes */
  TENSOR_DTYPE = 1,       /* DataType: 1 is DT_FLOAT, 7 DT_STRING */
  TENSOR_SHAPE = 2,       /* TensorShapeProto: empty for a scalar */
  TENSOR_CONTENT = 4,     /* bytes: the float32, little-endian */
  TENSOR_STRING = 8       /* repeated bytes: a string tensor's values */
};

enum { WIRE_VARINT = 0, WIRE_FIXED64 = 1, WIRE_BYTES = 2, WIRE_FIXED32 = 5 };

/* Every field number above is below 16, so every key is one byte. */
#define KEY_SIZE 1

/* Unbuffered: a record goes to the system at once, so TensorBoard sees it
 * while training runs, a crash loses nothing written, and a write error is
 * reported by the call whose record it cut short. A few hundred bytes a
 * call is nothing beside a training step. */
struct mxu_tb_writer {
  int fd;
  char *path;
  unsigned char *record; /* the record being framed, reused */
  size_t capacity;
  int error; /* errno of the first failed write; 0 while none failed */
};

/* ---- CRC-32C ----------------------------------------------------------- */

static uint32_t crc_table[256];
static pthread_once_t crc_table_once = PTHREAD_ONCE_INIT;

/* Reflected: bit 0 is the highest power, so the table shifts right. */
static void crc_table_fill(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t crc = i;
    for (int bit = 0; bit < 8; bit++)
      crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
    crc_table[i] = crc;
  }
}

uint32_t mxu_crc32c(const void *data, size_t n) {
  pthread_once(&crc_table_once, crc_table_fill);
  const unsigned char *bytes = data;
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; i++)
    crc = crc_table[(crc ^ bytes[i]) & 0xFFu] ^ (crc >> 8);
  return ~crc;
}

uint32_t mxu_crc32c_masked(const void *data, size_t n) {
  uint32_t crc = mxu_crc32c(data, n);
  return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

/* ---- protobuf encoding ------------------------------------------------- */

/* Writers below assume the caller sized the buffer with the *_size
 * functions: an Event is small and its size is known before it is
 * written, so nothing grows mid-message. */

static size_t varint_size(uint64_t v) {
  size_t n = 1;
  for (; v >= 0x80; v >>= 7) n++;
  return n;
}

static unsigned char *put_varint(unsigned char *p, uint64_t v) {
  for (; v >= 0x80; v >>= 7) *p++ = (unsigned char)(v | 0x80);
  *p++ = (unsigned char)v;
  return p;
}

/* Little-endian whatever the host is: the format fixes the byte order. */
static unsigned char *put_le(unsigned char *p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; i++) p[i] = (unsigned char)(v >> (8 * i));
  return p + bytes;
}

static unsigned char *put_key(unsigned char *p, int field, int wire) {
  return put_varint(p, (uint64_t)(field << 3 | wire));
}

static unsigned char *put_double(unsigned char *p, int field, double v) {
  uint64_t bits;
  memcpy(&bits, &v, sizeof bits);
  return put_le(put_key(p, field, WIRE_FIXED64), bits, 8);
}

/* int64 is a plain varint of the two's complement: a negative step takes
 * ten bytes, as protobuf does it. */
static unsigned char *put_int64(unsigned char *p, int field, int64_t v) {
  return put_varint(put_key(p, field, WIRE_VARINT), (uint64_t)v);
}

/* The key and length of a length-delimited field; n bytes follow. */
static unsigned char *put_length(unsigned char *p, int field, size_t n) {
  return put_varint(put_key(p, field, WIRE_BYTES), n);
}

static unsigned char *put_bytes(unsigned char *p, int field, const void *data,
                                size_t n) {
  p = put_length(p, field, n);
  memcpy(p, data, n);
  return p + n;
}

static size_t length_field_size(size_t n) {
  return KEY_SIZE + varint_size(n) + n;
}

/* ---- events ------------------------------------------------------------ */

static double wall_time(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* An Event whose oneof `what` holds what_size bytes. A zero step is left
 * out, as proto3 (and TensorFlow's own file_version record) does. */
static size_t event_size(int64_t step, size_t what_size) {
  size_t n = KEY_SIZE + 8 + length_field_size(what_size);
  if (step) n += KEY_SIZE + varint_size((uint64_t)step);
  return n;
}

/* wall_time, step, then the key and length of `what`; its bytes follow. */
static unsigned char *put_event_head(unsigned char *p, int64_t step, int what,
                                     size_t what_size) {
  p = put_double(p, EVENT_WALL_TIME, wall_time());
  if (step) p = put_int64(p, EVENT_STEP, step);
  return put_length(p, what, what_size);
}

/* ---- records ----------------------------------------------------------- */

/* The first write error is kept: the file then ends in a partial record,
 * and every later call says so rather than append after it. */
static mxu_status writable(const mxu_tb_writer *w) {
  if (!w->error) return MXU_OK;
  return mxu_fail(MXU_ERR_IO, "tensorboard: %s: cannot write: %s", w->path,
                  strerror(w->error));
}

static mxu_status write_failed(mxu_tb_writer *w, int error) {
  if (!w->error) w->error = error ? error : EIO;
  return writable(w);
}

/* Room for a record of size data bytes; *data is where they go. */
static mxu_status reserve(mxu_tb_writer *w, size_t size, unsigned char **data) {
  size_t need = RECORD_HEAD + size + RECORD_TAIL;
  if (need > w->capacity) {
    unsigned char *grown = realloc(w->record, need);
    if (!grown)
      return mxu_fail(MXU_ERR_NOMEM, "tensorboard: %s: out of memory", w->path);
    w->record = grown;
    w->capacity = need;
  }
  *data = w->record + RECORD_HEAD;
  return MXU_OK;
}

/* write(2) may take less than asked (a signal, a nearly full disk); the
 * rest goes in further calls until one fails. */
static mxu_status write_all(mxu_tb_writer *w, const unsigned char *p,
                            size_t n) {
  while (n > 0) {
    ssize_t done = write(w->fd, p, n);
    if (done < 0 && errno == EINTR) continue;
    if (done <= 0) return write_failed(w, done < 0 ? errno : EIO);
    p += done;
    n -= (size_t)done;
  }
  return MXU_OK;
}

/* Frames the size data bytes reserve placed and appends the record. */
static mxu_status write_record(mxu_tb_writer *w, size_t size) {
  unsigned char *r = w->record, *data = r + RECORD_HEAD;
  put_le(r, size, 8);
  put_le(r + 8, mxu_crc32c_masked(r, 8), 4);
  put_le(data + size, mxu_crc32c_masked(data, size), 4);
  return write_all(w, r, RECORD_HEAD + size + RECORD_TAIL);
}

static mxu_status write_version(mxu_tb_writer *w) {
  size_t version_size = strlen(FILE_VERSION);
  size_t size = event_size(0, version_size);
  unsigned char *p = NULL;
  MXU_TRY(reserve(w, size, &p));
  p = put_event_head(p, 0, EVENT_FILE_VERSION, version_size);
  memcpy(p, FILE_VERSION, version_size);
  return write_record(w, size);
}

/* What follows the tag in a Summary.Value as TF2's tf.summary.scalar
 * writes it (Keras' TensorBoard callback): metadata naming the scalars
 * plugin and the scalar data class, then a float32 tensor of shape () as
 * raw content, as TensorFlow's C++ writer stores it. */
static unsigned char *put_scalar_tensor(unsigned char *p, float value) {
  static const char plugin[] = "scalars";
  size_t name = length_field_size(sizeof plugin - 1);
  p = put_length(p, VALUE_METADATA, length_field_size(name) + 2);
  p = put_length(p, METADATA_PLUGIN, name);
  p = put_bytes(p, PLUGIN_NAME, plugin, sizeof plugin - 1);
  p = put_varint(put_key(p, METADATA_CLASS, WIRE_VARINT), 1);
  p = put_length(p, VALUE_TENSOR, 2 + 2 + length_field_size(4));
  p = put_varint(put_key(p, TENSOR_DTYPE, WIRE_VARINT), 1);
  p = put_length(p, TENSOR_SHAPE, 0);
  uint32_t bits;
  memcpy(&bits, &value, sizeof bits);
  return put_le(put_length(p, TENSOR_CONTENT, 4), bits, 4);
}

/* Its size: 15 bytes of metadata, 12 of tensor. */
#define SCALAR_TENSOR_SIZE 27

mxu_status mxu_tb_scalar(mxu_tb_writer *w, const char *tag, int64_t step,
                         double value) {
  if (!w) return mxu_fail(MXU_ERR_ARG, "tensorboard: no writer");
  if (!tag || !*tag)
    return mxu_fail(MXU_ERR_ARG, "tensorboard: %s: a scalar needs a tag",
                    w->path);
  MXU_TRY(writable(w));
  size_t tag_size = strlen(tag);
  size_t value_size = length_field_size(tag_size) + SCALAR_TENSOR_SIZE;
  size_t summary_size = length_field_size(value_size);
  size_t size = event_size(step, summary_size);
  unsigned char *p = NULL;
  MXU_TRY(reserve(w, size, &p));
  p = put_event_head(p, step, EVENT_SUMMARY, summary_size);
  p = put_length(p, SUMMARY_VALUE, value_size);
  p = put_bytes(p, VALUE_TAG, tag, tag_size);
  put_scalar_tensor(p, (float)value);
  return write_record(w, size);
}

/* Keras' TensorBoard callback (write_graph) stores model.to_json() as a
 * string scalar tagged "keras" for the graph plugin's Keras view
 * (plugin graph_keras_model, content "1"), at step 0. */
mxu_status mxu_tb_keras_model(mxu_tb_writer *w, const char *json) {
  static const char tag[] = "keras", plugin[] = "graph_keras_model";
  if (!w || !json) return mxu_fail(MXU_ERR_ARG, "tensorboard: no writer");
  MXU_TRY(writable(w));
  size_t text = strlen(json);
  size_t plugin_size =
      length_field_size(sizeof plugin - 1) + length_field_size(1);
  size_t metadata_size = length_field_size(plugin_size);
  size_t tensor_size = 2 + 2 + length_field_size(text);
  size_t value_size = length_field_size(sizeof tag - 1) +
                      length_field_size(metadata_size) +
                      length_field_size(tensor_size);
  size_t summary_size = length_field_size(value_size);
  size_t size = event_size(0, summary_size);
  unsigned char *p = NULL;
  MXU_TRY(reserve(w, size, &p));
  p = put_event_head(p, 0, EVENT_SUMMARY, summary_size);
  p = put_length(p, SUMMARY_VALUE, value_size);
  p = put_bytes(p, VALUE_TAG, tag, sizeof tag - 1);
  p = put_length(p, VALUE_METADATA, metadata_size);
  p = put_length(p, METADATA_PLUGIN, plugin_size);
  p = put_bytes(p, PLUGIN_NAME, plugin, sizeof plugin - 1);
  p = put_bytes(p, PLUGIN_CONTENT, "1", 1);
  p = put_length(p, VALUE_TENSOR, tensor_size);
  p = put_varint(put_key(p, TENSOR_DTYPE, WIRE_VARINT), 7);
  p = put_length(p, TENSOR_SHAPE, 0);
  put_bytes(p, TENSOR_STRING, json, text);
  return write_record(w, size);
}

/* Nothing is held back (see mxu_tb_writer), so flushing is reporting. */
mxu_status mxu_tb_flush(mxu_tb_writer *w) {
  if (!w) return mxu_fail(MXU_ERR_ARG, "tensorboard: no writer");
  return writable(w);
}

/* ---- files ------------------------------------------------------------- */

/* One level of mkdir -p: prefix is dir up to some slash. A directory that
 * is there already is fine whatever mkdir said: on a read-only file
 * system it may say EROFS rather than EEXIST. */
static mxu_status make_dir(const char *prefix, const char *dir) {
  if (mkdir(prefix, 0755) == 0) return MXU_OK;
  int error = errno;
  struct stat st;
  if (stat(prefix, &st) == 0 && S_ISDIR(st.st_mode)) return MXU_OK;
  if (error == EEXIST)
    return mxu_fail(MXU_ERR_IO,
                    "tensorboard: %s: cannot create the directory: %s is "
                    "a file, not a directory",
                    dir, prefix);
  return mxu_fail(MXU_ERR_IO,
                  "tensorboard: %s: cannot create the directory %s: %s", dir,
                  prefix, strerror(error));
}

static mxu_status make_dirs(const char *dir) {
  char *prefix = strdup(dir);
  if (!prefix) return mxu_fail(MXU_ERR_NOMEM, "tensorboard: out of memory");
  mxu_status s = MXU_OK;
  /* From the second byte: the root of an absolute path needs no mkdir. */
  for (char *p = prefix + 1; s == MXU_OK; p++) {
    if (*p != '/' && *p != 0) continue;
    char end = *p;
    *p = 0;
    s = make_dir(prefix, dir);
    *p = end;
    if (!end) break;
  }
  free(prefix);
  return s;
}

static char *print_alloc(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
static char *print_alloc(const char *fmt, ...) {
  va_list args, again;
  va_start(args, fmt);
  va_copy(again, args);
  int n = vsnprintf(NULL, 0, fmt, args);
  char *text = n < 0 ? NULL : malloc((size_t)n + 1);
  if (text) vsnprintf(text, (size_t)n + 1, fmt, again);
  va_end(again);
  va_end(args);
  return text;
}

/* POSIX leaves a truncated host name unterminated; a slash in one would
 * turn the file name into a path. */
static void host_name(char *out, size_t size) {
  if (gethostname(out, size) != 0) out[0] = 0;
  out[size - 1] = 0;
  if (!out[0]) snprintf(out, size, "localhost");
  for (char *c = out; *c; c++)
    if (*c == '/') *c = '_';
}

/* The counter tells apart the files one process opens in the same second
 * (a run's train and validation writers, a writer reopened after a
 * restart in the same directory). */
static atomic_uint file_counter;

/* O_EXCL: an event file is never truncated or shared; a name taken
 * already (another process with our pid, long ago) moves to the next. */
static mxu_status create_file(mxu_tb_writer *w, const char *dir) {
  char host[256];
  host_name(host, sizeof host);
  long long seconds = (long long)time(NULL);
  const char *slash = dir[strlen(dir) - 1] == '/' ? "" : "/";
  for (int attempt = 0; attempt < 100; attempt++) {
    unsigned counter = atomic_fetch_add(&file_counter, 1u);
    free(w->path);
    w->path = print_alloc("%s%sevents.out.tfevents.%010lld.%s.%ld.%u.v2", dir,
                          slash, seconds, host, (long)getpid(), counter);
    if (!w->path) return mxu_fail(MXU_ERR_NOMEM, "tensorboard: out of memory");
    w->fd = open(w->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (w->fd >= 0) return MXU_OK;
    if (errno != EEXIST)
      return mxu_fail(MXU_ERR_IO, "tensorboard: %s: cannot create: %s", w->path,
                      strerror(errno));
  }
  return mxu_fail(MXU_ERR_IO,
                  "tensorboard: %s: cannot create an event file: every name "
                  "tried is taken",
                  dir);
}

mxu_status mxu_tb_open(const char *dir, mxu_tb_writer **out) {
  if (!out) return mxu_fail(MXU_ERR_ARG, "tensorboard: no place for a writer");
  *out = NULL;
  if (!dir || !*dir)
    return mxu_fail(MXU_ERR_ARG, "tensorboard: no log directory given");
  MXU_TRY(make_dirs(dir));
  mxu_tb_writer *w = calloc(1, sizeof *w);
  if (!w) return mxu_fail(MXU_ERR_NOMEM, "tensorboard: out of memory");
  w->fd = -1;
  mxu_status s = create_file(w, dir);
  /* Written at once, as TensorFlow does: the file is a valid event file
   * from the start, and a directory that takes no writes fails here. */
  if (s == MXU_OK) s = write_version(w);
  if (s != MXU_OK) {
    if (w->fd >= 0) unlink(w->path);
    mxu_tb_close(w);
    return s;
  }
  *out = w;
  return MXU_OK;
}

void mxu_tb_close(mxu_tb_writer *w) {
  if (!w) return;
  if (w->fd >= 0) close(w->fd);
  free(w->record);
  free(w->path);
  free(w);
}

const char *mxu_tb_path(const mxu_tb_writer *w) { return w ? w->path : ""; }
