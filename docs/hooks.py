"""MkDocs hooks (mkdocs.yml): the site holds, besides docs/, files that live
elsewhere in the repository and are read there too, so that they are written
once:

- README.md, as the site's front page (index.md);
- CONTRIBUTING.md, as contributing.md;
- the benchmarks' results (benchmarks/**/*.md) and their plots
  (benchmarks/**/plots/*.png), at the same paths under benchmarks/.

Every page's links are written as the repository's relative paths, which
work when the Markdown is read in the repository; here each one that leads
to a file the site holds is pointed at that file's place in the site. A link
to a file of the repository that the site does not hold (a script, a
requirements file) becomes its text, in code; a link to nothing is left as
it is, for MkDocs' check (--strict) to name.

The docstrings the API reference renders name other objects with Sphinx's
roles (:class:`Loader`); Markdown renders the role's name as text before
the code, which is dropped here.
"""

from __future__ import annotations

import os
import re

from mkdocs.structure.files import File, Files

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Markdown links and images: [text](target) and ![alt](target).
LINK = re.compile(r"(!?\[[^\]\n]*\])\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
ROLE = re.compile(r":(?:class|func|meth|mod|attr|exc|data|obj):(?=<code>)")


def _outside_files() -> dict[str, str]:
    """Site path of each file brought in from outside docs/, by its path in
    the repository."""
    found = {"README.md": "index.md", "CONTRIBUTING.md": "contributing.md"}
    bench = os.path.join(ROOT, "benchmarks")
    for folder, dirs, names in os.walk(bench):
        dirs[:] = sorted(d for d in dirs if d not in ("out", "__pycache__"))
        rel = os.path.relpath(folder, ROOT)
        for name in sorted(names):
            if name.endswith(".md") or (
                name.endswith(".png") and os.path.basename(folder) == "plots"
            ):
                path = os.path.join(rel, name)
                found[path] = path
    return found


def on_files(files: Files, config) -> Files:
    for rel, site in _outside_files().items():
        files.append(File.generated(config, site, abs_src_path=os.path.join(ROOT, rel)))
    return files


def _site_paths(files: Files) -> dict[str, str]:
    """Site path of every file the site holds, by its real path."""
    return {
        os.path.realpath(f.abs_src_path): f.src_uri
        for f in files
        if f.abs_src_path is not None
    }


def _relink(markdown: str, page_real: str, page_uri: str, sites: dict) -> str:
    here = os.path.dirname(page_real)

    def fix(m: re.Match) -> str:
        text, target = m.group(1), m.group(2)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            return m.group(0)  # a URL, or a place on this page
        path, hash_, anchor = target.partition("#")
        real = os.path.realpath(os.path.join(here, path))
        site = sites.get(real)
        if site is not None:
            rel = os.path.relpath(site, os.path.dirname(page_uri) or ".")
            return f"{text}({rel}{hash_}{anchor})"
        inside = real.startswith(ROOT + os.sep) and os.path.exists(real)
        if inside and not text.startswith("!"):
            name = text[1:-1]
            return name if name.startswith("`") else f"`{name}`"
        return m.group(0)

    # Links inside code blocks are code, not links.
    out, last = [], 0
    for block in FENCE.finditer(markdown):
        out.append(LINK.sub(fix, markdown[last : block.start()]))
        out.append(block.group(0))
        last = block.end()
    out.append(LINK.sub(fix, markdown[last:]))
    return "".join(out)


def on_page_markdown(markdown: str, page, config, files: Files) -> str:
    real = os.path.realpath(page.file.abs_src_path)
    return _relink(markdown, real, page.file.src_uri, _site_paths(files))


def on_page_content(html: str, page, config, files: Files) -> str:
    return ROLE.sub("", html)
