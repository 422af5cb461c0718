/*
 * source/shard_records.c - sample lookups in a shard set's record files
 * (shard_records.h).
 *
 * The open files are a small array of slots behind one mutex. A lookup
 * takes a reference on its slot under the mutex and reads with pread
 * outside it, so that one slow read (a cold page, a network file system)
 * never holds up the other threads' lookups. A referenced slot is never
 * evicted (its fd stays valid for the reader); when every slot is in use,
 * the lookup opens the file for itself and closes it after. Refcounting
 * rather than dup(): a dup per lookup would cost two more syscalls on the
 * hot path and a descriptor per reader.
 */
#define _GNU_SOURCE
#include "source/shard_records.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct slot {
    int64_t shard; /* -1: free */
    int fd;
    uint64_t data; /* where the records start (the header's bytes) */
    int refs;      /* lookups reading through fd now */
    uint64_t used; /* the table's clock at the last lookup (LRU) */
} slot;

struct rl_shard_records {
    const int64_t *starts; /* borrowed, nshards + 1 */
    char **paths;          /* copied */
    size_t nshards;
    pthread_mutex_t mu;
    slot *slots;
    size_t nslots;
    uint64_t clock;
    const int64_t *sizes, *mtimes; /* borrowed; NULL: not checked */
    uint8_t *tag;                  /* copied */
    size_t tag_len;
};

static uint64_t le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

rl_shard_records *rl_shard_records_new(const int64_t *starts,
                                       const char *const *paths, size_t nshards,
                                       size_t max_open)
{
    if (!starts || (nshards && !paths) || starts[0] != 0) {
        errno = EINVAL;
        return NULL;
    }
    for (size_t s = 0; s < nshards; s++) {
        if (!paths[s] || starts[s + 1] < starts[s]) {
            errno = EINVAL;
            return NULL;
        }
    }
    rl_shard_records *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->starts = starts;
    t->nshards = nshards;
    t->nslots = max_open ? max_open : RL_SHARD_RECORDS_OPEN;
    t->paths = calloc(nshards ? nshards : 1, sizeof *t->paths);
    t->slots = calloc(t->nslots, sizeof *t->slots);
    if (!t->paths || !t->slots || pthread_mutex_init(&t->mu, NULL) != 0)
        goto fail;
    for (size_t i = 0; i < t->nslots; i++) {
        t->slots[i].shard = -1;
        t->slots[i].fd = -1;
    }
    for (size_t s = 0; s < nshards; s++) {
        t->paths[s] = strdup(paths[s]);
        if (!t->paths[s]) {
            pthread_mutex_destroy(&t->mu);
            goto fail;
        }
    }
    return t;
fail:
    if (t->paths)
        for (size_t s = 0; s < nshards; s++)
            free(t->paths[s]);
    free(t->paths);
    free(t->slots);
    free(t);
    errno = ENOMEM;
    return NULL;
}

int rl_shard_records_expect(rl_shard_records *t, const int64_t *sizes,
                            const int64_t *mtimes, const uint8_t *tag,
                            size_t tag_len)
{
    uint8_t *copy = malloc(tag_len ? tag_len : 1);
    if (copy == NULL)
        return -ENOMEM;
    if (tag_len)
        memcpy(copy, tag, tag_len);
    free(t->tag);
    t->tag = copy;
    t->tag_len = tag_len;
    t->sizes = sizes;
    t->mtimes = mtimes;
    return 0;
}

/* Why record file f (header h) is not shard s's as rl_shard_records_expect
 * described it, or NULL. */
static const char *not_expected(const rl_shard_records *t, size_t s, int f,
                                const unsigned char *h)
{
    if (t->sizes == NULL)
        return NULL;
    if ((int64_t)le64(h + 16) != t->sizes[s] ||
        (int64_t)le64(h + 24) != t->mtimes[s])
        return "made for another shard, or another state of this one (its "
               "size or mtime differs)";
    if (le32(h + 44) != t->tag_len)
        return "made for another selection of members";
    uint8_t buf[256];
    for (size_t done = 0; done < t->tag_len;) {
        size_t want =
            t->tag_len - done < sizeof buf ? t->tag_len - done : sizeof buf;
        ssize_t got =
            pread(f, buf, want, (off_t)(RL_SHARD_RECORDS_HEAD + done));
        if (got != (ssize_t)want || memcmp(buf, t->tag + done, want) != 0)
            return "made for another selection of members";
        done += want;
    }
    return NULL;
}

/* Opens shard s's record file and checks its header: *fd and *data (where
 * the records start) on success; else -errno and msg. */
