/* backend_step.c — the cuda backend (src/backends/cuda) on the CUDA emulator: whole
 * training steps of a tiny model on the emulated GPU against the cpu backend. The program
 * carries the CUDA module's code (the kernels translated for the emulator, the backend, its
 * entry) and hands its table to the loader before any test runs (install.c), so backend=cuda makes a
 * model whose memory is emulated device memory and whose ops run the CUDA kernels.
 * ctest runs each case in the emulator's three barrier orders (docs/emulator.md). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "dormouse.h"
#include "model/host.h"
#include "model/model.h"
#include "jobs/step.h"
#include "kernels/cuda/cuda.h"
#include "ops/backend.h"
#include "optim/optim.h"

/* the emulator's count of the host's waits for the device (tests/cuda_emu/emu_runtime.cpp) */
long dm_emu_host_waits(void);

static dm_config tiny(int backend, int mixer) {
    dm_config c;
    dm_config_default(&c);
    c.d_model = 32, c.n_layer = 2, c.n_head = 2, c.head_dim = 16, c.gate_rank = 8;
    c.mixer = mixer;
    c.precision = DM_PRECISION_FP32;
    c.backend = backend;
    return c;
}

/* relative RMS difference of a against the reference r over n floats */
static double rel_rms(const float *a, const float *r, size_t n) {
    double d = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        double e = (double)a[i] - r[i];
        d += e * e;
        s += (double)r[i] * r[i];
    }
    return s > 0 ? sqrt(d / s) : sqrt(d);
}

/* The largest excess of a gradient's relative RMS difference (a against the cpu's r) over
 * its bound, and the tensor: the bound of a tensor is DM_VERIFY_BOUND, or where the cpu's
 * own two delta cores (chunked r, reference r2) differ more on it (a few-element sum with
 * cancellation: GDN's per-head A_log and dt_bias), that difference. */
static double worst_tensor(const dm_model *m, const float *a, const float *r, const float *r2,
                           const char **name, double *err, double *bound) {
    double worst = -1;
    *name = "";
    for (int i = 0; i < dm_model_num_tensors(m); i++) {
        const dm_tensor *t = dm_model_tensor(m, i);
        double e = rel_rms(a + t->offset, r + t->offset, t->numel);
        double b = fmax(DM_VERIFY_BOUND, rel_rms(r2 + t->offset, r + t->offset, t->numel));
        if (!(e / b <= worst)) worst = e / b, *name = t->name, *err = e, *bound = b;
    }
    return worst;
}

/* the models of configs c[0..2] made with c[0]'s weights in all three (NULLs when one
 * cannot be made: the failure checked) */
static void three_models(const dm_config *c, dm_model *m[3]) {
    char err[512];
    for (int i = 0; i < 3; i++) {
        m[i] = dm_model_create(&c[i], err, sizeof err);
        CHECKF(m[i], "%s", err);
    }
    if (!m[0] || !m[1] || !m[2]) {
        for (int i = 0; i < 3; i++) dm_model_free(m[i]), m[i] = NULL;
        return;
    }
    size_t np = dm_model_num_params(m[0]);
    float *p = t_alloc(np);
    dm_model_params_to_host(m[0], p);
    dm_model_params_from_host(m[1], p);
    dm_model_params_from_host(m[2], p);
    free(p);
}

/* one forward and backward of each model of m[3] on the same batch: the losses into l, the
 * gradients into g[i] (np floats each, freshly allocated) */
static void step3(dm_model *const m[3], const void *in, int B, int T, float l[3], float *g[3]) {
    for (int i = 0; i < 3; i++) l[i] = dm_model_forward(m[i], in, B, T, NULL);
    for (int i = 0; i < 3; i++) {
        dm_model_zero_grad(m[i]);
        dm_model_backward(m[i]);
        g[i] = t_alloc(dm_model_num_params(m[i]));
        dm_model_grads_to_host(m[i], g[i]);
    }
}

static void tokens(uint8_t *tok, size_t n, int step) {
    for (size_t i = 0; i < n; i++) tok[i] = (uint8_t)(i * 37 + 11 * step + 5);
}

/* One forward and backward on the emulated GPU and on the cpu from the same weights, for
 * the KDA and the GDN mixer: the loss and the whole gradient within DM_VERIFY_BOUND (1e-5)
 * relative, and each parameter tensor's gradient within it too, or where the cpu's own
 * chunked and reference cores differ more on a tensor, within that; the calls ran on the
 * cuda backend's implementations (cuBLASLt products, the chunked delta core both ways). */
TEST(cuda_backend_step_matches_cpu) {
    const int B = 2, T = 24;
    for (int mixer = 0; mixer < 2; mixer++) {
        dm_config cc = tiny(DM_BACKEND_CPU, mixer ? DM_MIXER_GDN : DM_MIXER_KDA);
        dm_config cs[3] = {cc, tiny(DM_BACKEND_CUDA, cc.mixer), cc};
        cs[2].kda_impl = DM_IMPL_REFERENCE;
        dm_model *m[3];
        three_models(cs, m);
        dm_model *a = m[0], *b = m[1], *r = m[2];
        if (!a) return;
        CHECK(!strcmp(dm_model_backend_name(b), "cuda") && dm_model_params(b) == NULL);
        size_t np = dm_model_num_params(a);
        float *pa = t_alloc(np), *pb = t_alloc(np), *pr = t_alloc(np);
        uint8_t tok[2 * 25];
        tokens(tok, sizeof tok, 0);
        float la = dm_model_forward(a, tok, B, T, NULL), lb = dm_model_forward(b, tok, B, T, NULL);
        dm_model_forward(r, tok, B, T, NULL);
        dm_model_zero_grad(a), dm_model_zero_grad(b), dm_model_zero_grad(r);
        dm_model_backward(a), dm_model_backward(b), dm_model_backward(r);
        dm_model_grads_to_host(a, pa);
        dm_model_grads_to_host(b, pb);
        dm_model_grads_to_host(r, pr);
        const char *name;
        double e = 0, bound = 0, worst = worst_tensor(a, pb, pa, pr, &name, &e, &bound);
        double all = rel_rms(pb, pa, np);
        double lrel = fabs((double)lb - la) / fabs((double)la);
        printf("  %s: loss cpu %.9g cuda %.9g (rel %.2g); all gradients rel RMS %.2g; worst "
               "tensor %s rel RMS %.2g (bound %.2g)\n",
               mixer ? "gdn" : "kda", la, lb, lrel, all, name, e, bound);
        CHECKF(isfinite(lb) && lrel <= DM_VERIFY_BOUND, "loss %.9g vs %.9g", lb, la);
        CHECKF(all <= DM_VERIFY_BOUND, "the gradients: relative RMS %.3g over %g", all,
               DM_VERIFY_BOUND);
        CHECKF(worst <= 1, "gradient %s: relative RMS %.3g over its bound %.3g", name, e, bound);
        char rep[4096];
        dm_model_dispatch_table(b, rep, sizeof rep);
        const char *db = strstr(rep, "delta.bwd"), *nl = db ? strchr(db, '\n') : NULL;
        const char *ch = db ? strstr(db, "chunked") : NULL;
        CHECKF(strstr(rep, "cublaslt") && ch && (!nl || ch < nl) && !strstr(rep, "serial"),
               "the delta core's backward did not run chunked:\n%s", rep);
        free(pa), free(pb), free(pr);
        dm_model_free(a), dm_model_free(b), dm_model_free(r);
    }
}

/* A model of tokens (a vocabulary of 300: ids of 2 bytes, the head and the cross-entropy
 * fused over chunks of rows): one forward and backward on the emulated GPU against the
 * cpu from the same weights, the loss and the whole gradient within DM_VERIFY_BOUND; the
 * embedding, the fused head and its cross-entropy ran on the cuda backend. */
TEST(cuda_backend_token_step_matches_cpu) {
    char err[512];
    const int B = 2, T = 24, V = 300;
    dm_config cc = tiny(DM_BACKEND_CPU, DM_MIXER_KDA);
    cc.vocab = V;
    dm_config cg = cc;
    cg.backend = DM_BACKEND_CUDA;
    dm_model *a = dm_model_create(&cc, err, sizeof err);
    CHECKF(a, "%s", err);
    dm_model *b = dm_model_create(&cg, err, sizeof err);
    CHECKF(b, "%s", err);
    if (!a || !b) return;
    size_t np = dm_model_num_params(a);
    float *pa = t_alloc(np), *pb = t_alloc(np);
    dm_model_params_to_host(a, pa);
    dm_model_params_from_host(b, pa);
    uint16_t ids[2 * 25];
    for (int i = 0; i < 2 * 25; i++) ids[i] = (uint16_t)((i * 97 + 13) % V);
    ids[3] = V - 1;
    float la = dm_model_forward(a, ids, B, T, NULL), lb = dm_model_forward(b, ids, B, T, NULL);
    dm_model_zero_grad(a), dm_model_zero_grad(b);
    dm_model_backward(a), dm_model_backward(b);
    dm_model_grads_to_host(a, pa);
    dm_model_grads_to_host(b, pb);
    double all = rel_rms(pb, pa, np), lrel = fabs((double)lb - la) / fabs((double)la);
    printf("  vocab %d: loss cpu %.9g cuda %.9g (rel %.2g); all gradients rel RMS %.2g\n", V, la,
           lb, lrel, all);
    CHECKF(isfinite(lb) && lrel <= DM_VERIFY_BOUND, "loss %.9g vs %.9g", lb, la);
    CHECKF(all <= DM_VERIFY_BOUND, "the gradients: relative RMS %.3g over %g", all,
           DM_VERIFY_BOUND);
    const dm_tensor *e = dm_model_find(a, "embed");
    CHECKF(e && rel_rms(pb + e->offset, pa + e->offset, e->numel) <= DM_VERIFY_BOUND,
           "the embedding's gradient");
    char rep[4096];
    dm_model_dispatch_table(b, rep, sizeof rep);
    CHECKF(strstr(rep, "head_xent.fwd") && strstr(rep, "head_xent.bwd") &&
               strstr(rep, "embed.bwd"),
           "the fused head did not run on cuda:\n%s", rep);
    free(pa), free(pb);
    dm_model_free(a), dm_model_free(b);
}

/* three steps of training: forward, backward, gradient norm, AdamW and Muon (momentum,
 * head-wise Newton-Schulz, update, sphere retraction) on the emulated GPU; returns the
 * parameters after them (host copy) and the losses */
static float *train3(const dm_config *c, float loss[3], double gnorm[3]) {
    char err[512];
    dm_model *m = dm_model_create(c, err, sizeof err);
    CHECKF(m, "%s", err);
    dm_optim *o = m ? dm_optim_create(m, c, err, sizeof err) : NULL;
    CHECKF(o, "%s", err);
    if (!o) return NULL;
    uint8_t tok[2 * 17];
    for (int step = 0; step < 3; step++) {
        tokens(tok, sizeof tok, step);
        loss[step] = dm_model_forward(m, tok, 2, 16, NULL);
        dm_model_zero_grad(m);
        dm_model_backward(m);
        gnorm[step] = dm_optim_step(o, m, step);
    }
    size_t np = dm_model_num_params(m);
    float *p = t_alloc(np);
    dm_model_params_to_host(m, p);
    dm_optim_free(o);
    dm_model_free(m);
    return p;
}

