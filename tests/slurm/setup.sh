#!/usr/bin/env bash
# Start a one-node Slurm cluster on this machine, on loopback, for gpu-triage's integration tests.
#
# Idempotent: run it twice and the second run only checks that the node is idle. It installs
# nothing (.ci/run installs the Debian packages slurm-wlm and munge). Everything it writes is under
# a private prefix (tests/slurm/env.sh: $GPU_TRIAGE_SLURM_PREFIX, default $TMPDIR/gpu-triage-slurm):
# slurm.conf, a munge key and socket, state, spool, logs and PID files; munged, slurmctld and slurmd
# run as plain background daemons on their own ports (16817/16818). It never reads or writes the
# machine's own Slurm or munge configuration, state or PID files, never signals a system daemon, and refuses to start when its ports
# are taken by something else. Stop everything with tests/slurm/teardown.sh.
#
# Needs root (slurmd runs as root). Exit 0: the cluster answers; exit 1: it could not be started,
# with the reason and the daemons' log tails on stderr.
set -euo pipefail

# shellcheck source=tests/slurm/env.sh
. "$(dirname "$0")/env.sh"
WAIT_S=${SLURM_SETUP_WAIT_S:-60}

die() {
    echo "tests/slurm/setup.sh: $*" >&2
    for f in "$MUNGE_DIR/munged.log" "$LOG_DIR/slurmctld.log" "$LOG_DIR/slurmd.log"; do
        [ -r "$f" ] && { echo "--- last lines of $f:" >&2; tail -n 15 "$f" >&2; }
    done
    exit 1
}

[ "$(id -u)" -eq 0 ] || die "must run as root (slurmd runs as root); try: sudo $0"
for bin in munged munge slurmctld slurmd sinfo scontrol sbatch; do
    command -v "$bin" >/dev/null || die "'$bin' not found: install the Debian packages slurm-wlm and munge (apt-get install slurm-wlm munge), as .ci/run does"
done

NODE=$(hostname -s)
[ -n "$NODE" ] || die "hostname -s printed nothing; set a hostname first"

running() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
# A port of ours held by a process that is not ours: another Slurm (or another test run) is there.
port_taken() { ss -Htln "sport = :$1" 2>/dev/null | grep -q .; }
for port in "$CTLD_PORT" "$SLURMD_PORT"; do
    if port_taken "$port" && ! running "$RUN_DIR/slurmctld.pid" && ! running "$RUN_DIR/slurmd.pid"; then
        die "port $port is already in use by another program; set GPU_TRIAGE_SLURMCTLD_PORT / GPU_TRIAGE_SLURMD_PORT to free ports"
    fi
done

# --- munge (its own key, socket, log and PID file) ---------------------------------------------
install -d -m 0755 "$PREFIX"
install -d -o munge -g munge -m 0755 "$MUNGE_DIR"
install -d -o munge -g munge -m 0700 "$(dirname "$MUNGE_KEY")"
if [ ! -s "$MUNGE_KEY" ]; then
    dd if=/dev/urandom of="$MUNGE_KEY" bs=1 count=1024 status=none
fi
chown munge:munge "$MUNGE_KEY"
chmod 0400 "$MUNGE_KEY"

roundtrip() { munge -S "$MUNGE_SOCKET" -n 2>/dev/null | unmunge -S "$MUNGE_SOCKET" >/dev/null 2>&1; }
if ! roundtrip; then
    runuser -u munge -- munged --socket="$MUNGE_SOCKET" --key-file="$MUNGE_KEY" --pid-file="$MUNGE_PID" \
        --log-file="$MUNGE_DIR/munged.log" --seed-file="$MUNGE_DIR/munged.seed" --force \
        || die "munged did not start"
    for _ in $(seq 1 50); do
        roundtrip && break
        sleep 0.1
    done
    roundtrip || die "munge credentials do not round-trip on $MUNGE_SOCKET"
fi

# --- slurm.conf --------------------------------------------------------------------------------
# The node line is what slurmd itself detects (real CPU count, sockets/cores/threads and memory),
# so the node never comes up INVALID for a configuration mismatch.
NODE_LINE=$(slurmd -C | head -n 1)
case "$NODE_LINE" in NodeName=*) ;; *) die "slurmd -C printed an unexpected line: $NODE_LINE" ;; esac

install -d -m 0755 "$CONF_DIR"
install -d -o slurm -g slurm -m 0755 "$LOG_DIR" "$STATE_DIR" "$RUN_DIR"
install -d -m 0755 "$SPOOL_DIR"

NEW_CONF=$(mktemp)
trap 'rm -f "$NEW_CONF"' EXIT
cat >"$NEW_CONF" <<CONF
# Written by gpu-triage tests/slurm/setup.sh: a one-node test cluster on loopback. Do not use in production.
ClusterName=gputriage
SlurmctldHost=$NODE(127.0.0.1)
# slurmctld (and so EpilogSlurmctld) runs as root here, not as a 'slurm' user: the epilog test runs
# gpu-triage from the Python that runs the tests, which may live in root's home (pyenv).
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
CredType=cred/munge
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
StateSaveLocation=$STATE_DIR
SlurmdSpoolDir=$SPOOL_DIR
SlurmctldPidFile=$RUN_DIR/slurmctld.pid
SlurmdPidFile=$RUN_DIR/slurmd.pid
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups: processes are tracked through /proc and tasks are not confined.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
# No slurmdbd: sacct has nothing to read; gpu-triage's resolver falls back to scontrol.
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
ReturnToService=2
# Keep finished jobs in slurmctld's memory for a day, so that 'scontrol show job' answers for a
# job that already failed (the default, 300 s, is shorter than a slow CI run).
MinJobAge=86400
MpiDefault=none
# The controller's epilog, as the README recommends deploying gpu-triage's: a hook that does nothing
# unless a test has armed it for the job's name (tests/test_epilog.py runs the shipped epilog through it).
EpilogSlurmctld=$CONF_DIR/epilog-slurmctld.sh
# Bind slurmctld and slurmd to 127.0.0.1 (SlurmctldHost and NodeAddr below), not to every address.
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
$NODE_LINE NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
CONF

