"""The amdgpu kernel-driver catalog (knowledge/catalog/amdgpu.yaml): a healthy ROCm node's amdgpu/KFD
boot lines match no row and give no cause, and the dmesg of a hung, faulting or RAS-failing GPU is
diagnosed as gpu-hardware. The healthy lines are the driver's own init messages (dev_info/DRM_INFO
in Linux 6.1/6.12 amdgpu_device.c, amdgpu_gmc.c, amdgpu_psp.c, amdgpu_ras.c, amdgpu_xgmi.c,
swsmu/smu_v13_0.c, amdkfd/kfd_device.c), filled with the values an 8-GPU MI300X node prints."""

from __future__ import annotations

from knowledge import catalog as cat

HEALTHY_BOOT = """\
[drm] amdgpu kernel modesetting enabled.
[drm] initializing kernel modesetting (IP DISCOVERY 0x1002:0x74A1 0x1002:0x74A1 0x00).
amdgpu 0000:c1:00.0: amdgpu: Fetched VBIOS from IFWI
amdgpu 0000:c1:00.0: amdgpu: MEM ECC is active.
amdgpu 0000:c1:00.0: amdgpu: SRAM ECC is active.
amdgpu 0000:c1:00.0: amdgpu: RAS INFO: ras initialized successfully, hardware ability[7fff] ras_mask[7fff]
amdgpu 0000:c1:00.0: amdgpu: VRAM: 196592M 0x0000008000000000 - 0x000000BFFEFFFFFF (196592M used)
amdgpu 0000:c1:00.0: amdgpu: GART: 512M 0x00007FFF00000000 - 0x00007FFF1FFFFFFF
[drm] PCIE GART of 512M enabled.
[drm] PTB located at 0x0000008000000000
amdgpu 0000:c1:00.0: amdgpu: reserve 0xa00000 from 0x8000000000 for PSP TMR
amdgpu 0000:c1:00.0: amdgpu: RAS: optional ras ta ucode is not available
amdgpu 0000:c1:00.0: amdgpu: GECC is enabled
amdgpu 0000:c1:00.0: amdgpu: smu driver if version = 0x00000009, smu fw if version = 0x00000009, smu fw program = 0, smu fw version = 0x00556b00 (85.107.0)
amdgpu 0000:c1:00.0: amdgpu: SMU driver if version not matched
amdgpu 0000:c1:00.0: amdgpu: SMU is initialized successfully!
amdgpu 0000:c1:00.0: amdgpu: ring comp_1.0.0 uses VM inv eng 0 on hub 0
amdgpu 0000:c1:00.0: amdgpu: XGMI: Add node 3, hive 0x5c1e9a0b7d3f2a64.
amdgpu 0000:c1:00.0: amdgpu: SE 8, SH per SE 1, CU per SH 40, active_cu_number 304
amdgpu 0000:c1:00.0: amdgpu: Runtime PM not available
amdgpu: HMM registered 196592MB device memory
amdgpu: Topology: Add dGPU node [0x74a1:0x1002]
kfd kfd: amdgpu: Allocated 3969056 bytes on gart
kfd kfd: amdgpu: Total number of KFD nodes to be created: 1
kfd kfd: amdgpu: added device 1002:74a1
[drm] Initialized amdgpu 3.59.0 20150101 for 0000:c1:00.0 on minor 1
amdgpu 0000:c1:00.0: amdgpu: PSP is resuming...
amdgpu 0000:c1:00.0: amdgpu: SMU is resumed successfully!
"""

