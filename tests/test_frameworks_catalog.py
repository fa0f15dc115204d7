"""Training-framework messages (knowledge/catalog/frameworks.yaml) read as their own text says."""

from __future__ import annotations
from catalog_helpers import first_cause as _top


def test_the_deepspeed_launcher_summary_points_at_the_rank_s_own_error(engine):
    # "exits with return code = 1" only says a rank failed: the rank's own error speaks
    log = ("[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a "
           "total capacity of 79.15 GiB of which 1.02 GiB is free.\n"
           "[2024-05-02 03:14:07,123] [ERROR] [launch.py:321:sigkill_handler] ['/usr/bin/python', '-u', "
           "'train.py', '--local_rank=3'] exits with return code = 1\n")
    top = _top(engine, log)
    assert top is not None and top.category == "gpu-memory", top
    alone = engine.diagnose_text(log.splitlines()[1])
    assert not [c for c in alone.causes if c.confidence >= 0.5], [(c.id, c.confidence) for c in alone.causes]


def test_megatron_rerun_verdicts_split_hardware_from_the_model(engine):
    gpu = _top(engine, "Second rerun: unexpected result is not reproducible on a different GPU, "
                       "therefore was likely incorrect (2.713 != nan)")
    model = _top(engine, "Second rerun: unexpected result is reproducible on a different GPU, "
                         "therefore it was likely correct (nan = nan)")
    assert gpu is not None and gpu.category == "gpu-hardware", gpu
    assert model is not None and model.category == "software" and model.id == "family-training-numerics", model


def test_a_framework_handled_sigterm_is_the_scheduler(engine):
    for line in ("[NeMo I 2025-04-02 11:20:07 preemption:99] Received SIGTERM, saving checkpoint and exiting",
                 "[2025-02-14 03:59:41] exiting program after receiving SIGTERM.",
                 "lightning.pytorch.utilities.exceptions.SIGTERMException"):
        top = _top(engine, line)
        assert top is not None and top.category == "scheduler", (line, top)
