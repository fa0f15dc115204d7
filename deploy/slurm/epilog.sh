#!/bin/bash
# gpu-triage Slurm epilog: when the job failed, post its diagnosis to Slack, once per job.
#
# slurm.conf:  EpilogSlurmctld=/etc/slurm/gpu-triage-epilog.sh   (once per job, on the controller; best)
#         or:  Epilog=/etc/slurm/gpu-triage-epilog.sh            (on every node: the posts are deduplicated
#              through the database in GPU_TRIAGE_DATA_DIR, so every node must see the same data directory)
#
# Settings (environment, or /etc/gpu-triage/env loaded below):
#   GPU_TRIAGE_POST_CHANNEL   Slack channel (ID or #name); unset: do nothing
#   SLACK_BOT_TOKEN           the app's bot token (xoxb-...); SLACK_API_URL optional
#   GPU_TRIAGE_CONFIG         the config file (ssh, data_dir, ...); see deploy/gpu-triage.example.yaml
#   GPU_TRIAGE_BIN            the gpu-triage executable (default: gpu-triage on PATH)
#   GPU_TRIAGE_EPILOG_DETACH  1 (default): run in the background so the node is released at once; 0: wait
#   GPU_TRIAGE_EPILOG_TIMEOUT seconds for the whole diagnosis (default 600)
#   GPU_TRIAGE_EPILOG_LOG     file to append gpu-triage's output to (default: syslog through logger)
#
# It never fails: a non-zero epilog drains the node, and a diagnosis must never do that.

set -u
ENV_FILE=${GPU_TRIAGE_ENV_FILE:-/etc/gpu-triage/env}
if [ -r "$ENV_FILE" ]; then
    set -a
    # shellcheck disable=SC1090
    . "$ENV_FILE"
    set +a
fi

log() {
    if [ -n "${GPU_TRIAGE_EPILOG_LOG:-}" ]; then
        printf '%s gpu-triage-epilog: %s\n' "$(date -Is)" "$*" >>"$GPU_TRIAGE_EPILOG_LOG" 2>/dev/null || true
    elif command -v logger >/dev/null 2>&1; then
        logger -t gpu-triage-epilog -- "$*" 2>/dev/null || true
    fi
}

job=${SLURM_JOB_ID:-${SLURM_JOBID:-}}
channel=${GPU_TRIAGE_POST_CHANNEL:-}
bin=${GPU_TRIAGE_BIN:-gpu-triage}
if [ -z "$job" ] || [ -z "$channel" ]; then
    exit 0
fi
case "$job" in
    *[!0-9_]*) log "job id '$job' is not numeric; skipped"; exit 0 ;;
esac

# Did the job fail?  EpilogSlurmctld sets SLURM_JOB_EXIT_CODE2 ("exit:signal"); slurmd's Epilog does
# not, so ask scontrol for the state and the exit code.
failed=no
if [ -n "${SLURM_JOB_EXIT_CODE2:-}" ]; then
    [ "$SLURM_JOB_EXIT_CODE2" != "0:0" ] && failed=yes
elif [ -n "${SLURM_JOB_EXIT_CODE:-}" ]; then
    [ "$SLURM_JOB_EXIT_CODE" != "0" ] && failed=yes
else
    info=$(scontrol show job -o "$job" 2>/dev/null || true)
    state=$(printf '%s\n' "$info" | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
    code=$(printf '%s\n' "$info" | sed -n 's/.* ExitCode=\([0-9:]*\).*/\1/p')
    case "$state" in
        FAILED|NODE_FAIL|TIMEOUT|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE) failed=yes ;;
        CANCELLED|COMPLETED|PREEMPTED) failed=no ;;
        *) [ -n "$code" ] && [ "$code" != "0:0" ] && failed=yes ;;
    esac
fi
if [ "$failed" != yes ]; then
    exit 0
fi

if ! command -v "$bin" >/dev/null 2>&1; then
    log "job $job failed but $bin is not installed; nothing posted"
    exit 0
fi

run() {
    out=$(timeout "${GPU_TRIAGE_EPILOG_TIMEOUT:-600}" "$bin" diagnose --job "$job" --post "$channel" \
        --format json 2>&1 >/dev/null)
    rc=$?
    log "job $job: diagnose --post exited $rc: $(printf '%s' "$out" | tail -n 3 | tr '\n' ' ')"
}

if [ "${GPU_TRIAGE_EPILOG_DETACH:-1}" = 1 ] && command -v setsid >/dev/null 2>&1; then
    export -f run log
    export job channel bin
    setsid bash -c run </dev/null >/dev/null 2>&1 &
else
    run
fi
exit 0
