# Two commands do all set-up on a fresh machine:
#   make demo   the main job on the embedded synthetic data
#   make test   the full test suite
# Both create .venv from the pinned requirements when it is missing or stale.

# TFF 0.87 runs on Python 3.9-3.11. The system's CPython 3.11 where there is
# one: distributions build it with PGO and LTO, which pyenv's default build
# lacks; on this 2-core machine tests/test_fedavg.py took 73 s on Debian's
# 3.11.2 against 94 s on pyenv's 3.11.7 (graph tracing is Python-bound).
PYTHON ?= $(or $(wildcard /usr/bin/python3.11),python3.11)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTEST_WORKERS ?= 2

.PHONY: demo compare-ml1m compare-ml1m-alt compare-xc compare-xc-alt compare-xc-fedss \
        compare-xc-real compare-xc-real-fedss compare-xc-amazoncat13k \
        compare-ml1m-fedss compare-pu compare-pu-seed1 test benchmark \
        benchmark-spreadout benchmark-serving benchmark-round-cost bazel clean

$(STAMP): requirements.txt requirements-tff.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps -r requirements-tff.txt
	$(PY) -c "import tensorflow_federated, tensorflow_recommenders"
	touch $(STAMP)

# The first run (about 7 min): the converged comparison (patience 3) of batch and global softmax
# on the ml1m preset, keeping each user's 32 most recent examples.
demo: $(STAMP)
	$(PY) -m scripts.compare --synthetic=ml1m --max_examples_per_user=32 \
	    --losses=batch_softmax,global_softmax --centralized_eval_every_steps=4000 --patience=3 \
	    --output_dir=runs/demo

# The full converged comparison of the README's results (ml1m-shaped), and the
# same on the second preset that checks the defaults.
compare-ml1m: $(STAMP)
	$(PY) -m scripts.compare --synthetic=ml1m --output_dir=runs/compare_ml1m

compare-ml1m-alt: $(STAMP)
	$(PY) -m scripts.compare --synthetic=ml1m_alt --output_dir=runs/compare_ml1m_alt

# FedAwS and its baselines (the paper's Table 3 analogue) on the synthetic XC
# data, one label per client; and on the second preset.
compare-xc: $(STAMP)
	$(PY) -m scripts.compare --task=xc --synthetic_xc=xc_small --output_dir=runs/compare_xc

compare-xc-alt: $(STAMP)
	$(PY) -m scripts.compare --task=xc --synthetic_xc=xc_small_alt \
	    --output_dir=runs/compare_xc_alt

# The same on genuine XC-format files: by default the Bibtex development copy
# beside the repository (XC_TRAIN=... XC_TEST=... for another set); FedAwS's
# family (one label per client), then FedSS's (5 labels per client; labels
# that share points with PARTITION=co_occurring_labels), each over SEEDS.
XC_TRAIN ?= ../shared/data/bibtex/bibtex_train.txt
XC_TEST ?= ../shared/data/bibtex/bibtex_test.txt
XC_FILES = --xc_train_path=$(XC_TRAIN) --xc_test_path=$(XC_TEST)
PARTITION ?= k_labels_per_client
SEEDS ?= 0,1,2

compare-xc-real: $(STAMP)
	$(PY) -m scripts.compare --task=xc $(XC_FILES) --seeds=$(SEEDS) \
	    --output_dir=runs/compare_xc_real

compare-xc-real-fedss: $(STAMP)
	$(PY) -m scripts.compare --task=xc $(XC_FILES) --partition=$(PARTITION) \
	    --algorithms=fedss,full_softmax,neg_only,pos_only --seeds=$(SEEDS) \
	    --output_dir=runs/compare_xc_real_fedss_$(PARTITION)

compare-xc-fedss: $(STAMP)
	$(PY) -m scripts.compare --task=xc --synthetic_xc=xc_10k \
	    --partition=k_labels_per_client --labels_per_client=10 \
	    --algorithms=fedss,full_softmax,neg_only,pos_only --num_negatives=500 \
	    --rounds=100 --patience=0 --eval_every=10 --output_dir=runs/compare_xc_10k

# FedAwS and its sub-model baselines on the AmazonCat-13K shape (paper 000,
# Table 2): 13,330 clients of one label, no centralized references (Keras
# Adam: ~0.5 s a step at this shape here, hours a pass) and no oracle (the
# whole model to 100 clients does not fit in 24 GB).
compare-xc-amazoncat13k: $(STAMP)
	$(PY) -m scripts.compare --task=xc --synthetic_xc=xc_amazoncat13k \
	    --algorithms=fedaws,fixed_class_embeddings,positive_only --nocentralized_references \
	    --rounds=60 --eval_every=10 --patience=2 --output_dir=runs/compare_xc_amazoncat13k

