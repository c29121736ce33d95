# tff_nlp: the two commands users need are `make demo` and `make test`.
# Both create the virtual environment first if it is missing.

SHELL := /bin/bash
# TFF 0.87 supports CPython 3.9-3.11; prefer an explicit python3.11 when present.
PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.tff_nlp-installed
# Quiet TensorFlow's C++ start-up chatter; errors still print.
export TF_CPP_MIN_LOG_LEVEL ?= 2

.PHONY: venv test demo notebook notebook-venv colab-runtime pretrain bench bench-scaling bench-round-overhead bench-process-cache bench-text2sql bench-text2sql-templates bench-text2sql-templates-oracle bench-demo-seeds bench-peft bench-peft-embedding bench-peft-lora-scale bench-select bench-sparse-tags bench-vocab-slice bench-nmt bench-fcl bench-determinism bench-robustness bazel-test clean help

help:
	@echo "make demo   - set up .venv if needed, run the main job"
	@echo "make test   - set up .venv if needed, run the test suite"
	@echo "make venv   - create .venv with the pinned stack (idempotent)"
	@echo "make notebook - Jupyter Notebook on colabs/ (its own .venv-notebook; .venv as the kernel)"
	@echo "make colab-runtime - the same server for Colab's Connect to a local runtime, on 127.0.0.1:8888; prints the URL to paste"
	@echo "make pretrain - pre-train the text-to-SQL seq2seq model with T5 span corruption on CPU (at most 60 minutes; cached, resumable)"
	@echo "make bench  - run every benchmark (hours; not part of tests)"
	@echo "make bench-text2sql - the Lorar paper's Table 2 on CPU (hours; resumable)"
	@echo "make bench-text2sql-templates - Table 2 with the template parser, 3 seeds (about 2 hours; resumable)"
	@echo "make bench-text2sql-templates-oracle - the same with annotated values (oracle entities): the runs archived before issue 65, report only"
	@echo "make bench-demo-seeds - the demo preset (FedAvg vs FedAvg + Lorar, 8 rounds) over 3 seeds (about 10 minutes; resumable)"
	@echo "make bench-sparse-tags - partial models vs dense FedAvg on TREC-50 tags, 3 seeds (30-75 min)"
	@echo "make bench-peft - full fine-tuning vs LoRA r = 4, 8, 16 from the make pretrain model, and from scratch, on the text-to-SQL clients, 3 seeds (many hours; resumable)"
	@echo "make bench-peft-embedding - LoRA r = 8 with the token embedding adapted too, FedAvg, 3 seeds, reported beside make bench-peft's variants (about 40 minutes)"
	@echo "make bench-peft-lora-scale - the LoRA scale check behind train_text2sql.peft.flags' --lora_alpha: r = 4, FedAvg, seed 0, alpha = 4 (scale 1), 16, 64 and 256 (about an hour)"
	@echo "make bench-select - federated_select bytes and time as the vocabulary grows to 10^6"
	@echo "make bench-vocab-slice - vocabulary-sliced vs dense FedAvg on the text-to-SQL clients"
	@echo "make bench-nmt - federated mixed-domain NMT with dynamic pulling on CPU (hours; resumable)"
	@echo "make bench-nmt-controllers - bench-nmt plus the Controllers baseline, 3 seeds (about 3 more hours; resumable)"
	@echo "make bench-fcl - federated continual text classification (FedWeIT/FedSeIT/SIT), 3 seeds and the transfer variants, on CPU (many hours; resumable)"
	@echo "make bench-scaling - round time and memory vs clients per round (to 10,000 of a 10^5-user population), memory over 200 rounds, 1, 2 and 4 workers (about 75 minutes)"
	@echo "make bench-robustness - attackers x weightings x defences on linear regression, R8 and text-to-SQL (hours; resumable)"
	@echo "make bench-round-overhead - a TFF round vs pure TF, r8 classifier and text-to-SQL seq2seq (about 6 minutes)"
	@echo "make bench-process-cache - the shared process cache on a 10-seed sparse-tags sweep, without vs with (about 5 minutes)"
	@echo "make bazel-test - run all tests under Bazel (offline; see DEVELOPERS.md, Bazel)"

venv: $(STAMP)

