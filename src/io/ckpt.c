/* ckpt.c — checkpoint directories (see ckpt.h). */
#include "io/ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/num.h"
#include "base/text.h"
#include "io/files.h"
#include "io/safetensors.h"
#include "io/tokenizer.h"
#include "model/host.h"
#include "ops/backend.h"
#include "optim/optim.h"

#define CKPT_FORMAT "dormouse-1"
#define KEEP 2
#define MAX_STEP (1LL << 62)

/* ---- the checkpoints of a run directory --------------------------------------------- */

/* The step of a directory named ckpt-DIGITS (at least 8 digits), else -1. */
static long long ckpt_step_of(const char *name) {
    if (strncmp(name, "ckpt-", 5) != 0) return -1;
    const char *d = name + 5;
    size_t n = strspn(d, "0123456789");
    long long step;
    if (n < 8 || n > 18 || d[n] || dm_parse_int(d, 0, MAX_STEP, &step)) return -1;
    return step;
}

typedef struct {
    long long step;
    char name[256];
} ckpt_ent;

static int cmp_newest(const void *a, const void *b) {
    const ckpt_ent *x = a, *y = b;
    return x->step != y->step ? (x->step > y->step ? -1 : 1) : strcmp(x->name, y->name);
}

/* The ckpt-* directories of run_dir, newest first (malloc'd; *n of them). */
static ckpt_ent *list_ckpts(const char *run_dir, int *n) {
    *n = 0;
    DIR *d = opendir(run_dir);
    if (!d) return NULL;
    ckpt_ent *v = NULL;
    int cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        long long s = ckpt_step_of(e->d_name);
        if (s < 0) continue;
        if (*n == cap) {
            ckpt_ent *nv = realloc(v, (size_t)(cap = cap ? 2 * cap : 8) * sizeof *v);
            if (!nv) break;
            v = nv;
        }
        v[*n].step = s;
        snprintf(v[*n].name, sizeof v[*n].name, "%s", e->d_name);
        (*n)++;
    }
    closedir(d);
    if (*n > 1) qsort(v, (size_t)*n, sizeof *v, cmp_newest);
    return v;
}

/* Remove what a killed writer left: ckpt-*.tmp (never renamed in) and ckpt-*.del (being
 * pruned). Nothing reads them. */
static void clear_leftovers(const char *run_dir) {
    DIR *d = opendir(run_dir);
    if (!d) return;
    struct dirent *e;
    char p[4400];
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (strncmp(e->d_name, "ckpt-", 5) != 0 || l < 9) continue;
        if (strcmp(e->d_name + l - 4, ".tmp") && strcmp(e->d_name + l - 4, ".del")) continue;
        snprintf(p, sizeof p, "%s/%s", run_dir, e->d_name);
        dm_rmtree(p);
    }
    closedir(d);
}

/* Remove a checkpoint directory so that its name disappears in one step: renamed to
 * NAME.del, then deleted. */
static void remove_ckpt_dir(const char *run_dir, const char *dir) {
    char del[4500];
    snprintf(del, sizeof del, "%s.del", dir);
    if (rename(dir, del) != 0) return;
    dm_fsync_dir(run_dir);
    dm_rmtree(del);
}

/* Keep the newest KEEP checkpoints up to step, and the one of step `keep` (>= 0: the
 * fallback of a resume on probation, jobs/train_loop.c); one beyond step is of a past the run
 * left (a damaged checkpoint a resume skipped). */
static void prune(const char *run_dir, long step, long keep) {
    char path[4400];
    int n, kept = 0;
    ckpt_ent *v = list_ckpts(run_dir, &n);
    for (int i = 0; i < n; i++) {
        if (v[i].step <= step && kept < KEEP) {
            kept++;
            continue;
        }
        if (keep >= 0 && v[i].step == keep) continue;
        snprintf(path, sizeof path, "%s/%s", run_dir, v[i].name);
        remove_ckpt_dir(run_dir, path);
    }
    free(v);
}

