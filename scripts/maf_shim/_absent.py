"""Names the framework has and agentkeep does not: importable, unusable.

A framework test module imports many names at its top; one missing name would make every test of
the file fail to collect. A name agentkeep has no counterpart for becomes an :class:`Absent`
placeholder: importing it works, using it (calling, reading an attribute, indexing) raises
``NotImplementedError`` naming it, so the test that needs it fails with that reason. A class a test
module derives from it (at import) gets a base whose instances cannot be made, for the same reason.
"""

from __future__ import annotations

from typing import Any, NoReturn


class Absent:
    """A framework name with no agentkeep counterpart."""

    __slots__ = ("_qualified_name",)

    def __init__(self, qualified_name: str) -> None:
        object.__setattr__(self, "_qualified_name", qualified_name)

    def _refuse(self, *_args: Any, **_kwargs: Any) -> NoReturn:
        raise NotImplementedError(f"{self._qualified_name} has no agentkeep counterpart")

    __call__ = _refuse
    __getitem__ = _refuse
    __iter__ = _refuse

    def __mro_entries__(self, bases: tuple[object, ...]) -> tuple[type, ...]:
        name = self._qualified_name

        def refuse(*_args: Any, **_kwargs: Any) -> None:
            raise NotImplementedError(f"{name} has no agentkeep counterpart")

        return (type(name.rsplit(".", 1)[-1], (), {"__init__": refuse}),)

    def __getattr__(self, name: str) -> NoReturn:
        self._refuse()

    def __repr__(self) -> str:
        return f"<absent {self._qualified_name}>"


def absent_names(module: str):
    """A module ``__getattr__`` that answers every name not defined with an :class:`Absent`."""

    def __getattr__(name: str) -> Absent:
        if name.startswith("__"):
            raise AttributeError(name)
        return Absent(f"{module}.{name}")

    return __getattr__
