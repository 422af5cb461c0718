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
 *
 * Both record versions are read through the same slots: a slot keeps
 * where its file's records start and how wide they are (the header's),
 * and rl_shard_records_get reads the 24 bytes every record begins with,
 * whatever its version.
 */
#define _GNU_SOURCE
#include "source/shard_records.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct slot {
    int64_t shard; /* -1: free */
    int fd;
    uint64_t data;  /* where the records start (the header's bytes) */
    uint32_t width; /* bytes of a record */
    int nfields;    /* version 2: field columns; version 1: -1 */
    int refs;       /* lookups reading through fd now */
    uint64_t used;  /* the table's clock at the last lookup (LRU) */
} slot;

struct rl_shard_records {
    const int64_t *starts; /* borrowed (or own_starts), nshards + 1 */
    int64_t *own_starts;   /* rl_shard_records_own_starts's copy, or NULL */
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

int rl_shard_records_own_starts(rl_shard_records *t)
{
    size_t bytes = sizeof(int64_t) * (t->nshards + 1);
    int64_t *copy = malloc(bytes);
    if (copy == NULL)
        return -ENOMEM;
    memcpy(copy, t->starts, bytes);
    free(t->own_starts);
    t->own_starts = copy;
    t->starts = copy;
    return 0;
}

/* Why record file f (header h, its tag at tag_at) is not shard s's as
 * rl_shard_records_expect described it, or NULL. */
static const char *not_expected(const rl_shard_records *t, size_t s, int f,
                                const unsigned char *h, uint64_t tag_at)
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
        ssize_t got = pread(f, buf, want, (off_t)(tag_at + done));
        if (got != (ssize_t)want || memcmp(buf, t->tag + done, want) != 0)
            return "made for another selection of members";
        done += want;
    }
    return NULL;
}

/* A record file's layout, from its header. */
typedef struct layout {
    uint64_t data;  /* where the records start */
    uint32_t width; /* bytes of a record */
    int nfields;    /* -1: version 1 */
} layout;

/* Why header h (got bytes of it read) is not of a version this reader
 * knows, or NULL with *lay and *tag_at (where its tag starts) set. */
static const char *version_of(const unsigned char *h, ssize_t got, layout *lay,
                              uint64_t *tag_at)
{
    if (got < RL_SHARD_RECORDS_HEAD || memcmp(h, "RLSAMPLE", 8) != 0)
        return "not a record file";
    uint32_t version = le32(h + 8);
    if (version == RL_SHARD_RECORDS_VERSION) {
        lay->width = RL_SHARD_RECORD_BYTES;
        lay->nfields = -1;
        *tag_at = RL_SHARD_RECORDS_HEAD;
        return NULL;
    }
    if (version != RL_SHARD_RECORDS_FIELDS_VERSION)
        return "a record file of another format version";
    if (got < RL_SHARD_RECORDS_FIELDS_HEAD)
        return "truncated or corrupt (its header is cut short)";
    uint32_t width = le32(h + 48), nfields = le32(h + 52);
    /* The width must be the one nfields makes: a file that says otherwise
     * would be read at the wrong places. */
    if (nfields > RL_SHARD_RECORDS_MAX_FIELDS ||
        width != RL_SHARD_FIELDS_RECORD_BYTES + 24 * nfields)
        return "a record file whose record width is not its field count's";
    lay->width = width;
    lay->nfields = (int)nfields;
    *tag_at = RL_SHARD_RECORDS_FIELDS_HEAD;
    return NULL;
}

/* Opens shard s's record file and checks its header: *fd and *lay on
 * success; else -errno and msg. */