int dm_ckpt_save(const char *run_dir, dm_model *m, const dm_optim *opt, long step, char *err,
                 size_t errlen) {
    return dm_ckpt_save_keeping(run_dir, m, opt, step, -1, err, errlen);
}

/* The save prunes before it writes (what a writer killed while pruning left) and after
 * the new checkpoint is in: at most KEEP + 1 exist at any moment (also with keep: a resume
 * keeps the checkpoint before the one it loaded only until its first save is proven, so
 * it is one of those three). */
/* dir/tokenizer.model with the n bytes of a model's tokenizer, fsynced. 0 ok. */
static int write_tokenizer(const char *dir, const void *b, size_t n, char *err, size_t errlen) {
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer.model", dir);
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(b, 1, n, f) == n && fflush(f) == 0 && fsync(fileno(f)) == 0;
    if (f) ok = (fclose(f) == 0) && ok;
    if (!ok) snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
    return !ok;
}

int dm_ckpt_save_keeping(const char *run_dir, dm_model *m, const dm_optim *opt, long step,
                         long keep, char *err, size_t errlen) {
    char dir[4000], tmp[4100], path[4200], stepbuf[32];
    snprintf(dir, sizeof dir, "%s/ckpt-%08ld", run_dir, step);
    snprintf(tmp, sizeof tmp, "%s.tmp", dir);
    snprintf(stepbuf, sizeof stepbuf, "%ld", step);
    clear_leftovers(run_dir);
    prune(run_dir, step, keep);
    if (mkdir(tmp, 0755) != 0) {
        snprintf(err, errlen, "cannot create %s: %s", tmp, strerror(errno));
        return 1;
    }
    char *cfg = dm_config_to_json(dm_model_config(m));
    int nt = dm_model_num_tensors(m);
    dm_st_tensor *ts = calloc((size_t)nt, sizeof *ts);
    /* the parameters and the optimizer's state in host memory (views, or copies) */
    dm_backend *be = dm_model_backend(m);
    size_t pbytes = dm_model_num_params(m) * sizeof(float);
    float *P = dm_backend_map(be, dm_model_param_mem(m), pbytes, 1);
    dm_optim_buf bufs[DM_OPTIM_MAX_BUFS];
    float *host[DM_OPTIM_MAX_BUFS] = {0};
    int n = opt ? dm_optim_state(opt, bufs, DM_OPTIM_MAX_BUFS) : 0, mapped = 1;
    for (int i = 0; i < n; i++)
        mapped &= !!(host[i] = dm_backend_map(be, bufs[i].data, bufs[i].n * sizeof(float), 1));
    if (!cfg || !ts || !P || !mapped) {
        for (int i = 0; i < n; i++)
            dm_backend_unmap(be, bufs[i].data, host[i], bufs[i].n * sizeof(float), 0);
        dm_backend_unmap(be, dm_model_param_mem(m), P, pbytes, 0);
        free(cfg);
        free(ts);
        dm_rmtree(tmp);
        snprintf(err, errlen, "out of memory saving %s", dir);
        return 1;
    }
    for (int i = 0; i < nt; i++) {
        const dm_tensor *t = dm_model_tensor(m, i);
        ts[i].name = t->name;
        ts[i].data = P + t->offset;
        ts[i].ndim = t->ndim;
        ts[i].shape[0] = t->shape[0];
        ts[i].shape[1] = t->shape[1];
    }
    /* a model of tokens carries its tokenizer: tokenizer.model beside the parameters,
     * its checksum in their metadata */
    size_t tok_n;
    const char *tok_sum;
    const void *tok = dm_model_tokenizer(m, &tok_n, &tok_sum);
    const char *meta[] = {"format", CKPT_FORMAT, "step", stepbuf, "config", cfg,
                          tok ? "tokenizer" : NULL, tok_sum, NULL};
    snprintf(path, sizeof path, "%s/model.safetensors", tmp);
    int rc = dm_st_write(path, ts, nt, meta, err, errlen);
    if (!rc && tok) rc = write_tokenizer(tmp, tok, tok_n, err, errlen);
    free(ts);
    free(cfg);
    if (!rc && opt) { /* the optimizer's named flat buffers as 1-D tensors */
        dm_st_tensor os[DM_OPTIM_MAX_BUFS];
        for (int i = 0; i < n; i++) os[i] = (dm_st_tensor){bufs[i].name, host[i], 1,
                                                           {(int64_t)bufs[i].n}};
        const char *ometa[] = {"format", CKPT_FORMAT, "step", stepbuf, NULL};
        snprintf(path, sizeof path, "%s/optim.safetensors", tmp);
        rc = dm_st_write(path, os, n, ometa, err, errlen);
    }
    for (int i = 0; i < n; i++)
        dm_backend_unmap(be, bufs[i].data, host[i], bufs[i].n * sizeof(float), 0);
    dm_backend_unmap(be, dm_model_param_mem(m), P, pbytes, 0);
    if (rc) {
        dm_rmtree(tmp);
        return 1;
    }
    dm_fsync_dir(tmp);
    struct stat st;
    if (lstat(dir, &st) == 0) remove_ckpt_dir(run_dir, dir); /* this step, saved before */
    if (rename(tmp, dir) != 0) {
        snprintf(err, errlen, "cannot rename %s to %s: %s", tmp, dir, strerror(errno));
        dm_rmtree(tmp);
        return 1;
    }
    dm_fsync_dir(run_dir);
    prune(run_dir, step, keep);
    return 0;
}

