/* test_backend.c — the backend object (ops/backend.h, docs/backends.md): cpu memory is host
 * memory; fenced memory faults outside the backend's calls and not inside them, and its
 * copies check their ranges; a model on fenced refuses host views and copies by tensor
 * name, and trains whole steps (forward, backward, Muon, AdamW) to the cpu's bits; the
 * execution policy the backend decides; the backend key. */
#define _DEFAULT_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "dormouse.h"
#include "model/host.h"
#include "model/model.h"
#include "ops/backend.h"
#include "ops/policy.h"
#include "optim/optim.h"

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

/* the signal a child dies of running fn(be, p), 0 when it exits normally */
static int copy_dies_of(void (*fn)(dm_backend *, float *), dm_backend *be, float *p) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGABRT, SIG_DFL);
        int devnull = open("/dev/null", O_WRONLY); /* the backend's one-line message */
        if (devnull >= 0) dup2(devnull, 2);
        fn(be, p);
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFSIGNALED(st) ? WTERMSIG(st) : 0;
}
static float host_buf[256];
static void past_end_to_host(dm_backend *be, float *p) {
    dm_backend_to_host(be, host_buf, p + 90, 11 * sizeof(float)); /* one float past 100 */
}
static void past_end_from_host(dm_backend *be, float *p) {
    dm_backend_from_host(be, p + 99, host_buf, 2 * sizeof(float));
}
static void host_as_source(dm_backend *be, float *p) {
    dm_backend_copy(be, p, host_buf, sizeof(float)); /* host memory is not the backend's */
}
static void zero_past_end(dm_backend *be, float *p) { dm_backend_zero(be, p + 50, 51 * 4); }
static void within(dm_backend *be, float *p) {
    dm_backend_to_host(be, host_buf, p, 100 * sizeof(float));
    dm_backend_from_host(be, p + 99, host_buf, sizeof(float));
    dm_backend_copy(be, p + 50, p, 50 * sizeof(float));
    dm_backend_zero(be, p + 100, 0);
}

/* The ops take a backend's memory as handles (ops/buffer.h): a call that hands them host
 * floats does not compile, and the same call with the explicit dm_bm() does. */
TEST(backend_memory_handles_refuse_host_floats) {
    static const char *const CALL[2] = {"dm_op_silu_fwd(&ops, y, x, 4)",
                                        "dm_op_silu_fwd(&ops, dm_bm(y), dm_bm(x), 4)"};
    for (int k = 0; k < 2; k++) {
        char d[256], cmd[4096], out[8192], path[512];
        t_tmpdir(d, sizeof d);
        snprintf(cmd, sizeof cmd,
                 "printf '#include \"ops/ops.h\"\\nvoid f(dm_ops *o);\\n"
                 "void f(dm_ops *o) {\\n    dm_ops ops = *o;\\n    float x[4] = {0}, y[4];\\n"
                 "    %s;\\n}\\n' > %s/call.c", CALL[k], d);
        CHECK(t_run(cmd, NULL, 0) == 0);
        snprintf(path, sizeof path, "%s/out", d);
        snprintf(cmd, sizeof cmd, "'%s' -std=c11 -fsyntax-only -Werror=incompatible-pointer-types "
                 "-I%s/include -I%s/src %s/call.c", DM_C_COMPILER, DM_SOURCE_DIR, DM_SOURCE_DIR,
                 d);
        int rc = t_run_out(cmd, path, out, sizeof out);
        if (k == 0)
            CHECKF(rc != 0 && strstr(out, "incompatible pointer type"),
                   "host floats passed as backend memory: exit %d\n%s", rc, out);
        else CHECKF(rc == 0, "the same call with dm_bm(): exit %d\n%s", rc, out);
        t_rmtree(d);
    }
}

/* fenced copies and zeroing stop (abort, as a device faults) when their range leaves the
 * allocation it starts in, or lies in host memory; the same calls in range run */
