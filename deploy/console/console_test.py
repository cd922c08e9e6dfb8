"""Browser tests of the LiveRelay tenant console (docs/console.md), run by deploy/console/test.

Environment (set by the wrapper): CONSOLE_BASE (the live `liverelay serve`), CONSOLE_TENANT (the
JSON printed by `liverelay admin tenants create`), CONSOLE_SANDBOX_DIR / CONSOLE_SANDBOX_CONTROL
(the local APNs/FCM sandbox), CONSOLE_SHOTS (screenshot directory).


Makes its data through the public API, then drives headless Debian chromium with Selenium.
Prints one line per test and closes with "console: N passed, N failed".
"""
import base64
import http.server
import json
import os
import re
import sys
import threading
import time
import traceback
import urllib.error
import urllib.request
import uuid

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.support.ui import Select, WebDriverWait

BASE = os.environ["CONSOLE_BASE"]
TENANT = json.loads(os.environ["CONSOLE_TENANT"])
MASTER = TENANT["master_key"]["credential"]
PUBLISHABLE = TENANT["publishable_key"]["credential"]
SANDBOX_DIR = os.environ["CONSOLE_SANDBOX_DIR"]
SANDBOX_CONTROL = os.environ["CONSOLE_SANDBOX_CONTROL"]
SHOTS = os.environ["CONSOLE_SHOTS"]
APP_ID = "com.example.delivery"


# ---- HTTP helpers (the test's own calls; the browser's are checked separately) -----------------

