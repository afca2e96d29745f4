/* ab_report.c — the table of an A/B sweep and its history rows (see ab.h). */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "io/history.h"
#include "jobs/ab.h"

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

static int any_budget(const dm_ab_spec *s) {
    for (int a = 0; a < s->n_arms; a++)
        if (s->arms[a].cfg.time_budget > 0) return 1;
    return 0;
}

void dm_ab_print(const dm_ab_spec *s, const dm_ab_results *r, FILE *f) {
    int w = 8;
    for (int a = 0; a < s->n_arms; a++) {
        int l = (int)strlen(s->arms[a].name);
        if (l > w) w = l;
    }
    char seeds[512], keys[4096];
    dm_ab_seeds_text(s, seeds, sizeof seeds);
    fprintf(f, "\nA/B %s: control + %d variant%s x %d seed%s (%s), %d steps%s\n", s->dir,
            s->n_arms - 1, s->n_arms == 2 ? "" : "s", s->n_seeds, s->n_seeds == 1 ? "" : "s",
            seeds, s->steps, any_budget(s) ? " (a time_budget arm: its own)" : "");
    nondefault_keys(&s->arms[0].cfg, keys, sizeof keys);
    fprintf(f, "  corpus %s\n  control: %s\n", s->data.path, keys[0] ? keys : "(defaults)");
    for (int a = 1; a < s->n_arms; a++)
        fprintf(f, "  %s: %s\n", s->arms[a].name,
                s->arms[a].overrides[0] ? s->arms[a].overrides : "(same as control)");
    fprintf(f, "\nval BPB (final; verdict against the control spread)\n");
    print_block(s, r, f, w, 0);
    int budgets = any_budget(s);
    char last[32] = "the end"; /* a budget arm's cells end where their budget did */
    if (!budgets) snprintf(last, sizeof last, "%d", s->steps);
    fprintf(f, "\nms/step (median of steps %d..%s; * = contended, no verdict)\n",
            s->warmup + 1, last);
    print_block(s, r, f, w, 1);
    if (budgets) { /* each cell of an arm with a time budget fixed its own steps */
        fprintf(f, "\nsteps (an arm with a time_budget: each cell's own, fixed by its "
                "measured rate)\n%-*s", w + 4, "");
        for (int k = 0; k < s->n_seeds; k++) {
            char h[32];
            snprintf(h, sizeof h, "seed %" PRIu64, s->seeds[k]);
            fprintf(f, "%-10s", h);
        }
        fprintf(f, "\n");
        for (int a = 0; a < s->n_arms; a++) {
            fprintf(f, "  %-*s  ", w, s->arms[a].name);
            for (int k = 0; k < s->n_seeds; k++) {
                char v[32] = "-";
                if (r->cell[a][k].status == DM_CELL_DONE)
                    snprintf(v, sizeof v, "%d", r->cell[a][k].steps);
                fprintf(f, "%-10s", v);
            }
            fprintf(f, "\n");
        }
    }

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
    dm_ab_seeds_text(s, seeds, sizeof seeds);
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

