"""The rules of `goodput lint` (SPEC section 15): the instrumentation mistakes the reference module's docstrings
forbid, found in Python source by reading its syntax tree (`ast`): nothing is imported or run.

A call counts by the name it is imported as from `instrument` or `nemo_rl.telemetry.instrumentation` (or their
submodules, and NeMo-RL's `nemo_rl.telemetry.span_groups` for `RLSpanGroup`): `from ... import managed_span as ms`,
`import instrument as inst` then `inst.managed_span`, `from nemo_rl.telemetry import instrumentation`. Groups are
read as `RLSpanGroup.X` (or its `U_X` alias) or as string literals; whether a group is a leaf and which efficiency
categories are bucketed are `instrument`'s own constants, not a copy. What cannot be read off the source (a group
held in a variable) is not guessed at: such a call is not judged.

`nested-bucket` follows what a `with` block opens lexically (several items of one `with` open in order, each inside
the ones before), what a function decorated with a bucketed `trace_fn` opens, and, one call deep, what a function of
the same file (or a method of the same class, called on `self`) opens when it is called inside a bucketed block: the
planted mistake of the example job's `--buggy` mode is of that kind. A function defined inside a block is not run
there, so its body is not inside it.
"""

from __future__ import annotations

import ast
import pkgutil
from collections.abc import Iterator
from dataclasses import dataclass, field

import instrument
from instrument.groups import (
    ALL_GROUPS,
    UMBRELLA_GROUPS,
    UNBUCKETED_SPAN_CATEGORIES,
    RLSpanGroup,
    bucket_for_efficiency_category,
    nearest_group,
)

# The modules whose names count: the package and NeMo-RL's reference module (each with its submodules).
INSTRUMENT_MODULES = ("instrument", "nemo_rl.telemetry.instrumentation", "nemo_rl.telemetry.span_groups")
# Each rule, its severity (SPEC section 15's table).
SEVERITY = {
    "nested-bucket": "error",
    "leaf-at-umbrella": "error",
    "umbrella-at-leaf": "warning",
    "undispatched-carrier": "error",
    "dispatch-undecorated": "warning",
    "unended-efficiency-span": "warning",
    "unknown-group": "warning",
}
LEAF_OPENERS = ("managed_span", "trace_fn")  # a bucketed span when given a leaf group
UMBRELLA_OPENERS = ("umbrella_span", "umbrella_trace_fn", "streaming_umbrella_span")
DECORATORS = ("trace_fn", "umbrella_trace_fn")
GROUP_TAKERS = (*LEAF_OPENERS, *UMBRELLA_OPENERS, "is_span_group_enabled", "goodput_span_attributes")
_UNKNOWN = object()  # a group (or category) the source does not spell out


@dataclass(frozen=True)
class LintFinding:
    """One mistake: `rule` at `line`:`col` (1-based, as ruff prints them) of `path`."""

    rule: str
    path: str
    line: int
    col: int
    message: str

    @property
    def severity(self) -> str:
        return SEVERITY[self.rule]

    def json(self) -> dict[str, object]:
        return {"rule": self.rule, "severity": self.severity, "path": self.path, "line": self.line, "col": self.col,
                "message": self.message}  # fmt: skip


@dataclass
class SourceFacts:
    """What the rules read across every file linted: the methods decorated `@accepts_trace_context`, and the
    methods (and functions) defined without it, by name."""

    carriers: set[str] = field(default_factory=set)
    undecorated: set[str] = field(default_factory=set)


