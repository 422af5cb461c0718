# The two commands a newcomer needs (see README.md):
#   make demo   install ringloader and run the side-by-side benchmark on a
#               generated ImageNet-like folder
#   make test   build and run every test (what CI runs)
# and for hardening and style (CI runs these too, see .ci/run):
#   make lint        ruff check and ruff format --check; clang-format
#                    --dry-run on the C sources (.clang-format)
#   make test-asan   the pytest suite against an ASan+UBSan build of the
#                    extension, installed into a throw-away venv (the normal
#                    install is left alone)
#   make fuzz        FUZZ_SECONDS (60) of libFuzzer on the decode entry point,
#                    then the regression inputs (needs clang, libclang-rt-14-dev)
PYTHON ?= python3
C_SOURCES = $(shell find csrc tests/c tests/fuzz tests/cuda -name '*.[ch]' | sort)
PIP ?= $(PYTHON) -m pip

.PHONY: demo test install install-test deps test-asan fuzz lint format

deps:
	$(PIP) install -q "torch==2.14.1" "torchvision==0.29.1" pytest pillow numpy \
		scikit-image tqdm matplotlib psutil prometheus_client scipy "ruff==0.17.6"

install: deps
	$(PIP) install -q .

# The test build: the same code plus csrc/testing (fault injection, CUDA
# breakage switches, the read benchmark), which users' builds leave out.
install-test: deps
	RINGLOADER_TEST_HOOKS=1 $(PIP) install -q .

demo: install
	$(PYTHON) benchmarks/bench_eval.py

# ruff's lint rules and formatting (pyproject.toml), pinned so that a new
# release cannot fail a build that did not change.
lint: deps
	$(PYTHON) -m ruff check python tests benchmarks
	$(PYTHON) -m ruff format --check python tests benchmarks
	clang-format --dry-run --Werror $(C_SOURCES)

# Formats the C sources in place (what `make lint` checks).
format:
	clang-format -i $(C_SOURCES)

# pytest exits 5 when it collected no test: that is a failure here.
test: install-test
	cd tests && $(PYTHON) -m pytest -q -p no:cacheprovider . ; \
		rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests ran"; exit 1; fi; exit $$rc

# The ASan build goes into a venv that sees the system's torch
# (--system-site-packages), built from a copy of the tree so that no object
# file of the normal build is reused; the venv gets the setuptools that
# pyproject.toml asks for, since --no-build-isolation does not install it. libasan must be loaded before Python;
# CPython's own allocations at exit are not leaks of ours (detect_leaks=0).
# libstdc++ is preloaded with it, or ASan's __cxa_throw interceptor finds no
# real function and aborts the first C++ exception (triton, via torch).
# tests/test_c_units.py is left out: it builds and runs the C tests under
# TSan, which cannot share a process with a preloaded libasan (the normal
# `make test` runs it).
ASAN_DIR ?= /tmp/ringloader-asan
ASAN_PRELOAD = $(shell gcc -print-file-name=libasan.so) \
               $(shell gcc -print-file-name=libstdc++.so)
test-asan: deps
	rm -rf $(ASAN_DIR) && mkdir -p $(ASAN_DIR)/src
	git ls-files -co --exclude-standard -z | \
		xargs -0 tar -cf - | tar -xf - -C $(ASAN_DIR)/src
	$(PYTHON) -m venv --system-site-packages $(ASAN_DIR)/venv
	$(ASAN_DIR)/venv/bin/python -m pip install -q "setuptools>=77" wheel
	cd $(ASAN_DIR)/src && RINGLOADER_SANITIZE=address \
		RINGLOADER_TEST_HOOKS=1 $(ASAN_DIR)/venv/bin/python -m pip install -q --no-build-isolation .
	cd tests && \
		LD_PRELOAD="$(ASAN_PRELOAD)" \
		ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:strict_string_checks=1 \
		UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
		$(ASAN_DIR)/venv/bin/python -m pytest -q -p no:cacheprovider \
		--ignore=test_c_units.py . ; \
		rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests ran"; exit 1; fi; exit $$rc

FUZZ_SECONDS ?= 60
fuzz:
	$(MAKE) -C tests/fuzz run SECONDS=$(FUZZ_SECONDS)
