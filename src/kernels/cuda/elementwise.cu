/* elementwise.cu — the elementwise kernels: bf16 rounding, SiLU, sigmoid, SwiGLU, the
 * residual add, the forget gate and the bias companions of the matmul. Each element is
 * read before it is written, so the backward kernels run in place (dx == dy). */
#include "kernels/cuda/device.cuh"
#include "ref/ns_sched.h" /* the Stiefel retraction's schedule */

/* ---- bf16: dm_bf16_of's bits ---- */
static __global__ void k_bf16(uint16_t *dst, const float *src, size_t n) {
    DM_GRID_STRIDE(i, n) dst[i] = dm_bf16_bits(src[i]);
}
extern "C" int dm_cuda_bf16_from_f32(uint16_t *dst, const float *src, size_t n,
                                     dm_cuda_stream s) {
    if (n == 0) return 0;
    k_bf16<<<dm_ew_blocks(n), DM_EW_THREADS, 0, s>>>(dst, src, n);
    return dm_launched();
}

/* ---- activations ---- */
static __global__ void k_silu_fwd(float *y, const float *x, size_t n) {
    DM_GRID_STRIDE(i, n) y[i] = x[i] * dm_sigm(x[i]);
}
static __global__ void k_silu_bwd(float *dx, const float *dy, const float *x, size_t n) {
    DM_GRID_STRIDE(i, n) {
        float xi = x[i];
        dx[i] = dy[i] * dm_dsilu(xi, dm_sigm(xi));
    }
}
static __global__ void k_sigmoid_fwd(float *y, const float *x, size_t n) {
    DM_GRID_STRIDE(i, n) y[i] = dm_sigm(x[i]);
}
static __global__ void k_sigmoid_bwd(float *dx, const float *dy, const float *y, size_t n) {
    DM_GRID_STRIDE(i, n) dx[i] = dy[i] * y[i] * (1.0f - y[i]);
}
static __global__ void k_swiglu_fwd(float *h, const float *a, const float *b, size_t n) {
    DM_GRID_STRIDE(i, n) h[i] = a[i] * dm_sigm(a[i]) * b[i];
}
static __global__ void k_swiglu_bwd(float *da, float *db, const float *dh, const float *a,
                                    const float *b, size_t n) {
    DM_GRID_STRIDE(i, n) {
        float ai = a[i], bi = b[i], g = dh[i], s = dm_sigm(ai);
        da[i] = g * bi * dm_dsilu(ai, s);
        db[i] = g * ai * s;
    }
}
static __global__ void k_add(float *y, const float *x, size_t n) {
    DM_GRID_STRIDE(i, n) y[i] += x[i];
}

#define EW_LAUNCH(kernel, n, ...)                                                        \
    do {                                                                                 \
        if ((n) == 0) return 0;                                                          \
        kernel<<<dm_ew_blocks(n), DM_EW_THREADS, 0, s>>>(__VA_ARGS__, n);                \
        return dm_launched();                                                            \
    } while (0)

extern "C" int dm_cuda_silu_fwd(float *y, const float *x, size_t n, dm_cuda_stream s) {
    EW_LAUNCH(k_silu_fwd, n, y, x);
}
extern "C" int dm_cuda_silu_bwd(float *dx, const float *dy, const float *x, size_t n,
                                dm_cuda_stream s) {
    EW_LAUNCH(k_silu_bwd, n, dx, dy, x);
}
extern "C" int dm_cuda_sigmoid_fwd(float *y, const float *x, size_t n, dm_cuda_stream s) {
    EW_LAUNCH(k_sigmoid_fwd, n, y, x);
}
extern "C" int dm_cuda_sigmoid_bwd(float *dx, const float *dy, const float *y, size_t n,
                                   dm_cuda_stream s) {
    EW_LAUNCH(k_sigmoid_bwd, n, dx, dy, y);
}
extern "C" int dm_cuda_swiglu_fwd(float *h, const float *a, const float *b, size_t n,
                                  dm_cuda_stream s) {
    EW_LAUNCH(k_swiglu_fwd, n, h, a, b);
}
extern "C" int dm_cuda_swiglu_bwd(float *da, float *db, const float *dh, const float *a,
                                  const float *b, size_t n, dm_cuda_stream s) {
    EW_LAUNCH(k_swiglu_bwd, n, da, db, dh, a, b);
}
extern "C" int dm_cuda_add_inplace(float *y, const float *x, size_t n, dm_cuda_stream s) {
    EW_LAUNCH(k_add, n, y, x);
}
static __global__ void k_scale(float *y, const float *x, float a, size_t n) {
    DM_GRID_STRIDE(i, n) y[i] = x[i] * a;
}
extern "C" int dm_cuda_scale(float *y, const float *x, float a, size_t n, dm_cuda_stream s) {
    EW_LAUNCH(k_scale, n, y, x, a);
}

