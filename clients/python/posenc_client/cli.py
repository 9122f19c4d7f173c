"""posenc-client: everyday calls from a shell. Tables for people, --json for scripts.

Exit status: 0 success; 1 the server answered with an error (its problem detail on stderr); 2 bad usage,
including a file that is not what the command expects and an -o path it cannot write (one line on stderr);
3 the server could not be reached; 4 a waited-on job failed, was cancelled or is still running at --timeout.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from posenc_client._client import Client
from posenc_client._constants import DEFAULT_MAX_RETRIES
from posenc_client._exceptions import APIConnectionError, APIStatusError, JobError
from posenc_client._gguf import is_gguf, read_gguf
from posenc_client._models import Job, JobSummary, MethodInfo
from posenc_client._version import __version__

EXIT_API_ERROR = 1
EXIT_USAGE = 2
EXIT_CONNECTION = 3
EXIT_JOB = 4

_JSON_TYPES = {list: "a list", str: "a string", int: "a number", float: "a number", bool: "a boolean"}


class UsageError(Exception):
    """What the command was given is not what it expects: one line on stderr, exit status 2."""


# ------------------------------------------------------------------------------------------- inputs, outputs
def _json_object(text: str) -> dict[str, Any]:
    """text as a JSON object (strict JSON: no NaN or Infinity); else ValueError saying what is wrong."""
    if not text.strip():
        raise ValueError("is empty")
    try:
        value = json.loads(text, parse_constant=_not_json)
    except RecursionError:
        raise ValueError("not valid JSON (nested too deeply)") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"not valid JSON ({error.msg} at line {error.lineno} column {error.colno})") from None
    except ValueError as error:  # NaN, Infinity, an integer of too many digits
        raise ValueError(f"not valid JSON ({error})") from None
    if not isinstance(value, dict):
        raise ValueError(f"not a JSON object, got {_JSON_TYPES.get(type(value), 'null')}")
    return value


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not a JSON value")


def _json_object_argument(text: str) -> dict[str, Any]:
    """argparse type= for an inline JSON object (--params)."""
    try:
        return _json_object(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _read_json_object(path: Path, what: str) -> dict[str, Any]:
    """The JSON object in the file at path (which should hold what the caller says), or a UsageError naming the
    file."""
    try:
        return _json_object(path.read_text(encoding="utf-8-sig"))
    except IsADirectoryError:
        problem = "is a directory"
    except UnicodeDecodeError as error:
        problem = f"not UTF-8 text (byte 0x{error.object[error.start]:02x} at offset {error.start})"
    except OSError as error:
        problem = f"cannot read it ({error.strerror or error})"
    except ValueError as error:
        problem = str(error)
    raise UsageError(f"{path}: {problem}; expected {what}")


def _output_file(path: Path, artifact: str | None = None) -> Path:
    """The file -o path writes (path/artifact when an artifact goes into a directory), checked before
    anything is requested: not a directory, in a directory that exists and that we may write in."""
    target = path / artifact if artifact is not None and path.is_dir() else path
    folder = target.parent
    if target.is_dir():
        problem = "is a directory; expected a file path" if target == path else f"{target} is a directory"
    elif not folder.is_dir():
        problem = f"{folder} is not a directory" if folder.exists() else f"directory {folder} does not exist"
    elif not os.access(folder, os.W_OK | os.X_OK):
        problem = f"cannot write in directory {folder}"
    else:
        return target
    raise UsageError(f"-o {path}: {problem}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="posenc-client",
        description="Talk to a posenc gateway (POSENC_BASE_URL, POSENC_API_KEY).",
        epilog=f"exit status: 0 success; {EXIT_API_ERROR} the server answered with an error (its detail on stderr); "
        f"{EXIT_USAGE} bad usage or a file that is not what the command expects (one line on stderr); "
        f"{EXIT_CONNECTION} the server could not be reached; {EXIT_JOB} a waited-on job failed, was cancelled or "
        "outlived --timeout",
    )
    parser.add_argument("--version", action="version", version=f"posenc-client {__version__}")
    parser.add_argument("--base-url", help="gateway URL (default $POSENC_BASE_URL or http://127.0.0.1:8000)")
    parser.add_argument("--api-key", help="X-API-Key (default $POSENC_API_KEY)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per request (default 600)")
    parser.add_argument("--max-retries", type=int, default=DEFAULT_MAX_RETRIES, help="retries (default 2)")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    methods = commands.add_parser("methods", help="list the registered methods")
    methods.add_argument("--kind", help="absolute, bias, rotary, score_mod or attention")
    methods.add_argument("--json", action="store_true", help="print JSON")
    methods.set_defaults(run=_methods)

    bias = commands.add_parser("bias", help="compute a bias and write it to a .safetensors or .npy file")
    bias.add_argument("method")
    bias.add_argument("--heads", type=int, required=True, help="number of heads H")
    layout = bias.add_mutually_exclusive_group(required=True)
    layout.add_argument("--length", type=int, help="query length Nq (1D methods)")
    layout.add_argument(
        "--grid",
        type=int,
        nargs="+",
        metavar="SIZE",
        help="2D/3D methods: ROWS COLS or FRAMES ROWS COLS; the bias is (H, P + prod(grid), P + prod(grid))",
    )
    bias.add_argument(
        "--prefix-tokens", type=int, default=0, help="with --grid: tokens before the grid's (CLS, registers)"
    )
    bias.add_argument("--key-length", type=int, help="key length Nk (default Nq)")
    bias.add_argument(
        "--query-offset", type=int, help="position of the first query (default Nk - Nq when Nk > Nq, else 0)"
    )
    bias.add_argument("--form", choices=["dense", "toeplitz"], default="dense")
    bias.add_argument("--dtype", choices=["float32", "float64", "bfloat16", "float16"], default="float32")
    bias.add_argument(
        "--bidirectional", action="store_true", help="the non-causal form (the default for --grid, causal for 1D)"
    )
    bias.add_argument("--params", type=_json_object_argument, default=None, help="method params as a JSON object")
    bias.add_argument("-o", "--output", type=Path, required=True, help="FILE.safetensors or FILE.npy")
    bias.set_defaults(run=_bias)

    rope = commands.add_parser("rope", help="real models' rotary setups")
    rope_commands = rope.add_subparsers(dest="rope_command", required=True, metavar="ROPE_COMMAND")
    doctor = rope_commands.add_parser(
        "doctor",
        help="resolve a model's config.json (or a GGUF file's metadata) into per-layer rotations and print its "
        "warnings",
    )
    source = doctor.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "config", nargs="?", type=Path, help="the model's config.json, or a .gguf file (its header is read here)"
    )
    source.add_argument("--preset", help="a preset's name (posenc-client rope presets)")
    against = doctor.add_mutually_exclusive_group()
    against.add_argument(
        "--against",
        type=Path,
        metavar="CONFIG.json",
        help="with a .gguf: the Hugging Face config.json it was converted from; every rope field the conversion "
        "dropped, renamed or changed is a warning",
    )
    against.add_argument("--against-preset", metavar="NAME", help="with a .gguf: compare with a preset instead")
    doctor.add_argument("--json", action="store_true", help="print the resolution as JSON")
    doctor.set_defaults(run=_rope_doctor)
    serve = rope_commands.add_parser(
        "serve-check",
        help="compare serving schedules (chunked prefill, decode, a left-padded batch, packed documents, a sink + "
        "window cache) with full recomputation, for a method or a config's layer",
    )
    layer_source = serve.add_mutually_exclusive_group(required=True)
    layer_source.add_argument("--method", help="a registered rotary or bias method (posenc-client methods)")
    layer_source.add_argument("--config", type=Path, help="a model's config.json (with --layer)")
    layer_source.add_argument("--preset", help="a preset's name (with --layer)")
    serve.add_argument("--layer", type=int, help="with --config or --preset: the layer's index")
    serve.add_argument("--params", type=_json_object_argument, default=None, help="method params as a JSON object")
    serve.add_argument("--rotary-dim", type=int, default=None, help="q and k features per head (default 128)")
    serve.add_argument("--pairing", choices=["half", "interleaved"], default=None, help="default: the method's")
    serve.add_argument("--heads", type=int, default=None)
    serve.add_argument("--length", type=int, default=None, help="tokens of the prefill / decode sequence")
    serve.add_argument("--chunk-sizes", type=int, nargs="+", default=None, metavar="C")
    serve.add_argument("--prefill", type=int, default=None)
    serve.add_argument("--batch-lengths", type=int, nargs="+", default=None, metavar="N")
    serve.add_argument("--documents", type=int, nargs="+", default=None, metavar="N")
    serve.add_argument("--sinks", type=int, default=None)
    serve.add_argument("--window", type=int, default=None)
    serve.add_argument(
        "--requests",
        type=int,
        nargs="+",
        default=None,
        metavar="N",
        help="lengths of the requests one transformers model serves one after another (its dynamic rotary state "
        "carried between them)",
    )
    serve.add_argument("--json", action="store_true", help="print the whole report as JSON")
    serve.set_defaults(run=_rope_serve_check)
    presets = rope_commands.add_parser("presets", help="list the model presets")
    presets.add_argument("--json", action="store_true")
    presets.set_defaults(run=_rope_presets)

    jobs = commands.add_parser("jobs", help="submit, inspect, wait for and cancel jobs")
    job_commands = jobs.add_subparsers(dest="jobs_command", required=True, metavar="JOBS_COMMAND")

    submit = job_commands.add_parser("submit", help="queue a job from a JSON spec file")
    submit.add_argument(
        "spec",
        type=Path,
        help="SPEC.json: the job spec (methods, data, model, train, eval, ...; compute: route, request)",
    )
    submit.add_argument("--kind", required=True, choices=["train", "extrapolate", "benchmark", "compute"])
    submit.add_argument("--idempotency-key", help="reuse to make a repeated submit return the same job")
    _wait_options(submit)
    submit.add_argument("--wait", action="store_true", help="wait until the job ends")
    submit.set_defaults(run=_jobs_submit)

    get = job_commands.add_parser("get", help="show one job")
    get.add_argument("job_id")
    get.add_argument("--json", action="store_true")
    get.set_defaults(run=_jobs_get)

    listing = job_commands.add_parser("list", help="list recent jobs")
    listing.add_argument("--status", choices=["queued", "running", "succeeded", "failed", "cancelled", "expired"])
    listing.add_argument("--kind", choices=["train", "extrapolate", "benchmark", "compute"])
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(run=_jobs_list)

    cancel = job_commands.add_parser("cancel", help="cancel a job")
    cancel.add_argument("job_id")
    cancel.add_argument("--json", action="store_true")
    cancel.set_defaults(run=_jobs_cancel)

    events = job_commands.add_parser("events", help="what happened to a job, one line per event")
    events.add_argument("job_id")
    events.add_argument("--json", action="store_true")
    events.set_defaults(run=_jobs_events)

    wait = job_commands.add_parser("wait", help="wait until a job ends")
    wait.add_argument("job_id")
    _wait_options(wait)
    wait.set_defaults(run=_jobs_wait)

    artifact = job_commands.add_parser("artifact", help="download one artifact of a job")
    artifact.add_argument("job_id")
    artifact.add_argument("name")
    artifact.add_argument("-o", "--output", type=Path, required=True, help="file (or directory) to write")
    artifact.set_defaults(run=_jobs_artifact)
    return parser


def _wait_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--timeout", dest="wait_timeout", type=float, help="give up waiting after S seconds")
    parser.add_argument("--poll-interval", type=float, default=1.0, help="seconds between polls (default 1)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--json", action="store_true")


# ------------------------------------------------------------------------------------------------ commands
def _methods(client: Client, args: argparse.Namespace) -> int:
    methods = client.methods.list(kind=args.kind)
    if args.json:
        _print_json([method.model_dump(mode="json") for method in methods])
    else:
        _print_table(
            ["name", "kind", "family", "learned", "notes", "paper"],
            [_method_row(method) for method in methods],
        )
    return 0


def _method_row(method: MethodInfo) -> list[str]:
    return [
        method.name,
        str(method.kind),
        method.family,
        "yes" if method.learned else "",
        _method_notes(method),
        _clip(method.paper, 60),
    ]


def _method_notes(method: MethodInfo) -> str:
    """per-layer, needs x, causal-only, 2d/3d/graph: what a caller must know beyond the kind, compactly."""
    notes = ["per-layer"] if method.per_layer else []
    notes += [f"needs-{need}" for need in method.needs or []]
    if method.causal_only:
        notes.append("causal-only")
    if method.axes != 1:
        notes.append("graph" if method.axes == 0 else f"{method.axes}d")
    return ",".join(notes)


def _bias(client: Client, args: argparse.Namespace) -> int:
    output = _output_file(args.output)
    if output.suffix.lower() not in (".safetensors", ".npy"):
        raise UsageError(f"-o must end in .safetensors or .npy, not {output.name!r}")
    path = client.bias.save(
        args.method,
        output,
        num_heads=args.heads,
        query_length=args.length,
        grid=args.grid,
        prefix_tokens=args.prefix_tokens,
        key_length=args.key_length,
        query_offset=args.query_offset,
        causal=False if args.bidirectional else None,  # None: the server's default, causal for 1D only
        dtype=args.dtype,
        form=args.form,
        params=args.params,
    )
    print(f"wrote {path} ({path.stat().st_size} bytes)", file=sys.stderr)
    return 0


def _rope_doctor(client: Client, args: argparse.Namespace) -> int:
    if args.config is not None and is_gguf(args.config):
        resolved = _gguf_doctor(client, args)
    else:
        if args.against is not None or args.against_preset is not None:
            raise UsageError("--against and --against-preset compare a .gguf file; give one as the model")
        config = None if args.config is None else _read_json_object(args.config, "a model's config.json")
        resolved = client.models.resolve(config, preset=args.preset)
    if args.json:
        _print_json(resolved.model_dump(mode="json"))
        return 0
    print(f"model_type: {resolved.model_type}  layers: {len(resolved.layers)}")
    _print_table(
        ["layers", "type", "method", "params", "rotated", "pairing", "attn scale", "softmax scale", "window"],
        [_layer_row(first, last, layer) for first, last, layer in _runs(resolved.layers)],
    )
    for warning in resolved.warnings:
        where = f" (layers {_ranges(warning.layers)})" if warning.layers else ""
        print(f"warning {warning.code}{where}: {warning.message}")
        print(f"  evidence: {json.dumps(warning.evidence, default=str)}")
    if not resolved.warnings:
        print("no warnings")
    for note in resolved.engine_notes or []:
        where = f" (layers {_ranges(note.layers)})" if note.layers else ""
        print(f"engine note {note.code}{where}: Hugging Face: {note.huggingface}")
        print(f"  elsewhere: {note.elsewhere}")
        print(f"  sources: {' '.join(note.sources)}")
    return 0


def _gguf_doctor(client: Client, args: argparse.Namespace) -> Any:
    """The GGUF's layers (its header read here), compared with --against or --against-preset when given."""
    try:
        header = read_gguf(args.config)
    except ImportError as error:
        raise UsageError(str(error)) from None
    except IsADirectoryError:
        raise UsageError(f"{args.config}: is a directory; expected a GGUF file") from None
    except OSError as error:
        raise UsageError(f"{args.config}: cannot read it ({error.strerror or error}); expected a GGUF file") from None
    except ValueError as error:  # GgufReadError
        raise UsageError(f"{args.config}: {error}; expected a GGUF file") from None
    against = None if args.against is None else _read_json_object(args.against, "a model's config.json")
    return client.models.gguf(header, against=against, against_preset=args.against_preset)


