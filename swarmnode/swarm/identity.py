"""A node's identity: an Ed25519 key, its libp2p PeerID and a readable three-word name.

The key file is a libp2p ``PrivateKey`` protobuf (field 1: KeyType, Ed25519 = 1; field 2: the
32-byte seed followed by the 32-byte public key, go-libp2p's layout). Both transports load
that file as it is: hivemind hands it to its ``p2pd`` daemon (which rejects the 32-byte
seed-only layout py-libp2p writes), and py-libp2p builds its key pair from the seed. The same
key therefore gives the same PeerID on either network.

This module imports neither hivemind nor libp2p: the two cannot share a process, and every
process needs an identity.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import base58
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

KEY_TYPE_ED25519 = 1
# PublicKey protobuf of an Ed25519 key: field 1 varint = 1, field 2 bytes of length 32.
_PUBKEY_PROTO_PREFIX = bytes([0x08, KEY_TYPE_ED25519, 0x12, 32])
# Identity multihash (code 0x00) of that 36-byte protobuf: libp2p inlines keys up to 42 bytes.
_PEER_ID_PREFIX = bytes([0x00, len(_PUBKEY_PROTO_PREFIX) + 32]) + _PUBKEY_PROTO_PREFIX
_KEY_NAMES = {0: "RSA", 1: "Ed25519", 2: "Secp256k1", 3: "ECDSA"}
_MAX_KEY_FILE = 4096

# 256 words each, so one hash byte picks one word without bias. Written for this project.
_ADJECTIVES = tuple("""
able agile alert amber ample ancient arctic ardent artful astute azure balmy bold brave breezy
bright brisk broad bronze bubbly busy calm candid careful carmine cheerful chilly civil clean
clever cloudy coastal cobalt cool copper coral cosmic cozy crimson crisp curious dainty dapper
daring dashing deep deft dense devoted diligent distant dusky dusty eager early earnest easy
elegant eloquent emerald epic even exotic fabled fair faithful fancy fast fearless feisty fierce
fiery fleet flying foggy fond frank free fresh friendly frosty frugal funny fuzzy gentle giddy
gifted glad gleaming glossy golden graceful grand grassy great green grumpy handsome happy hardy
hasty hazy hearty heavy hidden hollow honest humble hungry icy idle indigo iron ivory jade
jaunty jolly jovial joyful jumpy keen kind knotty lanky large lavish lazy leafy lean light lithe
little lively lofty lone loud loyal lucky lunar magic majestic mellow merry mighty mild misty
modest moonlit mossy muddy musky narrow neat nimble noble nocturnal noisy oaken odd olive opal
orange ornate pale patient peaceful pearly perky placid playful plucky polar polite proud
prudent purple quick quiet quirky radiant rapid rare regal rosy round royal ruby rugged rustic
sandy scarlet secret serene shaggy sharp shiny shy silent silky silver simple sleek sleepy
slender slim sly smooth snappy snowy soft solar solemn sparkly speedy spicy spry steady stealthy
stout striped sturdy subtle sunny tall tame tawny tender thorny tidy tiny tough tranquil
tropical trusty unique upbeat urban valiant vibrant vigilant violet vivid wandering warm wary
wild windy winged wise witty wooden woolly young zany zealous zesty
""".split())
_ANIMALS = tuple("""
aardvark albatross alligator alpaca anchovy anteater antelope armadillo baboon badger barracuda
bat beaver bee beetle bison boar bobcat bream buffalo bull butterfly buzzard camel canary
capybara caribou cat caterpillar catfish chameleon cheetah chicken chimpanzee chinchilla
chipmunk cobra cod condor cormorant cougar cow coyote crab crane cricket crocodile crow cuckoo
deer dingo dodo dog dolphin donkey dormouse dove dragonfly duck dugong eagle eel egret eland
elephant elk emu ermine falcon fennec ferret finch firefly flamingo flounder fox frog gazelle
gecko gerbil gibbon giraffe gnat gnu goat goldfinch goose gopher gorilla grasshopper grouse gull
hamster hare harrier hawk hedgehog heron herring hippo hornet horse hound hummingbird hyena ibex
ibis iguana impala jackal jaguar jay jellyfish kangaroo kestrel kingfisher kiwi koala kookaburra
kudu ladybug lark lemming lemur leopard lion lizard llama lobster locust loon lynx macaw magpie
mallard manatee mandrill mantis marlin marmot marten meerkat mink mole mongoose monkey moose
mosquito moth mouse mule muskrat narwhal newt nightingale nuthatch ocelot octopus okapi opossum
orca oriole osprey ostrich otter owl ox oyster panda pangolin panther parrot partridge peacock
pelican penguin pheasant pig pigeon pike platypus pony porcupine porpoise possum puffin puma
python quail quetzal quokka rabbit raccoon ram rat raven reindeer rhino robin rook salamander
salmon sandpiper sardine scorpion seahorse seal shark sheep shrew shrimp skunk sloth slug snail
snake sparrow spider squid squirrel starling stingray stork swallow swan swift tapir tarantula
termite tern tiger toad tortoise toucan trout tuna turkey turtle urchin viper vole vulture
wallaby walrus warbler wasp weasel whale wildcat wolf wolverine wombat woodpecker wren yak zebra
""".split())


class IdentityError(Exception):
    """The key file cannot be used; ``str()`` names the file and says what to do."""


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _read_varint(buf: bytes, i: int) -> tuple[int, int]:
    n = shift = 0
    while i < len(buf) and shift < 64:
        byte = buf[i]
        i += 1
        n |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return n, i
        shift += 7
    raise ValueError("truncated varint")


def _decode_key_proto(buf: bytes) -> tuple[int, bytes]:
    """(key type, data) of a libp2p ``PrivateKey`` protobuf; ValueError if it is not one."""
    fields: dict[int, int | bytes] = {}
    i = 0
    while i < len(buf):
        tag, i = _read_varint(buf, i)
        number, wire = tag >> 3, tag & 7
        if number not in (1, 2) or number in fields:
            raise ValueError(f"unexpected protobuf field {number}")
        if number == 1 and wire == 0:
            fields[1], i = _read_varint(buf, i)
        elif number == 2 and wire == 2:
            length, i = _read_varint(buf, i)
            if i + length > len(buf):
                raise ValueError("truncated key data")
            fields[2], i = buf[i:i + length], i + length
        else:
            raise ValueError(f"field {number} has the wrong wire type")
    if set(fields) != {1, 2}:
        raise ValueError("missing key type or key data")
    return fields[1], fields[2]  # type: ignore[return-value]


def peer_id_from_public_key(public_key: bytes) -> str:
    """The libp2p PeerID (``12D3KooW...``) of a raw 32-byte Ed25519 public key."""
    if len(public_key) != 32:
        raise ValueError("an Ed25519 public key is 32 bytes")
    return base58.b58encode(_PEER_ID_PREFIX + public_key).decode("ascii")


def public_key_from_peer_id(peer_id: str) -> bytes:
    """The raw public key inlined in an Ed25519 PeerID; ValueError for any other PeerID."""
    try:
        raw = base58.b58decode(peer_id.encode("ascii"))
    except (ValueError, UnicodeEncodeError, AttributeError):
        raise ValueError(f"not a base58 PeerID: {peer_id!r:.80}") from None
    if len(raw) != len(_PEER_ID_PREFIX) + 32 or not raw.startswith(_PEER_ID_PREFIX):
        raise ValueError(f"not an Ed25519 PeerID: {peer_id!r:.80}")
    return raw[len(_PEER_ID_PREFIX):]


def verify_signature(public_key: bytes, data: bytes, signature: bytes) -> bool:
    """True when ``signature`` is ``public_key``'s Ed25519 signature of ``data``; never raises."""
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(signature, data)
    except (InvalidSignature, ValueError, TypeError):
        return False
    return True


