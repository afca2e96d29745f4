/* ab_cells.c — the cells of an A/B sweep: their state on disk (done, missing, stale),
 * and running the missing ones, each a training run in a child process (see ab.h). */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/stats.h"
#include "io/files.h"
#include "io/history.h"
#include "io/metrics.h"
#include "io/rundir.h"
#include "jobs/ab.h"
#include "jobs/train.h"

static char *read_text(const char *path) {
    char err[64];
    return dm_read_file(path, err, sizeof err);
}

/* ---- cells on disk ------------------------------------------------------------------ */

/* Median ms_per_step of the metrics lines with step > warmup; NAN when none. */
static double metrics_median_ms(const char *dir, int warmup) {
    char path[4400], err[512];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    dm_metrics m;
    if (dm_metrics_read(path, &m, err, sizeof err)) return NAN;
    int cs = dm_metrics_col(&m, "step"), cm = dm_metrics_col(&m, "ms_per_step"), n = 0;
    double *ms = malloc((size_t)(m.n_rows ? m.n_rows : 1) * sizeof *ms);
    for (int r = 0; ms && r < m.n_rows; r++) {
        double s = dm_metrics_at(&m, r, cs), v = dm_metrics_at(&m, r, cm);
        if (s > warmup && !isnan(v)) ms[n++] = v;
    }
    double med = ms ? dm_median(ms, n, NULL) : NAN;
    free(ms);
    dm_metrics_free(&m);
    return med;
}

static double json_num(cJSON *o, const char *key, double dflt) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

static void load_cell(const dm_ab_spec *s, int a, int k, dm_ab_cell *c) {
    char dir[4200], path[4300], va[64], vb[64];
    memset(c, 0, sizeof *c);
    c->bpb = c->ms = NAN;
    c->status = DM_CELL_MISSING;
    dm_ab_cell_dir(s, a, k, dir, sizeof dir);
    snprintf(path, sizeof path, "%s/summary.json", dir);
    char *summary = read_text(path);
    if (!summary) {
        snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
        if (access(path, F_OK) == 0) snprintf(c->why, sizeof c->why, "unfinished");
        return;
    }
    cJSON *sj = cJSON_Parse(summary);
    free(summary);
    double bpb = json_num(sj, "val_bpb", NAN);
    cJSON_Delete(sj);
    if (isnan(bpb)) return; /* unreadable: run it again */

    /* the cell's config and corpus must be the sweep's */
    dm_config want, got;
    dm_ab_cell_config(s, a, k, &want);
    dm_config_default(&got);
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *cj = read_text(path), e2[DM_ERRLEN];
    if (!cj || dm_config_from_json(&got, cj, e2, sizeof e2)) {
        snprintf(c->why, sizeof c->why, "unreadable config.json");
        c->status = DM_CELL_STALE;
        free(cj);
        return;
    }
    free(cj);
    if (want.time_budget > 0) { /* the cell's budget fixed its steps (and cut them when the
                                   machine slowed, keeping the schedule it planned) */
        want.steps = got.steps;
        want.schedule_steps = got.schedule_steps;
    }
    const char *key = dm_config_diff(&got, &want, DM_KEYS_ALL, va, vb, sizeof va);
    if (key) {
        snprintf(c->why, sizeof c->why, "%.20s=%.24s, the sweep has %.24s", key, va, vb);
        c->status = DM_CELL_STALE;
        return;
    }
    /* the corpus: the same bytes (size and CRC-32), split the same way where both know it;
     * by its path only when the sweep or the cell has no identity recorded (an older
     * dormouse) */
    const dm_ab_data *D = dm_ab_arm_data(s, a);
    char dp[4096], e3[512];
    size_t bytes, train;
    uint32_t crc;
    int has_id, same;
    if (dm_rundir_read_data(dir, dp, sizeof dp, &bytes, &crc, &train, &has_id, e3, sizeof e3)) {
        snprintf(dp, sizeof dp, "unknown");
        same = 0;
    } else if (has_id && D->has_id) {
        same = bytes == D->bytes && crc == D->crc && (!train || !D->train || train == D->train);
    } else {
        same = !strcmp(dp, D->path);
    }
    if (!same) {
        snprintf(c->why, sizeof c->why, "another corpus (%.60s)", dp);
        c->status = DM_CELL_STALE;
        return;
    }

    c->status = DM_CELL_DONE;
    c->bpb = bpb;
    c->steps = got.steps;
    c->ms = metrics_median_ms(dir, s->warmup);
    /* the probe of the run; without it the timing's conditions are unknown */
    snprintf(path, sizeof path, "%s/cell.json", dir);
    char *pj = read_text(path);
    cJSON *p = pj ? cJSON_Parse(pj) : NULL;
    free(pj);
    cJSON *bits = cJSON_GetObjectItemCaseSensitive(p, "contention_bits");
    c->flags = cJSON_IsNumber(bits) ? (unsigned)bits->valueint : DM_PROBE_UNMEASURED;
    c->load_max = json_num(p, "load_max", NAN);
    c->others_cores = json_num(p, "others_cores", NAN);
    c->steal_frac = json_num(p, "steal_frac", NAN);
    cJSON_Delete(p);
}

