"""Write cysrc/ndcost/kernels/formula_rows.pxi, the compiled twins of the batch formulas of
src/ndcost/tables/formulas.py, and src/ndcost/kernels/formula_rows.py, their pure-Python oracle.

Run after changing formulas.py or formulas_ops.py (with tools/gen_formulas.py):
``python tools/gen_formula_rows.py``. tests/test_formula_rows.py fails when either file is stale.

The kernel ``formula_rows`` prices no candidate: for each row of a chunk of a batch's storage
columns it runs what ``estimate_many`` ran in numpy before the pricing kernels -- the joint rules,
then the derived values and the candidate vectors of ``CONSUMERS`` (each only where its output is
asked for) -- and writes the vectors as columns of the matrices the pricing kernels read. The
compiled twin runs without the GIL, so that each thread prices its chunk start to end on its own
core.

A formula becomes a row twin by ``tools/gen_formulas.py``'s rewriting, with the rules of
``_RowOps`` (src/ndcost/tables/formulas_ops.py: one row of storage codes, numpy's semantics)
in place of ``_ScalarOps``'s; joint_reason's rules become early returns of their reason code, and
the consumers of derived_columns are fused after it as ``gen_formulas`` fuses its twins. Then
every name is resolved:

* ``c["field"]`` -> a local read once per row from the field's column, typed by the field's
  storage kind (``ndcost.price.candidate_columns``);
* ``mc.x``, ``cc.x``, ``overlap.x`` and the formulas' other parameters -> a slot of the batch's
  constants (``k.mc_x``), typed by the class's annotations: ``int | None`` adds a flag
  (``k.cc_x_none``) that ``is None`` reads, ``tuple[int, ...]`` is read item by item or looped
  over; ``cc`` itself is never None in a batch;
* names of formulas_ops (``COMM_DP_OVERLAP``, ``_CODES["cp_algo"]["ulysses"]``) -> their values,
  and ``_clip_take(TABLE, code)`` -> a lookup in TABLE's values;
* ``//``, ``%``, ``/``, ``gcd`` -> helpers with numpy's int64 / float64 results: a zero divisor
  gives numpy's 0 (or IEEE's inf / NaN), never an exception or a trap.

Every local is typed (bint, long long, double) by what is assigned to it, and an explicit cast is
written wherever numpy would convert (a ``where`` of an int and a float, a vector entry). Anything
else -- two bools added (numpy's sum is a logical or), ``//`` on a float, a local that is both an
int and a float, a call or operator with no rule here -- stops the generator: a new formula either
compiles to numpy's values or says why it does not.
"""
from __future__ import annotations

import ast
import copy
import importlib
import sys
import textwrap
import typing
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "src"))

import gen_formulas as gf  # noqa: E402

PXI = ROOT / "cysrc/ndcost/kernels/formula_rows.pxi"
ORACLE = ROOT / "src/ndcost/kernels/formula_rows.py"
#: The kernel's name, and the formulas after derived_columns whose vectors it writes (an output matrix each,
#: named by the formula's first word: out_nd, out_seconds, out_memory, out_fixed).
NAME = "formula_rows"
CONSUMERS = ("nd_candidate_columns", "seconds_candidate_columns", "memory_candidate_columns", "fixed_bytes_columns")
#: joint_reason's parameter read per row (rule 7, decided per layout), not per batch.
ROW_PARAMETER = "layout_bad"
#: Parameters no row twin reads as a constant: the ops object, the row, derived's values, the codes.
_INTERNAL = ("ops", "c", "d", "codes")
_INT64_MIN = -(2**63)
#: Python type name -> the twins' type: b bint, i long long, f double.
_TYPES = {"bool": "b", "int": "i", "float": "f"}
_C_TYPES = {"b": "bint", "i": "long long", "f": "double"}
_PY_CAST = {"b": "bool", "i": "int", "f": "float"}
#: Storage kind (ndcost.price.candidate_columns._KIND) -> how a row reads its column.
_KIND_TYPES = {"int": "i", "opt_int": "i", "choice": "i", "object": "i", "opt_bool": "i", "bool": "b",
               "float": "f", "opt_float": "f"}
_HELPERS = {"_floordiv", "_mod", "_gcd", "_item", "_take", "_div"}


def _sources():
    """(formulas_ops, the storage kinds, the constants classes by annotation name)."""
    ops = importlib.import_module("ndcost.tables.formulas_ops")
    kinds = importlib.import_module("ndcost.price.candidate_columns")._KIND
    classes = {"ModelConstants": ops.ModelConstants, "ClusterConstants": ops.ClusterConstants,
               "Overlap": importlib.import_module("ndcost.tables.seconds").Overlap}
    return ops, kinds, classes


def _name(identifier: str) -> ast.Name:
    return ast.Name(id=identifier, ctx=ast.Load())


def _call(function: str, *args: ast.expr) -> ast.Call:
    return ast.Call(func=_name(function), args=list(args), keywords=[])


# --------------------------------------------------------------------------- the fused row twin


def _row_twins(trees: dict[str, ast.Module]) -> dict[str, ast.FunctionDef]:
    aliases, inline = gf._scalar_rules(trees["formulas_ops"], "_RowOps")
    by_name = {node.name: node for node in trees["formulas"].body if isinstance(node, ast.FunctionDef)}
    twins = {}
    for name in ("joint_reason", "derived_columns", *CONSUMERS):
        twin = gf._Scalarise(aliases, inline).visit(copy.deepcopy(by_name[name]))
        twins[name] = gf._ShortCircuit(gf._bool_names(twin)).visit(twin)
    return twins


def _split_tuples(statements: list[ast.stmt]) -> list[ast.stmt]:
    """``a, b = (x, y)`` -> ``a = x``, ``b = y`` (where no x reads an a)."""
    out = []
    for stmt in statements:
        if (isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Tuple)
                and isinstance(stmt.value, ast.Tuple) and len(stmt.targets[0].elts) == len(stmt.value.elts)):
            targets = {t.id for t in stmt.targets[0].elts}
            if any(isinstance(n, ast.Name) and n.id in targets for v in stmt.value.elts for n in ast.walk(v)):
                raise ValueError(f"{ast.unparse(stmt)}: a tuple assignment that reads its own targets")
            out += [ast.Assign(targets=[t], value=v, lineno=0) for t, v in zip(stmt.targets[0].elts, stmt.value.elts)]
        else:
            for block in ("body", "orelse"):
                if isinstance(stmt, (ast.If, ast.For)):
                    setattr(stmt, block, _split_tuples(getattr(stmt, block)))
            out.append(stmt)
    return out


