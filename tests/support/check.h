/* check.h — the test harness. Each TEST(name) in tests/test_*.c becomes one CTest case
 * (CMake reads the TEST( lines); `test_x name` runs one case, `test_x` runs all,
 * `test_x --list` lists them. A case fails when any CHECK fails; the process exits 1. */
#ifndef DM_CHECK_H
#define DM_CHECK_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef void (*t_fn)(void);
void t_register(const char *name, t_fn fn);
void t_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define TEST(name)                                                                   \
    static void name(void);                                                          \
    __attribute__((constructor)) static void name##_register(void) {                 \
        t_register(#name, name);                                                     \
    }                                                                                \
    static void name(void)

/* The running case cannot run on this machine (a CPU feature, a library it lacks): say
 * why and return from the case. It is reported "Skipped" (exit 77), and the test gate
 * lists it with the reason: never a silent pass. */
void t_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define CHECK(cond)                                                                  \
    do { if (!(cond)) t_fail(__FILE__, __LINE__, "CHECK(%s)", #cond); } while (0)
#define CHECKF(cond, ...)                                                            \
    do { if (!(cond)) t_fail(__FILE__, __LINE__, __VA_ARGS__); } while (0)

/* ---- data ---- */
void t_fill_normal(float *x, size_t n, uint64_t seed, float scale);
void t_fill_uniform(float *x, size_t n, uint64_t seed, float lo, float hi);
/* each of the rows [rows, d] of x scaled to unit L2 norm (x / sqrt(sum x^2 + 1e-6), the
 * sum in double): the delta core's normalized q and k */
void t_l2norm_rows(float *x, size_t rows, int d);
/* Q[r, c] (row-major, r >= c) with orthonormal columns: Gaussian from the generator seeded
 * (seed, stream), Gram-Schmidt twice */
void t_orthonormal_cols(double *Q, int r, int c, uint64_t seed, uint64_t stream);
void t_to_double(double *dst, const float *src, size_t n);
float *t_alloc(size_t n);   /* zeroed floats; aborts on OOM */
double *t_allocd(size_t n); /* zeroed doubles */

/* ---- comparisons ---- */
/* rms(a - ref) / rms(ref)  (absolute rms when ref is all zero) */
double t_rel_rms(const float *a, const double *ref, size_t n);
double t_rel_rms_ff(const float *a, const float *ref, size_t n);
/* max|a - ref| / max|ref| */
double t_max_rel(const float *a, const double *ref, size_t n);
int t_all_finite(const float *a, size_t n);

/* ---- finite differences ----
 * Central difference of f at x[i]: (f(x+h e_i) - f(x-h e_i)) / 2h, with x restored after.
 * f evaluates the loss (in double) from the current contents of x. */
typedef double (*t_lossfn)(void *ctx);
double t_fd(t_lossfn f, void *ctx, double *x, size_t i, double h);

/* ---- files and processes ---- */
/* A fresh directory under /tmp (path written into buf). */
void t_tmpdir(char *buf, size_t n);
/* rm -rf path */
void t_rmtree(const char *path);
int t_exists(const char *path);
/* The whole file as a NUL-terminated string (malloc'd); NULL (said on stdout) when it
 * cannot be read. */
char *t_read_text(const char *path);
/* Run `sh -c cmd`; returns the exit status (128+sig if killed by a signal) and the first
 * errlen-1 bytes of its stderr in err (when err != NULL). stdout goes to /dev/null. */
int t_run(const char *cmd, char *err, size_t errlen);
/* Run `sh -c cmd` with stdout and stderr both into outpath; returns the exit status and
 * the first n-1 bytes of that output in out (the command line is echoed to stdout). */
int t_run_out(const char *cmd, const char *outpath, char *out, size_t n);
/* Run `sh -c cmd`; check that it exits `code` (not by a signal) with exactly one line on
 * stderr, containing needle; that line into err when err != NULL. */
void t_expect(const char *cmd, int code, const char *needle, char *err, size_t errlen);
/* The whole file, malloc'd (NUL-terminated past *n); NULL when it cannot be read. */
char *t_slurp(const char *path, size_t *n);
/* Write n bytes to path (replacing it); 0 ok. */
int t_spit(const char *path, const void *data, size_t n);
/* Start `exec cmd` under sh in the background (so the pid is the command's own), its
 * stderr into errpath (/dev/null when NULL), its stdout to /dev/null; returns the pid. */
int t_spawn(const char *cmd, const char *errpath);
/* Wait for a t_spawn'ed process: its exit status, or minus the signal that killed it. */
int t_wait(int pid);

/* The tiny model and run of the command-line tests, as --set flags: a step takes a few
 * milliseconds. */
#define T_TINY "--set d_model=32 --set n_layer=1 --set n_head=2 --set head_dim=16 " \
               "--set gate_rank=8 --set batch_size=2 --set seq_len=32 --set eval_window=1024 " \
               "--set warmup_steps=1 --set log_every=1 --set threads=1"
#define T_CORPUS DM_SOURCE_DIR "/data/kjv.txt.gz" /* the bundled corpus */
/* The MPI launcher of the tests ("" in DM_MPIEXEC: this build has none; the test skips).
 * Under `make asan`, Open MPI's own allocations are not leaks of ours: its components
 * stay loaded and the stacks are unwound in full, so the suppressions can name them. */
#define T_MPIRUN                                                                         \
    DM_MPIEXEC " --allow-run-as-root --oversubscribe --mca mca_base_component_disable_dlclose 1" \
               " -x LSAN_OPTIONS=suppressions=" DM_SOURCE_DIR "/tests/fixtures/lsan_mpi.supp:print_suppressions=0" \
               " -x ASAN_OPTIONS=fast_unwind_on_malloc=0"

#endif
