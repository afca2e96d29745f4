/* ckpt.c — checkpoint directories (see ckpt.h). */
#include "io/ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/files.h"
#include "io/safetensors.h"

#define CKPT_FORMAT "dormouse-1"
#define KEEP 2

/* checkpoint directories of run_dir, newest first; returns how many (<= max) */
static int list_ckpts(const char *run_dir, long *steps, int max) {
    DIR *d = opendir(run_dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        long s;
        char tail;
        if (sscanf(e->d_name, "ckpt-%ld%c", &s, &tail) != 1 || strlen(e->d_name) != 13) continue;
        if (n < max) steps[n++] = s;
    }
    closedir(d);
    for (int i = 1; i < n; i++) /* insertion sort, descending */
        for (int j = i; j > 0 && steps[j] > steps[j - 1]; j--) {
            long t = steps[j];
            steps[j] = steps[j - 1];
            steps[j - 1] = t;
        }
    return n;
}

int dm_ckpt_save(const char *run_dir, dm_model *m, const dm_optim *opt, long step, char *err,
                 size_t errlen) {
    char dir[4000], tmp[4100], path[4200], stepbuf[32];
    snprintf(dir, sizeof dir, "%s/ckpt-%08ld", run_dir, step);
    snprintf(tmp, sizeof tmp, "%s.tmp", dir);
    snprintf(stepbuf, sizeof stepbuf, "%ld", step);
    dm_rmtree(tmp);
    if (mkdir(tmp, 0755) != 0) {
        snprintf(err, errlen, "cannot create %s: %s", tmp, strerror(errno));
        return 1;
    }
    char *cfg = dm_config_to_json(dm_model_config(m));
    int nt = dm_model_num_tensors(m);
    dm_st_tensor *ts = calloc((size_t)nt, sizeof *ts);
    const float *P = dm_model_params(m);
    for (int i = 0; i < nt; i++) {
        const dm_tensor *t = dm_model_tensor(m, i);
        ts[i].name = t->name;
        ts[i].data = P + t->offset;
        ts[i].ndim = t->ndim;
        ts[i].shape[0] = t->shape[0];
        ts[i].shape[1] = t->shape[1];
    }
    const char *meta[] = {"format", CKPT_FORMAT, "step", stepbuf, "config", cfg, NULL};
    snprintf(path, sizeof path, "%s/model.safetensors", tmp);
    int rc = dm_st_write(path, ts, nt, meta, err, errlen);
    free(ts);
    free(cfg);
    if (!rc && opt) { /* the optimizer's named flat buffers as 1-D tensors */
        dm_optim_buf bufs[DM_OPTIM_MAX_BUFS];
        dm_st_tensor os[DM_OPTIM_MAX_BUFS];
        int n = dm_optim_state(opt, bufs, DM_OPTIM_MAX_BUFS);
        for (int i = 0; i < n; i++) os[i] = (dm_st_tensor){bufs[i].name, bufs[i].data, 1,
                                                           {(int64_t)bufs[i].n}};
        const char *ometa[] = {"format", CKPT_FORMAT, "step", stepbuf, NULL};
        snprintf(path, sizeof path, "%s/optim.safetensors", tmp);
        rc = dm_st_write(path, os, n, ometa, err, errlen);
    }
    if (rc) {
        dm_rmtree(tmp);
        return 1;
    }
    dm_fsync_dir(tmp);
    dm_rmtree(dir); /* a checkpoint of the same step written before (resumed run) */
    if (rename(tmp, dir) != 0) {
        snprintf(err, errlen, "cannot rename %s to %s: %s", tmp, dir, strerror(errno));
        dm_rmtree(tmp);
        return 1;
    }
    dm_fsync_dir(run_dir);
    /* keep the newest KEEP */
    long steps[256];
    int n = list_ckpts(run_dir, steps, 256);
    for (int i = KEEP; i < n; i++) {
        snprintf(path, sizeof path, "%s/ckpt-%08ld", run_dir, steps[i]);
        dm_rmtree(path);
    }
    return 0;
}

