"""Framework messages added from DeepSpeed 0.19.8 (launcher, ZeRO, NVMe offload, op builder,
zero_to_fp32; elasticity and cpu_adam from 0.14.4), PyTorch Lightning 2.6.6 (cluster environments,
strategies, checkpoint connector), accelerate 1.16.0 and transformers 5.25.0: each is read as its own
text says, and a warning among them does not outvote the error that killed the job."""

from __future__ import annotations

import pytest

from catalog_helpers import first_cause as _top


@pytest.fixture(scope="module")
def rows(shipped):
    return shipped


@pytest.mark.parametrize("line,category,family", [
    # the DeepSpeed launcher and engine refusing how the job was started
    ("ValueError: Hostfile is empty or not formatted correctly, unable to proceed with launching.",
     "software", "family-launch-config"),
    ("RuntimeError: launcher 'pdsh' not installed.", "software", "family-launch-config"),
    ("AssertionError: Check batch related parameters. train_batch_size is not equal to micro_batch_per_gpu * "
     "gradient_acc_step * world_size 256 != 4 * 8 * 4", "software", "family-launch-config"),
    ("AssertionError: The parameter 187 has already been reduced.             Gradient computed twice for this "
     "partition.             Multiple gradient reductions are currently not supported", "software",
     "family-launch-config"),
    # op builds that do not fit the machine
    ("RuntimeError: Unable to JIT load the cpu_adam op due to ninja not being installed.", "software",
     "family-version-mismatch"),
    ("AttributeError: 'DeepSpeedCPUAdam' object has no attribute 'ds_opt_adam'", "software",
     "family-version-mismatch"),
    ("ValueError: Type bf16 is not supported on your device.", "software", "family-version-mismatch"),
    # NVMe offload swap files and checkpoint directories
    ("AssertionError: Path for param id 1187 does not exist", "checkpoint-storage", "family-storage-io"),
    ("deepspeed_aio:   fstat for read failed on /local_nvme/zero_stage_3/optimizer/rank3/112_exp_avg.tensor.swp "
     "error = 2", "checkpoint-storage", "family-storage-io"),
    ("ValueError: Expected 64 of '*_optim_states.pt' under '/mnt/ckpt/global_step2000' but found 61 files. "
     "Possibly due to an overwrite of an old checkpoint, or a checkpoint didn't get saved by one or more "
     "processes.", "checkpoint-storage", "family-storage-io"),
    # a fixed offload buffer pool is a setting, not host RAM
    ("AssertionError: Not enough buffers 3 for swapping 5", "software", "family-launch-config"),
    # Lightning's cluster-environment checks
    ("ValueError: You set `devices=8` in Lightning, but the number of tasks per node configured in SLURM "
     "`--ntasks-per-node=1` does not match. HINT: Set `devices=1`.", "software", "family-launch-config"),
    ("ValueError: Cannot determine world size. Environment variable `JSM_NAMESPACE_SIZE` not found. Make sure "
     "you run your executable with `jsrun`.", "software", "family-launch-config"),
    ("UserWarning: MASTER_ADDR environment variable is not defined. Set as localhost", "communication",
     "family-c10d-store-rendezvous"),
    ("lightning.fabric.utilities.exceptions.MisconfigurationException: GPUs requested but none are available.",
     "software", "family-cuda-runtime-error"),
    ("KeyError: 'Trying to restore optimizer state but checkpoint contains only the model. This is probably "
     "due to `ModelCheckpoint.save_weights_only` being set to `True`.'", "checkpoint-storage",
     "family-storage-io"),
    # accelerate and the Trainer
    ("NotImplementedError: Using RTX 4000 series doesn't support faster communication broadband via P2P or IB. "
     "Please set `NCCL_P2P_DISABLE=\"1\"` and `NCCL_IB_DISABLE=\"1\" or use `accelerate launch` which will do "
     "this automatically.", "communication", "family-gpu-p2p-topology"),
    ("ValueError: Tried to find /scratch/run3/checkpoints/checkpoint_12 but folder does not exist",
     "checkpoint-storage", "family-storage-io"),
    ("ValueError: bf16 mixed precision requires PyTorch >= 1.10 and a supported device.", "software",
     "family-version-mismatch"),
    ("ImportError: Using the `Trainer` with `PyTorch` requires `accelerate>=1.1.0`: Please run `pip install "
     "transformers[torch]` or `pip install 'accelerate>=1.1.0'`", "software", "family-version-mismatch"),
])
def test_added_framework_messages_name_their_layer(engine, line, category, family):
    top = _top(engine, line)
    assert top is not None and top.category == category, (top.id if top else None, line)
    assert top.id == family or not top.entry.backstop, (top.id, line)


def test_added_rows_carry_the_version_they_were_read_from(rows):
    added = [r for r in rows.rows if r.path.endswith(("frameworks.yaml", "hf.yaml"))
             and r.id.startswith(("fw-deepspeed-", "fw-lightning-", "hf-acc-", "hf-tf-"))]
    assert len(added) >= 130, len(added)
    for r in added:
        assert r.where.split()[0] in ("deepspeed", "lightning", "accelerate", "transformers", "torch",
                                      "megatron-core", "datasets", "huggingface_hub", "peft"), (r.id, r.where)


def test_a_memory_pressure_warning_does_not_outvote_the_collective_timeout(engine):
    log = ("[2025-03-02 10:11:12,345] [WARNING] [stage3.py:2940:step] 3 pytorch allocator cache flushes since "
           "last step. this happens when there is high memory pressure and is detrimental to performance.\n"
           "[rank3]:[E ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught collective operation timeout: "
           "WorkNCCL(SeqNum=1234, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600042 "
           "milliseconds before timing out.\n")
    top = _top(engine, log)
    assert top is not None and top.category == "communication", top


def test_the_launcher_summary_still_points_at_the_hostfile_error(engine):
    log = ("ValueError: Hostfile is empty or not formatted correctly, unable to proceed with launching.\n"
           "[ERROR] [launch.py:321:sigkill_handler] ['/usr/bin/python', '-u', 'train.py', '--local_rank=3'] "
           "exits with return code = 1\n")
    top = _top(engine, log)
    assert top is not None and top.id == "family-launch-config", top


def test_dead_code_messages_are_not_catalogued(rows):
    # ContiguousMemoryAllocator is used only by deepspeed/runtime/zero/test.py in 0.19.8
    line = "AssertionError: Not enough memory in buffer. Allocation failed"
    assert not [r.id for r, _ in rows.match_line(line) if r.id.startswith("fw-deepspeed-")]


def test_a_memory_pressure_warning_alone_is_no_cause_until_it_repeats(engine):
    from knowledge.match import RETRIES_STUCK

    line = ("[WARNING] [stage3.py:2940:step] 3 pytorch allocator cache flushes since last step. this happens when "
            "there is high memory pressure and is detrimental to performance.")
    assert not [c for c in engine.diagnose_text(line).causes if c.confidence >= 0.5]
    top = _top(engine, "\n".join([line] * RETRIES_STUCK))
    assert top is not None and top.category == "gpu-memory", top