def _fuse(consumers: tuple[str, ...], twins: dict[str, ast.FunctionDef]):
    """(joint's statements, derived's, [(consumer prefix, its statements, its values)], the parameters):
    gen_formulas' fusion, every section pruned of what nothing after it reads."""
    joint_statements = _split_tuples(gf._joint_body(copy.deepcopy(twins["joint_reason"])))
    derived_statements, returned = gf._body(copy.deepcopy(twins["derived_columns"]))
    derived_statements = _split_tuples(derived_statements)
    derived_statements, local_of = gf._derived_locals(NAME, derived_statements, returned,
                                                      gf._stored(derived_statements))
    sections, live = [], set()
    parameters = {arg.arg: arg.annotation for name in ("joint_reason", "derived_columns", *consumers)
                  for arg in twins[name].args.args}
    for consumer in consumers:
        statements, values = gf._body(copy.deepcopy(twins[consumer]))
        prefix = consumer.split("_")[0]
        renamed = gf._Rename({local: f"{prefix}_{local}" for local in gf._stored(statements)}, local_of)
        statements = _split_tuples([renamed.visit(stmt) for stmt in statements])
        values = renamed.visit(values)
        if not isinstance(values, ast.Tuple):
            raise ValueError(f"{consumer}: a consumer must return a tuple")
        reads = {n.id for n in ast.walk(values) if isinstance(n, ast.Name)}
        statements = gf._prune(statements, set(reads))
        live |= reads | {n.id for s in statements for n in ast.walk(s) if isinstance(n, ast.Name)}
        sections.append((prefix, statements, list(values.elts)))
    derived_statements = gf._prune(derived_statements, set(live))
    joint_statements = gf._prune(joint_statements, set())
    return joint_statements, derived_statements, sections, parameters


# --------------------------------------------------------------------------- names resolved


def _slot_type(hint) -> str:
    """A constant's annotation -> "i", "f", "b", "i?" / "f?" (None allowed), "ti" / "tf" (a tuple)."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) is tuple:
        if len(args) != 2 or args[1] is not Ellipsis or getattr(args[0], "__name__", "") not in ("int", "float"):
            raise ValueError(f"a tuple constant must be tuple[int, ...] or tuple[float, ...], got {hint}")
        return "t" + _TYPES[args[0].__name__]
    if args and type(None) in args:
        inner = [a for a in args if a is not type(None)]
        if len(inner) != 1 or getattr(inner[0], "__name__", "") not in _TYPES:
            raise ValueError(f"an optional constant must be one of int, bool, float or None, got {hint}")
        return _TYPES[inner[0].__name__] + "?"
    if getattr(hint, "__name__", None) not in _TYPES:
        raise ValueError(f"a constant must be an int, bool, float, optional one or a tuple, got {hint}")
    return _TYPES[hint.__name__]


class _Resolve(ast.NodeTransformer):
    """A fused row twin's names -> columns, constant slots, values and helper calls (module docstring)."""

    def __init__(self, ops, objects: dict[str, type], parameters: dict[str, str], locals_: set[str]) -> None:
        self.ops, self.objects, self.parameters, self.locals = ops, objects, parameters, locals_
        self.slots: dict[str, str] = {}           # slot -> type, in order of first read
        self.sources: dict[str, tuple] = {}       # slot -> (owner or None, attribute or parameter)
        self.rules: list[str] = []
        self.tables: dict[str, tuple] = {}
        self.columns: dict[str, str] = {}          # c_<field> -> field

    def _slot(self, owner: str | None, attribute: str, kind: str) -> ast.Attribute:
        name = attribute if owner is None else f"{owner}_{attribute}"
        self.slots.setdefault(name, kind)
        self.sources.setdefault(name, (owner, attribute))
        return ast.Attribute(value=_name("k"), attr=name, ctx=ast.Load())

    def _kind(self, node: ast.Attribute) -> str:
        hints = typing.get_type_hints(self.objects[node.value.id])
        if node.attr not in hints:
            raise ValueError(f"{ast.unparse(node)} has no annotation in its class (its row type)")
        return _slot_type(hints[node.attr])

    def _is_constant_attribute(self, node: ast.AST) -> bool:
        return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in self.objects

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        if not self._is_constant_attribute(node):
            raise ValueError(f"{ast.unparse(node)}: an attribute of something other than a constants object")
        return ast.copy_location(self._slot(node.value.id, node.attr, self._kind(node)), node)

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        if not any(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops):
            return self.generic_visit(node)
        right = node.comparators[0]
        if len(node.ops) != 1 or not (isinstance(right, ast.Constant) and right.value is None):
            raise ValueError(f"{ast.unparse(node)}: `is` compares one value with None")
        is_none, left = isinstance(node.ops[0], ast.Is), node.left
        if isinstance(left, ast.Name) and left.id in self.objects:
            return ast.copy_location(ast.Constant(not is_none), node)          # a batch always has them
        if not self._is_constant_attribute(left) or not self._kind(left).endswith("?"):
            raise ValueError(f"{ast.unparse(node)}: `is None` of something other than an optional constant")
        self._slot(left.value.id, left.attr, self._kind(left))
        flag = ast.Attribute(value=_name("k"), attr=f"{left.value.id}_{left.attr}_none", ctx=ast.Load())
        return ast.copy_location(flag if is_none else ast.UnaryOp(op=ast.Not(), operand=flag), node)

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in self.parameters:
            return ast.copy_location(self._slot(None, node.id, self.parameters[node.id]), node)
        if node.id in self.objects or node.id in _INTERNAL:
            raise ValueError(f"{node.id} read other than through its rule")
        if node.id in self.locals or node.id == ROW_PARAMETER or node.id in self.columns:
            return node
        if hasattr(self.ops, node.id):
            return ast.copy_location(self._literal(getattr(self.ops, node.id), node.id), node)
        raise ValueError(f"{node.id} is neither a local nor a number of formulas_ops")

    @staticmethod
    def _literal(value, name: str) -> ast.expr:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"the constant {name} = {value!r} is not a number")
        return ast.Constant(value)

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        if isinstance(node.value, ast.Name) and node.value.id == "codes":        # a broken rule's code
            self.rules.append(node.slice.value)
            return ast.copy_location(ast.Subscript(
                value=ast.Attribute(value=_name("k"), attr="codes", ctx=ast.Load()),
                slice=ast.Constant(len(self.rules) - 1), ctx=ast.Load()), node)
        if isinstance(node.value, ast.Name) and node.value.id == "c":
            field = node.slice.value
            self.columns[f"c_{field}"] = field
            return ast.copy_location(_name(f"c_{field}"), node)
        if self._is_constant_attribute(node.value) and self._kind(node.value).startswith("t"):
            if not (isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, int)):
                raise ValueError(f"{ast.unparse(node)}: a tuple constant is read at a constant index")
            return ast.copy_location(_call("_item", self.visit(node.value), node.slice), node)
        try:                                                                    # _CODES["cp_algo"]["ulysses"]
            value = eval(compile(ast.Expression(node), "<constant>", "eval"), vars(self.ops))  # noqa: S307
        except Exception as exc:                                                # noqa: BLE001
            raise ValueError(f"{ast.unparse(node)}: a subscript with no row rule") from exc
        return ast.copy_location(self._literal(value, ast.unparse(node)), node)

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        helper = {ast.FloorDiv: "_floordiv", ast.Mod: "_mod", ast.Div: "_div"}.get(type(node.op))
        return node if helper is None else ast.copy_location(_call(helper, node.left, node.right), node)

    def visit_Call(self, node: ast.Call) -> ast.AST:
        func = ast.unparse(node.func)
        if func == "_clip_take":
            table = node.args[0]
            values = getattr(self.ops, table.id, None) if isinstance(table, ast.Name) else None
            if not (isinstance(values, tuple) and values
                    and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)):
                raise ValueError(f"{ast.unparse(node)}: _clip_take reads a tuple of numbers of formulas_ops")
            self.tables[table.id] = values
            return ast.copy_location(_call("_take", _name("_TABLE" + table.id), self.visit(node.args[1])), node)
        node.args = [self.visit(arg) for arg in node.args]
        if func == "math.gcd":
            return ast.copy_location(_call("_gcd", *node.args), node)
        if func == "float" and len(node.args) == 1:
            return node
        raise ValueError(f"{ast.unparse(node)}: a call with no row rule")

    def visit_For(self, node: ast.For) -> ast.AST:
        start, source = 0, node.iter
        if (isinstance(source, ast.Subscript) and isinstance(source.slice, ast.Slice) and source.slice.upper is None
                and source.slice.step is None and isinstance(source.slice.lower, ast.Constant)):
            start, source = source.slice.lower.value, source.value
        if not (isinstance(node.target, ast.Name) and self._is_constant_attribute(source)
                and self._kind(source).startswith("t")):
            raise ValueError(f"{ast.unparse(node.iter)}: a loop runs over a tuple constant (or its tail) only")
        node.iter = _call("_items", self.visit(source), ast.Constant(start))
        node.body = [self.visit(stmt) for stmt in node.body]
        if node.orelse:
            raise ValueError("a loop with an else")
        return node


