/*
 * source/io.c - opening files, the pread backend, and backend selection.
 *
 * DESIGN: opening and sizing a file (open + fstat) is done synchronously by
 * whichever thread reads it: on a warm cache it costs microseconds and it
 * lets every buffer be allocated at its exact size before any read starts.
 * The reads themselves go to io_uring in one submission per batch, or to
 * pread on the calling thread. A request's progress lives in r->len, so both
 * backends retry a short read from where it stopped.
 *
 * Non-regular files are opened with O_NONBLOCK: a FIFO named x.jpg would
 * otherwise block open() until a writer came, hanging a worker forever. It
 * is refused after fstat, and the flag is cleared for everything else, since
 * io_uring would report -EAGAIN for a page-cache miss on an O_NONBLOCK file
 * instead of waiting for the disk.
 *
 * Test builds inject faults (source/faults.h) at each read attempt; each
 * attempt draws from a counter-based hash of (seed, counter), so draws need
 * no shared mutable state beyond the counters themselves.
 */
#define _GNU_SOURCE
#include "source/io.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "source/faults.h"
#include "source/io_uring.h"

#define RING_ENTRIES 256

struct rl_io {
    rl_io_backend backend;
    uint64_t max_file_bytes;
    rl__uring *uring;   /* NULL for pread */
    uint64_t fault_ctr; /* this context's fault stream (pread batches) */
    int max_open;       /* files a batch may hold open at once (io_uring) */
};

/* A quarter of the open-file limit (the rest is the process's), at least 8
 * and at most a ring's worth. */
static int max_open_files(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) {
        return RING_ENTRIES;
    }
    rlim_t q = rl.rlim_cur / 4;
    return q < 8 ? 8 : q > RING_ENTRIES ? RING_ENTRIES : (int)q;
}

/* Fault stream of rl_io_read_one(), shared by every thread; the top bit
 * keeps it apart from the per-context streams. */
static atomic_uint_fast64_t read_one_ctr = (uint64_t)1 << 63;

/* ---- the process-wide probe ---- */

static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static bool probe_ok;
static char probe_why[RL_MSG_MAX];

static void probe_run(void)
{
    int err = 0;
    rl__uring *u = rl__uring_create(4, &err);
    if (u != NULL) {
        probe_ok = true;
        rl__uring_destroy(u);
        return;
    }
    probe_ok = false;
    snprintf(probe_why, sizeof(probe_why), "io_uring unavailable: %s%s",
             strerror(-err),
             err == -EPERM || err == -EACCES
                 ? " (blocked by seccomp or kernel.io_uring_disabled)"
             : err == -ENOSYS ? " (kernel or build without io_uring)"
                              : "");
}

bool rl_io_uring_probe(char *why)
{
    pthread_once(&probe_once, probe_run);
    if (why != NULL) {
        snprintf(why, RL_MSG_MAX, "%s", probe_ok ? "" : probe_why);
    }
    return probe_ok;
}

/* ---- requests ---- */

/*
 * Opens r and sizes its buffer. Returns 0 with r->fd open and r->buf
 * allocated (r->want bytes, not yet read), or a status with the request
 * already finished.
 */
static int open_request(rl_read *r, uint64_t max_file_bytes)
{
    r->fd = -1;
    r->buf = NULL;
    r->data = NULL;
    r->len = 0;
    r->want = 0;
    r->skip = 0;
    r->need = 0;
    r->start = r->offset;
    r->direct_refused = false;
    int fd = open(r->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        return -errno;
    }
    r->fd = fd;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        return -errno;
    }
    if (S_ISDIR(st.st_mode)) {
        return -EISDIR;
    }
    if (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode)) {
        return -EINVAL; /* a stream has no size and cannot be pread */
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        return -errno;
    }
    if (r->direct && S_ISREG(st.st_mode) &&
        fcntl(fd, F_SETFL, (fl & ~O_NONBLOCK) | O_DIRECT) != 0) {
        r->direct = false; /* the file system refuses it: read buffered */
        r->direct_refused = true;
    }
    uint64_t size;
    if (r->length >= 0) {
        size = (uint64_t)r->length;
        if (S_ISREG(st.st_mode) && r->offset + size > (uint64_t)st.st_size) {
            return -EIO; /* the byte range runs past the end of the file */
        }
    } else {
        if (!S_ISREG(st.st_mode)) {
            return -EINVAL;
        }
        size = (uint64_t)st.st_size > r->offset
                   ? (uint64_t)st.st_size - r->offset
                   : 0;
    }
    if (size > max_file_bytes) {
        return RL_ETOOBIG;
    }
    r->need = (size_t)size;
    r->want = (size_t)size;
    if (r->direct && size > 0) {
        uint64_t a = RL_DIRECT_ALIGN;
        r->start = r->offset / a * a;
        r->skip = (size_t)(r->offset - r->start);
        r->want = (size_t)((r->offset + size + a - 1) / a * a - r->start);
        r->buf = aligned_alloc(RL_DIRECT_ALIGN, r->want);
        return r->buf != NULL ? 0 : -ENOMEM;
    }
    if (size > 0) {
        r->buf = malloc(r->want);
        if (r->buf == NULL) {
            return -ENOMEM;
        }
    }
    return 0;
}

/* One pread attempt, or the fault injected in its place: returns what
 * pread would, with errno set on -1. */
