/*
 * source/http_sign.c - S3 GETs signed per request: the keys the HTTP
 * source holds (rl_http_source_set_keys) and the options that make
 * libcurl sign an attempt with them (AWS Signature Version 4).
 *
 * DESIGN: libcurl (CURLOPT_AWS_SIGV4, 7.75+) computes the signature: its
 * canonical request is the method, the URL's path exactly as given, the
 * query (none: a URL with one is presigned and left alone), the headers
 * host, x-amz-content-sha256, x-amz-date and x-amz-security-token, and
 * the payload hash taken from x-amz-content-sha256. libcurl 7.88.1 does
 * not encode the path itself (later versions leave S3's alone too), so
 * the URL's path must already be S3's canonical form of the key: each
 * byte but A-Z a-z 0-9 - . _ ~ / as %XX, which is how the Python side
 * writes it (datasets/presign.py, key_path); "a/./b" and "a/../b" are
 * sent as they are (CURLOPT_PATH_AS_IS, set for S3 objects).
 *
 * The secret and the token reach libcurl's options and the headers of
 * the request, never a message. What this source owns is wiped before it
 * is freed: the keys (the secret and the token line, when they are
 * replaced or the source destroyed) and each attempt's header list (the
 * token line is one of its strings). An easy handle that goes back to
 * the pool has its signing options (CURLOPT_AWS_SIGV4, CURLOPT_USERNAME,
 * CURLOPT_PASSWORD, CURLOPT_HTTPHEADER) set to NULL first, so an idle
 * handle holds no key and cannot sign. Not wiped: libcurl's own copies,
 * which are libcurl's to free and which it frees without wiping them
 * (the strings CURLOPT_USERNAME and CURLOPT_PASSWORD copy, released when
 * the option is set again, to NULL on return to the pool, or when the
 * handle is cleaned up; the request it builds, token line included, in
 * its buffers), nor the Python strings the keys came from.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "source/http_xfer.h"

/* The SHA-256 of an empty body, a GET's payload: S3 wants the payload's
 * hash in x-amz-content-sha256, and libcurl signs the value given there. */
#define EMPTY_SHA256 \
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

bool rl_http_sigv4(void)
{
#if LIBCURL_VERSION_NUM >= 0x074b00
    return curl_version_info(CURLVERSION_NOW)->version_num >= 0x074b00;
#else
    return false;
#endif
}

/* Signs e's request with keys k (under s->mu: the strings are copied by
 * libcurl, the header lines into x->hdrs), or turns signing off (k NULL).
 * The canonical request is libcurl's: the URL's path as it is (S3's
 * canonical form already, see rl_http_source_set_keys), no query, the
 * headers host, x-amz-content-sha256, x-amz-date and x-amz-security-token;
 * Range is sent unsigned, as S3 allows. */
CURLcode rl__http_sign_attempt(xfer *x, CURL *e, const rl_http_keys *k)
{
    x->sign = k != NULL;
#if LIBCURL_VERSION_NUM >= 0x074b00
    if (k != NULL) {
        struct curl_slist *h =
            curl_slist_append(NULL, "x-amz-content-sha256: " EMPTY_SHA256);
        if (h != NULL && k->token[0] != '\0') {
            struct curl_slist *t = curl_slist_append(h, k->token);
            if (t == NULL) {
                rl__http_headers_free(h);
            }
            h = t;
        }
        if (h == NULL) {
            return CURLE_OUT_OF_MEMORY;
        }
        x->hdrs = h;
        CURLcode rc = curl_easy_setopt(e, CURLOPT_AWS_SIGV4, k->sigv4);
        if (rc == CURLE_OK) {
            rc = curl_easy_setopt(e, CURLOPT_USERNAME, k->access);
        }
        if (rc == CURLE_OK) {
            rc = curl_easy_setopt(e, CURLOPT_PASSWORD, k->secret);
        }
        curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
        /* A signature is for one host; a redirect would also carry the
         * session token to wherever it leads. */
        curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
        return rc;
    }
#endif
    rl__http_unsign(e);
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 1L);
    return CURLE_OK;
}

void rl__http_unsign(CURL *e)
{
#if LIBCURL_VERSION_NUM >= 0x074b00
    curl_easy_setopt(e, CURLOPT_AWS_SIGV4, NULL);
#endif
    /* Setting CURLOPT_AWS_SIGV4 chose SigV4 as the scheme; NULL does not
     * undo that, this does (and with no user name nothing is sent). */
    curl_easy_setopt(e, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
    curl_easy_setopt(e, CURLOPT_USERNAME, NULL);
    curl_easy_setopt(e, CURLOPT_PASSWORD, NULL);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, NULL);
}

void rl__http_headers_free(struct curl_slist *h)
{
    /* The list and its strings are ours (curl_slist_append copies each
     * line into memory the application frees), so they can be wiped. */
    for (struct curl_slist *i = h; i != NULL; i = i->next) {
        explicit_bzero(i->data, strlen(i->data));
    }
    curl_slist_free_all(h);
}

/* A copy of a key's field: non-empty, at most max bytes, no control
 * character (it goes into a header line), no ':' when colon is false.
 * NULL when it is none of those or out of memory (*bad tells which). */
static char *key_field(const char *v, size_t max, bool colon, bool *bad)
{
    size_t n = v != NULL ? strlen(v) : 0;
    bool ok = n > 0 && n <= max && (colon || strchr(v, ':') == NULL);
    for (size_t i = 0; ok && i < n; i++) {
        ok = (unsigned char)v[i] >= 0x20 && v[i] != 0x7f;
    }
    *bad = *bad || !ok;
    return ok ? strdup(v) : NULL;
}

int rl__http_keys_make(const char *region, const char *access,
                       const char *secret, const char *token,
                       rl_http_keys **out)
{
    if (!rl_http_sigv4()) {
        return -ENOTSUP;
    }
    rl_http_keys *k = calloc(1, sizeof(*k));
    if (k == NULL) {
        return -ENOMEM;
    }
    bool bad = false;
    char *reg = key_field(region, 48, false, &bad);
    k->access = key_field(access, 256, false, &bad);
    k->secret = key_field(secret, 256, true, &bad);
    bool tok = token != NULL && token[0] != '\0';
    char *t = tok ? key_field(token, 16384, true, &bad) : NULL;
    if (reg != NULL) {
        k->sigv4 = malloc(strlen(reg) + sizeof("aws:amz::s3"));
        if (k->sigv4 != NULL) {
            sprintf(k->sigv4, "aws:amz:%s:s3", reg);
        }
    }
    if (t != NULL) {
        k->token = malloc(strlen(t) + sizeof("x-amz-security-token: "));
        if (k->token != NULL) {
            sprintf(k->token, "x-amz-security-token: %s", t);
        }
        explicit_bzero(t, strlen(t));
    } else if (!tok) {
        k->token = strdup("");
    }
    free(reg);
    free(t);
    if (bad || !k->sigv4 || !k->access || !k->secret || !k->token) {
        rl__http_keys_free(k);
        return bad ? -EINVAL : -ENOMEM;
    }
    *out = k;
    return 0;
}

void rl__http_keys_free(rl_http_keys *k)
{
    if (k == NULL) {
        return;
    }
    free(k->sigv4);
    free(k->access);
    if (k->secret != NULL) {
        explicit_bzero(k->secret, strlen(k->secret));
    }
    free(k->secret);
    if (k->token != NULL) {
        explicit_bzero(k->token, strlen(k->token));
    }
    free(k->token);
    free(k);
}
