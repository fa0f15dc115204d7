"""knowledge/catalog/inference.yaml, the distributed side of an inference server (vLLM 0.34.0,
SGLang 0.5.23, Hugging Face TGI): the /dev/shm broadcast queue that stalls behind a hung worker,
EP all-to-all rank timeouts, prefill/decode KV transfer (NIXL, Mooncake) failures and timeouts,
SGLang's forward-batch watchdog, TGI shard death, and startup GPU-memory checks.

A frame that carries the transfer's own failure reason lets that reason speak; a line that only
says a shard or worker died points at the error underneath and names no layer of its own.
"""

from __future__ import annotations

import pytest

from catalog_helpers import ranked as _top, row_ids as _ids


def _confident(engine, text: str):
    return [(c.id, c.confidence) for c in engine.diagnose_text(text).causes if c.confidence >= 0.5]


SHM_STALL = ("INFO 05-02 03:14:07 [shm_broadcast.py:466] No available shared memory broadcast block found in "
             "60 seconds. This typically happens when some processes are hanging or doing some time-consuming "
             "work (e.g. compilation, weight/kv cache quantization).")


def test_the_shm_broadcast_stall_is_a_hung_peer_not_dev_shm(shipped, engine):
    assert "vllm-shm-broadcast-no-block" in _ids(shipped, SHM_STALL)
    top = _top(engine, SHM_STALL)
    assert all(c != "shared-memory" for _, c, _ in top), top
    assert not _confident(engine, SHM_STALL)


def test_the_shm_broadcast_stall_lets_the_collective_timeout_speak(engine):
    text = SHM_STALL + "\n" + (
        "[rank1]:[E502 03:24:07.1 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE, NumelIn=4096, NumelOut=4096, Timeout(ms)=600000) "
        "ran for 600012 milliseconds before timing out.")
    top = _top(engine, text)
    assert top and top[0][1] == "communication", top


@pytest.mark.parametrize("line, row", [
    ("ValueError: Free memory on device cuda:0 (12.31/79.19 GiB) on startup is less than desired GPU memory "
     "utilization (0.9, 71.27 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.",
     "vllm-free-mem-below-utilization"),
    ("ValueError: Free memory on device cuda:1 (20.02/79.19 GiB) on startup is less than the engine's budget "
     "after excluding external process's weights (0.9, 56.83 GiB). Decrease GPU memory utilization or reduce "
     "GPU memory used by other processes.", "vllm-free-mem-below-engine-budget"),
])
def test_too_little_free_gpu_memory_at_startup_is_another_process(shipped, engine, line, row):
    assert row in _ids(shipped, line)
    top = _top(engine, line)
    assert top[0][:2] == ("gpu-memory-held-by-other-process", "gpu-memory"), top


@pytest.mark.parametrize("line, row, family", [
    ("ERROR 05-02 03:14:07 [base_worker.py:1454] NIXL transfer failure: handshake_failed | Context: "
     "{'failure_type': 'handshake_failed', 'request_id': 'cmpl-7f3a-0', 'remote_host': '10.0.3.17'}",
     "vllm-nixl-handshake-failure", "family-distributed-runtime-rpc"),
    ("ERROR 05-02 03:14:07 [base_worker.py:1454] NIXL transfer failure: transfer_failed | Context: "
     "{'failure_type': 'transfer_failed', 'request_id': 'cmpl-7f3a-0', 'remote_host': '10.0.3.17'}",
     "vllm-nixl-transfer-failure", "family-nccl-net-transport"),
    ("WARNING 05-02 03:14:07 [mooncake_connector.py:2272] Sending to 10.0.3.17:15923 failed (ret=-1) after "
     "30.0021 (96 descriptors, 25165824 bytes)", "vllm-mooncake-send-failed", "family-nccl-net-transport"),
    ("RuntimeError: Mooncake Transfer Engine initialization failed.", "mooncake-te-init-failed",
     "family-nccl-net-transport"),
    ("RuntimeError: Fault detected in EP all2all communication: one or more ranks timed out during "
     "dispatch/combine. Mask: tensor([0, 0, 1, 0], device='cuda:2', dtype=torch.int32)",
     "vllm-ep-all2all-rank-timeout", "family-collective-timeout"),
])
def test_vllm_kv_transfer_and_ep_failures_are_communication(shipped, engine, line, row, family):
    assert row in _ids(shipped, line)
    top = _top(engine, line)
    assert top[0][:2] == (family, "communication"), top


def test_a_nixl_handshake_is_not_read_as_a_data_transfer(shipped):
    line = "NIXL transfer failure: handshake_setup_failed | Context: {'failure_type': 'handshake_setup_failed'}"
    ids = _ids(shipped, line)
    assert "vllm-nixl-handshake-failure" in ids and "vllm-nixl-transfer-failure" not in ids


