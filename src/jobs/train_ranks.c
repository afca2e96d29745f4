/* train_ranks.c — the ranks of a training run under mpirun (docs/scaling.md): rank 0 reads
 * the run directory and sends the config, the parameters and the optimizer state to the
 * others; the ranks agree after set-up, after every step and after every checkpoint, so a
 * failure on any rank, or a stop asked of any, stops them all at the same point with the
 * first failing rank's message. One process: every call here is its own answer. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "jobs/train_ranks.h"
#include "model/host.h"
#include "ops/backend.h"

/* The status of every rank agreed (the first failing rank's), and a stop asked of any
 * (the signal that asked, which every rank then carries in io->stop: they all exit as
 * the one that was signalled); one process: its own. Returns the status code. */
int train_agree(train_ctx *t) {
    int code = (int)t->st->code, failed;
    t->ranks.stop =
        dm_job_agree(t->io, t->ranks.comm, &code, t->st->msg, sizeof t->st->msg, &failed) != 0;
    t->st->code = (dm_job_code)code;
    return code;
}

/* A failed exchange between ranks as the status (0 when none failed). */
int train_comm_failed(train_ctx *t) {
    const char *e = dm_comm_error(t->ranks.comm);
    return e[0] ? dm_fail(t->st, DM_JOB_FAILED, "%s", e) : 0;
}

/* Rank 0's config to every rank, and its corpus paths unless --data / --val name them
 * (rank 0 read the run directory). */
int train_share_config(train_ctx *t) {
    if (t->ranks.n == 1) return 0;
    if (dm_comm_bcast(t->ranks.comm, &t->cfg, sizeof t->cfg, 1, 0) ||
        (!t->a->data && dm_comm_bcast(t->ranks.comm, t->data, sizeof t->data, 1, 0)) ||
        (!t->a->val && dm_comm_bcast(t->ranks.comm, t->val, sizeof t->val, 1, 0)))
        return train_comm_failed(t);
    dm_comm_set_timeout(t->ranks.comm, (double)t->cfg.comm_timeout); /* rank 0's, on every rank */
    if (t->a->data) snprintf(t->data, sizeof t->data, "%s", t->a->data);
    if (t->a->val) snprintf(t->val, sizeof t->val, "%s", t->a->val);
    return 0;
}

/* After set-up: rank 0's step count, parameters and optimizer state (a resumed run's, or
 * the fresh init every rank also made) to every rank. */
int train_share_state(train_ctx *t) {
    if (t->ranks.n == 1) return 0;
    dm_optim_buf bufs[DM_OPTIM_MAX_BUFS + 1];
    int nb = dm_optim_state(t->opt, bufs + 1, DM_OPTIM_MAX_BUFS);
    bufs[0] = (dm_optim_buf){"params", dm_model_param_mem(t->m), dm_model_num_params(t->m), 0};
    int rc = dm_comm_bcast(t->ranks.comm, &t->start, 1, sizeof t->start, 0);
    dm_backend *be = dm_model_backend(t->m);
    for (int i = 0; i <= nb && !rc; i++) { /* each through host memory */
        size_t bytes = bufs[i].n * sizeof(float);
        float *h = dm_backend_map(be, bufs[i].data, bytes, t->ranks.rank == 0);
        if (!h) return dm_fail(t->st, DM_JOB_FAILED, "out of memory sharing the state");
        rc = dm_comm_bcast(t->ranks.comm, h, bufs[i].n, sizeof(float), 0);
        dm_backend_unmap(be, bufs[i].data, h, bytes, t->ranks.rank != 0);
    }
    return rc ? train_comm_failed(t) : 0;
}

/* Every rank's corpus against rank 0's (size and CRC-32): the same on every rank. */
int train_check_corpus(train_ctx *t) {
    if (t->ranks.n == 1) return 0;
    int N = t->ranks.n, rc;
    uint64_t *fp = calloc((size_t)N * 2, sizeof *fp);
    size_t *off = malloc(sizeof(size_t) * (size_t)(N + 1));
    if (!fp || !off) {
        free(fp);
        free(off);
        return dm_fail(t->st, DM_JOB_FAILED, "out of memory");
    }
    for (int r = 0; r <= N; r++) off[r] = (size_t)r * 2 * sizeof *fp;
    fp[2 * t->ranks.rank] = t->corpus.n;
    fp[2 * t->ranks.rank + 1] = dm_corpus_crc32(&t->corpus);
    rc = dm_comm_allgather(t->ranks.comm, fp, off, 1);
    for (int r = 1; r < N && !rc && !t->st->code; r++)
        if (fp[2 * r] != fp[0] || fp[2 * r + 1] != fp[1])
            dm_fail(t->st, DM_JOB_BAD_INPUT, "the corpus %s differs between ranks: rank 0 has "
                    "%llu bytes (CRC-32 %08llx), rank %d %llu bytes (CRC-32 %08llx); every "
                    "machine needs the same corpus at that path", t->data,
                    (unsigned long long)fp[0], (unsigned long long)fp[1], r,
                    (unsigned long long)fp[2 * r], (unsigned long long)fp[2 * r + 1]);
    free(fp);
    free(off);
    return rc ? train_comm_failed(t) : (int)t->st->code;
}

/* rank 0's value of *v on every rank */
int train_from_rank0(train_ctx *t, long *v) {
    if (t->ranks.n == 1) return 0;
    return dm_comm_bcast(t->ranks.comm, v, 1, sizeof *v, 0) ? train_comm_failed(t) : 0;
}
