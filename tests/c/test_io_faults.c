/* test_io_faults.c - injected I/O faults (RINGLOADER_IO_FAULTS): short
 * reads, EAGAIN and EINTR are retried by both backends with the same bytes
 * as a clean read; EIO fails exactly the requests it hits; a FIFO is refused
 * instead of blocking open(). The variable is read once per process, so
 * each configuration runs in a child forked before the first read. The
 * injection is compiled into test builds only (testing/faults.c behind
 * source/faults.h; this Makefile defines RL_TEST_HOOKS). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "source/faults.h"
#include "source/io.h"
#include "check.h"

#define NFILES 300
#define NTHREADS 4

static char dir[] = "/tmp/rl_test_io_faults_XXXXXX";
static char paths[NFILES][64];
static size_t sizes[NFILES];

static uint8_t byte_at(int file, size_t i)
{
    return (uint8_t)((i * 13u + (unsigned)file * 5u) ^ (i >> 9));
}

static void on_done(rl_read *r, void *arg)
{
    (void)r;
    (*(int *)arg)++;
}

/* Checks one finished read: right bytes, or -EIO when that is allowed.
 * Returns 1 for an EIO, else 0. */
static int check_read(int i, rl_read *r, bool eio_ok)
{
    if (r->status == -EIO && eio_ok) {
        CHECK(r->buf == NULL);
        return 1;
    }
    CHECK_EQ(r->status, 0);
    CHECK_EQ(r->len, sizes[i]);
    for (size_t k = 0; k < sizes[i]; k++) {
        if (r->buf[k] != byte_at(i, k)) {
            CHECK(!"wrong byte after retried faults");
        }
    }
    free(r->buf);
    return 0;
}

/* Every file through one context of backend `want`; returns the EIOs. */
static int read_batch(rl_io_backend want, bool eio_ok)
{
    static rl_read reads[NFILES];
    static rl_read *reqs[NFILES];
    char why[RL_MSG_MAX];
    rl_io *io = rl_io_create(want, 1 << 30, why);
    CHECK(io != NULL);
    memset(reads, 0, sizeof(reads));
    for (int i = 0; i < NFILES; i++) {
        reads[i].path = paths[i];
        reads[i].length = -1;
        reqs[i] = &reads[i];
    }
    int done = 0, eios = 0;
    rl_io_read_batch(io, reqs, NFILES, on_done, &done);
    CHECK_EQ(done, NFILES);
    for (int i = 0; i < NFILES; i++) {
        eios += check_read(i, &reads[i], eio_ok);
    }
    rl_io_destroy(io);
    return eios;
}

typedef struct {
    int first;
    bool eio_ok;
    int eios;
} worker_arg;

/* rl_io_read_one from several threads, as the pool's workers call it. */
static void *read_one_worker(void *p)
{
    worker_arg *a = p;
    for (int i = a->first; i < NFILES; i += NTHREADS) {
        rl_read r = {.path = paths[i], .length = -1};
        rl_io_read_one(&r, 1 << 30);
        a->eios += check_read(i, &r, a->eio_ok);
    }
    return NULL;
}

static int read_threads(bool eio_ok)
{
    pthread_t t[NTHREADS];
    worker_arg a[NTHREADS];
    for (int i = 0; i < NTHREADS; i++) {
        a[i] = (worker_arg){.first = i, .eio_ok = eio_ok};
        CHECK_EQ(pthread_create(&t[i], NULL, read_one_worker, &a[i]), 0);
    }
    int eios = 0;
    for (int i = 0; i < NTHREADS; i++) {
        pthread_join(t[i], NULL);
        eios += a[i].eios;
    }
    return eios;
}

/* Runs every backend under `faults` in a child; exit status 0 = pass.
 * valid: the setting is one the parser accepts (else it is ignored). */
static void run_child(const char *faults, bool valid, bool eio)
{
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid > 0) {
        int st;
        CHECK_EQ(waitpid(pid, &st, 0), pid);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "faults \"%s\": child failed\n", faults);
            exit(1);
        }
        return;
    }
    alarm(60); /* a retry loop that never ends is a failure, not a hang */
    if (faults != NULL) {
        setenv("RINGLOADER_IO_FAULTS", faults, 1);
    }
    /* The hooks are in this build, and take exactly the valid settings. */
    CHECK_EQ(rl__io_faults_on(), valid);
    int e_pread = read_batch(RL_IO_PREAD, eio);
    int e_threads = read_threads(eio);
    int e_uring = rl_io_uring_probe(NULL) ? read_batch(RL_IO_URING, eio) : -1;
    printf("  %-48s EIOs: pread %d, read_one %d, io_uring %d\n",
           faults ? faults : "(none)", e_pread, e_threads, e_uring);
    if (eio) {
        /* About 5% of ~1.5 attempts per file: some, not all, fail. */
        CHECK(e_pread > 0 && e_pread < NFILES / 4);
        CHECK(e_threads > 0 && e_threads < NFILES / 4);
        CHECK(e_uring != 0 && e_uring < NFILES / 4);
    }
    exit(0);
}

static void check_fifo(void)
{
    char fifo[128];
    snprintf(fifo, sizeof(fifo), "%s/x.jpg", dir);
    CHECK_EQ(mkfifo(fifo, 0600), 0);
    alarm(10); /* open() of a FIFO without O_NONBLOCK would block here */
    rl_read r = {.path = fifo, .length = -1};
    rl_io_read_one(&r, 1 << 30);
    CHECK_EQ(r.status, -EINVAL);
    if (rl_io_uring_probe(NULL)) {
        rl_io *io = rl_io_create(RL_IO_URING, 1 << 30, NULL);
        rl_read r2 = {.path = fifo, .length = -1};
        rl_read *one = &r2;
        int done = 0;
        rl_io_read_batch(io, &one, 1, on_done, &done);
        CHECK_EQ(done, 1);
        CHECK_EQ(r2.status, -EINVAL);
        rl_io_destroy(io);
    }
    alarm(0);
    unlink(fifo);
}

int main(void)
{
    CHECK(mkdtemp(dir) != NULL);
    for (int i = 0; i < NFILES; i++) {
        snprintf(paths[i], sizeof(paths[i]), "%s/f%03d", dir, i);
        sizes[i] = i == 3 ? 0 : (size_t)(1 + (i * 1931) % 90000);
        int fd = open(paths[i], O_CREAT | O_WRONLY | O_TRUNC, 0600);
        CHECK(fd >= 0);
        uint8_t *b = malloc(sizes[i] + 1);
        for (size_t k = 0; k < sizes[i]; k++) {
            b[k] = byte_at(i, k);
        }
        CHECK_EQ(write(fd, b, sizes[i]), (long long)sizes[i]);
        free(b);
        close(fd);
    }
    fflush(stdout);
    run_child(NULL, false, false);
    run_child("short=0.5,seed=1", true, false);
    run_child("eagain=0.3,eintr=0.3,seed=2", true, false);
    run_child("short=0.3,eagain=0.1,eintr=0.1,seed=3", true, false);
    run_child("short=0.3,eagain=0.1,eintr=0.1,eio=0.05,seed=4", true, true);
    /* Unparsable or impossible settings are ignored (a clean read). */
    run_child("short=2", false, false);
    run_child("short=0.5,eagain=0.5", false, false);
    run_child("bogus=1", false, false);
    check_fifo();
    for (int i = 0; i < NFILES; i++) {
        unlink(paths[i]);
    }
    rmdir(dir);
    PASS("test_io_faults");
}
