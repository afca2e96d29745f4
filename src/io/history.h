/* history.h — benchmark record keeping (docs/architecture.md section 7):
 * benches/history.tsv rows, the machine they were measured on, and a contention probe that
 * says whether the machine was busy while a timing was taken.
 *
 * benches/history.tsv is append-only (never sorted, never rewritten; merged by union,
 * checked by scripts/history_check.sh). Its columns, tab separated, header first:
 *   date     UTC, ISO 8601 (2025-01-31T12:00:00Z)
 *   commit   `git rev-parse --short HEAD` of the source tree, or "unknown"
 *   machine  hostname, CPU model, usable cores ("box/AMD EPYC 7B13/2c")
 *   what     what was measured ("ab:control", "bench:gemm")
 *   config   the settings that matter (non-default config keys, sizes)
 *   metric   the quantity and unit ("val_bpb", "ms_per_step")
 *   value    the number
 *   spread   max - min over the n readings ("-" when not applicable)
 *   n        how many readings value summarizes
 *   flags    comma-separated: "contended" (see dm_probe), "dirty" (uncommitted changes
 *            in the source tree), "-" when none */
#ifndef DM_HISTORY_H
#define DM_HISTORY_H

#include <stddef.h>
#include <stdio.h>

#define DM_HISTORY_HEADER "date\tcommit\tmachine\twhat\tconfig\tmetric\tvalue\tspread\tn\tflags"

typedef struct {
    const char *what, *config, *metric;
    double value;
    double spread; /* NAN: not applicable */
    int n;
    const char *flags; /* NULL or "": none */
} dm_history_row;

/* Append rows to the history file at path (created with the header when missing or
 * empty). date, commit and machine are filled in here; "dirty" joins the flags when the
 * source tree has uncommitted changes. Tabs and newlines inside fields become spaces.
 * 0 ok; else a one-line error in err. */
int dm_history_append(const char *path, const dm_history_row *rows, int n, char *err,
                      size_t errlen);

/* How benchmarks report: print rows to out (when not NULL) in exactly the history
 * columns, one line each with no header, so the lines can be pasted into the history
 * file; and append the same lines (same date, commit, machine) to the history at path
 * when path is not NULL, as dm_history_append does. 0 ok; else a one-line error in err. */
int dm_history_report(FILE *out, const char *path, const dm_history_row *rows, int n,
                      char *err, size_t errlen);

/* Short commit of the source tree ("unknown" without git); *dirty = 1 when tracked files
 * other than benches/history.tsv have uncommitted changes. */
void dm_history_commit(char *buf, size_t n, int *dirty);
/* "hostname/CPU model/Nc" (N = cores this process may run on). */
void dm_history_machine(char *buf, size_t n);

/* ---- contention probe ----------------------------------------------------------------
 * Brackets a timed piece of work (a training run in a child process, or a benchmark in
 * this one) and says whether other work competed for the CPUs meanwhile. It reads
 *   - /proc/stat, summed over the CPUs this process may run on (its affinity mask):
 *     busy time (user+nice+system+irq+softirq+steal) and steal time;
 *   - getrusage of this process and of its waited-for children: our own CPU time;
 *   - /proc/loadavg (1-minute load), sampled at begin, end and at every dm_probe_tick.
 * At the end, with T = the threads the work used and N = the CPUs of the mask:
 *   steal   steal time > 2% of the CPUs' time                      (a VM host was busy)
 *   others  (busy - our CPU time) / wall > (N - T) + 0.1 cores + tick rounding
 *           (other processes ran on the cores our threads needed; other work on spare
 *           cores does not count)
 *   load    the largest 1-minute load average sampled > max(T, CPUs online) + 0.5 (more
 *           runnable tasks than cores: with T = all cores, "load above our threads").
 *           The average lags by about a minute: samples of the first minute are left
 *           out when later ones exist; in work shorter than that, a load that ended
 *           just before can still flag it (the probe errs towards "contended").
 *   unmeasured  /proc/stat or /proc/loadavg could not be read (not Linux?): unknown
 * Any of them marks the timing as contended: it must not yield a verdict. */
enum {
    DM_PROBE_STEAL = 1u << 0,
    DM_PROBE_OTHERS = 1u << 1,
    DM_PROBE_LOAD = 1u << 2,
    DM_PROBE_UNMEASURED = 1u << 3, /* /proc could not be read: contention unknown */
};

typedef struct {
    int ncpu;                 /* CPUs in the affinity mask */
    int online;               /* CPUs online */
    double t0;                /* monotonic start */
    double busy0, steal0, total0; /* /proc/stat jiffies over the mask at begin */
    double cpu0;              /* own + children CPU seconds at begin */
    double load_max;          /* largest 1-minute load average sampled */
    double load_late;         /* the same over samples 60 s or more after begin (-1: none) */
    int proc_ok;              /* /proc/stat and /proc/loadavg were readable at begin */
} dm_probe;

typedef struct {
    double wall_s;       /* seconds from begin to end */
    double own_cpu_s;    /* CPU seconds of this process and its waited-for children */
    double others_cores; /* average cores busy with other work (may read slightly < 0) */
    double steal_frac;   /* steal / all time of the mask's CPUs */
    double load_max;     /* largest 1-minute load average sampled */
    int threads;         /* T */
    int ncpu;            /* N */
    int online;
    unsigned flags;      /* DM_PROBE_* */
} dm_probe_result;

void dm_probe_begin(dm_probe *p);
void dm_probe_tick(dm_probe *p); /* sample the load average (call about once a second) */
/* threads: how many threads the work ran (T above). */
void dm_probe_end(dm_probe *p, int threads, dm_probe_result *r);
/* The flags as words ("steal,others,load,unmeasured"; "" when none). */
void dm_probe_flags_text(unsigned flags, char *buf, size_t n);
/* The decision of dm_probe_end, pure (testable): flags from the measured numbers. */
unsigned dm_probe_judge(double wall_s, double others_cores, double steal_frac,
                        double load_max, int threads, int ncpu, int online);

#endif
