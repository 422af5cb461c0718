/*
 * source/read.c - a read request's bookkeeping (source/read.h), the part
 * the pread and io_uring backends share: how an O_DIRECT read is aligned,
 * when the end of a file is the end of what was asked for, and how a
 * request is finished.
 */
#include "source/read.h"

#include <stdlib.h>
#include <unistd.h>

void rl__read_finish(rl_read *r, int status)
{
    if (r->fd >= 0) {
        close(r->fd);
        r->fd = -1;
    }
    r->status = status;
    if (status != 0) {
        free(r->buf);
        r->buf = NULL;
        r->data = NULL;
        r->len = 0;
        return;
    }
    /* What was read from `start` on: keep the bytes asked for. */
    size_t got = r->len > r->skip ? r->len - r->skip : 0;
    r->data = r->buf != NULL ? r->buf + r->skip : NULL;
    r->len = got < r->need ? got : r->need;
}

void rl__read_align(rl_read *r, size_t *ask)
{
    if (!r->direct) {
        return;
    }
    size_t left = r->want - r->len;
    size_t a = *ask - *ask % RL_DIRECT_ALIGN;
    *ask = a == 0 ? (left < RL_DIRECT_ALIGN ? left : RL_DIRECT_ALIGN)
                  : (a < left ? a : left);
}

bool rl__read_direct_eof(const rl_read *r)
{
    return r->direct && r->len % RL_DIRECT_ALIGN != 0;
}

bool rl__read_eof_ok(const rl_read *r)
{
    /* O_DIRECT reads run to an aligned end, past the end of the file. */
    return r->len >= r->skip + r->need;
}
