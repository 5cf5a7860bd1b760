#!/usr/bin/env python3
"""The records of a device run of scripts/gpu_check.sh, gathered from what its steps wrote to the
output folder: `results.json` (machine-readable: every step with its exit status, time and limit;
the versions; the GPU tests' counts and failures; every benchmark row) and `RESULTS-section.md`, the
section to paste at the top of bench/RESULTS.md's log. Standard library only: it runs with the
device image's Python before or without Tessera.

    python3 scripts/gpu_report.py versions OUT   # print and record the machine and software versions
    python3 scripts/gpu_report.py report OUT     # write OUT/results.json and OUT/RESULTS-section.md
"""

from __future__ import annotations

import datetime
import importlib
import json
import os
import platform
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any


def _version(module: str) -> str | None:
    try:
        return str(getattr(importlib.import_module(module), "__version__", "?"))
    except Exception:  # noqa: BLE001 - a missing or broken package is recorded as missing
        return None


def _nvidia_smi() -> dict[str, str]:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return {}
    try:
        out = subprocess.run([exe, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    name, driver, memory = ([x.strip() for x in out.splitlines()[0].split(",")] + ["", "", ""])[:3]
    return {"gpu": name, "driver": driver, "memory": memory}


def versions() -> dict[str, Any]:
    """The machine and the software the run uses (Tessera's view of CUDA included)."""
    info: dict[str, Any] = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                            "python": platform.python_version(), "machine": platform.machine(), **_nvidia_smi()}
    for module in ("tessera", "numpy", "torch", "cupy", "cuda.bindings", "lark", "mpi4py"):
        info[module] = _version(module)
    try:
        import tessera
        import tessera.runtime
        import tessera.transpile
        from tessera.runtime.devices import cuda_status

        info["tessera_from"] = str(Path(tessera.__file__).parent)
        info["cuda_device"] = cuda_status()[1]
        # scripts/gpu_check.sh names the folder it installed Tessera into: the package and its
        # subpackages must come from there, not from a checkout's source folders.
        expected = os.environ.get("GPU_CHECK_TARGET")
        if expected:
            where = [Path(m.__file__).resolve() for m in (tessera, tessera.transpile, tessera.runtime)]
            if not all(w.is_relative_to(Path(expected).resolve()) for w in where):
                info["tessera_error"] = f"Tessera is not the one installed in {expected}: {', '.join(map(str, where))}"
    except Exception as e:  # noqa: BLE001 - recorded, the steps after it will show the rest
        info["tessera_error"] = f"{type(e).__name__}: {e}"
    try:
        from tessera.runtime.cuda.nvrtc import nvrtc_version, supported_archs

        info["nvrtc"] = ".".join(map(str, nvrtc_version()))
        info["nvrtc_archs"] = " ".join(f"sm_{a}" for a in supported_archs())
    except Exception as e:  # noqa: BLE001
        info["nvrtc"] = f"unavailable: {e}"
    try:
        import torch

        info["torch_cuda"] = torch.version.cuda
    except Exception:  # noqa: BLE001
        pass
    return info


def _steps(out: Path) -> list[dict[str, Any]]:
    steps = []
    path = out / "steps.tsv"
    if path.is_file():
        for line in path.read_text().splitlines():
            name, rc, seconds, limit = line.split("\t")
            steps.append({"step": name, "exit": int(rc), "seconds": float(seconds), "limit": int(limit),
                          "timed_out": int(rc) in (124, 137)})
    return steps


def _tests(out: Path) -> dict[str, Any]:
    path = out / "gpu-tests.xml"
    if not path.is_file():
        return {}
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root)
    total = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    failed = [f"{c.get('classname')}::{c.get('name')}" for s in suites for c in s.iter("testcase")
              if c.find("failure") is not None or c.find("error") is not None]
    return {**total, "passed": total["tests"] - total["failures"] - total["errors"] - total["skipped"],
            "failed": failed}


def report(out: Path) -> dict[str, Any]:
    """Gather the run's records into OUT/results.json and OUT/RESULTS-section.md; returns them."""
    results: dict[str, Any] = {"steps": _steps(out), "tests": _tests(out)}
    for name in ("versions", "gpu_bench"):
        path = out / f"{name}.json"
        if path.is_file():
            results[name] = json.loads(path.read_text())
    results["ok"] = bool(results["steps"]) and all(s["exit"] == 0 for s in results["steps"])
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    (out / "RESULTS-section.md").write_text(section(results))
    return results


def section(results: dict[str, Any]) -> str:
    """The Markdown of one device run, as bench/RESULTS.md's log keeps it."""
    v = results.get("versions", {})
    bench = results.get("gpu_bench", {})
    lines = [f"### {v.get('date', '?')}: {v.get('gpu', bench.get('device', {}).get('name', '?'))}", "",
             f"Driver {v.get('driver', '?')}, NVRTC {v.get('nvrtc', '?')}, cuda-bindings {v.get('cuda.bindings', '?')}, "
             f"PyTorch {v.get('torch', '-')} (CUDA {v.get('torch_cuda', '-')}), CuPy {v.get('cupy', '-')}, "
             f"Python {v.get('python', '?')}, Tessera {v.get('tessera', '?')}.", ""]
    t = results.get("tests", {})
    if t:
        lines.append(f"GPU tests: {t['passed']} passed, {t['failures'] + t['errors']} failed, {t['skipped']} skipped"
                     + (": " + ", ".join(t["failed"]) if t["failed"] else "") + ".")
    steps = ", ".join(f"{s['step']} {s['seconds']:.0f} s" + (f" (exit {s['exit']})" if s["exit"] else "")
                      for s in results.get("steps", []))
    lines += [f"Steps: {steps}.", ""]
    rows = bench.get("rows", [])
    if rows:
        lines += ["| row | ms | of peak | reference ms | tessera / reference | goal |", "|---|---|---|---|---|---|"]
        for r in rows:
            ref = f"{r['reference_ms']} ({r['reference']})" if r.get("reference_ms") else "-"
            ratio = r.get("tessera_over_reference") or "-"
            lines.append(f"| {r['row']} | {r['ms']} | {r['fraction_of_peak']:.1%} {r['peak']} | {ref} | {ratio} | "
                         f"{r.get('goal') or '-'} |")
        lines.append("")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("versions", "report"):
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    if argv[0] == "versions":
        info = versions()
        (out / "versions.json").write_text(json.dumps(info, indent=1) + "\n")
        for k, value in info.items():
            print(f"{k}: {value}")
        return 0 if "tessera_error" not in info else 1
    results = report(out)
    print((out / "RESULTS-section.md").read_text())
    return 0 if results["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