# The EpilogSlurmctld hook: slurmctld runs it as SlurmUser with the job's SLURM_* environment. A test arms
# it by writing $CONF_DIR/epilog-armed/<job name>: shell assignments of the epilog's settings, the script
# to run (GPU_TRIAGE_TEST_EPILOG) and a folder for what the hook saw (GPU_TRIAGE_TEST_RESULTS: the job's
# SLURM_* environment, `scontrol show job` while the epilog runs, the script's exit status). Any other
# job's epilog is a no-op.
install -d -m 0755 "$CONF_DIR/epilog-armed"
cat >"$CONF_DIR/epilog-slurmctld.sh.new" <<'HOOK'
#!/bin/bash
# Written by gpu-triage tests/slurm/setup.sh: the test cluster's EpilogSlurmctld hook.
armed="$(dirname "$0")/epilog-armed/${SLURM_JOB_NAME:-}"
case "${SLURM_JOB_NAME:-}" in ''|*[!A-Za-z0-9_-]*) exit 0 ;; esac
[ -r "$armed" ] || exit 0
set -a
. "$armed"
set +a
[ -n "${GPU_TRIAGE_TEST_EPILOG:-}" ] && [ -n "${GPU_TRIAGE_TEST_RESULTS:-}" ] || exit 0
env | grep '^SLURM_' | sort >"$GPU_TRIAGE_TEST_RESULTS/environment" 2>/dev/null || true
scontrol show job -o "${SLURM_JOB_ID:-}" >"$GPU_TRIAGE_TEST_RESULTS/scontrol" 2>&1 || true
bash "$GPU_TRIAGE_TEST_EPILOG"
echo "$?" >"$GPU_TRIAGE_TEST_RESULTS/exit.new" && mv "$GPU_TRIAGE_TEST_RESULTS/exit.new" "$GPU_TRIAGE_TEST_RESULTS/exit"
exit 0
HOOK
chmod 0755 "$CONF_DIR/epilog-slurmctld.sh.new"
mv "$CONF_DIR/epilog-slurmctld.sh.new" "$CONF_DIR/epilog-slurmctld.sh"

CHANGED=0
if ! cmp -s "$NEW_CONF" "$CONF"; then
    install -m 0644 "$NEW_CONF" "$CONF"
    CHANGED=1
fi
cat >"$CONF_DIR/cgroup.conf.new" <<'CONF'
# Written by gpu-triage tests/slurm/setup.sh. Unused: slurm.conf selects proctrack/linuxproc and
# task/none, so no cgroup plugin is loaded; the file only keeps tools that look for it quiet.
CgroupPlugin=autodetect
CONF
mv "$CONF_DIR/cgroup.conf.new" "$CONF_DIR/cgroup.conf"

# --- daemons -----------------------------------------------------------------------------------
if [ "$CHANGED" = 1 ] && running "$RUN_DIR/slurmctld.pid"; then
    scontrol reconfigure || true
fi
if ! running "$RUN_DIR/slurmctld.pid"; then
    slurmctld -f "$CONF" || die "slurmctld did not start"
fi
if ! running "$RUN_DIR/slurmd.pid"; then
    slurmd -f "$CONF" || die "slurmd did not start"
fi

state=""
for _ in $(seq 1 $((WAIT_S * 5))); do
    # `scontrol ping` fails at once while slurmctld is not up; `sinfo` would retry for ~10 s.
    scontrol ping >/dev/null 2>&1 || { sleep 0.2; continue; }
    state=$(sinfo -h -n "$NODE" -o '%t' 2>/dev/null | head -n 1 || true)
    case "$state" in
        idle|mix|alloc) break ;;
        down*|drain*|inval*) scontrol update NodeName="$NODE" State=RESUME 2>/dev/null || true ;;
    esac
    sleep 0.2
done
case "$state" in
    idle|mix|alloc) ;;
    *) die "node $NODE is not idle after ${WAIT_S}s (sinfo state: '${state:-no answer}')" ;;
esac
# Jobs an interrupted earlier run left in this private cluster (its state lives on under the prefix)
# would hold the node and keep the tests' jobs pending: cancel them (only this cluster's: SLURM_CONF).
leftover=$(squeue -h -o '%i' 2>/dev/null || true)
if [ -n "$leftover" ]; then
    echo "slurm: cancelling $(echo "$leftover" | wc -l) job(s) left by an earlier run"
    echo "$leftover" | xargs -r scancel 2>/dev/null || true
    for _ in $(seq 1 $((WAIT_S * 5))); do
        [ -z "$(squeue -h -o '%i' 2>/dev/null)" ] && break
        sleep 0.2
    done
    state=$(sinfo -h -n "$NODE" -o '%t' 2>/dev/null | head -n 1 || true)
fi
echo "slurm: node $NODE is $state (slurm $(sinfo -V | awk '{print $2}'), conf $CONF)"
