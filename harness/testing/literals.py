"""``EXPECTTEST_ACCEPT=1`` for an inline literal a rank process writes: found in the file as it is now.

expecttest finds the literal to rewrite by the caller's line number, shifted by the edits *its own process*
made to the file. Several processes of one run can edit one test file (rank 0 of a pool of 2 ranks and rank 0
of a pool of 4, a runner's ``-j`` processes), and each one's line numbers go stale when another one edits
above them. Here the call is found by what does not move when a literal is rewritten: the function it is in
(its qualified name) and which call of that method it is within the function (counted in the function's
bytecode, the same order as its source); the file is read, edited with expecttest's own
``replace_string_literal`` and written under a lock. A call that pins each device's text in a keyword of its own
(``cpu=``, ``cuda=``) has only this device's keyword written, added after the call's last argument where it is
missing; the rest of the call stays byte for byte.
"""
from __future__ import annotations

import ast
import dis
import inspect
import os
from typing import Any

__all__ = ["accept"]

#: (file, line of the call as compiled, the keyword of a device's pin or None) -> the value this process accepted there
_ACCEPTED: dict[tuple[str, int, str | None], str] = {}


def _ordinal(frame: Any, method: str) -> int:
    """Which call of ``method`` in the frame's function the frame is executing (0 the first in the source)."""
    count = -1
    for ins in dis.get_instructions(frame.f_code):
        if ins.offset > frame.f_lasti:
            break
        if ins.opname in ("LOAD_METHOD", "LOAD_ATTR") and ins.argval == method:
            count += 1
    return count


def _qualname(frame: Any) -> tuple[str, int]:
    """The qualified name of the frame's function, and 0; on Python 3.10, whose code objects do not have it, the
    method's class is found through ``self`` (the class whose attribute, unwrapped, runs this code); else the bare
    name and its first line in the file as it was imported (an earlier literal rewritten above it in the same run
    moves it: found by name, that is the last resort)."""
    code = frame.f_code
    qualname = getattr(code, "co_qualname", None)
    if qualname:
        return qualname, 0
    owner = frame.f_locals.get("self")
    for klass in type(owner).__mro__ if owner is not None else ():
        fn = vars(klass).get(code.co_name)
        if callable(fn) and getattr(inspect.unwrap(fn), "__code__", None) is code:
            return f"{klass.__qualname__}.{code.co_name}", 0
    return code.co_name, code.co_firstlineno


def _function(tree: ast.AST, qualname: str, firstlineno: int) -> Any:
    """The def with this qualified name (``Class.method``, ``f.<locals>.g``). ``firstlineno`` (Python 3.10, whose
    code objects have no qualified name): ``qualname`` is the bare name, and the def is the one of that name whose
    first line (its first decorator's) is that line."""
    if firstlineno:
        for n in ast.walk(tree):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == qualname \
                    and min([n.lineno, *(d.lineno for d in n.decorator_list)]) == firstlineno:
                return n
        return None
    scope: list[Any] = [tree]
    node: Any = None
    for part in [p for p in qualname.split(".") if p != "<locals>"]:
        found = [n for s in scope for n in getattr(s, "body", [])
                 if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == part]
        if not found:
            return None
        node = found[0]
        scope = [node]
    return node


def _calls(function: Any, method: str) -> list[ast.Call]:
    """The calls of ``self.<method>(...)`` in the function's own body (not in a nested def), in source order."""
    found: list[ast.Call] = []
    stack = list(ast.iter_child_nodes(function))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == method:
            found.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return sorted(found, key=lambda n: (n.lineno, n.col_offset))


def _offset(lines: list[str], lineno: int, col: int) -> int:
    """A character offset in the source from the AST's (line, UTF-8 byte column)."""
    before = sum(len(line) for line in lines[:lineno - 1])
    return before + len(lines[lineno - 1].encode("utf-8")[:col].decode("utf-8", "replace"))


