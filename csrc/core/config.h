/*
 * core/config.h - the pipeline's configuration checked and copied at
 * create (core/config.c). Internal to core/pipeline.c.
 */
#ifndef RL_CORE_CONFIG_H
#define RL_CORE_CONFIG_H

#include "core/pipeline_internal.h"

/* The configuration's own checks, before anything is made (the
 * transform's are rl_sample_views_check, in rl__config_copy). Returns
 * whether cfg is usable; when not, msg says why (an RL_ECONFIG). */
bool rl__config_ok(const rl_pipeline_config *cfg, char *msg);

/* The pipeline's own copies of what cfg points to, checked, in p (p->cfg
 * already a copy of *cfg, pointed at the copies as they are made): the
 * views with their places and p->sample_bytes, then (when given) the
 * fields' image_at, image_len and refusals with the member checks
 * (rl__checks_copy), then the parts. Returns 0, or RL_ECONFIG or -ENOMEM
 * with msg; what was copied is freed with the pipeline either way. */
int rl__config_copy(rl_pipeline *p, const rl_pipeline_config *cfg, char *msg);

#endif /* RL_CORE_CONFIG_H */
