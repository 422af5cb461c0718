/* test_decode_buf.c - decode.h's rl_decode_buf, the decoders' buffers that
 * grow with the images and shrink after an outlier, and the per-thread
 * window of rl_decode_ctx_trim that drives the shrinking.
 *
 * The allocator is watched: this program is linked with --wrap for malloc,
 * realloc and free (the Makefile's rule for it), so every call the core's
 * objects make goes through the counters below first. What is checked:
 * - a buffer's growth keeps none of its old bytes (every caller writes
 *   what it reserved before reading it): no realloc of a live block to a
 *   larger size, and while it grows from a small image to a large one the
 *   live buffer bytes peak at the large one's size, not old + new (what
 *   realloc holds while it copies, as C defines it: a new object with the
 *   old one's bytes, the old one freed after);
 * - out of memory while growing: -ENOMEM, the buffer empty, nothing
 *   leaked;
 * - the policy: a buffer of at most RL_DECODE_KEEP_BYTES is kept; one
 *   over it and over twice the most asked in this window and the one
 *   before shrinks to that most; one unused for two windows is freed; a
 *   large image within the window reuses it, without allocating;
 * - the window through a decode context (rl_decode_ctx_trim, one call per
 *   image, a window every RL_DECODE_TRIM_IMAGES), with a decoder of this
 *   file and with the real JPEG decoder: an outlier's memory is back at
 *   the second window's end after it, and the JPEG decoder's buffer grows
 *   from a small image to a large one without carrying a byte.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "decode/decode.h"
#include "jpegmake.h"

void *__real_malloc(size_t n);
void *__real_realloc(void *p, size_t n);
void __real_free(void *p);

/* ---- the watched allocator ---- */

#define MAX_BLOCKS 64

static struct {
    void *p;
    size_t n;
} blocks[MAX_BLOCKS];
static bool watching;   /* count only between watch() and the checks */
static size_t live;     /* bytes of the watched blocks */
static size_t peak;     /* the most live bytes, realloc's copy included */
static size_t kept;     /* old bytes a growing realloc had to keep */
static unsigned allocs; /* malloc and realloc calls */
static bool fail_next;  /* the next malloc or realloc returns NULL */

static void watch(void)
{
    peak = live;
    kept = 0;
    allocs = 0;
    watching = true;
}

static int find(const void *p)
{
    for (int i = 0; i < MAX_BLOCKS; i++) {
        if (p != NULL && blocks[i].p == p) {
            return i;
        }
    }
    return -1;
}

static void note_live(void *p, size_t n)
{
    int i = 0;
    while (i < MAX_BLOCKS && blocks[i].p != NULL) {
        i++;
    }
    if (i == MAX_BLOCKS) {
        fprintf(stderr, "test_decode_buf: more than %d blocks\n", MAX_BLOCKS);
        exit(1);
    }
    blocks[i].p = p;
    blocks[i].n = n;
    live += n;
    if (live > peak) {
        peak = live;
    }
}

static void note_gone(const void *p)
{
    int i = find(p);
    if (i >= 0) {
        live -= blocks[i].n;
        blocks[i].p = NULL;
    }
}

void *__wrap_malloc(size_t n)
{
    if (!watching) {
        return __real_malloc(n);
    }
    allocs++;
    if (fail_next) {
        fail_next = false;
        return NULL;
    }
    void *p = __real_malloc(n);
    if (p != NULL) {
        note_live(p, n);
    }
    return p;
}

void __wrap_free(void *p)
{
    if (watching) {
        note_gone(p);
    }
    __real_free(p);
}

void *__wrap_realloc(void *p, size_t n)
{
    if (!watching) {
        return __real_realloc(p, n);
    }
    allocs++;
    if (fail_next) {
        fail_next = false;
        return NULL;
    }
    int i = find(p);
    size_t old = i >= 0 ? blocks[i].n : 0;
    if (p != NULL && n > old) {
        /* Growing a live block: the new object holds the old one's bytes,
         * both live until the copy is done. */
        kept += old;
        if (live + n > peak) {
            peak = live + n;
        }
    }
    void *q = __real_realloc(p, n);
    if (q != NULL) {
        note_gone(p);
        note_live(q, n);
    }
    return q;
}

#define MIB ((size_t)1 << 20)

/* ---- rl_decode_buf alone ---- */

