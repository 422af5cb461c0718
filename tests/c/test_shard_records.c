/* test_shard_records.c - sample lookups in record files
 * (source/shard_records.h): lookups across shards, a missing file, a short
 * and a corrupt file, lookups from 4 threads at once, and more files than
 * the table keeps open; version-2 records (with fields) and their
 * refusals. The record files are written here, in the layout tarindex.py
 * writes. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "source/shard_records.h"

#define NSHARDS 12
#define THREADS 4

static char dir[] = "/tmp/rl-shard-records-XXXXXX";
static char paths[NSHARDS][256];
static int64_t starts[NSHARDS + 1];

static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* What sample id of the set holds: easy to check from the id alone. */
static uint64_t offset_of(int64_t id)
{
    return 512 + (uint64_t)id * 1024;
}

static uint64_t length_of(int64_t id)
{
    return 100 + (uint64_t)id % 7;
}

static int64_t label_of(int64_t id)
{
    return id % 5 == 0 ? -1 : id % 1000;
}

/* The header fields both versions share: magic, version, member-index
 * version, shard size and mtime, count, header and tag bytes. */
static void put_head(unsigned char *head, uint32_t version, uint64_t count,
                     uint32_t head_bytes, uint32_t tag_len)
{
    memcpy(head, "RLSAMPLE", 8);
    put32(head + 8, version);
    put32(head + 12, 2);
    put64(head + 16, 1 << 20);
    put64(head + 24, 1234);
    put64(head + 32, count);
    put32(head + 40, head_bytes);
    put32(head + 44, tag_len);
}

/* A record file of count records for samples first.., as tarindex.py
 * writes one (a 5-byte tag, so a padded header of 56 bytes). */
static void write_records(const char *path, int64_t first, uint64_t count)
{
    const char tag[] = "jpg\nc";
    unsigned char head[56] = {0};
    put_head(head, RL_SHARD_RECORDS_VERSION, count, sizeof head,
             sizeof tag - 1);
    memcpy(head + RL_SHARD_RECORDS_HEAD, tag, sizeof tag - 1);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    CHECK(fwrite(head, 1, sizeof head, f) == sizeof head);
    for (uint64_t i = 0; i < count; i++) {
        unsigned char r[RL_SHARD_RECORD_BYTES];
        int64_t id = first + (int64_t)i;
        put64(r, offset_of(id));
        put64(r + 8, length_of(id));
        put64(r + 16, (uint64_t)label_of(id));
        CHECK(fwrite(r, 1, sizeof r, f) == sizeof r);
    }
    CHECK(fclose(f) == 0);
}

static const char *const *path_list(void)
{
    static const char *list[NSHARDS];
    for (int s = 0; s < NSHARDS; s++)
        list[s] = paths[s];
    return list;
}

static void check_sample(rl_shard_records *t, int64_t id)
{
    uint64_t off = 0, len = 0;
    int64_t label = 0;
    char msg[512] = "";
    int rc = rl_shard_records_get(t, id, &off, &len, &label, msg, sizeof msg);
    if (rc != 0)
        fprintf(stderr, "sample %lld: %s\n", (long long)id, msg);
    CHECK_EQ(rc, 0);
    CHECK_EQ(off, offset_of(id));
    CHECK_EQ(len, length_of(id));
    CHECK_EQ(label, label_of(id));
}

static void test_lookups(void)
{
    /* Every shard's samples, the first and last of each, an empty shard
     * (shard 3) in the middle, and ids out of range. */
    rl_shard_records *t = rl_shard_records_new(starts, path_list(), NSHARDS, 0);
    CHECK(t != NULL);
    for (int64_t id = 0; id < starts[NSHARDS]; id++)
        check_sample(t, id);
    for (int64_t id = starts[NSHARDS] - 1; id >= 0; id -= 37)
        check_sample(t, id);
    uint64_t off, len;
    char msg[256];
    CHECK_EQ(rl_shard_records_get(t, -1, &off, &len, NULL, msg, sizeof msg),
             -ERANGE);
    CHECK_EQ(rl_shard_records_get(t, starts[NSHARDS], &off, &len, NULL, msg,
                                  sizeof msg),
             -ERANGE);
    CHECK(strstr(msg, "out of range") != NULL);
    CHECK(rl_shard_records_open_files(t) <= RL_SHARD_RECORDS_OPEN);
    rl_shard_records_destroy(t);
    rl_shard_records_destroy(NULL);
    /* Bad arguments. */
    int64_t bad[3] = {0, 5, 4};
    const char *two[2] = {paths[0], paths[1]};
    CHECK(rl_shard_records_new(bad, two, 2, 0) == NULL);
    CHECK_EQ(errno, EINVAL);
}

