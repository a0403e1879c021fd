"""Debian's headless Chromium driven through /usr/bin/chromedriver (Selenium), for the
inspector's browser tests and its documentation screenshots. Nothing here downloads a browser:
without chromium, ``missing()`` says so and the caller decides (skip, or fail in CI)."""

from __future__ import annotations

import base64
import shutil
from pathlib import Path
from typing import Any

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1280,1000",
)


def missing() -> str | None:
    if Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists():
        return None
    return "chromium is not installed (apt-get install chromium chromium-driver)"


def chrome(authorization: str | None = None) -> Any:
    """A headless Chromium session; every request it makes sends ``authorization``."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    if authorization is not None:
        driver.execute_cdp_cmd("Network.enable", {})
        driver.execute_cdp_cmd(
            "Network.setExtraHTTPHeaders", {"headers": {"Authorization": authorization}}
        )
    return driver


def full_page_screenshot(driver: Any, path: Path) -> Path:
    """The whole page (not just the viewport) as a PNG at ``path``."""
    height = int(driver.execute_script("return document.documentElement.scrollHeight"))
    metrics = {"width": 1280, "height": min(height, 6000), "deviceScaleFactor": 1, "mobile": False}
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {"format": "png"})
    driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(base64.b64decode(shot["data"]))
    return path
