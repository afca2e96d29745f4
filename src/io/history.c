/* history.c — benches/history.tsv rows, the machine description, the contention probe
 * (see history.h). */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "io/history.h"

#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef DM_SOURCE_DIR
#define DM_SOURCE_DIR "."
#endif

/* ---- rows ---------------------------------------------------------------------------- */

/* Copy s into buf with tabs, newlines and carriage returns turned into spaces, so a
 * field can never split a row or a column; empty becomes "-". */
static void field(char *buf, size_t n, const char *s) {
    if (!s || !*s) s = "-";
    snprintf(buf, n, "%s", s);
    for (char *p = buf; *p; p++)
        if (*p == '\t' || *p == '\n' || *p == '\r') *p = ' ';
}

/* First line of the output of a shell command (trailing newline removed); 0 when the
 * command ran, exited 0 and printed something. */
static int cmd_line(const char *cmd, char *buf, size_t n) {
    fflush(NULL); /* popen forks: nothing buffered may be written twice */
    FILE *p = popen(cmd, "r");
    if (!p) return 1;
    buf[0] = 0;
    int got = fgets(buf, (int)n, p) != NULL;
    while (got && fgetc(p) != EOF) {} /* drain, so the child never blocks on a full pipe */
    int rc = pclose(p);
    buf[strcspn(buf, "\r\n")] = 0;
    return !(got && rc == 0 && buf[0]);
}

void dm_history_commit(char *buf, size_t n, int *dirty) {
    char line[256];
    *dirty = 0;
    if (cmd_line("git -C '" DM_SOURCE_DIR "' rev-parse --short HEAD 2>/dev/null", line,
                 sizeof line) != 0) {
        snprintf(buf, n, "unknown");
        return;
    }
    snprintf(buf, n, "%.40s", line);
    /* tracked files changed since HEAD, except the history itself (which every append
     * changes): the measured code is then not exactly the commit */
    char st[256];
    *dirty = cmd_line("git -C '" DM_SOURCE_DIR "' status --porcelain --untracked-files=no "
                      "-- . ':!benches/history.tsv' 2>/dev/null", st, sizeof st) == 0;
}

void dm_history_machine(char *buf, size_t n) {
    char host[128] = "unknown", model[160] = "unknown cpu", line[512];
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "unknown");
    host[sizeof host - 1] = 0;
    host[strcspn(host, ".")] = 0; /* the short name */
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (!colon || strncmp(line, "model name", 10) != 0) continue;
        char *v = colon + 1;
        while (*v == ' ' || *v == '\t') v++;
        v[strcspn(v, "\r\n")] = 0;
        snprintf(model, sizeof model, "%s", v);
        break;
    }
    if (f) fclose(f);
    int cores = 0;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) cores = CPU_COUNT(&set);
    if (cores <= 0) cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    snprintf(buf, n, "%s/%s/%dc", host, model, cores);
}

/* When and where rows are measured: the same for every row of one report. */
typedef struct {
    char date[32], commit[64], machine[384];
    int dirty;
} stamp;

static void stamp_now(stamp *s) {
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(s->date, sizeof s->date, "%Y-%m-%dT%H:%M:%SZ", &tm);
    dm_history_commit(s->commit, sizeof s->commit, &s->dirty);
    char mraw[384];
    dm_history_machine(mraw, sizeof mraw);
    field(s->machine, sizeof s->machine, mraw);
}

/* The one row formatter: rows in the history columns, one line each. */
static void put_rows(FILE *f, const stamp *s, const dm_history_row *rows, int n) {
    for (int i = 0; i < n; i++) {
        const dm_history_row *r = &rows[i];
        char what[256], config[2048], metric[128], value[64], spread[64], flags[256], fl[256];
        field(what, sizeof what, r->what);
        field(config, sizeof config, r->config);
        field(metric, sizeof metric, r->metric);
        snprintf(flags, sizeof flags, "%s%s%s", r->flags ? r->flags : "",
                 s->dirty && r->flags && r->flags[0] ? "," : "", s->dirty ? "dirty" : "");
        field(fl, sizeof fl, flags);
        snprintf(value, sizeof value, "%.6g", r->value);
        if (isnan(r->spread)) snprintf(spread, sizeof spread, "-");
        else snprintf(spread, sizeof spread, "%.6g", r->spread);
        fprintf(f, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", s->date, s->commit, s->machine,
                what, config, metric, value, spread, r->n, fl);
    }
}

static int append_rows(const char *path, const stamp *s, const dm_history_row *rows, int n,
                       char *err, size_t errlen) {
    struct stat st;
    int fresh = stat(path, &st) != 0 || st.st_size == 0;
    FILE *f = fopen(path, "a");
    if (!f) {
        snprintf(err, errlen, "cannot append to history %s: %s", path, strerror(errno));
        return 1;
    }
    if (fresh) fprintf(f, "%s\n", DM_HISTORY_HEADER);
    put_rows(f, s, rows, n);
    if (fflush(f) != 0 || fclose(f) != 0) {
        snprintf(err, errlen, "cannot write history %s: %s", path, strerror(errno));
        return 1;
    }
    return 0;
}

int dm_history_report(FILE *out, const char *path, const dm_history_row *rows, int n,
                      char *err, size_t errlen) {
    stamp s;
    stamp_now(&s);
    if (out) {
        put_rows(out, &s, rows, n);
        fflush(out);
    }
    return path ? append_rows(path, &s, rows, n, err, errlen) : 0;
}

