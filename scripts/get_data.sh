#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Downloads the data sets the examples read and the repository does not ship,
# each file checked against its sha256 before it takes its final name.
#
#   scripts/get_data.sh [--dest DIR] [--mirror URL]... [mnist|shakespeare|all]...
#
#   mnist        the four MNIST IDX files, gzip'd, into DIR/mnist/ (the default data set:
#                examples/mnist finds datasets/mnist in the repository by itself)
#   shakespeare  tiny shakespeare into DIR/tinyshakespeare.txt (the repository already ships
#                it as examples/charlm/data/tinyshakespeare.txt; this fetches a fresh copy)
#   all          both
#   --dest DIR   where to put them (default: datasets/ in the repository; the layout is that
#                of ../shared/data, so `--dest ../shared/data` fills that folder)
#   --mirror URL try URL/<file name> (train-images-idx3-ubyte.gz, tinyshakespeare.txt, ...)
#                instead of the canonical mirrors; repeatable, tried in the order given.
#                file:// URLs work (a local copy of the files).
#
# A file already present with the right sha256 is skipped. A download goes to
# a temporary name beside the final one and is renamed only once its sha256
# matches, so a failed or corrupt download never leaves a file under the final
# name. A file that fails on every mirror is reported with the mirrors tried
# and what went wrong on each; the script then exits 1 (2 for bad arguments).
#
# Uses curl, else wget. For tests only: SNUG_GET_DATA_TOOL=curl|wget picks one,
# and SNUG_GET_DATA_SHA256_FILE names a file of "<sha256>  <file name>" lines
# that replace the built-in checksums of the files it lists
# (tests/test_get_data.sh).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PROG="get_data.sh"

# The canonical files. MNIST: the original yann.lecun.com files, from the two
# mirrors that PyTorch and TensorFlow use (the original site is often down).
MNIST_FILES=(train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz
             t10k-labels-idx1-ubyte.gz)
MNIST_MIRRORS=(https://ossci-datasets.s3.amazonaws.com/mnist https://storage.googleapis.com/cvdf-datasets/mnist)
SHAKESPEARE_URL=https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt
declare -A SHA256=(
  [tinyshakespeare.txt]=86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed
  [train-images-idx3-ubyte.gz]=440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609
  [train-labels-idx1-ubyte.gz]=3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c
  [t10k-images-idx3-ubyte.gz]=8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6
  [t10k-labels-idx1-ubyte.gz]=f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6
)

usage() {
  sed -n '3,28p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

die_usage() {
  echo "$PROG: $1 (see $PROG --help)" >&2
  exit 2
}

dest="$ROOT/datasets"
mirrors=()
sets=()
while [ $# -gt 0 ]; do
  case "$1" in
    -h | --help) usage; exit 0 ;;
    --dest)
      [ $# -ge 2 ] || die_usage "--dest needs a directory"
      dest="$2"; shift 2 ;;
    --dest=*) dest="${1#--dest=}"; shift ;;
    --mirror)
      [ $# -ge 2 ] || die_usage "--mirror needs a URL"
      mirrors+=("$2"); shift 2 ;;
    --mirror=*) mirrors+=("${1#--mirror=}"); shift ;;
    mnist | shakespeare | all) sets+=("$1"); shift ;;
    -*) die_usage "unknown option $1" ;;
    *) die_usage "unknown data set $1 (expected mnist, shakespeare or all)" ;;
  esac
done
[ -n "$dest" ] || die_usage "--dest needs a directory"
[ ${#sets[@]} -gt 0 ] || sets=(mnist)

if [ -n "${SNUG_GET_DATA_SHA256_FILE:-}" ]; then
  [ -r "$SNUG_GET_DATA_SHA256_FILE" ] || die_usage "SNUG_GET_DATA_SHA256_FILE=$SNUG_GET_DATA_SHA256_FILE: cannot read it"
  while read -r sum name; do
    if [ -z "${sum:-}" ] || [ "${sum:0:1}" = "#" ]; then continue; fi
    name="${name#\*}"  # sha256sum's binary-mode marker
    [ -n "${SHA256[$name]+x}" ] || die_usage "SNUG_GET_DATA_SHA256_FILE lists $name, which is not a file this script fetches"
    SHA256[$name]="$sum"
  done <"$SNUG_GET_DATA_SHA256_FILE"
  echo "$PROG: checksums of the files listed in $SNUG_GET_DATA_SHA256_FILE come from it (SNUG_GET_DATA_SHA256_FILE)"
fi

tool="${SNUG_GET_DATA_TOOL:-}"
if [ -z "$tool" ]; then
  if command -v curl >/dev/null 2>&1; then tool=curl
  elif command -v wget >/dev/null 2>&1; then tool=wget
  else
    echo "$PROG: neither curl nor wget is installed; install one (apt-get install curl)" >&2
    exit 1
  fi
fi
case "$tool" in
  curl | wget) command -v "$tool" >/dev/null 2>&1 || die_usage "SNUG_GET_DATA_TOOL=$tool is not installed" ;;
  *) die_usage "SNUG_GET_DATA_TOOL must be curl or wget, got $tool" ;;
