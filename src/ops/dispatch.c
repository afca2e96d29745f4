/* dispatch.c — the one dispatch routine of every op (see ops.h and op.h): choose an
 * implementation among the backend's and the op's reference, count, time, verify; and the
 * reports of the counters. It knows no backend: their tables come with dm_backend. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"
#include "ops/policy.h"

#define DM_OP_DEFS(NAME, name) [DM_OP_##NAME] = &dm_def_##name,
static const dm_op_def *const DEFS[DM_OP_COUNT] = {DM_OP_LIST(DM_OP_DEFS)};
#undef DM_OP_DEFS
static const char *const DIR[DM_NDIR] = {"fwd", "bwd", "bwd_w"};

const dm_op_def *dm_op_def_of(int op) { return op >= 0 && op < DM_OP_COUNT ? DEFS[op] : NULL; }
const char *dm_op_name(int op) { return op >= 0 && op < DM_OP_COUNT ? DEFS[op]->name : NULL; }
const char *dm_op_dir_name(int dir) { return dir >= 0 && dir < DM_NDIR ? DIR[dir] : NULL; }

/* The implementations of op for ops' backend (the host's, the registry's first, when it has
 * none): the backend's list, then the op's reference when the backend's memory is the
 * host's kind. Indexed 0..n_impl-1 as the counters are. */
static const dm_impl_list NONE = {NULL, 0};
static const dm_impl_list *list_of(const dm_backend *be, int op) {
    const dm_impl_list *const *t = be ? be->impls : dm_backend_regs[0].impls;
    return t && t[op] ? t[op] : &NONE;
}
static int be_impls(const dm_backend *be, int op) {
    int mem = be ? be->mem : DM_MEM_HOST;
    return list_of(be, op)->n + (DEFS[op]->reference && DEFS[op]->reference->mem == mem);
}
static const dm_impl *be_impl(const dm_backend *be, int op, int i) {
    const dm_impl_list *l = list_of(be, op);
    return i < l->n ? &l->impl[i] : DEFS[op]->reference;
}
static int n_impl(const dm_ops *ops, int op) { return be_impls(ops->be, op); }
static const dm_impl *impl_at(const dm_ops *ops, int op, int i) { return be_impl(ops->be, op, i); }

const char *dm_op_impl_name(int op, int impl) {
    if (op < 0 || op >= DM_OP_COUNT || impl < 0 || impl >= be_impls(NULL, op)) return NULL;
    return be_impl(NULL, op, impl)->name;
}

/* why the backend (the host's: NULL) runs no hardware bf16 products; NULL: it does */
static const char *bf16_missing(const dm_backend *be) {
    const dm_backend_vt *vt = be ? be->vt : dm_backend_regs[0].vt;
    const dm_backend_calls *c = vt ? vt->calls : NULL;
    return c && c->bf16_missing ? c->bf16_missing() : "the backend has no bf16 products";
}

void dm_ops_init(dm_ops *ops, const dm_config *c) {
    memset(ops, 0, sizeof *ops);
    ops->kda_impl = c->kda_impl;
    ops->norm_impl = c->norm_impl;
    ops->chunk = c->chunk_size;
    ops->gemm = c->gemm;
    ops->precision = c->precision;
    ops->threads = 1;
    ops->bf16_why = bf16_missing(NULL);
    for (int op = 0; op < DM_OP_COUNT; op++)
        for (int d = 0; d < DM_NDIR; d++) ops->verify_op[op][d] = -1;
}

/* ---- what the op layer asks of its backend besides the ops (backend.h) ---- */

static const dm_backend_vt *vt_of(const dm_ops *ops) {
    return ops->be ? ops->be->vt : dm_backend_regs[0].vt;
}
static const dm_backend_calls *calls_of(const dm_ops *ops) {
    const dm_backend_vt *vt = vt_of(ops);
    return vt ? vt->calls : NULL;
}

