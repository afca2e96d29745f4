/* args.c — the argument helpers every command uses (cli/cli.h): the option scanner,
 * numbers for flags, the config keys for --help. */
#include <stdio.h>
#include <string.h>

#include "base/num.h"
#include "base/text.h"
#include "cli/cli.h"

static int in_list(const char *const *list, const char *s, size_t n) {
    for (; list && *list; list++)
        if (strlen(*list) == n && strncmp(*list, s, n) == 0) return 1;
    return 0;
}

int dm_args_next(dm_args *a, const char *cmd) {
    if (a->i >= a->argc) return 0;
    const char *arg = a->argv[a->i++];
    a->name = a->value = NULL;
    if (!strcmp(arg, "-v") || !strcmp(arg, "--verbose")) {
        dm_cli_printer()->verbose = 1;
        return dm_args_next(a, cmd);
    }
    if (strncmp(arg, "--", 2) != 0 || arg[2] == 0) {
        a->value = arg;
        return 1;
    }
    const char *eq = strchr(arg, '=');
    size_t n = eq ? (size_t)(eq - arg) : strlen(arg);
    if (in_list(a->flags, arg, n)) {
        if (eq) {
            fprintf(stderr, "error: %s: option %.*s takes no value\n", cmd, (int)n, arg);
            return -1;
        }
        a->name = arg;
        return 1;
    }
    if (!in_list(a->with_value, arg, n)) {
        const char *opts[128], *near;
        int no = 0;
        for (const char *const *l = a->with_value; l && *l && no < 127; l++) opts[no++] = *l;
        for (const char *const *l = a->flags; l && *l && no < 127; l++) opts[no++] = *l;
        char given[64], pa[64];
        snprintf(given, sizeof given, "%.*s", (int)(n < 63 ? n : 63), arg);
        near = dm_nearest(given, opts, no);
        dm_printable(given, pa, sizeof pa);
        if (near)
            fprintf(stderr, "error: %s: unknown option %s: did you mean %s? (try `dormouse %s "
                    "--help`)\n", cmd, pa, near, cmd);
        else
            fprintf(stderr, "error: %s: unknown option %s (try `dormouse %s --help`)\n", cmd,
                    pa, cmd);
        return -1;
    }
    static char name[64];
    snprintf(name, sizeof name, "%.*s", (int)(n < 63 ? n : 63), arg);
    a->name = name;
    if (eq) {
        a->value = eq + 1;
    } else if (a->i < a->argc) {
        a->value = a->argv[a->i++];
    } else {
        fprintf(stderr, "error: %s: option %s needs a value\n", cmd, name);
        return -1;
    }
    return 1;
}

int dm_cli_long(const char *flag, const char *v, long lo, long hi, long *out) {
    long long x;
    if (dm_parse_int(v, lo, hi, &x)) {
        char pv[64];
        fprintf(stderr, "error: %s expects an integer in [%ld, %ld], got '%s'\n", flag, lo, hi,
                dm_printable(v, pv, sizeof pv));
        return 1;
    }
    *out = (long)x;
    return 0;
}

int dm_cli_double(const char *flag, const char *v, double lo, double hi, double *out) {
    double x;
    if (dm_parse_real(v, &x) || !(x >= lo && x <= hi)) {
        char pv[64];
        fprintf(stderr, "error: %s expects a decimal number in [%g, %g], got '%s'\n", flag, lo,
                hi, dm_printable(v, pv, sizeof pv));
        return 1;
    }
    *out = x;
    return 0;
}

void dm_cli_print_keys(FILE *f) {
    static const char *const title[] = {
        "model keys (a checkpoint fixes these: resume, eval and sample cannot change them)",
        "training keys",
        "backend keys (how a step runs on this machine, not what the model is)",
    };
    dm_config d;
    dm_config_default(&d);
    char val[64];
    for (int g = DM_KEY_MODEL; g <= DM_KEY_BACKEND; g++) {
        fprintf(f, "%s%s:\n", g == DM_KEY_MODEL ? "" : "\n", title[g]);
        for (int i = 0; dm_config_key_name(i); i++) {
            if (dm_config_key_group(i) != g) continue;
            dm_config_get(&d, dm_config_key_name(i), val, sizeof val);
            fprintf(f, "  %-17s %-10s %s\n", dm_config_key_name(i), val, dm_config_key_help(i));
        }
    }
}
