"""A mixture's sources file: a JSON or YAML list of `robostream.Source` arguments, one object per source (the
training command's `--robostream.mixture`, the benchmark's `--sources @FILE`), read and checked here only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import yaml

from robostream.datasets.mixture import Source

YAML_SUFFIXES = (".yaml", ".yml")
EXAMPLE = '[{"root": "path/or/url", "proportion": 0.7}, {"repo_id": "owner/name", "proportion": 0.3}]'


def source_arguments(path: str | Path) -> list[dict[str, Any]]:
    """The Source arguments a sources file lists, each checked by building its Source.

    Args:
        path: a .yaml/.yml file (YAML), else JSON, holding a non-empty list of objects of Source arguments.

    Raises:
        ValueError: naming the file, and the entry at fault with what is wrong with it.
    """
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the sources file: {exc}") from exc
    syntax: Literal["json", "yaml"] = "yaml" if Path(path).suffix.lower() in YAML_SUFFIXES else "json"
    return parse_source_arguments(text, where=str(path), syntax=syntax)


def sources_from_file(path: str | Path) -> list[Source]:
    """The Sources a sources file lists (see source_arguments).

    Args:
        path: a .yaml/.yml file (YAML), else JSON, holding a non-empty list of objects of Source arguments.
    """
    return [Source(**arguments) for arguments in source_arguments(path)]


def parse_source_arguments(text: str, *, where: str, syntax: Literal["json", "yaml"]) -> list[dict[str, Any]]:
    """The Source arguments a sources file's text lists, each checked by building its Source.

    Args:
        text: the file's text (or a list given inline, e.g. on a command line).
        where: what errors name (the file, or the option that gave the text).
        syntax: "json" or "yaml".
    """
    try:
        doc = yaml.safe_load(text) if syntax == "yaml" else json.loads(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise ValueError(f"{where}: not a {syntax.upper()} list of Source arguments ({exc})") from exc
    if not isinstance(doc, list) or not doc:
        raise ValueError(f"{where}: expected a non-empty list of Source arguments like {EXAMPLE}, got {doc!r:.120}")
    for i, entry in enumerate(doc):
        if not isinstance(entry, dict):
            raise ValueError(f"{where}: source {i} is {entry!r:.80}, not an object of Source arguments like {EXAMPLE}")
        try:
            Source(**entry)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{where}: source {i} {entry!r:.160}: {exc}") from exc
    return doc
