/* cli.h — shared pieces of the `dormouse` command: argument scanning, configs from
 * files and --set, exit codes. Layer 6 of DESIGN.md section 2: parsing only; the jobs
 * live in the library. */
#ifndef DM_CLI_H
#define DM_CLI_H

#include <stdio.h>

#include "dormouse.h"
#include "io/files.h"

enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2 };

#ifndef DM_SOURCE_DIR
#define DM_SOURCE_DIR "."
#endif
#define DM_DEFAULT_DATA DM_SOURCE_DIR "/data/kjv.txt.gz"

/* Option scanner over argv: --name value or --name=value; positional args returned with
 * name == NULL. Returns 0 at the end, 1 for an item, -1 on a usage error (printed). */
typedef struct {
    int argc, i;
    char **argv;
    const char *const *with_value; /* options that take a value (NULL-terminated) */
    const char *const *flags;      /* options without a value */
    const char *name, *value;
} dm_args;
int dm_args_next(dm_args *a, const char *cmd);


/* Apply "key=value" to c; prints the error and returns non-zero on failure. */
int dm_cli_set(dm_config *c, const char *kv);
/* Apply a JSON config file to c; prints the error and returns non-zero on failure. */
int dm_cli_config_file(dm_config *c, const char *path);
/* Numbers for flags: print an error naming the flag on failure. */
int dm_cli_long(const char *flag, const char *v, long lo, long hi, long *out);
int dm_cli_double(const char *flag, const char *v, double lo, double hi, double *out);

/* Print the config keys with their defaults and help (for --help). */
void dm_cli_print_keys(FILE *f);

int dm_cmd_train(int argc, char **argv);
int dm_cmd_eval(int argc, char **argv);
int dm_cmd_sample(int argc, char **argv);
int dm_cmd_ab(int argc, char **argv);
int dm_cmd_bench(int argc, char **argv);

#endif
