"""Horovod's TensorFlow 2 API over collectived: ``import collective.tensorflow as hvd``.

Start the processes with a launcher (``collectiverun -np 4 python train.py``),
call ``hvd.init()``, and use the collectives, ``broadcast_variables`` and
``DistributedGradientTape`` as with ``horovod.tensorflow``, eagerly or inside
``tf.function``, on CPU tensors; TF1-style graphs take ``DistributedOptimizer``,
``broadcast_global_variables`` and ``BroadcastGlobalVariablesHook`` (``graph_api``). The ops are TensorFlow ops with
asynchronous kernels (see ``mpi_ops``); what is not built yet is listed in
README "TensorFlow".
"""

from collective.common.util import gpu_available, num_rank_is_power_2, split_list
from collective.tensorflow import elastic, util
from collective.tensorflow.arena import in_arena, to_arena
from collective.tensorflow.compression import Compression
from collective.tensorflow.functions import (DistributedGradientTape,
                                             PartialDistributedGradientTape, allgather_object,
                                             allreduce, broadcast_, broadcast_object,
                                             broadcast_object_fn, broadcast_variables,
                                             grouped_allreduce, grouped_reducescatter,
                                             reducescatter)
from collective.tensorflow.graph_api import (BroadcastGlobalVariablesHook, DistributedOptimizer,
                                             broadcast_global_variables)
from collective.tensorflow.mpi_ops import *  # noqa: F401,F403  (see mpi_ops.__all__)
from collective.tensorflow.sync_batch_norm import SyncBatchNormalization
from collective.tensorflow.mpi_ops import __all__ as _mpi_ops_all
from collective.tensorflow.util import (_cache, _executing_eagerly, _make_subgraph,  # noqa: F401
                                        refs_to_vars, vars_to_refs)


__all__ = list(_mpi_ops_all) + [
    'gpu_available', 'num_rank_is_power_2', 'split_list',
    'BroadcastGlobalVariablesHook', 'Compression', 'DistributedGradientTape',
    'DistributedOptimizer', 'elastic', 'PartialDistributedGradientTape',
    'SyncBatchNormalization', 'allgather_object',
    'allreduce', 'broadcast_', 'broadcast_global_variables', 'broadcast_object',
    'broadcast_object_fn', 'broadcast_variables',
    'grouped_allreduce', 'grouped_reducescatter', 'in_arena', 'reducescatter', 'refs_to_vars',
    'to_arena',
    'vars_to_refs',
]
