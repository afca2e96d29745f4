/* norm.cu — the row norms: RMSNorm, the per-head gated RMSNorm, the per-head L2 norm and
 * its SiLU-fused form. One warp per row: lane l takes the row's elements l, l + 32, ...;
 * a row's sums are the warp butterfly of the lanes' serial partials (a fixed order). The
 * weight gradients are column sums in a fixed order (device.cuh dm_colsum). */
#include "kernels/cuda/device.cuh"

#define ROWS_PER_BLOCK 8 /* warps (rows) per block of 256 threads */

static inline unsigned row_blocks(int rows) {
    return (unsigned)((rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);
}
/* this thread's row and lane; false past the last row */
static __device__ __forceinline__ bool row_lane(int rows, int *r, int *lane) {
    *r = blockIdx.x * ROWS_PER_BLOCK + (int)(threadIdx.x >> 5);
    *lane = (int)(threadIdx.x & 31);
    return *r < rows;
}

/* ---- RMSNorm ---- */
static __global__ void k_rms_fwd(float *y, float *rstd, const float *x, const float *w, int N,
                                 int C, float eps) {
    int n, l;
    if (!row_lane(N, &n, &l)) return;
    const float *xr = x + (size_t)n * C;
    float *yr = y + (size_t)n * C;
    float ss = 0.0f;
    for (int c = l; c < C; c += 32) ss += xr[c] * xr[c];
    float r = 1.0f / sqrtf(dm_warp_sum(ss) / (float)C + eps);
    if (l == 0) rstd[n] = r;
    for (int c = l; c < C; c += 32) yr[c] = xr[c] * r * w[c];
}
extern "C" int dm_cuda_rmsnorm_fwd(float *y, float *rstd, const float *x, const float *w, int N,
                                   int C, float eps, dm_cuda_stream s) {
    if (N <= 0) return 0;
    k_rms_fwd<<<row_blocks(N), 32 * ROWS_PER_BLOCK, 0, s>>>(y, rstd, x, w, N, C, eps);
    return dm_launched();
}

/* dx += r w dy - x r^3/C sum_c(dy w x) */
static __global__ void k_rms_bwd(float *dx, const float *dy, const float *x, const float *w,
                                 const float *rstd, int N, int C) {
    int n, l;
    if (!row_lane(N, &n, &l)) return;
    const size_t o = (size_t)n * C;
    float dot = 0.0f;
    for (int c = l; c < C; c += 32) dot += dy[o + c] * w[c] * x[o + c];
    float r = rstd[n], k = dm_warp_sum(dot) * r * r * r / (float)C;
    for (int c = l; c < C; c += 32) dx[o + c] += r * w[c] * dy[o + c] - k * x[o + c];
}
struct rms_dw_term { /* dy x rstd at (n, c) */
    const float *dy, *x, *rstd;
    int C;
    __device__ float operator()(int n, int c) const {
        size_t i = (size_t)n * C + c;
        return dy[i] * x[i] * rstd[n];
    }
};
extern "C" int dm_cuda_rmsnorm_bwd(float *dx, float *dw, const float *dy, const float *x,
                                   const float *w, const float *rstd, int N, int C,
                                   dm_cuda_stream s) {
    if (N <= 0) return 0;
    int err = dm_colsum<float>(dw, N, C, rms_dw_term{dy, x, rstd, C}, s);
    if (err) return err;
    k_rms_bwd<<<row_blocks(N), 32 * ROWS_PER_BLOCK, 0, s>>>(dx, dy, x, w, rstd, N, C);
    return dm_launched();
}

/* ---- the gated RMSNorm: act(z) = sigmoid(z) or z sigmoid(z) ---- */
static __device__ __forceinline__ float gate_act(float z, float sg, bool swish) {
    return swish ? z * sg : sg;
}
static __device__ __forceinline__ float gate_dact(float z, float sg, bool swish) {
    return swish ? dm_dsilu(z, sg) : sg * (1.0f - sg);
}
static __global__ void k_gn_fwd(float *y, float *rstd, const float *o, const float *z,
                                const float *w, int R, int D, float eps, bool swish) {
    int r, l;
    if (!row_lane(R, &r, &l)) return;
    const size_t off = (size_t)r * D;
    float ss = 0.0f;
    for (int d = l; d < D; d += 32) ss += o[off + d] * o[off + d];
    float k = 1.0f / sqrtf(dm_warp_sum(ss) / (float)D + eps);
    if (l == 0) rstd[r] = k;
    for (int d = l; d < D; d += 32) {
        float zn = z[off + d];
        y[off + d] = o[off + d] * k * w[d] * gate_act(zn, dm_sigm(zn), swish);
    }
}
extern "C" int dm_cuda_gatednorm_fwd(float *y, float *rstd, const float *o, const float *z,
                                     const float *w, int R, int D, float eps, int act,
                                     dm_cuda_stream s) {
    if (R <= 0) return 0;
    k_gn_fwd<<<row_blocks(R), 32 * ROWS_PER_BLOCK, 0, s>>>(y, rstd, o, z, w, R, D, eps,
                                                          act == DM_GATE_SWISH);
    return dm_launched();
}
/* with gn = dy w a(z), g = dy o rstd:
 * do_ = rstd gn - o rstd^3/D sum_d(gn o);  dz = g w a'(z);  dw += g a(z) */
static __global__ void k_gn_bwd(float *do_, float *dz, const float *dy, const float *o,
                                const float *z, const float *w, const float *rstd, int R, int D,
                                bool swish) {
    int r, l;
    if (!row_lane(R, &r, &l)) return;
    const size_t off = (size_t)r * D;
    float dot = 0.0f;
    for (int d = l; d < D; d += 32) {
        float zn = z[off + d];
        dot += dy[off + d] * w[d] * gate_act(zn, dm_sigm(zn), swish) * o[off + d];
    }
    float k = rstd[r], q = dm_warp_sum(dot) * k * k * k / (float)D;
    for (int d = l; d < D; d += 32) {
        float zn = z[off + d], sg = dm_sigm(zn), on = o[off + d], g = dy[off + d] * on * k;
        do_[off + d] = k * (dy[off + d] * w[d] * gate_act(zn, sg, swish)) - q * on;
        dz[off + d] = g * w[d] * gate_dact(zn, sg, swish);
    }
}
struct gn_dw_term { /* dy o rstd a(z) at (r, d) */
    const float *dy, *o, *z, *rstd;
    int D;
    bool swish;
    __device__ float operator()(int r, int d) const {
        size_t i = (size_t)r * D + d;
        float zn = z[i];
        return dy[i] * o[i] * rstd[r] * gate_act(zn, dm_sigm(zn), swish);
    }
};
extern "C" int dm_cuda_gatednorm_bwd(float *do_, float *dz, float *dw, const float *dy,
                                     const float *o, const float *z, const float *w,
                                     const float *rstd, int R, int D, int act,
                                     dm_cuda_stream s) {
    if (R <= 0) return 0;
    bool swish = act == DM_GATE_SWISH;
    int err = dm_colsum<float>(dw, R, D, gn_dw_term{dy, o, z, rstd, D, swish}, s);
    if (err) return err;
    k_gn_bwd<<<row_blocks(R), 32 * ROWS_PER_BLOCK, 0, s>>>(do_, dz, dy, o, z, w, rstd, R, D,
                                                          swish);
    return dm_launched();
}

/* ---- the L2 norm, plain (silu = false) or of silu(x) ---- */
static __global__ void k_l2_fwd(float *y, float *rn, const float *x, int R, int D, float eps,
                                bool silu) {
    int r, l;
    if (!row_lane(R, &r, &l)) return;
    const size_t off = (size_t)r * D;
    float ss = 0.0f;
    for (int d = l; d < D; d += 32) {
        float xi = x[off + d], v = silu ? xi * dm_sigm(xi) : xi;
        y[off + d] = v; /* this lane's own elements: read back below by the same lane */
        ss += v * v;
    }
    float k = 1.0f / sqrtf(dm_warp_sum(ss) + eps);
    if (l == 0) rn[r] = k;
    for (int d = l; d < D; d += 32) y[off + d] *= k;
}
/* dx = rn (dy - (dy.y) y), times silu'(xs) when xs != NULL; each lane writes only the
 * elements it read, after the row's sum: dx may == dy */
static __global__ void k_l2_bwd(float *dx, const float *dy, const float *y, const float *rn,
                                const float *xs, int R, int D) {
    int r, l;
    if (!row_lane(R, &r, &l)) return;
    const size_t off = (size_t)r * D;
    float p = 0.0f;
    for (int d = l; d < D; d += 32) p += dy[off + d] * y[off + d];
    p = dm_warp_sum(p);
    float k = rn[r];
    for (int d = l; d < D; d += 32) {
        float v = k * (dy[off + d] - p * y[off + d]);
        if (xs) {
            float xi = xs[off + d];
            v = v * dm_dsilu(xi, dm_sigm(xi));
        }
        dx[off + d] = v;
    }
}
extern "C" int dm_cuda_l2norm_fwd(float *y, float *rn, const float *x, int R, int D, float eps,
                                  dm_cuda_stream s) {
    if (R <= 0) return 0;
    k_l2_fwd<<<row_blocks(R), 32 * ROWS_PER_BLOCK, 0, s>>>(y, rn, x, R, D, eps, false);
    return dm_launched();
}
extern "C" int dm_cuda_l2norm_bwd(float *dx, const float *dy, const float *y, const float *rn,
                                  int R, int D, dm_cuda_stream s) {
    if (R <= 0) return 0;
    k_l2_bwd<<<row_blocks(R), 32 * ROWS_PER_BLOCK, 0, s>>>(dx, dy, y, rn, NULL, R, D);
    return dm_launched();
}
extern "C" int dm_cuda_silu_l2norm_fwd(float *y, float *rn, const float *x, int R, int D,
                                       float eps, dm_cuda_stream s) {
    if (R <= 0) return 0;
    k_l2_fwd<<<row_blocks(R), 32 * ROWS_PER_BLOCK, 0, s>>>(y, rn, x, R, D, eps, true);
    return dm_launched();
}
extern "C" int dm_cuda_silu_l2norm_bwd(float *dx, const float *dy, const float *y,
                                       const float *rn, const float *xs, int R, int D,
                                       dm_cuda_stream s) {
    if (R <= 0) return 0;
    k_l2_bwd<<<row_blocks(R), 32 * ROWS_PER_BLOCK, 0, s>>>(dx, dy, y, rn, xs, R, D);
    return dm_launched();
}
