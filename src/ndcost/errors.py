"""The one error a user of ndcost sees for bad input.

Every spec (Model, Device, Cluster, ExecSpec, Ratios, a config file) is
validated when it is built; whatever is wrong raises :class:`SpecError`, a
``ValueError``, whose message names the parameter, the rule it breaks and the
value it got, in the form (after scikit-learn's ``InvalidParameterError``)::

    The 'tp' parameter of ExecSpec must divide num_attention_heads (64). Got 3 instead.
"""
from __future__ import annotations

import math
from typing import Any


class SpecError(ValueError):
    """A spec, a file or an argument that ndcost cannot price.

    Attributes:
        parameter: The name of the offending parameter (``"tp"``, ``"hidden_size"``, ...).
        owner: What it belongs to (``"ExecSpec"``, ``"Model"``, a file path, ...).
        rule: What it must be, in words.
        value: What it got.
    """

    def __init__(self, parameter: str, owner: str, rule: str, value: Any) -> None:
        self.parameter = parameter
        self.owner = owner
        self.rule = rule
        self.value = value
        # a rule that ends in a question ("...; did you mean 'x'?") takes no full stop after it
        stop = "" if rule.endswith("?") else "."
        super().__init__(
            f"The {parameter!r} parameter of {owner} must {rule}{stop} Got {_shown(value)} instead."
        )


class UnknownFieldError(SpecError, TypeError):
    """A keyword no constructor takes (``ExecSpec(foo=1)``): a SpecError naming the nearest field, and a
    TypeError, as an unexpected keyword argument always was."""


class InputWarning(UserWarning):
    """An input that is legal but ignored or surprising (the layers ND's units leave unplaced when pp*vpp does
    not divide them and no offset is stated): the result is priced, and the warning says what it did not use."""


def _shown(value: Any) -> str:
    """repr(value); an int too long for Python to print (over 4300 digits) by its size."""
    try:
        return repr(value)
    except ValueError:
        if isinstance(value, int):
            return f"an integer of {value.bit_length()} bits"
        raise


def require(condition: bool, parameter: str, owner: str, rule: str, value: Any) -> None:
    """Raise :class:`SpecError` unless *condition* holds."""
    if not condition:
        raise SpecError(parameter, owner, rule, value)


def check_positive_int(value: Any, parameter: str, owner: str, *, minimum: int = 1,
                       maximum: int | None = None) -> int:
    """Return *value* if it is an int (not a bool) of at least *minimum* and at most
    *maximum* (one of ndcost's bounds, :mod:`ndcost.limits`), else raise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(parameter, owner, f"be an integer >= {minimum}", value)
    if value < minimum:
        raise SpecError(parameter, owner, f"be an integer >= {minimum}", value)
    if maximum is not None and value > maximum:
        raise SpecError(parameter, owner, above_limit(maximum), value)
    return value


def _bound_text(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() and abs(bound) < 2**53 else f"{bound:g}"


def above_limit(maximum: float) -> str:
    """The rule a size above its bound breaks, stating the bound."""
    return f"be at most {_bound_text(maximum)} (ndcost's upper bound for this size; see docs/LIMITS.md)"


def below_limit(minimum: float) -> str:
    """The rule a figure below its lower bound breaks, stating the bound."""
    return f"be at least {_bound_text(minimum)} (ndcost's lower bound for this figure; see docs/LIMITS.md)"


def is_finite_number(value: Any) -> bool:
    """Whether *value* is a real number (an int or a float, not a bool) that a float64 holds
    finitely. An int past float64's range is not (``math.isfinite`` would raise on it)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return -(2**1023) < value < 2**1023
    return isinstance(value, float) and math.isfinite(value)


def check_positive_number(value: Any, parameter: str, owner: str, *, allow_zero: bool = False,
                          minimum: float | None = None, maximum: float | None = None) -> float:
    """Return *value* as a float if it is a finite real number > 0 (>= 0 with *allow_zero*),
    and within [*minimum*, *maximum*] where they are given (:mod:`ndcost.limits`)."""
    rule = "be a finite number >= 0" if allow_zero else "be a finite number > 0"
    if not is_finite_number(value):
        raise SpecError(parameter, owner, rule, value)
    number = float(value)
    if number < 0 or (number == 0 and not allow_zero):
        raise SpecError(parameter, owner, rule, value)
    if minimum is not None and number < minimum and not (allow_zero and number == 0):
        raise SpecError(parameter, owner, below_limit(minimum), value)
    if maximum is not None and number > maximum:
        raise SpecError(parameter, owner, above_limit(maximum), value)
    return number


def check_bool(value: Any, parameter: str, owner: str) -> bool:
    """Return *value* if it is a bool, else raise."""
    if not isinstance(value, bool):
        raise SpecError(parameter, owner, "be True or False", value)
    return value


def check_choice(value: Any, parameter: str, owner: str, choices: tuple) -> Any:
    """Return *value* if it is one of *choices*, else raise."""
    if value not in choices:
        raise SpecError(parameter, owner, f"be one of {', '.join(map(repr, choices))}", value)
    return value