/* Muon on the emulated GPU: three steps twice give the same bits (losses, gradient
 * norms, parameters); the weights moved; the losses track the cpu's. */
TEST(cuda_backend_muon_bitwise_run_to_run) {
    dm_config cg = tiny(DM_BACKEND_CUDA, DM_MIXER_KDA), cc = tiny(DM_BACKEND_CPU, DM_MIXER_KDA);
    cg.n_layer = cc.n_layer = 1;
    cg.retract = cc.retract = DM_RETRACT_SPHERE;
    CHECK(cg.optimizer == DM_OPT_MUON);
    float l1[3], l2[3], lc[3];
    double g1[3], g2[3], gc[3];
    float *p1 = train3(&cg, l1, g1), *p2 = train3(&cg, l2, g2), *pc = train3(&cc, lc, gc);
    if (!p1 || !p2 || !pc) return;
    char err[256];
    dm_model *m = dm_model_create(&cc, err, sizeof err);
    size_t np = dm_model_num_params(m);
    float *p0 = t_alloc(np);
    dm_model_params_to_host(m, p0);
    CHECKF(!memcmp(l1, l2, sizeof l1) && !memcmp(g1, g2, sizeof g1) &&
               !memcmp(p1, p2, np * sizeof(float)),
           "two runs differ: losses %.9g %.9g %.9g vs %.9g %.9g %.9g", l1[0], l1[1], l1[2], l2[0],
           l2[1], l2[2]);
    CHECK(memcmp(p0, p1, np * sizeof(float)) != 0);
    for (int s = 0; s < 3; s++) {
        printf("  step %d: loss cpu %.9g cuda %.9g, grad norm cpu %.9g cuda %.9g\n", s, lc[s],
               l1[s], gc[s], g1[s]);
        CHECKF(fabs((double)l1[s] - lc[s]) <= DM_VERIFY_BOUND * fabs((double)lc[s]),
               "step %d: loss %.9g vs the cpu's %.9g", s, l1[s], lc[s]);
    }
    free(p0), free(p1), free(p2), free(pc);
    dm_model_free(m);
}

/* Muon with the Stiefel retraction every step on the emulated GPU (the iteration decided
 * per slice on the device): three steps' losses and norms within DM_VERIFY_BOUND of the
 * cpu's, and twice the same bits. */
TEST(cuda_backend_stiefel_matches_cpu) {
    dm_config cg = tiny(DM_BACKEND_CUDA, DM_MIXER_KDA), cc = tiny(DM_BACKEND_CPU, DM_MIXER_KDA);
    cg.n_layer = cc.n_layer = 1;
    cg.retract = cc.retract = DM_RETRACT_STIEFEL;
    float l1[3], l2[3], lc[3];
    double g1[3], g2[3], gc[3];
    float *p1 = train3(&cg, l1, g1), *p2 = train3(&cg, l2, g2), *pc = train3(&cc, lc, gc);
    if (!p1 || !p2 || !pc) return;
    CHECK(!memcmp(l1, l2, sizeof l1) && !memcmp(g1, g2, sizeof g1));
    for (int s = 0; s < 3; s++) {
        printf("  step %d: loss cpu %.9g cuda %.9g, grad norm cpu %.9g cuda %.9g\n", s, lc[s],
               l1[s], gc[s], g1[s]);
        CHECKF(fabs((double)l1[s] - lc[s]) <= DM_VERIFY_BOUND * fabs((double)lc[s]) &&
                   fabs(g1[s] - gc[s]) <= DM_VERIFY_BOUND * gc[s],
               "step %d: loss %.9g vs %.9g, norm %.9g vs %.9g", s, l1[s], lc[s], g1[s], gc[s]);
    }
    free(p1), free(p2), free(pc);
}

/* NorMuon with cautious weight decay on the emulated GPU: three steps track the cpu's
 * losses, and two runs give the same bits */
TEST(cuda_backend_normuon_cautious_matches_cpu) {
    dm_config cg = tiny(DM_BACKEND_CUDA, DM_MIXER_KDA), cc = tiny(DM_BACKEND_CPU, DM_MIXER_KDA);
    cg.n_layer = cc.n_layer = 1;
    cg.muon_norm = cc.muon_norm = DM_MUON_NORM_NEURON;
    cg.cautious_wd = cc.cautious_wd = 1;
    cg.weight_decay = cc.weight_decay = 0.1f;
    float l1[3], l2[3], lc[3];
    double g1[3], g2[3], gc[3];
    float *p1 = train3(&cg, l1, g1), *p2 = train3(&cg, l2, g2), *pc = train3(&cc, lc, gc);
    if (!p1 || !p2 || !pc) return;
    char err[256];
    dm_model *m = dm_model_create(&cc, err, sizeof err);
    size_t np = dm_model_num_params(m);
    CHECK(!memcmp(l1, l2, sizeof l1) && !memcmp(p1, p2, np * sizeof(float)));
    double r = t_rel_rms_ff(p1, pc, np);
    printf("  parameters after 3 steps: rel rms %.3g from the cpu's\n", r);
    CHECKF(r <= DM_VERIFY_BOUND, "parameters %.3g from the cpu's", r);
    for (int s = 0; s < 3; s++) {
        printf("  step %d: loss cpu %.9g cuda %.9g\n", s, lc[s], l1[s]);
        CHECKF(fabs((double)l1[s] - lc[s]) <= DM_VERIFY_BOUND * fabs((double)lc[s]),
               "step %d: loss %.9g vs the cpu's %.9g", s, l1[s], lc[s]);
    }
    free(p1), free(p2), free(pc);
    dm_model_free(m);
}

