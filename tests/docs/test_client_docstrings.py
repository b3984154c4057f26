"""`Client`, `AsyncClient` and their readers document every public method (issue 14)."""

from __future__ import annotations

import inspect

import pytest

from seglog.client import AsyncClient, AsyncReader, Client, Reader


def public_methods(cls: type) -> list[str]:
    return [
        name
        for name, member in vars(cls).items()
        if not name.startswith("_") and (inspect.isfunction(member) or isinstance(member, property))
    ]


@pytest.mark.parametrize("cls", [Client, AsyncClient, Reader, AsyncReader])
def test_every_public_method_has_a_docstring(cls: type) -> None:
    assert (cls.__doc__ or "").strip(), f"{cls.__name__} has no docstring"
    missing = [n for n in public_methods(cls) if not (getattr(cls, n).__doc__ or "").strip()]
    assert missing == []


def test_both_clients_have_the_same_methods() -> None:
    assert set(public_methods(Client)) <= set(public_methods(AsyncClient))


@pytest.mark.parametrize("cls", [Client, AsyncClient])
def test_request_methods_name_their_errors(cls: type) -> None:
    for name in ("put_topic", "get_topic", "delete_topic", "append", "diff", "claim"):
        assert "Raises:" in (getattr(cls, name).__doc__ or ""), f"{cls.__name__}.{name}"
