/*
 * python/module.c - the ringloader._core module: initialisation and
 * constants, the top of the bindings (it calls each file's init; no file
 * calls it). The functions are in python/tools.c, the types in
 * python/pipeline.c and python/batch.c, test-only functions in
 * testing/py_testing.c (test builds); what every binding file shares (the
 * module state from a type, a str's UTF-8) in python/shared.c.
 *
 * DESIGN: multi-phase initialisation with per-module state and heap types
 * (PEP 489/630), so the module can be loaded in subinterpreters and its
 * types are freed with it.
 */
#include "python/module.h"

#include "core/plan.h"
#include "decode/decode.h"
#include "rng.h"

/* The limits and bit layouts Python must share with the core, defined
 * once in C (rng.h, core/plan.h). 0 or -1. */
static int add_layout_constants(PyObject *m)
{
    static const struct {
        const char *name;
        long value;
    } constants[] = {
        {"KEY_OCCURRENCE_SHIFT", RL_KEY_OCCURRENCE_SHIFT},
        {"KEY_ATTEMPT_SHIFT", RL_KEY_ATTEMPT_SHIFT},
        {"KEY_REPLACEMENT_BIT", RL_KEY_REPLACEMENT_BIT},
        {"MAX_CONSECUTIVE_ERRORS", RL_MAX_CONSECUTIVE_ERRORS},
        {"ARENA_MAX_BYTES", (long)RL_ARENA_MAX_BYTES},
        {"MAX_SIDE", RL_MAX_SIDE},
        {"MAX_SHORT_SIZES", RL_MAX_SHORT_SIZES},
        {"MAX_IOU_OPTIONS", RL_MAX_IOU_OPTIONS},
        {"MAX_VIEWS", RL_MAX_VIEWS},
    };
    for (size_t i = 0; i < sizeof(constants) / sizeof(constants[0]); i++) {
        if (PyModule_AddIntConstant(m, constants[i].name, constants[i].value) <
            0) {
            return -1;
        }
    }
    return 0;
}

static int module_exec(PyObject *m)
{
    rl_module_state *st = PyModule_GetState(m);
    st->decode_error = PyErr_NewExceptionWithDoc(
        "ringloader.DecodeError",
        "An image could not be decoded. Attributes: path (the file), reason "
        "(libjpeg's message), kind ('corrupt', 'truncated', 'too_big', "
        "'not_jpeg').",
        PyExc_ValueError, NULL);
    if (st->decode_error == NULL ||
        PyModule_AddObjectRef(m, "DecodeError", st->decode_error) < 0) {
        return -1;
    }
    if (PyModule_AddStringConstant(m, "libjpeg_version",
                                   rl_decode_libjpeg_version()) < 0 ||
        PyModule_AddIntConstant(m, "DEFAULT_MAX_PIXELS",
                                (long)RL_DEFAULT_MAX_PIXELS) < 0 ||
        PyModule_AddIntConstant(m, "DEFAULT_MAX_SCANS", RL_DEFAULT_MAX_SCANS) <
            0 ||
        add_layout_constants(m) < 0) {
        return -1;
    }
#ifdef RL_HAVE_LIBURING
    if (PyModule_AddIntConstant(m, "built_with_liburing", 1) < 0) {
        return -1;
    }
#else
    if (PyModule_AddIntConstant(m, "built_with_liburing", 0) < 0) {
        return -1;
    }
#endif
    if (rl__py_spec_init(m) < 0 || rl__py_ops_init(m) < 0 ||
        rl__py_stats_init(m) < 0 || rl__py_batch_init(m, st) < 0 ||
        rl__py_pipeline_init(m, st) < 0 || rl__py_masks_init(m) < 0 ||
        PyModule_AddFunctions(m, rl__py_boxes_methods) < 0 ||
        PyModule_AddFunctions(m, rl__py_plan_boxes_methods) < 0 ||
        PyModule_AddFunctions(m, rl__py_draws_methods) < 0) {
        return -1;
    }
    return rl__py_testing_init(m, st);
}

static int module_traverse(PyObject *m, visitproc visit, void *arg)
{
    rl_module_state *st = PyModule_GetState(m);
    Py_VISIT(st->decode_error);
    Py_VISIT(st->pipeline_type);
    Py_VISIT(st->batch_type);
    Py_VISIT(st->devbuf_type);
    return 0;
}

static int module_clear(PyObject *m)
{
    rl_module_state *st = PyModule_GetState(m);
    Py_CLEAR(st->decode_error);
    Py_CLEAR(st->pipeline_type);
    Py_CLEAR(st->batch_type);
    Py_CLEAR(st->devbuf_type);
    return 0;
}

static void module_free(void *m)
{
    module_clear((PyObject *)m);
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "ringloader._core",
    .m_doc = "ringloader's C core: io_uring reads, libjpeg-turbo decode with "
             "fused transforms, batch slots. Private: use the ringloader "
             "package.",
    .m_size = sizeof(rl_module_state),
    .m_methods = rl__py_tool_methods,
    .m_slots = module_slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

PyMODINIT_FUNC PyInit__core(void)
{
    return PyModuleDef_Init(&module_def);
}