static void test_eviction(void)
{
    /* 3 files kept open for 12 shards: lookups across every shard, twice,
     * give the same records, and no more than 3 files stay open. */
    rl_shard_records *t = rl_shard_records_new(starts, path_list(), NSHARDS, 3);
    CHECK(t != NULL);
    for (int round = 0; round < 2; round++) {
        for (int64_t id = 0; id < starts[NSHARDS]; id += 13) {
            check_sample(t, id);
            CHECK(rl_shard_records_open_files(t) <= 3);
        }
    }
    CHECK_EQ(rl_shard_records_open_files(t), 3);
    rl_shard_records_destroy(t);
}

static void expect_failure(rl_shard_records *t, int64_t id, int want,
                           const char *path, const char *why)
{
    uint64_t off, len;
    char msg[512] = "";
    CHECK_EQ(rl_shard_records_get(t, id, &off, &len, NULL, msg, sizeof msg),
             want);
    if (strstr(msg, path) == NULL || strstr(msg, why) == NULL)
        fprintf(stderr, "message: %s\n", msg);
    CHECK(strstr(msg, path) != NULL);
    CHECK(strstr(msg, why) != NULL);
}

static void test_bad_files(void)
{
    char gone[300], shortf[300], corrupt[300], count[300], version[300];
    snprintf(gone, sizeof gone, "%s/gone.rec", dir);
    snprintf(shortf, sizeof shortf, "%s/short.rec", dir);
    snprintf(corrupt, sizeof corrupt, "%s/corrupt.rec", dir);
    snprintf(count, sizeof count, "%s/count.rec", dir);
    snprintf(version, sizeof version, "%s/version.rec", dir);
    /* Short: its last record cut. */
    write_records(shortf, 20, 10);
    CHECK(truncate(shortf, 56 + 10 * RL_SHARD_RECORD_BYTES - 5) == 0);
    /* Corrupt: its magic overwritten. */
    write_records(corrupt, 30, 10);
    FILE *f = fopen(corrupt, "r+b");
    CHECK(f != NULL);
    CHECK(fwrite("XX", 1, 2, f) == 2);
    CHECK(fclose(f) == 0);
    /* A record file of 9 samples for a shard of 10. */
    write_records(count, 40, 9);
    /* Another format version. */
    write_records(version, 50, 10);
    f = fopen(version, "r+b");
    CHECK(f != NULL);
    CHECK(fseek(f, 8, SEEK_SET) == 0);
    CHECK(fputc(9, f) == 9);
    CHECK(fclose(f) == 0);
    char good[300];
    snprintf(good, sizeof good, "%s/good.rec", dir);
    write_records(good, 0, 10);
    const char *list[6] = {good, gone, shortf, corrupt, count, version};
    int64_t st[7] = {0, 10, 20, 30, 40, 50, 60};
    rl_shard_records *t = rl_shard_records_new(st, list, 6, 2);
    CHECK(t != NULL);
    check_sample(t, 3);
    expect_failure(t, 12, -ENOENT, gone, "cannot open");
    expect_failure(t, 25, -EBADMSG, shortf, "truncated or corrupt");
    expect_failure(t, 35, -EBADMSG, corrupt, "not a record file");
    expect_failure(t, 45, -EBADMSG, count, "record count");
    expect_failure(t, 55, -EBADMSG, version, "format version");
    check_sample(t, 9); /* the good file still reads */
    /* A file cut short after it was opened: the record read fails. */
    write_records(shortf, 20, 10);
    check_sample(t, 29);
    CHECK(truncate(shortf, 56 + 5 * RL_SHARD_RECORD_BYTES) == 0);
    expect_failure(t, 28, -EBADMSG, shortf, "cut short");
    rl_shard_records_destroy(t);
    const char *all[6] = {good, gone, shortf, corrupt, count, version};
    for (int i = 0; i < 6; i++)
        unlink(all[i]);
}

static rl_shard_records *shared;

static void *worker(void *arg)
{
    uint64_t x = (uint64_t)(uintptr_t)arg * 0x9e3779b97f4a7c15ULL + 1;
    for (int i = 0; i < 4000; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        check_sample(shared, (int64_t)(x % (uint64_t)starts[NSHARDS]));
    }
    return NULL;
}

