/*
 * decode/buffer.c - the decoders' buffers that grow with the images and
 * shrink after an outlier (decode.h's rl_decode_buf says the policy and
 * why).
 *
 * DESIGN: a buffer grows by freeing its memory, then allocating the size
 * asked: its contents are each image's, written before they are read, so
 * nothing is copied and the old and the new are never held together.
 * It shrinks with realloc, which glibc does in place (a large block's
 * pages given back by mremap), keeping the pages of what stays.
 *
 * The high-water mark is two numbers, the most asked in the
 * current window and in the one before, so it costs a comparison per
 * reserve and per trim: no history of sizes, no clock. The thread's decode
 * context (registry.c) counts the images and says when a window ends,
 * which lets a buffer that no image uses any more be freed too.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "decode/decode.h"

int rl_decode_buf_reserve(rl_decode_buf *b, size_t need)
{
    if (need > b->need) {
        b->need = need;
    }
    if (need <= b->cap) {
        return 0;
    }
    /* Every caller writes what it reserved before reading it, so the old
     * bytes are freed, not carried: realloc would copy them (a block it
     * cannot grow in place, what the heap gives under glibc's mmap
     * threshold) and hold old and new at once, on the largest images. */
    free(b->data);
    b->data = malloc(need);
    if (b->data == NULL) {
        b->cap = 0;
        return -ENOMEM;
    }
    b->cap = need;
    return 0;
}

size_t rl_decode_buf_trim(rl_decode_buf *b, bool roll)
{
    if (roll) {
        b->need_before = b->need;
        b->need = 0;
    }
    size_t keep = b->need > b->need_before ? b->need : b->need_before;
    if (b->cap <= RL_DECODE_KEEP_BYTES || b->cap / 2 <= keep) {
        return b->cap;
    }
    if (keep == 0) {
        free(b->data);
        b->data = NULL;
        b->cap = 0;
        return 0;
    }
    /* glibc shrinks a large (mmap'd) block in place with mremap, which
     * returns its pages to the system. */
    uint8_t *p = realloc(b->data, keep);
    if (p != NULL) {
        b->data = p;
        b->cap = keep;
    }
    return b->cap;
}

void rl_decode_buf_exit(rl_decode_buf *b)
{
    free(b->data);
    memset(b, 0, sizeof(*b));
}
