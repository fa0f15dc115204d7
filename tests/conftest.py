import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

# Compiled prefilters (Hyperscan, where installed) go to a folder of this test run, never to the
# user's own cache folder; subprocesses under test inherit it.
if "GPU_TRIAGE_CACHE_DIR" not in os.environ:
    _cache = tempfile.mkdtemp(prefix="gpu-triage-test-cache-")
    os.environ["GPU_TRIAGE_CACHE_DIR"] = _cache
    atexit.register(shutil.rmtree, _cache, True)


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("gpu-triage-data")


@pytest.fixture(scope="session")
def engine(data_dir):
    from bot.engine import Engine

    return Engine(data_dir=str(data_dir))

from conftest_cluster import *  # noqa: E402,F401,F403  (the fake cluster and Slurm fixtures)
from conftest_slack import *  # noqa: E402,F401,F403  (the loopback Slack Web API and Socket Mode)


@pytest.fixture(scope="session")
def shipped():
    """The shipped message catalog, loaded once (read-only in the tests)."""
    from knowledge import catalog as cat

    return cat.load()