def name_from_peer_id(peer_id: str) -> str:
    """A stable adjective-adjective-animal name for any PeerID string (two distinct adjectives)."""
    h = hashlib.sha256(peer_id.encode("utf-8", "surrogatepass")).digest()
    first = h[0]
    second = h[1] % (len(_ADJECTIVES) - 1)
    second += second >= first  # skip the first adjective so a name never repeats a word
    return f"{_ADJECTIVES[first]}-{_ADJECTIVES[second]}-{_ANIMALS[h[2]]}"


class Identity:
    """An Ed25519 key pair, with the PeerID and name it gives; ``path`` is its key file, if any."""

    def __init__(self, private_key: Ed25519PrivateKey, path: Path | None = None):
        self._key = private_key
        self.path = path
        self.public_key: bytes = private_key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        self.peer_id: str = peer_id_from_public_key(self.public_key)
        self.name: str = name_from_peer_id(self.peer_id)

    def __repr__(self) -> str:
        return f"Identity({self.peer_id}, {self.name})"

    @classmethod
    def generate(cls) -> "Identity":
        """A fresh key in memory, never written anywhere."""
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_seed(cls, seed: bytes) -> "Identity":
        """The key of a 32-byte Ed25519 seed (deterministic: tests, experiments)."""
        if len(seed) != 32:
            raise ValueError("an Ed25519 seed is 32 bytes")
        return cls(Ed25519PrivateKey.from_private_bytes(seed))

    @property
    def seed(self) -> bytes:
        return self._key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                                       serialization.NoEncryption())

    def sign(self, data: bytes) -> bytes:
        """The 64-byte Ed25519 signature of ``data``."""
        return self._key.sign(data)

    def private_key_protobuf(self) -> bytes:
        """The key file's bytes: libp2p ``PrivateKey`` protobuf with seed + public key as data."""
        data = self.seed + self.public_key
        return b"\x08" + _varint(KEY_TYPE_ED25519) + b"\x12" + _varint(len(data)) + data

    @classmethod
    def from_protobuf(cls, buf: bytes, path: Path | None = None) -> "Identity":
        """Parse a key file's bytes; ValueError (saying what is wrong) if they are not a usable key."""
        key_type, data = _decode_key_proto(buf)
        if key_type != KEY_TYPE_ED25519:
            raise ValueError(f"it holds a {_KEY_NAMES.get(key_type, f'type {key_type}')} key; "
                             "swarmnode uses Ed25519 keys only")
        if len(data) != 64:
            raise ValueError(f"its Ed25519 key data is {len(data)} bytes, expected 64 (seed + public key)")
        identity = cls(Ed25519PrivateKey.from_private_bytes(data[:32]), path)
        if identity.public_key != data[32:]:
            raise ValueError("its public key does not match its private key")
        return identity

    @classmethod
    def load_or_create(cls, path: Path) -> "Identity":
        """Load the key file at ``path``, or create it (mode 0600) with a new key if missing.

        Raises :class:`IdentityError` if the file cannot be read or written, is not an Ed25519
        libp2p key, or (on POSIX) can be read by the group or others.
        """
        path = Path(path).expanduser()
        try:
            return cls._load(path)
        except FileNotFoundError:
            pass
        identity = cls.generate()
        identity.path = path
        # Written whole to a private temporary file, then hard-linked into place: a crash never
        # leaves a half-written key, and the link fails if another process created the key first.
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp.unlink(missing_ok=True)  # a crashed creation's file under a reused PID
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(identity.private_key_protobuf())
                f.flush()
                os.fsync(f.fileno())
            os.link(tmp, path)
        except FileExistsError:  # another process created it first: use theirs
            return cls._load(path)
        except OSError as exc:
            raise IdentityError(f"{path}: cannot create the identity key: {exc.strerror}; "
                                "check that the directory is writable or choose another --home") from None
        finally:
            tmp.unlink(missing_ok=True)
        return identity

    @classmethod
    def _load(cls, path: Path) -> "Identity":
        """Load an existing key file; FileNotFoundError passes through, everything else is IdentityError."""
        try:
            st = path.stat()
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise IdentityError(f"{path}: cannot read the identity key: {exc.strerror}") from None
        if not stat.S_ISREG(st.st_mode):
            raise IdentityError(f"{path}: the identity key is not a regular file; move it away and start again")
        if os.name == "posix" and st.st_mode & 0o077:
            raise IdentityError(f"{path}: the identity key is readable by other users "
                                f"(mode {stat.S_IMODE(st.st_mode):04o}); run `chmod 600 {path}` and start again")
        try:
            with open(path, "rb") as f:
                buf = f.read(_MAX_KEY_FILE + 1)
        except OSError as exc:
            raise IdentityError(f"{path}: cannot read the identity key: {exc.strerror}; "
                                "check its owner and permissions") from None
        try:
            if len(buf) > _MAX_KEY_FILE:
                raise ValueError("it is far too large for a key")
            return cls.from_protobuf(buf, path)
        except ValueError as exc:
            raise IdentityError(f"{path}: not a usable libp2p Ed25519 key file ({exc}); move it away to "
                                "create a new identity, or restore the right file") from None
