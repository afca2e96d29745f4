/* stats.c — median and spread (see stats.h). */
#include "base/stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double dm_median(const double *x, int n, double *spread) {
    double *c = n > 0 ? malloc(sizeof(double) * (size_t)n) : NULL;
    if (!c) {
        if (spread) *spread = NAN;
        return NAN;
    }
    memcpy(c, x, sizeof(double) * (size_t)n);
    qsort(c, (size_t)n, sizeof *c, cmp_double);
    double m = n % 2 ? c[n / 2] : 0.5 * (c[n / 2 - 1] + c[n / 2]);
    if (spread) *spread = c[n - 1] - c[0];
    free(c);
    return m;
}