# FedPU and its baselines on the embedded digits, the four default settings
# (paper 001, Tables 1-3); and the same with another data seed (partition,
# split and labeled points) and model seed.
compare-pu: $(STAMP)
	$(PY) -m scripts.compare --task=pu --pu_data=digits --output_dir=runs/compare_pu_digits

compare-pu-seed1: $(STAMP)
	$(PY) -m scripts.compare --task=pu --pu_data=digits --data_seed=1 --seed=1 \
	    --output_dir=runs/compare_pu_digits_seed1

compare-ml1m-fedss: $(STAMP)
	$(PY) -m scripts.compare --synthetic=ml1m --losses= \
	    --algorithms=fedss,full_softmax --num_negatives=200 --client_learning_rate=1.0 \
	    --output_dir=runs/compare_ml1m_fedss

# Bazel only checks the BUILD graph (`bazel query`); Debian's bazel-bootstrap is
# installed when missing and we are root (as in CI).
bazel:
	@command -v bazel >/dev/null || [ "$$(id -u)" != 0 ] || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	   apt-get install -y -qq --no-install-recommends bazel-bootstrap >/dev/null)

test: $(STAMP) bazel
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadgroup tests

# Examples/s of every algorithm against centralized Keras and a tight loop:
# MovieLens BS, H+S, GS under FedAvg and FedSGD; XC FedAwS and FedSS; the PU CNN.
benchmark: $(STAMP)
	mkdir -p runs
	$(PY) -m scripts.benchmark --synthetic=ml1m \
	    --losses=batch_softmax,hinge_spreadout,global_softmax --include_fedsgd \
	    --output=runs/benchmark_movielens.json
	$(PY) -m scripts.benchmark --task=xc --synthetic_xc=xc_small --algorithms=fedaws,fedss \
	    --output=runs/benchmark_xc.json
	$(PY) -m scripts.benchmark --task=pu --pu_data=digits --pu_settings=iid_5x2 \
	    --methods=fedpu --output=runs/benchmark_pu.json

# FedAwS's and FedSS's round at 10k, 100k and 670k classes (Amazon-670K's features),
# each at 4,000 clients a round on 1, 2 and 3 workers, and at 100k the contrasts:
# FedSS with the whole bag, full softmax.
benchmark-round-cost: $(STAMP)
	$(PY) -m scripts.benchmark_round_cost --algorithm=fedaws \
	    --num_classes=10000,100000,670091 --num_features=135909
	$(PY) -m scripts.benchmark_round_cost --algorithm=fedaws --spreadout_search=approximate \
	    --num_classes=10000,100000,670091 --num_features=135909 --repeats=10 --sittings=10
	$(PY) -m scripts.benchmark_round_cost --algorithm=fedss \
	    --num_classes=10000,100000,670091 --num_features=135909
	$(PY) -m scripts.benchmark_round_cost --algorithm=fedaws --num_classes=670091 \
	    --num_features=135909 --clients_per_round=4000 --local_workers=1,2,3 \
	    --local_spreadout_shards=0,3 --repeats=2 --spreadout_search=approximate
	$(PY) -m scripts.benchmark_round_cost --algorithm=fedss --num_classes=670091 \
	    --num_features=135909 --clients_per_round=4000 --local_workers=1,2,3 --repeats=2
	$(PY) -m scripts.benchmark_round_cost --algorithm=fedaws --num_classes=670091 \
	    --num_features=135909 --clients_per_round=4000 --local_workers=1,3 \
	    --local_spreadout_shards=3 --repeats=6 --spreadout_search=approximate \
	    --one_call_at_a_time --sittings=2
	$(PY) -m scripts.benchmark_round_cost --algorithm=fedss --num_classes=670091 \
	    --num_features=135909 --clients_per_round=4000 --local_workers=1,3 \
	    --local_table_servers=0,3 --repeats=2 --one_call_at_a_time --sittings=2
	$(PY) -m scripts.benchmark_round_cost --algorithm=fedss --bag=whole \
	    --num_classes=100000 --num_features=135909
	$(PY) -m scripts.benchmark_round_cost --algorithm=full_softmax \
	    --num_classes=100000 --num_features=135909

benchmark-spreadout: $(STAMP)
	$(PY) -m scripts.benchmark_spreadout --updated_classes=1000
	$(PY) -m scripts.benchmark_spreadout --updated_classes=0 --repeats=1

benchmark-serving: $(STAMP)
	$(PY) -m scripts.benchmark_serving --page=docs/results/serving/results.md

clean:
	rm -rf $(VENV) runs