TEST(backend_fenced_copies_check_ranges) {
    char err[256];
    dm_backend *be = dm_backend_create(DM_BACKEND_FENCED, 0, err, sizeof err);
    CHECKF(be, "%s", err);
    float *p = dm_backend_alloc(be, 100 * sizeof(float)); /* a page is mapped, 400 bytes asked */
    CHECK(p != NULL);
    static void (*const BAD[])(dm_backend *, float *) = {past_end_to_host, past_end_from_host,
                                                        host_as_source, zero_past_end};
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        int sig = copy_dies_of(BAD[i], be, p);
        CHECKF(sig == SIGABRT, "out-of-range call %zu: signal %d, expected SIGABRT", i, sig);
    }
    CHECK(copy_dies_of(within, be, p) == 0);
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
    CHECK(dies_of(read_one, (volatile float *)(void *)dm_model_param_mem(b)) == SIGSEGV);
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

/* The execution policy: decided by the model's backend at its creation, from the config
 * and the machine, and what the op layer reads (its bf16 answer); fenced decides as cpu
 * does, under its own name. */
TEST(backend_policy_decided_once) {
    char err[256], line[512], js[2048];
    dm_config c = tiny(DM_BACKEND_CPU);
    c.gemm = DM_GEMM_OPENBLAS, c.kda_impl = DM_IMPL_REFERENCE, c.norm_impl = DM_IMPL_REFERENCE;
    c.precision = DM_PRECISION_FP32;
    dm_model *m = dm_model_create(&c, err, sizeof err);
    CHECKF(m, "%s", err);
    const dm_policy *p = dm_model_policy(m);
    CHECK(!strcmp(p->backend, "cpu") && p->threads >= 1 && p->gemm == DM_GEMM_OPENBLAS &&
          p->delta == DM_IMPL_REFERENCE && p->norm == DM_IMPL_REFERENCE &&
          p->chunk == c.chunk_size && !p->prec.matmul_bf16);
    CHECK(dm_ops_bf16_active(&m->ops) == p->prec.matmul_bf16 && m->ops.policy == p);
    dm_policy_describe(p, line, sizeof line);
    printf("  policy: %s\n", line);
    CHECK(strstr(line, "cpu, ") && strstr(line, "gemm openblas") && strstr(line, "delta reference") &&
          strstr(line, "norms reference") && strstr(line, "matmuls fp32"));
    dm_policy_json(p, js, sizeof js);
    CHECK(js[0] == '{' && strstr(js, "\"gemm\": \"openblas\"") && strstr(js, "\"delta\": \"reference\""));
    dm_model_free(m);
    /* the defaults on cpu and on fenced: chunked where it supports the model, oneDNN where
     * it runs; the same decision on both */
    dm_config d = tiny(DM_BACKEND_CPU), f = tiny(DM_BACKEND_FENCED);
    dm_model *a = dm_model_create(&d, err, sizeof err), *b = dm_model_create(&f, err, sizeof err);
    CHECKF(a && b, "%s", err);
    const dm_policy *pa = dm_model_policy(a), *pb = dm_model_policy(b);
    CHECK(pa->delta == DM_IMPL_CHUNKED && !pa->delta_why);
    CHECK((pa->gemm == DM_GEMM_ONEDNN) == (pa->gemm_why == NULL));
    CHECK(!strcmp(pb->backend, "fenced") && pa->threads == pb->threads && pa->gemm == pb->gemm &&
          pa->delta == pb->delta && pa->prec.matmul_bf16 == pb->prec.matmul_bf16 &&
          pa->prec.ns_bf16 == pb->prec.ns_bf16 && pa->ftz == pb->ftz);
    dm_model_free(a);
    dm_model_free(b);
}

/* every buffer of the optimizer's state, read through the backend's copies */
static float *opt_state(const dm_optim *o, dm_backend *be, size_t *n) {
    dm_optim_buf bufs[DM_OPTIM_MAX_BUFS];
    int nb = dm_optim_state(o, bufs, DM_OPTIM_MAX_BUFS);
    size_t all = 0, at = 0;
    for (int i = 0; i < nb; i++) all += bufs[i].n;
    float *h = t_alloc(all ? all : 1);
    for (int i = 0; i < nb; i++) {
        dm_backend_to_host(be, h + at, bufs[i].data, bufs[i].n * sizeof(float));
        at += bufs[i].n;
    }
    *n = all;
    return h;
}

