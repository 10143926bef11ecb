"""Stuck programs for the hang watch's tests: the five hangs of issue 26 (``HANGS``: name -> (source, the
stuck rank, what node 0's verdict says)), run on one node in watch/hang/test_hang_doctor.py and across namespaced hosts
in test_multihost.py."""

from __future__ import annotations

import textwrap

SLEEPS_BEFORE_ALL_REDUCE = textwrap.dedent(
    """
    import os, time
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    if os.environ["RANK"] == "1":
        time.sleep(600)  # the culprit
    dist.all_reduce(torch.ones(1))
    """
)

HANGS = {
    "sleep-before-first-all-reduce": (SLEEPS_BEFORE_ALL_REDUCE, 1, "is stuck at hang.py:8"),
    "spin-loop-mid-training": (textwrap.dedent(
        """
        import time
        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo")
        t = torch.ones(1)
        for step in range(100000):
            if dist.get_rank() == 1 and step == 20:
                x = 0
                while True:  # a Python loop that never ends
                    x += 1
            dist.all_reduce(t)
            time.sleep(0.01)
        """), 1, "is busy at hang.py:11"),
    "skipped-collective": (textwrap.dedent(
        """
        import time
        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo")
        t = torch.ones(4)
        for step in range(1000):
            if not (dist.get_rank() == 1 and step == 5):  # rank 1 skips one all_reduce
                dist.all_reduce(t)
            dist.barrier()
            time.sleep(0.02)
        """), 1, "waits in barrier at hang.py:11"),  # 2 workers a node: 3 ranks agree, 1 not
    "blocking-fifo-read": (textwrap.dedent(
        """
        import os
        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo")
        t = torch.ones(1)
        for step in range(5):
            dist.all_reduce(t)
        if dist.get_rank() == 1:
            fifo = os.path.join(os.environ["TMPDIR"], f"fifo-{os.getpid()}")
            os.mkfifo(fifo)
            with open(fifo) as fh:  # no writer ever comes
                fh.read()
        dist.all_reduce(t)
        """), 1, "is stuck at hang.py:13"),
    "dataloader-worker-hang": (textwrap.dedent(
        """
        import os, time
        import torch
        import torch.distributed as dist
        from torch.utils.data import DataLoader, Dataset

        class Items(Dataset):
            def __len__(self):
                return 10000

            def __getitem__(self, index):
                if os.environ["RANK"] == "0" and index == 40:
                    time.sleep(600)  # this DataLoader worker hangs
                return torch.ones(2)

        dist.init_process_group("gloo")
        for batch in DataLoader(Items(), batch_size=4, num_workers=2):
            dist.all_reduce(batch)
        """), 0, "waits for its DataLoader worker 0 (pid "),
}