size_t dm_ops_delta_work(const dm_ops *ops, const dm_delta_dims *d, int nthreads, int both,
                         size_t *saved) {
    const dm_backend_vt *vt = vt_of(ops);
    *saved = 0;
    return vt && vt->delta_work ? vt->delta_work(ops, d, nthreads, both, saved) : 0;
}
void dm_ops_set_scratch(dm_ops *ops, dm_bf *p, size_t n) {
    ops->scratch = p ? DM_RAW(p) : NULL;
    ops->scratch_n = p ? n : 0;
}
int dm_ops_threads(const dm_ops *ops) {
    int n = ops->policy ? ops->policy->threads : ops->threads;
    return n > 0 ? n : 1;
}
size_t dm_ops_side_bytes(const dm_ops *ops) {
    const dm_backend_calls *c = calls_of(ops);
    return c && c->side_bytes ? c->side_bytes(ops) : 0;
}
size_t dm_ops_product_scratch(const dm_ops *ops, size_t pair, size_t dout) {
    const dm_backend_calls *c = calls_of(ops);
    return c && c->product_scratch ? c->product_scratch(ops, pair, dout) : 0;
}
void dm_ops_side_room(dm_ops *ops, const dm_bf *x, size_t n, dm_bf *room) {
    const dm_backend_calls *c = calls_of(ops);
    if (c && c->side_room && x && room) c->side_room(ops, DM_RAW(x), n, DM_RAW(room));
}
void dm_ops_side_clear(dm_ops *ops) {
    const dm_backend_calls *c = calls_of(ops);
    if (c && c->side_clear) c->side_clear(ops);
}
void dm_ops_forget_bf16(dm_ops *ops) {
    const dm_backend_calls *c = calls_of(ops);
    if (c && c->forget_bf16) c->forget_bf16(ops);
}
int dm_ops_reserve_bf16_weights(dm_ops *ops, size_t n) {
    const dm_backend_calls *c = calls_of(ops);
    return c && c->reserve_bf16_weights ? c->reserve_bf16_weights(ops, n) : 0;
}
void dm_ops_set_weights(dm_ops *ops, const dm_bf *w, size_t n) {
    const dm_backend_calls *c = calls_of(ops);
    if (c && c->set_weights) c->set_weights(ops, DM_RAW(w), n);
}
const char *dm_ops_ns_bf16_context(dm_ops *ops) {
    const dm_backend_calls *c = calls_of(ops);
    return c && c->ns_bf16_context ? c->ns_bf16_context(ops)
                                   : "the backend runs no bf16 Newton-Schulz";
}

int dm_ops_bf16_active(const dm_ops *ops) {
    if (ops->policy) return ops->policy->prec.matmul_bf16;
    return dm_precision_matmul(ops->precision, ops->bf16_why);
}

void dm_ops_bind(dm_ops *ops, dm_backend *be) {
    ops->be = be;
    ops->bf16_why = bf16_missing(be);
    for (int op = 0; op < DM_OP_COUNT; op++)
        if (n_impl(ops, op) > DM_OP_MAX_IMPL || n_impl(ops, op) == 0) {
            fprintf(stderr, "dormouse: the %s backend has %d implementations of %s (1 to %d)\n",
                    be ? be->name : "host", n_impl(ops, op), DEFS[op]->name, DM_OP_MAX_IMPL);
            abort();
        }
}

void dm_ops_free(dm_ops *ops) {
    if (ops->bctx && ops->bctx_free) ops->bctx_free(ops->bctx);
    ops->bctx = NULL;
    if (ops->be) dm_backend_release(ops->be, ops->vbuf);
    else free(ops->vbuf);
    ops->vbuf = NULL;
    ops->vcap = 0;
}

/* ---- choosing ---- */

/* An implementation left out entirely (not a decline): one of another backend's memory
 * kind; by the precision the call asks (dm_op_def.asked) every bf16 one under fp32, and
 * under auto the bf16 reference (auto means the hardware kernel; the reference runs as the
 * oracle in verify mode, where a call asks bf16, and where the policy puts it in the
 * hardware kernel's place: its matmul_via). */
static int left_out(const dm_ops *ops, const dm_impl *im, int asked) {
    if (im->mem != (ops->be ? ops->be->mem : DM_MEM_HOST)) return 1; /* another backend's */
    if (im->precision != DM_PREC_BF16) return 0;
    if (asked == DM_PRECISION_FP32) return 1;
    return asked == DM_PRECISION_AUTO && im->reference &&
           !(ops->policy && ops->policy->prec.matmul_bf16 && ops->policy->prec.matmul_via);
}