void dm_ab_load_results(const dm_ab_spec *s, dm_ab_results *r) {
    for (int a = 0; a < s->n_arms; a++)
        for (int k = 0; k < s->n_seeds; k++) load_cell(s, a, k, &r->cell[a][k]);
}

/* ---- running cells ------------------------------------------------------------------ */

/* Clear what an unfinished run left in a cell directory (its checkpoints, which would
 * make a fresh run refuse, and our files), so the cell starts over. */
static void clear_cell(const char *dir) {
    char p[4608];
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (strncmp(e->d_name, "ckpt-", 5) != 0) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        dm_rmtree(p);
    }
    if (d) closedir(d);
    const char *files[] = {"summary.json", "cell.json", NULL};
    for (int i = 0; files[i]; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        unlink(p);
    }
}

/* Step of the last line of a cell's metrics.jsonl (for the progress line); -1: none. */
static long last_step(const char *dir) {
    char path[4300], buf[1024];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, size > (long)sizeof buf - 1 ? size - (long)sizeof buf + 1 : 0, SEEK_SET);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    long step = -1;
    for (char *p = buf; (p = strstr(p, "{\"step\": ")); p++) step = strtol(p + 9, NULL, 10);
    return step;
}

static int write_cell_json(const char *dir, const dm_probe_result *pr, char *err, size_t errlen) {
    char path[4300], words[64], text[1024];
    dm_probe_flags_text(pr->flags, words, sizeof words);
    snprintf(path, sizeof path, "%s/cell.json", dir);
    snprintf(text, sizeof text,
             "{\n  \"wall_s\": %.3f,\n  \"cpu_s\": %.3f,\n  \"threads\": %d,\n  \"cpus\": %d,\n"
             "  \"cpus_online\": %d,\n  \"others_cores\": %.4f,\n  \"steal_frac\": %.4f,\n"
             "  \"load_max\": %.2f,\n  \"contention\": \"%s\",\n  \"contention_bits\": %u\n}\n",
             pr->wall_s, pr->own_cpu_s, pr->threads, pr->ncpu, pr->online, pr->others_cores,
             pr->steal_frac, pr->load_max, words, pr->flags);
    return dm_write_file_atomic(path, text, err, errlen);
}

/* The child: train the cell, its events and status into its train.log (also the file
 * of any stray output on its stdout and stderr); exits with the job's code. The signal
 * handlers and the stop flag are the parent's, inherited: a SIGTERM stops the run. The
 * cell's lock is the parent's, held for the child (ta.locked). */
static void cell_child(const char *data, const char *dir, const dm_config *cfg,
                       const dm_job_io *io) {
    char path[4300];
    snprintf(path, sizeof path, "%s/train.log", dir);
    FILE *log = fopen(path, "w");
    if (!log) _exit(DM_JOB_FAILED);
    dup2(fileno(log), 1);
    dup2(fileno(log), 2);
    dm_job_io cio = {dm_event_log, log, io ? io->stop : NULL, io ? io->prog : NULL};
    dm_train_args ta = {0};
    ta.data = data;
    ta.out = dir;
    ta.cfg = cfg;
    ta.locked = 1;
    dm_status st = dm_train(&ta, &cio);
    dm_status_write(log, &st);
    fclose(log);
    _exit(st.code);
}

/* Run one cell in a child process, polled: once io->stop is set the child gets SIGTERM
 * (once). Returns the child's job code, with why it failed in why. */
