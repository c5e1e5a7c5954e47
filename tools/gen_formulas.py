"""Write src/ndcost/tables/formulas_scalar.py, the scalar twins of the formulas in src/ndcost/tables/formulas.py,
and src/ndcost/tables/formulas_fused.py, the fused twins (below).

Run after changing formulas.py or formulas_ops.py: ``python tools/gen_formulas.py``.
tests/test_formulas.py fails when the checked-in file is stale.

A twin is its formula with every ``ops`` call written out as the plain Python of
``_ScalarOps`` (src/ndcost/tables/formulas_ops.py): a one-expression static method is inlined
with its arguments in place of its parameters (``ops.where(a, b, c)`` -> ``b if a else c``),
a ``staticmethod(f)`` alias becomes ``f`` (``ops.maximum`` -> ``max``), and a local alias
``where = ops.where`` is resolved and dropped. joint_reason's rule list becomes early
returns: ``rules.append((name, broken))`` -> ``if broken: return codes[name]``, and
``return ops.first_reason(rules, codes)`` -> ``return 0``. An ``ops`` use no rule covers
stops the generator, so a twin never calls ``ops`` and never differs from ``_ScalarOps``.
Then ``&``/``|`` between provably bool operands (comparisons, ``not``, locals only ever
bound to such) become ``and``/``or``: the same bool, skipping what cannot change it.

A *fused* twin (``FUSED``) is joint_reason's twin (its locals prefixed ``joint_``, a broken rule
returning ``(code, None, None)``), then derived_columns' twin with its consumers' twins written after it,
in one function: derived's returned entries become locals (``d_<name>``, or the local a value
already is), each consumer's ``d["name"]`` reads that local, its own locals take its prefix
(``memory_seq``), derived's assignments no one reads are dropped, and it returns the asked-for
derived values (or a dict of them) after a 0 and then the consumers' tuples concatenated: what
``estimate()`` packs for one candidate, without the intermediate dicts and calls.
"""
from __future__ import annotations

import ast
import builtins
import copy
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src/ndcost/tables"
FORMULAS = ("derived_columns", "derived_extra_columns", "nd_candidate_columns", "memory_candidate_columns",
            "seconds_candidate_columns", "fixed_bytes_columns", "joint_reason")
#: The fused twins: name -> (the consumers of derived_columns run in its body, the derived values returned
#: after the joint reason, as a dict of them or not). joint_reason runs first: one candidate pays for no
#: intermediate dict or call. The second's dict holds what ndcost.tables.seconds.seconds_candidate_values
#: reads, and d_exp.
FUSED = {
    "joint_nd_memory_candidate": (("nd_candidate_columns", "memory_candidate_columns"), ("d_exp",), False),
    "joint_derived_memory_candidate": (("memory_candidate_columns",), (
        "d_exp", "sp", "t_exp", "expert_data_parallel", "micro_batch_num", "bytes_grad", "zero_shard_ranks",
        "defers_grads", "reshards", "tie_embeddings"), True),
}
OUTPUT = PACKAGE / "formulas_scalar.py"
FUSED_OUTPUT = PACKAGE / "formulas_fused.py"


def _is_ops_attribute(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "ops"


def _scalar_rules(ops_tree: ast.Module, rules: str = "_ScalarOps") -> tuple[dict[str, ast.expr],
                                                                         dict[str, tuple[list[str], ast.expr]]]:
    """The *rules* class's (``_ScalarOps``'s) aliases (name -> callable expression) and one-expression
    methods (name -> params, body), a base class of the same module's first (the class overrides it)."""
    classes = {node.name: node for node in ops_tree.body if isinstance(node, ast.ClassDef)}
    cls = classes[rules]
    aliases: dict[str, ast.expr] = {}
    inline: dict[str, tuple[list[str], ast.expr]] = {}
    for base in cls.bases:
        if isinstance(base, ast.Name) and base.id in classes:
            base_aliases, base_inline = _scalar_rules(ops_tree, base.id)
            aliases.update(base_aliases)
            inline.update(base_inline)
    for node in cls.body:
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Name) and node.value.func.id == "staticmethod"):
            aliases[node.targets[0].id] = node.value.args[0]
            inline.pop(node.targets[0].id, None)
        elif isinstance(node, ast.FunctionDef):
            aliases.pop(node.name, None)
            body = [stmt for stmt in node.body
                    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant))]
            if len(body) == 1 and isinstance(body[0], ast.Return):
                inline[node.name] = ([arg.arg for arg in node.args.args], body[0].value)
    return aliases, inline


