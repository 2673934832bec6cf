"""What Tencent's two WeChat platforms share on their callbacks: the AES message encryption of WeCom apps
and of WeChat Official Accounts in safe mode (`WeChatCrypto`: one layout, the receive id being the corp id
or the account's AppID), and reading their XML bodies safely (`xml_document`, `xml_text`). The adapters
(`wecom.py`, `wechat_oa.py`) keep everything else of their platform."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import struct
import xml.etree.ElementTree as ET  # the element type and ParseError only: parsing is defusedxml's

import defusedxml.ElementTree as SafeET
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from defusedxml import DefusedXmlException

from platforms.interface import InboundRefusedError

AES_BLOCK = 32  # both pad to 32 bytes (PKCS#7 with a 32-byte block), not AES's 16


class WeChatCrypto:
    """The callback encryption: AES-256-CBC with the key Base64-decoded from `EncodingAESKey + "="` and
    its first 16 bytes as the IV, over 16 random bytes, the message's length (4 bytes, big-endian), the
    message and the receive id (WeCom: the corp id; an Official Account: its AppID), PKCS#7-padded to 32
    bytes; the signature is SHA-1 of the token, timestamp, nonce and ciphertext sorted and joined."""

    def __init__(self, *, token: str, encoding_aes_key: str, receive_id: str) -> None:
        self.token = token
        self.receive_id = receive_id
        try:
            self.key = base64.b64decode(encoding_aes_key + "=", validate=True)
        except (binascii.Error, ValueError):
            self.key = b""
        if len(self.key) != 32:
            raise ValueError("the encoding_aes_key is not 43 Base64 characters")

    def signature(self, timestamp: str, nonce: str, encrypted: str) -> str:
        return sha1_signature(self.token, timestamp, nonce, encrypted)

    def decrypt(self, encrypted: str) -> bytes:
        sealed = base64.b64decode(encrypted, validate=True)
        if not sealed or len(sealed) % 16:
            raise ValueError("not AES-CBC ciphertext")
        decryptor = Cipher(algorithms.AES(self.key), modes.CBC(self.key[:16])).decryptor()
        plain = decryptor.update(sealed) + decryptor.finalize()
        pad = plain[-1]
        if not 1 <= pad <= AES_BLOCK or plain[-pad:] != bytes([pad]) * pad:
            raise ValueError("bad padding")
        plain = plain[:-pad]
        if len(plain) < 20:
            raise ValueError("too short")
        (length,) = struct.unpack(">I", plain[16:20])
        message, receive_id = plain[20 : 20 + length], plain[20 + length :]
        if len(message) != length or not hmac.compare_digest(receive_id, self.receive_id.encode()):
            raise ValueError("the message is not for this receive id")
        return message

    def encrypt(self, message: bytes) -> str:
        """What `decrypt` reads: an Official Account's passive reply in safe mode is sealed so."""
        body = os.urandom(16) + struct.pack(">I", len(message)) + message + self.receive_id.encode()
        pad = AES_BLOCK - len(body) % AES_BLOCK
        body += bytes([pad]) * pad
        encryptor = Cipher(algorithms.AES(self.key), modes.CBC(self.key[:16])).encryptor()
        return base64.b64encode(encryptor.update(body) + encryptor.finalize()).decode()


def sha1_signature(*parts: str) -> str:
    """SHA-1 of the parts sorted and joined: the platforms' callback signature (SHA-1 is their choice)."""
    return hashlib.sha1("".join(sorted(parts)).encode()).hexdigest()


def xml_document(raw: bytes | str, what: str) -> ET.Element:
    """An XML document read by defusedxml (no entities, no DTDs, no external references), or a 400."""
    try:
        return SafeET.fromstring(raw, forbid_dtd=True)
    except (ET.ParseError, DefusedXmlException, ValueError):
        raise InboundRefusedError("malformed", f"{what}: not XML, or XML with entities or a DTD", status=400) from None


def xml_text(element: ET.Element, name: str) -> str:
    return (element.findtext(name) or "").strip()
