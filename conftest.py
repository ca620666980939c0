"""Every nbval run of solutions/ and labs/ also checks the statuses of the check cells."""

pytest_plugins = ["nanlab.course.pytest_plugin"]


def pytest_report_header(config):
    """Which CPU kernel path this run takes: results near a threshold depend on it."""
    import os

    import torch

    threads = os.environ.get("OMP_NUM_THREADS", "torch's default")
    return (f"torch {torch.__version__}, CPU kernels: "
            f"{torch.backends.cpu.get_cpu_capability()}, OMP_NUM_THREADS={threads}")
