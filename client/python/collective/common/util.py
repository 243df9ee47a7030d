"""The helpers Horovod's frameworks export from ``horovod.common.util``:
``num_rank_is_power_2``, ``split_list`` and ``gpu_available``."""

from collective.common.basics import cuda_built


def num_rank_is_power_2(num_rank):
    """Whether ``num_rank`` is a power of two (what Horovod's Adasum asks of a set's size)."""
    return num_rank != 0 and (num_rank & (num_rank - 1)) == 0


def split_list(l, n):  # noqa: E741 (Horovod's parameter name)
    """The list ``l`` in ``n`` consecutive chunks whose lengths differ by at most one, the
    longer first (Horovod's ``split_list(l, n)``)."""
    d, r = divmod(len(l), n)
    return [l[i * d + min(i, r):(i + 1) * d + min(i + 1, r)] for i in range(n)]


def gpu_available(ext_base_name, verbose=False):
    """Whether the framework named in ``ext_base_name`` (``'torch'``, ``'horovod.torch'``,
    ``'tensorflow'``, ...) sees a GPU and collectived's GPU path is built, as Horovod's asks
    its extension."""
    if verbose:
        print(f'Checking whether extension {ext_base_name} was running with GPU.')
    if not cuda_built():
        return False
    if 'torch' in ext_base_name:
        import torch
        return torch.cuda.is_available()
    if 'tensorflow' in ext_base_name:
        import tensorflow as tf
        return bool(tf.config.list_physical_devices('GPU'))
    return False
