/*
 * core/fields.c - the checks of a sample's fields (core/fields.h); the
 * pipeline's side of them (its copy of the config's checks, the check a
 * decode job runs) is core/field_checks.c.
 *
 * DESIGN. Python decodes a sample's fields after its batch is made; a member
 * it cannot decode would then leave a hole in the batch. So the decode job
 * checks each member first, with the rules of the Python decoding written
 * out here, and a bad member fails the sample like a corrupt image: raised
 * naming it, or replaced by the skip policy. The JSON check is a validator,
 * not a parser: it builds nothing, reads each character once, and keeps its
 * containers on a fixed stack of RL_JSON_MAX_DEPTH bytes (no recursion on
 * the worker's stack). It reads characters through the encoding json.loads
 * detects on bytes (json.detect_encoding, then decode with
 * "surrogatepass"), so a UTF-16 or UTF-32 document is judged as Python
 * judges it.
 */
#include "core/fields.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* ---- characters ---- */

#define END (-1) /* no more characters */
#define BAD (-2) /* bytes the encoding cannot decode */

enum { ENC_UTF8, ENC_U16LE, ENC_U16BE, ENC_U32LE, ENC_U32BE };

/* The length of the UTF-8 character at s[0..n) (n >= 1) with its code point
 * in *cp, or 0 when none starts there: Python's strict decoder (no
 * overlong forms, nothing past U+10FFFF), passing encoded surrogates
 * (ED A0..BF xx) only when `surrogates` ("surrogatepass"). */
static size_t utf8_char(const uint8_t *s, size_t n, bool surrogates,
                        uint32_t *cp)
{
    uint8_t b = s[0], lo = 0x80, hi = 0xBF;
    size_t len;
    uint32_t c;
    if (b < 0x80) {
        *cp = b;
        return 1;
    }
    if (b >= 0xC2 && b <= 0xDF) {
        len = 2;
        c = b & 0x1F;
    } else if (b >= 0xE0 && b <= 0xEF) {
        len = 3;
        c = b & 0x0F;
        lo = b == 0xE0 ? 0xA0 : 0x80;
        hi = b == 0xED && !surrogates ? 0x9F : 0xBF;
    } else if (b >= 0xF0 && b <= 0xF4) {
        len = 4;
        c = b & 0x07;
        lo = b == 0xF0 ? 0x90 : 0x80;
        hi = b == 0xF4 ? 0x8F : 0xBF;
    } else {
        return 0;
    }
    if (n < len || s[1] < lo || s[1] > hi) {
        return 0;
    }
    c = c << 6 | (s[1] & 0x3F);
    for (size_t k = 2; k < len; k++) {
        if ((s[k] & 0xC0) != 0x80) {
            return 0;
        }
        c = c << 6 | (s[k] & 0x3F);
    }
    *cp = c;
    return len;
}

/* A document being read: its bytes, encoding, and current character. */
typedef struct {
    const uint8_t *s;
    size_t n, i; /* bytes, and the next one to read */
    int enc;     /* ENC_* */
    int32_t c;   /* the current character, END or BAD */
    size_t at;   /* the current character's index */
    int depth;   /* containers open */
    int max_digits;
    char *why;
} doc;

static uint32_t unit(const uint8_t *s, int bytes, bool le)
{
    uint32_t v = 0;
    for (int k = 0; k < bytes; k++) {
        v |= (uint32_t)s[le ? k : bytes - 1 - k] << (8 * k);
    }
    return v;
}

/* The character at d->i as the detected codec with "surrogatepass" reads
 * it: surrogate pairs joined, lone surrogates passed. */
static int32_t read_char(doc *d)
{
    size_t left = d->n - d->i;
    if (left == 0) {
        return END;
    }
    const uint8_t *p = d->s + d->i;
    uint32_t c;
    if (d->enc == ENC_UTF8) {
        size_t len = utf8_char(p, left, true, &c);
        d->i += len;
        return len ? (int32_t)c : BAD;
    }
    bool le = d->enc == ENC_U16LE || d->enc == ENC_U32LE;
    if (d->enc == ENC_U32LE || d->enc == ENC_U32BE) {
        if (left < 4 || (c = unit(p, 4, le)) > 0x10FFFF) {
            return BAD;
        }
        d->i += 4;
        return (int32_t)c;
    }
    if (left < 2) {
        return BAD;
    }
    c = unit(p, 2, le);
    d->i += 2;
    if (c >= 0xD800 && c <= 0xDBFF && left >= 4) {
        uint32_t c2 = unit(p + 2, 2, le);
        if (c2 >= 0xDC00 && c2 <= 0xDFFF) {
            d->i += 2;
            c = 0x10000 + ((c - 0xD800) << 10) + (c2 - 0xDC00);
        }
    }
    return (int32_t)c;
}

static void next(doc *d)
{
    d->c = read_char(d);
    d->at++;
}

