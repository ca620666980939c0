import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread_per_worker():
    """pytest-xdist runs two workers on two cores: one thread each avoids oversubscription."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def _progress_file(tmp_path, monkeypatch):
    """Keep the learner progress file of tests away from the real home folder."""
    monkeypatch.setenv("NANLAB_PROGRESS", str(tmp_path / "progress.json"))


@pytest.fixture(scope="session", autouse=True)
def _shared_runs_folder(tmp_path_factory):
    """Where tests/shared_runs.py keeps each fault's run: one folder for the whole session,
    shared by the xdist workers (each worker's basetemp is a subfolder of the session's)."""
    import os

    import shared_runs

    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared-runs"
    root.mkdir(exist_ok=True)
    shared_runs.ROOT = root
    yield
    shared_runs.ROOT = None
