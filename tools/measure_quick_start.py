"""Time the README's two quick-start commands on a fresh clone and record them in docs/quick_start_times.json.

The README quotes these figures and tests/core/test_docs.py checks that it quotes the recorded ones, so a
suite that grows slower is caught the day this is rerun. Usage (from the checkout, after committing):

    python tools/measure_quick_start.py            # clones HEAD into a temporary folder, ~15 minutes
    python tools/measure_quick_start.py --dry-run  # the same measurement, printed and not written
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "docs" / "quick_start_times.json"
PYTEST_SUMMARY = re.compile(r"(\d+) passed(?:, (\d+) skipped)?.* in ([\d.]+)s")


def timed(command: list[str], cwd: Path) -> tuple[float, str]:
    """Seconds the command took and its output; a failing command stops the measurement."""
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed (exit {done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return seconds, done.stdout + done.stderr


def measure(clone: Path) -> dict:
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    test_seconds, test_output = timed(["make", "test"], clone)
    summary = PYTEST_SUMMARY.findall(test_output)[-1]
    # `make train` runs after `make test` has set up .venv, so its set-up time is the part of `make test`'s
    # wall time that pytest did not report.
    train_seconds, _ = timed(["make", "train"], clone)
    run_seconds = json.loads((clone / "runs" / "default" / "summary.json").read_text())["wall_seconds"]
    setup_seconds = test_seconds - float(summary[2])
    return {
        "make_test": {"with_setup_seconds": round(test_seconds), "pytest_seconds": round(float(summary[2])),
                      "passed": int(summary[0]), "skipped": int(summary[1] or 0)},
        "make_train": {"with_setup_seconds": round(train_seconds + setup_seconds), "run_seconds": round(run_seconds)},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="print the record, do not write it")
    parser.add_argument("--measured-on", default=json.loads(RECORD.read_text())["measured_on"],
                        help="what the machine was and what else ran on it")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        record = {"measured_on": args.measured_on, "date": datetime.date.today().isoformat(),
                  "command": "python tools/measure_quick_start.py", **measure(Path(folder) / "rlxf")}
    text = json.dumps(record, indent=2) + "\n"
    print(text, end="")
    if not args.dry_run:
        RECORD.write_text(text)


if __name__ == "__main__":
    main()