static void test_growth_keeps_nothing(void)
{
    rl_decode_buf b = {0};
    watch();
    /* A small image, then larger ones, as a thread meets them. */
    static const size_t sizes[] = {64 << 10, 1 * MIB, 6 * MIB, 48 * MIB};
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        size_t before = peak;
        CHECK_EQ(rl_decode_buf_reserve(&b, sizes[k]), 0);
        CHECK(b.data != NULL && b.cap == sizes[k]);
        memset(b.data, 1, sizes[k]); /* the caller writes what it asked */
        /* The old bytes went before the new ones came. */
        CHECK_EQ(live, sizes[k]);
        CHECK_EQ(peak, before > sizes[k] ? before : sizes[k]);
    }
    CHECK_EQ(kept, 0);
    CHECK_EQ(peak, 48 * MIB);
    /* Within the capacity: no allocation at all. */
    unsigned n = allocs;
    CHECK_EQ(rl_decode_buf_reserve(&b, 20 * MIB), 0);
    CHECK_EQ(allocs, n);
    CHECK_EQ(b.cap, 48 * MIB);
    rl_decode_buf_exit(&b);
    CHECK(b.data == NULL && b.cap == 0 && b.need == 0);
    CHECK_EQ(live, 0);
    watching = false;
}

static void test_out_of_memory_while_growing(void)
{
    rl_decode_buf b = {0};
    watch();
    CHECK_EQ(rl_decode_buf_reserve(&b, 2 * MIB), 0);
    fail_next = true;
    CHECK_EQ(rl_decode_buf_reserve(&b, 16 * MIB), -ENOMEM);
    /* Emptied, nothing leaked, and usable again. */
    CHECK(b.data == NULL && b.cap == 0);
    CHECK_EQ(live, 0);
    CHECK_EQ(rl_decode_buf_trim(&b, false), 0);
    CHECK_EQ(rl_decode_buf_reserve(&b, 16 * MIB), 0);
    CHECK_EQ(b.cap, 16 * MIB);
    rl_decode_buf_exit(&b);
    CHECK_EQ(live, 0);
    watching = false;
}

static void test_the_policy(void)
{
    rl_decode_buf b = {0};
    watch();
    /* At most RL_DECODE_KEEP_BYTES: kept through windows without use. */
    CHECK_EQ(rl_decode_buf_reserve(&b, RL_DECODE_KEEP_BYTES), 0);
    for (int w = 0; w < 4; w++) {
        CHECK_EQ(rl_decode_buf_trim(&b, true), RL_DECODE_KEEP_BYTES);
    }
    rl_decode_buf_exit(&b);

    /* An outlier, then smaller images: kept while one as large as half
     * of it came in this window or the one before, then shrunk to the
     * most of those two windows, not to the last image's need. */
    CHECK_EQ(rl_decode_buf_reserve(&b, 64 * MIB), 0);
    CHECK_EQ(rl_decode_buf_trim(&b, false), 64 * MIB);
    CHECK_EQ(rl_decode_buf_reserve(&b, 1 * MIB), 0);
    CHECK_EQ(rl_decode_buf_trim(&b, true), 64 * MIB); /* window A ends */
    /* A large one again within the span: the buffer is reused. */
    unsigned n = allocs;
    CHECK_EQ(rl_decode_buf_reserve(&b, 40 * MIB), 0);
    CHECK_EQ(allocs, n);
    CHECK_EQ(rl_decode_buf_trim(&b, false), 64 * MIB);
    CHECK_EQ(rl_decode_buf_reserve(&b, 2 * MIB), 0);
    CHECK_EQ(rl_decode_buf_trim(&b, true), 64 * MIB); /* B: 40 > 64 / 2 */
    CHECK_EQ(rl_decode_buf_reserve(&b, 20 * MIB), 0);
    CHECK_EQ(rl_decode_buf_trim(&b, true), 20 * MIB); /* C: the most, 20 */
    CHECK_EQ(live, 20 * MIB);
    CHECK_EQ(rl_decode_buf_reserve(&b, 3 * MIB), 0);
    CHECK_EQ(rl_decode_buf_trim(&b, true), 3 * MIB); /* D: 3, over 8 MiB */
    CHECK_EQ(live, 3 * MIB);
    rl_decode_buf_exit(&b);

    /* Over the floor and not used for two windows: freed. */
    CHECK_EQ(rl_decode_buf_reserve(&b, 16 * MIB), 0);
    CHECK_EQ(rl_decode_buf_trim(&b, true), 16 * MIB);
    CHECK_EQ(rl_decode_buf_trim(&b, true), 0);
    CHECK(b.data == NULL);
    CHECK_EQ(live, 0);
    CHECK_EQ(kept, 0);
    rl_decode_buf_exit(&b);
    watching = false;
}

/* ---- the window of a decode context ---- */

/* A decoder of this file: it claims anything, and its region reserves the
 * bytes the data's first 8 bytes say (a size in MiB), as a decoder's
 * region reserves what the image needs. */
static bool toy_claims(const rl_decoder_def *def, const uint8_t *d, size_t n)
{
    (void)def;
    (void)d;
    return n == 1;
}

static void *toy_create(const rl_decoder_def *def)
{
    (void)def;
    return calloc(1, sizeof(rl_decode_buf));
}

