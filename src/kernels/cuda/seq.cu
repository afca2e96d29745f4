/* seq.cu — the ends of the network and the sequence ops: the embedding, the depthwise
 * causal conv and the softmax cross-entropy, on ids of 1, 2 or 4 bytes (bytes, or the
 * tokens of a vocabulary: dm_id_width). */
#include "kernels/cuda/device.cuh"

/* id i of ids of width w (0 or 1: bytes; 2; 4) */
static __device__ __forceinline__ unsigned dm_id(const void *ids, int w, size_t i) {
    return w == 4   ? ((const uint32_t *)ids)[i]
           : w == 2 ? ((const uint16_t *)ids)[i]
                    : ((const uint8_t *)ids)[i];
}

/* ---- embedding ---- */
static __global__ void k_embed_fwd(float *out, const void *ids, int w, const float *table, int C,
                                   size_t n) {
    DM_GRID_STRIDE(i, n) out[i] = table[(size_t)dm_id(ids, w, i / C) * C + i % C];
}
extern "C" int dm_cuda_embed_fwd(float *out, const void *ids, int w, const float *table, int N,
                                 int C, dm_cuda_stream s) {
    size_t n = (size_t)N * C;
    if (n == 0) return 0;
    k_embed_fwd<<<dm_ew_blocks(n), DM_EW_THREADS, 0, s>>>(out, ids, w, table, C, n);
    return dm_launched();
}
/* one block per id value v: each column adds the rows of v to its entry in order
 * n = 0..N-1, starting from the entry (the CPU's order: the same bits) */
static __global__ void k_embed_bwd(float *dtable, const float *dout, const void *ids, int w,
                                   int N, int C) {
    const unsigned v = blockIdx.x;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float acc = dtable[(size_t)v * C + c];
        for (int n = 0; n < N; n++)
            if (dm_id(ids, w, (size_t)n) == v) acc += dout[(size_t)n * C + c];
        dtable[(size_t)v * C + c] = acc;
    }
}
extern "C" int dm_cuda_embed_bwd(float *dtable, const float *dout, const void *ids, int w,
                                 int N, int C, int V, dm_cuda_stream s) {
    if (N <= 0 || C <= 0 || V <= 0) return 0;
    k_embed_bwd<<<(unsigned)V, C < 256 ? 32 * ((C + 31) / 32) : 256, 0, s>>>(dtable, dout, ids,
                                                                             w, N, C);
    return dm_launched();
}

/* ---- depthwise causal conv: taps summed in order, as on the CPU ---- */
static __global__ void k_conv_fwd(float *y, const float *x, const float *w, int T, int C, int W,
                                  size_t n) {
    DM_GRID_STRIDE(e, n) {
        size_t row = e / C;
        int c = (int)(e % C), t = (int)(row % T);
        float acc = 0.0f;
        for (int i = W - 1 - t > 0 ? W - 1 - t : 0; i < W; i++)
            acc += w[(size_t)c * W + i] * x[(row - (size_t)(W - 1 - i)) * C + c];
        y[e] = acc;
    }
}
/* dx[b,s,c] = sum_{i: s+W-1-i < T} w[c,i] dy[b,s+W-1-i,c] */
static __global__ void k_conv_dx(float *dx, const float *dy, const float *w, int T, int C,
                                 int W, size_t n) {
    DM_GRID_STRIDE(e, n) {
        size_t row = e / C;
        int c = (int)(e % C), t = (int)(row % T);
        float acc = 0.0f;
        for (int i = t + W - T > 0 ? t + W - T : 0; i < W; i++)
            acc += w[(size_t)c * W + i] * dy[(row + (size_t)(W - 1 - i)) * C + c];
        dx[e] = acc;
    }
}
struct conv_dw_term { /* dy[row, c] x[row - W + 1 + i, c] at (row, c*W + i) */
    const float *dy, *x;
    int T, C, W;
    __device__ float operator()(int row, int col) const {
        int c = col / W, i = col % W, src = row % T - W + 1 + i;
        if (src < 0) return 0.0f;
        return dy[(size_t)row * C + c] * x[((size_t)row - (size_t)(W - 1 - i)) * C + c];
    }
};
extern "C" int dm_cuda_conv_fwd(float *y, const float *x, const float *w, int B, int T, int C,
                                int W, dm_cuda_stream s) {
    size_t n = (size_t)B * T * C;
    if (n == 0) return 0;
    k_conv_fwd<<<dm_ew_blocks(n), DM_EW_THREADS, 0, s>>>(y, x, w, T, C, W, n);
    return dm_launched();
}
extern "C" int dm_cuda_conv_bwd(float *dx, float *dw, const float *dy, const float *x,
                                const float *w, int B, int T, int C, int W, dm_cuda_stream s) {
    size_t n = (size_t)B * T * C;
    if (n == 0) return 0;
    int err = dm_colsum<float>(dw, B * T, C * W, conv_dw_term{dy, x, T, C, W}, s);
    if (err) return err;
    k_conv_dx<<<dm_ew_blocks(n), DM_EW_THREADS, 0, s>>>(dx, dy, w, T, C, W, n);
    return dm_launched();
}

