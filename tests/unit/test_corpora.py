"""Corpus confinement (posenc.corpora): registered names, or files under the data directories; every other
name is refused with one message that says nothing about whether the path exists."""

from __future__ import annotations

from pathlib import Path

import pytest

from posenc.corpora import (
    CORPUS_LOC,
    CORPUS_RULE,
    TINYSHAKESPEARE_MISSING,
    check_corpus,
    corpus_file,
    data_directories,
)
from posenc.errors import InvalidInput
from posenc.settings import Settings


@pytest.fixture
def layout(tmp_path: Path) -> dict[str, Path]:
    """A data dir with a file, a nested file, a directory and links in and out; a secret file beside it."""
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    (data / "empty-dir").mkdir()
    (data / "mytext.txt").write_text("hello corpus\n")
    (data / "sub" / "a.txt").write_text("nested corpus\n")
    secret = tmp_path / "secret.txt"
    secret.write_text("not for training\n")
    (data / "escape.txt").symlink_to(secret)  # a link inside that points outside
    (data / "sub" / "up").symlink_to(tmp_path)  # a directory link that leaves the data dir
    (data / "alias.txt").symlink_to(data / "mytext.txt")  # a link that stays inside
    (data / "loop").symlink_to(data / "loop")
    return {"data": data, "secret": secret}


def _refusal(name: str, directories: list[Path]) -> str:
    """The message both the submission check and the worker's resolution give for ``name``."""
    with pytest.raises(InvalidInput) as checked:
        check_corpus(name, directories)
    with pytest.raises(InvalidInput) as resolved:
        corpus_file(name, directories)
    assert checked.value.loc == resolved.value.loc == CORPUS_LOC
    assert checked.value.msg == resolved.value.msg
    return checked.value.msg


def test_registered_names_need_no_file_at_submission() -> None:
    check_corpus("stdlib", [])
    check_corpus("tinyshakespeare", [])
    assert corpus_file("stdlib", []) is None


def test_files_under_the_data_dirs_are_accepted_by_relative_or_absolute_name(layout: dict[str, Path]) -> None:
    data = layout["data"].resolve()
    for name, expected in [
        ("mytext.txt", data / "mytext.txt"),
        ("sub/a.txt", data / "sub" / "a.txt"),
        (str(layout["data"] / "mytext.txt"), data / "mytext.txt"),
        ("sub/../mytext.txt", data / "mytext.txt"),  # '..' that stays inside
        ("alias.txt", data / "mytext.txt"),  # a link that stays inside: the real file is read
    ]:
        check_corpus(name, [layout["data"]])
        assert corpus_file(name, [layout["data"]]) == expected, name


def test_every_other_name_is_one_message_that_does_not_reveal_existence(layout: dict[str, Path]) -> None:
    data, secret = layout["data"], layout["secret"]
    names = [
        "/etc/passwd",  # exists, outside
        str(secret),  # exists, outside, absolute
        "../secret.txt",  # exists, '..' out of the data dir
        "sub/../../secret.txt",
        "escape.txt",  # a symlink inside pointing outside
        str(data / "escape.txt"),
        "sub/up/secret.txt",  # through a directory symlink that leaves
        "empty-dir",  # a directory
        str(data),
        "",
        "missing.txt",  # does not exist, inside
        str(data / "missing.txt"),
        "../missing.txt",  # does not exist, outside
        "/no/such/dir/file.txt",
        "loop",  # a symlink loop
        "nul\0byte.txt",
        "x" * 300,  # longer than a file name may be
        "a/" * 5_000_000,  # longer than any path: refused before resolving (that would take minutes)
    ]
    messages = {name: _refusal(name, [data]) for name in names}
    assert set(messages.values()) == {CORPUS_RULE}, messages
    assert "exist" not in CORPUS_RULE
    assert "POSENC_DATA_DIR" in CORPUS_RULE


def test_without_data_dirs_only_registered_names_pass(layout: dict[str, Path]) -> None:
    assert _refusal(str(layout["data"] / "mytext.txt"), []) == CORPUS_RULE


def test_data_dirs_are_searched_in_order_and_each_confines(tmp_path: Path, layout: dict[str, Path]) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "mytext.txt").write_text("the second copy\n")
    (other / "only-here.txt").write_text("only in the second directory\n")
    directories = [layout["data"], other]
    assert corpus_file("mytext.txt", directories) == (layout["data"] / "mytext.txt").resolve()
    assert corpus_file("only-here.txt", directories) == (other / "only-here.txt").resolve()
    assert corpus_file(str(other / "only-here.txt"), directories) == (other / "only-here.txt").resolve()
    assert _refusal("../secret.txt", directories) == CORPUS_RULE


def test_a_symlinked_data_dir_is_resolved_before_the_containment_test(tmp_path: Path, layout: dict[str, Path]) -> None:
    link = tmp_path / "data-link"
    link.symlink_to(layout["data"], target_is_directory=True)
    assert corpus_file("mytext.txt", [link]) == (layout["data"] / "mytext.txt").resolve()
    assert corpus_file(str(layout["data"] / "mytext.txt"), [link]) == (layout["data"] / "mytext.txt").resolve()
    assert _refusal("escape.txt", [link]) == CORPUS_RULE


def test_tinyshakespeare_is_looked_up_in_every_data_dir_and_confined(tmp_path: Path, layout: dict[str, Path]) -> None:
    other = tmp_path / "other"
    other.mkdir()
    with pytest.raises(InvalidInput) as missing:
        corpus_file("tinyshakespeare", [layout["data"], other])
    assert missing.value.msg == TINYSHAKESPEARE_MISSING
    (layout["data"] / "tinyshakespeare.txt").symlink_to(layout["secret"])  # a link out is not the corpus
    with pytest.raises(InvalidInput, match=r"needs tinyshakespeare\.txt"):
        corpus_file("tinyshakespeare", [layout["data"], other])
    (other / "tinyshakespeare.txt").write_text("First Citizen:\n")
    assert corpus_file("tinyshakespeare", [layout["data"], other]) == (other / "tinyshakespeare.txt").resolve()


def test_data_directories_come_from_settings_with_data_dir_first(tmp_path: Path) -> None:
    first, second, third = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    settings = Settings(data_dir=first, data_dirs=[second, third])
    assert data_directories(settings) == [first, second, third]
    assert data_directories(settings, data_dir=third) == [third, second, third]
    assert data_directories(Settings(data_dir=None, data_dirs=[])) == []


def test_the_list_setting_is_read_from_the_environment_as_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POSENC_DATA_DIR", str(tmp_path / "a"))
    monkeypatch.setenv("POSENC_DATA_DIRS", f'["{tmp_path / "b"}", "{tmp_path / "c"}"]')
    assert data_directories(Settings()) == [tmp_path / "a", tmp_path / "b", tmp_path / "c"]
