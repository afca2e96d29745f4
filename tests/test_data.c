/* test_data.c — prepared data directories (docs/data.md): `dormouse prepare` from files,
 * directories, gzip and a mix (meta.json's sources and CRCs), a prepared copy trains to
 * the bits of the corpus it was made from (one process and under mpirun -np 2), a killed
 * prepare leaves no data directory, damaged data is refused with one line and exit 2,
 * the eval windows (fixed, and all of val.bin as the byte-weighted sum of its windows);
 * and what old inputs do: an A/B cell found by its corpus' bytes, a resume on another
 * corpus quoting the files' sizes, the notes on skipped and binary files. */
#include <cjson/cJSON.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "base/clock.h"
#include "check.h"
#include "dormouse.h"
#include "io/data.h"
#include "jobs/eval.h"

#define TINY5 T_TINY " --set steps=5"

/* sh -c "cd d && script" */
static void sh_in(const char *d, const char *script) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "cd %s && %s", d, script);
    CHECKF(t_run(cmd, NULL, 0) == 0, "failed: %s", script);
}

/* `dormouse ARGS` in d, its output (stdout and stderr) into out; the exit status */
static int cli(const char *d, const char *args, char *out, size_t n) {
    char cmd[8192], log[300];
    snprintf(cmd, sizeof cmd, "cd %s && " DM_CLI " %s", d, args);
    snprintf(log, sizeof log, "%s/cli.log", d);
    int rc = t_run_out(cmd, log, out, n);
    printf("  [%d] dormouse %s\n%s", rc, args, out);
    return rc;
}

static void nap(void) { /* 0.1 ms */
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
}

static uint32_t crc_of(const char *path, size_t *n) {
    char *b = t_slurp(path, n);
    uint32_t c = b ? (uint32_t)crc32(0, (const Bytef *)b, (uInt)*n) : 0;
    free(b);
    return c;
}

static cJSON *meta(const char *dir) {
    char p[1200];
    snprintf(p, sizeof p, "%s/meta.json", dir);
    char *t = t_read_text(p);
    cJSON *o = t ? cJSON_Parse(t) : NULL;
    free(t);
    CHECKF(o != NULL, "%s: no meta.json", dir);
    return o;
}

static const char *mstr(cJSON *o, const char *k) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

static double mnum(cJSON *o, const char *k) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

/* train.bin then val.bin of dir equal the file want, and meta.json's CRCs are theirs */
static void check_bins(const char *d, const char *dir, const char *want, size_t val_n) {
    char cmd[2048], p[600], h[16];
    snprintf(cmd, sizeof cmd, "cd %s && cat %s/train.bin %s/val.bin | cmp - %s", d, dir, dir, want);
    CHECKF(t_run(cmd, NULL, 0) == 0, "%s: train.bin + val.bin differ from %s", dir, want);
    snprintf(p, sizeof p, "%s/%s", d, dir);
    cJSON *o = meta(p);
    const char *part[2] = {"train", "val"};
    for (int i = 0; i < 2 && o; i++) {
        size_t n;
        snprintf(p, sizeof p, "%s/%s/%s.bin", d, dir, part[i]);
        uint32_t c = crc_of(p, &n);
        cJSON *e = cJSON_GetObjectItemCaseSensitive(o, part[i]);
        snprintf(h, sizeof h, "%08x", (unsigned)c);
        CHECKF(!strcmp(mstr(e, "crc32"), h) && mnum(e, "bytes") == (double)n,
               "%s/%s: meta %s %.0f, file %s %zu", dir, part[i], mstr(e, "crc32"),
               mnum(e, "bytes"), h, n);
        if (i == 1 && val_n) CHECKF(n == val_n, "%s: val.bin %zu bytes, expected %zu", dir, n, val_n);
    }
    cJSON_Delete(o);
}

/* meta.json's source i: its path ends with tail, its bytes and CRC-32 are the file's */
static void check_source(const char *d, const char *dir, int i, const char *tail,
                         const char *plain) {
    char p[600], h[16];
    snprintf(p, sizeof p, "%s/%s", d, dir);
    cJSON *o = meta(p);
    cJSON *s = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "sources"), i);
    const char *path = mstr(s, "path");
    size_t n;
    snprintf(p, sizeof p, "%s/%s", d, plain);
    snprintf(h, sizeof h, "%08x", (unsigned)crc_of(p, &n));
    size_t lp = strlen(path), lt = strlen(tail);
    CHECKF(lp >= lt && !strcmp(path + lp - lt, tail), "%s source %d: %s, expected ...%s", dir,
           i, path, tail);
    CHECKF(!strcmp(mstr(s, "crc32"), h) && mnum(s, "bytes") == (double)n,
           "%s source %d (%s): %s %.0f bytes, the file's %s %zu", dir, i, tail, mstr(s, "crc32"),
           mnum(s, "bytes"), h, n);
    cJSON_Delete(o);
}

static int count_sources(const char *d, const char *dir) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s", d, dir);
    cJSON *o = meta(p);
    int n = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(o, "sources"));
    cJSON_Delete(o);
    return n;
}