def call(method, path, key=MASTER, body=None, expect=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(BASE + path, data=data, method=method, headers={"Authorization": "Bearer " + key})
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            status, raw, headers = r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as e:
        status, raw, headers = e.code, e.read(), dict(e.headers)
    value = json.loads(raw) if raw and raw[:1] in (b"{", b"[") else raw
    if expect is not None and status not in (expect if isinstance(expect, tuple) else (expect,)):
        raise AssertionError(f"{method} {path} → {status} {raw[:400]!r}")
    return status, value, headers


def sandbox(method, path, body):
    req = urllib.request.Request(SANDBOX_CONTROL + path, data=json.dumps(body).encode(), method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read() or b"{}")


def wait_ops_settled(target_id, key, timeout=20):
    deadline = time.time() + timeout
    while True:
        _, ops, _ = call("GET", f"/v1/remote-updates/live-activities/targets/{target_id}/operations", key, expect=200)
        if all(o["status"] not in ("sending",) and not (o["status"] == "queued" and o.get("pending_reason") is None) for o in ops["data"]):
            return ops["data"]
        if time.time() > deadline:
            raise AssertionError(f"operations of {target_id} did not settle: {[o['status'] for o in ops['data']]}")
        time.sleep(0.2)


# ---- data made by the test -----------------------------------------------------------------------

class World:
    pass


def seed():
    w = World()
    apns = json.load(open(os.path.join(SANDBOX_DIR, "apns.json")))
    key = open(os.path.join(SANDBOX_DIR, "apns-key.p8")).read()
    call("PUT", "/v1/provider-credentials/apns", body={"team_id": apns["team_id"], "key_id": apns["key_id"], "private_key": key,
                                                        "topics": [APP_ID], "environment": "sandbox"}, expect=(200, 201))
    call("PUT", "/v1/provider-credentials/fcm", body={"service_account": json.load(open(os.path.join(SANDBOX_DIR, "fcm-service-account.json")))},
         expect=(200, 201))
    _, inst, _ = call("POST", "/v1/installations", PUBLISHABLE, {"platform": "ios", "app_id": APP_ID, "environment": "sandbox",
                                                                  "install_id": str(uuid.uuid4())}, expect=201)
    w.ins, w.ins_cred = inst["installation_id"], inst["credential"]
    _, prep, _ = call("POST", f"/v1/installations/{w.ins}/start-targets", w.ins_cred, {
        "binding_id": "delivery-widget", "activity_type": "delivery", "attributes_type": "DeliveryAttributes", "renderer_digest": "sha256:9b1f0c",
        "schema": {"type": "object", "required": ["eta"], "properties": {"eta": {"type": "string", "maxLength": 20}}},
        "bundle": {"bytes": 48213, "modules": 3, "files": 4}, "sample_state": {"eta": "12:40"}}, expect=201)
    w.st, w.tv = prep["start_target_id"], prep["template_version"]
    call("PUT", f"/v1/installations/{w.ins}/start-targets/{w.st}/push-to-start-token", w.ins_cred, {"token": "80f1a3c5e7d9b2a4c6e8f0a1b3c5d7e9"}, expect=200)
    _, sk, _ = call("POST", "/v1/remote-updates/sender-keys", body={
        "targets": [w.st], "created_from": [w.st], "permissions": ["activities:start", "activities:read-state", "activities:update", "activities:end"],
        "label": "seed sender", "idempotency_key": "console-seed-sender"}, expect=201)
    w.sender = sk["credential"]

    def start(n):
        _, r, _ = call("POST", "/v1/remote-updates/live-activities/start?wait_ms=10000", w.sender, {
            "start_target_id": w.st, "template_version": w.tv, "state": {"eta": "SECRET-ETA-%d" % n},
            "alert": {"title": "Preparing", "body": "Your order is being prepared"}, "business_key": "delivery:%d" % n,
            "business_generation": "1", "idempotency_key": "console-start-%d" % n}, expect=(200, 202))
        return r["target"]["id"]

    def update(t, rev, eta, alert=False, wait=True):
        body = {"target_id": t, "state": {"eta": eta}, "expected_revision": rev, "idempotency_key": "console-upd-%s-%d-%s" % (t, rev, eta)}
        if alert:
            body["alert"] = {"title": "Updated from server", "body": "New ETA " + eta}
        _, r, _ = call("POST", "/v1/remote-updates/live-activities/update" + ("?wait_ms=10000" if wait else ""), w.sender, body, expect=(200, 202))
        return r["operation"]["id"]

    # A: started, update token registered, an accepted alert update, a render report for revision 1 (stale).
    w.a = start(1)
    call("PUT", f"/v1/installations/{w.ins}/targets/{w.a}/push-token", w.ins_cred, {"token": "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1"}, expect=200)
    update(w.a, 1, "SECRET-ETA-UPDATED", alert=True)
    call("POST", f"/v1/installations/{w.ins}/targets/{w.a}/render-reports", w.ins_cred,
         {"revision": 1, "template_version": w.tv, "stage_code": "rendered"}, expect=200)
    # B: its update token is dead → the update fails and the target ends (token_invalid).
    w.b = start(2)
    dead = "b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2"
    call("PUT", f"/v1/installations/{w.ins}/targets/{w.b}/push-token", w.ins_cred, {"token": dead}, expect=200)
    sandbox("POST", "/sandbox/dead-tokens", {"token": dead})
    update(w.b, 1, "13:10")
    # C: no update token yet → its updates wait; the newer one supersedes the older; the device ends it → cancelled.
    w.c = start(3)
    w.c_old = update(w.c, 1, "13:20", wait=False)
    w.c_new = update(w.c, 2, "13:25", wait=False)
    call("POST", f"/v1/installations/{w.ins}/targets/{w.c}/ended", w.ins_cred, {}, expect=200)
    # More live activities, for pagination.
    w.more = [start(n) for n in range(4, 10)]
    for t in [w.a, w.b, w.c] + w.more:
        wait_ops_settled(t, w.sender)
    # A spare master key and a publishable key to rotate.
    _, mk, _ = call("POST", "/v1/master-keys", body={"label": "ops laptop", "idempotency_key": "console-mk-spare"}, expect=201)
    w.spare_master = mk["id"]
    _, pk, _ = call("POST", "/v1/publishable-keys", body={"app_id": APP_ID, "platform": "ios", "label": "ios app", "idempotency_key": "console-pk"},
                    expect=201)
    w.publishable_id = pk["id"]
    # The dispatcher records credential health after the sends: wait for the APNs success.
    deadline = time.time() + 15
    while not any(c["provider"] == "apns" and c["last_success_at"] for c in call("GET", "/v1/provider-credentials", expect=200)[1]["data"]):
        assert time.time() < deadline, "the APNs credential never recorded a success"
        time.sleep(0.2)
    return w


# ---- the browser -------------------------------------------------------------------------------

class Browser:
    def __init__(self):
        opts = webdriver.ChromeOptions()
        opts.binary_location = "/usr/bin/chromium"
        for a in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,900",
                  "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--disable-default-apps", "--disable-client-side-phishing-detection",
                  "--disable-features=Translate,OptimizationHints,MediaRouter,AutofillServerCommunication,CertificateTransparencyComponentUpdater",
                  "--metrics-recording-only", "--safebrowsing-disable-auto-update", "--password-store=basic", "--use-mock-keychain",
                  # Safety net: nothing but loopback can be reached (the test also proves the page asks for nothing else).
                  "--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=127.0.0.1;localhost",
                  "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"]:
            opts.add_argument(a)
        opts.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
        self.d = webdriver.Chrome(service=Service(executable_path="/usr/bin/chromedriver"), options=opts)
        self.d.set_page_load_timeout(30)
        self.requests = []        # every URL the browser asked for
        self.console = []         # console entries
        self.allowed_errors = []  # (regex) network errors the test provoked on purpose
        self.loads = 0

    def drain_logs(self):
        for e in self.d.get_log("performance"):
            m = json.loads(e["message"])["message"]
            if m.get("method") == "Network.requestWillBeSent":
                self.requests.append(m["params"]["request"]["url"])
        self.console.extend(self.d.get_log("browser"))

    def open(self, hash_=""):
        # A fresh document each time (a hash-only change would keep the old view on the page).
        self.loads += 1
        self.d.get(f"{BASE}/console/?load={self.loads}{hash_}")
        return self

    def mark(self):
        """Marks the current view as old, so ready() waits for the next one."""
        self.d.execute_script("document.querySelectorAll('main > section').forEach(s => s.setAttribute('data-old', ''));")

    def ready(self, view, timeout=15):
        WebDriverWait(self.d, timeout).until(lambda d: d.execute_script(
            "const s = document.querySelector('main > section[data-ready=\"true\"]:not([data-old])'); return s && s.dataset.view;") == view)
        return self.d.find_element(By.CSS_SELECTOR, "main > section[data-ready='true']:not([data-old])")

    def click(self, element, view):
        """Clicks and waits for `view` to render anew."""
        self.mark()
        element.click()
        return self.ready(view)

    def text(self):
        return self.d.find_element(By.TAG_NAME, "main").text

    def nav(self, label, view):
        return self.click(self.d.find_element(By.LINK_TEXT, label), view)

    def shot(self, name):
        metrics = self.d.execute_cdp_cmd("Page.getLayoutMetrics", {})
        size = metrics.get("cssContentSize") or metrics["contentSize"]
        width = self.d.execute_script("return document.documentElement.clientWidth")
        height = min(int(size["height"]) + 1, 6000)
        png = self.d.execute_cdp_cmd("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                                                                "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1}})
        path = os.path.join(SHOTS, name + ".png")
        with open(path, "wb") as f:
            f.write(base64.b64decode(png["data"]))
        print(f"console: screenshot {path}")
        return path

    def storage(self):
        return self.d.execute_script("return {local: JSON.stringify(Object.assign({}, localStorage)), session: JSON.stringify(Object.assign({}, sessionStorage)), cookie: document.cookie};")

    def tab_reaches_everything(self):
        """Tabs from the top of the page through every focusable element; returns the actions never reached."""
        n = self.d.execute_script("""
            const sel = 'a[href], button, input, select, textarea, summary, [tabindex]';
            const els = Array.from(document.querySelectorAll(sel)).filter(e => !e.disabled && e.getAttribute('tabindex') !== '-1'
              && (e.offsetParent !== null || getComputedStyle(e).position === 'fixed') && !e.closest('[hidden]')
              && !(e.closest('details:not([open])') && e.tagName !== 'SUMMARY'));
            document.querySelectorAll('[data-kb]').forEach(e => e.removeAttribute('data-kb'));
            els.forEach((e, i) => e.setAttribute('data-kb', String(i)));
            if (document.activeElement) document.activeElement.blur();
            window.scrollTo(0, 0);
            return els.length;""")
        seen = set()
        for _ in range(n + 3):
            ActionChains(self.d).send_keys(Keys.TAB).perform()
            kb = self.d.execute_script("const a = document.activeElement; return a ? a.getAttribute('data-kb') : null;")
            if kb is not None:
                seen.add(kb)
        missing = self.d.execute_script("""
            const seen = new Set(arguments[0]);
            return Array.from(document.querySelectorAll('[data-kb]')).filter(e => !seen.has(e.getAttribute('data-kb')))
              .map(e => e.tagName.toLowerCase() + (e.className ? '.' + e.className : '') + ' ' + (e.textContent || e.name || '').trim().slice(0, 40));""",
            sorted(seen))
        return n, missing


