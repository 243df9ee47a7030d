"""The framework loads before collective._core (collective/__init__.py says why: a PyTorch
wheel's own protobuf aborts `import torch` when libcollective's protobuf was loaded first).

Runs in a fresh interpreter, so that nothing imported earlier decides the order.
"""

import subprocess
import sys

_CHECK = '''
import sys
import collective
assert 'collective._core' not in sys.modules, 'import collective loaded collective._core'
import collective.torch
order = list(sys.modules)
assert order.index('torch') < order.index('collective._core'), order
print(collective.__version__)
'''


def test_torch_loads_before_the_binding():
    done = subprocess.run([sys.executable, '-c', _CHECK], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip(), 'collective.__version__ is empty'