TEST(data_prepare_files_dirs_gzip_mix) {
    char d[256], out[16384];
    t_tmpdir(d, sizeof d);
    /* x.txt; src/ with a.txt, sub/b.txt.gz (two members), c.bin (binary), .hidden */
    sh_in(d, "zcat " T_CORPUS " | head -c 300000 > x.txt && mkdir -p src/sub"
             " && zcat " T_CORPUS " | tail -c 200000 > src/a.txt"
             " && zcat " T_CORPUS " | head -c 50000 | tail -c 30000 > b.txt"
             " && head -c 10000 b.txt | gzip -c > src/sub/b.txt.gz"
             " && tail -c +10001 b.txt | gzip -c >> src/sub/b.txt.gz"
             " && printf 'abc\\000def' > src/c.bin && echo hidden > src/.hidden"
             " && cat x.txt src/a.txt b.txt > want1 && cat x.txt src/a.txt src/c.bin b.txt > want2"
             " && cat src/a.txt b.txt > want3 && cat x.txt src/a.txt > want4");
    /* a file and a directory (recursive, sorted, gzip inflated, binary skipped with a note) */
    CHECK(cli(d, "prepare --vocab 256 x.txt src --out d1 --val-bytes 5000 --val-split tail", out, sizeof out) == 0);
    CHECK(strstr(out, "c.bin skipped: binary") != NULL);
    CHECK(strstr(out, "prepare: ") && strstr(out, "MB/s"));
    check_bins(d, "d1", "want1", 5000);
    CHECK(count_sources(d, "d1") == 3);
    check_source(d, "d1", 0, "/x.txt", "x.txt");
    check_source(d, "d1", 1, "/src/a.txt", "src/a.txt");
    check_source(d, "d1", 2, "/src/sub/b.txt.gz", "b.txt");
    char p[600];
    snprintf(p, sizeof p, "%s/d1", d);
    cJSON *o = meta(p);
    cJSON *sk = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "skipped"), 0);
    CHECK(strstr(mstr(sk, "path"), "c.bin") && !strcmp(mstr(sk, "why"), "binary"));
    CHECK(!strcmp(mstr(cJSON_GetObjectItemCaseSensitive(o, "split"), "rule"), "val-bytes"));
    CHECK(strlen(mstr(o, "dormouse_version")) > 0 && mnum(o, "total_bytes") > 500000);
    cJSON_Delete(o);
    /* --binary ok keeps it; --include / --exclude filter the directory's files */
    CHECK(cli(d, "prepare --vocab 256 x.txt src --out d2 --binary ok --val-fraction 0.01 --val-split tail", out, sizeof out) == 0);
    check_bins(d, "d2", "want2", 0);
    CHECK(cli(d, "prepare --vocab 256 src --out d3 --include '*.txt' --include 'sub/*.gz' --val-bytes 100 --val-split tail",
              out, sizeof out) == 0);
    check_bins(d, "d3", "want3", 100);
    CHECK(cli(d, "prepare --vocab 256 x.txt src --out d4 --exclude 'sub/*' --val src/sub/b.txt.gz", out,
              sizeof out) == 0);
    check_bins(d, "d4", "want1", 30000); /* train.bin: x.txt a.txt; val.bin: b */
    /* --shuffle-files: another order of the same files, the same for the same seed */
    CHECK(cli(d, "prepare --vocab 256 src x.txt --out s1 --shuffle-files 7", out, sizeof out) == 0);
    CHECK(cli(d, "prepare --vocab 256 src x.txt --out s2 --shuffle-files 7", out, sizeof out) == 0);
    CHECK(cli(d, "prepare --vocab 256 src x.txt --out s0", out, sizeof out) == 0);
    sh_in(d, "cmp s1/train.bin s2/train.bin && ! cmp -s s0/train.bin s1/train.bin");
    CHECK(count_sources(d, "s1") == 3);
    /* refusals: one line, exit 2, nothing created */
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cd %s && " DM_CLI " prepare --vocab 256 x.txt --out d1", d);
    t_expect(cmd, 2, "exists", NULL, 0);
    snprintf(cmd, sizeof cmd, "cd %s && " DM_CLI " prepare --vocab 256 nothere --out e1", d);
    t_expect(cmd, 2, "source not found", NULL, 0);
    snprintf(cmd, sizeof cmd, "cd %s && " DM_CLI " prepare --vocab 256 x.txt --out e2 --val-bytes 300000", d);
    t_expect(cmd, 2, "each needs at least 2", NULL, 0);
    snprintf(cmd, sizeof cmd, "cd %s && " DM_CLI " prepare --vocab 256 x.txt --out e3 --val-bytes 9 --val-fraction 0.1", d);
    t_expect(cmd, 2, "one of --val", NULL, 0);
    snprintf(cmd, sizeof cmd, "cd %s && " DM_CLI " prepare --vocab 256 x.txt --out e5 --val-fraction 1", d);
    t_expect(cmd, 2, "between 0 and 1 (both excluded), got '1'", NULL, 0);
    snprintf(cmd, sizeof cmd, "cd %s && " DM_CLI " prepare --vocab 256 x.txt", d);
    t_expect(cmd, 2, "error: prepare: missing --out DATA_DIR", NULL, 0);
    sh_in(d, "head -c 20000 " T_CORPUS " > trunc.gz");
    snprintf(cmd, sizeof cmd, "cd %s && " DM_CLI " prepare --vocab 256 x.txt trunc.gz --out e4", d);
    t_expect(cmd, 2, "truncated", NULL, 0);
    sh_in(d, "test ! -e e1 && test ! -e e2 && test ! -e e4 && test ! -e e5 && "
             "! ls -d e4.partial-* 2>/dev/null");
    /* the help tells what the flags do */
    CHECK(cli(d, "prepare --help", out, sizeof out) == 0 && strstr(out, "--val-fraction") &&
          strstr(out, "--shuffle-files") && strstr(out, "--binary") && strstr(out, "meta.json"));
    t_rmtree(d);
}

