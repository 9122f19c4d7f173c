"""What a user reads in a terminal is plain text: ``posenc --help``, ``posenc-client --help`` and every
subcommand's help carry no reStructuredText or Markdown markup, and ``help(Client)`` lists each resource with its
one-line description (not a bare descriptor object)."""

from __future__ import annotations

import argparse
import importlib
import inspect
import pydoc
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import posenc_client
import pytest
from posenc_client import cli as client_cli

from posenc import cli as server_cli

# ``literal``, :role:`target`, `interpreted text`, **strong**, a Markdown link: none belongs in a terminal.
MARKUP = re.compile(r"``|:(?:class|meth|func|attr|mod|data|exc|obj|ref|doc):`|`[^`\s][^`]*`|\*\*\w[^*]*\*\*|\]\(http")
CLIENT_DIR = Path(__file__).resolve().parents[2] / "clients" / "python"
RESOURCES = ("methods", "tasks", "models", "rope", "bias", "rotary", "encodings", "attention", "jobs")


def all_help(parser: argparse.ArgumentParser, path: str) -> Iterator[tuple[str, str]]:
    """(command path, its --help text) for the parser and every subcommand under it, depth first."""
    yield path, parser.format_help()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from all_help(child, f"{path} {name}")


HELP_TEXTS = [
    *all_help(server_cli._parser(), "posenc"),
    *all_help(client_cli.build_parser(), "posenc-client"),
]


def test_the_scan_finds_markup() -> None:
    for text in ("the ``posenc`` command", "see :class:`Client`", "a `literal`", "**bold**", "[docs](http://x)"):
        assert MARKUP.search(text), text
    for text in ("posenc-client jobs submit SPEC.json", "a (H, N, N) bias", "--params '{\"a\": 1}'", "f(**options)"):
        assert not MARKUP.search(text), text


def test_every_command_has_help() -> None:
    paths = [path for path, _ in HELP_TEXTS]
    assert {"posenc", "posenc serve", "posenc worker", "posenc-client", "posenc-client rope doctor"} <= set(paths)
    assert "posenc-client jobs submit" in paths


@pytest.mark.parametrize(("path", "text"), HELP_TEXTS, ids=[path for path, _ in HELP_TEXTS])
def test_help_is_plain_text(path: str, text: str) -> None:
    found = [line for line in text.splitlines() if MARKUP.search(line)]
    assert not found, f"{path} --help shows markup: {found}"


def test_posenc_help_says_what_the_command_does() -> None:
    text = server_cli._parser().format_help()
    assert "serve" in text
    assert "worker" in text
    description = text.split("\n\n")[1]
    assert len(description.split()) >= 8, description  # a sentence, not a bare title


@pytest.mark.parametrize("client_class", [posenc_client.Client, posenc_client.AsyncClient])
def test_help_of_a_client_describes_each_resource(client_class: type) -> None:
    rendered = pydoc.render_doc(client_class, renderer=pydoc.plaintext)
    assert "cached_property object" not in rendered
    for name in RESOURCES:
        doc = inspect.getdoc(getattr(client_class, name))
        assert doc is not None, f"{client_class.__name__}.{name} has no description"
        assert len(doc.split()) >= 4, doc
        first_line = doc.splitlines()[0]
        assert re.search(rf"^ \|  {name}\n \|      {re.escape(first_line)}", rendered, flags=re.MULTILINE), name
    found = [line for line in rendered.splitlines() if MARKUP.search(line)]
    assert not found, f"help({client_class.__name__}) shows markup: {found}"


def test_a_resource_is_built_once_per_client() -> None:
    with posenc_client.Client(base_url="http://127.0.0.1:9") as client:
        assert client.jobs is client.jobs
        assert type(client.methods).__name__ == "Methods"
        assert client.bias._client is client


def test_the_client_package_builds_without_a_warning_and_carries_its_readme(tmp_path: Path) -> None:
    """What pip prints when it installs the SDK from the checkout: no warning (a missing README, a deprecated
    field), and the package's long description is clients/python/README.md."""
    source = tmp_path / "src"
    shutil.copytree(CLIENT_DIR, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", str(source),
         "-w", str(tmp_path / "wheel")],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    output = built.stdout + built.stderr
    assert built.returncode == 0, output
    assert not [line for line in output.splitlines() if "warning" in line.lower()], output
    (wheel,) = (tmp_path / "wheel").glob("posenc_client-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [entry for entry in archive.namelist() if entry.endswith(".dist-info/METADATA")]
        metadata = archive.read(name).decode()
    readme = (CLIENT_DIR / "README.md").read_text()
    assert "Description-Content-Type: text/markdown" in metadata
    assert readme.splitlines()[2] in metadata  # the README's first paragraph is the long description's


def resource_classes() -> list[type]:
    """Every class the resource modules define (Methods, AsyncMethods, ...)."""
    found = []
    for name in RESOURCES:
        module = importlib.import_module(f"posenc_client.resources.{name}")
        found += [
            value for value in vars(module).values() if inspect.isclass(value) and value.__module__ == module.__name__
        ]
    return found


@pytest.mark.parametrize("subject", resource_classes(), ids=lambda subject: subject.__name__)
def test_help_of_each_resource_is_plain_text(subject: type) -> None:
    """The resources' own docstrings (help of the package also shows pydantic's, which are not ours)."""
    rendered = pydoc.render_doc(subject, renderer=pydoc.plaintext)
    found = [line for line in rendered.splitlines() if MARKUP.search(line)]
    assert not found, f"help({subject}) shows markup: {found}"