def _literal(actual: str) -> str:
    import expecttest

    text, _ = expecttest.replace_string_literal('"""x"""', 1, 1, actual)
    return text


def _rewrite(path: str, qualname: str, ordinal: int, method: str, actual: str,
             keyword: str | None = None, firstlineno: int = 0) -> int | None:
    """Write ``actual`` as the literal of that call; its line (now), or None where the call cannot be found.

    ``keyword``: the literal of that keyword argument (a device's pin), added after the call's last argument where
    the call has none; every other argument is left byte for byte. None: the call's second positional argument
    (or ``expect=``)."""
    import fcntl

    import expecttest

    with open(path, "r+", encoding="utf-8") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # another rank process of the run may be editing this file
        try:
            src = f.read()
            tree = ast.parse(src)
            function = _function(tree, qualname, firstlineno)
            calls = _calls(function, method) if function is not None else []
            if not 0 <= ordinal < len(calls):
                return None
            call = calls[ordinal]
            lines = src.splitlines(keepends=True)
            if keyword is None:
                node = call.args[1] if len(call.args) > 1 else next(
                    (k.value for k in call.keywords if k.arg == "expect"), None)
            else:
                node = next((k.value for k in call.keywords if k.arg == keyword), None)
                if node is None:  # this device has no pin yet: add it after the last argument
                    last = max([*call.args, *(k.value for k in call.keywords)],
                               key=lambda n: (n.end_lineno, n.end_col_offset))
                    at = _offset(lines, last.end_lineno, last.end_col_offset)
                    f.seek(0)
                    f.truncate(0)
                    f.write(src[:at] + f", {keyword}=" + _literal(actual) + src[at:])
                    return last.end_lineno
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
                return None
            start = _offset(lines, node.lineno, node.col_offset)
            end = _offset(lines, node.end_lineno, node.end_col_offset)
            old = src[start:end]
            new, _ = expecttest.replace_string_literal(old, 1, old.count("\n") + 1, actual)
            if new == old:  # not a triple-quoted literal (an empty "" one): write one
                new = _literal(actual)
            f.seek(0)
            f.truncate(0)
            f.write(src[:start] + new + src[end:])
            return node.lineno
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def accept(frame: Any, method: str, actual: str, expect: str, fail: Any, keyword: str | None = None) -> int | None:
    """Under ``EXPECTTEST_ACCEPT``: make the literal of the call of ``method`` that ``frame`` executes say ``actual``
    (``keyword``: that keyword argument's literal, added where the call has none). The line written, or None where
    nothing was written (the literal already says it, or this call was accepted before in this process).

    The same call again in this process (a loop, the next hypothesis example, the next test of a reused rank)
    must give the same value: ``fail(message)`` otherwise.
    """
    path = frame.f_code.co_filename
    where = (path, frame.f_lineno, keyword)
    if where in _ACCEPTED:
        if _ACCEPTED[where] != actual:
            fail(f"one {method} call at {path}:{frame.f_lineno}, different values in one accepting run:\n"
                 f"{_ACCEPTED[where]}\n---\n{actual}")
        return None
    _ACCEPTED[where] = actual
    if actual == expect:
        return None
    qualname, firstlineno = _qualname(frame)
    line = None
    if os.path.isfile(path):
        line = _rewrite(path, qualname, _ordinal(frame, method), method, actual, keyword, firstlineno=firstlineno)
    if line is None and keyword is not None:
        fail(f"EXPECTTEST_ACCEPT: the {method} call at {path}:{frame.f_lineno} was not found in the file as it is "
             f"now, so its {keyword}= pin cannot be written; write it by hand:\n{keyword}={_literal(actual)}")
        return None
    if line is None:  # not found by name: expecttest's own way, by line number
        import expecttest

        expecttest.assert_expected_inline(actual, expect, pos=expecttest.PositionInfo(path, frame.f_lineno))
        return frame.f_lineno
    print(f"Accepting new output at {path}:{line}" + (f" ({keyword}=)" if keyword else ""), flush=True)
    return line