/* ---- the forget gate (gate.c's math; e = exp(-|u|) shared by softplus and sigmoid) ---- */
static __device__ __forceinline__ float softplus_e(float u, float e) {
    return u > 20.0f ? u : fmaxf(u, 0.0f) + log1pf(e);
}
static __device__ __forceinline__ float sigm_e(float u, float e) {
    return (u >= 0.0f ? 1.0f : e) / (1.0f + e);
}
static __global__ void k_gate_fwd(float *g, const float *f, const float *A_log,
                                  const float *dt_bias, int H, int Cg, float lb, size_t n) {
    DM_GRID_STRIDE(i, n) {
        int hc = (int)(i % ((size_t)H * Cg)), h = hc / Cg;
        float A = expf(A_log[h]), u = f[i] + dt_bias[hc];
        g[i] = lb == 0.0f ? -A * softplus_e(u, expf(-fabsf(u))) : lb * dm_sigm(A * u);
    }
}
extern "C" int dm_cuda_gate_fwd(float *g, const float *f, const float *A_log,
                                const float *dt_bias, int N, int H, int Cg, float lb,
                                dm_cuda_stream s) {
    size_t n = (size_t)N * H * Cg;
    EW_LAUNCH(k_gate_fwd, n, g, f, A_log, dt_bias, H, Cg, lb);
}

/* the gate's derivatives at element i: df (the input gradient) and the dA_log term */
struct gate_terms {
    const float *dg, *f, *A_log, *dt_bias;
    int H, Cg;
    float lb;
    __device__ void at(size_t i, float *df, float *dA) const {
        int hc = (int)(i % ((size_t)H * Cg)), h = hc / Cg;
        float A = expf(A_log[h]), u = f[i] + dt_bias[hc], d = dg[i];
        if (lb == 0.0f) {
            float e = expf(-fabsf(u));
            *df = d * (-A * sigm_e(u, e));
            *dA = d * (-A * softplus_e(u, e));
        } else {
            float sg = dm_sigm(A * u);
            *df = d * (lb * sg * (1.0f - sg) * A);
            *dA = *df * u;
        }
    }
};
/* ddt_bias's column term: df at row n, column hc of [N, H*Cg] */
struct gate_dt_term {
    gate_terms t;
    __device__ float operator()(int n, int hc) const {
        float df, dA;
        t.at((size_t)n * t.H * t.Cg + hc, &df, &dA);
        return df;
    }
};
/* dA_log[h] += sum over (n, c) in order of the row-major [N, Cg] slice of head h, in
 * double as on the CPU; one block per head */
