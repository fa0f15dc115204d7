# Sourced by setup.sh and teardown.sh: where the test cluster lives. Everything Slurm and munge
# read or write for the tests is under this private prefix (configuration, key, socket, state,
# spool, logs, PID files) and they listen on their own ports, so the machine's own Slurm and munge
# (their configuration, state, PID files and default ports) are never read, written or signalled.
# tests/conftest_cluster.py computes the same prefix.
PREFIX=${GPU_TRIAGE_SLURM_PREFIX:-${TMPDIR:-/tmp}/gpu-triage-slurm}
CTLD_PORT=${GPU_TRIAGE_SLURMCTLD_PORT:-16817}
SLURMD_PORT=${GPU_TRIAGE_SLURMD_PORT:-16818}
CONF_DIR=$PREFIX/etc
CONF=$CONF_DIR/slurm.conf
LOG_DIR=$PREFIX/log
STATE_DIR=$PREFIX/state
SPOOL_DIR=$PREFIX/spool
RUN_DIR=$PREFIX/run
MUNGE_DIR=$PREFIX/munge
MUNGE_SOCKET=$MUNGE_DIR/munge.socket
MUNGE_KEY=$PREFIX/munge-key/munge.key
MUNGE_PID=$MUNGE_DIR/munged.pid
export SLURM_CONF=$CONF
