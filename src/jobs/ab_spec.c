/* ab_spec.c — the spec of an A/B sweep: seeds, variants, the keys that are the sweep's,
 * checks, the cells' configs and directories, AB_DIR/ab.json (see ab.h). */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/files.h"
#include "io/data.h"
#include "io/dataset.h"
#include "jobs/ab.h"

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

const char *dm_ab_fixed_key(const char *key, int variant) {
    if (!strcmp(key, "seed")) return "the seeds are the sweep's (--seeds)";
    if (!strcmp(key, "log_every")) return "A/B cells log every step";
    if (!variant) return NULL;
    if (!strcmp(key, "steps")) return "every arm runs the sweep's steps (--steps)";
    if (!strcmp(key, "eval_window") || !strcmp(key, "eval_windows"))
        return "every arm is scored on the same windows";
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
        if (!strcmp(tok, "data")) { /* the variant's own corpus, resolved by make_spec */
            if (!eq[1] || strlen(eq + 1) >= sizeof arm->data.path) {
                snprintf(err, errlen, "--variant %s: data= needs a corpus path", arm->name);
                return 1;
            }
            snprintf(arm->data.path, sizeof arm->data.path, "%s", eq + 1);
        } else {
            const char *why = dm_ab_fixed_key(tok, 1);
            if (why) {
                snprintf(err, errlen, "--variant %s: cannot set %s (%s)", arm->name, tok, why);
                return 1;
            }
            char e2[DM_ERRLEN];
            if (dm_config_set(&arm->cfg, tok, eq + 1, e2, sizeof e2)) {
                snprintf(err, errlen, "--variant %s: %s", arm->name, e2);
                return 1;
            }
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

const dm_ab_data *dm_ab_arm_data(const dm_ab_spec *s, int a) {
    return a > 0 && s->arms[a].data.path[0] ? &s->arms[a].data : &s->data;
}

int dm_ab_check_spec(const dm_ab_spec *s, char *err, size_t errlen) {
    struct stat st;
    for (int a = 0; a < s->n_arms; a++)
        if (stat(dm_ab_arm_data(s, a)->path, &st) != 0) {
            snprintf(err, errlen, "corpus %s not found", dm_ab_arm_data(s, a)->path);
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

void dm_ab_seeds_text(const dm_ab_spec *s, char *buf, size_t n) {
    size_t used = 0;
    buf[0] = 0;
    for (int k = 0; k < s->n_seeds && used < n; k++)
        used += (size_t)snprintf(buf + used, n - used, "%s%" PRIu64, k ? "," : "", s->seeds[k]);
}

/* "data", "data_bytes", "data_crc32" of o: a corpus and its identity */
static void add_data(cJSON *o, const dm_ab_data *d) {
    cJSON_AddStringToObject(o, "data", d->path);
    if (d->has_id) {
        char crc[16];
        snprintf(crc, sizeof crc, "%08x", (unsigned)d->crc);
        cJSON_AddNumberToObject(o, "data_bytes", (double)d->bytes);
        cJSON_AddStringToObject(o, "data_crc32", crc);
    }
}

/* ... read back (a sweep of an older dormouse has no identity). 0 ok; 1 no "data" */
static int read_data(const cJSON *o, dm_ab_data *d) {
    cJSON *data = cJSON_GetObjectItemCaseSensitive(o, "data"),
          *db = cJSON_GetObjectItemCaseSensitive(o, "data_bytes"),
          *dc = cJSON_GetObjectItemCaseSensitive(o, "data_crc32");
    if (!cJSON_IsString(data) || !data->valuestring[0]) return 1;
    snprintf(d->path, sizeof d->path, "%s", data->valuestring);
    if (cJSON_IsNumber(db) && cJSON_IsString(dc)) {
        d->has_id = 1;
        d->bytes = (uint64_t)db->valuedouble;
        d->crc = (uint32_t)strtoul(dc->valuestring, NULL, 16);
    }
    return 0;
}

int dm_ab_save_spec(const dm_ab_spec *s, char *err, size_t errlen) {
    char seeds[1024], path[4200];
    dm_ab_seeds_text(s, seeds, sizeof seeds);
    cJSON *o = cJSON_CreateObject(), *arms = cJSON_CreateArray();
    cJSON_AddNumberToObject(o, "version", 1);
    add_data(o, &s->data);
    cJSON_AddNumberToObject(o, "steps", s->steps);
    cJSON_AddNumberToObject(o, "warmup", s->warmup);
    cJSON_AddStringToObject(o, "seeds", seeds);
    for (int a = 0; a < s->n_arms; a++) {
        cJSON *arm = cJSON_CreateObject();
        char *cj = dm_config_to_json(&s->arms[a].cfg);
        cJSON_AddStringToObject(arm, "name", s->arms[a].name);
        cJSON_AddStringToObject(arm, "overrides", s->arms[a].overrides);
        if (a > 0 && s->arms[a].data.path[0]) add_data(arm, &s->arms[a].data);
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
    char e[256], *text = dm_read_file(path, e, sizeof e);
    if (!text) {
        snprintf(err, errlen, "%s holds no A/B sweep (no ab.json)", dir);
        return 2;
    }
    cJSON *o = cJSON_Parse(text);
    free(text);
    cJSON *steps = cJSON_GetObjectItemCaseSensitive(o, "steps"),
          *warm = cJSON_GetObjectItemCaseSensitive(o, "warmup"),
          *seeds = cJSON_GetObjectItemCaseSensitive(o, "seeds"),
          *arms = cJSON_GetObjectItemCaseSensitive(o, "arms");
    int rc = 1;
    if (read_data(o, &s->data) || !cJSON_IsNumber(steps) || !cJSON_IsNumber(warm) ||
        !cJSON_IsString(seeds) || !cJSON_IsArray(arms) || cJSON_GetArraySize(arms) < 1 ||
        cJSON_GetArraySize(arms) > DM_AB_MAX_ARMS) {
        snprintf(err, errlen, "%s is not a dormouse A/B file", path);
        goto done;
    }
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
        if (s->n_arms > 1) read_data(arm, &A->data);
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


/* Resolve arm k's corpus (the control's: s->data) to an absolute path and record its
 * identity; a corpus of tokens gives the arm its vocabulary (as train does); and every arm
 * must validate on the control's bytes (*val_crc, *val_n: the control's, set at k = 0),
 * or their BPBs would not compare. 0 ok; else bad input in st. */
static int arm_corpus(dm_ab_spec *s, int k, int verify, uint32_t *val_crc, size_t *val_n,
                      dm_status *st) {
    dm_ab_arm *arm = &s->arms[k];
    dm_ab_data *d = k == 0 || !arm->data.path[0] ? &s->data : &arm->data;
    const char *who = k ? arm->name : "the control";
    char err[8192];
    if (k == 0 || d == &arm->data) {
        char *abs = realpath(d->path, NULL);
        if (!abs && !k) return dm_fail(st, DM_JOB_BAD_INPUT, "corpus %s not found", d->path);
        if (!abs)
            return dm_fail(st, DM_JOB_BAD_INPUT, "variant %s: corpus %s not found", who, d->path);
        snprintf(d->path, sizeof d->path, "%s", abs);
        free(abs);
    }
    dm_corpus c;
    int bad = dm_corpus_load(&c, d->path, err, sizeof err) ||
              (verify && dm_corpus_verify(&c, err, sizeof err)) ||
              dm_corpus_vocab(&c, &arm->cfg.vocab, arm->cfg.vocab != DM_VOCAB, err, sizeof err) ||
              dm_corpus_split(&c, arm->cfg.eval_window, arm->cfg.seq_len, err, sizeof err);
    if (!bad) {
        d->has_id = 1;
        d->bytes = c.n;
        d->crc = dm_corpus_crc32(&c);
        d->train = c.mapped ? c.train_n : 0;
        uint32_t crc = dm_crc32(0, c.val, c.val_n);
        if (k == 0) {
            *val_crc = crc;
            *val_n = c.val_n;
        } else if (crc != *val_crc || c.val_n != *val_n) {
            snprintf(err, sizeof err,
                     "its validation text (%zu bytes, CRC-32 %08x) is not the control's (%zu "
                     "bytes, %08x): the arms of a sweep are scored on the same bytes", c.val_n,
                     (unsigned)crc, *val_n, (unsigned)*val_crc);
            bad = 1;
        }
    }
    dm_corpus_free(&c);
    if (!bad) return 0;
    if (!k) return dm_fail(st, DM_JOB_BAD_INPUT, "%s", err);
    return dm_fail(st, DM_JOB_BAD_INPUT, "variant %s: %s", who, err);
}

int dm_ab_make_spec(const dm_ab_args *a, dm_ab_spec *s, dm_status *st) {
    char err[8192];
    memset(s, 0, sizeof *s);
    snprintf(s->dir, sizeof s->dir, "%s", a->dir);
    if (a->n_variants > DM_AB_MAX_ARMS - 1)
        return dm_fail(st, DM_JOB_BAD_INPUT, "at most %d variants", DM_AB_MAX_ARMS - 1);
    /* the control: defaults, then the config file, then --set, then --steps */
    dm_ab_arm *control = &s->arms[0];
    snprintf(control->name, sizeof control->name, "control");
    dm_config_default(&control->cfg);
    if (a->config_file && dm_config_apply_file(&control->cfg, a->config_file, st))
        return st->code;
    for (int i = 0; i < a->n_sets; i++) {
        char key[64];
        const char *why = dm_split_set(a->sets[i], key, sizeof key) ? dm_ab_fixed_key(key, 0)
                                                                      : NULL;
        if (why) return dm_fail(st, DM_JOB_BAD_INPUT, "--set %s: %s", key, why);
    }
    if (dm_config_apply_sets(&control->cfg, "--set", a->sets, a->n_sets, st)) return st->code;
    if (a->steps > 0) control->cfg.steps = (int)a->steps;
    s->steps = control->cfg.steps;
    s->warmup = a->warmup >= 0 ? (int)a->warmup : dm_ab_default_warmup(s->steps);
    s->n_arms = 1;
    for (int i = 0; i < a->n_variants; i++)
        if (dm_ab_parse_variant(a->variants[i], &control->cfg, &s->arms[s->n_arms++], err,
                                sizeof err))
            return dm_fail(st, DM_JOB_BAD_INPUT, "%s", err);
    if (dm_ab_parse_seeds(a->seeds ? a->seeds : "1,2", s->seeds, DM_AB_MAX_SEEDS, &s->n_seeds,
                          err, sizeof err))
        return dm_fail(st, DM_JOB_BAD_INPUT, "%s", err);
    char dflt[4096];
    const char *corpus = dm_data_path(a->data, dflt, sizeof dflt, st);
    if (!corpus) return st->code;
    snprintf(s->data.path, sizeof s->data.path, "%s", corpus);
    uint32_t val_crc = 0;
    size_t val_n = 0;
    for (int k = 0; k < s->n_arms; k++)
        if (arm_corpus(s, k, a->verify_data, &val_crc, &val_n, st)) return st->code;
    if (s->warmup >= s->steps)
        return dm_fail(st, DM_JOB_BAD_INPUT, "--warmup %d leaves no step of %d to time",
                       s->warmup, s->steps);
    if (dm_ab_check_spec(s, err, sizeof err)) return dm_fail(st, DM_JOB_BAD_INPUT, "%s", err);
    return 0;
}