/* 1 when the directory dir (of a length, trailing slashes apart) is named ckpt-*.tmp or
 * ckpt-*.del: a save that did not reach its rename, or a checkpoint being pruned. Only a
 * checkpoint whose final rename happened counts. */
static int unrenamed(const char *dir, size_t l) {
    while (l > 1 && dir[l - 1] == '/') l--;
    size_t b = l;
    while (b > 0 && dir[b - 1] != '/') b--;
    return l - b > 9 && !strncmp(dir + b, "ckpt-", 5) &&
           (!strncmp(dir + l - 4, ".tmp", 4) || !strncmp(dir + l - 4, ".del", 4));
}

static int refuse_unrenamed(const char *path, size_t l, char *err, size_t errlen) {
    if (!unrenamed(path, l)) return 0;
    snprintf(err, errlen, "%.*s is not a checkpoint: a save writes ckpt-NNNNNNNN.tmp and renames "
             "it when it is complete (.del: one being removed); name the run directory or a "
             "ckpt-NNNNNNNN directory", (int)l, path);
    return 1;
}

int dm_ckpt_candidate(const char *path, int k, char *out, size_t outlen, char *err,
                      size_t errlen) {
    struct stat st;
    char p[4200];
    if (stat(path, &st) != 0) {
        if (k == 0) snprintf(err, errlen, "checkpoint not found: %s", path);
        return 1;
    }
    if (!S_ISDIR(st.st_mode)) { /* a model file (opening it checks that it is one) */
        const char *slash = strrchr(path, '/');
        if (k == 0 && slash && refuse_unrenamed(path, (size_t)(slash - path), err, errlen))
            return 1;
        if (k == 0) snprintf(out, outlen, "%s", path);
        return k != 0;
    }
    snprintf(p, sizeof p, "%s/model.safetensors", path);
    if (lstat(p, &st) == 0) {
        if (k == 0 && refuse_unrenamed(path, strlen(path), err, errlen)) return 1;
        if (k == 0) snprintf(out, outlen, "%s", p);
        return k != 0;
    }
    int n;
    ckpt_ent *v = list_ckpts(path, &n);
    int rc = k >= n;
    if (!rc) snprintf(out, outlen, "%s/%s/model.safetensors", path, v[k].name);
    else if (k == 0 && (snprintf(p, sizeof p, "%s/config.json", path), lstat(p, &st) == 0))
        snprintf(err, errlen, "no checkpoint in %s yet (a run saves one every ckpt_time, 5 "
                 "minutes by default, every ckpt_every steps when set, and at the end)", path);
    else if (k == 0)
        snprintf(err, errlen, "no checkpoint in %s (expected model.safetensors or ckpt-* "
                 "directories)", path);
    free(v);
    return rc;
}

