# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""The primary keys of an OpenPGP keyring (binary, as NVIDIA's doca_keyring.gpg, or ASCII-armored, as 3bf863cc.pub)
and their fingerprints (RFC 4880 section 12.2 for v4 keys, RFC 9580 for v6), read without gpg; and the armored
form apt wants in a .asc file."""

from __future__ import annotations

import base64
import hashlib
import re

PUBLIC_KEY = 6
SECRET_KEY = 5
ARMOR = re.compile(r"-----BEGIN PGP PUBLIC KEY BLOCK-----\r?\n(.*?)-----END PGP PUBLIC KEY BLOCK-----", re.S)


class KeyringError(ValueError):
    """Not an OpenPGP public keyring."""


def dearmor(data):
    """The binary packets of data: itself when binary, the decoded blocks when ASCII-armored."""
    text = data.decode("ascii", "replace") if isinstance(data, bytes) else data
    blocks = ARMOR.findall(text)
    if not blocks:
        if isinstance(data, bytes) and data[:1] and data[0] & 0x80:
            return data
        raise KeyringError("neither an OpenPGP keyring nor an ASCII-armored public key block")
    binary = b""
    for block in blocks:
        lines = block.replace("\r", "").split("\n")
        if "" in lines:  # armor headers (Version:, Comment:) end at the first empty line
            lines = lines[lines.index("") + 1:]
        body = "".join(line.strip() for line in lines if line.strip() and not line.startswith("="))
        try:
            binary += base64.b64decode(body, validate=True)
        except ValueError as exc:
            raise KeyringError("a damaged ASCII-armored block: %s" % exc)
    return binary


def packets(binary):
    """(tag, body) of each packet."""
    pos = 0
    while pos < len(binary):
        first = binary[pos]
        if not first & 0x80:
            raise KeyringError("not an OpenPGP packet at byte %d" % pos)
        if first & 0x40:  # new format
            tag = first & 0x3F
            pos += 1
            octet = binary[pos]
            if octet < 192:
                length, pos = octet, pos + 1
            elif octet < 224:
                length, pos = ((octet - 192) << 8) + binary[pos + 1] + 192, pos + 2
            elif octet == 255:
                length, pos = int.from_bytes(binary[pos + 1:pos + 5], "big"), pos + 5
            else:
                raise KeyringError("a partial-length packet, which no keyring holds")
        else:  # old format
            tag = (first >> 2) & 0x0F
            kind = first & 0x03
            pos += 1
            if kind == 3:
                length = len(binary) - pos
            else:
                size = (1, 2, 4)[kind]
                length, pos = int.from_bytes(binary[pos:pos + size], "big"), pos + size
        body = binary[pos:pos + length]
        if len(body) != length:
            raise KeyringError("a truncated packet")
        yield tag, body
        pos += length


def fingerprint(body):
    """The fingerprint of a public key packet's body, upper-case hex."""
    version = body[0] if body else None
    if version == 4:
        return hashlib.sha1(b"\x99" + len(body).to_bytes(2, "big") + body).hexdigest().upper()
    if version == 6:
        return hashlib.sha256(b"\x9b" + len(body).to_bytes(4, "big") + body).hexdigest().upper()
    if version == 5:
        return hashlib.sha256(b"\x9a" + len(body).to_bytes(4, "big") + body).hexdigest().upper()
    raise KeyringError("a version %s key, which apt does not use" % version)


def primary_fingerprints(data):
    """Fingerprints of the keyring's primary keys (each signs for itself and its subkeys). KeyringError when data
    holds none, or a secret key."""
    found = []
    for tag, body in packets(dearmor(data)):
        if tag == SECRET_KEY:
            raise KeyringError("a secret key, not a public keyring")
        if tag == PUBLIC_KEY:
            found.append(fingerprint(body))
    if not found:
        raise KeyringError("no public key")
    return found


def normalize(value):
    """A fingerprint as written anywhere (spaces, lower case, 0x) in the form compared."""
    text = re.sub(r"\s+", "", str(value)).upper()
    return text[2:] if text.startswith("0X") else text


def armor(binary):
    """binary as an ASCII-armored public key block (RFC 4880 section 6), with its CRC-24."""
    crc = 0xB704CE
    for byte in binary:
        crc ^= byte << 16
        for dummy in range(8):
            crc <<= 1
            if crc & 0x1000000:
                crc ^= 0x1864CFB
    encoded = base64.b64encode(binary).decode("ascii")
    lines = [encoded[i:i + 64] for i in range(0, len(encoded), 64)]
    checksum = base64.b64encode((crc & 0xFFFFFF).to_bytes(3, "big")).decode("ascii")
    return ("-----BEGIN PGP PUBLIC KEY BLOCK-----\n\n" + "\n".join(lines) + "\n=" + checksum
            + "\n-----END PGP PUBLIC KEY BLOCK-----\n").encode("ascii")
