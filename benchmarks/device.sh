#!/usr/bin/env bash
# Headline benchmarks on an accelerator (issue 39, item 6), with agreement with the CPU.
#
#   bash benchmarks/device.sh            # on the device machine: small on CPU and device,
#                                        # then the full sizes on the device
#   DEVICE_SIZE=small bash benchmarks/device.sh   # small sizes only (a CPU machine: a check)
#
# Writes one JSON: $OUT/device.json when $OUT is set (the device tool's output folder), else
# benchmarks/results/device[_small].json. The whole script ends by DEVICE_DEADLINE seconds
# (460: under eight minutes); a step that runs out of time is missing from the JSON, not
# waited for (a loaded CPU machine checking the script may need a larger deadline):
#   1. in the background, on the host's CPU: the small sizes (the reference numbers);
#   2. the small sizes on the default backend (the accelerator when there is one; at most
#      DEVICE_SMALL_TIMEOUT, 150 s), the HMM benchmarks also with device="default";
#   3. each benchmark at full size with approxcv's placement (the GP and the CRF on the
#      accelerator, the HMMs on the host's CPU: approxcv._runtime.placement), one process each,
#      with its own limit (gp_la_loo 70 s, crf_lso and exact_batches 60 s, then lwcv_ij
#      whatever is left), so one slow benchmark cannot take the others' time; each writes
#      what it finished.
# JAX with its CUDA plugin must be installed (the device image has jax and
# jax-cuda13-plugin 0.11.2); nothing is downloaded.
set -u
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$HERE")"
PY="${PYTHON:-python3}"
SIZE="${DEVICE_SIZE:-full}"
DEADLINE="${DEVICE_DEADLINE:-460}"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
if [ -n "${OUT:-}" ]; then DEST="$OUT/device.json"
elif [ "$SIZE" = small ]; then DEST="$HERE/results/device_small.json"
else DEST="$HERE/results/device.json"; fi
start=$(date +%s)
left() { echo $(( DEADLINE - ($(date +%s) - start) )); }
limit() { local l; l=$(left); [ "$1" -lt "$l" ] && echo "$1" || echo "$(( l > 1 ? l : 1 ))"; }

# 1. the CPU: fresh compilation caches, so its first-call times are honest
JAX_PLATFORMS=cpu APPROXCV_COMPILATION_CACHE_DIR="$TMP/cache_cpu" \
    timeout "$(limit 240)" "$PY" "$HERE/device.py" --size small \
    --out "$TMP/cpu_small.json" > "$TMP/cpu_small.log" 2>&1 &
cpu_pid=$!
# 2. the small sizes on the default backend
APPROXCV_COMPILATION_CACHE_DIR="$TMP/cache_dev" timeout "$(limit "${DEVICE_SMALL_TIMEOUT:-150}")" \
    "$PY" "$HERE/device.py" --size small --out "$TMP/dev_small.json" || true
# 3. the headline sizes on the accelerator, one benchmark per process
files=("$TMP/cpu_small.json" "$TMP/dev_small.json")
if [ "$SIZE" = full ]; then
    for spec in gp_la_loo:70 crf_lso:60 exact_batches:60 lwcv_ij:400; do
        name=${spec%%:*}
        [ "$(left)" -gt 5 ] || { echo "device.sh: no time left for $name" >&2; continue; }
        APPROXCV_COMPILATION_CACHE_DIR="$TMP/cache_dev" timeout "$(limit "${spec##*:}")" \
            "$PY" "$HERE/device.py" --size full --only "$name" \
            --out "$TMP/full_dev_$name.json" || echo "device.sh: $name stopped (exit $?)" >&2
    done
fi
wait "$cpu_pid" || true
cat "$TMP/cpu_small.log" 2>/dev/null
status=0
for f in "${files[@]}"; do      # combined all the same: the JSON names what is missing
    [ -f "$f" ] || { echo "device.sh: $f missing (a step failed or timed out)" >&2; status=1; }
done
for f in "$TMP"/full_*.json; do [ -f "$f" ] && files+=("$f"); done
"$PY" "$HERE/device.py" --combine "${files[@]}" --out "$DEST"
echo "device.sh: wrote $DEST in $(( $(date +%s) - start )) s"
exit $status