# --------------------------------------------------------------------------- types and casts


def _join(a: str, b: str) -> str:
    if "f" in (a, b):
        return "f"
    return "b" if a == b == "b" else "i"


class _Typer:
    """Types every expression, declares every local, writes numpy's conversions as casts."""

    def __init__(self, columns: dict[str, str], slots: dict[str, str], tables: dict[str, tuple]) -> None:
        self.columns, self.slots, self.tables = columns, slots, tables
        self.locals: dict[str, str] = {}

    def cast(self, node: ast.expr, want: str) -> ast.expr:
        node, have = self.expr(node)
        return node if have == want else _call(_PY_CAST[want], node)

    def expr(self, node: ast.expr) -> tuple[ast.expr, str]:
        """(*node* with its casts, its type)."""
        if isinstance(node, ast.Constant):
            if type(node.value) in (bool, int, float):
                return node, _TYPES[type(node.value).__name__]
            raise ValueError(f"constant {node.value!r} has no row type")
        if isinstance(node, ast.Name):
            if node.id == ROW_PARAMETER:
                return node, "b"
            kind = self.locals.get(node.id) or self.columns.get(node.id)
            if kind is None:
                raise ValueError(f"{node.id} is read before it is assigned")
            return node, kind
        if isinstance(node, ast.Attribute):
            kind = self.slots.get(node.attr, "b" if node.attr.endswith("_none") else None)
            if kind is None or kind.startswith("t"):
                raise ValueError(f"k.{node.attr} is read other than item by item")
            return node, kind.rstrip("?")
        if isinstance(node, ast.Subscript):                                     # k.codes[j]
            return node, "i"
        if isinstance(node, ast.BinOp):
            (left, a), (right, b) = self.expr(node.left), self.expr(node.right)
            if isinstance(node.op, (ast.Add, ast.Sub, ast.Mult)):
                if a == b == "b":
                    raise ValueError(f"{ast.unparse(node)}: arithmetic on two bools (numpy's is logical)")
                kind = _join(_join(a, b), "i")
            elif isinstance(node.op, (ast.BitAnd, ast.BitOr, ast.BitXor)):
                if "f" in (a, b):
                    raise ValueError(f"{ast.unparse(node)}: a bitwise operator on a float")
                kind = _join(a, b)
            else:
                raise ValueError(f"{ast.unparse(node)}: operator {type(node.op).__name__} has no row rule")
            return ast.BinOp(left=left, op=node.op, right=right), kind
        if isinstance(node, ast.Compare):
            if len(node.ops) != 1:
                raise ValueError(f"{ast.unparse(node)}: one comparison at a time")
            left, left_kind = self.expr(node.left)
            right, _ = self.expr(node.comparators[0])
            if (isinstance(node.ops[0], ast.NotEq) and left_kind.rstrip("?") == "i"
                    and ast.dump(node.left) == ast.dump(node.comparators[0])):
                # an integer is never NaN: the NaN test of a shared op (ops.maximum's a != a) is False
                # (spelled out, C compilers warn of the self-comparison)
                return ast.Constant(False), "b"
            return ast.Compare(left=left, ops=node.ops, comparators=[right]), "b"
        if isinstance(node, ast.BoolOp):
            values = [self.expr(value) for value in node.values]
            if any(kind != "b" for _, kind in values):
                raise ValueError(f"{ast.unparse(node)}: and/or of a value that is not a bool")
            kept = [value for value, _ in values]
            if isinstance(node.op, ast.Or):   # `x or False` is x (the folded NaN test of an integer, above)
                kept = [v for v in kept if not (isinstance(v, ast.Constant) and v.value is False)] or kept[:1]
            return (kept[0] if len(kept) == 1 else ast.BoolOp(op=node.op, values=kept)), "b"
        if isinstance(node, ast.UnaryOp):
            operand, kind = self.expr(node.operand)
            if isinstance(node.op, ast.Not):
                return ast.UnaryOp(op=node.op, operand=operand), "b"
            if isinstance(node.op, ast.USub):
                return ast.UnaryOp(op=node.op, operand=operand), _join(kind, "i")
            raise ValueError(f"{ast.unparse(node)}: unary {type(node.op).__name__} has no row rule")
        if isinstance(node, ast.IfExp):
            test, _ = self.expr(node.test)
            (_, a), (_, b) = self.expr(node.body), self.expr(node.orelse)
            kind = _join(a, b)
            return ast.IfExp(test=test, body=self.cast(node.body, kind), orelse=self.cast(node.orelse, kind)), kind
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            return self._call(node)
        raise ValueError(f"{ast.unparse(node)}: no row rule")

    def _call(self, node: ast.Call) -> tuple[ast.expr, str]:
        name = node.func.id
        if name in ("_floordiv", "_mod", "_gcd"):
            args = [self.expr(arg) for arg in node.args]
            if any(kind == "f" for _, kind in args):
                raise ValueError(f"{ast.unparse(node)}: an integer operation on a float")
            return _call(name, *(self.cast(arg, "i") for arg in node.args)), "i"
        if name == "_div":
            return _call(name, *(self.cast(arg, "f") for arg in node.args)), "f"
        if name == "_item":
            return _call(name, node.args[0], node.args[1]), self.slots[node.args[0].attr][1]
        if name == "_take":
            values = self.tables[node.args[0].id[len("_TABLE"):]]
            kind = "f" if any(isinstance(v, float) for v in values) else "i"
            return _call(name, node.args[0], self.cast(node.args[1], "i")), kind
        if name in _PY_CAST.values():
            kind = {v: k for k, v in _PY_CAST.items()}[name]
            return self.cast(node.args[0], kind), kind
        raise ValueError(f"{ast.unparse(node)}: a call with no row rule")

    def statements(self, statements: list[ast.stmt]) -> list[ast.stmt]:
        out = []
        for stmt in statements:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                value, kind = self.expr(stmt.value)
                target = stmt.targets[0].id
                if target in self.columns:
                    raise ValueError(f"{target} is both a column read and a local")
                if self.locals.setdefault(target, kind) != kind:
                    raise ValueError(f"{target} is assigned both a {_C_TYPES[self.locals[target]]} and a "
                                     f"{_C_TYPES[kind]}")
                out.append(ast.Assign(targets=[ast.Name(id=target, ctx=ast.Store())], value=value, lineno=0))
            elif isinstance(stmt, ast.If):
                test, _ = self.expr(stmt.test)
                out.append(ast.If(test=test, body=self.statements(stmt.body), orelse=self.statements(stmt.orelse)))
            elif isinstance(stmt, ast.For):
                slot = stmt.iter.args[0].attr
                self.locals.setdefault(stmt.target.id, self.slots[slot][1])
                if self.locals[stmt.target.id] != self.slots[slot][1]:
                    raise ValueError(f"{stmt.target.id} is assigned two types")
                out.append(ast.For(target=stmt.target, iter=stmt.iter, body=self.statements(stmt.body), orelse=[]))
            elif isinstance(stmt, ast.Return) and isinstance(stmt.value, ast.Subscript):
                out.append(stmt)
            else:
                raise ValueError(f"{ast.unparse(stmt)}: a statement with no row rule")
        return out


