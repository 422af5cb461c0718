/*
 * core/config.c - the pipeline's configuration, checked and copied at
 * create (core/config.h).
 *
 * DESIGN. rl_pipeline_create() takes a configuration that points into the
 * caller's memory (views, the fields' arrays and refusals, the parts); the
 * pipeline outlives the call, so everything it keeps is copied here, once,
 * and checked as it is copied: a wrong value is an RL_ECONFIG naming it,
 * before any thread starts. After create the pipeline reads only its own
 * copies (p->cfg points at them), and they are freed with it
 * (core/slots.c's last unref). The member checks' copy is core/field_checks.c's.
 * With field_records the per-sample positions are not copied at all: jobs
 * read them from the records (core/field_checks.c's rl__fields_at).
 */
#define _GNU_SOURCE /* strdup */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"

static void fail_msg(char *msg, const char *what, int value)
{
    snprintf(msg, RL_MSG_MAX, what, value);
}

/* The configuration's own checks (the transform's are rl_transform_check). */
bool rl__config_ok(const rl_pipeline_config *cfg, char *msg)
{
    if (cfg->nthreads < 1 || cfg->nthreads > 256) {
        fail_msg(msg, "num_threads must be 1..256, not %d", cfg->nthreads);
        return false;
    }
    if (cfg->source == NULL) {
        snprintf(msg, RL_MSG_MAX, "a pipeline needs a source");
        return false;
    }
    if (cfg->skip_errors &&
        (cfg->max_consecutive_errors < 1 ||
         cfg->max_consecutive_errors > RL_MAX_CONSECUTIVE_ERRORS)) {
        /* Above the bound, replacement keys would repeat (rng.h). */
        snprintf(msg, RL_MSG_MAX,
                 "max_consecutive_errors must be 1..%d, not %d",
                 RL_MAX_CONSECUTIVE_ERRORS, cfg->max_consecutive_errors);
        return false;
    }
    if (cfg->sample.nviews < 1 || cfg->sample.nviews > RL_MAX_VIEWS ||
        cfg->sample.views == NULL) {
        snprintf(msg, RL_MSG_MAX, "a sample has 1..%d views, not %d",
                 RL_MAX_VIEWS, cfg->sample.nviews);
        return false;
    }
    return true;
}

/* The pipeline's own copy of the views, each with its place sized by its
 * transform and its chain drawing as its view; then their one check.
 * Returns 0 or RL_ECONFIG / -ENOMEM with msg. */
static int views_copy(rl_pipeline *p, const rl_sample_spec *s, char *msg)
{
    p->views = malloc(sizeof(rl_view) * (size_t)s->nviews);
    if (p->views == NULL) {
        snprintf(msg, RL_MSG_MAX, "out of memory for a pipeline's views");
        return -ENOMEM;
    }
    size_t bytes = 0;
    for (int v = 0; v < s->nviews; v++) {
        rl_view *view = &p->views[v];
        *view = s->views[v];
        view->place.out_w = view->transform.out_w;
        view->place.out_h = view->transform.out_h;
        view->augment.view = v;
        p->places[v] = view->place;
        bytes += rl_place_sample_bytes(&view->place);
    }
    p->cfg.sample.views = p->views;
    p->sample_bytes = bytes;
    p->varying = p->views[0].transform.varying != 0;
    int rc = rl_sample_views_check(p->views, s->nviews, msg);
    if (rc == 0 && p->cfg.arena_bytes > RL_ARENA_MAX_BYTES) {
        snprintf(msg, RL_MSG_MAX,
                 "arena_bytes %zu is past the maximum of %zu (1 TiB)",
                 p->cfg.arena_bytes, RL_ARENA_MAX_BYTES);
        rc = RL_ECONFIG;
    }
    if (rc == 0 && p->varying && p->cfg.arena_bytes == 0) {
        p->cfg.arena_bytes = RL_ARENA_DEFAULT_BYTES;
    }
    return rc;
}

