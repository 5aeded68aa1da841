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
            # What a reader looks at first (issue 32, item 4): a control page that FAILs the bias
            # gate opens with its flagged buckets, named in the family's terms; the index's
            # controls table filters and sorts, and a negative detected as designed is not red.
            first_h2 = driver.execute_script("const h = document.querySelector('h2'); return h ? h.textContent : '';")
            bias_fail = driver.execute_script(
                "const t = document.querySelector('table'); return !!t && t.rows.length > 1 && "
                "t.rows[1].cells.length > 1 && t.rows[1].cells[1].textContent.trim() === 'FAIL';")
            if name != "index.html" and bias_fail:
                if first_h2 != "Flagged buckets":
                    failures.append(f"{name}: the first section is {first_h2!r}, not the flagged buckets")
                cells = driver.execute_script(
                    "const t = document.querySelectorAll('table')[1]; return t ? Array.from(t.rows).slice(1).map(r => r.cells[1].textContent) : [];")
                if not cells or not all(any(c.startswith(a + " ") for a in ("channel", "row", "head", "position", "expert", "token", "microbatch")) for c in cells):
                    failures.append(f"{name}: flagged buckets not named in the family's terms: {cells[:3]}")
            if name == "index.html" and driver.execute_script("return !!document.getElementById('controls');"):
                total = driver.execute_script("return document.querySelectorAll('#controls tbody tr').length;")
                driver.execute_script(
                    "const b = document.getElementById('filter'); b.value = 'n1_gemma'; b.dispatchEvent(new Event('input'));")
                shown = driver.execute_script(
                    "return Array.from(document.querySelectorAll('#controls tbody tr')).filter(r => r.style.display !== 'none').map(r => r.cells[0].textContent);")
                if not shown or len(shown) >= total or not all("n1_gemma" in t for t in shown):
                    failures.append(f"{name}: the filter box kept {shown} of {total} rows for 'n1_gemma'")
                driver.execute_script(
                    "const b = document.getElementById('filter'); b.value = ''; b.dispatchEvent(new Event('input'));"
                    "document.querySelectorAll('#controls th')[8].click();")
                zs = driver.execute_script(
                    "return Array.from(document.querySelectorAll('#controls tbody tr')).map(r => r.cells[8].textContent.trim());")
                numbers = [float(z) for z in zs if z != "-"]
                if numbers != sorted(numbers) or (("-" in zs) and zs.index("-") < len(numbers)):
                    failures.append(f"{name}: clicking 'max |z|' did not sort the rows: {zs[:8]}")
                designed = driver.execute_script(
                    "return Array.from(document.querySelectorAll('#controls tbody tr')).filter(r => r.cells[0].textContent === "
                    "'n1_gemma_rmsnorm_offset_bf16').map(r => r.cells[6].querySelector('.badge').className);")
                if designed != ["badge designed"]:
                    failures.append(f"{name}: N1, detected as designed, is drawn {designed}")
                driver.execute_script("document.querySelectorAll('#controls th')[0].click();")
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
