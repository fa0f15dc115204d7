"""The message catalogs (knowledge/catalog/): every row loads, is specific, and on its own is
diagnosed in its category; the family backstops speak only when nothing specific does."""

from __future__ import annotations

from pathlib import Path

import pytest

from collectors.findings import LogLine
from knowledge import catalog as cat
from knowledge.loader import load_dir

HERE = Path(__file__).resolve().parent
UNRELATED = HERE / "fixtures" / "unrelated"


def test_every_catalog_row_loads_and_points_at_real_entries(shipped):
    entries, _ = load_dir(examples=False)
    problems = list(shipped.errors) + cat.check_against_entries(shipped, entries)
    assert not problems, "\n".join(map(str, problems[:30]))


def test_no_row_fires_on_benign_or_unrelated_lines(shipped):
    problems = cat.check_benign(shipped, HERE / "fixtures" / "benign") + cat.check_benign(shipped, UNRELATED)
    assert not problems, "\n".join(map(str, problems[:30]))


def test_catalogs_cover_every_category_with_provenance(shipped):
    assert len(shipped) >= 1000, f"only {len(shipped)} catalogued messages"
    by_cat = {}
    for row in shipped.rows:
        by_cat.setdefault(row.category, 0)
        by_cat[row.category] += 1
        assert row.where and row.library and row.version, row.id
    assert set(by_cat) == set(cat.CATEGORIES), by_cat
    assert min(by_cat.values()) >= 20, by_cat


def test_each_message_alone_is_diagnosed_in_its_category(engine, shipped):
    from knowledge.match import RETRIES_STUCK

    wrong = []
    for row in shipped.rows:
        if row.pointer:
            continue  # "see the error above" names no layer: test_a_pointer_row_names_no_layer
        if row.transient:
            # a retry notice: once is what a healthy run prints when the retry succeeds; again and again
            # is the call stuck, and the message speaks for its category
            once = engine.diagnose_text(row.example)
            if [c for c in once.causes if c.confidence >= 0.5]:
                wrong.append(f"{row.id}: a single retry notice made a confident cause")
            d = engine.diagnose_text("\n".join([row.example] * RETRIES_STUCK))
        else:
            d = engine.diagnose_text(row.example)
        got = d.causes[0].category if d.causes else None
        if got != row.category:
            wrong.append(f"{row.path.rsplit('/', 1)[-1]} {row.id}: want {row.category}, got {got} "
                         f"({d.causes[0].id if d.causes else 'no cause'}) for {row.example[:90]!r}")
    assert not wrong, f"{len(wrong)} of {len(shipped)} rows:\n" + "\n".join(wrong[:40])


@pytest.mark.parametrize("path", sorted(UNRELATED.glob("*.log")), ids=lambda p: p.name)
def test_unrelated_pastes_get_no_confident_cause(engine, path):
    d = engine.diagnose_paths([str(path)])
    assert not [c for c in d.causes if c.confidence >= 0.5], [(c.id, c.confidence) for c in d.causes]


def test_a_family_backstop_yields_to_a_specific_cause_of_its_category(engine):
    # NET/IB completion error: the NCCL network family and the specific IB entry both hear it
    line = ("NCCL WARN NET/IB : Got completion from peer 10.0.0.7<33412> with status=12 opcode=0 len=0 "
            "vendor err 129 (Send)")
    d = engine.diagnose_text(line)
    ids = [c.id for c in d.causes]
    assert ids[0] in ("ib-completion-error-qp-fault", "ib-transport-retry-exceeded"), ids
    assert "family-nccl-net-transport" not in ids, ids  # halved below the bar, not repeated
    # a message no specific entry knows: the family speaks, with its category
    d = engine.diagnose_text("NET/IB : Unable to open device mlx5_4")
    assert d.causes and d.causes[0].entry.backstop and d.causes[0].category == "communication", \
        [(c.id, c.confidence) for c in d.causes]


