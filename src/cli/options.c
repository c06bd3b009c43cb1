/* options.c — parsing and checking the flags of an mxu subcommand from its
 * option table, and the --help text drawn from the same table, so the two
 * cannot disagree. */
#include "options.h"

#include <mxu.h>

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_usage_error(const char *command, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  fprintf(stderr, "mxu %s: ", command);
  vfprintf(stderr, fmt, args);
  va_end(args);
  fprintf(stderr, "\nsee mxu %s --help\n", command);
  return CLI_USAGE;
}

int cli_runtime_error(const char *command) {
  fprintf(stderr, "mxu %s: %s\n", command, mxu_errmsg());
  return CLI_RUNTIME;
}

const cli_option *cli_find(const cli_command *command, const char *flag) {
  for (int i = 0; i < command->option_count; i++)
    if (strcmp(command->options[i].flag, flag) == 0)
      return &command->options[i];
  return NULL;
}

/* ---- values ------------------------------------------------------------ */

static int all_digits(const char *text) {
  if (!*text) return 0;
  for (; *text; text++)
    if (*text < '0' || *text > '9') return 0;
  return 1;
}

static int parse_positive_int(const char *text, int *out) {
  if (!all_digits(text)) return 0;
  errno = 0;
  long long v = strtoll(text, NULL, 10);
  if (errno || v < 1 || v > INT_MAX) return 0;
  *out = (int)v;
  return 1;
}

static int parse_count(const char *text, uint64_t *out) {
  if (!all_digits(text)) return 0;
  errno = 0;
  unsigned long long v = strtoull(text, NULL, 10);
  if (errno) return 0;
  *out = (uint64_t)v;
  return 1;
}

static int parse_number(const char *text, const char *end, double *out) {
  if (text == end || *text == ' ' || *text == '\t') return 0;
  char *stop;
  errno = 0;
  *out = strtod(text, &stop);
  return !errno && stop == end;
}

/* A decimal or a fraction ("1/255"), which is how Keras users write a
 * rescale factor. */
static int parse_positive_float(const char *text, float *out) {
  const char *slash = strchr(text, '/');
  const char *end = text + strlen(text);
  double a, b = 1.0;
  if (!parse_number(text, slash ? slash : end, &a)) return 0;
  if (slash && !parse_number(slash + 1, end, &b)) return 0;
  double v = a / b;
  if (!isfinite(v) || !(v > 0) || v > 3.0e38 || (float)v == 0.0f) return 0;
  *out = (float)v;
  return 1;
}

static int parse_choice(const char *text, const char *const *choices,
                        int *out) {
  for (int i = 0; choices[i]; i++)
    if (strcmp(text, choices[i]) == 0) {
      *out = i;
      return 1;
    }
  return 0;
}

/* A comma-separated list of at most CLI_MAX_INDICES items, each taken by
 * item(text, k, out) as the k-th. */
static int parse_list(const char *text, int (*item)(const char *, int, void *),
                      void *out, int *count) {
  *count = 0;
  const char *p = text;
  for (;;) {
    size_t length = strcspn(p, ",");
    char one[32];
    if (length == 0 || length >= sizeof one) return 0;
    memcpy(one, p, length);
    one[length] = 0;
    if (*count == CLI_MAX_INDICES || !item(one, *count, out)) return 0;
    ++*count;
    if (!p[length]) return 1;
    p += length + 1;
  }
}

static int index_item(const char *text, int k, void *out) {
  uint64_t v;
  if (!parse_count(text, &v) || v > INT64_MAX) return 0;
  ((cli_indices *)out)->items[k] = (int64_t)v;
  return 1;
}

static int weight_item(const char *text, int k, void *out) {
  double v;
  if (!parse_number(text, text + strlen(text), &v) || !(v >= 0) || v > 3.0e38)
    return 0;
  ((cli_weights *)out)->items[k] = (float)v;
  return 1;
}