/* The losses and val BPB of a run's metrics.jsonl, one line per step ("" on no file). */
static void numbers(const char *run, char *buf, size_t n) {
    char path[600], line[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run);
    FILE *f = fopen(path, "r");
    size_t used = 0;
    buf[0] = 0;
    while (f && fgets(line, sizeof line, f)) {
        cJSON *o = cJSON_Parse(line), *l = cJSON_GetObjectItemCaseSensitive(o, "loss"),
              *v = cJSON_GetObjectItemCaseSensitive(o, "val_bpb");
        used += (size_t)snprintf(buf + used, n - used, "%.9g/%.9g ", cJSON_IsNumber(l) ?
                                 l->valuedouble : NAN, cJSON_IsNumber(v) ? v->valuedouble : -1);
        cJSON_Delete(o);
    }
    if (f) fclose(f);
}

TEST(data_prepared_copy_trains_to_the_same_bits) {
    char d[256], out[16384], a[4096], b[4096], c[4096];
    t_tmpdir(d, sizeof d);
    CHECK(cli(d, "prepare --vocab 256 " T_CORPUS " --out kjv --val-bytes 1024 --val-split tail", out, sizeof out) == 0);
    CHECK(cli(d, "train --data " T_CORPUS " --out r1 " TINY5 " --set eval_every=2", out,
              sizeof out) == 0);
    CHECK(cli(d, "train --data kjv --out r2 " TINY5 " --set eval_every=2", out, sizeof out) == 0);
    CHECK(strstr(out, "prepared, mapped") != NULL);
    snprintf(a, sizeof a, "%s/r1", d);
    snprintf(b, sizeof b, "%s/r2", d);
    numbers(a, a, sizeof a);
    numbers(b, b, sizeof b);
    printf("  corpus: %s\n  prepared: %s\n", a, b);
    CHECK(a[0] && strcmp(a, b) == 0);
    sh_in(d, "cmp r1/ckpt-00000005/model.safetensors r2/ckpt-00000005/model.safetensors");
    /* the same identity: each run resumes on the other's data */
    sh_in(d, "tail -1 r1/data_path > i1 && tail -1 r2/data_path > i2 && cmp i1 i2");
    CHECK(cli(d, "train --resume r2 --data " T_CORPUS " --set steps=6", out, sizeof out) == 0);
    /* eval of the run: val.bin, the same number as the corpus' last 1024 bytes */
    CHECK(cli(d, "eval r1 --data " T_CORPUS, out, sizeof out) == 0);
    snprintf(c, sizeof c, "%s", strstr(out, "val_bpb ") ? strstr(out, "val_bpb ") : "x");
    CHECK(cli(d, "eval r1 --data kjv", out, sizeof out) == 0);
    CHECK(strncmp(c, strstr(out, "val_bpb ") ? strstr(out, "val_bpb ") : "y", 16) == 0);
    /* --verify-data on a good one trains */
    CHECK(cli(d, "train --data kjv --out r3 " T_TINY " --set steps=1 --verify-data", out,
              sizeof out) == 0);
    t_rmtree(d);
}

TEST(data_prepare_killed_leaves_no_data_dir) {
    char d[256], out[16384], cmd[4096], part[600], dd[600], tcmd[4096];
    t_tmpdir(d, sizeof d);
    /* about 66 MB of text: long enough to be caught while it writes */
    sh_in(d, "zcat " T_CORPUS " > one.txt && for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16;"
             " do cat one.txt; done > big.txt");
    snprintf(cmd, sizeof cmd, DM_CLI " prepare --vocab 256 %s/big.txt --out %s/dd", d, d);
    snprintf(dd, sizeof dd, "%s/dd", d);
    int caught = 0;
    for (int attempt = 0; attempt < 5 && !caught; attempt++) {
        int pid = t_spawn(cmd, NULL);
        snprintf(part, sizeof part, "%s/dd.partial-%d/train.bin", d, pid);
        for (int i = 0; i < 20000 && !t_exists(part) && !t_exists(dd); i++) nap();
        kill(pid, SIGKILL);
        t_wait(pid);
        if (t_exists(dd)) { /* it finished first: complete, then; try again */
            dm_corpus c;
            char err[512];
            CHECK(dm_corpus_load(&c, dd, err, sizeof err) == 0 && !dm_corpus_verify(&c, err, sizeof err));
            dm_corpus_free(&c);
            t_rmtree(dd);
            continue;
        }
        caught = 1;
        snprintf(part, sizeof part, "%s/dd.partial-%d", d, pid);
        CHECK(t_exists(part));
        /* what it left is refused as data, by train and by eval's loader */
        snprintf(tcmd, sizeof tcmd, DM_CLI " train --data %s --out %s/run " T_TINY, part, d);
        t_expect(tcmd, 2, "unfinished `dormouse prepare`", NULL, 0);
        snprintf(tcmd, sizeof tcmd, "%s/run", d);
        CHECK(!t_exists(tcmd));
    }
    CHECKF(caught, "prepare --vocab 256 finished before it could be killed, 5 times");
    /* SIGTERM: stopped cleanly, nothing left at all */
    snprintf(cmd, sizeof cmd, DM_CLI " prepare --vocab 256 %s/big.txt --out %s/dt", d, d);
    int pid = t_spawn(cmd, NULL);
    snprintf(part, sizeof part, "%s/dt.partial-%d/train.bin", d, pid);
    for (int i = 0; i < 20000 && !t_exists(part); i++) nap();
    kill(pid, SIGTERM);
    int rc = t_wait(pid);
    snprintf(part, sizeof part, "%s/dt.partial-%d", d, pid);
    snprintf(dd, sizeof dd, "%s/dt", d);
    CHECKF((rc == 143 && !t_exists(part) && !t_exists(dd)) || (rc == 0 && t_exists(dd)),
           "SIGTERM: exit %d", rc);
    /* a new prepare beside the killed one's leftovers completes */
    CHECK(cli(d, "prepare --vocab 256 one.txt --out dd", out, sizeof out) == 0);
    t_rmtree(d);
}

