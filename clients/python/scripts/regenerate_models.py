"""Regenerate the SDK's wire models from the server's OpenAPI document.

Two steps, both from the repository root:

    .venv/bin/python clients/python/scripts/regenerate_models.py --snapshot  # app.openapi(), then models
    .venv/bin/python clients/python/scripts/regenerate_models.py             # models from the snapshot

``--snapshot`` imports the gateway (``service.main.create_app``) and rewrites ``tests/contract/openapi.json``;
without it only ``clients/python/posenc_client/_models.py`` is regenerated from that file. The contract tests
fail until both are regenerated on purpose after a change to the wire contract.

Needs the ``codegen`` extra of posenc-client (``pip install -e './clients/python[codegen]'``), which pins
datamodel-code-generator so that the output is reproducible.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
SNAPSHOT = REPO_ROOT / "tests" / "contract" / "openapi.json"
MODELS = REPO_ROOT / "clients" / "python" / "posenc_client" / "_models.py"

HEADER = '''"""Wire models of the posenc API, GENERATED from tests/contract/openapi.json: do not edit by hand.

Regenerate (from the repository root) after the server's contract changes:
    .venv/bin/python clients/python/scripts/regenerate_models.py --snapshot
tests/contract/test_sdk_models.py fails while this file and the snapshot disagree.
"""
# ruff: noqa
# mypy: disable-error-code="assignment"
# (the generator gives optional constrained scalars, e.g. rotary_dim, a root model defaulting to None)'''

CODEGEN_OPTIONS = (
    "--input-file-type",
    "openapi",
    "--openapi-scopes",
    "schemas",
    "--output-model-type",
    "pydantic_v2.BaseModel",
    "--target-python-version",
    "3.11",
    "--use-annotated",
    "--use-standard-collections",
    "--use-union-operator",
    "--enum-field-as-literal",
    "all",
    "--extra-fields",
    "allow",
    "--use-schema-description",
    "--use-field-description",
    "--keep-model-order",
    "--strict-nullable",
    "--collapse-root-models",
    "--disable-timestamp",
    "--formatters",
    "builtin",
)
# Formatted afterwards with ruff in isolated mode, so the output does not depend on where it is written.
RUFF_FORMAT = ("format", "--isolated", "--line-length", "120", "--target-version", "py311", "--quiet")


def openapi_document() -> dict[str, object]:
    sys.path.insert(0, str(REPO_ROOT))
    from service.main import create_app

    document: dict[str, object] = create_app().openapi()
    return document


def write_snapshot(document: dict[str, object], path: Path = SNAPSHOT) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")


def generate_models(*, openapi: Path = SNAPSHOT, output: Path = MODELS) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        header_file = Path(scratch) / "header.txt"
        header_file.write_text(HEADER + "\n")
        subprocess.run(
            [
                sys.executable,
                "-m",
                "datamodel_code_generator",
                "--input",
                str(openapi),
                "--output",
                str(output),
                "--custom-file-header-path",
                str(header_file),
                *CODEGEN_OPTIONS,
            ],
            check=True,
        )
    subprocess.run([sys.executable, "-m", "ruff", *RUFF_FORMAT, str(output)], check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--snapshot", action="store_true", help="first rewrite the snapshot from the app")
    parser.add_argument("--openapi", type=Path, default=SNAPSHOT, help="OpenAPI document to generate from")
    parser.add_argument("--output", type=Path, default=MODELS, help="where the generated module goes")
    args = parser.parse_args()
    if args.snapshot:
        write_snapshot(openapi_document(), args.openapi)
    generate_models(openapi=args.openapi, output=args.output)


if __name__ == "__main__":
    main()
