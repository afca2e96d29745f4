/* train.c — the training loop: batches, forward, backward, optimizer, evaluation,
 * metrics, checkpoints, progress, summary; exact resume; a clean stop on SIGINT/SIGTERM. */
#include "jobs/train.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "io/ckpt.h"
#include "io/data.h"
#include "ops/ops.h" /* DM_VERIFY_BOUND */
#include "jobs/eval.h"
#include "io/files.h"
#include "optim/optim.h"
#include "io/safetensors.h"

static volatile sig_atomic_t g_stop; /* set by SIGINT/SIGTERM: stop after this step */
static void on_signal(int sig) { g_stop = sig; }

/* dir/name <- text, atomically */
static int write_file_atomic(const char *dir, const char *name, const char *text, char *err,
                             size_t errlen) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return dm_write_file_atomic(path, text, err, errlen);
}

/* Keep the lines of metrics.jsonl whose step is <= last (a resumed run continues it). */
static int trim_metrics(const char *dir, long last, char *err, size_t errlen) {
    char path[4200];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t cap = 1 << 16, len = 0;
    char *keep = malloc(cap), line[8192];
    keep[0] = 0;
    while (fgets(line, sizeof line, f)) {
        cJSON *o = cJSON_Parse(line);
        cJSON *s = o ? cJSON_GetObjectItemCaseSensitive(o, "step") : NULL;
        int ok = cJSON_IsNumber(s) && s->valuedouble <= (double)last;
        cJSON_Delete(o);
        if (!ok) continue;
        size_t l = strlen(line);
        if (len + l + 1 > cap) keep = realloc(keep, cap = 2 * (len + l + 1));
        memcpy(keep + len, line, l + 1);
        len += l;
    }
    fclose(f);
    int rc = write_file_atomic(dir, "metrics.jsonl", keep, err, errlen);
    free(keep);
    return rc;
}

