#!/usr/bin/env bash
# Bring up (or tear down) a throwaway one-node Slurm cluster on this machine, for CI and for
# the integration tests that exercise `sbatch` job arrays.
#
#   scripts/slurm-cluster.sh start STATE_DIR   # install if needed, start munged + slurmctld + slurmd
#   scripts/slurm-cluster.sh stop  STATE_DIR   # cancel jobs, stop exactly what `start` started
#
# Typical use:
#   eval "$(scripts/slurm-cluster.sh start /tmp/slurm | tail -1)"   # export SLURM_CONF=...
#   sbatch --array=0-3%2 --wrap 'echo $SLURM_ARRAY_TASK_ID' -o /tmp/slurm/out_%A_%a.txt
#   scripts/slurm-cluster.sh stop /tmp/slurm
#
# `start` installs Debian's slurm-wlm and munge with apt-get when they are missing (needs root),
# creates a munge key and runs a private munged on a socket under STATE_DIR, writes
# STATE_DIR/slurm.conf for a single node (this host's short name at 127.0.0.1, all CPUs, one
# partition `debug`, consumable CPUs and memory so 1-CPU array tasks run side by side), starts
# slurmctld and slurmd as root against that file, and waits until the node is idle. All pid, log,
# spool and state files live under STATE_DIR; job state is wiped on every start. Daemons left over
# from an earlier start with the same STATE_DIR are stopped first. There is no slurmdbd, so
# `sacct` does not work: use `squeue` and `scontrol show job` (finished jobs stay visible for
# MinJobAge seconds). Every client command needs SLURM_CONF, which is what the last line of
# `start`'s stdout exports.
#
# `stop` cancels the cluster's jobs, stops the daemons named by the pid files under STATE_DIR
# (and any leftover slurmstepd of this cluster), waits for them to exit, and succeeds even when
# `start` failed halfway. Files under STATE_DIR are kept for inspection.
#
# Jobs run as the submitting user with the submitter's environment (SLURM_CONF included) and
# working directory; an array task's stdout and stderr go to `-o` (default slurm-%A_%a.out in the
# submission directory). STATE_DIR must be a path without whitespace (slurm.conf cannot quote).
#
# Environment: SLURM_CLUSTER_CTLD_PORT / SLURM_CLUSTER_SLURMD_PORT (default 6817 / 6818) move the
# daemons off the standard ports; SLURM_CLUSTER_WAIT (default 60) bounds the wait for the node.
set -euo pipefail

usage() {
  echo "usage: $0 start|stop STATE_DIR" >&2
  exit 2
}

die() {
  echo "slurm-cluster: $*" >&2
  exit 1
}

# die, after dumping the tail of a log file to stderr
die_log() {
  local msg=$1 log=$2
  if [ -s "$log" ]; then
    echo "--- last lines of $log ---" >&2
    tail -n 25 "$log" >&2
    echo "---" >&2
  fi
  die "$msg; see $log"
}

[ $# -eq 2 ] || usage
export PATH=$PATH:/usr/sbin:/sbin
action=$1
state=$2
case $action in start | stop) ;; *) usage ;; esac
[ "$(id -u)" -eq 0 ] || die "must run as root (the daemons run as root and apt-get may be needed)"
mkdir -p "$state"
state=$(cd "$state" && pwd -P)
case $state in *[[:space:]]*) die "STATE_DIR must not contain whitespace: '$state'" ;; esac
conf=$state/slurm.conf
ctld_port=${SLURM_CLUSTER_CTLD_PORT:-6817}
slurmd_port=${SLURM_CLUSTER_SLURMD_PORT:-6818}
wait_s=${SLURM_CLUSTER_WAIT:-60}
# Marker in the daemons' environment; slurmstepd inherits it, which lets `stop` find strays.
marker="SLURM_CLUSTER_STATE=$state"

