/* api_client.c — a C program that uses libdormouse as installed (built by
 * tests/installed_api.sh with `pkg-config --cflags --libs dormouse`), knowing nothing of
 * the parameter layout or of where the model's memory lives:
 *   api_client CKPT CORPUS OUT_DIR [BACKEND]
 * loads the checkpoint CKPT (into a model on BACKEND, the `backend` key: default the
 * checkpoint's) (model and optimizer), prints the bits per byte of the model
 * on the last eval_window bytes of CORPUS (a plain file) as `dormouse eval` does, trains
 * two steps on the batches `dormouse train` would draw, printing each step's loss and
 * gradient norm, reads and writes a tensor by name, and saves the checkpoint into the
 * run directory OUT_DIR. Then the model alone, without an optimizer: a model of the
 * checkpoint's config loads the checkpoint (dm_model_load; a model of another shape is
 * refused) and prints its bits per byte, takes the trained parameters from the trainer's
 * model through host memory (dm_model_params_to_host / _from_host) and saves them as
 * OUT_DIR/model/ckpt-<step>/ (dm_model_save). Exit 0, or 1 with the error. */
#include <dormouse.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int die(const char *what, const char *err) {
    fprintf(stderr, "api_client: %s: %s\n", what, err);
    return 1;
}

/* The model without an optimizer: loaded from ckpt and evaluated on val[0..w); then the
 * parameters of the trainer t copied in and saved as out/model/ckpt-<step>/. */
static int model_alone(const dm_config *cfg, const char *ckpt, const uint8_t *val, size_t w,
                       dm_trainer *t, const char *out) {
    char err[DM_ERRLEN];
    dm_config other = *cfg; /* a model of another shape: its load is refused */
    other.n_layer = cfg->n_layer + 1;
    dm_model *wrong = dm_model_create(&other, err, sizeof err);
    if (!wrong) return die("dm_model_create", err);
    if (dm_model_load(wrong, ckpt, err, sizeof err) == 0)
        return die("dm_model_load", "loaded a checkpoint of another n_layer");
    printf("refused: %s\n", err);
    dm_model_free(wrong);

    dm_model *m = dm_model_create(cfg, err, sizeof err);
    if (!m) return die("dm_model_create", err);
    double bpb;
    if (dm_model_load(m, ckpt, err, sizeof err)) return die("dm_model_load", err);
    if (dm_model_eval_bpb(m, val, w, &bpb, err, sizeof err)) return die("dm_model_eval_bpb", err);
    printf("model bpb %.6f\n", bpb);

    size_t np = dm_model_num_params(m);
    float *p = malloc(np * sizeof *p);
    if (!p) return die("malloc", "out of memory");
    dm_model_params_to_host(dm_trainer_model(t), p);
    dm_model_params_from_host(m, p);
    double mine, theirs; /* the same parameters: the same bits per byte */
    if (dm_model_eval_bpb(m, val, w, &mine, err, sizeof err) ||
        dm_model_eval_bpb(dm_trainer_model(t), val, w, &theirs, err, sizeof err))
        return die("dm_model_eval_bpb", err);
    if (mine != theirs) {
        snprintf(err, sizeof err, "%.9g after dm_model_params_from_host, the trainer's %.9g",
                 mine, theirs);
        return die("dm_model_params_from_host", err);
    }
    printf("copied bpb %.6f\n", mine);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/model", out);
    if (dm_model_save(m, dir, dm_trainer_next_step(t), err, sizeof err))
        return die("dm_model_save", err);
    printf("saved the model alone into %s\n", dir);
    free(p);
    dm_model_free(m);
    return 0;
}

int main(int argc, char **argv) {
    char err[DM_ERRLEN];
    if (argc != 4 && argc != 5) return die("usage", "api_client CKPT CORPUS OUT_DIR [BACKEND]");
    dm_config cfg;
    long step;
    if (dm_checkpoint_config(argv[1], &cfg, &step, err, sizeof err)) return die(argv[1], err);
    if (argc == 5 && dm_config_set(&cfg, "backend", argv[4], err, sizeof err))
        return die("backend", err);
    FILE *f = fopen(argv[2], "rb");
    if (!f) return die(argv[2], "cannot open");
    fseek(f, 0, SEEK_END);
    size_t n = (size_t)ftell(f);
    rewind(f);
    uint8_t *bytes = malloc(n);
    if (!bytes || fread(bytes, 1, n, f) != n) return die(argv[2], "cannot read");
    fclose(f);

    dm_trainer *t = dm_trainer_create(&cfg, err, sizeof err);
    if (!t) return die("dm_trainer_create", err);
    if (dm_trainer_load(t, argv[1], err, sizeof err)) return die("dm_trainer_load", err);
    dm_model *m = dm_trainer_model(t);
    printf("loaded step %ld on backend %s\n", dm_trainer_next_step(t), dm_model_backend_name(m));

    double bpb;
    size_t w = (size_t)cfg.eval_window;
    if (w > n || dm_model_eval_bpb(m, bytes + (n - w), w, &bpb, err, sizeof err))
        return die("dm_model_eval_bpb", err);
    printf("bpb %.6f\n", bpb);

    /* a tensor by name: read, checked, written back unchanged */
    const dm_tensor *nf = dm_model_find(m, "norm_f");
    if (!nf) return die("dm_model_find", "no norm_f");
    float *v = malloc(nf->numel * sizeof *v);
    if (!v || dm_model_get(m, "norm_f", v, nf->numel, err, sizeof err))
        return die("dm_model_get", err);
    if (dm_model_get(m, "norm_f", v, nf->numel + 1, err, sizeof err) == 0)
        return die("dm_model_get", "accepted a wrong size");
    if (dm_model_set(m, "norm_f", v, nf->numel, err, sizeof err)) return die("dm_model_set", err);
    printf("norm_f[0] %.9g (%zu values)\n", (double)v[0], nf->numel);
    free(v);

    size_t seq = (size_t)cfg.seq_len + 1, rows = (size_t)cfg.grad_accum * cfg.batch_size;
    uint8_t *tok = malloc(rows * seq);
    if (!tok) return die("malloc", "out of memory");
    for (int k = 0; k < 2; k++) {
        long s = dm_trainer_next_step(t);
        float loss;
        double gn;
        if (dm_train_batch(&cfg, bytes, n, s, tok, err, sizeof err))
            return die("dm_train_batch", err);
        if (dm_trainer_step(t, tok, &loss, &gn, err, sizeof err)) return die("dm_trainer_step", err);
        printf("step %ld loss %.9g grad_norm %.17g\n", s + 1, (double)loss, gn);
    }
    if (dm_trainer_save(t, argv[3], err, sizeof err)) return die("dm_trainer_save", err);
    printf("saved step %ld into %s\n", dm_trainer_next_step(t), argv[3]);
    free(tok);

    int rc = model_alone(&cfg, argv[1], bytes + (n - w), w, t, argv[3]);
    free(bytes);
    dm_trainer_free(t);
    return rc;
}
