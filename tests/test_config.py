"""Settings from config files and --set, merged with flags."""

import pytest

from winnow.config import parse_assignment, read_config, resolve
from winnow.errors import InputError, WinnowError
from winnow.methods.rrr import RRRSettings


def test_toml_top_level_method_table_and_flags(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('method = "rrr"\nn = 30\nwindow = 8\n\n[rrr]\nrewrites = 2\nn = 25\n')
    config = read_config(path)
    settings = resolve(RRRSettings, "rrr", config, {"n": None, "k": 3}, path)
    assert settings == {"n": 25, "window": 8, "rewrites": 2, "k": 3}


def test_yaml_works_too(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("n: 12\nrrr:\n  tau: 2\n")
    assert resolve(RRRSettings, "rrr", read_config(path), {}, path) == {"n": 12, "tau": 2}


def test_top_level_settings_of_other_methods_are_ignored(tmp_path):
    from winnow.methods.base import MethodSettings

    assert resolve(MethodSettings, "vanilla", {"window": 8, "k": 2}, {}) == {"k": 2}


def test_unknown_key_in_a_method_table_names_file_and_field(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text("[rrr]\nwindw = 3\n")
    with pytest.raises(InputError, match=r"run.toml, field 'rrr': method 'rrr' has no setting\(s\) \['windw'\]"):
        resolve(RRRSettings, "rrr", read_config(path), {}, path)


def test_bad_toml_is_reported_with_the_file(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("n = = 3\n")
    with pytest.raises(InputError, match="bad.toml: not valid TOML"):
        read_config(path)


def test_bad_yaml_names_the_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("n: 3\nk: [1\n")
    with pytest.raises(InputError, match="bad.yaml, line"):
        read_config(path)


def test_missing_and_unknown_format(tmp_path):
    with pytest.raises(WinnowError, match="config file not found"):
        read_config(tmp_path / "none.toml")
    other = tmp_path / "x.ini"
    other.write_text("n=1")
    with pytest.raises(InputError, match="unknown config format"):
        read_config(other)


@pytest.mark.parametrize("text, expected", [("window=20", ("window", 20)), ("tau=1.5", ("tau", 1.5)),
                                            ("max-answer-tokens=8", ("max_answer_tokens", 8))])
def test_parse_assignment(text, expected):
    assert parse_assignment(text) == expected


def test_parse_assignment_needs_an_equals_sign():
    with pytest.raises(WinnowError, match="KEY=VALUE"):
        parse_assignment("window")