int dm_ckpt_resolve(const char *path, char *out, size_t outlen, char *err, size_t errlen) {
    struct stat st;
    char p[4200];
    if (stat(path, &st) != 0) {
        snprintf(err, errlen, "checkpoint not found: %s", path);
        return 1;
    }
    if (S_ISREG(st.st_mode)) {
        snprintf(out, outlen, "%s", path);
        return 0;
    }
    snprintf(p, sizeof p, "%s/model.safetensors", path);
    if (stat(p, &st) == 0) {
        snprintf(out, outlen, "%s", p);
        return 0;
    }
    long steps[256];
    if (list_ckpts(path, steps, 256) > 0) {
        snprintf(out, outlen, "%s/ckpt-%08ld/model.safetensors", path, steps[0]);
        return 0;
    }
    snprintf(err, errlen, "no checkpoint in %s (expected model.safetensors or ckpt-* directories)",
             path);
    return 1;
}

int dm_ckpt_read_config(const char *path, dm_config *cfg, long *step, char *err,
                        size_t errlen) {
    dm_st_file *f = dm_st_open(path, err, errlen);
    if (!f) return 1;
    const char *fmt = dm_st_meta(f, "format"), *js = dm_st_meta(f, "config");
    const char *st = dm_st_meta(f, "step");
    int rc = 0;
    if (!fmt || strcmp(fmt, CKPT_FORMAT) != 0 || !js || !st) {
        snprintf(err, errlen, "%s is not a dormouse checkpoint (no format/config/step metadata)", path);
        rc = 1;
    } else {
        dm_config_default(cfg);
        char e2[DM_ERRLEN];
        if (dm_config_from_json(cfg, js, e2, sizeof e2)) {
            snprintf(err, errlen, "%s: bad config in metadata: %s", path, e2);
            rc = 1;
        }
        if (step) *step = atol(st);
    }
    dm_st_close(f);
    return rc;
}

/* Every state buffer of opt from the 1-D tensor of its name in f. */
static int load_optim(const dm_st_file *f, dm_optim *opt, char *err, size_t errlen) {
    dm_optim_buf bufs[DM_OPTIM_MAX_BUFS];
    int n = dm_optim_state(opt, bufs, DM_OPTIM_MAX_BUFS);
    for (int i = 0; i < n; i++) {
        int nd;
        int64_t sh[4];
        const float *src = dm_st_get(f, bufs[i].name, &nd, sh);
        if (!src || nd != 1) {
            snprintf(err, errlen, "optimizer state: tensor '%s' missing or of the wrong shape",
                     bufs[i].name);
            return 1;
        }
        if (dm_optim_load(opt, bufs[i].name, src, (size_t)sh[0], err, errlen)) return 1;
    }
    return 0;
}

int dm_ckpt_load(const char *model_path, dm_model *m, dm_optim *opt, char *err, size_t errlen) {
    char path[4200];
    dm_config saved;
    long step;
    if (dm_ckpt_read_config(model_path, &saved, &step, err, errlen) ||
        dm_config_check_model(&saved, dm_model_config(m), err, errlen))
        return 1;
    snprintf(path, sizeof path, "%s", model_path);
    dm_st_file *f = dm_st_open(path, err, errlen);
    if (!f) return 1;
    int nt = dm_model_num_tensors(m), rc = 0;
    if (dm_st_count(f) != nt) {
        snprintf(err, errlen, "%s holds %d tensors, the model has %d", path, dm_st_count(f), nt);
        rc = 1;
    }
    float *P = dm_model_params(m);
    for (int i = 0; i < nt && !rc; i++) {
        const dm_tensor *t = dm_model_tensor(m, i);
        int nd;
        int64_t sh[4];
        const float *src = dm_st_get(f, t->name, &nd, sh);
        if (!src || nd != t->ndim || sh[0] != t->shape[0] || (nd == 2 && sh[1] != t->shape[1])) {
            snprintf(err, errlen, "%s: tensor '%s' missing or of the wrong shape", path, t->name);
            rc = 1;
            break;
        }
        memcpy(P + t->offset, src, t->numel * sizeof(float));
    }
    dm_st_close(f);
    if (rc || !opt) return rc;
    char *slash = strrchr(path, '/');
    if (slash) snprintf(slash + 1, sizeof path - (size_t)(slash + 1 - path), "optim.safetensors");
    else snprintf(path, sizeof path, "optim.safetensors");
    f = dm_st_open(path, err, errlen);
    if (!f) return 1;
    const char *st = dm_st_meta(f, "step");
    if (!st || atol(st) != step) {
        snprintf(err, errlen, "%s: step %s does not match the model's %ld", path, st ? st : "?", step);
        rc = 1;
    } else {
        rc = load_optim(f, opt, err, errlen);
    }
    dm_st_close(f);
    return rc;
}
