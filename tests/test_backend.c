/* test_backend.c — the backend object (ops/backend.h, docs/backends.md): cpu memory is host
 * memory; fenced memory faults outside the backend's calls and not inside them; a model
 * on fenced refuses host views and copies by tensor name; the backend key. */
#define _DEFAULT_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "dormouse.h"
#include "model/host.h"
#include "ops/backend.h"

/* the signal a child dies of running fn(p), 0 when it exits normally */
static int dies_of(void (*fn)(volatile float *), volatile float *p) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGSEGV, SIG_DFL); /* die of it, whatever handler a sanitizer installed */
        fn(p);
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFSIGNALED(st) ? WTERMSIG(st) : 0;
}
static void read_one(volatile float *p) { (void)p[3]; }
static void write_one(volatile float *p) { p[3] = 1.0f; }

TEST(backend_cpu_is_host_memory) {
    char err[256];
    dm_backend *be = dm_backend_create(DM_BACKEND_AUTO, 0, err, sizeof err);
    CHECKF(be, "%s", err);
    CHECK(!strcmp(be->name, "cpu") && be->kind == DM_BACKEND_CPU && be->mem == DM_MEM_HOST);
    float *p = dm_backend_alloc(be, 1000 * sizeof(float));
    CHECK(p && (uintptr_t)p % 64 == 0);
    int zero = 1;
    for (int i = 0; i < 1000; i++) zero &= p[i] == 0.0f;
    CHECK(zero);
    CHECK(dm_backend_host_view(be, p) == p);
    float h[4] = {1, 2, 3, 4}, back[4] = {0};
    dm_backend_from_host(be, p + 10, h, sizeof h);
    dm_backend_copy(be, p + 20, p + 10, sizeof h);
    dm_backend_to_host(be, back, p + 20, sizeof back);
    CHECK(!memcmp(h, back, sizeof h) && p[12] == 3.0f);
    float *m = dm_backend_map(be, p, sizeof h, 1);
    CHECK(m == p); /* a view: no copy */
    dm_backend_unmap(be, p, m, sizeof h, 1);
    dm_backend_release(be, p);
    dm_backend_free(be);
}

TEST(backend_fenced_faults_outside_its_calls) {
    char err[256];
    dm_backend *be = dm_backend_create(DM_BACKEND_FENCED, 0, err, sizeof err);
    CHECKF(be, "%s", err);
    CHECK(!strcmp(be->name, "fenced") && be->mem == DM_MEM_HOST);
    float *p = dm_backend_alloc(be, 5000 * sizeof(float));
    CHECK(p != NULL);
    CHECK(dm_backend_host_view(be, p) == NULL); /* refused */
    int sr = dies_of(read_one, p), sw = dies_of(write_one, p);
    CHECKF(sr == SIGSEGV && sw == SIGSEGV, "a read died of %d, a write of %d (SIGSEGV %d)", sr,
           sw, SIGSEGV);
    /* inside the backend's window (nested) the same accesses work */
    dm_backend_enter(be);
    dm_backend_enter(be);
    p[3] = 7.0f;
    dm_backend_leave(be);
    CHECK(p[3] == 7.0f && p[4999] == 0.0f);
    dm_backend_leave(be);
    CHECK(dies_of(read_one, p) == SIGSEGV);
    /* the copies open it themselves; a map is a copy */
    float h[3] = {1, 2, 3}, back[3] = {0};
    dm_backend_from_host(be, p + 100, h, sizeof h);
    dm_backend_to_host(be, back, p + 100, sizeof back);
    CHECK(!memcmp(h, back, sizeof h));
    float *m = dm_backend_map(be, p + 100, sizeof h, 1);
    CHECK(m && m != p + 100 && m[2] == 3.0f);
    m[0] = 9.0f;
    dm_backend_unmap(be, p + 100, m, sizeof h, 1);
    dm_backend_to_host(be, back, p + 100, sizeof back);
    CHECK(back[0] == 9.0f);
    dm_backend_zero(be, p + 100, sizeof h);
    dm_backend_to_host(be, back, p + 100, sizeof back);
    CHECK(back[0] == 0.0f && back[2] == 0.0f);
    /* an allocation made inside the window is fenced when it closes */
    dm_backend_enter(be);
    float *q = dm_backend_alloc(be, 16);
    q[0] = 1.0f;
    dm_backend_leave(be);
    CHECK(dies_of(read_one, q) == SIGSEGV);
    dm_backend_release(be, q);
    dm_backend_release(be, p);
    dm_backend_free(be);
}

static dm_config tiny(int backend) {
    dm_config c;
    dm_config_default(&c);
    c.d_model = 64, c.n_layer = 1, c.n_head = 2, c.head_dim = 32, c.gate_rank = 16;
    c.backend = backend;
    return c;
}

