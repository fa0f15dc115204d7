"""Container and Kubernetes pastes as users bring them: the NVIDIA container stack's error inside
Docker's OCI frame, a pod that never started, and CrashLoopBackOff, which alone names no layer."""

from __future__ import annotations

import pytest

DOCKER_HOOK = (
    "docker: Error response from daemon: failed to create task for container: failed to create shim task: "
    "OCI runtime create failed: runc create failed: unable to start container process: error during container "
    "init: error running hook #0: error running hook: exit status 1, stdout: , stderr: Auto-detected mode as "
    "'legacy'\n"
    "nvidia-container-cli: initialization error: nvml error: driver not loaded: unknown.\n"
    "ERRO[0000] error waiting for container: context canceled\n"
)

FAILED_SCHEDULING = (
    "Events:\n"
    "  Type     Reason            Age                 From               Message\n"
    "  ----     ------            ----                ----               -------\n"
    "  Warning  FailedScheduling  2m (x12 over 14m)  default-scheduler  0/6 nodes are available: "
    "2 Insufficient nvidia.com/gpu, 4 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }. "
    "preemption: 0/6 nodes are available: 2 No preemption victims found for incoming pod, "
    "4 Preemption is not helpful for scheduling.\n"
)


@pytest.mark.parametrize("text, category, entry", [
    (DOCKER_HOOK, "software", "container-gpu-runtime-setup-failed"),
    ("docker: Error response from daemon: could not select device driver \"\" with capabilities: [[gpu]].\n",
     "software", "container-gpu-runtime-setup-failed"),
    ("nvidia-container-cli: initialization error: nvml error: driver/library version mismatch: unknown\n",
     "software", "nvml-driver-library-mismatch"),
    (FAILED_SCHEDULING, "scheduler", "k8s-pod-unschedulable"),
    ("  Warning  UnexpectedAdmissionError  3m2s  kubelet  Allocate failed due to no healthy devices present; "
     "cannot allocate unhealthy devices nvidia.com/gpu, which is unexpected\n", "scheduler", "k8s-pod-unschedulable"),
])
def test_a_container_or_scheduling_failure_names_its_layer(engine, text, category, entry):
    d = engine.diagnose_text(text)
    assert d.causes and d.causes[0].category == category, [(c.id, c.confidence) for c in d.causes]
    assert d.causes[0].id == entry, [(c.id, c.confidence) for c in d.causes]


def test_crashloopbackoff_alone_is_no_cause_but_beside_oomkilled_it_is_host_memory(engine):
    crash = ("NAME               READY   STATUS             RESTARTS      AGE\n"
             "trainer-worker-0   0/1     CrashLoopBackOff   6 (2m ago)    14m\n"
             "  Warning  BackOff  2m (x25 over 7m)  kubelet  Back-off restarting failed container trainer in pod "
             "trainer-worker-0_default(5f3c1a2b-1111-2222-3333-444455556666)\n")
    d = engine.diagnose_text(crash)
    assert not [c for c in d.causes if c.confidence >= 0.5], [(c.id, c.confidence) for c in d.causes]
    d = engine.diagnose_text(crash + "    Last State:     Terminated\n      Reason:       OOMKilled\n"
                                      "      Exit Code:    137\n")
    assert d.causes and d.causes[0].category == "host-memory", [(c.id, c.confidence) for c in d.causes]