/* precision=bf16 on the emulated GPU against the cpu's bf16 path (the reference bf16 path
 * standing in for its kernel: DM_CPU_BF16_REFERENCE, with DM_CPU_NO_BF16 so on any CPU),
 * from the same weights: the byte model (KDA, GDN) and a model of tokens (vocabulary 300,
 * the fused head in bf16), one forward and backward, then three steps of AdamW (the
 * weights' bf16 copy made again each step). Both round the same operands to bf16 and sum
 * in f32 in another order: the loss and the gradients agree within DM_VERIFY_BOUND, the
 * gradients under a tenth of what bf16 moves them from fp32 (printed: the gap between the
 * cpu's bf16 and fp32); after each step the losses within STEPS_BOUND (Adam's division by
 * the root of tiny second moments magnifies the last bits of the first). */
#define STEPS_BOUND 1e-4
TEST(cuda_backend_bf16_matches_cpu) {
    setenv("DM_CPU_NO_BF16", "1", 1);
    setenv("DM_CPU_BF16_REFERENCE", "1", 1);
    char err[512];
    const int B = 2, T = 24, V = 300;
    for (int k = 0; k < 3; k++) {
        const char *what = k == 0 ? "kda" : k == 1 ? "gdn" : "kda, vocabulary 300";
        dm_config cc = tiny(DM_BACKEND_CPU, k == 1 ? DM_MIXER_GDN : DM_MIXER_KDA), cf = cc;
        cc.precision = DM_PRECISION_BF16;
        /* heads 12 wide, which the tensor-core core does not take: both sides run the fp32
         * chunked core, and only the products differ */
        cc.d_model = cf.d_model = 24, cc.head_dim = cf.head_dim = 12;
        cc.optimizer = cf.optimizer = DM_OPT_ADAMW;
        if (k == 2) cc.vocab = cf.vocab = V;
        dm_config cs[3] = {cc, cc, cf}, cg = cc;
        cs[1].backend = cg.backend = DM_BACKEND_CUDA;
        dm_model *m[3];
        three_models(cs, m);
        dm_model *a = m[0], *b = m[1], *f = m[2];
        if (!a) return;
        CHECKF(dm_model_policy(b)->prec.matmul_bf16, "%s: the cuda policy is not bf16", what);
        size_t np = dm_model_num_params(a);
        uint16_t ids[2 * 25];
        uint8_t tok[2 * 25];
        tokens(tok, sizeof tok, 0);
        for (int i = 0; i < 2 * 25; i++) ids[i] = (uint16_t)((i * 97 + 13) % V);
        const void *in = k == 2 ? (const void *)ids : (const void *)tok;
        float l[3], *pg[3];
        step3(m, in, B, T, l, pg);
        float la = l[0], lb = l[1], lf = l[2], *pa = pg[0], *pb = pg[1], *pf = pg[2];
        double all = rel_rms(pb, pa, np), gap = rel_rms(pf, pa, np);
        double lrel = fabs((double)lb - la) / fabs((double)la);
        printf("  %s: loss cpu %.9g cuda %.9g (rel %.2g); gradients rel RMS %.2g; the cpu's "
               "bf16 from fp32: loss %.2g, gradients %.2g\n", what, la, lb, lrel, all,
               fabs((double)lf - la) / fabs((double)la), gap);
        CHECKF(isfinite(lb) && lrel <= DM_VERIFY_BOUND, "%s: loss %.9g vs %.9g", what, lb, la);
        CHECKF(all <= DM_VERIFY_BOUND && all < gap / 10, "%s: gradients %.3g (bf16 from fp32 "
               "%.3g)", what, all, gap);
        char rep[4096];
        dm_model_dispatch_table(b, rep, sizeof rep);
        const char *mm = strstr(rep, "matmul.fwd"), *nl = mm ? strchr(mm, '\n') : NULL;
        const char *bf = mm ? strstr(mm, "cublaslt-bf16") : NULL;
        CHECKF(bf && (!nl || bf < nl), "%s: the products did not run bf16:\n%s", what, rep);
        if (k == 2) {
            const char *h = strstr(rep, "head_xent.bwd"), *hb = h ? strstr(h, "cublaslt-bf16") : 0;
            CHECKF(hb && hb < strchr(h, '\n'), "the fused head did not run bf16:\n%s", rep);
        }
        /* three steps of AdamW each: the losses track */
        dm_optim *oa = dm_optim_create(a, &cc, err, sizeof err);
        dm_optim *ob = dm_optim_create(b, &cg, err, sizeof err);
        CHECKF(oa && ob, "%s", err);
        double worst = 0;
        for (int s = 0; s < 3 && oa && ob; s++) {
            dm_optim_step(oa, a, s);
            dm_optim_step(ob, b, s);
            if (k == 2) for (int i = 0; i < 2 * 25; i++) ids[i] = (uint16_t)((ids[i] + 7) % V);
            else tokens(tok, sizeof tok, s + 1);
            la = dm_model_forward(a, in, B, T, NULL), lb = dm_model_forward(b, in, B, T, NULL);
            dm_model_zero_grad(a), dm_model_zero_grad(b);
            dm_model_backward(a), dm_model_backward(b);
            double r = fabs((double)lb - la) / fabs((double)la);
            if (r > worst) worst = r;
        }
        printf("  %s: 3 steps of AdamW, losses within %.2g\n", what, worst);
        CHECKF(worst <= STEPS_BOUND, "%s: after a step, loss rel %.3g", what, worst);
        dm_optim_free(oa), dm_optim_free(ob);
        free(pa), free(pb), free(pf);
        dm_model_free(a), dm_model_free(b), dm_model_free(f);
    }
    unsetenv("DM_CPU_BF16_REFERENCE");
    unsetenv("DM_CPU_NO_BF16");
}

