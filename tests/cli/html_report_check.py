#!/usr/bin/python3
"""The checks of tests/cli/html_report_browser_test.sh on what headless chromium made of the HTML
run report: REPORT.json (the same jobs' `kiln result --report json`, the expectation), DOM.html
(--dump-dom) and SHOT.png (--screenshot). Exit 0 and one "ok" line, or an AssertionError.
Usage: html_report_check.py REPORT.json DOM.html SHOT.png"""
import json, re, struct, sys, zlib

doc = json.load(open(sys.argv[1]))
dom = open(sys.argv[2]).read()
configs = doc["configurations"]
assert [c["mode"] for c in configs] == ["chained", "per_layer"], [c["mode"] for c in configs]
layers = configs[0]["layers"]
failing = {i for c in configs for i, l in enumerate(c["layers"]) if l["passed"] is False}
assert failing, "the precision was chosen so that a layer fails; none did"
assert len(failing) < len(layers), "every layer fails: nothing to tell the marked rows from"

# The DOM as the browser built it: one tr.layer per layer (the modes side by side, not stacked).
rows = re.findall(r'<tr class="(layer[^"]*)" data-pass="(\w+)"><td>(\d+)</td><td class="l">([^<]*)</td>', dom)
assert len(rows) == len(layers), (len(rows), len(layers))
for (cls, passed, index, name), layer in zip(rows, layers):
    assert name == layer["name"], (name, layer["name"])
    fail = int(index) in failing
    assert ("fail" in cls.split()) == fail, (index, cls)
    compared = any(c["layers"][int(index)]["compared"] for c in configs)
    assert passed == ("false" if fail else "true" if compared else "none"), (index, passed)
for chart in ("pcc", "error"):
    assert len(re.findall(r'<svg class="chart %s"' % chart, dom)) == 1, chart
assert re.search(r'<path class="threshold" d="M', dom), "no threshold line in the PCC chart"
assert len(re.findall(r'<circle [^>]*class="fail"', dom)) >= len(failing), "failing layers not marked in the chart"
assert "<th>PCC<br>chained</th><th>PCC<br>per_layer</th>" in dom

# The screenshot: decode the PNG (8-bit RGB/RGBA, filters 0-4) and look at its pixels.
png = open(sys.argv[3], "rb").read()
assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
pos, idat, width = 8, b"", 0
while pos < len(png):
    n, kind = struct.unpack(">I4s", png[pos:pos + 8])
    data = png[pos + 8:pos + 8 + n]
    if kind == b"IHDR":
        width, height, depth, ctype = struct.unpack(">IIBB", data[:10])
        assert depth == 8 and ctype in (2, 6), (depth, ctype)
        bpp = 3 if ctype == 2 else 4
    elif kind == b"IDAT":
        idat += data
    pos += 12 + n
raw = zlib.decompress(idat)
stride = width * bpp
prev = bytearray(stride)
colours, non_white = set(), 0
for y in range(height):
    f = raw[y * (stride + 1)]
    line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
    for x in range(stride):
        a = line[x - bpp] if x >= bpp else 0
        b = prev[x]
        c = prev[x - bpp] if x >= bpp else 0
        if f == 1: line[x] = (line[x] + a) & 255
        elif f == 2: line[x] = (line[x] + b) & 255
        elif f == 3: line[x] = (line[x] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    for x in range(0, stride, bpp * 4):  # every 4th pixel is plenty
        px = bytes(line[x:x + 3])
        colours.add(px)
        non_white += px != b"\xff\xff\xff"
    prev = line
sampled = height * ((width + 3) // 4)
assert len(colours) >= 8, "screenshot has %d colours: blank?" % len(colours)
assert non_white > sampled // 50, "screenshot is %d/%d non-white: blank?" % (non_white, sampled)
print("ok: %d rows, %d failing (%s), %dx%d screenshot, %d colours, %.1f%% non-white" % (
    len(rows), len(failing), ",".join(layers[i]["name"] for i in sorted(failing)), width, height, len(colours),
    100.0 * non_white / sampled))
