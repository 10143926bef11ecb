"""The recipes leave their process group so that Python never frees it under the GIL.

With torch 2.4.1, DDP's reducer owned the group's last reference after
``destroy_process_group``; freeing the model then ran ``~ProcessGroupGloo``, which joins
gloo's worker threads while holding the GIL, and a worker still freeing a finished
collective waits for that GIL: the 2-rank recipe hung in 1 run of 36. A group that is
never freed before the process ends cannot deadlock there; freeing shows as its threads
ending, which is what these tests count.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from training_helpers import run_single

SCRIPT = textwrap.dedent("""
    import gc, os, sys
    import torch, torch.distributed as dist, torch.nn as nn
    from paijob.runtime.recipes import distributed
    from paijob.common.ports import draw

    def threads():
        return len(os.listdir("/proc/self/task"))

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{draw()[0]}", rank=0, world_size=1)
    model = nn.parallel.DistributedDataParallel(nn.Linear(4, 1))
    model(torch.randn(8, 4)).sum().backward()
    distributed.leave_process_group()
    alive = threads()
    del model
    gc.collect()
    print(alive, threads(), flush=True)
    os._exit(0)
""")


def test_freeing_the_ddp_model_after_leaving_does_not_free_the_group(tmp_path: Path) -> None:
    result = run_single(["-c", SCRIPT], cwd=tmp_path, timeout=60)
    assert result.returncode == 0, result.stderr
    alive, after = (int(word) for word in result.stdout.split())
    assert after == alive, f"gloo's threads ended when the model was freed: {alive} -> {after}"