static __global__ void k_gate_dA(float *dA_log, gate_terms t, int N) {
    const int h = blockIdx.x;
    const size_t m = (size_t)N * t.Cg;
    double acc = 0.0;
    for (size_t e = threadIdx.x; e < m; e += DM_BS_THREADS) {
        size_t n = e / t.Cg, c = e % t.Cg;
        float df, dA;
        t.at((n * t.H + h) * t.Cg + c, &df, &dA);
        acc += dA;
    }
    double total = dm_block_sum<double>(acc);
    if (threadIdx.x == 0) dA_log[h] += (float)total;
}
static __global__ void k_gate_df(float *df, gate_terms t, size_t n) {
    DM_GRID_STRIDE(i, n) {
        float v, dA;
        t.at(i, &v, &dA);
        df[i] = v;
    }
}
/* the parameter gradients read dg first: df (which may alias dg) is written last */
extern "C" int dm_cuda_gate_bwd(float *df, float *dA_log, float *ddt_bias, const float *dg,
                                const float *f, const float *A_log, const float *dt_bias,
                                int N, int H, int Cg, float lb, dm_cuda_stream s) {
    size_t n = (size_t)N * H * Cg;
    if (n == 0) return 0;
    gate_terms t = {dg, f, A_log, dt_bias, H, Cg, lb};
    int err = dm_colsum<double>(ddt_bias, N, H * Cg, gate_dt_term{t}, s);
    if (err) return err;
    k_gate_dA<<<H, DM_BS_THREADS, 0, s>>>(dA_log, t, N);
    if ((err = dm_launched())) return err;
    k_gate_df<<<dm_ew_blocks(n), DM_EW_THREADS, 0, s>>>(df, t, n);
    return dm_launched();
}

/* ---- the matmul's bias ---- */
static __global__ void k_bias_add(float *out, const float *bias, int O, size_t n) {
    DM_GRID_STRIDE(i, n) out[i] += bias[i % O];
}
extern "C" int dm_cuda_bias_add(float *out, const float *bias, int N, int O, dm_cuda_stream s) {
    size_t n = (size_t)N * O;
    EW_LAUNCH(k_bias_add, n, out, bias, O);
}
struct read_term {
    const float *x;
    int cols;
    __device__ float operator()(int r, int c) const { return x[(size_t)r * cols + c]; }
};
extern "C" int dm_cuda_bias_grad(float *dbias, const float *dout, int N, int O,
                                 dm_cuda_stream s) {
    return dm_colsum<float>(dbias, N, O, read_term{dout, O}, s);
}

/* ---- the optimizer: the gradient's sum of squares and AdamW ---- */
static __global__ void k_sumsq_part(double *work, const float *x, size_t n, size_t per) {
    size_t s = (size_t)blockIdx.x * per, e = s + per < n ? s + per : n;
    double acc = 0.0;
    for (size_t i = s + threadIdx.x; i < e; i += DM_BS_THREADS) acc += (double)x[i] * x[i];
    double total = dm_block_sum<double>(acc);
    if (threadIdx.x == 0) work[blockIdx.x] = total;
}
static __global__ void k_sumsq_total(double *out, const double *work) {
    double total = dm_block_sum<double>(threadIdx.x < DM_CUDA_SUMSQ_BLOCKS ? work[threadIdx.x] : 0.0);
    if (threadIdx.x == 0) *out = total;
}
extern "C" int dm_cuda_sumsq(double *out, const float *x, size_t n, double *work,
                             dm_cuda_stream s) {
    static_assert(DM_CUDA_SUMSQ_BLOCKS == DM_BS_THREADS, "one thread per slice in the total");
    size_t per = (n + DM_CUDA_SUMSQ_BLOCKS - 1) / DM_CUDA_SUMSQ_BLOCKS;
    k_sumsq_part<<<DM_CUDA_SUMSQ_BLOCKS, DM_BS_THREADS, 0, s>>>(work, x, n, per);
    int err = dm_launched();
    if (err) return err;
    k_sumsq_total<<<1, DM_BS_THREADS, 0, s>>>(out, work);
    return dm_launched();
}
/* the norm from its square in place, and the clipping factor (ops/update.h's rule) */
static __global__ void k_norm_clip(double *norm, float *gscale, float clip) {
    double v = sqrt(*norm);
    *norm = v;
    if (gscale) *gscale = clip > 0 && v > clip ? (float)((double)clip / v) : 1.0f;
}
extern "C" int dm_cuda_grad_norm(double *norm, float *gscale, const float *x, size_t n,
                                 float clip, double *work, dm_cuda_stream s) {
    int err = dm_cuda_sumsq(norm, x, n, work, s);
    if (err) return err;
    k_norm_clip<<<1, 1, 0, s>>>(norm, gscale, clip);
    return dm_launched();
}

