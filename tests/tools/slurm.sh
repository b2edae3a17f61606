#!/usr/bin/env bash
# The bundled Slurm job files under a real Slurm (Debian 12's 22.05: munge, slurmctld, slurmd,
# slurm-client), on this machine as a one-node cluster that the case starts itself:
#
#   tests/tools/slurm.sh CASE BIN_DIR SOURCE_DIR WORK_DIR
#
# The cluster lives in WORK_DIR: a munge key and socket, slurm.conf (one node, this machine, at
# 127.0.0.1 with its cores; a partition `cpu`), free ports of its own, the daemons' state and logs;
# the daemons and any job left are stopped when the case ends, also on failure. Jobs are submitted
# with sbatch from SOURCE_DIR, with the CPU overrides on the command line (what the job files'
# comments tell a user who tries them on a CPU partition), and waited for with a bounded timeout.
#
# job_files       every examples/slurm/*.sbatch: mnist_1node_4gpu (2 tasks), mnist_2nodes and
#                 mnist_2nodes_ember_run (on the one node: 2 tasks, and one ember-run of 2 ranks),
#                 ember_train (2 tasks): each job ends COMPLETED (scontrol and the jobcomp record),
#                 its output has rank 0's epoch line and its run directory one metrics.jsonl line
# failing_rank    mnist_1node_4gpu with EMBER_BUILD pointing at a wrapper whose rank 1 exits 3 once
#                 the run has started: the job ends FAILED, srun names task 1 and stops rank 0
#                 (--kill-on-bad-exit) long before rank 0's collective timeout
# preempt_resume  ember_train over 2 tasks, scancel while it trains (Slurm's SIGTERM, as preemption
#                 sends it): each rank stops, last.ckpt is written, the job ends CANCELLED; the same
#                 file submitted again continues from last.ckpt (checkpoint.resume=auto) to the end
# two_nodes       a cluster of two nodes, each a network namespace with its own address (node1
#                 10.215.<n>.2, node2 .3) behind a bridge in a third namespace that holds slurmctld
#                 (.1): mnist_2nodes and mnist_2nodes_ember_run with --nodes=2 end COMPLETED, task 1
#                 runs on node2 and the ranks meet at node1's address
#
# Skipped (exit 77) when not root, without the Slurm or munge programs, or without Fashion-MNIST;
# two_nodes also where network namespaces cannot be made.
set -uo pipefail
case_name=$1
bin=$2
src=$3
work=$4
source "$(dirname "$0")/lib.sh"  # fresh_dir, fail, skip, clean_job_env
fresh_dir "$work"
clean_job_env
unset SLURM_CONF

[ "$(id -u)" -eq 0 ] || skip "not root: the case starts munged, slurmctld and slurmd"
for p in munged slurmctld slurmd sbatch srun scontrol scancel; do
  command -v "$p" >/dev/null || skip "no $p (Debian packages munge, slurmctld, slurmd, slurm-client)"