def test_a_nixl_compatibility_mismatch_is_a_version_mismatch(engine):
    line = ("RuntimeError: NIXL compatibility hash mismatch. Local: 9c1f0e2a, Remote: 44d7b1c3. Prefill and "
            "decode instances have incompatible configurations. This may be due to: different vLLM versions")
    assert _top(engine, line)[0][:2] == ("family-version-mismatch", "software")


@pytest.mark.parametrize("line, inner, frame, family", [
    ("Decode transfer failed for request rank=0 decode_req.req.rid='8f2c1d' decode_req.req.bootstrap_room=5123311 "
     "with exception KVTransferError(bootstrap_room=5123311): Failed to get kvcache from prefill instance, it "
     "might be dead", "sglang-pd-prefill-dead", "sglang-pd-transfer-failed-decode", "family-distributed-runtime-rpc"),
    ("Prefill transfer failed for request rank=2 req.rid='8f2c1d' req.bootstrap_room=5123311 with exception "
     "KVTransferError(bootstrap_room=5123311): Failed to send kv chunk of 5123311 to 10.0.3.18:15701",
     "sglang-pd-send-kv-chunk-failed", "sglang-pd-transfer-failed-prefill", "family-nccl-net-transport"),
    ("Prefill bootstrap failed for request rank=0 req.rid='8f2c1d' req.bootstrap_room=5123311 with exception "
     "KVTransferError(bootstrap_room=5123311): Request 5123311 timed out after 300.2s in KVPoll.Bootstrapping",
     "sglang-pd-bootstrapping-timeout", "sglang-pd-bootstrap-failed-prefill", "family-distributed-runtime-rpc"),
    ("NIXL transport error for room 5123311: NIXL transfer encountered ERR room=5123311",
     "sglang-nixl-transfer-err", "sglang-nixl-transport-error", "family-nccl-net-transport"),
])
def test_a_pd_transfer_frame_lets_the_failure_reason_speak(shipped, engine, line, inner, frame, family):
    ids = _ids(shipped, line)
    assert inner in ids and frame not in ids, ids
    top = _top(engine, line)
    assert top[0][:2] == (family, "communication"), top


def test_a_pd_transfer_frame_around_an_unknown_reason_still_says_communication(shipped, engine):
    line = ("Decode transfer failed for request rank=0 decode_req.req.rid='8f2c1d' "
            "decode_req.req.bootstrap_room=5123311 with exception KVTransferError(bootstrap_room=5123311): "
            "KV transfer failed")
    assert "sglang-pd-transfer-failed-decode" in _ids(shipped, line)
    assert _top(engine, line)[0][:2] == ("family-nccl-net-transport", "communication")


WATCHDOG = "[2025-05-02 03:14:07 TP0] Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)"


def test_sglang_watchdog_is_a_stuck_collective(engine):
    assert _top(engine, WATCHDOG)[0][:2] == ("family-collective-timeout", "communication")


def test_sglang_watchdog_yields_to_a_gpu_that_fell_off_the_bus(engine):
    text = WATCHDOG + "\nNVRM: Xid (PCI:0000:1b:00): 79, pid=1234, name=python, GPU has fallen off the bus."
    assert _top(engine, text)[0][1] == "gpu-hardware"


@pytest.mark.parametrize("line", [
    "2025-05-02T03:14:07.123456Z ERROR text_generation_launcher: Shard 3 failed to start",
    "2025-05-02T03:14:07.123456Z ERROR text_generation_launcher: Shard 1 crashed",
    "2025-05-02T03:14:07.123456Z ERROR shard-manager: text_generation_launcher: Shard process was signaled to "
    "shutdown with signal 6 rank=2",
    "Subprocess scheduler_3 (pid=48211) crashed with exit code -6. Triggering SIGQUIT for cleanup...",
    "RuntimeError: Rank 2 scheduler died during initialization (exit code: 1). If exit code is -9 (SIGKILL), "
    "a common cause is the OS OOM killer. Run `dmesg -T | grep -i oom` to check.",
])
def test_shard_and_scheduler_death_alone_names_no_layer(engine, line):
    assert not _confident(engine, line)


def test_tgi_shard_death_lets_the_shard_s_own_error_speak(engine):
    text = ("ERROR text_generation_launcher: Shard 1 crashed\n"
            "ERROR text_generation_launcher: Shard complete standard error output:\n"
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
            "of 79.15 GiB of which 1.02 GiB is free.")
    top = _top(engine, text)
    assert top[0][1] == "gpu-memory", top
    assert "family-node-failure" not in [c for c, _, _ in top]


def test_tgi_warmup_oom_in_the_router_s_debug_print_is_gpu_memory(engine):
    line = ('Error: Backend(Warmup(Generation("Not enough memory to handle 4096 prefill tokens. You need to '
            'decrease `--max-batch-prefill-tokens`")))')
    assert _top(engine, line)[0][1] == "gpu-memory"
