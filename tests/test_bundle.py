"""Bundles: written as DESIGN.md fixes, read back from a folder or .tar.gz, replayed to the same diagnosis."""

import json
import tarfile
from pathlib import Path

import pytest

from collectors.bundle import BundleError, read_bundle, write_bundle
from collectors.fanout import parse_srun_output, srun_argv
from collectors.registry import collectors
from collectors.remote import CommandResult, NodeResult

FIX = Path(__file__).resolve().parent / "fixtures"


def node(name, outputs, status="ok", detail=""):
    res = NodeResult(name, status, detail)
    for col, text, code in outputs:
        res.results.append(CommandResult(col, collectors()[col].command if col in collectors() else col,
                                         code, text, "", 0.2, code == 124))
    return res


def sample_nodes():
    xid_log = (FIX / "kernel-log" / "11.txt").read_text()
    healthy_df = (FIX / "df" / "06.txt").read_text()
    return {
        "gpu01": node("gpu01", [("df", healthy_df, 0)]),
        "gpu07": node("gpu07", [("kernel-log", xid_log, 0), ("ibstat", "", 124)], "partial", "timed out: ibstat"),
        "gpu09": NodeResult("gpu09", "unreachable", "gpu09:22: connection refused"),
    }


@pytest.mark.parametrize("suffix", ["", ".tar.gz"])
def test_write_read_replay(tmp_path, engine, suffix):
    path = write_bundle(tmp_path / f"incident-123{suffix}", sample_nodes(), job="123",
                        logs={"job.log": "[rank3]: RuntimeError: CUDA error: unknown error\n"})
    with read_bundle(path) as bundle:
        assert bundle.job == "123"
        assert set(bundle.nodes) == {"gpu01", "gpu07", "gpu09"}
        assert bundle.nodes["gpu09"].status == "unreachable" and not bundle.nodes["gpu09"].outputs
        assert bundle.nodes["gpu07"].meta["ibstat"]["timed_out"] is True
        assert [p.name for p in bundle.logs] == ["job.log.txt"]
        first = engine.diagnose_bundle(bundle)
    with read_bundle(path) as again:
        second = engine.diagnose_bundle(again)
    assert [c.id for c in first.causes] == [c.id for c in second.causes]
    assert first.causes and first.causes[0].category == "gpu-hardware"
    xids = [f for f in first.findings if f.kind == "xid"]
    assert xids and {f.node for f in xids} == {"gpu07"}
    statuses = {n["node"]: n["status"] for n in first.nodes}
    assert statuses == {"gpu01": "ok", "gpu07": "partial", "gpu09": "unreachable"}


def test_manifest_layout(tmp_path):
    path = write_bundle(tmp_path / "b", sample_nodes(), job=None)
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["format"] == 1 and manifest["job"] is None and manifest["nodes"] == ["gpu01", "gpu07", "gpu09"]
    row = manifest["collectors"]["gpu07/kernel-log.txt"]
    assert set(row) >= {"command", "exit", "seconds"} and row["exit"] == 0
    assert (path / "gpu07" / "kernel-log.txt").is_file()


def test_existing_folder_is_not_overwritten(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "keep.txt").write_text("mine")
    with pytest.raises(BundleError, match="not empty"):
        write_bundle(tmp_path / "b", sample_nodes())
    assert (tmp_path / "b" / "keep.txt").read_text() == "mine"


def test_hostile_tar_is_refused(tmp_path):
    evil = tmp_path / "evil.tar.gz"
    src = tmp_path / "x.txt"
    src.write_text("x")
    with tarfile.open(evil, "w:gz") as tar:
        tar.add(src, arcname="../../escape.txt")
    with pytest.raises(BundleError, match="outside the bundle"):
        read_bundle(evil)
    with pytest.raises(BundleError, match="does not exist"):
        read_bundle(tmp_path / "missing.tar.gz")
    (tmp_path / "notabundle").mkdir()
    with pytest.raises(BundleError, match="no manifest.json"):
        read_bundle(tmp_path / "notabundle")


@pytest.mark.parametrize("key", ["../kernel-log.txt", "gpu01//etc/passwd", "gpu01/../../etc/passwd", "/etc/passwd"])
def test_a_manifest_entry_outside_the_bundle_is_refused(tmp_path, key):
    folder = write_bundle(tmp_path / "b", sample_nodes())
    (tmp_path / "kernel-log.txt").write_text("NVRM: Xid (PCI:0000:3b:00): 79, outside the bundle\n")
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["collectors"][key] = {"command": "x", "exit": 0}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match="is not '<node>/<file>'"):
        read_bundle(folder)