/* The delta core on the tensor cores in a whole step: the cuda model in bf16 (its products
 * and its delta core on bf16 operands) against the cpu's bf16 path (the same products on
 * the reference bf16 path, the delta core in fp32) from the same weights, KDA and GDN:
 * the loss within fla's bound on o (5e-3), the whole gradient within its bound on dq, dk,
 * dv (8e-3) and every tensor's within its bound on the gates (2e-2); the core ran on the
 * tensor cores both ways. Then three Muon steps of it twice: the same bits. */
TEST(cuda_backend_tc_core_matches_cpu) {
    setenv("DM_CPU_NO_BF16", "1", 1);
    setenv("DM_CPU_BF16_REFERENCE", "1", 1);
    const int B = 2, T = 80; /* two chunks of 64, the second partial */
    for (int mixer = 0; mixer < 2; mixer++) {
        const char *what = mixer ? "gdn" : "kda";
        dm_config cc = tiny(DM_BACKEND_CPU, mixer ? DM_MIXER_GDN : DM_MIXER_KDA), cf = cc;
        cc.precision = DM_PRECISION_BF16;
        dm_config cs[3] = {cc, cc, cf};
        cs[1].backend = DM_BACKEND_CUDA;
        dm_model *m[3];
        three_models(cs, m);
        dm_model *a = m[0], *b = m[1], *f = m[2];
        if (!a) return;
        size_t np = dm_model_num_params(a);
        uint8_t tok[2 * 81];
        tokens(tok, sizeof tok, 0);
        float l[3], *pg[3];
        step3(m, tok, B, T, l, pg);
        float la = l[0], lb = l[1], lf = l[2], *pa = pg[0], *pb = pg[1], *pf = pg[2];
        double all = rel_rms(pb, pa, np), lrel = fabs((double)lb - la) / fabs((double)la);
        double worst = 0;
        const char *wname = "";
        for (int i = 0; i < dm_model_num_tensors(a); i++) {
            const dm_tensor *t = dm_model_tensor(a, i);
            double e = rel_rms(pb + t->offset, pa + t->offset, t->numel);
            if (e > worst) worst = e, wname = t->name;
        }
        printf("  %s: loss cpu %.9g cuda %.9g (rel %.2g); gradients rel RMS %.2g, worst tensor "
               "%s %.2g; the cpu's bf16 from fp32: loss %.2g, gradients %.2g\n", what, la, lb,
               lrel, all, wname, worst, fabs((double)lf - la) / fabs((double)la),
               rel_rms(pf, pa, np));
        CHECKF(isfinite(lb) && lrel <= 5e-3, "%s: loss %.9g vs %.9g", what, lb, la);
        CHECKF(all <= 8e-3, "%s: the gradients' relative RMS %.3g over 8e-3", what, all);
        CHECKF(worst <= 2e-2, "%s: gradient %s relative RMS %.3g over 2e-2", what, wname, worst);
        char rep[4096];
        dm_model_dispatch_table(b, rep, sizeof rep);
        for (int dir = 0; dir < 2; dir++) {
            const char *row = strstr(rep, dir ? "delta.bwd" : "delta.fwd");
            const char *nl = row ? strchr(row, '\n') : NULL;
            const char *tc = row ? strstr(row, "chunked-tc") : NULL;
            CHECKF(tc && (!nl || tc < nl),
                   "%s: the delta core did not run on the tensor cores:\n%s", what, rep);
        }
        free(pa), free(pb), free(pf);
        dm_model_free(a), dm_model_free(b), dm_model_free(f);
    }
    dm_config cg = tiny(DM_BACKEND_CUDA, DM_MIXER_KDA);
    cg.precision = DM_PRECISION_BF16;
    float l1[3], l2[3];
    double g1[3], g2[3];
    float *p1 = train3(&cg, l1, g1), *p2 = train3(&cg, l2, g2);
    if (p1 && p2) {
        char err[256];
        dm_model *m = dm_model_create(&cg, err, sizeof err);
        size_t np = m ? dm_model_num_params(m) : 0;
        printf("  muon in bf16: losses %.9g %.9g %.9g\n", l1[0], l1[1], l1[2]);
        CHECKF(m && !memcmp(l1, l2, sizeof l1) && !memcmp(g1, g2, sizeof g1) &&
                   !memcmp(p1, p2, np * sizeof(float)),
               "two bf16 runs differ: losses %.9g %.9g %.9g vs %.9g %.9g %.9g", l1[0], l1[1],
               l1[2], l2[0], l2[1], l2[2]);
        dm_model_free(m);
    }
    free(p1), free(p2);
}

/* ns_precision=bf16 on the emulated GPU: Muon's Newton-Schulz on bf16 operands (the
 * policy says so, ns_bf16 runs on cublaslt-bf16); three steps twice give the same bits,
 * and their losses stay within 1e-3 of the fp32 iteration's (bf16 moves NS's output by a
 * few percent, a step's loss far less). */