static __global__ void k_adamw(float *p, const float *g, float *m1, float *m2,
                               const float *hyper, float b1, float b2, float eps,
                               const float *gscale, int cautious, size_t n) {
    const float gs = gscale ? *gscale : 1.0f, lr = hyper[0], decay = hyper[1];
    const float c1 = hyper[2], c2 = hyper[3];
    DM_GRID_STRIDE(i, n) {
        float gi = g[i] * gs;
        float a = b1 * m1[i] + (1.0f - b1) * gi, v = b2 * m2[i] + (1.0f - b2) * gi * gi;
        m1[i] = a;
        m2[i] = v;
        float d = cautious && a * p[i] < 0.0f ? 1.0f : decay;
        p[i] = p[i] * d - lr * (a * c1) / (sqrtf(v * c2) + eps);
    }
}
extern "C" int dm_cuda_adamw(float *p, const float *g, float *m1, float *m2, size_t n,
                             const float *hyper, float b1, float b2, float eps,
                             const float *gscale, int cautious, dm_cuda_stream s) {
    if (n == 0) return 0;
    k_adamw<<<dm_ew_blocks(n), DM_EW_THREADS, 0, s>>>(p, g, m1, m2, hyper, b1, b2, eps, gscale,
                                                      cautious, n);
    return dm_launched();
}

/* ---- Newton–Schulz's elementwise parts ---- */
static __global__ void k_slice_sumsq(double *sumsq, const float *G, size_t len) {
    const float *g = G + (size_t)blockIdx.x * len;
    double acc = 0.0;
    for (size_t i = threadIdx.x; i < len; i += DM_BS_THREADS) acc += (double)g[i] * g[i];
    double total = dm_block_sum<double>(acc);
    if (threadIdx.x == 0) sumsq[blockIdx.x] = total;
}
static __global__ void k_slice_scale(float *X, const double *sumsq, const float *G, size_t len,
                                     double safety, size_t n) {
    DM_GRID_STRIDE(i, n) {
        double norm = sqrt(sumsq[i / len]);
        double inv = norm == 0.0 ? 0.0 : 1.0 / (safety * norm); /* polar(0) := 0 */
        X[i] = (float)((double)G[i] * inv);
    }
}
extern "C" int dm_cuda_ns_scale(float *X, double *sumsq, const float *G, int n, size_t len,
                                double safety, dm_cuda_stream s) {
    if (n <= 0 || len == 0) return 0;
    k_slice_sumsq<<<n, DM_BS_THREADS, 0, s>>>(sumsq, G, len);
    int err = dm_launched();
    if (err) return err;
    size_t total = (size_t)n * len;
    k_slice_scale<<<dm_ew_blocks(total), DM_EW_THREADS, 0, s>>>(X, sumsq, G, len, safety, total);
    return dm_launched();
}
/* B = b A, then + a on the diagonal: two roundings, as the CPU's (no fused multiply-add) */
static __global__ void k_ns_linear(float *B, const float *A, int m, float a, float b, size_t n) {
    DM_GRID_STRIDE(i, n) {
        size_t e = i % ((size_t)m * m);
        float v = __fmul_rn(b, A[i]);
        B[i] = e / m == e % m ? v + a : v;
    }
}
extern "C" int dm_cuda_ns_linear(float *B, const float *A, int n, int m, float a, float b,
                                 dm_cuda_stream s) {
    size_t total = (size_t)n * m * m;
    EW_LAUNCH(k_ns_linear, total, B, A, m, a, b);
}

