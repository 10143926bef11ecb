"""Launch overhead: `paijob-runtime train` (simulated 1-node PAI job) against `torchrun --standalone`.

Both launch the same small DDP script with the same process count, alternated;
we time command start to the first completed training step and to exit.
Target: paijob / torchrun median ratio <= 1.05.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from harness import BIN, base_env, check, progress, simulated_pai_env, summarize, timed

PROBE = Path(__file__).with_name("probe_ddp.py")


def _launchers(nproc: int) -> dict[str, tuple[list[str], dict[str, str]]]:
    return {
        "paijob-runtime": (
            [str(BIN / "paijob-runtime"), "train", "--nproc-per-node", str(nproc),
             "--backend", "gloo", "--", str(PROBE)],
            simulated_pai_env(),
        ),
        "torchrun": (
            [str(BIN / "torchrun"), "--standalone", "--nproc-per-node", str(nproc), str(PROBE)],
            {},
        ),
    }


def run(samples: int, nproc: int = 2) -> dict[str, object]:
    raw: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        marker = Path(tmp) / "first-step"
        for i in range(samples):
            progress(f"launch overhead: round {i + 1}/{samples}")
            for name, (argv, pai_env) in _launchers(nproc).items():
                marker.unlink(missing_ok=True)
                env = base_env({**pai_env, "PROBE_FIRST_STEP_FILE": str(marker)})
                result = check(timed(argv, env=env))
                first_step = float(marker.read_text()) - result.started_at
                entry = raw.setdefault(name, {"to_first_step": [], "to_exit": []})
                entry["to_first_step"].append(first_step)
                entry["to_exit"].append(result.seconds)
    out: dict[str, object] = {"nproc_per_node": nproc, "raw_seconds": raw}
    for metric in ("to_first_step", "to_exit"):
        ours = summarize(raw["paijob-runtime"][metric])
        theirs = summarize(raw["torchrun"][metric])
        out[metric] = {
            "paijob-runtime": ours,
            "torchrun": theirs,
            "ratio": ours["median"] / theirs["median"],
            "target": 1.05,
        }
    return out
