#!/usr/bin/env bash
# mnist_job.sh: what the HTCondor jobs in this folder run on the execute machine: build/bin/mnist
# under ember-run, one rank per GPU the job was given (HTCondor shows the job only its GPUs, through
# CUDA_VISIBLE_DEVICES, and that is what ember-run's --nproc-per-node gpu counts). One GPU is a
# plain single-device run; 2 or 4 train with DistributedDataParallel, --batch-size per rank.
#
#   mnist_job.sh [mnist arguments...]
#
# Environment (set with `environment = "..."` in the submit file):
#   EMBER_BIN       the folder holding ember-run and mnist. Default: the job's own folder, where
#                   HTCondor puts the files of transfer_input_files (then libember.so.0, sent beside
#                   them, is found there too). With a shared filesystem: your checkout's build/bin.
#   NPROC_PER_NODE  ember-run's --nproc-per-node: gpu (default) or a number of ranks, e.g. 2 CPU
#                   ranks with --device cpu (how tests/tools/example_parallel.sh runs this script).
set -euo pipefail
if [ -z "${EMBER_BIN:-}" ]; then
  EMBER_BIN=$PWD
  export LD_LIBRARY_PATH=$PWD${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
echo "mnist_job.sh: on ${HOSTNAME:-$(uname -n)}, GPUs ${CUDA_VISIBLE_DEVICES:-none assigned}, programs in $EMBER_BIN"
exec "$EMBER_BIN/ember-run" --nproc-per-node "${NPROC_PER_NODE:-gpu}" "$EMBER_BIN/mnist" "$@"
