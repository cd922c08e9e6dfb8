#!/usr/bin/env python3
"""Fault-injection suite for LiveRelay (issue 9): deploy/faults/run is the entry point.

For each scenario (A: one `liverelay serve`; B: `liverelay api` + two `liverelay worker`) it starts a
throwaway PostgreSQL, the APNs/FCM sandbox and LiveRelay on loopback ports, makes a tenant with sandbox
credentials, iOS devices with prepared start targets, and a sender key; drives a steady, bounded load of
starts, updates (state-only and with alerts) and ends; and meanwhile injects, one at a time:
  kill        SIGKILL of serve (B: of one worker), restarted at once;
  pg_restart  `pg_ctl restart -m fast`;
  terminate   pg_terminate_backend of random LiveRelay backends;
  pool        pool/thread exhaustion: long-polls (wait_until_ready_ms) and wait_ms writes blocked behind
              row locks held by a psql session;
  goaway      sandbox GOAWAY mid-batch (goaway_after_streams), then
  drop        sandbox drops connections after reading a request (drop_connection_after_request).
A webhook endpoint (every event type) points at deploy/webhooks/receiver.py on loopback; the reconciliation
also checks that every event of every acknowledged change exists and reached the receiver with a valid
signature at least once, and that no event exists for a change that did not happen (definitions in
`reconcile_webhooks`). After each fault a probe (a state-only update on a dedicated target) measures the time until the API
acknowledges a write again and until the provider accepted it ("time to recover").

The load driver retries a write with the SAME body and idempotency key on connection errors and 5xx (the
docs/http-conventions.md/docs/write-semantics.md contract) and records every 200/202 with its operation id. Simulated devices watch the sandbox's
delivery log and register an update token (PUT …/targets/{tgt}/push-token) for every start delivered to
them, so later updates and ends can go out.

When the load stops and the queue drains, it reconciles the acknowledged writes, the operations table
(psql) and the sandbox's delivery log (definitions in `reconcile`) and prints one table. Exit status 1 if
anything is lost, duplicated or out of order (or the run could not be set up), else 0.
"""
import argparse, hashlib, http.client, json, os, random, signal, socket, statistics, subprocess, sys, threading, time, uuid

ROOT = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.path.join(ROOT, ".build", "release", "liverelay")
APP = "com.example.faults"
SCHEMA = {"type": "object", "properties": {"rev": {"type": "integer", "minimum": 0}, "eta": {"type": "integer"},
                                           "note": {"type": "string", "maxLength": 64}}, "required": ["rev"]}

def log(*a):
    print(time.strftime("%H:%M:%S"), *a, file=sys.stderr, flush=True)

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def tok(seed):
    return hashlib.sha256(seed.encode()).hexdigest()

class HTTPDown(Exception):
    pass

def call(port, method, path, body=None, cred=None, timeout=30.0):
    """One HTTP/1.1 request on a fresh connection → (status, json or None, headers). Connection
    problems raise HTTPDown."""
    headers = {"Content-Type": "application/json"}
    if cred: headers["Authorization"] = "Bearer " + cred
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        c.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
        r = c.getresponse()
        data = r.read()
        c.close()
    except (OSError, http.client.HTTPException) as e:
        raise HTTPDown(f"{type(e).__name__}: {e}")
    try:
        parsed = json.loads(data) if data else None
    except ValueError:
        parsed = {"raw": data[:200].decode(errors="replace")}
    return r.status, parsed, dict(r.getheaders())

def must(resp, want, what):
    status, body, _ = resp
    if status not in want:
        raise SystemExit(f"faults: setup step {what} answered {status}: {body}")
    return body