# --------------------------------------------------------------------------- one kernel, resolved


class Kernel:
    """One row kernel: its columns, constant slots, rules, tables, typed statements and outputs."""

    def __init__(self, name: str, consumers: tuple[str, ...], twins, ops, kinds, classes) -> None:
        self.name = name
        joint, derived, sections, parameters = _fuse(consumers, twins)
        objects, scalars = {}, {}
        for param, annotation in parameters.items():
            if param in _INTERNAL or param == ROW_PARAMETER:
                continue
            text = ast.unparse(annotation).strip("'\"").replace(" | None", "") if annotation is not None else ""
            if text in classes:
                objects[param] = classes[text]
            elif text in _TYPES:
                scalars[param] = _TYPES[text]
            else:
                raise ValueError(f"{name}: parameter {param} ({text or 'no annotation'}) is neither a constants "
                                 f"object nor an int, bool or float")
        locals_ = gf._stored(joint + derived + [s for _, statements, _ in sections for s in statements])
        locals_ |= {n.target.id for s in joint + derived for n in ast.walk(s) if isinstance(n, ast.For)}
        resolve = _Resolve(ops, objects, scalars, locals_)
        joint = [resolve.visit(stmt) for stmt in joint]
        derived = [resolve.visit(stmt) for stmt in derived]
        sections = [(prefix, [resolve.visit(s) for s in statements], [resolve.visit(v) for v in values])
                    for prefix, statements, values in sections]
        self.fields = tuple(resolve.columns.values())
        unknown = [field for field in self.fields if field not in kinds]
        if unknown:
            raise ValueError(f"{name}: the formulas read {unknown}, which are not Candidates fields")
        self.column_types = {f"c_{field}": _KIND_TYPES[kinds[field]] for field in self.fields}
        self.slots, self.sources, self.rules, self.tables = resolve.slots, resolve.sources, resolve.rules, resolve.tables
        typer = _Typer(self.column_types, self.slots, self.tables)
        self.joint = typer.statements(joint)
        self.derived = typer.statements(derived)
        self.sections = [(prefix, typer.statements(statements), [typer.cast(v, "f") for v in values])
                         for prefix, statements, values in sections]
        self.locals = typer.locals

    @property
    def scalar_slots(self) -> list[str]:
        return [slot for slot, kind in self.slots.items() if not kind.startswith("t")]

    @property
    def tuple_slots(self) -> list[str]:
        return [slot for slot, kind in self.slots.items() if kind.startswith("t")]


def kernel() -> Kernel:
    ops, kinds, classes = _sources()
    return Kernel(NAME, CONSUMERS, _row_twins(gf._trees()), ops, kinds, classes)


# --------------------------------------------------------------------------- C (Cython)

_C_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^",
          ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}


def _c_literal(value) -> str:
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, int):
        return "INT64_MIN" if value == _INT64_MIN else str(value)
    text = repr(float(value))
    if text in ("inf", "-inf", "nan"):
        raise ValueError(f"the literal {text} has no C spelling here")
    return text


