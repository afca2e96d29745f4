/* ab.c — seeded A/B sweeps: verdicts, the sweep directory, running cells, the table,
 * history rows (see ab.h). */
#include "jobs/ab.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "io/files.h"
#include "io/history.h"
#include "jobs/train.h"

/* ---- results and verdicts (pure) ------------------------------------------------------ */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double dm_ab_median(double *x, int n) {
    if (n <= 0) return NAN;
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

dm_ab_stats dm_ab_arm_stats(const dm_ab_cell *cells, int n) {
    dm_ab_stats st = {0};
    double lo = INFINITY, hi = -INFINITY, sum = 0, mlo = INFINITY, mhi = -INFINITY, msum = 0;
    st.timed = 1;
    for (int k = 0; k < n; k++) {
        const dm_ab_cell *c = &cells[k];
        if (c->status != DM_CELL_DONE) continue;
        st.n++;
        sum += c->bpb;
        lo = fmin(lo, c->bpb);
        hi = fmax(hi, c->bpb);
        if (isnan(c->ms)) st.timed = 0;
        else {
            msum += c->ms;
            mlo = fmin(mlo, c->ms);
            mhi = fmax(mhi, c->ms);
        }
        if (c->flags) st.contended = 1;
    }
    st.complete = n > 0 && st.n == n;
    st.mean = st.n ? sum / st.n : NAN;
    st.spread = st.n ? hi - lo : NAN;
    st.ms_mean = st.n && st.timed ? msum / st.n : NAN;
    st.ms_spread = st.n && st.timed ? mhi - mlo : NAN;
    return st;
}

int dm_ab_judge(double control_mean, double control_spread, double mean) {
    if (mean < control_mean - control_spread) return DM_AB_BETTER;
    if (mean > control_mean + control_spread) return DM_AB_WORSE;
    return DM_AB_WASH;
}

dm_ab_verdict dm_ab_compare(const dm_ab_cell *control, const dm_ab_cell *variant, int n) {
    dm_ab_stats c = dm_ab_arm_stats(control, n), v = dm_ab_arm_stats(variant, n);
    dm_ab_verdict out = {DM_AB_NA_MISSING, DM_AB_NA_MISSING, NAN, NAN};
    if (!c.complete || !v.complete) return out; /* no verdict on a partial arm */
    out.bpb_delta = v.mean - c.mean;
    if (c.timed && v.timed) out.ms_delta = v.ms_mean - c.ms_mean;
    if (n < 2) { /* one seed: the noise is unknown, any difference could be it */
        out.bpb = out.time = DM_AB_NA_SEEDS;
        return out;
    }
    out.bpb = dm_ab_judge(c.mean, c.spread, v.mean);
    if (!c.timed || !v.timed) out.time = DM_AB_NA_UNTIMED;
    else if (c.contended || v.contended) out.time = DM_AB_NA_CONTENDED;
    else out.time = dm_ab_judge(c.ms_mean, c.ms_spread, v.ms_mean);
    return out;
}

const char *dm_ab_verdict_text(int v) {
    switch (v) {
    case DM_AB_WASH: return "wash";
    case DM_AB_BETTER: return "better";
    case DM_AB_WORSE: return "worse";
    case DM_AB_NA_MISSING: return "n/a (missing cells)";
    case DM_AB_NA_SEEDS: return "n/a (needs 2+ seeds)";
    case DM_AB_NA_CONTENDED: return "n/a (contended)";
    case DM_AB_NA_UNTIMED: return "n/a (no timing)";
    }
    return "?";
}

/* ---- the sweep spec ----------------------------------------------------------------- */

int dm_ab_default_warmup(int steps) {
    int w = steps / 10;
    return w > 50 ? 50 : w;
}

int dm_ab_parse_seeds(const char *text, uint64_t *seeds, int max, int *n, char *err,
                      size_t errlen) {
    *n = 0;
    const char *p = text;
    while (*p) {
        char *end;
        errno = 0;
        if (!isdigit((unsigned char)*p)) break;
        unsigned long long v = strtoull(p, &end, 10);
        if (errno || v >= (1ull << 53)) break;
        for (int i = 0; i < *n; i++)
            if (seeds[i] == v) {
                snprintf(err, errlen, "--seeds lists seed %llu twice", v);
                return 1;
            }
        if (*n == max) {
            snprintf(err, errlen, "--seeds: at most %d seeds", max);
            return 1;
        }
        seeds[(*n)++] = v;
        p = end;
        if (*p == ',') p++;
        else if (*p) break;
        else return 0;
    }
    snprintf(err, errlen, "--seeds expects a comma-separated list of seeds (e.g. 1,2,3), got '%s'",
             text);
    return 1;
}

/* Keys a variant may not change: they are the sweep's, the same in every cell. */
static const char *sweep_key_reason(const char *key) {
    if (!strcmp(key, "seed")) return "the seeds are the sweep's (--seeds)";
    if (!strcmp(key, "steps")) return "every arm runs the sweep's steps (--steps)";
    if (!strcmp(key, "eval_window")) return "every arm is scored on the same window";
    if (!strcmp(key, "log_every")) return "A/B cells log every step";
    return NULL;
}

static int valid_name(const char *s) {
    if (!*s || *s == '.' || strlen(s) >= DM_AB_NAME) return 0;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '_' && *s != '-' && *s != '.') return 0;
    return 1;
}

