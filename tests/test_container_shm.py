"""A `docker run` in the paste that sets neither --shm-size nor --ipc=host: the container got the
engine's default 64 MB /dev/shm. Evidence beside a failure that lives in /dev/shm, never a failure alone."""

import pytest

from collectors.trainlog import parse_text

# PyTorch's message for ncclSystemError, as c10d prints it (NCCL 2.10-2.18 era)
NCCL_SYSTEM_ERROR = ("RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1169, "
                     "unhandled system error, NCCL version 2.10.3\n"
                     "ncclSystemError: System call (socket, malloc, munmap, etc) failed.\n")


@pytest.mark.parametrize("cmd, runtime", [
    ("docker run --gpus all -it -v /data:/data nvcr.io/nvidia/pytorch:23.10-py3 bash", "docker"),
    ("$ sudo nvidia-docker run --rm -it pytorch/pytorch:2.1.0-cuda12.1-cudnn8-devel", "docker"),
    ("podman run --device nvidia.com/gpu=all -it train:latest torchrun --nproc_per_node 8 train.py", "podman"),
])
def test_a_run_command_without_shm_flags_is_the_default_shm(cmd, runtime):
    found = [f.attrs for f in parse_text(cmd).findings if f.kind == "container-shm-default"]
    assert found == [{"runtime": runtime, "shm_bytes": 64 * 1024 * 1024}]


@pytest.mark.parametrize("cmd", [
    "docker run --gpus all --ipc=host -it nvcr.io/nvidia/pytorch:23.10-py3 bash",
    "docker run --gpus all --shm-size=16g -it nvcr.io/nvidia/pytorch:23.10-py3 bash",
    "docker run --gpus all -v /dev/shm:/dev/shm -it img bash",
    "docker ps -a",
    "we run docker on every node",
])
def test_a_raised_or_shared_shm_or_no_run_command_says_nothing(cmd):
    assert not [f for f in parse_text(cmd).findings if f.kind == "container-shm-default"]


def test_beside_a_bare_nccl_system_error_the_container_shm_leads_and_the_network_follows(engine):
    cmd = "docker run --gpus all -it -v /data:/data nvcr.io/nvidia/pytorch:23.10-py3 bash\n"
    d = engine.diagnose_text(cmd + NCCL_SYSTEM_ERROR)
    assert [c.category for c in d.causes][:2] == ["shared-memory", "communication"], \
        [(c.id, c.confidence) for c in d.causes]
    assert d.causes[0].id == "shm-docker-default-64mb"
    # without the command the generic reading leads, shared memory next
    d = engine.diagnose_text(NCCL_SYSTEM_ERROR)
    assert [c.category for c in d.causes][:2] == ["communication", "shared-memory"]


def test_the_command_alone_is_no_cause(engine):
    d = engine.diagnose_text("docker run --gpus all -it img bash\nstep 10 loss 2.113\nstep 20 loss 2.087\n")
    assert d.causes == []
