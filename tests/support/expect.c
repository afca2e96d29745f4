/* expect.c — t_expect (check.h): in a file of its own because it reports through the
 * harness (t_fail), which only test executables link, not the benchmarks. */
#include <stdio.h>
#include <string.h>

#include "check.h"

void t_expect(const char *cmd, int code, const char *needle, char *errout, size_t errlen) {
    char err[4096];
    int rc = t_run(cmd, err, sizeof err);
    int lines = 0;
    for (const char *p = err; *p; p++) lines += *p == '\n';
    printf("  [%d] %s\n       -> %s", rc, cmd, err[0] ? err : "(no stderr)\n");
    CHECKF(rc == code, "exit %d, expected %d: %s", rc, code, cmd);
    CHECKF(strstr(err, needle) != NULL, "stderr lacks '%s': %s", needle, err);
    CHECKF(lines == 1, "expected one line on stderr, got %d", lines);
    if (errout && errlen) snprintf(errout, errlen, "%s", err);
}
