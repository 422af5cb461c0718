/*
 * source/shard_records.h - where sample i of a tar shard set is, read from
 * the shards' record files rather than held as per-sample arrays.
 *
 * A record file (written by python/ringloader/datasets/tarindex.py,
 * write_records) holds one fixed-width record per sample of one shard,
 * after a header; all fields little-endian:
 *
 *   0  magic "RLSAMPLE"       8  format version u32 (1 or 2)
 *   12 member-index version   16 shard size u64    24 shard mtime_ns i64
 *   32 record count u64       40 header bytes u32 (a multiple of 8)
 *   44 tag bytes u32
 *   version 1: 48 tag (the selection), zero padding; then count records
 *     of 24 bytes: image offset u64, image length u64, label i64
 *   version 2 (a selection with fields: members read beside the image):
 *     48 record bytes u32 (40 + 24 * nfields), 52 nfields u32 (at most
 *     RL_SHARD_RECORDS_MAX_FIELDS), 56 tag, zero padding; then count
 *     records: the sample's range offset u64, length u64 (from its first
 *     member asked for to the end of its last; the image's alone when it
 *     is refused), label i64, image_at i64 (where the image starts in the
 *     range; < 0: the sample is refused, -image_at - 1 the refusal's
 *     number), image_len i64, then for each field other than the image
 *     at i64 (where its member lies in the bytes beside the image: those
 *     before it, then those after it; -1 when refused), size i64, ext i64
 *     (which of the field's extensions it has).
 *
 * The first 24 bytes of a record are the same in both versions, so
 * rl_shard_records_get reads the range (and label) to fetch from either;
 * rl_shard_records_get_fields reads the rest of a version-2 record. The
 * tag names the selection (fields included), and a file whose tag is not
 * the one expected is refused, so a record file made for other fields is
 * never read as this selection's.
 *
 * A table is made from the first sample of each shard (starts, K + 1
 * values, the last the total; borrowed: it must outlive the table) and the
 * K record files' paths (copied). Shard s must hold starts[s + 1] -
 * starts[s] records: a file that says otherwise is refused.
 *
 * Lookups read one record with pread through a small cache of open files
 * (least recently used closed first), so that a set of 100,000 shards
 * needs neither 100,000 descriptors nor per-sample memory. Each file's
 * header is checked once, when it is opened. Lookups are thread-safe.
 */
#ifndef RL_SHARD_RECORDS_H
#define RL_SHARD_RECORDS_H

#include <stddef.h>
#include <stdint.h>

/* The record file formats this reader knows (tarindex.RECORDS_VERSION,
 * tarindex.FIELDS_RECORDS_VERSION). */
#define RL_SHARD_RECORDS_VERSION 1
#define RL_SHARD_RECORDS_FIELDS_VERSION 2
/* Bytes of one version-1 record, and of the fixed part of the header
 * (version 1; version 2's is RL_SHARD_RECORDS_FIELDS_HEAD). */
#define RL_SHARD_RECORD_BYTES 24
#define RL_SHARD_RECORDS_HEAD 48
#define RL_SHARD_RECORDS_FIELDS_HEAD 56
/* A version-2 record: its fixed bytes, and the fields it may carry. */
#define RL_SHARD_FIELDS_RECORD_BYTES 40
#define RL_SHARD_RECORDS_MAX_FIELDS 16
/* Open record files kept by default. */
#define RL_SHARD_RECORDS_OPEN 64

typedef struct rl_shard_records rl_shard_records;

/* A table over nshards record files (paths[s] for shard s) with
 * starts[0..nshards]: non-decreasing, starts[0] == 0. max_open: record
 * files kept open at once (0: RL_SHARD_RECORDS_OPEN). NULL on a bad
 * argument or no memory, with errno set (EINVAL, ENOMEM). Nothing is
 * opened yet. */
rl_shard_records *rl_shard_records_new(const int64_t *starts,
                                       const char *const *paths, size_t nshards,
                                       size_t max_open);

/* What every record file must state besides its count, checked when it
 * is opened: shard s's size sizes[s] and mtime mtimes[s] (ns; both
 * borrowed, nshards values each, outliving the table) and a tag that
 * starts with tag[0..tag_len) (copied). Without this, a record file copied
 * over from another shard of the same count would be read as this one's.
 * Call before the first lookup. 0, or -ENOMEM. */
int rl_shard_records_expect(rl_shard_records *t, const int64_t *sizes,
                            const int64_t *mtimes, const uint8_t *tag,
                            size_t tag_len);

/* Sample id's image offset and length (and label, when label is not
 * NULL). 0 on success; else -errno, and msg (msg_len bytes, may be 0)
 * says why, naming the record file: -ERANGE for an id outside
 * [0, starts[nshards]), the open's error for a file that cannot be
 * opened, -EBADMSG for one that is not a record file of this format or
 * does not hold the shard's record count (or was cut short since). */
int rl_shard_records_get(rl_shard_records *t, int64_t id, uint64_t *offset,
                         uint64_t *length, int64_t *label, char *msg,
                         size_t msg_len);

/* One sample's version-2 record (see the layout above). */
typedef struct rl_shard_fields_record {
    uint64_t offset, length; /* the range to fetch */
    int64_t label;
    int64_t image_at, image_len; /* image_at < 0: refusal -image_at - 1 */
    int nfields;                 /* the header's; at most the maximum */
    int64_t at[RL_SHARD_RECORDS_MAX_FIELDS];
    int64_t size[RL_SHARD_RECORDS_MAX_FIELDS];
    int64_t ext[RL_SHARD_RECORDS_MAX_FIELDS];
} rl_shard_fields_record;

/* Sample id's whole version-2 record into *r. 0, or -errno with msg as
 * rl_shard_records_get; -EBADMSG too for a version-1 file (no field
 * columns). The values are as the file holds them: the caller checks
 * them against what it expects (refusal numbers, extension counts).
 * Thread-safe; blocks on one pread (and an open when the file is not
 * kept open). */
int rl_shard_records_get_fields(rl_shard_records *t, int64_t id,
                                rl_shard_fields_record *r, char *msg,
                                size_t msg_len);

/* The record file that holds sample id's record (the table's copy of its
 * path), or NULL for an id outside [0, starts[nshards]). For messages. */
const char *rl_shard_records_path(const rl_shard_records *t, int64_t id);

/* Copies starts (nshards + 1 values) into the table, so that the caller's
 * array need not outlive it (the copy is freed with the table). 0, or
 * -ENOMEM (the table keeps borrowing the caller's). Call before the first
 * lookup. */
int rl_shard_records_own_starts(rl_shard_records *t);

/* Record files the table keeps open now: never more than max_open (a
 * lookup that finds every kept file in use opens its own and closes it
 * after). */
size_t rl_shard_records_open_files(rl_shard_records *t);

/* Closes every file and frees the table. NULL is allowed. No lookup may
 * be in flight. */
void rl_shard_records_destroy(rl_shard_records *t);

#endif