int dm_ab_parse_variant(const char *text, const dm_config *control, dm_ab_arm *arm,
                        char *err, size_t errlen) {
    memset(arm, 0, sizeof *arm);
    arm->cfg = *control;
    const char *colon = strchr(text, ':');
    if (!colon) {
        snprintf(err, errlen, "--variant expects \"NAME: key=value ...\", got '%s'", text);
        return 1;
    }
    const char *b = text, *e = colon;
    while (b < e && isspace((unsigned char)*b)) b++;
    while (e > b && isspace((unsigned char)e[-1])) e--;
    snprintf(arm->name, sizeof arm->name, "%.*s", (int)(e - b < DM_AB_NAME ? e - b : DM_AB_NAME - 1), b);
    if ((size_t)(e - b) >= DM_AB_NAME || !valid_name(arm->name) || !strcmp(arm->name, "control")) {
        snprintf(err, errlen, "--variant: bad name '%.*s' (letters, digits, _ - .; not \"control\")",
                 (int)(e - b), b);
        return 1;
    }
    /* overrides: whitespace-separated key=value */
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", colon + 1);
    size_t used = 0;
    for (char *save = NULL, *tok = strtok_r(buf, " \t\n", &save); tok;
         tok = strtok_r(NULL, " \t\n", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq || eq == tok) {
            snprintf(err, errlen, "--variant %s: expected key=value, got '%s'", arm->name, tok);
            return 1;
        }
        *eq = 0;
        const char *why = sweep_key_reason(tok);
        if (why) {
            snprintf(err, errlen, "--variant %s: cannot set %s (%s)", arm->name, tok, why);
            return 1;
        }
        char e2[DM_ERRLEN];
        if (dm_config_set(&arm->cfg, tok, eq + 1, e2, sizeof e2)) {
            snprintf(err, errlen, "--variant %s: %s", arm->name, e2);
            return 1;
        }
        *eq = '=';
        used += (size_t)snprintf(arm->overrides + used, sizeof arm->overrides - used, "%s%s",
                                 used ? " " : "", tok);
        if (used >= sizeof arm->overrides) {
            snprintf(err, errlen, "--variant %s: overrides too long", arm->name);
            return 1;
        }
    }
    return 0;
}

int dm_ab_check_spec(const dm_ab_spec *s, char *err, size_t errlen) {
    struct stat st;
    if (stat(s->data, &st) != 0) {
        snprintf(err, errlen, "corpus %s not found", s->data);
        return 1;
    }
    if (s->n_arms < 1 || s->n_seeds < 1 || s->steps < 1) {
        snprintf(err, errlen, "a sweep needs an arm, a seed and a step");
        return 1;
    }
    for (int a = 0; a < s->n_arms; a++) {
        for (int b = 0; b < a; b++)
            if (!strcmp(s->arms[a].name, s->arms[b].name)) {
                snprintf(err, errlen, "two arms are named '%s'", s->arms[a].name);
                return 1;
            }
        dm_config c;
        char e2[DM_ERRLEN];
        dm_ab_cell_config(s, a, 0, &c);
        if (dm_config_validate(&c, e2, sizeof e2)) {
            snprintf(err, errlen, "%s %s: invalid config: %s", a ? "variant" : "the",
                     s->arms[a].name, e2);
            return 1;
        }
    }
    return 0;
}

