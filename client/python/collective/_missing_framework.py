"""What a framework package of collective is when its framework cannot be imported.

One wheel serves environments with and without PyTorch or TensorFlow (the
extension never links them), so ``import collective.torch`` succeeds where
torch is missing; using it then raises ImportError that names the framework
and how to install it, rather than a bare "No module named 'torch'" from deep
inside the package.
"""

import sys


def missing_framework(module, framework, package, error):
    """A module ``__getattr__`` that raises ImportError for every public name of ``module``.

    ``error`` is the ModuleNotFoundError the framework's import raised; it is
    chained to each ImportError so that the original cause stays visible.
    """
    message = (f'{module} needs {framework}, which this Python ({sys.executable}) cannot '
               f'import: install it into this environment (pip install {package})')

    def __getattr__(name):
        # Introspection (pickle, inspect, pytest) probes dunders: those stay
        # plain missing attributes.
        if name.startswith('__') and name.endswith('__'):
            raise AttributeError(f'module {module!r} has no attribute {name!r}')
        raise ImportError(message) from error

    return __getattr__
