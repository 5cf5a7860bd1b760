"""Shared fixtures. `--update-golden` rewrites tests/golden/*.cu from the current compiler."""

from __future__ import annotations

import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
SAMPLES = sorted((ROOT / "samples").glob("*.tsr"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", help="rewrite the golden .cu files")


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `gpu` run only where a CUDA driver and device are present."""
    from tessera.runtime.devices import cuda_status

    ok, why = cuda_status()
    if ok:
        return
    skip = pytest.mark.skip(reason=f"needs a GPU: {why}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