def _is_simple(node: ast.expr) -> bool:
    """A name, a constant, or one of them subscripted/attributed: cheap and pure to read twice."""
    while isinstance(node, (ast.Subscript, ast.Attribute)):
        if isinstance(node, ast.Subscript) and not isinstance(node.slice, (ast.Constant, ast.Name)):
            return False
        node = node.value
    return isinstance(node, (ast.Name, ast.Constant))


class _Substitute(ast.NodeTransformer):
    def __init__(self, values: dict[str, ast.expr]) -> None:
        self.values = values

    def visit_Name(self, node: ast.Name) -> ast.AST:
        return copy.deepcopy(self.values[node.id]) if node.id in self.values else node


class _Scalarise(ast.NodeTransformer):
    """One formula function -> its scalar twin (see the module docstring)."""

    def __init__(self, aliases: dict[str, ast.expr], inline: dict[str, tuple[list[str], ast.expr]]) -> None:
        self.aliases, self.inline = aliases, inline
        self.local_ops: dict[str, str] = {}

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        kept = []
        for stmt in node.body:
            if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
                    and _is_ops_attribute(stmt.value)):
                self.local_ops[stmt.targets[0].id] = stmt.value.attr      # where = ops.where
            elif (isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.List) and not stmt.value.elts
                  and [target.id for target in stmt.targets if isinstance(target, ast.Name)] == ["rules"]):
                continue                                                  # rules = []
            else:
                kept.append(stmt)
        node.body = kept
        self.generic_visit(node)
        return node

    def visit_Expr(self, node: ast.Expr) -> ast.AST:
        call = node.value
        if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "append"
                and isinstance(call.func.value, ast.Name) and call.func.value.id == "rules"):
            (rule,) = call.args
            name, broken = rule.elts
            code = ast.Subscript(value=ast.Name(id="codes", ctx=ast.Load()), slice=name, ctx=ast.Load())
            return ast.copy_location(ast.If(test=self.visit(broken), body=[ast.Return(value=code)], orelse=[]), node)
        return self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> ast.AST:
        if _is_ops_attribute(node.func):
            name = node.func.attr
        elif isinstance(node.func, ast.Name) and node.func.id in self.local_ops:
            name = self.local_ops[node.func.id]
        else:
            return self.generic_visit(node)
        if name == "first_reason":
            return ast.copy_location(ast.Constant(0), node)               # no rule broke
        node.args = [self.visit(arg) for arg in node.args]
        if node.keywords:
            raise ValueError(f"ops.{name}: keyword arguments have no scalar rule")
        if name in self.aliases:
            return ast.copy_location(ast.Call(func=copy.deepcopy(self.aliases[name]), args=node.args, keywords=[]),
                                     node)
        if name in self.inline:
            params, body = self.inline[name]
            if len(node.args) != len(params):
                raise ValueError(f"line {node.lineno}: ops.{name} takes {len(params)} arguments")
            for param, arg in zip(params, node.args):
                uses = sum(isinstance(n, ast.Name) and n.id == param for n in ast.walk(body))
                if uses > 1 and not _is_simple(arg):
                    raise ValueError(f"line {node.lineno}: ops.{name} reads {param} twice; "
                                     f"name {ast.unparse(arg)!r} first (a local)")
            return ast.copy_location(_Substitute(dict(zip(params, node.args))).visit(copy.deepcopy(body)), node)
        raise ValueError(f"ops.{name} has no scalar rule (a one-expression static method of _ScalarOps)")

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in ("ops", "rules") or node.id in self.local_ops:
            raise ValueError(f"line {node.lineno}: {node.id!r} used other than through a rewritten call")
        return node


