"""Driving the dashboard in Debian's chromium through /usr/bin/chromedriver (selenium;
nothing is downloaded): the browser, the token typed in, the tabs, and waits that name what
did not show. The views re-render every 2 s, so elements are read in one script call."""

from __future__ import annotations

import shutil
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
WAIT_S = 60


def chrome(width: int = 1400, height: int = 1100) -> Any:
    """A headless chromium logging its console (for the CSP check); skips the test where
    selenium, chromium or chromedriver is absent."""
    webdriver = pytest.importorskip(
        "selenium.webdriver", reason="selenium absent (pip install selenium): browser test skipped"
    )
    if not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)):
        pytest.skip(
            f"{CHROMIUM} or {CHROMEDRIVER} absent (apt-get install chromium chromium-driver): "
            "browser test skipped"
        )
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(flag)
    options.add_argument(f"--window-size={width},{height}")
    options.add_argument("--lang=en-US")  # numbers as "4,734"
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)


def wait(driver, condition, what: str, timeout_s: float = WAIT_S):  # type: ignore[no-untyped-def]
    """Wait for ``condition(driver)`` to be truthy; fail naming ``what`` and the page's
    status line."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(
            driver, timeout_s, ignored_exceptions=(StaleElementReferenceException,)
        ).until(condition)
    except Exception as exc:  # selenium's TimeoutException, with the page's state
        status = texts(driver, "#status")
        raise AssertionError(f"{what}: not shown in {timeout_s} s (status: {status!r})") from exc


def texts(driver, css: str) -> list[str]:  # type: ignore[no-untyped-def]
    """The text of every element matching ``css``, read in one go."""
    return driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map((e) => e.innerText)", css
    )


def attributes(driver, css: str, name: str) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """``{element's attribute name: its class}`` of every element matching ``css``."""
    return driver.execute_script(
        "return Object.fromEntries([...document.querySelectorAll(arguments[0])]"
        ".map((e) => [e.getAttribute(arguments[1]), e.className]))",
        css,
        name,
    )


def values(driver, css: str, name: str) -> list[str]:  # type: ignore[no-untyped-def]
    """Attribute ``name`` of every element matching ``css``, in the page's order."""
    return driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])]"
        ".map((e) => e.getAttribute(arguments[1]))",
        css,
        name,
    )


def login(driver, url: str, token: str, view: str) -> None:  # type: ignore[no-untyped-def]
    """Open ``view`` of the dashboard at ``url`` and type ``token``."""
    from selenium.webdriver.common.by import By

    driver.get(f"{url}/ui#{view}")
    wait(driver, lambda d: d.find_element(By.ID, "token").is_displayed(), "token field")
    driver.find_element(By.ID, "forget").click()
    driver.find_element(By.ID, "token").send_keys(token)
    driver.find_element(By.CSS_SELECTOR, "#token-form button[type=submit]").click()


def show(driver, view: str) -> None:  # type: ignore[no-untyped-def]
    """Click the tab of ``view``."""
    from selenium.webdriver.common.by import By

    driver.find_element(By.CSS_SELECTOR, f'#tabs a[data-view="{view}"]').click()


def updated(driver) -> bool:  # type: ignore[no-untyped-def]
    """Whether the status line says the last refresh completed."""
    return texts(driver, "#status")[0].startswith("updated")


def csp_refusals(driver) -> list[str]:  # type: ignore[no-untyped-def]
    """What the page's Content-Security-Policy refused since the last call (Chromium logs
    each refusal to the console)."""
    return [
        entry["message"]
        for entry in driver.get_log("browser")
        if "Content Security Policy" in entry["message"]
    ]
