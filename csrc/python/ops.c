/*
 * python/ops.c - the augmentation ops' argument layouts, exported.
 *
 * DESIGN: every op lays out its arguments by a list of named fields
 * (augment/augment.h) from which its code takes its offsets; the module
 * exports the lists as OP_ARGS, each op's named limits as OP_LIMITS, the
 * elements a chain holds (AUGMENT_MAX_OPS: ops and groups), and the
 * policies' sub-op kinds and AutoAugment's policies by number, so that
 * ringloader/_steps.py packs arguments by name and keeps no copy of a
 * position, a count or a limit. Each built-in op's fields are checked
 * against its nargs here, at import: a list that does not add up fails
 * the import, with the op's name.
 */
#include "python/module.h"

#include "augment/augment.h"

/* (name, count, record or None) for each field of fields (new
 * reference), or NULL with an exception. */
static PyObject *fields_tuple(const rl_op_field *fields)
{
    Py_ssize_t n = 0;
    while (fields[n].name != NULL) {
        n++;
    }
    PyObject *t = PyTuple_New(n);
    for (Py_ssize_t i = 0; t != NULL && i < n; i++) {
        const rl_op_field *f = &fields[i];
        PyObject *record = Py_None;
        Py_INCREF(record);
        if (f->record != NULL) {
            Py_DECREF(record);
            record = fields_tuple(f->record);
        }
        PyObject *item = record != NULL
                             ? Py_BuildValue("(siN)", f->name, f->count, record)
                             : NULL;
        if (item == NULL) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SetItem(t, i, item); /* steals */
    }
    return t;
}

/* {name: value} of an op's limits (new reference), or NULL with an
 * exception. */
static PyObject *limits_dict(const rl_op_limit *limits)
{
    PyObject *d = PyDict_New();
    for (int i = 0; d != NULL && limits != NULL && limits[i].name != NULL;
         i++) {
        PyObject *v = PyLong_FromLong(limits[i].value);
        if (v == NULL || PyDict_SetItemString(d, limits[i].name, v) < 0) {
            Py_CLEAR(d);
        }
        Py_XDECREF(v);
    }
    return d;
}

/* Adds one op's entries to args and limits. 0, or -1 with an exception
 * (ImportError for an op whose fields do not describe its nargs). */
static int add_op(const rl_op_def *def, PyObject *args, PyObject *limits)
{
    char msg[RL_MSG_MAX];
    if (rl_op_def_check(def, msg) != 0) {
        PyErr_Format(PyExc_ImportError, "ringloader._core: %s", msg);
        return -1;
    }
    PyObject *f = fields_tuple(def->fields);
    PyObject *l = f != NULL ? limits_dict(def->limits) : NULL;
    int rc = l != NULL && PyDict_SetItemString(args, def->name, f) == 0 &&
                     PyDict_SetItemString(limits, def->name, l) == 0
                 ? 0
                 : -1;
    Py_XDECREF(f);
    Py_XDECREF(l);
    return rc;
}

/* The names of a NULL-ending list as a tuple (new reference), or NULL
 * with an exception. */
static PyObject *names_tuple(const char *const *names)
{
    PyObject *list = PyList_New(0);
    for (int i = 0; list != NULL && names[i] != NULL; i++) {
        PyObject *s = PyUnicode_FromString(names[i]);
        if (s == NULL || PyList_Append(list, s) < 0) {
            Py_CLEAR(list);
        }
        Py_XDECREF(s);
    }
    PyObject *t = list != NULL ? PyList_AsTuple(list) : NULL;
    Py_XDECREF(list);
    return t;
}

/* The policy kinds' names, or only those with a table row, as a tuple
 * (new reference), or NULL with an exception. */
static PyObject *policy_kinds(bool tables_only)
{
    const char *names[RL_POLICY_N_KINDS + 1];
    int n = 0;
    for (int k = 0; rl_policy_kinds[k].name != NULL; k++) {
        if (!tables_only || rl_policy_kinds[k].table) {
            names[n++] = rl_policy_kinds[k].name;
        }
    }
    names[n] = NULL;
    return names_tuple(names);
}

/* Adds obj (stolen) to the module as name. 0 or -1. */
static int add(PyObject *module, const char *name, PyObject *obj)
{
    if (obj == NULL) {
        return -1;
    }
    int rc = PyModule_AddObjectRef(module, name, obj);
    Py_DECREF(obj);
    return rc;
}

int rl__py_ops_init(PyObject *module)
{
    PyObject *args = PyDict_New(), *limits = PyDict_New();
    int rc = args != NULL && limits != NULL ? 0 : -1;
    for (int t = 0; rc == 0 && rl_op_tables[t] != NULL; t++) {
        for (const rl_op_def *const *d = rl_op_tables[t]; rc == 0 && *d; d++) {
            rc = add_op(*d, args, limits);
        }
    }
    if (rc != 0) {
        Py_XDECREF(args);
        Py_XDECREF(limits);
        return -1;
    }
    if (add(module, "OP_ARGS", args) < 0 ||
        add(module, "OP_LIMITS", limits) < 0 ||
        add(module, "POLICY_KINDS", policy_kinds(false)) < 0 ||
        add(module, "POLICY_TABLE_KINDS", policy_kinds(true)) < 0 ||
        add(module, "AUTO_AUGMENT_POLICIES",
            names_tuple(rl_auto_augment_policies)) < 0 ||
        add(module, "TIMM_KINDS", names_tuple(rl_timm_kinds)) < 0 ||
        add(module, "TIMM_FUNCS", names_tuple(rl_timm_funcs)) < 0 ||
        PyModule_AddIntConstant(module, "AUGMENT_MAX_OPS", RL_AUGMENT_MAX_OPS) <
            0) {
        return -1;
    }
    return 0;
}