def _bool_names(function: ast.FunctionDef) -> set[str]:
    """The locals of *function* every assignment of which is a provably bool expression."""
    assigned: dict[str, list[ast.expr | None]] = {}
    for node in ast.walk(function):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        assigned.setdefault(name.id, []).append(node.value if target is name else None)
        elif isinstance(node, (ast.For, ast.AugAssign, ast.AnnAssign, ast.NamedExpr)):
            for name in ast.walk(node.target):
                if isinstance(name, ast.Name):
                    assigned.setdefault(name.id, []).append(None)       # not tracked: never bool
    bools = set(assigned) - {arg.arg for arg in function.args.args}
    while True:                                                          # drop names until a fixpoint
        kept = {name for name in bools if all(v is not None and _is_bool(v, bools) for v in assigned[name])}
        if kept == bools:
            return bools
        bools = kept


def _is_bool(node: ast.expr, bool_names: set[str]) -> bool:
    if isinstance(node, ast.Compare) or (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)):
        return True
    if isinstance(node, ast.Constant):
        return isinstance(node.value, bool)
    if isinstance(node, ast.Name):
        return node.id in bool_names
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.BitAnd, ast.BitOr)):
        return _is_bool(node.left, bool_names) and _is_bool(node.right, bool_names)
    if isinstance(node, ast.BoolOp):
        return all(_is_bool(value, bool_names) for value in node.values)
    if isinstance(node, ast.IfExp):
        return _is_bool(node.body, bool_names) and _is_bool(node.orelse, bool_names)
    return False


class _ShortCircuit(ast.NodeTransformer):
    """``a & b`` -> ``a and b`` (``|``: ``or``) where both sides are provably bool: the same
    value (``and``/``or`` return an operand, here a bool), without evaluating what cannot
    change it. The formulas write ``&``/``|`` because numpy columns need them."""

    def __init__(self, bool_names: set[str]) -> None:
        self.bool_names = bool_names

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        if not (isinstance(node.op, (ast.BitAnd, ast.BitOr)) and _is_bool(node, self.bool_names)):
            return node
        op = ast.And() if isinstance(node.op, ast.BitAnd) else ast.Or()
        values = []
        for side in (node.left, node.right):                             # a & b & c -> a and b and c
            values += side.values if isinstance(side, ast.BoolOp) and type(side.op) is type(op) else [side]
        return ast.copy_location(ast.BoolOp(op=op, values=values), node)


def _free_names(functions: list[ast.FunctionDef]) -> set[str]:
    free = set()
    for function in functions:
        bound = {arg.arg for arg in function.args.args}
        bound |= {node.id for node in ast.walk(function) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}
        free |= {node.id for node in ast.walk(function) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}
        free -= bound
    return free - set(dir(builtins))


def _imports(free: set[str], trees: dict[str, ast.Module]) -> list[str]:
    """Import lines for the twins' free names, taken from the two source modules' own imports and definitions."""
    plain: set[str] = set()
    from_module: dict[str, set[str]] = {}
    for module_name, tree in trees.items():
        for node in tree.body:
            if isinstance(node, ast.Import):
                plain |= {f"import {alias.name}" for alias in node.names if alias.name in free}
                free = free - {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
                source = "." * node.level + (node.module or "")
                names = {alias.name for alias in node.names} & free
                from_module.setdefault(source, set()).update(names)
                free = free - names
        if module_name == "formulas_ops":
            defined = {target.id for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))
                       for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
                       if isinstance(target, ast.Name)}
            defined |= {node.name for node in tree.body if isinstance(node, (ast.ClassDef, ast.FunctionDef))}
            from_module.setdefault(".formulas_ops", set()).update(defined & free)
            free = free - defined
    if free:
        raise ValueError(f"the twins use names neither source module defines: {sorted(free)}")
    lines = sorted(plain)
    for source in sorted(from_module, key=lambda s: (s.startswith("."), s)):
        names = sorted(from_module[source], key=str.lower)
        if names and source.startswith(".") and lines and not lines[-1].startswith("from ."):
            lines.append("")
        if names:
            lines.append(f"from {source} import {', '.join(names)}" if len(names) < 4 else
                         "\n".join([f"from {source} import (", *(f"    {name}," for name in names), ")"]))
    return lines


