"""Mutation testing of paijob's core pure modules: do the tests notice a small deliberate bug?

Why our own mutator: the modules are pure and small, and what we need is few
operators, ids that stay put when unrelated code moves, and each mutant run
against a handful of test files in seconds. For every module in
``modules.toml`` it makes each mutant (a flipped comparison, an integer off by
one, ``and`` <-> ``or``, a deleted statement, ``return None``, a misspelt
``ENV_VAR_LIKE`` string, a negated condition), loads it in place of the
module (``overlay/sitecustomize.py``: the checkout is never written) and runs
the module's tests with ``pytest -x``. A mutant the tests fail on is killed; one
they pass is a survivor. Survivors listed in ``equivalent.txt`` (``id: reason``)
change nothing a user can see; any other survivor, or a module killing under its
target share of the rest, fails the run.

Usage (from the repository root, with the project's venv):
    .venv/bin/python .ci/mutation/mutate.py                 # every module
    .venv/bin/python .ci/mutation/mutate.py paijob/openpai/names.py
    .venv/bin/python .ci/mutation/mutate.py --changed-since origin/main
    .venv/bin/python .ci/mutation/mutate.py --list paijob/openpai/names.py   # the mutants, nothing run
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import tomllib

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CONFIG = HERE / "modules.toml"
EQUIVALENT = HERE / "equivalent.txt"
OVERLAY = HERE / "overlay"
# A string that reads like an environment variable's name (or a prefix of one): PAI_TASK_INDEX, PAI_RESOURCE_.
ENV_NAME = re.compile(r"^[A-Z][A-Z0-9]*(_[A-Z0-9]*)+$")
FLIP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
        ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is}
NEGATE = {ast.Lt: ast.GtE, ast.LtE: ast.Gt, ast.Gt: ast.LtE, ast.GtE: ast.Lt}


@dataclass(frozen=True)
class Mutant:
    id: str
    module: str  # path relative to the root
    line: int
    operator: str
    before: str
    after: str
    source: str  # the whole mutated module


@dataclass(frozen=True)
class Module:
    path: str
    tests: tuple[str, ...]
    target: float


@dataclass(frozen=True)
class Outcome:
    mutant: Mutant
    killed: bool
    how: str  # "failed", "error", "timeout" or "survived"
    seconds: float


# --------------------------------------------------------------------------- making mutants


class _Sites(ast.NodeVisitor):
    """Every place a mutant goes, in source order, with the function it sits in."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.lines = source.split("\n")  # as ast numbers lines (str.splitlines also splits at \f, \x1c, ...)
        self.offsets = [0]
        for line in self.lines:
            self.offsets.append(self.offsets[-1] + len(line) + 1)
        self.scope: list[str] = []
        # (qualname, operator, node, replacement text)
        self.found: list[tuple[str, str, ast.AST, str]] = []

    # where nodes are
    def span(self, node: ast.AST) -> tuple[int, int]:
        start = self.offsets[node.lineno - 1] + len(
            self.lines[node.lineno - 1].encode()[: node.col_offset].decode())
        end_line = node.end_lineno or node.lineno
        end = self.offsets[end_line - 1] + len(
            self.lines[end_line - 1].encode()[: node.end_col_offset].decode())
        return start, end

    def text(self, node: ast.AST) -> str:
        start, end = self.span(node)
        return self.source[start:end]

    def add(self, operator: str, node: ast.AST, replacement: str) -> None:
        self.found.append((".".join(self.scope) or "<module>", operator, node, replacement))

    # scopes and what is never mutated
    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.scope.append(node.name)
        for statement in _body_without_docstring(node.body):
            self.visit(statement)
        self.scope.pop()

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.scope.append(node.name)
        for statement in _body_without_docstring(node.body):
            self.visit(statement)
        self.scope.pop()

    def visit_Module(self, node: ast.Module) -> None:
        for statement in _body_without_docstring(node.body):
            self.visit(statement)

    def visit_Import(self, node: ast.AST) -> None:
        return

    visit_ImportFrom = visit_Import

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)

    def visit_Raise(self, node: ast.Raise) -> None:
        # The error raised may go (the statement is deleted below); its message text is not mutated.
        return

    def visit_If(self, node: ast.If) -> None:
        if isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            return
        self.add("negate", node.test, f"(not ({self.text(node.test)}))")
        self.generic_visit(node)

    def visit_While(self, node: ast.While) -> None:
        self.add("negate", node.test, f"(not ({self.text(node.test)}))")
        self.generic_visit(node)

    def visit_IfExp(self, node: ast.IfExp) -> None:
        self.add("negate", node.test, f"(not ({self.text(node.test)}))")
        self.generic_visit(node)

    def visit_comprehension(self, node: ast.comprehension) -> None:
        for test in node.ifs:
            self.add("negate", test, f"(not ({self.text(test)}))")
        self.generic_visit(node)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> None:
        if isinstance(node.op, ast.Not):
            self.add("drop-not", node, f"({self.text(node.operand)})")
        self.generic_visit(node)

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        swapped = ast.BoolOp(op=ast.Or() if isinstance(node.op, ast.And) else ast.And(), values=node.values)
        self.add("and-or", node, f"({ast.unparse(swapped)})")
        self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> None:
        for index, op in enumerate(node.ops):
            for kind, table in (("boundary", FLIP), ("negate-cmp", NEGATE)):
                new = table.get(type(op))
                if new is None:
                    continue
                ops = list(node.ops)
                ops[index] = new()
                self.add(kind, node, f"({ast.unparse(ast.Compare(node.left, ops, node.comparators))})")
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        value = node.value
        if isinstance(value, int) and not isinstance(value, bool):
            self.add("int+1", node, repr(value + 1))
            self.add("int-1", node, repr(value - 1))
        elif isinstance(value, str) and ENV_NAME.match(value):
            self.add("misspell", node, repr(value + "X"))

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        # f"PAI_RESOURCE_{role}": the name's fixed part, misspelt.
        for part in node.values:
            if isinstance(part, ast.Constant) and isinstance(part.value, str) and ENV_NAME.match(part.value):
                copy = ast.JoinedStr(values=[
                    ast.Constant(value + "X") if p is part and isinstance((value := p.value), str) else p
                    for p in node.values])
                self.add("misspell", node, f"({ast.unparse(copy)})")
        for part in node.values:
            if isinstance(part, ast.FormattedValue):
                self.visit(part.value)

    def visit_Return(self, node: ast.Return) -> None:
        if node.value is not None and not (isinstance(node.value, ast.Constant) and node.value.value is None):
            self.add("return-none", node, "return None")
        self.generic_visit(node)

    def visit(self, node: ast.AST) -> None:
        if isinstance(node, ast.stmt) and self.scope and _deletable(node):
            self.add("delete", node, "pass")
        super().visit(node)


