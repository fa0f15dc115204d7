"""The first error across the files of one diagnosis: by time where the logs' times can be compared
(glog and syslog times have no year), in file order where they cannot, and said which; the rank or
host a per-rank file's name gives. Real excerpts, arranged into folders so that file order and time
order disagree."""

from __future__ import annotations

from pathlib import Path

from collectors.trainlog import parse_paths, parse_text, rank_and_node_from_name

HERE = Path(__file__).resolve().parent
FIX = HERE / "fixtures" / "trainlog"
CORPUS = HERE / "corpus"


def lines_of(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines(keepends=True)


def test_glog_times_without_a_year_order_the_files(tmp_path):
    # watchdog-torchrun.txt: rank 0 at 18:44:12.715, rank 4 at 18:44:12.755, rank 3 at 18:44:13.275;
    # the earliest goes in the file that comes last alphabetically
    src = lines_of(FIX / "watchdog-torchrun.txt")
    for name, rank in (("a.log", "[rank3]"), ("b.log", "[rank4]"), ("c.log", "[rank0]")):
        (tmp_path / name).write_text("".join(ln for ln in src if ln.startswith(rank)), encoding="utf-8")
    fe = parse_paths([str(tmp_path)]).first_error
    assert (fe.rank, Path(fe.source).name, fe.basis) == (0, "c.log", "time")
    # rank 4's error came 40 ms later in another file: within clock skew, so it is named too
    assert fe.also and fe.also["rank"] == 4 and 0 <= fe.also["seconds_later"] < 1


def test_syslog_times_without_a_year_order_the_files(tmp_path):
    src = lines_of(CORPUS / "gpu-hardware" / "gpu-operator-xid48-dbe-rminitadapter.log")
    (tmp_path / "a-kernel.log").write_text("".join(src[3:5]), encoding="utf-8")  # 11:38:47, XID 48 and 64
    (tmp_path / "z-kernel.log").write_text("".join(src[0:3]), encoding="utf-8")  # 11:38:27, RmInitAdapter
    fe = parse_paths([str(tmp_path)]).first_error
    assert Path(fe.source).name == "z-kernel.log" and fe.basis == "time" and "11:38:27" in (fe.ts or "")
    assert fe.node == "worker4"


def test_iso_times_and_yearless_glog_times_share_the_run_year(tmp_path):
    # an ISO-dated error (2023-04-29 06:01:12) and glog lines dated "1206" with no year: the glog
    # times take the run's year from the dated line, so the ISO file (last alphabetically) is first
    (tmp_path / "a-rank0.log").write_text("".join(lines_of(FIX / "watchdog-torchrun.txt")[:4]), encoding="utf-8")
    (tmp_path / "z-trainer.log").write_text(
        "".join(lines_of(CORPUS / "checkpoint-storage" / "dolly-torch-save-errno28-no-space.log")), encoding="utf-8")
    fe = parse_paths([str(tmp_path)]).first_error
    assert (Path(fe.source).name, fe.basis) == ("z-trainer.log", "time") and fe.ts.startswith("2023-04-29")


def test_without_comparable_times_it_says_file_order(tmp_path):
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    (ranks / "rank0.log").write_text("".join(lines_of(FIX / "watchdog-torchrun.txt")[:2]), encoding="utf-8")
    (ranks / "rank17.log").write_text("".join(lines_of(FIX / "oom-new.txt")), encoding="utf-8")
    fe = parse_paths([str(ranks)]).first_error
    assert fe.basis == "file-order" and fe.to_json()["basis"] == "file-order"


def test_a_per_rank_file_name_gives_its_lines_a_rank(tmp_path):
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    (ranks / "rank17.log").write_text("".join(lines_of(FIX / "oom-new.txt")), encoding="utf-8")
    r = parse_paths([str(ranks)])
    assert r.first_error.rank == 17
    assert all(f.rank == 17 for f in r.findings if f.kind == "cuda-oom")


def test_names_that_say_a_rank_or_a_host():
    assert rank_and_node_from_name("logs/rank17.log") == (17, None)
    assert rank_and_node_from_name("train_rank_3_stderr.txt") == (3, None)
    assert rank_and_node_from_name("log.12") == (12, None)
    assert rank_and_node_from_name("trainer-worker-3.log") == (None, "trainer-worker-3")
    assert rank_and_node_from_name("gpu-node-017.out") == (None, "gpu-node-017")
    assert rank_and_node_from_name("slurm-123_4.out") == (None, None)  # an array task is not a rank
    assert rank_and_node_from_name("train.log") == (None, None)


def test_the_label_never_claims_time_the_times_cannot_back():
    from bot.render import first_error_label

    timed = {"basis": "time"}
    untimed = {"basis": "file-order"}
    assert first_error_label(timed, "en", 3) == "First error in time"
    assert first_error_label(untimed, "en", 1) == "First error in the log"
    assert first_error_label(untimed, "en", 64) == "First error in file order"
    assert first_error_label(untimed, "zh", 64) == "按文件顺序最早的错误"


def test_an_error_storm_keeps_a_bounded_candidate_list_and_the_same_first_error():
    """30 000 ranks' worth of NCCL errors: the candidates for the first error stay bounded, and the
    answer is the one the whole list would give: the earliest in time although its lines come last
    (after 30 000 later errors and a rival 0.8 s behind it)."""
    import io

    from collectors import trainlog

    storm = "".join(f"[rank{r % 512}]:[E1106 09:{(r // 60) % 60:02d}:{r % 60:02d}.000000 1 x.cpp:1] RuntimeError: "
                    f"NCCL error in: ProcessGroupNCCL.cpp:1275, remote process exited or there was a network error\n"
                    for r in range(30_000))
    rival = "[rank40]:[E1106 08:41:12.900000 1 x.cpp:1] RuntimeError: CUDA error: unspecified launch failure\n"
    first = ("[rank17]:[E1106 08:41:12.123456 1 x.cpp:1] RuntimeError: CUDA error: an illegal memory access "
             "was encountered\n")
    sc = trainlog._Scanner(())
    sc.scan("storm.log", io.BytesIO((storm + rival + first).encode()))
    assert len(sc.events) <= trainlog.EVENT_CAP + 1
    res = sc.finish()
    assert res.first_error.rank == 17 and "illegal memory access" in res.first_error.line
    assert res.first_error.basis == "time"


def test_the_first_error_is_nccls_own_detail_when_pytorch_appends_it():
    # PyTorch ends an NCCL error with "Last error:" and the text NCCL recorded (ncclGetLastError):
    # the same error, said specifically; the answer follows the detail (the network plugin, not "internal")
    text = ("[rank1]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
            "ProcessGroupNCCL.cpp:1970, internal error - please report this issue to the NCCL developers, "
            "NCCL version 2.20.5\n"
            "[rank1]: ncclInternalError: Internal check failed.\n"
            "[rank1]: Last error:\n"
            "[rank1]: NET/OFI Unable to insert remote address into address vector for device 1. RC: 0\n")
    res = parse_text(text)
    assert res.first_error.line.startswith("NET/OFI Unable to insert remote address")
    assert res.first_error.line_no == 4 and res.first_error.rank == 1
    # without the detail the first error stays the NCCL error itself
    assert parse_text(text.rsplit("[rank1]: Last error:", 1)[0]).first_error.line_no == 1
