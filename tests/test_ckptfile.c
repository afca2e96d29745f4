/* test_ckptfile.c — checkpoint files that nothing can slip past:
 * every layout the safetensors format forbids, bad metadata in either file, an unknown
 * tensor in either file, non-finite values, hostile numbers in the header, and a FIFO
 * in place of a file — each refused with one line on stderr and exit 2, by `eval` for
 * the model file and by `train --resume` for the optimizer file. The files are a real
 * tiny run's checkpoint, rewritten — with its checksums made anew (as a writer of such a
 * file would), so that each case reaches the check it is about; tests/test_robust.c has
 * the damage the checksums catch. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "stfile.h"
#include "dormouse.h"
#include "io/ckpt.h"
#include "io/safetensors.h"

/* ---- the run ------------------------------------------------------------------------ */

typedef struct {
    char dir[256], run[512], ck[640], model[700], optim[700];
} fixture;

static void make_run(fixture *x) {
    char cmd[2048], err[4096];
    t_tmpdir(x->dir, sizeof x->dir);
    snprintf(x->run, sizeof x->run, "%s/run", x->dir);
    snprintf(cmd, sizeof cmd, DM_CLI " train --data %s --out %s " T_TINY " --set steps=2",
             T_CORPUS, x->run);
    int rc = t_run(cmd, err, sizeof err);
    CHECKF(rc == 0, "tiny run failed (%d): %s", rc, err);
    snprintf(x->ck, sizeof x->ck, "%s/ckpt-00000002", x->run);
    snprintf(x->model, sizeof x->model, "%s/model.safetensors", x->ck);
    snprintf(x->optim, sizeof x->optim, "%s/optim.safetensors", x->ck);
}

/* the names in directory `dir` (hidden ones too), sorted, one per line, into buf */
static void dir_names(const char *dir, char *buf, size_t n) {
    struct dirent **ents;
    int k = scandir(dir, &ents, NULL, alphasort);
    buf[0] = 0;
    for (int i = 0; i < k; i++) {
        size_t len = strlen(buf);
        snprintf(buf + len, n - len, "%s\n", ents[i]->d_name);
        free(ents[i]);
    }
    if (k >= 0) free(ents);
}

/* eval of a rewritten model file (written into DIR/bad/ckpt-00000002): exit 2, one line
 * holding needle */
static void expect_eval(fixture *x, t_stf *f, long hl_delta, const char *needle) {
    char bad[800], path[900], cmd[2048];
    snprintf(bad, sizeof bad, "%s/bad/ckpt-00000002", x->dir);
    snprintf(cmd, sizeof cmd, "mkdir -p %s", bad);
    CHECK(t_run(cmd, NULL, 0) == 0);
    snprintf(path, sizeof path, "%s/model.safetensors", bad);
    t_st_write(path, f, hl_delta, 1);
    snprintf(cmd, sizeof cmd, DM_CLI " eval %s --data %s", path, T_CORPUS);
    t_expect(cmd, 2, needle, NULL, 0);
}

/* train --resume of a copy of the run whose optim.safetensors is f: exit 2, one line
 * holding needle, and the copy's checkpoint untouched */
static void expect_resume(fixture *x, t_stf *f, const char *needle) {
    char cmd[4096], copy[800], path[900];
    snprintf(copy, sizeof copy, "%s/copy", x->dir);
    snprintf(cmd, sizeof cmd, "rm -rf %s && cp -r %s %s", copy, x->run, copy);
    CHECK(t_run(cmd, NULL, 0) == 0);
    snprintf(path, sizeof path, "%s/ckpt-00000002/optim.safetensors", copy);
    t_st_write(path, f, 0, 1);
    snprintf(cmd, sizeof cmd, DM_CLI " train --resume %s --set steps=4", copy);
    t_expect(cmd, 2, needle, NULL, 0);
    snprintf(cmd, sizeof cmd, "test ! -e %s/ckpt-00000003", copy);
    CHECKF(t_run(cmd, NULL, 0) == 0, "a refused resume wrote a checkpoint");
}