esac

sha256_of() {
  if command -v sha256sum >/dev/null 2>&1; then sha256sum "$1" | cut -d' ' -f1
  else shasum -a 256 "$1" | cut -d' ' -f1; fi
}

# fetch URL OUT: exit status 0 when OUT holds what URL served. wget has no
# file:// scheme, so a local mirror is copied.
fetch() {
  local url="$1" out="$2"
  if [ "$tool" = curl ]; then
    curl -fsSL --connect-timeout 20 --retry 2 -o "$out" "$url"
  elif [ "${url#file://}" != "$url" ]; then
    cp "${url#file://}" "$out"
  else
    wget -q -T 20 -t 3 -O "$out" "$url"
  fi
}

tmp=""  # the download in progress, removed if the script stops
trap '[ -z "$tmp" ] || rm -f "$tmp"' EXIT
trap 'exit 130' INT TERM

failed=()

# get DIR NAME URL...: DIR/NAME from the first URL whose bytes have NAME's sha256.
get() {
  local dir="$1" name="$2"
  shift 2
  local final="$dir/$name" want="${SHA256[$name]}" got url err
  if [ -f "$final" ]; then
    got="$(sha256_of "$final")"
    if [ "$got" = "$want" ]; then
      echo "$final: present, sha256 ok; skipped"
      return 0
    fi
    echo "$final: present but its sha256 is $got, not $want; fetching it again"
  fi
  mkdir -p "$dir"
  tmp="$dir/.$name.part.$$"
  local -a tried=()
  for url in "$@"; do
    rm -f "$tmp"
    if ! err="$(fetch "$url" "$tmp" 2>&1)"; then
      err="${err##*$'\n'}"  # the tool's last line says why
      tried+=("$url (download failed${err:+: $err})")
      echo "$name: $url: download failed${err:+: $err}" >&2
      continue
    fi
    got="$(sha256_of "$tmp")"
    if [ "$got" != "$want" ]; then
      tried+=("$url (sha256 $got, expected $want)")
      echo "$name: $url: wrong sha256 $got (expected $want); rejected" >&2
      continue
    fi
    mv -f "$tmp" "$final"
    tmp=""
    echo "$final: fetched from $url, sha256 ok"
    return 0
  done
  rm -f "$tmp"
  tmp=""
  {
    if [ -f "$final" ]; then echo "$PROG: could not get $name (the $final that was there is left as it was); mirrors tried:"
    else echo "$PROG: could not get $name (nothing written to $final); mirrors tried:"; fi
    printf '  %s\n' "${tried[@]}"
  } >&2
  failed+=("$name")
}

# urls NAME CANONICAL...: the URLs to try for NAME (--mirror replaces the canonical ones).
urls() {
  local name="$1" m
  shift
  if [ ${#mirrors[@]} -gt 0 ]; then
    for m in "${mirrors[@]}"; do echo "${m%/}/$name"; done
  else
    printf '%s\n' "$@"
  fi
}

want_set() {
  local s
  for s in "${sets[@]}"; do [ "$s" = "$1" ] || [ "$s" = all ] && return 0; done
  return 1
}

if want_set mnist; then
  for f in "${MNIST_FILES[@]}"; do
    mapfile -t u < <(urls "$f" "${MNIST_MIRRORS[@]/%//$f}")
    get "$dest/mnist" "$f" "${u[@]}"
  done
fi
if want_set shakespeare; then
  mapfile -t u < <(urls tinyshakespeare.txt "$SHAKESPEARE_URL")
  get "$dest" tinyshakespeare.txt "${u[@]}"
fi

if [ ${#failed[@]} -gt 0 ]; then
  echo "$PROG: FAILED: ${failed[*]}" >&2
  exit 1
fi
if want_set mnist; then
  if [ "$dest" = "$ROOT/datasets" ]; then
    echo "MNIST is in $dest/mnist, where examples/mnist looks by default"
  else
    echo "MNIST is in $dest/mnist: examples/mnist --data $dest/mnist"
  fi
fi