def _c(node: ast.expr, kernel: Kernel) -> str:
    """A typed row expression as Cython (every cast explicit, every operator parenthesised)."""
    if isinstance(node, ast.Constant):
        return _c_literal(node.value)
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"k.{node.attr}"
    if isinstance(node, ast.Subscript):
        return f"k.codes[{node.slice.value}]"
    if isinstance(node, ast.BinOp):
        return f"({_c(node.left, kernel)} {_C_OPS[type(node.op)]} {_c(node.right, kernel)})"
    if isinstance(node, ast.Compare):
        return f"({_c(node.left, kernel)} {_C_OPS[type(node.ops[0])]} {_c(node.comparators[0], kernel)})"
    if isinstance(node, ast.BoolOp):
        word = " and " if isinstance(node.op, ast.And) else " or "
        return "(" + word.join(_c(v, kernel) for v in node.values) + ")"
    if isinstance(node, ast.UnaryOp):
        return f"(not {_c(node.operand, kernel)})" if isinstance(node.op, ast.Not) else f"(-{_c(node.operand, kernel)})"
    if isinstance(node, ast.IfExp):
        return f"({_c(node.body, kernel)} if {_c(node.test, kernel)} else {_c(node.orelse, kernel)})"
    name, args = node.func.id, node.args
    if name == "float":
        return f"(<double>{_c(args[0], kernel)})"
    if name == "int":
        return f"(<long long>{_c(args[0], kernel)})"
    if name == "bool":
        return f"({_c(args[0], kernel)} != 0)"
    if name == "_div":
        return f"({_c(args[0], kernel)} / {_c(args[1], kernel)})"
    if name == "_item":
        slot = args[0].attr
        return f"_fr_item_{kernel.slots[slot][1]}(k.{slot}, k.{slot}_len, {args[1].value})"
    if name == "_take":
        return f"_fr{args[0].id.lower()}({_c(args[1], kernel)})"
    return f"_fr{name}({', '.join(_c(a, kernel) for a in args)})"


def _statements(statements: list[ast.stmt], expression, loop, indent: str) -> list[str]:
    """Typed row statements as source: *expression* writes an expression, *loop(stmt, indent)* the header
    lines of a loop over a tuple constant (the languages differ there only)."""
    lines = []
    for stmt in statements:
        if isinstance(stmt, ast.Assign):
            lines.append(f"{indent}{stmt.targets[0].id} = {expression(stmt.value)}")
        elif isinstance(stmt, ast.Return):
            lines.append(f"{indent}return {expression(stmt.value)}")
        elif isinstance(stmt, ast.If):
            lines.append(f"{indent}if {expression(stmt.test)}:")
            lines += _statements(stmt.body, expression, loop, indent + "    ") or [indent + "    pass"]
            if stmt.orelse:
                lines.append(f"{indent}else:")
                lines += _statements(stmt.orelse, expression, loop, indent + "    ")
        else:
            lines += loop(stmt, indent)
            lines += _statements(stmt.body, expression, loop, indent + "    ")
    return lines


def _c_statements(statements: list[ast.stmt], kernel: Kernel, indent: str) -> list[str]:
    def loop(stmt: ast.For, at: str) -> list[str]:
        slot, start = stmt.iter.args[0].attr, stmt.iter.args[1].value
        return [f"{at}for _fr_j in range({start}, k.{slot}_len):",
                f"{at}    {stmt.target.id} = {_C_CAST[kernel.slots[slot][1]]}k.{slot}[_fr_j]"]

    return _statements(statements, lambda node: _c(node, kernel), loop, indent)


_C_CAST = {"i": "<long long>", "f": ""}
_C_READ = {"i": "_fr_int", "b": "_fr_bool", "f": "_fr_float"}


def _c_kernel(kernel: Kernel) -> list[str]:
    name = kernel.name
    struct = f"_{name}_constants"
    outs = [prefix for prefix, _, _ in kernel.sections]
    lines = ["", "", f"cdef struct {struct}:",
             "    # the batch's constants (tools/gen_formula_rows.py: slots in FORMULA_ROW_CONSTANTS order)"]
    for slot in kernel.scalar_slots:
        kind = kernel.slots[slot]
        lines.append(f"    {_C_TYPES[kind.rstrip('?')]} {slot}")
        if kind.endswith("?"):
            lines.append(f"    bint {slot}_none")
    for slot in kernel.tuple_slots:
        lines += [f"    const double* {slot}", f"    Py_ssize_t {slot}_len"]
    lines.append("    const long long* codes")
    # the constants, unpacked
    lines += ["", "", f"cdef int _{name}_unpack({struct}* k, const double[::1] v, const long long[::1] codes) except -1:",
              f"    cdef Py_ssize_t at = {len(kernel.scalar_slots)}, size",
              f"    if v.shape[0] < {len(kernel.scalar_slots)}:",
              f'        raise ValueError(f"constants must hold {len(kernel.scalar_slots)} values and the tuples, '
              'got {v.shape[0]}")',
              f"    if codes.shape[0] != {len(kernel.rules)}:",
              f'        raise ValueError(f"codes must hold {len(kernel.rules)} reason codes, got {{codes.shape[0]}}")']
    for j, slot in enumerate(kernel.scalar_slots):
        kind = kernel.slots[slot]
        value = {"i": f"_fr_to_int(v[{j}])", "b": f"v[{j}] != 0.0", "f": f"v[{j}]"}[kind.rstrip("?")]
        if kind.endswith("?"):
            lines.append(f"    k.{slot}_none = v[{j}] != v[{j}]")
            value = f"0 if k.{slot}_none else {value}" if kind[0] != "f" else "v[%d]" % j
        lines.append(f"    k.{slot} = {value}")
    for slot in kernel.tuple_slots:
        lines += ["    size = _fr_to_int(v[at]) if at < v.shape[0] else -1",
                  "    if size < 0 or at + 1 + size > v.shape[0]:",
                  f'        raise ValueError("constants must hold {slot} as its length then its items")',
                  f"    k.{slot} = &v[0] + at + 1",
                  f"    k.{slot}_len = size",
                  "    at += 1 + size"]
    lines += ["    if at != v.shape[0]:",
              '        raise ValueError(f"constants must end after the tuples ({at} values), got {v.shape[0]}")',
              "    k.codes = &codes[0]",
              "    return 0"]
    # the row
    args = ", ".join(f"double* out_{p}, Py_ssize_t s_{p}" for p in outs)
    lines += ["", "", f"cdef long long _{name}_row(const {struct}* k, const _FRColumn* cols, Py_ssize_t i, "
              f"bint layout_bad, {args}) noexcept nogil:",
              "    # One row: its reason code (0: priced), and its vectors written where asked (out not NULL)."]
    for j, (local, field) in enumerate(zip(kernel.column_types, kernel.fields)):
        kind = kernel.column_types[local]
        lines.append(f"    cdef {_C_TYPES[kind]} {local} = {_C_READ[kind]}(&cols[{j}], i)")
    for local, kind in kernel.locals.items():
        lines.append(f"    cdef {_C_TYPES[kind]} {local}")
    if any(isinstance(n, ast.For) for s in kernel.joint + kernel.derived for n in ast.walk(s)):
        lines.append("    cdef Py_ssize_t _fr_j")
    lines += _c_statements(kernel.joint, kernel, "    ")
    lines += _c_statements(kernel.derived, kernel, "    ")
    for prefix, statements, values in kernel.sections:
        lines.append(f"    if out_{prefix} != NULL:")
        lines += _c_statements(statements, kernel, "        ")
        for j, value in enumerate(values):
            at = "0" if j == 0 else ("s_%s" % prefix if j == 1 else f"{j} * s_{prefix}")
            lines.append(f"        out_{prefix}[{at}] = {_c(value, kernel)}")
    lines.append("    return 0")
    return lines + _c_def(kernel, struct, outs)


