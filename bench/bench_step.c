/* bench_step.c — time of one forward and one forward+backward of a model on a batch of
 * the bundled corpus: median over reps after a warm-up.
 *
 *   bench_step [--set key=value]... [--reps N]
 *
 * Prints one TSV row per measurement: date, what, config, metric, value, spread, n. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "data.h"
#include "dormouse.h"
#include "train.h"

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    dm_config c;
    dm_config_default(&c);
    int reps = 5;
    char err[512], desc[512] = "";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--set") && i + 1 < argc) {
            const char *kv = argv[++i], *eq = strchr(kv, '=');
            char key[64];
            snprintf(key, sizeof key, "%.*s", eq ? (int)(eq - kv) : 0, kv);
            if (!eq || dm_config_set(&c, key, eq + 1, err, sizeof err)) {
                fprintf(stderr, "bench_step: %s\n", eq ? err : "--set key=value");
                return 2;
            }
            strncat(desc, kv, sizeof desc - strlen(desc) - 2);
            strcat(desc, ",");
        } else {
            fprintf(stderr, "usage: bench_step [--set key=value]... [--reps N]\n");
            return 2;
        }
    }
    int threads = dm_set_threads(c.threads);
    dm_corpus corpus;
    if (dm_corpus_load(&corpus, DM_SOURCE_DIR "/data/kjv.txt.gz", err, sizeof err)) {
        fprintf(stderr, "bench_step: %s\n", err);
        return 1;
    }
    dm_corpus_split(&corpus, c.eval_window, c.seq_len, err, sizeof err);
    dm_model *m = dm_model_create(&c, err, sizeof err);
    if (!m) {
        fprintf(stderr, "bench_step: %s\n", err);
        return 2;
    }
    int B = c.batch_size, T = c.seq_len;
    uint8_t *tok = malloc((size_t)B * (T + 1));
    dm_corpus_batch(&corpus, c.seed, 0, B, T, tok);
    double *fw = malloc(sizeof(double) * (size_t)reps), *fb = malloc(sizeof(double) * (size_t)reps);
    dm_model_forward(m, tok, B, T, NULL); /* warm-up: arena, page faults, thread pool */
    dm_model_backward(m);
    for (int r = 0; r < reps; r++) {
        double t0 = dm_now();
        dm_model_forward(m, tok, B, T, NULL);
        double t1 = dm_now();
        dm_model_zero_grad(m);
        dm_model_backward(m);
        double t2 = dm_now();
        fw[r] = 1e3 * (t1 - t0);
        fb[r] = 1e3 * (t2 - t0);
    }
    qsort(fw, (size_t)reps, sizeof *fw, cmp);
    qsort(fb, (size_t)reps, sizeof *fb, cmp);
    char date[32];
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%d", gmtime(&now));
    if (desc[0]) desc[strlen(desc) - 1] = 0;
    char cfg[600];
    snprintf(cfg, sizeof cfg, "B=%d,T=%d,threads=%d%s%s", B, T, threads, desc[0] ? "," : "", desc);
    printf("%s\tbench_step\t%s\tforward_ms\t%.2f\t%.2f\t%d\n", date, cfg, fw[reps / 2],
           fw[reps - 1] - fw[0], reps);
    printf("%s\tbench_step\t%s\tfwd_bwd_ms\t%.2f\t%.2f\t%d\n", date, cfg, fb[reps / 2],
           fb[reps - 1] - fb[0], reps);
    printf("%s\tbench_step\t%s\tfwd_bwd_tokens_per_s\t%.0f\t\t%d\n", date, cfg,
           B * T / (fb[reps / 2] / 1e3), reps);
    free(tok);
    free(fw);
    free(fb);
    dm_model_free(m);
    dm_corpus_free(&corpus);
    return 0;
}