static void fmt_duration(char *buf, size_t n, double s) {
    if (!(s >= 0) || s > 1e7) snprintf(buf, n, "?");
    else if (s >= 3600) snprintf(buf, n, "%dh%02dm", (int)(s / 3600), (int)(fmod(s, 3600) / 60));
    else snprintf(buf, n, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
}

int dm_train(const dm_config *cfg_in, const dm_train_args *a) {
    dm_config cfg = *cfg_in;
    char err[8192];
    int rc = 1, tty = isatty(fileno(stdout));
    dm_corpus corpus = {0};
    dm_model *m = NULL;
    dm_optim *opt = NULL;
    FILE *metrics = NULL;
    uint8_t *batch = NULL;
    dm_atlas *atlas = NULL;
    long start = 0;

    int nthreads = dm_set_threads(cfg.threads);
    if (dm_corpus_load(&corpus, a->data, err, sizeof err) ||
        dm_corpus_split(&corpus, cfg.eval_window, cfg.seq_len, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        rc = 2;
        goto done;
    }
    m = dm_model_create(&cfg, err, sizeof err);
    if (!m) {
        fprintf(stderr, "error: %s\n", err);
        rc = 2;
        goto done;
    }
    opt = dm_optim_create(m, &cfg, err, sizeof err);
    if (!opt) {
        fprintf(stderr, "error: %s\n", err);
        goto done;
    }
    if (!a->resume) {
        char found[4200];
        if (dm_ckpt_resolve(a->out, found, sizeof found, err, sizeof err) == 0) {
            fprintf(stderr, "error: %s already holds a run (%s); continue it with --resume or "
                            "choose another --out\n", a->out, found);
            rc = 2;
            goto done;
        }
    }
    /* inputs are good: only now does anything get written */
    if (dm_mkdir_p(a->out) != 0) {
        fprintf(stderr, "error: cannot create run directory %s: %s\n", a->out, strerror(errno));
        goto done;
    }
    if (a->resume) {
        char dir[4096];
        dm_config saved;
        if (dm_ckpt_resolve(a->out, dir, sizeof dir, err, sizeof err) ||
            dm_ckpt_read_config(dir, &saved, &start, err, sizeof err) ||
            dm_ckpt_load(dir, m, opt, err, sizeof err)) {
            fprintf(stderr, "error: cannot resume: %s\n", err);
            rc = 2;
            goto done;
        }
        if (trim_metrics(a->out, start, err, sizeof err)) {
            fprintf(stderr, "error: %s\n", err);
            goto done;
        }
        printf("resuming %s at step %ld of %d\n", a->out, start, cfg.steps);
    } else {
        /* a fresh run never mixes with an old one's files */
        char p[4200];
        snprintf(p, sizeof p, "%s/metrics.jsonl", a->out);
        unlink(p);
        char *abs = realpath(a->data, NULL);
        snprintf(p, sizeof p, "%s\n", abs ? abs : a->data);
        free(abs);
        if (write_file_atomic(a->out, "data_path", p, err, sizeof err)) {
            fprintf(stderr, "error: %s\n", err);
            goto done;
        }
    }
    char *cj = dm_config_to_json(&cfg);
    int wr = write_file_atomic(a->out, "config.json", cj, err, sizeof err);
    free(cj);
    if (wr) {
        fprintf(stderr, "error: %s\n", err);
        goto done;
    }
    char mpath[4200];
    snprintf(mpath, sizeof mpath, "%s/metrics.jsonl", a->out);
    metrics = fopen(mpath, "a");
    batch = malloc((size_t)cfg.batch_size * (cfg.seq_len + 1));
    if (!metrics || !batch || dm_model_reserve(m, cfg.batch_size, cfg.seq_len, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", metrics ? err : "cannot open metrics.jsonl");
        goto done;
    }

    printf("dormouse train: %s mixer, d_model %d, %d layers, %d heads x %d, %zu parameters\n",
           cfg.mixer == DM_MIXER_KDA ? "kda" : "gdn", cfg.d_model, cfg.n_layer, cfg.n_head,
           cfg.head_dim, dm_model_num_params(m));
    printf("corpus %s: %zu bytes (%zu train, %ld validation); batch %d x %d; %d steps; %d threads\n",
           a->data, corpus.n, corpus.train_n, cfg.eval_window, cfg.batch_size, cfg.seq_len,
           cfg.steps, nthreads);
    dm_optim_print_groups(opt, m, stdout);
    fflush(stdout);

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    const uint8_t *val = corpus.bytes + corpus.train_n;
    size_t val_n = corpus.n - corpus.train_n;
    double t_start = dm_now(), t_train = 0, interval_t = 0, last_bpb = NAN, loss_sum = 0;
    int interval_n = 0;
    float loss = NAN;
    long tokens_per_step = (long)cfg.batch_size * cfg.seq_len;
    rc = 0;
    /* the atlas (atlas=1): every op and stage timed, after two warm-up steps */
    atlas = cfg.atlas ? calloc(1, sizeof *atlas) : NULL;
    if (atlas) {
        dm_model_set_atlas(m, atlas);
        dm_optim_set_atlas(opt, atlas);
    }
    long atlas_from = start + (cfg.steps - start > 4 ? 2 : 0);
    double verify_worst = -1;
    char verify_what[64] = "";
    for (long step = start; step < cfg.steps; step++) {
        if (atlas && step == atlas_from) dm_atlas_reset(atlas);
        /* verify_fused=N: fused and reference paths both run on every N-th step */
        int verify = cfg.verify_fused > 0 && (step + 1) % cfg.verify_fused == 0;
        dm_model_set_verify(m, verify);
        double t0 = dm_now();
        dm_corpus_batch(&corpus, cfg.seed, step, cfg.batch_size, cfg.seq_len, batch);
        double t1 = dm_now();
        loss = dm_model_forward(m, batch, cfg.batch_size, cfg.seq_len, NULL);
        double t2 = dm_now();
        if (!isfinite(loss)) {
            if (tty) printf("\n");
            fprintf(stderr, "error: loss is %g at step %ld; stopping (the last checkpoint in %s "
                            "is kept)\n", loss, step + 1, a->out);
            rc = 1;
            break;
        }
        dm_model_zero_grad(m);
        dm_model_backward(m);
        dm_model_set_verify(m, 0);
        double t3 = dm_now();
        float lr = cfg.lr * dm_lr_factor(&cfg, step);
        double gnorm = dm_optim_step(opt, m, step);
        if (atlas) {
            dm_atlas_stage(atlas, DM_ST_DATA, t1 - t0);
            dm_atlas_stage(atlas, DM_ST_FORWARD, t2 - t1);
            dm_atlas_stage(atlas, DM_ST_BACKWARD, t3 - t2);
            dm_atlas_stage(atlas, DM_ST_OPTIMIZER, dm_now() - t3);
            atlas->steps++;
        }
        if (!isfinite(gnorm)) {
            if (tty) printf("\n");
            fprintf(stderr, "error: gradient norm is %g at step %ld; stopping (the last "
                            "checkpoint in %s is kept)\n", gnorm, step + 1, a->out);
            rc = 1;
            break;
        }
        double vrel = -1;
        if (verify) {
            char what[64];
            vrel = dm_model_verify_take(m, what, sizeof what);
            if (vrel > verify_worst) {
                verify_worst = vrel;
                snprintf(verify_what, sizeof verify_what, "%s", what);
            }
            if (!(vrel <= DM_VERIFY_BOUND)) {
                if (tty) printf("\n");
                fprintf(stderr, "error: verify at step %ld: fused and reference differ by %.3g "
                                "(relative RMS, %s) > %.0e\n", step + 1, vrel, what,
                        DM_VERIFY_BOUND);
                rc = 1;
                break;
            }
        }
        double dt = dm_now() - t0;
        t_train += dt;
        interval_t += dt;
        interval_n++;
        loss_sum += loss;
        long done = step + 1;
        int last = done == cfg.steps;
        int do_eval = last || (cfg.eval_every > 0 && done % cfg.eval_every == 0);
        if (do_eval) {
            double te = dm_now();
            dm_model_set_atlas(m, NULL); /* the op table is per training step */
            last_bpb = dm_eval_bpb(m, val, val_n, cfg.batch_size, cfg.seq_len);
            dm_model_set_atlas(m, atlas);
            if (atlas) dm_atlas_stage(atlas, DM_ST_EVAL, dm_now() - te);
            if (!isfinite(last_bpb)) {
                fprintf(stderr, "error: validation BPB is %g at step %ld\n", last_bpb, done);
                rc = 1;
                break;
            }
        }
        double ms = 1e3 * interval_t / interval_n, tps = tokens_per_step / (interval_t / interval_n);
        if (done % cfg.log_every == 0 || last || do_eval) {
            fprintf(metrics,
                    "{\"step\": %ld, \"loss\": %.9g, \"loss_avg\": %.6f, \"lr\": %.6g, "
                    "\"grad_norm\": %.6g, \"ms_per_step\": %.2f, \"tokens_per_s\": %.1f, "
                    "\"elapsed_s\": %.2f",
                    done, loss, loss_sum / interval_n, lr, gnorm, ms, tps, dm_now() - t_start);
            if (do_eval) fprintf(metrics, ", \"val_bpb\": %.6f", last_bpb);
            if (vrel >= 0) fprintf(metrics, ", \"verify_max_rel\": %.3g", vrel);
            fprintf(metrics, "}\n");
            fflush(metrics);
        }
        char eta[32];
        fmt_duration(eta, sizeof eta, (cfg.steps - done) * (t_train / (done - start)));
        if (tty || done % cfg.log_every == 0 || last || do_eval) {
            char vb[32] = "-";
            if (!isnan(last_bpb)) snprintf(vb, sizeof vb, "%.4f bpb", last_bpb);
            printf("%sstep %ld/%d | loss %.4f | val %s | %.0f ms/step | %.0f tok/s | ETA %s%s",
                   tty ? "\r\033[K" : "", done, cfg.steps, loss, vb, ms, tps, eta,
                   tty ? "" : "\n");
            fflush(stdout);
        }
        if (done % cfg.log_every == 0 || last) {
            interval_t = 0;
            interval_n = 0;
            loss_sum = 0;
        }
        int until = a->until > 0 && done == a->until && !last;
        if (last || g_stop || until || (cfg.ckpt_every > 0 && done % cfg.ckpt_every == 0)) {
            if (dm_ckpt_save(a->out, m, opt, done, err, sizeof err)) {
                fprintf(stderr, "\nerror: %s\n", err);
                rc = 1;
                break;
            }
        }
        if (until) {
            if (tty) printf("\n");
            printf("stopped at step %ld (--until): checkpoint saved; continue with "
                   "`dormouse train --resume %s`\n", done, a->out);
            break;
        }
        if (g_stop && !last) {
            if (tty) printf("\n");
            fprintf(stderr, "interrupted at step %ld: checkpoint saved; continue with "
                            "`dormouse train --resume %s`\n", done, a->out);
            rc = 130;
            break;
        }
    }
    if (tty) printf("\n");
    char disp[1024];
    dm_model_dispatch_report(m, disp, sizeof disp);
    printf("dispatch: %s\n", disp);
    if (verify_worst >= 0)
        printf("verify: largest fused-vs-reference relative difference %.3g (%s), bound %.0e\n",
               verify_worst, verify_what, DM_VERIFY_BOUND);
    if (atlas && atlas->steps > 0) {
        dm_atlas_print(atlas, stdout);
        char ap[4200];
        snprintf(ap, sizeof ap, "%s/atlas.txt", a->out);
        FILE *af = fopen(ap, "w");
        if (af) {
            dm_atlas_print(atlas, af);
            fclose(af);
        }
    }
    if (rc == 0 && (a->until <= 0 || a->until >= cfg.steps)) {
        long steps_run = cfg.steps - start;
        double tps = steps_run > 0 ? steps_run * tokens_per_step / t_train : 0;
        printf("summary: %zu parameters | %d steps | final train loss %.4f | val %.4f bpb | "
               "%.0f tokens/s | %.1f s\n",
               dm_model_num_params(m), cfg.steps, loss, last_bpb, tps, dm_now() - t_start);
        char js[2048];
        snprintf(js, sizeof js,
                 "{\n  \"parameters\": %zu,\n  \"steps\": %d,\n  \"final_train_loss\": %.6f,\n"
                 "  \"val_bpb\": %.6f,\n  \"tokens_per_s\": %.1f,\n  \"wall_s\": %.2f,\n"
                 "  \"threads\": %d,\n  \"dispatch\": \"%s\",\n  \"verify_max_rel\": %.3g\n}\n",
                 dm_model_num_params(m), cfg.steps, loss, last_bpb, tps, dm_now() - t_start,
                 nthreads, disp, verify_worst);
        if (write_file_atomic(a->out, "summary.json", js, err, sizeof err)) {
            fprintf(stderr, "error: %s\n", err);
            rc = 1;
        }
    }
done:
    if (m) dm_model_set_atlas(m, NULL);
    free(atlas);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    g_stop = 0;
    if (metrics) fclose(metrics);
    free(batch);
    dm_optim_free(opt);
    dm_model_free(m);
    dm_corpus_free(&corpus);
    return rc;
}