def _fused_first(value: ast.expr) -> str:
    """One of a fused twin's first returned values; derived's dict one entry per line."""
    if isinstance(value, ast.Dict):
        return "\n".join(["        {", *(f"            {ast.unparse(k)}: {ast.unparse(v)},"
                                         for k, v in zip(value.keys, value.values)), "        },"])
    return f"        {ast.unparse(value)},"


def _statement(stmt: ast.stmt) -> str:
    """*stmt* as source; a returned dict or tuple one entry per line (the twins' outputs are long)."""
    value = getattr(stmt, "value", None)
    if isinstance(stmt, ast.Return) and isinstance(value, ast.Dict):
        entries = [f"        {ast.unparse(k)}: {ast.unparse(v)}," for k, v in zip(value.keys, value.values)]
        return "\n".join(["    return {", *entries, "    }"])
    if isinstance(stmt, ast.Return) and isinstance(value, ast.Tuple):
        *first, last = value.elts
        if first and isinstance(last, ast.Tuple):                        # a fused twin's (..., candidate)
            return "\n".join(["    return (", *(_fused_first(v) for v in first), "        (",
                              *(f"            {ast.unparse(v)}," for v in last.elts), "        ),", "    )"])
        return "\n".join(["    return (", *(f"        {ast.unparse(v)}," for v in value.elts), "    )"])
    if (isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Tuple) and isinstance(value, ast.Call)
            and isinstance(value.func, ast.Name) and value.func.id.startswith("_C_")):
        names = ", ".join(ast.unparse(v) for v in stmt.targets[0].elts)   # a fused twin's prefetch
        return "\n".join(["    (", textwrap.fill(names, width=116, initial_indent=" " * 8, subsequent_indent=" " * 8)
                          + ",", f"    ) = {ast.unparse(value)}"])
    return "\n".join("    " + line for line in ast.unparse(stmt).splitlines())


def _body(function: ast.FunctionDef) -> tuple[list[ast.stmt], ast.expr]:
    """A twin's statements (no docstring) and its one final return's value."""
    body = function.body[1:] if ast.get_docstring(function) is not None else list(function.body)
    *statements, last = body
    if not isinstance(last, ast.Return) or any(isinstance(node, ast.Return) for s in statements for node in ast.walk(s)):
        raise ValueError(f"{function.name}: a fused twin's parts must end in their only return")
    return statements, last.value


def _stored(statements: list[ast.stmt]) -> set[str]:
    return {node.id for s in statements for node in ast.walk(s) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}


class _Rename(ast.NodeTransformer):
    """Locals renamed; ``d["name"]`` -> the local holding derived's *name* (any other read of d stops the generator)."""

    def __init__(self, names: dict[str, str], derived: dict[str, str] | None) -> None:
        self.names, self.derived = names, derived

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        if self.derived is not None and isinstance(node.value, ast.Name) and node.value.id == "d":
            if not (isinstance(node.slice, ast.Constant) and node.slice.value in self.derived):
                raise ValueError(f"line {node.lineno}: d read other than by a derived value's name")
            return ast.copy_location(ast.Name(id=self.derived[node.slice.value], ctx=ast.Load()), node)
        return self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if self.derived is not None and node.id == "d":
            raise ValueError(f"line {node.lineno}: d read other than by a derived value's name")
        return ast.copy_location(ast.Name(id=self.names[node.id], ctx=node.ctx), node) if node.id in self.names else node


def _prune(statements: list[ast.stmt], live: set[str]) -> list[ast.stmt]:
    """Drop the assignments (of straight-line code) whose targets nothing after them reads."""
    kept: list[ast.stmt] = []
    for stmt in reversed(statements):
        if isinstance(stmt, ast.Assign) and not _stored([stmt]) & live:
            continue
        kept.append(stmt)
        live |= {node.id for node in ast.walk(stmt) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}
    return kept[::-1]


