"""paijob-runtime leaves nothing in TMPDIR: torch's compile cache goes to a folder of the run's own.

torch (2.13) creates $TMPDIR/torchinductor_<user> in every worker with its first optimizer and never
removes it, so each laptop run of the tour or a recipe left it behind (issue 28). The launcher points
TORCHINDUCTOR_CACHE_DIR at a folder it removes when the node ends, unless the user set it.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest
from runtime_helpers import RUNTIME, base_env

STEP = textwrap.dedent(
    """
    import json, os, sys
    import torch

    weight = torch.zeros(2, requires_grad=True)
    optimizer = torch.optim.SGD([weight], lr=0.1)
    weight.sum().backward()
    optimizer.step()
    with open(os.path.join(sys.argv[1], f"rank{os.environ.get('RANK', '0')}.json"), "w") as out:
        json.dump({"cache": os.environ.get("TORCHINDUCTOR_CACHE_DIR")}, out)
    """
)


@pytest.mark.parametrize("mode", ["per-gpu", "per-node"])
def test_a_run_leaves_its_tmpdir_empty(tmp_path: Path, mode: str) -> None:
    script, results, tmp = tmp_path / "step.py", tmp_path / "results", tmp_path / "tmp"
    script.write_text(STEP)
    results.mkdir()
    tmp.mkdir()
    env = {**base_env(), "TMPDIR": str(tmp)}
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    done = subprocess.run([*RUNTIME, "train", "--mode", mode, "--nproc-per-node", "2" if mode == "per-gpu" else "1",
                           str(script), str(results)], env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    cache = json.loads((results / "rank0.json").read_text())["cache"]
    assert cache and Path(cache).parent == tmp, cache  # the workers saw the run's own folder
    assert sorted(p.name for p in tmp.iterdir()) == []


@pytest.mark.slow
def test_a_cache_dir_the_user_set_is_kept(tmp_path: Path) -> None:
    script, results, tmp, cache = tmp_path / "step.py", tmp_path / "results", tmp_path / "tmp", tmp_path / "cache"
    script.write_text(STEP)
    results.mkdir()
    tmp.mkdir()
    env = {**base_env(), "TMPDIR": str(tmp), "TORCHINDUCTOR_CACHE_DIR": str(cache)}
    done = subprocess.run([*RUNTIME, "train", "--nproc-per-node", "1", str(script), str(results)], env=env,
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads((results / "rank0.json").read_text())["cache"] == str(cache)
