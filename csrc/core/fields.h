/*
 * core/fields.h - checks of the fields (tar members) a shard sample carries beside
 * its image (a caption, a JSON record, a class), run by the decode job on
 * the sample's bytes, so that a field Python could not decode fails its
 * sample in the core: the skip policy then replaces it (next id, counted)
 * and its batch keeps its size, as for a corrupt image.
 *
 * Each check accepts exactly what the Python decoding of
 * python/ringloader/datasets/fields.py accepts, so that Python never meets
 * a field it cannot decode after the batch is made:
 *   RL_FIELD_UTF8  bytes.decode("utf-8") (errors="strict")
 *   RL_FIELD_JSON  json.loads(bytes): UTF-8/16/32 detected as json does
 *                   (BOMs, NUL patterns), lone surrogates passed; NaN,
 *                   Infinity, -Infinity; any top-level value; no integer
 *                   of more digits than int's max_str_digits; nesting up to
 *                   RL_JSON_MAX_DEPTH (Python's recursion limit is near
 *                   1000 and depends on the caller's stack: deeper
 *                   documents are refused here, a fixed bound)
 *   RL_FIELD_INT   int(bytes), and within int64 (it is collated into an
 *                   int64 tensor)
 * They are pure functions of their bytes: thread-safe, no allocation.
 */
#ifndef RL_CORE_FIELDS_H
#define RL_CORE_FIELDS_H

#include <stddef.h>
#include <stdint.h>

#include "rl.h"

/* How a field is checked: by its extension's kind. */
enum {
    RL_FIELD_ANY = 0, /* not checked (bytes, .npy, text not "strict") */
    RL_FIELD_UTF8,
    RL_FIELD_JSON,
    RL_FIELD_INT,
    RL_FIELD_KINDS
};

#define RL_JSON_MAX_DEPTH 512
/* Extensions a field may name ("jpg;png;webp"), at most. */
#define RL_FIELD_MAX_EXTS 16

/*
 * One field's members, one a sample (the pipeline config's `checks`): for
 * id i, its member lies at at[i] .. at[i] + len[i] of the sample's extra
 * bytes (rl_pipeline_config.image_at; at[i] < 0: nothing to check) and has
 * extension exts[ext[i]], checked as kinds[ext[i]]. The arrays have the
 * source's count of entries; the pipeline copies them at create. With the
 * config's field_records instead, at, len and ext are NULL and column
 * says which of the record's fields (0.. its nfields - 1) holds them.
 */
typedef struct rl_field_check {
    const int64_t *at, *len;
    const int8_t *ext;
    int column;
    int nexts;
    const char *exts[RL_FIELD_MAX_EXTS]; /* "txt", for the message */
    uint8_t kinds[RL_FIELD_MAX_EXTS];    /* RL_FIELD_* */
} rl_field_check;

/*
 * Whether s[0..n) is what its kind's Python decoding accepts (above).
 * max_digits: int's max_str_digits (sys.get_int_max_str_digits(); 0: no
 * limit), for JSON and int members. Returns 0, or RL_EFIELD with why
 * (RL_MSG_MAX bytes) saying what is wrong and where ("not UTF-8: byte 0xe9
 * at 3"). RL_FIELD_ANY always returns 0.
 */
int rl_field_check_bytes(int kind, const uint8_t *s, size_t n, int max_digits,
                         char *why);

#endif /* RL_CORE_FIELDS_H */
