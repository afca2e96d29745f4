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

void dm_ab_seeds_text(const dm_ab_spec *s, char *buf, size_t n) {
    size_t used = 0;
    buf[0] = 0;
    for (int k = 0; k < s->n_seeds && used < n; k++)
        used += (size_t)snprintf(buf + used, n - used, "%s%" PRIu64, k ? "," : "", s->seeds[k]);
}

int dm_ab_save_spec(const dm_ab_spec *s, char *err, size_t errlen) {
    char seeds[1024], path[4200];
    dm_ab_seeds_text(s, seeds, sizeof seeds);
    cJSON *o = cJSON_CreateObject(), *arms = cJSON_CreateArray();
    cJSON_AddNumberToObject(o, "version", 1);
    cJSON_AddStringToObject(o, "data", s->data);
    if (s->has_id) {
        char crc[16];
        snprintf(crc, sizeof crc, "%08x", (unsigned)s->data_crc);
        cJSON_AddNumberToObject(o, "data_bytes", (double)s->data_bytes);
        cJSON_AddStringToObject(o, "data_crc32", crc);
    }
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
    char e[256], *text = dm_read_file(path, e, sizeof e);
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
    cJSON *db = cJSON_GetObjectItemCaseSensitive(o, "data_bytes"),
          *dc = cJSON_GetObjectItemCaseSensitive(o, "data_crc32");
    if (cJSON_IsNumber(db) && cJSON_IsString(dc)) { /* a sweep of an older dormouse: none */
        s->has_id = 1;
        s->data_bytes = (uint64_t)db->valuedouble;
        s->data_crc = (uint32_t)strtoul(dc->valuestring, NULL, 16);
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
    char *abs = realpath(corpus, NULL);
    if (!abs) return dm_fail(st, DM_JOB_BAD_INPUT, "corpus %s not found", corpus);
    snprintf(s->data, sizeof s->data, "%s", abs);
    free(abs);
    dm_corpus c; /* its identity, as a cell's run records it */
    if (dm_corpus_load(&c, s->data, err, sizeof err) ||
        (a->verify_data && dm_corpus_verify(&c, err, sizeof err))) {
        dm_corpus_free(&c);
        return dm_fail(st, DM_JOB_BAD_INPUT, "%s", err);
    }
    s->has_id = 1;
    s->data_bytes = c.n;
    s->data_crc = dm_corpus_crc32(&c);
    s->data_train = c.mapped ? c.train_n : 0;
    dm_corpus_free(&c);
    if (s->warmup >= s->steps)
        return dm_fail(st, DM_JOB_BAD_INPUT, "--warmup %d leaves no step of %d to time",
                       s->warmup, s->steps);
    if (dm_ab_check_spec(s, err, sizeof err)) return dm_fail(st, DM_JOB_BAD_INPUT, "%s", err);
    return 0;
}
