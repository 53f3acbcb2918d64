"""The one finite-number rule: a number read from metadata, an argument or a state must be a real, finite number
(never NaN, +-inf, a bool, a string or null), else the error names where it came from and the value.

NaN slips through every comparison (`NaN <= 0` is False), so checks written as `if x <= 0: raise` accept it; this
module is where such values are refused, for every layer (a utility like errors.py).
"""

from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Any

from robostream.errors import RobostreamError


class BadNumberError(RobostreamError, ValueError):
    """A value that must be a finite number (in a range) is not."""


def finite_number(
    value: Any,
    *,
    what: str,
    minimum: float | None = None,
    positive: bool = False,
    integer: bool = False,
    error: type[ValueError] = BadNumberError,
) -> float | int:
    """`value` as a Python number if it is a finite real (an int when `integer`), at least `minimum` and, with
    `positive`, above 0; else BadNumberError naming `what` and the value.

    Args:
        value: the number to check (numpy scalars count).
        what: where it came from, e.g. "meta/info.json 'fps'" or "--data-file-size-in-mb".
        minimum: the smallest value allowed (inclusive).
        positive: the value must be > 0.
        integer: the value must be an int (a float is refused: counts are ints).
        error: the ValueError subclass to raise (DatasetFormatError for a dataset's files).
    """
    kind = "an integer" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, Integral if integer else Real):
        raise error(f"{what}: expected {kind}, got {value!r} ({type(value).__name__})")
    number = int(value) if integer and isinstance(value, Integral) else float(value)
    if not math.isfinite(number):
        raise error(f"{what}: expected a finite number, got {value!r}")
    if positive and number <= 0:
        raise error(f"{what}: must be > 0, got {value!r}")
    if minimum is not None and number < minimum:
        raise error(f"{what}: must be >= {minimum}, got {value!r}")
    return value if not integer and isinstance(value, int) else number