static const char *why_not(dm_ops *ops, const dm_impl *im, const void *args, int dir) {
    const char *w = im->selected ? im->selected(ops, args, dir) : NULL;
    if (!w && im->supports) w = im->supports(ops, args, dir);
    return w;
}

static void count_skip(dm_ops *ops, int op, int dir, int impl, const char *why) {
    for (int i = 0; i < ops->n_skip; i++) {
        dm_skip *s = &ops->skip[i];
        if (s->op == op && s->dir == dir && s->impl == impl &&
            (s->reason == why || strcmp(s->reason, why) == 0)) {
            s->n++;
            return;
        }
    }
    if (ops->n_skip < DM_OPS_MAX_SKIPS) ops->skip[ops->n_skip++] = (dm_skip){op, dir, impl, why, 1};
    else ops->skip_lost++;
}

/* The bytes a call moves, for the atlas's floor: its outputs written (f32; a double for
 * DM_OUT_F64), an accumulated one counted twice (read and written), and its inputs read
 * once each (the op's reads). A lower bound of its traffic: a kernel that reads an input
 * twice, or spills, moves more. */
static double traffic_bytes(const dm_op_def *def, void *args, int dir) {
    double b = def->reads ? def->reads(args, dir) : 0;
    if (!def->outputs) return b;
    dm_out out[DM_OP_MAX_OUT];
    int n = def->outputs(args, dir, out);
    for (int i = 0; i < n; i++)
        b += (double)out[i].n * (out[i].kind == DM_OUT_F64 ? 8.0
                                 : out[i].kind == DM_OUT_ACC ? 8.0 : 4.0);
    return b;
}

static void run_timed(dm_ops *ops, int op, const dm_op_def *def, int impl, void *args, int dir) {
    const dm_impl *im = impl_at(ops, op, impl);
    if (!ops->atlas) {
        im->run(ops, args, dir);
        return;
    }
    double t0 = dm_now();
    im->run(ops, args, dir);
    dm_backend_sync(ops->be); /* the call's work done, not only queued */
    double t = dm_now() - t0;
    const char *impl_name = n_impl(ops, op) > 1 ? im->name : NULL;
    dm_atlas_add(ops->atlas, def->name, DIR[dir], impl_name, t,
                 def->flops ? def->flops(args, dir) : 0);
    dm_atlas_bytes(ops->atlas, def->name, DIR[dir], impl_name, traffic_bytes(def, args, dir));
}

/* ---- verify mode ---- */

/* The second run's outputs live where the first's do, in the backend's memory (host memory
 * without a backend), and are read back through its copies to be compared: verify mode
 * never dereferences backend memory on the host. */
static void *vscratch(dm_ops *ops, size_t floats) {
    if (floats > ops->vcap) {
        float *p = ops->be ? dm_backend_alloc(ops->be, floats * sizeof(float))
                           : malloc(floats * sizeof(float));
        if (!p) return NULL;
        if (ops->be) dm_backend_release(ops->be, ops->vbuf);
        else free(ops->vbuf);
        ops->vbuf = p;
        ops->vcap = floats;
    }
    return ops->vbuf;
}
static void vcopy(dm_ops *ops, void *dst, const void *src, size_t bytes) {
    if (ops->be) dm_backend_copy(ops->be, dst, src, bytes);
    else memmove(dst, src, bytes);
}
/* n floats of backend memory at p as a malloc'd host copy (NULL: p is NULL, or no memory) */
static float *vhost(dm_ops *ops, const float *p, size_t n) {
    float *h = p ? malloc((n ? n : 1) * sizeof(float)) : NULL;
    if (!h) return NULL;
    if (ops->be) dm_backend_to_host(ops->be, h, p, n * sizeof(float));
    else memcpy(h, p, n * sizeof(float));
    return h;
}
/* the double of backend memory at p */
static double vdouble(dm_ops *ops, const void *p) {
    double d;
    if (ops->be) dm_backend_to_host(ops->be, &d, p, sizeof d);
    else memcpy(&d, p, sizeof d);
    return d;
}

/* a relative difference of one output of (op, dir) */
static void note(dm_ops *ops, int op, int dir, const char *what, double rel) {
    if (isnan(rel)) rel = INFINITY;
    if (rel > ops->verify_op[op][dir]) ops->verify_op[op][dir] = rel;
    if (rel > ops->verify_max || ops->verify_what[0] == 0) {
        if (rel > ops->verify_max) ops->verify_max = rel;
        snprintf(ops->verify_what, sizeof ops->verify_what, "%s", what);
    }
}

