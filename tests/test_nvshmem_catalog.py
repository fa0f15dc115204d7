"""NVSHMEM and DeepEP catalog (knowledge/catalog/nvshmem.yaml): the expert-parallel communication of a
Mixture-of-Experts job. IB transport, GPUDirect and bootstrap failures and DeepEP dispatch/combine timeouts
are communication; the symmetric heap running out is gpu-memory; version mismatches between NVSHMEM's host
library, device code and plugins, and DeepEP buffer/config assertions, are software."""

from __future__ import annotations

import pytest

from knowledge import catalog as cat
from catalog_helpers import first_cause as _top


@pytest.fixture(scope="module")
def rows():
    return cat.load().rows


def test_nvshmem_catalog_rows_have_provenance_and_a_known_family(rows):
    mine = [r for r in rows if r.path.endswith("nvshmem.yaml")]
    assert len(mine) >= 30, len(mine)
    families = {
        "communication": {"family-nccl-net-transport", "family-ib-link", "family-nccl-bootstrap-socket",
                          "family-collective-timeout"},
        "gpu-memory": {"family-gpu-oom"},
        "software": {"family-version-mismatch", "family-launch-config"},
    }
    for row in mine:
        assert row.where and row.example, row.id
        assert row.id.startswith(("nvshmem-", "deepep-")), row.id
        assert row.category in families, row.id
        assert row.family in families[row.category], row.id
    # DeepEP's timeouts all speak for the collective-timeout family
    for row in mine:
        if row.id.startswith("deepep-") and "timeout" in row.id:
            assert row.family == "family-collective-timeout", row.id


@pytest.mark.parametrize("line, category", [
    # GPUDirect RDMA module missing: the IBGDA transport is skipped
    ("/dvs/p4/build/sw/rel/gpgpu/toolkit/r13.0/main_nvshmem/src/modules/transport/ibgda/ibgda.cpp:nvshmemt_init:4559: "
     "neither nv_peer_mem, or nvidia_peermem detected. Skipping transport.", "communication"),
    ("/dvs/p4/build/sw/rel/gpgpu/toolkit/r13.0/main_nvshmem/src/host/transport/transport.cpp:nvshmemi_transport_init:294: "
     "Unable to initialize any transports. returning error.", "communication"),
    ("/dvs/p4/build/sw/rel/gpgpu/toolkit/r13.0/main_nvshmem/src/modules/transport/ibrc/ibrc.cpp:1071: non-zero status: 12 "
     "ibv_poll_cq failed, status: 12", "communication"),
    ("/dvs/p4/build/sw/rel/gpgpu/toolkit/r13.0/main_nvshmem/src/host/mem/mem_heap.cpp:allocate_symmetric_memory:2266: "
     "nvshmem malloc failed (hint: check if total allocation has exceeded NVSHMEM symmetric size = 1073741824, NVSHMEM "
     "symmetric size can be increased using NVSHMEM_SYMMETRIC_SIZE environment variable) ", "gpu-memory"),
    ("NVSHMEM device library version does not match with NVSHMEM host library version", "software"),
    ("/dvs/p4/build/sw/rel/gpgpu/toolkit/r13.0/main_nvshmem/src/modules/bootstrap/uid/bootstrap_uid.cpp:"
     "nvshmemi_bootstrap_plugin_init:660: UID bootstrap version (20003) is not compatible with NVSHMEM version (30000)",
     "software"),
    # DeepEP
    ("DeepEP timeout for dispatch receivers, rank 3, responsible_channel = 7, tokens remained: 12", "communication"),
    ("Warning: DeepEP timeout for combine receive, rank 5, local_expert_idx 2, src_rank 13", "communication"),
    ("RuntimeError: DeepEP error: CPU recv timeout", "communication"),
    ("Failed: Assertion error /workspace/DeepEP/csrc/deep_ep.cpp:1575 'layout.total_bytes <= num_rdma_bytes'",
     "software"),
])
def test_nvshmem_and_deepep_failures(engine, line, category):
    top = _top(engine, line)
    assert top is not None and top.category == category, (top.id if top else None)


def test_ibrc_completion_error_names_the_qp_fault_entry(engine):
    top = _top(engine, "/dvs/p4/build/sw/rel/gpgpu/toolkit/r13.0/main_nvshmem/src/modules/transport/ibrc/ibrc.cpp:1071: "
                       "non-zero status: 12 ibv_poll_cq failed, status: 12")
    assert top is not None and top.id == "ib-completion-error-qp-fault", (top.id if top else None)


@pytest.mark.parametrize("line", [
    "gpu-a17:41877:41877 [3] NVSHMEM INFO NVSHMEM symmetric heap kind = DEVICE selected",
    "DeepEP initialized with NCCL version: 2.27.3 (loaded library)",
])
def test_healthy_nvshmem_and_deepep_lines_give_no_cause(engine, line):
    assert _top(engine, line) is None
