"""A log pasted out of a terminal, cut into rows of the terminal's width, reads as the log it was
(collectors/unwrap.py); logs that were never cut are left exactly as they are."""

from __future__ import annotations

from pathlib import Path

import pytest

from collectors.unwrap import fill_result_rows, unquote_lines, unwrap, wrap_width
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


def test_a_percent_encoded_line_reads_as_the_message_it_encodes(engine):
    # a message copied out of a URL (an issue title, a search link): no space left in it
    from urllib.parse import quote

    text = (HERE / "corpus" / REAL[0][1]).read_text(encoding="utf-8")
    want = engine.diagnose_text(text).causes[0]
    lines = text.split("\n")
    encoded = "\n".join(quote(line, safe="/[]()<>=,") if line.strip() else line for line in lines)
    assert encoded != text and unquote_lines(encoded).count("\n") == encoded.count("\n")
    assert unquote_lines(encoded) == text
    got = engine.diagnose_text(encoded).causes
    assert got and (got[0].id, got[0].category) == (want.id, want.category)


@pytest.mark.parametrize("text", [
    "GET https://example.com/a%20b?q=1%20 HTTP/1.1 200\n",     # has spaces: a log line quoting a URL
    "curl -s https://example.com/a%20b\n",
    "wandb: https://wandb.ai/team/run%20one\n",
    "s3://bucket/ckpt%20v2/model.pt\n",                        # one encoded space: a name, not a message
])
def test_a_line_that_only_quotes_a_url_is_left_alone(text):
    assert unquote_lines(text) == text


# dcgmi diag (3.x layout, dcgmi/Diag.cpp): one row per result of a test; only the first names it
_DIAG = """+---------------------------+------------------------------------------------+
| Diagnostic                | Result                                         |
+===========================+================================================+
|-----  Deployment  --------+------------------------------------------------|
| Blacklist                 | Pass                                           |
| Environment Variables     | Pass                                           |
+-----  Hardware  ----------+------------------------------------------------+
| GPU Memory                | Pass - GPU: 1                                  |
|                           | {second} - GPU: 0                                  |
+-----  Integration  -------+------------------------------------------------+
| PCIe                      | Pass - All                                     |
+---------------------------+------------------------------------------------+"""


def test_an_unnamed_dcgm_result_row_gets_its_test_name(engine):
    failing = _DIAG.format(second="Fail")
    filled = fill_result_rows(failing)
    assert filled.count("\n") == failing.count("\n")
    assert "| GPU Memory                | Fail - GPU: 0" in filled
    assert fill_result_rows(filled) == filled
    got = engine.diagnose_text(failing).causes
    assert got and got[0].category == "gpu-hardware" and got[0].confidence >= 0.5
    assert any("Fail - GPU: 0" in e.line for e in got[0].evidence)


def test_a_passing_dcgm_table_is_left_alone_and_blames_nothing(engine):
    passing = _DIAG.format(second="Pass")
    assert fill_result_rows(passing) == passing  # no failure: nothing to name
    assert not [c for c in engine.diagnose_text(passing).causes if c.confidence >= 0.5]