/* relative RMS difference of a against the reference r, both as increments over base
 * when base != NULL */
static double rel_rms(const float *a, const float *r, const float *base, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double b = base ? base[i] : 0.0, x = (double)a[i] - b, y = (double)r[i] - b;
        num += (x - y) * (x - y);
        den += y * y;
    }
    return den > 0 ? sqrt(num / den) : sqrt(num / (double)(n ? n : 1));
}

/* The second implementation for a call run by `chosen`: the reference of its precision,
 * or when that reference is the one chosen, the first other implementation of the same
 * precision able to take the call (whatever the settings say); -1 when there is none. */
static int second(dm_ops *ops, int op, int chosen, const void *args, int dir) {
    const dm_impl *c = impl_at(ops, op, chosen);
    int n = n_impl(ops, op);
    if (!c->reference) {
        for (int i = 0; i < n; i++) {
            const dm_impl *im = impl_at(ops, op, i);
            if (im->reference && im->precision == c->precision && im->mem == c->mem) return i;
        }
        return -1;
    }
    for (int i = 0; i < n; i++) {
        const dm_impl *im = impl_at(ops, op, i);
        if (i != chosen && im->precision == c->precision && im->mem == c->mem &&
            !(im->supports && im->supports(ops, args, dir)))
            return i;
    }
    return -1;
}

/* Run `other` into scratch outputs first (the inputs are intact: an output may alias an
 * input, and the chosen run may overwrite it in place), then `chosen` into the real
 * outputs, and compare. Accumulated outputs start from the same values in both runs and
 * are compared as increments. */
static void run_verified(dm_ops *ops, int op, const dm_op_def *def, int chosen, int other,
                         void *args, int dir) {
    dm_out out[DM_OP_MAX_OUT], alt_out[DM_OP_MAX_OUT];
    _Alignas(16) unsigned char alt[512]; /* a copy of the args: every op's struct fits */
    if (def->args_size > sizeof alt) abort();
    memcpy(alt, args, def->args_size);
    int n = def->outputs(args, dir, out);
    def->outputs(alt, dir, alt_out);
    size_t need = 0;
    for (int i = 0; i < n; i++)
        need += out[i].kind == DM_OUT_PRIVATE ? 0
                : out[i].kind == DM_OUT_F64   ? 2 /* a double */
                : out[i].kind == DM_OUT_ACC   ? 2 * out[i].n
                                              : out[i].n;
    float *buf = vscratch(ops, need ? need : 1), *p = buf;
    if (!buf) { /* no memory for the check: run unverified */
        run_timed(ops, op, def, chosen, args, dir);
        return;
    }
    for (int i = 0; i < n; i++) /* the doubles first: 8-byte aligned at the scratch's start */
        if (out[i].kind == DM_OUT_F64) {
            *alt_out[i].slot = p;
            p += 2;
        }
    float *base[DM_OP_MAX_OUT] = {0};
    for (int i = 0; i < n; i++) {
        if (out[i].kind == DM_OUT_PRIVATE) {
            *alt_out[i].slot = NULL;
            continue;
        }
        if (out[i].kind == DM_OUT_F64) continue;
        if (out[i].kind == DM_OUT_ACC) { /* both runs start from the values there now */
            base[i] = p;
            vcopy(ops, p, *out[i].slot, out[i].n * sizeof(float));
            vcopy(ops, p + out[i].n, *out[i].slot, out[i].n * sizeof(float));
            p += out[i].n;
        }
        *alt_out[i].slot = p;
        p += out[i].n;
    }
    dm_atlas *atlas = ops->atlas; /* the second run is not part of the step's time */
    ops->atlas = NULL;
    impl_at(ops, op, other)->run(ops, alt, dir);
    ops->atlas = atlas;
    run_timed(ops, op, def, chosen, args, dir);
    int chosen_is_ref = impl_at(ops, op, chosen)->reference;
    for (int i = 0; i < n; i++) {
        char what[64];
        snprintf(what, sizeof what, "%s %s", def->name, out[i].name);
        if (out[i].kind == DM_OUT_PRIVATE) continue;
        if (out[i].kind == DM_OUT_F64) {
            double a = vdouble(ops, *out[i].slot), b = vdouble(ops, *alt_out[i].slot);
            double r = chosen_is_ref ? a : b;
            note(ops, op, dir, what, fabs(a - b) / (r != 0 ? fabs(r) : 1.0));
            continue;
        }
        float *a = vhost(ops, *out[i].slot, out[i].n), *b = vhost(ops, *alt_out[i].slot, out[i].n);
        float *b0 = vhost(ops, base[i], out[i].n);
        if (a && b && (b0 || !base[i]))
            note(ops, op, dir, what,
                 rel_rms(chosen_is_ref ? b : a, chosen_is_ref ? a : b, b0, out[i].n));
        free(a), free(b), free(b0);
    }
    ops->verify_calls++;
}