/* ---- softmax cross-entropy: one warp per row ---- */
#define XROWS 8 /* rows (warps) per block */
static __global__ void k_xent_fwd(float *losses, const float *logits, const void *targets,
                                  int w, int N, int V) {
    int n = blockIdx.x * XROWS + (int)(threadIdx.x >> 5), l = (int)(threadIdx.x & 31);
    if (n >= N) return;
    const float *x = logits + (size_t)n * V;
    float mx = -INFINITY;
    for (int v = l; v < V; v += 32) mx = fmaxf(mx, x[v]);
    mx = dm_warp_max(mx);
    float sum = 0.0f;
    for (int v = l; v < V; v += 32) sum += expf(x[v] - mx);
    sum = dm_warp_sum(sum);
    if (l == 0) losses[n] = logf(sum) + mx - x[dm_id(targets, w, (size_t)n)];
}
/* *mean = sum_n losses[n] / N in double, one block (a fixed tree) */
static __global__ void k_mean(double *mean, const float *losses, int N) {
    double acc = 0.0;
    for (int n = threadIdx.x; n < N; n += DM_BS_THREADS) acc += losses[n];
    double total = dm_block_sum<double>(acc);
    if (threadIdx.x == 0) *mean = total / N;
}
extern "C" int dm_cuda_mean(double *mean, const float *x, int N, dm_cuda_stream s) {
    if (N <= 0) return 0;
    k_mean<<<1, DM_BS_THREADS, 0, s>>>(mean, x, N);
    return dm_launched();
}
extern "C" int dm_cuda_xent_fwd(float *losses, double *mean, const float *logits,
                                const void *targets, int w, int N, int V, dm_cuda_stream s) {
    if (N <= 0) return 0;
    k_xent_fwd<<<(unsigned)((N + XROWS - 1) / XROWS), 32 * XROWS, 0, s>>>(losses, logits,
                                                                         targets, w, N, V);
    int err = dm_launched();
    if (err || !mean) return err;
    return dm_cuda_mean(mean, losses, N, s);
}
/* each lane writes only the elements it read (dlogits may == logits); the target's lane
 * subtracts after its own scaling */
static __global__ void k_xent_bwd(float *dx, const float *logits, const void *targets, int w,
                                  int N, int V, float scale) {
    int n = blockIdx.x * XROWS + (int)(threadIdx.x >> 5), l = (int)(threadIdx.x & 31);
    if (n >= N) return;
    const float *x = logits + (size_t)n * V;
    float *d = dx + (size_t)n * V;
    float mx = -INFINITY;
    for (int v = l; v < V; v += 32) mx = fmaxf(mx, x[v]);
    mx = dm_warp_max(mx);
    float sum = 0.0f;
    for (int v = l; v < V; v += 32) {
        float e = expf(x[v] - mx);
        d[v] = e;
        sum += e;
    }
    float k = scale / dm_warp_sum(sum);
    for (int v = l; v < V; v += 32) d[v] *= k;
    int t = (int)dm_id(targets, w, (size_t)n);
    if (t % 32 == l) d[t] -= scale;
}
extern "C" int dm_cuda_xent_bwd(float *dlogits, const float *logits, const void *targets, int w,
                                int N, int V, float scale, dm_cuda_stream s) {
    if (N <= 0) return 0;
    k_xent_bwd<<<(unsigned)((N + XROWS - 1) / XROWS), 32 * XROWS, 0, s>>>(dlogits, logits,
                                                                         targets, w, N, V,
                                                                         scale);
    return dm_launched();
}