$(STAMP): requirements.txt requirements-tff.txt pyproject.toml
	@"$(PYTHON)" -c 'import sys; sys.exit(0 if (3, 9) <= sys.version_info[:2] <= (3, 11) else 1)' 2>/dev/null \
	  || { echo "tff_nlp needs CPython 3.9, 3.10 or 3.11 (tensorflow-federated 0.87 supports no other); '$(PYTHON)' is $$({ "$(PYTHON)" --version 2>&1 || echo missing; } | tail -n 1)."; \
	       echo "Get a Python 3.11 and name it with PYTHON=, e.g. one of:"; \
	       echo "  uv python install 3.11 && make PYTHON=\"\$$(uv python find 3.11)\" $(or $(MAKECMDGOALS),venv)"; \
	       echo "  pyenv install 3.11 && make PYTHON=\"\$$(pyenv prefix 3.11)/bin/python\" $(or $(MAKECMDGOALS),venv)"; \
	       echo "  Ubuntu: sudo add-apt-repository ppa:deadsnakes/ppa && sudo apt install python3.11-venv && make PYTHON=python3.11 $(or $(MAKECMDGOALS),venv)"; \
	       exit 1; }
	@test -x "$(PY)" || "$(PYTHON)" -m venv "$(VENV)"
	"$(PY)" -m pip install --quiet -r requirements.txt
	"$(PY)" -m pip install --quiet --no-deps -r requirements-tff.txt
	"$(PY)" -m pip install --quiet --no-deps --no-build-isolation -e .
	@# The library that keeps TFF's workers on 127.0.0.1 (README, Security);
	@# without a C compiler, runs say so and their workers listen everywhere.
	@"$(PY)" tff_nlp/runtime/bind_address.py || true
	@touch "$(STAMP)"

# Two pytest workers (pytest-xdist), a test file each at a time: the suite
# is mostly single-threaded Python around small TensorFlow ops, so two
# processes use both cores. tests/conftest.py refines loadfile: the slowest
# files start first, and the SIGKILL-resume cases and the notebooks are
# shared between the workers test by test. TEST_WORKERS=0 runs it in one
# process.
TEST_WORKERS ?= 2
test: $(STAMP)
	"$(PY)" -m pytest -n $(TEST_WORKERS) --dist=loadfile --durations=15 tests

# The Lorar paper's comparison at demo scale: FedAvg vs FedAvg + Lorar on the
# eight text-to-SQL clients, one seed, 8 rounds, beside the template-retrieval
# baseline; prints the per-client table (Table 2 layout), then the committed
# 3-seed benchmark of the same comparison and how the two relate. Quiet: a
# progress bar and the tables; DEMO_VERBOSITY=0 brings back the per-round
# INFO lines. .ci/run runs it after the tests.
DEMO_VERBOSITY ?= -1
demo: $(STAMP)
	"$(PY)" -m apps.text2sql.bin.text2sql_benchmark \
	  --flagfile=apps/text2sql/flags/train_text2sql.demo.flags --seeds=0 \
	  --reference_results=docs/results/text2sql_templates/results.json \
	  --verbosity=$(DEMO_VERBOSITY)

# Jupyter Notebook on the colabs/, served from its own environment
# (.venv-notebook, made on first use: Jupyter needs typing_extensions>=4.6,
# which TensorFlow 2.14 refuses) with .venv as the notebooks' kernel: the
# kernel `python3` of .venv-notebook, whose folder comes first on
# JUPYTER_PATH so that no `python3` kernel of the user's own shadows it.
# NOTEBOOK_FLAGS passes options, e.g. NOTEBOOK_FLAGS='--no-browser --port=8888'.
NOTEBOOK_VENV ?= .venv-notebook
NOTEBOOK_FLAGS ?=
JUPYTER = JUPYTER_PATH="$(abspath $(NOTEBOOK_VENV))/share/jupyter" "$(NOTEBOOK_VENV)/bin/jupyter"
ALLOW_ROOT = $(if $(filter 0,$(shell id -u)),--allow-root)
notebook-venv: $(STAMP)
	@test -x "$(NOTEBOOK_VENV)/bin/jupyter-notebook" || { \
	  "$(PYTHON)" -m venv "$(NOTEBOOK_VENV)" && \
	  "$(NOTEBOOK_VENV)/bin/pip" install -q -r requirements-notebook.txt; }
	@"$(PY)" -m ipykernel install --prefix "$(NOTEBOOK_VENV)" --name python3 \
	  --display-name "Python 3 (tff_nlp .venv)" > /dev/null 2>&1

notebook: notebook-venv
	$(JUPYTER) notebook --notebook-dir=colabs $(ALLOW_ROOT) $(NOTEBOOK_FLAGS)