/* Case 2: the layouts the format forbids, in the model file. */
TEST(ckptfile_layout_refused) {
    fixture x;
    make_run(&x);
    t_stf f;
    CHECK(t_st_read(x.model, &f) == 0);
    /* two norm weights of the same size, one after the other */
    const char *a = "layers.0.mixer.w_q", *b = "layers.0.mixer.w_k";
    if (!t_st_offsets(&f, a) || !t_st_offsets(&f, b)) {
        t_skip("the tiny model has no %s / %s", a, b);
        return;
    }
    double ab = t_st_off_at(&f, a, 0), ae = t_st_off_at(&f, a, 1), bb = t_st_off_at(&f, b, 0), be = t_st_off_at(&f, b, 1);
    printf("  %s [%.0f, %.0f], %s [%.0f, %.0f], data %zu bytes\n", a, ab, ae, b, bb, be, f.dn);
    t_st_set_offsets(&f, b, ab, ae); /* two tensors on the same bytes */
    expect_eval(&x, &f, 0, "overlaps");
    const char *next = t_st_at_offset(&f, ae);
    char last[128] = "";
    t_st_set_offsets(&f, b, bb, be);
    if (next) { /* a tensor shifted 4 bytes into its neighbour */
        double nb = t_st_off_at(&f, next, 0), ne = t_st_off_at(&f, next, 1);
        t_st_set_offsets(&f, next, nb - 4, ne - 4);
        expect_eval(&x, &f, 0, "overlaps");
        t_st_set_offsets(&f, next, nb, ne);
    }
    for (cJSON *e = f.hdr->child; e; e = e->next) /* the tensor that ends the data */
        if (strcmp(e->string, "__metadata__") && t_st_off_at(&f, e->string, 1) == (double)f.dn)
            snprintf(last, sizeof last, "%s", e->string);
    CHECK(last[0] != 0);
    double lb = t_st_off_at(&f, last, 0), le = t_st_off_at(&f, last, 1);
    f.dn += 4; /* a gap of 4 bytes before the last tensor */
    t_st_set_offsets(&f, last, lb + 4, le + 4);
    expect_eval(&x, &f, 0, "a gap of 4 bytes before tensor");
    t_st_set_offsets(&f, last, lb, le); /* ... and so 4 bytes after the data */
    expect_eval(&x, &f, 0, "4 bytes after the last tensor");
    f.dn -= 4;
    t_st_set_offsets(&f, last, lb + 0.5, le + 0.5); /* fractional t_st_offsets */
    expect_eval(&x, &f, 0, "two non-negative integers");
    t_st_set_offsets(&f, last, lb, le);
    expect_eval(&x, &f, -1, "after the last tensor"); /* header length one short */
    expect_eval(&x, &f, 1 << 30, "header length");    /* past the end of the file */
    /* dtype, a name twice, the element count */
    cJSON *e = cJSON_GetObjectItem(f.hdr, last);
    cJSON_ReplaceItemInObject(e, "dtype", cJSON_CreateString("F16"));
    expect_eval(&x, &f, 0, "dtype 'F16'");
    cJSON_ReplaceItemInObject(e, "dtype", cJSON_CreateString("F32"));
    cJSON_AddItemToObject(f.hdr, last, cJSON_Duplicate(e, 1));
    expect_eval(&x, &f, 0, "twice");
    cJSON_DeleteItemFromObject(f.hdr, last); /* the first of the two */
    cJSON_ReplaceItemInObject(e = cJSON_GetObjectItem(f.hdr, last), "shape",
                              cJSON_Parse("[4294967296, 4294967296, 16]"));
    expect_eval(&x, &f, 0, "overflows");
    /* numbers no cast may see: t_st_offsets 1e30 with shape [0]; shape [1e30, 0] */
    cJSON_ReplaceItemInObject(e, "shape", cJSON_Parse("[0]"));
    t_st_set_offsets(&f, last, 1e30, 1e30);
    expect_eval(&x, &f, 0, "truncated");
    cJSON_ReplaceItemInObject(e, "shape", cJSON_Parse("[1e30, 0]"));
    t_st_set_offsets(&f, last, lb, lb);
    expect_eval(&x, &f, 0, "not an integer in [0, 2^53]");
    t_st_free(&f);
    t_rmtree(x.dir);
}

