"""Text a person reads, made where the facts are, in both languages.

Most of what gpu-triage prints comes from tables keyed by message id (``bot.messages``). A few
sentences are made deep inside the engine from the facts at hand: why a cause scored what it did
(``--explain``), what a team's feedback did to it. Those are :class:`Said` values: a ``str`` holding
the English (so logs, JSON and every existing caller keep working) with the Chinese beside it;
:func:`in_lang` picks one when the reply is rendered.
"""

from __future__ import annotations

from typing import Any


class Said(str):
    """English text (the string itself) with its Chinese in ``zh``."""

    zh: str

    def __new__(cls, en: str, zh: str) -> "Said":
        obj = super().__new__(cls, en)
        obj.zh = zh
        return obj

    def __add__(self, other: Any) -> "Said":
        if isinstance(other, Said):
            return Said(str(self) + str(other), self.zh + other.zh)
        return Said(str(self) + str(other), self.zh + str(other))


def in_lang(text: Any, lang: str) -> str:
    """``text`` in ``lang``: the Chinese of a :class:`Said` for ``zh``, otherwise the text itself."""
    if lang == "zh" and isinstance(text, Said):
        return text.zh
    return str(text)

