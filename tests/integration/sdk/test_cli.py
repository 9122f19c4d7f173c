"""The ``posenc-client`` command against live gateways: tables, --json, files, exit codes, stderr."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import safetensors.numpy
from posenc_client.cli import main

from posenc.real_models.presets import PRESETS

pytestmark = pytest.mark.integration
CLI = str(Path(sys.executable).with_name("posenc-client"))


def run_cli(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CLI, "--base-url", url, "--max-retries", "0", *args], capture_output=True, text=True, timeout=300
    )


def test_methods_table_and_json(compute_gateway: Any) -> None:
    table = run_cli("methods", "--kind", "bias", url=compute_gateway.url)
    assert table.returncode == 0, table.stderr
    header, *rows = table.stdout.splitlines()
    assert header.split()[:3] == ["NAME", "KIND", "FAMILY"]
    assert "NOTES" in header.split()  # per-layer, needs-x, causal-only, 2d/3d
    assert any(row.split()[:2] == ["alibi", "bias"] for row in rows)

    listed = run_cli("methods", "--json", url=compute_gateway.url)
    assert listed.returncode == 0, listed.stderr
    names = {item["name"] for item in json.loads(listed.stdout)}
    assert {"alibi", "rope", "sinusoidal"} <= names


def test_bias_to_files(compute_gateway: Any, tmp_path: Path) -> None:
    npy = run_cli(
        "bias", "alibi", "--heads", "4", "--length", "8", "--key-length", "10", "--bidirectional",
        "-o", str(tmp_path / "b.npy"), url=compute_gateway.url,
    )  # fmt: skip
    assert npy.returncode == 0, npy.stderr
    assert "wrote" in npy.stderr
    assert np.load(tmp_path / "b.npy").shape == (4, 8, 10)

    st = run_cli(
        "bias", "alibi", "--heads", "2", "--length", "6", "--form", "toeplitz", "--params", '{"max_bias": 4}',
        "-o", str(tmp_path / "b.safetensors"), url=compute_gateway.url,
    )  # fmt: skip
    assert st.returncode == 0, st.stderr
    assert safetensors.numpy.load_file(tmp_path / "b.safetensors")["bias"].shape == (2, 11)


def test_errors_exit_non_zero_with_the_problem_on_stderr(compute_gateway: Any, tmp_path: Path) -> None:
    target = str(tmp_path / "x.npy")
    missing = run_cli("bias", "no_such_method", "--heads", "1", "--length", "2", "-o", target, url=compute_gateway.url)
    assert missing.returncode == 1
    assert "404" in missing.stderr
    assert "no_such_method" in missing.stderr
    assert not (tmp_path / "x.npy").exists()

    invalid = run_cli("bias", "alibi", "--heads", "0", "--length", "2", "-o", str(tmp_path / "x.npy"),
                      url=compute_gateway.url)  # fmt: skip
    assert invalid.returncode == 1
    assert "num_heads" in invalid.stderr

    wrong_suffix = run_cli("bias", "alibi", "--heads", "1", "--length", "2", "-o", str(tmp_path / "x.txt"),
                           url=compute_gateway.url)  # fmt: skip
    assert wrong_suffix.returncode == 2

    unreachable = run_cli("methods", url="http://127.0.0.1:9")
    assert unreachable.returncode == 3
    assert "could not reach" in unreachable.stderr


def test_jobs_commands(job_stack: str, corpus: Path, tmp_path: Path) -> None:
    spec = {
        "methods": [{"method": "rope"}, {"method": "alibi"}],
        "data": {"corpus": str(corpus)},
        "model": {"layers": 1, "dim": 32, "heads": 2},
        "train": {"length": 16, "steps": 10, "batch_size": 4, "warmup_steps": 1},
        "eval": {"lengths": [16, 32], "max_tokens": 128},
        "device": "cpu",
    }
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(spec))

    submitted = run_cli("jobs", "submit", str(spec_file), "--kind", "benchmark", "--wait", "--json",
                        "--no-progress", "--timeout", "300", url=job_stack)  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    job = json.loads(submitted.stdout)
    assert job["status"] == "succeeded"

    shown = run_cli("jobs", "get", job["id"], url=job_stack)
    assert shown.returncode == 0, shown.stderr
    assert "succeeded" in shown.stdout
    assert "METRIC" in shown.stdout  # the result table

    listing = run_cli("jobs", "list", "--kind", "benchmark", url=job_stack)
    assert job["id"] in listing.stdout

    waited = run_cli("jobs", "wait", job["id"], "--json", url=job_stack)
    assert json.loads(waited.stdout)["id"] == job["id"]

    events = run_cli("jobs", "events", job["id"], url=job_stack)
    assert events.returncode == 0, events.stderr
    assert "queued" in events.stdout.splitlines()[0]
    as_json = json.loads(run_cli("jobs", "events", job["id"], "--json", url=job_stack).stdout)
    assert any(event["event"].startswith("succeeded") for event in as_json)

    artifact = run_cli("jobs", "artifact", job["id"], "table.csv", "-o", str(tmp_path / "t.csv"), url=job_stack)
    assert artifact.returncode == 0, artifact.stderr
    assert (tmp_path / "t.csv").read_text().startswith("method")
    into = tmp_path / "downloads"
    into.mkdir()
    in_directory = run_cli("jobs", "artifact", job["id"], "table.csv", "-o", str(into), url=job_stack)
    assert in_directory.returncode == 0, in_directory.stderr
    assert (into / "table.csv").read_text() == (tmp_path / "t.csv").read_text()

    unknown = run_cli("jobs", "cancel", "no-such-job", url=job_stack)
    assert unknown.returncode == 1
    assert "404" in unknown.stderr

    too_short = corpus.parent / "too-short.txt"  # accepted at submission, fails on the worker
    too_short.write_text("abc", encoding="utf-8")
    failing = dict(spec, data={"corpus": str(too_short)})
    spec_file.write_text(json.dumps(failing))
    failed = run_cli("jobs", "submit", str(spec_file), "--kind", "benchmark", "--wait", "--no-progress",
                     url=job_stack)  # fmt: skip
    assert failed.returncode == 4
    assert "failed" in failed.stderr


# ----------------------------------------------------------------------------- files that are not what is expected
# Port 9 (discard) has no listener here: a command that sent its request would exit 3, not 2.
UNREACHABLE = "http://127.0.0.1:9"
# name: (the content, None for a directory, "missing" for no file at all; what the message says about it)
BAD_FILES: dict[str, tuple[bytes | str | None, str]] = {
    "binary": (bytes(range(256)), "not UTF-8 text (byte 0x80 at offset 128)"),
    "empty": (b"", "is empty"),
    "directory": (None, "is a directory"),
    "missing": ("missing", "cannot read it (No such file or directory)"),
    "invalid-utf8": (b'{"model_type": "\xff"}', "not UTF-8 text (byte 0xff at offset 16)"),
    "list": (b"[1, 2]", "not a JSON object, got a list"),
    "number": (b"3", "not a JSON object, got a number"),
    "null": (b"null", "not a JSON object, got null"),
    "nan": (b'{"rope_theta": NaN}', "not valid JSON (NaN is not a JSON value)"),
    "truncated": (b'{"model_type": ', "not valid JSON (Expecting value at line 1 column 16)"),
}
# the commands that read a JSON object from a file: (the arguments before and after the path, what the file is)
FILE_COMMANDS: dict[str, tuple[list[str], list[str], str]] = {
    "rope doctor": (["rope", "doctor"], [], "a model's config.json"),
    "jobs submit": (["jobs", "submit"], ["--kind", "train"], "a job spec"),
}


def bad_file(tmp_path: Path, name: str) -> Path:
    content, _ = BAD_FILES[name]
    path = tmp_path / f"{name}.json"
    if content is None:
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    return path


def one_line(stderr: str) -> str:
    """The only line of ``stderr``: the CLI's own message, not a traceback."""
    assert "Traceback" not in stderr, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("posenc-client: "), stderr
    assert lines[0].removeprefix("posenc-client: ").strip(), stderr
    return lines[0]