def _deletable(node: ast.stmt) -> bool:
    """A statement in a function whose removal still parses (a lone ``pass`` is nothing to delete)."""
    return not isinstance(node, ast.Pass | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
                          | ast.Import | ast.ImportFrom | ast.Global | ast.Nonlocal)


def _body_without_docstring(body: list[ast.stmt]) -> list[ast.stmt]:
    first = body[0] if body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return body[1:]
    return body


def mutants(path: str, source: str | None = None) -> list[Mutant]:
    """Every mutant of the module at ``path`` (relative to the root; or of ``source``), in source order."""
    source = (ROOT / path).read_text() if source is None else source
    sites = _Sites(source)
    sites.visit(ast.parse(source))
    seen: dict[tuple[str, str, str, str], int] = {}
    out = []
    for qualname, operator, node, replacement in sites.found:
        start, end = sites.span(node)
        before = source[start:end]
        mutated = source[:start] + replacement + source[end:]
        try:
            compile(mutated, path, "exec")
        except SyntaxError:
            continue
        key = (qualname, operator, " ".join(before.split()), replacement)
        occurrence = seen.get(key, 0)
        seen[key] = occurrence + 1
        digest = hashlib.sha1(repr((*key, occurrence)).encode()).hexdigest()[:8]
        out.append(Mutant(f"{path}:{qualname}:{operator}:{digest}", path, node.lineno, operator,
                          before, replacement, mutated))
    return out


# --------------------------------------------------------------------------- running them


def _module_name(path: str) -> str:
    return path.removesuffix(".py").replace("/", ".")


