"""The distributed layer (contract section 13): `Mesh`, `ShardSpec`, distributed tensors and the
collectives, over MPI (mpi4py) for host arrays and NCCL for device arrays.

Importing this package imports neither mpi4py nor NCCL; the first `Mesh` starts MPI (a process
started without a launcher is a job of one). `dist.collective.all_reduce` and the like are the
design documents' spelling of the same functions.
"""

from types import SimpleNamespace

from tessera.base.errors import DistError
from tessera.dist.collectives import Handle, all_gather, all_reduce, all_to_all, broadcast, reduce_scatter
from tessera.dist.mesh import Mesh
from tessera.dist.shardspec import ShardSpec
from tessera.dist.tensor import DistTensor, from_numpy, tensor

collective = SimpleNamespace(all_reduce=all_reduce, all_gather=all_gather, reduce_scatter=reduce_scatter,
                             broadcast=broadcast, all_to_all=all_to_all)

__all__ = ["DistError", "DistTensor", "Handle", "Mesh", "ShardSpec", "all_gather", "all_reduce", "all_to_all",
           "broadcast", "collective", "from_numpy", "reduce_scatter", "tensor"]