done
data=${EMBER_TEST_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
if [ ! -f "$data/train-images-idx3-ubyte.gz" ] && [ ! -f "$data/train-images-idx3-ubyte" ]; then
  skip "no Fashion-MNIST in $data (Debian package dataset-fashion-mnist)"
fi
export EMBER_COLLECTIVE_TIMEOUT=120  # a lost rank would end the others after 2 minutes; srun must be faster

# free_port: a TCP port nothing listens on at 127.0.0.1.
free_port() {
  local p
  for _ in $(seq 200); do
    p=$((RANDOM % 20000 + 40000))
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || {
      echo "$p"
      return
    }
  done
  fail "no free port found"
}

# ---- the cluster ----
node=$(hostname)
mkdir -p munge state spool log jobs
in_cluster=()  # the prefix that runs a command where slurmctld is reachable (two_nodes: its namespace)
slurm() { "${in_cluster[@]}" "$@"; }
namespaces=()
stop_cluster() {
  export SLURM_CONF=$work/slurm.conf
  slurm scancel --quiet --full --signal=KILL --partition=cpu 2>/dev/null
  local f pid ns
  for f in slurmd*.pid slurmctld.pid munge/pid; do
    pid=$(cat "$f" 2>/dev/null) || continue
    kill "$pid" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null
  done
  for ns in "${namespaces[@]}"; do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
    ip netns del "$ns" 2>/dev/null
  done
}
show_logs() {
  local f
  for f in log/*.log jobs/*.out; do
    [ -f "$f" ] || continue
    echo "--- $f (last 30 lines)"
    tail -n 30 "$f"
  done
}
trap 'rc=$?; [ $rc -eq 0 ] || [ $rc -eq 77 ] || show_logs; stop_cluster; exit $rc' EXIT

# nodes: NAME=ADDRESS of each slurmd to start; ctld_addr: slurmctld's address.
nodes=("$node=127.0.0.1")
ctld_addr=127.0.0.1
if [ "$case_name" = two_nodes ]; then
  command -v ip >/dev/null || skip "no 'ip' command (Debian package iproute2)"
  { command -v nsenter && command -v unshare; } >/dev/null || skip "no nsenter/unshare (util-linux)"
  tag=$(($$ % 10000))
  net=10.215.$((tag % 250)).
  ns_ctl=ember_slurm_ctl_$tag
  ip netns add "$ns_ctl" 2>/dev/null || skip "cannot create a network namespace here (ip netns add failed)"
  namespaces+=("$ns_ctl")
  ip -n "$ns_ctl" link set lo up
  ip -n "$ns_ctl" link add br0 type bridge 2>/dev/null || skip "cannot create a bridge in a namespace here"
  ip -n "$ns_ctl" addr add "${net}1/24" dev br0
  ip -n "$ns_ctl" link set br0 up
  printf '127.0.0.1 localhost\n%s %s\n' "${net}1" "$node" >hosts
  nodes=()
  for i in 1 2; do
    ns=ember_slurm_n${i}_$tag
    ip netns add "$ns" || fail "ip netns add $ns"
    namespaces+=("$ns")
    ip link add "sw${i}_$tag" netns "$ns_ctl" type veth peer name eth0 netns "$ns" 2>/dev/null ||
      skip "cannot create a veth pair here (ip link add ... type veth failed)"
    ip -n "$ns_ctl" link set "sw${i}_$tag" master br0 up
    ip -n "$ns" addr add "${net}$((i + 1))/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    nodes+=("node$i=${net}$((i + 1))")
    echo "${net}$((i + 1)) node$i" >>hosts
  done
  ctld_addr=${net}1
fi
# in_ns NS CMD...: CMD in network namespace NS, with this cluster's host names (./hosts bound over
# /etc/hosts in a mount namespace of its own; `ip netns exec` would also remount /sys, which hides
# the cgroup filesystem slurmd reads).
in_ns() {
  local ns=$1
  shift
  nsenter --net="/run/netns/$ns" unshare -m --propagation private \
    bash -c 'mount --bind "$0" /etc/hosts && exec "$@"' "$work/hosts" "$@"
}

head -c 1024 /dev/urandom >munge/munge.key
chmod 600 munge/munge.key
munged --force --key-file="$work/munge/munge.key" --socket="$work/munge/sock" --pid-file="$work/munge/pid" \
  --log-file="$work/munge/log" --seed-file="$work/munge/seed" || skip "munged does not start here: $(tail -n 3 munge/log)"

ctld_port=$(free_port)
slurmd_port=$(free_port)
# Jobs get ids from a random start: the job files derive MASTER_PORT from the id (15000 + id % 20000),
# so two cases (or a second run) do not meet on one port.
first_id=$((RANDOM % 15000 + 1000))
{
  echo "ClusterName=embertest"
  echo "SlurmctldHost=$node($ctld_addr)"
  echo "SlurmUser=root"
  echo "SlurmdUser=root"
  echo "AuthType=auth/munge"
  echo "AuthInfo=socket=$work/munge/sock"
  echo "CredType=cred/munge"
  echo "SlurmctldPort=$ctld_port"
  echo "SlurmdPort=$slurmd_port"
  echo "StateSaveLocation=$work/state"
  echo "SlurmdSpoolDir=$work/spool/%n"
  echo "SlurmctldPidFile=$work/slurmctld.pid"
  echo "SlurmdPidFile=$work/slurmd-%n.pid"
  echo "SlurmctldLogFile=$work/log/slurmctld.log"
  echo "SlurmdLogFile=$work/log/slurmd-%n.log"
  echo "ProctrackType=proctrack/linuxproc"
  echo "TaskPlugin=task/none"
  echo "SelectType=select/cons_tres"
  echo "SelectTypeParameters=CR_Core"
  echo "JobCompType=jobcomp/filetxt"
  echo "JobCompLoc=$work/log/jobcomp.txt"
  echo "AccountingStorageType=accounting_storage/none"
  echo "JobAcctGatherType=jobacct_gather/none"
  echo "MpiDefault=none"
  echo "ReturnToService=2"
  echo "MinJobAge=3600"
  echo "KillWait=30"
  echo "FirstJobId=$first_id"
  for n in "${nodes[@]}"; do
    echo "NodeName=${n%%=*} NodeAddr=${n#*=} CPUs=$(nproc) State=UNKNOWN"
  done
  echo "PartitionName=cpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
} >slurm.conf
export SLURM_CONF=$work/slurm.conf
if [ "$case_name" = two_nodes ]; then
  in_cluster=(in_ns "$ns_ctl")
  in_ns "$ns_ctl" slurmctld -f "$SLURM_CONF" -i || skip "slurmctld does not start here: $(tail -n 5 log/slurmctld.log)"
  for i in 1 2; do
    in_ns "ember_slurm_n${i}_$tag" slurmd -f "$SLURM_CONF" -N "node$i" ||
      skip "slurmd does not start here: $(tail -n 5 "log/slurmd-node$i.log")"
  done
else
  slurmctld -f "$SLURM_CONF" -i || skip "slurmctld does not start here: $(tail -n 5 log/slurmctld.log)"
  slurmd -f "$SLURM_CONF" || skip "slurmd does not start here: $(tail -n 5 "log/slurmd-$node.log")"
fi
up=0
for _ in $(seq 100); do
  if [ "$(slurm sinfo -h -o '%D %T' 2>/dev/null)" = "${#nodes[@]} idle" ]; then
    up=1
    break
  fi
  sleep 0.2
done
# Slurm that cannot run here (a sandbox without cgroups, ...) is a skip with the reason, not a failure of ember.
[ $up -eq 1 ] || skip "the nodes never became idle in 20 s: $(slurm sinfo 2>&1); $(tail -n 5 log/slurmctld.log)"
echo "slurm: nodes ${nodes[*]} ($(nproc) CPUs each), slurmctld at $ctld_addr:$ctld_port, slurmd port $slurmd_port"

# ---- jobs ----
cpu_overrides=(--partition=cpu --cpus-per-task=1 --gpus-per-node=0)
mnist_args=(--data "$data" --epochs 1 --limit-train 512 --limit-test 500 --batch-size 16 --device cpu)

# submit NAME SBATCH_ARGS... -- FILE ARGS...: submits from SOURCE_DIR, output jobs/NAME.out; prints the id.
submit() {
  local name=$1 id
  shift
  id=$(cd "$src" && slurm sbatch --parsable --job-name="$name" --output="$work/jobs/$name.out" "$@") ||
    fail "sbatch $* was refused"
  echo "${id%%;*}"
}
# state_of ID: the job's state (PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, ...).
state_of() { slurm scontrol show job "$1" 2>/dev/null | grep -oE 'JobState=[A-Z_]+' | cut -d= -f2; }
# wait_done ID SECONDS: until the job has ended (at most SECONDS); prints its final state.
wait_done() {
  local s
  for _ in $(seq $(($2 * 5))); do
    s=$(state_of "$1")
    case $s in
      PENDING | CONFIGURING | RUNNING | COMPLETING | "") sleep 0.2 ;;
      *)
        echo "$s"
        return
        ;;
    esac
  done
  slurm scancel "$1"
  fail "job $1 still $(state_of "$1") after $2 s"
}
# expect_state ID STATE: scontrol's state and the jobcomp record agree on STATE.
expect_state() {
  local s
  s=$(wait_done "$1" 240)
  [ "$s" = "$2" ] || fail "job $1 ended $s, expected $2"
  for _ in $(seq 50); do grep -q "JobId=$1 " log/jobcomp.txt 2>/dev/null && break; sleep 0.1; done
  grep -E "JobId=$1 " log/jobcomp.txt | grep -q "JobState=$2 " || fail "jobcomp has no JobState=$2 for job $1: $(grep "JobId=$1 " log/jobcomp.txt)"
}
has() { grep -qE -- "$1" "$2" || fail "$2 lacks /$1/"; }
hasnt() { ! grep -qE -- "$1" "$2" || fail "$2 has /$1/"; }
one_metrics_line() {
  [ "$(wc -l <"$1/metrics.jsonl")" -eq "${2:-1}" ] || fail "$1/metrics.jsonl: $(cat "$1/metrics.jsonl" 2>&1)"
}
epoch_line='epoch +1/1  train_loss [0-9.]+  test_loss [0-9.]+  test_acc [01][.][0-9]{4} '
build_dir=$(dirname "$bin")

case $case_name in
  job_files)
    # Every bundled job file is in this list: a new one must be added here.
    for f in "$src"/examples/slurm/*.sbatch; do
      case $(basename "$f") in
        mnist_1node_4gpu.sbatch | mnist_2nodes.sbatch | mnist_2nodes_ember_run.sbatch | ember_train.sbatch) ;;
        *) fail "examples/slurm/$(basename "$f") is not submitted by this test" ;;
      esac
    done
    a=$(submit one_node "${cpu_overrides[@]}" --ntasks-per-node=2 --export="ALL,EMBER_BUILD=$build_dir,RUN_DIR=$work/run/one_node" \
      examples/slurm/mnist_1node_4gpu.sbatch "${mnist_args[@]}")
    b=$(submit two_nodes "${cpu_overrides[@]}" --nodes=1 --ntasks-per-node=2 \
      --export="ALL,EMBER_BUILD=$build_dir,RUN_DIR=$work/run/two_nodes" examples/slurm/mnist_2nodes.sbatch "${mnist_args[@]}")
    c=$(submit two_nodes_ember_run "${cpu_overrides[@]}" --nodes=1 --ntasks-per-node=1 --cpus-per-task=2 \
      --export="ALL,EMBER_BUILD=$build_dir,RUN_DIR=$work/run/two_nodes_ember_run,NPROC_PER_NODE=2" \
      examples/slurm/mnist_2nodes_ember_run.sbatch "${mnist_args[@]}")
    d=$(submit ember_train "${cpu_overrides[@]}" --ntasks-per-node=2 --export="ALL,EMBER_BUILD=$build_dir,RUN_DIR=$work/run/ember_train" \
      examples/slurm/ember_train.sbatch configs/mnist_cnn.json device=cpu epochs=1 data.limit_train=512 \
      data.limit_test=500 "data.path=$data" data.workers=0)
    for j in "$a one_node" "$b two_nodes" "$c two_nodes_ember_run" "$d ember_train"; do
      set -- $j
      expect_state "$1" COMPLETED
      echo "job $1 ($2): COMPLETED"
    done
    for n in one_node two_nodes two_nodes_ember_run; do
      has "^(\[rank 0\] )?$epoch_line" "jobs/$n.out"
      has 'world size 2' "jobs/$n.out"
      one_metrics_line "run/$n"
    done
    has 'run_task.sh: task 1 of 2 on ' jobs/one_node.out
    has '^\[rank 1\] mnist: rank 1 of 2' jobs/two_nodes_ember_run.out
    has 'epoch +1/1 ' jobs/ember_train.out
    has 'DistributedDataParallel' jobs/ember_train.out
    one_metrics_line run/ember_train
    ;;

  failing_rank)
    # A build folder whose bin/mnist is the real one, except that rank 1 fails once the ranks have met.
    mkdir -p fault/bin
    cat >fault/bin/mnist <<EOF
#!/bin/bash
if [ "\${SLURM_PROCID:-}" = 1 ]; then
  sleep 3
  echo "injected fault: rank 1 exits 3" >&2
  exit 3
fi
echo \$\$ >"$work/rank\${SLURM_PROCID:-x}.pid"  # rank 0's mnist keeps this pid
exec "$bin/mnist" "\$@"
EOF
    chmod +x fault/bin/mnist
    start=$SECONDS
    a=$(submit failing "${cpu_overrides[@]}" --ntasks-per-node=2 --export="ALL,EMBER_BUILD=$work/fault,RUN_DIR=$work/run/failing" \
      examples/slurm/mnist_1node_4gpu.sbatch --data "$data" --epochs 50 --limit-test 500 --device cpu)
    expect_state "$a" FAILED
    took=$((SECONDS - start))
    cat jobs/failing.out
    has 'injected fault: rank 1 exits 3' jobs/failing.out
    has 'srun: error: .*task 1: Exited with exit code 3' jobs/failing.out
    grep -E "JobId=$a " log/jobcomp.txt | grep -qE 'ExitCode=[1-9]' || fail "jobcomp: exit code 0 for a failed job"
    # Rank 0 was stopped by srun, not by its collective timeout (120 s) nor by finishing 50 epochs.
    [ "$took" -lt 100 ] || fail "the failed job took $took s: rank 0 was not stopped by --kill-on-bad-exit"
    hasnt 'completed 50 epochs' jobs/failing.out
    # Rank 0's own process (not any mnist: other tests may run theirs meanwhile) is gone.
    [ -s rank0.pid ] || fail "rank 0 never started (no rank0.pid)"
    for _ in $(seq 50); do kill -0 "$(cat rank0.pid)" 2>/dev/null || break; sleep 0.1; done
    ! kill -0 "$(cat rank0.pid)" 2>/dev/null || fail "rank 0 (pid $(cat rank0.pid)) still runs after the job ended"
    echo "failing rank: FAILED after $took s, task 1 named"
    ;;

  preempt_resume)
    args=(configs/mnist_cnn.json device=cpu epochs=2 data.limit_train=2048 data.limit_test=500 "data.path=$data"
      data.workers=0 early_stop.target_accuracy=null)
    a=$(submit preempted "${cpu_overrides[@]}" --ntasks-per-node=2 --export="ALL,EMBER_BUILD=$build_dir,RUN_DIR=$work/run/p" \
      examples/slurm/ember_train.sbatch "${args[@]}")
    # Preempt it once the first epoch is recorded and the second is under way.
    for _ in $(seq 600); do
      [ -s run/p/metrics.jsonl ] && break
      s=$(state_of "$a")  # once: the job moves on between two calls
      case $s in
        PENDING | CONFIGURING | RUNNING | "") ;;
        *) fail "job $a ended before its first epoch: $s" ;;
      esac
      sleep 0.2
    done
    [ -s run/p/metrics.jsonl ] || fail "no epoch recorded in 120 s"
    sleep 1
    slurm scancel "$a"
    s=$(wait_done "$a" 120)
    [ "$s" = CANCELLED ] || fail "job $a ended $s after scancel, expected CANCELLED"
    cat jobs/preempted.out
    has 'received SIGTERM' jobs/preempted.out
    [ -f run/p/checkpoints/last.ckpt ] || fail "no last.ckpt after the SIGTERM: $(ls run/p/checkpoints 2>&1)"
    one_metrics_line run/p 1
    b=$(submit resumed "${cpu_overrides[@]}" --ntasks-per-node=2 --export="ALL,EMBER_BUILD=$build_dir,RUN_DIR=$work/run/p" \
      examples/slurm/ember_train.sbatch "${args[@]}")
    expect_state "$b" COMPLETED
    cat jobs/resumed.out
    has 'resumed from .*last[.]ckpt' jobs/resumed.out
    one_metrics_line run/p 2
    grep -qE '"epoch": ?2,' run/p/metrics.jsonl || fail "no epoch 2 in metrics.jsonl: $(cat run/p/metrics.jsonl)"
    ;;

  two_nodes)
    a=$(submit two_nodes "${cpu_overrides[@]}" --nodes=2 --ntasks-per-node=1 \
      --export="ALL,EMBER_BUILD=$build_dir,RUN_DIR=$work/run/two_nodes" examples/slurm/mnist_2nodes.sbatch "${mnist_args[@]}")
    expect_state "$a" COMPLETED
    b=$(submit two_nodes_ember_run "${cpu_overrides[@]}" --nodes=2 --ntasks-per-node=1 \
      --export="ALL,EMBER_BUILD=$build_dir,RUN_DIR=$work/run/two_nodes_ember_run,NPROC_PER_NODE=1" \
      examples/slurm/mnist_2nodes_ember_run.sbatch "${mnist_args[@]}")
    expect_state "$b" COMPLETED
    for n in two_nodes two_nodes_ember_run; do
      has "^(\[rank 0\] )?$epoch_line" "jobs/$n.out"
      has "world size 2 .*master node1:" "jobs/$n.out"
      one_metrics_line "run/$n"
    done
    has 'run_task.sh: task 0 of 2 on node1 ' jobs/two_nodes.out
    has 'run_task.sh: task 1 of 2 on node2 ' jobs/two_nodes.out
    has '^\[rank 1\] mnist: rank 1 of 2 ' jobs/two_nodes_ember_run.out
    ;;

  *)
    fail "unknown case '$case_name'"
    ;;
esac
echo "PASS: $case_name"
