/* delta_chunk.c — the chunked (fused) delta-rule core, KDA and GDN, forward and backward.
 * docs/chunked.md sections 2-9; docs/architecture.md section 4; declarations in
 * kernels/cpu/delta_chunk.h (the reference's in kernels/ref/ref.h). Same semantics and
 * layout as the reference (delta_ref.c):
 *   q,k [B,T,H,dk]  v,o,dO [B,T,H,dv]  g [B,T,H,dk] (KDA) or [B,T,H] (GDN)  beta [B,T,H]
 *   h0,hT,dhT,dh0 [B,H,dk,dv]   saved (optional, see saved_pair): per pair the chunk-start
 *   states [nc,dk,dv], the rows of Dl [T,dv] and, for KDA, A and Lr [nc,C,C]; nc = ceil(T/C)
 *
 * Per (b,h) pair and chunk of n <= C tokens (rows r = 0..n-1), h = state at chunk start:
 *   G_r   = sum_{i<=r} g_i                       cumulative gate, in DOUBLE
 *   D_rj  = exp(G_r - G_j), j <= r               KDA: row by row, D_rj = e^{g_r} D_{r-1,j}
 *                                                (the recurrence's own products); GDN: per
 *                                                pair. Never exp(G_r)*exp(-G_j), never on
 *                                                the upper triangle; every D <= 1 when g <= 0
 *   A[r,j]    = scale * sum_c q_rc k_jc D_rjc    j <= r   (Aqk)
 *   Lr[r,j]   = sum_c k_rc k_jc D_rjc            j <  r   (L = Diag(beta) Lr)
 *   Qs = scale * Q . e^G    Kb = beta . e^G . K    Kg = K . e^{G_end - G}
 *   R  = beta.V - Kb h                            (WY form: U - W h = T (beta.V - Kb h))
 *   Dl = (I + L)^-1 R                             UT transform T = (I+L)^-1 applied by
 *                                                 forward substitution (Dl = "v_new")
 *   O  = Qs h + A Dl
 *   h' = Diag(e^{G_end}) h + Kg^T Dl
 * Backward per chunk in reverse, dh = gradient of the chunk-end state (dhT for the last):
 *   Y   = [dO ; -dR],   -dR = (I + L)^-T (-(A^T dO + Kg dh))      (back substitution)
 *   [dA ; dL] = Y Dl^T          [dQs ; dKb] = Y h^T          dKg = Dl dh^T
 *   dh_prev   = Diag(e^{G_end}) dh + [Qs ; Kb]^T Y
 *   then the elementwise chains (Qs, Kb, Kg, beta.V) and the pairwise terms of A and L.
 *   The gate: G_r = sum_{i<=r} g_i, so dg_i = sum_{r>=i} dG_r. Terms that touch one row
 *   (Qs, Kb) are reverse-cumsummed; terms that move between two rows (Kg: +t at G_end,
 *   -t at G_r; a pair (r,j): +t at G_r, -t at G_j) are summed straight into dg form
 *   (dg_i gets t for each such pair that straddles i), so no large +t/-t ever has to cancel
 *   in fp32 (that cancellation cost ~20x in dg accuracy under strong gates).
 *
 * fp32 throughout except the cumulative gates. Matrix products by a small register-tiled
 * kernel of our own (mm, kernels/cpu/small_mm.h: why not cblas_sgemm is said there); (b,h)
 * pairs over threads, each pair serial, a thread's pairs in groups of up to HG_MAX heads of
 * one batch row run in lockstep (fwd_group: the memory order of the rows); results are
 * bitwise independent of the thread count and of the grouping.
 * The forward can keep what the backward needs ("saved"); without it the backward reruns
 * the forward scan first. Either way the backward recomputes the pairwise decays (never
 * stored: C/2*dk floats per token).
 */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/delta_chunk.h"
#include "kernels/cpu/small_mm.h"
#include "kernels/cpu/vmath.h"

#define CH_MAX_D 256 /* dk, dv limit (dm_delta_chunk_supports) */
#define HG_MAX 4     /* heads of one batch row run in lockstep (fwd_group, bwd_group) */

/* ------------------------------------------------------------------------------------ */
/* support, sizes                                                                        */

int dm_delta_chunk_supports(const dm_delta_dims *d, int chunk, const char **why) {
    const char *w = NULL;
    if (!d) w = "no dims";
    else if (chunk != 16 && chunk != 32 && chunk != 64) w = "chunk size not in {16, 32, 64}";
    else if (d->B <= 0 || d->T <= 0 || d->H <= 0 || d->dk <= 0 || d->dv <= 0)
        w = "non-positive dims";
    else if (d->scalar_gate != 0 && d->scalar_gate != 1) w = "scalar_gate not 0/1";
    else if (d->dk > CH_MAX_D || d->dv > CH_MAX_D) w = "dk or dv above 256";
    if (why) *why = w;
    return w == NULL;
}

static inline size_t al16(size_t n) { return (n + 15) & ~(size_t)15; }
static inline int nchunks(const dm_delta_dims *d, int C) { return (d->T + C - 1) / C; }
static inline int padk(int dk) { return (dk + VL - 1) / VL * VL; }

/* per (b,h) pair: the chunk-start states [nc, dk, dv], the rows of Dl [T, dv], and for KDA
 * the intra-chunk matrices of every chunk [nc, C, C]: A in the lower triangle (with the
 * diagonal), Lr transposed in the strict upper one (so the backward needs no pairwise
 * dot products, only the decays for the pairwise gradient terms) */
static size_t saved_pair(const dm_delta_dims *d, int C) {
    const size_t nc = (size_t)nchunks(d, C);
    return nc * d->dk * d->dv + (size_t)d->T * d->dv + (d->scalar_gate ? 0 : nc * C * C);
}
size_t dm_delta_chunk_saved(const dm_delta_dims *d, int chunk) {
    return (size_t)d->B * d->H * saved_pair(d, chunk);
}

/* Per-thread workspace. All sizes in floats, each buffer 64-byte aligned relative to
 * the slice start (the caller's work pointer should be 64-byte aligned for speed).
 * dkp = dk rounded up to VL; [., dkp] rows are zero in the padding. */
