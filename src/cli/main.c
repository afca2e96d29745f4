/* main.c — `dormouse COMMAND ...`: the processes of the run (under mpirun: MPI's ranks,
 * src/base/comm.h), the signal handlers, the printer, dispatch to the commands
 * (cli/commands.h; their shared helpers are cli/cli.h's: args.c, print.c). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/text.h"
#include "cli/cli.h"
#include "cli/commands.h"

/* SIGINT / SIGTERM ask the running job to stop cleanly (it reads the flag as io.stop,
 * which holds the signal: the exit code is 128 + it, 130 for SIGINT and 143 for
 * SIGTERM); the handler is reset by its first signal, so a second one ends the process
 * at once. */
static volatile sig_atomic_t g_stop;
static void on_signal(int sig) { g_stop = sig; }

/* The handlers are installed before anything else of the process runs: from the
 * executable's .preinit_array, which the dynamic loader runs before the constructors of
 * the shared libraries (OpenBLAS, oneDNN, the C++ runtime: about a millisecond) and
 * before main. Only the loader's own mapping of those libraries comes earlier; a signal
 * there still finds the default action, as in any program. main installs them itself
 * where .preinit_array did not run (not glibc). */
static volatile sig_atomic_t g_installed;
static void install_handlers(int argc, char **argv, char **envp) {
    (void)argc, (void)argv, (void)envp;
    if (g_installed) return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    g_installed = 1;
}
__attribute__((section(".preinit_array"), used)) static void (*const dm_preinit)(int, char **,
                                                                                 char **) =
    install_handlers;

static const char *USAGE =
    "usage: dormouse COMMAND [options]\n"
    "\n"
    "Train and study gated delta-rule (KDA / GDN) language models of bytes or tokens.\n"
    "\n"
    "commands:\n"
    "  prepare  stream a corpus of any size into a data directory that training maps\n"
    "           (tokens of a tokenizer trained on it by default, or its bytes)\n"
    "  train    train a model (default: the d2 model on the bundled KJV corpus)\n"
    "  eval     bits per byte of a checkpoint on a corpus window\n"
    "  sample   generate text from a checkpoint\n"
    "  ab       seeded A/B sweep of config variants against a control, with verdicts\n"
    "  bench    time forward, backward and the training step against a baseline config\n"
    "  plot     draw the train loss and validation curves of runs or of an A/B sweep\n"
    "  metrics  the metrics of runs as a table or CSV\n"
    "  plan     the memory and the time of a training step of a config, without training\n"
    "\n"
    "`dormouse --version` says the version, the commit, what the build holds and what\n"
    "this CPU offers.\n"
    "`dormouse COMMAND --help` describes each; -v (--verbose) with any command prints the\n"
    "tables and rows it otherwise keeps in its files. Exit codes: 0 success, 1 runtime failure,\n"
    "2 bad usage or bad input, 130 interrupted by SIGINT (Ctrl-C), 143 by SIGTERM (training\n"
    "saves a checkpoint first).\n"
    "train, eval and bench also run data-parallel under MPI: mpirun -np N dormouse train ...\n";

static int run(int argc, char **argv, const dm_job_io *io, dm_comm *comm) {
    const char *cmd = argv[1];
    if (!strcmp(cmd, "train")) return dm_cmd_train(argc - 1, argv + 1, io, comm);
    if (!strcmp(cmd, "eval")) return dm_cmd_eval(argc - 1, argv + 1, io, comm);
    if (!strcmp(cmd, "bench")) return dm_cmd_bench(argc - 1, argv + 1, io, comm);
    static const char *const solo[] = {"sample", "ab", "plot", "metrics", "plan", "prepare",
                                       NULL};
    for (int i = 0; solo[i]; i++)
        if (!strcmp(cmd, solo[i]) && dm_comm_size(comm) > 1) {
            if (dm_comm_rank(comm) == 0)
                fprintf(stderr, "error: `dormouse %s` runs in one process; run it without "
                        "mpirun (train, eval and bench run under mpirun)\n", cmd);
            return EXIT_USAGE;
        }
    if (!strcmp(cmd, "sample")) return dm_cmd_sample(argc - 1, argv + 1, io);
    if (!strcmp(cmd, "ab")) return dm_cmd_ab(argc - 1, argv + 1, io);
    if (!strcmp(cmd, "plot")) return dm_cmd_plot(argc - 1, argv + 1, io);
    if (!strcmp(cmd, "metrics")) return dm_cmd_metrics(argc - 1, argv + 1, io);
    if (!strcmp(cmd, "plan")) return dm_cmd_plan(argc - 1, argv + 1, io);
    if (!strcmp(cmd, "prepare")) return dm_cmd_prepare(argc - 1, argv + 1, io);
    static const char *const all[] = {"train", "eval", "sample", "ab", "bench", "plot",
                                      "metrics", "plan", "prepare", "help", "version"};
    char pc[64];
    const char *near = dm_nearest(cmd, all, (int)(sizeof all / sizeof all[0]));
    dm_printable(cmd, pc, sizeof pc);
    if (near)
        fprintf(stderr, "error: unknown command '%s': did you mean `dormouse %s`? (try "
                "`dormouse --help`)\n", pc, near);
    else fprintf(stderr, "error: unknown command '%s' (try `dormouse --help`)\n", pc);
    return EXIT_USAGE;
}

int main(int argc, char **argv) {
    /* under mpirun: MPI first (it may take its own arguments out of argv) */
    dm_comm *comm = NULL;
    char err[512];
    if (dm_comm_start(&argc, &argv, &comm, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        return EXIT_USAGE;
    }
    /* ours again, in case MPI's start put its own in place (unless a signal came already:
     * then the next one must end the process) */
    if (!g_stop) {
        g_installed = 0;
        install_handlers(argc, argv, NULL);
    }
    dm_printer *pr = dm_cli_printer();
    /* rank 0 prints; the others keep stderr for what only they can tell (their comm
     * failing), and their status is rank 0's (the job's ranks agree on it) */
    if (dm_comm_rank(comm) != 0) {
        pr->quiet = 1;
        (void)!freopen("/dev/null", "w", stdout);
    }
    /* mpirun hands a rank a pseudo-terminal even when its own output goes to a file:
     * under MPI, progress is one line per logged step, as in a log */
    pr->tty = !pr->quiet && !dm_comm_is_mpi(comm) && isatty(fileno(stdout));
    const dm_job_io io = {dm_cli_progress, pr, &g_stop, argv[0]};

    int rc;
    if (argc >= 2 && (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version"))) {
        rc = pr->quiet ? EXIT_OK : dm_cmd_version();
    } else if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        if (!pr->quiet) fputs(USAGE, argc < 2 ? stderr : stdout);
        rc = argc < 2 ? EXIT_USAGE : EXIT_OK;
    } else {
        rc = run(argc, argv, &io, comm);
    }
    /* a rank's own exchange failing: rank 0's status says it; the others say it here */
    if (pr->quiet && dm_comm_error(comm)[0]) fprintf(stderr, "error: %s\n", dm_comm_error(comm));
    dm_comm_end(comm, rc);
    return rc;
}
