"""A plain `pip install .` (a wheel, not an editable install) must carry the knowledge base."""

import subprocess
import sys
import zipfile
from pathlib import Path

from knowledge.loader import entry_files, entries_dir

ROOT = Path(__file__).resolve().parent.parent


def test_wheel_ships_entries_catalog_and_console_script(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
                           "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    wheel = next(tmp_path.glob("gpu_triage-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {f"knowledge/entries/{p.relative_to(entries_dir()).as_posix()}" for p in entry_files(entries_dir())}
    assert shipped and shipped <= names, sorted(shipped - names)[:5]
    assert {"knowledge/xid_catalog.py", "collectors/trainlog.py", "bot/cli.py", "bot/render/terminal.py",
            "collectors/node/kernel_log.py", "collectors/node/nvml.py", "collectors/nvml_probe.py"} <= names
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "gpu-triage = bot.cli:run" in zipfile.ZipFile(wheel).read(entry_points).decode()