typedef struct {
    int dkp;
    double *Gd;   /* GDN: [C] cumulative gate; KDA: [dk] its running row      */
    float *Gh;    /* [C, dkp] KDA: G as a float pair, Gh + Gl = G to ~2^-48   */
    float *Gl;    /* [C, dkp]                                                  */
    float *Dr;    /* [C, dkp] KDA: the decays D_rj of the row being built      */
    float *Qp;    /* [C, dkp] q rows of the chunk                              */
    float *Kp;    /* [C, dkp] k rows of the chunk                              */
    float *eG;    /* [C, dk] exp(G_r)                                          */
    float *eGk;   /* [C, dk] exp(G_end - G_r)                                  */
    float *eGend; /* [dk]                                                      */
    float *X;     /* [2n, dk]: Qs rows 0..n-1, Kb rows n..2n-1                 */
    float *Kg;    /* [C, dk]                                                   */
    float *A;     /* [C, C] Aqk, lower incl. diagonal, upper zero              */
    float *Lr;    /* [C, C] L without beta, strictly lower (the rest never read) */
    float *QK;    /* [C, C] GDN: Q K^T                                         */
    float *KK;    /* [C, C] GDN: K K^T                                         */
    float *Gm;    /* [C, C] GDN: exp(G_r - G_j), j <= r                        */
    float *Dl;    /* [C, dv] R, then (I+L)^-1 R; in the backward [dv, C] Dl^T    */
    float *S;     /* [dk, dv] state                                            */
    float *mmT;   /* scratch of mm for a transposed B                            */
    /* backward only */
    float *Y;     /* [2n, dv]: dO rows 0..n-1, -dR rows n..2n-1                */
    float *dAL;   /* [2C, C]: dA rows 0..n-1, dL rows n..2n-1 (ld C)           */
    float *dX;    /* [2n, dk]: dQs, dKb                                         */
    float *dKg;   /* [C, dk] dKg, then k . e^{G_end-G} . dKg                    */
    float *dS;    /* [dk, dv] gradient of the state                            */
    float *dqa;   /* [C, dkp] dq of the chunk                                  */
    float *dka;   /* [C, dkp] dk of the chunk                                  */
    float *dGa;   /* [C, dkp] one-sided dG terms (reverse-cumsummed into dg)   */
    float *dgi;   /* [C, dkp] KDA pairwise terms, already summed into dg form   */
    float *eGH;   /* [dk] e^{G_end} . rowsum(h . dh)                           */
    float *dba;   /* [C] dbeta                                                 */
    float *dgs;   /* [C] GDN pairwise terms in dg form                         */
    float *hs;    /* [saved_pair] this pair's saved data (when the caller has none) */
} ws_t;

static size_t ws_layout(const dm_delta_dims *d, int C, int bwd, float *base, ws_t *w) {
    const size_t dk = d->dk, dv = d->dv, Cs = C, dkp = padk(d->dk);
    const size_t gw = d->scalar_gate ? 1 : dk;
    const int kda = !d->scalar_gate;
    const size_t hg = d->H < HG_MAX ? (size_t)d->H : HG_MAX; /* heads in lockstep */
    size_t off = 0;
    if (w) memset(w, 0, sizeof *w), w->dkp = (int)dkp;
#define TAKE(field, type, n)                                                              \
    do {                                                                                  \
        size_t nf_ = al16((n) * (sizeof(type) / sizeof(float)));                          \
        if (w) w->field = (type *)(base + off);                                           \
        off += nf_;                                                                       \
    } while (0)
    TAKE(Gd, double, Cs * gw);
    if (kda) {
        TAKE(Gh, float, Cs * dkp);
        TAKE(Gl, float, Cs * dkp);
        TAKE(Dr, float, Cs * dkp);
    }
    TAKE(Qp, float, Cs * dkp);
    TAKE(Kp, float, Cs * dkp);
    TAKE(eG, float, Cs * dk);
    TAKE(eGk, float, Cs * dk);
    TAKE(eGend, float, dk);
    TAKE(X, float, 2 * Cs * dk);
    TAKE(Kg, float, Cs * dk);
    TAKE(A, float, Cs * Cs);
    TAKE(Lr, float, Cs * Cs);
    if (!kda) {
        TAKE(QK, float, Cs * Cs);
        TAKE(KK, float, Cs * Cs);
        TAKE(Gm, float, Cs * Cs);
    }
    TAKE(Dl, float, Cs * dv);
    TAKE(S, float, hg * dk * dv);
    {
        size_t a = Cs > dk ? Cs : dk, b2 = dk > dv ? dk : dv;
        if (dv > a) a = dv;
        TAKE(mmT, float, a * (b2 > (size_t)dkp ? b2 : (size_t)dkp));
    }
    if (bwd) {
        TAKE(Y, float, 2 * Cs * dv);
        TAKE(dAL, float, 2 * Cs * Cs);
        TAKE(dX, float, 2 * Cs * dk);
        TAKE(dKg, float, Cs * dk);
        TAKE(dS, float, hg * dk * dv);
        TAKE(dqa, float, Cs * dkp);
        TAKE(dka, float, Cs * dkp);
        TAKE(dGa, float, Cs * dkp);
        TAKE(dgi, float, Cs * dkp);
        TAKE(eGH, float, dk);
        TAKE(dba, float, Cs);
        TAKE(dgs, float, Cs);
        TAKE(hs, float, saved_pair(d, C)); /* without saved, groups of one (bwd_group) */
    }
#undef TAKE
    return off;
}

size_t dm_delta_chunk_fwd_work(const dm_delta_dims *d, int chunk, int nthreads) {
    return (size_t)(nthreads < 1 ? 1 : nthreads) * ws_layout(d, chunk, 0, NULL, NULL);
}
size_t dm_delta_chunk_bwd_work(const dm_delta_dims *d, int chunk, int nthreads) {
    return (size_t)(nthreads < 1 ? 1 : nthreads) * ws_layout(d, chunk, 1, NULL, NULL);
}

/* Zero what must start as zero, once per slice: the upper triangle of A (never written;
 * the triangular products read it inside their 4-row tiles) and, when dk is not a multiple
 * of VL, the padding of the [., dkp] buffers (never written either; it meets zero k and q
 * in every lane-wise product, so it must be finite). Everything else is written before it
 * is read. */
static void ws_zero(const dm_delta_dims *d, int C, int bwd, float *base, const ws_t *w) {
    if (w->dkp != d->dk) {
        size_t n = ws_layout(d, C, bwd, NULL, NULL);
        if (bwd) n -= al16(saved_pair(d, C)); /* hs, the last buffer */
        memset(base, 0, n * sizeof(float));
    } else {
        memset(w->A, 0, (size_t)C * C * sizeof(float));
    }
}

/* ------------------------------------------------------------------------------------ */
/* per-chunk pieces                                                                      */

typedef struct {
    const dm_delta_dims *d;
    const float *q, *k, *v, *g, *beta;
    size_t ldk, ldv;  /* row strides of q/k/g and v/o: H*dk, H*dv */
} in_t;

static inline size_t rowk(const dm_delta_dims *d, int b, int t, int h) {
    return (((size_t)b * d->T + t) * d->H + h) * (size_t)d->dk;
}
static inline size_t rowv(const dm_delta_dims *d, int b, int t, int h) {
    return (((size_t)b * d->T + t) * d->H + h) * (size_t)d->dv;
}
static inline size_t rows(const dm_delta_dims *d, int b, int t, int h) {
    return ((size_t)b * d->T + t) * d->H + h;
}

/* Gates and elementwise factors of chunk [t0, t0+n): Gd (Gh, Gl), Qp, Kp, eG, eGk, eGend,
 * X = [Qs; Kb], Kg.
 * KDA in two passes over the rows, each a single vector loop (it took a quarter of the
 * forward as separate loops, a libc memcpy per row and scalar double arithmetic):
 *   1. the q and k rows into Qp, Kp; G_r = G_{r-1} + g_r in double, kept as the float
 *      pair (Gh, Gl) (Gd holds the running row only);
 *   2. eG = exp(G_r), eGk = exp(G_end - G_r) from the float pairs, then Qs, Kb, Kg.
 * GDN: the scalar gate per row (Gd [C]), then the same products. */
