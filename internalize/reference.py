"""docs/config.md, generated from the pydantic models: every key, its default, its choices.

`internalize reference --out docs/config.md` writes it; a test fails when the committed file is
stale. A key's description is the comment on its line where its section is declared, or the
comment lines right above it.
"""
from __future__ import annotations

import inspect
import json
import re
import typing
from typing import Literal, Union

from pydantic import BaseModel

from internalize import config as configs
from internalize import registry

FIELD = re.compile(r"^\s+(\w+)\s*:[^#]*?(?:#\s*(.*))?$")
COMMENT = re.compile(r"^\s+#\s?(.*)$")

HEADER = """# Config reference

Every key of an experiment's config, with its default and choices. Set any of them on the command
line with `--set key=value` (`internalize run logicot --set task.n=40`), in an experiment's YAML,
or in a sweep's `grid` or `cases`. Unknown keys are refused. Experiments' own YAML files
(`internalize/configs/`) change many defaults: `internalize run NAME` writes the resolved config
to the run's `config.yaml`.

The top-level keys and the shared sections (train, eval, log) are the core's
(`internalize/config.py`); every other section belongs to the systems that read it, and a config
holds only its system's sections: a key of a section its system does not read is refused.
This page is generated from the code by `internalize reference --out docs/config.md`; a test
fails when it is stale.
"""


def comments(cls: type) -> dict[str, str]:
    """Field name -> the comment on its line, after the comment lines right above it."""
    out, pending = {}, []
    for line in inspect.getsource(cls).splitlines()[1:]:
        if match := COMMENT.match(line):
            pending.append(match.group(1).strip())
        elif (match := FIELD.match(line)) and not line.strip().startswith(("def ", "@", "return")):
            out[match.group(1)] = " ".join(pending + [match.group(2) or ""]).strip()
            pending = []
        else:
            pending = []
    return out


def choices(annotation) -> str:
    """Literal values, or the type's plain name."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is Literal:
        return ", ".join(f"`{a}`" for a in args)
    if typing.get_origin(annotation) is Union:
        inner = [choices(a) for a in args if a is not type(None)]
        return " or ".join(inner) + (" or `null`" if type(None) in args else "")
    if typing.get_origin(annotation) is list:
        return f"list of {choices(args[0])}"
    return getattr(annotation, "__name__", str(annotation))


def _curricula() -> str:
    from internalize.curricula import CURRICULA

    return ", ".join(f"`{name}`" for name in CURRICULA)


# keys whose choices are a registry's names, not a Literal
REGISTRIES = {"system": lambda: ", ".join(f"`{name}`" for name in registry.names()), "curriculum.name": _curricula}


def shown(value) -> str:
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    return "`" + (json.dumps(value) if not isinstance(value, str) else value) + "`"


def rows(cls: type[BaseModel], prefix: str, skip: tuple[str, ...] = ()) -> tuple[list[str], list[tuple]]:
    """Table rows of a section, and the nested sections found in it."""
    notes, lines, nested = comments(cls), [], []
    for name, field in cls.model_fields.items():
        if name in skip:
            continue
        key = f"{prefix}{name}"
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            nested.append((field.annotation, f"{key}."))
            continue
        default = "required" if field.is_required() else shown(field.default)
        kind = REGISTRIES[key]() if key in REGISTRIES else choices(field.annotation)
        note = re.sub(r"(<\w+>)", r"`\1`", notes.get(name, "")).replace("|", "\\|")
        lines.append(f"| `{key}` | {default} | {kind} | {note} |")
    return lines, nested


def section(title: str, cls: type[BaseModel], prefix: str, skip: tuple[str, ...] = ()) -> list[str]:
    lines, nested = rows(cls, prefix, skip)
    doc = inspect.getdoc(cls) if cls.__doc__ and cls.__doc__ != BaseModel.__doc__ else ""
    out = [f"## {title}", ""] + ([doc, ""] if doc else [])
    out += ["| key | default | choices | what it does |", "|---|---|---|---|", *lines, ""]
    for child, child_prefix in nested:
        out += section(f"`{child_prefix.rstrip('.')}`", child, child_prefix)
    return out


def config_reference() -> str:
    out = [HEADER, "## Top level", "",
           "| key | default | choices | what it does |", "|---|---|---|---|"]
    top, _ = rows(configs.Config, "", skip=configs.SHARED)
    out += top + [""]
    readers: dict[tuple[str, type], list[str]] = {}  # (section, class) -> the systems that read it
    for name in registry.names():
        reads = configs.sections(name)
        out.append(f"- system `{name}` reads " + ", ".join(
            f"`{k}`" + (f" (`{k}.name={configs.part_name(c)}`)" if configs.part_name(c) else "") for k, c in reads.items()))
        for key, cls in reads.items():
            if cls is not configs.Config.model_fields.get(key, None) and key in registry.get(name).sections:
                readers.setdefault((key, cls), []).append(name)
    out.append("")
    for key in configs.SHARED:
        out += section(f"`{key}` (every system)", configs.Config.model_fields[key].annotation, f"{key}.")
    for (key, cls), names in readers.items():
        shared = configs.Config.model_fields.get(key)
        skip = (("name",) if configs.part_name(cls) else ()) + (tuple(shared.annotation.model_fields) if shared is not None else ())
        title = f"`{key}` of " + ", ".join(f"`{n}`" for n in names) + (" (beside the shared keys)" if shared else "")
        out += section(title, cls, f"{key}.", skip=skip)
    return "\n".join(out).rstrip() + "\n"