void dm_ab_cell_config(const dm_ab_spec *s, int a, int k, dm_config *out) {
    *out = s->arms[a].cfg;
    out->seed = s->seeds[k];
    out->steps = s->steps;
    out->log_every = 1;
}

void dm_ab_cell_dir(const dm_ab_spec *s, int a, int k, char *buf, size_t n) {
    snprintf(buf, n, "%s/%s/seed%" PRIu64, s->dir, s->arms[a].name, s->seeds[k]);
}

static void seeds_text(const dm_ab_spec *s, char *buf, size_t n) {
    size_t used = 0;
    buf[0] = 0;
    for (int k = 0; k < s->n_seeds && used < n; k++)
        used += (size_t)snprintf(buf + used, n - used, "%s%" PRIu64, k ? "," : "", s->seeds[k]);
}

static char *read_text(const char *path) {
    char err[64];
    return dm_read_file(path, err, sizeof err);
}

int dm_ab_save_spec(const dm_ab_spec *s, char *err, size_t errlen) {
    char seeds[1024], path[4200];
    seeds_text(s, seeds, sizeof seeds);
    cJSON *o = cJSON_CreateObject(), *arms = cJSON_CreateArray();
    cJSON_AddNumberToObject(o, "version", 1);
    cJSON_AddStringToObject(o, "data", s->data);
    cJSON_AddNumberToObject(o, "steps", s->steps);
    cJSON_AddNumberToObject(o, "warmup", s->warmup);
    cJSON_AddStringToObject(o, "seeds", seeds);
    for (int a = 0; a < s->n_arms; a++) {
        cJSON *arm = cJSON_CreateObject();
        char *cj = dm_config_to_json(&s->arms[a].cfg);
        cJSON_AddStringToObject(arm, "name", s->arms[a].name);
        cJSON_AddStringToObject(arm, "overrides", s->arms[a].overrides);
        cJSON_AddItemToObject(arm, "config", cJSON_Parse(cj));
        free(cj);
        cJSON_AddItemToArray(arms, arm);
    }
    cJSON_AddItemToObject(o, "arms", arms);
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    snprintf(path, sizeof path, "%s/ab.json", s->dir);
    size_t len = strlen(text);
    char *nl = malloc(len + 2);
    memcpy(nl, text, len);
    memcpy(nl + len, "\n", 2);
    int rc = dm_write_file_atomic(path, nl, err, errlen);
    free(nl);
    free(text);
    return rc;
}

int dm_ab_load_spec(const char *dir, dm_ab_spec *s, char *err, size_t errlen) {
    char path[4200];
    memset(s, 0, sizeof *s);
    snprintf(s->dir, sizeof s->dir, "%s", dir);
    snprintf(path, sizeof path, "%s/ab.json", dir);
    char *text = read_text(path);
    if (!text) {
        snprintf(err, errlen, "%s holds no A/B sweep (no ab.json)", dir);
        return 2;
    }
    cJSON *o = cJSON_Parse(text);
    free(text);
    cJSON *data = cJSON_GetObjectItemCaseSensitive(o, "data"),
          *steps = cJSON_GetObjectItemCaseSensitive(o, "steps"),
          *warm = cJSON_GetObjectItemCaseSensitive(o, "warmup"),
          *seeds = cJSON_GetObjectItemCaseSensitive(o, "seeds"),
          *arms = cJSON_GetObjectItemCaseSensitive(o, "arms");
    int rc = 1;
    if (!cJSON_IsString(data) || !cJSON_IsNumber(steps) || !cJSON_IsNumber(warm) ||
        !cJSON_IsString(seeds) || !cJSON_IsArray(arms) || cJSON_GetArraySize(arms) < 1 ||
        cJSON_GetArraySize(arms) > DM_AB_MAX_ARMS) {
        snprintf(err, errlen, "%s is not a dormouse A/B file", path);
        goto done;
    }
    snprintf(s->data, sizeof s->data, "%s", data->valuestring);
    s->steps = steps->valueint;
    s->warmup = warm->valueint;
    if (dm_ab_parse_seeds(seeds->valuestring, s->seeds, DM_AB_MAX_SEEDS, &s->n_seeds, err, errlen))
        goto done;
    cJSON *arm;
    cJSON_ArrayForEach(arm, arms) {
        dm_ab_arm *A = &s->arms[s->n_arms++];
        cJSON *name = cJSON_GetObjectItemCaseSensitive(arm, "name"),
              *ov = cJSON_GetObjectItemCaseSensitive(arm, "overrides"),
              *cfg = cJSON_GetObjectItemCaseSensitive(arm, "config");
        if (!cJSON_IsString(name) || !valid_name(name->valuestring) || !cJSON_IsString(ov) ||
            !cJSON_IsObject(cfg)) {
            snprintf(err, errlen, "%s: arm %d is malformed", path, s->n_arms);
            goto done;
        }
        snprintf(A->name, sizeof A->name, "%s", name->valuestring);
        snprintf(A->overrides, sizeof A->overrides, "%s", ov->valuestring);
        dm_config_default(&A->cfg);
        char *cj = cJSON_PrintUnformatted(cfg), e2[DM_ERRLEN];
        int bad = dm_config_from_json(&A->cfg, cj, e2, sizeof e2);
        free(cj);
        if (bad) {
            snprintf(err, errlen, "%s: arm %s: %s", path, A->name, e2);
            goto done;
        }
    }
    rc = 0;
done:
    cJSON_Delete(o);
    return rc;
}

