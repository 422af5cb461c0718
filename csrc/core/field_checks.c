/*
 * core/field_checks.c - the pipeline's side of core/fields.h's field checks:
 * its copy of the config's checks (made at create, freed with the
 * pipeline), and the check a decode job runs on a sample's field bytes
 * before it decodes the image, so that a field Python could not decode
 * fails the sample here, where the skip policy can still replace it.
 *
 * A sample's positions (where its image and each checked member lie in
 * its bytes) come from the pipeline's copies of the config's arrays, or,
 * with field_records, from the sample's record read as its job runs: the
 * job holds them (rl__fields_at) for split_fields and the checks, so the
 * record is read once a candidate.
 */
#define _GNU_SOURCE /* strdup */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/pipeline_internal.h"

void rl__checks_free(rl_pipeline *p)
{
    for (int k = 0; p->checks != NULL && k < p->cfg.nchecks; k++) {
        rl_field_check *c = &p->checks[k];
        free((void *)c->at);
        free((void *)c->len);
        free((void *)c->ext);
        for (int e = 0; e < c->nexts; e++) {
            free((void *)c->exts[e]);
        }
    }
    free(p->checks);
    p->checks = NULL;
}

/* Copies one check, checking its values; c is zeroed by the caller. */
static int copy_check(rl_field_check *c, const rl_field_check *from, size_t n,
                      bool p_records, int k, char *msg)
{
    if (from->nexts < 1 || from->nexts > RL_FIELD_MAX_EXTS) {
        snprintf(msg, RL_MSG_MAX, "check %d: %d extensions (1..%d)", k,
                 from->nexts, RL_FIELD_MAX_EXTS);
        return RL_ECONFIG;
    }
    int64_t *at = p_records ? NULL : malloc(sizeof(int64_t) * (n ? n : 1));
    int64_t *len = p_records ? NULL : malloc(sizeof(int64_t) * (n ? n : 1));
    int8_t *ext = p_records ? NULL : malloc(n ? n : 1);
    c->at = at;
    c->len = len;
    c->ext = ext;
    c->nexts = from->nexts;
    for (int e = 0; e < from->nexts; e++) {
        c->kinds[e] = from->kinds[e];
        c->exts[e] = strdup(from->exts[e] != NULL ? from->exts[e] : "");
        if (c->exts[e] == NULL || from->kinds[e] >= RL_FIELD_KINDS) {
            c->nexts = e + (c->exts[e] != NULL);
            snprintf(msg, RL_MSG_MAX, "check %d: bad extension %d", k, e);
            return c->exts[e] == NULL ? -ENOMEM : RL_ECONFIG;
        }
    }
    c->column = from->column;
    if (p_records) {
        /* Nothing per sample: the columns are read from the records. */
        if (from->column < 0 || from->column >= RL_SHARD_RECORDS_MAX_FIELDS) {
            snprintf(msg, RL_MSG_MAX, "check %d: record column %d", k,
                     from->column);
            return RL_ECONFIG;
        }
        return 0;
    }
    if (at == NULL || len == NULL || ext == NULL) {
        snprintf(msg, RL_MSG_MAX, "out of memory");
        return -ENOMEM;
    }
    memcpy(at, from->at, sizeof(int64_t) * n);
    memcpy(len, from->len, sizeof(int64_t) * n);
    memcpy(ext, from->ext, n);
    for (size_t i = 0; i < n; i++) {
        if (at[i] >= 0 && (len[i] < 0 || ext[i] < 0 || ext[i] >= c->nexts)) {
            snprintf(msg, RL_MSG_MAX,
                     "check %d, sample %zu: length %lld or extension %d out "
                     "of range",
                     k, i, (long long)len[i], ext[i]);
            return RL_ECONFIG;
        }
    }
    return 0;
}

int rl__checks_copy(rl_pipeline *p, char *msg)
{
    int nc = p->cfg.nchecks;
    const rl_field_check *from = p->cfg.checks;
    p->cfg.checks = NULL; /* the caller's, until copied */
    if (nc <= 0 || from == NULL) {
        p->cfg.nchecks = 0;
        return 0;
    }
    size_t n = (size_t)p->cfg.source->count;
    if ((p->checks = calloc((size_t)nc, sizeof(*p->checks))) == NULL) {
        p->cfg.nchecks = 0;
        snprintf(msg, RL_MSG_MAX, "out of memory");
        return -ENOMEM;
    }
    for (int k = 0; k < nc; k++) {
        int rc = copy_check(&p->checks[k], &from[k], n,
                            p->cfg.field_records != NULL, k, msg);
        if (rc != 0) {
            p->cfg.nchecks = k + 1; /* what rl__checks_free walks */
            return rc;
        }
    }
    p->cfg.checks = p->checks;
    return 0;
}