class _ReadC(ast.NodeTransformer):
    """``c["key"]`` -> the local ``c_key``, the keys recorded in order of first read."""

    def __init__(self) -> None:
        self.keys: dict[str, str] = {}

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        if (isinstance(node.value, ast.Name) and node.value.id == "c" and isinstance(node.slice, ast.Constant)
                and isinstance(node.slice.value, str)):
            local = self.keys.setdefault(node.slice.value, f"c_{node.slice.value}")
            return ast.copy_location(ast.Name(id=local, ctx=ast.Load()), node)
        return self.generic_visit(node)


def _prefetch(name: str, statements: list[ast.stmt], result: ast.expr) -> tuple[list[ast.stmt], ast.expr]:
    """Every ``c["key"]`` of a fused twin read once, up front, by one ``operator.itemgetter`` call
    (module-level ``_C_<NAME>``): half its cost was ~70 dict reads of ~40 keys, one bytecode each."""
    reads = _ReadC()
    statements = [reads.visit(stmt) for stmt in statements]
    result = reads.visit(result)
    taken = _stored(statements)
    if taken & set(reads.keys.values()) or len(reads.keys) < 2:
        raise ValueError(f"{name}: its c_<key> locals collide, or it reads fewer than two keys of c")
    if any(isinstance(node, ast.Name) and node.id == "c" for s in statements for node in ast.walk(s)):
        raise ValueError(f"{name}: reads c other than by a constant key")
    getter = ast.Call(func=ast.Name(id=f"_C_{name.upper()}", ctx=ast.Load()), args=[ast.Name(id="c", ctx=ast.Load())],
                      keywords=[])
    targets = ast.Tuple(elts=[ast.Name(id=local, ctx=ast.Store()) for local in reads.keys.values()], ctx=ast.Store())
    _PREFETCHED[name] = tuple(reads.keys)
    return [ast.Assign(targets=[targets], value=getter, lineno=0), *statements], result


#: The keys each fused twin reads of c, in its itemgetter's order (filled by _prefetch).
_PREFETCHED: dict[str, tuple[str, ...]] = {}


class _ReasonAndNones(ast.NodeTransformer):
    """``return code`` -> ``return (code, None, ...)``: a broken rule's return, shaped as the fused twin's."""

    def __init__(self, nones: int) -> None:
        self.nones = nones

    def visit_Return(self, node: ast.Return) -> ast.AST:
        return ast.copy_location(ast.Return(value=ast.Tuple(
            elts=[node.value, *(ast.Constant(None) for _ in range(self.nones))], ctx=ast.Load())), node)


def _joint_body(joint: ast.FunctionDef) -> list[ast.stmt]:
    """joint_reason's twin as the first statements of a fused function: its locals prefixed ``joint_``,
    its closing ``return 0`` dropped (the function goes on)."""
    body = joint.body[1:] if ast.get_docstring(joint) is not None else list(joint.body)
    *statements, last = body
    if not (isinstance(last, ast.Return) and isinstance(last.value, ast.Constant) and last.value.value == 0):
        raise ValueError("joint_reason's twin must end in return 0")
    renamed = _Rename({local: f"joint_{local}" for local in _stored(statements)}, None)
    return [renamed.visit(stmt) for stmt in statements]


def _joint_first(joint: ast.FunctionDef, nones: int) -> list[ast.stmt]:
    """joint_reason's twin as a fused twin's first statements (:func:`_joint_body`), each rule's early
    return padded with Nones."""
    padded = _ReasonAndNones(nones)
    return [padded.visit(stmt) for stmt in _joint_body(joint)]


def _derived_locals(name: str, statements: list[ast.stmt], returned: ast.Dict,
                    taken: set[str]) -> tuple[list[ast.stmt], dict[str, str]]:
    """derived_columns' statements with its returned entries as locals after them (``d_<name>``, or the
    local a value already is), and the local of each entry."""
    statements, local_of = list(statements), {}
    for key, value in zip(returned.keys, returned.values):
        if isinstance(value, ast.Name):
            local_of[key.value] = value.id
            continue
        local_of[key.value] = f"d_{key.value}"
        if local_of[key.value] in taken:
            raise ValueError(f"{name}: d_{key.value} is already a local of derived_columns")
        statements.append(ast.Assign(targets=[ast.Name(id=local_of[key.value], ctx=ast.Store())], value=value,
                                     lineno=0))
    return statements, local_of


