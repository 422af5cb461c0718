/*
 * source/read.h - one read request (rl_read) and its bookkeeping, shared by
 * the two backends of source/io.c: pread there, io_uring in io_uring.c.
 * Both use these helpers, and neither backend calls the other: io.c
 * chooses a backend and opens files; io_uring.c only submits and reaps.
 */
#ifndef RL_SOURCE_READ_H
#define RL_SOURCE_READ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rl.h"

/*
 * One read. The caller fills path, offset, length (and direct); the
 * backend fills buf, data, len and status. On status 0, data holds len
 * bytes inside buf, a malloc'd buffer (possibly NULL when len is 0) that the
 * caller frees. On failure buf is NULL and status is -errno, or RL_ETOOBIG
 * when the file exceeds max_file_bytes.
 *
 * O_DIRECT (direct): the page cache is bypassed, for data sets larger than
 * RAM. The file position, length and buffer are aligned to 4096 bytes (the
 * bytes around the range are read and skipped); a file system that refuses
 * O_DIRECT (tmpfs, some FUSE) is read buffered instead, with direct_refused
 * set so the caller can say so once.
 */
typedef struct rl_read {
    const char *path; /* borrowed; must outlive the read */
    uint64_t offset;  /* first byte to read */
    int64_t length;   /* bytes to read, or -1 for "to the end of the file" */
    bool direct;      /* read with O_DIRECT (cleared if the file system
                       * refuses it; direct_refused then says so) */
    uint8_t *buf;     /* the allocation, to free */
    uint8_t *data;    /* the bytes asked for: buf, or inside it (O_DIRECT) */
    size_t len;       /* bytes at data */
    int status;
    bool direct_refused;
    /* private to the backend */
    int fd;
    size_t want; /* bytes to read into buf, from file position start */
    uint64_t start;
    size_t skip; /* data - buf */
    size_t need; /* bytes asked for */
} rl_read;

typedef void (*rl_read_done_fn)(rl_read *r, void *arg);

/*
 * Ends a request with status: closes its fd; on success keeps the bytes
 * asked for (data, len inside buf); on failure frees buf and clears data
 * and len.
 */
void rl__read_finish(rl_read *r, int status);

/* At end of file: true when every byte asked for was read (O_DIRECT reads
 * aim past the end of the file). */
bool rl__read_eof_ok(const rl_read *r);

/*
 * Before each read attempt: O_DIRECT needs the file position, the buffer
 * address and the length aligned, so *ask is cut to whole blocks (reads
 * then only end short, mid-block, at the end of the file).
 */
void rl__read_align(rl_read *r, size_t *ask);

/* True when an O_DIRECT read ended mid-block: the end of the file. */
bool rl__read_direct_eof(const rl_read *r);

/* The block size O_DIRECT reads are aligned to. */
#define RL_DIRECT_ALIGN 4096

#endif /* RL_SOURCE_READ_H */