TEST(cuda_backend_ns_bf16_trains) {
    dm_config cf = tiny(DM_BACKEND_CUDA, DM_MIXER_KDA), cb = cf;
    cf.n_layer = cb.n_layer = 1;
    cf.retract = cb.retract = DM_RETRACT_SPHERE;
    cb.ns_precision = DM_PRECISION_BF16;
    char err[512];
    dm_model *m = dm_model_create(&cb, err, sizeof err);
    CHECKF(m, "%s", err);
    if (!m) return;
    CHECK(dm_model_policy(m)->prec.ns_bf16);
    dm_optim *o = dm_optim_create(m, &cb, err, sizeof err);
    CHECKF(o, "%s", err);
    uint8_t tok[2 * 17];
    tokens(tok, sizeof tok, 0);
    dm_model_forward(m, tok, 2, 16, NULL);
    dm_model_zero_grad(m);
    dm_model_backward(m);
    if (o) dm_optim_step(o, m, 0);
    char rep[4096];
    dm_model_dispatch_table(m, rep, sizeof rep);
    const char *ns = strstr(rep, "ns_bf16"), *nl = ns ? strchr(ns, '\n') : NULL;
    const char *cb16 = ns ? strstr(ns, "cublaslt-bf16") : NULL;
    CHECKF(cb16 && (!nl || cb16 < nl), "ns_bf16 did not run on cublaslt-bf16:\n%s", rep);
    dm_optim_free(o);
    dm_model_free(m);
    float l1[3], l2[3], lf[3];
    double g1[3], g2[3], gf[3];
    float *p1 = train3(&cb, l1, g1), *p2 = train3(&cb, l2, g2), *pf = train3(&cf, lf, gf);
    if (!p1 || !p2 || !pf) return;
    size_t np = 0;
    m = dm_model_create(&cb, err, sizeof err);
    if (m) np = dm_model_num_params(m), dm_model_free(m);
    CHECK(np && memcmp(p1, p2, np * sizeof(float)) == 0 && memcmp(l1, l2, sizeof l1) == 0);
    for (int s = 0; s < 3; s++) {
        double r = fabs((double)l1[s] - lf[s]) / lf[s];
        printf("  step %d: loss bf16 NS %.9g, fp32 NS %.9g (rel %.2g)\n", s, l1[s], lf[s], r);
        CHECKF(r <= 1e-3, "step %d: loss rel %.3g", s, r);
    }
    CHECK(memcmp(p1, pf, np * sizeof(float)) != 0); /* the bf16 iteration did something else */
    free(p1), free(p2), free(pf);
}

/* A training step on the emulated GPU waits for the device once: the read of its losses
 * and its gradient norm at its end (the batch goes in through page-locked staging without
 * a wait, the phase times come from events, the norm is copied beside the losses); its
 * loss and norm match the cpu stepper's on the same batches (three steps of Muon). The
 * first step, which makes the backend's buffers, is not counted. */
TEST(cuda_backend_step_waits_once) {
    char err[512];
    dm_config cs[2] = {tiny(DM_BACKEND_CPU, DM_MIXER_KDA), tiny(DM_BACKEND_CUDA, DM_MIXER_KDA)};
    cs[0].retract = cs[1].retract = DM_RETRACT_SPHERE;
    cs[0].batch_size = cs[1].batch_size = 2;
    cs[0].seq_len = cs[1].seq_len = 24;
    dm_model *m[2];
    dm_optim *o[2];
    dm_stepper st[2];
    dm_step_out out[2][3];
    long waits[3] = {0};
    uint8_t tok[2 * 25];
    for (int i = 0; i < 2; i++) {
        m[i] = dm_model_create(&cs[i], err, sizeof err);
        o[i] = m[i] ? dm_optim_create(m[i], &cs[i], err, sizeof err) : NULL;
        CHECKF(o[i] && !dm_stepper_init(&st[i], m[i], o[i], &cs[i], NULL, err, sizeof err), "%s",
               err);
        if (!o[i]) return;
        for (int s = 0; s < 3; s++) {
            tokens(tok, sizeof tok, s);
            long w0 = dm_emu_host_waits();
            CHECK(dm_stepper_step(&st[i], tok, s, &out[i][s]) == 0);
            if (i) waits[s] = dm_emu_host_waits() - w0;
        }
    }
    for (int s = 0; s < 3; s++) {
        double lr = fabs((double)out[1][s].loss - out[0][s].loss) / out[0][s].loss;
        double nr = fabs(out[1][s].gnorm - out[0][s].gnorm) / out[0][s].gnorm;
        printf("  step %d: host waits %ld; loss cuda %.9g cpu %.9g (rel %.2g); norm rel %.2g; "
               "fwd %.3g bwd %.3g opt %.3g ms\n", s, waits[s], out[1][s].loss, out[0][s].loss,
               lr, nr, 1e3 * out[1][s].t_fwd, 1e3 * out[1][s].t_bwd, 1e3 * out[1][s].t_opt);
        CHECKF(lr <= DM_VERIFY_BOUND && nr <= DM_VERIFY_BOUND, "step %d: loss rel %.3g, norm "
               "rel %.3g", s, lr, nr);
        CHECKF(out[1][s].t_fwd > 0 && out[1][s].t_bwd > 0 && out[1][s].t_opt > 0,
               "step %d: a phase without time", s);
        if (s) CHECKF(waits[s] == 1, "step %d waited %ld times", s, waits[s]);
    }
    for (int i = 0; i < 2; i++) {
        dm_stepper_free(&st[i]);
        dm_optim_free(o[i]);
        dm_model_free(m[i]);
    }
}

/* n training steps of config c through the stepper (step_graph as c says), with a
 * forward of another shape (a 1 x 8 batch: the model laid out again, as an evaluation
 * does) after step 2: the losses, the norms, the weights after, the op layer's counts,
 * and the graphs replayed. 0 when the model could not be made. */
