"""Horovod's PyTorch API over collectived: ``import collective.torch as hvd``.

Start the processes with a launcher (``collectiverun -np 4 python train.py``,
or mpirun/torchrun with a collectived on the node), call ``hvd.init()``, and
use the collectives, ``DistributedOptimizer``, ``broadcast_parameters`` and
the rest as with ``horovod.torch``, on CPU and CUDA tensors (one GPU per
process; see ``collective.torch.devices``).
"""

# torch before collective._core (see collective/__init__.py). Without torch
# the package still imports (one wheel serves environments with and without
# it, as the extension never links libtorch); using it raises ImportError
# saying what is missing (collective/_missing_framework.py).
try:
    import torch  # noqa: F401  isort:skip
except ModuleNotFoundError as _error:
    if _error.name != 'torch':
        raise
    from collective._missing_framework import missing_framework as _missing_framework
    __getattr__ = _missing_framework(__name__, 'PyTorch', 'torch', _error)
    __all__ = []
else:
    from collective.common.util import gpu_available, num_rank_is_power_2, split_list
    from collective.torch.arena import empty, in_arena, to_arena, zeros
    from collective.torch import elastic
    from collective.torch.compression import Compression
    from collective.torch.functions import broadcast_optimizer_state, broadcast_parameters
    from collective.torch.mpi_ops import *  # noqa: F401,F403  (the collectives: see mpi_ops.__all__)
    from collective.torch.mpi_ops import __all__ as _mpi_ops_all
    from collective.torch.object_collectives import allgather_object, broadcast_object
    from collective.torch.optimizer import DistributedOptimizer
    from collective.torch.sync_batch_norm import SyncBatchNorm

    __all__ = list(_mpi_ops_all) + [
        'gpu_available', 'num_rank_is_power_2', 'split_list',
        'Compression', 'DistributedOptimizer', 'SyncBatchNorm', 'allgather_object',
        'broadcast_object', 'broadcast_optimizer_state', 'broadcast_parameters', 'elastic', 'empty',
        'in_arena', 'to_arena', 'zeros',
    ]