@pytest.mark.parametrize("command", list(FILE_COMMANDS))
@pytest.mark.parametrize("name", list(BAD_FILES))
def test_a_file_that_is_not_a_json_object_is_one_line_and_exit_2(
    compute_gateway: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, name: str
) -> None:
    before, after, what = FILE_COMMANDS[command]
    path = bad_file(tmp_path, name)
    status = main(["--base-url", compute_gateway.url, "--max-retries", "0", *before, str(path), *after])
    captured = capsys.readouterr()
    assert status == 2
    assert one_line(captured.err) == f"posenc-client: {path}: {BAD_FILES[name][1]}; expected {what}"
    assert captured.out == ""


@pytest.mark.parametrize("command", list(FILE_COMMANDS))
def test_a_binary_file_is_one_line_in_a_real_process(compute_gateway: Any, tmp_path: Path, command: str) -> None:
    before, after, what = FILE_COMMANDS[command]
    path = bad_file(tmp_path, "binary")
    ran = run_cli(*before, str(path), *after, url=compute_gateway.url)
    assert ran.returncode == 2
    assert one_line(ran.stderr) == f"posenc-client: {path}: {BAD_FILES['binary'][1]}; expected {what}"


def test_a_config_with_a_byte_order_mark_is_read(compute_gateway: Any, tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(PRESETS["llama-3.1-8b"]).encode())
    ran = run_cli("rope", "doctor", str(path), "--json", url=compute_gateway.url)
    assert ran.returncode == 0, ran.stderr
    assert {layer["method"] for layer in json.loads(ran.stdout)["layers"]} == {"rope_llama3"}