#: The checks of the kernel's arguments both twins make first, in the same words (len() of a memoryview
#: is its first extent in Cython as in Python).
_ARGUMENT_CHECKS = (
    ("start < 0 or stop < start", "rows must be 0 <= start <= stop, got {start}, {stop}"),
    ("len(spec_reason) < stop or len(layout_index) < stop", "spec_reason and layout_index must cover the rows "
                                                               "(>= {stop})"),
    ("len(layout_bad) != n_layouts", "layout_bad must have one entry per layout ({n_layouts})"),
    ("len(out_reason) != n or len(out_layout) != n", "out_reason and out_layout must have length {n}"),
)


def _argument_checks() -> list[str]:
    return [line for test, message in _ARGUMENT_CHECKS
            for line in (f"    if {test}:", f'        raise ValueError(f"{message}")')]


def _c_def(kernel: Kernel, struct: str, outs: list[str]) -> list[str]:
    name, nf = kernel.name, len(kernel.fields)
    counts = {prefix: len(values) for prefix, _, values in kernel.sections}
    out_args = "".join(f",\n{' ' * (len(name) + 5)}double[:, :] out_{p}" for p in outs)
    lines = ["", "", f"def {name}(tuple columns,                       # IN: storage columns ({nf}, "
             "FORMULA_ROW_FIELDS order), each 1-D, >= stop rows",
             f"{' ' * (len(name) + 5)}Py_ssize_t start, Py_ssize_t stop,    # IN: the rows",
             f"{' ' * (len(name) + 5)}const double[::1] constants,        # IN: FORMULA_ROW_CONSTANTS, the tuples after",
             f"{' ' * (len(name) + 5)}const long long[::1] codes,         # IN: the code of each FORMULA_ROW_RULES rule",
             f"{' ' * (len(name) + 5)}const long long[::1] spec_reason,   # IN (>= stop,): the rows' own reasons",
             f"{' ' * (len(name) + 5)}const long long[::1] layout_index,  # IN (>= stop,): -1 or a layout",
             f"{' ' * (len(name) + 5)}const unsigned char[::1] layout_bad,  # IN (L,): the layout breaks rule 7",
             f"{' ' * (len(name) + 5)}const long long[::1] layout_row,    # IN (L,): the layout's table row, -1: none",
             f"{' ' * (len(name) + 5)}long long[::1] out_reason,          # OUT (stop - start,)",
             f"{' ' * (len(name) + 5)}long long[::1] out_layout" + out_args + ") -> None:",
             f'    """Rows start..stop: the reason (0: priced), the table row and '
             f'{", ".join(f"the {p} vector ({counts[p]}, n) or (0, 0)" for p in outs)} of each (NaN when not priced)."""',
             "    cdef Py_ssize_t n = stop - start, n_layouts = layout_row.shape[0], i, j, li",
             "    cdef long long r",
             "    cdef bint bad",
             f"    cdef {struct} k",
             f"    cdef _FRColumn cols[{nf}]",
             f"    cdef Py_buffer views[{nf}]",
             "    cdef int opened = 0",
             *(f"    cdef double* p_{p}" for p in outs),
             *(f"    cdef Py_ssize_t f_{p}, r_{p}" for p in outs),
             *_argument_checks()]
    for p in outs:
        lines += [f"    if not ((out_{p}.shape[0] == {counts[p]} and out_{p}.shape[1] == n) "
                  f"or (out_{p}.shape[0] == 0 and out_{p}.shape[1] == 0)):",
                  f'        raise ValueError(f"out_{p} must be ({counts[p]}, {{n}}) or (0, 0)")',
                  f"    p_{p} = &out_{p}[0, 0] if out_{p}.shape[0] and n else NULL",
                  f"    if out_{p}.strides[0] % sizeof(double) or out_{p}.strides[1] % sizeof(double):",
                  f'        raise ValueError("out_{p} must have strides of whole float64s")',
                  f"    f_{p} = out_{p}.strides[0] // sizeof(double)     # a field's step",
                  f"    r_{p} = out_{p}.strides[1] // sizeof(double)     # a row's step"]
    lines += [f"    if len(columns) != {nf}:",
              f'        raise ValueError(f"columns must hold {nf} storage columns, got {{len(columns)}}")',
              f"    _{name}_unpack(&k, constants, codes)",
              "    try:",
              f"        for j in range({nf}):",
              "            _fr_open(columns[j], &views[j], &cols[j], stop, j)",
              "            opened += 1",
              "        with nogil:",
              "            for i in range(n):",
              "                r = spec_reason[start + i]",
              "                li = layout_index[start + i]",
              "                bad = li < 0 or li >= n_layouts",
              "                if r == 0:",
              f"                    r = _{name}_row(&k, cols, start + i, bad or layout_bad[li] != 0, "
              + ", ".join(f"p_{p} + i * r_{p} if p_{p} != NULL else NULL, f_{p}" for p in outs) + ")",
              "                out_reason[i] = r",
              "                out_layout[i] = -1 if (r != 0 or bad) else layout_row[li]",
              "                if r != 0:"]
    for p in outs:
        lines += [f"                    if p_{p} != NULL:",
                  f"                        for j in range({counts[p]}):",
                  f"                            p_{p}[j * f_{p} + i * r_{p}] = NAN"]
    lines += ["    finally:",
              "        for j in range(opened):",
              "            PyBuffer_Release(&views[j])"]
    return lines


