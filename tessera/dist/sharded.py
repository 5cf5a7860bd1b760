"""What the collectives need of a distributed tensor, so that they work on it without importing
the module that defines it (tensor.py, whose `resolve` and `to_numpy` call the collectives).

`DistTensor` is the one kind: `Sharded` declares its name, global shape and dtype, layout, mesh
and local shard, the fields every process must agree on, and how to make the tensor that a
collective returns (same name, shape, dtype and mesh; a new layout and shard).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from tessera.dist.mesh import Mesh
from tessera.dist.shardspec import Placement


class Sharded(ABC):
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    placement: Placement
    mesh: Mesh

    @property
    @abstractmethod
    def local(self) -> Any:
        """This process's shard."""

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @abstractmethod
    def on_device(self) -> bool:
        """Whether the shard is a device buffer (NCCL moves it) rather than a NumPy array (MPI)."""

    @abstractmethod
    def meta(self) -> list[tuple[str, tuple[int, ...]]]:
        """The fields every process must agree on before this tensor's data move."""

    @abstractmethod
    def show(self) -> dict[str, Any]:
        """How to print each field of `meta` when the processes disagree on it."""

    @abstractmethod
    def with_shards(self, placement: Placement, local: Any, shape: tuple[int, ...] | None = None) -> Sharded:
        """The tensor a collective returns: this one's name, dtype and mesh, another layout and shard
        (and another global shape where the collective changes it: a broadcast of one block)."""