typedef struct {
    float loss[8];
    double gnorm[8];
    float *params;
    long counts[DM_OPS_COUNTS];
    long replays;
    char text[200];
} graph_run;
static int run_steps(const dm_config *c, int n, graph_run *r) {
    char err[512];
    dm_model *m = dm_model_create(c, err, sizeof err);
    dm_optim *o = m ? dm_optim_create(m, c, err, sizeof err) : NULL;
    dm_stepper st;
    int ok = o && !dm_stepper_init(&st, m, o, c, NULL, err, sizeof err);
    CHECKF(ok, "%s", err);
    if (ok) {
        uint8_t tok[2 * 25];
        for (int s = 0; s < n; s++) {
            dm_step_out out;
            tokens(tok, sizeof tok, s);
            CHECK(dm_stepper_step(&st, tok, s, &out) == 0);
            r->loss[s] = out.loss, r->gnorm[s] = out.gnorm;
            if (s == 2) dm_model_forward(m, tok, 1, 8, NULL);
        }
        r->params = t_alloc(dm_model_num_params(m));
        dm_model_params_to_host(m, r->params);
        dm_model_op_counts(m, r->counts);
        r->replays = st.replays;
        dm_stepper_graph_text(&st, r->text, sizeof r->text);
        dm_stepper_free(&st);
    }
    dm_optim_free(o);
    dm_model_free(m);
    return ok;
}

/* The step captured as graphs and replayed (step_graph=auto) against every kernel launched
 * each step (off), on the emulated GPU: six Muon steps with the sphere retraction every
 * second step (so both update graphs), a forward of another shape after the third step
 * (the graphs captured again on the new layout), in fp32 and in bf16 (products, the delta
 * core on the tensor cores, Newton-Schulz): the losses, the gradient norms and the weights
 * after, the same bits; the op layer counts the same calls both ways; and the replays
 * are the ones the schedule makes (a phase queued once per layout, captured the next time,
 * replayed from then on: 10 of 18 phases here). */
TEST(cuda_backend_graph_step_bitwise) {
    for (int bf = 0; bf < 2; bf++) {
        dm_config c = tiny(DM_BACKEND_CUDA, DM_MIXER_KDA);
        c.retract = DM_RETRACT_SPHERE, c.retract_every = 2;
        c.batch_size = 2, c.seq_len = 24;
        if (bf) c.precision = c.ns_precision = DM_PRECISION_BF16;
        dm_config off = c;
        off.step_graph = DM_GRAPH_OFF;
        graph_run g = {0}, e = {0};
        if (!run_steps(&c, 6, &g) || !run_steps(&off, 6, &e)) return;
        size_t np;
        {
            char err[256];
            dm_model *m = dm_model_create(&c, err, sizeof err);
            np = m ? dm_model_num_params(m) : 0;
            dm_model_free(m);
        }
        printf("  %s: %s; %ld replays; losses %.9g .. %.9g\n", bf ? "bf16" : "fp32", g.text,
               g.replays, g.loss[0], g.loss[5]);
        CHECKF(!memcmp(g.loss, e.loss, sizeof g.loss) && !memcmp(g.gnorm, e.gnorm, sizeof g.gnorm),
               "%s: the losses or norms differ from the launched steps'", bf ? "bf16" : "fp32");
        CHECKF(np && !memcmp(g.params, e.params, np * sizeof(float)),
               "%s: the weights differ from the launched steps'", bf ? "bf16" : "fp32");
        CHECKF(!memcmp(g.counts, e.counts, sizeof g.counts),
               "%s: the op layer's counts differ from the launched steps'", bf ? "bf16" : "fp32");
        /* a graph is launched when captured and when replayed. Steps 0-2 on the first
         * layout: forward and backward queued at 0, captured at 1, replayed at 2 (2 launches
         * each); steps 3-5 on the next: the same (2 each); the update without retraction
         * (steps 1, 3, 5) queued at 1, queued again at 3 (a new layout), captured at 5: 1;
         * with it (0, 2, 4) queued at 0, captured at 2, queued at 4: 1 */
        CHECKF(g.replays == 10 && e.replays == 0, "%s: %ld replays (want 10), %ld launched",
               bf ? "bf16" : "fp32", g.replays, e.replays);
        free(g.params), free(e.params);
    }
}

/* A capture the backend refuses (the emulator's DM_EMU_CAPTURE_FAIL: the second capture,
 * the backward's at step 1, ends invalidated): the graphs go off for the rest of the run,
 * saying why, and the steps are those launched kernel by kernel, to the bit, with the
 * same op counts. */
TEST(cuda_backend_graph_refused_loses_nothing) {
    dm_config c = tiny(DM_BACKEND_CUDA, DM_MIXER_KDA), off;
    c.batch_size = 2, c.seq_len = 24;
    off = c;
    off.step_graph = DM_GRAPH_OFF;
    graph_run g = {0}, e = {0};
    setenv("DM_EMU_CAPTURE_FAIL", "2", 1);
    int ok = run_steps(&c, 4, &g);
    unsetenv("DM_EMU_CAPTURE_FAIL");
    if (!ok || !run_steps(&off, 4, &e)) return;
    printf("  %s; %ld replays\n", g.text, g.replays);
    CHECKF(strstr(g.text, "off (the backward's capture failed") != NULL, "%s", g.text);
    CHECKF(g.replays == 1, "%ld replays (want 1: the forward's, captured at step 1)", g.replays);
    CHECK(!memcmp(g.loss, e.loss, 4 * sizeof(float)) && !memcmp(g.gnorm, e.gnorm,
                                                                 4 * sizeof(double)));
    CHECK(!memcmp(g.counts, e.counts, sizeof g.counts));
    char err[256];
    dm_model *m = dm_model_create(&c, err, sizeof err);
    size_t np = m ? dm_model_num_params(m) : 0;
    CHECK(np && !memcmp(g.params, e.params, np * sizeof(float)));
    dm_model_free(m);
    free(g.params), free(e.params);
}

/* Inside a capture nothing may wait or copy from the host (a graph would replay the
 * staged bytes of that moment): the backend stops the process naming the call. */
