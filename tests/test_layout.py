"""The shape of the code base: Python modules import downward only, along
the layers written once below; no import cycle in Python, nor #include
cycle in C, nor two C files that call each other. There is no cap on a file's length: a file holds one concern, as
long as that needs. Static checks (ast and regular expressions): nothing is
imported or built."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Optional

import pytest

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "python" / "ringloader"
CSRC = ROOT / "csrc"

# The modules of python/ringloader, named relative to the package ("__init__"
# is the package itself), lowest layer first. A module imports modules of
# lower layers only: not of its own layer, not of a higher one. "pkg.*"
# stands for every module of a subpackage whose inner order is its own
# business (imports among them are only checked for cycles). A new module
# must be given a layer here.
LAYERS: list[list[str]] = [
    ["_core"],  # the C extension
    # targets: how a batch's are made; progress: the datasets' bars;
    # _simd: the C kernels' SIMD level, as RINGLOADER_SIMD set it;
    # transforms_v2: v2 transforms of our own (torchvision only)
    ["errors", "datasets.targets", "datasets.progress", "_simd", "transforms_v2"],
    # the neutral description of a transform (and of a C op's arguments):
    # all that adapters and the compiler share
    ["_steps"],
    # adapt.*: each library's transform classes as _steps, one file a
    # library (with its helpers); _compiler: _steps to the C spec. One
    # layer: neither imports the other (transforms, above, wires them)
    ["adapt.*", "_compiler"],
    ["transforms", "datasets.base", "datasets.presign", "datasets.fields"],
    # timmdata: timm's ImageDataset as files (read by views); urls: what a
    # remote object's name is, and how it is shown (redacted); litarrow: a
    # LitData chunk's Arrow rows as byte ranges of the chunk
    ["datasets.timmdata", "datasets.urls", "datasets.litarrow"],
    # a remote store's failures as OSErrors naming the object
    ["datasets.remote_errors"],
    # remote: the HTTP(S) and S3 client (metadata, ranges, streams, listing)
    ["datasets.cache", "datasets.remote"],
    # a detection dataset's targets as flat tables; built from COCO's
    # json or VOC's files, the target torchvision gives rebuilt from them;
    # detection: which datasets are described so
    ["datasets.detection_tables"],
    ["datasets.coco", "datasets.voc", "datasets.detection_target"],
    # detection_tail: the reference's tail (ConvertBoundingBoxFormat,
    # SanitizeBoundingBoxes, ToPureTensor) on those targets, quickly
    ["datasets.detection_tail"],
    # COCO's person keypoints as a CocoDetection with a v2 target
    ["datasets.coco_keypoints"],
    ["datasets.detection"],
    # detection_batch: a wrapped CocoDetection as image files and each
    # batch's targets
    ["datasets.detection_batch"],
    # the segmentation reference's own classes: segmentation_probes runs the
    # user's objects beside their readings, segmentation_pairs reads them,
    # segmentation_coco makes its COCO masks at the output pixels
    ["datasets.segmentation_probes", "datasets.segmentation_coco"],
    ["datasets.segmentation_pairs"],
    # segmentation_batch: a VOCSegmentation (or the reference's COCO
    # dataset) as image files and each batch's masks
    ["datasets.segmentation_batch"],
    # remote_parts: the objects of a composition's remote datasets, as
    # one table; composed: Subset and ConcatDataset as a table of files
    ["datasets.remote_parts"],
    ["datasets.composed"],
    ["datasets.folder", "datasets.filelist", "datasets.tarindex", "datasets.mix"],
    # a shard set's manifest and its samples read from record files
    ["datasets.manifest"],
    ["datasets.index", "datasets.shards"],
    # what datasets of table rows share: an image column's chunks as byte
    # ranges, the file table, targets and fields from columns
    ["datasets.columns"],
    # a Hugging Face dataset's Arrow files, as runs of a shard table
    ["datasets.hf"],
    # Parquet files' image columns extracted once, read as HFDataset reads;
    # parquet_remote: a remote Parquet file as a file of range GETs;
    # parquet_tables: the files' target and columns tables as one
    ["datasets.parquet_remote", "datasets.parquet_tables"],
    ["datasets.parquet"],
    # what LitData's chunks and MDS shards share: a file's samples'
    # columns as byte ranges, read as runs of the same table
    ["datasets.chunkfiles"],
    # LitData's optimized chunks, MosaicML Streaming's MDS shards
    ["datasets.litchunks", "datasets.mds"],
    ["datasets"],
    # the Loader's parts, one concern each. _keys: the random keys of an
    # epoch's samples; _epoch_iterator: one epoch's iterator (superseded,
    # closed, one thread at a time); _plan: a transform split between the
    # C core and a Python tail; _gpu: device buffers and streams; _meter:
    # stats; _order: the built-in shuffle, a keyed bijection of [0, n);
    # _stream_order: the streaming order of a shard set; _torch_epoch: an
    # epoch read by torch's DataLoader
    [
        "_keys",
        "_epoch_iterator",
        "_plan",
        "_gpu",
        "_meter",
        "_order",
        "_stream_order",
        "_torch_epoch",
    ],
    # which batches each epoch yields: built-in orders, sharding over
    # ranks, the user's samplers (with the random keys they draw)
    ["_sampling"],
    # _position: where the loader stands in its epochs, state_dict/resume;
    # _pipeline: the only module that calls _core.Pipeline
    ["_position", "_pipeline"],
    # _fallback: Pillow's decodes and replaced samples, named and announced;
    # _frameworks: the frameworks' hooks
    ["_fallback", "_frameworks"],
    ["loader"],
    ["dataloader", "metrics"],
    ["timm"],  # timm's create_loader (over dataloader)
    ["__init__"],
    ["bench.*"],  # the benchmark harness (imports ringloader itself)
    ["cli"],
    ["__main__"],
]


def _modules() -> dict[str, Path]:
    """Every Python module of the package by its relative dotted name."""
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        parts = list(path.relative_to(PKG).with_suffix("").parts)
        if parts[-1] == "__init__" and len(parts) > 1:
            parts.pop()  # a subpackage is named as imported
        out[".".join(parts)] = path
    return out


MODULES = _modules()
KNOWN = set(MODULES) | {"_core"}  # _core: the built extension


def _layer_of(name: str) -> Optional[tuple[int, str]]:
    """(layer, group) of a module: the group is the module itself, or the
    "pkg.*" entry that covers it."""
    for i, layer in enumerate(LAYERS):
        for entry in layer:
            if entry == name:
                return i, name
            if entry.endswith(".*"):
                pkg = entry[:-2]
                if name == pkg or name.startswith(pkg + "."):
                    return i, entry
    return None


def _package_of(name: str, path: Path) -> list[str]:
    """The package a module's relative imports start from."""
    parts = [] if name == "__init__" else name.split(".")
    return parts if path.name == "__init__.py" else parts[:-1]