/* ---- cells on disk ------------------------------------------------------------------ */

/* Median ms_per_step of the metrics lines with step > warmup; NAN when none. */
static double metrics_median_ms(const char *dir, int warmup) {
    char path[4400], line[8192];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    FILE *f = fopen(path, "r");
    if (!f) return NAN;
    size_t cap = 1024, n = 0;
    double *ms = malloc(cap * sizeof *ms);
    while (ms && fgets(line, sizeof line, f)) {
        cJSON *o = cJSON_Parse(line);
        cJSON *s = cJSON_GetObjectItemCaseSensitive(o, "step"),
              *m = cJSON_GetObjectItemCaseSensitive(o, "ms_per_step");
        if (cJSON_IsNumber(s) && cJSON_IsNumber(m) && s->valuedouble > warmup) {
            if (n == cap) {
                double *nm = realloc(ms, (cap *= 2) * sizeof *ms);
                if (!nm) free(ms);
                ms = nm;
            }
            if (ms) ms[n++] = m->valuedouble;
        }
        cJSON_Delete(o);
    }
    fclose(f);
    double med = ms ? dm_ab_median(ms, (int)n) : NAN;
    free(ms);
    return med;
}

/* The first key whose value differs between a and b (NULL: none). */
static const char *config_diff(const dm_config *a, const dm_config *b, char *va, char *vb) {
    for (int i = 0; dm_config_key_name(i); i++) {
        const char *k = dm_config_key_name(i);
        dm_config_get(a, k, va, 64);
        dm_config_get(b, k, vb, 64);
        if (strcmp(va, vb) != 0) return k;
    }
    return NULL;
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
    const char *key = config_diff(&got, &want, va, vb);
    if (key) {
        snprintf(c->why, sizeof c->why, "%.20s=%.24s, the sweep has %.24s", key, va, vb);
        c->status = DM_CELL_STALE;
        return;
    }
    snprintf(path, sizeof path, "%s/data_path", dir);
    char *dp = read_text(path);
    if (dp) dp[strcspn(dp, "\n")] = 0;
    if (!dp || strcmp(dp, s->data) != 0) {
        snprintf(c->why, sizeof c->why, "another corpus (%.60s)", dp ? dp : "unknown");
        c->status = DM_CELL_STALE;
        free(dp);
        return;
    }
    free(dp);

    c->status = DM_CELL_DONE;
    c->bpb = bpb;
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

static volatile sig_atomic_t g_ab_stop;  /* SIGINT/SIGTERM seen: stop after this cell */
static volatile sig_atomic_t g_ab_child; /* pid of the running cell, 0 when none */

static void ab_on_signal(int sig) {
    g_ab_stop = sig;
    if (g_ab_child > 0) kill((pid_t)g_ab_child, sig); /* the cell saves and stops */
}

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

/* Run one cell in a child process; returns its exit code (128+signal when killed). */
static int run_cell(const dm_ab_spec *s, int a, int k, const char *tag, FILE *out) {
    char dir[4200], err[512];
    dm_ab_cell_dir(s, a, k, dir, sizeof dir);
    if (dm_mkdir_p(dir) != 0) {
        fprintf(stderr, "error: cannot create %s: %s\n", dir, strerror(errno));
        return 1;
    }
    clear_cell(dir);
    dm_config cfg;
    dm_ab_cell_config(s, a, k, &cfg);
    int tty = isatty(fileno(out));
    dm_probe probe;
    fflush(NULL); /* the child must not write our buffers again */
    dm_probe_begin(&probe);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "error: cannot start a training process: %s\n", strerror(errno));
        return 1;
    }
    if (pid == 0) {
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        char log[4300];
        snprintf(log, sizeof log, "%s/train.log", dir);
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0) _exit(1);
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
        dm_train_args ta = {s->data, dir, 0, 0};
        int rc = dm_train(&cfg, &ta);
        fflush(NULL);
        _exit(rc);
    }
    g_ab_child = pid;
    int status = 0;
    for (int ticks = 1;; ticks++) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) break;
        if (w < 0 && errno != EINTR) {
            status = 1 << 8;
            break;
        }
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
        if (ticks % 20 == 0) { /* about once a second */
            dm_probe_tick(&probe);
            if (tty) {
                fprintf(out, "\r\033[K%s: step %ld/%d", tag, last_step(dir), s->steps);
                fflush(out);
            }
        }
    }
    g_ab_child = 0;
    dm_probe_result pr;
    dm_probe_end(&probe, cfg.threads, &pr);
    if (tty) fprintf(out, "\r\033[K");
    int rc = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
    if (rc == 0 && write_cell_json(dir, &pr, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        rc = 1;
    }
    return rc;
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

static void print_cell_line(FILE *out, const char *tag, const dm_ab_cell *c, const char *how) {
    char ms[48] = "no timing", fl[64];
    if (!isnan(c->ms)) snprintf(ms, sizeof ms, "%.2f ms/step median", c->ms);
    dm_probe_flags_text(c->flags, fl, sizeof fl);
    fprintf(out, "%s: %sval %.4f bpb | %s%s%s%s\n", tag, how, c->bpb, ms,
            c->flags ? " (contended: " : "", fl, c->flags ? ")" : "");
}

int dm_ab_run(const dm_ab_spec *s, dm_ab_results *r, int *ran, FILE *out) {
    char err[512];
    *ran = 0;
    dm_ab_load_results(s, r);
    for (int a = 0; a < s->n_arms; a++)
        for (int k = 0; k < s->n_seeds; k++)
            if (r->cell[a][k].status == DM_CELL_STALE) {
                char dir[4200];
                dm_ab_cell_dir(s, a, k, dir, sizeof dir);
                fprintf(stderr, "error: %s holds a finished run of another config (%s); use "
                                "another --dir, or remove that cell to rerun it\n",
                        dir, r->cell[a][k].why);
                return 2;
            }
    if (dm_mkdir_p(s->dir) != 0) {
        fprintf(stderr, "error: cannot create %s: %s\n", s->dir, strerror(errno));
        return 1;
    }
    if (dm_ab_save_spec(s, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }

    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = ab_on_signal;
    g_ab_stop = 0;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);

    int total = s->n_arms * s->n_seeds, idx = 0, failed = 0, rc = 0;
    /* interleaved by seed: every arm's seed 1, then every arm's seed 2, ... */
    for (int k = 0; k < s->n_seeds && !rc; k++)
        for (int a = 0; a < s->n_arms && !rc; a++) {
            dm_ab_cell *c = &r->cell[a][k];
            char tag[160], dir[4200];
            snprintf(tag, sizeof tag, "[%d/%d] %s seed %" PRIu64, ++idx, total,
                     s->arms[a].name, s->seeds[k]);
            if (c->status == DM_CELL_DONE) {
                print_cell_line(out, tag, c, "cached, ");
                continue;
            }
            fflush(out);
            int code = run_cell(s, a, k, tag, out);
            dm_ab_cell_dir(s, a, k, dir, sizeof dir);
            if (code == 0) {
                load_cell(s, a, k, c);
                (*ran)++;
                print_cell_line(out, tag, c, "");
                if (g_ab_stop) rc = 130;
                continue;
            }
            char last[256];
            log_tail(dir, last, sizeof last);
            if (code == 130 || g_ab_stop) { /* missing: the next run redoes it */
                snprintf(c->why, sizeof c->why, "interrupted");
                fprintf(out, "%s: interrupted\n", tag);
                rc = 130;
            } else {
                c->status = DM_CELL_FAILED;
                snprintf(c->why, sizeof c->why, "exit %d", code);
                fprintf(stderr, "%s failed (exit %d): %s [%s/train.log]\n", tag, code, last, dir);
                failed = 1;
                if (code == 2) rc = 2; /* bad input: every other cell would fail alike */
            }
        }
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    if (rc == 130)
        fprintf(out, "interrupted: run the same command again to resume (finished cells "
                     "are kept)\n");
    return rc ? rc : failed;
}

/* ---- the table ---------------------------------------------------------------------- */

/* Non-default keys of a config (seed and log_every left out: the sweep sets them). */
static void nondefault_keys(const dm_config *c, char *buf, size_t n) {
    dm_config d;
    dm_config_default(&d);
    char va[64], vb[64];
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; dm_config_key_name(i) && used < n; i++) {
        const char *k = dm_config_key_name(i);
        if (!strcmp(k, "seed") || !strcmp(k, "log_every")) continue;
        dm_config_get(c, k, va, sizeof va);
        dm_config_get(&d, k, vb, sizeof vb);
        if (strcmp(va, vb) != 0)
            used += (size_t)snprintf(buf + used, n - used, "%s%s=%s", used ? " " : "", k, va);
    }
}