_C_PREAMBLE = '''# Generated by tools/gen_formula_rows.py from src/ndcost/tables/formulas.py and formulas_ops.py: do not edit.
# The compiled twins of the batch formulas (joint rules, derived values, candidate vectors), one row at a
# time without the GIL; their oracle is ndcost/kernels/formula_rows.py, generated alike.
from cpython.buffer cimport PyBUF_FORMAT, PyBUF_STRIDES, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport INT64_MIN


cdef struct _FRColumn:
    const char* data
    Py_ssize_t stride
    int kind            # 1 int8, 2 int16, 4 int32, 8 int64, -1 uint8 / bool, -2 uint16, -4 uint32, -8 uint64, 0 float64


cdef int _fr_open(object column, Py_buffer* view, _FRColumn* out, Py_ssize_t rows, Py_ssize_t j) except -1:
    # A storage column's buffer, held until released; its element type read off the buffer's format.
    cdef bytes code
    PyObject_GetBuffer(column, view, PyBUF_STRIDES | PyBUF_FORMAT)
    try:
        code = (view.format or b"B").lstrip(b"@=<>!")
        if view.ndim != 1 or view.shape[0] < rows:
            raise ValueError(f"columns[{j}] must be 1-D with >= {rows} rows")
        if code in (b"b", b"h", b"i", b"l", b"q") and view.itemsize in (1, 2, 4, 8):
            out.kind = view.itemsize
        elif code in (b"B", b"H", b"I", b"L", b"Q", b"?") and view.itemsize in (1, 2, 4, 8):
            out.kind = -view.itemsize
        elif code == b"d" and view.itemsize == 8:
            out.kind = 0
        else:
            raise ValueError(f"columns[{j}] must hold integers, bools or float64, got format {code!r}")
    except BaseException:
        PyBuffer_Release(view)
        raise
    out.data = <const char*>view.buf
    out.stride = view.strides[0]
    return 0


cdef inline long long _fr_to_int(double x) noexcept nogil:
    # A float as an int64 (a NaN or an out-of-range value: 0, where C's conversion is undefined).
    if x == x and -9.2e18 < x < 9.2e18:
        return <long long>x
    return 0


cdef inline long long _fr_int(const _FRColumn* col, Py_ssize_t i) noexcept nogil:
    cdef const char* p = col.data + i * col.stride
    if col.kind == 8:
        return (<const long long*>p)[0]
    if col.kind == 4:
        return (<const int*>p)[0]
    if col.kind == 1:
        return (<const signed char*>p)[0]
    if col.kind == -1:
        return (<const unsigned char*>p)[0]
    if col.kind == 2:
        return (<const short*>p)[0]
    if col.kind == -2:
        return (<const unsigned short*>p)[0]
    if col.kind == -4:
        return (<const unsigned int*>p)[0]
    if col.kind == -8:
        return <long long>(<const unsigned long long*>p)[0]
    return _fr_to_int((<const double*>p)[0])


cdef inline bint _fr_bool(const _FRColumn* col, Py_ssize_t i) noexcept nogil:
    if col.kind == 0:
        return (<const double*>(col.data + i * col.stride))[0] != 0.0
    return _fr_int(col, i) != 0


cdef inline double _fr_float(const _FRColumn* col, Py_ssize_t i) noexcept nogil:
    if col.kind == 0:
        return (<const double*>(col.data + i * col.stride))[0]
    return <double>_fr_int(col, i)


cdef inline long long _fr_floordiv(long long a, long long b) noexcept nogil:
    # numpy's int64 floor_divide: 0 for a zero divisor, and INT64_MIN // -1 wraps
    cdef long long q
    if b > 0 and ((a | b) >> 32) == 0:                             # a >= 0: its sign bit is clear
        return <long long>(<unsigned int>a // <unsigned int>b)      # the common case: a 32-bit division
    if b == 0:
        return 0
    if b == -1:
        return <long long>(0ULL - <unsigned long long>a)
    q = a // b                   # cdivision: C's truncation, then floored
    if (a % b != 0) and ((a < 0) != (b < 0)):
        q -= 1
    return q


cdef inline long long _fr_mod(long long a, long long b) noexcept nogil:
    # numpy's int64 remainder: the divisor's sign, 0 for a zero divisor
    cdef long long r
    if b > 0 and ((a | b) >> 32) == 0:                             # a >= 0: its sign bit is clear
        return <long long>(<unsigned int>a % <unsigned int>b)       # the common case: a 32-bit division
    if b == 0 or b == -1:
        return 0
    r = a % b
    if r != 0 and ((r < 0) != (b < 0)):
        r += b
    return r


cdef inline long long _fr_gcd(long long a, long long b) noexcept nogil:
    cdef unsigned long long x = <unsigned long long>a if a >= 0 else 0ULL - <unsigned long long>a
    cdef unsigned long long y = <unsigned long long>b if b >= 0 else 0ULL - <unsigned long long>b
    cdef unsigned long long t
    while y != 0:
        t = x % y
        x = y
        y = t
    return <long long>x


cdef inline long long _fr_item_i(const double* items, Py_ssize_t size, Py_ssize_t j) noexcept nogil:
    return _fr_to_int(items[j]) if 0 <= j < size else 0


cdef inline double _fr_item_f(const double* items, Py_ssize_t size, Py_ssize_t j) noexcept nogil:
    return items[j] if 0 <= j < size else 0.0
'''


def _c_table(name: str, values: tuple) -> list[str]:
    kind = "double" if any(isinstance(v, float) for v in values) else "long long"
    lines = ["", "", f"cdef inline {kind} _fr_table{name.lower()}(long long code) noexcept nogil:",
             f"    # formulas_ops.{name}[code], the code clipped into the table (numpy's take(mode=\"clip\"))",
             "    if code <= 0:", f"        return {_c_literal(values[0])}"]
    for j, value in enumerate(values[1:-1], start=1):
        lines += [f"    if code == {j}:", f"        return {_c_literal(value)}"]
    return lines + [f"    return {_c_literal(values[-1])}"]


def render_pxi(built: Kernel | None = None) -> str:
    built = kernel() if built is None else built
    lines = _C_PREAMBLE.rstrip("\n").split("\n")
    for name, values in built.tables.items():
        lines += _c_table(name, values)
    return "\n".join(lines + _c_kernel(built)) + "\n"


# --------------------------------------------------------------------------- the oracle (Python)


class _PythonNames(ast.NodeTransformer):
    """A typed row expression as the oracle's Python: ``_item`` and ``_take`` as they read, casts as
    Python's, ``_div`` IEEE's; everything else reads as it is."""

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if node.func.id == "_item":
            return _call("_item", node.args[0], node.args[1])
        return node


