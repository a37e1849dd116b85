"""Bounded loading of user JSON, YAML and XML (blensor_addon/io/safeload.py): nesting,
integer digits and size are refused as one SettingsError naming the file, line and
column, before any parser can recurse."""
import json

import pytest

from blensor_addon.core.errors import SettingsError
from blensor_addon.io import safeload


def test_json_nested_deep_is_refused_at_the_first_bracket_past_the_bound():
    text = "{\"a\":\n " + "[" * 100000 + "]" * 100000 + "}"
    with pytest.raises(SettingsError) as e:
        safeload.load_json(text, "x.json")
    assert str(e.value) == f"x.json line 2 column {2 + safeload.MAX_DEPTH - 1} must be JSON nested at most " \
                           f"{safeload.MAX_DEPTH} deep, got 100001"


def test_json_brackets_inside_strings_do_not_count():
    doc = {"a": ["[" * 1000, "{\\\"" * 100]}
    assert safeload.load_json(json.dumps(doc), "x.json") == doc
    assert safeload.json_depth(json.dumps(doc)) == 2


@pytest.mark.parametrize("digits", [400, 5000])
def test_json_long_integers_are_refused(digits):
    with pytest.raises(SettingsError) as e:
        safeload.load_json('{"a":\n  %s}' % ("7" * digits), "x.json")
    assert str(e.value).startswith("x.json line 2 column 3 must be an integer of at most 64 digits, got '777")


def test_json_syntax_errors_stay_json_errors():
    with pytest.raises(json.JSONDecodeError):
        safeload.load_json('{"a": 1', "x.json")


def test_json_file_larger_than_the_bound_is_refused(tmp_path):
    p = tmp_path / "big.json"
    p.write_bytes(b"[" + b"0," * 600 + b"0]")
    with pytest.raises(SettingsError, match="must be a file of at most 1000 bytes"):
        safeload.load_json(p, str(p), max_bytes=1000)
    assert safeload.load_json(p, str(p)) == [0] * 601


def test_yaml_nested_deep_in_flow_and_block_style_is_refused():
    block = "a:\n" + "".join("  " * i + "- \n" for i in range(100))
    for text in ("a: " + "[" * 100000 + "]" * 100000, block):
        with pytest.raises(SettingsError, match=r"^x.yaml line \d+ column \d+ must be YAML nested at most"):
            safeload.load_yaml(text, "x.yaml")


@pytest.mark.parametrize("value", ["1" * 400, "0x" + "f" * 400, "-" + "1_" * 200 + "1"])
def test_yaml_long_integers_are_refused(value):
    with pytest.raises(SettingsError, match=r"^x.yaml line 2 column 13 must be an integer of at most 64 "):
        safeload.load_yaml("lasers: []\nnum_lasers: " + value, "x.yaml")


def test_yaml_quoted_long_numbers_are_strings():
    assert safeload.load_yaml("a: '%s'" % ("1" * 400), "x.yaml") == {"a": "1" * 400}


def test_xml_nested_deep_is_refused():
    with pytest.raises(SettingsError) as e:
        safeload.load_xml("<a>" * 3000 + "</a>" * 3000, "x.xml")
    assert str(e.value) == "x.xml line 1 column 193 must be XML nested at most 64 elements deep, got " \
                           "'more than 64 levels'"
    assert safeload.load_xml("<a><b>1</b></a>", "x.xml").find("b").text == "1"
