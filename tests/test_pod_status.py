"""A row of `kubectl get pods` whose STATUS says why the pod stopped: the STATUS column follows the
READY column (ready/total containers) in every row kubectl's printPod writes, whatever the RESTARTS
column looks like (a bare count before kubectl 1.22, "3 (41s ago)" after) and wherever a paste cut
the row."""

import pytest

from collectors.trainlog import parse_text


@pytest.mark.parametrize("row, pod, status", [
    # kubectl >= 1.22: RESTARTS with the time of the last one
    ("trainer-worker-2   0/1     OOMKilled   3 (41s ago)   12m", "trainer-worker-2", "OOMKilled"),
    # kubectl < 1.22: a bare count
    ("training-operator-8569f97489-zkxbt   0/1     OOMKilled   5          3m",
     "training-operator-8569f97489-zkxbt", "OOMKilled"),
    # --all-namespaces: the namespace first; the row cut right after STATUS
    ("kubeflow                    training-operator-8569f97489-zkxbt                            0/1     OOMKilled",
     "training-operator-8569f97489-zkxbt", "OOMKilled"),
    # an init container's terminated reason
    ("llm-pretrain-0   0/2     Init:OOMKilled   1 (8s ago)   40s", "llm-pretrain-0", "OOMKilled"),
    ("trainer-worker-1   0/1     Evicted   0          2d", "trainer-worker-1", "Evicted"),
    ("pytorchjob-worker-3   0/1     UnexpectedAdmissionError   0          8s", "pytorchjob-worker-3",
     "UnexpectedAdmissionError"),
])
def test_a_get_pods_row_gives_the_pod_and_its_status(row, pod, status):
    found = [f.attrs for f in parse_text("NAME   READY   STATUS   RESTARTS   AGE\n" + row).findings
             if f.kind == "pod-status"]
    assert found == [{"pod": pod, "status": status}]


@pytest.mark.parametrize("text", [
    "trainer-worker-0   1/1     Running   0          5m",
    "the training-operator pod was OOMKilled twice last night",
    "3 pods were Evicted from node gpu-07 (DiskPressure)",
    "Reason: OOMKilled (see kubectl describe)",
])
def test_prose_or_a_running_pod_is_no_status(text):
    assert not [f for f in parse_text(text).findings if f.kind == "pod-status"]


@pytest.mark.parametrize("row, entry, category", [
    ("trainer-worker-2   0/1     OOMKilled   5          3m", "family-host-oom", "host-memory"),
    ("trainer-worker-1   0/1     Evicted   0          2d", "k8s-pod-evicted-or-preempted", "scheduler"),
    ("trainer-worker-0   0/1     UnexpectedAdmissionError   0          8s", "k8s-pod-unschedulable", "scheduler"),
])
def test_the_status_alone_names_its_cause(engine, row, entry, category):
    d = engine.diagnose_text(row)
    assert d.causes and d.causes[0].id == entry and d.causes[0].category == category, \
        [(c.id, c.confidence) for c in d.causes]
    assert d.causes[0].confidence >= 0.5