BIAS = ["bias", "alibi", "--heads", "2", "--length", "4"]


def test_bias_output_is_checked_before_the_request(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "folder.npy").mkdir()
    (tmp_path / "a-file").write_bytes(bytes(range(256)))
    cases = {
        str(tmp_path): f"-o {tmp_path}: is a directory; expected a file path",
        str(tmp_path / "folder.npy"): f"-o {tmp_path / 'folder.npy'}: is a directory; expected a file path",
        str(tmp_path / "no-such" / "b.npy"): f"-o {tmp_path / 'no-such' / 'b.npy'}: directory "
        f"{tmp_path / 'no-such'} does not exist",
        str(tmp_path / "a-file" / "b.npy"): f"-o {tmp_path / 'a-file' / 'b.npy'}: {tmp_path / 'a-file'} is not a "
        "directory",
        str(tmp_path / "b.txt"): "-o must end in .safetensors or .npy, not 'b.txt'",
    }
    for output, message in cases.items():
        assert main(["--base-url", UNREACHABLE, "--max-retries", "0", *BIAS, "-o", output]) == 2, output
        assert one_line(capsys.readouterr().err) == f"posenc-client: {message}"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["a-file", "folder.npy"]

    ran = run_cli(*BIAS, "-o", str(tmp_path), url=UNREACHABLE)
    assert ran.returncode == 2
    assert one_line(ran.stderr) == f"posenc-client: -o {tmp_path}: is a directory; expected a file path"


def test_bias_replaces_an_existing_binary_or_empty_file(compute_gateway: Any, tmp_path: Path) -> None:
    for name, content in [("binary.npy", bytes(range(256))), ("empty.npy", b"")]:
        (tmp_path / name).write_bytes(content)
        ran = run_cli(*BIAS, "-o", str(tmp_path / name), url=compute_gateway.url)
        assert ran.returncode == 0, ran.stderr
        assert np.load(tmp_path / name).shape == (2, 4, 4)


