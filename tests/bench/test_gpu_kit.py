"""The GPU kit (scripts/gpu_wheels.sh, scripts/gpu_check.sh, scripts/gpu_report.py; README "On a GPU
machine"): the report gathers a device run's records into results.json and the section of
bench/RESULTS.md, and the device command refuses to start without the carried wheels. The whole
dry run (an offline install from .whl/, the GPU tests' collection, the benchmark's --dry-run) is a
CI step (.ci/run), not a test: it needs the wheels, which are downloaded there."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT, load_script


def _report():
    return load_script("scripts/gpu_report.py", "gpu_report")


JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0" failures="1"
skipped="2" tests="5"><testcase classname="tests.a" name="test_ok"/><testcase classname="tests.a" name="test_bad">
<failure message="x"/></testcase></testsuite></testsuites>"""


def test_the_report_gathers_steps_tests_versions_and_rows(tmp_path: Path) -> None:
    report = _report()
    (tmp_path / "steps.tsv").write_text("install-wheels\t0\t4.200\t120\ngpu-tests\t1\t81.500\t270\n"
                                        "gpu-bench\t124\t150.000\t150\n")
    (tmp_path / "gpu-tests.xml").write_text(JUNIT)
    (tmp_path / "versions.json").write_text(json.dumps({"date": "2026-11-27 10:00 UTC", "gpu": "NVIDIA H100",
                                                       "driver": "580.159.04", "nvrtc": "13.0"}))
    (tmp_path / "gpu_bench.json").write_text(json.dumps({"device": {"name": "NVIDIA H100"}, "rows": [
        {"row": "sgemm_4096", "ms": 2.5, "fraction_of_peak": 0.6, "peak": "FP32 peak", "reference_ms": 2.0,
         "reference": "PyTorch", "tessera_over_reference": 1.25, "goal": "reference/tessera >= 0.8"}]}))
    results = report.report(tmp_path)
    assert not results["ok"]  # a failed test step and a timed-out benchmark
    assert [s["timed_out"] for s in results["steps"]] == [False, False, True]
    assert results["tests"] == {"tests": 5, "failures": 1, "errors": 0, "skipped": 2, "passed": 2,
                                "failed": ["tests.a::test_bad"]}
    assert json.loads((tmp_path / "results.json").read_text()) == results
    md = (tmp_path / "RESULTS-section.md").read_text()
    assert md.startswith("### 2026-11-27 10:00 UTC: NVIDIA H100\n")
    assert "GPU tests: 2 passed, 1 failed, 2 skipped: tests.a::test_bad." in md
    assert "gpu-bench 150 s (exit 124)" in md
    assert "| sgemm_4096 | 2.5 | 60.0% FP32 peak | 2.0 (PyTorch) | 1.25 | reference/tessera >= 0.8 |" in md


def test_the_versions_name_where_tessera_comes_from(tmp_path: Path, monkeypatch) -> None:
    import tessera

    report = _report()
    info = report.versions()
    assert info["tessera"] and info["tessera_from"] and "tessera_error" not in info
    assert info["nvrtc"].split(".")[0] in ("12", "13")
    monkeypatch.setenv("GPU_CHECK_TARGET", str(tmp_path))  # Tessera installed elsewhere than this process's
    assert "is not the one installed in" in report.versions()["tessera_error"]
    monkeypatch.setenv("GPU_CHECK_TARGET", str(Path(tessera.__file__).resolve().parents[1]))  # where it is
    assert "tessera_error" not in report.versions()


def test_the_device_command_needs_the_carried_wheels(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "scripts").mkdir(parents=True)
    for name in ("gpu_check.sh", "gpu_report.py"):
        shutil.copy(ROOT / "scripts" / name, tree / "scripts" / name)
    done = subprocess.run(["bash", str(tree / "scripts" / "gpu_check.sh"), "--dry-run", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "run scripts/gpu_wheels.sh first" in done.stderr
    usage = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--help"], capture_output=True, text=True)
    assert usage.returncode == 0 and "--dry-run" in usage.stdout
    wrong = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--fast"], capture_output=True, text=True)
    assert wrong.returncode == 2


def test_the_report_refuses_a_bad_command_line() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_report.py"), "summary"], capture_output=True,
                          text=True)
    assert done.returncode == 2 and "gpu_report.py versions OUT" in done.stderr