int dm_history_append(const char *path, const dm_history_row *rows, int n, char *err,
                      size_t errlen) {
    return dm_history_report(NULL, path, rows, n, err, errlen);
}

/* ---- contention probe ---------------------------------------------------------------- */

/* Sum of busy, steal and all jiffies over the CPUs of the affinity mask. 0 ok. */
static int read_stat(double *busy, double *steal, double *total) {
    cpu_set_t set;
    int have_mask = sched_getaffinity(0, sizeof set, &set) == 0;
    FILE *f = fopen("/proc/stat", "r");
    if (!f) return 1;
    char line[1024];
    *busy = *steal = *total = 0;
    int found = 0;
    while (fgets(line, sizeof line, f)) {
        int cpu;
        /* per-CPU lines only ("cpuN ..."), not the aggregate "cpu  ..." line */
        if (strncmp(line, "cpu", 3) != 0 || sscanf(line + 3, "%d", &cpu) != 1) continue;
        if (have_mask && (cpu < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &set))) continue;
        /* user nice system idle iowait irq softirq steal (guest time is inside user) */
        double v[8] = {0};
        char *p = strchr(line, ' ');
        for (int i = 0; i < 8 && p; i++) v[i] = strtod(p, &p);
        *busy += v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
        *steal += v[7];
        for (int i = 0; i < 8; i++) *total += v[i];
        found++;
    }
    fclose(f);
    return found == 0;
}

static double cpu_seconds(void) {
    struct rusage s, c;
    getrusage(RUSAGE_SELF, &s);
    getrusage(RUSAGE_CHILDREN, &c);
    return (double)(s.ru_utime.tv_sec + s.ru_stime.tv_sec + c.ru_utime.tv_sec + c.ru_stime.tv_sec) +
           1e-6 * (double)(s.ru_utime.tv_usec + s.ru_stime.tv_usec + c.ru_utime.tv_usec +
                           c.ru_stime.tv_usec);
}

static double mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Sample the 1-minute load average into load_max (and load_late past the first minute);
 * 0 ok. */
static int sample_load(dm_probe *p) {
    FILE *f = fopen("/proc/loadavg", "r");
    double l;
    int ok = f && fscanf(f, "%lf", &l) == 1;
    if (f) fclose(f);
    if (ok && l > p->load_max) p->load_max = l;
    if (ok && p->t0 > 0 && mono() - p->t0 >= 60 && l > p->load_late) p->load_late = l;
    return !ok;
}

void dm_probe_tick(dm_probe *p) { sample_load(p); }

void dm_probe_begin(dm_probe *p) {
    memset(p, 0, sizeof *p);
    p->load_late = -1; /* no sample past the first minute yet */
    cpu_set_t set;
    p->ncpu = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
    p->online = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (p->ncpu <= 0) p->ncpu = p->online;
    p->proc_ok = read_stat(&p->busy0, &p->steal0, &p->total0) == 0 && sample_load(p) == 0;
    p->cpu0 = cpu_seconds();
    p->t0 = mono();
}

unsigned dm_probe_judge(double wall_s, double others_cores, double steal_frac,
                        double load_max, int threads, int ncpu, int online) {
    unsigned flags = 0;
    if (steal_frac > 0.02) flags |= DM_PROBE_STEAL;
    /* /proc/stat counts in clock ticks: allow two ticks per CPU of rounding */
    double tick = 1.0 / (double)sysconf(_SC_CLK_TCK);
    double spare = ncpu > threads ? ncpu - threads : 0;
    double slack = wall_s > 0 ? 2.0 * tick * ncpu / wall_s : 0;
    if (others_cores > spare + 0.1 + slack) flags |= DM_PROBE_OTHERS;
    double cores = threads > online ? threads : online;
    if (load_max > cores + 0.5) flags |= DM_PROBE_LOAD;
    return flags;
}

void dm_probe_end(dm_probe *p, int threads, dm_probe_result *r) {
    dm_probe_tick(p);
    memset(r, 0, sizeof *r);
    r->wall_s = mono() - p->t0;
    r->own_cpu_s = cpu_seconds() - p->cpu0;
    /* past the first minute the average no longer carries the load of before the work */
    r->load_max = p->load_late >= 0 ? p->load_late : p->load_max;
    r->threads = threads > 0 ? threads : p->ncpu;
    r->ncpu = p->ncpu;
    r->online = p->online;
    double busy, steal, total;
    int measured = p->proc_ok && read_stat(&busy, &steal, &total) == 0 && r->wall_s > 0;
    if (measured) {
        double hz = (double)sysconf(_SC_CLK_TCK);
        double dt = total - p->total0;
        r->steal_frac = dt > 0 ? (steal - p->steal0) / dt : 0;
        r->others_cores = ((busy - p->busy0) / hz - r->own_cpu_s) / r->wall_s;
    }
    r->flags = dm_probe_judge(r->wall_s, r->others_cores, r->steal_frac, r->load_max,
                              r->threads, r->ncpu, r->online);
    if (!measured) r->flags |= DM_PROBE_UNMEASURED;
}

void dm_probe_flags_text(unsigned flags, char *buf, size_t n) {
    static const char *const names[] = {"steal", "others", "load", "unmeasured"};
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; i < 4; i++)
        if (flags & (1u << i) && len < n)
            len += (size_t)snprintf(buf + len, n - len, "%s%s", len ? "," : "", names[i]);
}