TEST(data_damaged_refused) {
    char d[256], out[16384], cmd[4096];
    t_tmpdir(d, sizeof d);
    CHECK(cli(d, "prepare --vocab 256 " T_CORPUS " --out good --val-bytes 2048", out, sizeof out) == 0);
    struct {
        const char *name, *damage, *needle, *flag;
    } cases[] = {
        {"trunc", "truncate -s -1 trunc/train.bin", "has 4135801 bytes, meta.json records", ""},
        {"nval", "rm nval/val.bin", "val.bin is missing", ""},
        {"flip", "printf X | dd of=flip/train.bin bs=1 seek=1000 conv=notrunc status=none",
         "its CRC-32 is", ""},
        /* the same change with the mtime put back: only --verify-data reads the bytes */
        {"hidden", "touch -r hidden/train.bin t0 && printf X | dd of=hidden/train.bin bs=1 "
         "seek=1000 conv=notrunc status=none && touch -r t0 hidden/train.bin",
         "--verify-data: train.bin is damaged", "--verify-data"},
        {"meta", "sed -i 's/\"bytes\":\\t2048/\"bytes\":\\t2049/' meta/meta.json",
         "val.bin has 2048 bytes, meta.json records 2049", ""},
        {"junk", "echo '{\"format\": \"dormouse-data\", \"format_version\": 1}' > junk/meta.json",
         "records (bytes, crc32, mtime_ns) are missing", ""},
        {"nometa", "rm nometa/meta.json", "unfinished `dormouse prepare`", ""},
        {"mark", "touch mark/PREPARING", "unfinished `dormouse prepare`", ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char s[2048];
        snprintf(s, sizeof s, "cp -a good %s && %s", cases[i].name, cases[i].damage);
        sh_in(d, s);
        snprintf(cmd, sizeof cmd, "cd %s && " DM_CLI " train --data %s --out run_%s %s " T_TINY,
                 d, cases[i].name, cases[i].name, cases[i].flag);
        t_expect(cmd, 2, cases[i].needle, NULL, 0);
        snprintf(s, sizeof s, "%s/run_%s", d, cases[i].name);
        CHECK(!t_exists(s));
    }
    /* a copy (new mtimes, same bytes) is checked once and trains, with a note */
    sh_in(d, "cp -r good copy");
    CHECK(cli(d, "train --data copy --out rc " T_TINY " --set steps=1", out, sizeof out) == 0);
    CHECK(strstr(out, "its CRC-32 was checked: it matches") != NULL);
    /* eval and bench refuse the same way */
    CHECK(cli(d, "train --data good --out rg " T_TINY " --set steps=1", out, sizeof out) == 0);
    snprintf(cmd, sizeof cmd, "cd %s && " DM_CLI " eval rg --data trunc", d);
    t_expect(cmd, 2, "meta.json records", NULL, 0);
    snprintf(cmd, sizeof cmd, "cd %s && " DM_CLI " eval rg --data hidden --verify-data", d);
    t_expect(cmd, 2, "train.bin is damaged", NULL, 0);
    snprintf(cmd, sizeof cmd, "cd %s && " DM_CLI " bench --data flip --reps 1 " T_TINY, d);
    t_expect(cmd, 2, "its CRC-32 is", NULL, 0);
    t_rmtree(d);
}


TEST(data_mapped_under_mpirun_same_losses) {
    if (!DM_MPIEXEC[0]) {
        t_skip("this build has no MPI (CMake found none; Debian: libopenmpi-dev openmpi-bin)");
        return;
    }
    char d[256], out[16384], a[4096], b[4096];
    t_tmpdir(d, sizeof d);
    CHECK(cli(d, "prepare --vocab 256 " T_CORPUS " --out kjv --val-bytes 1024", out, sizeof out) == 0);
    CHECK(cli(d, "train --data kjv --out one " TINY5 " --set grad_accum=2", out, sizeof out) == 0);
    char cmd[8192], log[600];
    snprintf(cmd, sizeof cmd, "cd %s && " T_MPIRUN " -np 2 " DM_CLI " train --data kjv --out two "
             TINY5 " --set grad_accum=2", d);
    snprintf(log, sizeof log, "%s/mpi.log", d);
    int rc = t_run_out(cmd, log, out, sizeof out);
    if (rc) printf("%s\n", out);
    CHECK(rc == 0);
    snprintf(a, sizeof a, "%s/one", d);
    snprintf(b, sizeof b, "%s/two", d);
    numbers(a, a, sizeof a);
    numbers(b, b, sizeof b);
    printf("  one process: %s\n  mpirun -np 2: %s\n", a, b);
    CHECK(a[0] && strcmp(a, b) == 0);
    sh_in(d, "cmp one/ckpt-00000005/model.safetensors two/ckpt-00000005/model.safetensors");
    t_rmtree(d);
}

TEST(data_eval_windows_fixed) {
    size_t a[8], b[8], c[8];
    CHECK(dm_corpus_eval_offsets(100000, 1000, 8, DM_EVAL_WINDOW_SEED, a) == 0);
    CHECK(dm_corpus_eval_offsets(100000, 1000, 8, DM_EVAL_WINDOW_SEED, b) == 0);
    CHECK(dm_corpus_eval_offsets(100000, 1000, 8, 12345, c) == 0);
    CHECK(memcmp(a, b, sizeof a) == 0);     /* the same windows twice */
    CHECK(memcmp(a, c, sizeof a) != 0);     /* another seed, other windows */
    for (int k = 0; k < 8; k++) {           /* each in its stratum: ascending, apart */
        CHECKF(a[k] >= (size_t)k * 12500 && a[k] + 1000 <= (size_t)(k + 1) * 12500,
               "window %d at %zu", k, a[k]);
        CHECK(c[k] >= (size_t)k * 12500 && c[k] + 1000 <= (size_t)(k + 1) * 12500);
    }
    CHECK(dm_corpus_eval_offsets(7999, 1000, 8, 1, a) == 1); /* strata shorter than a window */
    /* the command: the same number twice; a corpus without a validation set of its own */
    char d[256], out[16384], first[256];
    t_tmpdir(d, sizeof d);
    CHECK(cli(d, "prepare --vocab 256 " T_CORPUS " --out kjv --val-bytes 20000", out, sizeof out) == 0);
    CHECK(cli(d, "train --data kjv --out r " T_TINY " --set steps=2 --set eval_windows=4", out,
              sizeof out) == 0);
    CHECK(strstr(out, "4 fixed windows of 1024 bytes") != NULL);
    CHECK(cli(d, "eval r --set eval_windows=5", out, sizeof out) == 0);
    char *l = strstr(out, "val_bpb ");
    snprintf(first, sizeof first, "%s", l ? l : "");
    CHECK(l && strstr(l, "5120 bytes scored"));
    CHECK(cli(d, "eval r --set eval_windows=5", out, sizeof out) == 0);
    CHECK(strstr(out, "val_bpb ") && !strncmp(first, strstr(out, "val_bpb "), 16));
    /* a validation corpus of its own (--val): all of it is the set, in train and in eval */
    sh_in(d, "zcat " T_CORPUS " | tail -c 20000 > v.txt");
    CHECK(cli(d, "train --data " T_CORPUS " --val v.txt --out rv " T_TINY " --set steps=2 "
              "--set eval_windows=4", out, sizeof out) == 0);
    char *s = strstr(out, "bits per byte | val ");
    double tv = s ? atof(s + 20) : -1;
    CHECK(cli(d, "eval rv", out, sizeof out) == 0);
    l = strstr(out, "val_bpb ");
    CHECKF(l && fabs(atof(l + 8) - tv) < 1e-4 && strstr(l, "4096 bytes scored"),
           "train's val %.6f, eval's %s", tv, l ? l : "none");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cd %s && " DM_CLI " train --data " T_CORPUS " --out r2 " T_TINY
             " --set eval_windows=3", d);
    t_expect(cmd, 2, "eval_windows=3: 3 windows of eval_window=1024 bytes need", NULL, 0);
    snprintf(cmd, sizeof cmd, "cd %s && " DM_CLI " eval r --set eval_windows=30", d);
    t_expect(cmd, 2, "eval_windows=all scores all of it", NULL, 0);
    t_rmtree(d);
}

