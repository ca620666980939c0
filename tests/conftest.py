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