@pytest.mark.parametrize("change, reason", [
    ({"nodes": 5}, "nodes must be a list"),
    ({"nodes": "gpu01"}, "nodes must be a list"),  # not five nodes g, p, u, 0, 1
    ({"job": ["123"]}, "job must be a string or null"),
    ({"node_status": ["gpu01"]}, "node_status must be an object"),
    ({"node_status": {"gpu01": "ok"}}, "node_status of 'gpu01' must be an object"),
    ({"collectors": ["x"]}, "collectors must be an object"),
    ({"collectors": {"gpu01/kernel-log.txt": "oops"}}, "entry 'gpu01/kernel-log.txt' must be an object"),
])
def test_a_manifest_with_wrong_json_types_is_refused_by_name(tmp_path, change, reason):
    folder = write_bundle(tmp_path / "b", sample_nodes())
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest.update(change)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match=reason):
        read_bundle(folder)


def test_a_deep_or_huge_manifest_is_refused_without_a_traceback(tmp_path, monkeypatch):
    from collectors import bundle as bmod

    folder = write_bundle(tmp_path / "b", sample_nodes())
    (folder / "manifest.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(BundleError, match="nested too deeply"):
        read_bundle(folder)
    monkeypatch.setattr(bmod, "MAX_MANIFEST", 100)
    (folder / "manifest.json").write_text(json.dumps({"format": 1, "nodes": [f"gpu{i:03d}" for i in range(50)]}))
    with pytest.raises(BundleError, match="manifest.json is over 0 MB"):
        read_bundle(folder)


def test_a_bundle_is_written_for_its_owner_alone_whatever_the_umask(tmp_path):
    import os
    import stat

    def mode(p):
        return stat.S_IMODE(p.stat().st_mode)

    job_log = tmp_path / "train.log"
    job_log.write_text("RuntimeError: CUDA out of memory.\n")
    old = os.umask(0o022)
    try:
        folder = write_bundle(tmp_path / "bundles" / "b", sample_nodes(), logs={"train.log": job_log})
        archive = write_bundle(tmp_path / "archives" / "b.tar.gz", sample_nodes(), logs={"train.log": "pasted"})
    finally:
        os.umask(old)
    inside = [folder, *folder.rglob("*")]
    assert {p.relative_to(tmp_path).as_posix(): mode(p) for p in inside if p.is_dir()} == {
        "bundles/b": 0o700, "bundles/b/gpu01": 0o700, "bundles/b/gpu07": 0o700, "bundles/b/log": 0o700}
    assert all(mode(p) == 0o600 for p in inside if p.is_file()), {p.name: oct(mode(p)) for p in inside}
    assert mode(archive) == 0o600 and mode(archive.parent) == 0o700
    with tarfile.open(archive) as tar:
        assert {m.mode for m in tar.getmembers() if m.isfile()} == {0o600}


@pytest.mark.parametrize("packed", [False, True])
def test_a_job_log_is_copied_to_its_last_part(tmp_path, monkeypatch, packed):
    import gzip

    from collectors import bundle as bmod

    monkeypatch.setattr(bmod, "MAX_LOG", 2000)
    text = b"step 1 loss 1.0\n" * 1000 + b"RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    log = tmp_path / ("train.log.gz" if packed else "train.log")
    log.write_bytes(gzip.compress(text) if packed else text)
    folder = write_bundle(tmp_path / "b", sample_nodes(), logs={"train.log": log})
    copied = (folder / "log" / "train.log.txt").read_bytes()
    assert len(copied) == 2000 and copied.endswith(b"Tried to allocate 2.00 GiB\n")


def test_a_refused_archive_leaves_nothing_unpacked(tmp_path, monkeypatch):
    import tempfile

    from collectors import bundle as bmod

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    archive = write_bundle(tmp_path / "b.tar.gz", sample_nodes())
    monkeypatch.setattr(bmod, "FORMAT", 99)  # this version no longer reads format 1
    with pytest.raises(BundleError, match="not supported"):
        read_bundle(archive)
    assert not list(scratch.iterdir())
    # an archive that would unpack past the total cap is refused while unpacking, and cleaned up
    monkeypatch.setattr(bmod, "FORMAT", 1)
    monkeypatch.setattr(bmod, "MAX_TOTAL", 1000)
    with pytest.raises(BundleError, match="unpacks to more than"):
        read_bundle(archive)
    assert not list(scratch.iterdir())


def test_a_huge_collector_file_is_read_to_its_last_part(tmp_path, monkeypatch):
    from collectors import bundle as bmod

    folder = write_bundle(tmp_path / "b", sample_nodes())
    monkeypatch.setattr(bmod, "MAX_NODE_FILE", 2000)
    kernel = folder / "gpu07" / "kernel-log.txt"
    kernel.write_text("x" * 10_000 + "\nNVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n")
    with read_bundle(folder) as b:
        text = b.nodes["gpu07"].outputs["kernel-log"]
    assert len(text) == 2000 and text.endswith("fallen off the bus.\n")


def test_srun_output_is_split_per_node():
    cols = [collectors()["kernel-log"]]
    argv = srun_argv("job-77", 2, cols)
    assert argv[:3] == ["srun", "--jobid=77", "--overlap"] and argv[-3:-1] == ["sh", "-c"]
    xid = "NVRM: Xid (PCI:0000:06:00): 79, GPU has fallen off the bus."
    out = "\n".join([
        "0: @@gpu-triage-node gpu01", "1: @@gpu-triage-node gpu02",
        "0: @@gpu-triage-begin kernel-log", "1: @@gpu-triage-begin kernel-log",
        "1: " + xid, "0: nothing to see", "0: ", "0: @@gpu-triage-end kernel-log 0 12",
        "1: ", "1: @@gpu-triage-end kernel-log 124 20000",
    ])
    res = parse_srun_output(out, cols)
    assert set(res) == {"gpu01", "gpu02"}
    assert res["gpu02"].results[0].stdout.strip() == xid and res["gpu02"].status == "timeout"
    assert res["gpu01"].results[0].stdout == "nothing to see\n" and res["gpu01"].status == "ok"


def test_a_local_bundle_without_gpus_says_what_was_not_checked(tmp_path, data_dir):
    """collect --local on a machine without the GPU and IB tools, diagnosed with no log: the reply
    speaks of the node evidence (not "this log"), counts the node as reached but not fully checked,
    and says the missing commands in one line."""
    from bot.cli import main
    from bot.engine import Engine
    from bot.render import as_dict
    from collectors.bundle import read_bundle

    out = tmp_path / "local"
    assert main(["--data-dir", str(data_dir), "collect", "--local", "-o", str(out)]) == 0
    with read_bundle(out) as b:
        doc = as_dict(Engine(data_dir=str(data_dir)).diagnose_bundle(b), lang="en")
    (node,) = doc["nodes"]
    if node["status"] == "ok":
        pytest.skip("this machine has every collector's command installed")
    from bot.render import nodes_line

    assert nodes_line(doc["nodes"], "en") == "1 of 1 reached, 0 fully checked"
    if not doc["causes"]:
        assert doc["message"].startswith("No confident cause: nothing in the collected node evidence")
    lines = [w for w in doc["warnings"] if "command not installed" in w]
    assert len(lines) == 1 and not any("command not found on the node" in w for w in doc["warnings"])


def test_secrets_never_reach_the_bundle(tmp_path):
    """A token on a `ps` command line and a password in the job's log (plain or gzip) are masked
    before the bundle is written, as the README promises."""
    import gzip

    token = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWx"
    ps = f"  4711 python train.py --hf-token {token} --password hunter2 --max-tokens 100\n"
    nodes = {"gpu01": node("gpu01", [("processes", ps, 0)])}
    log = tmp_path / "job.log"
    log.write_text(f"export HF_TOKEN={token}\nRuntimeError: CUDA error: out of memory\n")
    zipped = tmp_path / "job2.log.gz"
    with gzip.open(zipped, "wt") as fh:
        fh.write("Cookie: session=s3cr3tcookie\nNCCL WARN NET/IB : Got completion from peer\n")
    folder = write_bundle(tmp_path / "b", nodes, logs={"job.log": log, "job2.log.gz": zipped})
    stored = "".join(p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file())
    assert token not in stored and "hunter2" not in stored and "s3cr3tcookie" not in stored
    assert "--max-tokens 100" in stored and "RuntimeError: CUDA error: out of memory" in stored
    assert "NCCL WARN NET/IB" in stored  # the gzip log was stored as text


def test_collection_notes_read_in_chinese(tmp_path, engine):
    """What the collection could not check (a command not installed, a timeout, lines a parser could not
    read) is said in the reply's language."""
    from bot.render import as_dict

    nodes = {"gpu07": node("gpu07", [("ibstat", "", 124), ("ethtool-s", "sh: 1: ethtool: not found\n", 127),
                                     ("df", "Filesystem Size Used Avail Use% Mounted on\n"
                                            "this line is not df output at all\n", 0)], "partial", "timed out: ibstat")}
    path = write_bundle(tmp_path / "b", nodes, job="1")
    with read_bundle(path) as bundle:
        diagnosis = engine.diagnose_bundle(bundle)
    en, zh = as_dict(diagnosis, lang="en")["warnings"], as_dict(diagnosis, lang="zh")["warnings"]
    assert any("ibstat not checked (timed out)" in w for w in en) and any("ibstat 未检查（超时）" in w for w in zh)
    assert any("command not installed: ethtool-s" in w for w in en) and any("命令未安装：ethtool-s" in w for w in zh)
    assert len(en) == len(zh) and all(a != b for a, b in zip(en, zh))
