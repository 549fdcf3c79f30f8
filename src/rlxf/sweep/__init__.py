"""Seed sweeps: run one recipe over several seeds and report how its held-out metric moves on each
(``rlxf sweep RECIPE --seeds 5``). A recipe is trusted when its *worst* seed improves, not its mean."""
