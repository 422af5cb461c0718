/*
 * augment/augment.h - the augment stage: per-sample ops on the 8-bit image
 * after crop and resize, before the output conversion.
 *
 * torchvision applies ColorJitter, RandAugment and the like to the cropped,
 * resized image; so does this stage, in the user's order. When a pipeline
 * has ops, the place stage resamples each sample into an 8-bit RGB image
 * (rl_image) owned by the worker thread, the chain runs on it in place, and
 * the place stage's store converts it into the batch slot; without ops the
 * resampler writes straight into the slot, as before.
 *
 * An op is one table entry (rl_op_def): an optional draw of its random
 * parameters from the sample's own stream (rng.h, RL_RNG_AUGMENT: a pure
 * function of seed, epoch and key, so batches stay bit-identical whatever
 * the thread count and resuming replays them), and an apply. The chain
 * draws every op's parameters in order before applying any, so an op's
 * draws never depend on the pixels. A new op is one entry in
 * augment/ops.c's table (see docs/ARCHITECTURE.md, "Adding an augmentation op").
 *
 * A group (RandomApply, RandomChoice, RandomOrder, a Compose inside one of
 * them: group.c) is an element of the chain like an op, with a draw of
 * its own and, instead of an apply, a `pick` of which of its children run
 * and in what order. Its children are the sub-chains right before it: the
 * chain is written in postfix order (children, then their group), so that
 * every prefix of a chain is a whole chain and rl_augment_add checks a
 * group against what came before it. [a, b, random_apply(2), c] is
 * RandomApply([a, b]) then c; every element, in or out of a group, draws
 * from its own place in the chain whether it runs or not.
 * Everything here is called on pool workers, without the GIL.
 */
#ifndef RL_AUGMENT_H
#define RL_AUGMENT_H

#include "place/place.h"
#include "rl.h"
#include "rng.h"

/* An 8-bit RGB image, 3 bytes a pixel, rows `stride` bytes apart. */
typedef struct rl_image {
    uint8_t *data;
    int w, h;
    size_t stride;
} rl_image;

/* Configuration of one op: a policy's magnitude tables (11 ops x up to 32
 * bins, made by Python with torch, as torchvision makes them) fit. */
#define RL_OP_MAX_ARGS 384
#define RL_OP_MAX_PARAMS 16 /* random parameters of one op, per sample */
#define RL_AUGMENT_MAX_OPS 16
/* The children a group may have (RandomOrder's order is its parameters). */
#define RL_GROUP_MAX_CHILDREN RL_OP_MAX_PARAMS

typedef struct rl_op rl_op;

/*
 * The layout of an op's arguments, shared with Python: a list of fields,
 * ending with RL_OP_END, that lay out args[] in order. A field is `count`
 * doubles, or, with `record`, `count` records each laid out by that list
 * (a row of a table). The module exports every op's list as
 * _core.OP_ARGS, and ringloader/_steps.py packs arguments by these names,
 * so an op's layout is written here once.
 *
 * An op's code reads args[] at offsets made from the same list: written as
 * a list macro of X(prefix, name, count, record prefix), with RL_ARG_ as
 * the record prefix of plain doubles,
 *     #define ROT_ARGS(X) X(ROT_, degrees, 2, RL_ARG_) \
 *                         X(ROT_, fill, 3, RL_ARG_)
 *     enum { ROT_ARGS(RL_OP_ARG_AT) ROT_NARGS };
 *     static const rl_op_field ROT_fields[] = {ROT_ARGS(RL_OP_FIELD) RL_OP_END};
 * gives ROT_degrees = 0, ROT_fill = 2, ROT_NARGS = 5 and the field list. A
 * field of records of list REC_ uses REC_NARGS (a record's doubles) and
 * REC_fields.
 */
typedef struct rl_op_field {
    const char *name;
    int count;                        /* doubles, or records of `record` */
    const struct rl_op_field *record; /* NULL: plain doubles */
} rl_op_field;

#define RL_OP_ARG_AT(p, name, count, rec) \
    p##name, p##name##_end_ = p##name + (count)*rec##NARGS - 1,
#define RL_OP_FIELD(p, name, count, rec) {#name, (count), rec##fields},
/* The end of a list of fields, limits or kinds (designated, so that no
 * compiler warns of the fields left out). */
#define RL_OP_END    \
    {                \
        .name = NULL \
    }
enum { RL_ARG_NARGS = 1 };
#define RL_ARG_fields NULL

/* A named limit of an op that Python checks before it builds the op's
 * arguments (a bound the op's check enforces); lists end with RL_OP_END. */
typedef struct rl_op_limit {
    const char *name;
    int value;
} rl_op_limit;

/*
 * How an image op moved a sample's pixels, for the targets that follow
 * them (targets/plan_geom.h): torchvision's affine(angle, translate,
 * scale, shear, center) (AFFINE: angle clockwise, as affine takes it) or
 * rotate(angle, center) without expand (ROTATE: angle counter-clockwise,
 * the exact turns rotate_image makes for the default centre included).
 * centre: pixel coordinates, or the canvas' centre where `centered` is
 * false.
 */
