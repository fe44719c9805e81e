"""The student-facing texts of assignment.toml files, for the message catalogue (grader/i18n.py).

An instructor writes assignment.toml in English like the code's messages; its titles, hints, group and
requirement descriptions and [feedback.advice] texts are msgids of the "grader" domain, extracted by this
Babel extractor (pyproject.toml [tool.babel.mappings]) and shown through `_()` where they reach a student.
A text not in the catalogue (a new assignment's) is shown as written.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from typing import IO, Any

ADVICE_KEYS = ("title", "advice", "action", "case_hint")  # AdviceText's texts; `snippet` is code


def student_texts(spec: dict[str, Any]) -> Iterator[str]:
    """Every text of a parsed assignment.toml that a student reads."""
    if isinstance(spec.get("title"), str):
        yield spec["title"]
    for group in spec.get("groups", []):
        if group.get("description"):
            yield group["description"]
    for stage in spec.get("stages", []):
        yield from (stage[key] for key in ("title", "hint") if stage.get(key))
        yield from (req["description"] for req in stage.get("requirements", []) if req.get("description"))
    for advice in spec.get("feedback", {}).get("advice", {}).values():
        yield from (advice[key] for key in ADVICE_KEYS if advice.get(key))


def extract(fileobj: IO[bytes], keywords: object, comment_tags: object,
            options: dict[str, Any]) -> Iterator[tuple[int, str | None, str, list[str]]]:
    """Babel extraction method: (line, function, message, comments) per text, line of its first words."""
    source = fileobj.read().decode("utf-8")
    lines = source.splitlines()
    for text in student_texts(tomllib.loads(source)):
        head = text.splitlines()[0][:40]
        line = next((i for i, content in enumerate(lines, start=1) if head in content), 1)
        yield line, None, text, []
