"""Importing the SDK (and building a client) stays light: no torch, numpy, fastapi, celery or posenc."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = (
    "torch",
    "numpy",
    "fastapi",
    "celery",
    "starlette",
    "posenc",
    "service",
    "workers",
    "matplotlib",
    "tqdm",
)


def test_import_loads_neither_torch_nor_fastapi_nor_celery() -> None:
    code = (
        "import json, sys\n"
        "import posenc_client\n"
        "from posenc_client import Client, AsyncClient\n"
        "client = Client(base_url='http://127.0.0.1:9')\n"
        "client.bias, client.rotary, client.jobs, client.methods, client.encodings, client.attention\n"
        "client.close()\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(json.loads(result.stdout))
    assert "posenc_client" in loaded
    assert "httpx" in loaded
    heavy = sorted(name for name in loaded if name.split(".")[0] in HEAVY)
    assert heavy == [], f"importing posenc_client loaded {heavy}"


def test_httpx_is_imported_by_the_transport_module_only() -> None:
    from pathlib import Path

    import posenc_client

    package = Path(posenc_client.__file__).parent
    importers = sorted(
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if any(line.strip().startswith(("import httpx", "from httpx")) for line in path.read_text().splitlines())
    )
    assert importers == ["_transport.py"]