static const char *cell_word(const dm_ab_cell *c) {
    switch (c->status) {
    case DM_CELL_STALE: return "stale";
    case DM_CELL_FAILED: return "failed";
    case DM_CELL_MISSING: return "missing";
    }
    return "";
}

static void print_block(const dm_ab_spec *s, const dm_ab_results *r, FILE *f, int w, int timing) {
    fprintf(f, "%-*s", w + 4, "");
    for (int k = 0; k < s->n_seeds; k++) {
        char h[32];
        snprintf(h, sizeof h, "seed %" PRIu64, s->seeds[k]);
        fprintf(f, "%-10s", h);
    }
    fprintf(f, "%-10s%-10s%s\n", "mean", "delta", "verdict");
    for (int a = 0; a < s->n_arms; a++) {
        const dm_ab_cell *cells = r->cell[a];
        dm_ab_stats st = dm_ab_arm_stats(cells, s->n_seeds);
        fprintf(f, "  %-*s  ", w, s->arms[a].name);
        for (int k = 0; k < s->n_seeds; k++) {
            const dm_ab_cell *c = &cells[k];
            char v[32];
            if (c->status != DM_CELL_DONE) snprintf(v, sizeof v, "%s", cell_word(c));
            else if (!timing) snprintf(v, sizeof v, "%.4f", c->bpb);
            else if (isnan(c->ms)) snprintf(v, sizeof v, "-");
            else snprintf(v, sizeof v, "%.2f%s", c->ms, c->flags ? "*" : "");
            fprintf(f, "%-10s", v);
        }
        char mean[32] = "-", delta[32] = "", verdict[64] = "";
        double m = timing ? st.ms_mean : st.mean, spread = timing ? st.ms_spread : st.spread;
        if (st.complete && !isnan(m)) snprintf(mean, sizeof mean, timing ? "%.2f" : "%.4f", m);
        if (a == 0) {
            if (st.complete && s->n_seeds >= 2 && !isnan(spread))
                snprintf(verdict, sizeof verdict, timing ? "spread %.2f%s" : "spread %.4f%s",
                         spread, timing && st.contended ? " (contended)" : "");
            else
                snprintf(verdict, sizeof verdict, "spread n/a%s",
                         !st.complete ? " (missing cells)" : s->n_seeds < 2 ? " (1 seed)" : "");
        } else {
            dm_ab_verdict v = dm_ab_compare(r->cell[0], cells, s->n_seeds);
            double d = timing ? v.ms_delta : v.bpb_delta;
            if (!isnan(d)) snprintf(delta, sizeof delta, timing ? "%+.2f" : "%+.4f", d);
            else snprintf(delta, sizeof delta, "-");
            snprintf(verdict, sizeof verdict, "%s", dm_ab_verdict_text(timing ? v.time : v.bpb));
        }
        fprintf(f, "%-10s%-10s%s\n", mean, delta, verdict);
    }
}