static void test_threads(void)
{
    /* 4 threads on a table keeping 4 of 12 files open: evictions and
     * reads race, every lookup gives its sample's record. */
    shared = rl_shard_records_new(starts, path_list(), NSHARDS, 4);
    CHECK(shared != NULL);
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++)
        CHECK(pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)i) == 0);
    for (int i = 0; i < THREADS; i++)
        CHECK(pthread_join(th[i], NULL) == 0);
    CHECK(rl_shard_records_open_files(shared) <= 4);
    rl_shard_records_destroy(shared);
}

/* rl_shard_records_expect: a file stating another shard's size or mtime,
 * or another selection, is refused; the stated ones read. */
static void test_expected_shard(void)
{
    int64_t sizes[NSHARDS], mtimes[NSHARDS];
    for (int s = 0; s < NSHARDS; s++) {
        sizes[s] = 1 << 20; /* what write_records states */
        mtimes[s] = 1234;
    }
    sizes[2] = (1 << 20) + 1; /* shard 2 is not the one its file was for */
    mtimes[4] = 99;           /* nor is shard 4 */
    rl_shard_records *t = rl_shard_records_new(starts, path_list(), NSHARDS, 0);
    CHECK(t != NULL);
    CHECK_EQ(
        rl_shard_records_expect(t, sizes, mtimes, (const uint8_t *)"jpg\nc", 5),
        0); /* the files' whole tag */
    check_sample(t, starts[1]);
    expect_failure(t, starts[2], -EBADMSG, paths[2], "another shard");
    expect_failure(t, starts[4] + 1, -EBADMSG, paths[4], "another shard");
    rl_shard_records_destroy(t);
    /* Another selection: the files' tag differs, or is longer or shorter
     * than the one expected. */
    t = rl_shard_records_new(starts, path_list(), NSHARDS, 0);
    CHECK(t != NULL);
    CHECK_EQ(rl_shard_records_expect(t, NULL, NULL, NULL, 0), 0);
    check_sample(t, starts[2]); /* nothing expected: not checked */
    rl_shard_records_destroy(t);
    t = rl_shard_records_new(starts, path_list(), NSHARDS, 0);
    CHECK(t != NULL);
    sizes[2] = 1 << 20;
    mtimes[4] = 1234;
    CHECK_EQ(
        rl_shard_records_expect(t, sizes, mtimes, (const uint8_t *)"png\n", 4),
        0);
    expect_failure(t, starts[0], -EBADMSG, paths[0], "another selection");
    CHECK_EQ(rl_shard_records_expect(t, sizes, mtimes,
                                     (const uint8_t *)"jpg\ncls\n", 8),
             0); /* longer than the file's tag */
    expect_failure(t, starts[1], -EBADMSG, paths[1], "another selection");
    CHECK_EQ(
        rl_shard_records_expect(t, sizes, mtimes, (const uint8_t *)"jpg\n", 4),
        0); /* a prefix of the file's tag */
    expect_failure(t, starts[5], -EBADMSG, paths[5], "another selection");
    rl_shard_records_destroy(t);
}

/* A version-2 record file of count samples first.. with nfields fields
 * (width: the record width the header states; 0: the right one) and tag
 * "jpg\nf", as tarindex.py writes one for a selection with fields. */
static void write_fields_records(const char *path, int64_t first,
                                 uint64_t count, uint32_t nfields,
                                 uint32_t width)
{
    const char tag[] = "jpg\nf";
    uint32_t right = RL_SHARD_FIELDS_RECORD_BYTES + 24 * nfields;
    unsigned char head[64] = {0};
    put_head(head, RL_SHARD_RECORDS_FIELDS_VERSION, count, sizeof head,
             sizeof tag - 1);
    put32(head + 48, width ? width : right);
    put32(head + 52, nfields);
    memcpy(head + RL_SHARD_RECORDS_FIELDS_HEAD, tag, sizeof tag - 1);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    CHECK(fwrite(head, 1, sizeof head, f) == sizeof head);
    for (uint64_t i = 0; i < count; i++) {
        unsigned char r[RL_SHARD_FIELDS_RECORD_BYTES +
                        24 * RL_SHARD_RECORDS_MAX_FIELDS] = {0};
        int64_t id = first + (int64_t)i;
        put64(r, offset_of(id));
        put64(r + 8, length_of(id));
        put64(r + 16, (uint64_t)label_of(id));
        put64(r + 24, (uint64_t)(id % 4 == 0 ? -2 : id % 50));
        put64(r + 32, 77 + (uint64_t)id);
        for (uint32_t k = 0; k < nfields; k++) {
            unsigned char *c = r + RL_SHARD_FIELDS_RECORD_BYTES + 24 * k;
            put64(c, (uint64_t)id * 10 + k);
            put64(c + 8, 5 + k);
            put64(c + 16, k % 2);
        }
        CHECK(fwrite(r, 1, right, f) == right);
    }
    CHECK(fclose(f) == 0);
}

