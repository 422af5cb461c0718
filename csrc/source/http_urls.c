/*
 * source/http_urls.c - the HTTP source's objects by name and their fetch
 * URLs, with nothing kept per object but what the caller's blob holds.
 *
 * DESIGN: the objects' display names are borrowed as one blob with its
 * offsets (rl_strings, the Python side's StringBlob): a name is written
 * out (prefix + its bytes) when a message or a request needs it. Fetch
 * URLs are either copied as one blob (presigned URLs, one an object by
 * nature; replaced whole by set_urls) or made from the name when an
 * attempt is prepared: an http(s):// name is its URL, an s3:// name its
 * bucket's base URL and its key percent-encoded as S3's canonical
 * request has it. Whether an object is S3's (signed per request, its
 * path sent as it is) is read from its name's first bytes.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "source/http_xfer.h"

static const char S3[] = "s3://";
#define S3_LEN (sizeof(S3) - 1)

int rl_strings_check(const rl_strings *t, const char *what, char *msg)
{
    if (t->n < 0 || t->at == NULL || (t->bytes == NULL && t->len > 0)) {
        snprintf(msg, RL_MSG_MAX, "%s: no strings", what);
        return RL_ECONFIG;
    }
    int64_t k = 0;
    while (k < t->n && t->at[k] <= t->at[k + 1]) {
        k++;
    }
    if (t->at[0] != 0 || k < t->n || (uint64_t)t->at[t->n] > t->len) {
        snprintf(msg, RL_MSG_MAX,
                 "%s: offsets from 0, never falling, within the %zu bytes "
                 "(entry %lld is %lld)",
                 what, t->len, (long long)k, (long long)t->at[k]);
        return RL_ECONFIG;
    }
    if (t->n > 0 && memchr(t->bytes, 0, (size_t)t->at[t->n]) != NULL) {
        snprintf(msg, RL_MSG_MAX, "%s: a string holds a NUL byte", what);
        return RL_ECONFIG;
    }
    return 0;
}

/* String j of t (prefix + its bytes) into buf (cap > 0 bytes), cut to fit.
 * Returns its whole length. */
static size_t string_of(const rl_strings *t, int64_t j, char *buf, size_t cap)
{
    const char *pre = t->prefix != NULL ? t->prefix : "";
    size_t np = strlen(pre), nb = (size_t)(t->at[j + 1] - t->at[j]);
    size_t a = np < cap - 1 ? np : cap - 1;
    size_t b = nb < cap - 1 - a ? nb : cap - 1 - a;
    memcpy(buf, pre, a);
    memcpy(buf + a, t->bytes + t->at[j], b);
    buf[a + b] = '\0';
    return np + nb;
}

void rl__http_name(const http_source *s, int64_t j, char *buf, size_t cap)
{
    string_of(&s->names, j, buf, cap);
}

bool rl__http_is_s3(const http_source *s, int64_t j)
{
    char head[S3_LEN + 1];
    string_of(&s->names, j, head, sizeof(head));
    return memcmp(head, S3, S3_LEN) == 0;
}

/* Object j's whole name, malloc'd (NUL-terminated; *len its length), or
 * NULL when out of memory. */
static char *name_dup(const rl_strings *t, int64_t j, size_t *len)
{
    char probe[1];
    *len = string_of(t, j, probe, sizeof(probe));
    char *out = malloc(*len + 1);
    if (out != NULL) {
        string_of(t, j, out, *len + 1);
    }
    return out;
}

/* The bucket (name[5 .. *bend)) and key (name[*key .. len)) of an s3://
 * name, as the Python side splits one: the bucket ends at the first /, ?
 * or #; the key is the rest, leading slashes dropped. false when either
 * is empty. */
static bool s3_split(const char *name, size_t len, size_t *bend, size_t *key)
{
    size_t b = S3_LEN;
    while (b < len && name[b] != '/' && name[b] != '?' && name[b] != '#') {
        b++;
    }
    size_t k = b;
    while (k < len && name[k] == '/') {
        k++;
    }
    *bend = b;
    *key = k;
    return b > S3_LEN && k < len;
}

/* The base of a bucket (name[5 .. bend)) in u, or -1. */
static int64_t base_of(const rl_http_url_set *u, const char *name, size_t bend)
{
    size_t nb = bend - S3_LEN;
    for (int64_t b = 0; b < u->nbases; b++) {
        if (strlen(u->buckets[b]) == nb &&
            memcmp(u->buckets[b], name + S3_LEN, nb) == 0) {
            return b;
        }
    }
    return -1;
}