def _layer_key(layer: Any) -> str:
    return json.dumps(layer.model_dump(mode="json", exclude={"layer"}), sort_keys=True, default=str)


def _runs(layers: Sequence[Any]) -> list[tuple[int, int, Any]]:
    """Consecutive layers with the same setup as (first, last, layer), so a 61-layer model prints few rows."""
    runs: list[tuple[int, int, Any]] = []
    for layer in layers:
        if runs and _layer_key(runs[-1][2]) == _layer_key(layer) and runs[-1][1] == layer.layer - 1:
            runs[-1] = (runs[-1][0], layer.layer, runs[-1][2])
        else:
            runs.append((layer.layer, layer.layer, layer))
    return runs


def _ranges(indices: Sequence[int]) -> str:
    spans: list[list[int]] = []
    for index in indices:
        if spans and spans[-1][1] == index - 1:
            spans[-1][1] = index
        else:
            spans.append([index, index])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def _layer_row(first: int, last: int, layer: Any) -> list[str]:
    start, stop = layer.rotary_slice
    window = layer.window or layer.chunk
    return [
        str(first) if first == last else f"{first}-{last}",
        str(layer.layer_type),
        layer.method or "NoPE",
        _clip(json.dumps(layer.params, default=str), 60) if layer.method else "",
        f"[{start}:{stop}] of {layer.head_dim}" if layer.method else "",
        str(layer.pairing) if layer.method else "",
        f"{layer.attention_scale:.6g}",
        f"{layer.softmax_scale:.6g}",
        "" if window is None else ("chunk " if layer.chunk else "") + str(window),
    ]


