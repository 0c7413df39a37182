#!/usr/bin/env bash
# Headline benchmarks on an accelerator (issue 39, item 6), with agreement with the CPU.
#
#   bash benchmarks/device.sh            # on the device machine: small on CPU and device,
#                                        # then the full sizes on the device
#   DEVICE_SIZE=small bash benchmarks/device.sh   # small sizes only (a CPU machine: a check)
#
# Writes one JSON: $OUT/device.json when $OUT is set (the device tool's output folder), else
# benchmarks/results/device[_small].json. Steps and their limits (seconds): the CPU
# reference at the small sizes (DEVICE_CPU_TIMEOUT, 240) runs beside the device's small
# sizes (DEVICE_SMALL_TIMEOUT, 120) then full sizes (DEVICE_FULL_TIMEOUT, 330), so the whole
# script stays under eight minutes; a step that runs out is missing from the JSON, not
# waited for (a loaded CPU machine checking the script may need larger limits). JAX with its CUDA plugin must be installed (the
# device image has jax and jax-cuda13-plugin 0.11.2); nothing is downloaded.
set -u
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$HERE")"
PY="${PYTHON:-python3}"
SIZE="${DEVICE_SIZE:-full}"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
if [ -n "${OUT:-}" ]; then DEST="$OUT/device.json"
elif [ "$SIZE" = small ]; then DEST="$HERE/results/device_small.json"
else DEST="$HERE/results/device.json"; fi
start=$(date +%s)

# 1. small sizes on the CPU: the reference numbers (fresh compilation cache: timings
#    honest), in the background on the host's cores while the accelerator works
JAX_PLATFORMS=cpu APPROXCV_COMPILATION_CACHE_DIR="$TMP/cache" \
    timeout "${DEVICE_CPU_TIMEOUT:-240}" "$PY" "$HERE/device.py" --size small \
    --out "$TMP/cpu_small.json" > "$TMP/cpu_small.log" 2>&1 &
cpu_pid=$!
# 2. the same on the default backend (the accelerator when there is one)
APPROXCV_COMPILATION_CACHE_DIR="$TMP/cache_dev" timeout "${DEVICE_SMALL_TIMEOUT:-120}" \
    "$PY" "$HERE/device.py" --size small --out "$TMP/dev_small.json" || true
# 3. headline sizes on the accelerator
files=("$TMP/cpu_small.json" "$TMP/dev_small.json")
if [ "$SIZE" = full ]; then
    APPROXCV_COMPILATION_CACHE_DIR="$TMP/cache_dev" timeout "${DEVICE_FULL_TIMEOUT:-330}" \
        "$PY" "$HERE/device.py" --size full --out "$TMP/dev_full.json" || true
fi
wait "$cpu_pid" || true
cat "$TMP/cpu_small.log"
[ -f "$TMP/dev_full.json" ] && files+=("$TMP/dev_full.json")
for f in "${files[@]:0:2}"; do
    [ -f "$f" ] || { echo "device.sh: $f missing (a step failed or timed out)" >&2; exit 1; }
done
"$PY" "$HERE/device.py" --combine "${files[@]}" --out "$DEST"
echo "device.sh: wrote $DEST in $(( $(date +%s) - start )) s"
