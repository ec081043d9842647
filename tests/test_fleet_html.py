"""gpubw fleet --format html (fleet/html.py): one self-contained page that an HTML parser
reads whole, a heatmap per fleet and one image per finding, every name escaped; without
matplotlib, one line and exit 2."""

from __future__ import annotations

import base64
import builtins
import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from _cli import run_cli, usage_error
from _fleet import slow_host_link, slow_pair, small_suite, write_fleet

pytest.importorskip("matplotlib")

HOSTILE = '<script>alert("x")</script>&<img src=http://e.example/x> $\\notex{$'


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One simulated h200x2 report of the default suite (small buffers), as a dict."""
    return small_suite(tmp_path_factory.mktemp("base") / "r.json")


class Page(HTMLParser):
    """Every start tag with its attributes, the text, and the tags left open."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.open: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag not in {"img", "meta", "br", "link"}:
            self.open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        assert self.open and self.open[-1] == tag, (tag, self.open[-5:])
        self.open.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def named(self, tag: str) -> list[dict[str, str | None]]:
        return [a for t, a in self.tags if t == tag]


def parse(text: str) -> Page:
    page = Page()
    page.feed(text)
    page.close()
    assert page.open == [], page.open  # every element closed, in order
    return page


def images(page: Page) -> list[bytes]:
    """The page's images, decoded: each must be an inlined PNG."""
    out = []
    for attrs in page.named("img"):
        src = attrs["src"] or ""
        assert src.startswith("data:image/png;base64,"), src[:60]
        data = base64.b64decode(src.split(",", 1)[1], validate=True)
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        out.append(data)
    return out


def _html(capsys: Any, *argv: str) -> tuple[int, str]:
    code, out, err = run_cli(capsys, "fleet", *argv, "--format", "html")
    assert code in (0, 3), err
    return code, out


def test_the_page_parses_with_a_heatmap_and_one_image_per_finding(
    tmp_path: Path, base: dict[str, Any], capsys: Any
) -> None:
    """A fleet with a slow host link and a slow pair: exit 3; the page parses, has the
    heatmap and one image per finding (each inlined PNG), a table row per finding, and no
    URL outside itself."""
    faults = {"n002": slow_host_link(1, 0.7), "n004": slow_pair(0, 1, 0.7)}
    write_fleet(base, tmp_path / "r", 8, faults)
    out = tmp_path / "fleet.html"
    code, printed = _html(capsys, str(tmp_path / "r"), "-o", str(out))
    assert code == 3 and printed == ""
    text = out.read_text(encoding="utf-8")
    page = parse(text)
    found = json.loads(run_cli(capsys, "fleet", str(tmp_path / "r"), "--format", "json")[1])
    assert len(found["findings"]) == 2
    assert len(images(page)) == 1 + len(found["findings"])
    assert len(page.named("table")) == 1 and len(page.named("tr")) == 1 + len(found["findings"])
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", text), "an external URL"
    assert not page.named("script") and not page.named("link")
    words = " ".join(page.text)
    assert "GPU 1 of node n002: host link" in words and "GPU pair 0 <-> 1 of node n004" in words


def test_a_healthy_fleet_has_the_heatmap_only(
    tmp_path: Path, base: dict[str, Any], capsys: Any
) -> None:
    """No finding: exit 0, one image (the heatmap), and the page says every node is within."""
    write_fleet(base, tmp_path / "r", 6)
    code, out = _html(capsys, str(tmp_path / "r"))
    page = parse(out)
    assert code == 0 and len(images(page)) == 1
    assert "Every node is within its fleet." in " ".join(page.text)


def test_a_hostile_host_name_is_escaped(tmp_path: Path, base: dict[str, Any], capsys: Any) -> None:
    """A host name with markup (and TeX that matplotlib would choke on), slow so that it is
    named in the findings, the images and the table: the page has no element of it, and
    shows its text as it was."""
    write_fleet(base, tmp_path / "r", 6, {"n001": slow_host_link(0, 0.6)})
    victim = tmp_path / "r" / "n001.json"
    doc = json.loads(victim.read_text())
    doc["host"] = HOSTILE
    victim.write_text(json.dumps(doc))
    _, out = _html(capsys, str(tmp_path / "r"))
    page = parse(out)
    assert not page.named("script")
    assert len(page.named("img")) == 2  # the heatmap and the finding: none of the host's
    assert HOSTILE in "".join(page.text)
    assert HOSTILE not in out and "&lt;script&gt;" in out


def test_the_page_shows_the_gpus_trends_with_since(
    tmp_path: Path, base: dict[str, Any], capsys: Any
) -> None:
    """With --db and --since the page holds the GPUs' trends: a second table, a row per GPU."""
    write_fleet(base, tmp_path / "r", 5)
    db = str(tmp_path / "h.db")
    _, out = _html(capsys, str(tmp_path / "r"), "--db", db, "--since", "3650d")
    page = parse(out)
    assert len(page.named("table")) == 1  # no finding: the trends' table only
    assert len(page.named("tr")) == 1 + 5 * len(base["devices"])
    assert "History: 10 GPU(s), 0 fell" in " ".join(page.text)


def test_without_matplotlib_html_is_one_line_and_exit_2(
    tmp_path: Path, base: dict[str, Any], capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without matplotlib, --format html says how to install it, before reading a report."""
    real = builtins.__import__

    def no_matplotlib(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    line = usage_error(capsys, "fleet", str(tmp_path / "absent"), "--format", "html")
    assert "needs matplotlib: pip install 'gpubw[plot]'" in line


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(
    CHROMIUM is None, reason="no headless Chromium here (Debian: apt-get install chromium)"
)
def test_a_real_browser_shows_the_page(tmp_path: Path, base: dict[str, Any], capsys: Any) -> None:
    """Headless Chromium loads the page from a file (no server): its DOM holds the same
    images and table, and its screenshot is drawn (the heatmap's colours, not a blank
    page)."""
    write_fleet(base, tmp_path / "r", 6, {"n001": slow_host_link(0, 0.6)})
    page = tmp_path / "fleet.html"
    _html(capsys, str(tmp_path / "r"), "-o", str(page))
    flags = ["--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'u'}"]
    url = page.as_uri()
    dom = subprocess.run(
        [CHROMIUM, *flags, "--dump-dom", url], capture_output=True, encoding="utf-8", timeout=120
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert len(parse(dom.stdout).named("img")) == 2 and "<table>" in dom.stdout
    shot = tmp_path / "shot.png"
    done = subprocess.run(
        [CHROMIUM, *flags, "--window-size=1200,900", f"--screenshot={shot}", url],
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from matplotlib.image import imread

    pixels = imread(str(shot))[..., :3]
    red = (pixels[..., 0] > 0.5) & (pixels[..., 1] < 0.3) & (pixels[..., 2] < 0.3)
    assert red.sum() > 100  # the slow host link's cells, drawn red in the heatmap
