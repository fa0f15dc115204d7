"""knowledge/catalog/python.yaml: CPython's messages read in the context a training log gives them.

The training-log parser already reads the storage errnos (ENOSPC, EDQUOT, ESTALE, EIO, EROFS, ENOMEM,
EMFILE) with context rules of its own; the catalog leaves them out so that an ENOSPC under a SemLock
frame or a /dev/shm path stays a shared-memory failure. Messages that only say a process or a peer
went away are pointers and must not name a layer on their own.
"""

from __future__ import annotations

import pytest

from catalog_helpers import ranked as _top


def _python_ids(shipped, line: str) -> set[str]:
    return {row.id for row, _ in shipped.match_line(line) if row.path.endswith("python.yaml")}


SEMLOCK_ENOSPC = """Traceback (most recent call last):
  File "train.py", line 88, in <module>
    main()
  File "/opt/conda/lib/python3.10/multiprocessing/synchronize.py", line 57, in __init__
    sl = self._semlock = _multiprocessing.SemLock(
OSError: [Errno 28] No space left on device
"""


@pytest.mark.parametrize("line", [
    "OSError: [Errno 28] No space left on device",
    "OSError: [Errno 122] Disk quota exceeded: '/home/user/ckpt/optimizer.pt'",
    "OSError: [Errno 116] Stale file handle",
    "OSError: [Errno 5] Input/output error",
    "OSError: [Errno 30] Read-only file system: '/checkpoints/run7/latest'",
    "OSError: [Errno 12] Cannot allocate memory",
    "OSError: [Errno 24] Too many open files",
])
def test_the_parser_s_own_errnos_get_no_python_row(shipped, line):
    assert not _python_ids(shipped, line)


def test_enospc_keeps_its_shared_memory_reading(engine):
    assert _top(engine, SEMLOCK_ENOSPC)[0][1] == "shared-memory"
    assert _top(engine, "OSError: [Errno 28] No space left on device: '/dev/shm/psm_4f2a1c'")[0][1] == "shared-memory"
    assert _top(engine, "OSError: [Errno 28] No space left on device: '/ckpt/step_2000/model.pt'")[0][1] == \
        "checkpoint-storage"


def test_an_empty_checkpoint_load_is_a_truncated_checkpoint(engine):
    text = """Traceback (most recent call last):
  File "train.py", line 210, in <module>
    state = torch.load(args.resume, map_location="cpu")
  File "/opt/conda/lib/python3.10/site-packages/torch/serialization.py", line 1258, in _legacy_load
    magic_number = pickle_module.load(f, **pickle_load_args)
EOFError: Ran out of input
"""
    causes = _top(engine, text)
    assert causes[0][0] == "ckpt-corrupt-truncated", causes


def test_a_broken_process_pool_names_no_layer_unless_the_exit_code_does(engine):
    pool = ("concurrent.futures.process.BrokenProcessPool: A process in the process pool was terminated "
            "abruptly while the future was running or pending.\n")
    assert not [c for c in _top(engine, pool) if c[2] >= 0.5]
    with_code = "'''\nProcess 41877 terminated abruptly with exit code -9\n'''\n" + pool
    assert _top(engine, with_code)[0][1] == "host-memory"


def test_connection_refused_from_dataloader_fd_sharing_is_not_called_a_network_fault(engine):
    text = """Traceback (most recent call last):
  File "/opt/conda/lib/python3.10/site-packages/torch/multiprocessing/reductions.py", line 307, in rebuild_storage_fd
    fd = df.detach()
  File "/opt/conda/lib/python3.10/multiprocessing/resource_sharer.py", line 86, in get_connection
    c = Client(address, authkey=process.current_process().authkey)
  File "/opt/conda/lib/python3.10/multiprocessing/connection.py", line 630, in SocketClient
    s.connect(address)
ConnectionRefusedError: [Errno 111] Connection refused
"""
    assert not [c for c in _top(engine, text) if c[1] == "communication" and c[2] >= 0.5]


def test_a_missing_module_is_a_broken_environment_but_a_quoted_one_is_not(engine):
    text = ("[rank3]: Traceback (most recent call last):\n"
            "[rank3]:   File \"/workspace/train.py\", line 12, in <module>\n"
            "[rank3]:     from flash_attn import flash_attn_func\n"
            "[rank3]: ModuleNotFoundError: No module named 'flash_attn'\n")
    assert _top(engine, text)[0][0] == "family-version-mismatch"
    assert not _top(engine, "WARNING: apex not found: ModuleNotFoundError: No module named 'apex'")


def test_a_host_unreachable_peer_is_communication(engine):
    assert _top(engine, "OSError: [Errno 113] No route to host")[0][1] == "communication"
    assert _top(engine, "OSError: [Errno 98] Address already in use")[0][1] == "communication"
