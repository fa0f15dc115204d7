"""Kubernetes messages added in a second pass: kube-scheduler v1.36.3 filter reasons (cordoned nodes, DRA
claims, unbound PVCs, gang minCount, podgroup preemption), JobSet's failure-policy outcomes, the Kubeflow
Trainer v2 TrainJob deadline, newer Kueue evictions (admission checks, ProvisioningRequest retries, flavor
migration, topology-aware placement), the NVIDIA device plugin marking GPUs unhealthy or failing to register,
the GPU operator's GPUDirect RDMA validators, and containerd's task-creation frames around a runtime error."""

from __future__ import annotations

import pytest

from catalog_helpers import first_cause as _top


@pytest.fixture(scope="module")
def rows(shipped):
    return shipped


@pytest.mark.parametrize("line,category,cause", [
    # the pod never got its GPUs
    ("resourceclaim not available on the node", "scheduler", "k8s-pod-unschedulable"),
    ("0/4 nodes are available: 4 cannot allocate all claims.", "scheduler", "k8s-pod-unschedulable"),
    ("couldn't assign flavors to pod set worker: topology \"gpu-topology\" doesn't allow to fit any of 16 pod(s). "
     "Total nodes: 32; excluded: resource \"nvidia.com/gpu\": 28", "scheduler", "k8s-pod-unschedulable"),
    ("Evicted due to AdmissionCheck in Retry state: \"dws-prov\" (Retrying after failure: NotProvisioned)",
     "scheduler", "k8s-pod-unschedulable"),
    # preemption, restarts exhausted, deadlines
    ("Normal  Preempted  default-scheduler  Preempted by podgroup 5f3c1a2b-1111-2222-3333-444455556666 on node "
     "gpu-node-17", "scheduler", "k8s-pod-evicted-or-preempted"),
    ("Evicted to accommodate a workload (UID: 0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0) due to migration to more "
     "favorable resource flavor", "scheduler", "k8s-pod-evicted-or-preempted"),
    ("Warning  ReachedMaxRestarts  jobset-controller  jobset failed due to reaching max number of restarts "
     "(first failed job: llama-pretrain-workers-3)", "scheduler", "k8s-training-job-replica-failed"),
    ("jobset failed due to one or more job failures (first failed job: llama-pretrain-workers-0)", "scheduler",
     "k8s-training-job-replica-failed"),
    ("    Message:  TrainJob exceeded its active deadline", "scheduler", "family-scheduler-termination"),
    ("Warning  MaximumExecutionTimeExceeded  2m  kueue-admission  The maximum execution time (86400s) exceeded",
     "scheduler", "family-scheduler-termination"),
    ("cannot find replacement assignment for unhealthy node: gpu-node-17", "scheduler", "family-node-failure"),
    # the device plugin takes a GPU away
    ("I0502 03:14:07.123456       1 server.go:279] 'nvidia.com/gpu' device marked unhealthy: "
     "GPU-6b3a1f0e-2c4d-4e5f-8a9b-0c1d2e3f4a5b", "gpu-hardware", "family-gpu-hardware-fault"),
    ("unable to get device handle from UUID: ERROR_GPU_IS_LOST; marking it as unhealthy", "gpu-hardware",
     "family-gpu-hardware-fault"),
    # the GPU stack on the node is not set up
    ("E0502 03:14:07.123456       1 server.go:146] Could not register device plugin: rpc error: code = "
     "Unavailable desc = connection error", "software", "container-gpu-runtime-setup-failed"),
    ("error validating nvidia-peermem driver installation: nvidia-peermem driver is not loaded", "software",
     "container-gpu-runtime-setup-failed"),
    # containerd's frame around a runtime error it does not explain
    ("Error: failed to create containerd task: failed to create shim task: OCI runtime create failed: runc "
     "create failed: unable to start container process: exec: \"torchrun\": executable file not found in $PATH: "
     "unknown", "software", "family-version-mismatch"),
])
def test_added_kubernetes_messages_name_their_layer(engine, line, category, cause):
    top = _top(engine, line)
    assert top is not None and top.category == category, (top.id if top else None, line)
    assert top.id == cause, (top.id, line)


def test_the_containerd_frame_lets_the_nvidia_hook_error_speak(engine):
    line = ("Warning  Failed  12s  kubelet  Error: failed to create containerd task: failed to create shim task: OCI "
            "runtime create failed: runc create failed: unable to start container process: error during container "
            "init: error running hook #0: error running hook: exit status 1, stdout: , stderr: Auto-detected mode "
            "as 'legacy' nvidia-container-cli: initialization error: nvml error: driver not loaded: unknown")
    top = _top(engine, line)
    assert top is not None and top.id == "container-gpu-runtime-setup-failed", top


def test_restart_and_start_error_lines_only_point(engine, rows):
    for line in ("Warning  RestartJobSetFailurePolicyAction  jobset-controller  applying RestartJobSet failure "
                 "policy action (first failed job: llama-pretrain-workers-2)",
                 "      Reason:       StartError"):
        assert [r.id for r, _ in rows.match_line(line)], line
        top = _top(engine, line)
        assert top is None or top.confidence < 0.5, (line, top)


def test_a_jobset_failure_keeps_the_oom_that_caused_it_in_view(engine):
    # as with the training operator's "replica(s) failed", the job-level entry leads and the OOM stays beside it
    log = ("      Reason:       OOMKilled\n"
           "      Exit Code:    137\n"
           "Warning  FailedJobs  jobset-controller  jobset failed due to one or more job failures "
           "(first failed job: llama-pretrain-workers-0)\n")
    d = engine.diagnose_text(log)
    cats = [c.category for c in d.causes]
    assert cats and cats[0] == "scheduler" and "host-memory" in cats, [(c.id, c.category) for c in d.causes]


def test_added_rows_carry_where_they_were_read(rows):
    added = [r for r in rows.rows if r.path.endswith("kubernetes.yaml")]
    assert len(added) >= 90, len(added)
    for r in added:
        if r.id.startswith(("jobset-", "trainer-", "containerd-")):
            assert r.where.split()[0] in ("jobset", "kubeflow/trainer", "containerd"), (r.id, r.where)