typedef enum {
    RL_WARP_AFFINE = 0,
    RL_WARP_ROTATE = 1,
    RL_WARP_PERSPECTIVE = 2,
    RL_WARP_NONE = 3
} rl_warp_kind;

/* PERSPECTIVE: torchvision's perspective(coefficients=coeffs), the 8
 * output-to-input coefficients (float32 values, as _get_perspective_coeffs
 * gives them); the other fields unused. NONE: the op moved no pixel for
 * these params (its p said no): rl_augment_warps leaves it out. */
typedef struct rl_op_warp {
    rl_warp_kind kind;
    double angle, tx, ty, scale, shear_x, shear_y;
    double center[2];
    bool centered;
    double coeffs[8];
} rl_op_warp;

/* The most warps rl_augment_warps reports for a sample (a group's child
 * may run more than once). */
#define RL_AUGMENT_MAX_WARPS 64

typedef struct rl_op_def {
    const char *name;
    int nargs; /* arguments the op takes, at most RL_OP_MAX_ARGS */
    /* The layout of args[]: the fields' sizes add up to nargs. */
    const rl_op_field *fields;
    const rl_op_limit *limits; /* NULL: none */
    /* Checks the arguments once, at configuration: 0, or RL_ECONFIG with
     * msg saying what is wrong. NULL: any values. */
    int (*check)(const double *args, char *msg);
    /* Draws the op's random parameters for one sample of w x h pixels (the
     * output size) into params. NULL: the op draws nothing. */
    void (*draw)(const rl_op *op, rl_rng *g, int w, int h, double *params);
    /* Applies the op to img in place. Returns 0, or a status with msg
     * (-ENOMEM for scratch memory). NULL for an output op. */
    int (*apply)(const rl_op *op, const double *params, rl_image *img,
                 char *msg);
    /* An output op (RandomErasing after Normalize, as users write it) runs
     * instead on the sample's w x h pixels in the slot, after the store,
     * in the output's dtype and values. NULL for an image op. Output ops
     * come after every image op of a chain. */
    int (*apply_out)(const rl_op *op, const double *params, const rl_dst *out,
                     int w, int h, char *msg);
    /* A group's choice, instead of apply (which is NULL): writes into run[]
     * the indices (0 .. children - 1, in chain order) of the children that
     * run for this sample, in the order they run (at most
     * RL_GROUP_MAX_CHILDREN of them; one may repeat), and returns how many.
     * NULL for an op. A group's first argument field is `children`, the
     * number of sub-chains before it that it holds (1 ..
     * RL_GROUP_MAX_CHILDREN); its children are image ops or groups. */
    int (*pick)(const rl_op *op, const double *params, int *run);
    /* A source op (an image op: apply set) runs on the whole decoded image
     * before the geometry, as torchvision runs a colour transform written
     * before the crops and resizes: its blends' means are the whole
     * image's, and a crop's padding is never coloured (core/sample.c
     * decodes the whole image at full scale for it). Source ops come first
     * in a chain, in no group. */
    bool source;
    /* How the image op moves the pixels of a w x h sample for params
     * (what its apply does to them), for the targets that follow them.
     * NULL: the op moves no pixel (`still`), or the targets cannot follow
     * it (rl_augment_warps refuses it, naming it). */
    void (*warp)(const rl_op *op, const double *params, int w, int h,
                 rl_op_warp *out);
    /* An image op that moves no pixel (a colour op): the targets stay. */
    bool still;
} rl_op_def;

struct rl_op {
    const rl_op_def *def;
    double args[RL_OP_MAX_ARGS];
    /* Set by rl_augment_add: the elements of the sub-chain this element
     * ends (itself and, for a group, its children's, recursively), and a
     * group's children (0 for an op). */
    int span, children;
};

/* A chain of ops, run in order; n = 0 is the empty chain. `view` is the
 * view of the sample the chain belongs to (core/sample.h): its draws come
 * from that view's part of the augment stream (rng.h's rl_rng_view). */
typedef struct rl_augment {
    rl_op ops[RL_AUGMENT_MAX_OPS];
    int n;
    int view;
} rl_augment;

/* The built-in ops, one table a file of ops (augment/ops.c lists the
 * tables), each ending with NULL. */
extern const rl_op_def *const rl_color_ops[];       /* color_ops.c */
extern const rl_op_def *const rl_geometry_ops[];    /* geometry.c */
extern const rl_op_def *const rl_perspective_ops[]; /* perspective.c */
extern const rl_op_def *const rl_policy_ops[];      /* policy.c */
extern const rl_op_def *const rl_augmix_ops[];      /* augmix.c */
extern const rl_op_def *const rl_output_ops[];      /* erase.c */
extern const rl_op_def *const rl_group_ops[];       /* group.c */
extern const rl_op_def *const rl_timm_ops[];        /* timm.c */
extern const rl_op_def *const rl_photometric_ops[]; /* photometric.c */
/* Those tables, ending with NULL (ops.c). */
extern const rl_op_def *const *const rl_op_tables[];