int dm_ckpt_resolve(const char *path, char *out, size_t outlen, char *err, size_t errlen) {
    return dm_ckpt_candidate(path, 0, out, outlen, err, errlen);
}

/* ---- a checkpoint read and checked -------------------------------------------------- */

struct dm_ckpt {
    dm_st_file *model, *optim;
    dm_config cfg;
    long step;
    int unverified; /* a file without checksums (an older dormouse's): read unchecked */
    char name[4200];
};

void dm_ckpt_close(dm_ckpt *c) {
    if (!c) return;
    dm_st_close(c->model);
    dm_st_close(c->optim);
    free(c);
}

const dm_config *dm_ckpt_config(const dm_ckpt *c) { return &c->cfg; }
long dm_ckpt_step(const dm_ckpt *c) { return c->step; }
int dm_ckpt_unverified(const dm_ckpt *c) { return c->unverified; }

/* format and step of a checkpoint file's metadata; 0 ok */
static int check_meta(const dm_st_file *f, const char *name, long *step, char *err,
                      size_t errlen) {
    const char *fmt = dm_st_meta(f, "format"), *st = dm_st_meta(f, "step");
    long long s;
    char pb[48];
    if (!fmt || strcmp(fmt, CKPT_FORMAT) != 0) {
        snprintf(err, errlen, "%s is not a dormouse checkpoint (metadata format '%.40s', "
                 "expected '" CKPT_FORMAT "')", name,
                 fmt ? dm_printable(fmt, pb, sizeof pb) : "(none)");
        return 1;
    }
    if (!st || dm_parse_int(st, 0, MAX_STEP, &s)) {
        snprintf(err, errlen, "%s: metadata step '%s' is not an integer >= 0", name,
                 st ? dm_printable(st, pb, sizeof pb) : "(none)");
        return 1;
    }
    *step = (long)s;
    return 0;
}

dm_ckpt *dm_ckpt_from_files(dm_st_file *model, dm_st_file *optim, const char *name, char *err,
                            size_t errlen) {
    dm_ckpt *c = calloc(1, sizeof *c);
    if (!c) {
        dm_st_close(model);
        dm_st_close(optim);
        snprintf(err, errlen, "out of memory reading %s", name);
        return NULL;
    }
    c->model = model;
    c->optim = optim;
    snprintf(c->name, sizeof c->name, "%s", name);
    if (check_meta(model, name, &c->step, err, errlen)) goto fail;
    /* the reader checked the checksums when there were any (all of them, or it refused) */
    c->unverified = !dm_st_checksummed(model) || (optim && !dm_st_checksummed(optim));
    const char *js = dm_st_meta(model, "config");
    char e2[DM_ERRLEN];
    dm_config_default(&c->cfg);
    if (!js || dm_config_from_json(&c->cfg, js, e2, sizeof e2) ||
        dm_config_validate(&c->cfg, e2, sizeof e2)) {
        snprintf(err, errlen, "%s: bad config in metadata: %s", name, js ? e2 : "none");
        goto fail;
    }
    /* a directory named for a step holds that step */
    char dir[4200];
    snprintf(dir, sizeof dir, "%s", name);
    char *slash = strrchr(dir, '/');
    if (slash) {
        *slash = 0;
        char *base = strrchr(dir, '/');
        long long ds = ckpt_step_of(base ? base + 1 : dir);
        if (ds >= 0 && ds != c->step) {
            snprintf(err, errlen, "%s: metadata step %ld, but the directory is step %lld", name,
                     c->step, ds);
            goto fail;
        }
    }
    if (optim) {
        long ostep;
        if (check_meta(optim, "optim.safetensors", &ostep, err, errlen)) goto fail;
        if (ostep != c->step) {
            snprintf(err, errlen, "%s: optim.safetensors is of step %ld, the model of step %ld",
                     name, ostep, c->step);
            goto fail;
        }
    }
    return c;
fail:
    dm_ckpt_close(c);
    return NULL;
}

