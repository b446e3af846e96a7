"""``python -m harness.port FILE...``: rewrite the imports of upstream test files to the harness's names."""
from __future__ import annotations

import argparse
import ast
import dataclasses
import difflib
import os
import sys

from harness.port_lost_imports import attribute_chain, lost_imports, torch_module_source

__all__ = ["MAPPING", "RENAMED", "NAMESPACES", "GONE", "KEPT", "kept", "PortResult", "port_source", "private_imports", "offered",
           "check", "main"]

_DISTRIBUTED = frozenset({"MultiProcessTestCase", "MultiProcContinuousTest", "MultiProcContinousTest",
                          "MultiThreadedTestCase", "skip_if_lt_x_gpu", "run_subtests", "DistributedTestBase",
                          "DynamoDistributedMultiProcTestCase", "DynamoDistributedSingleProcTestCase",
                          "skip_if_win32", "skip_if_rocm_multiprocess", "requires_nccl", "requires_gloo",
                          "requires_accelerator_dist_backend", "requires_world_size", "skip_if_odd_worldsize",
                          "skip_if_small_worldsize", "with_dist_debug_levels", "get_required_world_size",
                          "spawn_threads_and_init_comms"})
# common_utils's names distributed files take (common_distributed and the others re-export a few of them)
_UTILS = frozenset({"run_tests", "TestCase", "parametrize", "instantiate_parametrized_tests", "subtest", "decorateIf",
                    "TEST_WITH_DEV_DBG_ASAN", "TEST_WITH_ASAN", "TEST_WITH_TSAN", "TEST_WITH_ROCM", "TEST_CUDA",
                    "retry_on_connect_failures"})
_FSDP_MODELS = frozenset({"MLP", "MLPStack", "DoubleLinear", "NestedWrappedModule", "TransformerWithSharedParams",
                          "FSDPInitMode", "DEVICEInitMode"})
_DTENSOR_MODELS = frozenset({"MLPModule", "MLPStacked", "ModelArgs", "Transformer", "TransformerBlock", "Attention",
                             "FeedForward"})

#: upstream names the harness provides under another name: the spelling upstream used before a rename
RENAMED: dict[str, str] = {"MultiProcContinousTest": "MultiProcContinuousTest"}

# upstream module -> the names the harness provides under the same name and meaning. common_fsdp,
# common_dtensor and sharded_tensor re-export names of common_distributed, and upstream's files import
# them from there too (``from ...common_dtensor import DTensorTestBase, skip_if_lt_x_gpu, with_comms``):
# left behind, upstream's skip_if_lt_x_gpu exits the rank with its skip code instead of running on CPU.
MAPPING: dict[str, frozenset[str]] = {
    "torch.testing._internal.common_distributed": _DISTRIBUTED | {"TEST_WITH_DEV_DBG_ASAN", "TEST_WITH_ROCM"},
    "torch.testing._internal.common_fsdp": frozenset({"FSDPTest", "FSDPTestMultiThread", "FSDPTestContinuous",
                                                      "check_sharded_parity", "get_devtype"})
    | (_DISTRIBUTED - {"skip_if_lt_x_gpu"}) | _FSDP_MODELS,
    "torch.testing._internal.distributed._tensor.common_dtensor": frozenset({
        "DTensorTestBase", "DTensorContinuousTestBase", "DTensorOpTestBase", "with_comms",
        "LocalDTensorTestBase", "create_local_tensor_test_class", "skip_unless_torch_gpu", "map_local_for_rank"})
    | _DISTRIBUTED | _DTENSOR_MODELS,
    "torch.testing._internal.distributed.checkpoint_utils": frozenset({"with_temp_dir"}),
    "torch.testing._internal.common_utils": _UTILS,
    "torch.testing._internal.common_cuda": frozenset({"TEST_CUDA", "TEST_MULTIGPU"}),
    "torch.testing._internal.distributed.fake_pg": frozenset({"FakeStore"}),
    "torch.testing._internal.distributed._shard.sharded_tensor": frozenset({
        "ShardedTensorTestBase", "with_comms", "MultiProcessTestCase"}),
}
_UPSTREAM = "torch.testing._internal"