# The same server for Colab's "Connect to a local runtime", as
# https://research.google.com/colaboratory/local-runtimes.html says to start
# it: requests and websockets from Colab's origin allowed, with credentials,
# and no retry on another port (the URL printed is the one to paste). Jupyter
# Server 2 (Notebook 7) needs no jupyter_http_over_ws extension. It listens
# on 127.0.0.1 only (COLAB_IP to change that); the token is $JUPYTER_TOKEN or
# a new random one, handed to Jupyter in its environment, not on its command
# line, which every user of the machine can read. COLAB_FLAGS passes options.
COLAB_PORT ?= 8888
COLAB_IP ?= 127.0.0.1
COLAB_FLAGS ?=
COLAB_URL_HOST = $(if $(filter 0.0.0.0 ::,$(COLAB_IP)),127.0.0.1,$(COLAB_IP))
colab-runtime: notebook-venv
	@token="$${JUPYTER_TOKEN:-$$("$(NOTEBOOK_VENV)/bin/python" -c 'import secrets; print(secrets.token_hex(24))')}"; \
	echo "Colab local runtime: Jupyter on $(COLAB_IP):$(COLAB_PORT), notebooks run on $(PY)."; \
	echo "1. Open the notebook in Colab (File > Open notebook > GitHub or Upload: colabs/*.ipynb)."; \
	echo "2. Connect (top right) > Connect to a local runtime; paste this URL; Connect:"; \
	echo ""; \
	echo "   http://$(COLAB_URL_HOST):$(COLAB_PORT)/?token=$$token"; \
	echo ""; \
	echo "3. Run the notebook. The browser must run on this machine (Colab connects from it to"; \
	echo "   $(COLAB_URL_HOST)); from another one, forward the port: ssh -L $(COLAB_PORT):127.0.0.1:$(COLAB_PORT) <this host>."; \
	echo "Anyone with this URL can run code as $$(id -un) here. Control-C stops the runtime."; \
	JUPYTER_TOKEN="$$token" $(JUPYTER) notebook --no-browser --notebook-dir=colabs \
	  --ip=$(COLAB_IP) --port=$(COLAB_PORT) --ServerApp.port_retries=0 \
	  --ServerApp.allow_origin=https://colab.research.google.com \
	  --ServerApp.allow_credentials=True $(ALLOW_ROOT) $(COLAB_FLAGS)

# Span-corruption pre-training of the text-to-SQL seq2seq model (issue 30)
# on the public text of ../shared/data that no text-to-SQL client owns, at
# most 60 minutes on 2 cores. The run directory is the cache: running it
# again resumes an interrupted run from its last checkpoint, or reads a
# finished one back. Fine-tune from it with
# train_text2sql --flagfile=apps/text2sql/flags/train_text2sql.subword.flags
# --init_from=$(PRETRAIN_DIR).
PRETRAIN_DIR ?= runs/pretrain_cpu
pretrain: $(STAMP)
	"$(PY)" -m apps.text2sql.bin.pretrain_seq2seq \
	  --flagfile=apps/text2sql/flags/pretrain_seq2seq.cpu.flags \
	  --output_dir=$(PRETRAIN_DIR)

bench: bench-scaling bench-round-overhead bench-text2sql bench-text2sql-templates bench-demo-seeds bench-peft bench-sparse-tags bench-select bench-vocab-slice bench-nmt bench-fcl bench-determinism bench-robustness

# A TFF round against the same local training in pure TensorFlow (and TFF
# with concurrency 1), for the r8 classifier and the text-to-SQL seq2seq
# model; docs/results/round_overhead.md discusses the JSON it writes.
bench-round-overhead: $(STAMP)
	"$(PY)" -m apps.scaling.bin.round_overhead --model=r8_classifier --repeats=7 \
	  --output_json=docs/results/round_overhead_r8.json
	"$(PY)" -m apps.scaling.bin.round_overhead --model=text2sql_seq2seq --repeats=15 \
	  --output_json=docs/results/round_overhead_text2sql.json

# What the shared process cache (tff_nlp.training.shared_processes) saves on
# a 10-run sweep in one Python process: the sparse-tags smoke comparison,
# seeds 0-9, each without and with the cache, side by side; minutes.
bench-process-cache: $(STAMP)
	"$(PY)" -m apps.scaling.bin.process_cache_sweep \
	  --flagfile=apps/partial_models/flags/train_sparse_tags.smoke.flags \
	  --output_dir=runs/process_cache_sweep --runs=10 --progress=off

# Issue-8 scaling measurements (docs/results/scaling.md): round time and
# peak memory for 10, 100 and 1,000 clients per round (one child process
# per setting), on one worker and on two; resident memory over 200 rounds.
SCALING_DIR ?= runs/scaling
# The cross-device population of bench-scaling: 10^5 simulated users of 8
# TREC-50 questions each (Dirichlet label skew), 1 warm-up and 2 timed rounds.
POPULATION = --population_size=100000 --rounds=2 --warmup_rounds=1