def _target(parts: list[str]) -> Optional[str]:
    """The module of the package that a dotted path (relative to the
    package) names: the longest known prefix; None outside the package."""
    for n in range(len(parts), 0, -1):
        name = ".".join(parts[:n])
        if name in KNOWN:
            return name
    return "__init__" if not parts else None


def imports_of(name: str) -> set[str]:
    """The package modules that module ``name`` imports, wherever the
    import statement is (function bodies and TYPE_CHECKING blocks too),
    plus ``importlib.import_module("ringloader...")`` with a literal."""
    path = MODULES[name]
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = _package_of(name, path)
    found: set[Optional[str]] = set()

    def absolute(dotted: str) -> None:
        parts = dotted.split(".")
        if parts[0] == "ringloader":
            found.add(_target(parts[1:]))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                absolute(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                base = (node.module or "").split(".")
                if base[0] != "ringloader":
                    continue
                base = base[1:]
            else:
                up = node.level - 1
                base = package[: len(package) - up] if up else list(package)
                base += node.module.split(".") if node.module else []
            for alias in node.names:
                sub = ".".join(base + [alias.name])
                found.add(sub if sub in KNOWN else _target(base))
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", None))
            == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            absolute(node.args[0].value)
    found.discard(None)
    found.discard(name)
    return found  # type: ignore[return-value]


def _graph() -> dict[str, set[str]]:
    return {name: imports_of(name) for name in MODULES}


def test_every_module_has_a_layer():
    missing = [m for m in MODULES if _layer_of(m) is None]
    assert not missing, (
        f"modules without a layer: {missing}; add each to LAYERS in "
        "tests/test_layout.py, above every module it imports"
    )


def test_imports_go_downward_only():
    bad = []
    for name, targets in _graph().items():
        here = _layer_of(name)
        if here is None:
            continue  # reported by test_every_module_has_a_layer
        for t in sorted(targets):
            there = _layer_of(t)
            if there is None:
                continue
            if there[1] == here[1] and here[1].endswith(".*"):
                continue  # inside a subpackage left to its own order
            if there[0] >= here[0]:
                bad.append(f"{name} (layer {here[0]}) imports {t} (layer {there[0]})")
    assert not bad, "imports that do not go down the layers:\n" + "\n".join(bad)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node, or of one
    node that reaches itself (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph.get(v, ()):
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_python_import_cycle():
    cycles = _cycles(_graph())
    assert not cycles, f"modules that import each other (directly or not): {cycles}"


_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.MULTILINE)


def include_graph() -> dict[str, set[str]]:
    """csrc/ files (relative paths) and the csrc/ files each includes; an
    include is looked up next to the including file, then under csrc/."""
    graph = {}
    for path in sorted(CSRC.rglob("*")):
        if path.suffix not in (".c", ".h") or not path.is_file():
            continue
        deps = set()
        text = path.read_text(encoding="utf-8", errors="replace")
        for inc in _INCLUDE.findall(text):
            for base in (path.parent, CSRC):
                target = (base / inc).resolve()
                if target.is_file() and CSRC.resolve() in target.parents:
                    deps.add(str(target.relative_to(CSRC.resolve())))
                    break
        graph[str(path.relative_to(CSRC))] = deps
    return graph


def test_no_include_cycle():
    cycles = _cycles(include_graph())
    assert not cycles, f"csrc/ files that include each other: {cycles}"


_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.DOTALL)
_STRING = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'')
_CALLED = re.compile(r"\b([A-Za-z_]\w*)\s*\(")
# __attribute__((target("avx2"))) and the like, before a function's name.
_ATTRIBUTE = re.compile(r"__attribute__\s*\(\((?:[^()]|\([^()]*\))*\)\)")


