"""A log pasted out of a terminal, cut into rows of the terminal's width, reads as the log it was
(collectors/unwrap.py); logs that were never cut are left exactly as they are."""

from __future__ import annotations

from pathlib import Path

import pytest

from collectors.unwrap import unwrap, wrap_width
from corpus_eval import terminal_cut

HERE = Path(__file__).resolve().parent


REAL = [
    # real corpus logs whose failure line is longer than a terminal row
    ("corpus", "communication/ddp-ib-completion-status12-vendor-err129.log"),
    ("corpus", "communication/basicsr-allreduce-watchdog-timeout.log"),
    ("corpus", "host-memory/deepspeed-gptj-resume-checkpoint-sigkill.log"),
]


@pytest.mark.parametrize("where, name", REAL)
@pytest.mark.parametrize("width", [80, 120])
def test_a_log_cut_at_the_terminal_width_is_diagnosed_as_the_log_itself(engine, where, name, width):
    text = (HERE / where / name).read_text(encoding="utf-8")
    want = engine.diagnose_text(text).causes[0]
    cut = terminal_cut(text, width)
    assert unwrap(cut).count("\n") == cut.count("\n")  # every line keeps its line number
    got = engine.diagnose_text(cut).causes
    assert got and (got[0].id, got[0].category) == (want.id, want.category)


def test_the_glued_rows_are_the_original_lines():
    text = (HERE / "corpus" / REAL[0][1]).read_text(encoding="utf-8")
    cut = terminal_cut(text, 80)
    assert wrap_width(cut.split("\n")) == 80
    glued = [line for line in unwrap(cut).split("\n") if line]
    assert glued == [line for line in text.split("\n") if line]


@pytest.mark.parametrize("text", [
    # a table whose rows all have the same width
    "+-----------------------------------------------------------------------------+\n"
    "| NVIDIA-SMI 535.161.08   Driver Version: 535.161.08   CUDA Version: 12.2     |\n"
    "|-------------------------------+----------------------+----------------------+\n"
    "| GPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |\n"
    "+-----------------------------------------------------------------------------+\n",
    # the same message from several ranks, each line as long as the others
    "".join(f"[E ProcessGroupNCCL.cpp:737] [Rank {r}] Watchdog caught collective operation timeout: "
            f"WorkNCCL(SeqNum=86645, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1805320 milliseconds "
            f"before timing out.\n" for r in range(4)) + "Traceback (most recent call last):\n",
    # a console logger that pads every line to the terminal width
    "".join(f"[15:58:2{r}] INFO     step {r} loss 0.53" + " " * 60 + "trainer.py:12\n"
            f"                    continued detail {r}\n" for r in range(4)),
])
def test_what_was_never_cut_is_left_alone(text):
    assert unwrap(text) == text


def test_crlf_pastes_keep_their_line_ends():
    text = (HERE / "corpus" / REAL[0][1]).read_text(encoding="utf-8")
    cut = terminal_cut(text, 80).replace("\n", "\r\n")
    glued = unwrap(cut)
    assert glued.count("\r\n") == cut.count("\r\n") and glued != cut