/* Case 2: metadata of both files, and an unknown tensor in either. */
TEST(ckptfile_metadata_and_names_refused) {
    fixture x;
    make_run(&x);
    t_stf f, o;
    CHECK(t_st_read(x.model, &f) == 0 && t_st_read(x.optim, &o) == 0);
    t_st_set_meta(&f, "step", "abc");
    expect_eval(&x, &f, 0, "metadata step 'abc' is not an integer >= 0");
    t_st_set_meta(&f, "step", "-5");
    expect_eval(&x, &f, 0, "metadata step '-5' is not an integer >= 0");
    t_st_set_meta(&f, "step", "7"); /* the directory says 2 */
    expect_eval(&x, &f, 0, "the directory is step 2");
    t_st_set_meta(&f, "step", "2");
    t_st_set_meta(&f, "format", "other-1");
    expect_eval(&x, &f, 0, "not a dormouse checkpoint");
    t_st_set_meta(&f, "format", "dormouse-1");
    t_st_set_meta(&f, "config", "{\"d_model\": 32, \"d_model\": 32}");
    expect_eval(&x, &f, 0, "'d_model' appears twice");
    t_st_free(&f);
    CHECK(t_st_read(x.model, &f) == 0);
    double end = (double)f.dn; /* an extra tensor of one value at the end */
    f.dn += 4;
    cJSON *t = cJSON_AddObjectToObject(f.hdr, "extra");
    cJSON_AddStringToObject(t, "dtype", "F32");
    cJSON_AddItemToObject(t, "shape", cJSON_Parse("[1]"));
    cJSON_AddItemToObject(t, "data_offsets", cJSON_CreateArray());
    cJSON_AddItemToArray(cJSON_GetObjectItem(t, "data_offsets"), cJSON_CreateNumber(end));
    cJSON_AddItemToArray(cJSON_GetObjectItem(t, "data_offsets"), cJSON_CreateNumber(end + 4));
    memset(f.data + (size_t)end, 0, 4);
    expect_eval(&x, &f, 0, "unknown tensor 'extra'");
    /* the optimizer file, through --resume */
    end = (double)o.dn;
    o.dn += 4;
    cJSON_AddItemToObject(o.hdr, "extra", cJSON_Duplicate(t, 1));
    t_st_set_offsets(&o, "extra", end, end + 4);
    memset(o.data + (size_t)end, 0, 4);
    expect_resume(&x, &o, "unknown tensor 'extra'");
    t_st_free(&o);
    CHECK(t_st_read(x.optim, &o) == 0);
    t_st_set_meta(&o, "step", "-5");
    expect_resume(&x, &o, "metadata step '-5'");
    t_st_set_meta(&o, "step", "1");
    expect_resume(&x, &o, "optim.safetensors is of step 1");
    t_st_set_meta(&o, "step", "2");
    t_st_set_meta(&o, "format", "pt");
    expect_resume(&x, &o, "not a dormouse checkpoint");
    t_st_free(&o);
    t_st_free(&f);
    t_rmtree(x.dir);
}

/* Case 3: a NaN, an Inf in the weights, a NaN in the AdamW moments, a negative second
 * moment: refused, naming the tensor and the first bad index. The writer refuses them. */
TEST(ckptfile_nonfinite_refused) {
    fixture x;
    make_run(&x);
    t_stf f, o;
    CHECK(t_st_read(x.model, &f) == 0 && t_st_read(x.optim, &o) == 0);
    t_st_set_float(&f, "embed", 37, NAN);
    t_st_set_float(&f, "embed", 40, INFINITY);
    expect_eval(&x, &f, 0, "tensor 'embed' holds nan at index 37 ([1, 5])");
    t_st_set_float(&f, "embed", 37, 0.5f);
    expect_eval(&x, &f, 0, "tensor 'embed' holds inf at index 40");
    t_st_set_float(&o, "adam_m", 3, NAN);
    expect_resume(&x, &o, "tensor 'adam_m' holds nan at index 3");
    t_st_set_float(&o, "adam_m", 3, 0);
    t_st_set_float(&o, "adam_v", 9, -1.0f);
    expect_resume(&x, &o, "adam_v holds -1 at index 9");
    t_st_free(&f);
    t_st_free(&o);
    /* the writer */
    dm_config c;
    char err[512];
    CHECK(dm_ckpt_read_config(x.model, &c, NULL, err, sizeof err) == 0);
    dm_model *m = dm_model_create(&c, err, sizeof err);
    dm_model_params(m)[5] = NAN;
    char before[4096], after[4096];
    dir_names(x.dir, before, sizeof before);
    CHECK(dm_ckpt_save(x.dir, m, NULL, 9, err, sizeof err) != 0);
    printf("  save: %s\n", err);
    CHECK(strstr(err, "holds nan at index 5") != NULL);
    /* the refused save leaves the directory as it was: nothing new, temporary or not */
    dir_names(x.dir, after, sizeof after);
    CHECKF(strcmp(before, after) == 0, "the refused save changed %s:\nbefore:\n%safter:\n%s",
           x.dir, before, after);
    char p[512];
    snprintf(p, sizeof p, "%s/ckpt-00000009", x.dir);
    CHECK(!t_exists(p));
    snprintf(p, sizeof p, "%s/ckpt-00000009.tmp", x.dir);
    CHECK(!t_exists(p));
    dm_model_free(m);
    t_rmtree(x.dir);
}