class Run:
    """One scenario: processes, load, faults, reconciliation."""

    def __init__(self, scenario, args, workdir):
        self.scenario, self.args = scenario, args
        self.dir = os.path.join(workdir, "scenario-" + scenario)
        os.makedirs(self.dir, exist_ok=True)
        self.rng = random.Random(args.seed * 1000 + ord(scenario))
        self.short = args.short
        self.procs = {}
        self.lock = threading.Lock()
        self.acks = []          # every 200/202: dict(op, kind, target, alert, state, status, key, at)
        self.unacked = []       # writes given up on (never acknowledged)
        self.rejected = {}      # 4xx code → count (never acknowledged; informative)
        self.retries = 0        # re-sends of a write with the same key
        self.replays = 0        # answers carrying Idempotent-Replayed: true
        self.registrations = {}  # target → "ok" | "refused:<code>"
        self.faults = []        # dict(kind, at, detail, api_s, delivery_s)
        self.stop_load = threading.Event()
        self.stop_devices = threading.Event()
        self.t0 = time.time()

    # ---- processes -------------------------------------------------------------------------

    def sh(self, *cmd, **kw):
        return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout

    def as_pg(self, cmd):
        return (["runuser", "-u", "postgres", "--"] + cmd) if os.getuid() == 0 else cmd

    def psql(self, sql, db="liverelay"):
        out = subprocess.run(self.as_pg([self.pgbin + "/psql", "-X", "-q", "-tA", "-F", "\t", "-h", self.pgrun, "-U", "postgres",
                                         "-d", db, "-v", "ON_ERROR_STOP=1", "-c", sql]),
                             capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            raise RuntimeError(f"psql: {out.stderr.strip()}")
        return [l.split("\t") for l in out.stdout.splitlines() if l]

    def start_postgres(self):
        self.pgdir = os.path.join(self.dir, "pg")
        os.makedirs(self.pgdir, exist_ok=True)
        os.chmod(self.dir, 0o755); os.chmod(self.pgdir, 0o755)
        out = self.sh(os.path.join(ROOT, "deploy/local/pg-cluster"), "start", self.pgdir, env={**os.environ, "PG_FSYNC": "off"})
        urls = dict(l.split("=", 1) for l in out.splitlines() if "=" in l)
        self.database_url = urls["DATABASE_URL"]
        self.pgrun = os.path.join(self.pgdir, "run")
        self.pgbin = sorted((os.path.join("/usr/lib/postgresql", v, "bin") for v in os.listdir("/usr/lib/postgresql")),
                            key=lambda p: [int(x) for x in p.split("/")[-2].split(".") if x.isdigit()])[-1]

    def pg_restart(self):
        subprocess.run(self.as_pg([self.pgbin + "/pg_ctl", "-D", self.pgdir + "/data", "-l", self.pgdir + "/postgres.log",
                                   "-m", "fast", "-w", "-t", "60", "restart"]), check=True, capture_output=True, timeout=90)

    def spawn(self, name, args, env):
        logf = open(os.path.join(self.dir, name + ".log"), "ab")
        p = subprocess.Popen([BIN] + args, cwd=ROOT, env=env, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs[name] = (p, args, env, logf)
        return p

    def kill9(self, name):
        p = self.procs[name][0]
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=30)

    def restart(self, name):
        _, args, env, _ = self.procs[name]
        self.spawn(name, args, env)

    def stop_all(self):
        for name, (p, _, _, logf) in list(self.procs.items()):
            if p.poll() is None:
                p.terminate()
        for name, (p, _, _, logf) in list(self.procs.items()):
            try: p.wait(timeout=25)
            except subprocess.TimeoutExpired:
                p.kill(); p.wait()
            logf.close()
        if getattr(self, "pgdir", None):
            subprocess.run([os.path.join(ROOT, "deploy/local/pg-cluster"), "stop", self.pgdir], capture_output=True)

    def wait_http(self, port, path, seconds, proc=None):
        end = time.time() + seconds
        while time.time() < end:
            try:
                if call(port, "GET", path, timeout=2)[0] == 200: return True
            except HTTPDown:
                pass
            if proc is not None and proc.poll() is not None:
                return False
            time.sleep(0.1)
        return False

    def start_services(self):
        self.start_postgres()
        self.sb_port, self.sb_ctl, self.api_port = free_port(), free_port(), free_port()
        sbdir = os.path.join(self.dir, "sandbox")
        # Every restart of a LiveRelay process mints a new APNs provider token; allow that churn.
        self.spawn("sandbox", ["sandbox", "--dir", sbdir, "--listen", f"127.0.0.1:{self.sb_port}", "--control",
                               f"127.0.0.1:{self.sb_ctl}", "--token-updates-per-20min", "1000"], dict(os.environ))
        end = time.time() + 60
        while time.time() < end and not os.path.exists(sbdir + "/env") and self.procs["sandbox"][0].poll() is None:
            time.sleep(0.1)  # the files are written after both ports listen
        if not self.wait_http(self.sb_ctl, "/healthz", 30, self.procs["sandbox"][0]) or not os.path.exists(sbdir + "/env"):
            raise SystemExit("faults: the sandbox did not start (see " + self.dir + "/sandbox.log)")
        # Webhook receiver (plain http on loopback, LIVERELAY_WEBHOOK_ALLOW_PRIVATE=1): outside LiveRelay, never
        # killed; it records every request (and verifies its signature) in webhooks.jsonl.
        self.hook_port, self.hook_record = free_port(), os.path.join(self.dir, "webhooks.jsonl")
        self.hook_secret_file = os.path.join(self.dir, "webhook-secret")
        hlog = open(os.path.join(self.dir, "receiver.log"), "ab")
        hp = subprocess.Popen([sys.executable, os.path.join(ROOT, "deploy/webhooks/receiver.py"), "--port", str(self.hook_port),
                               "--secret-file", self.hook_secret_file, "--record", self.hook_record, "--tolerance", "0"],
                              cwd=ROOT, stdout=hlog, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs["receiver"] = (hp, [], {}, hlog)
        env = dict(os.environ)
        for line in open(sbdir + "/env"):
            k, _, v = line.strip().partition("=")
            if k: env[k] = v
        env.update({"DATABASE_URL": self.database_url, "LIVERELAY_KEK": __import__("base64").b64encode(os.urandom(32)).decode(),
                    "LIVERELAY_LISTEN": f"127.0.0.1:{self.api_port}", "LIVERELAY_DISPATCH_LEASE_SECONDS": str(self.args.lease),
                    "LIVERELAY_DB_POOL_SIZE": "10", "LIVERELAY_HTTP_THREADS": "16", "LIVERELAY_LOG_LEVEL": "info",
                    "LIVERELAY_WEBHOOK_ALLOW_PRIVATE": "1", "LIVERELAY_WEBHOOK_THREADS": "4"})
        self.env, self.sbdir = env, sbdir
        if self.scenario == "A":
            self.spawn("serve", ["serve"], env)
            self.killable = ["serve"]
        else:
            self.spawn("api", ["api"], env)
            for i in (1, 2):
                self.spawn(f"worker{i}", ["worker"], {**env, "LIVERELAY_WORKER_ID": f"faults-worker{i}-{int(time.time())}"})
            self.killable = ["worker1", "worker2"]
        first = self.procs["serve" if self.scenario == "A" else "api"][0]
        if not self.wait_http(self.api_port, "/readyz", 120, first):
            raise SystemExit(f"faults: LiveRelay did not become ready (see {self.dir}/*.log)")

    # ---- tenant, devices, sender key -------------------------------------------------------

    def setup_tenant(self):
        out = subprocess.run([BIN, "admin", "tenants", "create", "--name", "faults-" + self.scenario, "--daily-push-quota", "10000000"],
                             cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=60)
        if out.returncode != 0: raise SystemExit("faults: admin tenants create failed: " + out.stderr)
        t = json.loads(out.stdout)
        self.tenant_id = t["tenant"]["id"]
        self.master, publishable = t["master_key"]["credential"], t["publishable_key"]["credential"]
        hook = must(call(self.api_port, "POST", "/v1/webhook-endpoints", {"url": f"http://127.0.0.1:{self.hook_port}/hook",
                    "events": ["*"], "idempotency_key": "faults-hook"}, self.master), (201,), "webhook endpoint")
        with open(self.hook_secret_file, "w") as f: f.write(hook["secret"] + "\n")
        apns = json.load(open(self.sbdir + "/apns.json"))
        key = open(self.sbdir + "/apns-key.p8").read()
        for env in ("sandbox", "production"):
            must(call(self.api_port, "PUT", "/v1/provider-credentials/apns", {"team_id": apns["team_id"], "key_id": apns["key_id"],
                 "private_key": key, "topics": [APP], "environment": env}, self.master), (200, 201), "apns credentials")
        must(call(self.api_port, "PUT", "/v1/provider-credentials/fcm",
                  {"service_account": json.load(open(self.sbdir + "/fcm-service-account.json"))}, self.master), (200, 201), "fcm credentials")
        # Devices: iOS installations with a prepared, ready start target each. The last one is "mute":
        # it never registers update tokens (targets for the pool-exhaustion fault's long-polls).
        self.devices = []
        for i in range(self.args.devices + 1):
            inst = must(call(self.api_port, "POST", "/v1/installations", {"platform": "ios", "app_id": APP, "environment": "sandbox",
                        "install_id": str(uuid.uuid4())}, publishable), (200, 201), "register installation")
            iid, icred = inst["installation_id"], inst["credential"]
            prep = must(call(self.api_port, "POST", f"/v1/installations/{iid}/start-targets", {
                "binding_id": "bnd_faults", "activity_type": "delivery", "attributes_type": "DeliveryAttributes",
                "renderer_digest": "sha256:faults", "schema": SCHEMA, "bundle": {"bytes": 1000, "modules": 1, "files": 1}}, icred),
                (200, 201), "prepare start target")
            pts = tok("pts:" + iid)
            must(call(self.api_port, "PUT", f"/v1/installations/{iid}/start-targets/{prep['start_target_id']}/push-to-start-token",
                      {"token": pts}, icred), (200,), "push-to-start token")
            self.devices.append({"iid": iid, "cred": icred, "st": prep["start_target_id"], "tv": prep["template_version"],
                                 "pts": pts, "mute": i == self.args.devices})
        sts = [d["st"] for d in self.devices]
        self.sender = must(call(self.api_port, "POST", "/v1/remote-updates/sender-keys", {"targets": sts, "created_from": sts,
                           "permissions": ["activities:start", "activities:update", "activities:read-state", "activities:end"],
                           "idempotency_key": str(uuid.uuid4())}, self.master), (201,), "sender key")["credential"]
        self.device_by_iid = {d["iid"]: d for d in self.devices}
        self.target_device = {}

    # ---- writes ----------------------------------------------------------------------------

    def write(self, path, body, kind, give_up_s=120.0, query="", timeout=30.0):
        """POST a write, re-sending the same body (same idempotency key) on connection errors and
        5xx until an answer or `give_up_s`; records acknowledgements. → (status, body) or None."""
        end = time.time() + give_up_s
        delay = 0.1
        first = True
        while True:
            if not first:
                with self.lock: self.retries += 1
            first = False
            try:
                status, resp, headers = call(self.api_port, "POST", path + query, body, self.sender, timeout=timeout)
            except HTTPDown:
                status, resp, headers = None, None, {}
            code = (resp or {}).get("error", {}).get("code") if isinstance(resp, dict) else None
            retry = status is None or status >= 500 or code == "IDEMPOTENCY_KEY_IN_USE"
            if not retry:
                break
            if time.time() > end:
                with self.lock: self.unacked.append({"kind": kind, "key": body["idempotency_key"], "last": status})
                return None
            time.sleep(delay + self.rng.random() * delay)
            delay = min(delay * 2, 1.5)
        if status in (200, 202):
            op = resp["operation"]
            with self.lock:
                if headers.get("Idempotent-Replayed") == "true": self.replays += 1
                self.acks.append({"op": op["id"], "kind": kind, "target": resp["target"]["id"], "alert": "alert" in body,
                                  "state": "state" in body, "status": status, "key": body["idempotency_key"], "at": time.time()})
        else:
            with self.lock: self.rejected[f"{status} {code}"] = self.rejected.get(f"{status} {code}", 0) + 1
        return status, resp

    def start_body(self, dev, note):
        return {"start_target_id": dev["st"], "template_version": dev["tv"], "state": {"rev": 1, "eta": 30, "note": note},
                "alert": {"title": "Started", "body": note}, "idempotency_key": str(uuid.uuid4())}

    def writer(self, w):
        rng = random.Random(self.args.seed * 7919 + w * 31 + ord(self.scenario))
        active = []  # [target_id, revision]
        devs = [d for d in self.devices if not d["mute"]]
        interval = self.args.writers / self.args.rate  # a steady total of `rate` writes/s over all writers
        next_at = time.time() + rng.random() * interval
        while not self.stop_load.is_set():
            next_at += interval
            pause = next_at - time.time()
            if pause > 0: time.sleep(pause)
            else: next_at = time.time()  # behind (faults): no catch-up burst
            if len(active) < 2 or (len(active) < 5 and rng.random() < 0.12):
                dev = rng.choice(devs)
                r = self.write("/v1/remote-updates/live-activities/start", self.start_body(dev, f"w{w}"), "start")
                if r and r[0] == 202:
                    active.append([r[1]["target"]["id"], r[1]["target"]["revision"]])
                    with self.lock: self.target_device[r[1]["target"]["id"]] = dev["iid"]
            else:
                t = rng.choice(active)
                x = rng.random()
                if x < 0.55 or x < 0.80:
                    body = {"target_id": t[0], "state": {"rev": t[1] + 1, "eta": rng.randint(0, 60)}, "expected_revision": t[1],
                            "idempotency_key": str(uuid.uuid4())}
                    kind = "update"
                    if x >= 0.55:
                        body["alert"] = {"title": "Update", "body": f"rev {t[1] + 1}"}; kind = "update_alert"
                    r = self.write("/v1/remote-updates/live-activities/update", body, kind)
                elif x < 0.92:
                    body = {"target_id": t[0], "state": {"rev": t[1] + 1, "eta": 0, "note": "delivered"}, "expected_revision": t[1],
                            "idempotency_key": str(uuid.uuid4())}
                    r = self.write("/v1/remote-updates/live-activities/end", body, "end_state")
                else:
                    r = self.write("/v1/remote-updates/live-activities/end", {"target_id": t[0], "idempotency_key": str(uuid.uuid4())}, "end")
                if r:
                    status, resp = r
                    code = (resp or {}).get("error", {}).get("code") if status >= 400 else None
                    if status in (200, 202):
                        t[1] = resp["target"]["revision"]
                        if "end" in (resp["operation"].get("kind") or ""): active.remove(t)
                    elif code == "REVISION_CONFLICT":
                        t[1] = resp["error"]["details"]["current_revision"]
                    elif code == "TARGET_ENDED":
                        active.remove(t)

    # ---- simulated devices -----------------------------------------------------------------

    def devices_loop(self):
        seen = set()
        while not self.stop_devices.is_set():
            for d in self.devices:
                if d["mute"]: continue
                try:
                    _, body, _ = call(self.sb_ctl, "GET", f"/sandbox/deliveries?token={d['pts']}&accepted=true", timeout=10)
                except HTTPDown:
                    continue
                for rec in (body or {}).get("data", []):
                    tgt = (((rec.get("payload") or {}).get("aps") or {}).get("attributes") or {}).get("target_id")
                    if not tgt or tgt in seen: continue
                    try:
                        status, resp, _ = call(self.api_port, "PUT", f"/v1/installations/{d['iid']}/targets/{tgt}/push-token",
                                               {"token": tok("upd:" + tgt)}, d["cred"], timeout=10)
                    except HTTPDown:
                        continue  # next round
                    if status >= 500: continue
                    seen.add(tgt)
                    code = (resp or {}).get("error", {}).get("code") if status >= 400 else None
                    with self.lock: self.registrations[tgt] = "ok" if status == 200 else f"refused {status} {code}"
            self.stop_devices.wait(0.3)

    # ---- probe and faults ------------------------------------------------------------------

    def setup_probe(self):
        dev = self.devices[0]
        r = self.write("/v1/remote-updates/live-activities/start", self.start_body(dev, "probe"), "start")
        self.probe = [r[1]["target"]["id"], r[1]["target"]["revision"]]
        with self.lock: self.target_device[self.probe[0]] = dev["iid"]
        st, body, _ = call(self.api_port, "GET", f"/v1/remote-updates/live-activities/targets/{self.probe[0]}?wait_until_ready_ms=30000",
                           cred=self.sender, timeout=40)
        if st != 200: raise SystemExit(f"faults: probe target never became ready: {st} {body}")
        # Mute targets for the pool fault (started, delivered, never given an update token).
        mute = self.devices[-1]
        self.mute_targets = []
        for i in range(self.args.pool_writes):
            r = self.write("/v1/remote-updates/live-activities/start", self.start_body(mute, f"mute{i}"), "start")
            self.mute_targets.append([r[1]["target"]["id"], 1])
            with self.lock: self.target_device[r[1]["target"]["id"]] = mute["iid"]

    def probe_once(self, since, limit_s):
        """State-only update of the probe target, re-sent until acknowledged, then waited on until
        accepted by the provider. → (api_s, delivery_s) measured from `since` (None = not recovered)."""
        t = self.probe
        end = since + limit_s
        body = {"target_id": t[0], "state": {"rev": t[1] + 1, "eta": 1, "note": "probe"}, "expected_revision": t[1],
                "idempotency_key": str(uuid.uuid4())}
        r = self.write("/v1/remote-updates/live-activities/update", body, "update", give_up_s=max(1.0, end - time.time()), query="?wait_ms=2000",
                       timeout=8)
        if not r: return None, None
        if r[0] != 202:
            if (r[1] or {}).get("error", {}).get("code") == "REVISION_CONFLICT": t[1] = r[1]["error"]["details"]["current_revision"]
            return None, None
        api_s = time.time() - since
        t[1] = r[1]["target"]["revision"]
        op = r[1]["operation"]
        while op["status"] in ("queued", "sending") and time.time() < end:
            time.sleep(0.1)
            try:
                st, o, _ = call(self.api_port, "GET", f"/v1/remote-updates/operations/{op['id']}", cred=self.sender, timeout=10)
                if st == 200: op = o
            except HTTPDown:
                pass
        return api_s, (time.time() - since if op["status"] == "accepted" else None)

    def recover(self, since):
        limit = 90.0
        api_s = None
        while time.time() < since + limit:
            a, d = self.probe_once(since, limit)
            api_s = api_s if api_s is not None else a
            if d is not None: return api_s, d
        return api_s, None

    def sandbox_faults(self, body):
        call(self.sb_ctl, "PUT", "/sandbox/connection-faults", body, timeout=10)

    def inject(self, kind):
        rng = self.rng
        detail = ""
        at = time.time()
        if kind == "kill":
            name = rng.choice(self.killable)
            self.kill9(name)
            detail = name
            time.sleep(rng.uniform(0, 0.5))
            self.restart(name)
        elif kind == "pg_restart":
            self.pg_restart()
        elif kind == "terminate":
            n = self.psql("SELECT count(pg_terminate_backend(pid)) FROM (SELECT pid FROM pg_stat_activity WHERE datname = 'liverelay' "
                          "AND usename = 'liverelay' AND pid <> pg_backend_pid() ORDER BY random() LIMIT 6) s")
            detail = f"{n[0][0]} backends"
        elif kind == "pool":
            detail = self.exhaust_pool()
        elif kind == "goaway":
            n = rng.randint(2, 6)
            self.sandbox_faults({"goaway_after_streams": n}); detail = f"goaway_after_streams={n}"
            time.sleep(rng.uniform(2, 4)); self.sandbox_faults({})
        elif kind == "drop":
            n = rng.randint(2, 6)
            self.sandbox_faults({"drop_connection_after_request": n}); detail = f"drop_connection_after_request={n}"
            time.sleep(rng.uniform(2, 4)); self.sandbox_faults({})
        return at, detail

    def exhaust_pool(self):
        """Holds row locks on the mute targets (psql) while many wait_ms writes to them queue up behind
        the locks (each holding a pool connection until lock_timeout or the lock goes) and many long-polls
        occupy API threads. Returns a description."""
        hold = 6
        ids = ",".join("'" + t[0] + "'" for t in self.mute_targets)
        locker = subprocess.Popen(self.as_pg([self.pgbin + "/psql", "-X", "-q", "-h", self.pgrun, "-U", "postgres", "-d", "liverelay", "-c",
                                              f"BEGIN; SELECT 1 FROM targets WHERE id IN ({ids}) FOR UPDATE; SELECT pg_sleep({hold}); COMMIT;"]),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.3)
        ths = []
        def slow_write(t):
            body = {"target_id": t[0], "state": {"rev": t[1] + 1, "eta": 2, "note": "slow"}, "expected_revision": t[1],
                    "idempotency_key": str(uuid.uuid4())}
            r = self.write("/v1/remote-updates/live-activities/update", body, "update", give_up_s=60, query="?wait_ms=4000")
            if r and r[0] == 202: t[1] = r[1]["target"]["revision"]
            elif r and (r[1] or {}).get("error", {}).get("code") == "REVISION_CONFLICT": t[1] = r[1]["error"]["details"]["current_revision"]
        def long_poll(t):
            try: call(self.api_port, "GET", f"/v1/remote-updates/live-activities/targets/{t}?wait_until_ready_ms=5000", cred=self.sender, timeout=20)
            except HTTPDown: pass
        for t in self.mute_targets: ths.append(threading.Thread(target=slow_write, args=(t,)))
        for i in range(self.args.pool_polls): ths.append(threading.Thread(target=long_poll, args=(self.mute_targets[i % len(self.mute_targets)][0],)))
        for t in ths: t.start()
        self._pool_threads = ths
        self._pool_locker = locker
        return f"{len(self.mute_targets)} wait_ms writes behind {hold}s row locks + {self.args.pool_polls} long-polls"

    def faults_loop(self):
        plan = (["kill"] * self.args.kills + ["pg_restart"] * self.args.pg_restarts + ["terminate"] * self.args.terminates
                + ["pool"] * self.args.pools + ["goaway", "drop"] * self.args.sandbox_faults)
        self.rng.shuffle(plan)
        time.sleep(3)
        for kind in plan:
            if time.time() > self.deadline: log(f"[{self.scenario}] time budget reached; skipping the remaining faults"); break
            time.sleep(self.rng.uniform(0.5, 2.5))
            at, detail = self.inject(kind)
            api_s, delivery_s = self.recover(at)
            if kind == "pool":
                for t in self._pool_threads: t.join(timeout=90)
                self._pool_locker.wait(timeout=30)
            self.faults.append({"kind": kind, "at": round(at - self.t0, 1), "detail": detail, "api_s": api_s, "delivery_s": delivery_s})
            log(f"[{self.scenario}] fault {len(self.faults)}/{len(plan)} {kind} {detail}: api {fmt(api_s)} s, delivered {fmt(delivery_s)} s")
        time.sleep(2)

    # ---- drain and reconcile ---------------------------------------------------------------

    def drain(self, seconds):
        """Waits until no operation of the tenant is queued or in flight, except those parked for a
        token their target does not have (True after three clean reads a second apart), or until
        `seconds` pass (False). The pending reason is NULL for most live operations: compared
        without COALESCE, `NOT (NULL = 'token_pending' AND …)` was NULL and left out every live
        start (its target has no update token yet), so a start in flight when serve was killed
        just before the load stopped was never waited for; it was still `sending` when the run
        reconciled, and its lease rescue (`unknown`) then looked like an invented event."""
        end = time.time() + seconds
        clean = 0
        while time.time() < end:
            try:
                n = int(self.psql(f"""SELECT count(*) FROM operations o JOIN targets t ON t.tenant_id = o.tenant_id AND t.id = o.target_id
                    WHERE o.tenant_id = '{self.tenant_id}' AND o.status IN ('queued', 'sending')
                      AND NOT (COALESCE(o.pending_reason, '') = 'token_pending' AND t.push_token IS NULL)""")[0][0])
            except Exception as e:
                n = -1
            clean = clean + 1 if n == 0 else 0
            if clean >= 3: return True
            time.sleep(1)
        return False

    def collect(self):
        ops = {}
        for r in self.psql(f"""SELECT o.id, o.target_id, o.kind, o.status, coalesce(o.pending_reason, ''), o.has_state, o.alert IS NOT NULL,
                   o.revision, coalesce(o.provider_timestamp, -1), coalesce(o.apns_id, ''), coalesce(o.failure::text, ''), o.seq
              FROM operations o WHERE o.tenant_id = '{self.tenant_id}'"""):
            ops[r[0]] = {"target": r[1], "kind": r[2], "status": r[3], "pending": r[4], "has_state": r[5] == "t", "alert": r[6] == "t",
                         "revision": int(r[7]), "ts": int(r[8]), "apns_id": r[9].lower(), "failure": r[10], "seq": int(r[11])}
        targets = {}
        for r in self.psql(f"SELECT id, status, coalesce(push_token, ''), coalesce(end_reason, '') FROM targets WHERE tenant_id = '{self.tenant_id}'"):
            targets[r[0]] = {"status": r[1], "token": r[2], "end_reason": r[3]}
        _, body, _ = call(self.sb_ctl, "GET", "/sandbox/deliveries?provider=apns", timeout=120)
        self.collected_at = time.time()
        return ops, targets, body["data"]

    def reconcile(self):
        """Definitions (per scenario):
        - acknowledged: distinct operation ids the API answered 200/202 for (replays count once).
        - lost: acknowledged, and (a) no such operation row; or (b) `accepted` with no 200 delivery carrying
          its apns-id in the sandbox log; or (c) `failed` without any provider answer (failure has no
          provider_status) — an outage turned into a permanent failure; or (d) `unknown` although it is a
          state-only update or end (docs/write-semantics.md: those are resent, never unknown); or (e) still queued/sending after
          the drain, unless parked `token_pending` on a target whose start never reached its device (no 200
          start delivery in the sandbox log) or that belongs to the mute device. Superseded, expired,
          cancelled (by a rule: already_ended, ended_on_device, …) and provider-`failed` are outcomes, not losses.
        - duplicated: a start (by attributes.target_id) or an alert update (by target token + aps.timestamp)
          that the sandbox received (and answered 200) more than once.
        - out of order: per target, the 200 update/end deliveries in the sandbox's receive order whose
          aps.timestamp or content-state.rev decreases (a resend of the same operation repeats both: allowed).
        - unknown: operations left `unknown` (allowed for starts/alerts by docs/write-semantics.md; counted, not failed).
        """
        ops, targets, deliveries = self.collect()
        acked = {}
        for a in self.acks: acked.setdefault(a["op"], a)
        tok_target = {tok("upd:" + t): t for t in targets}
        by_apns = {}
        start_deliv, alert_deliv, per_target = {}, {}, {}
        for d in deliveries:
            if d["status"] != 200: continue
            aps = (d.get("payload") or {}).get("aps") or {}
            by_apns.setdefault((d.get("headers") or {}).get("apns-id", "").lower(), []).append(d)
            if aps.get("event") == "start":
                tgt = (aps.get("attributes") or {}).get("target_id")
                start_deliv.setdefault(tgt, []).append(d)
            else:
                tgt = tok_target.get(d["token"])
                if tgt is None: continue
                per_target.setdefault(tgt, []).append(d)
                if aps.get("alert") is not None and aps.get("event") == "update":
                    alert_deliv.setdefault((tgt, aps.get("timestamp")), []).append(d)
        lost, why = [], {}
        unknown = {}
        status_count = {}
        parked = 0
        mute_iid = self.devices[-1]["iid"]
        for op_id, a in acked.items():
            o = ops.get(op_id)
            reason = None
            if o is None: reason = "no operation row"
            else:
                status_count[o["status"]] = status_count.get(o["status"], 0) + 1
                if o["status"] == "accepted":
                    if o["apns_id"] not in by_apns: reason = "accepted but never delivered"
                elif o["status"] == "failed":
                    try: f = json.loads(o["failure"] or "{}")
                    except ValueError: f = {}
                    if f.get("provider_status") in (None, 0): reason = f"failed without a provider answer ({f.get('code')})"
                elif o["status"] == "unknown":
                    unknown[o["kind"] + ("+alert" if o["alert"] else "")] = unknown.get(o["kind"] + ("+alert" if o["alert"] else ""), 0) + 1
                    if o["kind"] != "start" and not o["alert"]: reason = "unknown although resendable"
                elif o["status"] in ("queued", "sending"):
                    t = targets.get(o["target"], {})
                    device_never_started = o["target"] not in start_deliv or self.target_device.get(o["target"]) == mute_iid
                    if o["status"] == "queued" and o["pending"] == "token_pending" and not t.get("token") and device_never_started:
                        parked += 1
                    else:
                        reason = f"still {o['status']} ({o['pending'] or '-'}) after the drain; target {t.get('status')}, registration {self.registrations.get(o['target'], 'none')}"
            if reason:
                lost.append(op_id); why.setdefault(reason.split(";")[0], []).append((op_id, o and o["target"], reason))
        dup_starts = {t: len(v) for t, v in start_deliv.items() if len(v) > 1}
        dup_alerts = {k: len(v) for k, v in alert_deliv.items() if len(v) > 1}
        disorder = []
        for tgt, ds in per_target.items():
            ds.sort(key=lambda d: d["sequence"])
            hi_ts, hi_rev = -1, -1
            for d in ds:
                aps = d["payload"]["aps"]
                ts, rev = aps.get("timestamp", 0), (aps.get("content-state") or {}).get("rev", -1)
                if ts < hi_ts or (rev is not None and rev < hi_rev):
                    disorder.append((tgt, d["sequence"], ts, hi_ts, rev, hi_rev))
                hi_ts, hi_rev = max(hi_ts, ts), max(hi_rev, rev if rev is not None else -1)
        hooks = self.reconcile_webhooks(acked, ops, targets)
        diagnosis = self.diagnose_safely([x[0] for v in why.values() for x in v][:3] + [e[2] for e in hooks["event_examples"][1] if isinstance(e[2], str)][:2])
        self.result = {
            **hooks,
            "acknowledged": len(acked), "ack_by_kind": count_by(acked.values(), "kind"), "statuses": status_count,
            "lost": len(lost), "lost_why": {k: v[:5] for k, v in why.items()}, "lost_counts": {k: len(v) for k, v in why.items()},
            "dup_starts": len(dup_starts), "dup_alerts": len(dup_alerts), "dup_examples": list(dup_starts.items())[:3] + list(dup_alerts.items())[:3],
            "out_of_order": len(disorder), "disorder_examples": disorder[:5], "unknown": unknown, "parked": parked,
            "deliveries": len(deliveries), "retries": self.retries, "replays": self.replays, "unacked": len(self.unacked),
            "rejected": self.rejected, "registrations_refused": sum(1 for v in self.registrations.values() if v != "ok"),
            "faults": self.faults, "diagnosis": diagnosis,
        }
        json.dump(self.result, open(os.path.join(self.dir, "result.json"), "w"), indent=1, default=str)
        return self.result

    def diagnose_safely(self, op_ids):
        """`diagnose`, whose own failure is reported in its place instead of ending the run."""
        try: return self.diagnose(op_ids)
        except Exception as e: return [f"no diagnosis: {type(e).__name__}: {e}"]

    def diagnose(self, op_ids):
        """For a failed run: each named operation's row (read now, after the webhook drain) and its
        events with their times, relative to the end of the load, plus the LiveRelay log lines that
        name the operation or its target, so a failure in CI can be read from its output alone."""
        out = []
        for op_id in dict.fromkeys(op_ids):
            try:
                rows = self.psql(f"""SELECT o.kind, o.status, coalesce(o.pending_reason, '-'), o.attempts, coalesce(o.lease_owner, '-'),
                       round(extract(epoch FROM o.created_at)::numeric, 1), round(extract(epoch FROM o.sent_at)::numeric, 1),
                       round(extract(epoch FROM o.lease_expires_at)::numeric, 1), round(extract(epoch FROM o.updated_at)::numeric, 1),
                       o.target_id, coalesce(o.failure::text, '-')
                  FROM operations o WHERE o.tenant_id = '{self.tenant_id}' AND o.id = '{op_id}'""")
                evs = self.psql(f"""SELECT type, round(extract(epoch FROM created_at)::numeric, 1) FROM events
                  WHERE tenant_id = '{self.tenant_id}' AND data->'object'->>'id' = '{op_id}' ORDER BY created_at""")
            except Exception as e:
                out.append(f"{op_id}: cannot read ({e})"); continue
            if not rows: out.append(f"{op_id}: no row"); continue
            r = rows[0]
            rel = lambda v: "-" if not v else f"{float(v) - self.load_stopped_at:+.1f}s"
            out.append(f"{op_id} {r[0]} {r[1]} pending={r[2]} attempts={r[3]} owner={r[4]} created={rel(r[5])} sent={rel(r[6])} "
                       f"lease_expires={rel(r[7])} updated={rel(r[8])} failure={r[10][:160]} events=" + ",".join(f"{t}@{rel(at)}" for t, at in evs))
            for name in self.procs:
                path = os.path.join(self.dir, name + ".log")
                if not os.path.exists(path): continue
                with open(path, errors="replace") as f: hits = [compact_log_line(l) for l in f if op_id in l or r[9] in l]
                for l in hits[-8:]: out.append(f"  {name}.log: {l}")
        out.append(f"times relative to the end of the load ({time.strftime('%H:%M:%S', time.gmtime(self.load_stopped_at))} UTC); "
                   f"drain ended {self.drain_ended_at - self.load_stopped_at:+.1f}s, collected {self.collected_at - self.load_stopped_at:+.1f}s; "
                   "faults " + ", ".join(f"{f['kind']}@{f['at'] + self.t0 - self.load_stopped_at:+.1f}s" for f in self.faults))
        return out

    def drain_webhooks(self, seconds):
        """Waits until no webhook delivery of the tenant is pending (True) or `seconds` pass."""
        end = time.time() + seconds
        while time.time() < end:
            try:
                if self.psql(f"SELECT count(*) FROM webhook_deliveries WHERE tenant_id = '{self.tenant_id}' AND status = 'pending'")[0][0] == "0":
                    return True
            except Exception:
                pass
            time.sleep(1)
        return False

    def reconcile_webhooks(self, acked, ops, targets):
        """Definitions:
        - events lost: an acknowledged write whose operation ended accepted/failed/unknown/expired without the
          matching operation.<status> event (the event commits with the status change), or an ended target
          without target.ended.
        - events invented: an operation.<s> event whose operation row is missing or still queued/sending; a
          target.ended event for a target that is not ended; the same (type, object) recorded twice.
        - events undelivered: an event of the tenant that the receiver never received with a valid signature
          (at least once; duplicates are allowed and counted).
        """
        drained = self.drain_webhooks(90)  # a delivery leased by a killed worker comes due after its 60 s lease
        evs = [(r[0], r[1], r[2]) for r in self.psql(
            f"SELECT id, type, coalesce(data->'object'->>'id', '') FROM events WHERE tenant_id = '{self.tenant_id}'")]
        got = {}
        if os.path.exists(self.hook_record):
            for line in open(self.hook_record):
                try: r = json.loads(line)
                except ValueError: continue
                if r.get("verified"): got[r.get("event_id")] = got.get(r.get("event_id"), 0) + 1
        have = {(t, oid) for _, t, oid in evs}
        lost, invented = [], []
        for op_id in acked:
            o = ops.get(op_id)
            if o and o["status"] in ("accepted", "failed", "unknown", "expired") and ("operation." + o["status"], op_id) not in have:
                lost.append(("operation." + o["status"], op_id))
        for tid, t in targets.items():
            if t["status"] == "ended" and ("target.ended", tid) not in have: lost.append(("target.ended", tid))
        seen = {}
        for eid, typ, oid in evs:
            seen[(typ, oid)] = seen.get((typ, oid), 0) + 1
            if typ.startswith("operation.") and (oid not in ops or ops[oid]["status"] in ("queued", "sending")):
                invented.append((eid, typ, oid))
            if typ == "target.ended" and targets.get(oid, {}).get("status") != "ended":
                invented.append((eid, typ, oid))
        invented += [("twice", k, v) for k, v in seen.items() if v > 1 and k[0] != "target.ready" and k[0] != "start_target.ready"]
        undelivered = [eid for eid, _, _ in evs if eid not in got]
        return {"events": len(evs), "events_lost": len(lost), "events_invented": len(invented), "events_undelivered": len(undelivered),
                "webhook_duplicates": sum(v - 1 for v in got.values() if v > 1), "webhooks_drained": drained,
                "event_examples": (lost[:3], invented[:3], undelivered[:3])}

    # ---- the whole scenario ----------------------------------------------------------------

    def run(self):
        self.deadline = time.time() + self.args.max_seconds
        try:
            log(f"[{self.scenario}] starting PostgreSQL, sandbox and LiveRelay in {self.dir}")
            self.start_services()
            self.setup_tenant()
            dev = threading.Thread(target=self.devices_loop, daemon=True); dev.start()
            self.setup_probe()
            log(f"[{self.scenario}] load: {self.args.writers} writers, {self.args.devices} devices; faults follow")
            writers = [threading.Thread(target=self.writer, args=(w,), daemon=True) for w in range(self.args.writers)]
            for w in writers: w.start()
            self.faults_loop()
            self.stop_load.set()
            for w in writers: w.join(timeout=150)
            log(f"[{self.scenario}] load stopped ({len(self.acks)} acknowledgements); draining")
            self.load_stopped_at = time.time()
            drained = self.drain(self.args.drain_seconds)
            self.drain_ended_at = time.time()
            self.stop_devices.set(); dev.join(timeout=15)
            res = self.reconcile()
            res["drained"] = drained
            return res
        finally:
            old = [signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)]
            self.stop_all()  # never interrupted half-way: nothing started here outlives the suite
            for s, h in zip((signal.SIGINT, signal.SIGTERM), old): signal.signal(s, h)


def compact_log_line(line):
    """A LiveRelay JSON log line in one short line: its time, message, status and the other fields."""
    try: d = json.loads(line)
    except ValueError: d = None
    if not isinstance(d, dict): return line.strip()[:240]
    head = [str(d.pop("ts", ""))[11:23], str(d.pop("msg", ""))]
    for k in ("level", "request_id", "bytes_in", "bytes_out", "route", "worker", "component"): d.pop(k, None)
    return " ".join(head + [f"{k}={v}" for k, v in d.items()])[:240]

def count_by(items, key):
    out = {}
    for i in items: out[i[key]] = out.get(i[key], 0) + 1
    return out

def fmt(v):
    return "-" if v is None else f"{v:.1f}"

def recovery_cell(faults, kind):
    fs = [f for f in faults if f["kind"] == kind]
    if not fs: return "-"
    ds = [f["delivery_s"] for f in fs]
    bad = sum(1 for d in ds if d is None)
    ok = [d for d in ds if d is not None]
    s = f"n={len(fs)} med {statistics.median(ok):.1f} max {max(ok):.1f}" if ok else f"n={len(fs)}"
    return s + (f" NOT RECOVERED {bad}" if bad else "")

def print_table(results, elapsed):
    cols = list(results)
    rows = [("writes acknowledged", lambda r: str(r["acknowledged"])),
            ("  by kind", lambda r: " ".join(f"{k}:{v}" for k, v in sorted(r["ack_by_kind"].items()))),
            ("  final statuses", lambda r: " ".join(f"{k}:{v}" for k, v in sorted(r["statuses"].items()))),
            ("lost", lambda r: str(r["lost"]) + ("  " + "; ".join(f"{k}: {v}" for k, v in r["lost_counts"].items()) if r["lost"] else "")),
            ("start/alert deliveries duplicated", lambda r: f"{r['dup_starts'] + r['dup_alerts']} (starts {r['dup_starts']}, alerts {r['dup_alerts']})"),
            ("state updates out of order (targets)", lambda r: str(r["out_of_order"])),
            ("operations left unknown", lambda r: str(sum(r["unknown"].values())) + (" (" + " ".join(f"{k}:{v}" for k, v in sorted(r["unknown"].items())) + ")" if r["unknown"] else "")),
            ("parked: no device token (by design)", lambda r: str(r["parked"])),
            ("sandbox deliveries (200)", lambda r: str(r["deliveries"])),
            ("same-key re-sends / replays", lambda r: f"{r['retries']} / {r['replays']}"),
            ("writes never acknowledged (gave up)", lambda r: str(r["unacked"])),
            ("rejected (4xx, not acked)", lambda r: " ".join(f"{k}:{v}" for k, v in sorted(r["rejected"].items())) or "0"),
            ("token registrations refused", lambda r: str(r["registrations_refused"])),
            ("queue drained", lambda r: "yes" if r.get("drained") else "NO"),
            ("events (webhooks)", lambda r: str(r["events"])),
            ("  lost / invented / undelivered", lambda r: f"{r['events_lost']} / {r['events_invented']} / {r['events_undelivered']}"),
            ("  delivered more than once", lambda r: str(r["webhook_duplicates"])),
            ("  webhook queue drained", lambda r: "yes" if r.get("webhooks_drained") else "NO")]
    for kind in ("kill", "pg_restart", "terminate", "pool", "goaway", "drop"):
        rows.append((f"recover s after {kind}", lambda r, k=kind: recovery_cell(r["faults"], k)))
    w0 = max(len(r[0]) for r in rows)
    widths = [max(len(c), *(len(f(results[c])) for _, f in rows)) for c in cols]
    line = "+" + "-" * (w0 + 2) + "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    print(line)
    print("| " + "faults suite".ljust(w0) + " | " + " | ".join(("scenario " + c).ljust(w) for c, w in zip(cols, widths)) + " |")
    print(line)
    for name, f in rows:
        print("| " + name.ljust(w0) + " | " + " | ".join(f(results[c]).ljust(w) for c, w in zip(cols, widths)) + " |")
    print(line)
    print(f"elapsed {elapsed:.0f} s")


def main():
    ap = argparse.ArgumentParser(description="LiveRelay fault-injection suite (issue 9)")
    ap.add_argument("--short", action="store_true", help="the ~2-minute CI variant")
    ap.add_argument("--scenario", default="AB", help="A (serve), B (api + 2 workers) or AB (default)")
    ap.add_argument("--seed", type=int, default=int(time.time()) % 100000)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    a = ap.parse_args()
    def on_term(*_): raise KeyboardInterrupt("SIGTERM")
    signal.signal(signal.SIGTERM, on_term)  # `timeout` in deploy/faults/run: clean up, then exit
    full = not a.short
    a.kills = 20 if full else 3
    a.pg_restarts = 3 if full else 1
    a.terminates = 4 if full else 1
    a.pools = 2 if full else 1
    a.sandbox_faults = 2 if full else 1
    a.writers = 4
    a.rate = 40.0  # writes/s offered in total (2 shared cores run PostgreSQL, LiveRelay, the sandbox and this driver)
    a.devices = 4 if full else 3
    a.pool_writes = 12 if full else 8
    a.pool_polls = 40 if full else 24
    a.lease = 12 if full else 8
    a.drain_seconds = 120 if full else 50
    a.max_seconds = 600 if full else 75
    workdir = a.workdir or __import__("tempfile").mkdtemp(prefix="liverelay-faults.")
    os.chmod(workdir, 0o755)
    log(f"faults: {'short' if a.short else 'full'} run, scenarios {a.scenario}, seed {a.seed}, work dir {workdir}")
    t0 = time.time()
    results, failed = {}, False
    for sc in a.scenario:
        try:
            results[sc] = Run(sc, a, workdir).run()
        except SystemExit as e:
            log(str(e)); failed = True
        except Exception as e:
            import traceback; traceback.print_exc(); failed = True
    if results: print_table(results, time.time() - t0)
    for sc, r in results.items():
        for k, v in r["lost_why"].items():
            for ex in v[:3]: print(f"  [{sc}] lost: {ex}")
        for ex in r["dup_examples"]: print(f"  [{sc}] duplicated: {ex}")
        for ex in r["disorder_examples"]: print(f"  [{sc}] out of order (target, seq, ts, max ts, rev, max rev): {ex}")
        if any(f["delivery_s"] is None for f in r["faults"]): print(f"  [{sc}] some faults never recovered")
        if r["events_lost"] or r["events_invented"] or r["events_undelivered"]: print(f"  [{sc}] events (lost, invented, undelivered): {r['event_examples']}")
        if r["lost"] or r["events_invented"]:
            for line in r["diagnosis"]: print(f"  [{sc}] diagnosis: {line}")
    bad = failed or len(results) < len(a.scenario) or any(r["lost"] or r["dup_starts"] or r["dup_alerts"] or r["out_of_order"]
                                                          or any(f["delivery_s"] is None for f in r["faults"]) or not r.get("drained")
                                                          or r["events_lost"] or r["events_invented"] or r["events_undelivered"]
                                                          for r in results.values())
    print("faults: " + ("FAILED" if bad else "passed") + f" (seed {a.seed}; details in {workdir}/scenario-*/)")
    if not a.keep and not bad:
        subprocess.run(["rm", "-rf", workdir])
    sys.exit(1 if bad else 0)

if __name__ == "__main__":
    main()