/* Version-2 files: the range and label read as from version 1, the rest
 * of the record by rl_shard_records_get_fields; a header whose record
 * width is not its field count's refused, and a version-1 file asked for
 * fields refused, each naming the file. */
static void test_fields_records(void)
{
    char a[300], b[300], wide[300];
    snprintf(a, sizeof a, "%s/fields-a.rec", dir);
    snprintf(b, sizeof b, "%s/fields-b.rec", dir);
    snprintf(wide, sizeof wide, "%s/fields-wide.rec", dir);
    int64_t st[3] = {0, 30, 50};
    write_fields_records(a, 0, 30, 3, 0);
    write_fields_records(b, 30, 20, 3, 0);
    const char *two[2] = {a, b};
    rl_shard_records *t = rl_shard_records_new(st, two, 2, 1);
    CHECK(t != NULL);
    CHECK_EQ(rl_shard_records_own_starts(t), 0);
    st[1] = 999; /* the table reads its own copy now */
    int64_t sizes[2] = {1 << 20, 1 << 20}, mtimes[2] = {1234, 1234};
    CHECK_EQ(
        rl_shard_records_expect(t, sizes, mtimes, (const uint8_t *)"jpg\nf", 5),
        0);
    char msg[512] = "";
    for (int64_t id = 0; id < 50; id++) {
        check_sample(t, id);
        rl_shard_fields_record r;
        CHECK_EQ(rl_shard_records_get_fields(t, id, &r, msg, sizeof msg), 0);
        CHECK_EQ(r.offset, offset_of(id));
        CHECK_EQ(r.length, length_of(id));
        CHECK_EQ(r.label, label_of(id));
        CHECK_EQ(r.image_at, id % 4 == 0 ? -2 : id % 50);
        CHECK_EQ(r.image_len, 77 + id);
        CHECK_EQ(r.nfields, 3);
        for (int k = 0; k < 3; k++) {
            CHECK_EQ(r.at[k], id * 10 + k);
            CHECK_EQ(r.size[k], 5 + k);
            CHECK_EQ(r.ext[k], k % 2);
        }
    }
    rl_shard_records_destroy(t);
    /* Another selection's tag (other fields): refused, never read. */
    st[1] = 30;
    t = rl_shard_records_new(st, two, 2, 0);
    CHECK(t != NULL);
    CHECK_EQ(
        rl_shard_records_expect(t, sizes, mtimes, (const uint8_t *)"jpg\ng", 5),
        0);
    expect_failure(t, 3, -EBADMSG, a, "another selection");
    rl_shard_records_destroy(t);
    /* A stated width that is not the field count's. */
    write_fields_records(wide, 0, 30, 3, 64);
    const char *bad[2] = {wide, b};
    t = rl_shard_records_new(st, bad, 2, 0);
    CHECK(t != NULL);
    expect_failure(t, 4, -EBADMSG, wide, "record width");
    rl_shard_records_destroy(t);
    /* A version-1 file has no field columns. */
    int64_t one[2] = {0, starts[1]};
    const char *v1[1] = {paths[0]};
    t = rl_shard_records_new(one, v1, 1, 0);
    CHECK(t != NULL);
    rl_shard_fields_record r;
    msg[0] = '\0';
    CHECK_EQ(rl_shard_records_get_fields(t, 1, &r, msg, sizeof msg), -EBADMSG);
    CHECK(strstr(msg, paths[0]) != NULL &&
          strstr(msg, "without field columns") != NULL);
    check_sample(t, 1); /* and still reads as version 1 */
    rl_shard_records_destroy(t);
    unlink(a);
    unlink(b);
    unlink(wide);
}

int main(void)
{
    CHECK(mkdtemp(dir) != NULL);
    starts[0] = 0;
    for (int s = 0; s < NSHARDS; s++) {
        uint64_t count = s == 3 ? 0 : 50 + (uint64_t)s * 11;
        snprintf(paths[s], sizeof paths[s], "%s/shard-%02d.rec", dir, s);
        write_records(paths[s], starts[s], count);
        starts[s + 1] = starts[s] + (int64_t)count;
    }
    test_lookups();
    test_eviction();
    test_bad_files();
    test_threads();
    test_expected_shard();
    test_fields_records();
    for (int s = 0; s < NSHARDS; s++)
        unlink(paths[s]);
    rmdir(dir);
    PASS("test_shard_records");
}
