/* targets.c — see targets.h. */
#include "targets.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dormouse.h"
#include "io/ckpt.h"
#include "io/safetensors.h"
#include "optim/optim.h"

int dm_fuzz_safetensors(const uint8_t *data, size_t n) {
    char err[4096];
    dm_st_file *f = dm_st_parse(data, n, "fuzz.safetensors", err, sizeof err);
    if (!f) {
        if (!err[0] || strchr(err, '\n')) abort(); /* a refusal is one line */
        return 1;
    }
    volatile float sink = 0;
    for (int i = 0; i < dm_st_count(f); i++) {
        int nd;
        int64_t sh[4];
        const float *x = dm_st_get(f, dm_st_name(f, i), &nd, sh);
        if (!x || nd < 0 || nd > 4) abort();
        uint64_t numel = 1;
        for (int d = 0; d < nd; d++) numel *= (uint64_t)sh[d];
        for (uint64_t j = 0; j < numel; j++) sink += x[j]; /* every value is readable */
    }
    (void)dm_st_meta(f, "format");
    (void)sink;
    dm_st_close(f);
    return 0;
}

/* the checkpoint target's model and optimizer, made once per process */
static dm_model *fuzz_model(dm_optim **opt) {
    static dm_model *m;
    static dm_optim *o;
    if (!m) {
        const char *sets[] = FUZZ_CONFIG;
        dm_config c;
        char err[256];
        dm_config_default(&c);
        for (size_t i = 0; i < sizeof sets / sizeof *sets; i++) {
            char key[64];
            const char *eq = strchr(sets[i], '=');
            snprintf(key, sizeof key, "%.*s", (int)(eq - sets[i]), sets[i]);
            if (dm_config_set(&c, key, eq + 1, err, sizeof err)) abort();
        }
        m = dm_model_create(&c, err, sizeof err);
        o = m ? dm_optim_create(m, &c, err, sizeof err) : NULL;
        if (!o) abort();
    }
    *opt = o;
    return m;
}

int dm_fuzz_ckpt(const uint8_t *data, size_t n) {
    char err[4096];
    if (n < 4) return 1;
    size_t len = (size_t)data[0] | (size_t)data[1] << 8 | (size_t)data[2] << 16 |
                 (size_t)data[3] << 24;
    if (len > n - 4) len = n - 4;
    dm_st_file *mf = dm_st_parse(data + 4, len, "fuzz/model.safetensors", err, sizeof err);
    if (!mf) return 1;
    dm_st_file *of = NULL;
    if (n - 4 - len > 0) {
        of = dm_st_parse(data + 4 + len, n - 4 - len, "fuzz/optim.safetensors", err, sizeof err);
        if (!of) {
            dm_st_close(mf);
            return 1;
        }
    }
    dm_ckpt *c = dm_ckpt_from_files(mf, of, "fuzz/model.safetensors", err, sizeof err);
    if (!c) return 1;
    dm_optim *opt;
    dm_model *m = fuzz_model(&opt);
    int rc = dm_ckpt_into(c, m, of ? opt : NULL, err, sizeof err);
    if (rc != DM_CKPT_OK && (!err[0] || strchr(err, '\n'))) abort();
    dm_ckpt_close(c);
    return rc != DM_CKPT_OK;
}

int dm_fuzz_config(const uint8_t *data, size_t n) {
    char *text = malloc(n + 1), err[DM_ERRLEN], va[64], vb[64];
    if (!text) return 1;
    memcpy(text, data, n);
    text[n] = 0;
    dm_config c, back;
    dm_config_default(&c);
    int rc = dm_config_from_json(&c, text, err, sizeof err);
    free(text);
    if (rc && (!err[0] || strchr(err, '\n'))) abort(); /* a refusal is one line */
    if (rc || dm_config_validate(&c, err, sizeof err)) return 1;
    char *js = dm_config_to_json(&c);
    dm_config_default(&back);
    if (!js || dm_config_from_json(&back, js, err, sizeof err) ||
        dm_config_diff(&c, &back, DM_KEYS_ALL, va, vb, sizeof va))
        abort(); /* what we write must read back as the same config */
    free(js);
    return 0;
}