static dm_job_code run_cell(const dm_ab_spec *s, int a, int k, const char *tag,
                            const int locks[2], const dm_job_io *io, char *why,
                            size_t whylen) {
    char dir[4200], err[512];
    dm_ab_cell_dir(s, a, k, dir, sizeof dir);
    if (dm_mkdir_p(dir) != 0) {
        snprintf(why, whylen, "cannot create %.150s: %s", dir, strerror(errno));
        return DM_JOB_FAILED;
    }
    clear_cell(dir);
    dm_config cfg;
    dm_ab_cell_config(s, a, k, &cfg);
    dm_probe probe;
    fflush(NULL); /* the child must not write our buffers again */
    dm_probe_begin(&probe);
    pid_t parent = getpid(), pid = fork();
    if (pid < 0) {
        snprintf(why, whylen, "cannot start a training process: %s", strerror(errno));
        return DM_JOB_FAILED;
    }
    if (pid == 0) {
        /* the child dies with the sweep (it holds the sweep's locks, inherited): asked of
         * the kernel, then checked, for a sweep that died before the asking took effect */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(DM_JOB_FAILED);
        cell_child(dm_ab_arm_data(s, a)->path, dir, &cfg, io);
    }
    long holders[2] = {(long)parent, (long)pid}; /* the refusal of a rerun names both */
    for (int i = 0; i < 2; i++) dm_lock_set_holders(locks[i], holders, 2);
    int status = 0, forwarded = 0, lost = 0;
    for (int ticks = 1;; ticks++) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) break;
        if (w < 0 && errno != EINTR) {
            lost = errno;
            break;
        }
        if (dm_job_stopped(io) && !forwarded) { /* the cell saves and stops */
            kill(pid, SIGTERM);
            forwarded = 1;
        }
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
        if (ticks % 20 == 0) { /* about once a second */
            dm_probe_tick(&probe);
            dm_event ev = {0};
            ev.kind = DM_EV_STEP;
            ev.text = tag;
            ev.step = last_step(dir);
            ev.steps = cfg.time_budget > 0 ? 0 : s->steps; /* 0: fixed by the budget */
            dm_job_emit(io, &ev);
        }
    }
    for (int i = 0; i < 2; i++) dm_lock_set_holders(locks[i], holders, 1);
    dm_probe_result pr;
    dm_probe_end(&probe, cfg.threads, &pr);
    dm_job_code code = DM_JOB_FAILED;
    if (lost) snprintf(why, whylen, "lost the training process: %s", strerror(lost));
    else if (WIFSIGNALED(status)) snprintf(why, whylen, "killed by signal %d", WTERMSIG(status));
    else if (WEXITSTATUS(status) > DM_JOB_INTERRUPTED)
        snprintf(why, whylen, "exit %d", WEXITSTATUS(status));
    else code = (dm_job_code)WEXITSTATUS(status);
    if (code == DM_JOB_FAILED && !why[0]) snprintf(why, whylen, "runtime failure");
    if (code == DM_JOB_OK && write_cell_json(dir, &pr, err, sizeof err)) {
        snprintf(why, whylen, "%.200s", err);
        code = DM_JOB_FAILED;
    }
    return code;
}

/* The last line of a cell's train.log (its error, when it failed). */
static void log_tail(const char *dir, char *buf, size_t n) {
    char path[4300];
    snprintf(path, sizeof path, "%s/train.log", dir);
    char *t = read_text(path);
    buf[0] = 0;
    if (!t) return;
    size_t len = strlen(t);
    while (len && (t[len - 1] == '\n' || t[len - 1] == '\r')) t[--len] = 0;
    char *nl = strrchr(t, '\n');
    snprintf(buf, n, "%s", nl ? nl + 1 : t);
    free(t);
}

/* "TAG: [HOW]val X bpb | Y ms/step median [(contended: WORDS)]" */
static void note_cell(const dm_job_io *io, const char *tag, const dm_ab_cell *c,
                      const char *how) {
    char ms[48] = "no timing", fl[64];
    if (!isnan(c->ms)) snprintf(ms, sizeof ms, "%.2f ms/step median", c->ms);
    dm_probe_flags_text(c->flags, fl, sizeof fl);
    dm_job_note(io, "%s: %sval %.4f bpb | %s%s%s%s\n", tag, how, c->bpb, ms,
                c->flags ? " (contended: " : "", fl, c->flags ? ")" : "");
}

/* dm_ab_run_cells with the sweep's directory locked (lock_fd). */
static dm_job_code run_cells_locked(const dm_ab_spec *s, dm_ab_results *r, int *ran,
                                    int lock_fd, const dm_job_io *io, dm_status *st);

