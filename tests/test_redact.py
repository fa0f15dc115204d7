"""The redactor masks the secret and keeps the rest of the line readable (security probe t4's
leftovers: a flag ending in -key with '=', and an AWS key pair printed together)."""

from __future__ import annotations

import io

import pytest

from collectors.redact import MASK, redact, redact_stream


@pytest.mark.parametrize("line, kept, secret", [
    ("python train.py --wandb-key=WANDBPROCSECRET --epochs 3", "--wandb-key=", "WANDBPROCSECRET"),
    ("python train.py --wandb-key WANDBPROCSECRET", "--wandb-key ", "WANDBPROCSECRET"),
    ("RuntimeError: failed: AKIAIOSFODNN7EXAMPLE wJalrXUtnFEMI/K7MDENG/bPxRfiCYAWSSECRET2",
     "RuntimeError: failed: ", "AWSSECRET2"),
])
def test_a_secret_is_masked_and_the_line_stays_readable(line, kept, secret):
    out = redact(line)
    assert secret not in out and MASK in out and kept in out


def test_flags_that_only_look_like_secrets_keep_their_values():
    line = "torchrun train.py --max-tokens 4096 --key-file /etc/ssl/k.pem --no-key"
    assert redact(line) == line


def test_a_stream_is_masked_like_a_line():
    src = io.BytesIO(b"step 1\n" * 1000 + b"ps: python t.py --wandb-key=WANDBPROCSECRET\n")
    out = io.BytesIO()
    redact_stream(src, out)
    assert b"WANDBPROCSECRET" not in out.getvalue() and out.getvalue().count(b"step 1\n") == 1000