/* Each float output of a call told to the backend's side room (ops.h), before the call
 * (after 0) and after it (1): an output's kept copy no longer holds once the call may have
 * changed it, and its room is filled once the call is done. */
static void side_written(dm_ops *ops, const dm_op_def *def, void *args, int dir, int after) {
    const dm_backend_calls *c = calls_of(ops);
    if (!c || !c->side_written) return;
    dm_out out[DM_OP_MAX_OUT];
    int n = def->outputs(args, dir, out);
    for (int i = 0; i < n; i++)
        if ((out[i].kind == DM_OUT_SET || out[i].kind == DM_OUT_ACC) && *out[i].slot)
            c->side_written(ops, *out[i].slot, out[i].n, after);
}

void dm_op_run(dm_ops *ops, int op, int dir, void *args) {
    const dm_op_def *def = DEFS[op];
    const char *bad = def->check ? def->check(args, dir) : NULL;
    if (bad) {
        fprintf(stderr, "dormouse: op %s.%s called with %s\n", def->name, DIR[dir], bad);
        fflush(stderr);
        abort();
    }
    dm_backend_enter(ops->be); /* the backend's memory is the kernels' during the call */
    int chosen = -1, n = n_impl(ops, op);
    int asked = def->asked ? def->asked(args) : DM_PRECISION_FP32;
    const char *why = "it has none";
    for (int i = 0; i < n && chosen < 0; i++) {
        const dm_impl *im = impl_at(ops, op, i);
        if (left_out(ops, im, asked)) continue;
        why = why_not(ops, im, args, dir);
        if (!why) chosen = i;
        else count_skip(ops, op, dir, i, why);
    }
    if (chosen < 0) { /* on the host the reference takes every call; a device backend's
                         memory is never handed to the host's implementations */
        fprintf(stderr, "dormouse: op %s.%s: no implementation of the %s backend takes this "
                        "call (%s)\n", def->name, DIR[dir], ops->be ? ops->be->name : "cpu", why);
        fflush(stderr);
        abort();
    }
    ops->calls[op][dir]++;
    ops->ran[op][dir][chosen]++;
    int other = ops->verify ? second(ops, op, chosen, args, dir) : -1;
    side_written(ops, def, args, dir, 0);
    if (other >= 0) run_verified(ops, op, def, chosen, other, args, dir);
    else run_timed(ops, op, def, chosen, args, dir);
    side_written(ops, def, args, dir, 1);
    dm_backend_leave(ops->be);
}

void dm_ops_counts(const dm_ops *ops, long *out) {
    memcpy(out, ops->calls, sizeof ops->calls);
    out += sizeof ops->calls / sizeof(long);
    memcpy(out, ops->ran, sizeof ops->ran);
    out += sizeof ops->ran / sizeof(long);
    for (int i = 0; i < DM_OPS_MAX_SKIPS; i++) out[i] = i < ops->n_skip ? ops->skip[i].n : 0;
}
void dm_ops_counts_add(dm_ops *ops, const long *d) {
    long *c = &ops->calls[0][0], *r = &ops->ran[0][0][0];
    for (size_t i = 0; i < sizeof ops->calls / sizeof(long); i++) c[i] += *d++;
    for (size_t i = 0; i < sizeof ops->ran / sizeof(long); i++) r[i] += *d++;
    for (int i = 0; i < ops->n_skip; i++) ops->skip[i].n += d[i];
}