# ---- tests -----------------------------------------------------------------------------------------

def test_served_with_content_security_policy(b, w):
    for path in ["/console/", "/console/console.js", "/console/console.css", "/console/favicon.svg"]:
        req = urllib.request.Request(BASE + path)
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.status == 200, path
            assert r.headers["Content-Security-Policy"] == "default-src 'self'", (path, r.headers["Content-Security-Policy"])


def test_sign_in_rejects_a_bad_key_and_shows_the_error(b, w):
    b.open()
    b.ready("signin")
    field = b.d.find_element(By.ID, "master-key")
    assert b.d.switch_to.active_element == field, "the key field has the focus"
    bad = "lrm_" + "0" * 26 + "_" + "x" * 49
    b.allowed_errors.append(r"/v1/master-keys\?limit=1 .*401")
    field.send_keys(bad + Keys.ENTER)
    WebDriverWait(b.d, 10).until(lambda d: d.find_elements(By.CSS_SELECTOR, ".error .code"))
    err = b.d.find_element(By.CSS_SELECTOR, ".error")
    assert "UNAUTHENTICATED" in err.text and "HTTP 401" in err.text, err.text
    rid = err.find_element(By.CSS_SELECTOR, ".request-id").text
    assert re.match(r"^[A-Za-z0-9._:-]{8,}$", rid), rid
    assert b.storage()["session"] == "{}", "a refused key is not kept"
    b.shot("01-sign-in-error")