#: upstream module -> its namespace in ``harness.upstream_modules`` (``harness/upstream_modules/<name>.py``),
#: which offers the names its ``__all__`` lists: a name MAPPING does not move to ``from harness import`` goes to
#: ``from harness.upstream_modules.<name> import``, and a module imported whole (``from torch.testing._internal
#: import common_utils``, ``import torch.testing._internal.common_fsdp as cf``) becomes an import of the namespace
NAMESPACES: dict[str, str] = {
    f"{_UPSTREAM}.common_utils": "common_utils",
    f"{_UPSTREAM}.common_distributed": "common_distributed",
    f"{_UPSTREAM}.common_fsdp": "common_fsdp",
    f"{_UPSTREAM}.distributed._tensor.common_dtensor": "common_dtensor",
    f"{_UPSTREAM}.distributed.common_state_dict": "common_state_dict",
    f"{_UPSTREAM}.common_dist_composable": "common_dist_composable",
    f"{_UPSTREAM}.distributed.distributed_utils": "distributed_utils",
    f"{_UPSTREAM}.distributed.fake_pg": "fake_pg",
    f"{_UPSTREAM}.distributed.checkpoint_utils": "checkpoint_utils",
    f"{_UPSTREAM}.common_device_type": "common_device_type",
    f"{_UPSTREAM}.two_tensor": "two_tensor",
    f"{_UPSTREAM}.logging_utils": "logging_utils",
    f"{_UPSTREAM}.common_cuda": "common_cuda",
    f"{_UPSTREAM}.distributed._shard.sharded_tensor": "sharded_tensor",
    f"{_UPSTREAM}.distributed._shard.sharded_tensor._test_st_common": "st_common",
    f"{_UPSTREAM}.distributed._shard.sharded_tensor._test_ops_common": "st_ops_common",
    f"{_UPSTREAM}.distributed._shard.test_common": "shard_test_common",
    f"{_UPSTREAM}.inductor_utils": "inductor_utils",
    f"{_UPSTREAM}.triton_utils": "triton_utils",
}
_NAMESPACE_PACKAGE = "harness.upstream_modules"

#: "module.name" -> why the harness has no counterpart: names real files import that the supported torch's own
#: ``torch.testing._internal`` does not have (the port leaves them, saying so; docs/compatibility.md lists them)
GONE: dict[str, str] = {
    f"{_UPSTREAM}.common_fsdp.FSDP_DEVICES": "not in torch 2.11-2.15's common_fsdp: a newer torch's device types for "
                                            "instantiate_device_type_tests' only_for, not defined in the stored "
                                            "versions of upstream's common_fsdp searched: no meaning to follow",
    f"{_UPSTREAM}.common_fsdp.FSDP_DEVICE_TYPE": "not in torch 2.11-2.15's common_fsdp",
    f"{_UPSTREAM}.common_fsdp.CUDAInitMode": "the old name of DEVICEInitMode: files of its era also pass "
                                            "cuda_init_mode=... to the models' init and to _test_fsdp_parity, which "
                                            "the models of torch 2.11-2.15 (and the harness's) do not take",
    f"{_UPSTREAM}.common_fsdp.DeterministicModel": "an older release's FSDP1 model on CUDA, not defined in the "
                                                  "stored versions of upstream's common_fsdp searched",
    f"{_UPSTREAM}.common_distributed.skip_if_not_powerof2_worldsize_xpu": "an older release's XPU skip, not "
                                                                         "defined in the stored versions of upstream's "
                                                                         "common_distributed searched",
    **{f"{_UPSTREAM}.common_distributed.{name}": "an older release's switch between the legacy functional "
                                                 "collectives and the native ones: torch 2.11-2.15 have only the "
                                                 "native ones, so there is nothing to run the test under twice"
       for name in ("run_with_both_funcol_impls", "run_with_both_funcol_impls_with_arg", "run_with_legacy_funcol")},
    **{f"{_UPSTREAM}.{dotted}": "a name of another release whose upstream meaning is not established here: no "
                                "counterpart without it"
       for dotted in ("common_utils.sandcastle_skip", "common_utils.requires_gpu",
                      "common_distributed.MultiProcContinuousForInstantiateTest", "common_fsdp.spawn_and_init",
                      "common_fsdp.teardown")},
}

