/* metrics.c — metrics.jsonl as a table, and as CSV (see metrics.h). */
#include "io/metrics.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/files.h"

/* the column of key, added when new; -1 when out of memory */
static int col_of(dm_metrics *m, const char *key, int *cap) {
    for (int i = 0; i < m->n_cols; i++)
        if (!strcmp(m->cols[i], key)) return i;
    if (m->n_cols == *cap) {
        int nc = *cap ? 2 * *cap : 16;
        char **c = realloc(m->cols, (size_t)nc * sizeof *c);
        if (!c) return -1;
        m->cols = c;
        *cap = nc;
    }
    m->cols[m->n_cols] = strdup(key);
    return m->cols[m->n_cols] ? m->n_cols++ : -1;
}

int dm_metrics_read(const char *path, dm_metrics *m, char *err, size_t errlen) {
    memset(m, 0, sizeof *m);
    int fd = dm_open_regular(path, NULL, err, errlen); /* a FIFO is refused, not waited on */
    FILE *f = fd < 0 ? NULL : fdopen(fd, "r");
    if (!f) {
        if (fd >= 0) {
            snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
            close(fd);
        }
        return 1;
    }
    /* rows as parsed objects first: the column count is known only at the end */
    cJSON **objs = NULL;
    int n = 0, cap = 0, ccap = 0, lineno = 0, rc = 0;
    char *line = NULL;
    size_t lcap = 0;
    ssize_t len;
    while ((len = getline(&line, &lcap, f)) > 0) {
        lineno++;
        int complete = line[len - 1] == '\n';
        cJSON *o = cJSON_Parse(line);
        int ok = cJSON_IsObject(o);
        for (cJSON *e = ok ? o->child : NULL; e && ok; e = e->next) ok = cJSON_IsNumber(e);
        if (!ok) {
            cJSON_Delete(o);
            if (!complete && strspn(line, " \t\r\n") != (size_t)len) break; /* torn last line */
            if (strspn(line, " \t\r\n") == (size_t)len) continue;            /* blank */
            snprintf(err, errlen, "%s: line %d is not a JSON object of numbers", path, lineno);
            rc = 1;
            break;
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 256;
            cJSON **no = realloc(objs, (size_t)cap * sizeof *no);
            if (!no) {
                cJSON_Delete(o);
                snprintf(err, errlen, "out of memory reading %s", path);
                rc = 1;
                break;
            }
            objs = no;
        }
        objs[n++] = o;
        for (cJSON *e = o->child; e && !rc; e = e->next)
            if (col_of(m, e->string, &ccap) < 0) {
                snprintf(err, errlen, "out of memory reading %s", path);
                rc = 1;
            }
        if (rc) break;
    }
    free(line);
    fclose(f);
    if (!rc && n && m->n_cols) {
        m->v = malloc((size_t)n * m->n_cols * sizeof *m->v);
        if (!m->v) {
            snprintf(err, errlen, "out of memory reading %s", path);
            rc = 1;
        }
    }
    if (!rc) {
        m->n_rows = m->n_cols ? n : 0;
        for (int r = 0; r < m->n_rows; r++) {
            double *row = m->v + (size_t)r * m->n_cols;
            for (int c = 0; c < m->n_cols; c++) row[c] = NAN;
            for (cJSON *e = objs[r]->child; e; e = e->next)
                row[dm_metrics_col(m, e->string)] = e->valuedouble;
        }
    }
    for (int r = 0; r < n; r++) cJSON_Delete(objs[r]);
    free(objs);
    if (rc) dm_metrics_free(m);
    return rc;
}

void dm_metrics_free(dm_metrics *m) {
    for (int i = 0; i < m->n_cols; i++) free(m->cols[i]);
    free(m->cols);
    free(m->v);
    memset(m, 0, sizeof *m);
}

int dm_metrics_col(const dm_metrics *m, const char *name) {
    for (int i = 0; i < m->n_cols; i++)
        if (!strcmp(m->cols[i], name)) return i;
    return -1;
}

double dm_metrics_at(const dm_metrics *m, int row, int col) {
    return col < 0 || row < 0 || row >= m->n_rows ? NAN : m->v[(size_t)row * m->n_cols + col];
}

/* a CSV field: quoted (with inner quotes doubled) when it holds , " or a line break */
static void csv_text(FILE *f, const char *s) {
    if (!strpbrk(s, ",\"\r\n")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

void dm_metrics_csv_header(FILE *f, const char *const *cols, int n_cols) {
    fputs("run", f);
    for (int c = 0; c < n_cols; c++) {
        fputc(',', f);
        csv_text(f, cols[c]);
    }
    fputs("\n", f);
}

void dm_metrics_csv_rows(FILE *f, const char *run, const dm_metrics *m,
                         const char *const *cols, int n_cols) {
    int *idx = malloc((size_t)(n_cols ? n_cols : 1) * sizeof *idx);
    if (!idx) return;
    for (int c = 0; c < n_cols; c++) idx[c] = dm_metrics_col(m, cols[c]);
    for (int r = 0; r < m->n_rows; r++) {
        csv_text(f, run);
        for (int c = 0; c < n_cols; c++) {
            double v = dm_metrics_at(m, r, idx[c]);
            fputc(',', f);
            if (isnan(v)) continue;
            char buf[32];
            for (int prec = 6; prec <= 17; prec++) { /* the shortest exact form */
                snprintf(buf, sizeof buf, "%.*g", prec, v);
                if (strtod(buf, NULL) == v) break;
            }
            fputs(buf, f);
        }
        fputs("\n", f);
    }
    free(idx);
}

double dm_metrics_wall(const dm_metrics *m) {
    int ce = dm_metrics_col(m, "elapsed_s");
    double time = 0, prev = 0;
    for (int r = 0; ce >= 0 && r < m->n_rows; r++) {
        double e = dm_metrics_at(m, r, ce);
        if (isnan(e)) continue;
        if (e < prev) time += prev;
        prev = e;
    }
    return time + prev;
}
