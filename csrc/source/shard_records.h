/*
 * source/shard_records.h - where sample i of a tar shard set is, read from
 * the shards' record files rather than held as per-sample arrays.
 *
 * A record file (written by python/ringloader/datasets/tarindex.py,
 * write_records) holds one fixed-width record per sample of one shard,
 * after a header; all fields little-endian:
 *
 *   0  magic "RLSAMPLE"       8  format version u32 (1)
 *   12 member-index version   16 shard size u64    24 shard mtime_ns i64
 *   32 record count u64       40 header bytes u32 (a multiple of 8)
 *   44 tag bytes u32          48 tag (the selection), zero padding
 *   then count records: image offset u64, image length u64, label i64
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

/* The record file format this reader knows (tarindex.RECORDS_VERSION). */
#define RL_SHARD_RECORDS_VERSION 1
/* Bytes of one record, and of the fixed part of the header. */
#define RL_SHARD_RECORD_BYTES 24
#define RL_SHARD_RECORDS_HEAD 48
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

/* Sample id's image offset and length (and label, when label is not
 * NULL). 0 on success; else -errno, and msg (msg_len bytes, may be 0)
 * says why, naming the record file: -ERANGE for an id outside
 * [0, starts[nshards]), the open's error for a file that cannot be
 * opened, -EBADMSG for one that is not a record file of this format or
 * does not hold the shard's record count (or was cut short since). */
int rl_shard_records_get(rl_shard_records *t, int64_t id, uint64_t *offset,
                         uint64_t *length, int64_t *label, char *msg,
                         size_t msg_len);

/* Record files the table keeps open now: never more than max_open (a
 * lookup that finds every kept file in use opens its own and closes it
 * after). */
size_t rl_shard_records_open_files(rl_shard_records *t);

/* Closes every file and frees the table. NULL is allowed. No lookup may
 * be in flight. */
void rl_shard_records_destroy(rl_shard_records *t);

#endif