bench-scaling: $(STAMP)
	"$(PY)" -m apps.scaling.bin.client_scaling --output_dir=$(SCALING_DIR)/clients_1worker
	"$(PY)" -m apps.scaling.bin.client_scaling --output_dir=$(SCALING_DIR)/clients_2workers --num_workers=2
	"$(PY)" -m apps.scaling.bin.memory_growth --output_dir=$(SCALING_DIR)/memory_growth
	"$(PY)" -m apps.scaling.bin.memory_growth --output_dir=$(SCALING_DIR)/memory_growth_glibc_default \
	  --worker_malloc_arena_max=0 --worker_malloc_mmap_threshold=0
	"$(PY)" -m apps.scaling.bin.client_scaling --output_dir=$(SCALING_DIR)/population_1worker $(POPULATION) \
	  --clients_per_round_values=100,1000,10000 --clients_per_subround=250
	"$(PY)" -m apps.scaling.bin.client_scaling --output_dir=$(SCALING_DIR)/population_1worker_no_subrounds \
	  $(POPULATION) --clients_per_round_values=100,1000
	for s in 50 100 500 1000; do "$(PY)" -m apps.scaling.bin.client_scaling --output_dir=$(SCALING_DIR)/subrounds_$$s \
	  $(POPULATION) --clients_per_round_values=1000 --clients_per_subround=$$s || exit 1; done
	for w in 2 4; do \
	  "$(PY)" -m apps.scaling.bin.client_scaling --output_dir=$(SCALING_DIR)/population_$${w}workers $(POPULATION) \
	    --clients_per_round_values=1000 --num_workers=$$w --clients_per_subround=250 || exit 1; \
	  "$(PY)" -m apps.scaling.bin.client_scaling --output_dir=$(SCALING_DIR)/population_$${w}workers_no_subrounds \
	    $(POPULATION) --clients_per_round_values=1000 --num_workers=$$w || exit 1; done
	mkdir -p docs/results/scaling
	for d in clients_1worker clients_2workers memory_growth memory_growth_glibc_default \
	  population_1worker population_1worker_no_subrounds population_2workers population_2workers_no_subrounds \
	  population_4workers population_4workers_no_subrounds subrounds_50 subrounds_100 subrounds_500 subrounds_1000; do \
	  mkdir -p docs/results/scaling/$$d && cp $(SCALING_DIR)/$$d/*.json $(SCALING_DIR)/$$d/*.md \
	    $(SCALING_DIR)/$$d/*.png docs/results/scaling/$$d/; done

# Every recorded run of the benchmarks below (records/README.md): committed,
# outside the source tree and the pages (docs/results/ holds reports only).
# Each benchmark writes its finished runs' records (no weights) to
# $(RECORDS_DIR)/<page>/... and reads them back, so a fresh checkout trains
# only the missing runs and every report rebuilds from them without training.
# From a worktree (DEVELOPERS.md), pass the main tree's: RECORDS_DIR=/abs/records.
RECORDS_DIR ?= records

# Every method of the Lorar paper's Table 2 with the cpu preset. Each run is
# cached under its configuration in $(TEXT2SQL_BENCH_DIR), so an interrupted
# benchmark continues where it stopped, and each finished run's records (no
# weights) are archived in $(TEXT2SQL_ARCHIVE_DIR), which is committed: a
# fresh checkout reads those runs back and trains only the missing ones. The
# tables and figures are then copied to docs/results/text2sql/
# (docs/results/text2sql.md discusses them). TEXT2SQL_BENCH_FLAGS narrows it,
# e.g. TEXT2SQL_BENCH_FLAGS=--methods=fedavg/num_examples,fedavg/lorar.
TEXT2SQL_BENCH_DIR ?= runs/text2sql_benchmark_cpu
TEXT2SQL_ARCHIVE_DIR ?= $(RECORDS_DIR)/text2sql/runs
TEXT2SQL_BENCH_FLAGS ?=
bench-text2sql: $(STAMP)
	"$(PY)" -m apps.text2sql.bin.text2sql_benchmark \
	  --flagfile=apps/text2sql/flags/train_text2sql.cpu.flags \
	  --output_dir=$(TEXT2SQL_BENCH_DIR) --progress=off \
	  --archive_dir=$(TEXT2SQL_ARCHIVE_DIR) $(TEXT2SQL_BENCH_FLAGS)
	mkdir -p docs/results/text2sql
	cp $(TEXT2SQL_BENCH_DIR)/results.md $(TEXT2SQL_BENCH_DIR)/results.json \
	  $(TEXT2SQL_BENCH_DIR)/*.png docs/results/text2sql/

# Issue 30: full fine-tuning vs LoRA adapters from the pre-trained model
# (make pretrain first, if it has not run), and full fine-tuning from
# scratch, FedAvg with num_examples and Lorar weighting, 3 seeds, full test
# splits (train_text2sql.peft.flags); resumable, runs archived in
# $(RECORDS_DIR)/peft/runs; the generated report is docs/results/peft/results.md
# (and .json), which docs/results/peft.md discusses.
PEFT_BENCH_DIR ?= runs/peft
PEFT_ARCHIVE_DIR ?= $(RECORDS_DIR)/peft/runs
PEFT_VARIANTS ?= scratch_full,pretrained_full,lora_r4,lora_r8,lora_r16
bench-peft: $(STAMP)
	test -f $(PRETRAIN_DIR)/results.json || $(MAKE) pretrain
	"$(PY)" -m apps.text2sql.bin.text2sql_benchmark \
	  --flagfile=apps/text2sql/flags/train_text2sql.peft.flags \
	  --output_dir=$(PEFT_BENCH_DIR) --progress=off \
	  --archive_dir=$(PEFT_ARCHIVE_DIR) --variants=$(PEFT_VARIANTS) \
	  --pretrained_dir=$(PRETRAIN_DIR) --time_rounds=3 $(PEFT_BENCH_FLAGS)
	mkdir -p docs/results/peft
	cp $(PEFT_BENCH_DIR)/results.json $(PEFT_BENCH_DIR)/results.md \
	  $(PEFT_BENCH_DIR)/*.png docs/results/peft/

# Whether LoRA is held back by the frozen token embedding (which is also the
# tied output projection): LoRA r = 8 with the embedding adapted too
# (--lora_targets=...,embedding), FedAvg (num_examples), 3 seeds, in
# make bench-peft's folder; then the report of every variant, this one
# beside them (docs/results/peft.md discusses it).
bench-peft-embedding: $(STAMP)
	test -f $(PRETRAIN_DIR)/results.json || $(MAKE) pretrain
	"$(PY)" -m apps.text2sql.bin.text2sql_benchmark \
	  --flagfile=apps/text2sql/flags/train_text2sql.peft.flags \
	  --output_dir=$(PEFT_BENCH_DIR) --progress=off \
	  --archive_dir=$(PEFT_ARCHIVE_DIR) --variants=lora_r8_embedding \
	  --methods=fedavg/num_examples --pretrained_dir=$(PRETRAIN_DIR)
	$(MAKE) bench-peft PEFT_VARIANTS=$(PEFT_VARIANTS),lora_r8_embedding \
	  PEFT_BENCH_FLAGS=--report_only

# How train_text2sql.peft.flags' --lora_alpha was chosen: LoRA r = 4 with
# FedAvg (num_examples), seed 0, alpha = 4 (= r: scale 1, as the LoraConfig
# default alpha = None), 16, 64 and 256, compared by dev token accuracy
# after the last round (docs/results/peft.md). Runs are archived in
# $(RECORDS_DIR)/peft/lora_scale; they share runs/peft with make bench-peft
# (the chosen alpha's run is one of its runs), whose report they overwrite
# until make bench-peft runs again.
PEFT_LORA_SCALE_DIR ?= $(RECORDS_DIR)/peft/lora_scale
bench-peft-lora-scale: $(STAMP)
	test -f $(PRETRAIN_DIR)/results.json || $(MAKE) pretrain
	for alpha in 4 16 64 256; do \
	  "$(PY)" -m apps.text2sql.bin.text2sql_benchmark \
	    --flagfile=apps/text2sql/flags/train_text2sql.peft.flags \
	    --output_dir=$(PEFT_BENCH_DIR) --progress=off \
	    --archive_dir=$(PEFT_LORA_SCALE_DIR) --variants=lora_r4 --seeds=0 \
	    --methods=fedavg/num_examples --pretrained_dir=$(PRETRAIN_DIR) \
	    --lora_alpha=$$alpha || exit 1; \
	done

# The paper's Table 2 with the template parser (train_text2sql.templates.flags):
# finetuning, centralized and {FedAvg, FedOPT, FedProx} x {num_examples,
# lorar}, every method with 3 seeds, about 5 minutes a run; resumable, runs
# archived in $(RECORDS_DIR)/text2sql_templates/runs (discussed in
# docs/results/text2sql.md).
TEXT2SQL_TEMPLATES_BENCH_DIR ?= runs/text2sql_templates_benchmark
TEXT2SQL_TEMPLATES_METHODS ?= centralized,finetune,fedavg/num_examples,fedavg/lorar,fedopt/num_examples,fedopt/lorar,fedprox/num_examples,fedprox/lorar
bench-text2sql-templates: $(STAMP)
	"$(PY)" -m apps.text2sql.bin.text2sql_benchmark \
	  --flagfile=apps/text2sql/flags/train_text2sql.templates.flags \
	  --output_dir=$(TEXT2SQL_TEMPLATES_BENCH_DIR) --progress=off \
	  --methods=$(TEXT2SQL_TEMPLATES_METHODS) --single_seed_methods= \
	  --archive_dir=$(RECORDS_DIR)/text2sql_templates/runs $(TEXT2SQL_BENCH_FLAGS)
	mkdir -p docs/results/text2sql_templates
	cp $(TEXT2SQL_TEMPLATES_BENCH_DIR)/results.md \
	  $(TEXT2SQL_TEMPLATES_BENCH_DIR)/results.json \
	  $(TEXT2SQL_TEMPLATES_BENCH_DIR)/*.png docs/results/text2sql_templates/

# The same runs' oracle-entities setting: templates filled with every value
# annotated on the question, including values it never states (the only
# filling before issue 65; its runs are the ones archived before it, so this
# trains nothing on a checkout that has them). Report only, in
# docs/results/text2sql_templates_oracle/.
TEXT2SQL_TEMPLATES_ORACLE_DIR ?= runs/text2sql_templates_oracle
bench-text2sql-templates-oracle: $(STAMP)
	"$(PY)" -m apps.text2sql.bin.text2sql_benchmark \
	  --flagfile=apps/text2sql/flags/train_text2sql.templates.flags \
	  --template_values=annotated \
	  --output_dir=$(TEXT2SQL_TEMPLATES_ORACLE_DIR) --progress=off \
	  --methods=$(TEXT2SQL_TEMPLATES_METHODS) --single_seed_methods= \
	  --archive_dir=$(RECORDS_DIR)/text2sql_templates/runs $(TEXT2SQL_BENCH_FLAGS)
	mkdir -p docs/results/text2sql_templates_oracle
	cp $(TEXT2SQL_TEMPLATES_ORACLE_DIR)/results.md \
	  $(TEXT2SQL_TEMPLATES_ORACLE_DIR)/results.json \
	  docs/results/text2sql_templates_oracle/

# How the demo preset measures over 3 seeds (make demo runs seed 0 only):
# FedAvg vs FedAvg + Lorar, train_text2sql.demo.flags, seeds 0, 1, 2, about
# 1-2 minutes a run; resumable, runs archived in $(RECORDS_DIR)/text2sql_demo/runs
# (discussed in docs/results/text2sql.md, "make demo").
DEMO_SEEDS_DIR ?= runs/text2sql_demo_seeds
bench-demo-seeds: $(STAMP)
	"$(PY)" -m apps.text2sql.bin.text2sql_benchmark \
	  --flagfile=apps/text2sql/flags/train_text2sql.demo.flags \
	  --methods=fedavg/num_examples,fedavg/lorar --seeds=0,1,2 \
	  --output_dir=$(DEMO_SEEDS_DIR) --progress=off \
	  --archive_dir=$(RECORDS_DIR)/text2sql_demo/runs \
	  --reference_results=docs/results/text2sql_templates/results.json \
	  $(TEXT2SQL_BENCH_FLAGS)
	mkdir -p docs/results/text2sql_demo
	cp $(DEMO_SEEDS_DIR)/results.md $(DEMO_SEEDS_DIR)/results.json \
	  $(DEMO_SEEDS_DIR)/*.png docs/results/text2sql_demo/

# Partial models (tff.federated_select) vs dense FedAvg on the tag task, three
# seeds, then 50 keys of 4 rows against 200 one-row keys on the same seeds;
# the reports are copied to docs/results/federated_select/ (discussed in
# docs/results/federated_select.md). 10-25 minutes a seed on 2 cores;
# every seed resumes on its own.
SPARSE_TAGS_DIR ?= runs/sparse_tags_cpu
SPARSE_TAGS_SEEDS ?= 0,1,2
bench-sparse-tags: $(STAMP)
	"$(PY)" -m apps.partial_models.bin.train_sparse_tags \
	  --flagfile=apps/partial_models/flags/train_sparse_tags.cpu.flags \
	  --seeds=$(SPARSE_TAGS_SEEDS) --output_dir=$(SPARSE_TAGS_DIR) --progress=off
	"$(PY)" -m apps.partial_models.bin.train_sparse_tags \
	  --flagfile=apps/partial_models/flags/train_sparse_tags.cpu.flags \
	  --max_keys=50 --block_size=4 --methods=sparse,sparse_per_row \
	  --seeds=$(SPARSE_TAGS_SEEDS) --output_dir=$(SPARSE_TAGS_DIR)_blocks \
	  --compare_with=$(SPARSE_TAGS_DIR) --progress=off
	mkdir -p docs/results/federated_select/blocks
	cp $(SPARSE_TAGS_DIR)/seeds.md $(SPARSE_TAGS_DIR)/seeds.json \
	  $(SPARSE_TAGS_DIR)/*.png docs/results/federated_select/
	cp $(SPARSE_TAGS_DIR)_blocks/seeds.md $(SPARSE_TAGS_DIR)_blocks/seeds.json \
	  $(SPARSE_TAGS_DIR)_blocks/comparison.md \
	  $(SPARSE_TAGS_DIR)_blocks/comparison.json \
	  docs/results/federated_select/blocks/

# Bytes per client and round time of sparse vs dense as V grows to 10^6.
# About 9 minutes on an idle machine. Round times drift by up to 40% between
# runs, so the resident sparse and dense rounds alternate and the speed-up
# comes with a paired 95% interval.
bench-select: $(STAMP)
	mkdir -p docs/results/federated_select
	"$(PY)" -m apps.partial_models.bin.select_scaling --repeats=12 \
	  --output_json=docs/results/federated_select/select_scaling.json

# Vocabulary-sliced (federated_select of each client's embedding rows) vs
# dense FedAvg on the text-to-SQL clients, cpu preset; each run is cached
# under its configuration in $(VOCAB_SLICE_DIR); the report is copied to
# docs/results/federated_select/ (discussed in docs/results/federated_select.md).
VOCAB_SLICE_DIR ?= runs/vocab_slice_cpu
bench-vocab-slice: $(STAMP)
	"$(PY)" -m apps.partial_models.bin.vocab_slice \
	  --flagfile=apps/text2sql/flags/train_text2sql.subword.flags \
	  --output_dir=$(VOCAB_SLICE_DIR) --progress=off
	mkdir -p docs/results/federated_select
	cp $(VOCAB_SLICE_DIR)/vocab_slice.md $(VOCAB_SLICE_DIR)/vocab_slice.json \
	  $(VOCAB_SLICE_DIR)/vocab_slice_dev_token_accuracy.png docs/results/federated_select/

# Federated mixed-domain NMT (dynamic pulling paper) with the cpu preset:
# every engine is cached under its configuration in $(NMT_BENCH_DIR), so an
# interrupted benchmark continues where it stopped; the report is copied to
# docs/results/nmt_dynamic_pulling/ (discussed in
# docs/results/nmt_dynamic_pulling.md). Finished engines (results and
# translations, not weights) are kept in $(RECORDS_DIR)/nmt_dynamic_pulling
# (apps.common.bin.run_archive) and restored first, so a new machine trains only
# the others; the generic engine, restored without its weights, is trained
# again only if an engine still to train starts from it (about an hour; on
# the same machine kind it comes out identical, and train_nmt refuses to mix
# engines that started from other generic weights).
NMT_BENCH_DIR ?= runs/nmt_cpu
NMT_FLAGS ?= apps/nmt/flags/train_nmt.cpu.flags
NMT_ARCHIVED = '--files=results.json,config.json,predictions/*.jsonl'
bench-nmt: $(STAMP)
	"$(PY)" -m apps.common.bin.run_archive --action=restore \
	  --archive_dir=$(RECORDS_DIR)/nmt_dynamic_pulling \
	  --runs_dir=$(NMT_BENCH_DIR)/engines
	status=0; "$(PY)" -m apps.nmt.bin.train_nmt \
	  --flagfile=$(NMT_FLAGS) \
	  --output_dir=$(NMT_BENCH_DIR) --progress=off || status=$$?; \
	"$(PY)" -m apps.common.bin.run_archive --action=save \
	  --archive_dir=$(RECORDS_DIR)/nmt_dynamic_pulling \
	  --runs_dir=$(NMT_BENCH_DIR)/engines $(NMT_ARCHIVED); \
	test $$status = 0
	mkdir -p docs/results/nmt_dynamic_pulling
	cp $(NMT_BENCH_DIR)/results.md $(NMT_BENCH_DIR)/results.json \
	  docs/results/nmt_dynamic_pulling/
	for f in $(NMT_BENCH_DIR)/*.png; do if [ -e "$$f" ]; then \
	  cp "$$f" docs/results/nmt_dynamic_pulling/; fi; done

# The paper's Controllers baseline on the same data, 3 seeds
# (train_nmt.cpu_controllers.flags): bench-nmt with that preset, resumable
# and archived the same way. Not in bench-nmt: about 1.7-2.0 hours for its
# 3 engine-seeds and, on a machine without the generic engine's weights,
# about an hour more to train that again (measured costs in the preset).
bench-nmt-controllers:
	$(MAKE) bench-nmt NMT_FLAGS=apps/nmt/flags/train_nmt.cpu_controllers.flags

# Federated continual text classification (issues 7, 27): every run is
# cached under its configuration in $(FCL_BENCH_DIR) and checkpointed after
# every task, so an interrupted benchmark continues where it stopped. The
# main run (train_fcl.cpu.flags: 5 clients, relayed label sets, frozen
# GloVe, 3 seeds, every method and dataset), then, for the transfer claims
# (FedWeIT, FedSeIT, FedSeIT + SIT and the ablation, 3 seeds), the ones
# in this order:
#   paper_lr  - the paper's λ1 = 1e-3 and learning rate 1e-4 (TREC-6);
#   skipgram  - the library's own skip-gram vectors instead of GloVe (TREC-6);
#   random    - the authors' task generator (the control, every dataset);
#   clients10 - 10 clients (TREC-6: 15 label sets, 14 needed), last: its
#               FedSeIT runs take about 12 GB (docs/results/fcl.md), and
#               beside another job the kernel's OOM killer stopped them twice.
# Each report goes to docs/results/fcl/ (the main run) or a sub-folder, and
# docs/results/fcl/variants.md puts the settings side by side (fcl_variants).
# Every setting's finished runs (results only) are kept in
# $(RECORDS_DIR)/fcl/<main or variant> (apps.common.bin.run_archive), saved after
# the setting even when it fails, and restored before it, so a new machine
# trains only the runs that never finished.
# train_fcl starts a fresh TFF worker for every dataset and seed: one worker
# for all 63 main runs grew past 8 GB even with capped malloc arenas.
FCL_BENCH_DIR ?= runs/fcl_cpu5
# Extra flags of every train_fcl run; `make bench-fcl FCL_FLAGS=--report_only`
# trains nothing and writes every report again from the archived runs.
FCL_FLAGS ?=
comma := ,
empty :=
space := $(empty) $(empty)
FCL_TRANSFER_METHODS = --methods=fedweit,fedseit,fedseit_sit,fedseit_no_foreign
FCL_VARIANTS = \
  paper_lr:--sparsity=1e-3,--learning_rate=1e-4,--datasets=trec6 \
  skipgram:--word_vectors=skipgram,--embedding_dim=50,--datasets=trec6 \
  random:--construction=random \
  clients10:--num_clients=10,--datasets=trec6
bench-fcl: $(STAMP)
	"$(PY)" -m apps.common.bin.run_archive --action=restore \
	  --archive_dir=$(RECORDS_DIR)/fcl/main --runs_dir=$(FCL_BENCH_DIR)/runs
	status=0; "$(PY)" -m apps.fcl.bin.train_fcl \
	  --flagfile=apps/fcl/flags/train_fcl.cpu.flags \
	  --output_dir=$(FCL_BENCH_DIR) $(FCL_FLAGS) || status=$$?; \
	"$(PY)" -m apps.common.bin.run_archive --action=save \
	  --archive_dir=$(RECORDS_DIR)/fcl/main --runs_dir=$(FCL_BENCH_DIR)/runs; \
	test $$status = 0
	set -e; for variant in $(FCL_VARIANTS); do \
	  name=$${variant%%:*}; extra=$$(echo $${variant#*:} | tr ',' ' '); \
	  "$(PY)" -m apps.common.bin.run_archive --action=restore \
	    --archive_dir=$(RECORDS_DIR)/fcl/$$name \
	    --runs_dir=$(FCL_BENCH_DIR)/$$name/runs; \
	  status=0; "$(PY)" -m apps.fcl.bin.train_fcl \
	    --flagfile=apps/fcl/flags/train_fcl.cpu.flags \
	    --output_dir=$(FCL_BENCH_DIR)/$$name $(FCL_TRANSFER_METHODS) $$extra \
	    $(FCL_FLAGS) || status=$$?; \
	  "$(PY)" -m apps.common.bin.run_archive --action=save \
	    --archive_dir=$(RECORDS_DIR)/fcl/$$name \
	    --runs_dir=$(FCL_BENCH_DIR)/$$name/runs; \
	  test $$status = 0; \
	done
	set -e; for dir in . $(foreach v,$(FCL_VARIANTS),$(firstword $(subst :, ,$(v)))); do \
	  mkdir -p docs/results/fcl/$$dir/heatmaps; \
	  cp $(FCL_BENCH_DIR)/$$dir/results.md $(FCL_BENCH_DIR)/$$dir/results.json \
	    docs/results/fcl/$$dir/; \
	  cp $(FCL_BENCH_DIR)/$$dir/heatmaps/*.png docs/results/fcl/$$dir/heatmaps/; \
	done
	"$(PY)" -m apps.fcl.bin.fcl_variants --bench_dir=$(FCL_BENCH_DIR) \
	  --variants=$(subst $(space),$(comma),$(foreach v,$(FCL_VARIANTS),$(firstword $(subst :, ,$(v))))) \
	  --report_dir=docs/results/fcl

# Which settings change a run's numbers: reruns of the text-to-SQL smoke run
# with other concurrency, thread pools, oneDNN and seed
# (docs/results/reliability.md, "Determinism").
DETERMINISM_DIR ?= runs/determinism
bench-determinism: $(STAMP)
	"$(PY)" -m apps.text2sql.bin.determinism --output_dir=$(DETERMINISM_DIR)
	cp $(DETERMINISM_DIR)/determinism.md $(DETERMINISM_DIR)/determinism.json \
	  docs/results/

# Issue 25's attack benchmark: 1-3 attackers of 8 x num_examples, uniform and
# Lorar x no defence, weight cap, robust aggregation, both; every run cached
# under its configuration in $(ROBUSTNESS_DIR), so an interrupted benchmark
# continues where it stopped; the reports go to docs/results/robustness/
# (discussed in docs/results/robustness.md).
ROBUSTNESS_DIR ?= runs/robustness
bench-robustness: $(STAMP)
	"$(PY)" -m apps.robustness.bin.robustness \
	  --flagfile=apps/robustness/flags/robustness.all.flags \
	  --output_dir=$(ROBUSTNESS_DIR) --report_dir=docs/results/robustness

# Every py_test of //tests/... under Bazel, then stop the Bazel server (a JVM)
# so none lingers. Tests run with .venv/bin/python3 (or $TFF_NLP_PYTHON), Bazel's
# registered Python toolchain, whatever PATH is (DEVELOPERS.md, "Bazel").
bazel-test: $(STAMP)
	status=0; bazel test //tests/... || status=$$?; bazel shutdown; exit $$status

clean:
	rm -rf "$(VENV)" .pytest_cache build *.egg-info