static void choices_text(const char *const *choices, char *out, size_t size) {
  size_t used = 0;
  out[0] = 0;
  for (int i = 0; choices[i] && used < size; i++)
    used += (size_t)snprintf(out + used, size - used, "%s%s", i ? ", " : "",
                             choices[i]);
}

/* What a valid value is, for messages: "a positive integer". */
static void describe(const cli_option *o, char *out, size_t size) {
  char list[256];
  switch (o->kind) {
  case CLI_STRING: snprintf(out, size, "%s", o->help); break;
  case CLI_POSITIVE_INT: snprintf(out, size, "a positive integer"); break;
  case CLI_COUNT: snprintf(out, size, "a non-negative integer"); break;
  case CLI_POSITIVE_FLOAT:
    snprintf(out, size, "a positive number (e.g. 0.001 or 1/255)");
    break;
  case CLI_CHOICE:
    choices_text(o->choices, list, sizeof list);
    snprintf(out, size, "one of %s", list);
    break;
  case CLI_FLAG: snprintf(out, size, "a switch without a value"); break;
  case CLI_WEIGHTS:
    snprintf(out, size,
             "a comma-separated list of at most %d numbers >= 0 (e.g. "
             "1,5.5)",
             CLI_MAX_INDICES);
    break;
  case CLI_INDICES:
    snprintf(out, size,
             "a comma-separated list of at most %d sample indices (e.g. "
             "0,1,2)",
             CLI_MAX_INDICES);
    break;
  }
}

static int parse_value(const cli_option *o, const char *text) {
  switch (o->kind) {
  case CLI_STRING:
    if (!*text) return 0;
    *(const char **)o->target = text;
    return 1;
  case CLI_POSITIVE_INT: return parse_positive_int(text, o->target);
  case CLI_COUNT: return parse_count(text, o->target);
  case CLI_POSITIVE_FLOAT: return parse_positive_float(text, o->target);
  case CLI_CHOICE: return parse_choice(text, o->choices, o->target);
  case CLI_INDICES:
    return parse_list(text, index_item, o->target,
                      &((cli_indices *)o->target)->count);
  case CLI_WEIGHTS:
    return parse_list(text, weight_item, o->target,
                      &((cli_weights *)o->target)->count);
  case CLI_FLAG: return 0;
  }
  return 0;
}

/* ---- flags ------------------------------------------------------------- */

static size_t edit_distance(const char *a, const char *b) {
  size_t n = strlen(b), row[64];
  if (n >= 64) return 64;
  for (size_t j = 0; j <= n; j++) row[j] = j;
  for (size_t i = 1; a[i - 1]; i++) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= n; j++) {
      size_t up = row[j];
      size_t best = diagonal + (a[i - 1] != b[j - 1]);
      if (up + 1 < best) best = up + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      row[j] = best;
      diagonal = up;
    }
  }
  return row[n];
}

static int unknown_flag(const cli_command *command, const char *flag) {
  const char *best = NULL;
  size_t best_distance = 3; /* suggest only near misses */
  for (int i = 0; i < command->option_count; i++) {
    size_t d = edit_distance(flag, command->options[i].flag);
    if (d < best_distance) {
      best_distance = d;
      best = command->options[i].flag;
    }
  }
  if (best)
    return cli_usage_error(command->name,
                           "unknown option '%s'; did you mean %s?", flag, best);
  return cli_usage_error(command->name, "unknown option '%s'", flag);
}

/* Finds the option for "--flag" or "--flag=value"; *inline_value points
 * after the '=' when there is one. */
static cli_option *match_flag(cli_command *command, const char *arg,
                              const char **inline_value) {
  size_t length = strcspn(arg, "=");
  *inline_value = arg[length] ? arg + length + 1 : NULL;
  for (int i = 0; i < command->option_count; i++) {
    cli_option *o = &command->options[i];
    if (strlen(o->flag) == length && strncmp(o->flag, arg, length) == 0)
      return o;
  }
  return NULL;
}