/* The model of T_TINY, fresh from its seed, on one thread (NULL: said as a failure). */
static dm_model *tiny_model(void) {
    char err[512];
    dm_config cfg;
    dm_config_default(&cfg);
    cfg.d_model = 32, cfg.n_layer = 1, cfg.n_head = 2, cfg.head_dim = 16, cfg.gate_rank = 8;
    cfg.threads = 1;
    dm_model *m = dm_model_create(&cfg, err, sizeof err);
    CHECKF(m != NULL, "the tiny model: %s", err);
    return m;
}

TEST(data_eval_windows_all_is_byte_weighted) {
    char d[256], out[16384], p[600], err[512];
    t_tmpdir(d, sizeof d);
    /* val.bin of 3.5 windows of 1000 bytes */
    CHECK(cli(d, "prepare --vocab 256 " T_CORPUS " --out kjv --val-bytes 3500", out, sizeof out) == 0);
    snprintf(p, sizeof p, "%s/kjv", d);
    dm_corpus c;
    CHECK(dm_corpus_load(&c, p, err, sizeof err) == 0 && c.mapped && c.val_n == 3500);
    dm_model *m = tiny_model();
    if (!m) return;
    int B = 2, T = 64;
    size_t W = 1000, scored;
    double all = dm_eval_val(m, &c, (long)W, 0, B, T, NULL, NULL, &scored);
    /* the windows: [0,1000) [999,1999) [1998,2998) [2997,3500), weighted by predictions */
    double num = 0, den = 0;
    for (size_t s = 0; s + 1 < c.val_n;) {
        size_t len = c.val_n - s < W ? c.val_n - s : W;
        double bpb = dm_eval_bpb(m, c.val + s, len, B, T, NULL);
        printf("  window at %zu, %zu bytes: %.9f bpb\n", s, len, bpb);
        num += bpb * (double)(len - 1);
        den += (double)(len - 1);
        s += len - 1;
    }
    printf("  all: %.12f, the byte-weighted windows: %.12f, %zu bytes scored\n", all, num / den,
           scored);
    CHECK(scored == 3500 && den == 3499);
    CHECKF(fabs(all - num / den) <= 1e-12 * fabs(all), "all %.15g vs windows %.15g", all,
           num / den);
    /* one window: the last eval_window bytes, as dm_eval_bpb scores them */
    double one = dm_eval_val(m, &c, (long)W, 1, B, T, NULL, NULL, &scored);
    CHECK(scored == W && one == dm_eval_bpb(m, c.val + 2500, W, B, T, NULL));
    dm_model_free(m);
    dm_corpus_free(&c);
    /* the command says what it scored */
    CHECK(cli(d, "train --data kjv --out r " T_TINY " --set steps=1 --set eval_window=1000 "
              "--set eval_windows=all", out, sizeof out) == 0);
    CHECK(cli(d, "eval r", out, sizeof out) == 0 && strstr(out, "all 3500 bytes") &&
          strstr(out, "3500 bytes scored"));
    t_rmtree(d);
}