/* Whole training steps on fenced — forward, backward, the gradient norm, AdamW and Muon
 * with head-wise Newton-Schulz and the sphere or Stiefel retraction (and with NorMuon and
 * the cautious decay), one step in verify
 * mode — with the host never touching its memory (it faults outside the backend's calls):
 * parameters, gradients, every optimizer state buffer and the verify maximum equal the
 * cpu's bit for bit, step by step. */
TEST(backend_fenced_training_steps_match_cpu) {
    char err[256];
    for (int retract = 0; retract < 3; retract++) {
        dm_config cc = tiny(DM_BACKEND_CPU), cf = tiny(DM_BACKEND_FENCED);
        cc.retract = cf.retract = retract ? DM_RETRACT_STIEFEL : DM_RETRACT_SPHERE;
        cc.n_layer = cf.n_layer = 2;
        if (retract == 2) { /* NorMuon and the cautious decay */
            cc.muon_norm = cf.muon_norm = DM_MUON_NORM_NEURON;
            cc.cautious_wd = cf.cautious_wd = 1;
            cc.weight_decay = cf.weight_decay = 0.5f;
        }
        dm_model *a = dm_model_create(&cc, err, sizeof err), *b = dm_model_create(&cf, err, sizeof err);
        CHECKF(a && b, "%s", err);
        dm_optim *oa = a ? dm_optim_create(a, &cc, err, sizeof err) : NULL;
        dm_optim *ob = b ? dm_optim_create(b, &cf, err, sizeof err) : NULL;
        CHECKF(oa && ob, "%s", err);
        if (!oa || !ob) return;
        size_t np = dm_model_num_params(a);
        float *pa = t_alloc(np), *pb = t_alloc(np);
        uint8_t tok[2 * 33];
        for (int step = 0; step < 3; step++) {
            for (size_t i = 0; i < sizeof tok; i++) tok[i] = (uint8_t)(i * 37 + 11 * step + 5);
            a->ops.verify = b->ops.verify = step == 1; /* verify mode reads fenced by copies */
            float la = dm_model_forward(a, tok, 2, 32, NULL), lb = dm_model_forward(b, tok, 2, 32, NULL);
            dm_model_zero_grad(a), dm_model_zero_grad(b);
            dm_model_backward(a), dm_model_backward(b);
            dm_model_grads_to_host(a, pa);
            dm_model_grads_to_host(b, pb);
            CHECKF(la == lb && !memcmp(pa, pb, np * sizeof(float)),
                   "step %d: loss %.9g vs %.9g, or the gradients differ", step, la, lb);
            double na = dm_optim_step(oa, a, step), nb = dm_optim_step(ob, b, step);
            CHECKF(na == nb, "step %d: grad norm %.17g vs %.17g", step, na, nb);
            dm_model_params_to_host(a, pa);
            dm_model_params_to_host(b, pb);
            CHECKF(!memcmp(pa, pb, np * sizeof(float)), "step %d (%s): the parameters differ",
                   step, retract ? "stiefel" : "sphere");
            size_t sa, sb;
            float *xa = opt_state(oa, dm_model_backend(a), &sa);
            float *xb = opt_state(ob, dm_model_backend(b), &sb);
            CHECKF(sa == sb && sa > 2 * np && !memcmp(xa, xb, sa * sizeof(float)),
                   "step %d: the optimizer state differs (%zu vs %zu floats)", step, sa, sb);
            free(xa), free(xb);
            char wa[64], wb[64];
            double va = dm_ops_verify_take(&a->ops, wa, sizeof wa);
            double vb = dm_ops_verify_take(&b->ops, wb, sizeof wb);
            CHECKF(va == vb && !strcmp(wa, wb) && (step == 1 ? va >= 0 && va <= DM_VERIFY_BOUND
                                                             : va == -1),
                   "step %d: verify %.3g (%s) vs %.3g (%s)", step, va, wa, vb, wb);
        }
        /* it moved: the weights are not the init's */
        dm_model *fresh = dm_model_create(&cc, err, sizeof err);
        float *p0 = t_alloc(np);
        dm_model_params_to_host(fresh, p0);
        CHECK(memcmp(p0, pa, np * sizeof(float)) != 0);
        dm_model_free(fresh);
        free(p0), free(pa), free(pb);
        dm_optim_free(oa), dm_optim_free(ob);
        dm_model_free(a), dm_model_free(b);
    }
}