/* The refusals' messages copied. 0, or -ENOMEM with msg. */
static int refusals_copy(rl_pipeline *p, char *msg)
{
    const rl_pipeline_config *c = &p->cfg;
    p->refusals = calloc((size_t)c->nrefusals + 1, sizeof(char *));
    for (int i = 0; p->refusals != NULL && i < c->nrefusals; i++) {
        if ((p->refusals[i] = strdup(c->refusals[i])) == NULL) {
            break;
        }
    }
    if (p->refusals == NULL ||
        (c->nrefusals > 0 && p->refusals[c->nrefusals - 1] == NULL)) {
        snprintf(msg, RL_MSG_MAX, "out of memory copying refusals");
        return -ENOMEM;
    }
    p->cfg.refusals = (const char *const *)p->refusals;
    return 0;
}

static int fields_copy(rl_pipeline *p, char *msg)
{
    const rl_pipeline_config *c = &p->cfg;
    if (c->image_at == NULL && c->field_records == NULL) {
        p->cfg.checks = NULL; /* only with fields */
        p->cfg.nchecks = 0;
        return 0;
    }
    if (c->field_records != NULL) {
        /* Positions are read from the records as jobs run: only the
         * messages and the checks' names are copied. */
        if (c->image_at != NULL || c->image_len != NULL ||
            c->nchecks > RL_SHARD_RECORDS_MAX_FIELDS) {
            snprintf(msg, RL_MSG_MAX,
                     "field_records: without image_at or image_len, and at "
                     "most %d checks (not %d)",
                     RL_SHARD_RECORDS_MAX_FIELDS, c->nchecks);
            p->cfg.checks = NULL;
            p->cfg.nchecks = 0;
            return RL_ECONFIG;
        }
        int rc = refusals_copy(p, msg);
        return rc != 0 ? rc : rl__checks_copy(p, msg);
    }
    size_t n = (size_t)c->source->count;
    p->image_at = malloc(sizeof(int64_t) * (n ? n : 1));
    p->image_len = malloc(sizeof(int64_t) * (n ? n : 1));
    if (p->image_at == NULL || p->image_len == NULL ||
        c->nchecks > RL_SHARD_RECORDS_MAX_FIELDS) {
        p->cfg.checks = NULL;
        p->cfg.nchecks = 0;
        if (p->image_at != NULL && p->image_len != NULL) {
            snprintf(msg, RL_MSG_MAX, "at most %d checks, not %d",
                     RL_SHARD_RECORDS_MAX_FIELDS, c->nchecks);
            return RL_ECONFIG;
        }
        snprintf(msg, RL_MSG_MAX,
                 "out of memory copying the fields of %zu samples (%zu "
                 "bytes)",
                 n, 2 * sizeof(int64_t) * n);
        return -ENOMEM;
    }
    int rc = refusals_copy(p, msg);
    if (rc != 0) {
        return rc;
    }
    memcpy(p->image_at, c->image_at, sizeof(int64_t) * n);
    memcpy(p->image_len, c->image_len, sizeof(int64_t) * n);
    for (size_t i = 0; i < n; i++) {
        if (p->image_at[i] < -(int64_t)c->nrefusals || p->image_len[i] < 0) {
            snprintf(msg, RL_MSG_MAX,
                     "sample %zu: image_at %lld or image_len %lld out of "
                     "range",
                     i, (long long)p->image_at[i], (long long)p->image_len[i]);
            return RL_ECONFIG;
        }
    }
    p->cfg.image_at = p->image_at;
    p->cfg.image_len = p->image_len;
    return rl__checks_copy(p, msg);
}