void dm_ab_print(const dm_ab_spec *s, const dm_ab_results *r, FILE *f) {
    int w = 8;
    for (int a = 0; a < s->n_arms; a++) {
        int l = (int)strlen(s->arms[a].name);
        if (l > w) w = l;
    }
    char seeds[512], keys[4096];
    seeds_text(s, seeds, sizeof seeds);
    fprintf(f, "\nA/B %s: control + %d variant%s x %d seed%s (%s), %d steps\n", s->dir,
            s->n_arms - 1, s->n_arms == 2 ? "" : "s", s->n_seeds, s->n_seeds == 1 ? "" : "s",
            seeds, s->steps);
    nondefault_keys(&s->arms[0].cfg, keys, sizeof keys);
    fprintf(f, "  corpus %s\n  control: %s\n", s->data, keys[0] ? keys : "(defaults)");
    for (int a = 1; a < s->n_arms; a++)
        fprintf(f, "  %s: %s\n", s->arms[a].name,
                s->arms[a].overrides[0] ? s->arms[a].overrides : "(same as control)");
    fprintf(f, "\nval BPB (final; verdict against the control spread)\n");
    print_block(s, r, f, w, 0);
    fprintf(f, "\nms/step (median of steps %d..%d; * = contended, no verdict)\n",
            s->warmup + 1, s->steps);
    print_block(s, r, f, w, 1);

    /* cells by name: missing ones, contended timings */
    int nmiss = 0, ncont = 0;
    for (int a = 0; a < s->n_arms; a++)
        for (int k = 0; k < s->n_seeds; k++) {
            const dm_ab_cell *c = &r->cell[a][k];
            if (c->status == DM_CELL_DONE) continue;
            char why[160];
            if (c->status == DM_CELL_MISSING) snprintf(why, sizeof why, "%s", c->why[0] ? c->why : "not run");
            else snprintf(why, sizeof why, "%s: %s", cell_word(c), c->why);
            fprintf(f, "%s %s/seed%" PRIu64 " (%s)", nmiss++ ? "," : "\nmissing:",
                    s->arms[a].name, s->seeds[k], why);
        }
    if (nmiss) fprintf(f, "\n");
    for (int a = 0; a < s->n_arms; a++)
        for (int k = 0; k < s->n_seeds; k++) {
            const dm_ab_cell *c = &r->cell[a][k];
            if (c->status != DM_CELL_DONE || !c->flags) continue;
            fprintf(f, "%s %s/seed%" PRIu64 " (", ncont++ ? "," : "\ncontended:",
                    s->arms[a].name, s->seeds[k]);
            const char *sep = "";
            if (c->flags & DM_PROBE_LOAD) {
                fprintf(f, "load %.2f", c->load_max);
                sep = ", ";
            }
            if (c->flags & DM_PROBE_OTHERS) {
                fprintf(f, "%sothers %.2f cores", sep, c->others_cores);
                sep = ", ";
            }
            if (c->flags & DM_PROBE_STEAL) {
                fprintf(f, "%ssteal %.1f%%", sep, 100 * c->steal_frac);
                sep = ", ";
            }
            if (c->flags & DM_PROBE_UNMEASURED) fprintf(f, "%sunmeasured", sep);
            fprintf(f, ")");
        }
    if (ncont) fprintf(f, "\n");
}

