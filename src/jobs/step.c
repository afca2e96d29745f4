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
#include "ops/ops.h"

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

/* ---- the step as graphs ----
 * A phase's work is queued as usual the first time after a layout of the model (the
 * memory that ops grow on first use grows then), captured the second time and then
 * replayed: the same work on the same memory, reading the batch and the update's step
 * values that the host put before it. The op layer's counts of the capture are added at
 * each replay. A capture or replay the backend refuses turns the graphs off for the rest
 * of the run (a note says why) and the phase runs as queued work: nothing is lost. */
struct dm_step_graph {
    void *graph;                 /* the captured work, or NULL */
    long gen;                    /* the model's layout it was captured on */
    int warm;                    /* its work ran once on that layout */
    long counts[DM_OPS_COUNTS];  /* the op calls the capture made */
};
enum { G_FWD, G_BWD, G_OPT, G_OPT_RETRACT };
static const char *const G_NAME[] = {"forward", "backward", "update", "update (retraction)"};

static int ph_fwd(dm_stepper *s, long step) {
    (void)step;
    dm_model_forward_put(s->m);
    dm_backend_copy(dm_model_backend(s->m), s->dloss, dm_model_loss_mem(s->m), sizeof(double));
    return 0;
}
static int ph_bwd(dm_stepper *s, long step) {
    (void)step;
    dm_model_zero_grad(s->m);
    dm_model_backward(s->m);
    return dm_gradsum_add(s->gs, 0) | dm_gradsum_finish(s->gs);
}
static int ph_opt(dm_stepper *s, long step) {
    int rc = dm_optim_enqueue(s->opt, s->m, step);
    dm_backend_copy(dm_model_backend(s->m), s->dloss + 1, dm_optim_norm_mem(s->opt),
                    sizeof(double));
    return rc;
}

/* graphs off from here on, why said once; the phase's work (whose host side ran in the
 * failed capture, counted there) queued instead */
static int graphs_off(dm_stepper *s, int k, int (*work)(dm_stepper *, long), long step,
                      const long *before, const char *why) {
    snprintf(s->graph_why, sizeof s->graph_why, "the %s's %s failed: %s", G_NAME[k],
             s->g[k].graph ? "replay" : "capture", why);
    fprintf(stderr, "dormouse: note: step graphs off from here on (%s)\n", s->graph_why);
    s->graphs = 0;
    if (before) { /* the failed capture counted calls that ran nowhere */
        long now[DM_OPS_COUNTS];
        dm_model_op_counts(s->m, now);
        for (int i = 0; i < DM_OPS_COUNTS; i++) now[i] = before[i] - now[i];
        dm_model_op_counts_add(s->m, now);
    }
    if (k == G_BWD) dm_model_forward_replayed(s->m); /* its forward is done */
    return work(s, step);
}

/* phase k of the step: queued, captured or replayed. 0, or 1 when an exchange failed */
static int phase(dm_stepper *s, int k, int (*work)(dm_stepper *, long), long step) {
    if (!s->graphs) return work(s, step);
    dm_backend *be = dm_model_backend(s->m);
    struct dm_step_graph *g = &s->g[k];
    long gen = dm_model_layout_gen(s->m);
    if (g->gen != gen) { /* a new layout: the capture reads memory that moved */
        dm_backend_graph_free(be, g->graph);
        g->graph = NULL, g->warm = 0, g->gen = gen;
    }
    if (!g->warm) {
        g->warm = 1;
        return work(s, step);
    }
    if (!g->graph) {
        long before[DM_OPS_COUNTS];
        char why[160] = "the backend did not begin it";
        dm_model_op_counts(s->m, before);
        if (dm_backend_capture_begin(be)) return graphs_off(s, k, work, step, NULL, why);
        int rc = work(s, step); /* one process: no exchange to fail */
        void *graph = dm_backend_capture_end(be, why, sizeof why);
        if (!graph || rc) {
            dm_backend_graph_free(be, graph);
            return graphs_off(s, k, work, step, before, rc ? "the phase's work failed" : why);
        }
        g->graph = graph;
        dm_model_op_counts(s->m, g->counts);
        for (int i = 0; i < DM_OPS_COUNTS; i++) { /* the capture ran nothing: the replay runs */
            g->counts[i] -= before[i];
            before[i] = -g->counts[i];
        }
        dm_model_op_counts_add(s->m, before);
    } else if (k == G_FWD) {
        dm_model_forward_replayed(s->m);
    } else if (k == G_BWD) {
        dm_model_backward_replayed(s->m);
    }
    if (dm_backend_graph_launch(be, g->graph))
        return graphs_off(s, k, work, step, NULL, "the backend refused it");
    dm_model_op_counts_add(s->m, g->counts);
    s->replays++;
    return 0;
}

