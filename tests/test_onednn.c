/* test_onednn.c — the oneDNN GEMM backend (src/backends/cpu/kernels/onednn.c) under
 * signals: a handled signal never runs on a stack that oneDNN's kernel moved into the heap.
 *
 * oneDNN's JIT f32 GEMM kernel points the stack pointer at a heap workspace while it runs
 * when K is more than it packs on the stack; a signal handled there has its frame written
 * over the heap before the workspace (a SIGTERM to training corrupted malloc's chunk
 * headers and oneDNN's memory objects that way). The backend keeps such signals off the
 * thread for the call; this case runs long products under a fast timer signal and checks
 * that every handler frame lies on the thread's own stack, and that the products are
 * right. */
#define _GNU_SOURCE
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "base/clock.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/onednn.h"

static uintptr_t stack_lo, stack_hi;
static volatile sig_atomic_t n_signals, n_off_stack;

/* an ordinary handler (no alternate stack), as a program's SIGTERM handler is */
static void on_alarm(int sig) {
    (void)sig;
    uintptr_t sp = (uintptr_t)__builtin_frame_address(0); /* not a local: ASan may move those */
    n_signals++;
    if (sp < stack_lo || sp >= stack_hi) n_off_stack++;
}

TEST(onednn_product_keeps_signals_on_the_stack) {
    /* a product oneDNN's JIT kernel runs with its stack in a heap workspace (K large) */
    enum { M = 64, N = 64, Kd = 2048 };
    const char *why = NULL;
    dm_onednn *d = dm_onednn_create(&why);
    if (!d) {
        t_skip("oneDNN cannot start: %s", why);
        return;
    }
    omp_set_num_threads(1); /* the main thread, whose stack bounds are known */
    why = dm_onednn_supports(d, 0, 1, M, N, Kd, Kd, Kd, N, 1.0f, 0.0f);
    if (why) {
        t_skip("oneDNN declines a %dx%dx%d product on this CPU: %s", M, N, Kd, why);
        dm_onednn_free(d);
        return;
    }
    pthread_attr_t at;
    void *base;
    size_t size;
    CHECK(pthread_getattr_np(pthread_self(), &at) == 0);
    CHECK(pthread_attr_getstack(&at, &base, &size) == 0);
    pthread_attr_destroy(&at);
    stack_lo = (uintptr_t)base;
    stack_hi = stack_lo + size;

    float *A = malloc(sizeof(float) * M * Kd), *B = malloc(sizeof(float) * N * Kd);
    float *C = malloc(sizeof(float) * M * N), *R = malloc(sizeof(float) * M * N);
    t_fill_uniform(A, (size_t)M * Kd, 1, -1.0f, 1.0f);
    t_fill_uniform(B, (size_t)N * Kd, 2, -1.0f, 1.0f);
    for (int i = 0; i < M; i++) /* the reference, in double */
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < Kd; k++) s += (double)A[(size_t)i * Kd + k] * B[(size_t)j * Kd + k];
            R[(size_t)i * N + j] = (float)s;
        }

    struct sigaction sa, old_sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigemptyset(&sa.sa_mask);
    CHECK(sigaction(SIGALRM, &sa, &old_sa) == 0);
    struct itimerval fast = {{0, 50}, {0, 50}}, off = {{0, 0}, {0, 0}};
    CHECK(setitimer(ITIMER_REAL, &fast, NULL) == 0);
    double worst = 0, t0 = dm_now();
    int runs = 0;
    /* about a second, or until a handler ran off the stack */
    while (dm_now() - t0 < 1.0 && !n_off_stack) {
        dm_onednn_gemm(d, 0, 1, M, N, Kd, 1.0f, A, Kd, B, Kd, 0.0f, C, N);
        runs++;
        for (int i = 0; i < M * N; i++) {
            double e = fabs((double)C[i] - R[i]);
            if (e > worst) worst = e;
        }
    }
    CHECK(setitimer(ITIMER_REAL, &off, NULL) == 0);
    sigaction(SIGALRM, &old_sa, NULL);
    printf("  %d products (%s), %d signals, %d handled off the thread's stack, worst error "
           "%.3g\n", runs, dm_onednn_impl(d), (int)n_signals, (int)n_off_stack, worst);
    CHECKF(n_signals >= 100, "only %d signals arrived: the case did not test", (int)n_signals);
    CHECKF(n_off_stack == 0, "%d signal handlers ran off the thread's stack (in the heap)",
           (int)n_off_stack);
    CHECKF(worst < 1e-3 * sqrt((double)Kd), "products off by %g", worst);
    free(A);
    free(B);
    free(C);
    free(R);
    dm_onednn_free(d);
}

/* A product the backend cannot run aborts with one line on stderr that names why, the
 * shape, the slot and the threads (a report a user can send), never a bare abort. Here: a
 * product with K = 0, which prepare() refuses, run in a child. */
TEST(onednn_failure_names_the_product) {
    const char *why = NULL;
    dm_onednn *d = dm_onednn_create(&why);
    if (!d) {
        t_skip("oneDNN cannot start: %s", why);
        return;
    }
    int fd[2];
    CHECK(pipe(fd) == 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 2);
        close(fd[0]);
        float A[12] = {0}, B[12] = {0}, C[12] = {0};
        dm_onednn_gemm(d, 0, 1, 3, 4, 0, 1.0f, A, 1, B, 1, 0.0f, C, 4);
        _exit(0); /* not reached: the product aborts */
    }
    close(fd[1]);
    char err[2048] = "";
    size_t got = 0;
    for (ssize_t k; got + 1 < sizeof err && (k = read(fd[0], err + got, sizeof err - 1 - got)) > 0;)
        got += (size_t)k;
    err[got] = 0;
    close(fd[0]);
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    printf("  %s", err);
    CHECKF(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, "the child ended with status %#x",
           status);
    CHECKF(!strncmp(err, "dormouse: internal error: an empty product, for the f32 matmul ", 63) &&
               strstr(err, " M 3 N 4 K 0 ") && strstr(err, " on slot 0 of ") &&
               strstr(err, " thread 0 of 1 ") && strchr(err, '\n') == err + got - 1,
           "stderr: %s", err);
    dm_onednn_free(d);
}
