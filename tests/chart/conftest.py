"""Chart test fixtures; the helpers live in chart_helpers.py."""
from __future__ import annotations

import pathlib
import sys
from typing import Any, Callable

import pytest

# tests/ holds helpers shared with the other suites (daemon_harness); importable however pytest is started.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

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