def test_overview(b, w):
    field = b.d.find_element(By.ID, "master-key")
    field.clear()
    field.send_keys(MASTER + Keys.ENTER)
    section = b.ready("overview")
    _, usage, _ = call("GET", "/v1/remote-updates/usage", expect=200)
    for k in ["limit", "used", "reserved", "remaining"]:
        shown = section.find_element(By.CSS_SELECTOR, f"[data-quota='{k}'] .value").text
        assert shown == str(usage[k]), (k, shown, usage[k])
    _, daily, _ = call("GET", "/v1/remote-updates/usage/daily?days=7", expect=200)
    today = daily["data"][-1]
    for status in ["accepted", "failed", "superseded", "cancelled"]:
        assert today["outcomes"][status] > 0, (status, today)
        rects = section.find_elements(By.CSS_SELECTOR, f"svg.outcomes rect[data-status='{status}'][data-day='{today['day']}']")
        assert len(rects) == 1, (status, len(rects))
    labels = [t.text for t in section.find_elements(By.CSS_SELECTOR, "svg.outcomes text")]
    assert today["day"][5:] in labels and str(today["total"]) in labels, labels
    creds = section.find_element(By.XPATH, "//h2[text()='Provider credentials']/..").text
    assert "APNS" in creds and "FCM" in creds, creds
    assert "ok" in creds, "the APNs credential has a recent success: " + creds
    b.shot("02-overview")


def test_key_is_kept_in_session_storage_only(b, w):
    s = b.storage()
    assert s["local"] == "{}", s["local"]
    assert s["cookie"] == "", s["cookie"]
    assert b.d.get_cookies() == [], b.d.get_cookies()
    assert MASTER in s["session"]
    assert MASTER not in b.d.page_source, "the key is not written into the page"
    # It survives a reload of the tab (sessionStorage), and still never reaches localStorage/cookies.
    b.d.refresh()
    b.ready("overview")
    s = b.storage()
    assert s["local"] == "{}" and s["cookie"] == "" and MASTER in s["session"]


