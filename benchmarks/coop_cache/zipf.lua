-- benchmarks/coop_cache/zipf.lua — wrk script of the cooperative-cache benchmark (run.py drives it).
-- Parameters come from the environment (wrk's setup() runs before init(args)):
--   TIERCE_ADDRS  "host:port,host:port"  proxies; wrk thread i talks to proxy ((i-1) mod n)+1
--   TIERCE_MODE   zipf | seq
--     zipf: GET /blob.php?id=R, R drawn from a Zipf law over ranks 1..TIERCE_N with exponent
--           TIERCE_ZIPF_S (P(R = r) proportional to 1/r^s; page id = rank)
--     seq : warm-up; each thread walks all N pages once in its own random order (a permutation
--           drawn from its seed), starting at position TIERCE_SEQ_START (so that successive runs
--           go on where the previous one stopped), GETs only
--   TIERCE_N      pages in the working set (ids 1..N)
--   TIERCE_QUERY  appended to every URL (e.g. "&size=small": blob.php's small page class)
--   TIERCE_SEED   run seed; thread t draws from math.randomseed(TIERCE_SEED * 64 + t): the same
--                 seed gives every configuration the same request streams per proxy
-- At the end it prints one line "TIERCE_RESULT {json}": requests sent, 200s, errors (non-200),
-- responses with "X-Cache: HIT" (mod_cache), responses with an Age header (served from a cache:
-- mod_rcache and mod_cache both add it to what they serve, a response from the app tier has none),
-- response bytes, latency p50/p99 (us), socket errors.

local function env(name, default)
  local v = os.getenv(name)
  if v == nil or v == "" then return default end
  return v
end

local addrs = {}
local threads = {}
local nthreads = 0

function setup(thread)
  if #addrs == 0 then
    for hp in string.gmatch(env("TIERCE_ADDRS", "127.0.0.1:80"), "[^,]+") do
      local host, port = string.match(hp, "^(.-):(%d+)$")
      local a = wrk.lookup(host, port)
      table.insert(addrs, a[1])
    end
  end
  nthreads = nthreads + 1
  thread.addr = addrs[((nthreads - 1) % #addrs) + 1]
  thread:set("tid", nthreads)
  table.insert(threads, thread)
end

local mode, n
local cdf = {}
local order = {}
local pos = 0
local hdrs = {}
local query = ""
-- globals (not local): done() reads them per thread with thread:get()
reads, r_ok, errors, hits_xcache, hits_age = 0, 0, 0, 0, 0

function init(args)
  mode = env("TIERCE_MODE", "zipf")
  query = env("TIERCE_QUERY", "")
  n = tonumber(env("TIERCE_N", "1000"))
  local s = tonumber(env("TIERCE_ZIPF_S", "0.9"))
  math.randomseed(tonumber(env("TIERCE_SEED", "1")) * 64 + (tid or 0))
  if mode == "seq" then
    for i = 1, n do order[i] = i end
    for i = n, 2, -1 do  -- Fisher-Yates
      local j = math.random(1, i)
      order[i], order[j] = order[j], order[i]
    end
    pos = tonumber(env("TIERCE_SEQ_START", "0")) % n
  else
    local total = 0
    for r = 1, n do
      total = total + 1 / (r ^ s)
      cdf[r] = total
    end
    for r = 1, n do cdf[r] = cdf[r] / total end
    cdf[n] = 1.0
  end
end

local function zipf_rank()
  local u = math.random()
  local lo, hi = 1, n
  while lo < hi do  -- first r with cdf[r] >= u
    local mid = math.floor((lo + hi) / 2)
    if cdf[mid] >= u then hi = mid else lo = mid + 1 end
  end
  return lo
end

function request()
  local id
  if mode == "seq" then
    pos = pos + 1
    if pos > n then pos = 1 end
    id = order[pos]
  else
    id = zipf_rank()
  end
  reads = reads + 1
  return wrk.format("GET", "/blob.php?id=" .. id .. query, hdrs)
end

function response(status, headers, body)
  if status ~= 200 then
    errors = errors + 1
    return
  end
  r_ok = r_ok + 1
  local xc = headers["X-Cache"]
  if xc ~= nil and string.sub(xc, 1, 3) == "HIT" then hits_xcache = hits_xcache + 1 end
  if headers["Age"] ~= nil then hits_age = hits_age + 1 end
end

function done(summary, latency, requests)
  local t = { reads = 0, r_ok = 0, errors = 0, hits_xcache = 0, hits_age = 0 }
  for _, th in ipairs(threads) do
    for key, _ in pairs(t) do
      t[key] = t[key] + (tonumber(th:get(key)) or 0)
    end
  end
  local parts = {}
  for key, v in pairs(t) do table.insert(parts, string.format('"%s": %d', key, v)) end
  table.insert(parts, string.format('"duration_us": %d', summary.duration))
  table.insert(parts, string.format('"requests": %d', summary.requests))
  table.insert(parts, string.format('"bytes": %d', summary.bytes))
  table.insert(parts, string.format('"p50_us": %d', latency:percentile(50)))
  table.insert(parts, string.format('"p99_us": %d', latency:percentile(99)))
  local e = summary.errors
  table.insert(parts, string.format('"sock_errors": %d', e.connect + e.read + e.write + e.timeout))
  io.write("TIERCE_RESULT {" .. table.concat(parts, ", ") .. "}\n")
end
