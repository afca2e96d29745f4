/* conv.c — depthwise causal convolution along time, zero left padding, no bias.
 *
 * The taps are read as rows: the weights transposed to wt[W][C] on the stack (up to
 * CONV_WT floats; wider layers read w[c, i] in place), so every tap of a row is one
 * contiguous multiply-add over the channels (reading w[c, i] across c is a stride-W
 * gather). The weight gradient runs over blocks of CONV_CB channels in parallel, each
 * block's rows in order (its sums never depend on the thread count); blocks of 64
 * channels read 256 contiguous bytes of a row where blocks of 16 read one cache line
 * 1 KiB from the next (d = 256), and the rows 8 ahead are prefetched. Sums over taps and
 * rows run in the same order as the plain loops, so the results are the same bits as
 * theirs, in less time (docs/kernels.md). */
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/vmath.h"

#define CONV_PAR_MIN 16384 /* elements below which a parallel region does not pay */
#define CONV_CB 64         /* channels per block of the weight gradient */
#define CONV_TB 4          /* taps per pass of the weight gradient */
#define CONV_WT 8192       /* floats of transposed weights on the stack (32 KiB) */

/* wt[i*C + c] = w[c*W + i] */
static void transpose_taps(float *wt, const float *w, int C, int W) {
    for (int i = 0; i < W; i++)
        for (int c = 0; c < C; c++) wt[(size_t)i * C + c] = w[(size_t)c * W + i];
}

/* out[c] = sum_{i in [i0, W)} w(c, i) * in(i)[c], taps in order; in(i) = base + (i-i0)*step;
 * w(c, i) = wt[i*C + c] when wt, else w[c*W + i] */
static inline void taps(float *restrict out, const float *wt, const float *w, const float *base,
                        long step, int i0, int W, int C) {
    for (int c = 0; c < C; c++) out[c] = 0.0f;
    for (int i = i0; i < W; i++) {
        const float *s = base + (long)(i - i0) * step;
        if (wt) {
            const float *wi = wt + (size_t)i * C;
            for (int c = 0; c < C; c++) out[c] += wi[c] * s[c];
        } else {
            for (int c = 0; c < C; c++) out[c] += w[(size_t)c * W + i] * s[c];
        }
    }
}

/* The taps of every row of a [B*T, C] tensor: the forward (back = 1: row r sums taps
 * i in order over rows r - W + 1 + i, those inside its sequence) or the data gradient
 * (back = 0: row r sums taps i over rows r + W - 1 - i inside it). Rows over the threads. */
static void conv_rows(float *out, uint16_t *outb, const float *in, const float *w, long rows,
                      int T, int C, int W, int back) {
#pragma omp parallel if (rows * C >= CONV_PAR_MIN)
    {
        float wt[CONV_WT];
        int tr = (long)C * W <= CONV_WT;
        if (tr) transpose_taps(wt, w, C, W);
#pragma omp for schedule(static)
        for (long r = 0; r < rows; r++) {
            int t = (int)(r % T);
            /* the first tap whose row lies inside the sequence, and that row */
            int i0 = back ? (W - 1 - t > 0 ? W - 1 - t : 0) : (t + W - T > 0 ? t + W - T : 0);
            long r0 = back ? r - W + 1 + i0 : r + W - 1 - i0;
            taps(out + (size_t)r * C, tr ? wt : NULL, w, in + (size_t)r0 * C, back ? C : -(long)C,
                 i0, W, C);
            if (outb) dm_bf16_run(outb + (size_t)r * C, out + (size_t)r * C, (size_t)C);
        }
    }
}

/* x, y: [B,T,C]; w: [C,W]
 * y[b,t,c] = sum_{i<W} w[c,i] * x[b, t-W+1+i, c]   (x = 0 before t = 0; the last tap
 * w[c,W-1] multiplies the current token). Taps summed in order i = 0..W-1. */
void dm_conv_fwd(float *y, const float *x, const float *w, int B, int T, int C, int W) {
    conv_rows(y, NULL, x, w, (long)B * T, T, C, W, 1);
}

/* dy: [B,T,C]
 * dx[b,s,c]  = sum_{i: s+W-1-i < T} w[c,i] * dy[b, s+W-1-i, c]     (overwrites)
 * dw[c,i]   += sum_{b,t} dy[b,t,c] * x[b, t-W+1+i, c]   (channel blocks in parallel, rows
 *              in order) */
void dm_conv_bwd(float *dx, float *dw, const float *dy, const float *x, const float *w,
                 int B, int T, int C, int W) {
    dm_conv_bwd_yb(dx, NULL, dw, dy, x, w, B, T, C, W);
}

void dm_conv_bwd_yb(float *dx, uint16_t *dxb, float *dw, const float *dy, const float *x,
                    const float *w, int B, int T, int C, int W) {
    long rows = (long)B * T;
    int par = rows * C >= CONV_PAR_MIN;
    conv_rows(dx, dxb, dy, w, rows, T, C, W, 0);
    int nb = (C + CONV_CB - 1) / CONV_CB;
#pragma omp parallel for schedule(static) if (par)
    for (int blk = 0; blk < nb; blk++) {
        int c0 = blk * CONV_CB, nc = C - c0 < CONV_CB ? C - c0 : CONV_CB;
        for (int ia = 0; ia < W; ia += CONV_TB) {
            int ib = ia + CONV_TB < W ? ia + CONV_TB : W;
            float acc[CONV_TB][CONV_CB] = {{0}};
            for (int b = 0; b < B; b++)
                for (int t = 0; t < T; t++) {
                    const float *dyr = dy + ((size_t)b * T + t) * C + c0;
                    if (t + 8 < T) {
                        prefetch_floats(dyr + (size_t)8 * C, nc);
                        prefetch_floats(x + ((size_t)b * T + t + 8) * C + c0, nc);
                    }
                    for (int i = ia; i < ib; i++) {
                        int src = t - W + 1 + i;
                        if (src < 0) continue;
                        const float *xr = x + ((size_t)b * T + src) * C + c0;
                        float *a = acc[i - ia];
                        if (nc == CONV_CB)
                            for (int c = 0; c < CONV_CB; c++) a[c] += dyr[c] * xr[c];
                        else
                            for (int c = 0; c < nc; c++) a[c] += dyr[c] * xr[c];
                    }
                }
            for (int c = 0; c < nc; c++)
                for (int i = ia; i < ib; i++) dw[(size_t)(c0 + c) * W + i] += acc[i - ia][c];
        }
    }
}
