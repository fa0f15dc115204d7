"""DESIGN.md's ``culprit``: the rank or node the evidence singles out, or null. A rank that timed out
in a collective was waiting for the culprit; it is never named as one."""

from __future__ import annotations

from pathlib import Path

from collectors.trainlog import parse_text

FIX = Path(__file__).resolve().parent / "fixtures" / "trainlog"


def doc_of(engine, text: str):
    from bot.render import as_dict

    return as_dict(engine.diagnose_text(text))


def test_the_one_rank_that_never_reached_the_collective_is_the_culprit(engine):
    # watchdog-old.txt: ranks 1, 2, 3, 6 and 7 report the timeout at SeqNum 469508; with step lines
    # from ranks 0-3, 6 and 7, rank 0 is the one that never reported: it was elsewhere
    steps = "".join(f"[rank{i}]: step 100 | loss 2.0\n" for i in (0, 1, 2, 3, 6, 7))
    text = steps + (FIX / "watchdog-old.txt").read_text(encoding="utf-8")
    (s,) = [f for f in parse_text(text).findings if f.kind == "rank-straggler"]
    assert s.attrs["ranks"] == "0"
    assert doc_of(engine, text)["culprit"] == {"rank": 0, "node": None, "reason": "laggard", "evidence": [s.line],
                                               "collective": {"seq": 469508, "op": "ALLREDUCE", "waiting": 5}}
    # two ranks missing: nobody is singled out
    steps = "".join(f"[rank{i}]: step 100 | loss 2.0\n" for i in range(8))
    assert doc_of(engine, steps + (FIX / "watchdog-old.txt").read_text(encoding="utf-8"))["culprit"] is None


def test_a_rank_that_timed_out_is_a_witness_not_the_culprit(engine):
    doc = doc_of(engine, (FIX / "watchdog-torchrun.txt").read_text(encoding="utf-8"))
    assert doc["first_error"]["rank"] is not None
    assert doc["culprit"] is None


def test_the_first_rank_to_fail_with_its_own_error_is_named(engine):
    doc = doc_of(engine, (FIX / "deepspeed-shm.txt").read_text(encoding="utf-8"))
    assert doc["culprit"] == {"rank": doc["first_error"]["rank"], "node": doc["first_error"]["node"],
                              "reason": "first-error", "evidence": [doc["first_error"]["line"]]}
    assert doc["culprit"]["rank"] is not None


def test_nothing_singles_anyone_out_without_rank_or_node(engine):
    doc = doc_of(engine, "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    assert "culprit" in doc and doc["culprit"] is None


def test_the_one_laggard_of_1024_ranks_is_named(engine):
    # generated at scale (the 1 024-rank case): every rank steps, all but rank 517 then
    # report the watchdog timeout of ALLREDUCE SeqNum 41201 in the format of watchdog-torchrun.txt
    lines = [f"[rank{r}]: step 41200 | loss 2.01\n" for r in range(1024)]
    lines += [f"[rank{r}]:[E1206 18:44:{12 + r % 40:02d}.715298746 ProcessGroupNCCL.cpp:607] [Rank {r}] Watchdog "
              "caught collective operation timeout: WorkNCCL(SeqNum=41201, OpType=ALLREDUCE, NumelIn=1048576, "
              "NumelOut=1048576, Timeout(ms)=600000) ran for 600061 milliseconds before timing out.\n"
              for r in range(1024) if r != 517]
    doc = doc_of(engine, "".join(lines))
    assert doc["culprit"] and (doc["culprit"]["rank"], doc["culprit"]["reason"]) == (517, "laggard")


def test_the_laggard_is_joined_with_its_nodes_own_faults(engine, tmp_path):
    """Item 5 of issue 10: 7 of 8 ranks time out in ALLREDUCE #4410; rank 5 never does, and its NCCL
    lines put it on gpu07, whose kernel log (a real capture) has XID 79. The culprit names rank 5 on
    gpu07 with gpu07's XID, in the JSON and in every rendering, en and zh; the healthy node says nothing."""
    import io
    import json

    from bot.render import as_dict, blocks, culprit_line, markdown, terminal
    from collectors.bundle import read_bundle, write_bundle
    from test_bundle import node

    hosts = {r: ("gpu01" if r < 4 else "gpu07") for r in range(8)}
    log = "".join(f"[rank{r}]:{hosts[r]}:{2290 + r}:{2290 + r} [{r % 4}] NCCL INFO comm 0x55d1 rank {r} nranks 8 "
                  f"cudaDev {r % 4} busId 3b000 - Init COMPLETE\n" for r in range(8))
    log += "".join(f"[rank{r}]:[E1206 18:44:1{r}.715298746 ProcessGroupNCCL.cpp:607] [Rank {r}] Watchdog caught "
                   "collective operation timeout: WorkNCCL(SeqNum=4410, OpType=ALLREDUCE, NumelIn=1048576, "
                   "NumelOut=1048576, Timeout(ms)=600000) ran for 600061 milliseconds before timing out.\n"
                   for r in range(8) if r != 5)
    nodes = {"gpu01": node("gpu01", [("df", (FIX.parent / "df" / "06.txt").read_text(), 0)]),
             "gpu07": node("gpu07", [("kernel-log", (FIX.parent / "kernel-log" / "11.txt").read_text(), 0)])}
    path = write_bundle(tmp_path / "b", nodes, job="77", logs={"job.log": log})
    with read_bundle(path) as bundle:
        diagnosis = engine.diagnose_bundle(bundle)
    for lang in ("en", "zh"):
        doc = as_dict(diagnosis, lang=lang)
        c = doc["culprit"]
        assert (c["rank"], c["node"], c["reason"]) == (5, "gpu07", "laggard")
        assert c["collective"] == {"seq": 4410, "op": "ALLREDUCE", "waiting": 7}
        assert [e["kind"] for e in c["node_evidence"]][:1] == ["xid"] and "Xid" in c["node_evidence"][0]["line"]
        assert all(e.get("kind") != "xid" or "gpu01" not in e["line"] for e in c["node_evidence"])
        said = culprit_line(doc, lang)
        assert "#4410" in said and "rank 5, gpu07" in said and "Xid (PCI:0000:06:00): 79" in said
        assert ("7 ranks wait in ALLREDUCE" if lang == "en" else "7 个 rank 停在 ALLREDUCE") in said
        buf = io.StringIO()
        terminal.render(doc, file=buf)
        assert "".join(said.split()) in "".join(buf.getvalue().split())  # Chinese wraps between characters
        assert said in markdown.render(doc)
        assert said in json.dumps(blocks.render(doc).blocks, ensure_ascii=False)