/* The step as graphs (one micro-batch, one process): the batch and the update's values
 * put, then the three phases with the marks between them (those of step_begin: the sum's
 * end is the backward's), then the read begun. */
static int step_graphs(dm_stepper *s, const void *batch, long opt_step) {
    dm_backend *be = dm_model_backend(s->m);
    int rc = dm_model_put_batch(s->m, batch, s->B, s->T);
    if (rc) { /* no memory for the batch: a loss that is not a number */
        double nan[2] = {NAN, NAN};
        dm_backend_put(be, s->dloss, nan, sizeof nan);
        dm_backend_read_begin(be, s->hloss, s->dloss, 2 * sizeof(double));
        return 0;
    }
    dm_optim_prepare(s->opt, opt_step);
    dm_backend_mark(be, 0);
    rc = phase(s, G_FWD, ph_fwd, opt_step);
    dm_backend_mark(be, 1);
    if (!rc) rc = phase(s, G_BWD, ph_bwd, opt_step);
    dm_backend_mark(be, 2);
    dm_backend_mark(be, 3);
    int k = dm_optim_retracts(s->opt, opt_step) ? G_OPT_RETRACT : G_OPT;
    if (!rc) rc = phase(s, k, ph_opt, opt_step);
    dm_backend_mark(be, 4);
    dm_backend_read_begin(be, s->hloss, s->dloss, 2 * sizeof(double));
    return rc;
}

void dm_stepper_graph_text(const dm_stepper *s, char *buf, size_t n) {
    if (s->graphs) snprintf(buf, n, "step graphs: on (the forward, the backward and the update "
                                    "each queued once, captured the next step, then replayed)");
    else snprintf(buf, n, "step graphs: off (%s)", s->graph_why);
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
    size_t bytes = (size_t)s->A * s->B * (s->T + 1) * (size_t)dm_id_width(c->vocab);
    dm_backend *be = dm_model_backend(m);
    s->batch = malloc(bytes);
    s->next = malloc(bytes);
    s->losses = malloc(sizeof(float) * (size_t)s->A);
    s->loss_off = malloc(sizeof(size_t) * (size_t)(s->N + 1));
    s->dloss = dm_backend_alloc(be, sizeof(double) * (size_t)(s->local + 1));
    s->hloss = malloc(sizeof(double) * (size_t)(s->local + 1));
    if (!s->batch || !s->next || !s->losses || !s->loss_off || !s->dloss || !s->hloss ||
        dm_backend_marks(be, 2 * s->local + 3)) {
        snprintf(err, errlen, "out of memory: a step of %d x %d sequences of %d bytes", s->A,
                 s->B, s->T + 1);
        return 1;
    }
    for (int r = 0; r <= s->N; r++) s->loss_off[r] = (size_t)r * s->local;
    const char *no = c->step_graph == DM_GRAPH_OFF ? "step_graph=off"
                     : !dm_backend_graphs(be)      ? "the backend runs each call at once"
                     : s->N > 1                    ? "several processes exchange mid-step"
                     : s->A > 1                    ? "grad_accum > 1"
                     : c->atlas                    ? "atlas=1 times every op"
                     : c->verify_fused             ? "verify_fused compares mid-step"
                                                   : NULL;
    if (no) snprintf(s->graph_why, sizeof s->graph_why, "%s", no);
    else if (!(s->g = calloc(DM_STEP_GRAPHS, sizeof *s->g))) {
        snprintf(err, errlen, "out of memory: the step's graphs");
        return 1;
    }
    s->graphs = no == NULL;
    return 0;
}

void dm_stepper_free(dm_stepper *s) {
    for (int i = 0; s->g && i < DM_STEP_GRAPHS; i++)
        dm_backend_graph_free(dm_model_backend(s->m), s->g[i].graph);
    free(s->g);
    dm_gradsum_free(s->gs);
    free(s->batch);
    free(s->next);
    free(s->losses);
    free(s->loss_off);
    if (s->m) dm_backend_release(dm_model_backend(s->m), s->dloss);
    free(s->hloss);
    *s = (dm_stepper){0};
}

/* Queue the step on batch: each micro-batch's forward (its loss copied beside the others)
 * and backward into the gradient sum, the sum's end, the update, the norm copied after the
 * losses; marks between (2j, 2j+1: micro-batch j's forward; 2j+1, 2j+2: its backward; then
 * the sum's end, the update); then the read of the losses and the norm begun. No wait. */