def test_an_ambiguous_message_lists_what_an_expert_checks_next(engine):
    # the coordination service's own text admits a dead task, a preemption or a crash: the answer
    # names the node-failure family and, as alternatives, the families that family's check_next names
    line = ("E external/xla/xla/tsl/distributed_runtime/coordination/coordination_service.cc:1236] "
            "/job:jax_worker/replica:0/task:2 has been set to ERROR in coordination service: UNAVAILABLE: "
            "Task /job:jax_worker/replica:0/task:2 heartbeat timeout. This indicates that the remote task "
            "has failed, got preempted, or crashed unexpectedly.")
    d = engine.diagnose_text(line)
    top, *alts = d.causes
    assert top.id == "family-node-failure" and not top.alternative
    want = top.entry.check_next
    assert [a.id for a in alts] == want[:2] and all(a.alternative and a.confidence < 0.5 for a in alts)
    assert len({c.category for c in d.causes}) == len(d.causes)
    # a specific, unambiguous answer with no check_next of its own or of a family gets none
    d = engine.diagnose_text("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.35 GiB "
                             "total capacity; 76.10 GiB already allocated; 1.02 GiB free; 77.20 GiB reserved "
                             "in total by PyTorch)")
    assert d.causes and d.causes[0].category == "gpu-memory" and not engine.matcher.check_next(d.causes[0].entry)
    assert not any(c.alternative and "checked next" in " ".join(c.explain) for c in d.causes)
    # one without its own check_next takes its family's: an illegal address is a code bug first, a GPU second
    d = engine.diagnose_text("RuntimeError: CUDA error: an illegal memory access was encountered")
    assert [c.category for c in d.causes][:2] == ["software", "gpu-hardware"] and d.causes[1].alternative


def test_a_wrapper_row_yields_to_the_message_it_wraps(shipped, engine):
    # torch's "NCCL error in: <file>:<line>, <NCCL's error text>, NCCL version <v>" frames NCCL's own
    # message; the frame says only "NCCL failed", the message inside says how
    line = ("RuntimeError: NCCL error in: /pytorch/torch/lib/c10d/ProcessGroupNCCL.cpp:825, "
            "unhandled system error, NCCL version 2.7.8")
    ids = [row.id for row, _ in shipped.match_line(line)]
    assert "torch-nccl-error-in" not in ids and any(i.startswith("nccl-") for i in ids), ids
    d = engine.diagnose_text(line)
    assert d.causes[0].category == "communication", [(c.id, c.confidence) for c in d.causes]
    # the frame alone (its placeholder holds nothing catalogued) still speaks
    alone = "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:121, " \
            "some text no catalog knows, NCCL version 2.18.1"
    assert "torch-nccl-error-in" in [row.id for row, _ in shipped.match_line(alone)]


def test_check_next_must_name_a_family_of_another_category(tmp_path):
    import shutil

    from knowledge.loader import entries_dir

    root = tmp_path / "entries"
    shutil.copytree(entries_dir(), root)
    path = root / "scheduler" / "family-node-failure.yaml"
    text = path.read_text(encoding="utf-8")
    start = text.index("check_next:")
    end = text.index("\n", start)
    path.write_text(text[:start] + "check_next: [family-scheduler-termination, slurm-time-limit, no-such-family]"
                    + text[end:], encoding="utf-8")
    _, errors = load_dir(root, examples=False)
    said = "\n".join(str(e) for e in errors)
    assert "'family-scheduler-termination' is in the same category" in said
    assert "'slurm-time-limit' is not a backstop entry" in said
    assert "'no-such-family' is not a backstop entry" in said
    assert all("family-node-failure.yaml" in str(e) for e in errors)

    pat, names = cat.text_to_pattern("NET/IB : Got completion from peer %s with status=%d opcode=%d len=%u "
                                     "vendor err %d (%s)")
    assert names == ["p1", "p2", "p3", "p4", "p5", "p6"]
    c = cat.Catalog([cat.Row(id="x", source="t", category="communication", family="f", pattern=pat, names=names,
                             anchor="got completion from peer")])
    hits = c.match_line("NET/IB : Got completion from peer 10.0.0.7<33412> with status=12 opcode=0 len=0 "
                        "vendor err 129 (Send)")
    assert hits and hits[0][1]["p2"] == "12" and hits[0][1]["p5"] == "129"
    pat, names = cat.text_to_pattern("Timed out waiting {timeout}ms for the store {:.2f} %% done {{x}}")
    assert names == ["timeout", "p2"]
    assert cat.fill("Timed out waiting {timeout}ms for the store {:.2f} %% done {{x}}") == \
        "Timed out waiting valuems for the store 1.50 % done {x}"
    assert cat.literal_runs("Cuda failure '%s'", None) == ["cuda failure '", "'"]
    # glibc's %m (strerror(errno), no argument), as Slurm and NCCL print it: a placeholder, not text
    pat, names = cat.text_to_pattern("execve(): bad interpreter(%s): %m")
    assert names == ["p1"] and "%m" not in pat
    assert cat.fill("execve(): %s: %m") == "execve(): value: Input/output error"


