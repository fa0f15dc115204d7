"""The real Slurm epilog (deploy/slurm/epilog.sh) against the one-node Slurm's failed job, posting to
the loopback Slack Web API; and the once-per-job claim under concurrent epilogs."""

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from test_collect_integration import _config_with_alias

ROOT = Path(__file__).resolve().parent.parent
EPILOG = ROOT / "deploy" / "slurm" / "epilog.sh"


def _gpu_triage_bin(tmp_path: Path) -> str:
    exe = shutil.which("gpu-triage")
    if exe:
        return exe
    wrapper = tmp_path / "gpu-triage"
    wrapper.write_text(f"#!/bin/sh\ncd {ROOT} && exec {sys.executable} -m bot.cli \"$@\"\n")
    wrapper.chmod(0o755)
    return str(wrapper)


def _epilog_env(slurm_job, cluster, slack_api, tmp_path, channel):
    from conftest_slack import BOT_TOKEN

    cfg = _config_with_alias(cluster, slurm_job.node, tmp_path)
    log = tmp_path / "epilog.log"
    # SLURM_CONF stays: slurmd passes it to its prolog and epilog, and it points at the test cluster
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GPU_TRIAGE_", "SLACK_", "SLURM_")) or k == "SLURM_CONF"}
    env.update({
        # as slurmd sets them for Epilog (no exit code: the script asks scontrol)
        "SLURM_JOB_ID": slurm_job.job_id, "SLURM_JOBID": slurm_job.job_id, "SLURM_JOB_USER": "root",
        "SLURM_JOB_UID": "0", "SLURMD_NODENAME": slurm_job.node, "SLURM_SCRIPT_CONTEXT": "epilog_slurmd",
        # gpu-triage
        "GPU_TRIAGE_POST_CHANNEL": channel, "SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_API_URL": slack_api.url,
        "GPU_TRIAGE_DATA_DIR": str(tmp_path / "data"), "GPU_TRIAGE_SSH_CONFIG": str(cfg),
        "GPU_TRIAGE_COMMAND_TIMEOUT": "5", "GPU_TRIAGE_EPILOG_DETACH": "0", "GPU_TRIAGE_EPILOG_LOG": str(log),
        "GPU_TRIAGE_ENV_FILE": str(tmp_path / "no-env-file"), "GPU_TRIAGE_BIN": _gpu_triage_bin(tmp_path),
    })
    return env, log


def _run(env):
    return subprocess.run(["bash", str(EPILOG)], env=env, capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)


def test_epilog_posts_a_failed_job_once(slurm_job, cluster, slack_api, tmp_path):
    from conftest_slack import CHANNEL_ID

    env, log = _epilog_env(slurm_job, cluster, slack_api, tmp_path, CHANNEL_ID)
    first = _run(env)
    assert first.returncode == 0, first.stderr
    posts = slack_api.calls("chat.postMessage")
    assert len(posts) == 1, log.read_text() if log.exists() else first.stderr
    params = posts[0].params
    assert params["channel"] == CHANNEL_ID and posts[0].status == 200
    blocks = json.loads(params["blocks"]) if isinstance(params["blocks"], str) else params["blocks"]
    text = json.dumps(blocks)
    assert slurm_job.job_id in text                       # the job is named
    assert "exited 0" in log.read_text()

    second = _run(env)
    assert second.returncode == 0
    assert len(slack_api.calls("chat.postMessage")) == 1   # nothing new
    assert "already posted" in log.read_text()


def test_epilog_skips_successful_jobs_and_never_fails(slurm_job, cluster, slack_api, tmp_path):
    from conftest_slack import CHANNEL_ID

    env, log = _epilog_env(slurm_job, cluster, slack_api, tmp_path, CHANNEL_ID)
    ok = _run({**env, "SLURM_JOB_EXIT_CODE2": "0:0"})      # as EpilogSlurmctld says for a success
    assert ok.returncode == 0 and not slack_api.calls("chat.postMessage")
    broken = _run({**env, "SLURM_JOB_EXIT_CODE2": "1:0", "SLACK_BOT_TOKEN": "not-a-token"})
    assert broken.returncode == 0 and not slack_api.calls("chat.postMessage")
    assert "SLACK_BOT_TOKEN" in log.read_text()
    gone = _run({**env, "SLURM_JOB_EXIT_CODE2": "1:0", "GPU_TRIAGE_BIN": str(tmp_path / "missing")})
    assert gone.returncode == 0


def _claim(args):
    from bot import post

    return post.claim(*args)


def test_claim_wins_once_under_concurrent_epilogs(tmp_path):
    from bot import post

    data = str(tmp_path / "data")
    post.claim(data, "warmup", "C1")  # create the table first, as a real deployment has it
    with ProcessPoolExecutor(max_workers=8) as pool:
        won = list(pool.map(_claim, [(data, "4242", "C0OPS")] * 16))
    assert won.count(True) == 1
    assert post.posted(data, "4242", "C0OPS")["state"] == "pending"
    post.done(data, "4242", "C0OPS", "123.456")
    assert not post.claim(data, "4242", "C0OPS") and post.posted(data, "4242", "C0OPS")["ts"] == "123.456"
    assert post.claim(data, "4242", "C0OTHER")  # another channel is another post


