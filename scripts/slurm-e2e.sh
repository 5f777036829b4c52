#!/usr/bin/env bash
# The Slurm end-to-end test on a real one-node cluster: starts one with
# scripts/slurm-cluster.sh (installing Debian's slurm-wlm and munge when missing), runs
# `queue_cli::slurm_job_array_survives_a_cancelled_task_and_a_resubmission` (a 4-cell tiny-model
# sweep through `wanda submit --slurm`, one running task cancelled with scancel, a resubmission,
# records compared with a local run), and stops the daemons it started, also on failure.
#   scripts/slurm-e2e.sh            # needs root (apt-get, daemons as root)
set -euo pipefail
cd "$(dirname "$0")/.."
state="$(mktemp -d /tmp/wanda-slurm.XXXXXX)"
chmod 755 "$state" # munged wants every folder above its socket searchable by all
cleanup() { scripts/slurm-cluster.sh stop "$state" >/dev/null 2>&1 || true; }
trap cleanup EXIT
started=$(date +%s)
export_line="$(scripts/slurm-cluster.sh start "$state" | tail -1)"
eval "$export_line"
export SLURM_CONF
cargo test --test it slurm_job_array -- --ignored --exact \
  queue_cli::slurm_job_array_survives_a_cancelled_task_and_a_resubmission --nocapture
echo "slurm e2e: passed in $(( $(date +%s) - started )) s (cluster state and logs: $state)"