def test_targets_filters_badges_and_pagination(b, w):
    section = b.nav("Targets", "targets")
    rows = section.find_elements(By.CSS_SELECTOR, "tbody tr")
    total = 3 + len(w.more)
    assert len(rows) == total, (len(rows), total)
    assert section.find_elements(By.CSS_SELECTOR, "tbody .badge.b-ok"), "ready targets have a green badge"
    Select(section.find_element(By.NAME, "status")).select_by_value("ended")
    section = b.click(section.find_element(By.XPATH, ".//button[text()='Apply filters']"), "targets")
    assert "status=ended" in b.d.current_url, b.d.current_url
    statuses = [e.text for e in section.find_elements(By.CSS_SELECTOR, "tbody tr td:nth-child(2) .badge")]
    _, ended, _ = call("GET", "/v1/remote-updates/live-activities/targets?status=ended", expect=200)
    assert statuses == ["ended"] * len(ended["data"]) and len(statuses) >= 2, statuses
    b.shot("03-targets-filtered")
    section = b.click(section.find_element(By.XPATH, ".//button[text()='Clear']"), "targets")
    Select(section.find_element(By.NAME, "limit")).select_by_value("5")
    section = b.click(section.find_element(By.XPATH, ".//button[text()='Apply filters']"), "targets")
    assert "limit=5" in b.d.current_url, b.d.current_url
    first = [a.text for a in section.find_elements(By.CSS_SELECTOR, "tbody tr td:first-child a")]
    assert len(first) == 5, first
    section = b.click(section.find_element(By.CSS_SELECTOR, "button.next-page"), "targets")
    assert "cursor=" in b.d.current_url, b.d.current_url
    second = [a.text for a in section.find_elements(By.CSS_SELECTOR, "tbody tr td:first-child a")]
    assert len(second) == total - 5 and not set(first) & set(second), (first, second)
    b.open("#/targets")
    b.ready("targets")
    b.shot("04-targets")


def test_target_timeline(b, w):
    b.open("#/targets")
    section = b.ready("targets")
    section = b.click(section.find_element(By.LINK_TEXT, w.a), "targets")
    assert w.a in section.find_element(By.TAG_NAME, "h1").text
    items = section.find_elements(By.CSS_SELECTOR, "ol.timeline > li")
    _, ops, _ = call("GET", f"/v1/remote-updates/live-activities/targets/{w.a}/operations", expect=200)
    assert [i.get_attribute("data-operation") for i in items] == [o["id"] for o in ops["data"]], "newest first, as the API lists them"
    assert [o["kind"] for o in ops["data"]] == ["update", "start"]
    for item, op in zip(items, ops["data"]):
        assert op["status"] == "accepted" and op["apns_id"] and op["apns_id"] in item.text, item.text
        assert f"revision {op['revision']}" in item.text, item.text
    report = section.find_element(By.CSS_SELECTOR, ".render-report").text
    assert "stale: for revision 1, target is at 2" in report and "rendered" in report, report
    assert "registered" in section.text
    assert "SECRET-ETA" not in b.d.page_source, "no business state on the page"
    b.shot("05-target-timeline")
    # B: the failed update shows its failure code.
    b.open(f"#/targets/{w.b}")
    section = b.ready("targets")
    _, ops, _ = call("GET", f"/v1/remote-updates/live-activities/targets/{w.b}/operations", expect=200)
    failed = [o for o in ops["data"] if o["status"] == "failed"]
    assert failed and failed[0]["failure"]["code"], ops
    codes = [e.text for e in section.find_elements(By.CSS_SELECTOR, ".failure-code")]
    assert failed[0]["failure"]["code"] in codes, codes
    assert "token_invalid" in section.text and "invalid" in section.text
    b.shot("06-target-failed")
    # C: superseded_by is a link to the operation that superseded it.
    b.open(f"#/targets/{w.c}")
    section = b.ready("targets")
    old = section.find_element(By.ID, "op-" + w.c_old)
    assert "superseded" in old.text, old.text
    link = old.find_element(By.LINK_TEXT, w.c_new)
    b.shot("07-target-superseded")
    section = b.click(link, "operations")
    assert w.c_new in section.find_element(By.TAG_NAME, "h1").text
    assert "cancelled" in section.text, section.text
    b.shot("08-operation")


def test_end_activity_cleanup(b, w):
    target = w.more[0]
    b.open(f"#/targets/{target}")
    section = b.ready("targets")
    section.find_element(By.XPATH, ".//button[text()='End activity (cleanup)']").click()
    confirm = section.find_element(By.XPATH, ".//button[text()='Confirm: end without new state']")
    assert b.d.switch_to.active_element == confirm, "the confirmation takes the focus"
    section = b.click(confirm, "targets")
    _, ops, _ = call("GET", f"/v1/remote-updates/live-activities/targets/{target}/operations", expect=200)
    assert ops["data"][0]["kind"] == "end", ops["data"][0]
    assert section.find_elements(By.CSS_SELECTOR, "ol.timeline > li")[0].get_attribute("data-operation") == ops["data"][0]["id"]


