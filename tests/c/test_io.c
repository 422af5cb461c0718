/* test_io.c - both backends read the same bytes: whole files, byte ranges,
 * batches larger than the ring, and the errors each failure gives. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "source/io.h"
#include "check.h"

#define NFILES 600

static char dir[] = "/tmp/rl_test_io_XXXXXX";
static char paths[NFILES][64];
static size_t sizes[NFILES];

static uint8_t byte_at(int file, size_t i)
{
    return (uint8_t)((i * 31u + (unsigned)file * 7u) ^ (i >> 8));
}

static int done_count;

static void on_done(rl_read *r, void *arg)
{
    (void)r;
    (void)arg;
    done_count++;
}

static void check_reads(rl_io_backend want, bool direct)
{
    char why[RL_MSG_MAX];
    rl_io *io = rl_io_create(want, 1 << 30, why);
    CHECK(io != NULL);
    static rl_read reads[NFILES + 4];
    static rl_read *reqs[NFILES + 4];
    memset(reads, 0, sizeof(reads));
    for (int i = 0; i < NFILES; i++) {
        reads[i].path = paths[i];
        reads[i].length = -1;
        reads[i].direct = direct;
        reqs[i] = &reads[i];
    }
    /* A byte range, a missing file, a directory, an oversized range. */
    reads[NFILES].path = paths[7];
    reads[NFILES].offset = 100;
    reads[NFILES].length = 1000;
    reads[NFILES].direct = direct;
    reads[NFILES + 1].path = "/nonexistent/ringloader/x.jpg";
    reads[NFILES + 1].length = -1;
    reads[NFILES + 2].path = dir;
    reads[NFILES + 2].length = -1;
    reads[NFILES + 3].path = paths[0];
    reads[NFILES + 3].offset = sizes[0];
    reads[NFILES + 3].length = 10;
    for (int i = NFILES; i < NFILES + 4; i++) {
        reqs[i] = &reads[i];
    }
    done_count = 0;
    rl_io_read_batch(io, reqs, NFILES + 4, on_done, NULL);
    CHECK_EQ(done_count, NFILES + 4);
    for (int i = 0; i < NFILES; i++) {
        CHECK_EQ(reads[i].status, 0);
        CHECK_EQ(reads[i].len, sizes[i]);
        if (direct && sizes[i] > 0) {
            /* Buffered only where the file system refused O_DIRECT. */
            CHECK(reads[i].direct || reads[i].direct_refused);
        }
        for (size_t k = 0; k < sizes[i]; k++) {
            if (reads[i].data[k] != byte_at(i, k)) {
                CHECK(!"wrong byte");
            }
        }
        free(reads[i].buf);
    }
    CHECK_EQ(reads[NFILES].status, 0);
    CHECK_EQ(reads[NFILES].len, 1000);
    CHECK_EQ(reads[NFILES].data[0], byte_at(7, 100));
    CHECK_EQ(reads[NFILES].data[999], byte_at(7, 1099));
    free(reads[NFILES].buf);
    CHECK_EQ(reads[NFILES + 1].status, -ENOENT);
    CHECK_EQ(reads[NFILES + 2].status, -EISDIR);
    CHECK_EQ(reads[NFILES + 3].status, -EIO);
    CHECK(reads[NFILES + 1].buf == NULL);

    /* The byte limit. */
    rl_io_destroy(io);
    io = rl_io_create(want, 10, why);
    rl_read big = {.path = paths[3], .length = -1};
    rl_read *one = &big;
    rl_io_read_batch(io, &one, 1, on_done, NULL);
    CHECK_EQ(big.status, RL_ETOOBIG);
    rl_io_destroy(io);
}

int main(void)
{
    CHECK(mkdtemp(dir) != NULL);
    for (int i = 0; i < NFILES; i++) {
        snprintf(paths[i], sizeof(paths[i]), "%s/f%03d", dir, i);
        sizes[i] = i == 5 ? 0 : (size_t)(1 + (i * 977) % 70000);
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
    char why[RL_MSG_MAX];
    bool uring = rl_io_uring_probe(why);
    printf("io_uring: %s %s\n", uring ? "available" : "unavailable", why);
    rl_io *io = rl_io_create(RL_IO_URING, 1 << 30, why);
    CHECK_EQ(rl_io_backend_of(io), uring ? RL_IO_URING : RL_IO_PREAD);
    rl_io_destroy(io);
    for (int direct = 0; direct < 2; direct++) {
        check_reads(RL_IO_PREAD, direct);
        if (uring) {
            check_reads(RL_IO_URING, direct);
        }
    }
    for (int i = 0; i < NFILES; i++) {
        unlink(paths[i]);
    }
    rmdir(dir);
    PASS("test_io");
}
