"""Training on a campaign's labels: export it, then start ``rlxf train`` (reward model or DPO) on the file.

The run is an ordinary ``rlxf train`` process (its own run directory under the studio's runs folder,
so it appears in the run list and its curves update while it trains); its console goes to
``RUN_DIR.log`` beside it. The recipe is the built-in ``reward_model`` or ``dpo`` recipe unless a path
is given; the data section is pointed at the export (``data.task=preference_file``).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from rlxf.studio.limits import InputError

RECIPES = {"reward_model": "reward_model.yaml", "dpo": "dpo.yaml"}


def recipe_path(kind: str) -> str:
    if kind not in RECIPES:
        raise InputError(f"train: kind must be one of {', '.join(RECIPES)}, got {kind[:40]!r}")
    return str(Path(__file__).resolve().parent.parent / "recipes" / RECIPES[kind])


def train_command(kind: str, export_path: str | Path, run_dir: str | Path, overrides: list[str] = ()) -> list[str]:
    """The ``rlxf train`` command line for a preference export."""
    return [sys.executable, "-m", "rlxf.cli", "train", recipe_path(kind), "data.task=preference_file", "data.task_args={}",
            f"data.path={export_path}", f"run_dir={run_dir}", "logging.progress_bar=false", *overrides]


def campaign_overrides(campaign: dict, rows: list[dict]) -> list[str]:
    """A sampled campaign trains from the checkpoint that wrote its responses; the recipe's SFT warm-up
    runs only when every exported row has an ``sft_target`` to imitate."""
    overrides = [f"model.path={campaign['checkpoint']}"] if campaign.get("checkpoint") else []
    if not all("sft_target" in r for r in rows):
        overrides.append("sft.steps=0")
    return overrides


def start_training(kind: str, export_path: str | Path, runs_dir: Path, campaign_name: str,
                   overrides: list[str] = ()) -> dict:
    """Start the run in the background; returns its run directory, log file and process id."""
    safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in campaign_name)[:40]
    run_dir = Path(runs_dir) / f"studio-{safe}-{kind}-{time.strftime('%Y%m%d-%H%M%S')}"
    log = run_dir.with_suffix(".log")
    command = train_command(kind, export_path, run_dir, list(overrides))
    with log.open("w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    return {"run_dir": str(run_dir), "log": str(log), "pid": process.pid, "command": command}
