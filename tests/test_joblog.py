"""The job's StdOut/StdErr paths are chosen by the job's owner (``sbatch -o``) and read with the
bot's privileges: only a regular file owned by the job's user is read, never through a symlink,
only its last JOB_LOG_CAP bytes, and the copies are removed once the bundle is written."""

from __future__ import annotations

import os
from pathlib import Path


from bot import investigate as inv
from collectors.remote import SSHSettings
from collectors.resolve import JobInfo, _uid, parse_scontrol_job

SETTINGS = SSHSettings(None)


def job(tmp_path: Path, name: str, uid: int | None) -> JobInfo:
    return JobInfo(job_id="77", nodes=["n1"], stdout=str(tmp_path / name), uid=uid)


def test_the_owner_comes_from_scontrol_userid():
    fields = parse_scontrol_job("JobId=77 JobName=train UserId=alice(1001) GroupId=alice(1001) JobState=FAILED")
    assert _uid(fields.get("UserId")) == 1001 and _uid(None) is None


def test_a_file_of_the_jobs_user_is_copied_and_removed_after_the_bundle(tmp_path):
    log = tmp_path / "slurm-77.out"
    log.write_text("RuntimeError: CUDA out of memory.\n")
    logs, notes, tmp = inv.fetch_job_logs(job(tmp_path, log.name, os.getuid()), SETTINGS, None)
    assert not notes and list(logs.values())[0].read_text() == log.read_text()
    p = inv.Plan(job="77", nodes=["n1"], logs=logs, tmpdir=tmp)
    inv.save(p, {}, tmp_path / "b.tar.gz")
    assert not tmp.exists() and (tmp_path / "b.tar.gz").is_file()


def test_a_file_of_another_user_is_not_read(tmp_path):
    secret = tmp_path / "shadow"
    secret.write_text("root:$6$secret\n")
    logs, notes, tmp = inv.fetch_job_logs(job(tmp_path, "shadow", os.getuid() + 1), SETTINGS, None)
    assert not logs and "belongs to uid" in notes[0] and "not to the job's user" in notes[0]
    assert not any(tmp.iterdir())


def test_a_symlink_is_not_followed(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("private\n")
    (tmp_path / "slurm-77.out").symlink_to(target)
    logs, notes, _ = inv.fetch_job_logs(job(tmp_path, "slurm-77.out", os.getuid()), SETTINGS, None)
    assert not logs and "could not read the job log" in notes[0]


def test_a_device_or_fifo_is_not_read(tmp_path):
    fifo = tmp_path / "slurm-77.out"
    os.mkfifo(fifo)
    logs, notes, _ = inv.fetch_job_logs(job(tmp_path, fifo.name, os.getuid()), SETTINGS, None)
    assert not logs and "not a regular file" in notes[0]


def test_without_the_jobs_owner_nothing_is_read(tmp_path):
    (tmp_path / "slurm-77.out").write_text("x\n")
    logs, notes, tmp = inv.fetch_job_logs(job(tmp_path, "slurm-77.out", None), SETTINGS, None)
    assert not logs and tmp is None and "which user owns job 77" in notes[0]


def test_only_the_end_of_a_huge_log_is_copied(tmp_path, monkeypatch):
    monkeypatch.setattr(inv, "JOB_LOG_CAP", 1000)
    log = tmp_path / "slurm-77.out"
    log.write_text("a\n" * 2000 + "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n")
    logs, notes, _ = inv.fetch_job_logs(job(tmp_path, log.name, os.getuid()), SETTINGS, None)
    copied = list(logs.values())[0].read_text()
    assert len(copied) == 1000 and copied.endswith("fallen off the bus.\n") and "last" in notes[0]


def test_a_login_node_must_be_a_host_name():
    import pytest

    from collectors.resolve import ResolveError

    for bad in ("-oProxyCommand=touch /tmp/x", "login01;id", "$(id)", "login 01"):
        with pytest.raises(ResolveError, match="not a valid node name"):
            inv.plan(job="123", settings=SETTINGS, login=bad)


def test_a_bundle_is_named_inside_the_bundles_folder():
    assert inv.bundle_name("../../etc/cron.d/x", "20261203") == "incident-_.._etc_cron.d_x-20261203.tar.gz"
    assert "/" not in inv.bundle_name("a/b", "1") and inv.bundle_name(None, "1") == "incident-nodes-1.tar.gz"
    assert inv.bundle_name("llm-pretrain", "1") == "incident-llm-pretrain-1.tar.gz"