static int open_checked(rl_shard_records *t, size_t s, int *fd, layout *lay,
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
    unsigned char h[RL_SHARD_RECORDS_FIELDS_HEAD];
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
    uint64_t count = 0, head = 0, tag_at = 0;
    why = version_of(h, got, lay, &tag_at);
    if (why == NULL) {
        count = le64(h + 32);
        head = le32(h + 40);
        if (count != want)
            why = "a record count other than the shard's";
        else if (head % 8 || head < tag_at + le32(h + 44) ||
                 (uint64_t)st.st_size != head + count * (uint64_t)lay->width)
            why = "truncated or corrupt (its size is not its header's)";
        else
            why = not_expected(t, s, f, h, tag_at);
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
    lay->data = head;
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
static slot *insert(rl_shard_records *t, int64_t s, int fd, const layout *lay)
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
    victim->data = lay->data;
    victim->width = lay->width;
    victim->nfields = lay->nfields;
    victim->refs = 1;
    victim->used = ++t->clock;
    return victim;
}

/* The shard of sample id, in [0, starts[nshards]): the last shard whose
 * start is <= id (empty shards are skipped). */
static size_t shard_of(const rl_shard_records *t, int64_t id)
{
    size_t lo = 0, hi = t->nshards;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->starts[mid] <= id)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

const char *rl_shard_records_path(const rl_shard_records *t, int64_t id)
{
    if (t == NULL || id < 0 || id >= t->starts[t->nshards])
        return NULL;
    return t->paths[shard_of(t, id)];
}

/* Reads `bytes` bytes (at most the record's width) of sample id's record
 * into r, with its file's layout in *lay. 0, or -errno with msg. */
static int read_record(rl_shard_records *t, int64_t id, unsigned char *r,
                       size_t bytes, layout *lay, char *msg, size_t msg_len)
{
    int64_t total = t->starts[t->nshards];
    if (id < 0 || id >= total) {
        snprintf(msg, msg_len, "sample %lld out of range for %lld samples",
                 (long long)id, (long long)total);
        return -ERANGE;
    }
    size_t s = shard_of(t, id);
    pthread_mutex_lock(&t->mu);
    slot *sl = find(t, (int64_t)s);
    pthread_mutex_unlock(&t->mu);
    int fd = -1;
    if (sl) {
        fd = sl->fd; /* stable while our reference holds the slot */
        *lay = (layout){sl->data, sl->width, sl->nfields};
    } else {
        int rc = open_checked(t, s, &fd, lay, msg, msg_len);
        if (rc < 0)
            return rc;
        pthread_mutex_lock(&t->mu);
        sl = find(t, (int64_t)s); /* another thread opened it meanwhile? */
        if (sl) {
            close(fd);
            fd = sl->fd;
            *lay = (layout){sl->data, sl->width, sl->nfields};
        } else {
            sl = insert(t, (int64_t)s, fd, lay);
        }
        pthread_mutex_unlock(&t->mu);
    }
    bool fields = bytes > RL_SHARD_RECORD_BYTES; /* asked for more */
    if (bytes > lay->width)
        bytes = lay->width;
    off_t at = (off_t)(lay->data + (uint64_t)(id - t->starts[s]) * lay->width);
    ssize_t got = pread(fd, r, bytes, at);
    int e = got < 0 ? errno : 0;
    if (sl) {
        pthread_mutex_lock(&t->mu);
        sl->refs--;
        pthread_mutex_unlock(&t->mu);
    } else {
        close(fd);
    }
    if (got != (ssize_t)bytes) {
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
    if (fields && lay->nfields < 0) {
        snprintf(msg, msg_len,
                 "%s: a record file without field columns (version 1) "
                 "where fields were asked for",
                 t->paths[s]);
        return -EBADMSG;
    }
    return 0;
}

int rl_shard_records_get(rl_shard_records *t, int64_t id, uint64_t *offset,
                         uint64_t *length, int64_t *label, char *msg,
                         size_t msg_len)
{
    unsigned char r[RL_SHARD_RECORD_BYTES];
    layout lay;
    int rc = read_record(t, id, r, sizeof r, &lay, msg, msg_len);
    if (rc != 0)
        return rc;
    *offset = le64(r);
    *length = le64(r + 8);
    if (label)
        *label = (int64_t)le64(r + 16);
    return 0;
}

int rl_shard_records_get_fields(rl_shard_records *t, int64_t id,
                                rl_shard_fields_record *out, char *msg,
                                size_t msg_len)
{
    unsigned char
        r[RL_SHARD_FIELDS_RECORD_BYTES + 24 * RL_SHARD_RECORDS_MAX_FIELDS];
    layout lay;
    int rc = read_record(t, id, r, sizeof r, &lay, msg, msg_len);
    if (rc != 0)
        return rc;
    out->offset = le64(r);
    out->length = le64(r + 8);
    out->label = (int64_t)le64(r + 16);
    out->image_at = (int64_t)le64(r + 24);
    out->image_len = (int64_t)le64(r + 32);
    out->nfields = lay.nfields;
    for (int k = 0; k < lay.nfields; k++) {
        const unsigned char *c = r + RL_SHARD_FIELDS_RECORD_BYTES + 24 * k;
        out->at[k] = (int64_t)le64(c);
        out->size[k] = (int64_t)le64(c + 8);
        out->ext[k] = (int64_t)le64(c + 16);
    }
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
    free(t->own_starts);
    pthread_mutex_destroy(&t->mu);
    free(t);
}