def _rope_serve_check(client: Client, args: argparse.Namespace) -> int:
    if args.method is not None:
        if args.layer is not None:
            raise UsageError("--layer goes with --config or --preset")
        setup: dict[str, Any] = {"method": args.method, "params": args.params or {}}
        if args.rotary_dim is not None:
            setup["rotary_dim"] = args.rotary_dim
        if args.pairing is not None:
            setup["pairing"] = args.pairing
    else:
        if args.layer is None:
            raise UsageError("--config and --preset need --layer, the index of the layer to check")
        if args.params is not None or args.rotary_dim is not None or args.pairing is not None:
            raise UsageError("with --config or --preset, the layer's params, rotary dim and pairing come from it")
        config = (
            client.models.get(args.preset).config
            if args.preset is not None
            else _read_json_object(args.config, "a model's config.json")
        )
        setup = {"config": config, "layer": args.layer}
    options = {
        "heads": args.heads,
        "length": args.length,
        "chunk_sizes": args.chunk_sizes,
        "prefill": args.prefill,
        "batch_lengths": args.batch_lengths,
        "documents": args.documents,
        "sinks": args.sinks,
        "window": args.window,
        "requests": args.requests,
    }
    report = client.rope.serve_check(setup, **{key: value for key, value in options.items() if value is not None})
    if args.json:
        _print_json(report)
        return 0
    _print_table(
        ["variant", "schedule", "verdict", "max error", "first wrong (seq, query, key)", "what it models"],
        [_variant_row(variant) for variant in report["variants"]],
    )
    summary = report["summary"]
    print(f"sensitive to: {', '.join(summary['sensitive_to']) or 'none'}")
    if summary["equivalent_for_this_setup"]:
        print(f"equivalent for this setup: {', '.join(summary['equivalent_for_this_setup'])}")
    if summary.get("transformers_differs"):
        print(f"transformers differs from recomputation: {', '.join(summary['transformers_differs'])}")
    return 0