static void chunk_gates(const in_t *in, int b, int h, int t0, int n, ws_t *w) {
    const dm_delta_dims *d = in->d;
    const int dk = d->dk, dkp = w->dkp;
    const float scale = d->scale;
    if (d->scalar_gate) {
        for (int r = 0; r < n; r++) {
            memcpy(w->Qp + (size_t)r * dkp, in->q + rowk(d, b, t0 + r, h), (size_t)dk * sizeof(float));
            memcpy(w->Kp + (size_t)r * dkp, in->k + rowk(d, b, t0 + r, h), (size_t)dk * sizeof(float));
        }
        double acc = 0;
        for (int r = 0; r < n; r++) {
            acc += (double)in->g[rows(d, b, t0 + r, h)];
            w->Gd[r] = acc;
        }
        const double Ge = w->Gd[n - 1];
        const float ee = exp_cw((float)Ge);
        for (int c = 0; c < dk; c++) w->eGend[c] = ee;
        for (int r = 0; r < n; r++) {
            const float er = exp_cw((float)w->Gd[r]), ek = exp_cw((float)(Ge - w->Gd[r]));
            float *eG = w->eG + (size_t)r * dk, *eGk = w->eGk + (size_t)r * dk;
            for (int c = 0; c < dk; c++) {
                eG[c] = er;
                eGk[c] = ek;
            }
        }
        float *Qs = w->X, *Kb = w->X + (size_t)n * dk;
        for (int r = 0; r < n; r++) {
            const float *restrict qr = w->Qp + (size_t)r * dkp, *restrict kr = w->Kp + (size_t)r * dkp;
            const float br = in->beta[rows(d, b, t0 + r, h)];
            const float *restrict eG = w->eG + (size_t)r * dk, *restrict eGk = w->eGk + (size_t)r * dk;
            float *restrict qs = Qs + (size_t)r * dk, *restrict kb = Kb + (size_t)r * dk,
                            *restrict kg = w->Kg + (size_t)r * dk;
#pragma omp simd
            for (int c = 0; c < dk; c++) {
                qs[c] = scale * qr[c] * eG[c];
                kb[c] = br * eG[c] * kr[c];
                kg[c] = kr[c] * eGk[c];
            }
        }
        return;
    }
    double *restrict G = w->Gd;
    for (int r = 0; r < n; r++) {
        const float *restrict gr = in->g + rowk(d, b, t0 + r, h);
        const float *restrict qr = in->q + rowk(d, b, t0 + r, h);
        const float *restrict kr = in->k + rowk(d, b, t0 + r, h);
        float *restrict gh = w->Gh + (size_t)r * dkp, *restrict gl = w->Gl + (size_t)r * dkp;
        float *restrict qp = w->Qp + (size_t)r * dkp, *restrict kp = w->Kp + (size_t)r * dkp;
        if (r == 0) {
#pragma omp simd
            for (int c = 0; c < dk; c++) G[c] = (double)gr[c];
        } else {
#pragma omp simd
            for (int c = 0; c < dk; c++) G[c] = G[c] + (double)gr[c];
        }
#pragma omp simd
        for (int c = 0; c < dk; c++) {
            const float hi = (float)G[c];
            gh[c] = hi;
            gl[c] = (float)(G[c] - (double)hi);
            qp[c] = qr[c];
            kp[c] = kr[c];
        }
    }
    const float *ghe = w->Gh + (size_t)(n - 1) * dkp, *gle = w->Gl + (size_t)(n - 1) * dkp;
    float *Qs = w->X, *Kb = w->X + (size_t)n * dk;
    const vf vscale = vsplat(scale);
    for (int r = 0; r < n; r++) {
        const float *gh = w->Gh + (size_t)r * dkp, *gl = w->Gl + (size_t)r * dkp;
        const float *qp = w->Qp + (size_t)r * dkp, *kp = w->Kp + (size_t)r * dkp;
        const vf br = vsplat(in->beta[rows(d, b, t0 + r, h)]);
        /* rows of dk floats: straight to their place when dk fills whole vectors, else
         * through a padded row */
        float tmp[5][CH_MAX_D + VL];
        const int direct = dk == dkp;
        float *eG = direct ? w->eG + (size_t)r * dk : tmp[0];
        float *eGk = direct ? w->eGk + (size_t)r * dk : tmp[1];
        float *qs = direct ? Qs + (size_t)r * dk : tmp[2];
        float *kb = direct ? Kb + (size_t)r * dk : tmp[3];
        float *kg = direct ? w->Kg + (size_t)r * dk : tmp[4];
        for (int c = 0; c < dkp; c += VL) {
            const vf ghc = vld(gh + c), glc = vld(gl + c);
            const vf e = vexp(ghc + glc);
            const vf ek = vexp((vld(ghe + c) - ghc) + (vld(gle + c) - glc));
            const vf q = vld(qp + c), k = vld(kp + c);
            vst(eG + c, e);
            vst(eGk + c, ek);
            vst(qs + c, vscale * q * e);
            vst(kb + c, br * e * k);
            vst(kg + c, k * ek);
        }
        if (!direct) {
            memcpy(w->eG + (size_t)r * dk, tmp[0], (size_t)dk * sizeof(float));
            memcpy(w->eGk + (size_t)r * dk, tmp[1], (size_t)dk * sizeof(float));
            memcpy(Qs + (size_t)r * dk, tmp[2], (size_t)dk * sizeof(float));
            memcpy(Kb + (size_t)r * dk, tmp[3], (size_t)dk * sizeof(float));
            memcpy(w->Kg + (size_t)r * dk, tmp[4], (size_t)dk * sizeof(float));
        }
    }
    memcpy(w->eGend, w->eG + (size_t)(n - 1) * dk, (size_t)dk * sizeof(float));
}

typedef struct {
    const float *dO, *dhT;
    float *dq, *dk, *dv, *dg, *dbeta, *dh0;
} grad_t;

/* Read the rows of tokens [t0, t0+n) for the heads h0 .. h0+nh-1 of batch row b, one float
 * per cache line, in address order: q, k, g, v and, in the backward (gr != NULL), dO and the
 * rows of dq, dk, dv, dg it is about to write (read before written: their values are not
 * used, only their lines brought in). A head alone reads 256 bytes of every KiB
 * (d2 shapes), a stride the hardware prefetcher does not follow, and the chunk's first
 * pass (chunk_gates) waited on it. Read in address order, the heads side by side, the rows
 * stream in and stay in L2 for the heads' turns. The forward's o gained nothing and is left
 * out; software prefetches of the same lines, one chunk ahead or for the other heads, did
 * not help (the measurements: docs/kernels.md). */
