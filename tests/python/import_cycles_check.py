"""The modules of the `collective` package import each other without a cycle.

Reads every module's source with `ast` (nothing is imported, so neither
torch nor the extension is needed) and follows every import of a module of
the package, those inside functions included: an import moved into a
function only hides a cycle until that function runs. A cycle fails the
test with its path, e.g. `a -> b -> a`.

Run: python3 tests/python/import_cycles_check.py [PACKAGE_DIR]
(default: client/python/collective of this source tree). ctest runs it as
`python_import_cycles`.
"""

import ast
import os
import sys
import tempfile
import unittest

_DEFAULT_PACKAGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..',
                                'client', 'python', 'collective')


def package_modules(package_dir):
    """Module name -> (path, is_package) for every .py file under package_dir."""
    root = os.path.dirname(os.path.abspath(package_dir))
    modules = {}
    for directory, _, files in os.walk(package_dir):
        for file in files:
            if not file.endswith('.py'):
                continue
            path = os.path.join(directory, file)
            parts = os.path.relpath(path, root)[:-len('.py')].split(os.sep)
            is_package = parts[-1] == '__init__'
            if is_package:
                parts = parts[:-1]
            modules['.'.join(parts)] = (path, is_package)
    return modules


def _top_level_names(tree):
    """Names a package's __init__ binds itself (so `from pkg import name` means the package)."""
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split('.')[0] for alias in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return names


def import_graph(package_dir):
    """Module -> set of the package's modules it imports anywhere in its source."""
    modules = package_modules(package_dir)
    trees = {}
    for name, (path, _) in modules.items():
        with open(path, encoding='utf-8') as source:
            trees[name] = ast.parse(source.read(), filename=path)
    bound = {name: _top_level_names(trees[name]) for name, (_, pkg) in modules.items() if pkg}

    def resolve_from(module, node):
        """The modules `from X import a, b` in `module` imports."""
        if node.level:
            is_package = modules[module][1]
            parts = module.split('.')
            base = parts if is_package else parts[:-1]
            base = base[:len(base) - (node.level - 1)]
            source = '.'.join(base + ([node.module] if node.module else []))
        else:
            source = node.module
        targets = set()
        for alias in node.names:
            candidate = f'{source}.{alias.name}'
            if candidate in modules:
                targets.add(candidate)  # a submodule
            elif source in modules and (not modules[source][1] or alias.name == '*'
                                        or alias.name in bound.get(source, ())):
                targets.add(source)  # a name the module defines
            # else: a submodule that is no .py file (the extension): not ours
        return targets

    graph = {}
    for module, tree in trees.items():
        edges = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                edges.update(alias.name for alias in node.names if alias.name in modules)
            elif isinstance(node, ast.ImportFrom):
                edges.update(resolve_from(module, node))
            elif (isinstance(node, ast.Call) and node.args
                  and isinstance(node.args[0], ast.Constant)
                  and isinstance(node.args[0].value, str)
                  and ((isinstance(node.func, ast.Attribute)
                        and node.func.attr == 'import_module')
                       or (isinstance(node.func, ast.Name) and node.func.id == '__import__'))):
                if node.args[0].value in modules:
                    edges.add(node.args[0].value)
        edges.discard(module)  # `from . import x` in x's own package __init__ is no cycle
        graph[module] = edges
    return graph


def find_cycles(graph):
    """One cycle (a list of modules, first == last) per strongly connected component."""
    index, low, on_stack, stack, components = {}, {}, set(), [], []
    counter = [0]

    def connect(node):  # Tarjan's algorithm; the package is small enough to recurse
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph.get(node, ())):
            if successor not in index:
                connect(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(set(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return [_cycle_in(graph, component) for component in components]


def _cycle_in(graph, component):
    """A shortest path from the component's first module back to itself, inside the component."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        next_frontier = []
        for node in frontier:
            for successor in sorted(graph[node] & component):
                if successor == start:
                    return paths[node] + [start]
                if successor not in paths:
                    paths[successor] = paths[node] + [successor]
                    next_frontier.append(successor)
        frontier = next_frontier
    raise AssertionError(f'no cycle through {start} in {sorted(component)}')


class ImportCycles(unittest.TestCase):
    package_dir = _DEFAULT_PACKAGE

    def test_collective_has_no_import_cycle(self):
        graph = import_graph(self.package_dir)
        self.assertIn('collective.torch.optimizer', graph, 'the package was not found')
        cycles = find_cycles(graph)
        self.assertEqual(cycles, [], 'import cycles in the collective package: '
                         + '; '.join(' -> '.join(cycle) for cycle in cycles))

    def test_a_cycle_through_a_function_level_import_is_found(self):
        files = {
            'pkg/__init__.py': 'from pkg.a import f\n',
            'pkg/a.py': 'from pkg import b\n\ndef f():\n    return b.g()\n',
            'pkg/b.py': 'def g():\n    from . import c\n    return c.h()\n',
            'pkg/c.py': 'import pkg.a\n\ndef h():\n    return 1\n',
            'pkg/d.py': 'from pkg import f\nfrom pkg import _ext\n',
        }
        with tempfile.TemporaryDirectory() as root:
            for relative, text in files.items():
                path = os.path.join(root, relative)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, 'w', encoding='utf-8') as out:
                    out.write(text)
            graph = import_graph(os.path.join(root, 'pkg'))
        self.assertEqual(graph['pkg.b'], {'pkg.c'})
        self.assertEqual(graph['pkg.d'], {'pkg'})  # f is the package's; _ext is no .py
        self.assertEqual(find_cycles(graph), [['pkg.a', 'pkg.b', 'pkg.c', 'pkg.a']])


if __name__ == '__main__':
    if len(sys.argv) > 1 and not sys.argv[1].startswith('-'):
        ImportCycles.package_dir = sys.argv.pop(1)
    unittest.main()