/* ---- Muon's momentum and weight step ---- */
static __global__ void k_momentum(float *mom, const float *g, float *u, float beta,
                                  const float *gscale, size_t n) {
    float gs = gscale ? *gscale : 1.0f;
    DM_GRID_STRIDE(j, n) {
        float gj = g[j] * gs, mj = beta * mom[j] + (1.0f - beta) * gj;
        mom[j] = mj;
        if (u) u[j] = (1.0f - beta) * gj + beta * mj;
    }
}
extern "C" int dm_cuda_muon_momentum(float *mom, const float *g, float *u, size_t n, float beta,
                                     const float *gscale, dm_cuda_stream s) {
    EW_LAUNCH(k_momentum, n, mom, g, u, beta, gscale);
}
static __global__ void k_muon_update(float *w, const float *x, const float *ds, int cautious,
                                     size_t n) {
    const float decay = ds[0], step_scale = ds[1];
    DM_GRID_STRIDE(j, n) {
        float d = cautious && x[j] * w[j] < 0.0f ? 1.0f : decay;
        w[j] = w[j] * d - step_scale * x[j];
    }
}
extern "C" int dm_cuda_muon_update(float *w, const float *x, size_t n, const float *ds,
                                   int cautious, dm_cuda_stream s) {
    EW_LAUNCH(k_muon_update, n, w, x, ds, cautious);
}

/* ---- NorMuon (kernels/cpu/normuon.c's arithmetic): one block per slice; thread r takes
 * row r's sum of squares (in double, in order), its moment and its scale; thread 0 adds
 * the rows' norms before and after in row order; then every row is scaled ---- */
static __global__ void k_normuon(float *x, float *v, int rows, int cols, float beta2,
                                 float eps) {
    extern __shared__ double ssq[]; /* [rows] */
    __shared__ float scale[1];
    float *xs = x + (size_t)blockIdx.x * rows * cols, *vs = v + (size_t)blockIdx.x * rows;
    for (int r = threadIdx.x; r < rows; r += blockDim.x) {
        float *xr = xs + (size_t)r * cols;
        double ss = 0;
        for (int c = 0; c < cols; c++) ss += (double)xr[c] * xr[c];
        float vr = beta2 * vs[r] + (1.0f - beta2) * (float)(ss / cols);
        float k = 1.0f / (sqrtf(vr) + eps);
        vs[r] = vr;
        ssq[r] = ss;
        for (int c = 0; c < cols; c++) xr[c] *= k;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        double before = 0, after = 0;
        for (int r = 0; r < rows; r++) {
            double k = 1.0f / (sqrtf(vs[r]) + eps);
            before += ssq[r];
            after += ssq[r] * k * k;
        }
        scale[0] = (float)(sqrt(before) / (sqrt(after) + eps));
    }
    __syncthreads();
    for (size_t e = threadIdx.x; e < (size_t)rows * cols; e += blockDim.x) xs[e] *= scale[0];
}
extern "C" int dm_cuda_normuon_fits(int rows) {
    return rows > 0 && (size_t)rows * sizeof(double) <= 48 * 1024;
}
extern "C" int dm_cuda_normuon(float *x, float *v, int n, int rows, int cols, float beta2,
                               float eps, dm_cuda_stream s) {
    if (n <= 0 || cols <= 0) return 0;
    if (!dm_cuda_normuon_fits(rows)) return DM_CUDA_EBADSHAPE;
    k_normuon<<<n, DM_EW_THREADS, (size_t)rows * sizeof(double), s>>>(x, v, rows, cols, beta2,
                                                                      eps);
    return dm_launched();
}

/* ---- the sphere retraction ---- */
static __global__ void k_sphere(float *W, const float *R, const double *sumsq, size_t len,
                                size_t n) {
    DM_GRID_STRIDE(i, n) {
        size_t sl = i / len;
        double norm = sqrt(sumsq[sl]);
        if (R[sl] > 0 && norm != 0.0) W[i] = (float)((double)W[i] * ((double)R[sl] / norm));
    }
}
extern "C" int dm_cuda_retract_sphere(float *W, const float *R, int n, size_t len, double *sumsq,
                                      dm_cuda_stream s) {
    if (n <= 0 || len == 0) return 0;
    k_slice_sumsq<<<n, DM_BS_THREADS, 0, s>>>(sumsq, W, len);
    int err = dm_launched();
    if (err) return err;
    size_t total = (size_t)n * len;
    k_sphere<<<dm_ew_blocks(total), DM_EW_THREADS, 0, s>>>(W, R, sumsq, len, total);
    return dm_launched();
}

