"""Flight-recorder dumps written by PyTorch (tests/fixtures/flight-recorder, see its README): the
laggard, the desync, dumps beside logs, and dumps that must be refused without running anything."""

import json
import os
import pickle
import shutil
import sys
from pathlib import Path

import pytest

from bot.cli import main
from collectors import flight_recorder as fr

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures" / "flight-recorder"
HANG, DESYNC = FIX / "hang", FIX / "desync"


def diagnose(capsys, data_dir, *paths):
    code = main(["--data-dir", str(data_dir), "diagnose", *map(str, paths), "--format", "json"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def doc_of(capsys, data_dir, *paths):
    code, out, err = diagnose(capsys, data_dir, *paths)
    assert code == 0, err
    return json.loads(out)


def kinds(doc, kind):
    return [f for f in doc["findings"] if f["kind"] == kind]


# ---- what PyTorch wrote ---------------------------------------------------------------------

def test_the_pickled_dumps_are_read_without_pickle_load():
    dumps = fr.read_paths(sorted(str(p) for p in HANG.iterdir()))
    assert [d.rank for d in dumps] == [0, 1, 2, 3]
    assert {d.form for d in dumps} == {"pickle"} and {d.version for d in dumps} == {"2.10"}
    # ranks 0 and 1 recorded 19 collectives (10 all_reduce, 9 all_gather) in a buffer of 16: it wrapped
    assert [len(d.entries) for d in dumps] == [16, 16, 10, 9]
    last = dumps[0].entries[-1]
    assert last["profiling_name"] == "gloo:all_reduce" and last["collective_seq_id"] == 10
    assert last["process_group"] == ("0", "default_pg") and last["input_sizes"] == [[256]]
    assert dumps[3].pg_status["0"]["last_enqueued_collective"] == 9


def test_held_back_rank_is_the_laggard_with_its_stack(capsys, data_dir):
    doc = doc_of(capsys, data_dir, HANG)
    assert doc["culprit"]["rank"] == 3 and doc["culprit"]["reason"] == "laggard"
    assert doc["culprit"]["collective"] == {"pg": 0, "seq": 10, "op": "ALLREDUCE", "waiting": 3,
                                            "last_completed": 9}
    (lag,) = kinds(doc, "rank-straggler")
    assert lag["attrs"]["ranks"] == "3"
    assert lag["attrs"]["last_entered"].startswith("ALLREDUCE #9 of PG 0")
    # the laggard's own Python stack, torch's wrappers left out
    assert lag["attrs"]["stack"].startswith("train_step (/workspace/make_dumps.py:")
    assert "distributed_c10d.py" not in lag["attrs"]["stack"]
    assert "train_step" in doc["culprit"]["evidence"][0]
    waiting = kinds(doc, "nccl-timeout")
    assert sorted(f["rank"] for f in waiting) == [0, 1, 2]
    assert {(f["attrs"]["seq"], f["attrs"]["op"], f["attrs"]["numel_in"], f["attrs"]["pg"]) for f in waiting} \
        == {(10, "ALLREDUCE", 256, 0)}
    # the subgroup of ranks 0 and 1 (PG 1) finished its all_gathers: nothing said of it
    assert all(f["attrs"]["pg"] == 0 for f in doc["findings"] if "pg" in f["attrs"])
    assert not kinds(doc, "collective-mismatch")
    assert doc["causes"][0]["id"] == "nccl-watchdog-timeout"
    assert doc["causes"][0]["category"] == "communication"


def test_size_desync_in_json_dumps_is_a_software_mismatch(capsys, data_dir):
    doc = doc_of(capsys, data_dir, DESYNC)
    (mm,) = kinds(doc, "collective-mismatch")
    assert mm["attrs"] == {"seq": 3, "ops": "NumelIn 16/32", "ranks": "0,1,2", "pg": 0, "odd_ranks": "1"}
    assert mm["source"].endswith("nccl_trace_rank_1.json")
    assert doc["causes"][0]["category"] == "software"
    assert doc["causes"][0]["id"] == "nccl-collective-mismatch"
    # every rank entered #3: no laggard is invented
    assert not kinds(doc, "rank-straggler")
    assert (doc["culprit"]["rank"], doc["culprit"]["reason"]) == (1, "mismatch")  # the odd one out


def test_terminal_reply_names_the_laggard(capsys, data_dir):
    assert main(["--data-dir", str(data_dir), "diagnose", str(HANG)]) == 0
    out = capsys.readouterr().out
    assert "rank 3" in out and "#10" in out


def test_dumps_beside_logs_in_one_folder(capsys, data_dir, tmp_path):
    job = tmp_path / "job"
    shutil.copytree(HANG, job)
    for log in (FIX / "hang-logs").iterdir():
        shutil.copy(log, job / log.name)
    doc = doc_of(capsys, data_dir, job)
    sources = doc["stats"]["sources"]
    assert sum(s.endswith(".log") for s in sources) == 4
    assert sum("nccl_trace_rank_" in s for s in sources) == 4
    # the dumps were not read as text logs (nor skipped as binary ones)
    assert not any("not a text log" in w for w in doc["warnings"])
    assert "Timed out waiting 5000ms" in doc["first_error"]["line"]
    assert doc["culprit"]["rank"] == 3 and doc["culprit"]["reason"] == "laggard"


def test_dumps_and_logs_given_separately(capsys, data_dir):
    doc = doc_of(capsys, data_dir, *sorted(HANG.iterdir()), FIX / "hang-logs")
    assert doc["culprit"]["rank"] == 3
    assert len(doc["stats"]["sources"]) == 8


def test_laggard_host_comes_from_the_logs():
    dumps = fr.read_paths(sorted(str(p) for p in HANG.iterdir()))
    out = fr.analyse(dumps, rank_node={3: "gpu03", 0: "gpu00"})
    (lag,) = [f for f in out.findings if f.kind == "rank-straggler"]
    assert lag.attrs["node"] == "gpu03"
    assert {f.node for f in out.findings if f.kind == "nccl-timeout" and f.rank == 0} == {"gpu00"}


def test_missing_dump_of_a_named_member_is_said_not_guessed():
    dumps = fr.read_paths(sorted(str(p) for p in HANG.iterdir())[:3])  # rank 3's dump lost
    out = fr.analyse(dumps)
    # gloo names no members in pg_config, so nothing says rank 3 belonged: no laggard is made up
    assert not [f for f in out.findings if f.kind == "rank-straggler"]


def test_op_names_match_the_watchdogs_optype():
    assert fr.op_name("nccl:all_reduce") == "ALLREDUCE"
    assert fr.op_name("gloo:all_gather") == "ALLGATHER"
    assert fr.op_name("nccl:_allgather_base") == "_ALLGATHER_BASE"
    assert fr.op_name("nccl:reduce_scatter") == "REDUCE_SCATTER"
    assert fr.op_name("nccl:all_to_all") == "ALLTOALL"
    assert fr.op_name("nccl:send 0->1") == "SEND"


def test_unnamed_and_duplicate_dumps_are_said(tmp_path):
    data = (HANG / "nccl_trace_rank_3").read_bytes()
    (tmp_path / "dump.pkl").write_bytes(data)
    (tmp_path / "again_rank_3").write_bytes(data)
    (tmp_path / "trace_rank_3.pkl").write_bytes(data)
    dumps = fr.read_paths([str(tmp_path / n) for n in ("dump.pkl", "trace_rank_3.pkl", "again_rank_3")])
    assert [d.rank for d in dumps] == [None, 3, 3]
    warnings = " ".join(fr.analyse(dumps).warnings)
    assert "cannot tell which rank" in warnings and "a second dump of rank 3" in warnings


# ---- what must be refused -------------------------------------------------------------------

class _RunsCode:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class _Imports:
    def __reduce__(self):
        return (__import__, ("subprocess",))


@pytest.mark.parametrize("shape", ["bare", "inside-a-dump"])
def test_malicious_pickle_is_refused_without_running_it(shape, tmp_path, capsys, data_dir):
    marker = tmp_path / "pwned"
    evil = _RunsCode(marker)
    if shape == "inside-a-dump":  # a real dump with one entry swapped for the payload
        dumps = fr.read_paths([str(HANG / "nccl_trace_rank_0")])
        doc = {"version": dumps[0].version, "pg_status": dumps[0].pg_status, "pg_config": dumps[0].pg_config,
               "entries": dumps[0].entries[:-1] + [evil]}
    else:
        doc = evil
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(pickle.dumps(doc, protocol=2))
    assert fr.sniff_file(str(path)) == "pickle"
    code, out, err = diagnose(capsys, data_dir, path)
    assert code == 1 and out == ""
    assert "refused" in err and "os.system" in err.replace("posix.system", "os.system")
    assert "Traceback" not in err
    assert not marker.exists()
    # the same through the library, for every protocol
    for proto in range(2, pickle.HIGHEST_PROTOCOL + 1):
        with pytest.raises(fr.DumpError, match="refused"):
            fr.read_dump("x", pickle.dumps(doc, protocol=proto))
    with pytest.raises(fr.DumpError, match="refused"):
        fr.read_dump("x", pickle.dumps({"version": "2.10", "entries": [_Imports()]}, protocol=4))
    assert not marker.exists()


def test_cut_short_dump_says_so(tmp_path, capsys, data_dir):
    data = (HANG / "nccl_trace_rank_0").read_bytes()
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(data[: len(data) // 2])
    code, out, err = diagnose(capsys, data_dir, path)
    assert code == 1 and "damaged or cut short" in err and "Traceback" not in err
    js = tmp_path / "nccl_trace_rank_1.json"
    js.write_bytes((DESYNC / "nccl_trace_rank_1.json").read_bytes()[:700])
    code, out, err = diagnose(capsys, data_dir, js)
    assert code == 1 and "JSON dump is damaged or cut short" in err


def test_garbage_after_a_pickle_header_says_so(tmp_path, capsys, data_dir):
    path = tmp_path / "nccl_trace_rank_5"
    path.write_bytes(b"\x80\x02" + bytes(range(256)) * 4)
    code, out, err = diagnose(capsys, data_dir, path)
    assert code == 1 and "nccl_trace_rank_5" in err and "Traceback" not in err


def test_a_pickle_of_something_else_is_not_a_dump(tmp_path, capsys, data_dir):
    path = tmp_path / "model_rank_0.pkl"
    path.write_bytes(pickle.dumps({"weights": [1.0, 2.0]}, protocol=2))
    code, out, err = diagnose(capsys, data_dir, path)
    assert code == 1 and "not a flight-recorder dump" in err


def test_the_cli_as_a_console_script_exits_1_without_traceback(tmp_path, data_dir):
    import subprocess

    marker = tmp_path / "pwned"
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(pickle.dumps(_RunsCode(marker), protocol=2))
    env = {**os.environ, "GPU_TRIAGE_DATA_DIR": str(data_dir)}
    proc = subprocess.run([sys.executable, "-m", "bot.cli", "diagnose", str(path)], capture_output=True,
                          env=env, cwd=ROOT, timeout=300)
    assert proc.returncode == 1 and b"refused" in proc.stderr and b"Traceback" not in proc.stderr
    assert not marker.exists()


def test_a_huge_dump_is_not_read_whole(tmp_path, capsys, data_dir):
    path = tmp_path / "nccl_trace_rank_0"
    with open(path, "wb") as fh:  # sparse: the pickle header, then 64 MB of nothing
        fh.write(b"\x80\x02}q\x00")
        fh.truncate(fr.MAX_DUMP_BYTES + 1)
    code, out, err = diagnose(capsys, data_dir, path)
    assert code == 1 and "larger than 64 MB" in err


def test_entries_are_bounded_newest_kept():
    data = (HANG / "nccl_trace_rank_0").read_bytes()
    d = fr.read_dump("nccl_trace_rank_0", data, max_entries=5)
    assert len(d.entries) == 5 and d.dropped == 11
    assert [e["record_id"] for e in d.entries] == [14, 15, 16, 17, 18]
    warnings = fr.analyse([d]).warnings
    assert any("16 flight-recorder entries; only the newest 5" in w for w in warnings)


def test_a_text_log_is_never_taken_for_a_dump():
    for log in (FIX / "hang-logs").iterdir():
        assert fr.sniff_file(str(log)) is None
    assert fr.looks_like_dump(b'{"ts": "2024-01-01", "level": "error", "msg": "NCCL timeout"}') is None


def test_findings_from_dumps_carry_only_documented_attributes():
    from collectors.findings import KINDS

    for folder in (HANG, DESYNC):
        out = fr.analyse(fr.read_paths(sorted(str(p) for p in folder.iterdir())))
        assert out.findings
        for f in out.findings:
            assert set(f.attrs) <= set(KINDS[f.kind]), (f.kind, set(f.attrs) - set(KINDS[f.kind]))


# ---- Slack: uploaded dumps go through the same engine ----------------------------------------

@pytest.fixture
def slack_bot(slack_api, engine, tmp_path):
    from bot.slack.app import create_app
    from bot.slack.config import SlackConfig
    from bot.slack.http import make_server, serve_in_thread
    from slack_fakes import BOT_TOKEN

    env = {"SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_SIGNING_SECRET": SECRET, "SLACK_API_URL": slack_api.url,
           "GPU_TRIAGE_DATA_DIR": str(tmp_path / "data")}
    app, ctx = create_app(SlackConfig.from_env(env, http=True), engine=engine, http=True)
    server = make_server(app, "127.0.0.1", 0)
    serve_in_thread(server)
    yield f"http://127.0.0.1:{server.server_address[1]}/slack/events"
    server.shutdown()
    ctx.pool.shutdown(wait=True, cancel_futures=True)


SECRET = "5c2f0e7d9a8b4c3d2e1f0a9b8c7d6e5f"


def _mention(url, files, ts):
    import urllib.request

    from slack_fakes import event_body, signed_headers

    event = {"type": "app_mention", "user": "U1", "channel": "CGEN", "ts": ts, "text": "<@UBOT> why did it hang?",
             "files": [{"id": fid, "name": name} for fid, name in files]}
    data = event_body(event)
    data = data.encode() if isinstance(data, str) else data
    req = urllib.request.Request(url, data=data, method="POST",
                                 headers={**signed_headers(SECRET, data), "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200


def test_uploaded_dumps_name_the_laggard_in_the_thread(slack_bot, slack_api):
    files = []
    for i, dump in enumerate(sorted(HANG.iterdir())):
        slack_api.register_file(f"FD{i}", dump.name, dump.read_bytes(), "application/octet-stream")
        files.append((f"FD{i}", dump.name))
    _mention(slack_bot, files, "1700000100.000100")
    answer = slack_api.wait_for("chat.postMessage", timeout=60)[0].params
    assert answer["thread_ts"] == "1700000100.000100"
    said = answer.get("text", "") + json.dumps(answer.get("blocks", []))
    assert "rank 3" in said and "#10" in said


def test_uploaded_malicious_pickle_is_refused_in_the_thread(slack_bot, slack_api, tmp_path):
    marker = tmp_path / "pwned-slack"
    slack_api.register_file("FE1", "nccl_trace_rank_0", pickle.dumps(_RunsCode(marker), protocol=2),
                            "application/octet-stream")
    _mention(slack_bot, [("FE1", "nccl_trace_rank_0")], "1700000100.000200")
    answer = slack_api.wait_for("chat.postMessage", timeout=60)[0].params
    said = answer.get("text", "") + json.dumps(answer.get("blocks", []))
    assert "refused" in said
    assert not marker.exists()


def test_odd_values_inside_a_plain_dump_do_not_break_the_analysis():
    import time

    dumps = fr.read_paths(sorted(str(p) for p in HANG.iterdir()))
    dumps[0].entries[-1]["input_dtypes"] = 5
    dumps[1].entries[-1]["input_sizes"] = [[2 ** 40, "x"]]
    dumps[2].entries[0]["process_group"] = 7
    dumps[2].entries[1]["collective_seq_id"] = "x"
    dumps[3].pg_status["0"] = {"last_enqueued_collective": 2 ** 70, "last_completed_collective": None}
    started = time.perf_counter()
    out = fr.analyse(dumps)
    assert time.perf_counter() - started < 1
    assert all(f.kind in ("nccl-timeout", "rank-straggler", "collective-mismatch") for f in out.findings)


def test_1024_ranks_one_laggard_quickly():
    """The real entries of rank 2's dump, renumbered into 1 024 ranks' worth of 300 collectives,
    rank 517 one collective behind."""
    import dataclasses
    import time

    (real,) = fr.read_paths([str(HANG / "nccl_trace_rank_2")])
    template = real.entries[0]
    dumps = []
    for rank in range(1024):
        last = 299 if rank == 517 else 300
        entries = [{**template, "collective_seq_id": s, "record_id": s - 1} for s in range(1, last + 1)]
        dumps.append(dataclasses.replace(real, name=f"nccl_trace_rank_{rank}", rank=rank, entries=entries,
                                         pg_status={"0": {"last_enqueued_collective": last,
                                                          "last_completed_collective": last - 1}}))
    started = time.perf_counter()
    out = fr.analyse(dumps)
    assert time.perf_counter() - started < 6
    (lag,) = [f for f in out.findings if f.kind == "rank-straggler"]
    assert lag.attrs["ranks"] == "517" and lag.attrs["seq"] == 300 and lag.attrs["waiting"] == 1023
    assert len([f for f in out.findings if f.kind == "nccl-timeout"]) == fr.MAX_WAITING_FINDINGS


def test_nccl_shapes_members_without_dumps_and_kernels_never_started():
    """What gloo does not write but ProcessGroupNCCL does (FlightRecorderDetail.hpp): a pg_config
    naming the group's ranks, and started/scheduled states with timing on. The real dumps,
    with those two fields set the NCCL way."""
    import dataclasses

    real = fr.read_paths(sorted(str(p) for p in HANG.iterdir()))
    nccl_cfg = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"}}
    out = fr.analyse([dataclasses.replace(d, pg_config=nccl_cfg) for d in real[:3]])  # rank 3's dump lost
    (lag,) = [f for f in out.findings if f.kind == "rank-straggler"]
    assert lag.attrs["ranks"] == "3" and lag.attrs["no_dump"] is True and lag.attrs["seq"] == 10
    assert "wrote no dump" in lag.line

    # every rank entered #9 (rank 3's last); with timing, ranks 0-2's kernels started, rank 3's never did
    dumps = [dataclasses.replace(d, entries=[e for e in d.entries if e["collective_seq_id"] <= 9 or
                                             e["process_group"][0] != "0"]) for d in real]
    for d in dumps:
        d.pg_status = {"0": {"last_enqueued_collective": 9, "last_completed_collective": 8}}
        for e in d.entries:
            if e["process_group"][0] == "0" and e["collective_seq_id"] == 9:
                e.update(retired=False, state="scheduled" if d.rank == 3 else "started")
    out = fr.analyse(dumps)
    (lag,) = [f for f in out.findings if f.kind == "rank-straggler"]
    assert lag.attrs["ranks"] == "3" and lag.attrs["seq"] == 9 and lag.attrs["waiting"] == 3
    assert "never started it" in lag.line


def test_rank_from_the_names_sites_give_their_dumps():
    assert fr.rank_from_name("/tmp/nccl_trace_rank_17") == 17
    assert fr.rank_from_name("comm_lib_trace_rank_3.json") == 3
    assert fr.rank_from_name("fr/trace_rank_12.pkl") == 12
    assert fr.rank_from_name("log/nccl_trace_rank_7.txt") == 7  # as a bundle stores it
    assert fr.rank_from_name("nccl_trace_rank_") is None


def test_a_bad_pickle_inside_a_folder_is_skipped_with_a_warning(tmp_path, capsys, data_dir):
    marker = tmp_path / "pwned-folder"
    job = tmp_path / "job"
    shutil.copytree(HANG, job)
    (job / "rng_state.pkl").write_bytes(pickle.dumps({"seed": 1234}, protocol=2))
    (job / "evil_rank_9").write_bytes(pickle.dumps(_RunsCode(marker), protocol=2))
    doc = doc_of(capsys, data_dir, job)
    assert doc["culprit"]["rank"] == 3
    warnings = " ".join(doc["warnings"])
    assert "rng_state.pkl" in warnings and "not a flight-recorder dump" in warnings
    assert "evil_rank_9" in warnings and "refused" in warnings
    assert not marker.exists()


def test_a_folder_of_nothing_but_bad_pickles_fails_with_the_reason(tmp_path, capsys, data_dir):
    job = tmp_path / "job"
    job.mkdir()
    (job / "rng_state.pkl").write_bytes(pickle.dumps({"seed": 1234}, protocol=2))
    code, out, err = diagnose(capsys, data_dir, job)
    assert code == 1 and "nothing to read" in err and "not a flight-recorder dump" in err


def test_dumps_saved_in_a_bundle_are_copied_byte_for_byte_and_replay(tmp_path, engine):
    """`--job ... dumps/`: the dumps go into the bundle with the job's logs; a pickle is data, so it is
    copied as it is (redacting it as text would break it) and the replay names the same laggard."""
    from bot.render import as_dict
    from collectors.bundle import read_bundle, write_bundle

    logs = {p.name: p for p in sorted(HANG.iterdir())}
    logs["rank0.log"] = FIX / "hang-logs" / "rank0.log"
    path = write_bundle(tmp_path / "with-dumps.tar.gz", {}, job="7", logs=logs)
    with read_bundle(path) as bundle:
        kept = {p.name: p.read_bytes() for p in bundle.logs}
        assert kept["nccl_trace_rank_3"] == (HANG / "nccl_trace_rank_3").read_bytes()
        assert "rank0.log.txt" in kept
        doc = as_dict(engine.diagnose_bundle(bundle))
    assert doc["culprit"] and doc["culprit"]["rank"] == 3 and doc["culprit"]["reason"] == "laggard"


def test_the_rank_of_a_desync_is_the_culprit(engine):
    """The desync dumps: rank 1 all-reduced 32 elements where ranks 0 and 2 all-reduced 16; the
    culprit is rank 1 (reason mismatch), said in en and zh."""
    from bot.render import as_dict, culprit_line

    diagnosis = engine.diagnose_paths([str(DESYNC)])
    for lang, words in (("en", "called another collective"), ("zh", "调用的集合通信与其他 rank 不一致")):
        doc = as_dict(diagnosis, lang=lang)
        c = doc["culprit"]
        assert (c["rank"], c["reason"]) == (1, "mismatch") and c["collective"]["seq"] == 3
        said = culprit_line(doc, lang)
        assert "rank 1" in said and "#3" in said and "NumelIn 16/32" in said and words in said
