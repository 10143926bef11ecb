"""paijob: OpenPAI jobs for distributed PyTorch, from a laptop to a cluster and back.

The client side (this package minus ``paijob.runtime``) must never import torch.
"""

from __future__ import annotations

__version__ = "0.1.0"