def test_sender_key_secret_shown_once(b, w):
    section = b.nav("Keys", "keys")
    panel = section.find_element(By.ID, "sender-keys")
    panel.find_element(By.NAME, "label").send_keys("console made")
    panel.find_element(By.NAME, "targets").send_keys(w.st)
    button = panel.find_element(By.CSS_SELECTOR, "button.create-sender-key")
    b.d.execute_script("arguments[0].focus()", button)
    button.send_keys(Keys.ENTER)  # keyboard activation
    WebDriverWait(b.d, 10).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#sender-keys .secret input"))
    box = b.d.find_element(By.CSS_SELECTOR, "#sender-keys .secret")
    secret = box.find_element(By.TAG_NAME, "input").get_attribute("value")
    assert secret.startswith("lrs_"), secret
    assert box.find_element(By.CSS_SELECTOR, "button.copy").text == "Copy"
    assert "shown only once" in box.text
    status, _, _ = call("GET", "/v1/remote-updates/capabilities", key=secret)
    assert status == 200, "the shown credential works"
    _, keys, _ = call("GET", "/v1/remote-updates/sender-keys", expect=200)
    made = [k for k in keys["data"] if k["label"] == "console made"]
    assert len(made) == 1 and made[0]["targets"] == [w.st], made
    w.console_sender = made[0]["id"]
    WebDriverWait(b.d, 10).until(lambda d: w.console_sender in d.find_element(By.ID, "sender-keys").text)
    b.shot("09-keys-secret-once")
    s = b.storage()
    assert secret not in s["session"] and secret not in s["local"] and secret not in s["cookie"]
    b.d.refresh()
    b.ready("keys")
    assert secret not in b.d.page_source, "the secret is gone after a reload"
    assert not b.d.find_elements(By.CSS_SELECTOR, ".secret"), "no secret box after a reload"
    assert w.console_sender in b.text(), "the key itself is listed (metadata only)"
    s = b.storage()
    assert secret not in json.dumps(s)


def test_api_errors_show_code_and_request_id(b, w):
    b.open("#/keys")
    section = b.ready("keys")
    panel = section.find_element(By.ID, "sender-keys")
    panel.find_element(By.NAME, "targets").send_keys("st_notanid")
    b.allowed_errors.append(r"/v1/remote-updates/sender-keys .*400")
    panel.find_element(By.CSS_SELECTOR, "button.create-sender-key").click()
    WebDriverWait(b.d, 10).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#sender-keys .error"))
    err = b.d.find_element(By.CSS_SELECTOR, "#sender-keys .error")
    assert "INVALID_REQUEST" in err.text and "HTTP 400" in err.text and "targets.0" in err.text, err.text
    rid = err.find_element(By.CSS_SELECTOR, ".request-id").text
    assert rid.startswith("req_"), rid
    b.shot("10-keys-error")


def test_revoke_and_rotate_keys(b, w):
    b.open("#/keys")
    section = b.ready("keys")
    cell = section.find_element(By.CSS_SELECTOR, f"#sender-keys td.actions[data-key='{w.console_sender}']")
    cell.find_element(By.XPATH, ".//button[text()='Revoke']").click()
    section = b.click(cell.find_element(By.XPATH, ".//button[text()='Confirm revoke']"), "keys")
    _, k, _ = call("GET", f"/v1/remote-updates/sender-keys/{w.console_sender}", expect=200)
    assert k["status"] == "revoked", k
    # Rotate the spare master key with a 120 s grace period.
    grace = section.find_element(By.CSS_SELECTOR, "#master-keys input[name='grace']")
    grace.clear()
    grace.send_keys("120")
    cell = section.find_element(By.CSS_SELECTOR, f"#master-keys td.actions[data-key='{w.spare_master}']")
    cell.find_element(By.XPATH, ".//button[text()='Rotate']").click()
    WebDriverWait(b.d, 10).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#master-keys .secret input"))
    fresh = b.d.find_element(By.CSS_SELECTOR, "#master-keys .secret input").get_attribute("value")
    assert fresh.startswith("lrm_"), fresh
    _, masters, _ = call("GET", "/v1/master-keys", expect=200)
    old = [m for m in masters["data"] if m["id"] == w.spare_master][0]
    assert old["expires_at"] and old["revoked_at"], old
    assert any(m["label"] == "ops laptop (rotated)" and m["status"] == "active" for m in masters["data"]), masters
    assert call("GET", "/v1/master-keys", key=fresh)[0] == 200
    WebDriverWait(b.d, 10).until(lambda d: "ops laptop (rotated)" in d.find_element(By.ID, "master-keys").text)
    # Rotate the publishable key: a new one for the same app; the old one keeps working.
    cell = b.d.find_element(By.CSS_SELECTOR, f"#publishable-keys td.actions[data-key='{w.publishable_id}']")
    cell.find_element(By.XPATH, ".//button[text()='Rotate']").click()
    WebDriverWait(b.d, 10).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#publishable-keys .secret input"))
    assert b.d.find_element(By.CSS_SELECTOR, "#publishable-keys .secret input").get_attribute("value").startswith("lrp_")
    _, pubs, _ = call("GET", "/v1/publishable-keys", expect=200)
    assert sum(1 for p in pubs["data"] if p["app_id"] == APP_ID and p["status"] == "active") >= 2, pubs
    b.shot("11-keys-rotated")


