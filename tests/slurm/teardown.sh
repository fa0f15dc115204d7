#!/usr/bin/env bash
# Stop the test cluster that tests/slurm/setup.sh started: slurmd, slurmctld, then munged.
# Only the daemons of the private prefix (tests/slurm/env.sh), by their own PID files: a system
# Slurm or munge is never signalled. Leaves the configuration and state in place (setup.sh is
# idempotent). Never fails.
set -u
# shellcheck source=tests/slurm/env.sh
. "$(dirname "$0")/env.sh"

stop_pidfile() {  # <name> <pidfile>
    local pid
    [ -s "$2" ] || return 0
    pid=$(cat "$2")
    kill -0 "$pid" 2>/dev/null || return 0
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 1 50); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    echo "teardown: $1 (pid $pid) ignored SIGTERM for 5s; sending SIGKILL" >&2
    kill -KILL "$pid" 2>/dev/null
}

stop_pidfile slurmd "$RUN_DIR/slurmd.pid"
stop_pidfile slurmctld "$RUN_DIR/slurmctld.pid"
stop_pidfile munged "$MUNGE_PID"
exit 0
