"""collectiverun's man page and the bash completion of the three tools, as installed.

Run by ctest (install_man_and_completion) as: tools_install_check.py BUILD_DIR.
Installs the daemon and client components into a temporary prefix, then
checks collectiverun(1) and drives the installed completion files the way
bash does (COMP_WORDS, COMP_CWORD), with the installed programs on PATH.
"""

import os
import re
import shlex
import subprocess
import sys
import tempfile

from install_common import run


class _Completer:
    def __init__(self, prefix, cwd):
        self.prefix = prefix
        self.cwd = cwd

    def __call__(self, line):
        """What the completion offers for `line`, the cursor at its end ('' after a space)."""
        words = line.split(' ')
        program = words[0]
        script = (f'source {shlex.quote(self.prefix)}/share/bash-completion/completions/{program}\n'
                  f'COMP_WORDS=({" ".join(shlex.quote(w) for w in words)})\n'
                  f'COMP_CWORD={len(words) - 1}\n'
                  '_collective_complete\n'
                  'printf "%s\\n" "${COMPREPLY[@]}"\n')
        environment = dict(os.environ, PATH=f'{self.prefix}/bin:{os.environ["PATH"]}')
        output = run(['bash', '--norc', '--noprofile', '-c', script], env=environment,
                      cwd=self.cwd)
        return [word for word in output.split('\n') if word]


def _long_options(help_text):
    return set(re.findall(r'^\s+(?:-\w,)?((?:--[\w-]+,?)+)', help_text, re.M))


def main():
    build = os.path.abspath(sys.argv[1])
    problems = []
    with tempfile.TemporaryDirectory(prefix='collective-tools-') as prefix:
        for component in ('daemon', 'client'):
            run(['cmake', '--install', build, '--prefix', prefix, '--component', component])

        page_path = os.path.join(prefix, 'share', 'man', 'man1', 'collectiverun.1')
        if not os.path.exists(page_path):
            sys.exit('no share/man/man1/collectiverun.1')
        with open(page_path) as page_file:
            page = page_file.read()
        help_text = run([os.path.join(prefix, 'bin', 'collectiverun'), '--help'])
        for expected in ('.TH COLLECTIVERUN 1', 'collectiverun \\- start the ranks',
                         'Usage: collectiverun -np N', '--host-discovery-script',
                         'collectiverun(1)'):
            if expected not in page:
                problems.append(f'collectiverun.1 lacks {expected!r}')
        # Every option of --help is in the page (a backslash is \e there).
        for line in help_text.splitlines():
            if line.strip().startswith('-') and line.replace('\\', '\\e') not in page:
                problems.append(f'collectiverun.1 lacks the line {line!r}')

        os.mkdir(os.path.join(prefix, 'work'))
        open(os.path.join(prefix, 'work', 'train.py'), 'w').close()
        complete = _Completer(prefix, os.path.join(prefix, 'work'))
        cases = [
            ('collectivectl ', {'status', 'health', 'timeline', 'metrics'}, None),
            ('collectivectl timeline ', {'start', 'stop'}, None),
            ('collectivectl timeline start --', {'--job', '--mark-cycles'}, None),
            ('collectivectl timeline stop --', {'--job'}, None),
            ('collectivectl --so', {'--socket'}, None),
            ('collectivectl health --', {'--wait'}, None),
            ('collectivectl --socket ', {'train.py'}, None),
            ('collectived --log-l', {'--log-level'}, None),
            ('collectived --log-format ', {'text', 'json'}, None),
            ('collectived --config tr', {'train.py'}, None),
            ('collectiverun --host-d', {'--host-discovery-script'}, None),
            ('collectiverun -np 2 --verb', {'--verbose'}, None),
            ('collectiverun -np 2 ba', {'bash'}, None),
            ('collectiverun -np 2 python3 tr', {'train.py'}, None),
            # The command's own options are not collectiverun's.
            ('collectiverun -np 2 python3 --verb', set(), {'--verbose'}),
            ('collectiverun -np 2 -- ba', {'bash'}, None),
        ]
        for line, wanted, unwanted in cases:
            offered = set(complete(line))
            if not wanted <= offered:
                problems.append(f'{line!r}: offered {sorted(offered)}, missing {sorted(wanted - offered)}')
            if unwanted and unwanted & offered:
                problems.append(f'{line!r}: offered {sorted(unwanted & offered)}')
        # Every long option each program documents is offered.
        for program in ('collectived', 'collectivectl', 'collectiverun'):
            documented = set()
            for names in _long_options(run([os.path.join(prefix, 'bin', program), '--help'])):
                documented.update(name for name in names.split(',') if name)
            offered = set(complete(f'{program} --'))
            if not documented or not documented <= offered:
                problems.append(f'{program} --: missing {sorted(documented - offered)}')
    if problems:
        sys.exit('\n'.join(problems))
    print('collectiverun(1) and the bash completion of the three tools: ok')


if __name__ == '__main__':
    main()