def _variant_row(variant: Mapping[str, Any]) -> list[str]:
    wrong = variant["first_wrong"]
    where = "" if wrong is None else f"({wrong['sequence']}, {wrong['query']}, {wrong['key']})"
    return [
        variant["label"],
        variant["schedule"],
        variant["verdict"],
        f"{variant['max_error']:.3g}",
        where,
        _clip(variant["models"], 70),
    ]


def _rope_presets(client: Client, args: argparse.Namespace) -> int:
    presets = client.models.list()
    if args.json:
        _print_json([preset.model_dump(mode="json") for preset in presets])
    else:
        _print_table(["name", "model_type"], [[preset.name, str(preset.model_type)] for preset in presets])
    return 0


def _jobs_submit(client: Client, args: argparse.Namespace) -> int:
    spec = _read_json_object(args.spec, "a job spec")
    job = client.jobs.create(args.kind, spec, idempotency_key=args.idempotency_key)
    if args.wait:
        print(f"queued job {job.id}", file=sys.stderr)
        job = _wait(client, job.id, args)
    _show_job(job, as_json=args.json)
    return 0


def _jobs_get(client: Client, args: argparse.Namespace) -> int:
    _show_job(client.jobs.get(args.job_id), as_json=args.json)
    return 0


def _jobs_list(client: Client, args: argparse.Namespace) -> int:
    jobs = client.jobs.list(status=args.status, kind=args.kind)
    if args.json:
        _print_json([job.model_dump(mode="json") for job in jobs])
    else:
        _print_table(["id", "kind", "status", "methods", "progress", "created"], [_job_row(job) for job in jobs])
    return 0


