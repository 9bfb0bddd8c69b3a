"""MkDocs hook: the configuration reference, generated from the config schemas at every build.

Every group of the tree (`phazec.config.schema.GROUPS`) is read from the schema Hydra composes into
(its keys, types and defaults, exactly as Hydra sees them) and from the settings it fills (each key's
docstring, read statically with griffe); nested settings are flattened with dotted keys
(`hw.device.attention`, and `system.tiers[].group_size` for a list of them). The training knobs are
declared once (`phazec.predict.training.Training`): `train.*` shows what a search tries (a list for a
searched knob), `plan.*` what one plan takes. Each group lists its presets, `conf/<group>/*.yaml`,
with the default one (from `conf/config.yaml`) marked. The page is a generated file,
`reference/configuration.md`; nothing is written to `docs/`.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import griffe
import yaml
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

PAGE = "reference/configuration.md"
"""Where the page appears in the site."""
CONF = "conf"
"""The presets' folder, relative to the repository root."""


@dataclass(frozen=True)
class Row:
    """One key of the reference."""

    key: str
    """Dotted key as given on the command line, e.g. `hw.device.attention`."""
    type: str
    """The key's type in the schema."""
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
    from phazec.config import schema

    package = griffe.load("phazec", search_paths=[str(root)], allow_inspection=False)
    assert isinstance(package, griffe.Module)
    docs = Docstrings(package)
    defaults = default_presets(root / CONF / "config.yaml")
    lines = [
        "# Configuration reference",
        "",
        "Generated at each docs build from the config schemas (`phazec.config.schema`) and the presets "
        f"in `{CONF}/`: it cannot go stale. A key is set on the command line as `key=value` "
        "(`hw.device.attention=flash`); a group's preset as `group=name` (`hw=a100`). The default "
        "column is the schema's: a preset sets the keys it names, and a key marked *required* must come "
        "from a preset or the command line.",
        "",
    ]
    for group, settings in schema.GROUPS.items():
        twin = schema.hydra_twin(settings)
        lines += [
            f"## {group}",
            "",
            *docs.paragraph(settings),
            *presets(root / CONF / group, defaults.get(group)),
        ]
        lines += table(group_rows(group, twin, docs))
    root_fields = {f.name: f for f in dataclasses.fields(schema.SCHEMA)}
    plain = [f for name, f in root_fields.items() if name not in schema.GROUPS]
    lines += ["## Top-level keys", "", *table([row(f"{f.name}", f, None, docs) for f in plain])]
    others = sorted(
        p.name for p in (root / CONF).iterdir() if p.is_dir() and p.name not in {*root_fields, "hydra"}
    )
    for group in others:
        lines += [f"## {group}", "", "A group of presets with no schema of its own.", ""]
        lines += presets(root / CONF / group, defaults.get(group))
    return "\n".join(lines) + "\n"


class Docstrings:
    """The docstrings of settings classes and their fields, read statically."""

    def __init__(self, package: griffe.Module) -> None:
        self.package = package

    def _class(self, kind: type) -> griffe.Class | None:
        path = f"{kind.__module__}.{kind.__qualname__}".removeprefix("phazec.")
        try:
            found = self.package[path]
        except KeyError:
            return None
        found = found.final_target if isinstance(found, griffe.Alias) else found
        return found if isinstance(found, griffe.Class) else None

    def paragraph(self, kind: type) -> list[str]:
        """A settings class's docstring as a paragraph (none if it has none)."""
        found = self._class(kind)
        text = " ".join(found.docstring.value.split()) if found is not None and found.docstring else ""
        return [text, ""] if text else []

    def field(self, kinds: tuple[type, ...], name: str) -> str:
        """The docstring of field `name` of the first of `kinds` that has it, on one line."""
        for kind in kinds:
            found = self._class(kind)
            member = found.members.get(name) if found is not None else None
            if member is not None and member.docstring is not None:
                return " ".join(member.docstring.value.split())
        return ""


def origins(twin: type) -> tuple[type, ...]:
    """The settings a schema class stands for (a plan's knobs are `Training`'s)."""
    settings: type = getattr(twin, "settings", twin)
    from phazec.predict.training import Training

    return (settings, Training)


def group_rows(prefix: str, twin: type, docs: Docstrings) -> list[Row]:
    """Every key of one group, nested settings flattened: the one place a group's rows come from."""
    out: list[Row] = []
    for f in dataclasses.fields(twin):
        key = f"{prefix}.{f.name}"
        nested = _dataclass(f.type)
        out.append(row(key, f, twin, docs))
        if nested is not None:
            listed = typing.get_origin(f.type) is list
            out += group_rows(f"{key}[]" if listed else key, nested, docs)
    return out


def row(key: str, f: dataclasses.Field[Any], twin: type | None, docs: Docstrings) -> Row:
    """The row of one schema field."""
    nested = _dataclass(f.type)
    doc = docs.field(origins(twin), f.name) if twin is not None else ""
    if not doc and nested is not None:
        doc = " ".join(docs.paragraph(getattr(nested, "settings", nested))[:1])
    default = "" if nested is not None else default_text(f)
    return Row(key, type_text(f.type), default, doc)


def _dataclass(kind: Any) -> type | None:
    """The dataclass a field holds (or holds a list of), or None."""
    if typing.get_origin(kind) is list:
        kind = typing.get_args(kind)[0]
    return kind if isinstance(kind, type) and dataclasses.is_dataclass(kind) else None


def type_text(kind: Any) -> str:
    """A field's type as a reader writes it: `int`, `list[int]`, `float | None`, `any`."""
    if kind is Any:
        return "any"
    if isinstance(kind, types.UnionType):
        return " | ".join(type_text(arg) for arg in typing.get_args(kind))
    if typing.get_origin(kind) is list:
        return f"list[{type_text(typing.get_args(kind)[0])}]"
    if isinstance(kind, type):
        return "None" if kind is type(None) else kind.__name__
    return str(kind)


def default_text(f: dataclasses.Field[Any]) -> str:
    """A field's default as the command line writes it (`[1, 2]`, `null`, `true`, `hf`), or *required*."""
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return "*required*"
    text = yaml.safe_dump(value, default_flow_style=True, width=1000).strip().removesuffix("...").strip()
    return f"`{text}`" if text not in ("''", "") else '`""`'


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