dm_ckpt *dm_ckpt_open(const char *model_path, int with_optim, char *err, size_t errlen) {
    dm_st_file *m = dm_st_open(model_path, err, errlen), *o = NULL;
    if (!m) return NULL;
    if (with_optim) {
        char path[4200];
        snprintf(path, sizeof path, "%s", model_path);
        char *slash = strrchr(path, '/');
        snprintf(slash ? slash + 1 : path, sizeof path - (size_t)(slash ? slash + 1 - path : 0),
                 "optim.safetensors");
        o = dm_st_open(path, err, errlen);
        if (!o) {
            dm_st_close(m);
            return NULL;
        }
    }
    return dm_ckpt_from_files(m, o, model_path, err, errlen);
}

/* Every tensor of f is one of names[0..n) and every one of those is in f. 0 ok. */
static int same_names(const dm_st_file *f, const char *const *names, int n, const char *what,
                      const char *fname, char *err, size_t errlen) {
    for (int i = 0; i < dm_st_count(f); i++) {
        const char *nm = dm_st_name(f, i);
        int j = 0;
        while (j < n && strcmp(names[j], nm)) j++;
        if (j == n) {
            char pn[96];
            snprintf(err, errlen, "%s: unknown tensor '%s' (not one of the %s)", fname,
                     dm_printable(nm, pn, sizeof pn), what);
            return 1;
        }
    }
    for (int j = 0; j < n; j++)
        if (!dm_st_get(f, names[j], NULL, NULL)) {
            snprintf(err, errlen, "%s: tensor '%s' is missing", fname, names[j]);
            return 1;
        }
    return 0;
}

static int load_model(const dm_ckpt *c, dm_model *m, char *err, size_t errlen) {
    int nt = dm_model_num_tensors(m);
    const char **names = calloc((size_t)(nt > 0 ? nt : 1), sizeof *names);
    if (!names) {
        snprintf(err, errlen, "out of memory loading %s", c->name);
        return 1;
    }
    for (int i = 0; i < nt; i++) names[i] = dm_model_tensor(m, i)->name;
    int rc = same_names(c->model, names, nt, "model's parameters", c->name, err, errlen);
    free(names);
    if (rc) return 1;
    for (int i = 0; i < nt; i++) { /* every shape first: a refused file changes nothing */
        const dm_tensor *t = dm_model_tensor(m, i);
        int nd;
        int64_t sh[4];
        dm_st_get(c->model, t->name, &nd, sh);
        if (nd != t->ndim || sh[0] != t->shape[0] || (nd == 2 && sh[1] != t->shape[1])) {
            snprintf(err, errlen, "%s: tensor '%s' has the wrong shape", c->name, t->name);
            return 1;
        }
    }
    dm_backend *be = dm_model_backend(m);
    for (int i = 0; i < nt; i++) { /* each tensor to the backend */
        const dm_tensor *t = dm_model_tensor(m, i);
        dm_backend_from_host(be, dm_model_param_mem(m) + t->offset,
                             dm_st_get(c->model, t->name, NULL, NULL), t->numel * sizeof(float));
    }
    return 0;
}

