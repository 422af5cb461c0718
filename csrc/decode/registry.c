/*
 * decode/registry.c - picking a decoder for some bytes.
 *
 * DESIGN: decoders are tried in the order the pipeline lists them, so a
 * catch-all fallback goes last. Each thread makes a decoder's state the
 * first time that decoder claims a sample: a JPEG-only data set never
 * creates the fallback's state. After each image the context trims every
 * state it made, used by that image or not (decode.h's rl_decode_buf).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode/decode.h"

struct rl_decode_ctx {
    rl_decoders set;
    void *states[RL_MAX_DECODERS];
    unsigned images; /* rl_decode_ctx_trim's calls, for its windows */
};

int rl_decode_check_pixels(uint64_t width, uint64_t height,
                           const rl_limits *lim, char *msg)
{
    /* Each side is below 2^32, so the product cannot wrap. */
    uint64_t pixels = width * height;
    if (pixels <= lim->max_pixels) {
        return 0;
    }
    snprintf(msg, RL_MSG_MAX,
             "image is %llux%llu = %llu pixels, over the limit of %llu "
             "(decompression bomb?); if it is trusted, raise the limit with "
             "max_pixels=",
             (unsigned long long)width, (unsigned long long)height,
             (unsigned long long)pixels, (unsigned long long)lim->max_pixels);
    return RL_ETOOBIG;
}

uint64_t rl_decode_memory_bound(const rl_limits *lim)
{
    if (lim->max_decode_bytes > 0) {
        return lim->max_decode_bytes;
    }
    uint64_t room = UINT64_MAX - RL_DECODE_SLACK_BYTES;
    return lim->max_pixels > room / RL_DECODE_BYTES_PER_PIXEL
               ? UINT64_MAX
               : lim->max_pixels * RL_DECODE_BYTES_PER_PIXEL +
                     RL_DECODE_SLACK_BYTES;
}

int rl_decode_add_native(rl_decoders *set)
{
    static const rl_decoder_def *const native[] = {
        &rl_jpeg_decoder, &rl_png_decoder, &rl_webp_decoder};
    size_t n = sizeof(native) / sizeof(native[0]);
    if ((size_t)set->n + n > RL_MAX_DECODERS) {
        return RL_EINTERNAL;
    }
    for (size_t i = 0; i < n; i++) {
        set->defs[set->n++] = native[i];
    }
    return 0;
}

rl_decode_ctx *rl_decode_ctx_create(const rl_decoders *set)
{
    rl_decode_ctx *c = calloc(1, sizeof(*c));
    if (c != NULL) {
        c->set = *set;
    }
    return c;
}

void rl_decode_ctx_destroy(rl_decode_ctx *c)
{
    if (c == NULL) {
        return;
    }
    for (int i = 0; i < c->set.n; i++) {
        if (c->states[i] != NULL) {
            c->set.defs[i]->destroy(c->states[i]);
        }
    }
    free(c);
}

int rl_decode_pick(rl_decode_ctx *c, const uint8_t *data, size_t len,
                   const rl_decoder_def **def, void **state, int *which,
                   char *msg)
{
    for (int i = 0; i < c->set.n; i++) {
        const rl_decoder_def *d = c->set.defs[i];
        if (!d->claims(d, data, len)) {
            continue;
        }
        if (c->states[i] == NULL && (c->states[i] = d->create(d)) == NULL) {
            snprintf(msg, RL_MSG_MAX, "out of memory for a %s decoder",
                     d->name);
            return -ENOMEM;
        }
        *def = d;
        *state = c->states[i];
        *which = i;
        return 0;
    }
    snprintf(msg, RL_MSG_MAX,
             "not a JPEG, PNG or WebP file (%zu bytes), and no fallback "
             "decoder",
             len);
    return RL_EFORMAT;
}

size_t rl_decode_ctx_trim(rl_decode_ctx *c)
{
    bool roll = ++c->images % RL_DECODE_TRIM_IMAGES == 0;
    size_t held = 0;
    for (int i = 0; i < c->set.n; i++) {
        if (c->states[i] != NULL && c->set.defs[i]->trim != NULL) {
            held += c->set.defs[i]->trim(c->states[i], roll);
        }
    }
    return held;
}