#: upstream modules (a prefix ends with ".") and "module.name"s that are test *bodies* PyTorch ships for reuse, not
#: harness: a file that imports them runs upstream's tests, so the port leaves them, saying why
KEPT: dict[str, str] = {
    f"{_UPSTREAM}.distributed.rpc.": "the RPC agent suites: upstream's test bodies, run per agent by the file",
    f"{_UPSTREAM}.distributed.rpc_utils": "generates the RPC agent suites' test classes from upstream's bodies",
    f"{_UPSTREAM}.dist_utils": "dist_init and the RPC helpers: the setup the RPC agent suites' bodies run with",
    f"{_UPSTREAM}.distributed.distributed_test": "DistributedTest: upstream's c10d test bodies, run per backend",
    f"{_UPSTREAM}.distributed.ddp_under_dist_autograd_test": "upstream's DDP-with-RPC test bodies",
    f"{_UPSTREAM}.distributed.pipe_with_ddp_test": "upstream's pipeline-with-DDP test bodies",
    f"{_UPSTREAM}.distributed.nn.": "upstream's remote-module test bodies",
    f"{_UPSTREAM}.common_methods_invocations": "OpInfo's op_db: upstream's operator test data and its decorations",
    f"{_UPSTREAM}.opinfo.": "OpInfo's op_db: upstream's operator test data",
}


def kept(module: str, name: str | None = None) -> str | None:
    """Why ``module`` (or ``module.name``) stays an upstream import as a test body (:data:`KEPT`); None otherwise.

    Example::

        kept("torch.testing._internal.common_methods_invocations", "op_db")   # "OpInfo's op_db: ..."
    """
    whole = f"{module}.{name}" if name else module
    for key, why in KEPT.items():
        if whole == key or module == key or (key.endswith(".") and (module + ".").startswith(key)):
            return why
    return None


_offered: dict[str, frozenset[str]] = {}


def offered(module: str) -> frozenset[str]:
    """The names ``harness.upstream_modules``'s namespace for the upstream ``module`` offers (its ``__all__``, read
    from the source: the port imports no torch); empty when it has none.

    Example::

        "SEED" in offered("torch.testing._internal.common_utils")     # True
    """
    name = NAMESPACES.get(module)
    if name is None:
        return frozenset()
    if name not in _offered:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "upstream_modules", f"{name}.py")
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        names: frozenset[str] = frozenset()
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__"
                                                    for t in node.targets):
                names = frozenset(ast.literal_eval(node.value))
        _offered[name] = names
    return _offered[name]


@dataclasses.dataclass
class PortResult:
    """One file's rewrite: the new text, what moved to the harness, and what stayed upstream."""

    path: str
    old: str
    new: str
    mapped: list[str]  # "module.name" moved to harness (``from harness import``, a harness.upstream_modules namespace)
    unmapped: list[str]  # "module.name (line N)" left as upstream imports: the harness has no counterpart
    #: "torch.a.b (reads torch.a.b.Name)": torch submodules upstream's harness had imported for the file, now
    #: imported by the port itself (harness.port_lost_imports)
    added: list[str] = dataclasses.field(default_factory=list)

    @property
    def diff(self) -> str:
        return "".join(difflib.unified_diff(self.old.splitlines(True), self.new.splitlines(True),
                                            f"a/{self.path}", f"b/{self.path}"))


def _alias(a: ast.alias) -> str:
    return a.name if a.asname is None else f"{a.name} as {a.asname}"


