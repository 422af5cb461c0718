"""python/ringloader/_core.pyi against the built ringloader._core: the same
public names at the top level and in each class, of the same kinds (class,
function, constant; method or attribute), with the same bases and the same
finality. A name added to the C module and not to the stub fails here."""

import ast
import inspect
import os
import types

import pytest

from ringloader import _core

STUB = os.path.join(
    os.path.dirname(__file__), "..", "python", "ringloader", "_core.pyi"
)

# Types the stub must describe member by member (exceptions are left out:
# their runtime members are BaseException's, their stub members the
# attributes the C core sets on instances).
REQUIRED_CLASSES = {"Pipeline", "Batch", "DeviceBuffer"}


def _decorator_names(node):
    out = set()
    for d in node.decorator_list:
        if isinstance(d, ast.Attribute):
            out.add(d.attr)
        elif isinstance(d, ast.Name):
            out.add(d.id)
    return out


def _defined(body):
    """name -> its AST node, for what a block of the stub defines (imports
    are not exports of a stub; `if` blocks count on both branches)."""
    out = {}
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out[node.name] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out[node.target.id] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    out[target.id] = node
        elif isinstance(node, ast.If):
            out.update(_defined(node.body))
            out.update(_defined(node.orelse))
    return out


def _public(names):
    return {n for n in names if not n.startswith("_")}


def _stub_kind(node):
    if isinstance(node, ast.ClassDef):
        return "class"
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return "attribute" if "property" in _decorator_names(node) else "function"
    return "attribute"


def _runtime_kind(obj):
    if isinstance(obj, type):
        return "class"
    return "function" if callable(obj) else "attribute"


def _runtime_member_kind(cls, name):
    raw = inspect.getattr_static(cls, name)
    return "attribute" if inspect.isdatadescriptor(raw) else "function"


def _runtime_members(cls):
    return _public(set(dir(cls)) - set(dir(object)))


def _subclassable(cls):
    try:
        type("Sub", (cls,), {})
    except TypeError:
        return False
    return True


def _diff(expected, actual):
    """'' when the sets are equal, else what each side lacks."""
    if expected == actual:
        return ""
    return "only at runtime: %s; only in the stub: %s" % (
        sorted(actual - expected),
        sorted(expected - actual),
    )


@pytest.fixture(scope="module")
def stub():
    with open(STUB, encoding="utf-8") as f:
        return _defined(ast.parse(f.read(), filename=STUB).body)


def _runtime_classes(module):
    return {
        n
        for n in _public(dir(module))
        if isinstance(getattr(module, n), type)
        and not issubclass(getattr(module, n), BaseException)
    }


def test_top_level_names(stub):
    problem = _diff(_public(stub), _public(dir(_core)))
    assert not problem, problem


def test_top_level_kinds(stub):
    for name in _public(stub) & _public(dir(_core)):
        assert _stub_kind(stub[name]) == _runtime_kind(getattr(_core, name)), name


def test_class_members(stub):
    checked = _runtime_classes(_core) & set(stub)
    assert REQUIRED_CLASSES <= checked
    for name in sorted(checked):
        cls = getattr(_core, name)
        members = _defined(stub[name].body)
        problem = _diff(_public(members), _runtime_members(cls))
        assert not problem, f"{name}: {problem}"
        for member in _public(members):
            assert _stub_kind(members[member]) == _runtime_member_kind(cls, member), (
                f"{name}.{member}"
            )


def test_class_bases_and_finality(stub):
    for name in _public(stub) & _public(dir(_core)):
        node = stub[name]
        if not isinstance(node, ast.ClassDef):
            continue
        cls = getattr(_core, name)
        bases = [b.id if isinstance(b, ast.Name) else b.attr for b in node.bases]
        runtime = [b.__name__ for b in cls.__bases__ if b is not object]
        assert bases == runtime, name
        final = "final" in _decorator_names(node)
        assert final == (not _subclassable(cls)), name


def test_the_comparison_can_fail(stub):
    """A name the module gains, or a member a type gains, shows up."""
    grown = types.ModuleType("fake_core")
    grown.__dict__.update(vars(_core))
    grown.new_function = len
    assert "new_function" in _diff(_public(stub), _public(dir(grown)))

    class GrownBatch:
        shape = fallback = new_attribute = None

    members = _public(_defined(stub["Batch"].body))
    assert "new_attribute" in _diff(members, _runtime_members(GrownBatch))
    assert _runtime_classes(grown) == _runtime_classes(_core)
