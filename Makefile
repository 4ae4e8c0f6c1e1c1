# Two commands do all set-up on a fresh machine:
#   make demo   the main job on the embedded synthetic data
#   make test   the full test suite
# Both create .venv from the pinned requirements when it is missing or stale.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTEST_WORKERS ?= 2

.PHONY: demo test benchmark clean

$(STAMP): requirements.txt requirements-tff.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps -r requirements-tff.txt
	$(PY) -c "import tensorflow_federated, tensorflow_recommenders"
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m scripts.compare --synthetic=ml1m --output_dir=runs/demo

test: $(STAMP)
	$(PY) -m pytest -n $(PYTEST_WORKERS) tests

benchmark: $(STAMP)
	$(PY) -m scripts.benchmark --synthetic=ml1m

clean:
	rm -rf $(VENV) runs