class Names:
    """The instrumentation names one module imports: a local name -> the API name it stands for, and the local
    names (dotted) that stand for one of INSTRUMENT_MODULES."""

    def __init__(self, tree: ast.Module) -> None:
        self.functions: dict[str, str] = {}
        self.modules: set[str] = set()
        for node in statements(tree.body):  # imports inside functions count too (NeMo-RL imports lazily)
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    local = alias.asname or alias.name
                    if _is_module(f"{node.module}.{alias.name}"):
                        self.modules.add(local)  # from nemo_rl.telemetry import instrumentation (as x)
                    elif _is_instrument(node.module):
                        self.functions[local] = alias.name
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if _is_instrument(alias.name):
                        self.modules.add(alias.asname or alias.name)  # `import a.b.c` is used as a.b.c

    def api(self, node: ast.expr) -> str | None:
        """The API name `node` (a callee, a decorator, `RLSpanGroup`) stands for, or None."""
        if isinstance(node, ast.Name):
            return self.functions.get(node.id)
        if isinstance(node, ast.Attribute) and _dotted(node.value) in self.modules:
            return node.attr
        return None

    def group(self, node: ast.expr | None) -> object:
        """The group `node` spells: a string, or _UNKNOWN (a variable, a call); `RLSpanGroup.TYPO` gives 'TYPO?'."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Attribute) and self.api(node.value) == "RLSpanGroup":
            value = getattr(RLSpanGroup, node.attr, None)
            return value if isinstance(value, str) else ast.unparse(node) + "?"
        return _UNKNOWN


def _is_instrument(module: str) -> bool:
    return any(module == name or module.startswith(name + ".") for name in INSTRUMENT_MODULES)


def _is_module(dotted: str) -> bool:
    """Whether `dotted` (`from a import b` as `a.b`) names one of the modules, not a name they define."""
    return dotted in INSTRUMENT_MODULES or dotted in _INSTRUMENT_SUBMODULES


_INSTRUMENT_SUBMODULES = frozenset(f"instrument.{module.name}" for module in pkgutil.iter_modules(instrument.__path__))


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def _argument(call: ast.Call, position: int, keyword: str) -> ast.expr | None:
    if len(call.args) > position and not any(isinstance(a, ast.Starred) for a in call.args[: position + 1]):
        return call.args[position]
    return next((k.value for k in call.keywords if k.arg == keyword), None)


def _is_leaf(group: object) -> bool:
    """A leaf group: a known one, or a name that is none (the span is then an overhead leaf); not `RLSpanGroup.X`
    for an X the class lacks (that raises where it runs)."""
    return isinstance(group, str) and group not in UMBRELLA_GROUPS and not group.endswith("?")


def _is_umbrella(group: object) -> bool:
    return isinstance(group, str) and group in UMBRELLA_GROUPS


def _defined_functions(body: list[ast.stmt]) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def statements(body: list[ast.stmt], *, definitions: bool = True) -> Iterator[ast.stmt]:
    """Every statement of `body` and of the blocks inside it (with `definitions`, of the functions' and classes'
    defined there too), not the expressions: a small part of the tree, where imports and definitions are."""
    stack = list(reversed(body))
    while stack:
        node = stack.pop()
        yield node
        if not definitions and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for name in ("handlers", "cases", "finalbody", "orelse", "body"):
            inner = getattr(node, name, None)
            if isinstance(inner, list):
                for child in reversed(inner):
                    if isinstance(child, ast.stmt):
                        stack.append(child)
                    elif isinstance(child, (ast.ExceptHandler, ast.match_case)):
                        stack.extend(reversed(child.body))


def facts_of(tree: ast.Module, names: Names) -> SourceFacts:
    """The methods and functions of one module, decorated `@accepts_trace_context` or not."""
    facts = SourceFacts()
    for node in statements(tree.body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            decorated = any(names.api(d) == "accepts_trace_context" for d in node.decorator_list)
            (facts.carriers if decorated else facts.undecorated).add(node.name)
    return facts


@dataclass(frozen=True)
class CrossFile:
    """A finding that depends on what other files define: `rule` if method `method` is (`undispatched-carrier`: is
    decorated `@accepts_trace_context` somewhere; `dispatch-undecorated`: is defined, never decorated)."""

    finding: LintFinding
    method: str

    def holds(self, facts: SourceFacts) -> bool:
        if self.finding.rule == "undispatched-carrier":
            return self.method in facts.carriers
        return self.method in facts.undecorated and self.method not in facts.carriers


class Linter(ast.NodeVisitor):
    """The findings of one module (`findings`), and those that depend on every file linted (`cross_file`, to be
    held against their `SourceFacts`)."""

    def __init__(self, path: str, tree: ast.Module, names: Names) -> None:
        self.path, self.names = path, names
        self.findings: list[LintFinding] = []
        self.cross_file: list[CrossFile] = []
        self.scopes: list[tuple[str, dict[str, ast.AST], set[str]]] = []  # per function: name, started, ended
        self.open: list[str] = []  # the bucketed spans open around the node visited (their descriptions)
        self.module_functions = {f.name: f for f in _defined_functions(tree.body)}
        self.classes: list[dict[str, ast.FunctionDef | ast.AsyncFunctionDef]] = []
        self._opens_cache: dict[int, str | None] = {}
        self.visit(tree)

    def add(self, rule: str, node: ast.AST, message: str) -> None:
        self.findings.append(self.finding(rule, node, message))

    def finding(self, rule: str, node: ast.AST, message: str) -> LintFinding:
        line, col = getattr(node, "lineno", 1), getattr(node, "col_offset", 0) + 1
        return LintFinding(rule, self.path, line, col, message)

    # --- what a call opens -----------------------------------------------------------------------------------------

    def bucketed(self, call: ast.expr) -> str | None:
        """A description of the bucketed span `call` opens (`managed_span` of a leaf group, `efficiency_span` of a
        bucketed category), else None."""
        if not isinstance(call, ast.Call):
            return None
        api = self.names.api(call.func)
        if api == "managed_span":
            group = self.names.group(_argument(call, 0, "group"))
            if _is_leaf(group):
                return f"{_span_name(call)} ({group})"
        if api == "efficiency_span":
            category = _argument(call, 0, "category")
            if isinstance(category, ast.Constant) and isinstance(category.value, str):
                value = category.value
                if value not in UNBUCKETED_SPAN_CATEGORIES and bucket_for_efficiency_category(value) is not None:
                    return f"efficiency_span({value!r})"
        return None

    def decorated_bucketed(self, function: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
        for decorator in function.decorator_list:
            if isinstance(decorator, ast.Call) and self.names.api(decorator.func) == "trace_fn":
                group = self.names.group(_argument(decorator, 0, "group"))
                if _is_leaf(group):
                    return f"{_span_name(decorator)} ({group})"
        return None

    def opens(self, function: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
        """The bucketed span calling `function` opens: by its decorator, or the first its body opens itself."""
        key = id(function)
        if key not in self._opens_cache:
            self._opens_cache[key] = None  # a recursive function is not followed twice
            found = self.decorated_bucketed(function)
            if found is None:
                found = next((d for item in _with_items(function.body) if (d := self.bucketed(item)) is not None),
                             None)  # fmt: skip
            self._opens_cache[key] = found
        return self._opens_cache[key]

    def callee(self, call: ast.Call) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        """The function of this file (or method of the enclosing class, on `self`) that `call` calls."""
        func = call.func
        if isinstance(func, ast.Name):
            return self.module_functions.get(func.id)
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
            return self.classes[-1].get(func.attr) if self.classes else None
        return None

    # --- the visit -------------------------------------------------------------------------------------------------

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.classes.append({f.name: f for f in _defined_functions(node.body)})
        saved, self.open = self.open, []
        self.generic_visit(node)
        self.open = saved
        self.classes.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for decorator in node.decorator_list:
            self.visit(decorator)
        saved, self.open = self.open, []  # defined here, run elsewhere: not inside the blocks around it
        own = self.decorated_bucketed(node)
        if own is not None:
            self.open.append(own)
        self.scopes.append((node.name, {}, set()))
        for statement in node.body:
            self.visit(statement)
        self._unended(*self.scopes.pop())
        self.open = saved

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        saved, self.open = self.open, []
        self.generic_visit(node)
        self.open = saved

    def visit_With(self, node: ast.With | ast.AsyncWith) -> None:
        opened = 0
        for item in node.items:
            self.visit(item.context_expr)
            described = self.bucketed(item.context_expr)
            if described is not None:
                if self.open:
                    self.add("nested-bucket", item.context_expr,
                             f"{described} is opened inside {self.open[-1]}: the same seconds count twice")  # fmt: skip
                self.open.append(described)
                opened += 1
            if item.optional_vars is not None:
                self.visit(item.optional_vars)
        for statement in node.body:
            self.visit(statement)
        del self.open[len(self.open) - opened :]

    visit_AsyncWith = visit_With

    def visit_Assign(self, node: ast.Assign | ast.AnnAssign) -> None:
        value = node.value
        if self.scopes and isinstance(value, ast.Call) and self.names.api(value.func) == "start_efficiency_span":
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(target, ast.Name):
                    self.scopes[-1][1].setdefault(target.id, node)
        self.generic_visit(node)

    visit_AnnAssign = visit_Assign

    def visit_Return(self, node: ast.Return | ast.Yield | ast.YieldFrom) -> None:
        if self.scopes and isinstance(node.value, ast.Name):  # handed back: the caller ends it
            self.scopes[-1][2].add(node.value.id)
        self.generic_visit(node)

    visit_Yield = visit_YieldFrom = visit_Return

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if self.scopes and isinstance(func, ast.Attribute) and func.attr == "end" and isinstance(func.value, ast.Name):
            self.scopes[-1][2].add(func.value.id)
        api = self.names.api(node.func)
        if api in GROUP_TAKERS:
            self._groups(node, api)
        if api == "dispatch_with_trace_context":
            self._dispatched(node)
        if isinstance(node.func, ast.Attribute) and node.func.attr == "remote":
            self._remote(node)
        if self.open and api is None:
            callee = self.callee(node)
            described = self.opens(callee) if callee is not None else None
            if described is not None and callee is not None:
                self.add("nested-bucket", node, f"{callee.name}() opens {described} inside {self.open[-1]}: the "
                         "same seconds count twice")  # fmt: skip
        self.generic_visit(node)

    # --- the rules -------------------------------------------------------------------------------------------------

    def _groups(self, node: ast.Call, api: str) -> None:
        argument = _argument(node, 0, "group")
        group = self.names.group(argument)
        if group is _UNKNOWN:
            return
        if isinstance(group, str) and group not in ALL_GROUPS:
            where = argument if argument is not None else node
            close = nearest_group(group.rstrip("?").rpartition(".")[2])
            hint = f"; did you mean {close!r}?" if close else f" (the groups: {', '.join(sorted(ALL_GROUPS))})"
            self.add("unknown-group", where, f"{group.rstrip('?')!r} is no group of RLSpanGroup: the span is an "
                     f"overhead leaf{hint}")  # fmt: skip
            return
        if api in UMBRELLA_OPENERS and _is_leaf(group):
            self.add("leaf-at-umbrella", node, f"{api}() is given the leaf group {group!r}: an umbrella carries no "
                     f"bucket; use managed_span / trace_fn for a leaf")  # fmt: skip
        if api in LEAF_OPENERS and _is_umbrella(group):
            alias = f"RLSpanGroup.U_{str(group).upper()}"
            self.add("umbrella-at-leaf", node, f"{api}() is given the umbrella group {group!r}: say so at the call "
                     f"site with umbrella_{'span' if api == 'managed_span' else 'trace_fn'}() and {alias}")  # fmt: skip

    def _remote(self, node: ast.Call) -> None:
        handle = node.func.value if isinstance(node.func, ast.Attribute) else None
        method, called = handle, ".remote()"
        # `worker.generate.options(...).remote(...)`: the method is under the `.options` call (they may chain).
        while isinstance(method, ast.Call) and isinstance(method.func, ast.Attribute) and method.func.attr == "options":
            method, called = method.func.value, ".options(...).remote()"
        if isinstance(method, ast.Attribute) and handle is not None:
            call = f"dispatch_with_trace_context({ast.unparse(handle)}, ...)"
            finding = self.finding("undispatched-carrier", node, f"{method.attr} accepts a trace context "
                                   f"(@accepts_trace_context) but is called with {called}: its spans start a trace "
                                   "of their own, or are not recorded at all on a cluster started before the job; "
                                   f"call {call}")  # fmt: skip
            self.cross_file.append(CrossFile(finding, method.attr))

    def _dispatched(self, node: ast.Call) -> None:
        target = node.args[0] if node.args else None
        if isinstance(target, ast.Attribute):
            finding = self.finding("dispatch-undecorated", node, f"{target.attr} is dispatched with a trace context "
                                   "but is defined without @accepts_trace_context: the carrier is dropped")  # fmt: skip
            self.cross_file.append(CrossFile(finding, target.attr))

    def _unended(self, function: str, started: dict[str, ast.AST], ended: set[str]) -> None:
        """unended-efficiency-span: a name given `start_efficiency_span(...)` in `function` with no `.end()` on it
        there (handing it back with `return` or `yield` counts as ending it: the caller does)."""
        for name, node in started.items():
            if name not in ended:
                self.add("unended-efficiency-span", node, f"{name} = start_efficiency_span(...) is never ended "
                         f"in {function}(): call {name}.end() (in a finally) or the span is never "
                         "exported")  # fmt: skip


def _span_name(call: ast.Call) -> str:
    name = _argument(call, 1, "name")
    return repr(name.value) if isinstance(name, ast.Constant) else (ast.unparse(name) if name is not None else "?")


def _with_items(body: list[ast.stmt]) -> Iterator[ast.expr]:
    """The context expressions of every `with` in `body` (not inside functions or classes defined there)."""
    for node in statements(body, definitions=False):
        if isinstance(node, (ast.With, ast.AsyncWith)):
            yield from (item.context_expr for item in node.items)
