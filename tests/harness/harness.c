/* harness.c — the registry of TEST cases and main(): linked into test executables only
 * (benchmarks use the helpers of check.c without it). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#define T_MAX 512
static struct { const char *name; t_fn fn; } t_cases[T_MAX];
static int t_ncases, t_failed_checks, t_skipped;
static const char *t_current;

void t_register(const char *name, t_fn fn) {
    if (t_ncases == T_MAX) { fprintf(stderr, "too many tests\n"); exit(2); }
    t_cases[t_ncases].name = name;
    t_cases[t_ncases++].fn = fn;
}

void t_fail(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "  FAIL %s:%d: ", file, line);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    t_failed_checks++;
}

void t_skip(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("SKIP %s: ", t_current ? t_current : "?");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    t_skipped = 1;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--list") == 0) {
        for (int i = 0; i < t_ncases; i++) printf("%s\n", t_cases[i].name);
        return 0;
    }
    int ran = 0, failed = 0, skipped = 0;
    for (int i = 0; i < t_ncases; i++) {
        if (argc > 1 && strcmp(argv[1], t_cases[i].name) != 0) continue;
        int before = t_failed_checks;
        printf("RUN  %s\n", t_cases[i].name);
        fflush(stdout);
        t_current = t_cases[i].name;
        t_skipped = 0;
        t_cases[i].fn();
        int bad = t_failed_checks != before;
        printf("%s %s\n", bad ? "FAIL" : t_skipped ? "SKIPPED" : "PASS", t_cases[i].name);
        fflush(stdout);
        ran++;
        failed += bad;
        skipped += !bad && t_skipped;
    }
    if (ran == 0) { fprintf(stderr, "no test named %s\n", argc > 1 ? argv[1] : "(any)"); return 2; }
    /* 77: CTest's SKIP_RETURN_CODE (CMakeLists.txt), when every case run was skipped */
    return failed ? 1 : skipped == ran ? 77 : 0;
}