/* ---- history rows ------------------------------------------------------------------- */

int dm_ab_history(const dm_ab_spec *s, const dm_ab_results *r, const char *path, char *err,
                  size_t errlen) {
    dm_history_row rows[2 * DM_AB_MAX_ARMS];
    char what[DM_AB_MAX_ARMS][160], config[DM_AB_MAX_ARMS][2048], seeds[512];
    const char *base = strrchr(s->dir, '/');
    base = base && base[1] ? base + 1 : s->dir;
    seeds_text(s, seeds, sizeof seeds);
    int n = 0;
    for (int a = 0; a < s->n_arms; a++) {
        dm_ab_stats st = dm_ab_arm_stats(r->cell[a], s->n_seeds);
        if (!st.complete) {
            snprintf(err, errlen, "the sweep has missing cells: no history rows");
            return 1;
        }
        char keys[1800];
        dm_config c;
        dm_ab_cell_config(s, a, 0, &c);
        nondefault_keys(&c, keys, sizeof keys);
        snprintf(what[a], sizeof what[a], "ab:%.100s/%s", base, s->arms[a].name);
        snprintf(config[a], sizeof config[a], "%.1500s seeds=%.500s", keys, seeds);
        rows[n++] = (dm_history_row){what[a], config[a], "val_bpb", st.mean, st.spread,
                                     st.n, NULL};
        rows[n++] = (dm_history_row){what[a], config[a], "ms_per_step", st.ms_mean,
                                     st.ms_spread, st.n,
                                     !st.timed ? "untimed" : st.contended ? "contended" : NULL};
    }
    return dm_history_append(path, rows, n, err, errlen);
}
