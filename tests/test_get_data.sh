#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# scripts/get_data.sh against local file:// mirrors, no network:
#   - a fetch of every file succeeds and each matches the mirror's copy;
#   - a second run skips them all (its only mirror does not exist);
#   - a corrupt file on the only mirror is rejected, naming it, and nothing
#     is left under its final name (nor a temporary file);
#   - a file present with a wrong sha256 is fetched again and replaced;
#   - a mirror that lacks a file falls back to the next one;
#   - a file on no mirror fails naming the file and every mirror tried;
#   - --help exits 0, an unknown option or data set exits 2 naming it.
# The mirror holds the real files when ../shared/data is beside the repository
# (the built-in checksums are then what is checked); otherwise small generated
# files whose checksums come from SNUG_GET_DATA_SHA256_FILE, after checking
# that the built-in checksums reject them. SNUG_GET_DATA_TEST_MODE=generated
# forces the second mode.
#   tests/test_get_data.sh [REPO_ROOT]
set -uo pipefail

ROOT="$(cd "${1:-$(dirname "${BASH_SOURCE[0]}")/..}" && pwd)"
GET="$ROOT/scripts/get_data.sh"
T="$(mktemp -d "${TMPDIR:-/tmp}/snug_get_data.XXXXXX")"
trap 'rm -rf "$T"' EXIT

MNIST=(train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz)
ALL=("${MNIST[@]}" tinyshakespeare.txt)
fails=0
check() {  # check DESCRIPTION COMMAND...: runs COMMAND, prints ok/FAIL
  local what="$1"
  shift
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fails=$((fails + 1)); fi
}
# run NAME ARGS...: get_data.sh ARGS, stdout+stderr in $T/NAME.log, exit status in $T/NAME.rc
run() {
  local name="$1"
  shift
  "$GET" "$@" >"$T/$name.log" 2>&1
  echo $? >"$T/$name.rc"
  sed "s/^/  [$name] /" "$T/$name.log"
}
rc_is() { [ "$(cat "$T/$1.rc")" = "$2" ]; }
log_has() { grep -qF -- "$2" "$T/$1.log"; }
count_in_log() { grep -cF -- "$2" "$T/$1.log"; }
# same DEST: every file in DEST (mnist/ and tinyshakespeare.txt) equals the full mirror's
same() {
  local f
  for f in "${MNIST[@]}"; do cmp -s "$1/mnist/$f" "$T/full/$f" || return 1; done
  cmp -s "$1/tinyshakespeare.txt" "$T/full/tinyshakespeare.txt"
}
differ() { ! cmp -s "$1" "$2"; }
no_leftovers() { [ -z "$(find "$1" -name '.*.part.*' 2>/dev/null)" ]; }

# ---- the mirror ----
mkdir -p "$T/full"
shared="$ROOT/../shared/data"
mode=generated
if [ "${SNUG_GET_DATA_TEST_MODE:-}" != generated ] && [ -f "$shared/tinyshakespeare.txt" ] &&
  [ -f "$shared/mnist/${MNIST[0]}" ]; then
  mode=real
fi
if [ $mode = real ]; then
  echo "mirror: the real files from $shared (built-in checksums)"
  for f in "${MNIST[@]}"; do ln -s "$shared/mnist/$f" "$T/full/$f"; done
  ln -s "$shared/tinyshakespeare.txt" "$T/full/tinyshakespeare.txt"
else
  echo "mirror: small generated files (checksums from SNUG_GET_DATA_SHA256_FILE)"
  for f in "${ALL[@]}"; do yes "$f" | head -c 3000 >"$T/full/$f"; done
  (cd "$T/full" && sha256sum "${ALL[@]}") >"$T/sums"
  run builtin --dest "$T/builtin" --mirror "file://$T/full" all
  check "built-in checksums reject the generated files" rc_is builtin 1
  check "  ... naming each one" [ "$(count_in_log builtin "wrong sha256")" = 5 ]
  export SNUG_GET_DATA_SHA256_FILE="$T/sums"
fi
# A copy with one flipped byte in t10k-labels, and one without train-labels.
mkdir -p "$T/bad" "$T/partial"
for f in "${ALL[@]}"; do
  ln -s "$T/full/$f" "$T/bad/$f"
  [ "$f" = train-labels-idx1-ubyte.gz ] || ln -s "$T/full/$f" "$T/partial/$f"
done
rm "$T/bad/t10k-labels-idx1-ubyte.gz"
cp "$T/full/t10k-labels-idx1-ubyte.gz" "$T/bad/t10k-labels-idx1-ubyte.gz"
printf '\x55' | dd of="$T/bad/t10k-labels-idx1-ubyte.gz" bs=1 seek=100 conv=notrunc status=none
check "the corrupt copy differs" differ "$T/bad/t10k-labels-idx1-ubyte.gz" "$T/full/t10k-labels-idx1-ubyte.gz"

