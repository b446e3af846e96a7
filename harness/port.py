"""``python -m harness.port FILE...``: rewrite the imports of upstream test files to the harness's names."""
from __future__ import annotations

import argparse
import ast
import dataclasses
import difflib
import os
import sys

__all__ = ["MAPPING", "RENAMED", "PortResult", "port_source", "main"]

_DISTRIBUTED = frozenset({"MultiProcessTestCase", "MultiProcContinuousTest", "MultiProcContinousTest",
                          "MultiThreadedTestCase", "skip_if_lt_x_gpu", "run_subtests"})

#: upstream names the harness provides under another name: the spelling upstream used before a rename
RENAMED: dict[str, str] = {"MultiProcContinousTest": "MultiProcContinuousTest"}

# upstream module -> the names the harness provides under the same name and meaning. common_fsdp,
# common_dtensor and sharded_tensor re-export names of common_distributed, and upstream's files import
# them from there too (``from ...common_dtensor import DTensorTestBase, skip_if_lt_x_gpu, with_comms``):
# left behind, upstream's skip_if_lt_x_gpu exits the rank with its skip code instead of running on CPU.
MAPPING: dict[str, frozenset[str]] = {
    "torch.testing._internal.common_distributed": _DISTRIBUTED,
    "torch.testing._internal.common_fsdp": frozenset({"FSDPTest", "FSDPTestMultiThread", "FSDPTestContinuous",
                                                      "check_sharded_parity"})
    | (_DISTRIBUTED - {"skip_if_lt_x_gpu"}),
    "torch.testing._internal.distributed._tensor.common_dtensor": frozenset({
        "DTensorTestBase", "DTensorContinuousTestBase", "DTensorOpTestBase", "with_comms",
        "LocalDTensorTestBase", "create_local_tensor_test_class"}) | _DISTRIBUTED,
    "torch.testing._internal.distributed.checkpoint_utils": frozenset({"with_temp_dir"}),
    "torch.testing._internal.common_utils": frozenset({"run_tests", "TestCase"}),
    "torch.testing._internal.distributed._shard.sharded_tensor": frozenset({
        "ShardedTensorTestBase", "with_comms", "MultiProcessTestCase"}),
}
_UPSTREAM = "torch.testing._internal"


@dataclasses.dataclass
class PortResult:
    """One file's rewrite: the new text, what moved to the harness, and what stayed upstream."""

    path: str
    old: str
    new: str
    mapped: list[str]  # "module.name" moved to ``from harness import``
    unmapped: list[str]  # "module.name (line N)" left as upstream imports: the harness has no counterpart

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


def _import_line(module: str, names: list[str], indent: str) -> str:
    one = f"{indent}from {module} import {', '.join(names)}\n"
    if len(one) <= 100:
        return one
    body = "".join(f"{indent}    {n},\n" for n in names)
    return f"{indent}from {module} import (\n{body}{indent})\n"


def port_source(source: str, path: str = "<string>") -> PortResult:
    """Rewrite ``from torch.testing._internal... import`` statements; every other line stays as it was.

    Example::

        port_source("from torch.testing._internal.common_fsdp import FSDPTest, MLP\\n").new
        # 'from harness import FSDPTest\\nfrom torch.testing._internal.common_fsdp import MLP\\n'
    """
    tree = ast.parse(source, filename=path)
    lines = source.splitlines(True)
    edits: list[tuple[int, int, str]] = []  # (first line index, end line index exclusive, replacement)
    mapped: list[str] = []
    unmapped: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith(_UPSTREAM):
                    unmapped.append(f"import {_alias(a)} (line {node.lineno}): a module import; import the names "
                                    "from harness instead")
            continue
        if not isinstance(node, ast.ImportFrom) or not (node.module or "").startswith(_UPSTREAM) or node.level:
            continue
        provided = MAPPING.get(node.module or "", frozenset())
        to_harness = [a for a in node.names if a.name in provided]
        stay = [a for a in node.names if a.name not in provided]
        for a in stay:
            unmapped.append(f"{node.module}.{a.name} (line {node.lineno})")
        if not to_harness:
            continue
        mapped += [f"{node.module}.{a.name}" for a in to_harness]
        first = lines[node.lineno - 1]
        indent = first[:len(first) - len(first.lstrip())]
        new = _import_line("harness", [_harness_alias(a) for a in to_harness], indent)
        if stay:
            new += _import_line(node.module or "", [_alias(a) for a in stay], indent)
        edits.append((node.lineno - 1, node.end_lineno or node.lineno, new))
    for start, end, text in sorted(edits, reverse=True):
        lines[start:end] = [text]
    return PortResult(path, source, "".join(lines), mapped, unmapped)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m harness.port",
        description="Rewrite the imports (and only them) of upstream PyTorch test files from torch.testing._internal "
                    "to the harness's names; print the diff and what could not be mapped.",
        epilog="Names the harness has no counterpart for stay upstream imports: they keep working while torch is "
               "installed. Exit status: 0 done; 1 a file could not be read or parsed.")
    parser.add_argument("files", nargs="+", metavar="FILE", help="upstream test files to port")
    parser.add_argument("-n", "--dry-run", action="store_true", help="print the diff, write nothing")
    parser.add_argument("-o", "--out-dir", metavar="DIR",
                        help="write the ported files into DIR (same base names) instead of in place")
    parser.add_argument("-q", "--quiet", action="store_true", help="no diff, only the summary")
    args = parser.parse_args(argv)
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
        if result.unmapped:
            print(f"{path}: {len(result.unmapped)} not mapped (left as upstream imports; the harness has no "
                  "counterpart):", file=sys.stderr)
            for item in result.unmapped:
                print(f"  {item}", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
