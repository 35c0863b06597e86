"""docs/configuration.md is generated from NodeConfig and must be current."""

from __future__ import annotations

from swarmnode import docsgen
from swarmnode.config import NodeConfig, coerce, read_toml


def test_committed_reference_is_current():
    committed = docsgen.DOC_PATH.read_text(encoding="utf-8")
    assert committed == docsgen.render(), (
        "docs/configuration.md is out of date: run `python -m swarmnode.docsgen` and commit the result")


def test_every_key_is_documented_with_env_and_flag():
    text = docsgen.render()
    for f in NodeConfig.keys():
        assert f"### `{f.name}`" in text
        assert f"`SWARMNODE_{f.name.upper()}`" in text
        assert f"`--{f.name.replace('_', '-')}`" in text
        assert f.metadata["help"] in text


def test_choices_and_limits_are_stated():
    docs = {d.name: d for d in docsgen.key_docs()}
    assert docs["transport"].limits == "one of `hivemind`, `libp2p`"
    assert docs["api_port"].limits == ">= 0, <= 65535"
    assert docs["temperature"].limits == ">= 0.01"
    assert docs["model"].limits == ""


def test_toml_values_parse_back_to_the_defaults(tmp_path):
    lines = [f"{d.name} = {docsgen.toml_value(d.default)}" for d in docsgen.key_docs() if d.default is not None]
    path = tmp_path / "c.toml"
    path.write_text("\n".join(lines), encoding="utf-8")
    defaults = NodeConfig()
    for key, value in read_toml(path).items():
        assert coerce(key, value) == getattr(defaults, key)


def test_main_writes_the_file(tmp_path):
    out = tmp_path / "docs" / "configuration.md"
    assert docsgen.main(["--output", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == docsgen.render()