class Server:
    """One warm ``forkserver.py`` running one module's tests (see there)."""

    def __init__(self, module: Module, work: Path) -> None:
        self.basetemp = Path(tempfile.mkdtemp(dir=work))
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1",
               "PYTHONPATH": os.pathsep.join(filter(None, [str(OVERLAY), os.environ.get("PYTHONPATH")]))}
        env.pop("PAIJOB_MUTANT_MODULE", None)
        # pytest-timeout's per-test alarm would cancel the server's own per-mutant one (a mutant that loops).
        args = ["-x", "-q", "-p", "no:cacheprovider", "-p", "no:timeout", f"--basetemp={self.basetemp / 'pt'}",
                "-o", "addopts=",
                *module.tests]
        self.process = subprocess.Popen([sys.executable, str(HERE / "forkserver.py"), *args], cwd=ROOT, env=env,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        started = time.monotonic()
        self.warm_rc = self._reply()
        self.warm_seconds = time.monotonic() - started

    def _reply(self) -> int | None:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit("mutation: the fork server ended early (see its error above)")
        rc: int | None = json.loads(line)["rc"]
        return rc

    def run(self, module: str | None, file: str | None, timeout: float) -> int | None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"module": module, "file": file, "timeout": timeout}) + "\n")
        self.process.stdin.flush()
        return self._reply()

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait()


def run_mutant(mutant: Mutant, servers: queue.Queue[Server], work: Path, timeout: float) -> Outcome:
    folder = Path(tempfile.mkdtemp(dir=work))
    target = folder / Path(mutant.module).name
    target.write_text(mutant.source)
    server = servers.get()
    started = time.monotonic()
    try:
        code = server.run(_module_name(mutant.module), str(target), timeout)
    finally:
        servers.put(server)
        shutil.rmtree(folder, ignore_errors=True)
    seconds = time.monotonic() - started
    if code is None:
        return Outcome(mutant, True, "timeout", seconds)
    if code == 0:
        return Outcome(mutant, False, "survived", seconds)
    if code == 5:
        raise SystemExit(f"mutation: no test ran for {mutant.id}: check the test selection of {mutant.module}")
    return Outcome(mutant, True, "failed" if code == 1 else f"error {code}", seconds)


def start_servers(module: Module, work: Path, count: int) -> list[Server]:
    """Warm servers whose tests pass on the real module and fail when it cannot be imported."""
    servers = [Server(module, work) for _ in range(count)]
    if any(server.warm_rc != 0 for server in servers):
        raise SystemExit(f"mutation: the tests of {module.path} ({' '.join(module.tests)}) fail without any "
                         f"mutant; run them and fix that first")
    broken = work / "broken.py"
    broken.write_text("raise ImportError('mutation: the module under test is unusable')\n")
    if servers[0].run(_module_name(module.path), str(broken), 600) == 0:
        raise SystemExit(f"mutation: the tests of {module.path} pass with the module unimportable: "
                         f"they do not test it (modules.toml)")
    return servers


# --------------------------------------------------------------------------- config, list, report


def load_modules() -> list[Module]:
    config = tomllib.loads(CONFIG.read_text())
    target = float(config.get("target", 95))
    return [Module(path, tuple(spec["tests"]), float(spec.get("target", target)))
            for path, spec in config["modules"].items()]


def load_equivalent() -> dict[str, str]:
    """``id: reason`` per line; ``#`` starts a comment."""
    out = {}
    for number, line in enumerate(EQUIVALENT.read_text().splitlines(), 1):
        line = line.split(" #", 1)[0].strip() if not line.startswith("#") else ""
        if not line:
            continue
        ident, sep, reason = line.partition(": ")
        if not sep or not reason.strip():
            raise SystemExit(f"mutation: {EQUIVALENT.name}:{number}: write 'mutant id: why it changes nothing'")
        out[ident.strip()] = reason.strip()
    return out


