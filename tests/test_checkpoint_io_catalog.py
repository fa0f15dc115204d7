"""The weight and checkpoint I/O catalog (knowledge/catalog/checkpoint_io.yaml): the messages safetensors,
huggingface_hub, torch.load/torch.save and transformers' from_pretrained print when a job cannot read or
write its weights. A damaged or not-really-downloaded file and a failed fetch are checkpoint-storage; a
wrong repo id, a gated repo or a weights_only refusal is software; healthy loading and download chatter
gets no cause."""

from __future__ import annotations

import pytest

from catalog_helpers import first_cause as _top
from catalog_helpers import row_ids


@pytest.fixture(scope="module")
def io_rows(shipped):
    rows = [r for r in shipped.rows if r.path.endswith("checkpoint_io.yaml")]
    assert len(rows) >= 40, len(rows)
    return rows


def test_every_row_has_provenance_and_a_fitting_family(io_rows):
    families = {"checkpoint-storage": {"family-storage-io"},
                "software": {"family-launch-config", "family-version-mismatch"}}
    for row in io_rows:
        assert row.where and row.example, row.id
        assert row.family in families[row.category], (row.id, row.category, row.family)


@pytest.mark.parametrize("line, category, entry", [
    # safetensors: a header that cannot be parsed is a damaged or cut-short file (0.8 Display and 0.4 Debug)
    ("safetensors_rust.SafetensorError: Error while deserializing header: incomplete metadata, file not fully "
     "covered", "checkpoint-storage", "ckpt-corrupt-truncated"),
    ("safetensors_rust.SafetensorError: Error while deserializing header: InvalidHeaderLength",
     "checkpoint-storage", "ckpt-corrupt-truncated"),
    # huggingface_hub: a weights download cut short; an offline node without the files in its cache
    ("OSError: Consistency check failed: file should be of size 4976698672 but has size 2243952640 "
     "(model-00002-of-00004.safetensors).", "checkpoint-storage", "ckpt-corrupt-truncated"),
    ("huggingface_hub.errors.LocalEntryNotFoundError: Cannot find an appropriate cached snapshot folder for the "
     "specified revision on the local disk and outgoing traffic has been disabled. To enable repo look-ups and "
     "downloads online, set 'HF_HUB_OFFLINE=0' as environment variable.", "checkpoint-storage", None),
    # huggingface_hub: a wrong repo id is a configuration error
    ("huggingface_hub.errors.RepositoryNotFoundError: 401 Client Error. (Request ID: Root=1-66b0c7e2-3f1d2a4b) "
     "Repository Not Found for url: https://huggingface.co/meta-llama/Llama-3-8b/resolve/main/config.json.",
     "software", None),
    # torch: a weights_only refusal of a pickled class; a Git LFS pointer fed to torch.load
    ("WeightsUnpickler error: Unsupported global: GLOBAL argparse.Namespace was not an allowed global by "
     "default. Please use `torch.serialization.add_safe_globals([argparse.Namespace])` or the "
     "`torch.serialization.safe_globals([argparse.Namespace])` context manager to allowlist this global if you "
     "trust this class/function.", "software", None),
    ("_pickle.UnpicklingError: Weights only load failed. Re-running `torch.load` with `weights_only` set to "
     "`False` will likely succeed, but it can result in arbitrary code execution. Do it only if you got the file "
     "from a trusted source.\n Please file an issue with the following so that we can make `weights_only=True` "
     "compatible with your use case: WeightsUnpickler error: Unsupported operand 118",
     "checkpoint-storage", "ckpt-corrupt-truncated"),
    # torch's zip container: 2.14's hint on every reader failure
    ("RuntimeError: PytorchStreamReader failed reading zip archive: unsupported multidisk archive. This is an "
     "internal miniz error. If you are seeing this error, there is a high likelihood that your checkpoint file "
     "is corrupted. This can happen if the checkpoint was not saved properly, was transferred incorrectly, or "
     "the file was modified after saving.", "checkpoint-storage", "ckpt-corrupt-truncated"),
    # transformers: a Git LFS pointer in place of the weights; the Hub unreachable
    ("OSError: You seem to have cloned a repository without having git-lfs installed. Please install git-lfs "
     "and run `git lfs install` followed by `git lfs pull` in the folder you cloned.",
     "checkpoint-storage", "ckpt-corrupt-truncated"),
    ("OSError: We couldn't connect to 'https://huggingface.co' to load the files, and couldn't find them in the "
     "cached files.", "checkpoint-storage", None),
])
def test_weight_io_messages_are_diagnosed_in_their_category(engine, line, category, entry):
    top = _top(engine, line)
    assert top is not None and top.category == category, (top.id, top.category) if top else None
    if entry:
        assert top.id == entry, top.id


def test_a_local_directory_missing_a_shard_is_storage_a_repo_missing_a_file_is_configuration(shipped, engine):
    local = ("OSError: /scratch/ckpt/llama-70b-sft does not appear to have a file named "
             "model-00012-of-00030.safetensors. Checkout 'https://huggingface.co//scratch/ckpt/llama-70b-sft/tree/main' "
             "for available files.")
    remote = ("OSError: mistralai/Mistral-7B-v0.1 does not appear to have a file named preprocessor_config.json. "
              "Checkout 'https://huggingface.co/mistralai/Mistral-7B-v0.1/tree/main' for available files.")
    assert row_ids(shipped, local) == {"tf-local-dir-missing-file"}
    assert row_ids(shipped, remote) == {"tf-repo-missing-file"}
    assert _top(engine, local).category == "checkpoint-storage"
    assert _top(engine, remote).category == "software"


def test_the_weights_only_frame_alone_names_no_layer(engine):
    # the frame every weights_only refusal prints: what follows it (a GLOBAL, a non-pickle byte) says why
    d = engine.diagnose_text("_pickle.UnpicklingError: Weights only load failed. In PyTorch 2.6, we changed the "
                             "default value of the `weights_only` argument in `torch.load` from `False` to `True`. "
                             "Re-running `torch.load` with `weights_only` set to `False` will likely succeed, but it "
                             "can result in arbitrary code execution. Do it only if you got the file from a trusted "
                             "source.")
    assert not [c for c in d.causes if c.confidence >= 0.5], [(c.id, c.confidence) for c in d.causes]


@pytest.mark.parametrize("line", [
    "Loading checkpoint shards: 100%|██████████| 4/4 [00:05<00:00,  1.31s/it]",
    "Fetching 4 files: 100%|██████████| 4/4 [00:42<00:00, 10.5s/it]",
    "model-00002-of-00004.safetensors: 100%|██████████| 4.98G/4.98G [02:12<00:00, 37.6MB/s]",
])
def test_healthy_loading_and_download_lines_get_no_cause(engine, line):
    d = engine.diagnose_text(line)
    assert not d.causes, [(c.id, c.confidence) for c in d.causes]


def test_a_single_download_retry_is_not_a_confident_cause(engine):
    line = ("Error while downloading from https://cdn-lfs-us-1.hf.co/repos/3b/0e/model-00002-of-00004.safetensors: "
            "The read operation timed out")
    d = engine.diagnose_text(line + "\nTrying to resume download...")
    assert not [c for c in d.causes if c.confidence >= 0.5], [(c.id, c.confidence) for c in d.causes]