def _jobs_cancel(client: Client, args: argparse.Namespace) -> int:
    _show_job(client.jobs.cancel(args.job_id), as_json=args.json)
    return 0


def _jobs_events(client: Client, args: argparse.Namespace) -> int:
    events = client.jobs.events(args.job_id)
    if args.json:
        print(json.dumps([event.model_dump(mode="json") for event in events], indent=1))
    else:
        for event in events:
            print(f"{event.at}  {event.event}")
    return 0


def _jobs_wait(client: Client, args: argparse.Namespace) -> int:
    """The job once it ends; before waiting (on stderr) and after, its estimate at submission and its time."""
    estimate = client.jobs.get(args.job_id).estimate_s
    if estimate is not None:
        print(f"estimated {estimate:g} s on one worker (the server's estimate at submission)", file=sys.stderr)
    job = _wait(client, args.job_id, args)
    _show_job(job, as_json=args.json)
    if not args.json and job.estimate_s is not None:
        took = ""
        if job.started_at is not None and job.finished_at is not None:
            took = f"; took {(job.finished_at - job.started_at).total_seconds():.1f} s from start to finish"
        print(f"estimate  {job.estimate_s:g} s{took}")
    return 0


def _jobs_artifact(client: Client, args: argparse.Namespace) -> int:
    path = client.jobs.download_artifact(args.job_id, args.name, _output_file(args.output, args.name))
    print(f"wrote {path} ({path.stat().st_size} bytes)", file=sys.stderr)
    return 0