def _harness_alias(a: ast.alias) -> str:
    """The name as ``from harness import`` spells it: a renamed one keeps the file's name as its alias."""
    new = RENAMED.get(a.name)
    if new is None:
        return _alias(a)
    return f"{new} as {a.asname or a.name}"


def _indent(lines: list[str], node: ast.stmt) -> str:
    """The indentation of the line ``node`` starts on (an import inside ``try:`` or ``if``)."""
    first = lines[node.lineno - 1]
    return first[:len(first) - len(first.lstrip())]


def _import_line(module: str, names: list[str], indent: str) -> str:
    one = f"{indent}from {module} import {', '.join(names)}\n"
    if len(one) <= 100:
        return one
    body = "".join(f"{indent}    {n},\n" for n in names)
    return f"{indent}from {module} import (\n{body}{indent})\n"


def _dotted(node: ast.AST) -> str | None:
    """``a.b.c`` for an attribute chain on a name; None for anything else."""
    chain = attribute_chain(node)
    return ".".join(chain) if chain else None


def _uses(tree: ast.AST, bound: str) -> tuple[set[str], list[ast.AST]]:
    """What the file reads from the module bound to ``bound`` (a name, or a dotted path for a plain ``import
    a.b.c``): the attributes read on it, and the expression nodes that spell it (to rewrite the dotted ones)."""
    attrs: set[str] = set()
    spelled: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _dotted(node.value) == bound:
            attrs.add(node.attr)
        if isinstance(node, (ast.Attribute, ast.Name)) and _dotted(node) == bound:
            spelled.append(node)
    return attrs, spelled


_defined: dict[str, frozenset[str] | None] = {}


def _installed_names(module: str) -> frozenset[str] | None:
    """The names the installed torch's ``module`` defines at its top level, read from its source (nothing is
    imported); None where that cannot be told (no torch, no such file, a star import)."""
    if module in _defined:
        return _defined[module]
    names: frozenset[str] | None = None
    path = torch_module_source(module)
    try:
        if path is not None:
            with open(path, encoding="utf-8") as f:
                names = _top_level_names(ast.parse(f.read(), path))
    except (OSError, SyntaxError, ValueError):
        names = None
    _defined[module] = names
    return names


def _top_level_names(tree: ast.Module) -> frozenset[str] | None:
    found: set[str] = set()
    for node in ast.walk(tree):  # names bound under if/try at the top level count too
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                if a.name == "*":
                    return None
                found.add(a.asname or a.name.split(".")[0])
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            found.add(node.id)
    return frozenset(found)


def _why_not(module: str, name: str) -> str:
    body = kept(module, name)
    if body is not None:
        return f"{module}.{name}: kept: {body}"
    why = GONE.get(f"{module}.{name}")
    if why is None:
        defined = _installed_names(module)
        if defined is not None and name not in defined:
            why = (f"not in the installed torch's {module.rsplit('.', 1)[-1]} (a name of another torch release): "
                   "it fails at import under upstream's harness too")
    return f"{module}.{name}: {why}" if why else f"{module}.{name}"


def _free_names(tree: ast.AST) -> set[str]:
    """The names the file reads but never binds itself (nor Python's builtins): what a star import supplies."""
    import builtins

    read: set[str] = set()
    bound: set[str] = set(dir(builtins))
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update(a.asname or a.name.split(".")[0] for a in node.names if a.name != "*")
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            bound.update(node.names)
    return read - bound


def _star_names(tree: ast.AST, module: str) -> set[str] | None:
    """The names the file takes from ``from module import *``: those it reads, never binds, and the installed
    upstream module defines (upstream's modules have no ``__all__``: a star import gives every public name)."""
    defined = _installed_names(module)
    if defined is None:
        return None
    return {name for name in _free_names(tree) if name in defined and not name.startswith("_")}