static ssize_t pread_attempt(rl_read *r, atomic_uint_fast64_t *shared,
                             uint64_t *own)
{
    size_t ask = r->want - r->len;
    if (rl__io_faults_on()) {
        uint64_t c = own != NULL ? (*own)++ : atomic_fetch_add(shared, 1);
        switch (rl__io_fault_draw(c, ask, &ask)) {
        case RL__FAULT_EIO:
            errno = EIO;
            return -1;
        case RL__FAULT_EINTR:
            errno = EINTR;
            return -1;
        case RL__FAULT_EAGAIN:
            errno = EAGAIN;
            return -1;
        default:
            break; /* none, or ask was shortened */
        }
    }
    rl__read_align(r, &ask);
    return pread(r->fd, r->buf + r->len, ask, (off_t)(r->start + r->len));
}

/* rl_io_read_one() drawing faults from *own when not NULL (a context's
 * stream), else from the shared atomic stream. */
static void read_one(rl_read *r, uint64_t max_file_bytes, uint64_t *own)
{
    int rc = open_request(r, max_file_bytes);
    if (rc != 0) {
        rl__read_finish(r, rc);
        return;
    }
    while (r->len < r->want) {
        ssize_t got = pread_attempt(r, &read_one_ctr, own);
        if (got < 0) {
            if (errno == EINTR || errno == EAGAIN) {
                continue;
            }
            rl__read_finish(r, -errno);
            return;
        }
        if (got == 0) {
            /* The file shrank after fstat: keep what there is when the
             * whole file was asked for, fail an explicit byte range. */
            rl__read_finish(r, r->length < 0 || rl__read_eof_ok(r) ? 0 : -EIO);
            return;
        }
        r->len += (size_t)got;
        if (rl__read_direct_eof(r)) {
            break; /* O_DIRECT reads end short only at the end of file */
        }
    }
    rl__read_finish(
        r, r->len >= r->want || rl__read_eof_ok(r) || r->length < 0 ? 0 : -EIO);
}

void rl_io_read_one(rl_read *r, uint64_t max_file_bytes)
{
    read_one(r, max_file_bytes, NULL);
}

/* ---- contexts ---- */

rl_io *rl_io_create(rl_io_backend want, uint64_t max_file_bytes, char *why)
{
    rl_io *io = calloc(1, sizeof(*io));
    if (io == NULL) {
        return NULL;
    }
    io->max_file_bytes = max_file_bytes;
    io->backend = RL_IO_PREAD;
    io->max_open = max_open_files();
    (void)rl__io_faults_on(); /* read the variable here, not in a worker */
    if (why != NULL) {
        why[0] = '\0';
    }
    const char *env = getenv("RINGLOADER_IO");
    if (want == RL_IO_AUTO && env != NULL && strcmp(env, "pread") == 0) {
        want = RL_IO_PREAD;
        if (why != NULL) {
            snprintf(why, RL_MSG_MAX, "RINGLOADER_IO=pread");
        }
    }
    if (want == RL_IO_PREAD) {
        return io;
    }
    if (!rl_io_uring_probe(why)) {
        return io;
    }
    int err = 0;
    io->uring = rl__uring_create(RING_ENTRIES, &err);
    if (io->uring == NULL) {
        if (why != NULL) {
            snprintf(why, RL_MSG_MAX, "io_uring ring creation failed: %s",
                     strerror(-err));
        }
        return io;
    }
    io->backend = RL_IO_URING;
    return io;
}

rl_io_backend rl_io_backend_of(const rl_io *io)
{
    return io->backend;
}

void rl_io_read_batch(rl_io *io, rl_read **reqs, int n, rl_read_done_fn done,
                      void *arg)
{
    if (io->backend == RL_IO_URING && rl__uring_broken(io->uring)) {
        io->backend = RL_IO_PREAD;
    }
    if (io->backend != RL_IO_URING) {
        for (int i = 0; i < n; i++) {
            read_one(reqs[i], io->max_file_bytes, &io->fault_ctr);
            done(reqs[i], arg);
        }
        return;
    }
    /* Open a ring's worth of files (fewer under a low ulimit -n), then
     * submit their reads together: a batch larger than the open-file limit
     * still reads, as it does with pread. */
    int chunk = n < io->max_open ? n : io->max_open;
    rl_read **ready = malloc((size_t)(chunk > 0 ? chunk : 1) * sizeof(*ready));
    if (ready == NULL) {
        for (int i = 0; i < n; i++) {
            reqs[i]->fd = -1;
            reqs[i]->buf = NULL;
            rl__read_finish(reqs[i], -ENOMEM);
            done(reqs[i], arg);
        }
        return;
    }
    for (int start = 0; start < n; start += chunk) {
        int end = n - start < chunk ? n : start + chunk;
        int nready = 0;
        for (int i = start; i < end; i++) {
            rl_read *r = reqs[i];
            int rc = open_request(r, io->max_file_bytes);
            if (rc != 0) {
                rl__read_finish(r, rc);
                done(r, arg);
            } else if (r->want == 0) {
                rl__read_finish(r, 0);
                done(r, arg);
            } else {
                ready[nready++] = r;
            }
        }
        rl__uring_read(io->uring, ready, nready, done, arg);
    }
    free(ready);
}

void rl_io_destroy(rl_io *io)
{
    if (io == NULL) {
        return;
    }
    rl__uring_destroy(io->uring);
    free(io);
}
