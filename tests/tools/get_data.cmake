# CTest entries for scripts/get-data.sh (label `tools`), include()d from tests/CMakeLists.txt.
# None needs a network: "no network" is forced with an unreachable proxy, and the checksum and unpack
# paths run against a local mirror folder (EMBER_DATA_MIRROR) built by the test itself. Each test
# runs a bash snippet as `bash -c SNIPPET get-data SCRIPT WORKDIR` ($1 = the script, $2 = a fresh
# scratch folder), which checks the exit status and the messages itself (CTest's
# PASS_REGULAR_EXPRESSION would ignore the exit status).
set(_gd_script ${PROJECT_SOURCE_DIR}/scripts/get-data.sh)

# _gd_test(NAME TIMEOUT SNIPPET): registers get_data/NAME.
function(_gd_test name timeout snippet)
  set(work ${CMAKE_CURRENT_BINARY_DIR}/get_data/${name})
  add_test(NAME get_data/${name}
           COMMAND bash -c "set -u; rm -rf \"$2\" && mkdir -p \"$2\" || exit 1; ${snippet}" get-data ${_gd_script} ${work})
  set_tests_properties(get_data/${name} PROPERTIES LABELS tools TIMEOUT ${timeout})
endfunction()

# Shared snippet pieces. `expect RC CMD...` runs CMD, prints its output, and fails unless the exit
# status is RC; the output is left in $out for grep.
set(_gd_expect [=[
expect() { local want=$1; shift; out=$("$@" 2>&1); local rc=$?; printf '%s\n' "$out";
  [ "$rc" -eq "$want" ] || { echo "FAIL: exit status $rc, expected $want: $*"; exit 1; }; }
has() { grep -qE -- "$1" <<<"$out" || { echo "FAIL: output lacks /$1/"; exit 1; }; }
offline() { export http_proxy=http://127.0.0.1:9 https_proxy=http://127.0.0.1:9 HTTP_PROXY=http://127.0.0.1:9 \
  HTTPS_PROXY=http://127.0.0.1:9; unset no_proxy NO_PROXY all_proxy ALL_PROXY; }
unset EMBER_DATA_MIRROR EMBER_DATA_MD5SUMS
]=])

_gd_test(help 30 "${_gd_expect}
expect 0 \"$1\" --help; has '^usage: scripts/get-data.sh'; has 'cifar100'")

_gd_test(unknown_dataset 30 "${_gd_expect}
expect 2 \"$1\" imagenet \"$2/d\"; has \"unknown dataset 'imagenet' [(]expected mnist, cifar10 or cifar100[)]\"; has '^usage:'
[ ! -e \"$2/d\" ] || { echo 'FAIL: created DIR on a usage error'; exit 1; }")

_gd_test(missing_dir 30 "${_gd_expect}
expect 2 \"$1\" cifar10; has 'missing DIR'
expect 2 \"$1\"; has 'missing DATASET and DIR'
expect 2 \"$1\" mnist \"$2/a\" \"$2/b\"; has \"unexpected argument\"")

# Without a network the script must stop at its reachability probe at once, say what to download
# by hand, and create nothing. A proxy on a closed local port stands in for "no network", so the
# test behaves the same on machines that do have one (it never downloads). TIMEOUT: "at once".
_gd_test(no_network_fails_fast 30 "${_gd_expect}
offline
expect 1 \"$1\" cifar10 \"$2/d\"
has '^get-data.sh: cannot reach www[.]cs[.]toronto[.]edu [(]no network[?][)]; download cifar-10-binary[.]tar[.]gz elsewhere and unpack it into '
expect 1 \"$1\" mnist \"$2/m\"; has 'cannot reach ossci-datasets[.]s3[.]amazonaws[.]com [(]no network[?][)]; download train-images-idx3-ubyte[.]gz'
[ ! -e \"$2/d\" ] && [ ! -e \"$2/m\" ] || { echo 'FAIL: left a DIR behind'; exit 1; }")

# A mirror file whose md5 is not the published one: the error names both sums, the download is
# deleted, and nothing is left in DIR (an existing DIR stays, empty; a DIR the run created goes).
_gd_test(checksum_mismatch 30 "${_gd_expect}
mkdir -p \"$2/mirror\" \"$2/existing\" && echo 'not the CIFAR-10 archive' > \"$2/mirror/cifar-10-binary.tar.gz\"
export EMBER_DATA_MIRROR=\"$2/mirror\"
expect 1 \"$1\" cifar10 \"$2/existing\"
has 'checksum mismatch for cifar-10-binary[.]tar[.]gz: expected md5 c32a1d4ab5d03f1284b67883e8d87530, found [0-9a-f]{32}; deleted the bad download'
[ -d \"$2/existing\" ] && [ -z \"$(ls -A \"$2/existing\")\" ] || { echo 'FAIL: DIR not left empty:'; ls -A \"$2/existing\"; exit 1; }
expect 1 \"$1\" cifar10 \"$2/new\"; has 'checksum mismatch'
[ ! -e \"$2/new\" ] || { echo 'FAIL: left the DIR it created'; exit 1; }
export EMBER_DATA_MIRROR=file://\"$2/mirror\"
expect 1 \"$1\" cifar10 \"$2/existing\"; has 'checksum mismatch'
[ -z \"$(ls -A \"$2/existing\")\" ] || { echo 'FAIL: file:// mirror left files'; exit 1; }")

# The unpack path with a hand-made archive of CIFAR-10's layout (its md5 supplied through
# EMBER_DATA_MD5SUMS): the files land in DIR/cifar-10-batches-bin with an MD5SUMS, the archive
# and the scratch folder are gone; a second run (offline, mirror gone) finds everything verified;
# a changed file is noticed.
set(_gd_fake_cifar [=[
mkrec() { local i; for ((i = 0; i < $2; i++)); do printf "\\x0$((i % 10))"; head -c 3072 /dev/zero; done > "$1"; }
mkdir -p "$2/src/cifar-10-batches-bin" "$2/mirror"
for b in 1 2 3 4 5; do mkrec "$2/src/cifar-10-batches-bin/data_batch_$b.bin" 20; done
mkrec "$2/src/cifar-10-batches-bin/test_batch.bin" 10
tar -czf "$2/mirror/cifar-10-binary.tar.gz" -C "$2/src" cifar-10-batches-bin || exit 1
(cd "$2/mirror" && md5sum cifar-10-binary.tar.gz) > "$2/sums"
]=])
_gd_test(unpack_and_idempotent 60 "${_gd_expect}${_gd_fake_cifar}
export EMBER_DATA_MIRROR=\"$2/mirror\" EMBER_DATA_MD5SUMS=\"$2/sums\"
expect 0 \"$1\" cifar10 \"$2/d\"; has 'not the published md5'; has 'ready in'
for f in data_batch_1.bin data_batch_5.bin test_batch.bin; do
  cmp \"$2/src/cifar-10-batches-bin/$f\" \"$2/d/cifar-10-batches-bin/$f\" || { echo \"FAIL: $f differs\"; exit 1; }
done
[ \"$(ls -A \"$2/d\")\" = cifar-10-batches-bin ] || { echo 'FAIL: DIR holds more than the unpacked folder:'; ls -A \"$2/d\"; exit 1; }
[ \"$(wc -l < \"$2/d/cifar-10-batches-bin/MD5SUMS\")\" -eq 6 ] || { echo 'FAIL: MD5SUMS should list 6 files'; exit 1; }
rm -rf \"$2/mirror\"; unset EMBER_DATA_MIRROR EMBER_DATA_MD5SUMS; offline
expect 0 \"$1\" cifar10 \"$2/d\"; has 'already holds the verified files; nothing to do'
printf x >> \"$2/d/cifar-10-batches-bin/test_batch.bin\"
expect 1 \"$1\" cifar10 \"$2/d\"; has 'do not match its MD5SUMS'; has 'cannot reach www[.]cs[.]toronto[.]edu'")

# An archive with an entry outside cifar-10-batches-bin/ is refused before anything is unpacked.
_gd_test(rejects_foreign_archive 30 "${_gd_expect}
mkdir -p \"$2/src/elsewhere\" \"$2/mirror\" && echo x > \"$2/src/elsewhere/f\"
tar -czf \"$2/mirror/cifar-10-binary.tar.gz\" -C \"$2/src\" elsewhere || exit 1
(cd \"$2/mirror\" && md5sum cifar-10-binary.tar.gz) > \"$2/sums\"
export EMBER_DATA_MIRROR=\"$2/mirror\" EMBER_DATA_MD5SUMS=\"$2/sums\"
expect 1 \"$1\" cifar10 \"$2/d\"; has \"unexpected entry 'elsewhere/' [(]expected everything under cifar-10-batches-bin/[)]\"
[ ! -e \"$2/d\" ] || { echo 'FAIL: left files behind'; ls -A \"$2/d\"; exit 1; }")

# MNIST: the four .gz files are the result; a re-run verifies them instead of fetching (with the
# same EMBER_DATA_MD5SUMS: against the published sums these fake files would be fetched again).
_gd_test(mnist_mirror 30 "${_gd_expect}
mkdir -p \"$2/mirror\"
for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
  echo \"fake $f\" | gzip > \"$2/mirror/$f.gz\"; done
(cd \"$2/mirror\" && md5sum *.gz) > \"$2/sums\"
export EMBER_DATA_MIRROR=\"$2/mirror\" EMBER_DATA_MD5SUMS=\"$2/sums\"
expect 0 \"$1\" mnist \"$2/d\"; has 'mnist ready in'
[ \"$(ls \"$2/d\" | wc -l)\" -eq 4 ] && cmp \"$2/mirror/t10k-labels-idx1-ubyte.gz\" \"$2/d/t10k-labels-idx1-ubyte.gz\" ||
  { echo 'FAIL: expected the 4 files'; ls -A \"$2/d\"; exit 1; }
rm -f \"$2\"/mirror/*.gz  # the sums still apply, but a fetch would now fail
expect 0 \"$1\" mnist \"$2/d\"; has 'nothing to do'")
