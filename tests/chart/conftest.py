"""Chart test fixtures; the helpers live in chart_helpers.py."""
from __future__ import annotations

from typing import Any, Callable

import pytest

from chart_helpers import OPTIONS, render


@pytest.fixture(scope="session")
def rendered() -> Callable[[str], list[dict[str, Any]]]:
    """Renders each named option once per session."""
    cache: dict[str, list[dict[str, Any]]] = {}

    def get(option: str) -> list[dict[str, Any]]:
        if option not in cache:
            cache[option] = render(OPTIONS[option])
        return cache[option]

    return get