def changed_modules(modules: list[Module], ref: str) -> list[Module]:
    """The modules whose file or tests differ from the merge-base with ``ref`` (committed or not)."""
    base = subprocess.run(["git", "merge-base", ref, "HEAD"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()
    changed = set(subprocess.run(["git", "diff", "--name-only", base], cwd=ROOT, capture_output=True,
                                 text=True, check=True).stdout.split())
    changed |= set(subprocess.run(["git", "ls-files", "--others", "--exclude-standard"], cwd=ROOT,
                                  capture_output=True, text=True, check=True).stdout.split())
    if any(name.startswith(".ci/mutation/") for name in changed):
        return modules  # the tool, its configuration or the list changed: everything again

    def touched(module: Module) -> bool:
        return any(name == module.path or any(name == t or name.startswith(t.rstrip("/") + "/")
                                               for t in module.tests) for name in changed)
    return [module for module in modules if touched(module)]


def _describe(mutant: Mutant) -> str:
    before = " ".join(mutant.before.split())
    before = before if len(before) <= 70 else before[:67] + "..."
    return f"{mutant.module}:{mutant.line}: {before!r} -> {mutant.after!r}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", help="modules to mutate (default: every module in modules.toml)")
    parser.add_argument("--changed-since", metavar="REF",
                        help="only the modules whose code or tests changed since the merge-base with REF")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--list", action="store_true", help="print the mutants, run nothing")
    args = parser.parse_args(argv)

    modules = load_modules()
    if args.paths:
        unknown = set(args.paths) - {m.path for m in modules}
        if unknown:
            raise SystemExit(f"mutation: not in {CONFIG.name}: {', '.join(sorted(unknown))}")
        modules = [m for m in modules if m.path in args.paths]
    if args.changed_since:
        modules = changed_modules(modules, args.changed_since)
        if not modules:
            print("mutation: no module under mutation testing changed; nothing to run")
            return 0
    if args.list:
        for module in modules:
            for mutant in mutants(module.path):
                print(f"{mutant.id}  {_describe(mutant)}")
        return 0

    equivalent = load_equivalent()
    failed = False
    work = Path(tempfile.mkdtemp(prefix="paijob-mutation-"))
    started = time.monotonic()
    try:
        for module in modules:
            module_started = time.monotonic()
            started_servers = start_servers(module, work, max(1, args.workers))
            timeout = max(60.0, 10 * max(s.warm_seconds for s in started_servers))
            servers: queue.Queue[Server] = queue.Queue()
            for server in started_servers:
                servers.put(server)
            todo = mutants(module.path)
            try:
                with ThreadPoolExecutor(max_workers=len(started_servers)) as pool:
                    outcomes = list(pool.map(partial(run_mutant, servers=servers, work=work, timeout=timeout), todo))
            finally:
                for server in started_servers:
                    server.close()
            failed |= report(module, outcomes, equivalent, time.monotonic() - module_started)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"mutation: {len(modules)} module(s) in {time.monotonic() - started:.0f} s: "
          f"{'FAILED' if failed else 'ok'}")
    return 1 if failed else 0


def report(module: Module, outcomes: list[Outcome], equivalent: dict[str, str], seconds: float) -> bool:
    """Print the module's score and its survivors; True when it fails the check."""
    survivors = [o.mutant for o in outcomes if not o.killed]
    listed = [m for m in survivors if m.id in equivalent]
    new = [m for m in survivors if m.id not in equivalent]
    killed_listed = [o.mutant for o in outcomes if o.killed and o.mutant.id in equivalent]
    ids = {o.mutant.id for o in outcomes}
    stale = sorted(i for i in equivalent if i.startswith(module.path + ":") and i not in ids)
    counted = len(outcomes) - len(listed)
    killed = sum(o.killed for o in outcomes)
    score = 100.0 * killed / counted if counted else 100.0
    low = score < module.target
    print(f"{module.path}: {killed}/{counted} killed ({score:.1f} %, target {module.target:g} %), "
          f"{len(listed)} equivalent, {len(new)} new survivor(s), {len(outcomes)} mutants in {seconds:.0f} s")
    for mutant in new:
        print(f"  SURVIVED {mutant.id}\n    {_describe(mutant)}")
    for mutant in killed_listed:
        print(f"  note: {mutant.id} is listed as equivalent but the tests kill it: drop it from {EQUIVALENT.name}")
    for ident in stale:
        print(f"  note: {ident} is listed as equivalent but no longer exists: drop it from {EQUIVALENT.name}")
    if low:
        print(f"  FAILED: {score:.1f} % is under the target {module.target:g} %")
    return low or bool(new)


if __name__ == "__main__":
    sys.exit(main())
