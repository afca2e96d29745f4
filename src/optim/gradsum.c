/* gradsum.c — the step's gradient over micro-batches and ranks, in one order (gradsum.h);
 * the additions and the mean run through the op layer (grad_add, grad_mean). */
#include "optim/gradsum.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optim/common.h"

struct dm_gradsum {
    dm_model *m;
    struct dm_backend *be; /* the model's: acc and recv are its memory */
    dm_comm *comm;
    int A, N, rank;
    size_t n;          /* parameters */
    size_t *off;       /* [N+1] shards */
    dm_bf *acc;        /* this rank's shard of the sum (one process: the whole buffer) */
    dm_bf *recv;       /* [N, shard] the pieces received (N > 1) */
};

size_t dm_gradsum_bytes(const dm_gradsum *g) {
    if (!g) return 0;
    size_t mine = g->off[g->rank + 1] - g->off[g->rank];
    if (!mine) mine = 1; /* as allocated */
    return ((g->acc ? mine : 0) + (g->recv ? mine * (size_t)g->N : 0)) * sizeof(float);
}

void dm_shard_offsets(size_t n, int N, size_t *off) {
    for (int r = 0; r <= N; r++) {
        size_t o = (size_t)((double)n * r / N) & ~(size_t)15;
        off[r] = r == N ? n : o < n ? o : n;
    }
}

dm_gradsum *dm_gradsum_create(dm_model *m, int grad_accum, dm_comm *comm, char *err,
                              size_t errlen) {
    int N = dm_comm_size(comm);
    if (grad_accum < 1 || grad_accum % N != 0) {
        snprintf(err, errlen, "grad_accum=%d does not divide among %d processes: each takes "
                 "whole micro-batches", grad_accum, N);
        return NULL;
    }
    dm_gradsum *g = calloc(1, sizeof *g);
    if (!g) goto oom;
    g->m = m;
    g->be = dm_model_backend(m);
    g->comm = comm;
    g->A = grad_accum;
    g->N = N;
    g->rank = dm_comm_rank(comm);
    g->n = dm_model_num_params(m);
    g->off = malloc(sizeof(size_t) * (size_t)(N + 1));
    if (!g->off) goto oom;
    dm_shard_offsets(g->n, N, g->off);
    size_t mine = g->off[g->rank + 1] - g->off[g->rank];
    if (N > 1 || g->A > 1) {
        g->acc = dm_backend_alloc(g->be, (mine ? mine : 1) * sizeof(float));
        if (!g->acc) goto oom;
    }
    if (N > 1) {
        g->recv = dm_backend_alloc(g->be, (mine ? mine : 1) * (size_t)N * sizeof(float));
        if (!g->recv) goto oom;
    }
    return g;
oom:
    snprintf(err, errlen, "out of memory: the gradient sum needs %.1f MiB",
             (N > 1 ? 2.0 : 1.0) * (double)dm_model_num_params(m) * sizeof(float) / (1 << 20));
    dm_gradsum_free(g);
    return NULL;
}

void dm_gradsum_free(dm_gradsum *g) {
    if (!g) return;
    free(g->off);
    dm_backend_release(g->be, g->acc);
    dm_backend_release(g->be, g->recv);
    free(g);
}

/* The exchanges between ranks read and write host memory: the backend's buffers mapped
 * (views on the CPU, copies where the backend refuses one). 0 ok; 1 failed. */
static int exchange(dm_gradsum *g, dm_bf *grads, dm_bf *recv, size_t len) {
    size_t gb = g->n * sizeof(float), rb = (len ? len : 1) * (size_t)g->N * sizeof(float);
    float *hg = dm_backend_map(g->be, grads, gb, 1), *hr = dm_backend_map(g->be, recv, rb, 0);
    int rc = !hg || !hr || dm_comm_alltoall_shards(g->comm, hg, hr, g->off);
    dm_backend_unmap(g->be, grads, hg, gb, 0);
    dm_backend_unmap(g->be, recv, hr, rb, !rc);
    return rc;
}
static int gather(dm_gradsum *g, dm_bf *grads) {
    size_t gb = g->n * sizeof(float);
    float *hg = dm_backend_map(g->be, grads, gb, 1);
    int rc = !hg || dm_comm_allgather(g->comm, hg, g->off, sizeof(float));
    dm_backend_unmap(g->be, grads, hg, gb, !rc);
    return rc;
}

int dm_gradsum_add(dm_gradsum *g, int j) {
    dm_bf *grads = dm_model_grad_mem(g->m);
    dm_ops *ops = dm_optim_ops(g->m);
    if (g->N == 1) { /* acc = g_0, then acc + g_j: the one addition of the order */
        if (g->A > 1) dm_op_grad_add(ops, g->acc, grads, g->n, j == 0);
        return 0;
    }
    size_t len = g->off[g->rank + 1] - g->off[g->rank];
    if (exchange(g, grads, g->recv, len)) return 1;
    for (int r = 0; r < g->N; r++)
        dm_op_grad_add(ops, g->acc, g->recv + (size_t)r * len, len, j == 0 && r == 0);
    return 0;
}

int dm_gradsum_finish(dm_gradsum *g) {
    dm_bf *grads = dm_model_grad_mem(g->m);
    dm_ops *ops = dm_optim_ops(g->m);
    if (g->N == 1) {
        if (g->A > 1) dm_op_grad_mean(ops, grads, g->acc, g->n, g->A);
        return 0;
    }
    size_t s = g->off[g->rank], len = g->off[g->rank + 1] - s;
    dm_op_grad_mean(ops, grads + s, g->acc, len, g->A);
    return gather(g, grads);
}