static void toy_destroy(void *state)
{
    rl_decode_buf_exit(state);
    free(state);
}

static size_t toy_trim(void *state, bool roll)
{
    return rl_decode_buf_trim(state, roll);
}

static const rl_decoder_def toy = {.name = "toy",
                                   .claims = toy_claims,
                                   .create = toy_create,
                                   .destroy = toy_destroy,
                                   .trim = toy_trim};

/* One image of mib MiB through c's toy decoder; returns what c holds
 * after it. */
static size_t toy_image(rl_decode_ctx *c, size_t mib)
{
    static const uint8_t one = 0;
    const rl_decoder_def *def;
    void *state;
    int which;
    char msg[RL_MSG_MAX];
    CHECK_EQ(rl_decode_pick(c, &one, 1, &def, &state, &which, msg), 0);
    CHECK(def == &toy);
    CHECK_EQ(rl_decode_buf_reserve(state, mib * MIB), 0);
    memset(((rl_decode_buf *)state)->data, 7, mib * MIB);
    return rl_decode_ctx_trim(c);
}

static void test_the_context_window(void)
{
    rl_decoders set = {.defs = {&toy}, .n = 1};
    rl_decode_ctx *c = rl_decode_ctx_create(&set);
    CHECK(c != NULL);
    watch();
    /* Image 1 of the thread is the outlier; then 1 MiB images. The
     * windows end at images 32, 64, 96...: at 32 the outlier is in the
     * window that ends, at 64 in the one before, so its memory is back at
     * image 64 and not before, 63 images after it. */
    CHECK_EQ(toy_image(c, 64), 64 * MIB);
    for (int image = 2; image <= 96; image++) {
        size_t held = toy_image(c, 1);
        CHECK_EQ(held, image < 64 ? 64 * MIB : 1 * MIB);
    }
    CHECK_EQ(live, 1 * MIB);
    /* An outlier at the end of a window (image 128) goes sooner: back at
     * image 160, 32 images after it. */
    for (int image = 97; image <= 160; image++) {
        size_t held = toy_image(c, image == 128 ? 32 : 1);
        size_t want = image < 128 ? 1 * MIB : image < 160 ? 32 * MIB : MIB;
        CHECK_EQ(held, want);
    }
    CHECK_EQ(kept, 0);
    rl_decode_ctx_destroy(c);
    CHECK_EQ(live, 0);
    watching = false;
}

/* The real JPEG decoder through a context: its region buffer grows from
 * a small image to a large one without keeping a byte of the old. */
static void test_a_decoder_grows_without_copying(void)
{
    rl_decoders set = {.n = 0};
    CHECK_EQ(rl_decode_add_native(&set), 0);
    rl_decode_ctx *c = rl_decode_ctx_create(&set);
    CHECK(c != NULL);
    rl_limits lim = {.max_pixels = RL_DEFAULT_MAX_PIXELS,
                     .max_scans = RL_DEFAULT_MAX_SCANS,
                     .max_file_bytes = RL_DEFAULT_MAX_FILE_BYTES};
    static const int sides[][2] = {{64, 48}, {640, 480}, {2000, 1500}};
    watch();
    size_t last = 0;
    for (size_t k = 0; k < sizeof(sides) / sizeof(sides[0]); k++) {
        size_t len;
        watching = false; /* the file is the test's, not the decoder's */
        uint8_t *jpg = make_jpeg(sides[k][0], sides[k][1], 0, &len);
        watching = true;
        CHECK(jpg != NULL);
        const rl_decoder_def *def;
        void *state;
        int which;
        char msg[RL_MSG_MAX];
        rl_image_info info;
        rl_pixels px;
        CHECK_EQ(rl_decode_pick(c, jpg, len, &def, &state, &which, msg), 0);
        CHECK(def == &rl_jpeg_decoder);
        CHECK_EQ(def->header(state, jpg, len, &lim, &info, msg), 0);
        size_t before = peak;
        CHECK_EQ(def->region(state, 8, 0, 0, info.width, info.height, &lim, &px,
                             msg),
                 0);
        /* What the decoder's buffers hold now, and the most they held
         * while growing: the new region's, never the old one's on top. */
        size_t held = rl_decode_ctx_trim(c);
        CHECK(held >= (size_t)info.width * (size_t)info.height * 4);
        CHECK(peak <= (before > held ? before : held));
        CHECK(held > last);
        last = held;
        free(jpg);
    }
    CHECK_EQ(kept, 0);
    rl_decode_ctx_destroy(c);
    watching = false;
}

int main(void)
{
    test_growth_keeps_nothing();
    test_out_of_memory_while_growing();
    test_the_policy();
    test_the_context_window();
    test_a_decoder_grows_without_copying();
    PASS("test_decode_buf");
}