static int missing_value(const cli_command *command, const cli_option *o) {
  char what[320];
  describe(o, what, sizeof what);
  return cli_usage_error(command->name, "%s needs a value: %s, %s", o->flag,
                         o->metavar, what);
}

/* One "--flag[=value]" at argv[*i]; consumes the next argument as the
 * value when there is no '='. */
static int take_flag(cli_command *command, int argc, char **argv, int *i) {
  const char *value;
  char name[128];
  cli_option *o = match_flag(command, argv[*i], &value);
  if (!o) {
    snprintf(name, sizeof name, "%.*s", (int)strcspn(argv[*i], "="), argv[*i]);
    return unknown_flag(command, name);
  }
  if (o->kind == CLI_FLAG) {
    if (value)
      return cli_usage_error(command->name, "%s takes no value (got '%s')",
                             o->flag, value);
    *(int *)o->target = 1;
    o->given = 1;
    return CLI_OK;
  }
  if (!value) {
    if (*i + 1 >= argc || strncmp(argv[*i + 1], "--", 2) == 0)
      return missing_value(command, o);
    value = argv[++*i];
  }
  if (!parse_value(o, value)) {
    char what[320];
    describe(o, what, sizeof what);
    return cli_usage_error(command->name, "%s: '%s' is not %s", o->flag, value,
                           what);
  }
  o->given = 1;
  return CLI_OK;
}

static int wants_help(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--") == 0) return 0;
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) return 1;
  }
  return 0;
}

static int check_required(const cli_command *command, const char *positional) {
  if (!positional)
    return cli_usage_error(command->name, "missing %s", command->positional);
  for (int i = 0; i < command->option_count; i++) {
    const cli_option *o = &command->options[i];
    if (o->required && !o->given)
      return cli_usage_error(command->name, "%s is required: %s, %s", o->flag,
                             o->metavar, o->help);
  }
  return CLI_OK;
}

int cli_parse(cli_command *command, int argc, char **argv,
              const char **positional) {
  if (wants_help(argc, argv)) {
    cli_print_help(command);
    return -1;
  }
  *positional = NULL;
  int only_positional = 0;
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (!only_positional && strcmp(arg, "--") == 0) {
      only_positional = 1;
    } else if (!only_positional && arg[0] == '-' && arg[1]) {
      int status = take_flag(command, argc, argv, &i);
      if (status != CLI_OK) return status;
    } else if (*positional) {
      return cli_usage_error(command->name,
                             "unexpected argument '%s' (%s is already '%s')",
                             arg, command->positional, *positional);
    } else {
      *positional = arg;
    }
  }
  return check_required(command, *positional);
}

/* ---- help -------------------------------------------------------------- */

/* Help text wrapped to 79 columns, continuation lines under the text. */
static void print_wrapped(const char *text, int indent) {
  int column = indent, width = 79;
  while (*text) {
    size_t word = strcspn(text, " ");
    if (column > indent && column + 1 + (int)word > width) {
      printf("\n%*s", indent, "");
      column = indent;
    } else if (column > indent) {
      putchar(' ');
      column++;
    }
    printf("%.*s", (int)word, text);
    column += (int)word;
    text += word;
    while (*text == ' ') text++;
  }
  putchar('\n');
}

void cli_print_help(const cli_command *command) {
  printf("usage: mxu %s %s", command->name, command->positional);
  for (int i = 0; i < command->option_count; i++)
    if (command->options[i].required)
      printf(" %s %s", command->options[i].flag, command->options[i].metavar);
  printf(" [options]\n\n%s\n\noptions:\n", command->summary);
  for (int i = 0; i < command->option_count; i++) {
    const cli_option *o = &command->options[i];
    char left[64], text[2048]; /* the longest help, --metric's, is ~800 */
    snprintf(left, sizeof left, "%s %s", o->flag, o->metavar);
    snprintf(text, sizeof text, "%s%s", o->help,
             o->required ? " (required)" : "");
    printf("  %-24s ", left);
    print_wrapped(text, 27);
  }
  printf("  %-24s %s\n", "-h, --help", "show this help and exit");
}
