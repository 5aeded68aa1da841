#!/usr/bin/env python3
"""Opens report pages in headless Chromium (Debian's chromium + chromium-driver, through
python3-selenium) and checks what a reader would see: the page loads, the browser logs no
error (a missing image is logged as a failed resource load), every <img> has decoded to a
non-empty picture, and every image file is an SVG with content. Saves a full-page screenshot
of each page into OUT_DIR.

  check_pages.py OUT_DIR PAGE.html [PAGE.html ...]
Exit 0 when every page passes; 1 with the reasons otherwise.
"""
import os
import sys

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service


def main():
    out_dir, pages = sys.argv[1], sys.argv[2:]
    os.makedirs(out_dir, exist_ok=True)
    options = Options()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,1200"):
        options.add_argument(arg)
    options.binary_location = "/usr/bin/chromium"
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    failures = []
    try:
        for page in pages:
            path = os.path.abspath(page)
            driver.get("file://" + path)
            name = os.path.basename(page)
            title = driver.title
            if not title.startswith("kcert"):
                failures.append(f"{name}: unexpected title {title!r}")
            for entry in driver.get_log("browser"):
                if entry.get("level") in ("SEVERE", "ERROR"):
                    failures.append(f"{name}: browser error: {entry.get('message')}")
            images = driver.execute_script(
                "return Array.from(document.images).map(i => [i.getAttribute('src'), i.complete, i.naturalWidth, i.naturalHeight]);")
            for src, complete, width, height in images:
                if not complete or width == 0 or height == 0:
                    failures.append(f"{name}: image {src} did not render ({width}x{height})")
                file = os.path.join(os.path.dirname(path), src)
                if not os.path.isfile(file) or os.path.getsize(file) < 200:
                    failures.append(f"{name}: image file {src} missing or empty")
                else:
                    with open(file, encoding="utf-8", errors="replace") as f:
                        text = f.read()
                    if "<svg" not in text or "</svg>" not in text or "<path" not in text:
                        failures.append(f"{name}: {src} is not an SVG with drawing in it")
            # A full-page screenshot: the window grown to the document's height.
            height = driver.execute_script("return document.documentElement.scrollHeight")
            driver.set_window_size(1280, min(max(height, 600), 12000))
            shot = os.path.join(out_dir, os.path.splitext(name)[0] + ".png")
            driver.save_screenshot(shot)
            if os.path.getsize(shot) < 10000:
                failures.append(f"{name}: screenshot {shot} is suspiciously small")
            print(f"{name}: {len(images)} image(s) rendered, screenshot {shot} ({os.path.getsize(shot)} bytes)")
            driver.set_window_size(1280, 1200)
    finally:
        driver.quit()
    for f in failures:
        print("FAILED:", f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