# pid recorded in pid file $1 if that process is alive and its command is $2, else nothing
live_pid() {
  local pidfile=$1 comm=$2 pid
  [ -s "$pidfile" ] || return 0
  pid=$(tr -dc 0-9 <"$pidfile")
  [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$comm" ] && echo "$pid"
  return 0
}

# pids of slurmstepd processes started by this cluster's slurmd (found by the marker)
stray_stepds() {
  local d comm
  for d in /proc/[0-9]*; do
    { read -r comm <"$d/comm"; } 2>/dev/null || continue
    [ "$comm" = slurmstepd ] || continue
    if tr '\0' '\n' 2>/dev/null <"$d/environ" | grep -qxF "$marker"; then echo "${d#/proc/}"; fi
  done
}

# send TERM to the given pids, wait up to 20 s, then KILL what is left
kill_wait() {
  local pid i alive
  [ $# -gt 0 ] || return 0
  kill -TERM "$@" 2>/dev/null || true
  for i in $(seq 100); do
    alive=()
    for pid in "$@"; do
      if kill -0 "$pid" 2>/dev/null; then alive+=("$pid"); fi
    done
    [ ${#alive[@]} -gt 0 ] || return 0
    [ "$i" -lt 100 ] || break
    sleep 0.2
  done
  kill -KILL "${alive[@]}" 2>/dev/null || true
  sleep 0.5
}

do_stop() {
  local ctld slurmd munged="" i
  ctld=$(live_pid "$state/slurmctld.pid" slurmctld)
  slurmd=$(live_pid "$state/slurmd.pid" slurmd)
  # Cancel all jobs while both daemons are up, so slurmd reaps the job steps itself.
  if [ -n "$ctld" ] && [ -f "$conf" ] && command -v scancel >/dev/null; then
    SLURM_CONF=$conf timeout 10 scancel --partition=debug >/dev/null 2>&1 || true
    for i in $(seq 50); do
      [ -n "$(stray_stepds)" ] ||
        [ -n "$(SLURM_CONF=$conf timeout 5 squeue -h -t R,CG,S -o %i 2>/dev/null)" ] || break
      sleep 0.2
    done
  fi
  # slurmd first: while slurmctld is up it can report the jobs' end and exits at once.
  # shellcheck disable=SC2086 # the pid lists are meant to split into words
  kill_wait $slurmd
  if [ -f "$state/munged.started" ]; then munged=$(live_pid "$state/munged.pid" munged); fi
  # shellcheck disable=SC2046,SC2086
  kill_wait $ctld $munged $(stray_stepds)
  rm -f "$state/munged.started"
  rm -f "$state/slurmctld.pid" "$state/slurmd.pid" "$state/munged.pid"
}

install_packages() {
  local missing=() c
  for c in sbatch slurmctld slurmd munged; do
    command -v "$c" >/dev/null || missing+=("$c")
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  echo "slurm-cluster: installing slurm-wlm and munge (missing: ${missing[*]})" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >"$state/apt.log" 2>&1 || die_log "apt-get update failed" "$state/apt.log"
  apt-get install -y -qq --no-install-recommends slurm-wlm munge >>"$state/apt.log" 2>&1 ||
    die_log "apt-get install slurm-wlm munge failed" "$state/apt.log"
}

start_munged() {
  local key=$state/munge/munge.key i
  mkdir -p "$state/munge"
  chmod 0755 "$state/munge"
  if [ ! -s "$key" ]; then
    if command -v mungekey >/dev/null; then
      mungekey --create --keyfile="$key" >/dev/null 2>&1 || die "mungekey could not create $key"
    else
      dd if=/dev/urandom of="$key" bs=1024 count=1 status=none || die "could not create $key"
    fi
  fi
  chmod 0400 "$key"
  rm -f "$state/munged.log"
  touch "$state/munged.started"
  munged --key-file="$key" --socket="$state/munge/munge.socket" \
    --pid-file="$state/munged.pid" --log-file="$state/munged.log" \
    --seed-file="$state/munge/munged.seed" </dev/null >>"$state/munged.log" 2>&1 ||
    die_log "munged did not start" "$state/munged.log"
  for i in $(seq 50); do
    [ -n "$(live_pid "$state/munged.pid" munged)" ] && [ -S "$state/munge/munge.socket" ] && return 0
    sleep 0.1
  done
  die_log "munged did not start" "$state/munged.log"
}

write_conf() {
  local node cpus mem_mib real_mem def_mem
  node=$(hostname -s)
  cpus=$(nproc)
  mem_mib=$(awk '/^MemTotal:/ { print int($2 / 1024) }' /proc/meminfo)
  real_mem=$((mem_mib * 9 / 10))
  # Jobs without --mem get this much per CPU, so tasks never claim the whole node's memory.
  def_mem=$((real_mem / cpus))
  [ "$def_mem" -le 1024 ] || def_mem=1024
  cat >"$conf" <<EOF
# Generated by scripts/slurm-cluster.sh: a throwaway one-node cluster, everything under $state.
ClusterName=wanda-test
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$state/munge/munge.socket
StateSaveLocation=$state/ctld-state
SlurmdSpoolDir=$state/slurmd-spool
SlurmctldPidFile=$state/slurmctld.pid
SlurmdPidFile=$state/slurmd.pid
SlurmctldLogFile=$state/slurmctld.log
SlurmdLogFile=$state/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
MailProg=/bin/true
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=2,sched_min_interval=100000
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
DefMemPerCPU=$def_mem
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ReturnToService=2
MaxArraySize=100001
MaxJobCount=200000
MinJobAge=300
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MessageTimeout=10
Waittime=0
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$real_mem State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
}

do_start() {
  local node i st
  do_stop
  install_packages
  start_munged
  write_conf
  node=$(hostname -s)
  rm -rf "$state/ctld-state" "$state/slurmd-spool"
  mkdir -p "$state/ctld-state" "$state/slurmd-spool"
  rm -f "$state/slurmctld.log" "$state/slurmd.log"
  export SLURM_CONF=$conf
  env "$marker" slurmctld -f "$conf" </dev/null >>"$state/slurmctld.log" 2>&1 ||
    die_log "slurmctld did not start" "$state/slurmctld.log"
  env "$marker" slurmd -f "$conf" -N "$node" </dev/null >>"$state/slurmd.log" 2>&1 ||
    die_log "slurmd did not start" "$state/slurmd.log"
  for i in $(seq $((wait_s * 2))); do
    [ -n "$(live_pid "$state/slurmctld.pid" slurmctld)" ] ||
      { [ "$i" -lt 10 ] || die_log "slurmctld did not start" "$state/slurmctld.log"; }
    [ -n "$(live_pid "$state/slurmd.pid" slurmd)" ] ||
      { [ "$i" -lt 10 ] || die_log "slurmd did not start" "$state/slurmd.log"; }
    st=$(timeout 5 sinfo -h -n "$node" -o %t 2>/dev/null || true)
    if [ "$st" = idle ]; then
      echo "slurm-cluster: node $node idle after $((i / 2)) s; logs in $state" >&2
      echo "export SLURM_CONF=$conf"
      return 0
    fi
    sleep 0.5
  done
  die_log "node $node not idle after $wait_s s (state: ${st:-unknown})" "$state/slurmctld.log"
}

case $action in
start) do_start ;;
stop) do_stop ;;
esac
