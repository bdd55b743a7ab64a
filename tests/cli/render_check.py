#!/usr/bin/env python3
"""Opens a page the syncmem command wrote in headless Chromium and checks that it renders.

    render_check.py --work DIR [--expect-plot KIND]... [--expect-color #RRGGBB]... [--expect-text TEXT]...
                    [--not-gpu-from RESULTS.json] -- COMMAND... (which writes DIR/page.html)

Runs COMMAND (it must exit 0), then takes a screenshot of DIR/page.html and its DOM
with Chromium (--headless, no sandbox, no GPU, no network features) and checks:
the screenshot is not blank (many colours, many pixels off the background), the
expected colours are drawn (plot legends and blocks are solid rectangles of
exact colours), and the DOM holds the expected plots (<svg class="plot"
data-plot="KIND">) and texts. With --not-gpu-from, when those results say the
figures are not GPU figures, the page must say so in its red notice box.

Exits 77 (ctest SKIP_RETURN_CODE) when no Chromium is installed.
"""

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import zlib

SKIP = 77
WIDTH, HEIGHT = 1280, 2000
NOTICE_BACKGROUND = "#fdecea"


def find_chromium():
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


def decode_png(data):
    """The pixels of an 8-bit RGB or RGBA PNG, as (width, height, rows of (r, g, b) tuples)."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG file")
    pos, idat, header = 8, [], None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    if header is None:
        raise ValueError("PNG without IHDR")
    width, height, depth, color_type, _, _, interlace = header
    if depth != 8 or color_type not in (2, 6) or interlace != 0:
        raise ValueError(f"unsupported PNG: depth {depth}, colour type {color_type}, interlace {interlace}")
    channels = 3 if color_type == 2 else 4
    raw = zlib.decompress(b"".join(idat))
    stride = width * channels
    rows, previous, at = [], bytearray(stride), 0
    for _ in range(height):
        kind, line = raw[at], bytearray(raw[at + 1:at + 1 + stride])
        at += 1 + stride
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up = previous[i]
            up_left = previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + ((left + up) >> 1)) & 0xFF
            elif kind == 4:
                p = left + up - up_left
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - up_left)
                predictor = left if pa <= pb and pa <= pc else (up if pb <= pc else up_left)
                line[i] = (line[i] + predictor) & 0xFF
            elif kind != 0:
                raise ValueError(f"bad PNG filter {kind}")
        rows.append([tuple(line[i:i + 3]) for i in range(0, stride, channels)])
        previous = line
    return width, height, rows


def hex_color(text):
    text = text.lstrip("#")
    return tuple(int(text[i:i + 2], 16) for i in (0, 2, 4))


def run_chromium(chromium, work, page, *mode):
    profile = os.path.join(work, "chromium-profile")
    env = dict(os.environ, HOME=work, XDG_CONFIG_HOME=work, XDG_CACHE_HOME=work)
    command = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
               "--disable-background-networking", "--disable-sync", "--disable-default-apps",
               "--disable-component-update", "--hide-scrollbars", f"--user-data-dir={profile}",
               f"--window-size={WIDTH},{HEIGHT}", *mode, "file://" + os.path.abspath(page)]
    result = subprocess.run(command, capture_output=True, timeout=180, env=env)
    if result.returncode != 0:
        sys.stderr.write(result.stderr.decode(errors="replace")[-4000:])
        raise SystemExit(f"chromium exited with {result.returncode}")
    return result.stdout.decode(errors="replace")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", required=True)
    parser.add_argument("--expect-plot", action="append", default=[])
    parser.add_argument("--expect-color", action="append", default=[])
    parser.add_argument("--expect-text", action="append", default=[])
    parser.add_argument("--not-gpu-from")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command

    chromium = find_chromium()
    if chromium is None:
        print("SKIP: no Chromium installed (apt-get install chromium); the page was not rendered")
        return SKIP

    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    page = os.path.join(args.work, "page.html")
    result = subprocess.run(command, capture_output=True, timeout=300)
    sys.stdout.write(result.stdout.decode(errors="replace")[-3000:])
    if result.returncode != 0:
        sys.stderr.write(result.stderr.decode(errors="replace"))
        raise SystemExit(f"{' '.join(command)} exited with {result.returncode}")
    if not os.path.exists(page):
        raise SystemExit(f"the command wrote no {page}")

    expect_colors = list(args.expect_color)
    expect_texts = list(args.expect_text)
    if args.not_gpu_from:
        with open(args.not_gpu_from) as f:
            if not json.load(f)["gpu"]:
                expect_colors.append(NOTICE_BACKGROUND)
                expect_texts.append("Not GPU figures")

    screenshot = os.path.join(args.work, "screenshot.png")
    run_chromium(chromium, args.work, page, f"--screenshot={screenshot}")
    with open(screenshot, "rb") as f:
        width, height, rows = decode_png(f.read())
    if (width, height) != (WIDTH, HEIGHT):
        raise SystemExit(f"the screenshot is {width}x{height}, not {WIDTH}x{HEIGHT}")
    counts = {}
    for row in rows:
        for pixel in row:
            counts[pixel] = counts.get(pixel, 0) + 1
    background, background_pixels = max(counts.items(), key=lambda kv: kv[1])
    drawn = 1 - background_pixels / (width * height)
    print(f"screenshot: {len(counts)} colours, {drawn:.1%} of pixels off the background {background}")
    if len(counts) < 32:
        raise SystemExit(f"the page looks blank: only {len(counts)} colours")
    if drawn < 0.05:
        raise SystemExit(f"the page looks blank: only {drawn:.1%} of pixels are drawn")
    for color in expect_colors:
        n = counts.get(hex_color(color), 0)
        print(f"colour {color}: {n} pixels")
        if n < 40:
            raise SystemExit(f"colour {color} is not drawn ({n} pixels): a plot or block did not render")

    dom = run_chromium(chromium, args.work, page, "--dump-dom")
    plots = dom.count('<svg class="plot"')
    print(f"DOM: {len(dom)} characters, {plots} plots")
    if plots == 0:
        raise SystemExit("the DOM holds no plot")
    for kind in args.expect_plot:
        if f'data-plot="{kind}"' not in dom:
            raise SystemExit(f'the DOM has no plot of kind "{kind}"')
    for text in expect_texts:
        if text not in dom:
            raise SystemExit(f"the DOM lacks the text '{text}'")
    print("renders: not blank, plots present")
    return 0


if __name__ == "__main__":
    sys.exit(main())