/* A long evaluation stops between its windows when asked: in-process, a stop already
 * asked for scores the first window and gives NaN with the stop kept; `dormouse eval`
 * with eval_windows=all shows its progress, and SIGINT then ends it at the next window
 * (exit 130, said in one line), long before the whole val.bin. */
TEST(data_eval_stops_between_windows) {
    char d[256], out[16384], p[600], ep[600], err[512], cmd[4096];
    t_tmpdir(d, sizeof d);
    CHECK(cli(d, "prepare --vocab 256 " T_CORPUS " --out kjv --val-bytes 4000000", out, sizeof out) == 0);
    snprintf(p, sizeof p, "%s/kjv", d);
    dm_corpus c;
    CHECK(dm_corpus_load(&c, p, err, sizeof err) == 0 && c.val_n == 4000000);
    dm_model *m = tiny_model();
    if (!m) return;
    volatile sig_atomic_t stop = SIGINT;
    dm_job_io io = {NULL, NULL, &stop, NULL};
    size_t scored = 1;
    CHECK(isnan(dm_eval_val(m, &c, 1000, 0, 2, 64, NULL, &io, &scored)) && scored == 1000);
    CHECK(isnan(dm_eval_val(m, &c, 1000, 8, 2, 64, NULL, &io, &scored)) && scored == 1000 &&
          stop == SIGINT);
    stop = 0; /* not asked: every window */
    CHECK(isfinite(dm_eval_val(m, &c, 1000, 8, 2, 64, NULL, &io, &scored)) &&
          scored == 8000);
    dm_model_free(m);
    dm_corpus_free(&c);
    CHECK(cli(d, "train --data kjv --out r " T_TINY " --set steps=1", out, sizeof out) == 0);
    /* the tiny model scores a window of 1024 bytes in 16 forwards of 2 x 32: 4 MB take
     * about 10 s on one core of a quiet machine; the progress line comes after 2 s */
    snprintf(cmd, sizeof cmd, DM_CLI " eval %s/r --set eval_windows=all > %s/eval.out", d, d);
    snprintf(p, sizeof p, "%s/eval.out", d);
    snprintf(ep, sizeof ep, "%s/eval.err", d);
    double t0 = dm_now();
    int pid = t_spawn(cmd, ep), seen = 0, ended = 0;
    for (int i = 0; i < 1200 && !seen && !ended; i++) { /* up to 2 minutes */
        struct timespec ts = {0, 100000000};
        nanosleep(&ts, NULL);
        char *o = t_read_text(p);
        seen = o && strstr(o, "eval: ") && strstr(o, " MB scored (");
        free(o);
        ended = !seen && waitpid(pid, NULL, WNOHANG) == pid;
    }
    if (!seen) {
        if (!ended) kill(pid, SIGKILL), t_wait(pid);
        CHECKF(0, "no progress line from the eval in %.0f s (%s)", dm_now() - t0,
               ended ? "it ended first" : "still running");
        t_rmtree(d);
        return;
    }
    kill(pid, SIGINT);
    int rc = t_wait(pid);
    char *e = t_read_text(ep), *o = t_read_text(p);
    printf("  eval after %.1f s: exit %d\n  stdout: %s  stderr: %s", dm_now() - t0, rc,
           o ? o : "", e ? e : "");
    CHECKF(rc == 130, "SIGINT during the evaluation: exit %d", rc);
    CHECK(e && strstr(e, "interrupted during the evaluation of all 4000000 bytes (eval_windows=all), ") &&
          !strchr(strchr(e, '\n') + 1, '\n'));
    CHECK(o && !strstr(o, "val_bpb"));
    free(e);
    free(o);
    /* train: a stop during a step's evaluation (step 2 of 4; step 1 needs none) saves the
     * checkpoint of that step, whose metrics line has no val_bpb; one during the final
     * evaluation names `eval`, not a resume that has nothing to train */
    const char *trains[2] = {"--set steps=4 --set eval_every=2", "--set steps=1"};
    const char *says[2] = {"interrupted at step 2 during its evaluation: checkpoint saved; "
                           "continue with", "interrupted during the final evaluation, after "
                           "the last step (1): checkpoint saved; its validation BPB: `"};
    for (int k = 0; k < 2; k++) {
        char run[700], mp[800], ck[800];
        snprintf(run, sizeof run, "%s/t%d", d, k);
        snprintf(cmd, sizeof cmd, DM_CLI " train --data %s/kjv --out %s " T_TINY " %s --set "
                 "eval_windows=all", d, run, trains[k]);
        snprintf(mp, sizeof mp, "%s/metrics.jsonl", run);
        pid = t_spawn(cmd, ep);
        seen = 0;
        for (int i = 0; i < 1200 && !seen; i++) {
            struct timespec ts = {0, 50000000};
            nanosleep(&ts, NULL);
            char *m1 = t_read_text(mp);
            seen = k ? t_exists(run) : m1 && strstr(m1, "\"step\": 1,") != NULL;
            free(m1);
        }
        struct timespec half = {0, 500000000};
        nanosleep(&half, NULL); /* the next step is a millisecond: into its evaluation */
        kill(pid, SIGINT);
        rc = t_wait(pid);
        e = t_read_text(ep);
        char *ml = t_read_text(mp);
        printf("  train %s: exit %d, %s", trains[k], rc, e ? e : "");
        CHECKF(rc == 130 && e && strstr(e, says[k]), "train %s: exit %d", trains[k], rc);
        snprintf(ck, sizeof ck, "%s/ckpt-%08d", run, k ? 1 : 2);
        CHECK(t_exists(ck));
        CHECKF(ml && !strstr(ml, "val_bpb") && strstr(ml, k ? "\"step\": 1," : "\"step\": 2,"),
               "metrics: %s", ml ? ml : "none");
        free(e);
        free(ml);
    }
    t_rmtree(d);
}

