"""Every experiment's smoke run, and the default `internalize run logicot`, summarised without timings.

    python scripts/smoke_summaries.py run OUT          # writes OUT/<experiment>.json
    python scripts/smoke_summaries.py compare A B      # one line per experiment: identical or what differs

A restructure keeps behaviour: run it before and after, then compare. Wall-clock figures (any key
naming `seconds`) are dropped, since they differ between any two runs.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def without_timings(value):
    if isinstance(value, dict):
        return {k: without_timings(v) for k, v in value.items() if "seconds" not in k}
    if isinstance(value, list):
        return [without_timings(v) for v in value]
    return value


def experiments() -> list[str]:
    from internalize.config import available

    return list(available())


def run(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    cases = [(f"{name}--smoke", [name, "--smoke"]) for name in experiments()] + [("logicot", ["logicot"])]
    with tempfile.TemporaryDirectory() as tmp:
        for label, args in cases:
            folder = Path(tmp) / label
            done = subprocess.run(["internalize", "run", *args, "--quiet", "--out", str(folder)],
                                  capture_output=True, text=True)
            if done.returncode:
                print(f"{label}: exit {done.returncode}: {done.stdout[-300:]}{done.stderr[-300:]}")
                continue
            summary = json.loads((folder / "summary.json").read_text())
            (out / f"{label}.json").write_text(json.dumps(without_timings(summary), indent=1, sort_keys=True))
            print(f"{label}: written", flush=True)
            shutil.rmtree(folder)


def differences(a, b, where=""):
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                yield f"{where}.{key} only in {'after' if key not in a else 'before'}"
            else:
                yield from differences(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            yield from differences(x, y, f"{where}[{i}]")
    elif a != b:
        yield f"{where}: {a!r} -> {b!r}"


def compare(before: Path, after: Path) -> int:
    names = sorted({p.stem for p in before.glob("*.json")} | {p.stem for p in after.glob("*.json")})
    bad = 0
    for name in names:
        a, b = before / f"{name}.json", after / f"{name}.json"
        if not (a.exists() and b.exists()):
            print(f"{name}: only {'before' if a.exists() else 'after'}")
            bad += 1
            continue
        found = list(differences(*(without_timings(json.loads(f.read_text())) for f in (a, b))))
        print(f"{name}: {'identical' if not found else f'{len(found)} differences: ' + '; '.join(found[:5])}")
        bad += bool(found)
    print(f"{len(names) - bad} of {len(names)} identical")
    return 1 if bad else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["run"] and len(sys.argv) == 3:
        run(Path(sys.argv[2]))
    elif sys.argv[1:2] == ["compare"] and len(sys.argv) == 4:
        sys.exit(compare(Path(sys.argv[2]), Path(sys.argv[3])))
    else:
        sys.exit(__doc__)