def _star_why_not(module: str, names: set[str] | None, line: int) -> str:
    """Why ``from module import *`` stays an upstream import; ``names``: what the file takes from it."""
    namespace = NAMESPACES.get(module)
    kept_why = kept(module)
    if kept_why:
        why = f"kept: {kept_why}"
    elif namespace is None:
        why = "a module the harness has no namespace for; import the names from harness instead"
    elif names is None:
        why = "the installed torch's module cannot be read to tell which names it gives"
    else:
        why = (f"uses {', '.join(sorted(names - offered(module)))}, which harness.upstream_modules.{namespace} "
               "does not offer")
    return f"from {module} import * (line {line}): {why}"


def _binds_torch(tree: ast.AST, but: ast.AST) -> bool:
    for node in ast.walk(tree):
        if node is not but and isinstance(node, ast.Import) and any(
                a.asname is None and (a.name == "torch" or a.name.startswith("torch.")) for a in node.names):
            return True
    return False


def port_source(source: str, path: str = "<string>") -> PortResult:
    """Rewrite ``torch.testing._internal`` imports; every other line stays as it was, but for the dotted
    references to a module imported without an alias (``torch.testing._internal.common_utils.SEED``).

    ``from X import name``: a name with a public twin moves to ``from harness import``, one the namespace of
    ``X`` in ``harness.upstream_modules`` offers to ``from harness.upstream_modules.<X> import``. A module imported
    whole becomes an import of its namespace, when the namespace offers every name the file reads from it.

    Example::

        port_source("from torch.testing._internal.common_fsdp import FSDPTest, patch_all_gather\n").new
        # 'from harness import FSDPTest\nfrom harness.upstream_modules.common_fsdp import patch_all_gather\n'
    """
    tree = ast.parse(source, filename=path)
    lines = source.splitlines(True)
    edits: list[tuple[int, int, str]] = []  # (first line index, end line index exclusive, replacement)
    spans: list[tuple[int, int, int, str]] = []  # (line index, start byte, end byte, replacement) inside a line
    mapped: list[str] = []
    unmapped: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.startswith(_UPSTREAM) for a in node.names):
            indent = _indent(lines, node)
            out: list[str] = []
            for a in node.names:
                if not a.name.startswith(_UPSTREAM):
                    out.append(f"{indent}import {_alias(a)}\n")
                    continue
                namespace = NAMESPACES.get(a.name)
                bound = a.asname or a.name
                attrs, spelled = _uses(tree, bound)
                missing = sorted(attrs - offered(a.name))
                if namespace is None or missing:
                    out.append(f"{indent}import {_alias(a)}\n")
                    why = (f"uses {', '.join(missing)}, which harness.upstream_modules.{namespace} does not offer"
                           if namespace else f"kept: {kept(a.name)}" if kept(a.name)
                           else "a module the harness has no namespace for; import the names from harness instead")
                    unmapped.append(f"import {_alias(a)} (line {node.lineno}): {why}")
                    continue
                mapped.append(f"{a.name} (the module)")
                if a.asname:
                    out.append(f"{indent}import {_NAMESPACE_PACKAGE}.{namespace} as {a.asname}\n")
                    continue
                # ``import a.b.c`` binds ``a`` and the file spells the module ``torch.testing._internal.x``
                out.append(f"{indent}import {_NAMESPACE_PACKAGE}.{namespace}\n")
                if not _binds_torch(tree, node):
                    out.append(f"{indent}import torch\n")
                for ref in spelled:
                    if ref.lineno == ref.end_lineno:
                        spans.append((ref.lineno - 1, ref.col_offset, ref.end_col_offset or 0,
                                      f"{_NAMESPACE_PACKAGE}.{namespace}"))
            edits.append((node.lineno - 1, node.end_lineno or node.lineno, "".join(out)))
            continue
        if not isinstance(node, ast.ImportFrom) or not (node.module or "").startswith(_UPSTREAM) or node.level:
            continue
        module = node.module or ""
        if any(a.name == "*" for a in node.names):
            names = _star_names(tree, module)
            namespace = NAMESPACES.get(module)
            if namespace is None or names is None or names - offered(module):
                unmapped.append(_star_why_not(module, names, node.lineno))
                continue
            indent = _indent(lines, node)
            edits.append((node.lineno - 1, node.end_lineno or node.lineno,
                          _import_line(f"{_NAMESPACE_PACKAGE}.{namespace}", ["*"], indent)))
            mapped += [f"{module}.{name}" for name in sorted(names)]
            continue
        provided = MAPPING.get(module, frozenset())
        to_harness: list[ast.alias] = []
        to_namespace: list[ast.alias] = []
        modules: list[str] = []
        stay: list[ast.alias] = []
        for a in node.names:
            whole = f"{module}.{a.name}"
            if whole in NAMESPACES:  # ``from torch.testing._internal import common_utils``: a module
                bound = a.asname or a.name
                missing = sorted(_uses(tree, bound)[0] - offered(whole))
                if missing:
                    stay.append(a)
                    unmapped.append(f"{whole} (line {node.lineno}): uses {', '.join(missing)}, which "
                                    f"harness.upstream_modules.{NAMESPACES[whole]} does not offer")
                else:
                    namespace = NAMESPACES[whole]
                    modules.append(namespace if namespace == bound else f"{namespace} as {bound}")
                    mapped.append(f"{whole} (the module)")
            elif a.name in provided:
                to_harness.append(a)
            elif a.name in offered(module):
                to_namespace.append(a)
            else:
                stay.append(a)
                if whole not in NAMESPACES:
                    unmapped.append(f"{_why_not(module, a.name)} (line {node.lineno})")
        if not (to_harness or to_namespace or modules):
            continue
        mapped += [f"{module}.{a.name}" for a in to_harness + to_namespace]
        indent = _indent(lines, node)
        new = ""
        if to_harness:
            new += _import_line("harness", [_harness_alias(a) for a in to_harness], indent)
        if to_namespace:
            new += _import_line(f"{_NAMESPACE_PACKAGE}.{NAMESPACES[module]}", [_alias(a) for a in to_namespace], indent)
        if modules:
            new += _import_line(_NAMESPACE_PACKAGE, modules, indent)
        if stay:
            new += _import_line(module, [_alias(a) for a in stay], indent)
        edits.append((node.lineno - 1, node.end_lineno or node.lineno, new))
    for index, start, end, text in sorted(spans, reverse=True):
        raw = lines[index].encode("utf-8")  # ast's columns count bytes
        lines[index] = (raw[:start] + text.encode("utf-8") + raw[end:]).decode("utf-8")
    added: list[str] = []
    if edits:
        lost = lost_imports(_applied(lines, edits))
        if lost:
            # after the last rewritten import at the top level, else after the file's last top-level import
            top = [e for e in edits if not lines[e[0]].startswith((" ", "\t"))]
            at = (max(top)[1] if top else
                  max((n.end_lineno or n.lineno for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))),
                      default=0))
            extra = "".join(f"import {m}  # imported by torch.testing._internal before the port\n" for m in lost)
            edits.append((at, at, extra))
            added = [f"{m} (reads {read})" for m, read in lost.items()]
    return PortResult(path, source, _applied(lines, edits), mapped, unmapped, added)


