"""The layout's rule, read from the code: each folder of harness/ imports only the folders its ``__init__``
says it may, no module imports one that imports it back, and no folder grows past what one reads at once.

Every import counts, those inside functions too: a lazy import is still a dependency, and the circles it
hides are the ones that bite when a module moves.
"""
from __future__ import annotations

import ast
import pathlib
import re
import unittest

HARNESS = pathlib.Path(__file__).resolve().parents[2] / "harness"
#: modules a folder may hold before it should be split (one screen of names)
MOST_MODULES = 15


def module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(HARNESS.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def all_modules() -> dict[str, pathlib.Path]:
    return {module_name(p): p for p in HARNESS.rglob("*.py")}


def imports_of(path: pathlib.Path, modules: dict[str, pathlib.Path]) -> set[str]:
    """The harness modules ``path`` imports, anywhere in it (``from harness.x import y`` counts y when y is a module)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("harness"):
            for alias in node.names:
                child = f"{node.module}.{alias.name}"
                found.add(child if child in modules else node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("harness"))
        elif isinstance(node, ast.ImportFrom) and node.level:
            found.add("<relative>")
    return found - {module_name(path)}


def folder_of(module: str) -> str | None:
    """``harness.parent.pool`` -> ``parent``; a top-level module (``harness.main``) or the package -> None."""
    parts = module.split(".")
    return parts[1] if len(parts) >= 3 or (len(parts) == 2 and (HARNESS / parts[1]).is_dir()) else None


def folders() -> list[str]:
    return sorted(p.name for p in HARNESS.iterdir() if p.is_dir() and p.name != "__pycache__")


def top_level_modules() -> list[str]:
    """The top level's modules (``models``, ``main``, ...): a folder's rule may name one it builds on."""
    return sorted(p.stem for p in HARNESS.glob("*.py") if p.name != "__init__.py")


def stated_rule(folder: str) -> set[str] | None:
    """The folders ``folder``'s ``__init__`` docstring says it may import (``May import: harness.a, harness.b.``;
    ``nothing else of harness`` for none); None when it states no rule."""
    init = HARNESS / folder / "__init__.py"
    doc = ast.get_docstring(ast.parse(init.read_text())) if init.exists() else None
    match = re.search(r"^May import:(.*?)(?:\n\n|\Z)", doc or "", re.S | re.M)
    if match is None:
        return None
    return set(re.findall(r"harness\.(\w+)", match.group(1)))


class TestLayout(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:  # every module parsed once for the class's checks, none of which changes them
        cls.modules = all_modules()
        cls.deps = {m: imports_of(p, cls.modules) for m, p in cls.modules.items()}

    def test_every_folder_states_what_it_may_import(self) -> None:
        missing = [f for f in folders() if stated_rule(f) is None]
        self.assertEqual(missing, [], "each folder of harness/ says in its __init__'s docstring what it is and, "
                                      "on a line 'May import: harness.x, harness.y.', which folders it may import")

    def test_stated_rules_name_existing_folders(self) -> None:
        for f in folders():
            unknown = (stated_rule(f) or set()) - set(folders()) - set(top_level_modules())
            self.assertEqual(unknown, set(), f"harness/{f}/__init__.py names folders or modules that do not exist")

    def test_no_folder_imports_what_its_rule_does_not_allow(self) -> None:
        wrong = []
        for module, deps in sorted(self.deps.items()):
            here = folder_of(module)
            if here is None:
                continue  # the top level (the public names and entry points) may import anything
            allowed = (stated_rule(here) or set()) | {here}
            for dep in sorted(deps):
                there = folder_of(dep)
                if dep == "<relative>":
                    wrong.append(f"{module}: a relative import (write harness.x.y: the layout test reads absolute ones)")
                elif there is None and dep.split(".")[-1] in allowed and dep != "harness":
                    continue  # a top-level module the folder's rule names (harness.upstream_modules re-exports them)
                elif there is None:
                    wrong.append(f"{module} imports {dep}: an import that climbs back up to the top level")
                elif there not in allowed:
                    wrong.append(f"{module} imports {dep}: harness/{here}/ may import {sorted(allowed - {here})}")
        self.assertEqual(wrong, [], "\n" + "\n".join(wrong))

    def test_no_module_depends_on_one_that_depends_on_it(self) -> None:
        cycles = strongly_connected([m for m in self.deps], lambda m: [d for d in self.deps[m] if d in self.deps])
        self.assertEqual([sorted(c) for c in cycles if len(c) > 1], [])

    def test_the_folders_import_each_other_without_a_circle(self) -> None:
        edges: dict[str, set[str]] = {f: set() for f in folders()}
        for module, deps in self.deps.items():
            here = folder_of(module)
            for dep in deps:
                there = folder_of(dep)
                if here and there and here != there:
                    edges[here].add(there)
        cycles = strongly_connected(list(edges), lambda f: sorted(edges[f]))
        self.assertEqual([sorted(c) for c in cycles if len(c) > 1], [])

    def test_no_folder_is_larger_than_one_reads_at_once(self) -> None:
        for place in [HARNESS, *(HARNESS / f for f in folders() if f != "upstream_modules")]:
            count = len([p for p in place.glob("*.py") if p.name != "__init__.py"])
            self.assertLessEqual(count, MOST_MODULES, f"{place.relative_to(HARNESS.parent)}/ has {count} modules: "
                                                      "split it by concern")

    def test_the_rule_catches_an_import_back_up(self) -> None:
        # the checker itself: a rank-side module importing the parent's side is named
        self.assertNotIn("parent", stated_rule("ranks") or set())
        self.assertEqual(folder_of("harness.parent.pool"), "parent")
        self.assertIsNone(folder_of("harness.main"))


def private_imports_in(path: pathlib.Path) -> list[str]:
    """Where ``path`` imports ``torch.testing._internal`` (any depth: a lazy import inside a function counts)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = ([node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level
                 else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
        found += [f"{path.relative_to(HARNESS.parent)}:{node.lineno}" for n in names
                  if n == "torch.testing._internal" or n.startswith("torch.testing._internal.")]
    return found


class TestNothingPrivate(unittest.TestCase):
    def test_the_harness_and_the_suites_import_nothing_of_torch_testing_internal(self) -> None:
        # what the harness exists to replace: read upstream for facts, never import it (benchmarks may, as a baseline)
        files = [*HARNESS.rglob("*.py"), *(HARNESS.parent / "test_distributed").rglob("*.py")]
        self.assertEqual([where for f in files for where in private_imports_in(f)], [])

    def test_the_check_sees_a_lazy_import(self) -> None:
        import tempfile

        with tempfile.TemporaryDirectory(dir=HARNESS.parent) as tmp:
            path = pathlib.Path(tmp) / "m.py"
            path.write_text("def f():\n    from torch.testing._internal.common_xpu import X\n")
            self.assertEqual(len(private_imports_in(path)), 1)


class TestUpstreamModulesFolder(unittest.TestCase):
    def test_upstream_modules_holds_one_namespace_per_upstream_module(self) -> None:
        # its size is upstream's (a module per torch.testing._internal module files import), not a concern to
        # split: what keeps it honest is that each module is a namespace the port maps an upstream module to
        from harness.port import NAMESPACES

        held = {p.stem for p in (HARNESS / "upstream_modules").glob("*.py") if p.name != "__init__.py"}
        self.assertEqual(held, set(NAMESPACES.values()))


def strongly_connected(nodes: list[str], edges_of) -> list[list[str]]:
    """Tarjan's strongly connected components, iteratively (no recursion limit on a long chain)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(edges_of(root)))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges_of(child))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                found.append(component)
    return found


if __name__ == "__main__":
    unittest.main()


class TestOldPaths(unittest.TestCase):
    """distharness 0.1's module paths still import, for one release, and say where their names went."""

    def test_each_old_path_imports_with_a_warning_naming_its_new_home(self) -> None:
        import importlib
        import sys
        import warnings

        from harness.moved import MOVED

        for old, new in MOVED.items():
            sys.modules.pop(f"harness.{old}", None)
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                module = importlib.import_module(f"harness.{old}")
            self.assertTrue(any(issubclass(w.category, DeprecationWarning) and f"harness.{new[0]}" in str(w.message)
                                for w in seen), (old, [str(w.message) for w in seen]))
            for home in new:
                real = importlib.import_module(f"harness.{home}")
                for name in getattr(real, "__all__", []):
                    self.assertIs(getattr(module, name), getattr(real, name), f"harness.{old}.{name}")

    def test_a_class_from_an_old_path_is_the_public_one(self) -> None:
        import warnings

        import harness

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            from harness.case import MultiProcessTestCase
            from harness.torchrun import launched
        from harness.shared import launcher

        self.assertIs(MultiProcessTestCase, harness.MultiProcessTestCase)
        self.assertIs(launched, launcher.launched)

    def test_the_exceptions_keep_their_public_path(self) -> None:
        import harness
        from harness.errors import RankFailure

        self.assertIs(RankFailure, harness.RankFailure)
        self.assertEqual(f"{RankFailure.__module__}.{RankFailure.__qualname__}", "harness.errors.RankFailure")
