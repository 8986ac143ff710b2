"""The trace page in a real browser: headless Chromium renders every stage and takes a screenshot."""

import struct
import subprocess
from pathlib import Path

import pytest

from turnrl.inspector.trace import run_trace

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs /usr/bin/chromium (apt-get install chromium)"),
]


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / "profile"
    profile.mkdir(exist_ok=True)
    cmd = [str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=90, check=False)


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", data[16:24])  # IHDR width and height


@pytest.mark.timeout(240)
def test_trace_page_renders_in_headless_chromium(tmp_path):
    result = run_trace(None, ["model.path=tiny-random", "data.max_response_length=8"], tmp_path / "out")
    url = result.html.resolve().as_uri()
    dom = chromium(tmp_path, "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    assert html.lstrip().startswith("<!DOCTYPE html>"), html[:200]
    assert '<body data-ready="1">' in html  # the page's script ran to its end without an error
    for view in result.views:
        heading = f'<h2><span class="num">{view.number}</span>{view.doc.title} <code>{view.name}</code></h2>'
        assert heading.replace("&", "&amp;") in html, view.name
    assert html.count('class="t model') >= 4 * 4  # tokens survived parsing
    shot = tmp_path / "trace.png"
    run = chromium(tmp_path, "--window-size=1280,2000", f"--screenshot={shot}", url)
    assert run.returncode == 0, run.stderr[-2000:]
    assert png_size(shot) == (1280, 2000)
    assert shot.stat().st_size > 20_000  # a page with content, not a blank image
