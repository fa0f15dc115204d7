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
    assert doc_of(engine, text)["culprit"] == {"rank": 0, "node": None, "reason": "laggard", "evidence": [s.line]}
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