static int parts_copy(rl_pipeline *p, char *msg)
{
    const rl_pipeline_config *c = &p->cfg;
    int64_t n = c->nparts;
    if (c->parts == NULL) {
        p->cfg.nparts = 0;
        return 0;
    }
    if (n < 1 || n > c->source->count || c->parts[0] != 0 ||
        c->parts[n] != c->source->count) {
        snprintf(msg, RL_MSG_MAX,
                 "parts: %lld parts of a table of %lld samples must start "
                 "at 0 and end at %lld",
                 (long long)n, (long long)c->source->count,
                 (long long)c->source->count);
        return RL_ECONFIG;
    }
    for (int64_t k = 0; k < n; k++) {
        if (c->parts[k + 1] <= c->parts[k]) {
            snprintf(msg, RL_MSG_MAX,
                     "parts: part %lld is empty or out of order (%lld..%lld)",
                     (long long)k, (long long)c->parts[k],
                     (long long)c->parts[k + 1]);
            return RL_ECONFIG;
        }
    }
    if ((p->parts = malloc(sizeof(int64_t) * (size_t)(n + 1))) == NULL) {
        snprintf(msg, RL_MSG_MAX, "out of memory copying %lld parts",
                 (long long)n);
        return -ENOMEM;
    }
    memcpy(p->parts, c->parts, sizeof(int64_t) * (size_t)(n + 1));
    p->cfg.parts = p->parts;
    return 0;
}

/* Whether a view's transform draws an IoU crop, which reads boxes. */
static bool reads_boxes(const rl_pipeline_config *c)
{
    for (int v = 0; v < c->sample.nviews; v++) {
        if (c->sample.views[v].transform.iou_crop)
            return true;
    }
    return false;
}

/* The boxes table's copy (cfg.plan_boxes): 0, or RL_ECONFIG / -ENOMEM. */
static int plan_boxes_copy(rl_pipeline *p, char *msg)
{
    rl_pipeline_config *c = &p->cfg;
    int64_t n = c->source->count, rows = c->plan_box_rows;
    const int64_t *o = c->plan_box_offsets;
    if (o == NULL || c->plan_boxes == NULL) {
        c->plan_boxes = NULL;
        c->plan_box_offsets = NULL;
        if (!reads_boxes(c))
            return 0;
        snprintf(msg, RL_MSG_MAX,
                 "RandomIoUCrop draws its crop from each sample's boxes: "
                 "the pipeline needs a boxes table (plan_boxes)");
        return RL_ECONFIG;
    }
    for (int64_t i = 0; i <= n; i++) {
        int64_t lo = i > 0 ? o[i - 1] : 0;
        if (o[i] < lo || o[i] > rows || (i == n && o[i] != rows)) {
            snprintf(msg, RL_MSG_MAX,
                     "plan_boxes: offset %lld (%lld) must be in %lld..%lld, "
                     "never falling, the last the row count",
                     (long long)i, (long long)o[i], (long long)lo,
                     (long long)rows);
            return RL_ECONFIG;
        }
    }
    for (int64_t k = 0; k < 4 * rows; k++) {
        if (!isfinite(c->plan_boxes[k])) {
            snprintf(msg, RL_MSG_MAX,
                     "plan_boxes: row %lld holds a NaN or an infinity",
                     (long long)(k / 4));
            return RL_ECONFIG;
        }
    }
    size_t ob = sizeof(int64_t) * (size_t)(n + 1);
    size_t bb = sizeof(double) * 4 * (size_t)(rows > 0 ? rows : 1);
    if ((p->plan_box_offsets = malloc(ob)) == NULL ||
        (p->plan_boxes = malloc(bb)) == NULL) {
        snprintf(msg, RL_MSG_MAX, "out of memory copying %lld boxes",
                 (long long)rows);
        return -ENOMEM;
    }
    memcpy(p->plan_box_offsets, o, ob);
    memcpy(p->plan_boxes, c->plan_boxes, sizeof(double) * 4 * (size_t)rows);
    c->plan_box_offsets = p->plan_box_offsets;
    c->plan_boxes = p->plan_boxes;
    return 0;
}

int rl__config_copy(rl_pipeline *p, const rl_pipeline_config *cfg, char *msg)
{
    int rc = views_copy(p, &cfg->sample, msg);
    if (rc == 0) {
        rc = fields_copy(p, msg);
    }
    if (rc == 0) {
        rc = parts_copy(p, msg);
    }
    if (rc == 0) {
        rc = plan_boxes_copy(p, msg);
    }
    return rc;
}