dm_job_code dm_ab_run_cells(const dm_ab_spec *s, dm_ab_results *r, int *ran,
                            const dm_job_io *io, dm_status *st) {
    char err[4400];
    int fd;
    *ran = 0;
    if (dm_mkdir_p(s->dir) != 0)
        return dm_fail(st, DM_JOB_FAILED, "cannot create %s: %s", s->dir, strerror(errno));
    int lr = dm_lock_dir(s->dir, &fd, err, sizeof err);
    if (lr != DM_RUNDIR_OK)
        return dm_fail(st, lr == DM_RUNDIR_BUSY ? DM_JOB_BAD_INPUT : DM_JOB_FAILED, "%s", err);
    dm_job_code code = run_cells_locked(s, r, ran, fd, io, st);
    dm_unlock_dir(s->dir, fd);
    return code;
}

static dm_job_code run_cells_locked(const dm_ab_spec *s, dm_ab_results *r, int *ran,
                                    int lock_fd, const dm_job_io *io, dm_status *st) {
    char err[4400];
    dm_ab_load_results(s, r);
    for (int a = 0; a < s->n_arms; a++)
        for (int k = 0; k < s->n_seeds; k++)
            if (r->cell[a][k].status == DM_CELL_STALE) {
                char dir[4200];
                dm_ab_cell_dir(s, a, k, dir, sizeof dir);
                return dm_fail(st, DM_JOB_BAD_INPUT, "%s holds a finished run of another "
                               "config (%s); use another --dir, or remove that cell to rerun "
                               "it", dir, r->cell[a][k].why);
            }
    if (dm_ab_save_spec(s, err, sizeof err)) return dm_fail(st, DM_JOB_FAILED, "%s", err);

    int total = s->n_arms * s->n_seeds, idx = 0, failed = 0, stopped = 0;
    /* interleaved by seed: every arm's seed 1, then every arm's seed 2, ... */
    for (int k = 0; k < s->n_seeds && !stopped; k++)
        for (int a = 0; a < s->n_arms && !stopped; a++) {
            dm_ab_cell *c = &r->cell[a][k];
            char tag[160], dir[4200], why[256] = "", last[256];
            snprintf(tag, sizeof tag, "[%d/%d] %s seed %" PRIu64, ++idx, total,
                     s->arms[a].name, s->seeds[k]);
            if (c->status == DM_CELL_DONE) {
                note_cell(io, tag, c, "cached, ");
                continue;
            }
            if (dm_job_stopped(io)) {
                stopped = 1;
                break;
            }
            /* the cell is locked before it is cleared: a `train` writing it is refused */
            int cfd;
            dm_ab_cell_dir(s, a, k, dir, sizeof dir);
            int lr = dm_mkdir_p(dir) ? DM_RUNDIR_FAILED : dm_lock_dir(dir, &cfd, err, sizeof err);
            if (lr != DM_RUNDIR_OK)
                return dm_fail(st, lr == DM_RUNDIR_BUSY ? DM_JOB_BAD_INPUT : DM_JOB_FAILED,
                               "%s: %s", tag, lr == DM_RUNDIR_BUSY ? err : strerror(errno));
            int locks[2] = {lock_fd, cfd};
            dm_job_code code = run_cell(s, a, k, tag, locks, io, why, sizeof why);
            dm_unlock_dir(dir, cfd);
            if (code == DM_JOB_OK) {
                load_cell(s, a, k, c);
                (*ran)++;
                note_cell(io, tag, c, "");
                stopped = dm_job_stopped(io);
                continue;
            }
            log_tail(dir, last, sizeof last);
            if (code == DM_JOB_INTERRUPTED || dm_job_stopped(io)) { /* the next run redoes it */
                snprintf(c->why, sizeof c->why, "interrupted");
                dm_job_note(io, "%s: interrupted\n", tag);
                stopped = 1;
            } else if (code == DM_JOB_BAD_INPUT) { /* every other cell would fail alike */
                return dm_fail(st, DM_JOB_BAD_INPUT, "%s failed (bad input): %s [%s/train.log]",
                               tag, last, dir);
            } else {
                c->status = DM_CELL_FAILED;
                snprintf(c->why, sizeof c->why, "%.95s", why);
                dm_job_warn(io, "%s failed (%s): %s [%s/train.log]\n", tag, why, last, dir);
                failed++;
            }
        }
    if (stopped)
        return dm_fail(st, DM_JOB_INTERRUPTED, "interrupted: run the same command again to "
                       "resume (finished cells are kept)");
    if (failed)
        return dm_fail(st, DM_JOB_FAILED, "%d of %d cells failed (see their train.log)", failed,
                       total);
    return DM_JOB_OK;
}