def _applied(lines: list[str], edits: list[tuple[int, int, str]]) -> str:
    out = list(lines)
    for start, end, text in sorted(edits, reverse=True):
        out[start:end] = [text]
    return "".join(out)


def _python_files(paths: list[str]) -> list[str]:
    found: list[str] = []
    for path in paths:
        if os.path.isdir(path):
            for folder, dirs, files in os.walk(path):
                dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in ("__pycache__", "node_modules"))
                found += [os.path.join(folder, f) for f in sorted(files) if f.endswith(".py")]
        else:
            found.append(path)
    return found


def private_imports(source: str, path: str = "<string>") -> list[str]:
    """Every ``torch.testing._internal`` import of ``source``, as ``path:line: what``.

    Example::

        private_imports("from torch.testing._internal.common_utils import run_tests\n", "t.py")
        # ['t.py:1: torch.testing._internal.common_utils: run_tests']
    """
    found = []
    for node in ast.walk(ast.parse(source, filename=path)):
        if isinstance(node, ast.Import):
            found += [f"{path}:{node.lineno}: import {a.name}" for a in node.names if a.name.startswith(_UPSTREAM)]
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith(_UPSTREAM):
            found.append(f"{path}:{node.lineno}: {node.module}: {', '.join(_alias(a) for a in node.names)}")
    return sorted(found, key=lambda item: int(item.split(":")[1]))