def test_a_catalog_finding_carries_the_placeholders(shipped):
    rows = [r for r in shipped.rows if r.finding and r.finding.get("kind") == "xid"]
    assert rows, "no catalog row yields an xid finding"
    row = rows[0]
    line = LogLine(text=row.example, line_no=1)
    found = shipped.findings(shipped.scan([line]))
    assert any(f.kind == "xid" and isinstance(f.attrs.get("code"), int) for f in found), found


def test_bad_rows_are_reported_with_file_and_line(tmp_path):
    (tmp_path / "demo.yaml").write_text(
        "source: demo\nlibrary: Demo\nversion: '1'\nread_from: here\nurl: https://example.org\n"
        "messages:\n"
        "  - {id: too-short, text: 'Error %d', where: a.c, category: software, family: family-x}\n"
        "  - {id: Bad_Id, text: 'something quite specific failed', where: a.c, category: software, family: f}\n"
        "  - {id: bad-cat, text: 'something quite specific failed', where: a.c, category: nope, family: f}\n"
        "  - {id: bad-example, text: 'Got completion from %s', where: a.c, category: software, family: f,\n"
        "     example: 'nothing like it'}\n",
        encoding="utf-8")
    c = cat.load(tmp_path)
    text = "\n".join(map(str, c.errors))
    assert "demo.yaml:7: too-short: too generic" in text
    assert "demo.yaml:8" in text and "lowercase-hyphenated" in text
    assert "bad-cat: category 'nope'" in text
    assert "bad-example: the example does not match" in text
    assert len(c) == 0


def test_the_specific_message_wins_over_the_generic_one_it_contains(shipped):
    # "Failed to initialize NVML: %s" (any NVML failure) contains the driver/library mismatch
    ids = [r.id for r, _ in shipped.match_line("Failed to initialize NVML: Driver/library version mismatch")]
    cats = {shipped.by_id[i].category for i in ids}
    assert cats == {"software"}, ids
    # a match inside another row's placeholder is the more specific reading: both stay
    hits = shipped.match_line("RuntimeError: CUDA error: CUSPARSE_STATUS_ALLOC_FAILED when calling "
                              "`cusparseCreate(handle)`")
    assert "gpu-memory" in {r.category for r, _ in hits}, [r.id for r, _ in hits]


@pytest.mark.parametrize("line, row, category", [
    # NCCL 2.18-2.26 print the NVLS multicast calls' failures as a bare "Cuda failure" with the
    # source file: the NVLS transport, whose later message names the Fabric Manager and NVSwitches
    ("h100-03:7712:7790 [4] transport/nvls.cc:244 NCCL WARN Cuda failure 801 'operation not supported'",
     "nccl-nvls-cuda-failure", "gpu-hardware"),
    # out of memory there is the NVLS buffers' size: the out-of-memory row reads it
    ("h100-03:7712:7790 [4] transport/nvls.cc:149 NCCL WARN Cuda failure 2 'out of memory'",
     "nccl-cuda-failure-out-of-memory", "gpu-memory"),
    # the same failure elsewhere says nothing about NVLS
    ("h100-03:7712:7790 [4] transport/p2p.cc:275 NCCL WARN Cuda failure 1 'invalid argument'",
     "nccl-cuda-failure", "software"),
])
def test_a_cuda_failure_is_read_by_the_nccl_source_file_that_raised_it(shipped, line, row, category):
    ids = [r.id for r, _ in shipped.match_line(line)]
    assert ids == [row] and shipped.by_id[row].category == category, ids


def test_a_line_cut_short_must_agree_with_the_message_as_far_as_it_goes():
    """A console or a paste may cut a message short, and its opening still names it; but the rest of
    the line must agree: mlx5's boot-time "Cable plugged" is not "Cable unplugged" cut short."""
    from knowledge.catalog import load

    cat = load()
    ids = lambda line: {row.id for row, _ in cat.match_line(line)}  # noqa: E731
    assert "linux-mlx5-cable-unplugged" not in ids("mlx5_core 0000:3b:00.0: Port module event: module 0, Cable plugged")
    assert "linux-mlx5-cable-unplugged" in ids("mlx5_core 0000:3b:00.0: Port module event: module 0, Cable unplu")
    assert "linux-mlx5-cable-unplugged" in ids("mlx5_core 0000:3b:00.0: Port module event: module 0, Cable unplugged")