def test_audit_log(b, w):
    section = b.nav("Audit log", "audit")
    _, events, _ = call("GET", "/v1/audit-events", expect=200)
    rows = section.find_elements(By.CSS_SELECTOR, "tbody tr")
    assert len(rows) == len(events["data"]) and rows, (len(rows), len(events["data"]))
    text = section.text
    for action in ["sender_key.create", "sender_key.revoke", "master_key.revoke", "provider_credential.apns.put"]:
        assert action in text, action
    assert events["data"][0]["request_id"] in rows[0].text, "newest first, with its request id"
    b.shot("12-audit-log")


def test_keyboard_reaches_every_action(b, w):
    problems = []
    for hash_, view in [("#/overview", "overview"), ("#/targets", "targets"), (f"#/targets/{w.a}", "targets"), ("#/keys", "keys"),
                        ("#/audit", "audit")]:
        b.open(hash_)
        b.ready(view)
        n, missing = b.tab_reaches_everything()
        if missing or n < 5:
            problems.append((hash_, n, missing[:8]))
    assert not problems, problems
    # Keyboard alone: Enter on a nav link switches the view, Space on a button works.
    b.open("#/overview")
    b.ready("overview")
    link = b.d.find_element(By.LINK_TEXT, "Targets")
    b.d.execute_script("arguments[0].focus()", link)
    b.mark()
    link.send_keys(Keys.ENTER)
    b.ready("targets")


def test_phone_width(b, w):
    b.d.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {"width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": True})
    try:
        for hash_, view, name in [("#/overview", "overview", "13-phone-overview"), ("#/targets", "targets", "14-phone-targets"),
                                  (f"#/targets/{w.a}", "targets", "15-phone-timeline"), ("#/keys", "keys", "16-phone-keys"),
                                  ("#/audit", "audit", "17-phone-audit")]:
            b.open(hash_)
            b.ready(view)
            over = b.d.execute_script("return document.documentElement.scrollWidth - document.documentElement.clientWidth")
            assert over <= 1, f"{hash_}: the page scrolls sideways by {over}px at a phone's width"
            b.shot(name)
    finally:
        b.d.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


