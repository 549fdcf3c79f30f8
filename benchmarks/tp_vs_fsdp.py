"""When tensor parallelism pays against FSDP for one training step: ``rlxf/runtime/tp_cost_model.py`` for
dense 7B / 13B / 34B / 70B (Llama 2 / Code Llama shapes) on 8 to 128 H100s (8 a node, NVLink 450 GB/s a
direction, one 400 Gb/s NIC per GPU), 1,024 sequences of 4,096 tokens a step.

    .venv/bin/python benchmarks/tp_vs_fsdp.py

Prints JSON: per model and GPU count, the step seconds of pure compute at 40% MFU (no communication,
no recomputation), those of plain FSDP and FSDP with recomputation (``null``:
does not fit), the best TP layout, its step seconds and micro-batch tokens, and the best layout overall.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import emit  # noqa: E402
from rlxf.runtime.sync_cost_model import Cluster  # noqa: E402
from rlxf.runtime.tp_cost_model import DenseModel, TrainLoad, layout_costs  # noqa: E402

MODELS = [
    DenseModel("7B", 6.7e9, layers=32, hidden=4096),
    DenseModel("13B", 13e9, layers=40, hidden=5120),
    DenseModel("34B", 34e9, layers=48, hidden=8192),
    DenseModel("70B", 70e9, layers=80, hidden=8192),
]
GPUS = (8, 16, 64, 128)


def finite(seconds: float) -> float | None:
    return round(seconds, 1) if seconds != float("inf") else None


def name(cost) -> str:
    return f"tp{cost.layout.tp}" + (" + recompute" if cost.layout.recompute else "")


def rows(cluster: Cluster, load: TrainLoad) -> list[dict]:
    out = []
    for model in MODELS:
        for gpus in GPUS:
            costs = layout_costs(model, cluster, gpus, load)
            fsdp = {c.layout.recompute: c for c in costs if c.layout.tp == 1}
            tp = min((c for c in costs if c.layout.tp > 1), key=lambda c: c.step_s)
            best = min(costs, key=lambda c: (c.step_s, c.layout.tp, c.layout.recompute))
            out.append({
                "model": model.name, "gpus": gpus,
                "fsdp_s": finite(fsdp[False].step_s), "fsdp_recompute_s": finite(fsdp[True].step_s),
                "compute_bound_s": round(6 * model.params * load.tokens_per_step / (gpus * cluster.flops * load.mfu), 1),
                "best_tp": name(tp) if tp.fits else None, "best_tp_s": finite(tp.step_s),
                "best_tp_micro_tokens": tp.micro_tokens,
                "best": name(best) if best.fits else None,
            })
    return out


if __name__ == "__main__":
    emit({"cluster": "h100", "rows": rows(Cluster(), TrainLoad())})
