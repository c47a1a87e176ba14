#!/usr/bin/env bash
# A fresh machine, as far as one can be had on this one: clone the current commit into a
# temporary folder, with empty pip and uv caches and an empty $PYEXECUTORCH_CACHE_DIR, run the
# README's two commands (`make demo`, `make test`) and print their times and the test
# summary line. Uncommitted changes are not part of the check: commit first.
#
#   scripts/fresh_check.sh            (KEEP=1 keeps the temporary folder)
set -uo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
commit="$(git -C "$repo" rev-parse HEAD)"
scratch="$(mktemp -d /tmp/pyexecutorch-fresh.XXXXXX)"
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$scratch"' EXIT

git clone -q --no-local "$repo" "$scratch/clone"
git -C "$scratch/clone" checkout -q "$commit"
mkdir -p "$scratch/pip-cache" "$scratch/cache"
export PIP_CACHE_DIR="$scratch/pip-cache"
export UV_CACHE_DIR="$scratch/uv-cache"
export PYEXECUTORCH_CACHE_DIR="$scratch/cache"
unset PYEXECUTORCH_TEST_CACHE VIRTUAL_ENV

step() {  # step NAME COMMAND...: run in the clone, log to a file, print the time
    local name="$1"; shift
    local start end rc
    start=$(date +%s)
    (cd "$scratch/clone" && "$@") >"$scratch/$name.log" 2>&1
    rc=$?
    end=$(date +%s)
    printf '%-10s exit %d in %d s (%s)\n' "$name" "$rc" "$((end - start))" "$scratch/$name.log"
    return $rc
}

echo "fresh check of $commit in $scratch"
status=0
step "make demo" make demo || status=1
tail -n 5 "$scratch/make demo.log"
step "make test" make test || status=1
echo "test summary:"
grep -E '(passed|failed|error).* in [0-9.]+s' "$scratch/make test.log" | tail -n 1
grep -E -A 12 '^=+ slowest' "$scratch/make test.log" | head -n 13
exit $status