static int step_begin(dm_stepper *s, const void *batch, long opt_step) {
    if (s->graphs) return step_graphs(s, batch, opt_step);
    /* a sequence's T + 1 ids of the model's width */
    size_t seq = ((size_t)s->T + 1) * (size_t)dm_id_width(dm_model_config(s->m)->vocab);
    const uint8_t *ids = batch;
    int rc = 0, L = s->local;
    /* the gradient sum and the optimizer run through ops and the backend's copies: no
     * host access to the model's memory here; the losses and the gradient norm stay in
     * the backend's memory until the step's end reads them */
    dm_backend *be = dm_model_backend(s->m);
    dm_backend_mark(be, 0);
    for (int j = 0; j < L; j++) {
        int mb = j * s->N + s->rank; /* the global micro-batch */
        if (dm_model_forward_queued(s->m, ids + (size_t)mb * s->B * seq, s->B, s->T)) {
            double nan = NAN; /* no memory for the batch: a loss that is not a number */
            dm_backend_put(be, s->dloss + j, &nan, sizeof nan);
        } else {
            dm_backend_copy(be, s->dloss + j, dm_model_loss_mem(s->m), sizeof(double));
        }
        dm_backend_mark(be, 2 * j + 1);
        dm_model_zero_grad(s->m);
        dm_model_backward(s->m);
        rc |= dm_gradsum_add(s->gs, j);
        dm_backend_mark(be, 2 * j + 2);
    }
    rc |= dm_gradsum_finish(s->gs);
    dm_backend_mark(be, 2 * L + 1);
    if (!rc) {
        rc |= dm_optim_step_queued(s->opt, s->m, opt_step);
        dm_backend_copy(be, s->dloss + L, dm_optim_norm_mem(s->opt), sizeof(double));
    }
    dm_backend_mark(be, 2 * L + 2);
    dm_backend_read_begin(be, s->hloss, s->dloss, sizeof(double) * (size_t)(L + 1));
    return rc;
}

/* The step's end: the read waited for, the phase times from the marks, the losses
 * gathered from the ranks and averaged in micro-batch order. */
static int step_end(dm_stepper *s, int rc, dm_step_out *out) {
    dm_backend *be = dm_model_backend(s->m);
    int L = s->local;
    dm_backend_read_end(be);
    out->t_fwd = out->t_bwd = 0;
    for (int j = 0; j < L; j++) {
        out->t_fwd += 1e-3 * dm_backend_mark_ms(be, 2 * j, 2 * j + 1);
        out->t_bwd += 1e-3 * dm_backend_mark_ms(be, 2 * j + 1, 2 * j + 2);
    }
    out->t_bwd += 1e-3 * dm_backend_mark_ms(be, 2 * L, 2 * L + 1);
    out->t_opt = 1e-3 * dm_backend_mark_ms(be, 2 * L + 1, 2 * L + 2);
    out->gnorm = rc ? NAN : s->hloss[L];
    float *mine = s->losses + s->loss_off[s->rank];
    for (int j = 0; j < L; j++) mine[j] = (float)s->hloss[j];
    rc |= dm_comm_allgather(s->comm, s->losses, s->loss_off, sizeof(float));
    double sum = 0; /* in micro-batch order: m = j N + r sits at r * local + j */
    for (int mb = 0; mb < s->A; mb++) sum += (double)s->losses[(mb % s->N) * s->local + mb / s->N];
    out->loss = (float)(sum / s->A);
    return rc || dm_comm_error(s->comm)[0] ? 1 : 0;
}

int dm_stepper_run(dm_stepper *s, const dm_corpus *corpus, uint64_t seed, long batch_step,
                   long opt_step, dm_step_out *out) {
    size_t n = (size_t)s->A * s->B;
    double t0 = dm_now();
    if (s->next_ok && s->next_seed == seed && s->next_step == batch_step) {
        uint8_t *b = s->batch; /* drawn while the last step ran */
        s->batch = s->next, s->next = b;
    } else {
        dm_corpus_batch(corpus, seed, batch_step, (int)n, s->T, s->batch);
    }
    s->next_ok = 0;
    dm_corpus_prefetch(corpus, seed, batch_step + 1, (int)n, s->T); /* a mapped corpus */
    double t_data = dm_now() - t0;
    int rc = step_begin(s, s->batch, opt_step);
    if (dm_backend_queues(dm_model_backend(s->m))) { /* the next batch while it runs */
        double t1 = dm_now();
        dm_corpus_batch(corpus, seed, batch_step + 1, (int)n, s->T, s->next);
        s->next_ok = 1, s->next_seed = seed, s->next_step = batch_step + 1;
        t_data += dm_now() - t1;
    }
    rc = step_end(s, rc, out);
    out->t_data = t_data;
    return rc;
}

int dm_stepper_step(dm_stepper *s, const void *batch, long opt_step, dm_step_out *out) {
    s->next_ok = 0;
    int rc = step_begin(s, batch, opt_step);
    rc = step_end(s, rc, out);
    out->t_data = 0;
    return rc;
}
