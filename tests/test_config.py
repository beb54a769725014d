"""Settings from config files and --set, merged with flags."""

import pytest

from winnow.config import config_layers, parse_assignment, read_config
from winnow.errors import InputError, WinnowError
from winnow.methods import resolve_settings
from winnow.settings import SettingError, SettingsLayer


def resolve(method, config, flags, path="config"):
    """The overrides a config file and flags give ``method`` (config top level < [method] < flags)."""
    layers = [*config_layers(config, method, path), SettingsLayer("--set and flags", flags)]
    return resolve_settings(method, layers).overrides()


def test_toml_top_level_method_table_and_flags(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('method = "rrr"\nn = 30\nwindow = 8\n\n[rrr]\nrewrites = 2\nn = 25\n')
    config = read_config(path)
    settings = resolve("rrr", config, {"k": 3}, path)
    assert settings == {"n": 25, "window": 8, "rewrites": 2, "k": 3}


def test_yaml_works_too(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("n: 12\nrrr:\n  tau: 2\n")
    assert resolve("rrr", read_config(path), {}, path) == {"n": 12, "tau": 2}


def test_top_level_settings_of_other_methods_are_ignored(tmp_path):
    assert resolve("vanilla", {"window": 8, "k": 2}, {}) == {"k": 2}


def test_unknown_key_in_a_method_table_names_file_and_field(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text("[rrr]\nwindw = 3\n")
    with pytest.raises(SettingError, match=r"run.toml, field 'rrr.windw': method 'rrr' has no setting 'windw'"):
        resolve("rrr", read_config(path), {}, path)


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


@pytest.mark.parametrize("text", ["k=", "k=  "])
def test_an_empty_set_value_is_refused_naming_the_setting(text):
    with pytest.raises(SettingError, match=r"--set k= has no value") as caught:
        parse_assignment(text)
    assert caught.value.setting == "k"


def test_a_null_in_a_config_file_is_refused_naming_file_and_field(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("rrr:\n  window:\n")
    with pytest.raises(SettingError, match=r"run.yaml, field 'rrr.window': setting 'window' has no value"):
        resolve("rrr", read_config(path), {}, path)


def test_provenance_names_the_layer_each_setting_came_from(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('n = 30\n[rrr]\nwindow = 8\n')
    layers = [*config_layers(read_config(path), "rrr", path), SettingsLayer("--set and flags", {"k": 3})]
    resolved = resolve_settings("rrr", layers, profile="paper")
    assert resolved.source_of("n") == "config run.toml"
    assert resolved.source_of("window") == "config run.toml [rrr]"
    assert resolved.source_of("k") == "--set and flags"
    assert resolved.source_of("rewrites") == "profile 'paper'"
    assert resolved.source_of("listwise_prompt") == "default"


def test_the_python_api_refuses_what_the_cli_refuses_at_construction():
    from winnow.methods import method_settings

    with pytest.raises(SettingError, match=r"'max_answer_tokens' must be at most 1,048,576") as caught:
        method_settings("rankrag", max_answer_tokens=10**30)
    assert caught.value.setting == "max_answer_tokens"
    with pytest.raises(SettingError, match=r"'step' \(12\) cannot exceed setting 'window' \(10\)"):
        method_settings("rankgpt", step=12)


def test_server_caps_are_declared_on_the_settings_types():
    from winnow.rerank import RerankSettings
    from winnow.service.limits import Limits

    caps = Limits().setting_caps
    assert caps["max_answer_tokens"] == 512 and caps["rewrites"] == 10 and caps["window"] == 100
    assert RerankSettings.default_server_caps() == {"window": 100}
    with pytest.raises(SettingError, match=r"rewrites must be between 0 and 10 \(got 11\)"):
        resolve_settings("rrr", [SettingsLayer("request", {"rewrites": 11}, capped=True)], caps=caps)


@pytest.mark.parametrize("word", ["off", "on", "yes", "no", "y", "n"])
def test_a_word_yaml_1_1_reads_as_a_boolean_stays_a_word_in_set_and_sweep(word):
    """``--set injection_guard=off`` must reach the setting as "off", not False (YAML 1.1's reading)."""
    from winnow.config import parse_assignment
    from winnow.evaluation.sweep import parse_sweep

    assert parse_assignment(f"injection_guard={word}") == ("injection_guard", word)
    assert parse_sweep(f"injection_guard={word},flag") == ("injection_guard", [word, "flag"])
    assert parse_assignment("cache=true") == ("cache", True) and parse_assignment("k=0") == ("k", 0)