/* Case 5: a FIFO named model.safetensors (or given as the config, or the corpus) is
 * refused at once, never opened for a read that waits for a writer. */
TEST(ckptfile_fifo_refused) {
    char d[256], cmd[2048];
    t_tmpdir(d, sizeof d);
    snprintf(cmd, sizeof cmd, "mkdir %s/ck && mkfifo %s/ck/model.safetensors %s/fifo", d, d, d);
    CHECK(t_run(cmd, NULL, 0) == 0);
    snprintf(cmd, sizeof cmd, "timeout 20 " DM_CLI " eval %s/ck", d);
    t_expect(cmd, 2, "is not a regular file", NULL, 0);
    snprintf(cmd, sizeof cmd, "timeout 20 " DM_CLI " eval %s/ck/model.safetensors", d);
    t_expect(cmd, 2, "is not a regular file", NULL, 0);
    snprintf(cmd, sizeof cmd, "timeout 20 " DM_CLI " train --out %s/run --config %s/fifo", d, d);
    t_expect(cmd, 2, "is not a regular file", NULL, 0);
    snprintf(cmd, sizeof cmd, "timeout 20 " DM_CLI " train --out %s/run --data %s/fifo", d, d);
    t_expect(cmd, 2, "neither a regular file nor a directory", NULL, 0);
    snprintf(cmd, sizeof cmd, "%s/run", d);
    CHECK(!t_exists(cmd));
    t_rmtree(d);
}

/* the checksum entries of f's metadata removed: all of them, or only the one of tensor
 * `only` */
static void strip_sums(t_stf *f, const char *only) {
    cJSON *meta = cJSON_GetObjectItemCaseSensitive(f->hdr, "__metadata__"), *e = meta ? meta->child
                                                                                    : NULL;
    while (e) {
        cJSON *next = e->next;
        if (!strncmp(e->string, "xxh64:", 6) && (!only || !strcmp(e->string + 6, only)))
            cJSON_Delete(cJSON_DetachItemViaPointer(meta, e));
        e = next;
    }
}

/* A checkpoint without checksums (an older dormouse's) loads with a note naming it, to
 * the same numbers and the same resume, and the checkpoints saved from it carry them; a
 * file that lacks only some of them is refused. */
