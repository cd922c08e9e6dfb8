-- wrk load script for deploy/bench/writes: compiled client (wrk, epoll + LuaJIT) so the load
-- generator does not eat the cores it measures. Loopback only (the URL wrk is given).
--
-- Environment:
--   BENCH_MODE        update | start | end
--   BENCH_CREDENTIAL  the sender key
--   BENCH_TARGETS_FILE  update/end: one target per line, `id [revision]`
--   BENCH_REVISION    update: the revision of lines without one (default 1)
--   BENCH_START_TARGET, BENCH_TEMPLATE_VERSION  start: the ready start target and its version
--   BENCH_THREADS     the -t given to wrk (targets are split between threads)
-- Each thread owns its share of the targets and never has two requests in flight on one
-- target: an update goes to the next idle target, and the 202 answer (its target id and new
-- revision) puts that target back. Prints key=value lines in done().

local mode = os.getenv("BENCH_MODE") or "update"
local credential = os.getenv("BENCH_CREDENTIAL")
local threads = {}
local counter = 0

function setup(thread)
  thread:set("tid", #threads)
  table.insert(threads, thread)
end

local queue, head, tail = {}, 1, 0
local nonce
local headers

function init(args)
  nonce = tostring(tid) .. "-" .. tostring(os.time()) .. "-" .. tostring(math.random(1, 1e9))
  headers = { ["Authorization"] = "Bearer " .. credential, ["Content-Type"] = "application/json" }
  local n = tonumber(os.getenv("BENCH_THREADS") or "1")
  local revision = tonumber(os.getenv("BENCH_REVISION") or "1")
  local file = os.getenv("BENCH_TARGETS_FILE")
  if file and mode ~= "start" then
    local i = 0
    for line in io.lines(file) do
      if line ~= "" then
        local id, rev = string.match(line, "^(%S+)%s*(%d*)")
        if i % n == tid then tail = tail + 1; queue[tail] = { id, tonumber(rev) or revision } end
        i = i + 1
      end
    end
  end
end

local function key()
  counter = counter + 1
  return nonce .. "-" .. counter
end

function request()
  if mode == "start" then
    return wrk.format("POST", "/v1/remote-updates/live-activities/start", headers,
      '{"start_target_id":"' .. os.getenv("BENCH_START_TARGET") .. '","template_version":"' .. os.getenv("BENCH_TEMPLATE_VERSION") ..
      '","state":{"eta":30,"status":"preparing"},"alert":{"title":"Preparing","body":"Your order is being prepared"},' ..
      '"idempotency_key":"' .. key() .. '"}')
  end
  if head > tail then  -- every target busy (more connections than targets): wait for one
    return wrk.format("GET", "/healthz")
  end
  local t = queue[head]; queue[head] = nil; head = head + 1
  if mode == "end" then
    return wrk.format("POST", "/v1/remote-updates/live-activities/end", headers,
      '{"target_id":"' .. t[1] .. '","idempotency_key":"' .. key() .. '"}')
  end
  return wrk.format("POST", "/v1/remote-updates/live-activities/update", headers,
    '{"target_id":"' .. t[1] .. '","state":{"eta":' .. (counter % 60) .. ',"status":"on the way"},"expected_revision":' .. t[2] ..
    ',"idempotency_key":"' .. key() .. '"}')
end

accepted = 0

function response(status, hdrs, body)
  if status ~= 202 then return end
  accepted = accepted + 1
  if mode ~= "start" then  -- the target is idle again (an end on an `ending` target queues another cleanup)
    local id = string.match(body, '"target_id":"(tgt_[0-9a-z]+)"')
    local rev = string.match(body, '"revision":(%d+)')
    if id and rev then tail = tail + 1; queue[tail] = { id, tonumber(rev) } end
  end
end

function done(summary, latency, requests)
  local ok = 0
  for _, t in ipairs(threads) do ok = ok + (t:get("accepted") or 0) end
  local seconds = summary.duration / 1e6
  local key = ({ update = "writes", start = "starts", ["end"] = "ends" })[mode]
  io.write(string.format("%s_accepted=%d %s_requests=%d %s_seconds=%.1f\n", key, ok, key, summary.requests, key, seconds))
  io.write(string.format("%s_per_second=%.1f\n", key, ok / seconds))
  io.write(string.format("%s_latency_p50_ms=%.2f %s_latency_p99_ms=%.2f\n", key, latency:percentile(50) / 1000, key, latency:percentile(99) / 1000))
end
