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