TEST(cuda_backend_put_inside_capture_stops) {
    char err[512];
    dm_config c = tiny(DM_BACKEND_CUDA, DM_MIXER_KDA);
    dm_model *m = dm_model_create(&c, err, sizeof err);
    CHECKF(m, "%s", err);
    if (!m) return;
    dm_backend *be = dm_model_backend(m);
    CHECK(dm_backend_graphs(be));
    int fd[2];
    CHECK(pipe(fd) == 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 2);
        float one = 1.0f;
        if (dm_backend_capture_begin(be)) _exit(3);
        dm_backend_put(be, dm_model_param_mem(m), &one, sizeof one);
        _exit(0);
    }
    close(fd[1]);
    char said[512] = "";
    ssize_t got = read(fd[0], said, sizeof said - 1);
    said[got > 0 ? got : 0] = 0;
    close(fd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    printf("  a put while capturing: %s", said);
    CHECKF(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT &&
               strstr(said, "a copy from the host inside a captured step"),
           "status %d, said: %s", st, said);
    dm_model_free(m);
}

/* grad_accum = 2 on the emulated GPU: each step the gradients of two micro-batches summed
 * and their mean taken on the device (grad_add, grad_mean), three AdamW steps against the
 * cpu stepper's losses and norms within DM_VERIFY_BOUND; the step launched kernel by
 * kernel (step graphs: off, said why). */
TEST(cuda_backend_grad_accum_matches_cpu) {
    char err[512];
    dm_config cs[2] = {tiny(DM_BACKEND_CPU, DM_MIXER_GDN), tiny(DM_BACKEND_CUDA, DM_MIXER_GDN)};
    dm_step_out out[2][3];
    for (int i = 0; i < 2; i++) {
        cs[i].grad_accum = 2, cs[i].batch_size = 2, cs[i].seq_len = 16;
        cs[i].optimizer = DM_OPT_ADAMW;
        dm_model *m = dm_model_create(&cs[i], err, sizeof err);
        dm_optim *o = m ? dm_optim_create(m, &cs[i], err, sizeof err) : NULL;
        dm_stepper st;
        int ok = o && !dm_stepper_init(&st, m, o, &cs[i], NULL, err, sizeof err);
        CHECKF(ok, "%s", err);
        if (!ok) return;
        if (i) {
            char gt[200];
            dm_stepper_graph_text(&st, gt, sizeof gt);
            printf("  cuda: %s\n", gt);
            CHECK(strstr(gt, "off (grad_accum > 1)") != NULL);
        }
        uint8_t tok[4 * 17];
        for (int s = 0; s < 3; s++) {
            tokens(tok, sizeof tok, s);
            CHECK(dm_stepper_step(&st, tok, s, &out[i][s]) == 0);
        }
        dm_stepper_free(&st);
        dm_optim_free(o);
        dm_model_free(m);
    }
    for (int s = 0; s < 3; s++) {
        double lr = fabs((double)out[1][s].loss - out[0][s].loss) / out[0][s].loss;
        double nr = fabs(out[1][s].gnorm - out[0][s].gnorm) / out[0][s].gnorm;
        printf("  step %d: loss cuda %.9g cpu %.9g (rel %.2g); norm cuda %.9g cpu %.9g (rel "
               "%.2g)\n", s, out[1][s].loss, out[0][s].loss, lr, out[1][s].gnorm,
               out[0][s].gnorm, nr);
        CHECKF(lr <= DM_VERIFY_BOUND && nr <= DM_VERIFY_BOUND, "step %d: loss rel %.3g, norm "
               "rel %.3g", s, lr, nr);
    }
}

/* The emulator's guard of page-locked memory, which the step's asynchronous read relies
 * on being checked: the host reading the destination of an asynchronous copy from the
 * device before waiting for it faults with its reason (in a child process); after the
 * wait it reads the copied bytes. */
TEST(cuda_emu_pinned_read_before_wait_faults) {
    float *dev = NULL, *host = NULL, v[4] = {1, 2, 3, 4};
    dm_cuda_stream s = NULL;
    CHECK(!dm_cuda_stream_create(&s) && !dm_cuda_malloc((void **)&dev, sizeof v) &&
          !dm_cuda_host_alloc((void **)&host, sizeof v));
    CHECK(!dm_cuda_upload(dev, v, sizeof v, s) && !dm_cuda_sync(s));
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) { /* too early: the copy's stream not waited for */
        if (freopen("/dev/null", "w", stderr)) {} /* the fault's line, checked below by signal */
        dm_cuda_download_async(host, dev, sizeof v, s);
        volatile float x = host[2];
        (void)x;
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    printf("  a read before the wait: %s\n", WIFSIGNALED(st) ? "faulted" : "passed unseen");
    CHECKF(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "the early read was not caught (status "
           "%d)", st);
    CHECK(!dm_cuda_download_async(host, dev, sizeof v, s) && !dm_cuda_sync(s));
    CHECK(memcmp(host, v, sizeof v) == 0);
    dm_cuda_host_free(host);
    dm_cuda_free(dev);
    dm_cuda_stream_destroy(s);
}

/* What would reach an op the backend declines is refused when the model is made, with the
 * reason (one line), never mid-run: verify mode. */
TEST(cuda_backend_refuses_what_it_cannot_run) {
    static const struct { const char *key, *value, *says; } no[] = {
        {"verify_fused", "2", "verify_fused"},
    };
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
        char err[512] = "";
        dm_config c = tiny(DM_BACKEND_CUDA, DM_MIXER_KDA);
        CHECKF(!dm_config_set(&c, no[i].key, no[i].value, err, sizeof err), "%s", err);
        dm_model *m = dm_model_create(&c, err, sizeof err);
        CHECKF(!m && strstr(err, no[i].says) && !strchr(err, '\n'), "%s=%s: %s", no[i].key,
               no[i].value, m ? "made" : err);
        printf("  %s=%s: %s\n", no[i].key, no[i].value, err);
        dm_model_free(m);
    }
}