static void touch_rows(const in_t *in, const grad_t *gr, int b, int h0, int nh, int t0, int n) {
    const dm_delta_dims *d = in->d;
    const int nk = nh * d->dk, nv = nh * d->dv, kda = !d->scalar_gate;
    float acc = 0.f;
    for (int r = 0; r < n; r++) {
        const size_t rk = rowk(d, b, t0 + r, h0), rv = rowv(d, b, t0 + r, h0);
        for (int x = 0; x < nk; x += 16) acc += in->q[rk + x] + in->k[rk + x];
        if (kda)
            for (int x = 0; x < nk; x += 16) acc += in->g[rk + x];
        for (int x = 0; x < nv; x += 16) acc += in->v[rv + x];
        if (!gr) continue;
        for (int x = 0; x < nv; x += 16) acc += gr->dO[rv + x] + gr->dv[rv + x];
        for (int x = 0; x < nk; x += 16) acc += gr->dq[rk + x] + gr->dk[rk + x];
        if (kda)
            for (int x = 0; x < nk; x += 16) acc += gr->dg[rk + x];
    }
    volatile float sink = acc; /* keeps the loads */
    (void)sink;
}

/* one float per cache line of the three runs, in address order (see touch_rows) */
static void touch_saved(const float *a, size_t na, const float *b, size_t nb, const float *c,
                        size_t ncc) {
    float acc = 0.f;
    for (size_t x = 0; x < na; x += 16) acc += a[x];
    for (size_t x = 0; x < nb; x += 16) acc += b[x];
    if (c)
        for (size_t x = 0; x < ncc; x += 16) acc += c[x];
    volatile float sink = acc;
    (void)sink;
}



/* KDA decays, row by row: er = e^{g_r} = exp(G_r - G_{r-1}) (from the float pairs, as
 * exact as any pairwise argument; 1 for r = 0) and row r of Dr set to 1 (D_rr); the
 * caller then takes D_rj = er . D_{r-1,j} for j < r, in place. */
static void decay_row(const ws_t *w, int r, float *er, float *Dr) {
    const int dkp = w->dkp;
    const float *ghr = w->Gh + (size_t)r * dkp, *glr = w->Gl + (size_t)r * dkp;
    for (int c = 0; c < dkp; c += VL) {
        vst(Dr + (size_t)r * dkp + c, vsplat(1.f));
        if (r == 0) vst(er + c, vsplat(1.f));
        else
            vst(er + c, vexp((vld(ghr + c) - vld(ghr - dkp + c)) +
                             (vld(glr + c) - vld(glr - dkp + c))));
    }
}

/* Intra-chunk matrices A (when want_A) and Lr.
 * KDA: pairwise decays D_rjc = exp(G_rc - G_jc) for j <= r only, built row by row from
 * each row's e^{g_r} (decay_row; docs/chunked.md section 7).
 * GDN: Q K^T and K K^T by sgemm, times Gm = exp(G_r - G_j) (lower triangle only). */
static void chunk_intra(const in_t *in, int n, int C, ws_t *w) {
    const dm_delta_dims *d = in->d;
    const int dk = d->dk, dkp = w->dkp;
    const float scale = d->scale;
    if (d->scalar_gate) {
        /* QK, KK full n x n; Gm lower incl. diagonal (upper never evaluated) */
        mm(0, 1, n, n, dk, 1.f, w->Qp, dkp, w->Kp, dkp, 0.f, w->QK, C, w->mmT, TRI_C_LOWER);
        mm(0, 1, n, n, dk, 1.f, w->Kp, dkp, w->Kp, dkp, 0.f, w->KK, C, w->mmT, TRI_C_LOWER);
        for (int r = 0; r < n; r++) {
            const double Gr = w->Gd[r];
            float *gm = w->Gm + (size_t)r * C, *a = w->A + (size_t)r * C,
                  *l = w->Lr + (size_t)r * C;
            const float *qk = w->QK + (size_t)r * C, *kk = w->KK + (size_t)r * C;
            for (int j = 0; j <= r; j++) gm[j] = exp_cw((float)(Gr - w->Gd[j]));
            for (int j = 0; j <= r; j++) a[j] = scale * qk[j] * gm[j];
            for (int j = 0; j < r; j++) l[j] = kk[j] * gm[j];
        }
        return;
    }
    float *Dr = w->Dr;
    for (int r = 0; r < n; r++) {
        const float *qr = w->Qp + (size_t)r * dkp, *kr = w->Kp + (size_t)r * dkp;
        float *a = w->A + (size_t)r * C, *l = w->Lr + (size_t)r * C;
        float er[CH_MAX_D + VL];
        decay_row(w, r, er, Dr);
        int j = 0;
        /* four pairs at a time, one 8-way lane reduction */
        for (; j + 3 <= r; j += 4) {
            vf sa[4], sl[4];
            for (int u = 0; u < 4; u++) sa[u] = sl[u] = vsplat(0.f);
            const float *kj = w->Kp + (size_t)j * dkp;
            float *dj = Dr + (size_t)j * dkp;
            for (int c = 0; c < dkp; c += VL) {
                const vf q = vld(qr + c), k = vld(kr + c), e = vld(er + c);
#pragma GCC unroll 4
                for (int u = 0; u < 4; u++) {
                    const size_t o = (size_t)u * dkp + c;
                    vf D = vld(dj + o);
                    if (j + u < r) { /* D_rj = e^{g_r} D_{r-1,j}; D_rr = 1 */
                        D *= e;
                        vst(dj + o, D);
                    }
                    const vf ke = vld(kj + o) * D;
                    sa[u] = vfma(q, ke, sa[u]);
                    sl[u] = vfma(k, ke, sl[u]);
                }
            }
            const vf v8[8] = {sa[0], sa[1], sa[2], sa[3], sl[0], sl[1], sl[2], sl[3]};
            float s8[8];
            hsum8(v8, s8);
            for (int u = 0; u < 4; u++) {
                a[j + u] = scale * s8[u];
                if (j + u < r) l[j + u] = s8[4 + u];
            }
        }
        for (; j <= r; j++) {
            const float *kj = w->Kp + (size_t)j * dkp;
            float *dj = Dr + (size_t)j * dkp;
            vf sa = vsplat(0.f), sl = vsplat(0.f);
            for (int c = 0; c < dkp; c += VL) {
                vf D = vld(dj + c);
                if (j < r) {
                    D *= vld(er + c);
                    vst(dj + c, D);
                }
                const vf ke = vld(kj + c) * D;
                sa = vfma(vld(qr + c), ke, sa);
                sl = vfma(vld(kr + c), ke, sl);
            }
            a[j] = scale * hsum(sa);
            if (j < r) l[j] = hsum(sl);
        }
    }
}

/* KDA: keep A (lower with diagonal) and Lr (strict lower, stored transposed in the upper
 * triangle) of an n-row chunk in one [C, C] block, and back. */
static void pack_al(const ws_t *w, int n, int C, float *P) {
    for (int r = 0; r < n; r++) {
        memcpy(P + (size_t)r * C, w->A + (size_t)r * C, (size_t)(r + 1) * sizeof(float));
        for (int j = 0; j < r; j++) P[(size_t)j * C + r] = w->Lr[(size_t)r * C + j];
    }
}
static void unpack_al(ws_t *w, int n, int C, const float *P) {
    for (int r = 0; r < n; r++) {
        memcpy(w->A + (size_t)r * C, P + (size_t)r * C, (size_t)(r + 1) * sizeof(float));
        for (int j = 0; j < r; j++) w->Lr[(size_t)r * C + j] = P[(size_t)j * C + r];
    }
}

/* y[0..dv) += sum_{j in js} cf[j] * Y[j][0..dv): up to 4 vectors of columns per pass (four
 * independent accumulator chains), the sum over j in the given order. */
