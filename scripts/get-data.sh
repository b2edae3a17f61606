#!/usr/bin/env bash
# get-data.sh: fetches a dataset for ember's examples and ember-train, for users with internet
# access: downloads, checks the published MD5 checksums, unpacks. Without a network it fails at
# once with a message saying what to download by hand.
#
#   scripts/get-data.sh mnist|cifar10|cifar100 DIR
#
# MNIST: the four IDX .gz files into DIR (ember reads them compressed). CIFAR: the binary archive,
# unpacked into DIR/cifar-10-batches-bin or DIR/cifar-100-binary (ember accepts DIR itself); the
# archive is deleted after unpacking, and the unpacked files' checksums go to MD5SUMS beside them,
# so a second run checks the files instead of downloading again (idempotent).
#
# Environment:
#   EMBER_DATA_MIRROR    a base URL (http://, https://, file://) or a local directory to take the
#                        files from instead of their home sites; a directory lets you verify and
#                        unpack an archive downloaded on another machine.
#   EMBER_DATA_MD5SUMS   with EMBER_DATA_MIRROR only: an md5sum-format file ("<md5>  <file>")
#                        whose sums replace the published ones (for testing the unpack path with
#                        a hand-made archive).
#
# Exit status: 0 done (or already there), 1 failure (network, checksum, disk), 2 bad usage.
set -euo pipefail

readonly kConnectTimeout=10  # seconds: fail fast where there is no network
readonly kName=get-data.sh

usage() {
  cat <<'EOF'
usage: scripts/get-data.sh [--help] DATASET DIR

Downloads DATASET into DIR, checks the published MD5 checksums and unpacks it.
  mnist     MNIST (4 IDX .gz files, read compressed) from https://ossci-datasets.s3.amazonaws.com/mnist/
  cifar10   CIFAR-10 binary version from https://www.cs.toronto.edu/~kriz/, unpacked into DIR/cifar-10-batches-bin
  cifar100  CIFAR-100 binary version from https://www.cs.toronto.edu/~kriz/, unpacked into DIR/cifar-100-binary

Files already present and verified are not downloaded again.
Environment: EMBER_DATA_MIRROR=URL-or-directory fetches the same file names from there instead
(e.g. a folder holding an archive downloaded on another machine).
Exit status: 0 done, 1 failure, 2 bad usage.
EOF
}

die() {
  printf '%s: %s\n' "$kName" "$*" >&2
  exit 1
}

usage_error() {
  printf '%s: %s\n\n' "$kName" "$*" >&2
  usage >&2
  exit 2
}

# ---- command line ----
positional=()
for arg in "$@"; do
  case "$arg" in
    -h | --help) usage; exit 0 ;;
    -*) usage_error "unknown option '$arg'" ;;
    *) positional+=("$arg") ;;
  esac
done
[[ ${#positional[@]} -ge 1 ]] || usage_error "missing DATASET and DIR"
dataset=${positional[0]}
case "$dataset" in
  mnist)
    base_url=https://ossci-datasets.s3.amazonaws.com/mnist
    files=(train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz)
    # As published by torchvision (torchvision/datasets/mnist.py).
    md5s=(f68b3c2dcbeaaa9fbdd348bbdeb94873 d53e105ee54ea40749a09fcbcd1e9432 9fb629c4189551a2d022fa330f9573f3
          ec29112dd5afa0611ce80d1b7f02629c)
    subdir=""
    ;;
  cifar10)
    base_url=https://www.cs.toronto.edu/~kriz
    files=(cifar-10-binary.tar.gz)
    md5s=(c32a1d4ab5d03f1284b67883e8d87530)  # published on https://www.cs.toronto.edu/~kriz/cifar.html
    subdir=cifar-10-batches-bin
    ;;
  cifar100)
    base_url=https://www.cs.toronto.edu/~kriz
    files=(cifar-100-binary.tar.gz)
    md5s=(03b5dce01913d631647c71ecec9e9cb8)
    subdir=cifar-100-binary
    ;;
  *) usage_error "unknown dataset '$dataset' (expected mnist, cifar10 or cifar100)" ;;
