"""Arbitrary Python objects between ranks: ``broadcast_object`` and ``allgather_object``.

Each object is serialized by cloudpickle, as in Horovod, so that lambdas,
local functions and classes defined in ``__main__`` or inside a function
travel too; the bytes go in a uint8 tensor, and their length first, so that
the receivers can allocate the payload.
"""

import io
import pickle

import torch

from collective.torch.mpi_ops import allgather, broadcast_, global_process_set, rank


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """
    Serializes and broadcasts an object from root rank to all other processes.
    Typical usage is to broadcast the ``optimizer.state_dict()``, for example:

    .. code-block:: python

        state_dict = broadcast_object(optimizer.state_dict(), 0)
        if collective.torch.rank() > 0:
            optimizer.load_state_dict(state_dict)

    Arguments:
        obj: An object that cloudpickle can serialize. Only the root's matters;
             the other ranks may pass anything (e.g. ``None``).
        root_rank: The (global) rank of the process from which
                   the object will be broadcasted to all other processes.
        name: Optional name of the broadcasts; every rank must use the same.
              Defaults to ``broadcast_object``.
        process_set: Process set object to limit this operation to a subset of
                     processes. Default is the global process set.

    Returns:
        The object that was broadcast from the ``root_rank``.
    """
    # Unlike Horovod, the default name does not depend on type(obj): the other
    # ranks often pass None, and differing names would never match.
    name = name or 'broadcast_object'
    is_root = rank() == root_rank

    payload = _serialize(obj) if is_root else None
    length = torch.tensor([payload.numel() if is_root else 0], dtype=torch.int64)
    broadcast_(length, root_rank, name=name + '.sz', process_set=process_set)
    if not is_root:
        payload = torch.empty(int(length.item()), dtype=torch.uint8)
    broadcast_(payload, root_rank, name=name + '.t', process_set=process_set)
    return obj if is_root else _deserialize(payload)


def allgather_object(obj, name=None, process_set=global_process_set):
    """
    Serializes and allgathers an object from all other processes.

    Arguments:
        obj: An object that cloudpickle can serialize.
        name: Optional name of the allgathers; every rank must use the same.
              Defaults to ``allgather_object``.
        process_set: Process set object to limit this operation to a subset of
                     processes. Default is the global process set.

    Returns:
        The list of objects that were allgathered across all ranks of the
        process set, in rank order.
    """
    name = name or 'allgather_object'
    payload = _serialize(obj)
    lengths = allgather(torch.tensor([payload.numel()], dtype=torch.int64),
                        name=name + '.sz', process_set=process_set)
    gathered = allgather(payload, name=name + '.t', process_set=process_set)
    return [_deserialize(chunk) for chunk in torch.split(gathered, lengths.tolist())]


def _serialize(obj):
    """Serializes obj with cloudpickle into a uint8 tensor."""
    try:
        import cloudpickle  # pylint: disable=import-outside-toplevel
    except ModuleNotFoundError as error:
        raise ImportError(
            'broadcast_object and allgather_object serialize with cloudpickle, as Horovod '
            'does: pip install cloudpickle (or: pip install "collectived[torch]")') from error
    buffer = io.BytesIO()
    cloudpickle.dump(obj, buffer)
    return torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)


def _deserialize(tensor):
    """The object serialized by _serialize into a uint8 tensor (cloudpickle's
    output is ordinary pickle data: any pickle loader reads it)."""
    return pickle.load(io.BytesIO(tensor.numpy().tobytes()))