/* The built-in op called name, or NULL. */
const rl_op_def *rl_op_find(const char *name);

/* The doubles a field list lays out (records counted in full), or -1 for
 * a malformed list: a field without a name, a negative count, an empty
 * record, or two fields of one list with the same name. */
int rl_op_fields_size(const rl_op_field *fields);

/* Checks that def describes its arguments: a well-formed field list whose
 * size is its nargs, at most RL_OP_MAX_ARGS, and, for a group, a first
 * field `children` of one number and no apply or apply_out. 0, or
 * RL_EINTERNAL with msg.
 * rl_augment_add checks every op it is given; the module checks the
 * built-in ones when it exports them. */
int rl_op_def_check(const rl_op_def *def, char *msg);

/* The policies' sub-op kinds (policy.c), by kind number (the number
 * rl_policy_apply and AugMix's argument rows take), ending with RL_OP_END:
 * torchvision's name, and whether the kind has a row in the policies'
 * magnitude tables (those rows are in kind order). Python takes them from
 * _core.POLICY_KINDS and _core.POLICY_TABLE_KINDS. */
typedef struct rl_policy_kind {
    const char *name;
    bool table;
} rl_policy_kind;
extern const rl_policy_kind rl_policy_kinds[];
#define RL_POLICY_N_KINDS 15 /* Identity .. Invert */

/* AutoAugment's policies by the number of its `policy` argument (policy.c),
 * ending with NULL: torchvision's AutoAugmentPolicy values
 * (_core.AUTO_AUGMENT_POLICIES). */
extern const char *const rl_auto_augment_policies[];

/* timm's op names (the kinds of its policies' rows) and its op functions
 * (timm_op's `func`), by number, ending with NULL (timm.c): Python takes
 * them from _core.TIMM_KINDS and _core.TIMM_FUNCS. */
extern const char *const rl_timm_kinds[];
extern const char *const rl_timm_funcs[];

/*
 * Appends op def with nargs arguments to the chain. Returns 0, or
 * RL_ECONFIG with msg: a full chain, a wrong argument count, arguments its
 * check refuses, an image op after an output op, or a group with more
 * children than the chain has sub-chains before it (not already in a
 * group) or with an output op among them; RL_EINTERNAL with msg for a def
 * whose fields do not describe its nargs (rl_op_def_check: a bug in the
 * def, not in the user's configuration). On error the chain is unaltered.
 */
int rl_augment_add(rl_augment *a, const rl_op_def *def, const double *args,
                   int nargs, char *msg);

/* The number of image ops and groups that run on the output-sized image
 * (the elements before the store, source ops left out) of the chain. */
int rl_augment_image_ops(const rl_augment *a);

/* The number of source ops of the chain (its first elements). */
int rl_augment_source_ops(const rl_augment *a);

/*
 * Draws the parameters of every op of the chain for sample (seed, epoch,
 * key) of w x h pixels into params[i * RL_OP_MAX_PARAMS ...] (a caller's
 * array of a->n * RL_OP_MAX_PARAMS doubles). The same numbers
 * rl_augment_run uses: tests apply torchvision with them.
 */
void rl_augment_draw(const rl_augment *a, uint64_t seed, int64_t epoch,
                     int64_t key, int w, int h, double *params);

/* Runs the chain's image ops but its source ops on img for sample (seed,
 * epoch, key), given the chain's params from rl_augment_draw: the
 * elements outside groups in order, each group running the children its
 * pick says. Returns 0 or the first failing op's status with msg. */
int rl_augment_run(const rl_augment *a, const double *params, rl_image *img,
                   char *msg);

/* Runs the chain's source ops on img (the whole decoded image), with the
 * same params; 0 or the first failing op's status with msg. */
int rl_augment_run_source(const rl_augment *a, const double *params,
                          rl_image *img, char *msg);

/* Runs the chain's output ops on the w x h sample at out, after the store,
 * with the same params. */
int rl_augment_run_out(const rl_augment *a, const double *params,
                       const rl_dst *out, int w, int h, char *msg);

/*
 * The warps (rl_op_warp) of the chain's image ops that run for params
 * (rl_augment_draw's for a w x h sample), in the order rl_augment_run runs
 * them (groups' picks followed, source and output ops left out: neither
 * moves the output's pixels), into out[RL_AUGMENT_MAX_WARPS]. Returns how
 * many, or -1 with msg naming an image op that moves pixels without a
 * warp (a policy), or a chain running more than RL_AUGMENT_MAX_WARPS.
 * Touches no pixel; thread-safe.
 */
int rl_augment_warps(const rl_augment *a, const double *params, int w, int h,
                     rl_op_warp *out, char *msg);

/* Warps img (any 3 channels: three masks side by side) as torchvision
 * warps a tv_tensors.Mask: nearest, `fill` (3 values) outside, the same
 * kernel as the op's pixels. 0, -ENOMEM, or -EOVERFLOW with msg. */
int rl_augment_warp_nearest(rl_image *img, const rl_op_warp *warp,
                            const double *fill, char *msg);

#endif /* RL_AUGMENT_H */
