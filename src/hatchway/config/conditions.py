"""Approval conditions: CEL expressions (https://cel.dev) over one operation call.

Evaluated by ``common-expression-language`` (CEL's Rust interpreter behind Python bindings):
no ``eval``, no loops but CEL's bounded macros, no access to anything but the variables given.

The variables (``VARIABLES``): ``arguments`` (the resolved arguments), ``items`` (the validator's
items), ``tool``, ``tainted``, ``tainted_by`` and ``requester``. ``hatchway agent check`` compiles each
condition and runs it once over sample values of the tool's declared arguments, so an unknown
variable, an argument the tool does not declare or a result that is not a boolean is a problem with
its field path before the gateway starts. At run time an expression that cannot be evaluated
(an optional argument absent, a value of another type, a result that is not a boolean) never makes
a call lighter: a rule naming approvers holds, a rule naming the end user does not
(``engine/tools/operations/approvals.approval_for``).
"""

from __future__ import annotations

import functools
import logging
from typing import Any

logger = logging.getLogger(__name__)

VARIABLES = ("arguments", "items", "tool", "tainted", "tainted_by", "requester")
_SAMPLES: dict[str, Any] = {
    "string": "",
    "integer": 0,
    "number": 0.0,
    "boolean": False,
    "array": [],
    "list": [],
    "object": {},
}


@functools.lru_cache(maxsize=512)
def compiled(expression: str) -> Any:
    """The compiled program (cached: a policy's few expressions are compiled once per process). The
    interpreter loads on first use: a gateway whose policies have no conditions never loads it."""
    import cel

    return cel.compile(expression)


def problem_of(expression: str, argument_types: dict[str, str]) -> str | None:
    """Why ``expression`` cannot serve as a condition over a tool with these arguments (name →
    type), or None."""
    try:
        program = compiled(expression)
    except ValueError as exc:
        return f"not a valid CEL expression: {str(exc).splitlines()[0]}"
    sample = {
        "arguments": {name: _SAMPLES.get(kind, "") for name, kind in argument_types.items()},
        "items": [],
        "tool": "",
        "tainted": False,
        "tainted_by": [],
        "requester": "",
    }
    try:
        value = program.execute(sample)
    except KeyError as exc:
        known = ", ".join(argument_types) or "none declared"
        return f"{exc.args[0]!r} is not an argument of the tool's args_schema (known: {known})"
    except RuntimeError as exc:
        return f"{str(exc).split('.')[0]} (the variables are {', '.join(VARIABLES)})"
    except TypeError as exc:
        return f"does not type-check over the declared arguments: {str(exc).split('.')[0]}"
    if not isinstance(value, bool):
        return f"must be true or false (it gives {type(value).__name__} {value!r:.40})"
    return None


def evaluate(expression: str, variables: dict[str, Any]) -> bool | None:
    """``expression``'s value for ``variables``: True or False, or None when it cannot be evaluated
    (an absent argument, a value of another type, a result that is not a boolean). What None means
    is the caller's to decide, always toward the stricter rule (``approvals.approval_for``)."""
    try:
        value = compiled(expression).execute(variables)
    except Exception as exc:  # the library raises KeyError, TypeError, RuntimeError, ValueError
        logger.info("approval condition %r could not be evaluated (%s)", expression, type(exc).__name__)
        return None
    if not isinstance(value, bool):
        logger.info("approval condition %r gave %s, not a boolean", expression, type(value).__name__)
        return None
    return value
