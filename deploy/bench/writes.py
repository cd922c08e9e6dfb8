#!/usr/bin/env python3
"""Write-path load driver for deploy/bench/writes (issue 5).

Sets up one tenant with an iOS installation, a prepared start target and a sender key, starts
TARGETS activities, then runs CLIENTS threads for SECONDS seconds, each updating its own share of
the targets round-robin with the right expected_revision. Prints accepted writes/s and latency
percentiles as `key=value` lines. Loopback only; bounded in time.
"""
import http.client, json, os, sys, threading, time, uuid

base_host, base_port = sys.argv[1], int(sys.argv[2])
master, publishable = sys.argv[3], sys.argv[4]
TARGETS = int(os.environ.get("BENCH_TARGETS", "1000"))
CLIENTS = int(os.environ.get("BENCH_CLIENTS", "16"))
SECONDS = float(os.environ.get("BENCH_SECONDS", "20"))

def call(conn, method, path, body, cred):
    headers = {"Authorization": "Bearer " + cred, "Content-Type": "application/json"}
    conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
    r = conn.getresponse()
    data = r.read()
    return r.status, (json.loads(data) if data else None)

def must(status, body, want, what):
    if status not in want:
        sys.exit(f"bench/writes: {what} answered {status}: {body}")
    return body

c = http.client.HTTPConnection(base_host, base_port, timeout=30)
inst = must(*call(c, "POST", "/v1/installations", {"platform": "ios", "app_id": "com.example.bench", "environment": "sandbox",
                                                   "install_id": str(uuid.uuid4())}, publishable), (201,), "register")
icred, iid = inst["credential"], inst["installation_id"]
prep = must(*call(c, "POST", f"/v1/installations/{iid}/start-targets", {
    "binding_id": "bnd_bench", "activity_type": "delivery", "attributes_type": "DeliveryAttributes", "renderer_digest": "sha256:bench",
    "schema": {"type": "object", "properties": {"eta": {"type": "integer", "minimum": 0}, "status": {"type": "string", "maxLength": 64}},
               "required": ["eta"]},
    "bundle": {"bytes": 1000, "modules": 1, "files": 1}}, icred), (200, 201), "prepare")
st, tv = prep["start_target_id"], prep["template_version"]
must(*call(c, "PUT", f"/v1/installations/{iid}/start-targets/{st}/push-to-start-token", {"token": "ab" * 32}, icred), (200,), "token")
key = must(*call(c, "POST", "/v1/remote-updates/sender-keys", {"targets": [st], "created_from": [st],
           "permissions": ["activities:start", "activities:update", "activities:read-state", "activities:end"],
           "idempotency_key": str(uuid.uuid4())}, master), (201,), "sender key")["credential"]

targets = []
lock = threading.Lock()
def starter(n):
    conn = http.client.HTTPConnection(base_host, base_port, timeout=30)
    for _ in range(n):
        r = must(*call(conn, "POST", "/v1/remote-updates/live-activities/start", {
            "start_target_id": st, "template_version": tv, "state": {"eta": 30, "status": "preparing"},
            "alert": {"title": "Preparing", "body": "Your order is being prepared"}, "idempotency_key": str(uuid.uuid4())}, key), (202,), "start")
        with lock:
            targets.append([r["target"]["id"], r["target"]["revision"]])
t0 = time.time()
ths = [threading.Thread(target=starter, args=(TARGETS // CLIENTS + (1 if i < TARGETS % CLIENTS else 0),)) for i in range(CLIENTS)]
[t.start() for t in ths]; [t.join() for t in ths]
print(f"setup_starts={len(targets)} setup_seconds={time.time() - t0:.1f}", file=sys.stderr)

latencies, accepted, rejected = [], [0], [0]
stop_at = time.time() + SECONDS
def updater(share):
    conn = http.client.HTTPConnection(base_host, base_port, timeout=30)
    mine, i, lat = [], 0, []
    ok = bad = 0
    while time.time() < stop_at:
        t = share[i % len(share)]; i += 1
        s = time.perf_counter()
        status, body = call(conn, "POST", "/v1/remote-updates/live-activities/update", {
            "target_id": t[0], "state": {"eta": i % 60, "status": "on the way"}, "expected_revision": t[1],
            "idempotency_key": str(uuid.uuid4())}, key)
        lat.append(time.perf_counter() - s)
        if status == 202:
            ok += 1; t[1] = body["target"]["revision"]
        else:
            bad += 1
    with lock:
        latencies.extend(lat); accepted[0] += ok; rejected[0] += bad
shares = [targets[i::CLIENTS] for i in range(CLIENTS)]
ths = [threading.Thread(target=updater, args=(s,)) for s in shares]
t0 = time.time()
[t.start() for t in ths]; [t.join() for t in ths]
elapsed = time.time() - t0
latencies.sort()
pct = lambda p: latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000 if latencies else 0
print(f"clients={CLIENTS} targets={len(targets)} seconds={elapsed:.1f}")
print(f"accepted_updates={accepted[0]} rejected={rejected[0]}")
print(f"writes_per_second={accepted[0] / elapsed:.1f}")
print(f"latency_p50_ms={pct(0.50):.2f} latency_p99_ms={pct(0.99):.2f}")