/* json.detect_encoding's choice, with its BOM skipped as the codec does. */
static void detect(doc *d)
{
    const uint8_t *b = d->s;
    size_t n = d->n;
    static const uint8_t u32le[] = {0xFF, 0xFE, 0, 0},
                         u32be[] = {0, 0, 0xFE, 0xFF};
    static const uint8_t u8bom[] = {0xEF, 0xBB, 0xBF};
    d->enc = ENC_UTF8;
    if (n >= 4 && (memcmp(b, u32le, 4) == 0 || memcmp(b, u32be, 4) == 0)) {
        d->enc = b[0] ? ENC_U32LE : ENC_U32BE;
        d->i = 4;
    } else if (n >= 2 && ((b[0] == 0xFF && b[1] == 0xFE) ||
                          (b[0] == 0xFE && b[1] == 0xFF))) {
        d->enc = b[0] == 0xFF ? ENC_U16LE : ENC_U16BE;
        d->i = 2;
    } else if (n >= 3 && memcmp(b, u8bom, 3) == 0) {
        d->i = 3;
    } else if (n >= 4) {
        if (!b[0]) {
            d->enc = b[1] ? ENC_U16BE : ENC_U32BE;
        } else if (!b[1]) {
            d->enc = b[2] || b[3] ? ENC_U16LE : ENC_U32LE;
        }
    } else if (n == 2) {
        d->enc = !b[0] ? ENC_U16BE : !b[1] ? ENC_U16LE : ENC_UTF8;
    }
}

/* ---- JSON ---- */

static int fail(doc *d, const char *what)
{
    if (d->c == BAD) {
        static const char *const names[] = {"UTF-8", "UTF-16-LE", "UTF-16-BE",
                                            "UTF-32-LE", "UTF-32-BE"};
        snprintf(d->why, RL_MSG_MAX, "not valid JSON: not %s text at byte %zu",
                 names[d->enc], d->i);
    } else {
        snprintf(d->why, RL_MSG_MAX, "not valid JSON: %s at character %zu",
                 what, d->at);
    }
    return RL_EFIELD;
}

static void spaces(doc *d)
{
    while (d->c == ' ' || d->c == '\t' || d->c == '\n' || d->c == '\r') {
        next(d);
    }
}

static bool is_digit(int32_t c)
{
    return c >= '0' && c <= '9';
}

