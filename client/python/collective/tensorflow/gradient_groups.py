"""Horovod's grouping of gradient allreduces (``groups``, and the deprecated ``num_groups``)
for DistributedGradientTape and Keras' DistributedOptimizer: which gradients are negotiated
and reduced together as one grouped allreduce."""

import warnings

from collective.common.util import split_list


def resolve_groups(num_groups, groups):
    """Horovod's checks: ``num_groups`` (deprecated, with its DeprecationWarning) stands for
    ``groups`` when that is unset; ``groups`` is None, a positive count or a list of lists of
    variables."""
    if num_groups != 0:
        warnings.warn('Parameter `num_groups` has been replaced by `groups` '
                      'and will be removed in v0.23.0.', DeprecationWarning)
        if groups is None:
            groups = num_groups
    if groups is not None and not (isinstance(groups, list) or groups > 0):
        raise ValueError('groups should be a non-negative integer or '
                         'a list of list of tf.Variable.')
    return groups


def split_indices(groups, gradients, variables):
    """The indices of the non-None ``gradients``, in groups: for a count, that many runs of
    consecutive gradients of near-equal length (the first ones one longer, as Horovod splits
    them); for lists of variables, their gradients in each list's order, then every other
    gradient alone. Empty groups are left out."""
    present = [i for i, gradient in enumerate(gradients) if gradient is not None]
    if not isinstance(groups, list):
        return [run for run in split_list(present, groups) if run]
    index_of = {variables[i].ref(): i for i in present}
    split = []
    for group in groups:
        members = []
        for variable in group:
            index = index_of.pop(variable.ref(), None)
            if index is not None:
                members.append(index)
        if members:
            split.append(members)
    return split + [[i] for i in present if variables[i].ref() in index_of]
