"""--prompts files: formats, normalization, the repeat share, and clear errors."""

from __future__ import annotations

import json

import pytest

from scans.grader.prompts import PromptsFileError, load_prompts_file, repeat_prompt_share


def _write(tmp_path, text: str | bytes, name: str = "prompts"):
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def test_jsonl_of_strings_prompt_objects_and_conversations_is_read(tmp_path):
    lines = [json.dumps("hi  there"), json.dumps({"prompt": " hi there "}),
             json.dumps({"messages": [{"role": "user", "content": "hi\nthere"}]})]
    sample = load_prompts_file(_write(tmp_path, "\n".join(lines) + "\n\n"))
    assert sample.format == "jsonl"
    assert sample.prompts[:2] == ("hi there", "hi there")
    assert sample.prompts[2] == (("user", "hi there"),)
    assert repeat_prompt_share(sample.prompts) == 1 / 3


def test_a_file_with_any_non_json_line_is_plain_text(tmp_path):
    sample = load_prompts_file(_write(tmp_path, '"quoted"\nplain line\n'))
    assert sample.format == "text"
    assert sample.prompts == ('"quoted"', "plain line")


def test_conversations_are_compared_role_by_role(tmp_path):
    a = {"messages": [{"role": "system", "content": "be brief"},
                      {"role": "user", "content": "hi"}]}
    b = {"messages": [{"role": "system", "content": "be  brief "},
                      {"role": "user", "content": "hi"}]}
    c = {"messages": [{"role": "user", "content": "be brief"},
                      {"role": "user", "content": "hi"}]}
    sample = load_prompts_file(_write(tmp_path, "\n".join(json.dumps(x) for x in (a, b, c))))
    assert repeat_prompt_share(sample.prompts) == 1 / 3


def test_a_non_utf8_prompts_file_is_a_clear_error(tmp_path):
    path = _write(tmp_path, b"first\n" + b"caf\xe9\n")
    with pytest.raises(PromptsFileError, match="not UTF-8.*line 2"):
        load_prompts_file(path)


@pytest.mark.parametrize(("content", "match"), [
    ("", "no prompts"),
    ("\n  \n", "no prompts"),
    ('{"nope": 1}\n', "line 1"),
])
def test_unusable_prompts_files_say_why(tmp_path, content, match):
    with pytest.raises(PromptsFileError, match=match):
        load_prompts_file(_write(tmp_path, content))


def test_a_missing_prompts_file_is_a_clear_error(tmp_path):
    with pytest.raises(PromptsFileError, match="cannot read"):
        load_prompts_file(tmp_path / "absent.jsonl")


def test_a_sample_in_memory_parses_like_a_file():
    from scans.grader.prompts import parse_prompts_text

    sample = parse_prompts_text('"a"\n"a "\n{"prompt": "b"}\n', source="the sample")
    assert sample.format == "jsonl" and repeat_prompt_share(sample.prompts) == 1 / 3
    with pytest.raises(PromptsFileError, match="the sample has no prompts"):
        parse_prompts_text("\n", source="the sample")