# ---- flags ----
run help --help
check "--help exits 0" rc_is help 0
check "--help says how to call it" log_has help "get_data.sh [--dest DIR]"
run unknown --dest "$T/x" --frobnicate
check "an unknown option exits 2" rc_is unknown 2
check "  ... naming it" log_has unknown "unknown option --frobnicate"
run badset --dest "$T/x" cifar
check "an unknown data set exits 2" rc_is badset 2
check "  ... naming it" log_has badset "unknown data set cifar"
check "  ... and nothing was fetched" [ ! -e "$T/x" ]

# ---- fetch, then skip ----
run fetch --dest "$T/d1" --mirror "file://$T/full" all
check "fetch all: exit 0" rc_is fetch 0
check "fetch all: the files match the mirror" same "$T/d1"
check "fetch all: no temporary files left" no_leftovers "$T/d1"
run again --dest "$T/d1" --mirror "file://$T/nowhere" all
check "second run: exit 0 with no mirror reachable" rc_is again 0
check "second run: all 5 files skipped" [ "$(count_in_log again "sha256 ok; skipped")" = 5 ]
check "second run: the files are unchanged" same "$T/d1"

# ---- a corrupt mirror ----
run corrupt --dest "$T/d2" --mirror "file://$T/bad" mnist
check "corrupt mirror: exit 1" rc_is corrupt 1
check "corrupt mirror: says which file and why" log_has corrupt "t10k-labels-idx1-ubyte.gz: file://$T/bad/t10k-labels-idx1-ubyte.gz: wrong sha256"
check "corrupt mirror: names the mirror tried" log_has corrupt "could not get t10k-labels-idx1-ubyte.gz"
check "corrupt mirror: nothing under the final name" [ ! -e "$T/d2/mnist/t10k-labels-idx1-ubyte.gz" ]
check "corrupt mirror: no temporary files left" no_leftovers "$T/d2"
check "corrupt mirror: the other three files arrived" cmp -s "$T/d2/mnist/train-images-idx3-ubyte.gz" "$T/full/train-images-idx3-ubyte.gz"
# A corrupt first mirror falls back to a good second one.
run corrupt_then_good --dest "$T/d2" --mirror "file://$T/bad" --mirror "file://$T/full" mnist
check "corrupt then good mirror: exit 0" rc_is corrupt_then_good 0
check "corrupt then good mirror: the file is the good one" cmp -s "$T/d2/mnist/t10k-labels-idx1-ubyte.gz" "$T/full/t10k-labels-idx1-ubyte.gz"

# ---- a wrong file already there ----
echo "not mnist" >"$T/d1/mnist/train-labels-idx1-ubyte.gz"
run replace --dest "$T/d1" --mirror "file://$T/full" mnist
check "a present file with a wrong sha256 is fetched again" log_has replace "present but its sha256 is"
check "  ... and replaced" same "$T/d1"

# ---- fallback to the second mirror ----
run fallback --dest "$T/d3" --mirror "file://$T/partial/" --mirror "file://$T/full" all
check "fallback: exit 0" rc_is fallback 0
check "fallback: train-labels came from the second mirror" log_has fallback "train-labels-idx1-ubyte.gz: fetched from file://$T/full/train-labels-idx1-ubyte.gz"
check "fallback: the others from the first" log_has fallback "train-images-idx3-ubyte.gz: fetched from file://$T/partial/train-images-idx3-ubyte.gz"
check "fallback: the files match" same "$T/d3"

# ---- no mirror has it ----
run missing --dest "$T/d4" --mirror "file://$T/nowhere1" --mirror "file://$T/nowhere2" shakespeare
check "no mirror has it: exit 1" rc_is missing 1
check "no mirror has it: names the file" log_has missing "could not get tinyshakespeare.txt"
check "  ... and the first mirror tried" log_has missing "  file://$T/nowhere1/tinyshakespeare.txt (download failed"
check "  ... and the second" log_has missing "  file://$T/nowhere2/tinyshakespeare.txt (download failed"
check "no mirror has it: nothing under the final name" [ ! -e "$T/d4/tinyshakespeare.txt" ]

# ---- wget as well as curl ----
for tool in curl wget; do
  if command -v $tool >/dev/null 2>&1; then
    SNUG_GET_DATA_TOOL=$tool run tool_$tool --dest "$T/d_$tool" --mirror "file://$T/bad" --mirror "file://$T/full" all
    check "with $tool: exit 0 and the files match" eval "rc_is tool_$tool 0 && same $T/d_$tool"
  else
    echo "($tool is not installed: not tried)"
  fi
done

echo "test_get_data ($mode mirror): $fails failure(s)"
[ $fails = 0 ]
