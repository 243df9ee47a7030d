"""What the install checks of this directory share."""

import subprocess
import sys


def run(command, timeout=120, **kwargs):
    """`command`'s stdout; a failure ends the check with what the command said."""
    print('+', ' '.join(command), flush=True)
    completed = subprocess.run(command, capture_output=True, text=True, timeout=timeout, **kwargs)
    if completed.returncode != 0:
        sys.exit(f'{" ".join(command)} failed ({completed.returncode}):\n'
                 f'{completed.stdout[-6000:]}{completed.stderr[-6000:]}')
    return completed.stdout