def check(paths: list[str]) -> int:
    """``--check``: print every private import left under ``paths``; 1 while any remains (or a file cannot be
    read), else 0."""
    left = 0
    status = 0
    files = _python_files(paths)
    for path in files:
        try:
            with open(path, encoding="utf-8") as f:
                found = private_imports(f.read(), path)
        except (OSError, SyntaxError, UnicodeDecodeError) as exc:
            print(f"{path}: cannot check: {type(exc).__name__}: {exc}", file=sys.stderr)
            status = 1
            continue
        for item in found:
            print(item)
        left += len(found)
    if left:
        print(f"{left} torch.testing._internal import(s) left in {len(files)} file(s): run python -m harness.port "
              "on them; a name it cannot map has no public counterpart yet", file=sys.stderr)
        return 1
    print(f"no torch.testing._internal import in {len(files)} file(s)", file=sys.stderr)
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m harness.port",
        description="Rewrite the imports (and only them) of upstream PyTorch test files from torch.testing._internal "
                    "to the harness's names; print the diff and what could not be mapped.",
        epilog="Names the harness has no counterpart for stay upstream imports: they keep working while torch is "
               "installed. Exit status: 0 done; 1 a file could not be read or parsed.")
    parser.add_argument("files", nargs="+", metavar="PATH",
                        help="upstream test files to port (with --check: files or folders, their .py files)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing: list every torch.testing._internal import left in PATH (file:line: "
                             "names) and exit 1 while one remains, 0 when none does (for a project's CI)")
    parser.add_argument("-n", "--dry-run", action="store_true", help="print the diff, write nothing")
    parser.add_argument("-o", "--out-dir", metavar="DIR",
                        help="write the ported files into DIR (same base names) instead of in place")
    parser.add_argument("-q", "--quiet", action="store_true", help="no diff, only the summary")
    args = parser.parse_args(argv)
    if args.check:
        return check(args.files)
    status = 0
    for path in args.files:
        try:
            with open(path, encoding="utf-8") as f:
                source = f.read()
            result = port_source(source, path)
        except (OSError, SyntaxError, UnicodeDecodeError) as exc:
            print(f"{path}: cannot port: {type(exc).__name__}: {exc}", file=sys.stderr)
            status = 1
            continue
        if not args.quiet and result.diff:
            sys.stdout.write(result.diff)
        target = path
        if args.out_dir:
            os.makedirs(args.out_dir, exist_ok=True)
            target = os.path.join(args.out_dir, os.path.basename(path))
        if not args.dry_run and (result.new != source or args.out_dir):
            with open(target, "w", encoding="utf-8") as f:
                f.write(result.new)
        verb = "would move" if args.dry_run else "moved"
        print(f"{path}: {verb} {len(result.mapped)} names to harness"
              + (f" (written to {target})" if target != path and not args.dry_run else ""), file=sys.stderr)
        for item in result.added:
            print(f"{path}: {'would import' if args.dry_run else 'imported'} {item}: upstream's harness had "
                  "imported it for the file", file=sys.stderr)
        if result.unmapped:
            print(f"{path}: {len(result.unmapped)} not mapped (left as upstream imports; the harness has no "
                  "counterpart):", file=sys.stderr)
            for item in result.unmapped:
                print(f"  {item}", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