/* ---- the Stiefel retraction's per-slice steps (blas.c: dm_cuda_retract_stiefel) ----
 * Each slice's state, doubles st[i * DM_RS_STATE + k]: the defect ||A - I||_F, whether the
 * running stage applies to it (go), whether it retracts at all (s > 0), whether its Polar
 * Express rounds are over (a zero bound), whether its quintic has converged, the round's
 * bound, the previous defect. The host issues every stage for every slice; a slice the
 * stage does not apply to keeps its X (the CPU's loop, decided on the device). */
enum { RS_DELTA, RS_GO, RS_ACTIVE, RS_STOP, RS_CONV, RS_BOUND, RS_PREV };

static __global__ void k_rs_init(double *st, const float *s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    double *q = st + (size_t)i * DM_RS_STATE;
    for (int k = 0; k < DM_RS_STATE; k++) q[k] = 0.0;
    q[RS_ACTIVE] = s[i] > 0.0f ? 1.0 : 0.0;
}
/* X = W / s (in double, rounded once) where the slice retracts, else W */
static __global__ void k_rs_begin(float *X, const float *W, const float *s, const double *st,
                                  size_t len, size_t total) {
    DM_GRID_STRIDE(e, total) {
        size_t i = e / len;
        X[e] = st[i * DM_RS_STATE + RS_ACTIVE] != 0.0 ? (float)((double)W[e] * (1.0 / (double)s[i]))
                                                     : W[e];
    }
}
/* the defect of A_i [m, m] (a block per slice, the sum in double): set (mode 0), or where
 * the stage applies (1: keeping the previous; 2: and the quintic's stop) */
static __global__ void k_rs_defect(double *st, const float *A, int m, int mode) {
    const size_t mm = (size_t)m * m;
    const float *a = A + (size_t)blockIdx.x * mm;
    double acc = 0.0;
    for (size_t e = threadIdx.x; e < mm; e += DM_BS_THREADS) {
        double d = (double)a[e] - (e / m == e % m ? 1.0 : 0.0);
        acc += d * d;
    }
    double total = dm_block_sum<double>(acc);
    if (threadIdx.x) return;
    double *q = st + (size_t)blockIdx.x * DM_RS_STATE;
    if (mode && q[RS_GO] == 0.0) return;
    q[RS_PREV] = q[RS_DELTA];
    q[RS_DELTA] = sqrt(total);
    /* converged to the fp32 floor: a cubic step that no longer halves the defect */
    if (mode == 2 && q[RS_DELTA] < 1e-3 && q[RS_DELTA] > 0.5 * q[RS_PREV]) q[RS_CONV] = 1.0;
}
/* Polar Express round r of slice i: whether it applies (defect above 0.5 and finite, the
 * rounds not over) and its bound (round 0: ||X||_F; later: sqrt of A's largest absolute row
 * sum, Gershgorin's bound on its top eigenvalue); a zero bound ends the rounds */