def _py(node: ast.expr) -> str:
    return ast.unparse(_PythonNames().visit(copy.deepcopy(node)))


def _py_statements(statements: list[ast.stmt], indent: str) -> list[str]:
    def loop(stmt: ast.For, at: str) -> list[str]:
        return [f"{at}for {stmt.target.id} in k.{stmt.iter.args[0].attr}[{stmt.iter.args[1].value}:]:"]

    return _statements(statements, _py, loop, indent)


def _py_kernel(kernel: Kernel) -> list[str]:
    name = kernel.name
    outs = [prefix for prefix, _, _ in kernel.sections]
    counts = {prefix: len(values) for prefix, _, values in kernel.sections}
    columns = ", ".join(kernel.column_types)
    lines = ["", "", f"def _row(k, row, layout_bad, {', '.join(f'want_{p}' for p in outs)}):",
             "    # One row: (its reason code, 0 when priced; then each asked-for vector, else None).",
             f"    ({columns},) = row"]
    nones = ", ".join("None" for _ in outs)
    lines += [line.replace("return k.codes", "return (k.codes") + f", {nones})" if "return k.codes" in line
              else line for line in _py_statements(kernel.joint, "    ")]
    lines += _py_statements(kernel.derived, "    ")
    for prefix, statements, values in kernel.sections:
        lines += [f"    {prefix} = None", f"    if want_{prefix}:"]
        lines += _py_statements(statements, "        ")
        lines += [f"        {prefix} = (", *(f"            {_py(value)}," for value in values), "        )"]
    lines.append(f"    return (0, {', '.join(outs)})")
    reads = ", ".join(repr(_PY_CAST[kernel.column_types[f"c_{f}"]]) for f in kernel.fields)
    lines += ["", "", f"def {name}(columns, start, stop, constants, codes, spec_reason, layout_index, layout_bad, "
              f"layout_row, out_reason, out_layout, {', '.join(f'out_{p}' for p in outs)}):",
              f'    """Rows start..stop: the reason (0: priced), the table row and '
              f'{", ".join(f"the {p} vector ({counts[p]}, n) or (0, 0)" for p in outs)} of each (NaN when not '
              'priced)."""',
              "    n = stop - start",
              "    n_layouts = len(layout_row)",
              *_argument_checks(),
              *(f"    check_out(out_{p}, {counts[p]}, n, 'out_{p}')" for p in outs),
              f"    k = unpack(constants, codes, FORMULA_ROW_CONSTANTS, {len(kernel.rules)})",
              f"    rows = zip(*rows_of(columns, start, stop, ({reads},)))",
              *(f"    want_{p} = len(out_{p}) != 0" for p in outs),
              "    for i, row in enumerate(rows):",
              "        r = int(spec_reason[start + i])",
              "        li = int(layout_index[start + i])",
              "        bad = li < 0 or li >= n_layouts",
              f"        vectors = (None,) * {len(outs)}",
              "        if r == 0:",
              "            r, *vectors = _row(k, row, bad or bool(layout_bad[li]), "
              + ", ".join(f"want_{p}" for p in outs) + ")",
              "        out_reason[i] = r",
              "        out_layout[i] = -1 if (r != 0 or bad) else int(layout_row[li])",
              f"        for out, vector in zip(({', '.join(f'out_{p}' for p in outs)},), vectors):",
              "            if len(out):",
              "                out[:, i] = NAN if vector is None else vector"]
    return lines


_GENERATED = "# Generated by tools/gen_formula_rows.py from src/ndcost/tables/formulas.py and formulas_ops.py: do not edit."


def _wrapped(values, indent: int = 4) -> list[str]:
    return textwrap.wrap(", ".join(map(repr, values)) + ",", 116 - indent, initial_indent=" " * indent,
                         subsequent_indent=" " * indent)


def render_oracle(built: Kernel | None = None) -> str:
    """The oracle's module: the kernel and what it reads."""
    built = kernel() if built is None else built
    consumers = ", ".join(f"``{c}``" for c in CONSUMERS)
    lines = [_GENERATED,
             '"""The oracle of the compiled ``formula_rows`` (``cysrc/ndcost/kernels/formula_rows.pxi``, generated alike):',
             "for each row of a chunk of a batch's storage columns, ``ndcost.tables.formulas``' joint_reason,",
             f"derived_columns and {consumers},",
             "one row at a time in plain Python with numpy's int64 / float64 results (``ndcost.kernels.formula_row_ops``).",
             "",
             "What it reads, by name: ``FORMULA_ROW_FIELDS`` (the storage columns, in the order ``columns`` holds them),",
             "``FORMULA_ROW_CONSTANTS`` (the constant slots), ``FORMULA_ROW_RULES`` (the joint rules whose codes",
             "``codes`` holds) and ``FORMULA_ROW_OUTPUTS`` (the output matrices and their rows).",
             '"""',
             "from __future__ import annotations",
             "",
             "from .formula_row_ops import NAN, check_out, rows_of, unpack",
             "from .formula_row_ops import div as _div, floordiv as _floordiv, gcd as _gcd, item as _item, mod as _mod",
             "from .formula_row_ops import take as _take",
             "",
             f'__all__ = ["{NAME}"]',
             "",
             "#: The storage columns it reads, in the order its ``columns`` argument holds them.",
             "FORMULA_ROW_FIELDS = (", *_wrapped(built.fields), ")",
             "#: Its constant slots: (owner -- mc, cc, overlap, or None for a parameter -- , attribute, type: i int,",
             "#: b bool, f float, a trailing ? where None is allowed (packed as NaN), ti / tf a tuple of them).",
             "FORMULA_ROW_CONSTANTS = (", *(f"    {built.sources[slot] + (built.slots[slot],)!r},"
                                            for slot in built.scalar_slots + built.tuple_slots), ")",
             "#: The joint rules it checks, in order: ``codes[j]`` is rule j's reason code.",
             "FORMULA_ROW_RULES = (", *_wrapped(built.rules), ")",
             "#: Its output matrices: (name, rows); a (0, 0) matrix is not asked for.",
             f"FORMULA_ROW_OUTPUTS = {tuple((p, len(v)) for p, _, v in built.sections)!r}"]
    lines += [f"_TABLE{name} = {values!r}" for name, values in built.tables.items()]
    return "\n".join(lines + _py_kernel(built)) + "\n"


if __name__ == "__main__":
    BUILT = kernel()
    PXI.write_text(render_pxi(BUILT))
    ORACLE.write_text(render_oracle(BUILT))