def test_a_pointer_row_names_no_layer(shipped, engine):
    # vLLM's "WorkerProc failed to start." is logger.exception() around whatever the worker raised:
    # alone it names no layer; beside the worker's own error that error leads, not a node failure
    pointers = [r for r in shipped.rows if r.pointer]
    assert len(pointers) >= 10
    for row in pointers:
        if any(hit.id != row.id for hit, _ in shipped.match_line(row.example)):
            continue  # the example wraps another catalogued message, which speaks for itself
        d = engine.diagnose_text(row.example)
        assert not [c for c in d.causes if c.confidence >= 0.5], (row.id, [(c.id, c.confidence) for c in d.causes])
    d = engine.diagnose_text("ERROR 10-13 09:06:25 [multiproc_executor.py:597] WorkerProc failed to start.\n"
                             "ERROR 10-13 09:06:25 [multiproc_executor.py:597] Traceback (most recent call last):\n"
                             "ERROR 10-13 09:06:25 [multiproc_executor.py:597] torch.OutOfMemoryError: CUDA out of "
                             "memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which "
                             "1.02 GiB is free.\n")
    assert d.causes and d.causes[0].category == "gpu-memory", [(c.id, c.confidence) for c in d.causes]
    assert "family-node-failure" not in [c.id for c in d.causes]