static inline void axpy_rows(float *yr, const float *Y, int dv, const float *cf, int j0, int j1,
                             int step) {
    int x = 0;
    for (; x + 4 * VL <= dv; x += 4 * VL) {
        vf a0 = vld(yr + x), a1 = vld(yr + x + VL), a2 = vld(yr + x + 2 * VL),
           a3 = vld(yr + x + 3 * VL);
        for (int j = j0; j != j1; j += step) {
            const vf c = vsplat(cf[j]);
            const float *yj = Y + (size_t)j * dv + x;
            a0 = vfma(c, vld(yj), a0);
            a1 = vfma(c, vld(yj + VL), a1);
            a2 = vfma(c, vld(yj + 2 * VL), a2);
            a3 = vfma(c, vld(yj + 3 * VL), a3);
        }
        vst(yr + x, a0);
        vst(yr + x + VL, a1);
        vst(yr + x + 2 * VL, a2);
        vst(yr + x + 3 * VL, a3);
    }
    for (; x + VL <= dv; x += VL) {
        vf a0 = vld(yr + x);
        for (int j = j0; j != j1; j += step)
            a0 = vfma(vsplat(cf[j]), vld(Y + (size_t)j * dv + x), a0);
        vst(yr + x, a0);
    }
    for (; x < dv; x++) {
        float acc = yr[x];
        for (int j = j0; j != j1; j += step) acc = VFMA(cf[j], Y[(size_t)j * dv + x], acc);
        yr[x] = acc;
    }
}

/* Forward substitution in place: Y <- (I + L)^-1 Y, L = Diag(beta) Lr strictly lower;
 * Y [n, dv] (ld dv). Row r = Y_r - sum_{j<r} beta_r Lr_rj Y_j. */
static void solve_lower(const float *Lr, int C, const float *beta_rows, float *Y, int n, int dv) {
    for (int r = 1; r < n; r++) {
        const float *l = Lr + (size_t)r * C;
        const float br = beta_rows[r];
        float cf[64];
        for (int j = 0; j < r; j++) cf[j] = -br * l[j];
        axpy_rows(Y + (size_t)r * dv, Y, dv, cf, 0, r, 1);
    }
}

/* Back substitution in place: Y <- (I + L)^-T Y, same L: row r = Y_r - sum_{j>r}
 * beta_j Lr_jr Y_j, rows from the last up. */
static void solve_upper_t(const float *Lr, int C, const float *beta_rows, float *Y, int n,
                          int dv) {
    for (int r = n - 2; r >= 0; r--) {
        float cf[64];
        for (int j = r + 1; j < n; j++) cf[j] = -beta_rows[j] * Lr[(size_t)j * C + r];
        axpy_rows(Y + (size_t)r * dv, Y, dv, cf, r + 1, n, 1);
    }
}

/* Dl = beta.V - Kb h, then Dl <- (I + L)^-1 Dl (Dl [n, dv], the caller's buffer). */
static void chunk_delta(const in_t *in, int b, int h, int t0, int n, int C, const float *S,
                        ws_t *w, float *Dl) {
    const dm_delta_dims *d = in->d;
    const int dk = d->dk, dv = d->dv;
    float br[64];
    for (int r = 0; r < n; r++) {
        const float *vr = in->v + rowv(d, b, t0 + r, h);
        br[r] = in->beta[rows(d, b, t0 + r, h)];
        float *dl = Dl + (size_t)r * dv;
        for (int j = 0; j < dv; j++) dl[j] = br[r] * vr[j];
    }
    mm(0, 0, n, dv, dk, -1.f, w->X + (size_t)n * dk, dk, S, dv, 1.f, Dl, dv, w->mmT, TRI_NONE);
    solve_lower(w->Lr, C, br, Dl, n, dv);
}

/* S' = Diag(eGend) S + Kg^T Dl, into S (in place) or into the next chunk's saved slot:
 * where the states are kept, each chunk's is written once, in its place */
static void chunk_state(const dm_delta_dims *d, int n, const float *S, float *Sn, ws_t *w,
                        const float *Dl) {
    const int dk = d->dk, dv = d->dv;
    for (int c = 0; c < dk; c++) {
        const float e = w->eGend[c];
        const float *s = S + (size_t)c * dv;
        float *sn = Sn + (size_t)c * dv;
        for (int j = 0; j < dv; j++) sn[j] = s[j] * e;
    }
    mm(1, 0, dk, dv, n, 1.f, w->Kg, dk, Dl, dv, 1.f, Sn, dv, w->mmT, TRI_NONE);
}

/* ------------------------------------------------------------------------------------ */
/* forward                                                                               */

/* The pairs (b, h0 .. h0+nh-1) of one batch row, in lockstep: chunk ci of every head, then
 * chunk ci+1. Each pair's arithmetic is exactly that of a pair run alone (the chunk's
 * scratch is rewritten for every pair and chunk; only the state is carried, one per head),
 * so the bits do not depend on the grouping. The point is the memory: the heads of a token
 * lie side by side (q, k, g, v, o rows [H, dk]), so the group reads and writes them as
 * whole runs of H*dk floats where one head alone takes 256 bytes of every KiB, a stride
 * the hardware prefetcher does not follow (docs/kernels.md). */
static void fwd_group(const in_t *in, int C, int b, int h0, int nh, const float *hinit,
                      float *o, float *hT, float *saved, ws_t *w) {
    const dm_delta_dims *d = in->d;
    const int T = d->T, dk = d->dk, dv = d->dv, nc = nchunks(d, C);
    const size_t ss = (size_t)dk * dv;
    float *S[HG_MAX], *hs[HG_MAX];
    for (int j = 0; j < nh; j++) {
        const size_t pair = (size_t)b * d->H + h0 + j;
        hs[j] = saved ? saved + pair * saved_pair(d, C) : NULL;
        /* the state at the start of chunk ci: hs[ci] when the states are kept, else w->S */
        S[j] = hs[j] ? hs[j] : w->S + j * ss;
        if (hinit) memcpy(S[j], hinit + pair * ss, ss * sizeof(float));
        else memset(S[j], 0, ss * sizeof(float));
    }
    for (int ci = 0; ci < nc; ci++) {
        const int t0 = ci * C, n = T - t0 < C ? T - t0 : C;
        for (int j = 0; j < nh; j++) {
            const int h = h0 + j;
            float *dls = hs[j] ? hs[j] + (size_t)nc * ss : NULL;
            float *als = dls && !d->scalar_gate ? dls + (size_t)T * dv : NULL;
            float *Dl = dls ? dls + (size_t)t0 * dv : w->Dl;
            float *Sn = hs[j] && ci + 1 < nc ? hs[j] + (size_t)(ci + 1) * ss : w->S + j * ss;
            if (j == 0) touch_rows(in, NULL, b, h0, nh, t0, n);
            chunk_gates(in, b, h, t0, n, w);
            chunk_intra(in, n, C, w);
            if (als) pack_al(w, n, C, als + (size_t)ci * C * C);
            chunk_delta(in, b, h, t0, n, C, S[j], w, Dl);
            float *O = o + rowv(d, b, t0, h);
            mm(0, 0, n, dv, dk, 1.f, w->X, dk, S[j], dv, 0.f, O, (int)in->ldv, w->mmT, TRI_NONE);
            mm(0, 0, n, dv, n, 1.f, w->A, C, Dl, dv, 1.f, O, (int)in->ldv, w->mmT, TRI_A_LOWER);
            chunk_state(d, n, S[j], Sn, w, Dl);
            S[j] = Sn;
        }
    }
    if (hT)
        for (int j = 0; j < nh; j++)
            memcpy(hT + ((size_t)b * d->H + h0 + j) * ss, S[j], ss * sizeof(float));
}