static int load_optim(const dm_ckpt *c, dm_optim *opt, char *err, size_t errlen) {
    const char *on = "optim.safetensors";
    dm_optim_buf bufs[DM_OPTIM_MAX_BUFS];
    const char *names[DM_OPTIM_MAX_BUFS] = {0};
    int n = dm_optim_state(opt, bufs, DM_OPTIM_MAX_BUFS), k = 0;
    /* an optional buffer the file lacks stays at zero (optim/common.h) */
    for (int i = 0; i < n; i++)
        if (!bufs[i].optional || dm_st_get(c->optim, bufs[i].name, NULL, NULL))
            names[k++] = bufs[i].name;
    if (same_names(c->optim, names, k, "optimizer's state buffers", on, err, errlen)) return 1;
    for (int i = 0; i < n; i++) {
        int nd;
        int64_t sh[4];
        const float *src = dm_st_get(c->optim, bufs[i].name, &nd, sh);
        if (!src) { /* optional, absent: zero */
            if (dm_optim_load(opt, bufs[i].name, NULL, bufs[i].n, err, errlen)) return 1;
            continue;
        }
        if (nd != 1 || (uint64_t)sh[0] != (uint64_t)bufs[i].n) {
            snprintf(err, errlen, "%s: tensor '%s' has the wrong shape (%zu values expected)", on,
                     bufs[i].name, bufs[i].n);
            return 1;
        }
        if (!strcmp(bufs[i].name, "adam_v"))
            for (size_t j = 0; j < bufs[i].n; j++)
                if (src[j] < 0) {
                    snprintf(err, errlen, "%s: adam_v holds %g at index %zu (a second moment "
                             "is never negative)", on, (double)src[j], j);
                    return 1;
                }
        if (dm_optim_load(opt, bufs[i].name, src, bufs[i].n, err, errlen)) return 1;
    }
    return 0;
}

/* The tokenizer a checkpoint's metadata names: tokenizer.model beside its model file,
 * of that checksum, into m (none named: m keeps none). 0 ok, else err. */
static int load_tokenizer(const dm_ckpt *c, dm_model *m, char *err, size_t errlen) {
    const char *want = dm_st_meta(c->model, "tokenizer");
    if (!want) return dm_model_set_tokenizer(m, NULL, 0, NULL);
    char path[4200], e2[512], got[DM_TOK_CHECKSUM_LEN];
    snprintf(path, sizeof path, "%s", c->name);
    char *slash = strrchr(path, '/');
    snprintf(slash ? slash + 1 : path, sizeof path - (size_t)(slash ? slash + 1 - path : 0),
             "tokenizer.model");
    size_t n;
    char *b = dm_read_file_n(path, &n, e2, sizeof e2);
    if (!b) {
        snprintf(err, errlen, "%s: the checkpoint's tokenizer is missing (%s)", c->name, e2);
        return 1;
    }
    dm_tokenizer_checksum(b, n, got);
    int rc = strcmp(got, want) != 0;
    if (rc)
        snprintf(err, errlen, "%s is damaged: its checksum is %s, the checkpoint records %s",
                 path, got, want);
    else if (dm_model_set_tokenizer(m, b, n, got))
        rc = 1, snprintf(err, errlen, "out of memory loading %s", path);
    free(b);
    return rc;
}

int dm_ckpt_into(const dm_ckpt *c, dm_model *m, dm_optim *opt, char *err, size_t errlen) {
    if (dm_config_check_model(&c->cfg, dm_model_config(m), err, errlen)) return DM_CKPT_MISMATCH;
    if (opt && !c->optim) {
        snprintf(err, errlen, "%s: opened without its optimizer state", c->name);
        return DM_CKPT_DAMAGED;
    }
    if (load_model(c, m, err, errlen) || (opt && load_optim(c, opt, err, errlen)) ||
        load_tokenizer(c, m, err, errlen))
        return DM_CKPT_DAMAGED;
    return DM_CKPT_OK;
}

int dm_ckpt_read_config(const char *path, dm_config *cfg, long *step, char *err,
                        size_t errlen) {
    dm_ckpt *c = dm_ckpt_open(path, 0, err, errlen);
    if (!c) return 1;
    *cfg = c->cfg;
    if (step) *step = c->step;
    dm_ckpt_close(c);
    return 0;
}

int dm_ckpt_load(const char *model_path, dm_model *m, dm_optim *opt, char *err, size_t errlen) {
    dm_ckpt *c = dm_ckpt_open(model_path, opt != NULL, err, errlen);
    if (!c) return DM_CKPT_DAMAGED;
    int rc = dm_ckpt_into(c, m, opt, err, errlen);
    dm_ckpt_close(c);
    return rc;
}