TEST(backend_fenced_model_copies_by_name) {
    char err[256];
    dm_config cc = tiny(DM_BACKEND_CPU), cf = tiny(DM_BACKEND_FENCED);
    dm_model *a = dm_model_create(&cc, err, sizeof err), *b = dm_model_create(&cf, err, sizeof err);
    CHECKF(a && b, "%s", err);
    CHECK(!strcmp(dm_model_backend_name(a), "cpu") && !strcmp(dm_model_backend_name(b), "fenced"));
    CHECK(dm_model_params(a) != NULL && dm_model_params(b) == NULL && dm_model_grads(b) == NULL);
    CHECK(dies_of(read_one, dm_model_param_mem(b)) == SIGSEGV);
    size_t np = dm_model_num_params(a);
    float *pa = t_alloc(np), *pb = t_alloc(np);
    dm_model_params_to_host(a, pa);
    dm_model_params_to_host(b, pb);
    CHECK(!memcmp(pa, pb, np * sizeof(float))); /* the same seeded init on both */
    const dm_tensor *t = dm_model_find(b, "layers.0.mixer.w_q");
    float *w = t_alloc(t->numel);
    CHECK(dm_model_get(b, t->name, w, t->numel, err, sizeof err) == 0);
    CHECK(!memcmp(w, pa + t->offset, t->numel * sizeof(float)));
    w[5] = 0.25f;
    CHECK(dm_model_set(b, t->name, w, t->numel, err, sizeof err) == 0);
    dm_model_params_to_host(b, pb);
    CHECK(pb[t->offset + 5] == 0.25f && pb[t->offset + 4] == pa[t->offset + 4]);
    CHECK(dm_model_get(b, "no.such", w, 1, err, sizeof err) == 1 && strstr(err, "no.such"));
    CHECK(dm_model_set(b, t->name, w, t->numel - 1, err, sizeof err) == 1 &&
          strstr(err, "values, not"));
    /* a forward and backward on fenced: the same loss and gradients as on cpu */
    dm_model_set(a, t->name, w, t->numel, err, sizeof err);
    uint8_t tok[2 * 17];
    for (size_t i = 0; i < sizeof tok; i++) tok[i] = (uint8_t)(i * 37 + 11);
    float la = dm_model_forward(a, tok, 2, 16, NULL), lb = dm_model_forward(b, tok, 2, 16, NULL);
    dm_model_zero_grad(a), dm_model_zero_grad(b);
    dm_model_backward(a), dm_model_backward(b);
    dm_model_grads_to_host(a, pa);
    dm_model_grads_to_host(b, pb);
    CHECKF(la == lb && !memcmp(pa, pb, np * sizeof(float)), "loss %.9g vs %.9g", la, lb);
    free(w), free(pa), free(pb);
    dm_model_free(a);
    dm_model_free(b);
}

TEST(backend_key) {
    dm_config c;
    char err[256], v[32];
    dm_config_default(&c);
    CHECK(c.backend == DM_BACKEND_AUTO && !dm_config_get(&c, "backend", v, sizeof v) &&
          !strcmp(v, "auto"));
    CHECK(!dm_config_set(&c, "backend", "fenced", err, sizeof err) && c.backend == DM_BACKEND_FENCED);
    CHECK(dm_config_set(&c, "backend", "tpu", err, sizeof err) != 0);
    CHECKF(strstr(err, "backend") && strstr(err, "auto|cpu|fenced|cuda"), "%s", err);
    CHECK(!strcmp(dm_backend_name(DM_BACKEND_AUTO), "cpu") && dm_backend_name(99) == NULL);
    CHECK(dm_backend_create(99, 0, err, sizeof err) == NULL && strstr(err, "backend"));
}

/* backend=cuda: refused at model creation with the probe's reason (on this build and
 * machine: no CUDA, no driver, no device, ... or a device with no cuda backend written
 * yet); auto takes the CPU and says why not cuda; `device` picks the index */
TEST(backend_cuda_refused_with_reason) {
    char err[512], note[512];
    dm_config c = tiny(DM_BACKEND_CUDA);
    c.device = 3;
    CHECK(dm_model_create(&c, err, sizeof err) == NULL);
    const char *why = dm_backend_cuda_missing(3);
    CHECKF(why && why[0] && strstr(err, "backend=cuda (device=3)") && strstr(err, why) &&
               strstr(err, "use backend=cpu"), "%s", err);
    printf("  backend=cuda here: %s\n", err);
    CHECK(!dm_config_set(&c, "backend", "cuda", err, sizeof err) && c.backend == DM_BACKEND_CUDA);
    CHECK(!dm_config_set(&c, "device", "1", err, sizeof err) && c.device == 1);
    CHECK(dm_config_set(&c, "device", "-1", err, sizeof err) != 0);
    CHECK(!strcmp(dm_backend_name(DM_BACKEND_CUDA), "cuda"));
    dm_backend_choice(DM_BACKEND_AUTO, 0, note, sizeof note);
    CHECKF(strstr(note, "backend: cpu (auto; not cuda: ") && strstr(note, dm_backend_cuda_missing(0)),
           "%s", note);
    CHECK(dm_backend_choice(DM_BACKEND_CPU, 0, note, sizeof note)[0] == 0);
}
