# The two commands a newcomer needs (see README.md):
#   make demo   install ringloader and run the side-by-side benchmark on a
#               generated ImageNet-like folder
#   make test   build and run every test (what CI runs)
PYTHON ?= python3
PIP ?= $(PYTHON) -m pip

.PHONY: demo test install deps

deps:
	$(PIP) install -q "torch==2.14.1" "torchvision==0.29.1" pytest pillow numpy \
		scikit-image tqdm matplotlib psutil

install: deps
	$(PIP) install -q .

demo: install
	$(PYTHON) benchmarks/bench_eval.py

# pytest exits 5 when it collected no test: that is a failure here.
test: install
	cd tests && $(PYTHON) -m pytest -q -p no:cacheprovider . ; \
		rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests ran"; exit 1; fi; exit $$rc
