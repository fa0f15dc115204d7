"""PyTorch c10d / elastic / data-loading messages added from the torch 2.14.1, 2.4.1 and 2.1.2 wheels:
older watchdog wordings still name the collective timeout, DDP reducer errors are the program's,
the signal a worker died of keeps its meaning, and a line that only points elsewhere names no layer."""

from __future__ import annotations

import pytest

from catalog_helpers import first_cause as _top


@pytest.fixture(scope="module")
def rows(shipped):
    return shipped


@pytest.mark.parametrize("line,category", [
    # torch 2.2 - 2.4 heartbeat monitor and dump-signal wordings
    ("[rank2]:[E ProcessGroupNCCL.cpp:1360] [PG 0 Rank 2] Received a global timeout from another rank "
     "and will start to dump the debug info.", "communication"),
    ("[rank1]:[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank 1] Received a dump signal from this local rank and "
     "will start to dump the debug info. Last enqueued NCCL work: 12, last completed NCCL work: 11.",
     "communication"),
    ("RuntimeError: [Rank 1] Work WorkNCCL(SeqNum=40, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
     "Timeout(ms)=1800000) timed out in blocking wait (NCCL_BLOCKING_WAIT=1).", "communication"),
    ("[rank3]:[E ProcessGroupNCCL.cpp:1321] [PG ID 1 PG GUID 1 Rank 3] Future for ProcessGroup abort timed "
     "out after 600000 ms", "communication"),
    # the DDP reducer: a matter of the model and its DDP settings
    ("RuntimeError: Expected to have finished reduction in the prior iteration before starting a new one. "
     "This error indicates that your module has parameters that were not used in producing loss.",
     "software"),
    ("RuntimeError: DDP expects same model across all ranks, but Rank 1 has 219 params, while rank 0 has "
     "inconsistent 218 params.", "software"),
    # how a worker died keeps its meaning: SIGSEGV a crash, SIGTERM the scheduler
    ("traceback : Signal 11 (SIGSEGV) received by PID 31533", "software"),
    ("RuntimeError: DataLoader worker (pid 1234) is killed by signal: Terminated. ", "scheduler"),
    ("torch.multiprocessing.spawn.ProcessExitedException: process 3 terminated with signal SIGSEGV",
     "software"),
    # a DCP save whose own error is a full disk speaks as storage
    ("Checkpoint save failed for checkpoint_id=step_1000: [Errno 28] No space left on device",
     "checkpoint-storage"),
])
def test_added_pytorch_messages_name_their_layer(engine, line, category):
    top = _top(engine, line)
    assert top is not None and top.category == category, (top.id if top else None, line)


@pytest.mark.parametrize("line", [
    "traceback : Signal 6 (SIGABRT) received by PID 31533",
    "torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with exit code 1",
    "RuntimeError: Pin memory thread exited unexpectedly",
    "torch.distributed.checkpoint.api.CheckpointException: CheckpointException ranks:dict_keys([0, 3])",
])
def test_pointer_lines_alone_give_no_confident_cause(engine, rows, line):
    assert any(r.pointer for r, _ in rows.match_line(line)), line
    top = _top(engine, line)
    assert top is None or top.confidence < 0.5, (top.id, top.confidence)


def test_bus_error_and_kill_keep_their_meaning_beside_the_new_signal_rows(engine):
    # the shared-memory / host-memory reading of a killed worker is unchanged by the added signals
    top = _top(engine, "RuntimeError: DataLoader worker (pid 46794) is killed by signal: Bus error. ")
    assert top.category == "shared-memory"
    top = _top(engine, "RuntimeError: DataLoader worker (pid 4070) is killed by signal: Killed. ")
    assert top.category == "host-memory"


def test_the_nccl_abort_before_a_sigabrt_speaks_for_it(engine):
    paste = "\n".join([
        "[rank0]:[E ProcessGroupNCCL.cpp:577] [Rank 0] Timeout at NCCL work: 2791, last enqueued NCCL work: "
        "2791, last completed NCCL work: 2790.",
        "[rank0]:[E ProcessGroupNCCL.cpp:1595] [PG 0 Rank 0] ProcessGroupNCCL preparing to dump debug info.",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
        "  traceback : Signal 6 (SIGABRT) received by PID 31533",
    ])
    top = _top(engine, paste)
    assert top is not None and top.category == "communication", top and top.id
