#include "check.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"

void t_fill_normal(float *x, size_t n, uint64_t seed, float scale) {
    dm_rng r;
    dm_rng_seed(&r, seed, 0x7e57);
    for (size_t i = 0; i < n; i++) x[i] = (float)(dm_rng_normal(&r) * scale);
}

void t_l2norm_rows(float *x, size_t rows, int d) {
    for (size_t r = 0; r < rows; r++) {
        float *xr = x + r * (size_t)d;
        double s = 0;
        for (int i = 0; i < d; i++) s += (double)xr[i] * xr[i];
        float rn = (float)(1.0 / sqrt(s + 1e-6));
        for (int i = 0; i < d; i++) xr[i] *= rn;
    }
}

void t_orthonormal_cols(double *Q, int r, int c, uint64_t seed, uint64_t stream) {
    dm_rng g;
    dm_rng_seed(&g, seed, stream);
    for (size_t i = 0; i < (size_t)r * c; i++) Q[i] = dm_rng_normal(&g);
    for (int pass = 0; pass < 2; pass++)
        for (int j = 0; j < c; j++) {
            for (int k = 0; k < j; k++) {
                double d = 0;
                for (int i = 0; i < r; i++) d += Q[(size_t)i * c + j] * Q[(size_t)i * c + k];
                for (int i = 0; i < r; i++) Q[(size_t)i * c + j] -= d * Q[(size_t)i * c + k];
            }
            double nn = 0;
            for (int i = 0; i < r; i++) nn += Q[(size_t)i * c + j] * Q[(size_t)i * c + j];
            nn = sqrt(nn);
            for (int i = 0; i < r; i++) Q[(size_t)i * c + j] /= nn;
        }
}

void t_fill_uniform(float *x, size_t n, uint64_t seed, float lo, float hi) {
    dm_rng r;
    dm_rng_seed(&r, seed, 0x7e58);
    for (size_t i = 0; i < n; i++) x[i] = (float)(lo + (hi - lo) * dm_rng_uniform(&r));
}

void t_to_double(double *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = src[i];
}

float *t_alloc(size_t n) {
    float *p = calloc(n ? n : 1, sizeof(float));
    if (!p) { fprintf(stderr, "out of memory\n"); abort(); }
    return p;
}

double *t_allocd(size_t n) {
    double *p = calloc(n ? n : 1, sizeof(double));
    if (!p) { fprintf(stderr, "out of memory\n"); abort(); }
    return p;
}

double t_rel_rms(const float *a, const double *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double e = (double)a[i] - ref[i];
        num += e * e;
        den += ref[i] * ref[i];
    }
    if (isnan(num)) return INFINITY;
    return den > 0 ? sqrt(num / den) : sqrt(num / (double)(n ? n : 1));
}

double t_rel_rms_ff(const float *a, const float *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double e = (double)a[i] - (double)ref[i];
        num += e * e;
        den += (double)ref[i] * ref[i];
    }
    if (isnan(num)) return INFINITY;
    return den > 0 ? sqrt(num / den) : sqrt(num / (double)(n ? n : 1));
}

double t_max_rel(const float *a, const double *ref, size_t n) {
    double m = 0, r = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - ref[i]);
        if (isnan(e)) return INFINITY;
        if (e > m) m = e;
        if (fabs(ref[i]) > r) r = fabs(ref[i]);
    }
    return r > 0 ? m / r : m;
}

int t_all_finite(const float *a, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(a[i])) return 0;
    return 1;
}

double t_fd(t_lossfn f, void *ctx, double *x, size_t i, double h) {
    double x0 = x[i];
    x[i] = x0 + h;
    double fp = f(ctx);
    x[i] = x0 - h;
    double fm = f(ctx);
    x[i] = x0;
    return (fp - fm) / (2 * h);
}

#include "io/files.h"
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

void t_tmpdir(char *buf, size_t n) {
    snprintf(buf, n, "/tmp/dormouse-test-XXXXXX");
    if (!mkdtemp(buf)) { perror("mkdtemp"); abort(); }
}

void t_rmtree(const char *path) { dm_rmtree(path); }

int t_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

int t_run(const char *cmd, char *err, size_t errlen) {
    char errpath[] = "/tmp/dormouse-test-err-XXXXXX";
    int fd = mkstemp(errpath);
    if (fd < 0) { perror("mkstemp"); abort(); }
    fflush(stdout); /* else the child's copy of the buffer is written again */
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd, 2);
        freopen("/dev/null", "w", stdout);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (err && errlen) {
        lseek(fd, 0, SEEK_SET);
        ssize_t got = read(fd, err, errlen - 1);
        err[got > 0 ? got : 0] = 0;
    }
    close(fd);
    unlink(errpath);
    return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

int t_run_out(const char *cmd, const char *outpath, char *out, size_t n) {
    char full[8192];
    snprintf(full, sizeof full, "{ %s; } >%s 2>&1", cmd, outpath);
    int rc = t_run(full, NULL, 0);
    FILE *f = fopen(outpath, "r");
    size_t got = f ? fread(out, 1, n - 1, f) : 0;
    out[got] = 0;
    if (f) fclose(f);
    printf("  [%d] %s\n", rc, cmd);
    return rc;
}

char *t_read_text(const char *path) {
    char *t = t_slurp(path, NULL);
    if (!t) printf("  cannot read %s\n", path);
    return t;
}

char *t_slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0, got;
    char *buf = malloc(cap + 1);
    while (buf && (got = fread(buf + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) buf = realloc(buf, (cap *= 2) + 1);
    }
    fclose(f);
    if (!buf) return NULL;
    buf[len] = 0;
    if (n) *n = len;
    return buf;
}

int t_spit(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return 1;
    int ok = fwrite(data, 1, n, f) == n;
    return (fclose(f) == 0 && ok) ? 0 : 1;
}

int t_spawn(const char *cmd, const char *errpath) {
    char full[8192];
    snprintf(full, sizeof full, "exec %s", cmd);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen(errpath ? errpath : "/dev/null", "w", stderr) ||
            !freopen("/dev/null", "w", stdout))
            _exit(127);
        execl("/bin/sh", "sh", "-c", full, (char *)NULL);
        _exit(127);
    }
    return (int)pid;
}

int t_wait(int pid) {
    int status = 0;
    if (waitpid((pid_t)pid, &status, 0) < 0) return 127;
    return WIFSIGNALED(status) ? -WTERMSIG(status) : WEXITSTATUS(status);
}