/* An A/B sweep's finished cells are found again when the corpus moved (an installed
 * copy): matched by their bytes; another corpus is still refused. */
TEST(ab_cells_match_corpus_by_bytes) {
    char d[256], out[16384];
    t_tmpdir(d, sizeof d);
    sh_in(d, "mkdir x y && zcat " T_CORPUS " | head -c 400000 > x/c.txt && cp x/c.txt y/c.txt"
             " && head -c 399999 x/c.txt > other.txt");
#define AB_ARGS " --set d_model=32 --set n_layer=1 --set n_head=2 --set head_dim=16 " \
    "--set gate_rank=8 --set batch_size=2 --set seq_len=32 --set eval_window=1024 " \
    "--set warmup_steps=1 --set threads=1 --steps 2 --seeds 1 --variant 'v: lr=0.002' --no-history"
    CHECK(cli(d, "ab --data x/c.txt" AB_ARGS " --dir ab", out, sizeof out) == 0);
    CHECK(cli(d, "ab --data y/c.txt" AB_ARGS " --dir ab", out, sizeof out) == 0);
    CHECK(strstr(out, "cached") != NULL);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cd %s && " DM_CLI " ab --data other.txt" AB_ARGS " --dir ab", d);
    t_expect(cmd, 2, "another corpus", NULL, 0);
    /* data directories of the same bytes: the same split is the same corpus, another
     * split (other training bytes) is not */
    CHECK(cli(d, "prepare --vocab 256 x/c.txt --out p1 --val-bytes 2000 && cp -a p1 p1b && " DM_CLI
              " prepare --vocab 256 x/c.txt --out p2 --val-bytes 3000", out, sizeof out) == 0);
    CHECK(cli(d, "ab --data p1" AB_ARGS " --dir ab2", out, sizeof out) == 0);
    CHECK(cli(d, "ab --data p1b" AB_ARGS " --dir ab2", out, sizeof out) == 0 &&
          strstr(out, "cached") != NULL);
    snprintf(cmd, sizeof cmd, "cd %s && " DM_CLI " ab --data p2" AB_ARGS " --dir ab2", d);
    t_expect(cmd, 2, "another corpus", NULL, 0);
#undef AB_ARGS
    t_rmtree(d);
}

/* A resume on another corpus names the files' own sizes, not theirs plus the window. */
TEST(resume_other_corpus_quotes_file_sizes) {
    char d[256], out[16384], err[4096], cmd[4096];
    t_tmpdir(d, sizeof d);
    sh_in(d, "zcat " T_CORPUS " | head -c 303076 > a.txt && zcat " T_CORPUS
             " | tail -c 5000 > v.txt && zcat " T_CORPUS " | head -c 200000 > b.txt");
    CHECK(cli(d, "train --data a.txt --val v.txt --out run " T_TINY " --set steps=3 --until 1",
              out, sizeof out) == 0);
    snprintf(cmd, sizeof cmd, "cd %s && " DM_CLI " train --resume run --data b.txt", d);
    t_expect(cmd, 2, "is not the one", err, sizeof err);
    CHECKF(strstr(err, "b.txt (200000 bytes)") && strstr(err, "v.txt (5000 bytes)") &&
           strstr(err, "303076 bytes of corpus and a 1024-byte validation window") &&
           !strstr(err, "201024") && !strstr(err, "304100"), "%s", err);
    t_rmtree(d);
}

/* The same bytes split elsewhere are another training set: a resume on a data directory
 * of another --val-bytes, or on the corpus file with another eval_window, is refused with
 * both counts; a copy of the run's own split resumes (and is recorded); a data_path of an
 * older dormouse, without the training bytes, resumes and gets them recorded. */
TEST(resume_other_split_refused) {
    char d[256], out[16384], err[4096], cmd[4096];
    t_tmpdir(d, sizeof d);
    CHECK(cli(d, "prepare --vocab 256 " T_CORPUS " --out a --val-bytes 20000 --val-split tail", out,
              sizeof out) == 0);
    CHECK(cli(d, "prepare --vocab 256 " T_CORPUS " --out b --val-bytes 30000 --val-split tail", out,
              sizeof out) == 0);
    sh_in(d, "cp -a a a2");
    CHECK(cli(d, "train --data a --out run " T_TINY " --set steps=4 --until 1", out,
              sizeof out) == 0);
    snprintf(cmd, sizeof cmd, "cd %s && " DM_CLI " train --resume run --data b --until 2", d);
    t_expect(cmd, 2, "split into 4107850 training bytes where the run had 4117850", err,
             sizeof err);
    CHECK(cli(d, "train --resume run --data a2 --until 2", out, sizeof out) == 0);
    char p[600], *dp;
    snprintf(p, sizeof p, "%s/run/data_path", d);
    CHECKF((dp = t_read_text(p)) && strstr(dp, "/a2\nbytes 4137850 crc32 ") &&
           strstr(dp, " train 4117850\n"), "data_path: %s", dp ? dp : "none");
    free(dp);
    /* the corpus file: eval_window moves its split */
    CHECK(cli(d, "train --data " T_CORPUS " --out f " T_TINY " --set steps=4 --until 1", out,
              sizeof out) == 0);
    snprintf(cmd, sizeof cmd, "cd %s && " DM_CLI " train --resume f --set eval_window=2048", d);
    t_expect(cmd, 2, "split into 4135802 training bytes where the run had 4136826", NULL, 0);
    /* an older dormouse's data_path: the identity without the split */
    sh_in(d, "sed -i 's/ train [0-9]*$//' f/data_path && ! grep -q train f/data_path");
    CHECK(cli(d, "train --resume f --until 2", out, sizeof out) == 0);
    snprintf(p, sizeof p, "%s/f/data_path", d);
    CHECKF((dp = t_read_text(p)) && strstr(dp, " train 4136826\n"), "data_path: %s",
           dp ? dp : "none");
    free(dp);
    t_rmtree(d);
}

