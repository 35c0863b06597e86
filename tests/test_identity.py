"""Identity: key file format and safety, PeerIDs that both network stacks agree on, names, CLI."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from programs import output
from swarmnode import cli
from swarmnode.swarm import identity as identity_module
from swarmnode.swarm.identity import (
    Identity,
    IdentityError,
    name_from_peer_id,
    peer_id_from_public_key,
    public_key_from_peer_id,
    verify_signature,
)

SEED = bytes(range(32))
# Ed25519 public key of SEED (RFC 8032 derivation), so the format is pinned, not just self-consistent.
SEED_PEER_ID = "12D3KooWA4Xop1JaT3MHxwYMkCepYsv4iPVopMXwCz5iHYdBfeSB"

posix_only = pytest.mark.skipif(os.name != "posix", reason="file modes are POSIX")


def test_from_seed_is_deterministic_and_pinned():
    a, b = Identity.from_seed(SEED), Identity.from_seed(SEED)
    assert a.peer_id == b.peer_id == SEED_PEER_ID
    assert a.peer_id.startswith("12D3KooW")
    assert len(a.public_key) == 32
    assert Identity.generate().peer_id != a.peer_id


def test_key_file_layout_is_go_libp2p_protobuf():
    ident = Identity.from_seed(SEED)
    buf = ident.private_key_protobuf()
    assert buf[:4] == bytes([0x08, 0x01, 0x12, 64])
    assert buf[4:36] == SEED and buf[36:] == ident.public_key
    assert Identity.from_protobuf(buf).peer_id == ident.peer_id


def test_peer_id_and_public_key_round_trip():
    ident = Identity.generate()
    assert public_key_from_peer_id(ident.peer_id) == ident.public_key
    assert peer_id_from_public_key(ident.public_key) == ident.peer_id
    for bad in ["", "not-base58-0OIl", "QmYyQSo1c1Ym7orWxLYvCrM2EmxFTANf8wXmmE7DWjhx5N", ident.peer_id[:-2]]:
        with pytest.raises(ValueError):
            public_key_from_peer_id(bad)


def test_sign_and_verify():
    ident = Identity.generate()
    sig = ident.sign(b"data")
    assert len(sig) == 64
    assert verify_signature(ident.public_key, b"data", sig)
    assert not verify_signature(ident.public_key, b"datA", sig)
    flipped = bytes([sig[0] ^ 1]) + sig[1:]
    assert not verify_signature(ident.public_key, b"data", flipped)
    assert not verify_signature(Identity.generate().public_key, b"data", sig)
    assert not verify_signature(b"short", b"data", sig)
    assert not verify_signature(ident.public_key, b"data", b"")


def test_name_is_three_words_stable_and_spread():
    ident = Identity.from_seed(SEED)
    name = ident.name
    assert name == name_from_peer_id(ident.peer_id) == Identity.from_seed(SEED).name
    words = name.split("-")
    assert len(words) == 3 and all(w.isalpha() for w in words) and words[0] != words[1]
    names = {Identity.generate().name for _ in range(200)}
    assert len(names) >= 195


def test_create_writes_mode_0600_and_reloads(tmp_path: Path):
    path = tmp_path / "sub" / "identity.key"
    created = Identity.load_or_create(path)
    assert path.read_bytes() == created.private_key_protobuf()
    if os.name == "posix":
        assert path.stat().st_mode & 0o777 == 0o600
    again = Identity.load_or_create(path)
    assert again.peer_id == created.peer_id and again.path == path


@posix_only
def test_refuses_key_readable_by_others(tmp_path: Path):
    path = tmp_path / "identity.key"
    Identity.load_or_create(path)
    path.chmod(0o644)
    with pytest.raises(IdentityError, match="chmod 600"):
        Identity.load_or_create(path)
    assert path.stat().st_mode & 0o777 == 0o644  # refused, not silently fixed or replaced


@pytest.mark.parametrize("content, hint", [
    (b"garbage that is no key", "not a usable"),
    (b"", "missing key type"),
    (bytes([0x08, 0x00, 0x12, 0x04]) + b"abcd", "RSA"),
    (bytes([0x08, 0x01, 0x12, 32]) + SEED, "32 bytes"),
    (bytes([0x08, 0x01, 0x12, 64]) + SEED + bytes(32), "does not match"),
    (bytes([0x08, 0x01, 0x12, 64]) + SEED, "truncated"),
])
def test_refuses_garbage_and_wrong_keys(tmp_path: Path, content: bytes, hint: str):
    path = tmp_path / "identity.key"
    path.write_bytes(content)
    path.chmod(0o600)
    with pytest.raises(IdentityError) as info:
        Identity.load_or_create(path)
    assert str(path) in str(info.value) and hint in str(info.value)
    assert path.read_bytes() == content  # never overwritten


def test_refuses_unreadable_key(tmp_path: Path, monkeypatch):
    path = tmp_path / "identity.key"
    Identity.load_or_create(path)

    def denied(*args, **kwargs):  # chmod 000 would not stop root, who runs CI containers
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(identity_module, "open", denied, raising=False)
    with pytest.raises(IdentityError, match="cannot read the identity key: Permission denied"):
        Identity.load_or_create(path)


def test_directory_in_place_of_key(tmp_path: Path):
    (tmp_path / "identity.key").mkdir(mode=0o700)
    with pytest.raises(IdentityError, match="not a regular file"):
        Identity.load_or_create(tmp_path / "identity.key")


@pytest.mark.slow
def test_py_libp2p_derives_the_same_peer_id_and_signature():
    ident = Identity.from_seed(SEED)
    out = output("identity_libp2p", ident.seed.hex())
    peer_id, signature = out.splitlines()
    assert peer_id == ident.peer_id
    assert bytes.fromhex(signature) == ident.sign(b"swarmnode")


@pytest.mark.slow
def test_hivemind_loads_the_key_file_with_the_same_peer_id(tmp_path: Path):
    ident = Identity.load_or_create(tmp_path / "identity.key")
    out = output("identity_hivemind", ident.path)
    assert out.splitlines()[-1] == ident.peer_id


def test_cli_creates_then_prints_the_same_identity(tmp_path: Path, capsys):
    assert cli.main(["identity", "--home", str(tmp_path), "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["key_path"] == str(tmp_path.resolve() / "identity.key")
    assert first["peer_id"].startswith("12D3KooW") and first["name"].count("-") == 2
    assert cli.main(["identity", "--home", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert first["peer_id"] in text and first["name"] in text and first["key_path"] in text


def test_cli_uses_swarmnode_home(tmp_path: Path, capsys, monkeypatch):
    monkeypatch.setenv("SWARMNODE_HOME", str(tmp_path))
    assert cli.main(["identity", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["key_path"] == str(tmp_path.resolve() / "identity.key")


def test_cli_bad_key_is_one_line_and_exit_1(tmp_path: Path, capsys):
    (tmp_path / "identity.key").write_bytes(b"nonsense")
    (tmp_path / "identity.key").chmod(0o600)
    assert cli.main(["identity", "--home", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "identity.key" in err and "Traceback" not in err
