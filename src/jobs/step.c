/* step.c — one training step over micro-batches and ranks (step.h). */
#include "jobs/step.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/clock.h"
#include "model/host.h"
#include "ops/backend.h"

int dm_step_threads(const dm_config *c, const dm_comm *comm) {
    int n = c->threads, local = dm_comm_local_size(comm);
    if (n == 0 && local > 1) {
        /* mpirun binds a rank to its cores when it can (then omp sees only those); when
         * it does not, the machine's cores are shared among the ranks on it */
        int mine = omp_get_num_procs();
        long all = sysconf(_SC_NPROCESSORS_ONLN);
        if (all > 0 && mine >= all) n = (int)all / local > 0 ? (int)all / local : 1;
    }
    return n > 0 ? n : omp_get_num_procs();
}

const char *dm_step_oversubscribed(int threads, char *buf, size_t n) {
    int cores = omp_get_num_procs();
    buf[0] = 0;
    if (threads > cores)
        snprintf(buf, n, "note: threads=%d on %d core%s: oversubscribed (the threads take turns "
                 "on the cores, and a step gets slower); threads=0 uses the cores there are\n",
                 threads, cores, cores == 1 ? "" : "s");
    return buf;
}

/* The smallest grad_accum >= A that N divides, and a batch_size keeping B x A sequences
 * per step when one exists: "--set grad_accum=2 --set batch_size=4 keeps ..." */
static void suggest(int B, int A, int N, char *buf, size_t n) {
    long G = (long)B * A;
    for (long a = ((A + N - 1) / N) * (long)N; a <= G; a += N)
        if (G % a == 0) {
            snprintf(buf, n, "e.g. --set batch_size=%ld --set grad_accum=%ld keeps the step's "
                     "batch of %ld sequences", G / a, a, G);
            return;
        }
    long a = ((A + N - 1) / N) * (long)N;
    snprintf(buf, n, "e.g. --set grad_accum=%ld (a step of %ld sequences)", a, (long)B * a);
}

int dm_stepper_init(dm_stepper *s, dm_model *m, dm_optim *o, const dm_config *c, dm_comm *comm,
                    char *err, size_t errlen) {
    *s = (dm_stepper){.m = m, .opt = o, .comm = comm, .B = c->batch_size, .T = c->seq_len,
                      .A = c->grad_accum, .N = dm_comm_size(comm), .rank = dm_comm_rank(comm)};
    if (s->A % s->N != 0) {
        char how[160];
        suggest(s->B, s->A, s->N, how, sizeof how);
        snprintf(err, errlen, "grad_accum=%d does not divide among %d processes: each takes whole "
                 "micro-batches of batch_size sequences, so grad_accum must be a multiple of "
                 "%d (%s)", s->A, s->N, s->N, how);
        return 1;
    }
    s->local = s->A / s->N;
    s->gs = dm_gradsum_create(m, s->A, comm, err, errlen);
    if (!s->gs) return 1;
    if (dm_optim_set_comm(o, comm, err, errlen)) return 1;
    s->batch = malloc((size_t)s->A * s->B * (s->T + 1) * (size_t)dm_id_width(c->vocab));
    s->losses = malloc(sizeof(float) * (size_t)s->A);
    s->loss_off = malloc(sizeof(size_t) * (size_t)(s->N + 1));
    s->dloss = dm_backend_alloc(dm_model_backend(m), sizeof(double) * (size_t)s->local);
    s->hloss = malloc(sizeof(double) * (size_t)s->local);
    if (!s->batch || !s->losses || !s->loss_off || !s->dloss || !s->hloss) {
        snprintf(err, errlen, "out of memory: a step of %d x %d sequences of %d bytes", s->A,
                 s->B, s->T + 1);
        return 1;
    }
    for (int r = 0; r <= s->N; r++) s->loss_off[r] = (size_t)r * s->local;
    return 0;
}

void dm_stepper_free(dm_stepper *s) {
    dm_gradsum_free(s->gs);
    free(s->batch);
    free(s->losses);
    free(s->loss_off);
    if (s->m) dm_backend_release(dm_model_backend(s->m), s->dloss);
    free(s->hloss);
    *s = (dm_stepper){0};
}

int dm_stepper_run(dm_stepper *s, const dm_corpus *corpus, uint64_t seed, long batch_step,
                   long opt_step, dm_step_out *out) {
    double t0 = dm_now();
    dm_corpus_batch(corpus, seed, batch_step, s->A * s->B, s->T, s->batch);
    dm_corpus_prefetch(corpus, seed, batch_step + 1, s->A * s->B, s->T); /* a mapped corpus */
    double t_data = dm_now() - t0;
    int rc = dm_stepper_step(s, s->batch, opt_step, out);
    out->t_data = t_data;
    return rc;
}

int dm_stepper_step(dm_stepper *s, const void *batch, long opt_step, dm_step_out *out) {
    /* a sequence's T + 1 ids of the model's width */
    size_t seq = ((size_t)s->T + 1) * (size_t)dm_id_width(dm_model_config(s->m)->vocab);
    const uint8_t *ids = batch;
    out->t_data = 0;
    out->t_fwd = out->t_bwd = 0;
    float *mine = s->losses + s->loss_off[s->rank];
    int rc = 0;
    /* the gradient sum and the optimizer run through ops and the backend's copies: no
     * host access to the model's memory here; the losses and the gradient norm stay in
     * the backend's memory until the step's end reads them */
    dm_backend *be = dm_model_backend(s->m);
    for (int j = 0; j < s->local; j++) {
        int mb = j * s->N + s->rank; /* the global micro-batch */
        double t1 = dm_now();
        if (dm_model_forward_queued(s->m, ids + (size_t)mb * s->B * seq, s->B, s->T)) {
            double nan = NAN; /* no memory for the batch: a loss that is not a number */
            dm_backend_from_host(be, s->dloss + j, &nan, sizeof nan);
        } else {
            dm_backend_copy(be, s->dloss + j, dm_model_loss_mem(s->m), sizeof(double));
        }
        dm_backend_sync(be); /* the times below are of work done */
        double t2 = dm_now();
        dm_model_zero_grad(s->m);
        dm_model_backward(s->m);
        rc |= dm_gradsum_add(s->gs, j);
        dm_backend_sync(be);
        out->t_fwd += t2 - t1;
        out->t_bwd += dm_now() - t2;
    }
    double t3 = dm_now();
    rc |= dm_gradsum_finish(s->gs);
    double t4 = dm_now();
    out->t_bwd += t4 - t3;
    if (!rc) rc |= dm_optim_step_queued(s->opt, s->m, opt_step);
    dm_backend_sync(be);
    out->t_opt = dm_now() - t4;
    /* the step's one read of the backend: its losses and gradient norm */
    dm_backend_to_host(be, s->hloss, s->dloss, sizeof(double) * (size_t)s->local);
    out->gnorm = rc ? NAN : dm_optim_norm(s->opt);
    for (int j = 0; j < s->local; j++) mine[j] = (float)s->hloss[j];
    rc |= dm_comm_allgather(s->comm, s->losses, s->loss_off, sizeof(float));
    double sum = 0; /* in micro-batch order: m = j N + r sits at r * local + j */
    for (int mb = 0; mb < s->A; mb++) sum += (double)s->losses[(mb % s->N) * s->local + mb / s->N];
    out->loss = (float)(sum / s->A);
    return rc || dm_comm_error(s->comm)[0] ? 1 : 0;
}