def _c_code(path: Path) -> str:
    """A C file's text without comments and string literals (comments keep
    their line breaks, so that line starts stay line starts)."""
    text = path.read_text(encoding="utf-8", errors="replace")
    text = _COMMENT.sub(lambda m: "\n" * m.group().count("\n"), text)
    return _STRING.sub('""', text)


def _defined(code: str) -> set[str]:
    """The functions a .c file defines with external linkage: a body's
    opening brace stands alone at the start of a line (the project's
    clang-format puts it there), below a head, the lines up to the blank
    line, `;`, `}` or directive before it, that does not say `static`."""
    lines = code.split("\n")
    names = set()
    for i, line in enumerate(lines):
        if not line.startswith("{"):
            continue
        j = i
        while j > 0:
            above = lines[j - 1].strip()
            if not above or above.endswith((";", "}")) or above.startswith("#"):
                break
            j -= 1
        head = _ATTRIBUTE.sub("", " ".join(lines[j:i]))
        m = next((m for m in _CALLED.finditer(head) if not m.group(1).isupper()), None)
        if m is None or re.search(
            r"\b(static|typedef|struct|enum)\b", head[: m.start()]
        ):
            continue
        names.add(m.group(1))
    return names


def call_graph() -> dict[str, dict[str, set[str]]]:
    """Each .c file of csrc/ (csrc/testing/, test builds only, left out)
    and, for each other such file, the functions it calls there."""
    code = {
        str(p.relative_to(CSRC)): _c_code(p)
        for p in sorted(CSRC.rglob("*.c"))
        if p.relative_to(CSRC).parts[0] != "testing"
    }
    owner = {}
    for name, text in code.items():
        for fn in _defined(text):
            owner.setdefault(fn, name)
    graph: dict[str, dict[str, set[str]]] = {}
    for name, text in code.items():
        calls = graph.setdefault(name, {})
        for fn in set(_CALLED.findall(text)):
            where = owner.get(fn)
            if where is not None and where != name:
                calls.setdefault(where, set()).add(fn)
    return graph


def test_the_call_graph_is_read():
    """The reader finds what is known to be there, so that the check below
    cannot pass by finding nothing."""
    graph = call_graph()
    assert "rl_simd_level" in graph["place/store.c"]["simd.c"]
    assert "rl_pipeline_create" in graph["python/pipeline.c"]["core/pipeline.c"]
    assert sum(len(v) for v in graph.values()) > 100


def test_no_call_cycle_between_c_files():
    """No two .c files call each other, directly or round a longer circle:
    one module spread over two files is one file, or its two halves talk
    one way through a narrow header."""
    graph = call_graph()
    cycles = _cycles({a: set(b) for a, b in graph.items()})
    named = [
        f"{a} -> {b}: {', '.join(sorted(graph[a][b]))}"
        for c in cycles
        for a in c
        for b in c
        if b in graph[a]
    ]
    assert not cycles, "csrc/ files that call each other:\n" + "\n".join(named)


def test_pipeline_is_called_from_one_module():
    """_core.Pipeline is created and called in _pipeline.py only, so that a
    new C API changes one module (and _fallback.py)."""
    bad = []
    for name, path in MODULES.items():
        if name == "_pipeline":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and node.attr == "Pipeline"
                and isinstance(node.value, ast.Name)
                and node.value.id == "_core"
            ) or (
                isinstance(node, ast.ImportFrom)
                and (node.module or "").endswith("_core")
                and any(a.name == "Pipeline" for a in node.names)
            ):
                bad.append(f"{name}:{node.lineno}")
    assert not bad, f"_core.Pipeline used outside _pipeline.py: {bad}"


@pytest.mark.parametrize(
    "name, expected",
    [
        (
            "loader",
            {
                "_core",
                "_epoch_iterator",
                "_fallback",
                "_gpu",
                "_meter",
                "_pipeline",
                "_plan",
                "_position",
                "_sampling",
                "datasets.base",
            },
        ),
        ("datasets.index", {"datasets.base", "datasets.cache", "datasets.folder"}),
    ],
)
def test_imports_are_parsed(name, expected):
    """The parser sees relative imports of modules and of names, in
    subpackages and through the parent (a check on the checks above)."""
    assert expected <= imports_of(name)
