#!/usr/bin/env bash
# A one-node Slurm on this machine, for trying the cluster path and for the tests marked `slurm`:
#
#   bash scripts/slurm-local.sh start     # install (Debian's slurm-wlm, munge) if missing, configure, start
#   bash scripts/slurm-local.sh status    # sinfo
#   bash scripts/slurm-local.sh stop      # scontrol shutdown, stop munged
#
# The node is this host with its CPUs and memory (read from the machine), no GPUs (no GRES), one default partition
# `local`, scheduled by logical CPU (CR_CPU: a 2-CPU machine that is one core with two threads still runs two
# one-CPU jobs at once); jobs may be requeued (submitit's preemption path). Idempotent: start on a running cluster
# only waits for the node to be idle; stop on a stopped one does nothing. Needs root (package install, /etc/slurm, the daemons).
set -euo pipefail

CONF_DIR=/etc/slurm
CONF=$CONF_DIR/slurm.conf
SPOOL=/var/spool/slurm
LOGS=/var/log/slurm

need_root() { [ "$(id -u)" = 0 ] || { echo "error: run as root (it installs packages and starts daemons)" >&2; exit 2; }; }

install_packages() {
    if command -v slurmctld >/dev/null && command -v munged >/dev/null; then return; fi
    echo "installing slurm-wlm and munge (Debian packages, ~3 min)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge >/dev/null \
        || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge >/dev/null; }
}

machine_cpus() {
    # nproc honours OMP_NUM_THREADS, which a test process sets to 1: the node would take one task at a time
    env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc
}

configure() {
    local host cpus memory
    host=$(hostname -s)
    cpus=$(machine_cpus)
    memory=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))  # MB, below MemTotal
    mkdir -p "$CONF_DIR" "$SPOOL/ctld" "$SPOOL/d" "$LOGS" /run/munge /etc/munge
    if [ ! -s /etc/munge/munge.key ]; then
        dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    fi
    chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge 2>/dev/null || true
    chmod 400 /etc/munge/munge.key
    cat > "$CONF.new" <<EOF
# written by numprec's scripts/slurm-local.sh: a one-node cluster on $host
ClusterName=numprec
SlurmctldHost=$host
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
SchedulerType=sched/backfill
ReturnToService=2
JobRequeue=1
KillWait=10
MinJobAge=300
StateSaveLocation=$SPOOL/ctld
SlurmdSpoolDir=$SPOOL/d
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd.log
SlurmctldTimeout=30
SlurmdTimeout=30
DefMemPerCPU=2048
NodeName=$host CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=local Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
    mv "$CONF.new" "$CONF"
}

running() { pgrep -x "$1" >/dev/null; }
DAEMONS="slurmctld slurmd slurmstepd slurmscriptd munged"
any_running() { for daemon in $DAEMONS; do running "$daemon" && return 0; done; return 1; }

munge_works() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

start_munge() {
    munge_works && return 0
    pkill -x munged 2>/dev/null || true
    sleep 0.5
    rm -f /run/munge/munge.socket.2 /run/munge/munge.socket.2.lock /run/munge/munged.pid
    su -s /bin/sh munge -c "munged --force" 2>/dev/null || munged --force
    for _ in $(seq 1 20); do munge_works && return 0; sleep 0.5; done
    echo "error: munged does not answer (see /var/log/munge/munged.log)" >&2
    exit 1
}

start() {
    need_root
    install_packages
    if ! running slurmctld && ! running slurmd; then
        configure
    fi
    start_munge
    running slurmctld || slurmctld
    running slurmd || slurmd
    for _ in $(seq 1 90); do  # until the node takes work
        state=$(sinfo -h -N -o %t 2>/dev/null | head -1 || true)
        case $state in
            idle|mix|alloc) echo "slurm: node $(hostname -s) $state ($(sinfo -h -N -o %c | head -1) CPUs), partition local" >&2; return 0 ;;
            down*|drain*|unk*) scontrol update NodeName="$(hostname -s)" State=RESUME >/dev/null 2>&1 || true ;;
        esac
        sleep 1
    done
    echo "error: the slurm node did not come up within 90 s; see $LOGS/slurmctld.log and $LOGS/slurmd.log" >&2
    exit 1
}

stop() {
    need_root
    running slurmctld && scontrol shutdown >/dev/null 2>&1 || true
    for daemon in $DAEMONS; do pkill -x "$daemon" 2>/dev/null || true; done
    for _ in $(seq 1 20); do any_running || break; sleep 0.5; done
    for daemon in $DAEMONS; do pkill -9 -x "$daemon" 2>/dev/null || true; done
    rm -f /run/munge/munge.socket.2 /run/munge/munge.socket.2.lock /run/munge/munged.pid
    echo "slurm: stopped" >&2
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) sinfo ;;
    *) echo "usage: bash scripts/slurm-local.sh start|stop|status" >&2; exit 2 ;;
esac
