#!/usr/bin/env bash
# Brings up a one-node Slurm cluster on this machine, as root, from
# Debian's slurm-wlm and munge packages: a munge key (made here when there
# is none), munged, slurmctld and slurmd on the loopback address, one node
# with the CPUs and memory slurmd finds (a job that asks for no memory gets
# its CPUs' share), and one partition, "gotune". It waits until sinfo shows
# the node idle. Running it again on a machine where the cluster is up
# changes nothing; where its configuration changed, it restarts it.
#
#   apt-get install -y slurm-wlm munge && scripts/slurm-up.sh
#
# No cgroups are needed: processes are tracked by parentage
# (proctrack/linuxproc) and tasks are not bound (task/none), so it also
# runs inside a container. KillWait (the grace between scancel's SIGTERM
# and SIGKILL) is 30 s, as on most clusters.
set -euo pipefail

if [ "$(id -u)" != 0 ]; then
	echo "slurm-up.sh: must run as root (slurmd and munged need it)" >&2
	exit 1
fi
for p in munged slurmctld slurmd sinfo; do
	if ! command -v "$p" >/dev/null; then
		echo "slurm-up.sh: $p not found: apt-get install -y slurm-wlm munge" >&2
		exit 1
	fi
done

conf=/etc/slurm/slurm.conf
node=$(hostname -s)
# The node's hardware as slurmd sees it: CPUs, sockets, cores, threads and
# RealMemory, so that slurmd never finds less than the configuration says.
hw=$(slurmd -C | head -1 | sed 's/^NodeName=[^ ]* //')
cpus=$(sed -n 's/.*CPUs=\([0-9]*\).*/\1/p' <<<"$hw")
mem=$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$hw")

# munge: a key of our own unless one is there; munged runs as munge.
install -d -o munge -g munge -m 0700 /etc/munge /var/lib/munge /var/log/munge
install -d -o munge -g munge -m 0755 /run/munge
if [ ! -s /etc/munge/munge.key ]; then
	dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
fi
chown munge:munge /etc/munge/munge.key
chmod 0400 /etc/munge/munge.key
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
	runuser -u munge -- munged
	for _ in $(seq 50); do
		munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break
		sleep 0.1
	done
	munge -n | unmunge >/dev/null
fi

install -d -m 0755 /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
want=$(
	cat <<EOF
# Written by gotune's scripts/slurm-up.sh: a one-node cluster on loopback.
ClusterName=gotune
SlurmctldHost=$node(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
DefMemPerCPU=$((mem / cpus))
MpiDefault=none
ReturnToService=2
KillWait=30
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=$node NodeAddr=127.0.0.1 $hw State=UNKNOWN
PartitionName=gotune Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
)
changed=false
if [ ! -f "$conf" ] || [ "$(cat "$conf")" != "$want" ]; then
	printf '%s\n' "$want" >"$conf"
	changed=true
fi

# running PIDFILE reports whether the daemon that wrote PIDFILE still runs.
running() {
	[ -s "$1" ] && kill -0 "$(cat "$1" 2>/dev/null)" 2>/dev/null
}
if $changed && running /run/slurmctld.pid; then
	# Some settings (SelectType among them) take a restart: stop the
	# daemons the Slurm way and start them again below.
	scontrol shutdown
	for _ in $(seq 100); do
		running /run/slurmctld.pid || running /run/slurmd.pid || break
		sleep 0.1
	done
fi
if ! running /run/slurmctld.pid; then
	slurmctld
fi
if ! running /run/slurmd.pid; then
	slurmd
fi

# Wait for the node to register, and return it to service if an earlier
# run left it down or drained.
for _ in $(seq 300); do
	state=$(sinfo -h -n "$node" -o %T 2>/dev/null || true)
	case "$state" in
	idle) exit 0 ;;
	down* | drain* | fail*) scontrol update NodeName="$node" State=RESUME 2>/dev/null || true ;;
	esac
	sleep 0.2
done
echo "slurm-up.sh: node $node is '${state:-not known}' after 60 s, not idle; see /var/log/slurm/" >&2
exit 1
