"""MkDocs hook: the configuration reference, generated from the config schemas at every build.

The schemas are read statically with griffe (phazec is never imported: its C++ extension need not be
built). From one root dataclass, each field whose annotation is a dataclass is a config group: its
rows are its fields, nested dataclasses flattened with dotted keys (`hw.device.attention`, and
`system.tiers[].group_size` for a list of them), each with its type, default and docstring. Each
group lists its presets, `conf/<group>/*.yaml`, with the default one (from `conf/config.yaml`)
marked. The page is a generated file, `reference/configuration.md`; nothing is written to `docs/`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import griffe
import yaml
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

ROOT_CLASS = "phazec.config.Config"
"""Dotted path of the root schema: every field of it is a group, or a key at the top of the tree."""
PAGE = "reference/configuration.md"
"""Where the page appears in the site."""
CONF = "conf"
"""The presets' folder, relative to the repository root."""
YAML_WORDS = {"True": "true", "False": "false", "None": "null"}


@dataclass(frozen=True)
class Row:
    """One key of the reference."""

    key: str
    """Dotted key as given on the command line, e.g. `hw.device.attention`."""
    type: str
    """The annotation as written in the schema."""
    default: str
    """The schema's default (`required` for a field without one)."""
    doc: str
    """The field's docstring on one line."""


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add the generated page to the site's files."""
    root = Path(config.config_file_path).parent
    files.append(File.generated(config, PAGE, content=reference(root)))
    return files


def reference(root: Path) -> str:
    """The whole page, in Markdown."""
    package, _, path = ROOT_CLASS.partition(".")
    schema = griffe.load(package, search_paths=[str(root)], allow_inspection=False, resolve_aliases=False)
    try:
        top = schema[path]
        top = top.final_target if isinstance(top, griffe.Alias) else top
    except (KeyError, griffe.AliasResolutionError) as error:
        raise PluginError(f"config_reference: {ROOT_CLASS} is not found ({error})") from error
    if not isinstance(top, griffe.Class):
        raise PluginError(f"config_reference: {ROOT_CLASS} is not a class")
    defaults = default_presets(root / CONF / "config.yaml")
    lines = [
        "# Configuration reference",
        "",
        "Generated at each docs build from the config schemas (the dataclasses under "
        f"`{ROOT_CLASS}`) and the presets in `{CONF}/`: it cannot go stale. A key is set on the "
        "command line as `key=value` (`hw.device.attention=flash`); a group's preset as "
        "`group=name` (`hw=a100`). The default column is the schema's: a preset sets the keys it "
        "names, and a key marked *required* must come from a preset or the command line.",
        "",
    ]
    plain = []
    for field in fields(top):
        node = dataclass_of(field.annotation)
        if node is None:
            plain.append(field)
            continue
        lines += group_section(field.name, node, root / CONF, defaults.get(field.name))
    if plain:
        lines += ["## Top-level keys", "", *table([row for field in plain for row in rows(field, "")])]
    named = {field.name for field in fields(top)}
    others = sorted(p.name for p in (root / CONF).iterdir() if p.is_dir() and p.name not in named | {"hydra"})
    for group in others:
        lines += [f"## {group}", "", "A group of presets with no schema of its own.", ""]
        lines += presets(root / CONF / group, defaults.get(group))
    return "\n".join(lines) + "\n"


def group_section(group: str, schema: griffe.Class, conf: Path, default: str | None) -> list[str]:
    """The section of one config group: its docstring, presets and the table of its keys."""
    doc = schema.docstring.value if schema.docstring else ""
    return [
        f"## {group}",
        "",
        *([doc, ""] if doc else []),
        *presets(conf / group, default),
        *table(group_rows(group, schema)),
    ]


def group_rows(group: str, schema: griffe.Class) -> list[Row]:
    """Every key of one group, nested dataclasses flattened: the one place a group's rows come from."""
    return [row for field in fields(schema) for row in rows(field, f"{group}.")]


