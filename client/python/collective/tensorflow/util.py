"""Horovod's ``horovod.tensorflow.util``: the helpers ``horovod.tensorflow`` also exports
(``_executing_eagerly``, ``_make_subgraph``, ``_cache``, ``vars_to_refs``, ``refs_to_vars``),
which Horovod's own tests and users' scripts call."""

import tensorflow as tf


def _executing_eagerly():
    """Whether TensorFlow runs ops eagerly here: False inside ``tf.function`` and in a TF1
    graph."""
    return tf.executing_eagerly()


def _make_subgraph(f):
    """``f`` as a ``tf.function``."""
    return tf.function(f)


def _cache(f):
    """``f`` (of hashable positional arguments) that computes once per arguments and eager
    mode, then returns what it returned then."""
    cache = {}

    def wrapper(*args):
        key = (args, _executing_eagerly())
        if key not in cache:
            cache[key] = f(*args)
        return cache[key]

    return wrapper


def vars_to_refs(vars):  # noqa: A002 (Horovod's parameter name)
    """``vars`` (a variable, or nested lists of them) as hashable references: tuples of
    ``var.ref()``."""
    if isinstance(vars, list):
        return tuple(vars_to_refs(v) for v in vars)
    return vars.ref()


def refs_to_vars(refs):
    """The inverse of ``vars_to_refs``: nested tuples of references as lists of variables."""
    if isinstance(refs, tuple):
        return [refs_to_vars(r) for r in refs]
    return refs.deref()