static int open_checked(rl_shard_records *t, size_t s, int *fd, uint64_t *data,
                        char *msg, size_t msg_len)
{
    const char *path = t->paths[s];
    uint64_t want = (uint64_t)(t->starts[s + 1] - t->starts[s]);
    int f = open(path, O_RDONLY | O_CLOEXEC);
    if (f < 0) {
        int e = errno;
        snprintf(msg, msg_len, "%s: cannot open the record file (%s)", path,
                 strerror(e));
        return -e;
    }
    unsigned char h[RL_SHARD_RECORDS_HEAD];
    struct stat st;
    ssize_t got = pread(f, h, sizeof h, 0);
    const char *why = NULL;
    if (got < 0 || fstat(f, &st) != 0) {
        int e = errno;
        close(f);
        snprintf(msg, msg_len, "%s: cannot read the record file (%s)", path,
                 strerror(e));
        return -e;
    }
    uint64_t count = 0, head = 0;
    if (got < (ssize_t)sizeof h || memcmp(h, "RLSAMPLE", 8) != 0) {
        why = "not a record file";
    } else if (le32(h + 8) != RL_SHARD_RECORDS_VERSION) {
        why = "a record file of another format version";
    } else {
        count = le64(h + 32);
        head = le32(h + 40);
        if (count != want)
            why = "a record count other than the shard's";
        else if (head % 8 || head < RL_SHARD_RECORDS_HEAD ||
                 (uint64_t)st.st_size !=
                     head + count * (uint64_t)RL_SHARD_RECORD_BYTES)
            why = "truncated or corrupt (its size is not its header's)";
        else
            why = not_expected(t, s, f, h);
    }
    if (why) {
        close(f);
        snprintf(msg, msg_len,
                 "%s: %s (%llu records for %llu samples); remove it, and "
                 "opening the shard set again rebuilds it",
                 path, why, (unsigned long long)count,
                 (unsigned long long)want);
        return -EBADMSG;
    }
    *fd = f;
    *data = head;
    return 0;
}

/* The slot of shard s with a reference taken, or NULL; under mu. */
static slot *find(rl_shard_records *t, int64_t s)
{
    for (size_t i = 0; i < t->nslots; i++) {
        if (t->slots[i].shard == s) {
            t->slots[i].refs++;
            t->slots[i].used = ++t->clock;
            return &t->slots[i];
        }
    }
    return NULL;
}

/* Puts a freshly opened fd in the least recently used free slot (closing
 * the file it held), with a reference taken; NULL when every slot is in
 * use (the caller then reads through fd and closes it). Under mu. */
static slot *insert(rl_shard_records *t, int64_t s, int fd, uint64_t data)
{
    slot *victim = NULL;
    for (size_t i = 0; i < t->nslots; i++) {
        slot *c = &t->slots[i];
        if (c->refs == 0 && (!victim || c->used < victim->used))
            victim = c;
    }
    if (!victim)
        return NULL;
    if (victim->fd >= 0)
        close(victim->fd);
    victim->shard = s;
    victim->fd = fd;
    victim->data = data;
    victim->refs = 1;
    victim->used = ++t->clock;
    return victim;
}

int rl_shard_records_get(rl_shard_records *t, int64_t id, uint64_t *offset,
                         uint64_t *length, int64_t *label, char *msg,
                         size_t msg_len)
{
    int64_t total = t->starts[t->nshards];
    if (id < 0 || id >= total) {
        snprintf(msg, msg_len, "sample %lld out of range for %lld samples",
                 (long long)id, (long long)total);
        return -ERANGE;
    }
    /* The last shard whose start is <= id (empty shards are skipped). */
    size_t lo = 0, hi = t->nshards;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->starts[mid] <= id)
            lo = mid;
        else
            hi = mid;
    }
    size_t s = lo;
    pthread_mutex_lock(&t->mu);
    slot *sl = find(t, (int64_t)s);
    pthread_mutex_unlock(&t->mu);
    int fd = -1;
    uint64_t data = 0;
    if (sl) {
        fd = sl->fd; /* stable while our reference holds the slot */
        data = sl->data;
    } else {
        int rc = open_checked(t, s, &fd, &data, msg, msg_len);
        if (rc < 0)
            return rc;
        pthread_mutex_lock(&t->mu);
        sl = find(t, (int64_t)s); /* another thread opened it meanwhile? */
        if (sl) {
            close(fd);
            fd = sl->fd;
            data = sl->data;
        } else {
            sl = insert(t, (int64_t)s, fd, data);
        }
        pthread_mutex_unlock(&t->mu);
    }
    unsigned char r[RL_SHARD_RECORD_BYTES];
    off_t at = (off_t)(data + (uint64_t)(id - t->starts[s]) *
                                  (uint64_t)RL_SHARD_RECORD_BYTES);
    ssize_t got = pread(fd, r, sizeof r, at);
    int e = got < 0 ? errno : 0;
    if (sl) {
        pthread_mutex_lock(&t->mu);
        sl->refs--;
        pthread_mutex_unlock(&t->mu);
    } else {
        close(fd);
    }
    if (got != (ssize_t)sizeof r) {
        if (e) {
            snprintf(msg, msg_len, "%s: cannot read record %lld (%s)",
                     t->paths[s], (long long)(id - t->starts[s]), strerror(e));
            return -e;
        }
        snprintf(msg, msg_len,
                 "%s: record %lld is cut short (the record file was "
                 "truncated)",
                 t->paths[s], (long long)(id - t->starts[s]));
        return -EBADMSG;
    }
    *offset = le64(r);
    *length = le64(r + 8);
    if (label)
        *label = (int64_t)le64(r + 16);
    return 0;
}

size_t rl_shard_records_open_files(rl_shard_records *t)
{
    size_t n = 0;
    pthread_mutex_lock(&t->mu);
    for (size_t i = 0; i < t->nslots; i++)
        n += t->slots[i].fd >= 0;
    pthread_mutex_unlock(&t->mu);
    return n;
}

void rl_shard_records_destroy(rl_shard_records *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->nslots; i++)
        if (t->slots[i].fd >= 0)
            close(t->slots[i].fd);
    for (size_t s = 0; s < t->nshards; s++)
        free(t->paths[s]);
    free(t->paths);
    free(t->slots);
    free(t->tag);
    pthread_mutex_destroy(&t->mu);
    free(t);
}