def test_post_needs_job_and_token(tmp_path):
    from test_preflight import cli

    proc = cli(["diagnose", "x.log", "--post", "C1"], tmp_path, env={"SLACK_BOT_TOKEN": "xoxb-1"})
    assert proc.returncode == 2 and "--job" in proc.stderr
    proc = cli(["diagnose", "--job", "1", "--post", "C1"], tmp_path, env={"SLACK_BOT_TOKEN": ""})
    assert proc.returncode == 1 and "SLACK_BOT_TOKEN" in proc.stderr


def test_epilog_slurmctld_in_the_foreground_posts_once(slurm, cluster, slack_api, tmp_path):
    """The shipped epilog run by the real slurmctld as its EpilogSlurmctld, in the foreground: while it
    runs, `scontrol show job` says COMPLETING with an empty NodeList, and the nodes come from the
    epilog's environment (SLURM_JOB_NODELIST). A failed job is posted exactly once; a job that
    succeeded is not posted."""
    import shlex
    import time
    import uuid

    from conftest_cluster import SLURM_PREFIX, _run as slurm_run, _unavailable
    from conftest_slack import BOT_TOKEN, CHANNEL_ID

    armed_dir = SLURM_PREFIX / "etc" / "epilog-armed"
    if not armed_dir.is_dir():  # a cluster started by an older setup.sh: bring its configuration up to date
        subprocess.run(["bash", str(ROOT / "tests" / "slurm" / "setup.sh")], capture_output=True, timeout=120)
    if not armed_dir.is_dir():
        _unavailable("Slurm", "the test cluster has no EpilogSlurmctld hook: run tests/slurm/setup.sh as root")
    cfg = _config_with_alias(cluster, slurm.node, tmp_path)
    work = tmp_path / "jobs"
    work.mkdir()
    work.chmod(0o777)
    names, results = {}, {}
    for outcome, code in (("failed", 1), ("ok", 0)):
        name = f"gt-epilog-{outcome}-{uuid.uuid4().hex[:8]}"
        res = tmp_path / f"hook-{outcome}"
        res.mkdir()
        settings = {
            "SLURM_CONF": os.environ["SLURM_CONF"], "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(tmp_path), "TMPDIR": str(tmp_path),
            "GPU_TRIAGE_TEST_EPILOG": str(EPILOG), "GPU_TRIAGE_TEST_RESULTS": str(res),
            "GPU_TRIAGE_ENV_FILE": str(tmp_path / "no-env-file"), "GPU_TRIAGE_POST_CHANNEL": CHANNEL_ID,
            "SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_API_URL": slack_api.url,
            "GPU_TRIAGE_DATA_DIR": str(tmp_path / "data"), "GPU_TRIAGE_SSH_CONFIG": str(cfg),
            "GPU_TRIAGE_COMMAND_TIMEOUT": "5", "GPU_TRIAGE_EPILOG_DETACH": "0",
            "GPU_TRIAGE_EPILOG_LOG": str(tmp_path / "epilog.log"), "GPU_TRIAGE_BIN": _gpu_triage_bin(tmp_path),
        }
        (armed_dir / name).write_text("".join(f"{k}={shlex.quote(v)}\n" for k, v in settings.items()))
        names[outcome], results[outcome] = name, res
    try:
        for outcome, code in (("failed", 1), ("ok", 0)):
            wrap = ('echo "RuntimeError: CUDA error: out of memory" 1>&2; exit 1' if code else "echo done")
            sub = slurm_run("sbatch", "--parsable", "--job-name", names[outcome], "-D", str(work),
                            "-o", str(work / "slurm-%j.out"), "-e", str(work / "slurm-%j.err"), "--wrap", wrap)
            assert sub.returncode == 0, sub.stderr
            names[outcome] = (names[outcome], sub.stdout.strip().split(";")[0])
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not all((r / "exit").exists() for r in results.values()):
            time.sleep(0.5)
    finally:
        for outcome, name in names.items():
            (armed_dir / (name[0] if isinstance(name, tuple) else name)).unlink(missing_ok=True)
    log = tmp_path / "epilog.log"
    said = log.read_text() if log.exists() else "(no epilog log)"
    assert all((r / "exit").exists() for r in results.values()), f"the epilogs did not finish: {said}"
    failed_env = (results["failed"] / "environment").read_text()
    assert "SLURM_SCRIPT_CONTEXT=epilog_slurmctld" in failed_env and f"SLURM_JOB_NODELIST={slurm.node}" in failed_env
    # what the controller says while its epilog runs: the reason the nodes come from the environment
    seen = (results["failed"] / "scontrol").read_text()
    assert "JobState=COMPLETING" in seen and " NodeList= " in seen, seen
    job_id = names["failed"][1]
    posts = slack_api.calls("chat.postMessage")
    assert len(posts) == 1, said
    blocks = posts[0].params["blocks"]
    text = blocks if isinstance(blocks, str) else json.dumps(blocks)
    assert job_id in text and slurm.node in text, text[:2000]
    assert f"job {job_id}: diagnose --post exited 0" in said
    assert f"job {names['ok'][1]}" not in said   # the successful job's epilog did nothing
