#!/usr/bin/env bash
# A single-node Slurm cluster (munged + slurmctld + slurmd, Debian's packages) living in one
# folder on localhost: for the test that submits the nightly as a job array, and to try the
# Slurm scripts on a workstation. Nothing under /etc is touched; clients find the cluster
# through SLURM_CONF=DIR/slurm.conf, which `start` prints.
#
#   scripts/slurm/local-cluster.sh start DIR    # prints: export SLURM_CONF=DIR/slurm.conf
#   scripts/slurm/local-cluster.sh stop DIR
#
# Runs as root (slurmd must). Jobs run as the submitting user.
set -euo pipefail
usage() { echo "usage: $0 start|stop DIR" >&2; exit 2; }
[[ $# -eq 2 ]] || usage
command=$1
dir=$(realpath -m "$2")
[[ $(id -u) -eq 0 ]] || { echo "local-cluster: slurmd needs root" >&2; exit 2; }
for b in munged slurmctld slurmd sinfo; do
  command -v $b >/dev/null || { echo "local-cluster: $b not found; run scripts/install-deps.sh" >&2; exit 2; }
done

stop() {
  for p in slurmd slurmctld munged; do
    [[ -f $dir/$p.pid ]] && kill "$(cat "$dir/$p.pid")" 2>/dev/null || true
  done
  for _ in $(seq 50); do
    pgrep -f "$dir/" >/dev/null || break
    sleep 0.1
  done
  pkill -f -- "$dir/slurm.conf" 2>/dev/null || true
}

case $command in
  start)
    stop
    mkdir -p "$dir"/{state,spool,log,munge}
    chmod 0700 "$dir/munge"
    # munged refuses group/world-writable parents; the key is private to this cluster.
    dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
    chmod 0400 "$dir/munge/munge.key"
    /usr/sbin/munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
      --pid-file="$dir/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge/seed"
    cpus=$(nproc)
    mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))
    node=$(hostname -s)
    cat > "$dir/slurm.conf" <<CONF
ClusterName=kcert-local
SlurmctldHost=$node
SlurmctldPort=$((6817 + RANDOM % 1000))
SlurmdPort=$((7817 + RANDOM % 1000))
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
SwitchType=switch/none
NodeName=$node CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
CONF
    # Slurm >= 23 (Debian 13 has 24.11) initializes a cgroup plugin in slurmd and exits where
    # no cgroup filesystem is mounted (a chroot, a container); this cluster needs none
    # (proctrack/linuxproc, task/none). Slurm 22.05 (Debian 12) rejects the value.
    slurm_major=$(/usr/sbin/slurmd -V | awk '{split($2, v, "."); print v[1]}')
    if (( slurm_major >= 23 )); then
      echo "CgroupPlugin=disabled" > "$dir/cgroup.conf"
    fi
    export SLURM_CONF=$dir/slurm.conf
    /usr/sbin/slurmctld -f "$dir/slurm.conf" -i
    /usr/sbin/slurmd -f "$dir/slurm.conf"
    # Bounded by time, not tries: against a slurmd that died, each sinfo can take seconds.
    deadline=$((SECONDS + 30))
    while ((SECONDS < deadline)); do
      # slurmd daemonizes by forking twice; under load a check can land between the exits and
      # see no slurmd while the daemon is starting (seen: 2 of 8 starts with a busy core), so
      # it has exited only if a second look half a second later finds none either.
      if ! pgrep -f "slurmd -f $dir/slurm.conf" >/dev/null; then
        sleep 0.5
        pgrep -f "slurmd -f $dir/slurm.conf" >/dev/null || { echo "local-cluster: slurmd exited; logs in $dir/log" >&2; tail -5 "$dir/log/slurmd.log" >&2; exit 1; }
      fi
      state=$(timeout 5 sinfo -h -o %T 2>/dev/null | head -1 || true)
      [[ $state == idle* || $state == mixed* ]] && { echo "export SLURM_CONF=$dir/slurm.conf"; exit 0; }
      sleep 0.2
    done
    echo "local-cluster: the node did not become idle (state '${state:-?}'); logs in $dir/log" >&2
    exit 1
    ;;
  stop) stop ;;
  *) usage ;;
esac
