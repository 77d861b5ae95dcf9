"""Headless Chromium from Debian (chromium-headless-shell, `make test-deps`) loading a page
as a user's browser does, and what a test reads back: the DOM after the page ran, and a
screenshot decoded far enough to tell a drawn page from a blank one."""
from __future__ import annotations

import os
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

BROWSER = "chromium-headless-shell"


def _run(*args: str, home: Path) -> str:
    # root has no sandbox; the lab is reached directly, never through a proxy
    cmd = [BROWSER, "--no-sandbox", "--no-proxy-server", "--disable-gpu", *args]
    env = {**os.environ, "HOME": str(home)}
    return subprocess.run(cmd, text=True, capture_output=True, timeout=90, check=True,
                          env=env).stdout


def dom(url: str, home: Path) -> str:
    return _run("--dump-dom", url, home=home)


def screenshot(url: str, out: Path, home: Path, size=(1280, 1600)) -> Path:
    _run(f"--window-size={size[0]},{size[1]}", f"--screenshot={out}", url, home=home)
    return out


def available() -> bool:
    return shutil.which(BROWSER) is not None


def _unfilter(raw: bytes, width: int, height: int, bpp: int) -> list[bytes]:
    """PNG's per-row filters undone (RFC 2083 section 6)."""
    stride, rows, prev, i = width * bpp, [], bytearray(width * bpp), 0
    for _ in range(height):
        kind, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b, c = prev[x], prev[x - bpp] if x >= bpp else 0
            if kind == 1:
                line[x] = (line[x] + a) & 0xFF
            elif kind == 2:
                line[x] = (line[x] + b) & 0xFF
            elif kind == 3:
                line[x] = (line[x] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append(bytes(line))
        prev = line
    return rows


def drawn_rows(png: Path) -> tuple[int, int, int]:
    """(width, height, rows that are not one flat colour) of an 8-bit RGB(A) PNG."""
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{png} is not a PNG"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, colour = header[:4]
    assert depth == 8 and colour in (2, 6), f"unexpected PNG format {depth}/{colour}"
    bpp = 4 if colour == 6 else 3
    rows = _unfilter(zlib.decompress(idat), width, height, bpp)
    flat = sum(1 for r in rows if r == r[:bpp] * width)
    return width, height, height - flat
