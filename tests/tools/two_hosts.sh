#!/usr/bin/env bash
# Two "hosts" on this machine: network namespaces joined by a veth pair, each with its own address
# (10.213.<n>.1 and .2, which exist only inside the namespaces), one ember-run --nnodes 2 in each.
# One scenario per call (tests/tools/two_hosts.cmake).
#
#   two_hosts.sh CASE EMBER_TRAIN EMBER_RUN WORK_DIR
#
# link_cut   ember-train parallel.mode=ddp over the two hosts (one rank each, EMBER_COLLECTIVE_TIMEOUT
#            60, a config that leaves parallel.timeout_s unset); the link is set down during epoch 2.
#            Both ranks must exit non-zero within the 60 s timeout, each naming the rank it lost (the
#            kernel's keepalive and TCP_USER_TIMEOUT end the connections after about 15 s; before
#            they were set rank 0 waited the config's default 300 s), and the run's last.ckpt (epoch
#            1) must resume: two ranks on one host continue the run from it.
#
# Needs root and `ip netns` (iproute2); exits 77 (skipped) with the reason where namespaces cannot
# be made. The namespaces (and with them the veth pair) are removed at the end, also on failure.
set -u
case_name=$1
train=$2
run=$3
work=$4
source "$(dirname "$0")/lib.sh"  # fresh_dir, fail, skip, clean_job_env
fresh_dir "$work"
clean_job_env

[ "$(id -u)" -eq 0 ] || skip "network namespaces need root (this runs as uid $(id -u))"
command -v ip >/dev/null || skip "no 'ip' command (Debian package iproute2)"
# Names and a subnet of this process's own, so parallel runs do not meet.
tag=$$
ns_a=ember_a_$tag ns_b=ember_b_$tag
net=10.213.$((tag % 250)).
addr_a=${net}1 addr_b=${net}2
cleanup() {
  ip netns pids "$ns_a" 2>/dev/null | xargs -r kill -9 2>/dev/null
  ip netns pids "$ns_b" 2>/dev/null | xargs -r kill -9 2>/dev/null
  ip netns del "$ns_a" 2>/dev/null
  ip netns del "$ns_b" 2>/dev/null
}
trap cleanup EXIT
ip netns add "$ns_a" 2>/dev/null || skip "cannot create a network namespace here (ip netns add failed)"
# What this kernel or sandbox does not allow is a skip with the reason, not a failure of ember.
ip netns add "$ns_b" 2>/dev/null || skip "cannot create a second network namespace here"
ip link add va_$tag netns "$ns_a" type veth peer name vb_$tag netns "$ns_b" 2>/dev/null ||
  skip "cannot create a veth pair here (ip link add ... type veth failed: no veth support?)"
ip -n "$ns_a" addr add "$addr_a/24" dev va_$tag && ip -n "$ns_b" addr add "$addr_b/24" dev vb_$tag ||
  fail "cannot give the hosts their addresses"
for ns in "$ns_a" "$ns_b"; do ip -n "$ns" link set lo up; done
ip -n "$ns_a" link set va_$tag up && ip -n "$ns_b" link set vb_$tag up || fail "cannot bring the link up"

# cifar_cnn on synthetic images: a few seconds per epoch on the CPU, so the cut lands in epoch 2.
cat >c.json <<'EOF'
{
  "name": "two-hosts",
  "device": "cpu",
  "seed": 3,
  "epochs": 6,
  "model": {"name": "cifar_cnn"},
  "data": {"dataset": "synthetic", "limit_train": 1024, "limit_test": 64, "batch_size": 16, "workers": 0},
  "optim": {"name": "sgd", "lr": 0.01, "momentum": 0.9},
  "parallel": {"mode": "ddp"}
}
EOF

case $case_name in
  link_cut)
    export EMBER_COLLECTIVE_TIMEOUT=60
    port=$((20000 + tag % 20000))
    # node_cmd NODE_RANK: one ember-run with one rank, in that node's namespace.
    node_cmd() {
      ip netns exec "$1" "$run" --nnodes 2 --node-rank "$2" --nproc-per-node 1 --master-addr "$addr_a" \
        --master-port "$port" "$train" c.json output.run_dir=run
    }
    node_cmd "$ns_a" 0 >node0.out 2>&1 &
    pid0=$!
    node_cmd "$ns_b" 1 >node1.out 2>&1 &
    pid1=$!
    for _ in $(seq 1 1200); do
      grep -q '"epoch":1,' run/metrics.jsonl 2>/dev/null && break
      kill -0 "$pid0" 2>/dev/null || break
      sleep 0.1
    done
    grep -q '"epoch":1,' run/metrics.jsonl 2>/dev/null || {
      cat node0.out node1.out
      fail "epoch 1 did not end within 120 s"
    }
    grep -q 'collective timeout 60 s from EMBER_COLLECTIVE_TIMEOUT' node0.out ||
      fail "the start line does not give the timeout and its source: $(grep -m1 DistributedDataParallel node0.out)"
    sleep 1  # into epoch 2
    ip -n "$ns_a" link set va_$tag down || fail "cannot cut the link"
    cut=$SECONDS
    # Each node's ember-run must end by itself within the collective timeout (plus ember-run's grace).
    ended0='' ended1=''
    while [ $((SECONDS - cut)) -lt 90 ] && { [ -z "$ended0" ] || [ -z "$ended1" ]; }; do
      [ -n "$ended0" ] || kill -0 "$pid0" 2>/dev/null || ended0=$((SECONDS - cut))
      [ -n "$ended1" ] || kill -0 "$pid1" 2>/dev/null || ended1=$((SECONDS - cut))
      sleep 0.2
    done
    echo "--- node 0 (rank 0), ended ${ended0:-never} s after the cut"
    cat node0.out
    echo "--- node 1 (rank 1), ended ${ended1:-never} s after the cut"
    cat node1.out
    [ -n "$ended0" ] && [ "$ended0" -le 60 ] || fail "rank 0 did not end within the 60 s timeout after the cut"
    [ -n "$ended1" ] && [ "$ended1" -le 60 ] || fail "rank 1 did not end within the 60 s timeout after the cut"
    wait "$pid0"
    rc0=$?
    wait "$pid1"
    rc1=$?
    [ "$rc0" -ne 0 ] || fail "node 0's ember-run exited 0 after the link was cut"
    [ "$rc1" -ne 0 ] || fail "node 1's ember-run exited 0 after the link was cut"
    grep -qE '^\[rank 0\] .*rank 1' node0.out || fail "rank 0's error does not name rank 1"
    grep -qE '^\[rank 1\] .*(rank 0|the store)' node1.out || fail "rank 1's error names neither rank 0 nor the store"
    # The run's last checkpoint (epoch 1) is whole: the job continues from it, two ranks on one host
    # now that the link is gone.
    [ -s run/checkpoints/last.ckpt ] || fail "no run/checkpoints/last.ckpt"
    "$run" --nproc-per-node 2 "$train" c.json output.run_dir=run epochs=2 checkpoint.resume=auto >resumed.out 2>&1 ||
      fail "resuming from last.ckpt failed: $(cat resumed.out)"
    grep -q '\[rank 0\] ember-train: resumed from' resumed.out || fail "the run did not resume: $(cat resumed.out)"
    grep -qE '^\[rank 0\] epoch 2/2 ' resumed.out || fail "the resumed run did not train epoch 2: $(cat resumed.out)"
    echo "link cut: rank 0 ended after ${ended0} s, rank 1 after ${ended1} s (timeout 60 s)"
    ;;
  *)
    fail "unknown case '$case_name'"
    ;;
esac