/* A corpus directory says which of its entries it skipped and which look binary. */
TEST(corpus_dir_notes_skipped_and_binary) {
    char d[256], out[16384];
    t_tmpdir(d, sizeof d);
    sh_in(d, "mkdir -p c/sub && zcat " T_CORPUS " | head -c 200000 > c/a.txt"
             " && head -c 3000 /bin/sh > c/blob.bin && echo x > c/sub/y.txt && mkfifo c/pipe");
    CHECK(cli(d, "train --data c --out run " T_TINY " --set steps=1", out, sizeof out) == 0);
    CHECK(strstr(out, "c/blob.bin looks binary") != NULL);
    CHECK(strstr(out, "c/sub skipped: a directory") != NULL);
    CHECK(strstr(out, "c/pipe skipped: not a regular file") != NULL);
    t_rmtree(d);
}

/* The default split is spread: a corpus of 60 files, each its own text ("file NN ..."),
 * validates on pieces from all over it, not on the end of the last file. val.bin is the
 * pieces meta.json records (offset and length in the concatenated sources), train.bin
 * the rest, so the two put back together are the sources; the same seed gives the same
 * split, another seed another; the CRCs recorded are the files'; train and eval run on
 * it; --val-split tail is the tail, as before. */
TEST(data_prepare_spread_split) {
    char d[256], out[16384], p[600];
    t_tmpdir(d, sizeof d);
    sh_in(d, "mkdir src && for i in $(seq 10 69); do for k in $(seq 1 300); do "
             "echo \"file $i line $k of some text\"; done > src/f$i.txt; done && "
             "cat src/f*.txt > all.txt");
    CHECK(cli(d, "prepare --vocab 256 src --out sp --val-bytes 40000", out, sizeof out) == 0);
    CHECK(cli(d, "prepare --vocab 256 src --out sp2 --val-bytes 40000", out, sizeof out) == 0);
    CHECK(cli(d, "prepare --vocab 256 src --out sp3 --val-bytes 40000 --val-seed 5", out, sizeof out) == 0);
    CHECK(cli(d, "prepare --vocab 256 src --out tl --val-bytes 40000 --val-split tail", out, sizeof out) == 0);
    sh_in(d, "cmp sp/val.bin sp2/val.bin && ! cmp -s sp/val.bin sp3/val.bin");
    check_bins(d, "tl", "all.txt", 40000);
    snprintf(p, sizeof p, "%s/sp", d);
    cJSON *o = meta(p), *split = cJSON_GetObjectItemCaseSensitive(o, "split");
    CHECK(!strcmp(mstr(split, "method"), "spread") && mnum(split, "seed") == 0);
    cJSON *pcs = cJSON_GetObjectItemCaseSensitive(split, "pieces");
    int k = cJSON_GetArraySize(pcs);
    CHECKF(k == 10, "%d pieces of 40000 bytes", k); /* 9 of 4096 and one of 3136 */
    /* the sources put back together from train.bin and the recorded pieces */
    size_t nt, nv, na;
    char *tr, *va, *all;
    snprintf(p, sizeof p, "%s/sp/train.bin", d);
    tr = t_slurp(p, &nt);
    snprintf(p, sizeof p, "%s/sp/val.bin", d);
    va = t_slurp(p, &nv);
    snprintf(p, sizeof p, "%s/all.txt", d);
    all = t_slurp(p, &na);
    CHECK(tr && va && all && nv == 40000 && nt + nv == na);
    char *back = malloc(na + 1);
    size_t t = 0, v = 0, pos = 0, w = 0;
    int files[70] = {0}, distinct = 0;
    for (int i = 0; i < k && back && tr && va && all; i++) {
        size_t off = (size_t)cJSON_GetArrayItem(cJSON_GetArrayItem(pcs, i), 0)->valuedouble;
        size_t len = (size_t)cJSON_GetArrayItem(cJSON_GetArrayItem(pcs, i), 1)->valuedouble;
        CHECK(off >= pos && off + len <= na);
        memcpy(back + w, tr + t, off - pos), w += off - pos, t += off - pos;
        memcpy(back + w, va + v, len), w += len, v += len;
        pos = off + len;
        int f; /* the file a piece comes from: the first "file NN" in it */
        const char *at = strstr(back + off, "file ");
        if (at && sscanf(at, "file %d", &f) == 1 && f >= 10 && f < 70 && !files[f]++) distinct++;
    }
    if (back && tr && all && w + (nt - t) == na) {
        memcpy(back + w, tr + t, nt - t);
        CHECKF(!memcmp(back, all, na), "train.bin and the pieces are not the sources");
    } else CHECK(0);
    CHECKF(distinct >= 8, "the pieces come from %d files of 60", distinct);
    free(back);
    free(tr);
    free(va);
    free(all);
    cJSON_Delete(o);
    CHECK(cli(d, "train --data sp --out run " T_TINY " --set steps=3 --verify-data", out,
              sizeof out) == 0);
    CHECK(cli(d, "eval run", out, sizeof out) == 0 && strstr(out, "sp/val.bin"));
    t_rmtree(d);
}
