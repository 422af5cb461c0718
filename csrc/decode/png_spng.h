/*
 * decode/png_spng.h - a libspng context as the PNG decoders open it
 * (decode/png.c and decode/png_index.c, which defines these): the only
 * header that includes spng.h.
 */
#ifndef RL_DECODE_PNG_SPNG_H
#define RL_DECODE_PNG_SPNG_H

#include "rl.h"

#include <spng.h>

/* What libspng may hold of ancillary chunks (inflated text, profiles). */
#define RL_PNG_CHUNK_CACHE (64u << 20)

/* A libspng context reading data[0..len) in *ctx (free it with
 * spng_ctx_free whatever this returns), its IHDR in *ihdr: 0 or libspng's
 * error. Critical chunks' CRCs and the Adler-32 are left to
 * rl__png_walk_chunks (decode/png_rows.h); ancillary chunks with a wrong
 * CRC are dropped; compressed ones are held to RL_PNG_CHUNK_CACHE. */
int rl__png_open(spng_ctx **ctx, const uint8_t *data, size_t len,
                 struct spng_ihdr *ihdr);

/* libspng's error as a status with msg ("PNG <what>: ..."): data that ends
 * where libspng wants more is RL_ETRUNCATED, SPNG_EMEM -ENOMEM, a chunk
 * over RL_PNG_CHUNK_CACHE RL_ETOOBIG, anything else RL_EDECODE. */
int rl__png_status(int err, const char *what, char *msg);

#endif