# a compute ring hangs, the queue reset fails, the full reset brings the GPU back with VRAM lost
RING_HANG = """\
amdgpu 0000:c1:00.0: amdgpu: ring comp_1.0.0 timeout, signaled seq=18231, emitted seq=18233
amdgpu 0000:c1:00.0: amdgpu: Process information: process python pid 48213 thread python pid 48213
amdgpu 0000:c1:00.0: amdgpu: fail to wait on hqd deactive and will try pipe reset
amdgpu 0000:c1:00.0: amdgpu: GPU reset begin!
amdgpu 0000:c1:00.0: amdgpu: The cp might be in an unrecoverable state due to an unsuccessful queues preemption
amdgpu 0000:c1:00.0: amdgpu: GPU psp mode1 reset
amdgpu 0000:c1:00.0: amdgpu: GPU reset succeeded, trying to resume
[drm] VRAM is lost due to GPU reset!
amdgpu 0000:c1:00.0: amdgpu: GPU reset(1) succeeded!
"""

# an RDNA3 (gmc_v11) VM fault from a user kernel, then KFD kills the process
GMC11_FAULT = """\
amdgpu 0000:03:00.0: amdgpu: [gfxhub] page fault (src_id:0 ring:40 vmid:8 pasid:32771)
amdgpu 0000:03:00.0: amdgpu:  in process python pid 48213 thread python pid 48213)
amdgpu 0000:03:00.0: amdgpu:   in page starting at address 0x00007f1c2a400000 from client 10
amdgpu 0000:03:00.0: amdgpu: GCVM_L2_PROTECTION_FAULT_STATUS:0x00A01A31
amdgpu 0000:03:00.0: amdgpu: Sending SIGSEGV to process 48213 (pasid 0x8003)
"""

# HBM uncorrectable error on MI300: poison consumed, the process gets SIGBUS, pages are retired
RAS_UE = """\
amdgpu 0000:c1:00.0: amdgpu: {2}socket: 0, die: 1, 1 new uncorrectable hardware errors detected in umc block
amdgpu 0000:c1:00.0: amdgpu: Error Address(PA):0x4a1f2c000  Row:0x1a2f Col:0x0  Bank:0xa Channel:0x3
amdgpu 0000:c1:00.0: amdgpu: Send SIGBUS to process python(pasid:32771)
amdgpu 0000:c1:00.0: amdgpu: Saved 4 pages to EEPROM table.
"""


def _amdgpu_rows(shipped):
    return [r for r in shipped.rows if r.source == "amdgpu"]


def test_the_catalog_is_read_from_linux_6_1_and_6_12(shipped):
    rows = _amdgpu_rows(shipped)
    assert len(rows) >= 200, len(rows)
    assert all(r.where for r in rows)
    assert "6.12" in rows[0].version and "6.1." in rows[0].version


def test_a_healthy_rocm_boot_matches_no_row_and_gives_no_cause(shipped, engine, tmp_path):
    (tmp_path / "amdgpu-boot.log").write_text(HEALTHY_BOOT, encoding="utf-8")
    problems = cat.check_benign(shipped, tmp_path)
    assert not problems, "\n".join(map(str, problems[:20]))
    d = engine.diagnose_text(HEALTHY_BOOT)
    assert not [c for c in d.causes if c.confidence >= 0.5], [(c.id, c.confidence) for c in d.causes]


def test_a_ring_hang_and_reset_is_gpu_hardware(engine):
    d = engine.diagnose_text(RING_HANG)
    assert d.causes and d.causes[0].category == "gpu-hardware", [(c.id, c.category) for c in d.causes]


def test_a_gmc_v11_page_fault_follows_the_gmc_v9_fault_rows(shipped, engine):
    lines = GMC11_FAULT.splitlines()
    for line in lines[:3]:
        assert shipped.match_line(line), line
    d = engine.diagnose_text(GMC11_FAULT)
    assert d.causes and d.causes[0].category == "gpu-hardware", [(c.id, c.category) for c in d.causes]


def test_an_hbm_uncorrectable_error_is_gpu_hardware(engine):
    d = engine.diagnose_text(RAS_UE)
    assert d.causes and d.causes[0].category == "gpu-hardware", [(c.id, c.category) for c in d.causes]