esac
[[ ${#positional[@]} -ge 2 ]] || usage_error "missing DIR (where to put $dataset)"
[[ ${#positional[@]} -eq 2 ]] || usage_error "unexpected argument '${positional[2]}'"
dir=${positional[1]}
[[ -n "$dir" ]] || usage_error "DIR is empty"
command -v md5sum >/dev/null || die "md5sum not found (coreutils); it checks the downloads"

# ---- where the files come from ----
source_dir=""  # a local mirror directory, else files come from $base_url
mirror=${EMBER_DATA_MIRROR:-}
if [[ -n "$mirror" ]]; then
  mirror=${mirror%/}
  if [[ "$mirror" == file://* ]]; then
    source_dir=${mirror#file://}
    [[ -d "$source_dir" ]] || usage_error "EMBER_DATA_MIRROR=$mirror: no such directory '$source_dir'"
  elif [[ "$mirror" =~ ^(https?|ftp):// ]]; then
    base_url=$mirror
  elif [[ -d "$mirror" ]]; then
    source_dir=$mirror
  else
    usage_error "EMBER_DATA_MIRROR='$mirror' is neither a directory nor an http(s):// or file:// URL"
  fi
fi
if [[ -n "${EMBER_DATA_MD5SUMS:-}" ]]; then
  [[ -n "$mirror" ]] || usage_error "EMBER_DATA_MD5SUMS is only honoured together with EMBER_DATA_MIRROR"
  [[ -r "$EMBER_DATA_MD5SUMS" ]] || usage_error "EMBER_DATA_MD5SUMS=$EMBER_DATA_MD5SUMS: cannot read it"
  for i in "${!files[@]}"; do
    sum=$(awk -v f="${files[$i]}" '$2 == f || $2 == "*" f { print $1; exit }' "$EMBER_DATA_MD5SUMS")
    if [[ -n "$sum" ]]; then
      printf '%s: note: checking %s against EMBER_DATA_MD5SUMS (%s), not the published md5\n' "$kName" \
        "${files[$i]}" "$sum" >&2
      md5s[i]=$sum
    fi
  done
fi
host=${base_url#*://}
host=${host%%/*}

# ---- cleanup: a failed run leaves no partial file (nor DIR, when this run created it empty) ----
created_dir=0
partial=""
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
  [[ -n "$partial" ]] && rm -rf -- "$partial"
  if [[ $created_dir == 1 ]]; then rmdir -- "$dir" 2>/dev/null || true; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

md5_of() { md5sum -- "$1" | cut -d' ' -f1; }

# Prints "<curl|wget>" or fails: only needed when fetching over the network.
downloader() {
  if command -v curl >/dev/null; then echo curl
  elif command -v wget >/dev/null; then echo wget
  else die "neither curl nor wget is installed; install one (apt-get install curl) or use EMBER_DATA_MIRROR=DIR"
  fi
}

# Fails at once, naming the host and what to fetch by hand, when the source cannot be reached.
probe() {
  local tool=$1 url=$2 rc=0
  if [[ $tool == curl ]]; then
    # Any HTTP answer (even 403/404) proves the host is reachable; only transport errors fail.
    curl -sS -o /dev/null --head --connect-timeout "$kConnectTimeout" --max-time $((2 * kConnectTimeout)) "$url" \
      2>/dev/null || rc=$?
  else
    wget -q --spider --timeout="$kConnectTimeout" --tries=1 "$url" 2>/dev/null || rc=$?
    [[ $rc == 8 ]] && rc=0  # wget 8: the server answered with an error status: reachable
  fi
  if [[ $rc != 0 ]]; then
    local what="unpack it into $dir"
    [[ -z "$subdir" ]] && what="put them into $dir"
    printf '%s: cannot reach %s (no network?); download %s elsewhere and %s\n' "$kName" "$host" "${files[*]}" \
      "$what" >&2
    printf '%s: (or put the file(s) in a folder and run EMBER_DATA_MIRROR=FOLDER %s %s %s to check (and unpack) them)\n' \
      "$kName" "$0" "$dataset" "$dir" >&2
    exit 1
  fi
}

# fetch FILE DEST: copies FILE from the mirror directory or downloads it from $base_url.
fetch() {
  local file=$1 dest=$2
  if [[ -n "$source_dir" ]]; then
    [[ -f "$source_dir/$file" ]] || die "EMBER_DATA_MIRROR: '$source_dir/$file' not found"
    cp -- "$source_dir/$file" "$dest" || die "cannot copy '$source_dir/$file' to '$dest'"
    return
  fi
  local url="$base_url/$file"
  echo "$kName: downloading $url"
  if [[ $tool == curl ]]; then
    local progress=-sS
    [[ -t 2 ]] && progress=--progress-bar
    curl -fL $progress --connect-timeout "$kConnectTimeout" --retry 2 -o "$dest" "$url" || die "download of $url failed"
  else
    wget -nv --timeout="$kConnectTimeout" --tries=3 -O "$dest" "$url" || die "download of $url failed"
  fi
}

# fetch_verified FILE MD5 DEST: fetches into DEST.part, checks the md5, renames to DEST.
fetch_verified() {
  local file=$1 want=$2 dest=$3 got
  partial="$dest.part"
  fetch "$file" "$partial"
  got=$(md5_of "$partial")
  if [[ "$got" != "$want" ]]; then
    rm -f -- "$partial"
    partial=""
    die "checksum mismatch for $file: expected md5 $want, found $got; deleted the bad download"
  fi
  mv -f -- "$partial" "$dest"
  partial=""
  echo "$kName: $file: md5 $got verified"
}

# ---- nothing to do when everything is present and verified ----
all_present() {
  if [[ -z "$subdir" ]]; then
    local i
    for i in "${!files[@]}"; do
      [[ -f "$dir/${files[$i]}" && "$(md5_of "$dir/${files[$i]}")" == "${md5s[$i]}" ]] || return 1
    done
    return 0
  fi
  [[ -f "$dir/$subdir/MD5SUMS" ]] && (cd -- "$dir/$subdir" && md5sum --quiet --status -c MD5SUMS) 2>/dev/null
}
if [[ -d "$dir" ]] && all_present; then
  echo "$kName: $dataset: $dir already holds the verified files; nothing to do"
  exit 0
fi
if [[ -n "$subdir" && -f "$dir/$subdir/MD5SUMS" ]]; then
  echo "$kName: note: the files in '$dir/$subdir' do not match its MD5SUMS; fetching $dataset again" >&2
fi

tool=""
if [[ -z "$source_dir" ]]; then
  tool=$(downloader)
  probe "$tool" "$base_url/${files[0]}"
fi
if [[ ! -d "$dir" ]]; then
  mkdir -p -- "$dir" || die "cannot create '$dir'"
  created_dir=1
fi

if [[ -z "$subdir" ]]; then
  # MNIST: the verified .gz files are the result.
  for i in "${!files[@]}"; do
    f=${files[$i]}
    if [[ -f "$dir/$f" && "$(md5_of "$dir/$f")" == "${md5s[$i]}" ]]; then
      echo "$kName: $f: already present and verified"
      continue
    fi
    fetch_verified "$f" "${md5s[$i]}" "$dir/$f"
  done
  created_dir=0
  echo "$kName: $dataset ready in $dir"
  exit 0
fi

# CIFAR: fetch and verify the archive, check its layout, unpack into a scratch folder inside DIR,
# then move the folder into place (an interrupted run never leaves a half-unpacked $subdir).
archive="$dir/${files[0]}"
fetch_verified "${files[0]}" "${md5s[0]}" "$archive"
partial=$archive  # from here on, a failure removes the archive too (cleanup)
entries=$(tar -tzf "$archive") || die "${files[0]}: not a readable .tar.gz archive"
while IFS= read -r entry; do
  case "$entry" in
    "$subdir" | "$subdir"/*) ;;
    *) die "${files[0]}: unexpected entry '$entry' (expected everything under $subdir/)" ;;
  esac
  [[ "$entry" != *..* ]] || die "${files[0]}: refusing entry '$entry' (contains '..')"
done <<<"$entries"
scratch=""
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {  # the archive goes in any case; the scratch folder holds nothing worth keeping
  rm -rf -- "$archive" ${scratch:+"$scratch"}
  if [[ $created_dir == 1 ]]; then rmdir -- "$dir" 2>/dev/null || true; fi
}
scratch=$(mktemp -d "$dir/.unpack.XXXXXX") || die "cannot create a scratch folder in '$dir'"
tar -xzf "$archive" -C "$scratch" || die "cannot unpack ${files[0]} into '$scratch'"
sums=$(cd -- "$scratch/$subdir" && find . -type f -printf '%P\n' | LC_ALL=C sort | xargs -d '\n' md5sum --) ||
  die "cannot checksum the unpacked files"
printf '%s\n' "$sums" >"$scratch/$subdir/MD5SUMS" || die "cannot write '$scratch/$subdir/MD5SUMS'"
if [[ -e "$dir/$subdir" ]]; then
  echo "$kName: replacing '$dir/$subdir' (incomplete or changed: its files did not match MD5SUMS)"
  rm -rf -- "${dir:?}/$subdir"
fi
mv -- "$scratch/$subdir" "$dir/$subdir" || die "cannot move the unpacked files to '$dir/$subdir'"
created_dir=0  # cleanup now removes just the archive and the scratch folder
echo "$kName: $dataset ready in $dir/$subdir ($(wc -l <"$dir/$subdir/MD5SUMS") files; the archive was deleted," \
  "MD5SUMS lets a second run check them)"