static __global__ void k_rs_round(double *st, const float *X, const float *A, size_t len, int m,
                                  int round) {
    __shared__ double best[DM_BS_THREADS];
    double *q = st + (size_t)blockIdx.x * DM_RS_STATE;
    double acc = 0.0, mx = 0.0;
    if (round == 0) {
        const float *x = X + (size_t)blockIdx.x * len;
        for (size_t e = threadIdx.x; e < len; e += DM_BS_THREADS) acc += (double)x[e] * x[e];
    } else {
        const float *a = A + (size_t)blockIdx.x * m * m;
        for (int r = threadIdx.x; r < m; r += DM_BS_THREADS) {
            double row = 0.0;
            for (int j = 0; j < m; j++) row += fabs((double)a[(size_t)r * m + j]);
            mx = row > mx ? row : mx;
        }
    }
    double total = dm_block_sum<double>(acc);
    best[threadIdx.x] = mx;
    __syncthreads();
    for (int h = DM_BS_THREADS / 2; h > 0; h >>= 1) {
        if ((int)threadIdx.x < h && best[threadIdx.x + h] > best[threadIdx.x])
            best[threadIdx.x] = best[threadIdx.x + h];
        __syncthreads();
    }
    if (threadIdx.x) return;
    double d = q[RS_DELTA];
    int go = q[RS_ACTIVE] != 0.0 && q[RS_STOP] == 0.0 && d > 0.5 && isfinite(d);
    double bound = round == 0 ? sqrt(total) : sqrt(best[0]);
    if (go && bound == 0.0) go = 0, q[RS_STOP] = 1.0; /* polar(0) undefined: the zeros stay */
    if (!go) q[RS_STOP] = 1.0; /* a round skipped skips the later ones (the CPU's loop) */
    q[RS_GO] = go;
    q[RS_BOUND] = bound;
}
/* the quintic step of slice i applies: defect in (DM_RETRACT_STOP, 0.5], not converged */
static __global__ void k_rs_quintic(double *st, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    double *q = st + (size_t)i * DM_RS_STATE;
    double d = q[RS_DELTA];
    q[RS_GO] = q[RS_ACTIVE] != 0.0 && q[RS_CONV] == 0.0 && d > DM_RETRACT_STOP && d <= 0.5;
}
/* where the stage applies: X *= 1 / (safety bound) (mode 0); X = Y (1); at the end, where the
 * slice retracts, W = s X (2) */
static __global__ void k_rs_apply(float *X, const float *Y, const double *st, const float *s,
                                  size_t len, int mode, size_t total) {
    DM_GRID_STRIDE(e, total) {
        const double *q = st + (e / len) * DM_RS_STATE;
        if (mode == 2) {
            if (q[RS_ACTIVE] != 0.0) X[e] = (float)((double)Y[e] * (double)s[e / len]);
        } else if (q[RS_GO] != 0.0) {
            X[e] = mode ? Y[e] : (float)((double)X[e] * (1.0 / (DM_PE8_SAFETY * q[RS_BOUND])));
        }
    }
}

extern "C" int dm_cuda_rs_init(double *st, const float *sc, int n, dm_cuda_stream s) {
    k_rs_init<<<(n + 255) / 256, 256, 0, s>>>(st, sc, n);
    return dm_launched();
}
extern "C" int dm_cuda_rs_begin(float *X, const float *W, const float *sc, const double *st,
                                size_t len, int n, dm_cuda_stream s) {
    EW_LAUNCH(k_rs_begin, (size_t)n * len, X, W, sc, st, len);
}
extern "C" int dm_cuda_rs_defect(double *st, const float *A, int n, int m, int mode,
                                 dm_cuda_stream s) {
    k_rs_defect<<<n, DM_BS_THREADS, 0, s>>>(st, A, m, mode);
    return dm_launched();
}
extern "C" int dm_cuda_rs_round(double *st, const float *X, const float *A, int n, size_t len,
                                int m, int round, dm_cuda_stream s) {
    k_rs_round<<<n, DM_BS_THREADS, 0, s>>>(st, X, A, len, m, round);
    return dm_launched();
}
extern "C" int dm_cuda_rs_quintic(double *st, int n, dm_cuda_stream s) {
    k_rs_quintic<<<(n + 255) / 256, 256, 0, s>>>(st, n);
    return dm_launched();
}
extern "C" int dm_cuda_rs_apply(float *X, const float *Y, const double *st, const float *sc,
                                size_t len, int n, int mode, dm_cuda_stream s) {
    EW_LAUNCH(k_rs_apply, (size_t)n * len, X, Y, st, sc, len, mode);
}
