"""collective/_core.pyi describes the built collective._core: nothing more, nothing less.

Run by ctest (install_core_stubs) as: stubs_check.py STUB_FILE, with
collective._core importable. The module's public names, each class's public
methods and properties, and every function's parameters (names, order, which
have defaults), read from pybind11's signatures, must match the stub's.
"""

import ast
import re
import sys

import collective._core as core

# The stub's own aliases for readability, not attributes of the module.
_STUB_ONLY = {'TensorArg', 'Handle'}


def _split_parameters(text):
    """Top-level comma-separated pieces of a pybind11 parameter list."""
    pieces, depth, current = [], 0, ''
    for char in text:
        if char in '([{':
            depth += 1
        elif char in ')]}':
            depth -= 1
        if char == ',' and depth == 0:
            pieces.append(current.strip())
            current = ''
        else:
            current += char
    if current.strip():
        pieces.append(current.strip())
    return pieces


def _runtime_parameters(function, name):
    """[(name, has_default)] from pybind11's first docstring line, self left out."""
    signature = (function.__doc__ or '').strip().splitlines()[0]
    match = re.match(rf'{name}\((.*)\) -> ', signature)
    if not match:
        sys.exit(f'{name}: no pybind11 signature in {signature!r}')
    parameters = []
    for piece in _split_parameters(match.group(1)):
        parameter = piece.split(':')[0].strip()
        if parameter != 'self':
            parameters.append((parameter, '=' in piece))
    return parameters


def _stub_parameters(node):
    arguments = node.args.args
    defaults = [False] * (len(arguments) - len(node.args.defaults)) + [True] * len(node.args.defaults)
    return [(argument.arg, default) for argument, default in zip(arguments, defaults)
            if argument.arg != 'self']


def _is_property(node):
    return any(isinstance(d, ast.Name) and d.id == 'property' for d in node.decorator_list)


def main():
    with open(sys.argv[1]) as stub_file:
        stub = ast.parse(stub_file.read())
    problems = []
    stub_names = {}
    for node in stub.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            stub_names[node.name] = node
        elif isinstance(node, ast.AnnAssign):
            stub_names[node.target.id] = node
        elif isinstance(node, ast.Assign):
            stub_names[node.targets[0].id] = node
    runtime_names = {name for name in dir(core) if not name.startswith('_')} | {'__version__'}
    for name in sorted(runtime_names - set(stub_names)):
        problems.append(f'the stub lacks collective._core.{name}')
    for name in sorted(set(stub_names) - runtime_names - _STUB_ONLY):
        problems.append(f'the stub has {name}, which collective._core has not')

    for name, node in stub_names.items():
        runtime = getattr(core, name, None)
        if isinstance(node, ast.FunctionDef) and runtime is not None:
            if _stub_parameters(node) != _runtime_parameters(runtime, name):
                problems.append(f'{name}: the stub takes {_stub_parameters(node)}, the module '
                                f'{_runtime_parameters(runtime, name)}')
        if not isinstance(node, ast.ClassDef) or runtime is None:
            continue
        members = {m.name: m for m in node.body if isinstance(m, ast.FunctionDef)}
        public = {m for m in vars(runtime) if not m.startswith('_')}
        for member in sorted(public - set(members)):
            problems.append(f'the stub lacks {name}.{member}')
        for member, member_node in members.items():
            if member.startswith('__'):
                continue
            if member not in public:
                problems.append(f'the stub has {name}.{member}, which the module has not')
                continue
            attribute = vars(runtime)[member]
            if isinstance(attribute, property) != _is_property(member_node):
                problems.append(f'{name}.{member}: a property in one, a method in the other')
            elif not isinstance(attribute, property):
                function = getattr(runtime, member)
                expected = _runtime_parameters(function, member)
                if _stub_parameters(member_node) != expected:
                    problems.append(f'{name}.{member}: the stub takes '
                                    f'{_stub_parameters(member_node)}, the module {expected}')
    if problems:
        sys.exit('\n'.join(problems))
    print(f'{sys.argv[1]} matches collective._core ({len(runtime_names)} names)')


if __name__ == '__main__':
    main()