def _fused(name: str, consumers: tuple[str, ...], exposed: tuple[str, ...], as_dict: bool,
           twins: dict[str, ast.FunctionDef]) -> ast.FunctionDef:
    """derived_columns' twin and its *consumers*' in one function (the module docstring says how)."""
    derived_statements, returned = _body(copy.deepcopy(twins["derived_columns"]))
    params = [copy.deepcopy(arg) for arg in twins["derived_columns"].args.args if arg.arg != "ops"]
    joint = copy.deepcopy(twins["joint_reason"])
    params += [arg for arg in joint.args.args if arg.arg not in ("ops", *(p.arg for p in params))]
    taken = _stored(derived_statements) | {arg.arg for arg in params}
    statements, local_of = _derived_locals(name, derived_statements, returned, taken)
    values: list[ast.expr] = []
    for consumer in consumers:
        twin = twins[consumer]
        for arg in twin.args.args:
            if arg.arg not in ("ops", "d") and arg.arg not in {p.arg for p in params}:
                params.append(copy.deepcopy(arg))
        body, tuple_ = _body(twin)
        prefix = consumer.split("_")[0]
        renamed = _Rename({local: f"{prefix}_{local}" for local in _stored(body)}, local_of)
        statements += [renamed.visit(copy.deepcopy(stmt)) for stmt in body]
        tuple_ = renamed.visit(copy.deepcopy(tuple_))
        if not isinstance(tuple_, ast.Tuple):
            raise ValueError(f"{consumer}: a consumer must return a tuple")
        values += tuple_.elts
    first = [ast.Name(id=local_of[key], ctx=ast.Load()) for key in exposed]
    if as_dict:
        first = [ast.Dict(keys=[ast.Constant(key) for key in exposed], values=first)]
    statements = _joint_first(joint, len(first) + 1) + statements
    result = ast.Tuple(elts=[ast.Constant(0), *first, ast.Tuple(elts=values, ctx=ast.Load())], ctx=ast.Load())
    statements = _prune(statements, {node.id for node in ast.walk(result) if isinstance(node, ast.Name)})
    statements, result = _prefetch(name, statements, result)
    function = ast.FunctionDef(name=name, args=ast.arguments(posonlyargs=[], args=params, kwonlyargs=[],
                                                              kw_defaults=[], defaults=[]),
                               body=[*statements, ast.Return(value=result)], decorator_list=[],
                               returns=ast.Name(id="tuple", ctx=ast.Load()), lineno=0)
    return ast.fix_missing_locations(function)


def _with_operator(lines: list[str]) -> list[str]:
    """The import lines, ``import operator`` (the fused twins' itemgetters) among the plain imports."""
    plain = [line for line in lines if line.startswith("import ")]
    return sorted({*plain, "import operator"}) + lines[len(plain):]


def _twins(trees: dict[str, ast.Module]) -> list[ast.FunctionDef]:
    aliases, inline = _scalar_rules(trees["formulas_ops"])
    by_name = {node.name: node for node in trees["formulas"].body if isinstance(node, ast.FunctionDef)}
    twins = [_Scalarise(aliases, inline).visit(copy.deepcopy(by_name[name])) for name in FORMULAS]
    return [_ShortCircuit(_bool_names(twin)).visit(twin) for twin in twins]


def _trees() -> dict[str, ast.Module]:
    return {name: ast.parse((PACKAGE / f"{name}.py").read_text()) for name in ("formulas", "formulas_ops")}