/* The pairs of thread t of nt: a contiguous range [p0, p1) of the B*H pairs (as an OpenMP
 * static schedule would give), walked in groups of up to HG_MAX heads of one batch row. */
static void pair_range(int npair, int t, int nt, int *p0, int *p1) {
    const int q = npair / nt, r = npair % nt;
    *p0 = t * q + (t < r ? t : r);
    *p1 = *p0 + q + (t < r);
}
static int group_len(const dm_delta_dims *d, int p, int p1, int hmax) {
    const int h = p % d->H;
    int nh = d->H - h < p1 - p ? d->H - h : p1 - p;
    return nh < hmax ? nh : hmax;
}

void dm_delta_chunk_fwd(const dm_delta_dims *d, int chunk, const float *q, const float *k,
                        const float *v, const float *g, const float *beta, const float *h0,
                        float *o, float *hT, float *saved, float *work, int nthreads) {
    const int npair = d->B * d->H;
    if (nthreads < 1) nthreads = 1;
    const size_t slice = ws_layout(d, chunk, 0, NULL, NULL);
    const in_t in = {d, q, k, v, g, beta, (size_t)d->H * d->dk, (size_t)d->H * d->dv};
#pragma omp parallel num_threads(nthreads)
    {
        float *base = work + (size_t)omp_get_thread_num() * slice;
        ws_t w;
        ws_layout(d, chunk, 0, base, &w);
        ws_zero(d, chunk, 0, base, &w);
        int p0, p1;
        pair_range(npair, omp_get_thread_num(), omp_get_num_threads(), &p0, &p1);
        for (int p = p0, nh; p < p1; p += nh) {
            nh = group_len(d, p, p1, HG_MAX);
            fwd_group(&in, chunk, p / d->H, p % d->H, nh, h0, o, hT, saved, &w);
        }
    }
}

/* ------------------------------------------------------------------------------------ */
/* backward                                                                              */

/* Pairwise (A, L) terms of one KDA chunk, VL key channels at a time with the row-r
 * accumulators in registers. The decays D = D_rj = exp(G_r - G_j), j < r, are built here
 * again, row by row, exactly as chunk_intra built them (same operations, same bits). With
 * a = scale dA_rj (j <= r), l = beta_r dL_rj (j < r):
 *   dq_r += a D.k_j;  dk_r += l D.k_j;  dk_j += D.(a q_r + l k_r);
 *   the gate: t_rj = k_j.D.(a q_r + l k_r) is d/dG_r (and -d/dG_j), so it adds to dg_i
 *   for j < i <= r. Summed directly in that form, dg_i += sum_{r>=i} sum_{j<i} t_rj, as
 *   running row prefixes (acc after j is sum_{j'<=j} t_rj', added to dg_{j+1}): no
 *   +t/-t pair ever has to cancel in floating point. */
static void intra_bwd_kda(const in_t *in, int b, int h, int t0, int n, int C, ws_t *w) {
    const dm_delta_dims *d = in->d;
    const int dkp = w->dkp;
    const float scale = d->scale;
    const float *dA = w->dAL, *dL = w->dAL + (size_t)n * C, *Lr = w->Lr;
    const float *Qp = w->Qp, *Kp = w->Kp;
    float *dqa = w->dqa, *dka = w->dka, *dgi = w->dgi, *Dr = w->Dr;
    float ac[64], lc[64];
    for (int r = 0; r < n; r++) {
        float er[CH_MAX_D + VL];
        decay_row(w, r, er, Dr);
        const float br = in->beta[rows(d, b, t0 + r, h)];
        float dbr = 0.f;
        for (int j = 0; j < r; j++) {
            const float dl = dL[(size_t)r * C + j];
            ac[j] = scale * dA[(size_t)r * C + j];
            lc[j] = br * dl;
            dbr = VFMA(dl, Lr[(size_t)r * C + j], dbr);
        }
        w->dba[r] += dbr;
        const float ad = scale * dA[(size_t)r * C + r];
        for (int c0 = 0; c0 < dkp; c0 += VL) {
            const size_t ro = (size_t)r * dkp + c0;
            const vf q = vld(Qp + ro), k = vld(Kp + ro), e = vld(er + c0);
            vf aq = vld(dqa + ro), ak = vld(dka + ro);
            vf acc = vsplat(0.f);
            const float *kjp = Kp + c0;
            float *dj = Dr + c0, *dkj = dka + c0, *gj = dgi + dkp + c0;
            for (int j = 0; j < r; j++, kjp += dkp, dj += dkp, dkj += dkp, gj += dkp) {
                const vf D = vld(dj) * e; /* as chunk_intra: D_rj = e^{g_r} D_{r-1,j} */
                vst(dj, D);
                const vf kj = vld(kjp);
                const vf p = D * kj;
                const vf av = vsplat(ac[j]), lv = vsplat(lc[j]);
                aq = vfma(p, av, aq);
                ak = vfma(p, lv, ak);
                const vf wv = D * vfma(q, av, k * lv);
                vst(dkj, vld(dkj) + wv);
                acc = vfma(kj, wv, acc);
                vst(gj, vld(gj) + acc);
            }
            /* j = r: D = 1, no gate dependence */
            aq = vfma(k, vsplat(ad), aq);
            ak = vfma(q, vsplat(ad), ak);
            vst(dqa + ro, aq);
            vst(dka + ro, ak);
        }
    }
}

/* GDN pairwise terms with Ea = scale dA . Gm (j <= r), El = Diag(beta) dL . Gm (j < r):
 *   dQ += Ea K;  dK += Ea^T Q + (El + El^T) K;  dbeta_r += sum_j dL_rj Lr_rj;
 *   M = Ea . QK + El . KK is d/dG_r (and -d/dG_j) of pair (r,j): summed into dg form
 *   directly (row prefixes, see intra_bwd_kda). Ea overwrites dA, El overwrites dL. */
