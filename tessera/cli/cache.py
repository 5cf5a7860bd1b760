"""`tesserac cache info|clear`: show or empty the compile caches."""

from __future__ import annotations

import argparse
import warnings


def run(argv: list[str]) -> int:
    from tessera.runtime.backends import NAMES
    from tessera.runtime.cache.disk import DiskCache, TesseraCacheWarning
    from tessera.runtime.cache.fingerprint import fingerprint

    warnings.simplefilter("ignore", TesseraCacheWarning)  # shown below as each folder's note

    p = argparse.ArgumentParser(prog="tesserac cache", description="Show or clear Tessera's compile cache.")
    p.add_argument("action", choices=("info", "clear"))
    args = p.parse_args(argv)
    for kind in NAMES:
        cache = DiskCache(kind)
        if args.action == "info":
            info = cache.info()
            state = "" if info["enabled"] else " (disabled)"
            print(f"{kind}: {info['path']}: {info['entries']} entries, {info['bytes']} bytes{state}")
            if info["note"]:
                print(f"  note: {info['note']}")
        else:
            print(f"{kind}: removed {cache.clear()} entries")
    if args.action == "info":
        print(f"compiler fingerprint: {fingerprint()} (part of every cache key)")
    return 0