static bool unreserved(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
           (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' ||
           c == '~' || c == '/';
}

/* The URL of an S3 object: base, then the key percent-encoded. */
static char *s3_url(const char *base, const char *key, size_t nkey)
{
    size_t nbase = strlen(base), need = nbase + 1;
    for (size_t i = 0; i < nkey; i++) {
        need += unreserved((unsigned char)key[i]) ? 1 : 3;
    }
    char *out = malloc(need);
    if (out == NULL) {
        return NULL;
    }
    static const char hex[] = "0123456789ABCDEF";
    memcpy(out, base, nbase);
    char *w = out + nbase;
    for (size_t i = 0; i < nkey; i++) {
        unsigned char c = (unsigned char)key[i];
        if (unreserved(c)) {
            *w++ = (char)c;
        } else {
            *w++ = '%';
            *w++ = hex[c >> 4];
            *w++ = hex[c & 15];
        }
    }
    *w = '\0';
    return out;
}

char *rl__http_url(const http_source *s, int64_t j)
{
    const rl_http_url_set *u = s->urls;
    size_t len;
    if (u->at != NULL) {
        rl_strings t = {u->bytes, (size_t)u->at[u->n], u->at, u->n, u->prefix};
        return name_dup(&t, j, &len);
    }
    char *name = name_dup(&s->names, j, &len);
    if (name == NULL || strncmp(name, S3, S3_LEN) != 0) {
        return name; /* http(s): the name is the URL */
    }
    size_t bend, key;
    int64_t b = s3_split(name, len, &bend, &key) ? base_of(u, name, bend) : -1;
    /* Checked when the URLs were given: every S3 name has its base. */
    char *url = b >= 0 ? s3_url(u->bases[b], name + key, len - key) : NULL;
    free(name);
    return url;
}

void rl__http_urls_free(rl_http_url_set *u)
{
    if (u == NULL) {
        return;
    }
    for (int64_t b = 0; b < u->nbases; b++) {
        free(u->buckets[b]);
        free(u->bases[b]);
    }
    free(u->buckets);
    free(u->bases);
    free(u->bytes);
    free(u->at);
    free(u->prefix);
    free(u);
}

/* Whether every s3:// name of names has a key and a base in u. RL_ECONFIG
 * with msg naming the first that has not, -ENOMEM, or 0. */
static int check_s3_names(const rl_strings *names, const rl_http_url_set *u,
                          char *msg)
{
    for (int64_t j = 0; j < names->n; j++) {
        char head[S3_LEN + 1];
        string_of(names, j, head, sizeof(head));
        if (memcmp(head, S3, S3_LEN) != 0) {
            continue;
        }
        size_t len, bend, key;
        char *name = name_dup(names, j, &len);
        if (name == NULL) {
            snprintf(msg, RL_MSG_MAX, "out of memory");
            return -ENOMEM;
        }
        int rc = 0;
        if (!s3_split(name, len, &bend, &key)) {
            snprintf(msg, RL_MSG_MAX, "%.150s: an S3 URL is s3://bucket/key",
                     name);
            rc = RL_ECONFIG;
        } else if (base_of(u, name, bend) < 0) {
            snprintf(msg, RL_MSG_MAX,
                     "%.150s: no URL is known for the GETs of its bucket "
                     "(urls: give each bucket's base)",
                     name);
            rc = RL_ECONFIG;
        }
        free(name);
        if (rc != 0) {
            return rc;
        }
    }
    return 0;
}

static char *dup_or_empty(const char *v)
{
    return strdup(v != NULL ? v : "");
}

int rl__http_urls_make(const rl_strings *names, const rl_http_urls *in,
                       rl_http_url_set **out, char *msg)
{
    *out = NULL;
    msg[0] = '\0';
    if (in->urls.at != NULL) {
        int rc = rl_strings_check(&in->urls, "urls", msg);
        if (rc == 0 && in->urls.n != names->n) {
            snprintf(msg, RL_MSG_MAX, "urls: %lld for %lld objects (one each)",
                     (long long)in->urls.n, (long long)names->n);
            rc = RL_ECONFIG;
        }
        if (rc != 0) {
            return rc;
        }
    }
    rl_http_url_set *u = calloc(1, sizeof(*u));
    size_t nb = (size_t)(in->nbases > 0 ? in->nbases : 1);
    bool ok = u != NULL && (u->buckets = calloc(nb, sizeof(char *))) != NULL &&
              (u->bases = calloc(nb, sizeof(char *))) != NULL;
    for (int64_t b = 0; ok && b < in->nbases; b++) {
        u->nbases = b + 1;
        ok = (u->buckets[b] = dup_or_empty(in->buckets[b])) != NULL &&
             (u->bases[b] = dup_or_empty(in->bases[b])) != NULL;
    }
    if (ok && in->urls.at != NULL) {
        size_t nbytes = (size_t)in->urls.at[in->urls.n];
        u->n = in->urls.n;
        u->bytes = malloc(nbytes > 0 ? nbytes : 1);
        u->at = malloc(sizeof(*u->at) * (size_t)(u->n + 1));
        u->prefix = dup_or_empty(in->urls.prefix);
        ok = u->bytes && u->at && u->prefix;
        if (ok) {
            memcpy(u->bytes, in->urls.bytes, nbytes);
            memcpy(u->at, in->urls.at, sizeof(*u->at) * (size_t)(u->n + 1));
        }
    }
    if (!ok) {
        rl__http_urls_free(u);
        snprintf(msg, RL_MSG_MAX, "out of memory for the fetch URLs");
        return -ENOMEM;
    }
    int rc = u->at == NULL ? check_s3_names(names, u, msg) : 0;
    if (rc != 0) {
        rl__http_urls_free(u);
        return rc;
    }
    *out = u;
    return 0;
}