static void intra_bwd_gdn(const in_t *in, int b, int h, int t0, int n, int C, ws_t *w) {
    const dm_delta_dims *d = in->d;
    const int dk = d->dk, dkp = w->dkp;
    const float scale = d->scale;
    float *Ea = w->dAL, *El = w->dAL + (size_t)n * C;
    for (int r = 0; r < n; r++) {
        const float br = in->beta[rows(d, b, t0 + r, h)];
        float *ea = Ea + (size_t)r * C, *el = El + (size_t)r * C;
        const float *gm = w->Gm + (size_t)r * C, *qk = w->QK + (size_t)r * C,
                    *kk = w->KK + (size_t)r * C, *lr = w->Lr + (size_t)r * C;
        float dbr = 0.f;
        for (int j = 0; j < r; j++) dbr = VFMA(el[j], lr[j], dbr);
        w->dba[r] += dbr;
        for (int j = 0; j <= r; j++) ea[j] = scale * ea[j] * gm[j];
        for (int j = 0; j < r; j++) el[j] = br * el[j] * gm[j];
        for (int j = r + 1; j < n; j++) ea[j] = 0.f;
        for (int j = r; j < n; j++) el[j] = 0.f;
        float acc = 0.f;
        for (int j = 0; j < r; j++) {
            acc += VFMA(ea[j], qk[j], el[j] * kk[j]);
            w->dgs[j + 1] += acc;
        }
    }
    mm(0, 0, n, dk, n, 1.f, Ea, C, w->Kp, dkp, 1.f, w->dqa, dkp, w->mmT, TRI_A_LOWER);
    mm(1, 0, n, dk, n, 1.f, Ea, C, w->Qp, dkp, 1.f, w->dka, dkp, w->mmT, TRI_A_UPPER);
    mm(0, 0, n, dk, n, 1.f, El, C, w->Kp, dkp, 1.f, w->dka, dkp, w->mmT, TRI_A_LOWER);
    mm(1, 0, n, dk, n, 1.f, El, C, w->Kp, dkp, 1.f, w->dka, dkp, w->mmT, TRI_A_UPPER);
}

/* One chunk of the backward (docs/chunked.md section 6): rows [t0, t0+n) of pair (b,h), its
 * chunk-start state S, its Dl rows and (KDA) its packed A/Lr block al; dS holds the
 * gradient of the chunk-end state and leaves with that of the chunk-start state. */
static void bwd_chunk(const in_t *in, int C, int b, int h, int t0, int n, const float *S,
                      const float *Dl, const float *al, float *dS, const grad_t *gr, ws_t *w) {
    const dm_delta_dims *d = in->d;
    const int dk = d->dk, dv = d->dv, dkp = w->dkp;
    const float scale = d->scale;
    const int kda = !d->scalar_gate;
    float br[64];
    for (int r = 0; r < n; r++) br[r] = in->beta[rows(d, b, t0 + r, h)];
    chunk_gates(in, b, h, t0, n, w);
    if (kda) unpack_al(w, n, C, al);
    else chunk_intra(in, n, C, w); /* GDN: cheap, and intra_bwd_gdn wants QK, KK, Gm */

    float *Yt = w->Y, *Yb = w->Y + (size_t)n * dv;
    for (int r = 0; r < n; r++)
        memcpy(Yt + (size_t)r * dv, gr->dO + rowv(d, b, t0 + r, h), (size_t)dv * sizeof(float));
    /* -dDl = -(A^T dO + Kg dS), then -dR by back substitution with (I+L)^T */
    mm(1, 0, n, dv, n, -1.f, w->A, C, Yt, dv, 0.f, Yb, dv, w->mmT, TRI_A_UPPER);
    mm(0, 0, n, dv, dk, -1.f, w->Kg, dk, dS, dv, 1.f, Yb, dv, w->mmT, TRI_NONE);
    solve_upper_t(w->Lr, C, br, Yb, n, dv);
    /* [dA ; dL] = Y Dl^T;  [dQs ; dKb] = Y S^T;  dKg = Dl dS^T */
    float *DlT = w->Dl; /* free in the backward: Dl^T [dv, n], transposed once for both */
    transpose(DlT, Dl, n, dv, dv);
    mm(0, 0, n, n, dv, 1.f, Yt, dv, DlT, n, 0.f, w->dAL, C, w->mmT, TRI_C_LOWER);
    mm(0, 0, n, n, dv, 1.f, Yb, dv, DlT, n, 0.f, w->dAL + (size_t)n * C, C, w->mmT,
       TRI_C_LOWER);
    mm(0, 1, 2 * n, dk, dv, 1.f, w->Y, dv, S, dv, 0.f, w->dX, dk, w->mmT, TRI_NONE);
    mm(0, 1, n, dk, dv, 1.f, Dl, dv, dS, dv, 0.f, w->dKg, dk, w->mmT, TRI_NONE);
    /* the e^{G_end} h term of the gate, then dS <- Diag(e^{G_end}) dS + [Qs;Kb]^T Y */
    for (int c = 0; c < dk; c++) {
        const float *s = S + (size_t)c * dv;
        float *ds = dS + (size_t)c * dv;
        float acc = 0.f;
    #pragma omp simd reduction(+ : acc)
        for (int j = 0; j < dv; j++) acc = VFMA(s[j], ds[j], acc);
        const float e = w->eGend[c];
        w->eGH[c] = e * acc;
        for (int j = 0; j < dv; j++) ds[j] *= e;
    }
    mm(1, 0, dk, dv, 2 * n, 1.f, w->X, dk, w->Y, dv, 1.f, dS, dv, w->mmT, TRI_NONE);

    /* elementwise chains: Qs, Kb, Kg, beta.V. Gate terms: Qs and Kb give d/dG_r
     * (reverse-cumsummed below); Kg = K e^{G_end - G} gives +t to G_end and -t to G_r,
     * i.e. dg_i += sum_{r<i} t_r (a forward prefix below, no cancellation). */
    const float *dQs = w->dX, *dKb = w->dX + (size_t)n * dk;
    for (int r = 0; r < n; r++) {
        const float *qr = w->Qp + (size_t)r * dkp, *kr = w->Kp + (size_t)r * dkp;
        const float *vr = in->v + rowv(d, b, t0 + r, h);
        const float br = in->beta[rows(d, b, t0 + r, h)];
        const float *eG = w->eG + (size_t)r * dk, *eGk = w->eGk + (size_t)r * dk;
        const float *dqs = dQs + (size_t)r * dk, *dkb = dKb + (size_t)r * dk;
        float *dkg = w->dKg + (size_t)r * dk;
        float *dqa = w->dqa + (size_t)r * dkp, *dka = w->dka + (size_t)r * dkp,
              *dGa = w->dGa + (size_t)r * dkp;
        float db = 0.f;
    #pragma omp simd reduction(+ : db)
        for (int c = 0; c < dk; c++) {
            const float dqi = scale * eG[c] * dqs[c];
            const float ekb = eG[c] * dkb[c];
            const float dkbi = br * ekb;
            const float dkgi = eGk[c] * dkg[c];
            dqa[c] = dqi;
            dka[c] = dkbi + dkgi;
            dGa[c] = qr[c] * dqi + kr[c] * dkbi;
            dkg[c] = kr[c] * dkgi;
            db = VFMA(kr[c], ekb, db);
        }
        const float *ybr = Yb + (size_t)r * dv;
        float *dvr = gr->dv + rowv(d, b, t0 + r, h);
        float dbv = 0.f;
    #pragma omp simd reduction(+ : dbv)
        for (int j = 0; j < dv; j++) {
            dvr[j] = -br * ybr[j];
            dbv = VFMA(vr[j], ybr[j], dbv);
        }
        w->dba[r] = db - dbv;
    }
    {
        float *dGl = w->dGa + (size_t)(n - 1) * dkp;
        for (int c = 0; c < dk; c++) dGl[c] += w->eGH[c];
    }
    /* pairwise terms of A and L */
    if (kda) {
        memset(w->dgi, 0, (size_t)n * dkp * sizeof(float));
        intra_bwd_kda(in, b, h, t0, n, C, w);
    } else {
        memset(w->dgs, 0, (size_t)n * sizeof(float));
        intra_bwd_gdn(in, b, h, t0, n, C, w);
    }
    /* dg_i = sum_{r>=i} dGa_r + sum_{r<i} Kg term_r + pairwise_i; write out */
    for (int r = n - 2; r >= 0; r--) {
        float *a = w->dGa + (size_t)r * dkp;
        const float *nx = w->dGa + (size_t)(r + 1) * dkp;
        for (int c = 0; c < dk; c++) a[c] += nx[c];
    }
    if (kda) {
        float *pre = w->eGH; /* reused: running prefix of the Kg term */
        memset(pre, 0, (size_t)dk * sizeof(float));
        for (int r = 0; r < n; r++) {
            const float *a = w->dGa + (size_t)r * dkp, *p = w->dgi + (size_t)r * dkp,
                        *kt = w->dKg + (size_t)r * dk;
            float *out = gr->dg + rowk(d, b, t0 + r, h);
            for (int c = 0; c < dk; c++) {
                out[c] = a[c] + pre[c] + p[c];
                pre[c] += kt[c];
            }
        }
    } else {
        float pre = 0.f;
        for (int r = 0; r < n; r++) {
            const float *a = w->dGa + (size_t)r * dkp, *kt = w->dKg + (size_t)r * dk;
            float sa = 0.f, sk = 0.f;
            for (int c = 0; c < dk; c++) {
                sa += a[c];
                sk += kt[c];
            }
            gr->dg[rows(d, b, t0 + r, h)] = sa + pre + w->dgs[r];
            pre += sk;
        }
    }
    for (int r = 0; r < n; r++) {
        const size_t rk = rowk(d, b, t0 + r, h), ra = (size_t)r * dkp;
        memcpy(gr->dq + rk, w->dqa + ra, (size_t)dk * sizeof(float));
        memcpy(gr->dk + rk, w->dka + ra, (size_t)dk * sizeof(float));
        gr->dbeta[rows(d, b, t0 + r, h)] = w->dba[r];
    }
}