def test_artifact_output_is_checked_before_the_request(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "t.csv").mkdir()  # -o DIR puts the artifact in DIR, where a directory of its name is in the way
    (tmp_path / "a-file").write_bytes(b"")
    cases = {
        str(tmp_path): f"-o {tmp_path}: {tmp_path / 't.csv'} is a directory",
        str(tmp_path / "no-such" / "t.csv"): f"-o {tmp_path / 'no-such' / 't.csv'}: directory "
        f"{tmp_path / 'no-such'} does not exist",
        str(tmp_path / "a-file" / "t.csv"): f"-o {tmp_path / 'a-file' / 't.csv'}: {tmp_path / 'a-file'} is not a "
        "directory",
    }
    for output, message in cases.items():
        argv = ["--base-url", UNREACHABLE, "--max-retries", "0", "jobs", "artifact", "some-job", "t.csv", "-o", output]
        assert main(argv) == 2, output
        assert one_line(capsys.readouterr().err) == f"posenc-client: {message}"

    ran = run_cli("jobs", "artifact", "some-job", "t.csv", "-o", str(tmp_path / "no-such" / "t.csv"), url=UNREACHABLE)
    assert ran.returncode == 2
    assert "does not exist" in one_line(ran.stderr)
    # A path that can be written is requested: the unreachable server is then exit 3.
    reached = run_cli("jobs", "artifact", "some-job", "t.csv", "-o", str(tmp_path / "new.csv"), url=UNREACHABLE)
    assert reached.returncode == 3, reached.stderr


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ("[1, 2]", "not a JSON object, got a list"),
        ('"max_bias"', "not a JSON object, got a string"),
        ("4", "not a JSON object, got a number"),
        ('{"max_bias": NaN}', "not valid JSON (NaN is not a JSON value)"),
        ("{max_bias: 4}", "not valid JSON (Expecting property name enclosed in double quotes at line 1 column 2)"),
        ("", "is empty"),
    ],
)
def test_bias_params_must_be_a_json_object(tmp_path: Path, params: str, message: str) -> None:
    ran = run_cli(*BIAS, "--params", params, "-o", str(tmp_path / "b.npy"), url=UNREACHABLE)
    assert ran.returncode == 2
    assert "Traceback" not in ran.stderr
    assert ran.stderr.splitlines()[-1] == f"posenc-client bias: error: argument --params: {message}"


def test_rope_serve_check_for_a_method_and_a_preset_s_layer(compute_gateway: Any) -> None:
    """The serving simulator from the command line: every correct schedule exact, the known-bad ones named with
    their first wrong position; a preset's NoPE layer (SmolLM3's every 4th) is accepted."""
    table = run_cli("rope", "serve-check", "--method", "rope", "--rotary-dim", "16", "--length", "32",
                    url=compute_gateway.url)  # fmt: skip
    assert table.returncode == 0, table.stderr
    header, *rows = table.stdout.splitlines()
    assert header.split()[:3] == ["VARIANT", "SCHEDULE", "VERDICT"]
    correct = [row.split() for row in rows if row.split()[1:2] == ["correct"]]
    assert correct
    assert all(cells[2] == "exact" for cells in correct)
    report = json.loads(run_cli("rope", "serve-check", "--method", "rope", "--rotary-dim", "16", "--length", "32",
                                "--json", url=compute_gateway.url).stdout)  # fmt: skip
    by_label = {variant["label"]: variant for variant in report["variants"]}
    assert all(v["max_error"] == 0.0 for v in report["variants"] if v["schedule"] == "correct")
    chunk = report["schedules"]["chunk_sizes"][0]
    assert by_label[f"chunk_local_positions[chunk={chunk}]"]["first_wrong"]["query"] == chunk
    assert f"chunk_local_positions[chunk={chunk}]" in table.stdout
    nope = run_cli("rope", "serve-check", "--preset", "smollm3-3b", "--layer", "3", "--json", url=compute_gateway.url)
    assert nope.returncode == 0, nope.stderr
    assert json.loads(nope.stdout)["setup"]["method"] is None
    usage = run_cli("rope", "serve-check", "--preset", "smollm3-3b", url=compute_gateway.url)
    assert usage.returncode == 2
    assert "--layer" in usage.stderr


def test_rope_serve_check_runs_transformers_requests_and_says_where_transformers_differs(compute_gateway: Any) -> None:
    """--requests: dynamic NTK served as one transformers model serves a 40-token request and then a 20-token one;
    its grown frequencies stay for the second, so transformers differs from recomputing it, and the CLI says so."""
    params = '{"factor": 2, "original_max_position_embeddings": 16}'
    args = ["rope", "serve-check", "--method", "rope_dynamic_ntk", "--params", params, "--rotary-dim", "16",
            "--length", "40", "--requests", "40", "20"]  # fmt: skip
    report = json.loads(run_cli(*args, "--json", url=compute_gateway.url).stdout)
    assert report["schedules"]["requests"] == [40, 20]
    [served] = [v for v in report["variants"] if v["label"] == "transformers_requests"]
    assert served["sequence_errors"][0] == 0.0 < served["sequence_errors"][1]  # the second request, not the first
    table = run_cli(*args, url=compute_gateway.url)
    assert table.returncode == 0, table.stderr
    [line] = [line for line in table.stdout.splitlines() if line.startswith("transformers differs")]
    assert "transformers_requests" in line
