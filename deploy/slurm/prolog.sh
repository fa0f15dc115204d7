#!/bin/bash
# gpu-triage Slurm prolog: check this node before the job starts (gpu-triage preflight --local).
#
# slurm.conf:  Prolog=/etc/slurm/gpu-triage-prolog.sh
#              PrologFlags=Alloc          (run at allocation, before the job's first step)
#
# preflight exits 0 healthy (ok/warn), 1 blocking findings (critical), 2 could not check.  This
# prolog fails (exit 1: Slurm requeues the job and drains the node with the reason) only on 1, or
# also on 2 when GPU_TRIAGE_PREFLIGHT_STRICT=1.  Anything else (gpu-triage missing or broken) lets
# the job start: a tool problem must never drain a healthy node.
#
# Settings: GPU_TRIAGE_CONFIG (thresholds under `preflight:`), GPU_TRIAGE_BIN, GPU_TRIAGE_ENV_FILE,
# GPU_TRIAGE_PREFLIGHT_TIMEOUT (seconds, default 60), GPU_TRIAGE_PREFLIGHT_STRICT.

set -u
ENV_FILE=${GPU_TRIAGE_ENV_FILE:-/etc/gpu-triage/env}
if [ -r "$ENV_FILE" ]; then
    set -a
    # shellcheck disable=SC1090
    . "$ENV_FILE"
    set +a
fi
bin=${GPU_TRIAGE_BIN:-gpu-triage}
command -v "$bin" >/dev/null 2>&1 || exit 0

report=$(timeout "${GPU_TRIAGE_PREFLIGHT_TIMEOUT:-60}" "$bin" preflight --local 2>/dev/null)
rc=$?
summary=$(printf '%s\n' "$report" | grep -E '^\[|critical|unknown' | grep -v '^$' | head -n 5 | tr -s ' ' | tr '\n' ';')
case "$rc" in
    0) exit 0 ;;
    1)
        # Slurm shows the prolog's stdout nowhere; print for the slurmd log and say it through logger
        printf 'gpu-triage preflight: blocking findings on %s: %s\n' "$(hostname -s)" "$summary" >&2
        command -v logger >/dev/null 2>&1 && logger -t gpu-triage-prolog -- "critical: $summary"
        exit 1 ;;
    2)
        command -v logger >/dev/null 2>&1 && logger -t gpu-triage-prolog -- "could not check: $summary"
        if [ "${GPU_TRIAGE_PREFLIGHT_STRICT:-0}" = 1 ]; then
            exit 1
        fi
        exit 0 ;;
    *) exit 0 ;;
esac