TEST(ckptfile_without_checksums_loads_with_a_note) {
    fixture x;
    make_run(&x);
    char old[700], cmd[4096], out[4096], path[900];
    snprintf(old, sizeof old, "%s/old", x.dir);
    snprintf(cmd, sizeof cmd, "cp -r %s %s && cp -r %s %s/new", x.run, old, x.run, x.dir);
    CHECK(t_run(cmd, NULL, 0) == 0);
    const char *files[2] = {"model", "optim"};
    for (int i = 0; i < 2; i++) {
        t_stf f;
        snprintf(path, sizeof path, "%s/ckpt-00000002/%s.safetensors", old, files[i]);
        CHECK(t_st_read(path, &f) == 0);
        strip_sums(&f, NULL);
        t_st_write(path, &f, 0, 0);
        t_st_free(&f);
    }
    snprintf(cmd, sizeof cmd, "grep -c xxh64 %s/ckpt-00000002/model.safetensors", old);
    CHECK(t_run(cmd, NULL, 0) != 0); /* none left */
    char a[256], b[256];
    snprintf(cmd, sizeof cmd, DM_CLI " eval %s 2>&1 >/dev/null | grep -c 'has no checksums (an "
             "older dormouse wrote it)' >&2 && " DM_CLI " eval %s 2>/dev/null | cut -d' ' -f2 >&2", old,
             old);
    CHECK(t_run(cmd, a, sizeof a) == 0);
    snprintf(cmd, sizeof cmd, DM_CLI " eval %s | cut -d' ' -f2 >&2", x.run);
    CHECK(t_run(cmd, b, sizeof b) == 0);
    printf("  eval without checksums: %s  with them: %s", a, b);
    CHECKF(!strncmp(a, "1\n", 2) && !strcmp(a + 2, b), "eval: %s vs %s", a, b);
    /* the resume: a note, the same bits as the checksummed copy's, checksums saved again */
    snprintf(cmd, sizeof cmd, DM_CLI " train --resume %s --set steps=4 2>&1 >/dev/null | "
             "grep -c 'has no checksums' >&2 && " DM_CLI " train --resume %s/new --set steps=4 "
             ">/dev/null", old, x.dir);
    CHECKF(t_run(cmd, out, sizeof out) == 0 && !strcmp(out, "1\n"), "resume: %s", out);
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof cmd, "cmp %s/ckpt-00000004/%s.safetensors %s/new/ckpt-00000004/"
                 "%s.safetensors >&2", old, files[i], x.dir, files[i]);
        CHECKF(t_run(cmd, out, sizeof out) == 0, "the resumed %s files differ: %s", files[i], out);
    }
    /* one checksum missing among the others: damage, refused */
    t_stf f;
    snprintf(path, sizeof path, "%s/ckpt-00000002/model.safetensors", old);
    CHECK(t_st_read(x.model, &f) == 0);
    strip_sums(&f, "embed");
    t_st_write(path, &f, 0, 0);
    t_st_free(&f);
    snprintf(cmd, sizeof cmd, DM_CLI " eval %s", path);
    t_expect(cmd, 2, "tensor 'embed' has no checksum", NULL, 0);
    t_rmtree(x.dir);
}

/* Case 4 (at the source): hostile numbers, read from memory: each refused with one line,
 * never cast to an integer out of range (make asan runs this under UBSan). */
TEST(ckptfile_hostile_numbers_refused) {
    const char *headers[] = {
        "{\"x\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[1e30,1e30]}}",
        "{\"x\":{\"dtype\":\"F32\",\"shape\":[1e30,0],\"data_offsets\":[0,0]}}",
        "{\"x\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,0]}}",
        "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}",
        "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,1e308]}}",
        "{\"x\":{\"dtype\":\"F32\",\"shape\":[9007199254740993],\"data_offsets\":[0,4]}}",
        "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}} x",
        " {\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
        "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"extra\":1}}",
        "{\"__metadata__\":{\"step\":1},\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
        "{\"x\xff\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
        "{\"x\\nnewline\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[0,4]}}",
    };
    for (size_t i = 0; i < sizeof headers / sizeof *headers; i++) {
        size_t hl = strlen(headers[i]), n = 8 + hl + 4;
        unsigned char *b = calloc(1, n);
        for (int k = 0; k < 8; k++) b[k] = (unsigned char)((uint64_t)hl >> (8 * k));
        memcpy(b + 8, headers[i], hl);
        char err[1024] = "";
        dm_st_file *f = dm_st_parse(b, n, "h.safetensors", err, sizeof err);
        printf("  %zu: %s\n", i, err);
        CHECKF(f == NULL, "header %zu accepted: %s", i, headers[i]);
        CHECKF(err[0] && !strchr(err, '\n'), "header %zu: error not one line", i);
        dm_st_close(f);
        free(b);
    }
    /* the good one of the same shape is accepted: the refusals above are the numbers' */
    const char *good = "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}   ";
    size_t hl = strlen(good), n = 8 + hl + 4;
    unsigned char *b = calloc(1, n);
    for (int k = 0; k < 8; k++) b[k] = (unsigned char)((uint64_t)hl >> (8 * k));
    memcpy(b + 8, good, hl);
    char err[256];
    dm_st_file *f = dm_st_parse(b, n, "good.safetensors", err, sizeof err);
    CHECKF(f && dm_st_count(f) == 1 && dm_st_get(f, "x", NULL, NULL)[0] == 0.0f, "%s", err);
    dm_st_close(f);
    free(b);
}