def rows(field: griffe.Attribute, prefix: str) -> list[Row]:
    """The rows of one field: itself, then the fields of a dataclass (or list of them) it holds."""
    key = prefix + field.name
    annotation = field.annotation
    node = dataclass_of(annotation)
    item = dataclass_of(annotation.slice) if isinstance(annotation, griffe.ExprSubscript) else None
    doc = " ".join((field.docstring.value if field.docstring else "").split())
    nested = node or item
    if not doc and nested is not None and nested.docstring:
        doc = " ".join(nested.docstring.value.split())
    own = Row(key, str(annotation), "" if nested else default_text(field.value), doc)
    if nested is None:
        return [own]
    below = f"{key}." if node else f"{key}[]."
    return [own, *(row for child in fields(nested) for row in rows(child, below))]


def fields(schema: griffe.Class) -> list[griffe.Attribute]:
    """A dataclass's annotated fields, in order."""
    return [
        member
        for member in schema.members.values()
        if isinstance(member, griffe.Attribute) and member.annotation is not None
    ]


def dataclass_of(annotation: Any) -> griffe.Class | None:
    """The dataclass an annotation names (through imports), or None for any other type."""
    if not isinstance(annotation, griffe.ExprName):
        return None
    try:
        target = annotation.resolved
    except (AttributeError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None
    if isinstance(target, griffe.Alias):
        target = target.final_target
    if not isinstance(target, griffe.Class):
        return None
    return target if any(str(d.value).split(".")[-1] == "dataclass" for d in target.decorators) else None


def default_text(value: Any) -> str:
    """A field's default as the command line writes it: `field(default_factory=lambda: [1, 2])` reads
    `[1, 2]`, `None` reads `null`, `'hf'` reads `hf`."""
    if value is None:
        return ""
    if str(value) == "MISSING":
        return "*required*"
    if isinstance(value, griffe.ExprCall) and str(value.function) == "field":
        for argument in value.arguments:
            if isinstance(argument, griffe.ExprKeyword) and argument.name == "default":
                value = argument.value
            elif isinstance(argument, griffe.ExprKeyword) and argument.name == "default_factory":
                factory = argument.value
                value = factory.body if isinstance(factory, griffe.ExprLambda) else factory
                value = {"dict": "{}", "list": "[]"}.get(str(value), value)
    text = re.sub(r"'([^']*)'", lambda m: m.group(1) or '""', str(value))
    text = re.sub(r"\b(True|False|None)\b", lambda m: YAML_WORDS[m.group(1)], text)
    return f"`{text}`"


def table(entries: list[Row]) -> list[str]:
    """A Markdown table of rows."""
    lines = ["| key | type | default | description |", "|---|---|---|---|"]
    for row in entries:
        cells = (f"`{row.key}`", cell(row.type), cell(row.default), cell(row.doc))
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]


def cell(text: str) -> str:
    """Text safe inside a table cell."""
    return text.replace("|", r"\|")


def presets(folder: Path, default: str | None) -> list[str]:
    """The presets of a group: name (the default marked) and the first sentence of its comment."""
    entries = []
    for path in sorted(folder.glob("*.yaml")):
        mark = " (default)" if path.stem == default else ""
        entries.append(f"- `{path.stem}`{mark}: {summary(path)}")
    return ["Presets:", "", *entries, ""] if entries else []


def summary(path: Path) -> str:
    """The first sentence of a preset's leading comment, or its settings when it has none."""
    lines = path.read_text().splitlines()
    comment = []
    for line in lines:
        if not line.startswith("#"):
            break
        text = line.lstrip("# ").rstrip()
        if text.startswith("- "):
            break
        if not text.startswith("@package"):
            comment.append(text)
    if comment:
        return re.split(r"(?<=\.)\s+(?=[A-Z(`])", " ".join(comment), maxsplit=1)[0]
    settings = [line.split("#")[0].strip() for line in lines if line.strip() and not line.startswith("#")]
    return "`" + "; ".join(settings) + "`"


def default_presets(path: Path) -> dict[str, str]:
    """Each group's default preset, from the defaults list of the root config."""
    defaults = yaml.safe_load(path.read_text()).get("defaults", [])
    return {
        str(group): str(name)
        for entry in defaults
        if isinstance(entry, dict)
        for group, name in entry.items()
        if not str(group).startswith("override ")
    }
