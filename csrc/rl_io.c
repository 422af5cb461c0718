/*
 * rl_io.c - opening files, the pread backend, and backend selection.
 *
 * DESIGN: opening and sizing a file (open + fstat) is done synchronously by
 * whichever thread reads it: on a warm cache it costs microseconds and it
 * lets every buffer be allocated at its exact size before any read starts.
 * The reads themselves go to io_uring in one submission per batch, or to
 * pread on the calling thread. A request's progress lives in r->len, so both
 * backends retry a short read from where it stopped.
 */
#define _GNU_SOURCE
#include "rl_io.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rl_io_uring.h"

#define RING_ENTRIES 256

struct rl_io {
    rl_io_backend backend;
    uint64_t max_file_bytes;
    rl__uring *uring; /* NULL for pread */
};

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

void rl__io_finish(rl_read *r, int status)
{
    if (r->fd >= 0) {
        close(r->fd);
        r->fd = -1;
    }
    r->status = status;
    if (status != 0) {
        free(r->buf);
        r->buf = NULL;
        r->len = 0;
    }
}

/*
 * Opens r and sizes its buffer. Returns 0 with r->fd open and r->buf
 * allocated (r->want bytes, not yet read), or a status with the request
 * already finished.
 */
static int open_request(rl_read *r, uint64_t max_file_bytes)
{
    r->fd = -1;
    r->buf = NULL;
    r->len = 0;
    r->want = 0;
    int fd = open(r->path, O_RDONLY | O_CLOEXEC);
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
    uint64_t size;
    if (r->length >= 0) {
        size = (uint64_t)r->length;
        if (S_ISREG(st.st_mode) &&
            r->offset + size > (uint64_t)st.st_size) {
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
    r->want = (size_t)size;
    if (size > 0) {
        r->buf = malloc(r->want);
        if (r->buf == NULL) {
            return -ENOMEM;
        }
    }
    return 0;
}

void rl_io_read_one(rl_read *r, uint64_t max_file_bytes)
{
    int rc = open_request(r, max_file_bytes);
    if (rc != 0) {
        rl__io_finish(r, rc);
        return;
    }
    while (r->len < r->want) {
        ssize_t got = pread(r->fd, r->buf + r->len, r->want - r->len,
                            (off_t)(r->offset + r->len));
        if (got < 0) {
            if (errno == EINTR || errno == EAGAIN) {
                continue;
            }
            rl__io_finish(r, -errno);
            return;
        }
        if (got == 0) {
            /* The file shrank after fstat: keep what there is when the
             * whole file was asked for, fail an explicit byte range. */
            rl__io_finish(r, r->length < 0 ? 0 : -EIO);
            return;
        }
        r->len += (size_t)got;
    }
    rl__io_finish(r, 0);
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
            rl_io_read_one(reqs[i], io->max_file_bytes);
            done(reqs[i], arg);
        }
        return;
    }
    /* Open everything first, so the ring sees the whole batch at once. */
    rl_read **ready = malloc((size_t)(n > 0 ? n : 1) * sizeof(*ready));
    if (ready == NULL) {
        for (int i = 0; i < n; i++) {
            reqs[i]->fd = -1;
            reqs[i]->buf = NULL;
            rl__io_finish(reqs[i], -ENOMEM);
            done(reqs[i], arg);
        }
        return;
    }
    int nready = 0;
    for (int i = 0; i < n; i++) {
        rl_read *r = reqs[i];
        int rc = open_request(r, io->max_file_bytes);
        if (rc != 0) {
            rl__io_finish(r, rc);
            done(r, arg);
        } else if (r->want == 0) {
            rl__io_finish(r, 0);
            done(r, arg);
        } else {
            ready[nready++] = r;
        }
    }
    rl__uring_read(io->uring, ready, nready, done, arg);
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
