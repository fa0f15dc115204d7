"""knowledge/catalog/kernels.yaml: the compiler and kernel-library layer (Triton and its ptxas,
torch.compile, FlashAttention, xformers, TransformerEngine, bitsandbytes).

A kernel's on-chip shared memory is not /dev/shm: Triton's and ptxas's shared-memory limits are the
kernel's configuration against this GPU (software), never the shared-memory category. Frames around
a CUDA or loader error let the error inside speak; Dynamo's and Inductor's "compilation failed"
lines only point at what follows.
"""

from __future__ import annotations

import pytest

from catalog_helpers import ranked as _top, row_ids as _ids


@pytest.mark.parametrize("line", [
    "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 262144, "
    "Hardware limit: 232448. Reducing block sizes or `num_stages` may help.",
    "torch._inductor.exc.InductorError: RuntimeError: No valid triton configs. OutOfResources: out of "
    "resource: shared memory, Required: 98304, Hardware limit: 65536. Reducing block sizes or `num_stages` may help.",
    "ptxas error   : Entry function 'triton_tem_fused_mm_0' uses too much shared data (0x38000 bytes, 0xc000 max)",
])
def test_on_chip_shared_memory_is_a_kernel_configuration_not_dev_shm(engine, line):
    top = _top(engine, line)
    assert top and top[0][:2] == ("family-launch-config", "software"), top
    assert all(cat_ != "shared-memory" for _, cat_, _ in top), top


def test_inductor_s_config_frame_yields_to_the_triton_error_inside(shipped):
    line = ("torch._inductor.exc.InductorError: RuntimeError: No valid triton configs. OutOfResources: "
            "out of resource: shared memory, Required: 98304, Hardware limit: 65536.")
    ids = _ids(shipped, line)
    assert "triton-out-of-resource-shared-memory" in ids
    assert "torch-inductor-no-valid-triton-configs" not in ids


@pytest.mark.parametrize("line, row, cause, category", [
    ("RuntimeError: Triton Error [CUDA]: an illegal memory access was encountered",
     "cuda-rt-text-illegal-address", "cuda-illegal-memory-access", "software"),
    ("RuntimeError: Triton Error [CUDA]: out of memory", None, None, "gpu-memory"),
    ("bitsandbytes library load error: libcudart.so.12: cannot open shared object file: No such file or directory",
     "glibc-cuda-library-cannot-open", "cuda-library-not-found", "software"),
])
def test_a_frame_lets_the_error_it_carries_speak(shipped, engine, line, row, cause, category):
    ids = _ids(shipped, line)
    if row:
        assert row in ids and not ids & {"triton-error-cuda", "bnb-library-load-error"}, ids
    top = _top(engine, line)
    assert top[0][1] == category, top
    if cause:
        assert top[0][0] == cause, top


def test_the_triton_cuda_frame_alone_still_says_software(shipped, engine):
    line = "RuntimeError: Triton Error [CUDA]: some driver text no catalog knows"
    assert "triton-error-cuda" in _ids(shipped, line)
    assert _top(engine, line)[0][1] == "software"


def test_compile_failed_frames_point_at_what_follows(shipped, engine):
    frame = "torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:"
    assert "torch-dynamo-backend-compiler-failed" in _ids(shipped, frame)
    assert not [c for c in engine.diagnose_text(frame).causes if c.confidence >= 0.5]
    text = (frame + "\nRuntimeError: Found Tesla P100-PCIE-16GB which is too old to be supported by the triton "
            "GPU compiler, which is used as the backend. Triton only supports devices of CUDA Capability >= 7.0, "
            "but your device is of CUDA capability 6.0\n")
    assert _top(engine, text)[0][:2] == ("family-version-mismatch", "software")


@pytest.mark.parametrize("line, family", [
    ("RuntimeError: PassManager::run failed", "family-version-mismatch"),
    ("ptxas fatal   : Unsupported .version 8.7; current version is '8.4'", "family-version-mismatch"),
    ("ptxas fatal   : Value 'sm_100a' is not defined for option 'gpu-name'", "family-version-mismatch"),
    ("RuntimeError: FlashAttention only supports Ampere GPUs or newer.", "family-version-mismatch"),
    ("RuntimeError: FlashAttention forward only supports head dimension at most 256", "family-version-mismatch"),
    ("RuntimeError: FlashAttention only support fp16 and bf16 data type", "family-launch-config"),
    ("NotImplementedError: No operator found for `memory_efficient_attention_forward` with inputs:",
     "family-version-mismatch"),
    ("AssertionError: Device compute capability 8.9 or higher required for FP8 execution.", "family-version-mismatch"),
    ("UserWarning: The installed version of bitsandbytes was compiled without GPU support. 8-bit optimizers, "
     "8-bit multiplication, and GPU quantization are unavailable.", "family-version-mismatch"),
])
def test_kernel_library_refusals_are_software(engine, line, family):
    top = _top(engine, line)
    assert top and top[0][:2] == (family, "software"), top


def test_xformers_built_for_another_torch_is_an_extension_mismatch(engine):
    top = _top(engine, "WARNING[XFORMERS]: xFormers can't load C++/CUDA extensions. xFormers was built for:")
    assert top[0][:2] == ("extension-abi-mismatch-undefined-symbol", "software"), top


def test_ptxas_closing_line_is_a_pointer(shipped, engine):
    line = "ptxas fatal   : Ptx assembly aborted due to errors"
    assert "ptxas-assembly-aborted" in _ids(shipped, line)
    assert not [c for c in engine.diagnose_text(line).causes if c.confidence >= 0.5]