double dm_ops_verify_take(dm_ops *ops, char *what, size_t n) {
    double r = ops->verify_calls ? ops->verify_max : -1;
    if (what) snprintf(what, n, "%s", ops->verify_what);
    ops->verify_max = 0;
    ops->verify_what[0] = 0;
    ops->verify_calls = 0;
    return r;
}

/* ---- reports ---- */

static int has_reference(const dm_ops *ops, int op) {
    int n = n_impl(ops, op);
    return n > 1 && impl_at(ops, op, n - 1)->reference;
}

/* calls of (op, dir) run by a non-reference implementation */
static long fast_calls(const dm_ops *ops, int op, int dir) {
    long f = 0;
    for (int i = 0; i < n_impl(ops, op); i++)
        if (!impl_at(ops, op, i)->reference) f += ops->ran[op][dir][i];
    return f;
}

#define APPEND(...)                                                                    \
    do {                                                                               \
        if (at < n) at += (size_t)snprintf(buf + at, n - at, __VA_ARGS__);            \
    } while (0)

void dm_ops_report(const dm_ops *ops, char *buf, size_t n) {
    size_t at = 0;
    long declined = 0;
    buf[0] = 0;
    APPEND("fused");
    for (int op = 0; op < DM_OP_COUNT; op++)
        for (int d = 0; d < DM_NDIR; d++) {
            if (!(DEFS[op]->dirs & (1u << d))) continue;
            long f = fast_calls(ops, op, d);
            APPEND(" %s%s%s=%ld/%ld", DEFS[op]->name, d ? "_" : "", d ? DIR[d] : "", f,
                   ops->calls[op][d]);
            if (has_reference(ops, op)) declined += ops->calls[op][d] - f;
        }
    APPEND(" declined=%ld", declined);
    for (int i = 0; i < ops->n_skip; i++) {
        const dm_skip *s = &ops->skip[i];
        APPEND("%s%s%s%s %s: %ld (%s)", i ? "; " : " [", DEFS[s->op]->name, s->dir ? "_" : "",
               s->dir ? DIR[s->dir] : "", impl_at(ops, s->op, s->impl)->name, s->n, s->reason);
    }
    if (ops->n_skip) APPEND("]");
}

void dm_ops_table(const dm_ops *ops, char *buf, size_t n) {
    size_t at = 0;
    int verified = 0;
    buf[0] = 0;
    for (int op = 0; op < DM_OP_COUNT; op++)
        for (int d = 0; d < DM_NDIR; d++) verified |= ops->verify_op[op][d] >= 0;
    APPEND("  %-16s %8s  %-30s %s\n", "op", "calls", "ran", "not run (why)");
    for (int op = 0; op < DM_OP_COUNT; op++)
        for (int d = 0; d < DM_NDIR; d++) {
            const dm_op_def *def = DEFS[op];
            if (!(def->dirs & (1u << d)) || !ops->calls[op][d]) continue;
            char name[40], ran[128] = "", skip[512] = "";
            size_t r = 0, k = 0;
            snprintf(name, sizeof name, "%s.%s", def->name, DIR[d]);
            for (int i = 0; i < n_impl(ops, op); i++)
                if (ops->ran[op][d][i] && r < sizeof ran)
                    r += (size_t)snprintf(ran + r, sizeof ran - r, "%s%s %ld", r ? ", " : "",
                                          impl_at(ops, op, i)->name, ops->ran[op][d][i]);
            for (int i = 0; i < ops->n_skip; i++) {
                const dm_skip *s = &ops->skip[i];
                if (s->op != op || s->dir != d || k >= sizeof skip) continue;
                k += (size_t)snprintf(skip + k, sizeof skip - k, "%s%s %ld (%s)", k ? "; " : "",
                                      impl_at(ops, op, s->impl)->name, s->n, s->reason);
            }
            if (verified && ops->verify_op[op][d] >= 0 && k < sizeof skip)
                snprintf(skip + k, sizeof skip - k, "%sverify %.2g", k ? "; " : "",
                         ops->verify_op[op][d]);
            if (skip[0]) APPEND("  %-16s %8ld  %-30s %s\n", name, ops->calls[op][d], ran, skip);
            else APPEND("  %-16s %8ld  %s\n", name, ops->calls[op][d], ran);
        }
    if (ops->skip_lost) APPEND("  (%ld more calls not run by an implementation, reasons not kept)\n",
                               ops->skip_lost);
}
