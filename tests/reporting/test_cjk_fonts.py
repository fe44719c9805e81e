"""Chinese text in a report is drawn as glyphs, not as boxes (issue 16, fonts).

A character no installed font can draw is shown as the fallback glyph: the same hollow box for every character.
Real glyphs differ from character to character, so the test crops each Chinese character of a source excerpt
out of a screenshot and requires distinct characters to give distinct pictures. A second browser whose
fontconfig hides the CJK fonts shows the measurement does tell boxes from glyphs (the first test then fails:
run it with FONTCONFIG_FILE pointing at such a config to see it).
"""

from __future__ import annotations

import io
import re
from itertools import combinations
from pathlib import Path

import numpy as np
import pytest

from grader.orchestration.job import write_report
from grader.reporting.render import TEMPLATE_DIR

from . import samples
from .browser import Chromium, ReportPage, missing

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(missing() is not None, reason=str(missing())),
]

COMMENT = "// 计算每个任务的偏移"  # nine distinct characters, as a lab file comments its code
DISTINCT = 0.15  # mean ink difference between two crops, relative to their ink; boxes stay far below

# Every font that can draw Chinese, rejected; the rest of the system's configuration unchanged.
NO_CJK_FONTS = """<?xml version="1.0"?>
<!DOCTYPE fontconfig SYSTEM "fonts.dtd">
<fontconfig>
  <include ignore_missing="yes">/etc/fonts/fonts.conf</include>
  <selectfont><rejectfont>
    <glob>*CJK*</glob><glob>*cjk*</glob><glob>*wqy*</glob><glob>*SourceHan*</glob><glob>*Droid*Fallback*</glob>
  </rejectfont></selectfont>
</fontconfig>
"""

# Each Chinese character of the excerpt line holding the comment, as a viewport rectangle.
_CHAR_RECTS = r"""(comment) => {
  const line = [...document.querySelectorAll('pre.src .l')].find(l => l.textContent.includes(comment));
  if (!line) return null;
  line.scrollIntoView({block: 'center'});
  const walker = document.createTreeWalker(line, NodeFilter.SHOW_TEXT);
  const rects = [];
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    for (let i = 0; i < node.data.length; i++) {
      if (!/[\u4e00-\u9fff]/.test(node.data[i])) continue;
      const range = document.createRange();
      range.setStart(node, i); range.setEnd(node, i + 1);
      const r = range.getBoundingClientRect();
      rects.push({ch: node.data[i], x: r.left, y: r.top, w: r.width, h: r.height});
    }
  }
  return rects;
}"""


@pytest.fixture(scope="module")
def chinese_report(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("cjk")
    result = samples.compile_error(folder / "submission")
    source = folder / "submission" / "mlu" / "matmul.mlu"
    source.write_text(source.read_text().replace("// the tensor unit does the whole tile", COMMENT))
    return write_report(result, folder / "report.html")


def glyph_crops(page: ReportPage) -> dict[str, np.ndarray]:
    """Each Chinese character of the comment as a grey-level crop of the screenshot: ink = distance from the
    crop's background."""
    from PIL import Image

    rects = page.page.evaluate(_CHAR_RECTS, COMMENT)
    assert rects, "the report shows no excerpt line with the Chinese comment"
    shot = np.asarray(Image.open(io.BytesIO(page.page.screenshot())).convert("L"), dtype=np.float64)
    h = max(1, int(min(r["h"] for r in rects)))
    w = max(1, int(min(r["w"] for r in rects)))
    crops = {}
    for r in rects:
        x, y = round(r["x"]), round(r["y"])
        crop = shot[y : y + h, x : x + w]
        background = np.median(np.concatenate([crop[0], crop[-1], crop[:, 0], crop[:, -1]]))
        crops[r["ch"]] = np.abs(crop - background)
    return crops


def pairwise_difference(crops: dict[str, np.ndarray]) -> float:
    """The smallest difference between two distinct characters' crops (0: two identical pictures)."""
    return min(
        float(np.mean(np.abs(a - b)) / max(np.mean(a), np.mean(b), 1e-9))
        for a, b in combinations(crops.values(), 2)
    )


def test_chinese_comments_in_an_excerpt_are_drawn_as_glyphs(chinese_report):
    with Chromium() as browser:
        page = browser.open(chinese_report)
        try:
            crops = glyph_crops(page)
            assert len(crops) == 9
            assert all(c.mean() > 1 for c in crops.values()), "a character drew no ink at all"
            difference = pairwise_difference(crops)
            assert difference > DISTINCT, f"Chinese characters drawn as identical boxes (difference {difference:.3f})"
            # and the face that drew them is one the report's own font stack names (not a lucky system fallback)
            cdp = page.page.context.new_cdp_session(page.page)
            root = cdp.send("DOM.getDocument")["root"]["nodeId"]
            cdp.send("CSS.enable")
            line = cdp.send("DOM.querySelectorAll", {"nodeId": root, "selector": "pre.src .l"})["nodeIds"]
            families = {
                f["familyName"]
                for node in line
                for f in cdp.send("CSS.getPlatformFontsForNode", {"nodeId": node})["fonts"]
            }
        finally:
            page.close()
    stack = re.search(r"--mono:([^;]+);", (TEMPLATE_DIR / "report.css").read_text()).group(1)
    cjk = [f for f in families if "CJK" in f]
    assert cjk and all(f'"{f}"' in stack for f in cjk), (families, stack)


def test_without_a_cjk_font_the_same_measurement_sees_boxes(chinese_report, tmp_path):
    conf = tmp_path / "fonts.conf"
    conf.write_text(NO_CJK_FONTS)
    with Chromium(env={"FONTCONFIG_FILE": str(conf)}) as browser:
        page = browser.open(chinese_report)
        try:
            crops = glyph_crops(page)
        finally:
            page.close()
    assert len(crops) == 9
    assert pairwise_difference(crops) < DISTINCT
