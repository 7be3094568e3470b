"""helpers.text: first lines of errors, tables, byte counts and durations."""

from __future__ import annotations

from ipyparallel.error import RemoteError

from helpers.text import first_line, format_bytes, format_seconds, progress, progress_line, table


def test_first_line_of_errors_and_texts():
    error = RuntimeError("[gloo] timed out\nmore detail")
    assert first_line(error) == "RuntimeError: [gloo] timed out"
    assert first_line(ValueError("")) == "ValueError"  # a blank message: the type alone
    assert first_line(KeyError()) == "KeyError"
    assert first_line(RuntimeError("\n\n  second line only \n")) == "RuntimeError: second line only"
    assert first_line("  \n") == "" and first_line("a\nb") == "a"
    remote = RemoteError("AssertionError", "rank 1: planted\nTraceback ...", "tb")
    assert first_line(remote) == "AssertionError: rank 1: planted"
    assert first_line(RemoteError("ZeroDivisionError", "", "tb")) == "ZeroDivisionError"


def test_table_aligns_columns_and_right_aligns_on_request():
    text = table([("rank", "device"), (0, "cpu"), (10, "cuda:1")], right=[0])
    assert text.splitlines() == ["rank  device", "   0  cpu", "  10  cuda:1"]
    assert table([]) == ""


def test_bytes_and_seconds_for_people():
    assert [format_bytes(b) for b in (8, 1536, 16 * 2**20)] == ["8 B", "1.5 KiB", "16 MiB"]
    assert format_seconds(3.52) == "3.5 s" and format_seconds(0.061) == "0.06 s"


def test_progress_is_silent_where_outputs_are_stored(monkeypatch, capsys):
    monkeypatch.setenv("IPP_NONINTERACTIVE", "1")
    assert list(progress([1, 2, 3], "steps")) == [1, 2, 3]
    assert capsys.readouterr().out == ""


def test_progress_redraws_one_line_in_a_live_notebook(monkeypatch, capsys):
    monkeypatch.delenv("IPP_NONINTERACTIVE", raising=False)
    assert list(progress([1, 2], "sizes")) == [1, 2]
    out = capsys.readouterr().out
    assert out.count("\r") == 3 and out.endswith("sizes [" + "#" * 24 + "] 2/2\n")
    assert list(progress([1], "other ranks", show=False)) == [1]
    assert capsys.readouterr().out == ""


def test_progress_of_many_short_steps_redraws_only_when_the_bar_grows(monkeypatch, capsys):
    monkeypatch.delenv("IPP_NONINTERACTIVE", raising=False)
    assert list(progress(range(1000), "steps")) == list(range(1000))
    draws = capsys.readouterr().out.split("\r")[1:]
    assert len(draws) == 1 + 23 + 1  # the empty bar, marks 1..23 as they come, the full bar
    assert draws[0].startswith("steps [" + " " * 24 + "] 0/1000")
    assert draws[-1] == "steps [" + "#" * 24 + "] 1000/1000\n"


def test_progress_line():
    assert progress_line(1, 4, "x", width=8) == "x [##      ] 1/4"
