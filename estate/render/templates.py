"""The Jinja2 environment shared by every renderer: strict, deterministic."""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import jinja2

ROOT = Path(__file__).resolve().parents[2]


def comment(value) -> str:
    """A value for a '#' comment: JSON escapes keep a newline or quote from ending the
    comment and starting YAML or TOML of its own (plain values print unchanged)."""
    return json.dumps(str(value), ensure_ascii=False)[1:-1]


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(ROOT)),
        undefined=jinja2.StrictUndefined,   # a missing value is a bug, not an empty string
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters["comment"] = comment
    return env


def render_template(name: str, context: dict) -> bytes:
    return environment().get_template(name).render(**context).encode()