def _wait(client: Client, job_id: str, args: argparse.Namespace) -> Job:
    return client.jobs.wait(
        job_id,
        timeout=args.wait_timeout,
        poll_interval=args.poll_interval,
        progress_bar=False if args.no_progress else None,
    )


# ------------------------------------------------------------------------------------------------- output
def _show_job(job: Job, *, as_json: bool) -> None:
    if as_json:
        _print_json(job.model_dump(mode="json"))
        return
    lines = [("id", job.id), ("kind", job.kind), ("status", job.status), ("progress", _progress(job))]
    lines.append(("created", job.created_at.isoformat(timespec="seconds")))
    if job.finished_at is not None:
        lines.append(("finished", job.finished_at.isoformat(timespec="seconds")))
    if job.error:
        lines.append(("error", job.error))
    for artifact in job.artifacts or []:
        lines.append(("artifact", f"{artifact.name}  {artifact.url}"))
    width = max(len(label) for label, _ in lines)
    for label, value in lines:
        print(f"{label:<{width}}  {value}")
    table = (job.result or {}).get("table")
    if isinstance(table, list) and table and all(isinstance(row, dict) for row in table):
        columns = list(table[0])
        print()
        _print_table(columns, [[_cell(row.get(column)) for column in columns] for row in table])


def _job_row(job: JobSummary) -> list[str]:
    methods = ", ".join(job.methods or [])
    return [job.id, job.kind, job.status, methods, _progress(job), job.created_at.isoformat(timespec="seconds")]


def _progress(job: Job | JobSummary) -> str:
    progress = job.progress
    if progress is None or not progress.total:
        return ""
    text = f"{progress.step}/{progress.total}"
    if progress.loss is not None:
        text += f" loss {progress.loss:.4f}"
    return text


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _print_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max([len(title)] + [len(row[index]) for row in rows]) for index, title in enumerate(header)]
    print("  ".join(title.upper().ljust(width) for title, width in zip(header, widths, strict=True)).rstrip())
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, default=str))


# --------------------------------------------------------------------------------------------------- main
def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        with Client(
            base_url=args.base_url, api_key=args.api_key, timeout=args.timeout, max_retries=args.max_retries
        ) as client:
            status: int = args.run(client, args)
            return status
    except UsageError as error:
        print(f"posenc-client: {error}", file=sys.stderr)
        return EXIT_USAGE
    except APIStatusError as error:
        print(f"posenc-client: {error}", file=sys.stderr)
        return EXIT_API_ERROR
    except APIConnectionError as error:
        print(f"posenc-client: {error}", file=sys.stderr)
        return EXIT_CONNECTION
    except JobError as error:
        print(f"posenc-client: {error}", file=sys.stderr)
        return EXIT_JOB
    except (OSError, json.JSONDecodeError) as error:
        print(f"posenc-client: {error}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