bool rl__has_fields(const rl_pipeline *p)
{
    return p->image_at != NULL || p->cfg.field_records != NULL;
}

/* Sample id's positions from its record into j. */
static int record_at(rl_pipeline *p, rl__job *j, int64_t id)
{
    rl_shard_fields_record r;
    int rc = rl_shard_records_get_fields(p->cfg.field_records, id, &r, j->msg,
                                         RL_MSG_MAX);
    if (rc != 0) {
        return rc;
    }
    /* The record's values are checked here, as config.c checks arrays:
     * a record file is data, and a bad one fails its sample, never reads
     * out of bounds. */
    const char *bad = NULL;
    if (r.image_at < -(int64_t)p->cfg.nrefusals || r.image_len < 0) {
        bad = "its image_at or image_len";
    }
    for (int k = 0; bad == NULL && k < p->cfg.nchecks; k++) {
        const rl_field_check *c = &p->checks[k];
        if (c->column >= r.nfields) {
            bad = "fewer field columns than the selection's";
            break;
        }
        j->at[k] = r.at[c->column];
        j->len[k] = r.size[c->column];
        int64_t e = r.ext[c->column];
        if (j->at[k] >= 0 && (j->len[k] < 0 || e < 0 || e >= c->nexts)) {
            bad = "a member's size or extension";
        }
        j->ext[k] = (int)e;
    }
    if (bad != NULL) {
        const char *file = rl_shard_records_path(p->cfg.field_records, id);
        snprintf(j->msg, RL_MSG_MAX,
                 "sample %lld: its record in %s holds %s out of range (a "
                 "corrupt record file; remove it, and opening the shard set "
                 "again rebuilds it)",
                 (long long)id, file ? file : "?", bad);
        return -EBADMSG;
    }
    j->image_at = r.image_at;
    j->image_len = r.image_len;
    return 0;
}

int rl__fields_at(rl_pipeline *p, rl__job *j, int64_t id)
{
    if (p->cfg.field_records != NULL) {
        return record_at(p, j, id);
    }
    j->image_at = p->image_at[id];
    j->image_len = p->image_len[id];
    for (int k = 0; k < p->cfg.nchecks; k++) {
        const rl_field_check *c = &p->checks[k];
        j->at[k] = c->at[id];
        j->len[k] = c->len[id];
        j->ext[k] = c->ext[id];
    }
    return 0;
}

int rl__fields_check(rl_pipeline *p, rl__job *j)
{
    for (int k = 0; k < p->cfg.nchecks; k++) {
        const rl_field_check *c = &p->checks[k];
        int64_t at = j->at[k], len = j->len[k];
        int e = j->ext[k];
        if (at < 0 || c->kinds[e] == RL_FIELD_ANY) {
            continue;
        }
        if ((uint64_t)at + (uint64_t)len > j->fields_len) {
            snprintf(j->msg, RL_MSG_MAX,
                     "its .%s member at %lld..%lld lies outside the %zu "
                     "bytes read",
                     c->exts[e], (long long)at, (long long)(at + len),
                     j->fields_len);
            return -EIO;
        }
        char why[RL_MSG_MAX];
        if (rl_field_check_bytes(c->kinds[e], j->fields + at, (size_t)len,
                                 p->cfg.max_int_digits, why) != 0) {
            int k0 =
                snprintf(j->msg, RL_MSG_MAX, "its .%s member is ", c->exts[e]);
            size_t used = k0 < 0             ? 0
                          : k0 >= RL_MSG_MAX ? RL_MSG_MAX - 1
                                             : (size_t)k0;
            size_t room = RL_MSG_MAX - 1 - used, wl = strlen(why);
            memcpy(j->msg + used, why, wl < room ? wl : room);
            j->msg[used + (wl < room ? wl : room)] = '\0';
            return RL_EFIELD;
        }
    }
    return 0;
}