static bool is_hex(int32_t c)
{
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* A string, d->c at its opening quote: json's scanstring with strict=True
 * (no control characters; escapes \" \\ \/ \b \f \n \r \t \uXXXX, any
 * \u value, lone surrogates included). */
static int string(doc *d)
{
    next(d);
    for (;;) {
        if (d->c == '"') {
            next(d);
            return 0;
        }
        if (d->c < 0) {
            return fail(d, "unterminated string");
        }
        if (d->c < 0x20) {
            return fail(d, "control character in a string");
        }
        if (d->c == '\\') {
            next(d);
            if (d->c == 'u') {
                for (int k = 0; k < 4; k++) {
                    next(d);
                    if (!is_hex(d->c)) {
                        return fail(d, "invalid \\uXXXX escape");
                    }
                }
            } else if (d->c <= 0 || d->c >= 0x80 ||
                       strchr("\"\\/bfnrt", (char)d->c) == NULL) {
                return fail(d, "invalid \\escape");
            }
        }
        next(d);
    }
}

/* The characters of `word` (NaN, true...), else fails. */
static int word(doc *d, const char *word)
{
    for (const char *w = word; *w; w++) {
        if (d->c != *w) {
            return fail(d, "expecting value");
        }
        next(d);
    }
    return 0;
}

/* A number, d->c at its first character: json's NUMBER_RE on ASCII digits
 * (-?(0|[1-9][0-9]*)(.[0-9]+)?([eE][-+]?[0-9]+)?), or -Infinity. An
 * integer of more than max_digits digits fails as int() does. */
static int number(doc *d)
{
    bool minus = d->c == '-';
    if (minus) {
        next(d);
        if (d->c == 'I') {
            return word(d, "Infinity");
        }
    }
    size_t digits = 0;
    if (d->c == '0') {
        next(d);
        digits = 1;
    } else if (d->c >= '1' && d->c <= '9') {
        for (; is_digit(d->c); digits++) {
            next(d);
        }
    } else {
        return fail(d, "expecting value");
    }
    bool integer = true;
    if (d->c == '.') {
        next(d);
        if (!is_digit(d->c)) {
            return fail(d, "expecting a digit after '.'");
        }
        while (is_digit(d->c)) {
            next(d);
        }
        integer = false;
    }
    if (d->c == 'e' || d->c == 'E') {
        next(d);
        if (d->c == '+' || d->c == '-') {
            next(d);
        }
        if (!is_digit(d->c)) {
            return fail(d, "expecting a digit in the exponent");
        }
        while (is_digit(d->c)) {
            next(d);
        }
        integer = false;
    }
    if (integer && d->max_digits > 0 && digits > (size_t)d->max_digits) {
        snprintf(d->why, RL_MSG_MAX,
                 "not valid JSON: an integer of %zu digits, over Python's "
                 "limit of %d (sys.get_int_max_str_digits())",
                 digits, d->max_digits);
        return RL_EFIELD;
    }
    return 0;
}

/* An object's key and colon, d->c at the key's quote (or not). */
static int key(doc *d)
{
    if (d->c != '"') {
        return fail(d, "expecting a property name in double quotes");
    }
    if (string(d) != 0) {
        return RL_EFIELD;
    }
    spaces(d);
    if (d->c != ':') {
        return fail(d, "expecting ':'");
    }
    next(d);
    spaces(d);
    return 0;
}

static int check_json(doc *d)
{
    uint8_t open[RL_JSON_MAX_DEPTH]; /* '[' or '{' of each open container */
    detect(d);
    next(d);
    d->at = 0;
    spaces(d);
    for (;;) {
        /* A value starts at d->c. */
        int32_t c = d->c;
        int rc = 0;
        if (c == '[' || c == '{') {
            if (d->depth == RL_JSON_MAX_DEPTH) {
                snprintf(d->why, RL_MSG_MAX,
                         "not valid JSON here: nested deeper than %d "
                         "(character %zu)",
                         RL_JSON_MAX_DEPTH, d->at);
                return RL_EFIELD;
            }
            open[d->depth++] = (uint8_t)c;
            next(d);
            spaces(d);
            if (d->c != (c == '[' ? ']' : '}')) {
                if (c == '{' && key(d) != 0) {
                    return RL_EFIELD;
                }
                continue; /* its first value */
            }
            next(d);
            d->depth--;
        } else if (c == '"') {
            rc = string(d);
        } else if (c == 't') {
            rc = word(d, "true");
        } else if (c == 'f') {
            rc = word(d, "false");
        } else if (c == 'n') {
            rc = word(d, "null");
        } else if (c == 'N') {
            rc = word(d, "NaN");
        } else if (c == 'I') {
            rc = word(d, "Infinity");
        } else {
            rc = number(d);
        }
        if (rc != 0) {
            return rc;
        }
        /* After a value: close containers until one goes on. */
        for (;;) {
            spaces(d);
            if (d->depth == 0) {
                return d->c == END ? 0 : fail(d, "extra data");
            }
            uint8_t o = open[d->depth - 1];
            if (d->c == ',') {
                next(d);
                spaces(d);
                if (o == '{' && key(d) != 0) {
                    return RL_EFIELD;
                }
                break;
            }
            if (d->c != (o == '[' ? ']' : '}')) {
                return fail(d, o == '[' ? "expecting ',' or ']'"
                                        : "expecting ',' or '}'");
            }
            next(d);
            d->depth--;
        }
    }
}

/* ---- text and integers ---- */

static int check_utf8(const uint8_t *s, size_t n, char *why)
{
    uint32_t cp;
    for (size_t i = 0; i < n;) {
        size_t len = utf8_char(s + i, n - i, false, &cp);
        if (len == 0) {
            snprintf(why, RL_MSG_MAX,
                     "not UTF-8: byte 0x%02x at %zu starts no character", s[i],
                     i);
            return RL_EFIELD;
        }
        i += len;
    }
    return 0;
}

static bool py_space(uint8_t c)
{
    return c == ' ' || (c >= '\t' && c <= '\r');
}

/* int(bytes): ASCII whitespace around, a sign, digits with single
 * underscores between them; then within int64. */
static int check_int(const uint8_t *s, size_t n, int max_digits, char *why)
{
    size_t i = 0, digits = 0;
    while (i < n && py_space(s[i])) {
        i++;
    }
    bool minus = i < n && s[i] == '-';
    if (i < n && (s[i] == '-' || s[i] == '+')) {
        i++;
    }
    uint64_t v = 0, limit = minus ? (uint64_t)INT64_MAX + 1 : INT64_MAX;
    bool over = false;
    while (i < n && is_digit(s[i])) {
        uint64_t d = (uint64_t)(s[i] - '0');
        over = over || v > (limit - d) / 10;
        v = over ? v : v * 10 + d;
        digits++;
        i++;
        if (i + 1 < n && s[i] == '_' && is_digit(s[i + 1])) {
            i++;
        }
    }
    while (i < n && py_space(s[i])) {
        i++;
    }
    if (digits == 0 || i != n) {
        snprintf(why, RL_MSG_MAX, "not an integer (int() refuses it)");
        return RL_EFIELD;
    }
    if (max_digits > 0 && digits > (size_t)max_digits) {
        snprintf(why, RL_MSG_MAX,
                 "an integer of %zu digits, over Python's limit of %d", digits,
                 max_digits);
        return RL_EFIELD;
    }
    if (over) {
        snprintf(why, RL_MSG_MAX, "an integer out of the int64 range");
        return RL_EFIELD;
    }
    return 0;
}

int rl_field_check_bytes(int kind, const uint8_t *s, size_t n, int max_digits,
                         char *why)
{
    static const uint8_t none[1];
    s = s != NULL ? s : none; /* an empty member */
    switch (kind) {
    case RL_FIELD_UTF8:
        return check_utf8(s, n, why);
    case RL_FIELD_JSON: {
        doc d = {.s = s, .n = n, .max_digits = max_digits, .why = why};
        return check_json(&d);
    }
    case RL_FIELD_INT:
        return check_int(s, n, max_digits, why);
    default:
        return 0;
    }
}