static void bwd_group(const in_t *in, int C, int b, int h0, int nh, const float *hinit,
                      const float *saved, const grad_t *gr, ws_t *w) {
    const dm_delta_dims *d = in->d;
    const int T = d->T, dk = d->dk, dv = d->dv, nc = nchunks(d, C), H = d->H;
    const size_t ss = (size_t)dk * dv, sp = saved_pair(d, C);
    const int kda = !d->scalar_gate;

    /* 1. chunk-start states, Dl rows and (KDA) A/Lr: the forward's, or a scan of our own
     * (then nh = 1: the scan of a pair is dk*dv/C + dv (+ C) floats per token, a whole
     * sequence's worth, and the workspace holds one; 59 MB at T = 65536) */
    const float *hsv[HG_MAX];
    for (int j = 0; j < nh; j++) {
        const size_t pair = (size_t)b * H + h0 + j;
        hsv[j] = saved ? saved + pair * sp : w->hs; /* nh = 1 without saved */
        if (saved) continue;
        if (hinit) memcpy(w->hs, hinit + pair * ss, ss * sizeof(float));
        else memset(w->hs, 0, ss * sizeof(float));
    }
    if (!saved)
        for (int ci = 0; ci < nc; ci++) {
            const int t0 = ci * C, n = T - t0 < C ? T - t0 : C;
            float *dls = w->hs + (size_t)nc * ss, *als = dls + (size_t)T * dv;
            float *S = w->hs + (size_t)ci * ss;
            touch_rows(in, NULL, b, h0, 1, t0, n);
            chunk_gates(in, b, h0, t0, n, w);
            chunk_intra(in, n, C, w);
            if (kda) pack_al(w, n, C, als + (size_t)ci * C * C);
            chunk_delta(in, b, h0, t0, n, C, S, w, dls + (size_t)t0 * dv);
            if (ci < nc - 1) chunk_state(d, n, S, S + ss, w, dls + (size_t)t0 * dv);
        }

    /* 2. reverse over chunks, the heads of a chunk one after another */
    for (int j = 0; j < nh; j++) {
        const size_t soff = ((size_t)b * H + h0 + j) * ss;
        if (gr->dhT) memcpy(w->dS + j * ss, gr->dhT + soff, ss * sizeof(float));
        else memset(w->dS + j * ss, 0, ss * sizeof(float));
    }
    for (int ci = nc - 1; ci >= 0; ci--) {
        const int t0 = ci * C, n = T - t0 < C ? T - t0 : C;
        for (int j = 0; j < nh; j++) {
            const float *hs = hsv[j], *dls = hs + (size_t)nc * ss;
            const float *S = hs + (size_t)ci * ss, *Dl = dls + (size_t)t0 * dv;
            const float *al = kda ? dls + (size_t)T * dv + (size_t)ci * C * C : NULL;
            if (j == 0) touch_rows(in, gr, b, h0, nh, t0, n);
            /* this chunk's saved data, in address order (the transposes that read it first
             * walk 16 rows at once); prefetching it a step ahead had gained less
             * (docs/kernels.md) */
            touch_saved(S, ss, Dl, (size_t)n * dv, al, (size_t)C * C);
            bwd_chunk(in, C, b, h0 + j, t0, n, S, Dl, al, w->dS + j * ss, gr, w);
        }
    }
    for (int j = 0; j < nh; j++)
        if (gr->dh0)
            memcpy(gr->dh0 + ((size_t)b * H + h0 + j) * ss, w->dS + j * ss, ss * sizeof(float));
}

void dm_delta_chunk_bwd(const dm_delta_dims *d, int chunk, const float *q, const float *k,
                        const float *v, const float *g, const float *beta, const float *h0,
                        const float *saved, const float *dO, const float *dhT, float *dq,
                        float *dk, float *dv, float *dg, float *dbeta, float *dh0, float *work,
                        int nthreads) {
    const int npair = d->B * d->H;
    if (nthreads < 1) nthreads = 1;
    const size_t slice = ws_layout(d, chunk, 1, NULL, NULL);
    const in_t in = {d, q, k, v, g, beta, (size_t)d->H * d->dk, (size_t)d->H * d->dv};
    const grad_t gr = {dO, dhT, dq, dk, dv, dg, dbeta, dh0};
#pragma omp parallel num_threads(nthreads)
    {
        float *base = work + (size_t)omp_get_thread_num() * slice;
        ws_t w;
        ws_layout(d, chunk, 1, base, &w);
        ws_zero(d, chunk, 1, base, &w);
        int p0, p1;
        pair_range(npair, omp_get_thread_num(), omp_get_num_threads(), &p0, &p1);
        for (int p = p0, nh; p < p1; p += nh) {
            nh = group_len(d, p, p1, saved ? HG_MAX : 1); /* hs holds one pair's scan */
            bwd_group(&in, chunk, p / d->H, p % d->H, nh, h0, saved, &gr, &w);
        }
    }
}
