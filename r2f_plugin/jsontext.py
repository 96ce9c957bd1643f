"""JSON text every layer writes: canonical (equal values, equal text: store keys, cache
keys) and strict (no NaN or infinity, which strict parsers reject)."""

from __future__ import annotations

import json
import math
from typing import Any


def canonical_json(obj: Any) -> str:
    """JSON with sorted keys and no whitespace: equal values give equal text. Strict:
    a NaN or infinity is a bug upstream (see :func:`json_safe`), never written."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str, allow_nan=False)


def json_safe(obj: Any) -> Any:
    """``obj`` with every non-finite float replaced by ``None`` (JSON ``null``): strict
    parsers reject ``NaN``, and an undefined metric is absent, not a number."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj
