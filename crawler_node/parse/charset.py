"""Which character encoding a page is in, and its text (pure).

The order is the HTML standard's encoding sniffing algorithm (section 13.2.3.2), as browsers
apply it: a byte order mark, then the charset of the HTTP ``Content-Type``, then a ``<meta>``
found by the prescan of the first 1024 bytes, then sniffing, then windows-1252, the Encoding
Standard's default for an unknown locale. Labels mean what the WHATWG Encoding Standard says
("Names and labels", https://encoding.spec.whatwg.org/#names-and-labels), not what Python's
codec registry says: there "latin1" and "us-ascii" are strict ISO-8859-1 and ASCII, "gb2312"
lacks GBK's characters, "shift_jis" lacks Microsoft's, and "x-user-defined" does not exist.

Sniffing is "valid UTF-8, then UTF-8", nothing statistical: it costs one strict decode of what
is parsed anyway, it is what Chrome and Firefox conclude for any page that is valid UTF-8, and
a statistical detector (chardet, charset-normalizer) costs tens of milliseconds per page and
still guesses wrong on short pages.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass
from functools import lru_cache

PRESCAN_BYTES = 1024  # the HTML standard's prescan reads this much

# WHATWG encoding name -> its labels (the Encoding Standard's table, in its order).
_LABELS: dict[str, tuple[str, ...]] = {
    "utf-8": ("unicode-1-1-utf-8", "unicode11utf8", "unicode20utf8", "utf-8", "utf8", "x-unicode20utf8"),
    "ibm866": ("866", "cp866", "csibm866", "ibm866"),
    "iso-8859-2": ("csisolatin2", "iso-8859-2", "iso-ir-101", "iso8859-2", "iso88592", "iso_8859-2",
                   "iso_8859-2:1987", "l2", "latin2"),
    "iso-8859-3": ("csisolatin3", "iso-8859-3", "iso-ir-109", "iso8859-3", "iso88593", "iso_8859-3",
                   "iso_8859-3:1988", "l3", "latin3"),
    "iso-8859-4": ("csisolatin4", "iso-8859-4", "iso-ir-110", "iso8859-4", "iso88594", "iso_8859-4",
                   "iso_8859-4:1988", "l4", "latin4"),
    "iso-8859-5": ("csisolatincyrillic", "cyrillic", "iso-8859-5", "iso-ir-144", "iso8859-5", "iso88595",
                   "iso_8859-5", "iso_8859-5:1988"),
    "iso-8859-6": ("arabic", "asmo-708", "csiso88596e", "csiso88596i", "csisolatinarabic", "ecma-114",
                   "iso-8859-6", "iso-8859-6-e", "iso-8859-6-i", "iso-ir-127", "iso8859-6", "iso88596",
                   "iso_8859-6", "iso_8859-6:1987"),
    "iso-8859-7": ("csisolatingreek", "ecma-118", "elot_928", "greek", "greek8", "iso-8859-7", "iso-ir-126",
                   "iso8859-7", "iso88597", "iso_8859-7", "iso_8859-7:1987", "sun_eu_greek"),
    "iso-8859-8": ("csiso88598e", "csisolatinhebrew", "hebrew", "iso-8859-8", "iso-8859-8-e", "iso-ir-138",
                   "iso8859-8", "iso88598", "iso_8859-8", "iso_8859-8:1988", "visual"),
    "iso-8859-8-i": ("csiso88598i", "iso-8859-8-i", "logical"),
    "iso-8859-10": ("csisolatin6", "iso-8859-10", "iso-ir-157", "iso8859-10", "iso885910", "l6", "latin6"),
    "iso-8859-13": ("iso-8859-13", "iso8859-13", "iso885913"),
    "iso-8859-14": ("iso-8859-14", "iso8859-14", "iso885914"),
    "iso-8859-15": ("csisolatin9", "iso-8859-15", "iso8859-15", "iso885915", "iso_8859-15", "l9"),
    "iso-8859-16": ("iso-8859-16",),
    "koi8-r": ("cskoi8r", "koi", "koi8", "koi8-r", "koi8_r"),
    "koi8-u": ("koi8-ru", "koi8-u"),
    "macintosh": ("csmacintosh", "mac", "macintosh", "x-mac-roman"),
    "windows-874": ("dos-874", "iso-8859-11", "iso8859-11", "iso885911", "tis-620", "windows-874"),
    "windows-1250": ("cp1250", "windows-1250", "x-cp1250"),
    "windows-1251": ("cp1251", "windows-1251", "x-cp1251"),
    "windows-1252": ("ansi_x3.4-1968", "ascii", "cp1252", "cp819", "csisolatin1", "ibm819", "iso-8859-1",
                     "iso-ir-100", "iso8859-1", "iso88591", "iso_8859-1", "iso_8859-1:1987", "l1", "latin1",
                     "us-ascii", "windows-1252", "x-cp1252"),
    "windows-1253": ("cp1253", "windows-1253", "x-cp1253"),
    "windows-1254": ("cp1254", "csisolatin5", "iso-8859-9", "iso-ir-148", "iso8859-9", "iso88599", "iso_8859-9",
                     "iso_8859-9:1989", "l5", "latin5", "windows-1254", "x-cp1254"),
    "windows-1255": ("cp1255", "windows-1255", "x-cp1255"),
    "windows-1256": ("cp1256", "windows-1256", "x-cp1256"),
    "windows-1257": ("cp1257", "windows-1257", "x-cp1257"),
    "windows-1258": ("cp1258", "windows-1258", "x-cp1258"),
    "x-mac-cyrillic": ("x-mac-cyrillic", "x-mac-ukrainian"),
    "gbk": ("chinese", "csgb2312", "csiso58gb231280", "gb2312", "gb_2312", "gb_2312-80", "gbk", "iso-ir-58",
            "x-gbk"),
    "gb18030": ("gb18030",),
    "big5": ("big5", "big5-hkscs", "cn-big5", "csbig5", "x-x-big5"),
    "euc-jp": ("cseucpkdfmtjapanese", "euc-jp", "x-euc-jp"),
    "iso-2022-jp": ("csiso2022jp", "iso-2022-jp"),
    "shift_jis": ("csshiftjis", "ms932", "ms_kanji", "shift-jis", "shift_jis", "sjis", "windows-31j", "x-sjis"),
    "euc-kr": ("cseuckr", "csksc56011987", "euc-kr", "iso-ir-149", "korean", "ks_c_5601-1987",
               "ks_c_5601-1989", "ksc5601", "ksc_5601", "windows-949"),
    "replacement": ("csiso2022kr", "hz-gb-2312", "iso-2022-cn", "iso-2022-cn-ext", "iso-2022-kr", "replacement"),
    "utf-16be": ("unicodefffe", "utf-16be"),
    "utf-16le": ("csunicode", "iso-10646-ucs-2", "ucs-2", "unicode", "unicodefeff", "utf-16", "utf-16le"),
    "x-user-defined": ("x-user-defined",),
}
ENCODING_OF_LABEL: dict[str, str] = {label: name for name, labels in _LABELS.items() for label in labels}

# The Python codec that decodes each WHATWG encoding. Where the standard's decoder is a
# superset of the like-named legacy encoding, it is the superset's codec: the standard's
# gbk decoder is its gb18030 decoder, big5 includes HKSCS, shift_jis is Windows-31J (cp932),
# euc-kr is windows-949. "replacement" and "x-user-defined" have no codec (see _decode_as).
_CODEC: dict[str, str] = {
    "utf-8": "utf-8", "ibm866": "cp866", "iso-8859-8-i": "iso8859-8", "koi8-r": "koi8-r", "koi8-u": "koi8-u",
    "macintosh": "mac-roman", "windows-874": "cp874", "x-mac-cyrillic": "mac-cyrillic", "gbk": "gb18030",
    "gb18030": "gb18030", "big5": "big5hkscs", "euc-jp": "euc-jp", "iso-2022-jp": "iso2022-jp",
    "shift_jis": "cp932", "euc-kr": "cp949", "utf-16be": "utf-16-be", "utf-16le": "utf-16-le",
    **{f"iso-8859-{n}": f"iso8859-{n}" for n in (2, 3, 4, 5, 6, 7, 8, 10, 13, 14, 15, 16)},
    **{f"windows-125{n}": f"cp125{n}" for n in range(9)},
}
_BOMS = ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_BE, "utf-16be"), (codecs.BOM_UTF16_LE, "utf-16le"))
# windows-1252's five bytes Python leaves undefined decode to the C1 control of the same value.
_CP1252_UNDEFINED = {0xDC00 + byte: byte for byte in (0x81, 0x8D, 0x8F, 0x90, 0x9D)}
# x-user-defined: bytes 0x80-0xFF are U+F780-U+F7FF (read as latin-1 first, which is byte = code point).
_X_USER_DEFINED = {byte: 0xF700 + byte for byte in range(0x80, 0x100)}
_SPACES = re.compile(rb"[\t\n\x0c\r ]*")
_SPACES_OR_SLASHES = re.compile(rb"[\t\n\x0c\r /]*")
_NAME = re.compile(rb"=?[^\t\n\x0c\r />=]*")  # a first "=" belongs to the name (the standard's rule)
_TAG_WORD = re.compile(rb"[^\t\n\x0c\r >]*")  # a tag name, or an unquoted value
_SPACE_OR_SLASH = (b"\t", b"\n", b"\x0c", b"\r", b" ", b"/")
_ASCII_LOWER = {code: code + 32 for code in range(0x41, 0x5B)}


@dataclass(frozen=True, slots=True)
class DecodedText:
    text: str
    encoding: str  # the WHATWG name of the encoding the text was decoded from
    source: str  # what decided it: "bom", "http", "meta", "sniff" or "default"


@lru_cache(maxsize=256)
def encoding_for_label(label: str | None) -> str | None:
    """WHATWG "get an encoding": the encoding a label names, or None for an unknown label.
    Cached: a crawl meets a handful of labels, spelled a handful of ways."""
    if not label or not label.isascii():  # every label is ASCII; str.lower() is not ASCII-only
        return None
    return ENCODING_OF_LABEL.get(label.strip("\t\n\x0c\r ").lower())


# The URL Standard's "encoding" of a document's links: its "get an output encoding" makes UTF-16
# and "replacement" UTF-8, and UTF-8 needs no codec (the parser's own). The rest are encoded with
# the decoder's codec, except where the standard's encoder is narrower than that superset:
# gbk is Python's gbk (the standard's gbk encoder also writes U+20AC as 0x80, which Python's
# lacks: a euro in such a query becomes a character reference). x-user-defined has no Python
# codec and stays UTF-8 (a label only an HTTP header can give; its pages are not text).
_URL_QUERY_CODEC: dict[str, str] = {
    name: codec for name, codec in {**_CODEC, "gbk": "gbk"}.items()
    if name not in ("utf-8", "utf-16be", "utf-16le")
}


def url_query_codec(encoding: str) -> str | None:
    """The Python codec that encodes the query of a link in a document decoded as ``encoding``
    (a WHATWG name, as DecodedText.encoding holds it), or None where that is UTF-8: see
    core.urls.normalize_url's ``query_codec``."""
    return _URL_QUERY_CODEC.get(encoding)


def decode_document(body: bytes, http_charset: str | None = None, *, complete: bool = True) -> DecodedText:
    """The text of an HTML document: BOM, then ``http_charset`` (the label in the HTTP
    Content-Type, if any; an unknown one is ignored), then the ``<meta>`` prescan, then
    "valid UTF-8", then windows-1252. Undecodable bytes become U+FFFD, as in browsers.
    ``complete=False``: ``body`` is the start of a longer document, so a character cut at
    its end does not make it invalid UTF-8."""
    for bom, bom_encoding in _BOMS:
        if body.startswith(bom):
            return DecodedText(_decode_as(body[len(bom):], bom_encoding), bom_encoding, "bom")
    encoding = encoding_for_label(http_charset)
    if encoding is not None:
        return DecodedText(_decode_as(body, encoding), encoding, "http")
    encoding = prescan(body[:PRESCAN_BYTES])
    if encoding is not None:
        return DecodedText(_decode_as(body, encoding), encoding, "meta")
    try:
        text = codecs.getincrementaldecoder("utf-8")("strict").decode(body, final=complete)
    except UnicodeDecodeError:
        return DecodedText(_decode_as(body, "windows-1252"), "windows-1252", "default")
    return DecodedText(text, "utf-8", "sniff")


def _decode_as(body: bytes, encoding: str) -> str:
    if encoding == "windows-1252":
        try:
            return body.decode("cp1252")
        except UnicodeDecodeError:
            return body.decode("cp1252", "surrogateescape").translate(_CP1252_UNDEFINED)
    if encoding == "x-user-defined":
        return body.decode("latin-1").translate(_X_USER_DEFINED)
    if encoding == "replacement":
        # The standard's guard against encodings that hide markup (ISO-2022-KR, HZ): one
        # U+FFFD for the whole document, so nothing in it is read.
        return "\ufffd" if body else ""
    return body.decode(_CODEC[encoding], errors="replace")


# ----------------------------------------------------------------- the prescan
def prescan(head: bytes) -> str | None:
    """The HTML standard's "prescan a byte stream to determine its encoding" over ``head``
    (the first 1024 bytes): a ``<meta charset>`` or ``<meta http-equiv=content-type
    content="...; charset=...">`` outside comments, or a UTF-16 XML declaration. Returns a
    WHATWG encoding name or None. A meta naming UTF-16 means UTF-8 (a document the prescan
    could read as ASCII is not UTF-16), and x-user-defined means windows-1252."""
    if head.startswith(b"<\x00?\x00x\x00"):
        return "utf-16le"
    if head.startswith(b"\x00<\x00?\x00x"):
        return "utf-16be"
    # Only a <meta> can declare an encoding: without one there is nothing to find, and most
    # pages are answered here, in C (the scan below is Python, a few microseconds per tag).
    if b"<meta" not in head.lower():
        return None
    end = len(head)
    position = head.find(b"<")
    while 0 <= position < end:  # every branch moves forward
        if head.startswith(b"<!--", position):
            close = head.find(b"-->", position + 2)  # "<!-->" is a whole comment
            if close < 0:
                return None
            position = close + 3
        elif head[position:position + 5].lower() == b"<meta" and head[position + 5:position + 6] in _SPACE_OR_SLASH:
            position, encoding = _meta(head, position + 5)
            if encoding is not None:
                return encoding
        elif head.startswith(b"<", position) and _starts_tag(head, position + 1):
            position = _skip_tag(head, position + 1)
        elif head[position:position + 2] in (b"<!", b"</", b"<?"):
            close = head.find(b">", position + 2)
            if close < 0:
                return None
            position = close + 1
        else:
            position += 1
        position = head.find(b"<", position)  # text between tags cannot matter
    return None


def _starts_tag(head: bytes, position: int) -> bool:
    # "<" then a letter, or "</" then a letter.
    if head[position:position + 1] == b"/":
        position += 1
    return head[position:position + 1].isalpha()


def _skip_tag(head: bytes, position: int) -> int:
    position = _match_end(_TAG_WORD, head, position)
    while True:
        position, attribute = _attribute(head, position)
        if attribute is None:
            return position + 1


def _meta(head: bytes, position: int) -> tuple[int, str | None]:
    """A ``<meta>``'s attributes from ``position`` (after "<meta"): where the scan goes on,
    and the encoding the tag declares (None if it declares none the standard accepts)."""
    seen: set[str] = set()
    got_pragma = False
    need_pragma: bool | None = None
    charset: str | None = None
    while True:
        position, attribute = _attribute(head, position)
        if attribute is None:
            break
        name, value = attribute
        if name in seen:
            continue
        seen.add(name)
        if name == "http-equiv":
            got_pragma = got_pragma or value == "content-type"
        elif name == "content":
            from_content = charset_from_content(value)
            if from_content is not None and charset is None:
                charset, need_pragma = from_content, True
        elif name == "charset":
            charset, need_pragma = encoding_for_label(value), False
    if position >= len(head):
        return position, None  # the input ended inside the tag: the standard aborts the prescan
    position += 1
    if need_pragma is None or (need_pragma and not got_pragma) or charset is None:
        return position, None
    if charset in ("utf-16be", "utf-16le"):
        return position, "utf-8"
    return position, "windows-1252" if charset == "x-user-defined" else charset


def _attribute(head: bytes, position: int) -> tuple[int, tuple[str, str] | None]:
    """The standard's "get an attribute": (position after it, (name, value)), or the position
    of the tag's end (or of the input's) and None when the tag has no more attributes. Names
    and values are lower-cased; bytes are read as their code points. The standard's byte
    loops are regular expressions here: the same bytes, consumed in C."""
    end = len(head)
    position = _match_end(_SPACES_OR_SLASHES, head, position)
    if position >= end or head[position] == 0x3E:
        return position, None
    name_end = _match_end(_NAME, head, position)
    name, position = _text(head[position:name_end]), name_end
    if position >= end:
        return position, None
    if head[position] in (0x2F, 0x3E):
        return position, (name, "")
    if head[position] != 0x3D:  # whitespace after the name: an "=" may still follow
        position = _match_end(_SPACES, head, position)
        if position >= end or head[position] != 0x3D:
            return position, (name, "")
    position = _match_end(_SPACES, head, position + 1)
    if position >= end:
        return position, None
    quote = head[position]
    if quote in (0x22, 0x27):
        close = head.find(bytes((quote,)), position + 1)
        if close < 0:
            return end, None
        return close + 1, (name, _text(head[position + 1:close]))
    if quote == 0x3E:
        return position, (name, "")
    value_end = _match_end(_TAG_WORD, head, position)
    if value_end >= end:
        return value_end, None
    return value_end, (name, _text(head[position:value_end]))


def _match_end(pattern: re.Pattern[bytes], head: bytes, position: int) -> int:
    match = pattern.match(head, position)
    assert match is not None  # each pattern matches the empty string
    return match.end()


def _text(raw: bytes | bytearray) -> str:
    return bytes(raw).lower().decode("latin-1")  # bytes.lower() changes A-Z only, as the standard asks


def charset_from_content(content: str) -> str | None:
    """The HTML standard's "extracting a character encoding from a meta element": the
    encoding named after "charset=" in a ``content`` attribute, or None."""
    position = 0
    lowered = content.translate(_ASCII_LOWER)  # same length as content: indices agree
    while True:
        found = lowered.find("charset", position)
        if found < 0:
            return None
        position = found + 7
        while position < len(content) and content[position] in "\t\n\x0c\r ":
            position += 1
        if content[position:position + 1] == "=":
            break
    position += 1
    while position < len(content) and content[position] in "\t\n\x0c\r ":
        position += 1
    if position >= len(content):
        return None
    quote = content[position]
    if quote in "\"'":
        close = content.find(quote, position + 1)
        return None if close < 0 else encoding_for_label(content[position + 1:close])
    stop = position
    while stop < len(content) and content[stop] not in "\t\n\x0c\r ;":
        stop += 1
    return encoding_for_label(content[position:stop])