def test_a_pointer_flag_must_be_a_boolean(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text("source: x\nlibrary: x\nversion: '1'\nread_from: x\nurl: x\nmessages:\n"
                    "  - {id: p, text: 'the engine failed, see above', where: a.c, category: software,"
                    " family: family-version-mismatch, pointer: 'yes'}\n")
    rows, errors = cat.load_file(path)
    assert not rows and any("pointer must be true or false" in str(e) for e in errors), errors


def test_horovod_shut_down_is_an_echo_of_another_rank_s_error(engine):
    # the message's own first reading: another rank raised; that rank's error leads
    shut = ("[1,1]<stderr>:RuntimeError: Horovod has been shut down. This was caused by an exception on one of "
            "the ranks or an attempt to allreduce, allgather or broadcast a tensor after one of the ranks finished "
            "execution. If the shutdown was caused by an exception, you should see the exception in the log before "
            "the first shutdown message.\n")
    oom = ("[1,0]<stderr>:RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.78 GiB total "
           "capacity; 13.10 GiB already allocated; 1.01 GiB free; 13.50 GiB reserved in total by PyTorch)\n")
    d = engine.diagnose_text(oom + shut)
    assert d.causes[0].category == "gpu-memory", [(c.id, c.confidence) for c in d.causes]
    # alone, the second reading is what is left: a rank left the loop early
    d = engine.diagnose_text(shut)
    assert d.causes and d.causes[0].id == "horovod-shut-down-rank-left", [(c.id, c.confidence) for c in d.causes]


def test_the_parsed_catalog_cache_keeps_only_the_newest_few(tmp_path, monkeypatch):
    # one cache file per catalog version: older ones (an upgrade, an edited catalog, the JSON caches
    # of earlier releases) are pruned
    import os
    import time

    for i in range(cat.CACHE_KEEP + 3):
        stale = tmp_path / f"catalog-{i:016x}.{'json' if i % 2 else 'marshal'}"
        stale.write_text("{}")
        os.utime(stale, (time.time() - 1000 + i, time.time() - 1000 + i))
    monkeypatch.setattr(cat, "_CACHE", {})
    rows = cat.shipped(tmp_path)
    assert len(rows) >= 1000
    left = [*tmp_path.glob("catalog-*.marshal"), *tmp_path.glob("catalog-*.json")]
    assert len(left) == cat.CACHE_KEEP and any(p.stat().st_size > 1000 for p in left)
    monkeypatch.setattr(cat, "_CACHE", {})
    assert len(cat.shipped(tmp_path)) == len(rows)  # read back from the cache it just wrote


def test_a_damaged_or_foreign_catalog_cache_is_rebuilt(tmp_path, monkeypatch):
    """A cache cut short, of another layout, or not marshal data at all: the rows come from the YAML
    again and the cache is written anew."""
    import marshal

    monkeypatch.setattr(cat, "_CACHE", {})
    fresh = cat.shipped(tmp_path)
    (path,) = tmp_path.glob("catalog-*.marshal")
    good = path.read_bytes()
    for bad in (good[: len(good) // 2], b"not marshal", marshal.dumps({"version": "0", "fields": [], "rows": []}),
                marshal.dumps([1, 2, 3])):
        path.write_bytes(bad)
        monkeypatch.setattr(cat, "_CACHE", {})
        again = cat.shipped(tmp_path)
        assert [r.id for r in again.rows] == [r.id for r in fresh.rows]
        assert path.read_bytes() == good


def test_the_prefilter_literal_is_worked_out_once_and_survives_the_cache(tmp_path, monkeypatch):
    from knowledge.catalog import _prefilter_anchor

    fresh = cat.load(validate=False)
    assert all(row.prefilter == _prefilter_anchor(row) for row in fresh.rows)
    monkeypatch.setattr(cat, "_CACHE", {})
    cat.shipped(tmp_path)  # writes the parsed-catalog cache
    monkeypatch.setattr(cat, "_CACHE", {})
    cached = cat.shipped(tmp_path)  # reads it back
    assert cached.anchors() == fresh.anchors() and all(row.prefilter for row in cached.rows)


def test_the_cut_short_heads_are_worked_out_once_and_survive_the_cache(tmp_path, monkeypatch):
    """A new process reads each row's opening literal (the head that recognises a message cut short)
    from the parsed-catalog cache instead of parsing 4 700 format strings again; the catalog built
    from the cache indexes the same heads as one built from the YAML."""
    from knowledge.catalog import _head

    fresh = cat.load(validate=False)
    assert all(row.head == (_head(row) or "") for row in fresh.rows)
    assert sum(1 for row in fresh.rows if row.head) > 100
    monkeypatch.setattr(cat, "_CACHE", {})
    cat.shipped(tmp_path)
    monkeypatch.setattr(cat, "_CACHE", {})
    cached = cat.shipped(tmp_path)
    assert [row.head for row in cached.rows] == [row.head for row in fresh.rows]
    assert cached._by_head == fresh._by_head and cached._by_head


@pytest.mark.parametrize("line", [
    # warnings a healthy run prints, filled from the programs' own format strings (the catalog rows'
    # `where` name them): none of them ends a job
    "[W socket.cpp:697] [c10d] The client socket cannot be initialized to connect to [localhost]:29500 "
    "(errno: 97 - Address family not supported by protocol).",
    "WARNING 05-01 10:20:11 [custom_all_reduce.py:137] Custom allreduce is disabled because your platform lacks GPU "
    "P2P capability or P2P test failed. To silence this warning, specify disable_custom_all_reduce=True explicitly.",
    "INFO 05-01 10:20:11 [custom_all_reduce.py:82] Custom allreduce is disabled because it's not supported on more "
    "than two PCIe-only GPUs. To silence this warning, specify disable_custom_all_reduce=True explicitly.",
    "[2024-05-01 10:20:11,123] [WARNING] [stage3.py:2146:step] 4 pytorch allocator cache flushes since last step. "
    "this happens when there is high memory pressure and is detrimental to performance.",
    "node1:1234:1290 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.",
    "[rank0]:[W reducer.cpp:1389] Warning: find_unused_parameters=True was specified in DDP constructor, but did "
    "not find any unused parameters in the forward pass.",
])
def test_a_warning_a_healthy_run_prints_is_no_cause(engine, line):
    causes = engine.diagnose_text(line).causes
    assert not [c for c in causes if c.confidence >= 0.5], [(c.id, c.confidence) for c in causes]


def test_a_message_broken_across_lines_is_still_that_message(shipped):
    # NCCL's NVLS bind failure as a console broke it: the CUDA error text inside its placeholder,
    # the explanation ("This is usually caused by ... Fabric Manager") on the next line
    line = ("Failed to bind NVLink SHARP (NVLS) Multicast memory of size 2097152 : CUDA error 401 "
            "'the operation cannot be performed in the present state'. ")
    ids = {row.id for row, _ in shipped.match_line(line)}
    assert "nccl-failed-bind-nvlink-sharp-nvls-multicast-memory-2" in ids, ids
    # a long line that only shares the opening is not the message
    other = ("Failed to bind NVLink SHARP (NVLS) Multicast memory of size 2097152 : because the "
             "allocator was already torn down while the communicator was being destroyed at exit")
    assert not {i for i in (row.id for row, _ in shipped.match_line(other)) if "nvls-multicast-memory" in i}
