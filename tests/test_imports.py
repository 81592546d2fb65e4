"""The house's import discipline: no import cycles between irgrad's modules (module-level
or inside functions), and an import inside a function only with a comment saying why."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _modules() -> dict[str, tuple[Path, bool]]:
    """Module name (as installed, under irgrad) -> (source file, is a package)."""
    out = {}
    files = [p for p in (ROOT / "irgrad").rglob("*.py") if not any(q.is_symlink() for q in (p, *p.parents))]
    files += list((ROOT / "passes").rglob("*.py")) + list((ROOT / "runtime").rglob("*.py")) + [ROOT / "cli.py"]
    for path in files:
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[0] != "irgrad":
            parts.insert(0, "irgrad")
        package = parts[-1] == "__init__"
        out[".".join(parts[:-1] if package else parts)] = (path, package)
    return out


def _imports(tree: ast.Module, name: str, package: bool, modules) -> list[tuple[ast.AST, str, bool]]:
    """(node, imported module, inside a function) for every import of one of ``modules``."""
    base = name if package else name.rsplit(".", 1)[0]
    found = []

    def visit(node, in_function, type_checking):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue  # annotations only: never executed
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.ImportFrom):
                source = child.module or ""
                if child.level:
                    up = base.split(".")[:len(base.split(".")) - (child.level - 1)]
                    source = ".".join(up + ([child.module] if child.module else []))
                for alias in child.names:
                    target = f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else source
                    if target in modules:
                        found.append((child, target, in_function))
            elif isinstance(child, ast.Import):
                found.extend((child, a.name, in_function) for a in child.names if a.name in modules)
            visit(child, inner, type_checking)

    visit(tree, False, False)
    return found


def _graph():
    modules = _modules()
    graph, local = {}, []
    for name, (path, package) in modules.items():
        text = path.read_text()
        lines = text.splitlines()
        edges = _imports(ast.parse(text), name, package, modules)
        graph[name] = {target for _, target, _ in edges if target != name}
        for node, target, in_function in edges:
            if in_function:
                said = "#" in lines[node.lineno - 1] or lines[node.lineno - 2].strip().startswith("#")
                local.append((f"{path.relative_to(ROOT)}:{node.lineno}", target, said))
    return graph, local


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def connect(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in list(graph):
        if v not in index:
            connect(v)
    return out


def _without_package_inits(graph):
    """A package's __init__ importing its own modules is not a cycle with them: drop edges
    from a module to the packages that contain it."""
    return {v: {w for w in ws if not v.startswith(w + ".")} for v, ws in graph.items()}


def test_no_import_cycles():
    graph, _ = _graph()
    cycles = _cycles(_without_package_inits(graph))
    assert not cycles, f"import cycles: {cycles}"


def test_imports_inside_functions_say_why():
    _, local = _graph()
    unexplained = [f"{where} imports {target}" for where, target, said in local if not said]
    assert not unexplained, "imports inside functions need a comment saying why: " + "; ".join(unexplained)


def test_the_checker_sees_cycles():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