class Receiver(http.server.BaseHTTPRequestHandler):
    """A loopback webhook receiver: records the event id of each POST and answers 200."""
    hits = []

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        Receiver.hits.append(self.headers.get("LiveRelay-Event-Id"))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def test_webhook_endpoints(b, w):
    """The webhooks view against the real /v1/webhook-endpoints API (docs/webhooks.md)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/hook"
        section = b.nav("Webhooks", "webhooks")
        form = section.find_element(By.CSS_SELECTOR, "form[aria-label='Add a webhook endpoint']")
        form.find_element(By.NAME, "url").send_keys(url)
        form.find_element(By.NAME, "description").send_keys("console test")
        form.find_element(By.CSS_SELECTOR, "button.create-webhook").click()
        WebDriverWait(b.d, 10).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#webhook-endpoints .secret input"))
        secret = b.d.find_element(By.CSS_SELECTOR, "#webhook-endpoints .secret input").get_attribute("value")
        assert secret.startswith("whsec_"), secret
        b.shot("19-webhooks-created")
        b.d.refresh()
        section = b.ready("webhooks")
        assert secret not in b.d.page_source
        _, eps, _ = call("GET", "/v1/webhook-endpoints", expect=200)
        we = [e for e in eps["data"] if e["url"] == url][0]
        cell = section.find_element(By.CSS_SELECTOR, f"td.actions[data-endpoint='{we['id']}']")
        cell.find_element(By.XPATH, ".//button[text()='Send test']").click()
        WebDriverWait(b.d, 15).until(lambda d: Receiver.hits)
        b.click(section.find_element(By.LINK_TEXT, we["id"]), "webhooks")
        deadline = time.time() + 20
        while True:
            section = b.ready("webhooks")
            if section.find_elements(By.CSS_SELECTOR, "tbody tr"):
                break
            assert time.time() < deadline, "no delivery row"
            time.sleep(0.5)
            b.d.refresh()
        assert "200" in section.find_element(By.CSS_SELECTOR, "tbody tr").text
        b.shot("20-webhook-deliveries")
        b.open("#/webhooks")
        section = b.ready("webhooks")
        section = b.click(section.find_element(By.CSS_SELECTOR, f"td.actions[data-endpoint='{we['id']}']").find_element(By.XPATH, ".//button[text()='Disable']"), "webhooks")
        assert call("GET", f"/v1/webhook-endpoints/{we['id']}", expect=200)[1]["status"] == "disabled"
        cell = section.find_element(By.CSS_SELECTOR, f"td.actions[data-endpoint='{we['id']}']")
        cell.find_element(By.XPATH, ".//button[text()='Delete']").click()
        b.click(cell.find_element(By.XPATH, ".//button[text()='Confirm delete']"), "webhooks")
        assert call("GET", f"/v1/webhook-endpoints/{we['id']}")[0] == 404
    finally:
        server.shutdown()


def test_no_request_leaves_the_origin_and_no_console_errors(b, w):
    b.drain_logs()
    foreign = [u for u in b.requests if not (u.startswith(BASE + "/") or u == BASE)]
    assert b.requests and not foreign, foreign[:10]
    assert any(u.startswith(BASE + "/v1/") for u in b.requests)
    errors = []
    for e in b.console:
        if e.get("level") != "SEVERE":
            continue
        msg = e.get("message", "")
        if e.get("source") == "network" and any(re.search(p, msg) for p in b.allowed_errors):
            continue  # an API error the test provoked on purpose (the page showed it)
        errors.append(msg)
    assert not errors, errors[:10]
    print(f"console: {len(b.requests)} browser requests, all to {BASE}; {len(b.console)} console entries, none unexpected")


def main():
    os.makedirs(SHOTS, exist_ok=True)
    started = time.time()
    passed = failed = 0
    try:
        w = seed()
        print(f"console: seeded (installation {w.ins}, start target {w.st}, targets {w.a} {w.b} {w.c} +{len(w.more)}) "
              f"in {time.time() - started:.1f}s")
        b = Browser()
    except Exception:
        traceback.print_exc()
        print("console: 0 passed, 1 failed")
        return 1
    tests = [test_served_with_content_security_policy, test_sign_in_rejects_a_bad_key_and_shows_the_error, test_overview,
             test_key_is_kept_in_session_storage_only, test_targets_filters_badges_and_pagination, test_target_timeline, test_end_activity_cleanup,
             test_sender_key_secret_shown_once, test_api_errors_show_code_and_request_id, test_revoke_and_rotate_keys, test_audit_log,
             test_keyboard_reaches_every_action, test_phone_width,
             test_webhook_endpoints,
             test_no_request_leaves_the_origin_and_no_console_errors]
    try:
        for t in tests:
            t0 = time.time()
            try:
                t(b, w)
                passed += 1
                print(f"console: PASS {t.__name__} ({time.time() - t0:.1f}s)")
            except Exception as e:
                failed += 1
                print(f"console: FAIL {t.__name__}: {type(e).__name__}: {e}")
                traceback.print_exc(limit=3)
                try:
                    b.shot("fail-" + t.__name__)
                except Exception:
                    pass
            if t is not test_no_request_leaves_the_origin_and_no_console_errors:
                b.drain_logs()
    finally:
        b.d.quit()
    print(f"console: {time.time() - started:.1f}s")
    print(f"console: {passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