def _type_checking_imports(twins: list[ast.FunctionDef], trees: dict[str, ast.Module]) -> list[str]:
    """The ``if TYPE_CHECKING:`` imports of formulas.py that the twins' string annotations name (an argument
    annotated ``"Overlap"``), so that the generated module names every type it mentions."""
    named = {node.value for twin in twins for arg in twin.args.args if arg.annotation is not None
             for node in ast.walk(arg.annotation) if isinstance(node, ast.Constant) and isinstance(node.value, str)}
    lines = []
    for node in trees["formulas"].body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for stmt in node.body:
                if isinstance(stmt, ast.ImportFrom) and {alias.name for alias in stmt.names} & named:
                    names = sorted({alias.name for alias in stmt.names} & named)
                    lines.append(f"    from {'.' * stmt.level}{stmt.module} import {', '.join(names)}")
    return ["", "from typing import TYPE_CHECKING", "", "if TYPE_CHECKING:", *lines] if lines else []


def render() -> str:
    """formulas_scalar.py: the twins."""
    trees = _trees()
    twins = _twins(trees)
    out = [
        "# Generated by tools/gen_formulas.py from src/ndcost/tables/formulas.py and formulas_ops.py: do not edit.",
        '"""The scalar twins of :mod:`ndcost.tables.formulas`: each formula with its ``ops`` calls written',
        "out as Python-scalar code (``tools/gen_formulas.py`` says how). Call them with ``ops=SCALAR``.",
        '"""',
        "from __future__ import annotations",
        "",
        *_imports(_free_names(twins), trees),
        *_type_checking_imports(twins, trees),
        "",
        "__all__ = [", *(f'    "{name}_scalar",' for name in FORMULAS), "]",
    ]
    for twin in twins:
        name = twin.name
        twin.name = name + "_scalar"
        twin.body = twin.body[1:] if ast.get_docstring(twin) is not None else twin.body
        returns = f" -> {ast.unparse(twin.returns)}" if twin.returns is not None else ""
        out += ["", "", f"def {twin.name}({ast.unparse(twin.args)}){returns}:",
                f'    """:func:`ndcost.tables.formulas.{name}` on Python scalars (*ops* must be SCALAR)."""',
                *(_statement(stmt) for stmt in twin.body)]
    return "\n".join(out) + "\n"


def render_fused() -> str:
    """formulas_fused.py: the fused twins (``FUSED``)."""
    trees = _trees()
    twins = {twin.name: twin for twin in _twins(trees)}
    _PREFETCHED.clear()
    fused = [_fused(name, consumers, exposed, as_dict, twins) for name, (consumers, exposed, as_dict) in FUSED.items()]
    out = [
        "# Generated by tools/gen_formulas.py from src/ndcost/tables/formulas.py and formulas_ops.py: do not edit.",
        '"""The fused scalar twins of :mod:`ndcost.tables.formulas`: for one candidate, its joint rules, derived',
        "values and candidate vectors in one function, no intermediate dict or call (``tools/gen_formulas.py``",
        'says how). estimate() prepares a fresh spec with them.',
        '"""',
        "from __future__ import annotations",
        "",
        *_with_operator(_imports(_free_names(fused) - {f"_C_{n.upper()}" for n in _PREFETCHED}, trees)),
        "",
        "__all__ = [", *(f'    "{name}_scalar",' for name in FUSED), "]",
        "",
        "# What each fused twin reads of c, in one call (tools/gen_formulas.py: _prefetch).",
        *(f"_C_{name.upper()} = operator.itemgetter(\n"
          + textwrap.fill(", ".join(map(repr, keys)), width=116, initial_indent="    ", subsequent_indent="    ")
          + ",\n)" for name, keys in _PREFETCHED.items()),
    ]
    for function in fused:
        consumers, exposed, as_dict = FUSED[function.name]
        function.name += "_scalar"
        first = f"{{{', '.join(exposed)}}}" if as_dict else ", ".join(exposed)
        doc = (f"joint_reason, derived_columns and {' + '.join(consumers)} fused, on Python scalars "
               f"(tools/gen_formulas.py says how): (0, {first}, the candidate's values); a broken joint rule "
               f"returns (its code, None, None).")
        out += ["", "", f"def {function.name}({ast.unparse(function.args)}) -> tuple:",
                textwrap.fill(f'"""{doc}"""', width=116, initial_indent="    ", subsequent_indent="    "),
                *(_statement(stmt) for stmt in function.body)]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    OUTPUT.write_text(render())
    FUSED_OUTPUT.write_text(render_fused())
